/* Exact dequantisation on the device: deq_unit() writes the 32 consecutive
 * weights u*32 .. u*32+31 of a row of a repacked matrix, computed with the
 * same float operations, in the same order, as src/quant.c (no fused
 * multiply-adds: __fmul_rn/__fadd_rn keep nvcc from contracting), so the
 * results are bit-identical to dp_dequantize_row. Used by the embedding
 * lookup, the f16 weight expansion for prefill GEMMs and the generic
 * matrix-vector path of the block formats without a fast kernel. */
#ifndef DP_CUDA_DEQUANT_CUH
#define DP_CUDA_DEQUANT_CUH

#include "common.cuh"

__device__ __forceinline__ void scale_min_k4_dev(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* The IQ2 / IQ3 formats (src/quant_iq.c): a grid entry's magnitudes (8
 * bytes for IQ2, two entries of 4 for IQ3) times the scale, negated by a
 * sign bit per value. One 32-weight unit of weights.cu's layout in
 * registers: q0, q1 its 8 index bytes (IQ2_XXS: 4 indices, then the word of
 * signs and scale; IQ2_XS: 4 codes of 16 bits; IQ2_S: 4 indices, then 4
 * sign bytes), e IQ3's word (IQ3_XXS: signs and scale; IQ3_S: 4 sign
 * bytes), h the high index bits (IQ2_S, IQ3_S) | the scale bits << 8
 * (IQ2_XS, IQ2_S: two 4-bit scales; IQ3_S: one), d the block's f16 d. */
struct IqUnit {
    uint32_t q0, q1, e, h, d;
};
template <int T> __host__ __device__ constexpr bool is_iq23() {
    return T == DP_TYPE_IQ2_XXS || T == DP_TYPE_IQ2_XS || T == DP_TYPE_IQ2_S || T == DP_TYPE_IQ3_XXS ||
           T == DP_TYPE_IQ3_S;
}
template <int T> __device__ __forceinline__ IqUnit iq_load(const DMat &W, int row, int u) {
    constexpr int body = T == DP_TYPE_IQ2_XXS ? 64 : T == DP_TYPE_IQ2_XS ? 72 : T == DP_TYPE_IQ2_S ? 80
                       : T == DP_TYPE_IQ3_XXS ? 96 : 112; /* dp_cu_body_bytes */
    const int b = u >> 3, j = u & 7;
    const uint8_t *blk = W.body + (long long)row * W.body_row + (long long)b * body;
    const uint2 q = *(const uint2 *)(blk + 8 * j);
    IqUnit r = {q.x, q.y, 0u, 0u, 0u};
    if (T == DP_TYPE_IQ3_XXS || T == DP_TYPE_IQ3_S) r.e = *(const uint32_t *)(blk + 64 + 4 * j);
    if (T == DP_TYPE_IQ2_XS) r.h = (uint32_t)blk[64 + j] << 8;
    if (T == DP_TYPE_IQ2_S) r.h = blk[64 + j] | (uint32_t)blk[72 + j] << 8;
    if (T == DP_TYPE_IQ3_S) r.h = blk[96 + j] | ((blk[104 + j / 2] >> 4 * (j & 1)) & 15u) << 8;
    r.d = W.d16[(long long)row * W.nblk + b];
    return r;
}
/* The 8 magnitudes of the unit's group l (weights 8l .. 8l + 7); grid in
 * global memory (W.grid) or staged in shared memory (k_matvec) */
