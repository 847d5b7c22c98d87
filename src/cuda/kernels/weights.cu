/* Weight upload: each matrix is repacked on the host into the device layout
 * of DMat (common.cuh) and copied once. The 32-weight formats and Q6_K split
 * their blocks into a 16-byte-aligned body of quants and separate arrays of
 * scales (Q5_0/Q5_1: the fifth bits permuted, see q5_bits); Q4_K and Q5_K
 * blocks (144 and 176 bytes) are already aligned and are copied as they
 * are, like F16/BF16/F32. Q3_K (110 bytes) and Q2_K (84) are reordered
 * into aligned 112- and 80-byte bodies, quants first: Q3_K's qs, hmask and
 * its 16 six-bit scales unpacked to signed bytes (scale - 32, as Q6_K's),
 * its f16 d beside (d16); Q2_K's qs and scale | min bytes, d and dmin as
 * one word (dm). IQ4_NL splits like
 * Q4_0; IQ4_XS into 16 bytes of nibbles per 32 weights (the body), each
 * sub-block's ls - 32 as a signed byte (dm) and its super-block's f16 d
 * (d16): 4.31 bits a weight; the kernels form d (ls - 32) in float, exact,
 * as src/quant_iq.c does. The IQ4 nibbles are reordered for the codebook
 * lookup (common.cuh iq4_bytes), IQ4_XS's across each pair of sub-blocks
 * (the decode matvec's 64-weight unit). The IQ2 / IQ3 blocks lose their
 * f16 d to d16 and keep the rest as a body whose stride is a multiple of 8,
 * each 32 weights' grid indices as 8 aligned bytes (IQ2_S: its 4 index
 * bytes and 4 sign bytes; IQ3_S: 8 index bytes, then its signs, high bits
 * and scales, 112 bytes); each matrix points at its format's grid,
 * uploaded once per process. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "iq_grids.h"
#include "iqgrid.cuh"
#include "kernels.cuh"

int dp_cu_type_supported(int type) {
    switch (type) {
    case DP_TYPE_F32: case DP_TYPE_F16: case DP_TYPE_BF16:
    case DP_TYPE_Q4_0: case DP_TYPE_Q4_1: case DP_TYPE_Q5_0: case DP_TYPE_Q5_1: case DP_TYPE_Q8_0:
    case DP_TYPE_Q2_K: case DP_TYPE_Q3_K: case DP_TYPE_Q4_K: case DP_TYPE_Q5_K: case DP_TYPE_Q6_K:
    case DP_TYPE_IQ4_NL: case DP_TYPE_IQ4_XS:
    case DP_TYPE_IQ2_XXS: case DP_TYPE_IQ2_XS: case DP_TYPE_IQ2_S: case DP_TYPE_IQ3_XXS: case DP_TYPE_IQ3_S:
        return 1;
    default:
        return 0;
    }
}

/* The fifth bits of a Q5_0/Q5_1 block in the device order (common.cuh). */
static uint32_t q5_permute(const uint8_t *p) {
    uint32_t qh, out = 0;
    memcpy(&qh, p, 4);
    for (int w = 0; w < 32; w++) out |= ((qh >> w) & 1u) << q5_bitpos(w);
    return out;
}

/* The grid of an IQ2 / IQ3 format in host memory (iq_grids.c) and its size; NULL for the others. */
static const void *iq_grid_host(int type, size_t *bytes) {
    switch (type) {
    case DP_TYPE_IQ2_XXS: *bytes = sizeof dp_iq2xxs_grid; return dp_iq2xxs_grid;
    case DP_TYPE_IQ2_XS: *bytes = sizeof dp_iq2xs_grid; return dp_iq2xs_grid;
    case DP_TYPE_IQ2_S: *bytes = sizeof dp_iq2s_grid; return dp_iq2s_grid;
    case DP_TYPE_IQ3_XXS: *bytes = sizeof dp_iq3xxs_grid; return dp_iq3xxs_grid;
    case DP_TYPE_IQ3_S: *bytes = sizeof dp_iq3s_grid; return dp_iq3s_grid;
    default: *bytes = 0; return NULL;
    }
}

/* Its device copy, made at the first upload of the format and kept for the
 * process (every session's matrices of the format share it). */
