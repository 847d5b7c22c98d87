/* doppler: a small, traceable LLM inference engine for GGUF models.
 *
 * The public C API. The command-line tool uses only what is declared here.
 *
 * Conventions
 *  - Functions that can fail return NULL or a negative dp_status; the reason is
 *    a one-line message from dp_last_error() (per thread).
 *  - Token ids are int32_t. Positions count from 0 within a session.
 */
#ifndef DOPPLER_H
#define DOPPLER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DOPPLER_VERSION "0.1.0"

typedef enum {
    DP_OK = 0,
    DP_ERR_IO = -1,          /* file missing, unreadable, mmap failed */
    DP_ERR_FORMAT = -2,      /* malformed or unsupported model file */
    DP_ERR_ARG = -3,         /* bad argument from the caller */
    DP_ERR_CTX_FULL = -4,    /* evaluation would exceed the context size */
    DP_ERR_NOMEM = -5,       /* allocation failed */
    DP_ERR_BACKEND = -6,     /* the compute backend failed or is unavailable */
    DP_ERR_STOPPED = -7,     /* a trace callback asked to stop */
    DP_ERR_KV_FULL = -8,     /* the KV page pool has no room for this batch; nothing was changed */
    DP_ERR_WRITE = -9,       /* an output file could not be written (disk full, I/O error) */
} dp_status;

/* The message describing the most recent failure on this thread. */
const char *dp_last_error(void);
/* The dp_status that came with that message (DP_OK before any error). */
int dp_last_status(void);

/* ------------------------------------------------------------------ model */

typedef struct dp_model dp_model;

typedef struct {
    const char *arch;        /* "gemma3", "qwen2", "llama" */
    const char *name;        /* general.name or "" */
    int n_vocab;
    int n_embd;
    int n_layer;
    int n_head;
    int n_head_kv;
    int head_dim;
    int n_ff;
    int n_ctx_train;         /* context length the model was trained for */
    uint64_t n_params;       /* number of weight elements */
    uint64_t weight_bytes;   /* bytes of all tensors in the file */
    int bos_id, eos_id;      /* -1 when absent */
    int add_bos;             /* tokenizer adds BOS by default */
    int pooling;             /* an embedding model's pooling of its positions (DP_POOLING_*; the file's
                                <arch>.pooling_type), DP_POOLING_UNSET when the file does not say */
    const char *faults;      /* DOPPLER_FAULT faults in effect, comma-separated; "" = none */
} dp_model_info;

/* How an embedding pools a text's positions (llama.cpp's pooling_type
 * values): their mean, the first one, the last one; RANK is a reranker's
 * (no embedding). */
enum { DP_POOLING_UNSET = 0, DP_POOLING_MEAN = 1, DP_POOLING_CLS = 2, DP_POOLING_LAST = 3, DP_POOLING_RANK = 4 };

/* Opens a GGUF file (memory-mapped, never copied), validates it completely
 * and builds the model. Returns NULL on any problem (see dp_last_error). */
dp_model *dp_model_load(const char *path);
/* The same from a GGUF image in memory (tests, fuzzing, embedded models):
 * data is used in place, not copied, and must outlive the model; label names
 * it in error messages (NULL: "<memory>"). */
dp_model *dp_model_load_memory(const void *data, size_t size, const char *label);
void dp_model_free(dp_model *m);
const dp_model_info *dp_model_get_info(const dp_model *m);

/* -------------------------------------------------------------- tokenizer */

/* Encodes UTF-8 text. add_bos: prepend BOS if the model's tokenizer uses one
 * (1 = per model default, 0 = never). parse_special: match special/control
 * token strings in the text as single tokens.
 * Returns the number of tokens; if that exceeds cap, nothing beyond cap is
 * written and the full count is returned so the caller can retry. <0 on error. */
int dp_tokenize(const dp_model *m, const char *text, size_t len, int add_bos,
                int parse_special, int32_t *out, int cap);

/* The raw bytes a token stands for (after byte-fallback and the tokenizer's
 * space marker are decoded). Returns the byte count (may exceed cap), <0 on
 * error. Control tokens produce their text only when render_special != 0. */
int dp_token_to_bytes(const dp_model *m, int32_t tok, int render_special,
                      char *buf, int cap);

