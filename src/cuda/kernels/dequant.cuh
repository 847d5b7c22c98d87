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
#include "iqgrid.cuh"

__device__ __forceinline__ void scale_min_k4_dev(int j, const uint8_t *q, int *d, int *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* One IQ2 / IQ3 unit of row row (iqgrid.cuh) */
template <int T> __device__ __forceinline__ IqUnit iq_load(const DMat &W, int row, int u) {
    const int b = u >> 3;
    const uint8_t *blk = W.body + (long long)row * W.body_row + (long long)b * iq_body(T);
    return iq_unit<T>((const uint32_t *)blk, u & 7, W.d16[(long long)row * W.nblk + b], IqLdPlain());
}
template <int T> __device__ __forceinline__ void deq_iq(const DMat &W, int row, int u, float *y) {
    const IqUnit r = iq_load<T>(W, row, u);
    for (int l = 0; l < 4; l++) {
        const float db = iq_db<T>(r, l >> 1);
        const unsigned long long g = iq_grid8<T>(r, W.grid, l, IqLdPlain());
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
