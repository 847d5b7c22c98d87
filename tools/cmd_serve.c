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
#include <time.h>

#include "cli.h"
#include "serve/serve.h"

static void usage(void) {
    printf("usage: doppler serve [-m FILE] [options]\n\n"
           "An OpenAI-compatible HTTP server: POST /v1/chat/completions and /v1/completions (streaming\n"
           "with \"stream\": true), GET /v1/models, /health, /metrics (Prometheus) and a chat page at /.\n"
           "Requests run together on one engine session (continuous batching).\n\n"
           "  -m, --model FILE        GGUF model (default: %s)\n"
           "  --host ADDR             address to listen on (default 127.0.0.1: this machine only)\n"
           "  --port N                TCP port, 0 = any free one (default 8080)\n"
           "  --parallel N            requests evaluated at once (default 4)\n"
           "  -c, --ctx N             context per request (default 4096, capped by the model's)\n"
           "  -b, --batch N           positions per engine step, prompts included (default 512)\n"
           "  -t, --threads N         CPU threads (default: all cores)\n"
           "  --backend cpu|cuda      compute backend (default: cuda when a GPU is present)\n"
           "  --api-key KEY           require 'Authorization: Bearer KEY' (every endpoint but /health and /)\n"
           "  --api-key-file FILE     the same, the key read from FILE's first line\n"
           "  --alias NAME            model name in /v1/models and responses (default: the file name)\n"
           "  --max-queue N           requests waiting beyond the running ones before 503 (default 64)\n"
           "  --max-body BYTES        largest request body, else 413 (default 4194304)\n"
           "  --header-timeout S      seconds for a request's headers, and idle keep-alive (default 10)\n"
           "  --body-timeout S        seconds for a request's body (default 30)\n"
           "  --max-connections N     open connections at most (default 256)\n"
           "  --shutdown-timeout S    seconds running requests get to finish on SIGINT/SIGTERM (default 10)\n"
           "request defaults (a request's own fields win):\n"
           "  --temp T --top-k K --top-p P --min-p P --repeat-penalty R --repeat-last-n N\n"
           "                          as doppler run (defaults 0.8, 40, 0.95, 0.05, 1, 64)\n"
           "  --verbose               a line per request on stderr\n",
           cli_default_model());
}

typedef struct {
    const char *model, *host, *api_key, *api_key_file, *alias;
    int port, parallel, max_queue, header_timeout, body_timeout, max_conns, verbose;
    double shutdown_timeout;
    uint64_t max_body;
    dp_session_params sp;
    dp_sampler_params smp;
} serve_opts;

static void parse(int argc, char **argv, serve_opts *o) {
    *o = (serve_opts){.host = "127.0.0.1", .port = 8080, .parallel = 4, .max_queue = 64, .header_timeout = 10,
                      .body_timeout = 30, .max_conns = 256, .shutdown_timeout = 10, .max_body = 4u << 20};
    dp_session_params_default(&o->sp);
    dp_sampler_params_default(&o->smp);
    int seed_set = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) usage(), exit(0);
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) o->model = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--host")) o->host = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--port")) o->port = cli_int(a, cli_value(argc, argv, &i), 0, 65535);
        else if (!strcmp(a, "--parallel")) o->parallel = cli_int(a, cli_value(argc, argv, &i), 1, 4096);
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx")) o->sp.n_ctx = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 24);
        else if (!strcmp(a, "-b") || !strcmp(a, "--batch")) o->sp.n_batch = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) o->sp.n_threads = cli_int(a, cli_value(argc, argv, &i), 1, 1024);
        else if (!strcmp(a, "--backend")) o->sp.backend = cli_backend(cli_value(argc, argv, &i), 1);
        else if (!strcmp(a, "--api-key")) o->api_key = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--api-key-file")) o->api_key_file = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--alias")) o->alias = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--max-queue")) o->max_queue = cli_int(a, cli_value(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--max-body")) o->max_body = cli_u64(a, cli_value(argc, argv, &i));
        else if (!strcmp(a, "--header-timeout")) o->header_timeout = cli_int(a, cli_value(argc, argv, &i), 1, 3600);
        else if (!strcmp(a, "--body-timeout")) o->body_timeout = cli_int(a, cli_value(argc, argv, &i), 1, 3600);
        else if (!strcmp(a, "--max-connections")) o->max_conns = cli_int(a, cli_value(argc, argv, &i), 1, 65536);
        else if (!strcmp(a, "--shutdown-timeout")) o->shutdown_timeout = cli_float(a, cli_value(argc, argv, &i), 0, 86400);
        else if (cli_sampler_flag(argc, argv, &i, &o->smp, &seed_set)) continue;
        else if (!strcmp(a, "--repeat-last-n")) o->smp.repeat_last_n = cli_int(a, cli_value(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--verbose")) o->verbose = 1;
        else cli_die(EXIT_BADINPUT, "serve: unknown option '%s' (see 'doppler serve --help')", a);
    }
    if (seed_set) cli_die(EXIT_BADINPUT, "serve: --seed has no meaning here (a request gives its own \"seed\")");
    if (o->api_key && o->api_key_file) cli_die(EXIT_BADINPUT, "serve: give --api-key or --api-key-file, not both");
    if (o->max_body < 1024) cli_die(EXIT_BADINPUT, "serve: --max-body must be at least 1024 bytes");
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

/* Until SIGINT/SIGTERM; then the grace for running requests, cut short by
 * a second signal. */
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

    server S = {.m = m, .info = dp_model_get_info(m), .n_ctx = dp_session_ctx(s), .parallel = o.parallel,
                .smp = o.smp, .started = (int64_t)time(NULL)};
    model_id(&o, path, S.model_id, sizeof S.model_id);
    if (!(S.met = metrics_new())) cli_die(EXIT_RUNTIME, "serve: out of memory");
    sched_params qp = {.n_batch = o.sp.n_batch, .parallel = o.parallel, .max_queue = o.max_queue};
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
    free(key_file);
    fprintf(stderr, "[Serve] stopped\n");
    return 0;
}
