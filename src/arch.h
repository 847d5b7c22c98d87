/* Architectures as data: every quirk of a model family is a field of its
 * recipe, and every per-layer choice is resolved once into dp_layer_cfg.
 * The forward passes read these fields; they never test architecture names. */
#ifndef DP_ARCH_H
#define DP_ARCH_H

#include "gguf.h"

typedef enum { DP_ACT_SILU = 0, DP_ACT_GELU_TANH = 1 } dp_act;

/* ADJACENT rotates pairs (x[2i], x[2i+1]) (GPT-J style; GGUF converters
 * permute llama's Q/K rows so this equals HF's rotate_half). NEOX rotates
 * (x[i], x[i + n_rot/2]). */
typedef enum { DP_ROPE_ADJACENT = 0, DP_ROPE_NEOX = 1 } dp_rope_style;

typedef struct {
    const char *arch;            /* general.architecture value */
    /* structure */
    int qkv_bias;                /* 1: Q/K/V biases required; 2: optional */
    int qk_norm;                 /* per-head RMSNorm of q and k before RoPE */
    int post_norms;              /* sandwich norms: attention and FFN outputs
                                    are RMS-normalised before the residual add */
    int rope_freqs;              /* optional rope_freqs.weight divides frequencies */
    int fused_qkv;               /* attn_qkv.weight holds Q, K, V rows (bound as
                                    row views), else separate tensors */
    int fused_gate_up;           /* ffn_up.weight holds the gate rows, then the
                                    up rows (bound as row views) */
    int longrope;                /* optional rope_factors_long/short.weight:
                                    LongRoPE frequency divisors, long ones once
                                    the sequence passes the original context */
    /* numbers */
    float norm_offset;           /* added to RMSNorm weights at use (GGUF Gemma
                                    weights already hold the +1, so 0) */
    float qk_norm_offset;        /* the same for the q/k norms */
    int embed_scale;             /* embeddings times sqrt(n_embd), rounded to
                                    the activation type (float32 here) */
    dp_act act;                  /* gate activation of the gated FFN */
    dp_rope_style rope_style;
    int swa_period;              /* >0: layer i uses global attention when
                                    (i+1) % swa_period == 0, else the sliding
                                    window; 0: all layers global */
    float rope_theta_local;      /* θ on sliding-window layers (0: the file's θ) */
    int sliding_window_default;  /* when the file does not say */
    int swa_from_file;           /* swa_period 0: attention.sliding_window,
                                    when the file has one > 0, limits every layer */
    int nope_period;             /* >0: layer i skips RoPE when (i+1) % nope_period
                                    == 0, unless attention.rope_pattern lists
                                    the layers that rotate */
    /* tanh soft-capping, cap * tanh(x / cap), of the scaled attention scores
     * and of the logits; the file's attn_logit_softcapping and
     * final_logit_softcapping keys override these defaults (0: none) */
    float attn_softcap_default, final_softcap_default;
    /* q·k is scaled by 1/sqrt(head_dim), except in models of this many
     * layers (0: none): 1/sqrt(n_embd/n_head). GGUF does not store HF's
     * query_pre_attn_scalar, so the layer count names the model size whose
     * config differs, as llama.cpp does. */
    int attn_scale_embd_per_head_n_layer;
} dp_recipe;

typedef struct {
    int sliding;                 /* a sliding layer of the recipe's pattern: the
                                    local RoPE θ and scale */
    int rope;                    /* 0: no RoPE on this layer (NoPE) */
    int window;                  /* attend to keys with q_pos - k_pos < window (0 = unlimited) */
    float rope_theta;
    float rope_freq_scale;       /* positions multiplied by this (linear scaling) */
    const float *inv_freq;       /* RoPE: n_rot / 2 inverse frequencies (into hp->rope_inv_freq) */
} dp_layer_cfg;

typedef struct {
    int n_vocab;                 /* rows of the output projection */
    int n_embd, n_layer, n_head, n_head_kv, head_dim, v_head_dim, n_ff;
    int n_rot;                   /* rotated dimensions per head */
    int n_ctx_train;
    int pooling;                 /* DP_POOLING_*: how the file's embeddings pool the positions (0: not said) */
    int sliding_window;
    float eps;
    float rope_theta;            /* θ of global layers */
    float rope_freq_scale;
    float attn_scale;            /* multiplies q·k */
    float attn_softcap;          /* 0 or the cap of the scaled scores */
    float final_softcap;         /* 0 or the cap of the logits */
    int n_ctx_orig;              /* LongRoPE: sequences longer than this use
                                    the long factors */
    float rope_attn_factor;      /* cos and sin multiplied by this (LongRoPE) */
    float embed_scale;           /* 1 or sqrt(n_embd) in float32 */
    dp_layer_cfg *layers;        /* n_layer entries */
    /* RoPE inverse frequencies, as HF computes them in float32 (dp_hparams_rope):
     * [0 .. n_rot/2) global layers, [n_rot/2 .. n_rot) sliding layers; with
     * LongRoPE's long factors the same two again from n_rot on */
    float *rope_inv_freq;
    int rope_long_factors;       /* rope_inv_freq has the long set */
} dp_hparams;

/* The recipe for an architecture name, or NULL when unknown. */
const dp_recipe *dp_recipe_find(const char *arch);
/* Comma-separated names of the known architectures. */
const char *dp_recipe_list(void);

/* Reads hyper-parameters for recipe r from the file's metadata and resolves
 * the per-layer configuration. Returns 0 or a negative dp_status with the
 * error set (naming the missing or invalid key). */
int dp_hparams_load(dp_hparams *hp, const dp_recipe *r, const gguf_file *f);
/* Computes the RoPE inverse frequencies of every layer (1 / theta^(2i/d),
 * divided by rope_freqs when the model has that tensor, times the layer's
 * frequency scale) once, for both backends. Returns 0 or DP_ERR_NOMEM. */
int dp_hparams_rope(dp_hparams *hp, const float *rope_freqs, const float *long_factors);
/* The two tables (global, sliding) for a forward call whose positions end
 * before n_pos: LongRoPE's long ones once n_pos passes the original context
 * (as HF picks them per call), else the others. */
const float *dp_hparams_rope_tables(const dp_hparams *hp, int n_pos);
void dp_hparams_free(dp_hparams *hp);

/* Applies the faults named in DOPPLER_FAULT (comma-separated) to a copy of
 * the recipe; see docs/debugging.md. Returns a bit mask of DP_FAULT_*. */
enum {
    DP_FAULT_NO_QK_NORM_OFFSET = 1 << 0,
    DP_FAULT_NO_EMBED_SCALE = 1 << 1,
    DP_FAULT_NO_POST_NORMS = 1 << 2,
    DP_FAULT_ROPE_WRONG_STYLE = 1 << 3,
    DP_FAULT_DECODE_MASK_OFF_BY_ONE = 1 << 4,
    DP_FAULT_NO_SOFTCAP = 1 << 5,
};
int dp_faults_apply(dp_recipe *r, const char *spec);
/* The names of the faults in mask, comma-separated ("" for none). */
void dp_faults_names(int mask, char *buf, size_t cap);
/* The faults' effect on hyper-parameters already read (after
 * dp_faults_apply edited the recipe r): the embedding scale, soft-capping. */
void dp_faults_hparams(dp_hparams *hp, const dp_recipe *r, int mask);

#endif
