/* Methods of str, dict and list values that templates call
 * (message.content.strip(), tool.items(), ...), loop.cycle, the global
 * functions transformers provides (raise_exception, strftime_now,
 * namespace, dict) and Jinja's range, and Python's % formatting.
 *
 * As in Jinja2's immutable sandbox, methods that modify a list or dict
 * (append, pop, update, ...) are refused. */
#include <inttypes.h>
#include <locale.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <unicode/uchar.h>

#include "jinja_impl.h"

jv jv_func(jctx *c, const char *name, jbuiltin_fn fn, jv self) {
    jfunc *f = jobj_new(c, JV_FUNC, sizeof *f);
    if (!f) return jv_none();
    f->fkind = self.t == JV_NONE ? JF_BUILTIN : JF_METHOD;
    f->name = name;
    f->fn = fn;
    f->self = jv_ref(self);
    return (jv){JV_FUNC, {.o = &f->h}};
}

static jv need_str(jctx *c, jv v, const char *fn) {
    if (v.t == JV_UNDEF) return jerr_undef(c, v);
    return jerr(c, "%s() argument must be str, not %s", fn, jv_typename(v));
}

/* ------------------------------------------------------------ str methods */

#define CHECK_ARGS(name, n) \
    if (!jargs_check(c, a, name, n)) return jv_none()

static jv m_upper(jctx *c, jv self, jargs *a) { CHECK_ARGS("upper", 0); return ju_case(c, self, 'u'); }
static jv m_lower(jctx *c, jv self, jargs *a) { CHECK_ARGS("lower", 0); return ju_case(c, self, 'l'); }
static jv m_title(jctx *c, jv self, jargs *a) { CHECK_ARGS("title", 0); return ju_case(c, self, 't'); }
static jv m_capitalize(jctx *c, jv self, jargs *a) { CHECK_ARGS("capitalize", 0); return ju_case(c, self, 'c'); }

static jv strip_common(jctx *c, jv self, jargs *a, const char *name, int l, int r) {
    jv chars = jarg(a, 0, "chars", jv_none());
    CHECK_ARGS(name, 1);
    if (chars.t != JV_NONE && chars.t != JV_STR) return need_str(c, chars, name);
    return ju_strip(c, self, chars, l, r);
}
static jv m_strip(jctx *c, jv self, jargs *a) { return strip_common(c, self, a, "strip", 1, 1); }
static jv m_lstrip(jctx *c, jv self, jargs *a) { return strip_common(c, self, a, "lstrip", 1, 0); }
static jv m_rstrip(jctx *c, jv self, jargs *a) { return strip_common(c, self, a, "rstrip", 0, 1); }

static jv split_common(jctx *c, jv self, jargs *a, const char *name, int right) {
    jv sep = jarg(a, 0, "sep", jv_none()), maxs = jarg(a, 1, "maxsplit", jv_int(-1));
    CHECK_ARGS(name, 2);
    if (sep.t != JV_NONE && sep.t != JV_STR) return need_str(c, sep, name);
    if (maxs.t != JV_INT && maxs.t != JV_BOOL) return jerr(c, "%s(): maxsplit must be an integer", name);
    return ju_split(c, self, sep, maxs.i, right);
}
static jv m_split(jctx *c, jv self, jargs *a) { return split_common(c, self, a, "split", 0); }
static jv m_rsplit(jctx *c, jv self, jargs *a) { return split_common(c, self, a, "rsplit", 1); }

static jv m_splitlines(jctx *c, jv self, jargs *a) {
    jv keep = jarg(a, 0, "keepends", jv_bool(0));
    CHECK_ARGS("splitlines", 1);
    return ju_splitlines(c, JSTR(self)->s, JSTR(self)->len, jv_truthy(keep));
}

static int affix_match(jv s, jv p, int end) {
    jstr *x = JSTR(s), *y = JSTR(p);
    if (y->len > x->len) return 0;
    return !memcmp(end ? x->s + x->len - y->len : x->s, y->s, y->len);
}

