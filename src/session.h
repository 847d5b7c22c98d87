/* A session: one sequence's KV cache and scratch on one backend, plus the
 * trace configuration. Backends implement dp_backend_impl. */
#ifndef DP_SESSION_H
#define DP_SESSION_H

#include "doppler.h"
#include "model.h"
#include "settings.h"

struct dp_prof_cell;

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
    /* Bytes of one cached K or V element (0 = 4, float32); for the decode
     * traffic estimate of footprint.c. */
    int kv_elem_bytes;
    /* Optional: the backend's part of dp_session_describe (kernels, device,
     * KV bytes allocated, device memory); dp_session_describe has already
     * filled the common fields. */
    int (*describe)(const dp_session *s, dp_backend_info *out);
    /* Optional: waits for work queued ahead of the caller (dp_session_wait). */
    int (*wait)(dp_session *s);
} dp_backend_impl;

struct dp_session {
    dp_model *m;
    int n_ctx, n_batch, n_threads;
    int logits_all;
    int pos;                         /* tokens in the KV cache */
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

extern const dp_backend_impl dp_backend_cpu;
#ifdef DOPPLER_HAVE_CUDA
extern const dp_backend_impl dp_backend_cuda;
/* Whether a GPU is present (DOPPLER_NO_CUDA is the caller's business). */
int dp_cuda_available(void);
#endif

#endif
