/* Products of a quantised matrix with the rows of a batched decode step on
 * the tensor cores: k_mmv, y[b] = W x[b] for b < nb <= 64 rows of f16 x.
 *
 * One decode step of B sequences reads every weight once for all B rows:
 * the weights are dequantised in registers straight into the A operands of
 * mma.sync.m16n8k16 (f16 inputs, f32 accumulators), x (B operands) comes
 * from shared memory, so the cost of a row is a handful of mma per 16
 * weights instead of a dequantisation per weight and row.
 *
 * A CTA (8 warps) takes 128 rows of W (16 per warp: one m-tile) and one
 * part of the k-blocks (split-K where the row tiles alone would leave SMs
 * idle). A k-block is four units of the format (qunit.cuh q_load: 32
 * weights for the 32-weight formats, 64 for the K-quants); lane (g, t) of
 * a warp holds unit t of rows g and g + 8 and feeds step j of a unit (its
 * weights 4j .. 4j + 3) into the mma's k-columns 2t, 2t + 1, 2t + 8, 2t + 9;
 * the x pieces of the same weights go to shared memory so that lane (g, t)
 * finds them at one 8-byte load (pieces of the four units interleaved:
 * conflict-free reads). Each weight is computed in f32 from its exact
 * integer and the scales of the dequantisation (dequant.cuh), then rounded
 * to f16 once, as the f16 copies of the prefill GEMMs are; Q3_K to Q6_K,
 * whose k-block is one super-block, are not rounded at all (mm_exact_int).
 * The next k-block's weights are loaded while the current one is
 * multiplied, its x staged by cp.async.
 *
 * Split-K parts write partial sums; the last CTA of a row tile (atomic
 * counter) adds them in part order, so results do not depend on timing.
 * Up to three matrices of one format share a launch (their row tiles one
 * after the other), so that a layer's Q/K/V or gate/up is one launch. */
#include "qunit.cuh"

enum { MM_THREADS = 256, MM_WARPS = MM_THREADS / 32, MM_ROWS = 16 * MM_WARPS, GU_ROWS = MM_ROWS / 2, MM_MAXS = 16,
       MM_MAXNB = 64 };

template <int T> struct MmFmt {
    enum {
        U = q_family(T) == FAM_A ? 32 : 64, /* weights per unit */
        JN = U / 4,                         /* mma steps per unit */
        KBW = 4 * U,                        /* weights per k-block */
        RSH = KBW + 16,                     /* halves per staged x row: 32 bytes mod 128, see mm_stage */
    };
};

/* The x offset (within the row) of step j of unit t of k-block kb: the
 * units' weights in the order q_load and mm_quads give them. */
template <int T> __device__ __forceinline__ int mm_xoff(int kb, int t, int j) {
    if (q_family(T) == FAM_C) return kb * 256 + 128 * (t >> 1) + 16 * (t & 1) + 32 * (j >> 2) + 4 * (j & 3);
    return kb * MmFmt<T>::KBW + t * MmFmt<T>::U + 4 * j;
}

/* The four quants of step j as unsigned bytes (Q8_0, the IQ4 codebook
 * values and the IQ2 / IQ3 signed grid magnitudes, signed, offset by 128). */
template <int T> __device__ __forceinline__ uint32_t mm_quads(const QRaw &r, int j, int c) {
    if (T == DP_TYPE_Q8_0) return wd(j < 4 ? r.a : r.b, j & 3) ^ 0x80808080u;
    if (q_iq(T)) { /* weights 4j .. 4j + 3: half j & 1 of group j >> 1 */
        const IqUnit u = iqq_unit(r);
        const int l = j >> 1, h = j & 1;
        const unsigned long long g = iq_grid8<T>(u, iqq_grid(r), l, IqLdNc());
        return iqq_signed4((uint32_t)(g >> 32 * h), iq_signs<T>(u, l) >> 4 * h) ^ 0x80808080u;
    }
    if (q_family(T) == FAM_A) {
        const uint32_t w = wd(r.a, j & 3);
        if (T == DP_TYPE_IQ4_NL) {
            uint32_t lo, hi;
            iq4_bytes(w, &lo, &hi);
            return (j < 4 ? lo : hi) ^ 0x80808080u;
        }
        uint32_t q = j < 4 ? w & 0x0F0F0F0Fu : (w >> 4) & 0x0F0F0F0Fu;
        if (T == DP_TYPE_Q5_0 || T == DP_TYPE_Q5_1) q |= q5_bits(r.h, j);
        return q;
    }
    if (T == DP_TYPE_IQ4_XS) /* j < 8: the unit's first sub-block, the words' low halves (common.cuh) */
        return iq4_lo4(wd((j & 7) < 4 ? r.b : r.c, j & 3) >> (j < 8 ? 0 : 16)) ^ 0x80808080u;
    if (T == DP_TYPE_Q4_K || T == DP_TYPE_Q5_K) {
        const uint32_t w = wd((j & 7) < 4 ? r.b : r.c, j & 3);
        uint32_t q = j < 8 ? w & 0x0F0F0F0Fu : (w >> 4) & 0x0F0F0F0Fu;
        if (T == DP_TYPE_Q5_K) {
            const uint32_t hb = wd((j & 7) < 4 ? r.d : r.e, j & 3);
            q |= ((hb >> (2 * c + (j >> 3))) & 0x01010101u) << 4;
        }
        return q;
    }
    /* Q6_K, Q3_K, Q2_K: piece j >> 2 of the unit (qunit.cuh q_math_x's q1, q2, q3, q4) */
    const int w4 = j & 3, p = j >> 2;
    if (T == DP_TYPE_Q3_K || T == DP_TYPE_Q2_K) { /* two bits of each piece in every qs byte; Q3_K's third
                                                   * from hmask bit 4n + p (n: the unit's 128-half) */
        uint32_t q = (wd(r.a, w4) >> 2 * p) & 0x03030303u;
        if (T == DP_TYPE_Q3_K) {
            const uint32_t hm = wd(r.c, w4) >> (4 * ((c >> 1) & 1));
            q |= (p < 3 ? hm << (2 - p) : hm >> 1) & 0x04040404u;
        }
        return q;
    }
    const uint32_t qa = wd(r.a, w4), qb = wd(r.b, w4), qh = wd(r.c, w4);
    if (p == 0) return (qa & 0x0F0F0F0Fu) | ((qh << 4) & 0x30303030u);
    if (p == 1) return (qb & 0x0F0F0F0Fu) | ((qh << 2) & 0x30303030u);
    if (p == 2) return ((qa >> 4) & 0x0F0F0F0Fu) | (qh & 0x30303030u);
    return ((qb >> 4) & 0x0F0F0F0Fu) | ((qh >> 2) & 0x30303030u);
}

