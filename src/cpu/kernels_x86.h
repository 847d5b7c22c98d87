/* x86 SIMD kernels, written once for a vector of KVL floats: kernels_avx2.c
 * includes this with KVL 8 (AVX2/FMA/F16C), kernels_avx512.c with KVL 16
 * (AVX-512 F/BW/VL). Each of those files is compiled with its own target
 * flags and is only called after the run-time CPU check (kernels.c).
 *
 * Weight blocks are unpacked to int8 in 128-bit registers (the block's
 * offset already subtracted, so every value fits), widened to float and
 * multiplied with float activations; each block's scale multiplies the
 * block's partial sum once, and per-block minimums use precomputed sums of
 * x (xsum), so the inner loop is conversions and FMAs only. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels.h"

#define ALWAYS static inline __attribute__((always_inline))

#if KVL == 16
typedef __m512 vf;
#define vzero() _mm512_setzero_ps()
#define vload(p) _mm512_loadu_ps(p)
#define vstore(p, v) _mm512_storeu_ps(p, v)
#define vset1(a) _mm512_set1_ps(a)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vmul(a, b) _mm512_mul_ps(a, b)
#define vadd(a, b) _mm512_add_ps(a, b)
#define vdiv(a, b) _mm512_div_ps(a, b)
#define vmax(a, b) _mm512_max_ps(a, b)
#define vmin(a, b) _mm512_min_ps(a, b)
ALWAYS __m256 vhi256(vf a) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)); }
ALWAYS float vhsum(vf a) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), vhi256(a));
    __m128 l = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    l = _mm_add_ps(l, _mm_movehl_ps(l, l));
    l = _mm_add_ss(l, _mm_movehdup_ps(l));
    return _mm_cvtss_f32(l);
}
/* 16 int8 -> 16 / KVL float vectors */
ALWAYS void cvt16(__m128i b, vf *o) { o[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }
ALWAYS vf load_f16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
ALWAYS vf load_bf16(const uint8_t *p) {
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
/* 2^n for integral float n in [-126, 127] */
ALWAYS vf vpow2i(vf n) {
    __m512i i = _mm512_cvtps_epi32(n);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(i, _mm512_set1_epi32(127)), 23));
}
#define vround(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
ALWAYS __m512d vcvt_lo_pd(vf a) { return _mm512_cvtps_pd(_mm512_castps512_ps256(a)); }
ALWAYS __m512d vcvt_hi_pd(vf a) { return _mm512_cvtps_pd(vhi256(a)); }
#define vdfma(a, b, c) _mm512_fmadd_pd(a, b, c)
#define vdzero() _mm512_setzero_pd()
#define vdadd(a, b) _mm512_add_pd(a, b)
ALWAYS double vdhsum(__m512d a) { return _mm512_reduce_add_pd(a); }
typedef __m512d vd;
#else
typedef __m256 vf;
#define vzero() _mm256_setzero_ps()
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps(p, v)
#define vset1(a) _mm256_set1_ps(a)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vmul(a, b) _mm256_mul_ps(a, b)
#define vadd(a, b) _mm256_add_ps(a, b)
#define vdiv(a, b) _mm256_div_ps(a, b)
#define vmax(a, b) _mm256_max_ps(a, b)
#define vmin(a, b) _mm256_min_ps(a, b)
ALWAYS float vhsum(vf a) {
    __m128 l = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    l = _mm_add_ps(l, _mm_movehl_ps(l, l));
    l = _mm_add_ss(l, _mm_movehdup_ps(l));
    return _mm_cvtss_f32(l);
}
ALWAYS void cvt16(__m128i b, vf *o) {
    o[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    o[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b, b)));
}
ALWAYS vf load_f16(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
ALWAYS vf load_bf16(const uint8_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
ALWAYS vf vpow2i(vf n) {
    __m256i i = _mm256_cvtps_epi32(n);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(i, _mm256_set1_epi32(127)), 23));
}
#define vround(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
typedef __m256d vd;
ALWAYS vd vcvt_lo_pd(vf a) { return _mm256_cvtps_pd(_mm256_castps256_ps128(a)); }
ALWAYS vd vcvt_hi_pd(vf a) { return _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)); }
#define vdfma(a, b, c) _mm256_fmadd_pd(a, b, c)
#define vdzero() _mm256_setzero_pd()
#define vdadd(a, b) _mm256_add_pd(a, b)
ALWAYS double vdhsum(vd a) {
    __m128d l = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(l, _mm_unpackhi_pd(l, l)));
}
#endif

#define NV16 (16 / KVL) /* float vectors per 16 values */

ALWAYS float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
ALWAYS __m128i ld16(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)p); }

/* ------------------------------------------------------------ block math */

#define UNROLL _Pragma("GCC unroll 16")

/* acc[p] += d * sum_j q[j] x[p][j] over 16 int8 values */
ALWAYS void acc16(__m128i q, vf vd_, const float *x, int64_t xs, int nx, vf *acc) {
    vf f[NV16];
    cvt16(q, f);
    UNROLL for (int p = 0; p < nx; p++) {
        const float *xp = x + p * xs;
        vf s = vmul(f[0], vload(xp));
        UNROLL for (int v = 1; v < NV16; v++) s = vfma(f[v], vload(xp + v * KVL), s);
        acc[p] = vfma(s, vd_, acc[p]);
    }
}

/* the same over 32 values given as two halves */
ALWAYS void acc32(__m128i q0, __m128i q1, vf vd_, const float *x, int64_t xs, int nx, vf *acc) {
    vf f[2 * NV16];
    cvt16(q0, f);
    cvt16(q1, f + NV16);
    UNROLL for (int p = 0; p < nx; p++) {
        const float *xp = x + p * xs;
        vf s = vmul(f[0], vload(xp));
        UNROLL for (int v = 1; v < 2 * NV16; v++) s = vfma(f[v], vload(xp + v * KVL), s);
        acc[p] = vfma(s, vd_, acc[p]);
    }
}

