/* Host-side launchers of the CUDA kernels (one file per family in this
 * folder: weights.cu, matvec.cu, matvec_q.cu, attention.cu, attn_split.cu,
 * attn_gqa.cu, ops.cu, gemm.cu, sample.cu). Each returns DP_OK or
 * DP_ERR_BACKEND with the error recorded. */
#ifndef DP_CUDA_KERNELS_CUH
#define DP_CUDA_KERNELS_CUH

#include <cublas_v2.h>

#include "common.cuh"

/* ------------------------------------------------------------ weights */

/* Repacks one matrix (rows x cols of w->type, host memory as in the file)
 * and uploads it into one device allocation (*alloc, to cudaFree). */
int dp_cu_upload_matrix(const void *data, int type, int rows, int cols, DMat *out, void **alloc);
/* The same layout in host memory: *host (malloc'ed, *total bytes) holds it and
 * *out points into it. */
int dp_cu_repack_matrix(const void *data, int type, int rows, int cols, DMat *out, uint8_t **host, size_t *total);
/* Whether matrices of this type can be used on the device. */
int dp_cu_type_supported(int type);

/* ------------------------------------------------------------- matvec */

enum { MV_STORE = 0, MV_ADD = 1, MV_GATEUP = 2 };

struct MvJob {
    DMat w;
    float *y;            /* output rows (MV_ADD: accumulated into) */
    const float *bias;   /* MV_STORE: added when not NULL */
};

struct MvLaunch {
    MvJob job[3];
    int njobs;           /* MV_GATEUP: 2 (gate, up; output in job[0].y) */
    const float *x;      /* input vector of cols floats */
    int cols;
    const float *norm_w; /* when set, x is RMS-normalised first: x * scale * (w + norm_off) */
    float norm_off, eps;
    /* Gemma's sandwich norm fused in (needs norm_w): x_eff = x + rmsnorm(res_o)
     * * (res_w + norm_off); CTA 0 writes x_eff to x_out (not x), and the
     * product uses rmsnorm(x_eff) * (norm_w + norm_off). */
    const float *res_o, *res_w;
    float *x_out;
    int mode;
    int act;             /* dp_act for MV_GATEUP */
    unsigned long long *argmax_key; /* when set (one job, MV_STORE): atomicMax of (float key << 32 | ~row) */
};

/* y = W x for every job of the launch: k_matvec_w (matvec_q.cu) where every
 * matrix has a format of the integer path (and a gate/up launch one format),
 * else the float k_matvec. */
int dp_cu_matvec(const MvLaunch *L, cudaStream_t st);
/* Whether the integer path handles matrices of this type. */
int dp_cu_matvec_q_ok(int type);
int dp_cu_matvec_q(const MvLaunch *L, cudaStream_t st);
/* Prepares the integer path for vectors of up to max_cols. */
int dp_cu_matvec_q_init(int max_cols);
/* Largest dynamic shared memory a matvec over cols inputs needs. */
size_t dp_cu_matvec_smem(int cols);
int dp_cu_matvec_init(size_t max_smem);

/* Batched decode products (mmv.cu): y_j[b] = W_j x16[b] for nb <= 64 rows of
 * f16 x and up to 3 matrices of one format and width (a Q/K/V or gate/up
 * launch), the weights read once for all rows (tensor cores). */
struct MmLaunch {
    DMat w[3];
    float *y[3];         /* y_j[b * ld + r], ld = ldy or w[j].rows */
    int ldy;             /* floats between the output rows of x's rows (0: each matrix's rows) */
    const float *bias[3];/* MV_STORE: added when set */
    int njobs;
    const __half *x16;   /* nb rows of w[0].cols */
    int nb;
    int mode;            /* MV_STORE, MV_ADD, or MV_GATEUP: w[0] gate, w[1] up (one format and
                            shape), out16 = act(gate) * up */
    __half *out16;       /* MV_GATEUP: [nb][w[0].rows] (not x16: other CTAs still read it) */
    int act;             /* MV_GATEUP: DP_ACT_* */
    unsigned long long *argmax_keys; /* one job: per row b, atomicMax of (float key << 32 | ~r) */
    float *part;         /* split-K partial sums: part_cap floats (NULL: no split) */
    size_t part_cap;
    int *counters;       /* n_counters ints, zero between launches */
    int n_counters;
    int tstart[4], roff[4]; /* set by dp_cu_mmv: each job's first row tile and row offset */
};
/* Whether k_mmv takes this format and number of rows. */
int dp_cu_mmv_ok(int type, int nb);
/* Whether k_mmv multiplies nb rows of this format with its weights exact
 * (else each rounded to f16 once). */
