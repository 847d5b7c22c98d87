/* Portable scalar kernels: every supported type through the block
 * dequantizers of quant.c, float products, double accumulation across
 * blocks. The reference the SIMD levels are tested against, and the path on
 * CPUs without AVX2. */
#include <math.h>
#include <string.h>

#include "../util.h"
#include "../quant_iq.h"
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
MV(IQ4_NL)
MV(IQ4_XS)
MV(IQ2_XXS)
MV(IQ2_XS)
MV(IQ2_S)
MV(IQ3_XXS)
MV(IQ3_S)
#undef MV

/* ------------------------------------------------------ integer path
 *
 * The reference for the SIMD integer kernels: the same integers (weight
 * codes with the block offset removed times x_int), summed
 * exactly per 16 values, then one float scale per half block. A weight unit
 * of 32 values: value j = f[j / 16] * c[j] + m (+ mh[j / 16] for Q2_K, whose
 * minimums go per 16 values: they take the sums of x_int over each 16, which
 * the kernels form exactly beside the products). */
typedef struct {
    int8_t c[32];
    float f[2], m, mh[2];
} unit32;

static float ldh(const uint8_t *p) { return dp_fp16_to_f32((uint16_t)(p[0] | p[1] << 8)); }

static void unit_q4_0(const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + 18 * u;
    for (int j = 0; j < 16; j++) o->c[j] = (int8_t)((b[2 + j] & 15) - 8), o->c[j + 16] = (int8_t)((b[2 + j] >> 4) - 8);
    o->f[0] = o->f[1] = ldh(b);
    o->m = 0.0f;
}
static void unit_q4_1(const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + 20 * u;
    for (int j = 0; j < 16; j++) o->c[j] = (int8_t)(b[4 + j] & 15), o->c[j + 16] = (int8_t)(b[4 + j] >> 4);
    o->f[0] = o->f[1] = ldh(b);
    o->m = ldh(b + 2);
}
static uint32_t ld32(const uint8_t *p) { return p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static void unit_q5_0(const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + 22 * u;
    uint32_t qh = ld32(b + 2);
    for (int j = 0; j < 16; j++) {
        o->c[j] = (int8_t)(((b[6 + j] & 15) | ((qh >> j) & 1) << 4) - 16);
        o->c[j + 16] = (int8_t)(((b[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16);
    }
    o->f[0] = o->f[1] = ldh(b);
    o->m = 0.0f;
}
static void unit_q5_1(const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + 24 * u;
    uint32_t qh = ld32(b + 4);
    for (int j = 0; j < 16; j++) {
        o->c[j] = (int8_t)((b[8 + j] & 15) | ((qh >> j) & 1) << 4);
        o->c[j + 16] = (int8_t)((b[8 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
    o->f[0] = o->f[1] = ldh(b);
    o->m = ldh(b + 2);
}
static void unit_q8_0(const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + 34 * u;
    memcpy(o->c, b + 2, 32);
    o->f[0] = o->f[1] = ldh(b);
    o->m = 0.0f;
}
/* Q4_K / Q5_K: 6-bit scale and minimum of sub-block j */
static void k4_scale(const uint8_t *q, int j, int *sc, int *mn) {
    if (j < 4) *sc = q[j] & 63, *mn = q[j + 4] & 63;
    else *sc = (q[j + 4] & 15) | (q[j - 4] >> 6) << 4, *mn = (q[j + 4] >> 4) | (q[j] >> 6) << 4;
}
static void unit_k45(const uint8_t *row, int64_t u, unit32 *o, int q5) {
    const uint8_t *b = row + (q5 ? 176 : 144) * (u / 8), *qs = b + (q5 ? 48 : 16) + 32 * ((u % 8) / 2);
    int j = (int)(u % 8), sc, mn;
    k4_scale(b + 4, j, &sc, &mn);
    for (int l = 0; l < 32; l++) {
        int v = j % 2 ? qs[l] >> 4 : qs[l] & 15;
        if (q5) v |= ((b[16 + l] >> j) & 1) << 4;
        o->c[l] = (int8_t)v;
    }
    o->f[0] = o->f[1] = ldh(b) * (float)sc;
    o->m = -ldh(b + 2) * (float)mn;
}
static void unit_q4_k(const uint8_t *row, int64_t u, unit32 *o) { unit_k45(row, u, o, 0); }
static void unit_q5_k(const uint8_t *row, int64_t u, unit32 *o) { unit_k45(row, u, o, 1); }
/* Q6_K unit u: half h = u / 4, group g = u % 4, values 128 h + 32 g + l */
static void unit_q6_k(const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + 210 * (u / 8);
    int h = (int)(u % 8) / 4, g = (int)(u % 4);
    const uint8_t *ql = b + 64 * h + 32 * (g & 1), *qh = b + 128 + 32 * h;
    for (int l = 0; l < 32; l++) {
        int lo4 = g < 2 ? ql[l] & 15 : ql[l] >> 4;
        o->c[l] = (int8_t)((lo4 | ((qh[l] >> (2 * g)) & 3) << 4) - 32);
    }
    float d = ldh(b + 208);
    const int8_t *sc = (const int8_t *)(b + 192) + 8 * h + 2 * g;
    o->f[0] = d * (float)sc[0];
    o->f[1] = d * (float)sc[1];
    o->m = 0.0f;
}

/* Q2_K / Q3_K unit u: half n = u / 4, group g = u % 4, values 128 n + 32 g + l
 * (l = 0..31): 2 bits at bit 2 g of qs[32 n + l]; Q3_K's third bit is bit u
 * of hmask[l] (clear: the code is 4 lower). Scales per 16 values: 2u, 2u + 1. */
static void unit_q2_k(const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + 84 * (u / 8), *qs = b + 16 + 32 * ((u % 8) / 4);
    const int g = (int)(u % 4), j = (int)(u % 8);
    for (int l = 0; l < 32; l++) o->c[l] = (int8_t)((qs[l] >> 2 * g) & 3);
    const float d = ldh(b + 80), dmin = ldh(b + 82);
    for (int h = 0; h < 2; h++) {
        o->f[h] = d * (float)(b[2 * j + h] & 15);
        o->mh[h] = -dmin * (float)(b[2 * j + h] >> 4);
    }
    o->m = 0.0f;
}
static void unit_q3_k(const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + 110 * (u / 8), *qs = b + 32 + 32 * ((u % 8) / 4);
    const int g = (int)(u % 4), j = (int)(u % 8);
    for (int l = 0; l < 32; l++) o->c[l] = (int8_t)(((qs[l] >> 2 * g) & 3) - ((b[l] >> j) & 1 ? 0 : 4));
    const float d = ldh(b + 108);
    o->f[0] = d * (float)dp_scale_q3_k(2 * j, b + 96);
    o->f[1] = d * (float)dp_scale_q3_k(2 * j + 1, b + 96);
    o->m = 0.0f;
}

/* IQ4_NL / IQ4_XS: the codebook values are the codes */
static void unit_iq4_nl(const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + 18 * u;
    for (int j = 0; j < 16; j++) o->c[j] = dp_iq4nl_values[b[2 + j] & 15], o->c[j + 16] = dp_iq4nl_values[b[2 + j] >> 4];
    o->f[0] = o->f[1] = ldh(b);
    o->m = 0.0f;
}
static void unit_iq4_xs(const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + 136 * (u / 8), *qs = b + 8 + 16 * (u % 8);
    int j = (int)(u % 8), ls = ((b[4 + j / 2] >> 4 * (j % 2)) & 15) | ((b[2 + j / 4] >> 2 * (j % 4)) & 3) << 4;
    for (int l = 0; l < 16; l++) o->c[l] = dp_iq4nl_values[qs[l] & 15], o->c[l + 16] = dp_iq4nl_values[qs[l] >> 4];
    o->f[0] = o->f[1] = ldh(b) * (float)(ls - 32);
    o->m = 0.0f;
}

/* IQ2 / IQ3 super-blocks: the signed grid magnitudes are the codes, a
 * scale per 32 values (per 16: IQ2_XS, IQ2_S) */
static void unit_iq23(const int type, const uint8_t *row, int64_t u, unit32 *o) {
    const uint8_t *b = row + (size_t)dp_iq_block_bytes(type) * (size_t)(u / 8);
    const int j = (int)(u % 8);
    for (int l = 0; l < 4; l++) {
        unsigned sg;
        const uint64_t g = dp_iq_group(type, b, j, l, &sg);
        for (int k = 0; k < 8; k++) {
            const int v = (int)(uint8_t)(g >> 8 * k);
            o->c[8 * l + k] = (int8_t)(sg >> k & 1 ? -v : v);
        }
    }
    const float d = ldh(b);
    for (int h = 0; h < 2; h++) o->f[h] = dp_iq_scale(type, d, dp_iq_scale_code(type, b, j, h));
    o->m = 0.0f;
}
static void unit_iq2_xxs(const uint8_t *row, int64_t u, unit32 *o) { unit_iq23(DP_TYPE_IQ2_XXS, row, u, o); }
static void unit_iq2_xs(const uint8_t *row, int64_t u, unit32 *o) { unit_iq23(DP_TYPE_IQ2_XS, row, u, o); }
static void unit_iq2_s(const uint8_t *row, int64_t u, unit32 *o) { unit_iq23(DP_TYPE_IQ2_S, row, u, o); }
static void unit_iq3_xxs(const uint8_t *row, int64_t u, unit32 *o) { unit_iq23(DP_TYPE_IQ3_XXS, row, u, o); }
static void unit_iq3_s(const uint8_t *row, int64_t u, unit32 *o) { unit_iq23(DP_TYPE_IQ3_S, row, u, o); }

/* mins16: the unit's minimums are mh (Q2_K), else m */
static void mvq_any(void (*unit)(const uint8_t *, int64_t, unit32 *), const int mins16, const uint8_t *w, size_t rb,
                    int64_t nrows, const dp_xq *x, int nx, float *out, int64_t os) {
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *row = w + (size_t)r * rb;
        double acc[DP_NX_MAX];
        for (int p0 = 0; p0 < nx; p0 += DP_NX_MAX) {
            int n = nx - p0 < DP_NX_MAX ? nx - p0 : DP_NX_MAX;
            for (int p = 0; p < n; p++) acc[p] = 0;
            for (int64_t b = 0; b < x->K / 32; b++) {
                unit32 u;
                unit(row, b, &u);
                for (int p = 0; p < n; p++) {
                    const dp_xq *xp = &x[p0 + p];
                    const int16_t *xi = xp->q16 + 32 * b;
                    int32_t I[2] = {0, 0}; /* |c| <= 128, |x_int| <= 32639: 16 products stay below 2^27 */
                    for (int j = 0; j < 32; j++) I[j / 16] += u.c[j] * xi[j];
                    acc[p] += (double)xp->d[b] * ((double)u.f[0] * I[0] + (double)u.f[1] * I[1]) + (double)u.m * xp->s[b];
                    if (mins16) {
                        int32_t X[2] = {0, 0}; /* 16 codes: below 2^19 */
                        for (int j = 0; j < 32; j++) X[j / 16] += xi[j];
                        acc[p] += (double)xp->d[b] * ((double)u.mh[0] * X[0] + (double)u.mh[1] * X[1]);
                    }
                }
            }
            for (int p = 0; p < n; p++) out[(p0 + p) * os + r] = (float)acc[p];
        }
    }
}

#define MVQ(T, U)                                                                                               \
    static void mvq_##T(const uint8_t *w, size_t rb, int64_t nrows, const dp_xq *x, int nx, float *out,       \
                        int64_t os) {                                                                           \
        mvq_any(U, DP_TYPE_##T == DP_TYPE_Q2_K, w, rb, nrows, x, nx, out, os);                                 \
    }
MVQ(Q4_0, unit_q4_0)
MVQ(Q4_1, unit_q4_1)
MVQ(Q5_0, unit_q5_0)
MVQ(Q5_1, unit_q5_1)
MVQ(Q8_0, unit_q8_0)
MVQ(Q2_K, unit_q2_k)
MVQ(Q3_K, unit_q3_k)
MVQ(Q4_K, unit_q4_k)
MVQ(Q5_K, unit_q5_k)
MVQ(Q6_K, unit_q6_k)
MVQ(IQ4_NL, unit_iq4_nl)
MVQ(IQ4_XS, unit_iq4_xs)
MVQ(IQ2_XXS, unit_iq2_xxs)
MVQ(IQ2_XS, unit_iq2_xs)
MVQ(IQ2_S, unit_iq2_s)
MVQ(IQ3_XXS, unit_iq3_xxs)
MVQ(IQ3_S, unit_iq3_s)
#undef MVQ

/* element i of a row of float32 (wh 0) or f16 (wh 1) elements; unchecked,
 * as gemm_any is (a check per element made the scalar level, which the
 * sanitizer suite runs real models on, several times slower there) */
DP_ASAN_BULK static inline float elem(const void *a, int wh, int64_t i) {
    return wh ? dp_fp16_to_f32(((const uint16_t *)a)[i]) : ((const float *)a)[i];
}

DP_ASAN_BULK static void gemm_any(const void *W, int wh, int64_t ws, int64_t R, const float *X, int64_t xs, int64_t P,
                                  int64_t K, float *C, int64_t os, int acc) {
    dp_asan_gemm(W, wh ? 2 : 4, ws, R, X, xs, P, K, C, os);
    for (int64_t p = 0; p < P; p++)
        for (int64_t r = 0; r < R; r++) {
            const void *a = (const uint8_t *)W + r * ws * (wh ? 2 : 4);
            const float *b = X + p * xs;
            float s[8] = {0};
            int64_t k = 0;
            for (; k + 8 <= K; k += 8)
                for (int u = 0; u < 8; u++) s[u] += elem(a, wh, k + u) * b[k + u];
            for (; k < K; k++) s[0] += elem(a, wh, k) * b[k];
            float v = ((s[0] + s[4]) + (s[1] + s[5])) + ((s[2] + s[6]) + (s[3] + s[7]));
            C[p * os + r] = acc ? C[p * os + r] + v : v;
        }
}

static void gemm_scalar(const float *W, int64_t ws, int64_t R, const float *X, int64_t xs, int64_t P, int64_t K,
                        float *C, int64_t os, int acc) {
    gemm_any(W, 0, ws, R, X, xs, P, K, C, os, acc);
}

static void gemm_w16_scalar(const uint16_t *W, int64_t ws, int64_t R, const float *X, int64_t xs, int64_t P, int64_t K,
                            float *C, int64_t os, int acc) {
    gemm_any(W, 1, ws, R, X, xs, P, K, C, os, acc);
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

static void wsum_scalar(float *y, int64_t ys, int ny, const float *w, int64_t ws, const float *x, int64_t xs, int nx,
                        int64_t n) {
    for (int h = 0; h < ny; h++)
        for (int r = 0; r < nx; r++) axpy_scalar(y + h * ys, w[h * ws + r], x + r * xs, n);
}

static void wsum_x16_scalar(float *y, int64_t ys, int ny, const float *w, int64_t ws, const uint16_t *x, int64_t xs,
                            int nx, int64_t n) {
    for (int h = 0; h < ny; h++)
        for (int r = 0; r < nx; r++)
            for (int64_t k = 0; k < n; k++) y[h * ys + k] += w[h * ws + r] * dp_fp16_to_f32(x[r * xs + k]);
}

static void scale_scalar(float *y, float a, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] *= a;
}

static float maxv_scalar(const float *x, int64_t n) {
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
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
               ENTRY(Q2_K), ENTRY(Q3_K), ENTRY(Q4_K), ENTRY(Q5_K), ENTRY(Q6_K), ENTRY(IQ4_NL), ENTRY(IQ4_XS),
               ENTRY(IQ2_XXS), ENTRY(IQ2_XS), ENTRY(IQ2_S), ENTRY(IQ3_XXS), ENTRY(IQ3_S)},
    .dequant = {DENTRY(F32), DENTRY(F16), DENTRY(BF16), DENTRY(Q4_0), DENTRY(Q4_1), DENTRY(Q5_0), DENTRY(Q5_1),
                DENTRY(Q8_0), DENTRY(Q2_K), DENTRY(Q3_K), DENTRY(Q4_K), DENTRY(Q5_K), DENTRY(Q6_K), DENTRY(IQ4_NL),
                DENTRY(IQ4_XS), DENTRY(IQ2_XXS), DENTRY(IQ2_XS), DENTRY(IQ2_S), DENTRY(IQ3_XXS), DENTRY(IQ3_S)},
    .matvec_q = {[DP_TYPE_Q4_0] = mvq_Q4_0, [DP_TYPE_Q4_1] = mvq_Q4_1, [DP_TYPE_Q5_0] = mvq_Q5_0,
                 [DP_TYPE_Q5_1] = mvq_Q5_1, [DP_TYPE_Q8_0] = mvq_Q8_0, [DP_TYPE_Q2_K] = mvq_Q2_K,
                 [DP_TYPE_Q3_K] = mvq_Q3_K, [DP_TYPE_Q4_K] = mvq_Q4_K,
                 [DP_TYPE_Q5_K] = mvq_Q5_K, [DP_TYPE_Q6_K] = mvq_Q6_K, [DP_TYPE_IQ4_NL] = mvq_IQ4_NL,
                 [DP_TYPE_IQ4_XS] = mvq_IQ4_XS, [DP_TYPE_IQ2_XXS] = mvq_IQ2_XXS, [DP_TYPE_IQ2_XS] = mvq_IQ2_XS,
                 [DP_TYPE_IQ2_S] = mvq_IQ2_S, [DP_TYPE_IQ3_XXS] = mvq_IQ3_XXS, [DP_TYPE_IQ3_S] = mvq_IQ3_S},
    .gemm = gemm_scalar,
    .gemm_w16 = gemm_w16_scalar,
    .dot = dot_scalar,
    .axpy = axpy_scalar,
    .wsum = wsum_scalar,
    .wsum_x16 = wsum_x16_scalar,
    .scale = scale_scalar,
    .maxv = maxv_scalar,
    .exp_sum = exp_sum_scalar,
    .silu_mul = silu_mul_scalar,
    .gelu_mul = gelu_mul_scalar,
    .sumsq = sumsq_scalar,
};
