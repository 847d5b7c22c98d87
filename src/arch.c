/* One recipe per architecture, and the reading of hyper-parameters. */
#include "arch.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util.h"

static const dp_recipe g_recipes[] = {
    {
        /* Llama 2/3, TinyLlama, SmolLM2, Mistral-style models. */
        .arch = "llama",
        .qkv_bias = 2, /* optional */
        .rope_freqs = 1,
        .act = DP_ACT_SILU,
        .rope_style = DP_ROPE_ADJACENT,
        .swa_from_file = 1, /* Mistral's window, where the file carries it */
    },
    {
        /* Qwen2 / Qwen2.5: biases on Q/K/V, NeoX RoPE, GQA. */
        .arch = "qwen2",
        .qkv_bias = 1,
        .act = DP_ACT_SILU,
        .rope_style = DP_ROPE_NEOX,
    },
    {
        /* Gemma 3: per-head q/k RMSNorm, sandwich norms, sqrt(n_embd)
         * embedding scale, GELU-tanh, 5 sliding layers then 1 global,
         * θ 10 000 on sliding layers and the file's θ on global ones. */
        .arch = "gemma3",
        .qk_norm = 1,
        .post_norms = 1,
        .embed_scale = 1,
        .act = DP_ACT_GELU_TANH,
        .rope_style = DP_ROPE_NEOX,
        .swa_period = 6,
        .rope_theta_local = 10000.0f,
        .sliding_window_default = 0, /* the file must say */
        /* 27B (62 layers): query_pre_attn_scalar 168 = n_embd/n_head; the
         * smaller sizes use head_dim */
        .attn_scale_embd_per_head_n_layer = 62,
    },
    {
        /* Qwen3 dense: per-head q/k RMSNorm (plain weights), no biases, NeoX
         * RoPE, GQA, head_dim from the file. */
        .arch = "qwen3",
        .qk_norm = 1,
        .act = DP_ACT_SILU,
        .rope_style = DP_ROPE_NEOX,
    },
    {
        /* Gemma 2: sandwich norms, sqrt(n_embd) embedding scale, GELU-tanh,
         * sliding (even) and global (odd) layers with one θ, soft-capped
         * attention scores and logits. */
        .arch = "gemma2",
        .post_norms = 1,
        .embed_scale = 1,
        .act = DP_ACT_GELU_TANH,
        .rope_style = DP_ROPE_NEOX,
        .swa_period = 2,
        .sliding_window_default = 4096,
        .attn_softcap_default = 50.0f,
        .final_softcap_default = 30.0f,
        /* 27B (46 layers): query_pre_attn_scalar 144 = n_embd/n_head */
        .attn_scale_embd_per_head_n_layer = 46,
    },
    {
        /* Phi-3 / Phi-4-mini: fused QKV and gate/up, NeoX RoPE (partial
         * through rope.dimension_count), LongRoPE factors, the window of
         * the file on every layer. */
        .arch = "phi3",
        .fused_qkv = 1,
        .fused_gate_up = 1,
        .longrope = 1,
        .act = DP_ACT_SILU,
        .rope_style = DP_ROPE_NEOX,
        .swa_from_file = 1,
    },
    {
        /* SmolLM3: the llama layout (converter-permuted Q/K), every fourth
         * layer without RoPE. */
        .arch = "smollm3",
        .act = DP_ACT_SILU,
        .rope_style = DP_ROPE_ADJACENT,
        .nope_period = 4,
    },
};

const dp_recipe *dp_recipe_find(const char *arch) {
    for (size_t i = 0; i < sizeof g_recipes / sizeof g_recipes[0]; i++)
        if (strcmp(g_recipes[i].arch, arch) == 0) return &g_recipes[i];
    return NULL;
}

const char *dp_recipe_list(void) { return "llama, qwen2, qwen3, gemma2, gemma3, phi3, smollm3"; }

/* ------------------------------------------------------------ hparams */

static int get_req_int(const gguf_file *f, const char *arch, const char *suffix, int lo, int hi, int *out) {
    char key[256];
    int64_t v;
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return dp_set_error(DP_ERR_FORMAT, "%s: missing required key '%s'", f->path, key);
    if (!gguf_get_int(f, key, &v))
        return dp_set_error(DP_ERR_FORMAT, "%s: key '%s' must be an integer, found %s", f->path, key,
                            gguf_vtype_name(kv->type));
    if (v < lo || v > hi)
        return dp_set_error(DP_ERR_FORMAT, "%s: key '%s' = %lld is out of range [%d, %d]", f->path, key,
                            (long long)v, lo, hi);
    *out = (int)v;
    return 0;
}

