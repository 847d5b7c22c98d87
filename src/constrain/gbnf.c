/* The GBNF parser (gbnf.h): rules `name ::= alternatives`, each a sequence
 * of literals, character classes, `.`, rule references and groups, with
 * the repetitions * + ? {m} {m,} {m,n} {,n}; `#` comments; a newline ends a rule
 * except inside a group or after `|` or `::=`.
 *
 * Groups and repeated items become rules of their own, so that the machine
 * only meets classes, references and ends:
 *   x*      R ::= x R |          x+   x R (R as for x*)
 *   x?      R ::= x |            x{m,n}  x (m times) O(n - m), O(k) ::= x O(k - 1) |
 * A repeated item of more than one element is first made a rule, so every
 * copy is one reference.
 *
 * A stack machine cannot follow a rule that reaches itself before reading
 * a character (it would push forever), so such left recursion is refused,
 * counting rules that may read nothing: a repetition of something that may
 * be empty is one. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"

enum { SYM_SLOTS = 16384 }; /* the name table: a power of two above twice GB_MAX_RULES */

typedef struct {
    gelem *e;
    int n, cap;
} seq;

typedef struct {
    gbnf *G;
    const char *s, *p, *end;
    char *err;
    size_t errcap;
    int failed;
    int depth;
    /* named rules: slot -> rule + 1 (0: empty) */
    int32_t *slot;
    /* per rule: its name (names[r] of name_len[r] bytes: the named rule it belongs to), where it was first
     * met (an undefined one's reference) or made, whether it is defined */
    const char **name;
    int *name_len, *where, *defined;
    int cap_rules;
    int owner; /* the named rule being parsed */
} parser;

static void fail(parser *P, const char *at, const char *fmt, ...) {
    if (P->failed) return;
    P->failed = 1;
    int line = 1, col = 1;
    for (const char *q = P->s; q < at && q < P->end; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    char msg[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(P->err, P->errcap, "%s at line %d, column %d", msg, line, col);
}

static int grow(void **p, int *cap, int need, size_t size, int limit) {
    if (need <= *cap) return 0;
    if (need > limit) return -1;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    if (c > limit) c = limit;
    void *q = realloc(*p, (size_t)c * size);
    if (!q) return -1;
    *p = q, *cap = c;
    return 0;
}

static int seq_add(parser *P, seq *s, gelem e) {
    if (grow((void **)&s->e, &s->cap, s->n + 1, sizeof(gelem), GB_MAX_ELEMS)) {
        fail(P, P->p, "grammar too large (more than %d elements)", GB_MAX_ELEMS);
        return -1;
    }
    s->e[s->n++] = e;
    return 0;
}

/* A new rule belonging to P->owner, made at `at`. */
static int new_rule(parser *P, const char *at) {
    gbnf *G = P->G;
    if (G->n_rules >= GB_MAX_RULES) {
        fail(P, at, "too many rules (more than %d, counting groups and repetitions)", GB_MAX_RULES);
        return -1;
    }
    if (G->n_rules >= P->cap_rules) {
        int c = P->cap_rules ? 2 * P->cap_rules : 64;
        grule *r = realloc(G->rules, sizeof(grule) * (size_t)c);
        if (r) G->rules = r;
        const char **nm = realloc(P->name, sizeof(char *) * (size_t)c);
        if (nm) P->name = nm;
        int *nl = realloc(P->name_len, sizeof(int) * (size_t)c);
        if (nl) P->name_len = nl;
        int *w = realloc(P->where, sizeof(int) * (size_t)c);
        if (w) P->where = w;
        int *d = realloc(P->defined, sizeof(int) * (size_t)c);
        if (d) P->defined = d;
        if (!r || !nm || !nl || !w || !d) {
            fail(P, at, "out of memory");
            return -1;
        }
        P->cap_rules = c;
    }
    const int r = G->n_rules++;
    G->rules[r] = (grule){0, 0};
    P->name[r] = P->owner >= 0 ? P->name[P->owner] : "";
    P->name_len[r] = P->owner >= 0 ? P->name_len[P->owner] : 0;
    P->where[r] = (int)(at - P->s);
    P->defined[r] = 0;
    return r;
}

static int is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* The slot of the name table for `name`: the named rule's (slot -> rule + 1) or an empty one. */
static int32_t *name_slot(parser *P, const char *name, int len) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < len; i++) h = (h ^ (uint8_t)name[i]) * 16777619u;
    for (uint32_t k = h & (SYM_SLOTS - 1);; k = (k + 1) & (SYM_SLOTS - 1)) {
        const int r = P->slot[k] - 1;
        if (r < 0 || (P->name_len[r] == len && !memcmp(P->name[r], name, (size_t)len))) return &P->slot[k];
    }
}

