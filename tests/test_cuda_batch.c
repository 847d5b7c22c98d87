/* The CUDA batched engine (dp_eval_batch) against solo runs (skipped, with
 * the reason, when the build has no CUDA or the machine no GPU):
 *  - sequences joining and leaving, prompt chunks beside decode rows, a fork
 *    and a reused prefix in one session, every family (soft-capping, NoPE,
 *    fused tensors, per-head norms, windows) and the k_mmv formats (the IQ4
 *    types too) and one it does not take (f16): each sequence's logits within
 *    rel-L2 1e-2 of the same passes run alone, greedy tokens equal except
 *    near-ties; with the f16 weight copies' GEMMs (prompt chunks; decode
 *    rows and the LM head too with DOPPLER_CUDA_F16_ROWS=2 and
 *    DOPPLER_CUDA_F16_LM_ROWS=2; joint Q/K/V and gate/up products and one
 *    per matrix) and without them (k_mmv);
 *  - LongRoPE: a sequence past the original context beside one before it,
 *    each with the tables its own positions select, as alone;
 *  - a batch larger than the pool is refused with nothing changed, bad
 *    entries too; a traced batch names each event's sequence. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch_ref.h"
#include "cuda_probe.h"
#include "doppler.h"
#include "testlib.h"

static void rand_tokens(int32_t *toks, int n, int V) {
    for (int i = 0; i < n; i++) toks[i] = (int32_t)(t_rand_u64() % (uint64_t)V);
}

/* A CUDA session of n_seq sequences of n_ctx positions (NULL with a failed check). */
static dp_session *cuda_session(dp_model *m, int n_ctx, int n_seq) {
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = DP_BACKEND_CUDA, sp.n_ctx = n_ctx, sp.n_seq_max = n_seq;
    dp_session *s = dp_session_new(m, &sp);
    CHECKF(s != NULL, "a CUDA session (%d sequences, ctx %d): %s", n_seq, n_ctx, dp_last_error());
    return s;
}

/* A sequence of the batched scenario: its tokens by position, the passes
 * that evaluated them (start, count), and what came back for the last
 * position of each pass: kept logits, or a token drawn on the device. */
enum { BQ_MAX = 8, BQ_POS = 1100, BQ_PASSES = 40, BQ_ROWS = 512 };
typedef struct {
    int id, alive, len;
    int32_t tok[BQ_POS];
    int pass_at[BQ_PASSES], pass_n[BQ_PASSES], n_pass;
    float *logits[BQ_PASSES]; /* NULL: a device-drawn token */
    int32_t drawn[BQ_PASSES];
} bseq;

typedef struct {
    dp_session *s;
    dp_sampler *greedy;
    int V, rows;
    dp_batch_entry e[BQ_ROWS];
    int owner[BQ_ROWS], pass[BQ_ROWS]; /* the bseq and its pass of each entry ending a pass, owner -1 otherwise */
} bctx;

/* Appends n tokens of q (from q->tok at q->len) to the batch; the last one
 * wants logits (keep) or a device-drawn greedy token. */
static void bq_add(bctx *b, bseq *q, int qi, int n, int keep) {
    for (int k = 0; k < n; k++) {
        dp_batch_entry *e = &b->e[b->rows];
        *e = (dp_batch_entry){.seq = q->id, .pos = q->len + k, .token = q->tok[q->len + k]};
        if (k == n - 1) e->logits = keep, e->sampler = b->greedy;
        b->pass[b->rows] = q->n_pass;
        b->owner[b->rows++] = k == n - 1 ? qi : -1;
    }
    q->pass_at[q->n_pass] = q->len, q->pass_n[q->n_pass] = n;
    q->logits[q->n_pass] = NULL, q->drawn[q->n_pass] = -1;
    q->n_pass++;
    q->len += n;
}

