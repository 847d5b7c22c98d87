/* Decode attention (one query) with the q/k norm, RoPE and the K/V store
 * fused in: k_attn_split.
 *
 * Grid (query head, slice): 256 threads per CTA, G CTAs per KV head reading
 * the same K/V rows (the later ones from L2). A CTA applies the q/k norm and
 * RoPE to its q head and to this step's k (as dp_cu_qk_rope_store would;
 * one CTA per KV head stores the new k/v row into the cache, every other one uses its
 * own rotated copy of that row), then walks its slice of the visible keys
 * in tiles of SH_TK: scores with 8 lanes per key (q in registers, K rows
 * read straight from global memory, 16 bytes per lane and load, several
 * keys' loads in flight), an online softmax over the tile, and P.V with
 * each thread owning 8 output dimensions of one key part. Its slice's K/V
 * rows are prefetched into L2 before it waits for the previous kernel.
 * With one slice the CTA writes the output; otherwise each writes (m, l,
 * unnormalised o) and the last of a head's slices to finish (atomic counter)
 * combines them. The forward picks the number of slices from the context
 * (a captured graph per power of two: every slice up to SH_TK keys). A
 * kernel without clusters and with one unsynchronised chain per CTA: the
 * cluster kernel it replaced spent most of its time on the cluster launch
 * at short contexts and read K/V at ~280 GB/s at long ones. */
#include "kernels.cuh"

/* SH_PG: page rows of a slice kept in shared memory (keys past them look
 * their page up in the table) */
enum { SH_THREADS = 256, SH_NW = SH_THREADS / 32, SH_TK = 512, SH_MAX_SLICES = 256, SH_PG = 64 };

__device__ __forceinline__ void h8_to_f(const uint4 &raw, float *f) {
    const __half2 *h2 = (const __half2 *)&raw;
#pragma unroll
    for (int e = 0; e < 4; e++) {
        const float2 t = __half22float2(h2[e]);
        f[2 * e] = t.x, f[2 * e + 1] = t.y;
    }
}

/* The pool row of key j: from the slice's page rows in shared memory (pg,
 * pages from pb on), past them from the page table. */
