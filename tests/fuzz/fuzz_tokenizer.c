#define _GNU_SOURCE
/* libFuzzer target: the tokenizers. Input: one byte choosing the
 * vocabulary (SentencePiece and byte-level BPE, tiny and real ones) and
 * add_bos, then the text. The text is encoded without and with special
 * parsing, then decoded. Checked every time: ids lie in the vocabulary; a
 * short buffer gets the same prefix and the full count; every token has
 * bytes; text is refused exactly when it is not UTF-8. Where the vocabulary
 * can spell every byte of the text (SentencePiece: a <0xNN> token each;
 * byte-level BPE: its alphabet character each) and the text is valid UTF-8,
 * NFC, and without U+2581 for SentencePiece (the tokenizers rewrite those by
 * design), decoding without special parsing gives the text back exactly,
 * less a leading space where Metaspace drops it (as transformers does). */
#include <stdio.h>
#include <string.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>

#include "fuzzlib.h"
#include "testmodel.h"

static fz_vocab g_vocab[] = {
    {"gemma3-tiny (spm)", "fixture", "tests/fixtures/models/gemma3-tiny.gguf", NULL},
    {"llama-tiny (spm)", "fixture", "tests/fixtures/models/llama-tiny.gguf", NULL},
    {"qwen2-tiny (bpe)", "fixture", "tests/fixtures/models/qwen2-tiny.gguf", NULL},
    {"qwen2 (bpe)", "shared", "qwen2-tokenizer-tiny.gguf", NULL},
    {"llama3 (bpe)", "shared", "llama3-tokenizer-tiny.gguf", NULL},
    {"gemma3 (spm)", "model", "gemma-3-270m-q4_k_m.gguf", NULL},
    {"smollm2 (bpe)", "model", "SmolLM2-135M-Instruct.Q4_1.gguf", NULL},
};
enum { N_VOCAB = sizeof g_vocab / sizeof g_vocab[0] };

typedef struct {
    dp_model *m;
    int spm;
    uint8_t spells[256];     /* the byte has its own token (<0xNN> or its byte-level character) */
    int n_spelled;
} vocab;
static vocab g_loaded[N_VOCAB];
static int g_n;

static void classify(vocab *v) {
    char s[8];
    int spm_bytes = 0, bpe_bytes = 0;
    uint8_t spm[256], bpe[256];
    for (int b = 0; b < 256; b++) {
        snprintf(s, sizeof s, "<0x%02X>", b);
        spm_bytes += spm[b] = dp_token_lookup(v->m, s, strlen(s)) >= 0;
        unsigned c = tm_bytelevel_char(b);
        int n = c < 0x80 ? (s[0] = (char)c, 1) : (s[0] = (char)(0xC0 | c >> 6), s[1] = (char)(0x80 | (c & 0x3F)), 2);
        bpe_bytes += bpe[b] = dp_token_lookup(v->m, s, (size_t)n) >= 0;
    }
    v->spm = spm_bytes > 0 || dp_token_lookup(v->m, "\xe2\x96\x81", 3) >= 0;
    memcpy(v->spells, v->spm ? spm : bpe, 256);
    v->n_spelled = v->spm ? spm_bytes : bpe_bytes;
}

static int spellable(const vocab *v, const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!v->spells[(unsigned char)s[i]]) return 0;
    return 1;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fz_load_vocabs(g_vocab, N_VOCAB);
    for (int i = 0; i < N_VOCAB; i++)
        if (g_vocab[i].m) {
            g_loaded[g_n].m = g_vocab[i].m;
            classify(&g_loaded[g_n]);
            fprintf(stderr, "fuzz: vocabulary %d: %s, %s, %d of 256 bytes spelled\n", g_n, g_vocab[i].name,
                    g_loaded[g_n].spm ? "sentencepiece" : "byte-level", g_loaded[g_n].n_spelled);
            g_n++;
        }
    if (!g_n) {
        fprintf(stderr, "fuzz: no vocabulary could be loaded\n");
        return 1;
    }
    return 0;
}

/* 1 valid UTF-8 and NFC, 0 valid but not NFC, -1 not UTF-8 (ICU decides,
 * as the tokenizers' own NFC uses it). */
