/* Host-side launchers of the CUDA kernels (one file per family: matvec.cu,
 * attention.cu, ops.cu, gemm.cu). Each returns DP_OK or DP_ERR_BACKEND with
 * the error recorded. */
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

/* A vector quantised for the integer matvec (matvec_q.cu): 16-bit values
 * q ~ x / dx per block of 32, kept as pieces of 4 positions (uint2: the 4
 * signed high bytes, the 4 unsigned low bytes), dx per 32 and the integer
 * sums of q per 16. piece == NULL: none. */
struct QXBuf {
    uint2 *piece; /* cols / 4 */
    float *dx;    /* cols / 32 */
    int *isum;    /* cols / 16 */
};

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
    /* integer path only (dp_cu_matvec_q_ok for every job's type): */
    QXBuf xq_in;         /* input already quantised (no norm); x is ignored */
    QXBuf xq_out;        /* MV_GATEUP: also quantise the output for the next matvec */
    int rows_per_group;  /* 0 = by the format; MV_GATEUP uses 4, and a separate gate or up
                            matvec must use 4 too to sum in the same order */
};

int dp_cu_matvec(const MvLaunch *L, cudaStream_t st);
/* Whether the integer path handles matrices of this type (and is enabled:
 * DOPPLER_CUDA_MVQ=0 turns it off). */
int dp_cu_matvec_q_ok(int type);
int dp_cu_matvec_q(const MvLaunch *L, cudaStream_t st);
/* Whether the integer path uses k_matvec_w (one warp per row group, the
 * default; DOPPLER_CUDA_MVW=0: the persistent k_matvec_q), which does not
 * quantise its output (xq_out) for the next launch. */
int dp_cu_matvec_w_on(void);
/* k_matvec_t (matvec_t.cu): the decode matvec for Q4_0, Q5_0, Q8_0, Q4_K
 * and Q6_K with the integer dot products on the tensor cores; opt-in
 * (DOPPLER_CUDA_MVT=1: measured slower than k_matvec_w in decode so far).
 * Launches it when it is on and can take L (*taken = 1), else leaves *taken
 * = 0. dp_cu_matvec_t_set(0/1) overrides the environment (verify checks
 * both kernels), -1 restores it. */
int dp_cu_matvec_t(const MvLaunch *L, int *taken, cudaStream_t st);
/* Whether k_matvec_t can take matrices of this type, and whether it is also on. */
int dp_cu_matvec_t_type(int type);
int dp_cu_matvec_t_ok(int type);
void dp_cu_matvec_t_set(int on);
/* Prepares the integer path for vectors of up to max_cols. */
int dp_cu_matvec_q_init(int max_cols);
/* Largest dynamic shared memory a matvec over cols inputs needs. */
size_t dp_cu_matvec_smem(int cols);
int dp_cu_matvec_init(size_t max_smem);

/* ---------------------------------------------------------- attention */

struct AttnLaunch {
    const float *q;            /* [n][n_head * head_dim], roped */
    float *out;                /* [n][n_head * head_dim] */
    const __half *k, *v;       /* this layer's cache [n_ctx][n_head_kv * head_dim] */
    const int *pos0;           /* device: first query position */
    int n, n_head, n_head_kv, head_dim;
    int window;                /* 0 = unlimited */
    float scale;
    int exclude_self;
    int splits;                /* max key splits per query and KV head */
    int min_keys;              /* fewest keys per split */
    float *part;               /* scratch: n * n_head * splits * (head_dim + 2) floats */
    int *counters;             /* n * n_head_kv ints, zero between launches */
    /* decode (n = 1) with rope set: q is this step's unrotated q; the kernel
     * applies the q/k norm and RoPE itself (as dp_cu_qk_rope_store would)
     * and stores this step's k and v (kf, vf: f32) into the cache */
    int rope;
    const float *kf, *vf;
    const float *q_norm, *k_norm; /* NULL = no per-head norm */
    float norm_off, eps;
    const float *inv_freq;
    int n_rot, neox;
    /* decode (n = 1): > 0 takes k_attn_split with this many key slices (a
     * power of two from dp_cu_attention_slices; more than one needs splits
     * >= slices for the scratch and n_head counters) */
    int slices;
    int gqa; /* k_attn_gqa for several slices: 0 as DOPPLER_CUDA_ATTN_GQA says, 1 where it applies, -1 never */
};

int dp_cu_attention(const AttnLaunch *A, cudaStream_t st);
/* k_attn_gqa (attn_gqa.cu): decode with several slices and query heads
 * sharing a KV head; *taken = 0 where it does not apply. */
