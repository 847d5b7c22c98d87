/* dp_synth: synthetic GGUF models with the exact tensor names, shapes,
 * per-tensor types and metadata of real ones, and random weights.
 *
 * Per-tensor types follow llama.cpp's quantization mixes (facts learnt from
 * llama_tensor_get_type; see BENCHMARKS.md "Synthetic models"):
 *  - 1-D tensors (norms, biases, rope_freqs) stay F32.
 *  - The LM head (output.weight, or token_embd.weight when the embeddings are
 *    tied) is Q8_0 for q8_0, else Q6_K.
 *  - q4_k_m / q5_k_m: attn_v and ffn_down of layer i are Q6_K when
 *    use_more_bits(i, n) = i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2.
 *    q4_k_s: attn_v of layers 0-3 and ffn_down of layers < n/8 are Q5_K.
 *  - q3_k_m: attn_v is Q5_K in layers 0-1, else Q4_K; ffn_down Q5_K in
 *    layers < n/16, else Q4_K; attn_output Q4_K.
 *  - q2_k: attn_v is Q4_K where 4 or more query heads share a KV head, else
 *    Q3_K; ffn_down and attn_output Q3_K.
 *  - The IQ2 / IQ3 mixes are listed at iq_matrix_type.
 *  - Everything else gets the base type (Q4_K for q4_k_*, Q5_K for q5_k_m,
 *    Q3_K for q3_k_m, Q2_K for q2_k).
 *  - A row length that is not a multiple of the type's block falls back:
 *    Q4_K -> Q5_0, Q5_K -> Q5_1, Q6_K -> Q8_0, Q2_K / Q3_K -> Q4_0, IQ2_*,
 *    IQ3_* and IQ4_XS -> IQ4_NL (then F16 if still not).
 * For Gemma 3 270M Q4_K_M this gives exactly the real file's table.
 *
 * Random weights: N(0, 0.02) for matrices, 1 + N(0, 0.05) for norms,
 * N(0, 0.1) for biases. Quantized blocks come from a pool of blocks made by
 * dp_quantize_row from random normals; every block of every row picks a
 * random pool block (so rows are distinct and the scales are those of real
 * quantization), which writes gigabytes at disk speed. IQ2_XXS, IQ2_XS,
 * IQ2_S, IQ3_XXS and IQ3_S have no quantizer here: their pools are random
 * valid blocks scaled to the same std (pool_random_blocks). */
#include "synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "util.h"

/* ---------------------------------------------------------------- presets */

/* The fields every preset sets, in order (designated, so that the newer
 * families' fields default to 0). */
#define PRESET(a, p, nm, lb, e, f, l, h, kv, hd, v, ctx, win, th, ep, ti, bi, rf, hdk, vk, vs)                       \
    .arch = a, .preset = p, .name = nm, .size_label = lb, .n_embd = e, .n_ff = f, .n_layer = l, .n_head = h,       \
    .n_head_kv = kv, .head_dim = hd, .n_vocab = v, .n_ctx_train = ctx, .sliding_window = win, .rope_theta = th,    \
    .eps = ep, .tied = ti, .qkv_bias = bi, .llama3_rope_freqs = rf, .head_dim_keys = hdk, .vocab_keys = vk, .vocab = vs

