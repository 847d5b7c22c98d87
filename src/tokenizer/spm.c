/* SentencePiece-style vocabularies (tokenizer.ggml.model = "llama": Gemma,
 * Llama 2, TinyLlama), tokenized the way transformers' GGUF loader builds
 * them: spaces become U+2581 (Gemma: normalizer; others: Metaspace, with a
 * prefix U+2581 at the start of the text when add_space_prefix is set), the
 * whole segment is one word, characters missing from the vocabulary fall
 * back to <0xNN> byte tokens, and merges are ranked as described in
 * internal.h. */
#define _GNU_SOURCE
#include <stdlib.h>
#include <string.h>

#include "../util.h"
#include "internal.h"

static const char SPACE_MARK[] = "\xE2\x96\x81"; /* U+2581 */

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* "<0xNN>" with upper-case hex digits, as transformers formats them */
static int byte_piece_value(gguf_str p) {
    if (p.len != 6 || memcmp(p.ptr, "<0x", 3) || p.ptr[5] != '>') return -1;
    int hi = hexval(p.ptr[3]), lo = hexval(p.ptr[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

static int count_chars(const char *s, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += ((unsigned char)s[i] & 0xC0) != 0x80;
    return c;
}

/* Gemma files store the tokens for runs of 2..31 spaces with real spaces;
 * transformers renames every all-whitespace token containing a space to a
 * run of U+2581 of the same length (in code points). */
/* The code points of an all-whitespace piece containing a space; 0 for
 * any other piece. */
static int space_run_len(gguf_str p) {
    if (!p.len || !memchr(p.ptr, ' ', p.len)) return 0;
    int nch = 0;
    for (size_t j = 0; j < p.len; nch++) {
        int adv;
        if (!tk_py_isspace(tk_utf8_decode(p.ptr + j, p.len - j, &adv))) return 0;
        j += (size_t)adv;
    }
    return nch;
}

static int respell_gemma(dp_tokenizer *t) {
    size_t bytes = 0;
    int count = 0;
    for (int i = 0; i < t->n; i++) {
        int nch = space_run_len(t->piece[i]);
        if (!nch) continue;
        count++;
        bytes += 3 * (size_t)nch;
    }
    if (!count) return 0;
    t->respelled = malloc(bytes);
    t->respelled_ids = malloc(sizeof(int32_t) * (size_t)count);
    t->respelled_orig = malloc(sizeof(gguf_str) * (size_t)count);
    if (!t->respelled || !t->respelled_ids || !t->respelled_orig)
        return dp_set_error(DP_ERR_NOMEM, "out of memory loading the tokenizer");
    char *o = t->respelled;
    for (int i = 0; i < t->n; i++) {
        gguf_str p = t->piece[i];
        int nch = space_run_len(p);
        if (!nch) continue;
        t->respelled_ids[t->n_respelled] = i;
        t->respelled_orig[t->n_respelled++] = p;
        t->flags[i] |= TF_RESPELLED;
        t->piece[i].ptr = o;
        t->piece[i].len = 3 * (uint64_t)nch;
        for (int k = 0; k < nch; k++, o += 3) memcpy(o, SPACE_MARK, 3);
    }
    return 0;
}

typedef struct {
    float score;
    int32_t id;
} score_id;

static int cmp_score_desc(const void *a, const void *b) {
    const score_id *x = a, *y = b;
    if (x->score != y->score) return x->score > y->score ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Characters X such that some token contains X immediately followed by
 * U+2581. A merge can only join two symbols across a U+2581 that follows
 * such a character (or another U+2581), so the text may be cut into words
 * before every other U+2581 without changing the result; words repeat, and
 * are cached. */
static int find_joiners(dp_tokenizer *t) {
    size_t cap = 0;
    for (int i = 0; i < t->n; i++) {
        gguf_str p = t->piece[i];
        for (const char *q = p.ptr + 1; p.len >= 4 && q + 3 <= p.ptr + p.len;) {
            q = memmem(q, (size_t)(p.ptr + p.len - q), SPACE_MARK, 3);
            if (!q) break;
            const char *c = q - 1; /* start of the previous character */
            while (c > p.ptr && ((unsigned char)*c & 0xC0) == 0x80) c--;
            int adv;
            uint32_t cp = tk_utf8_decode(c, (size_t)(q - c), &adv);
            if (cp != 0x2581) {
                int seen = 0;
                for (int k = 0; k < t->n_joiners; k++) seen |= t->joiners[k] == cp;
                if (!seen) {
                    if (tk_grow((void **)&t->joiners, &cap, (size_t)t->n_joiners + 1, sizeof(uint32_t))) return -1;
                    t->joiners[t->n_joiners++] = cp;
                }
            }
            q += 3;
        }
    }
    if (t->n_joiners > 1) qsort(t->joiners, (size_t)t->n_joiners, sizeof(uint32_t), cmp_u32);
    return 0;
}

int tk_spm_load(dp_tokenizer *t, const gguf_file *f) {
    t->score_rank = malloc(sizeof(uint32_t) * (size_t)t->n);
    if (!t->score_rank) return dp_set_error(DP_ERR_NOMEM, "out of memory loading the tokenizer");
    if (t->is_gemma) {
        /* transformers ranks Gemma merges by token position: the file's
         * scores do not follow the merge order */
        for (int i = 0; i < t->n; i++) t->score_rank[i] = (uint32_t)i;
        if (respell_gemma(t)) return -1;
    } else {
        const gguf_kv *sc = gguf_find_kv(f, "tokenizer.ggml.scores");
        if (!sc || sc->type != GGUF_ARRAY || sc->n != (uint64_t)t->n || !gguf_vtype_size(sc->arr_type))
            return dp_set_error(DP_ERR_FORMAT, "%s: SPM tokenizer needs tokenizer.ggml.scores with %d numbers", f->path,
                                t->n);
        score_id *v = malloc(sizeof *v * (size_t)t->n);
        if (!v) return dp_set_error(DP_ERR_NOMEM, "out of memory loading the tokenizer");
        for (int i = 0; i < t->n; i++) v[i] = (score_id){(float)gguf_arr_num(sc, (uint64_t)i), i};
        qsort(v, (size_t)t->n, sizeof *v, cmp_score_desc);
        uint32_t r = 0;
        for (int i = 0; i < t->n; i++) {
            if (i > 0 && v[i].score != v[i - 1].score) r++;
            t->score_rank[v[i].id] = r;
        }
        free(v);
    }
    if (find_joiners(t)) return -1;
    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    for (int i = 0; i < t->n; i++) {
        int b = byte_piece_value(t->piece[i]);
        if (b >= 0) t->byte_tok[b] = i; /* a later duplicate wins, like the vocabulary */
    }
    return 0;
}

static uint64_t spm_rank(const dp_tokenizer *t, tk_work *w, const tk_sym *l, const tk_sym *r, int32_t *result) {
    int id;
    size_t n = (size_t)l->len + r->len;
    if (l->s + l->len == r->s) {
        id = tk_table_get(&t->vocab, t, l->s, n);
    } else {
        if (tk_grow((void **)&w->buf2, &w->buf2_cap, n, 1)) return UINT64_MAX;
        memcpy(w->buf2, l->s, l->len);
        memcpy(w->buf2 + l->len, r->s, r->len);
        id = tk_table_get(&t->vocab, t, w->buf2, n);
    }
    if (id < 0) return UINT64_MAX;
    *result = id;
    uint64_t ll = l->nch > 4095 ? 4095 : l->nch, rl = r->nch > 4095 ? 4095 : r->nch;
    return (uint64_t)t->score_rank[id] << 44 | (4095 - ll) << 32 | (4095 - rl) << 20 | (uint64_t)id;
}

static int spm_word(const dp_tokenizer *t, tk_work *w, const char *s, size_t n);

int tk_spm_encode_segment(const dp_tokenizer *t, tk_work *w, const char *s, size_t n, int at_start) {
    if (tk_grow((void **)&w->buf, &w->buf_cap, 3 * n + 4, 1)) return -1;
    size_t bl = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(w->buf + bl, SPACE_MARK, 3);
            bl += 3;
        } else {
            w->buf[bl++] = s[i];
        }
    }
    if (t->add_space_prefix && at_start && !(bl >= 3 && !memcmp(w->buf, SPACE_MARK, 3))) {
        memmove(w->buf + 3, w->buf, bl);
        memcpy(w->buf, SPACE_MARK, 3);
        bl += 3;
    }
    size_t start = 0;
    for (size_t i = 3; i + 3 <= bl; i++) {
        if (memcmp(w->buf + i, SPACE_MARK, 3)) continue;
        const char *c = w->buf + i - 1;
        while (c > w->buf && ((unsigned char)*c & 0xC0) == 0x80) c--;
        int adv;
        uint32_t cp = tk_utf8_decode(c, (size_t)(w->buf + i - c), &adv);
        if (cp == 0x2581 || (t->n_joiners && bsearch(&cp, t->joiners, (size_t)t->n_joiners, sizeof(uint32_t), cmp_u32)))
            continue;
        if (spm_word(t, w, w->buf + start, i - start)) return -1;
        start = i;
        i += 2;
    }
    return spm_word(t, w, w->buf + start, bl - start);
}

static int spm_word_merge(const dp_tokenizer *t, tk_work *w, const char *s, size_t n) {
    int ns = 0, last_unk = 0;
    for (size_t i = 0; i < n;) {
        int k = tk_utf8_len((unsigned char)s[i]);
        int id = tk_table_get(&t->vocab, t, s + i, (size_t)k);
        if (id >= 0) {
            if (tk_add_sym(w, &ns, s + i, (uint32_t)k, 1, id)) return -1;
            last_unk = 0;
        } else {
            int all = 1;
            for (int j = 0; j < k; j++) all &= t->byte_tok[(unsigned char)s[i + j]] >= 0;
            if (all) {
                for (int j = 0; j < k; j++) {
                    int b = t->byte_tok[(unsigned char)s[i + j]];
                    if (tk_add_sym(w, &ns, t->piece[b].ptr, (uint32_t)t->piece[b].len,
                                   (uint32_t)count_chars(t->piece[b].ptr, t->piece[b].len), b))
                        return -1;
                }
                last_unk = 0;
            } else if (t->unk >= 0 && !last_unk) { /* consecutive unknowns fuse into one */
                gguf_str p = t->piece[t->unk];
                if (tk_add_sym(w, &ns, p.ptr, (uint32_t)p.len, (uint32_t)count_chars(p.ptr, p.len), t->unk)) return -1;
                last_unk = 1;
            }
        }
        i += (size_t)k;
    }
    return tk_merge_word(t, w, ns, spm_rank);
}

/* one word through the per-call cache */
static int spm_word(const dp_tokenizer *t, tk_work *w, const char *s, size_t n) {
    if (n == 0) return 0;
    word_cache *c = &w->wc;
    if ((c->used + 1) * 2 > c->cap) { /* grow the table */
        size_t ncap = c->cap ? 2 * c->cap : 1024;
        wc_entry *ns = calloc(ncap, sizeof *ns);
        if (!ns) return dp_set_error(DP_ERR_NOMEM, "out of memory (word cache)");
        for (size_t i = 0; i < c->cap; i++)
            if (c->slot[i].wlen) {
                size_t h = c->slot[i].h & (ncap - 1);
                while (ns[h].wlen) h = (h + 1) & (ncap - 1);
                ns[h] = c->slot[i];
            }
        free(c->slot);
        c->slot = ns;
        c->cap = ncap;
    }
    uint64_t h = tk_hash_bytes(s, n);
    size_t i = h & (c->cap - 1);
    for (; c->slot[i].wlen; i = (i + 1) & (c->cap - 1))
        if (c->slot[i].h == h && c->slot[i].wlen == n && !memcmp(c->words + c->slot[i].woff, s, n)) {
            for (uint32_t k = 0; k < c->slot[i].nids; k++) tk_emit(w, c->ids[c->slot[i].ioff + k]);
            return 0;
        }
    if (spm_word_merge(t, w, s, n)) return -1;
    for (size_t k = 0; k < w->n_ids; k++) tk_emit(w, w->ids[k]);
    if (n > 256 || c->words_n + n > UINT32_MAX / 2) return 0; /* long words are not worth keeping */
    if (tk_grow((void **)&c->words, &c->words_cap, c->words_n + n, 1) ||
        tk_grow((void **)&c->ids, &c->ids_cap, c->ids_n + w->n_ids, sizeof(int32_t)))
        return -1;
    c->slot[i] = (wc_entry){h, (uint32_t)c->words_n, (uint32_t)n, (uint32_t)c->ids_n, (uint32_t)w->n_ids};
    /* a word may have no ids at all (no piece, byte token or <unk> for it),
     * and then c->ids may still be NULL: no arithmetic on it */
    if (n) memcpy(c->words + c->words_n, s, n);
    if (w->n_ids) memcpy(c->ids + c->ids_n, w->ids, sizeof(int32_t) * w->n_ids);
    c->words_n += n;
    c->ids_n += w->n_ids;
    c->used++;
    return 0;
}

int tk_spm_piece_bytes(const dp_tokenizer *t, int tok, char *buf, int cap) {
    gguf_str p = t->piece[tok];
    int b = byte_piece_value(p);
    int n = 0;
    if (b >= 0) {
        if (cap > 0) buf[0] = (char)b;
        return 1;
    }
    for (size_t i = 0; i < p.len;) {
        if (i + 3 <= p.len && !memcmp(p.ptr + i, SPACE_MARK, 3)) {
            if (n < cap) buf[n] = ' ';
            n++;
            i += 3;
        } else {
            if (n < cap) buf[n] = p.ptr[i];
            n++;
            i++;
        }
    }
    return n;
}
