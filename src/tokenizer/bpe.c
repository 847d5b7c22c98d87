/* Byte-level BPE vocabularies (tokenizer.ggml.model = "gpt2": Qwen2/2.5,
 * Llama 3, SmolLM2, GPT-2). A segment is (Qwen2: NFC-normalized and) split
 * into words by the pre-tokenizer regex that tokenizer.ggml.pre names, each
 * word's bytes are mapped to the GPT-2 byte alphabet and merged by rank from
 * tokenizer.ggml.merges. The regexes are those of the HuggingFace
 * tokenizers (Oniguruma), run with PCRE2; Oniguruma's \s is the Unicode
 * White_Space property, spelled out below because PCRE2's \s differs (U+0085). */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "../util.h"
#include "internal.h"

#define WS "\\t\\n\\x0b\\f\\r\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}\\x{3000}"

/* GPT-2 / ByteLevel(use_regex=True) */
static const char RE_GPT2[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" WS "\\p{L}\\p{N}]+|[" WS "]+(?![^" WS
                              "])|[" WS "]+";
/* Llama 3 */
static const char RE_LLAMA3[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^" WS
                                "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";
/* Qwen2: as Llama 3 but single digits */
static const char RE_QWEN2[] = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^" WS
                               "\\p{L}\\p{N}]+[\\r\\n]*|[" WS "]*[\\r\\n]+|[" WS "]+(?![^" WS "])|[" WS "]+";

typedef struct {
    const char *name;
    int pre;
} pre_name;

static const pre_name g_pre[] = {
    {"default", PRE_GPT2},   {"gpt2", PRE_GPT2},       {"gpt-2", PRE_GPT2},       {"smollm", PRE_GPT2},
    {"llama-bpe", PRE_LLAMA3}, {"llama3", PRE_LLAMA3}, {"llama-v3", PRE_LLAMA3}, {"smaug-bpe", PRE_LLAMA3},
    {"qwen2", PRE_QWEN2},    {"deepseek-r1-qwen", PRE_QWEN2}, {NULL, 0},
};

/* GPT-2's bytes_to_unicode: printable Latin-1 maps to itself, the rest to
 * U+0100 upwards in byte order. */
static void byte_alphabet(uint32_t cp[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        cp[b] = printable ? (uint32_t)b : 256u + (uint32_t)n++;
    }
}

int tk_bpe_load(dp_tokenizer *t, const gguf_file *f) {
    gguf_str pre = {"default", 7};
    gguf_get_str(f, "tokenizer.ggml.pre", &pre);
    t->pre = 0;
    for (int i = 0; g_pre[i].name; i++)
        if (strlen(g_pre[i].name) == pre.len && !memcmp(g_pre[i].name, pre.ptr, pre.len)) t->pre = g_pre[i].pre;
    if (!t->pre)
        return dp_set_error(DP_ERR_FORMAT,
                            "%s: unsupported tokenizer.ggml.pre '%.*s' (supported: default, gpt2, gpt-2, smollm, "
                            "llama-bpe, llama3, llama-v3, smaug-bpe, qwen2, deepseek-r1-qwen)",
                            f->path, (int)(pre.len > 64 ? 64 : pre.len), pre.ptr);
    t->ignore_merges = t->pre == PRE_LLAMA3; /* as Llama 3's tokenizer.json */
    t->nfc = t->pre == PRE_QWEN2;            /* as Qwen2's tokenizer.json */
    const char *re = t->pre == PRE_GPT2 ? RE_GPT2 : t->pre == PRE_LLAMA3 ? RE_LLAMA3 : RE_QWEN2;
    /* \p{L}, \p{N} and the rest are the system PCRE2's Unicode tables (Debian 12's 10.42: Unicode 14). HF's
     * tokenizers know later versions, so a character assigned since (U+137F2, Unicode 16: a letter to HF,
     * unassigned here) can split its neighbours differently; every character of Unicode 14 matches. */
    int err;
    PCRE2_SIZE eoff;
    pcre2_code *code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &err, &eoff, NULL);
    if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return dp_set_error(DP_ERR_BACKEND, "PCRE2 cannot compile the pre-tokenizer regex: %s at %zu", (char *)msg,
                            (size_t)eoff);
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* falls back to the interpreter when JIT is unavailable */
    t->re_code = code;

    uint32_t cp[256];
    byte_alphabet(cp);
    for (int i = 0; i < 512; i++) t->char_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        t->char_byte[cp[b]] = (int16_t)b;
        t->byte_cp[b] = (uint16_t)cp[b];
    }
    return 0;
}

void tk_bpe_free(dp_tokenizer *t) {
    if (t->re_code) pcre2_code_free((pcre2_code *)t->re_code);
    free(t->merges.key);
    free(t->merges.rank);
    free(t->merges.result);
}

static uint32_t pair_hash(uint64_t k, uint32_t mask) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k & mask;
}