int dp_cu_mmv_exact(int type, int nb);
int dp_cu_mmv(const MmLaunch *L, cudaStream_t st);
/* Prepares k_mmv's launches (shared-memory limits) before any capture. */
int dp_cu_mmv_init(void);

/* ---------------------------------------------------------- attention */

/* The rows of a forward pass and where their K/V live. Each row is three
 * ints in device memory, {token, position, sequence}; a sequence < 0 marks
 * a padding row (a batch-size bucket's unused slots: no attention, no K/V
 * store). A layer's cache is a pool of pages of 1 << page_shift positions,
 * [page][slot][n_head_kv * head_dim]; position p of sequence q is in page
 * pt[q * pt_stride + (p >> page_shift)]. */
enum { ROW_TOK = 0, ROW_POS = 1, ROW_SEQ = 2, ROW_INTS = 3 };
struct KvPages {
    const int *rows;           /* device: ROW_INTS per row */
    const int *pt;             /* device: page tables, pt_stride entries per sequence */
    int pt_stride, page_shift;
};
/* Row z's page table (its sequence must be >= 0). */
__device__ __forceinline__ const int *kv_table(const KvPages &P, int z) {
    return P.pt + (size_t)P.rows[ROW_INTS * z + ROW_SEQ] * (size_t)P.pt_stride;
}
/* The pool row (page * page_size + slot) of position j. */
__device__ __forceinline__ int kv_row(const int *tab, int j, int sh) {
    return (__ldg(tab + (j >> sh)) << sh) | (j & ((1 << sh) - 1));
}

struct AttnLaunch {
    const float *q;            /* [n][n_head * head_dim], roped (rope = 0) */
    float *out;                /* [n][n_head * head_dim] */
    __half *out16;             /* k_attention: also out as f16 when set (the next product's input) */
    const __half *k, *v;       /* this layer's page pool (KvPages) */
    KvPages kv;                /* row z: its position, sequence and pages */
    int n, n_head, n_head_kv, head_dim;
    int window;                /* 0 = unlimited */
    float scale;
    float softcap;             /* scaled scores soft-capped at this (0: none) */
    int exclude_self;
    int splits;                /* k_attention: max key splits per query and KV head (<= 64);
                                  sliced decode: the slices the scratch holds */
    int min_keys;              /* k_attention: fewest keys per split */
    float *part;               /* scratch: max(n * n_head_kv * splits, n_head * slices) * (head_dim + 2) floats */
    int *counters;             /* max(n * n_head_kv, n_head) ints, zero between launches */
    /* decode (n = 1) by the sliced kernels: slices > 0 is their number of
     * key slices (dp_cu_attention_slices) */
    int slices;
    /* sliced decode with rope set: q is this step's unrotated q; the kernel
     * applies the q/k norm and RoPE itself (as dp_cu_qk_rope_store would)
     * and stores this step's k and v (kf, vf: f32) into the cache */
    int rope;
    const float *kf, *vf;
    const float *q_norm, *k_norm; /* NULL = no per-head norm */
    float norm_off, eps;
    const float *inv_freq;
    int n_rot, neox;           /* n_rot 0: a layer without RoPE */
    float rope_ms;             /* cos and sin times this (LongRoPE) */
    /* k_attention with rope set: the rows are decode rows of distinct
     * sequences, q/k/v come from the joint Q/K/V product (qkv: rows of ld,
     * its biases bq, bk, bv still to add, nparts k-parts pstride apart), and
     * each row's last split CTA stores its k/v row into the cache first */
    const float *qkv, *bq, *bk, *bv;
    int ld, nparts;
    long long pstride;
    int gqa; /* several slices: 0 k_attn_gqa where it applies, -1 k_attn_split (verify) */
    int one_seq; /* several rows: all of one sequence at consecutive positions (k_attn_mma may take them) */
    /* several rows of several sequences (a prompt chunk beside others, decode
     * rows): k_attn_mma's CTAs as n_tiles (first row, rows) pairs in device
     * memory, each within one sequence and at most dp_cu_attn_mma_rows rows */
    const int *tiles;
    int n_tiles;
};

