/* The matmul driver: splits out = x . W^T into tasks for the pool.
 *
 *  n <= DP_NX_MAX  matvec kernels over chunks of rows; every position of the
 *                  batch shares each decoded weight block.
 *  n >  DP_NX_MAX  blocked matmul: a task dequantizes a panel of rows (sized
 *                  to stay in L2) once, then runs the float tile kernel over
 *                  its positions in blocks that also stay in L2.
 *
 * One job can hold several weights that read the same x (Q/K/V), and the
 * gated feed-forward runs gate and up for the same rows in one task and
 * applies the activation to those rows while they are in cache. */
#include <stdlib.h>
#include <string.h>

#include "../util.h"
#include "ops.h"

/* Bytes of a dequantized panel and of a block of positions the tile kernel
 * streams against it (this CPU: 1 MB L2 per core). */
#define PANEL_BYTES (128 * 1024)
#define XBLOCK_BYTES (256 * 1024)
#define MAX_MATS 3
/* Columns per pass of the blocked matmul (a multiple of every block size):
 * long rows (an FFN's down projection) would otherwise leave panels of a
 * few rows and position blocks of a few positions. */
#define KCHUNK 2048

typedef struct {
    const dp_weight *w;
    float *out;
    int64_t chunk;      /* matvec: rows per task */
    int64_t panel_rows; /* blocked: rows per panel */
    int64_t n_panels;
    int64_t pos_block;  /* blocked: positions per inner block */
    int64_t pos_per_task, pos_chunks;
    int64_t first_task; /* tasks of this matrix start here */
} mm_mat;

typedef struct {
    cpu_ctx *c;
    const dp_cpu_kernels *k;
    const float *x;
    const float *xsum;
    const dp_xq *xq;    /* one position, integer path: x quantised once for every matrix */
    int n;
    int n_mats;
    mm_mat m[MAX_MATS];
    /* gated: m[0] = gate, m[1] = up (same shape), act_out = act(gate) * up */
    float *act_out;
    dp_act act;
} mm_job;

static void act_rows(const mm_job *j, int64_t p0, int64_t p1, int64_t r0, int64_t nr) {
    const int64_t F = j->m[0].w->rows;
    for (int64_t p = p0; p < p1; p++) {
        float *o = j->act_out + p * F + r0;
        const float *g = j->m[0].out + p * F + r0, *u = j->m[1].out + p * F + r0;
        if (j->act == DP_ACT_GELU_TANH) j->k->gelu_mul(o, g, u, nr);
        else j->k->silu_mul(o, g, u, nr);
    }
}

