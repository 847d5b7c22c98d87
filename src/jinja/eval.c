/* Jinja expressions: names, literals, operators with Python's semantics,
 * attribute and item access as Jinja2's sandbox does them, slicing, calls
 * and their arguments.
 *
 * Access never fails on a defined object: a missing key, attribute or
 * index gives an undefined value (printed as ""); using an undefined value
 * for arithmetic, attribute access or a call is the error. */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

/* ------------------------------------------------------------- arguments */

void jargs_free(jctx *c, jargs *a) {
    for (int i = 0; i < a->npos; i++) jv_drop(c, a->pos[i]);
    for (int i = 0; i < a->nkw; i++) jv_drop(c, a->kw[i]);
    jv_drop(c, a->hold);
    free(a->pos);
    free(a->kwname);
    free(a->kwlen);
    free(a->kw);
    memset(a, 0, sizeof *a);
}

static int add_pos(jctx *c, jargs *a, jv v) {
    if (a->npos == a->cap_pos) {
        int cap = a->cap_pos ? a->cap_pos * 2 : 4;
        jv *p = realloc(a->pos, (size_t)cap * sizeof *p);
        if (!p) return jv_drop(c, v), jerr(c, "out of memory"), 0;
        a->pos = p;
        a->cap_pos = cap;
    }
    a->pos[a->npos++] = v;
    return 1;
}

static int add_kw(jctx *c, jargs *a, const char *name, size_t n, jv v) {
    for (int i = 0; i < a->nkw; i++)
        if (a->kwlen[i] == n && !memcmp(a->kwname[i], name, n)) {
            jv_drop(c, v);
            return jerr(c, "got multiple values for keyword argument '%.*s'", (int)n, name), 0;
        }
    if (a->nkw == 64) return jv_drop(c, v), jerr(c, "too many keyword arguments"), 0;
    if (a->nkw == a->cap_kw) {
        int cap = a->cap_kw ? a->cap_kw * 2 : 4;
        const char **kn = realloc(a->kwname, (size_t)cap * sizeof *kn);
        if (kn) a->kwname = kn;
        size_t *kl = kn ? realloc(a->kwlen, (size_t)cap * sizeof *kl) : NULL;
        if (kl) a->kwlen = kl;
        jv *kv = kl ? realloc(a->kw, (size_t)cap * sizeof *kv) : NULL;
        if (!kv) return jv_drop(c, v), jerr(c, "out of memory"), 0;
        a->kw = kv;
        a->cap_kw = cap;
    }
    a->kwname[a->nkw] = name;
    a->kwlen[a->nkw] = n;
    a->kw[a->nkw++] = v;
    return 1;
}

int jeval_args(jctx *c, const jnodes *nodes, jscope *s, jargs *a) {
    for (int i = 0; i < nodes->n && !c->failed; i++) {
        const jnode *e = nodes->v[i];
        if (e->kind == JN_KWARG) {
            add_kw(c, a, e->s, e->n, jeval(c, e->a, s));
        } else if (e->kind == JN_STARARG) {
            jv v = jeval(c, e->a, s), l;
            if (!c->failed && jv_iter(c, v, &l)) {
                for (size_t k = 0; k < JLIST(l)->n && !c->failed; k++) add_pos(c, a, jv_ref(JLIST(l)->v[k]));
                jv_drop(c, l);
            }
            jv_drop(c, v);
        } else if (e->kind == JN_STARKW) {
            jv v = jeval(c, e->a, s);
            if (c->failed) break;
            if (v.t != JV_DICT || a->hold.t != JV_UNDEF) {
                jv_drop(c, v);
                return jerr(c, "** takes one mapping"), 0;
            }
            a->hold = v;
            jdict *d = JDICT(v);
            for (size_t k = 0; k < d->n && !c->failed; k++) {
                if (d->k[k].t != JV_STR) return jerr(c, "keywords must be strings"), 0;
                add_kw(c, a, JSTR(d->k[k])->s, JSTR(d->k[k])->len, jv_ref(d->v[k]));
            }
        } else {
            add_pos(c, a, jeval(c, e, s));
        }
    }
    return !c->failed;
}

jv jarg(jargs *a, int i, const char *name, jv dflt) {
    if (i >= 0 && i < a->npos) return a->pos[i];
    size_t n = name ? strlen(name) : 0;
    for (int k = 0; name && k < a->nkw; k++)
        if (a->kwlen[k] == n && !memcmp(a->kwname[k], name, n)) {
            a->used_kw |= 1ull << k;
            return a->kw[k];
        }
    return dflt;
}

