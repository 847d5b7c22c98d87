/* Jinja statements and the render entry point.
 *
 * Scopes follow Jinja2: a for loop runs each iteration in a fresh child
 * scope (so "set" inside a loop does not survive the iteration, which is why
 * templates use namespace()), a macro call runs in a child of the scope the
 * macro was defined in, "with" opens a child scope, and "if" opens none. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_impl.h"

static jscope *SC(jv v) { return (jscope *)v.o; }

/* unpacks value into the targets (names) of a for or set */
static int bind_targets(jctx *c, const jnodes *t, jscope *s, jv value) {
    if (t->n == 1) return jscope_set(c, s, t->v[0]->s, t->v[0]->n, value);
    jv l;
    if (!jv_iter(c, value, &l)) return jv_drop(c, value), 0;
    jv_drop(c, value);
    size_t n = JLIST(l)->n;
    if (n != (size_t)t->n) {
        jv_drop(c, l);
        if (n > (size_t)t->n) return jerr(c, "too many values to unpack (expected %d)", t->n), 0;
        return jerr(c, "not enough values to unpack (expected %d, got %zu)", t->n, n), 0;
    }
    for (int i = 0; i < t->n && !c->failed; i++) jscope_set(c, s, t->v[i]->s, t->v[i]->n, jv_ref(JLIST(l)->v[i]));
    jv_drop(c, l);
    return !c->failed;
}

static int exec_for(jctx *c, const jnode *e, jscope *s) {
    jv seq = jeval(c, e->b, s), items;
    if (c->failed) return -1;
    c->line = e->line;
    int ok = jv_iter(c, seq, &items);
    jv_drop(c, seq);
    if (!ok) return -1;
    if (e->c) { /* "for x in xs if cond": filter first, so loop.length counts what is kept */
        jv kept = jv_list(c, 0);
        for (size_t i = 0; i < JLIST(items)->n && !c->failed; i++) {
            jv sc = jv_scope(c, s);
            if (c->failed) break;
            jv it = jv_ref(JLIST(items)->v[i]);
            if (bind_targets(c, &e->t, SC(sc), jv_ref(it))) {
                jv t = jeval(c, e->c, SC(sc));
                if (!c->failed && jv_truthy(t)) jlist_push(c, kept, jv_ref(it));
                jv_drop(c, t);
            }
            jv_drop(c, it);
            jv_drop(c, sc);
        }
        jv_drop(c, items);
        items = kept;
        if (c->failed) return jv_drop(c, items), -1;
    }
    jloop *lp = jobj_new(c, JV_LOOP, sizeof *lp);
    if (!lp) return jv_drop(c, items), -1;
    jv loop = {JV_LOOP, {.o = &lp->h}};
    lp->items = items;
    lp->length = (int64_t)JLIST(items)->n;
    int r = 0, completed = 0;
    for (int64_t i = 0; i < lp->length && !c->failed; i++) {
        if (!jstep(c)) break;
        lp->index0 = i;
        jv sc = jv_scope(c, s);
        if (c->failed) break;
        if (bind_targets(c, &e->t, SC(sc), jv_ref(JLIST(items)->v[i])) &&
            jscope_set(c, SC(sc), "loop", 4, jv_ref(loop)))
            r = jexec_body(c, &e->v, SC(sc));
        jv_drop(c, sc);
        if (r == 1 || r < 0) break;
        completed |= r == 0;
        r = 0;
    }
    jv_drop(c, loop);
    if (c->failed) return -1;
    /* Jinja2 runs "else" unless some iteration reached the end of the body
     * (an iteration left by break or continue does not count) */
    if (!completed && e->w.n) return jexec_body(c, &e->w, s) < 0 ? -1 : 0;
    return 0;
}