static jv affix_common(jctx *c, jv self, jargs *a, const char *name, int end) {
    jv p = jarg(a, 0, NULL, jv_undef());
    CHECK_ARGS(name, 1);
    if (p.t == JV_STR) return jv_bool(affix_match(self, p, end));
    if (p.t == JV_LIST && JLIST(p)->tuple) {
        for (size_t i = 0; i < JLIST(p)->n; i++) {
            jv e = JLIST(p)->v[i];
            if (e.t != JV_STR) return jerr(c, "tuple for %s must only contain str, not %s", name, jv_typename(e));
            if (affix_match(self, e, end)) return jv_bool(1);
        }
        return jv_bool(0);
    }
    return jerr(c, "%s first arg must be str or a tuple of str, not %s", name, jv_typename(p));
}
static jv m_startswith(jctx *c, jv self, jargs *a) { return affix_common(c, self, a, "startswith", 0); }
static jv m_endswith(jctx *c, jv self, jargs *a) { return affix_common(c, self, a, "endswith", 1); }

static jv m_removeaffix(jctx *c, jv self, jargs *a, int end) {
    jv p = jarg(a, 0, NULL, jv_undef());
    CHECK_ARGS(end ? "removesuffix" : "removeprefix", 1);
    if (p.t != JV_STR) return need_str(c, p, end ? "removesuffix" : "removeprefix");
    if (!JSTR(p)->len || !affix_match(self, p, end)) return jv_ref(self);
    size_t k = JSTR(p)->len;
    return jv_str(c, JSTR(self)->s + (end ? 0 : k), JSTR(self)->len - k);
}
static jv m_removeprefix(jctx *c, jv self, jargs *a) { return m_removeaffix(c, self, a, 0); }
static jv m_removesuffix(jctx *c, jv self, jargs *a) { return m_removeaffix(c, self, a, 1); }

static jv m_replace(jctx *c, jv self, jargs *a) {
    jv o = jarg(a, 0, NULL, jv_undef()), n = jarg(a, 1, NULL, jv_undef()), k = jarg(a, 2, "count", jv_int(-1));
    CHECK_ARGS("replace", 3);
    if (o.t != JV_STR) return need_str(c, o, "replace");
    if (n.t != JV_STR) return need_str(c, n, "replace");
    if (k.t != JV_INT && k.t != JV_BOOL) return jerr(c, "replace(): count must be an integer");
    return ju_replace(c, self, o, n, k.i);
}

static jv find_common(jctx *c, jv self, jargs *a, const char *name, int right, int strict) {
    jv sub = jarg(a, 0, NULL, jv_undef());
    CHECK_ARGS(name, 1);
    if (sub.t != JV_STR) return need_str(c, sub, name);
    int64_t i = ju_find(self, sub, right);
    if (i < 0 && strict) return jerr(c, "substring not found");
    return jv_int(i);
}
static jv m_find(jctx *c, jv self, jargs *a) { return find_common(c, self, a, "find", 0, 0); }
static jv m_rfind(jctx *c, jv self, jargs *a) { return find_common(c, self, a, "rfind", 1, 0); }
static jv m_index(jctx *c, jv self, jargs *a) { return find_common(c, self, a, "index", 0, 1); }
static jv m_rindex(jctx *c, jv self, jargs *a) { return find_common(c, self, a, "rindex", 1, 1); }

static jv m_count(jctx *c, jv self, jargs *a) {
    jv sub = jarg(a, 0, NULL, jv_undef());
    CHECK_ARGS("count", 1);
    if (self.t == JV_LIST) {
        int64_t k = 0;
        for (size_t i = 0; i < JLIST(self)->n; i++) k += jv_eq(JLIST(self)->v[i], sub);
        return jv_int(k);
    }
    if (sub.t != JV_STR) return need_str(c, sub, "count");
    jstr *x = JSTR(self), *y = JSTR(sub);
    if (!y->len) return jv_int((int64_t)x->ncp + 1);
    int64_t k = 0;
    for (size_t i = 0; i + y->len <= x->len;)
        if (!memcmp(x->s + i, y->s, y->len)) k++, i += y->len;
        else i++;
    return jv_int(k);
}

