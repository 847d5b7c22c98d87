/* IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: super-blocks of 256 values, 8
 * sub-blocks of 32, each 4 groups of 8 values whose magnitudes come from a
 * grid (one u64 entry of 8 bytes for IQ2, two u32 of 4 for IQ3; read
 * through dp_iq_group, quant_iq.h) and whose signs are 8 bits.
 *
 *  - each sub-block decoded in value order to 32 signed bytes (iq_sub):
 *    the signed magnitudes (|q| <= 62) are the codes;
 *  - integer matvec (matvec_int.h's machinery): group m of the sub-blocks
 *    of a quad is exactly the quad's code vector c[m] (values 8 m .. 8 m +
 *    7 of each block), a dword transpose of four decoded sub-blocks.
 *    IQ2_XS and IQ2_S carry a scale per 16 values and take Q3_K's per-half
 *    sums (k16_dots);
 *  - dequantisation (prompt panels) and the float matvec: 8 codes widened
 *    to float times the scale, dp_deq_*'s value bit for bit. */
#ifndef DP_CPU_X86_IQ23_H
#define DP_CPU_X86_IQ23_H

/* Grid entries i0..i7 of an IQ3 grid as one vector, read in scalar loads */
ALWAYS vi iq3_entries(const uint32_t *grid, unsigned i0, unsigned i1, unsigned i2, unsigned i3, unsigned i4,
                      unsigned i5, unsigned i6, unsigned i7) {
    const __m128i a = _mm_unpacklo_epi32(_mm_cvtsi32_si128((int)grid[i0]), _mm_cvtsi32_si128((int)grid[i1]));
    const __m128i c = _mm_unpacklo_epi32(_mm_cvtsi32_si128((int)grid[i2]), _mm_cvtsi32_si128((int)grid[i3]));
    const __m128i e = _mm_unpacklo_epi32(_mm_cvtsi32_si128((int)grid[i4]), _mm_cvtsi32_si128((int)grid[i5]));
    const __m128i f = _mm_unpacklo_epi32(_mm_cvtsi32_si128((int)grid[i6]), _mm_cvtsi32_si128((int)grid[i7]));
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi64(a, c)), _mm_unpacklo_epi64(e, f), 1);
}

/* Sub-block j of super-block b as 32 signed codes in value order: the grid
 * entries (IQ3: 8 dwords, IQ2: 4 u64, each a scalar load; on the Zen 3
 * this was measured on, eight scalar loads and the unpacks take fewer
 * cycles than one AVX2 gather of the same dwords), the 32 sign bits (byte
 * l: group l) spread to a byte mask that negates. sw: IQ3_XXS's sign words
 * of the quad (iq3xxs_signs), or NULL to read them through dp_iq_signs7.
 * Without KINT: the dequantisation calls it too. */
ALWAYS vi iq_sub(const int type, const uint8_t *b, const int j, const __m128i *sw) {
    vi g;
    uint32_t s;
    if (type == DP_TYPE_IQ3_S || type == DP_TYPE_IQ3_XXS) {
        const uint8_t *q = b + 2 + 8 * j;
        if (type == DP_TYPE_IQ3_S) {
            /* the ninth bit of index k: bit k of qh[j] */
            const unsigned h = b[66 + j];
            g = iq3_entries(dp_iq3s_grid, q[0] | (h << 8 & 256), q[1] | (h << 7 & 256), q[2] | (h << 6 & 256),
                            q[3] | (h << 5 & 256), q[4] | (h << 4 & 256), q[5] | (h << 3 & 256), q[6] | (h << 2 & 256),
                            q[7] | (h << 1 & 256));
            s = ld32(b + 74 + 4 * j);
        } else {
            g = iq3_entries(dp_iq3xxs_grid, q[0], q[1], q[2], q[3], q[4], q[5], q[6], q[7]);
            if (sw) { /* iq3xxs_signs's word j & 3 */
                const int k = j & 3;
                s = (uint32_t)(k == 0   ? _mm_cvtsi128_si32(*sw)
                               : k == 1 ? _mm_extract_epi32(*sw, 1)
                               : k == 2 ? _mm_extract_epi32(*sw, 2)
                                        : _mm_extract_epi32(*sw, 3));
            } else {
                const uint32_t aux = ld32(b + 66 + 4 * j);
                s = dp_iq_signs7[aux & 127] | (uint32_t)dp_iq_signs7[(aux >> 7) & 127] << 8 |
                    (uint32_t)dp_iq_signs7[(aux >> 14) & 127] << 16 | (uint32_t)dp_iq_signs7[(aux >> 21) & 127] << 24;
            }
        }
    } else {
        unsigned s0, s1, s2, s3;
        const uint64_t g0 = dp_iq_group(type, b, j, 0, &s0), g1 = dp_iq_group(type, b, j, 1, &s1);
        const uint64_t g2 = dp_iq_group(type, b, j, 2, &s2), g3 = dp_iq_group(type, b, j, 3, &s3);
        g = _mm256_set_epi64x((long long)g3, (long long)g2, (long long)g1, (long long)g0);
        s = s0 | s1 << 8 | s2 << 16 | s3 << 24;
    }
    const vi sel = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3,
                                    3, 3, 3, 3);
    const vi bits = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const vi neg = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)s), sel), bits), bits);
    return _mm256_sub_epi8(_mm256_xor_si256(g, neg), neg);
}

