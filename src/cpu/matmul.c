/* The matmul driver: splits out = x . W^T into tasks for the pool.
 *
 *  n <= DP_NX_MAX  matvec kernels over chunks of rows; every position of the
 *                  batch shares each decoded weight block.
 *  n >  DP_NX_MAX  blocked matmul: a task dequantizes a panel of rows (sized
 *                  to stay in L2) once, then runs the float tile kernel over
 *                  all positions in blocks that also stay in L2. */
#include <stdlib.h>
#include <string.h>

#include "../util.h"
#include "ops.h"

/* Bytes of a dequantized panel and of a block of positions the tile kernel
 * streams against it (this CPU: 1 MB L2 per core). */
#define PANEL_BYTES (128 * 1024)
#define XBLOCK_BYTES (256 * 1024)

typedef struct {
    const dp_cpu_kernels *k;
    const dp_weight *w;
    const float *x;
    const float *xsum;
    float *out;
    int n;
    int64_t chunk;      /* rows per task */
    /* blocked matmul */
    cpu_ctx *c;
    int64_t panel_rows; /* rows per panel */
    int64_t pos_block;  /* positions per inner block */
    int64_t n_panels;
    int64_t pos_per_task;
} mm_job;

static void matvec_task(void *arg, int64_t t, int thread) {
    (void)thread;
    const mm_job *j = arg;
    const dp_weight *w = j->w;
    int64_t r0 = t * j->chunk, r1 = r0 + j->chunk < w->rows ? r0 + j->chunk : w->rows;
    j->k->matvec[w->type]((const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, r1 - r0, w->cols, j->x,
                          w->cols, j->xsum, j->n, j->out + r0, w->rows);
}

static void gemm_task(void *arg, int64_t t, int thread) {
    const mm_job *j = arg;
    const dp_weight *w = j->w;
    const int64_t K = w->cols, rows = w->rows;
    int64_t panel = t % j->n_panels, pchunk = t / j->n_panels;
    int64_t r0 = panel * j->panel_rows, nr = rows - r0 < j->panel_rows ? rows - r0 : j->panel_rows;
    int64_t p0 = pchunk * j->pos_per_task, p1 = p0 + j->pos_per_task < j->n ? p0 + j->pos_per_task : j->n;
    const float *W;
    if (w->type == DP_TYPE_F32) {
        W = (const float *)((const uint8_t *)w->data + (size_t)r0 * w->row_bytes);
    } else {
        float *buf = j->c->panel[thread];
        for (int64_t r = 0; r < nr; r++)
            j->k->dequant[w->type]((const uint8_t *)w->data + (size_t)(r0 + r) * w->row_bytes, buf + r * K, K);
        W = buf;
    }
    for (int64_t p = p0; p < p1; p += j->pos_block) {
        int64_t np = p1 - p < j->pos_block ? p1 - p : j->pos_block;
        j->k->gemm(W, K, nr, j->x + p * K, K, np, K, j->out + p * rows + r0, rows);
    }
}

void cpu_matmul(cpu_ctx *c, const dp_weight *w, const float *x, int n, float *out) {
    const int64_t K = w->cols, rows = w->rows;
    const int T = c->n_threads;
    mm_job j = {.k = c->k, .w = w, .x = x, .out = out, .n = n, .c = c};
    if (n <= DP_NX_MAX) {
        if (dp_type_needs_xsum(w->type)) {
            int64_t nb = K / 32;
            for (int p = 0; p < n; p++)
                for (int64_t b = 0; b < nb; b++) {
                    const float *xb = x + (size_t)p * K + b * 32;
                    float s = 0;
                    for (int i = 0; i < 32; i++) s += xb[i];
                    c->xsum[p * nb + b] = s;
                }
            j.xsum = c->xsum;
        }
        /* about 8 tasks per thread (the load is uneven on a shared machine), at least 16 rows each */
        int64_t chunk = (rows + 8 * T - 1) / (8 * T);
        if (chunk < 16) chunk = 16;
        chunk = (chunk + 3) & ~(int64_t)3;
        j.chunk = chunk;
        dp_pool_run(c->pool, matvec_task, &j, (rows + chunk - 1) / chunk);
        return;
    }
    int64_t pr = PANEL_BYTES / (4 * K);
    if (pr > 64) pr = 64;
    pr &= ~(int64_t)3;
    if (pr < 4) pr = 4;
    if (pr > rows) pr = rows;
    int64_t pb = XBLOCK_BYTES / (4 * K);
    pb -= pb % 6;
    if (pb < 6) pb = 6;
    j.panel_rows = pr;
    j.pos_block = pb;
    j.n_panels = (rows + pr - 1) / pr;
    /* few panels: also split the positions, so every thread has work */
    int64_t pos_chunks = 1;
    if (j.n_panels < 4 * T) {
        pos_chunks = (4 * T + j.n_panels - 1) / j.n_panels;
        if (pos_chunks > n / 16) pos_chunks = n / 16 > 0 ? n / 16 : 1;
    }
    j.pos_per_task = (n + pos_chunks - 1) / pos_chunks;
    pos_chunks = (n + j.pos_per_task - 1) / j.pos_per_task;
    dp_pool_run(c->pool, gemm_task, &j, j.n_panels * pos_chunks);
}

int cpu_ctx_init(cpu_ctx *c, int n_threads, int64_t max_cols, int n_ctx, const dp_cpu_kernels *k) {
    memset(c, 0, sizeof *c);
    c->k = k ? k : dp_cpu_kernels_get();
    c->n_threads = n_threads < 1 ? 1 : n_threads;
    c->max_cols = max_cols;
    c->pool = dp_pool_new(c->n_threads);
    if (!c->pool) return DP_ERR_NOMEM;
    /* a panel holds at least 4 rows */
    c->panel_floats = PANEL_BYTES / 4;
    if (c->panel_floats < 4 * max_cols) c->panel_floats = 4 * max_cols;
    c->panel = dp_calloc((size_t)c->n_threads, sizeof(float *));
    c->scores = dp_calloc((size_t)c->n_threads, sizeof(float *));
    c->xsum = dp_malloc_aligned((size_t)DP_NX_MAX * (size_t)(max_cols / 32 + 1) * sizeof(float));
    if (!c->panel || !c->scores || !c->xsum) return DP_ERR_NOMEM;
    for (int i = 0; i < c->n_threads; i++) {
        c->panel[i] = dp_malloc_aligned((size_t)c->panel_floats * sizeof(float));
        c->scores[i] = dp_malloc_aligned((size_t)(n_ctx > 0 ? n_ctx : 1) * sizeof(float));
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
    memset(c, 0, sizeof *c);
}
