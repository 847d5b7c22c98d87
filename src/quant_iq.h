/* The IQ block dequantizers (quant_iq.c), one block each: IQ4_NL 32
 * values, the others 256. quant.c dispatches to them. */
#ifndef DP_QUANT_IQ_H
#define DP_QUANT_IQ_H

#include <stdint.h>
#include <string.h>

#include "iq_grids.h"
#include "quant.h"

/* IQ4_NL / IQ4_XS codebook: value of each 4-bit code */
extern const int8_t dp_iq4nl_values[16];

void dp_deq_iq4_nl(const uint8_t *b, float *y);
void dp_deq_iq4_xs(const uint8_t *b, float *y);
void dp_deq_iq2_xxs(const uint8_t *b, float *y);
void dp_deq_iq2_xs(const uint8_t *b, float *y);
void dp_deq_iq2_s(const uint8_t *b, float *y);
void dp_deq_iq3_xxs(const uint8_t *b, float *y);
void dp_deq_iq3_s(const uint8_t *b, float *y);
/* The 8 signs of an IQ2 / IQ3 group from its 7 stored bits (index: those
 * bits): bit 7 makes the count of minus signs even. */
extern const uint8_t dp_iq_signs7[128];

/* Group l (values 8 l .. 8 l + 7) of sub-block j (values 32 j ..) of an IQ2
 * / IQ3 super-block b (type IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS or IQ3_S):
 * its 8 magnitudes (byte k: value k) and, in *sg, its signs (bit k set:
 * value k negative). The SIMD kernels and the scalar integer reference
 * read the blocks through this; dp_deq_* spell the same layouts out. */
static inline uint64_t dp_iq_group(const int type, const uint8_t *b, int j, int l, unsigned *sg) {
    uint32_t aux;
    switch (type) {
    case DP_TYPE_IQ2_XXS:
        memcpy(&aux, b + 6 + 8 * j, 4);
        *sg = dp_iq_signs7[(aux >> 7 * l) & 127];
        return dp_iq2xxs_grid[b[2 + 8 * j + l]];
    case DP_TYPE_IQ2_XS: {
        const unsigned q = (unsigned)b[2 + 8 * j + 2 * l] | (unsigned)b[3 + 8 * j + 2 * l] << 8;
        *sg = dp_iq_signs7[q >> 9];
        return dp_iq2xs_grid[q & 511];
    }
    case DP_TYPE_IQ2_S:
        *sg = b[34 + 4 * j + l];
        return dp_iq2s_grid[b[2 + 4 * j + l] | ((b[66 + j] << (8 - 2 * l)) & 0x300)];
    case DP_TYPE_IQ3_XXS:
        memcpy(&aux, b + 66 + 4 * j, 4);
        *sg = dp_iq_signs7[(aux >> 7 * l) & 127];
        return dp_iq3xxs_grid[b[2 + 8 * j + 2 * l]] | (uint64_t)dp_iq3xxs_grid[b[3 + 8 * j + 2 * l]] << 32;
    default: { /* IQ3_S */
        const unsigned h = b[66 + j];
        *sg = b[74 + 4 * j + l];
        return dp_iq3s_grid[b[2 + 8 * j + 2 * l] | ((h << (8 - 2 * l)) & 256)] |
               (uint64_t)dp_iq3s_grid[b[3 + 8 * j + 2 * l] | ((h << (7 - 2 * l)) & 256)] << 32;
    }
    }
}

/* The f16 d at offset 0 of every IQ2 / IQ3 super-block times the 4-bit
 * scale code s of a sub-block (IQ2_XS, IQ2_S: of a 16-value half), in
 * dp_deq_*'s order of float operations */
static inline float dp_iq_scale(const int type, float d, unsigned s) {
    if (type == DP_TYPE_IQ3_S) return d * (float)(1 + 2 * s);
    return d * (0.5f + (float)s) * (type == DP_TYPE_IQ3_XXS ? 0.5f : 0.25f);
}
/* That scale code of half h of sub-block j (h ignored where the scale
 * covers 32 values) */
static inline unsigned dp_iq_scale_code(const int type, const uint8_t *b, int j, int h) {
    uint32_t aux;
    switch (type) {
    case DP_TYPE_IQ2_XXS: memcpy(&aux, b + 6 + 8 * j, 4); return aux >> 28;
    case DP_TYPE_IQ2_XS: return (b[66 + j] >> 4 * h) & 15;
    case DP_TYPE_IQ2_S: return (b[74 + j] >> 4 * h) & 15;
    case DP_TYPE_IQ3_XXS: memcpy(&aux, b + 66 + 4 * j, 4); return aux >> 28;
    default: return (b[106 + j / 2] >> 4 * (j % 2)) & 15;
    }
}
/* Super-block bytes of the five types */
static inline int dp_iq_block_bytes(const int type) {
    switch (type) {
    case DP_TYPE_IQ2_XXS: return 66;
    case DP_TYPE_IQ2_XS: return 74;
    case DP_TYPE_IQ2_S: return 82;
    case DP_TYPE_IQ3_XXS: return 98;
    default: return 110;
    }
}

/* Round-to-nearest quantizers of one block (doppler's own scheme) */
void dp_q_iq4_nl(const float *x, uint8_t *b);
void dp_q_iq4_xs(const float *x, uint8_t *b);

#endif
