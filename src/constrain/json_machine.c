/* The byte machine of constrained JSON output (json_machine.h).
 *
 * A reading of the text is a stack of frames, one per value being written
 * (the root at the bottom). Where the next byte could mean more than one
 * thing (an anyOf, an optional member's key, a number or an enum value that
 * may end or go on) the reading splits into several; readings that refuse a
 * byte die. Completed values pop their frame, so a parent always waits in
 * its "after" phase for its child. */
#include <string.h>

#include "json_machine.h"

enum {
    P_VALUE,      /* whitespace, then the value's first byte */
    P_OBJ_OPEN,   /* after '{' */
    P_OBJ_KEY,    /* after a member's key: ':' */
    P_OBJ_AFTER,  /* after a member's value: ',' or '}' */
    P_OBJ_NEXT,   /* after ',': the next key */
    P_ARR_OPEN,   /* after '[' */
    P_ARR_AFTER,  /* after an item: ',' or ']' */
    P_ARR_NEXT,   /* after ',': the next item */
    P_STR,        /* inside a string */
    P_STR_ESC,    /* after a backslash */
    P_STR_U,      /* inside \uXXXX */
    P_NUM_SIGN,   /* '-' */
    P_NUM_ZERO,   /* the integer part is 0 */
    P_NUM_INT,    /* in the integer part */
    P_NUM_DOT,    /* '.' */
    P_NUM_FRAC,   /* in the fraction */
    P_NUM_E,      /* 'e' */
    P_NUM_ESIGN,  /* the exponent's sign */
    P_NUM_EXP,    /* in the exponent */
    P_LIT,        /* in one of the literals lits[i .. j), k bytes matched */
    P_KEY,        /* in member i's key (node: the object), k bytes matched */
    P_THINK_OPT,  /* the text may open with <think> */
    P_THINK_OPEN, /* k bytes of "<think>" */
    P_THINK_IN,   /* inside the block, k bytes of "</think>" matched */
    P_BEFORE,     /* k bytes of S->before */
    P_AFTER,      /* k bytes of S->after; i values before this one (the bottom frame) */
    P_AGAIN,      /* i values written, each between S->before and S->after: whitespace, the end, or another */
    P_FREE,       /* free text (the bottom frame), i blocks written, k bytes of S->before matched */
    P_LAZY,       /* S->lazy (the bottom frame): nothing but whitespace yet */
    P_TEXT,       /* S->lazy: free text, any byte from here on */
    P_TRAIL,      /* S->lazy: after the value, whitespace before the end */
};

enum { MAX_EPS = 64 }; /* moves without a byte (anyOf, a value's end) in one feed */

static const char OPEN_TAG[] = "<think>", CLOSE_TAG[] = "</think>";

static void copy_stack(jstack *d, const jstack *s) {
    d->depth = s->depth;
    memcpy(d->f, s->f, sizeof(jframe) * (size_t)s->depth);
}

void jm_copy(jstate *dst, const jstate *src) {
    dst->n = src->n;
    for (int i = 0; i < src->n; i++) copy_stack(&dst->s[i], &src->s[i]);
}

static int same_stack(const jstack *a, const jstack *b) {
    return a->depth == b->depth && !memcmp(a->f, b->f, sizeof(jframe) * (size_t)a->depth);
}

/* Adds a reading to out unless it is there already (or out is full: the
 * readings beyond JM_STACKS are dropped, which narrows, never widens). */
static void emit(jstate *out, const jstack *t) {
    for (int i = 0; i < out->n; i++)
        if (same_stack(&out->s[i], t)) return;
    if (out->n < JM_STACKS) copy_stack(&out->s[out->n++], t);
}

static int push(jstack *t, int node, int ph) {
    if (t->depth >= JM_DEPTH) return 0;
    t->f[t->depth++] = (jframe){.node = node, .ph = (uint8_t)ph};
    return 1;
}

static int is_ws(uint8_t b) { return b == ' ' || b == '\t' || b == '\n' || b == '\r'; }
static int is_digit(uint8_t b) { return b >= '0' && b <= '9'; }

