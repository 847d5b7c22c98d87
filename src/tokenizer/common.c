/* The machinery every tokenizer file shares: scratch growth, the string
 * hash and the piece -> id table, and the BPE merge loop that both the
 * SentencePiece and the byte-level encoders run with their own ranking. */
#include <stdlib.h>
#include <string.h>

#include "../util.h"
#include "internal.h"

int tk_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return dp_set_error(DP_ERR_NOMEM, "out of memory (%zu bytes)", nc * elem);
    *p = q;
    *cap = nc;
    return 0;
}

void tk_emit(tk_work *w, int32_t id) {
    if (w->out_n < w->out_cap) w->out[w->out_n] = id;
    w->out_n++;
}

uint64_t tk_hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
    h ^= h >> 33; /* murmur3 finalizer: every output bit depends on every input bit */
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

int tk_table_init(str_table *t, size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    t->slot = calloc(cap, sizeof *t->slot);
    t->mask = (uint32_t)(cap - 1);
    return t->slot ? 0 : dp_set_error(DP_ERR_NOMEM, "out of memory for the vocabulary table");
}

/* A slot holds the upper 32 hash bits (so most misses never touch the
 * strings) and id + 1 (0 = empty). */
#define SLOT(h, id) (((h) & 0xFFFFFFFF00000000ull) | (uint64_t)((id) + 1))

/* Inserts id under its piece; a later duplicate replaces the earlier one (as
 * a Python dict built from the token list does). */
void tk_table_put(str_table *t, const dp_tokenizer *tk, int32_t id) {
    gguf_str k = tk->piece[id];
    uint64_t h = tk_hash_bytes(k.ptr, k.len);
    uint32_t i = (uint32_t)h & t->mask;
    while (t->slot[i]) {
        if ((t->slot[i] ^ h) >> 32 == 0) {
            gguf_str o = tk->piece[(uint32_t)t->slot[i] - 1];
            if (o.len == k.len && !memcmp(o.ptr, k.ptr, k.len)) break;
        }
        i = (i + 1) & t->mask;
    }
    t->slot[i] = SLOT(h, id);
}

int tk_table_get(const str_table *t, const dp_tokenizer *tk, const char *s, size_t n) {
    uint64_t h = tk_hash_bytes(s, n);
    uint32_t i = (uint32_t)h & t->mask;
    for (uint64_t v; (v = t->slot[i]); i = (i + 1) & t->mask) {
        if ((v ^ h) >> 32) continue;
        gguf_str o = tk->piece[(uint32_t)v - 1];
        if (o.len == n && !memcmp(o.ptr, s, n)) return (int)(uint32_t)v - 1;
    }
    return -1;
}

/* ---------------------------------------------------------- merge loop */

static int merge_less(const tk_merge *a, const tk_merge *b) {
    return a->key < b->key || (a->key == b->key && a->pos < b->pos);
}

static int heap_push(tk_work *w, tk_merge m) {
    if (tk_grow((void **)&w->heap, &w->heap_cap, w->heap_n + 1, sizeof(tk_merge))) return -1;
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_less(&m, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = m;
    return 0;
}

static tk_merge heap_pop(tk_work *w) {
    tk_merge top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && merge_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!merge_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static int push_pair(const dp_tokenizer *t, tk_work *w, int li, tk_rank_fn rank) {
    tk_sym *l = &w->sym[li];
    if (l->next < 0) return 0;
    int32_t res;
    uint64_t key = rank(t, w, l, &w->sym[l->next], &res);
    if (key == UINT64_MAX) return 0;
    tk_merge m = {key, (uint32_t)li, res};
    return heap_push(w, m);
}

int tk_merge_word(const dp_tokenizer *t, tk_work *w, int n, tk_rank_fn rank) {
    w->n_ids = 0;
    if (n <= 0) return 0;
    w->heap_n = 0;
    for (int i = 0; i + 1 < n; i++)
        if (push_pair(t, w, i, rank)) return -1;
    while (w->heap_n) {
        tk_merge top = heap_pop(w);
        tk_sym *l = &w->sym[top.pos];
        if (l->id < 0 || l->next < 0) continue;
        tk_sym *r = &w->sym[l->next];
        int32_t res;
        uint64_t key = rank(t, w, l, r, &res);
        if (key != top.key || res != top.result) continue; /* stale entry */
        if (l->s + l->len == r->s) {
            l->len += r->len;
        } else {
            l->s = t->piece[res].ptr;
            l->len = (uint32_t)t->piece[res].len;
        }
        l->nch += r->nch;
        l->id = res;
        r->id = -1;
        l->next = r->next;
        if (l->next >= 0) w->sym[l->next].prev = (int32_t)top.pos;
        if (l->prev >= 0 && push_pair(t, w, l->prev, rank)) return -1;
        if (push_pair(t, w, (int)top.pos, rank)) return -1;
    }
    w->n_ids = 0;
    for (int i = 0; i >= 0; i = w->sym[i].next) {
        if (tk_grow((void **)&w->ids, &w->ids_cap, w->n_ids + 1, sizeof(int32_t))) return -1;
        w->ids[w->n_ids++] = w->sym[i].id;
    }
    return 0;
}

int tk_add_sym(tk_work *w, int *n, const char *s, uint32_t len, uint32_t nch, int32_t id) {
    if (tk_grow((void **)&w->sym, &w->sym_cap, (size_t)*n + 1, sizeof(tk_sym))) return -1;
    tk_sym *y = &w->sym[*n];
    y->s = s;
    y->len = len;
    y->nch = nch;
    y->id = id;
    y->prev = *n - 1;
    y->next = -1;
    if (*n > 0) w->sym[*n - 1].next = *n;
    (*n)++;
    return 0;
}
