/* Dequantisation kernels: one row of K weights to float32, for the blocked
 * matmul's panels. */
#ifndef DP_CPU_X86_DEQUANT_H
#define DP_CPU_X86_DEQUANT_H

#include "unpack.h"

/* dst[j] = q[j] d + m over 16 int8 values */
ALWAYS void put16(float *dst, __m128i q, float d, float m) {
    vf f[NV16];
    cvt16(q, f);
    UNROLL for (int v = 0; v < NV16; v++) vstore(dst + v * KVL, vfma(f[v], vset1(d), vset1(m)));
}

/* Q4_0 (codes - 8) and Q4_1 (codes d + m) blocks of 32 */
ALWAYS void dq_q4(const void *row, float *y, int64_t K, const int q41) {
    const uint8_t *b = row;
    for (int64_t i = 0; i < K; i += 32, b += q41 ? 20 : 18) {
        float d = h2f(b), m = q41 ? h2f(b + 2) : 0.0f;
        const uint8_t *qs = b + (q41 ? 4 : 2);
#if HAVE_LUT
        vf wv[2];
        dec_q4(qs, d, q41 ? m : -8.0f * d, wv);
        vstore(y + i, wv[0]);
        vstore(y + i + 16, wv[1]);
#else
        __m128i lo, hi;
        q4_codes(qs, q41 ? 0 : 8, &lo, &hi);
        put16(y + i, lo, d, m);
        put16(y + i + 16, hi, d, m);
#endif
    }
}
static void dq_q4_0(const void *row, float *y, int64_t K) { dq_q4(row, y, K, 0); }
static void dq_q4_1(const void *row, float *y, int64_t K) { dq_q4(row, y, K, 1); }

/* Q5_0 (codes - 16) and Q5_1 (codes d + m) blocks of 32 */
ALWAYS void dq_q5(const void *row, float *y, int64_t K, const int q51) {
    const uint8_t *b = row;
    for (int64_t i = 0; i < K; i += 32, b += q51 ? 24 : 22) {
        float d = h2f(b), m = q51 ? h2f(b + 2) : 0.0f;
        uint32_t qh = ld32(b + (q51 ? 4 : 2));
        const uint8_t *qs = b + (q51 ? 8 : 6);
#if HAVE_LUT
        vf wv[2];
        dec_q5(qs, qh, d, q51 ? m : -16.0f * d, wv);
        vstore(y + i, wv[0]);
        vstore(y + i + 16, wv[1]);
#else
        __m128i lo, hi;
        q5_codes(qs, qh, q51 ? 0 : 16, &lo, &hi);
        put16(y + i, lo, d, m);
        put16(y + i + 16, hi, d, m);
#endif
    }
}
static void dq_q5_0(const void *row, float *y, int64_t K) { dq_q5(row, y, K, 0); }
static void dq_q5_1(const void *row, float *y, int64_t K) { dq_q5(row, y, K, 1); }

static void dq_q8_0(const void *row, float *y, int64_t K) {
    const uint8_t *b = row;
    for (int64_t i = 0; i < K; i += 32, b += 34) {
        float d = h2f(b);
        put16(y + i, ld16(b + 2), d, 0.0f);
        put16(y + i + 16, ld16(b + 18), d, 0.0f);
    }
}

ALWAYS void dq_k45(const void *row, float *y, int64_t K, const int q5) {
    const uint8_t *b = row;
    const int bs = q5 ? 176 : 144;
    for (int64_t i = 0; i < K; i += QK_K, b += bs) {
        float d = h2f(b), dmin = h2f(b + 2);
        uint8_t sc[8], mn[8];
        scales_k4(b + 4, sc, mn);
        const uint8_t *qs = b + (q5 ? 48 : 16);
        __m128i h0 = q5 ? ld16(b + 16) : _mm_setzero_si128(), h1 = q5 ? ld16(b + 32) : _mm_setzero_si128();
        for (int j = 0; j < 4; j++) {
            float *yj = y + i + 64 * j;
            float d1 = d * sc[2 * j], m1 = -dmin * mn[2 * j], d2 = d * sc[2 * j + 1], m2 = -dmin * mn[2 * j + 1];
#if HAVE_LUT
            vf wv[4];
            __mmask16 hb[4];
            if (q5) q5k_masks(h0, h1, j, hb);
            dec_k_pair(qs + 32 * j, d1, m1, d2, m2, q5 ? hb : NULL, wv);
            for (int v = 0; v < 4; v++) vstore(yj + 16 * v, wv[v]);
#else
            __m128i c[4];
            k45_codes(qs + 32 * j, h0, h1, j, q5, c);
            put16(yj, c[0], d1, m1);
            put16(yj + 16, c[1], d1, m1);
            put16(yj + 32, c[2], d2, m2);
            put16(yj + 48, c[3], d2, m2);
#endif
        }
    }
}
static void dq_q4_k(const void *row, float *y, int64_t K) { dq_k45(row, y, K, 0); }
static void dq_q5_k(const void *row, float *y, int64_t K) { dq_k45(row, y, K, 1); }

