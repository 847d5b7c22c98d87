/* CPU operations used by the forward pass. Activations are float32,
 * row-major: a batch of n positions is n consecutive rows. The heavy ones
 * (matmul, attention, activation) run on the context's thread pool with the
 * kernel table chosen at run time (kernels.h). */
#ifndef DP_CPU_OPS_H
#define DP_CPU_OPS_H

#include <stdint.h>

#include "arch.h"
#include "kernels.h"
#include "model.h"
#include "threadpool.h"

/* Queries per attention task when several positions are evaluated. */
#define CPU_ATTN_QBLOCK 48
/* Positions per page of the CPU backend's KV cache. */
#define CPU_ATTN_PAGE 16

/* What the ops share: kernels, threads and per-thread scratch. */
typedef struct {
    const dp_cpu_kernels *k;
    dp_pool *pool;
    int n_threads;
    float **panel;          /* per thread: weight rows for the blocked matmul (float32 or dp_iblocks) */
    int64_t panel_floats;
    float *xsum;            /* n_sum_rows x (max_cols / 32): per-32 sums of single and matvec rows */
    int n_sum_rows;
    dp_xq *xq;              /* n_xq single positions quantised for the integer kernels */
    int n_xq;
    int act_int;            /* the integer path: one-position matvecs, and prompt products where the
                             * kernels have igemm (dp_cpu_act_int() at init) */
    /* integer prompt products: the blocked positions in dp_iblocks layout
     * (room for ib_cap groups) and a quantiser per thread */
    int16_t *ib_q;
    float *ib_a, *ib_m;
    int64_t ib_cap;
    dp_xq *ib_xq;
    int64_t max_cols;
    /* attention */
    int n_ctx, n_head, head_dim;
    float **scores;         /* per thread: max(CPU_ATTN_QBLOCK, n_head) x n_ctx scores */
    float **attn_page;      /* per thread: head_dim x (n_ctx + CPU_ATTN_PAGE) floats, one head's K rows of a
                             * prompt's keys and a page of its V rows */
    float *attn_part;       /* decode: partial results of (head_dim + 2) floats, attn_part_cap of them */
    int64_t attn_part_cap;
    void *attn_plan;        /* per run (attention.c) */
    int64_t *attn_task0;
    int attn_runs_cap;
    int attn_max_chunks;    /* decode: chunks per head at most */
} cpu_ctx;

/* n_threads >= 1; max_cols bounds the K of every matmul; n_ctx (the
 * longest key range, whole pages), n_head and head_dim bound attention (0
 * when unused). k: the kernel table (NULL = dp_cpu_kernels_get()). Room for
 * the plain calls' rows (cpu_ctx_rows for batches). */
int cpu_ctx_init(cpu_ctx *c, int n_threads, int64_t max_cols, int n_ctx, int n_head, int head_dim,
                 const dp_cpu_kernels *k);
void cpu_ctx_free(cpu_ctx *c);

/* The row groups of a batched matmul (matmul.c), in this order in x and
 * out: single rows (each as a one-position call computes it), matvec rows
 * (as a call with at most DP_NX_MAX positions), blocked rows (as a call
 * with more). */
typedef struct {
    int single, matvec, blocked;
} cpu_rows;
/* The group of a plain call with n positions. */
cpu_rows cpu_rows_plain(int n);
/* Room for n_single single rows and n_single + matvec rows' sums. DP_OK or
 * DP_ERR_NOMEM. */
int cpu_ctx_rows(cpu_ctx *c, int n_single, int n_sum);

/* out[n][rows] = x[n][cols] . W^T. Each weight row is read once per call:
 * up to DP_NX_MAX positions share each decoded block (matvec kernels); more
 * positions use a blocked matmul over row panels, dequantized to float32,
 * or with act_int and igemm decoded to integer codes for the positions
 * quantised as decode quantises them. One position with act_int: x is
 * quantised once per call (shared by every weight of a multi/gated call)
 * for the types with an integer kernel (kernels.h); so are the blocked
 * positions for igemm. */
void cpu_matmul(cpu_ctx *c, const dp_weight *w, const float *x, int n, float *out);
/* Several weights with the same cols applied to the same x, in one job. */
void cpu_matmul_multi(cpu_ctx *c, int n_mats, const dp_weight *const *w, float *const *out, const float *x, int n);
/* Batched forms: rows in groups (within cpu_ctx_rows' room); each row's
 * result equals that of a plain call of its group. */
void cpu_matmul_rows(cpu_ctx *c, const dp_weight *w, const float *x, cpu_rows g, float *out);
void cpu_matmul_multi_rows(cpu_ctx *c, int n_mats, const dp_weight *const *w, float *const *out, const float *x,
                           cpu_rows g);
void cpu_matmul_gated_rows(cpu_ctx *c, const dp_weight *gate, const dp_weight *up, const float *x, cpu_rows g,
                           float *gate_out, float *up_out, float *act_out, dp_act act);
/* The gated feed-forward's first half in one job: gate_out = x . G^T,
 * up_out = x . U^T and act_out = act(gate_out) * up_out, each task doing the
 * same rows of both weights and their activation. */
void cpu_matmul_gated(cpu_ctx *c, const dp_weight *gate, const dp_weight *up, const float *x, int n, float *gate_out,
                      float *up_out, float *act_out, dp_act act);
/* Loads a vector weight (F32/F16/BF16) as float32 into dst. */
void cpu_load_vec(const dp_weight *w, float *dst);
/* out[i] = x[i] / rms(x) * (w[i] + offset) for each of n rows of dim d. */
void cpu_rmsnorm(cpu_ctx *c, float *out, const float *x, const float *w, float offset, int n, int d, float eps);
/* The residual step in one pass per row: o = rmsnorm(o) * (post_w + offset)
 * when post_w is given (written back to o), x += o, then (when next_w is
 * given) xn = rmsnorm(x) * (next_w + offset). */
