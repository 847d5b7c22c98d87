/* Tokenizers read from GGUF metadata (tokenizer.ggml.*):
 *  - "llama": SentencePiece-style (Gemma 3, Llama 2, TinyLlama): merges by
 *    piece score, byte fallback <0xNN>, add_space_prefix.
 *  - "gpt2": byte-level BPE (Qwen2/2.5, Llama 3, SmolLM2, GPT-2): merges by
 *    rank after a pre-tokenizer chosen by tokenizer.ggml.pre (PCRE2 regexes).
 * The public functions in doppler.h (dp_tokenize, dp_detok_*, ...) are
 * implemented on top of this. */
#ifndef DP_TOKENIZER_H
#define DP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "../gguf.h"

typedef struct dp_tokenizer dp_tokenizer;

/* NULL on error (dp_last_error names the problem, e.g. an unknown
 * tokenizer.ggml.pre value). */
dp_tokenizer *dp_tokenizer_load(const gguf_file *f);
void dp_tokenizer_free(dp_tokenizer *t);

int dp_tokenizer_n_vocab(const dp_tokenizer *t);
int dp_tokenizer_bos(const dp_tokenizer *t);     /* -1 when absent */
int dp_tokenizer_eos(const dp_tokenizer *t);     /* -1 when absent */
int dp_tokenizer_add_bos(const dp_tokenizer *t);
int dp_tokenizer_is_eog(const dp_tokenizer *t, int32_t tok);

/* See dp_tokenize in doppler.h for the contract. */
int dp_tokenizer_encode(const dp_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                        int32_t *out, int cap);

#endif