static int exec_set(jctx *c, const jnode *e, jscope *s, jv value) {
    const jnode *t = e->t.v[0];
    if (t->kind == JN_ATTR) { /* {% set ns.attr = value %} */
        jv *ns = jscope_find(s, t->a->s, t->a->n);
        if (!ns || ns->t != JV_NS) {
            jv_drop(c, value);
            return jerr(c, "cannot assign attribute on non-namespace object"), -1;
        }
        if (t->s[0] == '_') { /* transformers' namespace refuses these */
            jv_drop(c, value);
            return jerr(c, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%.*s'.",
                        (int)(t->n > 64 ? 64 : t->n), t->s), -1;
        }
        jv key = jv_str(c, t->s, t->n);
        return jdict_set(c, *ns, key, value) ? 0 : -1;
    }
    return bind_targets(c, &e->t, s, value) ? 0 : -1;
}

/* output of a body into a string value */
static jv capture(jctx *c, const jnodes *body, jscope *s) {
    jbuf b = {0}, *saved = c->out;
    c->out = &b;
    int r = jexec_body(c, body, s);
    c->out = saved;
    if (r < 0) {
        jbuf_free(c, &b);
        return jv_none();
    }
    return jbuf_take(c, &b);
}

/* applies the filter nodes (their input is the value) */
static jv apply_filters(jctx *c, const jnodes *filters, jscope *s, jv v) {
    for (int i = 0; i < filters->n && !c->failed; i++) {
        const jnode *f = filters->v[i];
        jargs a = {0};
        jeval_args(c, &f->v, s, &a);
        c->line = f->line;
        jv r = c->failed ? jv_none() : jfilter_apply(c, (int)f->i, v, &a);
        jargs_free(c, &a);
        jv_drop(c, v);
        v = r;
    }
    return v;
}

static jv new_macro(jctx *c, const jnode *m, jscope *closure, const char *name) {
    jfunc *f = jobj_new(c, JV_FUNC, sizeof *f);
    if (!f) return jv_none();
    f->fkind = JF_MACRO;
    f->name = name;
    f->macro = m;
    f->closure = closure;
    closure->h.rc++;
    return (jv){JV_FUNC, {.o = &f->h}};
}

static int exec_callblock(jctx *c, const jnode *e, jscope *s) {
    jv caller = new_macro(c, e, s, "caller");
    jv fn = jeval(c, e->a->a, s);
    jargs a = {0};
    jeval_args(c, &e->a->v, s, &a);
    if (!c->failed && fn.t == JV_FUNC && ((jfunc *)fn.o)->fkind == JF_MACRO) {
        jfunc *f = (jfunc *)fn.o;
        jv saved = f->caller;
        f->caller = caller;
        c->line = e->line;
        jv r = jcall(c, fn, &a);
        f->caller = saved;
        if (!c->failed) jbuf_str(c, c->out, r);
        jv_drop(c, r);
    } else if (!c->failed) {
        jerr(c, "a call block needs a macro, not %s", jv_typename(fn));
    }
    jargs_free(c, &a);
    jv_drop(c, fn);
    jv_drop(c, caller);
    return c->failed ? -1 : 0;
}

static int exec_node(jctx *c, const jnode *e, jscope *s) {
    c->line = e->line;
    jv v;
    switch (e->kind) {
    case JN_DATA: return jbuf_put(c, c->out, e->s, e->n) ? 0 : -1;
    case JN_OUTPUT:
        v = jeval(c, e->a, s);
        if (!c->failed) jbuf_str(c, c->out, v);
        jv_drop(c, v);
        return c->failed ? -1 : 0;
    case JN_IF:
        v = jeval(c, e->a, s);
        if (c->failed) return -1;
        int t = jv_truthy(v);
        jv_drop(c, v);
        return jexec_body(c, t ? &e->v : &e->w, s);
    case JN_FOR: return exec_for(c, e, s);
    case JN_SET:
        v = jeval(c, e->a, s);
        if (c->failed) return -1;
        return exec_set(c, e, s, v);
    case JN_SETBLOCK:
        v = apply_filters(c, &e->w, s, capture(c, &e->v, s));
        if (c->failed) return jv_drop(c, v), -1;
        return exec_set(c, e, s, v);
    case JN_MACRO:
        v = new_macro(c, e, s, NULL);
        if (c->failed) return -1;
        ((jfunc *)v.o)->name = NULL;
        return jscope_set(c, s, e->s, e->n, v) ? 0 : -1;
    case JN_CALLBLOCK: return exec_callblock(c, e, s);
    case JN_FILTERBLOCK:
        v = apply_filters(c, &e->w, s, capture(c, &e->v, s));
        if (!c->failed) jbuf_str(c, c->out, v);
        jv_drop(c, v);
        return c->failed ? -1 : 0;
    case JN_WITH: {
        jv sc = jv_scope(c, s);
        for (int i = 0; i < e->t.n && !c->failed; i++)
            jscope_set(c, SC(sc), e->t.v[i]->s, e->t.v[i]->n, jeval(c, e->w.v[i], s));
        int r = c->failed ? -1 : jexec_body(c, &e->v, SC(sc));
        jv_drop(c, sc);
        return r;
    }
    case JN_BREAK: return 1;
    case JN_CONTINUE: return 2;
    default: jerr(c, "internal error: statement kind %d", e->kind); return -1;
    }
}

