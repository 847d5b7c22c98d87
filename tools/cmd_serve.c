/* doppler serve: an OpenAI-compatible HTTP server (tools/serve/). This file
 * holds the options, the start-up and the shutdown: on SIGINT or SIGTERM the
 * server stops accepting connections, lets running requests finish for
 * --shutdown-timeout seconds (a second signal cancels them at once), then
 * closes every connection and exits 0. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <time.h>

#include "cli.h"
#include "serve/serve.h"
#include "serve/toolcall.h"
#include "serve/warmup.h"

static const char *USAGE =
    "usage: doppler serve [-m FILE] [options]\n\n"
    "An OpenAI-compatible HTTP server: POST /v1/chat/completions and /v1/completions (streaming\n"
    "with \"stream\": true), /v1/embeddings, GET /v1/models, /health, /metrics (Prometheus) and a chat\n"
    "page at /.\n"
    "Requests run together on one engine session (continuous batching).";

typedef struct {
    const char *model, *host, *api_key, *api_key_file, *alias, *chat_template, *template_kwargs;
    int port, parallel, max_queue, header_timeout, body_timeout, max_conns, verbose, profile;
    int warmup;              /* 1 --warmup, 0 --no-warmup, -1 the default (GPU backends) */
    int host_threads;        /* --host-threads, -1 the default */
    int ctx;                 /* -c as given: -1 absent, 0 the model's */
    int reasoning_format;    /* 1 auto / deepseek, 0 none */
    int pooling;             /* --pooling as DP_POOLING_*, DP_POOLING_UNSET when not given */
    double shutdown_timeout;
    uint64_t max_body;
    dp_session_params sp;
    dp_sampler_params smp;
} serve_opts;

static void parse(int argc, char **argv, serve_opts *o) {
    const cli_args *A = cli_parse(C_SERVE, "serve", USAGE, argc, argv);
    cli_positionals(A, 0, 0, "");
    *o = (serve_opts){.model = arg_str(A, O_MODEL), .host = arg_str(A, O_HOST), .api_key = arg_str(A, O_API_KEY),
                      .api_key_file = arg_str(A, O_API_KEY_FILE), .alias = arg_str(A, O_ALIAS),
                      .chat_template = arg_str(A, O_CHAT_TEMPLATE),
                      .template_kwargs = arg_str(A, O_CHAT_TEMPLATE_KWARGS),
                      .port = arg_int(A, O_PORT), .parallel = arg_int(A, O_PARALLEL),
                      .max_queue = arg_int(A, O_MAX_QUEUE), .header_timeout = arg_int(A, O_HEADER_TIMEOUT),
                      .body_timeout = arg_int(A, O_BODY_TIMEOUT), .max_conns = arg_int(A, O_MAX_CONNS),
                      .verbose = arg_flag(A, O_VERBOSE), .profile = arg_flag(A, O_PROFILE),
                      .shutdown_timeout = arg_float(A, O_SHUTDOWN_TIMEOUT),
                      .max_body = (uint64_t)arg_int(A, O_MAX_BODY)};
    dp_session_params_default(&o->sp);
    o->ctx = arg_given(A, O_CTX) ? arg_int(A, O_CTX) : -1;
    o->reasoning_format = arg_int(A, O_REASONING_FORMAT) != 2; /* auto|deepseek|none */
    /* mean|cls|last are DP_POOLING_MEAN, CLS, LAST in that order */
    o->pooling = arg_given(A, O_POOLING) ? DP_POOLING_MEAN + arg_int(A, O_POOLING) : DP_POOLING_UNSET;
    o->sp.n_batch = arg_int(A, O_BATCH);
    o->sp.n_threads = arg_int(A, O_THREADS);
    o->sp.backend = cli_backend(A);
    o->sp.kv_type = cli_kv_type(A);
    cli_sampler_from_args(A, &o->smp);
    if (o->api_key && o->api_key_file) cli_die(EXIT_BADINPUT, "serve: give --api-key or --api-key-file, not both");
    if (arg_flag(A, O_WARMUP) && arg_flag(A, O_NO_WARMUP)) cli_die(EXIT_BADINPUT, "serve: give --warmup or --no-warmup, not both");
    o->warmup = arg_flag(A, O_WARMUP) ? 1 : arg_flag(A, O_NO_WARMUP) ? 0 : -1;
    o->host_threads = arg_int(A, O_HOST_THREADS);
}

