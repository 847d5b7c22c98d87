/* Constrained output at the token level: which tokens may come next, given
 * the state of a byte machine, the JSON machine's (json_machine.h) or a
 * GBNF grammar's (gbnf.h), and the sampling that honours it.
 *
 * A token may come next when some reading of the text survives all of its
 * bytes. Checking every token of a 150 000-token vocabulary byte by byte at
 * every step would cost milliseconds, so the mask takes three shortcuts,
 * each exact: a token whose first byte the state refuses is out; inside a
 * string, a token of plain string characters (no quote, backslash or
 * control byte, whole UTF-8 characters) is in when the string has room for
 * it; inside a think block, a token without '<' is in. The rest are walked
 * through the machine in the byte order of their texts, so that a walk
 * starts from the state after the prefix it shares with the one before
 * (kept per byte), and a prefix the machine refuses rules out at once
 * every token that begins with it (where whitespace may come, the many
 * tokens that begin with a space mostly die at their second byte), as a
 * prefix after which any text may follow (free text that did not open a
 * value, dp_constraint_json_lazy) takes them all in. The string and think
 * shortcuts know the JSON machine's states and are left out for a grammar;
 * the first-byte pruning and the shared-prefix walk hold for any machine
 * (and a grammar's masks are kept by state: mask_cache.h). A
 * token with no bytes (a control token) may come only where it ends the
 * generation and the value is complete. The shortcuts also spare looking
 * at most tokens at all: the byte order keeps each first byte's tokens in
 * one range, skipped whole where the state refuses that byte, and in a
 * string with room for any plain token the plain ones are copied in at
 * once and only the others looked at.
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

#include "constrain.h"
#include "gbnf.h"
#include "json_machine.h"
#include "mask_cache.h"
#include "model.h"
#include "sampler.h"
#include "util.h"

enum { TT_PLAIN = 1, TT_LT = 2, TT_EOG = 4 };

enum { WALK_MAX = 64 }; /* longer tokens are walked from the state, not from a shared prefix */

/* Every token's bytes and facts, in the byte order of the texts (index i);
 * tok[i] is the token, pos[t] its index. */
struct dp_vocab_bytes {
    int n;
    uint32_t *off; /* bytes[off[i] .. off[i + 1]) */
    uint8_t *bytes;
    uint8_t *flags;
    uint32_t *ncp; /* characters of a TT_PLAIN token */
    uint8_t *lcp;  /* bytes i shares with i - 1 (at most 255; 0 for i = 0) */
    int32_t *tok, *pos;
    /* where a mask need not look: tokens of no bytes [start[0], start[1]),
     * of first byte b [start[b + 1], start[b + 2]); the TT_PLAIN tokens
     * (taken whole in a string with room for the longest, max_ncp
     * characters), and those with bytes but no '<' (taken whole in a think
     * block or free text) */
    uint32_t start[258];
    struct token_set {
        uint32_t *bits;   /* the tokens taken whole, as bits by token id */
        int n_in, n_rest;
        int32_t *rest;    /* the others' indices in byte order, */
        uint8_t *rest_lcp; /* each with the bytes it shares with the one before (the least lcp between them) */
    } plain, no_lt;
    uint32_t max_ncp;
    dp_mask_cache *masks; /* grammar states' masks, for every constraint on the model */
};

static void token_set_free(struct token_set *ts) {
    free(ts->bits);
    free(ts->rest);
    free(ts->rest_lcp);
}

void dp_vocab_bytes_free(struct dp_vocab_bytes *v) {
    if (!v) return;
    free(v->off);
    free(v->bytes);
    free(v->flags);
    free(v->ncp);
    free(v->lcp);
    free(v->tok);
    free(v->pos);
    token_set_free(&v->plain);
    token_set_free(&v->no_lt);
    mask_cache_free(v->masks);
    free(v);
}