int dp_cu_attn_gqa(const AttnLaunch *A, cudaStream_t st, int *taken);
/* Whether k_attn_gqa's slices wait for each other and combine together
 * (where they all fit on the GPU) instead of the last one combining; on < 0
 * only asks. Returns the previous setting (verify runs both). */
int dp_cu_attn_gqa_spin(int on);
/* CUDA sessions alive in this process (delta +1 at creation, -1 when freed;
 * returns the new count). k_attn_gqa's slices wait for each other only
 * while one session is alive: graphs captured then are the only ones that
 * spin, so two grids that each need the whole GPU never wait on each other. */
int dp_cu_sessions(int delta);
/* Whether decode attention can take the q/k norm + RoPE + K/V store (rope). */
int dp_cu_attention_fuses_rope(void);
/* The key slices of k_attn_split for a decode step that sees up to n_keys
 * keys (a power of two, so that few graphs cover every context; 0: the
 * kernel is off or does not take this head dimension), and whether it
 * supports this head dimension. */
int dp_cu_attention_slices(int n_keys, int n_head, int head_dim);
int dp_cu_attention_split_ok(int head_dim);
/* Raises the kernel's shared-memory limit for this shape (before capture). */
int dp_cu_attention_init(int head_dim, int n_head, int n_head_kv);
/* Softmax weights [n][n_head][n_kv] for the attn_scores trace point. */
int dp_cu_attention_probs(const AttnLaunch *A, float *probs, int n_kv, cudaStream_t st);

/* ---------------------------------------------------------------- ops */

/* io[0] += 1, io[1] = the token of the greedy argmax key (a chained decode step's input) */
int dp_cu_chain_input(int *io, const unsigned long long *key, cudaStream_t st);
/* x[i] = dequant(embd row tokens[i]) * scale for n tokens read from device
 * memory; also resets *argmax_key (may be NULL). */
int dp_cu_embed(const DMat *embd, const int *tokens, int n, float scale, float *x, unsigned long long *argmax_key,
                cudaStream_t st);
/* out = x / rms(x) * (w + off), n rows of d; out16 (optional) gets f16 copies. */
int dp_cu_rmsnorm(float *out, __half *out16, const float *x, const float *w, float off, int n, int d, float eps,
                  cudaStream_t st);
/* x += rmsnorm(o) * (w + off); o_normed (optional) gets the normalised o. */
int dp_cu_postnorm_add(float *x, const float *o, float *o_normed, const float *w, float off, int n, int d, float eps,
                       cudaStream_t st);

struct RopeLaunch {
    float *q, *k;
    const float *v;
    __half *kc, *vc;           /* this layer's cache */
    const int *pos0;           /* device */
    int n, n_head, n_head_kv, head_dim, n_rot, neox;
    const float *q_norm, *k_norm; /* per-head RMSNorm weights, NULL = none */
    float norm_off, eps;
    const float *inv_freq;     /* [n_rot / 2] */
    float *q_normed, *k_normed;/* optional copies after the norm (tracing) */
};
int dp_cu_qk_rope_store(const RopeLaunch *R, cudaStream_t st);

int dp_cu_gated_act(float *out, const float *gate, const float *up, long long n, int act, cudaStream_t st);
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
/* cuBLAS, loaded on first use (NULL when it cannot be: dp_cu_blas_error). */
cublasHandle_t dp_cu_blas_create(void);
void dp_cu_blas_destroy(cublasHandle_t h);
const char *dp_cu_blas_error(void);
/* ------------------------------------------------------------ sampling */

enum { DP_SAMPLE_KMAX = 256, DP_SAMPLE_MAX_RECENT = 256 };
/* Sampler settings for the device (sample.cu), in device memory. */
struct DpSampleArgs {
    double u;         /* the host-drawn uniform in [0, 1) */
    float temp, top_p, min_p, penalty;
    int top_k;        /* 1 .. min(DP_SAMPLE_KMAX, n_vocab); 1 when temp <= 0 */
    int n_recent;     /* distinct recent tokens for the penalty */
    int recent[DP_SAMPLE_MAX_RECENT];
};
/* Scratch candidates: dp_cu_sample_blocks(V) * top_k keys and ids. */
int dp_cu_sample_blocks(int V);
int dp_cu_sample(const float *logits, int V, const DpSampleArgs *P, uint32_t *ckey, int *cid, int *out,
                 cudaStream_t st);

/* Argmax of n floats into *key (reset by the caller). */
int dp_cu_argmax(const float *x, int n, unsigned long long *key, cudaStream_t st);

#endif
