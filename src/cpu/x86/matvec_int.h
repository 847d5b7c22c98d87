/* Integer matvec kernels (positions quantised by dp_xq_quantize): avx2 (KVL 8)
 * uses vpmaddwd, avx512 (KVL 16) VNNI's vpdpwssd (these functions carry
 * the avx512vnni and bmi2 targets; kernels.c gives the avx512 level avx2's
 * integer kernels when the CPU lacks either). Everything is 256 bits wide.
 *
 * Blocks of 32 values (K-quant sub-blocks too) go in quads, 4 consecutive
 * blocks A, B, C, D. Their weight codes (offset removed where the format
 * has a signed one, else unsigned) are decoded once into 4 byte vectors
 * c[m] whose dword lane j holds 4 values of block (A, C, A, C, B, D, B,
 * D)[j]: the values 16 (m / 2) + 4 (2 (m % 2) + (j % 4) / 2) .. + 3. Each
 * is split into its even bytes and odd bytes as int16 (cw) and multiplied
 * with every position's quad plane (dp_xq.pq, x_int in the same order):
 * eight 16-bit multiply-adds give int32 lanes holding partial sums of one
 * block each, two lanes per block. The two quads of a group of 8 blocks
 * then merge (one unpack pair and an add) into one vector whose lane holds
 * a whole block, in the group order 0, 4, 2, 6, 1, 5, 3, 7 (that of x's dg
 * and sg planes): one conversion to float and one multiply-add per group
 * and position instead of one per block. The float multiply-adds share the
 * two pipes of the 16-bit ones; shuffles and integer adds mostly do not.
 * Up to DP_NX_MAX positions share each decoded quad; a position's
 * operations are the same whatever the count, so its result does not
 * depend on it (the row loops are written once and unrolled per count).
 *
 * Bounds (codes |q| <= 128, |x_int| <= DP_XQ_MAX = 32639): a product is
 * below 2^22, a block's sum below 2^27: no int32 overflow (vpdpwssd does
 * not saturate); the conversion to float rounds only above 2^24. */

#ifndef DP_CPU_X86_MATVEC_INT_H
#define DP_CPU_X86_MATVEC_INT_H

#include "unpack.h"

#if KVL == 16
#define KINT __attribute__((target("avx512vnni,bmi2")))
#else
#define KINT
#endif
#define IALWAYS static inline __attribute__((always_inline)) KINT

typedef __m256i vi;
#define ILOAD(p) _mm256_loadu_si256((const __m256i *)(p))
#define I8(c) _mm256_set1_epi8((char)(c))
#define I16(c) _mm256_set1_epi16((short)(c))
#define ZV _mm256_setzero_si256()

#if DP_NX_MAX != 4
#error "the dispatchers below instantiate the row loops for 1..4 positions"
#endif

IALWAYS float hsum8(__m256 a) {
    __m128 l = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    l = _mm_add_ps(l, _mm_movehl_ps(l, l));
    l = _mm_add_ss(l, _mm_movehdup_ps(l));
    return _mm_cvtss_f32(l);
}

/* A byte vector of codes as int16: e = its even bytes, o = its odd ones */
typedef struct {
    vi e, o;
} cw;
IALWAYS cw split_u(vi c) { return (cw){_mm256_and_si256(c, I16(0xff)), _mm256_srli_epi16(c, 8)}; }
IALWAYS cw split_s(vi c) { return (cw){_mm256_srai_epi16(_mm256_slli_epi16(c, 8), 8), _mm256_srai_epi16(c, 8)}; }

/* A quad's codes: c[m] as described above */
typedef struct {
    cw c[4];
} cquad;

/* [16 bytes at a | 16 bytes at b] */
IALWAYS vi ld2x16(const uint8_t *a, const uint8_t *b) {
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)a)),
                                   _mm_loadu_si128((const __m128i *)b), 1);
}
IALWAYS vi bcast16(const uint8_t *p) { return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)p)); }

/* u = [A's bytes | B's], v = [C's | D's] at the same 16 byte positions:
 * the dwords 0, 1 (lo) and 2, 3 (hi) of those positions in quad order */
IALWAYS void quad_mix(vi u, vi v, vi *lo, vi *hi) {
    *lo = _mm256_unpacklo_epi32(u, v);
    *hi = _mm256_unpackhi_epi32(u, v);
}

