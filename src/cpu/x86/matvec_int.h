/* Integer matvec kernels (positions quantised by dp_xq_quantize): avx2 (KVL 8)
 * uses vpmaddwd, avx512 (KVL 16) VNNI's vpdpwssd (these functions carry
 * the avx512vnni target; kernels.c gives the avx512 level avx2's integer
 * kernels when the CPU lacks VNNI). Everything is 256 bits wide.
 *
 * Per block of 32 values, the weight codes (their offset removed, so
 * signed where the format has one) are decoded once into two int16
 * vectors, the even-indexed values and the odd-indexed ones (cw below),
 * and every position's x_int planes (dp_xq.eo, split the same way) are
 * multiplied with them: two 16-bit multiply-adds give int32 lane i = the
 * sum over values 4i..4i+3. That lane is converted to float once and
 * multiplied by the weight scale times x's block scale. Up to DP_NX_MAX
 * positions share each decoded block; a position's float operations are
 * the same whatever the count, so its result does not depend on it (the
 * row loops below are written once and unrolled per count).
 *
 * Bounds (codes |q| <= 128, |x_int| <= DP_XQ_MAX = 32639): a product is
 * below 2^22, a lane of four below 2^24: no int32 overflow (vpdpwssd does
 * not saturate) and the conversion to float is exact. */

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
#define I16(c) _mm256_set1_epi16((short)(c))

#if DP_NX_MAX != 4
#error "the dispatchers below instantiate the row loops for 1..4 positions"
#endif

IALWAYS float hsum8(__m256 a) {
    __m128 l = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    l = _mm_add_ps(l, _mm_movehl_ps(l, l));
    l = _mm_add_ss(l, _mm_movehdup_ps(l));
    return _mm_cvtss_f32(l);
}

/* The codes of one block of 32 values: e = values 0, 2, .., 30, o = values
 * 1, 3, .., 31, as int16. */
typedef struct {
    vi e, o;
} cw;

/* 32 byte codes in value order, unsigned / signed */
IALWAYS cw split_u(vi c) { return (cw){_mm256_and_si256(c, I16(0xff)), _mm256_srli_epi16(c, 8)}; }
IALWAYS cw split_s(vi c) { return (cw){_mm256_srai_epi16(_mm256_slli_epi16(c, 8), 8), _mm256_srai_epi16(c, 8)}; }

/* int32 lane i = sum over values 4i..4i+3 of code times x_int; xb: the
 * block's eo plane (with Q8_0's codes and the q16 plane: see q8_codes) */
