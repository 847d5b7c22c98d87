/* Products of a resident f16 weight copy with a few rows (2 .. 16) of f16
 * activations: y[t][r] = sum_k W[r][k] x[t][k] (+ bias[r], or + y[t][r]).
 *
 * At a batched decode step's row counts cuBLAS picks narrow tiles that
 * leave most SMs idle on the smaller matrices (Q/K/V, o: 1.2-1.4 TB/s of
 * the H200's 4.8) and a split-K pass with a reduction launch on the wide
 * ones. Here a CTA takes 16 weight rows over the whole width, its warps
 * interleaved over 32-column chunks of it, each chunk two tensor-core
 * m16n8k16 products per 8 rows of x with f32 accumulation; the warps' sums
 * are added in a fixed order, so a result does not depend on timing.
 *
 * The fragments come straight from global memory with 16-byte loads:
 * thread (g = lane / 4, c = lane % 4) reads columns 8c .. 8c + 7 of a chunk
 * for weight rows g and g + 8 and for x row g, and feeds halves 0-3 to the
 * first k16 product, 4-7 to the second. That permutes the k order inside a
 * chunk the same way for W and x, so every product is the exact sum. */
#include "kernels.cuh"

/* 16 warps of 8 chunks in flight each: a CTA's 16 rows of a 2048-wide
 * matrix (64 KB) are all requested at once, and a wide one keeps 128 KB
 * in flight on its SM */
enum { SK_WARPS = 16, SK_UNROLL = 8, SK_MAX_TILES = 2 };

__device__ __forceinline__ void mma16816(float *d, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* NT tiles of 8 rows of x (n <= 8 NT). */
template <int NT>
__global__ void __launch_bounds__(SK_WARPS * 32) k_skinny(const __half *__restrict__ W, int M, int K,
                                                        const __half *__restrict__ x, int n, float *y, int ldo,
                                                        const float *bias, int accumulate) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[SK_WARPS - 1][32][NT * 4];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
    const int r0 = blockIdx.x * 16;
    const int ra = min(r0 + g, M - 1), rb = min(r0 + g + 8, M - 1); /* rows past M: any row, not stored */
    const __half *wa = W + (size_t)ra * K + 8 * c, *wb = W + (size_t)rb * K + 8 * c;
    const __half *xr = x + (size_t)g * K + 8 * c;
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const int chunks = K / 32;
    for (int q0 = warp; q0 < chunks; q0 += SK_WARPS * SK_UNROLL) {
        uint4 Ua[SK_UNROLL], Ub[SK_UNROLL];
#pragma unroll
        for (int u = 0; u < SK_UNROLL; u++) {
            const int q = q0 + u * SK_WARPS;
            if (q < chunks) {
                Ua[u] = __ldcs((const uint4 *)(wa + 32 * q)); /* streamed once: keep x in the caches */
                Ub[u] = __ldcs((const uint4 *)(wb + 32 * q));
            }
        }
#pragma unroll
        for (int u = 0; u < SK_UNROLL; u++) {
            const int q = q0 + u * SK_WARPS;
            if (q >= chunks) break;
#pragma unroll
            for (int j = 0; j < NT; j++) { /* x: a few KB, from L1 / L2 */
                const uint4 X = *(const uint4 *)(xr + (size_t)8 * j * K + 32 * q);
                mma16816(acc[j], Ua[u].x, Ub[u].x, Ua[u].y, Ub[u].y, X.x, X.y);
                mma16816(acc[j], Ua[u].z, Ub[u].z, Ua[u].w, Ub[u].w, X.z, X.w);
            }
        }
    }
    /* the warps' sums, added in warp order by warp 0 */
    if (warp > 0)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) red[warp - 1][lane][j * 4 + e] = acc[j][e];
    __syncthreads();
    if (warp > 0) return;
    for (int w = 0; w < SK_WARPS - 1; w++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[j][e] += red[w][lane][j * 4 + e];
    /* acc[j]: weight rows g (0, 1) and g + 8 (2, 3), x rows 8 j + 2 c (0, 2) and + 1 (1, 3) */
#pragma unroll
    for (int j = 0; j < NT; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int r = r0 + g + (e >= 2 ? 8 : 0), t = 8 * j + 2 * c + (e & 1);
            if (r >= M || t >= n) continue;
            float *o = y + (size_t)t * ldo + r;
            float v = acc[j][e];
            if (bias) v += bias[r];
            *o = accumulate ? *o + v : v;
        }
}

int dp_cu_skinny_ok(const __half *w16, int rows, int cols) {
    return rows >= 2 && rows <= 8 * SK_MAX_TILES && cols % 32 == 0 && (uintptr_t)w16 % 16 == 0;
}

int dp_cu_skinny(const __half *w16, int M, int K, const __half *x16, int n, float *y, int ldo, const float *bias,
                 int accumulate, cudaStream_t st) {
    if (!dp_cu_skinny_ok(w16, n, K) || (uintptr_t)x16 % 16)
        return dp_set_error(DP_ERR_BACKEND, "CUDA skinny product: %d rows of width %d", n, K);
    const dim3 grid((M + 15) / 16), block(SK_WARPS * 32);
    if (n <= 8)
        CU_TRY(dp_cu_launch(k_skinny<1>, grid, block, 0, st, w16, M, K, x16, n, y, ldo, bias, accumulate));
    else
        CU_TRY(dp_cu_launch(k_skinny<2>, grid, block, 0, st, w16, M, K, x16, n, y, ldo, bias, accumulate));
    return DP_OK;
}
