/* The operands of the integer prompt products in the block-interleaved
 * layout of kernels.h (dp_iblocks): weight rows decoded to exact integer
 * codes with a float scale (and minimum) per block of 32, positions from
 * their 16-bit quantisation (dp_xq, the decode path's, so a prompt's
 * products see x as a decode step sees it).
 *
 * Portable C. dp_iblocks_weights is the layout's reference: the kernels'
 * iweights (x86/igemm.h) decode the panels the products use with SIMD and
 * must equal it bit for bit (test_cpu_kernels). dp_iblocks_position serves
 * the products directly: one pass per position and call, against hundreds
 * of multiply-adds per value.
 *
 * Codes stay below 2^11 in magnitude so the tile kernel's int32 lanes hold a
 * block's 32 products exactly (x86/igemm.h): Q4_K/Q5_K keep each
 * sub-block's scale in the float a (d times a 6-bit integer, exact in
 * float) rather than in the codes. Q6_K's sub-blocks of 16 values carry
 * 8-bit scales, which its codes take ((q - 32) times the scale, at most
 * 4096 in magnitude: a = d of the super-block), so its sums go 16 values at
 * a time (dp_iblocks.half). Q3_K's codes take their signed 6-bit scales
 * the same way, but (q - 4) times a scale in [-32, 31] is at most 128 in
 * magnitude: whole blocks fit, no half. Q2_K stays on the float panels: its
 * minimum is per 16 values, and the layout carries one minimum term per
 * block of 32 (times x's sum over all 32), so it would need a second
 * minimum plane on both sides and a second float step per group. The other
 * types keep the float panels too. */
#include <string.h>

#include "../util.h"
#include "kernels.h"
#include "../quant_iq.h"

int dp_iblocks_type_ok(int type) {
    switch (type) {
    case DP_TYPE_Q4_0: case DP_TYPE_Q4_1: case DP_TYPE_Q5_0: case DP_TYPE_Q5_1: case DP_TYPE_Q8_0:
    case DP_TYPE_IQ4_NL: case DP_TYPE_Q3_K: case DP_TYPE_Q4_K: case DP_TYPE_Q5_K: case DP_TYPE_Q6_K:
    case DP_TYPE_IQ4_XS: return 1;
    default: return 0;
    }
}

int dp_iblocks_half(int type) { return type == DP_TYPE_Q6_K; }

static inline float f16_at(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return dp_fp16_to_f32(h);
}

