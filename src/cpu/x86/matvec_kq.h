/* Integer matvec kernels of the super-block types (K-quants and IQ4_XS:
 * 256 values, 8 sub-blocks of 32, one group of x's planes each), on the
 * machinery of matvec_int.h (quads, their dot products and merge, the row
 * loop's entry points), which includes this file at its end. */
#ifndef DP_CPU_X86_MATVEC_KQ_H
#define DP_CPU_X86_MATVEC_KQ_H

/* Super-block types (8 sub-blocks of 32 values: one group each): the row
 * loop around the body (the variadic argument), which sets S[p] (the merged dots) and the float
 * vectors sc (d times the sub-block scales, group order) and, with
 * HASMIN, mn (the minimums, group order). */
#define KROWS(BS, HASMIN, ...)                                                                                          \
    const int64_t nsb = x->K / QK_K;                                                                             \
    XPLANES(nx)                                                                                                  \
    for (int64_t r = 0; r < nrows; r++) {                                                                        \
        const uint8_t *b = w + (size_t)r * rb;                                                                   \
        __m256 A[DP_NX_MAX], M[DP_NX_MAX];                                                                       \
        vi S[DP_NX_MAX];                                                                                         \
        UNROLL for (int p = 0; p < nx; p++) A[p] = M[p] = _mm256_setzero_ps();                                   \
        for (int64_t s = 0; s < nsb; s++, b += (BS)) {                                                           \
            prefetch_ahead(b, BS);                                                                               \
            const int64_t i = 8 * s;                                                                             \
            __m256 sc, mn;                                                                                       \
            __VA_ARGS__                                                                                          \
            UNROLL for (int p = 0; p < nx; p++) {                                                                \
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[p]), _mm256_mul_ps(sc, _mm256_load_ps(xd[p] + i)), A[p]); \
                if (HASMIN) M[p] = _mm256_fmadd_ps(mn, _mm256_load_ps(xs[p] + i), M[p]);                         \
            }                                                                                                    \
        }                                                                                                        \
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = hsum8(A[p]) - hsum8(M[p]);                        \
    }

/* S[p] = the merged dots of the quads QA (sub-blocks 0..3) and QB (4..7) */
#define KDOTS(QA, QB)                                                                                            \
    {                                                                                                            \
        const cquad q0 = QA;                                                                                     \
        vi T[DP_NX_MAX];                                                                                         \
        UNROLL for (int p = 0; p < nx; p++) T[p] = dot_quad(q0, xq[p] + 32 * i, nx);                                 \
        const cquad q1 = QB;                                                                                     \
        UNROLL for (int p = 0; p < nx; p++) S[p] = merge(T[p], dot_quad(q1, xq[p] + 32 * (i + 4), nx));              \
    }

/* IQ4_XS super-blocks: sub-block j's 16 nibble bytes at 8 + 16 j, its scale
 * d (ls_j - 32) */
IALWAYS void mvq_iq4_xs_n(MVQ_ARGS, const int nx) {
    KROWS(136, 0, {
        const vi ls = _mm256_setr_epi32(iq4xs_scale(b, 0), iq4xs_scale(b, 4), iq4xs_scale(b, 2), iq4xs_scale(b, 6),
                                        iq4xs_scale(b, 1), iq4xs_scale(b, 5), iq4xs_scale(b, 3), iq4xs_scale(b, 7));
        sc = _mm256_mul_ps(_mm256_cvtepi32_ps(ls), _mm256_set1_ps(h2f(b)));
        mn = _mm256_setzero_ps();
        KDOTS(quad_iq4(b + 8, b + 24, b + 40, b + 56), quad_iq4(b + 72, b + 88, b + 104, b + 120))
    })
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

/* Q4_K / Q5_K: the 32 bytes at qs hold sub-blocks A (low nibbles, byte i:
 * value i) and B (high nibbles), the next 32 C and D. Bytes 0..15 of
 * both, broadcast, then mixed: dwords 0, 1 in quad order, low nibbles in
 * the low half and high nibbles in the high half: c[0]; dwords 2, 3: c[1];
 * bytes 16..31 give c[2], c[3]. Q5_K's fifth bits: bit s of qh byte i for
 * value i of sub-block s (a: the quad's first, A), mixed the same way. */
IALWAYS vi k4_nib(vi t) { return _mm256_and_si256(_mm256_srlv_epi64(t, _mm256_set_epi64x(4, 4, 0, 0)), I8(0x0f)); }
IALWAYS vi k5_high(vi c, vi h, int a) {
    const vi bits = _mm256_setr_epi8(
        1 << a, 1 << a, 1 << a, 1 << a, 4 << a, 4 << a, 4 << a, 4 << a, 1 << a, 1 << a, 1 << a, 1 << a, 4 << a, 4 << a, 4 << a,
        4 << a, 2 << a, 2 << a, 2 << a, 2 << a, 8 << a, 8 << a, 8 << a, 8 << a, 2 << a, 2 << a, 2 << a, 2 << a, 8 << a, 8 << a,
        8 << a, 8 << a);
#if KVL == 16
    return _mm256_mask_add_epi8(c, _mm256_test_epi8_mask(h, bits), c, I8(16));
#else
    return _mm256_or_si256(c, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(h, bits), bits), I8(16)));