/* Value i of row z of the joint Q/K/V product (A.qkv): its k-parts summed
 * (parts_at), then bias b[bi] added, as k_qk_rope. */
__device__ __forceinline__ float qkv_in(const AttnLaunch &A, int z, int i, const float *b, int bi) {
    const float a = parts_at(A.qkv + (size_t)z * A.ld, A.nparts, A.pstride, i);
    return b ? a + b[bi] : a;
}

/* Attention: k_attention for prefill and for decode without slices, the
 * sliced decode kernels (attn_split.cu, attn_gqa.cu) with them. */
int dp_cu_attention(const AttnLaunch *A, cudaStream_t st);
/* k_attn_mma (attn_prefill.cu): prefill of one sequence on the tensor cores,
 * where dp_cu_attn_mma_ok says it applies (dp_cu_attention takes it then). */
int dp_cu_attn_mma_ok(const AttnLaunch *A);
/* The query rows of one k_attn_mma CTA for this head layout, 0 where the
 * kernel does not take the head dimension or grouping. */
int dp_cu_attn_mma_rows(int head_dim, int n_head, int n_head_kv);
int dp_cu_attn_mma(const AttnLaunch *A, cudaStream_t st);
/* k_attn_split (attn_split.cu): decode with the q/k norm, RoPE and K/V store
 * fused: one row in A.slices slices, or (A.qkv, n > 1, one slice) decode
 * rows of distinct sequences, a CTA per (row, query head). */
int dp_cu_attn_split(const AttnLaunch *A, cudaStream_t st);
/* Whether auto takes k_matvec_l 8x2 for a launch of njobs matrices (rows,
 * units of its format per row; gu: a gate/up pair) over nw resident warps
 * (matvec_q.cu l_shape); host code. */
int dp_cu_mv_balanced(const int *rows, const int *U, int njobs, int gu, long long nw);
/* k_attn_gqa (attn_gqa.cu): decode with several slices and query heads
 * sharing a KV head; *taken = 0 where it does not apply. */
int dp_cu_attn_gqa(const AttnLaunch *A, cudaStream_t st, int *taken);
/* k_attn_gqa's slices per KV head for a step that k_attn_split cuts into
 * `slices` per query head (G query heads a KV head, at most `splits` for
 * the scratch); host code. */
int dp_cu_gqa_slices(int slices, int G, int splits);
/* CUDA sessions alive in this process (delta +1 at creation, -1 when freed;
 * returns the new count). k_attn_gqa's slices wait for each other only
 * while one session is alive: graphs captured then are the only ones that
 * spin, so two grids that each need the whole GPU never wait on each other. */
int dp_cu_sessions(int delta);
/* The key slices of a decode step that sees up to n_keys keys (a power of
 * two, so that few graphs cover every context), or 0 where the sliced
 * kernels do not take this head dimension (64, 128 and 256 they do). */
int dp_cu_attention_slices(int n_keys, int n_head, int head_dim);
/* Raises the kernels' shared-memory limits for this shape (before capture). */
int dp_cu_attention_init(int head_dim, int n_head, int n_head_kv);
/* Softmax weights [n][n_head][n_kv] for the attn_scores trace point. */
int dp_cu_attention_probs(const AttnLaunch *A, float *probs, int n_kv, cudaStream_t st);

/* ---------------------------------------------------------------- ops */

