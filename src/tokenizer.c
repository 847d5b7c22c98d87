/* Tokenizer: loading from GGUF metadata, vocabulary lookup, added-token
 * matching, the shared BPE merge loop, and the public wrappers (dp_tokenize,
 * dp_token_*, dp_detok_*). The model-specific parts are in tokenizer_spm.c
 * (SentencePiece-style vocabularies) and tokenizer_bpe.c (byte-level BPE);
 * see tokenizer_impl.h for the reference semantics. */
#include "tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "tokenizer_impl.h"
#include "util.h"

/* ------------------------------------------------------------ utilities */

int tk_grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, nc * elem);
    if (!q) return dp_set_error(DP_ERR_NOMEM, "out of memory (%zu bytes)", nc * elem);
    *p = q;
    *cap = nc;
    return 0;
}

void tk_emit(tk_work *w, int32_t id) {
    if (w->out_n < w->out_cap) w->out[w->out_n] = id;
    w->out_n++;
}

uint64_t tk_hash_bytes(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, s, 8);
        h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
        h ^= h >> 31;
        s += 8;
        n -= 8;
    }
    uint64_t v = 0;
    memcpy(&v, s, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
    h ^= h >> 33; /* murmur3 finalizer: every output bit depends on every input bit */
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 33;
    return h;
}

static int table_init(str_table *t, size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    t->slot = calloc(cap, sizeof *t->slot);
    t->mask = (uint32_t)(cap - 1);
    return t->slot ? 0 : dp_set_error(DP_ERR_NOMEM, "out of memory for the vocabulary table");
}

/* A slot holds the upper 32 hash bits (so most misses never touch the
 * strings) and id + 1 (0 = empty). */
#define SLOT(h, id) (((h) & 0xFFFFFFFF00000000ull) | (uint64_t)((id) + 1))

/* Inserts id under its piece; a later duplicate replaces the earlier one (as
 * a Python dict built from the token list does). */
static void table_put(str_table *t, const dp_tokenizer *tk, int32_t id) {
    gguf_str k = tk->piece[id];
    uint64_t h = tk_hash_bytes(k.ptr, k.len);
    uint32_t i = (uint32_t)h & t->mask;
    while (t->slot[i]) {
        if ((t->slot[i] ^ h) >> 32 == 0) {
            gguf_str o = tk->piece[(uint32_t)t->slot[i] - 1];
            if (o.len == k.len && !memcmp(o.ptr, k.ptr, k.len)) break;
        }
        i = (i + 1) & t->mask;
    }
    t->slot[i] = SLOT(h, id);
}

int tk_table_get(const str_table *t, const dp_tokenizer *tk, const char *s, size_t n) {
    uint64_t h = tk_hash_bytes(s, n);
    uint32_t i = (uint32_t)h & t->mask;
    for (uint64_t v; (v = t->slot[i]); i = (i + 1) & t->mask) {
        if ((v ^ h) >> 32) continue;
        gguf_str o = tk->piece[(uint32_t)v - 1];
        if (o.len == n && !memcmp(o.ptr, s, n)) return (int)(uint32_t)v - 1;
    }
    return -1;
}

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

    if (table_init(&t->vocab, (size_t)t->n)) goto fail;
    for (int i = 0; i < t->n; i++) table_put(&t->vocab, t, i);
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

/* ---------------------------------------------------------- merge loop */

static int merge_less(const tk_merge *a, const tk_merge *b) {
    return a->key < b->key || (a->key == b->key && a->pos < b->pos);
}

static int heap_push(tk_work *w, tk_merge m) {
    if (tk_grow((void **)&w->heap, &w->heap_cap, w->heap_n + 1, sizeof(tk_merge))) return -1;
    size_t i = w->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_less(&m, &w->heap[p])) break;
        w->heap[i] = w->heap[p];
        i = p;
    }
    w->heap[i] = m;
    return 0;
}