/* The token's vocabulary string as stored in the model (e.g. "▁sky", "Ġsky"). */
const char *dp_token_piece(const dp_model *m, int32_t tok, size_t *len);

/* Token lookup by exact vocabulary string; -1 when absent. */
int32_t dp_token_lookup(const dp_model *m, const char *piece, size_t len);

int dp_token_is_eog(const dp_model *m, int32_t tok); /* end of generation */

/* Streaming detokenizer: feed tokens, get complete UTF-8 only (byte-fallback
 * pieces are joined; a character is never cut). Leading-space rule: for
 * SentencePiece vocabularies with add_space_prefix (Llama 2 style) the first
 * space of the stream is dropped, as transformers' decoder strips it; Gemma
 * and byte-level BPE output the text unchanged. */
typedef struct dp_detok dp_detok;
dp_detok *dp_detok_new(const dp_model *m, int render_special);
/* Appends the text of tok; returns the number of bytes of complete UTF-8
 * written into buf (held-back partial sequences come out later). */
int dp_detok_push(dp_detok *d, int32_t tok, char *buf, int cap);
/* Flushes whatever is held back (invalid bytes become U+FFFD). */
int dp_detok_flush(dp_detok *d, char *buf, int cap);
void dp_detok_free(dp_detok *d);

/* ------------------------------------------------------------------- chat */

typedef struct {
    const char *role;        /* "system", "user", "assistant" */
    const char *content;
} dp_chat_msg;

/* Name of the built-in chat template that suits the model ("gemma",
 * "chatml", "llama3") or NULL when none does. The model's
 * tokenizer.chat_template is recognised by its markers; a model without one
 * falls back by architecture (gemma, gemma2, gemma3 -> "gemma"). */
const char *dp_chat_template_detect(const dp_model *m);

/* The model's own chat template (tokenizer.chat_template, Jinja source) or
 * NULL when the file has none. */
const char *dp_chat_template(const dp_model *m);

/* Renders messages with a template: a built-in name ("gemma", "chatml",
 * "llama3") or Jinja source text (anything else containing "{{" or "{%").
 * add_generation_prompt appends the header of the assistant's turn. The BOS
 * text of the built-ins is the generic one ("<bos>", "<|begin_of_text|>"),
 * chatml gets no default system prompt, and Jinja sees no bos_token or
 * eos_token. Returns a malloc'ed string or NULL (unknown name, gemma roles not
 * alternating, Jinja errors). */
char *dp_chat_render(const char *template_name, const dp_chat_msg *msgs, int n,
                     int add_generation_prompt);

/* As dp_chat_render for a model, so that the result equals transformers'
 * apply_chat_template. template_name:
 *   NULL          the model's own Jinja template (dp_chat_template), or for
 *                 files without one the built-in dp_chat_template_detect
 *                 names (NULL with a clear error when there is none);
 *   a built-in name: BOS text from the vocabulary, chatml's default system
 *                 prompt (SmolLM2, Qwen2.5) from the model's template;
 *   Jinja source  e.g. the contents of a --chat-template FILE.
 * Jinja templates are rendered as transformers does (trim_blocks,
 * lstrip_blocks; variables messages, add_generation_prompt, bos_token and
 * eos_token from the vocabulary, tools and documents none). Errors (syntax,
 * raise_exception, unsupported features) are one line naming the template
 * line, e.g. "chat template line 12: Conversation roles must alternate ...".
 * Tokenize the result with add_bos = 0 and parse_special = 1. */
char *dp_chat_apply(const dp_model *m, const char *template_name,
                    const dp_chat_msg *msgs, int n, int add_generation_prompt);

/* As dp_chat_apply, with the caller's template variables: vars_json is NULL
 * or the text of a JSON object whose members a Jinja template sees as
 * variables, as apply_chat_template's keyword arguments (chat_template_kwargs
 * of llama-server and vLLM), e.g. {"enable_thinking": false} for Qwen3 and
 * SmolLM3. They may replace bos_token and eos_token; messages,
 * add_generation_prompt, tools and documents are an error. Of the built-in
 * templates only chatml reads one: enable_thinking false opens the answer
 * with an empty <think> block where the model's template is Qwen3's. */
