/* The CUDA forward pass: the same steps as src/cpu/forward.c, on the device.
 *
 * Weights are uploaded once (repacked, still quantised), the KV cache is f16
 * on the device, and every op runs there. A decode step (one token) is one
 * function, run():
 *   embed -> [per layer: QKV matvec (RMSNorm fused in), q/k norm + RoPE + KV
 *   store, split-K attention, o_proj (residual add fused in, or sandwich
 *   post-norm + add), gate/up matvec (norm and activation fused), down
 *   (residual fused, or post-norm + add)] -> LM head (final norm fused, and
 *   the argmax when sampling greedily).
 * It is captured as a CUDA graph per output mode and class of context (the
 * decode attention's number of key slices, a power of two that grows with
 * the context: a handful of graphs over a long generation) and replayed for
 * each token; the token and the position travel through device memory, so
 * a graph never changes. Prefill (n > 1) dequantises each weight matrix to
 * f16 and multiplies with cuBLAS (tensor cores, f32 accumulation).
 *
 * Tracing and profiling run the same function eagerly (no graph) with the
 * fused ops split, so every trace point is materialised and copied back,
 * only for the requested points and layers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "kernels.cuh"

extern "C" {
#include "../prof.h"
#include "../sampler.h"
#include "../session.h"
#include "../trace.h"
}

namespace {

enum { OUT_LOGITS = 0, OUT_LOGITS_ALL = 1, OUT_ARGMAX = 2, OUT_SAMPLE = 3, N_OUT = 4 };
enum { N_SLICE_CLASSES = 10 }; /* 0, then 1, 2, 4 .. 256 slices */

struct LayerDev {
    DMat wq, wk, wv, wo, gate, up, down;
    const float *attn_norm, *ffn_norm, *post_attn_norm, *post_ffn_norm, *q_norm, *k_norm, *bq, *bk, *bv;
    const float *inv_freq;
};

struct ProfMark {
    int op, layer;
    uint64_t bytes;
};

/* Device events between ops and what each interval was (prof.h). A decode
 * graph captured with profiling on records its own pool at every replay. */
struct ProfPool {
    cudaEvent_t *ev;
    ProfMark *marks;
    int n, cap;
};

struct CudaState {
    cudaStream_t st;
    cublasHandle_t blas;
    void **allocs;
    int n_allocs, cap_allocs;
    DMat tok_embd, output;
    LayerDev *L;
    float *vecs;
    const float *out_norm;
    __half *kc, *vc;
    float *x, *x2, *xn, *q, *k, *v, *att, *o, *gate, *up, *logits;
    float *qn, *kn; /* q/k after the per-head norm, for tracing */
    __half *x16, *w16;
    size_t w16_elems;
    float *part;
    int *counters;
    int *d_io, *h_io;               /* [0] = pos0, [1..] tokens */
    unsigned long long *d_key, *h_key;
    QXBuf qx;                       /* the gate/up output quantised for the down matvec */
    DpSampleArgs *d_sp, *h_sp;      /* device sampling: settings and the uniform */
    uint32_t *ckey;                 /* its candidates */
    int *cid, *d_tok, *h_tok;
    int logits_pinned;
    float *h_trace;                 /* pinned, n_batch * max dim */
    size_t h_trace_n;
    float *d_probs, *h_probs;
    size_t probs_n;
    int splits, min_keys, splits_prefill;
    /* [out] plain, [N_OUT + out] with profiling events, each once per class
     * of context: + 2 N_OUT log2(slices) (decode attention by k_attn_split) */
    cudaGraphExec_t graph[2 * N_OUT * N_SLICE_CLASSES];
    int counted; /* in dp_cu_sessions */
    /* greedy steps queued ahead (greedy_step): graphs whose input is the
     * previous step's argmax, writing h_key[slot]; an event per slot */
    cudaGraphExec_t chain[2][N_SLICE_CLASSES];
    cudaEvent_t ev_slot[2];
    int ahead, ahead_pos, ahead_tok, ahead_slot; /* the queued step: position, input token, slot */
    int attn_slices; /* this evaluation's decode attention slices (see evaluate) */
    ProfPool pe, pg[N_OUT], *pool;    /* eager, per profiled graph, the one recording */
    char device[256];
};

int track(CudaState *cs, void *p) {
    if (cs->n_allocs == cs->cap_allocs) {
        int cap = cs->cap_allocs ? 2 * cs->cap_allocs : 64;
        void **a = (void **)realloc(cs->allocs, sizeof(void *) * (size_t)cap);
        if (!a) return dp_set_error(DP_ERR_NOMEM, "out of memory");
        cs->allocs = a;
        cs->cap_allocs = cap;
    }
    cs->allocs[cs->n_allocs++] = p;
    return DP_OK;
}

template <typename T> int dev_alloc(CudaState *cs, T **p, size_t n) {
    void *d = NULL;
    size_t bytes = n * sizeof(T);
    if (bytes == 0) bytes = 16;
    cudaError_t e = cudaMalloc(&d, bytes);
    if (e != cudaSuccess)
        return dp_set_error(DP_ERR_BACKEND, "CUDA: cannot allocate %zu bytes of device memory: %s", bytes,
                            cudaGetErrorString(e));
    *p = (T *)d;
    return track(cs, d);
}

/* ------------------------------------------------------------- upload */

struct Uploaded {
    const void *host;
    DMat dev;
};

int upload(CudaState *cs, const dp_weight *w, DMat *out, Uploaded *seen, int *n_seen) {
    for (int i = 0; i < *n_seen; i++)
        if (seen[i].host == w->data) {
            *out = seen[i].dev;
            return DP_OK;
        }
    void *alloc = NULL;
    int rc = dp_cu_upload_matrix(w->data, w->type, (int)w->rows, (int)w->cols, out, &alloc);
    if (rc) return rc;
    seen[*n_seen].host = w->data;
    seen[*n_seen].dev = *out;
    (*n_seen)++;
    return track(cs, alloc);
}

/* As src/cpu/forward.c computes them: 1 / theta^(2i/d), float32. */
void inv_freqs(float *dst, int n_rot, float theta, float freq_scale, const dp_weight *rope_freqs) {
    const float *rf = rope_freqs && rope_freqs->data ? (const float *)rope_freqs->data : NULL;
    for (int i = 0; i < n_rot / 2; i++) {
        float f = 1.0f / powf(theta, (float)(2 * i) / (float)n_rot);
        if (rf) f /= rf[i];
        dst[i] = f * freq_scale;
    }
}

int check_shapes(const dp_model *m) {
    const dp_hparams *hp = &m->hp;
    if (hp->head_dim % 8 || hp->head_dim > 256)
        return dp_set_error(DP_ERR_BACKEND, "CUDA backend: head dimension %d is not supported (multiples of 8 up to "
                                            "256)", hp->head_dim);
    int G = hp->n_head / hp->n_head_kv;
    if (G * hp->head_dim / 8 > 256)
        return dp_set_error(DP_ERR_BACKEND, "CUDA backend: %d query heads per KV head are not supported", G);
    int dims[3] = {hp->n_embd, hp->n_head * hp->head_dim, hp->n_ff};
    for (int i = 0; i < 3; i++)
        if (dims[i] % 32)
            return dp_set_error(DP_ERR_BACKEND, "CUDA backend: dimension %d is not a multiple of 32", dims[i]);
    return DP_OK;
}

void cuda_free(dp_session *s);

