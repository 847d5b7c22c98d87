/* The CUDA backend's session: device state, the upload of the weights
 * (repacked, still quantised; norms, biases and RoPE frequencies as
 * float32), the f16 KV pages and scratch, dp_session_describe's CUDA part,
 * and the backend table. Evaluation is in decode.cu and batch.cu, the
 * forward pass in forward.cu. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "state.cuh"

namespace {

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

/* Uploads a weight matrix once (tied matrices share the upload). */
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

/* The weight matrices, each uploaded once; *w16_max: the most elements of one. */
int upload_matrices(dp_session *s, CudaState *cs, size_t *w16_max) {
    const dp_model *m = s->m;
    const int NL = m->hp.n_layer;
    Uploaded *seen = (Uploaded *)calloc((size_t)(3 + 7 * NL), sizeof(Uploaded));
    if (!seen) return dp_set_error(DP_ERR_NOMEM, "out of memory");
    int n_seen = 0;
    int rc = upload(cs, &m->tok_embd, &cs->tok_embd, seen, &n_seen);
    if (!rc) rc = upload(cs, &m->output, &cs->output, seen, &n_seen);
    *w16_max = 0;
    for (int l = 0; l < NL && !rc; l++) {
        const dp_layer_weights *W = &m->layers[l];
        LayerDev *D = &cs->L[l];
        const dp_weight *ws[7] = {&W->wq, &W->wk, &W->wv, &W->wo, &W->gate, &W->up, &W->down};
        DMat *ds[7] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->gate, &D->up, &D->down};
        for (int i = 0; i < 7 && !rc; i++) {
            rc = upload(cs, ws[i], ds[i], seen, &n_seen);
            size_t el = (size_t)ws[i]->rows * (size_t)ws[i]->cols;
            if (el > *w16_max) *w16_max = el;
        }
    }
    free(seen);
    return rc;
}

/* Norms, biases and the RoPE frequencies as float32 in one buffer,
 * converted on the host exactly as the CPU backend does. */
