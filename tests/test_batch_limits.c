/* The batched engine at its limits (synthetic tiny llama, CPU):
 *  - 16 sequences sharing a 1000-token prefix through the prefix cache hold
 *    one prefix worth of pages plus their own suffixes, and decode as their
 *    solo runs do;
 *  - a batch needing more pages than the pool gets DP_ERR_KV_FULL with
 *    nothing changed; the other sequences carry on; freed sequences' cached
 *    pages are evicted for new ones;
 *  - bad input (unknown or freed ids, positions that skip or go back, too
 *    many entries, a fork of a removed sequence, ...) and a trace callback
 *    that stops a batch give clear errors, change nothing, and the engine
 *    goes on to the solo results;
 *  - trace events name their sequence, one per run, with the data of the
 *    sequence's solo run. */
#include <stdio.h>

#include "batch_ref.h"

static dp_model *g_m;
static int g_V;

static void random_tokens(int32_t *t, int n) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)(t_rand_u64() % (uint64_t)g_V);
}

/* Evaluates tokens[0..n) of seq through dp_eval_batch in chunks of
 * `chunk`, the last entry keeping its logits (returned). */
static const float *feed(dp_session *s, int seq, const int32_t *tokens, int n, int chunk) {
    dp_batch_entry e[512];
    int pos = dp_seq_pos(s, seq), rc = 0;
    for (int done = 0; done < n && !rc; done += chunk) {
        int k = n - done < chunk ? n - done : chunk;
        for (int i = 0; i < k; i++)
            e[i] = (dp_batch_entry){.seq = seq, .pos = pos + done + i, .token = tokens[done + i],
                                    .logits = done + i == n - 1};
        rc = dp_eval_batch(s, e, k, NULL);
    }
    CHECKF(rc == 0, "feed sequence %d: %s", seq, dp_last_error());
    return rc ? NULL : dp_batch_logits(s, chunk < n ? (n - 1) % chunk : n - 1);
}

static void compare(const float *got, const float *want, const char *what) {
    double d = got && want ? dp_rel_l2(got, want, (size_t)g_V) : 1.0;
    CHECKF(d <= 1e-5, "%s: logits rel-L2 %g against the solo run", what, d);
}

/* ------------------------------------------------------- shared prefix */

