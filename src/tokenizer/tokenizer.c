/* Tokenizer: loading from GGUF metadata, added-token matching, encoding
 * (dispatched to spm.c for SentencePiece-style vocabularies and bpe.c for
 * byte-level BPE) and the public wrappers (dp_tokenize, dp_token_*). The
 * shared machinery is in common.c and text.c, the streaming detokenizer in
 * detok.c; see internal.h for the reference semantics. */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "../model.h"
#include "../util.h"
#include "internal.h"

/* ------------------------------------------------------------ added tokens */

static uint32_t trie_hash(uint64_t k, uint32_t mask) {
    k *= 0x9E3779B97F4A7C15ull;
    return (uint32_t)(k >> 32) & mask;
}

static int trie_child(const added_trie *a, uint32_t node, unsigned char c) {
    uint64_t k = ((uint64_t)node << 8 | c) + 1;
    for (uint32_t i = trie_hash(k, a->tmask);; i = (i + 1) & a->tmask) {
        if (a->tkey[i] == k) return (int)a->tval[i];
        if (!a->tkey[i]) return -1;
    }
}

static int trie_add(added_trie *a, const char *s, size_t n, int32_t tok) {
    uint32_t node = 0;
    for (size_t j = 0; j < n; j++) {
        unsigned char c = (unsigned char)s[j];
        int ch = trie_child(a, node, c);
        if (ch < 0) {
            if (a->n_nodes == a->cap_nodes) {
                size_t cap = a->cap_nodes;
                if (tk_grow((void **)&a->node_tok, &cap, a->n_nodes + 1, sizeof(int32_t))) return -1;
                a->cap_nodes = (uint32_t)cap;
            }
            if ((a->t_used + 1) * 2 > a->tmask + 1) { /* rehash */
                uint32_t ncap = (a->tmask + 1) * 2;
                uint64_t *nk = calloc(ncap, sizeof *nk);
                uint32_t *nv = malloc(ncap * sizeof *nv);
                if (!nk || !nv) {
                    free(nk);
                    free(nv);
                    return dp_set_error(DP_ERR_NOMEM, "out of memory for the added-token trie");
                }
                for (uint32_t i = 0; i <= a->tmask; i++)
                    if (a->tkey[i]) {
                        uint32_t h = trie_hash(a->tkey[i], ncap - 1);
                        while (nk[h]) h = (h + 1) & (ncap - 1);
                        nk[h] = a->tkey[i];
                        nv[h] = a->tval[i];
                    }
                free(a->tkey);
                free(a->tval);
                a->tkey = nk;
                a->tval = nv;
                a->tmask = ncap - 1;
            }
            ch = (int)a->n_nodes++;
            a->node_tok[ch] = -1;
            uint64_t k = ((uint64_t)node << 8 | c) + 1;
            uint32_t i = trie_hash(k, a->tmask);
            while (a->tkey[i]) i = (i + 1) & a->tmask;
            a->tkey[i] = k;
            a->tval[i] = (uint32_t)ch;
            a->t_used++;
        }
        node = (uint32_t)ch;
    }
    a->node_tok[node] = tok; /* a duplicate string: the later token wins */
    a->first[(unsigned char)s[0]] = 1;
    return 0;
}

static int trie_init(added_trie *a) {
    a->cap_nodes = 1024;
    a->node_tok = malloc(a->cap_nodes * sizeof(int32_t));
    a->tmask = 1023;
    a->tkey = calloc(a->tmask + 1, sizeof(uint64_t));
    a->tval = malloc((a->tmask + 1) * sizeof(uint32_t));
    if (!a->node_tok || !a->tkey || !a->tval) return dp_set_error(DP_ERR_NOMEM, "out of memory for the added-token trie");
    a->node_tok[0] = -1;
    a->n_nodes = 1;
    return 0;
}

static void trie_free(added_trie *a) {
    free(a->node_tok);
    free(a->tkey);
    free(a->tval);
}

/* Longest added token starting at s[i]; returns its id (and *end) or -1. */
static int trie_longest(const added_trie *a, const char *s, size_t n, size_t i, size_t *end) {
    if (!a->first[(unsigned char)s[i]]) return -1;
    int best = -1;
    uint32_t node = 0;
    for (size_t j = i; j < n; j++) {
        int ch = trie_child(a, node, (unsigned char)s[j]);
        if (ch < 0) break;
        node = (uint32_t)ch;
        if (a->node_tok[node] >= 0) {
            best = a->node_tok[node];
            *end = j + 1;
        }
    }
    return best;
}

