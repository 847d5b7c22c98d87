/* CPU compute kernels, one table per instruction set, chosen at run time.
 *
 * Two activation paths for the quantised products:
 *  - float32 (matvec, gemm): weights are decoded block by block in
 *    registers (or into panels of a prompt's blocked matmul) and multiplied
 *    with float FMAs. Used for 2..DP_NX_MAX positions, for the types
 *    without an integer kernel, and everywhere with DOPPLER_CPU_ACT=f32.
 *  - 16-bit integer (the default): single positions (matvec_q) and, where
 *    the level has igemm (AVX-512 VNNI; AVX-VNNI at the avx2 level),
 *    prompts' blocked rows (dp_iblocks). x is
 *    quantised once per matmul call to 16 bits per block of 32 (dp_xq
 *    below) and the kernels multiply 16-bit weight codes with it (AVX-512
 *    VNNI vpdpwssd, AVX2 vpmaddwd, scalar C), converting to float once per
 *    block (the SIMD kernels: once per group of 8 blocks, whose integer
 *    sums they merge into the lanes of one vector); up to DP_NX_MAX
 *    positions share each decoded block. Logits
 *    move by ~1e-4 rel-L2 against the float path (8-bit activation
 *    blocks, as llama.cpp uses, move them 2-4e-2: far outside the 1e-3
 *    fidelity bound; see BENCHMARKS.md, CPU section).
 *
 *   scalar  portable C, every supported type (always present)
 *   avx2    AVX2 + FMA + F16C
 *   avx512  AVX-512 F/BW/VL (16-wide versions of the avx2 kernels); the
 *           integer kernels use VNNI when the CPU has it, else avx2's
 *
 * DOPPLER_CPU=scalar|avx2|avx512|auto picks a level (never above what the CPU
 * has; unknown values are an error reported once, then auto).
 * DOPPLER_CPU_ACT=int16|f32|auto picks the activation path (auto: int16 on
 * CPUs with SIMD kernels, f32 on the others, where the scalar integer
 * kernels - a reference - are slower than the scalar float ones; f32 is for
 * debugging: it takes the float kernels everywhere; unknown values are an
 * error reported once, then auto). */
#ifndef DP_CPU_KERNELS_H
#define DP_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "../quant.h"

/* Most positions one matvec call handles while reading each weight once. */
#define DP_NX_MAX 4

typedef enum { DP_ISA_SCALAR = 0, DP_ISA_AVX2 = 1, DP_ISA_AVX512 = 2, DP_ISA_COUNT } dp_isa;

/* out[p * os + r] = dot(weight row r, x[p * xs ..]) for r < nrows, p < nx
 * (1..DP_NX_MAX). Rows are row_bytes apart and hold K elements. xsum holds,
 * for types with a per-block minimum (Q4_1, Q5_1, Q4_K, Q5_K), the sums of
 * each 32 consecutive x values: xsum[p * (K / 32) + b]; NULL otherwise. */
typedef void (*dp_matvec_fn)(const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t K, const float *x,
                             int64_t xs, const float *xsum, int nx, float *out, int64_t os);
/* One position's activations quantised for the integer kernels. Per block
 * b of 32 values: d[b] = amax / DP_XQ_MAX (0 for an all-zero block; NaN/inf
 * when the block holds a non-finite value, so the result is NaN) and
 * x_int = round(x / d) in [-DP_XQ_MAX, DP_XQ_MAX], kept as
 *   q16[k]:      x_int as int16 in value order (the scalar kernels)
 *   s[b]:        d[b] times the block's sum of x_int (per-block minimums)
 *   pq[128 j ..]: blocks 4j .. 4j + 3 (A, B, C, D) in the order of the
 *                SIMD kernels' quads (x86/matvec_int.h): for m = 0..3, 16
 *                "even" then 16 "odd" values, int16 pair t of each being
 *                values v + 0, v + 2 (even) or v + 1, v + 3 (odd) of block
 *                (A, C, A, C, B, D, B, D)[t], v = 8 m + 4 ((t % 4) / 2); a
 *                16-bit multiply-add of weight codes in the same order gives
 *                int32 lanes that each sum values of one block. When K / 32
 *                leaves 1 or 2 blocks past a multiple of 4, their quad is a
 *                pair instead: 16-value runs of A then B (zero if absent),
 *                even values 0..14, odd 1..15, even 16..30, odd 17..31
 *   dg, sg:      d and s per group of 8 blocks in the order 0, 4, 2, 6, 1,
 *                5, 3, 7 (the lanes those kernels merge a group into)
 *   sg16:        per group 16 floats: d times the sum of x_int over values
 *                0..15 of each block in the lanes of dg, then over 16..31
 *                (the per-16 minimums of Q2_K)
 * pq, dg, sg and sg16 are zero past K up to a multiple of 256 values.
 * DP_XQ_MAX = 127 * 256 + 127 (not the int16 maximum) is the range every
 * integer-path result so far was computed with (it once had to split into
 * two signed bytes); changing it would move every decode logit. */
