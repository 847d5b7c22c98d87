/* The newer families' metadata and tensors as bad input: copies of the
 * tiny fixtures (tests/fixtures/models) with one key or tensor changed must
 * be refused with an error naming the problem; and SmolLM3's NoPE layers
 * read from attention.rope_pattern where a file has one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "gguf.h"
#include "testlib.h"
#include "testmodel.h"

typedef struct {
    const char *what, *model;
    const char *skip;     /* key or tensor to leave out */
    const char *key;      /* key to write instead (as kind) */
    int kind;             /* 0 f32 value, 1 string value, 2 array of n_arr u8 flags */
    float value;
    const uint8_t *arr;
    int n_arr;
    const char *needle;   /* NULL: must load */
} edit;

/* A copy of the fixture with e's edit; NULL on failure. */
static const char *edited(const edit *e) {
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/models/%s.gguf", e->model);
    gguf_file *f = gguf_open(t_src_path(rel));
    CHECKF(f != NULL, "%s: %s", rel, dp_last_error());
    if (!f) return NULL;
    gguf_writer *w = gguf_writer_new(32);
    for (int i = 0; i < f->n_kv; i++) {
        const char *k = f->kv[i].key;
        if ((e->skip && !strcmp(k, e->skip)) || (e->key && !strcmp(k, e->key))) continue;
        gguf_w_copy_kv(w, &f->kv[i]);
    }
    if (e->key) {
        if (e->kind == 0) gguf_w_f32(w, e->key, e->value);
        else if (e->kind == 1) gguf_w_str(w, e->key, "four");
        else gguf_w_arr(w, e->key, GGUF_BOOL, e->arr, (uint64_t)e->n_arr);
    }
    for (int i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (e->skip && !strcmp(t->name, e->skip)) continue;
        gguf_w_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data);
    }
    const char *out = t_tmp_path(".gguf");
    int rc = gguf_writer_write(w, out, NULL, NULL);
    gguf_writer_free(w);
    gguf_close(f);
    return rc ? NULL : out;
}

static void refused(void) {
    static const uint8_t five[] = {1, 1, 1, 0, 1}, three[] = {1, 0, 1};
    const edit cases[] = {
        {"phi3 short factors missing", "phi3-tiny", "rope_factors_short.weight", .needle = "come together"},
        {"phi3 attention factor", "phi3-tiny", .key = "phi3.rope.scaling.attn_factor", .value = -1.0f,
         .needle = "attn_factor"},
        {"phi3 fused qkv missing", "phi3-tiny", "blk.1.attn_qkv.weight", .needle = "'blk.1.attn_q.weight'"},
        {"phi3 fused gate/up missing", "phi3-tiny", "blk.2.ffn_up.weight", .needle = "'blk.2.ffn_up.weight'"},
        {"gemma2 negative cap", "gemma2-tiny", .key = "gemma2.attn_logit_softcapping", .value = -5.0f,
         .needle = "soft-capping"},
        {"gemma2 infinite cap", "gemma2-tiny", .key = "gemma2.final_logit_softcapping", .value = INFINITY,
         .needle = "final_logit_softcapping"},
        {"qwen3 k norm missing", "qwen3-tiny", "blk.0.attn_k_norm.weight", .needle = "attn_k_norm"},
        {"mistral window as text", "mistral-tiny", .key = "llama.attention.sliding_window", .kind = 1,
         .needle = "sliding_window"},
        {"smollm3 rope pattern length", "smollm3-tiny", .key = "smollm3.attention.rope_pattern", .kind = 2,
         .arr = three, .n_arr = 3, .needle = "rope_pattern"},
        {"smollm3 rope pattern as text", "smollm3-tiny", .key = "smollm3.attention.rope_pattern", .kind = 1,
         .needle = "rope_pattern"},
        {"smollm3 default rope pattern", "smollm3-tiny", .key = "smollm3.attention.rope_pattern", .kind = 2,
         .arr = five, .n_arr = 5, .needle = NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const edit *e = &cases[i];
        const char *p = edited(e);
        CHECKF(p != NULL, "%s: could not write the copy", e->what);
        if (!p) continue;
        dp_model *m = dp_model_load(p);
        if (e->needle) {
            CHECKF(m == NULL && strstr(dp_last_error(), e->needle), "%s: want an error with '%s', got %s", e->what,
                   e->needle, m ? "a model" : dp_last_error());
            CHECKF(!strchr(dp_last_error(), '\n'), "%s: the error is not one line", e->what);
        } else {
            CHECKF(m != NULL, "%s: %s", e->what, dp_last_error());
        }
        dp_model_free(m);
        remove(p);
    }
}

/* Last-position logits of a model over fixed tokens (CPU). */
static int logits_of(const char *path, float *out, int n_out) {
    dp_model *m = dp_model_load(path);
    CHECKF(m != NULL, "%s: %s", path, dp_last_error());
    if (!m) return -1;
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = DP_BACKEND_CPU;
    sp.n_ctx = 64;
    dp_session *s = dp_session_new(m, &sp);
    int32_t toks[12];
    for (int i = 0; i < 12; i++) toks[i] = 5 + 23 * i;
    int rc = s && dp_eval(s, toks, 12) == DP_OK ? 0 : -1;
    if (!rc) memcpy(out, dp_logits(s, -1), sizeof(float) * (size_t)n_out);
    dp_session_free(s);
    dp_model_free(m);
    return rc;
}

/* The file's rope_pattern decides which layers rotate: the default pattern
 * (layer 3 of 5 without RoPE) gives the fixture's logits, all layers
 * rotating gives others. */
static void rope_pattern(void) {
    enum { V = 320 };
    static const uint8_t same[] = {1, 1, 1, 0, 1}, all[] = {1, 1, 1, 1, 1};
    static float base[V], a[V], b[V];
    CHECK(logits_of(t_src_path("tests/fixtures/models/smollm3-tiny.gguf"), base, V) == 0);
    edit e1 = {"same", "smollm3-tiny", .key = "smollm3.attention.rope_pattern", .kind = 2, .arr = same, .n_arr = 5};
    edit e2 = {"all", "smollm3-tiny", .key = "smollm3.attention.rope_pattern", .kind = 2, .arr = all, .n_arr = 5};
    const char *p1 = edited(&e1), *p2 = edited(&e2);
    CHECK(p1 && p2 && logits_of(p1, a, V) == 0 && logits_of(p2, b, V) == 0);
    CHECKF(memcmp(base, a, sizeof base) == 0, "the default rope_pattern changes the logits");
    double d = 0;
    for (int i = 0; i < V; i++) d += fabs((double)b[i] - base[i]);
    CHECKF(d > 1e-2, "rotating every layer leaves the logits unchanged (sum |diff| %g)", d);
    if (p1) remove(p1);
    if (p2) remove(p2);
}

int main(void) {
    t_seed();
    refused();
    rope_pattern();
    return t_done("test_arch_inputs");
}