/* --------------------------------------------------------------- loading */

static const char *g_eog_texts[] = {"<end_of_turn>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|endoftext|>",
                                    "<|end_of_text|>", "<|end|>", "<EOT>", "<|END_OF_TURN_TOKEN|>", NULL};

static int get_id(const gguf_file *f, const char *key, int n) {
    int64_t v;
    if (!gguf_get_int(f, key, &v)) return -1;
    return v >= 0 && v < n ? (int)v : -1;
}

dp_tokenizer *dp_tokenizer_load(const gguf_file *f) {
    const gguf_kv *toks = gguf_find_kv(f, "tokenizer.ggml.tokens");
    if (!toks || toks->type != GGUF_ARRAY || toks->arr_type != GGUF_STRING)
        return dp_set_error(DP_ERR_FORMAT, "%s: missing required key 'tokenizer.ggml.tokens'", f->path), NULL;
    if (toks->n == 0 || toks->n > (1u << 20))
        return dp_set_error(DP_ERR_FORMAT, "%s: tokenizer.ggml.tokens has %llu entries (1..1048576 supported)", f->path,
                            (unsigned long long)toks->n), NULL;
    gguf_str model;
    if (!gguf_get_str(f, "tokenizer.ggml.model", &model))
        return dp_set_error(DP_ERR_FORMAT, "%s: missing required key 'tokenizer.ggml.model'", f->path), NULL;
    int kind = 0;
    if (model.len == 5 && !memcmp(model.ptr, "llama", 5)) kind = TOK_SPM;
    else if (model.len == 4 && !memcmp(model.ptr, "gpt2", 4)) kind = TOK_BPE;
    else
        return dp_set_error(DP_ERR_FORMAT, "%s: unsupported tokenizer.ggml.model '%.*s' (supported: llama, gpt2)",
                            f->path, (int)(model.len > 64 ? 64 : model.len), model.ptr), NULL;

    dp_tokenizer *t = dp_calloc(1, sizeof *t);
    if (!t) return NULL;
    t->kind = kind;
    t->n = (int)toks->n;
    t->piece = malloc(sizeof(gguf_str) * (size_t)t->n);
    t->type = malloc((size_t)t->n);
    t->flags = calloc((size_t)t->n, 1);
    if (!t->piece || !t->type || !t->flags) {
        dp_set_error(DP_ERR_NOMEM, "out of memory loading the tokenizer");
        goto fail;
    }
    for (int i = 0; i < t->n; i++) t->piece[i] = gguf_arr_str(toks, (uint64_t)i);

    const gguf_kv *types = gguf_find_kv(f, "tokenizer.ggml.token_type");
    if (types && (types->type != GGUF_ARRAY || types->n != toks->n || !gguf_vtype_size(types->arr_type))) {
        dp_set_error(DP_ERR_FORMAT, "%s: tokenizer.ggml.token_type must be a numeric array of %d entries", f->path, t->n);
        goto fail;
    }
    for (int i = 0; i < t->n; i++) {
        /* range-checked as a double: (int) of an out-of-range value is undefined */
        double ty = types ? gguf_arr_num(types, (uint64_t)i) : TT_NORMAL;
        t->type[i] = (uint8_t)(ty >= TT_NORMAL && ty <= TT_BYTE ? (int)ty : TT_NORMAL);
    }

    gguf_str arch = {"", 0};
    gguf_get_str(f, "general.architecture", &arch);
    t->is_gemma = kind == TOK_SPM && ((arch.len == 5 && !memcmp(arch.ptr, "gemma", 5)) ||
                                      (arch.len == 6 && (!memcmp(arch.ptr, "gemma2", 6) || !memcmp(arch.ptr, "gemma3", 6))));

    t->bos = get_id(f, "tokenizer.ggml.bos_token_id", t->n);
    t->eos = get_id(f, "tokenizer.ggml.eos_token_id", t->n);
    t->unk = get_id(f, "tokenizer.ggml.unknown_token_id", t->n);
    t->eot = get_id(f, "tokenizer.ggml.eot_token_id", t->n);
    t->eom = get_id(f, "tokenizer.ggml.eom_token_id", t->n);
    int b;
    t->add_bos = gguf_get_bool(f, "tokenizer.ggml.add_bos_token", &b) ? b : kind == TOK_SPM;
    t->add_eos = gguf_get_bool(f, "tokenizer.ggml.add_eos_token", &b) ? b : 0;
    t->add_space_prefix = gguf_get_bool(f, "tokenizer.ggml.add_space_prefix", &b) ? b : 1;
    if (kind == TOK_BPE || t->is_gemma) t->add_space_prefix = 0;

    int rc = kind == TOK_SPM ? tk_spm_load(t, f) : tk_bpe_load(t, f);
    if (rc) goto fail;

    if (tk_table_init(&t->vocab, (size_t)t->n)) goto fail;
    for (int i = 0; i < t->n; i++) tk_table_put(&t->vocab, t, i);
    if (kind == TOK_BPE && tk_bpe_load_merges(t, f)) goto fail;

    /* Added tokens, as transformers' GGUF loader registers them: control
     * tokens are special, user-defined ones are not (and are always matched);
     * the BOS/EOS/UNK/PAD tokens are special whatever their type. */
    if (trie_init(&t->added)) goto fail;
    int pad = get_id(f, "tokenizer.ggml.padding_token_id", t->n);
    int named[4] = {t->bos, t->eos, t->unk, pad};
    for (int k = 0; k < 4; k++)
        if (named[k] >= 0 && t->type[named[k]] != TT_USER) t->flags[named[k]] |= TF_SPECIAL;
    for (int i = 0; i < t->n; i++) {
        int ty = t->type[i];
        if (ty == TT_CONTROL) t->flags[i] |= TF_SPECIAL;
        if ((!(t->flags[i] & TF_SPECIAL) && ty != TT_USER) || t->piece[i].len == 0) continue;
        if (kind == TOK_BPE && !tk_bpe_is_bytelevel(t, t->piece[i].ptr, t->piece[i].len)) continue;
        if (ty == TT_USER && (t->flags[i] & TF_RESPELLED)) continue;
        t->flags[i] |= TF_ADDED;
        if (trie_add(&t->added, t->piece[i].ptr, t->piece[i].len, i)) goto fail;
    }

    if (t->eos >= 0) t->flags[t->eos] |= TF_EOG;
    if (t->eot >= 0) t->flags[t->eot] |= TF_EOG;
    if (t->eom >= 0) t->flags[t->eom] |= TF_EOG;
    for (int k = 0; g_eog_texts[k]; k++) {
        int id = tk_table_get(&t->vocab, t, g_eog_texts[k], strlen(g_eog_texts[k]));
        if (id >= 0 && (t->type[id] == TT_CONTROL || t->type[id] == TT_USER)) t->flags[id] |= TF_EOG;
    }
    return t;
fail:
    dp_tokenizer_free(t);
    return NULL;
}