static void shared_prefix(void) {
    enum { N = 16, PREFIX = 1000, SUFFIX = 5, CTX = 1100, GEN = 4 };
    dp_session *s = bt_session(g_m, N, CTX, 512, 0);
    if (!s) return;
    static int32_t tok[N][PREFIX + SUFFIX + GEN];
    random_tokens(tok[0], PREFIX + SUFFIX);
    for (int i = 1; i < N; i++) {
        memcpy(tok[i], tok[0], sizeof(int32_t) * PREFIX);
        random_tokens(tok[i] + PREFIX, SUFFIX);
    }
    /* sequence 0 computes everything, in chunks of 248 (992 = 4 x 248: the
     * reused pages end where a call ended, so the solo runs below compute
     * them in the same calls) */
    feed(s, 0, tok[0], PREFIX + SUFFIX, 248);
    /* the others attach the prefix's whole pages and evaluate the rest in one batch */
    static dp_batch_entry e[N * 16];
    int n = 0, reused = 0, first[N];
    for (int i = 1; i < N; i++) {
        int q = dp_seq_new(s);
        CHECK(q == i);
        reused = dp_seq_reuse_prefix(s, q, tok[i], PREFIX + SUFFIX);
        CHECKF(reused == PREFIX / 16 * 16, "sequence %d reused %d positions", q, reused);
        if (reused < 0) reused = 0;
        first[i] = n;
        for (int p = reused; p < PREFIX + SUFFIX; p++)
            e[n++] = (dp_batch_entry){.seq = q, .pos = p, .token = tok[i][p], .logits = p == PREFIX + SUFFIX - 1};
    }
    CHECK(dp_eval_batch(s, e, n, NULL) == DP_OK);
    dp_kv_stats st;
    dp_session_kv_stats(s, &st);
    int prefix_pages = PREFIX / 16, own = (PREFIX + SUFFIX - PREFIX / 16 * 16 + 15) / 16;
    printf("%d sequences of %d positions sharing a %d-token prefix: %d pages used (%d shared), %d without sharing\n", N,
           PREFIX + SUFFIX, PREFIX, st.used, st.shared, N * ((PREFIX + SUFFIX + 15) / 16));
    CHECKF(st.used == prefix_pages + N * own && st.shared == prefix_pages, "used %d shared %d, want %d and %d",
           st.used, st.shared, prefix_pages + N * own, prefix_pages);
    /* their solo runs: the prefix in sequence 0's calls, then the rest */
    float *solo = malloc(sizeof(float) * (size_t)g_V * GEN);
    int32_t gen[GEN];
    int check_seq[3] = {0, 1, N - 1};
    float *want[3];
    for (int c = 0; c < 3; c++) {
        int i = check_seq[c], plan[8], np = 0;
        if (i == 0) np = bt_chunks(plan, 0, PREFIX + SUFFIX, 248);
        else np = bt_chunks(plan, bt_chunks(plan, 0, reused, 248), PREFIX + SUFFIX - reused, 512);
        want[c] = malloc(sizeof(float) * (size_t)g_V * GEN);
        bt_solo(g_m, CTX, tok[i], plan, np, GEN, gen, want[c]);
        memcpy(tok[i] + PREFIX + SUFFIX, gen, sizeof gen);
    }
    compare(dp_batch_logits(s, first[1] + PREFIX + SUFFIX - reused - 1), want[1], "shared prefix, sequence 1");
    /* decode all 16 together with the solo tokens of the checked ones */
    for (int g = 1; g < GEN; g++) {
        for (int i = 0; i < N; i++) {
            int c = i == 0 ? 0 : i == 1 ? 1 : i == N - 1 ? 2 : -1;
            int32_t t = c >= 0 ? tok[i][PREFIX + SUFFIX + g - 1] : (int32_t)(t_rand_u64() % (uint64_t)g_V);
            e[i] = (dp_batch_entry){.seq = i, .pos = PREFIX + SUFFIX + g - 1, .token = t, .logits = 1};
        }
        CHECK(dp_eval_batch(s, e, N, NULL) == DP_OK);
        for (int c = 0; c < 3; c++)
            compare(dp_batch_logits(s, check_seq[c]), want[c] + (size_t)g * g_V, "shared prefix decode");
    }
    for (int i = 0; i < N; i++) CHECK(dp_seq_free(s, i) == DP_OK);
    dp_session_kv_stats(s, &st);
    CHECKF(st.used == 0 && st.cached == prefix_pages + (N - 0) * ((PREFIX + SUFFIX + GEN - 1) / 16 - prefix_pages),
           "after freeing: used %d cached %d", st.used, st.cached);
    for (int c = 0; c < 3; c++) free(want[c]);
    free(solo);
    dp_session_free(s);
}

/* ------------------------------------------------------------ full pool */

static void full_pool(void) {
    dp_session *probe = bt_session(g_m, 1, 64, 64, 0);
    if (!probe) return;
    dp_backend_info bi;
    CHECK(dp_session_describe(probe, &bi) == DP_OK);
    dp_session_free(probe);
    uint64_t page_bytes = bi.kv_bytes_per_token * 16;
    dp_session *s = bt_session(g_m, 3, 512, 512, 20 * page_bytes);
    if (!s) return;
    dp_kv_stats st, st2;
    dp_session_kv_stats(s, &st);
    CHECK(st.n_pages == 20 && st.page_size == 16 && st.free == 20);
    int32_t a[120], b[120], c[220];
    random_tokens(a, 120);
    random_tokens(b, 120);
    random_tokens(c, 220);
    int B = dp_seq_new(s), C = dp_seq_new(s);
    CHECK(B == 1 && C == 2);
    feed(s, 0, a, 100, 100);
    feed(s, B, b, 100, 100);
    dp_session_kv_stats(s, &st);
    CHECK(st.used == 14 && st.free == 6);
    /* A and B decode one each, C brings 200 tokens (13 pages): too many */
    dp_batch_entry e[256];
    int n = 0;
    e[n++] = (dp_batch_entry){.seq = 0, .pos = 100, .token = a[100], .logits = 1};
    e[n++] = (dp_batch_entry){.seq = B, .pos = 100, .token = b[100], .logits = 1};
    for (int i = 0; i < 200; i++) e[n++] = (dp_batch_entry){.seq = C, .pos = i, .token = c[i]};
    CHECK(dp_eval_batch(s, e, n, NULL) == DP_ERR_KV_FULL);
    CHECKF(strstr(dp_last_error(), "KV cache full") != NULL, "message: %s", dp_last_error());
    dp_session_kv_stats(s, &st2);
    CHECK(!memcmp(&st, &st2, sizeof st) && dp_seq_pos(s, 0) == 100 && dp_seq_pos(s, B) == 100 && dp_seq_pos(s, C) == 0);
    /* the others carry on */
    CHECK(dp_eval_batch(s, e, 2, NULL) == DP_OK);
    int plan[2] = {100, 1};
    float *want = malloc(sizeof(float) * (size_t)g_V * 2);
    int32_t gen[2];
    bt_solo(g_m, 512, a, plan, 2, 1, gen, want);
    compare(dp_batch_logits(s, 0), want, "A after a full pool");
    bt_solo(g_m, 512, b, plan, 2, 1, gen, want);
    compare(dp_batch_logits(s, 1), want, "B after a full pool");
    /* B leaves: its pages become cached or free, C's 200 tokens evict them */
    CHECK(dp_seq_free(s, B) == DP_OK);
    const float *lc = feed(s, C, c, 200, 200);
    int pc[1] = {200};
    bt_solo(g_m, 512, c, pc, 1, 1, gen, want);
    compare(lc, want, "C in evicted pages");
    dp_session_kv_stats(s, &st);
    CHECKF(st.used == 7 + 13 && st.cached == 0 && st.free == 0, "used %d cached %d free %d", st.used, st.cached,
           st.free);
    free(want);
    dp_session_free(s);
}

