/* A server's warm-up. On a GPU backend the first pass of a shape pays for
 * set-up that later ones do not: loading the kernels it is the first to
 * use, capturing the decode graph of its row count, picking the library's
 * product algorithms for its sizes. Paid by the first requests, that is
 * tens of milliseconds on their time to first token and on every stream
 * that shares their steps; paid here, once, before the server listens (as
 * llama-server's warm-up run). What the tokens are does not matter. */
#include "warmup.h"

#include <stdlib.h>

typedef struct {
    dp_session *s;
    dp_batch_entry *e;
    int32_t *out;
    dp_sampler *greedy;
    int V, passes;
} warm;

static int32_t tok_at(const warm *w, int i) { return (int32_t)(1 + ((unsigned)i * 2654435761u) % (unsigned)(w->V - 1)); }

/* n rows of seq from position pos on into w->e at *k; the last one samples. */
static void add_rows(warm *w, int *k, int seq, int pos, int n) {
    for (int j = 0; j < n; j++, (*k)++)
        w->e[*k] = (dp_batch_entry){.seq = seq, .pos = pos + j, .token = tok_at(w, pos + j + 7 * seq),
                                    .sampler = j == n - 1 ? w->greedy : NULL};
}

static int eval(warm *w, int n) {
    w->passes++;
    return dp_eval_batch(w->s, w->e, n, w->out);
}

/* Drops every position of the sequences (so no page stays cached) and them. */
static void drop(dp_session *s, const int *seqs, int n) {
    for (int i = 0; i < n; i++)
        if (seqs[i] >= 0) {
            dp_seq_truncate(s, seqs[i], 0);
            dp_seq_free(s, seqs[i]);
        }
}

static int prompts(warm *w, int n_batch) {
    int n_ctx = dp_session_ctx(w->s), top = n_batch < n_ctx - 1 ? n_batch : n_ctx - 1, rc = DP_OK;
    for (int rows = 8; rc == DP_OK; rows *= 2) {
        int r = rows < top ? rows : top, k = 0, seq = dp_seq_new(w->s);
        if (seq < 0) return seq;
        add_rows(w, &k, seq, 0, r);
        rc = eval(w, k);
        drop(w->s, &seq, 1);
        if (r == top) break;
    }
    return rc;
}

static int decodes(warm *w, int parallel) {
    int *seq = malloc(sizeof(int) * (size_t)parallel), rc = DP_OK, k = 0;
    if (!seq) return DP_ERR_NOMEM;
    for (int i = 0; i < parallel; i++) seq[i] = -1;
    for (int i = 0; i < parallel && rc == DP_OK; i++)
        if ((seq[i] = dp_seq_new(w->s)) < 0) rc = seq[i];
    for (int i = 0; i < parallel && rc == DP_OK; i++) add_rows(w, &k, seq[i], 0, 1);
    if (rc == DP_OK) rc = eval(w, k); /* every sequence one position in */
    for (int rows = 1; rc == DP_OK; rows *= 2) { /* a batched decode step of each row count */
        int r = rows < parallel ? rows : parallel;
        k = 0;
        for (int i = 0; i < r; i++) add_rows(w, &k, seq[i], dp_seq_pos(w->s, seq[i]), 1);
        rc = eval(w, k);
        if (r == parallel) break;
    }
    if (rc == DP_OK && parallel >= 2) { /* decode rows beside a prompt chunk */
        k = 0;
        add_rows(w, &k, seq[0], dp_seq_pos(w->s, seq[0]), 1);
        add_rows(w, &k, seq[1], dp_seq_pos(w->s, seq[1]), 16);
        rc = eval(w, k);
    }
    drop(w->s, seq, parallel);
    free(seq);
    return rc;
}

int serve_warmup(dp_session *s, int n_vocab, int parallel, int n_batch) {
    dp_sampler_params sp;
    dp_sampler_params_default(&sp);
    sp.temp = 0;
    warm w = {.s = s, .V = n_vocab, .e = malloc(sizeof(dp_batch_entry) * (size_t)n_batch),
              .out = malloc(sizeof(int32_t) * (size_t)n_batch), .greedy = dp_sampler_new(&sp, n_vocab)};
    int rc = w.e && w.out && w.greedy ? prompts(&w, n_batch) : DP_ERR_NOMEM;
    if (rc == DP_OK) rc = decodes(&w, parallel);
    dp_sampler_free(w.greedy);
    free(w.e);
    free(w.out);
    return rc < 0 ? rc : w.passes;
}
