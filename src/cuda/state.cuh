/* The CUDA backend's session state and the functions its files share:
 *   backend.cu  state, upload of the weights, describe, the backend table
 *   forward.cu  the forward pass (the layer loop)
 *   decode.cu   evaluation: decode graphs, the greedy look-ahead, sampling
 *   observe.cu  trace read-back and the profiling event pool
 *   lab.cu      measurement-only graph edits (-DDOPPLER_CUDA_LAB=ON)
 * The kernels and their launchers are in kernels/. */
#ifndef DP_CUDA_STATE_CUH
#define DP_CUDA_STATE_CUH

#include "kernels/kernels.cuh"

extern "C" {
#include "prof.h"
#include "sampler.h"
#include "session.h"
#include "trace.h"
}

/* What an evaluation leaves on the device for the host: the last row's
 * logits, every row's, the greedy token (fused argmax) or a sampled token. */
enum { OUT_LOGITS = 0, OUT_LOGITS_ALL = 1, OUT_ARGMAX = 2, OUT_SAMPLE = 3, N_OUT = 4 };
/* Decode graphs per class of context: 0 slices, then 1, 2, 4 .. 256 */
enum { N_SLICE_CLASSES = 10 };
/* Key splits of k_attention (prefill; decode where the sliced kernels do not
 * take the head dimension) and the fewest keys per split; the slices the
 * scratch holds for the sliced decode kernels (k_attn_split's maximum). */
enum { SPLITS_PREFILL = 8, SPLITS_DECODE = 64, SPLIT_MIN_KEYS = 64, DECODE_SLICES = 256 };

struct LayerDev {
    DMat wq, wk, wv, wo, gate, up, down;
    const float *attn_norm, *ffn_norm, *post_attn_norm, *post_ffn_norm, *q_norm, *k_norm, *bq, *bk, *bv;
    const float *inv_freq; /* this layer's RoPE frequencies (global or local) */
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
    cublasHandle_t blas;            /* NULL: prefill runs one matvec per position */
    void **allocs;                  /* every device allocation, for cuda_free and describe */
    int n_allocs, cap_allocs;
    /* weights */
    DMat tok_embd, output;
    LayerDev *L;
    float *vecs;                    /* norms, biases, RoPE frequencies (float32) */
    const float *out_norm;
    /* KV cache, f16 [layer][position][n_head_kv * head_dim] */
    __half *kc, *vc;
    /* activations: x the residual stream (x2 its second buffer, see
     * forward.cu Residual), xn normed input, o block output */
    float *x, *x2, *xn, *q, *k, *v, *att, *o, *gate, *up, *logits;
    float *qn, *kn;                 /* q/k after the per-head norm, for tracing */
    __half *x16, *w16;              /* prefill: f16 activations and dequantised weights */
    size_t w16_elems;
    float *part;                    /* attention slices' partial results */
    int *counters;                  /* attention combine counters, zero between launches */
    int *d_io, *h_io;               /* [0] = pos0, [1..] tokens */
    unsigned long long *d_key, *h_key; /* greedy argmax key; h_key[2]: one per look-ahead slot */
    DpSampleArgs *d_sp, *h_sp;      /* device sampling: settings and the uniform */
    uint32_t *ckey;                 /* its candidates */
    int *cid, *d_tok, *h_tok;
    int logits_pinned;              /* s->logits registered: graphs copy the logits themselves */
    float *h_trace;                 /* pinned read-back of trace points */
    size_t h_trace_n;
    float *d_probs, *h_probs;       /* attn_scores trace */
    size_t probs_n;
    /* decode graphs: [out] plain, [N_OUT + out] with profiling events, each
     * once per class of context (+ 2 N_OUT class) */
    cudaGraphExec_t graph[2 * N_OUT * N_SLICE_CLASSES];
    int counted;                    /* in dp_cu_sessions */
    /* greedy steps queued ahead (decode.cu greedy_step): graphs whose input
     * is the previous step's argmax, writing h_key[slot]; an event per slot */
    cudaGraphExec_t chain[2][N_SLICE_CLASSES];
    cudaEvent_t ev_slot[2];
    int ahead, ahead_pos, ahead_tok, ahead_slot; /* the queued step: position, input token, slot */
    int attn_slices;                /* this evaluation's decode attention slices (decode.cu) */
    ProfPool pe, pg[N_OUT], *pool;  /* eager, per profiled graph, the one recording */
};

static inline CudaState *cu_state(const dp_session *s) { return (CudaState *)s->be_state; }

#define TRY(x)                  \
    do {                        \
        int rc_ = (x);          \
        if (rc_) return rc_;    \
    } while (0)

/* forward.cu: the forward pass for n positions at pos0 (read from d_io on
 * the device); queues the work on the stream. The logits end in cs->logits
 * (last row, or all rows for OUT_LOGITS_ALL), the greedy token in *d_key,
 * a sampled one in *d_tok. */
int cu_forward(dp_session *s, int n, int pos0, int out);

/* decode.cu: the backend's evaluation entries */
int cuda_eval(dp_session *s, const int32_t *tokens, int n, int pos0, int logits_all);
int cuda_eval_sample(dp_session *s, const int32_t *tokens, int n, int pos0, dp_sampler *smp, int32_t *next);
int cuda_settle(dp_session *s); /* waits for a greedy step queued ahead that nobody took */

/* observe.cu */
/* Profiling: an event after each op; the time between consecutive events
 * goes to that op (prof.h categories). No-ops without s->prof. */
int cu_prof_mark(dp_session *s, int op, int layer, uint64_t bytes);
int cu_prof_collect(dp_session *s, ProfPool *pp);
void cu_prof_free(ProfPool *pp);
/* Copies a device trace point back (n rows of dim) and hands it over, when
 * it is asked for. */
int cu_trace(dp_session *s, int point, int layer, const float *d, int pos0, int n, int dim);
/* The attn_scores point of layer l: the softmax weights of A, computed by a
 * separate kernel. */
int cu_trace_scores(dp_session *s, const AttnLaunch *A, int layer, int pos0, int n);

/* lab.cu (lab builds): leaves the decode launches DOPPLER_CUDA_SKIP names
 * out of an instantiated decode graph. */
int cu_lab_skip(dp_session *s, cudaGraph_t g, cudaGraphExec_t ge);

#endif
