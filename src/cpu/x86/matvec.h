/* Float-activation matvec kernels: out[p][r] = dot(weight row r, x[p]) for
 * up to DP_NX_MAX positions, every type with its own body.
 *
 * Weight blocks are unpacked to int8 in 128-bit registers (the block's
 * offset already subtracted, so every value fits), widened to float and
 * multiplied with float activations; each block's scale multiplies the
 * block's partial sum once, and per-block minimums use precomputed sums of
 * x (xsum), so the inner loop is conversions and FMAs only. One function
 * body per type is instantiated for nx = 1..DP_NX_MAX. Two sets of
 * accumulators (A, B) take alternate blocks so consecutive blocks do not
 * wait on each other's FMA latency. */
#ifndef DP_CPU_X86_MATVEC_H
#define DP_CPU_X86_MATVEC_H

#include "unpack.h"

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

#if HAVE_LUT
/* acc[p] += d * sum_v w[v] x[p][v] */
ALWAYS void acc_scaled(const vf *w, int nv, vf d, const float *x, int64_t xs, int nx, vf *acc) {
    UNROLL for (int p = 0; p < nx; p++) {
        const float *xp = x + p * xs;
        vf s = vmul(w[0], vload(xp));
        UNROLL for (int v = 1; v < nv; v++) s = vfma(w[v], vload(xp + v * KVL), s);
        acc[p] = vfma(s, d, acc[p]);
    }
}
#endif

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

/* Q4_0 (codes - 8) and Q4_1 (codes d + m; the int8 path adds the minimum
 * through the sums of x) */
ALWAYS void mv_q4_n(MATVEC_ARGS, const int q41) {
    (void)xsum;
#if HAVE_LUT
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        vf wv[2];                                                                                                \
        dec_q4(bp + (q41 ? 4 : 2), h2f(bp), q41 ? h2f(bp + 2) : -8.0f * h2f(bp), wv);                            \
        accw(wv, 2, x + (i), xs, nx, ACC);                                                                       \
    } while (0)
#else
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        __m128i lo, hi;                                                                                          \
        q4_codes(bp + (q41 ? 4 : 2), q41 ? 0 : 8, &lo, &hi);                                                     \
        acc32(lo, hi, vset1(h2f(bp)), x + (i), xs, nx, ACC);                                                     \
        if (q41) {                                                                                               \
            MIN_TERM(h2f(bp + 2), i);                                                                            \
        }                                                                                                        \
    } while (0)
#endif
    ROW_BEGIN
    BLOCKS32(q41 ? 20 : 18)
    ROW_END
#undef BLOCK
}
ALWAYS void mv_q4_0_n(MATVEC_ARGS) { mv_q4_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, 0); }
ALWAYS void mv_q4_1_n(MATVEC_ARGS) { mv_q4_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, 1); }

/* Q5_0 (codes - 16) and Q5_1 (codes d + m, minimum as for Q4_1). With the
 * lookup table Q5_0 takes the exponent trick instead, its row's block
 * scales converted to floats first and broadcast from memory (rows of up
 * to 32768 values; longer ones convert block by block). */
ALWAYS void mv_q5_n(MATVEC_ARGS, const int q51) {
    (void)xsum;
#if HAVE_LUT
    float dsb[1024], *ds = !q51 && K / 32 <= 1024 ? dsb : NULL;
#define PRE                                                                                                      \
    if (ds)                                                                                                      \
        for (int64_t q = 0; q < K / 32; q++) ds[q] = h2f(b + q * 22);
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        vf wv[2];                                                                                                \
        if (q51) {                                                                                               \
            dec_q5(bp + 8, ld32(bp + 4), h2f(bp), h2f(bp + 2), wv);                                              \
            accw(wv, 2, x + (i), xs, nx, ACC);                                                                   \
        } else {                                                                                                 \
            dec_q5_magic(bp + 6, ld32(bp + 2), wv);                                                              \
            acc_scaled(wv, 2, vset1(ds ? ds[(i) / 32] : h2f(bp)), x + (i), xs, nx, ACC);                        \
        }                                                                                                        \
    } while (0)
#else
#define PRE
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        __m128i lo, hi;                                                                                          \
        q5_codes(bp + (q51 ? 8 : 6), ld32(bp + (q51 ? 4 : 2)), q51 ? 0 : 16, &lo, &hi);                          \
        acc32(lo, hi, vset1(h2f(bp)), x + (i), xs, nx, ACC);                                                     \
        if (q51) {                                                                                               \
            MIN_TERM(h2f(bp + 2), i);                                                                            \
        }                                                                                                        \
    } while (0)
#endif
    ROW_BEGIN
    PRE
    BLOCKS32(q51 ? 24 : 22)
    ROW_END
#undef BLOCK
#undef PRE
}
ALWAYS void mv_q5_0_n(MATVEC_ARGS) { mv_q5_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, 0); }
ALWAYS void mv_q5_1_n(MATVEC_ARGS) { mv_q5_n(w, rb, nrows, K, x, xs, xsum, nx, out, os, 1); }

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
            if (q5) q5k_masks(h0, h1, j, hb);
            dec_k_pair(qs + 32 * j, d * sc[2 * j], -dmin * mn[2 * j], d * sc[2 * j + 1], -dmin * mn[2 * j + 1],
                       q5 ? hb : NULL, wv);
            accw(wv, 2, x + i + 64 * j, xs, nx, A);
            accw(wv + 2, 2, x + i + 64 * j + 32, xs, nx, B);
        }
#else
        __m128i h0 = q5 ? ld16(b + 16) : _mm_setzero_si128(), h1 = q5 ? ld16(b + 32) : _mm_setzero_si128();
        UNROLL for (int j = 0; j < 4; j++) {
            __m128i c[4];
            k45_codes(qs + 32 * j, h0, h1, j, q5, c);
            const float *xj = x + i + 64 * j;
            acc32(c[0], c[1], vset1(d * sc[2 * j]), xj, xs, nx, A);
            acc32(c[2], c[3], vset1(d * sc[2 * j + 1]), xj + 32, xs, nx, B);
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

ALWAYS void mv_iq4_nl_n(MATVEC_ARGS) {
    (void)xsum;
#define BLOCK(bp, i, ACC)                                                                                        \
    do {                                                                                                         \
        __m128i lo, hi;                                                                                          \
        iq4_codes(bp + 2, &lo, &hi);                                                                             \
        acc32(lo, hi, vset1(h2f(bp)), x + (i), xs, nx, ACC);                                                     \
    } while (0)
    ROW_BEGIN
    BLOCKS32(18)
    ROW_END
#undef BLOCK
}

/* IQ4_XS super-blocks: sub-blocks 2j -> A, 2j+1 -> B */
ALWAYS void mv_iq4_xs_n(MATVEC_ARGS) {
    (void)xsum;
    ROW_BEGIN
    for (int64_t i = 0; i < K; i += QK_K, b += 136) {
        float d = h2f(b);
        UNROLL for (int j = 0; j < 8; j++) {
            __m128i lo, hi;
            iq4_codes(b + 8 + 16 * j, &lo, &hi);
            acc32(lo, hi, vset1(d * (float)iq4xs_scale(b, j)), x + i + 32 * j, xs, nx, (j & 1) ? B : A);
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
MATVEC_DISPATCH(mv_iq4_nl)
MATVEC_DISPATCH(mv_iq4_xs)

#endif
