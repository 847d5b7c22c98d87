/* Attention over the f16 KV cache, split-K ("flash decoding").
 *
 * Grid (split, kv head, query). A CTA takes one query position, the G query
 * heads that share one KV head, and one contiguous slice of that query's
 * visible keys (causal, optionally a sliding window). It walks its slice in
 * tiles of 64 keys: the tile's K and V rows are copied to shared memory with
 * asynchronous 16-byte copies (cp.async, all in flight at once, so a tile
 * costs one memory latency), then the scores, an online softmax (running
 * max m and sum l) and the unnormalised output are computed from shared
 * memory. Rows are padded by 16 bytes so that reading one row per thread
 * hits distinct banks. Each CTA writes (m, l, o) for its slice; the last CTA
 * of a (query, kv head) to finish (an atomic counter, reset by that CTA)
 * combines the slices. With a single slice the CTA writes the output
 * directly. The number of slices adapts to the number of keys (at least
 * min_keys each, at most splits), read on the device, so a decode step
 * captured once in a CUDA graph stays valid at every position. */
#include <math.h>

#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include "kernels.cuh"

namespace cg = cooperative_groups;

enum { TK = 64, ATT_THREADS = 256 };

struct AttnGeom {
    int G, nchunk, parts; /* output chunks of 8 dims; threads per chunk (split over keys) */
    int kv_off; /* float offset of the K/V tiles in shared memory (16-byte aligned) */
};

/* The steps of one tile of keys, shared by k_attention and k_attn_dec. K and
 * V rows sit in shared memory HD + 8 halves apart. */

/* The tile's K and V rows (keys t0 .. t0+tk-1) into shared memory with
 * 16-byte asynchronous copies, all in flight at once; waits for them. */
__device__ __forceinline__ void tile_load(__half *ks, __half *vs, const __half *kbase, const __half *vbase, int t0,
                                          int tk, int KV, int HD) {
    const int HDP = HD + 8, CPR = HD / 8; /* 16-byte chunks per row */
    for (int idx = threadIdx.x; idx < tk * CPR; idx += ATT_THREADS) {
        const int row = idx / CPR, c = idx - row * CPR;
        const size_t gofs = (size_t)(t0 + row) * KV + c * 8;
        __pipeline_memcpy_async(ks + row * HDP + c * 8, kbase + gofs, 16);
        __pipeline_memcpy_async(vs + row * HDP + c * 8, vbase + gofs, 16);
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
}

/* sc[h][k] = scale * q_h . k_k: one (head, key) pair per thread. */
__device__ __forceinline__ void tile_scores(const float *qs, const __half *ks, float *sc, int G, int tk, int HD,
                                            float scale) {
    const int HDP = HD + 8, CPR = HD / 8;
    for (int pr = threadIdx.x; pr < G * tk; pr += ATT_THREADS) {
        const int hh = pr / tk, kk = pr - hh * tk;
        const float4 *q4 = (const float4 *)(qs + hh * HD);
        const uint4 *k4 = (const uint4 *)(ks + kk * HDP);
        float dot = 0.0f;
        for (int c = 0; c < CPR; c++) {
            uint4 raw = k4[c];
            const __half2 *h2 = (const __half2 *)&raw;
            float4 a = q4[2 * c], b = q4[2 * c + 1];
            float2 f0 = __half22float2(h2[0]), f1 = __half22float2(h2[1]), f2 = __half22float2(h2[2]),
                   f3 = __half22float2(h2[3]);
            dot = fmaf(a.x, f0.x, dot);
            dot = fmaf(a.y, f0.y, dot);
            dot = fmaf(a.z, f1.x, dot);
            dot = fmaf(a.w, f1.y, dot);
            dot = fmaf(b.x, f2.x, dot);
            dot = fmaf(b.y, f2.y, dot);
            dot = fmaf(b.z, f3.x, dot);
            dot = fmaf(b.w, f3.y, dot);
        }
        sc[hh * TK + kk] = dot * scale;
    }
}

/* Online softmax update, one warp per head: the tile's scores become
 * exp(s - m_new); m, l and the rescale factor alpha of each head updated. */
__device__ __forceinline__ void tile_softmax(float *sc, float *m_s, float *l_s, float *al_s, int G, int tk) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = ATT_THREADS / 32;
    for (int hh = warp; hh < G; hh += nwarps) {
        float mt = -INFINITY;
        for (int kk = lane; kk < tk; kk += 32) mt = fmaxf(mt, sc[hh * TK + kk]);
        mt = warp_max(mt);
        const float m_old = m_s[hh], m_new = fmaxf(m_old, mt);
        float ls = 0.0f;
        for (int kk = lane; kk < tk; kk += 32) {
            float e = expf(sc[hh * TK + kk] - m_new);
            sc[hh * TK + kk] = e;
            ls += e;
        }
        ls = warp_sum(ls);
        if (lane == 0) {
            const float alpha = expf(m_old - m_new);
            al_s[hh] = alpha;
            l_s[hh] = l_s[hh] * alpha + ls;
            m_s[hh] = m_new;
        }
    }
}

/* acc (8 dims c_dc.. of head c_hh) = acc * alpha + sum over this thread's keys
 * (part, part + parts, ...) of weight * V row. */
__device__ __forceinline__ void tile_pv(float *acc, const float *sc, const __half *vs, const float *al_s, int c_hh,
                                        int c_dc, int part, int parts, int tk, int HD) {
    const int HDP = HD + 8;
    const float alpha = al_s[c_hh];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] *= alpha;
    const float *pw = sc + c_hh * TK;
    for (int kk = part; kk < tk; kk += parts) {
        uint4 raw = *(const uint4 *)(vs + kk * HDP + c_dc);
        const __half2 *h2 = (const __half2 *)&raw;
        const float w = pw[kk];
#pragma unroll
        for (int e = 0; e < 4; e++) {
            float2 f = __half22float2(h2[e]);
            acc[2 * e] = fmaf(w, f.x, acc[2 * e]);
            acc[2 * e + 1] = fmaf(w, f.y, acc[2 * e + 1]);
        }
    }
}

