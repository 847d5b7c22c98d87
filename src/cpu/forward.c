/* The CPU forward pass, float32, one function from token ids to logits.
 *
 * Follow one batch of n positions (pos0 .. pos0+n-1) through the model:
 *   embed -> [per layer: norm, Q/K/V, q/k norm, RoPE, KV store, attention,
 *   o_proj, (post norm), residual, norm, gate/up, activation, down,
 *   (post norm), residual] -> final norm -> LM head.
 * Every quirk comes from the recipe (arch.h); every named step can be traced. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../prof.h"
#include "../quant.h"
#include "../session.h"
#include "../trace.h"
#include "../util.h"
#include "ops.h"

typedef struct {
    /* KV cache, float32: K [n_layer][n_ctx][kv_dim], V transposed
     * [n_layer][kv_dim][n_ctx] (attention.c) */
    float *k_cache, *v_cache;
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
    float *row;      /* dequantized weight row [max cols] */
    float *norm_w;   /* all norm weights as float32, see norm_* offsets */
    size_t *norm_off;/* per layer: 6 offsets into norm_w */
    size_t out_norm_off;
    cpu_ctx cx;      /* kernels, thread pool, per-thread scratch */
} cpu_state;

enum { NW_ATTN, NW_Q, NW_K, NW_POST_ATTN, NW_FFN, NW_POST_FFN, NW_COUNT };

static int cpu_init(dp_session *s) {
    const dp_model *m = s->m;
    const dp_hparams *hp = &m->hp;
    cpu_state *st = dp_calloc(1, sizeof *st);
    if (!st) return DP_ERR_NOMEM;
    s->be_state = st;
    size_t B = (size_t)s->n_batch, C = (size_t)s->n_ctx;
    size_t E = (size_t)hp->n_embd, Q = (size_t)hp->n_head * hp->head_dim, KV = (size_t)hp->n_head_kv * hp->head_dim;
    size_t F = (size_t)hp->n_ff, L = (size_t)hp->n_layer;
    size_t maxc = E > Q ? E : Q;
    if (F > maxc) maxc = F;
    st->k_cache = dp_malloc_aligned(L * C * KV * sizeof(float));
    st->v_cache = dp_malloc_aligned(L * C * KV * sizeof(float));
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
        !st->gate || !st->up || !st->act || !st->rope_cs || !st->row || !st->norm_off || !st->norm_w)
        return DP_ERR_NOMEM;

    int64_t max_cols = (int64_t)maxc > m->output.cols ? (int64_t)maxc : m->output.cols;
    if (cpu_ctx_init(&st->cx, s->n_threads, max_cols, s->n_ctx, hp->n_head, hp->head_dim, NULL) != DP_OK)
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
    float *bufs[] = {st->k_cache, st->v_cache, st->x, st->xn, st->q, st->k, st->v, st->att, st->o, st->gate,
                     st->up, st->act, st->rope_cs, st->probs, st->row, st->norm_w};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) dp_free_aligned(bufs[i]);
    free(st->norm_off);
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

#define TRACE(point, layer, data, dim)                                              \
    do {                                                                            \
        if (dp_trace_on(s, point, layer)) dp_trace_emit(s, point, layer, pos0, n, dim, data); \
    } while (0)

