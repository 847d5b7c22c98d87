/* Prefill attention on the tensor cores: k_attn_mma, for the rows of one
 * sequence at consecutive positions (a prompt), head dimensions 64 and 128,
 * up to 8 query heads per KV head.
 *
 * A CTA takes 16 RB query rows and the G query heads of one KV head: warp
 * (rb, hh) owns rows rb*16 .. rb*16+15 of head hh, and all warps share the
 * K/V tiles (64 keys, copied into shared memory with cp.async through the
 * page table, the next tile in flight while one is used). Per tile a warp computes S = q K^T with mma.sync m16n8k16
 * (f16 inputs, f32 sums), masks it (causal, sliding window), soft-caps it,
 * updates the online softmax (running max and sum per row) and adds P V
 * with mma.sync again. k_attention (attention.cu) computes each query row
 * on its own, re-reading every key it sees per row and multiplying on the
 * CUDA cores: prefill of a 512-token prompt spent most of its time there.
 *
 * Precision: q (f32) and P (f32) enter the products as the sum of two f16
 * values (hi + lo, two products each), so that only K and V, which the
 * cache holds in f16 anyway, are rounded, as in k_attention's f32
 * arithmetic. */
#include <limits.h>
#include <math.h>

#include <cuda_pipeline.h>

#include "kernels.cuh"

enum { PF_TK = 64, PF_MAX_G = 8 };

/* c += a b for one 16x8x16 product (a: 16x16 row-major f16 fragment, b:
 * 16x8 column-major, c: f32). */
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* Two floats as f16 hi parts (lower index in the low half) and the
 * remainders as f16 lo parts. */
__device__ __forceinline__ void split_h2(float x, float y, uint32_t *hi, uint32_t *lo) {
    const __half2 h = __floats2half2_rn(x, y);
    const float2 hf = __half22float2(h);
    const __half2 l = __floats2half2_rn(x - hf.x, y - hf.y);
    *hi = *(const uint32_t *)&h;
    *lo = *(const uint32_t *)&l;
}
/* Four 8x8 f16 matrices from shared memory, transposed (the B fragments of
 * V for two 8-column blocks). */
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const __half *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

template <int D> __global__ void __launch_bounds__(256) k_attn_mma(const AttnLaunch A, int RB) {
    pdl_trigger();
    pdl_wait();
    constexpr int DP = D + 8, KS = D / 16, ND = D / 8; /* padded row (halves), k-steps of q.K, 8-dim blocks */
    extern __shared__ __align__(16) __half smh[]; /* two stages of K and V tiles */
    __shared__ int kmin_s, kmax_s;
    const int G = A.n_head / A.n_head_kv, g = blockIdx.y;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, hh = warp % G, rb = warp / G;
    const int zc = A.tiles ? A.tiles[2 * blockIdx.x] : blockIdx.x * 16 * RB;
    const int rows = A.tiles ? A.tiles[2 * blockIdx.x + 1] : min(16 * RB, A.n - zc);
    const int Q = A.n_head * D, KV = A.n_head_kv * D, sh = A.kv.page_shift;
    const int *tab = kv_table(A.kv, zc);
    /* the keys any row of the CTA sees */
    if (threadIdx.x == 0) kmin_s = INT_MAX, kmax_s = -1;
    __syncthreads();
    for (int i = threadIdx.x; i < rows; i += blockDim.x) {
        const int p = A.kv.rows[ROW_INTS * (zc + i) + ROW_POS];
        atomicMin(&kmin_s, A.window > 0 && p - A.window + 1 > 0 ? p - A.window + 1 : 0);
        atomicMax(&kmax_s, p);
    }
    __syncthreads();
    const int kmin = kmin_s, kmax = kmax_s;
    /* the thread's two rows (fragment rows lane/4 and lane/4 + 8) */
    int zr[2], pr[2], lr[2];
    for (int e = 0; e < 2; e++) {
        zr[e] = zc + rb * 16 + (lane >> 2) + 8 * e;
        const bool ok = zr[e] < zc + rows;
        pr[e] = ok ? A.kv.rows[ROW_INTS * zr[e] + ROW_POS] : -1;
        lr[e] = ok && A.window > 0 && pr[e] - A.window + 1 > 0 ? pr[e] - A.window + 1 : 0;
    }
    /* q fragments, hi and lo parts */
    uint32_t qh[KS][4], ql[KS][4];
    const int h = g * G + hh;
#pragma unroll
    for (int k = 0; k < KS; k++)
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const int e = r & 1, c = k * 16 + (lane & 3) * 2 + (r >> 1) * 8;
            float2 v = make_float2(0.0f, 0.0f);
            if (pr[e] >= 0) v = *(const float2 *)(A.q + (size_t)zr[e] * Q + (size_t)h * D + c);
            split_h2(v.x, v.y, &qh[k][r], &ql[k][r]);
        }
    float o[ND][4];
