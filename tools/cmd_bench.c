/* doppler bench inference: prefill / decode speed, time to first token,
 * decode speed at depth, effective bandwidth, peak memory (RSS, and on a GPU the
 * device memory the session allocated); optional profile.
 *
 * One test per (prompt size, depth). Each test runs one warm-up (the prompt
 * and two decode steps, then with --depth two decode steps at depth; not
 * recorded) and then R repetitions of:
 *   1. prefill the prompt from an empty cache, sampling the first token
 *      (prefill tok/s from the evaluation time, TTFT from the wall time);
 *   2. decode --gen tokens greedily, each fed back (decode tok/s, GB/s);
 *   3. with --depth D: clear, fill D tokens of context (untimed), decode
 *      --gen tokens again (decode tok/s at depth, like llama-bench's tg@d).
 * Decode steps use dp_eval_sample, so GPU backends sample on the device. */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "debug.h"
#include "interrupt.h"
#include "profile_print.h"

#define MAX_LIST 16

static const char *XS_PROMPT = "The color of the sky is";
/* Filler for longer prompts (Lewis Carroll, Alice's Adventures in
 * Wonderland, 1865; public domain). Its tokens repeat as needed. */
static const char *FILLER =
    "Alice was beginning to get very tired of sitting by her sister on the bank, and of having nothing to do: "
    "once or twice she had peeped into the book her sister was reading, but it had no pictures or conversations "
    "in it, \"and what is the use of a book,\" thought Alice \"without pictures or conversations?\" So she was "
    "considering in her own mind (as well as she could, for the hot day made her feel very sleepy and stupid), "
    "whether the pleasure of making a daisy-chain would be worth the trouble of getting up and picking the "
    "daisies, when suddenly a White Rabbit with pink eyes ran close by her. ";

typedef struct {
    const char *model;
    int prompts[MAX_LIST], n_prompts;    /* -1 = xs */
    int depths[MAX_LIST], n_depths;
    int gen, reps, threads, batch, json, profile;
    dp_backend backend;
    dp_kv_type kv_type;
    double peak_gbps;
    dp_sampler_params smp;
} bench_opts;

static const char *USAGE =
    "usage: doppler bench inference [-m FILE] [options]\n\n"
    "One test per prompt size and depth: a warm-up, then R repetitions of prefill (tok/s, time to\n"
    "first token), decode (tok/s, GB/s) and, with --depth, decode after D tokens of context.\n"
    "The debugging options work as for run; timings then include their reports.\n"
    "doppler bench batched: many sequences decoded together (see 'doppler bench batched --help').";

/* Parses a comma-separated list of sizes (presets xs s m l when presets) in
 * [lo, 2^20] into out[MAX_LIST]; returns the count or -1 with why. */
static int parse_list(const char *v, int *out, int presets, int lo, char *err, size_t errlen) {
    int n = 0;
    for (const char *p = v;;) {
        size_t k = strcspn(p, ",");
        char t[32];
        snprintf(t, sizeof t, "%.*s", (int)(k < 31 ? k : 31), p);
        if (n == MAX_LIST) {
            snprintf(err, errlen, "at most %d values", MAX_LIST);
            return -1;
        }
        static const struct {
            const char *name;
            int n;
        } sizes[] = {{"xs", -1}, {"s", 64}, {"m", 512}, {"l", 2048}};
        int x = 0, found = 0;
        for (size_t i = 0; presets && i < sizeof sizes / sizeof sizes[0]; i++)
            if (!strcmp(t, sizes[i].name)) x = sizes[i].n, found = 1;
        if (!found) {
            char *end;
            long y = strtol(t, &end, 10);
            if (!k || k > 31 || end == t || *end || y < lo || y > (1 << 20)) {
                snprintf(err, errlen, "expects %s, got '%s'",
                         presets ? "xs, s, m, l or a token count >= 1" : "non-negative integers", v);
                return -1;
            }
            x = (int)y;
        }
        if (out) out[n] = x;
        n++;
        if (!p[k]) break;
        p += k + 1;
    }
    return n;
}

int bench_check_prompts(const char *v, char *err, size_t errlen) {
    return parse_list(v, NULL, 1, 1, err, errlen) < 0 ? -1 : 0;
}

int bench_check_depths(const char *v, char *err, size_t errlen) {
    return parse_list(v, NULL, 0, 0, err, errlen) < 0 ? -1 : 0;
}

