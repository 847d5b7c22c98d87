/* The IQ block formats (ggml definitions): dequantization of one block.
 * IQ4_NL / IQ4_XS map 4-bit codes through a 16-value non-linear codebook;
 * IQ2 / IQ3 index grids of 8 (IQ2) or 4 (IQ3) byte magnitudes (iq_grids.c)
 * with 7 stored sign bits per 8 values (the eighth makes the count of
 * minus signs even) and 4-bit sub-block scales. Products are written in
 * ggml's order so every value is bit-identical to its reference. */
#include <math.h>
#include <string.h>

#include "iq_grids.h"
#include "quant_iq.h"
#include "util.h"

const int8_t dp_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return dp_fp16_to_f32(h);
}

static inline uint32_t ld32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The 8 signs of a group from its 7 stored bits: bit 7 is their parity. */
static inline uint8_t signs7(uint32_t bits7) {
    uint32_t s = bits7 & 127;
    return (uint8_t)(s | (uint32_t)(__builtin_popcount(s) & 1) << 7);
}

#define S7(i) (uint8_t)((i) | (((i) ^ (i) >> 1 ^ (i) >> 2 ^ (i) >> 3 ^ (i) >> 4 ^ (i) >> 5 ^ (i) >> 6) & 1) << 7)
#define S7x8(i) S7(i), S7(i + 1), S7(i + 2), S7(i + 3), S7(i + 4), S7(i + 5), S7(i + 6), S7(i + 7)
const uint8_t dp_iq_signs7[128] = {S7x8(0),  S7x8(8),  S7x8(16), S7x8(24), S7x8(32),  S7x8(40),  S7x8(48),  S7x8(56),
                                   S7x8(64), S7x8(72), S7x8(80), S7x8(88), S7x8(96), S7x8(104), S7x8(112), S7x8(120)};
#undef S7x8
#undef S7

/* y[j] = db * byte j of the grid entry, negated where bit j of signs is set */
static inline void grid8(float *y, float db, uint64_t g, uint8_t signs) {
    for (int j = 0; j < 8; j++) y[j] = db * (float)(uint8_t)(g >> 8 * j) * (signs >> j & 1 ? -1.f : 1.f);
}

/* IQ4_NL: f16 d, 16 bytes of nibbles. y[j] = d v[lo], y[j+16] = d v[hi] */
void dp_deq_iq4_nl(const uint8_t *b, float *y) {
    float d = h2f(b);
    for (int j = 0; j < 16; j++) {
        y[j] = d * dp_iq4nl_values[b[2 + j] & 15];
        y[j + 16] = d * dp_iq4nl_values[b[2 + j] >> 4];
    }
}

/* IQ4_XS: f16 d, u16 scales_h, scales_l[4], qs[128]. Sub-block j of 32:
 * 6-bit scale ls (low 4 bits from scales_l, high 2 from scales_h),
 * d (ls - 32) times the codebook values of 16 bytes of nibbles. */
void dp_deq_iq4_xs(const uint8_t *b, float *y) {
    float d = h2f(b);
    unsigned sh = (unsigned)b[2] | (unsigned)b[3] << 8;
    for (int j = 0; j < 8; j++, y += 32) {
        int ls = ((b[4 + j / 2] >> 4 * (j % 2)) & 15) | ((sh >> 2 * j) & 3) << 4;
        float dl = d * (float)(ls - 32);
        const uint8_t *qs = b + 8 + 16 * j;
        for (int i = 0; i < 16; i++) {
            y[i] = dl * dp_iq4nl_values[qs[i] & 15];
            y[i + 16] = dl * dp_iq4nl_values[qs[i] >> 4];
        }
    }
}

/* ---------------------------------------------------- IQ4 quantizers
 * doppler's own round-to-nearest scheme in the ggml layouts: the scale maps
 * the value of largest magnitude onto the codebook's end (-127), every value
 * takes the nearest codebook entry. */

static inline void put_f16(uint8_t *p, float v) {
    uint16_t h = dp_f32_to_fp16(v);
    memcpy(p, &h, 2);
}

/* Midpoints between consecutive codebook values (exact in float: halves of
 * integers). */
static const float g_mid[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};

/* the code whose codebook value is nearest v (the lower one on ties): four
 * steps of a binary search over the midpoints */
static inline int nearest_code(float v) {
    int c = v > g_mid[7] ? 8 : 0;
    c += v > g_mid[c + 3] ? 4 : 0;
    c += v > g_mid[c + 1] ? 2 : 0;
    c += v > g_mid[c] ? 1 : 0;
    return c;
}

/* the signed value of largest magnitude among n */
static float signed_absmax(const float *x, int n) {
    float m = 0.0f;
    for (int j = 0; j < n; j++)
        if (fabsf(x[j]) > fabsf(m)) m = x[j];
    return m;
}

/* 16 bytes of nibbles: x[j] low, x[j + 16] high, against scale d */
static void put_codes(const float *x, float d, uint8_t *qs) {
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 16; j++)
        qs[j] = (uint8_t)(nearest_code(x[j] * id) | nearest_code(x[j + 16] * id) << 4);
}

void dp_q_iq4_nl(const float *x, uint8_t *b) {
    float d = signed_absmax(x, 32) / (float)dp_iq4nl_values[0];
    put_f16(b, d);
    put_codes(x, dp_fp16_to_f32(dp_f32_to_fp16(d)), b + 2);
}

/* IQ4_XS: sub-block scales as for IQ4_NL, then d maps the one of largest
 * magnitude onto -32, and each sub-block's ls - 32 = round(scale / d) in
 * [-32, 31]. */
