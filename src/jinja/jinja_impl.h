/* Private layout of the Jinja interpreter, shared by the files of src/jinja.
 *
 *   lexer.c    template text -> tokens (delimiters, whitespace control)
 *   parser.c   tokens -> syntax tree: statements; parse_expr.c: expressions
 *   value.c    values: reference-counted heap objects, Python semantics of
 *              truth, equality, ordering and str()/repr()
 *   pystr.c    Python string operations on UTF-8 (code points, strip, split,
 *              case mapping), float repr, JSON encoding
 *   eval.c     expressions: operators, attribute/item access, calls
 *   exec.c     statements, scopes, macros, loops, the render entry point
 *   filters.c  filters; tests.c tests; methods.c str/dict methods, globals
 *
 * Values follow Python: a render owns every heap object it made through a
 * list in the context, so objects left in reference cycles (a namespace
 * holding itself) are still freed at the end. Errors set c->failed and a
 * message; every caller checks it after evaluating a child. */
#ifndef DP_JINJA_IMPL_H
#define DP_JINJA_IMPL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "jinja.h"

/* ------------------------------------------------------------------ tokens */

enum {
    JT_DATA, JT_VAR_BEGIN, JT_VAR_END, JT_BLOCK_BEGIN, JT_BLOCK_END,
    JT_NAME, JT_STRING, JT_INT, JT_FLOAT, JT_OP, JT_EOF
};

enum {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_TILDE,
    OP_LPAREN, OP_RPAREN, OP_LBRACKET, OP_RBRACKET, OP_LBRACE, OP_RBRACE,
    OP_COMMA, OP_DOT, OP_COLON, OP_PIPE, OP_ASSIGN, OP_EQ, OP_NE, OP_LT, OP_LE,
    OP_GT, OP_GE, OP_SEMI,
    /* not lexed: comparison and unary operators of the tree */
    OP_IN, OP_NOTIN, OP_NOT, OP_NEG, OP_POS
};

typedef struct {
    uint8_t type, op;
    int line;
    const char *s; /* name, decoded string literal, data text */
    size_t n;
    int64_t i;
    double f;
} jtok;

/* arena of a template: nodes, token texts, decoded strings */
typedef struct jarena_blk jarena_blk;
typedef struct {
    jarena_blk *head;
} jarena;
void *ja_alloc(jarena *a, size_t n); /* zeroed; NULL when out of memory */
void ja_free(jarena *a);

/* Tokenizes src (newlines already normalized) into *toks (malloc'ed). */
int jinja_lex(jarena *a, const char *src, size_t n, jtok **toks, size_t *ntoks, char *err, size_t errcap);

/* ------------------------------------------------------------------- nodes */

enum {
    /* expressions */
    JN_CONST, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
    JN_BINOP, JN_UNARY, JN_AND, JN_OR, JN_COMPARE, JN_CONCAT, JN_COND, JN_KWARG, JN_STARARG, JN_STARKW,
    /* statements */
    JN_DATA, JN_OUTPUT, JN_IF, JN_FOR, JN_SET, JN_SETBLOCK, JN_MACRO, JN_CALLBLOCK, JN_FILTERBLOCK, JN_WITH,
    JN_BREAK, JN_CONTINUE
};

typedef struct jnode jnode;
typedef struct {
    jnode **v;
    int n;
} jnodes;

/* The meaning of the fields by kind:
 *   CONST     val kind in op (0 none, 1 bool, 2 int, 3 float, 4 str): i, f, s
 *   NAME      s;  ATTR a.s;  ITEM a[b];  SLICE a[b:c:d] (NULL = absent)
 *   LIST/TUPLE/DICT  v (DICT: key, value, key, value ...)
 *   CALL      a(v)   FILTER  a|s(v) with i = filter id   TEST  a is s(v), i = id, op = 1 for "is not"
 *   BINOP     a op b;  UNARY op a;  AND/OR a, b;  CONCAT v;  COND b if a else c
 *   COMPARE   a op b, chained (a < b < c) through c: a COMPARE whose a is NULL (left = previous b)
 *   KWARG     s=a;  STARARG *a;  STARKW **a
 *   DATA      s;  OUTPUT a;  IF a: v else w;  FOR targets t in b [if c]: v else w
 *   SET       targets t (ATTR for ns.x) = a;  SETBLOCK t = body v | filters w
 *   MACRO     s(params t, defaults w) body v, flags: uses varargs/kwargs/caller
 *   CALLBLOCK call(params t, defaults w) a; body v
 *   FILTERBLOCK  filters w over body v;  WITH targets t = values w, body v */
struct jnode {
    uint8_t kind, op;
    uint8_t flags;
    int line;
    jnode *a, *b, *c, *d;
    jnodes v, w, t;
    const char *s;
    size_t n;
    int64_t i;
    double f;
};

