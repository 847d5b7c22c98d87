/* A session: the sequences and their paged KV cache (kv.h), scratch on one
 * backend, plus the trace configuration. Backends implement dp_backend_impl. */
#ifndef DP_SESSION_H
#define DP_SESSION_H

#include "doppler.h"
#include "kv.h"
#include "model.h"
#include "settings.h"

struct dp_prof_cell;
struct dp_batch_state;

/* One sequence's consecutive rows of a batch. */
typedef struct {
    int seq;                 /* sequence id (trace events name it) */
    int pos0, n;             /* positions pos0 .. pos0 + n - 1 */
    int row0;                /* its rows: row0 .. row0 + n - 1 */
    const int32_t *pages;    /* page table: position p in page pages[p / page_size], slot p % page_size */
} dp_run;

/* What a batched forward pass evaluates (batch.c builds it). Runs come in
 * ascending order of length, so a backend that computes each run as a
 * pass of that length would (one position, a few, many) finds each kind
 * in one block of rows. */
typedef struct {
    int n_rows;
    const int32_t *tokens;   /* per row */
    int n_runs;
    const dp_run *runs;
    /* Rows whose logits are wanted: logits of out_rows[j] go to
     * logits + j * n_vocab. A run's wanted rows are consecutive in
     * out_rows; runs in ascending order of how many rows they want. */
    int n_out;
    const int *out_rows;
    float *logits;
    /* Per wanted row (NULL arrays: none has a sampler, every one keeps its
     * logits): the entry's sampler or NULL, whether the caller keeps its
     * logits, and the token a backend drew on the device (-1 before the
     * pass; left -1, the logits row must be written and batch.c samples it
     * on the host). A backend may draw only for rows that do not keep their
     * logits, and need not write their logits then. */
    dp_sampler *const *samplers;
    const unsigned char *keep;
    int32_t *drawn;
    /* Per wanted row with a sampler (NULL array: none): the constraint the
     * draw honours, or NULL. A backend that draws such a row masks it with
     * dp_constraint_bits (constrain.h), and gives DP_DRAWN_NONE where the
     * mask is empty. */
    dp_constraint *const *constraints;
    /* Rows whose last hidden state is wanted (the final norm's output,
     * n_embd floats): row hid_rows[k] goes to hidden + k * n_embd. Each
     * run's such rows are consecutive in hid_rows and in rows. Whether a
     * row also has logits is out_rows' business. */
    int n_hid;
    const int *hid_rows;
    float *hidden;
} dp_batch;

enum { DP_DRAWN_NONE = -2 };

typedef struct dp_backend_impl {
    const char *name;
    /* Allocates the KV cache and scratch for s->n_ctx / s->n_batch. */
    int (*init)(dp_session *s);
    void (*free)(dp_session *s);
    /* Evaluates n <= s->n_batch tokens at positions pos0.. and writes logits
     * into s->logits: every row when logits_all, else only the last row
     * (into row 0). Returns DP_OK or a negative dp_status. */
    int (*forward)(dp_session *s, const int32_t *tokens, int n, int pos0, int logits_all);
    /* Optional: evaluate and sample on the device (NULL = dp_eval on the
     * host followed by dp_sampler_sample on the host logits). */
    int (*eval_sample)(dp_session *s, const int32_t *tokens, int n, int pos0, dp_sampler *smp, int32_t *next);
    /* Called when the trace configuration changes (may be NULL). */
    int (*trace_changed)(dp_session *s);
    /* Bytes of the backend's own cached K or V element (0 = 4, float32);
     * a session may ask the CPU backend for f16 (dp_session.kv_eb). */
    int kv_elem_bytes;
    /* Optional: the backend's part of dp_session_describe (kernels, device,
     * KV bytes allocated, device memory); dp_session_describe has already
     * filled the common fields. */
    int (*describe)(const dp_session *s, dp_backend_info *out);
    /* Optional: waits for work queued ahead of the caller (dp_session_wait). */
    int (*wait)(dp_session *s);
    /* Batched backends: evaluate the runs of a batch (KV pages from
     * s->kv.page_size, pages already reserved; n_rows <= s->n_batch); then
     * forward may be NULL, and every sequence call goes through this. A
     * backend without it holds one sequence (0) through forward. */
    int (*forward_batch)(dp_session *s, const dp_batch *b);
    /* Batched backends: copy KV page src to dst (copy on write). */
    int (*copy_page)(dp_session *s, int src, int dst);
    int page_size;           /* positions per KV page (a power of two; 0 = 16) */
    /* Optional: host memory the device copies into at full speed (page-locked),
     * for the logits rows of a batch; NULL on failure. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
} dp_backend_impl;

struct dp_session {
    dp_model *m;
    int n_ctx, n_batch, n_threads;
    int logits_all;
    int n_seq_max;
    int kv_eb;                       /* bytes of a cached K or V element: 4 (float32) or 2 (f16) */
    dp_kv kv;                        /* sequences and their pages */
    struct dp_batch_state *batch;    /* batch.c's scratch */
    const dp_backend_impl *be;
    void *be_state;
    float *logits;                   /* n_batch x n_vocab with logits_all, else n_vocab */
    int n_logits;                    /* rows valid after the last eval */
    dp_session_stats stats;
    dp_settings set;                 /* the environment's settings, read when the session was made */
    /* tracing (see trace.h) */
    dp_trace_fn trace_fn;
    void *trace_user;
    uint64_t trace_points;
    uint8_t *trace_layers;           /* n_layer flags */
    int trace_stop;                  /* a callback asked to stop */
    int trace_seq;                   /* the sequence dp_trace_emit names */
    /* profiling (see prof.h); NULL when off */
    struct dp_prof_cell *prof;
};

/* Runs fn over tokens[0 .. n) in chunks of at most s->n_batch positions
 * (chunk i at pos0 + its offset), telling it which chunk is the last. */
typedef int (*dp_chunk_fn)(dp_session *s, const int32_t *tokens, int n, int pos0, int last, void *user);
static inline int dp_eval_chunks(dp_session *s, const int32_t *tokens, int n, int pos0, dp_chunk_fn fn, void *user) {
    for (int done = 0; done < n;) {
        const int k = n - done < s->n_batch ? n - done : s->n_batch;
        const int rc = fn(s, tokens + done, k, pos0 + done, done + k == n, user);
        if (rc) return rc;
        done += k;
    }
    return DP_OK;
}

/* batch.c: the KV pool and batch scratch of a new session (after the
 * backend is chosen, before its init), and their release. */
int dp_batch_init(dp_session *s, uint64_t kv_mem);
void dp_batch_free(dp_session *s);
/* The batch's logits rows alone (before the backend that page-locked them goes). */
void dp_batch_free_logits(dp_session *s);
/* Evaluates n <= n_batch tokens of sequence seq (all logits or the last
 * row's into logits) through the backend's batched or single hook. */
int dp_eval_seq(dp_session *s, int seq, const int32_t *tokens, int n, int logits_all, float *logits);
/* The backend's eval_sample for n <= n_batch tokens of sequence 0. */
int dp_eval_sample_seq0(dp_session *s, const int32_t *tokens, int n, dp_sampler *smp, int32_t *next);

extern const dp_backend_impl dp_backend_cpu;
#ifdef DOPPLER_HAVE_CUDA
extern const dp_backend_impl dp_backend_cuda;
/* Whether a GPU is present (DOPPLER_NO_CUDA is the caller's business). */
int dp_cuda_available(void);
#endif

#endif