int cuda_init(dp_session *s) {
    const dp_model *m = s->m;
    const dp_hparams *hp = &m->hp;
    int rc = check_shapes(m);
    if (rc) return rc;
    CudaState *cs = (CudaState *)calloc(1, sizeof *cs);
    if (!cs) return dp_set_error(DP_ERR_NOMEM, "out of memory");
    s->be_state = cs;
    int dev = 0;
    CU_TRY(cudaGetDevice(&dev));
    cudaDeviceProp prop;
    CU_TRY(cudaGetDeviceProperties(&prop, dev));
    snprintf(cs->device, sizeof cs->device, "%s", prop.name);
    CU_TRY(cudaStreamCreateWithFlags(&cs->st, cudaStreamNonBlocking));
    dp_cu_sessions(+1), cs->counted = 1; /* k_attn_gqa's slices wait for each other only in a lone session */
    cs->blas = dp_cu_blas_create(); /* NULL: prefill runs one matvec per position */

    const int E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv, F = hp->n_ff;
    const int Q = NH * HD, KV = NKV * HD, V = hp->n_vocab, NL = hp->n_layer;
    const size_t B = (size_t)s->n_batch, C = (size_t)s->n_ctx;

    /* weights */
    int max_w = 3 + 7 * NL;
    Uploaded *seen = (Uploaded *)calloc((size_t)max_w, sizeof(Uploaded));
    cs->L = (LayerDev *)calloc((size_t)NL, sizeof(LayerDev));
    if (!seen || !cs->L) {
        free(seen);
        return dp_set_error(DP_ERR_NOMEM, "out of memory");
    }
    int n_seen = 0;
    rc = upload(cs, &m->tok_embd, &cs->tok_embd, seen, &n_seen);
    if (!rc) rc = upload(cs, &m->output, &cs->output, seen, &n_seen);
    size_t w16_max = 0;
    for (int l = 0; l < NL && !rc; l++) {
        const dp_layer_weights *W = &m->layers[l];
        LayerDev *D = &cs->L[l];
        const dp_weight *ws[7] = {&W->wq, &W->wk, &W->wv, &W->wo, &W->gate, &W->up, &W->down};
        DMat *ds[7] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->gate, &D->up, &D->down};
        for (int i = 0; i < 7 && !rc; i++) {
            rc = upload(cs, ws[i], ds[i], seen, &n_seen);
            size_t el = (size_t)ws[i]->rows * (size_t)ws[i]->cols;
            if (el > w16_max) w16_max = el;
        }
    }
    free(seen);
    if (rc) return rc;

    /* vectors (norms, biases, RoPE frequencies) as float32, one buffer */
    size_t nv = (size_t)E + (size_t)NL * (4 * (size_t)E + 2 * (size_t)HD + (size_t)Q + 2 * (size_t)KV) + (size_t)hp->n_rot;
    float *hv = (float *)calloc(nv, sizeof(float));
    if (!hv) return dp_set_error(DP_ERR_NOMEM, "out of memory");
    rc = dev_alloc(cs, &cs->vecs, nv);
    if (rc) {
        free(hv);
        return rc;
    }
    size_t off = 0;
    auto load = [&](const dp_weight *w) -> const float * {
        if (!w->data) return NULL;
        dp_dequantize_row(w->type, w->data, hv + off, w->cols);
        const float *p = cs->vecs + off;
        off += (size_t)w->cols;
        return p;
    };
    cs->out_norm = load(&m->output_norm);
    for (int l = 0; l < NL; l++) {
        const dp_layer_weights *W = &m->layers[l];
        LayerDev *D = &cs->L[l];
        D->attn_norm = load(&W->attn_norm);
        D->ffn_norm = load(&W->ffn_norm);
        D->post_attn_norm = load(&W->post_attn_norm);
        D->post_ffn_norm = load(&W->post_ffn_norm);
        D->q_norm = load(&W->q_norm);
        D->k_norm = load(&W->k_norm);
        if (W->bq.data) {
            D->bq = load(&W->bq);
            D->bk = load(&W->bk);
            D->bv = load(&W->bv);
        }
    }
    /* RoPE: global layers and sliding layers may differ (as on the CPU) */
    float theta_local = hp->rope_theta;
    for (int l = 0; l < NL; l++)
        if (hp->layers[l].sliding) theta_local = hp->layers[l].rope_theta;
    const float *f_global = cs->vecs + off, *f_local = cs->vecs + off + hp->n_rot / 2;
    inv_freqs(hv + off, hp->n_rot, hp->rope_theta, hp->rope_freq_scale, &m->rope_freqs);
    inv_freqs(hv + off + hp->n_rot / 2, hp->n_rot, theta_local, 1.0f, &m->rope_freqs);
    off += (size_t)hp->n_rot;
    for (int l = 0; l < NL; l++) cs->L[l].inv_freq = hp->layers[l].sliding ? f_local : f_global;
    cudaError_t e = cudaMemcpy(cs->vecs, hv, off * sizeof(float), cudaMemcpyHostToDevice);
    free(hv);
    if (e != cudaSuccess) return dp_set_error(DP_ERR_BACKEND, "CUDA: upload failed: %s", cudaGetErrorString(e));

    /* KV cache and activations */
    size_t maxd = (size_t)(E > Q ? E : Q);
    if ((size_t)F > maxd) maxd = (size_t)F;
    size_t logit_rows = s->logits_all ? B : 1;
    dp_cu_pdl = env_int("DOPPLER_CUDA_PDL", 1, 0, 1);
    /* key slices of decode attention: up to 256 with the cluster kernel (256
     * measured best at depth 4096: Qwen2.5-3B shape 435 vs 407 tok/s with
     * 64), 64 with k_attention (DOPPLER_CUDA_ATTN_DEC=0) */
    const int max_splits = dp_cu_attention_fuses_rope() ? 256 : 64;
    cs->splits = env_int("DOPPLER_CUDA_SPLITS", max_splits, 1, max_splits);
    cs->min_keys = env_int("DOPPLER_CUDA_SPLIT_KEYS", 64, 1, 1 << 20);
    cs->splits_prefill = cs->splits < 8 ? cs->splits : 8;
    size_t part_n = B * (size_t)NH * (size_t)cs->splits_prefill;
    if ((size_t)NH * (size_t)cs->splits > part_n) part_n = (size_t)NH * (size_t)cs->splits;
    part_n *= (size_t)(HD + 2);
    cs->w16_elems = w16_max;
    size_t lm = (size_t)V * (size_t)E;
    if (s->logits_all && B > 1) cs->w16_elems = w16_max > lm ? w16_max : (lm < (size_t)64 << 20 ? lm : (size_t)64 << 20);
    if (cs->w16_elems < (size_t)E * 32) cs->w16_elems = (size_t)E * 32;
    /* attention combine counters: per (query, KV head) for k_attention and
     * k_attn_dec, per query head for k_attn_split */
    const size_t n_counters = B * NKV > (size_t)NH ? B * NKV : (size_t)NH;
    if ((rc = dev_alloc(cs, &cs->kc, (size_t)NL * C * KV)) || (rc = dev_alloc(cs, &cs->vc, (size_t)NL * C * KV)) ||
        (rc = dev_alloc(cs, &cs->x, B * E)) || (rc = dev_alloc(cs, &cs->x2, E)) || (rc = dev_alloc(cs, &cs->xn, B * E)) ||
        (rc = dev_alloc(cs, &cs->q, B * Q)) || (rc = dev_alloc(cs, &cs->k, B * KV)) ||
        (rc = dev_alloc(cs, &cs->v, B * KV)) || (rc = dev_alloc(cs, &cs->att, B * Q)) ||
        (rc = dev_alloc(cs, &cs->o, B * E)) || (rc = dev_alloc(cs, &cs->gate, B * F)) ||
        (rc = dev_alloc(cs, &cs->up, B * F)) || (rc = dev_alloc(cs, &cs->logits, logit_rows * V)) ||
        (rc = dev_alloc(cs, &cs->qn, B * Q)) || (rc = dev_alloc(cs, &cs->kn, B * KV)) ||
        (rc = dev_alloc(cs, &cs->x16, B * maxd)) || (rc = dev_alloc(cs, &cs->w16, cs->w16_elems)) ||
        (rc = dev_alloc(cs, &cs->part, part_n)) || (rc = dev_alloc(cs, &cs->counters, n_counters)) ||
        (rc = dev_alloc(cs, &cs->d_io, B + 1)) || (rc = dev_alloc(cs, &cs->d_key, 1)) ||
        (rc = dev_alloc(cs, &cs->qx.piece, (size_t)F / 4)) || (rc = dev_alloc(cs, &cs->qx.dx, (size_t)F / 32)) ||
        (rc = dev_alloc(cs, &cs->qx.isum, (size_t)F / 16)) || (rc = dev_alloc(cs, &cs->d_sp, 1)) ||
        (rc = dev_alloc(cs, &cs->ckey, (size_t)dp_cu_sample_blocks(V) * DP_SAMPLE_KMAX)) ||
        (rc = dev_alloc(cs, &cs->cid, (size_t)dp_cu_sample_blocks(V) * DP_SAMPLE_KMAX)) ||
        (rc = dev_alloc(cs, &cs->d_tok, 1)))
        return rc;
    CU_TRY(cudaHostAlloc((void **)&cs->h_sp, sizeof(DpSampleArgs), cudaHostAllocDefault));
    CU_TRY(cudaHostAlloc((void **)&cs->h_tok, sizeof(int), cudaHostAllocDefault));
    CU_TRY(cudaMemset(cs->counters, 0, n_counters * sizeof(int)));
    CU_TRY(cudaHostAlloc((void **)&cs->h_io, (B + 1) * sizeof(int), cudaHostAllocDefault));
    CU_TRY(cudaHostAlloc((void **)&cs->h_key, 2 * sizeof(unsigned long long), cudaHostAllocDefault));
    for (int i = 0; i < 2; i++) CU_TRY(cudaEventCreateWithFlags(&cs->ev_slot[i], cudaEventDisableTiming));
    cs->logits_pinned = cudaHostRegister(s->logits, logit_rows * (size_t)V * sizeof(float), 0) == cudaSuccess;
    if (!cs->logits_pinned) cudaGetLastError();
    size_t smem = dp_cu_matvec_smem((int)maxd);
    if ((rc = dp_cu_attention_init(HD, NH, NKV))) return rc;
    return dp_cu_matvec_init(smem);
}

