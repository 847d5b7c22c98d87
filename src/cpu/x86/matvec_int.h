/* Integer matvec kernels (one position, x quantised by dp_xq_quantize): avx2 (KVL 8) uses vpmaddubsw + vpmaddwd, avx512
 * (KVL 16) VNNI's vpdpbusd / vpdpwssd (these functions carry the avx512vnni
 * target; kernels.c gives the avx512 level avx2's integer kernels when the
 * CPU lacks VNNI). Everything is 256 bits wide: one block of 32 values is
 * one vector of byte codes, 8 lanes of 32-bit sums.
 *
 * Per block: unsigned weight codes q (the block's offset not removed) times
 * the hi and lo planes of x, combined as 256 dot(q, hi) + dot(q, lo) in
 * int32 lanes (lane i: values 4i..4i+3), plus x's precomputed -off times
 * the lane's sum of x_int (dp_xq.noff), converted to float once and
 * multiplied by the weight scale times x's block scale.
 *
 * Bounds (codes q <= 63, |x_int| <= DP_XQ_MAX = 32639, hi in [-127, 127],
 * lo in [-128, 127]):
 *  - vpmaddubsw adds two products u8 * s8 into an int16 with saturation:
 *    |2 * 63 * 128| = 16128 < 32767, so it never saturates (it would for
 *    codes above 127; Q8_0's signed weights take the int16 path instead).
 *  - a lane before the offset: |sum of 4 q x_int| <= 4 * 63 * 32639 < 2^23;
 *    after it: |sum of 4 (q - off) x_int| <= 4 * 32 * 32639 < 2^22; with
 *    int16 x (Q8_0): |sum of 4 w x_int| <= 4 * 128 * 32639 < 2^24. So no
 *    int32 overflow, and the conversion to float is exact.
 *  - (AVX2) vpmaddwd of those int16 sums with 256: |2 * 16128 * 256| < 2^23. */

#ifndef DP_CPU_X86_MATVEC_INT_H
#define DP_CPU_X86_MATVEC_INT_H

#include "unpack.h"

#if KVL == 16
#define KINT __attribute__((target("avx512vnni")))
#else
#define KINT
#endif
#define IALWAYS static inline __attribute__((always_inline)) KINT

typedef __m256i vi;
#define ILOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define I8(c) _mm256_set1_epi8((char)(c))

IALWAYS float hsum8(__m256 a) {
    __m128 l = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    l = _mm_add_ps(l, _mm_movehl_ps(l, l));
    l = _mm_add_ss(l, _mm_movehdup_ps(l));
    return _mm_cvtss_f32(l);
}

/* 256 dot(q, hi) + dot(q, lo) + init per lane; p: the block's 64 plane bytes */
IALWAYS vi dot_hl_init(vi q, const int8_t *p, vi init) {
#if KVL == 16
    vi h = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, ILOAD(p));
    return _mm256_add_epi32(_mm256_slli_epi32(h, 8), _mm256_dpbusd_epi32(init, q, ILOAD(p + 32)));
#else
    vi h = _mm256_madd_epi16(_mm256_maddubs_epi16(q, ILOAD(p)), _mm256_set1_epi16(256));
    vi l = _mm256_madd_epi16(_mm256_maddubs_epi16(q, ILOAD(p + 32)), _mm256_set1_epi16(1));
    return _mm256_add_epi32(_mm256_add_epi32(h, l), init);
#endif
}

IALWAYS vi dot_hl(vi q, const int8_t *p) {
#if KVL == 16
    vi h = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, ILOAD(p));
    return _mm256_dpbusd_epi32(_mm256_slli_epi32(h, 8), q, ILOAD(p + 32));
#else
    vi h = _mm256_madd_epi16(_mm256_maddubs_epi16(q, ILOAD(p)), _mm256_set1_epi16(256));
    vi l = _mm256_madd_epi16(_mm256_maddubs_epi16(q, ILOAD(p + 32)), _mm256_set1_epi16(1));
    return _mm256_add_epi32(h, l);
#endif
}

/* the same with the code offset 8 << j removed (block b of x) */
IALWAYS vi dot_off(vi q, const dp_xq *x, int64_t b, const int j) {
    return dot_hl_init(q, x->q8 + 64 * b, ILOAD(x->noff + 24 * b + 8 * j));
}

/* 16 bytes of nibbles -> 32 codes: low nibbles (values 0..15), high (16..31) */
IALWAYS vi nib32(const uint8_t *p) {
    vi v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_set_epi64x(4, 4, 0, 0)), I8(0x0f));
}

