/* doppler verify's per-op checks (ops.h): what the check files share. Each
 * check compares a CUDA kernel with the CPU backend's op (src/cpu/ops.h) or
 * a float64 reference on the same fresh random inputs, and reports one
 * PASS/FAIL line. Every output buffer is poisoned with NaN before the
 * kernel runs, so an unwritten element fails. */
#ifndef DP_VERIFY_CUH
#define DP_VERIFY_CUH

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda/kernels/kernels.cuh"

extern "C" {
#include "cpu/ops.h"
#include "sampler.h"
}

/* Limits: relative L2 of the products and attention (f16 / 16-bit operands
 * against float64 or the CPU), and of the ops computed like the CPU. */
static const double TOL = 1e-3, TOL_EXACT = 1e-5;

struct Rng {
    uint64_t s;
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    double unit() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
    float normal() {
        double u1 = unit(), u2 = unit();
        if (u1 < 1e-300) u1 = 1e-300;
        return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
};

struct Ctx {
    FILE *out;
    Rng rng;
    int fails, checks;
    cudaStream_t st;
    cpu_ctx cpu; /* the CPU ops the kernels are compared with */
};

void report(Ctx *c, int ok, const char *what, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Device buffers: allocated poisoned with NaN (0xFF bytes). */
template <typename T> T *dalloc(size_t n) {
    T *p = NULL;
    if (cudaMalloc((void **)&p, n * sizeof(T) + 16) != cudaSuccess) return NULL;
    cudaMemset(p, 0xFF, n * sizeof(T));
    return p;
}
template <typename T> void upload(T *d, const T *h, size_t n) { cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice); }
template <typename T> void download(T *h, const T *d, size_t n) { cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost); }
template <typename T> T *halloc(size_t n) { return (T *)malloc(sizeof(T) * (n ? n : 1)); }

/* A random matrix of type in the file layout: random quant bytes, sane f16
 * scales (so no Inf/NaN), normal floats for the float types. */
uint8_t *random_matrix(Rng &r, int type, int rows, int cols);

/* A random matrix on both sides: the file bytes, their CPU dequantisation
 * and the device upload. */
struct Mat {
    int type, rows, cols;
    uint8_t *host;
    float *deq; /* rows x cols */
    DMat dev;
    void *alloc;
};
int make_mat(Ctx *c, Mat *m, int type, int rows, int cols);
void free_mat(Mat *m);
/* y = W x accumulated in float64 (then rounded to float). */
void ref_matvec(const Mat *m, const float *x, float *y);

/* A paged K/V pool as the backend keeps it (kernels.cuh KvPages): each of
 * n_seq sequences' positions in pages of 1 << shift, the pages in a
 * shuffled order, so a kernel that ignores the page table reads the wrong
 * rows. rows: ROW_INTS per query row. */
struct Pages {
    int shift, n_pages, stride, n_seq;
    int *h_pt, *d_pt, *d_rows;
    KvPages kv() const {
        KvPages P;
        P.rows = d_rows, P.pt = d_pt, P.pt_stride = stride, P.page_shift = shift;
        return P;
    }
    /* the pool row of position pos of sequence seq */
    size_t row(int seq, int pos) const {
        return ((size_t)h_pt[seq * stride + (pos >> shift)] << shift) | (size_t)(pos & ((1 << shift) - 1));
    }
};
/* Pages for sequences of lens[i] positions (and a spare page each). */
void make_pages(Ctx *c, Pages *P, int n_seq, const int *lens, int shift);
/* The query rows: n of them, row i at pos[i] of sequence seq[i] (< 0: padding). */
void set_rows(Pages *P, int n, const int *pos, const int *seq);
void free_pages(Pages *P);
/* Scatters a sequence's contiguous cache (n_kv rows of kv_dim halves) into
 * a host copy of the pool (n_pages << shift rows). */
void scatter_cache(const Pages &P, int seq, const uint16_t *h, int n_kv, int kv_dim, uint16_t *pool);

/* The checks (check_*.cu); the tables of cases are in ops.cu. */
struct MatvecCase {
    int type, rows, cols;
};
void check_matvec(Ctx *c, const MatvecCase &k);
void check_multi(Ctx *c, const int *types, int cols, const int *rows);
void check_huge_refused(Ctx *c);

/* One attention check: decode (n = 1) or prefill (n > 1) of heads / kv_heads
 * of head_dim over a cache of pos0 + n keys. */
struct AttnCase {
    int heads, kv_heads, head_dim;
    int n = 1, pos0 = 0, window = 0;
    int splits = 32, min_keys = 128; /* k_attention */
    int exclude_self = 0;
    int slices = 0;                  /* > 0: the sliced decode kernels (runs says which) */
    int rope = 0;                    /* the q/k norm, RoPE and K/V store fused in (sliced kernels) */
    int qk_norm = 0, neox = 0, n_rot = 0; /* rope with n_rot 0: a NoPE layer */
    int runs = 0;                    /* sliced: RUN_* bits */
    float softcap = 0.0f;            /* scores soft-capped (Gemma 2) */
    float rope_ms = 1.0f;            /* cos/sin scale (LongRoPE's attention factor) */
};
enum { RUN_SPLIT = 1, RUN_GQA = 2, RUN_GQA_LAST = 4 }; /* k_attn_split; k_attn_gqa, its slices combining together / the last one */
void check_attention(Ctx *c, const AttnCase &k, int run);

void check_attention_seqs(Ctx *c);
/* k_mmv (batched decode products) of one format over nb rows of x. */
void check_mmv(Ctx *c, int type, int rows, int cols, int nb);
void check_mmv_jobs(Ctx *c, int type, int nb, int joint);
void check_mmv_gateup(Ctx *c, int type, int rows, int cols, int nb, int act);
void check_copy_page(Ctx *c);
void check_small_ops(Ctx *c);
void check_sampler(Ctx *c, int V);
void measure_speed(Ctx *c);

#endif