void cuda_free(dp_session *s) {
    CudaState *cs = (CudaState *)s->be_state;
    if (!cs) return;
    if (cs->st) cudaStreamSynchronize(cs->st);
    for (int i = 0; i < 2 * N_OUT * N_SLICE_CLASSES; i++)
        if (cs->graph[i]) cudaGraphExecDestroy(cs->graph[i]);
    for (int i = 0; i < 2; i++) {
        for (int c = 0; c < N_SLICE_CLASSES; c++)
            if (cs->chain[i][c]) cudaGraphExecDestroy(cs->chain[i][c]);
        if (cs->ev_slot[i]) cudaEventDestroy(cs->ev_slot[i]);
    }
    for (int i = 0; i < cs->n_allocs; i++) cudaFree(cs->allocs[i]);
    for (int p = 0; p <= N_OUT; p++) {
        ProfPool *pp = p < N_OUT ? &cs->pg[p] : &cs->pe;
        for (int i = 0; i < pp->cap; i++) cudaEventDestroy(pp->ev[i]);
        free(pp->ev);
        free(pp->marks);
    }
    if (cs->logits_pinned) cudaHostUnregister(s->logits);
    if (cs->h_io) cudaFreeHost(cs->h_io);
    if (cs->h_key) cudaFreeHost(cs->h_key);
    if (cs->h_sp) cudaFreeHost(cs->h_sp);
    if (cs->h_tok) cudaFreeHost(cs->h_tok);
    if (cs->h_trace) cudaFreeHost(cs->h_trace);
    if (cs->h_probs) cudaFreeHost(cs->h_probs);
    if (cs->d_probs) cudaFree(cs->d_probs);
    dp_cu_blas_destroy(cs->blas);
    if (cs->st) cudaStreamDestroy(cs->st);
    if (cs->counted) dp_cu_sessions(-1);
    free(cs->allocs);
    free(cs->L);
    free(cs);
    s->be_state = NULL;
}

/* ------------------------------------------------------------ helpers */

/* Profiling: an event after each op; the time between consecutive events
 * goes to that op (prof.h categories). */
int prof_mark(dp_session *s, int op, int layer, uint64_t bytes) {
    CudaState *cs = (CudaState *)s->be_state;
    if (!s->prof) return DP_OK;
    ProfPool *pp = cs->pool;
    if (pp->n == pp->cap) {
        int cap = pp->cap ? 2 * pp->cap : 512;
        cudaEvent_t *ev = (cudaEvent_t *)realloc(pp->ev, sizeof(cudaEvent_t) * (size_t)cap);
        if (!ev) return dp_set_error(DP_ERR_NOMEM, "out of memory");
        pp->ev = ev;
        ProfMark *mk = (ProfMark *)realloc(pp->marks, sizeof(ProfMark) * (size_t)cap);
        if (!mk) return dp_set_error(DP_ERR_NOMEM, "out of memory");
        pp->marks = mk;
        for (int i = pp->cap; i < cap; i++) CU_TRY(cudaEventCreate(&pp->ev[i]));
        pp->cap = cap;
    }
    pp->marks[pp->n] = {op, layer, bytes};
    /* inside a stream capture the event must be external to become an
     * event-record node of the graph; outside one the flag is refused */
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    CU_TRY(cudaStreamIsCapturing(cs->st, &cap));
    CU_TRY(cudaEventRecordWithFlags(pp->ev[pp->n], cs->st,
                                    cap == cudaStreamCaptureStatusActive ? cudaEventRecordExternal : 0));
    pp->n++;
    return DP_OK;
}

int prof_collect(dp_session *s, ProfPool *pp) {
    if (!s->prof || pp->n < 2) return DP_OK;
    CU_TRY(cudaEventSynchronize(pp->ev[pp->n - 1]));
    for (int i = 1; i < pp->n; i++) {
        float ms = 0;
        CU_TRY(cudaEventElapsedTime(&ms, pp->ev[i - 1], pp->ev[i]));
        dp_prof_add(s, pp->marks[i].op, pp->marks[i].layer, ms, pp->marks[i].bytes);
    }
    return DP_OK;
}

/* Copies a device trace point back (n rows of dim) and hands it over. */
int trace_dev(dp_session *s, int point, int layer, const float *d, int pos0, int n, int dim) {
    if (!dp_trace_on(s, point, layer)) return DP_OK;
    CudaState *cs = (CudaState *)s->be_state;
    size_t need = (size_t)n * (size_t)dim;
    if (need > cs->h_trace_n) {
        if (cs->h_trace) cudaFreeHost(cs->h_trace);
        cs->h_trace = NULL;
        CU_TRY(cudaHostAlloc((void **)&cs->h_trace, need * sizeof(float), cudaHostAllocDefault));
        cs->h_trace_n = need;
    }
    CU_TRY(cudaMemcpyAsync(cs->h_trace, d, need * sizeof(float), cudaMemcpyDeviceToHost, cs->st));
    CU_TRY(cudaStreamSynchronize(cs->st));
    dp_trace_emit(s, point, layer, pos0, n, dim, cs->h_trace);
    return DP_OK;
}

#define TRY(x)                  \
    do {                        \
        int rc_ = (x);          \
        if (rc_) return rc_;    \
    } while (0)
#define TR(point, layer, ptr, dim) TRY(trace_dev(s, point, layer, ptr, pos0, n, dim))
#define PROF(op, layer, bytes) TRY(prof_mark(s, op, layer, bytes))

/* y = W x for one position (matvec) or n positions (GEMM on x16, which must
 * hold x as f16); accumulate adds into y. */