/* ------------------------------------------------------------ bad input */

static int g_stop_after;
static int stop_cb(void *user, const dp_trace_event *ev) {
    (void)user;
    (void)ev;
    return --g_stop_after <= 0;
}

#define EXPECT(call, code, text)                                                                                  \
    do {                                                                                                          \
        int rc_ = (call);                                                                                         \
        CHECKF(rc_ == (code) && strstr(dp_last_error(), text), "%s: %d (%s), want %d with '%s'", #call, rc_,     \
               dp_last_error(), code, text);                                                                      \
    } while (0)

static void bad_input(void) {
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = DP_BACKEND_CPU;
    sp.n_seq_max = -1;
    CHECK(dp_session_new(g_m, &sp) == NULL && strstr(dp_last_error(), "must not be negative"));
    sp.n_seq_max = 1 << 20;
    CHECK(dp_session_new(g_m, &sp) == NULL && strstr(dp_last_error(), "at most 65536 sequences"));
    sp.n_seq_max = 2;
    sp.kv_mem = 1000;
    CHECK(dp_session_new(g_m, &sp) == NULL && strstr(dp_last_error(), "holds no KV page"));
    /* a batch may hold more entries than one sequence's context */
    sp.kv_mem = 0;
    sp.n_ctx = 16;
    sp.n_batch = 64;
    dp_session *wide = dp_session_new(g_m, &sp);
    CHECK(wide != NULL);
    if (wide) {
        int32_t w[32];
        random_tokens(w, 32);
        dp_batch_entry we[32];
        CHECK(dp_seq_new(wide) == 1);
        for (int i = 0; i < 32; i++) we[i] = (dp_batch_entry){.seq = i / 16, .pos = i % 16, .token = w[i]};
        CHECK(dp_eval_batch(wide, we, 32, NULL) == DP_OK && dp_seq_pos(wide, 1) == 16);
        dp_session_free(wide);
    }

    dp_session *s = bt_session(g_m, 3, 128, 32, 0);
    if (!s) return;
    int32_t t[40];
    random_tokens(t, 40);
    int A = 0, B = dp_seq_new(s);
    feed(s, A, t, 10, 10);
    feed(s, B, t, 5, 5);
    dp_kv_stats before, after;
    dp_session_kv_stats(s, &before);
    dp_batch_entry e[40];
    dp_sampler_params spp;
    dp_sampler_params_default(&spp);
    dp_sampler *smp = dp_sampler_new(&spp, g_V);
    e[0] = (dp_batch_entry){.seq = A, .pos = 10, .token = t[10], .logits = 1};
    e[1] = (dp_batch_entry){.seq = B, .pos = 5, .token = t[5], .logits = 1};
    EXPECT(dp_eval_batch(s, e, 0, NULL), DP_ERR_ARG, "no entries");
    EXPECT(dp_eval_batch(s, NULL, 2, NULL), DP_ERR_ARG, "no entries");
    for (int i = 2; i < 40; i++) e[i] = (dp_batch_entry){.seq = B, .pos = 4 + i, .token = t[i % 40]};
    EXPECT(dp_eval_batch(s, e, 33, NULL), DP_ERR_ARG, "exceed the batch size 32");
    e[2] = (dp_batch_entry){.seq = 7, .pos = 0, .token = 1};
    EXPECT(dp_eval_batch(s, e, 3, NULL), DP_ERR_ARG, "entry 2: unknown sequence 7");
    e[2].seq = -1;
    EXPECT(dp_eval_batch(s, e, 3, NULL), DP_ERR_ARG, "unknown sequence -1");
    e[2].seq = 2; /* never created */
    EXPECT(dp_eval_batch(s, e, 3, NULL), DP_ERR_ARG, "sequence 2 is not alive");
    e[2] = (dp_batch_entry){.seq = B, .pos = 7, .token = 1}; /* skips 6 */
    EXPECT(dp_eval_batch(s, e, 3, NULL), DP_ERR_ARG, "position 7, expected 6");
    e[2].pos = 5; /* the same position again */
    EXPECT(dp_eval_batch(s, e, 3, NULL), DP_ERR_ARG, "position 5, expected 6");
    e[2].pos = 3; /* backwards */
    EXPECT(dp_eval_batch(s, e, 3, NULL), DP_ERR_ARG, "expected 6");
    e[2] = (dp_batch_entry){.seq = B, .pos = 6, .token = g_V};
    EXPECT(dp_eval_batch(s, e, 3, NULL), DP_ERR_ARG, "outside the vocabulary");
    e[2].token = -5;
    EXPECT(dp_eval_batch(s, e, 3, NULL), DP_ERR_ARG, "outside the vocabulary");
    e[2] = (dp_batch_entry){.seq = B, .pos = 6, .token = 3, .sampler = smp};
    EXPECT(dp_eval_batch(s, e, 3, NULL), DP_ERR_ARG, "out_tokens is NULL");
    /* a sequence past its context */
    dp_session *small = bt_session(g_m, 2, 16, 32, 0);
    if (small) {
        feed(small, 0, t, 15, 15);
        dp_batch_entry f[2] = {{.seq = 0, .pos = 15, .token = 1}, {.seq = 0, .pos = 16, .token = 2}};
        EXPECT(dp_eval_batch(small, f, 2, NULL), DP_ERR_CTX_FULL, "context full: sequence 0 holds 15");
        dp_session_free(small);
    }
    /* sequence calls */
    EXPECT(dp_seq_fork(s, 2), DP_ERR_ARG, "sequence 2 is not alive");
    int F = dp_seq_fork(s, B);
    CHECK(F == 2 && dp_seq_pos(s, F) == 5);
    EXPECT(dp_seq_new(s), DP_ERR_ARG, "all 3 sequences");
    EXPECT(dp_seq_fork(s, A), DP_ERR_ARG, "all 3 sequences");
    CHECK(dp_seq_free(s, F) == DP_OK);
    EXPECT(dp_seq_free(s, F), DP_ERR_ARG, "not alive");
    EXPECT(dp_seq_fork(s, F), DP_ERR_ARG, "sequence 2 is not alive"); /* a fork of a removed sequence */
    EXPECT(dp_seq_truncate(s, B, 6), DP_ERR_ARG, "holds 5 positions");
    EXPECT(dp_seq_truncate(s, 9, 0), DP_ERR_ARG, "unknown sequence 9");
    EXPECT(dp_seq_pos(s, 9), DP_ERR_ARG, "unknown sequence");
    EXPECT(dp_seq_reuse_prefix(s, B, t, 40), DP_ERR_ARG, "not empty");
    /* a trace callback stopping the batch half way rolls it back */
    g_stop_after = 5;
    CHECK(dp_session_set_trace(s, stop_cb, NULL, NULL) == DP_OK);
    EXPECT(dp_eval_batch(s, e, 2, NULL), DP_ERR_STOPPED, "stopped by a trace callback");
    CHECK(dp_session_set_trace(s, NULL, NULL, NULL) == DP_OK);
    dp_session_kv_stats(s, &after);
    CHECK(!memcmp(&before, &after, sizeof before) && dp_seq_pos(s, A) == 10 && dp_seq_pos(s, B) == 5);
    /* after all that: the solo results */
    CHECK(dp_eval_batch(s, e, 2, NULL) == DP_OK);
    int plan10[2] = {10, 1}, plan5[2] = {5, 1};
    float *want = malloc(sizeof(float) * (size_t)g_V);
    int32_t gen[1];
    bt_solo(g_m, 128, t, plan10, 2, 1, gen, want);
    compare(dp_batch_logits(s, 0), want, "A after bad input");
    bt_solo(g_m, 128, t, plan5, 2, 1, gen, want);
    compare(dp_batch_logits(s, 1), want, "B after bad input");
    CHECK(dp_batch_logits(s, 2) == NULL && dp_batch_logits(s, -1) == NULL);
    free(want);
    dp_sampler_free(smp);
    dp_session_free(s);
}

