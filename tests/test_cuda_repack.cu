/* The CUDA backend's device layout of the IQ4 formats, checked on the host
 * (no GPU needed): weights.cu's repack (the codes stored as byte selectors
 * in the lookup's order; IQ4_XS's block scales as a signed byte beside the
 * super-block's f16 d) decoded with the kernels' own iq4_bytes and scale
 * arithmetic must give the dequantizer's values bit for bit. The kernels
 * read the same layout on the GPU (doppler verify checks them there). */
#include <math.h>
#include <string.h>

#include "cuda/kernels/kernels.cuh"
#include "cuda/kernels/qunit.cuh"

#include "doppler.h"
extern "C" {
#include "testlib.h"
}

/* Row r of W decoded as deq_unit (dequant.cuh) does on the device. */
static void decode_row(const DMat &W, int r, float *y) {
    const long long mi = (long long)r * W.nblk;
    for (int u = 0; u < W.nblk; u++) {
        if (W.type == DP_TYPE_IQ4_NL) { /* word k: positions 4k.. (low nibbles) and 16 + 4k.. (high) */
            const uint8_t *q = W.body + r * W.body_row + u * 16;
            const float d = h2f(W.d16[mi + u]);
            for (int k = 0; k < 4; k++) {
                uint32_t w, lo, hi;
                memcpy(&w, q + 4 * k, 4);
                iq4_bytes(w, &lo, &hi);
                for (int i = 0; i < 4; i++) {
                    y[u * 32 + 4 * k + i] = d * (float)(int8_t)(lo >> 8 * i);
                    y[u * 32 + 16 + 4 * k + i] = d * (float)(int8_t)(hi >> 8 * i);
                }
            }
            continue;
        }
        /* IQ4_XS: sub-block u is the low (u even) or high nibbles of the 8 words of its pair */
        const uint8_t *q = W.body + r * W.body_row + (u >> 1) * 32;
        const float d = h2f(W.d16[(mi + u) >> 3]) * (float)((const int8_t *)W.dm)[mi + u];
        for (int k = 0; k < 8; k++) {
            uint32_t w;
            memcpy(&w, q + 4 * k, 4);
            const uint32_t c = iq4_lo4(w >> (u & 1) * 16);
            for (int i = 0; i < 4; i++) y[u * 32 + 4 * k + i] = d * (float)(int8_t)(c >> 8 * i);
        }
    }
}

/* Random blocks (every code, every 6-bit scale) with a finite d. */
static void check_type(int type, int rows, int cols) {
    const size_t rb = dp_row_size(type, cols), bs = dp_row_size(type, type == DP_TYPE_IQ4_XS ? 256 : 32);
    uint8_t *data = (uint8_t *)malloc(rb * rows);
    for (size_t i = 0; i < rb * rows; i++) data[i] = (uint8_t)t_rand_u64();
    for (size_t b = 0; b < rb * rows / bs; b++) { /* d: a normal f16 of either sign */
        const uint16_t d = (uint16_t)(t_rand_int(0x1000, 0x3bff) | (t_rand_int(0, 1) << 15));
        memcpy(data + b * bs, &d, 2);
    }
    DMat W;
    uint8_t *host = NULL;
    size_t total = 0;
    const int rc = dp_cu_repack_matrix(data, type, rows, cols, &W, &host, &total);
    CHECKF(rc == DP_OK, "%s: %s", dp_type_name(type), dp_last_error());
    if (rc == DP_OK) {
        float *want = (float *)malloc(sizeof(float) * cols), *got = (float *)malloc(sizeof(float) * cols);
        int bad = 0;
        for (int r = 0; r < rows && !bad; r++) {
            dp_dequantize_row(type, data + r * rb, want, cols);
            decode_row(W, r, got);
            for (int i = 0; i < cols && !bad; i++)
                if (memcmp(&got[i], &want[i], 4)) {
                    bad = 1;
                    CHECKF(0, "%s row %d weight %d: device layout %.9g, dequantizer %.9g", dp_type_name(type), r, i,
                           got[i], want[i]);
                }
        }
        CHECK(!bad);
        free(want), free(got);
    }
    free(host), free(data);
}

/* x quantised and staged in the 64-weight layout of Q6_K, Q3_K and Q2_K
 * (qunit.cuh: quant4, put_elems, phys_c) as the kernels' prologue does. */
static void stage_c(const float *x, int cols, uint8_t *xb, float *dxs, int *iss, int *q) {
    for (int b = 0; b < cols / 32; b++) {
        float am = 0.0f;
        for (int i = 0; i < 32; i++) am = fmaxf(am, fabsf(x[32 * b + i]));
        const float inv = am > 0.0f ? 32767.0f / am : 0.0f;
        dxs[b] = am / 32767.0f;
        for (int i = 0; i < 32; i++) q[32 * b + i] = (int)lrintf(x[32 * b + i] * inv);
    }
    for (int s = 0; s < cols / 16; s++) {
        iss[s] = 0;
        for (int i = 0; i < 16; i++) iss[s] += q[16 * s + i];
    }
    for (int a = 0; a < cols; a += 4) {
        if (a % 128 >= 64) continue; /* the partner a + 64 shares the element */
        uint32_t w[4] = {0, 0, 0, 0};
        for (int i = 0; i < 4; i++) {
            w[0] |= (uint32_t)((q[a + i] >> 8) & 0xFF) << 8 * i, w[1] |= (uint32_t)(q[a + i] & 0xFF) << 8 * i;
            w[2] |= (uint32_t)((q[a + 64 + i] >> 8) & 0xFF) << 8 * i, w[3] |= (uint32_t)(q[a + 64 + i] & 0xFF) << 8 * i;
        }
        memcpy(xb + phys_c(a), w, 16);
    }
}