/* The key from --api-key-file: its first line, which must not be empty. */
static char *read_key(const char *path) {
    size_t len;
    char *s = cli_read_file(path, &len);
    size_t n = strcspn(s, "\r\n");
    s[n] = 0;
    if (!n) cli_die(EXIT_BADINPUT, "serve: --api-key-file %s: the first line (the key) is empty", path);
    return s;
}

static void model_id(const serve_opts *o, const char *path, char *out, size_t cap) {
    if (o->alias) {
        snprintf(out, cap, "%s", o->alias);
        return;
    }
    const char *base = strrchr(path, '/');
    snprintf(out, cap, "%s", base ? base + 1 : path);
}

/* --chat-template and --chat-template-kwargs fail at start-up rather than
 * in every chat request: one user turn must render (when the model has a
 * template at all; /v1/completions needs none). */
static void check_template(const dp_model *m, const char *tmpl, const char *kwargs) {
    if (!tmpl && !dp_chat_template(m) && !dp_chat_template_detect(m)) {
        if (kwargs) cli_die(EXIT_BADINPUT, "serve: --chat-template-kwargs, but the model has no chat template");
        return;
    }
    const dp_chat_msg probe = {"user", "hi"};
    char *text = dp_chat_apply_vars(m, tmpl, &probe, 1, 1, kwargs);
    if (!text) cli_die(EXIT_BADINPUT, "serve: %s", dp_last_error());
    free(text);
}

/* Seconds the connections get to send what the finished requests wrote
 * (the last chunks, [DONE], a cancelled stream's error event) before they
 * are closed: a client that reads that slowly is not waited for. */
#define FLUSH_S 2.0

/* Until SIGINT/SIGTERM; then the grace for running requests, cut short by
 * a second signal, then the connections' flush. */
static void wait_for_shutdown(const sigset_t *sigs, http *h, sched *q, double grace) {
    int sig = 0;
    sigwait(sigs, &sig);
    http_quiesce(h);
    int waiting, running;
    sched_counts(q, &waiting, &running);
    fprintf(stderr, "[Serve] %s: not accepting connections; %d running request(s) get %.0f s to finish\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", running, grace);
    sched_drain(q, grace);
    struct timespec tick = {0, 100 * 1000 * 1000};
    for (;;) {
        sched_counts(q, &waiting, &running);
        if (!waiting && !running) break;
        if (sigtimedwait(sigs, NULL, &tick) > 0) {
            fprintf(stderr, "[Serve] second signal: cancelling %d running request(s)\n", running);
            sched_drain(q, 0);
        }
    }
    sched_join(q);
    /* the scheduler's end of a request is not its connection's: the last
     * chunks may still be on their way out, and closing now would cut them */
    struct timespec short_tick = {0, 10 * 1000 * 1000};
    const double until = dp_time_s() + FLUSH_S;
    while (http_busy(h) && dp_time_s() < until && sigtimedwait(sigs, NULL, &short_tick) <= 0) {
    }
}

