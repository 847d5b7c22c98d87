/* The CPU forward pass, float32, one function from token ids to logits.
 *
 * Follow one batch of n rows through the model: runs of positions of
 * different sequences (session.h's dp_batch), stacked so that every matmul
 * reads the weights once for all of them:
 *   embed -> [per layer: norm, Q/K/V, q/k norm, RoPE, KV store, attention,
 *   o_proj, (post norm), residual, norm, gate/up, activation, down,
 *   (post norm), residual] -> final norm -> LM head (wanted rows only).
 * Attention is per run, over its own sequence's KV pages. Rows of one-row
 * runs are computed exactly as a one-position pass computes them, so a
 * sequence's logits do not depend on the batch it is in.
 * Every quirk comes from the recipe (arch.h); every named step can be traced
 * (one event per run). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../prof.h"
#include "../quant.h"
#include "../sampler.h"
#include "../session.h"
#include "../trace.h"
#include "../util.h"
#include "ops.h"

typedef struct {
    /* KV pages, elements of s->kv_eb bytes (float32, or f16 when the
     * session asks): K and V [n_layer][n_pages][page_size][kv_dim]
     * (attention.c) */
    uint8_t *k_cache, *v_cache;
    size_t layer_bytes; /* one layer's pages */
    /* scratch, sized for n_batch positions */
    float *x;        /* residual stream [n][n_embd] */
    float *xn;       /* normed input [n][n_embd] */
    float *q;        /* [n][n_head*head_dim] */
    float *k, *v;    /* [n][kv_dim] */
    float *att;      /* attention output [n][n_head*head_dim] */
    float *o;        /* projection output [n][n_embd] */
    float *gate, *up;/* [n][n_ff] */
    float *act;      /* act(gate) * up [n][n_ff] */
    float *rope_cs;  /* cos/sin tables [n][2 (global, local)][n_rot] */
    float *probs;    /* [n][n_head][n_ctx] while attn_scores is traced */
    float *xo;       /* final-normed rows whose logits are wanted [n][n_embd] */
    cpu_attn_run *aruns; /* per run */
    float *row;      /* dequantized weight row [max cols] */
    float *norm_w;   /* all norm weights as float32, see norm_* offsets */
    size_t *norm_off;/* per layer: 6 offsets into norm_w */
    size_t out_norm_off;
    cpu_ctx cx;      /* kernels, thread pool, per-thread scratch */
    cpu_screen screen; /* greedy rows of the LM head (lm_screen.c) */
    unsigned char *scr; /* per wanted row: screened */
    int32_t *scr_tok;
} cpu_state;

enum { NW_ATTN, NW_Q, NW_K, NW_POST_ATTN, NW_FFN, NW_POST_FFN, NW_COUNT };

