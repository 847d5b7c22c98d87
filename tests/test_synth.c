/* Synthetic models (dp_synth): every preset/type writes a file that loads,
 * validates and runs with finite, non-degenerate logits; the full-size
 * presets have the real models' shapes and llama.cpp's type mixes; the
 * synthetic Gemma 3 270M Q4_K_M has exactly the real file's tensor table and
 * architecture metadata; seeds are reproducible; --vocab-from copies the
 * tokenizer; bad arguments are clear errors. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "gguf.h"
#include "quant.h"
#include "synth.h"
#include "testlib.h"

static int g_missing_quant;

static int quantizer_available(int type) {
    if (type == DP_TYPE_F32 || type == DP_TYPE_F16 || type == DP_TYPE_BF16 || synth_random_block_type(type)) return 1;
    const dp_type_traits *tt = dp_type_get(type);
    float x[256];
    uint8_t out[512];
    for (int i = 0; i < tt->block_size; i++) x[i] = t_rand_normal();
    return dp_quantize_row(type, x, out, tt->block_size) == 0;
}

/* Every matrix type the plan needs can be produced on this build. */
static int plan_producible(const dp_synth_params *p) {
    synth_plan pl;
    if (synth_plan_build(p, &pl)) return 0;
    int ok = 1;
    for (int i = 0; i < pl.n; i++)
        if (!quantizer_available(pl.t[i].type)) {
            printf("note: no quantizer for %s yet: %s/%s/%s not generated\n", dp_type_name(pl.t[i].type), p->arch,
                   p->preset, p->type);
            ok = 0;
            break;
        }
    synth_plan_free(&pl);
    return ok;
}

/* Loads, evaluates a few random tokens, checks the logits. */
static void run_model(const char *path, const char *what) {
    dp_model *m = dp_model_load(path);
    CHECKF(m != NULL, "%s: %s", what, dp_last_error());
    if (!m) return;
    const dp_model_info *in = dp_model_get_info(m);
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = DP_BACKEND_CPU;
    sp.n_ctx = 64;
    dp_session *s = dp_session_new(m, &sp);
    CHECKF(s != NULL, "%s: %s", what, dp_last_error());
    if (s) {
        int32_t toks[5];
        for (int i = 0; i < 5; i++) toks[i] = (int32_t)(t_rand_u64() % (uint64_t)in->n_vocab);
        CHECKF(dp_eval(s, toks, 4) == DP_OK, "%s: %s", what, dp_last_error());
        CHECKF(dp_eval(s, toks + 4, 1) == DP_OK, "%s: %s", what, dp_last_error());
        const float *lg = dp_logits(s, -1);
        int finite = 1;
        double sum = 0, sq = 0;
        for (int i = 0; lg && i < in->n_vocab; i++) {
            if (!isfinite(lg[i])) finite = 0;
            sum += lg[i];
            sq += (double)lg[i] * lg[i];
        }
        double mean = sum / in->n_vocab, sd = sqrt(fmax(sq / in->n_vocab - mean * mean, 0));
        CHECKF(lg && finite, "%s: non-finite logits", what);
        /* random weights of std 0.02 give logits of std ~0.1-2 */
        CHECKF(sd > 0.02 && sd < 50, "%s: logits std %g is degenerate", what, sd);
        dp_session_free(s);
    }
    dp_model_free(m);
}

static const char *g_archs[] = {"gemma3", "qwen2", "llama", "qwen3", "gemma2", "phi3", "smollm3"};
#define N_ARCHS (int)(sizeof g_archs / sizeof g_archs[0])

static void all_tiny_types(void) {
    const char **archs = g_archs;
    char types[256];
    FILE *devnull = fopen("/dev/null", "w");
    snprintf(types, sizeof types, "%s", dp_synth_types());
    for (int a = 0; a < N_ARCHS; a++) {
        for (char *save = NULL, *ty = strtok_r(types, " ", &save); ty; ty = strtok_r(NULL, " ", &save)) {
            dp_synth_params p = {.arch = archs[a], .preset = "tiny", .type = ty, .seed = t_rand_u64()};
            if (!plan_producible(&p)) {
                g_missing_quant++;
                continue;
            }
            const char *path = t_tmp_path(".gguf");
            char what[96];
            snprintf(what, sizeof what, "%s tiny %s", archs[a], ty);
            CHECKF(dp_synth(&p, path) == DP_OK, "%s: %s", what, dp_last_error());
            CHECKF(dp_inspect_file(path, devnull) == DP_OK, "%s: validation: %s", what,
                   dp_last_error());
            run_model(path, what);
            remove(path);
        }
        snprintf(types, sizeof types, "%s", dp_synth_types());
    }
    fclose(devnull);
}

/* Counts tensors of each type in a plan. */
static void type_counts(const synth_plan *pl, int *counts) {
    memset(counts, 0, sizeof(int) * DP_TYPE_COUNT);
    for (int i = 0; i < pl->n; i++) counts[pl->t[i].type]++;
}

