/* The CUDA backend's session state and the functions its files share:
 *   backend.cu  state, upload of the weights, the KV pages, describe, the backend table
 *   forward.cu  the forward pass (the layer loop)
 *   products.cu the forward pass's matrix products (matvec, k_mmv, f16 GEMMs)
 *   decode.cu   evaluation: decode graphs, the greedy look-ahead, sampling
 *   batch.cu    the batched entry: a batch's rows, page tables and outputs
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
 * logits, every row's, the greedy token (fused argmax) or a sampled token;
 * OUT_DEVICE: the last row's logits, kept on the device (a constrained
 * draw masks them there); OUT_ROWS: the logits and argmax keys of the rows
 * listed after the rows' input (rows_out), at most logit_rows of them. */
enum { OUT_LOGITS = 0, OUT_LOGITS_ALL = 1, OUT_ARGMAX = 2, OUT_SAMPLE = 3, OUT_DEVICE = 4, N_OUT = 5, OUT_ROWS = 5 };
/* Batched decode graphs per power-of-two number of rows: 2, 4, .. 64 */
enum { N_BUCKETS = 6, MAX_BUCKET = 64 };
/* Decode graphs per class of context: 0 slices, then 1, 2, 4 .. 256 */
enum { N_SLICE_CLASSES = 10 };
/* Key splits of k_attention (prefill; decode where the sliced kernels do not
 * take the head dimension) and the fewest keys per split; the slices the
 * scratch holds for the sliced decode kernels (k_attn_split's maximum). */
enum { SPLITS_PREFILL = 8, SPLITS_DECODE = 64, SPLIT_MIN_KEYS = 64, DECODE_SLICES = 256 };
/* Split products (DOPPLER_CUDA_SPLIT_K) for passes of at most KPART_ROWS
 * rows, in at most KPART_MAX parts of KPART_ROWS rows each */
enum { KPART_ROWS = 32, KPART_MAX = 8 };

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
    float *rope_active;             /* the RoPE tables the layers read (in vecs) */
    const float *rope_sets;         /* every set of tables: n_rot floats each (in vecs) */
    int rope_set;                   /* the set in rope_active */
    const float *out_norm;
    /* KV pages, f16 [layer][page][slot][n_head_kv * head_dim] (kernels.cuh KvPages) */
    __half *kc, *vc;
    size_t layer_elems, page_elems;  /* halves of one layer's pool and of one page */
    int page_shift, pt_stride;      /* log2 of the page size; page-table entries per sequence */
    int *d_pt, *h_pt;               /* page tables, n_seq_max x max_pages; h_pt: what d_pt holds */
    int rows_cap;                   /* rows the activations, d_io and the keys hold */
    int logit_rows;                 /* rows of cs->logits */
    float *mm_part;                 /* k_mmv's split-K partial sums */
    float *kpart;                   /* split GEMMs' k-parts: KPART_MAX x KPART_ROWS rows of kpart_ld */
    int kpart_ld;
    size_t mm_part_cap;
    int *mm_counters, n_mm_counters;
    int graph_rows;                 /* every matrix takes k_mmv: batched decode steps are graphs */
    int f16_min_rows;               /* fewest rows of a pass that multiply through the f16 copies */
    int f16_min_rows_k;             /* the same for the matrices k_mmv multiplies with exact weights */
    int batched;                    /* several sequences: k-parts, x16b; traced passes without joint GEMMs */
    int *h_tmp;                     /* host scratch of batch.cu: 4 rows_cap ints */
    /* activations: x the residual stream (x2 its second buffer, see
     * Pass below), xn normed input, o block output */
    float *x, *x2, *xn, *q, *k, *v, *att, *o, *gate, *up, *logits;
    float *qn, *kn;                 /* q/k after the per-head norm, for tracing */
    float *qkv;                     /* the joint Q/K/V product's output, [rows][Q + 2 KV] */
    __half *x16, *w16;              /* prefill: f16 activations and dequantised weights */
    __half *x16b;                   /* batched sessions: k_mmv's gate/up (MV_GATEUP) writes its f16 rows here or in x16 */
    size_t w16_elems;
    __half *w16_all;                /* the matrices' resident f16 copies (DMat w16), or NULL */
    float *part;                    /* attention slices' partial results */
    int *counters;                  /* attention combine counters, zero between launches */
    /* the rows' input, ROW_INTS per row (kernels.cuh KvPages), then the
     * rows whose logits OUT_ROWS computes, then a pass's attention tiles */
    int *d_io, *h_io;
    int *rows_out;                  /* d_io + ROW_INTS * rows_cap */
    int *d_tiles;                   /* rows_out + rows_cap: k_attn_mma's tiles of a pass (2 rows_cap ints) */
    unsigned long long *d_key, *h_key; /* greedy argmax keys, per row; h_key[0..1]: the look-ahead slots */
    DpSampleArgs *d_sp, *h_sp;      /* device sampling: settings and the uniform, per row */
    uint32_t *ckey;                 /* its candidates */
    int *cid, *d_tok, *h_tok;       /* sampled tokens, per row */
    uint32_t *d_allow, *h_allow;    /* constrained draws: a token mask per row (logit_rows rows of allow_words),
                                       made at the first */
    int allow_words;
    int logits_pinned;              /* s->logits registered: graphs copy the logits themselves */
    float *h_trace;                 /* pinned read-back of trace points */
    size_t h_trace_n;
    float *d_probs, *h_probs;       /* attn_scores trace */
    size_t probs_n;
    /* decode graphs: [out] plain, [N_OUT + out] with profiling events, each
     * once per class of context (+ 2 N_OUT class) */
    cudaGraphExec_t graph[2 * N_OUT * N_SLICE_CLASSES];
    cudaGraphExec_t bgraph[2][N_BUCKETS]; /* batched decode steps per attn_rows and bucket (OUT_LOGITS_ALL + keys) */
    int counted;                    /* in dp_cu_sessions */
    /* greedy steps queued ahead (decode.cu greedy_step): graphs whose input
     * is the previous step's argmax, writing h_key[slot]; an event per slot */
    cudaGraphExec_t chain[2][N_SLICE_CLASSES];
    cudaEvent_t ev_slot[2];
    int ahead, ahead_seq, ahead_pos, ahead_tok, ahead_slot; /* the queued step: sequence, position, input token, slot */
    int attn_slices;                /* this evaluation's decode attention slices (decode.cu) */
    int attn_rows;                  /* this evaluation's decode rows take k_attn_split (short contexts, decode.cu) */
    ProfPool pe, pg[N_OUT], *pool;  /* eager, per profiled graph, the one recording */
};