int upload_vectors(dp_session *s, CudaState *cs) {
    const dp_model *m = s->m;
    const dp_hparams *hp = &m->hp;
    const size_t E = (size_t)hp->n_embd, HD = (size_t)hp->head_dim, NL = (size_t)hp->n_layer;
    const size_t Q = (size_t)hp->n_head * HD, KV = (size_t)hp->n_head_kv * HD, half = (size_t)hp->n_rot / 2;
    /* RoPE: the tables in use, then every set (LongRoPE: short and long) */
    const size_t n_sets = hp->rope_long_factors ? 2 : 1;
    const size_t nv = E + NL * (4 * E + 2 * HD + Q + 2 * KV) + 2 * half * (1 + n_sets);
    float *hv = (float *)calloc(nv, sizeof(float));
    if (!hv) return dp_set_error(DP_ERR_NOMEM, "out of memory");
    int rc = dev_alloc(cs, &cs->vecs, nv);
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
    for (size_t l = 0; l < NL; l++) {
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
    /* the model's two RoPE tables (global and sliding layers) in use, each
     * layer's pointing into its own; after them every set, which
     * cu_rope_select copies in when the forward calls need another */
    memcpy(hv + off, hp->rope_inv_freq, 2 * half * sizeof(float));
    for (size_t l = 0; l < NL; l++)
        cs->L[l].inv_freq = cs->vecs + off + (size_t)(hp->layers[l].inv_freq - hp->rope_inv_freq);
    cs->rope_active = cs->vecs + off;
    off += 2 * half;
    memcpy(hv + off, hp->rope_inv_freq, 2 * half * n_sets * sizeof(float));
    cs->rope_sets = cs->vecs + off;
    cs->rope_set = 0;
    off += 2 * half * n_sets;
    cudaError_t e = cudaMemcpy(cs->vecs, hv, off * sizeof(float), cudaMemcpyHostToDevice);
    free(hv);
    if (e != cudaSuccess) return dp_set_error(DP_ERR_BACKEND, "CUDA: upload failed: %s", cudaGetErrorString(e));
    return DP_OK;
}

/* Whether every matrix takes k_mmv (then batched decode steps are
 * captured as graphs; their GEMMs, with the resident f16 copies, run on a
 * cuBLAS workspace of the session's own). */
int all_mmv(const dp_model *m) {
    int ok = dp_cu_mmv_ok(m->output.type, 1);
    for (int l = 0; l < m->hp.n_layer; l++) {
        const dp_layer_weights *W = &m->layers[l];
        const dp_weight *ws[7] = {&W->wq, &W->wk, &W->wv, &W->wo, &W->gate, &W->up, &W->down};
        for (int i = 0; i < 7; i++) ok &= dp_cu_mmv_ok(ws[i]->type, 1);
    }
    return ok;
}

/* The KV pages (the pool s->kv counts) and the page tables. */
int alloc_pages(dp_session *s, CudaState *cs) {
    const dp_hparams *hp = &s->m->hp;
    const size_t KV = (size_t)hp->n_head_kv * hp->head_dim, ps = (size_t)s->kv.page_size;
    if ((unsigned long long)s->kv.n_pages * ps >= (1ull << 31))
        return dp_set_error(DP_ERR_ARG, "a KV pool of %d pages of %zu positions is too large for the CUDA backend",
                            s->kv.n_pages, ps);
    while ((1 << cs->page_shift) < (int)ps) cs->page_shift++;
    cs->pt_stride = s->kv.max_pages;
    cs->page_elems = ps * KV;
    cs->layer_elems = (size_t)s->kv.n_pages * cs->page_elems;
    const size_t npt = (size_t)s->n_seq_max * (size_t)s->kv.max_pages;
    int rc;
    if ((rc = dev_alloc(cs, &cs->kc, (size_t)hp->n_layer * cs->layer_elems)) ||
        (rc = dev_alloc(cs, &cs->vc, (size_t)hp->n_layer * cs->layer_elems)) || (rc = dev_alloc(cs, &cs->d_pt, npt)))
        return rc;
    CU_TRY(cudaHostAlloc((void **)&cs->h_pt, npt * sizeof(int), cudaHostAllocDefault));
    /* what d_pt holds: nothing valid yet, every entry is copied at first use */
    memset(cs->h_pt, 0xFF, npt * sizeof(int));
    CU_TRY(cudaMemset(cs->d_pt, 0xFF, npt * sizeof(int)));
    return DP_OK;
}

/* k_mmv's split-K scratch: partial sums of the k-parts it would choose for
 * each matrix height, and a counter per row tile. */
int alloc_mmv(dp_session *s, CudaState *cs) {
    const dp_hparams *hp = &s->m->hp;
    int dev = 0, nsm = 0;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
    const int heights[4] = {hp->n_embd, hp->n_head * hp->head_dim, hp->n_head_kv * hp->head_dim, hp->n_ff};
    size_t cap = 0;
    int tiles_max = 0;
    for (int i = 0; i < 4; i++) {
        const int tiles = (heights[i] + 127) / 128, S0 = (2 * nsm + tiles - 1) / tiles, S = S0 > 16 ? 16 : S0;
        if ((size_t)S * MAX_BUCKET * heights[i] > cap) cap = (size_t)S * MAX_BUCKET * heights[i];
        if (tiles > tiles_max) tiles_max = tiles;
    }
    cs->mm_part_cap = cap;
    cs->n_mm_counters = tiles_max;
    int rc;
    if ((rc = dev_alloc(cs, &cs->mm_part, cap)) || (rc = dev_alloc(cs, &cs->mm_counters, (size_t)tiles_max))) return rc;
    CU_TRY(cudaMemset(cs->mm_counters, 0, (size_t)tiles_max * sizeof(int)));
    return DP_OK;
}

/* The KV pages, the activations and the scratch of attention, prefill and
 * sampling; the host's pinned buffers. Activations hold n_batch rows, and
 * at least a batched decode graph's largest bucket. */
int alloc_buffers(dp_session *s, CudaState *cs, size_t w16_max) {
    const dp_hparams *hp = &s->m->hp;
    const int E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv, F = hp->n_ff;
    const int Q = NH * HD, KV = NKV * HD, V = hp->n_vocab;
    cs->rows_cap = s->n_batch > MAX_BUCKET ? s->n_batch : MAX_BUCKET;
    const size_t B = (size_t)cs->rows_cap;
    size_t maxd = (size_t)(E > Q ? E : Q);
    if ((size_t)F > maxd) maxd = (size_t)F;
    /* logits rows: a batch's wanted rows go through the LM head in groups of
     * this many (all of a batched decode step: at most n_seq_max rows) */
    int lr = 8;
    while (lr < s->n_seq_max && lr < MAX_BUCKET) lr *= 2;
    cs->logit_rows = s->logits_all && s->n_batch > lr ? s->n_batch : lr;
    const size_t logit_rows = (size_t)cs->logit_rows;
    /* attention slices' partial results: k_attention's per (query, head,
     * split), the sliced decode kernels' per (head, slice) */
    size_t part_n = B * (size_t)NH * SPLITS_PREFILL;
    if ((size_t)NH * DECODE_SLICES > part_n) part_n = (size_t)NH * DECODE_SLICES;
    part_n *= (size_t)(HD + 2);
    /* combine counters: per (query, KV head) for k_attention, per head for the sliced kernels */
    const size_t n_counters = B * NKV > (size_t)NH ? B * NKV : (size_t)NH;
    /* dequantised f16 weights for the prefill GEMMs: the largest matrix, or
     * chunks of up to 64 Mi elements of the LM head when all logits are asked for */
    cs->w16_elems = w16_max;
    const size_t lm = (size_t)V * (size_t)E;
    if (s->logits_all && B > 1) cs->w16_elems = w16_max > lm ? w16_max : (lm < (size_t)64 << 20 ? lm : (size_t)64 << 20);
    if (cs->w16_elems < (size_t)E * 32) cs->w16_elems = (size_t)E * 32;
    const size_t cand = (size_t)dp_cu_sample_blocks(V) * DP_SAMPLE_KMAX;
    int rc;
    if ((rc = alloc_pages(s, cs)) || (rc = alloc_mmv(s, cs)) ||
        (rc = dev_alloc(cs, &cs->x, B * E)) || (rc = dev_alloc(cs, &cs->x2, E)) || (rc = dev_alloc(cs, &cs->xn, B * E)) ||
        (rc = dev_alloc(cs, &cs->q, B * Q)) || (rc = dev_alloc(cs, &cs->k, B * KV)) ||
        (rc = dev_alloc(cs, &cs->v, B * KV)) || (rc = dev_alloc(cs, &cs->att, B * Q)) ||
        (rc = dev_alloc(cs, &cs->o, B * E)) || (rc = dev_alloc(cs, &cs->gate, 2 * B * F)) ||
        (rc = dev_alloc(cs, &cs->qkv, B * (size_t)(Q + 2 * KV))) || (rc = dev_alloc(cs, &cs->logits, logit_rows * V)) ||
        (rc = dev_alloc(cs, &cs->qn, B * Q)) || (rc = dev_alloc(cs, &cs->kn, B * KV)) ||
        (rc = dev_alloc(cs, &cs->x16, B * maxd)) || (rc = dev_alloc(cs, &cs->w16, cs->w16_elems)) ||
        (rc = dev_alloc(cs, &cs->part, part_n)) || (rc = dev_alloc(cs, &cs->counters, n_counters)) ||
        (rc = dev_alloc(cs, &cs->d_io, (ROW_INTS + 3) * B)) || (rc = dev_alloc(cs, &cs->d_key, B)) ||
        (rc = dev_alloc(cs, &cs->d_sp, B)) || (rc = dev_alloc(cs, &cs->ckey, cand)) ||
        (rc = dev_alloc(cs, &cs->cid, cand)) || (rc = dev_alloc(cs, &cs->d_tok, B)))
        return rc;
    /* split products of the f16 copies: the joint Q/K/V rows or the model width */
    cs->kpart_ld = Q + 2 * KV > E ? Q + 2 * KV : E;
    if (cs->blas && dp_cu_set.split_k > 1 && cs->batched &&
        (rc = dev_alloc(cs, &cs->kpart, (size_t)KPART_MAX * KPART_ROWS * (size_t)cs->kpart_ld)))
        return rc;
    /* gate/up through k_mmv with the activation fused writes its f16 rows
     * apart from x16, which its CTAs still read */
    if (cs->batched &&
        (rc = dev_alloc(cs, &cs->x16b, (size_t)(B < 64 ? B : 64) * maxd)))
        return rc;
    cs->rows_out = cs->d_io + ROW_INTS * B;
    cs->d_tiles = cs->rows_out + B;
    cs->up = cs->gate + B * F; /* gate and up side by side: a joint product's [n][2 F] output fits too */
    cs->h_tmp = (int *)malloc(4 * B * sizeof(int));
    if (!cs->h_tmp) return dp_set_error(DP_ERR_NOMEM, "out of memory");
    CU_TRY(cudaHostAlloc((void **)&cs->h_sp, B * sizeof(DpSampleArgs), cudaHostAllocDefault));
    CU_TRY(cudaHostAlloc((void **)&cs->h_tok, B * sizeof(int), cudaHostAllocDefault));
    CU_TRY(cudaMemset(cs->counters, 0, n_counters * sizeof(int)));
    /* padding rows of a batched step skip attention: their rows of att stay finite */
    CU_TRY(cudaMemset(cs->att, 0, B * Q * sizeof(float)));
    CU_TRY(cudaHostAlloc((void **)&cs->h_io, (ROW_INTS + 3) * B * sizeof(int), cudaHostAllocDefault));
    CU_TRY(cudaHostAlloc((void **)&cs->h_key, B * sizeof(unsigned long long), cudaHostAllocDefault));
    for (int i = 0; i < 2; i++) CU_TRY(cudaEventCreateWithFlags(&cs->ev_slot[i], cudaEventDisableTiming));
    /* the host's logits as session.c allocated them: all rows or the last one */
    const size_t host_rows = s->logits_all ? (size_t)s->n_batch : 1;
    cs->logits_pinned = cudaHostRegister(s->logits, host_rows * (size_t)V * sizeof(float), 0) == cudaSuccess;
    if (!cs->logits_pinned) cudaGetLastError();
    if ((rc = dp_cu_attention_init(HD, NH, NKV)) || (rc = dp_cu_mmv_init())) return rc;
    return dp_cu_matvec_init(dp_cu_matvec_smem((int)maxd));
}

/* The resident f16 copies of the block-quantised matrices, when they fit in
 * half the free device memory (DOPPLER_CUDA_F16_WEIGHTS): the GEMMs of
 * batched steps and of prefill then read f16 weights at the tensor cores'
 * rate, where k_mmv dequantises every weight again in each CTA and pass,
 * and a prompt without them dequantises each matrix into the f16 scratch
 * first (writing and reading again twice the bytes the GEMM reads). A
 * session of one sequence has no split products (a traced prompt takes
 * none, and an untraced one must not differ from it), so its GEMMs beat
 * k_mmv from more rows on: from SOLO_F16_ROWS (the crossover measured on
 * Qwen3-4B and 8B, docs/benchmarks-log.md). */
enum { SOLO_F16_ROWS = 16 };
int f16_copies(dp_session *s, CudaState *cs) {
    const int rows = dp_cu_set.f16_rows;
    cs->f16_min_rows = cs->batched || rows >= SOLO_F16_ROWS ? rows : SOLO_F16_ROWS;
    cs->f16_min_rows_k = dp_cu_set.f16_rows_k > cs->f16_min_rows ? dp_cu_set.f16_rows_k : cs->f16_min_rows;
    if (!s->set.f16_weights || !cs->blas) return DP_OK;
    const int nl = s->m->hp.n_layer;
    DMat **ds = (DMat **)malloc(sizeof(DMat *) * (size_t)(1 + 7 * nl));
    if (!ds) return dp_set_error(DP_ERR_NOMEM, "out of memory");
    int n = 0;
    size_t elems = 0;
    ds[n++] = &cs->output;
    for (int l = 0; l < nl; l++) {
        LayerDev *D = &cs->L[l];
        DMat *ld[7] = {&D->wq, &D->wk, &D->wv, &D->wo, &D->gate, &D->up, &D->down};
        for (int i = 0; i < 7; i++) ds[n++] = ld[i];
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if (ds[i]->type != DP_TYPE_F32 && ds[i]->type != DP_TYPE_F16 && ds[i]->type != DP_TYPE_BF16)
            ds[k++] = ds[i], elems += (size_t)ds[i]->rows * (size_t)ds[i]->cols;
    size_t fr = 0, tot = 0;
    int rc = DP_OK;
    const size_t ws = (size_t)32 << 20; /* cuBLAS workspace */
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) cudaGetLastError();
    else if (k && elems * sizeof(__half) + ws <= fr / 2 && !(rc = dev_alloc(cs, &cs->w16_all, elems))) {
        void *w = NULL;
        if (!(rc = dev_alloc(cs, (uint8_t **)&w, ws)) && dp_cu_blas_workspace(cs->blas, w, ws))
            cs->graph_rows = 0; /* captured GEMMs could allocate */
        __half *dst = cs->w16_all;
        for (int i = 0; i < k && !rc; i++) {
            rc = dp_cu_dequant_f16(ds[i], 0, ds[i]->rows, dst, cs->st);
            ds[i]->w16 = dst;
            dst += (size_t)ds[i]->rows * (size_t)ds[i]->cols;
        }
        /* cuBLAS sets itself up at its first call (tens of milliseconds) and
         * loads each kernel at its first use, which a server's requests
         * would wait for: the products of every GEMM bucket now */
        if (!rc) rc = cu_warm_gemms(s);
    }
    free(ds);
    return rc;
}

int cuda_init(dp_session *s) {
    int rc = check_shapes(s->m);
    if (rc) return rc;
    CudaState *cs = (CudaState *)calloc(1, sizeof *cs);
    if (!cs) return dp_set_error(DP_ERR_NOMEM, "out of memory");
    s->be_state = cs;
    cs->batched = s->n_seq_max >= 2;
    dp_cu_set = s->set; /* the tuning the launchers read */
    dp_cu_pdl = s->set.cuda_pdl;
    CU_TRY(cudaStreamCreateWithFlags(&cs->st, cudaStreamNonBlocking));
    dp_cu_sessions(+1), cs->counted = 1; /* k_attn_gqa's slices wait for each other only in a lone session */
    cs->blas = dp_cu_blas_create(); /* NULL: prefill runs one matvec per position */
    cs->L = (LayerDev *)calloc((size_t)s->m->hp.n_layer, sizeof(LayerDev));
    if (!cs->L) return dp_set_error(DP_ERR_NOMEM, "out of memory");
    size_t w16_max = 0;
    if ((rc = upload_matrices(s, cs, &w16_max)) || (rc = upload_vectors(s, cs))) return rc;
    cs->graph_rows = all_mmv(s->m);
    if ((rc = alloc_buffers(s, cs, w16_max))) return rc;
    return f16_copies(s, cs);
}

void cuda_free(dp_session *s) {
    CudaState *cs = cu_state(s);
    if (!cs) return;
    if (cs->st) cudaStreamSynchronize(cs->st);
    for (int i = 0; i < 2 * N_OUT * N_SLICE_CLASSES; i++)
        if (cs->graph[i]) cudaGraphExecDestroy(cs->graph[i]);
    for (int i = 0; i < N_BUCKETS; i++)
        for (int c = 0; c < 2; c++)
            if (cs->bgraph[c][i]) cudaGraphExecDestroy(cs->bgraph[c][i]);
    for (int i = 0; i < 2; i++) {
        for (int c = 0; c < N_SLICE_CLASSES; c++)
            if (cs->chain[i][c]) cudaGraphExecDestroy(cs->chain[i][c]);
        if (cs->ev_slot[i]) cudaEventDestroy(cs->ev_slot[i]);
    }
    for (int i = 0; i < cs->n_allocs; i++) cudaFree(cs->allocs[i]);
    for (int p = 0; p < N_OUT; p++) cu_prof_free(&cs->pg[p]);
    cu_prof_free(&cs->pe);
    if (cs->logits_pinned) cudaHostUnregister(s->logits);
    void *pinned[] = {cs->h_io, cs->h_key, cs->h_sp, cs->h_tok, cs->h_trace, cs->h_probs, cs->h_pt};
    for (size_t i = 0; i < sizeof pinned / sizeof pinned[0]; i++)
        if (pinned[i]) cudaFreeHost(pinned[i]);
    if (cs->d_probs) cudaFree(cs->d_probs);
    if (cs->d_allow) cudaFree(cs->d_allow);
    if (cs->h_allow) cudaFreeHost(cs->h_allow);
    dp_cu_blas_destroy(cs->blas);
    if (cs->st) cudaStreamDestroy(cs->st);
    if (cs->counted) dp_cu_sessions(-1);
    free(cs->allocs);
    free(cs->h_tmp);
    free(cs->L);
    free(cs);
    s->be_state = NULL;
}

int cuda_trace_changed(dp_session *s) { return cuda_settle(s); }

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

/* The weight types of the model as "Q4_K,Q6_K" lists: those of the integer
 * matvec and those of the float one. */
void matvec_types(const dp_model *m, char *ql, char *fl, size_t cap) {
    int seen[DP_TYPE_COUNT] = {0};
    const dp_weight *out = &m->output;
    seen[out->type] = 1;
    for (int l = 0; l < m->hp.n_layer; l++) {
        const dp_layer_weights *W = &m->layers[l];
        const dp_weight *ws[7] = {&W->wq, &W->wk, &W->wv, &W->wo, &W->gate, &W->up, &W->down};
        for (int i = 0; i < 7; i++) seen[ws[i]->type] = 1;
    }
    size_t nq = 0, nf = 0;
    ql[0] = fl[0] = 0;
    for (int t = 0; t < DP_TYPE_COUNT; t++) {
        if (!seen[t]) continue;
        char *d = dp_cu_matvec_q_ok(t) ? ql : fl;
        size_t *n = dp_cu_matvec_q_ok(t) ? &nq : &nf;
        if (*n < cap) *n += (size_t)snprintf(d + *n, cap - *n, "%s%s", *n ? "," : "", dp_type_name(t));
    }
}

/* The device memory of the session's allocations: all of them, the weights
 * (each matrix's allocation once, and the vectors) and the KV cache. */
int device_memory(const CudaState *cs, int n_layer, dp_backend_info *out) {
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
    const int nmat = 2 + 7 * n_layer;
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
    weights += alloc_size(fn, cs->vecs, NULL) + alloc_size(fn, cs->w16_all, NULL);
    const uint64_t kv = alloc_size(fn, cs->kc, NULL) + alloc_size(fn, cs->vc, NULL);
    out->dev_weight_bytes = weights;
    out->dev_f16_copy_bytes = alloc_size(fn, cs->w16_all, NULL);
    out->dev_kv_bytes = kv;
    out->dev_total_bytes = total;
    out->dev_scratch_bytes = total >= weights + kv ? total - weights - kv : 0;
    return DP_OK;
}

/* The CUDA part of dp_session_describe: the device, the decode kernels for
 * this model's weight types and head dimension, and the device memory of
 * every allocation this session made. */
int cuda_describe(const dp_session *s, dp_backend_info *out) {
    const CudaState *cs = cu_state(s);
    const dp_model *m = s->m;
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

    char ql[96], fl[96], mv[256];
    matvec_types(m, ql, fl, sizeof ql);
    if (*ql && *fl) snprintf(mv, sizeof mv, "k_matvec_w (integer) for %s, k_matvec (float) for %s", ql, fl);
    else if (*ql) snprintf(mv, sizeof mv, "k_matvec_w (integer) for %s", ql);
    else snprintf(mv, sizeof mv, "k_matvec (float) for %s", fl);
    const int sliced = dp_cu_attention_slices(1, m->hp.n_head, m->hp.head_dim) > 0;
    char rows16[128] = "";
    if (cs->w16_all && cs->f16_min_rows_k > cs->f16_min_rows)
        snprintf(rows16, sizeof rows16, " (from %d rows: GEMMs on resident f16 weights; Q3_K to Q6_K from %d)",
                 cs->f16_min_rows, cs->f16_min_rows_k);
    else if (cs->w16_all)
        snprintf(rows16, sizeof rows16, " (from %d rows: GEMMs on resident f16 weights)", cs->f16_min_rows);
    snprintf(out->kernels, sizeof out->kernels, "matvec %s; attention %s; PDL %s; rows of a batch: k_mmv up to 64%s%s, "
             "prefill beyond %s", mv,
             sliced ? "k_attn_split / k_attn_gqa (q/k norm, RoPE, KV store fused; key slices by context)"
                    : "k_qk_rope + k_attention (head dimension not 64, 128 or 256)",
             dp_cu_pdl ? "on" : "off", rows16, cs->graph_rows ? " (batched decode graphs)" : "",
             cs->blas ? "cuBLAS f16 GEMM" : "matvec per position (no cuBLAS)");
    snprintf(out->act_path, sizeof out->act_path, "decode: fused into the gate/up matvec; prefill and tracing: "
                                                  "a separate gated-activation kernel");

    /* the KV pool as allocated: f16 K and V pages of every layer */
    out->kv_bytes = 2 * (uint64_t)m->hp.n_layer * (uint64_t)cs->layer_elems * sizeof(__half);
    return device_memory(cs, m->hp.n_layer, out);
}

} // namespace

