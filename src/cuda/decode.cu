/* Evaluation on the CUDA backend: one token's way from dp_eval_sample to
 * the logits or the next token, and the execution of every pass.
 *
 *   cuda_eval_sample -> greedy_step (greedy, one token: one step queued
 *   ahead) or cu_evaluate per batch chunk -> a replayed decode graph (one
 *   row, no tracing; or a batched decode step of 2 .. 64 rows) or
 *   cu_forward eagerly -> the output copied back.
 *
 * A decode step (cu_forward with n = 1) is captured as a CUDA graph once per
 * output kind and class of context (the decode attention's number of key
 * slices, a power of two that grows with the context: a handful of graphs
 * over a long generation) and replayed for each token; a batched decode
 * step once per power-of-two number of rows (padding rows fill the
 * bucket). The tokens, positions and sequences travel through device
 * memory, the page tables too, so a graph never changes. */
#include <string.h>

#include "state.cuh"

int cu_rope_select(dp_session *s, int n_pos) {
    CudaState *cs = cu_state(s);
    const dp_hparams *hp = &s->m->hp;
    const int want = (int)(dp_hparams_rope_tables(hp, n_pos) - hp->rope_inv_freq) / (hp->n_rot ? hp->n_rot : 1);
    if (want == cs->rope_set) return DP_OK;
    CU_TRY(cudaMemcpyAsync(cs->rope_active, cs->rope_sets + (size_t)want * hp->n_rot, (size_t)hp->n_rot * sizeof(float),
                           cudaMemcpyDeviceToDevice, cs->st));
    cs->rope_set = want;
    return DP_OK;
}

namespace {

/* The decode attention's slices for a step at pos0 into cs->attn_slices;
 * returns the class of context (its graphs' index). */
int slice_class(dp_session *s, int pos0) {
    const dp_hparams *hp = &s->m->hp;
    const int S = dp_cu_attention_slices(pos0 + 1, hp->n_head, hp->head_dim);
    int cls = 0;
    for (int t = S; t > 0; t >>= 1) cls++;
    cu_state(s)->attn_slices = S;
    return cls;
}

/* Captures a decode step of n rows into *ge: the input copy (chain < 0) or
 * the chained input (one row; chain = the h_key slot it writes,
 * OUT_ARGMAX), the kernels, the output copy (one row; several leave the
 * logits and keys on the device). Without programmatic dependent launch
 * where a capture with it fails. */
int capture(dp_session *s, cudaGraphExec_t *ge, int n, int pos0, int out, int chain) {
    CudaState *cs = cu_state(s);
    const size_t V = (size_t)s->m->hp.n_vocab;
    unsigned long long *hk = cs->h_key + (chain > 0 ? chain : 0);
    for (int attempt = 0; !*ge && attempt < 2; attempt++) {
        cudaGraph_t g = NULL;
        CU_TRY(cudaStreamBeginCapture(cs->st, cudaStreamCaptureModeThreadLocal));
        int rc = (chain >= 0 ? dp_cu_chain_input(cs->d_io, cs->d_key, cs->st) == DP_OK
                             : cudaMemcpyAsync(cs->d_io, cs->h_io, (size_t)(ROW_INTS * n) * sizeof(int),
                                               cudaMemcpyHostToDevice, cs->st) == cudaSuccess)
                     ? DP_OK
                     : dp_set_error(DP_ERR_BACKEND, "CUDA: capturing the input copy failed");
        if (!rc && out == OUT_SAMPLE &&
            cudaMemcpyAsync(cs->d_sp, cs->h_sp, sizeof *cs->h_sp, cudaMemcpyHostToDevice, cs->st) != cudaSuccess)
            rc = dp_set_error(DP_ERR_BACKEND, "CUDA: capturing the sampler input copy failed");
        if (!rc) rc = cu_forward(s, n, pos0, out, n);
        if (!rc && n == 1) {
            cudaError_t e = cudaSuccess;
            if (out == OUT_ARGMAX) e = cudaMemcpyAsync(hk, cs->d_key, sizeof *hk, cudaMemcpyDeviceToHost, cs->st);
            else if (out == OUT_SAMPLE)
                e = cudaMemcpyAsync(cs->h_tok, cs->d_tok, sizeof *cs->h_tok, cudaMemcpyDeviceToHost, cs->st);
            else if (out == OUT_LOGITS && cs->logits_pinned)
                e = cudaMemcpyAsync(s->logits, cs->logits, V * sizeof(float), cudaMemcpyDeviceToHost, cs->st);
            if (e != cudaSuccess) rc = dp_set_error(DP_ERR_BACKEND, "CUDA: capturing the output copy failed");
        }
        cudaError_t e = cudaStreamEndCapture(cs->st, &g);
        if (!rc && e != cudaSuccess)
            rc = dp_set_error(DP_ERR_BACKEND, "CUDA: graph capture failed: %s", cudaGetErrorString(e));
        if (!rc) {
            e = cudaGraphInstantiate(ge, g, 0);
            if (e != cudaSuccess) {
                *ge = NULL;
                rc = dp_set_error(DP_ERR_BACKEND, "CUDA: graph instantiation failed: %s", cudaGetErrorString(e));
            }
        }
#ifdef DOPPLER_CUDA_LAB
        if (!rc) rc = cu_lab_skip(s, g, *ge);
#endif
        if (g) cudaGraphDestroy(g);
        if (rc) {
            cudaGetLastError();
            if (attempt == 0 && dp_cu_pdl) {
                fprintf(stderr, "doppler: CUDA graph capture with programmatic dependent launch failed (%s); "
                                "continuing without it\n", dp_last_error());
                dp_cu_pdl = 0;
                continue;
            }
            return rc;
        }
    }
    return DP_OK;
}

} // namespace

