/* Decode attention over long contexts for grouped-query heads: k_attn_gqa.
 *
 * k_attn_split gives every query head its own CTAs, so the G query heads of
 * a KV head read the same K/V rows G times (from L2): at depth 4096 the
 * Qwen2.5-3B shape moves 32 MB through L2 per layer for 4 MB of cache, in
 * chains of dependent loads after griddepcontrol.wait. Here a CTA takes GH
 * query heads of one KV head (GH divides G) and one slice of the visible
 * keys, and reads each K/V row once:
 *
 * - before the wait it copies its slice's K and V rows (earlier steps wrote
 *   them) into shared memory with cp.async, up to GQ_KEYS rows at a time,
 *   and reads the q/k norm weights and its RoPE rotation, as k_attn_split;
 * - after it: the q/k norm and RoPE of its GH query heads and of this
 *   step's k, the K/V store of the new row (one CTA per KV head), then per
 *   tile of keys the scores (a warp per key: each lane holds HD / 32
 *   dimensions of the GH query vectors and of the key, the GH partial dots
 *   summed across the lanes by a transposing butterfly: 9 shuffles for 8
 *   heads instead of 40), an online softmax (a warp per head) and P.V (a
 *   warp per key, the GH accumulators in registers), the warps' partial
 *   outputs summed in a fixed order;
 * - the slices of a head group form thread-block clusters of CL CTAs
 *   (default 8); rank r combines heads r, r + CL, ... from every rank's
 *   (m, l, o) through distributed shared memory, in rank order, and with
 *   several clusters writes the cluster's (m, l, o), the last CTA of the
 *   head group to finish (atomic counter) combining those.
 *
 * Opt-in (DOPPLER_CUDA_ATTN_GQA=1) for decode steps whose context the
 * forward cuts into several slices (dp_cu_attention_slices > 1): correct
 * (doppler verify checks it), but not yet faster than k_attn_split in the
 * decode graph (BENCHMARKS.md, fifth session). DOPPLER_CUDA_ATTN_GQA_HEADS
 * caps GH (default 4). */
#include <math.h>
#include <cooperative_groups.h>
#include "kernels.cuh"

namespace cg = cooperative_groups;

enum { GQ_THREADS = 256, GQ_NW = GQ_THREADS / 32, GQ_TK = 256, GQ_U = 4 };

/* keys of K and V staged in shared memory at a time: 64 KB (two CTAs per SM) */
__host__ __device__ constexpr int gq_keys(int head_dim) { return head_dim >= 256 ? 64 : 128; }

template <int DPL> struct GqVec;
template <> struct GqVec<2> { typedef unsigned int T; };
template <> struct GqVec<4> { typedef uint2 T; };
template <> struct GqVec<8> { typedef uint4 T; };

template <int DPL> __device__ __forceinline__ void gq_h2f(const typename GqVec<DPL>::T &raw, float *f) {
    const __half2 *h2 = (const __half2 *)&raw;
#pragma unroll
    for (int e = 0; e < DPL / 2; e++) {
        const float2 t = __half22float2(h2[e]);
        f[2 * e] = t.x, f[2 * e + 1] = t.y;
    }
}

/* One halving step of the butterfly: lanes with bit o set keep the upper H
 * values, the others the lower, each adding its partner's copy. */
template <int H> __device__ __forceinline__ void gq_fold(float *v, int o, int lane) {
    const bool up = lane & o;
#pragma unroll
    for (int i = 0; i < H; i++) {
        const float send = up ? v[i] : v[i + H], keep = up ? v[i + H] : v[i];
        v[i] = keep + __shfl_xor_sync(FULL_MASK, send, o);
    }
}
/* The sums over the warp of GT per-lane values: lane ends with the sum of
 * value gq_head<GT>(lane). */
template <int GT> __device__ __forceinline__ float gq_reduce(float *v, int lane) {
    int o = 16;
    if (GT >= 8) gq_fold<4>(v, o, lane), o >>= 1;
    if (GT >= 4) gq_fold<2>(v, o, lane), o >>= 1;
    if (GT >= 2) gq_fold<1>(v, o, lane), o >>= 1;
    float s = v[0];
#pragma unroll
    for (; o >= 1; o >>= 1) s += __shfl_xor_sync(FULL_MASK, s, o);
    return s;
}
template <int GT> __device__ __forceinline__ int gq_head(int lane) {
    return GT == 8 ? ((lane >> 4) & 1) * 4 + ((lane >> 3) & 1) * 2 + ((lane >> 2) & 1)
         : GT == 4 ? ((lane >> 4) & 1) * 2 + ((lane >> 3) & 1)
         : GT == 2 ? (lane >> 4) & 1 : 0;
}