/* acc[p] += sum over nv vectors of already scaled weights w[v] x[p][v] */
ALWAYS void accw(const vf *w, int nv, const float *x, int64_t xs, int nx, vf *acc) {
    UNROLL for (int p = 0; p < nx; p++) {
        const float *xp = x + p * xs;
        UNROLL for (int v = 0; v < nv; v++) acc[p] = vfma(w[v], vload(xp + v * KVL), acc[p]);
    }
}

/* dst[j] = q[j] d + m over 16 int8 values */
ALWAYS void put16(float *dst, __m128i q, float d, float m) {
    vf f[NV16];
    cvt16(q, f);
    UNROLL for (int v = 0; v < NV16; v++) vstore(dst + v * KVL, vfma(f[v], vset1(d), vset1(m)));
}

/* ------------------------------------------------------------ unpackers */

#define M4 _mm_set1_epi8(0x0f)

/* low and high nibbles of 16 bytes: values j and j + 16 of a 32-block */
ALWAYS void nibbles(__m128i qs, __m128i *lo, __m128i *hi) {
    *lo = _mm_and_si128(qs, M4);
    *hi = _mm_and_si128(_mm_srli_epi16(qs, 4), M4);
}

/* Q5_0/Q5_1 fifth bits: bit j of qh -> 0x10 in byte j (h0: j < 16, h1: j >= 16) */
ALWAYS void q5_high(uint32_t qh, __m128i *h0, __m128i *h1) {
    const __m128i bit = _mm_set1_epi64x((long long)0x8040201008040201ull);
    const __m128i s0 = _mm_set_epi64x(0x0101010101010101ll, 0);
    const __m128i s1 = _mm_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll);
    __m128i v = _mm_set1_epi32((int)qh), x10 = _mm_set1_epi8(0x10);
    *h0 = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(_mm_shuffle_epi8(v, s0), bit), bit), x10);
    *h1 = _mm_and_si128(_mm_cmpeq_epi8(_mm_and_si128(_mm_shuffle_epi8(v, s1), bit), bit), x10);
}

/* 6-bit scales and mins of Q4_K/Q5_K */
ALWAYS void scales_k4(const uint8_t *q, uint8_t *sc, uint8_t *mn) {
    for (int j = 0; j < 4; j++) {
        sc[j] = q[j] & 63;
        mn[j] = q[j + 4] & 63;
        sc[j + 4] = (uint8_t)((q[j + 8] & 0xf) | ((q[j] >> 6) << 4));
        mn[j + 4] = (uint8_t)((q[j + 8] >> 4) | ((q[j + 4] >> 6) << 4));
    }
}

/* fifth bits of Q5_K sub-block j: bit j of each qh byte -> 0x10 */
ALWAYS __m128i q5k_high(__m128i h, int j) {
    return _mm_slli_epi16(_mm_and_si128(_mm_srl_epi16(h, _mm_cvtsi32_si128(j)), _mm_set1_epi8(1)), 4);
}

/* Q6_K: the four groups of 16 values at l = 16c .. 16c + 15 of one 128-half,
 * as signed int8 (q - 32): values l, l + 32, l + 64, l + 96. */
ALWAYS void q6_groups(const uint8_t *ql, const uint8_t *qh, int c, __m128i *q) {
    const __m128i m3 = _mm_set1_epi8(3), m30 = _mm_set1_epi8(0x30), c32 = _mm_set1_epi8(32);
    __m128i a = ld16(ql + 16 * c), bq = ld16(ql + 32 + 16 * c), h = ld16(qh + 16 * c);
    q[0] = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(a, M4), _mm_slli_epi16(_mm_and_si128(h, m3), 4)), c32);
    q[1] = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(bq, M4), _mm_and_si128(_mm_slli_epi16(h, 2), m30)), c32);
    q[2] = _mm_sub_epi8(_mm_or_si128(_mm_and_si128(_mm_srli_epi16(a, 4), M4), _mm_and_si128(h, m30)), c32);
    q[3] = _mm_sub_epi8(
        _mm_or_si128(_mm_and_si128(_mm_srli_epi16(bq, 4), M4), _mm_and_si128(_mm_srli_epi16(h, 2), m30)), c32);
}

#if KVL == 16
/* AVX-512: 4-bit codes become scaled weights through a 16-entry table in
 * one register (vpermps uses the low 4 bits of each 32-bit index, so the
 * zero-extended byte serves as the low nibble's index and the byte shifted
 * right by 4 as the high nibble's). Fifth bits add 16 d under a mask. */
#define HAVE_LUT 1
#define IOTA16 _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)
ALWAYS __m512i zx16(const uint8_t *p) { return _mm512_cvtepu8_epi32(ld16(p)); }
ALWAYS vf lut(__m512i idx, vf t) { return _mm512_permutexvar_ps(idx, t); }

/* 32 weights of a Q4_0 (off 8) / Q4_1 block: table d (i - off) + m */
ALWAYS void dec_q4(const uint8_t *qs, float d, float m, vf *w) {
    vf t = vfma(IOTA16, vset1(d), vset1(m));
    __m512i z = zx16(qs);
    w[0] = lut(z, t);
    w[1] = lut(_mm512_srli_epi32(z, 4), t);
}
/* Q5_0 / Q5_1: low 4 bits through the table, + 16 d where the fifth bit is set */
ALWAYS void dec_q5(const uint8_t *qs, uint32_t qh, float d, float m, vf *w) {
    vf t = vfma(IOTA16, vset1(d), vset1(m)), d16 = vset1(16.0f * d);
    __m512i z = zx16(qs);
    w[0] = lut(z, t);
    w[1] = lut(_mm512_srli_epi32(z, 4), t);
    w[0] = _mm512_mask_add_ps(w[0], (__mmask16)(qh & 0xffff), w[0], d16);
    w[1] = _mm512_mask_add_ps(w[1], (__mmask16)(qh >> 16), w[1], d16);
}
/* Q4_K / Q5_K sub-blocks 2j (low nibbles) and 2j+1 (high nibbles) of 32
 * bytes; hb: the fifth-bit masks (Q5_K) for the four halves, or NULL */