/* The 16 nibble bytes of blocks A..D at a..d (byte i: value i in the low
 * nibble, i + 16 in the high one), as the unsigned codes of a quad: every
 * 16-bit lane holds 4 nibbles, taken apart by shifts and masks. */
IALWAYS cw nib_lo(vi v) { return (cw){_mm256_and_si256(v, I16(0x0f)), _mm256_and_si256(_mm256_srli_epi16(v, 8), I16(0x0f))}; }
IALWAYS cw nib_hi(vi v) { return (cw){_mm256_and_si256(_mm256_srli_epi16(v, 4), I16(0x0f)), _mm256_srli_epi16(v, 12)}; }
IALWAYS cquad quad_nib(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d) {
    vi lo, hi;
    quad_mix(ld2x16(a, b), ld2x16(c, d), &lo, &hi);
    return (cquad){{nib_lo(lo), nib_lo(hi), nib_hi(lo), nib_hi(hi)}};
}

/* A pair: blocks A and B alone, byte vectors [A values 0..15 | B's] (lo)
 * and [A 16..31 | B's] (hi) split as above, multiplied with x in the pair
 * order of dp_xq.pq (the last quad of a row whose length leaves 1 or 2
 * blocks past a multiple of 4): int32 lanes 0..3 sum values of A, 4..7 of
 * B. pair_lanes moves those sums into quad lanes (A in 0 and 2, B in 4
 * and 6, C and D zero) for the merge. */
typedef struct {
    cw lo, hi;
} cpair;
IALWAYS vi pair_lanes(vi t) {
    return _mm256_blend_epi32(_mm256_add_epi32(t, _mm256_shuffle_epi32(t, 0xB1)), ZV, 0xAA);
}
IALWAYS cpair pair_nib(const uint8_t *a, const uint8_t *b) {
    const vi v = ld2x16(a, b);
    return (cpair){nib_lo(v), nib_hi(v)};
}

/* The byte codes c[0..3] of a quad, split signed / unsigned */
IALWAYS cquad quad_s(vi c0, vi c1, vi c2, vi c3) { return (cquad){{split_s(c0), split_s(c1), split_s(c2), split_s(c3)}}; }
IALWAYS cquad quad_u(vi c0, vi c1, vi c2, vi c3) { return (cquad){{split_u(c0), split_u(c1), split_u(c2), split_u(c3)}}; }

#if KVL == 16
#define DPW(acc, a, b) _mm256_dpwssd_epi32(acc, a, b)
#else
#define DPW(acc, a, b) _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
#endif
/* acc + the products of c[m] and c[m + 1] with xp[0..64) */
IALWAYS vi dot_cw2(vi acc, cw a, cw b, const int16_t *xp) {
    acc = DPW(acc, a.e, ILOAD(xp));
    acc = DPW(acc, a.o, ILOAD(xp + 16));
    acc = DPW(acc, b.e, ILOAD(xp + 32));
    return DPW(acc, b.o, ILOAD(xp + 48));
}
/* int32 lanes: two per block of the quad; xp: its 128 values of pq. The
 * sums go in independent chains, 4 for one position (its latency is what
 * is exposed), 2 for more (the adds cost more than they hide); integer
 * sums are exact, so the result is the same either way. */