/* The named rule `name`, made at its first mention. */
static int named_rule(parser *P, const char *name, int len) {
    int32_t *slot = name_slot(P, name, len);
    if (*slot) return *slot - 1;
    const int saved = P->owner;
    P->owner = -1;
    const int r = new_rule(P, name);
    P->owner = saved;
    if (r < 0) return -1;
    P->name[r] = name, P->name_len[r] = len;
    *slot = r + 1;
    return r;
}

static void skip_space(parser *P, int newline_ok) {
    while (P->p < P->end) {
        const char c = *P->p;
        if (c == ' ' || c == '\t' || c == '\r' || (c == '\n' && newline_ok)) {
            P->p++;
        } else if (c == '#') {
            while (P->p < P->end && *P->p != '\n') P->p++;
        } else {
            break;
        }
    }
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One character of a literal or class (an escape or UTF-8); -1 after an error. */
static int64_t parse_char(parser *P, const char *what) {
    const char *at = P->p;
    if (P->p >= P->end) {
        fail(P, at, "unterminated %s", what);
        return -1;
    }
    uint8_t b = (uint8_t)*P->p++;
    if (b == '\\') {
        if (P->p >= P->end) {
            fail(P, at, "unterminated %s", what);
            return -1;
        }
        const char e = *P->p++;
        switch (e) {
        case 'n': return '\n';
        case 't': return '\t';
        case 'r': return '\r';
        case '\\': case '"': case '[': case ']': case '-': return e;
        case 'x': case 'u': case 'U': {
            const int digits = e == 'x' ? 2 : e == 'u' ? 4 : 8;
            uint32_t v = 0;
            for (int i = 0; i < digits; i++) {
                const int h = P->p < P->end ? hexval(*P->p) : -1;
                if (h < 0) {
                    fail(P, at, "bad escape: \\%c needs %d hex digits", e, digits);
                    return -1;
                }
                v = v * 16 + (uint32_t)h, P->p++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) {
                fail(P, at, "bad escape: U+%X is not a character", v);
                return -1;
            }
            return v;
        }
        default:
            if ((uint8_t)e >= 0x20 && (uint8_t)e < 0x7F) fail(P, at, "bad escape '\\%c'", e);
            else fail(P, at, "bad escape (byte 0x%02X after '\\')", (uint8_t)e);
            return -1;
        }
    }
    if (b < 0x80) return b;
    const int len = b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    uint32_t v = len == 2 ? b & 0x1F : len == 3 ? b & 0x0F : b & 0x07;
    uint8_t lo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80, hi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
    for (int k = 1; k < len; k++, lo = 0x80, hi = 0xBF) {
        if (P->p >= P->end || (uint8_t)*P->p < lo || (uint8_t)*P->p > hi) {
            fail(P, at, "invalid UTF-8");
            return -1;
        }
        v = v << 6 | ((uint8_t)*P->p++ & 0x3F);
    }
    if (!len) {
        fail(P, at, "invalid UTF-8");
        return -1;
    }
    return v;
}

static int by_lo(const void *a, const void *b) {
    const grange *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* A class of the ranges r[0 .. n) (sorted and merged here) as an element. */
static int add_class(parser *P, seq *out, grange *r, int n, int neg) {
    gbnf *G = P->G;
    if (n) qsort(r, (size_t)n, sizeof *r, by_lo);
    int m = 0;
    for (int i = 0; i < n; i++) {
        if (m && r[i].lo <= r[m - 1].hi + 1) {
            if (r[i].hi > r[m - 1].hi) r[m - 1].hi = r[i].hi;
        } else {
            r[m++] = r[i];
        }
    }
    if (grow((void **)&G->ranges, &G->cap_ranges, G->n_ranges + m, sizeof(grange), GB_MAX_ELEMS)) {
        fail(P, P->p, "grammar too large (more than %d class ranges)", GB_MAX_ELEMS);
        return -1;
    }
    if (m) memcpy(G->ranges + G->n_ranges, r, sizeof(grange) * (size_t)m);
    const gelem e = {neg ? GE_NCLASS : GE_CLASS, G->n_ranges, m};
    G->n_ranges += m;
    return seq_add(P, out, e);
}

static int parse_class(parser *P, seq *out) {
    const char *at = P->p++;
    const int neg = P->p < P->end && *P->p == '^';
    P->p += neg;
    grange *r = NULL;
    int n = 0, cap = 0, rc = -1;
    while (!P->failed) {
        if (P->p >= P->end) {
            fail(P, at, "unterminated character class");
            break;
        }
        if (*P->p == ']') {
            P->p++;
            if (!n && !neg) fail(P, at, "empty character class");
            else rc = add_class(P, out, r, n, neg);
            break;
        }
        const char *cat = P->p;
        int64_t lo = parse_char(P, "character class"), hi = lo;
        if (lo >= 0 && P->p + 1 < P->end && *P->p == '-' && P->p[1] != ']') {
            P->p++;
            hi = parse_char(P, "character class");
            if (hi >= 0 && hi < lo) fail(P, cat, "bad range: U+%X is above U+%X", (uint32_t)lo, (uint32_t)hi);
        }
        if (P->failed) break;
        if (grow((void **)&r, &cap, n + 1, sizeof(grange), GB_MAX_ELEMS)) {
            fail(P, cat, "character class too large");
            break;
        }
        r[n++] = (grange){(uint32_t)lo, (uint32_t)hi};
    }
    free(r);
    return rc;
}

static int parse_literal(parser *P, seq *out) {
    const char *at = P->p++;
    while (!P->failed) {
        if (P->p >= P->end) {
            fail(P, at, "unterminated literal");
            return -1;
        }
        if (*P->p == '"') {
            P->p++;
            return 0;
        }
        const int64_t c = parse_char(P, "literal");
        if (c < 0) break;
        grange r = {(uint32_t)c, (uint32_t)c};
        if (add_class(P, out, &r, 1, 0)) break;
    }
    return -1;
}

static int parse_alternatives(parser *P, int rule, int nested);

/* The rule r's alternatives, committed to the grammar. */
static int commit(parser *P, int r, seq *alts, int n) {
    gbnf *G = P->G;
    int elems = G->n_elems;
    for (int i = 0; i < n; i++) elems += alts[i].n + 1;
    if (elems > GB_MAX_ELEMS || grow((void **)&G->elems, &G->cap_elems, elems, sizeof(gelem), GB_MAX_ELEMS) ||
        grow((void **)&G->alts, &G->cap_alts, G->n_alts + n, sizeof(int32_t), GB_MAX_ELEMS)) {
        fail(P, P->p, "grammar too large (more than %d elements)", GB_MAX_ELEMS);
        return -1;
    }
    G->rules[r] = (grule){G->n_alts, n};
    for (int i = 0; i < n; i++) {
        G->alts[G->n_alts++] = G->n_elems;
        if (alts[i].n) memcpy(G->elems + G->n_elems, alts[i].e, sizeof(gelem) * (size_t)alts[i].n);
        G->n_elems += alts[i].n;
        G->elems[G->n_elems++] = (gelem){GE_END, 0, 0};
    }
    P->defined[r] = 1;
    return 0;
}

/* A number of {m,n}; -1 when there is none. */
static int parse_bound(parser *P) {
    if (P->p >= P->end || *P->p < '0' || *P->p > '9') return -1;
    const char *at = P->p;
    long v = 0;
    while (P->p < P->end && *P->p >= '0' && *P->p <= '9') {
        v = v * 10 + (*P->p++ - '0');
        if (v > GB_MAX_REPEAT) {
            fail(P, at, "repetition bound above %d", GB_MAX_REPEAT);
            return -2;
        }
    }
    return (int)v;
}

/* The repetition at P->p applied to the item out->e[start ..]. */
static int repeat(parser *P, seq *out, int start) {
    const char *at = P->p;
    const char op = *P->p++;
    int m = 0, n = -1; /* n -1: no maximum */
    if (op == '+') m = 1;
    else if (op == '?') n = 1;
    else if (op == '{') {
        while (P->p < P->end && (*P->p == ' ' || *P->p == '\t')) P->p++;
        m = parse_bound(P);
        if (m == -1 && P->p < P->end && *P->p == ',') m = 0; /* {,n}: up to n */
        while (P->p < P->end && (*P->p == ' ' || *P->p == '\t')) P->p++;
        n = m;
        if (m >= 0 && P->p < P->end && *P->p == ',') {
            P->p++;
            while (P->p < P->end && (*P->p == ' ' || *P->p == '\t')) P->p++;
            n = parse_bound(P);
            while (P->p < P->end && (*P->p == ' ' || *P->p == '\t')) P->p++;
        }
        if (P->failed) return -1;
        if (m < 0 || n < -1 || P->p >= P->end || *P->p != '}') {
            fail(P, at, "bad repetition: expected {m}, {m,} or {m,n}");
            return -1;
        }
        P->p++;
        if (n >= 0 && n < m) {
            fail(P, at, "bad repetition: {%d,%d} has its maximum below its minimum", m, n);
            return -1;
        }
    }
    const int len = out->n - start;
    if (!len) return 0; /* "" repeated is still nothing */
    gelem x = out->e[start];
    if (len > 1) { /* the item becomes one rule, referenced by every copy */
        const int r = new_rule(P, at);
        seq one = {out->e + start, len, len};
        if (r < 0 || commit(P, r, &one, 1)) return -1;
        x = (gelem){GE_REF, r, 0};
    }
    out->n = start;
    for (int i = 0; i < m; i++)
        if (seq_add(P, out, x)) return -1;
    if (n < 0) { /* R ::= x R | */
        const int r = new_rule(P, at);
        if (r < 0) return -1;
        seq alts[2] = {{NULL, 0, 0}, {NULL, 0, 0}};
        gelem body[2] = {x, {GE_REF, r, 0}};
        alts[0] = (seq){body, 2, 2};
        return commit(P, r, alts, 2) || seq_add(P, out, (gelem){GE_REF, r, 0}) ? -1 : 0;
    }
    int next = -1; /* O(k) ::= x O(k - 1) | , O(1) ::= x | */
    for (int k = 1; k <= n - m; k++) {
        const int r = new_rule(P, at);
        if (r < 0) return -1;
        gelem body[2] = {x, {GE_REF, next, 0}};
        seq alts[2] = {{body, next < 0 ? 1 : 2, 2}, {NULL, 0, 0}};
        if (commit(P, r, alts, 2)) return -1;
        next = r;
    }
    return next >= 0 ? seq_add(P, out, (gelem){GE_REF, next, 0}) : 0;
}

static int parse_sequence(parser *P, seq *out, int nested) {
    while (!P->failed && P->p < P->end) {
        const int start = out->n;
        const char c = *P->p, *at = P->p;
        if (c == '"') {
            if (parse_literal(P, out)) return -1;
        } else if (c == '[') {
            if (parse_class(P, out)) return -1;
        } else if (c == '.') {
            P->p++;
            if (add_class(P, out, NULL, 0, 1)) return -1;
        } else if (is_word(c)) {
            while (P->p < P->end && is_word(*P->p)) P->p++;
            const int r = named_rule(P, at, (int)(P->p - at));
            if (r < 0 || seq_add(P, out, (gelem){GE_REF, r, 0})) return -1;
        } else if (c == '(') {
            if (P->depth >= GB_MAX_DEPTH) {
                fail(P, at, "groups nested deeper than %d", GB_MAX_DEPTH);
                return -1;
            }
            P->p++;
            skip_space(P, 1);
            const int r = new_rule(P, at);
            P->depth++;
            if (r < 0 || parse_alternatives(P, r, 1)) return -1;
            P->depth--;
            if (P->p >= P->end || *P->p != ')') {
                fail(P, at, "unclosed group: expected ')'");
                return -1;
            }
            P->p++;
            if (seq_add(P, out, (gelem){GE_REF, r, 0})) return -1;
        } else {
            break;
        }
        skip_space(P, nested);
        if (P->p < P->end && (*P->p == '*' || *P->p == '+' || *P->p == '?' || *P->p == '{')) {
            if (repeat(P, out, start)) return -1;
            skip_space(P, nested);
        }
    }
    return P->failed ? -1 : 0;
}

static int parse_alternatives(parser *P, int rule, int nested) {
    seq *alts = NULL;
    int n = 0, cap = 0, rc = -1;
    for (;;) {
        if (grow((void **)&alts, &cap, n + 1, sizeof(seq), GB_MAX_ELEMS)) {
            fail(P, P->p, "grammar too large");
            break;
        }
        alts[n] = (seq){NULL, 0, 0};
        if (parse_sequence(P, &alts[n++], nested)) break;
        if (P->p < P->end && *P->p == '|') {
            P->p++;
            skip_space(P, 1);
            continue;
        }
        rc = commit(P, rule, alts, n);
        break;
    }
    for (int i = 0; i < n; i++) free(alts[i].e);
    free(alts);
    return rc;
}

/* Whether each rule may read nothing (a fixpoint). */
static void nullable(const gbnf *G, uint8_t *null) {
    memset(null, 0, (size_t)G->n_rules);
    for (int changed = 1; changed;) {
        changed = 0;
        for (int r = 0; r < G->n_rules; r++) {
            if (null[r]) continue;
            for (int a = 0; a < G->rules[r].n && !null[r]; a++) {
                const gelem *e = G->elems + G->alts[G->rules[r].first + a];
                while (e->kind == GE_REF && null[e->a]) e++;
                if (e->kind == GE_END) null[r] = 1, changed = 1;
            }
        }
    }
}

/* A rule that reaches itself before reading a character, or -1: a depth-first walk over the references an
 * alternative makes before its first character (past rules that may read nothing). */
static int left_recursive(const gbnf *G, const uint8_t *null) {
    const int n = G->n_rules;
    uint8_t *color = calloc((size_t)n, 1); /* 1: on the walk's path, 2: done */
    struct frame {
        int r, a;
        const gelem *e; /* the next element of alternative a - 1 to look at; NULL: the next alternative */
    } *st = malloc(sizeof(struct frame) * (size_t)(n + 1));
    int found = -1;
    for (int r0 = 0; color && st && r0 < n && found < 0; r0++) {
        if (color[r0]) continue;
        int d = 0;
        st[d++] = (struct frame){r0, 0, NULL};
        color[r0] = 1;
        while (d && found < 0) {
            struct frame *f = &st[d - 1];
            const grule *R = &G->rules[f->r];
            if (!f->e) {
                if (f->a >= R->n) {
                    color[f->r] = 2, d--;
                    continue;
                }
                f->e = G->elems + G->alts[R->first + f->a++];
            }
            const gelem *e = f->e;
            if (e->kind != GE_REF) {
                f->e = NULL;
                continue;
            }
            const int s = e->a;
            f->e = null[s] ? e + 1 : NULL;
            if (color[s] == 1) {
                found = s;
            } else if (!color[s]) {
                color[s] = 1;
                st[d++] = (struct frame){s, 0, NULL};
            }
        }
    }
    free(color);
    free(st);
    return found;
}

int gbnf_compile(gbnf *G, const char *text, size_t len, char *err, size_t errcap) {
    memset(G, 0, sizeof *G);
    parser P = {.G = G, .s = text ? text : "", .err = err, .errcap = errcap, .owner = -1};
    P.p = P.s, P.end = P.s + (text ? len : 0);
    if (len > GB_MAX_BYTES) {
        snprintf(err, errcap, "grammar longer than %d bytes", GB_MAX_BYTES);
        return -1;
    }
    if (!(P.slot = calloc(SYM_SLOTS, sizeof(int32_t)))) {
        snprintf(err, errcap, "out of memory");
        return -1;
    }
    skip_space(&P, 1);
    while (!P.failed && P.p < P.end) {
        const char *at = P.p;
        while (P.p < P.end && is_word(*P.p)) P.p++;
        if (P.p == at) {
            fail(&P, at, "expected a rule name");
            break;
        }
        const int r = named_rule(&P, at, (int)(P.p - at));
        if (r < 0) break;
        if (P.defined[r]) {
            fail(&P, at, "rule '%.*s' defined twice", (int)(P.p - at), at);
            break;
        }
        P.where[r] = (int)(at - P.s);
        const int name_len = (int)(P.p - at);
        skip_space(&P, 0);
        if (P.end - P.p < 3 || memcmp(P.p, "::=", 3)) {
            fail(&P, P.p, "expected '::=' after '%.*s'", name_len > 40 ? 40 : name_len, at);
            break;
        }
        P.p += 3;
        skip_space(&P, 1);
        P.owner = r;
        if (parse_alternatives(&P, r, 0)) break;
        if (P.p < P.end && *P.p != '\n') {
            if (*P.p == ')') fail(&P, P.p, "unexpected ')'");
            else if ((uint8_t)*P.p >= 0x20 && (uint8_t)*P.p < 0x7F) fail(&P, P.p, "unexpected '%c'", *P.p);
            else fail(&P, P.p, "unexpected byte 0x%02X", (uint8_t)*P.p);
            break;
        }
        skip_space(&P, 1);
    }
    for (int r = 0; !P.failed && r < G->n_rules; r++)
        if (!P.defined[r]) fail(&P, P.s + P.where[r], "undefined rule '%.*s'", P.name_len[r], P.name[r]);
    if (!P.failed) {
        G->root = *name_slot(&P, "root", 4) - 1;
        if (G->root < 0) fail(&P, P.end, "no rule 'root' (the start rule)");
    }
    if (!P.failed) {
        uint8_t *null = malloc((size_t)G->n_rules);
        const int lr = null ? (nullable(G, null), left_recursive(G, null)) : -1;
        if (!null) fail(&P, P.s, "out of memory");
        else if (lr >= 0)
            fail(&P, P.s + P.where[lr],
                 "left recursion in rule '%.*s': it can come back to itself before reading a character",
                 P.name_len[lr], P.name[lr]);
        free(null);
    }
    free(P.slot);
    free(P.name);
    free(P.name_len);
    free(P.where);
    free(P.defined);
    if (!P.failed && gm_init(G)) fail(&P, P.s, "out of memory");
    if (P.failed) {
        gbnf_free(G);
        return -1;
    }
    return 0;
}

void gbnf_free(gbnf *G) {
    free(G->elems);
    free(G->ranges);
    free(G->alts);
    free(G->rules);
    free(G->work);
    memset(G, 0, sizeof *G);
}