char *dp_chat_apply_vars(const dp_model *m, const char *template_name,
                         const dp_chat_msg *msgs, int n, int add_generation_prompt,
                         const char *vars_json);

/* As dp_chat_apply_vars for a conversation with tools (OpenAI's chat API):
 * messages_json is a JSON array of messages ({role, content} with content
 * null allowed; an assistant's tool_calls and reasoning_content, a tool
 * message's tool_call_id and name passed on), tools_json NULL or a JSON
 * array of tool definitions
 * (the template's tools). A tool call's arguments given as a JSON string
 * reach the template as the object it holds. Jinja templates only (the
 * model's own, or template_name holding Jinja source). */
char *dp_chat_apply_json(const dp_model *m, const char *template_name,
                         const char *messages_json, const char *tools_json,
                         int add_generation_prompt, const char *vars_json);

/* ---------------------------------------------------------------- session */

typedef enum { DP_BACKEND_AUTO = 0, DP_BACKEND_CPU = 1, DP_BACKEND_CUDA = 2 } dp_backend;

/* The element type of cached K and V. DEFAULT: the backend's own, float32
 * on the CPU (as transformers computes in float32), f16 on CUDA. F16 on the
 * CPU halves the cache's memory (a longer context or more sequences in the
 * same RAM); K (after RoPE) and V are then rounded to f16 as llama.cpp's
 * default cache rounds them. CUDA keeps f16 only (F32 there is an error). */
typedef enum { DP_KV_DEFAULT = 0, DP_KV_F32 = 1, DP_KV_F16 = 2 } dp_kv_type;

typedef struct {
    int n_ctx;               /* per sequence; 0 = min(4096, model's) */
    int n_batch;             /* max positions (batch entries) per forward pass; 0 = 512 */
    int n_threads;           /* 0 = number of cores */
    dp_backend backend;
    int logits_all;          /* keep logits of every position of a dp_eval call */
    int n_seq_max;           /* sequences alive at once, at most 65536; 0 = 1 */
    uint64_t kv_mem;         /* bytes of the KV page pool; 0 = n_ctx * n_seq_max positions' worth */
    dp_kv_type kv_type;      /* cached K/V elements; DP_KV_DEFAULT = the backend's */
} dp_session_params;

void dp_session_params_default(dp_session_params *p);

typedef struct dp_session dp_session;

dp_session *dp_session_new(dp_model *m, const dp_session_params *p);
void dp_session_free(dp_session *s);

/* A session holds up to n_seq_max sequences (ids 0 .. n_seq_max - 1) whose
 * KV caches share one pool of pages (see "sequences and batches" below).
 * Sequence 0 exists from dp_session_new on; dp_eval, dp_eval_sample,
 * dp_logits, dp_session_pos and dp_session_truncate act on it.
 *
 * Runs the forward pass over n tokens at positions pos..pos+n-1 (pos is
 * sequence 0's current length), appending them to its KV cache. Afterwards
 * dp_logits(s, -1) holds the logits of the last position (and, with
 * logits_all, dp_logits(s, i) those of position i of this call; then n must
 * not exceed n_batch). Returns DP_OK or a negative dp_status. */
int dp_eval(dp_session *s, const int32_t *tokens, int n);

/* Logits of the i-th position of the last dp_eval call (-1 = last). */
const float *dp_logits(const dp_session *s, int i);

int dp_session_pos(const dp_session *s);   /* tokens in sequence 0's cache */
int dp_session_ctx(const dp_session *s);   /* context size */
/* Drops sequence 0's cached positions >= pos (0 clears it). */
int dp_session_truncate(dp_session *s, int pos);
/* Waits for work the backend queued ahead of the caller (CUDA: the greedy
 * decode step it starts one token early), so that what follows starts on an
 * idle device; a benchmark calls it before a timed region. DP_OK or a
 * negative dp_status. */
int dp_session_wait(dp_session *s);
const char *dp_session_backend(const dp_session *s);

typedef struct {
    uint64_t n_prefill_tokens;   /* tokens evaluated in calls with n > 1 (batches: of sequences with several entries) */
    uint64_t n_decode_tokens;    /* tokens evaluated one at a time (batches: of sequences with one entry) */
    double prefill_s, decode_s;  /* wall time spent in each (a batch with any prefill counts as prefill) */
    uint64_t n_eval_calls;
} dp_session_stats;
void dp_session_get_stats(const dp_session *s, dp_session_stats *out);