static const synth_preset g_presets[] = {
    /* arch   preset  name  label  embd  ff  layers heads kv hd vocab ctx window theta eps tied bias rf hdk vk vocab */
    {PRESET("gemma3", "tiny", "Gemma 3 tiny (synthetic)", "tiny", 320, 512, 7, 4, 1, 64, 1024, 4096, 16, 1e6f, 1e-6f,
     1, 0, 0, 1, 0, SYNTH_VOCAB_SPM)},
    {PRESET("gemma3", "270m", "Gemma 3 270m (synthetic)", "270M", 640, 2048, 18, 4, 1, 256, 262144, 32768, 512, 1e6f,
     1e-6f, 1, 0, 0, 1, 0, SYNTH_VOCAB_SPM)},
    {PRESET("gemma3", "1b", "Gemma 3 1b (synthetic)", "1B", 1152, 6912, 26, 4, 1, 256, 262144, 32768, 512, 1e6f, 1e-6f,
     1, 0, 0, 1, 0, SYNTH_VOCAB_SPM)},
    {PRESET("qwen2", "tiny", "Qwen2.5 tiny (synthetic)", "tiny", 128, 384, 3, 4, 2, 32, 1024, 4096, 0, 1e6f, 1e-6f, 1,
     1, 0, 0, 0, SYNTH_VOCAB_GPT2)},
    {PRESET("qwen2", "0.5b", "Qwen2.5 0.5B (synthetic)", "0.5B", 896, 4864, 24, 14, 2, 64, 151936, 32768, 0, 1e6f,
     1e-6f, 1, 1, 0, 0, 0, SYNTH_VOCAB_GPT2)},
    {PRESET("qwen2", "1.5b", "Qwen2.5 1.5B (synthetic)", "1.5B", 1536, 8960, 28, 12, 2, 128, 151936, 32768, 0, 1e6f,
     1e-6f, 1, 1, 0, 0, 0, SYNTH_VOCAB_GPT2)},
    {PRESET("qwen2", "3b", "Qwen2.5 3B (synthetic)", "3B", 2048, 11008, 36, 16, 2, 128, 151936, 32768, 0, 1e6f, 1e-6f,
     1, 1, 0, 0, 0, SYNTH_VOCAB_GPT2)},
    {PRESET("qwen2", "7b", "Qwen2.5 7B (synthetic)", "7B", 3584, 18944, 28, 28, 4, 128, 152064, 32768, 0, 1e6f, 1e-6f,
     0, 1, 0, 0, 0, SYNTH_VOCAB_GPT2)},
    {PRESET("llama", "tiny", "Llama tiny (synthetic)", "tiny", 256, 768, 3, 4, 2, 64, 1024, 4096, 0, 10000.0f, 1e-5f, 0,
     0, 0, 1, 1, SYNTH_VOCAB_SPM)},
    {PRESET("llama", "1b", "Llama 3.2 1B (synthetic)", "1B", 2048, 8192, 16, 32, 8, 64, 128256, 131072, 0, 500000.0f,
     1e-5f, 1, 0, 1, 1, 1, SYNTH_VOCAB_GPT2)},
    {PRESET("llama", "3b", "Llama 3.2 3B (synthetic)", "3B", 3072, 8192, 28, 24, 8, 128, 128256, 131072, 0, 500000.0f,
     1e-5f, 1, 0, 1, 1, 1, SYNTH_VOCAB_GPT2)},
    {PRESET("llama", "8b", "Llama 3.1 8B (synthetic)", "8B", 4096, 14336, 32, 32, 8, 128, 128256, 131072, 0, 500000.0f,
     1e-5f, 0, 0, 1, 1, 1, SYNTH_VOCAB_GPT2), .llama3_factor = 8},
#define QWEN3(p, nm, lb, e, f, l, h, kv, t)                                                                     \
    {PRESET("qwen3", p, nm, lb, e, f, l, h, kv, 128, 151936, 40960, 0, 1e6f, 1e-6f, t, 0, 0, 1, 0, SYNTH_VOCAB_GPT2), \
     .qk_norm = 1}
    {"qwen3", "tiny", "Qwen3 tiny (synthetic)", "tiny", 128, 384, 3, 4, 2, 64, 1024, 4096, 0, 1e6f, 1e-6f, 0, 0, 0,
     1, 0, SYNTH_VOCAB_GPT2, .qk_norm = 1},
    QWEN3("0.6b", "Qwen3 0.6B (synthetic)", "0.6B", 1024, 3072, 28, 16, 8, 1),
    QWEN3("1.7b", "Qwen3 1.7B (synthetic)", "1.7B", 2048, 6144, 28, 16, 8, 1),
    QWEN3("4b", "Qwen3 4B (synthetic)", "4B", 2560, 9728, 36, 32, 8, 1),
    QWEN3("8b", "Qwen3 8B (synthetic)", "8B", 4096, 12288, 36, 32, 8, 0),
#undef QWEN3
    {PRESET("gemma2", "tiny", "Gemma 2 tiny (synthetic)", "tiny", 256, 512, 4, 4, 2, 64, 1024, 8192, 16, 10000.0f, 1e-6f,
     1, 0, 0, 1, 0, SYNTH_VOCAB_SPM), .post_norms = 1, .attn_softcap = 50.0f, .final_softcap = 30.0f},
    {PRESET("gemma2", "2b", "Gemma 2 2b (synthetic)", "2B", 2304, 9216, 26, 8, 4, 256, 256000, 8192, 4096, 10000.0f,
     1e-6f, 1, 0, 0, 1, 0, SYNTH_VOCAB_SPM), .post_norms = 1, .attn_softcap = 50.0f, .final_softcap = 30.0f},
    {PRESET("phi3", "tiny", "Phi-3 tiny (synthetic)", "tiny", 256, 512, 3, 4, 4, 64, 1024, 4096, 0, 10000.0f, 1e-5f, 0,
     0, 0, 0, 0, SYNTH_VOCAB_SPM), .fused = 1, .n_rot = 48, .n_ctx_orig = 1024},
    {PRESET("phi3", "mini", "Phi-3 mini 4k (synthetic)", "mini", 3072, 8192, 32, 32, 32, 96, 32064, 4096, 2047, 10000.0f,
     1e-5f, 0, 0, 0, 0, 0, SYNTH_VOCAB_SPM), .fused = 1},
    {PRESET("phi3", "4-mini", "Phi-4 mini (synthetic)", "4-mini", 3072, 8192, 32, 24, 8, 128, 200064, 131072, 0,
     10000.0f, 1e-5f, 1, 0, 0, 0, 0, SYNTH_VOCAB_GPT2), .fused = 1, .n_rot = 96, .n_ctx_orig = 4096},
    {PRESET("smollm3", "tiny", "SmolLM3 tiny (synthetic)", "tiny", 256, 768, 4, 4, 2, 64, 1024, 4096, 0, 5e6f, 1e-6f, 1, 0,
     0, 0, 1, SYNTH_VOCAB_GPT2)},
    {PRESET("smollm3", "3b", "SmolLM3 3B (synthetic)", "3B", 2048, 11008, 36, 16, 4, 128, 128256, 65536, 0, 5e6f, 1e-6f,
     1, 0, 0, 0, 1, SYNTH_VOCAB_GPT2)},
};
#define N_PRESETS (int)(sizeof g_presets / sizeof g_presets[0])

