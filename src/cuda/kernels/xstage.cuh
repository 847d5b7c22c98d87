/* The input vector of a decode matvec as its prologue prepares it, for the
 * integer kernel (qunit.cuh: k_matvec_w), which then quantises each window
 * into its layouts.
 *
 * x is RMS-normalised when the launch asks (norm_w), after Gemma's sandwich
 * post-norm + residual add (res_o: x_eff = x + rmsnorm(res_o) * (res_w +
 * off), written back by CTA 0 to x_out), with the roundings of k_rmsnorm /
 * k_postnorm_add and the summation order of block_ss, so that the fused and
 * the traced paths compute the same bits.
 *
 * Thread t takes positions 1024 k + 4 t .. + 3: window (128 positions)
 * warp + 8 k, lane l its positions 4 l .. 4 l + 3. Normalised vectors of up
 * to 3072 inputs are loaded at once and kept in registers, so the prologue
 * waits for one round trip to L2 instead of one per loop step; others (a
 * down projection) go in batches of four windows per warp. */
#ifndef DP_CUDA_XSTAGE_CUH
#define DP_CUDA_XSTAGE_CUH

#include "kernels.cuh"

/* XS_RW: windows per warp held in registers (up to 3072 inputs: Qwen3's
 * 2560 in one round trip; a fourth would push the gate/up kernels, which
 * hold their first weights meanwhile, into spills) */
enum { XS_THREADS = 256, XS_WARPS = XS_THREADS / 32, XS_RW = 3 };

__device__ __forceinline__ float4 xs_ld4(const float *p) { return *(const float4 *)p; }
__device__ __forceinline__ float4 xs_ldg4(const float *p) { return __ldg((const float4 *)p); }
__device__ __forceinline__ float xs_ss4(float4 v, float ss) {
    return fmaf(v.w, v.w, fmaf(v.z, v.z, fmaf(v.y, v.y, fmaf(v.x, v.x, ss))));
}
/* v * sc * (w + off), element by element, as k_rmsnorm rounds it */
__device__ __forceinline__ float4 xs_norm4(float4 v, float sc, const float *w, float off) {
    const float4 g = xs_ldg4(w);
    return make_float4(v.x * sc * (g.x + off), v.y * sc * (g.y + off), v.z * sc * (g.z + off), v.w * sc * (g.w + off));
}

/* The norm weights xs_stage reads (not produced by the previous kernel)
 * into L1, before griddepcontrol.wait: one 128-byte line per 8 lanes. */
__device__ __forceinline__ void xs_prefetch_l1(const MvLaunch &L) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (L.norm_w && !(lane & 7))
#pragma unroll 1 /* short code: every launch fetches its instructions anew */
        for (int pos = warp * 128 + lane * 4; pos < L.cols; pos += XS_WARPS * 128)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(L.norm_w + pos));
    if (L.res_o)
#pragma unroll 1
        for (int i = threadIdx.x * 32; i < L.cols; i += XS_THREADS * 32)
            asm volatile("prefetch.global.L1 [%0];" ::"l"(L.res_w + i));
}

/* 1 / rms over cols values held as the thread's XS_RW float4 (zeros past
 * cols), in the order of block_ss. */
__device__ __forceinline__ float xs_rms_regs(const float4 *v, int cols, float eps, float *red) {
    float ss = 0.0f;
#pragma unroll
    for (int k = 0; k < XS_RW; k++) ss = xs_ss4(v[k], ss);
    return 1.0f / sqrtf(block_sum(ss, red) / (float)cols + eps);
}

/* Calls put(pos, valid, v) for each of the warp's windows (every lane of a
 * warp together, valid: pos < cols) with the prepared values; xe: shared
 * memory for cols floats (x_eff of a wide sandwich norm; unused otherwise).
 * Every thread of the (XS_THREADS) block must call it. */
template <typename Put>
__device__ __forceinline__ void xs_stage(const MvLaunch &L, float *xe, float *red, Put put) {
    const int cols = L.cols, t = threadIdx.x;
    const float4 z4 = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if ((L.norm_w || L.res_o) && cols <= 4 * XS_RW * XS_THREADS) {
        float4 v[XS_RW], o[XS_RW];
#pragma unroll
        for (int k = 0; k < XS_RW; k++) {
            const int pos = 1024 * k + 4 * t;
            v[k] = pos < cols ? xs_ld4(L.x + pos) : z4;
            o[k] = L.res_o && pos < cols ? xs_ld4(L.res_o + pos) : z4;
        }
        if (L.res_o) {
            const float so = xs_rms_regs(o, cols, L.eps, red);
#pragma unroll
            for (int k = 0; k < XS_RW; k++) {
                const int pos = 1024 * k + 4 * t;
                if (pos < cols) {
                    const float4 w = xs_ldg4(L.res_w + pos);
                    v[k].x = postnorm_add(v[k].x, o[k].x, so, w.x, L.norm_off);
                    v[k].y = postnorm_add(v[k].y, o[k].y, so, w.y, L.norm_off);
                    v[k].z = postnorm_add(v[k].z, o[k].z, so, w.z, L.norm_off);
                    v[k].w = postnorm_add(v[k].w, o[k].w, so, w.w, L.norm_off);
                    if (blockIdx.x == 0) *(float4 *)(L.x_out + pos) = v[k];
                }
            }
        }
        const float sc = xs_rms_regs(v, cols, L.eps, red);
#pragma unroll
        for (int k = 0; k < XS_RW; k++) {
            if (1024 * k >= cols) break; /* block-uniform */
            const int pos = 1024 * k + 4 * t;
            put(pos, pos < cols, pos < cols && L.norm_w ? xs_norm4(v[k], sc, L.norm_w + pos, L.norm_off) : v[k]);
        }
        return;
    }
    float sc = 1.0f;
    const float *xsrc = L.x;
    if (L.res_o) {
        const float so = block_rms_scale(L.res_o, cols, L.eps, red);
        for (int i = t; i < cols; i += XS_THREADS) xe[i] = postnorm_add(L.x[i], L.res_o[i], so, L.res_w[i], L.norm_off);
        __syncthreads();
        if (blockIdx.x == 0)
            for (int i = t; i < cols; i += XS_THREADS) L.x_out[i] = xe[i];
        sc = block_rms_scale(xe, cols, L.eps, red);
        xsrc = xe;
    } else if (L.norm_w) {
        sc = block_rms_scale(L.x, cols, L.eps, red);
    }
    for (int k0 = 0; 1024 * k0 < cols; k0 += 4) {
        float4 v[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const int pos = 1024 * (k0 + k) + 4 * t;
            v[k] = pos < cols ? xs_ld4(xsrc + pos) : z4;
        }
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (1024 * (k0 + k) >= cols) break; /* block-uniform */
            const int pos = 1024 * (k0 + k) + 4 * t;
            put(pos, pos < cols, L.norm_w && pos < cols ? xs_norm4(v[k], sc, L.norm_w + pos, L.norm_off) : v[k]);
        }
    }
}

#endif
