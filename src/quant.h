/* Tensor element types (ggml type ids as stored in GGUF) and the block
 * formats: dequantization, dot products with float vectors, quantization.
 *
 * All block layouts follow the ggml definitions exactly; sizes below are
 * bytes per block of block_size elements. */
#ifndef DP_QUANT_H
#define DP_QUANT_H

#include <stddef.h>
#include <stdint.h>

enum {
    DP_TYPE_F32 = 0, DP_TYPE_F16 = 1, DP_TYPE_Q4_0 = 2, DP_TYPE_Q4_1 = 3,
    DP_TYPE_Q5_0 = 6, DP_TYPE_Q5_1 = 7, DP_TYPE_Q8_0 = 8, DP_TYPE_Q8_1 = 9,
    DP_TYPE_Q2_K = 10, DP_TYPE_Q3_K = 11, DP_TYPE_Q4_K = 12, DP_TYPE_Q5_K = 13,
    DP_TYPE_Q6_K = 14, DP_TYPE_Q8_K = 15,
    DP_TYPE_IQ2_XXS = 16, DP_TYPE_IQ2_XS = 17, DP_TYPE_IQ3_XXS = 18, DP_TYPE_IQ1_S = 19,
    DP_TYPE_IQ4_NL = 20, DP_TYPE_IQ3_S = 21, DP_TYPE_IQ2_S = 22, DP_TYPE_IQ4_XS = 23,
    DP_TYPE_I8 = 24, DP_TYPE_I16 = 25, DP_TYPE_I32 = 26, DP_TYPE_I64 = 27,
    DP_TYPE_F64 = 28, DP_TYPE_IQ1_M = 29, DP_TYPE_BF16 = 30,
    DP_TYPE_TQ1_0 = 34, DP_TYPE_TQ2_0 = 35, DP_TYPE_MXFP4 = 39,
    DP_TYPE_COUNT = 40
};

#define QK_K 256

/* 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes q of
 * a Q4_K / Q5_K super-block. */
static inline void dp_scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Signed 6-bit scale s (0..15, one per 16 values) of a Q3_K super-block
 * from its 12 packed bytes q: the low nibble in byte s % 8 (the high
 * nibble for s >= 8), the top two bits in byte 8 + s % 4 at bit 2 (s / 4),
 * stored with an offset of 32. */
static inline int dp_scale_q3_k(int s, const uint8_t *q) {
    return (((q[s % 8] >> 4 * (s / 8)) & 15) | ((q[8 + s % 4] >> 2 * (s / 4)) & 3) << 4) - 32;
}

typedef struct {
    const char *name;        /* "Q4_K" */
    int block_size;          /* elements per block */
    int type_size;           /* bytes per block */
    int supported;           /* doppler can compute with it */
} dp_type_traits;

/* NULL when the id is not a ggml type at all. */
const dp_type_traits *dp_type_get(int type);
const char *dp_type_name(int type);          /* "?" when unknown */
int dp_type_from_name(const char *name);     /* case-insensitive; -1 when unknown */
/* Bytes of n elements (n must be a multiple of the block size). */
uint64_t dp_row_size(int type, int64_t n);

/* Dequantizes n elements (a multiple of the block size) of one row. */
void dp_dequantize_row(int type, const void *src, float *dst, int64_t n);

/* Dot product of one quantized row of n elements with a float vector. Equals
 * dequantize-then-dot up to float rounding: it dequantizes one block (F16/
 * BF16: 256 elements) at a time into a small stack buffer, sums each block's
 * products in float and the block sums in double. Portable scalar C. NaN
 * when the type is not supported or n is not a whole number of blocks. */
float dp_vec_dot_f32(int type, const void *row, const float *x, int64_t n);

/* Quantizes n floats (a multiple of the block size) into blocks of type:
 * F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 exactly as ggml's reference
 * quantizers (the same bytes as gguf-py's); Q2_K, Q3_K, Q4_K, Q5_K, Q6_K
 * with doppler's own round-to-nearest scheme (min/max or absmax sub-block
 * scales, then integer scales against the stored f16 super-scales) in the
 * ggml block layouts; IQ4_NL, IQ4_XS with doppler's own round-to-nearest
 * codebook scheme (quant_iq.c). Inputs should be finite. Returns 0, or -1 when the
 * type cannot be produced or n is not a whole number of blocks. */
int dp_quantize_row(int type, const float *src, void *dst, int64_t n);

#endif