static int cpu_init(dp_session *s) {
    const dp_model *m = s->m;
    const dp_hparams *hp = &m->hp;
    cpu_state *st = dp_calloc(1, sizeof *st);
    if (!st) return DP_ERR_NOMEM;
    s->be_state = st;
    size_t B = (size_t)s->n_batch, PS = (size_t)s->kv.page_size, NP = (size_t)s->kv.n_pages;
    size_t E = (size_t)hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim, KV = (size_t)hp->n_head_kv * hp->head_dim;
    size_t F = (size_t)hp->n_ff, L = (size_t)hp->n_layer;
    size_t maxc = E > Q ? E : Q;
    if (F > maxc) maxc = F;
    st->layer_bytes = NP * PS * KV * (size_t)s->kv_eb;
    st->k_cache = dp_malloc_aligned(L * st->layer_bytes);
    st->v_cache = dp_malloc_aligned(L * st->layer_bytes);
    st->xo = dp_malloc_aligned(B * E * sizeof(float));
    st->aruns = dp_calloc(B, sizeof(cpu_attn_run));
    st->scr = dp_calloc(B, 1);
    st->scr_tok = dp_calloc(B, sizeof(int32_t));
    st->x = dp_malloc_aligned(B * E * sizeof(float));
    st->xn = dp_malloc_aligned(B * E * sizeof(float));
    st->q = dp_malloc_aligned(B * Q * sizeof(float));
    st->k = dp_malloc_aligned(B * KV * sizeof(float));
    st->v = dp_malloc_aligned(B * KV * sizeof(float));
    st->att = dp_malloc_aligned(B * Q * sizeof(float));
    st->o = dp_malloc_aligned(B * E * sizeof(float));
    st->gate = dp_malloc_aligned(B * F * sizeof(float));
    st->up = dp_malloc_aligned(B * F * sizeof(float));
    st->act = dp_malloc_aligned(B * F * sizeof(float));
    st->rope_cs = dp_malloc_aligned(B * 2 * (size_t)hp->n_rot * sizeof(float));
    st->row = dp_malloc_aligned(maxc * sizeof(float));
    st->norm_off = dp_calloc(L * NW_COUNT, sizeof(size_t));
    size_t nw = E + L * (4 * E + 2 * (size_t)hp->head_dim);
    st->norm_w = dp_malloc_aligned(nw * sizeof(float));
    if (!st->k_cache || !st->v_cache || !st->x || !st->xn || !st->q || !st->k || !st->v || !st->att || !st->o ||
        !st->gate || !st->up || !st->act || !st->rope_cs || !st->row || !st->norm_off || !st->norm_w || !st->xo ||
        !st->aruns || !st->scr || !st->scr_tok)
        return dp_set_error(DP_ERR_NOMEM, "out of memory for the CPU session (KV pool of %zu pages: %.1f MB)", NP,
                            2.0 * (double)L * (double)st->layer_bytes / 1e6);

    int64_t max_cols = (int64_t)maxc > m->output.cols ? (int64_t)maxc : m->output.cols;
    /* a prefill block's keys start at a page boundary: up to a page more */
    int single = s->n_seq_max < s->n_batch ? s->n_seq_max : s->n_batch;
    if (cpu_ctx_init(&st->cx, s->n_threads, max_cols, s->n_ctx + (int)PS, hp->n_head, hp->head_dim, NULL) != DP_OK ||
        cpu_ctx_rows(&st->cx, single, s->n_batch) != DP_OK)
        return DP_ERR_NOMEM;

    /* Norm weights are tiny: convert them to float32 once. */
    size_t off = 0;
#define LOADV(wt, slot)                                   \
    do {                                                  \
        if ((wt).data) {                                  \
            (slot) = off;                                 \
            cpu_load_vec(&(wt), st->norm_w + off);        \
            off += (size_t)(wt).cols;                     \
        }                                                 \
    } while (0)
    for (size_t l = 0; l < L; l++) {
        const dp_layer_weights *W = &m->layers[l];
        size_t *o = st->norm_off + l * NW_COUNT;
        LOADV(W->attn_norm, o[NW_ATTN]);
        LOADV(W->q_norm, o[NW_Q]);
        LOADV(W->k_norm, o[NW_K]);
        LOADV(W->post_attn_norm, o[NW_POST_ATTN]);
        LOADV(W->ffn_norm, o[NW_FFN]);
        LOADV(W->post_ffn_norm, o[NW_POST_FFN]);
    }
    LOADV(m->output_norm, st->out_norm_off);
#undef LOADV
    return DP_OK;
}

static void cpu_free(dp_session *s) {
    cpu_state *st = s->be_state;
    if (!st) return;
    dp_free_aligned(st->k_cache);
    dp_free_aligned(st->v_cache);
    float *bufs[] = {st->x, st->xn, st->q, st->k, st->v, st->att, st->o, st->gate,
                     st->up, st->act, st->rope_cs, st->probs, st->xo, st->row, st->norm_w};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dp_free_aligned(bufs[i]);
    free(st->norm_off);
    free(st->aruns);
    free(st->scr);
    free(st->scr_tok);
    cpu_screen_free(&st->screen);
    cpu_ctx_free(&st->cx);
    free(st);
    s->be_state = NULL;
}