#endif
}
IALWAYS cquad quad_k45(const uint8_t *qs, const uint8_t *qh, int a) {
    vi c[4];
    UNROLL for (int t = 0; t < 2; t++) {
        const vi u = bcast16(qs + 16 * t), v = bcast16(qs + 32 + 16 * t);
        vi lo, hi;
        quad_mix(u, v, &lo, &hi);
        c[2 * t] = k4_nib(lo);
        c[2 * t + 1] = k4_nib(hi);
        if (qh) {
            const vi h = bcast16(qh + 16 * t);
            vi hl, hh;
            quad_mix(h, h, &hl, &hh);
            c[2 * t] = k5_high(c[2 * t], hl, a);
            c[2 * t + 1] = k5_high(c[2 * t + 1], hh, a);
        }
    }
    return quad_u(c[0], c[1], c[2], c[3]);
}
IALWAYS void mvq_k45(MVQ_ARGS, const int q5, const int nx) {
    KROWS(q5 ? 176 : 144, 1, {
        __m256i sm, mm;
        k4_scales(b + 4, &sm, &mm);
        sc = _mm256_mul_ps(_mm256_cvtepi32_ps(gorder(sm)), _mm256_set1_ps(h2f(b)));
        mn = _mm256_mul_ps(_mm256_cvtepi32_ps(gorder(mm)), _mm256_set1_ps(h2f(b + 2)));
        const uint8_t *qs = b + (q5 ? 48 : 16), *qh = q5 ? b + 16 : NULL;
        KDOTS(quad_k45(qs, qh, 0), quad_k45(qs + 64, qh, 4))
    })
}
IALWAYS void mvq_q4_k_n(MVQ_ARGS, const int nx) { mvq_k45(w, rb, nrows, x, out, os, 0, nx); }
IALWAYS void mvq_q5_k_n(MVQ_ARGS, const int nx) { mvq_k45(w, rb, nrows, x, out, os, 1, nx); }

/* Q6_K: codes q - 32; half h of a super-block is the quad of blocks 4h ..
 * 4h + 3: block 4h + k holds values l = 0..31 at ql[l + 32 (k & 1)] (low
 * nibbles for k < 2, high ones above) with bits 2k, 2k + 1 of qh[l] on
 * top, computed per block in value order, then mixed into quad order.
 * Each 16-value half of a block has its own scale, so c[0], c[1] (values
 * 0..15) and c[2], c[3] (16..31) are summed and merged apart. */
/* The unsigned codes (0..63) of half a Q6_K super-block (quants ql, high
 * bits qh) in quad order: c[0], c[1] values 0..15, c[2], c[3] 16..31. */
