/* Jinja's built-in filters with Jinja2 3.1's semantics, and tojson as
 * transformers defines it for chat templates: json.dumps(value,
 * ensure_ascii=False, indent=indent, separators=separators,
 * sort_keys=sort_keys), so non-ASCII text and "<", ">", "&" stay as they are.
 *
 * Filters that Jinja2 implements as generators (map, select, reject,
 * selectattr, rejectattr, reverse) return lists: templates pass them on to
 * list, join, length or a for loop, where the two are the same. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

typedef jv (*filter_fn)(jctx *c, jv in, jargs *a);

#define ARGS(name, n) \
    if (!jargs_check(c, a, name, n)) return jv_none()

/* str(value) as Jinja's soft_str: undefined is "" */
static jv soft(jctx *c, jv v) { return jv_tostr(c, v); }

static jv with_str(jctx *c, jv in, jv (*f)(jctx *, jv, void *), void *arg) {
    jv s = soft(c, in);
    if (c->failed) return s;
    jv r = f(c, s, arg);
    jv_drop(c, s);
    return r;
}

static jv case_cb(jctx *c, jv s, void *mode) { return ju_case(c, s, *(int *)mode); }

static jv f_case(jctx *c, jv in, jargs *a, int mode, const char *name) {
    ARGS(name, 0);
    return with_str(c, in, case_cb, &mode);
}
static jv f_upper(jctx *c, jv in, jargs *a) { return f_case(c, in, a, 'u', "upper"); }
static jv f_lower(jctx *c, jv in, jargs *a) { return f_case(c, in, a, 'l', "lower"); }
static jv f_title(jctx *c, jv in, jargs *a) { return f_case(c, in, a, 'T', "title"); }
static jv f_capitalize(jctx *c, jv in, jargs *a) { return f_case(c, in, a, 'c', "capitalize"); }

static jv trim_cb(jctx *c, jv s, void *chars) { return ju_strip(c, s, *(jv *)chars, 1, 1); }
static jv f_trim(jctx *c, jv in, jargs *a) {
    jv chars = jarg(a, 0, "chars", jv_none());
    ARGS("trim", 1);
    if (chars.t != JV_NONE && chars.t != JV_STR) return jerr(c, "trim(): chars must be a string");
    return with_str(c, in, trim_cb, &chars);
}

static jv f_string(jctx *c, jv in, jargs *a) {
    ARGS("string", 0);
    return soft(c, in);
}
static jv f_safe(jctx *c, jv in, jargs *a) {
    ARGS("safe", 0);
    return soft(c, in);
}

static jv f_escape(jctx *c, jv in, jargs *a) {
    ARGS("escape", 0);
    jv s = soft(c, in);
    if (c->failed) return s;
    jbuf b = {0};
    for (size_t i = 0; i < JSTR(s)->len && !c->failed; i++) {
        char ch = JSTR(s)->s[i];
        const char *e = ch == '&' ? "&amp;" : ch == '<' ? "&lt;" : ch == '>' ? "&gt;" : ch == '"' ? "&#34;"
                      : ch == '\'' ? "&#39;" : NULL;
        if (e) jbuf_put(c, &b, e, strlen(e));
        else jbuf_put(c, &b, &ch, 1);
    }
    jv_drop(c, s);
    return jbuf_take(c, &b);
}

static jv f_replace(jctx *c, jv in, jargs *a) {
    jv o = jarg(a, 0, "old", jv_undef()), n = jarg(a, 1, "new", jv_undef()), k = jarg(a, 2, "count", jv_none());
    ARGS("replace", 3);
    if (k.t != JV_NONE && k.t != JV_INT && k.t != JV_BOOL) return jerr(c, "replace(): count must be an integer");
    jv s = soft(c, in), os = soft(c, o), ns = soft(c, n);
    jv r = c->failed ? jv_none() : ju_replace(c, s, os, ns, k.t == JV_NONE ? -1 : k.i);
    jv_drop(c, s);
    jv_drop(c, os);
    jv_drop(c, ns);
    return r;
}

