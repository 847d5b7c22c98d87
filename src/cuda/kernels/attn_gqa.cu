/* Decode attention over long contexts for grouped-query heads: k_attn_gqa.
 *
 * k_attn_split gives every query head its own CTAs, so the G query heads of
 * a KV head read the same K/V rows G times (from L2): at depth 4096 the
 * Qwen2.5-3B shape moves 32 MB through L2 per layer for 4 MB of cache, in
 * chains of dependent loads after griddepcontrol.wait. Here a CTA takes all
 * G <= 8 query heads of one KV head and one slice of the visible keys,
 * reads each K/V row once, and does both products on the tensor cores
 * (mma.sync m16n8k16, f16 inputs, f32 accumulators):
 *
 * - before the wait it copies its slice's K and V rows (earlier steps wrote
 *   them) into shared memory with cp.async, GQ_TK rows at a time, and reads
 *   the q/k norm weights and its RoPE rotation; with the RoPE fused in, the
 *   row of this step is not copied (the cache may not hold it yet) but
 *   written from the freshly rotated k / v;
 * - after it: the q/k norm and RoPE of the G query heads and of this
 *   step's k, the K/V store of the new row (slice 0 of each KV head); the
 *   RoPE writes the rotated q straight into the scores' B operand;
 * - scores S^T = K Q^T: A = 16 keys x 16 dimensions of K (ldmatrix), B = 16
 *   dimensions x 8 heads of q (ldmatrix from shared memory), split into an
 *   f16 high part and an f16 low part (q = hi + lo to ~2^-22, two mma per
 *   step, in two accumulator chains), so the scores keep f32
 *   accuracy: a warp takes 16 keys of the tile;
 * - an online softmax per head over the tile (warp shuffles, then the 8
 *   warps through shared memory), the weights P again as f16 hi + lo: rows
 *   0..7 of the 16-row A operand are the high parts of the 8 heads, rows
 *   8..15 the low parts, so one mma gives both and the output is their sum;
 * - O = P V: B = 16 keys x 8 dimensions of V (ldmatrix.trans), each warp
 *   HD / 64 tiles of 8 output dimensions;
 * - with one slice the CTA writes the output; otherwise each writes (m, l,
 *   unnormalised o) for its heads. Where every slice of the grid fits on
 *   the GPU at once (the host asks the occupancy API), the slices of a KV
 *   head then wait for each other (a release-add and an acquire-poll on a
 *   counter) and each combines 1 / Sa of the outputs with one round of
 *   loads (gq_combine_spread); otherwise the last slice to finish (atomic
 *   counter) combines them all. No clusters: a cluster version of this
 *   kernel waited in the graph for 8 free CTA slots in one GPC.
 *
 * Each CTA runs this code once (one tile of ~64 keys at depth 4096), so its
 * instructions come cold from L2 and the length of the executed path is
 * time: per-CTA %globaltimer stamps showed the path after the wait at ~5
 * bytes of code per ns. Hence loops kept rolled (`#pragma unroll 1`),
 * float4 loads, sincosf (rope_cs), __expf, and q read as an ldmatrix
 * operand instead of 32 registers split per thread (about half the code
 * and half the registers, BENCHMARKS.md).
 *
 * Taken for decode steps whose context the forward cuts into several slices
 * (dp_cu_attention_slices > 1) and G in 2..8. Settings (settings.c):
 * DOPPLER_CUDA_ATTN_GQA_MUL (slices per KV head as a multiple of
 * k_attn_split's per query head, the multiple at most G, the slices at most
 * GQ_MAXS), DOPPLER_CUDA_ATTN_GQA_MINK
 * (fewest keys per slice: the device cuts fewer slices at short contexts
 * and in windows), DOPPLER_CUDA_ATTN_GQA_SPIN=0 (always the last-slice
 * combine). Reading each K/V row once per KV head instead of once per query
 * head is what makes long contexts fast on grouped-query models
 * (BENCHMARKS.md). */
#include <math.h>
#include <stdint.h>
#include "kernels.cuh"