int cu_evaluate(dp_session *s, int n, int pos0, int out, int n_out) {
    CudaState *cs = cu_state(s);
    TRY(cuda_settle(s));
    /* LongRoPE tables by the furthest position of the pass, as HF picks
     * them by the largest position id of its input */
    int n_pos = 0;
    for (int i = 0; i < n; i++)
        if (cs->h_io[ROW_INTS * i + ROW_SEQ] >= 0 && cs->h_io[ROW_INTS * i + ROW_POS] >= n_pos)
            n_pos = cs->h_io[ROW_INTS * i + ROW_POS] + 1;
    TRY(cu_rope_select(s, n_pos));
    const size_t nlog = (size_t)(out == OUT_LOGITS_ALL ? n : 1) * (size_t)s->m->hp.n_vocab;
    /* a batched decode step of a power-of-two number of rows (the caller pads) */
    int bucket = -1;
    if (n > 1 && n <= MAX_BUCKET && !(n & (n - 1)) && out == OUT_LOGITS_ALL && !s->trace_fn && !s->prof &&
        cs->graph_rows)
        for (bucket = 0; (2 << bucket) < n;) bucket++;
    cs->attn_slices = 0;
    /* decode rows whose contexts are short: a CTA per (row, query head)
     * (k_attn_split, no combine); longer ones split the keys (k_attention),
     * each class with its own graphs */
    cs->attn_rows = n > 1 && n_pos <= dp_cu_set.attn_rows_keys;
    if (bucket >= 0) {
        cs->pool = &cs->pe;
        cudaGraphExec_t *ge = &cs->bgraph[cs->attn_rows][bucket];
        if (capture(s, ge, n, pos0, out, -1) == DP_OK) {
            CU_TRY(cudaGraphLaunch(*ge, cs->st));
            return DP_OK;
        }
        /* a step the stream capture could not take (a library call that
         * allocates, say): this session's batched steps run eagerly */
        fprintf(stderr, "doppler: capturing a batched decode step failed (%s); those steps run without graphs\n",
                dp_last_error());
        cs->graph_rows = 0;
        bucket = -1;
    }
    /* one row: the decode graphs of the single-row outputs (a row wanted
     * by OUT_ROWS, as a batch of one sequence's own tables, runs eagerly) */
    const int use_graph = n == 1 && !s->trace_fn && out < N_OUT;
    cs->pool = use_graph ? &cs->pg[out] : &cs->pe;
    const int cls = n == 1 ? slice_class(s, pos0) : 0;
    if (use_graph) {
        cudaGraphExec_t *ge = &cs->graph[out + (s->prof ? N_OUT : 0) + 2 * N_OUT * cls];
        TRY(capture(s, ge, 1, pos0, out, -1));
        CU_TRY(cudaGraphLaunch(*ge, cs->st));
        if (out == OUT_LOGITS && !cs->logits_pinned) /* the graph copies pinned logits itself */
            CU_TRY(cudaMemcpyAsync(s->logits, cs->logits, nlog * sizeof(float), cudaMemcpyDeviceToHost, cs->st));
    } else {
        CU_TRY(cudaMemcpyAsync(cs->d_io, cs->h_io, (size_t)(ROW_INTS * n) * sizeof(int), cudaMemcpyHostToDevice,
                               cs->st));
        if (out == OUT_ROWS && n_out > 0)
            CU_TRY(cudaMemcpyAsync(cs->rows_out, cs->h_io + ROW_INTS * cs->rows_cap, (size_t)n_out * sizeof(int),
                                   cudaMemcpyHostToDevice, cs->st));
        if (out == OUT_SAMPLE)
            CU_TRY(cudaMemcpyAsync(cs->d_sp, cs->h_sp, sizeof *cs->h_sp, cudaMemcpyHostToDevice, cs->st));
        TRY(cu_forward(s, n, pos0, out, n_out));
        if (out == OUT_ARGMAX)
            CU_TRY(cudaMemcpyAsync(cs->h_key, cs->d_key, sizeof *cs->h_key, cudaMemcpyDeviceToHost, cs->st));
        else if (out == OUT_SAMPLE)
            CU_TRY(cudaMemcpyAsync(cs->h_tok, cs->d_tok, sizeof *cs->h_tok, cudaMemcpyDeviceToHost, cs->st));
        else if (out == OUT_LOGITS)
            CU_TRY(cudaMemcpyAsync(s->logits, cs->logits, nlog * sizeof(float), cudaMemcpyDeviceToHost, cs->st));
    }
    return DP_OK;
}

