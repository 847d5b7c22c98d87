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
};

const dp_recipe *dp_recipe_find(const char *arch) {
    for (size_t i = 0; i < sizeof g_recipes / sizeof g_recipes[0]; i++)
        if (strcmp(g_recipes[i].arch, arch) == 0) return &g_recipes[i];
    return NULL;
}

const char *dp_recipe_list(void) { return "llama, qwen2, gemma3"; }

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
        if (def)
            get_opt_int(f, a, "attention.sliding_window", 1, 1 << 24, def, &hp->sliding_window);
        else if (get_req_int(f, a, "attention.sliding_window", 1, 1 << 24, &hp->sliding_window))
            return DP_ERR_FORMAT;
    }

    int per_head = r->attn_scale_embd_per_head_n_layer && hp->n_layer == r->attn_scale_embd_per_head_n_layer;
    hp->attn_scale = 1.0f / sqrtf((float)(per_head ? hp->n_embd / hp->n_head : hp->head_dim));
    hp->embed_scale = r->embed_scale ? sqrtf((float)hp->n_embd) : 1.0f;

    hp->layers = dp_calloc((size_t)hp->n_layer, sizeof(dp_layer_cfg));
    if (!hp->layers) return DP_ERR_NOMEM;
    for (int i = 0; i < hp->n_layer; i++) {
        dp_layer_cfg *L = &hp->layers[i];
        L->sliding = r->swa_period > 0 && (i + 1) % r->swa_period != 0;
        L->window = L->sliding ? hp->sliding_window : 0;
        L->rope_theta = L->sliding ? r->rope_theta_local : hp->rope_theta;
        L->rope_freq_scale = L->sliding ? 1.0f : hp->rope_freq_scale;
    }
    return 0;
}

int dp_hparams_rope(dp_hparams *hp, const float *rope_freqs) {
    const int half = hp->n_rot / 2;
    free(hp->rope_inv_freq);
    hp->rope_inv_freq = dp_calloc((size_t)hp->n_rot, sizeof(float));
    if (!hp->rope_inv_freq) return DP_ERR_NOMEM;
    /* global layers use hp's theta and scale, sliding layers their own (the
     * recipe's local theta, unscaled) */
    float theta[2] = {hp->rope_theta, hp->rope_theta}, scale[2] = {hp->rope_freq_scale, 1.0f};
    for (int l = 0; l < hp->n_layer; l++)
        if (hp->layers[l].sliding) theta[1] = hp->layers[l].rope_theta, scale[1] = hp->layers[l].rope_freq_scale;
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < half; i++) {
            float f = 1.0f / powf(theta[t], (float)(2 * i) / (float)hp->n_rot);
            if (rope_freqs) f /= rope_freqs[i];
            hp->rope_inv_freq[t * half + i] = f * scale[t];
        }
    for (int l = 0; l < hp->n_layer; l++) hp->layers[l].inv_freq = hp->rope_inv_freq + (hp->layers[l].sliding ? half : 0);
    return 0;
}

void dp_hparams_free(dp_hparams *hp) {
    free(hp->layers);
    hp->layers = NULL;
    free(hp->rope_inv_freq);
    hp->rope_inv_freq = NULL;
}

/* ------------------------------------------------------------- faults */

int dp_faults_apply(dp_recipe *r, const char *spec) {
    static const struct {
        const char *name;
        int bit;
    } names[] = {
        {"no_qk_norm_offset", DP_FAULT_NO_QK_NORM_OFFSET},
        {"no_embed_scale", DP_FAULT_NO_EMBED_SCALE},
        {"no_post_norms", DP_FAULT_NO_POST_NORMS},
        {"rope_wrong_style", DP_FAULT_ROPE_WRONG_STYLE},
        {"decode_mask_off_by_one", DP_FAULT_DECODE_MASK_OFF_BY_ONE},
    };
    int mask = 0;
    if (!spec || !*spec) return 0;
    const char *p = spec;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        int found = 0;
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            if (strlen(names[i].name) == n && memcmp(names[i].name, p, n) == 0) {
                mask |= names[i].bit;
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
