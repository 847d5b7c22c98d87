/* The CUDA forward pass: the steps of src/cpu/forward.c on the device.
 *
 * cu_forward takes n rows through the model, each with its own token,
 * position and sequence (d_io; KvPages):
 *   embed -> [per layer: eager_layer or decode_layer] -> final norm + LM head
 * eager_layer mirrors the CPU's layer step for step, with the same trace
 * points: RMSNorm, Q/K/V, q/k norm + RoPE + K/V store, attention, o_proj,
 * (post-norm), residual, RMSNorm, gate/up, activation, down, (post-norm),
 * residual. It runs prefill, a batch's mixed rows and batched decode steps
 * (several rows: k_mmv products for up to 64 rows, f16 GEMMs beyond),
 * tracing and the eager decode steps. decode_layer is the same math for
 * one row in five launches, each norm fused into the prologue of the
 * matvec that reads it and each residual add into the matvec that
 * produces it; decode.cu captures it as a CUDA graph. Both compute the same
 * sums in the same order, so tracing changes the decode logits by less
 * than 1e-6 (test_cuda).
 *
 * Buffers and Pass, one call's state, are in state.cuh; the matrix
 * products (matvec, k_mmv, f16 GEMMs, k-parts) in products.cu; kernels and
 * launchers in kernels/. */
#include <string.h>

#include "state.cuh"

