#define _GNU_SOURCE
#include "generate.h"

#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "interrupt.h"

/* The next token from logits (n_vocab floats, not modified): with the
 * sampler, among the tokens cons allows when it is set. A dp_status (< 0)
 * when the constraint finds no token. */
static int32_t gen_pick(gen_state *g, const float *logits) {
    if (!g->cons) return dp_sampler_sample(g->smpl, logits);
    const int n_vocab = dp_model_get_info(g->m)->n_vocab;
    if (!g->work && !(g->work = malloc(sizeof(float) * (size_t)n_vocab))) cli_die(EXIT_RUNTIME, "out of memory");
    memcpy(g->work, logits, sizeof(float) * (size_t)n_vocab);
    return dp_constraint_sample(g->cons, g->smpl, g->work, n_vocab);
}

/* Under a constraint the engine draws (on the device where there is one,
 * which masks the logits there): the tokens as one batch whose last entry
 * has the sampler and the constraint; a chunk longer than a batch gives
 * its first tokens to dp_eval. */
static int eval_constrained(gen_state *g, const int32_t *toks, int n, int32_t *next) {
    int rc, nb = g->n_batch > 0 ? g->n_batch : 512;
    if (n > nb) {
        if ((rc = dp_eval(g->s, toks, n - 1))) return rc;
        toks += n - 1;
        n = 1;
    }
    dp_batch_entry *e = calloc((size_t)n, sizeof *e);
    int32_t *out = calloc((size_t)n, sizeof *out); /* a token per entry, the last one's drawn */
    if (!e || !out) cli_die(EXIT_RUNTIME, "out of memory");
    const int pos = dp_seq_pos(g->s, g->seq);
    for (int i = 0; i < n; i++) e[i] = (dp_batch_entry){.seq = g->seq, .pos = pos + i, .token = toks[i]};
    e[n - 1].sampler = g->smpl, e[n - 1].constraint = g->cons;
    rc = pos < 0 ? pos : dp_eval_batch(g->s, e, n, out);
    const int32_t t = out[n - 1];
    free(e);
    free(out);
    if (!rc && t < 0) rc = DP_ERR_ARG; /* no token can continue: dp_last_error says so */
    if (!rc) *next = t;
    return rc;
}

/* Evaluates tokens and picks the next one: on the device unless a debug
 * report needs the host logits. */
static int eval_next(gen_state *g, const int32_t *toks, int n, int32_t *next) {
    int rc;
    if (g->dbg && debug_wants_logits(g->dbg)) {
        rc = dp_eval(g->s, toks, n);
        if (!rc) {
            debug_step(g->dbg, g->m, dp_logits(g->s, -1), g->n_gen);
            int32_t t = gen_pick(g, dp_logits(g->s, -1));
            if (t < 0) rc = t;
            else *next = t;
        }
    } else if (g->cons) {
        rc = eval_constrained(g, toks, n, next);
    } else {
        rc = dp_eval_sample(g->s, toks, n, g->smpl, next);
    }
    if (rc == DP_ERR_STOPPED && g->dbg) debug_report_stop(g->dbg);
    return rc;
}

int gen_prefill(gen_state *g, const int32_t *toks, int n, int32_t *first) {
    int nb = g->n_batch > 0 ? g->n_batch : 512;
    if (cli_interrupted()) return GEN_INTERRUPTED;
    /* whole chunks first; the last one keeps at least two tokens, so the
     * session counts the prompt as prefill */
    while (n > nb + 1) {
        int rc = dp_eval(g->s, toks, nb);
        if (rc) return rc;
        toks += nb;
        n -= nb;
        if (cli_interrupted()) return GEN_INTERRUPTED;
    }
    return eval_next(g, toks, n, first);
}

static int grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    char *nb = realloc(*buf, c);
    if (!nb) cli_die(EXIT_RUNTIME, "out of memory");
    *buf = nb;
    *cap = c;
    return 0;
}

/* What the reasoning split decided, on the terminal: the reasoning dim (SGR
 * 2 ... 22), a blank line, then the answer. */
static int show_split(gen_state *g, sbuf *rs, sbuf *cs) {
    int rc = rs->oom || cs->oom ? -1 : 0;
    if (rs->n) {
        rc |= cli_emit("\033[2m", 4) | cli_emit(rs->s, rs->n) | cli_emit("\033[22m", 5);
        g->think_shown = 1;
    }
    if (cs->n && g->think_shown == 1) rc |= cli_emit("\n\n", 2), g->think_shown = 2;
    if (cs->n) rc |= cli_emit(cs->s, cs->n);
    sb_free(rs);
    sb_free(cs);
    return rc;
}

static int emit(gen_state *g, const char *s, size_t n) {
    if (!n) return 0;
    if (g->keep_text || g->quiet) {
        grow(&g->text, &g->cap, g->len + n + 1);
        memcpy(g->text + g->len, s, n);
        g->len += n;
        g->text[g->len] = 0;
    }
    if (g->quiet) return 0;
    if (!g->think) return cli_emit(s, n);
    sbuf rs = {0}, cs = {0};
    think_feed(&g->ts, s, n, &rs, &cs);
    return show_split(g, &rs, &cs);
}

