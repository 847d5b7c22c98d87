/* Jinja's built-in tests ("x is defined", "x is string", "n is divisibleby 3",
 * ...) with Jinja2 3.1's semantics. Note Python's: bool is a number, and an
 * undefined value counts as iterable and as a sequence (it iterates as
 * empty), while "integer" excludes booleans. */
#include <string.h>

#include "jinja_impl.h"

typedef int (*test_fn)(jctx *c, jv v, jargs *a);

/* the one argument of a comparison test */
static int arg1(jctx *c, jargs *a, const char *fn, jv *x) {
    *x = jarg(a, 0, NULL, jv_undef());
    if (!jargs_check(c, a, fn, 1)) return 0;
    if (a->npos < 1) return jerr(c, "test '%s' needs an argument", fn), 0;
    return 1;
}

#define NOARGS(name) \
    if (!jargs_check(c, a, name, 0)) return -1

static int t_defined(jctx *c, jv v, jargs *a) { NOARGS("defined"); return v.t != JV_UNDEF; }
static int t_undefined(jctx *c, jv v, jargs *a) { NOARGS("undefined"); return v.t == JV_UNDEF; }
static int t_none(jctx *c, jv v, jargs *a) { NOARGS("none"); return v.t == JV_NONE; }
static int t_boolean(jctx *c, jv v, jargs *a) { NOARGS("boolean"); return v.t == JV_BOOL; }
static int t_true(jctx *c, jv v, jargs *a) { NOARGS("true"); return v.t == JV_BOOL && v.i; }
static int t_false(jctx *c, jv v, jargs *a) { NOARGS("false"); return v.t == JV_BOOL && !v.i; }
static int t_integer(jctx *c, jv v, jargs *a) { NOARGS("integer"); return v.t == JV_INT; }
static int t_float(jctx *c, jv v, jargs *a) { NOARGS("float"); return v.t == JV_FLOAT; }
static int t_number(jctx *c, jv v, jargs *a) { NOARGS("number"); return jv_is_num(v); }
static int t_string(jctx *c, jv v, jargs *a) { NOARGS("string"); return v.t == JV_STR; }
static int t_mapping(jctx *c, jv v, jargs *a) { NOARGS("mapping"); return v.t == JV_DICT; }
static int t_iterable(jctx *c, jv v, jargs *a) {
    NOARGS("iterable");
    return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF || v.t == JV_LOOP;
}
static int t_sequence(jctx *c, jv v, jargs *a) {
    NOARGS("sequence");
    return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
}
static int t_callable(jctx *c, jv v, jargs *a) { NOARGS("callable"); return v.t == JV_FUNC || v.t == JV_UNDEF; }
static int t_escaped(jctx *c, jv v, jargs *a) { NOARGS("escaped"); return 0; }

/* value % n == want, with Python's % (floats included) */
static int mod_is(jctx *c, jv v, jv n, int want) {
    jv r = jbinop(c, OP_MOD, v, n);
    if (c->failed) return -1;
    int eq = jv_eq(r, jv_int(want));
    jv_drop(c, r);
    return eq;
}
static int t_even(jctx *c, jv v, jargs *a) { NOARGS("even"); return mod_is(c, v, jv_int(2), 0); }
static int t_odd(jctx *c, jv v, jargs *a) { NOARGS("odd"); return mod_is(c, v, jv_int(2), 1); }
static int t_divisibleby(jctx *c, jv v, jargs *a) {
    jv n;
    return arg1(c, a, "divisibleby", &n) ? mod_is(c, v, n, 0) : -1;
}

static int t_eq(jctx *c, jv v, jargs *a) {
    jv x;
    return arg1(c, a, "eq", &x) ? jv_eq(v, x) : -1;
}
static int t_ne(jctx *c, jv v, jargs *a) {
    jv x;
    return arg1(c, a, "ne", &x) ? !jv_eq(v, x) : -1;
}

