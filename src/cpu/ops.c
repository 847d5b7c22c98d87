#include "ops.h"

#include <math.h>
#include <string.h>

#include "quant.h"
#include "util.h"

void cpu_load_vec(const dp_weight *w, float *dst) { dp_dequantize_row(w->type, w->data, dst, w->cols); }

/* ------------------------------------------------------ per-row passes
 * Row ops run on the pool when the batch is large enough to pay for a
 * synchronisation (prefill); one position stays on the calling thread. */

#define ROWS_MIN_WORK 16384 /* elements */

typedef struct {
    void (*fn)(void *ctx, int64_t r0, int64_t r1);
    void *ctx;
    int64_t n, chunk;
} rows_job;

static void rows_task(void *arg, int64_t t, int thread) {
    (void)thread;
    const rows_job *j = arg;
    int64_t r0 = t * j->chunk, r1 = r0 + j->chunk < j->n ? r0 + j->chunk : j->n;
    j->fn(j->ctx, r0, r1);
}

static void rows_run(cpu_ctx *c, int64_t n, int64_t row_work, void *ctx, void (*fn)(void *, int64_t, int64_t)) {
    if (n * row_work < ROWS_MIN_WORK || c->n_threads == 1) {
        fn(ctx, 0, n);
        return;
    }
    rows_job j = {fn, ctx, n, (n + 4 * c->n_threads - 1) / (4 * c->n_threads)};
    dp_pool_run(c->pool, rows_task, &j, (n + j.chunk - 1) / j.chunk);
}

static inline float rms_scale(const dp_cpu_kernels *k, const float *x, int d, float eps) {
    double ss = k->sumsq(x, d);
    return 1.0f / sqrtf((float)(ss / d) + eps);
}

typedef struct {
    const dp_cpu_kernels *k;
    float *out, *x, *o, *xn;
    const float *w, *post_w, *next_w;
    float offset, eps;
    int d;
} norm_job;

static void norm_rows(void *arg, int64_t r0, int64_t r1) {
    const norm_job *j = arg;
    for (int64_t i = r0; i < r1; i++) {
        const float *xi = j->x + i * j->d;
        float *oi = j->out + i * j->d;
        float scale = rms_scale(j->k, xi, j->d, j->eps);
        for (int c = 0; c < j->d; c++) oi[c] = xi[c] * scale * (j->w[c] + j->offset);
    }
}

void cpu_rmsnorm(cpu_ctx *c, float *out, const float *x, const float *w, float offset, int n, int d, float eps) {
    norm_job j = {.k = c->k, .out = out, .x = (float *)x, .w = w, .offset = offset, .eps = eps, .d = d};
    rows_run(c, n, d, &j, norm_rows);
}

static void residual_rows(void *arg, int64_t r0, int64_t r1) {
    const norm_job *j = arg;
    const int d = j->d;
    for (int64_t i = r0; i < r1; i++) {
        float *xi = j->x + i * d, *oi = j->o + i * d;
        if (j->post_w) {
            float scale = rms_scale(j->k, oi, d, j->eps);
            for (int c = 0; c < d; c++) {
                oi[c] = oi[c] * scale * (j->post_w[c] + j->offset);
                xi[c] += oi[c];
            }
        } else {
            for (int c = 0; c < d; c++) xi[c] += oi[c];
        }
        if (j->next_w) {
            float *ni = j->xn + i * d;
            float scale = rms_scale(j->k, xi, d, j->eps);
            for (int c = 0; c < d; c++) ni[c] = xi[c] * scale * (j->next_w[c] + j->offset);
        }
    }
}

void cpu_residual(cpu_ctx *c, float *x, float *o, const float *post_w, float *xn, const float *next_w, float offset,
                  int n, int d, float eps) {
    norm_job j = {.k = c->k, .x = x, .o = o, .xn = xn, .post_w = post_w, .next_w = next_w, .offset = offset,
                  .eps = eps, .d = d};
    rows_run(c, n, d, &j, residual_rows);
}

typedef struct {
    float *x;
    int n_heads, head_dim, n_rot;
    int64_t stride, cs_stride;
    const float *cs;
    dp_rope_style style;
} rope_job;

static void rope_rows(void *arg, int64_t r0, int64_t r1) {
    const rope_job *j = arg;
    for (int64_t i = r0; i < r1; i++)
        for (int h = 0; h < j->n_heads; h++)
            cpu_rope_apply(j->x + i * j->stride + (int64_t)h * j->head_dim, j->n_rot, j->cs + i * j->cs_stride,
                           j->style);
}

void cpu_rope_rows(cpu_ctx *c, float *x, int n, int n_heads, int head_dim, const float *cs, int64_t cs_stride,
                   int n_rot, dp_rope_style style) {
    rope_job j = {x, n_heads, head_dim, n_rot, (int64_t)n_heads * head_dim, cs_stride, cs, style};
    rows_run(c, n, (int64_t)n_heads * n_rot, &j, rope_rows);
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
    dp_act act;
} act_job;

static void act_range(void *arg, int64_t i0, int64_t i1) {
    const act_job *j = arg;
    if (j->act == DP_ACT_GELU_TANH) j->k->gelu_mul(j->out + i0, j->gate + i0, j->up + i0, i1 - i0);
    else j->k->silu_mul(j->out + i0, j->gate + i0, j->up + i0, i1 - i0);
}

void cpu_gated_act(cpu_ctx *c, float *out, const float *gate, const float *up, int64_t n, dp_act act) {
    act_job j = {c->k, out, gate, up, act};
    rows_run(c, n, 1, &j, act_range);
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

void cpu_softcap(float *x, int64_t n, float cap) {
    if (cap == 0.0f) return;
    /* as HF writes it: divide, tanh, multiply, in float */
    for (int64_t i = 0; i < n; i++) x[i] = tanhf(x[i] / cap) * cap;
}
