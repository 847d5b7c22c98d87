/* A loaded model: the mapped file, its recipe and hyper-parameters, and the
 * weight tensors of every layer (pointers into the mapping, never copies). */
#ifndef DP_MODEL_H
#define DP_MODEL_H

#include "arch.h"
#include "doppler.h"
#include "gguf.h"

struct dp_tokenizer;

typedef struct {
    const char *name;        /* tensor name in the file */
    const void *data;        /* into the mapping */
    int type;                /* DP_TYPE_* */
    int64_t cols;            /* ne[0]: input features, contiguous */
    int64_t rows;            /* ne[1]: output features (1 for vectors) */
    uint64_t row_bytes;
    uint64_t nbytes;
} dp_weight;

typedef struct {
    dp_weight attn_norm;
    dp_weight wq, wk, wv, wo;        /* fused_qkv: row views of attn_qkv */
    dp_weight bq, bk, bv;            /* .data NULL when absent */
    dp_weight q_norm, k_norm;        /* qk_norm recipes */
    dp_weight post_attn_norm;        /* post_norms recipes */
    dp_weight ffn_norm;
    dp_weight gate, up, down;        /* fused_gate_up: gate, up row views of ffn_up */
    dp_weight post_ffn_norm;
} dp_layer_weights;

struct dp_model {
    gguf_file *file;
    dp_recipe recipe;                /* a copy: DOPPLER_FAULT may edit it */
    int faults;                      /* DP_FAULT_* bits in effect */
    char fault_names[160];           /* their names, for dp_model_info */
    dp_hparams hp;
    dp_model_info info;
    dp_weight tok_embd;
    dp_weight output_norm;
    dp_weight output;                /* the LM head (tok_embd when tied) */
    dp_weight rope_freqs;            /* optional, F32 [n_rot/2] */
    dp_weight rope_long, rope_short; /* LongRoPE divisors, optional, F32 [n_rot/2] */
    dp_layer_weights *layers;
    struct dp_tokenizer *tok;
    char *chat_template;             /* tokenizer.chat_template or NULL */
    char *name;                      /* general.name or NULL */
    uint8_t *tensor_used;            /* while loading: tensors bound so far */
    struct dp_vocab_bytes *vocab_bytes; /* every token's bytes, made by the first constraint (constrain/) */
};

void dp_vocab_bytes_free(struct dp_vocab_bytes *v);

/* Calls fn for every weight of the model (used by backends to upload). */
typedef void (*dp_weight_visit_fn)(void *user, const dp_weight *w);
void dp_model_visit_weights(const dp_model *m, dp_weight_visit_fn fn, void *user);

#endif
