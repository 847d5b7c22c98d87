/* PLACEHOLDER tokenizer (greedy longest match) used only until the exact
 * SPM / byte-level BPE implementation lands; it is replaced wholesale. */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "util.h"

struct dp_tokenizer {
    int n;
    gguf_str *pieces;
    int32_t *types;
    int bos, eos, add_bos, is_bpe;
};

dp_tokenizer *dp_tokenizer_load(const gguf_file *f) {
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_ARRAY || toks->arr_type != GGUF_STRING)
        return dp_set_error(DP_ERR_FORMAT, "%s: missing required key 'tokenizer.ggml.tokens'", f->path), NULL;
    dp_tokenizer *t = dp_calloc(1, sizeof *t);
    t->n = (int)toks->n;
    t->pieces = dp_calloc((size_t)t->n, sizeof(gguf_str));
    for (int i = 0; i < t->n; i++) t->pieces[i] = gguf_arr_str(toks, (uint64_t)i);
    int64_t v;
    t->bos = gguf_get_int(f, "tokenizer.ggml.bos_token_id", &v) ? (int)v : -1;
    t->eos = gguf_get_int(f, "tokenizer.ggml.eos_token_id", &v) ? (int)v : -1;
    int b = 1;
    gguf_str model;
    if (gguf_get_str(f, "tokenizer.ggml.model", &model)) t->is_bpe = model.len == 4 && !memcmp(model.ptr, "gpt2", 4);
    if (!gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b)) b = !t->is_bpe;
    t->add_bos = b;
    return t;
}

void dp_tokenizer_free(dp_tokenizer *t) {
    if (!t) return;
    free(t->pieces);
    free(t);
}

int dp_tokenizer_n_vocab(const dp_tokenizer *t) { return t->n; }
int dp_tokenizer_bos(const dp_tokenizer *t) { return t->bos; }
int dp_tokenizer_eos(const dp_tokenizer *t) { return t->eos; }
int dp_tokenizer_add_bos(const dp_tokenizer *t) { return t->add_bos; }
int dp_tokenizer_is_eog(const dp_tokenizer *t, int32_t tok) { return tok == t->eos; }

int dp_tokenizer_encode(const dp_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                        int32_t *out, int cap) {
    (void)parse_special;
    int n = 0;
    if (add_bos && t->add_bos && t->bos >= 0) {
        if (n < cap) out[n] = t->bos;
        n++;
    }
    /* map spaces to the marker, then greedy longest match */
    char *buf = malloc(len * 3 + 1);
    size_t bl = 0;
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            if (t->is_bpe) { buf[bl++] = (char)0xC4; buf[bl++] = (char)0xA0; }
            else { buf[bl++] = (char)0xE2; buf[bl++] = (char)0x96; buf[bl++] = (char)0x81; }
        } else buf[bl++] = text[i];
    }
    size_t i = 0;
    while (i < bl) {
        int best = -1;
        size_t blen = 0;
        for (int k = 0; k < t->n; k++)
            if (t->pieces[k].len > blen && t->pieces[k].len <= bl - i && !memcmp(t->pieces[k].ptr, buf + i, t->pieces[k].len)) {
                best = k;
                blen = t->pieces[k].len;
            }
        if (best < 0) { i++; continue; }
        if (n < cap) out[n] = best;
        n++;
        i += blen;
    }
    free(buf);
    return n;
}

/* ------------------------------------------------------ public wrappers */

int dp_tokenize(const dp_model *m, const char *text, size_t len, int add_bos, int parse_special, int32_t *out,
                int cap) {
    return dp_tokenizer_encode(m->tok, text, len, add_bos, parse_special, out, cap);
}

int dp_token_to_bytes(const dp_model *m, int32_t tok, int render_special, char *buf, int cap) {
    const dp_tokenizer *t = m->tok;
    if (tok < 0 || tok >= t->n) return 0;
    gguf_str p = t->pieces[tok];
    int n = 0;
    for (uint64_t i = 0; i < p.len; i++) {
        unsigned char c = (unsigned char)p.ptr[i];
        if (!t->is_bpe && c == 0xE2 && i + 2 < p.len && (unsigned char)p.ptr[i + 1] == 0x96 && (unsigned char)p.ptr[i + 2] == 0x81) {
            if (n < cap) buf[n] = ' ';
            n++;
            i += 2;
        } else if (t->is_bpe && c == 0xC4 && i + 1 < p.len && (unsigned char)p.ptr[i + 1] == 0xA0) {
            if (n < cap) buf[n] = ' ';
            n++;
            i += 1;
        } else if (t->is_bpe && c == 0xC4 && i + 1 < p.len && (unsigned char)p.ptr[i + 1] == 0x8A) {
            if (n < cap) buf[n] = '\n';
            n++;
            i += 1;
        } else {
            if (n < cap) buf[n] = (char)c;
            n++;
        }
    }
    return n;
}

const char *dp_token_piece(const dp_model *m, int32_t tok, size_t *len) {
    if (tok < 0 || tok >= m->tok->n) { *len = 0; return ""; }
    *len = m->tok->pieces[tok].len;
    return m->tok->pieces[tok].ptr;
}

int32_t dp_token_lookup(const dp_model *m, const char *piece, size_t len) {
    for (int i = 0; i < m->tok->n; i++)
        if (m->tok->pieces[i].len == len && !memcmp(m->tok->pieces[i].ptr, piece, len)) return i;
    return -1;
}

int dp_token_is_eog(const dp_model *m, int32_t tok) { return dp_tokenizer_is_eog(m->tok, tok); }

struct dp_detok {
    const dp_model *m;
    int special;
};

dp_detok *dp_detok_new(const dp_model *m, int render_special) {
    dp_detok *d = dp_calloc(1, sizeof *d);
    d->m = m;
    d->special = render_special;
    return d;
}
int dp_detok_push(dp_detok *d, int32_t tok, char *buf, int cap) { return dp_token_to_bytes(d->m, tok, d->special, buf, cap); }
int dp_detok_flush(dp_detok *d, char *buf, int cap) { return 0; }
void dp_detok_free(dp_detok *d) { free(d); }

const char *dp_chat_template_detect(const dp_model *m) { return NULL; }
char *dp_chat_render(const char *name, const dp_chat_msg *msgs, int n, int add_generation_prompt) {
    dp_set_error(DP_ERR_ARG, "chat templates are not implemented yet");
    return NULL;
}