namespace {

#define TR(point, layer, ptr, dim) TRY(cu_trace(p.s, point, layer, ptr, p.pos0, p.n, dim))
#define PROF(op, layer, bytes) TRY(cu_prof_mark(p.s, op, layer, bytes))

/* A decode matvec reads the residual stream: x as its input and, when a
 * post-norm is pending, o and that weight for its prologue, which writes
 * the sum to the other buffer. */
void take_residual(Pass &p, MvLaunch *L) {
    L->x = p.x;
    if (!p.pending) return;
    L->res_o = p.cs->o;
    L->res_w = p.pending;
    L->x_out = p.x_alt;
    float *t = p.x;
    p.x = p.x_alt;
    p.x_alt = t;
    p.pending = NULL;
}

/* The RMSNorm of the eager layer and of lm_rows: x takes the parts it is
 * owed first (in the same launch). */
int norm_rows(Pass &p, float *out, __half *out16, const float *w) {
    TRY(dp_cu_rmsnorm_parts(out, out16, p.x, &p.owed, w, p.r->norm_offset, p.n, p.E, p.hp->eps, p.st));
    p.owed.n = 0;
    return DP_OK;
}

/* Q, K and V in one launch (one position). */
MvLaunch qkv_launch(const Pass &p, const LayerDev *D, const float *x) {
    MvLaunch L;
    memset(&L, 0, sizeof L);
    L.job[0] = {D->wq, p.cs->q, D->bq};
    L.job[1] = {D->wk, p.cs->k, D->bk};
    L.job[2] = {D->wv, p.cs->v, D->bv};
    L.njobs = 3;
    L.x = x;
    L.cols = p.E;
    L.mode = MV_STORE;
    return L;
}

/* The rows' positions and pages (d_io, d_pt). */
KvPages kv_pages(const CudaState *cs) {
    KvPages P;
    P.rows = cs->d_io, P.pt = cs->d_pt, P.pt_stride = cs->pt_stride, P.page_shift = cs->page_shift;
    return P;
}

/* Attention of layer l over its cache: q/k norm, RoPE and the K/V store
 * fused in (rope) or done before by dp_cu_qk_rope_store. */
AttnLaunch attn_launch(const Pass &p, int l, int rope) {
    const CudaState *cs = p.cs;
    const LayerDev *D = &cs->L[l];
    const size_t off = (size_t)l * cs->layer_elems;
    AttnLaunch A;
    memset(&A, 0, sizeof A);
    A.q = cs->q, A.out = cs->att, A.k = cs->kc + off, A.v = cs->vc + off, A.kv = kv_pages(cs);
    A.n = p.n, A.n_head = p.NH, A.n_head_kv = p.NKV, A.head_dim = p.HD;
    A.window = p.hp->layers[l].window, A.scale = p.hp->attn_scale, A.softcap = p.hp->attn_softcap;
    /* the decode_mask_off_by_one fault hides the new token from itself */
    A.exclude_self = p.n == 1 && (p.m->faults & DP_FAULT_DECODE_MASK_OFF_BY_ONE);
    A.slices = p.n == 1 ? cs->attn_slices : 0;
    A.splits = p.n > 1 ? SPLITS_PREFILL : A.slices ? DECODE_SLICES : SPLITS_DECODE;
    /* several rows: few (row, KV head) pairs (a batched decode step of up
     * to 16 sequences) leave SMs idle at full-size splits, so they take
     * splits of a quarter the size */
    const int few = p.n * p.NKV <= 32;
    A.min_keys = p.n > 1 ? (few ? (dp_cu_set.attn_split_keys + 3) / 4 : dp_cu_set.attn_split_keys) : SPLIT_MIN_KEYS;
    A.part = cs->part, A.counters = cs->counters;
    if (rope) {
        A.rope = 1;
        A.kf = cs->k, A.vf = cs->v;
        if (p.r->qk_norm) A.q_norm = D->q_norm, A.k_norm = D->k_norm;
        A.norm_off = p.r->qk_norm_offset + p.r->norm_offset;
        A.eps = p.hp->eps;
        A.inv_freq = D->inv_freq;
        A.n_rot = p.hp->layers[l].rope ? p.hp->n_rot : 0; /* NoPE layers: nothing rotated */
        A.rope_ms = p.hp->rope_attn_factor;
        A.neox = p.r->rope_style == DP_ROPE_NEOX;
    }
    return A;
}

/* The per-head q/k norm, RoPE and the K/V store of layer l as their own
 * launch (trace points of the normed q/k when asked for); joint_ld > 0:
 * Q/K/V are the joint product's rows in cs->qkv, their biases not yet
 * added, or its k-parts (parts). */
int qk_rope_store(Pass &p, int l, int joint_ld, const KParts *parts) {
    CudaState *cs = p.cs;
    const LayerDev *D = &cs->L[l];
    const size_t off = (size_t)l * cs->layer_elems;
    const dp_recipe *r = p.r;
    RopeLaunch R;
    memset(&R, 0, sizeof R);
    R.q = cs->q, R.k = cs->k, R.v = cs->v, R.kc = cs->kc + off, R.vc = cs->vc + off, R.kv = kv_pages(cs);
    R.n = p.n, R.n_head = p.NH, R.n_head_kv = p.NKV, R.head_dim = p.HD;
    R.n_rot = p.hp->layers[l].rope ? p.hp->n_rot : 0; /* NoPE layers: nothing rotated */
    R.rope_ms = p.hp->rope_attn_factor;
    R.neox = r->rope_style == DP_ROPE_NEOX;
    if (r->qk_norm) {
        R.q_norm = D->q_norm, R.k_norm = D->k_norm;
        R.norm_off = r->qk_norm_offset + r->norm_offset;
        if (dp_trace_on(p.s, DP_TP_Q_NORMED, l) || dp_trace_on(p.s, DP_TP_K_NORMED, l)) R.q_normed = cs->qn, R.k_normed = cs->kn;
    }
    R.eps = p.hp->eps;
    R.inv_freq = D->inv_freq;
    if (joint_ld) R.qkv = cs->qkv, R.ld = joint_ld, R.bq = D->bq, R.bk = D->bk, R.bv = D->bv;
    if (parts && parts->n) R.qkv = parts->p, R.nparts = parts->n, R.pstride = parts->stride;
    TRY(dp_cu_qk_rope_store(&R, p.st));
    if (r->qk_norm) {
        TR(DP_TP_Q_NORMED, l, cs->qn, p.Q);
        TR(DP_TP_K_NORMED, l, cs->kn, p.KV);
    }
    TR(DP_TP_Q_ROPE, l, cs->q, p.Q);
    TR(DP_TP_K_ROPE, l, cs->k, p.KV);
    PROF(PROF_ROPE, l, 0);
    return DP_OK;
}

/* The end of a block in the eager layer: x += post_norm(W in), or x += W in
 * without post norms (one GEMM with beta = 1 unless the projection itself
 * is traced). in must be in x16 too for a GEMM. */
int add_projection(Pass &p, int l, const DMat &W, const float *in, const float *post_w, int tp_proj, int tp_post,
                   int prof_op, uint64_t bytes) {
    CudaState *cs = p.cs;
    const int n = p.n;
    const int S = post_w ? 0 : split_parts(p, W, n);
    if (S) { /* x is owed the parts: the next RMSNorm adds them */
        TRY(split_product(p, W, n, S, &p.owed));
        PROF(prof_op, l, bytes);
        return DP_OK;
    }
    if (!post_w && !p.tracing) {
        TRY(matmul(p, W, in, n, p.x, 1, NULL));
        PROF(prof_op, l, bytes);
        return DP_OK;
    }
    TRY(matmul(p, W, in, n, cs->o, 0, NULL));
    TR(tp_proj, l, cs->o, p.E);
    PROF(prof_op, l, bytes);
    if (post_w) {
        const int tr = dp_trace_on(p.s, tp_post, l);
        TRY(dp_cu_postnorm_add(p.x, cs->o, tr ? cs->o : NULL, post_w, p.r->norm_offset, n, p.E, p.hp->eps, p.st));
        TR(tp_post, l, cs->o, p.E);
        PROF(PROF_RMSNORM, l, 0);
    } else {
        TRY(dp_cu_add(p.x, cs->o, (long long)n * p.E, p.st));
        PROF(PROF_ADD, l, 0);
    }
    return DP_OK;
}

/* gate/up and the activation of layer l over the FFN-normed rows (xn,
 * x16): the act(gate) * up rows end in x16 where the down product reads
 * them from there (k_mmv, a GEMM), else in gate. */
int gate_up_act(Pass &p, int l) {
    CudaState *cs = p.cs;
    const dp_layer_weights *W = &p.m->layers[l];
    const LayerDev *D = &cs->L[l];
    const dp_recipe *r = p.r;
    const int n = p.n;
    const DMat *gu[2] = {&D->gate, &D->up};
    DMat J;
    if (joint(p, gu, 2, n, &J)) { /* one GEMM into [n][2 F]; the activation reads it as gate, up */
        TRY(f16_product(p, J, n, cs->gate, cs->rows_cap, 0, NULL));
        PROF(PROF_MATMUL_GATE_UP, l, W->gate.nbytes + W->up.nbytes);
        TRY(cu_trace_cols(p.s, DP_TP_GATE, l, cs->gate, 2 * p.F, 0, p.F, NULL, p.pos0, n));
        TRY(cu_trace_cols(p.s, DP_TP_UP, l, cs->gate, 2 * p.F, p.F, p.F, NULL, p.pos0, n));
        TRY(dp_cu_gated_act_joint_f16(p.x16, cs->gate, n, p.F, r->act, p.st));
        PROF(PROF_ACT, l, 0);
        /* a traced pass: act in f32 over the up values for its trace point
         * (the joint rows of more than half the rows fill cs->up too) */
        if (dp_trace_on(p.s, DP_TP_ACT, l)) {
            TRY(dp_cu_gated_act_joint_inplace(cs->gate, n, p.F, r->act, p.st));
            TRY(cu_trace_cols(p.s, DP_TP_ACT, l, cs->gate, 2 * p.F, p.F, p.F, NULL, p.pos0, n));
        }
        return DP_OK;
    }
    const float *const nob[2] = {NULL, NULL};
    if (n > 1 && !p.tracing && p.x16 && cs->x16b && mm_all(p.cs, gu, 2, n) && D->gate.type == D->up.type &&
        D->gate.cols == D->up.cols && (cs->blas || dp_cu_mmv_ok(D->down.type, n))) {
        /* k_mmv takes both: one launch whose epilogue writes act(gate) * up
         * as the down product's f16 rows, into the other of x16 / x16b
         * (its CTAs still read x16), which is the pass's x16 from here on */
        MmLaunch M = mm_launch(cs, D->gate, p.x16, n, NULL, MV_GATEUP, NULL);
        M.w[1] = D->up, M.njobs = 2, M.out16 = p.x16 == cs->x16 ? cs->x16b : cs->x16, M.act = r->act;
        TRY(dp_cu_mmv(&M, p.st));
        p.x16 = M.out16;
        PROF(PROF_MATMUL_GATE_UP, l, W->gate.nbytes + W->up.nbytes);
        return DP_OK;
    }
    if (n > 1 && mm_all(p.cs, gu, 2, n)) {
        float *const y[2] = {cs->gate, cs->up};
        TRY(mm_jobs(p, gu, y, nob, 2, n, 0));
    } else {
        TRY(matmul(p, D->gate, cs->xn, n, cs->gate, 0, NULL));
        TRY(matmul(p, D->up, cs->xn, n, cs->up, 0, NULL));
    }
    TR(DP_TP_GATE, l, cs->gate, p.F);
    TR(DP_TP_UP, l, cs->up, p.F);
    PROF(PROF_MATMUL_GATE_UP, l, W->gate.nbytes + W->up.nbytes);
    /* untraced rows for a product that reads x16 (k_mmv, a GEMM): act(gate) * up straight to f16 */
    if (p.x16 && !p.tracing && (cs->blas || dp_cu_mmv_ok(D->down.type, n))) {
        TRY(dp_cu_gated_act_f16(p.x16, cs->gate, cs->up, (long long)n * p.F, r->act, p.st));
        PROF(PROF_ACT, l, 0);
    } else {
        TRY(dp_cu_gated_act(cs->gate, cs->gate, cs->up, (long long)n * p.F, r->act, p.st));
        PROF(PROF_ACT, l, 0);
        TR(DP_TP_ACT, l, cs->gate, p.F);
        if (p.x16) TRY(dp_cu_to_f16(p.x16, cs->gate, (long long)n * p.F, p.st));
    }
    return DP_OK;
}

/* Whether the pass's n rows (h_io) are one sequence at consecutive
 * positions (a prompt): the tensor-core prefill attention takes those. */
static int one_sequence(const CudaState *cs, int n) {
    const int *r = cs->h_io;
    for (int i = 1; i < n; i++)
        if (r[ROW_INTS * i + ROW_SEQ] != r[ROW_SEQ] || r[ROW_INTS * i + ROW_POS] != r[ROW_POS] + i) return 0;
    return n > 1 && r[ROW_SEQ] >= 0;
}

/* Whether the pass's n rows are decode rows of distinct sequences (a
 * batched decode step: padding rows aside), few enough (row, KV head)
 * pairs that k_attention's CTAs have room for the q/k norm, RoPE and K/V
 * store of their row: one launch instead of two. */
static int fused_rope_rows(const Pass &p, int n) {
    const int *r = p.cs->h_io;
    if (p.tracing || n < 2 || n * p.NKV > 32) return 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            if (r[ROW_INTS * i + ROW_SEQ] >= 0 && r[ROW_INTS * i + ROW_SEQ] == r[ROW_INTS * j + ROW_SEQ]) return 0;
    return 1;
}

/* A pass whose rows hold a prompt chunk beside other sequences' rows (a
 * server's mixed step, a batch's prefill of several prompts): k_attn_mma's
 * tiles, each a stretch of one sequence's rows of at most the kernel's CTA
 * rows (a decode row is a tile of its own), copied to d_tiles. The tensor
 * cores then take every row, where k_attention would compute each prompt
 * row alone. Returns the number of tiles, 0 where k_attn_mma does not
 * apply (one sequence: it takes the rows without tiles; decode rows only:
 * k_attention, with the fused RoPE where it can); -1 on error. */
static int attn_tiles(Pass &p) {
    CudaState *cs = p.cs;
    const int n = p.n, tr = dp_cu_attn_mma_rows(p.HD, p.NH, p.NKV), *r = cs->h_io;
    if (n < 2 || p.tracing || !tr || p.one_seq) return 0;
    int *t = cs->h_io + (ROW_INTS + 1) * cs->rows_cap, nt = 0, prompt = 0;
    for (int i = 0, j; i < n; i = j) {
        const int q = r[ROW_INTS * i + ROW_SEQ];
        for (j = i + 1; j < n && j - i < tr && r[ROW_INTS * j + ROW_SEQ] == q;) j++;
        if (q < 0) continue; /* padding rows */
        prompt |= j - i > 1;
        t[2 * nt] = i, t[2 * nt + 1] = j - i, nt++;
    }
    if (!prompt || !nt) return 0;
    if (cudaMemcpyAsync(cs->d_tiles, t, (size_t)nt * 2 * sizeof(int), cudaMemcpyHostToDevice, p.st) != cudaSuccess)
        return dp_set_error(DP_ERR_BACKEND, "CUDA: copying the attention tiles failed"), -1;
    return nt;
}

/* One layer, op by op, with every trace point (prefill, tracing). */
int eager_layer(Pass &p, int l) {
    CudaState *cs = p.cs;
    const dp_layer_weights *W = &p.m->layers[l];
    const LayerDev *D = &cs->L[l];
    const dp_recipe *r = p.r;
    const int n = p.n;
    /* normed rows as f32 too (the GEMMs read x16) */
    float *xn = p.tracing || n == 1 || !cs->blas ? cs->xn : NULL;

    /* 1. attention block */
    TRY(norm_rows(p, xn, p.x16, D->attn_norm));
    TR(DP_TP_ATTN_NORM, l, cs->xn, p.E);
    PROF(PROF_RMSNORM, l, 0);
    const DMat *qkv[3] = {&D->wq, &D->wk, &D->wv};
    DMat J;
    int joint_qkv = joint(p, qkv, 3, n, &J) ? J.rows : 0;
    const int qkv_split = joint_qkv ? split_parts(p, J, n) : 0;
    KParts qkv_parts = {NULL, 0, 0, 0};
    if (n == 1) { /* one launch, as in decode_layer */
        const MvLaunch L = qkv_launch(p, D, cs->xn);
        TRY(dp_cu_matvec(&L, p.st));
    } else if (qkv_split) { /* k-parts, summed by the RoPE kernel with the biases */
        TRY(split_product(p, J, n, qkv_split, &qkv_parts));
    } else if (joint_qkv) { /* one GEMM; the biases in the RoPE kernel */
        TRY(f16_product(p, J, n, cs->qkv, cs->rows_cap, 0, NULL));
    } else if (n > 1 && !p.tracing && mm_all(p.cs, qkv, 3, n)) { /* the joint rows, biases in the RoPE kernel */
        joint_qkv = p.Q + 2 * p.KV;
        float *const y[3] = {cs->qkv, cs->qkv + p.Q, cs->qkv + p.Q + p.KV};
        const float *const b[3] = {NULL, NULL, NULL};
        TRY(mm_jobs(p, qkv, y, b, 3, n, joint_qkv));
    } else if (mm_all(p.cs, qkv, 3, n)) { /* as few launches as the formats allow */
        float *const y[3] = {cs->q, cs->k, cs->v};
        const float *const b[3] = {D->bq, D->bk, D->bv};
        TRY(mm_jobs(p, qkv, y, b, 3, n, 0));
    } else {
        TRY(matmul(p, D->wq, cs->xn, n, cs->q, 0, D->bq));
        TRY(matmul(p, D->wk, cs->xn, n, cs->k, 0, D->bk));
        TRY(matmul(p, D->wv, cs->xn, n, cs->v, 0, D->bv));
    }
    PROF(PROF_MATMUL_QKV, l, W->wq.nbytes + W->wk.nbytes + W->wv.nbytes);
    if (joint_qkv && !qkv_split) { /* the joint rows, biases not yet added */
        TRY(cu_trace_cols(p.s, DP_TP_Q, l, cs->qkv, joint_qkv, 0, p.Q, D->bq, p.pos0, n));
        TRY(cu_trace_cols(p.s, DP_TP_K, l, cs->qkv, joint_qkv, p.Q, p.KV, D->bk, p.pos0, n));
        TRY(cu_trace_cols(p.s, DP_TP_V, l, cs->qkv, joint_qkv, p.Q + p.KV, p.KV, D->bv, p.pos0, n));
    } else {
        TR(DP_TP_Q, l, cs->q, p.Q);
        TR(DP_TP_K, l, cs->k, p.KV);
        TR(DP_TP_V, l, cs->v, p.KV);
    }
    const int fuse = joint_qkv && p.fuse_rope;
    if (!fuse) TRY(qk_rope_store(p, l, joint_qkv, &qkv_parts));
    AttnLaunch A = attn_launch(p, l, fuse);
    if (fuse) {
        A.qkv = qkv_split ? qkv_parts.p : cs->qkv, A.ld = joint_qkv, A.bq = D->bq, A.bk = D->bk, A.bv = D->bv;
        A.nparts = qkv_parts.n, A.pstride = qkv_parts.stride;
        /* short contexts: one slice, a CTA per (row, query head) */
        if (cs->attn_rows && (p.HD == 64 || p.HD == 128 || p.HD == 256)) A.slices = 1;
    }
    A.out16 = p.x16; /* several rows: k_attention, which writes the next product's f16 input too */
    A.one_seq = p.one_seq;
    if (p.n_tiles) A.tiles = cs->d_tiles, A.n_tiles = p.n_tiles;
    TRY(dp_cu_attention(&A, p.st));
    PROF(PROF_ATTENTION, l, 0);
    TRY(cu_trace_scores(p.s, &A, l, p.pos0, n));
    TR(DP_TP_ATTN_OUT, l, cs->att, p.Q);
    TRY(add_projection(p, l, D->wo, cs->att, r->post_norms ? D->post_attn_norm : NULL, DP_TP_O_PROJ,
                       DP_TP_POST_ATTN_NORM, PROF_MATMUL_O, W->wo.nbytes));
    TR(DP_TP_RESID_ATTN, l, p.x, p.E);

    /* 2. gated feed-forward block */
    TRY(norm_rows(p, xn, p.x16, D->ffn_norm));
    TR(DP_TP_FFN_NORM, l, cs->xn, p.E);
    PROF(PROF_RMSNORM, l, 0);
    TRY(gate_up_act(p, l));
    TRY(add_projection(p, l, D->down, cs->gate, r->post_norms ? D->post_ffn_norm : NULL, DP_TP_DOWN,
                       DP_TP_POST_FFN_NORM, PROF_MATMUL_DOWN, W->down.nbytes));
    TR(DP_TP_RESID_FFN, l, p.x, p.E);
    return DP_OK;
}

/* The end of a block in decode: x += W in by the matvec, or (post norms)
 * W in kept in o with its post-norm pending for the next prologue. */
int decode_projection(Pass &p, const DMat &W, const float *in, const float *post_w) {
    MvLaunch L = launch_of(W, post_w ? p.cs->o : p.x, NULL, in, post_w ? MV_STORE : MV_ADD);
    TRY(dp_cu_matvec(&L, p.st));
    p.pending = post_w;
    return DP_OK;
}

/* One layer of a decode step (one position) in five launches: Q/K/V with
 * the attention norm (and a pending post-norm + residual add) in the
 * prologue; attention with the q/k norm, RoPE and K/V store (where the
 * sliced kernels take this head dimension; else a launch of its own
 * first); o_proj; gate/up with the FFN norm and the activation; down. */
int decode_layer(Pass &p, int l) {
    CudaState *cs = p.cs;
    const dp_layer_weights *W = &p.m->layers[l];
    const LayerDev *D = &cs->L[l];
    const dp_recipe *r = p.r;

    MvLaunch L = qkv_launch(p, D, p.x);
    take_residual(p, &L);
    L.norm_w = D->attn_norm, L.norm_off = r->norm_offset, L.eps = p.hp->eps;
    TRY(dp_cu_matvec(&L, p.st));
    PROF(PROF_MATMUL_QKV, l, W->wq.nbytes + W->wk.nbytes + W->wv.nbytes);
    const int fused_rope = cs->attn_slices > 0;
    if (!fused_rope) TRY(qk_rope_store(p, l, 0, NULL));
    const AttnLaunch A = attn_launch(p, l, fused_rope);
    TRY(dp_cu_attention(&A, p.st));
    PROF(PROF_ATTENTION, l, 0);
    TRY(decode_projection(p, D->wo, cs->att, r->post_norms ? D->post_attn_norm : NULL));
    PROF(PROF_MATMUL_O, l, W->wo.nbytes);

    memset(&L, 0, sizeof L);
    L.job[0] = {D->gate, cs->gate, NULL};
    L.job[1] = {D->up, cs->up, NULL};
    L.njobs = 2;
    L.cols = p.E;
    take_residual(p, &L);
    L.norm_w = D->ffn_norm, L.norm_off = r->norm_offset, L.eps = p.hp->eps;
    L.mode = MV_GATEUP;
    L.act = r->act;
    TRY(dp_cu_matvec(&L, p.st));
    PROF(PROF_MATMUL_GATE_UP, l, W->gate.nbytes + W->up.nbytes);
    TRY(decode_projection(p, D->down, cs->gate, r->post_norms ? D->post_ffn_norm : NULL));
    PROF(PROF_MATMUL_DOWN, l, W->down.nbytes);
    return DP_OK;
}

/* Embedding lookup and the recipe's scale (the token ids are on the
 * device); also resets the argmax keys of the rows the LM head takes. */
int embed(Pass &p, int n_keys) {
    CudaState *cs = p.cs;
    const float scale = p.hp->embed_scale;
    if (dp_trace_on(p.s, DP_TP_EMBED, -1)) {
        TRY(dp_cu_embed(&cs->tok_embd, cs->d_io, p.n, 1.0f, cs->x, cs->d_key, n_keys, p.st));
        TR(DP_TP_EMBED, -1, cs->x, p.E);
    }
    if (!dp_trace_on(p.s, DP_TP_EMBED, -1) || scale != 1.0f)
        TRY(dp_cu_embed(&cs->tok_embd, cs->d_io, p.n, scale, cs->x, cs->d_key, n_keys, p.st));
    TR(DP_TP_EMBED_SCALED, -1, cs->x, p.E);
    PROF(PROF_EMBED, -1, (uint64_t)p.n * p.m->tok_embd.row_bytes);
    return DP_OK;
}

/* Final norm and the LM head of the last row: one matvec with the norm
 * (and a pending post-norm) in its prologue and the argmax in its epilogue
 * (OUT_ARGMAX), unless traced; then the final soft-capping where the model
 * has it (the argmax after it: capped logits can tie where the raw ones do
 * not) and the sampler (OUT_SAMPLE). */
int lm_last(Pass &p, int out) {
    CudaState *cs = p.cs;
    const float cap = p.hp->final_softcap;
    unsigned long long *key = out == OUT_ARGMAX && cap == 0.0f ? cs->d_key : NULL;
    if (p.owed.n) TRY(norm_rows(p, cs->xn, NULL, cs->out_norm)); /* x takes its parts (xn unused here) */
    if (!p.tracing) {
        MvLaunch L = launch_of(cs->output, cs->logits, NULL, p.x + (size_t)(p.n - 1) * p.E, MV_STORE);
        if (p.pending) take_residual(p, &L);
        L.norm_w = cs->out_norm, L.norm_off = p.r->norm_offset, L.eps = p.hp->eps;
        L.argmax_key = key;
        TRY(dp_cu_matvec(&L, p.st));
    } else {
        TRY(dp_cu_rmsnorm(cs->xn, NULL, p.x, cs->out_norm, p.r->norm_offset, p.n, p.E, p.hp->eps, p.st));
        TR(DP_TP_FINAL_NORM, -1, cs->xn, p.E);
        PROF(PROF_RMSNORM, -1, 0);
        MvLaunch L = launch_of(cs->output, cs->logits, NULL, cs->xn + (size_t)(p.n - 1) * p.E, MV_STORE);
        L.argmax_key = key;
        TRY(dp_cu_matvec(&L, p.st));
    }
    PROF(PROF_LM_HEAD, -1, p.m->output.nbytes);
    /* the logits point is the LM head's output, before the soft-capping */
    TRY(cu_trace(p.s, DP_TP_LOGITS, -1, cs->logits, p.pos0 + p.n - 1, 1, p.V));
    if (cap != 0.0f) {
        TRY(dp_cu_softcap(cs->logits, p.V, cap, p.st));
        if (out == OUT_ARGMAX) TRY(dp_cu_argmax(cs->logits, p.V, cs->d_key, p.st));
    }
    if (out == OUT_SAMPLE) {
        TRY(dp_cu_sample(cs->logits, p.V, cs->d_sp, cs->ckey, cs->cid, cs->d_tok, p.st));
        PROF(PROF_SAMPLE, -1, 0);
    }
    return DP_OK;
}

/* Final norm and the LM head of several rows (every row, or the n_out
 * rows_out in their order): the norm of every row (as traced), the rows
 * gathered, one product over them, each row's argmax key in d_key (after
 * the final soft-capping where the model has it, as lm_last). */
int lm_rows(Pass &p, int out) {
    CudaState *cs = p.cs;
    const int rows = out == OUT_ROWS ? p.n_out : p.n;
    const float cap = p.hp->final_softcap;
    TRY(norm_rows(p, cs->xn, NULL, cs->out_norm));
    TR(DP_TP_FINAL_NORM, -1, cs->xn, p.E);
    PROF(PROF_RMSNORM, -1, 0);
    if (rows == 0) return DP_OK; /* a batch's rows none of which is wanted */
    const float *sel = cs->xn;
    if (out == OUT_ROWS) {
        TRY(dp_cu_gather_rows(cs->o, cs->xn, cs->rows_out, rows, p.E, p.st));
        sel = cs->o;
    }
    unsigned long long *keys = cap == 0.0f ? cs->d_key : NULL;
    if (rows == 1) {
        MvLaunch L = launch_of(cs->output, cs->logits, NULL, sel, MV_STORE);
        L.argmax_key = keys;
        TRY(dp_cu_matvec(&L, p.st));
    } else {
        p.x16 = cs->x16;
        TRY(dp_cu_to_f16(p.x16, sel, (long long)rows * p.E, p.st));
        /* the LM head's f16 copy from f16_lm_rows rows: below, k_mmv on the
         * quantised head reads far fewer bytes and fuses the argmax */
        if (dp_cu_mmv_ok(cs->output.type, rows) && !(cs->output.w16 && rows >= dp_cu_set.f16_lm_rows)) {
            MmLaunch M = mm_launch(cs, cs->output, p.x16, rows, cs->logits, MV_STORE, NULL);
            M.argmax_keys = keys;
            TRY(dp_cu_mmv(&M, p.st));
        } else {
            TRY(matmul(p, cs->output, sel, rows, cs->logits, 0, NULL));
            keys = NULL;
        }
    }
    PROF(PROF_LM_HEAD, -1, p.m->output.nbytes);
    if (dp_trace_on(p.s, DP_TP_LOGITS, -1)) {
        /* one event per group of consecutive rows (a traced pass holds one
         * sequence); the logits point is before the soft-capping */
        const int *ro = cs->h_io + ROW_INTS * cs->rows_cap;
        for (int j = 0, k; j < rows; j = k) {
            const int r0 = out == OUT_ROWS ? ro[j] : j;
            for (k = j + 1; k < rows && (out == OUT_ROWS ? ro[k] : k) == r0 + (k - j);) k++;
            TRY(cu_trace(p.s, DP_TP_LOGITS, -1, cs->logits + (size_t)j * p.V, p.pos0 + r0, k - j, p.V));
        }
    }
    if (cap != 0.0f) TRY(dp_cu_softcap(cs->logits, (long long)rows * p.V, cap, p.st));
    if (!keys) TRY(dp_cu_argmax_rows(cs->logits, rows, p.V, cs->d_key, p.st));
    return DP_OK;
}

} // namespace