/* The key-parts of each output chunk summed into part 0's acc, through
 * shared memory (red: the K tile, free by now); every thread calls it. */
__device__ __forceinline__ void sum_parts(float *acc, float *red, bool owner, int part, int parts, int nchunk, int ci) {
    if (owner && part > 0)
#pragma unroll
        for (int e = 0; e < 8; e++) red[((part - 1) * nchunk + ci) * 8 + e] = acc[e];
    __syncthreads();
    if (owner && part == 0)
        for (int p2 = 1; p2 < parts; p2++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] += red[((p2 - 1) * nchunk + ci) * 8 + e];
}

__global__ void __launch_bounds__(ATT_THREADS) k_attention(const AttnLaunch A, const AttnGeom geo) {
    pdl_trigger();
    pdl_wait();
    extern __shared__ float sm[];
    const int HD = A.head_dim, G = geo.G, HDP = HD + 8; /* padded row, in halves */
    const int s = blockIdx.x, g = blockIdx.y, z = blockIdx.z;
    const int Q = A.n_head * HD, KV = A.n_head_kv * HD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = ATT_THREADS / 32;
    float *qs = sm;                 /* G * HD */
    float *sc = qs + G * HD;        /* G * TK */
    float *m_s = sc + G * TK;       /* G */
    float *l_s = m_s + G;           /* G */
    float *al_s = l_s + G;          /* G */
    __half *ks = (__half *)(sm + geo.kv_off), *vs = ks + TK * HDP;
    __shared__ int last_s;

    const int p = *A.pos0 + z;
    const int lo = A.window > 0 && p - A.window + 1 > 0 ? p - A.window + 1 : 0;
    const int hi = A.exclude_self && p > 0 ? p - 1 : p;
    const int nk = hi - lo + 1;
    int S = (nk + A.min_keys - 1) / A.min_keys;
    if (S > A.splits) S = A.splits;
    if (S < 1) S = 1;
    if (s >= S) return;
    const int csz = (nk + S - 1) / S;
    const int start = lo + s * csz;
    const int end = min(start + csz, hi + 1);

    for (int i = tid; i < G * HD; i += ATT_THREADS) qs[i] = A.q[(size_t)z * Q + (size_t)g * G * HD + i];
    for (int i = tid; i < G; i += ATT_THREADS) {
        m_s[i] = -INFINITY;
        l_s[i] = 0.0f;
    }
    /* output ownership: chunk ci of 8 dims, keys kk = part (mod parts) */
    const int ci = tid % geo.nchunk, part = tid / geo.nchunk;
    const bool owner = part < geo.parts;
    const int c_hh = ci / (HD / 8), c_dc = (ci % (HD / 8)) * 8;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;

    const __half *kbase = A.k + (size_t)g * HD, *vbase = A.v + (size_t)g * HD;
    for (int t0 = start; t0 < end; t0 += TK) {
        const int tk = min(TK, end - t0);
        /* the tile's K and V rows into shared memory, all copies in flight */
        tile_load(ks, vs, kbase, vbase, t0, tk, KV, HD);
        __syncthreads();
        /* scores: one (head, key) pair per thread */
        tile_scores(qs, ks, sc, G, tk, HD, A.scale);
        __syncthreads();
        /* online softmax update, one warp per head */
        tile_softmax(sc, m_s, l_s, al_s, G, tk);
        __syncthreads();
        /* output: each owner accumulates its chunk over its share of the keys */
        if (owner) tile_pv(acc, sc, vs, al_s, c_hh, c_dc, part, geo.parts, tk, HD);
        __syncthreads();
    }

    /* sum the key-parts of each chunk (through shared memory, over the K tile) */
    if (geo.parts > 1) sum_parts(acc, (float *)ks, owner, part, geo.parts, geo.nchunk, ci);
    const bool writer = owner && part == 0;
    if (S == 1) {
        if (writer) {
            const float inv = 1.0f / l_s[c_hh];
            float *o = A.out + (size_t)z * Q + (size_t)(g * G + c_hh) * HD + c_dc;
#pragma unroll
            for (int e = 0; e < 8; e++) o[e] = acc[e] * inv;
        }
        return;
    }

    /* write this slice's partial result */
    const int NH = A.n_head, SP = A.splits;
    float *part_o = A.part, *part_ml = A.part + (size_t)A.n * NH * SP * HD;
    if (writer) {
        float4 *o = (float4 *)(part_o + (((size_t)z * NH + g * G + c_hh) * SP + s) * HD + c_dc);
        o[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
        o[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    }
    for (int hh = tid; hh < G; hh += ATT_THREADS) {
        float *ml = part_ml + (((size_t)z * NH + g * G + hh) * SP + s) * 2;
        ml[0] = m_s[hh];
        ml[1] = l_s[hh];
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last_s = atomicAdd(&A.counters[z * A.n_head_kv + g], 1) == S - 1;
    __syncthreads();
    if (!last_s) return;
    __threadfence();

    /* combine the S slices: weights w_s = exp(m_s - M) / L into sc */
    float *wts = sc; /* G * S <= G * TK since S <= splits <= TK */
    for (int hh = warp; hh < G; hh += nwarps) {
        const float *ml = part_ml + ((size_t)z * NH + g * G + hh) * SP * 2;
        float ms = lane < S ? __ldcg(ml + 2 * lane) : -INFINITY;
        float ls = lane < S ? __ldcg(ml + 2 * lane + 1) : 0.0f;
        float ms2 = lane + 32 < S ? __ldcg(ml + 2 * (lane + 32)) : -INFINITY;
        float ls2 = lane + 32 < S ? __ldcg(ml + 2 * (lane + 32) + 1) : 0.0f;
        const float M = warp_max(fmaxf(ms, ms2));
        const float w1 = lane < S ? expf(ms - M) : 0.0f, w2 = lane + 32 < S ? expf(ms2 - M) : 0.0f;
        const float L = warp_sum(w1 * ls + w2 * ls2);
        if (lane < S) wts[hh * TK + lane] = w1 / L;
        if (lane + 32 < S) wts[hh * TK + lane + 32] = w2 / L;
    }
    __syncthreads();
    const int HD4 = HD / 4;
    for (int e = tid; e < G * HD4; e += ATT_THREADS) {
        const int hh = e / HD4, d4 = e % HD4;
        const float4 *po = (const float4 *)(part_o + ((size_t)z * NH + g * G + hh) * SP * HD) + d4;
        const float *w = wts + hh * TK;
        float4 o = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 16
        for (int k = 0; k < S; k++) {
            const float4 v = __ldcg(po + (size_t)k * HD4);
            o.x = fmaf(w[k], v.x, o.x);
            o.y = fmaf(w[k], v.y, o.y);
            o.z = fmaf(w[k], v.z, o.z);
            o.w = fmaf(w[k], v.w, o.w);
        }
        *(float4 *)(A.out + (size_t)z * Q + (size_t)(g * G + hh) * HD + d4 * 4) = o;
    }
    if (tid == 0) A.counters[z * A.n_head_kv + g] = 0;
}

/* ------------------------------------------------------------------------
 * Decode (one query) in clusters of 8 CTAs.
 *
 * Grid (S, n_head_kv), S a multiple of 8; cluster c = splits 8c .. 8c+7. The
 * visible keys are cut into slices of at least min_keys (read on the device,
 * so a graph captured once stays valid); CTAs and clusters past the last
 * slice have nothing to do. A CTA computes its slice as k_attention does and
 * keeps (m, l, o) in its shared memory; the 8 CTAs of a cluster then combine
 * them through distributed shared memory, each CTA one eighth of the
 * outputs. With one active cluster (up to 8 slices) that is the result;
 * otherwise each cluster writes its combination and the last CTA to finish
 * (atomic counter) combines those, at most S / 8 of them.
 *
 * With A.rope the kernel also does what dp_cu_qk_rope_store does for this
 * step (q/k RMSNorm, RoPE, the K/V store): every CTA rotates the q heads it
 * needs and this step's k; the CTA whose slice holds the new position puts
 * the new k/v into its tile and writes them to the cache. */
enum { DEC_CL = 8, DEC_MAX_SPLITS = DEC_CL * 32 }; /* the final combine: a lane per cluster */

__global__ void __cluster_dims__(DEC_CL, 1, 1) __launch_bounds__(ATT_THREADS)
    k_attn_dec(const AttnLaunch A, const AttnGeom geo) {
    pdl_trigger();
    pdl_wait();
    extern __shared__ float sm[];
    cg::cluster_group cl = cg::this_cluster();
    const int HD = A.head_dim, G = geo.G, HDP = HD + 8;
    const int s = blockIdx.x, g = blockIdx.y, rank = (int)cl.block_rank(), cidx = s / DEC_CL;
    const int KV = A.n_head_kv * HD, S = gridDim.x, Cmax = S / DEC_CL;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = ATT_THREADS / 32;
    float *qs = sm;                 /* G * HD */
    float *sc = qs + G * HD;        /* G * TK */
    float *m_s = sc + G * TK;       /* G */
    float *l_s = m_s + G;           /* G */
    float *al_s = l_s + G;          /* G */
    float *po = al_s + G;           /* G * HD: this CTA's unnormalised output */
    float *kn = po + G * HD;        /* HD: this step's k (rope) */
    float *vn = kn + HD;            /* HD */
    /* then 8 floats of padding */
    __half *ks = (__half *)(sm + geo.kv_off), *vs = ks + TK * HDP;
    __shared__ int last_s;

    const int p = *A.pos0;
    const int lo = A.window > 0 && p - A.window + 1 > 0 ? p - A.window + 1 : 0;
    const int hi = A.exclude_self && p > 0 ? p - 1 : p;
    const int nk = hi - lo + 1;
    int csz = (nk + S - 1) / S;
    if (csz < A.min_keys) csz = A.min_keys;
    const int Sa = (nk + csz - 1) / csz, Ca = (Sa + DEC_CL - 1) / DEC_CL;
    if (cidx >= Ca) return; /* the whole cluster is idle */
    const int start = lo + s * csz;
    const int end = min(start + csz, hi + 1); /* empty past the last slice */

    for (int i = tid; i < G * HD; i += ATT_THREADS) qs[i] = A.q[(size_t)g * G * HD + i];
    for (int i = tid; i < G; i += ATT_THREADS) {
        m_s[i] = -INFINITY;
        l_s[i] = 0.0f;
    }
    const bool has_p = p >= start && p < end;
    if (A.rope) {
        for (int i = tid; i < HD; i += ATT_THREADS) {
            kn[i] = A.kf[(size_t)g * HD + i];
            vn[i] = A.vf[(size_t)g * HD + i];
        }
        __syncthreads();
        const int half = A.n_rot / 2;
        if (A.q_norm) {
            /* G + 1 vectors (the q heads, then k), one warp each, no block syncs */
            for (int hv = warp; hv <= G; hv += nwarps) {
                float *vec = hv < G ? qs + hv * HD : kn;
                const float *nw = hv < G ? A.q_norm : A.k_norm;
                const float scv = warp_rms_scale(vec, HD, A.eps);
                for (int d = lane; d < HD; d += 32) vec[d] = vec[d] * scv * (nw[d] + A.norm_off);
            }
            __syncthreads();
        }
        /* the rotations once (in po, free until the end), then every vector */
        float *rc = po, *rs = po + half; /* po holds G * HD >= n_rot floats */
        for (int i = tid; i < half; i += ATT_THREADS) {
            const float2 cs = rope_cs(i, A.inv_freq, p);
            rc[i] = cs.x, rs[i] = cs.y;
        }
        __syncthreads();
        for (int i = tid; i < (G + 1) * half; i += ATT_THREADS) {
            const int hv = i / half, j = i - hv * half;
            rope_pair_cs(hv < G ? qs + hv * HD : kn, j, A.n_rot, A.neox, make_float2(rc[j], rs[j]));
        }
        __syncthreads();
        if (has_p || (p > hi && s == 0)) { /* the new row into the cache */
            __half *kc = (__half *)A.k, *vc = (__half *)A.v;
            for (int d = tid; d < HD; d += ATT_THREADS) {
                kc[(size_t)p * KV + (size_t)g * HD + d] = __float2half_rn(kn[d]);
                vc[(size_t)p * KV + (size_t)g * HD + d] = __float2half_rn(vn[d]);
            }
        }
    }
    const int ci = tid % geo.nchunk, part = tid / geo.nchunk;
    const bool owner = part < geo.parts;
    const int c_hh = ci / (HD / 8), c_dc = (ci % (HD / 8)) * 8;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;

    const __half *kbase = A.k + (size_t)g * HD, *vbase = A.v + (size_t)g * HD;
    for (int t0 = start; t0 < end; t0 += TK) {
        const int tk = min(TK, end - t0);
        __syncthreads(); /* the previous tile is consumed (and qs, m_s, l_s are set) */
        tile_load(ks, vs, kbase, vbase, t0, tk, KV, HD);
        __syncthreads();
        if (A.rope && p >= t0 && p < t0 + tk) { /* this step's row, fresh */
            const int row = p - t0;
            for (int d = tid; d < HD; d += ATT_THREADS) {
                ks[row * HDP + d] = __float2half_rn(kn[d]);
                vs[row * HDP + d] = __float2half_rn(vn[d]);
            }
            __syncthreads();
        }
        tile_scores(qs, ks, sc, G, tk, HD, A.scale);
        __syncthreads();
        tile_softmax(sc, m_s, l_s, al_s, G, tk);
        __syncthreads();
        if (owner) tile_pv(acc, sc, vs, al_s, c_hh, c_dc, part, geo.parts, tk, HD);
    }
    __syncthreads();
    if (geo.parts > 1) sum_parts(acc, (float *)ks, owner, part, geo.parts, geo.nchunk, ci);
    if (owner && part == 0)
#pragma unroll
        for (int e = 0; e < 8; e++) po[c_hh * HD + c_dc + e] = acc[e];

    /* combine the cluster's 8 slices, each CTA one eighth of the outputs */
    cl.sync();
    const int EPC = G * HD / DEC_CL, NH = A.n_head;
    float *part_o = A.part, *part_ml = A.part + (size_t)NH * Cmax * HD;
    for (int e = tid; e < EPC; e += ATT_THREADS) {
        const int idx = rank * EPC + e, hh = idx / HD;
        float mr[DEC_CL], M = -INFINITY;
#pragma unroll
        for (int r = 0; r < DEC_CL; r++) {
            mr[r] = cl.map_shared_rank(m_s, r)[hh];
            M = fmaxf(M, mr[r]);
        }
        float L = 0.0f, O = 0.0f;
#pragma unroll
        for (int r = 0; r < DEC_CL; r++) {
            const float w = expf(mr[r] - M);
            L = fmaf(w, cl.map_shared_rank(l_s, r)[hh], L);
            O = fmaf(w, cl.map_shared_rank(po, r)[idx], O);
        }
        if (Ca == 1) {
            A.out[(size_t)g * G * HD + idx] = O / L;
        } else {
            const size_t row = (size_t)(g * G + hh) * Cmax + cidx;
            part_o[row * HD + (idx - hh * HD)] = O;
            if (idx == hh * HD) {
                part_ml[row * 2] = M;
                part_ml[row * 2 + 1] = L;
            }
        }
    }
    cl.sync(); /* the other CTAs have read this one's shared memory */
    if (Ca == 1) return;
    __threadfence();
    __syncthreads();
    if (tid == 0) last_s = atomicAdd(&A.counters[g], 1) == Ca * DEC_CL - 1;
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    float *wts = sc; /* G * Cmax <= G * TK */
    for (int hh = warp; hh < G; hh += nwarps) {
        const size_t row0 = (size_t)(g * G + hh) * Cmax;
        float mc = -INFINITY, lc = 0.0f;
        if (lane < Ca) {
            mc = __ldcg(part_ml + (row0 + lane) * 2);
            lc = __ldcg(part_ml + (row0 + lane) * 2 + 1);
        }
        const float M = warp_max(mc);
        const float w = lane < Ca ? expf(mc - M) : 0.0f;
        const float L = warp_sum(w * lc);
        if (lane < Ca) wts[hh * TK + lane] = w / L;
    }
    __syncthreads();
    for (int e = tid; e < G * HD; e += ATT_THREADS) {
        const int hh = e / HD, d = e - hh * HD;
        const float *po2 = part_o + (size_t)(g * G + hh) * Cmax * HD + d;
        float o = 0.0f;
        for (int c = 0; c < Ca; c++) o = fmaf(wts[hh * TK + c], __ldcg(po2 + (size_t)c * HD), o);
        A.out[(size_t)g * G * HD + e] = o;
    }
    if (tid == 0) A.counters[g] = 0;
}

/* ------------------------------------------------------------------------
 * Decode attention without clusters: k_attn_split.
 *
 * Grid (query head, slice): 256 threads per CTA, G CTAs per KV head reading
 * the same K/V rows (the later ones from L2). A CTA applies the q/k norm and
 * RoPE to its q head and to this step's k (as k_attn_dec does; one CTA per
 * KV head stores the new k/v row into the cache, every other one uses its
 * own rotated copy of that row), then walks its slice of the visible keys
 * in tiles of SH_TK: scores with 8 lanes per key (q in registers, K rows
 * read straight from global memory, 16 bytes per lane and load, several
 * keys' loads in flight), an online softmax over the tile, and P.V with
 * each thread owning 8 output dimensions of one key part. Its slice's K/V
 * rows are prefetched into L2 before it waits for the previous kernel.
 * With one slice the CTA writes the output; otherwise each writes (m, l,
 * unnormalised o) and the last of a head's slices to finish (atomic counter)
 * combines them. The forward picks the number of slices from the context
 * (a captured graph per power of two: every slice up to SH_TK keys), where
 * k_attn_dec spent most of its time on the cluster launch and its chain of
 * synchronised steps at short contexts and read K/V at ~280 GB/s at long
 * ones. */
enum { SH_THREADS = 256, SH_NW = SH_THREADS / 32, SH_TK = 512, SH_MAX_SLICES = 256 };

__device__ __forceinline__ void h8_to_f(const uint4 &raw, float *f) {
    const __half2 *h2 = (const __half2 *)&raw;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float2 t = __half22float2(h2[e]);
        f[2 * e] = t.x, f[2 * e + 1] = t.y;
    }
}

template <int NC> /* 16-byte chunks per lane: head_dim / 64 */
__global__ void __launch_bounds__(SH_THREADS) k_attn_split(const AttnLaunch A) {
    pdl_trigger();
    constexpr int HD = NC * 64, NCH = HD / 8, PARTS = SH_THREADS / NCH;
    constexpr int KB = 8 / NC; /* keys per lane group and batch: 8 K loads in flight per lane */
    constexpr int VB = 8;      /* keys per thread and batch of P.V: 8 V loads in flight */
    __shared__ __align__(16) float qs[HD], kn[HD], vn[HD], sc[SH_TK], pr[PARTS * HD];
    __shared__ __align__(16) __half knh[HD], vnh[HD];
    __shared__ float red[2 * SH_NW], inv_l;
    const int h = blockIdx.x, G = A.n_head / A.n_head_kv, g = h / G, KV = A.n_head_kv * HD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int p = *A.pos0; /* written by the graph's input copy, before any kernel */
    const int vlo = A.window > 0 && p - A.window + 1 > 0 ? p - A.window + 1 : 0;
    const int vhi = A.exclude_self && p > 0 ? p - 1 : p;
    /* this CTA's slice [lo, hi] of the visible keys; slices past the last
     * non-empty one have nothing to do */
    const int S = gridDim.y, s = blockIdx.y, nk = vhi - vlo + 1;
    const int csz = (nk + S - 1) / S, Sa = (nk + csz - 1) / csz;
    if (s >= Sa) {
        pdl_wait();
        return;
    }
    const int lo = vlo + s * csz, hi = min(lo + csz, vhi + 1) - 1;
    /* the slice's K and V rows (earlier steps wrote them) into L2 while the
     * previous kernel finishes: later loads wait for L2, not DRAM */
    if (tid == 0) {
        const long long first = ((long long)lo * KV + (long long)g * HD) * 2, len = ((long long)(hi - lo) * KV + HD) * 2;
        for (int t = 0; t < 2; t++) {
            const uintptr_t a = (uintptr_t)((const char *)(t ? A.v : A.k) + first);
            asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a & ~(uintptr_t)15),
                         "r"((unsigned)((len + (long long)(a & 15) + 15) & ~15LL)) : "memory");
        }
    }
    /* what the q/k norm and RoPE need besides this step's vectors (weights
     * and the position), before the wait: the norm weights (+ offset) of
     * warps 0 (q) and 1 (k), and this thread's rotation (pair tid) */
    float nwr[2 * NC];
    float2 cs0 = make_float2(1.0f, 0.0f);
    if (A.rope) {
        if (A.q_norm && warp < 2) {
            const float *nw = warp == 0 ? A.q_norm : A.k_norm;
#pragma unroll
            for (int k = 0; k < 2 * NC; k++) nwr[k] = __fadd_rn(__ldg(nw + lane + 32 * k), A.norm_off);
        }
        if (tid < A.n_rot / 2) cs0 = rope_cs(tid, A.inv_freq, p);
    }
    pdl_wait();
    /* with rope, this step's row comes from knh/vnh (the cache row p may not
     * be written yet by the CTA that stores it); without, from the cache */
    const int pnew = A.rope ? p : -1;

    for (int i = tid; i < HD; i += SH_THREADS) {
        qs[i] = A.q[(size_t)h * HD + i];
        if (A.rope) {
            kn[i] = A.kf[(size_t)g * HD + i];
            vn[i] = A.vf[(size_t)g * HD + i];
        }
    }
    __syncthreads();
    if (A.rope) {
        if (A.q_norm) {
            if (warp < 2) {
                float *vec = warp == 0 ? qs : kn;
                const float scv = warp_rms_scale(vec, HD, A.eps);
#pragma unroll
                for (int k = 0; k < 2 * NC; k++) vec[lane + 32 * k] = vec[lane + 32 * k] * scv * nwr[k];
            }
            __syncthreads();
        }
        for (int j = tid; j < A.n_rot / 2; j += SH_THREADS) { /* one pair per thread: n_rot <= 256 */
            const float2 cs = j == tid ? cs0 : rope_cs(j, A.inv_freq, p);
            rope_pair_cs(qs, j, A.n_rot, A.neox, cs);
            rope_pair_cs(kn, j, A.n_rot, A.neox, cs);
        }
        __syncthreads();
        /* this step's row as the cache holds it (f16), stored once per KV head */
        for (int d = tid; d < HD; d += SH_THREADS) {
            const __half kh = __float2half_rn(kn[d]), vh = __float2half_rn(vn[d]);
            if (h % G == 0 && s == 0) {
                ((__half *)A.k)[(size_t)p * KV + (size_t)g * HD + d] = kh;
                ((__half *)A.v)[(size_t)p * KV + (size_t)g * HD + d] = vh;
            }
            knh[d] = kh;
            vnh[d] = vh;
        }
        __syncthreads();
    }

    /* scores: lanes 8s..8s+7 of a warp take one key, lane sub the chunks sub + 8i */
    const int sub = lane & 7;
    float qv[NC][8];
#pragma unroll
    for (int i = 0; i < NC; i++)
#pragma unroll
        for (int e = 0; e < 8; e++) qv[i][e] = qs[(sub + 8 * i) * 8 + e];
    /* P.V: thread owns dims 8 ci .. 8 ci + 7 for keys part, part + PARTS, ... */
    const int ci = tid % NCH, part = tid / NCH;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    float m_run = -INFINITY, l_run = 0.0f;
    const __half *kb = A.k + (size_t)g * HD, *vb = A.v + (size_t)g * HD;

    for (int t0 = lo; t0 <= hi; t0 += SH_TK) {
        const int tk = min(SH_TK, hi - t0 + 1);
        float tmax = -INFINITY;
        /* warp-uniform loop (the shuffles need all lanes): KB keys per lane group */
        for (int kb0 = warp * 4; kb0 < tk; kb0 += SH_THREADS / 8 * KB) {
            uint4 raw[KB][NC];
#pragma unroll
            for (int b = 0; b < KB; b++) {
                const int kk = kb0 + b * (SH_THREADS / 8) + (lane >> 3), j = t0 + kk;
#pragma unroll
                for (int i = 0; i < NC; i++) {
                    const int c = sub + 8 * i;
                    raw[b][i] = kk >= tk ? make_uint4(0u, 0u, 0u, 0u)
                                : j == pnew ? *(const uint4 *)(knh + c * 8)
                                            : __ldg((const uint4 *)(kb + (size_t)j * KV + c * 8));
                }
            }
#pragma unroll
            for (int b = 0; b < KB; b++) {
                const int kk = kb0 + b * (SH_THREADS / 8) + (lane >> 3);
                float dot = 0.0f;
#pragma unroll
                for (int i = 0; i < NC; i++) {
                    float kf[8];
                    h8_to_f(raw[b][i], kf);
#pragma unroll
                    for (int e = 0; e < 8; e++) dot = fmaf(qv[i][e], kf[e], dot);
                }
                dot += __shfl_xor_sync(FULL_MASK, dot, 1);
                dot += __shfl_xor_sync(FULL_MASK, dot, 2);
                dot += __shfl_xor_sync(FULL_MASK, dot, 4);
                dot *= A.scale;
                if (kk < tk) {
                    if (sub == 0) sc[kk] = dot;
                    tmax = fmaxf(tmax, dot);
                }
            }
        }
        tmax = warp_max(tmax);
        if (lane == 0) red[warp] = tmax;
        __syncthreads();
        float m_new = m_run;
#pragma unroll
        for (int w = 0; w < SH_NW; w++) m_new = fmaxf(m_new, red[w]);
        float ls = 0.0f;
        for (int kk = tid; kk < tk; kk += SH_THREADS) {
            const float e = expf(sc[kk] - m_new);
            sc[kk] = e;
            ls += e;
        }
        ls = warp_sum(ls);
        __syncthreads(); /* red read by all, sc written */
        if (lane == 0) red[SH_NW + warp] = ls;
        __syncthreads();
        const float alpha = expf(m_run - m_new);
        float lt = 0.0f;
#pragma unroll
        for (int w = 0; w < SH_NW; w++) lt += red[SH_NW + w];
        l_run = l_run * alpha + lt;
        m_run = m_new;
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] *= alpha;
        for (int kk0 = part; kk0 < tk; kk0 += PARTS * VB) {
            uint4 raw[VB];
#pragma unroll
            for (int b = 0; b < VB; b++) {
                const int kk = kk0 + b * PARTS, j = t0 + kk;
                raw[b] = kk >= tk ? make_uint4(0u, 0u, 0u, 0u)
                         : j == pnew ? *(const uint4 *)(vnh + ci * 8)
                                     : __ldg((const uint4 *)(vb + (size_t)j * KV + ci * 8));
            }
#pragma unroll
            for (int b = 0; b < VB; b++) {
                const int kk = kk0 + b * PARTS;
                const float w = kk < tk ? sc[kk] : 0.0f;
                float vf[8];
                h8_to_f(raw[b], vf);
#pragma unroll
                for (int e = 0; e < 8; e++) acc[e] = fmaf(w, vf[e], acc[e]);
            }
        }
        __syncthreads(); /* sc and red are reused by the next tile */
    }
