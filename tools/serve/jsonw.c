/* Growable buffers and hand-written JSON text (see jsonw.h). */
#include "jsonw.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void sb_free(sbuf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}

void sb_clear(sbuf *b) {
    b->n = 0;
    b->oom = 0;
    if (b->s) b->s[0] = 0;
}

static int reserve(sbuf *b, size_t extra) {
    if (b->oom) return -1;
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->n + extra + 1) cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->oom = 1;
        return -1;
    }
    b->s = s;
    b->cap = cap;
    return 0;
}

void sb_add(sbuf *b, const char *s, size_t n) {
    if (!n || reserve(b, n)) return;
    memcpy(b->s + b->n, s, n);
    b->n += n;
    b->s[b->n] = 0;
}

void sb_puts(sbuf *b, const char *s) { sb_add(b, s, strlen(s)); }

void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char tmp[256];
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0) return;
    if ((size_t)k < sizeof tmp) {
        sb_add(b, tmp, (size_t)k);
        return;
    }
    if (reserve(b, (size_t)k)) return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->n, (size_t)k + 1, fmt, ap);
    va_end(ap);
    b->n += (size_t)k;
}

/* Length of the well-formed UTF-8 sequence at s (n bytes left), 0 if none. */
static int utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0], cp, min;
    int len;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (n < (size_t)len) return 0;
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    return cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF) ? 0 : len;
}

void sb_json_str(sbuf *b, const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    if (reserve(b, n + 2)) return;
    b->s[b->n++] = '"';
    size_t i = 0;
    while (i < n) {
        size_t j = i; /* a run of bytes that need no escape */
        while (j < n && s[j] >= 0x20 && s[j] < 0x80 && s[j] != '"' && s[j] != '\\') j++;
        if (j > i) {
            sb_add(b, str + i, j - i);
            i = j;
            continue;
        }
        unsigned c = s[i];
        if (c == '"') sb_add(b, "\\\"", 2);
        else if (c == '\\') sb_add(b, "\\\\", 2);
        else if (c == '\n') sb_add(b, "\\n", 2);
        else if (c == '\r') sb_add(b, "\\r", 2);
        else if (c == '\t') sb_add(b, "\\t", 2);
        else if (c < 0x20) sb_printf(b, "\\u%04x", c);
        else {
            int len = utf8_len(s + i, n - i);
            if (len) sb_add(b, str + i, (size_t)len);
            else sb_add(b, "\xEF\xBF\xBD", 3);
            i += len ? (size_t)len : 1;
            continue;
        }
        i++;
    }
    sb_add(b, "\"", 1);
}

void sb_json_logprob(sbuf *b, double v) {
    if (isnan(v) || v < -9999) v = -9999;
    sb_printf(b, "%.7g", v);
}
