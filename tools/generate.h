/* Token generation shared by run and chat: the prompt evaluated in chunks
 * (Ctrl-C is honoured between them), then sampling, streaming the text to
 * stdout, until the end of generation, -n tokens, a stop string, a full
 * context, Ctrl-C or a write error. run with several prompts evaluates
 * itself (one batch for all sequences) and feeds each sequence's tokens
 * through gen_begin / gen_take / gen_end. */
#ifndef DP_GENERATE_H
#define DP_GENERATE_H

#include <stddef.h>
#include <stdint.h>

#include "debug.h"
#include "doppler.h"
#include "serve/reasoning.h"

/* gen_prefill's status when Ctrl-C stopped it (not a dp_status). */
enum { GEN_INTERRUPTED = 1 };

typedef struct {
    /* set by the caller */
    const dp_model *m;
    dp_session *s;
    dp_sampler *smpl;
    debug_opts *dbg;              /* run's per-step reports, or NULL */
    int n_batch;                  /* prefill chunk */
    int n_predict;                /* -1 = until the end of generation or a full context */
    int ignore_eos, render_special;
    const char *const *stop;      /* stop strings (not printed) */
    int n_stop;
    int keep_text;                /* collect the printed text in text/len */
    int quiet;                    /* collect the text in text/len and print nothing */
    int seq;                      /* the sequence generated into (0 for run and chat) */
    int think;                    /* a chat answer on a terminal: its <think> block dim and without its tags
                                   * (THINK_SPLIT, or THINK_INSIDE where the prompt ended inside one);
                                   * text and stop strings stay the text as generated */
    dp_constraint *cons;          /* --json-schema: what may be written (owned by the caller), or NULL */
    /* results */
    char *text;
    size_t len, cap;
    int n_gen;
    int32_t *toks;                /* the generated tokens (n_gen of them) */
    int toks_cap;
    think_split ts;               /* think's state */
    int think_shown;              /* 1: reasoning was printed; 2: and the answer after it */
    const char *stop_reason;      /* "end of generation", "end of value" (cons: the value is complete),
                                   * "length", "stop string", "context full", "interrupted", "write error" */
    char *pend;                   /* text held back while it may begin a stop string */
    size_t pend_len, pend_cap;
    dp_detok *dt;
    float *work;                  /* cons: the logits masked, n_vocab floats */
    int fed;                      /* a stop string ended the text, or a write failed */
} gen_state;

/* Evaluates n prompt tokens and picks the first generated one. Returns 0,
 * GEN_INTERRUPTED, or a dp_status (DP_ERR_STOPPED reported by debug). */
int gen_prefill(gen_state *g, const int32_t *toks, int n, int32_t *first);
/* Generates from the first token; returns 0 or a dp_status. */
int gen_run(gen_state *g, int32_t first);
/* gen_run in steps, for a caller that evaluates the tokens itself:
 * gen_begin, then gen_take for every sampled token (it returns 1 when the
 * generation ends, with stop_reason set, else 0: evaluate the token next),
 * then gen_end, which writes what was held back. With cons, the caller
 * draws under it (dp_batch_entry.constraint). */
void gen_begin(gen_state *g);
int gen_take(gen_state *g, int32_t tok);
void gen_end(gen_state *g);
void gen_free(gen_state *g);

#endif
