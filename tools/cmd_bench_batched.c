/* doppler bench batched: many sequences decoded together, the workload of
 * llama-batched-bench -npp P -ntg G -npl LIST (prompts not shared).
 *
 * For each count B of --seqs, a session of B sequences (context P + G):
 *   1. prefill: B prompts of P random tokens, packed into passes of up to
 *      n_batch positions (dp_eval_batch), each prompt's last position
 *      drawing its first token greedily (prefill tok/s = B P / time; TTFT:
 *      until every sequence has its first token);
 *   2. decode: G steps of one dp_eval_batch with one greedy row per
 *      sequence (aggregate tok/s = B G / time; per sequence = G / time).
 * One warm-up round (a prefill and a few steps: the graphs of each batch
 * size are made there) precedes the --reps measured rounds, each with
 * fresh prompts, so that the prefix cache finds nothing unless
 * --shared-prefix N makes the first N tokens of every prompt the same
 * (then sequence 0 prefills them first and the others attach its pages).
 * --profile adds one more round whose decode steps are timed op by op
 * (eagerly: its speed is not reported) and prints the tables. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "profile_print.h"

#define MAX_SEQS 16

typedef struct {
    const char *model;
    int seqs[MAX_SEQS], n_seqs;
    int prompt, gen, reps, batch, threads, shared, json, profile;
    dp_backend backend;
    dp_kv_type kv_type;
} bb_opts;

typedef struct {
    double prefill_s, ttft_s, decode_s, decode_cpu_s;
    int pages_used, pages;
} bb_result;

static const char *USAGE =
    "usage: doppler bench batched [-m FILE] [options]\n\n"
    "For each sequence count B: B random prompts prefilled together, then --gen decode steps of B\n"
    "greedy rows (the workload of llama-batched-bench -npp P -ntg G -npl LIST): prefill tok/s, time\n"
    "to the first token of every sequence, aggregate and per-sequence decode tok/s, KV pages used.";

/* The sequence counts of --seqs into out[MAX_SEQS] (out may be NULL). */
static int parse_seqs(const char *v, int *out, char *err, size_t errlen) {
    return cli_parse_ints(v, 1, 65536, out, MAX_SEQS, "sequence counts", err, errlen);
}

int bench_check_seqs(const char *v, char *err, size_t errlen) { return parse_seqs(v, NULL, err, errlen) < 0 ? -1 : 0; }

static void random_tokens(int32_t *t, int n, int V, uint64_t *rng) {
    for (int i = 0; i < n; i++) {
        *rng ^= *rng << 13, *rng ^= *rng >> 7, *rng ^= *rng << 17;
        t[i] = (int32_t)(*rng % (uint64_t)V);
    }
}

/* Runs the batch or exits with the library's error. */
static void eval_or_die(dp_session *s, const dp_batch_entry *e, int n, int32_t *out) {
    const int rc = dp_eval_batch(s, e, n, out);
    if (rc) cli_die_lib(rc);
}

/* One round for B sequences: prefill, then gen decode steps (their op
 * profile added to pa when set). */
