/* Model loading: open the GGUF, pick the recipe, read hyper-parameters,
 * bind and check every tensor (name, shape, type), load the tokenizer. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quant.h"
#include "settings.h"
#include "tokenizer/tokenizer.h"
#include "util.h"

/* Binds tensor `name` into w, checking its shape. rows == 0 means a vector
 * of `cols` elements. Missing optional tensors leave w zeroed. */
static int bind(dp_model *m, dp_weight *w, const char *name, int64_t cols, int64_t rows, int optional) {
    const gguf_file *f = m->file;
    const gguf_tensor *t = gguf_find_tensor(f, name);
    memset(w, 0, sizeof *w);
    if (!t) {
        if (optional) return 0;
        return dp_set_error(DP_ERR_FORMAT, "%s: missing required tensor '%s' for architecture %s", f->path, name,
                            m->recipe.arch);
    }
    int want_dims = rows ? 2 : 1;
    int64_t ne1 = rows ? rows : 1;
    if (t->ne[0] != cols || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1 || t->n_dims > want_dims) {
        return dp_set_error(DP_ERR_FORMAT, "%s: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                            f->path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                            (long long)t->ne[3], (long long)cols, (long long)ne1);
    }
    const dp_type_traits *tt = dp_type_get(t->type);
    if (!tt->supported)
        return dp_set_error(DP_ERR_FORMAT, "%s: tensor '%s' has unsupported type %s", f->path, name, tt->name);
    if (!rows && t->type != DP_TYPE_F32 && t->type != DP_TYPE_F16 && t->type != DP_TYPE_BF16)
        return dp_set_error(DP_ERR_FORMAT, "%s: vector tensor '%s' must be F32, F16 or BF16, found %s", f->path, name,
                            tt->name);
    if (m->tensor_used) m->tensor_used[t - f->tensors] = 1;
    w->name = t->name;
    w->data = t->data;
    w->type = t->type;
    w->cols = cols;
    w->rows = ne1;
    w->row_bytes = dp_row_size(t->type, cols);
    w->nbytes = t->nbytes;
    return 0;
}

/* Rows [r0, r0 + n) of a bound matrix as a weight of their own: a view into
 * the same mapping (rows are whole blocks, row_bytes apart). */
static dp_weight row_view(const dp_weight *w, int64_t r0, int64_t n) {
    dp_weight v = *w;
    v.data = (const uint8_t *)w->data + (uint64_t)r0 * w->row_bytes;
    v.rows = n;
    v.nbytes = (uint64_t)n * w->row_bytes;
    return v;
}

static int bind_layer(dp_model *m, int i) {
    const dp_hparams *hp = &m->hp;
    const dp_recipe *r = &m->recipe;
    dp_layer_weights *L = &m->layers[i];
    int64_t E = hp->n_embd, Q = (int64_t)hp->n_head * hp->head_dim, KV = (int64_t)hp->n_head_kv * hp->head_dim;
    char nm[128];
#define B(field, suffix, cols, rows, opt)                          \
    do {                                                           \
        snprintf(nm, sizeof nm, "blk.%d.%s", i, suffix);           \
        if (bind(m, &L->field, nm, cols, rows, opt)) return -1;    \
    } while (0)
    B(attn_norm, "attn_norm.weight", E, 0, 0);
    snprintf(nm, sizeof nm, "blk.%d.attn_qkv.weight", i);
    if (r->fused_qkv && gguf_find_tensor(m->file, nm)) {
        dp_weight qkv;
        if (bind(m, &qkv, nm, E, Q + 2 * KV, 0)) return -1;
        L->wq = row_view(&qkv, 0, Q);
        L->wk = row_view(&qkv, Q, KV);
        L->wv = row_view(&qkv, Q + KV, KV);
    } else {
        B(wq, "attn_q.weight", E, Q, 0);
        B(wk, "attn_k.weight", E, KV, 0);
        B(wv, "attn_v.weight", E, KV, 0);
    }
    B(wo, "attn_output.weight", Q, E, 0);
    if (r->qkv_bias) {
        int opt = r->qkv_bias == 2;
        B(bq, "attn_q.bias", Q, 0, opt);
        B(bk, "attn_k.bias", KV, 0, opt);
        B(bv, "attn_v.bias", KV, 0, opt);
    }
    if (r->qk_norm) {
        B(q_norm, "attn_q_norm.weight", hp->head_dim, 0, 0);
        B(k_norm, "attn_k_norm.weight", hp->head_dim, 0, 0);
    }
    if (r->post_norms) {
        B(post_attn_norm, "post_attention_norm.weight", E, 0, 0);
        B(post_ffn_norm, "post_ffw_norm.weight", E, 0, 0);
    }
    B(ffn_norm, "ffn_norm.weight", E, 0, 0);
    if (r->fused_gate_up) {
        dp_weight gu;
        snprintf(nm, sizeof nm, "blk.%d.ffn_up.weight", i);
        if (bind(m, &gu, nm, E, 2 * (int64_t)hp->n_ff, 0)) return -1;
        L->gate = row_view(&gu, 0, hp->n_ff);
        L->up = row_view(&gu, hp->n_ff, hp->n_ff);
    } else {
        B(gate, "ffn_gate.weight", E, hp->n_ff, 0);
        B(up, "ffn_up.weight", E, hp->n_ff, 0);
    }
    B(down, "ffn_down.weight", hp->n_ff, E, 0);
#undef B
    return 0;
}

/* An optional F32 vector of n_rot/2 RoPE frequency divisors. */
static int bind_factors(dp_model *m, dp_weight *w, const char *name) {
    if (bind(m, w, name, m->hp.n_rot / 2, 0, 1)) return -1;
    if (w->data && w->type != DP_TYPE_F32)
        return dp_set_error(DP_ERR_FORMAT, "%s: %s must be F32", m->file->path, name);
    return 0;
}

static void fill_info(dp_model *m) {
    dp_model_info *in = &m->info;
    const dp_hparams *hp = &m->hp;
    gguf_str s;
    in->arch = m->recipe.arch;
    in->name = "";
    if (gguf_get_str(m->file, "general.name", &s) && (m->name = dp_strndup(s.ptr, s.len))) in->name = m->name;
    in->n_vocab = hp->n_vocab;
    in->n_embd = hp->n_embd;
    in->n_layer = hp->n_layer;
    in->n_head = hp->n_head;
    in->n_head_kv = hp->n_head_kv;
    in->head_dim = hp->head_dim;
    in->n_ff = hp->n_ff;
    in->n_ctx_train = hp->n_ctx_train;
    in->pooling = hp->pooling;
    for (int i = 0; i < m->file->n_tensors; i++) {
        const gguf_tensor *t = &m->file->tensors[i];
        uint64_t n = 1;
        for (int d = 0; d < GGUF_MAX_DIMS; d++) n *= (uint64_t)t->ne[d];
        in->n_params += n;
        in->weight_bytes += t->nbytes;
    }
    in->bos_id = dp_tokenizer_bos(m->tok);
    in->eos_id = dp_tokenizer_eos(m->tok);
    in->add_bos = dp_tokenizer_add_bos(m->tok);
    dp_faults_names(m->faults, m->fault_names, sizeof m->fault_names);
    in->faults = m->fault_names;
}

/* Builds the model over an opened file (which it then owns). */
static dp_model *model_build(gguf_file *file) {
    if (!file) return NULL;
    dp_model *m = dp_calloc(1, sizeof *m);
    if (!m) {
        gguf_close(file);
        return NULL;
    }
    m->file = file;
    const gguf_file *f = m->file;
    const char *path = f->path;

    gguf_str arch;
    if (!gguf_get_str(f, "general.architecture", &arch)) {
        dp_set_error(DP_ERR_FORMAT, "%s: missing required key 'general.architecture'", path);
        goto fail;
    }
    char archname[64];
    snprintf(archname, sizeof archname, "%.*s", (int)(arch.len < 63 ? arch.len : 63), arch.ptr);
    const dp_recipe *r = dp_recipe_find(archname);
    if (!r) {
        dp_set_error(DP_ERR_FORMAT, "%s: unknown architecture '%s' (supported: %s)", path, archname,
                     dp_recipe_list());
        goto fail;
    }
    m->recipe = *r;
    if (dp_hparams_load(&m->hp, &m->recipe, f)) goto fail;
    dp_hparams *hp = &m->hp;
    m->tensor_used = dp_calloc((size_t)(f->n_tensors ? f->n_tensors : 1), 1);
    if (!m->tensor_used) goto fail;

    /* Global tensors. The embedding fixes the vocabulary size. */
    const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
    if (!te) {
        dp_set_error(DP_ERR_FORMAT, "%s: missing required tensor 'token_embd.weight' for architecture %s", path,
                     archname);
        goto fail;
    }
    if (te->ne[1] < 1 || te->ne[1] > (1 << 24)) {
        dp_set_error(DP_ERR_FORMAT, "%s: token_embd.weight has an invalid vocabulary size %lld", path,
                     (long long)te->ne[1]);
        goto fail;
    }
    hp->n_vocab = (int)te->ne[1];
    if (bind(m, &m->tok_embd, "token_embd.weight", hp->n_embd, hp->n_vocab, 0)) goto fail;
    if (bind(m, &m->output_norm, "output_norm.weight", hp->n_embd, 0, 0)) goto fail;
    if (bind(m, &m->output, "output.weight", hp->n_embd, hp->n_vocab, 1)) goto fail;
    if (!m->output.data) m->output = m->tok_embd; /* tied */
    if (m->recipe.rope_freqs && bind_factors(m, &m->rope_freqs, "rope_freqs.weight")) goto fail;
    if (m->recipe.longrope && (bind_factors(m, &m->rope_long, "rope_factors_long.weight") ||
                               bind_factors(m, &m->rope_short, "rope_factors_short.weight")))
        goto fail;
    if (!m->rope_long.data != !m->rope_short.data) {
        dp_set_error(DP_ERR_FORMAT, "%s: rope_factors_long.weight and rope_factors_short.weight come together", path);
        goto fail;
    }
    if (dp_hparams_rope(hp, m->rope_short.data ? m->rope_short.data : m->rope_freqs.data, m->rope_long.data))
        goto fail;

    m->layers = dp_calloc((size_t)hp->n_layer, sizeof(dp_layer_weights));
    if (!m->layers) goto fail;
    for (int i = 0; i < hp->n_layer; i++)
        if (bind_layer(m, i)) goto fail;
    /* A tensor the recipe does not use (say a bias this architecture does not
     * have) would silently change nothing: refuse the file instead. */
    for (int i = 0; i < f->n_tensors; i++)
        if (!m->tensor_used[i]) {
            dp_set_error(DP_ERR_FORMAT, "%s: tensor '%s' is not used by architecture %s", path, f->tensors[i].name,
                         archname);
            goto fail;
        }
    free(m->tensor_used);
    m->tensor_used = NULL;

    m->tok = dp_tokenizer_load(f);
    if (!m->tok) goto fail;
    if (dp_tokenizer_n_vocab(m->tok) > hp->n_vocab) {
        dp_set_error(DP_ERR_FORMAT, "%s: tokenizer has %d tokens but token_embd.weight only %d rows", path,
                     dp_tokenizer_n_vocab(m->tok), hp->n_vocab);
        goto fail;
    }
    gguf_str tmpl;
    if (gguf_get_str(f, "tokenizer.chat_template", &tmpl)) m->chat_template = dp_strndup(tmpl.ptr, tmpl.len);

    /* Fault injection for the debugging toolkit (off unless asked), after
     * binding: the file's tensors stay the recipe's. */
    dp_settings set;
    if (dp_settings_read(&set, DP_SET_MODEL)) goto fail;
    if (set.fault[0]) {
        int rc = dp_faults_apply(&m->recipe, set.fault);
        if (rc < 0) goto fail;
        m->faults = rc;
        dp_faults_hparams(hp, &m->recipe, rc);
    }
    fill_info(m);
    return m;
fail:
    dp_model_free(m);
    return NULL;
}

dp_model *dp_model_load(const char *path) { return model_build(gguf_open(path)); }

dp_model *dp_model_load_memory(const void *data, size_t size, const char *label) {
    return model_build(gguf_open_memory(data, size, label));
}

void dp_model_free(dp_model *m) {
    if (!m) return;
    dp_tokenizer_free(m->tok);
    dp_vocab_bytes_free(m->vocab_bytes);
    free(m->chat_template);
    free(m->name);
    free(m->layers);
    free(m->tensor_used);
    dp_hparams_free(&m->hp);
    gguf_close(m->file);
    free(m);
}

const dp_model_info *dp_model_get_info(const dp_model *m) { return &m->info; }

void dp_model_visit_weights(const dp_model *m, dp_weight_visit_fn fn, void *user) {
    fn(user, &m->tok_embd);
    fn(user, &m->output_norm);
    if (m->output.data != m->tok_embd.data) fn(user, &m->output);
    if (m->rope_freqs.data) fn(user, &m->rope_freqs);
    if (m->rope_long.data) fn(user, &m->rope_long);
    if (m->rope_short.data) fn(user, &m->rope_short);
    for (int i = 0; i < m->hp.n_layer; i++) {
        const dp_layer_weights *L = &m->layers[i];
        const dp_weight *ws[] = {&L->attn_norm, &L->wq, &L->wk, &L->wv, &L->wo, &L->bq, &L->bk, &L->bv,
                                 &L->q_norm, &L->k_norm, &L->post_attn_norm, &L->ffn_norm, &L->gate, &L->up,
                                 &L->down, &L->post_ffn_norm};
        for (size_t k = 0; k < sizeof ws / sizeof ws[0]; k++)
            if (ws[k]->data) fn(user, ws[k]);
    }
}