int matmul(CudaState *cs, const DMat &W, const float *x, const __half *x16, int n, float *y, int accumulate,
           const float *bias, int rows_per_group = 0, const QXBuf *xq = NULL) {
    if (n == 1) {
        MvLaunch L;
        memset(&L, 0, sizeof L);
        L.job[0] = {W, y, accumulate ? NULL : bias};
        L.njobs = 1;
        L.x = x;
        L.cols = W.cols;
        L.mode = accumulate ? MV_ADD : MV_STORE;
        L.rows_per_group = rows_per_group;
        if (xq) L.xq_in = *xq;
        return dp_cu_matvec(&L, cs->st);
    }
    if (!cs->blas) { /* no cuBLAS: one matvec per position (x holds the f32 rows) */
        for (int t = 0; t < n; t++)
            TRY(matmul(cs, W, x + (size_t)t * W.cols, NULL, 1, y + (size_t)t * W.rows, accumulate, bias));
        return DP_OK;
    }
    TRY(dp_cu_gemm(cs->blas, &W, x16, n, y, W.rows, accumulate ? 1.0f : 0.0f, cs->w16, cs->w16_elems, cs->st));
    if (bias) TRY(dp_cu_add_bias(y, bias, n, W.rows, cs->st));
    return DP_OK;
}

/* DOPPLER_CUDA_SKIP (measurement only, the output is meaningless): decode
 * launches left out of the fused step, so that a bench run shows what each
 * costs in the graph; a comma-separated list of qkv, attn, o, gu, down. */
enum { SKIP_QKV = 1, SKIP_ATTN = 2, SKIP_O = 4, SKIP_GU = 8, SKIP_DOWN = 16 };
int skip_mask(void) {
    static int mask = -1;
    if (mask >= 0) return mask;
    mask = 0;
    const char *e = getenv("DOPPLER_CUDA_SKIP");
    if (!e || !*e) return mask;
    static const char *names[] = {"qkv", "attn", "o", "gu", "down"};
    char buf[128], *save = NULL;
    snprintf(buf, sizeof buf, "%s", e);
    for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        const int n_names = (int)(sizeof names / sizeof names[0]);
        int i = 0;
        while (i < n_names && strcmp(t, names[i])) i++;
        if (i < n_names) mask |= 1 << i;
        else fprintf(stderr, "doppler: DOPPLER_CUDA_SKIP: unknown launch '%s' (qkv, attn, o, gu, down), ignored\n", t);
    }
    fprintf(stderr, "doppler: DOPPLER_CUDA_SKIP=%s: decode launches left out, the output is meaningless\n", e);
    return mask;
}

/* The forward pass for n positions at pos0 (read from d_io on the device).
 * Queues the work on the stream; the logits end in cs->logits (last row,
 * or all rows for OUT_LOGITS_ALL) and the greedy token in *d_key. */
