/* The byte machine of a GBNF grammar (gbnf.h).
 *
 * A reading is a stack of element positions whose top is always a
 * character class (or which is empty: the root is complete). A character
 * the top class takes pops it and pushes the position after it; settling
 * then pops ends of alternatives and replaces a reference by one reading
 * per alternative of the rule, until a class is on top again. A reference
 * that ends its alternative pushes no return position (a tail call), so
 * `x*` runs in constant depth. Readings that come out the same are merged.
 *
 * Bytes come one at a time and tokens split characters: while a UTF-8
 * character is incomplete, the state keeps its bytes and the range of code
 * points it can still become (contiguous for every prefix of a valid
 * sequence), and keeps only the readings whose top class takes some code
 * point of that range, so a text is a viable prefix exactly when some
 * reading is left. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "gbnf.h"

/* Readings being settled: a last-in, first-out list (depth first, each
 * rule's alternatives in order) in the grammar's scratch (gbnf.h). */
enum { WORK_POOL = 1 << 16 };
struct gwork {
    int32_t pos[WORK_POOL];
    int32_t len[GM_WORK];
    gstate tmp; /* gm_feed's */
};

typedef struct {
    struct gwork *k;
    int n, used, budget;
} worklist;

int gm_init(gbnf *G) { return (G->work = malloc(sizeof *G->work)) ? 0 : -1; }

static void work_push(worklist *w, const int32_t *s, int len, int32_t top) {
    if (w->n >= GM_WORK || w->used + len + 1 > WORK_POOL || len + 1 > GM_DEPTH) return; /* dropped: narrows */
    if (len) memcpy(w->k->pos + w->used, s, sizeof(int32_t) * (size_t)len);
    w->k->pos[w->used + len] = top;
    w->used += len + 1;
    w->k->len[w->n++] = len + 1;
}

static void emit(gstate *out, const int32_t *s, int len) {
    for (int i = 0; i < out->n; i++)
        if (out->off[i + 1] - out->off[i] == len &&
            !memcmp(out->pos + out->off[i], s, sizeof(int32_t) * (size_t)len))
            return;
    if (out->n >= GM_STACKS || out->used + len > GM_POOL) return;
    memcpy(out->pos + out->used, s, sizeof(int32_t) * (size_t)len);
    out->used += len;
    out->off[++out->n] = out->used;
}

/* Settles every reading of the worklist into out. */
static void settle(const gbnf *G, worklist *w, gstate *out) {
    while (w->n && w->budget-- > 0) {
        int len = w->k->len[--w->n];
        w->used -= len;
        int32_t *s = w->k->pos + w->used;
        while (len && G->elems[s[len - 1]].kind == GE_END) len--;
        if (!len || G->elems[s[len - 1]].kind != GE_REF) {
            emit(out, s, len);
            continue;
        }
        const gelem *e = &G->elems[s[len - 1]];
        if (G->elems[s[len - 1] + 1].kind == GE_END) len--; /* a tail call: nothing to come back to */
        else s[len - 1]++;
        const grule *R = &G->rules[e->a];
        /* s lies where the pushes go: copy it out of the way first */
        int32_t base[GM_DEPTH];
        memcpy(base, s, sizeof(int32_t) * (size_t)len);
        for (int a = R->n - 1; a >= 0; a--) work_push(w, base, len, G->alts[R->first + a]);
    }
    w->n = 0, w->used = 0;
}

static void clear(gstate *st) {
    st->n = 0, st->used = 0, st->off[0] = 0;
    st->need = 0, st->clo = st->chi = 0;
    st->acc = st->lo = st->hi = 0;
}

void gm_start(const gbnf *G, gstate *st) {
    clear(st);
    worklist w = {G->work, 0, 0, GM_WORK};
    const grule *R = &G->rules[G->root];
    for (int a = R->n - 1; a >= 0; a--) work_push(&w, NULL, 0, G->alts[R->first + a]);
    settle(G, &w, st);
}

void gm_copy(gstate *dst, const gstate *src) {
    memcpy(dst, src, offsetof(gstate, off) + sizeof(int32_t) * (size_t)(src->n + 1));
    memcpy(dst->pos, src->pos, sizeof(int32_t) * (size_t)src->used);
}