#pragma unroll
    for (int d = 0; d < ND; d++) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
    const __half *kbase = A.k + (size_t)g * D, *vbase = A.v + (size_t)g * D;
    /* the tile of keys t0.. into stage st (cp.async; zeros past the last
     * key: a masked weight times V must stay 0), one commit group */
    auto load = [&](int st, int t0) {
        __half *ks = smh + st * 2 * PF_TK * DP, *vs = ks + PF_TK * DP;
        const int tk = min(PF_TK, kmax + 1 - t0);
        for (int i = threadIdx.x; i < PF_TK * ND; i += blockDim.x) {
            const int row = i / ND, c = (i - row * ND) * 8;
            if (row < tk) {
                const size_t at = (size_t)kv_row(tab, t0 + row, sh) * KV + c;
                __pipeline_memcpy_async(ks + row * DP + c, kbase + at, 16);
                __pipeline_memcpy_async(vs + row * DP + c, vbase + at, 16);
            } else {
                *(uint4 *)(ks + row * DP + c) = make_uint4(0, 0, 0, 0);
                *(uint4 *)(vs + row * DP + c) = make_uint4(0, 0, 0, 0);
            }
        }
        __pipeline_commit();
    };
    if (kmin <= kmax) load(0, kmin);
    for (int t0 = kmin, it = 0; t0 <= kmax; t0 += PF_TK, it++) {
        /* the next tile streams in while this one is used */
        if (t0 + PF_TK <= kmax) load((it + 1) & 1, t0 + PF_TK);
        else __pipeline_commit(); /* an empty group: one wait count for every step */
        __pipeline_wait_prior(1);
        __syncthreads();
        const __half *ks = smh + (it & 1) * 2 * PF_TK * DP, *vs = ks + PF_TK * DP;
        /* S = q K^T: 16 rows x 64 keys, 8 blocks of 8 keys */
        float s[8][4];
#pragma unroll
        for (int nb = 0; nb < 8; nb++) {
            s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
            const __half *kr = ks + (nb * 8 + (lane >> 2)) * DP + (lane & 3) * 2;
#pragma unroll
            for (int k = 0; k < KS; k++) {
                const uint32_t b0 = *(const uint32_t *)(kr + k * 16), b1 = *(const uint32_t *)(kr + k * 16 + 8);
                mma16816(s[nb], qh[k], b0, b1);
                mma16816(s[nb], ql[k], b0, b1);
            }
        }
        /* scale, soft-cap, mask; the rows' maxima over the 4 lanes holding them */
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                const int e = r >> 1, j = t0 + nb * 8 + (lane & 3) * 2 + (r & 1);
                const float x = softcap_f(s[nb][r] * A.scale, A.softcap);
                s[nb][r] = j <= pr[e] && j >= lr[e] ? x : -INFINITY;
                mx[e] = fmaxf(mx[e], s[nb][r]);
            }
        float al[2];
#pragma unroll
        for (int e = 0; e < 2; e++) {
            mx[e] = fmaxf(mx[e], __shfl_xor_sync(FULL_MASK, mx[e], 1));
            mx[e] = fmaxf(mx[e], __shfl_xor_sync(FULL_MASK, mx[e], 2));
            const float mn = fmaxf(m[e], mx[e]), base = mn == -INFINITY ? 0.0f : mn;
            al[e] = expf(m[e] - base);
            l[e] *= al[e];
            m[e] = mn;
            mx[e] = base;
        }
#pragma unroll
        for (int nb = 0; nb < 8; nb++)