/* "arch: preset preset ...", a line per architecture, from the table. */
const char *dp_synth_presets(void) {
    static char buf[512];
    if (buf[0]) return buf;
    size_t n = 0;
    for (int i = 0; i < N_PRESETS && n < sizeof buf; i++) {
        if (i == 0 || strcmp(g_presets[i - 1].arch, g_presets[i].arch) != 0)
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s:", i ? "\n" : "", g_presets[i].arch);
        if (n < sizeof buf) n += (size_t)snprintf(buf + n, sizeof buf - n, " %s", g_presets[i].preset);
    }
    return buf;
}

/* ------------------------------------------------------------ type mixes */

typedef struct {
    const char *name;
    int base;        /* DP_TYPE_* of most matrices */
    int file_type;   /* llama.cpp's llama_ftype */
    int mix;         /* MIX_* */
} synth_ftype;

enum { MIX_FLOAT = 0, MIX_PLAIN, MIX_K_S, MIX_K_M, MIX_IQ4, MIX_Q3_K_M, MIX_Q2_K,
       /* the IQ2 / IQ3 mixes: iq2_xxs and iq2_xs; iq2_s and iq2_m; then one each */
       MIX_IQ2, MIX_IQ2_S, MIX_IQ3_XXS, MIX_IQ3_XS, MIX_IQ3_S, MIX_IQ3_M };

static const synth_ftype g_ftypes[] = {
    {"f32", DP_TYPE_F32, 0, MIX_FLOAT},     {"f16", DP_TYPE_F16, 1, MIX_FLOAT},
    {"bf16", DP_TYPE_BF16, 32, MIX_FLOAT},  {"q4_0", DP_TYPE_Q4_0, 2, MIX_PLAIN},
    {"q4_1", DP_TYPE_Q4_1, 3, MIX_PLAIN},   {"q5_0", DP_TYPE_Q5_0, 8, MIX_PLAIN},
    {"q5_1", DP_TYPE_Q5_1, 9, MIX_PLAIN},   {"q8_0", DP_TYPE_Q8_0, 7, MIX_PLAIN},
    {"q6_k", DP_TYPE_Q6_K, 18, MIX_PLAIN},  {"q4_k_s", DP_TYPE_Q4_K, 14, MIX_K_S},
    {"q4_k_m", DP_TYPE_Q4_K, 15, MIX_K_M},  {"q5_k_m", DP_TYPE_Q5_K, 17, MIX_K_M},
    {"iq4_nl", DP_TYPE_IQ4_NL, 25, MIX_IQ4}, {"iq4_xs", DP_TYPE_IQ4_XS, 30, MIX_IQ4},
    {"q3_k_m", DP_TYPE_Q3_K, 12, MIX_Q3_K_M}, {"q2_k", DP_TYPE_Q2_K, 10, MIX_Q2_K},
    /* base types from llama_ftype_get_default_type: iq2_s's is IQ2_XS, and
     * iq3_xs and iq3_m are IQ3_S files with other tensors changed */
    {"iq2_xxs", DP_TYPE_IQ2_XXS, 19, MIX_IQ2}, {"iq2_xs", DP_TYPE_IQ2_XS, 20, MIX_IQ2},
    {"iq2_s", DP_TYPE_IQ2_XS, 28, MIX_IQ2_S},   {"iq2_m", DP_TYPE_IQ2_S, 29, MIX_IQ2_S},
    {"iq3_xxs", DP_TYPE_IQ3_XXS, 23, MIX_IQ3_XXS}, {"iq3_xs", DP_TYPE_IQ3_S, 22, MIX_IQ3_XS},
    {"iq3_s", DP_TYPE_IQ3_S, 26, MIX_IQ3_S},    {"iq3_m", DP_TYPE_IQ3_S, 27, MIX_IQ3_M},
};
#define N_FTYPES (int)(sizeof g_ftypes / sizeof g_ftypes[0])

const char *dp_synth_types(void) {
    return "f32 f16 bf16 q4_0 q4_1 q5_0 q5_1 q8_0 q6_k q4_k_s q4_k_m q5_k_m iq4_nl iq4_xs q3_k_m q2_k iq2_xxs "
           "iq2_xs iq2_s iq2_m iq3_xxs iq3_xs iq3_s iq3_m";
}

/* llama.cpp's tensor categories; attn_qkv counts as attn_v (category_is_attn_v) */
enum { CAT_OTHER = 0, CAT_OUTPUT, CAT_TOKEN_EMBD, CAT_ATTN_V, CAT_FFN_DOWN, CAT_ATTN_OUT, CAT_ATTN_QK, CAT_FFN_GATE_UP };

static int use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

static int fallback_type(int type, int64_t ne0) {
    const dp_type_traits *tt = dp_type_get(type);
    if (ne0 % tt->block_size == 0) return type;
    int fb = type;
    switch (type) {
    case DP_TYPE_Q2_K:
    case DP_TYPE_Q3_K: fb = DP_TYPE_Q4_0; break;
    case DP_TYPE_Q4_K: fb = DP_TYPE_Q5_0; break;
    case DP_TYPE_Q5_K: fb = DP_TYPE_Q5_1; break;
    case DP_TYPE_Q6_K: fb = DP_TYPE_Q8_0; break;
    case DP_TYPE_IQ2_XXS:
    case DP_TYPE_IQ2_XS:
    case DP_TYPE_IQ2_S:
    case DP_TYPE_IQ3_XXS:
    case DP_TYPE_IQ3_S:
    case DP_TYPE_IQ4_XS: fb = DP_TYPE_IQ4_NL; break;
    default: break;
    }
    if (ne0 % dp_type_get(fb)->block_size) fb = DP_TYPE_F16;
    return fb;
}

