/* Shared command-line helpers for the doppler tool. */
#ifndef DP_CLI_H
#define DP_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "doppler.h"
#include "options.h"

/* Exit codes: 0 success, 1 runtime failure, 2 bad input (file, flag, prompt). */
enum { EXIT_RUNTIME = 1, EXIT_BADINPUT = 2 };

/* Prints "doppler: <msg>" on stderr as one line and exits with code. */
void cli_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
/* Exits with the library's last error: code 2 for format/argument/context
 * errors, 1 otherwise. */
void cli_die_lib(int status) __attribute__((noreturn));

/* A fresh random seed (53 bits, so it survives JSON as a double). */
uint64_t cli_draw_seed(void);
/* The sampler options (--temp ... --seed); without --seed a seed is drawn. */
void cli_sampler_from_args(const cli_args *a, dp_sampler_params *p);
/* "[Sampler] seed N" when the seed was drawn and sampling is random (temp
 * > 0), so the run can be repeated with --seed N. */
void cli_log_seed(const cli_args *a, const dp_sampler_params *p);
/* -c (0 = the model's context), -b, -t and --backend. */
void cli_session_from_args(const cli_args *a, dp_session_params *p, const dp_model_info *in);
dp_backend cli_backend(const cli_args *a);
/* -ctk / -ctv: one type for both (either sets it; different types are an error) */
dp_kv_type cli_kv_type(const cli_args *a);

/* Option value checks for the table (0 = good, else -1 and why in err). */
int cli_check_log_tags(const char *v, char *err, size_t errlen);
int bench_check_prompts(const char *v, char *err, size_t errlen);
int bench_check_depths(const char *v, char *err, size_t errlen);
int bench_check_seqs(const char *v, char *err, size_t errlen);
int verify_check_lengths(const char *v, char *err, size_t errlen);
int trace_check_ids(const char *v, char *err, size_t errlen);
int synth_check_type(const char *v, char *err, size_t errlen);

/* Path of the default model (Gemma 3 270M Q4_K_M in the model cache). */
const char *cli_default_model(void);
/* Directory of the model cache: $DOPPLER_MODELS or ~/.cache/doppler/models. */
const char *cli_models_dir(void);
/* Loads the model or exits with the error (2 for a bad file). */
dp_model *cli_load_model(const char *path);
/* Reads a whole file, '-' = standard input (exits 2 on failure); *len gets the size. */
char *cli_read_file(const char *path, size_t *len);
/* text_tokens.c: tokenizes text into *buf (capacity *cap ids, grown with
 * realloc; NULL and 0 to start) and returns the count; exits on error. */
int cli_tokenize(const dp_model *m, const char *text, size_t len, int add_bos, int special, int32_t **buf, int *cap);

/* The template_name for dp_chat_apply from --chat-template: the text of the
 * file it names, else the value itself (a built-in name or Jinja source);
 * NULL for NULL. malloc'ed. */
char *cli_chat_template(const char *arg);
int cli_check_nonempty(const char *v, char *err, size_t errlen);
/* A comma-separated list of integers in [lo, hi], at most max of them, into
 * out (may be NULL); returns the count, or -1 with why ("what": the values'
 * name in the message). */
int cli_parse_ints(const char *v, int lo, int hi, int *out, int max, const char *what, char *err, size_t errlen);
/* How run --chat and chat show an answer's <think> block (generate.h's
 * think) for the rendered prompt: dim and without its tags on a terminal
 * unless --reasoning-format none; as generated into a pipe or a file. */
int cli_think_display(const cli_args *A, const char *prompt);
/* --chat-template-kwargs: a JSON object. */
int cli_check_json_object(const char *v, char *err, size_t errlen);
/* --json-schema: a JSON Schema dp_json_schema_check takes. */
int cli_check_json_schema(const char *v, char *err, size_t errlen);
/* The schema of --json-schema, or the text of --json-schema-file (read and
 * checked on the first call, then kept); NULL when neither is given. Exits
 * 2 with one line when both are given, the file cannot be read or the
 * schema is refused. */
const char *cli_json_schema(const cli_args *A);
/* --grammar: a GBNF grammar dp_gbnf_check takes. */
int cli_check_grammar(const char *v, char *err, size_t errlen);
/* The grammar of --grammar, or the text of --grammar-file (read and checked
 * on the first call, then kept); NULL when neither is given. Exits 2 with
 * one line when both are given, with a JSON schema too, when the file
 * cannot be read or the grammar is refused. */
const char *cli_grammar(const cli_args *A);
/* A constraint to grammar for one answer; NULL for a NULL grammar. Exits on
 * failure. */
dp_constraint *cli_grammar_constraint(const dp_model *m, const char *grammar);
/* The think mode of a constrained answer (DP_THINK_*): inside when the text
 * given to the model (prompt, len bytes) ends inside an open <think> block,
 * else may open one when the chat template's source (NULL: no chat
 * template) has "<think>" and the text does not end after a closed block,
 * else none. */
int cli_json_think(const char *prompt, size_t len, const char *tmpl_src);
/* A constraint to schema for one answer; NULL for a NULL schema. Exits on
 * failure. dp_constraint_free frees it. */
dp_constraint *cli_json_constraint(const dp_model *m, const char *schema, int think);
/* run's constraint for one prompt: text (len bytes) is what the model is
 * given, the template's source counts with --chat. NULL without a schema
 * or a grammar. */
dp_constraint *cli_run_constraint(const cli_args *A, const dp_model *m, const char *text, size_t len);

/* Writes to stdout and flushes; a failure is remembered (reported by
 * cli_finish_stdout) and gives -1. */
int cli_emit(const void *buf, size_t n);
/* Flushes stdout; exits 1 naming the error when any write to it failed. */
void cli_finish_stdout(void);

/* CPU seconds (user + system) this process has used, every thread */
double cli_cpu_seconds(void);

/* Tagged logs on stderr: "[Tag] message". */
typedef enum {
    LOG_LOADER, LOG_PIPELINE, LOG_LAYER, LOG_ATTN, LOG_FFN, LOG_KV, LOG_SAMPLER, LOG_KERNEL, LOG_BENCH,
    LOG_STATS, LOG_NTAGS
} log_tag;
extern unsigned cli_log_mask;      /* bit per tag */
extern int cli_verbose;
void cli_log(log_tag tag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* As cli_log, shown whatever the tags: what the user must not miss. */
void cli_note(log_tag tag, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Whether lines of this tag are shown (to skip work for hidden ones). */
int cli_log_on(log_tag tag);
/* Parses "--log-tags Loader,Layer" (case-insensitive): 0, or -1 and why. */
int cli_parse_log_tags(const char *list, unsigned *mask, char *err, size_t errlen);
/* As cli_parse_log_tags into cli_log_mask; exits 2 on an unknown tag. */
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
int cmd_serve(int argc, char **argv);

#endif
