/* Text, stop strings, log probabilities and penalties of a request's
 * tokens (see textout.h). */
#include "textout.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 0;
    int c = *cap ? *cap : 8;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* Moves held[0..n) and every waiting log-probability entry to the output
 * as one piece. */
static void release(srv_req *r, size_t n) {
    req_output *o = &r->out;
    if (!n && !r->n_lp_wait) return;
    if (grow((void **)&o->pieces, &o->cap_pieces, o->n_pieces + 1, sizeof(out_piece)) ||
        grow((void **)&o->lp, &o->cap_lp, o->n_lp + r->n_lp_wait, sizeof(tok_lp))) {
        o->text.oom = 1;
        return;
    }
    sb_add(&o->text, r->held.s, n);
    if (r->n_lp_wait) memcpy(o->lp + o->n_lp, r->lp_wait, sizeof(tok_lp) * (size_t)r->n_lp_wait);
    o->n_lp += r->n_lp_wait;
    o->pieces[o->n_pieces++] = (out_piece){(int)n, r->n_lp_wait};
    r->n_lp_wait = 0;
    if (r->held.n > n) memmove(r->held.s, r->held.s + n, r->held.n - n);
    r->held.n -= n;
    if (r->held.s) r->held.s[r->held.n] = 0;
}

/* The earliest stop string in the held text: its offset, or -1. */
static long find_stop(const srv_req *r) {
    long best = -1;
    for (int k = 0; k < r->p.n_stop; k++) {
        const char *s = r->p.stop[k];
        size_t n = strlen(s);
        if (n > r->held.n) continue;
        for (size_t i = 0; i + n <= r->held.n && (best < 0 || (long)i < best); i++)
            if (r->held.s[i] == s[0] && !memcmp(r->held.s + i, s, n)) {
                best = (long)i;
                break;
            }
    }
    return best;
}

/* Bytes at the end of the held text that are the start of a stop string. */
static size_t stop_prefix_tail(const srv_req *r) {
    size_t keep = 0;
    for (int k = 0; k < r->p.n_stop; k++) {
        const char *s = r->p.stop[k];
        size_t n = strlen(s);
        size_t top = n - 1 < r->held.n ? n - 1 : r->held.n;
        for (size_t len = top; len > keep; len--)
            if (!memcmp(r->held.s + r->held.n - len, s, len)) {
                keep = len;
                break;
            }
    }
    return keep;
}

/* After text was added: stop at a stop string, else release all but a
 * possible stop-string start. */
static int settle(srv_req *r, int final) {
    long at = r->p.n_stop ? find_stop(r) : -1;
    if (at >= 0) {
        r->held.n = (size_t)at; /* the stop string and what follows are dropped */
        release(r, (size_t)at);
        r->held.n = 0;
        return 1;
    }
    size_t keep = final || !r->p.n_stop ? 0 : stop_prefix_tail(r);
    if (r->held.n - keep || final) release(r, r->held.n - keep);
    return 0;
}

int text_add_token(srv_req *r, int32_t tok) {
    char buf[256];
    int k = dp_detok_push(r->dt, tok, buf, sizeof buf);
    if (r->lp_ok) {
        if (grow((void **)&r->lp_wait, &r->cap_lp_wait, r->n_lp_wait + 1, sizeof(tok_lp)) == 0) {
            r->lp_cur.text_offset = r->text_bytes;
            r->lp_wait[r->n_lp_wait++] = r->lp_cur;
        }
        r->lp_ok = 0;
    }
    if (k > (int)sizeof buf) k = (int)sizeof buf; /* a token's text is a few bytes; never more than this */
    if (k > 0) {
        sb_add(&r->held, buf, (size_t)k);
        r->text_bytes += k;
    }
    if (!r->held.n && !r->n_lp_wait) return 0;
    return settle(r, 0);
}

int text_finish(srv_req *r) {
    char buf[64];
    int k = dp_detok_flush(r->dt, buf, sizeof buf);
    if (k > (int)sizeof buf) k = (int)sizeof buf;
    if (k > 0) {
        sb_add(&r->held, buf, (size_t)k);
        r->text_bytes += k;
    }
    return settle(r, 1);
}

void lp_compute(const float *l, int V, int32_t tok, int n_top, tok_lp *o) {
    float mx = l[0];
    for (int i = 1; i < V; i++) mx = l[i] > mx ? l[i] : mx;
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)l[i] - mx);
    double lse = mx + log(sum);
    o->id = tok;
    o->logprob = (float)(l[tok] - lse);
    o->n_top = 0;
    if (n_top > REQ_MAX_TOP_LOGPROBS) n_top = REQ_MAX_TOP_LOGPROBS;
    /* the n_top best, sorted, by insertion (n_top is small) */
    for (int i = 0; i < V && n_top > 0; i++) {
        float v = l[i];
        if (o->n_top == n_top && !(v > o->top_lp[n_top - 1])) continue;
        int j = o->n_top < n_top ? o->n_top++ : n_top - 1;
        while (j > 0 && o->top_lp[j - 1] < v) {
            o->top_lp[j] = o->top_lp[j - 1];
            o->top_id[j] = o->top_id[j - 1];
            j--;
        }
        o->top_lp[j] = v;
        o->top_id[j] = i;
    }
    for (int j = 0; j < o->n_top; j++) o->top_lp[j] = (float)(o->top_lp[j] - lse);
}

/* open addressing, linear probing; capacity a power of two */
static int pen_slot(const srv_req *r, int32_t tok) {
    unsigned h = (unsigned)tok * 2654435761u;
    for (int i = (int)(h & (unsigned)(r->pen_cap - 1));; i = (i + 1) & (r->pen_cap - 1))
        if (r->pen_tok[i] == tok || r->pen_tok[i] < 0) return i;
}

int pen_count(srv_req *r, int32_t tok) {
    if (2 * (r->pen_n + 1) > r->pen_cap) {
        int cap = r->pen_cap ? 2 * r->pen_cap : 64;
        int32_t *ot = r->pen_tok;
        int *oc = r->pen_cnt, ocap = r->pen_cap;
        int32_t *nt = malloc(sizeof(int32_t) * (size_t)cap);
        int *nc = calloc((size_t)cap, sizeof(int));
        if (!nt || !nc) {
            free(nt);
            free(nc);
            return -1;
        }
        for (int i = 0; i < cap; i++) nt[i] = -1;
        r->pen_tok = nt;
        r->pen_cnt = nc;
        r->pen_cap = cap;
        for (int i = 0; i < ocap; i++)
            if (ot[i] >= 0) {
                int j = pen_slot(r, ot[i]);
                nt[j] = ot[i];
                nc[j] = oc[i];
            }
        free(ot);
        free(oc);
    }
    int i = pen_slot(r, tok);
    if (r->pen_tok[i] < 0) {
        r->pen_tok[i] = tok;
        r->pen_n++;
    }
    r->pen_cnt[i]++;
    return 0;
}

void pen_apply(const srv_req *r, float *logits) {
    float pres = isnan(r->p.presence_penalty) ? 0 : (float)r->p.presence_penalty;
    float freq = isnan(r->p.frequency_penalty) ? 0 : (float)r->p.frequency_penalty;
    for (int i = 0; i < r->pen_cap; i++)
        if (r->pen_tok[i] >= 0) logits[r->pen_tok[i]] -= pres + freq * (float)r->pen_cnt[i];
    for (int i = 0; i < r->p.n_logit_bias; i++) logits[r->p.bias_tok[i]] += r->p.bias_val[i];
}