static jv m_list_index(jctx *c, jv self, jargs *a) {
    jv x = jarg(a, 0, NULL, jv_undef());
    CHECK_ARGS("index", 1);
    for (size_t i = 0; i < JLIST(self)->n; i++)
        if (jv_eq(JLIST(self)->v[i], x)) return jv_int((int64_t)i);
    return jerr(c, "value is not in list");
}

static jv m_join(jctx *c, jv self, jargs *a) {
    jv it = jarg(a, 0, NULL, jv_undef()), l;
    CHECK_ARGS("join", 1);
    if (!jv_iter(c, it, &l)) return jv_none();
    jbuf b = {0};
    for (size_t i = 0; i < JLIST(l)->n && !c->failed; i++) {
        jv e = JLIST(l)->v[i];
        if (e.t != JV_STR) {
            jerr(c, "sequence item %zu: expected str instance, %s found", i, jv_typename(e));
            break;
        }
        if (i) jbuf_put(c, &b, JSTR(self)->s, JSTR(self)->len);
        jbuf_put(c, &b, JSTR(e)->s, JSTR(e)->len);
    }
    jv_drop(c, l);
    return jbuf_take(c, &b);
}

static jv partition_common(jctx *c, jv self, jargs *a, int right) {
    jv sep = jarg(a, 0, NULL, jv_undef());
    CHECK_ARGS(right ? "rpartition" : "partition", 1);
    if (sep.t != JV_STR) return need_str(c, sep, "partition");
    if (!JSTR(sep)->len) return jerr(c, "empty separator");
    jstr *x = JSTR(self), *y = JSTR(sep);
    size_t hit = (size_t)-1;
    for (size_t i = 0; i + y->len <= x->len; i++)
        if (!memcmp(x->s + i, y->s, y->len)) {
            hit = i;
            if (!right) break;
        }
    jv r = jv_list(c, 3);
    if (c->failed) return r;
    JLIST(r)->tuple = 1;
    if (hit == (size_t)-1) {
        jv e = jv_str(c, "", 0);
        jlist_push(c, r, right ? jv_ref(e) : jv_ref(self));
        jlist_push(c, r, jv_ref(e));
        jlist_push(c, r, right ? jv_ref(self) : e);
        if (right) jv_drop(c, e);
        return r;
    }
    jlist_push(c, r, jv_str(c, x->s, hit));
    jlist_push(c, r, jv_ref(sep));
    jlist_push(c, r, jv_str(c, x->s + hit + y->len, x->len - hit - y->len));
    return r;
}
static jv m_partition(jctx *c, jv self, jargs *a) { return partition_common(c, self, a, 0); }
static jv m_rpartition(jctx *c, jv self, jargs *a) { return partition_common(c, self, a, 1); }

/* isdigit, isalpha, ...: every code point passes and there is at least one */
static jv is_class(jctx *c, jv self, jargs *a, int cls) {
    CHECK_ARGS("is...", 0);
    jstr *x = JSTR(self);
    int cased = 0;
    if (!x->len) return jv_bool(0);
    for (size_t i = 0; i < x->len;) {
        UChar32 cp = (UChar32)ju_decode(x->s, x->len, &i);
        int ok;
        switch (cls) {
        case 'd': ok = u_isdigit(cp); break;
        case 'a': ok = u_isalpha(cp); break;
        case 'n': ok = u_isalnum(cp); break;
        case 's': ok = ju_isspace((uint32_t)cp); break;
        case 'u': ok = !u_islower(cp); cased |= u_isupper(cp) || u_istitle(cp); break;
        default: ok = !u_isupper(cp) && !u_istitle(cp); cased |= u_islower(cp); break;
        }
        if (!ok) return jv_bool(0);
    }
    return jv_bool(cls == 'u' || cls == 'l' ? cased : 1);
}
static jv m_isdigit(jctx *c, jv self, jargs *a) { return is_class(c, self, a, 'd'); }
static jv m_isalpha(jctx *c, jv self, jargs *a) { return is_class(c, self, a, 'a'); }
static jv m_isalnum(jctx *c, jv self, jargs *a) { return is_class(c, self, a, 'n'); }
static jv m_isspace(jctx *c, jv self, jargs *a) { return is_class(c, self, a, 's'); }
static jv m_isupper(jctx *c, jv self, jargs *a) { return is_class(c, self, a, 'u'); }
static jv m_islower(jctx *c, jv self, jargs *a) { return is_class(c, self, a, 'l'); }

