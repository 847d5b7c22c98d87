/* Portable scalar kernels: every supported type through the block
 * dequantizers of quant.c, float products, double accumulation across
 * blocks. The reference the SIMD levels are tested against, and the path on
 * CPUs without AVX2. */
#include <math.h>
#include <string.h>

#include "kernels.h"

/* Elements dequantized at a time (a multiple of every block size). */
#define CHUNK 256

static void matvec_any(int type, const uint8_t *w, size_t row_bytes, int64_t nrows, int64_t K, const float *x,
                       int64_t xs, int nx, float *out, int64_t os) {
    float buf[CHUNK];
    const dp_type_traits *t = dp_type_get(type);
    int64_t chunk = t->block_size == 1 ? CHUNK : (CHUNK / t->block_size) * t->block_size;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *row = w + (size_t)r * row_bytes;
        double acc[DP_NX_MAX] = {0};
        for (int64_t i = 0; i < K; i += chunk) {
            int64_t k = K - i < chunk ? K - i : chunk;
            dp_dequantize_row(type, row + dp_row_size(type, i), buf, k);
            for (int p = 0; p < nx; p++) {
                const float *xp = x + p * xs + i;
                float s[8] = {0};
                int64_t j = 0;
                for (; j + 8 <= k; j += 8)
                    for (int u = 0; u < 8; u++) s[u] += buf[j + u] * xp[j + u];
                for (; j < k; j++) s[0] += buf[j] * xp[j];
                acc[p] += ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
            }
        }
        for (int p = 0; p < nx; p++) out[p * os + r] = (float)acc[p];
    }
}

#define MV(T)                                                                                                   \
    static void matvec_##T(const uint8_t *w, size_t rb, int64_t nrows, int64_t K, const float *x, int64_t xs, \
                           const float *xsum, int nx, float *out, int64_t os) {                                  \
        (void)xsum;                                                                                               \
        matvec_any(DP_TYPE_##T, w, rb, nrows, K, x, xs, nx, out, os);                                           \
    }                                                                                                             \
    static void dequant_##T(const void *row, float *dst, int64_t K) { dp_dequantize_row(DP_TYPE_##T, row, dst, K); }
MV(F32)
MV(F16)
MV(BF16)
MV(Q4_0)
MV(Q4_1)
MV(Q5_0)
MV(Q5_1)
MV(Q8_0)
MV(Q2_K)
MV(Q3_K)
MV(Q4_K)
MV(Q5_K)
MV(Q6_K)
#undef MV

static void gemm_scalar(const float *W, int64_t ws, int64_t R, const float *X, int64_t xs, int64_t P, int64_t K,
                        float *C, int64_t os, int acc) {
    for (int64_t p = 0; p < P; p++)
        for (int64_t r = 0; r < R; r++) {
            const float *a = W + r * ws, *b = X + p * xs;
            float s[8] = {0};
            int64_t k = 0;
            for (; k + 8 <= K; k += 8)
                for (int u = 0; u < 8; u++) s[u] += a[k + u] * b[k + u];
            for (; k < K; k++) s[0] += a[k] * b[k];
            float v = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
            C[p * os + r] = acc ? C[p * os + r] + v : v;
        }
}

static float dot_scalar(const float *a, const float *b, int64_t n) {
    float s[8] = {0};
    int64_t k = 0;
    for (; k + 8 <= n; k += 8)
        for (int u = 0; u < 8; u++) s[u] += a[k + u] * b[k + u];
    for (; k < n; k++) s[0] += a[k] * b[k];
    return ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
}

static void axpy_scalar(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

static void scale_scalar(float *y, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}

static double exp_sum_scalar(float *x, float max, int64_t n) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        x[i] = expf(x[i] - max);
        sum += x[i];
    }
    return sum;
}

static void silu_mul_scalar(float *out, const float *gate, const float *up, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}

static void gelu_mul_scalar(float *out, const float *gate, const float *up, int64_t n) {
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (int64_t i = 0; i < n; i++) {
        float g = gate[i];
        out[i] = 0.5f * g * (1.0f + tanhf(k * (g + 0.044715f * g * g * g))) * up[i];
    }
}

static double sumsq_scalar(const float *x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)x[i] * x[i];
    return s;
}

#define ENTRY(T) [DP_TYPE_##T] = matvec_##T
#define DENTRY(T) [DP_TYPE_##T] = dequant_##T
const dp_cpu_kernels dp_kernels_scalar = {
    .name = "scalar",
    .isa = DP_ISA_SCALAR,
    .matvec = {ENTRY(F32), ENTRY(F16), ENTRY(BF16), ENTRY(Q4_0), ENTRY(Q4_1), ENTRY(Q5_0), ENTRY(Q5_1), ENTRY(Q8_0),
               ENTRY(Q2_K), ENTRY(Q3_K), ENTRY(Q4_K), ENTRY(Q5_K), ENTRY(Q6_K)},
    .dequant = {DENTRY(F32), DENTRY(F16), DENTRY(BF16), DENTRY(Q4_0), DENTRY(Q4_1), DENTRY(Q5_0), DENTRY(Q5_1),
                DENTRY(Q8_0), DENTRY(Q2_K), DENTRY(Q3_K), DENTRY(Q4_K), DENTRY(Q5_K), DENTRY(Q6_K)},
    .gemm = gemm_scalar,
    .dot = dot_scalar,
    .axpy = axpy_scalar,
    .scale = scale_scalar,
    .exp_sum = exp_sum_scalar,
    .silu_mul = silu_mul_scalar,
    .gelu_mul = gelu_mul_scalar,
    .sumsq = sumsq_scalar,
};