/* ---------------------------------------------------------------- trace */

typedef struct {
    int n;
    dp_trace_event ev[64];
    float *data[64];
} trace_log;

static int log_cb(void *user, const dp_trace_event *ev) {
    trace_log *t = user;
    if (t->n < 64) {
        t->ev[t->n] = *ev;
        size_t bytes = sizeof(float) * (size_t)ev->n_pos * ev->dim;
        t->data[t->n] = malloc(bytes);
        memcpy(t->data[t->n], ev->data, bytes);
        t->ev[t->n].data = t->data[t->n];
        t->n++;
    }
    return 0;
}

static void trace_free(trace_log *t) {
    for (int i = 0; i < t->n; i++) free(t->data[i]);
    t->n = 0;
}

static void trace_per_sequence(void) {
    int L = dp_model_get_info(g_m)->n_layer;
    uint8_t *layers = calloc((size_t)L, 1);
    layers[L - 1] = 1;
    dp_trace_filter f = {.points = 1ull << DP_TP_RESID_FFN | 1ull << DP_TP_LOGITS, .layers = layers, .n_layers = L};
    /* three sequences: 7 cached + 1 new, 3 cached + 5 new, 2 new */
    int cached[3] = {7, 3, 0}, fresh[3] = {1, 5, 2};
    int32_t t[3][16];
    for (int i = 0; i < 3; i++) random_tokens(t[i], 16);
    dp_session *s = bt_session(g_m, 3, 64, 64, 0);
    if (!s) return;
    for (int i = 0; i < 3; i++) {
        CHECK(i == 0 || dp_seq_new(s) == i);
        if (cached[i]) feed(s, i, t[i], cached[i], 16);
    }
    trace_log got = {0};
    CHECK(dp_session_set_trace(s, log_cb, &got, &f) == DP_OK);
    dp_batch_entry e[16];
    int n = 0;
    for (int k = 0; k < 5; k++) /* interleaved */
        for (int i = 0; i < 3; i++)
            if (k < fresh[i])
                e[n++] = (dp_batch_entry){.seq = i, .pos = cached[i] + k, .token = t[i][cached[i] + k],
                                          .logits = k == fresh[i] - 1};
    CHECK(dp_eval_batch(s, e, n, NULL) == DP_OK);
    /* one event per sequence and point (logits: its one wanted row) */
    CHECKF(got.n == 6, "%d events", got.n);
    for (int i = 0; i < 3; i++) {
        trace_log solo = {0};
        dp_session *o = bt_session(g_m, 1, 64, 64, 0);
        if (!o) break;
        if (cached[i]) CHECK(dp_eval(o, t[i], cached[i]) == DP_OK);
        CHECK(dp_session_set_trace(o, log_cb, &solo, &f) == DP_OK);
        CHECK(dp_eval(o, t[i] + cached[i], fresh[i]) == DP_OK);
        CHECK(solo.n == 2);
        for (int k = 0; k < solo.n; k++) {
            const dp_trace_event *w = &solo.ev[k], *g = NULL;
            for (int j = 0; j < got.n; j++)
                if (got.ev[j].seq == i && got.ev[j].point == w->point) g = &got.ev[j];
            CHECKF(g && g->layer == w->layer && g->pos0 == w->pos0 && g->n_pos == w->n_pos && g->dim == w->dim,
                   "sequence %d point %s: event differs from the solo run's", i, dp_trace_point_name(w->point));
            if (g && g->n_pos == w->n_pos && g->dim == w->dim)
                CHECKF(dp_rel_l2(g->data, w->data, (size_t)g->n_pos * g->dim) <= 1e-5, "sequence %d point %s data", i,
                       dp_trace_point_name(w->point));
            CHECK(w->seq == 0);
        }
        trace_free(&solo);
        dp_session_free(o);
    }
    trace_free(&got);
    free(layers);
    dp_session_free(s);
}

int main(void) {
    t_seed();
    g_m = bt_synth("llama", "q4_k_m");
    if (!g_m) return t_done("test_batch_limits");
    g_V = dp_model_get_info(g_m)->n_vocab;
    shared_prefix();
    full_pool();
    bad_input();
    trace_per_sequence();
    dp_model_free(g_m);
    return t_done("test_batch_limits");
}
