#include "testmodel.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf.h"
#include "quant.h"
#include "testlib.h"

enum { E = 32, FF = 64, NH = 4, NKV = 2, HD = 8, V = 300 };

static unsigned g_state;
static float frand(void) {
    g_state = g_state * 1664525u + 1013904223u;
    return ((g_state >> 8) / 16777216.0f - 0.5f) * 0.5f;
}

static void kv_u32(gguf_writer *w, const tm_opts *o, const char *arch, const char *suffix, uint32_t v) {
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    if (o->skip_key && !strcmp(o->skip_key, key)) return;
    gguf_w_u32(w, key, v);
}

static int add_tensor(gguf_writer *w, const tm_opts *o, const char *name, int64_t cols, int64_t rows, int is_norm) {
    if (o->skip_tensor && !strcmp(o->skip_tensor, name)) return 0;
    if (o->bad_shape && !strcmp(o->bad_shape, name)) cols += 32;
    int type = rows > 1 && o->weight_type ? o->weight_type : DP_TYPE_F32;
    int64_t n = cols * rows;
    float *x = malloc(sizeof(float) * (size_t)n);
    for (int64_t i = 0; i < n; i++) x[i] = is_norm ? 1.0f + frand() * 0.2f : frand();
    if (o->nan_tensor && !strcmp(o->nan_tensor, name)) x[n / 3] = NAN;
    void *q = malloc(dp_row_size(type, cols) * (size_t)rows + 1);
    int rc = 0;
    if (type == DP_TYPE_F32) memcpy(q, x, sizeof(float) * (size_t)n);
    else
        for (int64_t r = 0; r < rows && !rc; r++)
            rc = dp_quantize_row(type, x + r * cols, (char *)q + r * dp_row_size(type, cols), cols);
    int64_t ne[2] = {cols, rows};
    if (!rc) rc = gguf_w_tensor(w, name, type, rows > 1 ? 2 : 1, ne, q);
    free(x);
    free(q);
    return rc;
}

int tm_write(const char *path, const tm_opts *o) {
    tm_opts def = {0};
    if (!o) o = &def;
    const char *arch = o->arch ? o->arch : "llama";
    int L = o->n_layer ? o->n_layer : 2;
    g_state = o->seed ? o->seed : 12345u;
    gguf_writer *w = gguf_writer_new(32);
    if (!(o->skip_key && !strcmp(o->skip_key, "general.architecture"))) gguf_w_str(w, "general.architecture", arch);
    gguf_w_str(w, "general.name", "doppler test model");
    kv_u32(w, o, arch, "context_length", o->n_ctx ? (uint32_t)o->n_ctx : 256u);
    kv_u32(w, o, arch, "embedding_length", E);
    kv_u32(w, o, arch, "block_count", (uint32_t)L);
    kv_u32(w, o, arch, "feed_forward_length", FF);
    kv_u32(w, o, arch, "attention.head_count", NH);
    kv_u32(w, o, arch, "attention.head_count_kv", NKV);
    kv_u32(w, o, arch, "attention.key_length", HD);
    kv_u32(w, o, arch, "attention.value_length", HD);
    if (!strcmp(arch, "gemma3")) kv_u32(w, o, arch, "attention.sliding_window", 4);
    char key[128];
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    if (!(o->skip_key && !strcmp(o->skip_key, key))) gguf_w_f32(w, key, 1e-6f);
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    gguf_w_f32(w, key, 10000.0f);

    /* an SPM-style vocabulary: specials, 256 byte tokens, then words */
    const char *toks[V];
    char *owned[V];
    float scores[V];
    int32_t types[V];
    for (int i = 0; i < V; i++) {
        owned[i] = malloc(16);
        if (i < 4) snprintf(owned[i], 16, "%s", (const char *[]){"<pad>", "<eos>", "<bos>", "<unk>"}[i]);
        else if (i < 260) snprintf(owned[i], 16, "<0x%02X>", i - 4);
        else snprintf(owned[i], 16, "\xe2\x96\x81w%d", i - 260);
        toks[i] = owned[i];
        scores[i] = i < 260 ? 0.0f : -(float)(i - 260);
        types[i] = i < 3 ? 3 : i == 3 ? 2 : i < 260 ? 6 : 1;
    }
    if (!(o->skip_key && !strcmp(o->skip_key, "tokenizer.ggml.model"))) gguf_w_str(w, "tokenizer.ggml.model", "llama");
    if (!(o->skip_key && !strcmp(o->skip_key, "tokenizer.ggml.tokens")))
        gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, V);
    gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, V);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, V);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 2);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 1);
    gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 3);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 1);
    for (int i = 0; i < V; i++) free(owned[i]);

    int rc = 0;
    rc |= add_tensor(w, o, "token_embd.weight", E, V, 0);
    rc |= add_tensor(w, o, "output_norm.weight", E, 1, 1);
    if (o->extra_tensor) rc |= add_tensor(w, o, o->extra_tensor, E, 1, 0);
    char nm[96];
    for (int l = 0; l < L; l++) {
#define T(suffix, cols, rows, norm) \
    snprintf(nm, sizeof nm, "blk.%d.%s", l, suffix), rc |= add_tensor(w, o, nm, cols, rows, norm)
        T("attn_norm.weight", E, 1, 1);
        T("attn_q.weight", E, NH * HD, 0);
        T("attn_k.weight", E, NKV * HD, 0);
        T("attn_v.weight", E, NKV * HD, 0);
        T("attn_output.weight", NH * HD, E, 0);
        if (!strcmp(arch, "qwen2")) {
            T("attn_q.bias", NH * HD, 1, 0);
            T("attn_k.bias", NKV * HD, 1, 0);
            T("attn_v.bias", NKV * HD, 1, 0);
        }
        if (!strcmp(arch, "gemma3")) {
            T("attn_q_norm.weight", HD, 1, 1);
            T("attn_k_norm.weight", HD, 1, 1);
            T("post_attention_norm.weight", E, 1, 1);
            T("post_ffw_norm.weight", E, 1, 1);
        }
        T("ffn_norm.weight", E, 1, 1);
        T("ffn_gate.weight", E, FF, 0);
        T("ffn_up.weight", E, FF, 0);
        T("ffn_down.weight", FF, E, 0);
#undef T
    }
    if (!rc) rc = gguf_writer_write(w, path, NULL, NULL);
    gguf_writer_free(w);
    return rc ? -1 : 0;
}

const char *tm_write_copy(gguf_writer *w, const gguf_file *f) {
    for (int i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    const char *out = t_tmp_path(".gguf");
    int rc = gguf_writer_write(w, out, NULL, NULL);
    gguf_writer_free(w);
    return rc ? NULL : out;
}