static const synth_tensor *find(const synth_plan *pl, const char *name) {
    for (int i = 0; i < pl->n; i++)
        if (!strcmp(pl->t[i].name, name)) return &pl->t[i];
    return NULL;
}

/* The IQ2 / IQ3 mixes, counted by hand from llama.cpp's llama_tensor_get_type
 * (no importance matrix, no MoE). Both presets are tied (token_embd is the
 * head: Q5_K for iq2_* and iq3_xxs, else Q6_K) and every row is a multiple
 * of 256, so nothing falls back.
 * Qwen2.5 3B: 36 layers, n/8 = 4, 7n/8 = 31, n_gqa 8, 7 matrices a layer
 * (253 with the head); attn_v is Q4_K in every layer (n_gqa >= 4).
 *  - iq2_xxs: ffn_down Q2_K in layers 0-3 (4), else IQ2_XXS (32); q, k,
 *    output, gate, up IQ2_XXS (180): IQ2_XXS 212, Q2_K 4, Q4_K 36, Q5_K 1.
 *  - iq2_m (base IQ2_S): ffn_down IQ3_S in 0-3, attn_output IQ3_S (36):
 *    IQ2_S 144 + 32 = 176, IQ3_S 40, Q4_K 36, Q5_K 1. iq2_s: the same with
 *    IQ2_XS (its base) in place of IQ2_S.
 *  - iq3_xxs: q, k IQ2_S (72); ffn_down Q4_K in 0-3, else Q3_K (32);
 *    attn_output IQ3_S (36); gate, up IQ3_XXS (72): Q4_K 36 + 4 = 40.
 *  - iq3_m (base IQ3_S): attn_output Q4_K, ffn_down Q4_K in 0-3: Q4_K
 *    36 + 36 + 4 = 76, IQ3_S 144 + 32 = 176, Q6_K 1.
 *  - iq3_xs (base IQ3_S): q, k IQ3_XXS (72), gate, up IQ3_XXS in layers
 *    4-30 (54): IQ3_XXS 126, IQ3_S 36 (down) + 36 (output) + 18 = 90.
 * Qwen3 0.6B: 28 layers, n/8 = 3, n_gqa 2 (attn_v not Q4_K but the
 * ftype's own choice), 197 matrices.
 *  - iq2_xxs: attn_v Q2_K (28), ffn_down Q2_K in 0-2 (3), else IQ2_XXS (25):
 *    IQ2_XXS 140 + 25 = 165, Q2_K 31, Q5_K 1.
 *  - iq2_m: attn_v IQ3_S (28), ffn_down IQ3_S in 0-2 (3), attn_output IQ3_S
 *    (28): IQ3_S 59, IQ2_S 112 + 25 = 137, Q5_K 1.
 *  - iq3_xxs: attn_v IQ3_S (28, IQ3_XXS only with an importance matrix), q, k
 *    IQ2_S (56), ffn_down Q4_K (3) / Q3_K (25), attn_output IQ3_S (28),
 *    gate, up IQ3_XXS (56): IQ3_S 56.
 *  - iq3_m: attn_v and attn_output Q4_K (56), ffn_down Q4_K in 0-2 (3):
 *    Q4_K 59, IQ3_S 137, Q6_K 1. */
