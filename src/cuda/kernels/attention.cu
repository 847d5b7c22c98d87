/* Attention over the f16 KV pages, split-K ("flash decoding").
 *
 * Grid (split, kv head, query row). A row has its own position and its
 * sequence's pages (KvPages), so one launch serves the rows of several
 * sequences (a batch's prefill chunks and decode tokens). A CTA takes one
 * query position, the G query
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

#include <cuda_pipeline.h>

#include "kernels.cuh"

enum { TK = 64, ATT_THREADS = 256 };

struct AttnGeom {
    int G, nchunk, parts; /* output chunks of 8 dims; threads per chunk (split over keys) */
    int kv_off; /* float offset of the K/V tiles in shared memory (16-byte aligned) */
};

/* The steps of one tile of keys. K and V rows sit in shared memory HD + 8
 * halves apart. */

/* The tile's K and V rows (keys t0 .. t0+tk-1) into shared memory with
 * 16-byte asynchronous copies, all in flight at once; waits for them. */
__device__ __forceinline__ void tile_load(__half *ks, __half *vs, const __half *kbase, const __half *vbase, int t0,
                                          int tk, int KV, int HD, const int *tab, int sh) {
    const int HDP = HD + 8, CPR = HD / 8; /* 16-byte chunks per row */
    for (int idx = threadIdx.x; idx < tk * CPR; idx += ATT_THREADS) {
        const int row = idx / CPR, c = idx - row * CPR;
        const size_t gofs = (size_t)kv_row(tab, t0 + row, sh) * KV + c * 8;
        __pipeline_memcpy_async(ks + row * HDP + c * 8, kbase + gofs, 16);
        __pipeline_memcpy_async(vs + row * HDP + c * 8, vbase + gofs, 16);
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
}

/* sc[h][k] = scale * q_h . k_k (soft-capped at cap): one (head, key) pair per thread. */
__device__ __forceinline__ void tile_scores(const float *qs, const __half *ks, float *sc, int G, int tk, int HD,
                                            float scale, float cap) {
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
        sc[hh * TK + kk] = softcap_f(dot * scale, cap);
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

/* The fused prologue (A.rope, several rows): the G q heads of KV head g of
 * row z at position p into qs with the q norm and RoPE, as k_qk_rope
 * computes them; the CTA holding the row's last key (store) also computes
 * its k (norm, RoPE) and v in kn, vn and stores them as the cache row at
 * p, so that its own tile loads read it. A CTA runs this once, cold, as a
 * chain of dependent steps: every input is loaded at once (the q values
 * of a thread, k and v, inv_freq), and each rotation's cos and sin are
 * computed once for all heads (cs, beside kn). */
__device__ void rope_prologue(const AttnLaunch &A, float *qs, float *kn, float *vn, int z, int g, int G, int p,
                              bool store, const int *tab) {
    enum { QV = 8 }; /* q values per thread: G * HD <= 8 * ATT_THREADS (attn_geom) */
    const int HD = A.head_dim, Q = A.n_head * HD, KV = A.n_head_kv * HD, nw = ATT_THREADS / 32;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nh = G + (store ? 1 : 0);
    const int half = A.n_rot / 2;
    float2 *cs = (float2 *)(kn + HD);
    float qv[QV], kv = 0.0f, vv = 0.0f;
#pragma unroll
    for (int k = 0; k < QV; k++) {
        const int i = tid + k * ATT_THREADS;
        qv[k] = i < G * HD ? qkv_in(A, z, g * G * HD + i, A.bq, g * G * HD + i) : 0.0f;
    }
    if (store && tid < HD) { /* HD <= ATT_THREADS */
        kv = qkv_in(A, z, Q + g * HD + tid, A.bk, g * HD + tid);
        vv = qkv_in(A, z, Q + KV + g * HD + tid, A.bv, g * HD + tid);
    }
    if (tid < half) cs[tid] = rope_cs(tid, A.inv_freq, p, A.rope_ms);
#pragma unroll
    for (int k = 0; k < QV; k++)
        if (tid + k * ATT_THREADS < G * HD) qs[tid + k * ATT_THREADS] = qv[k];
    if (store && tid < HD) kn[tid] = kv, vn[tid] = vv;
    __syncthreads();
    if (A.q_norm) { /* one warp a head, as k_qk_rope's scale */
        for (int hh = warp; hh < nh; hh += nw) {
            float *vec = hh < G ? qs + hh * HD : kn;
            const float *w = hh < G ? A.q_norm : A.k_norm;
            const float sc = warp_rms_scale(vec, HD, A.eps);
            for (int d = lane; d < HD; d += 32) vec[d] = vec[d] * sc * (w[d] + A.norm_off);
        }
        __syncthreads();
    }
    for (int t = tid; t < nh * half; t += ATT_THREADS) {
        const int hh = t / half, i = t - hh * half;
        rope_pair_cs(hh < G ? qs + hh * HD : kn, i, A.n_rot, A.neox, cs[i]);
    }
    __syncthreads();
    if (store) {
        const size_t at = (size_t)kv_row(tab, p, A.kv.page_shift) * KV + (size_t)g * HD;
        __half *kc = (__half *)A.k, *vc = (__half *)A.v;
        for (int d = tid; d < HD; d += ATT_THREADS) {
            kc[at + d] = __float2half_rn(kn[d]);
            vc[at + d] = __float2half_rn(vn[d]);
        }
    }
    __syncthreads(); /* the stores are visible to the block's tile loads */
}

/* ROWS: the fused decode rows (A.rope) with the RoPE prologue; a grid of at
 * most 32 (row, KV head) pairs, so its registers cost no occupancy, while
 * the general kernel (prefill, mixed rows, 64 decode rows) keeps 4 CTAs an
 * SM. */
template <bool ROWS>
__global__ void __launch_bounds__(ATT_THREADS, ROWS ? 2 : 4) k_attention(const AttnLaunch A, const AttnGeom geo) {
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

    if (A.kv.rows[ROW_INTS * z + ROW_SEQ] < 0) return; /* a padding row */
    const int p = A.kv.rows[ROW_INTS * z + ROW_POS];
    const int *tab = kv_table(A.kv, z);
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

    if (ROWS) /* kn, vn over the K/V tiles, free until the first load */
        rope_prologue(A, qs, (float *)ks, (float *)vs, z, g, G, p, s == S - 1, tab);
    else
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
        tile_load(ks, vs, kbase, vbase, t0, tk, KV, HD, tab, A.kv.page_shift);
        __syncthreads();
        /* scores: one (head, key) pair per thread */
        tile_scores(qs, ks, sc, G, tk, HD, A.scale, A.softcap);
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
            const size_t at = (size_t)z * Q + (size_t)(g * G + c_hh) * HD + c_dc;
#pragma unroll
            for (int e = 0; e < 8; e++) A.out[at + e] = acc[e] * inv;
            if (A.out16)
#pragma unroll
                for (int e = 0; e < 8; e++) A.out16[at + e] = __float2half_rn(acc[e] * inv);
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
        const size_t at = (size_t)z * Q + (size_t)(g * G + hh) * HD + d4 * 4;
        *(float4 *)(A.out + at) = o;
        if (A.out16) {
            A.out16[at] = __float2half_rn(o.x), A.out16[at + 1] = __float2half_rn(o.y);
            A.out16[at + 2] = __float2half_rn(o.z), A.out16[at + 3] = __float2half_rn(o.w);
        }
    }
    if (tid == 0) A.counters[z * A.n_head_kv + g] = 0;
}

static size_t attn_smem(const AttnGeom &geo, int HD) {
    return (size_t)geo.kv_off * sizeof(float) + 2 * (size_t)TK * (HD + 8) * sizeof(__half);
}

/* splits: at most TK (the combine keeps a weight per split in a tile row) */
static int attn_geom(int HD, int n_head, int n_head_kv, int splits, AttnGeom *geo) {
    if (HD % 8 || HD > 256 || n_head % n_head_kv || splits < 1 || splits > TK)
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

int dp_cu_attention_init(int head_dim, int n_head, int n_head_kv) {
    AttnGeom geo = {};
    int rc = attn_geom(head_dim, n_head, n_head_kv, 1, &geo);
    if (rc) return rc;
    const size_t smem = attn_smem(geo, head_dim);
    if (smem > g_attn_smem) {
        CU_TRY(cudaFuncSetAttribute(k_attention<false>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        CU_TRY(cudaFuncSetAttribute(k_attention<true>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        g_attn_smem = smem;
    }
    return DP_OK;
}

int dp_cu_attention(const AttnLaunch *A, cudaStream_t st) {
    if (A->n == 1 && A->slices > 0) { /* decode by the sliced kernels */
        int rc, taken = 0;
        if (A->slices > 1 && ((rc = dp_cu_attn_gqa(A, st, &taken)) || taken)) return rc;
        return dp_cu_attn_split(A, st);
    }
    if (A->rope && !A->qkv)
        return dp_set_error(DP_ERR_BACKEND, "CUDA attention: fused RoPE of several rows needs the joint Q/K/V");
    if (A->rope && A->slices == 1) return dp_cu_attn_split(A, st); /* decode rows, a CTA per (row, head) */
    if (!A->rope && dp_cu_attn_mma_ok(A)) return dp_cu_attn_mma(A, st);
    const int HD = A->head_dim;
    AttnGeom geo = {};
    int rc = attn_geom(HD, A->n_head, A->n_head_kv, A->splits, &geo);
    if (rc) return rc;
    const size_t smem = attn_smem(geo, HD);
    if (smem > g_attn_smem && (rc = dp_cu_attention_init(HD, A->n_head, A->n_head_kv))) return rc;
    dim3 grid(A->splits, A->n_head_kv, A->n);
    CU_TRY(dp_cu_launch(A->rope ? k_attention<true> : k_attention<false>, dim3(grid), dim3(ATT_THREADS), smem, st,
                        *A, geo));
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
    const int p = A.kv.rows[ROW_INTS * z + ROW_POS];
    const int *tab = kv_table(A.kv, z);
    const int lo = A.window > 0 && p - A.window + 1 > 0 ? p - A.window + 1 : 0;
    const int hi = A.exclude_self && p > 0 ? p - 1 : p;
    for (int i = threadIdx.x; i < HD; i += blockDim.x) qs[i] = A.q[(size_t)z * A.n_head * HD + (size_t)h * HD + i];
    __syncthreads();
    float lm = -INFINITY;
    for (int j = lo + threadIdx.x; j <= hi; j += blockDim.x) {
        const __half *kj = A.k + (size_t)kv_row(tab, j, A.kv.page_shift) * KV + (size_t)g * HD;
        float d = 0.0f;
        for (int c = 0; c < HD; c++) d += qs[c] * __half2float(kj[c]);
        d = softcap_f(d * A.scale, A.softcap);
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