IALWAYS vi dot16(cw c, const int16_t *xb) {
#if KVL == 16
    return _mm256_dpwssd_epi32(_mm256_madd_epi16(c.e, ILOAD(xb)), c.o, ILOAD(xb + 16));
#else
    return _mm256_add_epi32(_mm256_madd_epi16(c.e, ILOAD(xb)), _mm256_madd_epi16(c.o, ILOAD(xb + 16)));
#endif
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

/* Q5_0: the 5-bit codes minus their offset 16 */
IALWAYS vi q5_0_codes(vi q, uint32_t qh) {
#if KVL == 16
    return _mm256_mask_sub_epi8(q, (__mmask32)~qh, q, I8(16));
#else
    return _mm256_sub_epi8(add_q5_high(q, qh), I8(16));
#endif
}

/* Weights stream from memory once per call; with several positions the
 * kernel is compute-bound enough that the hardware prefetcher falls behind
 * and loads stall. A software prefetch PF_DIST bytes ahead of each group
 * (a few hundred cycles of work at 4 positions, about a memory latency)
 * keeps them in flight. Past the end of the weights it is a no-op (a
 * prefetch never faults). */
#define PF_DIST 2048
IALWAYS void prefetch_ahead(const uint8_t *p, const int n) {
    for (int o = 0; o < n; o += 64) _mm_prefetch((const char *)p + PF_DIST + o, _MM_HINT_T0);
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

/* Each kernel: NAME_n(MVQ_ARGS, nx) for a constant nx, and NAME, the table
 * entry, which runs the positions in groups of up to DP_NX_MAX. */
#define MVQ_ARGS const uint8_t *w, size_t rb, int64_t nrows, const dp_xq *x, float *out, int64_t os
#define MVQ_ENTRY(name)                                                                                         \
    static KINT void name(const uint8_t *w, size_t rb, int64_t nrows, const dp_xq *x, int nx, float *out,     \
                          int64_t os) {                                                                         \
        for (; nx > 0; nx -= DP_NX_MAX, x += DP_NX_MAX, out += DP_NX_MAX * os) switch (nx) {                   \
            case 1: name##_n(w, rb, nrows, x, out, os, 1); break;                                              \
            case 2: name##_n(w, rb, nrows, x, out, os, 2); break;                                              \
            case 3: name##_n(w, rb, nrows, x, out, os, 3); break;                                              \
            default: name##_n(w, rb, nrows, x, out, os, 4); break;                                             \
            }                                                                                                   \
    }

/* the planes of the nx positions */
#define XPLANES(nx, PLANE)                                                                                      \
    const int16_t *xe[DP_NX_MAX];                                                                              \
    const float *xd[DP_NX_MAX], *xs[DP_NX_MAX];                                                                \
    UNROLL for (int p = 0; p < (nx); p++) xe[p] = x[p].PLANE, xd[p] = x[p].d, xs[p] = x[p].s;                  \
    (void)xs;

/* Row loop of the 32-value block types. CODES(bp): the cw of the block at
 * bp, to be multiplied with x's plane PLANE (eo, or q16 for Q8_0). Groups of 8 blocks: their scales d_w d_x come from one conversion;
 * the minimum at byte MINB (Q4_1, Q5_1) enters through x's block sums s,
 * as sum_b m_b s_b, one float term per row. Two accumulators per position
 * take alternate blocks. */
#define IROWS(BS, MINB, CODES, PLANE)                                                                                 \
    const int64_t nb = x->K / 32;                                                                                \
    XPLANES(nx, PLANE)                                                                                           \
    for (int64_t r = 0; r < nrows; r++) {                                                                        \
        const uint8_t *b = w + (size_t)r * rb;                                                                   \
        __m256 A[DP_NX_MAX], B[DP_NX_MAX], C[DP_NX_MAX];                                                         \
        float c[DP_NX_MAX];                                                                                      \
        UNROLL for (int p = 0; p < nx; p++) A[p] = B[p] = C[p] = _mm256_setzero_ps(), c[p] = 0.0f;              \
        float dds[DP_NX_MAX][8] __attribute__((aligned(32)));                                                    \
        int64_t i = 0;                                                                                           \
        for (; i + 8 <= nb; i += 8, b += 8 * (BS)) {                                                             \
            prefetch_ahead(b, 8 * (BS));                                                                         \
            const __m256 dw = ld8_f16(b, BS);                                                                    \
            UNROLL for (int p = 0; p < nx; p++) _mm256_store_ps(dds[p], _mm256_mul_ps(dw, _mm256_loadu_ps(xd[p] + i))); \
            /* from memory: a broadcast load each, not two shuffles out of the register */                       \
            __asm__ volatile("" : "+m"(dds));                                                                    \
            if (MINB) {                                                                                          \
                const __m256 mw = ld8_f16(b + (MINB), BS);                                                       \
                UNROLL for (int p = 0; p < nx; p++) C[p] = _mm256_fmadd_ps(mw, _mm256_loadu_ps(xs[p] + i), C[p]); \
            }                                                                                                    \
            UNROLL for (int k = 0; k < 8; k += 2) {                                                              \
                const cw q0 = CODES(b + k * (BS)), q1 = CODES(b + (k + 1) * (BS));                               \
                UNROLL for (int p = 0; p < nx; p++) {                                                            \
                    IACC(A[p], dot16(q0, xe[p] + 32 * (i + k)), dds[p][k]);                                      \
                    IACC(B[p], dot16(q1, xe[p] + 32 * (i + k + 1)), dds[p][k + 1]);                              \
                }                                                                                                \
            }                                                                                                    \
        }                                                                                                        \
        for (; i < nb; i++, b += (BS)) {                                                                         \
            const cw q0 = CODES(b);                                                                              \
            UNROLL for (int p = 0; p < nx; p++) {                                                                \
                IACC(A[p], dot16(q0, xe[p] + 32 * i), h2f(b) * xd[p][i]);                                        \
                if (MINB) c[p] += h2f(b + (MINB)) * xs[p][i];                                                    \
            }                                                                                                    \
        }                                                                                                        \
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = hsum8(_mm256_add_ps(A[p], B[p])) + (hsum8(C[p]) + c[p]); \
    }

IALWAYS void mvq_q4_0_n(MVQ_ARGS, const int nx) {
#define CODES(bp) split_s(_mm256_sub_epi8(nib32(bp + 2), I8(8)))
    IROWS(18, 0, CODES, eo)
#undef CODES
}

IALWAYS void mvq_q4_1_n(MVQ_ARGS, const int nx) {
#define CODES(bp) split_u(nib32(bp + 4))
    IROWS(20, 2, CODES, eo)
#undef CODES
}

IALWAYS void mvq_q5_0_n(MVQ_ARGS, const int nx) {
#define CODES(bp) split_s(q5_0_codes(nib32(bp + 6), ld32(bp + 2)))
    IROWS(22, 0, CODES, eo)
#undef CODES
}

IALWAYS void mvq_q5_1_n(MVQ_ARGS, const int nx) {
#define CODES(bp) split_u(add_q5_high(nib32(bp + 8), ld32(bp + 4)))
    IROWS(24, 2, CODES, eo)
#undef CODES
}

/* Q8_0: the signed bytes are the codes, values 0..15 and 16..31 widened, to
 * be multiplied with x in value order (q16): lane i sums values 2i, 2i + 1,
 * 2i + 16 and 2i + 17 (the layout its results were pinned to) */
IALWAYS cw q8_codes(const uint8_t *p) {
    return (cw){_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p)),
                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(p + 16)))};
}
IALWAYS void mvq_q8_0_n(MVQ_ARGS, const int nx) {
#define CODES(bp) q8_codes(bp + 2)
    IROWS(34, 0, CODES, q16)
#undef CODES
}