void cpu_residual(cpu_ctx *c, float *x, float *o, const float *post_w, float *xn, const float *next_w, float offset,
                  int n, int d, float eps);
/* RoPE on n rows of n_heads heads (head_dim apart), row i with the table at
 * cs + i * cs_stride (from cpu_rope_table). */
void cpu_rope_rows(cpu_ctx *c, float *x, int n, int n_heads, int head_dim, const float *cs, int64_t cs_stride,
                   int n_rot, dp_rope_style style);
/* cos/sin of pos * inv_freq[i], i < n_rot / 2, as cs[2i], cs[2i + 1]. */
void cpu_rope_table(float *cs, int n_rot, const float *inv_freq, float pos);
/* Rotates one head vector in place with a table from cpu_rope_table. */
void cpu_rope_apply(float *x, int n_rot, const float *cs, dp_rope_style style);
/* Rotates one head vector in place at position pos. inv_freq has n_rot/2 entries. */
void cpu_rope(float *x, int n_rot, const float *inv_freq, float pos, dp_rope_style style);
/* out = act(gate) * up, n values (the forward pass fuses this into
 * cpu_matmul_gated; kept for callers with separate gate and up). */
void cpu_gated_act(cpu_ctx *c, float *out, const float *gate, const float *up, int64_t n, dp_act act);
void cpu_softmax(float *x, int n);
/* One sequence's queries for cpu_attention: n rows (positions
 * pos0..pos0+n-1, n_head heads of head_dim) over its cached positions
 * 0..pos0+n-1. exclude_self drops the query's own key (fault injection
 * only). probs (optional): the softmax weights as [n][n_head][pos0+n]. */
typedef struct {
    int pos0, n;
    const int32_t *pages;   /* page table: position p in page pages[p / page_size] */
    const float *q;         /* n x n_head * head_dim */
    float *out;             /* n x n_head * head_dim */
    float *probs;
    int exclude_self;
} cpu_attn_run;
/* Causal attention of every run over its own pages (n_head_kv heads; GQA
 * groups), keys limited to q_pos - k_pos < window when window > 0, the
 * scaled scores soft-capped when softcap > 0 (cpu_softcap). The
 * layer's pages: K page p at element p * page_size * kv_dim of k, V page p
 * at the same offset from v, both [slot][kv_dim], elements of eb bytes
 * (4: float32, 2: f16). DP_OK or DP_ERR_NOMEM (scratch). See attention.c. */
int cpu_attention_runs(cpu_ctx *c, const cpu_attn_run *runs, int n_runs, const void *k, const void *v, int eb,
                       int page_size, int n_head, int n_head_kv, int head_dim, int window, float scale,
                       float softcap);
/* One sequence's causal attention over a contiguous cache (the CPU
 * reference of the CUDA self-test): n query rows at positions
 * pos0..pos0+n-1 over cache positions 0..pos0+n-1; k_cache: [pos][kv_dim];
 * vt_cache: V transposed, [kv_dim][c->n_ctx] (cpu_store_vt). exclude_self
 * drops the query's own key (fault injection only). probs (optional): the
 * softmax weights as [n][n_head][pos0+n]. */
void cpu_attention(cpu_ctx *c, float *out, const float *q, const float *k_cache, const float *vt_cache, int n,
                   int pos0, int n_head, int n_head_kv, int head_dim, int window, float scale, float softcap,
                   int exclude_self, float *probs);
/* Stores n rows of V (kv_dim each) at positions pos0.. of a transposed cache. */
void cpu_store_vt(float *vt, const float *v, int n, int pos0, int kv_dim, int n_ctx);
/* Stores n rows of K and V (kv_dim each) at positions pos0.. of a paged
 * cache of eb-byte elements (4: float32; 2: f16, rounded to nearest even). */
void cpu_kv_store(void *k, void *v, int eb, int page_size, const int32_t *pages, int pos0, int n,
                  const float *krows, const float *vrows, int kv_dim);
/* The screened LM head (lm_screen.c): greedy tokens of several positions
 * from 8-bit approximate logits and exact ones of the few rows that can
 * hold the maximum. State kept per session: */
typedef struct {
    const void *w_data;     /* the weight wnorm describes (its data) */
    float *wnorm;           /* per weight row: its 2-norm (rounded up) */
    dp_xq8 *xq8;            /* per position */
    int n_xq8;
    float *lo_max;          /* per task and position */
    int32_t *cand;          /* per task and position: SCREEN_CAP rows */
    int *n_cand;
    int64_t n_slots;
} cpu_screen;
/* Whether greedy rows of w can be screened with c's kernels (the integer
 * path on, VNNI screening kernels for w's type). */
int cpu_screen_usable(const cpu_ctx *c, const dp_weight *w);
/* tok[p] = the first index of the maximum of the logits of x[p] (p < n,
 * n <= c's single rows): the logits a one-position cpu_matmul computes on
 * the integer path, so the token is the one the full logits give. out:
 * n x w->rows floats of scratch. 1 when every token is decided; 0 when
 * the caller must compute the logits (a value not finite, too many rows
 * near the maximum, no memory). */
int cpu_screen_argmax(cpu_ctx *c, cpu_screen *sc, const dp_weight *w, const float *x, int n, float *out,
                      int32_t *tok);
void cpu_screen_free(cpu_screen *sc);

void cpu_add(float *x, const float *y, int64_t n);
/* x = cap * tanh(x / cap), n values; nothing when cap is 0. */
void cpu_softcap(float *x, int64_t n, float cap);

#endif
