/* Screening kernels (lm_screen.c): an LM head's logits approximately, from
 * 8-bit activations (dp_xq8), at half the multiply-adds of the 16-bit
 * integer path. VNNI's vpdpbusd multiplies unsigned bytes with signed ones,
 * four products per int32 lane, so the weight codes stay bytes (no
 * widening to int16) and a block of 32 values and one position is one
 * instruction per 32 bytes. The weight codes are made unsigned by an
 * offset (Q8_0: + 128, the sign bit flipped; Q6_K's codes are unsigned
 * already, offset 32), which x's block sums take back out:
 * sum (q + 128) x = sum q x + 128 sum x.
 *
 * Only with VNNI (KVL 16; kernels.c drops them without it). The quads, the
 * merge of two quads into a group and the float step per group are those
 * of matvec_int.h. Integer sums are exact: |codes| <= 255 and |x| <= 127
 * give at most 2^20 per block. */
#ifndef DP_CPU_X86_SCREEN_H
#define DP_CPU_X86_SCREEN_H

#if KVL == 16

#define DPB(acc, a, xp) _mm256_dpbusd_epi32(acc, a, ILOAD(xp))

typedef struct {
    vi c[4];
} squad;
typedef struct {
    vi lo, hi;
} spair;

/* int32 lanes: two per block of the quad (its 128 bytes of x at xp) */
IALWAYS vi sdot_quad(const squad *q, const int8_t *xp) {
    vi t = DPB(ZV, q->c[0], xp), u = DPB(ZV, q->c[2], xp + 64);
    t = DPB(t, q->c[1], xp + 32);
    u = DPB(u, q->c[3], xp + 96);
    return _mm256_add_epi32(t, u);
}
/* lanes 0..3: A's values, 4..7: B's, moved into quad lanes */
IALWAYS vi sdot_pair(const spair *c, const int8_t *xp) { return pair_lanes(DPB(DPB(ZV, c->lo, xp), c->hi, xp + 32)); }

IALWAYS squad squad_q8_0(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d) {
    squad q;
    quad_mix(ld2x16(a + 2, b + 2), ld2x16(c + 2, d + 2), &q.c[0], &q.c[1]);
    quad_mix(ld2x16(a + 18, b + 18), ld2x16(c + 18, d + 18), &q.c[2], &q.c[3]);
    UNROLL for (int m = 0; m < 4; m++) q.c[m] = _mm256_xor_si256(q.c[m], I8(0x80));
    return q;
}
IALWAYS spair spair_q8_0(const uint8_t *a, const uint8_t *b) {
    return (spair){_mm256_xor_si256(ld2x16(a + 2, b + 2), I8(0x80)), _mm256_xor_si256(ld2x16(a + 18, b + 18), I8(0x80))};
}

/* Row loop of the 32-value block types (IROWS' shape): S[p] the merged
 * integer dots of a group, less (sum of x's codes) << SHIFT (the offset
 * 2^SHIFT of the codes), then one float multiply-add per group. */