ALWAYS void dec_k_pair(const uint8_t *qs, float d1, float m1, float d2, float m2, const __mmask16 *hb, vf *w) {
    vf t1 = vfma(IOTA16, vset1(d1), vset1(m1)), t2 = vfma(IOTA16, vset1(d2), vset1(m2));
    __m512i z0 = zx16(qs), z1 = zx16(qs + 16);
    w[0] = lut(z0, t1);
    w[1] = lut(z1, t1);
    w[2] = lut(_mm512_srli_epi32(z0, 4), t2);
    w[3] = lut(_mm512_srli_epi32(z1, 4), t2);
    if (hb) {
        vf a1 = vset1(16.0f * d1), a2 = vset1(16.0f * d2);
        w[0] = _mm512_mask_add_ps(w[0], hb[0], w[0], a1);
        w[1] = _mm512_mask_add_ps(w[1], hb[1], w[1], a1);
        w[2] = _mm512_mask_add_ps(w[2], hb[2], w[2], a2);
        w[3] = _mm512_mask_add_ps(w[3], hb[3], w[3], a2);
    }
}
/* Exponent trick: OR a code c < 2^23 into the mantissa of 2^23 and subtract
 * 2^23 + off: the float c - off, exactly, with no shuffle. Q5_0's 32 values
 * (q - 16) from 16 nibble bytes and the fifth bits. */
ALWAYS void dec_q5_magic(const uint8_t *qs, uint32_t qh, vf *w) {
    const __m512i magic = _mm512_set1_epi32(0x4B000000), m4 = _mm512_set1_epi32(0xF), b16 = _mm512_set1_epi32(16);
    const vf c = vset1(8388608.0f + 16.0f);
    __m512i z = zx16(qs);
    __m512i lo = _mm512_ternarylogic_epi32(z, m4, magic, 0xEA); /* (z & 15) | magic */
    __m512i hi = _mm512_or_si512(_mm512_srli_epi32(z, 4), magic);
    lo = _mm512_mask_or_epi32(lo, (__mmask16)(qh & 0xffff), lo, b16);
    hi = _mm512_mask_or_epi32(hi, (__mmask16)(qh >> 16), hi, b16);
    w[0] = _mm512_sub_ps(_mm512_castsi512_ps(lo), c);
    w[1] = _mm512_sub_ps(_mm512_castsi512_ps(hi), c);
}
/* acc[p] += d * sum_v w[v] x[p][v] */
ALWAYS void acc_scaled(const vf *w, int nv, vf d, const float *x, int64_t xs, int nx, vf *acc) {
    UNROLL for (int p = 0; p < nx; p++) {
        const float *xp = x + p * xs;
        vf s = vmul(w[0], vload(xp));
        UNROLL for (int v = 1; v < nv; v++) s = vfma(w[v], vload(xp + v * KVL), s);
        acc[p] = vfma(s, d, acc[p]);
    }
}
#else
#define HAVE_LUT 0
#endif

/* --------------------------------------------------------------- matvec
 *
 * One function body per type, instantiated for nx = 1..DP_NX_MAX. Two sets
 * of accumulators (A, B) take alternate blocks so consecutive blocks do not
 * wait on each other's FMA latency. */

#define MATVEC_DISPATCH(name)                                                                                    \
    static void name(const uint8_t *w, size_t rb, int64_t nrows, int64_t K, const float *x, int64_t xs,         \
                     const float *xsum, int nx, float *out, int64_t os) {                                        \
        switch (nx) {                                                                                            \
        case 1: name##_n(w, rb, nrows, K, x, xs, xsum, 1, out, os); break;                                       \
        case 2: name##_n(w, rb, nrows, K, x, xs, xsum, 2, out, os); break;                                       \
        case 3: name##_n(w, rb, nrows, K, x, xs, xsum, 3, out, os); break;                                       \
        default: name##_n(w, rb, nrows, K, x, xs, xsum, 4, out, os); break;                                      \
        }                                                                                                        \
    }

#define MATVEC_ARGS                                                                                              \
    const uint8_t *w, size_t rb, int64_t nrows, int64_t K, const float *x, int64_t xs, const float *xsum,       \
        const int nx, float *out, int64_t os

#define ROW_BEGIN                                                                                                \
    for (int64_t r = 0; r < nrows; r++) {                                                                        \
        const uint8_t *b = w + (size_t)r * rb;                                                                   \
        vf A[DP_NX_MAX], B[DP_NX_MAX];                                                                           \
        float msum[DP_NX_MAX];                                                                                   \
        UNROLL for (int p = 0; p < nx; p++) A[p] = B[p] = vzero(), msum[p] = 0.0f;
#define ROW_END                                                                                                  \
    UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = vhsum(vadd(A[p], B[p])) + msum[p];                     \
    }

/* Types with 32-element blocks of BS bytes: BLOCK(bp, i, ACC) handles the
 * block at bp (elements i..i+31). */
#define BLOCKS32(BS)                                                                                             \
    int64_t i = 0;                                                                                               \
    for (; i + 64 <= K; i += 64, b += 2 * (BS)) {                                                                \
        BLOCK(b, i, A);                                                                                          \
        BLOCK(b + (BS), i + 32, B);                                                                              \
    }                                                                                                            \
    if (i < K) BLOCK(b, i, A);