IALWAYS vi dot_quad(cquad q, const int16_t *xp, const int nx) {
    if (nx == 1) {
        const vi a = DPW(_mm256_madd_epi16(q.c[0].e, ILOAD(xp)), q.c[0].o, ILOAD(xp + 16));
        const vi b = DPW(_mm256_madd_epi16(q.c[1].e, ILOAD(xp + 32)), q.c[1].o, ILOAD(xp + 48));
        const vi c = DPW(_mm256_madd_epi16(q.c[2].e, ILOAD(xp + 64)), q.c[2].o, ILOAD(xp + 80));
        const vi d = DPW(_mm256_madd_epi16(q.c[3].e, ILOAD(xp + 96)), q.c[3].o, ILOAD(xp + 112));
        return _mm256_add_epi32(_mm256_add_epi32(a, b), _mm256_add_epi32(c, d));
    }
    vi t = _mm256_madd_epi16(q.c[0].e, ILOAD(xp)), u = _mm256_madd_epi16(q.c[2].e, ILOAD(xp + 64));
    t = DPW(t, q.c[0].o, ILOAD(xp + 16));
    u = DPW(u, q.c[2].o, ILOAD(xp + 80));
    t = DPW(t, q.c[1].e, ILOAD(xp + 32));
    u = DPW(u, q.c[3].e, ILOAD(xp + 96));
    t = DPW(t, q.c[1].o, ILOAD(xp + 48));
    u = DPW(u, q.c[3].o, ILOAD(xp + 112));
    return _mm256_add_epi32(t, u);
}
IALWAYS vi dot_pair(cpair c, const int16_t *xp) {
    vi t = _mm256_madd_epi16(c.lo.e, ILOAD(xp));
    t = DPW(t, c.lo.o, ILOAD(xp + 16));
    t = DPW(t, c.hi.e, ILOAD(xp + 32));
    return DPW(t, c.hi.o, ILOAD(xp + 48));
}
/* the quads of blocks 0..3 (a) and 4..7 (b) merged: lane k = block
 * (0, 4, 2, 6, 1, 5, 3, 7)[k]. Integer sums are exact, in any order. */
IALWAYS vi merge(vi a, vi b) { return _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b)); }

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

/* The f16 at p of the first n (<= 8) of 8 blocks bs bytes apart, in group
 * order, 0 past n; gathered in scalar registers and converted together. */
IALWAYS __m256 ld8_f16_g(const uint8_t *p, const int bs, const int n) {
    static const int g[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    uint64_t lo = 0, hi = 0;
    UNROLL for (int k = 0; k < 4; k++) {
        uint16_t a = 0, c = 0;
        if (g[k] < n) memcpy(&a, p + g[k] * bs, 2);
        if (g[k + 4] < n) memcpy(&c, p + g[k + 4] * bs, 2);
        lo |= (uint64_t)a << (16 * k);
        hi |= (uint64_t)c << (16 * k);
    }
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)hi, (long long)lo));
}
/* 8 int32 lanes in group order */
IALWAYS vi gorder(vi v) { return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 2, 6, 1, 5, 3, 7)); }

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
#define XPLANES(nx)                                                                                              \
    const int16_t *xq[DP_NX_MAX];                                                                                \
    const float *xd[DP_NX_MAX], *xs[DP_NX_MAX];                                                                  \
    UNROLL for (int p = 0; p < (nx); p++) xq[p] = x[p].pq, xd[p] = x[p].dg, xs[p] = x[p].sg;                     \
    (void)xs;

/* Row loop of the 32-value block types, a group of 8 blocks at a time:
 * lane k of A accumulates float(dot of block k) times d_w d_x; with HASMIN
 * the per-block minimum MIN (Q4_1, Q5_1: their f16 m) enters through x's
 * block sums s (C). QUAD(a, b, c, d): the cquad of the blocks at a..d,
 * PAIR(a, b) the cpair of a and b. x's planes are zero past K up to a whole
 * group, so a short last group reads the weights of the blocks it has and
 * takes the codes of one of them for the others (times zero): a last quad
 * of 3 blocks as a quad, of 1 or 2 as a pair. */
