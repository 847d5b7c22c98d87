/* Jinja expressions -> syntax tree, following Jinja2's grammar.
 *
 * Precedence, loosest first (as Jinja2, which differs from Python: "**" is
 * left-associative and binds looser than unary minus):
 *   x if c else y;  or;  and;  not;  comparisons and in / not in;  + -;  ~;
 *   * / // %;  **;  unary - +;  postfix . [] () and the filter chain | is. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "parser.h"

jnode *jp_fail(parser *P, const char *fmt, ...) {
    if (!P->failed) {
        va_list ap;
        va_start(ap, fmt);
        jerr_format(P->err, P->errcap, P->tok[P->i < P->n ? P->i : P->n - 1].line, "syntax error: ", fmt, ap);
        va_end(ap);
    }
    P->failed = 1;
    return NULL;
}

const char *jp_tok_desc(const jtok *t, char *buf, size_t cap) {
    switch (t->type) {
    case JT_NAME: snprintf(buf, cap, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s); return buf;
    case JT_STRING: return "string";
    case JT_INT: case JT_FLOAT: return "number";
    case JT_VAR_END: return "end of print statement";
    case JT_BLOCK_END: return "end of statement block";
    case JT_EOF: return "end of template";
    case JT_OP: return "operator";
    default: return "template data";
    }
}

int jp_expect_op(parser *P, int op, const char *what) {
    if (skip_op(P, op)) return 1;
    char b[64];
    jp_fail(P, "expected '%s', got %s", what, jp_tok_desc(cur(P), b, sizeof b));
    return 0;
}

int jp_expect_type(parser *P, int type, const char *what) {
    if (cur(P)->type == type) {
        adv(P);
        return 1;
    }
    char b[64];
    jp_fail(P, "expected %s, got %s", what, jp_tok_desc(cur(P), b, sizeof b));
    return 0;
}

jnode *jp_node(parser *P, int kind) {
    jnode *e = ja_alloc(&P->t->arena, sizeof *e);
    if (!e) return jp_fail(P, "out of memory");
    e->kind = (uint8_t)kind;
    e->line = cur(P)->line;
    return e;
}

/* appends to a list kept in the arena (grown by copying); e may be NULL */
int jp_push_slot(parser *P, jnodes *l, jnode *e) {
    if ((l->n & (l->n - 1)) == 0) { /* n is 0 or a power of two: full */
        int cap = l->n ? l->n * 2 : 4;
        jnode **v = ja_alloc(&P->t->arena, sizeof *v * (size_t)cap);
        if (!v) return jp_fail(P, "out of memory"), 0;
        if (l->n) memcpy(v, l->v, sizeof *v * (size_t)l->n);
        l->v = v;
    }
    l->v[l->n++] = e;
    return 1;
}

int jp_push(parser *P, jnodes *l, jnode *e) { return e && jp_push_slot(P, l, e); }

int jp_enter(parser *P) {
    if (++P->depth > PMAX_DEPTH) {
        jp_fail(P, "template nested too deeply");
        return 0;
    }
    return 1;
}

/* call arguments after '(' up to ')' */
int jp_args(parser *P, jnodes *args) {
    while (!is_op(cur(P), OP_RPAREN)) {
        if (args->n && !jp_expect_op(P, OP_COMMA, ",")) return 0;
        if (is_op(cur(P), OP_RPAREN)) break;
        jnode *a;
        if (skip_op(P, OP_MUL)) {
            if ((a = jp_node(P, JN_STARARG))) a->a = jp_expr(P, 1);
        } else if (skip_op(P, OP_POW)) {
            if ((a = jp_node(P, JN_STARKW))) a->a = jp_expr(P, 1);
        } else if (cur(P)->type == JT_NAME && is_op(peek(P, 1), OP_ASSIGN)) {
            if ((a = jp_node(P, JN_KWARG))) {
                a->s = cur(P)->s;
                a->n = cur(P)->n;
                adv(P);
                adv(P);
                a->a = jp_expr(P, 1);
            }
        } else {
            a = jp_expr(P, 1);
        }
        if (P->failed || !jp_push(P, args, a)) return 0;
    }
    adv(P);
    return 1;
}

