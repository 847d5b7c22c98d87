/* Jinja statements -> syntax tree, following Jinja2's grammar.
 *
 * Statements: if/elif/else, for (targets, "if" filter, else), set (names,
 * tuples, namespace attributes, block set with filters), macro, call,
 * filter, with, break/continue, and transformers' generation tag. Unknown
 * tags (include, extends, block, import, do, ...) are syntax errors naming
 * the tag, as in Jinja2 without those features. */
#include <stdio.h>
#include <string.h>

#include "parser.h"

static int subparse(parser *P, jnodes *body, const char *const *ends);

/* assignment targets: name, name.attr (set only), or names separated by commas */
static int parse_targets(parser *P, jnodes *out, int allow_ns) {
    int parens = skip_op(P, OP_LPAREN);
    do {
        const jtok *t = cur(P);
        if (t->type != JT_NAME) return jp_fail(P, "expected a variable name to assign to"), 0;
        jnode *e = jp_node(P, JN_NAME);
        if (!e) return 0;
        e->s = t->s;
        e->n = t->n;
        adv(P);
        if (allow_ns && !out->n && skip_op(P, OP_DOT)) {
            if (cur(P)->type != JT_NAME) return jp_fail(P, "expected an attribute name after '.'"), 0;
            jnode *a = jp_node(P, JN_ATTR);
            if (!a) return 0;
            a->a = e;
            a->s = cur(P)->s;
            a->n = cur(P)->n;
            adv(P);
            return jp_push(P, out, a);
        }
        if (!jp_push(P, out, e)) return 0;
    } while (skip_op(P, OP_COMMA) && cur(P)->type == JT_NAME);
    if (parens && !jp_expect_op(P, OP_RPAREN, ")")) return 0;
    return 1;
}

static int end_block(parser *P) { return jp_expect_type(P, JT_BLOCK_END, "end of statement block"); }

/* a "{% endX %}" after subparse stopped at it */
static int end_tag(parser *P, const char *name) {
    if (!skip_name(P, name)) {
        char b[64];
        return jp_fail(P, "expected '%s', got %s", name, jp_tok_desc(cur(P), b, sizeof b)), 0;
    }
    return end_block(P);
}

/* macro and call-block parameters: (a, b=default, ...) */
static int parse_params(parser *P, jnode *m) {
    if (!skip_op(P, OP_LPAREN)) return 1;
    while (!skip_op(P, OP_RPAREN)) {
        if (m->t.n && !jp_expect_op(P, OP_COMMA, ",")) return 0;
        if (skip_op(P, OP_RPAREN)) break;
        if (cur(P)->type != JT_NAME) return jp_fail(P, "expected a parameter name"), 0;
        jnode *p = jp_node(P, JN_NAME), *d = NULL;
        if (!p) return 0;
        p->s = cur(P)->s;
        p->n = cur(P)->n;
        adv(P);
        if (skip_op(P, OP_ASSIGN) && !(d = jp_expr(P, 1))) return 0;
        if (!d && m->w.n && m->w.v[m->w.n - 1]) return jp_fail(P, "non-default argument follows default argument"), 0;
        if (!jp_push(P, &m->t, p) || !jp_push_slot(P, &m->w, d)) return 0;
    }
    return 1;
}

static const char *const END_IF[] = {"elif", "else", "endif", NULL};
static const char *const END_FOR[] = {"else", "endfor", NULL};