static const struct dp_vocab_bytes *g_sort_vb;
static int by_bytes(const void *a, const void *b) {
    const struct dp_vocab_bytes *v = g_sort_vb;
    const int x = *(const int32_t *)a, y = *(const int32_t *)b;
    const uint32_t lx = v->off[x + 1] - v->off[x], ly = v->off[y + 1] - v->off[y];
    const int r = memcmp(v->bytes + v->off[x], v->bytes + v->off[y], lx < ly ? lx : ly);
    return r ? r : lx != ly ? (lx < ly ? -1 : 1) : x - y;
}

/* v's arrays (made in token order) put in byte order. */
static int vocab_sort(struct dp_vocab_bytes *v) {
    const int n = v->n;
    uint32_t *off = dp_malloc(sizeof(uint32_t) * ((size_t)n + 1)), *ncp = dp_malloc(sizeof(uint32_t) * (size_t)n);
    uint8_t *bytes = dp_malloc((size_t)v->off[n] + 1), *flags = dp_malloc((size_t)n), *lcp = dp_malloc((size_t)n);
    v->tok = dp_malloc(sizeof(int32_t) * (size_t)n);
    v->pos = dp_malloc(sizeof(int32_t) * (size_t)n);
    if (!off || !ncp || !bytes || !flags || !lcp || !v->tok || !v->pos) {
        free(off), free(ncp), free(bytes), free(flags), free(lcp);
        return -1;
    }
    for (int t = 0; t < n; t++) v->tok[t] = t;
    g_sort_vb = v; /* under g_vb_mu */
    qsort(v->tok, (size_t)n, sizeof(int32_t), by_bytes);
    uint32_t used = 0;
    for (int i = 0; i < n; i++) {
        const int t = v->tok[i];
        const uint32_t len = v->off[t + 1] - v->off[t];
        v->pos[t] = i;
        off[i] = used;
        memcpy(bytes + used, v->bytes + v->off[t], len);
        used += len;
        flags[i] = v->flags[t];
        ncp[i] = v->ncp[t];
        uint32_t k = 0;
        if (i) {
            const uint32_t lp = off[i] - off[i - 1];
            while (k < lp && k < len && k < 255 && bytes[off[i - 1] + k] == bytes[off[i] + k]) k++;
        }
        lcp[i] = (uint8_t)k;
    }
    off[n] = used;
    free(v->off), free(v->ncp), free(v->bytes), free(v->flags);
    v->off = off, v->ncp = ncp, v->bytes = bytes, v->flags = flags, v->lcp = lcp;
    return 0;
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

/* The tokens of v with all of the flags `with`, bytes, and none of `without`, as a token_set. */
static int token_set_make(const struct dp_vocab_bytes *v, struct token_set *ts, int with, int without) {
    const int n = v->n;
    ts->bits = dp_calloc((size_t)(n + 31) / 32, sizeof(uint32_t));
    ts->rest = dp_malloc(sizeof(int32_t) * (size_t)n);
    ts->rest_lcp = dp_malloc((size_t)n);
    if (!ts->bits || !ts->rest || !ts->rest_lcp) return -1;
    uint8_t least = 0;
    for (int i = 0; i < n; i++) {
        if (v->lcp[i] < least) least = v->lcp[i];
        if ((v->flags[i] & with) == with && !(v->flags[i] & without) && v->off[i + 1] > v->off[i]) {
            const int32_t t = v->tok[i];
            ts->bits[t >> 5] |= 1u << (t & 31);
            ts->n_in++;
        } else {
            ts->rest_lcp[ts->n_rest] = ts->n_rest ? least : 0;
            ts->rest[ts->n_rest++] = i;
            least = 255;
        }
    }
    return 0;
}

/* v's start ranges and token sets (after vocab_sort). */
static int vocab_index(struct dp_vocab_bytes *v) {
    const int n = v->n;
    int b = -1; /* the first byte of the range being filled (-1: no bytes) */
    v->start[0] = 0;
    for (int i = 0; i < n; i++) {
        const uint32_t len = v->off[i + 1] - v->off[i];
        const int fb = len ? v->bytes[v->off[i]] : -1;
        while (b < fb) v->start[++b + 1] = (uint32_t)i;
        if ((v->flags[i] & TT_PLAIN) && v->ncp[i] > v->max_ncp) v->max_ncp = v->ncp[i];
    }
    while (b < 256) v->start[++b + 1] = (uint32_t)n;
    return token_set_make(v, &v->plain, TT_PLAIN, 0) || token_set_make(v, &v->no_lt, 0, TT_LT) ? -1 : 0;
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
    if (vocab_sort(v) || vocab_index(v)) goto fail;
    v->masks = mask_cache_new((n + 31) / 32); /* without it, masks are walked every time */
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

enum { KEY_WORDS = 1024 }; /* longer keys (states of many long readings) are not kept */

/* The lock lets dp_eval_batch take a mask (constrain.h) while a caller's
 * thread may be preparing it: whoever comes first works it out, the other
 * waits for it. Every entry point holds it. */
struct dp_constraint {
    pthread_mutex_t mu;
    const struct dp_vocab_bytes *vb;
    int kind;  /* KIND_JSON: S's machine; KIND_GBNF: G's */
    jschema S;
    gbnf G;
    size_t ssz; /* the size of one state (a jstate or a gstate) */
    void *st;
    void *scratch;
    uint32_t *bits;   /* the last mask as bits by token id (token t: bit t % 32 of word t / 32) */
    int n_words;
    char *walk;       /* the masks' walk: state d (WALK(c, d)) = the state after d bytes of the last token walked */
    int prepared;     /* bits holds the mask of the current state (dp_constraint_prepare) */
    int n_allowed;
    uint32_t gid;     /* KIND_GBNF: the grammar's id in the model's mask cache (0: its masks are not kept) */
    uint32_t *key;    /* the current state's key: key_n words (-1: not kept) */
    int key_n;
    long hits, misses;
    char *before, *after;
};

enum { KIND_JSON, KIND_GBNF };

#define WALK(c, d) ((void *)((c)->walk + (size_t)(d) * (c)->ssz))

/* The machine's steps (json_machine.h, gbnf.h), by the constraint's kind. */
static int m_feed_to(const dp_constraint *c, const void *src, uint8_t b, void *dst) {
    return c->kind == KIND_GBNF ? gm_feed_to(&c->G, src, b, dst) : jm_feed_to(&c->S, src, b, dst);
}
static int m_feed_bytes(const dp_constraint *c, void *st, const uint8_t *p, int n) {
    return c->kind == KIND_GBNF ? gm_feed_bytes(&c->G, st, p, n) : jm_feed_bytes(&c->S, st, p, n);
}
static void m_copy(const dp_constraint *c, void *dst, const void *src) {
    if (c->kind == KIND_GBNF) gm_copy(dst, src);
    else jm_copy(dst, src);
}
static int m_can_end(const dp_constraint *c, const void *st) {
    return c->kind == KIND_GBNF ? gm_can_end(st) : jm_can_end(&c->S, st);
}
static int m_done(const dp_constraint *c, const void *st) {
    return c->kind == KIND_GBNF ? gm_done(st) : jm_done(&c->S, st);
}
/* A grammar's states take no shortcut: no reading is "in a string" or "in free text" to it. */
static int m_any(const dp_constraint *c, const void *st) { return c->kind == KIND_JSON && jm_any(st); }
static void m_look(const dp_constraint *c, const void *st, jm_view *v) {
    if (c->kind == KIND_JSON) jm_look(&c->S, st, v);
    else *v = (jm_view){0};
}

/* An empty constraint of this kind; dp_constraint_free takes it at any
 * step of its making (a machine that failed to compile is left zeroed). */
static dp_constraint *new_constraint(int kind) {
    dp_constraint *c = dp_calloc(1, sizeof *c);
    if (!c) return NULL;
    pthread_mutex_init(&c->mu, NULL);
    c->kind = kind;
    return c;
}

/* c's states and mask buffers, for states of ssz bytes. */
static int alloc_states(dp_constraint *c, const dp_model *m, size_t ssz) {
    c->ssz = ssz;
    if ((c->vb = vocab_bytes(m))) c->n_words = (c->vb->n + 31) / 32;
    return c->vb && (c->bits = dp_malloc(sizeof(uint32_t) * (size_t)c->n_words)) &&
                   (c->walk = dp_malloc(ssz * (WALK_MAX + 1))) && (c->st = dp_malloc(ssz)) &&
                   (c->scratch = dp_malloc(ssz)) && (c->key = dp_malloc(sizeof(uint32_t) * KEY_WORDS))
               ? 0
               : -1;
}

dp_constraint *dp_constraint_json(const dp_model *m, const char *schema, size_t len, int think) {
    return dp_constraint_json_between(m, schema, len, think, NULL, NULL);
}

dp_constraint *dp_constraint_json_between(const dp_model *m, const char *schema, size_t len, int think,
                                          const char *before, const char *after) {
    return dp_constraint_json_repeat(m, schema, len, think, before, after, 1);
}

/* What the machine reads (json_machine.h): values, tagged blocks in free text (S->free_text), or free text
 * that may open with a value (S->lazy). */
enum { MODE_VALUES, MODE_TAGGED, MODE_LAZY };

static dp_constraint *make(const dp_model *m, const char *schema, size_t len, int think, const char *before,
                           const char *after, int max_values, int mode);

dp_constraint *dp_constraint_json_repeat(const dp_model *m, const char *schema, size_t len, int think,
                                         const char *before, const char *after, int max_values) {
    if (max_values < 1) {
        dp_set_error(DP_ERR_ARG, "constraint: max_values must be at least 1");
        return NULL;
    }
    if (max_values > 1 && !(before && *before && after && *after)) {
        dp_set_error(DP_ERR_ARG, "constraint: several values need the texts before and after each");
        return NULL;
    }
    return make(m, schema, len, think, before, after, max_values, MODE_VALUES);
}

dp_constraint *dp_constraint_json_tagged(const dp_model *m, const char *schema, size_t len, const char *open,
                                         const char *close, int max_values) {
    if (!open || open[0] != '<' || strchr(open + 1, '<') || !close || !*close || max_values < 0) {
        dp_set_error(DP_ERR_ARG, "constraint: a tagged value needs an opening text that begins with its only '<', "
                                 "a closing text, and max_values >= 0");
        return NULL;
    }
    return make(m, schema, len, DP_THINK_NONE, open, close, max_values, MODE_TAGGED);
}

dp_constraint *dp_constraint_json_lazy(const dp_model *m, const char *schema, size_t len, int think) {
    return make(m, schema, len, think, NULL, NULL, 1, MODE_LAZY);
}

static dp_constraint *make(const dp_model *m, const char *schema, size_t len, int think, const char *before,
                           const char *after, int max_values, int mode) {
    if (think < DP_THINK_NONE || think > DP_THINK_INSIDE) {
        dp_set_error(DP_ERR_ARG, "constraint: think must be DP_THINK_NONE, DP_THINK_MAY_OPEN or DP_THINK_INSIDE");
        return NULL;
    }
    dp_constraint *c = new_constraint(KIND_JSON);
    if (!c) return NULL;
    char err[200];
    if (jschema_compile(&c->S, schema, schema ? len : 0, err, sizeof err)) {
        dp_set_error(DP_ERR_ARG, "json schema: %s", err);
        dp_constraint_free(c);
        return NULL;
    }
    if (alloc_states(c, m, sizeof(jstate))) {
        dp_constraint_free(c);
        return NULL;
    }
    if ((before && *before && !(c->before = dp_strndup(before, strlen(before)))) ||
        (after && *after && !(c->after = dp_strndup(after, strlen(after))))) {
        dp_constraint_free(c);
        return NULL;
    }
    c->S.before = c->before;
    c->S.after = c->after;
    c->S.repeat = max_values;
    c->S.free_text = mode == MODE_TAGGED;
    c->S.lazy = mode == MODE_LAZY;
    jm_start(&c->S, c->st, think);
    return c;
}

dp_constraint *dp_constraint_gbnf(const dp_model *m, const char *grammar, size_t len) {
    dp_constraint *c = new_constraint(KIND_GBNF);
    if (!c) return NULL;
    char err[240];
    if (gbnf_compile(&c->G, grammar, grammar ? len : 0, err, sizeof err)) {
        dp_set_error(DP_ERR_ARG, "grammar: %s", err);
        dp_constraint_free(c);
        return NULL;
    }
    if (alloc_states(c, m, sizeof(gstate))) {
        dp_constraint_free(c);
        return NULL;
    }
    gm_start(&c->G, c->st);
    c->gid = mask_cache_grammar(c->vb->masks, grammar, len);
    return c;
}

int dp_gbnf_check(const char *grammar, size_t len) {
    gbnf G;
    char err[240];
    if (gbnf_compile(&G, grammar, grammar ? len : 0, err, sizeof err)) return dp_set_error(DP_ERR_ARG, "grammar: %s", err);
    gbnf_free(&G);
    return DP_OK;
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
    if (c->kind == KIND_GBNF) gbnf_free(&c->G);
    else jschema_free(&c->S);
    pthread_mutex_destroy(&c->mu);
    free(c->st);
    free(c->scratch);
    free(c->bits);
    free(c->key);
    free(c->walk);
    free(c->before);
    free(c->after);
    free(c);
}

/* Whether the token at index i may come next (walked through the machine). */
static int token_walks(dp_constraint *c, int i) {
    const struct dp_vocab_bytes *v = c->vb;
    m_copy(c, c->scratch, c->st);
    return m_feed_bytes(c, c->scratch, v->bytes + v->off[i], (int)(v->off[i + 1] - v->off[i])) > 0;
}

/* 1 or 0 where a shortcut decides the token at index i, -1 where it must be walked. */
static int token_shortcut(const dp_constraint *c, int i, const uint8_t *first_ok, const jm_view *view, int can_end) {
    const struct dp_vocab_bytes *v = c->vb;
    const uint32_t o = v->off[i], len = v->off[i + 1] - o;
    if (!len) return can_end && (v->flags[i] & TT_EOG);
    if (!first_ok[v->bytes[o]]) return 0;
    if (view->in_string && (v->flags[i] & TT_PLAIN)) return view->room < 0 || v->ncp[i] <= (uint32_t)view->room;
    if (view->in_think && !(v->flags[i] & TT_LT)) return 1;
    return -1;
}

/* A mask's walk through the tokens in byte order: `common` is what the
 * current one shares with the last one walked, whose states walk[0 ..
 * valid] are kept and whose first `dead` bytes no reading survives (0: it
 * lived). */
typedef struct {
    uint8_t first_ok[256];
    jm_view view;
    int can_end, common, valid, dead;
} mask_walk;

/* Whether the token at index i may come next; lcp: the bytes it shares
 * with the token visited before it. */
static int visit(dp_constraint *c, mask_walk *w, int i, int lcp) {
    const struct dp_vocab_bytes *v = c->vb;
    if (lcp < w->common) w->common = lcp;
    int ok = token_shortcut(c, i, w->first_ok, &w->view, w->can_end);
    if (ok < 0 && w->dead && w->common >= w->dead) ok = 0; /* it begins with a refused prefix */
    if (ok < 0) {
        const uint8_t *p = v->bytes + v->off[i];
        const int len = (int)(v->off[i + 1] - v->off[i]);
        if (len > WALK_MAX) return token_walks(c, i);
        int d = w->common < w->valid ? w->common : w->valid;
        while (d < len && !m_any(c, WALK(c, d)) && m_feed_to(c, WALK(c, d), p[d], WALK(c, d + 1))) d++;
        ok = d == len || m_any(c, WALK(c, d));
        w->valid = d;
        w->dead = ok ? 0 : d + 1;
        w->common = 255; /* from now on: what the next tokens share with this one */
    }
    return ok;
}

static inline int set_allowed(dp_constraint *c, int i, int ok) {
    const int32_t t = c->vb->tok[i];
    c->bits[t >> 5] |= (uint32_t)ok << (t & 31);
    return ok;
}

/* The mask where a shortcut takes the tokens of ts whole: those copied in,
 * only the others visited (the skipped ones share no walk: the least lcp
 * between two visited ones is theirs). */
static int mask_from_set(dp_constraint *c, mask_walk *w, const struct token_set *ts) {
    memcpy(c->bits, ts->bits, sizeof(uint32_t) * (size_t)c->n_words);
    int k = ts->n_in;
    for (int j = 0; j < ts->n_rest; j++) k += set_allowed(c, ts->rest[j], visit(c, w, ts->rest[j], ts->rest_lcp[j]));
    return k;
}

/* Fills c->bits; returns how many tokens are allowed. In a
 * string with room for any plain token, or in a think block or free text,
 * from the token set the shortcut takes; elsewhere only the tokens whose
 * first byte the state takes are visited (a range of the byte order each). */
static int compute_mask(dp_constraint *c) {
    const struct dp_vocab_bytes *v = c->vb;
    mask_walk w = {.common = 0};
    for (int b = 0; b < 256; b++) w.first_ok[b] = m_feed_to(c, c->st, (uint8_t)b, c->scratch) > 0;
    m_look(c, c->st, &w.view);
    w.can_end = m_can_end(c, c->st);
    m_copy(c, WALK(c, 0), c->st);
    int k = 0;
    if (w.view.in_string && (w.view.room < 0 || (uint32_t)w.view.room >= v->max_ncp))
        return mask_from_set(c, &w, &v->plain);
    if (w.view.in_think) return mask_from_set(c, &w, &v->no_lt);
    memset(c->bits, 0, sizeof(uint32_t) * (size_t)c->n_words);
    for (int b = -1; b < 256; b++) {
        if (b >= 0 && !w.first_ok[b]) continue;
        for (uint32_t i = v->start[b + 1]; i < v->start[b + 2]; i++)
            k += set_allowed(c, (int)i, visit(c, &w, (int)i, v->lcp[i]));
    }
    return k;
}

static int has_bit(const uint32_t *bits, int32_t t) { return (bits[t >> 5] >> (t & 31)) & 1u; }

/* The current state's mask from the model's cache: 1, or 0 (its key left in c for mask_cache_put). */
static int cache_get(dp_constraint *c) {
    c->key_n = -1;
    if (!c->gid) return 0;
    c->key[0] = c->gid;
    const int n = gm_key(c->st, c->key + 1, KEY_WORDS - 1);
    if (n < 0) return 0;
    c->key_n = n + 1;
    return mask_cache_get(c->vb->masks, c->key, c->key_n, c->bits, &c->n_allowed);
}

static void prepare(dp_constraint *c) {
    if (c->prepared) return;
    if (cache_get(c)) {
        c->hits++;
    } else {
        c->n_allowed = compute_mask(c);
        if (c->key_n > 0) mask_cache_put(c->vb->masks, c->key, c->key_n, c->bits, c->n_allowed);
        c->misses++;
    }
    c->prepared = 1;
}

void dp_constraint_cache_stats(dp_constraint *c, long *hits, long *misses) {
    pthread_mutex_lock(&c->mu);
    *hits = c->hits, *misses = c->misses;
    pthread_mutex_unlock(&c->mu);
}

void dp_constraint_prepare(dp_constraint *c) {
    pthread_mutex_lock(&c->mu);
    prepare(c);
    pthread_mutex_unlock(&c->mu);
}

const uint32_t *dp_constraint_bits(dp_constraint *c, int *n_words, int *n_allowed) {
    pthread_mutex_lock(&c->mu);
    prepare(c);
    *n_words = c->n_words;
    *n_allowed = c->n_allowed;
    pthread_mutex_unlock(&c->mu);
    return c->bits;
}

static int mask(dp_constraint *c, float *logits, int n_logits) {
    const struct dp_vocab_bytes *v = c->vb;
    prepare(c);
    const int k = c->n_allowed, n = n_logits < v->n ? n_logits : v->n;
    for (int t0 = 0; t0 < n; t0 += 32) { /* a word at a time: most are all in or all out */
        const uint32_t w = c->bits[t0 >> 5];
        const int e = n - t0 < 32 ? n - t0 : 32;
        if (w == 0xFFFFFFFFu) continue;
        for (int j = 0; j < e; j++)
            if (!((w >> j) & 1u)) logits[t0 + j] = -INFINITY;
    }
    for (int t = n; t < n_logits; t++) logits[t] = -INFINITY;
    return k;
}

int dp_constraint_mask(dp_constraint *c, float *logits, int n_logits) {
    pthread_mutex_lock(&c->mu);
    const int k = mask(c, logits, n_logits);
    pthread_mutex_unlock(&c->mu);
    return k;
}

static int allows(dp_constraint *c, int32_t tok) {
    const struct dp_vocab_bytes *v = c->vb;
    if (tok < 0 || tok >= v->n) return 0;
    if (c->prepared) return has_bit(c->bits, tok);
    const int i = v->pos[tok];
    if (v->off[i + 1] == v->off[i]) return (v->flags[i] & TT_EOG) && m_can_end(c, c->st);
    return token_walks(c, i);
}

int dp_constraint_allows(dp_constraint *c, int32_t tok) {
    pthread_mutex_lock(&c->mu);
    const int ok = allows(c, tok);
    pthread_mutex_unlock(&c->mu);
    return ok;
}

static int32_t sample(dp_constraint *c, dp_sampler *s, float *logits, int n_logits) {
    const dp_sampler_params *p = dp_sampler_params_of(s);
    const int untruncated = (p->top_k <= 0 || p->top_k >= n_logits) && p->top_p >= 1.0f && p->min_p <= 0;
    if (p->temp <= 0 || untruncated) {
        const int32_t t = dp_sampler_sample(s, logits);
        if (allows(c, t)) return t;
    }
    if (!mask(c, logits, n_logits))
        return dp_set_error(DP_ERR_ARG, "constraint: no token can continue the text (the vocabulary lacks the bytes)");
    return dp_sampler_sample(s, logits);
}

int32_t dp_constraint_sample(dp_constraint *c, dp_sampler *s, float *logits, int n_logits) {
    pthread_mutex_lock(&c->mu);
    const int32_t t = sample(c, s, logits, n_logits);
    pthread_mutex_unlock(&c->mu);
    return t;
}

int dp_constraint_accept(dp_constraint *c, int32_t tok) {
    pthread_mutex_lock(&c->mu);
    int rc = DP_OK;
    if (!allows(c, tok)) {
        rc = dp_set_error(DP_ERR_ARG, "constraint: token %d cannot come here", tok);
    } else {
        const struct dp_vocab_bytes *v = c->vb;
        const int i = v->pos[tok];
        const uint32_t o = v->off[i], len = v->off[i + 1] - o;
        if (len) m_feed_bytes(c, c->st, v->bytes + o, (int)len);
        c->prepared = 0;
    }
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int dp_constraint_done(const dp_constraint *c) {
    dp_constraint *w = (dp_constraint *)c;
    pthread_mutex_lock(&w->mu);
    const int done = m_done(c, c->st);
    pthread_mutex_unlock(&w->mu);
    return done;
}