/* The IQ2 / IQ3 mixes, from llama_tensor_get_type_impl without an importance
 * matrix (the rules for MoE, Falcon and 70B models are left out: no preset is
 * one). "n/8" is layer < n_layer/8; the LM head is decided by the caller.
 *  - iq2_xxs / iq2_xs (bump Q2_K) and iq2_s / iq2_m (bump IQ3_S): attn_v is
 *    Q4_K where n_gqa >= 4, else the bump; ffn_down of layers < n/8 the bump;
 *    attn_output IQ3_S for iq2_s / iq2_m; an untied token_embd the bump.
 *  - iq3_xxs: attn_v Q4_K where n_gqa >= 4, else IQ3_S; attn_q / attn_k
 *    IQ2_S; ffn_down Q4_K in layers < n/8, else Q3_K; attn_output and an
 *    untied token_embd IQ3_S.
 *  - iq3_xs: attn_v Q4_K where n_gqa >= 4; attn_q / attn_k IQ3_XXS; ffn_gate
 *    / ffn_up IQ3_XXS in layers n/8 <= i < 7n/8.
 *  - iq3_s: attn_v Q4_K where n_gqa >= 4.
 *  - iq3_m: attn_v and attn_output Q4_K; ffn_down Q4_K in layers < n/8.
 * Everything else keeps the base type. (llama-quantize itself wants an
 * importance matrix for IQ2_*, IQ3_XXS targets; with one, iq3_xxs keeps
 * IQ3_XXS for attn_v where n_gqa < 4 and for ffn_down.) */
static int iq_matrix_type(const synth_ftype *ft, int cat, int layer, int n_layer, int n_gqa) {
    const int m = ft->mix, iq2 = m == MIX_IQ2 || m == MIX_IQ2_S, early = layer < n_layer / 8;
    const int bump = m == MIX_IQ2_S ? DP_TYPE_IQ3_S : DP_TYPE_Q2_K;
    switch (cat) {
    case CAT_TOKEN_EMBD: return iq2 ? bump : m == MIX_IQ3_XXS ? DP_TYPE_IQ3_S : ft->base;
    case CAT_ATTN_V:
        if (n_gqa >= 4 || m == MIX_IQ3_M) return DP_TYPE_Q4_K;
        return iq2 ? bump : DP_TYPE_IQ3_S;
    case CAT_ATTN_QK: return m == MIX_IQ3_XXS ? DP_TYPE_IQ2_S : m == MIX_IQ3_XS ? DP_TYPE_IQ3_XXS : ft->base;
    case CAT_FFN_DOWN:
        if (iq2) return early ? bump : ft->base;
        if (m == MIX_IQ3_XXS) return early ? DP_TYPE_Q4_K : DP_TYPE_Q3_K;
        return m == MIX_IQ3_M && early ? DP_TYPE_Q4_K : ft->base;
    case CAT_ATTN_OUT:
        if (m == MIX_IQ2_S || m == MIX_IQ3_XXS) return DP_TYPE_IQ3_S;
        return m == MIX_IQ3_M ? DP_TYPE_Q4_K : ft->base;
    case CAT_FFN_GATE_UP:
        return m == MIX_IQ3_XS && !early && layer < 7 * n_layer / 8 ? DP_TYPE_IQ3_XXS : ft->base;
    default: return ft->base;
    }
}

static int matrix_type(const synth_ftype *ft, int cat, int layer, int n_layer, int64_t ne0, int tied, int n_gqa) {
    if (ft->mix == MIX_FLOAT) return ft->base;
    int t = ft->base;
    if (cat == CAT_OUTPUT || (cat == CAT_TOKEN_EMBD && tied)) {
        /* iq2_* and iq3_xxs heads are Q5_K, the others Q6_K */
        int low = ft->mix == MIX_IQ2 || ft->mix == MIX_IQ2_S || ft->mix == MIX_IQ3_XXS;
        t = ft->base == DP_TYPE_Q8_0 || ne0 % dp_type_get(ft->base)->block_size ? DP_TYPE_Q8_0
            : low                                                               ? DP_TYPE_Q5_K
                                                                                : DP_TYPE_Q6_K;
    } else if (ft->mix >= MIX_IQ2) {
        t = iq_matrix_type(ft, cat, layer, n_layer, n_gqa);
    } else if (cat == CAT_ATTN_V) {
        if (ft->mix == MIX_IQ4 && n_gqa >= 4) t = DP_TYPE_Q5_K;
        else if (ft->mix == MIX_K_M && use_more_bits(layer, n_layer)) t = DP_TYPE_Q6_K;
        else if (ft->mix == MIX_K_S && layer < 4) t = DP_TYPE_Q5_K;
        else if (ft->mix == MIX_Q3_K_M) t = layer < 2 ? DP_TYPE_Q5_K : DP_TYPE_Q4_K;
        else if (ft->mix == MIX_Q2_K) t = n_gqa >= 4 ? DP_TYPE_Q4_K : DP_TYPE_Q3_K;
    } else if (cat == CAT_FFN_DOWN) {
        /* (llama.cpp's rule without an importance matrix) */
        if (ft->mix == MIX_IQ4 && layer < n_layer / 8) t = DP_TYPE_Q5_K;
        else if (ft->mix == MIX_K_M && use_more_bits(layer, n_layer)) t = DP_TYPE_Q6_K;
        else if (ft->mix == MIX_K_S && layer < n_layer / 8) t = DP_TYPE_Q5_K;
        else if (ft->mix == MIX_Q3_K_M) t = layer < n_layer / 16 ? DP_TYPE_Q5_K : DP_TYPE_Q4_K;
        else if (ft->mix == MIX_Q2_K) t = DP_TYPE_Q3_K;
    } else if (cat == CAT_ATTN_OUT) {
        if (ft->mix == MIX_Q3_K_M) t = DP_TYPE_Q4_K;
        else if (ft->mix == MIX_Q2_K) t = DP_TYPE_Q3_K;
    }
    return fallback_type(t, ne0);
}

