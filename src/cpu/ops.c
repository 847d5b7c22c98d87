#include "ops.h"

#include <math.h>
#include <string.h>

#include "quant.h"
#include "util.h"

void cpu_load_vec(const dp_weight *w, float *dst) { dp_dequantize_row(w->type, w->data, dst, w->cols); }

void cpu_rmsnorm(cpu_ctx *c, float *out, const float *x, const float *w, float offset, int n, int d, float eps) {
    for (int i = 0; i < n; i++) {
        const float *xi = x + (int64_t)i * d;
        float *oi = out + (int64_t)i * d;
        double ss = c->k->sumsq(xi, d);
        float scale = 1.0f / sqrtf((float)(ss / d) + eps);
        for (int j = 0; j < d; j++) oi[j] = xi[j] * scale * (w[j] + offset);
    }
}

void cpu_rope_table(float *cs, int n_rot, const float *inv_freq, float pos) {
    for (int i = 0; i < n_rot / 2; i++) {
        float ang = pos * inv_freq[i];
        cs[2 * i] = cosf(ang);
        cs[2 * i + 1] = sinf(ang);
    }
}

void cpu_rope_apply(float *x, int n_rot, const float *cs, dp_rope_style style) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float c = cs[2 * i], s = cs[2 * i + 1];
        int a = style == DP_ROPE_NEOX ? i : 2 * i;
        int b = style == DP_ROPE_NEOX ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

void cpu_rope(float *x, int n_rot, const float *inv_freq, float pos, dp_rope_style style) {
    int half = n_rot / 2;
    for (int i = 0; i < half; i++) {
        float ang = pos * inv_freq[i];
        float c = cosf(ang), s = sinf(ang);
        int a = style == DP_ROPE_NEOX ? i : 2 * i;
        int b = style == DP_ROPE_NEOX ? i + half : 2 * i + 1;
        float x0 = x[a], x1 = x[b];
        x[a] = x0 * c - x1 * s;
        x[b] = x0 * s + x1 * c;
    }
}

typedef struct {
    const dp_cpu_kernels *k;
    float *out;
    const float *gate, *up;
    int64_t n, chunk;
    dp_act act;
} act_job;

static void act_task(void *arg, int64_t t, int thread) {
    (void)thread;
    const act_job *j = arg;
    int64_t i0 = t * j->chunk, m = j->n - i0 < j->chunk ? j->n - i0 : j->chunk;
    if (j->act == DP_ACT_GELU_TANH) j->k->gelu_mul(j->out + i0, j->gate + i0, j->up + i0, m);
    else j->k->silu_mul(j->out + i0, j->gate + i0, j->up + i0, m);
}

void cpu_gated_act(cpu_ctx *c, float *out, const float *gate, const float *up, int64_t n, dp_act act) {
    act_job j = {c->k, out, gate, up, n, 16384, act};
    dp_pool_run(c->pool, act_task, &j, (n + j.chunk - 1) / j.chunk);
}

void cpu_softmax(float *x, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    double sum = 0;
    for (int i = 0; i < n; i++) {
        x[i] = expf(x[i] - mx);
        sum += x[i];
    }
    float inv = (float)(1.0 / sum);
    for (int i = 0; i < n; i++) x[i] *= inv;
}

void cpu_add(float *x, const float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

typedef struct {
    cpu_ctx *c;
    float *out, *probs;
    const float *q, *kc, *vc;
    int pos0, NH, NKV, HD, window, exclude_self, n_kv;
    float scale;
} attn_job;

/* One query position i and head h. */
static void attn_task(void *arg, int64_t t, int thread) {
    const attn_job *j = arg;
    const dp_cpu_kernels *k = j->c->k;
    const int NH = j->NH, HD = j->HD, Q = NH * HD, KV = j->NKV * HD, group = NH / j->NKV;
    const int i = (int)(t / NH), h = (int)(t % NH), p = j->pos0 + i, g = h / group;
    /* causal: keys 0..p; sliding window: keys with p - key < window */
    int lo = j->window && p - j->window + 1 > 0 ? p - j->window + 1 : 0;
    int hi = j->exclude_self && p > 0 ? p - 1 : p;
    float *sc = j->c->scores[thread];
    const float *qh = j->q + (size_t)i * Q + h * HD;
    float mx = -INFINITY;
    for (int key = lo; key <= hi; key++) {
        float d = k->dot(qh, j->kc + (size_t)key * KV + g * HD, HD) * j->scale;
        sc[key - lo] = d;
        if (d > mx) mx = d;
    }
    int m = hi - lo + 1;
    double sum = k->exp_sum(sc, mx, m);
    k->scale(sc, (float)(1.0 / sum), m);
    float *o = j->out + (size_t)i * Q + h * HD;
    memset(o, 0, (size_t)HD * sizeof(float));
    for (int key = lo; key <= hi; key++) k->axpy(o, sc[key - lo], j->vc + (size_t)key * KV + g * HD, HD);
    if (j->probs) {
        float *pr = j->probs + ((size_t)i * NH + h) * j->n_kv;
        for (int key = 0; key < j->n_kv; key++) pr[key] = key >= lo && key <= hi ? sc[key - lo] : 0.0f;
    }
}

void cpu_attention(cpu_ctx *c, float *out, const float *q, const float *kc, const float *vc, int n, int pos0, int NH,
                   int NKV, int HD, int window, float scale, int exclude_self, float *probs) {
    attn_job j = {c, out, probs, q, kc, vc, pos0, NH, NKV, HD, window, exclude_self, pos0 + n, scale};
    dp_pool_run(c->pool, attn_task, &j, (int64_t)n * NH);
}
