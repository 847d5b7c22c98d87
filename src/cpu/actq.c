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
    q->q16 = dp_malloc_aligned((size_t)K * sizeof(int16_t));
    q->d = dp_malloc_aligned((size_t)K / 32 * sizeof(float));
    q->s = dp_malloc_aligned((size_t)K / 32 * sizeof(float));
    const int64_t Kg = (K + 255) / 256 * 256;
    q->pq = dp_malloc_aligned((size_t)Kg * sizeof(int16_t));
    q->dg = dp_malloc_aligned((size_t)Kg / 32 * sizeof(float));
    q->sg = dp_malloc_aligned((size_t)Kg / 32 * sizeof(float));
    q->sg16 = dp_malloc_aligned((size_t)Kg / 16 * sizeof(float));
    if (!q->q16 || !q->d || !q->s || !q->pq || !q->dg || !q->sg || !q->sg16) {
        dp_xq_free(q);
        return -1;
    }
    return 0;
}

void dp_xq_free(dp_xq *q) {
    dp_free_aligned(q->q16);
    dp_free_aligned(q->d);
    dp_free_aligned(q->s);
    dp_free_aligned(q->pq);
    dp_free_aligned(q->dg);
    dp_free_aligned(q->sg);
    dp_free_aligned(q->sg16);
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
    int16_t *q16 = q->q16 + 32 * b;
    /* x / d in double: the rounding to x_int is the exact one */
    float d = amax / (float)DP_XQ_MAX;
    double inv = d > 0.0f ? 1.0 / d : 0.0;
    if (chk != 0.0f || amax == 0.0f) { /* non-finite (d carries the NaN) or all zero */
        if (chk != 0.0f) d = NAN;
        inv = 0.0;
    }
    int32_t sum[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        long v = inv > 0.0 ? round_even(xb[i] * inv) : 0;
        if (v > DP_XQ_MAX) v = DP_XQ_MAX;
        if (v < -DP_XQ_MAX) v = -DP_XQ_MAX;
        q16[i] = (int16_t)v;
        sum[i / 16] += (int32_t)v;
    }
    q->d[b] = d;
    q->s[b] = d * (float)(sum[0] + sum[1]);
    dp_xq_put_sg16(q, b, d * (float)sum[0], d * (float)sum[1]);
}