static int get_opt_int(const gguf_file *f, const char *arch, const char *suffix, int lo, int hi, int def,
                       int *out) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (!gguf_find_kv(f, key)) {
        *out = def;
        return 0;
    }
    return get_req_int(f, arch, suffix, lo, hi, out);
}

static int get_float(const gguf_file *f, const char *arch, const char *suffix, int required, double def,
                     double *out) {
    char key[256];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) {
        if (required) return dp_set_error(DP_ERR_FORMAT, "%s: missing required key '%s'", f->path, key);
        *out = def;
        return 0;
    }
    if (!gguf_get_float(f, key, out) || !isfinite(*out))
        return dp_set_error(DP_ERR_FORMAT, "%s: key '%s' must be a finite number", f->path, key);
    return 0;
}

/* attention.rope_pattern, where the file has it: one flag per layer, 1 for
 * the layers that rotate (the converter's form of HF's no_rope_layers). */
static int rope_pattern(dp_hparams *hp, const char *arch, const gguf_file *f) {
    char key[256];
    snprintf(key, sizeof key, "%s.attention.rope_pattern", arch);
    const gguf_kv *kv = gguf_find_kv(f, key);
    if (!kv) return 0;
    if (kv->type != GGUF_ARRAY || kv->arr_type == GGUF_STRING || kv->arr_type == GGUF_ARRAY ||
        kv->n != (uint64_t)hp->n_layer)
        return dp_set_error(DP_ERR_FORMAT, "%s: key '%s' must be an array of %d flags", f->path, key, hp->n_layer);
    for (int i = 0; i < hp->n_layer; i++) hp->layers[i].rope = gguf_arr_num(kv, (uint64_t)i) != 0;
    return 0;
}