/* Q5_0 / Q5_1: + 16 in byte j where bit j of qh is set */
IALWAYS vi add_q5_high(vi q, uint32_t qh) {
#if KVL == 16
    return _mm256_mask_add_epi8(q, (__mmask32)qh, q, I8(16));
#else
    const vi bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const vi sel = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0101010101010101ll, 0);
    vi m = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), sel), bit);
    return _mm256_or_si256(q, _mm256_and_si256(_mm256_cmpeq_epi8(m, bit), I8(16)));
#endif
}

/* acc += float(t) * s */
#define IACC(acc, t, s) acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(s), acc)

/* the f16 scales of 8 consecutive blocks (bs bytes apart), gathered in
 * scalar registers and converted together */
IALWAYS __m256 ld8_f16(const uint8_t *p, const int bs) {
    uint64_t lo = 0, hi = 0;
    UNROLL for (int k = 0; k < 4; k++) {
        uint16_t a, c;
        memcpy(&a, p + k * bs, 2);
        memcpy(&c, p + (k + 4) * bs, 2);
        lo |= (uint64_t)a << (16 * k);
        hi |= (uint64_t)c << (16 * k);
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)hi, (long long)lo));
}

/* Row loop of the 32-value block types. DOT(bp, i): the int32 lanes of
 * block i (bytes at bp), the code offset already removed (in integers).
 * Groups of 8 blocks: their scales d_w d_x come from one conversion; the
 * minimum at byte MINB (Q4_1, Q5_1) enters through x's block sums s, as
 * sum_b m_b s_b, one float term per row. Two accumulators take alternate
 * blocks. */
#define IROWS(BS, MINB, DOT)                                                                                     \
    const int64_t nb = x->K / 32;                                                                                \
    for (int64_t r = 0; r < nrows; r++) {                                                                        \
        const uint8_t *b = w + (size_t)r * rb;                                                                   \
        __m256 A = _mm256_setzero_ps(), B = _mm256_setzero_ps(), C = _mm256_setzero_ps();                        \
        float dds[8] __attribute__((aligned(32)));                                                               \
        int64_t i = 0;                                                                                           \
        for (; i + 8 <= nb; i += 8, b += 8 * (BS)) {                                                             \
            _mm256_store_ps(dds, _mm256_mul_ps(ld8_f16(b, BS), _mm256_loadu_ps(x->d + i)));                      \
            /* from memory: a broadcast load each, not two shuffles out of the register */                       \
            __asm__ volatile("" : "+m"(dds));                                                                    \
            if (MINB) C = _mm256_fmadd_ps(ld8_f16(b + (MINB), BS), _mm256_loadu_ps(x->s + i), C);                \
            UNROLL for (int k = 0; k < 8; k += 2) {                                                              \
                IACC(A, DOT(b + k * (BS), i + k), dds[k]);                                                       \
                IACC(B, DOT(b + (k + 1) * (BS), i + k + 1), dds[k + 1]);                                         \
            }                                                                                                    \
        }                                                                                                        \
        float c = 0.0f;                                                                                          \
        for (; i < nb; i++, b += (BS)) {                                                                         \
            IACC(A, DOT(b, i), h2f(b) * x->d[i]);                                                                \
            if (MINB) c += h2f(b + (MINB)) * x->s[i];                                                            \
        }                                                                                                        \
        out[r] = hsum8(_mm256_add_ps(A, B)) + (hsum8(C) + c);                                                    \
    }

#define MVQ_ARGS const uint8_t *w, size_t rb, int64_t nrows, const dp_xq *x, float *out

static KINT void mvq_q4_0(MVQ_ARGS) {
#define DOT(bp, i) dot_off(nib32(bp + 2), x, i, 0)
    IROWS(18, 0, DOT)
#undef DOT
}

static KINT void mvq_q4_1(MVQ_ARGS) {
#define DOT(bp, i) dot_hl(nib32(bp + 4), x->q8 + 64 * (i))
    IROWS(20, 2, DOT)
#undef DOT
}

static KINT void mvq_q5_0(MVQ_ARGS) {
#define DOT(bp, i) dot_off(add_q5_high(nib32(bp + 6), ld32(bp + 2)), x, i, 1)
    IROWS(22, 0, DOT)
#undef DOT
}

static KINT void mvq_q5_1(MVQ_ARGS) {
#define DOT(bp, i) dot_hl(add_q5_high(nib32(bp + 8), ld32(bp + 4)), x->q8 + 64 * (i))
    IROWS(24, 2, DOT)
#undef DOT
}