int jargs_check(jctx *c, jargs *a, const char *fn, int maxpos) {
    if (a->npos > maxpos) return jerr(c, "%s() takes at most %d positional argument(s) (%d given)", fn, maxpos, a->npos), 0;
    for (int k = 0; k < a->nkw; k++)
        if (!(a->used_kw >> k & 1))
            return jerr(c, "%s() got an unexpected keyword argument '%.*s'", fn, (int)a->kwlen[k], a->kwname[k]), 0;
    return 1;
}

jv jcall(jctx *c, jv fn, jargs *a) {
    if (fn.t == JV_UNDEF) return jerr_undef(c, fn);
    if (fn.t != JV_FUNC) return jerr(c, "'%s' object is not callable", jv_typename(fn));
    if (!jstep(c)) return jv_none();
    jfunc *f = (jfunc *)fn.o;
    if (f->fkind == JF_MACRO) return jcall_macro(c, f, a);
    return f->fn(c, f->fkind == JF_METHOD ? f->self : jv_none(), a);
}

/* ---------------------------------------------------------------- access */

static jv loop_attr(jctx *c, jv obj, const char *name, size_t n) {
    jloop *l = (jloop *)obj.o;
#define IS(s) (n == sizeof s - 1 && !memcmp(name, s, n))
    if (IS("index")) return jv_int(l->index0 + 1);
    if (IS("index0")) return jv_int(l->index0);
    if (IS("revindex")) return jv_int(l->length - l->index0);
    if (IS("revindex0")) return jv_int(l->length - l->index0 - 1);
    if (IS("first")) return jv_bool(l->index0 == 0);
    if (IS("last")) return jv_bool(l->index0 == l->length - 1);
    if (IS("length")) return jv_int(l->length);
    if (IS("depth")) return jv_int(l->depth0 + 1);
    if (IS("depth0")) return jv_int(l->depth0);
    if (IS("previtem")) return l->index0 > 0 ? jv_ref(JLIST(l->items)->v[l->index0 - 1]) : jv_undef_msg(c, "there is no previous item");
    if (IS("nextitem"))
        return l->index0 + 1 < l->length ? jv_ref(JLIST(l->items)->v[l->index0 + 1]) : jv_undef_msg(c, "there is no next item");
#undef IS
    int found;
    jv m = jmethod(c, obj, name, n, &found);
    return found ? m : jv_undef_msg(c, "'LoopContext object' has no attribute '%.*s'", (int)(n > 64 ? 64 : n), name);
}

jv jgetattr(jctx *c, jv obj, const char *name, size_t n) {
    if (obj.t == JV_UNDEF) return jerr_undef(c, obj);
    if (obj.t == JV_LOOP) return loop_attr(c, obj, name, n);
    int found = 0;
    if (obj.t == JV_DICT || obj.t == JV_STR || obj.t == JV_LIST) {
        jv m = jmethod(c, obj, name, n, &found);
        if (found || c->failed) return m;
    }
    if (obj.t == JV_DICT || obj.t == JV_NS) {
        jv *v = jdict_gets(obj, name, n);
        if (v) return jv_ref(*v);
    }
    const char *tn = obj.t == JV_NS ? "Namespace" : jv_typename(obj);
    return jv_undef_msg(c, "'%s object' has no attribute '%.*s'", tn, (int)(n > 64 ? 64 : n), name);
}

static int as_index(jv k, int64_t *i) {
    if (k.t != JV_INT && k.t != JV_BOOL) return 0;
    *i = k.i;
    return 1;
}