/* IQ4_NL / IQ4_XS: the 4-bit indices looked up in the codebook give signed
 * bytes in value order, multiplied with the q16 plane as Q8_0's are */
IALWAYS cw iq4_cw(const uint8_t *qs) {
    __m128i lo, hi;
    iq4_codes(qs, &lo, &hi);
    return (cw){_mm256_cvtepi8_epi16(lo), _mm256_cvtepi8_epi16(hi)};
}

IALWAYS void mvq_iq4_nl_n(MVQ_ARGS, const int nx) {
#define CODES(bp) iq4_cw(bp + 2)
    IROWS(18, 0, CODES, q16)
#undef CODES
}

/* IQ4_XS super-blocks: per sub-block j the scale d (ls - 32) d_x */
IALWAYS void mvq_iq4_xs_n(MVQ_ARGS, const int nx) {
    const int64_t nsb = x->K / QK_K;
    XPLANES(nx, q16)
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 A[DP_NX_MAX], B[DP_NX_MAX];
        UNROLL for (int p = 0; p < nx; p++) A[p] = B[p] = _mm256_setzero_ps();
        for (int64_t s = 0; s < nsb; s++, b += 136) {
            prefetch_ahead(b, 136);
            const float d = h2f(b);
            UNROLL for (int j = 0; j < 8; j += 2) {
                const int64_t i = 8 * s + j;
                const cw q0 = iq4_cw(b + 8 + 16 * j), q1 = iq4_cw(b + 24 + 16 * j);
                const float s0 = d * (float)iq4xs_scale(b, j), s1 = d * (float)iq4xs_scale(b, j + 1);
                UNROLL for (int p = 0; p < nx; p++) {
                    IACC(A[p], dot16(q0, xe[p] + 32 * i), s0 * xd[p][i]);
                    IACC(B[p], dot16(q1, xe[p] + 32 * (i + 1)), s1 * xd[p][i + 1]);
                }
            }
        }
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = hsum8(_mm256_add_ps(A[p], B[p]));
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
 * conversion, scale d sc[j] d_x; the minimums through x's block sums. The
 * 32 bytes of sub-blocks 2j (low nibbles) and 2j + 1 (high nibbles) hold
 * values 2m and 2m + 1 in 16-bit lane m, so Q4_K's codes come straight out
 * of them by shifts and masks. */
IALWAYS void mvq_k45(MVQ_ARGS, const int q5, const int nx) {
    const int bs = q5 ? 176 : 144;
    const int64_t nsb = x->K / QK_K;
    XPLANES(nx, eo)
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 A[DP_NX_MAX], B[DP_NX_MAX], M[DP_NX_MAX];
        UNROLL for (int p = 0; p < nx; p++) A[p] = B[p] = M[p] = _mm256_setzero_ps();
        for (int64_t s = 0; s < nsb; s++, b += bs) {
            prefetch_ahead(b, bs);
            const int64_t i = 8 * s;
            __m256i sm, mm;
            k4_scales(b + 4, &sm, &mm);
            const __m256 dsc = _mm256_mul_ps(_mm256_cvtepi32_ps(sm), _mm256_set1_ps(h2f(b)));
            const __m256 dmn = _mm256_mul_ps(_mm256_cvtepi32_ps(mm), _mm256_set1_ps(h2f(b + 2)));
            float fs[DP_NX_MAX][8] __attribute__((aligned(32)));
            UNROLL for (int p = 0; p < nx; p++) {
                _mm256_store_ps(fs[p], _mm256_mul_ps(dsc, _mm256_loadu_ps(xd[p] + i)));
                M[p] = _mm256_fmadd_ps(dmn, _mm256_loadu_ps(xs[p] + i), M[p]);
            }
            const uint8_t *qs = b + (q5 ? 48 : 16);
            vi qh = q5 ? ILOAD(b + 16) : _mm256_setzero_si256();
            UNROLL for (int j = 0; j < 4; j++) {
                vi v = ILOAD(qs + 32 * j);
                cw q0, q1;
                if (!q5) {
                    q0 = (cw){_mm256_and_si256(v, I16(0x0f)), _mm256_and_si256(_mm256_srli_epi16(v, 8), I16(0x0f))};
                    q1 = (cw){_mm256_and_si256(_mm256_srli_epi16(v, 4), I16(0x0f)), _mm256_srli_epi16(v, 12)};
                } else {
                    vi c0 = _mm256_and_si256(v, I8(0x0f)), c1 = _mm256_and_si256(_mm256_srli_epi16(v, 4), I8(0x0f));
                    /* bit 2j (c0) and 2j + 1 (c1) of each qh byte -> 16 */
#if KVL == 16
                    c0 = _mm256_mask_add_epi8(c0, _mm256_test_epi8_mask(qh, I8(1 << (2 * j))), c0, I8(16));
                    c1 = _mm256_mask_add_epi8(c1, _mm256_test_epi8_mask(qh, I8(2 << (2 * j))), c1, I8(16));
#else
                    const __m128i s0 = _mm_cvtsi32_si128(4 - 2 * j > 0 ? 4 - 2 * j : 2 * j - 4);
                    const __m128i s1 = _mm_cvtsi32_si128(3 - 2 * j > 0 ? 3 - 2 * j : 2 * j - 3);
                    vi h0 = 4 - 2 * j > 0 ? _mm256_sll_epi16(qh, s0) : _mm256_srl_epi16(qh, s0);
                    vi h1 = 3 - 2 * j > 0 ? _mm256_sll_epi16(qh, s1) : _mm256_srl_epi16(qh, s1);
                    c0 = _mm256_or_si256(c0, _mm256_and_si256(h0, I8(16)));
                    c1 = _mm256_or_si256(c1, _mm256_and_si256(h1, I8(16)));
#endif
                    q0 = split_u(c0);
                    q1 = split_u(c1);
                }
                UNROLL for (int p = 0; p < nx; p++) {
                    IACC(A[p], dot16(q0, xe[p] + 32 * (i + 2 * j)), fs[p][2 * j]);
                    IACC(B[p], dot16(q1, xe[p] + 32 * (i + 2 * j + 1)), fs[p][2 * j + 1]);
                }
            }
        }
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = hsum8(_mm256_add_ps(A[p], B[p])) - hsum8(M[p]);
    }
}
IALWAYS void mvq_q4_k_n(MVQ_ARGS, const int nx) { mvq_k45(w, rb, nrows, x, out, os, 0, nx); }
IALWAYS void mvq_q5_k_n(MVQ_ARGS, const int nx) { mvq_k45(w, rb, nrows, x, out, os, 1, nx); }