/* No member from index `from` on is required. */
static int rest_optional(const jschema *S, const jnode *nd, int from) {
    for (int i = from; i < nd->n; i++)
        if (S->props[nd->first + i].required) return 0;
    return 1;
}

static void feed(const jschema *S, jstack *t, uint8_t b, jstate *out, int eps);

/* The top value ended before b: b belongs to its parent. */
static void end_then(const jschema *S, jstack *t, uint8_t b, jstate *out, int eps) {
    t->depth--;
    feed(S, t, b, out, eps + 1);
}

/* A member key begins (the '"' was b): one reading per member that may come next. */
static void key_start(const jschema *S, jstack *t, const jnode *nd, jstate *out) {
    jframe *f = &t->f[t->depth - 1];
    if (!nd->n) {
        if (nd->extra < 0) return; /* only {} */
        f->ph = P_OBJ_KEY;
        f->ws = 0;
        if (push(t, S->g_str, P_STR)) emit(out, t);
        return;
    }
    for (int m = f->i; m < nd->n; m++) {
        jstack u;
        copy_stack(&u, t);
        jframe *g = &u.f[u.depth - 1];
        g->ph = P_OBJ_KEY;
        g->ws = 0;
        g->i = m;
        if (push(&u, g->node, P_KEY)) {
            u.f[u.depth - 1].i = m;
            u.f[u.depth - 1].k = 1;
            emit(out, &u);
        }
        if (S->props[nd->first + m].required) break;
    }
}

static void literal_byte(const jschema *S, jstack *t, uint8_t b, jstate *out, int eps) {
    jframe *f = &t->f[t->depth - 1];
    const int k = f->k;
    if (S->lits[f->i].len == k) { /* one literal is complete: b may follow it */
        jstack u;
        copy_stack(&u, t);
        end_then(S, &u, b, out, eps);
    }
    int lo = f->j, hi = f->i;
    for (int x = f->i; x < f->j; x++)
        if (S->lits[x].len > k && (uint8_t)S->lits[x].s[k] == b) {
            if (x < lo) lo = x;
            hi = x + 1;
        }
    if (hi <= lo) return;
    f->i = lo, f->j = hi, f->k = k + 1;
    if (hi - lo == 1 && S->lits[lo].len == k + 1) t->depth--; /* complete, and nothing extends it */
    emit(out, t);
}

static void value_byte(const jschema *S, jstack *t, uint8_t b, jstate *out, int eps) {
    jframe *f = &t->f[t->depth - 1];
    const jnode *nd = &S->nodes[f->node];
    switch (nd->kind) {
    case JN_ANYOF:
        for (int a = 0; a < nd->n; a++) {
            jstack u;
            copy_stack(&u, t);
            u.f[u.depth - 1].node = S->alts[nd->first + a];
            feed(S, &u, b, out, eps + 1);
        }
        return;
    case JN_ANY:
        f->node = b == '{'                   ? S->g_obj
                  : b == '['                 ? S->g_arr
                  : b == '"'                 ? S->g_str
                  : b == '-' || is_digit(b)  ? S->g_num
                                             : S->g_lit;
        feed(S, t, b, out, eps + 1);
        return;
    case JN_OBJECT:
    case JN_ARRAY:
        if (b != (nd->kind == JN_OBJECT ? '{' : '[')) return;
        f->ph = nd->kind == JN_OBJECT ? P_OBJ_OPEN : P_ARR_OPEN;
        f->ws = 0, f->i = 0;
        emit(out, t);
        return;
    case JN_STRING:
        if (b != '"') return;
        f->ph = P_STR, f->i = 0, f->j = 0;
        emit(out, t);
        return;
    case JN_NUMBER:
    case JN_INTEGER:
        f->k = is_digit(b);
        if (b == '-') f->ph = P_NUM_SIGN;
        else if (b == '0') f->ph = P_NUM_ZERO;
        else if (is_digit(b)) f->ph = P_NUM_INT;
        else return;
        emit(out, t);
        return;
    case JN_LITERAL:
        f->ph = P_LIT, f->i = nd->first, f->j = nd->first + nd->n, f->k = 0;
        literal_byte(S, t, b, out, eps);
        return;
    }
}

