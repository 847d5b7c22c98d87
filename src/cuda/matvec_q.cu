/* Decode matrix-vector products with integer dot products: the fast path
 * for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K and Q6_K (matvec.cu keeps
 * the float kernel for the other formats and dispatches here; matvec_t.cu
 * has k_matvec_t, the opt-in tensor-core kernel for Q4_0, Q5_0, Q8_0, Q4_K
 * and Q6_K, tried first when DOPPLER_CUDA_MVT=1).
 *
 * The input vector's quantisation and layouts, the per-format units and the
 * x-staging prologue are in qunit.cuh.
 *
 * k_matvec_q's work split: every CTA takes a contiguous range of row groups (R rows
 * each, by the format: a group's (row, unit) pairs spread over the 32
 * lanes, several units loaded before any is used); each warp prefetches its
 * next groups into L2 (cp.async.bulk.prefetch) so that DRAM keeps streaming
 * while the warp computes, and its first groups before waiting for the
 * previous kernel (programmatic dependent launch). The gate/up launch works
 * in tiles of 32 rows (8 warps x 4 rows) so that each tile of its output can
 * be quantised in the epilogue. */
#include "qunit.cuh"

template <int T> struct QUn { enum { N = 2 }; };
template <> struct QUn<DP_TYPE_Q4_0> { enum { N = 4 }; };
template <> struct QUn<DP_TYPE_Q4_1> { enum { N = 4 }; };
template <> struct QUn<DP_TYPE_Q5_0> { enum { N = 4 }; };
template <> struct QUn<DP_TYPE_Q5_1> { enum { N = 4 }; };
template <> struct QUn<DP_TYPE_Q8_0> { enum { N = 3 }; };

__host__ __device__ static inline int q_un(int type) {
    switch (type) {
    case DP_TYPE_Q4_0: case DP_TYPE_Q4_1: case DP_TYPE_Q5_0: case DP_TYPE_Q5_1: return 4;
    case DP_TYPE_Q8_0: return 3;
    default: return 2;
    }
}

__device__ __forceinline__ void q_advance(int &rl, int &u, int U) {
    u += 32;
    while (u >= U) {
        u -= U;
        rl++;
    }
}

/* acc[k] += row (r0 + k) . x for k < nr over this lane's (row, unit) pairs:
 * lane, lane + 32, ... of the group's nr * U pairs, UN units loaded before
 * any is used. The order of the additions depends only on U and the pair
 * index, so every launch with the same rows per group sums alike. */
template <int T>
__device__ __forceinline__ void q_rows(const DMat &W, int r0, int nr, int U, const uint8_t *sm, const MqArgs &A,
                                       float *acc) {
    constexpr int UN = QUn<T>::N;
    const uint8_t *xs = sm + A.famoff[q_family(T)];
    const float *dxs = (const float *)(sm + A.off_dx);
    const int *iss = (const int *)(sm + A.off_is);
    const int total = nr * U, lane = threadIdx.x & 31;
    int rl = lane / U, u = lane % U;
    for (int f = lane; f < total; f += 32 * UN) {
        int rr[UN], uu[UN];
        rr[0] = rl, uu[0] = u;
#pragma unroll
        for (int k = 1; k < UN; k++) {
            rr[k] = rr[k - 1], uu[k] = uu[k - 1];
            q_advance(rr[k], uu[k], U);
        }
#pragma unroll
        for (int k = 1; k < UN; k++)
            if (f + 32 * k >= total) rr[k] = rr[0], uu[k] = uu[0];
        QRaw raw[UN];
#pragma unroll
        for (int k = 0; k < UN; k++) q_load<T>(W, r0 + rr[k], uu[k], raw[k]);
        float val[UN];
#pragma unroll
        for (int k = 0; k < UN; k++) val[k] = q_math<T>(raw[k], uu[k], xs, dxs, iss);
#pragma unroll
        for (int k = 1; k < UN; k++)
            if (f + 32 * k >= total) val[k] = 0.0f;
#pragma unroll
        for (int j = 0; j < Q_RMAX; j++) {
            float add = 0.0f;
#pragma unroll
            for (int k = 0; k < UN; k++) add += rr[k] == j ? val[k] : 0.0f;
            acc[j] += add;
        }
        rl = rr[UN - 1], u = uu[UN - 1];
        q_advance(rl, u, U);
    }
}

__device__ __forceinline__ void q_dispatch(const DMat &W, int r0, int nr, int U, const uint8_t *sm, const MqArgs &A,
                                           float *acc) {
    switch (W.type) {
    case DP_TYPE_Q4_0: q_rows<DP_TYPE_Q4_0>(W, r0, nr, U, sm, A, acc); break;
    case DP_TYPE_Q4_1: q_rows<DP_TYPE_Q4_1>(W, r0, nr, U, sm, A, acc); break;
    case DP_TYPE_Q5_0: q_rows<DP_TYPE_Q5_0>(W, r0, nr, U, sm, A, acc); break;
    case DP_TYPE_Q5_1: q_rows<DP_TYPE_Q5_1>(W, r0, nr, U, sm, A, acc); break;
    case DP_TYPE_Q8_0: q_rows<DP_TYPE_Q8_0>(W, r0, nr, U, sm, A, acc); break;
    case DP_TYPE_Q4_K: q_rows<DP_TYPE_Q4_K>(W, r0, nr, U, sm, A, acc); break;
    case DP_TYPE_Q5_K: q_rows<DP_TYPE_Q5_K>(W, r0, nr, U, sm, A, acc); break;
    default: q_rows<DP_TYPE_Q6_K>(W, r0, nr, U, sm, A, acc); break;
    }
}