static int cpu_forward(dp_session *s, const int32_t *tokens, int n, int pos0, int logits_all) {
    const dp_model *m = s->m;
    const dp_hparams *hp = &m->hp;
    const dp_recipe *r = &m->recipe;
    cpu_state *st = s->be_state;
    const int E = hp->n_embd, HD = hp->head_dim, NH = hp->n_head, NKV = hp->n_head_kv;
    const int Q = NH * HD, KV = NKV * HD, F = hp->n_ff, C = s->n_ctx;
    float *x = st->x, *xn = st->xn;
    cpu_ctx *cx = &st->cx;
    PROF_BEGIN(s);

    /* 1. Embedding lookup (rows of token_embd) and the recipe's scale. */
    for (int i = 0; i < n; i++)
        cx->k->dequant[m->tok_embd.type]((const uint8_t *)m->tok_embd.data + (size_t)tokens[i] * m->tok_embd.row_bytes,
                                         x + (size_t)i * E, E);
    TRACE(DP_TP_EMBED, -1, x, E);
    if (hp->embed_scale != 1.0f)
        for (size_t i = 0; i < (size_t)n * E; i++) x[i] *= hp->embed_scale;
    TRACE(DP_TP_EMBED_SCALED, -1, x, E);
    PROF_END(s, PROF_EMBED, -1, (uint64_t)n * m->tok_embd.row_bytes);

    /* RoPE cos/sin of every position, for global and sliding layers (the
     * model's two tables of inverse frequencies, arch.c dp_hparams_rope).
     * Like HF, LongRoPE takes the long factors' tables for a whole call that
     * reaches past the original context (keys cached before keep theirs). */
    const float *inv = dp_hparams_rope_tables(hp, pos0 + n);
    for (int i = 0; i < n; i++) {
        float *cs = st->rope_cs + (size_t)i * 2 * hp->n_rot;
        cpu_rope_table(cs, hp->n_rot, inv, (float)(pos0 + i));
        cpu_rope_table(cs + hp->n_rot, hp->n_rot, inv + hp->n_rot / 2, (float)(pos0 + i));
        if (hp->rope_attn_factor != 1.0f)
            for (int k = 0; k < 2 * hp->n_rot; k++) cs[k] *= hp->rope_attn_factor;
    }
    PROF_END(s, PROF_ROPE, -1, 0);

    for (int l = 0; l < hp->n_layer; l++) {
        const dp_layer_weights *W = &m->layers[l];
        const dp_layer_cfg *lc = &hp->layers[l];
        const size_t *no = st->norm_off + (size_t)l * NW_COUNT;
        float *kc = st->k_cache + (size_t)l * C * KV, *vc = st->v_cache + (size_t)l * C * KV;

        /* 2. Attention block. */
        cpu_rmsnorm(cx, xn, x, st->norm_w + no[NW_ATTN], r->norm_offset, n, E, hp->eps);
        TRACE(DP_TP_ATTN_NORM, l, xn, E);
        PROF_END(s, PROF_RMSNORM, l, 0);
        cpu_matmul_multi(cx, 3, (const dp_weight *[]){&W->wq, &W->wk, &W->wv}, (float *[]){st->q, st->k, st->v}, xn, n);
        if (W->bq.data) {
            /* biases are tiny vectors; dequantize into the row scratch */
            const dp_weight *bs[3] = {&W->bq, &W->bk, &W->bv};
            float *dst[3] = {st->q, st->k, st->v};
            int dim[3] = {Q, KV, KV};
            for (int b = 0; b < 3; b++) {
                cpu_load_vec(bs[b], st->row);
                for (int i = 0; i < n; i++) cpu_add(dst[b] + (size_t)i * dim[b], st->row, dim[b]);
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

        /* 3. Store K and V for these positions, then attend. */
        memcpy(kc + (size_t)pos0 * KV, st->k, (size_t)n * KV * sizeof(float));
        cpu_store_vt(vc, st->v, n, pos0, KV, C);
        int want_probs = dp_trace_on(s, DP_TP_ATTN_SCORES, l) && st->probs;
        /* the decode_mask_off_by_one fault hides the new token from itself */
        int exclude_self = n == 1 && (m->faults & DP_FAULT_DECODE_MASK_OFF_BY_ONE);
        cpu_attention(cx, st->att, st->q, kc, vc, n, pos0, NH, NKV, HD, lc->window, hp->attn_scale, hp->attn_softcap,
                      exclude_self, want_probs ? st->probs : NULL);
        PROF_END(s, PROF_ATTENTION, l, 0);
        int n_kv = pos0 + n;
        if (want_probs) dp_trace_emit(s, DP_TP_ATTN_SCORES, l, pos0, n, NH * n_kv, st->probs);
        TRACE(DP_TP_ATTN_OUT, l, st->att, Q);
        cpu_matmul(cx, &W->wo, st->att, n, st->o);
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
        cpu_matmul_gated(cx, &W->gate, &W->up, xn, n, st->gate, st->up, st->act, r->act);
        TRACE(DP_TP_GATE, l, st->gate, F);
        TRACE(DP_TP_UP, l, st->up, F);
        PROF_END(s, PROF_MATMUL_GATE_UP, l, W->gate.nbytes + W->up.nbytes);
        TRACE(DP_TP_ACT, l, st->act, F);
        PROF_END(s, PROF_ACT, l, 0);
        cpu_matmul(cx, &W->down, st->act, n, st->o);
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

    /* 5. Final norm and the LM head (last position only unless asked). */
    cpu_rmsnorm(cx, xn, x, st->norm_w + st->out_norm_off, r->norm_offset, n, E, hp->eps);
    TRACE(DP_TP_FINAL_NORM, -1, xn, E);
    PROF_END(s, PROF_RMSNORM, -1, 0);
    /* the logits point is the LM head's output, before any final soft-capping */
    if (logits_all) {
        cpu_matmul(cx, &m->output, xn, n, s->logits);
        TRACE(DP_TP_LOGITS, -1, s->logits, hp->n_vocab);
    } else {
        cpu_matmul(cx, &m->output, xn + (size_t)(n - 1) * E, 1, s->logits);
        if (dp_trace_on(s, DP_TP_LOGITS, -1)) dp_trace_emit(s, DP_TP_LOGITS, -1, pos0 + n - 1, 1, hp->n_vocab, s->logits);
    }
    cpu_softcap(s->logits, (int64_t)(logits_all ? n : 1) * hp->n_vocab, hp->final_softcap);
    PROF_END(s, PROF_LM_HEAD, -1, m->output.nbytes);
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
    size_t kv = (size_t)hp->n_head_kv * hp->head_dim;
    out->kv_bytes = 2 * (uint64_t)hp->n_layer * (uint64_t)s->n_ctx * kv * sizeof(float); /* k_cache + v_cache */
    return DP_OK;
}

const dp_backend_impl dp_backend_cpu = {
    .name = "cpu",
    .init = cpu_init,
    .free = cpu_free,
    .forward = cpu_forward,
    .trace_changed = cpu_trace_changed,
    .describe = cpu_describe,
};
