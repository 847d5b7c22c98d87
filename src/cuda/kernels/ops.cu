/* The small per-position operations of the forward pass: embedding lookup,
 * RMSNorm (plain, and the sandwich post-norm fused with its residual add),
 * per-head q/k norm + RoPE + KV-cache store, the gated activation, adds,
 * f16 conversions, dequantisation, argmax, and the KV page copy. */
#include "dequant.cuh"
#include "kernels.cuh"

static int blocks_for(long long n, int threads) {
    long long b = (n + threads - 1) / threads;
    return (int)(b > 65535LL * 16 ? 65535LL * 16 : b);
}

/* ------------------------------------------------------------ embedding */

__global__ void k_embed(const DMat W, const int *rows, float scale, float *x, unsigned long long *keys, int n_keys) {
    pdl_trigger();
    pdl_wait();
    const int i = blockIdx.x, u = blockIdx.y * blockDim.x + threadIdx.x, U = W.cols >> 5;
    if (keys && i == 0 && blockIdx.y == 0)
        for (int r = threadIdx.x; r < n_keys; r += blockDim.x) keys[r] = 0;
    if (u >= U) return;
    float y[32];
    deq_unit(W, rows[ROW_INTS * i + ROW_TOK], u, y);
    float4 *o = (float4 *)(x + (size_t)i * W.cols + u * 32);
#pragma unroll
    for (int k = 0; k < 8; k++) {
        float4 v = make_float4(y[4 * k], y[4 * k + 1], y[4 * k + 2], y[4 * k + 3]);
        if (scale != 1.0f) v.x *= scale, v.y *= scale, v.z *= scale, v.w *= scale;
        o[k] = v;
    }
}

int dp_cu_embed(const DMat *embd, const int *rows, int n, float scale, float *x, unsigned long long *keys, int n_keys,
                cudaStream_t st) {
    const int U = embd->cols / 32;
    dim3 grid(n, (U + 63) / 64);
    CU_TRY(dp_cu_launch(k_embed, dim3(grid), dim3(64), 0, st, *embd, rows, scale, x, keys, n_keys));
    return DP_OK;
}

/* The input of a decode step queued before the host has seen the previous
 * step's token: the next position, and the token the previous step's
 * greedy argmax chose (its key is zeroed by k_embed after this kernel). */
__global__ void k_chain_input(int *rows, const unsigned long long *key) {
    pdl_trigger();
    pdl_wait();
    rows[ROW_POS] += 1;
    rows[ROW_TOK] = key_token(*key);
}

int dp_cu_chain_input(int *rows, const unsigned long long *key, cudaStream_t st) {
    CU_TRY(dp_cu_launch(k_chain_input, dim3(1), dim3(1), 0, st, rows, key));
    return DP_OK;
}

/* -------------------------------------------------------------- rmsnorm */

enum { RMS_THREADS = 256, RMS_REGS = 4 }; /* rows of up to 4 RMS_REGS RMS_THREADS values stay in registers */

__global__ void k_rmsnorm(float *out, __half *out16, const float *x, const float *w, float off, int d, float eps) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    const float *xi = x + (size_t)blockIdx.x * d;
    const float sc = block_rms_scale(xi, d, eps, red);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float v = xi[j] * sc * (w[j] + off);
        if (out) out[(size_t)blockIdx.x * d + j] = v;
        if (out16) out16[(size_t)blockIdx.x * d + j] = __float2half_rn(v);
    }
}

/* parts_at for four values at once (16-byte loads), in the same order */
__device__ __forceinline__ float4 parts_sum4(const KParts &kp, size_t i) {
    float4 a = *(const float4 *)(kp.p + i);
    for (int j = 1; j < kp.n; j++) {
        const float4 b = *(const float4 *)(kp.p + (size_t)j * kp.stride + i);
        a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
    }
    return a;
}