/* L2 prefetch of rows r0 .. r0+nr-1 of W (body and scale arrays). */
__device__ __forceinline__ void pf_bytes(const void *p, long long n) {
    if (n <= 0) return;
    const uintptr_t a = (uintptr_t)p & ~(uintptr_t)15, e = ((uintptr_t)p + (uintptr_t)n + 15) & ~(uintptr_t)15;
    const unsigned len = (unsigned)(e - a);
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(len) : "memory");
}
__device__ __forceinline__ void pf_rows(const DMat &W, int r0, int nr) {
    if (nr <= 0) return;
    pf_bytes(W.body + (long long)r0 * W.body_row, (long long)nr * W.body_row);
    const long long b0 = (long long)r0 * W.nblk, nb = (long long)nr * W.nblk;
    if (W.d16) pf_bytes(W.d16 + b0, nb * 2);
    if (W.dm) pf_bytes(W.dm + b0, nb * 4);
    if (W.qh) pf_bytes(W.qh + b0, nb * 4);
}

__device__ __forceinline__ int job_of(const MqArgs &A, int g) {
    int j = 0;
    if (A.L.mode != MV_GATEUP)
        while (j + 1 < A.L.njobs && g >= A.gstart[j + 1]) j++;
    return j;
}

/* Prefetch of group g (all its jobs' rows for gate/up). */
__device__ __forceinline__ void pf_group(const MqArgs &A, int g) {
    const MvLaunch &L = A.L;
    const int j = job_of(A, g);
    const int R = A.R[j], r0 = (g - A.gstart[j]) * R;
    const DMat &W = L.job[j].w;
    const int nr = min(R, W.rows - r0);
    pf_rows(W, r0, nr);
    if (L.mode == MV_GATEUP) pf_rows(L.job[1].w, r0, nr);
}


/* MB: CTAs per SM the registers must allow (DOPPLER_CUDA_MV_LB picks 2 or 3) */
template <int MB> __global__ void __launch_bounds__(Q_THREADS, MB) k_matvec_q(const MqArgs A) {
    extern __shared__ float4 smq[];
    uint8_t *sm = (uint8_t *)smq;
    __shared__ float red[32];
    __shared__ unsigned long long best_s[Q_WARPS];
    __shared__ __align__(16) float tile_s[2][32];
    const MvLaunch &L = A.L;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int total = A.gstart[L.mode == MV_GATEUP ? 1 : L.njobs];
    /* this CTA's groups (or tiles) */
    const int ntiles = A.tiled ? (L.job[0].w.rows + 31) / 32 : 0;
    const int c0 = blockIdx.x * A.per_cta, c1 = min(c0 + A.per_cta, A.tiled ? ntiles : total);
    pdl_trigger();
    /* the first groups of weights into L2 while the previous kernel finishes */
    if (lane == 0)
        for (int i = 0; i < A.pf; i++) {
            const int g = A.tiled ? (c0 + i) * Q_WARPS + warp : c0 + warp + i * Q_WARPS;
            if (g < (A.tiled ? min(total, c1 * Q_WARPS) : c1)) pf_group(A, g);
        }
    pdl_wait();

    q_stage_x(A, sm, red);

    /* ---- main loop */
    unsigned long long best = 0;
    if (!A.tiled) {
        for (int g = c0 + warp; g < c1; g += Q_WARPS) {
            if (lane == 0 && A.pf) {
                const int gp = g + A.pf * Q_WARPS;
                if (gp < c1) pf_group(A, gp);
            }
            const int j = job_of(A, g);
            const MvJob &J = L.job[j];
            const int R = A.R[j], r0 = (g - A.gstart[j]) * R, nr = min(R, J.w.rows - r0);
            float acc[Q_RMAX];
#pragma unroll
            for (int k = 0; k < Q_RMAX; k++) acc[k] = 0.0f;
            q_dispatch(J.w, r0, nr, A.U[j], sm, A, acc);
#pragma unroll
            for (int k = 0; k < Q_RMAX; k++) {
                if (k < nr) {
                    const float v = warp_sum(acc[k]);
                    if (lane == 0) {
                        const int r = r0 + k;
                        if (L.mode == MV_ADD) J.y[r] += v;
                        else J.y[r] = J.bias ? v + J.bias[r] : v;
                        if (L.argmax_key) {
                            const unsigned long long key =
                                ((unsigned long long)float_key(J.y[r]) << 32) | (0xFFFFFFFFu - (uint32_t)r);
                            best = key > best ? key : best;
                        }
                    }
                }
            }
        }
        if (L.argmax_key) {
            if (lane == 0) best_s[warp] = best;
            __syncthreads();
            if (threadIdx.x == 0) {
                for (int w = 1; w < Q_WARPS; w++) best = best_s[w] > best ? best_s[w] : best;
                if (best) atomicMax(L.argmax_key, best);
            }
        }
        return;
    }

    /* gate/up in tiles of 32 rows: warp w takes rows 32 t + 4 w .. + 3 */
    const MvJob &J = L.job[0];
    const int rows = J.w.rows;
    int buf = 0;
    for (int t = c0; t < c1; t++, buf ^= 1) {
        const int g = t * Q_WARPS + warp, r0 = g * 4, nr = min(4, rows - r0);
        if (lane == 0 && A.pf) {
            const int gp = g + A.pf * Q_WARPS;
            if (gp < min(total, c1 * Q_WARPS)) pf_group(A, gp);
        }
        float acc[Q_RMAX], acc2[Q_RMAX];
#pragma unroll
        for (int k = 0; k < Q_RMAX; k++) acc[k] = acc2[k] = 0.0f;
        if (nr > 0) {
            q_dispatch(J.w, r0, nr, A.U[0], sm, A, acc);
            q_dispatch(L.job[1].w, r0, nr, A.U[1], sm, A, acc2);
        }
#pragma unroll
        for (int k = 0; k < Q_RMAX; k++) {
            const float v = warp_sum(acc[k]), v2 = warp_sum(acc2[k]);
            if (lane == 0) {
                float o = 0.0f;
                if (k < nr) {
                    o = act_fn(L.act, v, v2);
                    J.y[r0 + k] = o;
                }
                tile_s[buf][warp * 4 + k] = o;
            }
        }
        if (L.xq_out.piece) {
            __syncthreads();
            if (warp == 0) {
                float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                if (lane < 8) v = ((const float4 *)tile_s[buf])[lane];
                float dxv;
                int s16;
                const uint2 pc = quant4(v, dxv, s16);
                const int pos = t * 32 + lane * 4;
                if (lane < 8 && pos < rows) {
                    L.xq_out.piece[pos >> 2] = pc;
                    if (lane == 0) L.xq_out.dx[t] = dxv;
                    if (!(lane & 3)) L.xq_out.isum[pos >> 4] = s16;
                }
            }
        }
    }
}