static int ordered(jctx *c, jv v, jargs *a, const char *name, int op) {
    jv x;
    int r;
    if (!arg1(c, a, name, &x) || !jv_cmp(c, v, x, &r)) return -1;
    return op == OP_LT ? r < 0 : op == OP_LE ? r <= 0 : op == OP_GT ? r > 0 : r >= 0;
}
static int t_lt(jctx *c, jv v, jargs *a) { return ordered(c, v, a, "lt", OP_LT); }
static int t_le(jctx *c, jv v, jargs *a) { return ordered(c, v, a, "le", OP_LE); }
static int t_gt(jctx *c, jv v, jargs *a) { return ordered(c, v, a, "gt", OP_GT); }
static int t_ge(jctx *c, jv v, jargs *a) { return ordered(c, v, a, "ge", OP_GE); }

static int t_in(jctx *c, jv v, jargs *a) {
    jv seq;
    return arg1(c, a, "in", &seq) ? jv_contains(c, v, seq) : -1;
}

static int t_sameas(jctx *c, jv v, jargs *a) {
    jv x;
    if (!arg1(c, a, "sameas", &x)) return -1;
    if (v.t != x.t) return 0;
    return jv_heap(v) ? v.o == x.o : jv_eq(v, x);
}

static int cased(jctx *c, jv v, int upper) {
    jv s = jv_tostr(c, v);
    if (c->failed) return -1;
    jv u = ju_case(c, s, upper ? 'l' : 'u'); /* cased and unchanged by the other mapping's inverse */
    jv same = c->failed ? jv_none() : ju_case(c, s, upper ? 'u' : 'l');
    int r = !c->failed && jv_eq(same, s) && !jv_eq(u, s);
    jv_drop(c, s);
    jv_drop(c, u);
    jv_drop(c, same);
    return c->failed ? -1 : r;
}
static int t_lower(jctx *c, jv v, jargs *a) { NOARGS("lower"); return cased(c, v, 0); }
static int t_upper(jctx *c, jv v, jargs *a) { NOARGS("upper"); return cased(c, v, 1); }

static int t_filter(jctx *c, jv v, jargs *a) {
    NOARGS("filter");
    return v.t == JV_STR && jfilter_find(JSTR(v)->s, JSTR(v)->len) >= 0;
}
static int t_test(jctx *c, jv v, jargs *a) {
    NOARGS("test");
    return v.t == JV_STR && jtest_find(JSTR(v)->s, JSTR(v)->len) >= 0;
}

static const struct {
    const char *name;
    test_fn fn;
} TESTS[] = {
    {"boolean", t_boolean}, {"callable", t_callable}, {"defined", t_defined}, {"divisibleby", t_divisibleby},
    {"eq", t_eq}, {"equalto", t_eq}, {"==", t_eq}, {"escaped", t_escaped}, {"even", t_even}, {"false", t_false},
    {"filter", t_filter}, {"float", t_float}, {"ge", t_ge}, {">=", t_ge}, {"gt", t_gt}, {"greaterthan", t_gt},
    {">", t_gt}, {"in", t_in}, {"integer", t_integer}, {"iterable", t_iterable}, {"le", t_le}, {"<=", t_le},
    {"lower", t_lower}, {"lt", t_lt}, {"lessthan", t_lt}, {"<", t_lt}, {"mapping", t_mapping}, {"ne", t_ne},
    {"!=", t_ne}, {"none", t_none}, {"number", t_number}, {"odd", t_odd}, {"sameas", t_sameas},
    {"sequence", t_sequence}, {"string", t_string}, {"test", t_test}, {"true", t_true},
    {"undefined", t_undefined}, {"upper", t_upper},
};

int jtest_find(const char *name, size_t n) {
    for (size_t i = 0; i < sizeof TESTS / sizeof TESTS[0]; i++)
        if (strlen(TESTS[i].name) == n && !memcmp(TESTS[i].name, name, n)) return (int)i;
    return -1;
}

int jtest_apply(jctx *c, int id, jv in, jargs *a) {
    if (!jstep(c)) return -1;
    return TESTS[id].fn(c, in, a);
}