#define SROWS(BS, SHIFT, QUAD, PAIR)                                                                                 \
    const int64_t nb = x->K / 32;                                                                                  \
    const int8_t *xq[DP_NX_MAX];                                                                                   \
    const float *xd[DP_NX_MAX];                                                                                    \
    const int32_t *xs[DP_NX_MAX];                                                                                  \
    UNROLL for (int p = 0; p < nx; p++) xq[p] = x[p].p8, xd[p] = x[p].dg, xs[p] = x[p].sg;                         \
    for (int64_t r = 0; r < nrows; r++) {                                                                          \
        const uint8_t *b = w + (size_t)r * rb;                                                                     \
        __m256 A[DP_NX_MAX];                                                                                       \
        vi S[DP_NX_MAX];                                                                                           \
        UNROLL for (int p = 0; p < nx; p++) A[p] = _mm256_setzero_ps();                                            \
        for (int64_t i = 0; i < nb; i += 8, b += 8 * (BS)) {                                                       \
            const int n = nb - i < 8 ? (int)(nb - i) : 8;                                                          \
            const __m256 dw = n == 8 ? ld8_f16_g(b, BS, 8) : ld8_f16_g(b, BS, n);                                  \
            if (n == 8) {                                                                                          \
                prefetch_ahead(b, 8 * (BS));                                                                       \
                const squad q0 = QUAD(b, b + (BS), b + 2 * (BS), b + 3 * (BS));                                    \
                vi T[DP_NX_MAX];                                                                                   \
                UNROLL for (int p = 0; p < nx; p++) T[p] = sdot_quad(&q0, xq[p] + 32 * i);                         \
                const squad q1 = QUAD(b + 4 * (BS), b + 5 * (BS), b + 6 * (BS), b + 7 * (BS));                     \
                UNROLL for (int p = 0; p < nx; p++) S[p] = merge(T[p], sdot_quad(&q1, xq[p] + 32 * (i + 4)));      \
            } else {                                                                                               \
                /* a quad of 4 (n >= 4), then 3 blocks as a quad or 1, 2 as a pair (x is zero past K) */           \
                const int nq = n / 4, rest = n % 4;                                                                \
                const uint8_t *bt = b + 4 * nq * (BS);                                                             \
                vi T[DP_NX_MAX], U[DP_NX_MAX];                                                                     \
                UNROLL for (int p = 0; p < nx; p++) T[p] = ZV;                                                     \
                if (nq) {                                                                                          \
                    const squad q0 = QUAD(b, b + (BS), b + 2 * (BS), b + 3 * (BS));                                \
                    UNROLL for (int p = 0; p < nx; p++) T[p] = sdot_quad(&q0, xq[p] + 32 * i);                     \
                }                                                                                                  \
                if (rest == 3) {                                                                                   \
                    const squad q1 = QUAD(bt, bt + (BS), bt + 2 * (BS), bt);                                       \
                    UNROLL for (int p = 0; p < nx; p++) U[p] = sdot_quad(&q1, xq[p] + 32 * (i + 4 * nq));          \
                } else if (rest) {                                                                                 \
                    const spair c = PAIR(bt, rest == 2 ? bt + (BS) : bt);                                          \
                    UNROLL for (int p = 0; p < nx; p++) U[p] = sdot_pair(&c, xq[p] + 32 * (i + 4 * nq));           \
                } else {                                                                                           \
                    UNROLL for (int p = 0; p < nx; p++) U[p] = ZV;                                                 \
                }                                                                                                  \
                UNROLL for (int p = 0; p < nx; p++) S[p] = nq ? merge(T[p], U[p]) : merge(U[p], T[p]);             \
            }                                                                                                      \
            UNROLL for (int p = 0; p < nx; p++) {                                                                  \
                const vi s = _mm256_sub_epi32(S[p], _mm256_slli_epi32(ILOAD(xs[p] + i), SHIFT));                   \
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_load_ps(xd[p] + i)), A[p]); \
            }                                                                                                      \
        }                                                                                                          \
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = hsum8(A[p]);                                         \
    }

#define SCR_ARGS const uint8_t *w, size_t rb, int64_t nrows, const dp_xq8 *x, float *out, int64_t os

/* Q6_K: the unsigned codes 0..63 (q6k_codes; the - 32 comes back through
 * x's sums of each 16-value half, whose scales differ); values 0..15 (L)
 * and 16..31 (H) of a block are summed and merged apart, as mvq_q6_k does. */