/* --------------------------------------------- warp-per-row-group kernel */

/* k_matvec_w: the default decode path. Every warp owns one group of R rows
 * (R = 32 / U rows when a row has fewer than 32 units, at most 4; else 1,
 * DOPPLER_CUDA_MVW_PAIRS) and walks the group's (row, unit) pairs in chunks
 * of 32 P: lane l takes pairs c + l (and c + l + 32 when P = 2; P = 1 where
 * every group has at most 32 pairs). The first chunk is loaded into
 * registers before griddepcontrol.wait, so the weights stream in while the
 * previous kernel finishes; each further chunk is loaded before the current
 * one is used (double buffering). The grid has as many CTAs as run at once,
 * warps looping over their groups; x is staged by q_stage_x as for
 * k_matvec_q (and held in registers with XR, see there).
 * T < 0: the jobs differ in format (a Q/K/V launch), dispatched per unit:
 * W_KM for Q4_K beside Q6_K (the Q4_K_M mix), W_ANY for any. Every launch
 * fetches its kernel's code anew, so the smaller W_KM (only two formats'
 * units) is time: H200, Qwen2.5-3B shape, BENCHMARKS.md seventh session. */
enum { W_ANY = -1, W_KM = -2 };
/* the x layouts (families) a kernel may stage, as a mask */
template <int T> struct WFam { enum { m = T >= 0 ? 1 << q_family(T) : T == W_KM ? (1 << FAM_B) | (1 << FAM_C) : 7 }; };

template <int T> __device__ __forceinline__ void w_load1(const DMat &W, int row, int v, QRaw &r) {
    if (T >= 0) {
        q_load<T>(W, row, v, r);
        return;
    }
    if (T == W_KM) {
        if (W.type == DP_TYPE_Q4_K) q_load<DP_TYPE_Q4_K>(W, row, v, r);
        else q_load<DP_TYPE_Q6_K>(W, row, v, r);
        return;
    }
    switch (W.type) {
    case DP_TYPE_Q4_0: q_load<DP_TYPE_Q4_0>(W, row, v, r); break;
    case DP_TYPE_Q4_1: q_load<DP_TYPE_Q4_1>(W, row, v, r); break;
    case DP_TYPE_Q5_0: q_load<DP_TYPE_Q5_0>(W, row, v, r); break;
    case DP_TYPE_Q5_1: q_load<DP_TYPE_Q5_1>(W, row, v, r); break;
    case DP_TYPE_Q8_0: q_load<DP_TYPE_Q8_0>(W, row, v, r); break;
    case DP_TYPE_Q4_K: q_load<DP_TYPE_Q4_K>(W, row, v, r); break;
    case DP_TYPE_Q5_K: q_load<DP_TYPE_Q5_K>(W, row, v, r); break;
    default: q_load<DP_TYPE_Q6_K>(W, row, v, r); break;
    }
}

template <int T>
__device__ __forceinline__ float w_math1(int type, const QRaw &r, int v, const uint8_t *sm, const MqArgs &A) {
    const float *dxs = (const float *)(sm + A.off_dx);
    const int *iss = (const int *)(sm + A.off_is);
    if (T >= 0) return q_math<T>(r, v, sm + A.famoff[q_family(T)], dxs, iss);
    if (T == W_KM)
        return type == DP_TYPE_Q4_K ? q_math<DP_TYPE_Q4_K>(r, v, sm + A.famoff[FAM_B], dxs, iss)
                                    : q_math<DP_TYPE_Q6_K>(r, v, sm + A.famoff[FAM_C], dxs, iss);
#define W_CASE(TT)                                                                                                \
    case TT: return q_math<TT>(r, v, sm + A.famoff[q_family(TT)], dxs, iss);
    switch (type) {
    W_CASE(DP_TYPE_Q4_0) W_CASE(DP_TYPE_Q4_1) W_CASE(DP_TYPE_Q5_0) W_CASE(DP_TYPE_Q5_1) W_CASE(DP_TYPE_Q8_0)
    W_CASE(DP_TYPE_Q4_K) W_CASE(DP_TYPE_Q5_K)
    default: return q_math<DP_TYPE_Q6_K>(r, v, sm + A.famoff[FAM_C], dxs, iss);
    }
#undef W_CASE
}