static int cpu_trace_changed(dp_session *s) {
    cpu_state *st = s->be_state;
    int want = s->trace_fn && ((s->trace_points >> DP_TP_ATTN_SCORES) & 1);
    if (want && !st->probs) {
        const dp_hparams *hp = &s->m->hp;
        st->probs = dp_malloc_aligned((size_t)s->n_batch * hp->n_head * s->n_ctx * sizeof(float));
        if (!st->probs) return DP_ERR_NOMEM;
    }
    return DP_OK;
}

/* One event per run: the run's rows of data (dim floats each). */
static void trace_runs(dp_session *s, const dp_batch *b, int point, int layer, const float *data, int dim) {
    for (int r = 0; r < b->n_runs && !s->trace_stop; r++) {
        const dp_run *u = &b->runs[r];
        s->trace_seq = u->seq;
        dp_trace_emit(s, point, layer, u->pos0, u->n, dim, data + (size_t)u->row0 * dim);
    }
}

#define TRACE(point, layer, data, dim)                                         \
    do {                                                                       \
        if (dp_trace_on(s, point, layer)) trace_runs(s, b, point, layer, data, dim); \
    } while (0)

/* The run holding row r (runs are in row order). */
static const dp_run *run_of_row(const dp_batch *b, int r) {
    int lo = 0, hi = b->n_runs - 1;
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (b->runs[mid].row0 <= r) lo = mid;
        else hi = mid - 1;
    }
    return &b->runs[lo];
}

/* Adds n rows to the group a pass over just those n rows would use. */
static void add_rows(cpu_rows *g, int n) {
    cpu_rows p = cpu_rows_plain(n);
    g->single += p.single;
    g->matvec += p.matvec;
    g->blocked += p.blocked;
}

/* A sampler that takes the first maximum of the logits as they are
 * (dp_sampler_sample's greedy case). */
static int plain_greedy(const dp_sampler *smp) {
    const dp_sampler_params *p = dp_sampler_params_of(smp);
    const int32_t *recent;
    return p->temp <= 0 && (p->repeat_penalty == 1.0f || dp_sampler_recent(smp, &recent) == 0);
}

/* Marks the wanted rows whose token the screened LM head can draw: a
 * plain greedy sampler without a constraint, logits not kept, the run's
 * only wanted row (a single row of the integer path), no logits traced or
 * soft-capped.
 * Returns their count when at least two (one gains nothing: the weights'
 * bytes bound it), else 0. */
static int screened_rows(dp_session *s, const dp_batch *b, unsigned char *scr) {
    cpu_state *st = s->be_state;
    const dp_model *m = s->m;
    memset(scr, 0, (size_t)b->n_out);
    if (!b->samplers || !b->drawn || dp_trace_on(s, DP_TP_LOGITS, -1) || m->hp.final_softcap != 0.0f ||
        !cpu_screen_usable(&st->cx, &m->output))
        return 0;
    int n = 0;
    for (int j = 0; j < b->n_out; j++) {
        const dp_run *u = run_of_row(b, b->out_rows[j]);
        const int alone = (j == 0 || run_of_row(b, b->out_rows[j - 1]) != u) &&
                          (j + 1 == b->n_out || run_of_row(b, b->out_rows[j + 1]) != u);
        scr[j] = alone && b->samplers[j] && !(b->constraints && b->constraints[j]) && !b->keep[j] &&
                 plain_greedy(b->samplers[j]) && n < st->cx.n_xq;
        n += scr[j];
    }
    if (n >= 2) return n;
    memset(scr, 0, (size_t)b->n_out);
    return 0;
}

/* The LM head over the wanted rows (each run's as a pass with its wanted
 * rows alone would compute them), traced as one event per run's rows.
 * Screened rows (greedy, see above) get their token drawn here, from the
 * same logits, without the full logits being computed. */