int tk_bpe_load_merges(dp_tokenizer *t, const gguf_file *f) {
    uint32_t cp[256];
    byte_alphabet(cp);
    for (int b = 0; b < 256; b++) {
        char u[4];
        int k = tk_utf8_encode(cp[b], u);
        t->byte_id[b] = tk_table_get(&t->vocab, t, u, (size_t)k);
    }
    const gguf_kv *mk = gguf_find_kv(f, "tokenizer.ggml.merges");
    if (!mk || mk->type != GGUF_ARRAY || mk->arr_type != GGUF_STRING)
        return dp_set_error(DP_ERR_FORMAT, "%s: byte-level BPE tokenizer without 'tokenizer.ggml.merges'", f->path);
    size_t cap = 16;
    while (cap < mk->n * 2) cap *= 2;
    pair_table *p = &t->merges;
    p->key = calloc(cap, sizeof *p->key);
    p->rank = malloc(cap * sizeof *p->rank);
    p->result = malloc(cap * sizeof *p->result);
    if (!p->key || !p->rank || !p->result) return dp_set_error(DP_ERR_NOMEM, "out of memory loading the merges");
    p->mask = (uint32_t)(cap - 1);
    char *tmp = NULL;
    size_t tcap = 0;
    for (uint64_t i = 0; i < mk->n; i++) {
        gguf_str m = gguf_arr_str(mk, i);
        const char *sp = memchr(m.ptr, ' ', m.len);
        if (!sp) continue;
        size_t la = (size_t)(sp - m.ptr), lb = m.len - la - 1;
        int a = tk_table_get(&t->vocab, t, m.ptr, la), b = tk_table_get(&t->vocab, t, sp + 1, lb);
        if (a < 0 || b < 0) continue;
        if (tk_grow((void **)&tmp, &tcap, la + lb, 1)) {
            free(tmp);
            return -1;
        }
        memcpy(tmp, m.ptr, la);
        memcpy(tmp + la, sp + 1, lb);
        int r = tk_table_get(&t->vocab, t, tmp, la + lb);
        if (r < 0) continue;
        uint64_t key = ((uint64_t)a << 32 | (uint32_t)b) + 1;
        uint32_t h = pair_hash(key, p->mask);
        while (p->key[h] && p->key[h] != key) h = (h + 1) & p->mask;
        p->key[h] = key; /* a repeated pair takes the later rank */
        p->rank[h] = (uint32_t)i;
        p->result[h] = r;
    }
    free(tmp);
    return 0;
}

static uint64_t bpe_rank(const dp_tokenizer *t, tk_work *w, const tk_sym *l, const tk_sym *r, int32_t *result) {
    (void)w;
    const pair_table *p = &t->merges;
    uint64_t key = ((uint64_t)l->id << 32 | (uint32_t)r->id) + 1;
    for (uint32_t h = pair_hash(key, p->mask); p->key[h]; h = (h + 1) & p->mask)
        if (p->key[h] == key) {
            *result = p->result[h];
            return p->rank[h];
        }
    return UINT64_MAX;
}

