/* The IQ2 / IQ3 formats on the device (src/quant_iq.c; weights.cu's
 * layout): a 32-weight unit is four groups of 8, each a grid entry of 8
 * magnitudes (one u64 for IQ2, two u32 entries of 4 for IQ3) times the
 * unit's scale (IQ2_XS, IQ2_S: one per 16 weights), negated by a sign bit
 * per weight. The unit's fields and their decoding, shared by the exact
 * dequantisation (dequant.cuh), the float matvec (matvec.cu) and the
 * integer one (qunit.cuh); compiled for the host too (the development
 * checks emulate the kernels there). */
#ifndef DP_CUDA_IQGRID_CUH
#define DP_CUDA_IQGRID_CUH

#include "common.cuh"

#define IQH __host__ __device__ __forceinline__

IQH constexpr bool q_iq(int type) {
    return type == DP_TYPE_IQ2_XXS || type == DP_TYPE_IQ2_XS || type == DP_TYPE_IQ2_S || type == DP_TYPE_IQ3_XXS ||
           type == DP_TYPE_IQ3_S;
}
/* bytes of a block's body (dp_cu_body_bytes) */
IQH constexpr uint32_t iq_body(int type) {
    return type == DP_TYPE_IQ2_XXS ? 64 : type == DP_TYPE_IQ2_XS ? 72 : type == DP_TYPE_IQ2_S ? 80
         : type == DP_TYPE_IQ3_XXS ? 96 : 112;
}

/* One unit: q0, q1 its 8 index bytes (IQ2_XXS: 4 indices, then the word of
 * signs and scale; IQ2_XS: 4 codes of 16 bits; IQ2_S: 4 indices, then 4
 * sign bytes), e IQ3's word (IQ3_XXS: signs and scale; IQ3_S: 4 sign
 * bytes), h the high index bits (IQ2_S, IQ3_S) | the scale bits << 8
 * (IQ2_XS, IQ2_S: two 4-bit scales; IQ3_S: one), d the block's f16 d. */
struct IqUnit {
    uint32_t q0, q1, e, h, d;
};

/* Loads through plain pointers: device or shared memory (matvec.cu's grids
 * staged in shared memory), or host memory. */
struct IqLdPlain {
    IQH uint32_t w32(const uint32_t *p) const { return *p; }
    IQH unsigned long long w64(const unsigned long long *p) const { return *p; }
};

/* Unit j of the block whose body words are w (d: the block's f16 d). */
template <int T, class LD> IQH IqUnit iq_unit(const uint32_t *w, int j, uint32_t d, LD ld) {
    const int sb = 8 * (j & 3);
    IqUnit u = {ld.w32(w + 2 * j), ld.w32(w + 2 * j + 1), 0u, 0u, d};
    if (T == DP_TYPE_IQ3_XXS || T == DP_TYPE_IQ3_S) u.e = ld.w32(w + 16 + j);
    if (T == DP_TYPE_IQ2_XS) u.h = ((ld.w32(w + 16 + (j >> 2)) >> sb) & 255u) << 8;
    if (T == DP_TYPE_IQ2_S)
        u.h = ((ld.w32(w + 16 + (j >> 2)) >> sb) & 255u) | ((ld.w32(w + 18 + (j >> 2)) >> sb) & 255u) << 8;
    if (T == DP_TYPE_IQ3_S) u.h = ((ld.w32(w + 24 + (j >> 2)) >> sb) & 255u) | ((ld.w32(w + 26) >> 4 * j) & 15u) << 8;
    return u;
}

/* The 8 magnitudes of group l (weights 8l .. 8l + 7), byte k weight 8l + k */
template <int T, class LD> IQH unsigned long long iq_grid8(const IqUnit &u, const void *grid, int l, LD ld) {
    const unsigned long long *g8 = (const unsigned long long *)grid;
    if (T == DP_TYPE_IQ2_XXS) return ld.w64(g8 + ((u.q0 >> 8 * l) & 255u));
    if (T == DP_TYPE_IQ2_XS) return ld.w64(g8 + (((l < 2 ? u.q0 : u.q1) >> 16 * (l & 1)) & 511u));
    if (T == DP_TYPE_IQ2_S) return ld.w64(g8 + (((u.q0 >> 8 * l) & 255u) | ((u.h << (8 - 2 * l)) & 0x300u)));
    const uint32_t w = l < 2 ? u.q0 : u.q1, *g4 = (const uint32_t *)grid;
    uint32_t i1 = (w >> 16 * (l & 1)) & 255u, i2 = (w >> (16 * (l & 1) + 8)) & 255u;
    if (T == DP_TYPE_IQ3_S) i1 |= (u.h << (8 - 2 * l)) & 256u, i2 |= (u.h << (7 - 2 * l)) & 256u;
    return ld.w32(g4 + i1) | (unsigned long long)ld.w32(g4 + i2) << 32;
}

/* 8 signs from 7 stored bits: the eighth makes the count of minus signs even */
IQH uint32_t iq_signs7(uint32_t b) {
    b &= 127u;
#ifdef __CUDA_ARCH__
    return b | (uint32_t)(__popc(b) & 1) << 7;
#else
    return b | (uint32_t)(__builtin_popcount(b) & 1) << 7;
#endif
}
/* The sign bits of group l (bit k: weight 8l + k negative) */
template <int T> IQH uint32_t iq_signs(const IqUnit &u, int l) {
    if (T == DP_TYPE_IQ2_XXS) return iq_signs7(u.q1 >> 7 * l);
    if (T == DP_TYPE_IQ2_XS) return iq_signs7((l < 2 ? u.q0 : u.q1) >> (16 * (l & 1) + 9));
    if (T == DP_TYPE_IQ2_S) return (u.q1 >> 8 * l) & 255u;
    if (T == DP_TYPE_IQ3_XXS) return iq_signs7(u.e >> 7 * l);
    return (u.e >> 8 * l) & 255u;
}
/* The scale of weights 16 half .. 16 half + 15, in quant_iq.c's order (a
 * sum, then products: nothing for the compiler to contract, so the values
 * are quant_iq.c's bit for bit) */
template <int T> IQH float iq_db(const IqUnit &u, int half) {
    const float d = h2f((uint16_t)u.d);
    if (T == DP_TYPE_IQ2_XXS) return d * (0.5f + (float)(u.q1 >> 28)) * 0.25f;
    if (T == DP_TYPE_IQ3_XXS) return d * (0.5f + (float)(u.e >> 28)) * 0.5f;
    if (T == DP_TYPE_IQ3_S) return d * (float)(1 + 2 * (int)(u.h >> 8));
    return d * (0.5f + (float)((u.h >> (8 + 4 * half)) & 15u)) * 0.25f;
}

#undef IQH

#endif
