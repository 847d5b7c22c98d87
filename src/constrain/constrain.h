/* What the engine takes from a constraint (constraint.c) to draw a
 * constrained token itself: dp_eval_batch's entries with a constraint. */
#ifndef DOPPLER_CONSTRAIN_H
#define DOPPLER_CONSTRAIN_H

#include <stdint.h>

#include "doppler.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The tokens that may come next as bits by token id (token t: bit t % 32
 * of word t / 32; *n_words words, the tokenizer's vocabulary), and how
 * many they are. Works the mask out, or waits for a dp_constraint_prepare
 * another thread is running. Valid until the next dp_constraint_accept. */
const uint32_t *dp_constraint_bits(dp_constraint *c, int *n_words, int *n_allowed);

/* How many of the constraint's masks came from the model's cache of
 * grammar states' masks (mask_cache.h) and how many were worked out (a
 * JSON constraint's masks are never kept). */
void dp_constraint_cache_stats(dp_constraint *c, long *hits, long *misses);

#ifdef __cplusplus
}
#endif

#endif