void dp_xq_quantize(dp_xq *q, const float *x, int64_t K, const dp_cpu_kernels *k) {
    q->K = K;
    int (*simd)(dp_xq *, const float *, int64_t) = k ? k->xq_block : NULL;
    const int64_t nb = K / 32, ng = (nb + 7) / 8 * 8;
    for (int64_t b = 0; b < nb; b++)
        if (!simd || simd(q, x + 32 * b, b) != 0) xq_block(q, x + 32 * b, b);
    /* the quad plane: block b is at position pos of quad b / 4, in lanes t0
     * and t0 + 2 of each m (t0 = 4 (pos & 1) + pos / 2), values 8 m + 4 h +
     * 0..3 in lane t0 + 2 h (even: + 0, + 2; odd: + 1, + 3); a last quad
     * of 1 or 2 blocks is a pair */
    const int64_t np = nb % 4 == 1 || nb % 4 == 2 ? nb / 4 * 4 : nb; /* blocks from here: pair order */
    int64_t b0 = 0;
    if (k && k->xq_quads) {
        k->xq_quads(q->q16, q->pq, np / 4);
        b0 = np / 4 * 4;
    }
    for (int64_t b = b0; b < np; b++) {
        const int16_t *v = q->q16 + 32 * b;
        const int pos = (int)(b % 4), t0 = 4 * (pos & 1) + pos / 2;
        for (int m = 0; m < 4; m++)
            for (int h = 0; h < 2; h++) {
                const int16_t *vv = v + 8 * m + 4 * h;
                int16_t *e = q->pq + 128 * (b / 4) + 32 * m + 2 * (t0 + 2 * h);
                e[0] = vv[0], e[1] = vv[2], e[16] = vv[1], e[17] = vv[3];
            }
    }
    if (np < nb) {
        /* the last 1 or 2 blocks as a pair (A, B): 16-value runs m = 0..3 of
         * A then B, even values 0..14, odd 1..15, even 16..30, odd 17..31 */
        int16_t *e = q->pq + 128 * (np / 4);
        for (int h = 0; h < 2; h++)
            for (int m = 0; m < 4; m++)
                for (int k = 0; k < 8; k++)
                    e[16 * m + 8 * h + k] = np + h < nb ? q->q16[32 * (np + h) + 16 * (m / 2) + 2 * k + m % 2] : 0;
        memset(e + 64, 0, sizeof(int16_t) * 64);
        const int64_t qz = np / 4 + 1;
        memset(q->pq + 128 * qz, 0, sizeof(int16_t) * (size_t)(128 * (ng / 4 - qz)));
    } else if (ng > nb) {
        /* the rest of the last group: zero (a quad with blocks past K keeps those slots zero) */
        const int64_t q0 = nb / 4;
        for (int64_t b = nb; b < (q0 + 1) * 4 && b < ng; b++) {
            const int pos = (int)(b % 4), t0 = 4 * (pos & 1) + pos / 2;
            for (int m = 0; m < 4; m++)
                for (int h = 0; h < 2; h++) {
                    int16_t *e = q->pq + 128 * q0 + 32 * m + 2 * (t0 + 2 * h);
                    e[0] = e[1] = e[16] = e[17] = 0;
                }
        }
        const int64_t qz = (nb + 3) / 4;
        memset(q->pq + 128 * qz, 0, sizeof(int16_t) * (size_t)(128 * (ng / 4 - qz)));
    }
    /* d and s in group order (its own inverse); sg16 was written per block */
    static const int gorder[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    for (int64_t b = 0; b < ng; b++) {
        const int64_t g = b / 8 * 8 + gorder[b % 8];
        q->dg[g] = b < nb ? q->d[b] : 0.0f;
        q->sg[g] = b < nb ? q->s[b] : 0.0f;
        if (b >= nb) dp_xq_put_sg16(q, b, 0.0f, 0.0f);
    }
}

/* ---------------------------------------------------- 8-bit (screening) */

int dp_xq8_alloc(dp_xq8 *q, int64_t K) {
    memset(q, 0, sizeof *q);
    const int64_t Kg = K < 256 ? 256 : (K + 255) / 256 * 256;
    q->q8 = dp_malloc_aligned((size_t)Kg);
    q->p8 = dp_malloc_aligned((size_t)Kg);
    q->d = dp_malloc_aligned((size_t)Kg / 32 * sizeof(float));
    q->dg = dp_malloc_aligned((size_t)Kg / 32 * sizeof(float));
    q->sg = dp_malloc_aligned((size_t)Kg / 32 * sizeof(int32_t));
    q->sgh = dp_malloc_aligned((size_t)Kg / 32 * sizeof(int32_t));
    if (!q->q8 || !q->p8 || !q->d || !q->dg || !q->sg || !q->sgh) {
        dp_xq8_free(q);
        return -1;
    }
    return 0;
}

void dp_xq8_free(dp_xq8 *q) {
    dp_free_aligned(q->q8);
    dp_free_aligned(q->p8);
    dp_free_aligned(q->d);
    dp_free_aligned(q->dg);
    dp_free_aligned(q->sg);
    dp_free_aligned(q->sgh);
    memset(q, 0, sizeof *q);
}

int dp_xq8_quantize(dp_xq8 *q, const float *x, int64_t K) {
    static const int gorder[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    q->K = K;
    const int64_t nb = K / 32, ng = (nb + 7) / 8 * 8;
    const int64_t np = nb % 4 == 1 || nb % 4 == 2 ? nb / 4 * 4 : nb; /* blocks from here: a pair */
    memset(q->p8, 0, (size_t)ng * 32);
    memset(q->dg, 0, sizeof(float) * (size_t)ng);
    memset(q->sg, 0, sizeof(int32_t) * (size_t)ng);
    memset(q->sgh, 0, sizeof(int32_t) * (size_t)ng);
    for (int64_t b = 0; b < nb; b++) {
        const float *xb = x + 32 * b;
        float amax = 0.0f, chk = 0.0f;
        for (int i = 0; i < 32; i++) {
            const float a = fabsf(xb[i]);
            amax = a > amax ? a : amax;
            chk += xb[i] * 0.0f;
        }
        if (chk != 0.0f || amax > 3.0e38f) return -1;
        const float d = amax / 127.0f;
        const double inv = d > 0.0f ? 1.0 / d : 0.0;
        int32_t sum = 0, sumh = 0;
        const int pos = (int)(b % 4), t0 = 4 * (pos & 1) + pos / 2;
        for (int i = 0; i < 32; i++) {
            long v = inv > 0.0 ? round_even(xb[i] * inv) : 0;
            if (v > 127) v = 127;
            if (v < -127) v = -127;
            sum += (int32_t)v;
            sumh += i >= 16 ? (int32_t)v : 0;
            q->q8[32 * b + i] = (int8_t)v;
            size_t at;
            if (b < np) { /* value 8 m + 4 h + k in lane t0 + 2 h of c[m] */
                const int m = i / 8, h = (i / 4) % 2, k = i % 4;
                at = (size_t)(128 * (b / 4) + 32 * m + 4 * (t0 + 2 * h) + k);
            } else {
                at = (size_t)(128 * (np / 4) + 32 * (i / 16) + 16 * (b - np) + i % 16);
            }
            q->p8[at] = (int8_t)v;
        }
        const int64_t g = b / 8 * 8 + gorder[b % 8];
        q->d[b] = d;
        q->dg[g] = d;
        q->sg[g] = sum;
        q->sgh[g] = sumh;
    }
    return 0;
}
