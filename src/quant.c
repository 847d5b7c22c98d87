/* Block formats (ggml definitions): dequantization, float dot products and
 * reference quantizers. Each format's block layout is spelled out next to its
 * dequantizer.
 *
 * Bit-exactness with ggml / gguf-py needs every a*b+c here rounded twice, as
 * written: never let the compiler fuse it into an FMA (GCC does under e.g.
 * -march=native, its default being -ffp-contract=fast; clang honours the
 * pragma unless built with -ffp-contract=fast). The dequantizers' products
 * happen to be exact in float, but the quantizers' x*id + 8.5 are not. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "quant.h"

#include <math.h>
#include <string.h>

#include "quant_iq.h"
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

/* Q4_K (256): f16 d, f16 dmin, scales[12], qs[128]. Eight sub-blocks of 32;
 * sub-blocks 2i and 2i+1 share 32 bytes (low then high nibbles). */
static void deq_q4_k(const uint8_t *b, float *y) {
    float d = h2f(b), min = h2f(b + 2);
    const uint8_t *sc = b + 4, *q = b + 16;
    int is = 0;
    for (int j = 0; j < QK_K; j += 64) {
        uint8_t s, mm;
        dp_scale_min_k4(is, sc, &s, &mm);
        float d1 = d * (float)s, m1 = min * (float)mm;
        dp_scale_min_k4(is + 1, sc, &s, &mm);
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
        dp_scale_min_k4(is, sc, &s, &mm);
        float d1 = d * (float)s, m1 = min * (float)mm;
        dp_scale_min_k4(is + 1, sc, &s, &mm);
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
    case DP_TYPE_IQ4_NL: return dp_deq_iq4_nl;
    case DP_TYPE_IQ4_XS: return dp_deq_iq4_xs;
    case DP_TYPE_IQ2_XXS: return dp_deq_iq2_xxs;
    case DP_TYPE_IQ2_XS: return dp_deq_iq2_xs;
    case DP_TYPE_IQ2_S: return dp_deq_iq2_s;
    case DP_TYPE_IQ3_XXS: return dp_deq_iq3_xxs;
    case DP_TYPE_IQ3_S: return dp_deq_iq3_s;
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

/* ------------------------------------------------------------ dot products */

/* Sum of a[j] * b[j] over k elements, in eight interleaved float partial
 * sums (independent chains the compiler can keep in vector registers). */
static float dot_f32(const float *a, const float *b, int64_t k) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t j = 0;
    for (; j + 8 <= k; j += 8)
        for (int u = 0; u < 8; u++) acc[u] += a[j + u] * b[j + u];
    for (; j < k; j++) acc[j & 7] += a[j] * b[j];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

float dp_vec_dot_f32(int type, const void *row, const float *x, int64_t n) {
    float buf[QK_K];
    const uint8_t *p = row;
    const dp_type_traits *t = dp_type_get(type);
    if (!t || !t->supported || n < 0 || n % t->block_size) return NAN;
    if (type == DP_TYPE_F32) {
        const float *w = row;
        return dot_f32(w, x, n);
    }
    /* Dequantize one block (or, for F16/BF16, QK_K elements) at a time. */
    int64_t chunk = t->block_size == 1 ? QK_K : t->block_size;
    double sum = 0;
    for (int64_t i = 0; i < n; i += chunk) {
        int64_t k = n - i < chunk ? n - i : chunk;
        dp_dequantize_row(type, p + dp_row_size(type, i), buf, k);
        sum += dot_f32(buf, x + i, k);
    }
    return (float)sum;
}

/* ------------------------------------------------------------- quantizers
 *
 * Q4_0, Q4_1, Q5_0, Q5_1 and Q8_0 follow ggml's reference quantizers
 * operation for operation (gguf-py's numpy ones do the same), so they give
 * the same bytes. The K-quants are doppler's own round-to-nearest schemes:
 * per sub-block scales (and mins) from the value range, then those scales
 * quantized to the format's integer width against the f16 super-block
 * scales that are actually stored, then the elements rounded against the
 * resulting effective scales. Inputs should be finite; scales that overflow
 * f16 (values beyond ~1e6 for Q4_0) give Inf as ggml's would. */

static inline void put_f16(uint8_t *p, float f) {
    uint16_t h = dp_f32_to_fp16(f);
    memcpy(p, &h, 2);
}

/* (int)v clamped to [0, hi]; NaN gives 0. Equals trunc-then-clip for v >= 0. */
static inline int trunc_clamp(float v, int hi) {
    if (!(v >= 0.0f)) return 0;
    if (v >= (float)hi) return hi;
    return (int)v;
}

/* Nearest integer (ties away from zero) of v clamped to [lo, hi]; NaN gives 0. */
static inline int round_clamp(float v, int lo, int hi) {
    if (!(v == v)) return 0;
    if (v <= (float)lo) return lo;
    if (v >= (float)hi) return hi;
    return (int)roundf(v);
}

/* The value of largest magnitude (first one on ties), with its sign. */
static inline float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

static inline void min_max(const float *x, int n, float *mn, float *mx) {
    float lo = INFINITY, hi = -INFINITY;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo) lo = x[j];
        if (x[j] > hi) hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

static void q_q4_0(const float *x, uint8_t *b) {
    float d = signed_absmax(x, 32) / -8.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 16; j++) {
        int lo = trunc_clamp(x[j] * id + 8.5f, 15), hi = trunc_clamp(x[j + 16] * id + 8.5f, 15);
        b[2 + j] = (uint8_t)(lo | (hi << 4));
    }
}

static void q_q4_1(const float *x, uint8_t *b) {
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    float d = (mx - mn) / 15.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    put_f16(b + 2, mn);
    for (int j = 0; j < 16; j++) {
        int lo = trunc_clamp((x[j] - mn) * id + 0.5f, 15), hi = trunc_clamp((x[j + 16] - mn) * id + 0.5f, 15);
        b[4 + j] = (uint8_t)(lo | (hi << 4));
    }
}

/* Stores 32 five-bit values: u32 qh (bit j = bit 4 of value j), 16 bytes of
 * nibbles (value j low, value j + 16 high). */
static void put_q5(const int *q, uint8_t *qh_out, uint8_t *qs) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        qs[j] = (uint8_t)((q[j] & 0xf) | ((q[j + 16] & 0xf) << 4));
        qh |= (uint32_t)((q[j] >> 4) & 1) << j;
        qh |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    memcpy(qh_out, &qh, 4);
}