/* Bytes one decode step reads with n_past tokens already in the cache: the
 * weights used (every matrix and vector, the LM head, one embedding row when
 * the embedding is not also the LM head) plus the K and V rows attended
 * (sliding-window layers read at most their window). For bandwidth figures. */
uint64_t dp_session_decode_bytes(const dp_session *s, int n_past);

/* What a session computes with, as its backend reports it (for logs and
 * benchmarks). Strings are filled in place; fields a backend has no value
 * for stay 0 / "". */
typedef struct {
    char backend[16];            /* "cpu", "cuda" */
    char device[256];            /* CUDA: the GPU's name; CPU: "" */
    /* CPU: the kernel level in use ("scalar", "avx2", "avx512"); CUDA: the
     * decode kernels in use (matvec per weight type, attention, PDL, ...) */
    char kernels[512];
    char cpu_isa_max[16];        /* CPU: the best level this CPU supports */
    char ffn_act[16];            /* the FFN's gate activation: "gelu-tanh" or "silu" */
    char act_path[128];          /* where the activation is computed */
    int n_threads;               /* CPU: threads of the compute pool */
    int sm_count;                /* CUDA: streaming multiprocessors */
    int cc_major, cc_minor;      /* CUDA: compute capability */
    /* KV cache (K and V of every layer): the page pool */
    int n_ctx;                   /* per sequence */
    char kv_type[8];             /* element type: "f32" (the CPU's default) or "f16" */
    uint64_t kv_bytes_per_token;
    uint64_t kv_bytes;           /* allocated (CPU: the pages' positions * kv_bytes_per_token) */
    int n_seq_max;               /* sequences a session holds at once */
    /* Device memory this session allocated itself (CUDA; 0 on the CPU),
     * each allocation's exact size: weights (matrices repacked, vectors),
     * the KV cache and the rest (activations, partial sums, sampling). The
     * CUDA context, cuBLAS's workspace and graph memory are not included.
     * dev_f16_copy_bytes: the part of the weights that is the f16 copies of
     * the quantised matrices (0 where the session has none). */
    uint64_t dev_weight_bytes, dev_kv_bytes, dev_scratch_bytes, dev_total_bytes, dev_f16_copy_bytes;
    uint64_t dev_free_bytes, dev_capacity_bytes; /* the whole GPU, at the call */
    /* the environment settings this session was made with, "NAME=value ..."
     * (those of its backend; docs/cuda.md, docs/debugging.md) */
    char settings[640];
} dp_backend_info;

/* Fills *out for this session. Returns DP_OK or a negative dp_status. */
int dp_session_describe(const dp_session *s, dp_backend_info *out);

/* ---------------------------------------------------------------- sampler */

typedef struct {
    float temp;              /* 0 = greedy */
    int top_k;               /* 0 = off */
    float top_p;             /* 1 = off */
    float min_p;             /* 0 = off */
    float repeat_penalty;    /* 1 = off */
    int repeat_last_n;       /* window for the penalty */
    uint64_t seed;
} dp_sampler_params;

void dp_sampler_params_default(dp_sampler_params *p);

typedef struct dp_sampler dp_sampler;
dp_sampler *dp_sampler_new(const dp_sampler_params *p, int n_vocab);
void dp_sampler_free(dp_sampler *s);
/* Picks the next token from logits (not modified). */
int32_t dp_sampler_sample(dp_sampler *s, const float *logits);
/* Records a token of the context (for the repetition penalty). */
void dp_sampler_accept(dp_sampler *s, int32_t tok);
void dp_sampler_reset(dp_sampler *s);

/* Evaluates tokens like dp_eval, then picks the next token with smp. A GPU
 * backend samples on the device so only the id comes back. The token is not
 * passed to dp_sampler_accept (the caller decides). */
int dp_eval_sample(dp_session *s, const int32_t *tokens, int n, dp_sampler *smp, int32_t *next);

/* ------------------------------------------------------ constrained output */