static const void *iq_grid_device(int type) {
    static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
    static void *dev[DP_TYPE_COUNT];
    size_t bytes = 0;
    const void *h = iq_grid_host(type, &bytes);
    if (!h) return NULL;
    pthread_mutex_lock(&mu);
    if (!dev[type]) {
        void *p = NULL;
        if (cudaMalloc(&p, bytes) == cudaSuccess && cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice) == cudaSuccess)
            dev[type] = p;
        else {
            cudaGetLastError(); /* not sticky: the caller reports it */
            if (p) cudaFree(p);
        }
    }
    const void *r = dev[type];
    pthread_mutex_unlock(&mu);
    return r;
}

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* The device layout of one matrix in host memory: *host (to free) holds it,
 * *out points into it; *total is its size. */
int dp_cu_repack_matrix(const void *data, int type, int rows, int cols, DMat *out, uint8_t **host_out, size_t *total_out) {
    const dp_type_traits *tt = dp_type_get(type);
    if (!tt || !dp_cu_type_supported(type))
        return dp_set_error(DP_ERR_BACKEND, "CUDA: weight type %s is not supported", dp_type_name(type));
    if (cols % 32)
        return dp_set_error(DP_ERR_BACKEND, "CUDA: rows of %d weights are not a multiple of 32", cols);
    const int bs = tt->block_size, ts = tt->type_size;
    /* IQ4_XS is stored per 32-weight sub-block (8 a block) */
    const int sub = type == DP_TYPE_IQ4_XS ? 8 : 1;
    const int nblk = cols / bs * sub;
    const int body_b = dp_cu_body_bytes(type);
    const size_t row_bytes = (size_t)nblk * ts;
    const size_t nb_total = (size_t)rows * nblk; /* stored blocks (IQ4_XS: sub-blocks) */
    size_t body_row = body_b ? (size_t)nblk * body_b : row_bytes;
    size_t off_d16 = 0, off_dm = 0, off_qh = 0, total;
    total = align256((size_t)rows * body_row);
    int has_d16 = type == DP_TYPE_Q4_0 || type == DP_TYPE_Q5_0 || type == DP_TYPE_Q8_0 || type == DP_TYPE_Q6_K ||
                  type == DP_TYPE_Q3_K || type == DP_TYPE_IQ4_NL || type == DP_TYPE_IQ4_XS || q_iq(type);
    int has_dm = type == DP_TYPE_Q4_1 || type == DP_TYPE_Q5_1 || type == DP_TYPE_Q2_K || type == DP_TYPE_IQ4_XS;
    int has_qh = type == DP_TYPE_Q5_0 || type == DP_TYPE_Q5_1;
    /* IQ4_XS: d16 per super-block, dm one byte per sub-block */
    if (has_d16) off_d16 = total, total = align256(total + nb_total / sub * 2);
    if (has_dm) off_dm = total, total = align256(total + nb_total * (type == DP_TYPE_IQ4_XS ? 1 : 4));
    if (has_qh) off_qh = total, total = align256(total + nb_total * 4);

    uint8_t *host = (uint8_t *)malloc(total);
    if (!host) return dp_set_error(DP_ERR_NOMEM, "CUDA: out of host memory repacking a %d x %d matrix", rows, cols);
    memset(host, 0, total);
    const uint8_t *src = (const uint8_t *)data;
    if (!body_b) {
        memcpy(host, src, (size_t)rows * row_bytes);
    } else {
        uint16_t *d16 = (uint16_t *)(host + off_d16);
        uint32_t *dm = (uint32_t *)(host + off_dm), *qh = (uint32_t *)(host + off_qh);
        for (size_t i = 0; i < nb_total; i++) {
            if (type == DP_TYPE_IQ4_XS) { /* sub-block j of file block i / 8 */
                const uint8_t *b = src + (i / 8) * ts;
                const int j = (int)(i % 8);
                const int ls = ((b[4 + j / 2] >> 4 * (j % 2)) & 15) | ((b[2 + j / 4] >> 2 * (j % 4)) & 3) << 4;
                ((int8_t *)dm)[i] = (int8_t)(ls - 32);
                if (j == 0) memcpy(&d16[i / 8], b, 2);
                if (j % 2 == 0) iq4_reorder_pair(b + 8 + 16 * j, b + 8 + 16 * (j + 1), host + i * body_b);
                continue;
            }
            const uint8_t *b = src + i * ts;
            uint8_t *body = host + i * body_b; /* rows are contiguous: row r block k is block r*nblk+k */
            switch (type) {
            case DP_TYPE_Q4_0: memcpy(&d16[i], b, 2); memcpy(body, b + 2, 16); break;
            case DP_TYPE_IQ4_NL: memcpy(&d16[i], b, 2); iq4_reorder(b + 2, body); break;
            case DP_TYPE_Q4_1: memcpy(&dm[i], b, 4); memcpy(body, b + 4, 16); break;
            case DP_TYPE_Q5_0: memcpy(&d16[i], b, 2); qh[i] = q5_permute(b + 2); memcpy(body, b + 6, 16); break;
            case DP_TYPE_Q5_1: memcpy(&dm[i], b, 4); qh[i] = q5_permute(b + 4); memcpy(body, b + 8, 16); break;
            case DP_TYPE_Q8_0: memcpy(&d16[i], b, 2); memcpy(body, b + 2, 32); break;
            case DP_TYPE_Q6_K: memcpy(body, b, 208); memcpy(&d16[i], b + 208, 2); break;
            case DP_TYPE_Q3_K: /* file: hmask[32], qs[64], scales[12], d */
                memcpy(body, b + 32, 64);
                memcpy(body + 64, b, 32);
                for (int j = 0; j < 16; j++) body[96 + j] = (uint8_t)(int8_t)dp_scale_q3_k(j, b + 96);
                memcpy(&d16[i], b + 108, 2);
                break;
            case DP_TYPE_IQ2_XXS: case DP_TYPE_IQ2_XS: case DP_TYPE_IQ3_XXS: /* file: d, then the body */
                memcpy(&d16[i], b, 2);
                memcpy(body, b + 2, body_b);
                break;
            case DP_TYPE_IQ2_S: /* file: d, qs[32], signs[32], qh[8], scales[8] */
                memcpy(&d16[i], b, 2);
                for (int j = 0; j < 8; j++) memcpy(body + 8 * j, b + 2 + 4 * j, 4), memcpy(body + 8 * j + 4, b + 34 + 4 * j, 4);
                memcpy(body + 64, b + 66, 16);
                break;
            case DP_TYPE_IQ3_S: /* file: d, qs[64], qh[8], signs[32], scales[4] */
                memcpy(&d16[i], b, 2);
                memcpy(body, b + 2, 64);
                memcpy(body + 64, b + 74, 32);
                memcpy(body + 96, b + 66, 8);
                memcpy(body + 104, b + 106, 4);
                break;
            case DP_TYPE_Q2_K: /* file: scales[16], qs[64], d, dmin */
                memcpy(body, b + 16, 64);
                memcpy(body + 64, b, 16);
                memcpy(&dm[i], b + 80, 4);
                break;
            }
        }
    }
    memset(out, 0, sizeof *out);
    out->type = type;
    out->rows = rows;
    out->cols = cols;
    out->nblk = type == DP_TYPE_F32 || type == DP_TYPE_F16 || type == DP_TYPE_BF16 ? cols : nblk;
    out->body_row = (long long)body_row;
    out->body = host;
    out->d16 = has_d16 ? (const uint16_t *)(host + off_d16) : NULL;
    out->dm = has_dm ? (const uint32_t *)(host + off_dm) : NULL;
    out->qh = has_qh ? (const uint32_t *)(host + off_qh) : NULL;
    out->w16 = NULL;
    size_t grid_bytes;
    out->grid = iq_grid_host(type, &grid_bytes);
    *host_out = host;
    *total_out = total;
    return DP_OK;
}