static void q_q5_0(const float *x, uint8_t *b) {
    float d = signed_absmax(x, 32) / -16.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q[32];
    for (int j = 0; j < 32; j++) q[j] = trunc_clamp(x[j] * id + 16.5f, 31);
    put_f16(b, d);
    put_q5(q, b + 2, b + 6);
}

static void q_q5_1(const float *x, uint8_t *b) {
    float mn, mx;
    min_max(x, 32, &mn, &mx);
    float d = (mx - mn) / 31.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    int q[32];
    for (int j = 0; j < 32; j++) q[j] = trunc_clamp((x[j] - mn) * id + 0.5f, 31);
    put_f16(b, d);
    put_f16(b + 2, mn);
    put_q5(q, b + 4, b + 8);
}

static void q_q8_0(const float *x, uint8_t *b) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    float d = amax / 127.0f;
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    put_f16(b, d);
    for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)round_clamp(x[j] * id, -127, 127);
}

/* Asymmetric sub-block quantization shared by Q2_K, Q4_K and Q5_K:
 * y = d * sc[s] * q - dmin * m[s], q in [0, nq], sc and m in [0, nsc].
 * ns sub-blocks of len elements. Writes the f16 d and dmin (through
 * d_out/dmin_out), sc[], m[] and q[] (one per element). */