/* The quants' offset: weight = (q - offset) * mul + add. */
template <int T> __host__ __device__ constexpr float mm_offset() {
    return T == DP_TYPE_Q4_0                                      ? 8.0f
           : T == DP_TYPE_Q5_0                                    ? 16.0f
           : T == DP_TYPE_Q8_0 || T == DP_TYPE_IQ4_NL || T == DP_TYPE_IQ4_XS || q_iq(T) ? 128.0f
           : T == DP_TYPE_Q6_K                                    ? 32.0f
           : T == DP_TYPE_Q3_K                                    ? 4.0f
                                                                  : 0.0f;
}
/* Which (mul, add) step j uses. */
template <int T> __device__ __forceinline__ int mm_piece(int j) {
    return q_iq(T) ? j >> 2 : q_family(T) == FAM_A ? 0 : q_family(T) == FAM_C ? j >> 2 : j >> 3;
}

__device__ __forceinline__ uint32_t h2_bits(__half2 h) { return *(const uint32_t *)&h; }
__device__ __forceinline__ __half2 bits_h2(uint32_t u) { return *(const __half2 *)&u; }

/* A row's multipliers and offsets for its unit (c: the unit within the
 * super-block), in f32 as dequant.cuh computes them; the 32-weight formats'
 * also as f16 pairs (mm_exact16); Q3_K's to Q6_K's also as the integers
 * of the unit's sub-blocks and the super-block's d and dmin (mm_exact_int). */
struct MmScale {
    float mul[4], add[4];
    __half2 hmul, hadd;
    /* mm_exact_int: Q4_K / Q5_K sub-block h: (sc, sc), (-1024 sc, -1024 sc);
     * Q6_K piece p: 16 (sc >> 4) and sc & 15 (their products exact); Q3_K: sc */
    __half2 isc[4], ioff[4];
    uint32_t imin; /* Q4_K / Q5_K: the sub-blocks' m as an f16 pair */
    float d, dmin;
};
/* Whether a format's weights are d (sc q) - dmin m with sc q and m small
 * integers and d, dmin the super-block's, which is the k-block: then A
 * holds sc q exactly (an f16 integer below 2048: Q5_K's 31 x 63, Q3_K's 4 x
 * 32), the k-block's mma sums are scaled by d in f32, and dmin's term
 * (Q4_K, Q5_K: mm_min) is one more mma of the sub-blocks' m with the sums
 * of their x (mm_xsums). Q6_K's products reach 4096, so its A comes in two
 * exact parts, q 16 (sc >> 4) and q (sc & 15), two mma a step (mm_split).
 * No weight is rounded, as in the decode matvec; IQ4_XS's codebook values
 * times its scales reach 4064 and stay on the single rounding. */
__host__ __device__ constexpr bool mm_exact_type(int type) {
    return type == DP_TYPE_Q4_K || type == DP_TYPE_Q5_K || type == DP_TYPE_Q6_K || type == DP_TYPE_Q3_K;
}
template <int T> __host__ __device__ constexpr bool mm_exact_int() { return mm_exact_type(T); }
template <int T> __host__ __device__ constexpr bool mm_min() { return T == DP_TYPE_Q4_K || T == DP_TYPE_Q5_K; }
template <int T> __host__ __device__ constexpr bool mm_split() { return T == DP_TYPE_Q6_K; }
enum { MM_EXACT_NB = 16 }; /* rows of x up to which mm_exact_int formats take that form (two n-tiles) */
/* Whether a format's multiplier and offset are f16 values of the block (d,
 * and m for Q4_1 / Q5_1): then one HFMA2 of the exact integer rounds the
 * weight once, as the f32 form does. */