/* Adds text; prints what can no longer be part of a stop string. Returns 1
 * when a stop string appeared (the text from it on is dropped), -1 on a
 * write error, else 0. */
static int feed(gen_state *g, const char *s, size_t n) {
    grow(&g->pend, &g->pend_cap, g->pend_len + n + 1);
    memcpy(g->pend + g->pend_len, s, n);
    g->pend_len += n;
    size_t cut = (size_t)-1;
    for (int k = 0; k < g->n_stop; k++) {
        const char *p = memmem(g->pend, g->pend_len, g->stop[k], strlen(g->stop[k]));
        if (p && (size_t)(p - g->pend) < cut) cut = (size_t)(p - g->pend);
    }
    if (cut != (size_t)-1) {
        int rc = emit(g, g->pend, cut);
        g->pend_len = 0;
        return rc < 0 ? -1 : 1;
    }
    size_t hold = 0;
    for (int k = 0; k < g->n_stop; k++) {
        size_t sl = strlen(g->stop[k]);
        if (!sl) continue;
        for (size_t h = sl - 1 < g->pend_len ? sl - 1 : g->pend_len; h > hold; h--)
            if (!memcmp(g->pend + g->pend_len - h, g->stop[k], h)) {
                hold = h;
                break;
            }
    }
    int rc = emit(g, g->pend, g->pend_len - hold);
    memmove(g->pend, g->pend + g->pend_len - hold, hold);
    g->pend_len = hold;
    return rc;
}

void gen_begin(gen_state *g) {
    g->dt = dp_detok_new(g->m, g->render_special);
    if (!g->dt) cli_die(EXIT_RUNTIME, "out of memory");
    g->n_gen = 0;
    g->fed = 0;
    g->stop_reason = "length";
    think_init(&g->ts, g->think == THINK_INSIDE);
    g->think_shown = 0;
}

int gen_take(gen_state *g, int32_t tok) {
    char buf[1024];
    if (g->n_predict >= 0 && g->n_gen >= g->n_predict) return 1;
    if (!g->ignore_eos && dp_token_is_eog(g->m, tok)) {
        g->stop_reason = "end of generation";
        return 1;
    }
    if (cli_interrupted()) {
        g->stop_reason = "interrupted";
        return 1;
    }
    dp_sampler_accept(g->smpl, tok);
    if (g->cons) dp_constraint_accept(g->cons, tok); /* drawn under it: allowed */
    int k = dp_detok_push(g->dt, tok, buf, sizeof buf);
    if (g->n_gen == g->toks_cap) {
        g->toks_cap = g->toks_cap ? 2 * g->toks_cap : 256;
        int32_t *nt = realloc(g->toks, sizeof(int32_t) * (size_t)g->toks_cap);
        if (!nt) cli_die(EXIT_RUNTIME, "out of memory");
        g->toks = nt;
    }
    g->toks[g->n_gen++] = tok;
    g->fed = feed(g, buf, (size_t)(k > (int)sizeof buf ? (int)sizeof buf : k));
    if (g->fed) {
        g->stop_reason = g->fed > 0 ? "stop string" : "write error";
        return 1;
    }
    if (g->cons && dp_constraint_done(g->cons)) { /* nothing may follow the value */
        g->stop_reason = "end of value";
        return 1;
    }
    if (g->n_predict >= 0 && g->n_gen >= g->n_predict) return 1;
    if (dp_seq_pos(g->s, g->seq) >= dp_session_ctx(g->s)) {
        g->stop_reason = "context full";
        return 1;
    }
    return 0;
}

void gen_end(gen_state *g) {
    char buf[1024];
    if (!g->fed) { /* the rest: held-back bytes, then the text kept for a stop string */
        int k = dp_detok_flush(g->dt, buf, sizeof buf);
        g->fed = feed(g, buf, (size_t)(k > (int)sizeof buf ? (int)sizeof buf : k));
        if (g->fed > 0) g->stop_reason = "stop string";
        else if (emit(g, g->pend, g->pend_len) < 0 || g->fed < 0) g->stop_reason = "write error";
        g->pend_len = 0;
    }
    if (g->think && !g->quiet) { /* what the split still holds */
        sbuf rs = {0}, cs = {0};
        think_flush(&g->ts, &rs, &cs);
        if (show_split(g, &rs, &cs) < 0) g->stop_reason = "write error";
    }
    dp_detok_free(g->dt);
    g->dt = NULL;
}

int gen_run(gen_state *g, int32_t tok) {
    int rc = 0;
    gen_begin(g);
    while (!gen_take(g, tok)) {
        int32_t cur = tok;
        if ((rc = eval_next(g, &cur, 1, &tok))) break;
    }
    gen_end(g);
    return rc;
}

void gen_free(gen_state *g) {
    dp_detok_free(g->dt);
    g->dt = NULL;
    free(g->text);
    free(g->pend);
    free(g->toks);
    free(g->work);
    g->work = NULL;
    g->toks = NULL;
    g->toks_cap = 0;
    g->text = g->pend = NULL;
    g->len = g->cap = g->pend_len = g->pend_cap = 0;
}
