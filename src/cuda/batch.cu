/* The CUDA backend's batched entry (session.h forward_batch): a batch's
 * rows, their sequences' page tables, the pass, and each wanted row's
 * output (logits, or the token drawn on the device).
 *
 *   cuda_forward_batch -> one row of a decode step: the single-row decode
 *   graph (decode.cu, as dp_eval_sample's); decode rows of several
 *   sequences: a batched decode graph (rows padded to a power of two);
 *   anything else (prompt chunks, mixed rows): one eager pass over every
 *   row; traced batches one sequence at a time (events name it), and
 *   sequences that select different LongRoPE tables in passes of their own.
 *
 * Only what a caller needs comes back: a greedy row's token from its
 * argmax key, a row the device sampler can draw from its token, logits
 * only for rows that keep them or that the host samples. */
#include <limits.h>
#include <string.h>

#include "constrain/constrain.h"
#include "state.cuh"

int cu_sync_pages(dp_session *s, const int *seqs, const int *ends, int n) {
    CudaState *cs = cu_state(s);
    const int stride = cs->pt_stride, sh = cs->page_shift;
    long long lo = LLONG_MAX, hi = -1;
    for (int i = 0; i < n; i++) {
        const int q = seqs[i], np = (ends[i] + (1 << sh) - 1) >> sh;
        const int32_t *src = s->kv.seqs[q].pages;
        int *dst = cs->h_pt + (size_t)q * stride;
        for (int k = 0; k < np; k++)
            if (dst[k] != src[k]) {
                const long long at = (long long)q * stride + k;
                dst[k] = src[k];
                lo = at < lo ? at : lo;
                hi = at > hi ? at : hi;
            }
    }
    /* pinned and async: the previous copy from h_pt ended with the
     * evaluation that issued it (each one waits for its stream) */
    if (hi >= 0)
        CU_TRY(cudaMemcpyAsync(cs->d_pt + lo, cs->h_pt + lo, (size_t)(hi - lo + 1) * sizeof(int),
                               cudaMemcpyHostToDevice, cs->st));
    return DP_OK;
}

int cuda_copy_page(dp_session *s, int src, int dst) {
    CudaState *cs = cu_state(s);
    return dp_cu_copy_page(cs->kc, cs->vc, s->m->hp.n_layer, cs->layer_elems, cs->page_elems, src, dst, cs->st);
}