static void iq_mix_plans(void) {
    struct {
        const char *preset, *type;
        int file_type;
        int n[7][2]; /* {DP_TYPE_*, count}, up to 7, count 0 ends */
    } c[] = {
        {"3b", "iq2_xxs", 19, {{DP_TYPE_IQ2_XXS, 212}, {DP_TYPE_Q2_K, 4}, {DP_TYPE_Q4_K, 36}, {DP_TYPE_Q5_K, 1}}},
        {"3b", "iq2_s", 28, {{DP_TYPE_IQ2_XS, 176}, {DP_TYPE_IQ3_S, 40}, {DP_TYPE_Q4_K, 36}, {DP_TYPE_Q5_K, 1}}},
        {"3b", "iq2_m", 29, {{DP_TYPE_IQ2_S, 176}, {DP_TYPE_IQ3_S, 40}, {DP_TYPE_Q4_K, 36}, {DP_TYPE_Q5_K, 1}}},
        {"3b", "iq3_xxs", 23,
         {{DP_TYPE_IQ3_XXS, 72}, {DP_TYPE_IQ2_S, 72}, {DP_TYPE_IQ3_S, 36}, {DP_TYPE_Q4_K, 40}, {DP_TYPE_Q3_K, 32},
          {DP_TYPE_Q5_K, 1}}},
        {"3b", "iq3_xs", 22, {{DP_TYPE_IQ3_XXS, 126}, {DP_TYPE_IQ3_S, 90}, {DP_TYPE_Q4_K, 36}, {DP_TYPE_Q6_K, 1}}},
        {"3b", "iq3_s", 26, {{DP_TYPE_IQ3_S, 216}, {DP_TYPE_Q4_K, 36}, {DP_TYPE_Q6_K, 1}}},
        {"3b", "iq3_m", 27, {{DP_TYPE_IQ3_S, 176}, {DP_TYPE_Q4_K, 76}, {DP_TYPE_Q6_K, 1}}},
        {"0.6b", "iq2_xxs", 19, {{DP_TYPE_IQ2_XXS, 165}, {DP_TYPE_Q2_K, 31}, {DP_TYPE_Q5_K, 1}}},
        {"0.6b", "iq2_m", 29, {{DP_TYPE_IQ2_S, 137}, {DP_TYPE_IQ3_S, 59}, {DP_TYPE_Q5_K, 1}}},
        {"0.6b", "iq3_xxs", 23,
         {{DP_TYPE_IQ3_XXS, 56}, {DP_TYPE_IQ2_S, 56}, {DP_TYPE_IQ3_S, 56}, {DP_TYPE_Q4_K, 3}, {DP_TYPE_Q3_K, 25},
          {DP_TYPE_Q5_K, 1}}},
        {"0.6b", "iq3_m", 27, {{DP_TYPE_IQ3_S, 137}, {DP_TYPE_Q4_K, 59}, {DP_TYPE_Q6_K, 1}}},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        const char *arch = strcmp(c[i].preset, "3b") ? "qwen3" : "qwen2";
        dp_synth_params p = {.arch = arch, .preset = c[i].preset, .type = c[i].type};
        synth_plan pl;
        CHECKF(synth_plan_build(&p, &pl) == DP_OK, "%s", dp_last_error());
        int cnt[DP_TYPE_COUNT], matrices = 0, want = 0;
        type_counts(&pl, cnt);
        for (int t = 0; t < DP_TYPE_COUNT; t++) matrices += t == DP_TYPE_F32 ? 0 : cnt[t];
        CHECKF(pl.file_type == c[i].file_type, "%s %s: file type %d", arch, c[i].type, pl.file_type);
        for (int k = 0; k < 7 && c[i].n[k][1]; k++) {
            want += c[i].n[k][1];
            CHECKF(cnt[c[i].n[k][0]] == c[i].n[k][1], "%s %s %s: %d %s tensors, want %d", arch, c[i].preset,
                   c[i].type, cnt[c[i].n[k][0]], dp_type_name(c[i].n[k][0]), c[i].n[k][1]);
        }
        CHECKF(matrices == want, "%s %s %s: %d matrices, want %d", arch, c[i].preset, c[i].type, matrices, want);
        synth_plan_free(&pl);
    }
    /* spot checks of the per-layer rules */
    dp_synth_params p = {.arch = "qwen2", .preset = "3b", .type = "iq3_xs"};
    synth_plan pl;
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    CHECK(find(&pl, "blk.3.ffn_up.weight")->type == DP_TYPE_IQ3_S && find(&pl, "blk.4.ffn_gate.weight")->type ==
          DP_TYPE_IQ3_XXS && find(&pl, "blk.31.ffn_up.weight")->type == DP_TYPE_IQ3_S);
    synth_plan_free(&pl);
    /* untied heads (Llama 3.1 8B): token_embd Q2_K for iq2_xxs, IQ3_S for
     * iq3_xxs, the base for iq3_m; output.weight as the tied head */
    p = (dp_synth_params){.arch = "llama", .preset = "8b", .type = "iq2_xxs"};
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    CHECK(find(&pl, "token_embd.weight")->type == DP_TYPE_Q2_K && find(&pl, "output.weight")->type == DP_TYPE_Q5_K);
    synth_plan_free(&pl);
    p.type = "iq3_xxs";
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    CHECK(find(&pl, "token_embd.weight")->type == DP_TYPE_IQ3_S && find(&pl, "output.weight")->type == DP_TYPE_Q5_K);
    synth_plan_free(&pl);
    p.type = "iq3_m";
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    CHECK(find(&pl, "token_embd.weight")->type == DP_TYPE_IQ3_S && find(&pl, "output.weight")->type == DP_TYPE_Q6_K);
    synth_plan_free(&pl);
    /* Gemma 3 1B's 1152-wide rows fall back to IQ4_NL, its head to Q8_0;
     * the 1024-wide attn_output and 6912-wide ffn_down keep the mix */
    p = (dp_synth_params){.arch = "gemma3", .preset = "1b", .type = "iq2_m"};
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    CHECK(find(&pl, "token_embd.weight")->type == DP_TYPE_Q8_0 && find(&pl, "blk.0.attn_q.weight")->type ==
          DP_TYPE_IQ4_NL && find(&pl, "blk.0.attn_output.weight")->type == DP_TYPE_IQ3_S &&
          find(&pl, "blk.0.ffn_down.weight")->type == DP_TYPE_IQ3_S &&
          find(&pl, "blk.5.ffn_down.weight")->type == DP_TYPE_IQ2_S);
    synth_plan_free(&pl);
    /* phi3's fused attn_qkv follows attn_v (n_gqa 1 in Phi-3 mini) */
    p = (dp_synth_params){.arch = "phi3", .preset = "mini", .type = "iq2_xxs"};
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    CHECK(find(&pl, "blk.0.attn_qkv.weight")->type == DP_TYPE_Q2_K && find(&pl, "blk.0.ffn_up.weight")->type ==
          DP_TYPE_IQ2_XXS);
    synth_plan_free(&pl);
}