/* the block minimum of Q4_1/Q5_1 through the sums of x (int8 path only) */
#define MIN_TERM(m, i)                                                                                           \
    UNROLL for (int p = 0; p < nx; p++) msum[p] += (m) * xsum[p * (K / 32) + (i) / 32]

ALWAYS void mv_q4_0_n(MATVEC_ARGS) {
    (void)xsum;
#if HAVE_LUT
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        vf wv[2];                                                                                                \
        dec_q4(bp + 2, h2f(bp), -8.0f * h2f(bp), wv);                                                            \
        accw(wv, 2, x + (i), xs, nx, ACC);                                                                       \
    } while (0)
#else
    const __m128i c8 = _mm_set1_epi8(8);
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        __m128i lo, hi;                                                                                          \
        nibbles(ld16(bp + 2), &lo, &hi);                                                                         \
        acc32(_mm_sub_epi8(lo, c8), _mm_sub_epi8(hi, c8), vset1(h2f(bp)), x + (i), xs, nx, ACC);                 \
    } while (0)
#endif
    ROW_BEGIN
    BLOCKS32(18)
    ROW_END
#undef BLOCK
}

ALWAYS void mv_q4_1_n(MATVEC_ARGS) {
#if HAVE_LUT
    (void)xsum;
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        vf wv[2];                                                                                                \
        dec_q4(bp + 4, h2f(bp), h2f(bp + 2), wv);                                                                \
        accw(wv, 2, x + (i), xs, nx, ACC);                                                                       \
    } while (0)
#else
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        __m128i lo, hi;                                                                                          \
        nibbles(ld16(bp + 4), &lo, &hi);                                                                         \
        acc32(lo, hi, vset1(h2f(bp)), x + (i), xs, nx, ACC);                                                     \
        MIN_TERM(h2f(bp + 2), i);                                                                                \
    } while (0)
#endif
    ROW_BEGIN
    BLOCKS32(20)
    ROW_END
#undef BLOCK
}

ALWAYS void mv_q5_0_n(MATVEC_ARGS) {
    (void)xsum;
#if HAVE_LUT
    /* the row's block scales as floats first, broadcast from memory below
     * (rows of up to 32768 values; longer ones convert block by block) */
    float dsb[1024], *ds = K / 32 <= 1024 ? dsb : NULL;
#define PRE                                                                                                      \
    if (ds)                                                                                                      \
        for (int64_t q = 0; q < K / 32; q++) ds[q] = h2f(b + q * 22);
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        uint32_t qh;                                                                                             \
        memcpy(&qh, bp + 2, 4);                                                                                  \
        vf wv[2];                                                                                                \
        dec_q5_magic(bp + 6, qh, wv);                                                                            \
        acc_scaled(wv, 2, vset1(ds ? ds[(i) / 32] : h2f(bp)), x + (i), xs, nx, ACC);                            \
    } while (0)
#else
#define PRE
    const __m128i c16 = _mm_set1_epi8(16);
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        uint32_t qh;                                                                                             \
        memcpy(&qh, bp + 2, 4);                                                                                  \
        __m128i lo, hi, h0, h1;                                                                                  \
        nibbles(ld16(bp + 6), &lo, &hi);                                                                         \
        q5_high(qh, &h0, &h1);                                                                                   \
        acc32(_mm_sub_epi8(_mm_or_si128(lo, h0), c16), _mm_sub_epi8(_mm_or_si128(hi, h1), c16), vset1(h2f(bp)), \
              x + (i), xs, nx, ACC);                                                                             \
    } while (0)
#endif
    ROW_BEGIN
    PRE
    BLOCKS32(22)
    ROW_END
#undef BLOCK
#undef PRE
}

ALWAYS void mv_q5_1_n(MATVEC_ARGS) {
#if HAVE_LUT
    (void)xsum;
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        uint32_t qh;                                                                                             \
        memcpy(&qh, bp + 4, 4);                                                                                  \
        vf wv[2];                                                                                                \
        dec_q5(bp + 8, qh, h2f(bp), h2f(bp + 2), wv);                                                            \
        accw(wv, 2, x + (i), xs, nx, ACC);                                                                       \
    } while (0)
#else
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        uint32_t qh;                                                                                             \
        memcpy(&qh, bp + 4, 4);                                                                                  \
        __m128i lo, hi, h0, h1;                                                                                  \
        nibbles(ld16(bp + 8), &lo, &hi);                                                                         \
        q5_high(qh, &h0, &h1);                                                                                   \
        acc32(_mm_or_si128(lo, h0), _mm_or_si128(hi, h1), vset1(h2f(bp)), x + (i), xs, nx, ACC);                 \
        MIN_TERM(h2f(bp + 2), i);                                                                                \
    } while (0)
#endif
    ROW_BEGIN
    BLOCKS32(24)
    ROW_END
#undef BLOCK
}

ALWAYS void mv_q8_0_n(MATVEC_ARGS) {
    (void)xsum;
#define BLOCK(bp, i, ACC) acc32(ld16(bp + 2), ld16(bp + 18), vset1(h2f(bp)), x + (i), xs, nx, ACC)
    ROW_BEGIN
    BLOCKS32(34)
    ROW_END
#undef BLOCK
}

/* Q4_K / Q5_K superblocks: sub-blocks 2j -> A, 2j+1 -> B. Q5 selects the
 * fifth bits. */