int run(dp_session *s, int n, int pos0, int out) {
    const dp_model *m = s->m;
    const dp_hparams *hp = &m->hp;
    const dp_recipe *r = &m->recipe;
    CudaState *cs = (CudaState *)s->be_state;
    cudaStream_t st = cs->st;
    const int E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const int Q = NH * HD, KV = NKV * HD, F = hp->n_ff, V = hp->n_vocab;
    const size_t C = (size_t)s->n_ctx;
    const int tracing = s->trace_fn != NULL;
    const int fuse = !tracing;                 /* residual adds into the producing op */
    const int fuse_norm = fuse && n == 1;      /* RMSNorm into the matvec prologue */
    const int fuse_rope = fuse_norm && dp_cu_attention_fuses_rope(); /* q/k norm + RoPE + KV store into attention */
    const int skip = fuse_norm ? skip_mask() : 0;
    __half *x16 = n > 1 ? cs->x16 : NULL;
    const int need_f32 = tracing || n == 1 || !cs->blas; /* normed rows as f32 too */
    const int *d_pos = cs->d_io, *d_tok = cs->d_io + 1;
    if (s->prof) {
        cs->pool->n = 0;
        PROF(PROF_OTHER, -1, 0);
    }

    /* 1. embedding lookup and scale */
    if (tracing && dp_trace_on(s, DP_TP_EMBED, -1)) {
        TRY(dp_cu_embed(&cs->tok_embd, d_tok, n, 1.0f, cs->x, cs->d_key, st));
        TR(DP_TP_EMBED, -1, cs->x, E);
        if (hp->embed_scale != 1.0f) {
            TRY(dp_cu_embed(&cs->tok_embd, d_tok, n, hp->embed_scale, cs->x, cs->d_key, st));
        }
    } else {
        TRY(dp_cu_embed(&cs->tok_embd, d_tok, n, hp->embed_scale, cs->x, cs->d_key, st));
    }
    TR(DP_TP_EMBED_SCALED, -1, cs->x, E);
    PROF(PROF_EMBED, -1, (uint64_t)n * m->tok_embd.row_bytes);

    /* The residual stream: cs->x, except in a fused decode step of a model
     * with sandwich norms, where each post-norm + residual add happens in the
     * prologue of the next matvec, which writes the sum to the other buffer
     * (pend_w: the post-norm weight still to apply to cs->o). */
    float *xr = cs->x, *xalt = cs->x2;
    const float *pend_w = NULL;
    const int fuse_post = fuse_norm && r->post_norms;
    auto take_pending = [&](MvLaunch *L) {
        L->res_o = cs->o;
        L->res_w = pend_w;
        L->x_out = xalt;
        float *t = xr;
        xr = xalt;
        xalt = t;
        pend_w = NULL;
    };

    for (int l = 0; l < hp->n_layer; l++) {
        const dp_layer_weights *W = &m->layers[l];
        const LayerDev *D = &cs->L[l];
        const dp_layer_cfg *lc = &hp->layers[l];
        __half *kc = cs->kc + (size_t)l * C * KV, *vc = cs->vc + (size_t)l * C * KV;

        /* 2. attention block; Q, K and V in one decode launch from x */
        auto qkv_launch = [&](const float *x) {
            MvLaunch L;
            memset(&L, 0, sizeof L);
            L.job[0] = {D->wq, cs->q, D->bq};
            L.job[1] = {D->wk, cs->k, D->bk};
            L.job[2] = {D->wv, cs->v, D->bv};
            L.njobs = 3;
            L.x = x;
            L.cols = E;
            L.mode = MV_STORE;
            return L;
        };
        if (fuse_norm) {
            MvLaunch L = qkv_launch(xr);
            L.norm_w = D->attn_norm;
            if (pend_w) take_pending(&L);
            L.norm_off = r->norm_offset;
            L.eps = hp->eps;
            if (!(skip & SKIP_QKV)) TRY(dp_cu_matvec(&L, st));
        } else {
            TRY(dp_cu_rmsnorm(need_f32 ? cs->xn : NULL, x16, xr, D->attn_norm, r->norm_offset, n, E,
                              hp->eps, st));
            TR(DP_TP_ATTN_NORM, l, cs->xn, E);
            PROF(PROF_RMSNORM, l, 0);
            if (n == 1) { /* one launch, as in the fused path: k_matvec_t plans per launch */
                const MvLaunch L = qkv_launch(cs->xn);
                TRY(dp_cu_matvec(&L, st));
            } else {
                TRY(matmul(cs, D->wq, cs->xn, x16, n, cs->q, 0, D->bq));
                TRY(matmul(cs, D->wk, cs->xn, x16, n, cs->k, 0, D->bk));
                TRY(matmul(cs, D->wv, cs->xn, x16, n, cs->v, 0, D->bv));
            }
        }
        PROF(PROF_MATMUL_QKV, l, W->wq.nbytes + W->wk.nbytes + W->wv.nbytes);
        TR(DP_TP_Q, l, cs->q, Q);
        TR(DP_TP_K, l, cs->k, KV);
        TR(DP_TP_V, l, cs->v, KV);

        if (!fuse_rope) {
            RopeLaunch R;
            memset(&R, 0, sizeof R);
            R.q = cs->q, R.k = cs->k, R.v = cs->v, R.kc = kc, R.vc = vc, R.pos0 = d_pos;
            R.n = n, R.n_head = NH, R.n_head_kv = NKV, R.head_dim = HD, R.n_rot = hp->n_rot;
            R.neox = r->rope_style == DP_ROPE_NEOX;
            if (r->qk_norm) {
                R.q_norm = D->q_norm, R.k_norm = D->k_norm;
                R.norm_off = r->qk_norm_offset + r->norm_offset;
                if (dp_trace_on(s, DP_TP_Q_NORMED, l) || dp_trace_on(s, DP_TP_K_NORMED, l)) R.q_normed = cs->qn, R.k_normed = cs->kn;
            }
            R.eps = hp->eps;
            R.inv_freq = D->inv_freq;
            TRY(dp_cu_qk_rope_store(&R, st));
            if (r->qk_norm) {
                TR(DP_TP_Q_NORMED, l, cs->qn, Q);
                TR(DP_TP_K_NORMED, l, cs->kn, KV);
            }
            TR(DP_TP_Q_ROPE, l, cs->q, Q);
            TR(DP_TP_K_ROPE, l, cs->k, KV);
            PROF(PROF_ROPE, l, 0);
        }

        AttnLaunch A;
        memset(&A, 0, sizeof A);
        A.q = cs->q, A.out = cs->att, A.k = kc, A.v = vc, A.pos0 = d_pos;
        A.n = n, A.n_head = NH, A.n_head_kv = NKV, A.head_dim = HD;
        A.window = lc->window, A.scale = hp->attn_scale;
        A.exclude_self = n == 1 && (m->faults & DP_FAULT_DECODE_MASK_OFF_BY_ONE);
        A.splits = n == 1 ? cs->splits : cs->splits_prefill;
        A.min_keys = cs->min_keys;
        A.part = cs->part, A.counters = cs->counters;
        A.slices = cs->attn_slices;
        if (fuse_rope) { /* q/k norm, RoPE and the K/V store inside the attention kernel */
            A.rope = 1;
            A.kf = cs->k, A.vf = cs->v;
            if (r->qk_norm) A.q_norm = D->q_norm, A.k_norm = D->k_norm;
            A.norm_off = r->qk_norm_offset + r->norm_offset;
            A.eps = hp->eps;
            A.inv_freq = D->inv_freq;
            A.n_rot = hp->n_rot;
            A.neox = r->rope_style == DP_ROPE_NEOX;
        }
        if (!(skip & SKIP_ATTN)) TRY(dp_cu_attention(&A, st));
        PROF(PROF_ATTENTION, l, 0);
        if (tracing && dp_trace_on(s, DP_TP_ATTN_SCORES, l)) {
            int n_kv = pos0 + n;
            size_t need = (size_t)n * NH * n_kv;
            if (need > cs->probs_n) {
                if (cs->d_probs) cudaFree(cs->d_probs);
                if (cs->h_probs) cudaFreeHost(cs->h_probs);
                cs->d_probs = NULL, cs->h_probs = NULL, cs->probs_n = 0;
                CU_TRY(cudaMalloc((void **)&cs->d_probs, need * sizeof(float)));
                CU_TRY(cudaHostAlloc((void **)&cs->h_probs, need * sizeof(float), cudaHostAllocDefault));
                cs->probs_n = need;
            }
            TRY(dp_cu_attention_probs(&A, cs->d_probs, n_kv, st));
            CU_TRY(cudaMemcpyAsync(cs->h_probs, cs->d_probs, need * sizeof(float), cudaMemcpyDeviceToHost, st));
            CU_TRY(cudaStreamSynchronize(st));
            dp_trace_emit(s, DP_TP_ATTN_SCORES, l, pos0, n, NH * n_kv, cs->h_probs);
        }
        TR(DP_TP_ATTN_OUT, l, cs->att, Q);
        if (x16) TRY(dp_cu_to_f16(x16, cs->att, (long long)n * Q, st));
        if (r->post_norms) {
            if (!(skip & SKIP_O)) TRY(matmul(cs, D->wo, cs->att, x16, n, cs->o, 0, NULL));
            TR(DP_TP_O_PROJ, l, cs->o, E);
            PROF(PROF_MATMUL_O, l, W->wo.nbytes);
            if (fuse_post) {
                pend_w = D->post_attn_norm; /* into the gate/up prologue */
            } else {
                int tr = dp_trace_on(s, DP_TP_POST_ATTN_NORM, l);
                TRY(dp_cu_postnorm_add(xr, cs->o, tr ? cs->o : NULL, D->post_attn_norm, r->norm_offset, n, E,
                                       hp->eps, st));
                TR(DP_TP_POST_ATTN_NORM, l, cs->o, E);
                PROF(PROF_RMSNORM, l, 0);
            }
        } else if (fuse) {
            if (!(skip & SKIP_O)) TRY(matmul(cs, D->wo, cs->att, x16, n, xr, 1, NULL));
            PROF(PROF_MATMUL_O, l, W->wo.nbytes);
        } else {
            TRY(matmul(cs, D->wo, cs->att, x16, n, cs->o, 0, NULL));
            TR(DP_TP_O_PROJ, l, cs->o, E);
            PROF(PROF_MATMUL_O, l, W->wo.nbytes);
            TRY(dp_cu_add(xr, cs->o, (long long)n * E, st));
            PROF(PROF_ADD, l, 0);
        }
        TR(DP_TP_RESID_ATTN, l, xr, E);

        /* 3. gated feed-forward block (use_qx: the gate/up launch quantises its
         * output for the down matvec) */
        const int use_qx = fuse_norm && dp_cu_matvec_q_ok(D->gate.type) && dp_cu_matvec_q_ok(D->up.type) &&
                           dp_cu_matvec_q_ok(D->down.type) && !dp_cu_matvec_w_on();
        if (fuse_norm) {
            MvLaunch L;
            memset(&L, 0, sizeof L);
            L.job[0] = {D->gate, cs->gate, NULL};
            L.job[1] = {D->up, cs->up, NULL};
            L.njobs = 2;
            L.x = xr;
            L.cols = E;
            L.norm_w = D->ffn_norm;
            if (pend_w) take_pending(&L);
            L.norm_off = r->norm_offset;
            L.eps = hp->eps;
            L.mode = MV_GATEUP;
            L.act = r->act;
            if (use_qx) L.xq_out = cs->qx;
            if (!(skip & SKIP_GU)) TRY(dp_cu_matvec(&L, st));
            PROF(PROF_MATMUL_GATE_UP, l, W->gate.nbytes + W->up.nbytes);
        } else {
            TRY(dp_cu_rmsnorm(need_f32 ? cs->xn : NULL, x16, xr, D->ffn_norm, r->norm_offset, n, E,
                              hp->eps, st));
            TR(DP_TP_FFN_NORM, l, cs->xn, E);
            PROF(PROF_RMSNORM, l, 0);
            /* rows in groups of 4 as in the fused gate/up launch: the same sums */
            TRY(matmul(cs, D->gate, cs->xn, x16, n, cs->gate, 0, NULL, 4));
            TRY(matmul(cs, D->up, cs->xn, x16, n, cs->up, 0, NULL, 4));
            TR(DP_TP_GATE, l, cs->gate, F);
            TR(DP_TP_UP, l, cs->up, F);
            PROF(PROF_MATMUL_GATE_UP, l, W->gate.nbytes + W->up.nbytes);
            TRY(dp_cu_gated_act(cs->gate, cs->gate, cs->up, (long long)n * F, r->act, st));
            PROF(PROF_ACT, l, 0);
        }
        TR(DP_TP_ACT, l, cs->gate, F);
        if (x16) TRY(dp_cu_to_f16(x16, cs->gate, (long long)n * F, st));
        const QXBuf *dq = use_qx ? &cs->qx : NULL;
        if (r->post_norms) {
            if (!(skip & SKIP_DOWN)) TRY(matmul(cs, D->down, cs->gate, x16, n, cs->o, 0, NULL, 0, dq));
            TR(DP_TP_DOWN, l, cs->o, E);
            PROF(PROF_MATMUL_DOWN, l, W->down.nbytes);
            if (fuse_post) {
                pend_w = D->post_ffn_norm; /* into the next layer's QKV prologue (or the LM head's) */
            } else {
                int tr = dp_trace_on(s, DP_TP_POST_FFN_NORM, l);
                TRY(dp_cu_postnorm_add(xr, cs->o, tr ? cs->o : NULL, D->post_ffn_norm, r->norm_offset, n, E,
                                       hp->eps, st));
                TR(DP_TP_POST_FFN_NORM, l, cs->o, E);
                PROF(PROF_RMSNORM, l, 0);
            }
        } else if (fuse) {
            if (!(skip & SKIP_DOWN)) TRY(matmul(cs, D->down, cs->gate, x16, n, xr, 1, NULL, 0, dq));
            PROF(PROF_MATMUL_DOWN, l, W->down.nbytes);
        } else {
            TRY(matmul(cs, D->down, cs->gate, x16, n, cs->o, 0, NULL));
            TR(DP_TP_DOWN, l, cs->o, E);
            PROF(PROF_MATMUL_DOWN, l, W->down.nbytes);
            TRY(dp_cu_add(xr, cs->o, (long long)n * E, st));
            PROF(PROF_ADD, l, 0);
        }
        TR(DP_TP_RESID_FFN, l, xr, E);
        if (s->trace_stop) return DP_ERR_STOPPED;
    }

    /* 4. final norm and the LM head */
    const int rows_out = out == OUT_LOGITS_ALL ? n : 1;
    unsigned long long *key = out == OUT_ARGMAX ? cs->d_key : NULL;
    if (!tracing && rows_out == 1) {
        MvLaunch L;
        memset(&L, 0, sizeof L);
        L.job[0] = {cs->output, cs->logits, NULL};
        L.njobs = 1;
        L.x = xr + (size_t)(n - 1) * E;
        L.cols = E;
        L.norm_w = cs->out_norm;
        if (pend_w) take_pending(&L);
        L.norm_off = r->norm_offset;
        L.eps = hp->eps;
        L.mode = MV_STORE;
        L.argmax_key = key;
        TRY(dp_cu_matvec(&L, st));
    } else {
        TRY(dp_cu_rmsnorm(cs->xn, rows_out > 1 ? cs->x16 : NULL, xr, cs->out_norm, r->norm_offset, n, E, hp->eps,
                          st));
        TR(DP_TP_FINAL_NORM, -1, cs->xn, E);
        PROF(PROF_RMSNORM, -1, 0);
        if (rows_out == 1) {
            MvLaunch L;
            memset(&L, 0, sizeof L);
            L.job[0] = {cs->output, cs->logits, NULL};
            L.njobs = 1;
            L.x = cs->xn + (size_t)(n - 1) * E;
            L.cols = E;
            L.mode = MV_STORE;
            L.argmax_key = key;
            TRY(dp_cu_matvec(&L, st));
        } else {
            TRY(matmul(cs, cs->output, cs->xn, cs->x16, n, cs->logits, 0, NULL));
        }
    }
    PROF(PROF_LM_HEAD, -1, m->output.nbytes);
    if (out == OUT_SAMPLE) {
        TRY(dp_cu_sample(cs->logits + (size_t)(rows_out - 1) * V, V, cs->d_sp, cs->ckey, cs->cid, cs->d_tok, st));
        PROF(PROF_SAMPLE, -1, 0);
    }
    if (tracing && dp_trace_on(s, DP_TP_LOGITS, -1)) {
        if (rows_out > 1) {
            TR(DP_TP_LOGITS, -1, cs->logits, V);
        } else {
            TRY(trace_dev(s, DP_TP_LOGITS, -1, cs->logits, pos0 + n - 1, 1, V));
        }
    }
    return DP_OK;
}