enum { JM_VARARGS = 1, JM_KWARGS = 2, JM_CALLER = 4 };

struct jinja_template {
    jarena arena;
    jnodes body;
};

int jinja_parse_tokens(jinja_template *t, const jtok *toks, size_t n, char *err, size_t errcap);

/* ------------------------------------------------------------------ values */

typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_LOOP, JV_FUNC, JV_SCOPE } jv_type;

typedef struct jobj jobj;
typedef struct {
    uint8_t t;
    union {
        int64_t i;   /* BOOL, INT */
        double f;    /* FLOAT */
        jobj *o;     /* heap kinds; UNDEF: NULL or the str of its error message */
    };
} jv;

struct jobj {
    jobj *prev, *next; /* the render's list of live objects */
    size_t bytes;
    int32_t rc;
    uint8_t kind;
    uint8_t depth; /* nesting of lists/dicts, bounded so recursion over values is */
};

typedef struct {
    jobj h;
    size_t len, ncp; /* bytes, code points */
    char s[];
} jstr;

typedef struct {
    jobj h;
    size_t n, cap;
    jv *v;
    uint8_t tuple;
} jlist;

typedef struct { /* DICT and NS (namespace) */
    jobj h;
    size_t n, cap;
    jv *k, *v;
} jdict;

typedef struct jscope jscope;
struct jscope { /* a frame of variables */
    jobj h;
    jscope *parent;
    size_t n, cap;
    const char **name;
    size_t *nlen;
    jv *v;
};

typedef struct {
    jobj h;
    int64_t index0, length, depth0;
    jv items; /* the list iterated */
} jloop;

enum { JF_BUILTIN, JF_METHOD, JF_MACRO };
typedef struct jctx jctx;
typedef struct jargs jargs;
typedef jv (*jbuiltin_fn)(jctx *c, jv self, jargs *a);
typedef struct {
    jobj h;
    uint8_t fkind;
    const char *name;
    jbuiltin_fn fn;   /* BUILTIN, METHOD */
    jv self;          /* METHOD: the bound object */
    const jnode *macro;
    jscope *closure;  /* MACRO: the scope it was defined in */
    jv caller;        /* MACRO from a call block: caller() */
} jfunc;

/* call arguments, evaluated */
struct jargs {
    jv *pos;
    int npos, cap_pos;
    const char **kwname;
    size_t *kwlen;
    jv *kw;
    int nkw, cap_kw;
    uint64_t used_kw; /* bit i: kw[i] consumed by jarg() */
    jv hold;          /* a **kwargs dict whose key strings kwname points into */
};

typedef struct {
    char *p;
    size_t n, cap;
} jbuf;

struct jctx {
    jobj live; /* sentinel of the list of live heap objects */
    size_t mem, max_mem, max_out;
    long steps, max_steps;
    int depth, calls, failed, line;
    char *err;
    size_t errcap;
    jbuf *out;
    jscope *globals; /* the render's variables */
    const struct tm *now;
};

#define JMAX_DEPTH 200    /* nested evaluation (C recursion) */
#define JMAX_NEST 48      /* nesting of lists/dicts */
#define JMAX_CALLS 64     /* nested macro calls */

