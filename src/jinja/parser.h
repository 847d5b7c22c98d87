/* Private to the parser (parser.c: statements, parse_expr.c: expressions). */
#ifndef DP_JINJA_PARSER_H
#define DP_JINJA_PARSER_H

#include <string.h>

#include "jinja_impl.h"

#define PMAX_DEPTH 96 /* nested expressions and statements */

typedef struct {
    jinja_template *t;
    const jtok *tok;
    size_t n, i;
    char *err;
    size_t errcap;
    int failed, depth, loops;
    jnode *macro; /* innermost macro being parsed: its body's use of varargs/kwargs/caller */
} parser;

static inline const jtok *cur(parser *P) { return &P->tok[P->i]; }
static inline const jtok *peek(parser *P, int k) { return &P->tok[P->i + k < P->n ? P->i + k : P->n - 1]; }
static inline void adv(parser *P) { if (P->i + 1 < P->n) P->i++; }

static inline int is_op(const jtok *t, int op) { return t->type == JT_OP && t->op == op; }
static inline int is_name(const jtok *t, const char *s) {
    return t->type == JT_NAME && t->n == strlen(s) && !memcmp(t->s, s, t->n);
}
static inline int skip_op(parser *P, int op) {
    if (!is_op(cur(P), op)) return 0;
    adv(P);
    return 1;
}
static inline int skip_name(parser *P, const char *s) {
    if (!is_name(cur(P), s)) return 0;
    adv(P);
    return 1;
}


jnode *jp_fail(parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *jp_tok_desc(const jtok *t, char *buf, size_t cap);
int jp_expect_op(parser *P, int op, const char *what);
int jp_expect_type(parser *P, int type, const char *what);
jnode *jp_node(parser *P, int kind);
int jp_push_slot(parser *P, jnodes *l, jnode *e); /* e may be NULL */
int jp_push(parser *P, jnodes *l, jnode *e);      /* 0 when e is NULL */
int jp_enter(parser *P);                          /* one level deeper; 0 = too deep */

/* parse_expr.c */
jnode *jp_expr(parser *P, int with_cond);
jnode *jp_tuple(parser *P, int with_cond, int explicit_parens);
jnode *jp_filter(parser *P, jnode *in); /* after '|' */
int jp_args(parser *P, jnodes *args);   /* after '(' */

#endif
