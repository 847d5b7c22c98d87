/* Attention over the f16 KV cache, split-K ("flash decoding").
 *
 * Grid (split, kv head, query). A CTA takes one query position, the G query
 * heads that share one KV head, and one contiguous slice of that query's
 * visible keys (causal, optionally a sliding window). It walks its slice in
 * tiles of 64 keys with an online softmax (running max m, sum l, and the
 * unnormalised output in registers), then writes (m, l, o) for its slice.
 * The last CTA of a (query, kv head) to finish (an atomic counter, reset by
 * that CTA) combines the slices; with a single slice the CTA writes the
 * output directly. The number of slices adapts to the number of keys
 * (at least min_keys keys each), read on the device, so a decode step
 * captured once in a CUDA graph stays valid at every position. */
#include <math.h>

#include "kernels.cuh"

enum { TK = 64 };

struct AttnGeom {
    int G, LPK, KPW, nchunk, per_thread;
};

/* Per-thread chunks of 8 output dimensions are at most 2 (see launch). */
__global__ void k_attention(const AttnLaunch A, const AttnGeom geo) {
    extern __shared__ float sm[];
    const int HD = A.head_dim, G = geo.G, LPK = geo.LPK, KPW = geo.KPW;
    const int s = blockIdx.x, g = blockIdx.y, z = blockIdx.z;
    const int Q = A.n_head * HD, KV = A.n_head_kv * HD;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nwarps = blockDim.x >> 5;
    float *qs = sm;                 /* G * HD */
    float *sc = qs + G * HD;        /* G * TK */
    float *m_s = sc + G * TK;       /* G */
    float *l_s = m_s + G;           /* G */
    float *al_s = l_s + G;          /* G */
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

    for (int i = tid; i < G * HD; i += blockDim.x) qs[i] = A.q[(size_t)z * Q + (size_t)g * G * HD + i];
    for (int i = tid; i < G; i += blockDim.x) {
        m_s[i] = -INFINITY;
        l_s[i] = 0.0f;
    }
    float acc[2][8];
#pragma unroll
    for (int c = 0; c < 2; c++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[c][e] = 0.0f;
    __syncthreads();

    const int sub = lane % LPK, d0 = sub * 8;
    const __half *kbase = A.k + (size_t)g * HD, *vbase = A.v + (size_t)g * HD;
    for (int t0 = start; t0 < end; t0 += TK) {
        const int tk = min(TK, end - t0);
        /* scores of this tile for the G heads */
        for (int kk0 = warp * KPW; kk0 < tk; kk0 += nwarps * KPW) {
            const int kk = kk0 + lane / LPK;
            const bool valid = kk < tk && d0 < HD;
            float kf[8];
            if (valid) {
                uint4 raw = *(const uint4 *)(kbase + (size_t)(t0 + kk) * KV + d0);
                const __half2 *h2 = (const __half2 *)&raw;
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    float2 f = __half22float2(h2[e]);
                    kf[2 * e] = f.x;
                    kf[2 * e + 1] = f.y;
                }
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++) kf[e] = 0.0f;
            }
            for (int hh = 0; hh < G; hh++) {
                float dot = 0.0f;
                if (d0 < HD) {
                    const float4 *q4 = (const float4 *)(qs + hh * HD + d0);
                    float4 a = q4[0], b = q4[1];
                    dot = a.x * kf[0] + a.y * kf[1] + a.z * kf[2] + a.w * kf[3] + b.x * kf[4] + b.y * kf[5] +
                          b.z * kf[6] + b.w * kf[7];
                }
                for (int o = LPK / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(FULL_MASK, dot, o);
                if (sub == 0 && kk < tk) sc[hh * TK + kk] = dot * A.scale;
            }
        }
        __syncthreads();
        /* online softmax update, one warp per head */
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
        __syncthreads();
        /* output: each thread owns up to two chunks of 8 dimensions */
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int idx = tid + c * blockDim.x;
            if (c < geo.per_thread && idx < geo.nchunk) {
                const int hh = idx / (HD / 8), dc = (idx % (HD / 8)) * 8;
                const float alpha = al_s[hh];
#pragma unroll
                for (int e = 0; e < 8; e++) acc[c][e] *= alpha;
                const float *pr = sc + hh * TK;
                for (int kk = 0; kk < tk; kk++) {
                    uint4 raw = *(const uint4 *)(vbase + (size_t)(t0 + kk) * KV + dc);
                    const __half2 *h2 = (const __half2 *)&raw;
                    const float w = pr[kk];
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        float2 f = __half22float2(h2[e]);
                        acc[c][2 * e] = fmaf(w, f.x, acc[c][2 * e]);
                        acc[c][2 * e + 1] = fmaf(w, f.y, acc[c][2 * e + 1]);
                    }
                }
            }
        }
        __syncthreads();
    }

    if (S == 1) {
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int idx = tid + c * blockDim.x;
            if (c < geo.per_thread && idx < geo.nchunk) {
                const int hh = idx / (HD / 8), dc = (idx % (HD / 8)) * 8;
                const float inv = 1.0f / l_s[hh];
                float *o = A.out + (size_t)z * Q + (size_t)(g * G + hh) * HD + dc;
#pragma unroll
                for (int e = 0; e < 8; e++) o[e] = acc[c][e] * inv;
            }
        }
        return;
    }

    /* write this slice's partial result */
    const int NH = A.n_head, SP = A.splits;
    float *part_o = A.part, *part_ml = A.part + (size_t)A.n * NH * SP * HD;