static tk_merge heap_pop(tk_work *w) {
    tk_merge top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0, n = w->heap_n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && merge_less(&w->heap[c + 1], &w->heap[c])) c++;
        if (!merge_less(&w->heap[c], &last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (n) w->heap[i] = last;
    return top;
}

static int push_pair(const dp_tokenizer *t, tk_work *w, int li, tk_rank_fn rank) {
    tk_sym *l = &w->sym[li];
    if (l->next < 0) return 0;
    int32_t res;
    uint64_t key = rank(t, w, l, &w->sym[l->next], &res);
    if (key == UINT64_MAX) return 0;
    tk_merge m = {key, (uint32_t)li, res};
    return heap_push(w, m);
}

int tk_merge_word(const dp_tokenizer *t, tk_work *w, int n, tk_rank_fn rank) {
    w->n_ids = 0;
    if (n <= 0) return 0;
    w->heap_n = 0;
    for (int i = 0; i + 1 < n; i++)
        if (push_pair(t, w, i, rank)) return -1;
    while (w->heap_n) {
        tk_merge top = heap_pop(w);
        tk_sym *l = &w->sym[top.pos];
        if (l->id < 0 || l->next < 0) continue;
        tk_sym *r = &w->sym[l->next];
        int32_t res;
        uint64_t key = rank(t, w, l, r, &res);
        if (key != top.key || res != top.result) continue; /* stale entry */
        if (l->s + l->len == r->s) {
            l->len += r->len;
        } else {
            l->s = t->piece[res].ptr;
            l->len = (uint32_t)t->piece[res].len;
        }
        l->nch += r->nch;
        l->id = res;
        r->id = -1;
        l->next = r->next;
        if (l->next >= 0) w->sym[l->next].prev = (int32_t)top.pos;
        if (l->prev >= 0 && push_pair(t, w, l->prev, rank)) return -1;
        if (push_pair(t, w, (int)top.pos, rank)) return -1;
    }
    w->n_ids = 0;
    for (int i = 0; i >= 0; i = w->sym[i].next) {
        if (tk_grow((void **)&w->ids, &w->ids_cap, w->n_ids + 1, sizeof(int32_t))) return -1;
        w->ids[w->n_ids++] = w->sym[i].id;
    }
    return 0;
}

int tk_add_sym(tk_work *w, int *n, const char *s, uint32_t len, uint32_t nch, int32_t id) {
    if (tk_grow((void **)&w->sym, &w->sym_cap, (size_t)*n + 1, sizeof(tk_sym))) return -1;
    tk_sym *y = &w->sym[*n];
    y->s = s;
    y->len = len;
    y->nch = nch;
    y->id = id;
    y->prev = *n - 1;
    y->next = -1;
    if (*n > 0) w->sym[*n - 1].next = *n;
    (*n)++;
    return 0;
}

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

static int token_bytes(const dp_tokenizer *t, int32_t tok, int render_special, char *buf, int cap) {
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
    return token_bytes(m->tok, tok, render_special, buf, cap);
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

/* Streaming detokenizer: bytes are held back until they form complete UTF-8
 * sequences; a byte that can never complete one becomes U+FFFD. */
struct dp_detok {
    const dp_tokenizer *t;
    int special;
    int strip_space;         /* SPM with a space prefix: drop the first leading space */
    int emitted;
    unsigned char pend[8];
    int n_pend;
};

dp_detok *dp_detok_new(const dp_model *m, int render_special) {
    dp_detok *d = dp_calloc(1, sizeof *d);
    if (!d) return NULL;
    d->t = m->tok;
    d->special = render_special;
    d->strip_space = m->tok->kind == TOK_SPM && m->tok->add_space_prefix;
    return d;
}

static void put(char *buf, int cap, int *n, const char *s, int k) {
    for (int i = 0; i < k; i++, (*n)++)
        if (*n < cap) buf[*n] = s[i];
}

/* Number of bytes of s[0..n) that continue a sequence led by s[0] validly
 * (not counting the lead), and the full length it needs. */
static int valid_prefix(const unsigned char *s, int n, int *need) {
    int k = tk_utf8_len(s[0]);
    *need = k;
    if (k <= 1) return 0;
    int ok = 0;
    for (int j = 1; j < k && j < n; j++) {
        unsigned char c = s[j];
        int lo = 0x80, hi = 0xBF;
        if (j == 1) {
            if (s[0] == 0xE0) lo = 0xA0;
            else if (s[0] == 0xED) hi = 0x9F;
            else if (s[0] == 0xF0) lo = 0x90;
            else if (s[0] == 0xF4) hi = 0x8F;
        }
        if (c < lo || c > hi) break;
        ok++;
    }
    return ok;
}

/* Emits what is complete of pending + src; keeps an incomplete but still
 * valid tail (at most 3 bytes) unless flushing. */
static int detok_feed(dp_detok *d, const char *src, int k, int flush, char *buf, int cap) {
    int total = d->n_pend + k;
    unsigned char stack[512], *all = total <= (int)sizeof stack ? stack : malloc((size_t)total);
    if (!all) return dp_set_error(DP_ERR_NOMEM, "out of memory decoding a token");
    memcpy(all, d->pend, (size_t)d->n_pend);
    if (k) memcpy(all + d->n_pend, src, (size_t)k);
    d->n_pend = 0;
    int n = 0, i = 0;
    while (i < total) {
        int need, ok = valid_prefix(all + i, total - i, &need);
        if (need == 1) {
            if (!(d->strip_space && !d->emitted && all[i] == ' ')) put(buf, cap, &n, (const char *)all + i, 1);
            i++;
        } else if (need >= 2 && ok == need - 1) {
            put(buf, cap, &n, (const char *)all + i, need);
            i += need;
        } else if (need >= 2 && i + 1 + ok == total && !flush) {
            d->n_pend = total - i;
            memcpy(d->pend, all + i, (size_t)d->n_pend);
            break;
        } else {
            put(buf, cap, &n, "\xEF\xBF\xBD", 3);
            i += need >= 2 ? 1 + ok : 1;
        }
        d->emitted = 1;
    }
    if (all != stack) free(all);
    return n;
}

int dp_detok_push(dp_detok *d, int32_t tok, char *buf, int cap) {
    char small[256];
    int k = token_bytes(d->t, tok, d->special, small, sizeof small);
    if (k < 0) return k;
    char *src = small;
    if (k > (int)sizeof small) {
        src = malloc((size_t)k);
        if (!src) return dp_set_error(DP_ERR_NOMEM, "out of memory decoding a token");
        token_bytes(d->t, tok, d->special, src, k);
    }
    int n = detok_feed(d, src, k, 0, buf, cap);
    if (src != small) free(src);
    return n;
}

int dp_detok_flush(dp_detok *d, char *buf, int cap) { return detok_feed(d, "", 0, 1, buf, cap); }

void dp_detok_free(dp_detok *d) { free(d); }