/* ------------------------------------------------------------------ plan */

static int plan_add(synth_plan *pl, int *cap, const char *name, int kind, int type, int64_t ne0, int64_t ne1) {
    if (pl->n == *cap) {
        int c = *cap ? *cap * 2 : 64;
        synth_tensor *nt = realloc(pl->t, sizeof(synth_tensor) * (size_t)c);
        if (!nt) return dp_set_error(DP_ERR_NOMEM, "out of memory");
        pl->t = nt;
        *cap = c;
    }
    synth_tensor *t = &pl->t[pl->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->type = type;
    t->n_dims = ne1 ? 2 : 1;
    t->ne[0] = ne0;
    t->ne[1] = ne1 ? ne1 : 1;
    return 0;
}

int synth_plan_build(const dp_synth_params *p, synth_plan *pl) {
    memset(pl, 0, sizeof *pl);
    if (!p || !p->arch || !p->preset || !p->type)
        return dp_set_error(DP_ERR_ARG, "synth: arch, preset and type are required");
    const synth_preset *pr = NULL;
    int arch_known = 0;
    for (int i = 0; i < N_PRESETS; i++) {
        if (strcmp(g_presets[i].arch, p->arch) == 0) {
            arch_known = 1;
            if (strcmp(g_presets[i].preset, p->preset) == 0) pr = &g_presets[i];
        }
    }
    if (!arch_known)
        return dp_set_error(DP_ERR_ARG,
                            "synth: unknown architecture '%s' (known: gemma3, qwen2, llama, qwen3, gemma2, phi3, smollm3)",
                            p->arch);
    if (!pr) {
        char list[128] = "";
        for (int i = 0; i < N_PRESETS; i++)
            if (strcmp(g_presets[i].arch, p->arch) == 0) {
                strncat(list, " ", sizeof list - strlen(list) - 1);
                strncat(list, g_presets[i].preset, sizeof list - strlen(list) - 1);
            }
        return dp_set_error(DP_ERR_ARG, "synth: unknown preset '%s' for %s (known:%s)", p->preset, p->arch, list);
    }
    const synth_ftype *ft = NULL;
    for (int i = 0; i < N_FTYPES; i++)
        if (strcmp(g_ftypes[i].name, p->type) == 0) ft = &g_ftypes[i];
    if (!ft) return dp_set_error(DP_ERR_ARG, "synth: unknown type '%s' (known: %s)", p->type, dp_synth_types());
    if (p->n_layer < 0 || p->n_layer > 1024)
        return dp_set_error(DP_ERR_ARG, "synth: layer count %d is out of range [1, 1024]", p->n_layer);

    pl->pr = *pr;
    pl->type_name = ft->name;
    pl->file_type = ft->file_type;
    if (p->n_layer) pl->pr.n_layer = p->n_layer;
    if (p->vocab_from) {
        gguf_file *vf = gguf_open(p->vocab_from);
        if (!vf) return DP_ERR_FORMAT;
        const gguf_kv *kv = gguf_find_kv(vf, "tokenizer.ggml.tokens");
        if (!kv || kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || kv->n < 1 || kv->n > (1u << 24)) {
            gguf_close(vf);
            return dp_set_error(DP_ERR_FORMAT, "%s: no tokenizer.ggml.tokens array to copy", p->vocab_from);
        }
        /* real files may pad the embedding beyond the tokenizer (Qwen) */
        if ((int)kv->n > pl->pr.n_vocab) pl->pr.n_vocab = (int)kv->n;
        gguf_close(vf);
    }

    const synth_preset *P = &pl->pr;
    int64_t E = P->n_embd, Q = (int64_t)P->n_head * P->head_dim, KV = (int64_t)P->n_head_kv * P->head_dim;
    int64_t F = P->n_ff, V = P->n_vocab;
    int L = P->n_layer, cap = 0, rc = 0;
    int is_gemma3 = strcmp(P->arch, "gemma3") == 0;
    int qk_norm = is_gemma3 || P->qk_norm, post_norms = is_gemma3 || P->post_norms;
#define M(name, cat, l, ne0, ne1)                                                                               \
    rc |= plan_add(pl, &cap, name, SYNTH_MATRIX, matrix_type(ft, cat, l, L, ne0, P->tied, P->n_head / P->n_head_kv), \
                   ne0, ne1)
#define VEC(name, kind, ne0) rc |= plan_add(pl, &cap, name, kind, DP_TYPE_F32, ne0, 0)
    M("token_embd.weight", CAT_TOKEN_EMBD, 0, E, V);
    if (P->llama3_rope_freqs) VEC("rope_freqs.weight", SYNTH_ROPE_FREQS, P->head_dim / 2);
    if (P->n_ctx_orig) {
        VEC("rope_factors_long.weight", SYNTH_ROPE_LONG, P->n_rot / 2);
        VEC("rope_factors_short.weight", SYNTH_ROPE_SHORT, P->n_rot / 2);
    }
    char nm[64];
    for (int l = 0; l < L && !rc; l++) {
#define N(suffix) (snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix), nm)
        VEC(N("attn_norm.weight"), SYNTH_NORM, E);
        if (P->fused) {
            /* llama.cpp quantizes attn_qkv by attn_v's rules */
            M(N("attn_qkv.weight"), CAT_ATTN_V, l, E, Q + 2 * KV);
        } else {
            M(N("attn_q.weight"), CAT_ATTN_QK, l, E, Q);
            if (P->qkv_bias) VEC(N("attn_q.bias"), SYNTH_BIAS, Q);
            M(N("attn_k.weight"), CAT_ATTN_QK, l, E, KV);
            if (P->qkv_bias) VEC(N("attn_k.bias"), SYNTH_BIAS, KV);
            M(N("attn_v.weight"), CAT_ATTN_V, l, E, KV);
            if (P->qkv_bias) VEC(N("attn_v.bias"), SYNTH_BIAS, KV);
        }
        M(N("attn_output.weight"), CAT_ATTN_OUT, l, Q, E);
        if (qk_norm) {
            VEC(N("attn_q_norm.weight"), SYNTH_NORM, P->head_dim);
            VEC(N("attn_k_norm.weight"), SYNTH_NORM, P->head_dim);
        }
        if (post_norms) VEC(N("post_attention_norm.weight"), SYNTH_NORM, E);
        VEC(N("ffn_norm.weight"), SYNTH_NORM, E);
        if (!P->fused) M(N("ffn_gate.weight"), CAT_FFN_GATE_UP, l, E, F);
        M(N("ffn_up.weight"), CAT_FFN_GATE_UP, l, E, P->fused ? 2 * F : F);
        M(N("ffn_down.weight"), CAT_FFN_DOWN, l, F, E);
        if (post_norms) VEC(N("post_ffw_norm.weight"), SYNTH_NORM, E);
#undef N
    }
    VEC("output_norm.weight", SYNTH_NORM, E);
    if (!P->tied) M("output.weight", CAT_OUTPUT, L, E, V);
#undef M
#undef VEC
    if (rc) {
        synth_plan_free(pl);
        return DP_ERR_NOMEM;
    }
    return DP_OK;
}

void synth_plan_free(synth_plan *pl) {
    free(pl->t);
    pl->t = NULL;
    pl->n = 0;
}

/* ------------------------------------------------------------ randomness */

typedef struct {
    uint64_t s[4];
    float spare;               /* rng_normal's second value of a pair */
    int has_spare;
} rng;

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void rng_seed(rng *r, uint64_t seed, uint64_t stream) {
    uint64_t x = seed ^ (stream * 0xD1B54A32D192ED03ull);
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&x);
    r->has_spare = 0;
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

/* xoshiro256** */
static inline uint64_t rng_next(rng *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Standard normals by Box-Muller, both of each pair (only used for pools
 * and vectors: their log and trig calls were a third of synthesis's CPU
 * time). */
static float rng_normal(rng *r) {
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u1 = ((rng_next(r) >> 11) + 1) * (1.0 / 9007199254740993.0);  /* (0, 1] */
    double u2 = (rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    const double m = sqrt(-2.0 * log(u1)), a = 6.283185307179586 * u2;
    r->spare = (float)(m * sin(a));
    r->has_spare = 1;
    return (float)(m * cos(a));
}

/* ------------------------------------------------------------------ pools */

#define POOL_ELEMS (1 << 20)   /* random elements behind each pool */
#define FLOAT_CHUNK 32         /* elements per pick for float types */

typedef struct {
    int type;
    int chunk;                 /* elements per block (pick) */
    size_t chunk_bytes;
    uint32_t n;                /* blocks */
    uint8_t *data;
} pool;

int synth_random_block_type(int type) {
    return type == DP_TYPE_IQ2_XXS || type == DP_TYPE_IQ2_XS || type == DP_TYPE_IQ2_S || type == DP_TYPE_IQ3_XXS ||
           type == DP_TYPE_IQ3_S;
}

/* A pool of random blocks of a type without a quantizer. Past the f16 d at
 * offset 0, every bit pattern of these five formats is a valid block: the
 * grid indices span the whole grids, the signs are free bits (7 with a parity
 * bit, or 8), the sub-block scales 4 bits. One d for the whole pool sets the
 * std: the mean square of the values at d = 1 over the pool, measured with
 * the dequantizer, gives d = std / sqrt(that) (rounded to f16); the random
 * sub-block scales still vary from block to block. x holds POOL_ELEMS floats. */
static void pool_random_blocks(pool *pl, float std, rng *r, float *x) {
    size_t nbytes = (size_t)pl->n * pl->chunk_bytes;
    for (size_t i = 0; i < nbytes; i += 8) {
        uint64_t v = rng_next(r);
        memcpy(pl->data + i, &v, nbytes - i < 8 ? nbytes - i : 8);
    }
    uint16_t h = dp_f32_to_fp16(1.0f);
    for (uint32_t b = 0; b < pl->n; b++) memcpy(pl->data + (size_t)b * pl->chunk_bytes, &h, 2);
    dp_dequantize_row(pl->type, pl->data, x, POOL_ELEMS);
    double sq = 0;
    for (size_t i = 0; i < POOL_ELEMS; i++) sq += (double)x[i] * x[i];
    h = dp_f32_to_fp16((float)(std / sqrt(sq / POOL_ELEMS)));
    for (uint32_t b = 0; b < pl->n; b++) memcpy(pl->data + (size_t)b * pl->chunk_bytes, &h, 2);
}

static int pool_build(pool *pl, int type, float std, uint64_t seed) {
    const dp_type_traits *tt = dp_type_get(type);
    pl->type = type;
    pl->chunk = tt->block_size > 1 ? tt->block_size : FLOAT_CHUNK;
    pl->n = POOL_ELEMS / (uint32_t)pl->chunk;
    pl->chunk_bytes = dp_row_size(type, pl->chunk);
    pl->data = dp_malloc((size_t)pl->n * pl->chunk_bytes);
    float *x = dp_malloc(sizeof(float) * POOL_ELEMS);
    if (!pl->data || !x) {
        free(x);
        return DP_ERR_NOMEM;
    }
    rng r;
    rng_seed(&r, seed, 0x9001u + (uint64_t)type);
    if (synth_random_block_type(type)) {
        pool_random_blocks(pl, std, &r, x);
        free(x);
        return DP_OK;
    }
    for (size_t i = 0; i < POOL_ELEMS; i++) x[i] = std * rng_normal(&r);
    int rc = 0;
    if (type == DP_TYPE_F32) memcpy(pl->data, x, sizeof(float) * POOL_ELEMS);
    else if (type == DP_TYPE_F16)
        for (size_t i = 0; i < POOL_ELEMS; i++) ((uint16_t *)pl->data)[i] = dp_f32_to_fp16(x[i]);
    else if (type == DP_TYPE_BF16)
        for (size_t i = 0; i < POOL_ELEMS; i++) ((uint16_t *)pl->data)[i] = dp_f32_to_bf16(x[i]);
    else
        rc = dp_quantize_row(type, x, pl->data, POOL_ELEMS);
    free(x);
    if (rc) return dp_set_error(DP_ERR_ARG, "synth: cannot quantize to %s (no quantizer for this type)", tt->name);
    return DP_OK;
}

/* -------------------------------------------------------------- writing */

typedef struct {
    const synth_plan *pl;
    pool pools[DP_TYPE_COUNT];
    uint64_t seed;
} fill_ctx;

static const float MATRIX_STD = 0.02f, NORM_STD = 0.05f, BIAS_STD = 0.1f;

/* Llama 3 RoPE scaling as per-frequency divisors (the preset's factor,
 * low/high frequency factors 1 and 4, original context 8192). */
static void llama3_rope_freqs(float *out, int n, const synth_preset *P) {
    const int head_dim = P->head_dim;
    const double theta = P->rope_theta, factor = P->llama3_factor ? P->llama3_factor : 32, lo = 1, hi = 4,
                 old_ctx = 8192;
    const double lo_wl = old_ctx / lo, hi_wl = old_ctx / hi;
    for (int i = 0; i < n; i++) {
        double freq = 1.0 / pow(theta, (double)(2 * i) / head_dim);
        double wl = 2 * M_PI / freq;
        if (wl < hi_wl) out[i] = 1.0f;
        else if (wl > lo_wl) out[i] = (float)factor;
        else {
            double smooth = (old_ctx / wl - lo) / (hi - lo);
            out[i] = (float)(1.0 / ((1 - smooth) / factor + smooth));
        }
    }
}

static void fill(void *user, int index, void *dst, uint64_t nbytes) {
    fill_ctx *c = user;
    const synth_tensor *t = &c->pl->t[index];
    rng r;
    rng_seed(&r, c->seed, (uint64_t)index + 1);
    if (t->kind != SYNTH_MATRIX) {
        float *v = dst;
        int64_t n = t->ne[0];
        if (t->kind == SYNTH_ROPE_FREQS) llama3_rope_freqs(v, (int)n, &c->pl->pr);
        else if (t->kind == SYNTH_ROPE_LONG || t->kind == SYNTH_ROPE_SHORT)
            /* LongRoPE divisors: short ones near 1, long ones rising to ~40 */
            for (int64_t i = 0; i < n; i++)
                v[i] = t->kind == SYNTH_ROPE_SHORT ? 1.0f + 0.05f * (float)i / (float)n
                                                   : 1.0f + 39.0f * (float)(i * i) / (float)(n * n);
        else
            for (int64_t i = 0; i < n; i++)
                v[i] = t->kind == SYNTH_NORM ? 1.0f + NORM_STD * rng_normal(&r) : BIAS_STD * rng_normal(&r);
        return;
    }
    const pool *p = &c->pools[t->type];
    uint64_t picks = nbytes / p->chunk_bytes;
    uint8_t *o = dst;
    for (uint64_t i = 0; i < picks; i += 2) {
        uint64_t x = rng_next(&r);
        uint32_t a = (uint32_t)(((x & 0xffffffffu) * p->n) >> 32), b = (uint32_t)(((x >> 32) * p->n) >> 32);
        memcpy(o + i * p->chunk_bytes, p->data + (size_t)a * p->chunk_bytes, p->chunk_bytes);
        if (i + 1 < picks) memcpy(o + (i + 1) * p->chunk_bytes, p->data + (size_t)b * p->chunk_bytes, p->chunk_bytes);
    }
}

static void write_arch_keys(gguf_writer *w, const synth_preset *P) {
    char k[128];
#define KEY(suffix) (snprintf(k, sizeof k, "%s.%s", P->arch, suffix), k)
    gguf_w_u32(w, KEY("context_length"), (uint32_t)P->n_ctx_train);
    gguf_w_u32(w, KEY("embedding_length"), (uint32_t)P->n_embd);
    gguf_w_u32(w, KEY("block_count"), (uint32_t)P->n_layer);
    gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)P->n_ff);
    gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)P->n_head);
    gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)P->n_head_kv);
    gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), P->eps);
    gguf_w_f32(w, KEY("rope.freq_base"), P->rope_theta);
    if (P->head_dim_keys) {
        gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)P->head_dim);
        gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)P->head_dim);
    }
    if (P->sliding_window || P->fused) gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)P->sliding_window);
    if (P->attn_softcap) gguf_w_f32(w, KEY("attn_logit_softcapping"), P->attn_softcap);
    if (P->final_softcap) gguf_w_f32(w, KEY("final_logit_softcapping"), P->final_softcap);
    if (P->n_rot) gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)P->n_rot);
    if (P->n_ctx_orig) {
        /* as the converter writes LongRoPE: the original context and the
         * attention factor sqrt(1 + ln(ctx / orig) / ln(orig)) */
        double s = (double)P->n_ctx_train / P->n_ctx_orig;
        gguf_w_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)P->n_ctx_orig);
        gguf_w_f32(w, KEY("rope.scaling.attn_factor"), (float)sqrt(1.0 + log(s) / log((double)P->n_ctx_orig)));
    }
    if (P->vocab_keys) {
        gguf_w_u32(w, KEY("vocab_size"), (uint32_t)P->n_vocab);
        gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)P->head_dim);
    }
