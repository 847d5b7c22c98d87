/* Decode matrix-vector products y = W x for every weight format.
 *
 * Work split: a warp owns a group of R consecutive rows (R chosen so that a
 * group holds at least 128 "units"), and its lanes walk the group's
 * (row, unit) pairs, where a unit is 32 weights: one block of the 32-weight
 * formats, one eighth of a 256-weight K-quant block. Each lane reads its
 * unit's quants with 16-byte loads (the repacked layout aligns them), two
 * units in flight at a time, and every weight byte is read once. The input
 * vector is staged in shared memory (RMS-normalised on the way in when the
 * launch asks for it), with the sums of each 32-value segment for the
 * formats that carry a minimum (Q4_1, Q5_1, Q4_K, Q5_K).
 *
 * Quants become floats with the 2^23 trick (byte_f: one PRMT and one FADD
 * per weight), then one FFMA with x; each unit's sum is scaled once. */
#include "dequant.cuh"
#include "kernels.cuh"

enum { MV_THREADS = 256, MV_WARPS = MV_THREADS / 32, MV_RMAX = 4 };

__device__ __forceinline__ uint32_t ub(const uint4 &v, int i) {
    uint32_t w = i < 4 ? v.x : i < 8 ? v.y : i < 12 ? v.z : v.w;
    return (w >> (8 * (i & 3))) & 0xFFu;
}

/* sum_i (byte_i(v) - off) * x_i, four bytes, with off = 2^23 + bias. */
__device__ __forceinline__ float dot4(uint32_t v, float4 x, float off, float s) {
    s = fmaf(byte_f(v, 0) - off, x.x, s);
    s = fmaf(byte_f(v, 1) - off, x.y, s);
    s = fmaf(byte_f(v, 2) - off, x.z, s);
    s = fmaf(byte_f(v, 3) - off, x.w, s);
    return s;
}

__device__ __forceinline__ uint32_t w_of(const uint4 &v, int k) { return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w; }

/* Scale and min of sub-block j of a Q4_K/Q5_K header (d, dmin, scales[12]). */
__device__ __forceinline__ void k4_scale_min(const uint4 &h, int j, float *sc, float *mn) {
    int s, m;
    if (j < 4) {
        s = ub(h, 4 + j) & 63;
        m = ub(h, 8 + j) & 63;
    } else {
        s = (ub(h, 8 + j) & 0xF) | ((ub(h, j) >> 6) << 4);
        m = (ub(h, 8 + j) >> 4) | ((ub(h, 4 + j) >> 6) << 4);
    }
    *sc = (float)s;
    *mn = (float)m;
}

/* The staged x lives in shared memory as float4s at swizzled positions:
 * float4 q is stored at q ^ G[(q >> 3) & 7] with G = {0,5,1,4,2,7,3,6}. The
 * 8 lanes of a quarter-warp read 8 different bank groups for every format's
 * access pattern (32-weight blocks: one 32-float segment per lane; Q4_K/
 * Q5_K and Q6_K: the lanes of one 256-block), where the plain layout gave
 * 4- to 8-way bank conflicts and made the kernel compute-bound. */
__device__ __forceinline__ int xsw(int q) { return q ^ (int)((0x63724150u >> (4 * ((q >> 3) & 7))) & 7u); }
__device__ __forceinline__ float4 xs4(const float *xs, int q) { return ((const float4 *)xs)[xsw(q)]; }
__device__ __forceinline__ float &xs_at(float *xs, int i) { return xs[xsw(i >> 2) * 4 + (i & 3)]; }

/* One unit's raw bytes in registers (fields unused by a format vanish). */
struct Raw {
    uint4 a, b, c, d;
    uint32_t m0, m1;
};