static void dq_q6_k(const void *row, float *y, int64_t K) {
    const uint8_t *b = row;
    for (int64_t i = 0; i < K; i += QK_K, b += 210) {
        float d = h2f(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        for (int h = 0; h < 2; h++)
            for (int c = 0; c < 2; c++) {
                __m128i q[4];
                q6_groups(b + 64 * h, b + 128 + 32 * h, c, q);
                float *yh = y + i + 128 * h + 16 * c;
                for (int g = 0; g < 4; g++) put16(yh + 32 * g, q[g], d * (float)sc[8 * h + c + 2 * g], 0.0f);
            }
    }
}

/* Q2_K (codes 0..3 times d sc, less dmin m: 4-bit sc, m per 16 values) and
 * Q3_K (codes q - 4, the third bit j of hmask, times d times a signed 6-bit
 * scale per 16): value 128 n + 32 g + 16 c + l of a super-block has its 2
 * bits at 2 g of qs[32 n + 16 c + l] and its scale at 8 n + 2 g + c. */
ALWAYS void dq_k23(const void *row, float *y, int64_t K, const int q3) {
    const uint8_t *b = row;
    const __m128i m3 = _mm_set1_epi8(3), four = _mm_set1_epi8(4);
    for (int64_t i = 0; i < K; i += QK_K, b += q3 ? 110 : 84) {
        const float d = h2f(b + (q3 ? 108 : 80)), dmin = q3 ? 0.0f : h2f(b + 82);
        const uint8_t *qs = b + (q3 ? 32 : 16);
        for (int n = 0; n < 2; n++)
            for (int c = 0; c < 2; c++) {
                const __m128i v = ld16(qs + 32 * n + 16 * c), hm = q3 ? ld16(b + 16 * c) : _mm_setzero_si128();
                UNROLL for (int g = 0; g < 4; g++) {
                    const int j = 4 * n + g, s = 2 * j + c;
                    __m128i q = _mm_and_si128(_mm_srl_epi16(v, _mm_cvtsi32_si128(2 * g)), m3);
                    float *yo = y + i + 128 * n + 32 * g + 16 * c;
                    if (q3) {
                        const __m128i bit = _mm_set1_epi8((char)(1 << j));
                        q = _mm_sub_epi8(q, _mm_andnot_si128(_mm_cmpeq_epi8(_mm_and_si128(hm, bit), bit), four));
                        put16(yo, q, d * (float)dp_scale_q3_k(s, b + 96), 0.0f);
                    } else
                        put16(yo, q, d * (float)(b[s] & 15), -(dmin * (float)(b[s] >> 4)));
                }
            }
    }
}
static void dq_q2_k(const void *row, float *y, int64_t K) { dq_k23(row, y, K, 0); }
static void dq_q3_k(const void *row, float *y, int64_t K) { dq_k23(row, y, K, 1); }

static void dq_iq4_nl(const void *row, float *y, int64_t K) {
    const uint8_t *b = row;
    for (int64_t i = 0; i < K; i += 32, b += 18) {
        __m128i lo, hi;
        iq4_codes(b + 2, &lo, &hi);
        put16(y + i, lo, h2f(b), 0.0f);
        put16(y + i + 16, hi, h2f(b), 0.0f);
    }
}

static void dq_iq4_xs(const void *row, float *y, int64_t K) {
    const uint8_t *b = row;
    for (int64_t i = 0; i < K; i += QK_K, b += 136) {
        float d = h2f(b);
        for (int j = 0; j < 8; j++) {
            __m128i lo, hi;
            float dl = d * (float)iq4xs_scale(b, j);
            iq4_codes(b + 8 + 16 * j, &lo, &hi);
            put16(y + i + 32 * j, lo, dl, 0.0f);
            put16(y + i + 32 * j + 16, hi, dl, 0.0f);
        }
    }
}

static void dq_f16(const void *row, float *y, int64_t K) {
    const uint8_t *b = row;
    int64_t k = 0;
    for (; k + KVL <= K; k += KVL) vstore(y + k, load_f16(b + 2 * k));
    for (; k < K; k++) y[k] = h2f(b + 2 * k);
}

static void dq_bf16(const void *row, float *y, int64_t K) {
    const uint8_t *b = row;
    int64_t k = 0;
    for (; k + KVL <= K; k += KVL) vstore(y + k, load_bf16(b + 2 * k));
    for (; k < K; k++) y[k] = sc_bf16(b + 2 * k);
}

#endif