static void quant_asym_k(const float *x, int ns, int len, int nq, int nsc, uint8_t *d_out, uint8_t *dmin_out,
                         int *sc, int *m, uint8_t *q) {
    float scale[16], minv[16], max_scale = 0.0f, max_min = 0.0f;
    for (int s = 0; s < ns; s++) {
        float mn, mx;
        min_max(x + s * len, len, &mn, &mx);
        if (mn > 0.0f) mn = 0.0f; /* the format subtracts a non-negative min */
        scale[s] = (mx - mn) / (float)nq;
        minv[s] = -mn;
        if (scale[s] > max_scale) max_scale = scale[s];
        if (minv[s] > max_min) max_min = minv[s];
    }
    uint16_t dh = dp_f32_to_fp16(max_scale / (float)nsc), mh = dp_f32_to_fp16(max_min / (float)nsc);
    memcpy(d_out, &dh, 2);
    memcpy(dmin_out, &mh, 2);
    float d = dp_fp16_to_f32(dh), dmin = dp_fp16_to_f32(mh);
    float id = d > 0.0f ? 1.0f / d : 0.0f, imin = dmin > 0.0f ? 1.0f / dmin : 0.0f;
    for (int s = 0; s < ns; s++) {
        sc[s] = round_clamp(scale[s] * id, 0, nsc);
        m[s] = round_clamp(minv[s] * imin, 0, nsc);
        float dl = d * (float)sc[s], ml = dmin * (float)m[s];
        float idl = dl > 0.0f ? 1.0f / dl : 0.0f;
        for (int j = 0; j < len; j++) q[s * len + j] = (uint8_t)round_clamp((x[s * len + j] + ml) * idl, 0, nq);
    }
}

/* Symmetric sub-block quantization shared by Q3_K and Q6_K:
 * y = d * sc[s] * q, q in [-nq, nq - 1], sc in [-nsc, nsc - 1]. The value
 * of largest magnitude maps to -nq (the extra negative level), as ggml does.
 * Writes the f16 d to d_out, sc[] and q[] (biased by +nq, so 0..2nq-1). */
static void quant_sym_k(const float *x, int ns, int len, int nq, int nsc, uint8_t *d_out, int *sc, uint8_t *q) {
    float scale[16], smax = 0.0f;
    for (int s = 0; s < ns; s++) scale[s] = signed_absmax(x + s * len, len) / -(float)nq;
    smax = signed_absmax(scale, ns);
    uint16_t dh = dp_f32_to_fp16(smax / -(float)nsc);
    memcpy(d_out, &dh, 2);
    float d = dp_fp16_to_f32(dh);
    float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int s = 0; s < ns; s++) {
        sc[s] = round_clamp(scale[s] * id, -nsc, nsc - 1);
        float dl = d * (float)sc[s];
        float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
        for (int j = 0; j < len; j++) q[s * len + j] = (uint8_t)(round_clamp(x[s * len + j] * idl, -nq, nq - 1) + nq);
    }
}

/* Q2_K: scales[16] (scale | min << 4), qs[64], d, dmin. Element e sits in
 * qs[32 (e / 128) + e % 32] at bit 2 ((e % 128) / 32). */
static void q_q2_k(const float *x, uint8_t *b) {
    int sc[16], m[16];
    uint8_t q[QK_K];
    quant_asym_k(x, 16, 16, 3, 15, b + 80, b + 82, sc, m, q);
    for (int s = 0; s < 16; s++) b[s] = (uint8_t)(sc[s] | (m[s] << 4));
    uint8_t *qs = b + 16;
    memset(qs, 0, 64);
    for (int e = 0; e < QK_K; e++) qs[32 * (e / 128) + e % 32] |= (uint8_t)(q[e] << (2 * ((e % 128) / 32)));
}

/* Q3_K: hmask[32] (bit e / 32 of byte e % 32: value + 4 >= 4), qs[64] (low
 * two bits of value + 4, placed as Q2_K's), scales[12] (16 six-bit values
 * scale + 32: low nibbles in bytes 0..7 (scale s in byte s % 8, high nibble
 * for s >= 8), top two bits of scale s in byte 8 + s % 4 at bit 2 (s / 4)),
 * f16 d. */
static void q_q3_k(const float *x, uint8_t *b) {
    int sc[16];
    uint8_t q[QK_K];
    quant_sym_k(x, 16, 16, 4, 32, b + 108, sc, q);
    uint8_t *hm = b, *qs = b + 32, *scales = b + 96;
    memset(b, 0, 108);
    for (int e = 0; e < QK_K; e++) {
        qs[32 * (e / 128) + e % 32] |= (uint8_t)((q[e] & 3) << (2 * ((e % 128) / 32)));
        hm[e % 32] |= (uint8_t)((q[e] >> 2) << (e / 32));
    }
    for (int s = 0; s < 16; s++) {
        int v = sc[s] + 32;
        scales[s % 8] |= (uint8_t)((v & 0xf) << (4 * (s / 8)));
        scales[8 + s % 4] |= (uint8_t)((v >> 4) << (2 * (s / 4)));
    }
}

