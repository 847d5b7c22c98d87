/* Shared command-line helpers for the doppler tool. */
#ifndef DP_CLI_H
#define DP_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "doppler.h"

/* Exit codes: 0 success, 1 runtime failure, 2 bad input (file, flag, prompt). */
enum { EXIT_RUNTIME = 1, EXIT_BADINPUT = 2 };

/* Prints "doppler: <msg>" on stderr as one line and exits with code. */
void cli_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* Exits with the library's last error: code 2 for format/argument/context
 * errors, 1 otherwise. */
void cli_die_lib(int status) __attribute__((noreturn));

/* Flag value parsing that rejects garbage: exits 2 naming the flag. */
int cli_int(const char *flag, const char *v, long lo, long hi);
float cli_float(const char *flag, const char *v, double lo, double hi);
uint64_t cli_u64(const char *flag, const char *v);
/* argv[i] is a flag that needs a value: returns argv[++i] or dies. */
const char *cli_value(int argc, char **argv, int *i);
/* The value of --backend: cpu, cuda, and auto when allow_auto; exits 2 otherwise. */
dp_backend cli_backend(const char *v, int allow_auto);
/* Parses argv[*i] when it is one of the sampler flags shared by run and chat
 * (--temp --top-k --top-p --min-p --repeat-penalty --seed; *seed_set = 1 for
 * --seed): returns 1 when it was one (consuming its value), else 0. */
int cli_sampler_flag(int argc, char **argv, int *i, dp_sampler_params *smp, int *seed_set);

/* Path of the default model (Gemma 3 270M Q4_K_M in the model cache). */
const char *cli_default_model(void);
/* Directory of the model cache: $DOPPLER_MODELS or ~/.cache/doppler/models. */
const char *cli_models_dir(void);
/* Loads the model or exits with the error (2 for a bad file). */
dp_model *cli_load_model(const char *path);
/* Reads a whole file (exits 2 on failure); *len gets the size. */
char *cli_read_file(const char *path, size_t *len);
/* text_tokens.c: tokenizes text into *buf (capacity *cap ids, grown with
 * realloc; NULL and 0 to start) and returns the count; exits on error. */
int cli_tokenize(const dp_model *m, const char *text, size_t len, int add_bos, int special, int32_t **buf, int *cap);

/* Tagged logs on stderr: "[Tag] message". */
typedef enum {
    LOG_LOADER, LOG_PIPELINE, LOG_LAYER, LOG_ATTN, LOG_FFN, LOG_KV, LOG_SAMPLER, LOG_KERNEL, LOG_BENCH,
    LOG_STATS, LOG_NTAGS
} log_tag;
extern unsigned cli_log_mask;      /* bit per tag */
extern int cli_verbose;
void cli_log(log_tag tag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether lines of this tag are shown (to skip work for hidden ones). */
int cli_log_on(log_tag tag);
/* Parses "--log-tags Loader,Layer" (case-insensitive); exits 2 on unknown. */
void cli_set_log_tags(const char *list);
const char *cli_log_tag_name(log_tag t);

/* session_log.c: [Kernel] lines (backend, kernels, threads or device,
 * device memory) and the [KV] cache line of a new session, from
 * dp_session_describe. */
void cli_log_session(const dp_session *s);
/* [KV] fill: "<when>: pos/n_ctx positions (x%), bytes in use". */
void cli_log_kv_fill(const dp_session *s, const char *when);
/* Bytes with a binary unit ("1.5 MiB"), into buf. */
const char *cli_fmt_bytes(char *buf, size_t cap, uint64_t bytes);

int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_trace(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bench_batched(int argc, char **argv); /* cmd_bench_batched.c: doppler bench batched */
int cmd_perplexity(int argc, char **argv);
int cmd_synth(int argc, char **argv);
int cmd_verify(int argc, char **argv);

#endif