static jv f_default(jctx *c, jv in, jargs *a) {
    jv d = jarg(a, 0, "default_value", jv_undef()), b = jarg(a, 1, "boolean", jv_bool(0));
    ARGS("default", 2);
    if (in.t == JV_UNDEF || (jv_truthy(b) && !jv_truthy(in))) return d.t == JV_UNDEF ? jv_str(c, "", 0) : jv_ref(d);
    return jv_ref(in);
}

static jv f_length(jctx *c, jv in, jargs *a) {
    ARGS("length", 0);
    int ok;
    size_t n = jv_length(in, &ok);
    if (!ok) return jerr(c, "object of type '%s' has no len()", jv_typename(in));
    return jv_int((int64_t)n);
}

static jv f_list(jctx *c, jv in, jargs *a) {
    ARGS("list", 0);
    jv l;
    if (!jv_iter(c, in, &l)) return jv_none();
    if (l.t == JV_LIST && !JLIST(l)->tuple && l.o != in.o) return l;
    jv r = jv_list(c, JLIST(l)->n);
    for (size_t i = 0; i < JLIST(l)->n && !c->failed; i++) jlist_push(c, r, jv_ref(JLIST(l)->v[i]));
    jv_drop(c, l);
    return r;
}

static jv f_first_last(jctx *c, jv in, jargs *a, int last) {
    ARGS(last ? "last" : "first", 0);
    if (in.t == JV_UNDEF) return jv_undef_msg(c, "No %s item, sequence was empty.", last ? "last" : "first");
    jv l;
    if (!jv_iter(c, in, &l)) return jv_none();
    size_t n = JLIST(l)->n;
    jv r = n ? jv_ref(JLIST(l)->v[last ? n - 1 : 0]) : jv_undef_msg(c, "No %s item, sequence was empty.", last ? "last" : "first");
    jv_drop(c, l);
    return r;
}
static jv f_first(jctx *c, jv in, jargs *a) { return f_first_last(c, in, a, 0); }
static jv f_last(jctx *c, jv in, jargs *a) { return f_first_last(c, in, a, 1); }

/* Jinja's make_attrgetter: "a.b.0" looks up a, then b, then index 0 */
static jv attr_get(jctx *c, jv item, jv spec) {
    if (spec.t != JV_STR) return jgetitem(c, item, spec);
    jv cur = jv_ref(item);
    const char *s = JSTR(spec)->s, *e = s + JSTR(spec)->len;
    while (!c->failed) {
        const char *d = memchr(s, '.', (size_t)(e - s));
        if (!d) d = e;
        int64_t idx;
        jv key = ju_parse_int(s, (size_t)(d - s), 10, &idx) && s < d && s[0] >= '0' && s[0] <= '9' ? jv_int(idx)
                                                                                                  : jv_str(c, s, (size_t)(d - s));
        jv next = c->failed ? jv_none() : jgetitem(c, cur, key);
        jv_drop(c, key);
        jv_drop(c, cur);
        cur = next;
        if (d == e) break;
        s = d + 1;
    }
    return cur;
}

static jv lower_key(jctx *c, jv v) { return v.t == JV_STR ? ju_case(c, v, 'l') : jv_ref(v); }

static jv f_join(jctx *c, jv in, jargs *a) {
    jv d = jarg(a, 0, "d", jv_undef()), at = jarg(a, 1, "attribute", jv_none());
    ARGS("join", 2);
    jv l, sep = d.t == JV_UNDEF ? jv_str(c, "", 0) : soft(c, d);
    if (c->failed || !jv_iter(c, in, &l)) return jv_drop(c, sep), jv_none();
    jbuf b = {0};
    for (size_t i = 0; i < JLIST(l)->n && !c->failed; i++) {
        if (i) jbuf_put(c, &b, JSTR(sep)->s, JSTR(sep)->len);
        jv x = at.t == JV_NONE ? jv_ref(JLIST(l)->v[i]) : attr_get(c, JLIST(l)->v[i], at);
        if (!c->failed) jbuf_str(c, &b, x);
        jv_drop(c, x);
    }
    jv_drop(c, l);
    jv_drop(c, sep);
    return jbuf_take(c, &b);
}

