/* Sequences and batches: the public dp_seq_* calls, dp_eval_batch's checks
 * and plan (entries grouped into runs of one sequence, rows whose logits
 * are wanted), the all-or-nothing page reservation around the backend's
 * forward pass, and the KV pool's sizing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session.h"
#include "util.h"

struct dp_batch_state {
    int32_t *tokens;         /* per row */
    int *row_entry;          /* entry of each row */
    dp_run *runs, *sorted;
    int *run_n, *run_fill, *run_want, *run_of_seq, *order;
    int *out_rows;
    dp_sampler **samplers;   /* per wanted row (dp_batch) */
    dp_constraint **constraints;
    unsigned char *keep;
    int32_t *drawn;
    int *slot;               /* per entry: logits slot, -1 = none */
    int *seq_ids, *counts;   /* for dp_kv_reserve */
    const int32_t **toks;
    float *logits;           /* logits_rows x n_vocab */
    float *work;             /* n_vocab: a kept row's copy for a constrained draw on the host */
    int *hid_rows, *hid_entry; /* rows whose hidden state is wanted, and their entries (dp_batch) */
    float *hidden;           /* hidden_rows x n_embd */
    int hidden_rows;
    int logits_rows;
    int logits_pinned;       /* from the backend's host_alloc */
    int n_entries;           /* of the last dp_eval_batch (dp_batch_logits) */
};

/* ------------------------------------------------------------ lifecycle */

static int copy_page(void *user, int src, int dst) {
    dp_session *s = user;
    return s->be->copy_page(s, src, dst);
}

/* Sequences a session may hold: each costs a page table and batch scratch. */
#define SEQ_MAX 65536

int dp_batch_init(dp_session *s, uint64_t kv_mem) {
    const dp_hparams *hp = &s->m->hp;
    if (s->n_seq_max > SEQ_MAX)
        return dp_set_error(DP_ERR_ARG, "n_seq_max %d: a session holds at most %d sequences", s->n_seq_max, SEQ_MAX);
    int batched = s->be->forward_batch != NULL;
    int ps = s->be->page_size ? s->be->page_size : 16;
    int max_pages = (s->n_ctx + ps - 1) / ps;
    const int eb = s->kv_eb;
    uint64_t page_bytes = 2ull * (uint64_t)hp->n_layer * (uint64_t)hp->n_head_kv * (uint64_t)hp->head_dim *
                          (uint64_t)eb * (uint64_t)ps;
    uint64_t n_pages = (uint64_t)max_pages * (uint64_t)s->n_seq_max;
    /* a backend without pages keeps its own cache of n_ctx positions */
    if (kv_mem && batched) {
        n_pages = kv_mem / page_bytes;
        if (n_pages < 1)
            return dp_set_error(DP_ERR_ARG, "kv_mem of %llu bytes holds no KV page (one page of %d positions takes "
                                            "%llu bytes)", (unsigned long long)kv_mem, ps,
                                (unsigned long long)page_bytes);
    }
    if (n_pages > (1u << 26))
        return dp_set_error(DP_ERR_ARG, "a KV pool of %llu pages is too large (at most %u)",
                            (unsigned long long)n_pages, 1u << 26);
    if (dp_kv_init(&s->kv, ps, (int)n_pages, max_pages, s->n_seq_max, batched) != DP_OK)
        return dp_set_error(DP_ERR_NOMEM, "out of memory for the KV page tables");
    s->kv.copy = copy_page;
    s->kv.copy_user = s;
    struct dp_batch_state *b = dp_calloc(1, sizeof *b);
    if (!b) return DP_ERR_NOMEM;
    s->batch = b;
    size_t B = (size_t)s->n_batch, S = (size_t)s->n_seq_max;
    b->tokens = dp_calloc(B, sizeof(int32_t));
    b->runs = dp_calloc(B, sizeof(dp_run));
    b->sorted = dp_calloc(B, sizeof(dp_run));
    b->toks = dp_calloc(B, sizeof(int32_t *));
    b->samplers = dp_calloc(B, sizeof(dp_sampler *));
    b->constraints = dp_calloc(B, sizeof(dp_constraint *));
    b->keep = dp_calloc(B, 1);
    b->drawn = dp_calloc(B, sizeof(int32_t));
    int **ints[] = {&b->row_entry, &b->order, &b->run_n, &b->run_fill, &b->run_want, &b->out_rows, &b->slot,
                    &b->seq_ids, &b->counts, &b->hid_rows, &b->hid_entry};
    int ok = b->tokens && b->runs && b->sorted && b->toks && b->samplers && b->constraints && b->keep && b->drawn;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) ok &= (*ints[i] = dp_calloc(B, sizeof(int))) != NULL;
    b->run_of_seq = dp_calloc(S, sizeof(int));
    if (!ok || !b->run_of_seq) return DP_ERR_NOMEM;
    for (size_t i = 0; i < S; i++) b->run_of_seq[i] = -1;
    return DP_OK;
}

