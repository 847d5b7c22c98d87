/* Sampling on the device with the host sampler's rules (src/sampler.c):
 * repetition penalty -> top-k -> top-p -> min-p -> temperature -> draw with
 * the uniform number the host drew from the sampler's stream, so a seed
 * replays the same tokens on every backend.
 *
 * Stage 1 (one CTA per 4096 logits): the penalised logits as monotone
 * 32-bit keys, a radix select (4 passes of 8 bits) finds the block's k-th
 * largest key, and the block's k best (ties to the lowest ids, as the host's
 * heap keeps them) are written in id order. Stage 2 (one CTA): the same
 * select over the blocks' candidates gives the global top k (the union of
 * every block's top k holds it), sorted by (logit desc, id asc) like the
 * host's qsort; the truncations and the draw then follow the host's code
 * step by step (float probabilities, double sums), so the same uniform
 * picks the same token except where expf differs in the last bit at a
 * boundary. Only the token id comes back. */
#include "kernels.cuh"

enum { SB_CHUNK = 4096, SB_THREADS = 256, SF_THREADS = 1024 };

__device__ __forceinline__ float key_float(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7FFFFFFFu) : ~k);
}

/* Exclusive prefix sum over the block (every thread calls it); ws: 33 ints. */
__device__ __forceinline__ int block_scan(int v, int *ws, int *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    int x = v;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(FULL_MASK, x, o);
        if (lane >= o) x += y;
    }
    __syncthreads();
    if (lane == 31) ws[warp] = x;
    __syncthreads();
    if (warp == 0) {
        int t = lane < nw ? ws[lane] : 0;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int y = __shfl_up_sync(FULL_MASK, t, o);
            if (lane >= o) t += y;
        }
        ws[lane] = t;
    }
    __syncthreads();
    *total = ws[nw - 1];
    return x - v + (warp > 0 ? ws[warp - 1] : 0);
}

/* The k-th largest key (1-based) of the n keys key_at(0..n-1), each thread
 * taking a contiguous range; *want = how many keys equal to it belong to
 * the top k. k <= n. */
template <typename KeyAt>
__device__ void radix_select(KeyAt key_at, int n, int k, int *hist, int *sel, uint32_t *T, int *want) {
    const int per = (n + blockDim.x - 1) / blockDim.x, i0 = threadIdx.x * per, i1 = min(n, i0 + per);
    uint32_t prefix = 0, mask = 0;
    int w = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int d = threadIdx.x; d < 256; d += blockDim.x) hist[d] = 0;
        __syncthreads();
        for (int i = i0; i < i1; i++) {
            const uint32_t key = key_at(i);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
        }
        __syncthreads();
        if (threadIdx.x < 32) {
            const int lane = threadIdx.x;
            int c[8], s = 0;
#pragma unroll
            for (int j = 0; j < 8; j++) s += (c[j] = hist[255 - 8 * lane - j]);
            int incl = s;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                const int y = __shfl_up_sync(FULL_MASK, incl, o);
                if (lane >= o) incl += y;
            }
            int ex = incl - s;
            if (ex < w && w <= incl) {
                for (int j = 0; j < 8; j++) {
                    if (w <= ex + c[j]) {
                        sel[0] = 255 - 8 * lane - j;
                        sel[1] = w - ex;
                        break;
                    }
                    ex += c[j];
                }
            }
        }
        __syncthreads();
        prefix |= (uint32_t)sel[0] << shift;
        mask |= 0xFFu << shift;
        w = sel[1];
        __syncthreads();
    }
    *T = prefix;
    *want = w;
}

/* Writes the top k of key_at/id_at (k-th largest T, want of its ties, the
 * lowest ids first) in index order to out_key/out_id. */
template <typename KeyAt, typename IdAt>
__device__ void gather_top(KeyAt key_at, IdAt id_at, int n, uint32_t T, int want, int *ws, uint32_t *out_key,
                           int *out_id) {
    const int per = (n + blockDim.x - 1) / blockDim.x, i0 = threadIdx.x * per, i1 = min(n, i0 + per);
    int eq = 0, tot;
    for (int i = i0; i < i1; i++) eq += key_at(i) == T;
    int eq_before = block_scan(eq, ws, &tot);
    int take = 0;
    for (int i = i0, e = eq_before; i < i1; i++) {
        const uint32_t key = key_at(i);
        if (key > T) take++;
        else if (key == T) take += e++ < want;
    }
    int pos = block_scan(take, ws, &tot);
    for (int i = i0, e = eq_before; i < i1; i++) {
        const uint32_t key = key_at(i);
        bool t = key > T;
        if (key == T) t = e++ < want;
        if (t) {
            out_key[pos] = key;
            out_id[pos] = id_at(i);
            pos++;
        }
    }
}