#define DP_XQ_MAX 32639
typedef struct {
    int64_t K; /* a multiple of 32 */
    int16_t *q16, *pq;
    float *d, *s, *dg, *sg, *sg16;
} dp_xq;

/* Block b's sums of values 0..15 (lo) and 16..31 (hi) into sg16 */
static inline void dp_xq_put_sg16(dp_xq *q, int64_t b, float lo, float hi) {
    static const int lane[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    float *g = q->sg16 + 16 * (b / 8) + lane[b % 8];
    g[0] = lo;
    g[8] = hi;
}

/* Allocates the planes for K (rounded up to 32; pq, dg, sg, sg16: to 256)
 * values; 0 or -1. */
int dp_xq_alloc(dp_xq *q, int64_t K);
void dp_xq_free(dp_xq *q);

/* The block-interleaved int16 layout of the integer prompt products
 * (igemm.c builds it, x86/igemm.h multiplies it): a row's values in groups
 * of 16 blocks of 32 (DP_IGROUP int16 each, zero past the row's end);
 * group step s (0..15) is 64 bytes whose int32 lane i holds values 2s and
 * 2s + 1 of the group's block i, so that one vpdpwssd per step sums each
 * block in a lane of its own. Per block, in the same lane order, a scale a
 * and a minimum term m:
 *   weight rows: w = a q + m (codes q exact integers, |q| < 2^11, or
 *                with half set |q| <= 2^12; m NULL where the type has no
 *                block minimum);
 *   positions:   x ~ a x_int (dp_xq's d and codes) and m = dp_xq's s
 *                (d times the block's sum of codes).
 * Rows follow each other gs groups apart (q: gs * DP_IGROUP int16, a and
 * m: gs * 16 floats). A block's 32 products fit an int32 lane while |q| x
 * DP_XQ_MAX x 32 < 2^31; codes up to 2^12 (Q6_K's 6-bit codes times their
 * 8-bit scale per 16 values) need the integer sums taken 16 values at a
 * time (half). */
#define DP_IGROUP 512
typedef struct {
    const int16_t *q;
    const float *a, *m;
    int64_t gs;
    int half; /* weight rows: integer sums of 16 values at a time */
} dp_iblocks;

/* Whether the integer prompt products take this weight type (igemm.c),
 * and whether its codes need half (Q6_K). */
int dp_iblocks_type_ok(int type);
int dp_iblocks_half(int type);
/* Weight rows w[0..nr) (row_bytes apart), columns k0..k0+kc-1 (k0 a
 * multiple of DP_IGROUP, kc of 32) into the layout: ceil(kc / DP_IGROUP)
 * groups per row at q, a, m (m written only for types with a minimum). */
void dp_iblocks_weights(int type, const uint8_t *w, size_t row_bytes, int64_t nr, int64_t k0, int64_t kc, int16_t *q,
                        float *a, float *m);
/* One quantised position (dp_xq_quantize) into the layout: ceil(K /
 * DP_IGROUP) groups at q, a (d), m (s). */
void dp_iblocks_position(const dp_xq *x, int16_t *q, float *a, float *m);

/* out[p * os + r] = dot(weight row r, quantised x[p]) for r < nrows and
 * p < nx (1..DP_NX_MAX; x[0..nx) quantised with the same K): integer
 * products per block, one conversion to float per block (K-quants: per
 * sub-block). Each weight block is decoded once for all nx positions, and
 * a position's result is bit-identical whatever nx is and whichever
 * positions share the call. */
typedef void (*dp_matvec_q_fn)(const uint8_t *w, size_t row_bytes, int64_t nrows, const dp_xq *x, int nx, float *out,
                               int64_t os);

/* One position's activations quantised to 8 bits per block of 32 for the
 * screening kernels (lm_screen.c), which bound an LM head's logits at half
 * the multiply-adds of the 16-bit path: codes q = round(x / d) in
 * [-127, 127], d = amax / 127, kept as
 *   q8:  the codes in value order
 *   p8:  the codes in the byte order of the SIMD kernels' quads: for
 *        m = 0..3 32 bytes, byte 4 t + k being value 8 m + 4 ((t % 4) / 2)
 *        + k of block (A, C, A, C, B, D, B, D)[t] (the order quad_mix
 *        gives the weight bytes); a last 1 or 2 blocks as a pair: A's
 *        values 0..15, B's 0..15, A's 16..31, B's 16..31
 *   d:   per block
 *   dg, sg, sgh: d, the sum of the block's codes and of its values
 *        16..31 alone, in group order (dp_xq's)
 * all zero past K up to a multiple of 256 values. */
typedef struct {
    int64_t K;
    int8_t *q8, *p8;
    float *d, *dg;
    int32_t *sg, *sgh;
} dp_xq8;

/* out[p * os + r] ~ dot(weight row r, x[p]) with the 8-bit codes of x (p <
 * nx, 1..DP_NX_MAX): exact integer products per block, one conversion to
 * float per group of 8 blocks, as dp_matvec_q_fn with x's other codes. */
typedef void (*dp_screen_fn)(const uint8_t *w, size_t row_bytes, int64_t nrows, const dp_xq8 *x, int nx, float *out,
                             int64_t os);

/* Dequantizes one row of K elements. */
typedef void (*dp_dequant_fn)(const void *row, float *dst, int64_t K);

typedef struct {
    const char *name;
    dp_isa isa;
    dp_matvec_fn matvec[DP_TYPE_COUNT];   /* NULL: not handled at this level */
    dp_matvec_q_fn matvec_q[DP_TYPE_COUNT]; /* integer path; NULL: the type has none */
    dp_screen_fn screen[DP_TYPE_COUNT];     /* 8-bit screening (VNNI only); NULL: none */
    /* the bounds of screened logits (x86/screen.h, scr_scan); with screen */
    int (*screen_scan)(const float *a, const float *wnorm, int64_t n, float beta, float *lo_max, int32_t *cand, int cap,
                       int32_t row0);
    /* block b of dp_xq_quantize (values xb[0..32)), the portable code's bits;
     * returns 0, or 1 for an all-zero or non-finite block, left untouched
     * for the portable code. NULL: the portable code does every block. */
    int (*xq_block)(dp_xq *q, const float *xb, int64_t b);
    /* pq of n whole quads from q16 (both pointing at quad 0's data), the
     * portable code's bits; NULL: the portable code builds it */
    void (*xq_quads)(const int16_t *q16, int16_t *pq, int64_t n);
    dp_dequant_fn dequant[DP_TYPE_COUNT];
    /* C[p * os + r] = sum over ng groups of weight row r (W, R rows) times
     * position p (X, P positions), both dp_iblocks; with acc, added to C.
     * VNNI (avx512) or AVX-VNNI (avx2) only; NULL: prompts multiply float
     * panels (gemm). */
    void (*igemm)(const dp_iblocks *W, int64_t R, const dp_iblocks *X, int64_t P, int64_t ng, float *C, int64_t os,
                  int acc);
    /* dp_iblocks_weights with SIMD decoding (with igemm) */
    void (*iweights)(int type, const uint8_t *w, size_t row_bytes, int64_t nr, int64_t k0, int64_t kc, int16_t *q,
                     float *a, float *m);
    /* C[p * os + r] = sum_k W[r * ws + k] * X[p * xs + k], r < R, p < P;
     * with acc, the sum is added to C. */
    void (*gemm)(const float *W, int64_t ws, int64_t R, const float *X, int64_t xs, int64_t P, int64_t K, float *C,
                 int64_t os, int acc);
    /* gemm with W's elements f16 (an f16 KV cache's keys; ws in elements):
     * bit-identical to gemm on W converted to float */
    void (*gemm_w16)(const uint16_t *W, int64_t ws, int64_t R, const float *X, int64_t xs, int64_t P, int64_t K,
                     float *C, int64_t os, int acc);
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n);   /* y += a x */
    /* y[h * ys + k] += w[h * ws + r] x[r * xs + k] for rows r = 0..nx-1 in
     * order, h < ny, k < n: bit-identical to those axpy calls */
    void (*wsum)(float *y, int64_t ys, int ny, const float *w, int64_t ws, const float *x, int64_t xs, int nx,
                 int64_t n);
    /* wsum with x's elements f16 (an f16 KV cache's values; xs in
     * elements): bit-identical to wsum on x converted to float */
    void (*wsum_x16)(float *y, int64_t ys, int ny, const float *w, int64_t ws, const uint16_t *x, int64_t xs, int nx,
                     int64_t n);
    void (*scale)(float *y, float a, int64_t n);                  /* y *= a */
    /* the largest of x[0..n) (NaN skipped, as a loop of "x > m ? x : m" would;
     * -inf for n = 0) */
    float (*maxv)(const float *x, int64_t n);
    /* x[i] = exp(x[i] - max), returns the sum (double accumulation) */
    double (*exp_sum)(float *x, float max, int64_t n);
    /* out = act(gate) * up; gelu uses tanh's form g * sigmoid(2u) */
    void (*silu_mul)(float *out, const float *gate, const float *up, int64_t n);
    void (*gelu_mul)(float *out, const float *gate, const float *up, int64_t n);
    /* sum of squares in double */
    double (*sumsq)(const float *x, int64_t n);
} dp_cpu_kernels;