IALWAYS void scr_q6_k_n(SCR_ARGS, const int nx) {
    const int64_t nsb = x->K / QK_K;
    const int8_t *xq[DP_NX_MAX];
    const float *xd[DP_NX_MAX];
    const int32_t *xs[DP_NX_MAX], *xh[DP_NX_MAX];
    UNROLL for (int p = 0; p < nx; p++) xq[p] = x[p].p8, xd[p] = x[p].dg, xs[p] = x[p].sg, xh[p] = x[p].sgh;
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
                squad q;
                q6k_codes(b + 64 * h, b + 128 + 32 * h, q.c);
                UNROLL for (int p = 0; p < nx; p++) {
                    const int8_t *xp = xq[p] + 32 * (i + 4 * h);
                    const vi tl = DPB(DPB(ZV, q.c[0], xp), q.c[1], xp + 32);
                    const vi th = DPB(DPB(ZV, q.c[2], xp + 64), q.c[3], xp + 96);
                    if (h == 0) L[p] = tl, H[p] = th;
                    else L[p] = merge(L[p], tl), H[p] = merge(H[p], th);
                }
            }
            UNROLL for (int p = 0; p < nx; p++) {
                const vi sh = ILOAD(xh[p] + i), sl = _mm256_sub_epi32(ILOAD(xs[p] + i), sh);
                const __m256 dx = _mm256_load_ps(xd[p] + i);
                const vi l = _mm256_sub_epi32(L[p], _mm256_slli_epi32(sl, 5)), hh = _mm256_sub_epi32(H[p], _mm256_slli_epi32(sh, 5));
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(l), _mm256_mul_ps(fl, dx), A[p]);
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hh), _mm256_mul_ps(fh, dx), A[p]);
            }
        }
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = hsum8(A[p]);
    }
}
#define SCR_ENTRY(name)                                                                                         \
    static KINT void name(const uint8_t *w, size_t rb, int64_t nrows, const dp_xq8 *x, int nx, float *out,    \
                          int64_t os) {                                                                         \
        for (; nx > 0; nx -= DP_NX_MAX, x += DP_NX_MAX, out += DP_NX_MAX * os) switch (nx) {                   \
            case 1: name##_n(w, rb, nrows, x, out, os, 1); break;                                              \
            case 2: name##_n(w, rb, nrows, x, out, os, 2); break;                                              \
            case 3: name##_n(w, rb, nrows, x, out, os, 3); break;                                              \
            default: name##_n(w, rb, nrows, x, out, os, 4); break;                                             \
            }                                                                                                   \
    }

IALWAYS void scr_q8_0_n(SCR_ARGS, const int nx) { SROWS(34, 7, squad_q8_0, spair_q8_0) }
SCR_ENTRY(scr_q8_0)
SCR_ENTRY(scr_q6_k)

/* The bounds of n approximate logits a[i] (rows row0 + i), each within
 * t = wnorm[i] beta + |a[i]| 2^-22 of its exact value (lm_screen.c): keeps
 * *lo_max, the largest a - t seen, and lists in cand (up to cap; the
 * return value counts them all) the rows whose a + t reaches *lo_max as it
 * stands after their vector of 8: every row that can hold the maximum, and
 * few others once a high row has been seen. -1 when a value is NaN. */
static KINT int scr_scan(const float *a, const float *wnorm, int64_t n, float beta, float *lo_max, int32_t *cand,
                         int cap, int32_t row0) {
    const __m256 vb = _mm256_set1_ps(beta), eps = _mm256_set1_ps(0x1p-22f);
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    __m256 bad = _mm256_setzero_ps();
    float rm = *lo_max;
    int nc = 0;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(a + i);
        const __m256 t = _mm256_fmadd_ps(_mm256_loadu_ps(wnorm + i), vb, _mm256_mul_ps(_mm256_and_ps(v, absm), eps));
        const __m256 lo = _mm256_sub_ps(v, t), hi = _mm256_add_ps(v, t);
        bad = _mm256_or_ps(bad, _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        __m128 l = _mm_max_ps(_mm256_castps256_ps128(lo), _mm256_extractf128_ps(lo, 1));
        l = _mm_max_ps(l, _mm_movehl_ps(l, l));
        l = _mm_max_ss(l, _mm_movehdup_ps(l));
        const float m8 = _mm_cvtss_f32(l);
        rm = m8 > rm ? m8 : rm;
        unsigned mask = (unsigned)_mm256_movemask_ps(_mm256_cmp_ps(hi, _mm256_set1_ps(rm), _CMP_GE_OQ));
        for (; mask; mask &= mask - 1, nc++)
            if (nc < cap) cand[nc] = row0 + (int32_t)(i + __builtin_ctz(mask));
    }
    for (; i < n; i++) {
        const float v = a[i], t = fmaf(wnorm[i], beta, fabsf(v) * 0x1p-22f);
        if (v != v) return -1;
        rm = v - t > rm ? v - t : rm;
        if (v + t >= rm) {
            if (nc < cap) cand[nc] = row0 + (int32_t)i;
            nc++;
        }
    }
    if (_mm256_movemask_ps(bad)) return -1;
    *lo_max = rm;
    return nc;
}

#define SCREEN_TABLE .screen = {[DP_TYPE_Q8_0] = scr_q8_0, [DP_TYPE_Q6_K] = scr_q6_k}, .screen_scan = scr_scan,
#else
#define SCREEN_TABLE
#endif

#endif