/* c[m] of a quad from the magnitudes of blocks A..D and their sign bytes
 * spread over the group's bytes (r: lane 0 [sA x 4, sC x 4, sA x 4, sC x 4],
 * lane 1 the same of B and D): lane 0 [A 0..3, C 0..3, A 4..7, C 4..7],
 * lane 1 the same of B and D; byte k of the group takes bit k of its
 * block's sign byte. */
IALWAYS vi iq_signed(uint64_t ga, uint64_t gb, uint64_t gc, uint64_t gd, vi r) {
    const __m128i lo = _mm_unpacklo_epi32(_mm_cvtsi64_si128((long long)ga), _mm_cvtsi64_si128((long long)gc));
    const __m128i hi = _mm_unpacklo_epi32(_mm_cvtsi64_si128((long long)gb), _mm_cvtsi64_si128((long long)gd));
    const vi g = _mm256_inserti128_si256(_mm256_castsi128_si256(lo), hi, 1);
    const vi bits = _mm256_setr_epi8(1, 2, 4, 8, 1, 2, 4, 8, 16, 32, 64, -128, 16, 32, 64, -128, 1, 2, 4, 8, 1, 2, 4, 8,
                                     16, 32, 64, -128, 16, 32, 64, -128);
    const vi neg = _mm256_cmpeq_epi8(_mm256_and_si256(r, bits), bits);
    return _mm256_sub_epi8(_mm256_xor_si256(g, neg), neg);
}
/* r from the sign bytes as s = sA | sC << 8 | sB << 16 | sD << 24 */
IALWAYS vi iq_spread(uint32_t s) {
    const vi sel = _mm256_setr_epi8(0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 2, 2, 2, 2, 3,
                                    3, 3, 3);
    return _mm256_shuffle_epi8(_mm256_set1_epi32((int)s), sel);
}
/* The sign bytes of 7-bit sign codes x, one a byte (bit 7 clear): the code
 * and its parity as bit 7 (dp_iq_signs7). The 16-bit shifts bring the next
 * byte's bits only into bits 4..7, and bit 0 of each byte takes the parity
 * from bits 0..6 of its own byte. */
IALWAYS vi iq_signs7v(vi x) {
    vi p = _mm256_xor_si256(x, _mm256_srli_epi16(x, 4));
    p = _mm256_xor_si256(p, _mm256_srli_epi16(p, 2));
    p = _mm256_xor_si256(p, _mm256_srli_epi16(p, 1));
    return _mm256_or_si256(x, _mm256_slli_epi16(_mm256_and_si256(p, I8(1)), 7));
}
/* The four 7-bit codes at bits 0, 7, 14 and 21 of each dword (IQ2_XXS's
 * and IQ3_XXS's sign codes) moved into its four bytes */
IALWAYS vi iq_codes7(vi q) {
    const vi a = _mm256_or_si256(_mm256_and_si256(q, _mm256_set1_epi32(0x7F)),
                                 _mm256_and_si256(_mm256_slli_epi32(q, 1), _mm256_set1_epi32(0x7F00)));
    const vi c = _mm256_or_si256(_mm256_and_si256(_mm256_slli_epi32(q, 2), _mm256_set1_epi32(0x7F0000)),
                                 _mm256_and_si256(_mm256_slli_epi32(q, 3), _mm256_set1_epi32(0x7F000000)));
    return _mm256_or_si256(a, c);
}
/* IQ2_XXS / IQ2_XS: the 32 bytes of the quad's sub-blocks j0 .. j0 + 3 (8
 * each) with A and C in lane 0, B and D in lane 1, the order r takes */
IALWAYS vi iq2_quad_ac(const uint8_t *b, const int j0) {
    return _mm256_permute4x64_epi64(ILOAD(b + 2 + 8 * j0), 0xD8);
}
/* r from sign bytes at byte a (A) and a + 8 (C) of lane 0, b (B) and b + 8
 * (D) of lane 1 */