/* str.format: {} {0} {name}, with !s / !r; format specs are not supported */
static jv m_format(jctx *c, jv self, jargs *a) {
    jstr *f = JSTR(self);
    jbuf b = {0};
    int auto_idx = 0;
    for (size_t i = 0; i < f->len && !c->failed;) {
        char ch = f->s[i];
        if ((ch == '{' || ch == '}') && i + 1 < f->len && f->s[i + 1] == ch) {
            jbuf_put(c, &b, &ch, 1);
            i += 2;
            continue;
        }
        if (ch == '}') {
            jerr(c, "Single '}' encountered in format string");
            break;
        }
        if (ch != '{') {
            jbuf_put(c, &b, &ch, 1);
            i++;
            continue;
        }
        size_t e = i + 1;
        while (e < f->len && f->s[e] != '}') e++;
        if (e >= f->len) {
            jerr(c, "Single '{' encountered in format string");
            break;
        }
        const char *fld = f->s + i + 1;
        size_t fl = e - i - 1, nl = 0;
        while (nl < fl && fld[nl] != '!' && fld[nl] != ':') nl++;
        int conv = nl + 1 < fl && fld[nl] == '!' ? fld[nl + 1] : 's';
        if ((nl < fl && fld[nl] == ':') || (nl + 2 < fl)) {
            jerr(c, "format specs in str.format are not supported");
            break;
        }
        jv v;
        if (nl == 0) {
            v = auto_idx < a->npos ? a->pos[auto_idx] : jv_undef();
            if (auto_idx++ >= a->npos) jerr(c, "Replacement index %d out of range for positional args tuple", auto_idx - 1);
        } else if (fld[0] >= '0' && fld[0] <= '9') {
            int64_t k;
            if (!ju_parse_int(fld, nl, 10, &k) || k >= a->npos) jerr(c, "Replacement index out of range");
            v = c->failed ? jv_none() : a->pos[k];
        } else {
            int k;
            for (k = 0; k < a->nkw; k++)
                if (a->kwlen[k] == nl && !memcmp(a->kwname[k], fld, nl)) break;
            if (k == a->nkw) jerr(c, "KeyError: '%.*s'", (int)(nl > 64 ? 64 : nl), fld);
            v = c->failed ? jv_none() : a->kw[k];
        }
        if (!c->failed) conv == 'r' ? jbuf_repr(c, &b, v) : jbuf_str(c, &b, v);
        i = e + 1;
    }
    return jbuf_take(c, &b);
}

/* ----------------------------------------------------------- dict methods */

static jv m_items(jctx *c, jv self, jargs *a) {
    CHECK_ARGS("items", 0);
    jdict *d = JDICT(self);
    jv r = jv_list(c, d->n);
    for (size_t i = 0; i < d->n && !c->failed; i++) {
        jv t = jv_list(c, 2);
        if (c->failed) break;
        JLIST(t)->tuple = 1;
        jlist_push(c, t, jv_ref(d->k[i]));
        jlist_push(c, t, jv_ref(d->v[i]));
        jlist_push(c, r, t);
    }
    return r;
}

