/* Jinja values with Python's semantics: allocation and reference counting,
 * truth, equality, ordering, iteration, str() and repr().
 *
 * Every heap object is on the render's list of live objects: an object whose
 * count drops to zero is freed at once (its children through a work list,
 * not recursion, so long chains cannot exhaust the stack), and whatever is
 * left at the end, cycles included, is freed by the render. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <unicode/uchar.h>

#include "jinja_impl.h"

void jerr_format(char *err, size_t cap, int line, const char *kind, const char *fmt, va_list ap) {
    int k = snprintf(err, cap, "line %d: %s", line, kind);
    if (k >= 0 && (size_t)k < cap) vsnprintf(err + k, cap - (size_t)k, fmt, ap);
    for (char *p = err; *p; p++) /* one line, whatever the message holds */
        if (*p == '\n' || *p == '\r') *p = ' ';
}

jv jerr(jctx *c, const char *fmt, ...) {
    if (!c->failed) {
        va_list ap;
        va_start(ap, fmt);
        jerr_format(c->err, c->errcap, c->line, "", fmt, ap);
        va_end(ap);
        c->failed = 1;
    }
    return jv_none();
}

jv jerr_undef(jctx *c, jv u) {
    if (u.o) return jerr(c, "%.*s", (int)JSTR(u)->len, JSTR(u)->s);
    return jerr(c, "value is undefined");
}

int jstep(jctx *c) {
    if (++c->steps <= c->max_steps) return 1;
    jerr(c, "template ran too long (over %ld loop iterations and calls)", c->max_steps);
    return 0;
}

/* ------------------------------------------------------------ allocation */

void *jobj_new(jctx *c, uint8_t kind, size_t bytes) {
    if (c->mem + bytes > c->max_mem) {
        jerr(c, "template uses too much memory (over %zu MiB)", c->max_mem >> 20);
        return NULL;
    }
    jobj *o = calloc(1, bytes);
    if (!o) {
        jerr(c, "out of memory");
        return NULL;
    }
    o->bytes = bytes;
    o->rc = 1;
    o->kind = kind;
    o->depth = 1;
    o->next = c->live.next;
    o->prev = &c->live;
    c->live.next->prev = o;
    c->live.next = o;
    c->mem += bytes;
    return o;
}

int jmem_grow(jctx *c, jobj *o, void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 1;
    size_t nc = *cap ? *cap : 4;
    while (nc < need) nc *= 2;
    size_t add = (nc - *cap) * elem;
    if (c->mem + add > c->max_mem) {
        jerr(c, "template uses too much memory (over %zu MiB)", c->max_mem >> 20);
        return 0;
    }
    void *q = realloc(*p, nc * elem);
    if (!q) {
        jerr(c, "out of memory");
        return 0;
    }
    *p = q;
    *cap = nc;
    c->mem += add;
    o->bytes += add;
    return 1;
}

static void free_obj(jctx *c, jobj *o) {
    switch (o->kind) {
    case JV_LIST: free(((jlist *)o)->v); break;
    case JV_DICT: case JV_NS: free(((jdict *)o)->k); free(((jdict *)o)->v); break;
    case JV_SCOPE: free(((jscope *)o)->name); free(((jscope *)o)->nlen); free(((jscope *)o)->v); break;
    default: break;
    }
    c->mem -= o->bytes;
    free(o);
}

static void unlink_obj(jobj *o) {
    o->prev->next = o->next;
    o->next->prev = o->prev;
}

static void release(jobj **dying, jv v) {
    if (!jv_heap(v) || --v.o->rc > 0) return;
    unlink_obj(v.o);
    v.o->next = *dying;
    *dying = v.o;
}

void jv_drop(jctx *c, jv v) {
    jobj *dying = NULL;
    release(&dying, v);
    while (dying) {
        jobj *o = dying;
        dying = o->next;
        switch (o->kind) {
        case JV_LIST:
            for (size_t i = 0; i < ((jlist *)o)->n; i++) release(&dying, ((jlist *)o)->v[i]);
            break;
        case JV_DICT: case JV_NS:
            for (size_t i = 0; i < ((jdict *)o)->n; i++) {
                release(&dying, ((jdict *)o)->k[i]);
                release(&dying, ((jdict *)o)->v[i]);
            }
            break;
        case JV_SCOPE: {
            jscope *s = (jscope *)o;
            for (size_t i = 0; i < s->n; i++) release(&dying, s->v[i]);
            if (s->parent) release(&dying, (jv){JV_SCOPE, {.o = &s->parent->h}});
            break;
        }
        case JV_LOOP: release(&dying, ((jloop *)o)->items); break;
        case JV_FUNC: {
            jfunc *f = (jfunc *)o;
            release(&dying, f->self);
            release(&dying, f->caller);
            if (f->closure) release(&dying, (jv){JV_SCOPE, {.o = &f->closure->h}});
            break;
        }
        default: break;
        }
        free_obj(c, o);
    }
}