int cmd_serve(int argc, char **argv) {
    serve_opts o;
    parse(argc, argv, &o);
    char *key_file = o.api_key_file ? read_key(o.api_key_file) : NULL;
    if (key_file) o.api_key = key_file;

    /* signals go to sigwait only: block them before any thread starts */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    const char *path = o.model ? o.model : cli_default_model();
    dp_model *m = cli_load_model(path);
    char *tmpl = cli_chat_template(o.chat_template);
    check_template(m, tmpl, o.template_kwargs);
    if (o.ctx >= 0) o.sp.n_ctx = o.ctx ? o.ctx : dp_model_get_info(m)->n_ctx_train;
    o.sp.n_seq_max = o.parallel;
    int min_batch = o.parallel + 16; /* every decode row plus a prompt chunk fit in a step */
    if (!o.sp.n_batch) o.sp.n_batch = 512;
    if (o.sp.n_batch < min_batch) {
        fprintf(stderr, "[Serve] --batch raised to %d: --parallel %d decode rows and a prompt chunk\n", min_batch,
                o.parallel);
        o.sp.n_batch = min_batch;
    }
    dp_session *s = dp_session_new(m, &o.sp);
    if (!s) cli_die_lib(DP_ERR_BACKEND);
    dp_seq_free(s, 0); /* every request takes its sequence from dp_seq_new */
    if (o.warmup > 0 || (o.warmup < 0 && strcmp(dp_session_backend(s), "cpu"))) {
        double t0 = dp_time_s();
        int n = serve_warmup(s, dp_model_get_info(m)->n_vocab, o.parallel, o.sp.n_batch);
        if (n < 0) fprintf(stderr, "[Serve] warm-up stopped (requests will pay the set-up): %s\n", dp_last_error());
        else fprintf(stderr, "[Serve] warm-up: %d passes in %.2f s\n", n, dp_time_s() - t0);
    }

    server S = {.m = m, .info = dp_model_get_info(m), .n_ctx = dp_session_ctx(s), .parallel = o.parallel,
                .smp = o.smp, .tmpl = tmpl, .template_kwargs = o.template_kwargs,
                .reasoning_format = o.reasoning_format, .started = (int64_t)time(NULL)};
    S.pooling = o.pooling ? o.pooling : S.info->pooling;
    const char *src = tmpl ? tmpl : dp_chat_template(m);
    S.tmpl_jinja = src && (strstr(src, "{{") || strstr(src, "{%"));
    S.tools_format = tools_format(src);
    S.thinking_switch = src && strstr(src, "enable_thinking");
    S.template_thinks = src && strstr(src, "<think>");
    model_id(&o, path, S.model_id, sizeof S.model_id);
    if (!(S.met = metrics_new())) cli_die(EXIT_RUNTIME, "serve: out of memory");
    /* helpers for the host's part of a step: up to 4, the scheduler thread working beside them */
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    const int helpers = o.host_threads >= 0 ? o.host_threads : cores > 5 ? 4 : (int)(cores > 1 ? cores - 1 : 0);
    sched_params qp = {.n_batch = o.sp.n_batch, .parallel = o.parallel, .max_queue = o.max_queue,
                       .profile = o.profile, .host_threads = helpers,
                       .prepare_masks = strcmp(dp_session_backend(s), "cpu") != 0};
    if (!(S.q = sched_new(m, s, &qp, S.met))) cli_die(EXIT_RUNTIME, "serve: cannot start the scheduler thread");

    http_params hp = {.host = o.host, .port = o.port, .api_key = o.api_key, .max_body = (size_t)o.max_body,
                      .header_timeout = o.header_timeout, .body_timeout = o.body_timeout,
                      .max_conns = o.max_conns, .verbose = o.verbose};
    char err[512];
    http *h = http_start(&hp, serve_routes, serve_n_routes, &S, S.met, err, sizeof err);
    if (!h) {
        sched_free(S.q);
        cli_die(EXIT_BADINPUT, "serve: %s", err);
    }
    int ipv6 = strchr(o.host, ':') != NULL;
    fprintf(stderr, "[Serve] model %s, backend %s, %d parallel, context %d per request, batch %d\n", S.model_id,
            dp_session_backend(s), o.parallel, S.n_ctx, o.sp.n_batch);
    fprintf(stderr, "[Serve] listening on http://%s%s%s:%d/%s\n", ipv6 ? "[" : "", o.host, ipv6 ? "]" : "",
            http_port(h), o.api_key ? " (API key required)" : "");

    wait_for_shutdown(&sigs, h, S.q, o.shutdown_timeout);
    http_stop(h);
    sched_free(S.q);
    metrics_free(S.met);
    dp_session_free(s);
    dp_model_free(m);
    free(tmpl);
    free(key_file);
    fprintf(stderr, "[Serve] stopped\n");
    return 0;
}
