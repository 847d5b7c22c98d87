/* Builds tiny random-weight GGUF models for tests (llama, qwen2 or gemma3
 * layout), with knobs to break them in specific ways. The vocabulary is
 * SentencePiece-style without a lone U+2581 piece or single letters, so
 * most text falls back to byte tokens: a space becomes three (E2 96 81),
 * and a text has more tokens than bytes. */
#ifndef DP_TESTMODEL_H
#define DP_TESTMODEL_H

typedef struct {
    const char *arch;            /* "llama" (default), "qwen2", "gemma3", or anything for the unknown case */
    const char *skip_key;        /* omit this metadata key */
    const char *skip_tensor;     /* omit this tensor */
    const char *bad_shape;       /* give this tensor a wrong shape */
    int weight_type;             /* DP_TYPE_* of 2-D weights (default F32) */
    const char *nan_tensor;      /* put a NaN into this (F32) tensor */
    const char *extra_tensor;    /* add this vector tensor (n_embd floats) */
    int n_layer;                 /* default 2 */
    int n_ctx;                   /* context_length (default 256) */
    const char *bpe_pre;         /* a byte-level BPE vocabulary with this tokenizer.ggml.pre (default: SPM) */
    const char *chat_template;   /* tokenizer.chat_template, or none */
    unsigned seed;
} tm_opts;

/* Writes the model; returns 0 or -1. */
int tm_write(const char *path, const tm_opts *o);

/* The end of a rewritten copy of a GGUF: adds every tensor of f to w (whose
 * metadata the caller has written), writes it to a new temporary file and
 * frees w. Returns the path, or NULL. The caller closes f. */
struct gguf_writer;
struct gguf_file;
const char *tm_write_copy(struct gguf_writer *w, const struct gguf_file *f);

/* GPT-2's byte-level alphabet: the code point that stands for byte b
 * (printable Latin-1 bytes for themselves, the rest from U+0100 on). */
unsigned tm_bytelevel_char(int b);

#endif
