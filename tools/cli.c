#define _GNU_SOURCE
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void cli_die(int code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    for (char *p = msg; *p; p++)
        if (*p == '\n') *p = ' ';
    fflush(stdout);
    fprintf(stderr, "doppler: error: %s\n", msg);
    exit(code);
}

void cli_die_lib(int status) {
    if (dp_last_status() == DP_ERR_ARG) status = DP_ERR_ARG; /* the library found bad input (a setting, say) */
    int code = (status == DP_ERR_FORMAT || status == DP_ERR_ARG || status == DP_ERR_CTX_FULL || status == DP_ERR_IO)
                   ? EXIT_BADINPUT
                   : EXIT_RUNTIME;
    cli_die(code, "%s", dp_last_error());
}

int cli_int(const char *flag, const char *v, long lo, long hi) {
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi)
        cli_die(EXIT_BADINPUT, "%s expects an integer in [%ld, %ld], got '%s'", flag, lo, hi, v);
    return (int)x;
}

float cli_float(const char *flag, const char *v, double lo, double hi) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !isfinite(x) || x < lo || x > hi)
        cli_die(EXIT_BADINPUT, "%s expects a number in [%g, %g], got '%s'", flag, lo, hi, v);
    return (float)x;
}

uint64_t cli_u64(const char *flag, const char *v) {
    char *end;
    errno = 0;
    if (*v == '-') cli_die(EXIT_BADINPUT, "%s expects a non-negative integer, got '%s'", flag, v);
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end) cli_die(EXIT_BADINPUT, "%s expects a non-negative integer, got '%s'", flag, v);
    return x;
}

dp_backend cli_backend(const char *v, int allow_auto) {
    if (!strcmp(v, "cpu")) return DP_BACKEND_CPU;
    if (!strcmp(v, "cuda")) return DP_BACKEND_CUDA;
    if (allow_auto && !strcmp(v, "auto")) return DP_BACKEND_AUTO;
    cli_die(EXIT_BADINPUT, "--backend expects %s, got '%s'", allow_auto ? "cpu, cuda or auto" : "cpu or cuda", v);
}

int cli_sampler_flag(int argc, char **argv, int *i, dp_sampler_params *smp, int *seed_set) {
    const char *a = argv[*i];
    if (!strcmp(a, "--temp")) smp->temp = cli_float(a, cli_value(argc, argv, i), 0, 100);
    else if (!strcmp(a, "--top-k")) smp->top_k = cli_int(a, cli_value(argc, argv, i), 0, 1 << 24);
    else if (!strcmp(a, "--top-p")) smp->top_p = cli_float(a, cli_value(argc, argv, i), 1e-6, 1);
    else if (!strcmp(a, "--min-p")) smp->min_p = cli_float(a, cli_value(argc, argv, i), 0, 1);
    else if (!strcmp(a, "--repeat-penalty")) smp->repeat_penalty = cli_float(a, cli_value(argc, argv, i), 1e-3, 100);
    else if (!strcmp(a, "--seed")) {
        smp->seed = cli_u64(a, cli_value(argc, argv, i));
        *seed_set = 1;
    } else return 0;
    return 1;
}

const char *cli_value(int argc, char **argv, int *i) {
    if (*i + 1 >= argc) cli_die(EXIT_BADINPUT, "%s needs a value", argv[*i]);
    return argv[++*i];
}

const char *cli_models_dir(void) {
    static char buf[4096];
    const char *env = getenv("DOPPLER_MODELS");
    if (env && *env) return env;
    const char *home = getenv("HOME");
    snprintf(buf, sizeof buf, "%s/.cache/doppler/models", home && *home ? home : ".");
    return buf;
}

const char *cli_default_model(void) {
    static char buf[4200];
    snprintf(buf, sizeof buf, "%s/gemma-3-270m-q4_k_m.gguf", cli_models_dir());
    return buf;
}

dp_model *cli_load_model(const char *path) {
    if (!path) path = cli_default_model();
    double t0 = dp_time_s();
    dp_model *m = dp_model_load(path);
    if (!m) {
        if (!path || strcmp(path, cli_default_model()) == 0) {
            FILE *f = fopen(path, "rb");
            if (!f)
                cli_die(EXIT_BADINPUT, "default model %s not found; run scripts/fetch-models or pass -m FILE", path);
            fclose(f);
        }
        cli_die_lib(DP_ERR_FORMAT);
    }
    const dp_model_info *in = dp_model_get_info(m);
    cli_log(LOG_LOADER, "%s: %s '%s', %d layers, n_embd %d, vocab %d, %.1f MB of weights, loaded in %.0f ms", path,
            in->arch, in->name, in->n_layer, in->n_embd, in->n_vocab, in->weight_bytes / 1e6,
            (dp_time_s() - t0) * 1e3);
    return m;
}

char *cli_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) cli_die(EXIT_BADINPUT, "cannot open %s: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
    }
    fclose(f);
    if (!buf) cli_die(EXIT_RUNTIME, "out of memory reading %s", path);
    buf[n] = 0;
    *len = n;
    return buf;
}

/* ------------------------------------------------------------------ logs */

static const char *g_tag_names[LOG_NTAGS] = {"Loader", "Pipeline", "Layer", "ATTN", "FFN",
                                             "KV",     "Sampler",  "Kernel", "Bench", "Stats"};
/* Shown by default: the stats line and what an explicit flag asked for
 * (--debug, --track-token, --profile, bench); the rest needs --verbose or
 * --log-tags. */
unsigned cli_log_mask = 1u << LOG_STATS | 1u << LOG_LAYER | 1u << LOG_SAMPLER | 1u << LOG_BENCH | 1u << LOG_ATTN;
int cli_verbose = 0;

const char *cli_log_tag_name(log_tag t) { return t < LOG_NTAGS ? g_tag_names[t] : "?"; }

void cli_set_log_tags(const char *list) {
    unsigned mask = 0;
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (int t = 0; t < LOG_NTAGS; t++)
            if (strlen(g_tag_names[t]) == n && strncasecmp(g_tag_names[t], p, n) == 0) {
                mask |= 1u << t;
                found = 1;
            }
        if (!found && n)
            cli_die(EXIT_BADINPUT, "--log-tags: unknown tag '%.*s' (known: Loader, Pipeline, Layer, ATTN, FFN, KV, "
                    "Sampler, Kernel, Bench, Stats)", (int)n, p);
        p += n;
        if (*p == ',') p++;
    }
    cli_log_mask = mask;
}

int cli_log_on(log_tag tag) { return cli_verbose || (cli_log_mask & (1u << tag)); }

void cli_log(log_tag tag, const char *fmt, ...) {
    if (!cli_log_on(tag)) return;
    char msg[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "[%s] %s\n", g_tag_names[tag], msg);
}