static void free_logits(const dp_session *s, struct dp_batch_state *st) {
    if (st->logits_pinned) s->be->host_free(st->logits);
    else dp_free_aligned(st->logits);
    st->logits = NULL;
    st->logits_rows = st->logits_pinned = 0;
}

void dp_batch_free(dp_session *s) {
    struct dp_batch_state *b = s->batch;
    dp_kv_free(&s->kv);
    if (!b) return;
    void *bufs[] = {b->tokens, b->runs, b->sorted, (void *)b->toks, b->row_entry, b->order, b->run_n, b->run_fill,
                    b->run_want, b->out_rows, b->slot, b->seq_ids, b->counts, b->run_of_seq, (void *)b->samplers,
                    (void *)b->constraints, b->keep, b->drawn, b->work, b->hid_rows, b->hid_entry, b->hidden};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) free(bufs[i]);
    free_logits(s, b);
    free(b);
    s->batch = NULL;
}

/* ------------------------------------------------------------ sequences */

static int check_seq(const dp_session *s, const char *fn, int seq) {
    if (!dp_kv_alive(&s->kv, seq)) {
        if (seq < 0 || seq >= s->n_seq_max)
            return dp_set_error(DP_ERR_ARG, "%s: unknown sequence %d (ids are 0..%d)", fn, seq, s->n_seq_max - 1);
        return dp_set_error(DP_ERR_ARG, "%s: sequence %d is not alive (freed, or never created)", fn, seq);
    }
    return DP_OK;
}

static int single_only(const dp_session *s, const char *fn) {
    return dp_set_error(DP_ERR_BACKEND, "%s: the %s backend holds one sequence per session so far (the batched "
                                        "path is CPU only)", fn, s->be->name);
}

int dp_seq_new(dp_session *s) {
    if (!s->be->forward_batch && dp_kv_alive(&s->kv, 0)) return single_only(s, "dp_seq_new");
    int id = dp_kv_seq_new(&s->kv);
    if (id < 0) return dp_set_error(DP_ERR_ARG, "dp_seq_new: all %d sequences (n_seq_max) are alive", s->n_seq_max);
    return id;
}

int dp_seq_fork(dp_session *s, int parent) {
    int rc = check_seq(s, "dp_seq_fork", parent);
    if (rc) return rc;
    if (!s->be->forward_batch) return single_only(s, "dp_seq_fork");
    int id = dp_kv_fork(&s->kv, parent);
    if (id < 0)
        return dp_set_error(DP_ERR_ARG, "dp_seq_fork: all %d sequences (n_seq_max) are alive", s->n_seq_max);
    return id;
}

int dp_seq_free(dp_session *s, int seq) {
    int rc = check_seq(s, "dp_seq_free", seq);
    if (rc) return rc;
    dp_kv_seq_free(&s->kv, seq);
    return DP_OK;
}

int dp_seq_truncate(dp_session *s, int seq, int pos) {
    int rc = check_seq(s, "dp_seq_truncate", seq);
    if (rc) return rc;
    int len = s->kv.seqs[seq].len;
    if (pos < 0 || pos > len)
        return dp_set_error(DP_ERR_ARG, "truncate sequence %d to %d: it holds %d positions", seq, pos, len);
    dp_kv_truncate(&s->kv, seq, pos);
    return DP_OK;
}