ALWAYS void mv_k45_n(MATVEC_ARGS, const int q5) {
    const int bs = q5 ? 176 : 144;
    ROW_BEGIN
    for (int64_t i = 0; i < K; i += QK_K, b += bs) {
        float d = h2f(b), dmin = h2f(b + 2);
        uint8_t sc[8], mn[8];
        scales_k4(b + 4, sc, mn);
        const uint8_t *qs = b + (q5 ? 48 : 16);
#if HAVE_LUT
        (void)xsum;
        __m128i h0 = q5 ? ld16(b + 16) : _mm_setzero_si128(), h1 = q5 ? ld16(b + 32) : _mm_setzero_si128();
        UNROLL for (int j = 0; j < 4; j++) {
            vf wv[4];
            __mmask16 hb[4];
            if (q5) {
                __m128i b1 = _mm_set1_epi8((char)(1 << (2 * j))), b2 = _mm_set1_epi8((char)(2 << (2 * j)));
                hb[0] = _mm_test_epi8_mask(h0, b1);
                hb[1] = _mm_test_epi8_mask(h1, b1);
                hb[2] = _mm_test_epi8_mask(h0, b2);
                hb[3] = _mm_test_epi8_mask(h1, b2);
            }
            dec_k_pair(qs + 32 * j, d * sc[2 * j], -dmin * mn[2 * j], d * sc[2 * j + 1], -dmin * mn[2 * j + 1],
                       q5 ? hb : NULL, wv);
            accw(wv, 2, x + i + 64 * j, xs, nx, A);
            accw(wv + 2, 2, x + i + 64 * j + 32, xs, nx, B);
        }
#else
        __m128i h0 = q5 ? ld16(b + 16) : _mm_setzero_si128(), h1 = q5 ? ld16(b + 32) : _mm_setzero_si128();
        UNROLL for (int j = 0; j < 4; j++) {
            __m128i a = ld16(qs + 32 * j), c = ld16(qs + 32 * j + 16);
            __m128i l0 = _mm_and_si128(a, M4), l1 = _mm_and_si128(c, M4);
            __m128i u0 = _mm_and_si128(_mm_srli_epi16(a, 4), M4), u1 = _mm_and_si128(_mm_srli_epi16(c, 4), M4);
            if (q5) {
                l0 = _mm_or_si128(l0, q5k_high(h0, 2 * j));
                l1 = _mm_or_si128(l1, q5k_high(h1, 2 * j));
                u0 = _mm_or_si128(u0, q5k_high(h0, 2 * j + 1));
                u1 = _mm_or_si128(u1, q5k_high(h1, 2 * j + 1));
            }
            const float *xj = x + i + 64 * j;
            acc32(l0, l1, vset1(d * sc[2 * j]), xj, xs, nx, A);
            acc32(u0, u1, vset1(d * sc[2 * j + 1]), xj + 32, xs, nx, B);
        }
        UNROLL for (int p = 0; p < nx; p++) {
            const float *s = xsum + p * (K / 32) + i / 32;
            float t = 0;
            for (int j = 0; j < 8; j++) t += (float)mn[j] * s[j];
            msum[p] -= dmin * t;
        }
#endif
    }
    ROW_END
}
ALWAYS void mv_q4_k_n(MATVEC_ARGS) { mv_k45_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, 0); }
ALWAYS void mv_q5_k_n(MATVEC_ARGS) { mv_k45_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, 1); }

ALWAYS void mv_q6_k_n(MATVEC_ARGS) {
    (void)xsum;
    ROW_BEGIN
    for (int64_t i = 0; i < K; i += QK_K, b += 210) {
        float d = h2f(b + 208);
        const int8_t *sc = (const int8_t *)(b + 192);
        UNROLL for (int h = 0; h < 2; h++) UNROLL for (int c = 0; c < 2; c++) {
            __m128i q[4];
            q6_groups(b + 64 * h, b + 128 + 32 * h, c, q);
            const float *xh = x + i + 128 * h + 16 * c;
            UNROLL for (int g = 0; g < 4; g++)
                acc16(q[g], vset1(d * (float)sc[8 * h + c + 2 * g]), xh + 32 * g, xs, nx, (g & 1) ? B : A);
        }
    }
    ROW_END
}

/* Float weights: two accumulators per position, scalar tail. */
#define MV_FLOAT(name, esize, LOADW, SCALAR)                                                                     \
    ALWAYS void name##_n(MATVEC_ARGS) {                                                                          \
        (void)xsum;                                                                                              \
        for (int64_t r = 0; r < nrows; r++) {                                                                    \
            const uint8_t *b = w + (size_t)r * rb;                                                               \
            vf a0[DP_NX_MAX], a1[DP_NX_MAX];                                                                     \
            UNROLL for (int p = 0; p < nx; p++) a0[p] = a1[p] = vzero();                                         \
            int64_t k = 0;                                                                                       \
            for (; k + 2 * KVL <= K; k += 2 * KVL) {                                                             \
                vf w0 = LOADW(b + k * esize), w1 = LOADW(b + (k + KVL) * esize);                                 \
                UNROLL for (int p = 0; p < nx; p++) {                                                            \
                    a0[p] = vfma(w0, vload(x + p * xs + k), a0[p]);                                              \
                    a1[p] = vfma(w1, vload(x + p * xs + k + KVL), a1[p]);                                        \
                }                                                                                                \
            }                                                                                                    \
            for (; k + KVL <= K; k += KVL) {                                                                     \
                vf w0 = LOADW(b + k * esize);                                                                    \
                UNROLL for (int p = 0; p < nx; p++) a0[p] = vfma(w0, vload(x + p * xs + k), a0[p]);              \
            }                                                                                                    \
            UNROLL for (int p = 0; p < nx; p++) {                                                                \
                float s = vhsum(vadd(a0[p], a1[p]));                                                             \
                for (int64_t j = k; j < K; j++) s += SCALAR(b + j * esize) * x[p * xs + j];                      \
                out[p * os + r] = s;                                                                             \
            }                                                                                                    \
        }                                                                                                        \
    }

