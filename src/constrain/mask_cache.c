/* The token masks of grammar states, shared by a model's constraints
 * (mask_cache.h). One lock guards it all: a lookup or an insert is a hash
 * compare and a copy of a mask (32 KB on a 262k vocabulary), far shorter
 * than the walk a miss costs. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mask_cache.h"

enum { MASKS = 64, GRAMMARS = 16 };

typedef struct {
    uint32_t *key, *bits; /* bits: n_words; NULL: an empty slot */
    int key_n, n_allowed;
    uint64_t hash, last;
} mask_entry;

typedef struct {
    char *text; /* NULL: an empty slot */
    size_t len;
    uint32_t id;
    uint64_t last;
} grammar_entry;

struct dp_mask_cache {
    pthread_mutex_t mu;
    int n_words;
    uint64_t tick;
    uint32_t next_id;
    mask_entry m[MASKS];
    grammar_entry g[GRAMMARS];
};

dp_mask_cache *mask_cache_new(int n_words) {
    dp_mask_cache *mc = calloc(1, sizeof *mc);
    if (!mc) return NULL;
    pthread_mutex_init(&mc->mu, NULL);
    mc->n_words = n_words;
    return mc;
}

void mask_cache_free(dp_mask_cache *mc) {
    if (!mc) return;
    for (int i = 0; i < MASKS; i++) free(mc->m[i].key), free(mc->m[i].bits);
    for (int i = 0; i < GRAMMARS; i++) free(mc->g[i].text);
    pthread_mutex_destroy(&mc->mu);
    free(mc);
}

uint32_t mask_cache_grammar(dp_mask_cache *mc, const char *text, size_t len) {
    if (!mc) return 0;
    pthread_mutex_lock(&mc->mu);
    grammar_entry *e = &mc->g[0];
    uint32_t id = 0;
    for (int i = 0; i < GRAMMARS && !id; i++) {
        grammar_entry *g = &mc->g[i];
        if (g->text && g->len == len && !memcmp(g->text, text, len)) g->last = ++mc->tick, id = g->id;
        else if (!g->text || (e->text && g->last < e->last)) e = g;
    }
    if (!id) { /* a new text: ids are never reused, so the masks of the one it replaces are found no more */
        char *t = malloc(len ? len : 1);
        if (t) {
            memcpy(t, text, len);
            free(e->text);
            *e = (grammar_entry){t, len, ++mc->next_id, ++mc->tick};
            id = e->id;
        }
    }
    pthread_mutex_unlock(&mc->mu);
    return id;
}

static uint64_t key_hash(const uint32_t *key, int n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a over the words */
    for (int i = 0; i < n; i++) h = (h ^ key[i]) * 1099511628211ull;
    return h;
}

int mask_cache_get(dp_mask_cache *mc, const uint32_t *key, int n, uint32_t *bits, int *n_allowed) {
    if (!mc) return 0;
    const uint64_t h = key_hash(key, n);
    int found = 0;
    pthread_mutex_lock(&mc->mu);
    for (int i = 0; i < MASKS && !found; i++) {
        mask_entry *e = &mc->m[i];
        if (e->bits && e->hash == h && e->key_n == n && !memcmp(e->key, key, sizeof(uint32_t) * (size_t)n)) {
            memcpy(bits, e->bits, sizeof(uint32_t) * (size_t)mc->n_words);
            *n_allowed = e->n_allowed;
            e->last = ++mc->tick;
            found = 1;
        }
    }
    pthread_mutex_unlock(&mc->mu);
    return found;
}

void mask_cache_put(dp_mask_cache *mc, const uint32_t *key, int n, const uint32_t *bits, int n_allowed) {
    if (!mc || n < 1) return;
    const uint64_t h = key_hash(key, n);
    pthread_mutex_lock(&mc->mu);
    mask_entry *e = &mc->m[0];
    for (int i = 1; i < MASKS && e->bits; i++)
        if (!mc->m[i].bits || mc->m[i].last < e->last) e = &mc->m[i];
    if (!e->bits) e->bits = malloc(sizeof(uint32_t) * (size_t)mc->n_words);
    uint32_t *k = e->bits ? realloc(e->key, sizeof(uint32_t) * (size_t)n) : NULL;
    if (k) {
        memcpy(k, key, sizeof(uint32_t) * (size_t)n);
        memcpy(e->bits, bits, sizeof(uint32_t) * (size_t)mc->n_words);
        e->key = k, e->key_n = n, e->hash = h, e->n_allowed = n_allowed, e->last = ++mc->tick;
    } else { /* left empty */
        free(e->bits);
        e->bits = NULL;
    }
    pthread_mutex_unlock(&mc->mu);
}