/* ---------------------------------------------------------- constructors */

jv jv_str(jctx *c, const char *s, size_t n) {
    jstr *o = jobj_new(c, JV_STR, sizeof *o + n + 1);
    if (!o) return jv_none();
    memcpy(o->s, s, n);
    o->s[n] = 0;
    o->len = n;
    o->ncp = ju_ncp(s, n);
    return (jv){JV_STR, {.o = &o->h}};
}

jv jv_cstr(jctx *c, const char *s) { return jv_str(c, s, strlen(s)); }

jv jv_undef_msg(jctx *c, const char *fmt, ...) {
    char m[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    jv s = jv_cstr(c, m);
    if (s.t != JV_STR) return jv_undef();
    s.t = JV_UNDEF;
    return s;
}

jv jv_list(jctx *c, size_t cap) {
    jlist *o = jobj_new(c, JV_LIST, sizeof *o);
    if (!o) return jv_none();
    jv v = {JV_LIST, {.o = &o->h}};
    if (cap && !jmem_grow(c, &o->h, (void **)&o->v, &o->cap, cap, sizeof(jv))) {
        jv_drop(c, v);
        return jv_none();
    }
    return v;
}

static uint8_t child_depth(jv v) { return v.t == JV_LIST || v.t == JV_DICT ? v.o->depth : 0; }

/* containers deeper than JMAX_NEST are refused so that every recursion over
 * values (equality, repr, tojson) is bounded */
static int nest(jctx *c, jobj *o, jv item) {
    uint8_t d = child_depth(item);
    if (d + 1 > o->depth) o->depth = (uint8_t)(d + 1);
    if (o->depth > JMAX_NEST) {
        jerr(c, "lists or dicts nested too deeply (over %d levels)", JMAX_NEST);
        return 0;
    }
    return 1;
}

int jlist_push(jctx *c, jv list, jv item) {
    jlist *l = JLIST(list);
    if (c->failed || !nest(c, &l->h, item) || !jmem_grow(c, &l->h, (void **)&l->v, &l->cap, l->n + 1, sizeof(jv))) {
        jv_drop(c, item);
        return 0;
    }
    l->v[l->n++] = item;
    return 1;
}

jv jv_dict(jctx *c, uint8_t kind) {
    jdict *o = jobj_new(c, kind, sizeof *o);
    if (!o) return jv_none();
    return (jv){kind, {.o = &o->h}};
}

jv *jdict_get(jv dict, jv key) {
    jdict *d = JDICT(dict);
    for (size_t i = 0; i < d->n; i++)
        if (jv_eq(d->k[i], key)) return &d->v[i];
    return NULL;
}

jv *jdict_gets(jv dict, const char *s, size_t n) {
    jdict *d = JDICT(dict);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && JSTR(d->k[i])->len == n && !memcmp(JSTR(d->k[i])->s, s, n)) return &d->v[i];
    return NULL;
}

int jdict_set(jctx *c, jv dict, jv key, jv val) {
    if (c->failed) {
        jv_drop(c, key);
        jv_drop(c, val);
        return 0;
    }
    jdict *d = JDICT(dict);
    jv *slot = jdict_get(dict, key);
    if (slot && !c->failed && (dict.t == JV_NS || nest(c, &d->h, val))) {
        jv_drop(c, key);
        jv old = *slot;
        *slot = val;
        jv_drop(c, old);
        return 1;
    }
    size_t cap = d->cap;
    if (slot || c->failed || (dict.t != JV_NS && (!nest(c, &d->h, key) || !nest(c, &d->h, val))) ||
        !jmem_grow(c, &d->h, (void **)&d->k, &cap, d->n + 1, sizeof(jv)) ||
        !jmem_grow(c, &d->h, (void **)&d->v, &d->cap, d->n + 1, sizeof(jv))) {
        jv_drop(c, key);
        jv_drop(c, val);
        return 0;
    }
    d->k[d->n] = key;
    d->v[d->n++] = val;
    return 1;
}