/* Evaluates the batch; each sequence's next token is the greedy one. */
static int bq_run(bctx *b, bseq *Q) {
    int32_t out[BQ_ROWS];
    const int rc = dp_eval_batch(b->s, b->e, b->rows, out);
    CHECKF(rc == DP_OK, "batch of %d rows: %s", b->rows, dp_last_error());
    for (int i = 0; rc == DP_OK && i < b->rows; i++) {
        if (b->owner[i] < 0) continue;
        bseq *q = &Q[b->owner[i]];
        const int pi = b->pass[i];
        if (b->e[i].logits) {
            const float *l = dp_batch_logits(b->s, i);
            q->logits[pi] = malloc(sizeof(float) * (size_t)b->V);
            memcpy(q->logits[pi], l, sizeof(float) * (size_t)b->V);
            CHECKF(out[i] == bt_argmax(l, b->V), "greedy token %d is not the argmax of the kept logits", out[i]);
        }
        q->drawn[pi] = out[i];
        if (q->len < BQ_POS) q->tok[q->len] = out[i];
    }
    b->rows = 0;
    return rc;
}

/* Each sequence alone in a session of its own, fed the same passes: logits
 * within 1e-2 rel-L2 (verify's limit between backends' traces), the same
 * top-1 except near-ties, where the solo margin between its top-1 and the
 * batch's token lies within the logit difference (kept rows: measured;
 * device-drawn rows: 4x the worst measured). */
static void bq_compare(dp_model *m, bseq *Q, int nq, const char *what) {
    const int V = dp_model_get_info(m)->n_vocab;
    double worst = 0, diff = 0;
    int ties = 0, bad = 0, rows = 0;
    for (int pass = 0; pass < 2; pass++) /* kept logits first: they set the tie tolerance of drawn rows */
        for (int qi = 0; qi < nq; qi++) {
            bseq *q = &Q[qi];
            dp_session *solo = cuda_session(m, BQ_POS, 1);
            if (!solo) return;
            for (int k = 0; k < q->n_pass; k++) {
                CHECKF(dp_eval(solo, q->tok + q->pass_at[k], q->pass_n[k]) == DP_OK, "%s solo: %s", what, dp_last_error());
                const float *l = dp_logits(solo, -1);
                const int top = l ? bt_argmax(l, V) : -1;
                /* a fork's or a reused prefix's inherited part has no output of its own */
                if (!l || (pass == 0) != (q->logits[k] != NULL) || (!q->logits[k] && q->drawn[k] < 0)) continue;
                int chosen = q->drawn[k];
                double tol = 4 * diff;
                if (q->logits[k]) {
                    const double e = dp_rel_l2(q->logits[k], l, (size_t)V);
                    worst = e > worst ? e : worst;
                    tol = 0;
                    for (int i = 0; i < V; i++) tol = fmax(tol, fabs(q->logits[k][i] - l[i]));
                    diff = fmax(diff, tol);
                    tol *= 2;
                    chosen = bt_argmax(q->logits[k], V);
                }
                rows++;
                if (chosen != top) {
                    if (l[top] - l[chosen] <= tol) ties++;
                    else bad++;
                }
            }
            dp_session_free(solo);
        }
    printf("%-26s batch vs solo: %d rows, logits rel-L2 worst %.2e, %d near-ties\n", what, rows, worst, ties);
    CHECKF(worst <= 1e-2, "%s: batched logits differ from the solo run's: rel-L2 %g", what, worst);
    CHECKF(bad == 0, "%s: %d batched greedy tokens differ from the solo run's beyond the logit error", what, bad);
}

/* Sequences joining and leaving, prompt chunks beside decode rows, a fork,
 * a reused prefix, in one CUDA session; each against itself alone. */