int dp_seq_pos(const dp_session *s, int seq) {
    int rc = check_seq(s, "dp_seq_pos", seq);
    return rc ? rc : s->kv.seqs[seq].len;
}

int dp_seq_reuse_prefix(dp_session *s, int seq, const int32_t *tokens, int n) {
    int rc = check_seq(s, "dp_seq_reuse_prefix", seq);
    if (rc) return rc;
    if (s->kv.seqs[seq].len)
        return dp_set_error(DP_ERR_ARG, "dp_seq_reuse_prefix: sequence %d is not empty (%d positions)", seq,
                            s->kv.seqs[seq].len);
    if (n < 0 || (n && !tokens)) return dp_set_error(DP_ERR_ARG, "dp_seq_reuse_prefix: no tokens");
    return dp_kv_reuse(&s->kv, seq, tokens, n < s->n_ctx ? n : s->n_ctx);
}

void dp_session_kv_stats(const dp_session *s, dp_kv_stats *out) {
    out->page_size = s->kv.page_size;
    out->n_pages = s->kv.n_pages;
    dp_kv_stats_get(&s->kv, &out->used, &out->shared, &out->cached, &out->free);
}

/* --------------------------------------------------------- forward pass */

static int kv_full(const dp_session *s, int need) {
    dp_kv_stats st;
    dp_session_kv_stats(s, &st);
    return dp_set_error(DP_ERR_KV_FULL, "KV cache full: the batch needs %d pages of %d positions, %d are free or "
                                        "evictable (pool %d pages: %d in use, %d cached)", need, st.page_size,
                        dp_kv_pages_available(&s->kv), st.n_pages, st.used, st.cached);
}

/* A backend without forward_batch holds sequence 0 only: its forward
 * computes every row's logits or the last row's. */
static int forward_single(dp_session *s, const dp_batch *b) {
    const dp_run *r = &b->runs[0];
    int V = s->m->hp.n_vocab, last_only = b->n_out == 0 || (b->n_out == 1 && b->out_rows[0] == r->n - 1);
    if (b->n_hid) return dp_set_error(DP_ERR_BACKEND, "the %s backend gives no hidden states", s->be->name);
    if (!last_only && !s->logits_all)
        return dp_set_error(DP_ERR_BACKEND, "the %s backend keeps the logits of a batch's last entry only",
                            s->be->name);
    int rc = s->be->forward(s, b->tokens, r->n, r->pos0, !last_only);
    if (rc || b->logits == s->logits) return rc;
    for (int j = 0; j < b->n_out; j++)
        memcpy(b->logits + (size_t)j * V, s->logits + (size_t)(last_only ? 0 : b->out_rows[j]) * V,
               sizeof(float) * (size_t)V);
    return DP_OK;
}

/* Reserves the pages of b's runs (all or nothing) and sets their pos0 and
 * page tables. */
static int reserve(dp_session *s, const dp_batch *b) {
    struct dp_batch_state *st = s->batch;
    dp_run *runs = (dp_run *)b->runs;
    int need = 0;
    for (int r = 0; r < b->n_runs; r++) {
        st->seq_ids[r] = runs[r].seq;
        st->counts[r] = runs[r].n;
        st->toks[r] = b->tokens + runs[r].row0;
        need += dp_kv_pages_needed(&s->kv, runs[r].seq, runs[r].n);
    }
    int rc = dp_kv_reserve(&s->kv, b->n_runs, st->seq_ids, st->counts, st->toks);
    if (rc == DP_ERR_KV_FULL) return kv_full(s, need);
    if (rc) return rc;
    for (int r = 0; r < b->n_runs; r++) {
        runs[r].pos0 = s->kv.seqs[runs[r].seq].len;
        runs[r].pages = s->kv.seqs[runs[r].seq].pages;
    }
    s->trace_stop = 0;
    s->trace_seq = runs[0].seq;
    return DP_OK;
}

/* After the forward pass: a trace callback's stop is an error; errors roll
 * the reservation back. */
