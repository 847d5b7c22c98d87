/* Activations quantised to 16 bits per block of 32 for the integer matvec
 * kernels (layout: kernels.h, dp_xq). The matmul driver calls
 * dp_xq_quantize once per call for each single position; a kernel level's SIMD
 * block code does the blocks it can, this file's portable code the rest,
 * with the same bits, so levels differ only in float rounding. */
#include <math.h>
#include <string.h>

#include "../util.h"
#include "kernels.h"

int dp_xq_alloc(dp_xq *q, int64_t K) {
    memset(q, 0, sizeof *q);
    K = (K + 31) / 32 * 32;
    if (K < 32) K = 32;
    q->eo = dp_malloc_aligned((size_t)K * sizeof(int16_t));
    q->q16 = dp_malloc_aligned((size_t)K * sizeof(int16_t));
    q->d = dp_malloc_aligned((size_t)K / 32 * sizeof(float));
    q->s = dp_malloc_aligned((size_t)K / 32 * sizeof(float));
    if (!q->eo || !q->q16 || !q->d || !q->s) {
        dp_xq_free(q);
        return -1;
    }
    return 0;
}

void dp_xq_free(dp_xq *q) {
    dp_free_aligned(q->eo);
    dp_free_aligned(q->q16);
    dp_free_aligned(q->d);
    dp_free_aligned(q->s);
    memset(q, 0, sizeof *q);
}

/* round to nearest, ties to even (the default rounding mode), |y| < 2^51:
 * the same result as the SIMD conversions, without a library call */
static inline long round_even(double y) {
    const double magic = 6755399441055744.0; /* 1.5 * 2^52 */
    return (long)((y + magic) - magic);
}

/* The portable block code: every block at the scalar level, and the all-zero
 * and non-finite blocks the SIMD block kernels leave. */
static void xq_block(dp_xq *q, const float *xb, int64_t b) {
    float amax = 0.0f, chk = 0.0f;
    for (int i = 0; i < 32; i++) {
        float a = fabsf(xb[i]);
        amax = a > amax ? a : amax;
        chk += xb[i] * 0.0f; /* NaN when any value is not finite */
    }
    int16_t *eo = q->eo + 32 * b, *q16 = q->q16 + 32 * b;
    /* x / d in double: the rounding to x_int is the exact one */
    float d = amax / (float)DP_XQ_MAX;
    double inv = d > 0.0f ? 1.0 / d : 0.0;
    if (chk != 0.0f || amax == 0.0f) { /* non-finite (d carries the NaN) or all zero */
        if (chk != 0.0f) d = NAN;
        inv = 0.0;
    }
    int32_t sum = 0;
    for (int i = 0; i < 32; i++) {
        long v = inv > 0.0 ? round_even(xb[i] * inv) : 0;
        if (v > DP_XQ_MAX) v = DP_XQ_MAX;
        if (v < -DP_XQ_MAX) v = -DP_XQ_MAX;
        eo[i % 2 * 16 + i / 2] = (int16_t)v;
        q16[i] = (int16_t)v;
        sum += (int32_t)v;
    }
    q->d[b] = d;
    q->s[b] = d * (float)sum;
}

void dp_xq_quantize(dp_xq *q, const float *x, int64_t K, const dp_cpu_kernels *k) {
    q->K = K;
    int (*simd)(dp_xq *, const float *, int64_t) = k ? k->xq_block : NULL;
    for (int64_t b = 0; b < K / 32; b++)
        if (!simd || simd(q, x + 32 * b, b) != 0) xq_block(q, x + 32 * b, b);
}