IALWAYS vi iq_spread_at(vi v, const int a, const int b) {
    const vi sel = _mm256_add_epi8(_mm256_setr_epi8(0, 0, 0, 0, 8, 8, 8, 8, 0, 0, 0, 0, 8, 8, 8, 8, 0, 0, 0, 0, 8, 8,
                                                    8, 8, 0, 0, 0, 0, 8, 8, 8, 8),
                                   _mm256_setr_m128i(_mm_set1_epi8((char)a), _mm_set1_epi8((char)b)));
    return _mm256_shuffle_epi8(v, sel);
}

/* IQ3_XXS: the sign words of sub-blocks j0 .. j0 + 3 (their four 7-bit
 * codes in each aux dword, after the 64 index bytes) as iq_sub uses them,
 * byte l the sign byte of group l, made in a vector */
IALWAYS __m128i iq3xxs_signs(const uint8_t *b, const int j0) {
    const vi q = _mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)(b + 66 + 4 * j0)));
    return _mm256_castsi256_si128(iq_signs7v(iq_codes7(q)));
}

/* The quad of sub-blocks j0 .. j0 + 3 (A..D): c[m] is group m of each;
 * IQ3: a dword transpose of the four value-order vectors: unpacking A with C
 * (B with D) pairs their dwords 0, 1 (group 0) in lane 0 and 4, 5 (group
 * 2) in lane 1, the high unpack groups 1 and 3. */
IALWAYS cquad quad_iq23(const int type, const uint8_t *b, const int j0) {
    if (type != DP_TYPE_IQ3_S && type != DP_TYPE_IQ3_XXS) {
        /* IQ2: 4 grid entries per c[m], placed in quad order directly */
        vi c[4];
        /* the signs: IQ2_S's 16 bytes of the quad; IQ2_XS's 7-bit codes (the top of each group's 16-bit word)
         * and IQ2_XXS's (four in the second dword of each sub-block) made sign bytes in a vector, for all
         * four groups at once */
        const vi s16 = type == DP_TYPE_IQ2_S ? bcast16(b + 34 + 4 * j0) : ZV;
        const vi q = type == DP_TYPE_IQ2_S ? ZV : iq2_quad_ac(b, j0);
        vi sx = ZV;
        if (type == DP_TYPE_IQ2_XS) sx = iq_signs7v(_mm256_srli_epi16(q, 9));
        if (type == DP_TYPE_IQ2_XXS) sx = iq_signs7v(iq_codes7(q));
        UNROLL for (int m = 0; m < 4; m++) {
            unsigned sa, sb, sc, sd;
            const uint64_t ga = dp_iq_group(type, b, j0, m, &sa), gb = dp_iq_group(type, b, j0 + 1, m, &sb);
            const uint64_t gc = dp_iq_group(type, b, j0 + 2, m, &sc), gd = dp_iq_group(type, b, j0 + 3, m, &sd);
            /* IQ2_S: byte 4 i + m of both lanes is group m of block i; the others: A, C in lane 0 */
            const vi r = type == DP_TYPE_IQ2_S    ? iq_spread_at(s16, m, 4 + m)
                         : type == DP_TYPE_IQ2_XS ? iq_spread_at(sx, 2 * m, 2 * m)
                                                  : iq_spread_at(sx, 4 + m, 4 + m);
            c[m] = iq_signed(ga, gb, gc, gd, r);
        }
        return quad_s(c[0], c[1], c[2], c[3]);
    }
    const __m128i sw = type == DP_TYPE_IQ3_XXS ? iq3xxs_signs(b, j0) : _mm_setzero_si128();
    const vi na = iq_sub(type, b, j0, &sw), nb = iq_sub(type, b, j0 + 1, &sw), nc = iq_sub(type, b, j0 + 2, &sw),
             nd = iq_sub(type, b, j0 + 3, &sw);
    const vi t0 = _mm256_unpacklo_epi32(na, nc), t1 = _mm256_unpackhi_epi32(na, nc);
    const vi u0 = _mm256_unpacklo_epi32(nb, nd), u1 = _mm256_unpackhi_epi32(nb, nd);
    return quad_s(_mm256_permute2x128_si256(t0, u0, 0x20), _mm256_permute2x128_si256(t1, u1, 0x20),
                  _mm256_permute2x128_si256(t0, u0, 0x31), _mm256_permute2x128_si256(t1, u1, 0x31));
}

