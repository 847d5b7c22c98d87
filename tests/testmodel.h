/* Builds tiny random-weight GGUF models for tests (llama, qwen2 or gemma3
 * layout), with knobs to break them in specific ways. */
#ifndef DP_TESTMODEL_H
#define DP_TESTMODEL_H

#include "gguf.h"

typedef struct {
    const char *arch;            /* "llama" (default), "qwen2", "gemma3", or anything for the unknown case */
    const char *skip_key;        /* omit this metadata key */
    const char *skip_tensor;     /* omit this tensor */
    const char *bad_shape;       /* give this tensor a wrong shape */
    int weight_type;             /* DP_TYPE_* of 2-D weights (default F32) */
    const char *nan_tensor;      /* put a NaN into this (F32) tensor */
    const char *extra_tensor;    /* add this vector tensor (n_embd floats) */
    int n_layer;                 /* default 2 */
    const char *bpe_pre;         /* a byte-level BPE vocabulary with this tokenizer.ggml.pre (default: SPM) */
    const char *chat_template;   /* tokenizer.chat_template, or none */
    unsigned seed;
} tm_opts;

/* Writes the model; returns 0 or -1. */
int tm_write(const char *path, const tm_opts *o);

/* Copies the GGUF src to dst with the metadata key replaced: put writes its
 * new value (NULL: the key is dropped). Returns 0 or -1. */
typedef void (*tm_put_fn)(gguf_writer *w, const char *key, const void *user);
int tm_rewrite(const char *src, const char *dst, const char *key, tm_put_fn put, const void *user);

/* GPT-2's byte-level alphabet: the code point that stands for byte b
 * (printable Latin-1 bytes for themselves, the rest from U+0100 on). */
unsigned tm_bytelevel_char(int b);

#endif