/* Loads of one unit: issued for several units before any arithmetic. */
/* grid: the IQ2 / IQ3 format's grid, staged in shared memory by k_matvec */
template <int T> __device__ __forceinline__ void unit_load(const DMat &W, int row, int u, Raw &r, const void *grid) {
    const uint8_t *rb = W.body + (long long)row * W.body_row;
    const long long mi = (long long)row * W.nblk;
    if (T == DP_TYPE_Q4_0 || T == DP_TYPE_Q4_1 || T == DP_TYPE_Q5_0 || T == DP_TYPE_Q5_1) {
        r.a = *(const uint4 *)(rb + u * 16);
        if (T == DP_TYPE_Q4_1 || T == DP_TYPE_Q5_1) r.m0 = W.dm[mi + u];
        else r.m0 = W.d16[mi + u];
        if (T == DP_TYPE_Q5_0 || T == DP_TYPE_Q5_1) r.m1 = W.qh[mi + u];
    } else if (T == DP_TYPE_Q8_0) {
        r.a = *(const uint4 *)(rb + u * 32);
        r.b = *(const uint4 *)(rb + u * 32 + 16);
        r.m0 = W.d16[mi + u];
    } else if (T == DP_TYPE_Q4_K) {
        const int b = u >> 3, t = u & 7, c = t >> 1, h = t & 1;
        const uint8_t *blk = rb + b * 144;
        r.a = *(const uint4 *)blk;
        r.b = *(const uint4 *)(blk + 16 + c * 32 + h * 16);
    } else if (T == DP_TYPE_Q5_K) {
        const int b = u >> 3, t = u & 7, c = t >> 1, h = t & 1;
        const uint8_t *blk = rb + b * 176;
        r.a = *(const uint4 *)blk;
        r.b = *(const uint4 *)(blk + 16 + h * 16);
        r.c = *(const uint4 *)(blk + 48 + c * 32 + h * 16);
    } else if (T == DP_TYPE_Q6_K) {
        const int b = u >> 3, t = u & 7, n = t >> 2, l0 = ((t >> 1) & 1) * 16, s = t & 1;
        const uint8_t *blk = rb + b * 208;
        r.a = *(const uint4 *)(blk + n * 64 + s * 32 + l0);
        r.b = *(const uint4 *)(blk + 128 + n * 32 + l0);
        r.c = *(const uint4 *)(blk + 192);
        r.m0 = W.d16[mi + b];
    } else if (q_iq(T)) { /* the unit's fields in a and m0, its four groups' magnitudes in b and c */
        const IqUnit q = iq_load<T>(W, row, u);
        r.a = make_uint4(q.q0, q.q1, q.e, q.h);
        r.m0 = q.d;
        unsigned long long g[4];
#pragma unroll
        for (int l = 0; l < 4; l++) g[l] = iq_grid8<T>(q, grid, l, IqLdPlain());
        r.b = make_uint4((uint32_t)g[0], (uint32_t)(g[0] >> 32), (uint32_t)g[1], (uint32_t)(g[1] >> 32));
        r.c = make_uint4((uint32_t)g[2], (uint32_t)(g[2] >> 32), (uint32_t)g[3], (uint32_t)(g[3] >> 32));
    } else if (T == DP_TYPE_F16 || T == DP_TYPE_BF16) {
        const uint4 *p = (const uint4 *)(rb + u * 64);
        r.a = p[0], r.b = p[1], r.c = p[2], r.d = p[3];
    }
}

__device__ __forceinline__ uint4 raw_q(const Raw &r, int k) { return k == 0 ? r.a : k == 1 ? r.b : k == 2 ? r.c : r.d; }

/* A group of 8 float4s of x (32 values) in the swizzled layout: element
 * k (0..7) of the group holding float4 q is p[key ^ k]. */
struct XG {
    const float4 *p;
    int key;
};
__device__ __forceinline__ XG xgroup(const float *xs, int q) {
    XG g;
    g.p = (const float4 *)xs + (q & ~7);
    g.key = (q & 7) ^ (int)((0x63724150u >> (4 * ((q >> 3) & 7))) & 7u);
    return g;
}

/* Bytes of v (each 0..127, with bit 7 set beforehand: v | 0x80808080) as
 * the floats 1 + b/128: one PRMT per weight, exact. A segment's sum
 * acc = sum (1 + q/128) x gives sum q x = 128 (acc - sum x), with the sums
 * of x per 16 values precomputed: one PRMT and one FFMA per weight. */