void dp_tokenizer_free(dp_tokenizer *t) {
    if (!t) return;
    tk_bpe_free(t);
    free(t->piece);
    free(t->type);
    free(t->vocab.slot);
    free(t->respelled);
    free(t->respelled_ids);
    free(t->respelled_orig);
    free(t->score_rank);
    free(t->joiners);
    trie_free(&t->added);
    free(t->flags);
    free(t);
}

int dp_tokenizer_n_vocab(const dp_tokenizer *t) { return t->n; }
int dp_tokenizer_bos(const dp_tokenizer *t) { return t->bos; }
int dp_tokenizer_eos(const dp_tokenizer *t) { return t->eos; }
int dp_tokenizer_add_bos(const dp_tokenizer *t) { return t->add_bos && t->bos >= 0; }
int dp_tokenizer_is_eog(const dp_tokenizer *t, int32_t tok) { return tok >= 0 && tok < t->n && (t->flags[tok] & TF_EOG); }

/* -------------------------------------------------------------- encoding */

static int encode_segment(const dp_tokenizer *t, tk_work *w, const char *s, size_t n, int at_start) {
    if (n == 0) return 0;
    return t->kind == TOK_SPM ? tk_spm_encode_segment(t, w, s, n, at_start) : tk_bpe_encode_segment(t, w, s, n);
}

