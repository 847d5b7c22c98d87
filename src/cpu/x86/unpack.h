/* Unpackers: the bit layouts of the quantised blocks (nibbles, fifth bits,
 * 6-bit K-quant scales, Q6_K's split codes) turned into int8 codes in
 * 128-bit registers, and with AVX-512 into scaled float weights. Shared by
 * the float matvec and the dequantisation kernels. */
#ifndef DP_CPU_X86_UNPACK_H
#define DP_CPU_X86_UNPACK_H

#include "../../quant_iq.h"
#include "vec.h"

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

/* The 32 codes of a Q4_0 / Q4_1 block (nibbles at qs; lo: values 0..15, hi:
 * 16..31) minus off: 8 for Q4_0's signed codes, 0 for Q4_1 */
ALWAYS void q4_codes(const uint8_t *qs, const int off, __m128i *lo, __m128i *hi) {
    nibbles(ld16(qs), lo, hi);
    if (off) {
        *lo = _mm_sub_epi8(*lo, _mm_set1_epi8((char)off));
        *hi = _mm_sub_epi8(*hi, _mm_set1_epi8((char)off));
    }
}

/* The same for Q5_0 (off 16) / Q5_1 (off 0), the fifth bits from qh */
ALWAYS void q5_codes(const uint8_t *qs, uint32_t qh, const int off, __m128i *lo, __m128i *hi) {
    __m128i h0, h1;
    nibbles(ld16(qs), lo, hi);
    q5_high(qh, &h0, &h1);
    *lo = _mm_or_si128(*lo, h0);
    *hi = _mm_or_si128(*hi, h1);
    if (off) {
        *lo = _mm_sub_epi8(*lo, _mm_set1_epi8((char)off));
        *hi = _mm_sub_epi8(*hi, _mm_set1_epi8((char)off));
    }
}

/* The 32 codebook values of an IQ4_NL block or IQ4_XS sub-block (nibbles
 * at qs; lo: values 0..15, hi: 16..31) as int8 */
ALWAYS void iq4_codes(const uint8_t *qs, __m128i *lo, __m128i *hi) {
    const __m128i kv = _mm_loadu_si128((const __m128i *)dp_iq4nl_values);
    nibbles(ld16(qs), lo, hi);
    *lo = _mm_shuffle_epi8(kv, *lo);
    *hi = _mm_shuffle_epi8(kv, *hi);
}

/* IQ4_XS: the 6-bit scale of sub-block j minus 32 (b: the super-block) */
ALWAYS int iq4xs_scale(const uint8_t *b, int j) {
    return (((b[4 + j / 2] >> 4 * (j % 2)) & 15) | ((b[2 + j / 4] >> 2 * (j % 4)) & 3) << 4) - 32;
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

/* Q4_K / Q5_K codes of sub-blocks 2j (c[0], c[1]: low nibbles of the 32
 * bytes at qs) and 2j + 1 (c[2], c[3]: high nibbles); Q5_K's fifth bits
 * from its 32 qh bytes h0, h1 */
ALWAYS void k45_codes(const uint8_t *qs, __m128i h0, __m128i h1, int j, const int q5, __m128i *c) {
    nibbles(ld16(qs), &c[0], &c[2]);
    nibbles(ld16(qs + 16), &c[1], &c[3]);
    if (q5) {
        c[0] = _mm_or_si128(c[0], q5k_high(h0, 2 * j));
        c[1] = _mm_or_si128(c[1], q5k_high(h1, 2 * j));
        c[2] = _mm_or_si128(c[2], q5k_high(h0, 2 * j + 1));
        c[3] = _mm_or_si128(c[3], q5k_high(h1, 2 * j + 1));
    }
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
/* Q5_K fifth bits of sub-blocks 2j and 2j + 1 as dec_k_pair's four masks
 * (h0, h1: the 32 qh bytes) */
ALWAYS void q5k_masks(__m128i h0, __m128i h1, int j, __mmask16 *hb) {
    __m128i b1 = _mm_set1_epi8((char)(1 << (2 * j))), b2 = _mm_set1_epi8((char)(2 << (2 * j)));
    hb[0] = _mm_test_epi8_mask(h0, b1);
    hb[1] = _mm_test_epi8_mask(h1, b1);
    hb[2] = _mm_test_epi8_mask(h0, b2);
    hb[3] = _mm_test_epi8_mask(h1, b2);
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
#else
#define HAVE_LUT 0
#endif

#endif
