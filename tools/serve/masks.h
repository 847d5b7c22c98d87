/* The token masks of a step's constrained requests (response_format,
 * tool_choice), worked out on helper threads while the engine evaluates the
 * step: a mask depends only on the text so far, known before the step's
 * logits are (dp_constraint_prepare). On a GPU backend the masks then cost
 * the step nothing as long as they take less time than the evaluation; the
 * CPU backend's evaluation uses every core, so the scheduler prepares none
 * there and the sampling masks as it goes. */
#ifndef SERVE_MASKS_H
#define SERVE_MASKS_H

#include "doppler.h"

typedef struct mask_pool mask_pool;

/* n_threads helpers (>= 1); NULL when they cannot be started. */
mask_pool *mask_pool_new(int n_threads);
/* Starts preparing c[0 .. n) (the array and the constraints must stay
 * until mask_pool_wait); returns at once. */
void mask_pool_start(mask_pool *p, dp_constraint *const *c, int n);
/* Until every constraint of the last start is prepared. */
void mask_pool_wait(mask_pool *p);
void mask_pool_free(mask_pool *p);

#endif