template <int T> __host__ __device__ constexpr bool mm_exact16() { return q_family(T) == FAM_A && !q_iq(T); }
template <int T> __device__ __forceinline__ void mm_scales(const QRaw &r, int c, MmScale &s) {
    float *mul = s.mul, *add = s.add;
#pragma unroll
    for (int i = 0; i < 4; i++) mul[i] = add[i] = 0.0f;
    if (q_iq(T)) { /* the scales of weights 0..15 and 16..31 (equal where the format has one) */
        const IqUnit u = iqq_unit(r);
        mul[0] = iq_db<T>(u, 0), mul[1] = iq_db<T>(u, 1);
    } else if (q_family(T) == FAM_A) {
        mul[0] = h2f((uint16_t)r.s);
        add[0] = T == DP_TYPE_Q4_1 || T == DP_TYPE_Q5_1 ? h2f((uint16_t)(r.s >> 16)) : 0.0f;
        s.hmul = __float2half2_rn(mul[0]), s.hadd = __float2half2_rn(add[0]);
    } else if (T == DP_TYPE_IQ4_XS) { /* d (ls - 32) of its two sub-blocks */
        const float2 s2 = iq4xs_scales(r);
        mul[0] = s2.x, mul[1] = s2.y;
    } else if (T == DP_TYPE_Q4_K || T == DP_TYPE_Q5_K) {
        float sc0, m0, sc1, m1;
        k_scales(r.a, c, &sc0, &m0, &sc1, &m1);
        s.d = h2f((uint16_t)r.a.x), s.dmin = h2f((uint16_t)(r.a.x >> 16));
        mul[0] = s.d * sc0, add[0] = -(s.dmin * m0);
        mul[1] = s.d * sc1, add[1] = -(s.dmin * m1);
        s.isc[0] = __float2half2_rn(sc0), s.ioff[0] = __float2half2_rn(-1024.0f * sc0);
        s.isc[1] = __float2half2_rn(sc1), s.ioff[1] = __float2half2_rn(-1024.0f * sc1);
        s.imin = h2_bits(__floats2half2_rn(m0, m1));
    } else { /* Q6_K, Q3_K, Q2_K: scale bytes 8n + 2p + h of the super-block */
        const float d = h2f((uint16_t)r.s);
        const int n = (c >> 1) & 1, h = c & 1;
        const uint32_t W0 = n ? r.d.z : r.d.x, W1 = n ? r.d.w : r.d.y;
        const uint32_t b[4] = {W0 >> (8 * h), W0 >> (8 * h + 16), W1 >> (8 * h), W1 >> (8 * h + 16)};
#pragma unroll
        for (int p = 0; p < 4; p++) {
            if (T == DP_TYPE_Q2_K) { /* scale | min << 4: d sc q - dmin m */
                mul[p] = d * (float)(b[p] & 15u);
                add[p] = -(h2f((uint16_t)(r.s >> 16)) * (float)((b[p] >> 4) & 15u));
            } else {
                const int sc = (int8_t)b[p];
                mul[p] = d * (float)sc;
                s.isc[p] = __float2half2_rn(T == DP_TYPE_Q6_K ? (float)(16 * (sc >> 4)) : (float)sc);
                s.ioff[p] = __float2half2_rn((float)(sc & 15));
            }
        }
        s.d = d;
    }
}

/* The four quants of q (unsigned bytes) as the A operand pairs (q0, q1),
 * (q2, q3) of one row: (q - offset) * mul + add, rounded to f16 once. A
 * PRMT puts each byte under the exponent of 1024 (the f16 1024 + q,
 * exact), one HSUB2 takes 1024 + offset off (exact: integers below 2048),
 * then the scale in f32, or in one HFMA2 where the scales are f16 values
 * (mm_exact16). The reference is HF on the dequantised weights, so a
 * weight may carry no more error than the f16 copies' one rounding:
 * scaling the other formats in f16 too (their scales rounded to f16
 * first) is faster at a few rows but rounds each weight three times, which
 * took a 36-layer model past verify's limit. With XI (mm_exact_int) the
 * pairs are the exact integers sc (q - offset) instead, *s01 / *s23 the
 * second part of mm_split's. */