/* "line N: <kind><message>" into err, on one line */
void jerr_format(char *err, size_t cap, int line, const char *kind, const char *fmt, va_list ap);
/* errors: record the first one; return a none value for convenience */
jv jerr(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jv jerr_undef(jctx *c, jv u); /* the error of using an undefined value */
int jstep(jctx *c);           /* counts a loop iteration / call; 0 = over the limit */

/* constructors */
static inline jv jv_undef(void) { jv v = {JV_UNDEF, {.o = NULL}}; return v; }
static inline jv jv_none(void) { jv v = {JV_NONE, {.i = 0}}; return v; }
static inline jv jv_bool(int b) { jv v = {JV_BOOL, {.i = b != 0}}; return v; }
static inline jv jv_int(int64_t i) { jv v = {JV_INT, {.i = i}}; return v; }
static inline jv jv_float(double f) { jv v = {JV_FLOAT, {.f = f}}; return v; }
static inline int jv_heap(jv v) { return v.t >= JV_STR || (v.t == JV_UNDEF && v.o); }
static inline jv jv_ref(jv v) { if (jv_heap(v)) v.o->rc++; return v; }
void jv_drop(jctx *c, jv v);

void *jobj_new(jctx *c, uint8_t kind, size_t bytes); /* rc 1; NULL (with error) over the memory limit */
int jmem_grow(jctx *c, jobj *o, void **p, size_t *cap, size_t need, size_t elem);
jv jv_str(jctx *c, const char *s, size_t n);
jv jv_cstr(jctx *c, const char *s);
jv jv_undef_msg(jctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
jv jv_list(jctx *c, size_t cap);
int jlist_push(jctx *c, jv list, jv item); /* takes item */
jv jv_dict(jctx *c, uint8_t kind);
int jdict_set(jctx *c, jv dict, jv key, jv val); /* takes key and val */
jv *jdict_get(jv dict, jv key);                  /* borrowed; NULL when absent */
jv *jdict_gets(jv dict, const char *s, size_t n);
jv jv_scope(jctx *c, jscope *parent);
int jscope_set(jctx *c, jscope *s, const char *name, size_t n, jv val); /* takes val */
jv *jscope_find(jscope *s, const char *name, size_t n);

#define JSTR(v) ((jstr *)(v).o)
#define JLIST(v) ((jlist *)(v).o)
#define JDICT(v) ((jdict *)(v).o)

int jv_truthy(jv v);
int jv_eq(jv a, jv b);
int jv_cmp(jctx *c, jv a, jv b, int *res); /* <0, 0, >0; 0 = error (unorderable) */
int jv_is_num(jv v);                      /* bool, int, float */
double jv_num(jv v);
const char *jv_typename(jv v);            /* Python's: 'str', 'list', 'dict', ... */
int jv_iter(jctx *c, jv v, jv *list);     /* iterable -> list (new ref); 0 = error */
size_t jv_length(jv v, int *ok);

/* Python str() and repr() appended to a buffer */
int jbuf_put(jctx *c, jbuf *b, const char *s, size_t n);
int jbuf_str(jctx *c, jbuf *b, jv v);
int jbuf_repr(jctx *c, jbuf *b, jv v);
jv jv_tostr(jctx *c, jv v); /* str(v) as a new string value (v itself when a str) */
jv jbuf_take(jctx *c, jbuf *b); /* the text as a str value; frees the buffer */
void jbuf_free(jctx *c, jbuf *b);
jv jv_from_json(jctx *c, const cJSON *j, int depth);

/* pystr.c: Python string operations on UTF-8 */
size_t ju_ncp(const char *s, size_t n);
size_t ju_offset(const char *s, size_t n, size_t cp); /* byte offset of code point cp */
uint32_t ju_decode(const char *s, size_t n, size_t *i);
int ju_isspace(uint32_t cp);
jv ju_strip(jctx *c, jv s, jv chars, int left, int right);
jv ju_split(jctx *c, jv s, jv sep, int64_t maxsplit, int right);
jv ju_splitlines(jctx *c, const char *s, size_t n, int keepends);
jv ju_case(jctx *c, jv s, int mode); /* 'u'pper, 'l'ower, 't'itle (str.title), 'c'apitalize */
jv ju_replace(jctx *c, jv s, jv old, jv new_, int64_t count);
int64_t ju_find(jv s, jv sub, int right); /* code point index or -1 */
void ju_float_repr(double f, char *out);  /* Python repr(float) */
int ju_json(jctx *c, jbuf *b, jv v, const char *indent, int level, const char *item_sep, const char *key_sep,
            int sort_keys, int ensure_ascii);
int ju_parse_int(const char *s, size_t n, int base, int64_t *out);
int ju_parse_float(const char *s, size_t n, double *out);

/* eval.c */
jv jeval(jctx *c, const jnode *e, jscope *s);
jv jgetattr(jctx *c, jv obj, const char *name, size_t n);
jv jgetitem(jctx *c, jv obj, jv key);
jv jcall(jctx *c, jv fn, jargs *a);
jv jbinop(jctx *c, int op, jv a, jv b);
int jv_contains(jctx *c, jv item, jv seq); /* Python's item in seq: 0/1, -1 error */
int jeval_args(jctx *c, const jnodes *nodes, jscope *s, jargs *a);
void jargs_free(jctx *c, jargs *a);
/* argument i by position or name (borrowed); dflt when absent */
jv jarg(jargs *a, int i, const char *name, jv dflt);
int jargs_check(jctx *c, jargs *a, const char *fn, int maxpos); /* unknown keyword / too many */

/* exec.c */
int jexec_body(jctx *c, const jnodes *body, jscope *s); /* 0 ok, 1 break, 2 continue, -1 error */
jv jcall_macro(jctx *c, jfunc *f, jargs *a);

/* filters.c, tests.c, methods.c */
int jfilter_find(const char *name, size_t n);
jv jfilter_apply(jctx *c, int id, jv in, jargs *a);
int jtest_find(const char *name, size_t n);
int jtest_apply(jctx *c, int id, jv in, jargs *a); /* 0/1, -1 error */
jv jmethod(jctx *c, jv obj, const char *name, size_t n, int *found); /* bound method or unsafe undefined */
jv jglobal(jctx *c, const char *name, size_t n);                     /* builtin global or undefined */
jv jv_func(jctx *c, const char *name, jbuiltin_fn fn, jv self);
jv jpercent(jctx *c, jv fmt, const jv *args, int nargs); /* Python's fmt % args */

#endif
