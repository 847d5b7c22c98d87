/* The paged KV cache's bookkeeping (src/kv.c) without a model: a simulated
 * backend stores, per page slot, a value that depends on the whole prefix
 * up to that position (as real K/V rows do), written through the page
 * table like a forward pass and copied by the copy-on-write hook. After
 * every operation each live sequence must read back its own prefix values,
 * reference counts must equal the page-table references, and
 * used + cached + free must be the pool.
 *  - scenarios: a fork shares pages and copies the partial one on write;
 *    the prefix cache finds whole pages after the writer is freed, never
 *    the last token; eviction takes least recently used cached pages, a
 *    chain's tail first; a reservation larger than the pool changes
 *    nothing; a rollback restores everything.
 *  - random operations (new, fork, free, truncate, batches of several
 *    sequences with shared token streams, reuse, rollbacks, full pools). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "kv.h"
#include "testlib.h"

enum { MAXSEQ = 8, CTX = 96, NSTREAM = 3 };

static uint64_t *g_slot;   /* simulated KV: one value per page slot */
static int g_copies;

static int sim_copy(void *user, int src, int dst) {
    dp_kv *kv = user;
    memcpy(g_slot + (size_t)dst * kv->page_size, g_slot + (size_t)src * kv->page_size,
           sizeof(uint64_t) * (size_t)kv->page_size);
    g_copies++;
    return 0;
}

/* what position p of a sequence with these tokens holds */
static uint64_t prefix_value(const int32_t *tok, int p) {
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i <= p; i++) h = (h ^ (uint64_t)(tok[i] + 7)) * 1099511628211ull;
    return h;
}

typedef struct {
    int32_t tok[CTX];    /* the reference: tokens of every cached position */
} ref_seq;
static ref_seq g_ref[MAXSEQ];

/* A batch: reserve, "forward" (write the slots through the page tables),
 * commit or roll back. Returns the reserve status. */
static int step(dp_kv *kv, int n_runs, const int *seq, const int *n, int32_t (*tok)[CTX], int commit) {
    const int32_t *tp[MAXSEQ] = {0};
    for (int r = 0; r < n_runs; r++) tp[r] = tok[r];
    int rc = dp_kv_reserve(kv, n_runs, seq, n, tp);
    if (rc) return rc;
    for (int r = 0; r < n_runs; r++) {
        dp_kv_seq *q = &kv->seqs[seq[r]];
        int32_t all[CTX];
        memcpy(all, g_ref[seq[r]].tok, sizeof(int32_t) * (size_t)q->len);
        memcpy(all + q->len, tok[r], sizeof(int32_t) * (size_t)n[r]);
        for (int i = 0; i < n[r]; i++) {
            int p = q->len + i;
            g_slot[(size_t)q->pages[p / kv->page_size] * kv->page_size + p % kv->page_size] = prefix_value(all, p);
        }
        if (commit) memcpy(g_ref[seq[r]].tok, all, sizeof all);
    }
    if (commit) dp_kv_commit(kv);
    else dp_kv_rollback(kv);
    return DP_OK;
}

static int n_pages_of(const dp_kv *kv, int len) { return (len + kv->page_size - 1) / kv->page_size; }

/* Every invariant; returns the number of problems (reported once). */
static int check(const dp_kv *kv, const char *when) {
    int bad = 0;
    int *refs = calloc((size_t)kv->n_pages, sizeof(int));
    for (int s = 0; s < kv->n_seq_max; s++) {
        const dp_kv_seq *q = &kv->seqs[s];
        if (!q->alive) continue;
        for (int i = 0; i < n_pages_of(kv, q->len); i++) refs[q->pages[i]]++;
        for (int p = 0; p < q->len; p++) {
            int page = q->pages[p / kv->page_size], slot = p % kv->page_size;
            bad += g_slot[(size_t)page * kv->page_size + slot] != prefix_value(g_ref[s].tok, p);
            bad += kv->tokens[(size_t)page * kv->page_size + slot] != g_ref[s].tok[p];
        }
    }
    int used = 0, cached = 0, fr = 0;
    for (int p = 0; p < kv->n_pages; p++) {
        bad += refs[p] != kv->ref[p];
        used += kv->ref[p] > 0;
    }
    for (int p = kv->lru_head; p >= 0 && cached <= kv->n_pages; p = kv->lru_next[p]) {
        cached++;
        bad += kv->ref[p] != 0;
    }
    for (int i = 0; i < kv->n_free; i++) {
        fr++;
        bad += kv->ref[kv->free_list[i]] != 0;
    }
    dp_kv_stats st;
    dp_kv_stats_get(kv, &st.used, &st.shared, &st.cached, &st.free);
    bad += used != st.used || cached != st.cached || fr != st.free || used + cached + fr != kv->n_pages;
    CHECKF(bad == 0, "%s: %d problems (used %d/%d cached %d/%d free %d/%d of %d)", when, bad, used, st.used, cached,
           st.cached, fr, st.free, kv->n_pages);
    free(refs);
    return bad;
}