/* Packs eight 6-bit scales and mins into Q4_K/Q5_K's 12 bytes (the inverse
 * of dp_scale_min_k4). */
static void put_scale_min_k4(const int *sc, const int *m, uint8_t *q) {
    for (int j = 0; j < 4; j++) {
        q[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        q[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        q[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | ((m[j + 4] & 0xf) << 4));
    }
}

static void q_q4_k(const float *x, uint8_t *b) {
    int sc[8], m[8];
    uint8_t q[QK_K];
    quant_asym_k(x, 8, 32, 15, 63, b, b + 2, sc, m, q);
    put_scale_min_k4(sc, m, b + 4);
    uint8_t *qs = b + 16;
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
}

static void q_q5_k(const float *x, uint8_t *b) {
    int sc[8], m[8];
    uint8_t q[QK_K];
    quant_asym_k(x, 8, 32, 31, 63, b, b + 2, sc, m, q);
    put_scale_min_k4(sc, m, b + 4);
    uint8_t *qh = b + 16, *ql = b + 48;
    memset(qh, 0, 32);
    for (int e = 0; e < QK_K; e++) qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
    for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
            ql[32 * c + l] = (uint8_t)((q[64 * c + l] & 0xf) | ((q[64 * c + 32 + l] & 0xf) << 4));
}

/* Q6_K: ql[128], qh[64], int8 scales[16], f16 d. In each half h of 128
 * elements, element r (0..127): low nibble in ql[64 h + r % 64] (low half
 * for r < 64), high two bits in qh[32 h + r % 32] at bit 2 (r / 32). */
static void q_q6_k(const float *x, uint8_t *b) {
    int sc[16];
    uint8_t q[QK_K];
    quant_sym_k(x, 16, 16, 32, 128, b + 208, sc, q);
    uint8_t *ql = b, *qh = b + 128;
    memset(b, 0, 192);
    for (int e = 0; e < QK_K; e++) {
        int h = e / 128, r = e % 128;
        ql[64 * h + r % 64] |= (uint8_t)((q[e] & 0xf) << (4 * (r / 64)));
        qh[32 * h + r % 32] |= (uint8_t)((q[e] >> 4) << (2 * (r / 32)));
    }
    for (int s = 0; s < 16; s++) b[192 + s] = (uint8_t)(int8_t)sc[s];
}

typedef void (*quant_block_fn)(const float *x, uint8_t *b);

static quant_block_fn quant_fn(int type) {
    switch (type) {
    case DP_TYPE_Q4_0: return q_q4_0;
    case DP_TYPE_Q4_1: return q_q4_1;
    case DP_TYPE_Q5_0: return q_q5_0;
    case DP_TYPE_Q5_1: return q_q5_1;
    case DP_TYPE_Q8_0: return q_q8_0;
    case DP_TYPE_Q2_K: return q_q2_k;
    case DP_TYPE_Q3_K: return q_q3_k;
    case DP_TYPE_Q4_K: return q_q4_k;
    case DP_TYPE_Q5_K: return q_q5_k;
    case DP_TYPE_Q6_K: return q_q6_k;
    case DP_TYPE_IQ4_NL: return dp_q_iq4_nl;
    case DP_TYPE_IQ4_XS: return dp_q_iq4_xs;
    default: return NULL;
    }
}

int dp_quantize_row(int type, const float *src, void *dst, int64_t n) {
    const dp_type_traits *t = dp_type_get(type);
    uint8_t *p = dst;
    if (!t || n < 0 || n % t->block_size) return -1;
    switch (type) {
    case DP_TYPE_F32: memcpy(dst, src, (size_t)n * 4); return 0;
    case DP_TYPE_F16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = dp_f32_to_fp16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return 0;
    case DP_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h = dp_f32_to_bf16(src[i]);
            memcpy(p + 2 * i, &h, 2);
        }
        return 0;
    default: break;
    }
    quant_block_fn fn = quant_fn(type);
    if (!fn) return -1;
    for (int64_t i = 0; i < n / t->block_size; i++) fn(src + i * t->block_size, p + i * t->type_size);
    return 0;
}