__device__ __forceinline__ uint32_t mm_scaled(__half2 q, float mul, float add) {
    const float2 f = __half22float2(q);
    return h2_bits(__floats2half2_rn(fmaf(f.x, mul, add), fmaf(f.y, mul, add)));
}
template <int T, bool XI>
__device__ __forceinline__ void mm_a(uint32_t q, __half2 base, const MmScale &s, int pc, uint32_t *p01, uint32_t *p23,
                                     uint32_t *s01, uint32_t *s23) {
    const uint32_t e01 = __byte_perm(q, 0x64646464u, 0x4140u), e23 = __byte_perm(q, 0x64646464u, 0x4342u);
    if (XI && mm_min<T>()) { /* (1024 + q) sc - 1024 sc in one fused step: sc q, exact */
        *p01 = h2_bits(__hfma2(bits_h2(e01), s.isc[pc], s.ioff[pc]));
        *p23 = h2_bits(__hfma2(bits_h2(e23), s.isc[pc], s.ioff[pc]));
        return;
    }
    const __half2 i01 = __hsub2(bits_h2(e01), base), i23 = __hsub2(bits_h2(e23), base);
    if (XI) { /* the integer times sc (mm_split: its two parts), exact */
        *p01 = h2_bits(__hmul2(i01, s.isc[pc])), *p23 = h2_bits(__hmul2(i23, s.isc[pc]));
        if (mm_split<T>()) *s01 = h2_bits(__hmul2(i01, s.ioff[pc])), *s23 = h2_bits(__hmul2(i23, s.ioff[pc]));
        return;
    }
    if (mm_exact16<T>()) {
        *p01 = h2_bits(__hfma2(i01, s.hmul, s.hadd)), *p23 = h2_bits(__hfma2(i23, s.hmul, s.hadd));
    } else {
        *p01 = mm_scaled(i01, s.mul[pc], s.add[pc]), *p23 = mm_scaled(i23, s.mul[pc], s.add[pc]);
    }
}

__device__ __forceinline__ void mm_mma(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* The same into fresh sums (C = 0). */
__device__ __forceinline__ void mm_mma0(float *c, const uint32_t *a, uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=f"(c[0]), "=f"(c[1]), "=f"(c[2]), "=f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

/* The sums of the staged x over each of a k-block's 8 sub-blocks of 32
 * weights (Q4_K, Q5_K: sub-block 2t + h is steps 8h .. 8h + 7 of unit t),
 * for dmin's term: row n's at xsum[4 n + t] as the f16 pairs (hi(2t),
 * hi(2t + 1)), (lo(2t), lo(2t + 1)), hi + lo the f32 sum to 22 bits: the B
 * operand of lane (g, t) for k-columns 2t, 2t + 1 (hi) and 2t + 8, 2t + 9
 * (lo). Four lanes a sum, two steps each. */
template <int T> __device__ __forceinline__ void mm_xsums(const __half *xs, uint2 *xsum, int nb) {
    constexpr int RSH = MmFmt<T>::RSH;
    for (int i = threadIdx.x; i < nb * 32; i += MM_THREADS) { /* whole warps: nb * 32 */
        const int n = i >> 5, sb = (i >> 2) & 7, part = i & 3, t = sb >> 1, h = sb & 1;
        const __half *p = xs + n * RSH + 16 * (8 * h + 2 * part) + 4 * t;
        const uint2 u = *(const uint2 *)p, v = *(const uint2 *)(p + 16);
        const float2 a = __half22float2(bits_h2(u.x)), b = __half22float2(bits_h2(u.y));
        const float2 c = __half22float2(bits_h2(v.x)), d = __half22float2(bits_h2(v.y));
        float sum = ((a.x + a.y) + (b.x + b.y)) + ((c.x + c.y) + (d.x + d.y));
        sum += __shfl_xor_sync(FULL_MASK, sum, 1);
        sum += __shfl_xor_sync(FULL_MASK, sum, 2);
        if (part == 0) {
            const __half hi = __float2half_rn(sum), lo = __float2half_rn(sum - __half2float(hi));
            __half *o = (__half *)(xsum + 4 * n + t);
            o[h] = hi, o[2 + h] = lo;
        }
    }
}

__device__ __forceinline__ void mm_cp8(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src)
                 : "memory");
}

/* x of k-block kb into shared memory: row n's piece (unit t, step j) at
 * halves n * RSH + 16 j + 4 t, so that the 4 lanes t of a step read 32
 * contiguous bytes and rows 32 bytes apart (mod 128) fill the 32 banks
 * twice; units past the row are zeros. */