/* f / U without an integer division: the float estimate is off by at most
 * one for any f < 2^22, and one compare each way puts it right. */
__device__ __forceinline__ int w_div(int f, int U, float invU) {
    int q = (int)(((float)f + 0.5f) * invU);
    q -= q * U > f;
    q += (q + 1) * U <= f;
    return q;
}

/* Where a warp's work item (group g, chunk c) lies, and the (row, unit) of
 * the lane's P pairs c + lane (and c + lane + 32) (rl = -1: past the
 * group), worked out once per item for the loads and the math of every job. */
template <int P> struct WItem {
    int g, c, j, R, U, r0, nr, total;
    float invU;
    int rl[P], u[P];
};
template <int P, int RM = Q_RMAX> __device__ __forceinline__ void w_pairs(WItem<P> &it) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < P; i++) {
        const int f = it.c + lane + 32 * i;
        /* one row per group: the pair is unit f of row 0 */
        const int rl = f < it.total ? (RM == 1 ? 0 : w_div(f, it.U, it.invU)) : -1;
        it.rl[i] = rl;
        it.u[i] = f - rl * it.U;
    }
}
template <int P, int RM = Q_RMAX>
__device__ __forceinline__ void w_item(const MqArgs &A, int GU, int g, int c, WItem<P> &it) {
    const MvLaunch &L = A.L;
    int j = 0;
    if (!GU)
        while (j + 1 < L.njobs && g >= A.gstart[j + 1]) j++;
    it.g = g, it.c = c, it.j = j, it.R = A.R[j], it.U = A.U[j], it.invU = A.invU[j];
    it.r0 = (g - A.gstart[j]) * it.R;
    it.nr = min(it.R, L.job[j].w.rows - it.r0);
    it.total = it.nr * it.U;
    w_pairs<P, RM>(it);
}

/* Loads the lane's pairs of the item from W. */
template <int T, int P> __device__ __forceinline__ void w_load(const DMat &W, const WItem<P> &it, QRaw *raw) {
#pragma unroll
    for (int i = 0; i < P; i++)
        if (it.rl[i] >= 0) w_load1<T>(W, it.r0 + it.rl[i], it.u[i], raw[i]);
}
/* acc[k] += the lane's share of row r0 + k of the item (RM: the most rows
 * per group of the launch, 1 or Q_RMAX). */
template <int T, int P, bool XR, int RM>
__device__ __forceinline__ void w_math(const DMat &W, const WItem<P> &it, const QRaw *raw, const uint8_t *sm,
                                       const MqArgs &A, const uint4 *xr, const float *dxr, const int *isr,
                                       float *acc) {
#pragma unroll
    for (int i = 0; i < P; i++) {
        if (it.rl[i] >= 0) {
            const float v = XR ? q_math_x<T>(raw[i], it.u[i], xr, dxr, isr) : w_math1<T>(W.type, raw[i], it.u[i], sm, A);
#pragma unroll
            for (int k = 0; k < RM; k++) acc[k] += RM == 1 || it.rl[i] == k ? v : 0.0f;
        }
    }
}

/* XR (P = 1, one format, every group at most 32 pairs): each lane's unit is
 * the same for every row it takes, so its x elements, scales and sums are
 * read from shared memory once, into registers.
 * RM = 1 where every group is one row (most launches): one accumulator per
 * lane and matrix, no per-pair row select (Q_RMAX otherwise). */