static jv f_tojson(jctx *c, jv in, jargs *a) {
    jv ea = jarg(a, 0, "ensure_ascii", jv_bool(0)), ind = jarg(a, 1, "indent", jv_none()),
       sep = jarg(a, 2, "separators", jv_none()), sk = jarg(a, 3, "sort_keys", jv_bool(0));
    ARGS("tojson", 4);
    char spaces[64];
    const char *indent = NULL;
    if (ind.t == JV_INT || ind.t == JV_BOOL) {
        int64_t k = ind.i < 0 ? 0 : ind.i > 63 ? 63 : ind.i;
        memset(spaces, ' ', (size_t)k);
        spaces[k] = 0;
        indent = spaces;
    } else if (ind.t == JV_STR) {
        indent = JSTR(ind)->s;
    } else if (ind.t != JV_NONE) {
        return jerr(c, "tojson(): indent must be an int or a string");
    }
    const char *item_sep = indent ? "," : ", ", *key_sep = ": ";
    if (sep.t == JV_LIST && JLIST(sep)->n == 2 && JLIST(sep)->v[0].t == JV_STR && JLIST(sep)->v[1].t == JV_STR) {
        item_sep = JSTR(JLIST(sep)->v[0])->s;
        key_sep = JSTR(JLIST(sep)->v[1])->s;
    } else if (sep.t != JV_NONE) {
        return jerr(c, "tojson(): separators must be a pair of strings");
    }
    jbuf b = {0};
    ju_json(c, &b, in, indent, 0, item_sep, key_sep, jv_truthy(sk), jv_truthy(ea));
    return jbuf_take(c, &b);
}

static jv f_items(jctx *c, jv in, jargs *a) {
    ARGS("items", 0);
    if (in.t == JV_UNDEF) return jv_list(c, 0);
    if (in.t != JV_DICT) return jerr(c, "Can only get item pairs from a mapping.");
    jargs none = {0};
    jv m;
    int found;
    m = jmethod(c, in, "items", 5, &found);
    jv r = c->failed ? jv_none() : jcall(c, m, &none);
    jv_drop(c, m);
    return r;
}

/* ------------------------------------------------------------- numbers */

static jv f_int(jctx *c, jv in, jargs *a) {
    jv d = jarg(a, 0, "default", jv_int(0)), base = jarg(a, 1, "base", jv_int(10));
    ARGS("int", 2);
    int64_t r;
    double f;
    if (in.t == JV_UNDEF) return jerr_undef(c, in);
    if (in.t == JV_INT || in.t == JV_BOOL) return jv_int(in.i);
    if (in.t == JV_FLOAT) {
        if (isnan(in.f)) return jv_ref(d);
        if (isinf(in.f) || fabs(in.f) >= 9.2e18) return jerr(c, "cannot convert float to integer");
        return jv_int((int64_t)in.f);
    }
    if (in.t == JV_STR) {
        int b = base.t == JV_INT && base.i >= 2 && base.i <= 36 ? (int)base.i : 10;
        if (ju_parse_int(JSTR(in)->s, JSTR(in)->len, b, &r)) return jv_int(r);
        if (ju_parse_float(JSTR(in)->s, JSTR(in)->len, &f) && !isnan(f)) {
            if (isinf(f) || fabs(f) >= 9.2e18) return jerr(c, "cannot convert float to integer");
            return jv_int((int64_t)f);
        }
    }
    return jv_ref(d);
}

static jv f_float(jctx *c, jv in, jargs *a) {
    jv d = jarg(a, 0, "default", jv_float(0.0));
    ARGS("float", 1);
    double f;
    if (in.t == JV_UNDEF) return jerr_undef(c, in);
    if (jv_is_num(in)) return jv_float(jv_num(in));
    if (in.t == JV_STR && ju_parse_float(JSTR(in)->s, JSTR(in)->len, &f)) return jv_float(f);
    return jv_ref(d);
}

static jv f_abs(jctx *c, jv in, jargs *a) {
    ARGS("abs", 0);
    if (in.t == JV_FLOAT) return jv_float(fabs(in.f));
    if (in.t == JV_INT || in.t == JV_BOOL) return in.i == INT64_MIN ? jerr(c, "integer overflow") : jv_int(in.i < 0 ? -in.i : in.i);
    if (in.t == JV_UNDEF) return jerr_undef(c, in);
    return jerr(c, "bad operand type for abs(): '%s'", jv_typename(in));
}