__device__ __forceinline__ int sh_row(const int *pg, int pb, const int *tab, int sh, int j) {
    const int i = (j >> sh) - pb;
    return i < SH_PG ? pg[i] | (j & ((1 << sh) - 1)) : kv_row(tab, j, sh);
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
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, z = blockIdx.z;
    /* the row's position, written by the graph's input copy before any kernel */
    if (A.qkv && A.kv.rows[ROW_INTS * z + ROW_SEQ] < 0) { /* a padding row of a batched step */
        pdl_wait();
        return;
    }
    const int p = A.kv.rows[ROW_INTS * z + ROW_POS];
    const int *tab = kv_table(A.kv, z), sh = A.kv.page_shift;
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
    /* the slice's pages (the first SH_PG) as pool rows in shared memory, and
     * this step's row, before the wait: the K/V loads after it then wait
     * for no page-table load */
    __shared__ int pg_s[SH_PG];
    const int pb = lo >> sh, np = (hi >> sh) - pb + 1, prow = kv_row(tab, p, sh);
    for (int i = tid; i < np && i < SH_PG; i += SH_THREADS) pg_s[i] = __ldg(tab + pb + i) << sh;
    /* the slice's K and V rows (earlier steps wrote them) into L2 while the
     * previous kernel finishes, page by page: later loads wait for L2, not DRAM */
    if (tid == 0)
        for (int j0 = lo; j0 <= hi; j0 = (j0 | ((1 << sh) - 1)) + 1) {
            const int j1 = min(hi, j0 | ((1 << sh) - 1));
            const long long first = ((long long)kv_row(tab, j0, sh) * KV + (long long)g * HD) * 2,
                            len = ((long long)(j1 - j0) * KV + HD) * 2;
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
        if (tid < A.n_rot / 2) cs0 = rope_cs(tid, A.inv_freq, p, A.rope_ms);
    }
    pdl_wait();
    /* with rope, this step's row comes from knh/vnh (the cache row p may not
     * be written yet by the CTA that stores it); without, from the cache */
    const int pnew = A.rope ? p : -1;

    if (A.qkv) { /* decode rows: q, k, v of row z from the joint Q/K/V product, loaded at once */
        const int Q = A.n_head * HD;
        for (int i = tid; i < HD; i += SH_THREADS) {
            const float qv = qkv_in(A, z, h * HD + i, A.bq, h * HD + i);
            const float kv = qkv_in(A, z, Q + g * HD + i, A.bk, g * HD + i);
            const float vv = qkv_in(A, z, Q + KV + g * HD + i, A.bv, g * HD + i);
            qs[i] = qv, kn[i] = kv, vn[i] = vv;
        }
    } else {
        for (int i = tid; i < HD; i += SH_THREADS) {
            qs[i] = A.q[(size_t)h * HD + i];
            if (A.rope) {
                kn[i] = A.kf[(size_t)g * HD + i];
                vn[i] = A.vf[(size_t)g * HD + i];
            }
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
            const float2 cs = j == tid ? cs0 : rope_cs(j, A.inv_freq, p, A.rope_ms);
            rope_pair_cs(qs, j, A.n_rot, A.neox, cs);
            rope_pair_cs(kn, j, A.n_rot, A.neox, cs);
        }
        __syncthreads();
        /* this step's row as the cache holds it (f16), stored once per KV head */
        for (int d = tid; d < HD; d += SH_THREADS) {
            const __half kh = __float2half_rn(kn[d]), vh = __float2half_rn(vn[d]);
            if (h % G == 0 && s == 0) {
                const size_t at = (size_t)prow * KV + (size_t)g * HD + d;
                ((__half *)A.k)[at] = kh;
                ((__half *)A.v)[at] = vh;
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
                                            : __ldg((const uint4 *)(kb + (size_t)sh_row(pg_s, pb, tab, sh, j) * KV + c * 8));
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
                dot = softcap_f(dot * A.scale, A.softcap);
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
                                     : __ldg((const uint4 *)(vb + (size_t)sh_row(pg_s, pb, tab, sh, j) * KV + ci * 8));
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
        if (Sa == 1) {
            const size_t at = ((size_t)z * A.n_head + h) * HD + d;
            A.out[at] = o * (1.0f / l_run);
            if (A.out16) A.out16[at] = __float2half_rn(o * (1.0f / l_run)); /* the o product's f16 input */
        } else {
            part_o[(size_t)s * HD + d] = o;
        }
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

/* The k_attn_split instance for a head dimension of 64, 128 or 256. */
typedef void (*SplitFn)(const AttnLaunch);
static SplitFn split_fn(int head_dim) {
    return head_dim == 64 ? k_attn_split<1> : head_dim == 128 ? k_attn_split<2> : k_attn_split<4>;
}

/* Slices for n_keys: enough that each has at most DOPPLER_CUDA_ATTN_SLICE_KEYS
 * keys (up to 4 x that many stay in one slice, which needs no combine), but
 * no more than one wave of CTAs (n_head x slices CTAs resident at once): a
 * second wave repeats each CTA's fixed chain (q/k norm, RoPE, the softmax
 * steps), measured slower on both shapes at depth 4096 (BENCHMARKS.md). A
 * power of two, so that few graphs cover every context. */
int dp_cu_attention_slices(int n_keys, int n_head, int head_dim) {
    if (head_dim != 64 && head_dim != 128 && head_dim != 256) return 0;
    static int wave[5]; /* CTAs resident at once, per head_dim / 64 */
    const int nc = head_dim / 64, keys = dp_cu_set.attn_slice_keys;
    if (!wave[nc]) {
        int dev = 0, nsm = 0, per = 0;
        cudaGetDevice(&dev);
        cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev);
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, split_fn(head_dim), SH_THREADS, 0);
        wave[nc] = nsm * (per < 1 ? 1 : per);
    }
    int S = 1;
    /* one slice, a CTA per query head, only while that CTA's walk is short:
     * with few heads (Gemma 3: 4) a walk of a few hundred keys leaves most
     * SMs idle for longer than the slices' combine takes (benchmarks log);
     * head dimension 256 doubles a key's work */
    if (n_keys <= dp_cu_set.attn_one_slice * 128 / (head_dim > 128 ? head_dim : 128)) return S;
    /* then at least FIRST_SLICES (as fast there as fewer): each count is a
     * class of captured graphs, and a generation that enters a new class
     * waits for its capture */
    enum { FIRST_SLICES = 8 };
    while (((long long)S * keys < n_keys || S < FIRST_SLICES) && 2 * S * n_head <= wave[nc] && S < SH_MAX_SLICES)
        S *= 2;
    return S;
}

int dp_cu_attn_split(const AttnLaunch *A, cudaStream_t st) {
    const int HD = A->head_dim;
    const int rows = A->n > 1 && A->qkv && A->rope && A->slices == 1; /* decode rows, one slice each */
    if ((A->n != 1 && !rows) || (HD != 64 && HD != 128 && HD != 256))
        return dp_set_error(DP_ERR_BACKEND, "CUDA attention: k_attn_split takes one query, or decode rows in one "
                                            "slice, of head dimension 64, 128 or 256 (not %d)", HD);
    if (A->slices > SH_MAX_SLICES || (A->slices > 1 && A->slices > A->splits))
        return dp_set_error(DP_ERR_BACKEND, "CUDA attention: %d key slices exceed the scratch for %d", A->slices,
                            A->slices > SH_MAX_SLICES ? SH_MAX_SLICES : A->splits);
    CU_TRY(dp_cu_launch(split_fn(HD), dim3(A->n_head, A->slices, A->n), dim3(SH_THREADS), 0, st, *A));
    return DP_OK;
}
