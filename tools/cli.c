#define _GNU_SOURCE
#include "cli.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "serve/reasoning.h"

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

uint64_t cli_draw_seed(void) {
    uint64_t x = 0;
    if (getrandom(&x, sizeof x, GRND_NONBLOCK) != (ssize_t)sizeof x) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        x = (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ (uint64_t)getpid() << 40;
    }
    /* printed in decimal and typed back: keep it to 53 bits so JSON readers
     * that hold numbers as doubles get it exactly */
    return x & ((1ull << 53) - 1);
}

void cli_sampler_from_args(const cli_args *a, dp_sampler_params *p) {
    dp_sampler_params_default(p);
    p->temp = (float)arg_float(a, O_TEMP);
    p->top_k = arg_int(a, O_TOP_K);
    p->top_p = (float)arg_float(a, O_TOP_P);
    p->min_p = (float)arg_float(a, O_MIN_P);
    p->repeat_penalty = (float)arg_float(a, O_REPEAT_PENALTY);
    p->repeat_last_n = arg_int(a, O_REPEAT_LAST_N);
    if (arg_given(a, O_SEED)) {
        p->seed = arg_u64(a, O_SEED);
    } else {
        p->seed = cli_draw_seed();
    }
}

void cli_log_seed(const cli_args *a, const dp_sampler_params *p) {
    if (!arg_given(a, O_SEED) && p->temp > 0) cli_log(LOG_SAMPLER, "seed %llu", (unsigned long long)p->seed);
}

void cli_session_from_args(const cli_args *a, dp_session_params *p, const dp_model_info *in) {
    dp_session_params_default(p);
    if (arg_given(a, O_CTX)) p->n_ctx = arg_int(a, O_CTX) ? arg_int(a, O_CTX) : in->n_ctx_train;
    p->n_batch = arg_int(a, O_BATCH);
    p->n_threads = arg_int(a, O_THREADS);
    p->backend = cli_backend(a);
    p->kv_type = cli_kv_type(a);
}

dp_kv_type cli_kv_type(const cli_args *a) {
    static const dp_kv_type by_index[] = {DP_KV_DEFAULT, DP_KV_F32, DP_KV_F16}; /* as in the table */
    static const char *name[] = {"auto", "f32", "f16"};
    const int k = arg_int(a, O_CACHE_TYPE_K), v = arg_int(a, O_CACHE_TYPE_V);
    if (k && v && k != v)
        cli_die(EXIT_BADINPUT, "-ctk %s and -ctv %s differ: K and V are cached as one type here", name[k], name[v]);
    return by_index[k ? k : v];
}

dp_backend cli_backend(const cli_args *a) {
    static const dp_backend by_index[] = {DP_BACKEND_CPU, DP_BACKEND_CUDA, DP_BACKEND_AUTO}; /* as in the table */
    return by_index[arg_int(a, O_BACKEND)];
}

int cli_check_log_tags(const char *v, char *err, size_t errlen) {
    unsigned mask;
    return cli_parse_log_tags(v, &mask, err, errlen);
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
    if (in->faults && *in->faults)
        cli_note(LOG_LOADER, "DOPPLER_FAULT active: %s (the forward pass is deliberately wrong)", in->faults);
    cli_log(LOG_LOADER, "%s: %s '%s', %d layers, n_embd %d, vocab %d, %.1f MB of weights, loaded in %.0f ms", path,
            in->arch, in->name, in->n_layer, in->n_embd, in->n_vocab, in->weight_bytes / 1e6,
            (dp_time_s() - t0) * 1e3);
    return m;
}