jv jgetitem(jctx *c, jv obj, jv key) {
    if (obj.t == JV_UNDEF) return jerr_undef(c, obj);
    int64_t i;
    if (obj.t == JV_DICT) {
        jv *v = jdict_get(obj, key);
        if (v) return jv_ref(*v);
    } else if ((obj.t == JV_LIST || obj.t == JV_STR) && as_index(key, &i)) {
        int ok;
        int64_t len = (int64_t)jv_length(obj, &ok);
        if (i < 0) i += len;
        if (i >= 0 && i < len) {
            if (obj.t == JV_LIST) return jv_ref(JLIST(obj)->v[i]);
            jstr *s = JSTR(obj);
            size_t a = ju_offset(s->s, s->len, (size_t)i), b = a;
            ju_decode(s->s, s->len, &b);
            return jv_str(c, s->s + a, b - a);
        }
        return jv_undef_msg(c, "%s index %" PRId64 " out of range", obj.t == JV_LIST ? "list" : "string", key.i);
    }
    if (key.t == JV_STR && obj.t != JV_DICT) return jgetattr(c, obj, JSTR(key)->s, JSTR(key)->len);
    if (key.t == JV_STR) {
        int found;
        jv m = jmethod(c, obj, JSTR(key)->s, JSTR(key)->len, &found);
        if (found || c->failed) return m;
    }
    jbuf b = {0};
    jbuf_repr(c, &b, key);
    jv u = jv_undef_msg(c, "'%s object' has no attribute %.*s", jv_typename(obj), (int)(b.n > 64 ? 64 : b.n),
                        b.p ? b.p : "");
    jbuf_free(c, &b);
    return u;
}

/* Python's slice index rules (PySlice_AdjustIndices) */
static int64_t slice_bound(jv v, int64_t len, int64_t step, int is_start) {
    if (v.t == JV_NONE || v.t == JV_UNDEF) return step > 0 ? (is_start ? 0 : len) : (is_start ? len - 1 : -1);
    int64_t x = v.i;
    if (x < 0) {
        x += len;
        if (x < 0) x = step < 0 ? -1 : 0;
    } else if (x >= len) {
        x = step < 0 ? len - 1 : len;
    }
    return x;
}

static jv do_slice(jctx *c, jv obj, jv a, jv b, jv st) {
    if (obj.t == JV_UNDEF) return jerr_undef(c, obj);
    int64_t step = 1, dummy;
    int ok_idx = (st.t == JV_NONE || as_index(st, &step)) && (a.t == JV_NONE || as_index(a, &dummy)) &&
                 (b.t == JV_NONE || as_index(b, &dummy));
    /* Jinja2 compiles a slice to Python's own subscript: no undefined fallback */
    if (obj.t == JV_DICT) return jerr(c, "unhashable type: 'slice'");
    if (obj.t != JV_LIST && obj.t != JV_STR) return jerr(c, "'%s' object is not subscriptable", jv_typename(obj));
    if (!ok_idx) return jerr(c, "slice indices must be integers or None");
    if (step == 0) return jerr(c, "slice step cannot be zero");
    int ok;
    int64_t len = (int64_t)jv_length(obj, &ok);
    int64_t from = slice_bound(a, len, step, 1), to = slice_bound(b, len, step, 0), count = 0;
    if (step > 0 && from < to) count = (to - from - 1) / step + 1;
    if (step < 0 && to < from) count = (from - to - 1) / -step + 1;
    if (obj.t == JV_LIST) {
        jv r = jv_list(c, (size_t)count);
        if (c->failed) return r;
        JLIST(r)->tuple = JLIST(obj)->tuple;
        for (int64_t k = 0; k < count && !c->failed; k++) jlist_push(c, r, jv_ref(JLIST(obj)->v[from + k * step]));
        return r;
    }
    jstr *s = JSTR(obj);
    if (step == 1) {
        size_t x = ju_offset(s->s, s->len, (size_t)from);
        size_t y = count ? ju_offset(s->s, s->len, (size_t)(from + count)) : x;
        return jv_str(c, s->s + x, y - x);
    }
    size_t *off = malloc(((size_t)len + 1) * sizeof *off);
    if (!off) return jerr(c, "out of memory");
    for (size_t i = 0, k = 0; k <= (size_t)len; k++) {
        off[k] = i;
        if (i < s->len) ju_decode(s->s, s->len, &i);
    }
    jbuf out = {0};
    for (int64_t k = 0; k < count && !c->failed; k++) {
        int64_t p = from + k * step;
        jbuf_put(c, &out, s->s + off[p], off[p + 1] - off[p]);
    }
    free(off);
    return jbuf_take(c, &out);
}

/* ------------------------------------------------------------- operators */