static void batched_vs_solo(const char *arch, const char *type, const char *note) {
    const char *path = t_tmp_path(".gguf");
    dp_synth_params sp = {.arch = arch, .preset = "tiny", .type = type, .seed = t_rand_u64()};
    CHECKF(dp_synth(&sp, path) == DP_OK, "synth: %s", dp_last_error());
    dp_model *m = dp_model_load(path);
    char what[64];
    snprintf(what, sizeof what, "%s tiny %s%s", arch, type, note);
    CHECKF(m != NULL, "%s: %s", what, dp_last_error());
    if (!m) return;
    bctx b = {.V = dp_model_get_info(m)->n_vocab};
    dp_session_params ps;
    dp_session_params_default(&ps);
    ps.backend = DP_BACKEND_CUDA, ps.n_ctx = 256, ps.n_seq_max = 6;
    b.s = dp_session_new(m, &ps);
    CHECKF(b.s != NULL, "%s: a session of 6 sequences: %s", what, dp_last_error());
    if (!b.s) {
        dp_model_free(m);
        return;
    }
    dp_sampler_params spp;
    dp_sampler_params_default(&spp);
    spp.temp = 0;
    b.greedy = dp_sampler_new(&spp, b.V);
    bseq Q[BQ_MAX];
    memset(Q, 0, sizeof Q);
    for (int i = 0; i < BQ_MAX; i++)
        for (int k = 0; k < BQ_POS; k++) Q[i].tok[k] = (int32_t)(t_rand_u64() % (uint64_t)b.V);
    int nq = 3;
    Q[0].id = 0; /* 70-token prompt in two chunks, over a page boundary */
    Q[1].id = dp_seq_new(b.s), Q[2].id = dp_seq_new(b.s);
    for (int i = 0; i < 3; i++) Q[i].alive = 1;
    bq_add(&b, &Q[0], 0, 40, 1);
    bq_add(&b, &Q[1], 1, 5, 0);
    bq_add(&b, &Q[2], 2, 1, 1);
    bq_run(&b, Q);
    bq_add(&b, &Q[0], 0, 30, 0);
    for (int step = 0; step < 10 && b.s; step++) {
        for (int qi = 0; qi < nq; qi++)
            if (Q[qi].alive && (qi || step)) bq_add(&b, &Q[qi], qi, 1, qi % 2 == 0);
        if (bq_run(&b, Q) != DP_OK) break;
        if (step == 2) { /* a sequence joins with a prompt of 9 */
            Q[nq].id = dp_seq_new(b.s), Q[nq].alive = 1;
            bq_add(&b, &Q[nq], nq, 9, 1);
            nq++;
        } else if (step == 4) { /* a fork of sequence 0: its tokens so far, then its own */
            bseq *f = &Q[nq];
            f->id = dp_seq_fork(b.s, Q[0].id), f->alive = 1, f->len = Q[0].len;
            CHECKF(f->id > 0, "%s: fork: %s", what, dp_last_error());
            memcpy(f->tok, Q[0].tok, sizeof f->tok);
            f->tok[f->len] = (Q[0].tok[f->len] + 1) % b.V; /* another next token than the parent's */
            f->n_pass = 1, f->pass_at[0] = 0, f->pass_n[0] = f->len, f->logits[0] = NULL, f->drawn[0] = -1;
            dp_kv_stats ks;
            dp_session_kv_stats(b.s, &ks);
            CHECKF(ks.shared >= 1, "%s: the fork shares no page (%d shared)", what, ks.shared);
            nq++;
        } else if (step == 5) { /* sequence 1 leaves; a new one reuses sequence 0's first page */
            CHECK(dp_seq_free(b.s, Q[1].id) == DP_OK);
            Q[1].alive = 0;
            bseq *r = &Q[nq];
            r->id = dp_seq_new(b.s), r->alive = 1;
            memcpy(r->tok, Q[0].tok, 64 * sizeof(int32_t));
            const int got = dp_seq_reuse_prefix(b.s, r->id, r->tok, 70);
            CHECKF(got == 64, "%s: the prefix cache gave %d positions of 64", what, got);
            r->len = got > 0 ? got : 0;
            if (r->len) r->n_pass = 1, r->pass_at[0] = 0, r->pass_n[0] = r->len, r->drawn[0] = -1;
            bq_add(&b, r, nq, 70 - r->len, 1);
            nq++;
        }
    }
    /* the solo references take each pass as one evaluation; a fork's and a
     * reused prefix's first pass is the inherited part */
    bq_compare(m, Q, nq, what);
    for (int qi = 0; qi < nq; qi++)
        for (int k = 0; k < Q[qi].n_pass; k++) free(Q[qi].logits[k]);
    dp_sampler_free(b.greedy);
    dp_session_free(b.s);
    dp_model_free(m);
    remove(path);
}