static void round_of(dp_session *s, const bb_opts *o, int B, int gen, int V, uint64_t *rng, bb_result *r,
                     prof_acc *pa) {
    const int P = o->prompt, NB = o->batch;
    int32_t *prompts = malloc(sizeof(int32_t) * (size_t)B * P), *next = malloc(sizeof(int32_t) * (size_t)B);
    int *ids = malloc(sizeof(int) * (size_t)B), *pos = calloc((size_t)B, sizeof(int));
    dp_batch_entry *e = malloc(sizeof(dp_batch_entry) * (size_t)(NB > B ? NB : B));
    int32_t *out = malloc(sizeof(int32_t) * (size_t)(NB > B ? NB : B));
    int *owner = malloc(sizeof(int) * (size_t)NB); /* the sequence of each prefill entry */
    if (!prompts || !next || !ids || !pos || !e || !out || !owner) cli_die(EXIT_RUNTIME, "out of memory");
    dp_sampler_params sp;
    dp_sampler_params_default(&sp);
    sp.temp = 0;
    dp_sampler *greedy = dp_sampler_new(&sp, V);
    random_tokens(prompts, B * P, V, rng);
    for (int q = 1; q < B; q++) memcpy(prompts + (size_t)q * P, prompts, sizeof(int32_t) * (size_t)o->shared);
    for (int q = 0; q < B; q++) {
        ids[q] = q ? dp_seq_new(s) : 0;
        if (ids[q] < 0) cli_die_lib(ids[q]);
    }
    dp_session_wait(s);
    /* prefill: whole prompts packed into passes; with a shared prefix,
     * sequence 0's prefix first, then the others attach its pages */
    const double t0 = dp_time_s();
    int q = 0, n = 0;
    if (o->shared) {
        for (int k = 0; k < o->shared; k += NB) {
            n = 0;
            for (int i = k; i < o->shared && n < NB; i++)
                e[n++] = (dp_batch_entry){.seq = ids[0], .pos = i, .token = prompts[i]};
            eval_or_die(s, e, n, NULL);
        }
        pos[0] = o->shared;
        for (int k = 1; k < B; k++) {
            const int got = dp_seq_reuse_prefix(s, ids[k], prompts + (size_t)k * P, P);
            if (got < 0) cli_die_lib(got);
            pos[k] = got;
        }
        n = 0;
    }
    while (q < B) {
        while (q < B && n < NB) {
            const int32_t *pt = prompts + (size_t)q * P;
            for (; pos[q] < P && n < NB; pos[q]++) {
                e[n] = (dp_batch_entry){.seq = ids[q], .pos = pos[q], .token = pt[pos[q]]};
                if (pos[q] == P - 1) e[n].sampler = greedy;
                owner[n++] = q;
            }
            if (pos[q] == P) q++;
        }
        eval_or_die(s, e, n, out);
        for (int i = 0; i < n; i++)
            if (e[i].sampler) next[owner[i]] = out[i];
        n = 0;
    }
    dp_session_wait(s);
    r->prefill_s = dp_time_s() - t0;
    r->ttft_s = r->prefill_s;
    /* decode: one row per sequence and step */
    if (pa && dp_session_set_profile(s, 1)) cli_die_lib(DP_ERR_NOMEM);
    const double t1 = dp_time_s(), c1 = cli_cpu_seconds();
    for (int step = 0; step < gen; step++) {
        for (int k = 0; k < B; k++)
            e[k] = (dp_batch_entry){.seq = ids[k], .pos = P + step, .token = next[k], .sampler = greedy};
        eval_or_die(s, e, B, next);
    }
    dp_session_wait(s);
    r->decode_s = dp_time_s() - t1;
    r->decode_cpu_s = cli_cpu_seconds() - c1;
    if (pa) {
        prof_acc_add_session(pa, s);
        dp_session_set_profile(s, 0);
    }
    dp_kv_stats ks;
    dp_session_kv_stats(s, &ks);
    r->pages_used = ks.used, r->pages = ks.n_pages;
    for (int k = B - 1; k >= 0; k--) dp_seq_free(s, ids[k]);
    if (dp_seq_new(s) != 0) cli_die_lib(DP_ERR_BACKEND); /* sequence 0 again, as a session starts */
    dp_sampler_free(greedy);
    free(prompts), free(next), free(ids), free(pos), free(e), free(out), free(owner);
}

static void parse(int argc, char **argv, bb_opts *o) {
    const cli_args *A = cli_parse(C_BATCHED, "bench batched", USAGE, argc, argv);
    cli_positionals(A, 0, 0, "no arguments");
    memset(o, 0, sizeof *o);
    o->model = arg_str(A, O_MODEL) ? arg_str(A, O_MODEL) : cli_default_model();
    o->prompt = arg_int(A, O_BENCH_PROMPTS), o->gen = arg_int(A, O_GEN), o->shared = arg_int(A, O_SHARED_PREFIX);
    o->reps = arg_int(A, O_REPS), o->batch = arg_int(A, O_BATCH), o->threads = arg_int(A, O_THREADS);
    o->backend = cli_backend(A), o->kv_type = cli_kv_type(A), o->json = arg_flag(A, O_JSON), o->profile = arg_flag(A, O_PROFILE);
    char err[128];
    o->n_seqs = parse_seqs(arg_str(A, O_SEQS), o->seqs, err, sizeof err);
    if (o->n_seqs < 0) cli_die(EXIT_BADINPUT, "bench batched: %s: %s", arg_name(A, O_SEQS), err);
    if (o->shared >= o->prompt)
        cli_die(EXIT_BADINPUT, "bench batched: --shared-prefix %d must be shorter than the prompt (%d)", o->shared,
                o->prompt);
}

