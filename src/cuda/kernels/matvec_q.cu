/* Decode matrix-vector products with integer dot products, k_matvec_w: the
 * path for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL and IQ4_XS (matvec.cu
 * keeps the float kernel for the other formats and dispatches here).
 *
 * The input vector's quantisation and layouts, the per-format units and the
 * x-staging prologue are in qunit.cuh. */
#include "qunit.cuh"

/* k_matvec_w: every warp owns one group of R rows (about 32 (row, unit)
 * pairs, DOPPLER_CUDA_MVW_PAIRS: R = 32 / U rows when a row has fewer than
 * 32 units, at most 4; else 1) and walks the group's pairs in chunks of
 * 32 P: lane l takes pairs c + l (and c + l + 32 when P = 2; P = 1 where
 * every group has at most 32 pairs). The first chunk is loaded into
 * registers before griddepcontrol.wait, so the weights stream in while the
 * previous kernel finishes; each further chunk is loaded before the current
 * one is used (double buffering). The grid has as many CTAs as run at once,
 * warps looping over their groups; x is staged by q_stage_x (and held in
 * registers with XR, see there).
 * T < 0: the jobs differ in format (a Q/K/V launch), dispatched per unit:
 * W_KM for Q4_K beside Q6_K (the Q4_K_M mix), W_IX for IQ4_XS beside Q5_K
 * (the IQ4_XS mix's V where 4 or more query heads share a KV head), W_IQM
 * for the IQ2 / IQ3 formats beside each other or beside a Q4_K or Q2_K (the
 * IQ mixes' Q/K/V; W_IQK - t for the one IQ format t beside a Q4_K, their
 * common pair), W_ANY for any other. Every launch fetches its kernel's
 * code anew, so the smaller two-format kernels are time (BENCHMARKS.md). */
enum { W_ANY = -1, W_KM = -2, W_IX = -3, W_IQM = -4, W_IQK = -100 };
__host__ __device__ constexpr bool w_iqk(int T) { return T <= W_IQK; }
__host__ __device__ constexpr int w_iqk_type(int T) { return W_IQK - T; }
/* the x layouts (families) a kernel may stage, as a mask */
template <int T> struct WFam {
    enum {
        m = T >= 0      ? 1 << q_family(T)
            : T == W_KM ? (1 << FAM_B) | (1 << FAM_C)
            : T == W_IX ? 1 << FAM_B
            : T == W_IQM ? (1 << FAM_A) | (1 << FAM_B) | (1 << FAM_C)
            : w_iqk(T)   ? (1 << FAM_A) | (1 << FAM_B)
                        : 7
    };
};

/* The IQ4 lookup's table registers (common.cuh iq4_tab) where the kernel
 * may meet an IQ4 format; the constants (left unused) elsewhere. */
static __device__ uint2 d_iq4_tab = {IQ4_L0, IQ4_H0};
template <int T> __device__ __forceinline__ Iq4Tab w_tab() {
    return T == DP_TYPE_IQ4_NL || T == DP_TYPE_IQ4_XS || T == W_IX || T == W_ANY ? iq4_tab(&d_iq4_tab)
                                                                                     : IQ4_TAB_CONST;
}

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
    if (T == W_IX) {
        if (W.type == DP_TYPE_IQ4_XS) q_load<DP_TYPE_IQ4_XS>(W, row, v, r);
        else q_load<DP_TYPE_Q5_K>(W, row, v, r);
        return;
    }
    if (w_iqk(T)) {
        if (W.type == DP_TYPE_Q4_K) q_load<DP_TYPE_Q4_K>(W, row, v, r);
        else q_load<w_iqk_type(T)>(W, row, v, r);
        return;
    }
    if (T == W_IQM) {
        switch (W.type) {
        case DP_TYPE_IQ2_XXS: q_load<DP_TYPE_IQ2_XXS>(W, row, v, r); break;
        case DP_TYPE_IQ2_XS: q_load<DP_TYPE_IQ2_XS>(W, row, v, r); break;
        case DP_TYPE_IQ2_S: q_load<DP_TYPE_IQ2_S>(W, row, v, r); break;
        case DP_TYPE_IQ3_XXS: q_load<DP_TYPE_IQ3_XXS>(W, row, v, r); break;
        case DP_TYPE_IQ3_S: q_load<DP_TYPE_IQ3_S>(W, row, v, r); break;
        case DP_TYPE_Q4_K: q_load<DP_TYPE_Q4_K>(W, row, v, r); break;
        default: q_load<DP_TYPE_Q2_K>(W, row, v, r); break;
        }
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
    case DP_TYPE_IQ4_NL: q_load<DP_TYPE_IQ4_NL>(W, row, v, r); break;
    case DP_TYPE_IQ4_XS: q_load<DP_TYPE_IQ4_XS>(W, row, v, r); break;
    case DP_TYPE_Q3_K: q_load<DP_TYPE_Q3_K>(W, row, v, r); break;
    case DP_TYPE_Q2_K: q_load<DP_TYPE_Q2_K>(W, row, v, r); break;
    default: q_load<DP_TYPE_Q6_K>(W, row, v, r); break;
    }
}

