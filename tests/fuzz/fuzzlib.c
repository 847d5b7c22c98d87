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