template <int T> __device__ __forceinline__ unsigned long long iq_grid8(const IqUnit &r, const void *grid, int l) {
    const unsigned long long *g8 = (const unsigned long long *)grid;
    if (T == DP_TYPE_IQ2_XXS) return g8[(r.q0 >> 8 * l) & 255u];
    if (T == DP_TYPE_IQ2_XS) return g8[((l < 2 ? r.q0 : r.q1) >> 16 * (l & 1)) & 511u];
    if (T == DP_TYPE_IQ2_S) return g8[((r.q0 >> 8 * l) & 255u) | ((r.h << (8 - 2 * l)) & 0x300u)];
    const uint32_t w = l < 2 ? r.q0 : r.q1, *g4 = (const uint32_t *)grid;
    uint32_t i1 = (w >> 16 * (l & 1)) & 255u, i2 = (w >> (16 * (l & 1) + 8)) & 255u;
    if (T == DP_TYPE_IQ3_S) i1 |= (r.h << (8 - 2 * l)) & 256u, i2 |= (r.h << (7 - 2 * l)) & 256u;
    return g4[i1] | (unsigned long long)g4[i2] << 32;
}
/* 8 signs from 7 stored bits: the eighth makes the count of minus signs even */
__device__ __forceinline__ uint32_t iq_signs7(uint32_t b) {
    b &= 127u;
    return b | (uint32_t)(__popc(b) & 1) << 7;
}
/* The sign bits of group l (bit k: weight 8l + k negative) */
template <int T> __device__ __forceinline__ uint32_t iq_signs(const IqUnit &r, int l) {
    if (T == DP_TYPE_IQ2_XXS) return iq_signs7(r.q1 >> 7 * l);
    if (T == DP_TYPE_IQ2_XS) return iq_signs7((l < 2 ? r.q0 : r.q1) >> (16 * (l & 1) + 9));
    if (T == DP_TYPE_IQ2_S) return (r.q1 >> 8 * l) & 255u;
    if (T == DP_TYPE_IQ3_XXS) return iq_signs7(r.e >> 7 * l);
    return (r.e >> 8 * l) & 255u;
}
/* d (0.5 + s) / div, in quant_iq.c's order */
__device__ __forceinline__ float iq2_db(float d, uint32_t s, float inv) { return __fmul_rn(__fmul_rn(d, __fadd_rn(0.5f, (float)s)), inv); }
/* The scale of the unit's weights 16 half .. 16 half + 15 */
template <int T> __device__ __forceinline__ float iq_db(const IqUnit &r, int half) {
    const float d = h2f((uint16_t)r.d);
    if (T == DP_TYPE_IQ2_XXS) return iq2_db(d, r.q1 >> 28, 0.25f);
    if (T == DP_TYPE_IQ3_XXS) return iq2_db(d, r.e >> 28, 0.5f);
    if (T == DP_TYPE_IQ3_S) return __fmul_rn(d, (float)(1 + 2 * (int)(r.h >> 8)));
    return iq2_db(d, (r.h >> (8 + 4 * half)) & 15u, 0.25f);
}
template <int T> __device__ __forceinline__ void deq_iq(const DMat &W, int row, int u, float *y) {
    const IqUnit r = iq_load<T>(W, row, u);
    for (int l = 0; l < 4; l++) {
        const float db = iq_db<T>(r, l >> 1);
        const unsigned long long g = iq_grid8<T>(r, W.grid, l);
        const uint32_t sg = iq_signs<T>(r, l);
        for (int k = 0; k < 8; k++)
            y[8 * l + k] = __fmul_rn(__fmul_rn(db, (float)(uint32_t)((g >> 8 * k) & 0xFFu)), (sg >> k) & 1u ? -1.0f : 1.0f);
    }
}