void dp_q_iq4_xs(const float *x, uint8_t *b) {
    float sub[8];
    for (int j = 0; j < 8; j++) sub[j] = signed_absmax(x + 32 * j, 32) / (float)dp_iq4nl_values[0];
    float d = signed_absmax(sub, 8) / -32.0f;
    put_f16(b, d);
    d = dp_fp16_to_f32(dp_f32_to_fp16(d));
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    unsigned sh = 0;
    memset(b + 4, 0, 4);
    for (int j = 0; j < 8; j++) {
        float t = sub[j] * id;
        int l = isfinite(t) ? (int)lrintf(fmaxf(-32.0f, fminf(31.0f, t))) : 0;
        int ls = l + 32;
        b[4 + j / 2] |= (uint8_t)((ls & 15) << 4 * (j % 2));
        sh |= (unsigned)(ls >> 4) << 2 * j;
        put_codes(x + 32 * j, d * (float)l, b + 8 + 16 * j);
    }
    b[2] = (uint8_t)sh;
    b[3] = (uint8_t)(sh >> 8);
}

/* IQ2_XXS: f16 d, then per 32 values two u32: four 8-bit grid indices, and
 * four 7-bit sign groups with a 4-bit scale s on top: d (0.5 + s) / 4. */
void dp_deq_iq2_xxs(const uint8_t *b, float *y) {
    float d = h2f(b);
    for (int j = 0; j < 8; j++) {
        const uint8_t *q = b + 2 + 8 * j;
        uint32_t aux = ld32(q + 4);
        float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
        for (int l = 0; l < 4; l++, y += 8) grid8(y, db, dp_iq2xxs_grid[q[l]], signs7(aux >> 7 * l));
    }
}

/* IQ2_XS: f16 d, u16 qs[32] (9-bit grid index, 7 sign bits), scales[8]
 * (two 4-bit scales per 32 values, one per 16). */
void dp_deq_iq2_xs(const uint8_t *b, float *y) {
    float d = h2f(b);
    const uint8_t *sc = b + 66;
    for (int j = 0; j < 8; j++) {
        float db[2] = {d * (0.5f + (float)(sc[j] & 15)) * 0.25f, d * (0.5f + (float)(sc[j] >> 4)) * 0.25f};
        for (int l = 0; l < 4; l++, y += 8) {
            unsigned q = (unsigned)b[2 + 8 * j + 2 * l] | (unsigned)b[3 + 8 * j + 2 * l] << 8;
            grid8(y, db[l / 2], dp_iq2xs_grid[q & 511], signs7(q >> 9));
        }
    }
}

/* IQ2_S: f16 d, qs[32] (low 8 bits of 10-bit grid indices), signs[32] (a
 * full byte per 8 values), qh[8] (2 high index bits each), scales[8]. */
void dp_deq_iq2_s(const uint8_t *b, float *y) {
    float d = h2f(b);
    const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *sc = b + 74;
    for (int j = 0; j < 8; j++) {
        float db[2] = {d * (0.5f + (float)(sc[j] & 15)) * 0.25f, d * (0.5f + (float)(sc[j] >> 4)) * 0.25f};
        for (int l = 0; l < 4; l++, y += 8)
            grid8(y, db[l / 2], dp_iq2s_grid[qs[4 * j + l] | ((qh[j] << (8 - 2 * l)) & 0x300)], signs[4 * j + l]);
    }
}

/* y[0..3] and y[4..7] from two IQ3 grid entries and the group's signs */
static inline void grid4x2(float *y, float db, uint32_t g1, uint32_t g2, uint8_t signs) {
    for (int j = 0; j < 4; j++) {
        y[j] = db * (float)(uint8_t)(g1 >> 8 * j) * (signs >> j & 1 ? -1.f : 1.f);
        y[j + 4] = db * (float)(uint8_t)(g2 >> 8 * j) * (signs >> (j + 4) & 1 ? -1.f : 1.f);
    }
}

/* IQ3_XXS: f16 d, qs[64] (8-bit indices of 4 values), then per 32 values a
 * u32 of four 7-bit sign groups and a 4-bit scale s: d (0.5 + s) / 2. */
void dp_deq_iq3_xxs(const uint8_t *b, float *y) {
    float d = h2f(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 8; j++) {
        uint32_t aux = ld32(b + 66 + 4 * j);
        float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
        for (int l = 0; l < 4; l++, y += 8)
            grid4x2(y, db, dp_iq3xxs_grid[qs[8 * j + 2 * l]], dp_iq3xxs_grid[qs[8 * j + 2 * l + 1]],
                    signs7(aux >> 7 * l));
    }
}

/* IQ3_S: f16 d, qs[64] (low 8 bits of 9-bit indices), qh[8] (the ninth
 * bits), signs[32] (a byte per 8 values), scales[4] (4-bit, one per 32:
 * d (1 + 2 s)). */
void dp_deq_iq3_s(const uint8_t *b, float *y) {
    float d = h2f(b);
    const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *sc = b + 106;
    for (int j = 0; j < 8; j++) {
        float db = d * (float)(1 + 2 * ((sc[j / 2] >> 4 * (j % 2)) & 15));
        for (int l = 0; l < 4; l++, y += 8) {
            int i1 = qs[8 * j + 2 * l] | ((qh[j] << (8 - 2 * l)) & 256);
            int i2 = qs[8 * j + 2 * l + 1] | ((qh[j] << (7 - 2 * l)) & 256);
            grid4x2(y, db, dp_iq3s_grid[i1], dp_iq3s_grid[i2], signs[4 * j + l]);
        }
    }
}