/* The same for rows of d % 4 == 0 values, at most 4 RMS_REGS RMS_THREADS:
 * each thread loads its float4s once (the positions and the order of
 * block_ss, so the sums are the same) and keeps them for the output, one
 * round trip to memory instead of two. With kp.n > 0, x_out = x: each row
 * first takes x + the parts' sum (the residual add of a split product) and
 * writes it back. */
__global__ void __launch_bounds__(RMS_THREADS) k_rmsnorm_regs(float *out, __half *out16, const float *x,
                                                               float *x_out, const KParts kp, const float *w,
                                                               float off, int d, float eps) {
    pdl_trigger();
    /* the weights (no kernel writes them) before the wait: their loads
     * overlap the previous kernel or at least the row's */
    float4 gw[RMS_REGS];
#pragma unroll
    for (int k = 0; k < RMS_REGS; k++) {
        const int b = 4 * (threadIdx.x + k * RMS_THREADS);
        gw[k] = b < d ? __ldg((const float4 *)(w + b)) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    pdl_wait();
    __shared__ float red[32];
    const size_t row = (size_t)blockIdx.x * d;
    float4 v[RMS_REGS];
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < RMS_REGS; k++) {
        const int b = 4 * (threadIdx.x + k * RMS_THREADS);
        v[k] = b < d ? *(const float4 *)(x + row + b) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (kp.n && b < d) {
            const float4 a = parts_sum4(kp, (size_t)blockIdx.x * kp.ld + b);
            v[k].x += a.x, v[k].y += a.y, v[k].z += a.z, v[k].w += a.w;
            *(float4 *)(x_out + row + b) = v[k];
        }
    }
#pragma unroll
    for (int k = 0; k < RMS_REGS; k++) {
        ss = fmaf(v[k].x, v[k].x, ss);
        ss = fmaf(v[k].y, v[k].y, ss);
        ss = fmaf(v[k].z, v[k].z, ss);
        ss = fmaf(v[k].w, v[k].w, ss);
    }
    ss = block_sum(ss, red);
    const float sc = 1.0f / sqrtf(ss / (float)d + eps);
#pragma unroll
    for (int k = 0; k < RMS_REGS; k++) {
        const int b = 4 * (threadIdx.x + k * RMS_THREADS);
        if (b >= d) break;
        const float4 g = gw[k];
        const float4 y = make_float4(v[k].x * sc * (g.x + off), v[k].y * sc * (g.y + off), v[k].z * sc * (g.z + off),
                                     v[k].w * sc * (g.w + off));
        if (out) *(float4 *)(out + row + b) = y;
        if (out16) {
            *(__half2 *)(out16 + row + b) = __floats2half2_rn(y.x, y.y);
            *(__half2 *)(out16 + row + b + 2) = __floats2half2_rn(y.z, y.w);
        }
    }
}

int dp_cu_rmsnorm(float *out, __half *out16, const float *x, const float *w, float off, int n, int d, float eps,
                  cudaStream_t st) {
    /* the vector loads need 16-byte aligned rows and weights (d % 4 keeps
     * every row as aligned as the first) */
    const int aligned = d % 4 == 0 && ((uintptr_t)x | (uintptr_t)w | (uintptr_t)out | (uintptr_t)out16) % 16 == 0;
    const KParts none = {NULL, 0, 0, 0};
    if (aligned && d <= 4 * RMS_REGS * RMS_THREADS)
        CU_TRY(dp_cu_launch(k_rmsnorm_regs, dim3(n), dim3(RMS_THREADS), 0, st, out, out16, x, (float *)NULL, none, w,
                            off, d, eps));
    else
        CU_TRY(dp_cu_launch(k_rmsnorm, dim3(n), dim3(RMS_THREADS), 0, st, out, out16, x, w, off, d, eps));
    return DP_OK;
}

/* x += the parts' sum, n rows of d (where the norm's vector loads cannot). */
__global__ void k_add_parts(float *x, const KParts kp, int d, long long total) {
    pdl_trigger();
    pdl_wait();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / d;
        x[i] += parts_at(kp.p, kp.n, kp.stride, r * kp.ld + (i - r * d));
    }
}