enum { GQ_THREADS = 256, GQ_NW = GQ_THREADS / 32, GQ_TK = 16 * GQ_NW, GQ_MAXS = 128, GQ_PP = GQ_TK + 8 };

/* dynamic shared memory: K and V tiles (rows padded by 16 bytes), then P (16 rows) */
__host__ __device__ constexpr size_t gq_smem(int HD) {
    return (2 * (size_t)GQ_TK * (HD + 8) + 16 * (size_t)GQ_PP) * sizeof(__half);
}

/* A 16-byte piece of a K/V row into shared memory, L2 evict-first as the
 * weights (each row is read once per step, and keeping it would push out
 * what the next launches read again) */
__device__ __forceinline__ void gq_cp16(void *dst, const void *src, uint64_t pol) {
    asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;" ::"r"(
                     (unsigned)__cvta_generic_to_shared(dst)), "l"(src), "l"(pol)
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
}
__device__ __forceinline__ void ldsm_x2_t(uint32_t *r, const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];"
                 : "=r"(r[0]), "=r"(r[1])
                 : "r"((unsigned)__cvta_generic_to_shared(p)));
}
/* c += a (16 x 16, row) * b (16 x 8, col), f16 in, f32 accumulators */
__device__ __forceinline__ void mma16816(float *c, const uint32_t *a, const uint32_t *b) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
/* (a, b) as f16 high parts and the f16 remainders */
__device__ __forceinline__ void split_h2(float a, float b, uint32_t *hi, uint32_t *lo) {
    const __half2 h = __floats2half2_rn(a, b);
    const float2 hf = __half22float2(h);
    const __half2 l = __floats2half2_rn(a - hf.x, b - hf.y);
    *hi = *(const uint32_t *)&h;
    *lo = *(const uint32_t *)&l;
}

/* a as an f16 high part and the f16 remainder */
__device__ __forceinline__ void split_h1(float a, __half *hi, __half *lo) {
    const __half h = __float2half_rn(a);
    *hi = h;
    *lo = __float2half_rn(a - __half2float(h));
}