template <int T> __device__ __forceinline__ void mm_stage(__half *xs, const MmLaunch &L, int kb, int nunits) {
    constexpr int JN = MmFmt<T>::JN, RSH = MmFmt<T>::RSH;
    const int total = L.nb * 4 * JN, K = L.w[0].cols;
    for (int i = threadIdx.x; i < total; i += MM_THREADS) {
        const int n = i / (4 * JN), rem = i - n * (4 * JN), t = rem / JN, j = rem - t * JN;
        __half *dst = xs + n * RSH + 16 * j + 4 * t;
        if (kb * 4 + t < nunits) mm_cp8(dst, L.x16 + (size_t)n * K + mm_xoff<T>(kb, t, j));
        else *(uint2 *)dst = make_uint2(0u, 0u);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}

template <int T> __device__ __forceinline__ void mm_load(const DMat &W, int row, int u, bool ok, QRaw &r) {
    if (ok) {
        q_load<T>(W, row, u, r);
    } else {
        r.a = r.b = r.c = r.d = r.e = make_uint4(0u, 0u, 0u, 0u);
        r.s = r.h = 0u;
        if (q_iq(T)) { /* d = 0, and the gathers of mm_quads read the grid */
            const uint64_t gp = (uint64_t)W.grid;
            r.e.x = (uint32_t)gp, r.e.y = (uint32_t)(gp >> 32);
        }
    }
}

/* The final value of (row, column b) of job j's N rows: stored (with the
 * bias) or added. */
__device__ __forceinline__ float mm_out(const MmLaunch &L, float *yj, const float *bias, int ld, int b, int row,
                                        float v) {
    float *y = yj + (size_t)b * ld + row;
    if (L.mode == MV_ADD) v += *y;
    else if (bias) v += bias[row];
    *y = v;
    return v;
}

/* f(b, v0, v1) for each column b < nb of lane (g, t)'s sums: 8 nt + 2 t + e,
 * v0 of row r0 (acc[nt][e]), v1 of row r1 (acc[nt][2 + e]). */
template <int NT, typename F> __device__ __forceinline__ void mm_cols(const float (&acc)[NT][4], int nb, int t, F f) {
#pragma unroll
    for (int nt = 0; nt < NT; nt++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int b = 8 * nt + 2 * t + e;
            if (b < nb) f(b, acc[nt][e], acc[nt][2 + e]);
        }
}

template <int T, int NT>
__global__ void __launch_bounds__(MM_THREADS, 2) k_mmv(const MmLaunch L) {
    constexpr int JN = MmFmt<T>::JN, RSH = MmFmt<T>::RSH, NB = 8 * NT;
    const __half2 BASE = __float2half2_rn(1024.0f + mm_offset<T>());
    extern __shared__ __align__(16) uint4 mm_dyn[];
    __half *xs0 = (__half *)mm_dyn, *xs1 = xs0 + NB * RSH;
    __shared__ unsigned long long best_s[MM_WARPS][NB];
    /* more n-tiles keep the f32 form: a k-block's own sums would spill there,
     * where the mma, not the dequantisation, sets the pace */
    constexpr bool XI = mm_exact_int<T>() && 8 * NT <= MM_EXACT_NB;
    __shared__ uint2 xsum_s[XI && mm_min<T>() ? 4 * NB : 1];
    __shared__ int last_s;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    /* MV_GATEUP: a tile is GU_ROWS rows of gate (warps 0-3) and the same
     * rows of up (warps 4-7), which meet in the epilogue */
    const bool GU = L.mode == MV_GATEUP;
    int jb = 0; /* this warp's job */
    if (GU) jb = warp >= MM_WARPS / 2;
    else
        while (jb + 1 < L.njobs && (int)blockIdx.x >= L.tstart[jb + 1]) jb++;
    const DMat W = L.w[jb];
    float *const yj = L.y[jb];
    const float *const bias = L.bias[jb];
    const int tile = blockIdx.x - (GU ? 0 : L.tstart[jb]);
    const int N = W.rows, ld = L.ldy ? L.ldy : N, nunits = W.cols / MmFmt<T>::U, nkb = (nunits + 3) / 4;
    const int S = gridDim.y, s = blockIdx.y, kb0 = s * nkb / S, kb1 = (s + 1) * nkb / S;
    const int r0 = GU ? tile * GU_ROWS + (warp & 3) * 16 + g : tile * MM_ROWS + warp * 16 + g, r1 = r0 + 8;
    pdl_trigger();
    /* the first k-block's weights before the wait (they do not depend on the previous kernel) */
    QRaw w0, w1, n0, n1;
    mm_load<T>(W, r0, kb0 * 4 + t, r0 < N && kb0 * 4 + t < nunits, w0);
    mm_load<T>(W, r1, kb0 * 4 + t, r1 < N && kb0 * 4 + t < nunits, w1);
    pdl_wait();
    if (kb0 < kb1) mm_stage<T>(xs0, L, kb0, nunits);
    float acc[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; nt++) acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;

    for (int kb = kb0; kb < kb1; kb++) {
        __half *xs = ((kb - kb0) & 1) ? xs1 : xs0;
        const int un = (kb + 1) * 4 + t;
        if (kb + 1 < kb1) {
            mm_stage<T>(((kb - kb0) & 1) ? xs0 : xs1, L, kb + 1, nunits);
            mm_load<T>(W, r0, un, r0 < N && un < nunits, n0);
            mm_load<T>(W, r1, un, r1 < N && un < nunits, n1);
            asm volatile("cp.async.wait_group 1;" ::: "memory");
        } else {
            asm volatile("cp.async.wait_group 0;" ::: "memory");
        }
        __syncthreads();
        if (XI && mm_min<T>()) mm_xsums<T>(xs, xsum_s, L.nb);
        MmScale s0, s1;
        mm_scales<T>(w0, (kb * 4 + t) & 3, s0);
        mm_scales<T>(w1, (kb * 4 + t) & 3, s1);
        float kacc[XI ? NT : 1][4]; /* XI: this k-block's sums of sc q x, scaled by d below */
#pragma unroll
        for (int j = 0; j < JN; j++) {
            const int pc = mm_piece<T>(j);
            const uint32_t q0 = mm_quads<T>(w0, j, t), q1 = mm_quads<T>(w1, j, t);
            uint32_t a[4], a2[4];
            mm_a<T, XI>(q0, BASE, s0, pc, &a[0], &a[2], &a2[0], &a2[2]);
            mm_a<T, XI>(q1, BASE, s1, pc, &a[1], &a[3], &a2[1], &a2[3]);
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const uint2 b = *(const uint2 *)(xs + (g + 8 * nt) * RSH + 16 * j + 4 * t);
                if (!XI) mm_mma(acc[nt], a, b.x, b.y);
                else if (j == 0) mm_mma0(kacc[XI ? nt : 0], a, b.x, b.y);
                else mm_mma(kacc[XI ? nt : 0], a, b.x, b.y);
                if (XI && mm_split<T>()) mm_mma(kacc[XI ? nt : 0], a2, b.x, b.y);
            }
        }
        __syncthreads(); /* this buffer is staged again two k-blocks on; xsum_s is written */
        if (XI) { /* acc += d (sum of sc q x) - dmin (sum over sub-blocks of m times their x sums) */
            const uint32_t am[4] = {s0.imin, s1.imin, s0.imin, s1.imin};
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
                const float *k = kacc[XI ? nt : 0];
#pragma unroll
                for (int e = 0; e < 4; e++) acc[nt][e] = fmaf(e < 2 ? s0.d : s1.d, k[e], acc[nt][e]);
                if (mm_min<T>()) {
                    const uint2 b = xsum_s[4 * (g + 8 * nt) + t];
                    float m[4];
                    mm_mma0(m, am, b.x, b.y);
#pragma unroll
                    for (int e = 0; e < 4; e++) acc[nt][e] = fmaf(e < 2 ? -s0.dmin : -s1.dmin, m[e], acc[nt][e]);
                }
            }
        }
        w0 = n0, w1 = n1;
    }

    /* lane (g, t) holds rows r0 (acc[.][0..1]) and r1 (acc[.][2..3]) of columns 8 nt + 2 t, + 1 */
    if (S == 1 && GU) { /* up through shared memory (the x buffers, free now) to the gate warps */
        float *ut = (float *)mm_dyn; /* [nb][GU_ROWS] */
        const int rl = r0 - tile * GU_ROWS;
        if (jb == 1)
            mm_cols<NT>(acc, L.nb, t, [&](int b, float v0, float v1) {
                ut[b * GU_ROWS + rl] = v0, ut[b * GU_ROWS + rl + 8] = v1;
            });
        __syncthreads();
        if (jb == 0)
            mm_cols<NT>(acc, L.nb, t, [&](int b, float v0, float v1) {
                if (r0 < N) L.out16[(size_t)b * N + r0] = __float2half_rn(act_fn(L.act, v0, ut[b * GU_ROWS + rl]));
                if (r1 < N) L.out16[(size_t)b * N + r1] = __float2half_rn(act_fn(L.act, v1, ut[b * GU_ROWS + rl + 8]));
            });
        return;
    }
    if (S == 1) {
        unsigned long long best[NT][2];
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int b = 8 * nt + 2 * t + e;
                best[nt][e] = 0;
                if (b >= L.nb) continue;
                if (r0 < N) best[nt][e] = argmax_key(mm_out(L, yj, bias, ld, b, r0, acc[nt][e]), r0);
                if (r1 < N) {
                    const unsigned long long k1 = argmax_key(mm_out(L, yj, bias, ld, b, r1, acc[nt][2 + e]), r1);
                    best[nt][e] = k1 > best[nt][e] ? k1 : best[nt][e];
                }
            }
        if (!L.argmax_keys) return;
        /* each column's best row: over the 8 lanes g, then the warps */
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
#pragma unroll
                for (int o = 4; o < 32; o <<= 1) {
                    const unsigned long long other = __shfl_xor_sync(FULL_MASK, best[nt][e], o);
                    best[nt][e] = other > best[nt][e] ? other : best[nt][e];
                }
                if (g == 0) best_s[warp][8 * nt + 2 * t + e] = best[nt][e];
            }
        __syncthreads();
        if (tid < L.nb) {
            unsigned long long b = 0;
            for (int w = 0; w < MM_WARPS; w++) b = best_s[w][tid] > b ? best_s[w][tid] : b;
            if (b) atomicMax(L.argmax_keys + tid, b);
        }
        return;
    }
    /* split-K: this part's sums, then the last part of the row tile adds them
     * in part order (job jb's region: S parts of nb x N; MV_GATEUP: one
     * region of S parts of nb x [gate rows, up rows]) */
    const int PN = GU ? 2 * N : N, po = GU ? jb * N : 0;
    float *const pj = L.part + (GU ? 0 : (size_t)S * L.nb * L.roff[jb]), *part = pj + (size_t)s * L.nb * PN;
    mm_cols<NT>(acc, L.nb, t, [&](int b, float v0, float v1) {
        if (r0 < N) part[(size_t)b * PN + po + r0] = v0;
        if (r1 < N) part[(size_t)b * PN + po + r1] = v1;
    });
    __threadfence();
    __syncthreads();
    if (tid == 0) last_s = atomicAdd(L.counters + blockIdx.x, 1) == S - 1;
    __syncthreads();
    if (!last_s) return;
    __threadfence();
    /* every part's value of an output loaded at once (a chain of dependent
     * L2 round trips per output would take longer than the product), four
     * rows at a time where the rows allow 16-byte loads */
    const size_t ps = (size_t)L.nb * PN; /* floats between parts */
    if (GU) {
        for (int i = tid; i < L.nb * GU_ROWS; i += MM_THREADS) {
            const int b = i / GU_ROWS, row = tile * GU_ROWS + (i - b * GU_ROWS);
            if (row >= N) continue;
            const float *src = pj + (size_t)b * PN + row;
            float v[MM_MAXS], u[MM_MAXS];
#pragma unroll
            for (int q = 0; q < MM_MAXS; q++)
                if (q < S) v[q] = __ldcg(src + q * ps), u[q] = __ldcg(src + q * ps + N);
            float gs = v[0], us = u[0];
#pragma unroll
            for (int q = 1; q < MM_MAXS; q++)
                if (q < S) gs += v[q], us += u[q];
            L.out16[(size_t)b * N + row] = __float2half_rn(act_fn(L.act, gs, us));
        }
    } else if (!(N & 3) && !(L.roff[jb] & 3)) {
        for (int i = tid; i < L.nb * (MM_ROWS / 4); i += MM_THREADS) {
            const int b = i / (MM_ROWS / 4), row = tile * MM_ROWS + 4 * (i - b * (MM_ROWS / 4));
            if (row >= N) continue;
            const float4 *src = (const float4 *)(pj + (size_t)b * N + row);
            float4 v[MM_MAXS];
#pragma unroll
            for (int q = 0; q < MM_MAXS; q++)
                if (q < S) v[q] = __ldcg((const float4 *)((const float *)src + q * ps));
            float4 sum = v[0];
#pragma unroll
            for (int q = 1; q < MM_MAXS; q++)
                if (q < S) sum.x += v[q].x, sum.y += v[q].y, sum.z += v[q].z, sum.w += v[q].w;
            mm_out(L, yj, bias, ld, b, row, sum.x);
            mm_out(L, yj, bias, ld, b, row + 1, sum.y);
            mm_out(L, yj, bias, ld, b, row + 2, sum.z);
            mm_out(L, yj, bias, ld, b, row + 3, sum.w);
        }
    } else {
        for (int i = tid; i < L.nb * MM_ROWS; i += MM_THREADS) {
            const int b = i / MM_ROWS, row = tile * MM_ROWS + (i - b * MM_ROWS);
            if (row >= N) continue;
            float v[MM_MAXS];
#pragma unroll
            for (int q = 0; q < MM_MAXS; q++)
                if (q < S) v[q] = __ldcg(pj + (size_t)b * N + row + q * ps);
            float sum = v[0];
#pragma unroll
            for (int q = 1; q < MM_MAXS; q++)
                if (q < S) sum += v[q];
            mm_out(L, yj, bias, ld, b, row, sum);
        }
    }
    if (tid == 0) L.counters[blockIdx.x] = 0;
}