/* Signed weights (Q8_0, the IQ4 codebook values) widened to int16 times
 * the int16 x: 32 weights as two halves */
IALWAYS vi dot_s8(__m128i q0, __m128i q1, const int16_t *x16) {
    vi w0 = _mm256_cvtepi8_epi16(q0), w1 = _mm256_cvtepi8_epi16(q1);
#if KVL == 16
    return _mm256_dpwssd_epi32(_mm256_madd_epi16(w0, ILOAD(x16)), w1, ILOAD(x16 + 16));
#else
    return _mm256_add_epi32(_mm256_madd_epi16(w0, ILOAD(x16)), _mm256_madd_epi16(w1, ILOAD(x16 + 16)));
#endif
}

static KINT void mvq_q8_0(MVQ_ARGS) {
#define DOT(bp, i) dot_s8(ld16(bp + 2), ld16(bp + 18), x->q16 + 32 * (i))
    IROWS(34, 0, DOT)
#undef DOT
}

IALWAYS vi dot_iq4(const uint8_t *qs, const int16_t *x16) {
    __m128i lo, hi;
    iq4_codes(qs, &lo, &hi);
    return dot_s8(lo, hi, x16);
}

static KINT void mvq_iq4_nl(MVQ_ARGS) {
#define DOT(bp, i) dot_iq4(bp + 2, x->q16 + 32 * (i))
    IROWS(18, 0, DOT)
#undef DOT
}

/* IQ4_XS super-blocks: per sub-block j one conversion, scale d (ls - 32) d_x */
static KINT void mvq_iq4_xs(MVQ_ARGS) {
    const int64_t nsb = x->K / QK_K;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 A = _mm256_setzero_ps(), B = _mm256_setzero_ps();
        for (int64_t s = 0; s < nsb; s++, b += 136) {
            const float d = h2f(b);
            UNROLL for (int j = 0; j < 8; j += 2) {
                const int64_t i = 8 * s + j;
                IACC(A, dot_iq4(b + 8 + 16 * j, x->q16 + 32 * i), d * (float)iq4xs_scale(b, j) * x->d[i]);
                IACC(B, dot_iq4(b + 24 + 16 * j, x->q16 + 32 * (i + 1)),
                     d * (float)iq4xs_scale(b, j + 1) * x->d[i + 1]);
            }
        }
        out[r] = hsum8(_mm256_add_ps(A, B));
    }
}

/* Q4_K / Q5_K: the 8 6-bit scales and minimums of a super-block as int32
 * lanes, unpacked in 32-bit registers (four bytes at a time; storing bytes
 * and reloading them as a vector stalls store forwarding): sc[0..3] =
 * q[0..3] & 63, mn[0..3] = q[4..7] & 63, sc[4..7] = (q[8..11] & 15) |
 * (q[0..3] >> 6) << 4, mn[4..7] = (q[8..11] >> 4) | (q[4..7] >> 6) << 4. */
IALWAYS void k4_scales(const uint8_t *q, __m256i *sc, __m256i *mn) {
    uint32_t u0 = ld32(q), u1 = ld32(q + 4), u2 = ld32(q + 8);
    uint64_t s = (u0 & 0x3f3f3f3fu) | (uint64_t)((u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u)) << 32;
    uint64_t m = (u1 & 0x3f3f3f3fu) | (uint64_t)(((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u)) << 32;
    *sc = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)s));
    *mn = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)m));
}

/* Q4_K / Q5_K super-blocks: per sub-block j (32 values, x block i + j) one
 * conversion, scale d sc[j] d_x; the minimums through x's block sums. */
