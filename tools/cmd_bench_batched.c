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
} bb_opts;

typedef struct {
    double prefill_s, ttft_s, decode_s;
    int pages_used, pages;
} bb_result;

static void usage(void) {
    printf("usage: doppler bench batched [-m FILE] [options]\n\n"
           "  -m, --model FILE       GGUF model (default: %s)\n"
           "  --seqs LIST            sequence counts, comma-separated (default 1,4,16,64)\n"
           "  --prompt N             prompt tokens per sequence (default 128)\n"
           "  --gen N                tokens decoded per sequence (default 128)\n"
           "  --shared-prefix N      the first N prompt tokens are the same for every sequence (default 0)\n"
           "  --reps R               measured rounds after one warm-up (default 1)\n"
           "  --batch N              positions per forward pass (default 512)\n"
           "  -t, --threads T        CPU threads (default: all cores)\n"
           "  --backend cpu|cuda     compute backend (default: cuda when a GPU is present)\n"
           "  --profile              one more round with the decode steps timed op by op; print the tables\n"
           "  --json                 one JSON object per sequence count on stdout instead of the table\n",
           cli_default_model());
}

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
    const double t1 = dp_time_s();
    for (int step = 0; step < gen; step++) {
        for (int k = 0; k < B; k++)
            e[k] = (dp_batch_entry){.seq = ids[k], .pos = P + step, .token = next[k], .sampler = greedy};
        eval_or_die(s, e, B, next);
    }
    dp_session_wait(s);
    r->decode_s = dp_time_s() - t1;
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
    memset(o, 0, sizeof *o);
    o->model = cli_default_model();
    const int def[4] = {1, 4, 16, 64};
    memcpy(o->seqs, def, sizeof def);
    o->n_seqs = 4, o->prompt = 128, o->gen = 128, o->reps = 1, o->batch = 512, o->backend = DP_BACKEND_AUTO;
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--prompt")) o->prompt = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--gen")) o->gen = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "--shared-prefix")) o->shared = cli_int(a, cli_value(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--reps")) o->reps = cli_int(a, cli_value(argc, argv, &i), 1, 1000);
        else if (!strcmp(a, "--batch")) o->batch = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 16);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) o->threads = cli_int(a, cli_value(argc, argv, &i), 1, 4096);
        else if (!strcmp(a, "--backend")) o->backend = cli_backend(cli_value(argc, argv, &i), 1);
        else if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--profile")) o->profile = 1;
        else if (!strcmp(a, "--seqs")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", cli_value(argc, argv, &i));
            o->n_seqs = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (o->n_seqs == MAX_SEQS) cli_die(EXIT_BADINPUT, "--seqs: at most %d counts", MAX_SEQS);
                o->seqs[o->n_seqs++] = cli_int("--seqs", t, 1, 65536);
            }
            if (!o->n_seqs) cli_die(EXIT_BADINPUT, "--seqs: no sequence count");
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            usage();
            exit(0);
        } else cli_die(EXIT_BADINPUT, "bench batched: unknown option '%s' (see doppler bench batched --help)", a);
    }
    if (o->shared >= o->prompt)
        cli_die(EXIT_BADINPUT, "--shared-prefix %d: must be shorter than the prompt (%d)", o->shared, o->prompt);
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
        dp_session *s = dp_session_new(m, &sp);
        if (!s) cli_die_lib(DP_ERR_BACKEND);
        bb_result r, best = {0};
        round_of(s, &o, B, o.gen < 4 ? o.gen : 4, V, &rng, &r, NULL); /* warm-up */
        for (int rep = 0; rep < o.reps; rep++) {
            round_of(s, &o, B, o.gen, V, &rng, &r, NULL);
            if (!rep || r.decode_s < best.decode_s) best = r;
        }
        const double agg = (double)B * o.gen / best.decode_s, pre = (double)B * o.prompt / best.prefill_s;
        if (o.json)
            printf("{\"backend\":\"%s\",\"seqs\":%d,\"prompt\":%d,\"gen\":%d,\"shared_prefix\":%d,\"prefill_tok_s\":%.1f,"
                   "\"ttft_ms\":%.2f,\"decode_tok_s\":%.1f,\"decode_tok_s_per_seq\":%.2f,\"kv_pages_used\":%d,"
                   "\"kv_pages\":%d}\n",
                   dp_session_backend(s), B, o.prompt, o.gen, o.shared, pre, best.ttft_s * 1e3, agg,
                   (double)o.gen / best.decode_s, best.pages_used, best.pages);
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