extern const dp_cpu_kernels dp_kernels_scalar;
#if defined(__x86_64__) || defined(_M_X64)
extern const dp_cpu_kernels dp_kernels_avx2;
extern const dp_cpu_kernels dp_kernels_avx512;
#define DP_HAVE_X86_KERNELS 1
#endif

/* Quantises x[0..K) (K a multiple of 32, at most the allocated size) with
 * k's block kernel (NULL: portable C only); every level gives the same bits. */
void dp_xq_quantize(dp_xq *q, const float *x, int64_t K, const dp_cpu_kernels *k);

/* The 8-bit planes for K values; 0 or -1. */
int dp_xq8_alloc(dp_xq8 *q, int64_t K);
void dp_xq8_free(dp_xq8 *q);
/* Quantises x[0..K) (K a multiple of 32) to 8 bits; 0, or -1 when a
 * value is not finite (the planes are then unusable). */
int dp_xq8_quantize(dp_xq8 *q, const float *x, int64_t K);

/* The best level this CPU supports. */
dp_isa dp_cpu_isa_detect(void);
/* The table in use: the detected level capped by DOPPLER_CPU (read once). */
const dp_cpu_kernels *dp_cpu_kernels_get(void);
/* The table of a level, or NULL when the CPU cannot run it. Tests use this to
 * check every level; table entries left NULL fall back to the scalar ones. */