/* The five types made of random blocks: the weights of a matrix have a std
 * within 20% of 0.02 and are not constant; the same seed gives the same
 * bytes; tiny iq2_xxs and iq3_m models run on the CPU. Llama tiny's rows
 * (256, 768) are multiples of 256, so ffn_gate keeps each mix's base type. */
static void random_blocks(void) {
    static const struct {
        const char *ftype;
        int type;
    } c[] = {{"iq2_xxs", DP_TYPE_IQ2_XXS}, {"iq2_xs", DP_TYPE_IQ2_XS}, {"iq2_m", DP_TYPE_IQ2_S},
             {"iq3_xxs", DP_TYPE_IQ3_XXS}, {"iq3_s", DP_TYPE_IQ3_S}};
    const char *path = t_tmp_path(".gguf"), *again = t_tmp_path(".gguf");
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        dp_synth_params p = {.arch = "llama", .preset = "tiny", .type = c[i].ftype, .seed = t_rand_u64()};
        CHECKF(dp_synth(&p, path) == DP_OK, "%s: %s", c[i].ftype, dp_last_error());
        gguf_file *f = gguf_open(path);
        CHECKF(f != NULL, "%s: %s", c[i].ftype, dp_last_error());
        if (!f) continue;
        const gguf_tensor *t = gguf_find_tensor(f, "blk.1.ffn_gate.weight");
        CHECK(t && t->type == c[i].type);
        if (t && t->type == c[i].type) {
            int64_t n = t->ne[0] * t->ne[1];
            float *x = malloc(sizeof(float) * (size_t)n);
            dp_dequantize_row(t->type, t->data, x, n);
            double sum = 0, sq = 0;
            int distinct = 0;
            for (int64_t k = 0; k < n; k++) {
                sum += x[k];
                sq += (double)x[k] * x[k];
                distinct |= x[k] != x[0];
            }
            double mean = sum / (double)n, sd = sqrt(sq / (double)n - mean * mean);
            printf("note: %s %s: weights std %.5f, mean %.1e\n", c[i].ftype, dp_type_name(t->type), sd, mean);
            CHECKF(fabs(sd - 0.02) < 0.2 * 0.02 && distinct, "%s: std %g", c[i].ftype, sd);
            free(x);
        }
        gguf_close(f);
        CHECK(dp_synth(&p, again) == DP_OK);
        size_t na, nb;
        char *a = t_read_file(path, &na), *b = t_read_file(again, &nb);
        CHECKF(a && b && na == nb && !memcmp(a, b, na), "%s: the same seed wrote different bytes", c[i].ftype);
        free(a);
        free(b);
    }
    static const char *run[] = {"iq2_xxs", "iq3_m"};
    for (int i = 0; i < 2; i++) {
        dp_synth_params p = {.arch = "llama", .preset = "tiny", .type = run[i], .seed = t_rand_u64()};
        CHECKF(dp_synth(&p, path) == DP_OK, "%s: %s", run[i], dp_last_error());
        char what[64];
        snprintf(what, sizeof what, "llama tiny %s", run[i]);
        run_model(path, what);
    }
    remove(path);
    remove(again);
}

/* Full-size presets: the real models' shapes, type counts worked out by hand
 * from llama.cpp's Q4_K_M rules (use_more_bits layers get Q6_K for attn_v and
 * ffn_down; rows not a multiple of 256 fall back Q4_K->Q5_0, Q6_K->Q8_0; the
 * tied LM head is Q6_K, or Q8_0 when its rows are not a multiple of 256). */