int cu_forward(dp_session *s, int n, int pos0, int out, int n_out) {
    Pass p;
    memset(&p, 0, sizeof p);
    p.s = s, p.cs = cu_state(s), p.m = s->m, p.hp = &s->m->hp, p.r = &s->m->recipe, p.st = p.cs->st;
    p.n = n, p.pos0 = pos0, p.tracing = s->trace_fn != NULL, p.n_out = n_out;
    const dp_hparams *hp = p.hp;
    p.E = hp->n_embd, p.HD = hp->head_dim, p.NH = hp->n_head, p.NKV = hp->n_head_kv, p.F = hp->n_ff;
    p.Q = p.NH * p.HD, p.KV = p.NKV * p.HD, p.V = hp->n_vocab;
    p.x16 = n > 1 ? p.cs->x16 : NULL;
    p.x = p.cs->x, p.x_alt = p.cs->x2;
    const int several = out == OUT_LOGITS_ALL || out == OUT_ROWS, rows = out == OUT_ROWS ? n_out : n;
    if (n < 1 || n > p.cs->rows_cap || (several && (rows < 0 || rows > p.cs->logit_rows)))
        return dp_set_error(DP_ERR_BACKEND, "CUDA forward: %d rows (%d with logits) exceed its buffers", n, rows);
    if (s->prof) {
        p.cs->pool->n = 0;
        PROF(PROF_OTHER, -1, 0);
    }
    TRY(embed(p, several ? rows : 1));
    p.one_seq = one_sequence(p.cs, n), p.fuse_rope = fused_rope_rows(p, n);
    if ((p.n_tiles = attn_tiles(p)) < 0) return DP_ERR_BACKEND;
    const int decode = n == 1 && !p.tracing && !several; /* lm_rows takes no pending post-norm */
    for (int l = 0; l < hp->n_layer; l++) {
        TRY(decode ? decode_layer(p, l) : eager_layer(p, l));
        if (s->trace_stop) return DP_ERR_STOPPED;
    }
    return several ? lm_rows(p, out) : lm_last(p, out);
}

int cu_lm_rows(dp_session *s, int n, int pos0, int n_out) {
    Pass p;
    memset(&p, 0, sizeof p);
    p.s = s, p.cs = cu_state(s), p.m = s->m, p.hp = &s->m->hp, p.r = &s->m->recipe, p.st = p.cs->st;
    p.n = n, p.pos0 = pos0, p.tracing = s->trace_fn != NULL, p.n_out = n_out;
    p.E = p.hp->n_embd, p.V = p.hp->n_vocab;
    p.x = p.cs->x;
    if (n_out > p.cs->logit_rows) return dp_set_error(DP_ERR_BACKEND, "CUDA: %d rows of logits at once", n_out);
    return lm_rows(p, OUT_ROWS);
}

void cu_rows_seq(CudaState *cs, const int32_t *tokens, int n, int pos0, int seq) {
    for (int i = 0; i < n; i++) {
        cs->h_io[ROW_INTS * i + ROW_TOK] = tokens[i];
        cs->h_io[ROW_INTS * i + ROW_POS] = pos0 + i;
        cs->h_io[ROW_INTS * i + ROW_SEQ] = seq;
    }
}