ALWAYS vf load_f32(const uint8_t *p) { return vload((const float *)p); }
ALWAYS float sc_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
ALWAYS float sc_bf16(const uint8_t *p) {
    uint32_t u = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
MV_FLOAT(mv_f32, 4, load_f32, sc_f32)
MV_FLOAT(mv_f16, 2, load_f16, h2f)
MV_FLOAT(mv_bf16, 2, load_bf16, sc_bf16)

MATVEC_DISPATCH(mv_f32)
MATVEC_DISPATCH(mv_f16)
MATVEC_DISPATCH(mv_bf16)
MATVEC_DISPATCH(mv_q4_0)
MATVEC_DISPATCH(mv_q4_1)
MATVEC_DISPATCH(mv_q5_0)
MATVEC_DISPATCH(mv_q5_1)
MATVEC_DISPATCH(mv_q8_0)
MATVEC_DISPATCH(mv_q4_k)
MATVEC_DISPATCH(mv_q5_k)
MATVEC_DISPATCH(mv_q6_k)

/* ------------------------------------------------------------- dequant */

static void dq_q4_0(const void *row, float *y, int64_t K) {
    const uint8_t *b = row;
    for (int64_t i = 0; i < K; i += 32, b += 18) {
        float d = h2f(b);
#if HAVE_LUT
        vf wv[2];
        dec_q4(b + 2, d, -8.0f * d, wv);
        vstore(y + i, wv[0]);
        vstore(y + i + 16, wv[1]);
#else
        const __m128i c8 = _mm_set1_epi8(8);
        __m128i lo, hi;
        nibbles(ld16(b + 2), &lo, &hi);
        put16(y + i, _mm_sub_epi8(lo, c8), d, 0.0f);
        put16(y + i + 16, _mm_sub_epi8(hi, c8), d, 0.0f);
#endif
    }
}

static void dq_q4_1(const void *row, float *y, int64_t K) {
    const uint8_t *b = row;
    for (int64_t i = 0; i < K; i += 32, b += 20) {
        float d = h2f(b), m = h2f(b + 2);
#if HAVE_LUT
        vf wv[2];
        dec_q4(b + 4, d, m, wv);
        vstore(y + i, wv[0]);
        vstore(y + i + 16, wv[1]);
#else
        __m128i lo, hi;
        nibbles(ld16(b + 4), &lo, &hi);
        put16(y + i, lo, d, m);
        put16(y + i + 16, hi, d, m);
#endif
    }
}

static void dq_q5_0(const void *row, float *y, int64_t K) {
    const uint8_t *b = row;
    for (int64_t i = 0; i < K; i += 32, b += 22) {
        uint32_t qh;
        memcpy(&qh, b + 2, 4);
        float d = h2f(b);
#if HAVE_LUT
        vf wv[2];
        dec_q5(b + 6, qh, d, -16.0f * d, wv);
        vstore(y + i, wv[0]);
        vstore(y + i + 16, wv[1]);
#else
        const __m128i c16 = _mm_set1_epi8(16);
        __m128i lo, hi, h0, h1;
        nibbles(ld16(b + 6), &lo, &hi);
        q5_high(qh, &h0, &h1);
        put16(y + i, _mm_sub_epi8(_mm_or_si128(lo, h0), c16), d, 0.0f);
        put16(y + i + 16, _mm_sub_epi8(_mm_or_si128(hi, h1), c16), d, 0.0f);
#endif
    }
}

static void dq_q5_1(const void *row, float *y, int64_t K) {
    const uint8_t *b = row;
    for (int64_t i = 0; i < K; i += 32, b += 24) {
        uint32_t qh;
        memcpy(&qh, b + 4, 4);
        float d = h2f(b), m = h2f(b + 2);
#if HAVE_LUT
        vf wv[2];
        dec_q5(b + 8, qh, d, m, wv);
        vstore(y + i, wv[0]);
        vstore(y + i + 16, wv[1]);
#else
        __m128i lo, hi, h0, h1;
        nibbles(ld16(b + 8), &lo, &hi);
        q5_high(qh, &h0, &h1);
        put16(y + i, _mm_or_si128(lo, h0), d, m);
        put16(y + i + 16, _mm_or_si128(hi, h1), d, m);
#endif
    }
}

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
            if (q5) {
                __m128i b1 = _mm_set1_epi8((char)(1 << (2 * j))), b2 = _mm_set1_epi8((char)(2 << (2 * j)));
                hb[0] = _mm_test_epi8_mask(h0, b1);
                hb[1] = _mm_test_epi8_mask(h1, b1);
                hb[2] = _mm_test_epi8_mask(h0, b2);
                hb[3] = _mm_test_epi8_mask(h1, b2);
            }
            dec_k_pair(qs + 32 * j, d1, m1, d2, m2, q5 ? hb : NULL, wv);
            for (int v = 0; v < 4; v++) vstore(yj + 16 * v, wv[v]);
#else
            __m128i a = ld16(qs + 32 * j), c = ld16(qs + 32 * j + 16);
            __m128i l0 = _mm_and_si128(a, M4), l1 = _mm_and_si128(c, M4);
            __m128i u0 = _mm_and_si128(_mm_srli_epi16(a, 4), M4), u1 = _mm_and_si128(_mm_srli_epi16(c, 4), M4);
            if (q5) {
                l0 = _mm_or_si128(l0, q5k_high(h0, 2 * j));
                l1 = _mm_or_si128(l1, q5k_high(h1, 2 * j));
                u0 = _mm_or_si128(u0, q5k_high(h0, 2 * j + 1));
                u1 = _mm_or_si128(u1, q5k_high(h1, 2 * j + 1));
            }
            put16(yj, l0, d1, m1);
            put16(yj + 16, l1, d1, m1);
            put16(yj + 32, u0, d2, m2);
            put16(yj + 48, u1, d2, m2);
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

/* ---------------------------------------------------------------- gemm
 *
 * C[p][r] = W[r] . X[p] for a tile of R weight rows and P positions, both
 * row-major along K: R x P accumulators, each step loads P x vectors and R
 * weight vectors. The caller keeps the tile's rows in L1/L2. */

#if KVL == 16
#define GEMM_P 6
#else
#define GEMM_P 3
#endif

/* The four sums of a, b, c, d as one 128-bit vector. */
ALWAYS __m128 hsum4(vf a, vf b, vf c, vf d) {
#if KVL == 16
    __m256 a8 = _mm256_add_ps(_mm512_castps512_ps256(a), vhi256(a)),
           b8 = _mm256_add_ps(_mm512_castps512_ps256(b), vhi256(b)),
           c8 = _mm256_add_ps(_mm512_castps512_ps256(c), vhi256(c)),
           d8 = _mm256_add_ps(_mm512_castps512_ps256(d), vhi256(d));
#else
    __m256 a8 = a, b8 = b, c8 = c, d8 = d;
#endif
    __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a8, b8), _mm256_hadd_ps(c8, d8));
    return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