int jexec_body(jctx *c, const jnodes *body, jscope *s) {
    if (++c->depth > JMAX_DEPTH) {
        c->depth--;
        jerr(c, "template nested too deeply when rendering");
        return -1;
    }
    int r = 0;
    for (int i = 0; i < body->n && !r; i++) r = c->failed ? -1 : exec_node(c, body->v[i], s);
    c->depth--;
    return c->failed ? -1 : r;
}

static int name_is(const jnode *p, const char *s, size_t n) { return p->n == n && !memcmp(p->s, s, n); }

jv jcall_macro(jctx *c, jfunc *f, jargs *a) {
    const jnode *m = f->macro;
    const char *mname = m->kind == JN_MACRO ? m->s : "caller";
    int mlen = m->kind == JN_MACRO ? (int)m->n : 6;
    if (c->calls >= JMAX_CALLS) return jerr(c, "macro calls nested too deeply (over %d)", JMAX_CALLS);
    jv sc = jv_scope(c, f->closure);
    if (c->failed) return sc;
    jscope *s = SC(sc);
    int np = m->t.n;
    uint64_t bound = 0;
    jv varargs = jv_list(c, 0), kwargs = jv_dict(c, JV_DICT);
    if (!c->failed) JLIST(varargs)->tuple = 1;
    for (int i = 0; i < a->npos && !c->failed; i++) {
        if (i < np) {
            jscope_set(c, s, m->t.v[i]->s, m->t.v[i]->n, jv_ref(a->pos[i]));
            bound |= 1ull << (i < 63 ? i : 63);
        } else if (m->flags & JM_VARARGS) {
            jlist_push(c, varargs, jv_ref(a->pos[i]));
        } else {
            jerr(c, "macro '%.*s' takes not more than %d argument(s)", mlen, mname, np);
        }
    }
    jv caller = jv_ref(f->caller);
    for (int k = 0; k < a->nkw && !c->failed; k++) {
        int i;
        for (i = 0; i < np; i++)
            if (name_is(m->t.v[i], a->kwname[k], a->kwlen[k])) break;
        if (i < np) {
            if (i < 63 && (bound >> i & 1)) {
                jerr(c, "macro '%.*s' got multiple values for argument '%.*s'", mlen, mname, (int)a->kwlen[k],
                     a->kwname[k]);
                break;
            }
            jscope_set(c, s, m->t.v[i]->s, m->t.v[i]->n, jv_ref(a->kw[k]));
            if (i < 63) bound |= 1ull << i;
        } else if (a->kwlen[k] == 6 && !memcmp(a->kwname[k], "caller", 6) && (m->flags & JM_CALLER)) {
            jv_drop(c, caller);
            caller = jv_ref(a->kw[k]);
        } else if (m->flags & JM_KWARGS) {
            jdict_set(c, kwargs, jv_str(c, a->kwname[k], a->kwlen[k]), jv_ref(a->kw[k]));
        } else {
            jerr(c, "macro '%.*s' takes no keyword argument '%.*s'", mlen, mname, (int)a->kwlen[k], a->kwname[k]);
        }
    }
    for (int i = 0; i < np && !c->failed; i++) {
        if (i < 63 && (bound >> i & 1)) continue;
        const jnode *p = m->t.v[i];
        jv d = m->w.v[i] ? jeval(c, m->w.v[i], s)
                         : jv_undef_msg(c, "parameter '%.*s' was not provided", (int)(p->n > 64 ? 64 : p->n), p->s);
        jscope_set(c, s, p->s, p->n, d);
    }
    if (!c->failed) {
        jscope_set(c, s, "varargs", 7, varargs);
        jscope_set(c, s, "kwargs", 6, kwargs);
        varargs = kwargs = jv_none();
        if (caller.t != JV_UNDEF) {
            jscope_set(c, s, "caller", 6, caller);
            caller = jv_undef();
        }
    }
    jv_drop(c, varargs);
    jv_drop(c, kwargs);
    jv_drop(c, caller);
    c->calls++;
    jv r = c->failed ? jv_none() : capture(c, &m->v, s);
    c->calls--;
    jv_drop(c, sc);
    return r;
}

