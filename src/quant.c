/* Block formats (ggml definitions): dequantization and float dot products.
 * Each format's block layout is spelled out next to its dequantizer. */
#include "quant.h"

#include <math.h>
#include <string.h>

#include "util.h"

static inline float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return dp_fp16_to_f32(h);
}

/* Q4_0: f16 d, 16 bytes of nibbles. y[j] = (lo - 8) d, y[j+16] = (hi - 8) d */
static void deq_q4_0(const uint8_t *b, float *y) {
    float d = h2f(b);
    const uint8_t *qs = b + 2;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)((qs[j] & 0x0f) - 8) * d;
        y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
    }
}

/* Q4_1: f16 d, f16 m, 16 bytes of nibbles. y = q d + m */
static void deq_q4_1(const uint8_t *b, float *y) {
    float d = h2f(b), m = h2f(b + 2);
    const uint8_t *qs = b + 4;
    for (int j = 0; j < 16; j++) {
        y[j] = (float)(qs[j] & 0x0f) * d + m;
        y[j + 16] = (float)(qs[j] >> 4) * d + m;
    }
}

/* Q5_0: f16 d, u32 qh (fifth bits), 16 bytes of nibbles. y = (q - 16) d */
static void deq_q5_0(const uint8_t *b, float *y) {
    float d = h2f(b);
    uint32_t qh;
    memcpy(&qh, b + 2, 4);
    const uint8_t *qs = b + 6;
    for (int j = 0; j < 16; j++) {
        int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        y[j] = (float)(((qs[j] & 0x0f) | h0) - 16) * d;
        y[j + 16] = (float)(((qs[j] >> 4) | h1) - 16) * d;
    }
}

/* Q5_1: f16 d, f16 m, u32 qh, 16 bytes of nibbles. y = q d + m */
static void deq_q5_1(const uint8_t *b, float *y) {
    float d = h2f(b), m = h2f(b + 2);
    uint32_t qh;
    memcpy(&qh, b + 4, 4);
    const uint8_t *qs = b + 8;
    for (int j = 0; j < 16; j++) {
        int h0 = ((qh >> j) << 4) & 0x10, h1 = (qh >> (j + 12)) & 0x10;
        y[j] = (float)((qs[j] & 0x0f) | h0) * d + m;
        y[j + 16] = (float)((qs[j] >> 4) | h1) * d + m;
    }
}

/* Q8_0: f16 d, 32 int8. y = q d */
static void deq_q8_0(const uint8_t *b, float *y) {
    float d = h2f(b);
    const int8_t *qs = (const int8_t *)(b + 2);
    for (int j = 0; j < 32; j++) y[j] = (float)qs[j] * d;
}

/* Q2_K (256): scales[16] (lo nibble scale, hi nibble min), qs[64] (2-bit),
 * f16 d, f16 dmin. */
static void deq_q2_k(const uint8_t *b, float *y) {
    const uint8_t *sc = b, *q = b + 16;
    float d = h2f(b + 80), min = h2f(b + 82);
    int is = 0;
    for (int n = 0; n < QK_K; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; j++) {
            uint8_t s = sc[is++];
            float dl = d * (float)(s & 0xf), ml = min * (float)(s >> 4);
            for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[l] >> shift) & 3) - ml;
            s = sc[is++];
            dl = d * (float)(s & 0xf), ml = min * (float)(s >> 4);
            for (int l = 0; l < 16; l++) *y++ = dl * (float)((q[l + 16] >> shift) & 3) - ml;
            shift += 2;
        }
        q += 32;
    }
}

/* Q3_K (256): hmask[32] (high bit, set = no -4), qs[64] (low 2 bits),
 * scales[12] (16 six-bit scales, offset 32), f16 d. */