/* The pool limit: a batch needing more pages than are free is refused with
 * nothing changed, and the other sequences carry on; bad entries too. */
static void batch_limits(dp_model *m) {
    dp_session_params ps;
    dp_session_params_default(&ps);
    ps.backend = DP_BACKEND_CUDA, ps.n_ctx = 256, ps.n_seq_max = 4;
    dp_session *s = dp_session_new(m, &ps);
    CHECKF(s != NULL, "a CUDA session of 4 sequences: %s", dp_last_error());
    if (!s) return;
    dp_kv_stats ks;
    dp_session_kv_stats(s, &ks);
    CHECKF(ks.page_size == 64 && ks.n_pages == 16, "CUDA pool: %d pages of %d", ks.n_pages, ks.page_size);
    dp_session_free(s);
    dp_backend_info bi;
    ps.kv_mem = 1; /* refused: not one page */
    CHECKF(dp_session_new(m, &ps) == NULL && strstr(dp_last_error(), "kv_mem"), "kv_mem of 1 byte: %s", dp_last_error());
    ps.kv_mem = 0;
    s = dp_session_new(m, &ps);
    CHECK(s && dp_session_describe(s, &bi) == DP_OK);
    const uint64_t page = bi.kv_bytes / 16;
    dp_session_free(s);
    ps.kv_mem = 3 * page; /* three pages of 64 positions */
    s = dp_session_new(m, &ps);
    CHECKF(s != NULL, "a pool of 3 pages: %s", dp_last_error());
    if (!s) return;
    int32_t t[200];
    rand_tokens(t, 200, dp_model_get_info(m)->n_vocab);
    const int q1 = dp_seq_new(s);
    CHECK(dp_eval(s, t, 100) == DP_OK); /* sequence 0: two pages */
    dp_batch_entry e[130];
    for (int i = 0; i < 130; i++) e[i] = (dp_batch_entry){.seq = q1, .pos = i, .token = t[i], .logits = i == 129};
    CHECKF(dp_eval_batch(s, e, 130, NULL) == DP_ERR_KV_FULL, "130 positions in a pool with one free page: %s",
           dp_last_error());
    CHECKF(dp_seq_pos(s, q1) == 0 && dp_seq_pos(s, 0) == 100, "the refused batch changed the sequences");
    CHECK(dp_eval(s, t + 100, 1) == DP_OK && dp_logits(s, -1));
    e[0] = (dp_batch_entry){.seq = 3, .pos = 0, .token = t[0]};
    CHECKF(dp_eval_batch(s, e, 1, NULL) == DP_ERR_ARG, "an entry of a sequence that is not alive: %s", dp_last_error());
    e[0] = (dp_batch_entry){.seq = q1, .pos = 5, .token = t[0]};
    CHECKF(dp_eval_batch(s, e, 1, NULL) == DP_ERR_ARG, "a position that skips: %s", dp_last_error());
    CHECK(dp_seq_free(s, q1) == DP_OK);
    CHECKF(dp_seq_fork(s, q1) == DP_ERR_ARG, "a fork of a freed sequence: %s", dp_last_error());
    dp_session_free(s);
}

typedef struct {
    int seqs[8], n_events, bad_pos;
} trace_seqs;