#define UNIT(T)                                                                                                   \
    case T: q_load<T>(W, r, v, raw); return q_math<T>(raw, v, xb, dxs, iss);
static float unit_dot(int type, const DMat &W, int r, int v, const uint8_t *xb, const float *dxs, const int *iss) {
    QRaw raw;
    memset(&raw, 0, sizeof raw);
    switch (type) {
    UNIT(DP_TYPE_Q2_K) UNIT(DP_TYPE_Q3_K) UNIT(DP_TYPE_Q6_K)
    default: return NAN;
    }
}
#undef UNIT

/* The decode matvec's unit loads and integer products (q_load, q_math:
 * the code k_matvec_w and k_matvec_l run) on the device layout, on the
 * host: each row's sum over its units against the dequantised row times
 * the quantised x, in double. */
static void check_units(int type, int rows, int cols) {
    const size_t rb = dp_row_size(type, cols);
    uint8_t *data = (uint8_t *)malloc(rb * rows);
    for (size_t i = 0; i < rb * rows; i++) data[i] = (uint8_t)t_rand_u64();
    const int dpos = type == DP_TYPE_Q2_K ? 80 : type == DP_TYPE_Q3_K ? 108 : 208, bs = (int)dp_row_size(type, 256);
    for (size_t b = 0; b < rb * rows / bs; b++) /* d (and Q2_K's dmin): normal f16s of either sign */
        for (int k = 0; k < (type == DP_TYPE_Q2_K ? 2 : 1); k++) {
            const uint16_t d = (uint16_t)(t_rand_int(0x1000, 0x3bff) | (t_rand_int(0, 1) << 15));
            memcpy(data + b * bs + dpos + 2 * k, &d, 2);
        }
    float *x = (float *)malloc(sizeof(float) * cols), *w = (float *)malloc(sizeof(float) * cols);
    for (int i = 0; i < cols; i++) x[i] = (float)t_rand_normal();
    uint8_t *xb = (uint8_t *)calloc(fam_bytes(FAM_C, cols), 1);
    float *dxs = (float *)malloc(sizeof(float) * (cols / 32));
    int *iss = (int *)malloc(sizeof(int) * (cols / 16)), *q = (int *)malloc(sizeof(int) * cols);
    stage_c(x, cols, xb, dxs, iss, q);
    DMat W;
    uint8_t *host = NULL;
    size_t total = 0;
    const int rc = dp_cu_repack_matrix(data, type, rows, cols, &W, &host, &total);
    CHECKF(rc == DP_OK, "%s: %s", dp_type_name(type), dp_last_error());
    int bad = 0;
    for (int r = 0; r < rows && rc == DP_OK; r++) {
        dp_dequantize_row(type, data + r * rb, w, cols);
        double want = 0.0, mag = 0.0;
        for (int i = 0; i < cols; i++) {
            const double xq = (double)dxs[i / 32] * q[i];
            want += (double)w[i] * xq, mag += fabs((double)w[i] * xq);
        }
        float got = 0.0f;
        for (int v = 0; v < cols / 64; v++) {
            got += unit_dot(type, W, r, v, xb, dxs, iss);
        }
        if (fabs(got - want) > 1e-5 * mag) {
            if (!bad) CHECKF(0, "%s row %d: units %.9g, dequantised weights times x %.9g (mag %.3g)", dp_type_name(type), r,
                             got, want, mag);
            bad++;
        }
    }
    CHECK(!bad);
    free(host), free(data), free(x), free(w), free(xb), free(dxs), free(iss), free(q);
}

int main(void) {
    t_seed();
    for (int rep = 0; rep < 4; rep++) {
        check_type(DP_TYPE_IQ4_NL, 5, 512);
        check_type(DP_TYPE_IQ4_XS, 5, 2560);
        for (int t : {DP_TYPE_Q2_K, DP_TYPE_Q3_K, DP_TYPE_Q6_K}) check_units(t, 7, 2560);
    }
    /* the layout's size: IQ4_XS keeps 17.25 bytes per 32 weights (+ padding) */
    DMat W;
    uint8_t *host = NULL;
    size_t total = 0;
    const int rows = 64, cols = 4096;
    uint8_t *data = (uint8_t *)calloc(dp_row_size(DP_TYPE_IQ4_XS, cols), rows);
    if (dp_cu_repack_matrix(data, DP_TYPE_IQ4_XS, rows, cols, &W, &host, &total) == DP_OK)
        CHECKF(total <= (size_t)rows * cols / 32 * 69 / 4 + 3 * 256, "IQ4_XS device layout %zu bytes", total);
    else
        CHECKF(0, "%s", dp_last_error());
    free(host), free(data);
    return t_done("test_cuda_repack");
}