static jv arith_int(jctx *c, int op, int64_t x, int64_t y) {
    int64_t r;
    switch (op) {
    case OP_ADD: if (__builtin_add_overflow(x, y, &r)) break; return jv_int(r);
    case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) break; return jv_int(r);
    case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) break; return jv_int(r);
    case OP_DIV:
        if (!y) return jerr(c, "division by zero");
        return jv_float((double)x / (double)y);
    case OP_FLOORDIV: case OP_MOD: {
        if (!y) return jerr(c, "integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) break;
        int64_t q = x / y, m = x % y;
        if (m && ((m < 0) != (y < 0))) q--, m += y;
        return jv_int(op == OP_MOD ? m : q);
    }
    case OP_POW:
        if (y < 0) return x == 0 ? jerr(c, "zero cannot be raised to a negative power") : jv_float(pow((double)x, (double)y));
        r = 1;
        for (int64_t k = 0; k < y; k++) {
            if (__builtin_mul_overflow(r, x, &r)) return jerr(c, "integer overflow in **");
            if (r == 0 || r == 1) break;
            if (r == -1) { r = (y - k - 1) % 2 ? -r : r; break; }
        }
        return jv_int(r);
    }
    return jerr(c, "integer overflow");
}

static jv arith_float(jctx *c, int op, double x, double y) {
    switch (op) {
    case OP_ADD: return jv_float(x + y);
    case OP_SUB: return jv_float(x - y);
    case OP_MUL: return jv_float(x * y);
    case OP_DIV: return y == 0 ? jerr(c, "float division by zero") : jv_float(x / y);
    case OP_FLOORDIV: return y == 0 ? jerr(c, "float floor division by zero") : jv_float(floor(x / y));
    case OP_MOD: {
        if (y == 0) return jerr(c, "float modulo");
        double m = fmod(x, y);
        if (m != 0 && ((m < 0) != (y < 0))) m += y;
        return jv_float(m);
    }
    default:
        if (x == 0 && y < 0) return jerr(c, "0.0 cannot be raised to a negative power");
        if (x < 0 && y != floor(y)) return jerr(c, "negative number cannot be raised to a fractional power");
        return jv_float(pow(x, y));
    }
}

static jv repeat(jctx *c, jv seq, int64_t k) {
    if (k < 0) k = 0;
    if (seq.t == JV_STR) {
        jstr *s = JSTR(seq);
        if (!s->len) k = 0; /* '' * 3 ** 23 is empty at once, not after 94 million empty appends */
        if (s->len && (uint64_t)k > c->max_out / s->len) return jerr(c, "string repetition too large");
        jbuf b = {0};
        for (int64_t i = 0; i < k && !c->failed; i++) jbuf_put(c, &b, s->s, s->len);
        return jbuf_take(c, &b);
    }
    jlist *l = JLIST(seq);
    if (!l->n) k = 0;
    if (l->n && (uint64_t)k > (uint64_t)c->max_steps / l->n) return jerr(c, "list repetition too large");
    jv r = jv_list(c, l->n * (size_t)k);
    if (c->failed) return r;
    JLIST(r)->tuple = l->tuple;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < l->n && !c->failed; j++) jlist_push(c, r, jv_ref(l->v[j]));
    return r;
}

