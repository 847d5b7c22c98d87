/* The activation quantiser's SIMD block kernel: one block of 32 values of
 * dp_xq_quantize (actq.c, which runs the loop over blocks), the same bits:
 * x / d in double, rounded to nearest even by vcvtpd2dq (the default
 * rounding mode, as the portable code's). Blocks that are all zero or hold
 * a non-finite value are left to the portable code. */
#ifndef DP_CPU_X86_ACTQ_H
#define DP_CPU_X86_ACTQ_H

#include "vec.h"

ALWAYS __m256i round8(const float *p, __m256d inv) {
    __m256 v = _mm256_loadu_ps(p);
    __m128i a = _mm256_cvtpd_epi32(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), inv));
    __m128i b = _mm256_cvtpd_epi32(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), inv));
    __m256i r = _mm256_set_m128i(b, a);
    return _mm256_max_epi32(_mm256_min_epi32(r, _mm256_set1_epi32(DP_XQ_MAX)), _mm256_set1_epi32(-DP_XQ_MAX));
}

/* Quantises block b (values xb[0..32)) into q; 0, or 1 when the block is
 * all zero or not finite and was left untouched. */
static int xq_block(dp_xq *q, const float *xb, int64_t b) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), big = _mm256_set1_ps(3.0e38f);
    __m256 a0 = _mm256_and_ps(_mm256_loadu_ps(xb), absm), a1 = _mm256_and_ps(_mm256_loadu_ps(xb + 8), absm);
    __m256 a2 = _mm256_and_ps(_mm256_loadu_ps(xb + 16), absm), a3 = _mm256_and_ps(_mm256_loadu_ps(xb + 24), absm);
    __m256 m = _mm256_max_ps(_mm256_max_ps(a0, a1), _mm256_max_ps(a2, a3));
    /* every |x| <= 3e38 (false for inf and NaN) */
    __m256 ok = _mm256_and_ps(_mm256_and_ps(_mm256_cmp_ps(a0, big, _CMP_LE_OQ), _mm256_cmp_ps(a1, big, _CMP_LE_OQ)),
                              _mm256_and_ps(_mm256_cmp_ps(a2, big, _CMP_LE_OQ), _mm256_cmp_ps(a3, big, _CMP_LE_OQ)));
    int fin = _mm256_movemask_ps(ok) == 0xff;
    __m128 l = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    l = _mm_max_ps(l, _mm_movehl_ps(l, l));
    l = _mm_max_ss(l, _mm_movehdup_ps(l));
    float amax = _mm_cvtss_f32(l);
    if (!fin || amax == 0.0f || amax > 3.0e38f) return 1;
    float d = amax / (float)DP_XQ_MAX;
    __m256d inv = _mm256_set1_pd(1.0 / d);
    __m256i v0 = round8(xb, inv), v1 = round8(xb + 8, inv), v2 = round8(xb + 16, inv), v3 = round8(xb + 24, inv);
    /* int16 in value order: packs interleaves the 128-bit lanes, 0xD8 restores the order */
    __m256i p0 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v0, v1), 0xD8);
    __m256i p1 = _mm256_permute4x64_epi64(_mm256_packs_epi32(v2, v3), 0xD8);
    _mm256_storeu_si256((__m256i *)(q->q16 + 32 * b), p0);
    _mm256_storeu_si256((__m256i *)(q->q16 + 32 * b + 16), p1);
    /* the sums of values 0..15 and 16..31: lanes 0 and 1 after the reduction */
    __m256i s = _mm256_hadd_epi32(_mm256_add_epi32(v0, v1), _mm256_add_epi32(v2, v3));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_hadd_epi32(t, t);
    const int32_t lo = _mm_cvtsi128_si32(t), hi = _mm_extract_epi32(t, 1);
    q->d[b] = d;
    q->s[b] = d * (float)(lo + hi);
    dp_xq_put_sg16(q, b, d * (float)lo, d * (float)hi);
    return 0;
}

/* The quad plane (kernels.h, dp_xq.pq) of n whole quads from q16: per
 * block, each 4-value run v0..v3 of the 8 runs becomes the dword pair
 * (v0, v2) (v1, v3), runs of m = 0..3 grouped as [e(h = 0), e(h = 1),
 * o(h = 0), o(h = 1)] in a 128-bit lane (one shuffle per 16 values); the
 * lanes of A and B, C and D are then interleaved as the kernels' quad_mix
 * interleaves the weight codes. */
static void xq_quads(const int16_t *q16, int16_t *pq, int64_t n) {
    /* int16 index within a 128-bit lane: v0 v2 (h = 0), v4 v6 (h = 1), v1 v3, v5 v7 */
    const __m256i sh = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15, 0, 1, 4, 5, 8, 9, 12, 13, 2,
                                        3, 6, 7, 10, 11, 14, 15);
    for (int64_t j = 0; j < n; j++, q16 += 128, pq += 128) {
        __m256i v[4][2]; /* block, values 0..15 (m = 0, 1) / 16..31 (m = 2, 3) */
        for (int k = 0; k < 4; k++)
            for (int t = 0; t < 2; t++)
                v[k][t] = _mm256_shuffle_epi8(_mm256_loadu_si256((const __m256i *)(q16 + 32 * k + 16 * t)), sh);
        for (int t = 0; t < 2; t++) {
            /* m = 2 t (the low lanes) and 2 t + 1 (the high ones) */
            const __m256i u0 = _mm256_permute2x128_si256(v[0][t], v[1][t], 0x20);
            const __m256i w0 = _mm256_permute2x128_si256(v[2][t], v[3][t], 0x20);
            const __m256i u1 = _mm256_permute2x128_si256(v[0][t], v[1][t], 0x31);
            const __m256i w1 = _mm256_permute2x128_si256(v[2][t], v[3][t], 0x31);
            _mm256_storeu_si256((__m256i *)(pq + 64 * t), _mm256_unpacklo_epi32(u0, w0));
            _mm256_storeu_si256((__m256i *)(pq + 64 * t + 16), _mm256_unpackhi_epi32(u0, w0));
            _mm256_storeu_si256((__m256i *)(pq + 64 * t + 32), _mm256_unpacklo_epi32(u1, w1));
            _mm256_storeu_si256((__m256i *)(pq + 64 * t + 48), _mm256_unpackhi_epi32(u1, w1));
        }
    }
}

#endif
