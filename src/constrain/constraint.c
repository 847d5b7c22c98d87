/* Constrained output at the token level: which tokens may come next, given
 * the JSON machine's state (json_machine.h), and the sampling that honours
 * it.
 *
 * A token may come next when some reading of the text survives all of its
 * bytes. Checking every token of a 150 000-token vocabulary byte by byte at
 * every step would cost milliseconds, so the mask takes three shortcuts,
 * each exact: a token whose first byte the state refuses is out; inside a
 * string, a token of plain string characters (no quote, backslash or
 * control byte, whole UTF-8 characters) is in when the string has room for
 * it; inside a think block, a token without '<' is in. Only the rest are
 * walked through the machine. A token with no bytes (a control token) may
 * come only where it ends the generation and the value is complete.
 *
 * Sampling masks only when it must: a greedy pick, or a draw without
 * truncation (no top-k, top-p or min-p), is first made from the unmasked
 * logits and kept when the constraint allows it. For greedy that is the
 * masked argmax; for a plain draw it is exact too: a draw from p kept when
 * in the allowed set A, else redrawn from p restricted to A, gives each
 * token of A the probability p(t) + (1 - p(A)) p(t) / p(A) = p(t) / p(A). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "json_machine.h"
#include "model.h"
#include "sampler.h"
#include "util.h"

enum { TT_PLAIN = 1, TT_LT = 2, TT_EOG = 4 };

struct dp_vocab_bytes {
    int n;
    uint32_t *off; /* token t: bytes[off[t] .. off[t + 1]) */
    uint8_t *bytes;
    uint8_t *flags;
    uint32_t *ncp; /* characters of a TT_PLAIN token */
};

void dp_vocab_bytes_free(struct dp_vocab_bytes *v) {
    if (!v) return;
    free(v->off);
    free(v->bytes);
    free(v->flags);
    free(v->ncp);
    free(v);
}

/* The characters of p[0 .. n) when they are whole, valid UTF-8 with no
 * byte a JSON string must escape; -1 otherwise. */
static int plain_chars(const uint8_t *p, int n) {
    int c = 0;
    for (int i = 0; i < n; c++) {
        const uint8_t b = p[i];
        if (b < 0x20 || b == '"' || b == '\\') return -1;
        int len = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
        if (!len || i + len > n) return -1;
        uint8_t lo = 0x80, hi = 0xBF;
        if (b == 0xE0) lo = 0xA0;
        else if (b == 0xED) hi = 0x9F;
        else if (b == 0xF0) lo = 0x90;
        else if (b == 0xF4) hi = 0x8F;
        for (int k = 1; k < len; k++, lo = 0x80, hi = 0xBF)
            if (p[i + k] < lo || p[i + k] > hi) return -1;
        i += len;
    }
    return c;
}

static struct dp_vocab_bytes *vocab_bytes_make(const dp_model *m) {
    const int n = m->info.n_vocab;
    struct dp_vocab_bytes *v = dp_calloc(1, sizeof *v);
    if (!v) return NULL;
    v->n = n;
    size_t cap = 16 * (size_t)n + 64, used = 0;
    v->off = dp_malloc(sizeof(uint32_t) * ((size_t)n + 1));
    v->bytes = dp_malloc(cap);
    v->flags = dp_calloc((size_t)n, 1);
    v->ncp = dp_calloc((size_t)n, sizeof(uint32_t));
    if (!v->off || !v->bytes || !v->flags || !v->ncp) goto fail;
    for (int t = 0; t < n; t++) {
        v->off[t] = (uint32_t)used;
        char buf[256];
        int len = dp_token_to_bytes(m, t, 0, buf, sizeof buf);
        if (len < 0) len = 0; /* beyond the tokenizer's vocabulary: never allowed */
        if (len > (int)sizeof buf) {
            dp_set_error(DP_ERR_FORMAT, "token %d stands for %d bytes, more than a constraint handles", t, len);
            goto fail;
        }
        if (used + (size_t)len > cap) {
            cap = 2 * cap + (size_t)len;
            uint8_t *nb = realloc(v->bytes, cap);
            if (!nb) {
                dp_set_error(DP_ERR_NOMEM, "out of memory");
                goto fail;
            }
            v->bytes = nb;
        }
        memcpy(v->bytes + used, buf, (size_t)len);
        used += (size_t)len;
        const int cp = len ? plain_chars((const uint8_t *)buf, len) : -1;
        if (cp >= 0) v->flags[t] |= TT_PLAIN, v->ncp[t] = (uint32_t)cp;
        if (memchr(buf, '<', (size_t)len)) v->flags[t] |= TT_LT;
        if (dp_token_is_eog(m, t)) v->flags[t] |= TT_EOG;
    }
    v->off[n] = (uint32_t)used;
    return v;
fail:
    dp_vocab_bytes_free(v);
    return NULL;
}

static pthread_mutex_t g_vb_mu = PTHREAD_MUTEX_INITIALIZER;

/* The model's table, made once (the model is shared by the server's threads). */
static const struct dp_vocab_bytes *vocab_bytes(const dp_model *m) {
    pthread_mutex_lock(&g_vb_mu);
    dp_model *mm = (dp_model *)m;
    if (!mm->vocab_bytes) mm->vocab_bytes = vocab_bytes_make(m);
    const struct dp_vocab_bytes *v = mm->vocab_bytes;
    pthread_mutex_unlock(&g_vb_mu);
    return v;
}