#pragma unroll
    for (int c = 0; c < 2; c++) {
        const int idx = tid + c * blockDim.x;
        if (c < geo.per_thread && idx < geo.nchunk) {
            const int hh = idx / (HD / 8), dc = (idx % (HD / 8)) * 8;
            float *o = part_o + (((size_t)z * NH + g * G + hh) * SP + s) * HD + dc;
#pragma unroll
            for (int e = 0; e < 8; e++) o[e] = acc[c][e];
        }
    }
    for (int hh = tid; hh < G; hh += blockDim.x) {
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
    for (int e = tid; e < G * HD; e += blockDim.x) {
        const int hh = e / HD, d = e % HD;
        const float *po = part_o + ((size_t)z * NH + g * G + hh) * SP * HD + d;
        float o = 0.0f;
        for (int k = 0; k < S; k++) o = fmaf(wts[hh * TK + k], __ldcg(po + (size_t)k * HD), o);
        A.out[(size_t)z * Q + (size_t)(g * G + hh) * HD + d] = o;
    }
    if (tid == 0) A.counters[z * A.n_head_kv + g] = 0;
}

int dp_cu_attention(const AttnLaunch *A, cudaStream_t st) {
    const int HD = A->head_dim;
    if (HD % 8 || HD > 256 || A->n_head % A->n_head_kv || A->splits < 1 || A->splits > TK)
        return dp_set_error(DP_ERR_BACKEND, "CUDA attention: unsupported shape (head_dim %d, %d/%d heads, %d splits)",
                            HD, A->n_head, A->n_head_kv, A->splits);
    AttnGeom geo;
    geo.G = A->n_head / A->n_head_kv;
    geo.LPK = 1;
    while (geo.LPK * 8 < HD) geo.LPK *= 2;
    geo.KPW = 32 / geo.LPK;
    geo.nchunk = geo.G * HD / 8;
    int threads = 128;
    while (threads * 2 < geo.nchunk && threads < 1024) threads *= 2;
    geo.per_thread = (geo.nchunk + threads - 1) / threads;
    if (geo.per_thread > 2)
        return dp_set_error(DP_ERR_BACKEND, "CUDA attention: %d query heads per KV head of dimension %d are too many",
                            geo.G, HD);
    size_t smem = (size_t)(geo.G * HD + geo.G * TK + 3 * geo.G) * sizeof(float);
    dim3 grid(A->splits, A->n_head_kv, A->n);
    k_attention<<<grid, threads, smem, st>>>(*A, geo);
    CU_LAUNCHED();
    return DP_OK;
}

/* Softmax weights for tracing: one CTA per (query, head). */
__global__ void k_attention_probs(const AttnLaunch A, float *probs, int n_kv) {
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
    k_attention_probs<<<dim3(A->n, A->n_head), 128, smem, st>>>(*A, probs, n_kv);
    CU_LAUNCHED();
    return DP_OK;
}
