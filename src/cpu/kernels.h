/* CPU compute kernels, one table per instruction set, chosen at run time.
 *
 * Activations stay float32: weights are decoded block by block in registers
 * and multiplied with float FMAs. (8-bit activation blocks, as llama.cpp
 * uses, move the logits of the real models by 2-4e-2 rel-L2, far outside the
 * 1e-3 fidelity bound; see BENCHMARKS.md, CPU section.)
 *
 *   scalar  portable C, every supported type (always present)
 *   avx2    AVX2 + FMA + F16C
 *   avx512  AVX-512 F/BW/VL (16-wide versions of the avx2 kernels)
 *
 * DOPPLER_CPU=scalar|avx2|avx512|auto picks a level (never above what the CPU
 * has; unknown values are an error reported once, then auto). */
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
/* Dequantizes one row of K elements. */
typedef void (*dp_dequant_fn)(const void *row, float *dst, int64_t K);

typedef struct {
    const char *name;
    dp_isa isa;
    dp_matvec_fn matvec[DP_TYPE_COUNT];   /* NULL: not handled at this level */
    dp_dequant_fn dequant[DP_TYPE_COUNT];
    /* C[p * os + r] = sum_k W[r * ws + k] * X[p * xs + k], r < R, p < P;
     * with acc, the sum is added to C. */
    void (*gemm)(const float *W, int64_t ws, int64_t R, const float *X, int64_t xs, int64_t P, int64_t K, float *C,
                 int64_t os, int acc);
    float (*dot)(const float *a, const float *b, int64_t n);
    void (*axpy)(float *y, float a, const float *x, int64_t n);   /* y += a x */
    void (*scale)(float *y, float a, int64_t n);                  /* y *= a */
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

/* Whether a type's matvec needs the per-32 sums of x. */
static inline int dp_type_needs_xsum(int type) {
    return type == DP_TYPE_Q4_1 || type == DP_TYPE_Q5_1 || type == DP_TYPE_Q4_K || type == DP_TYPE_Q5_K;
}

#endif