static jnode *parse_primary(parser *P) {
    const jtok *t = cur(P);
    jnode *e;
    if (t->type == JT_NAME) {
        if (!(e = jp_node(P, JN_CONST))) return NULL;
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            e->op = 1;
            e->i = t->s[0] == 't' || t->s[0] == 'T';
        } else if (is_name(t, "none") || is_name(t, "None")) {
            e->op = 0;
        } else {
            e->kind = JN_NAME;
            e->s = t->s;
            e->n = t->n;
            if (P->macro) {
                if (is_name(t, "varargs")) P->macro->flags |= JM_VARARGS;
                if (is_name(t, "kwargs")) P->macro->flags |= JM_KWARGS;
                if (is_name(t, "caller")) P->macro->flags |= JM_CALLER;
            }
        }
        adv(P);
        return e;
    }
    if (t->type == JT_STRING) {
        if (!(e = jp_node(P, JN_CONST))) return NULL;
        e->op = 4;
        e->s = t->s;
        e->n = t->n;
        adv(P);
        if (cur(P)->type == JT_STRING) { /* adjacent literals concatenate */
            size_t total = e->n;
            for (size_t k = P->i; k < P->n && P->tok[k].type == JT_STRING; k++) total += P->tok[k].n;
            char *s = ja_alloc(&P->t->arena, total + 1);
            if (!s) return jp_fail(P, "out of memory");
            memcpy(s, e->s, e->n);
            size_t o = e->n;
            while (cur(P)->type == JT_STRING) {
                memcpy(s + o, cur(P)->s, cur(P)->n);
                o += cur(P)->n;
                adv(P);
            }
            e->s = s;
            e->n = o;
        }
        return e;
    }
    if (t->type == JT_INT || t->type == JT_FLOAT) {
        if (!(e = jp_node(P, JN_CONST))) return NULL;
        e->op = t->type == JT_INT ? 2 : 3;
        e->i = t->i;
        e->f = t->f;
        adv(P);
        return e;
    }
    if (skip_op(P, OP_LPAREN)) return jp_tuple(P, 1, 1);
    if (is_op(t, OP_LBRACKET) || is_op(t, OP_LBRACE)) {
        int dict = t->op == OP_LBRACE;
        if (!(e = jp_node(P, dict ? JN_DICT : JN_LIST))) return NULL;
        adv(P);
        int close = dict ? OP_RBRACE : OP_RBRACKET;
        while (!is_op(cur(P), close)) {
            if (e->v.n && !jp_expect_op(P, OP_COMMA, ",")) return NULL;
            if (is_op(cur(P), close)) break;
            if (!jp_push(P, &e->v, jp_expr(P, 1))) return NULL;
            if (dict && (!jp_expect_op(P, OP_COLON, ":") || !jp_push(P, &e->v, jp_expr(P, 1)))) return NULL;
        }
        adv(P);
        return e;
    }
    char b[64];
    return jp_fail(P, "unexpected %s", jp_tok_desc(t, b, sizeof b));
}

/* [a], [a:b:c] after '[' */
static jnode *parse_subscript(parser *P, jnode *obj) {
    jnode *e = jp_node(P, JN_ITEM), *part[3] = {NULL, NULL, NULL};
    if (!e) return NULL;
    e->a = obj;
    int k = 0, is_slice = 0;
    for (;;) {
        if (!is_op(cur(P), OP_COLON) && !is_op(cur(P), OP_RBRACKET)) {
            if (!(part[k] = k == 0 && !is_slice ? jp_tuple(P, 1, 0) : jp_expr(P, 1))) return NULL;
        }
        if (k < 2 && skip_op(P, OP_COLON)) {
            is_slice = 1;
            k++;
            continue;
        }
        break;
    }
    if (!jp_expect_op(P, OP_RBRACKET, "]")) return NULL;
    if (is_slice) {
        e->kind = JN_SLICE;
        e->b = part[0];
        e->c = part[1];
        e->d = part[2];
    } else {
        e->b = part[0];
        if (!e->b) return jp_fail(P, "expected an expression in []");
    }
    return e;
}

static jnode *parse_postfix(parser *P, jnode *e) {
    while (e && !P->failed) {
        if (skip_op(P, OP_DOT)) {
            const jtok *t = cur(P);
            jnode *x = jp_node(P, t->type == JT_INT ? JN_ITEM : JN_ATTR);
            if (!x) return NULL;
            x->a = e;
            if (t->type == JT_INT) {
                if (!(x->b = jp_node(P, JN_CONST))) return NULL;
                x->b->op = 2;
                x->b->i = t->i;
            } else if (t->type == JT_NAME) {
                x->s = t->s;
                x->n = t->n;
            } else {
                return jp_fail(P, "expected an attribute name after '.'");
            }
            adv(P);
            e = x;
        } else if (skip_op(P, OP_LBRACKET)) {
            e = parse_subscript(P, e);
        } else if (is_op(cur(P), OP_LPAREN)) {
            jnode *x = jp_node(P, JN_CALL);
            if (!x) return NULL;
            adv(P);
            x->a = e;
            if (!jp_args(P, &x->v)) return NULL;
            e = x;
        } else {
            break;
        }
    }
    return P->failed ? NULL : e;
}