#pragma unroll
    for (int e = 0; e < 8; e++) pr[part * HD + ci * 8 + e] = acc[e];
    __syncthreads();
    /* the key parts summed: the output (one slice; m_run and l_run are the
     * same in every thread), or this slice's (m, l, o) for the combine */
    float *part_o = A.part + (size_t)h * S * HD, *part_ml = A.part + (size_t)A.n_head * S * HD + (size_t)h * S * 2;
    for (int d = tid; d < HD; d += SH_THREADS) {
        float o = 0.0f;
#pragma unroll
        for (int q = 0; q < PARTS; q++) o += pr[q * HD + d];
        if (Sa == 1) A.out[(size_t)h * HD + d] = o * (1.0f / l_run);
        else part_o[(size_t)s * HD + d] = o;
    }
    if (Sa == 1) return;
    if (tid == 0) part_ml[2 * s] = m_run, part_ml[2 * s + 1] = l_run;
    __threadfence();
    __syncthreads();
    __shared__ int last_s;
    if (tid == 0) last_s = atomicAdd(&A.counters[h], 1) == Sa - 1;
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    /* the last slice to finish: weights exp(m_s - M) / L, then the outputs */
    float *wts = sc; /* Sa <= SH_MAX_SLICES = SH_TK */
    if (warp == 0) {
        float M = -INFINITY;
        for (int k = lane; k < Sa; k += 32) M = fmaxf(M, __ldcg(part_ml + 2 * k));
        M = warp_max(M);
        float L = 0.0f;
        for (int k = lane; k < Sa; k += 32) {
            const float w = expf(__ldcg(part_ml + 2 * k) - M);
            wts[k] = w;
            L += w * __ldcg(part_ml + 2 * k + 1);
        }
        L = warp_sum(L);
        if (lane == 0) inv_l = 1.0f / L;
    }
    __syncthreads();
    const float invL = inv_l;
    for (int d = tid; d < HD; d += SH_THREADS) {
        float o = 0.0f;
        for (int k = 0; k < Sa; k++) o = fmaf(wts[k], __ldcg(part_o + (size_t)k * HD + d), o);
        A.out[(size_t)h * HD + d] = o * invL;
    }
    if (tid == 0) A.counters[h] = 0;
}

