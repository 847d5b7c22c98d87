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

/* An SPM-style vocabulary: specials, 256 byte tokens, then words. */
static void write_spm_vocab(gguf_writer *w, const tm_opts *o) {
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
}

unsigned tm_bytelevel_char(int b) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    if (printable) return (unsigned)b;
    int k = 0;
    for (int x = 0; x < b; x++) k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174);
    return 256u + (unsigned)k;
}

/* A byte-level BPE vocabulary: the 256 byte characters, the results of a
 * few merges, then control tokens. */
static void write_bpe_vocab(gguf_writer *w, const tm_opts *o) {
    static const char *merges[] = {"\304\240 t", "h e", "\304\240t he", "i n", "\304\240 a", "e r", "o n",
                                   "r e", "\304\240 s", "e d", "a n", "\304\240 w", "o u", "i s", "\304\240a n"};
    enum { NM = sizeof merges / sizeof merges[0], NS = 3 };
    static const char *specials[NS] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    const char *toks[V];
    char owned[V][24];
    int32_t types[V];
    int n = 0;
    for (int b = 0; b < 256; b++, n++) {
        unsigned c = tm_bytelevel_char(b);
        if (c < 0x80) snprintf(owned[n], 24, "%c", (char)c);
        else snprintf(owned[n], 24, "%c%c", (char)(0xC0 | c >> 6), (char)(0x80 | (c & 0x3F)));
        types[n] = 1;
    }
    for (int i = 0; i < NM; i++, n++) {
        const char *sp = strchr(merges[i], ' ');
        snprintf(owned[n], 24, "%.*s%s", (int)(sp - merges[i]), merges[i], sp + 1);
        types[n] = 1;
    }
    for (; n < V - NS; n++) {
        snprintf(owned[n], 24, "<|reserved_%d|>", n);
        types[n] = 5;
    }
    for (int i = 0; i < NS; i++, n++) {
        snprintf(owned[n], 24, "%s", specials[i]);
        types[n] = 3;
    }
    for (int i = 0; i < V; i++) toks[i] = owned[i];
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_w_str(w, "tokenizer.ggml.pre", o->bpe_pre);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, V);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, V);
    gguf_w_arr_str(w, "tokenizer.ggml.merges", merges, NULL, NM);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", V - NS);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", V - 1);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 0);
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

    if (o->bpe_pre) write_bpe_vocab(w, o);
    else write_spm_vocab(w, o);
    if (o->chat_template) gguf_w_str(w, "tokenizer.chat_template", o->chat_template);

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