/* A constraint on what a generation writes: one JSON value that a JSON
 * Schema accepts (OpenAI's response_format json_schema and json_object,
 * llama.cpp's --json-schema), or a text a GBNF grammar accepts
 * (dp_constraint_gbnf). Tokens that cannot continue such a text get
 * no chance; the generation's end token is allowed once the value is
 * complete. The schema subset, and how the written text is narrower than
 * the schema (members in the schema's order, bounded whitespace), are in
 * docs/serve.md. */
typedef struct dp_constraint dp_constraint;

/* Whether the answer may reason first in a <think> ... </think> block
 * (unconstrained) before its value: not at all, if it opens with one, or
 * from the start (the prompt ended inside an open block). */
enum { DP_THINK_NONE = 0, DP_THINK_MAY_OPEN = 1, DP_THINK_INSIDE = 2 };

/* schema: JSON Schema text of len bytes; NULL or len 0: any JSON object.
 * NULL with a one-line reason for a schema it cannot honour. */
dp_constraint *dp_constraint_json(const dp_model *m, const char *schema, size_t len, int think);
/* The same with the value written between two texts (NULL or "": none),
 * each after optional whitespace: a tool call's <tool_call> ... </tool_call>. */
dp_constraint *dp_constraint_json_between(const dp_model *m, const char *schema, size_t len, int think,
                                          const char *before, const char *after);
/* The same with 1 to max_values such values one after another (whitespace
 * between them; both texts needed when max_values > 1): a turn of several
 * tool calls. The generation may end after any of them. */
dp_constraint *dp_constraint_json_repeat(const dp_model *m, const char *schema, size_t len, int think,
                                         const char *before, const char *after, int max_values);
/* Free text in which each block from open to close holds a JSON value the
 * schema accepts (whitespace around it): tool calls in an answer that may
 * also talk, llama.cpp's lazy grammar. open must begin with '<' and hold
 * no other; at most max_values blocks (0: any number); the text may end
 * anywhere outside a block. */
dp_constraint *dp_constraint_json_tagged(const dp_model *m, const char *schema, size_t len, const char *open,
                                         const char *close, int max_values);
/* Free text, except that an answer whose first byte but whitespace is '{'
 * is from there one value the schema accepts, then at most whitespace
 * before the end: a tool call where, when there is one, it is the whole
 * answer (Llama 3.1's format), llama.cpp's lazy grammar triggered by the
 * '{'. The text may end anywhere before a value opens. With think, a
 * <think> ... </think> block (unconstrained) may open the answer, after
 * whitespace too, and the answer after it is read so. */
dp_constraint *dp_constraint_json_lazy(const dp_model *m, const char *schema, size_t len, int think);
/* Whether dp_constraint_json would take the schema: DP_OK, or DP_ERR_ARG
 * with the reason (no model needed: a server checks a request with it). */
int dp_json_schema_check(const char *schema, size_t len);
/* A constraint by a GBNF grammar (llama.cpp's --grammar, its server's
 * `grammar` field) of len bytes: the text is one `root` of the grammar,
 * characters as UTF-8; the end token is allowed once it is whole. Rules
 * that reach themselves before any character (left recursion) and grammars
 * beyond the parser's limits (size, rules, nesting, repetition bounds) are
 * refused: NULL with a one-line reason naming the line and column. */
dp_constraint *dp_constraint_gbnf(const dp_model *m, const char *grammar, size_t len);
/* Whether dp_constraint_gbnf would take the grammar: DP_OK, or DP_ERR_ARG
 * with the reason (no model needed). */
int dp_gbnf_check(const char *grammar, size_t len);
void dp_constraint_free(dp_constraint *c);
/* Picks the next token from logits (n_logits = the model's vocabulary) with
 * the sampler, among the tokens the constraint allows; logits may be
 * overwritten (-inf where refused). Not passed to dp_constraint_accept. */
int32_t dp_constraint_sample(dp_constraint *c, dp_sampler *s, float *logits, int n_logits);
/* Works out which tokens may come next, now, so that the next sample,
 * mask or allows does not: a server calls it on another thread while the
 * model evaluates the step. A constraint's calls hold its lock, so a
 * dp_eval_batch drawing under it meanwhile waits for the mask (or works it
 * out first); any other use is by one thread at a time. */