static void full_size_plans(void) {
    struct {
        const char *arch, *preset;
        int embd, ff, layers, heads, kv, hd, vocab, window, tied, bias;
        int n_tensors, f32, q4k, q6k, q5_0, q8_0;
    } c[] = {
        {"gemma3", "270m", 640, 2048, 18, 4, 1, 256, 262144, 512, 1, 0, 236, 109, 27, 9, 81, 10},
        {"gemma3", "1b", 1152, 6912, 26, 4, 1, 256, 262144, 512, 1, 0, 340, 157, 39, 13, 117, 14},
        {"qwen2", "0.5b", 896, 4864, 24, 14, 2, 64, 151936, 0, 1, 1, 290, 121, 12, 12, 132, 13},
        {"qwen2", "3b", 2048, 11008, 36, 16, 2, 128, 151936, 0, 1, 1, 434, 181, 216, 37, 0, 0},
        {"llama", "1b", 2048, 8192, 16, 32, 8, 64, 128256, 0, 1, 0, 147, 34, 96, 17, 0, 0},
        /* 14 of 28 layers use more bits; the 8B's own head (Q6_K) beside a Q4_K token_embd */
        {"llama", "3b", 3072, 8192, 28, 24, 8, 128, 128256, 0, 1, 0, 255, 58, 168, 29, 0, 0},
        {"llama", "8b", 4096, 14336, 32, 32, 8, 128, 128256, 0, 0, 0, 292, 66, 193, 33, 0, 0},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        dp_synth_params p = {.arch = c[i].arch, .preset = c[i].preset, .type = "q4_k_m"};
        synth_plan pl;
        CHECKF(synth_plan_build(&p, &pl) == DP_OK, "%s", dp_last_error());
        const synth_preset *P = &pl.pr;
        CHECKF(P->n_embd == c[i].embd && P->n_ff == c[i].ff && P->n_layer == c[i].layers && P->n_head == c[i].heads &&
                   P->n_head_kv == c[i].kv && P->head_dim == c[i].hd && P->n_vocab == c[i].vocab &&
                   P->sliding_window == c[i].window && P->tied == c[i].tied && P->qkv_bias == c[i].bias,
               "%s %s: hyper-parameters", c[i].arch, c[i].preset);
        int cnt[DP_TYPE_COUNT];
        type_counts(&pl, cnt);
        CHECKF(pl.n == c[i].n_tensors, "%s %s: %d tensors, want %d", c[i].arch, c[i].preset, pl.n, c[i].n_tensors);
        CHECKF(cnt[DP_TYPE_F32] == c[i].f32 && cnt[DP_TYPE_Q4_K] == c[i].q4k && cnt[DP_TYPE_Q6_K] == c[i].q6k &&
                   cnt[DP_TYPE_Q5_0] == c[i].q5_0 && cnt[DP_TYPE_Q8_0] == c[i].q8_0,
               "%s %s: type counts F32 %d Q4_K %d Q6_K %d Q5_0 %d Q8_0 %d", c[i].arch, c[i].preset, cnt[DP_TYPE_F32],
               cnt[DP_TYPE_Q4_K], cnt[DP_TYPE_Q6_K], cnt[DP_TYPE_Q5_0], cnt[DP_TYPE_Q8_0]);
        const synth_tensor *q = find(&pl, "blk.0.attn_q.weight"), *o = find(&pl, "output.weight");
        CHECK(q && q->ne[0] == c[i].embd && q->ne[1] == (int64_t)c[i].heads * c[i].hd);
        CHECK(c[i].tied ? o == NULL : o != NULL);
        CHECK(c[i].bias == (find(&pl, "blk.0.attn_k.bias") != NULL));
        const synth_tensor *e = find(&pl, "token_embd.weight");
        CHECK(e && e->ne[0] == c[i].embd && e->ne[1] == c[i].vocab);
        synth_plan_free(&pl);
        /* dp_synth_presets() names it, on its architecture's line */
        char want[64];
        snprintf(want, sizeof want, "%s: ", c[i].arch);
        const char *ln = strstr(dp_synth_presets(), want), *end = ln ? strchr(ln, '\n') : NULL;
        char line[256] = "";
        if (ln) snprintf(line, sizeof line, "%.*s ", end ? (int)(end - ln) : (int)strlen(ln), ln);
        snprintf(want, sizeof want, " %s ", c[i].preset);
        CHECKF(strstr(line, want) != NULL, "dp_synth_presets() lacks %s %s: %s", c[i].arch, c[i].preset,
               dp_synth_presets());
    }
    /* other mixes: q8_0 keeps the head Q8_0; q4_0's tied head is Q6_K (Q8_0
     * when its rows are not a multiple of 256); f16 keeps norms F32 */
    dp_synth_params p = {.arch = "qwen2", .preset = "3b", .type = "q4_0"};
    synth_plan pl;
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    CHECK(find(&pl, "token_embd.weight")->type == DP_TYPE_Q6_K && find(&pl, "blk.3.ffn_down.weight")->type == DP_TYPE_Q4_0);
    synth_plan_free(&pl);
    p.preset = "0.5b";
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    CHECK(find(&pl, "token_embd.weight")->type == DP_TYPE_Q8_0 && find(&pl, "blk.0.attn_q.weight")->type == DP_TYPE_Q4_0);
    synth_plan_free(&pl);
    p.type = "f16";
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    CHECK(find(&pl, "token_embd.weight")->type == DP_TYPE_F16 && find(&pl, "blk.0.attn_q.bias")->type == DP_TYPE_F32 &&
          find(&pl, "output_norm.weight")->type == DP_TYPE_F32);
    synth_plan_free(&pl);
    p.type = "q8_0";
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    CHECK(find(&pl, "token_embd.weight")->type == DP_TYPE_Q8_0 && find(&pl, "blk.5.attn_v.weight")->type == DP_TYPE_Q8_0);
    synth_plan_free(&pl);
    /* iq4_xs on Qwen3 4B (llama.cpp's rules without an importance matrix):
     * attn_v Q5_K (4 query heads per KV head), ffn_down of layers < 36/8
     * Q5_K, the tied head Q6_K, the rest IQ4_XS; 4 norms a layer */
    p = (dp_synth_params){.arch = "qwen3", .preset = "4b", .type = "iq4_xs"};
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    int cnt[DP_TYPE_COUNT];
    type_counts(&pl, cnt);
    CHECKF(pl.n == 398 && cnt[DP_TYPE_IQ4_XS] == 212 && cnt[DP_TYPE_Q5_K] == 40 && cnt[DP_TYPE_Q6_K] == 1 &&
               cnt[DP_TYPE_F32] == 145,
           "qwen3 4b iq4_xs: %d tensors, IQ4_XS %d Q5_K %d Q6_K %d F32 %d", pl.n, cnt[DP_TYPE_IQ4_XS],
           cnt[DP_TYPE_Q5_K], cnt[DP_TYPE_Q6_K], cnt[DP_TYPE_F32]);
    CHECK(find(&pl, "blk.4.ffn_down.weight")->type == DP_TYPE_IQ4_XS && find(&pl, "blk.0.attn_q_norm.weight"));
    synth_plan_free(&pl);
    /* q3_k_m and q2_k on Qwen2.5 3B (36 layers, 8 query heads per KV head,
     * tied head): q3_k_m's attn_v and ffn_down Q5_K in layers 0-1 (< 2,
     * < 36/16), else Q4_K, attn_output Q4_K; q2_k's attn_v Q4_K, ffn_down and
     * attn_output Q3_K; the rest the base type */
    p = (dp_synth_params){.arch = "qwen2", .preset = "3b", .type = "q3_k_m"};
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    type_counts(&pl, cnt);
    CHECKF(cnt[DP_TYPE_Q3_K] == 144 && cnt[DP_TYPE_Q4_K] == 104 && cnt[DP_TYPE_Q5_K] == 4 && cnt[DP_TYPE_Q6_K] == 1,
           "qwen2 3b q3_k_m: Q3_K %d Q4_K %d Q5_K %d Q6_K %d", cnt[DP_TYPE_Q3_K], cnt[DP_TYPE_Q4_K],
           cnt[DP_TYPE_Q5_K], cnt[DP_TYPE_Q6_K]);
    CHECK(find(&pl, "blk.1.attn_v.weight")->type == DP_TYPE_Q5_K && find(&pl, "blk.2.ffn_down.weight")->type == DP_TYPE_Q4_K);
    synth_plan_free(&pl);
    p.type = "q2_k";
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    type_counts(&pl, cnt);
    CHECKF(cnt[DP_TYPE_Q2_K] == 144 && cnt[DP_TYPE_Q3_K] == 72 && cnt[DP_TYPE_Q4_K] == 36 && cnt[DP_TYPE_Q6_K] == 1,
           "qwen2 3b q2_k: Q2_K %d Q3_K %d Q4_K %d Q6_K %d", cnt[DP_TYPE_Q2_K], cnt[DP_TYPE_Q3_K], cnt[DP_TYPE_Q4_K],
           cnt[DP_TYPE_Q6_K]);
    synth_plan_free(&pl);
    iq_mix_plans();
    /* phi3 4-mini: fused tensors, LongRoPE factors of n_rot / 2 */
    p = (dp_synth_params){.arch = "phi3", .preset = "4-mini", .type = "q4_k_m"};
    CHECK(synth_plan_build(&p, &pl) == DP_OK);
    const synth_tensor *qkv = find(&pl, "blk.0.attn_qkv.weight"), *up = find(&pl, "blk.0.ffn_up.weight");
    const synth_tensor *lf = find(&pl, "rope_factors_long.weight");
    CHECK(qkv && qkv->ne[1] == 3072 + 2 * 1024 && up && up->ne[1] == 2 * 8192 && lf && lf->ne[0] == 48);
    CHECK(!find(&pl, "blk.0.attn_q.weight") && !find(&pl, "blk.0.ffn_gate.weight"));
    synth_plan_free(&pl);
}

