/* The float tile kernel of the blocked matmul:
 * C[p][r] = W[r] . X[p] for a tile of R weight rows and P positions, both
 * row-major along K: R x P accumulators, each step loads P x vectors and R
 * weight vectors. The caller keeps the tile's rows in L1/L2. W's rows may
 * be f16 (WH: an f16 KV cache's keys), converted as they are loaded: the
 * same operations on the same values as the float kernel on the converted
 * rows, so the same bits. */
#ifndef DP_CPU_X86_GEMM_H
#define DP_CPU_X86_GEMM_H

#include "vec.h"

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

/* element i of W (float32, or f16 when WH), as a vector from i or alone */
ALWAYS vf wvec(const void *W, const int WH, int64_t i) {
    return WH ? load_f16((const uint8_t *)W + 2 * i) : vload((const float *)W + i);
}
ALWAYS float wval(const void *W, const int WH, int64_t i) {
    return WH ? h2f((const uint8_t *)W + 2 * i) : ((const float *)W)[i];
}

ALWAYS DP_ASAN_BULK void gemm_tile(const void *W, const int WH, int64_t ws, const float *X, int64_t xs, int64_t K,
                                   float *C, int64_t os, int accum, const int R, const int P) {
    vf acc[4][GEMM_P];
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int p = 0; p < P; p++) acc[r][p] = vzero();
    int64_t k = 0;
    for (; k + KVL <= K; k += KVL) {
        vf xv[GEMM_P];
        UNROLL for (int p = 0; p < P; p++) xv[p] = vload(X + p * xs + k);
        UNROLL for (int r = 0; r < R; r++) {
            vf wv = wvec(W, WH, r * ws + k);
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
                    for (int64_t j = k; j < K; j++) t[r] += wval(W, WH, r * ws + j) * X[p * xs + j];
                v = _mm_add_ps(v, _mm_loadu_ps(t));
            }
            if (accum) v = _mm_add_ps(v, _mm_loadu_ps(C + p * os));
            _mm_storeu_ps(C + p * os, v);
        }
        return;
    }
    UNROLL for (int r = 0; r < R; r++) UNROLL for (int p = 0; p < P; p++) {
        float s = vhsum(acc[r][p]);
        for (int64_t j = k; j < K; j++) s += wval(W, WH, r * ws + j) * X[p * xs + j];
        C[p * os + r] = accum ? C[p * os + r] + s : s;
    }
}

#define GT(r, p) \
    case (r) * 8 + (p): gemm_tile(W, WH, ws, X, xs, K, C, os, accum, r, p); break
ALWAYS DP_ASAN_BULK void gemm_small(const void *W, const int WH, int64_t ws, int R, const float *X, int64_t xs, int P,
                                    int64_t K, float *C, int64_t os, int accum) {
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

ALWAYS DP_ASAN_BULK void gemm_rows(const void *W, const int WH, int64_t ws, int64_t R, const float *X, int64_t xs,
                                   int64_t P, int64_t K, float *C, int64_t os, int accum) {
    for (int64_t r = 0; r < R; r += 4) {
        int rn = R - r < 4 ? (int)(R - r) : 4;
        for (int64_t p = 0; p < P; p += GEMM_P) {
            int pn = P - p < GEMM_P ? (int)(P - p) : GEMM_P;
            const void *Wr = (const uint8_t *)W + r * ws * (WH ? 2 : 4);
            const float *Xp = X + p * xs;
            float *Cp = C + p * os + r;
            if (rn == 4 && pn == GEMM_P) gemm_tile(Wr, WH, ws, Xp, xs, K, Cp, os, accum, 4, GEMM_P);
            else gemm_small(Wr, WH, ws, rn, Xp, xs, pn, K, Cp, os, accum);
        }
    }
}

DP_ASAN_BULK static void gemm(const float *W, int64_t ws, int64_t R, const float *X, int64_t xs, int64_t P, int64_t K,
                              float *C, int64_t os, int accum) {
    dp_asan_gemm(W, 4, ws, R, X, xs, P, K, C, os);
    gemm_rows(W, 0, ws, R, X, xs, P, K, C, os, accum);
}

DP_ASAN_BULK static void gemm_w16(const uint16_t *W, int64_t ws, int64_t R, const float *X, int64_t xs, int64_t P,
                                  int64_t K, float *C, int64_t os, int accum) {
    dp_asan_gemm(W, 2, ws, R, X, xs, P, K, C, os);
    gemm_rows(W, 1, ws, R, X, xs, P, K, C, os, accum);
}

#endif