__device__ __forceinline__ float bf128(uint32_t v80, int i) {
    return __uint_as_float(__byte_perm(v80, 0x3F000000u, 0x7044u | ((unsigned)i << 8)));
}
__device__ __forceinline__ float dot4p(uint32_t v80, float4 x, float s) {
    s = fmaf(bf128(v80, 0), x.x, s);
    s = fmaf(bf128(v80, 1), x.y, s);
    s = fmaf(bf128(v80, 2), x.z, s);
    s = fmaf(bf128(v80, 3), x.w, s);
    return s;
}

/* The unit's dot product with x (staged in shared memory, xsum: sums of x
 * per 16 values). */
template <int T>
__device__ __forceinline__ float unit_math(const Raw &r, int u, const float *xs, const float *xsum) {
    if (T == DP_TYPE_Q4_0 || T == DP_TYPE_Q4_1 || T == DP_TYPE_Q5_0 || T == DP_TYPE_Q5_1) {
        const XG g = xgroup(xs, u * 8);
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = w_of(r.a, k);
            uint32_t lo = (w & 0x0F0F0F0Fu) | 0x80808080u, hi = ((w >> 4) & 0x0F0F0F0Fu) | 0x80808080u;
            if (T == DP_TYPE_Q5_0 || T == DP_TYPE_Q5_1) {
                lo |= q5_bits(r.m1, k);
                hi |= q5_bits(r.m1, 4 + k);
            }
            acc = dot4p(lo, g.p[g.key ^ k], acc);
            acc = dot4p(hi, g.p[g.key ^ (4 + k)], acc);
        }
        const float S = xsum[2 * u] + xsum[2 * u + 1];
        const float d = h2f((uint16_t)r.m0);
        if (T == DP_TYPE_Q4_0) return d * fmaf(128.0f, acc, -136.0f * S);   /* q - 8 */
        if (T == DP_TYPE_Q5_0) return d * fmaf(128.0f, acc, -144.0f * S);   /* q - 16 */
        return fmaf(h2f((uint16_t)(r.m0 >> 16)), S, d * fmaf(128.0f, acc, -128.0f * S)); /* q d + m */
    } else if (T == DP_TYPE_Q8_0) {
        const XG g = xgroup(xs, u * 8);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) s = dot4(w_of(r.a, k) ^ 0x80808080u, g.p[g.key ^ k], MAGIC_F + 128.0f, s);