static int note_seq(void *user, const dp_trace_event *ev) {
    trace_seqs *t = user;
    t->n_events++;
    if (ev->seq >= 0 && ev->seq < 8) t->seqs[ev->seq]++;
    /* sequence 1's rows are at 20..22, sequence 0's at 0..4 */
    if (ev->layer >= 0 && ev->pos0 != (ev->seq == 1 ? 20 : 0)) t->bad_pos++;
    return 0;
}

/* A traced batch of two sequences: every event names one of them. */
static void batch_trace(dp_model *m) {
    dp_session_params ps;
    dp_session_params_default(&ps);
    ps.backend = DP_BACKEND_CUDA, ps.n_ctx = 64, ps.n_seq_max = 2;
    dp_session *s = dp_session_new(m, &ps);
    if (!s) return;
    int32_t t[32];
    rand_tokens(t, 32, dp_model_get_info(m)->n_vocab);
    const int q1 = dp_seq_new(s);
    dp_batch_entry e[8];
    for (int i = 0; i < 20; i += 4) {
        for (int k = 0; k < 4; k++) e[k] = (dp_batch_entry){.seq = q1, .pos = i + k, .token = t[i + k]};
        CHECK(dp_eval_batch(s, e, 4, NULL) == DP_OK);
    }
    trace_seqs ts;
    memset(&ts, 0, sizeof ts);
    dp_trace_filter f = {.points = ~0ull};
    CHECK(dp_session_set_trace(s, note_seq, &ts, &f) == DP_OK);
    for (int k = 0; k < 5; k++) e[k] = (dp_batch_entry){.seq = 0, .pos = k, .token = t[k], .logits = k == 4};
    for (int k = 0; k < 3; k++) e[5 + k] = (dp_batch_entry){.seq = q1, .pos = 20 + k, .token = t[k], .logits = 1};
    CHECKF(dp_eval_batch(s, e, 8, NULL) == DP_OK && dp_batch_logits(s, 4) && dp_batch_logits(s, 7),
           "a traced batch: %s", dp_last_error());
    CHECKF(ts.seqs[0] > 0 && ts.seqs[1] > 0 && ts.seqs[0] + ts.seqs[1] == ts.n_events && !ts.bad_pos,
           "traced batch: %d events, %d of sequence 0, %d of 1, %d at other positions", ts.n_events, ts.seqs[0],
           ts.seqs[1], ts.bad_pos);
    dp_session_free(s);
}

/* LongRoPE (the tiny phi3: original context 1024): sequence 0 decodes
 * across position 1024 while sequence 1 stays short, one decode row each per
 * batch; each sequence takes the tables its own positions select, so each
 * equals its solo run (a batch whose sequences disagree runs in passes by
 * table set). */
static void longrope_batch(void) {
    dp_model *m = bt_synth("phi3", "q8_0");
    if (!m) return;
    bctx b = {.V = dp_model_get_info(m)->n_vocab};
    b.s = cuda_session(m, BQ_POS, 2);
    dp_sampler_params spp;
    dp_sampler_params_default(&spp);
    spp.temp = 0;
    b.greedy = dp_sampler_new(&spp, b.V);
    static bseq Q[2];
    memset(Q, 0, sizeof Q);
    for (int i = 0; i < 2; i++) {
        Q[i].alive = 1;
        for (int k = 0; k < BQ_POS; k++) Q[i].tok[k] = (int32_t)(t_rand_u64() % (uint64_t)b.V);
    }
    Q[1].id = b.s ? dp_seq_new(b.s) : -1;
    for (int done = 0; b.s && done < 1019; done += 256) { /* a prompt of 1019 in chunks, the other's of 12 beside */
        bq_add(&b, &Q[0], 0, 1019 - done < 256 ? 1019 - done : 256, done + 256 >= 1019);
        if (!done) bq_add(&b, &Q[1], 1, 12, 1);
        if (bq_run(&b, Q) != DP_OK) break;
    }
    for (int step = 0; b.s && step < 10; step++) { /* sequence 0 at 1019 .. 1028 */
        bq_add(&b, &Q[0], 0, 1, 1);
        bq_add(&b, &Q[1], 1, 1, step % 2);
        if (bq_run(&b, Q) != DP_OK) break;
    }
    if (b.s) bq_compare(m, Q, 2, "phi3 tiny q8_0, LongRoPE");
    for (int qi = 0; qi < 2; qi++)
        for (int k = 0; k < Q[qi].n_pass; k++) free(Q[qi].logits[k]);
    dp_sampler_free(b.greedy);
    dp_session_free(b.s);
    dp_model_free(m);
}