static void string_byte(const jschema *S, jstack *t, uint8_t b, jstate *out) {
    jframe *f = &t->f[t->depth - 1];
    const jnode *nd = &S->nodes[f->node];
    if (f->j > 0) { /* a continuation byte; the first one's range depends on the lead */
        static const uint8_t LO[5] = {0x80, 0xA0, 0x80, 0x90, 0x80}, HI[5] = {0xBF, 0xBF, 0x9F, 0xBF, 0x8F};
        if (b < LO[f->aux] || b > HI[f->aux]) return;
        f->j--, f->aux = 0;
        emit(out, t);
        return;
    }
    if (b == '"') {
        if (f->i < nd->min) return;
        t->depth--;
        emit(out, t);
        return;
    }
    if (b < 0x20) return;
    if (nd->max >= 0 && f->i >= nd->max) return;
    if (b == '\\') {
        f->ph = P_STR_ESC;
    } else if (b >= 0x80) {
        if (b >= 0xC2 && b <= 0xDF) f->j = 1, f->aux = 0;
        else if (b == 0xE0) f->j = 2, f->aux = 1;
        else if (b == 0xED) f->j = 2, f->aux = 2;
        else if (b >= 0xE1 && b <= 0xEF) f->j = 2, f->aux = 0;
        else if (b == 0xF0) f->j = 3, f->aux = 3;
        else if (b == 0xF4) f->j = 3, f->aux = 4;
        else if (b >= 0xF1 && b <= 0xF3) f->j = 3, f->aux = 0;
        else return;
        f->i++;
    } else {
        f->i++;
    }
    emit(out, t);
}

static int hex_val(uint8_t b) {
    return b >= '0' && b <= '9' ? b - '0' : b >= 'a' && b <= 'f' ? b - 'a' + 10 : b >= 'A' && b <= 'F' ? b - 'A' + 10 : -1;
}

static void number_byte(const jschema *S, jstack *t, uint8_t b, jstate *out, int eps) {
    jframe *f = &t->f[t->depth - 1];
    const int real = S->nodes[f->node].kind == JN_NUMBER, d = is_digit(b), e = real && (b == 'e' || b == 'E');
    int next = -1, can_end = 0;
    switch (f->ph) {
    case P_NUM_SIGN: next = b == '0' ? P_NUM_ZERO : d ? P_NUM_INT : -1; break;
    case P_NUM_ZERO: next = real && b == '.' ? P_NUM_DOT : e ? P_NUM_E : -1, can_end = 1; break;
    case P_NUM_INT: next = d ? P_NUM_INT : real && b == '.' ? P_NUM_DOT : e ? P_NUM_E : -1, can_end = 1; break;
    case P_NUM_DOT: next = d ? P_NUM_FRAC : -1; break;
    case P_NUM_FRAC: next = d ? P_NUM_FRAC : e ? P_NUM_E : -1, can_end = 1; break;
    case P_NUM_E: next = b == '+' || b == '-' ? P_NUM_ESIGN : d ? P_NUM_EXP : -1; break;
    case P_NUM_ESIGN: next = d ? P_NUM_EXP : -1; break;
    case P_NUM_EXP: next = d ? P_NUM_EXP : -1, can_end = 1; break;
    }
    if (next >= 0) {
        /* digits of the part b is in: a new part (after '.', 'e', a sign) starts at none */
        const int digits = next == (int)f->ph || (next == P_NUM_INT && f->ph == P_NUM_SIGN) ? f->k + 1 : d;
        const int cap = next == P_NUM_EXP ? JM_EXP_DIGITS : JM_DIGITS;
        if (digits > cap) return;
        f->k = digits, f->ph = (uint8_t)next;
        emit(out, t);
    } else if (can_end) {
        end_then(S, t, b, out, eps);
    }
}