/* The decode attention's slices for a step at pos0 (a power of two that
 * grows with the context; each count has its own graphs) into
 * cs->attn_slices; returns the graph class. */
int slice_class(dp_session *s, int pos0) {
    CudaState *cs = (CudaState *)s->be_state;
    const dp_hparams *hpe = &s->m->hp;
    int S = dp_cu_attention_slices(pos0 + 1, hpe->n_head, hpe->head_dim), cls = 0;
    if (S > cs->splits) S = 0; /* DOPPLER_CUDA_SPLITS below S: the scratch is too small, k_attn_dec */
    for (int t = S; t > 0; t >>= 1) cls++;
    cs->attn_slices = S;
    return cls;
}

/* Captures the decode step (n = 1) into *ge: the input copy (chain < 0)
 * or the chained input (chain = the h_key slot it writes, OUT_ARGMAX), the
 * kernels, the output copy. */
int capture(dp_session *s, cudaGraphExec_t *ge, int pos0, int out, int chain) {
    CudaState *cs = (CudaState *)s->be_state;
    const size_t V = (size_t)s->m->hp.n_vocab;
    float *dst = s->logits;
    unsigned long long *hk = cs->h_key + (chain > 0 ? chain : 0);
    for (int attempt = 0; !*ge && attempt < 2; attempt++) {
        cudaGraph_t g = NULL;
        CU_TRY(cudaStreamBeginCapture(cs->st, cudaStreamCaptureModeThreadLocal));
        int rc = (chain >= 0 ? dp_cu_chain_input(cs->d_io, cs->d_key, cs->st) == DP_OK
                             : cudaMemcpyAsync(cs->d_io, cs->h_io, 2 * sizeof(int), cudaMemcpyHostToDevice,
                                               cs->st) == cudaSuccess)
                     ? DP_OK
                     : dp_set_error(DP_ERR_BACKEND, "CUDA: capturing the input copy failed");
        if (!rc && out == OUT_SAMPLE &&
            cudaMemcpyAsync(cs->d_sp, cs->h_sp, sizeof *cs->h_sp, cudaMemcpyHostToDevice, cs->st) != cudaSuccess)
            rc = dp_set_error(DP_ERR_BACKEND, "CUDA: capturing the sampler input copy failed");
        if (!rc) rc = run(s, 1, pos0, out);
        if (!rc) {
            cudaError_t e = out == OUT_ARGMAX
                                ? cudaMemcpyAsync(hk, cs->d_key, sizeof *hk, cudaMemcpyDeviceToHost, cs->st)
                                : out == OUT_SAMPLE
                                ? cudaMemcpyAsync(cs->h_tok, cs->d_tok, sizeof *cs->h_tok, cudaMemcpyDeviceToHost, cs->st)
                                : cs->logits_pinned
                                      ? cudaMemcpyAsync(dst, cs->logits, V * sizeof(float), cudaMemcpyDeviceToHost, cs->st)
                                      : cudaSuccess;
            if (e != cudaSuccess) rc = dp_set_error(DP_ERR_BACKEND, "CUDA: capturing the output copy failed");
        }
        cudaError_t e = cudaStreamEndCapture(cs->st, &g);
        if (!rc && e != cudaSuccess)
            rc = dp_set_error(DP_ERR_BACKEND, "CUDA: graph capture failed: %s", cudaGetErrorString(e));
        if (!rc) {
            e = cudaGraphInstantiate(ge, g, 0);
            if (e != cudaSuccess) {
                *ge = NULL;
                rc = dp_set_error(DP_ERR_BACKEND, "CUDA: graph instantiation failed: %s", cudaGetErrorString(e));
            }
        }
        if (g) cudaGraphDestroy(g);
        if (rc) {
            cudaGetLastError();
            if (attempt == 0 && dp_cu_pdl) {
                fprintf(stderr, "doppler: CUDA graph capture with programmatic dependent launch failed (%s); "
                                "continuing without it\n", dp_last_error());
                dp_cu_pdl = 0;
                continue;
            }
            return rc;
        }
    }
    return DP_OK;
}

/* Waits for a greedy step queued ahead (greedy_step) that the caller did not take. */
int settle(CudaState *cs) {
    if (!cs->ahead) return DP_OK;
    cs->ahead = 0;
    CU_TRY(cudaStreamSynchronize(cs->st));
    return DP_OK;
}

/* Runs one evaluation: a replayed graph for plain decode steps, the eager
 * path otherwise; then copies the requested output back. */