__device__ __forceinline__ void gq_cp16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
}

/* DPL: dimensions per lane (head_dim / 32); GT: query heads per CTA (GH) */
template <int DPL, int GT>
__global__ void __launch_bounds__(GQ_THREADS) k_attn_gqa(const AttnLaunch A) {
    pdl_trigger();
    constexpr int HD = 32 * DPL, NKS = gq_keys(HD), CPR = HD / 8; /* 16-byte pieces per row */
    typedef typename GqVec<DPL>::T LT;
    extern __shared__ __align__(16) uint4 gq_dyn[];
    __half *Ks = (__half *)gq_dyn, *Vs = Ks + (size_t)NKS * HD;
    __shared__ __align__(16) float qs[GT * HD], kn[HD], vn[HD], o_s[GT * HD];
    __shared__ __align__(16) float big[GQ_NW * GT * HD]; /* the scores [GT][GQ_TK], then the warps' outputs */
    __shared__ __align__(16) __half knh[HD], vnh[HD];
    __shared__ float m_s[GT], l_s[GT], al_s[GT];
    static_assert(GQ_NW * HD >= GQ_TK, "scores fit in big");
    cg::cluster_group cl = cg::this_cluster();
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int G = A.n_head / A.n_head_kv, h0 = blockIdx.x * GT, g = h0 / G, KV = A.n_head_kv * HD;
    /* S slices; clusters of CL of them along y */
    const int S = gridDim.y, s = blockIdx.y, CL = (int)cl.dim_blocks().y, rank = s % CL, ci = s / CL, NCL = S / CL;
    const int p = *A.pos0; /* written by the graph's input copy, before any kernel */
    const int vlo = A.window > 0 && p - A.window + 1 > 0 ? p - A.window + 1 : 0;
    const int vhi = A.exclude_self && p > 0 ? p - 1 : p;
    const int nk = vhi - vlo + 1, csz = (nk + S - 1) / S;
    const int lo = vlo + s * csz, hi = min(lo + csz, vhi + 1) - 1; /* empty when lo > hi */
    const __half *kb = A.k + (size_t)g * HD, *vb = A.v + (size_t)g * HD;
    /* the first NKS rows of the slice into shared memory while the previous kernel runs */
    auto stage = [&](int t0, int tk) {
        for (int i = tid; i < tk * CPR; i += GQ_THREADS) {
            const int r = i / CPR, c = i - r * CPR;
            gq_cp16(Ks + (size_t)r * HD + c * 8, kb + (size_t)(t0 + r) * KV + c * 8);
            gq_cp16(Vs + (size_t)r * HD + c * 8, vb + (size_t)(t0 + r) * KV + c * 8);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };
    if (lo <= hi) stage(lo, min(NKS, hi - lo + 1));
    float nq[DPL], nkw[DPL];
    float2 cs0 = make_float2(1.0f, 0.0f);
    if (A.rope) {
        if (A.q_norm)
#pragma unroll
            for (int k = 0; k < DPL; k++) {
                nq[k] = __fadd_rn(__ldg(A.q_norm + lane + 32 * k), A.norm_off);
                nkw[k] = __fadd_rn(__ldg(A.k_norm + lane + 32 * k), A.norm_off);
            }
        if (tid < A.n_rot / 2) cs0 = rope_cs(tid, A.inv_freq, p);
    }
    if (tid < GT) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;
    pdl_wait();
    const int pnew = A.rope ? p : -1;
    for (int i = tid; i < GT * HD; i += GQ_THREADS) qs[i] = A.q[(size_t)h0 * HD + i];
    if (A.rope)
        for (int i = tid; i < HD; i += GQ_THREADS) kn[i] = A.kf[(size_t)g * HD + i], vn[i] = A.vf[(size_t)g * HD + i];
    __syncthreads();
    if (A.rope) {
        if (A.q_norm) { /* vector vi: query head vi, or this step's k (vi == GT) */
            for (int vi = warp; vi <= GT; vi += GQ_NW) {
                float *vec = vi == GT ? kn : qs + vi * HD;
                const float scv = warp_rms_scale(vec, HD, A.eps);
#pragma unroll
                for (int k = 0; k < DPL; k++) vec[lane + 32 * k] = vec[lane + 32 * k] * scv * (vi == GT ? nkw[k] : nq[k]);
            }
            __syncthreads();
        }
        for (int j = tid; j < A.n_rot / 2; j += GQ_THREADS) {
            const float2 cs = j == tid ? cs0 : rope_cs(j, A.inv_freq, p);
            for (int hh = 0; hh < GT; hh++) rope_pair_cs(qs + hh * HD, j, A.n_rot, A.neox, cs);
            rope_pair_cs(kn, j, A.n_rot, A.neox, cs);
        }
        __syncthreads();
        for (int d = tid; d < HD; d += GQ_THREADS) {
            const __half kh = __float2half_rn(kn[d]), vh = __float2half_rn(vn[d]);
            if (h0 % G == 0 && s == 0) {
                ((__half *)A.k)[(size_t)p * KV + (size_t)g * HD + d] = kh;
                ((__half *)A.v)[(size_t)p * KV + (size_t)g * HD + d] = vh;
            }
            knh[d] = kh, vnh[d] = vh;
        }
        __syncthreads();
    }
    float qv[GT][DPL], acc[GT][DPL];
#pragma unroll
    for (int gg = 0; gg < GT; gg++)
#pragma unroll
        for (int e = 0; e < DPL; e++) qv[gg][e] = qs[gg * HD + lane * DPL + e], acc[gg][e] = 0.0f;

    float *sc = big;
    for (int b0 = lo; b0 <= hi; b0 += NKS) { /* the slice in stages of NKS keys */
        const int nb = min(NKS, hi - b0 + 1);
        if (b0 != lo) {
            __syncthreads(); /* the previous stage is read */
            stage(b0, nb);
        }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncthreads();
        for (int t0 = 0; t0 < nb; t0 += GQ_TK) {
            const int tk = min(GQ_TK, nb - t0);
            /* scores: warp w takes keys w, w + 8, ... of the tile, GQ_U at a
             * time (independent butterflies interleave) */
            for (int k0 = warp; k0 < tk; k0 += GQ_U * GQ_NW) {
                float part[GQ_U][GT], sv[GQ_U];
#pragma unroll
                for (int u = 0; u < GQ_U; u++) {
                    const int kk = k0 + u * GQ_NW, r = t0 + kk;
                    const LT raw = kk >= tk ? LT() : b0 + r == pnew ? *(const LT *)(knh + lane * DPL)
                                                                    : *(const LT *)(Ks + (size_t)r * HD + lane * DPL);
                    float kf[DPL];
                    gq_h2f<DPL>(raw, kf);
#pragma unroll
                    for (int gg = 0; gg < GT; gg++) {
                        float d = 0.0f;
#pragma unroll
                        for (int e = 0; e < DPL; e++) d = fmaf(qv[gg][e], kf[e], d);
                        part[u][gg] = d;
                    }
                }
#pragma unroll
                for (int u = 0; u < GQ_U; u++) sv[u] = gq_reduce<GT>(part[u], lane) * A.scale;
                const int hh = gq_head<GT>(lane);
#pragma unroll
                for (int u = 0; u < GQ_U; u++)
                    if (k0 + u * GQ_NW < tk && !(lane & (32 / GT - 1))) sc[hh * GQ_TK + k0 + u * GQ_NW] = sv[u];
            }
            __syncthreads();
            /* online softmax, a warp per head */
            if (warp < GT) {
                float mx = -INFINITY;
                for (int kk = lane; kk < tk; kk += 32) mx = fmaxf(mx, sc[warp * GQ_TK + kk]);
                mx = warp_max(mx);
                const float m_old = m_s[warp], m_new = fmaxf(m_old, mx);
                float ls = 0.0f;
                for (int kk = lane; kk < tk; kk += 32) {
                    const float e = expf(sc[warp * GQ_TK + kk] - m_new);
                    sc[warp * GQ_TK + kk] = e;
                    ls += e;
                }
                ls = warp_sum(ls);
                __syncwarp();
                if (lane == 0) {
                    const float al = expf(m_old - m_new);
                    al_s[warp] = al, l_s[warp] = l_s[warp] * al + ls, m_s[warp] = m_new;
                }
            }
            __syncthreads();
#pragma unroll
            for (int gg = 0; gg < GT; gg++) {
                const float al = al_s[gg];
#pragma unroll
                for (int e = 0; e < DPL; e++) acc[gg][e] *= al;
            }
            for (int k0 = warp; k0 < tk; k0 += GQ_U * GQ_NW) {
                LT raw[GQ_U];
#pragma unroll
                for (int u = 0; u < GQ_U; u++) {
                    const int kk = k0 + u * GQ_NW, r = t0 + kk;
                    raw[u] = kk >= tk ? LT() : b0 + r == pnew ? *(const LT *)(vnh + lane * DPL)
                                                              : *(const LT *)(Vs + (size_t)r * HD + lane * DPL);
                }
#pragma unroll
                for (int u = 0; u < GQ_U; u++) {
                    const int kk = k0 + u * GQ_NW;
                    if (kk >= tk) break;
                    float vf[DPL];
                    gq_h2f<DPL>(raw[u], vf);
#pragma unroll
                    for (int gg = 0; gg < GT; gg++) {
                        const float w = sc[gg * GQ_TK + kk];
#pragma unroll
                        for (int e = 0; e < DPL; e++) acc[gg][e] = fmaf(w, vf[e], acc[gg][e]);
                    }
                }
            }
            __syncthreads(); /* sc is rewritten by the next tile */
        }
    }
    /* the warps' partial outputs, summed in warp order */
#pragma unroll
    for (int gg = 0; gg < GT; gg++)
#pragma unroll
        for (int e = 0; e < DPL; e++) big[(warp * GT + gg) * HD + lane * DPL + e] = acc[gg][e];
    __syncthreads();
    for (int i = tid; i < GT * HD; i += GQ_THREADS) {
        const int hh = i / HD, d = i - hh * HD;
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < GQ_NW; w++) o += big[(w * GT + hh) * HD + d];
        o_s[i] = o;
    }
    cl.sync();
    /* rank r combines heads r, r + CL, ... over the cluster's ranks, in rank
     * order: the output (one cluster), or the cluster's (m, l, o) */
    float *part_o = A.part, *part_ml = A.part + (size_t)A.n_head * NCL * HD;
    const int mine = rank < GT ? (GT - rank + CL - 1) / CL : 0;
    for (int i = tid; i < mine * HD; i += GQ_THREADS) {
        const int hh = rank + (i / HD) * CL, d = i % HD;
        float M = -INFINITY;
        for (int r = 0; r < CL; r++) M = fmaxf(M, cl.map_shared_rank(m_s, r)[hh]);
        float L = 0.0f, O = 0.0f;
        for (int r = 0; r < CL && M > -INFINITY; r++) { /* a cluster of empty slices: m = -inf, l = o = 0 */
            const float w = expf(cl.map_shared_rank(m_s, r)[hh] - M); /* an empty slice: m = -inf, w = 0 */
            L = fmaf(w, cl.map_shared_rank(l_s, r)[hh], L);
            O = fmaf(w, cl.map_shared_rank(o_s, r)[hh * HD + d], O);
        }
        const size_t row = (size_t)(h0 + hh) * NCL + ci;
        if (NCL == 1) A.out[(size_t)(h0 + hh) * HD + d] = O / L;
        else {
            part_o[row * HD + d] = O;
            if (d == 0) part_ml[2 * row] = M, part_ml[2 * row + 1] = L;
        }
    }
    cl.sync(); /* the other ranks have read this one's shared memory */
    if (NCL == 1) return;
    /* the last CTA of the head group to finish combines the clusters */
    __shared__ int last_s;
    __threadfence();
    __syncthreads();
    if (tid == 0) last_s = atomicAdd(&A.counters[blockIdx.x], 1) == S - 1;
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    for (int i = tid; i < GT * HD; i += GQ_THREADS) {
        const int hh = i / HD, d = i % HD;
        const size_t row0 = (size_t)(h0 + hh) * NCL;
        float M = -INFINITY;
        for (int c = 0; c < NCL; c++) M = fmaxf(M, __ldcg(part_ml + 2 * (row0 + c)));
        float L = 0.0f, O = 0.0f;
        for (int c = 0; c < NCL; c++) {
            const float w = expf(__ldcg(part_ml + 2 * (row0 + c)) - M);
            L = fmaf(w, __ldcg(part_ml + 2 * (row0 + c) + 1), L);
            O = fmaf(w, __ldcg(part_o + (row0 + c) * HD + d), O);
        }
        A.out[(size_t)(h0 + hh) * HD + d] = O / L;
    }
    if (tid == 0) A.counters[blockIdx.x] = 0;
}