void dp_constraint_prepare(dp_constraint *c);
/* Sets the logits of the refused tokens to -inf; returns how many remain. */
int dp_constraint_mask(dp_constraint *c, float *logits, int n_logits);
/* 1 when tok may come next. */
int dp_constraint_allows(dp_constraint *c, int32_t tok);
/* Advances past tok; DP_ERR_ARG when tok may not come here. */
int dp_constraint_accept(dp_constraint *c, int32_t tok);
/* 1 when the value is complete and nothing may follow it (the generation
 * can stop without an end token). */
int dp_constraint_done(const dp_constraint *c);

/* ------------------------------------------------ sequences and batches */

/* Every sequence's KV cache is a list of pages of page_size positions taken
 * from one pool (dp_session_params.kv_mem). Sequences that share a prefix
 * share its pages: a fork shares all of its parent's, and the prefix cache
 * hands out the full pages of token prefixes computed earlier (by any
 * sequence, alive or freed, until the page is evicted). A write into a
 * shared page first copies it (copy on write). Freeing a sequence keeps its
 * full pages as cached prefix; when the pool has no free page left, the
 * least recently used cached pages are evicted.
 *
 * Sequence ids are 0 .. n_seq_max - 1; a freed id is handed out again by
 * dp_seq_new / dp_seq_fork (lowest first). Calls on an id that is not alive
 * fail with DP_ERR_ARG. Pages hold 16 positions on the CPU, 64 on CUDA
 * (dp_session_kv_stats). */

/* Creates an empty sequence; returns its id, or < 0 (DP_ERR_ARG when
 * n_seq_max sequences are alive). */
int dp_seq_new(dp_session *s);
/* A new sequence holding parent's cached positions, sharing its pages
 * (copy on write). Returns the id or < 0 (DP_ERR_ARG: parent not alive or
 * n_seq_max reached; DP_ERR_BACKEND: the backend holds one sequence). */
int dp_seq_fork(dp_session *s, int parent);
/* Ends a sequence: its pages go back to the pool, full ones stay as cached
 * prefix. Sequence 0 too (dp_seq_new may then return 0 again). */
int dp_seq_free(dp_session *s, int seq);
/* Drops the sequence's cached positions >= pos. */
int dp_seq_truncate(dp_session *s, int seq, int pos);
/* Positions cached for seq, < 0 (DP_ERR_ARG) for an id that is not alive. */
int dp_seq_pos(const dp_session *s, int seq);
/* Prefix cache: attaches to the EMPTY sequence seq the cached pages of the
 * longest whole-page prefix of tokens[0..n) (computed earlier by any
 * sequence, alive or freed and not yet evicted), never covering the last
 * token, so the caller still evaluates at least one (tokens from the
 * returned count on). Returns the positions now cached (0 when none), or
 * < 0 on bad input. */
int dp_seq_reuse_prefix(dp_session *s, int seq, const int32_t *tokens, int n);

typedef struct {
    int seq;                 /* sequence id */
    int pos;                 /* the sequence's length, +1 per earlier entry of the same seq in this batch */
    int32_t token;
    int logits;              /* nonzero: keep this entry's logits (dp_batch_logits) */
    dp_sampler *sampler;     /* non-NULL: sample the token that follows this entry (not passed to
                                dp_sampler_accept: the caller decides) */
    dp_constraint *constraint; /* with a sampler, optional: draw among the tokens it allows (a GPU
                                  backend masks on the device; not passed to dp_constraint_accept).
                                  Its mask may be in dp_constraint_prepare on another thread meanwhile.
                                  out_tokens gets -1 where it allows no token. */
    float *hidden;           /* non-NULL: gets the model's last hidden state at this entry's position (n_embd
                                floats: the final norm's output, transformers' last_hidden_state), the
                                rows an embedding pools; no logits are computed for it */
} dp_batch_entry;

/* Evaluates a batch of n entries in one forward pass: any mix of prefill
 * chunks and single decode tokens of different sequences (the entries of
 * one sequence in position order, any order between sequences). The
 * weights are read once for all entries; each sequence attends only to its
 * own positions. out_tokens[i] gets the sampled token of every entry with a
 * sampler (out_tokens may be NULL when none has one).
 * Errors change nothing and leave the session usable: DP_ERR_ARG (n <= 0 or
 * n > n_batch, a sequence that is not alive, a position that skips or goes
 * backwards, a token outside the vocabulary), DP_ERR_CTX_FULL (a sequence
 * would exceed n_ctx), DP_ERR_KV_FULL (not enough free or evictable pages
 * for the whole batch), DP_ERR_STOPPED (a trace callback asked to stop). */
