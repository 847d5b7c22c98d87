/* Passes of every shape a server's steps take, run once before the first
 * request (see warmup.c). */
#ifndef SERVE_WARMUP_H
#define SERVE_WARMUP_H

#include "doppler.h"

/* Prompt chunks of 8 rows doubling up to n_batch (and the context), decode
 * steps of 1, 2, 4 ... parallel rows and a mixed step, on sequences made
 * and dropped here: the session keeps no positions, cached pages or
 * sequences from them. Returns the passes run, or a negative dp_status
 * (with dp_last_error) when one failed. */
int serve_warmup(dp_session *s, int n_vocab, int parallel, int n_batch);

#endif