static inline CudaState *cu_state(const dp_session *s) { return (CudaState *)s->be_state; }

#define TRY(x)                  \
    do {                        \
        int rc_ = (x);          \
        if (rc_) return rc_;    \
    } while (0)

/* One call of cu_forward: the session, its dimensions and the residual
 * stream. */
struct Pass {
    dp_session *s;
    CudaState *cs;
    const dp_model *m;
    const dp_hparams *hp;
    const dp_recipe *r;
    cudaStream_t st;
    int n, pos0, tracing;
    int n_out;     /* OUT_ROWS: the rows_out whose logits are asked for */
    int E, HD, NH, NKV, Q, KV, F, V;
    __half *x16;   /* several rows: the f16 copy of the products' input, else NULL */
    /* The residual stream: x. In a decode step with sandwich norms a block
     * ends with its output o = W in still in cs->o and its post-norm weight
     * pending; the next matvec's prologue adds x + rmsnorm(o) * w, uses the
     * sum, and writes it to the other buffer, which becomes x (take_residual). */
    float *x, *x_alt;
    const float *pending;
    /* The eager layer's residual stream may owe x the k-parts of a split
     * o or down product (split_parts): the next RMSNorm adds them. */
    KParts owed;
    /* What the rows are, for every layer's attention (read once from h_io):
     * one sequence at consecutive positions (one_sequence), decode rows of
     * distinct sequences few enough for the fused RoPE (fused_rope_rows),
     * k_attn_mma's tiles in d_tiles for rows of several sequences (attn_tiles) */
    int one_seq, fuse_rope, n_tiles;
};

/* forward.cu: the forward pass for the n rows in d_io (their tokens,
 * positions and sequences are read on the device; pos0, the first row's
 * position, names trace events: tracing passes hold one sequence); queues
 * the work on the stream. The logits end in cs->logits (last row; all rows
 * for OUT_LOGITS_ALL; the n_out rows_out for OUT_ROWS), with each of those
 * rows' argmax key in d_key when there are several, the last row's greedy
 * token in *d_key (OUT_ARGMAX), a sampled one in *d_tok (OUT_SAMPLE). */
int cu_forward(dp_session *s, int n, int pos0, int out, int n_out);
/* The final norm and LM head alone (OUT_ROWS) over the hidden states the
 * last cu_forward of n rows left, for the n_out rows_out now on the device. */
int cu_lm_rows(dp_session *s, int n, int pos0, int n_out);
/* decode.cu: session start with resident f16 copies: one eager pass of
 * padding rows per GEMM bucket from f16_min_rows rows up to 512 (one pass
 * without DOPPLER_CUDA_GEMM_BUCKETS), so that cuBLAS has set itself up and
 * loaded the kernel of every product's shape before a request needs it. */