template <int T, int GU, int P, bool XR, int RM>
__global__ void __launch_bounds__(Q_THREADS, 2) k_matvec_w(const MqArgs A) {
    extern __shared__ float4 smq[];
    uint8_t *sm = (uint8_t *)smq;
    __shared__ float red[32];
    __shared__ unsigned long long best_s[Q_WARPS];
    const MvLaunch &L = A.L;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int G = A.gstart[GU ? 1 : L.njobs], stride = gridDim.x * Q_WARPS;
    pdl_trigger();
    WItem<P> it, nx;
    w_item<P, RM>(A, GU, blockIdx.x * Q_WARPS + warp, 0, it);
    QRaw cur[P], nxt[P], cur2[GU ? P : 1], nxt2[GU ? P : 1];
    if (it.g < G) {
        w_load<T>(L.job[it.j].w, it, cur);
        if (GU) w_load<T>(L.job[1].w, it, cur2);
    }
    if (A.l1pf) xs_prefetch_l1(L); /* the norm weights q_stage_x reads, into L1 */
    /* what lane 0 adds to the first group's rows: the bias (a weight: before
     * the wait) or, for a residual add, the old y (the previous kernels'
     * output: after it), loaded now so that the end of the group does not
     * wait for L2 */
    __shared__ float pre_s[Q_WARPS][Q_RMAX]; /* in shared memory: no registers held over the loop */
    const int g0 = it.g;
    if (!GU && lane < it.nr && it.g < G && L.mode != MV_ADD && L.job[it.j].bias)
        pre_s[warp][lane] = __ldg(L.job[it.j].bias + it.r0 + lane);
    pdl_wait();
    if (!GU && lane < it.nr && it.g < G && L.mode == MV_ADD) pre_s[warp][lane] = L.job[it.j].y[it.r0 + lane];
    q_stage_x<WFam<T>::m>(A, sm, red); /* ends with __syncthreads */
    constexpr int TX = T >= 0 ? T : DP_TYPE_Q4_0;
    uint4 xr[XR ? (int)QX<TX>::n : 1];
    float dxr[4]; /* QX<TX>::d used with XR */
    int isr[8];
    if (XR) {
        const uint4 *X;
        const float *dxp;
        const int *isp;
        q_xview<TX>(it.g < G && it.rl[0] >= 0 ? it.u[0] : 0, sm + A.famoff[q_family(TX)],
                    (const float *)(sm + A.off_dx), (const int *)(sm + A.off_is), &X, &dxp, &isp);
#pragma unroll
        for (int k = 0; k < (XR ? (int)QX<TX>::n : 1); k++) xr[k] = X[k];
        q_xscales<TX>(dxp, isp, dxr, isr);
    }

    float acc[Q_RMAX], acc2[Q_RMAX];
#pragma unroll
    for (int k = 0; k < Q_RMAX; k++) acc[k] = acc2[k] = 0.0f;
    unsigned long long best = 0;
    while (it.g < G) {
        /* the next item: the next chunk of this group, or the next group */
        if (it.c + 32 * P < it.total) {
            nx = it, nx.c = it.c + 32 * P;
            if (RM == 1) {
                w_pairs<P, RM>(nx);
            } else { /* each pair 32 P further: its unit, wrapped into the next rows (no division) */
#pragma unroll
                for (int i = 0; i < P; i++) {
                    if (nx.c + lane + 32 * i >= nx.total) {
                        nx.rl[i] = -1;
                    } else {
                        int u = nx.u[i] + 32 * P, rl = nx.rl[i];
                        while (u >= nx.U) u -= nx.U, rl++;
                        nx.rl[i] = rl, nx.u[i] = u;
                    }
                }
            }
        } else {
            w_item<P, RM>(A, GU, it.g + stride, 0, nx);
        }
        if (nx.g < G) {
            w_load<T>(L.job[nx.j].w, nx, nxt);
            if (GU) w_load<T>(L.job[1].w, nx, nxt2);
        }
        const MvJob &J = L.job[it.j];
        w_math<T, P, XR, RM>(J.w, it, cur, sm, A, xr, dxr, isr, acc);
        if (GU) w_math<T, P, XR, RM>(L.job[1].w, it, cur2, sm, A, xr, dxr, isr, acc2);
        if (nx.g != it.g) { /* the group is complete */
#pragma unroll
            for (int k = 0; k < RM; k++) {
                if (k < it.R) { /* warp-uniform: every lane takes part in the sums */
                    const float v = warp_sum(acc[k]);
                    const float v2 = GU ? warp_sum(acc2[k]) : 0.0f;
                    if (lane == 0 && k < it.nr) {
                        const int r = it.r0 + k;
                        if (GU) J.y[r] = act_fn(L.act, v, v2);
                        else if (L.mode == MV_ADD) J.y[r] = (it.g == g0 ? pre_s[warp][k] : J.y[r]) + v;
                        else J.y[r] = J.bias ? v + (it.g == g0 ? pre_s[warp][k] : J.bias[r]) : v;
                        if (!GU && L.argmax_key) {
                            const unsigned long long key =
                                ((unsigned long long)float_key(J.y[r]) << 32) | (0xFFFFFFFFu - (uint32_t)r);
                            best = key > best ? key : best;
                        }
                    }
                }
                acc[k] = acc2[k] = 0.0f;
            }
        }
        it = nx;
#pragma unroll
        for (int i = 0; i < P; i++) {
            cur[i] = nxt[i];
            if (GU) cur2[i] = nxt2[i];
        }
    }
    if (!GU && L.argmax_key) {
        if (lane == 0) best_s[warp] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < Q_WARPS; w++) best = best_s[w] > best ? best_s[w] : best;
            if (best) atomicMax(L.argmax_key, best);
        }
    }
}

/* ------------------------------------------------------------- launch */

static int g_wrm1 = 1;
static int g_mvq = -1, g_mvw = 1, g_waves = 1, g_wpairs = 32, g_wp = 0, g_wxr = 1, g_wl1 = 1, g_wwide = 1, g_cps = 2, g_pf = 2, g_lb = 3, g_nsm = 0;
static size_t g_q_smem = 0;