/* a dotted name (filters and tests may be "a.b") into e->s/e->n */
static int parse_dotted(parser *P, jnode *e) {
    const jtok *t = cur(P);
    if (t->type != JT_NAME) return jp_fail(P, "expected a filter or test name"), 0;
    e->s = t->s;
    e->n = t->n;
    adv(P);
    while (is_op(cur(P), OP_DOT) && peek(P, 1)->type == JT_NAME) {
        adv(P);
        e->n = (size_t)(cur(P)->s + cur(P)->n - e->s);
        adv(P);
    }
    return 1;
}

jnode *jp_filter(parser *P, jnode *in) {
    jnode *f = jp_node(P, JN_FILTER);
    if (!f || !parse_dotted(P, f)) return NULL;
    f->a = in;
    int id = jfilter_find(f->s, f->n);
    if (id < 0) return jp_fail(P, "no filter named '%.*s'", (int)(f->n > 40 ? 40 : f->n), f->s);
    f->i = id;
    if (skip_op(P, OP_LPAREN) && !jp_args(P, &f->v)) return NULL;
    return f;
}

static jnode *parse_test(parser *P, jnode *in) {
    jnode *t = jp_node(P, JN_TEST);
    if (!t) return NULL;
    t->a = in;
    if (skip_name(P, "not")) t->op = 1;
    if (!parse_dotted(P, t)) return NULL;
    int id = jtest_find(t->s, t->n);
    if (id < 0) return jp_fail(P, "no test named '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
    t->i = id;
    const jtok *c = cur(P);
    if (skip_op(P, OP_LPAREN)) {
        if (!jp_args(P, &t->v)) return NULL;
    } else if ((c->type == JT_NAME || c->type == JT_STRING || c->type == JT_INT || c->type == JT_FLOAT ||
                is_op(c, OP_LPAREN) || is_op(c, OP_LBRACKET) || is_op(c, OP_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) return jp_fail(P, "you cannot chain multiple tests with is");
        if (!jp_push(P, &t->v, parse_postfix(P, parse_primary(P)))) return NULL;
    }
    return t;
}

static jnode *parse_filter_expr(parser *P, jnode *e) {
    while (e && !P->failed) {
        if (skip_op(P, OP_PIPE)) e = jp_filter(P, e);
        else if (skip_name(P, "is")) e = parse_test(P, e);
        else if (is_op(cur(P), OP_LPAREN)) e = parse_postfix(P, e);
        else break;
    }
    return P->failed ? NULL : e;
}

static jnode *parse_unary(parser *P, int with_filter) {
    if (!jp_enter(P)) return NULL;
    jnode *e;
    if (is_op(cur(P), OP_SUB) || is_op(cur(P), OP_ADD)) {
        if ((e = jp_node(P, JN_UNARY))) {
            e->op = cur(P)->op == OP_SUB ? OP_NEG : OP_POS;
            adv(P);
            e->a = parse_unary(P, 0);
        }
    } else {
        e = parse_primary(P);
    }
    e = parse_postfix(P, P->failed ? NULL : e);
    if (with_filter) e = parse_filter_expr(P, e);
    P->depth--;
    return P->failed ? NULL : e;
}

static jnode *binop(parser *P, int op, jnode *l, jnode *r) {
    jnode *e = jp_node(P, JN_BINOP);
    if (!e || !l || !r) return NULL;
    e->op = (uint8_t)op;
    e->a = l;
    e->b = r;
    return e;
}

static jnode *parse_pow(parser *P) {
    jnode *e = parse_unary(P, 1);
    while (e && skip_op(P, OP_POW)) e = binop(P, OP_POW, e, parse_unary(P, 1));
    return e;
}

static jnode *parse_math2(parser *P) {
    jnode *e = parse_pow(P);
    while (e && cur(P)->type == JT_OP &&
           (cur(P)->op == OP_MUL || cur(P)->op == OP_DIV || cur(P)->op == OP_FLOORDIV || cur(P)->op == OP_MOD)) {
        int op = cur(P)->op;
        adv(P);
        e = binop(P, op, e, parse_pow(P));
    }
    return e;
}

static jnode *parse_concat(parser *P) {
    jnode *e = parse_math2(P);
    if (!e || !is_op(cur(P), OP_TILDE)) return e;
    jnode *c = jp_node(P, JN_CONCAT);
    if (!c || !jp_push(P, &c->v, e)) return NULL;
    while (skip_op(P, OP_TILDE))
        if (!jp_push(P, &c->v, parse_math2(P))) return NULL;
    return c;
}

static jnode *parse_math1(parser *P) {
    jnode *e = parse_concat(P);
    while (e && (is_op(cur(P), OP_ADD) || is_op(cur(P), OP_SUB))) {
        int op = cur(P)->op;
        adv(P);
        e = binop(P, op, e, parse_concat(P));
    }
    return e;
}

static jnode *parse_compare(parser *P) {
    jnode *e = parse_math1(P), *head = e, *last = NULL;
    while (e) {
        const jtok *t = cur(P);
        int op;
        if (t->type == JT_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LE ||
                                 t->op == OP_GT || t->op == OP_GE)) {
            op = t->op;
            adv(P);
        } else if (is_name(t, "in")) {
            op = OP_IN;
            adv(P);
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = OP_NOTIN;
            adv(P);
            adv(P);
        } else {
            break;
        }
        jnode *c = jp_node(P, JN_COMPARE);
        if (!c) return NULL;
        c->op = (uint8_t)op;
        c->b = parse_math1(P);
        if (!c->b) return NULL;
        if (!last) {
            c->a = head;
            head = c;
        } else {
            last->c = c; /* chained: c->a stays NULL, its left is last->b */
        }
        last = c;
    }
    return P->failed ? NULL : head;
}

static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        if (!jp_enter(P)) return NULL;
        jnode *e = jp_node(P, JN_UNARY);
        adv(P);
        if (e) {
            e->op = OP_NOT;
            e->a = parse_not(P);
        }
        P->depth--;
        return P->failed ? NULL : e;
    }
    return parse_compare(P);
}

