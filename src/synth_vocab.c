/* Synthetic vocabularies for dp_synth: a valid tokenizer of exactly n tokens
 * in the style the real model family uses.
 *
 *  SPM ("llama" tokenizer model: Gemma 3, Llama 2): control tokens, the 256
 *  byte-fallback tokens <0x00>..<0xFF>, then pieces with descending scores.
 *  GPT-2 byte-level BPE ("gpt2": Qwen2, Llama 3): the 256 byte characters of
 *  GPT-2's byte-to-unicode table, merged pieces with their merge rules, then
 *  the special tokens at the end (as in the real files).
 *
 * Pieces are made breadth-first: start from the space marker and a..z, and
 * extend every piece by one letter; a piece is its prefix plus one letter,
 * so every piece is unique and every merge "prefix letter" joins two tokens
 * that already exist. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"
#include "util.h"

typedef struct {
    char **s;
    size_t *len;
    int n, cap;
} strlist;

static int sl_push(strlist *l, const char *s, size_t n) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 1024;
        char **ns = realloc(l->s, sizeof(char *) * (size_t)cap);
        if (!ns) return -1;
        l->s = ns;
        size_t *nl = realloc(l->len, sizeof(size_t) * (size_t)cap);
        if (!nl) return -1;
        l->len = nl;
        l->cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c) return -1;
    memcpy(c, s, n);
    c[n] = 0;
    l->s[l->n] = c;
    l->len[l->n] = n;
    l->n++;
    return 0;
}

static void sl_free(strlist *l) {
    for (int i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    free(l->len);
}

static size_t utf8_put(char *o, unsigned cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    o[0] = (char)(0xE0 | (cp >> 12));
    o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
    o[2] = (char)(0x80 | (cp & 0x3F));
    return 3;
}

/* GPT-2's byte-to-unicode table: printable bytes map to themselves, the
 * others to 256, 257, ... in byte order. Returns the codepoint of byte b. */
static unsigned gpt2_byte_cp(int b) {
    int printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    if (printable) return (unsigned)b;
    unsigned k = 256;
    for (int i = 0; i < b; i++)
        if (!((i >= 33 && i <= 126) || (i >= 161 && i <= 172) || (i >= 174 && i <= 255))) k++;
    return k;
}

/* Appends pieces (breadth-first, see the top) until toks holds `until`
 * tokens. merges (may be NULL) gets "prefix letter" for each new piece. */
static int grow_pieces(strlist *toks, strlist *merges, const char *space, int until) {
    strlist pref = {0};
    int rc = 0;
    char buf[256];
    rc |= sl_push(&pref, space, strlen(space));
    for (char c = 'a'; c <= 'z'; c++) rc |= sl_push(&pref, &c, 1);
    for (int q = 0; !rc && toks->n < until && q < pref.n; q++) {
        for (char c = 'a'; c <= 'z' && toks->n < until && !rc; c++) {
            size_t n = pref.len[q];
            if (n + 2 > sizeof buf) break;
            memcpy(buf, pref.s[q], n);
            buf[n] = c;
            rc |= sl_push(toks, buf, n + 1);
            rc |= sl_push(&pref, buf, n + 1);
            if (merges) {
                memcpy(buf, pref.s[q], n);
                buf[n] = ' ';
                buf[n + 1] = c;
                rc |= sl_push(merges, buf, n + 2);
            }
        }
    }
    sl_free(&pref);
    return rc;
}

