/* Python's string operations on UTF-8 text, as Jinja templates see them:
 * lengths and indexes count code points, strip/split use str.isspace,
 * upper/lower are Unicode's full case mappings (ICU), and floats print
 * with repr()'s shortest round-trip digits. JSON output is json.dumps'. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/uchar.h>
#include <unicode/ustring.h>

#include "jinja_impl.h"
#include "tokenizer/internal.h"

/* Decodes one code point at s[*i] (bounded by n); malformed bytes decode as
 * U+FFFD one byte at a time. */
uint32_t ju_decode(const char *s, size_t n, size_t *i) {
    const unsigned char *u = (const unsigned char *)s + *i;
    size_t left = n - *i;
    uint32_t c = u[0];
    int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (len == 1) {
        (*i)++;
        return c;
    }
    if (len == 0 || (size_t)len > left) {
        (*i)++;
        return 0xFFFD;
    }
    uint32_t cp = c & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((u[k] & 0xC0) != 0x80) {
            (*i)++;
            return 0xFFFD;
        }
        cp = cp << 6 | (u[k] & 0x3F);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        (*i)++;
        return 0xFFFD;
    }
    *i += (size_t)len;
    return cp;
}

size_t ju_ncp(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; k++) ju_decode(s, n, &i);
    return k;
}

size_t ju_offset(const char *s, size_t n, size_t cp) {
    size_t i = 0;
    while (cp-- > 0 && i < n) ju_decode(s, n, &i);
    return i;
}

int ju_isspace(uint32_t cp) { return tk_py_isspace(cp); }

static int in_set(uint32_t cp, const char *set, size_t n) {
    for (size_t i = 0; i < n;)
        if (ju_decode(set, n, &i) == cp) return 1;
    return 0;
}