IALWAYS void q6k_codes(const uint8_t *ql, const uint8_t *qh, vi c[4]) {
    const vi a = ILOAD(ql), b = ILOAD(ql + 32), hb = ILOAD(qh);
    vi g[4];
    g[0] = _mm256_or_si256(_mm256_and_si256(a, I8(0x0f)), _mm256_and_si256(_mm256_slli_epi16(hb, 4), I8(0x30)));
    g[1] = _mm256_or_si256(_mm256_and_si256(b, I8(0x0f)), _mm256_and_si256(_mm256_slli_epi16(hb, 2), I8(0x30)));
    g[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a, 4), I8(0x0f)), _mm256_and_si256(hb, I8(0x30)));
    g[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(b, 4), I8(0x0f)),
                           _mm256_and_si256(_mm256_srli_epi16(hb, 2), I8(0x30)));
    /* [A | B] and [C | D] per 16 values, then quad order */
    quad_mix(_mm256_permute2x128_si256(g[0], g[1], 0x20), _mm256_permute2x128_si256(g[2], g[3], 0x20), &c[0], &c[1]);
    quad_mix(_mm256_permute2x128_si256(g[0], g[1], 0x31), _mm256_permute2x128_si256(g[2], g[3], 0x31), &c[2], &c[3]);
}

/* A Q6_K super-block's 16 scales times d, in group order: of values 0..15
 * of blocks 0, 4, 2, 6, 1, 5, 3, 7 (fl), then of 16..31 (fh). */
IALWAYS void q6k_scales(const uint8_t *b, __m256 *fl, __m256 *fh) {
    const __m128i sidx = _mm_setr_epi8(0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15);
    const __m128i sb = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(b + 192)), sidx);
    const __m256 d = _mm256_set1_ps(h2f(b + 208));
    *fl = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(sb)), d);
    *fh = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(sb, 8))), d);
}

/* Half h of a super-block (a quad whose blocks' 16-value halves carry
 * scales of their own) times each position: L[p] the sums of values 0..15
 * of each block, H[p] of 16..31, merged with the first half's at h = 1. */
IALWAYS void k16_dots(cquad q, const int16_t *const *xq, const int64_t i, const int h, const int nx, vi *L, vi *H) {
    UNROLL for (int p = 0; p < nx; p++) {
        const int16_t *xp = xq[p] + 32 * (i + 4 * h);
        const vi tl = dot_cw2(ZV, q.c[0], q.c[1], xp);
        const vi th = dot_cw2(ZV, q.c[2], q.c[3], xp + 64);
        if (h == 0) L[p] = tl, H[p] = th;
        else L[p] = merge(L[p], tl), H[p] = merge(H[p], th);
    }
}

IALWAYS void mvq_q6_k_n(MVQ_ARGS, const int nx) {
    const int64_t nsb = x->K / QK_K;
    XPLANES(nx)
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 A[DP_NX_MAX];
        vi L[DP_NX_MAX], H[DP_NX_MAX];
        UNROLL for (int p = 0; p < nx; p++) A[p] = _mm256_setzero_ps();
        for (int64_t s = 0; s < nsb; s++, b += 210) {
            prefetch_ahead(b, 210);
            const int64_t i = 8 * s;
            __m256 fl, fh;
            q6k_scales(b, &fl, &fh);
            UNROLL for (int h = 0; h < 2; h++) {
                vi u[4];
                q6k_codes(b + 64 * h, b + 128 + 32 * h, u);
                const vi o = I8(32);
                const cquad q = quad_s(_mm256_sub_epi8(u[0], o), _mm256_sub_epi8(u[1], o), _mm256_sub_epi8(u[2], o),
                                       _mm256_sub_epi8(u[3], o));
                k16_dots(q, xq, i, h, nx, L, H);
            }
            UNROLL for (int p = 0; p < nx; p++) {
                const __m256 dx = _mm256_load_ps(xd[p] + i);
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(L[p]), _mm256_mul_ps(fl, dx), A[p]);
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(H[p]), _mm256_mul_ps(fh, dx), A[p]);
            }
        }
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = hsum8(A[p]);
    }
}