extern "C" int dp_cuda_available(void) {
    static int cached = -1;
    if (cached < 0) {
        int n = 0;
        cached = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
        cudaGetLastError();
    }
    return cached;
}

/* Page-locked host memory for a batch's logits rows: copies from the device
 * into pageable memory go through the driver's staging buffers at a
 * fraction of the speed, and a step with rows sampled on the host (penalties,
 * logit_bias, constrained answers) copies a vocabulary of floats per row. */
static void *cuda_host_alloc(size_t bytes) {
    void *p = NULL;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess) return p;
    cudaGetLastError(); /* plain memory then, as without a GPU */
    return NULL;
}
static void cuda_host_free(void *p) { cudaFreeHost(p); }

/* Pages of 64 positions: a bulk prefetch per page of a decode slice, few
 * page-table entries per sequence, prefixes shared in steps of 64 tokens. */
extern "C" const dp_backend_impl dp_backend_cuda = {
    "cuda", cuda_init, cuda_free, NULL /* forward: forward_batch takes every pass */, cuda_eval_sample,
    cuda_trace_changed, 2 /* f16 K/V pages */, cuda_describe, cuda_settle, cuda_forward_batch, cuda_copy_page,
    64 /* positions per page */, cuda_host_alloc, cuda_host_free,
};