static int finish(dp_session *s, int rc) {
    if (s->trace_stop && (!rc || rc == DP_ERR_STOPPED)) rc = dp_set_error(DP_ERR_STOPPED, "stopped by a trace callback");
    if (rc) dp_kv_rollback(&s->kv);
    else dp_kv_commit(&s->kv);
    return rc;
}

static int run_batch(dp_session *s, dp_batch *b) {
    int rc = reserve(s, b);
    if (rc) return rc;
    return finish(s, s->be->forward_batch ? s->be->forward_batch(s, b) : forward_single(s, b));
}

int dp_eval_sample_seq0(dp_session *s, const int32_t *tokens, int n, dp_sampler *smp, int32_t *next) {
    dp_run run = {.seq = 0, .n = n};
    dp_batch b = {.n_rows = n, .tokens = tokens, .n_runs = 1, .runs = &run};
    int rc = reserve(s, &b);
    if (rc) return rc;
    return finish(s, s->be->eval_sample(s, tokens, n, run.pos0, smp, next));
}

int dp_eval_seq(dp_session *s, int seq, const int32_t *tokens, int n, int logits_all, float *logits) {
    int rc = check_seq(s, "dp_eval", seq);
    if (rc) return rc;
    struct dp_batch_state *st = s->batch;
    dp_run run = {.seq = seq, .n = n};
    int n_out = logits_all ? n : 1;
    for (int j = 0; j < n_out; j++) st->out_rows[j] = logits_all ? j : n - 1;
    dp_batch b = {.n_rows = n, .tokens = tokens, .n_runs = 1, .runs = &run, .n_out = n_out,
                  .out_rows = st->out_rows, .logits = logits};
    return run_batch(s, &b);
}

/* Groups the entries into runs (one per sequence, in order of first
 * appearance) and checks them. */
static int plan_runs(dp_session *s, const dp_batch_entry *e, int n, int *n_runs_out) {
    struct dp_batch_state *st = s->batch;
    int n_runs = 0, rc = DP_OK;
    for (int i = 0; i < n && !rc; i++) {
        int q = e[i].seq;
        if (q && !s->be->forward_batch) {
            rc = single_only(s, "dp_eval_batch");
            break;
        }
        if (q < 0 || q >= s->n_seq_max) {
            rc = dp_set_error(DP_ERR_ARG, "dp_eval_batch: entry %d: unknown sequence %d (ids are 0..%d)", i, q,
                              s->n_seq_max - 1);
            break;
        }
        if (!dp_kv_alive(&s->kv, q)) {
            rc = dp_set_error(DP_ERR_ARG, "dp_eval_batch: entry %d: sequence %d is not alive (freed, or never "
                                          "created)", i, q);
            break;
        }
        if (e[i].token < 0 || e[i].token >= s->m->hp.n_vocab) {
            rc = dp_set_error(DP_ERR_ARG, "dp_eval_batch: entry %d: token id %d is outside the vocabulary (0..%d)",
                              i, e[i].token, s->m->hp.n_vocab - 1);
            break;
        }
        int r = st->run_of_seq[q];
        if (r < 0) {
            r = st->run_of_seq[q] = n_runs++;
            st->runs[r] = (dp_run){.seq = q};
            st->run_n[r] = st->run_fill[r] = st->run_want[r] = 0;
        }
        int want = s->kv.seqs[q].len + st->run_n[r];
        if (e[i].pos != want)
            rc = dp_set_error(DP_ERR_ARG, "dp_eval_batch: entry %d: sequence %d at position %d, expected %d (the "
                                          "sequence's length plus its earlier entries: no gaps, no going back)",
                              i, q, e[i].pos, want);
        st->run_n[r]++;
        st->run_want[r] += e[i].logits || e[i].sampler;
    }
    for (int r = 0; r < n_runs && !rc; r++) {
        int q = st->runs[r].seq, len = s->kv.seqs[q].len;
        if (len + st->run_n[r] > s->n_ctx)
            rc = dp_set_error(DP_ERR_CTX_FULL, "context full: sequence %d holds %d positions + %d new exceed the "
                                               "context size %d", q, len, st->run_n[r], s->n_ctx);
    }
    if (rc)
        for (int r = 0; r < n_runs; r++) st->run_of_seq[st->runs[r].seq] = -1;
    *n_runs_out = n_runs;
    return rc;
}