/* Row 0 of rows (KvPages): position += 1, token = the greedy argmax key's
 * (a chained decode step's input). */
int dp_cu_chain_input(int *rows, const unsigned long long *key, cudaStream_t st);
/* x[i] = dequant(embd row rows[i * ROW_INTS]) * scale for n rows read from
 * device memory; also resets the n_keys argmax keys (may be NULL). */
int dp_cu_embed(const DMat *embd, const int *rows, int n, float scale, float *x, unsigned long long *argmax_keys,
                int n_keys, cudaStream_t st);
/* Copies KV page src to page dst in every layer of the K and V pools
 * (layer_elems halves per layer, page_elems per page). */
int dp_cu_copy_page(__half *kc, __half *vc, int n_layer, size_t layer_elems, size_t page_elems, int src, int dst,
                    cudaStream_t st);
/* dst[j] = src[rows[j]] for n rows of d floats (rows in device memory). */
int dp_cu_gather_rows(float *dst, const float *src, const int *rows, int n, int d, cudaStream_t st);
/* out16 = f16(act(gate) * up), n values (the batched decode's FFN input). */
int dp_cu_gated_act_f16(__half *out16, const float *gate, const float *up, long long n, int act, cudaStream_t st);
/* The same over n rows of one product's joint output gu ([n][2 d]: a
 * row's d gate values, then its d up values) into out16 ([n][d]). */
int dp_cu_gated_act_joint_f16(__half *out16, const float *gu, int n, int d, int act, cudaStream_t st);
/* The same in f32, written over each row's up values (gu stays [n][2 d]). */
int dp_cu_gated_act_joint_inplace(float *gu, int n, int d, int act, cudaStream_t st);
/* keys[r] = argmax key of row r of x (n rows of d), for each row (reset by the caller). */
int dp_cu_argmax_rows(const float *x, int n, int d, unsigned long long *keys, cudaStream_t st);
/* out = x / rms(x) * (w + off), n rows of d; out16 (optional) gets f16 copies. */
int dp_cu_rmsnorm(float *out, __half *out16, const float *x, const float *w, float off, int n, int d, float eps,
                  cudaStream_t st);
/* The k-parts of a split product (dp_cu_gemm_parts) still to be summed:
 * n arrays of rows of ld floats, stride floats apart; n = 0: none. */
struct KParts {
    const float *p;
    int n, ld;
    long long stride;
};
/* x += the parts' sum ((p0 + p1) + ...), then dp_cu_rmsnorm of the new x
 * (its rows of d = kp.ld floats): the residual add of a split product
 * fused into the norm that reads it next. */
int dp_cu_rmsnorm_parts(float *out, __half *out16, float *x, const KParts *kp, const float *w, float off, int n,
                        int d, float eps, cudaStream_t st);
/* x += rmsnorm(o) * (w + off); o_normed (optional) gets the normalised o. */
int dp_cu_postnorm_add(float *x, const float *o, float *o_normed, const float *w, float off, int n, int d, float eps,
                       cudaStream_t st);

struct RopeLaunch {
    float *q, *k;
    const float *v;
    __half *kc, *vc;           /* this layer's page pool */
    KvPages kv;                /* each row's position, sequence and pages */
    int n, n_head, n_head_kv, head_dim, n_rot, neox;
    const float *q_norm, *k_norm; /* per-head RMSNorm weights, NULL = none */
    float norm_off, eps;
    const float *inv_freq;     /* [n_rot / 2]; n_rot 0: no RoPE */
    float rope_ms;             /* cos and sin times this (LongRoPE) */
    float *q_normed, *k_normed;/* optional copies after the norm (tracing) */
    /* qkv: when set, the rows' q, k and v side by side ([n][ld], one
     * product's output) with the biases bq, bk, bv (or NULL) still to add;
     * q and k are then written to q and k ([n][Q], [n][KV]), v only stored */
    const float *qkv, *bq, *bk, *bv;
    int ld;
    /* qkv as k-parts (dp_cu_gemm_parts) to sum: nparts arrays pstride floats apart (0: one array) */
    int nparts;
    long long pstride;
};
int dp_cu_qk_rope_store(const RopeLaunch *R, cudaStream_t st);