/* Feeds b to the reading t (scratch: changed), adding what it becomes to out. */
static void feed(const jschema *S, jstack *t, uint8_t b, jstate *out, int eps) {
    if (!t->depth || eps > MAX_EPS) return; /* nothing follows a complete text */
    jframe *f = &t->f[t->depth - 1];
    const int ws = is_ws(b);
    switch (f->ph) {
    case P_VALUE:
        if (ws) break;
        value_byte(S, t, b, out, eps);
        return;
    case P_OBJ_OPEN:
    case P_OBJ_NEXT: {
        if (ws) break;
        const jnode *nd = &S->nodes[f->node];
        if (b == '}' && f->ph == P_OBJ_OPEN && rest_optional(S, nd, 0)) {
            t->depth--;
            emit(out, t);
        } else if (b == '"') {
            key_start(S, t, nd, out);
        }
        return;
    }
    case P_KEY: {
        const jprop *p = &S->props[S->nodes[f->node].first + f->i];
        if (b != (uint8_t)p->key[f->k]) return;
        if (++f->k == p->klen) t->depth--;
        emit(out, t);
        return;
    }
    case P_OBJ_KEY: {
        if (ws) break;
        if (b != ':') return;
        const jnode *nd = &S->nodes[f->node];
        f->ph = P_OBJ_AFTER, f->ws = 0;
        if (push(t, nd->n ? S->props[nd->first + f->i].node : nd->extra, P_VALUE)) emit(out, t);
        return;
    }
    case P_OBJ_AFTER: {
        if (ws) break;
        const jnode *nd = &S->nodes[f->node];
        if (b == ',' && (!nd->n || f->i + 1 < nd->n)) {
            f->ph = P_OBJ_NEXT, f->ws = 0, f->i = nd->n ? f->i + 1 : 0;
            emit(out, t);
        } else if (b == '}' && (!nd->n || rest_optional(S, nd, f->i + 1))) {
            t->depth--;
            emit(out, t);
        }
        return;
    }
    case P_ARR_OPEN:
    case P_ARR_NEXT:
    case P_ARR_AFTER: {
        if (ws) break;
        const jnode *nd = &S->nodes[f->node];
        if (f->ph == P_ARR_AFTER) {
            if (b == ',' && (nd->max < 0 || f->i < nd->max)) {
                f->ph = P_ARR_NEXT, f->ws = 0;
                emit(out, t);
            } else if (b == ']' && f->i >= nd->min) {
                t->depth--;
                emit(out, t);
            }
            return;
        }
        if (b == ']' && f->ph == P_ARR_OPEN) {
            if (nd->min == 0) {
                t->depth--;
                emit(out, t);
            }
            return;
        }
        if (nd->max == 0) return;
        f->ph = P_ARR_AFTER, f->ws = 0, f->i++;
        if (push(t, nd->items, P_VALUE)) feed(S, t, b, out, eps + 1);
        return;
    }
    case P_STR: string_byte(S, t, b, out); return;
    case P_STR_ESC:
        if (b == 'u') {
            f->ph = P_STR_U, f->aux = 0, f->j = 0;
        } else if (b && strchr("\"\\/bfnrt", b)) {
            f->ph = P_STR, f->i++;
        } else {
            return;
        }
        emit(out, t);
        return;
    case P_STR_U: {
        const int h = hex_val(b);
        if (h < 0) return;
        f->j = 16 * f->j + h;
        /* no surrogates (D800-DFFF, refused at their second digit, so that no
         * \u escape is begun that cannot end): a lone half is not Unicode */
        if (++f->aux == 2 && f->j >= 0xD8 && f->j <= 0xDF) return;
        if (f->aux == 4) f->ph = P_STR, f->aux = 0, f->j = 0, f->i++;
        emit(out, t);
        return;
    }
    case P_NUM_SIGN:
    case P_NUM_ZERO:
    case P_NUM_INT:
    case P_NUM_DOT:
    case P_NUM_FRAC:
    case P_NUM_E:
    case P_NUM_ESIGN:
    case P_NUM_EXP: number_byte(S, t, b, out, eps); return;
    case P_LIT: literal_byte(S, t, b, out, eps); return;
    case P_THINK_OPT:
        if (S->lazy) { /* the free text may begin with whitespace; a '<' then opens the block or is text */
            if (b == '<') f->ph = P_THINK_OPEN, f->k = 1;
            if (b == '<' || ws) emit(out, t);
            else end_then(S, t, b, out, eps);
            return;
        }
        if (ws) break;
        if (b == '<') { /* <think>, or the text that comes without one (a tool call's <tool_call>) */
            jstack u;
            copy_stack(&u, t);
            end_then(S, &u, b, out, eps);
            f->ph = P_THINK_OPEN, f->k = 1;
            emit(out, t);
        } else {
            end_then(S, t, b, out, eps);
        }
        return;
    case P_THINK_OPEN:
        if (b != (uint8_t)OPEN_TAG[f->k]) {
            /* S->lazy: not <think> but text that does not open with '{', as the reasoning split reads it */
            if (S->lazy) {
                t->f[--t->depth - 1].ph = P_TEXT;
                emit(out, t);
            }
            return;
        }
        if (++f->k == (int)sizeof OPEN_TAG - 1) f->ph = P_THINK_IN, f->k = 0;
        emit(out, t);
        return;
    case P_BEFORE:
    case P_AFTER: {
        const char *lit = f->ph == P_BEFORE ? S->before : S->after;
        if (ws && !f->k) break; /* whitespace before the text */
        if (b != (uint8_t)lit[f->k]) return;
        if (!lit[++f->k]) {
            if (f->ph == P_AFTER && t->depth == 1 && S->before && f->i + 1 < S->repeat) {
                f->ph = P_AGAIN, f->i++, f->k = 0, f->ws = 0; /* another value may follow */
            } else if (--t->depth && t->f[t->depth - 1].ph == P_FREE) {
                t->f[t->depth - 1].i++; /* a block of free text closed */
            } else if (t->depth) {
                t->f[t->depth - 1].ws = 0; /* the value may follow a line break */
            }
        }
        emit(out, t);
        return;
    }
    case P_FREE:
        if (b != (uint8_t)S->before[f->k]) {
            f->k = b == (uint8_t)S->before[0]; /* '<' is once in the text: a mismatch restarts at it or before */
        } else if (!S->before[++f->k]) { /* a block opens: its value, then the closing text */
            if (S->repeat > 0 && f->i >= S->repeat) return; /* no more blocks */
            f->k = 0;
            if (!push(t, -1, P_AFTER) || !push(t, S->root, P_VALUE)) return;
        }
        emit(out, t);
        return;
    case P_LAZY:
        if (ws) { /* as much as the model likes: the text is free until a byte decides it */
            emit(out, t);
        } else if (b != '{') {
            f->ph = P_TEXT;
            emit(out, t);
        } else { /* the value, from this byte on; whitespace after it, up to the end */
            f->ph = P_TRAIL, f->ws = 0;
            if (push(t, S->root, P_VALUE)) feed(S, t, b, out, eps + 1);
        }
        return;
    case P_TEXT: emit(out, t); return;
    case P_TRAIL:
        if (ws) break;
        return;
    case P_AGAIN:
        if (ws) break;
        if (b != (uint8_t)S->before[0]) return;
        /* the next value: its frames as jm_start makes them, b its text's first byte */
        f->ph = P_AFTER, f->k = 0;
        if (push(t, S->root, P_VALUE) && push(t, -1, P_BEFORE)) feed(S, t, b, out, eps + 1);
        return;
    case P_THINK_IN:
        if (b == (uint8_t)CLOSE_TAG[f->k]) {
            if (++f->k == (int)sizeof CLOSE_TAG - 1) t->f[--t->depth - 1].ws = 0; /* the value may follow a blank line */
        } else {
            f->k = b == '<'; /* '<' appears once in the tag: a mismatch restarts at it or before it */
        }
        emit(out, t);
        return;
    default: return;
    }
    /* whitespace where the phase allows it */
    if (++f->ws > JM_WS) return;
    emit(out, t);
}