#define IROWS(BS, HASMIN, MIN, QUAD, PAIR)                                                                                   \
    const int64_t nb = x->K / 32;                                                                                \
    XPLANES(nx)                                                                                                  \
    for (int64_t r = 0; r < nrows; r++) {                                                                        \
        const uint8_t *b = w + (size_t)r * rb;                                                                   \
        __m256 A[DP_NX_MAX], C[DP_NX_MAX];                                                                       \
        vi S[DP_NX_MAX];                                                                                         \
        UNROLL for (int p = 0; p < nx; p++) A[p] = C[p] = _mm256_setzero_ps();                                   \
        for (int64_t i = 0; i < nb; i += 8, b += 8 * (BS)) {                                                     \
            const int n = nb - i < 8 ? (int)(nb - i) : 8;                                                        \
            const __m256 dw = n == 8 ? ld8_f16_g(b, BS, 8) : n == 4 ? ld8_f16_g(b, BS, 4) : ld8_f16_g(b, BS, n); \
            if (n == 8) {                                                                                        \
                prefetch_ahead(b, 8 * (BS));                                                                     \
                const cquad q0 = QUAD(b, b + (BS), b + 2 * (BS), b + 3 * (BS));                                  \
                vi T[DP_NX_MAX];                                                                                 \
                UNROLL for (int p = 0; p < nx; p++) T[p] = dot_quad(q0, xq[p] + 32 * i, nx);                         \
                const cquad q1 = QUAD(b + 4 * (BS), b + 5 * (BS), b + 6 * (BS), b + 7 * (BS));                   \
                UNROLL for (int p = 0; p < nx; p++) S[p] = merge(T[p], dot_quad(q1, xq[p] + 32 * (i + 4), nx));      \
            } else if (n == 4) {                                                                                 \
                const cquad q0 = QUAD(b, b + (BS), b + 2 * (BS), b + 3 * (BS));                                  \
                UNROLL for (int p = 0; p < nx; p++) S[p] = merge(dot_quad(q0, xq[p] + 32 * i, nx), ZV);              \
            } else {                                                                                             \
                /* a quad of 4 (n > 4), then 3 blocks as a quad or 1, 2 as a pair */                             \
                const int nq = n / 4, rest = n % 4;                                                              \
                const uint8_t *bt = b + 4 * nq * (BS);                                                           \
                vi T[DP_NX_MAX], U[DP_NX_MAX];                                                                   \
                if (nq) {                                                                                        \
                    const cquad q0 = QUAD(b, b + (BS), b + 2 * (BS), b + 3 * (BS));                              \
                    UNROLL for (int p = 0; p < nx; p++) T[p] = dot_quad(q0, xq[p] + 32 * i, nx);                     \
                }                                                                                                \
                if (rest == 3) {                                                                                 \
                    const cquad q1 = QUAD(bt, bt + (BS), bt + 2 * (BS), bt);                                     \
                    UNROLL for (int p = 0; p < nx; p++) U[p] = dot_quad(q1, xq[p] + 32 * (i + 4 * nq), nx);          \
                } else {                                                                                         \
                    const cpair c = PAIR(bt, rest == 2 ? bt + (BS) : bt);                                        \
                    UNROLL for (int p = 0; p < nx; p++) U[p] = pair_lanes(dot_pair(c, xq[p] + 32 * (i + 4 * nq))); \
                }                                                                                                \
                UNROLL for (int p = 0; p < nx; p++) S[p] = nq ? merge(T[p], U[p]) : merge(U[p], ZV);             \
            }                                                                                                    \
            UNROLL for (int p = 0; p < nx; p++)                                                                  \
                A[p] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(S[p]), _mm256_mul_ps(dw, _mm256_load_ps(xd[p] + i)), A[p]); \
            if (HASMIN) {                                                                                        \
                const __m256 mw = MIN;                                                                           \
                UNROLL for (int p = 0; p < nx; p++) C[p] = _mm256_fmadd_ps(mw, _mm256_load_ps(xs[p] + i), C[p]); \
            }                                                                                                    \
        }                                                                                                        \
        UNROLL for (int p = 0; p < nx; p++) out[p * os + r] = hsum8(A[p]) + hsum8(C[p]);                        \
    }

/* Q4_0: codes q - 8 (signed, so that a block's integer sum stays within
 * its weights' magnitude: an unsigned sum with the offset moved to x's
 * block sums cancels, and its float conversion rounds, far more) */
IALWAYS cquad quad_q4_0(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d) {
    cquad q = quad_nib(a + 2, b + 2, c + 2, d + 2);
    UNROLL for (int m = 0; m < 4; m++) q.c[m].e = _mm256_sub_epi16(q.c[m].e, I16(8)), q.c[m].o = _mm256_sub_epi16(q.c[m].o, I16(8));
    return q;
}
IALWAYS cpair pair_q4_0(const uint8_t *a, const uint8_t *b) {
    cpair c = pair_nib(a + 2, b + 2);
    const vi o = I16(8);
    return (cpair){{_mm256_sub_epi16(c.lo.e, o), _mm256_sub_epi16(c.lo.o, o)},
                   {_mm256_sub_epi16(c.hi.e, o), _mm256_sub_epi16(c.hi.o, o)}};
}
IALWAYS void mvq_q4_0_n(MVQ_ARGS, const int nx) { IROWS(18, 0, _mm256_setzero_ps(), quad_q4_0, pair_q4_0) }