static jnode *parse_statement(parser *P) {
    const jtok *t = cur(P);
    if (t->type != JT_NAME) return jp_fail(P, "tag name expected");
    jnode *e = jp_node(P, JN_IF);
    if (!e) return NULL;
    if (skip_name(P, "if")) {
        jnode *branch = e;
        for (;;) {
            if (!(branch->a = jp_tuple(P, 1, 0)) || !end_block(P) || !subparse(P, &branch->v, END_IF)) return NULL;
            if (skip_name(P, "elif")) {
                jnode *x = jp_node(P, JN_IF);
                if (!jp_push(P, &branch->w, x)) return NULL;
                branch = x;
                continue;
            }
            if (skip_name(P, "else")) {
                if (!end_block(P) || !subparse(P, &branch->w, END_IF + 2)) return NULL;
            }
            return end_tag(P, "endif") ? e : NULL;
        }
    }
    if (skip_name(P, "for")) {
        e->kind = JN_FOR;
        if (!parse_targets(P, &e->t, 0)) return NULL;
        if (!skip_name(P, "in")) return jp_fail(P, "expected 'in' in a for loop");
        if (!(e->b = jp_tuple(P, 0, 0))) return NULL;
        if (skip_name(P, "if") && !(e->c = jp_expr(P, 1))) return NULL;
        if (is_name(cur(P), "recursive")) return jp_fail(P, "recursive for loops are not supported");
        if (!end_block(P)) return NULL;
        P->loops++;
        int ok = subparse(P, &e->v, END_FOR);
        P->loops--;
        if (!ok) return NULL;
        if (skip_name(P, "else") && (!end_block(P) || !subparse(P, &e->w, END_FOR + 1))) return NULL;
        return end_tag(P, "endfor") ? e : NULL;
    }
    if (skip_name(P, "set")) {
        e->kind = JN_SET;
        if (!parse_targets(P, &e->t, 1)) return NULL;
        if (skip_op(P, OP_ASSIGN)) {
            if (!(e->a = jp_tuple(P, 1, 0))) return NULL;
            return end_block(P) ? e : NULL;
        }
        if (e->t.n != 1) return jp_fail(P, "a block set takes one target");
        e->kind = JN_SETBLOCK;
        while (skip_op(P, OP_PIPE))
            if (!jp_push(P, &e->w, jp_filter(P, NULL))) return NULL;
        static const char *const end[] = {"endset", NULL};
        if (!end_block(P) || !subparse(P, &e->v, end)) return NULL;
        return end_tag(P, "endset") ? e : NULL;
    }
    if (skip_name(P, "macro")) {
        e->kind = JN_MACRO;
        if (cur(P)->type != JT_NAME) return jp_fail(P, "expected a macro name");
        e->s = cur(P)->s;
        e->n = cur(P)->n;
        adv(P);
        jnode *outer = P->macro;
        int loops = P->loops;
        if (!parse_params(P, e) || !end_block(P)) return NULL;
        P->macro = e;
        P->loops = 0;
        static const char *const end[] = {"endmacro", NULL};
        int ok = subparse(P, &e->v, end);
        P->macro = outer;
        P->loops = loops;
        return ok && end_tag(P, "endmacro") ? e : NULL;
    }
    if (skip_name(P, "call")) {
        e->kind = JN_CALLBLOCK;
        if (is_op(cur(P), OP_LPAREN) && !parse_params(P, e)) return NULL;
        jnode *outer = P->macro;
        if (!(e->a = jp_expr(P, 1))) return NULL;
        if (e->a->kind != JN_CALL) return jp_fail(P, "expected a call after 'call'");
        if (!end_block(P)) return NULL;
        P->macro = e;
        static const char *const end[] = {"endcall", NULL};
        int ok = subparse(P, &e->v, end);
        P->macro = outer;
        return ok && end_tag(P, "endcall") ? e : NULL;
    }
    if (skip_name(P, "filter")) {
        e->kind = JN_FILTERBLOCK;
        do
            if (!jp_push(P, &e->w, jp_filter(P, NULL))) return NULL;
        while (skip_op(P, OP_PIPE));
        static const char *const end[] = {"endfilter", NULL};
        if (!end_block(P) || !subparse(P, &e->v, end)) return NULL;
        return end_tag(P, "endfilter") ? e : NULL;
    }
    if (skip_name(P, "with")) {
        e->kind = JN_WITH;
        while (cur(P)->type == JT_NAME) {
            jnode *nm = jp_node(P, JN_NAME);
            if (!nm) return NULL;
            nm->s = cur(P)->s;
            nm->n = cur(P)->n;
            adv(P);
            if (!jp_expect_op(P, OP_ASSIGN, "=") || !jp_push(P, &e->t, nm) || !jp_push(P, &e->w, jp_expr(P, 1))) return NULL;
            if (!skip_op(P, OP_COMMA)) break;
        }
        static const char *const end[] = {"endwith", NULL};
        if (!end_block(P) || !subparse(P, &e->v, end)) return NULL;
        return end_tag(P, "endwith") ? e : NULL;
    }
    if (skip_name(P, "generation")) { /* transformers' assistant-mask tag: renders its body */
        e->kind = JN_WITH;
        static const char *const end[] = {"endgeneration", NULL};
        if (!end_block(P) || !subparse(P, &e->v, end)) return NULL;
        return end_tag(P, "endgeneration") ? e : NULL;
    }
    if (is_name(t, "break") || is_name(t, "continue")) {
        e->kind = t->s[0] == 'b' ? JN_BREAK : JN_CONTINUE;
        if (!P->loops) return jp_fail(P, "'%s' outside of a loop", t->s[0] == 'b' ? "break" : "continue");
        adv(P);
        return end_block(P) ? e : NULL;
    }
    return jp_fail(P, "unknown or unsupported tag '%.*s'", (int)(t->n > 40 ? 40 : t->n), t->s);
}

static int in_list(const jtok *t, const char *const *names) {
    for (; names && *names; names++)
        if (is_name(t, *names)) return 1;
    return 0;
}

/* Template content up to a "{% name %}" with name in ends (left at name). */
static int subparse(parser *P, jnodes *body, const char *const *ends) {
    if (!jp_enter(P)) return 0;
    while (!P->failed) {
        const jtok *t = cur(P);
        if (t->type == JT_EOF) {
            if (ends) jp_fail(P, "unexpected end of template, expected '%s'", ends[0]);
            break;
        }
        if (t->type == JT_DATA) {
            jnode *d = jp_node(P, JN_DATA);
            if (!d) break;
            d->s = t->s;
            d->n = t->n;
            adv(P);
            jp_push(P, body, d);
        } else if (t->type == JT_VAR_BEGIN) {
            adv(P);
            jnode *o = jp_node(P, JN_OUTPUT);
            if (!o || !(o->a = jp_tuple(P, 1, 0)) || !jp_expect_type(P, JT_VAR_END, "end of print statement")) break;
            jp_push(P, body, o);
        } else if (t->type == JT_BLOCK_BEGIN) {
            adv(P);
            if (in_list(cur(P), ends)) {
                P->depth--;
                return 1;
            }
            jp_push(P, body, parse_statement(P));
        } else {
            char b[64];
            jp_fail(P, "unexpected %s", jp_tok_desc(t, b, sizeof b));
        }
    }
    P->depth--;
    return !P->failed;
}

int jinja_parse_tokens(jinja_template *t, const jtok *toks, size_t n, char *err, size_t errcap) {
    parser P = {t, toks, n, 0, err, errcap, 0, 0, 0, NULL};
    if (!subparse(&P, &t->body, NULL)) return -1;
    return 0;
}
