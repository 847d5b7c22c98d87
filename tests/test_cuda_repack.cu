/* The CUDA backend's device layout of the IQ4 formats, checked on the host
 * (no GPU needed): weights.cu's repack (the codes stored as byte selectors
 * in the lookup's order; IQ4_XS's block scales as a signed byte beside the
 * super-block's f16 d) decoded with the kernels' own iq4_bytes and scale
 * arithmetic must give the dequantizer's values bit for bit. The kernels
 * read the same layout on the GPU (doppler verify checks them there). */
#include <math.h>
#include <string.h>

#include "cuda/kernels/kernels.cuh"

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

int main(void) {
    t_seed();
    for (int rep = 0; rep < 4; rep++) {
        check_type(DP_TYPE_IQ4_NL, 5, 512);
        check_type(DP_TYPE_IQ4_XS, 5, 2560);
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
