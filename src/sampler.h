/* Sampler internals shared with backends that sample on the device. */
#ifndef DP_SAMPLER_H
#define DP_SAMPLER_H

#include "doppler.h"

const dp_sampler_params *dp_sampler_params_of(const dp_sampler *s);
/* The distinct tokens the repetition penalty applies to (n <= repeat_last_n). */
int dp_sampler_recent(const dp_sampler *s, const int32_t **toks);
/* Draws the next uniform number in [0, 1) from the sampler's stream; a device
 * sampler uses it so that seeds replay identically on every backend. */
double dp_sampler_uniform(dp_sampler *s);

#endif