int dp_cu_rmsnorm_parts(float *out, __half *out16, float *x, const KParts *kp, const float *w, float off, int n,
                        int d, float eps, cudaStream_t st) {
    if (!kp || kp->n == 0) return dp_cu_rmsnorm(out, out16, x, w, off, n, d, eps, st);
    const int aligned = d % 4 == 0 && kp->ld % 4 == 0 && kp->stride % 4 == 0 &&
                        ((uintptr_t)x | (uintptr_t)w | (uintptr_t)out | (uintptr_t)out16 | (uintptr_t)kp->p) % 16 == 0;
    if (aligned && d <= 4 * RMS_REGS * RMS_THREADS) {
        CU_TRY(dp_cu_launch(k_rmsnorm_regs, dim3(n), dim3(RMS_THREADS), 0, st, out, out16, (const float *)x, x, *kp,
                            w, off, d, eps));
        return DP_OK;
    }
    const long long total = (long long)n * d;
    CU_TRY(dp_cu_launch(k_add_parts, dim3(blocks_for(total, 256)), dim3(256), 0, st, x, *kp, d, total));
    return dp_cu_rmsnorm(out, out16, x, w, off, n, d, eps, st);
}

__global__ void k_postnorm_add(float *x, const float *o, float *o_normed, const float *w, float off, int d,
                               float eps) {
    pdl_trigger();
    pdl_wait();
    __shared__ float red[32];
    const float *oi = o + (size_t)blockIdx.x * d;
    float *xi = x + (size_t)blockIdx.x * d;
    const float sc = block_rms_scale(oi, d, eps, red);
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        const float oj = oi[j]; /* o_normed may be o itself: read before writing */
        xi[j] = postnorm_add(xi[j], oj, sc, w[j], off);
        if (o_normed) o_normed[(size_t)blockIdx.x * d + j] = __fmul_rn(__fmul_rn(oj, sc), __fadd_rn(w[j], off));
    }
}

int dp_cu_postnorm_add(float *x, const float *o, float *o_normed, const float *w, float off, int n, int d, float eps,
                       cudaStream_t st) {
    CU_TRY(dp_cu_launch(k_postnorm_add, dim3(n), dim3(256), 0, st, x, o, o_normed, w, off, d, eps));
    return DP_OK;
}

/* ---------------------------------------------- q/k norm, RoPE, KV store */

enum { ROPE_MAX_HD = 256, ROPE_WARPS = 8 };

/* One warp per (row, head): a prompt pass has rows x heads small items
 * (512 x 48 for Qwen3-4B), and a CTA per item spent its time in barriers
 * and in waves of CTAs (one warp computes the norm while the others
 * wait). The warp keeps its head in a slice of shared memory; the
 * arithmetic is the fused decode attention's (warp_rms_scale, rope_pair). */