int dp_cu_gated_act(float *out, const float *gate, const float *up, long long n, int act, cudaStream_t st);
/* x = cap * tanh(x / cap) over n values (the final logits' soft-capping). */
int dp_cu_softcap(float *x, long long n, float cap, cudaStream_t st);
int dp_cu_add(float *x, const float *y, long long n, cudaStream_t st);
/* x[i][j] += b[j] for n rows of d. */
int dp_cu_add_bias(float *x, const float *b, int n, int d, cudaStream_t st);
int dp_cu_to_f16(__half *dst, const float *src, long long n, cudaStream_t st);
/* Rows r0 .. r0+nrows-1 of W as f16 (row-major, cols per row). */
int dp_cu_dequant_f16(const DMat *W, int r0, int nrows, __half *dst, cudaStream_t st);
/* Rows r0 .. r0+nrows-1 of W as f32, bit-exact with dp_dequantize_row. */
int dp_cu_dequant_f32(const DMat *W, int r0, int nrows, float *dst, cudaStream_t st);
/* out[n][W.rows] (row stride ldo) = in16[n][W.cols] . W^T + beta * out:
 * W dequantised to f16 in chunks of rows that fit w16 (w16_elems halves),
 * then cuBLAS on the tensor cores with f32 accumulation. */
int dp_cu_gemm(cublasHandle_t h, const DMat *W, const __half *in16, int n, float *out, int ldo, float beta,
               __half *w16, size_t w16_elems, cudaStream_t st);
/* The same product (beta 0) as parts k-slices of W's resident f16 copy in
 * one strided-batched GEMM: slice j's sums into part + j * pstride (rows of
 * ldo). More CTAs for the few rows of a batched decode step, and no
 * reduction launch: the kernel that reads the product next adds the parts
 * (KParts). W.cols must be a multiple of 8 * parts; dp_cu_gemm_parts_ok:
 * whether this cuBLAS has the call. */
int dp_cu_gemm_parts(cublasHandle_t h, const DMat *W, const __half *in16, int n, float *part, int ldo,
                     long long pstride, int parts, cudaStream_t st);
int dp_cu_gemm_parts_ok(void);
/* cuBLAS, loaded on first use (NULL when it cannot be: dp_cu_blas_error). */
cublasHandle_t dp_cu_blas_create(void);
void dp_cu_blas_destroy(cublasHandle_t h);
/* Gives the handle a workspace of its own (so that GEMMs captured in a
 * graph allocate nothing); 0 when set, -1 when this cuBLAS cannot. */
int dp_cu_blas_workspace(cublasHandle_t h, void *ws, size_t bytes);
const char *dp_cu_blas_error(void);
/* ------------------------------------------------------------ sampling */

enum { DP_SAMPLE_KMAX = 256, DP_SAMPLE_MAX_RECENT = 256 };
/* Sampler settings for the device (sample.cu), in device memory. */
struct DpSampleArgs {
    double u;         /* the host-drawn uniform in [0, 1) */
    float temp, top_p, min_p, penalty;
    int top_k;        /* 1 .. min(DP_SAMPLE_KMAX, n_vocab); 1 when temp <= 0 */
    int n_recent;     /* distinct recent tokens for the penalty */
    const uint32_t *allow; /* device memory, or NULL: the tokens that may be drawn (token t: bit t % 32 of word
                              t / 32), the others -inf after the penalty, as the host masks before sampling */
    int recent[DP_SAMPLE_MAX_RECENT];
};
/* Scratch candidates: dp_cu_sample_blocks(V) * top_k keys and ids. */
int dp_cu_sample_blocks(int V);
int dp_cu_sample(const float *logits, int V, const DpSampleArgs *P, uint32_t *ckey, int *cid, int *out,
                 cudaStream_t st);

/* Argmax of n floats into *key (reset by the caller). */
int dp_cu_argmax(const float *x, int n, unsigned long long *key, cudaStream_t st);

#endif
