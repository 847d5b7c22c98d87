#define _GNU_SOURCE
#include "fuzzlib.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

uint8_t *fz_copy(const uint8_t *data, size_t size) {
    void *p = NULL;
    if (posix_memalign(&p, 64, size ? size : 1) != 0) abort();
    if (size) memcpy(p, data, size);
    return p;
}

void fz_init(void) {
#ifdef DOPPLER_SOURCE_DIR
    setenv("DOPPLER_SOURCE_DIR", DOPPLER_SOURCE_DIR, 0);
#endif
}

static void expect(int cond) {
    if (!cond) abort();
}

void fz_check_masks(const dp_model *m, dp_constraint *c, dp_constraint *w, size_t salt) {
    expect(c && w);
    const int V = dp_model_get_info(m)->n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)V);
    expect(lg != NULL);
    for (int step = 0; step < 4; step++) {
        for (int t = 0; t < V; t++) lg[t] = 0;
        const int k = dp_constraint_mask(c, lg, V);
        int pick = -1, n = 0;
        for (int t = 0; t < V; t++) {
            const int ok = dp_constraint_allows(w, t);
            expect(ok == (lg[t] == 0));
            n += ok;
            if (ok && (pick < 0 || (size_t)t % (salt + 7) == (size_t)step)) pick = t;
        }
        expect(n == k);
        if (pick < 0 || dp_token_is_eog(m, pick)) break;
        expect(dp_constraint_accept(c, pick) == DP_OK && dp_constraint_accept(w, pick) == DP_OK);
    }
    free(lg);
    dp_constraint_free(c);
    dp_constraint_free(w);
}

int fz_load_vocabs(fz_vocab *v, int n) {
    fz_init();
    int loaded = 0;
    for (int i = 0; i < n; i++) {
        const char *path = !strcmp(v[i].where, "fixture") ? t_src_path(v[i].file)
                           : !strcmp(v[i].where, "shared") ? t_shared_fixture(v[i].file)
                                                           : t_model_path(v[i].file);
        v[i].m = path ? dp_model_load(path) : NULL;
        if (v[i].m) loaded++;
        else fprintf(stderr, "fuzz: %s (%s) not loaded: %s\n", v[i].name, v[i].file, path ? dp_last_error() : "absent");
    }
    return loaded;
}