__global__ void __launch_bounds__(32 * ROPE_WARPS) k_qk_rope(const RopeLaunch R) {
    pdl_trigger();
    pdl_wait();
    __shared__ float vs[ROPE_WARPS][ROPE_MAX_HD];
    const int lane = threadIdx.x & 31, HD = R.head_dim;
    const int NH = R.n_head, NKV = R.n_head_kv, H = NH + 2 * NKV, Q = NH * HD, KV = NKV * HD;
    const long long item = (long long)blockIdx.x * ROPE_WARPS + (threadIdx.x >> 5);
    if (item >= (long long)R.n * H) return; /* warp-uniform, as every exit below */
    const int z = (int)(item / H), hidx = (int)(item % H);
    float *v = vs[threadIdx.x >> 5];
    if (R.kv.rows[ROW_INTS * z + ROW_SEQ] < 0) return; /* a padding row */
    const int p = R.kv.rows[ROW_INTS * z + ROW_POS];
    const size_t at = (size_t)kv_row(kv_table(R.kv, z), p, R.kv.page_shift) * KV; /* the cache row */
    /* head hidx of row z: from the joint product (its bias still to add; its
     * k-parts summed) or q, k, v */
    const float *row = R.qkv + (size_t)z * R.ld;
#define QKV_AT(i) parts_at(row, R.nparts, R.pstride, (i))
    if (hidx >= NH + NKV) { /* a V head: store it */
        const int vh = hidx - NH - NKV;
        for (int d = lane; d < HD; d += 32) {
            const int i = vh * HD + d;
            const float x = R.qkv ? (R.bv ? QKV_AT(Q + KV + i) + R.bv[i] : QKV_AT(Q + KV + i)) : R.v[(size_t)z * KV + i];
            R.vc[at + i] = __float2half_rn(x);
        }
        return;
    }
    const bool isq = hidx < NH;
    const int hh = isq ? hidx : hidx - NH;
    float *vec = isq ? R.q + (size_t)z * Q + hh * HD : R.k + (size_t)z * KV + hh * HD;
    if (R.qkv) {
        const int o = (isq ? 0 : Q) + hh * HD;
        const float *b = isq ? R.bq : R.bk;
        for (int d = lane; d < HD; d += 32) v[d] = b ? QKV_AT(o + d) + b[hh * HD + d] : QKV_AT(o + d);
    } else {
        for (int d = lane; d < HD; d += 32) v[d] = vec[d];
    }
    __syncwarp();
    const float *nw = isq ? R.q_norm : R.k_norm;
    if (nw) {
        const float sc = warp_rms_scale(v, HD, R.eps);
        for (int d = lane; d < HD; d += 32) v[d] = v[d] * sc * (nw[d] + R.norm_off);
        float *tr = isq ? R.q_normed : R.k_normed;
        if (tr) {
            float *o = isq ? tr + (size_t)z * Q + hh * HD : tr + (size_t)z * KV + hh * HD;
            for (int d = lane; d < HD; d += 32) o[d] = v[d];
        }
        __syncwarp();
    }
    for (int t = lane; t < R.n_rot / 2; t += 32) rope_pair(v, t, R.n_rot, R.neox, R.inv_freq, p, R.rope_ms);
    __syncwarp();
    for (int d = lane; d < HD; d += 32) {
        vec[d] = v[d];
        if (!isq) R.kc[at + hh * HD + d] = __float2half_rn(v[d]);
    }
}
#undef QKV_AT

int dp_cu_qk_rope_store(const RopeLaunch *R, cudaStream_t st) {
    if (R->head_dim > ROPE_MAX_HD)
        return dp_set_error(DP_ERR_BACKEND, "CUDA: head dimension %d > %d is not supported", R->head_dim, ROPE_MAX_HD);
    const long long items = (long long)R->n * (R->n_head + 2 * R->n_head_kv);
    CU_TRY(dp_cu_launch(k_qk_rope, dim3((unsigned)((items + ROPE_WARPS - 1) / ROPE_WARPS)), dim3(32 * ROPE_WARPS), 0,
                        st, *R));
    return DP_OK;
}

/* ---------------------------------------------------------- elementwise */

__global__ void k_gated_act(float *out, const float *gate, const float *up, long long n, int act) {
    pdl_trigger();
    pdl_wait();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out[i] = act_fn(act, gate[i], up[i]);
}

int dp_cu_gated_act(float *out, const float *gate, const float *up, long long n, int act, cudaStream_t st) {
    CU_TRY(dp_cu_launch(k_gated_act, dim3(blocks_for(n, 256)), dim3(256), 0, st, out, gate, up, n, act));
    return DP_OK;
}

__global__ void k_softcap(float *x, long long n, float cap) {
    pdl_trigger();
    pdl_wait();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] = softcap_f(x[i], cap);
}

int dp_cu_softcap(float *x, long long n, float cap, cudaStream_t st) {
    CU_TRY(dp_cu_launch(k_softcap, dim3(blocks_for(n, 256)), dim3(256), 0, st, x, n, cap));
    return DP_OK;
}

__global__ void k_add(float *x, const float *y, long long n) {
    pdl_trigger();
    pdl_wait();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] += y[i];
}