/* the code point ending at byte e, and its start in *start */
static uint32_t prev_cp(const char *s, size_t e, size_t *start) {
    size_t k = e - 1;
    while (k > 0 && e - k < 4 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
    size_t j = k;
    uint32_t cp = ju_decode(s, e, &j);
    if (j != e) k = e - 1, cp = 0xFFFD; /* a stray continuation byte */
    *start = k;
    return cp;
}

static uint32_t cp_before(const char *s, size_t e) {
    size_t k;
    return prev_cp(s, e, &k);
}

jv ju_strip(jctx *c, jv s, jv chars, int left, int right) {
    jstr *x = JSTR(s);
    int ws = chars.t != JV_STR;
    const char *set = ws ? NULL : JSTR(chars)->s;
    size_t setn = ws ? 0 : JSTR(chars)->len, a = 0, e = x->len;
    while (left && a < e) {
        size_t j = a;
        uint32_t cp = ju_decode(x->s, x->len, &j);
        if (ws ? !ju_isspace(cp) : !in_set(cp, set, setn)) break;
        a = j;
    }
    while (right && e > a) {
        size_t k;
        uint32_t cp = prev_cp(x->s, e, &k);
        if (k < a || (ws ? !ju_isspace(cp) : !in_set(cp, set, setn))) break;
        e = k;
    }
    if (a == 0 && e == x->len) return jv_ref(s);
    return jv_str(c, x->s + a, e - a);
}

/* s.split(sep, maxsplit) / s.rsplit(...); sep not a str = runs of whitespace */
jv ju_split(jctx *c, jv s, jv sep, int64_t maxsplit, int right) {
    jstr *x = JSTR(s);
    jv out = jv_list(c, 0);
    if (c->failed) return out;
    if (sep.t == JV_STR && JSTR(sep)->len == 0) {
        jv_drop(c, out);
        return jerr(c, "empty separator");
    }
    /* collect pieces as [start, end) byte ranges, then emit in order */
    size_t cap = 16, np = 0;
    size_t *pc = malloc(cap * 2 * sizeof *pc);
    if (!pc) return jv_drop(c, out), jerr(c, "out of memory");
#define ADD(a_, b_)                                                                         \
    do {                                                                                    \
        if (np == cap) {                                                                    \
            size_t *q_ = realloc(pc, cap * 4 * sizeof *pc);                                 \
            if (!q_) { free(pc); jv_drop(c, out); return jerr(c, "out of memory"); }        \
            pc = q_;                                                                        \
            cap *= 2;                                                                       \
        }                                                                                   \
        pc[2 * np] = (a_);                                                                  \
        pc[2 * np + 1] = (b_);                                                              \
        np++;                                                                               \
    } while (0)
    const char *p = x->s;
    size_t n = x->len;
    if (sep.t == JV_STR) {
        const char *q = JSTR(sep)->s;
        size_t m = JSTR(sep)->len;
        if (!right) {
            size_t a = 0;
            for (size_t i = 0; i + m <= n;) {
                if ((maxsplit < 0 || (int64_t)np < maxsplit) && !memcmp(p + i, q, m)) {
                    ADD(a, i);
                    i += m;
                    a = i;
                } else {
                    i++;
                }
            }
            ADD(a, n);
        } else {
            size_t e = n;
            for (size_t i = n; i >= m && i - m < n;) {
                if ((maxsplit < 0 || (int64_t)np < maxsplit) && !memcmp(p + i - m, q, m)) {
                    ADD(i, e);
                    i -= m;
                    e = i;
                } else {
                    i--;
                }
            }
            ADD(0, e);
        }
    } else if (!right) {
        size_t i = 0;
        for (;;) {
            while (i < n) {
                size_t j = i;
                if (!ju_isspace(ju_decode(p, n, &j))) break;
                i = j;
            }
            if (i >= n) break;
            if (maxsplit >= 0 && (int64_t)np == maxsplit) { /* the rest as it is */
                ADD(i, n);
                break;
            }
            size_t a = i;
            while (i < n) {
                size_t j = i;
                if (ju_isspace(ju_decode(p, n, &j))) break;
                i = j;
            }
            ADD(a, i);
        }
    } else {
        size_t e = n;
        for (;;) {
            while (e > 0 && ju_isspace(cp_before(p, e))) prev_cp(p, e, &e);
            if (e == 0) break;
            if (maxsplit >= 0 && (int64_t)np == maxsplit) { /* the rest as it is */
                ADD(0, e);
                break;
            }
            size_t b2 = e;
            while (b2 > 0 && !ju_isspace(cp_before(p, b2))) prev_cp(p, b2, &b2);
            ADD(b2, e);
            e = b2;
        }
    }
    for (size_t k = 0; k < np && !c->failed; k++) {
        size_t idx = right ? np - 1 - k : k;
        jlist_push(c, out, jv_str(c, p + pc[2 * idx], pc[2 * idx + 1] - pc[2 * idx]));
    }
#undef ADD
    free(pc);
    return out;
}

static int is_linebreak(uint32_t cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0b || cp == 0x0c || cp == 0x1c || cp == 0x1d || cp == 0x1e ||
           cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

jv ju_splitlines(jctx *c, const char *s, size_t n, int keepends) {
    jv out = jv_list(c, 0);
    size_t a = 0;
    for (size_t i = 0; i < n && !c->failed;) {
        size_t j = i;
        uint32_t cp = ju_decode(s, n, &j);
        if (!is_linebreak(cp)) {
            i = j;
            continue;
        }
        if (cp == '\r' && j < n && s[j] == '\n') j++;
        jlist_push(c, out, jv_str(c, s + a, (keepends ? j : i) - a));
        a = i = j;
    }
    if (a < n && !c->failed) jlist_push(c, out, jv_str(c, s + a, n - a));
    return out;
}

static void put_utf8(char *o, size_t *k, uint32_t cp) {
    char b[4];
    int len = tk_utf8_encode(cp, b);
    memcpy(o + *k, b, (size_t)len);
    *k += (size_t)len;
}

/* upper/lower: ICU's full mappings on the whole string (root locale) */
static jv icu_case(jctx *c, jstr *x, int upper) {
    int32_t n16 = 0;
    UErrorCode st = U_ZERO_ERROR;
    if (x->len > (size_t)INT32_MAX / 4) return jerr(c, "string too long");
    UChar *a = malloc((x->len + 1) * sizeof(UChar));
    if (!a) return jerr(c, "out of memory");
    u_strFromUTF8WithSub(a, (int32_t)x->len + 1, &n16, x->s, (int32_t)x->len, 0xFFFD, NULL, &st);
    int32_t cap = n16 * 3 + 16;
    UChar *b = U_SUCCESS(st) ? malloc((size_t)cap * sizeof(UChar)) : NULL;
    int32_t m = 0;
    if (b) m = upper ? u_strToUpper(b, cap, a, n16, "", &st) : u_strToLower(b, cap, a, n16, "", &st);
    char *o = b && U_SUCCESS(st) ? malloc((size_t)m * 3 + 1) : NULL;
    int32_t on = 0;
    if (o) u_strToUTF8(o, m * 3 + 1, &on, b, m, &st);
    jv r = o && U_SUCCESS(st) ? jv_str(c, o, (size_t)on) : jerr(c, "case conversion failed");
    free(a);
    free(b);
    free(o);
    return r;
}

/* 't': Python str.title; 'c': str.capitalize; 'T': Jinja's title filter
 * (words begin after - ( { [ < or whitespace) */
jv ju_case(jctx *c, jv s, int mode) {
    jstr *x = JSTR(s);
    if (mode == 'u' || mode == 'l') return icu_case(c, x, mode == 'u');
    char *o = malloc(x->len * 2 + 8); /* simple mappings stay within 4 bytes per code point */
    if (!o) return jerr(c, "out of memory");
    size_t k = 0;
    int prev_cased = 0, first = 1, word_start = 1;
    for (size_t i = 0; i < x->len;) {
        if (k + 8 > x->len * 2 + 8) break;
        uint32_t cp = ju_decode(x->s, x->len, &i);
        uint32_t m;
        if (mode == 't') {
            m = prev_cased ? (uint32_t)u_tolower((UChar32)cp) : (uint32_t)u_totitle((UChar32)cp);
            prev_cased = u_hasBinaryProperty((UChar32)cp, UCHAR_CASED);
        } else if (mode == 'c') {
            m = first ? (uint32_t)u_totitle((UChar32)cp) : (uint32_t)u_tolower((UChar32)cp);
        } else {
            int sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || ju_isspace(cp);
            m = sep ? cp : word_start ? (uint32_t)u_toupper((UChar32)cp) : (uint32_t)u_tolower((UChar32)cp);
            word_start = sep;
        }
        first = 0;
        put_utf8(o, &k, m);
    }
    jv r = jv_str(c, o, k);
    free(o);
    return r;
}

jv ju_replace(jctx *c, jv s, jv old, jv new_, int64_t count) {
    jstr *x = JSTR(s), *a = JSTR(old), *b = JSTR(new_);
    jbuf out = {0};
    if (a->len == 0) { /* Python inserts new before every character and at the end */
        size_t i = 0;
        int64_t done = 0;
        while (!c->failed) {
            if (count < 0 || done < count) {
                jbuf_put(c, &out, b->s, b->len);
                done++;
            }
            if (i >= x->len) break;
            size_t j = i;
            ju_decode(x->s, x->len, &j);
            jbuf_put(c, &out, x->s + i, j - i);
            i = j;
        }
        return jbuf_take(c, &out);
    }
    size_t i = 0, from = 0;
    int64_t done = 0;
    while (i + a->len <= x->len && (count < 0 || done < count) && !c->failed) {
        if (!memcmp(x->s + i, a->s, a->len)) {
            jbuf_put(c, &out, x->s + from, i - from);
            jbuf_put(c, &out, b->s, b->len);
            i += a->len;
            from = i;
            done++;
        } else {
            i++;
        }
    }
    jbuf_put(c, &out, x->s + from, x->len - from);
    return jbuf_take(c, &out);
}

int64_t ju_find(jv s, jv sub, int right) {
    jstr *x = JSTR(s), *y = JSTR(sub);
    if (y->len > x->len) return -1;
    size_t hit = (size_t)-1;
    for (size_t i = 0; i + y->len <= x->len; i++)
        if (!memcmp(x->s + i, y->s, y->len)) {
            hit = i;
            if (!right) break;
        }
    return hit == (size_t)-1 ? -1 : (int64_t)ju_ncp(x->s, hit);
}

/* -------------------------------------------------------------- numbers */

void ju_float_repr(double f, char *out) {
    if (isnan(f)) { strcpy(out, "nan"); return; }
    if (isinf(f)) { strcpy(out, f < 0 ? "-inf" : "inf"); return; }
    if (f == 0) { strcpy(out, signbit(f) ? "-0.0" : "0.0"); return; }
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf = [-]d[.ddd]e[+-]XX */
    char dig[24];
    int nd = 0, neg = buf[0] == '-';
    const char *q = buf + neg;
    for (; *q && *q != 'e'; q++)
        if (*q != '.') dig[nd++] = *q;
    int e = atoi(q + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    char *o = out;
    if (neg) *o++ = '-';
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int k = 0; k <= e; k++) *o++ = k < nd ? dig[k] : '0';
            *o++ = '.';
            if (nd > e + 1) for (int k = e + 1; k < nd; k++) *o++ = dig[k];
            else *o++ = '0';
        } else {
            *o++ = '0';
            *o++ = '.';
            for (int k = 0; k < -e - 1; k++) *o++ = '0';
            for (int k = 0; k < nd; k++) *o++ = dig[k];
        }
        *o = 0;
    } else {
        *o++ = dig[0];
        if (nd > 1) {
            *o++ = '.';
            for (int k = 1; k < nd; k++) *o++ = dig[k];
        }
        sprintf(o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
}

/* Python int(str, base): surrounding whitespace, a sign, digits with single
 * underscores between them */
int ju_parse_int(const char *s, size_t n, int base, int64_t *out) {
    size_t i = 0;
    while (i < n && ju_isspace((unsigned char)s[i])) i++;
    while (n > i && ju_isspace((unsigned char)s[n - 1])) n--;
    int neg = 0;
    if (i < n && (s[i] == '+' || s[i] == '-')) neg = s[i++] == '-';
    if (i + 1 < n && s[i] == '0') { /* Python accepts the prefix of the base: int('0x1A', 16) */
        char p = (char)(s[i + 1] | 0x20);
        if ((base == 16 && p == 'x') || (base == 8 && p == 'o') || (base == 2 && p == 'b')) {
            i += 2;
            if (i < n && s[i] == '_') i++;
        }
    }
    if (i >= n) return 0;
    uint64_t v = 0;
    int prev_digit = 0;
    for (; i < n; i++) {
        char ch = s[i];
        if (ch == '_' && prev_digit && i + 1 < n && s[i + 1] != '_') {
            prev_digit = 0;
            continue;
        }
        int d = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'z' ? ch - 'a' + 10
              : ch >= 'A' && ch <= 'Z' ? ch - 'A' + 10 : 99;
        if (d >= base) return 0;
        if (v > (UINT64_MAX - (uint64_t)d) / (uint64_t)base) return 0;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_digit = 1;
    }
    if (!prev_digit || v > (uint64_t)INT64_MAX + (uint64_t)neg) return 0;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 1;
}

/* Python float(str) */
int ju_parse_float(const char *s, size_t n, double *out) {
    char buf[128];
    size_t k = 0;
    size_t i = 0;
    while (i < n && ju_isspace((unsigned char)s[i])) i++;
    while (n > i && ju_isspace((unsigned char)s[n - 1])) n--;
    if (i >= n || n - i >= sizeof buf) return 0;
    for (; i < n; i++) {
        char ch = s[i];
        if (ch == '_') {
            if (!k || !(buf[k - 1] >= '0' && buf[k - 1] <= '9') || i + 1 >= n || !(s[i + 1] >= '0' && s[i + 1] <= '9'))
                return 0;
            continue;
        }
        if (ch == 'x' || ch == 'X' || ch == 'p' || ch == 'P') return 0; /* no hex floats in Python */
        buf[k++] = ch;
    }
    buf[k] = 0;
    char *end;
    double d = strtod(buf, &end);
    if (end == buf || *end) return 0;
    *out = d;
    return 1;
}

/* ----------------------------------------------------------------- JSON */

static int json_str(jctx *c, jbuf *b, const char *s, size_t n, int ensure_ascii) {
    jbuf_put(c, b, "\"", 1);
    size_t from = 0;
    for (size_t i = 0; i < n && !c->failed;) {
        size_t j = i;
        uint32_t cp = ju_decode(s, n, &j);
        char e[16] = "";
        if (cp == '"') strcpy(e, "\\\"");
        else if (cp == '\\') strcpy(e, "\\\\");
        else if (cp == '\n') strcpy(e, "\\n");
        else if (cp == '\r') strcpy(e, "\\r");
        else if (cp == '\t') strcpy(e, "\\t");
        else if (cp == '\b') strcpy(e, "\\b");
        else if (cp == '\f') strcpy(e, "\\f");
        else if (cp < 0x20) snprintf(e, sizeof e, "\\u%04x", cp);
        else if (ensure_ascii && cp > 0x7e && cp != 0x7f) {
            if (cp >= 0x10000)
                snprintf(e, sizeof e, "\\u%04x\\u%04x", 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF));
            else
                snprintf(e, sizeof e, "\\u%04x", cp);
        }
        if (e[0]) {
            jbuf_put(c, b, s + from, i - from);
            jbuf_put(c, b, e, strlen(e));
            from = j;
        }
        i = j;
    }
    jbuf_put(c, b, s + from, n - from);
    return jbuf_put(c, b, "\"", 1);
}

static int json_newline(jctx *c, jbuf *b, const char *indent, int level) {
    jbuf_put(c, b, "\n", 1);
    for (int k = 0; k < level && !c->failed; k++) jbuf_put(c, b, indent, strlen(indent));
    return !c->failed;
}

/* a dict key as json.dumps writes it: str as is; int, float, bool, None converted */
static int json_key(jctx *c, jbuf *b, jv k, int ensure_ascii) {
    char tmp[40];
    switch (k.t) {
    case JV_STR: return json_str(c, b, JSTR(k)->s, JSTR(k)->len, ensure_ascii);
    case JV_INT: snprintf(tmp, sizeof tmp, "\"%" PRId64 "\"", k.i); break;
    case JV_BOOL: strcpy(tmp, k.i ? "\"true\"" : "\"false\""); break;
    case JV_NONE: strcpy(tmp, "\"null\""); break;
    case JV_FLOAT:
        if (isinf(k.f) || isnan(k.f)) strcpy(tmp, isnan(k.f) ? "\"NaN\"" : k.f < 0 ? "\"-Infinity\"" : "\"Infinity\"");
        else tmp[0] = '"', ju_float_repr(k.f, tmp + 1), strcat(tmp, "\"");
        break;
    default: return jerr(c, "keys must be str, int, float, bool or None, not %s", jv_typename(k)), 0;
    }
    return jbuf_put(c, b, tmp, strlen(tmp));
}

int ju_json(jctx *c, jbuf *b, jv v, const char *indent, int level, const char *item_sep, const char *key_sep,
            int sort_keys, int ensure_ascii) {
    char tmp[40];
    if (c->failed) return 0;
    if (level > JMAX_NEST) return jerr(c, "value nested too deeply for tojson"), 0;
    switch (v.t) {
    case JV_NONE: return jbuf_put(c, b, "null", 4);
    case JV_BOOL: return v.i ? jbuf_put(c, b, "true", 4) : jbuf_put(c, b, "false", 5);
    case JV_INT: snprintf(tmp, sizeof tmp, "%" PRId64, v.i); return jbuf_put(c, b, tmp, strlen(tmp));
    case JV_FLOAT:
        if (isnan(v.f)) strcpy(tmp, "NaN");
        else if (isinf(v.f)) strcpy(tmp, v.f < 0 ? "-Infinity" : "Infinity");
        else ju_float_repr(v.f, tmp);
        return jbuf_put(c, b, tmp, strlen(tmp));
    case JV_STR: return json_str(c, b, JSTR(v)->s, JSTR(v)->len, ensure_ascii);
    case JV_LIST: {
        jlist *l = JLIST(v);
        if (!l->n) return jbuf_put(c, b, "[]", 2);
        jbuf_put(c, b, "[", 1);
        for (size_t i = 0; i < l->n && !c->failed; i++) {
            if (i) jbuf_put(c, b, item_sep, strlen(item_sep));
            if (indent) json_newline(c, b, indent, level + 1);
            ju_json(c, b, l->v[i], indent, level + 1, item_sep, key_sep, sort_keys, ensure_ascii);
        }
        if (indent) json_newline(c, b, indent, level);
        return jbuf_put(c, b, "]", 1);
    }
    case JV_DICT: {
        jdict *d = JDICT(v);
        if (!d->n) return jbuf_put(c, b, "{}", 2);
        size_t *ord = malloc(d->n * sizeof *ord);
        if (!ord) return jerr(c, "out of memory"), 0;
        for (size_t i = 0; i < d->n; i++) ord[i] = i;
        for (size_t i = 1; sort_keys && i < d->n && !c->failed; i++) /* insertion sort: stable, bounded sizes */
            for (size_t j = i; j > 0; j--) {
                int r = 0;
                if (!jv_cmp(c, d->k[ord[j - 1]], d->k[ord[j]], &r) || r <= 0) break;
                size_t t = ord[j];
                ord[j] = ord[j - 1];
                ord[j - 1] = t;
            }
        jbuf_put(c, b, "{", 1);
        for (size_t i = 0; i < d->n && !c->failed; i++) {
            if (i) jbuf_put(c, b, item_sep, strlen(item_sep));
            if (indent) json_newline(c, b, indent, level + 1);
            json_key(c, b, d->k[ord[i]], ensure_ascii);
            jbuf_put(c, b, key_sep, strlen(key_sep));
            ju_json(c, b, d->v[ord[i]], indent, level + 1, item_sep, key_sep, sort_keys, ensure_ascii);
        }
        free(ord);
        if (indent) json_newline(c, b, indent, level);
        return jbuf_put(c, b, "}", 1);
    }
    default: return jerr(c, "Object of type %s is not JSON serializable", jv_typename(v)), 0;
    }
}