static void lm_head(dp_session *s, const dp_batch *b, const float *xn) {
    const dp_model *m = s->m;
    cpu_state *st = s->be_state;
    const int E = m->hp.n_embd, V = m->hp.n_vocab;
    unsigned char *scr = st->scr;
    int n_scr = screened_rows(s, b, scr);
    if (n_scr) {
        /* their x rows together, the approximate logits in the last rows of b->logits */
        int32_t *tok = st->scr_tok;
        for (int j = 0, c = 0; j < b->n_out; j++)
            if (scr[j]) memcpy(st->xo + (size_t)c++ * E, xn + (size_t)b->out_rows[j] * E, sizeof(float) * (size_t)E);
        if (cpu_screen_argmax(&st->cx, &st->screen, &m->output, st->xo, n_scr,
                              b->logits + (size_t)(b->n_out - n_scr) * V, tok)) {
            for (int j = 0, c = 0; j < b->n_out; j++)
                if (scr[j]) b->drawn[j] = tok[c++];
        } else {
            n_scr = 0;
            memset(scr, 0, (size_t)b->n_out);
        }
    }
    /* the other rows, in their groups, into the first rows of b->logits, then each to its place */
    cpu_rows g = {0};
    int n_full = 0;
    for (int j = 0; j < b->n_out;) {
        const dp_run *u = run_of_row(b, b->out_rows[j]);
        int k = j + 1;
        while (k < b->n_out && run_of_row(b, b->out_rows[k]) == u) k++;
        int c = 0;
        for (int i = j; i < k; i++)
            if (!scr[i]) memcpy(st->xo + (size_t)(n_full + c++) * E, xn + (size_t)b->out_rows[i] * E, sizeof(float) * (size_t)E);
        if (c) add_rows(&g, c);
        n_full += c;
        j = k;
    }
    if (!n_full) return;
    cpu_matmul_rows(&st->cx, &m->output, st->xo, g, b->logits);
    if (n_scr)
        for (int j = b->n_out - 1, c = n_full - 1; c >= 0; j--)
            if (!scr[j]) {
                if (j != c) memcpy(b->logits + (size_t)j * V, b->logits + (size_t)c * V, sizeof(float) * (size_t)V);
                c--;
            }
    /* the logits point is the LM head's output, before any final soft-capping */
    for (int j = 0; dp_trace_on(s, DP_TP_LOGITS, -1) && j < b->n_out && !s->trace_stop;) {
        const dp_run *u = run_of_row(b, b->out_rows[j]);
        int k = j + 1;
        while (k < b->n_out && b->out_rows[k] == b->out_rows[k - 1] + 1 && run_of_row(b, b->out_rows[k]) == u) k++;
        s->trace_seq = u->seq;
        dp_trace_emit(s, DP_TP_LOGITS, -1, u->pos0 + b->out_rows[j] - u->row0, k - j, V, b->logits + (size_t)j * V);
        j = k;
    }
    cpu_softcap(b->logits, (int64_t)b->n_out * V, m->hp.final_softcap);
}