/* dp_iq_scale over 8 scale codes s (int32 lanes) */
IALWAYS __m256 iq_scales(const int type, float d, vi s) {
    const __m256 f = _mm256_cvtepi32_ps(s), vd = _mm256_set1_ps(d);
    if (type == DP_TYPE_IQ3_S) return _mm256_mul_ps(vd, _mm256_add_ps(_mm256_add_ps(f, f), _mm256_set1_ps(1.0f)));
    return _mm256_mul_ps(_mm256_mul_ps(vd, _mm256_add_ps(_mm256_set1_ps(0.5f), f)),
                         _mm256_set1_ps(type == DP_TYPE_IQ3_XXS ? 0.5f : 0.25f));
}

/* IQ2_XXS, IQ3_XXS, IQ3_S: one scale per sub-block, in group order */
IALWAYS void mvq_iq32(MVQ_ARGS, const int type, const int nx) {
    KROWS(dp_iq_block_bytes(type), 0, {
        const vi s = _mm256_setr_epi32((int)dp_iq_scale_code(type, b, 0, 0), (int)dp_iq_scale_code(type, b, 4, 0),
                                       (int)dp_iq_scale_code(type, b, 2, 0), (int)dp_iq_scale_code(type, b, 6, 0),
                                       (int)dp_iq_scale_code(type, b, 1, 0), (int)dp_iq_scale_code(type, b, 5, 0),
                                       (int)dp_iq_scale_code(type, b, 3, 0), (int)dp_iq_scale_code(type, b, 7, 0));
        sc = iq_scales(type, h2f(b), s);
        mn = _mm256_setzero_ps();
        KDOTS(quad_iq23(type, b, 0), quad_iq23(type, b, 4))
    })
}

/* IQ2_XS, IQ2_S: a scale byte per sub-block (low nibble: values 0..15,
 * high: 16..31) at sc; as floats in group order, fl the low halves */
IALWAYS void iq_scales16(const int type, const uint8_t *b, const uint8_t *sc, __m256 *fl, __m256 *fh) {
    uint64_t v;
    memcpy(&v, sc, 8);
    const __m128i g = _mm_shuffle_epi8(_mm_cvtsi64_si128((long long)v), _mm_setr_epi8(0, 4, 2, 6, 1, 5, 3, 7, 0, 0, 0,
                                                                                       0, 0, 0, 0, 0));
    const vi s = _mm256_cvtepu8_epi32(g), m4 = _mm256_set1_epi32(15);
    *fl = iq_scales(type, h2f(b), _mm256_and_si256(s, m4));
    *fh = iq_scales(type, h2f(b), _mm256_srli_epi32(s, 4));
}
IALWAYS void mvq_iq16(MVQ_ARGS, const int type, const int nx) {
    const int64_t nsb = x->K / QK_K, bs = dp_iq_block_bytes(type);
    XPLANES(nx)
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 A[DP_NX_MAX];
        vi L[DP_NX_MAX], H[DP_NX_MAX];
        UNROLL for (int p = 0; p < nx; p++) A[p] = _mm256_setzero_ps();
        for (int64_t s = 0; s < nsb; s++, b += bs) {
            prefetch_ahead(b, (int)bs);
            const int64_t i = 8 * s;
            __m256 fl, fh;
            iq_scales16(type, b, b + (type == DP_TYPE_IQ2_XS ? 66 : 74), &fl, &fh);
            UNROLL for (int h = 0; h < 2; h++) k16_dots(quad_iq23(type, b, 4 * h), xq, i, h, nx, L, H);
            UNROLL for (int p = 0; p < nx; p++) {
                const __m256 dx = _mm256_load_ps(xd[p] + i);
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(L[p]), _mm256_mul_ps(fl, dx), A[p]);
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(H[p]), _mm256_mul_ps(fh, dx), A[p]);
            }
        }
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = hsum8(A[p]);
    }
}

IALWAYS void mvq_iq2_xxs_n(MVQ_ARGS, const int nx) { mvq_iq32(w, rb, nrows, x, out, os, DP_TYPE_IQ2_XXS, nx); }
IALWAYS void mvq_iq3_xxs_n(MVQ_ARGS, const int nx) { mvq_iq32(w, rb, nrows, x, out, os, DP_TYPE_IQ3_XXS, nx); }
IALWAYS void mvq_iq3_s_n(MVQ_ARGS, const int nx) { mvq_iq32(w, rb, nrows, x, out, os, DP_TYPE_IQ3_S, nx); }
IALWAYS void mvq_iq2_xs_n(MVQ_ARGS, const int nx) { mvq_iq16(w, rb, nrows, x, out, os, DP_TYPE_IQ2_XS, nx); }
IALWAYS void mvq_iq2_s_n(MVQ_ARGS, const int nx) { mvq_iq16(w, rb, nrows, x, out, os, DP_TYPE_IQ2_S, nx); }
MVQ_ENTRY(mvq_iq2_xxs)
MVQ_ENTRY(mvq_iq2_xs)
MVQ_ENTRY(mvq_iq2_s)
MVQ_ENTRY(mvq_iq3_xxs)
MVQ_ENTRY(mvq_iq3_s)

