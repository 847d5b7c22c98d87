/* Shared by the libFuzzer targets (tests/fuzz/fuzz_*.c). */
#ifndef DP_FUZZLIB_H
#define DP_FUZZLIB_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "doppler.h"

/* A heap copy of exactly size bytes, 64-byte aligned like the tensor data
 * of a mapped file: reading one byte past the end is an ASan report (a file
 * mapping would hide it in the rest of the page). Free with free(). */
uint8_t *fz_copy(const uint8_t *data, size_t size);

/* Points DOPPLER_SOURCE_DIR at the source tree when unset, so fixtures are
 * found wherever the target runs. */
void fz_init(void);

/* A model whose tokenizer, template and vocabulary a target uses; NULL with
 * a note on stderr when the file is absent (real models come from
 * scripts/fetch-models, shared fixtures from DOPPLER_SHARED_FIXTURES). */
typedef struct {
    const char *name;
    const char *where;       /* "fixture", "shared" or "model" */
    const char *file;
    dp_model *m;
} fz_vocab;
/* Loads every entry of v[0..n) it can; returns how many loaded. */
int fz_load_vocabs(fz_vocab *v, int n);

/* Two constraints made alike on m's vocabulary: for a few steps, c's mask
 * must allow exactly the tokens w allows when it walks each one, then both
 * accept the same allowed token (salt picks which). Frees c and w; aborts
 * on a difference. */
void fz_check_masks(const dp_model *m, dp_constraint *c, dp_constraint *w, size_t salt);

#endif