static int utf8_state(const char *s, size_t n) {
    UErrorCode e = U_ZERO_ERROR;
    int32_t len = 0;
    u_strFromUTF8(NULL, 0, &len, s, (int32_t)n, &e);
    if (e != U_BUFFER_OVERFLOW_ERROR && U_FAILURE(e)) return -1;
    UChar *u = malloc(sizeof(UChar) * (size_t)(len + 1));
    e = U_ZERO_ERROR;
    u_strFromUTF8(u, len + 1, NULL, s, (int32_t)n, &e);
    int state = U_SUCCESS(e) ? 0 : -1;
    if (state == 0) {
        const UNormalizer2 *nfc = unorm2_getNFCInstance(&e);
        state = U_SUCCESS(e) && unorm2_isNormalized(nfc, u, len, &e) && U_SUCCESS(e);
    }
    free(u);
    return state;
}

/* NULL when the text is refused, which must be exactly when it is not UTF-8. */
static int32_t *encode(const vocab *v, const char *text, size_t len, int utf8, int add_bos, int special, int *n_out) {
    int n = dp_tokenize(v->m, text, len, add_bos, special, NULL, 0);
    if ((n < 0) != (utf8 < 0)) {
        fprintf(stderr, "%s UTF-8 %s: %s\n", utf8 < 0 ? "invalid" : "valid", n < 0 ? "refused" : "accepted",
                n < 0 ? dp_last_error() : "");
        abort();
    }
    if (n < 0) return NULL;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)(n + 1));
    if (dp_tokenize(v->m, text, len, add_bos, special, ids, n) != n) abort();
    int n_voc = dp_model_get_info(v->m)->n_vocab;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= n_voc) abort();
    if (n > 1) { /* a short buffer: the same prefix, the full count */
        int half = n / 2;
        int32_t *part = malloc(sizeof(int32_t) * (size_t)half);
        if (dp_tokenize(v->m, text, len, add_bos, special, part, half) != n) abort();
        if (memcmp(part, ids, sizeof(int32_t) * (size_t)half)) abort();
        free(part);
    }
    *n_out = n;
    return ids;
}

/* Streaming decode of ids; returns the malloc'ed text and its length. */
static char *decode(const vocab *v, const int32_t *ids, int n, int render_special, size_t *len) {
    dp_detok *d = dp_detok_new(v->m, render_special);
    if (!d) abort();
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    char piece[512];
    for (int i = 0; i <= n; i++) {
        int k = i < n ? dp_detok_push(d, ids[i], piece, sizeof piece) : dp_detok_flush(d, piece, sizeof piece);
        if (k < 0 || k > (int)sizeof piece) abort();
        if (used + (size_t)k > cap) out = realloc(out, cap = 2 * (used + (size_t)k));
        memcpy(out + used, piece, (size_t)k);
        used += (size_t)k;
        if (i < n) {
            int b = dp_token_to_bytes(v->m, ids[i], render_special, piece, sizeof piece);
            if (b < 0) abort();
        }
    }
    dp_detok_free(d);
    *len = used;
    return out;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const vocab *v = &g_loaded[(data[0] & 15) % g_n];
    int add_bos = (data[0] >> 4) & 1;
    /* exactly the text's bytes on the heap, so over-reads are seen */
    size_t len = size - 1;
    char *text = (char *)fz_copy(data + 1, len);

    int utf8 = utf8_state(text, len);
    int n;
    int32_t *ids = encode(v, text, len, utf8, add_bos, 0, &n);
    if (ids) {
        size_t dlen;
        char *back = decode(v, ids, n, 0, &dlen);
        int check = spellable(v, text, len) && !add_bos && utf8 == 1 && !(v->spm && memmem(text, len, "\xe2\x96\x81", 3));
        /* Metaspace (add_space_prefix) prepends no space to a text that
         * starts with one, and its decoder drops the first: transformers
         * loses that space too */
        int same = (dlen == len && !memcmp(back, text, len)) ||
                   (v->spm && len && text[0] == ' ' && dlen == len - 1 && !memcmp(back, text + 1, dlen));
        if (check && !same) {
            fprintf(stderr, "round trip failed: %zu bytes in, %zu out: '%.*s' -> '%.*s'\n", len, dlen, (int)len, text,
                    (int)dlen, back);
            abort();
        }
        free(back);
        free(ids);
        ids = encode(v, text, len, utf8, add_bos, 1, &n);
        back = decode(v, ids, n, 1, &dlen);
        free(back);
        free(ids);
    }
    free(text);
    return 0;
}
