/* UTF-8 helpers and Unicode normalization (NFC through ICU) for the
 * tokenizers. */
#include <stdlib.h>
#include <string.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "../util.h"
#include "internal.h"

int tk_utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return 2;
    if (c < 0xF0) return 3;
    if (c < 0xF5) return 4;
    return 0;
}

long tk_utf8_validate(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        int k = tk_utf8_len(c);
        if (!k || i + (size_t)k > n) return (long)i;
        for (int j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return (long)i;
        /* overlong 3/4-byte forms, surrogates, > U+10FFFF */
        if (c == 0xE0 && s[i + 1] < 0xA0) return (long)i;
        if (c == 0xED && s[i + 1] >= 0xA0) return (long)i;
        if (c == 0xF0 && s[i + 1] < 0x90) return (long)i;
        if (c == 0xF4 && s[i + 1] >= 0x90) return (long)i;
        i += (size_t)k;
    }
    return -1;
}

uint32_t tk_utf8_decode(const char *str, size_t n, int *adv) {
    const unsigned char *s = (const unsigned char *)str;
    int k = tk_utf8_len(s[0]);
    if (k == 0 || (size_t)k > n) { *adv = 1; return 0xFFFD; }
    *adv = k;
    switch (k) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default:
        return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) | ((uint32_t)(s[2] & 0x3F) << 6) |
               (s[3] & 0x3F);
    }
}

int tk_utf8_encode(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12));
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18));
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Python's str.isspace(): bidirectional class WS, B or S, or category Zs.
 * Used where transformers calls str.strip() (Jinja's trim, the Gemma
 * respelling of space tokens). */
int tk_py_isspace(uint32_t c) {
    if (c >= 0x09 && c <= 0x0D) return 1;
    if (c >= 0x1C && c <= 0x20) return 1;
    switch (c) {
    case 0x85: case 0xA0: case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: return 1;
    default: return c >= 0x2000 && c <= 0x200A;
    }
}

long tk_nfc(const char *s, size_t n, char **dst, size_t *cap) {
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2 *nfc = unorm2_getNFCInstance(&err);
    if (U_FAILURE(err)) return dp_set_error(DP_ERR_BACKEND, "ICU: no NFC normalizer (%s)", u_errorName(err)), -1;
    if (n > (size_t)INT32_MAX / 4) return dp_set_error(DP_ERR_ARG, "text too long to normalize"), -1;
    int32_t ulen = 0;
    UChar *u = malloc(sizeof(UChar) * (n + 1));
    UChar *v = malloc(sizeof(UChar) * (2 * n + 8));
    if (!u || !v) {
        free(u);
        free(v);
        return dp_set_error(DP_ERR_NOMEM, "out of memory normalizing text"), -1;
    }
    u_strFromUTF8(u, (int32_t)(n + 1), &ulen, s, (int32_t)n, &err);
    int32_t vlen = U_SUCCESS(err) ? unorm2_normalize(nfc, u, ulen, v, (int32_t)(2 * n + 8), &err) : 0;
    long out = -1;
    if (U_SUCCESS(err)) {
        int32_t blen = 0;
        UErrorCode e2 = U_ZERO_ERROR;
        u_strToUTF8(NULL, 0, &blen, v, vlen, &e2);
        if (tk_grow((void **)dst, cap, (size_t)blen + 1, 1) == 0) {
            err = U_ZERO_ERROR;
            u_strToUTF8(*dst, blen + 1, &blen, v, vlen, &err);
            if (U_SUCCESS(err)) out = blen;
        } else {
            err = U_MEMORY_ALLOCATION_ERROR;
        }
    }
    if (out < 0) dp_set_error(DP_ERR_ARG, "NFC normalization failed (%s)", u_errorName(err));
    free(u);
    free(v);
    return out;
}