int dp_cu_matvec_q_ok(int type) {
    if (g_mvq < 0) {
        const char *e = getenv("DOPPLER_CUDA_MVQ");
        g_mvq = !(e && *e == '0');
        const char *c = getenv("DOPPLER_CUDA_MV_CPS");
        if (c && *c) g_cps = atoi(c) < 1 ? 1 : atoi(c) > 8 ? 8 : atoi(c);
        const char *p = getenv("DOPPLER_CUDA_MV_PF");
        if (p && *p) g_pf = atoi(p) < 0 ? 0 : atoi(p) > 16 ? 16 : atoi(p);
        const char *b = getenv("DOPPLER_CUDA_MV_LB");
        if (b && *b == '2') g_lb = 2;
        const char *w = getenv("DOPPLER_CUDA_MVW"); /* 0: the persistent k_matvec_q for every launch */
        g_mvw = !(w && *w == '0');
        const char *wv = getenv("DOPPLER_CUDA_MVW_WAVES");
        if (wv && *wv) g_waves = atoi(wv) < 1 ? 1 : atoi(wv) > 64 ? 64 : atoi(wv);
        /* pairs per lane and item: 1, 2, or (unset) 1 where every group has
         * at most 32 pairs, else 2 */
        const char *pl = getenv("DOPPLER_CUDA_MVW_P");
        if (pl && *pl) g_wp = *pl == '1' ? 1 : 2;
        const char *wide = getenv("DOPPLER_CUDA_MVW_WIDE"); /* 0: LM heads grouped like the other matrices */
        g_wwide = !(wide && *wide == '0');
        const char *rm1 = getenv("DOPPLER_CUDA_MVW_RM1");
        g_wrm1 = !(rm1 && *rm1 == '0');
        const char *l1 = getenv("DOPPLER_CUDA_MVW_L1PF"); /* 0: no L1 prefetch of the norm weights */
        g_wl1 = !(l1 && *l1 == '0');
        const char *xr = getenv("DOPPLER_CUDA_MVW_XR"); /* 0: x from shared memory in every launch */
        g_wxr = !(xr && *xr == '0');
        const char *wp = getenv("DOPPLER_CUDA_MVW_PAIRS");
        if (wp && *wp) g_wpairs = atoi(wp) < 32 ? 32 : atoi(wp) > 1024 ? 1024 : atoi(wp);
    }
    return g_mvq && q_family(type) >= 0;
}

int dp_cu_matvec_w_on(void) {
    dp_cu_matvec_q_ok(DP_TYPE_Q4_0); /* reads the settings */
    return g_mvq && g_mvw;
}

/* The k_matvec_w instantiations: [GU][format], format index 8 = W_ANY, 9 = W_KM. */
typedef void (*MvwFn)(const MqArgs);
static const int g_w_types[8] = {DP_TYPE_Q4_0, DP_TYPE_Q4_1, DP_TYPE_Q5_0, DP_TYPE_Q5_1,
                                 DP_TYPE_Q8_0, DP_TYPE_Q4_K, DP_TYPE_Q5_K, DP_TYPE_Q6_K};
#define W_FNS(GU, P, XR, RM)                                                                                      \
    {k_matvec_w<DP_TYPE_Q4_0, GU, P, XR, RM>, k_matvec_w<DP_TYPE_Q4_1, GU, P, XR, RM>,                             \
     k_matvec_w<DP_TYPE_Q5_0, GU, P, XR, RM>, k_matvec_w<DP_TYPE_Q5_1, GU, P, XR, RM>,                             \
     k_matvec_w<DP_TYPE_Q8_0, GU, P, XR, RM>, k_matvec_w<DP_TYPE_Q4_K, GU, P, XR, RM>,                             \
     k_matvec_w<DP_TYPE_Q5_K, GU, P, XR, RM>, k_matvec_w<DP_TYPE_Q6_K, GU, P, XR, RM>,                             \
     (GU || XR) ? NULL : k_matvec_w<W_ANY, 0, P, false, RM>, (GU || XR) ? NULL : k_matvec_w<W_KM, 0, P, false, RM>}
#define W_VARS(RM)                                                                                                \
    {{W_FNS(0, 1, false, RM), W_FNS(1, 1, false, RM)},                                                            \
     {W_FNS(0, 2, false, RM), W_FNS(1, 2, false, RM)},                                                            \
     {W_FNS(0, 1, true, RM), W_FNS(1, 1, true, RM)}}
/* [rows per group: any, 1][variant: P = 1, P = 2, P = 1 with x in registers][GU][format] */
static const MvwFn g_w_fn[2][3][2][10] = {W_VARS(Q_RMAX), W_VARS(1)};
#undef W_VARS
#undef W_FNS
static int w_index(int type) {
    for (int i = 0; i < 8; i++)
        if (g_w_types[i] == type) return i;
    return 8;
}

/* Rows per warp of k_matvec_w: about g_wpairs (row, unit) pairs per group
 * (DOPPLER_CUDA_MVW_PAIRS, default 32: measured +3.2% / +2.1% decode on the
 * Gemma-3-1B / Qwen2.5-3B shapes against 64), at most Q_RMAX rows. */
static int w_rows(int U) {
    const int R = g_wpairs / U;
    return R < 1 ? 1 : R > Q_RMAX ? Q_RMAX : R;
}