static const char *op_name(int op) {
    static const char *const n[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    return op <= OP_POW ? n[op] : "?";
}

jv jbinop(jctx *c, int op, jv a, jv b) {
    if (a.t == JV_UNDEF) return jerr_undef(c, a);
    if (b.t == JV_UNDEF) return jerr_undef(c, b);
    if (jv_is_num(a) && jv_is_num(b)) {
        if (a.t != JV_FLOAT && b.t != JV_FLOAT) return arith_int(c, op, a.i, b.i);
        return arith_float(c, op, jv_num(a), jv_num(b));
    }
    if (op == OP_ADD && a.t == JV_STR && b.t == JV_STR) {
        jbuf s = {0};
        jbuf_put(c, &s, JSTR(a)->s, JSTR(a)->len);
        jbuf_put(c, &s, JSTR(b)->s, JSTR(b)->len);
        return jbuf_take(c, &s);
    }
    if (op == OP_ADD && a.t == JV_LIST && b.t == JV_LIST && JLIST(a)->tuple == JLIST(b)->tuple) {
        jv r = jv_list(c, JLIST(a)->n + JLIST(b)->n);
        if (c->failed) return r;
        JLIST(r)->tuple = JLIST(a)->tuple;
        for (size_t i = 0; i < JLIST(a)->n; i++) jlist_push(c, r, jv_ref(JLIST(a)->v[i]));
        for (size_t i = 0; i < JLIST(b)->n; i++) jlist_push(c, r, jv_ref(JLIST(b)->v[i]));
        return r;
    }
    if (op == OP_MUL && (a.t == JV_STR || a.t == JV_LIST) && (b.t == JV_INT || b.t == JV_BOOL)) return repeat(c, a, b.i);
    if (op == OP_MUL && (b.t == JV_STR || b.t == JV_LIST) && (a.t == JV_INT || a.t == JV_BOOL)) return repeat(c, b, a.i);
    if (op == OP_MOD && a.t == JV_STR) {
        if (b.t == JV_LIST && JLIST(b)->tuple) return jpercent(c, a, JLIST(b)->v, (int)JLIST(b)->n);
        return jpercent(c, a, &b, 1);
    }
    if (op == OP_ADD && a.t == JV_STR)
        return jerr(c, "can only concatenate str (not \"%s\") to str", jv_typename(b));
    return jerr(c, "unsupported operand type(s) for %s: '%s' and '%s'", op_name(op), jv_typename(a), jv_typename(b));
}

int jv_contains(jctx *c, jv item, jv seq) {
    switch (seq.t) {
    case JV_UNDEF: return 0;
    case JV_STR:
        if (item.t != JV_STR) return jerr(c, "'in <string>' requires string as left operand, not %s", jv_typename(item)), -1;
        return ju_find(seq, item, 0) >= 0;
    case JV_LIST:
        for (size_t i = 0; i < JLIST(seq)->n; i++)
            if (jv_eq(JLIST(seq)->v[i], item)) return 1;
        return 0;
    case JV_DICT: return jdict_get(seq, item) != NULL;
    default: return jerr(c, "argument of type '%s' is not iterable", jv_typename(seq)), -1;
    }
}

static int compare(jctx *c, int op, jv a, jv b) {
    int r;
    switch (op) {
    case OP_EQ: return jv_eq(a, b);
    case OP_NE: return !jv_eq(a, b);
    case OP_IN: return jv_contains(c, a, b);
    case OP_NOTIN: r = jv_contains(c, a, b); return r < 0 ? r : !r;
    }
    if (!jv_cmp(c, a, b, &r)) return -1;
    return op == OP_LT ? r < 0 : op == OP_LE ? r <= 0 : op == OP_GT ? r > 0 : r >= 0;
}

/* ------------------------------------------------------------ evaluation */

static jv eval_const(jctx *c, const jnode *e) {
    switch (e->op) {
    case 1: return jv_bool((int)e->i);
    case 2: return jv_int(e->i);
    case 3: return jv_float(e->f);
    case 4: return jv_str(c, e->s, e->n);
    default: return jv_none();
    }
}

static jv eval_seq(jctx *c, const jnode *e, jscope *s) {
    if (e->kind == JN_DICT) {
        jv d = jv_dict(c, JV_DICT);
        for (int i = 0; i + 1 < e->v.n && !c->failed; i += 2) {
            jv k = jeval(c, e->v.v[i], s);
            jdict_set(c, d, k, jeval(c, e->v.v[i + 1], s));
        }
        return d;
    }
    jv l = jv_list(c, (size_t)e->v.n);
    if (c->failed) return l;
    JLIST(l)->tuple = e->kind == JN_TUPLE;
    for (int i = 0; i < e->v.n && !c->failed; i++) jlist_push(c, l, jeval(c, e->v.v[i], s));
    return l;
}

static jv eval_compare(jctx *c, const jnode *e, jscope *s) {
    jv left = jeval(c, e->a, s);
    for (const jnode *x = e; x && !c->failed; x = x->c) {
        jv right = jeval(c, x->b, s);
        c->line = x->line;
        int r = c->failed ? -1 : compare(c, x->op, left, right);
        jv_drop(c, left);
        left = right;
        if (r <= 0) {
            jv_drop(c, left);
            return r < 0 ? jv_none() : jv_bool(0);
        }
    }
    jv_drop(c, left);
    return c->failed ? jv_none() : jv_bool(1);
}

static jv eval_unary(jctx *c, const jnode *e, jscope *s) {
    jv v = jeval(c, e->a, s);
    if (c->failed) return v;
    if (e->op == OP_NOT) {
        int t = jv_truthy(v);
        jv_drop(c, v);
        return jv_bool(!t);
    }
    if (v.t == JV_UNDEF) return jerr_undef(c, v);
    if (!jv_is_num(v)) {
        jerr(c, "bad operand type for unary %s: '%s'", e->op == OP_NEG ? "-" : "+", jv_typename(v));
        jv_drop(c, v);
        return jv_none();
    }
    if (v.t == JV_FLOAT) return jv_float(e->op == OP_NEG ? -v.f : v.f);
    if (e->op == OP_NEG && v.i == INT64_MIN) return jerr(c, "integer overflow");
    return jv_int(e->op == OP_NEG ? -v.i : v.i);
}

static jv eval_inner(jctx *c, const jnode *e, jscope *s) {
    jv a, b, r;
    switch (e->kind) {
    case JN_CONST: return eval_const(c, e);
    case JN_NAME: {
        jv *v = jscope_find(s, e->s, e->n);
        return v ? jv_ref(*v) : jglobal(c, e->s, e->n);
    }
    case JN_LIST: case JN_TUPLE: case JN_DICT: return eval_seq(c, e, s);
    case JN_ATTR:
        a = jeval(c, e->a, s);
        c->line = e->line;
        r = c->failed ? a : jgetattr(c, a, e->s, e->n);
        jv_drop(c, a);
        return r;
    case JN_ITEM: case JN_BINOP:
        a = jeval(c, e->a, s);
        b = jeval(c, e->b, s);
        c->line = e->line;
        r = c->failed ? jv_none() : e->kind == JN_ITEM ? jgetitem(c, a, b) : jbinop(c, e->op, a, b);
        jv_drop(c, a);
        jv_drop(c, b);
        return r;
    case JN_SLICE: {
        jv p[3] = {jv_none(), jv_none(), jv_none()};
        const jnode *k[3] = {e->b, e->c, e->d};
        a = jeval(c, e->a, s);
        for (int i = 0; i < 3; i++)
            if (k[i]) p[i] = jeval(c, k[i], s);
        c->line = e->line;
        r = c->failed ? jv_none() : do_slice(c, a, p[0], p[1], p[2]);
        jv_drop(c, a);
        for (int i = 0; i < 3; i++) jv_drop(c, p[i]);
        return r;
    }
    case JN_CALL: case JN_FILTER: case JN_TEST: {
        jargs args = {0};
        a = e->a ? jeval(c, e->a, s) : jv_none();
        jeval_args(c, &e->v, s, &args);
        c->line = e->line;
        if (c->failed) r = jv_none();
        else if (e->kind == JN_CALL) r = jcall(c, a, &args);
        else if (e->kind == JN_FILTER) r = jfilter_apply(c, (int)e->i, a, &args);
        else {
            int t = jtest_apply(c, (int)e->i, a, &args);
            r = t < 0 ? jv_none() : jv_bool(e->op ? !t : t);
        }
        jargs_free(c, &args);
        jv_drop(c, a);
        return r;
    }
    case JN_UNARY: return eval_unary(c, e, s);
    case JN_AND: case JN_OR:
        a = jeval(c, e->a, s);
        if (c->failed || jv_truthy(a) == (e->kind == JN_OR)) return a;
        jv_drop(c, a);
        return jeval(c, e->b, s);
    case JN_COMPARE: return eval_compare(c, e, s);
    case JN_CONCAT: {
        jbuf out = {0};
        for (int i = 0; i < e->v.n && !c->failed; i++) {
            a = jeval(c, e->v.v[i], s);
            if (!c->failed) jbuf_str(c, &out, a);
            jv_drop(c, a);
        }
        return jbuf_take(c, &out);
    }
    case JN_COND:
        a = jeval(c, e->a, s);
        if (c->failed) return a;
        int t = jv_truthy(a);
        jv_drop(c, a);
        if (t) return jeval(c, e->b, s);
        if (e->c) return jeval(c, e->c, s);
        return jv_undef_msg(c, "the inline if-expression on line %d evaluated to false and no else section was defined",
                            e->line);
    default: return jerr(c, "%s is not allowed here", e->kind == JN_KWARG ? "a keyword argument" : "a starred argument");
    }
}

jv jeval(jctx *c, const jnode *e, jscope *s) {
    if (c->failed) return jv_none();
    if (++c->depth > JMAX_DEPTH) {
        c->depth--;
        return jerr(c, "template nested too deeply when rendering");
    }
    c->line = e->line;
    jv r = eval_inner(c, e, s);
    c->depth--;
    if (c->failed) {
        jv_drop(c, r);
        return jv_none();
    }
    return r;
}
