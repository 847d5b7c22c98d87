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
                UNROLL for (int p = 0; p < nx; p++) {
                    const int16_t *xp = xq[p] + 32 * (i + 4 * h);
                    const vi tl = dot_cw2(ZV, q.c[0], q.c[1], xp);
                    const vi th = dot_cw2(ZV, q.c[2], q.c[3], xp + 64);
                    if (h == 0) L[p] = tl, H[p] = th;
                    else L[p] = merge(L[p], tl), H[p] = merge(H[p], th);
                }
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

MVQ_ENTRY(mvq_q4_k)
MVQ_ENTRY(mvq_q5_k)
MVQ_ENTRY(mvq_q6_k)
MVQ_ENTRY(mvq_iq4_xs)

#endif