static int bpe_word(const dp_tokenizer *t, tk_work *w, const char *s, size_t n) {
    if (t->ignore_merges) { /* a word that is a token is taken whole */
        if (tk_grow((void **)&w->buf2, &w->buf2_cap, 2 * n, 1)) return -1;
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            k += (size_t)tk_utf8_encode(t->byte_cp[(unsigned char)s[i]], w->buf2 + k);
        }
        int id = tk_table_get(&t->vocab, t, w->buf2, k);
        if (id >= 0) {
            tk_emit(w, id);
            return 0;
        }
    }
    int ns = 0;
    for (size_t i = 0; i < n; i++) {
        int id = t->byte_id[(unsigned char)s[i]];
        if (id < 0) continue; /* no token for this byte: dropped, as tokenizers does without unk */
        if (tk_add_sym(w, &ns, s + i, 1, 1, id)) return -1;
    }
    if (tk_merge_word(t, w, ns, bpe_rank)) return -1;
    for (size_t i = 0; i < w->n_ids; i++) tk_emit(w, w->ids[i]);
    return 0;
}

static int needs_nfc(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] >= 0xCC) return 1; /* below U+0300 everything is NFC already */
    return 0;
}

int tk_bpe_encode_segment(const dp_tokenizer *t, tk_work *w, const char *s, size_t n) {
    if (t->nfc && needs_nfc(s, n)) {
        long k = tk_nfc(s, n, &w->buf, &w->buf_cap);
        if (k < 0) return DP_ERR_ARG;
        s = w->buf;
        n = (size_t)k;
    }
    pcre2_code *code = t->re_code;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    pcre2_match_context *mc = pcre2_match_context_create(NULL);
    pcre2_jit_stack *js = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, NULL);
    if (!md || !mc || !js) {
        pcre2_match_data_free(md);
        pcre2_match_context_free(mc);
        pcre2_jit_stack_free(js);
        return dp_set_error(DP_ERR_NOMEM, "out of memory for the pre-tokenizer");
    }
    pcre2_jit_stack_assign(mc, NULL, js);
    int rc = 0;
    size_t off = 0;
    while (off < n && rc == 0) {
        int m = pcre2_match(code, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, mc);
        if (m == PCRE2_ERROR_NOMATCH) {
            rc = bpe_word(t, w, s + off, n - off);
            break;
        }
        if (m < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(m, msg, sizeof msg);
            rc = dp_set_error(DP_ERR_BACKEND, "pre-tokenizer regex failed: %s", (char *)msg);
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (a > off) rc = bpe_word(t, w, s + off, a - off); /* text between matches stays a word */
        if (rc == 0 && b > a) rc = bpe_word(t, w, s + a, b - a);
        if (b == a) { /* an empty match cannot happen with these patterns; step over a character */
            int k = tk_utf8_len((unsigned char)s[a]);
            rc = rc ? rc : bpe_word(t, w, s + a, (size_t)(k ? k : 1));
            b = a + (size_t)(k ? k : 1);
        }
        off = b;
    }
    pcre2_match_data_free(md);
    pcre2_match_context_free(mc);
    pcre2_jit_stack_free(js);
    return rc;
}

int tk_bpe_is_bytelevel(const dp_tokenizer *t, const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        int adv;
        uint32_t c = tk_utf8_decode(s + i, n - i, &adv);
        if (c >= 512 || t->char_byte[c] < 0) return 0;
        i += (size_t)adv;
    }
    return 1;
}

int tk_bpe_piece_bytes(const dp_tokenizer *t, int tok, char *buf, int cap) {
    gguf_str p = t->piece[tok];
    int n = 0;
    if (!tk_bpe_is_bytelevel(t, p.ptr, p.len)) { /* e.g. an added token stored as plain text */
        for (size_t i = 0; i < p.len; i++, n++)
            if (n < cap) buf[n] = p.ptr[i];
        return n;
    }
    for (size_t i = 0; i < p.len; n++) {
        int adv;
        uint32_t c = tk_utf8_decode(p.ptr + i, p.len - i, &adv);
        if (n < cap) buf[n] = (char)t->char_byte[c];
        i += (size_t)adv;
    }
    return n;
}
