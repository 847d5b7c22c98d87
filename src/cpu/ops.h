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

/* What the ops share: kernels, threads and per-thread scratch. */
typedef struct {
    const dp_cpu_kernels *k;
    dp_pool *pool;
    int n_threads;
    float **panel;          /* per thread: dequantized weight rows for the blocked matmul */
    int64_t panel_floats;
    float **scores;         /* per thread: attention scores, n_ctx floats */
    float *xsum;            /* DP_NX_MAX x (max_cols / 32) */
    int64_t max_cols;
} cpu_ctx;

/* n_threads >= 1; max_cols bounds the K of every matmul; n_ctx the keys of
 * attention. k: the kernel table (NULL = dp_cpu_kernels_get()). */
int cpu_ctx_init(cpu_ctx *c, int n_threads, int64_t max_cols, int n_ctx, const dp_cpu_kernels *k);
void cpu_ctx_free(cpu_ctx *c);

/* out[n][rows] = x[n][cols] . W^T. Each weight row is read once per call:
 * up to DP_NX_MAX positions share each decoded block (matvec kernels); more
 * positions use a blocked matmul over dequantized row panels. */
void cpu_matmul(cpu_ctx *c, const dp_weight *w, const float *x, int n, float *out);
/* Loads a vector weight (F32/F16/BF16) as float32 into dst. */
void cpu_load_vec(const dp_weight *w, float *dst);
/* out[i] = x[i] / rms(x) * (w[i] + offset) for each of n rows of dim d. */
void cpu_rmsnorm(cpu_ctx *c, float *out, const float *x, const float *w, float offset, int n, int d, float eps);
/* cos/sin of pos * inv_freq[i], i < n_rot / 2, as cs[2i], cs[2i + 1]. */
void cpu_rope_table(float *cs, int n_rot, const float *inv_freq, float pos);
/* Rotates one head vector in place with a table from cpu_rope_table. */
void cpu_rope_apply(float *x, int n_rot, const float *cs, dp_rope_style style);
/* Rotates one head vector in place at position pos. inv_freq has n_rot/2 entries. */
void cpu_rope(float *x, int n_rot, const float *inv_freq, float pos, dp_rope_style style);
/* out = act(gate) * up, n values. */
void cpu_gated_act(cpu_ctx *c, float *out, const float *gate, const float *up, int64_t n, dp_act act);
void cpu_softmax(float *x, int n);
/* Causal attention of n query rows (positions pos0..pos0+n-1, n_head heads of
 * head_dim) over cache rows 0..pos0+n-1 (n_head_kv heads; GQA groups), keys
 * limited to q_pos - k_pos < window when window > 0. exclude_self drops the
 * query's own key (fault injection only). probs (optional): the softmax
 * weights as [n][n_head][pos0+n]. One task per (position, head). */
void cpu_attention(cpu_ctx *c, float *out, const float *q, const float *k_cache, const float *v_cache, int n,
                   int pos0, int n_head, int n_head_kv, int head_dim, int window, float scale, int exclude_self,
                   float *probs);
void cpu_add(float *x, const float *y, int64_t n);

#endif
