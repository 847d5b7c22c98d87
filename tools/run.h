/* doppler run's prompts, shared by the one-prompt path (cmd_run.c) and
 * several prompts decoded together (run_parallel.c). */
#ifndef DP_RUN_H
#define DP_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "cli.h"
#include "debug.h"

typedef struct {
    const char *text;        /* as given (-p, the file, a line of it) */
    size_t len;
    char *chat_text;         /* --chat: the rendered prompt */
    int32_t *toks;
    int n_tok, cap;
    int echo;                /* print the prompt before its continuation */
} run_prompt;

/* Renders (--chat) and tokenizes prompt `index` of n (messages name it
 * when n > 1); exits 2 on a prompt without tokens. */
void run_prompt_prepare(run_prompt *p, const cli_args *A, const dp_model *m, int index, int n);
/* Exits 2 when the prompt does not leave room in the context for a token. */
void run_prompt_check_ctx(const run_prompt *p, int n_ctx, const dp_model_info *info, int index, int n);
void run_prompt_free(run_prompt *p);

/* Decodes n > 1 prompts with up to --parallel sequences at once (one batch
 * per step for all of them) and prints each prompt's output in input order;
 * returns the exit code. */
int run_parallel(const cli_args *A, dp_model *m, run_prompt *prompts, int n, debug_opts *dbg);

#endif
