/* The integer tile kernel of the blocked matmul (AVX-512 VNNI; at the avx2
 * level AVX-VNNI, 256 bits, below; kernels.c drops both where the CPU
 * lacks them): weight rows and positions in the block-interleaved int16 layout of
 * kernels.h (dp_iblocks), so that one vpdpwssd per 64-byte step and (row,
 * position) adds two products of each of 16 blocks into that block's own
 * int32 lane. After a group's 16 steps every lane holds a whole block's
 * exact integer dot product; one conversion, one multiply (the row's block
 * scales by the position's) and one multiply-add (a second for the
 * weights' block minimums times x's block sums) fold the group into float
 * accumulators: 3-4 float operations per 512 multiply-adds, where the float
 * tile kernel (gemm.h) spends 32 FMAs.
 *
 * Tile: 4 rows x 3 positions (12 int32 accumulators and the 4 + 3 loads of
 * a step in registers, the float sums in memory between groups). The
 * caller keeps the rows' groups in L1 while the positions stream past them.
 * Integer sums are exact while |codes| x |x_int| x 32 < 2^31 (igemm.c keeps
 * the weight codes within 2^11, x_int within DP_XQ_MAX); Q6_K's codes, up
 * to 2^12, are summed 16 values at a time (dp_iblocks.half: two float steps
 * per group); Q3_K's, at most 128, need not be.
 *
 * iweights decodes panels into the layout with the unpackers of the float
 * kernels (unpack.h), a group's 16 blocks at a time, equal bit for bit to
 * igemm.c's portable decoding (test_cpu_kernels). */
#ifndef DP_CPU_X86_IGEMM_H
#define DP_CPU_X86_IGEMM_H

#include "gemm.h"
#include "unpack.h"

#define IG_P 3 /* positions per tile (rows: 4) */

/* The 32 codes of block b of a weight row as int8 halves in value order
 * (lo: values 0..15, hi: 16..31), w = a q + m (igemm.c's block_codes, the
 * reference these must equal); Q6_K's and Q3_K's codes still to be
 * multiplied by their 16 values' scales s0, s1 (1 for the other types)
 * once widened. */