/* st->order = the runs by ascending key (stable: insertion sort; a batch
 * has few runs, most of one length). */
static void sort_runs(struct dp_batch_state *st, int n_runs, const int *key) {
    for (int k = 0; k < n_runs; k++) {
        int r = k, i = k;
        while (i > 0 && key[st->order[i - 1]] > key[r]) {
            st->order[i] = st->order[i - 1];
            i--;
        }
        st->order[i] = r;
    }
}

/* Rows for the logits of a batch: page-locked where the backend has such
 * memory (a GPU copies a row into it at full speed), else plain. */
static int ensure_logits(dp_session *s, struct dp_batch_state *st, int rows, int V) {
    if (rows <= st->logits_rows) return DP_OK;
    const size_t bytes = (size_t)rows * (size_t)V * sizeof(float);
    float *l = s->be->host_alloc ? s->be->host_alloc(bytes) : NULL;
    const int pinned = l != NULL;
    if (!l && !(l = dp_malloc_aligned(bytes)))
        return dp_set_error(DP_ERR_NOMEM, "out of memory for the logits of %d batch entries", rows);
    free_logits(s, st);
    st->logits = l;
    st->logits_rows = rows;
    st->logits_pinned = pinned;
    return DP_OK;
}

void dp_batch_free_logits(dp_session *s) {
    if (s->batch) free_logits(s, s->batch);
}

/* The token of wanted row j (entry e): drawn by the backend, or here from
 * its logits (a kept row through a copy when a constraint masks it); -1
 * where the constraint allows none. */
static int32_t draw(struct dp_batch_state *st, const dp_batch_entry *e, int j, int V) {
    const int32_t d = st->drawn[j];
    if (d >= 0) return d;
    if (d == DP_DRAWN_NONE) {
        dp_set_error(DP_ERR_ARG, "constraint: no token can continue the text (the vocabulary lacks the bytes)");
        return -1;
    }
    float *row = st->logits + (size_t)j * V;
    if (!e->constraint) return dp_sampler_sample(e->sampler, row);
    if (e->logits) row = memcpy(st->work, row, sizeof(float) * (size_t)V);
    const int32_t t = dp_constraint_sample(e->constraint, e->sampler, row, V);
    return t < 0 ? -1 : t;
}