int dp_cu_add(float *x, const float *y, long long n, cudaStream_t st) {
    CU_TRY(dp_cu_launch(k_add, dim3(blocks_for(n, 256)), dim3(256), 0, st, x, y, n));
    return DP_OK;
}

__global__ void k_add_bias(float *x, const float *b, long long n, int d) {
    pdl_trigger();
    pdl_wait();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        x[i] += b[i % d];
}

int dp_cu_add_bias(float *x, const float *b, int n, int d, cudaStream_t st) {
    long long t = (long long)n * d;
    CU_TRY(dp_cu_launch(k_add_bias, dim3(blocks_for(t, 256)), dim3(256), 0, st, x, b, t, d));
    return DP_OK;
}

__global__ void k_to_f16(__half *dst, const float *src, long long n) {
    pdl_trigger();
    pdl_wait();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = __float2half_rn(src[i]);
}

int dp_cu_to_f16(__half *dst, const float *src, long long n, cudaStream_t st) {
    CU_TRY(dp_cu_launch(k_to_f16, dim3(blocks_for(n, 256)), dim3(256), 0, st, dst, src, n));
    return DP_OK;
}

/* ---------------------------------------------------------- dequantise */

/* A thread per 32 weights (deq_unit); a warp's 32 units are consecutive in
 * dst (its rows are contiguous), so the results go through shared memory
 * and leave as whole 512-byte runs a store instruction: each thread storing
 * its own 64 (f16) or 128 bytes gave 16 bytes a lane at a 64-byte stride,
 * sixteen lines per store. Rows padded by one element: conflict-free
 * writes. */
template <typename OUT>
__global__ void __launch_bounds__(128) k_dequant(const DMat W, int r0, int nrows, OUT *dst) {
    enum { NV = (int)sizeof(OUT) * 2 }; /* 16-byte elements per unit of 32 values */
    __shared__ uint4 stage[4][32 * (NV + 1)];
    pdl_trigger();
    pdl_wait();
    const int lane = threadIdx.x & 31;
    uint4 *sw = stage[threadIdx.x >> 5];
    const int U = W.cols >> 5;
    const long long total = (long long)nrows * U;
    /* t - lane: the warp's first unit (the loop is warp-uniform) */
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t - lane < total;
         t += (long long)gridDim.x * blockDim.x) {
        if (t < total) {
            const int r = (int)(t / U), u = (int)(t % U);
            float y[32];
            deq_unit(W, r0 + r, u, y);
            uint4 pk[NV];
            if (sizeof(OUT) == 2) {
                __half2 *h = (__half2 *)pk;
#pragma unroll
                for (int k = 0; k < 16; k++) h[k] = __floats2half2_rn(y[2 * k], y[2 * k + 1]);
            } else {
                float4 *f = (float4 *)pk;
#pragma unroll
                for (int k = 0; k < 8; k++) f[k] = make_float4(y[4 * k], y[4 * k + 1], y[4 * k + 2], y[4 * k + 3]);
            }
#pragma unroll
            for (int k = 0; k < NV; k++) sw[lane * (NV + 1) + k] = pk[k];
        }
        __syncwarp();
        const long long w0 = t - lane, nv = (total - w0 < 32 ? total - w0 : 32) * NV;
        uint4 *o4 = (uint4 *)dst + w0 * NV;
#pragma unroll
        for (int k = 0; k < NV; k++) {
            const int e = k * 32 + lane; /* the warp's e-th element */
            if (e < nv) o4[e] = sw[(e / NV) * (NV + 1) + e % NV];
        }
        __syncwarp();
    }
}

int dp_cu_dequant_f16(const DMat *W, int r0, int nrows, __half *dst, cudaStream_t st) {
    long long total = (long long)nrows * (W->cols / 32);
    CU_TRY(dp_cu_launch(k_dequant<__half>, dim3(blocks_for(total, 128)), dim3(128), 0, st, *W, r0, nrows, dst));
    return DP_OK;
}