/* Q2_K / Q3_K: half h of a super-block (values 128 h ..) is the quad of
 * blocks 4h .. 4h + 3, which all take their 2 low bits from the same 32
 * bytes qs (block k at bit 2k of byte l: its value l). Each 16 bytes,
 * broadcast, spread to dwords 0, 0, 1, 1 (0, 0, 1, 1 of each 128-bit
 * half: the values of c[m] in the quad lanes A, C, A, C | B, D, B, D) and
 * shifted right by 2k per lane, masked, give the quad's codes with no
 * shuffle between blocks. Q3_K's third bit is bit 4h + k of hmask byte l,
 * spread the same way; where it is clear the code is 4 lower. Each 16
 * values carry their own scale: c[0], c[1] and c[2], c[3] are summed and
 * merged apart, as Q6_K's. Bounds: |code| <= 4, 16 products below 2^21. */
IALWAYS void k23_low(const uint8_t *qs, vi c[4]) {
    const vi sh = _mm256_setr_epi32(0, 4, 0, 4, 2, 6, 2, 6);
    UNROLL for (int t = 0; t < 2; t++) {
        const vi u = bcast16(qs + 16 * t);
        c[2 * t] = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi32(u, 0x50), sh), I8(3));
        c[2 * t + 1] = _mm256_and_si256(_mm256_srlv_epi32(_mm256_shuffle_epi32(u, 0xFA), sh), I8(3));
    }
}
/* the 32 hmask bytes spread as k23_low spreads qs: e[m] for c[m] */
IALWAYS void q3k_hspread(const uint8_t *hm, vi e[4]) {
    UNROLL for (int t = 0; t < 2; t++) {
        const vi u = bcast16(hm + 16 * t);
        e[2 * t] = _mm256_shuffle_epi32(u, 0x50);
        e[2 * t + 1] = _mm256_shuffle_epi32(u, 0xFA);
    }
}
#if KVL == 16
IALWAYS vi q3k_high(vi c, vi e, const int h) {
    const int a = 4 * h;
    const int b1 = (int)(0x01010101u << a), b2 = (int)(0x02020202u << a), b4 = (int)(0x04040404u << a),
              b8 = (int)(0x08080808u << a);
    const vi bits = _mm256_setr_epi32(b1, b4, b1, b4, b2, b8, b2, b8);
    return _mm256_mask_sub_epi8(c, _mm256_testn_epi8_mask(e, bits), c, I8(4));
}
#else
/* the bit moved to bit 2 of its byte by a shift per dword lane: right by
 * 4h + k - 2, for h = 0 (k < 2 would be a left shift) of e shifted left by
 * 2 first (bits leaving a byte are never the ones read) */
IALWAYS vi q3k_high(vi c, vi e, const int h) {
    const vi t = h ? _mm256_srlv_epi32(e, _mm256_setr_epi32(2, 4, 2, 4, 3, 5, 3, 5))
                   : _mm256_srlv_epi32(_mm256_slli_epi32(e, 2), _mm256_setr_epi32(0, 2, 0, 2, 1, 3, 1, 3));
    return _mm256_sub_epi8(c, _mm256_andnot_si256(t, I8(4)));
}
#endif

/* A super-block's 16 sub-block scales (signed bytes sb, value order) in
 * group order as floats times d: values 0..15 of blocks 0, 4, 2, 6, 1, 5,
 * 3, 7 (fl), then 16..31 (fh) */
IALWAYS void k16_scales(__m128i sb, float d, __m256 *fl, __m256 *fh) {
    const __m128i g = _mm_shuffle_epi8(sb, _mm_setr_epi8(0, 8, 4, 12, 2, 10, 6, 14, 1, 9, 5, 13, 3, 11, 7, 15));
    *fl = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(g)), _mm256_set1_ps(d));
    *fh = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(g, 8))), _mm256_set1_ps(d));
}
/* Q3_K's 6-bit scales minus 32 (dp_scale_q3_k) unpacked in 32-bit registers */
IALWAYS __m128i q3k_scale_bytes(const uint8_t *q) {
    const uint32_t a0 = ld32(q), a1 = ld32(q + 4), t = ld32(q + 8), m4 = 0x0f0f0f0fu, m2 = 0x03030303u;
    const uint64_t lo = ((a0 & m4) | (t & m2) << 4) | (uint64_t)((a1 & m4) | ((t >> 2) & m2) << 4) << 32;
    const uint64_t hi = (((a0 >> 4) & m4) | ((t >> 4) & m2) << 4) | (uint64_t)(((a1 >> 4) & m4) | ((t >> 6) & m2) << 4) << 32;
    return _mm_sub_epi8(_mm_set_epi64x((long long)hi, (long long)lo), _mm_set1_epi8(32));
}