static int matvec_w(const MvLaunch *L, cudaStream_t st) {
    MqArgs A;
    memset(&A, 0, sizeof A);
    A.L = *L;
    const size_t smem = q_layout(L, &A);
    if (smem > g_q_smem)
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: %d inputs exceed the prepared shared memory", L->cols);
    const int gu = L->mode == MV_GATEUP;
    int same = 1, km = 1; /* km: every job Q4_K or Q6_K (the two-format kernel W_KM) */
    for (int j = 0; j < L->njobs; j++) {
        const DMat &W = L->job[j].w;
        A.U[j] = L->cols / q_unit(W.type);
        A.invU[j] = 1.0f / (float)A.U[j];
        A.R[j] = w_rows(A.U[j]);
        same &= W.type == L->job[0].w.type;
        km &= W.type == DP_TYPE_Q4_K || W.type == DP_TYPE_Q6_K;
    }
    /* A matrix with far more rows than warps (an LM head): rows per group and
     * pairs per lane that fill the lanes' chunks best (Gemma's 36-unit rows:
     * 4 rows in 5 chunks of 32 pairs, 90%, instead of a row in 64 slots, 56%;
     * measured +3.4% decode on the Gemma-3-1B shape; DOPPLER_CUDA_MVW_WIDE=0) */
    int wideP = 0;
    if (g_wwide && !gu && L->njobs == 1 && !g_wp && (long long)L->job[0].w.rows >= 64LL * g_nsm * Q_WARPS) {
        const int U = A.U[0];
        double best = 0.0;
        for (int P = 1; P <= 2; P++)
            for (int R = 1; R <= Q_RMAX; R++) {
                const int slots = ((R * U + 32 * P - 1) / (32 * P)) * 32 * P;
                const double util = (double)(R * U) / slots;
                if (util > best + 1e-9) best = util, wideP = P, A.R[0] = R;
            }
    }
    const int nj = gu ? 1 : L->njobs;
    int g = 0;
    for (int j = 0; j < nj; j++) {
        A.gstart[j] = g;
        g += (L->job[j].w.rows + A.R[j] - 1) / A.R[j];
    }
    A.gstart[nj] = g;
    int small = 1; /* every group at most 32 pairs: one per lane, the same unit for every row */
    for (int j = 0; j < L->njobs; j++)
        if (A.R[j] * A.U[j] > 32) small = 0;
    const int P = g_wp ? g_wp : wideP ? wideP : small ? 1 : 2;
    const int var = P == 1 && small && same && g_wxr ? 2 : P - 1;
    int one_row = g_wrm1; /* every group one row: the RM = 1 kernels (DOPPLER_CUDA_MVW_RM1=0: never) */
    for (int j = 0; j < L->njobs; j++) one_row &= A.R[j] == 1;
    const MvwFn fn = g_w_fn[one_row][var][gu][same ? w_index(L->job[0].w.type) : km ? 9 : 8];
    A.l1pf = g_wl1;
    if (!fn) return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: gate and up differ in format");
    /* as many CTAs as run at once (DOPPLER_CUDA_MVW_WAVES of them, default 1),
     * each warp looping over its groups: x is staged once per CTA */
    static MvwFn c_fn[32];
    static size_t c_sm[32];
    static int c_bps[32], c_n;
    int bps = 0;
    for (int i = 0; i < c_n && !bps; i++)
        if (c_fn[i] == fn && c_sm[i] == smem) bps = c_bps[i];
    if (!bps) {
        CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, fn, Q_THREADS, smem));
        if (bps < 1) bps = 1;
        if (c_n < 32) c_fn[c_n] = fn, c_sm[c_n] = smem, c_bps[c_n++] = bps;
    }
    long long grid = (g + Q_WARPS - 1) / Q_WARPS;
    const long long cap = (long long)g_nsm * bps * g_waves;
    if (grid > cap) grid = cap;
    CU_TRY(dp_cu_launch(fn, dim3(grid < 1 ? 1 : (unsigned)grid), dim3(Q_THREADS), smem, st, A));
    return DP_OK;
}