int dp_cu_upload_matrix(const void *data, int type, int rows, int cols, DMat *out, void **alloc) {
    uint8_t *host = NULL;
    size_t total = 0;
    DMat h;
    int rc = dp_cu_repack_matrix(data, type, rows, cols, &h, &host, &total);
    if (rc) return rc;
    void *dev = NULL;
    cudaError_t e = cudaMalloc(&dev, total);
    if (e == cudaSuccess) e = cudaMemcpy(dev, host, total, cudaMemcpyHostToDevice);
    free(host);
    if (e != cudaSuccess) {
        if (dev) cudaFree(dev);
        return dp_set_error(DP_ERR_BACKEND, "CUDA: uploading a %d x %d %s matrix (%zu bytes) failed: %s", rows, cols,
                            dp_type_name(type), total, cudaGetErrorString(e));
    }
    /* the same offsets, in the device allocation */
    uint8_t *d = (uint8_t *)dev;
    *out = h;
    out->body = d;
    out->d16 = h.d16 ? (const uint16_t *)(d + ((const uint8_t *)h.d16 - host)) : NULL;
    out->dm = h.dm ? (const uint32_t *)(d + ((const uint8_t *)h.dm - host)) : NULL;
    out->qh = h.qh ? (const uint32_t *)(d + ((const uint8_t *)h.qh - host)) : NULL;
    if (h.grid && !(out->grid = iq_grid_device(type))) {
        cudaFree(dev);
        return dp_set_error(DP_ERR_BACKEND, "CUDA: uploading the %s grid failed", dp_type_name(type));
    }
    *alloc = dev;
    return DP_OK;
}