#pragma unroll
        for (int k = 0; k < 4; k++) s = dot4(w_of(r.b, k) ^ 0x80808080u, g.p[g.key ^ (4 + k)], MAGIC_F + 128.0f, s);
        return s * h2f((uint16_t)r.m0);
    } else if (T == DP_TYPE_Q4_K || T == DP_TYPE_Q5_K) {
        const int b = u >> 3, t = u & 7, c = t >> 1, h = t & 1;
        const uint4 q = T == DP_TYPE_Q4_K ? r.b : r.c;
        const int ql = b * 64 + c * 16 + h * 4; /* float4 index of the low half; the high half is 8 further */
        const XG gl = xgroup(xs, ql), gh = xgroup(xs, ql + 8);
        float alo = 0.0f, ahi = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = w_of(q, k);
            uint32_t lo = (w & 0x0F0F0F0Fu) | 0x80808080u, hi = ((w >> 4) & 0x0F0F0F0Fu) | 0x80808080u;
            if (T == DP_TYPE_Q5_K) {
                uint32_t hb = w_of(r.b, k);
                lo |= ((hb >> (2 * c)) & 0x01010101u) << 4;
                hi |= ((hb >> (2 * c + 1)) & 0x01010101u) << 4;
            }
            alo = dot4p(lo, gl.p[gl.key ^ k], alo);
            ahi = dot4p(hi, gh.p[gh.key ^ k], ahi);
        }
        const int seg = b * 16 + c * 4 + h;
        const float Slo = xsum[seg], Shi = xsum[seg + 2];
        const float d = h2f((uint16_t)r.a.x), dmin = h2f((uint16_t)(r.a.x >> 16));
        float sc0, m0, sc1, m1;
        k4_scale_min(r.a, 2 * c, &sc0, &m0);
        k4_scale_min(r.a, 2 * c + 1, &sc1, &m1);
        const float qlo = 128.0f * (alo - Slo), qhi = 128.0f * (ahi - Shi); /* sums of q x */
        return d * (sc0 * qlo + sc1 * qhi) - dmin * (m0 * Slo + m1 * Shi);
    } else if (T == DP_TYPE_Q6_K) {
        const int b = u >> 3, t = u & 7, n = t >> 2, l0 = ((t >> 1) & 1) * 16, s = t & 1;
        const int ql = b * 64 + n * 32 + s * 8 + (l0 >> 2); /* the high half is 16 float4s further */
        const XG gl = xgroup(xs, ql), gh = xgroup(xs, ql + 16);
        float alo = 0.0f, ahi = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            uint32_t w = w_of(r.a, k), hb = w_of(r.b, k);
            uint32_t lo = (w & 0x0F0F0F0Fu) | (((hb >> (2 * s)) & 0x03030303u) << 4) | 0x80808080u;
            uint32_t hi = ((w >> 4) & 0x0F0F0F0Fu) | (((hb >> (4 + 2 * s)) & 0x03030303u) << 4) | 0x80808080u;
            alo = dot4p(lo, gl.p[gl.key ^ k], alo);
            ahi = dot4p(hi, gh.p[gh.key ^ k], ahi);
        }
        const int seg = b * 16 + n * 8 + s * 2 + (l0 >> 4);
        const float Slo = xsum[seg], Shi = xsum[seg + 4];
        const int is = n * 8 + (l0 >> 4) + 2 * s;
        float sclo = (float)(int8_t)ub(r.c, is), schi = (float)(int8_t)ub(r.c, is + 4);
        /* q - 32 */
        return h2f((uint16_t)r.m0) * (sclo * fmaf(128.0f, alo, -160.0f * Slo) + schi * fmaf(128.0f, ahi, -160.0f * Shi));
    } else if (q_iq(T)) {
        /* magnitude byte k as a float (2^23 + b, less 2^23: exact), the
         * sign put on x; the two halves' sums scaled apart (IQ2_XS, IQ2_S
         * have a scale per 16 weights) */
        const IqUnit q = {r.a.x, r.a.y, r.a.z, r.a.w, r.m0};
        const XG g = xgroup(xs, u * 8);
        float h[2] = {0.0f, 0.0f};
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint32_t sg = iq_signs<T>(q, l);
            const uint4 &gw = l < 2 ? r.b : r.c;
            const uint32_t m[2] = {l & 1 ? gw.z : gw.x, l & 1 ? gw.w : gw.y};
            float a = 0.0f;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const float4 xv = g.p[g.key ^ (2 * l + (k >> 2))];
                const float xk = (k & 3) == 0 ? xv.x : (k & 3) == 1 ? xv.y : (k & 3) == 2 ? xv.z : xv.w;
                const float mag = __uint_as_float(__byte_perm(m[k >> 2], 0x4B000000u, 0x7440u | (k & 3))) - 8388608.0f;
                a = fmaf(mag, __int_as_float(__float_as_int(xk) ^ ((sg << (31 - k)) & 0x80000000u)), a);
            }
            h[l >> 1] += a;
        }
        return iq_db<T>(q, 0) * h[0] + iq_db<T>(q, 1) * h[1];
    } else { /* F16, BF16 */
        const XG g = xgroup(xs, u * 8);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const uint4 q = raw_q(r, k);
#pragma unroll
            for (int e = 0; e < 2; e++) {
                uint32_t w0 = w_of(q, 2 * e), w1 = w_of(q, 2 * e + 1);
                float4 xv = g.p[g.key ^ (2 * k + e)];
                float a0, a1, a2, a3;
                if (T == DP_TYPE_F16) {
                    float2 f0 = __half22float2(*(const __half2 *)&w0), f1 = __half22float2(*(const __half2 *)&w1);
                    a0 = f0.x, a1 = f0.y, a2 = f1.x, a3 = f1.y;
                } else {
                    a0 = __uint_as_float(w0 << 16), a1 = __uint_as_float(w0 & 0xFFFF0000u);
                    a2 = __uint_as_float(w1 << 16), a3 = __uint_as_float(w1 & 0xFFFF0000u);
                }
                s = fmaf(a0, xv.x, s);
                s = fmaf(a1, xv.y, s);
                s = fmaf(a2, xv.z, s);
                s = fmaf(a3, xv.w, s);
            }
        }
        return s;
    }
}

