/* The token masks of grammar states, kept per model and shared by all of
 * its constraints (constraint.c). Inside a repetition (`[^"]*`, a line of
 * free text) the state after a token is the state before it, and its mask,
 * which walks most of the vocabulary, is the same; a server's requests with
 * one grammar pass through the same states again. A mask is found only by
 * its whole key: the grammar's text (interned here: an id that is never
 * given twice) and the machine state (gm_key). */
#ifndef DP_MASK_CACHE_H
#define DP_MASK_CACHE_H

#include <stddef.h>
#include <stdint.h>

typedef struct dp_mask_cache dp_mask_cache;

/* A cache of masks of n_words words each; NULL when out of memory. */
dp_mask_cache *mask_cache_new(int n_words);
void mask_cache_free(dp_mask_cache *mc);
/* The id of a grammar's text (the same text, the same id while it is
 * kept); 0 when it cannot be kept (its masks are then not either). */
uint32_t mask_cache_grammar(dp_mask_cache *mc, const char *text, size_t len);
/* Copies the mask kept for key[0 .. n) into bits and returns 1 (*n_allowed
 * its count), or returns 0. */
int mask_cache_get(dp_mask_cache *mc, const uint32_t *key, int n, uint32_t *bits, int *n_allowed);
/* Keeps a mask for key[0 .. n) in place of the least recently used one
 * (nothing where memory is short). */
void mask_cache_put(dp_mask_cache *mc, const uint32_t *key, int n, const uint32_t *bits, int n_allowed);

#endif