static size_t dec_smem(const AttnGeom &geo, int HD, int *kv_off) {
    const int G = geo.G;
    int off = G * HD + G * TK + 3 * G + G * HD + 2 * HD + 8;
    off = (off + 3) & ~3;
    *kv_off = off;
    return (size_t)off * sizeof(float) + 2 * (size_t)TK * (HD + 8) * sizeof(__half);
}

static size_t attn_smem(const AttnGeom &geo, int HD) {
    return (size_t)geo.kv_off * sizeof(float) + 2 * (size_t)TK * (HD + 8) * sizeof(__half);
}

/* max_splits: TK for k_attention (its combine keeps a weight per split in a
 * tile row), DEC_MAX_SPLITS for k_attn_dec (a weight per cluster) */
static int attn_geom(int HD, int n_head, int n_head_kv, int splits, int max_splits, AttnGeom *geo) {
    if (HD % 8 || HD > 256 || n_head % n_head_kv || splits < 1 || splits > max_splits)
        return dp_set_error(DP_ERR_BACKEND, "CUDA attention: unsupported shape (head_dim %d, %d/%d heads, %d splits)",
                            HD, n_head, n_head_kv, splits);
    geo->G = n_head / n_head_kv;
    geo->nchunk = geo->G * HD / 8;
    if (geo->nchunk > ATT_THREADS)
        return dp_set_error(DP_ERR_BACKEND, "CUDA attention: %d query heads per KV head of dimension %d are too many",
                            geo->G, HD);
    /* split the keys of a chunk over several threads, as long as the partial
     * sums fit over the K/V tiles for their reduction */
    geo->parts = ATT_THREADS / geo->nchunk;
    if (geo->parts > TK) geo->parts = TK;
    while (geo->parts > 1 && (size_t)(geo->parts - 1) * geo->nchunk * 8 * sizeof(float) >
                                 2 * (size_t)TK * (HD + 8) * sizeof(__half))
        geo->parts--;
    geo->kv_off = (geo->G * HD + geo->G * TK + 3 * geo->G + 3) & ~3;
    return DP_OK;
}