/* Super-blocks of a row to float, dp_dequantize_row's values: the signed
 * code times the scale is its magnitude times the scale, negated (rounding
 * is symmetric) */
ALWAYS void dq_iq23(const int type, const uint8_t *b, float *y, int64_t K) {
    const int bs = dp_iq_block_bytes(type), h16 = type == DP_TYPE_IQ2_XS || type == DP_TYPE_IQ2_S;
    for (int64_t i = 0; i < K; i += QK_K, b += bs) {
        const float d = h2f(b);
        for (int j = 0; j < 8; j++) {
            const float d0 = dp_iq_scale(type, d, dp_iq_scale_code(type, b, j, 0));
            const float d1 = h16 ? dp_iq_scale(type, d, dp_iq_scale_code(type, b, j, 1)) : d0;
            const vi c = iq_sub(type, b, j, NULL);
            const __m128i lo = _mm256_castsi256_si128(c), hi = _mm256_extracti128_si256(c, 1);
            const __m128i q[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
            float *yj = y + i + 32 * j;
            UNROLL for (int l = 0; l < 4; l++)
                _mm256_storeu_ps(yj + 8 * l, _mm256_mul_ps(_mm256_set1_ps(l < 2 ? d0 : d1),
                                                           _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q[l]))));
        }
    }
}
static void dq_iq2_xxs(const void *row, float *y, int64_t K) { dq_iq23(DP_TYPE_IQ2_XXS, row, y, K); }
static void dq_iq2_xs(const void *row, float *y, int64_t K) { dq_iq23(DP_TYPE_IQ2_XS, row, y, K); }
static void dq_iq2_s(const void *row, float *y, int64_t K) { dq_iq23(DP_TYPE_IQ2_S, row, y, K); }
static void dq_iq3_xxs(const void *row, float *y, int64_t K) { dq_iq23(DP_TYPE_IQ3_XXS, row, y, K); }
static void dq_iq3_s(const void *row, float *y, int64_t K) { dq_iq23(DP_TYPE_IQ3_S, row, y, K); }

/* Float matvec (2..DP_NX_MAX positions, DOPPLER_CPU_ACT=f32): each
 * super-block dequantised as above, then multiplied with every position,
 * alternate vectors into A and B */
ALWAYS void mv_iq23_n(MATVEC_ARGS, const int type) {
    (void)xsum;
    const int bs = dp_iq_block_bytes(type);
    float buf[QK_K] __attribute__((aligned(64)));
    ROW_BEGIN
    for (int64_t i = 0; i < K; i += QK_K, b += bs) {
        dq_iq23(type, b, buf, QK_K);
        UNROLL for (int v = 0; v < QK_K / KVL; v += 2) {
            const vf w0 = vload(buf + v * KVL), w1 = vload(buf + (v + 1) * KVL);
            UNROLL for (int p = 0; p < nx; p++) {
                A[p] = vfma(w0, vload(x + p * xs + i + v * KVL), A[p]);
                B[p] = vfma(w1, vload(x + p * xs + i + (v + 1) * KVL), B[p]);
            }
        }
    }
    ROW_END
}
ALWAYS void mv_iq2_xxs_n(MATVEC_ARGS) { mv_iq23_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, DP_TYPE_IQ2_XXS); }
ALWAYS void mv_iq2_xs_n(MATVEC_ARGS) { mv_iq23_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, DP_TYPE_IQ2_XS); }
ALWAYS void mv_iq2_s_n(MATVEC_ARGS) { mv_iq23_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, DP_TYPE_IQ2_S); }
ALWAYS void mv_iq3_xxs_n(MATVEC_ARGS) { mv_iq23_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, DP_TYPE_IQ3_XXS); }
ALWAYS void mv_iq3_s_n(MATVEC_ARGS) { mv_iq23_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, DP_TYPE_IQ3_S); }
MATVEC_DISPATCH(mv_iq2_xxs)
MATVEC_DISPATCH(mv_iq2_xs)
MATVEC_DISPATCH(mv_iq2_s)
MATVEC_DISPATCH(mv_iq3_xxs)
MATVEC_DISPATCH(mv_iq3_s)

#endif