IALWAYS void mvq_k45(MVQ_ARGS, const int q5) {
    const int bs = q5 ? 176 : 144;
    const int64_t nsb = x->K / QK_K;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 A = _mm256_setzero_ps(), B = _mm256_setzero_ps(), M = _mm256_setzero_ps();
        for (int64_t s = 0; s < nsb; s++, b += bs) {
            const int64_t i = 8 * s;
            __m256i sm, mm;
            k4_scales(b + 4, &sm, &mm);
            float fs[8];
            _mm256_storeu_ps(fs, _mm256_mul_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(sm), _mm256_set1_ps(h2f(b))),
                                               _mm256_loadu_ps(x->d + i)));
            M = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(h2f(b + 2))),
                                _mm256_loadu_ps(x->s + i), M);
            const uint8_t *qs = b + (q5 ? 48 : 16);
            vi qh = q5 ? ILOAD(b + 16) : _mm256_setzero_si256();
            UNROLL for (int j = 0; j < 4; j++) {
                vi v = ILOAD(qs + 32 * j);
                vi q0 = _mm256_and_si256(v, I8(0x0f)), q1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), I8(0x0f));
                if (q5) {
                    /* bit 2j (q0) and 2j + 1 (q1) of each qh byte -> 16 */
#if KVL == 16
                    q0 = _mm256_mask_add_epi8(q0, _mm256_test_epi8_mask(qh, I8(1 << (2 * j))), q0, I8(16));
                    q1 = _mm256_mask_add_epi8(q1, _mm256_test_epi8_mask(qh, I8(2 << (2 * j))), q1, I8(16));
#else
                    const __m128i c0 = _mm_cvtsi32_si128(4 - 2 * j > 0 ? 4 - 2 * j : 2 * j - 4);
                    const __m128i c1 = _mm_cvtsi32_si128(3 - 2 * j > 0 ? 3 - 2 * j : 2 * j - 3);
                    vi h0 = 4 - 2 * j > 0 ? _mm256_sll_epi16(qh, c0) : _mm256_srl_epi16(qh, c0);
                    vi h1 = 3 - 2 * j > 0 ? _mm256_sll_epi16(qh, c1) : _mm256_srl_epi16(qh, c1);
                    q0 = _mm256_or_si256(q0, _mm256_and_si256(h0, I8(16)));
                    q1 = _mm256_or_si256(q1, _mm256_and_si256(h1, I8(16)));
#endif
                }
                IACC(A, dot_hl(q0, x->q8 + 64 * (i + 2 * j)), fs[2 * j]);
                IACC(B, dot_hl(q1, x->q8 + 64 * (i + 2 * j + 1)), fs[2 * j + 1]);
            }
        }
        out[r] = hsum8(_mm256_add_ps(A, B)) - hsum8(M);
    }
}
static KINT void mvq_q4_k(MVQ_ARGS) { mvq_k45(w, rb, nrows, x, out, 0); }
static KINT void mvq_q5_k(MVQ_ARGS) { mvq_k45(w, rb, nrows, x, out, 1); }

/* Q6_K: codes q (offset 32) per group of 32 values; the two 16-value halves
 * of a block have their own scale: lanes 0-3 and 4-7. */
static KINT void mvq_q6_k(MVQ_ARGS) {
    const int64_t nsb = x->K / QK_K;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 A = _mm256_setzero_ps(), B = _mm256_setzero_ps();
        for (int64_t s = 0; s < nsb; s++, b += 210) {
            const __m256 d = _mm256_set1_ps(h2f(b + 208));
            const __m128i sc = _mm_loadu_si128((const __m128i *)(b + 192));
            UNROLL for (int h = 0; h < 2; h++) {
                /* d sc[8h .. 8h + 7] */
                __m256 fs = _mm256_mul_ps(
                    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h ? _mm_srli_si128(sc, 8) : sc)), d);
                vi a = ILOAD(b + 64 * h), c = ILOAD(b + 64 * h + 32), qh = ILOAD(b + 128 + 32 * h);
                vi g[4];
                g[0] = _mm256_or_si256(_mm256_and_si256(a, I8(0x0f)), _mm256_and_si256(_mm256_slli_epi16(qh, 4), I8(0x30)));
                g[1] = _mm256_or_si256(_mm256_and_si256(c, I8(0x0f)), _mm256_and_si256(_mm256_slli_epi16(qh, 2), I8(0x30)));
                g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), I8(0x0f)), _mm256_and_si256(qh, I8(0x30)));
                g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 4), I8(0x0f)),
                                       _mm256_and_si256(_mm256_srli_epi16(qh, 2), I8(0x30)));
                UNROLL for (int k = 0; k < 4; k++) {
                    const int64_t blk = 8 * s + 4 * h + k;
                    __m256 sv = _mm256_permutevar8x32_ps(fs, _mm256_set_epi32(2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                                                              2 * k, 2 * k, 2 * k, 2 * k));
                    __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(dot_off(g[k], x, blk, 2)), _mm256_set1_ps(x->d[blk]));
                    if (k & 1) B = _mm256_fmadd_ps(t, sv, B);
                    else A = _mm256_fmadd_ps(t, sv, A);
                }
            }
        }
        out[r] = hsum8(_mm256_add_ps(A, B));
    }
}

#endif