static int write_spm(gguf_writer *w, const synth_preset *pr, int n) {
    strlist toks = {0};
    int gemma = strncmp(pr->arch, "gemma", 5) == 0;
    static const char *gemma_sp[] = {"<pad>", "<eos>", "<bos>", "<unk>", "<mask>", "<start_of_turn>", "<end_of_turn>"};
    static const char *llama_sp[] = {"<unk>", "<s>", "</s>"};
    const char **sp = gemma ? gemma_sp : llama_sp;
    int nsp = gemma ? 7 : 3, rc = 0;
    for (int i = 0; i < nsp; i++) rc |= sl_push(&toks, sp[i], strlen(sp[i]));
    for (int b = 0; b < 256; b++) {
        char s[8];
        snprintf(s, sizeof s, "<0x%02X>", b);
        rc |= sl_push(&toks, s, 6);
    }
    /* single-character pieces, then the breadth-first pieces */
    rc |= sl_push(&toks, "\xe2\x96\x81", 3);
    for (char c = 'a'; c <= 'z'; c++) rc |= sl_push(&toks, &c, 1);
    rc |= grow_pieces(&toks, NULL, "\xe2\x96\x81", n);
    if (rc || toks.n < n) {
        sl_free(&toks);
        return dp_set_error(rc ? DP_ERR_NOMEM : DP_ERR_ARG, "synth: cannot build a vocabulary of %d tokens", n);
    }
    float *scores = dp_malloc(sizeof(float) * (size_t)n);
    int32_t *types = dp_malloc(sizeof(int32_t) * (size_t)n);
    if (!scores || !types) {
        free(scores);
        free(types);
        sl_free(&toks);
        return DP_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) {
        int unk = gemma ? i == 3 : i == 0;
        types[i] = i < nsp ? (unk ? 2 : 3) : i < nsp + 256 ? 6 : 1;
        scores[i] = i < nsp + 256 ? 0.0f : -(float)(i - nsp - 256);
    }
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_str(w, "tokenizer.ggml.pre", "default");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks.s, toks.len, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n);
    if (gemma) {
        gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 2);
        gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 1);
        gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 3);
        gguf_w_u32(w, "tokenizer.ggml.padding_token_id", 0);
        gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", 0);
    } else {
        gguf_w_u32(w, "tokenizer.ggml.bos_token_id", 1);
        gguf_w_u32(w, "tokenizer.ggml.eos_token_id", 2);
        gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", 0);
    }
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 1);
    gguf_w_bool(w, "tokenizer.ggml.add_eos_token", 0);
    free(scores);
    free(types);
    sl_free(&toks);
    return DP_OK;
}

static int write_gpt2(gguf_writer *w, const synth_preset *pr, int n) {
    int qwen = strncmp(pr->arch, "qwen", 4) == 0;
    static const char *qwen_sp[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
    static const char *llama3_sp[] = {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                      "<|end_header_id|>", "<|eot_id|>"};
    const char **sp = qwen ? qwen_sp : llama3_sp;
    int nsp = qwen ? 3 : 5, rc = 0;
    strlist toks = {0}, merges = {0};
    /* the 256 byte characters in GPT-2 vocabulary order: printable bytes
     * first, then the remapped ones */
    for (int pass = 0; pass < 2; pass++)
        for (int b = 0; b < 256; b++) {
            unsigned cp = gpt2_byte_cp(b);
            if ((cp < 256) != (pass == 0)) continue;
            char s[4];
            rc |= sl_push(&toks, s, utf8_put(s, cp));
        }
    char space[4];
    space[utf8_put(space, gpt2_byte_cp(' '))] = 0;
    rc |= grow_pieces(&toks, &merges, space, n - nsp);
    for (int i = 0; i < nsp; i++) rc |= sl_push(&toks, sp[i], strlen(sp[i]));
    if (rc || toks.n != n) {
        sl_free(&toks);
        sl_free(&merges);
        return dp_set_error(rc ? DP_ERR_NOMEM : DP_ERR_ARG, "synth: cannot build a vocabulary of %d tokens", n);
    }
    int32_t *types = dp_malloc(sizeof(int32_t) * (size_t)n);
    if (!types) {
        sl_free(&toks);
        sl_free(&merges);
        return DP_ERR_NOMEM;
    }
    for (int i = 0; i < n; i++) types[i] = i >= n - nsp ? 3 : 1;
    int first_sp = n - nsp;
    gguf_w_str(w, "tokenizer.ggml.model", "gpt2");
    gguf_w_str(w, "tokenizer.ggml.pre", qwen ? "qwen2" : "llama-bpe");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)toks.s, toks.len, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n);
    gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)merges.s, merges.len, (uint64_t)merges.n);
    if (qwen) {
        gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)first_sp + 2);
        gguf_w_u32(w, "tokenizer.ggml.padding_token_id", (uint32_t)first_sp);
        gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)first_sp);
        gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 0);
    } else {
        gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)first_sp);
        gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)first_sp + 4);
        gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 1);
    }
    free(types);
    sl_free(&toks);
    sl_free(&merges);
    return DP_OK;
}

int synth_vocab_write(gguf_writer *w, const synth_preset *pr, int n) {
    return pr->vocab == SYNTH_VOCAB_GPT2 ? write_gpt2(w, pr, n) : write_spm(w, pr, n);
}