ALWAYS void iblock(int type, const uint8_t *row, int64_t b, float *a, float *m, __m128i *lo, __m128i *hi, int *s0,
                   int *s1) {
    *m = 0.0f;
    *s0 = *s1 = 1;
    switch (type) {
    case DP_TYPE_Q4_0: case DP_TYPE_Q4_1: case DP_TYPE_IQ4_NL: {
        const uint8_t *p = row + b * (type == DP_TYPE_Q4_1 ? 20 : 18);
        *a = h2f(p);
        if (type == DP_TYPE_IQ4_NL) iq4_codes(p + 2, lo, hi);
        else if (type == DP_TYPE_Q4_0) q4_codes(p + 2, 8, lo, hi);
        else {
            *m = h2f(p + 2);
            q4_codes(p + 4, 0, lo, hi);
        }
        return;
    }
    case DP_TYPE_Q5_0: case DP_TYPE_Q5_1: {
        const int one = type == DP_TYPE_Q5_1;
        const uint8_t *p = row + b * (one ? 24 : 22);
        uint32_t qh;
        memcpy(&qh, p + (one ? 4 : 2), 4);
        *a = h2f(p);
        if (one) *m = h2f(p + 2);
        q5_codes(p + (one ? 8 : 6), qh, one ? 0 : 16, lo, hi);
        return;
    }
    case DP_TYPE_Q8_0: {
        const uint8_t *p = row + b * 34;
        *a = h2f(p);
        *lo = ld16(p + 2);
        *hi = ld16(p + 18);
        return;
    }
    case DP_TYPE_Q4_K: case DP_TYPE_Q5_K: {
        const int five = type == DP_TYPE_Q5_K, j = (int)(b & 7);
        const uint8_t *p = row + (b >> 3) * (five ? 176 : 144), *qs = p + (five ? 48 : 16) + 32 * (j >> 1);
        uint8_t sc, mn;
        dp_scale_min_k4(j, p + 4, &sc, &mn);
        *a = h2f(p) * (float)sc;
        *m = -h2f(p + 2) * (float)mn;
        __m128i l0, h0, l1, h1;
        nibbles(ld16(qs), &l0, &h0);
        nibbles(ld16(qs + 16), &l1, &h1);
        *lo = j & 1 ? h0 : l0;
        *hi = j & 1 ? h1 : l1;
        if (five) {
            *lo = _mm_or_si128(*lo, q5k_high(ld16(p + 16), j));
            *hi = _mm_or_si128(*hi, q5k_high(ld16(p + 32), j));
        }
        return;
    }
    case DP_TYPE_Q6_K: { /* each 16 values' codes times their 8-bit scale (dp_iblocks.half) */
        const int j = (int)(b & 7), n = j >> 2, jj = j & 3;
        const uint8_t *p = row + (b >> 3) * 210;
        const int8_t *sc = (const int8_t *)(p + 192) + 8 * n + 2 * jj;
        __m128i g0[4], g1[4];
        q6_groups(p + 64 * n, p + 128 + 32 * n, 0, g0);
        q6_groups(p + 64 * n, p + 128 + 32 * n, 1, g1);
        *a = h2f(p + 208);
        *lo = g0[jj];
        *hi = g1[jj];
        *s0 = sc[0];
        *s1 = sc[1];
        return;
    }
    case DP_TYPE_Q3_K: { /* 2 bits at 2 (j % 4), 4 less where bit j of hmask is clear */
        const int j = (int)(b & 7);
        const uint8_t *p = row + (b >> 3) * 110, *qs = p + 32 + 32 * (j >> 2);
        const __m128i sh = _mm_cvtsi32_si128(2 * (j & 3)), m3 = _mm_set1_epi8(3), bit = _mm_set1_epi8((char)(1 << j));
        const __m128i off0 = _mm_andnot_si128(_mm_cmpeq_epi8(_mm_and_si128(ld16(p), bit), bit), _mm_set1_epi8(4));
        const __m128i off1 = _mm_andnot_si128(_mm_cmpeq_epi8(_mm_and_si128(ld16(p + 16), bit), bit), _mm_set1_epi8(4));
        *lo = _mm_sub_epi8(_mm_and_si128(_mm_srl_epi16(ld16(qs), sh), m3), off0);
        *hi = _mm_sub_epi8(_mm_and_si128(_mm_srl_epi16(ld16(qs + 16), sh), m3), off1);
        *a = h2f(p + 108);
        *s0 = dp_scale_q3_k(2 * j, p + 96);
        *s1 = dp_scale_q3_k(2 * j + 1, p + 96);
        return;
    }
    case DP_TYPE_IQ4_XS: {
        const int j = (int)(b & 7);
        const uint8_t *p = row + (b >> 3) * 136;
        *a = h2f(p) * (float)iq4xs_scale(p, j);
        iq4_codes(p + 8 + 16 * j, lo, hi);
        return;
    }
    default:
        *a = 0.0f;
        *lo = *hi = _mm_setzero_si128();
        return;
    }
}

#if KVL == 16

#define IG_KINT __attribute__((target("avx512vnni")))
#define IG_ALWAYS static inline __attribute__((always_inline)) IG_KINT

IG_ALWAYS void igemm_tile(const dp_iblocks *W, const dp_iblocks *X, int64_t ng, float *C, int64_t os, int accum,
                          const int R, const int P, const int H) {
    /* the float sums live in memory between groups: in registers they
     * would crowd out the integer ones (spills inside the steps) */
    float F[4 * IG_P * 16] __attribute__((aligned(64)));
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int p = 0; p < P; p++)
        _mm512_store_ps(F + 16 * (r * IG_P + p), _mm512_setzero_ps());
    const int64_t wq = W->gs * DP_IGROUP, xq = X->gs * DP_IGROUP, ws = W->gs * 16, xs = X->gs * 16;
    for (int64_t g = 0; g < ng; g++) {
        /* one base pointer per row and position, the steps at constant
         * offsets from them (computed addresses per step cost registers) */
        const int16_t *wp[4], *xp[3];
        UNROLL for (int r = 0; r < R; r++) wp[r] = W->q + g * DP_IGROUP + r * wq;
        UNROLL for (int p = 0; p < P; p++) xp[p] = X->q + g * DP_IGROUP + p * xq;
        /* H = 2 (W->half): the integer sums of 16 values at a time */
        UNROLL for (int h = 0; h < H; h++) {
            __m512i acc[4][3];
            UNROLL for (int r = 0; r < R; r++) UNROLL for (int p = 0; p < P; p++) acc[r][p] = _mm512_setzero_si512();
            UNROLL for (int s = h * 16 / H; s < (h + 1) * 16 / H; s++) {
                __m512i xv[3];
                UNROLL for (int p = 0; p < P; p++) xv[p] = _mm512_loadu_si512((const void *)(xp[p] + 32 * s));
                UNROLL for (int r = 0; r < R; r++) {
                    const __m512i wv = _mm512_loadu_si512((const void *)(wp[r] + 32 * s));
                    UNROLL for (int p = 0; p < P; p++) acc[r][p] = _mm512_dpwssd_epi32(acc[r][p], wv, xv[p]);
                }
            }
            UNROLL for (int p = 0; p < P; p++) {
                const __m512 xd = _mm512_loadu_ps(X->a + p * xs + 16 * g);
                UNROLL for (int r = 0; r < R; r++) {
                    float *f = F + 16 * (r * IG_P + p);
                    const __m512 wa = _mm512_loadu_ps(W->a + r * ws + 16 * g);
                    __m512 v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][p]), _mm512_mul_ps(wa, xd), _mm512_load_ps(f));
                    if (W->m && h == H - 1) {
                        const __m512 wm = _mm512_loadu_ps(W->m + r * ws + 16 * g);
                        v = _mm512_fmadd_ps(wm, _mm512_loadu_ps(X->m + p * xs + 16 * g), v);
                    }
                    _mm512_store_ps(f, v);
                }
            }
        }
    }
    if (R == 4) { /* four rows' sums of one position are consecutive outputs */
        UNROLL for (int p = 0; p < P; p++) {
            __m128 v = hsum4(_mm512_load_ps(F + 16 * p), _mm512_load_ps(F + 16 * (IG_P + p)),
                             _mm512_load_ps(F + 16 * (2 * IG_P + p)), _mm512_load_ps(F + 16 * (3 * IG_P + p)));
            if (accum) v = _mm_add_ps(v, _mm_loadu_ps(C + p * os));
            _mm_storeu_ps(C + p * os, v);
        }
        return;
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int p = 0; p < P; p++) {
        const float s = vhsum(_mm512_load_ps(F + 16 * (r * IG_P + p)));
        C[p * os + r] = accum ? C[p * os + r] + s : s;
    }
}