static void setup(dp_kv *kv, int ps, int n_pages) {
    CHECK(dp_kv_init(kv, ps, n_pages, (CTX + ps - 1) / ps, MAXSEQ, 1) == DP_OK);
    kv->copy = sim_copy;
    kv->copy_user = kv;
    free(g_slot);
    g_slot = calloc((size_t)n_pages * ps, sizeof(uint64_t));
    memset(g_ref, 0, sizeof g_ref);
}

static void fill(int32_t *t, int n, int32_t base) {
    for (int i = 0; i < n; i++) t[i] = base + i;
}

static void scenarios(void) {
    dp_kv kv;
    int32_t tok[MAXSEQ][CTX];
    int seq[MAXSEQ], n[MAXSEQ];

    /* a fork shares every page; the first write copies the partial page */
    setup(&kv, 4, 16);
    fill(tok[0], 10, 100);
    seq[0] = 0, n[0] = 10;
    CHECK(step(&kv, 1, seq, n, tok, 1) == DP_OK);
    int c = dp_kv_fork(&kv, 0);
    CHECK(c == 1 && kv.seqs[1].len == 10);
    memcpy(g_ref[1].tok, g_ref[0].tok, sizeof g_ref[0].tok);
    dp_kv_stats st;
    dp_kv_stats_get(&kv, &st.used, &st.shared, &st.cached, &st.free);
    CHECKF(st.used == 3 && st.shared == 3, "after fork: used %d shared %d", st.used, st.shared);
    g_copies = 0;
    fill(tok[0], 1, 500);
    seq[0] = 1, n[0] = 1;
    CHECK(step(&kv, 1, seq, n, tok, 1) == DP_OK);
    CHECKF(g_copies == 1 && kv.seqs[1].pages[2] != kv.seqs[0].pages[2] && kv.seqs[1].pages[1] == kv.seqs[0].pages[1],
           "copy on write: %d copies", g_copies);
    /* the parent writes its own partial page now without a copy (no longer shared) */
    g_copies = 0;
    fill(tok[0], 3, 600);
    seq[0] = 0, n[0] = 3;
    CHECK(step(&kv, 1, seq, n, tok, 1) == DP_OK);
    CHECK(g_copies == 0);
    check(&kv, "fork");

    /* both in one batch after a second fork: both copy */
    c = dp_kv_fork(&kv, 1);
    CHECK(c == 2);
    memcpy(g_ref[2].tok, g_ref[1].tok, sizeof g_ref[1].tok);
    g_copies = 0;
    fill(tok[0], 2, 700);
    fill(tok[1], 5, 800);
    seq[0] = 1, n[0] = 2, seq[1] = 2, n[1] = 5;
    CHECK(step(&kv, 2, seq, n, tok, 1) == DP_OK);
    CHECK(g_copies == 2);
    check(&kv, "fork in one batch");
    dp_kv_free(&kv);

    /* prefix cache: 40 tokens = 2 full pages of 16 (+8); freed, then found */
    setup(&kv, 16, 8);
    fill(tok[0], 40, 1000);
    seq[0] = 0, n[0] = 40;
    CHECK(step(&kv, 1, seq, n, tok, 1) == DP_OK);
    int32_t want[CTX];
    memcpy(want, g_ref[0].tok, sizeof want);
    dp_kv_seq_free(&kv, 0);
    dp_kv_stats_get(&kv, &st.used, &st.shared, &st.cached, &st.free);
    CHECKF(st.used == 0 && st.cached == 2 && st.free == 6, "freed: used %d cached %d free %d", st.used, st.cached,
           st.free);
    int s1 = dp_kv_seq_new(&kv);
    CHECK(dp_kv_reuse(&kv, s1, want, 40) == 32);
    memcpy(g_ref[s1].tok, want, sizeof want);
    check(&kv, "reuse");
    /* never the last token: 32 tokens give one page, 33 two */
    int s2 = dp_kv_seq_new(&kv);
    CHECK(dp_kv_reuse(&kv, s2, want, 32) == 16);
    dp_kv_truncate(&kv, s2, 0);
    CHECK(dp_kv_reuse(&kv, s2, want, 33) == 32);
    memcpy(g_ref[s2].tok, want, sizeof want);
    dp_kv_stats_get(&kv, &st.used, &st.shared, &st.cached, &st.free);
    CHECK(st.used == 2 && st.shared == 2);
    /* a different second page: only the first is shared */
    int32_t other[CTX];
    memcpy(other, want, sizeof other);
    other[20] = 9;
    dp_kv_truncate(&kv, s2, 0);
    CHECK(dp_kv_reuse(&kv, s2, other, 40) == 16);
    /* a different first token: nothing */
    other[0] = 9;
    dp_kv_truncate(&kv, s2, 0);
    CHECK(dp_kv_reuse(&kv, s2, other, 40) == 0);
    /* continuing a reused sequence writes new pages; the shared ones stay */
    fill(tok[0], 10, 3000);
    seq[0] = s1, n[0] = 10;
    CHECK(step(&kv, 1, seq, n, tok, 1) == DP_OK);
    check(&kv, "continue after reuse");
    dp_kv_free(&kv);

    /* eviction: least recently used cached pages first, a chain's tail first */
    setup(&kv, 4, 6);
    fill(tok[0], 12, 100); /* A: 3 full pages */
    seq[0] = 0, n[0] = 12;
    CHECK(step(&kv, 1, seq, n, tok, 1) == DP_OK);
    int32_t a_tok[CTX];
    memcpy(a_tok, g_ref[0].tok, sizeof a_tok);
    dp_kv_seq_free(&kv, 0);
    int b = dp_kv_seq_new(&kv);
    fill(tok[0], 16, 200); /* B: 4 pages: the 3 free ones and A's last */
    seq[0] = b, n[0] = 16;
    CHECK(step(&kv, 1, seq, n, tok, 1) == DP_OK);
    int a = dp_kv_seq_new(&kv);
    CHECKF(dp_kv_reuse(&kv, a, a_tok, 13) == 8, "A's first two pages stay cached");
    memcpy(g_ref[a].tok, a_tok, sizeof a_tok);
    check(&kv, "eviction");
    /* the pool is full now (4 + 2 used): one more page is KV_FULL, nothing changes */
    dp_kv_stats before = {0}, after = {0};
    dp_kv_stats_get(&kv, &before.used, &before.shared, &before.cached, &before.free);
    fill(tok[0], 1, 300);
    seq[0] = b, n[0] = 1;
    CHECK(step(&kv, 1, seq, n, tok, 1) == DP_ERR_KV_FULL);
    dp_kv_stats_get(&kv, &after.used, &after.shared, &after.cached, &after.free);
    CHECK(!memcmp(&before, &after, sizeof before) && kv.seqs[b].len == 16);
    check(&kv, "full");
    /* a rollback after a forward pass restores the tables */
    dp_kv_truncate(&kv, b, 8);
    fill(tok[0], 5, 400);
    seq[0] = b, n[0] = 5;
    CHECK(step(&kv, 1, seq, n, tok, 0) == DP_OK);
    CHECK(kv.seqs[b].len == 8);
    check(&kv, "rollback");
    dp_kv_free(&kv);
}