jv jv_scope(jctx *c, jscope *parent) {
    jscope *s = jobj_new(c, JV_SCOPE, sizeof *s);
    if (!s) return jv_none();
    s->parent = parent;
    if (parent) parent->h.rc++;
    return (jv){JV_SCOPE, {.o = &s->h}};
}

int jscope_set(jctx *c, jscope *s, const char *name, size_t n, jv val) {
    for (size_t i = 0; i < s->n; i++)
        if (s->nlen[i] == n && !memcmp(s->name[i], name, n)) {
            jv old = s->v[i];
            s->v[i] = val;
            jv_drop(c, old);
            return 1;
        }
    size_t c1 = s->cap, c2 = s->cap;
    if (!jmem_grow(c, &s->h, (void **)&s->name, &c1, s->n + 1, sizeof *s->name) ||
        !jmem_grow(c, &s->h, (void **)&s->nlen, &c2, s->n + 1, sizeof *s->nlen) ||
        !jmem_grow(c, &s->h, (void **)&s->v, &s->cap, s->n + 1, sizeof *s->v)) {
        jv_drop(c, val);
        return 0;
    }
    s->name[s->n] = name;
    s->nlen[s->n] = n;
    s->v[s->n++] = val;
    return 1;
}

jv *jscope_find(jscope *s, const char *name, size_t n) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->nlen[i] == n && !memcmp(s->name[i], name, n)) return &s->v[i];
    return NULL;
}

/* ------------------------------------------------------------- semantics */

int jv_is_num(jv v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
double jv_num(jv v) { return v.t == JV_FLOAT ? v.f : (double)v.i; }

int jv_truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF: case JV_NONE: return 0;
    case JV_BOOL: case JV_INT: return v.i != 0;
    case JV_FLOAT: return v.f != 0.0;
    case JV_STR: return JSTR(v)->len > 0;
    case JV_LIST: return JLIST(v)->n > 0;
    case JV_DICT: return JDICT(v)->n > 0;
    default: return 1;
    }
}

const char *jv_typename(jv v) {
    static const char *const names[] = {"Undefined", "NoneType", "bool", "int", "float", "str", "list",
                                        "dict", "Namespace", "LoopContext", "function", "scope"};
    if (v.t == JV_LIST && JLIST(v)->tuple) return "tuple";
    return names[v.t];
}

int jv_eq(jv a, jv b) {
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return a.i == b.i;
        return jv_num(a) == jv_num(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case JV_UNDEF: case JV_NONE: return 1;
    case JV_STR: return JSTR(a)->len == JSTR(b)->len && !memcmp(JSTR(a)->s, JSTR(b)->s, JSTR(a)->len);
    case JV_LIST: {
        jlist *x = JLIST(a), *y = JLIST(b);
        if (x->tuple != y->tuple || x->n != y->n) return 0;
        for (size_t i = 0; i < x->n; i++)
            if (!jv_eq(x->v[i], y->v[i])) return 0;
        return 1;
    }
    case JV_DICT: {
        jdict *x = JDICT(a);
        if (x->n != JDICT(b)->n) return 0;
        for (size_t i = 0; i < x->n; i++) {
            jv *o = jdict_get(b, x->k[i]);
            if (!o || !jv_eq(x->v[i], *o)) return 0;
        }
        return 1;
    }
    default: return a.o == b.o;
    }
}

int jv_cmp(jctx *c, jv a, jv b, int *res) {
    if (a.t == JV_UNDEF) return jerr_undef(c, a), 0;
    if (b.t == JV_UNDEF) return jerr_undef(c, b), 0;
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) *res = (a.i > b.i) - (a.i < b.i);
        else *res = (jv_num(a) > jv_num(b)) - (jv_num(a) < jv_num(b));
        return 1;
    }
    if (a.t == JV_STR && b.t == JV_STR) { /* UTF-8 byte order is code point order */
        jstr *x = JSTR(a), *y = JSTR(b);
        int r = memcmp(x->s, y->s, x->len < y->len ? x->len : y->len);
        *res = r ? r : (x->len > y->len) - (x->len < y->len);
        return 1;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && JLIST(a)->tuple == JLIST(b)->tuple) {
        jlist *x = JLIST(a), *y = JLIST(b);
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (jv_eq(x->v[i], y->v[i])) continue;
            return jv_cmp(c, x->v[i], y->v[i], res);
        }
        *res = (x->n > y->n) - (x->n < y->n);
        return 1;
    }
    jerr(c, "'<' not supported between instances of '%s' and '%s'", jv_typename(a), jv_typename(b));
    return 0;
}