template <int T>
__device__ __forceinline__ float w_math1(int type, const QRaw &r, int v, const uint8_t *sm, const MqArgs &A,
                                         Iq4Tab tab) {
    const float *dxs = (const float *)(sm + A.off_dx);
    const int *iss = (const int *)(sm + A.off_is);
    if (T >= 0) return q_math<T>(r, v, sm + A.famoff[q_family(T)], dxs, iss, tab);
    if (T == W_KM)
        return type == DP_TYPE_Q4_K ? q_math<DP_TYPE_Q4_K>(r, v, sm + A.famoff[FAM_B], dxs, iss, tab)
                                    : q_math<DP_TYPE_Q6_K>(r, v, sm + A.famoff[FAM_C], dxs, iss, tab);
    if (T == W_IX)
        return type == DP_TYPE_IQ4_XS ? q_math<DP_TYPE_IQ4_XS>(r, v, sm + A.famoff[FAM_B], dxs, iss, tab)
                                      : q_math<DP_TYPE_Q5_K>(r, v, sm + A.famoff[FAM_B], dxs, iss, tab);
    if (w_iqk(T))
        return type == DP_TYPE_Q4_K ? q_math<DP_TYPE_Q4_K>(r, v, sm + A.famoff[FAM_B], dxs, iss, tab)
                                    : q_math<w_iqk_type(T)>(r, v, sm + A.famoff[FAM_A], dxs, iss, tab);
#define W_CASE(TT)                                                                                                \
    case TT: return q_math<TT>(r, v, sm + A.famoff[q_family(TT)], dxs, iss, tab);
    if (T == W_IQM) {
        switch (type) {
        W_CASE(DP_TYPE_IQ2_XXS) W_CASE(DP_TYPE_IQ2_XS) W_CASE(DP_TYPE_IQ2_S) W_CASE(DP_TYPE_IQ3_XXS)
        W_CASE(DP_TYPE_IQ3_S) W_CASE(DP_TYPE_Q4_K)
        default: return q_math<DP_TYPE_Q2_K>(r, v, sm + A.famoff[FAM_C], dxs, iss, tab);
        }
    }
    switch (type) {
    W_CASE(DP_TYPE_Q4_0) W_CASE(DP_TYPE_Q4_1) W_CASE(DP_TYPE_Q5_0) W_CASE(DP_TYPE_Q5_1) W_CASE(DP_TYPE_Q8_0)
    W_CASE(DP_TYPE_Q4_K) W_CASE(DP_TYPE_Q5_K) W_CASE(DP_TYPE_IQ4_NL) W_CASE(DP_TYPE_IQ4_XS)
    W_CASE(DP_TYPE_Q3_K) W_CASE(DP_TYPE_Q2_K)
    default: return q_math<DP_TYPE_Q6_K>(r, v, sm + A.famoff[FAM_C], dxs, iss, tab);
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
                                       Iq4Tab tab, float *acc) {
#pragma unroll
    for (int i = 0; i < P; i++) {
        if (it.rl[i] >= 0) {
            const float v = XR ? q_math_x<T>(raw[i], it.u[i], xr, dxr, isr, tab)
                                 : w_math1<T>(W.type, raw[i], it.u[i], sm, A, tab);
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
    const Iq4Tab tab = w_tab<T>(); /* before the wait: its load overlaps the previous kernel */
    WItem<P> it, nx;
    w_item<P, RM>(A, GU, blockIdx.x * Q_WARPS + warp, 0, it);
    QRaw cur[P], nxt[P], cur2[GU ? P : 1], nxt2[GU ? P : 1];
    if (it.g < G) {
        w_load<T>(L.job[it.j].w, it, cur);
        if (GU) w_load<T>(L.job[1].w, it, cur2);
    }
    xs_prefetch_l1(L); /* the norm weights q_stage_x reads, into L1 */
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
        w_math<T, P, XR, RM>(J.w, it, cur, sm, A, xr, dxr, isr, tab, acc);
        if (GU) w_math<T, P, XR, RM>(L.job[1].w, it, cur2, sm, A, xr, dxr, isr, tab, acc2);
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
                            const unsigned long long key = argmax_key(J.y[r], r);
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
    if (!GU && L.argmax_key) block_argmax<Q_WARPS>(best, best_s, L.argmax_key);
}

/* k_matvec_l: a row per LPR lanes (4, 8, 16 or 32, A.lshift = log2 LPR),
 * 32 / LPR rows per warp group. Lane s of a row takes its units s,
 * s + LPR, ... P at a time: a group is NI steps (items), and every lane
 * keeps one sum per matrix (no per-pair row select; the 32 / LPR rows of a
 * warp read the same staged x elements, shared-memory broadcasts). The
 * group's sums close with log2 LPR shuffles.
 *
 * The work is balanced over the warps: each CTA takes A.Gc whole groups,
 * and its items (group, step), in order, are cut into 8 equal ranges, one
 * per warp (a warp per group leaves most warps idle on the last round:
 * Qwen3's 2560-row down projection is 1280 groups of two rows for 2112
 * resident warps). A group cut between warps is finished after the CTA's
 * barrier by the warp where it starts, from each warp's partial sums in
 * shared memory added in the order of the warps, so the result does not
 * depend on timing. No argmax (LM heads keep k_matvec_w's wide layout). */
struct LItem {
    int g, j, row, i, NI, U; /* row: the lane's (-1: past the matrix); i: the step, units s + LPR (P i + k) */
};
__device__ __forceinline__ void l_item(const MqArgs &A, int GU, int g, int ls, LItem &it) {
    const MvLaunch &L = A.L;
    int j = 0;
    if (!GU)
        while (j + 1 < L.njobs && g >= A.gstart[j + 1]) j++;
    const int lane = threadIdx.x & 31;
    it.g = g, it.j = j, it.i = 0, it.U = A.U[j];
    it.NI = A.NI[j];
    const int row = (g - A.gstart[j]) * (32 >> ls) + (lane >> ls);
    it.row = row < L.job[j].w.rows ? row : -1;
}
template <int P> __device__ __forceinline__ bool l_unit(const LItem &it, int ls, int k, int *u) {
    *u = (threadIdx.x & ((1 << ls) - 1)) + ((it.i * P + k) << ls);
    return it.row >= 0 && *u < it.U;
}

/* The lane's units of item it (both matrices of a gate/up launch). */
template <int T, int GU, int P>
__device__ __forceinline__ void l_load(const MvLaunch &L, const LItem &it, int ls, QRaw *raw, QRaw *raw2) {
    int u;
#pragma unroll
    for (int k = 0; k < P; k++)
        if (l_unit<P>(it, ls, k, &u)) {
            w_load1<T>(L.job[it.j].w, it.row, u, raw[k]);
            if (GU) w_load1<T>(L.job[1].w, it.row, u, raw2[k]);
        }
}

/* Writes row r of the job (head lane): the activation, the residual add
 * (pre: the old y, loaded early for the warp's first group) or the bias. */
__device__ __forceinline__ void l_store(const MvLaunch &L, const MvJob &J, int GU, int r, bool first, float pre,
                                        float v, float v2) {
    if (GU) J.y[r] = act_fn(L.act, v, v2);
    else if (L.mode == MV_ADD) J.y[r] = (first ? pre : J.y[r]) + v;
    else J.y[r] = J.bias ? v + (first ? pre : J.bias[r]) : v;
}

/* The first item of group g (of job j). */
__device__ __forceinline__ int l_gitem(const MqArgs &A, int j, int g) {
    return A.istart[j] + (g - A.gstart[j]) * A.NI[j];
}

template <int T, int GU, int P> __global__ void __launch_bounds__(Q_THREADS, 2) k_matvec_l(const MqArgs A) {
    extern __shared__ float4 smq[];
    uint8_t *sm = (uint8_t *)smq;
    __shared__ float red[32];
    __shared__ float2 part_s[Q_WARPS][2][32]; /* a warp's partial sums of its first and last group */
    const MvLaunch &L = A.L;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, ls = A.lshift;
    const int nj = GU ? 1 : L.njobs, G = A.gstart[nj];
    /* the CTA's items, and the warp's share */
    const int gb = blockIdx.x * A.Gc, ge = min(gb + A.Gc, G);
    int jb = 0;
    while (jb + 1 < nj && gb >= A.gstart[jb + 1]) jb++;
    int je = jb;
    while (je + 1 < nj && ge >= A.gstart[je + 1]) je++;
    const int ci0 = l_gitem(A, jb, gb), ci1 = ge == G ? A.istart[nj] : l_gitem(A, je, ge);
    const int per = (ci1 - ci0 + Q_WARPS - 1) / Q_WARPS;
    const int t0 = ci0 + warp * per, t1 = min(t0 + per, ci1);
    const bool head = (lane & ((1 << ls) - 1)) == 0; /* the lane that writes its row */
    pdl_trigger();
    const Iq4Tab tab = w_tab<T>(); /* before the wait: its load overlaps the previous kernel */
    LItem it, nx;
    QRaw cur[P], nxt[P], cur2[GU ? P : 1], nxt2[GU ? P : 1];
    int u;
    if (t0 < t1) { /* item t0: its group and step */
        int j = jb;
        while (j + 1 < nj && t0 >= A.istart[j + 1]) j++;
        const int q = t0 - A.istart[j], gg = q / A.NI[j];
        l_item(A, GU, A.gstart[j] + gg, ls, it);
        it.i = q - gg * A.NI[j];
        l_load<T, GU, P>(L, it, ls, cur, cur2);
    }
    xs_prefetch_l1(L);
    const int g0 = it.g;
    float pre = 0.0f; /* the first group's bias (before the wait) or old y (after it) */
    if (!GU && head && t0 < t1 && it.row >= 0 && L.mode != MV_ADD && L.job[it.j].bias)
        pre = __ldg(L.job[it.j].bias + it.row);
    pdl_wait();
    if (!GU && head && t0 < t1 && it.row >= 0 && L.mode == MV_ADD) pre = L.job[it.j].y[it.row];
    q_stage_x<WFam<T>::m>(A, sm, red); /* ends with __syncthreads */
    float acc = 0.0f, acc2 = 0.0f;
    bool whole = t0 < t1 && it.i == 0; /* the current group starts in this range */
    int cut_w = -1;                    /* the last warp of a group this warp starts and does not end */
    LItem cut;
    for (int t = t0; t < t1; t++) {
        const bool last = t + 1 == t1;
        if (!last) {
            if (it.i + 1 < it.NI) nx = it, nx.i++;
            else l_item(A, GU, it.g + 1, ls, nx);
            l_load<T, GU, P>(L, nx, ls, nxt, nxt2);
        }
        const MvJob &J = L.job[it.j];
#pragma unroll
        for (int k = 0; k < P; k++)
            if (l_unit<P>(it, ls, k, &u)) {
                acc += w_math1<T>(J.w.type, cur[k], u, sm, A, tab);
                if (GU) acc2 += w_math1<T>(L.job[1].w.type, cur2[k], u, sm, A, tab);
            }
        if (last || nx.g != it.g) { /* the group ends, or this range does */
            for (int o = 1 << (ls - 1); o > 0; o >>= 1) {
                acc += __shfl_xor_sync(FULL_MASK, acc, o);
                if (GU) acc2 += __shfl_xor_sync(FULL_MASK, acc2, o);
            }
            if (whole && it.i + 1 == it.NI) {
                if (head && it.row >= 0) l_store(L, J, GU, it.row, it.g == g0, pre, acc, acc2);
            } else { /* a part, for the warp that starts the group */
                part_s[warp][whole][lane] = make_float2(acc, acc2);
                if (whole) cut = it, cut_w = (l_gitem(A, it.j, it.g) + it.NI - 1 - ci0) / per;
            }
            acc = acc2 = 0.0f;
            whole = true;
        }
        it = nx;
#pragma unroll
        for (int k = 0; k < P; k++) {
            cur[k] = nxt[k];
            if (GU) cur2[k] = nxt2[k];
        }
    }
    __syncthreads();
    if (cut_w >= 0 && head && cut.row >= 0) { /* this warp's part, then the next warps' */
        float2 s = part_s[warp][1][lane];
        for (int w = warp + 1; w <= cut_w; w++) {
            const float2 p = part_s[w][0][lane];
            s.x += p.x, s.y += p.y;
        }
        l_store(L, L.job[cut.j], GU, cut.row, cut.g == g0, pre, s.x, s.y);
    }
}

/* ------------------------------------------------------------- launch */

static int g_nsm = 0;
static size_t g_q_smem = 0;

int dp_cu_matvec_q_ok(int type) { return q_family(type) >= 0; }

/* The k_matvec_w instantiations: [GU][format], format index N_WT = W_ANY, N_WT + 1 = W_KM, N_WT + 2 = W_IX,
 * N_WT + 3 = W_IQM, N_WT + 4 + i = W_IQK - (IQ format i: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S). The IQ2 /
 * IQ3 formats (the last five of g_w_types) have no XR variant. */
typedef void (*MvwFn)(const MqArgs);
enum { N_WT = 17, N_WIQ0 = 12, N_WFN = N_WT + 9 };
static const int g_w_types[N_WT] = {DP_TYPE_Q4_0,   DP_TYPE_Q4_1,    DP_TYPE_Q5_0,   DP_TYPE_Q5_1,   DP_TYPE_Q8_0,
                                    DP_TYPE_Q4_K,   DP_TYPE_Q5_K,    DP_TYPE_Q6_K,   DP_TYPE_IQ4_NL, DP_TYPE_IQ4_XS,
                                    DP_TYPE_Q3_K,   DP_TYPE_Q2_K,    DP_TYPE_IQ2_XXS, DP_TYPE_IQ2_XS, DP_TYPE_IQ2_S,
                                    DP_TYPE_IQ3_XXS, DP_TYPE_IQ3_S};
#define W_IQFN(T, GU, P, XR, RM) XR ? NULL : k_matvec_w<T, GU, P, false, RM>
#define W_IQKFN(T, GU, P, XR, RM) (GU || XR) ? NULL : k_matvec_w<W_IQK - T, 0, P, false, RM>
#define W_FNS(GU, P, XR, RM)                                                                                      \
    {k_matvec_w<DP_TYPE_Q4_0, GU, P, XR, RM>, k_matvec_w<DP_TYPE_Q4_1, GU, P, XR, RM>,                             \
     k_matvec_w<DP_TYPE_Q5_0, GU, P, XR, RM>, k_matvec_w<DP_TYPE_Q5_1, GU, P, XR, RM>,                             \
     k_matvec_w<DP_TYPE_Q8_0, GU, P, XR, RM>, k_matvec_w<DP_TYPE_Q4_K, GU, P, XR, RM>,                             \
     k_matvec_w<DP_TYPE_Q5_K, GU, P, XR, RM>, k_matvec_w<DP_TYPE_Q6_K, GU, P, XR, RM>,                             \
     k_matvec_w<DP_TYPE_IQ4_NL, GU, P, XR, RM>, k_matvec_w<DP_TYPE_IQ4_XS, GU, P, XR, RM>,                         \
     k_matvec_w<DP_TYPE_Q3_K, GU, P, XR, RM>, k_matvec_w<DP_TYPE_Q2_K, GU, P, XR, RM>,                             \
     W_IQFN(DP_TYPE_IQ2_XXS, GU, P, XR, RM), W_IQFN(DP_TYPE_IQ2_XS, GU, P, XR, RM),                               \
     W_IQFN(DP_TYPE_IQ2_S, GU, P, XR, RM), W_IQFN(DP_TYPE_IQ3_XXS, GU, P, XR, RM),                                \
     W_IQFN(DP_TYPE_IQ3_S, GU, P, XR, RM),                                                                        \
     (GU || XR) ? NULL : k_matvec_w<W_ANY, 0, P, false, RM>, (GU || XR) ? NULL : k_matvec_w<W_KM, 0, P, false, RM>, \
     (GU || XR) ? NULL : k_matvec_w<W_IX, 0, P, false, RM>, (GU || XR) ? NULL : k_matvec_w<W_IQM, 0, P, false, RM>, \
     W_IQKFN(DP_TYPE_IQ2_XXS, GU, P, XR, RM), W_IQKFN(DP_TYPE_IQ2_XS, GU, P, XR, RM),                             \
     W_IQKFN(DP_TYPE_IQ2_S, GU, P, XR, RM), W_IQKFN(DP_TYPE_IQ3_XXS, GU, P, XR, RM),                              \
     W_IQKFN(DP_TYPE_IQ3_S, GU, P, XR, RM)}
#define W_VARS(RM)                                                                                                \
    {{W_FNS(0, 1, false, RM), W_FNS(1, 1, false, RM)},                                                            \
     {W_FNS(0, 2, false, RM), W_FNS(1, 2, false, RM)},                                                            \
     {W_FNS(0, 1, true, RM), W_FNS(1, 1, true, RM)}}
/* [rows per group: any, 1][variant: P = 1, P = 2, P = 1 with x in registers][GU][format] */
static const MvwFn g_w_fn[2][3][2][N_WFN] = {W_VARS(Q_RMAX), W_VARS(1)};
#undef W_VARS
#undef W_FNS
#undef W_IQFN
#undef W_IQKFN
/* The k_matvec_l instantiations: [P - 1][GU][format], as g_w_fn. */
#define L_FNS(GU, P)                                                                                              \
    {k_matvec_l<DP_TYPE_Q4_0, GU, P>, k_matvec_l<DP_TYPE_Q4_1, GU, P>, k_matvec_l<DP_TYPE_Q5_0, GU, P>,            \
     k_matvec_l<DP_TYPE_Q5_1, GU, P>, k_matvec_l<DP_TYPE_Q8_0, GU, P>, k_matvec_l<DP_TYPE_Q4_K, GU, P>,            \
     k_matvec_l<DP_TYPE_Q5_K, GU, P>, k_matvec_l<DP_TYPE_Q6_K, GU, P>, k_matvec_l<DP_TYPE_IQ4_NL, GU, P>,          \
     k_matvec_l<DP_TYPE_IQ4_XS, GU, P>, k_matvec_l<DP_TYPE_Q3_K, GU, P>, k_matvec_l<DP_TYPE_Q2_K, GU, P>,          \
     k_matvec_l<DP_TYPE_IQ2_XXS, GU, P>, k_matvec_l<DP_TYPE_IQ2_XS, GU, P>, k_matvec_l<DP_TYPE_IQ2_S, GU, P>,      \
     k_matvec_l<DP_TYPE_IQ3_XXS, GU, P>, k_matvec_l<DP_TYPE_IQ3_S, GU, P>,                                        \
     GU ? NULL : k_matvec_l<W_ANY, 0, P>, GU ? NULL : k_matvec_l<W_KM, 0, P>,                                     \
     GU ? NULL : k_matvec_l<W_IX, 0, P>, GU ? NULL : k_matvec_l<W_IQM, 0, P>,                                     \
     GU ? NULL : k_matvec_l<W_IQK - DP_TYPE_IQ2_XXS, 0, P>, GU ? NULL : k_matvec_l<W_IQK - DP_TYPE_IQ2_XS, 0, P>,  \
     GU ? NULL : k_matvec_l<W_IQK - DP_TYPE_IQ2_S, 0, P>, GU ? NULL : k_matvec_l<W_IQK - DP_TYPE_IQ3_XXS, 0, P>,   \
     GU ? NULL : k_matvec_l<W_IQK - DP_TYPE_IQ3_S, 0, P>}
static const MvwFn g_l_fn[2][2][N_WFN] = {{L_FNS(0, 1), L_FNS(1, 1)}, {L_FNS(0, 2), L_FNS(1, 2)}};
#undef L_FNS
static int w_index(int type) {
    for (int i = 0; i < N_WT; i++)
        if (g_w_types[i] == type) return i;
    return N_WT;
}

/* Rows per warp of k_matvec_w: about DOPPLER_CUDA_MVW_PAIRS (row, unit)
 * pairs per group (32 measured best, BENCHMARKS.md), at most Q_RMAX rows. */
static int w_rows(int U) {
    const int R = dp_cu_set.mvw_pairs / U;
    return R < 1 ? 1 : R > Q_RMAX ? Q_RMAX : R;
}

/* k_matvec_l's steps per group of a job: U units over lpr lanes, P at a time */
static int l_steps(int U, int lpr, int P) { return (U + lpr * P - 1) / (lpr * P); }

/* k_matvec_l's shape for a launch: *lpr lanes per row and *P units per
 * lane per step, or *lpr = 0 for k_matvec_w (DOPPLER_CUDA_MVW_LANES: a
 * forced shape, w for never, auto). Auto: 8 lanes a row, two units a step
 * (the best shape measured on Qwen3-4B and Gemma-3-1B), where k_matvec_w
 * would take more than one round of groups over the nw warps that run at
 * once and either its chunks of 32 P pairs leave lanes idle (Qwen3's 40-
 * and 152-unit rows, Gemma's 18) or it cannot hold x in registers (rows of
 * more than 32 units: Qwen3-4B's o projection, every launch of the 4096-
 * wide Qwen3-8B): there the balanced items win, by more after a long
 * prompt than after a short one (the attention beside them is longer; why
 * the neighbouring launch matters is not measured). Where a row fills its
 * chunks with x in registers (Qwen2.5's 32 units) or every group gets a
 * warp of its own, k_matvec_w measured faster (BENCHMARKS.md). */
static void l_shape(const MvLaunch *L, const MqArgs *A, int gu, long long nw, int *lpr, int *P) {
    /* lanes a row and units a step by DP_MVW_* word */
    static const int f_lpr[10] = {0, 0, 4, 8, 16, 32, 4, 8, 16, 32}, f_p[10] = {0, 0, 1, 1, 1, 1, 2, 2, 2, 2};
    const int set = dp_cu_set.mvw_lanes;
    *lpr = 0, *P = 1;
    if (L->argmax_key || set == DP_MVW_W) return;
    if (set != DP_MVW_AUTO) {
        *lpr = f_lpr[set], *P = f_p[set];
        return;
    }
    int rows[3];
    for (int j = 0; j < L->njobs; j++) rows[j] = L->job[j].w.rows;
    if (dp_cu_mv_balanced(rows, A->U, L->njobs, gu, nw)) *lpr = 8, *P = 2;
}

int dp_cu_mv_balanced(const int *rows, const int *U, int njobs, int gu, long long nw) {
    /* k_matvec_w's groups and chunks, as dp_cu_matvec_q picks them (a
     * gate/up launch: one group per row pair, the up rows in the same) */
    int small = 1;
    for (int j = 0; j < njobs; j++) small &= w_rows(U[j]) * U[j] <= 32;
    const int chunk = small ? 32 : 64, nj = gu ? 1 : njobs;
    long long groups = 0;
    int idle = 0;
    for (int j = 0; j < nj; j++) {
        const int R = w_rows(U[j]);
        groups += (rows[j] + R - 1) / R;
        idle |= R * U[j] % chunk != 0;
    }
    return groups > nw && (idle || !small);
}

int dp_cu_matvec_q_init(int max_cols) {
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
    if (need > 48 * 1024)
        for (int rm = 0; rm < 2; rm++)
            for (int pp = 0; pp < 3; pp++)
                for (int gu = 0; gu < 2; gu++)
                    for (int i = 0; i < N_WFN; i++)
                        if (g_w_fn[rm][pp][gu][i])
                            CU_TRY(cudaFuncSetAttribute(g_w_fn[rm][pp][gu][i],
                                                        cudaFuncAttributeMaxDynamicSharedMemorySize, (int)need));
        for (int pp = 0; pp < 2; pp++)
            for (int gu = 0; gu < 2; gu++)
                for (int i = 0; i < N_WFN; i++)
                    if (g_l_fn[pp][gu][i])
                        CU_TRY(cudaFuncSetAttribute(g_l_fn[pp][gu][i], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                    (int)need));
    g_q_smem = need;
    return DP_OK;
}

int dp_cu_matvec_q(const MvLaunch *L, cudaStream_t st) {
    if (L->cols % 32 || L->njobs < 1 || L->njobs > 3 || (L->mode == MV_GATEUP && L->njobs != 2))
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: unsupported launch (cols %d, %d jobs)", L->cols, L->njobs);
    if (L->mode == MV_GATEUP && L->job[0].w.type != L->job[1].w.type)
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: gate and up differ in format");
    if (!g_nsm) {
        int rc = dp_cu_matvec_q_init(L->cols);
        if (rc) return rc;
    }
    for (int j = 0; j < L->njobs; j++)
        if (q_family(L->job[j].w.type) < 0 || L->job[j].w.cols != L->cols)
            return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: job %d (%s, %d columns) is not for the integer path", j,
                                dp_type_name(L->job[j].w.type), L->job[j].w.cols);
    for (int j = 0; j < L->njobs; j++) /* the loads' 32-bit offsets */
        if ((unsigned long long)L->job[j].w.rows * (unsigned long long)L->job[j].w.body_row >= (1ull << 32) ||
            (unsigned long long)L->job[j].w.rows * (unsigned long long)L->job[j].w.nblk >= (1ull << 31))
            return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: a %d x %d %s matrix of 4 GiB or more is not supported",
                                L->job[j].w.rows, L->job[j].w.cols, dp_type_name(L->job[j].w.type));
    MqArgs A;
    memset(&A, 0, sizeof A);
    A.L = *L;
    const size_t smem = q_layout(L, &A);
    if (smem > g_q_smem)
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: %d inputs exceed the prepared shared memory", L->cols);
    const int gu = L->mode == MV_GATEUP;
    /* km: every job Q4_K or Q6_K (W_KM); ix: IQ4_XS or Q5_K (W_IX); iqm: IQ2 / IQ3 formats, Q4_K or Q2_K
     * (W_IQM, where they differ); iq: one of them an IQ2 / IQ3 format */
    int same = 1, km = 1, ix = 1, iq = 0, iqm = 1;
    for (int j = 0; j < L->njobs; j++) {
        const DMat &W = L->job[j].w;
        A.U[j] = L->cols / q_unit(W.type);
        A.invU[j] = 1.0f / (float)A.U[j];
        A.R[j] = w_rows(A.U[j]);
        same &= W.type == L->job[0].w.type;
        km &= W.type == DP_TYPE_Q4_K || W.type == DP_TYPE_Q6_K;
        ix &= W.type == DP_TYPE_IQ4_XS || W.type == DP_TYPE_Q5_K;
        iq |= q_iq(W.type);
        iqm &= q_iq(W.type) || W.type == DP_TYPE_Q4_K || W.type == DP_TYPE_Q2_K;
    }
    /* A matrix with far more rows than warps (an LM head): rows per group and
     * pairs per lane that fill the lanes' chunks best (Gemma's 36-unit rows:
     * 4 rows in 5 chunks of 32 pairs, 90%, instead of a row in 64 slots, 56%:
     * faster decode on the Gemma-3-1B shape) */
    int wideP = 0;
    const int wide = !gu && L->njobs == 1 && (long long)L->job[0].w.rows >= 64LL * g_nsm * Q_WARPS;
    int lpr = 0, lp = 1;
    if (!wide) l_shape(L, &A, gu, (long long)g_nsm * 2 * Q_WARPS, &lpr, &lp); /* 2 CTAs an SM: __launch_bounds__ */
    if (lpr) {
        A.lshift = __builtin_ctz(lpr); /* lpr is 4, 8, 16 or 32 */
        for (int j = 0; j < L->njobs; j++) A.R[j] = 32 / lpr, A.NI[j] = l_steps(A.U[j], lpr, lp);
    }
    if (wide) {
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
    long long items = 0; /* k_matvec_l: (group, step) items */
    for (int j = 0; j < nj; j++) {
        A.istart[j] = (int)items;
        items += (long long)(A.gstart[j + 1] - A.gstart[j]) * A.NI[j];
    }
    if (lpr && items >= (1LL << 30))
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: a launch of %lld items is not supported", items);
    A.istart[nj] = (int)items;
    int small = 1; /* every group at most 32 pairs: one per lane, the same unit for every row */
    for (int j = 0; j < L->njobs; j++)
        if (A.R[j] * A.U[j] > 32) small = 0;
    const int P = wideP ? wideP : small ? 1 : 2;
    iqm &= iq && !same && !gu;
    int iqx = -1, iqk = iqm; /* iqk: one IQ format iqx beside Q4_K (W_IQK - iqx) */
    for (int j = 0; j < L->njobs; j++) {
        const int t = L->job[j].w.type;
        if (t == DP_TYPE_Q4_K) continue;
        if (q_iq(t) && (iqx < 0 || iqx == t)) iqx = t;
        else iqk = 0;
    }
    if (iq && !same && !iqm)
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: an IQ2 / IQ3 format beside %s, %s is not for the integer "
                            "path", dp_type_name(L->job[0].w.type), dp_type_name(L->job[L->njobs - 1].w.type));
    const int var = P == 1 && small && same && !iq ? 2 : P - 1; /* the IQ formats: no XR variant */
    int one_row = 1; /* every group one row: the RM = 1 kernels */
    for (int j = 0; j < L->njobs; j++) one_row &= A.R[j] == 1;
    const int fi = same  ? w_index(L->job[0].w.type)
                   : km  ? N_WT + 1
                   : ix  ? N_WT + 2
                   : iqk ? N_WT + 4 + w_index(iqx) - N_WIQ0
                   : iqm ? N_WT + 3
                         : N_WT;
    const MvwFn fn = lpr ? g_l_fn[lp - 1][gu][fi] : g_w_fn[one_row][var][gu][fi];
    /* as many CTAs as run at once, each warp looping over its groups: x is
     * staged once per CTA */
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
    const long long cap = (long long)g_nsm * bps;
    if (grid > cap) grid = cap;
    if (lpr) { /* whole groups per CTA, as many CTAs as run at once */
        A.Gc = (int)((g + cap - 1) / cap);
        grid = (g + A.Gc - 1) / A.Gc;
    }
    CU_TRY(dp_cu_launch(fn, dim3(grid < 1 ? 1 : (unsigned)grid), dim3(Q_THREADS), smem, st, A));
    return DP_OK;
}