struct dp_constraint {
    const struct dp_vocab_bytes *vb;
    jschema S;
    jstate st;
    jstate scratch;
    uint8_t *allowed; /* the last mask, per token */
};

dp_constraint *dp_constraint_json(const dp_model *m, const char *schema, size_t len, int think) {
    if (think < DP_THINK_NONE || think > DP_THINK_INSIDE) {
        dp_set_error(DP_ERR_ARG, "constraint: think must be DP_THINK_NONE, DP_THINK_MAY_OPEN or DP_THINK_INSIDE");
        return NULL;
    }
    dp_constraint *c = dp_calloc(1, sizeof *c);
    if (!c) return NULL;
    char err[200];
    if (jschema_compile(&c->S, schema, schema ? len : 0, err, sizeof err)) {
        dp_set_error(DP_ERR_ARG, "json schema: %s", err);
        free(c);
        return NULL;
    }
    if (!(c->vb = vocab_bytes(m)) || !(c->allowed = dp_malloc((size_t)c->vb->n))) {
        dp_constraint_free(c);
        return NULL;
    }
    jm_start(&c->S, &c->st, think);
    return c;
}

int dp_json_schema_check(const char *schema, size_t len) {
    jschema S;
    char err[200];
    if (jschema_compile(&S, schema, schema ? len : 0, err, sizeof err))
        return dp_set_error(DP_ERR_ARG, "json schema: %s", err);
    jschema_free(&S);
    return DP_OK;
}

void dp_constraint_free(dp_constraint *c) {
    if (!c) return;
    jschema_free(&c->S);
    free(c->allowed);
    free(c);
}

/* Whether token t may come next (walked through the machine). */
static int token_walks(dp_constraint *c, int t) {
    const struct dp_vocab_bytes *v = c->vb;
    jm_copy(&c->scratch, &c->st);
    return jm_feed_bytes(&c->S, &c->scratch, v->bytes + v->off[t], (int)(v->off[t + 1] - v->off[t])) > 0;
}

static int token_allowed(dp_constraint *c, int t, const uint8_t *first_ok, const jm_view *view, int can_end) {
    const struct dp_vocab_bytes *v = c->vb;
    const uint32_t o = v->off[t], len = v->off[t + 1] - o;
    if (!len) return can_end && (v->flags[t] & TT_EOG);
    if (!first_ok[v->bytes[o]]) return 0;
    if (view->in_string && (v->flags[t] & TT_PLAIN)) return view->room < 0 || v->ncp[t] <= (uint32_t)view->room;
    if (view->in_think && !(v->flags[t] & TT_LT)) return 1;
    return token_walks(c, t);
}

/* Fills c->allowed; returns how many tokens are allowed. */
static int compute_mask(dp_constraint *c) {
    const int n = c->vb->n;
    uint8_t first_ok[256];
    for (int b = 0; b < 256; b++) {
        jm_copy(&c->scratch, &c->st);
        first_ok[b] = jm_feed(&c->S, &c->scratch, (uint8_t)b) > 0;
    }
    jm_view view;
    jm_look(&c->S, &c->st, &view);
    const int can_end = jm_can_end(&c->S, &c->st);
    int k = 0;
    for (int t = 0; t < n; t++) k += c->allowed[t] = (uint8_t)token_allowed(c, t, first_ok, &view, can_end);
    return k;
}

int dp_constraint_mask(dp_constraint *c, float *logits, int n_logits) {
    const int k = compute_mask(c);
    for (int t = 0; t < n_logits; t++)
        if (t >= c->vb->n || !c->allowed[t]) logits[t] = -INFINITY;
    return k;
}

int dp_constraint_allows(dp_constraint *c, int32_t tok) {
    if (tok < 0 || tok >= c->vb->n) return 0;
    uint8_t first_ok[256];
    memset(first_ok, 1, sizeof first_ok);
    const jm_view view = {.room = -1}; /* no shortcuts: the token is walked */
    return token_allowed(c, tok, first_ok, &view, jm_can_end(&c->S, &c->st));
}

int32_t dp_constraint_sample(dp_constraint *c, dp_sampler *s, float *logits, int n_logits) {
    const dp_sampler_params *p = dp_sampler_params_of(s);
    const int untruncated = (p->top_k <= 0 || p->top_k >= n_logits) && p->top_p >= 1.0f && p->min_p <= 0;
    if (p->temp <= 0 || untruncated) {
        const int32_t t = dp_sampler_sample(s, logits);
        if (dp_constraint_allows(c, t)) return t;
    }
    if (!dp_constraint_mask(c, logits, n_logits))
        return dp_set_error(DP_ERR_ARG, "constraint: no token can continue the text (the vocabulary lacks the bytes)");
    return dp_sampler_sample(s, logits);
}

int dp_constraint_accept(dp_constraint *c, int32_t tok) {
    if (!dp_constraint_allows(c, tok)) return dp_set_error(DP_ERR_ARG, "constraint: token %d cannot come here", tok);
    const struct dp_vocab_bytes *v = c->vb;
    const uint32_t o = v->off[tok], len = v->off[tok + 1] - o;
    if (len) jm_feed_bytes(&c->S, &c->st, v->bytes + o, (int)len);
    return DP_OK;
}

int dp_constraint_done(const dp_constraint *c) { return jm_done(&c->S, &c->st); }