void jm_start(const jschema *S, jstate *st, int think) {
    st->n = 1;
    jstack *t = &st->s[0];
    t->depth = 0;
    if (S->free_text) { /* think blocks are free text too */
        push(t, -1, P_FREE);
        return;
    }
    if (S->lazy) { /* free text may begin with whitespace, so may a think block (as the reasoning split takes it) */
        push(t, -1, P_LAZY);
        if (think) push(t, -1, think == 2 ? P_THINK_IN : P_THINK_OPT);
        return;
    }
    /* no whitespace before the value or the <think> that opens the text:
     * it is never needed, and a weak model can spend its tokens on it */
    if (S->after) push(t, -1, P_AFTER);
    push(t, S->root, P_VALUE);
    if (S->before) push(t, -1, P_BEFORE);
    if (think) push(t, -1, think == 2 ? P_THINK_IN : P_THINK_OPT);
    t->f[t->depth - 1].ws = JM_WS;
}

int jm_feed_to(const jschema *S, const jstate *src, uint8_t b, jstate *dst) {
    dst->n = 0;
    for (int i = 0; i < src->n; i++) {
        jstack t;
        copy_stack(&t, &src->s[i]);
        feed(S, &t, b, dst, 0);
    }
    return dst->n;
}

int jm_feed(const jschema *S, jstate *st, uint8_t b) {
    jstate nx;
    jm_feed_to(S, st, b, &nx);
    jm_copy(st, &nx);
    return st->n;
}