int dp_eval_batch(dp_session *s, const dp_batch_entry *e, int n, int32_t *out_tokens);
/* Logits of entry i of the last dp_eval_batch (n_vocab floats), NULL when
 * that entry did not ask for them. Valid until the next dp_eval_batch. */
const float *dp_batch_logits(const dp_session *s, int i);

/* The page pool now: pages in use by sequences (shared: by more than one),
 * cached (full pages no sequence holds, kept for the prefix cache, evicted
 * least recently used first) and free. used + cached + free = n_pages. */
typedef struct {
    int page_size, n_pages, used, shared, cached, free;
} dp_kv_stats;
void dp_session_kv_stats(const dp_session *s, dp_kv_stats *out);

/* ------------------------------------------------------------------ trace */

/* Named trace points, in forward order (same names on every backend). */
typedef enum {
    DP_TP_EMBED = 0,         /* token embedding rows as stored */
    DP_TP_EMBED_SCALED,      /* after the architecture's embedding scale */
    DP_TP_ATTN_NORM,         /* per layer from here ... */
    DP_TP_Q, DP_TP_K, DP_TP_V,           /* projections (after bias) */
    DP_TP_Q_NORMED, DP_TP_K_NORMED,      /* after per-head q/k norm */
    DP_TP_Q_ROPE, DP_TP_K_ROPE,
    DP_TP_ATTN_SCORES,       /* softmax weights [n_head][n_kv]; opt-in */
    DP_TP_ATTN_OUT,          /* attention output, before o_proj */
    DP_TP_O_PROJ,
    DP_TP_POST_ATTN_NORM,
    DP_TP_RESID_ATTN,        /* residual stream after attention */
    DP_TP_FFN_NORM,
    DP_TP_GATE, DP_TP_UP, DP_TP_ACT, DP_TP_DOWN,
    DP_TP_POST_FFN_NORM,
    DP_TP_RESID_FFN,         /* residual stream after the layer */
    DP_TP_FINAL_NORM,        /* after the output norm */
    DP_TP_LOGITS,
    DP_TP_COUNT
} dp_trace_point;

const char *dp_trace_point_name(int point);
int dp_trace_point_lookup(const char *name);  /* -1 when unknown */
int dp_trace_point_is_layer(int point);       /* has a layer index */

typedef struct {
    int point;               /* dp_trace_point */
    int layer;               /* -1 for points outside the layers */
    int pos0;                /* first position of the rows */
    int n_pos;               /* number of positions (rows) */
    int dim;                 /* floats per position */
    const float *data;       /* n_pos x dim, row-major, host memory */
    int seq;                 /* the sequence of these positions (a batch gives one event per
                                sequence and point) */
} dp_trace_event;

/* Returns 0 to continue; nonzero stops the forward pass after the current
 * point, and dp_eval then returns DP_ERR_STOPPED (used by --check-finite). */
typedef int (*dp_trace_fn)(void *user, const dp_trace_event *ev);

typedef struct {
    uint64_t points;         /* bit i set: point i wanted */
    uint8_t *layers;         /* n_layer flags (NULL = all layers) */
    int n_layers;
} dp_trace_filter;

/* Installs (fn != NULL) or removes a trace callback. Only the selected points
 * and layers are produced; with no callback the forward pass does no tracing
 * work at all. */
int dp_session_set_trace(dp_session *s, dp_trace_fn fn, void *user,
                         const dp_trace_filter *f);

/* ---------------------------------------------------------------- profile */

/* Per-op timing: off by default and free when off. With it on, every op of
 * the forward pass is timed (on GPUs with device events) and aggregated by op
 * kind and layer. */
typedef struct {
    const char *op;          /* "matmul_qkv", "attention", "rmsnorm", ... */
    int layer;               /* -1 outside the layers */
    uint64_t calls;
    double total_ms;
    uint64_t bytes;          /* weight bytes read (matmuls), for GB/s */
} dp_profile_entry;

int dp_session_set_profile(dp_session *s, int on);
/* Returns the number of non-empty entries written (at most cap). */
int dp_session_get_profile(const dp_session *s, dp_profile_entry *out, int cap);
void dp_session_reset_profile(dp_session *s);