int dp_tokenizer_encode(const dp_tokenizer *t, const char *text, size_t len, int add_bos, int parse_special,
                        int32_t *out, int cap) {
    if (!text && len) return dp_set_error(DP_ERR_ARG, "dp_tokenize: text is NULL");
    if (cap < 0 || (cap > 0 && !out)) return dp_set_error(DP_ERR_ARG, "dp_tokenize: bad output buffer");
    long bad = tk_utf8_validate(text, len);
    if (bad >= 0) return dp_set_error(DP_ERR_ARG, "text is not valid UTF-8 (byte offset %ld)", bad);
    tk_work w;
    memset(&w, 0, sizeof w);
    w.out = out;
    w.out_cap = cap;
    int rc = 0;
    if (add_bos && t->add_bos && t->bos >= 0) tk_emit(&w, t->bos);
    size_t seg = 0, i = 0;
    while (i < len && rc == 0) {
        size_t end = 0;
        int id = trie_longest(&t->added, text, len, i, &end);
        if (id < 0) {
            i++;
            continue;
        }
        if ((t->flags[id] & TF_SPECIAL) && !parse_special) { /* left as text; the match still consumes it */
            i = end;
            continue;
        }
        rc = encode_segment(t, &w, text + seg, i - seg, seg == 0);
        tk_emit(&w, id);
        seg = i = end;
    }
    if (rc == 0) rc = encode_segment(t, &w, text + seg, len - seg, seg == 0);
    if (rc == 0 && add_bos && t->add_eos && t->eos >= 0) tk_emit(&w, t->eos);
    free(w.sym);
    free(w.heap);
    free(w.ids);
    free(w.wc.slot);
    free(w.wc.words);
    free(w.wc.ids);
    free(w.buf);
    free(w.buf2);
    if (rc) return rc;
    if (w.out_n < 0) return dp_set_error(DP_ERR_ARG, "dp_tokenize: too many tokens");
    return w.out_n;
}

/* -------------------------------------------------------------- decoding */

int tk_token_bytes(const dp_tokenizer *t, int32_t tok, int render_special, char *buf, int cap) {
    if (tok < 0 || tok >= t->n) return 0;
    int ty = t->type[tok];
    if ((ty == TT_CONTROL || ty == TT_UNUSED) && !render_special) return 0;
    return t->kind == TOK_SPM ? tk_spm_piece_bytes(t, tok, buf, cap) : tk_bpe_piece_bytes(t, tok, buf, cap);
}

/* ------------------------------------------------------ public wrappers */

int dp_tokenize(const dp_model *m, const char *text, size_t len, int add_bos, int parse_special, int32_t *out,
                int cap) {
    if (!m) return dp_set_error(DP_ERR_ARG, "dp_tokenize: no model");
    return dp_tokenizer_encode(m->tok, text, len, add_bos, parse_special, out, cap);
}

int dp_token_to_bytes(const dp_model *m, int32_t tok, int render_special, char *buf, int cap) {
    if (tok < 0 || tok >= m->tok->n) return dp_set_error(DP_ERR_ARG, "token id %d is outside the vocabulary", tok);
    return tk_token_bytes(m->tok, tok, render_special, buf, cap);
}

const char *dp_token_piece(const dp_model *m, int32_t tok, size_t *len) {
    const dp_tokenizer *t = m->tok;
    if (tok < 0 || tok >= t->n) {
        *len = 0;
        return "";
    }
    gguf_str p = t->piece[tok];
    if (t->flags[tok] & TF_RESPELLED)
        for (int i = 0; i < t->n_respelled; i++)
            if (t->respelled_ids[i] == tok) p = t->respelled_orig[i];
    *len = p.len;
    return p.ptr;
}

int32_t dp_token_lookup(const dp_model *m, const char *piece, size_t len) {
    const dp_tokenizer *t = m->tok;
    for (int i = 0; i < t->n_respelled; i++)
        if (t->respelled_orig[i].len == len && !memcmp(t->respelled_orig[i].ptr, piece, len)) return t->respelled_ids[i];
    int id = tk_table_get(&t->vocab, t, piece, len);
    if (id >= 0 && (t->flags[id] & TF_RESPELLED)) return -1; /* only the file's spelling */
    return id;
}

int dp_token_is_eog(const dp_model *m, int32_t tok) { return dp_tokenizer_is_eog(m->tok, tok); }
