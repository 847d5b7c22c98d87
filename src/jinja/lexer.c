/* Jinja lexer: template text -> tokens, with Jinja2's whitespace control as
 * transformers configures it (trim_blocks, lstrip_blocks):
 *   - "{%-", "{{-", "{#-" strip all whitespace before the tag, "-%}", "-}}",
 *     "-#}" all whitespace after it;
 *   - trim_blocks: the first newline after a block or comment tag is removed
 *     (not after "}}"; "+%}" keeps it);
 *   - lstrip_blocks: spaces and tabs from the start of a line up to a block or
 *     comment tag are removed ("{%+" keeps them);
 *   - {% raw %}...{% endraw %} is data.
 * Inside a tag, "}}" and "%}" close it only outside brackets, so dict
 * literals such as {'a': {'b': 1}} work. String literals take Python's
 * escapes (Jinja decodes them with unicode-escape). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

/* ------------------------------------------------------------------ arena */

struct jarena_blk {
    jarena_blk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
};

void *ja_alloc(jarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    jarena_blk *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->next = a->head;
        b->used = 0;
        b->cap = cap;
        a->head = b;
    }
    void *p = b->mem + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void ja_free(jarena *a) {
    for (jarena_blk *b = a->head, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    a->head = NULL;
}

/* ------------------------------------------------------------------ lexer */

typedef struct {
    jarena *arena;
    const char *src;
    size_t n, pos;
    int line;
    jtok *t;
    size_t nt, cap;
    char *err;
    size_t errcap;
    int failed;
} lexer;

static int lfail(lexer *L, int line, const char *fmt, ...) {
    if (!L->failed) {
        va_list ap;
        va_start(ap, fmt);
        jerr_format(L->err, L->errcap, line, "syntax error: ", fmt, ap);
        va_end(ap);
    }
    L->failed = 1;
    return -1;
}

static jtok *emit(lexer *L, int type, int line) {
    if (L->nt == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        jtok *t = realloc(L->t, cap * sizeof *t);
        if (!t) return lfail(L, line, "out of memory"), NULL;
        L->t = t;
        L->cap = cap;
    }
    jtok *t = &L->t[L->nt++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    t->line = line;
    return t;
}

static int count_nl(const char *s, size_t n) {
    int k = 0;
    for (size_t i = 0; i < n; i++) k += s[i] == '\n';
    return k;
}

/* length of the run of (Python) whitespace at s[0..n) */
static size_t ws_run(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        uint32_t cp = ju_decode(s, n, &j);
        if (!ju_isspace(cp)) break;
        i = j;
    }
    return i;
}

/* length of s[0..n) without its trailing whitespace (Python str.rstrip) */
static size_t rstrip_len(const char *s, size_t n) {
    size_t e = n;
    while (e > 0) {
        size_t k = e - 1;
        while (k > 0 && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        size_t j = k;
        if (!ju_isspace(ju_decode(s, e, &j))) break;
        e = k;
    }
    return e;
}

/* Emits the data before a tag with the tag's left-side whitespace rules.
 * sign: '-', '+' or 0; is_var: "{{" (lstrip_blocks does not apply). */
static void emit_data(lexer *L, size_t from, size_t to, int sign, int is_var, int line_starting) {
    const char *s = L->src + from;
    size_t n = to - from;
    if (sign == '-') {
        n = rstrip_len(s, n);
    } else if (sign != '+' && !is_var) {
        size_t l = n;
        while (l > 0 && s[l - 1] != '\n') l--;
        if ((l > 0 || line_starting) && l < n && ws_run(s + l, n - l) == n - l) n = l;
    }
    if (n) {
        jtok *t = emit(L, JT_DATA, L->line);
        if (t) {
            t->s = s;
            t->n = n;
        }
    }
    L->line += count_nl(L->src + from, to - from);
}

/* After a closing delimiter at L->pos: "-" strips following whitespace,
 * trim (block and comment tags) removes one newline. */
static void after_close(lexer *L, int minus, int plus, int trim) {
    if (minus) {
        size_t k = ws_run(L->src + L->pos, L->n - L->pos);
        L->line += count_nl(L->src + L->pos, k);
        L->pos += k;
    } else if (trim && !plus && L->pos < L->n && L->src[L->pos] == '\n') {
        L->pos++;
        L->line++;
    }
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static size_t put_cp(char *o, uint32_t cp) {
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD; /* a lone surrogate has no UTF-8 form */
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | cp >> 6); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* A string literal at L->pos (quote q); decodes Python's escapes. */
static int lex_string(lexer *L) {
    char q = L->src[L->pos];
    size_t i = L->pos + 1, start = i;
    while (i < L->n && L->src[i] != q) i += L->src[i] == '\\' ? 2 : 1;
    if (i >= L->n) return lfail(L, L->line, "unterminated string literal");
    size_t end = i;
    char *o = ja_alloc(L->arena, end - start + 1);
    if (!o) return lfail(L, L->line, "out of memory");
    size_t k = 0;
    const char *s = L->src;
    for (i = start; i < end; i++) {
        if (s[i] != '\\') { o[k++] = s[i]; continue; }
        char e = s[++i];
        uint32_t cp;
        int nd = 0;
        switch (e) {
        case '\n': break; /* line continuation */
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case 'a': o[k++] = '\a'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'n': o[k++] = '\n'; break;
        case 'r': o[k++] = '\r'; break;
        case 't': o[k++] = '\t'; break;
        case 'v': o[k++] = '\v'; break;
        case 'N': return lfail(L, L->line, "\\N{...} escapes are not supported");
        case 'x': nd = 2; goto hex;
        case 'u': nd = 4; goto hex;
        case 'U': nd = 8;
        hex:
            cp = 0;
            for (int d = 0; d < nd; d++) {
                int h = i + 1 + d < end ? hexval(s[i + 1 + d]) : -1;
                if (h < 0) return lfail(L, L->line, "truncated \\%c escape in a string literal", e);
                cp = cp * 16 + (uint32_t)h;
            }
            if (cp > 0x10FFFF) return lfail(L, L->line, "illegal Unicode character in a string literal");
            i += nd;
            k += put_cp(o + k, cp);
            break;
        default:
            if (e >= '0' && e <= '7') {
                cp = 0;
                int d = 0;
                while (d < 3 && i < end && s[i] >= '0' && s[i] <= '7') cp = cp * 8 + (uint32_t)(s[i++] - '0'), d++;
                i--;
                k += put_cp(o + k, cp);
            } else { /* unknown escapes stay as written */
                o[k++] = '\\';
                o[k++] = e;
            }
        }
    }
    jtok *t = emit(L, JT_STRING, L->line);
    if (!t) return -1;
    t->s = o;
    t->n = k;
    L->line += count_nl(s + start, end - start);
    L->pos = end + 1;
    return 0;
}

static int isdig(char c) { return c >= '0' && c <= '9'; }

/* digits with single underscores between them: returns the length */
static size_t digits(const char *s, size_t n, int base) {
    size_t i = 0;
    while (i < n) {
        int v = hexval(s[i]);
        if (v >= 0 && v < base) { i++; continue; }
        if (s[i] == '_' && i > 0 && i + 1 < n && hexval(s[i + 1]) >= 0 && hexval(s[i + 1]) < base) { i++; continue; }
        break;
    }
    return i;
}

/* A number at L->pos; after '.', only an integer (foo.0.1 is two lookups). */
static int lex_number(lexer *L, int after_dot) {
    const char *s = L->src + L->pos;
    size_t n = L->n - L->pos, len = 0;
    int is_float = 0, base = 10;
    if (s[0] == '0' && n > 2 && strchr("bBoOxX", s[1])) {
        base = s[1] == 'b' || s[1] == 'B' ? 2 : s[1] == 'o' || s[1] == 'O' ? 8 : 16;
        size_t k = 2 + (s[2] == '_');
        size_t d = digits(s + k, n - k, base);
        if (d) len = k + d;
        else base = 10;
    }
    if (base == 10) {
        len = digits(s, n, 10);
        if (!after_dot) {
            size_t m = len;
            if (m + 1 < n && s[m] == '.' && isdig(s[m + 1])) {
                m += 1 + digits(s + m + 1, n - m - 1, 10);
                is_float = 1;
            }
            if (m < n && (s[m] == 'e' || s[m] == 'E')) {
                size_t k = m + 1;
                if (k < n && (s[k] == '+' || s[k] == '-')) k++;
                size_t d = k < n && isdig(s[k]) ? digits(s + k, n - k, 10) : 0;
                if (d) m = k + d, is_float = 1;
            }
            if (is_float) len = m;
        }
        /* Jinja's integers are [1-9](_?\d)* or 0(_?0)*: "012" lexes as 0, 12 */
        if (!is_float && s[0] == '0') {
            size_t z = 1;
            while (z < len && (s[z] == '0' || s[z] == '_')) z++;
            while (z > 1 && s[z - 1] == '_') z--;
            len = z;
        }
    }
    jtok *t = emit(L, is_float ? JT_FLOAT : JT_INT, L->line);
    if (!t) return -1;
    int ok = is_float ? ju_parse_float(s, len, &t->f) : ju_parse_int(base == 10 ? s : s + 2, base == 10 ? len : len - 2, base, &t->i);
    if (!ok) return lfail(L, L->line, "number out of range");
    L->pos += len;
    return 0;
}

static const struct { const char *s; uint8_t op; } OPS[] = {
    {"//", OP_FLOORDIV}, {"**", OP_POW}, {"==", OP_EQ}, {"!=", OP_NE}, {"<=", OP_LE}, {">=", OP_GE},
    {"+", OP_ADD}, {"-", OP_SUB}, {"*", OP_MUL}, {"/", OP_DIV}, {"%", OP_MOD}, {"~", OP_TILDE},
    {"(", OP_LPAREN}, {")", OP_RPAREN}, {"[", OP_LBRACKET}, {"]", OP_RBRACKET}, {"{", OP_LBRACE},
    {"}", OP_RBRACE}, {",", OP_COMMA}, {".", OP_DOT}, {":", OP_COLON}, {"|", OP_PIPE}, {"=", OP_ASSIGN},
    {"<", OP_LT}, {">", OP_GT}, {";", OP_SEMI},
};

static int is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* The inside of "{{ ... }}" (is_var) or "{% ... %}", up to and including
 * the closing delimiter. */
static int lex_tag(lexer *L, int is_var, int open_line) {
    char stack[64];
    int depth = 0;
    const char *s = L->src;
    char close = is_var ? '}' : '%';
    for (;;) {
        size_t w = ws_run(s + L->pos, L->n - L->pos);
        L->line += count_nl(s + L->pos, w);
        L->pos += w;
        if (L->pos >= L->n)
            return lfail(L, open_line, "unexpected end of template, expected '%s'", is_var ? "}}" : "%}");
        size_t p = L->pos;
        if (depth == 0) {
            int minus = s[p] == '-', plus = s[p] == '+' && !is_var;
            size_t q = p + minus + plus;
            if (q + 1 < L->n && s[q] == close && s[q + 1] == '}') {
                if (!emit(L, is_var ? JT_VAR_END : JT_BLOCK_END, L->line)) return -1;
                L->pos = q + 2;
                after_close(L, minus, plus, !is_var);
                return 0;
            }
        }
        char ch = s[p];
        if (ch == '\'' || ch == '"') {
            if (lex_string(L)) return -1;
            continue;
        }
        int after_dot = L->nt > 0 && L->t[L->nt - 1].type == JT_OP && L->t[L->nt - 1].op == OP_DOT;
        if (isdig(ch)) {
            if (lex_number(L, after_dot)) return -1;
            continue;
        }
        if (is_name_start(ch)) {
            size_t e = p + 1;
            while (e < L->n && (is_name_start(s[e]) || isdig(s[e]))) e++;
            jtok *t = emit(L, JT_NAME, L->line);
            if (!t) return -1;
            t->s = s + p;
            t->n = e - p;
            L->pos = e;
            continue;
        }
        size_t k;
        for (k = 0; k < sizeof OPS / sizeof OPS[0]; k++) {
            size_t len = strlen(OPS[k].s);
            if (p + len <= L->n && !memcmp(s + p, OPS[k].s, len)) break;
        }
        if (k == sizeof OPS / sizeof OPS[0]) {
            if ((unsigned char)ch >= 0x20 && (unsigned char)ch < 0x7f) return lfail(L, L->line, "unexpected char '%c'", ch);
            return lfail(L, L->line, "unexpected byte 0x%02x", (unsigned char)ch);
        }
        uint8_t op = OPS[k].op;
        if (op == OP_LPAREN || op == OP_LBRACKET || op == OP_LBRACE) {
            if (depth == (int)sizeof stack) return lfail(L, L->line, "brackets nested too deeply");
            stack[depth++] = op == OP_LPAREN ? ')' : op == OP_LBRACKET ? ']' : '}';
        } else if (op == OP_RPAREN || op == OP_RBRACKET || op == OP_RBRACE) {
            if (!depth) return lfail(L, L->line, "unexpected '%c'", ch);
            if (stack[--depth] != ch) return lfail(L, L->line, "unexpected '%c', expected '%c'", ch, stack[depth]);
        }
        jtok *t = emit(L, JT_OP, L->line);
        if (!t) return -1;
        t->op = op;
        L->pos = p + strlen(OPS[k].s);
    }
}

/* Whether the tag whose inside starts at p is "word" alone (as in raw and
 * endraw tags): then *end is just past its closing delimiter and *minus /
 * *plus tell that delimiter's sign. */
static int match_tag_word(const char *s, size_t n, size_t p, const char *word, size_t *end, int *minus, int *plus) {
    size_t w = strlen(word);
    while (p < n && (s[p] == ' ' || s[p] == '\t' || s[p] == '\n' || s[p] == '\r')) p++;
    if (p + w > n || memcmp(s + p, word, w)) return 0;
    p += w;
    while (p < n && (s[p] == ' ' || s[p] == '\t' || s[p] == '\n' || s[p] == '\r')) p++;
    *minus = p < n && s[p] == '-';
    *plus = p < n && s[p] == '+';
    p += (size_t)(*minus + *plus);
    if (p + 2 > n || s[p] != '%' || s[p + 1] != '}') return 0;
    *end = p + 2;
    return 1;
}

static int lex_raw(lexer *L, size_t body, int minus, int plus, int open_line) {
    L->pos = body;
    after_close(L, minus, plus, 1);
    const char *s = L->src;
    for (size_t p = L->pos; p + 1 < L->n; p++) {
        if (s[p] != '{' || s[p + 1] != '%') continue;
        size_t q = p + 2, end;
        int sign = q < L->n && (s[q] == '-' || s[q] == '+') ? s[q++] : 0, m2, p2;
        if (!match_tag_word(s, L->n, q, "endraw", &end, &m2, &p2)) continue;
        emit_data(L, L->pos, p, sign, 0, 0);
        L->line += count_nl(s + p, end - p);
        L->pos = end;
        after_close(L, m2, p2, 1);
        return 0;
    }
    return lfail(L, open_line, "missing end of raw directive");
}

int jinja_lex(jarena *a, const char *src, size_t n, jtok **toks, size_t *ntoks, char *err, size_t errcap) {
    lexer L = {a, src, n, 0, 1, NULL, 0, 0, err, errcap, 0};
    int line_starting = 1;
    while (L.pos < n && !L.failed) {
        const char *s = src + L.pos;
        const char *m = s;
        size_t rest = n - L.pos;
        while ((m = memchr(m, '{', rest - (size_t)(m - s))) && (size_t)(m - s) + 1 < rest &&
               m[1] != '{' && m[1] != '%' && m[1] != '#')
            m++;
        if (!m || (size_t)(m - s) + 1 >= rest) {
            emit_data(&L, L.pos, n, 0, 1, 0);
            break;
        }
        size_t at = (size_t)(m - src), p = at + 2;
        char kind = m[1];
        int sign = p < n && (src[p] == '-' || src[p] == '+') ? src[p] : 0;
        if (sign) p++;
        size_t raw_end;
        int rminus, rplus;
        int is_raw = kind == '%' && match_tag_word(src, n, p, "raw", &raw_end, &rminus, &rplus);
        emit_data(&L, L.pos, at, sign, kind == '{', line_starting);
        int open_line = L.line;
        if (kind == '#') {
            const char *e = NULL;
            for (size_t q = p; q + 1 < n; q++)
                if (src[q] == '#' && src[q + 1] == '}') {
                    e = src + q;
                    break;
                }
            if (!e) return free(L.t), lfail(&L, open_line, "missing end of comment tag");
            size_t ei = (size_t)(e - src);
            int minus = ei > p && src[ei - 1] == '-', plus = ei > p && src[ei - 1] == '+';
            L.line += count_nl(src + p, ei - p);
            L.pos = ei + 2;
            after_close(&L, minus, plus, 1);
        } else if (is_raw) {
            if (lex_raw(&L, raw_end, rminus, rplus, open_line)) break;
        } else {
            if (!emit(&L, kind == '{' ? JT_VAR_BEGIN : JT_BLOCK_BEGIN, L.line)) break;
            L.pos = p;
            if (lex_tag(&L, kind == '{', open_line)) break;
        }
        line_starting = L.pos > 0 && src[L.pos - 1] == '\n';
    }
    if (!L.failed && emit(&L, JT_EOF, L.line)) {
        *toks = L.t;
        *ntoks = L.nt;
        return 0;
    }
    free(L.t);
    return -1;
}