namespace {

/* The run holding row r. */
const dp_run *run_of(const dp_batch *b, int r) {
    int k = 0;
    while (k + 1 < b->n_runs && b->runs[k + 1].row0 <= r) k++;
    return &b->runs[k];
}

/* Rows row0 .. row0 + n - 1 of b into h_io (rows 0 .. n - 1), then pad
 * rows up to n_pad (no sequence: skipped by attention and the K/V store). */
void put_rows(CudaState *cs, const dp_batch *b, int row0, int n, int n_pad) {
    for (int i = 0; i < n_pad; i++) {
        int *r = cs->h_io + ROW_INTS * i;
        if (i < n) {
            const dp_run *u = run_of(b, row0 + i);
            r[ROW_TOK] = b->tokens[row0 + i], r[ROW_POS] = u->pos0 + (row0 + i - u->row0), r[ROW_SEQ] = u->seq;
        } else {
            r[ROW_TOK] = 0, r[ROW_POS] = 0, r[ROW_SEQ] = -1;
        }
    }
}

int is_greedy(const dp_sampler *smp) {
    const dp_sampler_params *p = dp_sampler_params_of(smp);
    return p->temp <= 0 && p->repeat_penalty == 1.0f;
}

/* What wanted row j needs. */
enum { NEED_LOGITS = 1, NEED_KEY = 2, NEED_DRAW = 4, NEED_NONE = 8 };

/* Wanted row j's constraint, when the device is to draw it. */
dp_constraint *row_constraint(const dp_batch *b, int j) {
    return b->constraints && b->samplers && b->samplers[j] && !(b->keep && b->keep[j]) ? b->constraints[j] : NULL;
}

/* Row k's mask (constraint c) into h_allow row k, and its place on the
 * device into the row's sampler settings; the masks' buffers are made at
 * the first. 1, or 0 where the mask is empty (no token can continue), or
 * a dp_status. Waits for the mask where a caller's thread is working it
 * out. */
int put_mask(dp_session *s, dp_constraint *c, int k) {
    CudaState *cs = cu_state(s);
    const int W = (s->m->hp.n_vocab + 31) / 32;
    if (!cs->h_allow) {
        const size_t bytes = (size_t)cs->logit_rows * (size_t)W * sizeof(uint32_t);
        if (cudaMalloc((void **)&cs->d_allow, bytes) != cudaSuccess ||
            cudaHostAlloc((void **)&cs->h_allow, bytes, cudaHostAllocDefault) != cudaSuccess) {
            cudaGetLastError();
            return dp_set_error(DP_ERR_NOMEM, "CUDA: out of memory for the constraints' token masks");
        }
        cs->allow_words = W;
    }
    int n_words, n_allowed;
    const uint32_t *bits = dp_constraint_bits(c, &n_words, &n_allowed);
    if (!n_allowed) return 0;
    uint32_t *row = cs->h_allow + (size_t)k * W;
    const int n = n_words < W ? n_words : W;
    memcpy(row, bits, (size_t)n * sizeof(uint32_t));
    memset(row + n, 0, (size_t)(W - n) * sizeof(uint32_t));
    cs->h_sp[k].allow = cs->d_allow + (size_t)k * W;
    return 1;
}

/* Outputs of wanted rows j0 .. j0 + cnt - 1 of b, whose logits and argmax
 * keys are device rows dev[0 .. cnt - 1] of cs->logits and d_key (n_keys
 * keys there): the constrained rows' masks (worked out while the pass
 * runs) and one copy up, the device sampler queued where it draws, the
 * copies back, then (after the wait) the drawn tokens. */
int finish_rows(dp_session *s, const dp_batch *b, int j0, int cnt, const int *dev, int n_keys) {
    CudaState *cs = cu_state(s);
    const size_t V = (size_t)s->m->hp.n_vocab;
    int any_key = 0, n_masks = 0, *need = cs->h_tmp + 2 * cs->rows_cap;
    for (int k = 0; k < cnt; k++) {
        const int j = j0 + k;
        dp_sampler *smp = b->samplers ? b->samplers[j] : NULL;
        dp_constraint *c = row_constraint(b, j);
        const int keep = !b->keep || b->keep[j];
        need[k] = NEED_LOGITS;
        if (c) {
            if (cu_device_draws(s, smp, k, 1)) {
                const int put = put_mask(s, c, k);
                if (put < 0) return put;
                need[k] = put ? NEED_DRAW : NEED_NONE;
                n_masks = k + 1;
            } /* else the host sampler draws from the logits, and masks them */
        } else if (smp && !keep) {
            if (is_greedy(smp)) need[k] = NEED_KEY;
            else if (cu_device_draws(s, smp, k, 0)) need[k] = NEED_DRAW;
        }
    }
    if (n_masks)
        CU_TRY(cudaMemcpyAsync(cs->d_allow, cs->h_allow, (size_t)n_masks * cs->allow_words * sizeof(uint32_t),
                               cudaMemcpyHostToDevice, cs->st));
    for (int k = 0; k < cnt; k++) {
        const int j = j0 + k;
        if (need[k] == NEED_DRAW) {
            CU_TRY(cudaMemcpyAsync(cs->d_sp + k, cs->h_sp + k, sizeof *cs->h_sp, cudaMemcpyHostToDevice, cs->st));
            TRY(dp_cu_sample(cs->logits + (size_t)dev[k] * V, (int)V, cs->d_sp + k, cs->ckey, cs->cid, cs->d_tok + k,
                             cs->st));
            CU_TRY(cudaMemcpyAsync(cs->h_tok + k, cs->d_tok + k, sizeof(int), cudaMemcpyDeviceToHost, cs->st));
        }
        any_key |= need[k] == NEED_KEY;
        if (need[k] == NEED_LOGITS)
            CU_TRY(cudaMemcpyAsync(b->logits + (size_t)j * V, cs->logits + (size_t)dev[k] * V, V * sizeof(float),
                                   cudaMemcpyDeviceToHost, cs->st));
    }
    if (any_key)
        CU_TRY(cudaMemcpyAsync(cs->h_key, cs->d_key, (size_t)n_keys * sizeof *cs->h_key, cudaMemcpyDeviceToHost,
                               cs->st));
    CU_TRY(cudaStreamSynchronize(cs->st));
    for (int k = 0; k < cnt && b->drawn; k++) {
        if (need[k] == NEED_KEY) b->drawn[j0 + k] = key_token(cs->h_key[dev[k]]);
        else if (need[k] == NEED_DRAW) b->drawn[j0 + k] = cs->h_tok[k];
        else if (need[k] == NEED_NONE) b->drawn[j0 + k] = DP_DRAWN_NONE;
    }
    return cu_prof_collect(s, cs->pool);
}

/* One decode row (dp_eval's and most single-sequence steps): the
 * single-row graph with the output its sampler allows; under a constraint
 * the logits stay on the device for the mask and the draw, as a batch's
 * rows. */
int one_row(dp_session *s, const dp_batch *b) {
    CudaState *cs = cu_state(s);
    const dp_run *u = &b->runs[0];
    dp_sampler *smp = b->n_out && b->samplers ? b->samplers[0] : NULL;
    const int keep = b->n_out && (!b->keep || b->keep[0]);
    if (b->n_out && row_constraint(b, 0)) {
        static const int dev0 = 0;
        TRY(cuda_settle(s));
        cu_rows_seq(cs, b->tokens, 1, u->pos0, u->seq);
        TRY(cu_evaluate(s, 1, u->pos0, OUT_DEVICE, 0));
        return finish_rows(s, b, 0, 1, &dev0, 1);
    }
    int out = OUT_LOGITS;
    if (smp && !keep) out = is_greedy(smp) ? OUT_ARGMAX : cu_device_draws(s, smp, 0, 0) ? OUT_SAMPLE : OUT_LOGITS;
    if (out == OUT_ARGMAX && !s->trace_fn) { /* as dp_eval_sample: the next step queued ahead */
        int32_t next = -1;
        TRY(cu_greedy_step(s, u->seq, b->tokens[0], u->pos0, &next));
        if (b->drawn) b->drawn[0] = next;
        return DP_OK;
    }
    cu_rows_seq(cs, b->tokens, 1, u->pos0, u->seq);
    TRY(cu_evaluate(s, 1, u->pos0, out, 0));
    CU_TRY(cudaStreamSynchronize(cs->st));
    TRY(cu_prof_collect(s, cs->pool));
    if (!b->n_out) return DP_OK;
    if (out == OUT_ARGMAX || out == OUT_SAMPLE) {
        if (b->drawn) b->drawn[0] = out == OUT_ARGMAX ? key_token(cs->h_key[0]) : cs->h_tok[0];
    } else if (b->logits != s->logits) {
        memcpy(b->logits, s->logits, sizeof(float) * (size_t)s->m->hp.n_vocab);
        s->n_logits = 0; /* dp_logits' rows were overwritten */
    }
    return DP_OK;
}

/* Decode rows of 2 .. 64 sequences: a batched decode graph per power of two
 * (the padding rows compute nothing that is kept), logits and keys of
 * every row on the device. */
int decode_rows(dp_session *s, const dp_batch *b, int nb) {
    CudaState *cs = cu_state(s);
    put_rows(cs, b, 0, b->n_rows, nb);
    TRY(cu_evaluate(s, nb, 0, OUT_LOGITS_ALL, nb));
    return finish_rows(s, b, 0, b->n_out, b->out_rows, nb);
}

/* The hidden states b wants of rows row0 .. row0 + n - 1, from the final
 * norm's output of the pass (xn: every row), to the host; each stretch of
 * consecutive rows in one copy. */
int copy_hidden(dp_session *s, const dp_batch *b, int row0, int n) {
    CudaState *cs = cu_state(s);
    const size_t E = (size_t)s->m->hp.n_embd;
    for (int k = 0, e; k < b->n_hid; k = e) {
        const int r = b->hid_rows[k];
        for (e = k + 1; e < b->n_hid && b->hid_rows[e] == r + (e - k);) e++;
        const int lo = r > row0 ? r : row0, hi = r + (e - k) < row0 + n ? r + (e - k) : row0 + n;
        if (lo < hi)
            CU_TRY(cudaMemcpyAsync(b->hidden + (size_t)(k + lo - r) * E, cs->xn + (size_t)(lo - row0) * E,
                                   (size_t)(hi - lo) * E * sizeof(float), cudaMemcpyDeviceToHost, cs->st));
    }
    return DP_OK;
}

/* Rows row0 .. row0 + n - 1 in one eager pass, the wanted ones among them
 * (j0 .. j1 - 1) through the LM head in groups of logit_rows. */
int eager_rows(dp_session *s, const dp_batch *b, int row0, int n, int j0, int j1) {
    CudaState *cs = cu_state(s);
    const dp_run *u = run_of(b, row0);
    const int pos0 = u->pos0 + (row0 - u->row0);
    int *ro = cs->h_io + ROW_INTS * cs->rows_cap, *dev = cs->h_tmp + 3 * cs->rows_cap;
    put_rows(cs, b, row0, n, n);
    for (int j = j0, first = 1; first || j < j1; first = 0) {
        const int cnt = j1 - j < cs->logit_rows ? j1 - j : cs->logit_rows;
        for (int k = 0; k < cnt; k++) ro[k] = b->out_rows[j + k] - row0, dev[k] = k;
        if (first) {
            TRY(cu_evaluate(s, n, pos0, OUT_ROWS, cnt));
            TRY(copy_hidden(s, b, row0, n));
        } else { /* the rows_out of the previous group were copied before its wait */
            CU_TRY(cudaMemcpyAsync(cs->rows_out, ro, (size_t)cnt * sizeof(int), cudaMemcpyHostToDevice, cs->st));
            TRY(cu_lm_rows(s, n, pos0, cnt));
        }
        TRY(finish_rows(s, b, j, cnt, dev, cnt));
        j += cnt;
    }
    return DP_OK;
}

/* Runs k0 .. k1 - 1 of b (consecutive rows) as one eager pass with their
 * wanted rows (consecutive in out_rows, dp_batch). */
int run_span(dp_session *s, const dp_batch *b, int k0, int k1) {
    const int row0 = b->runs[k0].row0, row1 = b->runs[k1 - 1].row0 + b->runs[k1 - 1].n;
    int j = 0, e;
    while (j < b->n_out && (b->out_rows[j] < row0 || b->out_rows[j] >= row1)) j++;
    for (e = j; e < b->n_out && b->out_rows[e] >= row0 && b->out_rows[e] < row1;) e++;
    return eager_rows(s, b, row0, row1 - row0, j, e);
}

/* A traced batch: each run (sequence) as a pass of its own, so that every
 * event covers one sequence. */
int traced(dp_session *s, const dp_batch *b) {
    for (int k = 0; k < b->n_runs && !s->trace_stop; k++) {
        s->trace_seq = b->runs[k].seq;
        TRY(run_span(s, b, k, k + 1));
    }
    return s->trace_stop ? DP_ERR_STOPPED : DP_OK;
}

/* The RoPE tables run k selects (LongRoPE: the long set once the
 * sequence's positions pass the original context). */
const float *run_rope(const dp_session *s, const dp_batch *b, int k) {
    return dp_hparams_rope_tables(&s->m->hp, b->runs[k].pos0 + b->runs[k].n);
}

/* A batch whose sequences select different RoPE tables: each stretch of
 * runs that agree as a pass of its own, so that every sequence's rows take
 * the tables its own positions select, as alone (and as the CPU backend).
 * Returns 1 when it ran the batch (rc in *rc), 0 when the runs agree. */
int by_rope_set(dp_session *s, const dp_batch *b, int *rc) {
    int k = 1;
    while (k < b->n_runs && run_rope(s, b, k) == run_rope(s, b, 0)) k++;
    if (k == b->n_runs) return 0;
    *rc = DP_OK;
    for (int k0 = 0, k1; k0 < b->n_runs && !*rc; k0 = k1) {
        for (k1 = k0 + 1; k1 < b->n_runs && run_rope(s, b, k1) == run_rope(s, b, k0);) k1++;
        *rc = run_span(s, b, k0, k1);
    }
    return 1;
}

} // namespace

