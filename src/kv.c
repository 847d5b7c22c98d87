/* The paged KV cache's bookkeeping: page pool, page tables, reference
 * counts, copy on write, the prefix hash table and the LRU of cached pages
 * (see kv.h). */
#include "kv.h"

#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "util.h"

enum { KV_HASHED = 1, KV_IN_TABLE = 2 };

/* ------------------------------------------------------------ hashing */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* H(parent, tokens): every token moves the whole state, so equal hashes
 * mean equal prefixes up to a 64-bit collision (and a lookup also compares
 * the page's own tokens and parent hash). */
static uint64_t page_hash(uint64_t parent, const int32_t *tok, int n) {
    uint64_t h = mix64(parent ^ 0x9e3779b97f4a7c15ull);
    for (int i = 0; i < n; i++) h = mix64(h + (uint32_t)tok[i] + 0x632be59bd9b4e019ull);
    return h ? h : 1;
}

static int bucket_of(const dp_kv *kv, uint64_t h) { return (int)(h & (uint64_t)(kv->n_buckets - 1)); }

static void table_insert(dp_kv *kv, int p) {
    int b = bucket_of(kv, kv->hash[p]);
    kv->hnext[p] = kv->bucket[b];
    kv->bucket[b] = p;
    kv->flags[p] |= KV_IN_TABLE;
}

static void table_remove(dp_kv *kv, int p) {
    int32_t *link = &kv->bucket[bucket_of(kv, kv->hash[p])];
    while (*link != p) link = &kv->hnext[*link];
    *link = kv->hnext[p];
    kv->flags[p] &= (uint8_t)~KV_IN_TABLE;
}

/* The registered page continuing a prefix with hash parent by tokens, or -1. */
static int table_find(const dp_kv *kv, uint64_t parent, const int32_t *tok) {
    uint64_t h = page_hash(parent, tok, kv->page_size);
    for (int p = kv->bucket[bucket_of(kv, h)]; p >= 0; p = kv->hnext[p])
        if (kv->hash[p] == h && kv->parent[p] == parent &&
            !memcmp(kv->tokens + (size_t)p * kv->page_size, tok, sizeof(int32_t) * (size_t)kv->page_size))
            return p;
    return -1;
}

/* ---------------------------------------------------------- page states */

static void lru_unlink(dp_kv *kv, int p) {
    if (kv->lru_prev[p] >= 0) kv->lru_next[kv->lru_prev[p]] = kv->lru_next[p];
    else kv->lru_head = kv->lru_next[p];
    if (kv->lru_next[p] >= 0) kv->lru_prev[kv->lru_next[p]] = kv->lru_prev[p];
    else kv->lru_tail = kv->lru_prev[p];
    kv->n_cached--;
}

static void lru_push(dp_kv *kv, int p) {
    kv->lru_prev[p] = kv->lru_tail;
    kv->lru_next[p] = -1;
    if (kv->lru_tail >= 0) kv->lru_next[kv->lru_tail] = p;
    else kv->lru_head = p;
    kv->lru_tail = p;
    kv->n_cached++;
}

static void page_ref(dp_kv *kv, int p) {
    if (kv->ref[p]++ == 0) {
        lru_unlink(kv, p); /* only cached pages are attached with no holder */
        kv->n_used++;
    }
}

static void page_release(dp_kv *kv, int p) {
    if (--kv->ref[p] > 0) return;
    kv->n_used--;
    if (kv->flags[p] & KV_IN_TABLE) lru_push(kv, p);
    else {
        kv->flags[p] = 0;
        kv->free_list[kv->n_free++] = p;
    }
}

/* A page for writing: a free one, else the least recently used cached one. */
static int page_take(dp_kv *kv) {
    int p;
    if (kv->n_free) p = kv->free_list[--kv->n_free];
    else {
        p = kv->lru_head;
        lru_unlink(kv, p);
        table_remove(kv, p);
    }
    kv->flags[p] = 0;
    kv->ref[p] = 1;
    kv->n_used++;
    return p;
}

/* ------------------------------------------------------------ lifecycle */

int dp_kv_init(dp_kv *kv, int page_size, int n_pages, int max_pages, int n_seq_max, int prefix_cache) {
    memset(kv, 0, sizeof *kv);
    kv->page_size = page_size;
    kv->n_pages = n_pages;
    kv->max_pages = max_pages;
    kv->n_seq_max = n_seq_max;
    kv->prefix_cache = prefix_cache;
    kv->n_buckets = 16;
    while (kv->n_buckets < 2 * n_pages) kv->n_buckets *= 2;
    size_t P = (size_t)n_pages;
    kv->ref = dp_calloc(P, sizeof(int32_t));
    kv->hash = dp_calloc(P, sizeof(uint64_t));
    kv->parent = dp_calloc(P, sizeof(uint64_t));
    kv->flags = dp_calloc(P, 1);
    kv->tokens = dp_calloc(P * (size_t)page_size, sizeof(int32_t));
    kv->hnext = dp_calloc(P, sizeof(int32_t));
    kv->bucket = dp_calloc((size_t)kv->n_buckets, sizeof(int32_t));
    kv->lru_prev = dp_calloc(P, sizeof(int32_t));
    kv->lru_next = dp_calloc(P, sizeof(int32_t));
    kv->free_list = dp_calloc(P, sizeof(int32_t));
    kv->seqs = dp_calloc((size_t)n_seq_max, sizeof(dp_kv_seq));
    kv->resv = dp_calloc((size_t)n_seq_max, sizeof(dp_kv_resv));
    if (!kv->ref || !kv->hash || !kv->parent || !kv->flags || !kv->tokens || !kv->hnext || !kv->bucket ||
        !kv->lru_prev || !kv->lru_next || !kv->free_list || !kv->seqs || !kv->resv)
        return DP_ERR_NOMEM;
    for (int b = 0; b < kv->n_buckets; b++) kv->bucket[b] = -1;
    /* handed out lowest first */
    for (int p = 0; p < n_pages; p++) kv->free_list[p] = n_pages - 1 - p;
    kv->n_free = n_pages;
    kv->lru_head = kv->lru_tail = -1;
    for (int i = 0; i < n_seq_max; i++) {
        kv->seqs[i].pages = dp_malloc(sizeof(int32_t) * (size_t)max_pages);
        if (!kv->seqs[i].pages) return DP_ERR_NOMEM;
    }
    kv->seqs[0].alive = 1;
    return DP_OK;
}

void dp_kv_free(dp_kv *kv) {
    if (kv->seqs)
        for (int i = 0; i < kv->n_seq_max; i++) free(kv->seqs[i].pages);
    void *bufs[] = {kv->ref, kv->hash, kv->parent, kv->flags, kv->tokens, kv->hnext, kv->bucket,
                    kv->lru_prev, kv->lru_next, kv->free_list, kv->seqs, kv->resv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    memset(kv, 0, sizeof *kv);
}

static int n_pages_of(const dp_kv *kv, int len) { return (len + kv->page_size - 1) / kv->page_size; }

int dp_kv_alive(const dp_kv *kv, int seq) { return seq >= 0 && seq < kv->n_seq_max && kv->seqs[seq].alive; }

int dp_kv_seq_new(dp_kv *kv) {
    for (int i = 0; i < kv->n_seq_max; i++)
        if (!kv->seqs[i].alive) {
            kv->seqs[i].alive = 1;
            kv->seqs[i].len = 0;
            return i;
        }
    return -1;
}

int dp_kv_fork(dp_kv *kv, int parent) {
    int id = dp_kv_seq_new(kv);
    if (id < 0) return id;
    dp_kv_seq *c = &kv->seqs[id], *p = &kv->seqs[parent];
    int np = n_pages_of(kv, p->len);
    for (int i = 0; i < np; i++) {
        c->pages[i] = p->pages[i];
        page_ref(kv, p->pages[i]);
    }
    c->len = p->len;
    return id;
}

void dp_kv_truncate(dp_kv *kv, int seq, int pos) {
    dp_kv_seq *q = &kv->seqs[seq];
    /* the last pages first: a chain's tail is evicted before its head */
    for (int i = n_pages_of(kv, q->len) - 1; i >= n_pages_of(kv, pos); i--) page_release(kv, q->pages[i]);
    q->len = pos;
}

void dp_kv_seq_free(dp_kv *kv, int seq) {
    dp_kv_truncate(kv, seq, 0);
    kv->seqs[seq].alive = 0;
}

int dp_kv_reuse(dp_kv *kv, int seq, const int32_t *tokens, int n) {
    dp_kv_seq *q = &kv->seqs[seq];
    if (!kv->prefix_cache || q->len) return 0;
    const int ps = kv->page_size;
    uint64_t parent = 0;
    int i = 0;
    for (; (i + 1) * ps <= n - 1 && i < kv->max_pages; i++) {
        int p = table_find(kv, parent, tokens + (size_t)i * ps);
        if (p < 0) break;
        page_ref(kv, p);
        q->pages[i] = p;
        parent = kv->hash[p];
    }
    q->len = i * ps;
    return q->len;
}

/* ---------------------------------------------------------- reservation */

/* Whether writing at position len of q needs a copy of its last page. */
static int needs_cow(const dp_kv *kv, const dp_kv_seq *q) {
    if (q->len % kv->page_size == 0) return 0;
    int p = q->pages[q->len / kv->page_size];
    return kv->ref[p] > 1 || (kv->flags[p] & KV_IN_TABLE);
}

int dp_kv_pages_needed(const dp_kv *kv, int seq, int n) {
    const dp_kv_seq *q = &kv->seqs[seq];
    return n_pages_of(kv, q->len + n) - n_pages_of(kv, q->len) + needs_cow(kv, q);
}

int dp_kv_pages_available(const dp_kv *kv) { return kv->n_free + kv->n_cached; }

int dp_kv_reserve(dp_kv *kv, int n_runs, const int *seq, const int *n, const int32_t *const *tokens) {
    int need = 0;
    for (int r = 0; r < n_runs; r++) need += dp_kv_pages_needed(kv, seq[r], n[r]);
    if (need > dp_kv_pages_available(kv)) return DP_ERR_KV_FULL;
    kv->n_resv = 0;
    for (int r = 0; r < n_runs; r++) {
        dp_kv_seq *q = &kv->seqs[seq[r]];
        dp_kv_resv *rv = &kv->resv[kv->n_resv++];
        /* n stays 0 until the new pages are taken (what a rollback releases) */
        *rv = (dp_kv_resv){.seq = seq[r], .old_len = q->len, .tokens = tokens[r], .cow_idx = -1};
        if (needs_cow(kv, q)) {
            int idx = q->len / kv->page_size, src = q->pages[idx], dst = page_take(kv);
            memcpy(kv->tokens + (size_t)dst * kv->page_size, kv->tokens + (size_t)src * kv->page_size,
                   sizeof(int32_t) * (size_t)kv->page_size);
            q->pages[idx] = dst;
            rv->cow_idx = idx;
            rv->cow_old = src;
            if (kv->copy && kv->copy(kv->copy_user, src, dst)) {
                dp_kv_rollback(kv);
                return DP_ERR_BACKEND;
            }
        } else if (q->len % kv->page_size) {
            kv->flags[q->pages[q->len / kv->page_size]] &= (uint8_t)~KV_HASHED; /* rewritten below */
        }
        for (int i = n_pages_of(kv, q->len); i < n_pages_of(kv, q->len + n[r]); i++) q->pages[i] = page_take(kv);
        rv->n = n[r];
    }
    return DP_OK;
}

void dp_kv_rollback(dp_kv *kv) {
    for (int r = kv->n_resv - 1; r >= 0; r--) {
        dp_kv_resv *rv = &kv->resv[r];
        dp_kv_seq *q = &kv->seqs[rv->seq];
        for (int i = n_pages_of(kv, rv->old_len + rv->n) - 1; i >= n_pages_of(kv, rv->old_len); i--)
            page_release(kv, q->pages[i]);
        if (rv->cow_idx >= 0) {
            page_release(kv, q->pages[rv->cow_idx]);
            q->pages[rv->cow_idx] = rv->cow_old;
        }
    }
    kv->n_resv = 0;
}

void dp_kv_commit(dp_kv *kv) {
    const int ps = kv->page_size;
    for (int r = 0; r < kv->n_resv; r++) {
        dp_kv_resv *rv = &kv->resv[r];
        dp_kv_seq *q = &kv->seqs[rv->seq];
        if (rv->cow_idx >= 0) page_release(kv, rv->cow_old);
        for (int i = 0; i < rv->n; i++) {
            int pos = rv->old_len + i;
            kv->tokens[(size_t)q->pages[pos / ps] * ps + pos % ps] = rv->tokens[i];
        }
        q->len = rv->old_len + rv->n;
        if (!kv->prefix_cache) continue;
        /* pages that became full: hash them; the first of a hash is registered */
        for (int i = rv->old_len / ps; i < q->len / ps; i++) {
            int p = q->pages[i];
            if (kv->flags[p] & KV_HASHED) continue;
            uint64_t parent = i ? kv->hash[q->pages[i - 1]] : 0;
            kv->parent[p] = parent;
            kv->hash[p] = page_hash(parent, kv->tokens + (size_t)p * ps, ps);
            kv->flags[p] |= KV_HASHED;
            if (table_find(kv, parent, kv->tokens + (size_t)p * ps) < 0) table_insert(kv, p);
        }
    }
    kv->n_resv = 0;
}

void dp_kv_stats_get(const dp_kv *kv, int *used, int *shared, int *cached, int *free) {
    int sh = 0;
    for (int p = 0; p < kv->n_pages; p++) sh += kv->ref[p] > 1;
    *used = kv->n_used;
    *shared = sh;
    *cached = kv->n_cached;
    *free = kv->n_free;
}