int dp_cu_dequant_f32(const DMat *W, int r0, int nrows, float *dst, cudaStream_t st) {
    long long total = (long long)nrows * (W->cols / 32);
    CU_TRY(dp_cu_launch(k_dequant<float>, dim3(blocks_for(total, 128)), dim3(128), 0, st, *W, r0, nrows, dst));
    return DP_OK;
}

/* --------------------------------------------------------------- argmax */

__global__ void k_argmax(const float *x, int n, unsigned long long *key) {
    pdl_trigger();
    pdl_wait();
    __shared__ unsigned long long best_s[32];
    unsigned long long best = 0;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const unsigned long long k = argmax_key(x[i], i);
        best = k > best ? k : best;
    }
    for (int o = 16; o > 0; o >>= 1) {
        unsigned long long other = __shfl_xor_sync(FULL_MASK, best, o);
        best = other > best ? other : best;
    }
    if ((threadIdx.x & 31) == 0) best_s[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); w++) best = best_s[w] > best ? best_s[w] : best;
        atomicMax(key, best);
    }
}

int dp_cu_argmax(const float *x, int n, unsigned long long *key, cudaStream_t st) {
    int blocks = (n + 1023) / 1024;
    if (blocks > 264) blocks = 264;
    CU_TRY(dp_cu_launch(k_argmax, dim3(blocks), dim3(256), 0, st, x, n, key));
    return DP_OK;
}

/* One key per row: CTA (row, part) folds its share of the row, then one
 * atomicMax per CTA. */
__global__ void k_argmax_rows(const float *x, int d, unsigned long long *keys) {
    pdl_trigger();
    pdl_wait();
    __shared__ unsigned long long best_s[8];
    const float *xr = x + (size_t)blockIdx.x * d;
    unsigned long long best = 0;
    for (int i = blockIdx.y * blockDim.x + threadIdx.x; i < d; i += gridDim.y * blockDim.x) {
        const unsigned long long k = argmax_key(xr[i], i);
        best = k > best ? k : best;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long other = __shfl_xor_sync(FULL_MASK, best, o);
        best = other > best ? other : best;
    }
    block_argmax<8>(best, best_s, keys + blockIdx.x);
}

int dp_cu_argmax_rows(const float *x, int n, int d, unsigned long long *keys, cudaStream_t st) {
    const int parts = (d + 8191) / 8192;
    CU_TRY(dp_cu_launch(k_argmax_rows, dim3(n, parts > 32 ? 32 : parts), dim3(256), 0, st, x, d, keys));
    return DP_OK;
}

/* ----------------------------------------------------------- KV pages */

/* Copy on write of a shared page: grid (layer, K or V), 16 bytes a thread. */
__global__ void k_copy_page(__half *kc, __half *vc, size_t layer_elems, size_t page_elems, int src, int dst) {
    pdl_trigger();
    pdl_wait();
    __half *base = (blockIdx.y ? vc : kc) + (size_t)blockIdx.x * layer_elems;
    const uint4 *from = (const uint4 *)(base + (size_t)src * page_elems);
    uint4 *to = (uint4 *)(base + (size_t)dst * page_elems);
    for (size_t i = threadIdx.x; i < page_elems / 8; i += blockDim.x) to[i] = from[i];
}

int dp_cu_copy_page(__half *kc, __half *vc, int n_layer, size_t layer_elems, size_t page_elems, int src, int dst,
                    cudaStream_t st) {
    if (page_elems % 8)
        return dp_set_error(DP_ERR_BACKEND, "CUDA: a KV page of %zu halves is not a whole number of 16-byte pieces",
                            page_elems);
    CU_TRY(dp_cu_launch(k_copy_page, dim3(n_layer, 2), dim3(256), 0, st, kc, vc, layer_elems, page_elems, src, dst));
    return DP_OK;
}

/* ------------------------------------------------------ batched decode */