/* ------------------------------------------------------------- launch */

typedef void (*MmFn)(const MmLaunch);
enum { MM_NTYPES = 17 };
static const int g_mm_types[MM_NTYPES] = {DP_TYPE_Q4_0,    DP_TYPE_Q4_1,   DP_TYPE_Q5_0,  DP_TYPE_Q5_1,
                                          DP_TYPE_Q8_0,    DP_TYPE_Q4_K,   DP_TYPE_Q5_K,  DP_TYPE_Q6_K,
                                          DP_TYPE_IQ4_NL,  DP_TYPE_IQ4_XS, DP_TYPE_IQ2_XXS, DP_TYPE_IQ2_XS,
                                          DP_TYPE_IQ2_S,   DP_TYPE_IQ3_XXS, DP_TYPE_IQ3_S, DP_TYPE_Q3_K,
                                          DP_TYPE_Q2_K};
#define MM_FNS(T) {k_mmv<T, 1>, k_mmv<T, 2>, k_mmv<T, 4>, k_mmv<T, 8>}
static const MmFn g_mm_fn[MM_NTYPES][4] = {MM_FNS(DP_TYPE_Q4_0),  MM_FNS(DP_TYPE_Q4_1),  MM_FNS(DP_TYPE_Q5_0),
                                           MM_FNS(DP_TYPE_Q5_1),  MM_FNS(DP_TYPE_Q8_0),  MM_FNS(DP_TYPE_Q4_K),
                                           MM_FNS(DP_TYPE_Q5_K),  MM_FNS(DP_TYPE_Q6_K),  MM_FNS(DP_TYPE_IQ4_NL),
                                           MM_FNS(DP_TYPE_IQ4_XS), MM_FNS(DP_TYPE_IQ2_XXS), MM_FNS(DP_TYPE_IQ2_XS),
                                           MM_FNS(DP_TYPE_IQ2_S), MM_FNS(DP_TYPE_IQ3_XXS), MM_FNS(DP_TYPE_IQ3_S),
                                           MM_FNS(DP_TYPE_Q3_K),  MM_FNS(DP_TYPE_Q2_K)};