char *cli_read_file(const char *path, size_t *len) {
    int use_stdin = !strcmp(path, "-");
    FILE *f = use_stdin ? stdin : fopen(path, "rb");
    if (!f) cli_die(EXIT_BADINPUT, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (!fstat(fileno(f), &st) && S_ISDIR(st.st_mode)) cli_die(EXIT_BADINPUT, "%s is a directory", path);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t k;
    while (buf && (k = fread(buf + n, 1, cap - n, f)) > 0) {
        n += k;
        if (n == cap) {
            cap *= 2;
            char *nb = realloc(buf, cap + 1);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    int bad = ferror(f);
    int e = errno;
    if (!use_stdin) fclose(f);
    if (!buf) cli_die(EXIT_RUNTIME, "out of memory reading %s", path);
    if (bad) cli_die(EXIT_BADINPUT, "cannot read %s: %s", use_stdin ? "standard input" : path, strerror(e));
    buf[n] = 0;
    *len = n;
    return buf;
}

char *cli_chat_template(const char *arg) {
    if (!arg) return NULL;
    struct stat st;
    if (!stat(arg, &st) && S_ISREG(st.st_mode)) {
        size_t len;
        char *text = cli_read_file(arg, &len);
        if (memchr(text, 0, len)) cli_die(EXIT_BADINPUT, "--chat-template %s: the file contains a NUL byte", arg);
        return text;
    }
    return strdup(arg);
}

int cli_parse_ints(const char *v, int lo, int hi, int *out, int max, const char *what, char *err, size_t errlen) {
    int n = 0;
    for (const char *p = v;;) {
        const size_t k = strcspn(p, ",");
        char t[16], *end;
        snprintf(t, sizeof t, "%.*s", (int)(k < 15 ? k : 15), p);
        const long x = strtol(t, &end, 10);
        if (!k || k > 15 || end == t || *end || x < lo || x > hi) {
            snprintf(err, errlen, "expects %s from %d to %d, got '%s'", what, lo, hi, v);
            return -1;
        }
        if (n == max) {
            snprintf(err, errlen, "at most %d %s", max, what);
            return -1;
        }
        if (out) out[n] = (int)x;
        n++;
        if (!p[k]) return n;
        p += k + 1;
    }
}

int cli_check_nonempty(const char *v, char *err, size_t errlen) {
    if (*v) return 0;
    snprintf(err, errlen, "expects a non-empty text");
    return -1;
}

int cli_think_display(const cli_args *A, const char *prompt) {
    if (!prompt || !isatty(STDOUT_FILENO) || arg_int(A, O_REASONING_FORMAT) == 2) return THINK_NONE;
    return think_open_at_end(prompt) ? THINK_INSIDE : THINK_SPLIT;
}

int cli_check_json_object(const char *v, char *err, size_t errlen) {
    cJSON *j = cJSON_Parse(v);
    const int ok = cJSON_IsObject(j);
    cJSON_Delete(j);
    if (ok) return 0;
    snprintf(err, errlen, "expects a JSON object, e.g. '{\"enable_thinking\": false}'");
    return -1;
}

int cli_check_json_schema(const char *v, char *err, size_t errlen) {
    if (!*v) {
        snprintf(err, errlen, "expects a JSON Schema, e.g. '{\"type\": \"object\"}' ('{}': any JSON value)");
        return -1;
    }
    if (dp_json_schema_check(v, strlen(v)) == DP_OK) return 0;
    snprintf(err, errlen, "%s", dp_last_error());
    return -1;
}

/* Exits 2 naming options a and b when both are given. */
static void not_both(const cli_args *A, int a, int b) {
    char one[64]; /* arg_name's buffer is one for all calls */
    snprintf(one, sizeof one, "%s", arg_name(A, a));
    cli_die(EXIT_BADINPUT, "%s: give either %s or %s, not both", A->cmd_name, one, arg_name(A, b));
}

/* The text of option o_text, or of the file option o_file (read and
 * checked by check on the first call, then kept in *cache until exit);
 * NULL when neither is given. empty: what an empty file lacks (NULL: check
 * judges it). */
static const char *text_or_file(const cli_args *A, int o_text, int o_file, char **cache,
                                int (*check)(const char *, size_t), const char *empty) {
    const char *inline_text = arg_str(A, o_text), *path = arg_str(A, o_file);
    if (inline_text && path) not_both(A, o_text, o_file);
    if (!path || *cache) return path ? *cache : inline_text;
    size_t len;
    char *text = cli_read_file(path, &len);
    const char *cmd = A->cmd_name, *flag = arg_name(A, o_file);
    if (!len && empty) cli_die(EXIT_BADINPUT, "%s: %s %s: the file is empty (%s expected)", cmd, flag, path, empty);
    if (memchr(text, 0, len)) cli_die(EXIT_BADINPUT, "%s: %s %s: the file contains a NUL byte", cmd, flag, path);
    if (check(text, len)) cli_die(EXIT_BADINPUT, "%s: %s %s: %s", cmd, flag, path, dp_last_error());
    return *cache = text;
}

const char *cli_json_schema(const cli_args *A) {
    static char *file_text; /* one parse per process */
    return text_or_file(A, O_JSON_SCHEMA, O_JSON_SCHEMA_FILE, &file_text, dp_json_schema_check, "a JSON Schema");
}

int cli_check_grammar(const char *v, char *err, size_t errlen) {
    if (dp_gbnf_check(v, strlen(v)) == DP_OK) return 0;
    snprintf(err, errlen, "%s", dp_last_error());
    return -1;
}

const char *cli_grammar(const cli_args *A) {
    static char *file_text; /* one parse per process */
    if (arg_str(A, O_GRAMMAR) && arg_str(A, O_GRAMMAR_FILE)) not_both(A, O_GRAMMAR, O_GRAMMAR_FILE);
    const int o = arg_str(A, O_GRAMMAR) ? O_GRAMMAR : O_GRAMMAR_FILE;
    if (arg_str(A, o) && cli_json_schema(A))
        not_both(A, o, arg_str(A, O_JSON_SCHEMA) ? O_JSON_SCHEMA : O_JSON_SCHEMA_FILE);
    return text_or_file(A, O_GRAMMAR, O_GRAMMAR_FILE, &file_text, dp_gbnf_check, NULL);
}

dp_constraint *cli_grammar_constraint(const dp_model *m, const char *grammar) {
    if (!grammar) return NULL;
    dp_constraint *c = dp_constraint_gbnf(m, grammar, strlen(grammar));
    if (!c) cli_die_lib(DP_ERR_NOMEM); /* or DP_ERR_ARG, as the library says */
    return c;
}

int cli_json_think(const char *prompt, size_t len, const char *tmpl_src) {
    char *text = prompt ? strndup(prompt, len) : NULL; /* a prompt of run -f --parallel is a line of the file */
    if (prompt && !text) cli_die(EXIT_RUNTIME, "out of memory");
    const int mode = text ? think_constraint_mode(text, tmpl_src && strstr(tmpl_src, "<think>")) : DP_THINK_NONE;
    free(text);
    return mode;
}

dp_constraint *cli_json_constraint(const dp_model *m, const char *schema, int think) {
    if (!schema) return NULL;
    dp_constraint *c = dp_constraint_json(m, schema, strlen(schema), think);
    if (!c) cli_die_lib(DP_ERR_NOMEM); /* or DP_ERR_ARG, as the library says */
    return c;
}

dp_constraint *cli_run_constraint(const cli_args *A, const dp_model *m, const char *text, size_t len) {
    const char *grammar = cli_grammar(A);
    if (grammar) return cli_grammar_constraint(m, grammar);
    const char *schema = cli_json_schema(A);
    if (!schema) return NULL;
    const int chat = arg_flag(A, O_CHAT);
    char *tmpl = chat ? cli_chat_template(arg_str(A, O_CHAT_TEMPLATE)) : NULL;
    const int think = cli_json_think(text, len, tmpl ? tmpl : chat ? dp_chat_template(m) : NULL);
    free(tmpl);
    return cli_json_constraint(m, schema, think);
}

/* ---------------------------------------------------------------- stdout */

static int g_out_errno;

int cli_emit(const void *buf, size_t n) {
    if (g_out_errno) return -1;
    if ((n && fwrite(buf, 1, n, stdout) != n) || fflush(stdout) == EOF) {
        g_out_errno = errno ? errno : EIO;
        return -1;
    }
    return 0;
}

void cli_finish_stdout(void) {
    int e = g_out_errno;
    if (fflush(stdout) == EOF && !e) e = errno ? errno : EIO;
    if (ferror(stdout) && !e) e = EIO;
    if (e) cli_die(EXIT_RUNTIME, "cannot write standard output: %s", strerror(e));
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

int cli_parse_log_tags(const char *list, unsigned *out, char *err, size_t errlen) {
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
        if (!found && n) {
            snprintf(err, errlen, "unknown tag '%.*s' (known: Loader, Pipeline, Layer, ATTN, FFN, KV, Sampler, "
                     "Kernel, Bench, Stats)", (int)n, p);
            return -1;
        }
        p += n;
        if (*p == ',') p++;
    }
    if (!mask) {
        snprintf(err, errlen, "empty list (known: Loader, Pipeline, Layer, ATTN, FFN, KV, Sampler, Kernel, Bench, Stats)");
        return -1;
    }
    *out = mask;
    return 0;
}

void cli_set_log_tags(const char *list) {
    char err[256];
    if (cli_parse_log_tags(list, &cli_log_mask, err, sizeof err)) cli_die(EXIT_BADINPUT, "--log-tags: %s", err);
}

int cli_log_on(log_tag tag) { return cli_verbose || (cli_log_mask & (1u << tag)); }

static void log_line(log_tag tag, const char *fmt, va_list ap) {
    char msg[2048];
    vsnprintf(msg, sizeof msg, fmt, ap);
    fprintf(stderr, "[%s] %s\n", g_tag_names[tag], msg);
}

void cli_log(log_tag tag, const char *fmt, ...) {
    if (!cli_log_on(tag)) return;
    va_list ap;
    va_start(ap, fmt);
    log_line(tag, fmt, ap);
    va_end(ap);
}

void cli_note(log_tag tag, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    log_line(tag, fmt, ap);
    va_end(ap);
}

double cli_cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}