static size_t g_attn_smem = 48 * 1024;
/* DOPPLER_CUDA_ATTN_DEC=0: decode through k_attention (one combining CTA) */
static int g_attn_dec = [] {
    const char *e = getenv("DOPPLER_CUDA_ATTN_DEC");
    return !(e && *e == '0');
}();

int dp_cu_attention_init(int head_dim, int n_head, int n_head_kv) {
    AttnGeom geo = {};
    int rc = attn_geom(head_dim, n_head, n_head_kv, 1, TK, &geo);
    if (rc) return rc;
    size_t smem = attn_smem(geo, head_dim);
    int kv_off;
    size_t dsm = dec_smem(geo, head_dim, &kv_off);
    if (dsm > smem) smem = dsm;
    if (smem > g_attn_smem) {
        CU_TRY(cudaFuncSetAttribute(k_attention, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CU_TRY(cudaFuncSetAttribute(k_attn_dec, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        g_attn_smem = smem;
    }
    return DP_OK;
}

int dp_cu_attention_fuses_rope(void) { return g_attn_dec; }

/* DOPPLER_CUDA_ATTN_SPLIT=0: decode through k_attn_dec instead of k_attn_split */
static int g_attn_split = [] {
    const char *e = getenv("DOPPLER_CUDA_ATTN_SPLIT");
    return !(e && *e == '0');
}();

/* DOPPLER_CUDA_ATTN_SLICE_KEYS: keys per slice once a context is split
 * (default 64); up to 4 x that many keys stay in one slice, which needs no
 * combine. Measured on the H200, decode after a 9-token / 512-token prompt,
 * Gemma-3-1B shape: 891 / 859 tok/s, against 896 / 822 with 256 keys per
 * slice and 879 / 860 with 64 from the start (Qwen2.5-3B: 648 / 600, 649 /
 * 588, 630 / 600). */
static int g_slice_keys = [] {
    const char *e = getenv("DOPPLER_CUDA_ATTN_SLICE_KEYS");
    const int v = e && *e ? atoi(e) : 64;
    return v < 1 ? 1 : v;
}();

/* Slices for n_keys: enough that each has at most g_slice_keys keys, but
 * no more than one wave of CTAs (n_head x slices CTAs resident at once):
 * a second wave repeats each CTA's fixed chain (q/k norm, RoPE, the
 * softmax steps), measured on the H200 at depth 4096: Qwen2.5-3B shape 459
 * tok/s with 512 CTAs against 486 with 256, Gemma-3-1B shape 693 with 512
 * against 811 with 256. A power of two, so that few graphs cover every
 * context. */
/* The k_attn_split instance for a head dimension of 64, 128 or 256. */
typedef void (*SplitFn)(const AttnLaunch);
static SplitFn split_fn(int head_dim) {
    return head_dim == 64 ? k_attn_split<1> : head_dim == 128 ? k_attn_split<2> : k_attn_split<4>;
}

int dp_cu_attention_slices(int n_keys, int n_head, int head_dim) {
    if (!g_attn_dec || !g_attn_split || !dp_cu_attention_split_ok(head_dim)) return 0;
    static int wave[5]; /* CTAs resident at once, per head_dim / 64 */
    const int nc = head_dim / 64;
    if (!wave[nc]) {
        int dev = 0, nsm = 0, per = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, split_fn(head_dim), SH_THREADS, 0);
        wave[nc] = nsm * (per < 1 ? 1 : per);
    }
    int S = 1;
    if ((long long)n_keys <= 4LL * g_slice_keys) return S;
    while ((long long)S * g_slice_keys < n_keys && 2 * S * n_head <= wave[nc] && S < SH_MAX_SLICES) S *= 2;
    return S;
}

int dp_cu_attention_split_ok(int head_dim) { return head_dim == 64 || head_dim == 128 || head_dim == 256; }

int dp_cu_attention(const AttnLaunch *A, cudaStream_t st) {
    const int HD = A->head_dim;
    const int dec = A->n == 1 && g_attn_dec;
    AttnGeom geo = {};
    int rc = attn_geom(HD, A->n_head, A->n_head_kv, A->splits, dec ? (int)DEC_MAX_SPLITS : (int)TK, &geo);
    if (rc) return rc;
    size_t smem = attn_smem(geo, HD);
    if (dec && A->slices > 1) {
        int taken = 0;
        if ((rc = dp_cu_attn_gqa(A, st, &taken)) || taken) return rc;
    }
    if (dec && A->slices > 0 && dp_cu_attention_split_ok(HD)) {
        if (A->slices > SH_MAX_SLICES || (A->slices > 1 && A->slices > A->splits))
            return dp_set_error(DP_ERR_BACKEND, "CUDA attention: %d key slices exceed the scratch for %d", A->slices,
                                A->splits);
        CU_TRY(dp_cu_launch(split_fn(HD), dim3(A->n_head, A->slices), dim3(SH_THREADS), 0, st, *A));
        return DP_OK;
    }
    if (dec) {
        AttnGeom dg = geo;
        smem = dec_smem(dg, HD, &dg.kv_off);
        if (smem > g_attn_smem && (rc = dp_cu_attention_init(HD, A->n_head, A->n_head_kv))) return rc;
        /* the geometry's key parts must fit over the K/V tiles, as for k_attention */
        const int S = (A->splits + DEC_CL - 1) / DEC_CL * DEC_CL;
        CU_TRY(dp_cu_launch(k_attn_dec, dim3(S, A->n_head_kv), dim3(ATT_THREADS), smem, st, *A, dg));
        return DP_OK;
    }
    if (A->rope) return dp_set_error(DP_ERR_BACKEND, "CUDA attention: fused RoPE needs the decode kernel");
    if (smem > g_attn_smem && (rc = dp_cu_attention_init(HD, A->n_head, A->n_head_kv))) return rc;
    dim3 grid(A->splits, A->n_head_kv, A->n);
    CU_TRY(dp_cu_launch(k_attention, dim3(grid), dim3(ATT_THREADS), smem, st, *A, geo));
    return DP_OK;
}

/* Softmax weights for tracing: one CTA per (query, head). */
__global__ void k_attention_probs(const AttnLaunch A, float *probs, int n_kv) {
    pdl_trigger();
    pdl_wait();
    extern __shared__ float sm[];
    __shared__ float red[32];
    const int z = blockIdx.x, h = blockIdx.y, HD = A.head_dim;
    const int G = A.n_head / A.n_head_kv, g = h / G, KV = A.n_head_kv * HD;
    float *qs = sm, *sc = sm + HD;
    const int p = *A.pos0 + z;
    const int lo = A.window > 0 && p - A.window + 1 > 0 ? p - A.window + 1 : 0;
    const int hi = A.exclude_self && p > 0 ? p - 1 : p;
    for (int i = threadIdx.x; i < HD; i += blockDim.x) qs[i] = A.q[(size_t)z * A.n_head * HD + (size_t)h * HD + i];
    __syncthreads();
    float lm = -INFINITY;
    for (int j = lo + threadIdx.x; j <= hi; j += blockDim.x) {
        const __half *kj = A.k + (size_t)j * KV + (size_t)g * HD;
        float d = 0.0f;
        for (int c = 0; c < HD; c++) d += qs[c] * __half2float(kj[c]);
        d *= A.scale;
        sc[j - lo] = d;
        lm = fmaxf(lm, d);
    }
    lm = block_max(lm, red);
    float s = 0.0f;
    for (int j = lo + threadIdx.x; j <= hi; j += blockDim.x) {
        float e = expf(sc[j - lo] - lm);
        sc[j - lo] = e;
        s += e;
    }
    s = block_sum(s, red);
    const float inv = 1.0f / s;
    float *pr = probs + ((size_t)z * A.n_head + h) * n_kv;
    for (int j = threadIdx.x; j < n_kv; j += blockDim.x) pr[j] = j >= lo && j <= hi ? sc[j - lo] * inv : 0.0f;
}

int dp_cu_attention_probs(const AttnLaunch *A, float *probs, int n_kv, cudaStream_t st) {
    size_t smem = (size_t)(A->head_dim + n_kv) * sizeof(float);
    if (smem > 200 * 1024)
        return dp_set_error(DP_ERR_BACKEND, "CUDA: attn_scores tracing supports at most %d keys", 200 * 256 - 256);
    if (smem > 48 * 1024)
        CU_TRY(cudaFuncSetAttribute(k_attention_probs, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    CU_TRY(dp_cu_launch(k_attention_probs, dim3(dim3(A->n, A->n_head)), dim3(128), smem, st, *A, probs, n_kv));
    return DP_OK;
}
