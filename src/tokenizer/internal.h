/* Private layout of the tokenizer, shared by the files of src/tokenizer/.
 *
 * Reference semantics are those of HuggingFace `tokenizers` as transformers
 * builds it from the same GGUF (or from the model's tokenizer.json):
 *   1. added tokens (control and BOS/EOS/UNK/PAD = special, user-defined = not) are cut
 *      out of the raw text, leftmost-longest; special ones only when asked;
 *   2. each remaining segment is normalized and pre-tokenized;
 *   3. each word goes through BPE: the adjacent pair with the best merge rank
 *      is merged first, ties go to the leftmost pair.
 * SPM ("llama") vocabularies have no merge list: a pair (l, r) merges when
 * l + r is a token; its rank orders by the score of l + r (Gemma: by token
 * position instead of score, as transformers does), then the longer l, then
 * the longer r, then the lower id.  Byte-level ("gpt2") vocabularies rank by
 * position in tokenizer.ggml.merges. */
#ifndef DP_TOKENIZER_IMPL_H
#define DP_TOKENIZER_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "tokenizer.h"

enum { TT_NORMAL = 1, TT_UNKNOWN = 2, TT_CONTROL = 3, TT_USER = 4, TT_UNUSED = 5, TT_BYTE = 6 };
enum { TOK_SPM = 1, TOK_BPE = 2 };
enum { PRE_GPT2 = 1, PRE_LLAMA3, PRE_QWEN2 };

/* open-addressing string -> id table; keys point into the file mapping */
typedef struct {
    uint64_t *slot;          /* hash tag << 32 | (id + 1), 0 = empty */
    uint32_t mask;
} str_table;

/* (left id, right id) -> (rank, result id) for byte-level merges */
typedef struct {
    uint64_t *key;           /* (l << 32 | r) + 1, 0 = empty */
    uint32_t *rank;
    int32_t *result;
    uint32_t mask;
} pair_table;

/* trie over the bytes of the added tokens, transitions in a hash */
typedef struct {
    int32_t *node_tok;       /* token ending at node, -1 none */
    uint32_t n_nodes, cap_nodes;
    uint64_t *tkey;          /* (node << 8 | byte) + 1 */
    uint32_t *tval;          /* child node */
    uint32_t tmask, t_used;
    uint8_t first[256];      /* bytes that start some added token */
} added_trie;

typedef struct {
    const char *s;           /* piece text (normalized input or a vocab piece) */
    uint32_t len;            /* bytes */
    uint32_t nch;            /* code points */
    int32_t id;
    int32_t prev, next;
} tk_sym;

typedef struct {
    uint64_t key;
    uint32_t pos;
    int32_t result;
} tk_merge;

/* per-call cache of word -> ids (SPM words between U+2581 boundaries) */
typedef struct {
    uint64_t h;
    uint32_t woff, wlen, ioff, nids;
} wc_entry;

typedef struct {
    wc_entry *slot;
    size_t cap, used;
    char *words;
    size_t words_n, words_cap;
    int32_t *ids;
    size_t ids_n, ids_cap;
} word_cache;

/* per-call scratch, grown as needed */
typedef struct {
    tk_sym *sym;
    size_t sym_cap;
    tk_merge *heap;
    size_t heap_n, heap_cap;
    char *buf;               /* normalized text */
    size_t buf_cap;
    char *buf2;
    size_t buf2_cap;
    int32_t *out;
    int out_n, out_cap;      /* written ids; out_n counts all (may exceed cap) */
    int32_t *ids;            /* result of tk_merge_word */
    size_t n_ids, ids_cap;
    word_cache wc;
} tk_work;