__device__ __forceinline__ void deq_unit(const DMat &W, int row, int u, float *y) {
    const uint8_t *rb = W.body + (long long)row * W.body_row;
    switch (W.type) {
    case DP_TYPE_F32: {
        const float *p = (const float *)rb + u * 32;
        for (int j = 0; j < 32; j++) y[j] = p[j];
        return;
    }
    case DP_TYPE_F16: {
        const uint16_t *p = (const uint16_t *)rb + u * 32;
        for (int j = 0; j < 32; j++) y[j] = h2f(p[j]);
        return;
    }
    case DP_TYPE_BF16: {
        const uint16_t *p = (const uint16_t *)rb + u * 32;
        for (int j = 0; j < 32; j++) y[j] = __uint_as_float((uint32_t)p[j] << 16);
        return;
    }
    default: break;
    }
    long long mi = (long long)row * W.nblk;
    switch (W.type) {
    case DP_TYPE_Q4_0: {
        const uint8_t *qs = rb + u * 16;
        float d = h2f(W.d16[mi + u]);
        for (int j = 0; j < 16; j++) {
            y[j] = __fmul_rn((float)((qs[j] & 0x0f) - 8), d);
            y[j + 16] = __fmul_rn((float)((qs[j] >> 4) - 8), d);
        }
        return;
    }
    case DP_TYPE_Q4_1: {
        const uint8_t *qs = rb + u * 16;
        uint32_t dm = W.dm[mi + u];
        float d = h2f((uint16_t)dm), m = h2f((uint16_t)(dm >> 16));
        for (int j = 0; j < 16; j++) {
            y[j] = __fadd_rn(__fmul_rn((float)(qs[j] & 0x0f), d), m);
            y[j + 16] = __fadd_rn(__fmul_rn((float)(qs[j] >> 4), d), m);
        }
        return;
    }
    case DP_TYPE_Q5_0: {
        const uint8_t *qs = rb + u * 16;
        float d = h2f(W.d16[mi + u]);
        uint32_t qh = W.qh[mi + u];
        for (int j = 0; j < 16; j++) {
            int h0 = ((qh >> q5_bitpos(j)) & 1) << 4, h1 = ((qh >> q5_bitpos(j + 16)) & 1) << 4;
            y[j] = __fmul_rn((float)(((qs[j] & 0x0f) | h0) - 16), d);
            y[j + 16] = __fmul_rn((float)(((qs[j] >> 4) | h1) - 16), d);
        }
        return;
    }
    case DP_TYPE_Q5_1: {
        const uint8_t *qs = rb + u * 16;
        uint32_t dm = W.dm[mi + u];
        float d = h2f((uint16_t)dm), m = h2f((uint16_t)(dm >> 16));
        uint32_t qh = W.qh[mi + u];
        for (int j = 0; j < 16; j++) {
            int h0 = ((qh >> q5_bitpos(j)) & 1) << 4, h1 = ((qh >> q5_bitpos(j + 16)) & 1) << 4;
            y[j] = __fadd_rn(__fmul_rn((float)((qs[j] & 0x0f) | h0), d), m);
            y[j + 16] = __fadd_rn(__fmul_rn((float)((qs[j] >> 4) | h1), d), m);
        }
        return;
    }
    case DP_TYPE_Q8_0: {
        const int8_t *qs = (const int8_t *)(rb + u * 32);
        float d = h2f(W.d16[mi + u]);
        for (int j = 0; j < 32; j++) y[j] = __fmul_rn((float)qs[j], d);
        return;
    }
    case DP_TYPE_IQ4_NL: { /* the codes four at a time through the codebook (common.cuh iq4_bytes) */
        const uint4 q = *(const uint4 *)(rb + u * 16);
        const float d = h2f(W.d16[mi + u]);
        for (int k = 0; k < 4; k++) {
            uint32_t lo, hi;
            iq4_bytes(wd(q, k), &lo, &hi);
            for (int i = 0; i < 4; i++) {
                y[4 * k + i] = __fmul_rn(d, (float)(int8_t)(lo >> 8 * i));
                y[16 + 4 * k + i] = __fmul_rn(d, (float)(int8_t)(hi >> 8 * i));
            }
        }
        return;
    }
    case DP_TYPE_IQ4_XS: { /* sub-block u: its ls - 32 and the super-block's d; its codes the low (u even)
                            * or high halves of the words of its pair (weights.cu) */
        const uint4 *q = (const uint4 *)(rb + (u >> 1) * 32);
        const float d = h2f(W.d16[(mi + u) >> 3]) * (float)((const int8_t *)W.dm)[mi + u];
        const int sh = (u & 1) * 16;
        for (int k = 0; k < 8; k++) {
            const uint32_t c = iq4_lo4(wd(q[k >> 2], k & 3) >> sh);
            for (int i = 0; i < 4; i++) y[4 * k + i] = __fmul_rn(d, (float)(int8_t)(c >> 8 * i));
        }
        return;
    }
    default: break;
    }
    /* 256-weight super-blocks: block b, sub-block j (32 weights) */
    int b = u >> 3, j = u & 7;
    switch (W.type) {
    case DP_TYPE_Q4_K: {
        const uint8_t *blk = rb + b * 144;
        float d = h2f(*(const uint16_t *)blk), dmin = h2f(*(const uint16_t *)(blk + 2));
        int sc, mn;
        scale_min_k4_dev(j, blk + 4, &sc, &mn);
        float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)mn);
        const uint8_t *q = blk + 16 + (j >> 1) * 32;
        int sh = (j & 1) * 4;
        for (int l = 0; l < 32; l++) y[l] = __fsub_rn(__fmul_rn(d1, (float)((q[l] >> sh) & 0xF)), m1);
        return;
    }
    case DP_TYPE_Q5_K: {
        const uint8_t *blk = rb + b * 176;
        float d = h2f(*(const uint16_t *)blk), dmin = h2f(*(const uint16_t *)(blk + 2));
        int sc, mn;
        scale_min_k4_dev(j, blk + 4, &sc, &mn);
        float d1 = __fmul_rn(d, (float)sc), m1 = __fmul_rn(dmin, (float)mn);
        const uint8_t *qh = blk + 16, *ql = blk + 48 + (j >> 1) * 32;
        int sh = (j & 1) * 4;
        for (int l = 0; l < 32; l++) {
            int q = ((ql[l] >> sh) & 0xF) + ((qh[l] >> j) & 1 ? 16 : 0);
            y[l] = __fsub_rn(__fmul_rn(d1, (float)q), m1);
        }
        return;
    }
    case DP_TYPE_Q6_K: {
        const uint8_t *blk = rb + b * 208;
        float d = h2f(W.d16[mi + b]);
        int n = j >> 2, g = j & 3;
        const uint8_t *ql = blk + n * 64 + (g & 1) * 32, *qh = blk + 128 + n * 32;
        const int8_t *scs = (const int8_t *)(blk + 192) + n * 8;
        int shl = (g >> 1) * 4, shh = g * 2;
        for (int l = 0; l < 32; l++) {
            int q = (((ql[l] >> shl) & 0xF) | (((qh[l] >> shh) & 3) << 4)) - 32;
            y[l] = __fmul_rn(__fmul_rn(d, (float)scs[l / 16 + 2 * g]), (float)q);
        }
        return;
    }
    case DP_TYPE_Q2_K: { /* weights.cu's super-block: qs[64], scales[16]; d | dmin << 16 in dm */
        const uint8_t *blk = rb + b * 80;
        const uint8_t *sc = blk + 64, *q = blk + (j >> 2) * 32;
        const uint32_t dd = W.dm[mi + b];
        float d = h2f((uint16_t)dd), mn = h2f((uint16_t)(dd >> 16));
        int jj = j & 3, sh = 2 * jj, is = (j >> 2) * 8 + 2 * jj;
        for (int half = 0; half < 2; half++) {
            uint8_t s = sc[is + half];
            float dl = __fmul_rn(d, (float)(s & 0xF)), ml = __fmul_rn(mn, (float)(s >> 4));
            for (int l = 0; l < 16; l++)
                y[half * 16 + l] = __fsub_rn(__fmul_rn(dl, (float)((q[half * 16 + l] >> sh) & 3)), ml);
        }
        return;
    }
    case DP_TYPE_Q3_K: { /* weights.cu's super-block: qs[64], hmask[32], scales - 32 [16]; d in d16 */
        const uint8_t *blk = rb + b * 112;
        const uint8_t *q = blk + (j >> 2) * 32, *hm = blk + 64;
        const int8_t *sc = (const int8_t *)(blk + 96);
        float d_all = h2f(W.d16[mi + b]);
        int jj = j & 3, sh = 2 * jj, is = (j >> 2) * 8 + 2 * jj;
        uint8_t m = (uint8_t)(1u << ((j >> 2) * 4 + jj));
        for (int half = 0; half < 2; half++) {
            float dl = __fmul_rn(d_all, (float)sc[is + half]);
            for (int l = 0; l < 16; l++) {
                int li = half * 16 + l;
                y[li] = __fmul_rn(dl, (float)((int)((q[li] >> sh) & 3) - ((hm[li] & m) ? 0 : 4)));
            }
        }
        return;
    }
    case DP_TYPE_IQ2_XXS: deq_iq<DP_TYPE_IQ2_XXS>(W, row, u, y); return;
    case DP_TYPE_IQ2_XS: deq_iq<DP_TYPE_IQ2_XS>(W, row, u, y); return;
    case DP_TYPE_IQ2_S: deq_iq<DP_TYPE_IQ2_S>(W, row, u, y); return;
    case DP_TYPE_IQ3_XXS: deq_iq<DP_TYPE_IQ3_XXS>(W, row, u, y); return;
    case DP_TYPE_IQ3_S: deq_iq<DP_TYPE_IQ3_S>(W, row, u, y); return;
    default:
        for (int l = 0; l < 32; l++) y[l] = __int_as_float(0x7fc00000);
        return;
    }
}

#endif
