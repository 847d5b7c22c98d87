/* doppler serve --profile: every engine step timed op by op. A line per
 * step on stderr (its prompt and decode rows, wall and op time), and at the
 * end the op and layer tables of the decode-only steps and of the steps
 * with prompt rows apart (a server's mixed steps are what a benchmark of
 * decode alone does not show). */
#ifndef SERVE_PROFILE_H
#define SERVE_PROFILE_H

#include <stdio.h>

#include "doppler.h"

typedef struct serve_prof serve_prof;

/* Turns the session's profiling on (forgetting what came before, e.g. the
 * warm-up); NULL on failure. */
serve_prof *serve_prof_new(dp_session *s, FILE *out);
/* After a step of prompt_rows + decode_rows entries that took wall_s in
 * dp_eval_batch: its line, its ops into the tables. */
void serve_prof_step(serve_prof *p, int prompt_rows, int decode_rows, int prompt_seqs, double wall_s);
/* Prints the tables and frees. */
void serve_prof_finish(serve_prof *p);

#endif