static int cpu_forward_batch(dp_session *s, const dp_batch *b) {
    const dp_model *m = s->m;
    const dp_hparams *hp = &m->hp;
    const dp_recipe *r = &m->recipe;
    cpu_state *st = s->be_state;
    const int E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const int Q = NH * HD, KV = NKV * HD, F = hp->n_ff, PS = s->kv.page_size;
    const int n = b->n_rows;
    /* each run's rows in the group of a pass over that run alone */
    cpu_rows g = {0};
    for (int k = 0; k < b->n_runs; k++) add_rows(&g, b->runs[k].n);
    float *x = st->x, *xn = st->xn;
    cpu_ctx *cx = &st->cx;
    PROF_BEGIN(s);

    /* 1. Embedding lookup (rows of token_embd) and the recipe's scale. */
    for (int i = 0; i < n; i++)
        cx->k->dequant[m->tok_embd.type]((const uint8_t *)m->tok_embd.data + (size_t)b->tokens[i] * m->tok_embd.row_bytes,
                                         x + (size_t)i * E, E);
    TRACE(DP_TP_EMBED, -1, x, E);
    if (hp->embed_scale != 1.0f)
        for (size_t i = 0; i < (size_t)n * E; i++) x[i] *= hp->embed_scale;
    TRACE(DP_TP_EMBED_SCALED, -1, x, E);
    PROF_END(s, PROF_EMBED, -1, (uint64_t)n * m->tok_embd.row_bytes);

    /* RoPE cos/sin of every row's position, for global and sliding layers
     * (the model's two tables of inverse frequencies, arch.c
     * dp_hparams_rope); each run attends over its own pages. Like HF,
     * LongRoPE takes the long factors' tables for a run whose positions
     * reach past the original context (keys cached before keep theirs). */
    for (int k = 0; k < b->n_runs; k++) {
        const dp_run *u = &b->runs[k];
        const float *inv = dp_hparams_rope_tables(hp, u->pos0 + u->n);
        for (int i = 0; i < u->n; i++) {
            float *cs = st->rope_cs + (size_t)(u->row0 + i) * 2 * hp->n_rot;
            cpu_rope_table(cs, hp->n_rot, inv, (float)(u->pos0 + i));
            cpu_rope_table(cs + hp->n_rot, hp->n_rot, inv + hp->n_rot / 2, (float)(u->pos0 + i));
            if (hp->rope_attn_factor != 1.0f)
                for (int c = 0; c < 2 * hp->n_rot; c++) cs[c] *= hp->rope_attn_factor;
        }
        /* the decode_mask_off_by_one fault hides the new token from itself */
        st->aruns[k] = (cpu_attn_run){.pos0 = u->pos0, .n = u->n, .pages = u->pages,
                                      .q = st->q + (size_t)u->row0 * Q, .out = st->att + (size_t)u->row0 * Q,
                                      .exclude_self = u->n == 1 && (m->faults & DP_FAULT_DECODE_MASK_OFF_BY_ONE)};
    }
    PROF_END(s, PROF_ROPE, -1, 0);

    for (int l = 0; l < hp->n_layer; l++) {
        const dp_layer_weights *W = &m->layers[l];
        const dp_layer_cfg *lc = &hp->layers[l];
        const size_t *no = st->norm_off + (size_t)l * NW_COUNT;
        uint8_t *kc = st->k_cache + (size_t)l * st->layer_bytes, *vc = st->v_cache + (size_t)l * st->layer_bytes;

        /* 2. Attention block. */
        cpu_rmsnorm(cx, xn, x, st->norm_w + no[NW_ATTN], r->norm_offset, n, E, hp->eps);
        TRACE(DP_TP_ATTN_NORM, l, xn, E);
        PROF_END(s, PROF_RMSNORM, l, 0);
        cpu_matmul_multi_rows(cx, 3, (const dp_weight *[]){&W->wq, &W->wk, &W->wv}, (float *[]){st->q, st->k, st->v},
                              xn, g);
        if (W->bq.data) {
            /* biases are tiny vectors; dequantize into the row scratch */
            const dp_weight *bs[3] = {&W->bq, &W->bk, &W->bv};
            float *dst[3] = {st->q, st->k, st->v};
            int dim[3] = {Q, KV, KV};
            for (int k = 0; k < 3; k++) {
                cpu_load_vec(bs[k], st->row);
                for (int i = 0; i < n; i++) cpu_add(dst[k] + (size_t)i * dim[k], st->row, dim[k]);
            }
        }
        PROF_END(s, PROF_MATMUL_QKV, l, W->wq.nbytes + W->wk.nbytes + W->wv.nbytes);
        TRACE(DP_TP_Q, l, st->q, Q);
        TRACE(DP_TP_K, l, st->k, KV);
        TRACE(DP_TP_V, l, st->v, KV);
        if (r->qk_norm) {
            cpu_rmsnorm(cx, st->q, st->q, st->norm_w + no[NW_Q], r->qk_norm_offset + r->norm_offset, n * NH, HD, hp->eps);
            cpu_rmsnorm(cx, st->k, st->k, st->norm_w + no[NW_K], r->qk_norm_offset + r->norm_offset, n * NKV, HD, hp->eps);
            TRACE(DP_TP_Q_NORMED, l, st->q, Q);
            TRACE(DP_TP_K_NORMED, l, st->k, KV);
            PROF_END(s, PROF_QK_NORM, l, 0);
        }
        const float *cs = st->rope_cs + (lc->sliding ? hp->n_rot : 0);
        if (lc->rope) {
            cpu_rope_rows(cx, st->q, n, NH, HD, cs, 2 * hp->n_rot, hp->n_rot, r->rope_style);
            cpu_rope_rows(cx, st->k, n, NKV, HD, cs, 2 * hp->n_rot, hp->n_rot, r->rope_style);
        }
        TRACE(DP_TP_Q_ROPE, l, st->q, Q);
        TRACE(DP_TP_K_ROPE, l, st->k, KV);
        PROF_END(s, PROF_ROPE, l, 0);

        /* 3. Store K and V of every run in its pages, then attend. */
        int want_probs = dp_trace_on(s, DP_TP_ATTN_SCORES, l) && st->probs;
        for (int k = 0; k < b->n_runs; k++) {
            const dp_run *u = &b->runs[k];
            cpu_kv_store(kc, vc, s->kv_eb, PS, u->pages, u->pos0, u->n, st->k + (size_t)u->row0 * KV,
                         st->v + (size_t)u->row0 * KV, KV);
            st->aruns[k].probs = want_probs ? st->probs + (size_t)u->row0 * NH * s->n_ctx : NULL;
        }
        if (cpu_attention_runs(cx, st->aruns, b->n_runs, kc, vc, s->kv_eb, PS, NH, NKV, HD, lc->window, hp->attn_scale,
                               hp->attn_softcap))
            return dp_set_error(DP_ERR_NOMEM, "out of memory for attention scratch");
        PROF_END(s, PROF_ATTENTION, l, 0);
        for (int k = 0; want_probs && k < b->n_runs && !s->trace_stop; k++) {
            const dp_run *u = &b->runs[k];
            s->trace_seq = u->seq;
            dp_trace_emit(s, DP_TP_ATTN_SCORES, l, u->pos0, u->n, NH * (u->pos0 + u->n), st->aruns[k].probs);
        }
        TRACE(DP_TP_ATTN_OUT, l, st->att, Q);
        cpu_matmul_rows(cx, &W->wo, st->att, g, st->o);
        TRACE(DP_TP_O_PROJ, l, st->o, E);
        PROF_END(s, PROF_MATMUL_O, l, W->wo.nbytes);
        /* post-attention norm (recipe), residual add and the FFN norm: one
         * pass over each row */
        cpu_residual(cx, x, st->o, r->post_norms ? st->norm_w + no[NW_POST_ATTN] : NULL, xn,
                     st->norm_w + no[NW_FFN], r->norm_offset, n, E, hp->eps);
        if (r->post_norms) TRACE(DP_TP_POST_ATTN_NORM, l, st->o, E);
        TRACE(DP_TP_RESID_ATTN, l, x, E);
        PROF_END(s, PROF_ADD, l, 0);

        /* 4. Gated feed-forward block (the norm came with the residual). */
        TRACE(DP_TP_FFN_NORM, l, xn, E);
        PROF_END(s, PROF_RMSNORM, l, 0);
        /* gate and up for the same rows in one task, the activation on them */
        cpu_matmul_gated_rows(cx, &W->gate, &W->up, xn, g, st->gate, st->up, st->act, r->act);
        TRACE(DP_TP_GATE, l, st->gate, F);
        TRACE(DP_TP_UP, l, st->up, F);
        PROF_END(s, PROF_MATMUL_GATE_UP, l, W->gate.nbytes + W->up.nbytes);
        TRACE(DP_TP_ACT, l, st->act, F);
        PROF_END(s, PROF_ACT, l, 0);
        cpu_matmul_rows(cx, &W->down, st->act, g, st->o);
        TRACE(DP_TP_DOWN, l, st->o, E);
        PROF_END(s, PROF_MATMUL_DOWN, l, W->down.nbytes);
        /* post-FFN norm (recipe) and residual add in one pass */
        cpu_residual(cx, x, st->o, r->post_norms ? st->norm_w + no[NW_POST_FFN] : NULL, NULL, NULL, r->norm_offset,
                     n, E, hp->eps);
        if (r->post_norms) TRACE(DP_TP_POST_FFN_NORM, l, st->o, E);
        TRACE(DP_TP_RESID_FFN, l, x, E);
        PROF_END(s, PROF_ADD, l, 0);
        if (s->trace_stop) return DP_ERR_STOPPED;
    }

    /* 5. Final norm and the LM head (wanted rows only). */
    cpu_rmsnorm(cx, xn, x, st->norm_w + st->out_norm_off, r->norm_offset, n, E, hp->eps);
    TRACE(DP_TP_FINAL_NORM, -1, xn, E);
    for (int k = 0; k < b->n_hid; k++)
        memcpy(b->hidden + (size_t)k * E, xn + (size_t)b->hid_rows[k] * E, sizeof(float) * (size_t)E);
    PROF_END(s, PROF_RMSNORM, -1, 0);
    if (b->n_out) lm_head(s, b, xn);
    PROF_END(s, PROF_LM_HEAD, -1, b->n_out ? m->output.nbytes : 0);
    return DP_OK;
}