/* ------------------------------------------------------------------ checks */

/* The relative L2 distance ||a - ref|| / ||ref|| of n floats (||a - ref||
 * where ref is all zero; infinite where a holds a NaN): the measure
 * doppler verify and the tests compare backends and kernels with. */
double dp_rel_l2(const float *a, const float *ref, size_t n);

/* ------------------------------------------------------------------ synth */

/* Synthetic models: a GGUF with random weights and the exact tensor names,
 * shapes, per-tensor types and metadata of a real model of that shape (for
 * benchmarks on machines that cannot receive real weights). */
typedef struct {
    const char *arch;        /* "gemma3", "qwen2", "llama" */
    const char *preset;      /* see dp_synth_presets(): "tiny", "270m", "1b", "0.5b", "3b" */
    const char *type;        /* see dp_synth_types(): "f32", "f16", "bf16", "q8_0", "q4_0",
                                "q4_k_m", ... (llama.cpp's per-tensor mixes) */
    const char *vocab_from;  /* NULL, or a GGUF whose tokenizer.* keys are copied */
    uint64_t seed;           /* same seed, same file */
    int n_layer;             /* 0 = the preset's; else this many layers, same widths */
} dp_synth_params;

/* Writes the model to path (streamed: memory stays small) through a
 * dp_outfile, so a failure leaves path as it was. Returns DP_OK or a negative
 * dp_status (DP_ERR_ARG for unknown arch/preset/type, DP_ERR_IO for an
 * unusable path, DP_ERR_WRITE when writing failed). */
int dp_synth(const dp_synth_params *p, const char *path);
/* One line per architecture: "gemma3: tiny 270m 1b" ... */
const char *dp_synth_presets(void);
/* Space-separated type names accepted by dp_synth. */
const char *dp_synth_types(void);

/* ----------------------------------------------------------- output files */

/* Every file doppler writes goes through a dp_outfile: the bytes go to a
 * temporary file in the destination's directory, every write is checked, and
 * dp_outfile_commit fsyncs it and renames it over the path only when the file
 * is complete. The path is therefore either left as it was or replaced by the
 * whole new file, never truncated or removed. An existing path that is not a
 * regular file (a directory, a device, a FIFO) is refused and left alone; an
 * existing regular file keeps its permission bits; a symbolic link is
 * followed (the link stays, its target is replaced). */
typedef struct dp_outfile dp_outfile;

/* Creates the temporary file. Returns NULL when the path is unusable (its
 * directory is missing or not writable, it is a directory or not a regular
 * file); dp_last_error names the path and the reason, status DP_ERR_IO. */
dp_outfile *dp_outfile_open(const char *path);
/* Appends n bytes (buffered). Returns DP_OK, or DP_ERR_WRITE once any write
 * has failed (the reason is kept for dp_outfile_commit). */
int dp_outfile_write(dp_outfile *of, const void *data, size_t n);
/* Flushes, fsyncs and renames the file into place, then releases of.
 * Returns DP_OK, or DP_ERR_WRITE with a message naming the path and the
 * reason ("No space left on device"); then the temporary is removed and the
 * path is untouched. */
int dp_outfile_commit(dp_outfile *of);
/* Removes the temporary and releases of; the path is untouched. NULL is a
 * no-op. Not for signal handlers (it frees memory): see below. */
void dp_outfile_abort(dp_outfile *of);
/* Removes the temporary of every dp_outfile of this process that is neither
 * committed nor aborted, and nothing else; releases nothing, so the handles
 * stay valid but can no longer commit. Async-signal-safe: meant for a signal
 * handler that exits next. It also runs at exit(), so a process that exits
 * in the middle of writing leaves no temporary behind. */
void dp_outfile_abort_all(void);

/* ------------------------------------------------------------------ misc */

/* Validates a GGUF file and prints its header, metadata (long arrays
 * abbreviated) and tensor table to out. Returns DP_OK or a dp_status. */
int dp_inspect_file(const char *path, FILE *out);

/* Peak resident set size of this process in bytes. */
uint64_t dp_peak_rss_bytes(void);
double dp_time_s(void);      /* monotonic clock */

#ifdef __cplusplus
}
#endif
#endif