int evaluate(dp_session *s, const int32_t *tokens, int n, int pos0, int out) {
    CudaState *cs = (CudaState *)s->be_state;
    TRY(settle(cs));
    const int V = s->m->hp.n_vocab;
    cs->h_io[0] = pos0;
    memcpy(cs->h_io + 1, tokens, sizeof(int32_t) * (size_t)n);
    const size_t nlog = (size_t)(out == OUT_LOGITS_ALL ? n : 1) * (size_t)V;
    float *dst = s->logits;
    const int use_graph = n == 1 && !s->trace_fn && out != OUT_LOGITS_ALL;
    if (n == 1) {
        const int gi = out + (s->prof ? N_OUT : 0) + 2 * N_OUT * slice_class(s, pos0);
        cs->pool = use_graph ? &cs->pg[out] : &cs->pe;
        if (use_graph) {
            TRY(capture(s, &cs->graph[gi], pos0, out, -1));
            CU_TRY(cudaGraphLaunch(cs->graph[gi], cs->st));
        }
    } else {
        cs->attn_slices = 0;
        cs->pool = &cs->pe;
    }
    if (use_graph) {
        if (out != OUT_ARGMAX && out != OUT_SAMPLE && !cs->logits_pinned)
            CU_TRY(cudaMemcpyAsync(dst, cs->logits, nlog * sizeof(float), cudaMemcpyDeviceToHost, cs->st));
    } else {
        CU_TRY(cudaMemcpyAsync(cs->d_io, cs->h_io, (size_t)(n + 1) * sizeof(int), cudaMemcpyHostToDevice, cs->st));
        if (out == OUT_SAMPLE)
            CU_TRY(cudaMemcpyAsync(cs->d_sp, cs->h_sp, sizeof *cs->h_sp, cudaMemcpyHostToDevice, cs->st));
        TRY(run(s, n, pos0, out));
        if (out == OUT_ARGMAX)
            CU_TRY(cudaMemcpyAsync(cs->h_key, cs->d_key, sizeof *cs->h_key, cudaMemcpyDeviceToHost, cs->st));
        else if (out == OUT_SAMPLE)
            CU_TRY(cudaMemcpyAsync(cs->h_tok, cs->d_tok, sizeof *cs->h_tok, cudaMemcpyDeviceToHost, cs->st));
        else
            CU_TRY(cudaMemcpyAsync(dst, cs->logits, nlog * sizeof(float), cudaMemcpyDeviceToHost, cs->st));
    }
    CU_TRY(cudaStreamSynchronize(cs->st));
    TRY(prof_collect(s, cs->pool));
    return DP_OK;
}

int cuda_forward(dp_session *s, const int32_t *tokens, int n, int pos0, int logits_all) {
    return evaluate(s, tokens, n, pos0, logits_all && n > 1 ? OUT_LOGITS_ALL : OUT_LOGITS);
}

/* A greedy decode step. Steps run one graph ahead: once the caller's step
 * is known, the step after it is queued at once with the token the device
 * chose (a kernel copies it and the next position into the graph's input,
 * its output goes to the other h_key slot), so the GPU does not wait for
 * the host between tokens. A call for exactly that step (the token this
 * returned, at the next position) queues the one after and then only waits
 * for it; any other call first waits for it and drops it: it wrote only the
 * K/V row of a position that the caller's own step overwrites.
 * DOPPLER_CUDA_AHEAD=0 turns it off. */
int greedy_step(dp_session *s, int32_t tok, int pos0, int32_t *next) {
    CudaState *cs = (CudaState *)s->be_state;
    static int ahead_on = -1;
    if (ahead_on < 0) ahead_on = env_int("DOPPLER_CUDA_AHEAD", 1, 0, 1);
    /* the next step must fit the context; tracing and profiling run each step on its own */
    const int can = ahead_on && !s->trace_fn && !s->prof && pos0 + 2 <= s->n_ctx;
    if (cs->ahead && (cs->ahead_pos != pos0 || cs->ahead_tok != tok)) TRY(settle(cs));
    int slot;
    if (cs->ahead) { /* the queued step is this one */
        slot = cs->ahead_slot;
        cs->ahead = 0;
    } else {
        TRY(evaluate(s, &tok, 1, pos0, OUT_ARGMAX)); /* slot 0, done */
        *next = key_token(cs->h_key[0]);
        if (!can) return DP_OK;
        slot = -1;
    }
    if (can) { /* queue the step after, behind the one in flight */
        const int ns = slot == 1 ? 0 : 1, cls = slice_class(s, pos0 + 1);
        TRY(capture(s, &cs->chain[ns][cls], pos0 + 1, OUT_ARGMAX, ns));
        CU_TRY(cudaGraphLaunch(cs->chain[ns][cls], cs->st));
        CU_TRY(cudaEventRecord(cs->ev_slot[ns], cs->st));
        cs->ahead = 1, cs->ahead_pos = pos0 + 1, cs->ahead_slot = ns;
    }
    if (slot >= 0) {
        CU_TRY(cudaEventSynchronize(cs->ev_slot[slot]));
        *next = key_token(cs->h_key[slot]);
    }
    if (cs->ahead) cs->ahead_tok = *next;
    return DP_OK;
}

int cuda_eval_sample(dp_session *s, const int32_t *tokens, int n, int pos0, dp_sampler *smp, int32_t *next) {
    CudaState *cs = (CudaState *)s->be_state;
    const dp_sampler_params *p = dp_sampler_params_of(smp);
    /* Greedy without a repetition penalty: the argmax is fused into the LM
     * head and only the token id comes back. Top-k sampling (k up to
     * DP_SAMPLE_KMAX) and greedy with a penalty: on the device (sample.cu)
     * with the uniform drawn here from the sampler's stream. Otherwise the
     * logits come back and the host sampler draws (same code as the CPU
     * backend). */
    const int V = s->m->hp.n_vocab;
    const int32_t *recent = NULL;
    const int n_recent = p->repeat_penalty != 1.0f ? dp_sampler_recent(smp, &recent) : 0;
    static int dev_sample = -1;
    if (dev_sample < 0) dev_sample = env_int("DOPPLER_CUDA_SAMPLE", 1, 0, 1);
    const int k_dev = p->temp <= 0 ? 1 : p->top_k;
    if (dev_sample && !(p->temp <= 0 && p->repeat_penalty == 1.0f) && k_dev >= 1 && k_dev <= DP_SAMPLE_KMAX &&
        k_dev <= V && n_recent <= DP_SAMPLE_MAX_RECENT) {
        DpSampleArgs *a = cs->h_sp;
        a->u = p->temp > 0 ? dp_sampler_uniform(smp) : 0.0;
        a->temp = p->temp, a->top_p = p->top_p, a->min_p = p->min_p, a->penalty = p->repeat_penalty;
        a->top_k = k_dev;
        a->n_recent = 0; /* each distinct token once, as the host sampler penalises */
        for (int i = 0; i < n_recent; i++) {
            int seen = 0;
            for (int j = 0; j < a->n_recent; j++) seen |= a->recent[j] == recent[i];
            if (!seen && recent[i] >= 0 && recent[i] < V) a->recent[a->n_recent++] = recent[i];
        }
        for (int done = 0; done < n;) {
            int k = n - done < s->n_batch ? n - done : s->n_batch;
            TRY(evaluate(s, tokens + done, k, pos0 + done, done + k == n ? OUT_SAMPLE : OUT_LOGITS));
            done += k;
        }
        *next = *cs->h_tok;
        return DP_OK;
    }
    if (p->temp <= 0 && p->repeat_penalty == 1.0f) {
        if (n == 1) return greedy_step(s, tokens[0], pos0, next);
        for (int done = 0; done < n;) {
            int k = n - done < s->n_batch ? n - done : s->n_batch;
            TRY(evaluate(s, tokens + done, k, pos0 + done, done + k == n ? OUT_ARGMAX : OUT_LOGITS));
            done += k;
        }
        *next = key_token(cs->h_key[0]);
        return DP_OK;
    }
    for (int done = 0; done < n;) {
        int k = n - done < s->n_batch ? n - done : s->n_batch;
        TRY(evaluate(s, tokens + done, k, pos0 + done, OUT_LOGITS));
        done += k;
    }
    *next = dp_sampler_sample(smp, s->logits);
    return DP_OK;
}