int cuda_forward_batch(dp_session *s, const dp_batch *b) {
    CudaState *cs = cu_state(s);
    if (b->n_rows > cs->rows_cap)
        return dp_set_error(DP_ERR_BACKEND, "CUDA: a batch of %d rows exceeds the %d prepared", b->n_rows,
                            cs->rows_cap);
    int *seqs = cs->h_tmp, *ends = cs->h_tmp + cs->rows_cap, decode = 1;
    for (int k = 0; k < b->n_runs; k++) {
        seqs[k] = b->runs[k].seq, ends[k] = b->runs[k].pos0 + b->runs[k].n;
        decode &= b->runs[k].n == 1;
    }
    /* a decode step queued ahead runs before these copies (one stream) */
    TRY(cu_sync_pages(s, seqs, ends, b->n_runs));
    /* the single-row and batched decode graphs keep no row's final norm: hidden states take the eager pass */
    if (decode && b->n_rows == 1 && !s->trace_fn && !b->n_hid) return one_row(s, b); /* it may take the queued step */
    TRY(cuda_settle(s));
    if (s->trace_fn) return traced(s, b);
    int rc;
    if (by_rope_set(s, b, &rc)) return rc;
    int nb = 2; /* a batched decode step's bucket */
    while (nb < b->n_rows) nb *= 2;
    if (decode && nb <= MAX_BUCKET && nb <= cs->logit_rows && cs->graph_rows && !s->prof && !b->n_hid)
        return decode_rows(s, b, nb);
    return eager_rows(s, b, 0, b->n_rows, 0, b->n_out);
}
