/* Writes the IQ fixtures of tests/fixtures/quant/ with llama.cpp's own ggml
 * library: blocks made by ggml's quantizer (ggml_quantize_chunk, with a
 * random importance matrix, which the IQ2 types require) from random rows,
 * blocks of random bytes, and what ggml's reference dequantizer (the type
 * traits' to_float) gives for all of them. Not part of doppler's build: it
 * links a ggml build (see tests/fixtures/quant/README.md for the commands).
 *
 * Usage: ggml_iq_fixtures OUT_DIR [SEED]
 * Files: deq_<TYPE>.bin (quantized rows, then random-byte blocks with sane
 * f16 scales) and deqx_<TYPE>.bin (random-byte blocks with extreme scales,
 * then +Inf, -Inf and NaN scales), in the DPQD format of test_quant.c. */
#include <ctype.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ggml.h"

static uint64_t g_state;

static uint64_t next_u64(void) { /* splitmix64 */
    uint64_t z = (g_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static double uniform(void) { return (double)(next_u64() >> 11) / 9007199254740992.0; }

static double normal(void) {
    double u = uniform(), v = uniform();
    if (u < 1e-300) u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

/* f16 bit patterns of scales: sane (sign * 2^U(-14, 1)) or extreme */
static uint16_t sane_f16(void) {
    return ggml_fp32_to_fp16((float)((uniform() < 0.5 ? -1 : 1) * exp2(-14.0 + 15.0 * uniform())));
}

static uint16_t extreme_f16(void) {
    switch (next_u64() % 6) {
    case 0: return (uint16_t)(1 + next_u64() % 0x3ff);                  /* subnormal */
    case 1: return (uint16_t)(0x7bff | (next_u64() % 2 ? 0x8000 : 0));  /* +-65504 */
    case 2: return (uint16_t)(next_u64() % 2 ? 0x8000 : 0);             /* +-0 */
    case 3: return 0x0400;                                               /* 2^-14 */
    case 4: return (uint16_t)(0x7800 + next_u64() % 0x3ff);             /* 32768 .. 65504 */
    default: {
        uint16_t h;
        do h = (uint16_t)next_u64(); while ((h & 0x7c00) == 0x7c00);   /* any finite */
        return h;
    }
    }
}

static void write_file(const char *dir, const char *prefix, enum ggml_type t, const uint8_t *bytes, size_t nbytes,
                       int64_t n) {
    char path[1024], name[32];
    snprintf(name, sizeof name, "%s", ggml_type_name(t));
    for (char *c = name; *c; c++) *c = (char)toupper((unsigned char)*c);
    snprintf(path, sizeof path, "%s/%s_%s.bin", dir, prefix, name);
    float *vals = malloc(sizeof(float) * (size_t)n);
    ggml_get_type_traits(t)->to_float(bytes, vals, n);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    uint32_t hdr[3] = {(uint32_t)t, (uint32_t)n, (uint32_t)nbytes};
    fwrite("DPQD", 1, 4, f);
    fwrite(hdr, 4, 3, f);
    fwrite(bytes, 1, nbytes, f);
    fwrite(vals, 4, (size_t)n, f);
    if (fclose(f)) {
        perror(path);
        exit(1);
    }
    free(vals);
    printf("%s: %lld values\n", path, (long long)n);
}

/* n_blocks blocks of random bytes, the f16 d at offset 0 from scale() */
static void random_blocks(uint8_t *dst, size_t bsize, int n_blocks, uint16_t (*scale)(void)) {
    for (int b = 0; b < n_blocks; b++) {
        uint8_t *p = dst + (size_t)b * bsize;
        for (size_t i = 0; i < bsize; i++) p[i] = (uint8_t)next_u64();
        uint16_t d = scale();
        memcpy(p, &d, 2);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s OUT_DIR [SEED]\n", argv[0]);
        return 2;
    }
    g_state = argc > 2 ? strtoull(argv[2], NULL, 10) : 20261125ULL;
    static const enum ggml_type types[] = {GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS, GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS,
                                           GGML_TYPE_IQ2_S,  GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S};
    enum { ROW = 256, ROWS = 12, RAND_BLOCKS = 16, X_BLOCKS = 24 };
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        enum ggml_type t = types[k];
        const size_t bsize = ggml_type_size(t);
        const int64_t bk = ggml_blck_size(t);
        /* rows of normals at varied scales, quantized by ggml with an importance matrix */
        float *src = malloc(sizeof(float) * ROW * ROWS), imat[ROW];
        for (int r = 0; r < ROWS; r++) {
            double s = exp2(-8.0 + 12.0 * uniform());
            for (int i = 0; i < ROW; i++) src[r * ROW + i] = (float)(s * normal());
        }
        for (int i = 0; i < ROW; i++) imat[i] = (float)(0.05 + uniform());
        const size_t qbytes = ggml_row_size(t, ROW) * ROWS;
        const int64_t n_rand = RAND_BLOCKS * bk;
        uint8_t *buf = malloc(qbytes + (size_t)(RAND_BLOCKS + X_BLOCKS + 3) * bsize);
        size_t got = ggml_quantize_chunk(t, src, buf, 0, ROWS, ROW, imat);
        if (got != qbytes) {
            fprintf(stderr, "%s: quantized %zu bytes, expected %zu\n", ggml_type_name(t), got, qbytes);
            return 1;
        }
        random_blocks(buf + qbytes, bsize, RAND_BLOCKS, sane_f16);
        write_file(argv[1], "deq", t, buf, qbytes + RAND_BLOCKS * bsize, ROW * ROWS + n_rand);
        /* extreme scales, then +Inf, -Inf, NaN on blocks of 0x5a */
        random_blocks(buf, bsize, X_BLOCKS, extreme_f16);
        static const uint16_t special[3] = {0x7c00, 0xfc00, 0x7e00};
        for (int i = 0; i < 3; i++) {
            uint8_t *p = buf + (size_t)(X_BLOCKS + i) * bsize;
            memset(p, 0x5a, bsize);
            memcpy(p, &special[i], 2);
        }
        write_file(argv[1], "deqx", t, buf, (X_BLOCKS + 3) * bsize, (X_BLOCKS + 3) * bk);
        free(buf);
        free(src);
    }
    ggml_quantize_free();
    return 0;
}