#undef KEY
}

static int copy_vocab(gguf_writer *w, const char *path) {
    gguf_file *vf = gguf_open(path);
    if (!vf) return DP_ERR_FORMAT;
    for (int i = 0; i < vf->n_kv; i++)
        if (strncmp(vf->kv[i].key, "tokenizer.", 10) == 0) gguf_w_copy_kv(w, &vf->kv[i]);
    gguf_close(vf);
    return DP_OK;
}

int dp_synth(const dp_synth_params *p, const char *path) {
    if (!path || !*path) return dp_set_error(DP_ERR_ARG, "synth: no output path");
    synth_plan pl;
    int rc = synth_plan_build(p, &pl);
    if (rc) return rc;
    const synth_preset *P = &pl.pr;
    /* the output first: an unusable path fails before minutes of work */
    dp_outfile *of = dp_outfile_open(path);
    if (!of) {
        synth_plan_free(&pl);
        return DP_ERR_IO;
    }
    fill_ctx *c = dp_calloc(1, sizeof *c);
    gguf_writer *w = gguf_writer_new(32);
    if (!c || !w) {
        rc = DP_ERR_NOMEM;
        goto out;
    }
    c->pl = &pl;
    c->seed = p->seed;
    for (int i = 0; i < pl.n && !rc; i++) {
        int ty = pl.t[i].type;
        if (pl.t[i].kind == SYNTH_MATRIX && !c->pools[ty].data) rc = pool_build(&c->pools[ty], ty, MATRIX_STD, p->seed);
    }
    if (rc) goto out;

    char name[160];
    gguf_w_str(w, "general.architecture", P->arch);
    gguf_w_str(w, "general.type", "model");
    snprintf(name, sizeof name, "%s", P->name);
    gguf_w_str(w, "general.name", name);
    gguf_w_str(w, "general.size_label", P->size_label);
    write_arch_keys(w, P);
    gguf_w_u32(w, "general.file_type", (uint32_t)pl.file_type);
    gguf_w_u32(w, "general.quantization_version", 2);
    gguf_w_bool(w, "doppler.synthetic", 1);
    gguf_w_str(w, "doppler.synth.preset", P->preset);
    gguf_w_str(w, "doppler.synth.type", pl.type_name);
    gguf_w_u64(w, "doppler.synth.seed", p->seed);
    rc = p->vocab_from ? copy_vocab(w, p->vocab_from) : synth_vocab_write(w, P, P->n_vocab);
    if (rc) goto out;
    for (int i = 0; i < pl.n && !rc; i++) rc = gguf_w_tensor(w, pl.t[i].name, pl.t[i].type, pl.t[i].n_dims, pl.t[i].ne, NULL);
    if (rc) goto out;
    rc = gguf_writer_write_to(w, of, fill, c);
    if (!rc) rc = dp_outfile_commit(of);
    else dp_outfile_abort(of);
    of = NULL;
out:
    dp_outfile_abort(of); /* only the temporary: path is never removed */
    if (c)
        for (int i = 0; i < DP_TYPE_COUNT; i++) free(c->pools[i].data);
    free(c);
    gguf_writer_free(w);
    synth_plan_free(&pl);
    return rc;
}