static jv f_round(jctx *c, jv in, jargs *a) {
    jv p = jarg(a, 0, "precision", jv_int(0)), m = jarg(a, 1, "method", jv_undef());
    ARGS("round", 2);
    if (in.t == JV_UNDEF) return jerr_undef(c, in);
    if (!jv_is_num(in) || (p.t != JV_INT && p.t != JV_BOOL)) return jerr(c, "round() needs a number and an integer precision");
    const char *how = m.t == JV_STR ? JSTR(m)->s : "common";
    if (strcmp(how, "common") && strcmp(how, "ceil") && strcmp(how, "floor"))
        return jerr(c, "method must be common, ceil or floor");
    if (p.i < 0 || p.i > 20) return jerr(c, "round(): precision outside 0..20 is not supported");
    if (in.t != JV_FLOAT && !strcmp(how, "common")) return jv_int(in.i);
    double x = jv_num(in), s = pow(10.0, (double)p.i);
    if (!strcmp(how, "ceil")) return jv_float(ceil(x * s) / s);
    if (!strcmp(how, "floor")) return jv_float(floor(x * s) / s);
    char buf[400]; /* "%.*f" rounds the exact binary value half to even, as Python's round() does */
    if (!isfinite(x)) return jv_float(x);
    snprintf(buf, sizeof buf, "%.*f", (int)p.i, x);
    return jv_float(strtod(buf, NULL));
}

/* ------------------------------------------------------ lists of items */