size_t jv_length(jv v, int *ok) {
    *ok = 1;
    switch (v.t) {
    case JV_UNDEF: return 0;
    case JV_STR: return JSTR(v)->ncp;
    case JV_LIST: return JLIST(v)->n;
    case JV_DICT: case JV_NS: return JDICT(v)->n;
    case JV_LOOP: return (size_t)((jloop *)v.o)->length;
    default: *ok = 0; return 0;
    }
}

int jv_iter(jctx *c, jv v, jv *out) {
    if (v.t == JV_LIST) {
        *out = jv_ref(v);
        return 1;
    }
    if (v.t == JV_UNDEF) {
        *out = jv_list(c, 0);
        return !c->failed;
    }
    if (v.t == JV_DICT) {
        jdict *d = JDICT(v);
        *out = jv_list(c, d->n);
        for (size_t i = 0; i < d->n && !c->failed; i++) jlist_push(c, *out, jv_ref(d->k[i]));
        return !c->failed;
    }
    if (v.t == JV_STR) {
        jstr *s = JSTR(v);
        *out = jv_list(c, s->ncp);
        for (size_t i = 0; i < s->len && !c->failed;) {
            size_t j = i;
            ju_decode(s->s, s->len, &j);
            jlist_push(c, *out, jv_str(c, s->s + i, j - i));
            i = j;
        }
        return !c->failed;
    }
    jerr(c, "'%s' object is not iterable", jv_typename(v));
    return 0;
}

/* ---------------------------------------------------------- str and repr */