int cuda_trace_changed(dp_session *s) {
    return settle((CudaState *)s->be_state);
}

int cuda_wait(dp_session *s) { return settle((CudaState *)s->be_state); }

/* --------------------------------------------------------- describe */

typedef CUresult (*AddrRangeFn)(CUdeviceptr *base, size_t *size, CUdeviceptr p);

/* Size of the device allocation holding p, from the driver's
 * cuMemGetAddressRange (reached through the runtime, so nothing links
 * libcuda); 0 when unknown. *base gets the allocation's start. */
size_t alloc_size(AddrRangeFn fn, const void *p, const void **base) {
    CUdeviceptr b = 0;
    size_t n = 0;
    if (!fn || !p || fn(&b, &n, (CUdeviceptr)(uintptr_t)p) != CUDA_SUCCESS) return 0;
    if (base) *base = (const void *)(uintptr_t)b;
    return n;
}

void add_type(int *types, int *n, int t) {
    for (int i = 0; i < *n; i++)
        if (types[i] == t) return;
    types[(*n)++] = t;
}

void type_list(char *dst, size_t cap, const int *types, int n) {
    size_t l = 0;
    dst[0] = 0;
    for (int i = 0; i < n && l < cap; i++) l += (size_t)snprintf(dst + l, cap - l, "%s%s", i ? "," : "", dp_type_name(types[i]));
}

/* The CUDA part of dp_session_describe: the device, the decode kernels the
 * switches of matvec_q.cu and attention.cu select for this model's weight
 * types, and the device memory of every allocation this session made. */
int cuda_describe(const dp_session *s, dp_backend_info *out) {
    const CudaState *cs = (const CudaState *)s->be_state;
    const dp_model *m = s->m;
    const int NL = m->hp.n_layer;
    int dev = 0;
    cudaDeviceProp prop;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaGetDeviceProperties(&prop, dev));
    snprintf(out->device, sizeof out->device, "%s", prop.name);
    out->sm_count = prop.multiProcessorCount;
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->n_threads = 1; /* one host thread drives the stream */
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
        out->dev_free_bytes = fr;
        out->dev_capacity_bytes = tot;
    } else {
        cudaGetLastError();
    }

    /* decode matvec per weight type: the integer path when every matrix of a
     * launch has a type it handles, else the float k_matvec */
    int qt[DP_TYPE_COUNT], ft[DP_TYPE_COUNT], nq = 0, nf = 0;
    auto classify = [&](int t) {
        if (dp_cu_matvec_q_ok(t)) add_type(qt, &nq, t);
        else add_type(ft, &nf, t);
    };
    classify(m->output.type);
    for (int l = 0; l < NL; l++) {
        const dp_layer_weights *W = &m->layers[l];
        const dp_weight *ws[7] = {&W->wq, &W->wk, &W->wv, &W->wo, &W->gate, &W->up, &W->down};
        for (int i = 0; i < 7; i++) classify(ws[i]->type);
    }
    char ql[96], fl[96];
    type_list(ql, sizeof ql, qt, nq);
    type_list(fl, sizeof fl, ft, nf);
    char mv[200];
    const char *qk = dp_cu_matvec_t_ok(DP_TYPE_Q4_K) ? "k_matvec_t (tensor cores) and k_matvec_w"
                     : dp_cu_matvec_w_on() ? "k_matvec_w" : "k_matvec_q";
    if (nq && nf)
        snprintf(mv, sizeof mv, "%s (integer) for %s, k_matvec (float) for %s", qk, ql, fl);
    else if (nq)
        snprintf(mv, sizeof mv, "%s (integer) for %s", qk, ql);
    else
        snprintf(mv, sizeof mv, "k_matvec (float) for %s", fl);
    snprintf(out->kernels, sizeof out->kernels, "matvec %s; attention %s; PDL %s; prefill %s", mv,
             !dp_cu_attention_fuses_rope()                         ? "k_attention"
             : dp_cu_attention_slices(1, m->hp.n_head, m->hp.head_dim) ? "k_attn_split (q/k norm, RoPE, KV store fused; "
                                                                         "key slices by context)"
                                                                       : "k_attn_dec (q/k norm, RoPE, KV store fused)",
             dp_cu_pdl ? "on" : "off", cs->blas ? "cuBLAS f16 GEMM" : "matvec per position (no cuBLAS)");
    snprintf(out->act_path, sizeof out->act_path, "decode: fused into the gate/up matvec; prefill and tracing: "
                                                  "a separate gated-activation kernel");

    /* KV cache as allocated: f16 K and V, [n_layer][n_ctx][kv_dim] each */
    const size_t kvd = (size_t)m->hp.n_head_kv * (size_t)m->hp.head_dim;
    out->kv_bytes = 2 * (uint64_t)NL * (uint64_t)s->n_ctx * kvd * sizeof(__half);

    void *fnp = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    AddrRangeFn fn = NULL;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fnp, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        fn = (AddrRangeFn)fnp;
    else
        cudaGetLastError();
    if (!fn) return DP_OK; /* device memory unknown: left 0 */
    uint64_t total = 0, weights = 0;
    for (int i = 0; i < cs->n_allocs; i++) total += alloc_size(fn, cs->allocs[i], NULL);
    total += alloc_size(fn, cs->d_probs, NULL);
    /* weights: the allocations holding a matrix (tied matrices share one) and the vectors */
    const int nmat = 2 + 7 * NL;
    int nb = 0;
    const void **bases = (const void **)calloc((size_t)nmat, sizeof(void *));
    if (!bases) return dp_set_error(DP_ERR_NOMEM, "out of memory");
    for (int i = 0; i < nmat; i++) {
        const DMat *d = i == 0 ? &cs->tok_embd : i == 1 ? &cs->output : NULL;
        if (!d) {
            const LayerDev *D = &cs->L[(i - 2) / 7];
            const DMat *ld[7] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->gate, &D->up, &D->down};
            d = ld[(i - 2) % 7];
        }
        const void *b = NULL;
        size_t n = alloc_size(fn, d->body, &b);
        int seen = 0;
        for (int j = 0; j < nb && !seen; j++) seen = bases[j] == b;
        if (n && !seen) {
            bases[nb++] = b;
            weights += n;
        }
    }
    free(bases);
    weights += alloc_size(fn, cs->vecs, NULL);
    const uint64_t kv = alloc_size(fn, cs->kc, NULL) + alloc_size(fn, cs->vc, NULL);
    out->dev_weight_bytes = weights;
    out->dev_kv_bytes = kv;
    out->dev_total_bytes = total;
    out->dev_scratch_bytes = total >= weights + kv ? total - weights - kv : 0;
    return DP_OK;
}

} // namespace

extern "C" int dp_cuda_available(void) {
    static int cached = -1;
    if (cached < 0) {
        int n = 0;
        const char *off = getenv("DOPPLER_NO_CUDA");
        cached = !(off && *off && strcmp(off, "0")) && cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
        cudaGetLastError();
    }
    return cached;
}

extern "C" const char *dp_cuda_device_name(void) {
    static char name[256];
    cudaDeviceProp prop;
    if (!dp_cuda_available() || cudaGetDeviceProperties(&prop, 0) != cudaSuccess) return NULL;
    snprintf(name, sizeof name, "%s", prop.name);
    return name;
}

extern "C" const dp_backend_impl dp_backend_cuda = {
    "cuda", cuda_init, cuda_free, cuda_forward, cuda_eval_sample, cuda_trace_changed, 2 /* f16 K/V cache */,
    cuda_describe, cuda_wait,
};
