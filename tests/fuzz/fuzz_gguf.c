/* libFuzzer target: the GGUF reader on arbitrary bytes. A file it accepts
 * must keep every promise of gguf.h: each value, array element and tensor
 * lies inside the data, lookups find what the tables hold, and the inspect
 * printer walks it all (ASan sees the exact end of the input). */
#include <stdio.h>
#include <string.h>

#include "fuzzlib.h"
#include "util.h"
#include "gguf.h"

static FILE *g_null;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    g_null = fopen("/dev/null", "w");
    return 0;
}

static volatile uint8_t g_sink;

static void touch(const void *p, uint64_t n) {
    if (n) g_sink ^= ((const uint8_t *)p)[0] ^ ((const uint8_t *)p)[n - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = fz_copy(data, size);
    dp_set_error(DP_OK, "sentinel");
    gguf_file *f = gguf_open_memory(buf, size, "fuzz");
    if (!f) {
        if (!strcmp(dp_last_error(), "sentinel")) abort(); /* every failure says why */
        free(buf);
        return 0;
    }
    for (int i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        if (gguf_find_kv(f, kv->key) != kv) abort(); /* keys are unique */
        int64_t iv;
        double dv;
        int bv;
        gguf_str sv;
        gguf_get_int(f, kv->key, &iv);
        gguf_get_float(f, kv->key, &dv);
        gguf_get_bool(f, kv->key, &bv);
        if (gguf_get_str(f, kv->key, &sv)) touch(sv.ptr, sv.len);
        touch(kv->data, kv->size);
        if (kv->type != GGUF_ARRAY) continue;
        for (uint64_t e = 0; e < kv->n; e++) {
            if (kv->arr_type == GGUF_STRING) {
                gguf_str s = gguf_arr_str(kv, e);
                touch(s.ptr, s.len);
            } else if (kv->arr_type != GGUF_ARRAY) {
                g_sink ^= gguf_arr_num(kv, e) > 0;
            }
        }
    }
    for (int i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (gguf_find_tensor(f, t->name) != t) abort(); /* names are unique */
        touch(t->data, t->nbytes);
    }
    gguf_print(f, g_null);
    gguf_close(f);
    free(buf);
    return 0;
}
