/* Accumulating dp_profile_entry snapshots and printing them: a table by op
 * kind and one by layer (text), or a cJSON object. Backend-neutral: it only
 * reads dp_profile_entry, so device-event profiles print the same way. */
#ifndef DP_PROFILE_PRINT_H
#define DP_PROFILE_PRINT_H

#include <stdio.h>

#include <cjson/cJSON.h>

#include "doppler.h"

typedef struct prof_acc prof_acc;

prof_acc *prof_acc_new(void);
void prof_acc_free(prof_acc *a);
/* Adds the session's current profile to the accumulator (entries with the
 * same op and layer are summed). */
void prof_acc_add_session(prof_acc *a, const dp_session *s);
void prof_acc_add(prof_acc *a, const dp_profile_entry *e, int n);
double prof_acc_total_ms(const prof_acc *a);

/* Prints "title", then ops sorted by total time (calls, total ms, share,
 * ms per token, GB/s for entries that read weights), then layers sorted by
 * total time. n_tokens divides totals into per-token figures (0 = omit). */
void prof_print(FILE *out, const char *title, const prof_acc *a, int n_tokens);
/* {"total_ms":..,"ops":[{"op","calls","total_ms","share","gbps"}..],
 *  "layers":[{"layer","total_ms","share"}..]} */
cJSON *prof_to_json(const prof_acc *a);

#endif