IALWAYS cquad quad_q4_1(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d) {
    return quad_nib(a + 4, b + 4, c + 4, d + 4);
}
IALWAYS cpair pair_q4_1(const uint8_t *a, const uint8_t *b) { return pair_nib(a + 4, b + 4); }
IALWAYS void mvq_q4_1_n(MVQ_ARGS, const int nx) { IROWS(20, 1, ld8_f16_g(b + 2, 20, n), quad_q4_1, pair_q4_1) }

/* Q5_0 / Q5_1: + 16 where the block's fifth bit is set (bit i of its 32-bit
 * qh: value i). Byte 4t + k of c[m] is value 8 m + 4 ((t % 4) / 2) + k of
 * block (A, C, A, C, B, D, B, D)[t], so its bit is in nibble 2 m + (t % 4) / 2
 * of that qh: with each qh's nibbles spread over the low nibbles of 8 bytes,
 * A's and C's interleaved (ac) and B's and D's (bd), c[m]'s 32 bits are
 * 16 bits of each (scalar work: the vector pipes are the busy ones). */
#if KVL == 16
IALWAYS uint64_t nib_spread(uint32_t v) { return _pdep_u64(v, 0x0f0f0f0f0f0f0f0full); }
IALWAYS vi add16_where(vi c, uint32_t m) { return _mm256_mask_add_epi8(c, (__mmask32)m, c, I8(16)); }
IALWAYS vi sub16_where(vi c, uint32_t m) { return _mm256_mask_sub_epi8(c, (__mmask32)m, c, I8(16)); }
#else
IALWAYS uint64_t nib_spread(uint32_t v) {
    uint64_t x = v;
    x = (x | x << 16) & 0x0000ffff0000ffffull;
    x = (x | x << 8) & 0x00ff00ff00ff00ffull;
    return (x | x << 4) & 0x0f0f0f0f0f0f0f0full;
}
/* + 16 in byte j where bit j of m is set */
IALWAYS vi add16_where(vi c, uint32_t m) {
    const vi bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const vi sel = _mm256_set_epi64x(0x0303030303030303ll, 0x0202020202020202ll, 0x0101010101010101ll, 0);
    const vi t = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)m), sel), bit);
    return _mm256_or_si256(c, _mm256_and_si256(_mm256_cmpeq_epi8(t, bit), I8(16)));
}
IALWAYS vi sub16_where(vi c, uint32_t m) { return _mm256_sub_epi8(add16_where(c, ~m), I8(16)); }
#endif
/* sgn: Q5_0's signed codes q - 16 (- 16 where the bit is clear) */
IALWAYS cquad quad_q5(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d, int qh, int qs, int sgn) {
    const uint64_t ac = nib_spread(ld32(a + qh)) | nib_spread(ld32(c + qh)) << 4;
    const uint64_t bd = nib_spread(ld32(b + qh)) | nib_spread(ld32(d + qh)) << 4;
    vi lo, hi;
    quad_mix(ld2x16(a + qs, b + qs), ld2x16(c + qs, d + qs), &lo, &hi);
    const vi l[4] = {_mm256_and_si256(lo, I8(0x0f)), _mm256_and_si256(hi, I8(0x0f)),
                     _mm256_and_si256(_mm256_srli_epi16(lo, 4), I8(0x0f)), _mm256_and_si256(_mm256_srli_epi16(hi, 4), I8(0x0f))};
    vi r[4];
    UNROLL for (int m = 0; m < 4; m++) {
        const uint32_t bits = (uint32_t)(uint16_t)(ac >> 16 * m) | (uint32_t)(uint16_t)(bd >> 16 * m) << 16;
        r[m] = sgn ? sub16_where(l[m], ~bits) : add16_where(l[m], bits);
    }
    return sgn ? quad_s(r[0], r[1], r[2], r[3]) : quad_u(r[0], r[1], r[2], r[3]);
}
/* a pair's fifth bits: values 0..15 of A and B (lo), 16..31 (hi) */
IALWAYS cpair pair_q5(const uint8_t *a, const uint8_t *b, int qh, int qs, int sgn) {
    const vi v = ld2x16(a + qs, b + qs);
    const uint32_t ha = ld32(a + qh), hb = ld32(b + qh), mlo = (ha & 0xffffu) | hb << 16, mhi = ha >> 16 | (hb & 0xffff0000u);
    const vi lo = _mm256_and_si256(v, I8(0x0f)), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), I8(0x0f));
    if (sgn) return (cpair){split_s(sub16_where(lo, ~mlo)), split_s(sub16_where(hi, ~mhi))};
    return (cpair){split_u(add16_where(lo, mlo)), split_u(add16_where(hi, mhi))};
}
IALWAYS cquad quad_q5_0(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d) {
    return quad_q5(a, b, c, d, 2, 6, 1);
}
IALWAYS cpair pair_q5_0(const uint8_t *a, const uint8_t *b) { return pair_q5(a, b, 2, 6, 1); }
IALWAYS void mvq_q5_0_n(MVQ_ARGS, const int nx) { IROWS(22, 0, _mm256_setzero_ps(), quad_q5_0, pair_q5_0) }
IALWAYS cquad quad_q5_1(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d) {
    return quad_q5(a, b, c, d, 4, 8, 0);
}
IALWAYS cpair pair_q5_1(const uint8_t *a, const uint8_t *b) { return pair_q5(a, b, 4, 8, 0); }
IALWAYS void mvq_q5_1_n(MVQ_ARGS, const int nx) { IROWS(24, 1, ld8_f16_g(b + 2, 24, n), quad_q5_1, pair_q5_1) }

