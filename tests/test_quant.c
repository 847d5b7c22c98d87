/* Block formats: hand-built blocks with known values, the committed gguf-py
 * fixtures (bit-exact), vec_dot against dequantize-then-dot, quantize
 * round trips, fp16/bf16 conversions. */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant.h"
#include "testlib.h"
#include "util.h"

static const int g_types[] = {DP_TYPE_F32,  DP_TYPE_F16,  DP_TYPE_BF16, DP_TYPE_Q4_0, DP_TYPE_Q4_1,
                              DP_TYPE_Q5_0, DP_TYPE_Q5_1, DP_TYPE_Q8_0, DP_TYPE_Q2_K, DP_TYPE_Q3_K,
                              DP_TYPE_Q4_K, DP_TYPE_Q5_K, DP_TYPE_Q6_K, DP_TYPE_IQ4_NL, DP_TYPE_IQ4_XS,
                              DP_TYPE_IQ2_XXS, DP_TYPE_IQ2_XS, DP_TYPE_IQ2_S, DP_TYPE_IQ3_XXS, DP_TYPE_IQ3_S};
#define N_TYPES (int)(sizeof g_types / sizeof g_types[0])

static uint32_t f2u(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* Same value, or both NaN. */
static int same_float(float a, float b) { return (isnan(a) && isnan(b)) || f2u(a) == f2u(b); }

/* Compares n dequantized floats bit for bit; reports the first mismatch. */
static void check_floats(const char *what, const float *got, const float *want, int64_t n) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (!same_float(got[i], want[i]) && bad++ == 0) first = i;
    CHECKF(bad == 0, "%s: %lld of %lld values differ, first at %lld: got %.9g (0x%08x) want %.9g (0x%08x)", what,
           (long long)bad, (long long)n, (long long)first, first >= 0 ? got[first] : 0.0,
           first >= 0 ? f2u(got[first]) : 0u, first >= 0 ? want[first] : 0.0, first >= 0 ? f2u(want[first]) : 0u);
}

static void check_deq(int type, const uint8_t *blk, const float *want, int n) {
    float got[QK_K];
    dp_dequantize_row(type, blk, got, n);
    char what[64];
    snprintf(what, sizeof what, "hand-built %s", dp_type_name(type));
    check_floats(what, got, want, n);
}

/* ---------------------------------------------------------- hand-built */

