/* The paged KV cache's bookkeeping, independent of any backend: which page
 * of the pool holds which positions of which sequence. A backend stores K
 * and V of position p of a sequence in page pages[p / page_size], slot
 * p % page_size, and copies a page when asked (copy on write).
 *
 * Pages carry a reference count (sequences holding them). A full page gets
 * a prefix hash, H(hash of the page before it, its tokens), and sits in a
 * hash table so that a later sequence starting with the same tokens can
 * attach it instead of recomputing it (dp_kv_reuse). A page nobody holds is
 * either free or, when it is in the table, cached; cached pages are evicted
 * least recently used first when the free ones run out.
 *
 * Batches reserve all their pages up front (dp_kv_reserve: all or nothing),
 * then either commit (lengths advance, pages that became full are hashed)
 * or roll back (everything as before). */
#ifndef DP_KV_H
#define DP_KV_H

#include <stdint.h>

typedef struct {
    int alive;
    int len;                 /* positions cached */
    int32_t *pages;          /* page table, max_pages entries */
} dp_kv_seq;

/* One sequence's part of a reservation (for commit / rollback). */
typedef struct {
    int seq, old_len, n;
    const int32_t *tokens;   /* the n tokens at positions old_len .. */
    int cow_idx;             /* page index copied on write, or -1 */
    int32_t cow_old;         /* the page it replaced */
} dp_kv_resv;

/* Copies page src to page dst (K, V of every layer); nonzero on failure. */
typedef int (*dp_kv_copy_fn)(void *user, int src, int dst);

typedef struct dp_kv {
    int page_size, n_pages, max_pages, n_seq_max;
    int prefix_cache;        /* hash full pages (the backend keeps their data) */
    int32_t *ref;            /* per page */
    uint64_t *hash, *parent; /* prefix hash of full pages and of the page before */
    uint8_t *flags;          /* KV_HASHED, KV_IN_TABLE */
    int32_t *tokens;         /* page_size per page */
    int32_t *hnext, *bucket; /* hash chains */
    int n_buckets;
    int32_t *lru_prev, *lru_next; /* cached pages, head = least recently used */
    int lru_head, lru_tail, n_cached;
    int32_t *free_list;
    int n_free, n_used;
    dp_kv_seq *seqs;
    dp_kv_resv *resv;        /* n_seq_max: the reservation in flight */
    int n_resv;
    dp_kv_copy_fn copy;
    void *copy_user;
} dp_kv;

/* max_pages: pages one sequence may hold (n_ctx / page_size rounded up).
 * Sequence 0 is alive afterwards. DP_OK or DP_ERR_NOMEM. */
int dp_kv_init(dp_kv *kv, int page_size, int n_pages, int max_pages, int n_seq_max, int prefix_cache);
void dp_kv_free(dp_kv *kv);

/* Lowest id not alive, made alive and empty; < 0 when all are alive. */
int dp_kv_seq_new(dp_kv *kv);
/* A new sequence sharing every page of parent; < 0 when all are alive. */
int dp_kv_fork(dp_kv *kv, int parent);
void dp_kv_seq_free(dp_kv *kv, int seq);
void dp_kv_truncate(dp_kv *kv, int seq, int pos);
int dp_kv_alive(const dp_kv *kv, int seq);
/* Attaches the cached pages of the longest whole-page prefix of tokens that
 * leaves at least the last token out; the sequence must be empty. Returns
 * the positions attached. */
int dp_kv_reuse(dp_kv *kv, int seq, const int32_t *tokens, int n);

/* Reserves pages for n_runs runs (run i: n[i] new tokens of sequence
 * seq[i], distinct sequences), copying shared pages that will be written
 * (kv->copy). DP_OK, or DP_ERR_KV_FULL / DP_ERR_BACKEND with nothing
 * changed. Afterwards each sequence's page table covers its new positions
 * (its len is unchanged until dp_kv_commit). */
int dp_kv_reserve(dp_kv *kv, int n_runs, const int *seq, const int *n, const int32_t *const *tokens);
void dp_kv_commit(dp_kv *kv);
void dp_kv_rollback(dp_kv *kv);

/* Pages needed by a reservation of these runs (for messages). */
int dp_kv_pages_needed(const dp_kv *kv, int seq, int n);
int dp_kv_pages_available(const dp_kv *kv);

void dp_kv_stats_get(const dp_kv *kv, int *used, int *shared, int *cached, int *free);

#endif