/* Q8_0: the signed bytes are the codes */
IALWAYS cquad quad_q8_0(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d) {
    vi c0, c1, c2, c3;
    quad_mix(ld2x16(a + 2, b + 2), ld2x16(c + 2, d + 2), &c0, &c1);
    quad_mix(ld2x16(a + 18, b + 18), ld2x16(c + 18, d + 18), &c2, &c3);
    return quad_s(c0, c1, c2, c3);
}
IALWAYS cpair pair_q8_0(const uint8_t *a, const uint8_t *b) {
    return (cpair){split_s(ld2x16(a + 2, b + 2)), split_s(ld2x16(a + 18, b + 18))};
}
IALWAYS void mvq_q8_0_n(MVQ_ARGS, const int nx) { IROWS(34, 0, _mm256_setzero_ps(), quad_q8_0, pair_q8_0) }

/* IQ4_NL / IQ4_XS: the 4-bit indices looked up in the codebook give signed
 * bytes (qs: the offset of the nibbles in each block) */
IALWAYS cquad quad_iq4(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d) {
    const vi kv = bcast16((const uint8_t *)dp_iq4nl_values);
    vi lo, hi;
    quad_mix(ld2x16(a, b), ld2x16(c, d), &lo, &hi);
    const vi l2 = _mm256_and_si256(_mm256_srli_epi16(lo, 4), I8(0x0f)), l3 = _mm256_and_si256(_mm256_srli_epi16(hi, 4), I8(0x0f));
    return quad_s(_mm256_shuffle_epi8(kv, _mm256_and_si256(lo, I8(0x0f))), _mm256_shuffle_epi8(kv, _mm256_and_si256(hi, I8(0x0f))),
                  _mm256_shuffle_epi8(kv, l2), _mm256_shuffle_epi8(kv, l3));
}
IALWAYS cquad quad_iq4_nl(const uint8_t *a, const uint8_t *b, const uint8_t *c, const uint8_t *d) {
    return quad_iq4(a + 2, b + 2, c + 2, d + 2);
}
IALWAYS cpair pair_iq4_nl(const uint8_t *a, const uint8_t *b) {
    const vi kv = bcast16((const uint8_t *)dp_iq4nl_values), v = ld2x16(a + 2, b + 2);
    return (cpair){split_s(_mm256_shuffle_epi8(kv, _mm256_and_si256(v, I8(0x0f)))),
                   split_s(_mm256_shuffle_epi8(kv, _mm256_and_si256(_mm256_srli_epi16(v, 4), I8(0x0f))))};
}
IALWAYS void mvq_iq4_nl_n(MVQ_ARGS, const int nx) { IROWS(18, 0, _mm256_setzero_ps(), quad_iq4_nl, pair_iq4_nl) }

MVQ_ENTRY(mvq_q4_0)
MVQ_ENTRY(mvq_q4_1)
MVQ_ENTRY(mvq_q5_0)
MVQ_ENTRY(mvq_q5_1)
MVQ_ENTRY(mvq_q8_0)
MVQ_ENTRY(mvq_iq4_nl)

#include "matvec_kq.h"

#endif