/* F32 and any format without a unit_load: one unit at a time (deq_unit). */
template <int T>
__device__ __forceinline__ float unit_dot_slow(const DMat &W, int row, int u, const float *xs) {
    const uint8_t *rb = W.body + (long long)row * W.body_row;
    if (T == DP_TYPE_F32) {
        const float4 *p = (const float4 *)(rb + u * 128);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            float4 w = p[k], xv = xs4(xs, u * 8 + k);
            s = fmaf(w.x, xv.x, s);
            s = fmaf(w.y, xv.y, s);
            s = fmaf(w.z, xv.z, s);
            s = fmaf(w.w, xv.w, s);
        }
        return s;
    }
    float y[32];
    deq_unit(W, row, u, y);
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < 32; j++) s = fmaf(y[j], xs_at((float *)xs, u * 32 + j), s);
    return s;
}

__device__ __forceinline__ void advance(int &rl, int &u, int U) {
    u += 32;
    while (u >= U) {
        u -= U;
        rl++;
    }
}

template <int T> struct Unroll { enum { N = 4 }; };
template <> struct Unroll<DP_TYPE_F16> { enum { N = 2 }; };
template <> struct Unroll<DP_TYPE_BF16> { enum { N = 2 }; };
template <> struct Unroll<DP_TYPE_F32> { enum { N = 1 }; };
template <> struct Unroll<-1> { enum { N = 1 }; };

/* acc[k] += row (r0 + k) . x for k < nr, over this warp's lanes (partial).
 * Each lane walks the (row, unit) pairs lane, lane + 32, ... and loads UN
 * units before computing any of them. */
template <int T>
__device__ __forceinline__ void rows_dot(const DMat &W, int r0, int nr, const float *xs, const float *xsum,
                                         float *acc, const void *grid) {
    constexpr int UN = Unroll<T>::N;
    const int U = W.cols >> 5, total = nr * U, lane = threadIdx.x & 31;
    int rl = lane / U, u = lane % U;
    for (int f = lane; f < total; f += 32 * UN) {
        int rr[UN], uu[UN];
        rr[0] = rl, uu[0] = u;
#pragma unroll
        for (int k = 1; k < UN; k++) {
            rr[k] = rr[k - 1], uu[k] = uu[k - 1];
            advance(rr[k], uu[k], U);
        }
#pragma unroll
        for (int k = 1; k < UN; k++)
            if (f + 32 * k >= total) rr[k] = rr[0], uu[k] = uu[0];
        float v[UN];
        if (UN == 1) {
            v[0] = unit_dot_slow<T>(W, r0 + rr[0], uu[0], xs);
        } else {
            Raw raw[UN];
#pragma unroll
            for (int k = 0; k < UN; k++) unit_load<T>(W, r0 + rr[k], uu[k], raw[k], grid);
#pragma unroll
            for (int k = 0; k < UN; k++) v[k] = unit_math<T>(raw[k], uu[k], xs, xsum);
        }
#pragma unroll
        for (int k = 1; k < UN; k++)
            if (f + 32 * k >= total) v[k] = 0.0f;
#pragma unroll
        for (int j = 0; j < MV_RMAX; j++) {
            float add = 0.0f;
#pragma unroll
            for (int k = 0; k < UN; k++) add += rr[k] == j ? v[k] : 0.0f;
            acc[j] += add;
        }
        rl = rr[UN - 1], u = uu[UN - 1];
        advance(rl, u, U);
    }
}