/* Block b (32 values) of a row: codes q[0..32), w = a q + m. */
static void block_codes(int type, const uint8_t *row, int64_t b, int16_t *q, float *a, float *m) {
    *m = 0.0f;
    switch (type) {
    case DP_TYPE_Q4_0: case DP_TYPE_Q4_1: case DP_TYPE_IQ4_NL: {
        const int bytes = type == DP_TYPE_Q4_1 ? 20 : 18, off = type == DP_TYPE_Q4_1 ? 4 : 2;
        const uint8_t *p = row + b * bytes, *qs = p + off;
        *a = f16_at(p);
        if (type == DP_TYPE_Q4_1) *m = f16_at(p + 2);
        for (int j = 0; j < 16; j++) {
            int lo = qs[j] & 15, hi = qs[j] >> 4;
            if (type == DP_TYPE_IQ4_NL) lo = dp_iq4nl_values[lo], hi = dp_iq4nl_values[hi];
            else if (type == DP_TYPE_Q4_0) lo -= 8, hi -= 8;
            q[j] = (int16_t)lo;
            q[j + 16] = (int16_t)hi;
        }
        return;
    }
    case DP_TYPE_Q5_0: case DP_TYPE_Q5_1: {
        const int one = type == DP_TYPE_Q5_1, bytes = one ? 24 : 22;
        const uint8_t *p = row + b * bytes;
        uint32_t qh;
        memcpy(&qh, p + (one ? 4 : 2), 4);
        const uint8_t *qs = p + (one ? 8 : 6);
        *a = f16_at(p);
        if (one) *m = f16_at(p + 2);
        for (int j = 0; j < 16; j++) {
            const int lo = (qs[j] & 15) | (int)((qh >> j) << 4 & 0x10);
            const int hi = (qs[j] >> 4) | (int)(qh >> (j + 12) & 0x10);
            q[j] = (int16_t)(one ? lo : lo - 16);
            q[j + 16] = (int16_t)(one ? hi : hi - 16);
        }
        return;
    }
    case DP_TYPE_Q8_0: {
        const uint8_t *p = row + b * 34;
        *a = f16_at(p);
        for (int j = 0; j < 32; j++) q[j] = (int8_t)p[2 + j];
        return;
    }
    case DP_TYPE_Q4_K: case DP_TYPE_Q5_K: {
        const int five = type == DP_TYPE_Q5_K, j = (int)(b & 7), pair = j >> 1, high = j & 1;
        const uint8_t *p = row + (b >> 3) * (five ? 176 : 144);
        const uint8_t *qs = p + (five ? 48 : 16) + 32 * pair, *qh = p + 16;
        uint8_t sc, mn;
        dp_scale_min_k4(j, p + 4, &sc, &mn);
        *a = f16_at(p) * (float)sc;
        *m = -f16_at(p + 2) * (float)mn;
        for (int l = 0; l < 32; l++) {
            int v = high ? qs[l] >> 4 : qs[l] & 15;
            if (five && (qh[l] >> j & 1)) v += 16;
            q[l] = (int16_t)v;
        }
        return;
    }
    case DP_TYPE_Q6_K: { /* block j: values 32 jj.. of the 128-half n, sub-blocks of 16 with their scales */
        const int j = (int)(b & 7), n = j >> 2, jj = j & 3;
        const uint8_t *p = row + (b >> 3) * 210, *ql = p + 64 * n + (jj & 1) * 32, *qh = p + 128 + 32 * n;
        const int8_t *sc = (const int8_t *)(p + 192) + 8 * n + 2 * jj;
        *a = f16_at(p + 208);
        for (int l = 0; l < 32; l++) {
            const int lo = jj & 2 ? ql[l] >> 4 : ql[l] & 15, hi = (qh[l] >> 2 * jj) & 3;
            q[l] = (int16_t)(sc[l / 16] * ((lo | hi << 4) - 32));
        }
        return;
    }
    case DP_TYPE_Q3_K: { /* block j: 2 bits at 2 (j % 4) of the 32 bytes of half j / 4, bit j of hmask */
        const int j = (int)(b & 7), g = j & 3;
        const uint8_t *p = row + (b >> 3) * 110, *qs = p + 32 + 32 * (j >> 2);
        const int s0 = dp_scale_q3_k(2 * j, p + 96), s1 = dp_scale_q3_k(2 * j + 1, p + 96);
        *a = f16_at(p + 108);
        for (int l = 0; l < 32; l++) {
            const int c = ((qs[l] >> 2 * g) & 3) - ((p[l] >> j) & 1 ? 0 : 4);
            q[l] = (int16_t)((l < 16 ? s0 : s1) * c);
        }
        return;
    }
    case DP_TYPE_IQ4_XS: {
        const int j = (int)(b & 7);
        const uint8_t *p = row + (b >> 3) * 136;
        const unsigned sh = (unsigned)p[2] | (unsigned)p[3] << 8;
        const int ls = ((p[4 + j / 2] >> 4 * (j % 2)) & 15) | (int)((sh >> 2 * j) & 3) << 4;
        const uint8_t *qs = p + 8 + 16 * j;
        *a = f16_at(p) * (float)(ls - 32);
        for (int i = 0; i < 16; i++) {
            q[i] = dp_iq4nl_values[qs[i] & 15];
            q[i + 16] = dp_iq4nl_values[qs[i] >> 4];
        }
        return;
    }
    default: /* not reached: dp_iblocks_type_ok */
        memset(q, 0, 32 * sizeof *q);
        *a = 0.0f;
        return;
    }
}

/* Codes c[0..32) of a block into lane i of a group's values: value pairs
 * as 32-bit words, 64 bytes apart */
static inline void put_lane(int16_t *grp, int i, const int16_t *c) {
    uint32_t v[16];
    memcpy(v, c, sizeof v);
    for (int s = 0; s < 16; s++) memcpy(grp + 32 * s + 2 * i, &v[s], 4);
}

void dp_iblocks_weights(int type, const uint8_t *w, size_t row_bytes, int64_t nr, int64_t k0, int64_t kc, int16_t *q,
                        float *a, float *m) {
    const int64_t nb = kc / 32, gc = (kc + DP_IGROUP - 1) / DP_IGROUP, b0 = k0 / 32;
    const int mins = dp_type_needs_xsum(type);
    for (int64_t r = 0; r < nr; r++) {
        const uint8_t *row = w + (size_t)r * row_bytes;
        int16_t *qr = q + r * gc * DP_IGROUP;
        float *ar = a + r * gc * 16, *mr = mins ? m + r * gc * 16 : NULL;
        for (int64_t b = 0; b < gc * 16; b++) {
            int16_t c[32];
            float bs = 0.0f, bm = 0.0f;
            if (b < nb) block_codes(type, row, b0 + b, c, &bs, &bm);
            else memset(c, 0, sizeof c);
            put_lane(qr + (b / 16) * DP_IGROUP, (int)(b % 16), c);
            ar[b] = bs;
            if (mr) mr[b] = bm;
        }
    }
}

void dp_iblocks_position(const dp_xq *x, int16_t *q, float *a, float *m) {
    const int64_t nb = x->K / 32, G = (x->K + DP_IGROUP - 1) / DP_IGROUP;
    static const int16_t zero[32];
    for (int64_t b = 0; b < G * 16; b++) {
        const int in = b < nb;
        put_lane(q + (b / 16) * DP_IGROUP, (int)(b % 16), in ? x->q16 + 32 * b : zero);
        a[b] = in ? x->d[b] : 0.0f;
        m[b] = in ? x->s[b] : 0.0f;
    }
}