int jm_feed_bytes(const jschema *S, jstate *st, const uint8_t *p, int n) {
    for (int i = 0; i < n && st->n; i++) jm_feed(S, st, p[i]);
    return st->n;
}

/* A reading that may end here: the root is complete, or it is a number or
 * a literal that is complete as it stands. */
static int reading_can_end(const jschema *S, const jstack *t) {
    if (!t->depth) return 1;
    if (t->f[0].ph == P_LAZY) return 1; /* no value begun: free text, or a think block, which may end anywhere */
    if (t->depth > 1) return 0;
    const jframe *f = &t->f[0];
    switch (f->ph) {
    case P_NUM_ZERO:
    case P_NUM_INT:
    case P_NUM_FRAC:
    case P_NUM_EXP: return 1;
    case P_LIT: return S->lits[f->i].len == f->k;
    case P_AGAIN:
    case P_FREE:
    case P_TEXT:
    case P_TRAIL: return 1;
    default: return 0;
    }
}

int jm_can_end(const jschema *S, const jstate *st) {
    for (int i = 0; i < st->n; i++)
        if (reading_can_end(S, &st->s[i])) return 1;
    return 0;
}

int jm_done(const jschema *S, const jstate *st) {
    (void)S;
    for (int i = 0; i < st->n; i++)
        if (st->s[i].depth) return 0;
    return st->n > 0;
}

void jm_look(const jschema *S, const jstate *st, jm_view *v) {
    /* in a string when every reading is: a plain token then keeps alive each reading with room for it */
    int in_string = st->n > 0, room = 0;
    for (int r = 0; r < st->n && in_string; r++) {
        const jstack *t = &st->s[r];
        const jframe *f = t->depth ? &t->f[t->depth - 1] : NULL;
        if (!f || f->ph != P_STR || f->j) {
            in_string = 0;
        } else {
            const jnode *nd = &S->nodes[f->node];
            const int left = nd->max < 0 ? -1 : nd->max - f->i;
            room = room < 0 || left < 0 ? -1 : left > room ? left : room;
        }
    }
    v->in_string = in_string;
    v->room = in_string ? room : -1;
    const jframe *f = st->n == 1 && st->s[0].depth ? &st->s[0].f[st->s[0].depth - 1] : NULL;
    v->in_think = f && (f->ph == P_THINK_IN || f->ph == P_FREE || f->ph == P_TEXT) && !f->k;
}

int jm_any(const jstate *st) {
    for (int i = 0; i < st->n; i++)
        if (st->s[i].depth == 1 && st->s[i].f[0].ph == P_TEXT) return 1;
    return 0;
}