ALWAYS void gemm_tile(const float *W, int64_t ws, const float *X, int64_t xs, int64_t K, float *C, int64_t os,
                      int accum, const int R, const int P) {
    vf acc[4][GEMM_P];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int p = 0; p < P; p++) acc[r][p] = vzero();
    int64_t k = 0;
    for (; k + KVL <= K; k += KVL) {
        vf xv[GEMM_P];
        UNROLL for (int p = 0; p < P; p++) xv[p] = vload(X + p * xs + k);
        UNROLL for (int r = 0; r < R; r++) {
            vf wv = vload(W + r * ws + k);
            UNROLL for (int p = 0; p < P; p++) acc[r][p] = vfma(wv, xv[p], acc[r][p]);
        }
    }
    if (R == 4) {
        /* four rows' sums of one position are consecutive outputs */
        UNROLL for (int p = 0; p < P; p++) {
            __m128 v = hsum4(acc[0][p], acc[1][p], acc[2][p], acc[3][p]);
            if (k < K) {
                float t[4] = {0, 0, 0, 0};
                for (int r = 0; r < 4; r++)
                    for (int64_t j = k; j < K; j++) t[r] += W[r * ws + j] * X[p * xs + j];
                v = _mm_add_ps(v, _mm_loadu_ps(t));
            }
            if (accum) v = _mm_add_ps(v, _mm_loadu_ps(C + p * os));
            _mm_storeu_ps(C + p * os, v);
        }
        return;
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int p = 0; p < P; p++) {
        float s = vhsum(acc[r][p]);
        for (int64_t j = k; j < K; j++) s += W[r * ws + j] * X[p * xs + j];
        C[p * os + r] = accum ? C[p * os + r] + s : s;
    }
}

#define GT(r, p) \
    case (r) * 8 + (p): gemm_tile(W, ws, X, xs, K, C, os, accum, r, p); break
static void gemm_small(const float *W, int64_t ws, int R, const float *X, int64_t xs, int P, int64_t K, float *C,
                       int64_t os, int accum) {
    switch (R * 8 + P) {
        GT(1, 1); GT(1, 2); GT(1, 3); GT(2, 1); GT(2, 2); GT(2, 3); GT(3, 1); GT(3, 2); GT(3, 3);
        GT(4, 1); GT(4, 2);
#if GEMM_P > 3
        GT(1, 4); GT(1, 5); GT(2, 4); GT(2, 5); GT(3, 4); GT(3, 5); GT(4, 3); GT(4, 4); GT(4, 5);
        GT(1, 6); GT(2, 6); GT(3, 6);
#endif
    default: break;
    }
}
#undef GT

static void gemm(const float *W, int64_t ws, int64_t R, const float *X, int64_t xs, int64_t P, int64_t K, float *C,
                 int64_t os, int accum) {
    for (int64_t r = 0; r < R; r += 4) {
        int rn = R - r < 4 ? (int)(R - r) : 4;
        for (int64_t p = 0; p < P; p += GEMM_P) {
            int pn = P - p < GEMM_P ? (int)(P - p) : GEMM_P;
            const float *Wr = W + r * ws, *Xp = X + p * xs;
            float *Cp = C + p * os + r;
            if (rn == 4 && pn == GEMM_P) gemm_tile(Wr, ws, Xp, xs, K, Cp, os, accum, 4, GEMM_P);
            else gemm_small(Wr, ws, rn, Xp, xs, pn, K, Cp, os, accum);
        }
    }
}

/* ------------------------------------------------------- vector helpers */

static float dot(const float *a, const float *b, int64_t n) {
    vf s0 = vzero(), s1 = vzero();
    int64_t k = 0;
    for (; k + 2 * KVL <= n; k += 2 * KVL) {
        s0 = vfma(vload(a + k), vload(b + k), s0);
        s1 = vfma(vload(a + k + KVL), vload(b + k + KVL), s1);
    }
    for (; k + KVL <= n; k += KVL) s0 = vfma(vload(a + k), vload(b + k), s0);
    float s = vhsum(vadd(s0, s1));
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

static void axpy(float *y, float a, const float *x, int64_t n) {
    vf va = vset1(a);
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) vstore(y + k, vfma(va, vload(x + k), vload(y + k)));
    for (; k < n; k++) y[k] += a * x[k];
}

static void scale(float *y, float a, int64_t n) {
    vf va = vset1(a);
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) vstore(y + k, vmul(va, vload(y + k)));
    for (; k < n; k++) y[k] *= a;
}

