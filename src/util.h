/* Small shared helpers: error reporting, allocation, timing, fp16/bf16. */
#ifndef DP_UTIL_H
#define DP_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "doppler.h"

#if defined(__GNUC__)
#define DP_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DP_PRINTF(a, b)
#endif

/* Records a one-line error message for dp_last_error(); returns code. */
int dp_set_error(int code, const char *fmt, ...) DP_PRINTF(2, 3);

/* Allocation that records an error on failure. dp_malloc_aligned: 64-byte. */
void *dp_malloc(size_t n);
void *dp_calloc(size_t n, size_t size);
void *dp_malloc_aligned(size_t n);
void dp_free_aligned(void *p);
char *dp_strndup(const char *s, size_t n);

/* Overflow-checked arithmetic: return 0 on overflow. */
static inline int dp_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int dp_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

static inline float dp_fp16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else { /* subnormal: renormalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            man &= 0x3ff;
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | (man << 13);
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (man << 13);
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Round to nearest even; NaN stays NaN, overflow becomes Inf. */
static inline uint16_t dp_f32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) return (uint16_t)(sign | 0x7e00); /* NaN */
    if (absx >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (absx < 0x38800000u) { /* result is a half subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign;   /* below 2^-25 */
        uint32_t e = absx >> 23, man = (absx & 0x7fffff) | 0x800000;
        uint32_t sh = 126 - e;                           /* 14..24 */
        uint32_t q = man >> sh, rem = man & ((1u << sh) - 1), mid = 1u << (sh - 1);
        if (rem > mid || (rem == mid && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t r = absx + 0xfff + ((absx >> 13) & 1); /* round to nearest even */
    r -= 0x38000000u;
    return (uint16_t)(sign | (r >> 13));
}

static inline float dp_bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

static inline uint16_t dp_f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

#endif
