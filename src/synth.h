/* Synthetic models (dp_synth): presets with the shapes of real models, the
 * per-tensor type rules of llama.cpp's quantization mixes, and synthetic
 * vocabularies. The plan (tensor table and hyper-parameters) is exposed so
 * tests can check full-size presets without writing gigabytes. */
#ifndef DP_SYNTH_H
#define DP_SYNTH_H

#include <stdint.h>

#include "doppler.h"
#include "gguf.h"

typedef enum { SYNTH_VOCAB_SPM = 0, SYNTH_VOCAB_GPT2 = 1 } synth_vocab_style;

typedef struct {
    const char *arch, *preset;
    const char *name;            /* general.name */
    const char *size_label;      /* general.size_label */
    int n_embd, n_ff, n_layer, n_head, n_head_kv, head_dim, n_vocab;
    int n_ctx_train;
    int sliding_window;          /* gemma3 */
    float rope_theta, eps;
    int tied;                    /* no output.weight: the LM head is token_embd */
    int qkv_bias;                /* qwen2 */
    int llama3_rope_freqs;       /* rope_freqs.weight with Llama 3 scaling */
    int head_dim_keys;           /* write attention.key_length/value_length */
    int vocab_keys;              /* write <arch>.vocab_size and rope.dimension_count */
    synth_vocab_style vocab;
    /* the newer families (0: absent) */
    int qk_norm;                 /* attn_q_norm / attn_k_norm (qwen3; gemma3 always) */
    int post_norms;              /* sandwich norms (gemma2; gemma3 always) */
    int fused;                   /* attn_qkv, and gate + up in ffn_up (phi3) */
    int n_rot;                   /* rope.dimension_count below head_dim (phi3) */
    int n_ctx_orig;              /* LongRoPE factor tensors and keys (phi3) */
    float attn_softcap, final_softcap; /* gemma2 keys */
    int llama3_factor;           /* rope_freqs' Llama 3 factor (0: 32, as Llama 3.2; Llama 3.1 has 8) */
} synth_preset;

enum { SYNTH_MATRIX = 0, SYNTH_NORM = 1, SYNTH_BIAS = 2, SYNTH_ROPE_FREQS = 3, SYNTH_ROPE_LONG = 4, SYNTH_ROPE_SHORT = 5 };

typedef struct {
    char name[64];
    int type;                    /* DP_TYPE_* */
    int n_dims;
    int64_t ne[2];
    int kind;                    /* SYNTH_* */
} synth_tensor;

typedef struct {
    synth_preset pr;             /* a copy, n_layer/n_vocab possibly overridden */
    const char *type_name;       /* "q4_k_m" */
    int file_type;               /* llama.cpp's general.file_type */
    int n;
    synth_tensor *t;
} synth_plan;

/* Fills the plan for p (vocab_from is only read for its token count).
 * Returns DP_OK or a dp_status with the error set. */
int synth_plan_build(const dp_synth_params *p, synth_plan *plan);
void synth_plan_free(synth_plan *plan);

/* Whether dp_synth fills matrices of this DP_TYPE_* with random valid blocks
 * (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S: no quantizer) rather than
 * quantized random normals. */
int synth_random_block_type(int type);

/* Writes the tokenizer.* keys of a synthetic vocabulary of n tokens. */
int synth_vocab_write(gguf_writer *w, const synth_preset *pr, int n);

#endif