/* Q2_K (q3 = 0): value = d sc q - dmin m per 16 values (4-bit sc and m in
 * scales[0..16), unsigned codes 0..3); the minimums take x's sums per 16
 * values (sg16), in lanes of the same order. Q3_K: d sc (q - 4). */
IALWAYS void mvq_k23(MVQ_ARGS, const int q3, const int nx) {
    const int64_t nsb = x->K / QK_K, bs = q3 ? 110 : 84;
    XPLANES(nx)
    const float *xh[DP_NX_MAX];
    UNROLL for (int p = 0; p < nx; p++) xh[p] = x[p].sg16;
    for (int64_t r = 0; r < nrows; r++) {
        const uint8_t *b = w + (size_t)r * rb;
        __m256 A[DP_NX_MAX], M[DP_NX_MAX];
        vi L[DP_NX_MAX], H[DP_NX_MAX];
        UNROLL for (int p = 0; p < nx; p++) A[p] = M[p] = _mm256_setzero_ps();
        for (int64_t s = 0; s < nsb; s++, b += bs) {
            prefetch_ahead(b, (int)bs);
            const int64_t i = 8 * s;
            __m256 fl, fh, ml = _mm256_setzero_ps(), mh = ml;
            vi e[4];
            if (q3) {
                k16_scales(q3k_scale_bytes(b + 96), h2f(b + 108), &fl, &fh);
                q3k_hspread(b, e);
            } else {
                const __m128i sb = _mm_loadu_si128((const __m128i *)b), m4 = _mm_set1_epi8(15);
                k16_scales(_mm_and_si128(sb, m4), h2f(b + 80), &fl, &fh);
                k16_scales(_mm_and_si128(_mm_srli_epi16(sb, 4), m4), h2f(b + 82), &ml, &mh);
            }
            UNROLL for (int h = 0; h < 2; h++) {
                vi c[4];
                k23_low(b + (q3 ? 32 : 16) + 32 * h, c);
                cquad q;
                if (q3) {
                    UNROLL for (int m = 0; m < 4; m++) c[m] = q3k_high(c[m], e[m], h);
                    q = quad_s(c[0], c[1], c[2], c[3]);
                } else
                    q = quad_u(c[0], c[1], c[2], c[3]);
                k16_dots(q, xq, i, h, nx, L, H);
            }
            UNROLL for (int p = 0; p < nx; p++) {
                const __m256 dx = _mm256_load_ps(xd[p] + i);
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(L[p]), _mm256_mul_ps(fl, dx), A[p]);
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(H[p]), _mm256_mul_ps(fh, dx), A[p]);
                if (!q3) {
                    M[p] = _mm256_fmadd_ps(ml, _mm256_load_ps(xh[p] + 2 * i), M[p]);
                    M[p] = _mm256_fmadd_ps(mh, _mm256_load_ps(xh[p] + 2 * i + 8), M[p]);
                }
            }
        }
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = q3 ? hsum8(A[p]) : hsum8(A[p]) - hsum8(M[p]);
    }
}
IALWAYS void mvq_q2_k_n(MVQ_ARGS, const int nx) { mvq_k23(w, rb, nrows, x, out, os, 0, nx); }
IALWAYS void mvq_q3_k_n(MVQ_ARGS, const int nx) { mvq_k23(w, rb, nrows, x, out, os, 1, nx); }

MVQ_ENTRY(mvq_q2_k)
MVQ_ENTRY(mvq_q3_k)
MVQ_ENTRY(mvq_q4_k)
MVQ_ENTRY(mvq_q5_k)
MVQ_ENTRY(mvq_q6_k)
MVQ_ENTRY(mvq_iq4_xs)

#endif