__device__ __forceinline__ void rows_dispatch(const DMat &W, int r0, int nr, const float *xs, const float *xsum,
                                              float *acc, const void *grid) {
    switch (W.type) {
    case DP_TYPE_Q4_0: rows_dot<DP_TYPE_Q4_0>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_Q4_1: rows_dot<DP_TYPE_Q4_1>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_Q5_0: rows_dot<DP_TYPE_Q5_0>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_Q5_1: rows_dot<DP_TYPE_Q5_1>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_Q8_0: rows_dot<DP_TYPE_Q8_0>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_Q4_K: rows_dot<DP_TYPE_Q4_K>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_Q5_K: rows_dot<DP_TYPE_Q5_K>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_Q6_K: rows_dot<DP_TYPE_Q6_K>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_F16: rows_dot<DP_TYPE_F16>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_BF16: rows_dot<DP_TYPE_BF16>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_F32: rows_dot<DP_TYPE_F32>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_IQ2_XXS: rows_dot<DP_TYPE_IQ2_XXS>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_IQ2_XS: rows_dot<DP_TYPE_IQ2_XS>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_IQ2_S: rows_dot<DP_TYPE_IQ2_S>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_IQ3_XXS: rows_dot<DP_TYPE_IQ3_XXS>(W, r0, nr, xs, xsum, acc, grid); break;
    case DP_TYPE_IQ3_S: rows_dot<DP_TYPE_IQ3_S>(W, r0, nr, xs, xsum, acc, grid); break;
    default: rows_dot<-1>(W, r0, nr, xs, xsum, acc, grid); break;
    }
}

struct MvArgs {
    MvLaunch L;
    int R;          /* rows per group */
    int gstart[4];  /* first group of each job; gstart[njobs] = total */
    /* IQ2 / IQ3 jobs: their grid's byte offset in shared memory (after x
     * and its sums; a format's grid once), -1 for the other formats */
    int goff[3];
};

/* The grids of a launch's IQ2 / IQ3 formats, from global memory to shared
 * memory: a warp's gather of 32 grid entries from the L1 cache costs a pass
 * per cache line touched, from shared memory a pass per bank conflict. */
enum { GRID_SMEM_MAX = 16384 };
__host__ __device__ inline int grid_bytes(int type) {
    switch (type) {
    case DP_TYPE_IQ2_XXS: return 256 * 8;
    case DP_TYPE_IQ2_XS: return 512 * 8;
    case DP_TYPE_IQ2_S: return 1024 * 8;
    case DP_TYPE_IQ3_XXS: return 256 * 4;
    case DP_TYPE_IQ3_S: return 512 * 4;
    default: return 0;
    }
}