int dp_eval_batch(dp_session *s, const dp_batch_entry *e, int n, int32_t *out_tokens) {
    struct dp_batch_state *st = s->batch;
    st->n_entries = 0;
    if (n <= 0 || !e) return dp_set_error(DP_ERR_ARG, "dp_eval_batch: no entries");
    if (n > s->n_batch)
        return dp_set_error(DP_ERR_ARG, "dp_eval_batch: %d entries exceed the batch size %d (n_batch)", n, s->n_batch);
    int n_runs, n_sampled = 0, constrained_keep = 0;
    for (int i = 0; i < n; i++) {
        n_sampled += e[i].sampler != NULL;
        if (e[i].constraint && !e[i].sampler)
            return dp_set_error(DP_ERR_ARG, "dp_eval_batch: entry %d has a constraint but no sampler", i);
        constrained_keep |= e[i].constraint && e[i].logits;
    }
    if (n_sampled && !out_tokens)
        return dp_set_error(DP_ERR_ARG, "dp_eval_batch: %d entries have a sampler but out_tokens is NULL", n_sampled);
    int rc = plan_runs(s, e, n, &n_runs);
    if (rc) return rc;
    /* runs in ascending order of length (stable), each run's rows in
     * position order */
    sort_runs(st, n_runs, st->run_n);
    int row = 0, n_single = 0;
    for (int k = 0; k < n_runs; k++) {
        int r = st->order[k];
        st->runs[r].row0 = row;
        st->runs[r].n = st->run_n[r];
        row += st->run_n[r];
        n_single += st->run_n[r] == 1;
    }
    for (int i = 0; i < n; i++) {
        int r = st->run_of_seq[e[i].seq], rw = st->runs[r].row0 + st->run_fill[r]++;
        st->tokens[rw] = e[i].token;
        st->row_entry[rw] = i;
        st->slot[i] = -1;
    }
    for (int r = 0; r < n_runs; r++) st->run_of_seq[st->runs[r].seq] = -1;
    /* wanted rows by run, runs in ascending order of how many they want */
    int n_out = 0;
    sort_runs(st, n_runs, st->run_want);
    for (int q = 0; q < n_runs; q++) {
        const dp_run *u = &st->runs[st->order[q]];
        for (int k = 0; k < u->n; k++) {
            int rw = u->row0 + k, i = st->row_entry[rw];
            if (!e[i].logits && !e[i].sampler) continue;
            st->slot[i] = n_out;
            st->samplers[n_out] = e[i].sampler;
            st->constraints[n_out] = e[i].sampler ? e[i].constraint : NULL;
            st->keep[n_out] = e[i].logits != 0;
            st->drawn[n_out] = -1;
            st->out_rows[n_out++] = rw;
        }
    }
    /* the backend sees the runs in row order */
    sort_runs(st, n_runs, st->run_n);
    for (int k = 0; k < n_runs; k++) st->sorted[k] = st->runs[st->order[k]];
    memcpy(st->runs, st->sorted, sizeof(dp_run) * (size_t)n_runs);
    /* hidden states wanted, in row order (so each run's are consecutive) */
    int n_hid = 0;
    for (int rw = 0; rw < n; rw++)
        if (e[st->row_entry[rw]].hidden) st->hid_entry[n_hid] = st->row_entry[rw], st->hid_rows[n_hid++] = rw;
    const int E = s->m->hp.n_embd;
    if (n_hid > st->hidden_rows) {
        float *h = realloc(st->hidden, sizeof(float) * (size_t)n_hid * (size_t)E);
        if (!h) return dp_set_error(DP_ERR_NOMEM, "out of memory for the hidden states of %d batch entries", n_hid);
        st->hidden = h, st->hidden_rows = n_hid;
    }
    int V = s->m->hp.n_vocab;
    if ((rc = ensure_logits(s, st, n_out, V))) return rc;
    if (constrained_keep && !st->work && !(st->work = dp_malloc(sizeof(float) * (size_t)V))) return DP_ERR_NOMEM;
    dp_batch b = {.n_rows = n, .tokens = st->tokens, .n_runs = n_runs, .runs = st->runs, .n_out = n_out,
                  .out_rows = st->out_rows, .logits = st->logits, .samplers = st->samplers,
                  .constraints = st->constraints, .keep = st->keep, .drawn = st->drawn, .n_hid = n_hid,
                  .hid_rows = st->hid_rows, .hidden = st->hidden};
    double t0 = dp_time_s();
    if (!s->be->forward_batch) s->n_logits = 0; /* its forward pass wrote dp_logits' rows */
    if ((rc = run_batch(s, &b))) return rc;
    for (int k = 0; k < n_hid; k++)
        memcpy(e[st->hid_entry[k]].hidden, st->hidden + (size_t)k * E, sizeof(float) * (size_t)E);
    for (int i = 0; i < n; i++)
        if (e[i].sampler) out_tokens[i] = draw(st, &e[i], st->slot[i], V);
    for (int i = 0; i < n; i++)
        if (!e[i].logits) st->slot[i] = -1;
    st->n_entries = n;
    double dt = dp_time_s() - t0;
    s->stats.n_eval_calls++;
    s->stats.n_decode_tokens += (uint64_t)n_single;
    s->stats.n_prefill_tokens += (uint64_t)(n - n_single);
    if (n_single == n) s->stats.decode_s += dt;
    else s->stats.prefill_s += dt;
    return DP_OK;
}

const float *dp_batch_logits(const dp_session *s, int i) {
    const struct dp_batch_state *st = s->batch;
    if (i < 0 || i >= st->n_entries || st->slot[i] < 0) return NULL;
    return st->logits + (size_t)st->slot[i] * (size_t)s->m->hp.n_vocab;
}