#pragma unroll
            for (int r = 0; r < 4; r++) {
                s[nb][r] = expf(s[nb][r] - mx[r >> 1]);
                l[r >> 1] += s[nb][r];
            }
#pragma unroll
        for (int d = 0; d < ND; d++) o[d][0] *= al[0], o[d][1] *= al[0], o[d][2] *= al[1], o[d][3] *= al[1];
        /* O += P V, 16 keys per step: P's accumulator layout is the A fragment's */
#pragma unroll
        for (int kb = 0; kb < 4; kb++) {
            uint32_t ph[4], pl[4];
            split_h2(s[2 * kb][0], s[2 * kb][1], &ph[0], &pl[0]);
            split_h2(s[2 * kb][2], s[2 * kb][3], &ph[1], &pl[1]);
            split_h2(s[2 * kb + 1][0], s[2 * kb + 1][1], &ph[2], &pl[2]);
            split_h2(s[2 * kb + 1][2], s[2 * kb + 1][3], &ph[3], &pl[3]);
#pragma unroll
            for (int d = 0; d < ND; d += 2) {
                uint32_t b[4];
                ldsm_x4_t(b, vs + (kb * 16 + (lane & 15)) * DP + (d + (lane >> 4)) * 8);
                mma16816(o[d], ph, b[0], b[1]);
                mma16816(o[d], pl, b[0], b[1]);
                mma16816(o[d + 1], ph, b[2], b[3]);
                mma16816(o[d + 1], pl, b[2], b[3]);
            }
        }
        __syncthreads();
    }
#pragma unroll
    for (int e = 0; e < 2; e++) {
        l[e] += __shfl_xor_sync(FULL_MASK, l[e], 1);
        l[e] += __shfl_xor_sync(FULL_MASK, l[e], 2);
    }
#pragma unroll
    for (int e = 0; e < 2; e++) {
        if (pr[e] < 0) continue;
        const float inv = 1.0f / l[e];
        const size_t at = (size_t)zr[e] * Q + (size_t)h * D + (lane & 3) * 2;
#pragma unroll
        for (int d = 0; d < ND; d++) {
            const float x = o[d][2 * e] * inv, y = o[d][2 * e + 1] * inv;
            *(float2 *)(A.out + at + d * 8) = make_float2(x, y);
            if (A.out16) *(__half2 *)(A.out16 + at + d * 8) = __floats2half2_rn(x, y);
        }
    }
}

int dp_cu_attn_mma_rows(int head_dim, int n_head, int n_head_kv) {
    const int G = n_head_kv > 0 ? n_head / n_head_kv : 0;
    if ((head_dim != 64 && head_dim != 128) || G < 1 || G > PF_MAX_G || n_head != G * n_head_kv) return 0;
    return 16 * (G >= 4 ? 1 : 4 / G);
}

int dp_cu_attn_mma_ok(const AttnLaunch *A) {
    return (A->one_seq || A->tiles) && A->n > 1 && !A->exclude_self &&
           dp_cu_attn_mma_rows(A->head_dim, A->n_head, A->n_head_kv) > 0;
}

int dp_cu_attn_mma(const AttnLaunch *A, cudaStream_t st) {
    const int G = A->n_head / A->n_head_kv, RB = G >= 4 ? 1 : 4 / G, D = A->head_dim;
    const dim3 grid(A->tiles ? A->n_tiles : (A->n + 16 * RB - 1) / (16 * RB), A->n_head_kv);
    const size_t smem = 4 * (size_t)PF_TK * (D + 8) * sizeof(__half); /* two stages of K and V */
    static int opted;
    if (!opted) {
        CU_TRY(cudaFuncSetAttribute(k_attn_mma<64>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * PF_TK * 72 * 2));
        CU_TRY(cudaFuncSetAttribute(k_attn_mma<128>, cudaFuncAttributeMaxDynamicSharedMemorySize, 4 * PF_TK * 136 * 2));
        opted = 1;
    }
    if (D == 64) CU_TRY(dp_cu_launch(k_attn_mma<64>, grid, dim3(32 * G * RB), smem, st, *A, RB));
    else CU_TRY(dp_cu_launch(k_attn_mma<128>, grid, dim3(32 * G * RB), smem, st, *A, RB));
    return DP_OK;
}