/* A group's 16 blocks (c[i]: block i's values 0..15 and 16..31 as int16)
 * into the layout at dst: their 16 x 16 dwords transposed (pair s of block
 * i to step s, lane i) in three rounds of shuffles. */
ALWAYS void igroup_store(const __m256i (*c)[2], int16_t *dst) {
    __m512i v[16], t[16];
    UNROLL for (int i = 0; i < 16; i++) v[i] = _mm512_inserti64x4(_mm512_castsi256_si512(c[i][0]), c[i][1], 1);
    /* rows 2i, 2i + 1 interleaved: dwords, then pairs of dwords */
    UNROLL for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm512_unpackhi_epi32(v[i], v[i + 1]);
    }
    UNROLL for (int i = 0; i < 16; i += 4) {
        v[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
        v[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
        v[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
        v[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    /* v[4h + j], 128-bit lane k: blocks 4h..4h + 3 at pair 4k + j; the four
     * h of each (k, j) into one vector */
    UNROLL for (int j = 0; j < 4; j++) {
        const __m512i v0 = _mm512_shuffle_i32x4(v[j], v[4 + j], 0x44);
        const __m512i v1 = _mm512_shuffle_i32x4(v[j], v[4 + j], 0xEE);
        const __m512i v2 = _mm512_shuffle_i32x4(v[8 + j], v[12 + j], 0x44);
        const __m512i v3 = _mm512_shuffle_i32x4(v[8 + j], v[12 + j], 0xEE);
        _mm512_storeu_si512((void *)(dst + 32 * j), _mm512_shuffle_i32x4(v0, v2, 0x88));
        _mm512_storeu_si512((void *)(dst + 32 * (4 + j)), _mm512_shuffle_i32x4(v0, v2, 0xDD));
        _mm512_storeu_si512((void *)(dst + 32 * (8 + j)), _mm512_shuffle_i32x4(v1, v3, 0x88));
        _mm512_storeu_si512((void *)(dst + 32 * (12 + j)), _mm512_shuffle_i32x4(v1, v3, 0xDD));
    }
}

#else

/* AVX-VNNI (256 bits, CPUs without AVX-512 such as recent Intel client
 * parts): a group's 16 lanes in two halves of 8 blocks, each half's 16
 * steps in turn; the same 4 x 3 tile (12 int32 accumulators of the 16
 * registers). The float sums, as above, in memory. */
#define IG_KINT __attribute__((target("avxvnni")))
#define IG_ALWAYS static inline __attribute__((always_inline)) IG_KINT

IG_ALWAYS void igemm_tile(const dp_iblocks *W, const dp_iblocks *X, int64_t ng, float *C, int64_t os, int accum,
                          const int R, const int P, const int H) {
    float F[4 * IG_P * 16] __attribute__((aligned(32)));
    for (int i = 0; i < 4 * IG_P * 16; i++) F[i] = 0.0f;
    const int64_t wq = W->gs * DP_IGROUP, xq = X->gs * DP_IGROUP, ws = W->gs * 16, xs = X->gs * 16;
    for (int64_t g = 0; g < ng; g++) {
        const int16_t *wp[4], *xp[IG_P];
        UNROLL for (int r = 0; r < R; r++) wp[r] = W->q + g * DP_IGROUP + r * wq;
        UNROLL for (int p = 0; p < P; p++) xp[p] = X->q + g * DP_IGROUP + p * xq;
        UNROLL for (int l = 0; l < 2; l++) /* lanes 8 l .. 8 l + 7 */
            UNROLL for (int h = 0; h < H; h++) {
                __m256i acc[4][IG_P];
                UNROLL for (int r = 0; r < R; r++) UNROLL for (int p = 0; p < P; p++)
                    acc[r][p] = _mm256_setzero_si256();
                UNROLL for (int s = h * 16 / H; s < (h + 1) * 16 / H; s++) {
                    __m256i xv[IG_P];
                    UNROLL for (int p = 0; p < P; p++)
                        xv[p] = _mm256_loadu_si256((const __m256i *)(xp[p] + 32 * s + 16 * l));
                    UNROLL for (int r = 0; r < R; r++) {
                        const __m256i wv = _mm256_loadu_si256((const __m256i *)(wp[r] + 32 * s + 16 * l));
                        UNROLL for (int p = 0; p < P; p++) acc[r][p] = _mm256_dpwssd_avx_epi32(acc[r][p], wv, xv[p]);
                    }
                }
                UNROLL for (int p = 0; p < P; p++) {
                    const __m256 xd = _mm256_loadu_ps(X->a + p * xs + 16 * g + 8 * l);
                    UNROLL for (int r = 0; r < R; r++) {
                        float *f = F + 16 * (r * IG_P + p) + 8 * l;
                        const __m256 wa = _mm256_loadu_ps(W->a + r * ws + 16 * g + 8 * l);
                        __m256 v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(acc[r][p]), _mm256_mul_ps(wa, xd),
                                                   _mm256_load_ps(f));
                        if (W->m && h == H - 1) {
                            const __m256 wm = _mm256_loadu_ps(W->m + r * ws + 16 * g + 8 * l);
                            v = _mm256_fmadd_ps(wm, _mm256_loadu_ps(X->m + p * xs + 16 * g + 8 * l), v);
                        }
                        _mm256_store_ps(f, v);
                    }
                }
            }
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int p = 0; p < P; p++) {
        const float *f = F + 16 * (r * IG_P + p);
        const float s = vhsum(_mm256_add_ps(_mm256_load_ps(f), _mm256_load_ps(f + 8)));
        C[p * os + r] = accum ? C[p * os + r] + s : s;
    }
}

/* igroup_store on 256-bit vectors: four 8 x 8 dword transposes (blocks
 * 0..7 and 8..15 by pairs 0..7 and 8..15). */
ALWAYS void tr8(__m256i *v) { /* v[i][s] -> v[s][i], 8 x 8 dwords */
    __m256i t[8], u[8];
    UNROLL for (int i = 0; i < 8; i += 2) {
        t[i] = _mm256_unpacklo_epi32(v[i], v[i + 1]);
        t[i + 1] = _mm256_unpackhi_epi32(v[i], v[i + 1]);
    }
    UNROLL for (int i = 0; i < 8; i += 4) {
        u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
        u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
        u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
        u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
    }
    UNROLL for (int j = 0; j < 4; j++) {
        v[j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x20);
        v[4 + j] = _mm256_permute2x128_si256(u[j], u[4 + j], 0x31);
    }
}
ALWAYS void igroup_store(const __m256i (*c)[2], int16_t *dst) {
    UNROLL for (int bh = 0; bh < 2; bh++) UNROLL for (int ph = 0; ph < 2; ph++) {
        __m256i v[8];
        UNROLL for (int k = 0; k < 8; k++) v[k] = c[8 * bh + k][ph];
        tr8(v);
        UNROLL for (int s = 0; s < 8; s++) _mm256_storeu_si256((__m256i *)(dst + 32 * (8 * ph + s) + 16 * bh), v[s]);
    }
}

#endif

/* dp_iblocks_weights (kernels.h) with iblock's decoding, a group's 16
 * blocks at a time (igroup_store puts them in place) */
ALWAYS void iweights_t(const int type, const uint8_t *w, size_t row_bytes, int64_t nr, int64_t k0, int64_t kc,
                       int16_t *q, float *a, float *m) {
    const int64_t nb = kc / 32, gc = (kc + DP_IGROUP - 1) / DP_IGROUP, b0 = k0 / 32;
    const int mins = dp_type_needs_xsum(type);
    const size_t off0 = (size_t)dp_row_size(type, k0), gbytes = (size_t)dp_row_size(type, DP_IGROUP);
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = w + (size_t)r * row_bytes;
        for (int64_t g = 0; g < gc; g++) {
            __m256i c[16][2];
            float *ag = a + (r * gc + g) * 16, *mg = mins ? m + (r * gc + g) * 16 : NULL;
            /* the same group two rows on: a prompt's panels come from memory,
             * and the hardware prefetcher does not follow rows apart */
            if (r + 2 < nr) {
                const uint8_t *nx = w + (size_t)(r + 2) * row_bytes + off0 + (size_t)g * gbytes;
                for (size_t o = 0; o < gbytes; o += 64) _mm_prefetch((const char *)nx + o, _MM_HINT_T0);
            }
            for (int i = 0; i < 16; i++) {
                const int64_t b = 16 * g + i;
                float bs = 0.0f, bm = 0.0f;
                __m128i lo = _mm_setzero_si128(), hi = lo;
                int s0 = 1, s1 = 1;
                if (b < nb) iblock(type, row, b0 + b, &bs, &bm, &lo, &hi, &s0, &s1);
                c[i][0] = _mm256_cvtepi8_epi16(lo);
                c[i][1] = _mm256_cvtepi8_epi16(hi);
                if (type == DP_TYPE_Q6_K || type == DP_TYPE_Q3_K) {
                    c[i][0] = _mm256_mullo_epi16(c[i][0], _mm256_set1_epi16((short)s0));
                    c[i][1] = _mm256_mullo_epi16(c[i][1], _mm256_set1_epi16((short)s1));
                }
                ag[i] = bs;
                if (mg) mg[i] = bm;
            }
            igroup_store((const __m256i(*)[2])c, q + (r * gc + g) * DP_IGROUP);
        }
    }
}

/* One case per tile shape: R (1..4) weight rows x P (1..IG_P) positions. */
#define IGT(r, p)                                                                                                     \
    case (r) * 4 + (p):                                                                                               \
        if (W->half) igemm_tile(&w, &x, ng, Cp, os, accum, r, p, 2);                                                  \
        else igemm_tile(&w, &x, ng, Cp, os, accum, r, p, 1);                                                          \
        break
IG_KINT static void igemm(const dp_iblocks *W, int64_t R, const dp_iblocks *X, int64_t P, int64_t ng, float *C,
                          int64_t os, int accum) {
    for (int64_t r = 0; r < R; r += 4) {
        const int rn = R - r < 4 ? (int)(R - r) : 4;
        dp_iblocks w = *W;
        w.q += r * W->gs * DP_IGROUP, w.a += r * W->gs * 16;
        if (w.m) w.m += r * W->gs * 16;
        for (int64_t p = 0; p < P; p += IG_P) {
            const int pn = P - p < IG_P ? (int)(P - p) : IG_P;
            dp_iblocks x = *X;
            x.q += p * X->gs * DP_IGROUP, x.a += p * X->gs * 16, x.m += p * X->gs * 16;
            float *Cp = C + p * os + r;
            switch (rn * 4 + pn) {
                IGT(1, 1); IGT(1, 2); IGT(1, 3); IGT(2, 1); IGT(2, 2); IGT(2, 3);
                IGT(3, 1); IGT(3, 2); IGT(3, 3); IGT(4, 1); IGT(4, 2); IGT(4, 3);
            default: break;
            }
        }
    }
}
#undef IGT

/* one copy of the loops per type (the type a constant in iblock) */
#define IWT(t)                                                                                                        \
    case t: iweights_t(t, w, row_bytes, nr, k0, kc, q, a, m); break
static void iweights(int type, const uint8_t *w, size_t row_bytes, int64_t nr, int64_t k0, int64_t kc, int16_t *q,
                     float *a, float *m) {
    switch (type) {
        IWT(DP_TYPE_Q4_0); IWT(DP_TYPE_Q4_1); IWT(DP_TYPE_Q5_0); IWT(DP_TYPE_Q5_1); IWT(DP_TYPE_Q8_0);
        IWT(DP_TYPE_IQ4_NL); IWT(DP_TYPE_Q3_K); IWT(DP_TYPE_Q4_K); IWT(DP_TYPE_Q5_K); IWT(DP_TYPE_Q6_K);
        IWT(DP_TYPE_IQ4_XS);
    default: break;
    }
}
#undef IWT

#define IGEMM_TABLE .igemm = igemm, .iweights = iweights,

#endif