int cu_warm_gemms(dp_session *s) {
    CudaState *cs = cu_state(s);
    const int top = dp_cu_set.gemm_buckets ? (cs->rows_cap < 512 ? cs->rows_cap : 512) : 0;
    int b = cu_gemm_bucket(cs->f16_min_rows);
    if (b > cs->rows_cap) return DP_OK;
    do { /* b rows of padding: no page is read or written, no logits kept */
        for (int i = 0; i < b; i++) {
            int *r = cs->h_io + ROW_INTS * i;
            r[ROW_TOK] = 0, r[ROW_POS] = 0, r[ROW_SEQ] = -1;
        }
        TRY(cu_evaluate(s, b, 0, OUT_ROWS, 0));
        b = cu_gemm_bucket(b + 1);
    } while (b <= top);
    CU_TRY(cudaStreamSynchronize(cs->st));
    return DP_OK;
}

namespace {

/* One evaluation of n rows of sequence seq at pos0 with its output copied back. */
int evaluate(dp_session *s, int seq, const int32_t *tokens, int n, int pos0, int out) {
    CudaState *cs = cu_state(s);
    TRY(cuda_settle(s));
    cu_rows_seq(cs, tokens, n, pos0, seq);
    TRY(cu_evaluate(s, n, pos0, out, 0));
    CU_TRY(cudaStreamSynchronize(cs->st));
    return cu_prof_collect(s, cs->pool);
}

} // namespace

/* A greedy decode step. Steps run one graph ahead: once the caller's step
 * is known, the step after it is queued at once with the token the device
 * chose (a kernel copies it and the next position into the graph's input,
 * its output goes to the other h_key slot), so the GPU does not wait for
 * the host between tokens. A call for exactly that step (the same
 * sequence, the token this returned, at the next position) queues the one
 * after and then only waits for it; any other call first waits for it and
 * drops it: it wrote only the K/V row of a position past the sequence's
 * length in a page the sequence holds, which the caller's own step (or a
 * copy on write before it) overwrites. */
int cu_greedy_step(dp_session *s, int seq, int32_t tok, int pos0, int32_t *next) {
    CudaState *cs = cu_state(s);
    /* the next step must fit the context and the page of this one (its page
     * table entry is on the device); tracing and profiling run each step
     * on its own */
    const int can = !s->trace_fn && !s->prof && pos0 + 2 <= s->n_ctx && ((pos0 + 1) & ((1 << cs->page_shift) - 1));
    if (cs->ahead && (cs->ahead_seq != seq || cs->ahead_pos != pos0 || cs->ahead_tok != tok)) TRY(cuda_settle(s));
    int slot;
    if (cs->ahead) { /* the queued step is this one */
        slot = cs->ahead_slot;
        cs->ahead = 0;
    } else {
        TRY(evaluate(s, seq, &tok, 1, pos0, OUT_ARGMAX)); /* slot 0, done */
        *next = key_token(cs->h_key[0]);
        if (!can) return DP_OK;
        slot = -1;
    }
    if (can) { /* queue the step after, behind the one in flight */
        const int ns = slot == 1 ? 0 : 1, cls = slice_class(s, pos0 + 1);
        TRY(capture(s, &cs->chain[ns][cls], 1, pos0 + 1, OUT_ARGMAX, ns));
        TRY(cu_rope_select(s, pos0 + 2));
        CU_TRY(cudaGraphLaunch(cs->chain[ns][cls], cs->st));
        CU_TRY(cudaEventRecord(cs->ev_slot[ns], cs->st));
        cs->ahead = 1, cs->ahead_seq = seq, cs->ahead_pos = pos0 + 1, cs->ahead_slot = ns;
    }
    if (slot >= 0) {
        CU_TRY(cudaEventSynchronize(cs->ev_slot[slot]));
        *next = key_token(cs->h_key[slot]);
    }
    if (cs->ahead) cs->ahead_tok = *next;
    return DP_OK;
}

