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

#ifdef __cplusplus
}
#endif

#endif