const dp_cpu_kernels *dp_cpu_kernels_for(dp_isa isa);
const char *dp_isa_name(dp_isa isa);
/* Makes dp_cpu_kernels_get() return this level (capped at the detected one)
 * from now on; for tests that compare levels through whole sessions. */
void dp_cpu_kernels_force(dp_isa isa);

/* Whether one-position matvecs take the integer path (DOPPLER_CPU_ACT,
 * read once; dp_cpu_act_force overrides it, for tests). */
int dp_cpu_act_int(void);
void dp_cpu_act_force(int use_int);

/* Under AddressSanitizer the float tile products (gemm) run uninstrumented
 * (DP_ASAN_BULK): a check on every vector load made them 5-10x slower and
 * most of the sanitizer suite's time. Each entry point first checks whole
 * the rows its arguments name (dp_asan_rows, ASan's ordinary report on a
 * bad byte), which covers every access of a correct gemm; what it cannot
 * see is gemm's own indexing leaving those rows, and that is two loops
 * bounded by R, P and K. The kernels that walk quantised blocks keep their
 * per-access checks. */
#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define DP_ASAN 1
#endif
#elif defined(__SANITIZE_ADDRESS__)
#define DP_ASAN 1
#endif
#ifdef DP_ASAN
#define DP_ASAN_BULK __attribute__((no_sanitize("address", "undefined")))
/* Reports the first unaddressable byte of `rows` rows of `bytes` bytes at p,
 * `stride` bytes apart, as an ASan error with the caller's stack. */
void dp_asan_rows(const void *p, int64_t stride, int64_t rows, int64_t bytes);
#else
#define DP_ASAN_BULK
static inline void dp_asan_rows(const void *p, int64_t stride, int64_t rows, int64_t bytes) {
    (void)p, (void)stride, (void)rows, (void)bytes;
}
#endif
/* The ranges dp_kernels.gemm (W's elements of wb bytes: 4, or 2 for
 * gemm_w16) reads and writes. */
static inline void dp_asan_gemm(const void *W, int64_t wb, int64_t ws, int64_t R, const float *X, int64_t xs,
                                int64_t P, int64_t K, const float *C, int64_t os) {
    dp_asan_rows(W, ws * wb, R, K * wb);
    dp_asan_rows(X, xs * 4, P, K * 4);
    dp_asan_rows(C, os * 4, P, R * 4);
}

/* Whether a type's matvec needs the per-32 sums of x. */
static inline int dp_type_needs_xsum(int type) {
    return type == DP_TYPE_Q4_1 || type == DP_TYPE_Q5_1 || type == DP_TYPE_Q4_K || type == DP_TYPE_Q5_K;
}

#endif