int dp_hparams_load(dp_hparams *hp, const dp_recipe *r, const gguf_file *f) {
    const char *a = r->arch;
    memset(hp, 0, sizeof *hp);
    const int BIG = 1 << 20;
    if (get_req_int(f, a, "embedding_length", 1, BIG, &hp->n_embd) ||
        get_req_int(f, a, "block_count", 1, 4096, &hp->n_layer) ||
        get_req_int(f, a, "feed_forward_length", 1, BIG, &hp->n_ff) ||
        get_req_int(f, a, "attention.head_count", 1, 4096, &hp->n_head) ||
        get_req_int(f, a, "context_length", 1, 1 << 24, &hp->n_ctx_train))
        return DP_ERR_FORMAT;
    if (get_opt_int(f, a, "attention.head_count_kv", 1, hp->n_head, hp->n_head, &hp->n_head_kv)) return DP_ERR_FORMAT;
    if (hp->n_head % hp->n_head_kv)
        return dp_set_error(DP_ERR_FORMAT, "%s: head_count %d is not a multiple of head_count_kv %d", f->path,
                            hp->n_head, hp->n_head_kv);
    int def_hd = hp->n_embd / hp->n_head;
    if (get_opt_int(f, a, "attention.key_length", 1, 65536, def_hd, &hp->head_dim) ||
        get_opt_int(f, a, "attention.value_length", 1, 65536, hp->head_dim, &hp->v_head_dim))
        return DP_ERR_FORMAT;
    if (hp->v_head_dim != hp->head_dim)
        return dp_set_error(DP_ERR_FORMAT, "%s: key_length %d != value_length %d is not supported", f->path,
                            hp->head_dim, hp->v_head_dim);
    if (hp->head_dim % 2)
        return dp_set_error(DP_ERR_FORMAT, "%s: head dimension %d must be even", f->path, hp->head_dim);
    if (get_opt_int(f, a, "rope.dimension_count", 2, hp->head_dim, hp->head_dim, &hp->n_rot)) return DP_ERR_FORMAT;
    if (hp->n_rot % 2) return dp_set_error(DP_ERR_FORMAT, "%s: rope.dimension_count must be even", f->path);
    /* an embedding model's pooling (llama.cpp's key and values: 1 mean, 2 first token, 3 last, 4 rank) */
    if (get_opt_int(f, a, "pooling_type", 0, 4, 0, &hp->pooling)) return DP_ERR_FORMAT;

    double eps, theta, scale = 1.0;
    if (get_float(f, a, "attention.layer_norm_rms_epsilon", 1, 0, &eps) ||
        get_float(f, a, "rope.freq_base", 0, 10000.0, &theta))
        return DP_ERR_FORMAT;
    if (!(eps > 0 && eps < 1)) return dp_set_error(DP_ERR_FORMAT, "%s: RMS norm epsilon %g is invalid", f->path, eps);
    if (!(theta > 0)) return dp_set_error(DP_ERR_FORMAT, "%s: rope.freq_base %g is invalid", f->path, theta);
    hp->eps = (float)eps;
    hp->rope_theta = (float)theta;

    /* Linear RoPE scaling (positions divided by the factor). */
    char key[256];
    gguf_str st;
    snprintf(key, sizeof key, "%s.rope.scaling.type", a);
    if (gguf_get_str(f, key, &st) && !(st.len == 4 && memcmp(st.ptr, "none", 4) == 0)) {
        if (st.len == 6 && memcmp(st.ptr, "linear", 6) == 0) {
            if (get_float(f, a, "rope.scaling.factor", 1, 1.0, &scale)) return DP_ERR_FORMAT;
            if (!(scale > 0)) return dp_set_error(DP_ERR_FORMAT, "%s: rope.scaling.factor must be > 0", f->path);
        } else {
            return dp_set_error(DP_ERR_FORMAT, "%s: unsupported rope.scaling.type '%.*s'", f->path, (int)st.len,
                                st.ptr);
        }
    }
    hp->rope_freq_scale = (float)(1.0 / scale);

    if (r->swa_period) {
        int def = r->sliding_window_default;
        if (def) {
            if (get_opt_int(f, a, "attention.sliding_window", 1, 1 << 24, def, &hp->sliding_window))
                return DP_ERR_FORMAT;
        } else if (get_req_int(f, a, "attention.sliding_window", 1, 1 << 24, &hp->sliding_window))
            return DP_ERR_FORMAT;
    } else if (r->swa_from_file &&
               get_opt_int(f, a, "attention.sliding_window", 0, 1 << 24, 0, &hp->sliding_window))
        return DP_ERR_FORMAT;

    double cap_attn = r->attn_softcap_default, cap_final = r->final_softcap_default;
    if ((cap_attn && get_float(f, a, "attn_logit_softcapping", 0, cap_attn, &cap_attn)) ||
        (cap_final && get_float(f, a, "final_logit_softcapping", 0, cap_final, &cap_final)))
        return DP_ERR_FORMAT;
    if (cap_attn < 0 || cap_final < 0)
        return dp_set_error(DP_ERR_FORMAT, "%s: soft-capping values must be positive", f->path);
    hp->attn_softcap = (float)cap_attn;
    hp->final_softcap = (float)cap_final;

    double attn_factor = 1.0;
    hp->n_ctx_orig = hp->n_ctx_train;
    if (r->longrope && (get_opt_int(f, a, "rope.scaling.original_context_length", 1, 1 << 24, hp->n_ctx_train,
                                    &hp->n_ctx_orig) ||
                        get_float(f, a, "rope.scaling.attn_factor", 0, 1.0, &attn_factor)))
        return DP_ERR_FORMAT;
    if (!(attn_factor > 0)) return dp_set_error(DP_ERR_FORMAT, "%s: rope.scaling.attn_factor must be > 0", f->path);
    hp->rope_attn_factor = (float)attn_factor;

    int per_head = r->attn_scale_embd_per_head_n_layer && hp->n_layer == r->attn_scale_embd_per_head_n_layer;
    hp->attn_scale = 1.0f / sqrtf((float)(per_head ? hp->n_embd / hp->n_head : hp->head_dim));
    hp->embed_scale = r->embed_scale ? sqrtf((float)hp->n_embd) : 1.0f;

    hp->layers = dp_calloc((size_t)hp->n_layer, sizeof(dp_layer_cfg));
    if (!hp->layers) return DP_ERR_NOMEM;
    for (int i = 0; i < hp->n_layer; i++) {
        dp_layer_cfg *L = &hp->layers[i];
        L->sliding = r->swa_period > 0 && (i + 1) % r->swa_period != 0;
        L->window = L->sliding || r->swa_from_file ? hp->sliding_window : 0;
        L->rope_theta = L->sliding && r->rope_theta_local > 0 ? r->rope_theta_local : hp->rope_theta;
        L->rope_freq_scale = L->sliding ? 1.0f : hp->rope_freq_scale;
        L->rope = !(r->nope_period && (i + 1) % r->nope_period == 0);
    }
    return rope_pattern(hp, a, f);
}

