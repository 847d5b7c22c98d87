/* Shared by the batch tests: CPU sessions, synthetic tiny models of every
 * architecture and weight type, and the solo reference (one sequence, the
 * prompt in given chunks, then greedy decoding) that a sequence in a batch
 * must reproduce. */
#ifndef DP_BATCH_REF_H
#define DP_BATCH_REF_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "testlib.h"

static inline int bt_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* A CPU session on 2 threads; kv_mem 0 = the default pool. */
static inline dp_session *bt_session(dp_model *m, int n_seq_max, int n_ctx, int n_batch, uint64_t kv_mem) {
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = DP_BACKEND_CPU;
    sp.n_threads = 2;
    sp.n_ctx = n_ctx;
    sp.n_batch = n_batch;
    sp.n_seq_max = n_seq_max;
    sp.kv_mem = kv_mem;
    dp_session *s = dp_session_new(m, &sp);
    CHECKF(s != NULL, "session (%d sequences, ctx %d): %s", n_seq_max, n_ctx, dp_last_error());
    return s;
}

/* A synthetic tiny model ("tiny" preset) of arch and weight type, loaded;
 * NULL (with a failed check) when it cannot be made. */
static inline dp_model *bt_synth(const char *arch, const char *type) {
    const char *path = t_tmp_path(".gguf");
    dp_synth_params p = {.arch = arch, .preset = "tiny", .type = type, .seed = t_rand_u64() | 1};
    int rc = dp_synth(&p, path);
    CHECKF(rc == DP_OK, "synth %s %s: %s", arch, type, dp_last_error());
    dp_model *m = rc == DP_OK ? dp_model_load(path) : NULL;
    CHECKF(m != NULL, "load synth %s %s: %s", arch, type, dp_last_error());
    remove(path);
    return m;
}

/* The solo reference: tokens[0..n_prompt) evaluated in calls of plan[0],
 * plan[1], ... tokens (summing to n_prompt), then n_gen greedy tokens into
 * gen; logits (n_gen x n_vocab, may be NULL) gets the logits that chose
 * each. Returns 0 or -1. */
static inline int bt_solo(dp_model *m, int n_ctx, const int32_t *tokens, const int *plan, int n_plan, int n_gen,
                          int32_t *gen, float *logits) {
    int V = dp_model_get_info(m)->n_vocab;
    dp_session *s = bt_session(m, 1, n_ctx, 512, 0);
    if (!s) return -1;
    int pos = 0, rc = 0;
    for (int i = 0; i < n_plan && !rc; i++) {
        rc = dp_eval(s, tokens + pos, plan[i]);
        pos += plan[i];
    }
    for (int g = 0; g < n_gen && !rc; g++) {
        const float *l = dp_logits(s, -1);
        if (logits) memcpy(logits + (size_t)g * V, l, sizeof(float) * (size_t)V);
        gen[g] = bt_argmax(l, V);
        if (g + 1 < n_gen) rc = dp_eval(s, &gen[g], 1);
    }
    CHECKF(rc == 0, "solo run: %s", dp_last_error());
    dp_session_free(s);
    return rc ? -1 : 0;
}

/* Chunks of at most `chunk` tokens covering n tokens, appended to plan. */
static inline int bt_chunks(int *plan, int n_plan, int n, int chunk) {
    for (int done = 0; done < n; done += chunk) plan[n_plan++] = n - done < chunk ? n - done : chunk;
    return n_plan;
}

#endif