int cu_warm_gemms(dp_session *s);
/* The rows of n tokens of sequence seq at positions pos0.. into h_io. */
void cu_rows_seq(CudaState *cs, const int32_t *tokens, int n, int pos0, int seq);
/* Copies the page tables of the sequences the rows use (up to the page of
 * each one's last position) where they changed. */
int cu_sync_pages(dp_session *s, const int *seqs, const int *ends, int n);

/* products.cu: the forward pass's products, each described where it is
 * defined. The rows a GEMM on the resident f16 copies computes for n rows:
 * powers of two up to 64, then multiples of 64 up to 512, of 256 beyond. */
int cu_gemm_bucket(int n);
/* One matrix's matvec launch; k_mmv's launch of W over n rows of x16. */
MvLaunch launch_of(const DMat &w, float *y, const float *bias, const float *x, int mode);
MmLaunch mm_launch(const CudaState *cs, const DMat &W, const __half *x16, int n, float *y, int mode,
                   const float *bias);
/* y (+)= W x16 (+ bias) through W's resident f16 copy (a cuBLAS GEMM). */
int f16_product(Pass &p, const DMat &W, int n, float *y, int cap, int accumulate, const float *bias);
/* The k-parts a product is split into (0: not split), and the split product. */
int split_parts(const Pass &p, const DMat &W, int n);
int split_product(Pass &p, const DMat &W, int n, int S, KParts *kp);
/* Matrices side by side as one f16 matrix *J, where they can be (1). */
int joint(const Pass &p, const DMat *const *W, int nj, int n, DMat *J);
/* Whether k_mmv takes all nj matrices; their products in few launches. */
int mm_all(const CudaState *cs, const DMat *const *W, int nj, int n);
int mm_jobs(Pass &p, const DMat *const *W, float *const *y, const float *const *bias, int nj, int n, int ld);
/* y (+)= W x for n rows: matvec, k_mmv or the f16 GEMM. */
int matmul(Pass &p, const DMat &W, const float *x, int n, float *y, int accumulate, const float *bias);

/* decode.cu: the backend's evaluation entries */
int cuda_eval_sample(dp_session *s, const int32_t *tokens, int n, int pos0, dp_sampler *smp, int32_t *next);
int cuda_settle(dp_session *s); /* waits for a greedy step queued ahead that nobody took */
/* One evaluation of the n rows in h_io: a replayed decode graph (one row;
 * several with batched graphs) or cu_forward; the output copied back as
 * out asks (OUT_ROWS: nothing; the caller copies what it needs). */
int cu_evaluate(dp_session *s, int n, int pos0, int out, int n_out);
/* A greedy decode step of sequence seq with the step after it queued
 * ahead (decode.cu); *next gets the token. */
int cu_greedy_step(dp_session *s, int seq, int32_t tok, int pos0, int32_t *next);
/* Whether the device draws for this sampler; fills h_sp[row] then (no
 * mask). masked: the row's logits are masked first, so plain greedy too
 * goes to the sampler (the fused argmax saw them unmasked). */
int cu_device_draws(dp_session *s, dp_sampler *smp, int row, int masked);

/* batch.cu: the backend's batched hooks */
int cuda_forward_batch(dp_session *s, const dp_batch *b);
int cuda_copy_page(dp_session *s, int src, int dst);

/* Before a forward call (or graph) whose positions end before n_pos: the
 * RoPE tables HF would take for it (LongRoPE's long set once n_pos passes
 * the original context) copied in on the stream, outside any graph. */
int cu_rope_select(dp_session *s, int n_pos);

/* observe.cu */
/* Profiling: an event after each op; the time between consecutive events
 * goes to that op (prof.h categories). No-ops without s->prof. */
int cu_prof_mark(dp_session *s, int op, int layer, uint64_t bytes);
int cu_prof_collect(dp_session *s, ProfPool *pp);
void cu_prof_free(ProfPool *pp);
/* Copies a device trace point back (n rows of dim) and hands it over, when
 * it is asked for. */
int cu_trace(dp_session *s, int point, int layer, const float *d, int pos0, int n, int dim);
/* The same for columns off .. off + dim of n rows ld floats apart (one
 * matrix of a joint product), plus bias (device, dim floats) where set. */
int cu_trace_cols(dp_session *s, int point, int layer, const float *d, int ld, int off, int dim, const float *bias,
                  int pos0, int n);
/* The attn_scores point of layer l: the softmax weights of A, computed by a
 * separate kernel. */
int cu_trace_scores(dp_session *s, const AttnLaunch *A, int layer, int pos0, int n);

/* lab.cu (lab builds): leaves the decode launches DOPPLER_CUDA_SKIP names
 * out of an instantiated decode graph. */
int cu_lab_skip(dp_session *s, cudaGraph_t g, cudaGraphExec_t ge);

#endif