__device__ __forceinline__ void red_release_add(int *p, int v) {
    asm volatile("red.release.gpu.global.add.s32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int ld_acquire(const int *p) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

/* After every slice has written its (m, l, o): outputs b0 .. b0 + n - 1
 * (float4 units of KV head g's heads; n a power of two <= GQ_THREADS)
 * combined over the Sa slices in one round of loads: thread (j, q) = (tid
 * mod n, tid / n) reads slice q's m, l and o for output j (and q + Q, ...);
 * the maxima and sums over q go through warp shuffles (lanes j, j + n, ...
 * of a warp) and then shared memory (one slot per warp or per q), in a
 * fixed order. */
template <int HD>
__device__ __forceinline__ void gq_combine_spread(const AttnLaunch &A, int S, int Sa, int g, int b0, int n,
                                                  float *red_f, float4 *red_c) {
    constexpr int HD4 = HD / 4, KQ = 2; /* slices per thread held in registers */
    const int tid = threadIdx.x, G = A.n_head / A.n_head_kv, h0 = g * G;
    const int Q = GQ_THREADS / n, j = tid % n, q = tid / n, i = b0 + j, hh = i / HD4;
    const bool act = i < G * HD4;
    const int stride = n < 32 ? 32 : n, cnt = GQ_THREADS / stride; /* the slots left after the shuffles */
    const float4 *po = (const float4 *)(A.part + (size_t)(h0 + hh) * S * HD) + (i - hh * HD4);
    const float *ml = A.part + (size_t)A.n_head * S * HD + (size_t)(h0 + hh) * S * 2;
    float m[KQ], l[KQ];
    float4 o[KQ];
#pragma unroll
    for (int u = 0; u < KQ; u++) {
        const int k = q + u * Q;
        const bool ok = act && k < Sa;
        m[u] = ok ? __ldcg(ml + 2 * k) : -INFINITY;
        l[u] = ok ? __ldcg(ml + 2 * k + 1) : 0.0f;
        o[u] = ok ? __ldcg(po + (size_t)k * HD4) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float mx = -INFINITY;
#pragma unroll 1
    for (int k = q + KQ * Q; act && k < Sa; k += Q) mx = fmaxf(mx, __ldcg(ml + 2 * k)); /* the last-slice combine (Q = 1) */
#pragma unroll
    for (int u = 0; u < KQ; u++) mx = fmaxf(mx, m[u]);
#pragma unroll 1
    for (int off = n; off < 32; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, off));
    red_f[tid] = mx;
    __syncthreads();
    float M = -INFINITY;
#pragma unroll 1
    for (int c = 0; c < cnt; c++) M = fmaxf(M, red_f[c * stride + j]);
    float L = 0.0f;
    float4 O = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
    for (int u = 0; u < KQ; u++) {
        const float w = m[u] > -INFINITY ? __expf(m[u] - M) : 0.0f;
        L = fmaf(w, l[u], L);
        O.x = fmaf(w, o[u].x, O.x), O.y = fmaf(w, o[u].y, O.y), O.z = fmaf(w, o[u].z, O.z), O.w = fmaf(w, o[u].w, O.w);
    }
#pragma unroll 1
    for (int k = q + KQ * Q; act && k < Sa; k += Q) {
        const float w = __expf(__ldcg(ml + 2 * k) - M);
        const float4 v = __ldcg(po + (size_t)k * HD4);
        L = fmaf(w, __ldcg(ml + 2 * k + 1), L);
        O.x = fmaf(w, v.x, O.x), O.y = fmaf(w, v.y, O.y), O.z = fmaf(w, v.z, O.z), O.w = fmaf(w, v.w, O.w);
    }
#pragma unroll 1
    for (int off = n; off < 32; off <<= 1) {
        L += __shfl_xor_sync(FULL_MASK, L, off);
        O.x += __shfl_xor_sync(FULL_MASK, O.x, off), O.y += __shfl_xor_sync(FULL_MASK, O.y, off);
        O.z += __shfl_xor_sync(FULL_MASK, O.z, off), O.w += __shfl_xor_sync(FULL_MASK, O.w, off);
    }
    __syncthreads(); /* red_f is read */
    red_f[tid] = L;
    red_c[tid] = O;
    __syncthreads();
    if (tid < n && act) {
        float Ls = 0.0f;
        float4 Os = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll 1
        for (int c = 0; c < cnt; c++) {
            const float4 v = red_c[c * stride + tid];
            Ls += red_f[c * stride + tid];
            Os.x += v.x, Os.y += v.y, Os.z += v.z, Os.w += v.w;
        }
        const float inv = 1.0f / Ls;
        ((float4 *)(A.out + (size_t)h0 * HD))[i] = make_float4(Os.x * inv, Os.y * inv, Os.z * inv, Os.w * inv);
    }
}

template <int HD>
__global__ void __launch_bounds__(GQ_THREADS) k_attn_gqa(const AttnLaunch A, int spin, int mink) {
    const int tid = threadIdx.x;
    pdl_trigger();
    constexpr int HDP = HD + 8, CPR = HD / 8, KS = HD / 16, NT = HD / 64, DPL = HD / 32;
    extern __shared__ __align__(16) uint4 gq_dyn[];
    __half *Ks = (__half *)gq_dyn, *Vs = Ks + GQ_TK * HDP, *Ps = Vs + GQ_TK * HDP;
    __shared__ __align__(16) float qs[8 * HD], kn[HD], vn[HD];
    constexpr int QP = HD + 8; /* padded: the 8 rows of an ldmatrix fall in different banks */
    __shared__ __align__(16) __half qh_s[8 * QP], ql_s[8 * QP];
    __shared__ float2 cs_s[HD / 2]; /* RoPE rotations */
    __shared__ float red[2][GQ_NW][8], al_s[8], m_s[8], l_s[8];
    __shared__ int last_s;
    const int lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
    const int G = A.n_head / A.n_head_kv, g = blockIdx.x, h0 = g * G, KV = A.n_head_kv * HD;
    const int S = gridDim.y, s = blockIdx.y;
    /* the row's position, written by the graph's input copy before any kernel */
    const int p = A.kv.rows[ROW_POS];
    const int *tab = kv_table(A.kv, 0), sh = A.kv.page_shift;
    const int vlo = A.window > 0 && p - A.window + 1 > 0 ? p - A.window + 1 : 0;
    const int vhi = A.exclude_self && p > 0 ? p - 1 : p;
    /* keys per slice a multiple of 16, the rows of one mma step (fewer, fuller
     * slices: measured faster at depth, BENCHMARKS.md) */
    const int nk = vhi - vlo + 1, csz = max(((nk + S - 1) / S + 15) & ~15, mink), Sa = (nk + csz - 1) / csz;
    if (s >= Sa) { /* past the last non-empty slice */
        pdl_wait();
        return;
    }
    const int lo = vlo + s * csz, hi = min(lo + csz, vhi + 1) - 1;
    /* with the RoPE fused, row p comes from this kernel's own k / v */
    const int pnew = A.rope ? p : -1;
    const __half *kb = A.k + (size_t)g * HD, *vb = A.v + (size_t)g * HD;
    /* rows t0 .. t0 + tk - 1 into the tiles (not row pnew); the rows up to
     * the next multiple of 16 zeroed, as the last mma steps read them */
    const uint64_t pol = l2_evict_first();
    auto stage = [&](int t0, int tk) {
#pragma unroll 1
        for (int i = tid; i < tk * CPR; i += GQ_THREADS) {
            const int r = i / CPR, c = i - r * CPR;
            if (t0 + r == pnew) continue;
            const size_t at = (size_t)kv_row(tab, t0 + r, sh) * KV + c * 8;
            gq_cp16(Ks + r * HDP + c * 8, kb + at, pol);
            gq_cp16(Vs + r * HDP + c * 8, vb + at, pol);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
        const int t16 = (tk + 15) & ~15;
#pragma unroll 1
        for (int i = tid; i < (t16 - tk) * CPR; i += GQ_THREADS) {
            const int r = tk + i / CPR, c = i % CPR;
            *(uint4 *)(Ks + r * HDP + c * 8) = make_uint4(0u, 0u, 0u, 0u);
            *(uint4 *)(Vs + r * HDP + c * 8) = make_uint4(0u, 0u, 0u, 0u);
        }
    };
    if (A.rope) stage(lo, min(GQ_TK, hi - lo + 1));
    float nq[DPL], nkw[DPL];
    if (A.rope) {
        if (A.q_norm)
#pragma unroll
            for (int k = 0; k < DPL; k++) {
                nq[k] = __fadd_rn(__ldg(A.q_norm + lane + 32 * k), A.norm_off);
                nkw[k] = __fadd_rn(__ldg(A.k_norm + lane + 32 * k), A.norm_off);
            }
        if (tid < A.n_rot / 2) cs_s[tid] = rope_cs(tid, A.inv_freq, p, A.rope_ms);
        /* the rows of the absent heads G..7 of the q operand */
#pragma unroll 1
        for (int i = G * QP + tid; i < 8 * QP; i += GQ_THREADS) qh_s[i] = ql_s[i] = __float2half_rn(0.0f);
    }
    /* RoPE after the wait: thread tid rotates pair rj of vectors rh, rh + rstep, ... */
    const int half = A.n_rot / 2, rstep = half ? GQ_THREADS / half : 0, rj = half ? tid % half : 0,
              rh = half ? tid / half : 0;
    pdl_wait();
    if (!A.rope) stage(lo, min(GQ_TK, hi - lo + 1));
    {
        const float4 *q4 = (const float4 *)(A.q + (size_t)h0 * HD);
#pragma unroll 1
        for (int i = tid; i < G * HD / 4; i += GQ_THREADS) ((float4 *)qs)[i] = q4[i];
        if (A.rope && tid < HD / 2) { /* HD / 4 float4 of k, then of v */
            const int isv = tid >= HD / 4, i = tid - isv * (HD / 4);
            ((float4 *)(isv ? vn : kn))[i] = ((const float4 *)((isv ? A.vf : A.kf) + (size_t)g * HD))[i];
        }
    }
    __syncthreads();
    __half knew = __float2half_rn(0.0f), vnew = knew; /* this step's row, element tid (HD <= 256) */
    if (A.rope) {
        if (A.q_norm) { /* vector vi: query head vi, or this step's k (vi == G) */
            for (int vi = warp; vi <= G; vi += GQ_NW) {
                float *vec = vi == G ? kn : qs + vi * HD;
                const float scv = warp_rms_scale(vec, HD, A.eps);
#pragma unroll
                for (int k = 0; k < DPL; k++) vec[lane + 32 * k] = vec[lane + 32 * k] * scv * (vi == G ? nkw[k] : nq[k]);
            }
            __syncthreads();
        }
        /* the q heads rotated straight into their f16 high and low parts
         * (the B operands of the scores), this step's k back into kn */
        if (tid < rstep * half) {
            const int2 ab = rope_ab(rj, A.n_rot, A.neox);
            const float2 cs = cs_s[rj];
#pragma unroll 1
            for (int hv = rh; hv <= G; hv += rstep) {
                const float *v = hv < G ? qs + hv * HD : kn;
                const float2 y = rope_rot(v[ab.x], v[ab.y], cs);
                if (hv < G) {
                    split_h1(y.x, qh_s + hv * QP + ab.x, ql_s + hv * QP + ab.x);
                    split_h1(y.y, qh_s + hv * QP + ab.y, ql_s + hv * QP + ab.y);
                } else {
                    kn[ab.x] = y.x, kn[ab.y] = y.y;
                }
            }
        }
#pragma unroll 1
        for (int i = tid; i < G * (HD - A.n_rot); i += GQ_THREADS) { /* dimensions past n_rot, unrotated */
            const int h = i / (HD - A.n_rot), d = A.n_rot + i - h * (HD - A.n_rot);
            split_h1(qs[h * HD + d], qh_s + h * QP + d, ql_s + h * QP + d);
        }
        __syncthreads();
        if (tid < HD) {
            knew = __float2half_rn(kn[tid]), vnew = __float2half_rn(vn[tid]);
            if (s == 0) {
                const size_t at = (size_t)kv_row(tab, p, sh) * KV + (size_t)g * HD + tid;
                ((__half *)A.k)[at] = knew;
                ((__half *)A.v)[at] = vnew;
            }
        }
    }
    if (!A.rope) { /* q of the 8 heads (zero past G) as f16 high and low parts, a row of QP per head */
#pragma unroll 1
        for (int i = tid; i < 8 * HD / 2; i += GQ_THREADS) {
            const int h = i / (HD / 2), d = 2 * (i - h * (HD / 2));
            const float a = h < G ? qs[h * HD + d] : 0.0f, b = h < G ? qs[h * HD + d + 1] : 0.0f;
            split_h2(a, b, (uint32_t *)(qh_s + h * QP + d), (uint32_t *)(ql_s + h * QP + d));
        }
        __syncthreads();
    }
    /* softmax state of heads 2 tig and 2 tig + 1 (the same in every warp) */
    float m_run[2] = {-INFINITY, -INFINITY}, l_run[2] = {0.0f, 0.0f};
    float acc[NT][4];
#pragma unroll
    for (int j = 0; j < NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const int r0 = warp * 16;

    for (int t0 = lo; t0 <= hi; t0 += GQ_TK) {
        const int tk = min(GQ_TK, hi - t0 + 1);
        if (t0 != lo) {
            __syncthreads(); /* the previous tile, P and red are read */
            stage(t0, tk);
        }
        if (pnew >= t0 && pnew < t0 + tk && tid < HD) {
            Ks[(pnew - t0) * HDP + tid] = knew;
            Vs[(pnew - t0) * HDP + tid] = vnew;
        }
        asm volatile("cp.async.wait_group 0;" ::: "memory");
        __syncthreads();
        /* scores of keys r0 + gid (c[0], c[1]) and r0 + gid + 8 (c[2], c[3]), heads 2 tig, 2 tig + 1 */
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f}, cl[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        if (r0 < tk) {
            const __half *arow = Ks + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * HDP + (lane >> 4) * 8;
            /* matrices 0, 1: high parts of dimensions 16 kk + 0..7, 8..15; 2, 3: the low parts */
            const __half *brow = ((lane >> 4) ? ql_s : qh_s) + (lane & 7) * QP + ((lane >> 3) & 1) * 8;
#pragma unroll
            for (int kk = 0; kk < KS; kk++) {
                uint32_t a[4], b[4];
                ldsm_x4(a, arow + 16 * kk);
                ldsm_x4(b, brow + 16 * kk);
                mma16816(c, a, b);
                mma16816(cl, a, b + 2); /* the low parts in a second chain */
            }
            c[0] += cl[0], c[1] += cl[1], c[2] += cl[2], c[3] += cl[3];
        }
        const bool v0 = r0 + gid < tk, v1 = r0 + gid + 8 < tk;
        const float cap = A.softcap;
        const float s00 = v0 ? softcap_f(c[0] * A.scale, cap) : -INFINITY, s01 = v0 ? softcap_f(c[1] * A.scale, cap) : -INFINITY;
        const float s10 = v1 ? softcap_f(c[2] * A.scale, cap) : -INFINITY, s11 = v1 ? softcap_f(c[3] * A.scale, cap) : -INFINITY;
        float mx0 = fmaxf(s00, s10), mx1 = fmaxf(s01, s11);
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
            mx0 = fmaxf(mx0, __shfl_xor_sync(FULL_MASK, mx0, o));
            mx1 = fmaxf(mx1, __shfl_xor_sync(FULL_MASK, mx1, o));
        }
        if (gid == 0) red[0][warp][2 * tig] = mx0, red[0][warp][2 * tig + 1] = mx1;
        __syncthreads();
        float mn0 = m_run[0], mn1 = m_run[1];
#pragma unroll
        for (int w = 0; w < GQ_NW; w++) mn0 = fmaxf(mn0, red[0][w][2 * tig]), mn1 = fmaxf(mn1, red[0][w][2 * tig + 1]);
        /* the tile has a visible key, so mn is finite */
        const float p00 = __expf(s00 - mn0), p01 = __expf(s01 - mn1), p10 = __expf(s10 - mn0), p11 = __expf(s11 - mn1);
        float ls0 = p00 + p10, ls1 = p01 + p11;
#pragma unroll
        for (int o = 4; o < 32; o <<= 1) {
            ls0 += __shfl_xor_sync(FULL_MASK, ls0, o);
            ls1 += __shfl_xor_sync(FULL_MASK, ls1, o);
        }
        if (gid == 0) red[1][warp][2 * tig] = ls0, red[1][warp][2 * tig + 1] = ls1;
        if (r0 < tk) { /* P: row h the high parts of head h, row 8 + h the low parts */
            uint32_t hi0, lo0, hi1, lo1;
            split_h2(p00, p10, &hi0, &lo0); /* head 2 tig: keys r0 + gid, r0 + gid + 8 */
            split_h2(p01, p11, &hi1, &lo1); /* head 2 tig + 1 */
            const __half2 H0 = *(const __half2 *)&hi0, L0 = *(const __half2 *)&lo0, H1 = *(const __half2 *)&hi1,
                          L1 = *(const __half2 *)&lo1;
            __half *pc = Ps + r0 + gid;
            pc[(2 * tig) * GQ_PP] = __low2half(H0), pc[(2 * tig) * GQ_PP + 8] = __high2half(H0);
            pc[(8 + 2 * tig) * GQ_PP] = __low2half(L0), pc[(8 + 2 * tig) * GQ_PP + 8] = __high2half(L0);
            pc[(2 * tig + 1) * GQ_PP] = __low2half(H1), pc[(2 * tig + 1) * GQ_PP + 8] = __high2half(H1);
            pc[(9 + 2 * tig) * GQ_PP] = __low2half(L1), pc[(9 + 2 * tig) * GQ_PP + 8] = __high2half(L1);
        }
        const float al0 = __expf(m_run[0] - mn0), al1 = __expf(m_run[1] - mn1);
        if (warp == 0 && gid == 0) al_s[2 * tig] = al0, al_s[2 * tig + 1] = al1;
        m_run[0] = mn0, m_run[1] = mn1;
        __syncthreads();
        float lt0 = 0.0f, lt1 = 0.0f;
#pragma unroll
        for (int w = 0; w < GQ_NW; w++) lt0 += red[1][w][2 * tig], lt1 += red[1][w][2 * tig + 1];
        l_run[0] = l_run[0] * al0 + lt0, l_run[1] = l_run[1] * al1 + lt1;
        /* O = P V: rows gid (high) and gid + 8 (low) are head gid */
        const float al = al_s[gid];
#pragma unroll
        for (int j = 0; j < NT; j++) acc[j][0] *= al, acc[j][1] *= al, acc[j][2] *= al, acc[j][3] *= al;
        const int nks = (tk + 15) >> 4;
        const __half *prow = Ps + ((lane & 7) + ((lane >> 3) & 1) * 8) * GQ_PP + (lane >> 4) * 8;
        const __half *vrow = Vs + ((lane & 7) + ((lane >> 3) & 1) * 8) * HDP + warp * NT * 8;
#pragma unroll 1
        for (int kk = 0; kk < nks; kk++) {
            uint32_t a[4];
            ldsm_x4(a, prow + 16 * kk);
            if (NT == 1) {
                uint32_t b[2];
                ldsm_x2_t(b, vrow + 16 * kk * HDP);
                mma16816(acc[0], a, b);
            } else {
#pragma unroll
                for (int j = 0; j < NT; j += 2) {
                    uint32_t b[4];
                    ldsm_x4_t(b, vrow + 16 * kk * HDP + (j + (lane >> 4)) * 8);
                    mma16816(acc[j], a, b);
                    mma16816(acc[j + 1], a, b + 2);
                }
            }
        }
    }
    if (warp == 0 && gid == 0) m_s[2 * tig] = m_run[0], m_s[2 * tig + 1] = m_run[1], l_s[2 * tig] = l_run[0],
                               l_s[2 * tig + 1] = l_run[1];
    __syncthreads();
    /* head gid, dimensions 8 (warp NT + j) + 2 tig, + 1 */
    float *part_o = A.part, *part_ml = A.part + (size_t)A.n_head * S * HD;
    if (gid < G) {
        const int h = h0 + gid;
        const float inv = Sa == 1 ? 1.0f / l_s[gid] : 1.0f;
        float *o = Sa == 1 ? A.out + (size_t)h * HD : part_o + ((size_t)h * S + s) * HD;
#pragma unroll
        for (int j = 0; j < NT; j++)
            *(float2 *)(o + (warp * NT + j) * 8 + 2 * tig) =
                make_float2((acc[j][0] + acc[j][2]) * inv, (acc[j][1] + acc[j][3]) * inv);
    }
    if (Sa == 1) return;
    if (tid < G) part_ml[((size_t)(h0 + tid) * S + s) * 2] = m_s[tid], part_ml[((size_t)(h0 + tid) * S + s) * 2 + 1] = l_s[tid];
    int *arrive = A.counters + g, *leave = A.counters + A.n_head_kv + g;
    if (spin) {
        /* every slice of this KV head is resident (the host checked): each
         * announces its partials (release), waits for all (acquire), then
         * combines 1 / Sa of the outputs */
        __syncthreads();
        if (tid == 0) {
            red_release_add(arrive, 1);
            while (ld_acquire(arrive) < Sa) __nanosleep(32);
        }
        __syncthreads();
        int left = 0;
        if (tid == 0) left = atomicAdd(leave, 1); /* the value is needed only at the end */
        int per = 1; /* outputs (float4) per slice: a power of two, at least (G HD / 4) / Sa */
        while (per * Sa < G * HD / 4) per *= 2;
        gq_combine_spread<HD>(A, S, Sa, g, per * s, per, (float *)(Ks), (float4 *)(Ks + 2 * GQ_THREADS * 2));
        if (tid == 0 && left == Sa - 1) *arrive = 0, *leave = 0; /* every slice is past the wait */
        return;
    }
    __threadfence();
    __syncthreads();
    if (tid == 0) last_s = atomicAdd(arrive, 1) == Sa - 1;
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    for (int b0 = 0; b0 < G * HD / 4; b0 += GQ_THREADS) {
        gq_combine_spread<HD>(A, S, Sa, g, b0, GQ_THREADS, (float *)(Ks), (float4 *)(Ks + 2 * GQ_THREADS * 2));
        __syncthreads(); /* the shared sums are read before the next round writes them */
    }
    if (tid == 0) *arrive = 0;
}

/* ------------------------------------------------------------- launch */

static int g_sessions = 0;
int dp_cu_sessions(int delta) { return __atomic_add_fetch(&g_sessions, delta, __ATOMIC_SEQ_CST); }

typedef void (*GqaFn)(const AttnLaunch, int, int);

int dp_cu_gqa_slices(int slices, int G, int splits) {
    /* DOPPLER_CUDA_ATTN_GQA_MUL times k_attn_split's slices per query head,
     * the multiple at most G (so never more CTAs than k_attn_split would
     * launch: with two query heads a KV head, Qwen3 0.6B/1.7B, four times
     * made slices of a few keys whose combine cost more than their keys), at
     * most the scratch's (splits) and GQ_MAXS */
    int S = slices * (dp_cu_set.gqa_mul < G ? dp_cu_set.gqa_mul : G);
    while (S > GQ_MAXS || (S > 1 && S > splits)) S /= 2;
    return S;
}

int dp_cu_attn_gqa(const AttnLaunch *A, cudaStream_t st, int *taken) {
    *taken = 0;
    const int HD = A->head_dim, G = A->n_head / A->n_head_kv;
    if (A->gqa < 0 || A->n != 1 || A->slices < 2 || (HD != 64 && HD != 128 && HD != 256) || G < 2 || G > 8)
        return DP_OK;
    const int S = dp_cu_gqa_slices(A->slices, G, A->splits);
    const int di = HD == 64 ? 0 : HD == 128 ? 1 : 2;
    static const GqaFn fns[3] = {k_attn_gqa<64>, k_attn_gqa<128>, k_attn_gqa<256>};
    const size_t dyn = gq_smem(HD);
    static int resident[3]; /* CTAs of the kernel that fit on the GPU at once */
    if (!resident[di]) {
        CU_TRY(cudaFuncSetAttribute(fns[di], cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn));
        int dev = 0, nsm = 0, per = 0;
        CU_TRY(cudaGetDevice(&dev));
        CU_TRY(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
        CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per, fns[di], GQ_THREADS, dyn));
        resident[di] = nsm * (per < 1 ? 1 : per);
    }
    /* waiting for each other needs every slice of the grid resident at once:
     * it fits on the GPU, and no other session of this process runs such a
     * grid beside it (another process's kernels end without waiting for us;
     * under MPS, DOPPLER_CUDA_ATTN_GQA_SPIN=0) */
    const int spin = dp_cu_set.gqa_spin && A->n_head_kv * S <= resident[di] &&
                     __atomic_load_n(&g_sessions, __ATOMIC_SEQ_CST) <= 1;
    CU_TRY(dp_cu_launch(fns[di], dim3(A->n_head_kv, S), dim3(GQ_THREADS), dyn, st, *A, spin, dp_cu_set.gqa_min_keys));
    *taken = 1;
    return DP_OK;
}