/* ------------------------------------------------------------- launch */

/* off by default: measured on the H200 at depth 4096 (BENCHMARKS.md, fifth
 * session) it is not faster than k_attn_split inside the decode graph */
static int g_gqa = [] {
    const char *e = getenv("DOPPLER_CUDA_ATTN_GQA");
    return e && *e == '1';
}();
static int g_gqa_heads = [] {
    const char *e = getenv("DOPPLER_CUDA_ATTN_GQA_HEADS");
    return e && *e ? atoi(e) : 0;
}();
/* slices: DOPPLER_CUDA_ATTN_GQA_MUL times k_attn_split's (default 2), in
 * clusters of DOPPLER_CUDA_ATTN_GQA_CL (default 8, at most 16) */
static int g_gqa_mul = [] {
    const char *e = getenv("DOPPLER_CUDA_ATTN_GQA_MUL");
    const int v = e && *e ? atoi(e) : 2;
    return v == 1 || v == 2 || v == 4 || v == 8 ? v : 2;
}();
static int g_gqa_cl = [] {
    const char *e = getenv("DOPPLER_CUDA_ATTN_GQA_CL");
    const int v = e && *e ? atoi(e) : 8;
    return v == 1 || v == 2 || v == 4 || v == 8 || v == 16 ? v : 8;
}();