int cmd_bench_batched(int argc, char **argv) {
    bb_opts o;
    parse(argc, argv, &o);
    dp_model *m = cli_load_model(o.model);
    const int V = dp_model_get_info(m)->n_vocab;
    uint64_t rng = 0x9E3779B97F4A7C15ull;
    if (!o.json)
        printf("doppler bench batched: %s, prompt %d, gen %d%s, %d rep%s after 1 warm-up\n\n"
               "| seqs | prefill tok/s | TTFT ms | decode tok/s (aggregate) | per sequence | KV pages used / pool |\n"
               "|---|---|---|---|---|---|\n",
               o.model, o.prompt, o.gen, o.shared ? ", shared prefix" : "", o.reps, o.reps == 1 ? "" : "s");
    for (int si = 0; si < o.n_seqs; si++) {
        const int B = o.seqs[si];
        dp_session_params sp;
        dp_session_params_default(&sp);
        sp.backend = o.backend, sp.n_ctx = o.prompt + o.gen, sp.n_seq_max = B, sp.n_batch = o.batch;
        sp.n_threads = o.threads;
        sp.kv_type = o.kv_type;
        dp_session *s = dp_session_new(m, &sp);
        if (!s) cli_die_lib(DP_ERR_BACKEND);
        bb_result r, best = {0};
        double cpu_best = 0; /* least decode CPU time of the rounds: steadier than wall time on a loaded machine */
        round_of(s, &o, B, o.gen < 4 ? o.gen : 4, V, &rng, &r, NULL); /* warm-up */
        for (int rep = 0; rep < o.reps; rep++) {
            round_of(s, &o, B, o.gen, V, &rng, &r, NULL);
            if (!rep || r.decode_s < best.decode_s) best = r;
            if (!rep || r.decode_cpu_s < cpu_best) cpu_best = r.decode_cpu_s;
        }
        const double agg = (double)B * o.gen / best.decode_s, pre = (double)B * o.prompt / best.prefill_s;
        if (o.json)
            printf("{\"backend\":\"%s\",\"seqs\":%d,\"prompt\":%d,\"gen\":%d,\"shared_prefix\":%d,\"prefill_tok_s\":%.1f,"
                   "\"ttft_ms\":%.2f,\"decode_tok_s\":%.1f,\"decode_tok_s_per_seq\":%.2f,\"kv_pages_used\":%d,"
                   "\"kv_pages\":%d,\"decode_cpu_ms_per_step\":%.3f}\n",
                   dp_session_backend(s), B, o.prompt, o.gen, o.shared, pre, best.ttft_s * 1e3, agg,
                   (double)o.gen / best.decode_s, best.pages_used, best.pages, cpu_best * 1e3 / o.gen);
        else
            printf("| %d | %.0f | %.1f | %.1f | %.1f | %d / %d |\n", B, pre, best.ttft_s * 1e3, agg,
                   (double)o.gen / best.decode_s, best.pages_used, best.pages);
        if (o.profile && !o.json) {
            prof_acc *pa = prof_acc_new();
            if (!pa) cli_die(EXIT_RUNTIME, "out of memory");
            bb_result pr;
            round_of(s, &o, B, o.gen, V, &rng, &pr, pa);
            char title[96];
            snprintf(title, sizeof title, "\nprofile, decode of %d sequences (eager, op by op)", B);
            prof_print(stdout, title, pa, B * o.gen);
            printf("\n");
            prof_acc_free(pa);
        }
        fflush(stdout);
        dp_session_free(s);
    }
    dp_model_free(m);
    return 0;
}