__global__ void __launch_bounds__(SB_THREADS) k_sample_blocks(const float *logits, int V, const DpSampleArgs *P,
                                                              uint32_t *ckey, int *cid) {
    pdl_trigger();
    pdl_wait();
    __shared__ uint32_t keys[SB_CHUNK];
    __shared__ int hist[256], sel[2], ws[33];
    const int b = blockIdx.x, base = b * SB_CHUNK, n = min(SB_CHUNK, V - base);
    const int K = P->top_k;
    for (int i = threadIdx.x; i < n; i += SB_THREADS) keys[i] = float_key(logits[base + i]);
    __syncthreads();
    if (P->penalty != 1.0f)
        for (int i = threadIdx.x; i < P->n_recent; i += SB_THREADS) {
            const int t = P->recent[i] - base;
            if (t >= 0 && t < n) {
                const float l = logits[base + t];
                keys[t] = float_key(l > 0 ? l / P->penalty : l * P->penalty);
            }
        }
    if (P->allow) { /* base is a multiple of 32: word w of the block is word base / 32 + w */
        const uint32_t *a = P->allow + base / 32;
        __syncthreads();
        for (int i = threadIdx.x; i < n; i += SB_THREADS)
            if (!((a[i >> 5] >> (i & 31)) & 1u)) keys[i] = float_key(-INFINITY);
    }
    __syncthreads();
    const int kb = min(K, n);
    uint32_t T;
    int want;
    auto key_at = [&](int i) { return keys[i]; };
    radix_select(key_at, n, kb, hist, sel, &T, &want);
    gather_top(key_at, [&](int i) { return base + i; }, n, T, want, ws, ckey + (size_t)b * K, cid + (size_t)b * K);
    for (int i = kb + threadIdx.x; i < K; i += SB_THREADS) {
        ckey[(size_t)b * K + i] = 0u;
        cid[(size_t)b * K + i] = -1;
    }
}

__global__ void __launch_bounds__(SF_THREADS) k_sample_final(int nblk, const DpSampleArgs *P, const uint32_t *ckey,
                                                             const int *cid, int *out) {
    pdl_trigger();
    pdl_wait();
    __shared__ uint32_t tk[DP_SAMPLE_KMAX];
    __shared__ int tid_[DP_SAMPLE_KMAX];
    __shared__ float pr[DP_SAMPLE_KMAX];
    __shared__ int hist[256], sel[2], ws[33], keep_s;
    const int K = P->top_k, n = nblk * K;
    uint32_t T;
    int want;
    auto key_at = [&](int i) { return __ldcg(ckey + i); };
    radix_select(key_at, n, K, hist, sel, &T, &want);
    gather_top(key_at, [&](int i) { return __ldcg(cid + i); }, n, T, want, ws, tk, tid_);
    __syncthreads();
    /* sort by (logit desc, id asc): bitonic over the next power of two */
    int np = 1;
    while (np < K) np <<= 1;
    for (int i = K + threadIdx.x; i < np; i += SF_THREADS) {
        tk[i] = 0u;
        tid_[i] = 0x7FFFFFFF;
    }
    __syncthreads();
    for (int size = 2; size <= np; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            for (int i = threadIdx.x; i < np; i += SF_THREADS) {
                const int j = i ^ stride;
                if (j > i) {
                    /* "before": larger key, or equal key and smaller id */
                    const bool ib = tk[i] > tk[j] || (tk[i] == tk[j] && tid_[i] < tid_[j]);
                    const bool desc = (i & size) == 0;
                    if (ib != desc) {
                        const uint32_t a = tk[i];
                        tk[i] = tk[j], tk[j] = a;
                        const int c = tid_[i];
                        tid_[i] = tid_[j], tid_[j] = c;
                    }
                }
            }
            __syncthreads();
        }
    /* the host's rules, src/sampler.c */
    if (P->temp <= 0.0f) {
        if (threadIdx.x == 0) *out = tid_[0];
        return;
    }
    const float l0 = key_float(tk[0]);
    for (int i = threadIdx.x; i < K; i += SF_THREADS) pr[i] = expf(key_float(tk[i]) - l0);
    __syncthreads();
    if (threadIdx.x == 0) {
        int m = K;
        double sum = 0;
        for (int i = 0; i < m; i++) sum += pr[i];
        if (P->top_p < 1.0f) {
            double acc = 0;
            int keep = m;
            for (int i = 0; i < m; i++) {
                acc += pr[i] / sum;
                if (acc >= P->top_p) {
                    keep = i + 1;
                    break;
                }
            }
            m = keep;
        }
        if (P->min_p > 0) {
            int keep = 1;
            while (keep < m && pr[keep] >= P->min_p * pr[0]) keep++;
            m = keep;
        }
        keep_s = m;
    }
    __syncthreads();
    const int m = keep_s;
    for (int i = threadIdx.x; i < m; i += SF_THREADS) pr[i] = expf((key_float(tk[i]) - l0) / P->temp);
    __syncthreads();
    if (threadIdx.x == 0) {
        double sum = 0;
        for (int i = 0; i < m; i++) sum += pr[i];
        const double u = P->u * sum;
        double acc = 0;
        int tok = tid_[m - 1];
        for (int i = 0; i < m; i++) {
            acc += pr[i];
            if (u < acc) {
                tok = tid_[i];
                break;
            }
        }
        *out = tok;
    }
}

int dp_cu_sample_blocks(int V) { return (V + SB_CHUNK - 1) / SB_CHUNK; }

int dp_cu_sample(const float *logits, int V, const DpSampleArgs *P, uint32_t *ckey, int *cid, int *out,
                 cudaStream_t st) {
    const int nb = dp_cu_sample_blocks(V);
    CU_TRY(dp_cu_launch(k_sample_blocks, dim3(nb), dim3(SB_THREADS), 0, st, logits, V, P, ckey, cid));
    CU_TRY(dp_cu_launch(k_sample_final, dim3(1), dim3(SF_THREADS), 0, st, nb, P, (const uint32_t *)ckey,
                        (const int *)cid, out));
    return DP_OK;
}