typedef void (*GqaFn)(const AttnLaunch);

int dp_cu_attn_gqa(const AttnLaunch *A, cudaStream_t st, int *taken) {
    *taken = 0;
    const int HD = A->head_dim;
    if (!(A->gqa ? A->gqa > 0 : g_gqa) || A->n != 1 || A->slices < 2 || (HD != 64 && HD != 128 && HD != 256)) return DP_OK;
    /* GH query heads per CTA: 2, 4 or 8 (at most 32 / (head_dim / 32) for
     * the registers, at most DOPPLER_CUDA_ATTN_GQA_HEADS, default 4) dividing G */
    const int G = A->n_head / A->n_head_kv, DPL = HD / 32;
    const int cap = g_gqa_heads > 0 ? g_gqa_heads : 4;
    int GH = 0;
    for (int d = 2; d <= 8; d *= 2)
        if (G % d == 0 && d <= cap && d * DPL <= 32) GH = d;
    if (!GH) return DP_OK; /* nothing shared: k_attn_split */
    /* a power of two of slices, at most the scratch's (A->splits) and 64 */
    int S = A->slices * g_gqa_mul;
    while (S > 64 || (S > 1 && S > A->splits)) S /= 2;
    const int CL = S < g_gqa_cl ? S : g_gqa_cl;
    const int di = DPL == 2 ? 0 : DPL == 4 ? 1 : 2, gi = GH == 2 ? 0 : GH == 4 ? 1 : 2;
    static const GqaFn fns[3][3] = {{k_attn_gqa<2, 2>, k_attn_gqa<2, 4>, k_attn_gqa<2, 8>},
                                    {k_attn_gqa<4, 2>, k_attn_gqa<4, 4>, k_attn_gqa<4, 8>},
                                    {k_attn_gqa<8, 2>, k_attn_gqa<8, 4>, NULL}};
    const GqaFn fn = fns[di][gi];
    const size_t dyn = 2 * (size_t)gq_keys(HD) * HD * sizeof(__half);
    static bool ready[3][3];
    if (!ready[di][gi]) {
        CU_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        CU_TRY(cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        ready[di][gi] = true;
    }
    cudaLaunchAttribute attr[2];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1, attr[0].val.clusterDim.y = CL, attr[0].val.clusterDim.z = 1;
    attr[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[1].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(A->n_head / GH, S);
    cfg.blockDim = dim3(GQ_THREADS);
    cfg.dynamicSmemBytes = dyn;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = dp_cu_pdl ? 2 : 1;
    CU_TRY(cudaLaunchKernelEx(&cfg, fn, *A));
    *taken = 1;
    return DP_OK;
}