static void deq_q3_k(const uint8_t *b, float *y) {
    const uint8_t *hm = b, *q = b + 32;
    float d_all = h2f(b + 108);
    uint32_t aux[4];
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    memcpy(aux, b + 96, 12);
    uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    const int8_t *scales = (const int8_t *)aux;
    int is = 0;
    uint8_t m = 1;
    for (int n = 0; n < QK_K; n += 128) {
        int shift = 0;
        for (int j = 0; j < 4; j++) {
            float dl = d_all * (float)(scales[is++] - 32);
            for (int l = 0; l < 16; l++)
                *y++ = dl * (float)((int8_t)((q[l] >> shift) & 3) - ((hm[l] & m) ? 0 : 4));
            dl = d_all * (float)(scales[is++] - 32);
            for (int l = 0; l < 16; l++)
                *y++ = dl * (float)((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
            shift += 2;
            m <<= 1;
        }
        q += 32;
    }
}

/* 6-bit scale and min j (0..7) of the 12 packed bytes used by Q4_K/Q5_K. */
static inline void scale_min_k4(int j, const uint8_t *q, uint8_t *d, uint8_t *m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (uint8_t)((q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}

/* Q4_K (256): f16 d, f16 dmin, scales[12], qs[128]. Eight sub-blocks of 32;
 * sub-blocks 2i and 2i+1 share 32 bytes (low then high nibbles). */
static void deq_q4_k(const uint8_t *b, float *y) {
    float d = h2f(b), min = h2f(b + 2);
    const uint8_t *sc = b + 4, *q = b + 16;
    int is = 0;
    for (int j = 0; j < QK_K; j += 64) {
        uint8_t s, mm;
        scale_min_k4(is, sc, &s, &mm);
        float d1 = d * (float)s, m1 = min * (float)mm;
        scale_min_k4(is + 1, sc, &s, &mm);
        float d2 = d * (float)s, m2 = min * (float)mm;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)(q[l] & 0xf) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (float)(q[l] >> 4) - m2;
        q += 32;
        is += 2;
    }
}

/* Q5_K (256): f16 d, f16 dmin, scales[12], qh[32], qs[128]. */
static void deq_q5_k(const uint8_t *b, float *y) {
    float d = h2f(b), min = h2f(b + 2);
    const uint8_t *sc = b + 4, *qh = b + 16, *ql = b + 48;
    int is = 0;
    uint8_t u1 = 1, u2 = 2;
    for (int j = 0; j < QK_K; j += 64) {
        uint8_t s, mm;
        scale_min_k4(is, sc, &s, &mm);
        float d1 = d * (float)s, m1 = min * (float)mm;
        scale_min_k4(is + 1, sc, &s, &mm);
        float d2 = d * (float)s, m2 = min * (float)mm;
        for (int l = 0; l < 32; l++) *y++ = d1 * (float)((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        ql += 32;
        is += 2;
        u1 <<= 2;
        u2 <<= 2;
    }
}

/* Q6_K (256): ql[128] (low 4 bits), qh[64] (high 2 bits), int8 scales[16],
 * f16 d. y = d * scale * (q - 32) */
static void deq_q6_k(const uint8_t *b, float *y) {
    const uint8_t *ql = b, *qh = b + 128;
    const int8_t *sc = (const int8_t *)(b + 192);
    float d = h2f(b + 208);
    for (int n = 0; n < QK_K; n += 128) {
        for (int l = 0; l < 32; l++) {
            int is = l / 16;
            int q1 = (int8_t)((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
            int q2 = (int8_t)((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
            int q3 = (int8_t)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            int q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * (float)sc[is] * (float)q1;
            y[l + 32] = d * (float)sc[is + 2] * (float)q2;
            y[l + 64] = d * (float)sc[is + 4] * (float)q3;
            y[l + 96] = d * (float)sc[is + 6] * (float)q4;
        }
        y += 128;
        ql += 64;
        qh += 32;
        sc += 8;
    }
}

typedef void (*deq_block_fn)(const uint8_t *b, float *y);

static deq_block_fn block_fn(int type) {
    switch (type) {
    case DP_TYPE_Q4_0: return deq_q4_0;
    case DP_TYPE_Q4_1: return deq_q4_1;
    case DP_TYPE_Q5_0: return deq_q5_0;
    case DP_TYPE_Q5_1: return deq_q5_1;
    case DP_TYPE_Q8_0: return deq_q8_0;
    case DP_TYPE_Q2_K: return deq_q2_k;
    case DP_TYPE_Q3_K: return deq_q3_k;
    case DP_TYPE_Q4_K: return deq_q4_k;
    case DP_TYPE_Q5_K: return deq_q5_k;
    case DP_TYPE_Q6_K: return deq_q6_k;
    default: return NULL;
    }
}

void dp_dequantize_row(int type, const void *src, float *dst, int64_t n) {
    const uint8_t *p = src;
    switch (type) {
    case DP_TYPE_F32: memcpy(dst, src, (size_t)n * 4); return;
    case DP_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = dp_fp16_to_f32(h);
        }
        return;
    case DP_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            dst[i] = dp_bf16_to_f32(h);
        }
        return;
    default: break;
    }
    deq_block_fn fn = block_fn(type);
    const dp_type_traits *t = dp_type_get(type);
    if (!fn || !t) {
        for (int64_t i = 0; i < n; i++) dst[i] = NAN;
        return;
    }
    for (int64_t i = 0; i < n / t->block_size; i++) fn(p + i * t->type_size, dst + i * t->block_size);
}

float dp_vec_dot_f32(int type, const void *row, const float *x, int64_t n) {
    float buf[QK_K];
    const uint8_t *p = row;
    float sum = 0;
    if (type == DP_TYPE_F32) {
        const float *w = row;
        for (int64_t i = 0; i < n; i++) sum += w[i] * x[i];
        return sum;
    }
    const dp_type_traits *t = dp_type_get(type);
    int bs = t->block_size == 1 ? QK_K : t->block_size;
    for (int64_t i = 0; i < n; i += bs) {
        int k = (int)(n - i < bs ? n - i : bs);
        dp_dequantize_row(type, p + dp_row_size(type, i), buf, k);
        for (int j = 0; j < k; j++) sum += buf[j] * x[i + j];
    }
    return sum;
}

int dp_quantize_row(int type, const float *src, void *dst, int64_t n) {
    (void)src;
    (void)dst;
    (void)n;
    (void)type;
    return -1; /* quantizers: see the quant issue work */
}
