/* Human-readable dump of a GGUF file: header, metadata (long arrays and
 * strings abbreviated) and the tensor table. */
#include <stdio.h>
#include <string.h>

#include "doppler.h"
#include "gguf.h"
#include "quant.h"

#define SHOW_ELEMS 8

static void put_str(FILE *o, const char *p, uint64_t len, uint64_t max) {
    fputc('"', o);
    for (uint64_t i = 0; i < len && i < max; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", o);
        else if (c == '\t') fputs("\\t", o);
        else if (c == '"' || c == '\\') fprintf(o, "\\%c", c);
        else if (c < 0x20) fprintf(o, "\\x%02x", c);
        else fputc(c, o);
    }
    fputc('"', o);
    if (len > max) fprintf(o, "...(%llu bytes)", (unsigned long long)len);
}

/* Walks one value of type t at *p, advancing *p; prints it when o != NULL.
 * The file was validated on open, so sizes are known to be in bounds. */
static void walk(FILE *o, int t, const uint8_t **p, int depth) {
    const uint8_t *q = *p;
    size_t es = gguf_vtype_size(t);
    if (t == GGUF_STRING) {
        uint64_t len;
        memcpy(&len, q, 8);
        if (o) put_str(o, (const char *)q + 8, len, depth ? 40 : 200);
        *p += 8 + len;
        return;
    }
    if (t == GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        memcpy(&et, q, 4);
        memcpy(&n, q + 4, 8);
        *p += 12;
        if (o) fprintf(o, "[%s x %llu: ", gguf_vtype_name((int)et), (unsigned long long)n);
        for (uint64_t i = 0; i < n; i++) {
            FILE *oo = i < SHOW_ELEMS ? o : NULL;
            if (!oo && gguf_vtype_size((int)et)) { /* skip fixed-size tail at once */
                *p += gguf_vtype_size((int)et) * (n - i);
                break;
            }
            if (oo && i) fprintf(oo, ", ");
            walk(oo, (int)et, p, depth + 1);
        }
        if (o) fprintf(o, "%s]", n > SHOW_ELEMS ? ", ..." : "");
        return;
    }
    *p += es;
    if (!o) return;
    switch (t) {
    case GGUF_UINT8: fprintf(o, "%u", *q); break;
    case GGUF_INT8: fprintf(o, "%d", (int8_t)*q); break;
    case GGUF_BOOL: fprintf(o, "%s", *q ? "true" : "false"); break;
    case GGUF_UINT16: { uint16_t v; memcpy(&v, q, 2); fprintf(o, "%u", v); break; }
    case GGUF_INT16: { int16_t v; memcpy(&v, q, 2); fprintf(o, "%d", v); break; }
    case GGUF_UINT32: { uint32_t v; memcpy(&v, q, 4); fprintf(o, "%u", v); break; }
    case GGUF_INT32: { int32_t v; memcpy(&v, q, 4); fprintf(o, "%d", v); break; }
    case GGUF_FLOAT32: { float v; memcpy(&v, q, 4); fprintf(o, "%.9g", v); break; }
    case GGUF_UINT64: { uint64_t v; memcpy(&v, q, 8); fprintf(o, "%llu", (unsigned long long)v); break; }
    case GGUF_INT64: { int64_t v; memcpy(&v, q, 8); fprintf(o, "%lld", (long long)v); break; }
    case GGUF_FLOAT64: { double v; memcpy(&v, q, 8); fprintf(o, "%.17g", v); break; }
    }
}

/* llama.cpp's names of general.file_type (enum llama_ftype); the numbers
 * that enum retired have none. */
static const char *file_type_name(uint32_t t) {
    static const char *const names[] = {
        [0] = "F32",      [1] = "F16",      [2] = "Q4_0",    [3] = "Q4_1",    [7] = "Q8_0",    [8] = "Q5_0",
        [9] = "Q5_1",     [10] = "Q2_K",    [11] = "Q3_K_S", [12] = "Q3_K_M", [13] = "Q3_K_L", [14] = "Q4_K_S",
        [15] = "Q4_K_M",  [16] = "Q5_K_S",  [17] = "Q5_K_M", [18] = "Q6_K",   [19] = "IQ2_XXS", [20] = "IQ2_XS",
        [21] = "Q2_K_S",  [22] = "IQ3_XS",  [23] = "IQ3_XXS", [24] = "IQ1_S", [25] = "IQ4_NL", [26] = "IQ3_S",
        [27] = "IQ3_M",   [28] = "IQ2_S",   [29] = "IQ2_M",  [30] = "IQ4_XS", [31] = "IQ1_M",  [32] = "BF16",
        [36] = "TQ1_0",   [37] = "TQ2_0",   [38] = "MXFP4_MOE",
    };
    return t < sizeof names / sizeof names[0] ? names[t] : NULL;
}

int dp_inspect_file(const char *path, FILE *o) {
    gguf_file *f = gguf_open(path);
    if (!f) return DP_ERR_FORMAT;
    gguf_print(f, o);
    gguf_close(f);
    return DP_OK;
}

void gguf_print(const gguf_file *f, FILE *o) {
    const char *path = f->path;
    fprintf(o, "file: %s\nversion: %u\nsize: %llu bytes\nalignment: %llu\nmetadata: %d keys\n", path, f->version,
            (unsigned long long)f->size, (unsigned long long)f->alignment, f->n_kv);
    for (int i = 0; i < f->n_kv; i++) {
        const gguf_kv *kv = &f->kv[i];
        fprintf(o, "  %-44s %-4s = ", kv->key, gguf_vtype_name(kv->type));
        const uint8_t *p = kv->data;
        if (kv->type == GGUF_ARRAY) {
            p -= 12; /* walk from the array header (type + count) */
            walk(o, GGUF_ARRAY, &p, 0);
        } else {
            walk(o, kv->type, &p, 0);
        }
        if (!strcmp(kv->key, "general.file_type") && kv->type == GGUF_UINT32) {
            uint32_t t;
            memcpy(&t, kv->data, 4);
            const char *name = file_type_name(t);
            fprintf(o, " (%s)", name ? name : "unknown to llama.cpp");
        }
        fputc('\n', o);
    }
    uint64_t total = 0;
    fprintf(o, "tensors: %d\n", f->n_tensors);
    fprintf(o, "  %-4s %-36s %-7s %-24s %12s %12s\n", "#", "name", "type", "shape", "offset", "bytes");
    for (int i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        char shape[96];
        int n = snprintf(shape, sizeof shape, "[");
        for (int d = 0; d < t->n_dims; d++)
            n += snprintf(shape + n, sizeof shape - (size_t)n, "%s%lld", d ? ", " : "", (long long)t->ne[d]);
        snprintf(shape + n, sizeof shape - (size_t)n, "]");
        fprintf(o, "  %-4d %-36s %-7s %-24s %12llu %12llu\n", i, t->name, dp_type_name(t->type), shape,
                (unsigned long long)(f->data_offset + t->offset), (unsigned long long)t->nbytes);
        total += t->nbytes;
    }
    fprintf(o, "tensor data: %llu bytes (%.1f MB)\n", (unsigned long long)total, total / 1e6);
}