/* The synthetic 270M against the real Gemma 3 270M Q4_K_M file. */
static void gemma270m_vs_real(void) {
    const char *real = t_model_path("gemma-3-270m-q4_k_m.gguf");
    dp_synth_params p = {.arch = "gemma3", .preset = "270m", .type = "q4_k_m", .seed = t_rand_u64()};
    if (!real) {
        printf("note: gemma-3-270m-q4_k_m.gguf not in the model cache: real-table comparison skipped\n");
        return;
    }
    if (!plan_producible(&p)) {
        g_missing_quant++;
        return;
    }
    const char *path = t_tmp_path(".gguf");
    CHECKF(dp_synth(&p, path) == DP_OK, "%s", dp_last_error());
    gguf_file *a = gguf_open(path), *b = gguf_open(real);
    CHECK(a && b);
    if (a && b) {
        CHECKF(a->n_tensors == b->n_tensors, "%d tensors vs %d", a->n_tensors, b->n_tensors);
        for (int i = 0; i < b->n_tensors; i++) {
            const gguf_tensor *tb = &b->tensors[i], *ta = gguf_find_tensor(a, tb->name);
            CHECKF(ta != NULL, "missing %s", tb->name);
            if (!ta) continue;
            CHECKF(ta->type == tb->type && ta->n_dims == tb->n_dims && ta->nbytes == tb->nbytes &&
                       !memcmp(ta->ne, tb->ne, sizeof ta->ne),
                   "%s: %s vs real %s", tb->name, dp_type_name(ta->type), dp_type_name(tb->type));
        }
        /* every architecture key and the file type agree, value for value */
        int n_arch = 0;
        for (int i = 0; i < b->n_kv; i++) {
            const gguf_kv *kb = &b->kv[i];
            if (strncmp(kb->key, "gemma3.", 7) && strcmp(kb->key, "general.file_type") &&
                strcmp(kb->key, "general.architecture"))
                continue;
            n_arch++;
            const gguf_kv *ka = gguf_find_kv(a, kb->key);
            CHECKF(ka && ka->type == kb->type && ka->size == kb->size && !memcmp(ka->data, kb->data, kb->size),
                   "metadata %s differs", kb->key);
        }
        CHECK(n_arch >= 12);
        /* the same tokenizer keys exist (synthetic vocabulary, same size) */
        const gguf_kv *ta = gguf_find_kv(a, "tokenizer.ggml.tokens"), *tb = gguf_find_kv(b, "tokenizer.ggml.tokens");
        CHECK(ta && tb && ta->n == tb->n);
        CHECK(gguf_find_kv(a, "tokenizer.ggml.scores") && gguf_find_kv(a, "tokenizer.ggml.token_type"));
    }
    gguf_close(a);
    gguf_close(b);
    run_model(path, "gemma3 270m q4_k_m");
    remove(path);
}