int dp_hparams_rope(dp_hparams *hp, const float *rope_freqs, const float *long_factors) {
    const int half = hp->n_rot / 2, sets = long_factors ? 2 : 1;
    free(hp->rope_inv_freq);
    hp->rope_inv_freq = dp_calloc((size_t)(sets * hp->n_rot), sizeof(float));
    if (!hp->rope_inv_freq) return DP_ERR_NOMEM;
    hp->rope_long_factors = long_factors != NULL;
    /* global layers use hp's theta and scale, sliding layers their own (the
     * recipe's local theta, unscaled); the second set divides by the long
     * factors instead */
    float theta[2] = {hp->rope_theta, hp->rope_theta}, scale[2] = {hp->rope_freq_scale, 1.0f};
    for (int l = 0; l < hp->n_layer; l++)
        if (hp->layers[l].sliding) theta[1] = hp->layers[l].rope_theta, scale[1] = hp->layers[l].rope_freq_scale;
    for (int s = 0; s < sets; s++)
        for (int t = 0; t < 2; t++)
            for (int i = 0; i < half; i++) {
                const float *div = s ? long_factors : rope_freqs;
                float f = 1.0f / powf(theta[t], (float)(2 * i) / (float)hp->n_rot);
                if (div) f /= div[i];
                hp->rope_inv_freq[(2 * s + t) * half + i] = f * scale[t];
            }
    for (int l = 0; l < hp->n_layer; l++) hp->layers[l].inv_freq = hp->rope_inv_freq + (hp->layers[l].sliding ? half : 0);
    return 0;
}

const float *dp_hparams_rope_tables(const dp_hparams *hp, int n_pos) {
    return hp->rope_inv_freq + (hp->rope_long_factors && n_pos > hp->n_ctx_orig ? hp->n_rot : 0);
}

void dp_hparams_free(dp_hparams *hp) {
    free(hp->layers);
    hp->layers = NULL;
    free(hp->rope_inv_freq);
    hp->rope_inv_freq = NULL;
}

/* ------------------------------------------------------------- faults */

static const struct {
    const char *name;
    int bit;
} g_fault_names[] = {
    {"no_qk_norm_offset", DP_FAULT_NO_QK_NORM_OFFSET},
    {"no_embed_scale", DP_FAULT_NO_EMBED_SCALE},
    {"no_post_norms", DP_FAULT_NO_POST_NORMS},
    {"rope_wrong_style", DP_FAULT_ROPE_WRONG_STYLE},
    {"decode_mask_off_by_one", DP_FAULT_DECODE_MASK_OFF_BY_ONE},
    {"no_softcap", DP_FAULT_NO_SOFTCAP},
};

void dp_faults_hparams(dp_hparams *hp, const dp_recipe *r, int mask) {
    hp->embed_scale = r->embed_scale ? sqrtf((float)hp->n_embd) : 1.0f;
    /* soft-capping left out: attention scores and logits uncapped */
    if (mask & DP_FAULT_NO_SOFTCAP) hp->attn_softcap = hp->final_softcap = 0.0f;
}

int dp_faults_apply(dp_recipe *r, const char *spec) {
    int mask = 0;
    if (!spec || !*spec) return 0;
    const char *p = spec;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (size_t i = 0; i < sizeof g_fault_names / sizeof g_fault_names[0]; i++)
            if (strlen(g_fault_names[i].name) == n && memcmp(g_fault_names[i].name, p, n) == 0) {
                mask |= g_fault_names[i].bit;
                found = 1;
            }
        if (!found && n) return dp_set_error(DP_ERR_ARG, "DOPPLER_FAULT: unknown fault '%.*s'", (int)n, p);
        p += n;
        if (*p == ',') p++;
    }
    /* GGUF Gemma q/k norm weights hold 1 + w; the fault drops the 1. */
    if (mask & DP_FAULT_NO_QK_NORM_OFFSET) r->qk_norm_offset -= 1.0f;
    if (mask & DP_FAULT_NO_EMBED_SCALE) r->embed_scale = 0;
    if (mask & DP_FAULT_NO_POST_NORMS) r->post_norms = 0;
    if (mask & DP_FAULT_ROPE_WRONG_STYLE)
        r->rope_style = r->rope_style == DP_ROPE_NEOX ? DP_ROPE_ADJACENT : DP_ROPE_NEOX;
    return mask;
}

void dp_faults_names(int mask, char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof g_fault_names / sizeof g_fault_names[0]; i++)
        if ((mask & g_fault_names[i].bit) && n < cap)
            n += (size_t)snprintf(buf + n, cap - n, "%s%s", n ? "," : "", g_fault_names[i].name);
}