int gm_key(const gstate *st, uint32_t *out, int cap) {
    const int n = 3 + st->n + st->used; /* lo and hi follow from acc, need, clo and chi */
    if (n > cap) return -1;
    out[0] = (uint32_t)st->n;
    out[1] = (uint32_t)st->need | (uint32_t)st->clo << 8 | (uint32_t)st->chi << 16;
    out[2] = st->acc;
    for (int i = 0; i < st->n; i++) out[3 + i] = (uint32_t)st->off[i + 1];
    memcpy(out + 3 + st->n, st->pos, sizeof(int32_t) * (size_t)st->used);
    return n;
}

/* Whether the class e takes some code point of [lo, hi] (its ranges are sorted and apart). */
static int class_meets(const gbnf *G, const gelem *e, uint32_t lo, uint32_t hi) {
    const grange *r = e->n ? G->ranges + e->a : NULL; /* "." alone: a grammar may have no ranges */
    if (e->kind == GE_CLASS) {
        for (int i = 0; i < e->n && r[i].lo <= hi; i++)
            if (r[i].hi >= lo) return 1;
        return 0;
    }
    for (int i = 0; i < e->n && r[i].lo <= lo; i++) /* negated: unless one range covers it all */
        if (r[i].hi >= hi) return 0;
    return 1;
}

/* The readings of src that take code point cp, advanced and settled into dst. */
static void advance(const gbnf *G, const gstate *src, uint32_t cp, gstate *dst) {
    worklist w = {G->work, 0, 0, GM_WORK};
    for (int i = src->n - 1; i >= 0; i--) {
        const int32_t *s = src->pos + src->off[i];
        const int len = src->off[i + 1] - src->off[i];
        if (len && class_meets(G, &G->elems[s[len - 1]], cp, cp)) work_push(&w, s, len - 1, s[len - 1] + 1);
    }
    settle(G, &w, dst);
}

/* The readings of src whose top takes some code point of [dst->lo, dst->hi], copied into dst. */
static void keep_meeting(const gbnf *G, const gstate *src, gstate *dst) {
    for (int i = 0; i < src->n; i++) {
        const int32_t *s = src->pos + src->off[i];
        const int len = src->off[i + 1] - src->off[i];
        if (len && class_meets(G, &G->elems[s[len - 1]], dst->lo, dst->hi)) emit(dst, s, len);
    }
}

/* The code points a character can still become after its bytes so far (acc, need more, the next in [clo, chi]). */
static void pending_range(gstate *st) {
    const int rest = 6 * (st->need - 1);
    st->lo = ((st->acc << 6) | (st->clo & 0x3Fu)) << rest;
    st->hi = (((st->acc << 6) | (st->chi & 0x3Fu)) << rest) | ((1u << rest) - 1);
}

int gm_feed_to(const gbnf *G, const gstate *src, uint8_t b, gstate *dst) {
    clear(dst);
    if (src->need) {
        if (b < src->clo || b > src->chi) return 0;
        const uint32_t acc = src->acc << 6 | (b & 0x3Fu);
        if (src->need == 1) {
            advance(G, src, acc, dst);
            return dst->n;
        }
        dst->need = (uint8_t)(src->need - 1), dst->acc = acc, dst->clo = 0x80, dst->chi = 0xBF;
    } else if (b < 0x80) {
        advance(G, src, b, dst);
        return dst->n;
    } else if (b >= 0xC2 && b <= 0xF4) {
        dst->need = b <= 0xDF ? 1 : b <= 0xEF ? 2 : 3;
        dst->acc = b & (b <= 0xDF ? 0x1Fu : b <= 0xEF ? 0x0Fu : 0x07u);
        dst->clo = b == 0xE0 ? 0xA0 : b == 0xF0 ? 0x90 : 0x80;
        dst->chi = b == 0xED ? 0x9F : b == 0xF4 ? 0x8F : 0xBF;
    } else {
        return 0;
    }
    pending_range(dst);
    keep_meeting(G, src, dst);
    if (!dst->n) clear(dst);
    return dst->n;
}

int gm_feed(const gbnf *G, gstate *st, uint8_t b) {
    gstate *tmp = &G->work->tmp;
    const int n = gm_feed_to(G, st, b, tmp);
    gm_copy(st, tmp);
    return n;
}

int gm_feed_bytes(const gbnf *G, gstate *st, const uint8_t *p, int n) {
    int k = st->n;
    for (int i = 0; i < n && k; i++) k = gm_feed(G, st, p[i]);
    return k;
}

int gm_can_end(const gstate *st) {
    if (st->need) return 0;
    for (int i = 0; i < st->n; i++)
        if (st->off[i + 1] == st->off[i]) return 1;
    return 0;
}

int gm_done(const gstate *st) { return st->n == 1 && !st->need && st->off[1] == 0; }