static jv keys_values(jctx *c, jv self, int values) {
    jdict *d = JDICT(self);
    jv r = jv_list(c, d->n);
    for (size_t i = 0; i < d->n && !c->failed; i++) jlist_push(c, r, jv_ref(values ? d->v[i] : d->k[i]));
    return r;
}
static jv m_keys(jctx *c, jv self, jargs *a) { CHECK_ARGS("keys", 0); return keys_values(c, self, 0); }
static jv m_values(jctx *c, jv self, jargs *a) { CHECK_ARGS("values", 0); return keys_values(c, self, 1); }

static jv m_get(jctx *c, jv self, jargs *a) {
    jv k = jarg(a, 0, NULL, jv_undef()), d = jarg(a, 1, NULL, jv_none());
    CHECK_ARGS("get", 2);
    if (a->npos < 1) return jerr(c, "get expected at least 1 argument, got 0");
    jv *v = jdict_get(self, k);
    return jv_ref(v ? *v : d);
}

static jv m_cycle(jctx *c, jv self, jargs *a) {
    if (!a->npos) return jerr(c, "no items for cycling given");
    CHECK_ARGS("cycle", a->npos);
    return jv_ref(a->pos[((jloop *)self.o)->index0 % a->npos]);
}

typedef struct {
    const char *name;
    jbuiltin_fn fn;
} method;

static const method STR_METHODS[] = {
    {"upper", m_upper}, {"lower", m_lower}, {"title", m_title}, {"capitalize", m_capitalize},
    {"strip", m_strip}, {"lstrip", m_lstrip}, {"rstrip", m_rstrip}, {"split", m_split}, {"rsplit", m_rsplit},
    {"splitlines", m_splitlines}, {"startswith", m_startswith}, {"endswith", m_endswith},
    {"removeprefix", m_removeprefix}, {"removesuffix", m_removesuffix}, {"replace", m_replace},
    {"find", m_find}, {"rfind", m_rfind}, {"index", m_index}, {"rindex", m_rindex}, {"count", m_count},
    {"join", m_join}, {"partition", m_partition}, {"rpartition", m_rpartition}, {"format", m_format},
    {"isdigit", m_isdigit}, {"isnumeric", m_isdigit}, {"isdecimal", m_isdigit}, {"isalpha", m_isalpha},
    {"isalnum", m_isalnum}, {"isspace", m_isspace}, {"isupper", m_isupper}, {"islower", m_islower},
    {NULL, NULL}};