/* Full-width presets with one layer: the shapes bind and the model runs. */
static void full_width_one_layer(void) {
    static const char *cfg[][2] = {{"qwen2", "3b"},    {"gemma3", "1b"}, {"llama", "1b"},    {"qwen2", "0.5b"},
                                   {"qwen3", "0.6b"},  {"qwen3", "8b"},  {"gemma2", "2b"},   {"phi3", "mini"},
                                   {"phi3", "4-mini"}, {"smollm3", "3b"}, {"qwen2", "7b"},
                                   {"qwen2", "1.5b"},  {"qwen3", "1.7b"}, {"llama", "3b"},   {"llama", "8b"}};
    for (int i = 0; i < (int)(sizeof cfg / sizeof cfg[0]); i++) {
        dp_synth_params p = {.arch = cfg[i][0], .preset = cfg[i][1], .type = "q4_k_m", .seed = t_rand_u64(), .n_layer = 1};
        if (!plan_producible(&p)) {
            g_missing_quant++;
            p.type = "bf16";
        }
        const char *path = t_tmp_path(".gguf");
        char what[96];
        snprintf(what, sizeof what, "%s %s %s, 1 layer", cfg[i][0], cfg[i][1], p.type);
        CHECKF(dp_synth(&p, path) == DP_OK, "%s: %s", what, dp_last_error());
        run_model(path, what);
        remove(path);
    }
}