/* n tokens: BOS (when the model adds one) then the filler's tokens, cycled. */
static int32_t *make_tokens(dp_model *m, int n) {
    const dp_model_info *in = dp_model_get_info(m);
    int32_t *f = NULL;
    int cap = 0, nf = cli_tokenize(m, FILLER, strlen(FILLER), 0, 0, &f, &cap);
    if (nf == 0) cli_die(EXIT_RUNTIME, "bench: the filler text produced no tokens");
    int32_t *t = malloc(sizeof(int32_t) * (size_t)n);
    if (!t) cli_die(EXIT_RUNTIME, "out of memory");
    int k = 0;
    if (in->add_bos && in->bos_id >= 0 && n > 0) t[k++] = in->bos_id;
    for (int i = 0; k < n; i++) t[k++] = f[i % nf];
    free(f);
    return t;
}

static int32_t *xs_tokens(dp_model *m, int *n) {
    int32_t *t = NULL;
    int cap = 0;
    *n = cli_tokenize(m, XS_PROMPT, strlen(XS_PROMPT), 1, 0, &t, &cap);
    if (*n == 0) cli_die(EXIT_RUNTIME, "bench: the xs prompt produced no tokens");
    return t;
}

/* CPU seconds (user + system) this process has used. */
typedef struct {
    double v[4096];
    int n;
} series;

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static void s_add(series *s, double x) {
    if (s->n < 4096) s->v[s->n++] = x;
}
static double s_med(const series *s) {
    if (!s->n) return NAN;
    double t[4096];
    memcpy(t, s->v, sizeof(double) * (size_t)s->n);
    qsort(t, (size_t)s->n, sizeof(double), cmp_d);
    return s->n % 2 ? t[s->n / 2] : 0.5 * (t[s->n / 2 - 1] + t[s->n / 2]);
}
static double s_min(const series *s) {
    double m = INFINITY;
    for (int i = 0; i < s->n; i++) m = fmin(m, s->v[i]);
    return s->n ? m : NAN;
}
static double s_max(const series *s) {
    double m = -INFINITY;
    for (int i = 0; i < s->n; i++) m = fmax(m, s->v[i]);
    return s->n ? m : NAN;
}

typedef struct {
    series prefill, ttft, decode, gbps, depth_decode, depth_gbps;
} results;

/* The debugging flags (--debug, --track-token, ...) as for run; with them the
 * timings include the reports and are not representative. */
static debug_opts g_dbg;
static const dp_model *g_model;
static int g_step;

/* Evaluates tokens and picks the next one (on the device unless a debug
 * report needs the host logits). */
static int eval_next(dp_session *s, dp_sampler *smp, const int32_t *toks, int n, int32_t *next) {
    int rc;
    if (debug_wants_logits(&g_dbg)) {
        rc = dp_eval(s, toks, n);
        if (!rc) {
            debug_step(&g_dbg, g_model, dp_logits(s, -1), g_step++);
            *next = dp_sampler_sample(smp, dp_logits(s, -1));
        }
    } else {
        rc = dp_eval_sample(s, toks, n, smp, next);
    }
    if (rc == DP_ERR_STOPPED) debug_report_stop(&g_dbg);
    return rc;
}

/* Decodes n tokens from *tok; returns seconds and adds the bytes read. */
static double decode_run(dp_session *s, dp_sampler *smp, int32_t *tok, int n, double *bytes) {
    double t0 = dp_time_s();
    for (int i = 0; i < n && !cli_interrupted(); i++) {
        *bytes += (double)dp_session_decode_bytes(s, dp_session_pos(s));
        int32_t cur = *tok;
        int rc = eval_next(s, smp, &cur, 1, tok);
        if (rc) cli_die_lib(rc);
    }
    return dp_time_s() - t0;
}

static double eval_s(const dp_session *s) {
    dp_session_stats st;
    dp_session_get_stats(s, &st);
    return st.prefill_s + st.decode_s;
}