/* exp(x) to about 1 ulp: x = n ln2 + r, |r| <= ln2/2, a degree-7 polynomial
 * (Cephes expf's coefficients) for exp(r), then the exponent bits. Inputs
 * are clamped to [-87, 88] (results below 2^-126 come out as about 1.6e-38
 * times a power of two, never denormal garbage). */
ALWAYS vf vexp(vf x) {
    x = vmax(vmin(x, vset1(88.0f)), vset1(-87.0f));
    vf n = vround(vmul(x, vset1(1.44269504088896341f)));
    vf r = vfma(n, vset1(-0.693359375f), x);
    r = vfma(n, vset1(2.12194440e-4f), r);
    vf p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
    return vmul(p, vpow2i(n));
}


static double exp_sum(float *x, float max, int64_t n) {
    vd s = vdzero();
    vf nm = vset1(-max);
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) {
        vf e = vexp(vadd(vload(x + k), nm));
        vstore(x + k, e);
        s = vdadd(s, vdadd(vcvt_lo_pd(e), vcvt_hi_pd(e)));
    }
    double sum = vdhsum(s);
    if (k < n) {
        float t[KVL];
        for (int i = 0; i < KVL; i++) t[i] = k + i < n ? x[k + i] - max : -INFINITY;
        vstore(t, vexp(vload(t)));
        for (int64_t i = 0; k + i < n; i++) {
            x[k + i] = t[i];
            sum += t[i];
        }
    }
    return sum;
}

/* g * sigmoid(t) * up */
ALWAYS vf sig_mul(vf g, vf t, vf up) { return vdiv(vmul(g, up), vadd(vset1(1.0f), vexp(vmul(t, vset1(-1.0f))))); }

/* Element-wise kernels: whole vectors, then the tail as one zero-padded
 * vector (activations run on short row slices of the fused matmul). */
#define TAIL(n, k, BODY)                                                                                         \
    if (k < n) {                                                                                                 \
        float tg[KVL] = {0}, tu[KVL] = {0}, to[KVL];                                                             \
        memcpy(tg, gate + k, sizeof(float) * (size_t)(n - k));                                                   \
        memcpy(tu, up + k, sizeof(float) * (size_t)(n - k));                                                     \
        vf g = vload(tg), u = vload(tu);                                                                         \
        vstore(to, BODY);                                                                                        \
        memcpy(out + k, to, sizeof(float) * (size_t)(n - k));                                                    \
    }

static void silu_mul(float *out, const float *gate, const float *up, int64_t n) {
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) {
        vf g = vload(gate + k);
        vstore(out + k, sig_mul(g, g, vload(up + k)));
    }
    TAIL(n, k, sig_mul(g, g, u))
}

/* 0.5 g (1 + tanh(u)) = g sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3) */
#define GELU_T(g) vmul(vset1(2.0f * 0.7978845608028654f), vfma(vmul(vset1(0.044715f), g), vmul(g, g), g))
static void gelu_mul(float *out, const float *gate, const float *up, int64_t n) {
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) {
        vf g = vload(gate + k);
        vstore(out + k, sig_mul(g, GELU_T(g), vload(up + k)));
    }
    TAIL(n, k, sig_mul(g, GELU_T(g), u))
}

static double sumsq(const float *x, int64_t n) {
    vd s0 = vdzero(), s1 = vdzero();
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) {
        vf v = vload(x + k);
        vd lo = vcvt_lo_pd(v), hi = vcvt_hi_pd(v);
        s0 = vdfma(lo, lo, s0);
        s1 = vdfma(hi, hi, s1);
    }
    double s = vdhsum(vdadd(s0, s1));
    for (; k < n; k++) s += (double)x[k] * x[k];
    return s;
}

#include "kernels_x86_int.h"

const dp_cpu_kernels KTABLE = {
    .name = KNAME,
    .isa = KISA,
    .matvec = {[DP_TYPE_F32] = mv_f32, [DP_TYPE_F16] = mv_f16, [DP_TYPE_BF16] = mv_bf16, [DP_TYPE_Q4_0] = mv_q4_0,
               [DP_TYPE_Q4_1] = mv_q4_1, [DP_TYPE_Q5_0] = mv_q5_0, [DP_TYPE_Q5_1] = mv_q5_1,
               [DP_TYPE_Q8_0] = mv_q8_0, [DP_TYPE_Q4_K] = mv_q4_k, [DP_TYPE_Q5_K] = mv_q5_k,
               [DP_TYPE_Q6_K] = mv_q6_k},
    .dequant = {[DP_TYPE_F16] = dq_f16, [DP_TYPE_BF16] = dq_bf16, [DP_TYPE_Q4_0] = dq_q4_0, [DP_TYPE_Q4_1] = dq_q4_1,
                [DP_TYPE_Q5_0] = dq_q5_0, [DP_TYPE_Q5_1] = dq_q5_1, [DP_TYPE_Q8_0] = dq_q8_0,
                [DP_TYPE_Q4_K] = dq_q4_k, [DP_TYPE_Q5_K] = dq_q5_k, [DP_TYPE_Q6_K] = dq_q6_k},
    .matvec_q = {[DP_TYPE_Q4_0] = mvq_q4_0, [DP_TYPE_Q4_1] = mvq_q4_1, [DP_TYPE_Q5_0] = mvq_q5_0,
                 [DP_TYPE_Q5_1] = mvq_q5_1, [DP_TYPE_Q8_0] = mvq_q8_0, [DP_TYPE_Q4_K] = mvq_q4_k,
                 [DP_TYPE_Q5_K] = mvq_q5_k, [DP_TYPE_Q6_K] = mvq_q6_k},
    .quantize_x = quantize_x,
    .gemm = gemm,
    .dot = dot,
    .axpy = axpy,
    .scale = scale,
    .exp_sum = exp_sum,
    .silu_mul = silu_mul,
    .gelu_mul = gelu_mul,
    .sumsq = sumsq,
};