int jbuf_put(jctx *c, jbuf *b, const char *s, size_t n) {
    if (c->failed) return 0;
    if (b->n + n > c->max_out) {
        jerr(c, "rendered text too long (over %zu bytes)", c->max_out);
        return 0;
    }
    if (b->n + n + 1 > b->cap) { /* text buffers count against the memory limit too */
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        if (c->mem + (cap - b->cap) > c->max_mem) {
            jerr(c, "template uses too much memory (over %zu MiB)", c->max_mem >> 20);
            return 0;
        }
        char *p = realloc(b->p, cap);
        if (!p) return jerr(c, "out of memory"), 0;
        c->mem += cap - b->cap;
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 1;
}

static int put_s(jctx *c, jbuf *b, const char *s) { return jbuf_put(c, b, s, strlen(s)); }

/* Python's str.isprintable for one code point: not in Cc, Cf, Cs, Co, Cn,
 * Zl, Zp or Zs (except the space) */
static int py_printable(uint32_t cp) {
    switch (u_charType((UChar32)cp)) {
    case U_CONTROL_CHAR: case U_FORMAT_CHAR: case U_SURROGATE: case U_PRIVATE_USE_CHAR: case U_UNASSIGNED:
    case U_LINE_SEPARATOR: case U_PARAGRAPH_SEPARATOR: case U_SPACE_SEPARATOR: return 0;
    default: return 1;
    }
}

static int repr_str(jctx *c, jbuf *b, const char *s, size_t n) {
    char q = memchr(s, '\'', n) && !memchr(s, '"', n) ? '"' : '\'';
    jbuf_put(c, b, &q, 1);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        uint32_t cp = ju_decode(s, n, &j);
        char e[12];
        if (cp == (uint32_t)q || cp == '\\') snprintf(e, sizeof e, "\\%c", (char)cp);
        else if (cp == '\n') strcpy(e, "\\n");
        else if (cp == '\r') strcpy(e, "\\r");
        else if (cp == '\t') strcpy(e, "\\t");
        else if (cp < 0x7f && cp >= 0x20) e[0] = 0;
        else if (!py_printable(cp)) snprintf(e, sizeof e, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
        else e[0] = 0;
        if (e[0]) put_s(c, b, e);
        else jbuf_put(c, b, s + i, j - i);
        i = j;
    }
    return jbuf_put(c, b, &q, 1);
}

static int str_rec(jctx *c, jbuf *b, jv v, int as_repr, int depth);

static int items_rec(jctx *c, jbuf *b, jdict *d, int depth) {
    for (size_t i = 0; i < d->n && !c->failed; i++) {
        if (i) put_s(c, b, ", ");
        str_rec(c, b, d->k[i], 1, depth + 1);
        put_s(c, b, ": ");
        str_rec(c, b, d->v[i], 1, depth + 1);
    }
    return !c->failed;
}

static int str_rec(jctx *c, jbuf *b, jv v, int as_repr, int depth) {
    char tmp[40];
    if (depth > JMAX_NEST) return jerr(c, "value nested too deeply to print"), 0;
    switch (v.t) {
    case JV_UNDEF: return as_repr ? put_s(c, b, "Undefined") : 1;
    case JV_NONE: return put_s(c, b, "None");
    case JV_BOOL: return put_s(c, b, v.i ? "True" : "False");
    case JV_INT: snprintf(tmp, sizeof tmp, "%" PRId64, v.i); return put_s(c, b, tmp);
    case JV_FLOAT: ju_float_repr(v.f, tmp); return put_s(c, b, tmp);
    case JV_STR: return as_repr ? repr_str(c, b, JSTR(v)->s, JSTR(v)->len) : jbuf_put(c, b, JSTR(v)->s, JSTR(v)->len);
    case JV_LIST: {
        jlist *l = JLIST(v);
        put_s(c, b, l->tuple ? "(" : "[");
        for (size_t i = 0; i < l->n && !c->failed; i++) {
            if (i) put_s(c, b, ", ");
            str_rec(c, b, l->v[i], 1, depth + 1);
        }
        return put_s(c, b, l->tuple ? (l->n == 1 ? ",)" : ")") : "]");
    }
    case JV_DICT:
        put_s(c, b, "{");
        items_rec(c, b, JDICT(v), depth);
        return put_s(c, b, "}");
    case JV_NS:
        put_s(c, b, "<Namespace {");
        items_rec(c, b, JDICT(v), depth);
        return put_s(c, b, "}>");
    case JV_LOOP:
        snprintf(tmp, sizeof tmp, "<LoopContext %" PRId64 "/%" PRId64 ">", ((jloop *)v.o)->index0 + 1,
                 ((jloop *)v.o)->length);
        return put_s(c, b, tmp);
    case JV_FUNC: {
        jfunc *f = (jfunc *)v.o;
        put_s(c, b, f->fkind == JF_MACRO ? "<Macro '" : "<function '");
        put_s(c, b, f->name ? f->name : "?");
        return put_s(c, b, "'>");
    }
    default: return put_s(c, b, "<scope>");
    }
}

int jbuf_str(jctx *c, jbuf *b, jv v) { return str_rec(c, b, v, 0, 0); }
int jbuf_repr(jctx *c, jbuf *b, jv v) { return str_rec(c, b, v, 1, 0); }

void jbuf_free(jctx *c, jbuf *b) {
    c->mem -= b->cap;
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

jv jbuf_take(jctx *c, jbuf *b) {
    jv r = c->failed ? jv_none() : jv_str(c, b->p ? b->p : "", b->n);
    jbuf_free(c, b);
    return r;
}

jv jv_tostr(jctx *c, jv v) {
    if (v.t == JV_STR) return jv_ref(v);
    jbuf b = {0};
    jbuf_str(c, &b, v);
    return jbuf_take(c, &b);
}

jv jv_from_json(jctx *c, const cJSON *j, int depth) {
    if (depth > JMAX_NEST) return jerr(c, "variables nested too deeply");
    if (cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9007199254740992.0) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j)) return jv_cstr(c, j->valuestring);
    if (cJSON_IsArray(j)) {
        jv l = jv_list(c, 0);
        if (c->failed) return l;
        const cJSON *e;
        cJSON_ArrayForEach(e, j) if (!c->failed) jlist_push(c, l, jv_from_json(c, e, depth + 1));
        return l;
    }
    if (cJSON_IsObject(j)) {
        jv d = jv_dict(c, JV_DICT);
        if (c->failed) return d;
        const cJSON *e;
        cJSON_ArrayForEach(e, j) if (!c->failed) jdict_set(c, d, jv_cstr(c, e->string), jv_from_json(c, e, depth + 1));
        return d;
    }
    return jerr(c, "unsupported JSON value in the variables");
}