__global__ void __launch_bounds__(MV_THREADS, 2) k_matvec(const MvArgs a) {
    extern __shared__ float4 sm4[];
    float *sm = (float *)sm4;
    __shared__ float red[32];
    __shared__ unsigned long long best_s[MV_WARPS];
    const MvLaunch &L = a.L;
    const int cols = L.cols;
    float *xs = sm, *xsum = sm + cols;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    pdl_trigger();
    /* Before waiting for the previous kernel: pull this warp's first rows of
     * weights into L2 (they do not depend on it). */
    {
        const int g0 = blockIdx.x * MV_WARPS + warp;
        const int total0 = a.gstart[L.mode == MV_GATEUP ? 1 : L.njobs];
        if (lane == 0 && g0 < total0) {
            int j = 0;
            if (L.mode != MV_GATEUP)
                while (j + 1 < L.njobs && g0 >= a.gstart[j + 1]) j++;
            for (int m = j; m <= (L.mode == MV_GATEUP ? 1 : j); m++) {
                const DMat &W = L.job[m].w;
                const int r0 = (g0 - a.gstart[j]) * a.R, nr = min(a.R, W.rows - r0);
                const long long bytes = (long long)nr * W.body_row;
                if ((W.body_row & 15) == 0 && bytes > 0 && bytes < (1LL << 30))
                    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(W.body + (long long)r0 * W.body_row),
                                 "r"((unsigned)bytes)
                                 : "memory");
            }
        }
    }
    for (int j = 0; j < L.njobs; j++) { /* the grids do not depend on the previous kernel */
        int first = a.goff[j] >= 0;
        for (int i = 0; i < j; i++) first &= a.goff[i] != a.goff[j];
        if (!first) continue;
        const uint4 *src = (const uint4 *)L.job[j].w.grid;
        uint4 *dst = (uint4 *)((uint8_t *)sm + a.goff[j]);
        for (int i = threadIdx.x; i < grid_bytes(L.job[j].w.type) / 16; i += MV_THREADS) dst[i] = __ldg(src + i);
    }
    pdl_wait();
    if (L.res_o) {
        const float so = block_rms_scale(L.res_o, cols, L.eps, red);
        for (int i = threadIdx.x; i < cols; i += MV_THREADS)
            xs_at(xs, i) = postnorm_add(L.x[i], L.res_o[i], so, L.res_w[i], L.norm_off);
        __syncthreads();
        if (blockIdx.x == 0)
            for (int i = threadIdx.x; i < cols; i += MV_THREADS) L.x_out[i] = xs_at(xs, i);
        /* rms of x_eff in the same order as block_rms_scale over a plain array */
        const float ss = block_ss([&](int i) { return xs_at(xs, i); }, cols, red);
        const float sc = 1.0f / sqrtf(ss / (float)cols + L.eps);
        for (int i = threadIdx.x; i < cols; i += MV_THREADS) xs_at(xs, i) = xs_at(xs, i) * sc * (L.norm_w[i] + L.norm_off);
    } else if (L.norm_w) {
        const float sc = block_rms_scale(L.x, cols, L.eps, red);
        for (int i = threadIdx.x; i < cols; i += MV_THREADS) xs_at(xs, i) = L.x[i] * sc * (L.norm_w[i] + L.norm_off);
    } else {
        for (int q = threadIdx.x; q < cols / 4; q += MV_THREADS) ((float4 *)xs)[xsw(q)] = ((const float4 *)L.x)[q];
    }
    __syncthreads();
    /* sums of x over each 16 values (two per warp step, half-warp reductions) */
    for (int s2 = warp; s2 < (cols >> 5); s2 += MV_WARPS) {
        float v = xs_at(xs, s2 * 32 + lane);
#pragma unroll
        for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
        if ((lane & 15) == 0) xsum[2 * s2 + (lane >> 4)] = v;
    }
    __syncthreads();

    unsigned long long best = 0;
    const int total = a.gstart[L.mode == MV_GATEUP ? 1 : L.njobs];
    for (int g = blockIdx.x * MV_WARPS + warp; g < total; g += gridDim.x * MV_WARPS) {
        int j = 0;
        if (L.mode != MV_GATEUP)
            while (j + 1 < L.njobs && g >= a.gstart[j + 1]) j++;
        const MvJob &J = L.job[j];
        const int r0 = (g - a.gstart[j]) * a.R;
        const int nr = min(a.R, J.w.rows - r0);
        float acc[MV_RMAX], acc2[MV_RMAX];
#pragma unroll
        for (int k = 0; k < MV_RMAX; k++) acc[k] = acc2[k] = 0.0f;
        const uint8_t *smb = (const uint8_t *)sm;
        rows_dispatch(J.w, r0, nr, xs, xsum, acc, a.goff[j] >= 0 ? smb + a.goff[j] : NULL);
        if (L.mode == MV_GATEUP) rows_dispatch(L.job[1].w, r0, nr, xs, xsum, acc2, a.goff[1] >= 0 ? smb + a.goff[1] : NULL);
#pragma unroll
        for (int k = 0; k < MV_RMAX; k++) {
            if (k < nr) {
                float v = warp_sum(acc[k]);
                if (L.mode == MV_GATEUP) {
                    float v2 = warp_sum(acc2[k]);
                    if (lane == 0) J.y[r0 + k] = act_fn(L.act, v, v2);
                } else if (lane == 0) {
                    int r = r0 + k;
                    if (L.mode == MV_ADD) J.y[r] += v;
                    else J.y[r] = J.bias ? v + J.bias[r] : v;
                    if (L.argmax_key) {
                        const unsigned long long key = argmax_key(J.y[r], r);
                        best = key > best ? key : best;
                    }
                }
            }
        }
    }
    if (L.argmax_key) block_argmax<MV_WARPS>(best, best_s, L.argmax_key);
}

static int g_nsm = 0;
int dp_cu_pdl = 1;
dp_settings dp_cu_set; /* set by cuda_init (backend.cu) and verify */
static size_t g_smem_limit = 0;

size_t dp_cu_matvec_smem(int cols) { return (size_t)(cols + cols / 16) * sizeof(float); }