/* ----------------------------------------------------------------- entry */

static void sweep(jctx *c) {
    for (jobj *o = c->live.next, *nx; o != &c->live; o = nx) {
        nx = o->next;
        switch (o->kind) {
        case JV_LIST: free(((jlist *)o)->v); break;
        case JV_DICT: case JV_NS: free(((jdict *)o)->k); free(((jdict *)o)->v); break;
        case JV_SCOPE: free(((jscope *)o)->name); free(((jscope *)o)->nlen); free(((jscope *)o)->v); break;
        default: break;
        }
        free(o);
    }
    c->live.next = c->live.prev = &c->live;
}

char *jinja_render(const jinja_template *t, const cJSON *vars, const jinja_options *opt, size_t *out_len,
                   char *err, size_t errcap) {
    static char dummy[1];
    jctx c;
    memset(&c, 0, sizeof c);
    c.live.next = c.live.prev = &c.live;
    c.err = err ? err : dummy;
    c.errcap = err ? errcap : sizeof dummy;
    c.max_out = opt && opt->max_output ? opt->max_output : (size_t)16 << 20;
    c.max_steps = opt && opt->max_steps ? opt->max_steps : 4000000;
    c.max_mem = opt && opt->max_memory ? opt->max_memory : (size_t)256 << 20;
    c.now = opt ? opt->now : NULL;
    c.line = 1;
    jbuf out = {0};
    c.out = &out;
    jv g = jv_scope(&c, NULL);
    if (!c.failed) {
        c.globals = SC(g);
        const cJSON *e;
        if (vars && cJSON_IsObject(vars))
            cJSON_ArrayForEach(e, vars) if (!c.failed) jscope_set(&c, c.globals, e->string, strlen(e->string),
                                                                  jv_from_json(&c, e, 1));
        if (!c.failed) jexec_body(&c, &t->body, c.globals);
    }
    sweep(&c);
    if (c.failed) {
        free(out.p);
        return NULL;
    }
    if (!out.p && !(out.p = calloc(1, 1))) {
        snprintf(c.err, c.errcap, "out of memory");
        return NULL;
    }
    if (out_len) *out_len = out.n;
    return out.p;
}

jinja_template *jinja_parse(const char *src, size_t len, char *err, size_t errcap) {
    jinja_template *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errcap, "out of memory");
        return NULL;
    }
    /* newlines normalized to \n and one trailing newline dropped, as Jinja2 does */
    char *s = ja_alloc(&t->arena, len + 1);
    if (!s) {
        snprintf(err, errcap, "out of memory");
        jinja_free(t);
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    jtok *toks = NULL;
    size_t nt = 0;
    if (jinja_lex(&t->arena, s, n, &toks, &nt, err, errcap) || jinja_parse_tokens(t, toks, nt, err, errcap)) {
        free(toks);
        jinja_free(t);
        return NULL;
    }
    free(toks);
    return t;
}

void jinja_free(jinja_template *t) {
    if (!t) return;
    ja_free(&t->arena);
    free(t);
}