static const method DICT_METHODS[] = {{"items", m_items}, {"keys", m_keys}, {"values", m_values}, {"get", m_get}, {NULL, NULL}};
static const method LIST_METHODS[] = {{"index", m_list_index}, {"count", m_count}, {NULL, NULL}};
static const method LOOP_METHODS[] = {{"cycle", m_cycle}, {NULL, NULL}};
static const char *const UNSAFE_LIST[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse", NULL};
static const char *const UNSAFE_DICT[] = {"pop", "popitem", "setdefault", "update", "clear", NULL};

jv jmethod(jctx *c, jv obj, const char *name, size_t n, int *found) {
    const method *m = obj.t == JV_STR ? STR_METHODS : obj.t == JV_DICT ? DICT_METHODS
                    : obj.t == JV_LIST ? LIST_METHODS : obj.t == JV_LOOP ? LOOP_METHODS : NULL;
    *found = 0;
    for (; m && m->name; m++)
        if (strlen(m->name) == n && !memcmp(m->name, name, n)) {
            *found = 1;
            return jv_func(c, m->name, m->fn, obj);
        }
    const char *const *u = obj.t == JV_LIST ? UNSAFE_LIST : obj.t == JV_DICT ? UNSAFE_DICT : NULL;
    for (; u && *u; u++)
        if (strlen(*u) == n && !memcmp(*u, name, n)) {
            *found = 1;
            return jv_undef_msg(c, "access to attribute '%s' of '%s' object is unsafe.", *u, jv_typename(obj));
        }
    return jv_none();
}

/* ---------------------------------------------------------------- globals */

static jv g_raise(jctx *c, jv self, jargs *a) {
    jv m = jarg(a, 0, "message", jv_undef());
    jbuf b = {0};
    jbuf_str(c, &b, m);
    jerr(c, "%.*s", (int)(b.n > 400 ? 400 : b.n), b.p ? b.p : "");
    jbuf_free(c, &b);
    return jv_none();
}

static jv g_strftime(jctx *c, jv self, jargs *a) {
    jv f = jarg(a, 0, "format", jv_undef());
    CHECK_ARGS("strftime_now", 1);
    if (f.t != JV_STR) return need_str(c, f, "strftime_now");
    struct tm tmv;
    if (c->now) {
        tmv = *c->now;
    } else {
        time_t t = time(NULL);
        localtime_r(&t, &tmv);
    }
    char out[512];
    /* English names whatever the process locale, as Python's strftime in transformers gives */
    locale_t cl = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    size_t n = JSTR(f)->len && cl ? strftime_l(out, sizeof out, JSTR(f)->s, &tmv, cl) : 0;
    if (cl) freelocale(cl);
    if (!n && JSTR(f)->len) return jerr(c, "strftime_now: format too long or empty result");
    return jv_str(c, out, n);
}

static jv g_namespace(jctx *c, jv self, jargs *a) {
    jv ns = jv_dict(c, JV_NS);
    if (c->failed) return ns;
    for (int i = 0; i < a->npos && !c->failed; i++) {
        jv d = a->pos[i];
        if (d.t != JV_DICT) {
            jerr(c, "namespace() takes mappings and keyword arguments, not %s", jv_typename(d));
            break;
        }
        for (size_t k = 0; k < JDICT(d)->n; k++) jdict_set(c, ns, jv_ref(JDICT(d)->k[k]), jv_ref(JDICT(d)->v[k]));
    }
    for (int k = 0; k < a->nkw && !c->failed; k++) {
        if (self.t == JV_NONE && a->kwlen[k] && a->kwname[k][0] == '_') /* namespace(), not dict() */
            return jerr(c, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%.*s'.",
                        (int)(a->kwlen[k] > 64 ? 64 : a->kwlen[k]), a->kwname[k]);
        jdict_set(c, ns, jv_str(c, a->kwname[k], a->kwlen[k]), jv_ref(a->kw[k]));
    }
    return ns;
}

static jv g_dict(jctx *c, jv self, jargs *a) {
    jv d = g_namespace(c, jv_bool(1), a); /* self marks dict(): underscores allowed */
    if (!c->failed) d.t = d.o->kind = JV_DICT;
    return d;
}

static jv g_range(jctx *c, jv self, jargs *a) {
    int64_t p[3] = {0, 0, 1};
    if (a->npos < 1 || a->npos > 3 || a->nkw) return jerr(c, "range expected 1 to 3 integer arguments");
    for (int i = 0; i < a->npos; i++) {
        if (a->pos[i].t != JV_INT && a->pos[i].t != JV_BOOL)
            return jerr(c, "'%s' object cannot be interpreted as an integer", jv_typename(a->pos[i]));
        p[a->npos == 1 ? 1 : i] = a->pos[i].i;
    }
    if (!p[2]) return jerr(c, "range() arg 3 must not be zero");
    int64_t n = 0;
    if (p[2] > 0 && p[0] < p[1]) n = (int64_t)(((uint64_t)p[1] - (uint64_t)p[0] - 1) / (uint64_t)p[2] + 1);
    if (p[2] < 0 && p[1] < p[0]) n = (int64_t)(((uint64_t)p[0] - (uint64_t)p[1] - 1) / ((uint64_t)0 - (uint64_t)p[2]) + 1);
    if (n > 100000) /* Jinja2's sandbox limit */
        return jerr(c, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jv l = jv_list(c, (size_t)n);
    for (int64_t i = 0; i < n && !c->failed; i++) /* unsigned: the wrap-around lands on the right value */
        jlist_push(c, l, jv_int((int64_t)((uint64_t)p[0] + (uint64_t)i * (uint64_t)p[2])));
    return l;
}

jv jglobal(jctx *c, const char *name, size_t n) {
    static const method G[] = {{"raise_exception", g_raise}, {"strftime_now", g_strftime}, {"namespace", g_namespace},
                               {"dict", g_dict}, {"range", g_range}, {NULL, NULL}};
    for (const method *m = G; m->name; m++)
        if (strlen(m->name) == n && !memcmp(m->name, name, n)) return jv_func(c, m->name, m->fn, jv_none());
    return jv_undef_msg(c, "'%.*s' is undefined", (int)(n > 64 ? 64 : n), name);
}

/* ------------------------------------------------------------ % formatting */

jv jpercent(jctx *c, jv fmt, const jv *args, int nargs) {
    jstr *f = JSTR(fmt);
    jbuf b = {0};
    int used = 0;
    for (size_t i = 0; i < f->len && !c->failed; i++) {
        if (f->s[i] != '%') {
            jbuf_put(c, &b, f->s + i, 1);
            continue;
        }
        char spec[32];
        size_t k = 0;
        spec[k++] = '%';
        i++;
        while (i < f->len && strchr("-+ #0", f->s[i]) && k < 8) spec[k++] = f->s[i++];
        int digits = 0; /* widths and precisions up to 999 */
        while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9' && digits++ < 3) spec[k++] = f->s[i++];
        if (i < f->len && f->s[i] == '.') {
            spec[k++] = f->s[i++];
            digits = 0;
            while (i < f->len && f->s[i] >= '0' && f->s[i] <= '9' && digits++ < 3) spec[k++] = f->s[i++];
        }
        if (i < f->len && f->s[i] >= '0' && f->s[i] <= '9') {
            jerr(c, "format width or precision too large");
            break;
        }
        if (i >= f->len) {
            jerr(c, "incomplete format");
            break;
        }
        char t = f->s[i];
        if (t == '%') {
            jbuf_put(c, &b, "%", 1);
            continue;
        }
        if (used >= nargs) {
            jerr(c, "not enough arguments for format string");
            break;
        }
        jv v = args[used++];
        char out[512];
        if (t == 's' || t == 'r') {
            jbuf s = {0};
            t == 's' ? jbuf_str(c, &s, v) : jbuf_repr(c, &s, v);
            if (k == 1) jbuf_put(c, &b, s.p ? s.p : "", s.n);
            else { /* width/precision count code points; rare enough to do simply */
                spec[k++] = 's';
                spec[k] = 0;
                char *o = malloc(s.n + 1000);
                if (o) {
                    int w = snprintf(o, s.n + 1000, spec, s.p ? s.p : "");
                    jbuf_put(c, &b, o, w < 0 ? 0 : (size_t)w);
                    free(o);
                }
            }
            jbuf_free(c, &s);
        } else if (strchr("diouxXeEfFgG", t)) {
            if (!jv_is_num(v)) {
                jerr(c, "%%%c format: a real number is required, not %s", t, jv_typename(v));
                break;
            }
            if (strchr("dioxXu", t)) {
                /* Python formats any integer; here 64 bits (a float beyond them, NaN or inf: an error, never
                 * an undefined conversion) */
                const double x = jv_num(v);
                if (v.t == JV_FLOAT && !(x >= -9223372036854775808.0 && x < 9223372036854775808.0)) {
                    jerr(c, "%%%c format: %g is out of range", t, x);
                    break;
                }
                spec[k++] = 'l';
                spec[k++] = 'l';
                spec[k++] = t == 'i' || t == 'u' ? 'd' : t;
                spec[k] = 0;
                snprintf(out, sizeof out, spec, v.t == JV_FLOAT ? (long long)x : (long long)v.i);
            } else {
                spec[k++] = t;
                spec[k] = 0;
                snprintf(out, sizeof out, spec, jv_num(v));
            }
            jbuf_put(c, &b, out, strlen(out));
        } else {
            jerr(c, "unsupported format character '%c'", t);
        }
    }
    if (!c->failed && used < nargs) jerr(c, "not all arguments converted during string formatting");
    return jbuf_take(c, &b);
}