int dp_cu_matvec_q_init(int max_cols) {
    dp_cu_matvec_q_ok(DP_TYPE_Q4_0); /* reads the settings */
    int dev;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaDeviceGetAttribute(&g_nsm, cudaDevAttrMultiProcessorCount, dev));
    /* all three layouts, dx, sums and x_eff */
    size_t need = fam_bytes(FAM_A, max_cols) + 2 * fam_bytes(FAM_B, max_cols) + (size_t)max_cols * 4 +
                  (size_t)(max_cols / 32) * 4 + (size_t)(max_cols / 16) * 4 + 64;
    int optin = 0;
    CU_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (need > (size_t)optin - 2048)
        return dp_set_error(DP_ERR_BACKEND, "CUDA: a matrix-vector product over %d inputs needs %zu bytes of shared "
                                            "memory, the GPU offers %d", max_cols, need, optin);
    if (need <= g_q_smem) return DP_OK;
    if (need > 48 * 1024) {
        CU_TRY(cudaFuncSetAttribute(k_matvec_q<2>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
        CU_TRY(cudaFuncSetAttribute(k_matvec_q<3>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
        for (int rm = 0; rm < 2; rm++)
            for (int pp = 0; pp < 3; pp++)
                for (int gu = 0; gu < 2; gu++)
                    for (int i = 0; i < 10; i++)
                        if (g_w_fn[rm][pp][gu][i])
                            CU_TRY(cudaFuncSetAttribute(g_w_fn[rm][pp][gu][i],
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
    }
    g_q_smem = need;
    return DP_OK;
}

int dp_cu_matvec_q(const MvLaunch *L, cudaStream_t st) {
    if (L->cols % 32 || L->njobs < 1 || L->njobs > 3 || (L->mode == MV_GATEUP && L->njobs != 2))
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: unsupported launch (cols %d, %d jobs)", L->cols, L->njobs);
    if (L->xq_in.piece && (L->norm_w || L->res_o))
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: a quantised input cannot be normalised");
    if (!g_nsm) {
        int rc = dp_cu_matvec_q_init(L->cols);
        if (rc) return rc;
    }
    for (int j = 0; j < L->njobs; j++)
        if (q_family(L->job[j].w.type) < 0 || L->job[j].w.cols != L->cols)
            return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: job %d (%s, %d columns) is not for the integer path", j,
                                dp_type_name(L->job[j].w.type), L->job[j].w.cols);
    for (int j = 0; j < L->njobs; j++) /* q_load's 32-bit offsets */
        if ((unsigned long long)L->job[j].w.rows * (unsigned long long)L->job[j].w.body_row >= (1ull << 32) ||
            (unsigned long long)L->job[j].w.rows * (unsigned long long)L->job[j].w.nblk >= (1ull << 31))
            return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: a %d x %d %s matrix of 4 GiB or more is not supported",
                                L->job[j].w.rows, L->job[j].w.cols, dp_type_name(L->job[j].w.type));
    int taken = 0;
    int rc = dp_cu_matvec_t(L, &taken, st);
    if (rc || taken) return rc;
    if (L->mode != MV_GATEUP && L->njobs > 1 && !L->xq_in.piece && !L->xq_out.piece) {
        /* jobs of k_matvec_t's formats beside others (a Q5_K_M file's Q/K/V):
         * two launches, so that every matrix is summed by the kernel of its
         * format, as in a launch of its own (the traced path) */
        MvLaunch Lt = *L, Lw = *L;
        Lt.njobs = Lw.njobs = 0;
        for (int j = 0; j < L->njobs; j++) {
            MvLaunch *D = dp_cu_matvec_t_ok(L->job[j].w.type) ? &Lt : &Lw;
            D->job[D->njobs++] = L->job[j];
        }
        if (Lt.njobs && Lw.njobs) {
            rc = dp_cu_matvec_t(&Lt, &taken, st);
            if (rc) return rc;
            if (taken) return dp_cu_matvec_q(&Lw, st);
        }
    }
    if (g_mvw && !L->xq_out.piece && !(L->mode == MV_GATEUP && L->job[0].w.type != L->job[1].w.type))
        return matvec_w(L, st);
    MqArgs A;
    memset(&A, 0, sizeof A);
    A.L = *L;
    const size_t smem = q_layout(L, &A);
    if (smem > g_q_smem)
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: %d inputs exceed the prepared shared memory", L->cols);
    int g = 0;
    for (int j = 0; j < L->njobs; j++) {
        const DMat &W = L->job[j].w;
        if (q_family(W.type) < 0 || W.cols != L->cols)
            return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: job %d (%s, %d columns) is not for the integer path", j,
                                dp_type_name(W.type), W.cols);
        A.U[j] = L->cols / q_unit(W.type);
        int R = L->mode == MV_GATEUP ? 4 : L->rows_per_group;
        if (R <= 0) R = 32 * q_un(W.type) / A.U[j];
        A.R[j] = R < 1 ? 1 : R > Q_RMAX ? Q_RMAX : R;
        A.gstart[j] = g;
        g += (W.rows + A.R[j] - 1) / A.R[j];
    }
    A.gstart[L->njobs] = g;
    A.tiled = L->mode == MV_GATEUP;
    if (A.tiled && L->job[1].w.rows != L->job[0].w.rows)
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: gate and up differ in rows");
    if (L->xq_out.piece && (!A.tiled || L->job[0].w.rows % 32))
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: only a gate/up launch of whole 32-row tiles quantises its "
                                            "output");
    const int total = A.tiled ? (L->job[0].w.rows + 31) / 32 : (A.gstart[L->mode == MV_GATEUP ? 1 : L->njobs] +
                                                                Q_WARPS - 1) / Q_WARPS;
    static size_t c_smem[16];
    static int c_per_sm[16], c_n;
    int per_sm = 0;
    for (int i = 0; i < c_n && !per_sm; i++)
        if (c_smem[i] == smem) per_sm = c_per_sm[i];
    if (!per_sm) {
        CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, g_lb == 2 ? k_matvec_q<2> : k_matvec_q<3>,
                                                             Q_THREADS, smem));
        if (per_sm < 1) per_sm = 1;
        if (c_n < 16) c_smem[c_n] = smem, c_per_sm[c_n++] = per_sm;
    }
    int grid = g_nsm * (per_sm < g_cps ? per_sm : g_cps);
    if (grid > total) grid = total;
    if (grid < 1) grid = 1;
    /* per_cta: tiles, or groups (a multiple of the warps) */
    if (A.tiled) {
        A.per_cta = (total + grid - 1) / grid;
        grid = (total + A.per_cta - 1) / A.per_cta;
    } else {
        const int groups = A.gstart[L->njobs];
        int per = (groups + grid - 1) / grid;
        A.per_cta = (per + Q_WARPS - 1) / Q_WARPS * Q_WARPS;
        grid = (groups + A.per_cta - 1) / A.per_cta;
    }
    A.pf = g_pf;
    if (g_lb == 2) CU_TRY(dp_cu_launch(k_matvec_q<2>, dim3(grid), dim3(Q_THREADS), smem, st, A));
    else CU_TRY(dp_cu_launch(k_matvec_q<3>, dim3(grid), dim3(Q_THREADS), smem, st, A));
    return DP_OK;
}