static void random_ops(void) {
    long reused = 0, fulls = 0, rollbacks = 0;
    g_copies = 0;
    for (int rep = 0; rep < 40; rep++) {
        dp_kv kv;
        int ps = 1 << (int)(t_rand_u64() % 5), max_pages = (CTX + ps - 1) / ps;
        int n_pages = max_pages + (int)(t_rand_u64() % (uint64_t)(max_pages * 3));
        setup(&kv, ps, n_pages);
        /* token streams shared between sequences, so prefixes repeat */
        int32_t streams[NSTREAM][CTX];
        for (int s = 0; s < NSTREAM; s++)
            for (int i = 0; i < CTX; i++) streams[s][i] = (int32_t)(t_rand_u64() % 5);
        int stream_of[MAXSEQ] = {0};
        int bad = 0;
        for (int op = 0; op < 400 && !bad; op++) {
            int s = (int)(t_rand_u64() % MAXSEQ), k = (int)(t_rand_u64() % 100);
            dp_kv_seq *q = &kv.seqs[s];
            if (k < 8) {
                int id = dp_kv_seq_new(&kv);
                if (id >= 0) {
                    stream_of[id] = (int)(t_rand_u64() % NSTREAM);
                    int32_t *t = streams[stream_of[id]];
                    int got = dp_kv_reuse(&kv, id, t, 1 + (int)(t_rand_u64() % CTX));
                    bad += got % ps != 0;
                    reused += got;
                    memcpy(g_ref[id].tok, t, sizeof(int32_t) * CTX);
                }
            } else if (k < 14 && q->alive) {
                int id = dp_kv_fork(&kv, s);
                if (id >= 0) {
                    stream_of[id] = stream_of[s];
                    memcpy(g_ref[id].tok, g_ref[s].tok, sizeof g_ref[s].tok);
                }
            } else if (k < 20 && q->alive) {
                dp_kv_seq_free(&kv, s);
            } else if (k < 30 && q->alive) {
                dp_kv_truncate(&kv, s, (int)(t_rand_u64() % (uint64_t)(q->len + 1)));
            } else {
                /* a batch over up to 4 sequences; tokens mostly follow the stream */
                int seq[MAXSEQ], n[MAXSEQ], nr = 0;
                int32_t tok[MAXSEQ][CTX];
                for (int i = 0; i < MAXSEQ && nr < 4; i++) {
                    int id = (s + i) % MAXSEQ;
                    if (!kv.seqs[id].alive || t_rand_u64() % 2) continue;
                    int len = kv.seqs[id].len, room = CTX - len;
                    if (!room) continue;
                    int m = 1 + (int)(t_rand_u64() % (uint64_t)(room < 20 ? room : 20));
                    for (int j = 0; j < m; j++)
                        tok[nr][j] = t_rand_u64() % 8 ? streams[stream_of[id]][len + j] : (int32_t)(t_rand_u64() % 5);
                    seq[nr] = id;
                    n[nr++] = m;
                }
                if (!nr) continue;
                dp_kv_stats before = {0}, after = {0};
                dp_kv_stats_get(&kv, &before.used, &before.shared, &before.cached, &before.free);
                int commit = t_rand_u64() % 6 != 0;
                int rc = step(&kv, nr, seq, n, tok, commit);
                fulls += rc == DP_ERR_KV_FULL;
                rollbacks += rc == DP_OK && !commit;
                if (rc == DP_ERR_KV_FULL) {
                    dp_kv_stats_get(&kv, &after.used, &after.shared, &after.cached, &after.free);
                    CHECKF(!memcmp(&before, &after, sizeof before), "full changed");
                    bad += memcmp(&before, &after, sizeof before) != 0;
                } else {
                    CHECKF(rc == DP_OK, "rc %d", rc);
                    bad += rc != DP_OK;
                }
            }
            bad += check(&kv, "random op");
        }
        CHECKF(bad == 0, "page size %d, %d pages: %d problems", ps, n_pages, bad);
        dp_kv_free(&kv);
    }
    printf("random operations: %ld positions reused, %d pages copied on write, %ld full pools, %ld rollbacks\n",
           reused, g_copies, fulls, rollbacks);
    CHECK(reused > 0 && g_copies > 0 && fulls > 0 && rollbacks > 0);
}

int main(void) {
    t_seed();
    scenarios();
    random_ops();
    free(g_slot);
    return t_done("test_kv");
}