__global__ void k_gather_rows(float *dst, const float *src, const int *rows, int d) {
    pdl_trigger();
    pdl_wait();
    const float *from = src + (size_t)rows[blockIdx.x] * d;
    float *to = dst + (size_t)blockIdx.x * d;
    for (int i = threadIdx.x; i < d; i += blockDim.x) to[i] = from[i];
}

int dp_cu_gather_rows(float *dst, const float *src, const int *rows, int n, int d, cudaStream_t st) {
    CU_TRY(dp_cu_launch(k_gather_rows, dim3(n), dim3(256), 0, st, dst, src, rows, d));
    return DP_OK;
}

__global__ void k_gated_act_f16(__half *out16, const float *gate, const float *up, long long n, int act) {
    pdl_trigger();
    pdl_wait();
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        out16[i] = __float2half_rn(act_fn(act, gate[i], up[i]));
}

int dp_cu_gated_act_f16(__half *out16, const float *gate, const float *up, long long n, int act, cudaStream_t st) {
    CU_TRY(dp_cu_launch(k_gated_act_f16, dim3(blocks_for(n, 256)), dim3(256), 0, st, out16, gate, up, n, act));
    return DP_OK;
}

__global__ void k_gated_act_joint_f16(__half *out16, const float *gu, int d, int act) {
    pdl_trigger();
    pdl_wait();
    const float *g = gu + (size_t)blockIdx.y * 2 * d;
    __half *o = out16 + (size_t)blockIdx.y * d;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < d; i += gridDim.x * blockDim.x)
        o[i] = __float2half_rn(act_fn(act, g[i], g[d + i]));
}

/* The same four values a thread: 16-byte loads of gate and up, one 8-byte
 * store (rows of d % 4 == 0: a prompt pass moves ~110 KB a row here). */
__global__ void k_gated_act_joint_f16x4(__half *out16, const float *gu, int d, int act) {
    pdl_trigger();
    pdl_wait();
    const float4 *g = (const float4 *)(gu + (size_t)blockIdx.y * 2 * d), *u = g + d / 4;
    uint2 *o = (uint2 *)(out16 + (size_t)blockIdx.y * d);
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < d / 4; i += gridDim.x * blockDim.x) {
        const float4 a = g[i], b = u[i];
        const __half2 lo = __floats2half2_rn(act_fn(act, a.x, b.x), act_fn(act, a.y, b.y));
        const __half2 hi = __floats2half2_rn(act_fn(act, a.z, b.z), act_fn(act, a.w, b.w));
        o[i] = make_uint2(*(const uint32_t *)&lo, *(const uint32_t *)&hi);
    }
}

/* act(gate) * up in f32 over each joint row's up values (a traced pass's
 * trace point: the values k_gated_act_joint_f16 rounds; a thread reads and
 * writes only its own elements) */
__global__ void k_gated_act_joint_inplace(float *gu, int d, int act) {
    pdl_trigger();
    pdl_wait();
    float *g = gu + (size_t)blockIdx.y * 2 * d;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < d; i += gridDim.x * blockDim.x)
        g[d + i] = act_fn(act, g[i], g[d + i]);
}

int dp_cu_gated_act_joint_inplace(float *gu, int n, int d, int act, cudaStream_t st) {
    CU_TRY(dp_cu_launch(k_gated_act_joint_inplace, dim3(blocks_for(d, 256), n), dim3(256), 0, st, gu, d, act));
    return DP_OK;
}

int dp_cu_gated_act_joint_f16(__half *out16, const float *gu, int n, int d, int act, cudaStream_t st) {
    if (d % 4 == 0 && ((uintptr_t)gu % 16 | (uintptr_t)out16 % 8) == 0)
        CU_TRY(dp_cu_launch(k_gated_act_joint_f16x4, dim3(blocks_for(d / 4, 256), n), dim3(256), 0, st, out16, gu, d,
                            act));
    else
        CU_TRY(dp_cu_launch(k_gated_act_joint_f16, dim3(blocks_for(d, 256), n), dim3(256), 0, st, out16, gu, d, act));
    return DP_OK;
}