static void matvec_rows(const mm_job *j, const mm_mat *m, int64_t r0, int64_t nr) {
    const dp_weight *w = m->w;
    if (j->xq && j->k->matvec_q[w->type]) {
        j->k->matvec_q[w->type]((const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, nr, j->xq,
                                m->out + r0);
        return;
    }
    j->k->matvec[w->type]((const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, nr, w->cols, j->x,
                          w->cols, j->xsum, j->n, m->out + r0, w->rows);
}

static int which_mat(const mm_job *j, int64_t t) {
    int i = 0;
    while (i + 1 < j->n_mats && t >= j->m[i + 1].first_task) i++;
    return i;
}

static void matvec_task(void *arg, int64_t t, int thread) {
    (void)thread;
    const mm_job *j = arg;
    const mm_mat *m = &j->m[which_mat(j, t)];
    int64_t r0 = (t - m->first_task) * m->chunk, nr = m->w->rows - r0 < m->chunk ? m->w->rows - r0 : m->chunk;
    matvec_rows(j, m, r0, nr);
    if (j->act_out) {
        matvec_rows(j, &j->m[1], r0, nr);
        act_rows(j, 0, j->n, r0, nr);
    }
}

/* Dequantized rows r0..r0+nr-1, columns k0..k0+kc-1 of w (kc floats per
 * row), or the weight itself when it is float32 (row stride cols). */
static const float *panel(const mm_job *j, const dp_weight *w, int64_t r0, int64_t nr, int64_t k0, int64_t kc,
                          int thread, int64_t *ws) {
    if (w->type == DP_TYPE_F32) {
        *ws = w->cols;
        return (const float *)((const uint8_t *)w->data + (size_t)r0 * w->row_bytes) + k0;
    }
    float *buf = j->c->panel[thread];
    size_t off = dp_row_size(w->type, k0);
    for (int64_t r = 0; r < nr; r++)
        j->k->dequant[w->type]((const uint8_t *)w->data + (size_t)(r0 + r) * w->row_bytes + off, buf + r * kc, kc);
    *ws = kc;
    return buf;
}

/* Rows r0.. of m for positions p0..p1-1, K in chunks of KCHUNK (later
 * chunks add to the output). */
static void gemm_rows(const mm_job *j, const mm_mat *m, int64_t r0, int64_t nr, int64_t p0, int64_t p1,
                      int thread) {
    const int64_t K = m->w->cols, rows = m->w->rows;
    for (int64_t k0 = 0; k0 < K; k0 += KCHUNK) {
        int64_t kc = K - k0 < KCHUNK ? K - k0 : KCHUNK, ws;
        const float *W = panel(j, m->w, r0, nr, k0, kc, thread, &ws);
        for (int64_t p = p0; p < p1; p += m->pos_block) {
            int64_t np = p1 - p < m->pos_block ? p1 - p : m->pos_block;
            j->k->gemm(W, ws, nr, j->x + p * K + k0, K, np, kc, m->out + p * rows + r0, rows, k0 > 0);
        }
    }
}

static void gemm_task(void *arg, int64_t t, int thread) {
    const mm_job *j = arg;
    const mm_mat *m = &j->m[which_mat(j, t)];
    t -= m->first_task;
    int64_t pan = t % m->n_panels, pc = t / m->n_panels;
    int64_t r0 = pan * m->panel_rows, nr = m->w->rows - r0 < m->panel_rows ? m->w->rows - r0 : m->panel_rows;
    int64_t p0 = pc * m->pos_per_task, p1 = p0 + m->pos_per_task < j->n ? p0 + m->pos_per_task : j->n;
    gemm_rows(j, m, r0, nr, p0, p1, thread);
    if (j->act_out) {
        gemm_rows(j, &j->m[1], r0, nr, p0, p1, thread);
        act_rows(j, p0, p1, r0, nr);
    }
}

/* Splits matrix m into tasks; returns the count. */
static int64_t plan(const cpu_ctx *c, mm_mat *m, int n) {
    const int64_t K = m->w->cols, rows = m->w->rows;
    const int T = c->n_threads;
    if (n <= DP_NX_MAX) {
        /* about 8 tasks per thread (the load is uneven on a shared machine), at least 16 rows each */
        int64_t chunk = (rows + 8 * T - 1) / (8 * T);
        if (chunk < 16) chunk = 16;
        m->chunk = (chunk + 3) & ~(int64_t)3;
        return (rows + m->chunk - 1) / m->chunk;
    }
    const int64_t kc = K < KCHUNK ? K : KCHUNK;
    int64_t pr = PANEL_BYTES / (4 * kc);
    if (pr > 64) pr = 64;
    pr &= ~(int64_t)3;
    if (pr < 4) pr = 4;
    if (pr > rows) pr = rows;
    int64_t pb = XBLOCK_BYTES / (4 * kc);
    pb -= pb % 6;
    if (pb < 6) pb = 6;
    m->panel_rows = pr;
    m->pos_block = pb;
    m->n_panels = (rows + pr - 1) / pr;
    /* few panels: also split the positions, so every thread has work */
    int64_t pos_chunks = 1;
    if (m->n_panels < 4 * T) {
        pos_chunks = (4 * T + m->n_panels - 1) / m->n_panels;
        if (pos_chunks > n / 16) pos_chunks = n / 16 > 0 ? n / 16 : 1;
    }
    m->pos_per_task = (n + pos_chunks - 1) / pos_chunks;
    m->pos_chunks = (n + m->pos_per_task - 1) / m->pos_per_task;
    return m->n_panels * m->pos_chunks;
}

static void run(cpu_ctx *c, mm_job *j) {
    const int64_t K = j->m[0].w->cols;
    if (j->n == 1 && c->act_int) {
        int q = 0;
        for (int i = 0; i < j->n_mats; i++) q |= j->k->matvec_q[j->m[i].w->type] != NULL;
        if (q) {
            dp_xq_quantize(&c->xq, j->x, K, j->k);
            j->xq = &c->xq;
        }
    }
    if (j->n <= DP_NX_MAX) {
        int need = 0;
        for (int i = 0; i < j->n_mats; i++)
            need |= dp_type_needs_xsum(j->m[i].w->type) && !(j->xq && j->k->matvec_q[j->m[i].w->type]);
        if (need) {
            int64_t nb = K / 32;
            for (int p = 0; p < j->n; p++)
                for (int64_t b = 0; b < nb; b++) {
                    const float *xb = j->x + (size_t)p * K + b * 32;
                    float s = 0;
                    for (int i = 0; i < 32; i++) s += xb[i];
                    c->xsum[p * nb + b] = s;
                }
            j->xsum = c->xsum;
        }
    }
    /* gated: the tasks of m[0] also do m[1] */
    int planned = j->act_out ? 1 : j->n_mats;
    int64_t tasks = 0;
    for (int i = 0; i < planned; i++) {
        j->m[i].first_task = tasks;
        tasks += plan(c, &j->m[i], j->n);
    }
    if (j->act_out) {
        j->m[1].chunk = j->m[0].chunk;
        j->m[1].panel_rows = j->m[0].panel_rows;
        j->m[1].n_panels = j->m[0].n_panels;
        j->m[1].pos_block = j->m[0].pos_block;
        j->m[1].pos_per_task = j->m[0].pos_per_task;
        j->m[1].pos_chunks = j->m[0].pos_chunks;
        j->n_mats = 1;
    }
    dp_pool_run(c->pool, j->n <= DP_NX_MAX ? matvec_task : gemm_task, j, tasks);
}

void cpu_matmul(cpu_ctx *c, const dp_weight *w, const float *x, int n, float *out) {
    mm_job j = {.c = c, .k = c->k, .x = x, .n = n, .n_mats = 1};
    j.m[0] = (mm_mat){.w = w, .out = out};
    run(c, &j);
}

void cpu_matmul_multi(cpu_ctx *c, int n_mats, const dp_weight *const *w, float *const *out, const float *x, int n) {
    for (int i0 = 0; i0 < n_mats; i0 += MAX_MATS) {
        mm_job j = {.c = c, .k = c->k, .x = x, .n = n};
        for (int i = i0; i < n_mats && i < i0 + MAX_MATS; i++) j.m[j.n_mats++] = (mm_mat){.w = w[i], .out = out[i]};
        run(c, &j);
    }
}

void cpu_matmul_gated(cpu_ctx *c, const dp_weight *gate, const dp_weight *up, const float *x, int n, float *gate_out,
                      float *up_out, float *act_out, dp_act act) {
    mm_job j = {.c = c, .k = c->k, .x = x, .n = n, .n_mats = 2, .act_out = act_out, .act = act};
    j.m[0] = (mm_mat){.w = gate, .out = gate_out};
    j.m[1] = (mm_mat){.w = up, .out = up_out};
    run(c, &j);
}

int cpu_ctx_init(cpu_ctx *c, int n_threads, int64_t max_cols, int n_ctx, int n_head, int head_dim,
                 const dp_cpu_kernels *k) {
    memset(c, 0, sizeof *c);
    c->k = k ? k : dp_cpu_kernels_get();
    c->act_int = dp_cpu_act_int();
    c->n_threads = n_threads < 1 ? 1 : n_threads;
    c->max_cols = max_cols;
    c->pool = dp_pool_new(c->n_threads);
    if (!c->pool) return DP_ERR_NOMEM;
    /* a panel holds at least 4 rows of a column chunk */
    c->panel_floats = PANEL_BYTES / 4;
    if (c->panel_floats < 4 * KCHUNK) c->panel_floats = 4 * KCHUNK;
    c->panel = dp_calloc((size_t)c->n_threads, sizeof(float *));
    c->scores = dp_calloc((size_t)c->n_threads, sizeof(float *));
    c->xsum = dp_malloc_aligned((size_t)DP_NX_MAX * (size_t)(max_cols / 32 + 1) * sizeof(float));
    if (!c->panel || !c->scores || !c->xsum) return DP_ERR_NOMEM;
    if (dp_xq_alloc(&c->xq, max_cols) != 0) return DP_ERR_NOMEM;
    c->n_ctx = n_ctx > 0 ? n_ctx : 1;
    c->n_head = n_head > 0 ? n_head : 1;
    c->head_dim = head_dim > 0 ? head_dim : 1;
    c->attn_max_chunks = 64;
    c->attn_s = dp_malloc_aligned((size_t)c->n_head * c->n_ctx * sizeof(float));
    c->attn_part = dp_malloc_aligned((size_t)c->n_head * c->attn_max_chunks * (c->head_dim + 2) * sizeof(float));
    if (!c->attn_s || !c->attn_part) return DP_ERR_NOMEM;
    for (int i = 0; i < c->n_threads; i++) {
        c->panel[i] = dp_malloc_aligned((size_t)c->panel_floats * sizeof(float));
        c->scores[i] = dp_malloc_aligned((size_t)CPU_ATTN_QBLOCK * c->n_ctx * sizeof(float));
        if (!c->panel[i] || !c->scores[i]) return DP_ERR_NOMEM;
    }
    return DP_OK;
}

void cpu_ctx_free(cpu_ctx *c) {
    if (c->pool) dp_pool_free(c->pool);
    for (int i = 0; i < c->n_threads; i++) {
        if (c->panel) dp_free_aligned(c->panel[i]);
        if (c->scores) dp_free_aligned(c->scores[i]);
    }
    free(c->panel);
    free(c->scores);
    dp_free_aligned(c->xsum);
    dp_xq_free(&c->xq);
    dp_free_aligned(c->attn_s);
    dp_free_aligned(c->attn_part);
    memset(c, 0, sizeof *c);
}