/* Copy on write: page src's K and V in every layer into page dst. */
static int cpu_copy_page(dp_session *s, int src, int dst) {
    cpu_state *st = s->be_state;
    const size_t pb = st->layer_bytes / (size_t)s->kv.n_pages;
    for (int l = 0; l < s->m->hp.n_layer; l++) {
        size_t base = (size_t)l * st->layer_bytes;
        memcpy(st->k_cache + base + (size_t)dst * pb, st->k_cache + base + (size_t)src * pb, pb);
        memcpy(st->v_cache + base + (size_t)dst * pb, st->v_cache + base + (size_t)src * pb, pb);
    }
    return DP_OK;
}

/* The CPU's part of dp_session_describe: the kernel table this session's
 * context uses, its pool size and the KV cache as cpu_init allocated it. */
static int cpu_describe(const dp_session *s, dp_backend_info *out) {
    const cpu_state *st = s->be_state;
    const dp_hparams *hp = &s->m->hp;
    const dp_cpu_kernels *k = st->cx.k;
    snprintf(out->kernels, sizeof out->kernels, "%s", dp_isa_name(k->isa));
    snprintf(out->cpu_isa_max, sizeof out->cpu_isa_max, "%s", dp_isa_name(dp_cpu_isa_detect()));
    snprintf(out->act_path, sizeof out->act_path, "fused into the gate/up matmul (%s %s)", dp_isa_name(k->isa),
             s->m->recipe.act == DP_ACT_GELU_TANH ? "gelu_mul" : "silu_mul");
    out->n_threads = st->cx.n_threads;
    out->kv_bytes = 2 * (uint64_t)hp->n_layer * (uint64_t)st->layer_bytes; /* the page pool */
    return DP_OK;
}

const dp_backend_impl dp_backend_cpu = {
    .name = "cpu",
    .init = cpu_init,
    .free = cpu_free,
    .trace_changed = cpu_trace_changed,
    .describe = cpu_describe,
    .forward_batch = cpu_forward_batch,
    .copy_page = cpu_copy_page,
    .page_size = CPU_ATTN_PAGE,
};
