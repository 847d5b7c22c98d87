/* Float32 CPU operations used by the forward pass. Row-major: a batch of n
 * positions is n consecutive rows. */
#ifndef DP_CPU_OPS_H
#define DP_CPU_OPS_H

#include <stdint.h>

#include "arch.h"
#include "model.h"

/* out[n][rows] = x[n][cols] . W^T, reading each weight row once per call. */
void cpu_matmul(const dp_weight *w, const float *x, int n, float *out, float *scratch_row);
/* Loads a vector weight (F32/F16/BF16) as float32 into dst. */
void cpu_load_vec(const dp_weight *w, float *dst);
/* out[i] = x[i] / rms(x) * (w[i] + offset) for each of n rows of dim d. */
void cpu_rmsnorm(float *out, const float *x, const float *w, float offset, int n, int d, float eps);
/* Rotates one head vector in place at position pos. inv_freq has n_rot/2 entries. */
void cpu_rope(float *x, int n_rot, const float *inv_freq, float pos, dp_rope_style style);
/* out = act(gate) * up, n values. */
void cpu_gated_act(float *out, const float *gate, const float *up, int n, dp_act act);
void cpu_softmax(float *x, int n);
/* Causal attention of n query rows (positions pos0..pos0+n-1, n_head heads of
 * head_dim) over cache rows 0..pos0+n-1 (n_head_kv heads; GQA groups), keys
 * limited to q_pos - k_pos < window when window > 0. exclude_self drops the
 * query's own key (fault injection only). scores: n_ctx floats of scratch;
 * probs (optional): the softmax weights as [n][n_head][pos0+n]. */
void cpu_attention(float *out, const float *q, const float *k_cache, const float *v_cache, int n, int pos0,
                   int n_head, int n_head_kv, int head_dim, int window, float scale, int exclude_self,
                   float *scores, float *probs);
void cpu_add(float *x, const float *y, int n);

#endif