static void seeds_and_vocab(void) {
    dp_synth_params p = {.arch = "llama", .preset = "tiny", .type = "f16", .seed = 42};
    const char *a = t_tmp_path(".gguf"), *b = t_tmp_path(".gguf"), *c = t_tmp_path(".gguf");
    CHECK(dp_synth(&p, a) == DP_OK && dp_synth(&p, b) == DP_OK);
    p.seed = 43;
    CHECK(dp_synth(&p, c) == DP_OK);
    size_t na, nb, nc;
    char *da = t_read_file(a, &na), *db = t_read_file(b, &nb), *dc = t_read_file(c, &nc);
    CHECK(da && db && dc && na == nb && na == nc);
    CHECK(da && db && !memcmp(da, db, na));
    CHECK(da && dc && memcmp(da, dc, na) != 0);
    free(da);
    free(db);
    free(dc);

    /* the synthetic vocabularies tokenize and decode */
    const char **archs = g_archs;
    for (int i = 0; i < N_ARCHS; i++) {
        dp_synth_params q = {.arch = archs[i], .preset = "tiny", .type = "f32", .seed = 1};
        CHECK(dp_synth(&q, a) == DP_OK);
        dp_model *m = dp_model_load(a);
        CHECKF(m != NULL, "%s: %s", archs[i], dp_last_error());
        if (!m) continue;
        CHECK(dp_model_get_info(m)->n_vocab == 1024);
        int32_t t[64];
        int n = dp_tokenize(m, "the sky is blue", 15, 1, 0, t, 64);
        CHECKF(n > 1 && n < 20, "%s: %d tokens", archs[i], n);
        char buf[256];
        int len = 0;
        for (int k = 0; k < n && k < 64; k++) {
            int w = dp_token_to_bytes(m, t[k], 0, buf + len, (int)sizeof buf - len);
            if (w > 0 && len + w < (int)sizeof buf) len += w;
        }
        buf[len] = 0;
        CHECKF(strstr(buf, "the sky is blue") != NULL, "%s: decoded '%s'", archs[i], buf);
        dp_model_free(m);
    }

    /* --vocab-from: the tokenizer keys are copied */
    const char *src = t_model_path("gemma-3-270m-q4_k_m.gguf");
    if (src) {
        dp_synth_params q = {.arch = "gemma3", .preset = "tiny", .type = "f32", .seed = 3, .vocab_from = src};
        CHECKF(dp_synth(&q, a) == DP_OK, "%s", dp_last_error());
        dp_model *m = dp_model_load(a), *real = dp_model_load(src);
        CHECK(m && real);
        if (m && real) {
            CHECK(dp_model_get_info(m)->n_vocab == 262144);
            int32_t t1[32], t2[32];
            int n1 = dp_tokenize(m, "The color of the sky is", 23, 1, 0, t1, 32);
            int n2 = dp_tokenize(real, "The color of the sky is", 23, 1, 0, t2, 32);
            CHECK(n1 == n2 && n1 > 3 && n1 <= 32 && !memcmp(t1, t2, sizeof(int32_t) * (size_t)n1));
        }
        dp_model_free(m);
        dp_model_free(real);
    } else {
        printf("note: gemma-3-270m-q4_k_m.gguf absent: --vocab-from with the real vocabulary not checked\n");
    }
    const char *qv = t_shared_fixture("qwen2-tokenizer-tiny.gguf");
    if (qv) {
        dp_synth_params q = {.arch = "qwen2", .preset = "tiny", .type = "f32", .seed = 3, .vocab_from = qv};
        CHECKF(dp_synth(&q, a) == DP_OK, "%s", dp_last_error());
        gguf_file *f = gguf_open(a), *g = gguf_open(qv);
        CHECK(f && g);
        if (f && g) {
            const gguf_kv *x = gguf_find_kv(f, "tokenizer.ggml.merges"), *y = gguf_find_kv(g, "tokenizer.ggml.merges");
            CHECK(x && y && x->n == y->n && x->size == y->size && !memcmp(x->data, y->data, x->size));
        }
        gguf_close(f);
        gguf_close(g);
    }
    remove(a);
    remove(b);
    remove(c);
}

static void bad_input(void) {
    const char *path = t_tmp_path(".gguf");
    dp_synth_params p = {.arch = "mamba", .preset = "tiny", .type = "f32"};
    CHECK(dp_synth(&p, path) == DP_ERR_ARG && strstr(dp_last_error(), "mamba"));
    p.arch = "gemma3";
    p.preset = "3b";
    CHECK(dp_synth(&p, path) == DP_ERR_ARG && strstr(dp_last_error(), "270m"));
    p.preset = "tiny";
    p.type = "q3_xx";
    CHECK(dp_synth(&p, path) == DP_ERR_ARG && strstr(dp_last_error(), "q4_k_m"));
    p.type = "f32";
    p.vocab_from = "/nonexistent.gguf";
    CHECK(dp_synth(&p, path) < 0);
    char *out = NULL, *err = NULL;
    CHECK(t_run_doppler("synth --arch gemma3 --preset 9b --type f32 -o /tmp/x.gguf", &out, &err) == 2);
    CHECK(err && strstr(err, "unknown preset") && strchr(err, '\n') == err + strlen(err) - 1);
    free(out);
    free(err);
    CHECK(t_run_doppler("synth --arch gemma3 --preset tiny -o /tmp/x.gguf", &out, &err) == 2);
    free(out);
    free(err);
}

int main(void) {
    t_seed();
    all_tiny_types();
    full_size_plans();
    random_blocks();
    gemma270m_vs_real();
    full_width_one_layer();
    seeds_and_vocab();
    bad_input();
    int rc = t_done("test_synth");
    if (!rc && g_missing_quant) t_skip("%d configurations need quantizers this build lacks (dp_quantize_row)", g_missing_quant);
    return rc;
}