struct dp_tokenizer {
    int kind;                /* TOK_SPM / TOK_BPE */
    int n;
    gguf_str *piece;         /* as stored in the file */
    uint8_t *type;
    str_table vocab;         /* lookup by piece (Gemma: also the ▁-respelled space runs) */
    char *respelled;         /* storage for respelled pieces */
    int bos, eos, unk, eot, eom;
    int add_bos, add_eos;
    int add_space_prefix;    /* SPM: Metaspace prepend (non-Gemma) */
    int is_gemma;
    /* SPM */
    uint32_t *score_rank;    /* dense rank of the score, 0 = best */
    int32_t byte_tok[256];   /* <0xNN> tokens, -1 absent */
    uint32_t *joiners;       /* sorted code points X such that a token contains "X\u2581" */
    int n_joiners;
    /* BPE */
    int pre;
    int ignore_merges;
    int nfc;
    pair_table merges;
    int32_t byte_id[256];    /* token of the byte-level char of each byte */
    int16_t char_byte[512];  /* byte-level char (code point < 512) -> byte, -1 none */
    uint16_t byte_cp[256];   /* byte -> its byte-level char */
    void *re_code;           /* pcre2_code_8 * */
    /* added tokens */
    added_trie added;
    uint8_t *flags;          /* TF_* per token */
    /* Gemma: space-run tokens stored with real spaces are renamed to U+2581
     * runs (as transformers does); piece[] holds the new spelling */
    int n_respelled;
    int32_t *respelled_ids;
    gguf_str *respelled_orig;
};

enum { TF_ADDED = 1, TF_EOG = 2, TF_RESPELLED = 4, TF_SPECIAL = 8 };

/* text.c: UTF-8 and Unicode, used by every tokenizer file (and chat.c) */
int tk_utf8_len(unsigned char c);                          /* 0 = invalid lead */
long tk_utf8_validate(const char *s, size_t n);            /* -1 ok, else offset */
uint32_t tk_utf8_decode(const char *s, size_t n, int *adv); /* assumes valid */
int tk_utf8_encode(uint32_t cp, char *out);
int tk_py_isspace(uint32_t cp);                            /* Python str.isspace */
/* NFC of s[0..n) into *dst (malloc'ed / grown); returns the new length or -1. */
long tk_nfc(const char *s, size_t n, char **dst, size_t *cap);

/* common.c: the machinery spm.c, bpe.c and tokenizer.c share */
/* Grows *p (elements of elem bytes, capacity *cap) to hold need; 0 or an error code. */
int tk_grow(void **p, size_t *cap, size_t need, size_t elem);
uint64_t tk_hash_bytes(const char *s, size_t n);
/* The piece -> id table: sized for n pieces; put inserts tk->piece[id] (a
 * later duplicate replaces an earlier one); get returns the id or -1. */
int tk_table_init(str_table *t, size_t n);
void tk_table_put(str_table *t, const dp_tokenizer *tk, int32_t id);
int tk_table_get(const str_table *t, const dp_tokenizer *tk, const char *s, size_t n);
/* Appends an id to the call's output (counted even past its capacity). */
void tk_emit(tk_work *w, int32_t id);
/* Runs the BPE merge loop over w->sym[0..n) (linked in order); rank_fn gives
 * the merge key of two adjacent symbols (UINT64_MAX = no merge) and the
 * resulting token. The final ids go to w->ids[0..w->n_ids). */
typedef uint64_t (*tk_rank_fn)(const dp_tokenizer *t, tk_work *w, const tk_sym *l, const tk_sym *r, int32_t *result);
int tk_merge_word(const dp_tokenizer *t, tk_work *w, int n, tk_rank_fn rank);
/* Appends a symbol linked after the previous one. */
int tk_add_sym(tk_work *w, int *n, const char *s, uint32_t len, uint32_t nch, int32_t id);

/* tokenizer.c: a token's bytes (control and unused tokens only with
 * render_special); at most cap are written, the full length is returned */
int tk_token_bytes(const dp_tokenizer *t, int32_t tok, int render_special, char *buf, int cap);

/* spm.c */
int tk_spm_load(dp_tokenizer *t, const gguf_file *f);
int tk_spm_encode_segment(const dp_tokenizer *t, tk_work *w, const char *s, size_t n, int at_start);
int tk_spm_piece_bytes(const dp_tokenizer *t, int tok, char *buf, int cap);

/* bpe.c */
int tk_bpe_load(dp_tokenizer *t, const gguf_file *f);
int tk_bpe_load_merges(dp_tokenizer *t, const gguf_file *f); /* after the vocabulary table */
void tk_bpe_free(dp_tokenizer *t);
int tk_bpe_encode_segment(const dp_tokenizer *t, tk_work *w, const char *s, size_t n);
int tk_bpe_piece_bytes(const dp_tokenizer *t, int tok, char *buf, int cap);
/* 1 when every code point of the piece is in the byte-level alphabet */
int tk_bpe_is_bytelevel(const dp_tokenizer *t, const char *s, size_t n);

#endif