static jnode *parse_logic(parser *P, int kind) {
    jnode *e = kind == JN_OR ? parse_logic(P, JN_AND) : parse_not(P);
    while (e && skip_name(P, kind == JN_OR ? "or" : "and")) {
        jnode *x = jp_node(P, kind);
        if (!x) return NULL;
        x->a = e;
        x->b = kind == JN_OR ? parse_logic(P, JN_AND) : parse_not(P);
        if (!x->b) return NULL;
        e = x;
    }
    return e;
}

jnode *jp_expr(parser *P, int with_cond) {
    if (!jp_enter(P)) return NULL;
    jnode *e = parse_logic(P, JN_OR);
    while (with_cond && e && skip_name(P, "if")) {
        jnode *x = jp_node(P, JN_COND);
        if (!x) break;
        x->b = e;
        x->a = parse_logic(P, JN_OR);
        if (skip_name(P, "else")) x->c = jp_expr(P, 1);
        e = P->failed ? NULL : x;
    }
    P->depth--;
    return P->failed ? NULL : e;
}

/* a, b, ... -> a tuple when a comma appears (or "()" in parentheses) */
jnode *jp_tuple(parser *P, int with_cond, int explicit_parens) {
    if (explicit_parens && skip_op(P, OP_RPAREN)) return jp_node(P, JN_TUPLE);
    jnode *first = jp_expr(P, with_cond);
    if (!first) return NULL;
    if (!is_op(cur(P), OP_COMMA)) {
        if (explicit_parens && !jp_expect_op(P, OP_RPAREN, ")")) return NULL;
        return first;
    }
    jnode *t = jp_node(P, JN_TUPLE);
    if (!t || !jp_push(P, &t->v, first)) return NULL;
    while (skip_op(P, OP_COMMA)) {
        const jtok *c = cur(P);
        if (c->type == JT_VAR_END || c->type == JT_BLOCK_END || is_op(c, OP_RPAREN) || is_name(c, "in") ||
            is_op(c, OP_ASSIGN))
            break;
        if (!jp_push(P, &t->v, jp_expr(P, with_cond))) return NULL;
    }
    if (explicit_parens && !jp_expect_op(P, OP_RPAREN, ")")) return NULL;
    return t;
}