int main(void) {
    dp_model *pm = NULL;
    char why[512];
    dp_session *probe_s = t_cuda_probe(t_seed(), &pm, why, sizeof why);
    if (!probe_s) {
        dp_model_free(pm);
        if (t_failures) return t_done("test_cuda_batch");
        t_skip("no CUDA backend here: %s", why);
    }
    dp_session_free(probe_s);
    batch_limits(pm);
    batch_trace(pm);
    dp_model_free(pm);

    /* every family (gemma3: windows of 16; gemma2: soft-capping and
     * windows; qwen3: per-head norms; phi3: fused tensors; smollm3: NoPE),
     * k_mmv's formats (the IQ4 types too) and those it does not take (f16:
     * GEMMs, no graph; Q3_K and Q2_K: GEMMs on their f16 copies); the sessions of several sequences keep f16 copies
     * of the quantised matrices (prompt chunks of 8 rows or more take the
     * GEMMs, the decode rows k_mmv) */
    batched_vs_solo("qwen2", "q4_k_m", "");
    batched_vs_solo("gemma3", "q4_k_m", "");
    batched_vs_solo("llama", "q8_0", "");
    batched_vs_solo("llama", "f16", "");
    batched_vs_solo("qwen3", "iq4_xs", "");
    batched_vs_solo("gemma2", "q4_k_m", "");
    batched_vs_solo("phi3", "iq4_nl", "");
    batched_vs_solo("smollm3", "q5_k_m", "");
    batched_vs_solo("llama", "q3_k_m", "");
    batched_vs_solo("llama", "q2_k", "");
    batched_vs_solo("llama", "iq3_m", "");
    batched_vs_solo("llama", "iq2_xxs", "");
    /* the decode rows and the LM head through the f16 GEMMs too (in the
     * batched graphs): Q/K/V and gate/up as joint products, the biases in
     * the RoPE kernel; then one product per matrix */
    setenv("DOPPLER_CUDA_F16_ROWS", "2", 1);
    setenv("DOPPLER_CUDA_F16_LM_ROWS", "2", 1);
    batched_vs_solo("qwen2", "q4_k_m", ", f16 GEMMs from 2 rows");
    batched_vs_solo("gemma2", "q4_k_m", ", f16 GEMMs from 2 rows");
    batched_vs_solo("phi3", "q4_k_m", ", f16 GEMMs from 2 rows");
    setenv("DOPPLER_CUDA_BATCH_FUSE", "0", 1);
    batched_vs_solo("qwen2", "q4_k_m", ", f16 GEMMs from 2 rows, one per matrix");
    unsetenv("DOPPLER_CUDA_BATCH_FUSE");
    unsetenv("DOPPLER_CUDA_F16_LM_ROWS");
    unsetenv("DOPPLER_CUDA_F16_ROWS");
    /* no f16 copies: k_mmv for every batch of up to 64 rows */
    setenv("DOPPLER_CUDA_F16_WEIGHTS", "0", 1);
    batched_vs_solo("qwen2", "q4_k_m", ", no f16 copies");
    batched_vs_solo("gemma3", "q4_k_m", ", no f16 copies");
    unsetenv("DOPPLER_CUDA_F16_WEIGHTS");
    longrope_batch();
    return t_done("test_cuda_batch");
}