static void run_test(const bench_opts *o, dp_model *m, dp_session *s, dp_sampler *smp, const int32_t *prompt,
                     int P, const int32_t *ctx, int D, results *r, prof_acc *pa_prefill, prof_acc *pa_decode) {
    int32_t tok;
    /* Ctrl-C: the repetition under way is not recorded */
    for (int rep = -1; rep < o->reps && !cli_interrupted(); rep++) {
        int warm = rep < 0;
        dp_sampler_reset(smp);
        dp_session_truncate(s, 0);
        /* the GPU idle before each timed region: the previous decode run's
         * last greedy step may still be running ahead (CUDA) */
        if (dp_session_wait(s)) cli_die_lib(DP_ERR_BACKEND);
        if (o->profile) dp_session_reset_profile(s);
        /* 1. prefill, first token */
        double e0 = eval_s(s), t0 = dp_time_s();
        g_step = 0;
        int rc = eval_next(s, smp, prompt, P, &tok);
        if (rc) cli_die_lib(rc);
        double t1 = dp_time_s(), e1 = eval_s(s);
        if (cli_interrupted()) return;
        if (!warm) {
            s_add(&r->prefill, P / (e1 - e0 > 0 ? e1 - e0 : t1 - t0));
            s_add(&r->ttft, (t1 - t0) * 1e3);
            if (o->profile) prof_acc_add_session(pa_prefill, s);
        }
        if (o->profile) dp_session_reset_profile(s);
        /* 2. decode */
        double bytes = 0;
        const int n_warm = o->gen < 2 ? o->gen : 2;
        double dt = decode_run(s, smp, &tok, warm ? n_warm : o->gen, &bytes);
        if (cli_interrupted()) return;
        if (!warm) {
            s_add(&r->decode, o->gen / dt);
            s_add(&r->gbps, bytes / dt / 1e9);
        }
        /* 3. decode at depth (the warm-up too: its first steps capture the
         * CUDA graphs of the longer context, which the timed reps then
         * replay, as the short decode's) */
        if (D > 0) {
            if (o->profile && !warm) prof_acc_add_session(pa_decode, s);
            dp_session_truncate(s, 0);
            if (dp_session_wait(s)) cli_die_lib(DP_ERR_BACKEND);
            rc = dp_eval(s, ctx, D);
            if (rc) cli_die_lib(rc);
            tok = ctx[D - 1];
            if (o->profile) dp_session_reset_profile(s);
            bytes = 0;
            dt = decode_run(s, smp, &tok, warm ? n_warm : o->gen, &bytes);
            if (cli_interrupted()) return;
            if (!warm) {
                s_add(&r->depth_decode, o->gen / dt);
                s_add(&r->depth_gbps, bytes / dt / 1e9);
            }
        }
        if (warm) continue;
        if (o->profile) prof_acc_add_session(pa_decode, s);
    }
}

static void add_stat(cJSON *o, const char *key, const series *s) {
    char k[96];
    if (!s->n) {
        cJSON_AddNullToObject(o, key);
        return;
    }
    cJSON_AddNumberToObject(o, key, s_med(s));
    snprintf(k, sizeof k, "%s_min", key);
    cJSON_AddNumberToObject(o, k, s_min(s));
    snprintf(k, sizeof k, "%s_max", key);
    cJSON_AddNumberToObject(o, k, s_max(s));
}

static const char *fmt_stat(char *buf, size_t n, const series *s, int prec) {
    if (!s->n) snprintf(buf, n, "-");
    else if (s->n == 1) snprintf(buf, n, "%.*f", prec, s_med(s));
    else snprintf(buf, n, "%.*f [%.*f-%.*f]", prec, s_med(s), prec, s_min(s), prec, s_max(s));
    return buf;
}