/* Q6_K: codes q - 32 per group of 32 values; the two 16-value halves of a
 * block have their own scale: lanes 0-3 and 4-7. */
IALWAYS void mvq_q6_k_n(MVQ_ARGS, const int nx) {
    const int64_t nsb = x->K / QK_K;
    XPLANES(nx, eo)
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 A[DP_NX_MAX], B[DP_NX_MAX];
        UNROLL for (int p = 0; p < nx; p++) A[p] = B[p] = _mm256_setzero_ps();
        for (int64_t s = 0; s < nsb; s++, b += 210) {
            prefetch_ahead(b, 210);
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
                    const cw q = split_s(_mm256_sub_epi8(g[k], I8(32)));
                    UNROLL for (int p = 0; p < nx; p++) {
                        __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(dot16(q, xe[p] + 32 * blk)), _mm256_set1_ps(xd[p][blk]));
                        if (k & 1) B[p] = _mm256_fmadd_ps(t, sv, B[p]);
                        else A[p] = _mm256_fmadd_ps(t, sv, A[p]);
                    }
                }
            }
        }
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = hsum8(_mm256_add_ps(A[p], B[p]));
    }
}

MVQ_ENTRY(mvq_q4_0)
MVQ_ENTRY(mvq_q4_1)
MVQ_ENTRY(mvq_q5_0)
MVQ_ENTRY(mvq_q5_1)
MVQ_ENTRY(mvq_q8_0)
MVQ_ENTRY(mvq_q4_k)
MVQ_ENTRY(mvq_q5_k)
MVQ_ENTRY(mvq_q6_k)
MVQ_ENTRY(mvq_iq4_nl)
MVQ_ENTRY(mvq_iq4_xs)

#endif