#undef MM_FNS

static size_t mm_smem(int type, int nt) {
    const int kbw = q_family(type) == FAM_A ? 128 : 256;
    return 2 * (size_t)(8 * nt) * (size_t)(kbw + 16) * sizeof(__half);
}

int dp_cu_mmv_exact(int type, int nb) { return mm_exact_type(type) && nb <= MM_EXACT_NB; }

int dp_cu_mmv_ok(int type, int nb) {
    if (nb < 1 || nb > MM_MAXNB) return 0;
    for (int i = 0; i < MM_NTYPES; i++)
        if (g_mm_types[i] == type) return 1;
    return 0;
}

static int g_mm_nsm = 0;

int dp_cu_mmv_init(void) {
    if (g_mm_nsm) return DP_OK;
    int dev = 0, nsm = 0;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev));
    for (int i = 0; i < MM_NTYPES; i++)
        for (int k = 0; k < 4; k++)
            CU_TRY(cudaFuncSetAttribute(g_mm_fn[i][k], cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        (int)mm_smem(g_mm_types[i], 1 << k)));
    g_mm_nsm = nsm;
    return DP_OK;
}

int dp_cu_mmv(const MmLaunch *L0, cudaStream_t st) {
    MmLaunch M = *L0;
    const DMat &W = M.w[0];
    int ti = -1;
    for (int i = 0; i < MM_NTYPES; i++)
        if (g_mm_types[i] == W.type) ti = i;
    const int gu = M.mode == MV_GATEUP;
    if (ti < 0 || M.nb < 1 || M.nb > MM_MAXNB || W.cols % q_unit(W.type) || M.njobs < 1 || M.njobs > 3 ||
        (M.argmax_keys && M.njobs != 1) ||
        (gu && (M.njobs != 2 || !M.out16 || M.w[1].rows != W.rows || M.argmax_keys)))
        return dp_set_error(DP_ERR_BACKEND, "CUDA k_mmv: %s %d x %d with %d rows of x (%d jobs) is not supported",
                            dp_type_name(W.type), W.rows, W.cols, M.nb, M.njobs);
    int tiles = 0, rows = 0;
    for (int j = 0; j < M.njobs; j++) {
        const DMat &Wj = M.w[j];
        if (Wj.type != W.type || Wj.cols != W.cols)
            return dp_set_error(DP_ERR_BACKEND, "CUDA k_mmv: the jobs of a launch differ in format or width");
        if ((unsigned long long)Wj.rows * (unsigned long long)Wj.body_row >= (1ull << 32) ||
            (unsigned long long)Wj.rows * (unsigned long long)Wj.nblk >= (1ull << 31))
            return dp_set_error(DP_ERR_BACKEND, "CUDA k_mmv: a %d x %d %s matrix of 4 GiB or more is not supported",
                                Wj.rows, Wj.cols, dp_type_name(Wj.type));
        M.tstart[j] = tiles, M.roff[j] = rows;
        tiles += (Wj.rows + MM_ROWS - 1) / MM_ROWS;
        rows += Wj.rows;
    }
    M.tstart[M.njobs] = tiles, M.roff[M.njobs] = rows;
    if (gu) tiles = (W.rows + GU_ROWS - 1) / GU_ROWS; /* gate and up rows side by side in each */
    const int irc = dp_cu_mmv_init();
    if (irc) return irc;
    const int k = M.nb <= 8 ? 0 : M.nb <= 16 ? 1 : M.nb <= 32 ? 2 : 3, nkb = (W.cols / q_unit(W.type) + 3) / 4;
    /* k-parts: enough CTAs for two per SM, each at least one k-block; the
     * partial sums must fit the scratch and a counter per tile */
    int S = 1;
    if (!M.argmax_keys && M.part && tiles <= M.n_counters) {
        S = (2 * g_mm_nsm + tiles - 1) / tiles;
        if (S > nkb) S = nkb;
        if (S > MM_MAXS) S = MM_MAXS;
        while (S > 1 && (size_t)S * M.nb * rows > M.part_cap) S--;
    }
    CU_TRY(dp_cu_launch(g_mm_fn[ti][k], dim3(tiles, S), dim3(MM_THREADS), mm_smem(W.type, 1 << k), st, M));
    return DP_OK;
}