/* stable merge sort of idx[0..n) by keys (errors through c) */
static void msort(jctx *c, const jv *keys, size_t *idx, size_t *tmp, size_t n, int reverse) {
    if (n < 2 || c->failed) return;
    size_t h = n / 2;
    msort(c, keys, idx, tmp, h, reverse);
    msort(c, keys, idx + h, tmp, n - h, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n && !c->failed) {
        int r = 0;
        jv_cmp(c, keys[idx[j]], keys[idx[i]], &r);
        if (reverse) r = -r;
        tmp[k++] = r < 0 ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* the items of in with their keys (attribute and/or lower-cased) */
static int keyed(jctx *c, jv in, jv attr, int case_sensitive, jv *items, jv **keys) {
    if (!jv_iter(c, in, items)) return 0;
    size_t n = JLIST(*items)->n;
    *keys = calloc(n ? n : 1, sizeof **keys);
    if (!*keys) return jv_drop(c, *items), jerr(c, "out of memory"), 0;
    for (size_t i = 0; i < n && !c->failed; i++) {
        jv k = attr.t == JV_NONE ? jv_ref(JLIST(*items)->v[i]) : attr_get(c, JLIST(*items)->v[i], attr);
        (*keys)[i] = case_sensitive || c->failed ? k : lower_key(c, k);
        if (!case_sensitive && !c->failed) jv_drop(c, k);
    }
    return 1;
}

static void free_keys(jctx *c, jv *keys, size_t n) {
    for (size_t i = 0; i < n; i++) jv_drop(c, keys[i]);
    free(keys);
}

static jv sorted(jctx *c, jv in, jv attr, int cs, int reverse, int unique) {
    jv items, *keys;
    if (!keyed(c, in, attr, cs, &items, &keys)) return jv_none();
    size_t n = JLIST(items)->n;
    size_t *idx = malloc((n + 1) * sizeof *idx), *tmp = malloc((n + 1) * sizeof *tmp);
    jv r = jv_none();
    if (!idx || !tmp) jerr(c, "out of memory");
    else {
        for (size_t i = 0; i < n; i++) idx[i] = i;
        if (!unique) msort(c, keys, idx, tmp, n, reverse);
        r = jv_list(c, n);
        for (size_t i = 0; i < n && !c->failed; i++) {
            int seen = 0;
            for (size_t j = 0; unique && j < i && !seen; j++) seen = jv_eq(keys[j], keys[i]);
            if (!seen) jlist_push(c, r, jv_ref(JLIST(items)->v[idx[i]]));
        }
    }
    free(idx);
    free(tmp);
    free_keys(c, keys, n);
    jv_drop(c, items);
    return r;
}

static jv f_sort(jctx *c, jv in, jargs *a) {
    jv rev = jarg(a, 0, "reverse", jv_bool(0)), cs = jarg(a, 1, "case_sensitive", jv_bool(0)),
       at = jarg(a, 2, "attribute", jv_none());
    ARGS("sort", 3);
    return sorted(c, in, at, jv_truthy(cs), jv_truthy(rev), 0);
}

static jv f_unique(jctx *c, jv in, jargs *a) {
    jv cs = jarg(a, 0, "case_sensitive", jv_bool(0)), at = jarg(a, 1, "attribute", jv_none());
    ARGS("unique", 2);
    return sorted(c, in, at, jv_truthy(cs), 0, 1);
}

static jv f_dictsort(jctx *c, jv in, jargs *a) {
    jv cs = jarg(a, 0, "case_sensitive", jv_bool(0)), by = jarg(a, 1, "by", jv_undef()),
       rev = jarg(a, 2, "reverse", jv_bool(0));
    ARGS("dictsort", 3);
    if (in.t != JV_DICT) return in.t == JV_UNDEF ? jerr_undef(c, in) : jerr(c, "dictsort needs a dict");
    int by_value = by.t == JV_STR && !strcmp(JSTR(by)->s, "value");
    if (by.t == JV_STR && !by_value && strcmp(JSTR(by)->s, "key")) return jerr(c, "You can only sort by either \"key\" or \"value\"");
    jargs none = {0};
    jv items = f_items(c, in, &none);
    jv r = c->failed ? jv_none() : sorted(c, items, jv_int(by_value), jv_truthy(cs), jv_truthy(rev), 0);
    jv_drop(c, items);
    return r;
}

static jv f_minmax(jctx *c, jv in, jargs *a, int want_max) {
    jv cs = jarg(a, 0, "case_sensitive", jv_bool(0)), at = jarg(a, 1, "attribute", jv_none());
    ARGS(want_max ? "max" : "min", 2);
    jv items, *keys;
    if (!keyed(c, in, at, jv_truthy(cs), &items, &keys)) return jv_none();
    size_t n = JLIST(items)->n, best = 0;
    for (size_t i = 1; i < n && !c->failed; i++) {
        int r = 0;
        jv_cmp(c, keys[i], keys[best], &r);
        if (want_max ? r > 0 : r < 0) best = i;
    }
    jv res = c->failed ? jv_none() : n ? jv_ref(JLIST(items)->v[best]) : jv_undef_msg(c, "No aggregated item, sequence was empty.");
    free_keys(c, keys, n);
    jv_drop(c, items);
    return res;
}
static jv f_max(jctx *c, jv in, jargs *a) { return f_minmax(c, in, a, 1); }
static jv f_min(jctx *c, jv in, jargs *a) { return f_minmax(c, in, a, 0); }

static jv f_sum(jctx *c, jv in, jargs *a) {
    jv at = jarg(a, 0, "attribute", jv_none()), acc = jv_ref(jarg(a, 1, "start", jv_int(0))), l;
    ARGS("sum", 2);
    if (!jv_iter(c, in, &l)) return jv_drop(c, acc), jv_none();
    for (size_t i = 0; i < JLIST(l)->n && !c->failed; i++) {
        jv x = at.t == JV_NONE ? jv_ref(JLIST(l)->v[i]) : attr_get(c, JLIST(l)->v[i], at);
        jv s = c->failed ? jv_none() : jbinop(c, OP_ADD, acc, x);
        jv_drop(c, x);
        jv_drop(c, acc);
        acc = s;
    }
    jv_drop(c, l);
    return acc;
}

static jv f_reverse(jctx *c, jv in, jargs *a) {
    ARGS("reverse", 0);
    jv l;
    if (in.t == JV_STR) {
        jbuf b = {0};
        jstr *s = JSTR(in);
        for (size_t e = s->len; e > 0 && !c->failed;) {
            size_t k = e - 1;
            while (k > 0 && e - k < 4 && ((unsigned char)s->s[k] & 0xC0) == 0x80) k--;
            size_t j = k;
            ju_decode(s->s, e, &j);
            if (j != e) k = e - 1;
            jbuf_put(c, &b, s->s + k, e - k);
            e = k;
        }
        return jbuf_take(c, &b);
    }
    if (!jv_iter(c, in, &l)) return jv_none();
    jv r = jv_list(c, JLIST(l)->n);
    for (size_t i = JLIST(l)->n; i-- > 0 && !c->failed;) jlist_push(c, r, jv_ref(JLIST(l)->v[i]));
    jv_drop(c, l);
    return r;
}

/* map / select / reject / selectattr / rejectattr */
static jv f_map(jctx *c, jv in, jargs *a) {
    jv out = jv_list(c, 0), l;
    if (c->failed || !jv_truthy(in)) return out;
    if (!jv_iter(c, in, &l)) return jv_drop(c, out), jv_none();
    jv at = a->npos ? jv_undef() : jarg(a, -1, "attribute", jv_undef());
    jv dflt = at.t != JV_UNDEF ? jarg(a, -1, "default", jv_none()) : jv_none();
    int id = -1;
    jargs rest = *a;
    if (at.t == JV_UNDEF) {
        if (!a->npos || a->pos[0].t != JV_STR) return jv_drop(c, l), jv_drop(c, out), jerr(c, "map(): a filter name or attribute= is needed");
        id = jfilter_find(JSTR(a->pos[0])->s, JSTR(a->pos[0])->len);
        if (id < 0) return jv_drop(c, l), jv_drop(c, out), jerr(c, "no filter named '%s'", JSTR(a->pos[0])->s);
        rest.pos++;
        rest.npos--;
    } else if (!jargs_check(c, a, "map", 0)) {
        return jv_drop(c, l), jv_drop(c, out), jv_none();
    }
    for (size_t i = 0; i < JLIST(l)->n && !c->failed; i++) {
        jv x = JLIST(l)->v[i], r;
        if (id >= 0) {
            rest.used_kw = 0;
            r = jfilter_apply(c, id, x, &rest);
        } else {
            r = attr_get(c, x, at);
            if (r.t == JV_UNDEF && dflt.t != JV_NONE) jv_drop(c, r), r = jv_ref(dflt);
        }
        jlist_push(c, out, r);
    }
    jv_drop(c, l);
    return out;
}

static jv select_common(jctx *c, jv in, jargs *a, int keep, int by_attr) {
    jv out = jv_list(c, 0), l;
    if (c->failed || !jv_truthy(in)) return out;
    if (!jv_iter(c, in, &l)) return jv_drop(c, out), jv_none();
    int off = by_attr, id = -1;
    if (by_attr && !a->npos) return jv_drop(c, l), jv_drop(c, out), jerr(c, "selectattr/rejectattr need an attribute");
    jargs rest = *a;
    if (a->npos > off) {
        if (a->pos[off].t != JV_STR) return jv_drop(c, l), jv_drop(c, out), jerr(c, "a test name must be a string");
        id = jtest_find(JSTR(a->pos[off])->s, JSTR(a->pos[off])->len);
        if (id < 0) return jv_drop(c, l), jv_drop(c, out), jerr(c, "no test named '%s'", JSTR(a->pos[off])->s);
        rest.pos += off + 1;
        rest.npos -= off + 1;
    }
    for (size_t i = 0; i < JLIST(l)->n && !c->failed; i++) {
        jv x = JLIST(l)->v[i];
        jv v = by_attr ? attr_get(c, x, a->pos[0]) : jv_ref(x);
        int t = c->failed ? -1 : id >= 0 ? (rest.used_kw = 0, jtest_apply(c, id, v, &rest)) : jv_truthy(v);
        jv_drop(c, v);
        if (t >= 0 && t == keep) jlist_push(c, out, jv_ref(x));
    }
    jv_drop(c, l);
    return out;
}
static jv f_select(jctx *c, jv in, jargs *a) { return select_common(c, in, a, 1, 0); }
static jv f_reject(jctx *c, jv in, jargs *a) { return select_common(c, in, a, 0, 0); }
static jv f_selectattr(jctx *c, jv in, jargs *a) { return select_common(c, in, a, 1, 1); }
static jv f_rejectattr(jctx *c, jv in, jargs *a) { return select_common(c, in, a, 0, 1); }

static jv f_attr(jctx *c, jv in, jargs *a) {
    jv n = jarg(a, 0, "name", jv_undef());
    ARGS("attr", 1);
    if (n.t != JV_STR) return jerr(c, "attr(): the name must be a string");
    return jgetattr(c, in, JSTR(n)->s, JSTR(n)->len);
}

static jv f_indent(jctx *c, jv in, jargs *a) {
    jv w = jarg(a, 0, "width", jv_int(4)), first = jarg(a, 1, "first", jv_bool(0)), blank = jarg(a, 2, "blank", jv_bool(0));
    ARGS("indent", 3);
    jv pad;
    if (w.t == JV_STR) pad = jv_ref(w);
    else if (w.t == JV_INT || w.t == JV_BOOL) {
        char sp[256];
        int64_t k = w.i < 0 ? 0 : w.i > 255 ? 255 : w.i;
        memset(sp, ' ', (size_t)k);
        pad = jv_str(c, sp, (size_t)k);
    } else return jerr(c, "indent(): width must be an int or a string");
    if (in.t != JV_STR) { /* Jinja appends "\n" to the value: only strings survive that */
        jv_drop(c, pad);
        return in.t == JV_UNDEF ? jerr_undef(c, in) : jerr(c, "'%s' object has no attribute 'splitlines'", jv_typename(in));
    }
    jv s = soft(c, in);
    jbuf t = {0}, b = {0};
    if (!c->failed) {
        jbuf_put(c, &t, JSTR(s)->s, JSTR(s)->len);
        jbuf_put(c, &t, "\n", 1); /* Jinja appends a newline before splitting */
    }
    jv lines = c->failed ? jv_none() : ju_splitlines(c, t.p, t.n, 0);
    jbuf_free(c, &t);
    if (jv_truthy(first) && !c->failed) jbuf_put(c, &b, JSTR(pad)->s, JSTR(pad)->len);
    for (size_t i = 0; !c->failed && i < JLIST(lines)->n; i++) {
        jstr *ln = JSTR(JLIST(lines)->v[i]);
        if (i) {
            jbuf_put(c, &b, "\n", 1);
            if (jv_truthy(blank) || ln->len) jbuf_put(c, &b, JSTR(pad)->s, JSTR(pad)->len);
        }
        jbuf_put(c, &b, ln->s, ln->len);
    }
    jv_drop(c, lines);
    jv_drop(c, s);
    jv_drop(c, pad);
    return jbuf_take(c, &b);
}

static jv f_format(jctx *c, jv in, jargs *a) {
    if (a->nkw) return jerr(c, "format(): keyword arguments are not supported");
    jv s = soft(c, in);
    jv r = c->failed ? jv_none() : jpercent(c, s, a->pos, a->npos);
    jv_drop(c, s);
    return r;
}

static const struct {
    const char *name;
    filter_fn fn;
} FILTERS[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"capitalize", f_capitalize}, {"count", f_length}, {"d", f_default},
    {"default", f_default}, {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
    {"float", f_float}, {"format", f_format}, {"indent", f_indent}, {"int", f_int}, {"items", f_items},
    {"join", f_join}, {"last", f_last}, {"length", f_length}, {"list", f_list}, {"lower", f_lower}, {"map", f_map},
    {"max", f_max}, {"min", f_min}, {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum}, {"title", f_title},
    {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique}, {"upper", f_upper},
};

int jfilter_find(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof FILTERS / sizeof FILTERS[0]; i++)
        if (strlen(FILTERS[i].name) == n && !memcmp(FILTERS[i].name, name, n)) return (int)i;
    return -1;
}

jv jfilter_apply(jctx *c, int id, jv in, jargs *a) {
    if (!jstep(c)) return jv_none();
    return FILTERS[id].fn(c, in, a);
}