int cmd_bench(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "batched")) return cmd_bench_batched(argc - 1, argv + 1);
    const cli_args *A = cli_parse(C_BENCH, "bench", USAGE, argc, argv);
    cli_interrupt_install(); /* from here on Ctrl-C stops the work at the next check */
    cli_positionals(A, 1, 1, "'inference' or 'batched' (usage: doppler bench inference|batched [options])");
    if (strcmp(A->pos[0], "inference"))
        cli_die(EXIT_BADINPUT,
                "bench: expected 'inference' or 'batched', got '%s' (usage: doppler bench inference|batched [options])",
                A->pos[0]);
    bench_opts o = {.model = arg_str(A, O_MODEL), .gen = arg_int(A, O_GEN), .reps = arg_int(A, O_REPS),
                    .threads = arg_int(A, O_THREADS), .batch = arg_int(A, O_BATCH), .json = arg_flag(A, O_JSON),
                    .profile = arg_flag(A, O_PROFILE), .backend = cli_backend(A), .kv_type = cli_kv_type(A), .peak_gbps = arg_float(A, O_PEAK_GBPS)};
    char err[256];
    o.n_prompts = parse_list(arg_str(A, O_BENCH_PROMPTS), o.prompts, 1, 1, err, sizeof err);
    o.n_depths = parse_list(arg_str(A, O_DEPTH), o.depths, 0, 0, err, sizeof err);
    cli_sampler_from_args(A, &o.smp);
    debug_from_args(&g_dbg, A);
    const char *model_path = o.model ? o.model : cli_default_model();
    dp_model *m = cli_load_model(o.model);
    const dp_model_info *in = dp_model_get_info(m);
    g_model = m;
    debug_resolve(&g_dbg, m);
    if (g_dbg.debug || g_dbg.check_finite || debug_wants_logits(&g_dbg))
        cli_log(LOG_BENCH, "debugging flags are on: timings include their reports");
    int threads = o.threads ? o.threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
    char date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", localtime(&now));

    if (!o.json)
        printf("doppler bench inference: %s (%s '%s', %.1fM params, %.1f MB)\n%d threads, %d reps after 1 warm-up, "
               "%d decoded tokens per rep, %s\n\n",
               model_path, in->arch, in->name, in->n_params / 1e6, in->weight_bytes / 1e6, threads, o.reps, o.gen,
               date);
    fflush(stdout);
    int header_done = 0;
    cli_log_seed(A, &o.smp);
    for (int pi = 0; pi < o.n_prompts; pi++) {
        int P;
        int32_t *prompt = o.prompts[pi] < 0 ? xs_tokens(m, &P) : make_tokens(m, P = o.prompts[pi]);
        for (int di = 0; di < o.n_depths; di++) {
            int D = o.depths[di];
            int32_t *ctx = D > 0 ? make_tokens(m, D) : NULL;
            dp_session_params sp;
            dp_session_params_default(&sp);
            sp.backend = o.backend;
            sp.kv_type = o.kv_type;
            sp.n_threads = o.threads;
            sp.n_batch = o.batch;
            int need = (P > D ? P : D) + o.gen + 1;
            if (need > in->n_ctx_train)
                cli_die(EXIT_BADINPUT, "bench: prompt %d / depth %d + %d generated tokens exceed the model's context %d",
                        P, D, o.gen, in->n_ctx_train);
            sp.n_ctx = need;
            dp_session *s = dp_session_new(m, &sp);
            if (!s) cli_die_lib(DP_ERR_BACKEND);
            if (o.profile && dp_session_set_profile(s, 1)) cli_die_lib(DP_ERR_NOMEM);
            debug_attach(&g_dbg, s, m);
            dp_sampler *smp = dp_sampler_new(&o.smp, in->n_vocab);
            if (!smp) cli_die_lib(DP_ERR_ARG);
            results *r = calloc(1, sizeof *r);
            prof_acc *pp = prof_acc_new(), *pd = prof_acc_new();
            cli_log(LOG_BENCH, "test: prompt %d, gen %d, depth %d, backend %s", P, o.gen, D, dp_session_backend(s));
            cli_log_session(s);
            double c0 = cli_cpu_seconds(), w0 = dp_time_s();
            run_test(&o, m, s, smp, prompt, P, ctx, D, r, pp, pd);
            /* CPU time over wall time: below the thread count when the
             * machine is shared (the timings are then pessimistic) */
            double cpu_util = (cli_cpu_seconds() - c0) / (dp_time_s() - w0);
            double rss = dp_peak_rss_bytes() / 1048576.0;
            /* device memory the session allocated (weights + KV + scratch);
             * none on the CPU backend, where the RSS column covers it */
            dp_backend_info bi;
            int has_dev = dp_session_describe(s, &bi) == DP_OK && bi.dev_total_bytes > 0;

            if (o.json) {
                cJSON *j = cJSON_CreateObject();
                cJSON_AddStringToObject(j, "model", model_path);
                cJSON_AddStringToObject(j, "model_name", in->name);
                cJSON_AddStringToObject(j, "arch", in->arch);
                cJSON_AddNumberToObject(j, "n_params", (double)in->n_params);
                cJSON_AddNumberToObject(j, "weight_bytes", (double)in->weight_bytes);
                cJSON_AddStringToObject(j, "backend", dp_session_backend(s));
                cJSON_AddNumberToObject(j, "threads", threads);
                cJSON_AddNumberToObject(j, "prompt_tokens", P);
                cJSON_AddNumberToObject(j, "gen_tokens", o.gen);
                cJSON_AddNumberToObject(j, "depth", D);
                cJSON_AddNumberToObject(j, "reps", o.reps);
                cJSON_AddNumberToObject(j, "temp", o.smp.temp);
                cJSON_AddNumberToObject(j, "seed", (double)o.smp.seed);
                if (cli_interrupted()) cJSON_AddTrueToObject(j, "interrupted");
                add_stat(j, "prefill_tok_s", &r->prefill);
                add_stat(j, "ttft_ms", &r->ttft);
                add_stat(j, "decode_tok_s", &r->decode);
                add_stat(j, "decode_gbps", &r->gbps);
                add_stat(j, "decode_depth_tok_s", &r->depth_decode);
                add_stat(j, "decode_depth_gbps", &r->depth_gbps);
                if (o.peak_gbps > 0) {
                    cJSON_AddNumberToObject(j, "peak_gbps", o.peak_gbps);
                    cJSON_AddNumberToObject(j, "decode_peak_frac", s_med(&r->gbps) / o.peak_gbps);
                }
                cJSON_AddNumberToObject(j, "decode_bytes_per_token", (double)dp_session_decode_bytes(s, P));
                cJSON_AddNumberToObject(j, "peak_rss_mb", rss);
                cJSON_AddNumberToObject(j, "cpu_util", cpu_util);
                if (has_dev) {
                    cJSON_AddNumberToObject(j, "device_mem_mb", bi.dev_total_bytes / 1048576.0);
                    cJSON_AddNumberToObject(j, "device_weight_mb", bi.dev_weight_bytes / 1048576.0);
                    cJSON_AddNumberToObject(j, "device_kv_mb", bi.dev_kv_bytes / 1048576.0);
                    cJSON_AddNumberToObject(j, "device_scratch_mb", bi.dev_scratch_bytes / 1048576.0);
                    cJSON_AddNumberToObject(j, "device_f16_copy_mb", bi.dev_f16_copy_bytes / 1048576.0);
                } else {
                    cJSON_AddNullToObject(j, "device_mem_mb");
                    cJSON_AddNullToObject(j, "device_weight_mb");
                    cJSON_AddNullToObject(j, "device_kv_mb");
                    cJSON_AddNullToObject(j, "device_scratch_mb");
                    cJSON_AddNullToObject(j, "device_f16_copy_mb");
                }
                cJSON_AddStringToObject(j, "date", date);
                if (o.profile) {
                    cJSON *pj = cJSON_AddObjectToObject(j, "profile");
                    cJSON_AddItemToObject(pj, "prefill", prof_to_json(pp));
                    cJSON_AddItemToObject(pj, "decode", prof_to_json(pd));
                }
                char *txt = cJSON_PrintUnformatted(j);
                printf("%s\n", txt);
                free(txt);
                cJSON_Delete(j);
            } else {
                if (!header_done || o.profile) {
                    printf("%6s %5s %6s | %-22s | %-22s | %-22s | %-22s | %-16s | %8s | %8s | %4s\n", "prompt", "gen",
                           "depth", "prefill tok/s", "ttft ms", "decode tok/s", "decode@depth tok/s",
                           o.peak_gbps > 0 ? "decode GB/s (%peak)" : "decode GB/s", "RSS MB", "dev MB", "CPU%");
                    header_done = 1;
                }
                char b1[64], b2[64], b3[64], b4[64], b5[64], b6[32];
                if (has_dev) snprintf(b6, sizeof b6, "%.0f", bi.dev_total_bytes / 1048576.0);
                else snprintf(b6, sizeof b6, "-");
                fmt_stat(b5, sizeof b5, &r->gbps, 2);
                if (o.peak_gbps > 0) {
                    size_t l = strlen(b5);
                    snprintf(b5 + l, sizeof b5 - l, " (%.0f%%)", 100 * s_med(&r->gbps) / o.peak_gbps);
                }
                printf("%6d %5d %6d | %-22s | %-22s | %-22s | %-22s | %-16s | %8.0f | %8s | %4.0f\n", P, o.gen, D,
                       fmt_stat(b1, sizeof b1, &r->prefill, 2), fmt_stat(b2, sizeof b2, &r->ttft, 1),
                       fmt_stat(b3, sizeof b3, &r->decode, 2), fmt_stat(b4, sizeof b4, &r->depth_decode, 2), b5,
                       rss, b6, 100 * cpu_util);
                if (o.profile) {
                    prof_print(stdout, "profile, prefill", pp, P * o.reps);
                    prof_print(stdout, "profile, decode", pd, o.gen * o.reps * (D > 0 ? 2 : 1));
                    printf("\n");
                }
                fflush(stdout);
            }
            prof_acc_free(pp);
            prof_acc_free(pd);
            free(r);
            dp_sampler_free(smp);
            dp_session_free(s);
            free(ctx);
            if (cli_interrupted()) break;
        }
        free(prompt);
        if (cli_interrupted()) break;
    }
    dp_model_free(m);
    cli_finish_stdout();
    if (cli_interrupted()) {
        cli_log(LOG_BENCH, "interrupted: the repetition under way was not recorded");
        return EXIT_INTERRUPTED;
    }
    return 0;
}