namespace {

/* A batch chunk of cuda_eval_sample: its own output kind on the last. */
int eval_chunk(dp_session *s, const int32_t *tokens, int n, int pos0, int last, void *out_last) {
    return evaluate(s, 0, tokens, n, pos0, last ? *(const int *)out_last : OUT_LOGITS);
}

} // namespace

/* Whether the device can draw for this sampler (the settings and the
 * uniform then go into cs->h_sp[row]): top-k sampling with k up to
 * DP_SAMPLE_KMAX, and greedy with a repetition penalty (or under a mask),
 * by the host sampler's rules (sample.cu) with the uniform drawn here from
 * its stream. */
int cu_device_draws(dp_session *s, dp_sampler *smp, int row, int masked) {
    const dp_sampler_params *p = dp_sampler_params_of(smp);
    const int V = s->m->hp.n_vocab, k = p->temp <= 0 ? 1 : p->top_k;
    const int32_t *recent = NULL;
    const int n_recent = p->repeat_penalty != 1.0f ? dp_sampler_recent(smp, &recent) : 0;
    if ((p->temp <= 0 && p->repeat_penalty == 1.0f && !masked) || k < 1 || k > DP_SAMPLE_KMAX || k > V ||
        n_recent > DP_SAMPLE_MAX_RECENT)
        return 0;
    DpSampleArgs *a = cu_state(s)->h_sp + row;
    a->u = p->temp > 0 ? dp_sampler_uniform(smp) : 0.0;
    a->temp = p->temp, a->top_p = p->top_p, a->min_p = p->min_p, a->penalty = p->repeat_penalty;
    a->top_k = k;
    a->allow = NULL;
    a->n_recent = 0; /* each distinct token once, as the host sampler penalises */
    for (int i = 0; i < n_recent; i++) {
        int seen = 0;
        for (int j = 0; j < a->n_recent; j++) seen |= a->recent[j] == recent[i];
        if (!seen && recent[i] >= 0 && recent[i] < V) a->recent[a->n_recent++] = recent[i];
    }
    return 1;
}

int cuda_settle(dp_session *s) {
    CudaState *cs = cu_state(s);
    if (!cs->ahead) return DP_OK;
    cs->ahead = 0;
    CU_TRY(cudaStreamSynchronize(cs->st));
    return DP_OK;
}

/* Only the token comes back where the device draws: greedy without a
 * repetition penalty as an argmax fused into the LM head, other settings
 * by the device sampler. Otherwise the logits come back and the host
 * sampler draws (the same code as the CPU backend). */
int cuda_eval_sample(dp_session *s, const int32_t *tokens, int n, int pos0, dp_sampler *smp, int32_t *next) {
    CudaState *cs = cu_state(s);
    const dp_sampler_params *p = dp_sampler_params_of(smp);
    const int seq0 = 0, end = pos0 + n;
    TRY(cu_sync_pages(s, &seq0, &end, 1));
    const int out = cu_device_draws(s, smp, 0, 0) ? OUT_SAMPLE
                    : p->temp <= 0 && p->repeat_penalty == 1.0f ? OUT_ARGMAX
                                                                : OUT_LOGITS;
    if (out == OUT_ARGMAX && n == 1) return cu_greedy_step(s, 0, tokens[0], pos0, next);
    TRY(dp_eval_chunks(s, tokens, n, pos0, eval_chunk, (void *)&out));
    *next = out == OUT_SAMPLE   ? *cs->h_tok
            : out == OUT_ARGMAX ? key_token(cs->h_key[0])
                                : dp_sampler_sample(smp, s->logits);
    return DP_OK;
}