static void test_hand_built(void) {
    uint8_t b[256];
    float y[QK_K];

    { /* F16 / BF16 / F32 element types */
        const uint16_t h[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x0400, 0x8000, 0x7C00, 0xFC00, 0x3555, 0x03FF};
        const float hv[] = {1.0f, -2.0f, 65504.0f, 0x1p-24f, 0x1p-14f, -0.0f, INFINITY, -INFINITY,
                            0.333251953125f, 1023 * 0x1p-24f};
        for (int i = 0; i < 10; i++) put16(b + 2 * i, h[i]);
        check_deq(DP_TYPE_F16, b, hv, 10);
        put16(b, 0x7E00);
        dp_dequantize_row(DP_TYPE_F16, b, y, 1);
        CHECK(isnan(y[0]));
        const uint16_t bh[] = {0x3F80, 0xC040, 0x7F80, 0x0001, 0x8000, 0x4049};
        const float bv[] = {1.0f, -3.0f, INFINITY, 0x1p-133f, -0.0f, 3.140625f};
        for (int i = 0; i < 6; i++) put16(b + 2 * i, bh[i]);
        check_deq(DP_TYPE_BF16, b, bv, 6);
        const float fv[] = {1.5f, -0.0f, FLT_MAX, FLT_TRUE_MIN};
        memcpy(b, fv, sizeof fv);
        check_deq(DP_TYPE_F32, b, fv, 4);
    }
    { /* Q4_0: d = 0.5, qs[j] = j | (15 - j) << 4: y[j] = (j - 8) d, y[j + 16] = (7 - j) d */
        put16(b, 0x3800);
        for (int j = 0; j < 16; j++) b[2 + j] = (uint8_t)(j | ((15 - j) << 4));
        for (int j = 0; j < 16; j++) y[j] = (float)(j - 8) * 0.5f, y[j + 16] = (float)(7 - j) * 0.5f;
        check_deq(DP_TYPE_Q4_0, b, y, 32);
    }
    { /* Q4_1: d = 0.25, m = -1: y = q d + m */
        put16(b, 0x3400);
        put16(b + 2, 0xBC00);
        for (int j = 0; j < 16; j++) b[4 + j] = (uint8_t)(j | ((j ^ 5) << 4));
        for (int j = 0; j < 16; j++) y[j] = (float)j * 0.25f - 1.0f, y[j + 16] = (float)(j ^ 5) * 0.25f - 1.0f;
        check_deq(DP_TYPE_Q4_1, b, y, 32);
    }
    { /* Q5_0: d = 2, qh bits 0 and 31, all nibbles 1 (low) / 2 (high) */
        put16(b, 0x4000);
        const uint32_t qh = 0x80000001u;
        memcpy(b + 2, &qh, 4);
        memset(b + 6, 0x21, 16);
        for (int j = 0; j < 16; j++) y[j] = -15 * 2.0f, y[j + 16] = -14 * 2.0f;
        y[0] = 1 * 2.0f;
        y[31] = 2 * 2.0f;
        check_deq(DP_TYPE_Q5_0, b, y, 32);
    }
    { /* Q5_1: d = 0.5, m = 0.25, qh bits 1 and 16 */
        put16(b, 0x3800);
        put16(b + 2, 0x3400);
        const uint32_t qh = 0x00010002u;
        memcpy(b + 4, &qh, 4);
        for (int j = 0; j < 16; j++) b[8 + j] = (uint8_t)(0xF0 | j);
        for (int j = 0; j < 16; j++) y[j] = (float)j * 0.5f + 0.25f, y[j + 16] = 15 * 0.5f + 0.25f;
        y[1] = 17 * 0.5f + 0.25f;
        y[16] = 31 * 0.5f + 0.25f;
        check_deq(DP_TYPE_Q5_1, b, y, 32);
    }
    { /* Q8_0: d = 0.125, q = 8 j - 128 */
        put16(b, 0x3000);
        for (int j = 0; j < 32; j++) b[2 + j] = (uint8_t)(int8_t)(8 * j - 128), y[j] = (float)(8 * j - 128) * 0.125f;
        check_deq(DP_TYPE_Q8_0, b, y, 32);
    }
    { /* Q2_K: scales[s] = s | (15 - s) << 4, qs alternating 0xE4 (q = 0,1,2,3
       * for bit pairs 0..3) and 0x1B (3,2,1,0), d = 1, dmin = 0.5. Element e:
       * byte 32 (e / 128) + e % 32, bit pair (e % 128) / 32, sub-block e / 16. */
        for (int s = 0; s < 16; s++) b[s] = (uint8_t)(s | ((15 - s) << 4));
        for (int i = 0; i < 64; i++) b[16 + i] = (i & 1) ? 0x1B : 0xE4;
        put16(b + 80, 0x3C00);
        put16(b + 82, 0x3800);
        for (int e = 0; e < QK_K; e++) {
            int j = (e % 128) / 32, l = e % 32, s = e / 16;
            int q = (l & 1) ? 3 - j : j;
            y[e] = 1.0f * (float)s * (float)q - 0.5f * (float)(15 - s);
        }
        check_deq(DP_TYPE_Q2_K, b, y, QK_K);
    }
    { /* Q3_K: sixteen 6-bit scales v (stored, scale = v - 32) packed as low
       * nibbles in bytes 0..7 (s >= 8 in the high nibble of byte s - 8) and
       * top two bits in byte 8 + s % 4 at bit 2 (s / 4); the packed bytes
       * were checked with gguf-py's unpacking. hmask bit e / 32 of byte
       * e % 32 set = no -4. qs 0xE4: low two bits = (e % 128) / 32. d = 0.5 */
        static const int v[16] = {0, 63, 1, 62, 17, 46, 32, 31, 5, 58, 20, 43, 48, 15, 33, 30};
        static const uint8_t sc[12] = {0x50, 0xaf, 0x41, 0xbe, 0x01, 0xfe, 0x10, 0xef, 0xc4, 0x3b, 0x98, 0x67};
        for (int l = 0; l < 32; l++) b[l] = (uint8_t)(l * 37 + 11);
        memset(b + 32, 0xE4, 64);
        memcpy(b + 96, sc, 12);
        put16(b + 108, 0x3800);
        for (int e = 0; e < QK_K; e++) {
            int hbit = (b[e % 32] >> (e / 32)) & 1;
            int q = (e % 128) / 32 - (hbit ? 0 : 4);
            y[e] = 0.5f * (float)(v[e / 16] - 32) * (float)q;
        }
        check_deq(DP_TYPE_Q3_K, b, y, QK_K);
    }
    /* Q4_K / Q5_K 12-byte scales: scales {1,2,63,17,32,45,5,60}, mins
     * {0,63,7,8,33,48,1,62}; bytes j < 4: sc[j] | (sc[j+4] >> 4) << 6, bytes
     * 4..7: m[j] | (m[j+4] >> 4) << 6, bytes 8..11: (sc[j+4] & 15) |
     * (m[j+4] & 15) << 4 (checked with gguf-py's get_scale_min). */
    static const int ksc[8] = {1, 2, 63, 17, 32, 45, 5, 60}, kmn[8] = {0, 63, 7, 8, 33, 48, 1, 62};
    static const uint8_t kpack[12] = {0x81, 0x82, 0x3f, 0xd1, 0x80, 0xff, 0x07, 0xc8, 0x10, 0x0d, 0x15, 0xec};
    { /* Q4_K: d = 0.5, dmin = 0.25; 32-byte chunk c holds sub-block 2c in the
       * low nibbles and 2c + 1 in the high nibbles. */
        put16(b, 0x3800);
        put16(b + 2, 0x3400);
        memcpy(b + 4, kpack, 12);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b[16 + 32 * c + l] = (uint8_t)((l & 15) | ((15 - (l & 15)) << 4));
        for (int e = 0; e < QK_K; e++) {
            int s = e / 32, l = e % 32, q = (s & 1) ? 15 - (l & 15) : (l & 15);
            y[e] = 0.5f * (float)ksc[s] * (float)q - 0.25f * (float)kmn[s];
        }
        check_deq(DP_TYPE_Q4_K, b, y, QK_K);
    }
    { /* Q5_K: as Q4_K plus qh[32]: bit e / 32 of byte e % 32 adds 16 */
        put16(b, 0x3800);
        put16(b + 2, 0x3400);
        memcpy(b + 4, kpack, 12);
        for (int l = 0; l < 32; l++) b[16 + l] = (uint8_t)(l * 37 + 11);
        for (int c = 0; c < 4; c++)
            for (int l = 0; l < 32; l++) b[48 + 32 * c + l] = (uint8_t)((l & 15) | ((15 - (l & 15)) << 4));
        for (int e = 0; e < QK_K; e++) {
            int s = e / 32, l = e % 32, q = (s & 1) ? 15 - (l & 15) : (l & 15);
            q += 16 * ((b[16 + l] >> s) & 1);
            y[e] = 0.5f * (float)ksc[s] * (float)q - 0.25f * (float)kmn[s];
        }
        check_deq(DP_TYPE_Q5_K, b, y, QK_K);
    }
    { /* Q6_K: ql[i] = i, qh[i] = 29 i + 3, int8 scales 17 s - 128, d = 0.25.
       * Element e, half h = e / 128, r = e % 128: low nibble of
       * ql[64 h + r % 64] (high nibble when r >= 64), two high bits of
       * qh[32 h + r % 32] at bit 2 (r / 32); q - 32. */
        for (int i = 0; i < 128; i++) b[i] = (uint8_t)i;
        for (int i = 0; i < 64; i++) b[128 + i] = (uint8_t)(29 * i + 3);
        for (int s = 0; s < 16; s++) b[192 + s] = (uint8_t)(int8_t)(17 * s - 128);
        put16(b + 208, 0x3400);
        for (int e = 0; e < QK_K; e++) {
            int h = e / 128, r = e % 128;
            int lo = (b[64 * h + r % 64] >> (4 * (r / 64))) & 15, hi = (b[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
            y[e] = 0.25f * (float)(17 * (e / 16) - 128) * (float)((lo | (hi << 4)) - 32);
        }
        check_deq(DP_TYPE_Q6_K, b, y, QK_K);
    }
}

/* ------------------------------------------------------------ fixtures */

typedef struct {
    uint32_t type, n, nbytes;
    uint8_t *bytes; /* nbytes */
    float *vals;    /* n */
} fixture;

/* The committed fixtures, or DOPPLER_QUANT_FIXTURES (a directory written by
 * tools/reference/gen_quant_fixtures.py --out, e.g. a large one-off set). */
static const char *fixture_path(const char *file) {
    static char buf[4096];
    char rel[256];
    const char *dir = getenv("DOPPLER_QUANT_FIXTURES");
    if (dir && *dir) {
        snprintf(buf, sizeof buf, "%s/%s", dir, file);
        return buf;
    }
    snprintf(rel, sizeof rel, "tests/fixtures/quant/%s", file);
    return t_src_path(rel);
}

/* DPQD: header, raw bytes, float32 values. DPQQ: header, float32 values,
 * raw bytes. Header: magic[4], u32 type, u32 n, u32 nbytes (little-endian). */
static int load_fixture(const char *file, const char *magic, int type, fixture *f) {
    const char *path = fixture_path(file);
    size_t len = 0;
    char *buf = t_read_file(path, &len);
    CHECKF(buf != NULL, "cannot read fixture %s", path);
    if (!buf) return 0;
    int ok = len >= 16 && memcmp(buf, magic, 4) == 0;
    if (ok) {
        memcpy(&f->type, buf + 4, 4);
        memcpy(&f->n, buf + 8, 4);
        memcpy(&f->nbytes, buf + 12, 4);
        ok = (int)f->type == type && f->nbytes == dp_row_size(type, f->n) && f->nbytes > 0 &&
             len == 16 + (size_t)f->nbytes + 4 * (size_t)f->n;
    }
    CHECKF(ok, "fixture %s: bad header or size", path);
    if (!ok) {
        free(buf);
        return 0;
    }
    f->bytes = malloc(f->nbytes);
    f->vals = malloc(4 * (size_t)f->n);
    size_t off_bytes = magic[3] == 'D' ? 16 : 16 + 4 * (size_t)f->n;
    size_t off_vals = magic[3] == 'D' ? 16 + f->nbytes : 16;
    memcpy(f->bytes, buf + off_bytes, f->nbytes);
    memcpy(f->vals, buf + off_vals, 4 * (size_t)f->n);
    free(buf);
    return 1;
}

static void free_fixture(fixture *f) {
    free(f->bytes);
    free(f->vals);
}

static int has_f16_scales(int type) { return type != DP_TYPE_F32 && type != DP_TYPE_F16 && type != DP_TYPE_BF16; }

static void test_fixtures_dequant(void) {
    for (int t = 0; t < N_TYPES; t++) {
        int type = g_types[t];
        for (int x = 0; x < 2; x++) {
            if (x && !has_f16_scales(type)) continue;
            char file[64], what[96];
            snprintf(file, sizeof file, "%s_%s.bin", x ? "deqx" : "deq", dp_type_name(type));
            fixture f;
            if (!load_fixture(file, "DPQD", type, &f)) continue;
            float *got = malloc(4 * (size_t)f.n);
            dp_dequantize_row(type, f.bytes, got, f.n);
            snprintf(what, sizeof what, "%s vs its reference dequantizer", file);
            check_floats(what, got, f.vals, f.n);
            /* and block by block at an offset (no alignment assumptions) */
            const dp_type_traits *tr = dp_type_get(type);
            uint8_t *shifted = malloc(f.nbytes + 1);
            memcpy(shifted + 1, f.bytes, f.nbytes);
            for (uint32_t i = 0; i < f.n; i += tr->block_size)
                dp_dequantize_row(type, shifted + 1 + dp_row_size(type, i), got + i, tr->block_size);
            snprintf(what, sizeof what, "%s (unaligned, per block)", file);
            check_floats(what, got, f.vals, f.n);
            free(shifted);
            free(got);
            free_fixture(&f);
        }
    }
}

/* gguf.quants.quantize's bytes for the types it can make: ours follow the
 * same ggml reference, so the bytes are equal (F16/BF16: NaN only as NaN). */
static void test_fixtures_quant(void) {
    static const int qt[] = {DP_TYPE_F16, DP_TYPE_BF16, DP_TYPE_Q4_0, DP_TYPE_Q4_1,
                             DP_TYPE_Q5_0, DP_TYPE_Q5_1, DP_TYPE_Q8_0};
    for (int t = 0; t < (int)(sizeof qt / sizeof qt[0]); t++) {
        int type = qt[t];
        char file[64];
        snprintf(file, sizeof file, "quant_%s.bin", dp_type_name(type));
        fixture f;
        if (!load_fixture(file, "DPQQ", type, &f)) continue;
        uint8_t *got = malloc(f.nbytes);
        CHECK(dp_quantize_row(type, f.vals, got, f.n) == 0);
        int64_t bad = 0, first = -1;
        if (type == DP_TYPE_F16 || type == DP_TYPE_BF16) {
            for (uint32_t i = 0; i < f.n; i++) {
                uint16_t a, b;
                memcpy(&a, got + 2 * i, 2);
                memcpy(&b, f.bytes + 2 * i, 2);
                float fa = type == DP_TYPE_F16 ? dp_fp16_to_f32(a) : dp_bf16_to_f32(a);
                float fb = type == DP_TYPE_F16 ? dp_fp16_to_f32(b) : dp_bf16_to_f32(b);
                int same = (isnan(fa) && isnan(fb)) || a == b;
                if (!same && bad++ == 0) first = i;
            }
            CHECKF(bad == 0, "%s: %lld of %u conversions differ, first input %.9g (0x%08x)", file, (long long)bad, f.n,
                   first >= 0 ? f.vals[first] : 0.0, first >= 0 ? f2u(f.vals[first]) : 0u);
        } else {
            for (uint32_t i = 0; i < f.nbytes; i++)
                if (got[i] != f.bytes[i] && bad++ == 0) first = i;
            CHECKF(bad == 0, "%s: %lld of %u bytes differ from gguf.quants.quantize, first at byte %lld (block %lld)",
                   file, (long long)bad, f.nbytes, (long long)first,
                   (long long)(first / dp_type_get(type)->type_size));
        }
        free(got);
        free_fixture(&f);
    }
}

/* ------------------------------------------------------ fp16 and bf16 */

/* The value of a finite half, computed independently of util.h. */
static double half_value(uint16_t h) {
    int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v = e == 0 ? ldexp(m, -24) : ldexp(1024 + m, e - 25);
    return s ? -v : v;
}

static void test_fp16_bf16(void) {
    int bad_val = 0, bad_rt = 0, bad_bf = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = dp_fp16_to_f32((uint16_t)h);
        int e = (h >> 10) & 31, m = h & 1023;
        if (e == 31) {
            if (m ? !isnan(f) : !(isinf(f) && (signbit(f) != 0) == (h >> 15))) bad_val++;
            if (m && !((dp_f32_to_fp16(f) & 0x7fff) > 0x7c00)) bad_rt++; /* NaN stays NaN */
        } else {
            if ((double)f != half_value((uint16_t)h) || (signbit(f) != 0) != (int)(h >> 15)) bad_val++;
            if (dp_f32_to_fp16(f) != h) bad_rt++;
        }
        float b = dp_bf16_to_f32((uint16_t)h);
        if (f2u(b) != h << 16) bad_bf++;
        if (!isnan(b) && dp_f32_to_bf16(b) != h) bad_bf++;
        if (isnan(b) && !isnan(dp_bf16_to_f32(dp_f32_to_bf16(b)))) bad_bf++;
    }
    CHECKF(bad_val == 0, "fp16 -> f32: %d of 65536 halves give the wrong value", bad_val);
    CHECKF(bad_rt == 0, "fp16 -> f32 -> fp16: %d of 65536 halves do not round-trip", bad_rt);
    CHECKF(bad_bf == 0, "bf16: %d failures over all 65536 values", bad_bf);

    /* f32 -> f16 on fresh random floats (every exponent, so subnormal halves,
     * underflow and overflow): the result is a nearest half, ties to even,
     * and |x| >= 65520 gives Inf. */
    int bad = 0;
    for (int i = 0; i < 200000; i++) {
        uint32_t u = (uint32_t)t_rand_u64();
        float x;
        if (i % 3 == 1) u = (u & 0x87ffffffu) | ((uint32_t)(96 + t_rand_u64() % 48) << 23); /* near the half range */
        memcpy(&x, &u, 4);
        if (i % 3 == 2) { /* an exact tie between two neighbouring halves */
            uint16_t a = (uint16_t)(t_rand_u64() % 0x7bff);
            x = (float)((half_value(a) + half_value((uint16_t)(a + 1))) / 2);
            if (u >> 31) x = -x;
        }
        uint16_t h = dp_f32_to_fp16(x);
        if (isnan(x)) {
            bad += !((h & 0x7fff) > 0x7c00);
            continue;
        }
        double ax = fabs((double)x);
        if ((h >> 15) != (u >> 31)) bad++;
        if (ax >= 65520.0) {
            bad += (h & 0x7fff) != 0x7c00;
            continue;
        }
        uint16_t a = h & 0x7fff;
        if (a >= 0x7c00) {
            bad++;
            continue;
        }
        double v = half_value(a), err = fabs(ax - v);
        double up = a == 0x7bff ? 65536.0 : half_value((uint16_t)(a + 1));
        double down = a == 0 ? -half_value(1) : half_value((uint16_t)(a - 1));
        double eu = fabs(ax - up), ed = fabs(ax - down);
        if (err > eu || err > ed) bad++;
        if ((err == eu || err == ed) && (a & 1)) bad++; /* tie not to even */
    }
    CHECKF(bad == 0, "f32 -> fp16: %d of 200000 random floats (a third exact ties) not rounded to nearest even", bad);
}

/* ---------------------------------------------------------- random data */

static const int g_f16_fields[][3] = {
    /* type, offsets of the f16 scale fields (-1 = none) */
    {DP_TYPE_Q4_0, 0, -1}, {DP_TYPE_Q4_1, 0, 2},   {DP_TYPE_Q5_0, 0, -1}, {DP_TYPE_Q5_1, 0, 2},
    {DP_TYPE_Q8_0, 0, -1}, {DP_TYPE_Q2_K, 80, 82}, {DP_TYPE_Q3_K, 108, -1}, {DP_TYPE_Q4_K, 0, 2},
    {DP_TYPE_Q5_K, 0, 2},  {DP_TYPE_Q6_K, 208, -1}, {DP_TYPE_IQ4_NL, 0, -1}, {DP_TYPE_IQ4_XS, 0, -1},
    {DP_TYPE_IQ2_XXS, 0, -1}, {DP_TYPE_IQ2_XS, 0, -1}, {DP_TYPE_IQ2_S, 0, -1}, {DP_TYPE_IQ3_XXS, 0, -1},
    {DP_TYPE_IQ3_S, 0, -1},
};

/* A sane random f16: sign * 2^U(-14, 1). */
static uint16_t rand_f16(void) {
    float v = exp2f((float)(-14.0 + 15.0 * t_rand_unit()));
    return dp_f32_to_fp16(t_rand_unit() < 0.5 ? -v : v);
}

/* n elements of random row data: random bits with sane f16 scales; F32/F16/
 * BF16 random normal values of varied magnitude. */
static void random_row(int type, uint8_t *row, int64_t n) {
    const dp_type_traits *t = dp_type_get(type);
    uint64_t nbytes = dp_row_size(type, n);
    if (type == DP_TYPE_F32 || type == DP_TYPE_F16 || type == DP_TYPE_BF16) {
        float *f = malloc(4 * (size_t)n);
        for (int64_t i = 0; i < n; i++) f[i] = t_rand_normal() * exp2f((float)(8 * t_rand_unit() - 4));
        dp_quantize_row(type, f, row, n);
        free(f);
        return;
    }
    for (uint64_t i = 0; i < nbytes; i++) row[i] = (uint8_t)t_rand_u64();
    for (int k = 0; k < (int)(sizeof g_f16_fields / sizeof g_f16_fields[0]); k++) {
        if (g_f16_fields[k][0] != type) continue;
        for (int64_t b = 0; b < n / t->block_size; b++)
            for (int f = 1; f < 3; f++)
                if (g_f16_fields[k][f] >= 0) put16(row + b * t->type_size + g_f16_fields[k][f], rand_f16());
    }
}

/* vec_dot equals dequantize-then-dot up to float summation rounding: the
 * error bound is (longest float summation chain + products + final
 * rounding) * 2^-24 * sum |w x|, against the exact dot in double. */
static void test_vec_dot(void) {
    static const int nblocks[] = {1, 2, 3, 7, 16};
    static const int nelem[] = {1, 5, 8, 31, 255, 256, 257, 1000, 4099};
    for (int t = 0; t < N_TYPES; t++) {
        int type = g_types[t];
        const dp_type_traits *tr = dp_type_get(type);
        int cases = tr->block_size == 1 ? 9 : 5;
        for (int c = 0; c < cases; c++) {
            int64_t n = tr->block_size == 1 ? nelem[c] : (int64_t)nblocks[c] * tr->block_size;
            uint8_t *row = malloc(dp_row_size(type, n) + 1);
            float *w = malloc(4 * (size_t)n), *x = malloc(4 * (size_t)n);
            random_row(type, row + 1, n); /* unaligned on purpose, except F32 */
            const uint8_t *r = type == DP_TYPE_F32 ? row : row + 1;
            if (type == DP_TYPE_F32) random_row(type, row, n);
            for (int64_t i = 0; i < n; i++) x[i] = t_rand_normal();
            dp_dequantize_row(type, r, w, n);
            double exact = 0, mag = 0;
            for (int64_t i = 0; i < n; i++) exact += (double)w[i] * x[i], mag += fabs((double)w[i] * x[i]);
            float got = dp_vec_dot_f32(type, r, x, n);
            int64_t chain = (type == DP_TYPE_F32 ? n : (n < QK_K ? n : QK_K)) / 8 + 4;
            double tol = (double)(chain + 2) * 0x1p-24 * mag + 0x1p-24 * fabs(exact);
            CHECKF(isfinite(got) && fabs(got - exact) <= tol, "vec_dot %s n=%lld: got %.9g, exact %.9g, tol %.3g",
                   tr->name, (long long)n, got, exact, tol);
            free(row);
            free(w);
            free(x);
        }
    }
    float x[32] = {0};
    uint8_t row[64] = {0};
    CHECK(isnan(dp_vec_dot_f32(DP_TYPE_Q8_K, row, x, 256)));  /* unsupported */
    CHECK(isnan(dp_vec_dot_f32(DP_TYPE_Q4_0, row, x, 31)));   /* not whole blocks */
    CHECK(isnan(dp_vec_dot_f32(99, row, x, 32)));
}

/* --------------------------------------------------------- round trips */

typedef struct {
    int type;
    double max_rel_l2;   /* bound on ||deq(q(x)) - x|| / ||x||, x ~ N(0, s^2) */
    double max_outliers; /* the same with every 997th value multiplied by 8 */
} rt_bound;

/* Measured over 40 seeds (8192 values, scales 1, 1e-3, 30), max rel-L2 /
 * with outliers: F16 0.00021/0.00022, BF16 0.00172/0.00172, Q8_0
 * 0.00556/0.00667, Q4_0 0.0883/0.1075, Q4_1 0.0798/0.0839, Q5_0
 * 0.0438/0.0552, Q5_1 0.0386/0.0409, Q2_K 0.3345/0.3473, Q3_K 0.1584/0.1706,
 * Q4_K 0.0804/0.0850, Q5_K 0.0393/0.0409, Q6_K 0.0194/0.0222, IQ4_NL
 * 0.0810/0.0842, IQ4_XS 0.0808/0.0895 (3 seeds). Bounds: about
 * 25% above those. */
static const rt_bound g_bounds[] = {
    {DP_TYPE_F32, 0.0, 0.0},         {DP_TYPE_F16, 0.00026, 0.00028}, {DP_TYPE_BF16, 0.0022, 0.0022},
    {DP_TYPE_Q8_0, 0.0070, 0.0085},  {DP_TYPE_Q4_0, 0.110, 0.135},    {DP_TYPE_Q4_1, 0.100, 0.105},
    {DP_TYPE_Q5_0, 0.055, 0.070},    {DP_TYPE_Q5_1, 0.048, 0.052},    {DP_TYPE_Q2_K, 0.420, 0.440},
    {DP_TYPE_Q3_K, 0.200, 0.215},    {DP_TYPE_Q4_K, 0.100, 0.107},    {DP_TYPE_Q5_K, 0.049, 0.052},
    {DP_TYPE_Q6_K, 0.0245, 0.028},   {DP_TYPE_IQ4_NL, 0.100, 0.112}, {DP_TYPE_IQ4_XS, 0.100, 0.112},
};

static void test_round_trip(void) {
    enum { N = 8192 };
    float *x = malloc(4 * N), *y = malloc(4 * N);
    uint8_t *q = malloc(4 * N);
    for (int k = 0; k < (int)(sizeof g_bounds / sizeof g_bounds[0]); k++) {
        int type = g_bounds[k].type;
        double worst = 0, outl = 0;
        /* unit scale, tiny and large scales, and a row with outliers */
        static const float scales[] = {1.0f, 1e-3f, 30.0f, 1.0f};
        for (int s = 0; s < 4; s++) {
            for (int i = 0; i < N; i++) x[i] = t_rand_normal() * scales[s];
            if (s == 3)
                for (int i = 0; i < N; i += 997) x[i] *= 8.0f;
            CHECK(dp_quantize_row(type, x, q, N) == 0);
            dp_dequantize_row(type, q, y, N);
            double e = dp_rel_l2(y, x, N);
            if (s < 3 && e > worst) worst = e;
            if (s == 3) outl = e;
            double lim = s == 3 ? g_bounds[k].max_outliers : g_bounds[k].max_rel_l2;
            CHECKF(e <= lim, "round trip %s (scale %g%s): rel-L2 %.5f > %.5f", dp_type_name(type), scales[s],
                   s == 3 ? ", outliers" : "", e, lim);
        }
        printf("round trip %-5s rel-L2 %.5f (bound %.5f), with outliers %.5f (bound %.5f)\n", dp_type_name(type),
               worst, g_bounds[k].max_rel_l2, outl, g_bounds[k].max_outliers);
        /* a zero row stays zero; a constant row stays close */
        memset(x, 0, 4 * 256);
        CHECK(dp_quantize_row(type, x, q, 256) == 0);
        dp_dequantize_row(type, q, y, 256);
        int nz = 0;
        for (int i = 0; i < 256; i++) nz += y[i] != 0.0f;
        CHECKF(nz == 0, "%s: zero row dequantizes to %d non-zero values", dp_type_name(type), nz);
        for (int i = 0; i < 256; i++) x[i] = -0.375f;
        CHECK(dp_quantize_row(type, x, q, 256) == 0);
        dp_dequantize_row(type, q, y, 256);
        CHECKF(dp_rel_l2(y, x, 256) < 0.02, "%s: constant row rel-L2 %.4f", dp_type_name(type), dp_rel_l2(y, x, 256));
    }
    /* non-finite and huge inputs: the output is meaningless but quantizing
     * must not crash or cast out of range (checked under sanitizers) */
    for (int k = 0; k < (int)(sizeof g_bounds / sizeof g_bounds[0]); k++) {
        static const float odd[] = {NAN, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX, 1e30f, -1e-30f, 0.0f};
        for (int i = 0; i < 512; i++) x[i] = (i % 5 == 0) ? odd[(i / 5) % 8] : t_rand_normal();
        CHECK(dp_quantize_row(g_bounds[k].type, x, q, 512) == 0);
    }
    const dp_type_traits *t4 = dp_type_get(DP_TYPE_Q4_K);
    CHECK(dp_quantize_row(DP_TYPE_Q4_K, x, q, t4->block_size + 1) == -1); /* not whole blocks */
    CHECK(dp_quantize_row(DP_TYPE_Q8_K, x, q, 256) == -1);                 /* not produced */
    CHECK(dp_quantize_row(DP_TYPE_IQ2_XXS, x, q, 256) == -1);
    free(x);
    free(y);
    free(q);
}

int main(void) {
    t_seed();
    test_hand_built();
    test_fixtures_dequant();
    test_fixtures_quant();
    test_fp16_bf16();
    test_vec_dot();
    test_round_trip();
    return t_done("test_quant");
}