int dp_cu_matvec_init(size_t max_smem) {
    int rc = dp_cu_matvec_q_init((int)(max_smem / 4.25)); /* dp_cu_matvec_smem: 4.25 bytes per input */
    if (rc) return rc;
    max_smem += GRID_SMEM_MAX; /* the IQ2 / IQ3 grids of a launch (three formats at most: 14 KiB) */
    int dev;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaDeviceGetAttribute(&g_nsm, cudaDevAttrMultiProcessorCount, dev));
    int optin = 0;
    CU_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    if (max_smem > (size_t)optin - 1024)
        return dp_set_error(DP_ERR_BACKEND, "CUDA: a matrix-vector product needs %zu bytes of shared memory, the GPU "
                                            "offers %d", max_smem, optin);
    if (max_smem <= g_smem_limit) return DP_OK; /* only ever raised: sessions share the kernel */
    if (max_smem > 48 * 1024)
        CU_TRY(cudaFuncSetAttribute(k_matvec, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)max_smem));
    g_smem_limit = max_smem;
    return DP_OK;
}

int dp_cu_matvec(const MvLaunch *L, cudaStream_t st) {
    int q = 1, iq = 0, iqm = 1;
    for (int j = 0; j < L->njobs && j < 3; j++) {
        const int t = L->job[j].w.type;
        q &= dp_cu_matvec_q_ok(t);
        iq |= q_iq(t);
        iqm &= q_iq(t) || t == DP_TYPE_Q4_K || t == DP_TYPE_Q2_K;
    }
    /* k_matvec_w's gate/up kernels walk both matrices with one format's units;
     * its IQ2 / IQ3 kernels take those formats beside each other or beside
     * a Q4_K or Q2_K (the IQ mixes' Q/K/V) */
    for (int j = 1; j < L->njobs && j < 3; j++)
        if (L->job[j].w.type != L->job[0].w.type && (L->mode == MV_GATEUP || (iq && !iqm))) q = 0;
    if (q) return dp_cu_matvec_q(L, st);
    if (L->cols % 32 || L->njobs < 1 || L->njobs > 3 || (L->mode == MV_GATEUP && L->njobs != 2))
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: unsupported launch (cols %d, %d jobs)", L->cols, L->njobs);
    size_t smem = dp_cu_matvec_smem(L->cols);
    MvArgs a;
    for (int j = 0; j < L->njobs; j++) {
        a.goff[j] = -1;
        const int t = L->job[j].w.type;
        for (int i = 0; i < j; i++)
            if (L->job[i].w.type == t) a.goff[j] = a.goff[i];
        if (grid_bytes(t) && a.goff[j] < 0) {
            smem = (smem + 15) & ~(size_t)15;
            a.goff[j] = (int)smem;
            smem += (size_t)grid_bytes(t);
        }
    }
    if (smem > g_smem_limit)
        return dp_set_error(DP_ERR_BACKEND, "CUDA matvec: %d inputs exceed the prepared shared memory", L->cols);
    a.L = *L;
    const int U = L->cols / 32;
    a.R = (128 + U - 1) / U;
    if (a.R > MV_RMAX) a.R = MV_RMAX;
    if (a.R < 1) a.R = 1;
    int g = 0;
    for (int j = 0; j < L->njobs; j++) {
        a.gstart[j] = g;
        g += (L->job[j].w.rows + a.R - 1) / a.R;
    }
    a.gstart[L->njobs] = g;
    int total = L->mode == MV_GATEUP ? a.gstart[1] : g;
    /* CTAs per SM for this shared-memory size (cached: the query costs
     * microseconds of host time per launch) */
    static size_t c_smem[16];
    static int c_per_sm[16], c_n;
    int per_sm = 0;
    for (int i = 0; i < c_n && !per_sm; i++)
        if (c_smem[i] == smem) per_sm = c_per_sm[i];
    if (!per_sm) {
        CU_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k_matvec, MV_THREADS, smem));
        if (per_sm < 1) per_sm = 1;
        if (c_n < 16) c_smem[c_n] = smem, c_per_sm[c_n++] = per_sm;
    }
    int grid = (total + MV_WARPS - 1) / MV_WARPS;
    if (grid > g_nsm * per_sm) grid = g_nsm * per_sm;
    CU_TRY(dp_cu_launch(k_matvec, dim3(grid), dim3(MV_THREADS), smem, st, a));
    return DP_OK;
}
