/* The matmul driver: splits out = x . W^T into tasks for the pool. The rows
 * of x (positions) come in three groups, in this order:
 *
 *  single    each row as a call with that position alone computes it
 *            (integer path: x quantised per row; up to DP_NX_MAX rows
 *            share each decoded weight block, with per-row results that
 *            do not depend on the rows beside them);
 *  matvec    float matvec kernels, DP_NX_MAX rows at a time sharing each
 *            decoded weight block (a row's result does not depend on the
 *            rows beside it);
 *  blocked   blocked matmul: a task dequantizes a panel of weight rows
 *            (sized to stay in L2) once, then runs the float tile kernel
 *            over its positions in blocks that also stay in L2 (a row's
 *            result does not depend on how many there are). With the
 *            integer path (act_int) and a VNNI tile kernel, the types
 *            igemm.c decodes take the positions quantised as decode does
 *            (16 bits per block of 32) and panels of integer codes instead.
 *
 * A plain call with n positions is one group: single (n = 1), matvec
 * (n <= DP_NX_MAX) or blocked. A batch of several sequences gives each row
 * the group a call with its sequence's rows alone would, so a sequence's
 * results do not depend on the batch it is in. The single and matvec rows
 * share tasks over slices of weight rows, each slice small enough to stay
 * in L1 while every one of those rows passes over it: the weights come
 * from memory once per call.
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
/* Bytes of weight rows a row task keeps in L1 while its single and matvec
 * rows pass over them. */
#define SLICE_BYTES (16 * 1024)

typedef struct {
    const dp_weight *w;
    float *out;
    int64_t chunk;      /* row tasks: weight rows per task */
    int64_t row_first;  /* row tasks of this matrix start here */
    int64_t panel_rows; /* blocked: rows per panel */
    int64_t n_panels;
    int64_t pos_block;  /* blocked: positions per inner block */
    int64_t pos_per_task, pos_chunks;
    int64_t first_task; /* blocked tasks of this matrix start here */
    int ipath;          /* blocked: integer panels (dp_iblocks) */
} mm_mat;

typedef struct {
    cpu_ctx *c;
    const dp_cpu_kernels *k;
    const float *x;
    int n_s, n_m, n_b;  /* single, matvec and blocked rows */
    const dp_xq *xq;    /* single rows quantised (NULL: no matrix has an integer kernel) */
    const float *xsum;  /* per-32 sums of the single and matvec rows (NULL: not needed) */
    dp_iblocks xb;      /* the blocked rows in dp_iblocks layout (q NULL: not quantised) */
    int64_t row_tasks;
    int n_mats;
    mm_mat m[MAX_MATS];
    /* gated: m[0] = gate, m[1] = up (same shape), act_out = act(gate) * up */
    float *act_out;
    dp_act act;
} mm_job;

/* act(gate) * up of rows p0..p1-1, weight rows r0..r0+nr-1 */
static void act_rows(const mm_job *j, int64_t p0, int64_t p1, int64_t r0, int64_t nr) {
    const int64_t F = j->m[0].w->rows;
    for (int64_t p = p0; p < p1; p++) {
        float *o = j->act_out + p * F + r0;
        const float *g = j->m[0].out + p * F + r0, *u = j->m[1].out + p * F + r0;
        if (j->act == DP_ACT_GELU_TANH) j->k->gelu_mul(o, g, u, nr);
        else j->k->silu_mul(o, g, u, nr);
    }
}

/* The single and matvec rows over weight rows r0..r0+nr-1 of m. */
static void slice_rows(const mm_job *j, const mm_mat *m, int64_t r0, int64_t nr) {
    const dp_weight *w = m->w;
    const int64_t K = w->cols, nb = K / 32;
    const uint8_t *wr = (const uint8_t *)w->data + (size_t)r0 * w->row_bytes;
    if (j->xq && j->k->matvec_q[w->type]) {
        for (int p = 0; p < j->n_s; p += DP_NX_MAX) {
            int nx = j->n_s - p < DP_NX_MAX ? j->n_s - p : DP_NX_MAX;
            j->k->matvec_q[w->type](wr, w->row_bytes, nr, &j->xq[p], nx, m->out + (size_t)p * (size_t)w->rows + r0,
                                    w->rows);
        }
    } else {
        for (int p = 0; p < j->n_s; p++)
            j->k->matvec[w->type](wr, w->row_bytes, nr, K, j->x + (size_t)p * K, K, j->xsum ? j->xsum + p * nb : NULL,
                                  1, m->out + (size_t)p * (size_t)w->rows + r0, w->rows);
    }
    for (int p = j->n_s; p < j->n_s + j->n_m; p += DP_NX_MAX) {
        int nx = j->n_s + j->n_m - p < DP_NX_MAX ? j->n_s + j->n_m - p : DP_NX_MAX;
        j->k->matvec[w->type](wr, w->row_bytes, nr, K, j->x + (size_t)p * K, K, j->xsum ? j->xsum + p * nb : NULL,
                              nx, m->out + (size_t)p * (size_t)w->rows + r0, w->rows);
    }
}

static void row_task(const mm_job *j, int64_t t) {
    int i = 0;
    while (i + 1 < j->n_mats && t >= j->m[i + 1].row_first) i++;
    const mm_mat *m = &j->m[i];
    const int64_t rows = m->w->rows, r0 = (t - m->row_first) * m->chunk;
    const int64_t r1 = r0 + m->chunk < rows ? r0 + m->chunk : rows;
    int64_t slice = (int64_t)(SLICE_BYTES / m->w->row_bytes);
    if (slice < 4) slice = 4;
    for (int64_t r = r0; r < r1; r += slice) {
        int64_t nr = r1 - r < slice ? r1 - r : slice;
        slice_rows(j, m, r, nr);
        if (j->act_out) {
            slice_rows(j, &j->m[1], r, nr);
            act_rows(j, 0, j->n_s + j->n_m, r, nr);
        }
    }
}

static int which_mat(const mm_job *j, int64_t t) {
    int i = 0;
    while (i + 1 < j->n_mats && t >= j->m[i + 1].first_task) i++;
    return i;
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

/* Bytes of one row's (or position's) groups of a column chunk of kc
 * values in dp_iblocks layout: the codes and two floats per block. */
static int64_t iblocks_bytes(int64_t kc) { return (kc + DP_IGROUP - 1) / DP_IGROUP * (DP_IGROUP * 2 + 16 * 8); }

/* gemm_rows on integer panels: the panel's codes, scales and minimums share
 * the thread's panel buffer (plan_blocked sized it for them). */
static void igemm_rows(const mm_job *j, const mm_mat *m, int64_t r0, int64_t nr, int64_t p0, int64_t p1,
                       int thread) {
    const dp_weight *w = m->w;
    const int64_t K = w->cols, rows = w->rows, first = j->n_s + j->n_m;
    float *out = m->out + (size_t)first * rows;
    for (int64_t k0 = 0; k0 < K; k0 += KCHUNK) {
        const int64_t kc = K - k0 < KCHUNK ? K - k0 : KCHUNK, gc = (kc + DP_IGROUP - 1) / DP_IGROUP;
        int16_t *q = (int16_t *)j->c->panel[thread];
        float *a = (float *)(q + nr * gc * DP_IGROUP), *mn = a + nr * gc * 16;
        j->k->iweights(w->type, (const uint8_t *)w->data + (size_t)r0 * w->row_bytes, w->row_bytes, nr, k0, kc, q, a,
                       mn);
        const dp_iblocks W = {.q = q, .a = a, .m = dp_type_needs_xsum(w->type) ? mn : NULL, .gs = gc,
                              .half = dp_iblocks_half(w->type)};
        const int64_t g0 = k0 / DP_IGROUP, gs = j->xb.gs;
        for (int64_t p = p0; p < p1; p += m->pos_block) {
            const int64_t np = p1 - p < m->pos_block ? p1 - p : m->pos_block;
            const dp_iblocks X = {.q = j->xb.q + (p * gs + g0) * DP_IGROUP, .a = j->xb.a + (p * gs + g0) * 16,
                                  .m = j->xb.m + (p * gs + g0) * 16, .gs = gs};
            j->k->igemm(&W, nr, &X, np, gc, out + p * rows + r0, rows, k0 > 0);
        }
    }
}

/* Blocked rows p0..p1-1 (counted within the group) of m over weight rows
 * r0.., K in chunks of KCHUNK (later chunks add to the output). */
static void gemm_rows(const mm_job *j, const mm_mat *m, int64_t r0, int64_t nr, int64_t p0, int64_t p1,
                      int thread) {
    if (m->ipath) {
        igemm_rows(j, m, r0, nr, p0, p1, thread);
        return;
    }
    const int64_t K = m->w->cols, rows = m->w->rows, first = j->n_s + j->n_m;
    const float *x = j->x + (size_t)first * K;
    float *out = m->out + (size_t)first * rows;
    for (int64_t k0 = 0; k0 < K; k0 += KCHUNK) {
        int64_t kc = K - k0 < KCHUNK ? K - k0 : KCHUNK, ws;
        const float *W = panel(j, m->w, r0, nr, k0, kc, thread, &ws);
        for (int64_t p = p0; p < p1; p += m->pos_block) {
            int64_t np = p1 - p < m->pos_block ? p1 - p : m->pos_block;
            j->k->gemm(W, ws, nr, x + p * K + k0, K, np, kc, out + p * rows + r0, rows, k0 > 0);
        }
    }
}

static void gemm_task(const mm_job *j, int64_t t, int thread) {
    const mm_mat *m = &j->m[which_mat(j, t)];
    t -= m->first_task;
    int64_t pan = t % m->n_panels, pc = t / m->n_panels;
    int64_t r0 = pan * m->panel_rows, nr = m->w->rows - r0 < m->panel_rows ? m->w->rows - r0 : m->panel_rows;
    int64_t p0 = pc * m->pos_per_task, p1 = p0 + m->pos_per_task < j->n_b ? p0 + m->pos_per_task : j->n_b;
    gemm_rows(j, m, r0, nr, p0, p1, thread);
    if (j->act_out) {
        gemm_rows(j, &j->m[1], r0, nr, p0, p1, thread);
        act_rows(j, j->n_s + j->n_m + p0, j->n_s + j->n_m + p1, r0, nr);
    }
}

static void mm_task(void *arg, int64_t t, int thread) {
    const mm_job *j = arg;
    if (t < j->row_tasks) row_task(j, t);
    else gemm_task(j, t - j->row_tasks, thread);
}

/* Blocked positions quantised per task of IB_POS */
#define IB_POS 8
static void ib_task(void *arg, int64_t t, int thread) {
    const mm_job *j = arg;
    cpu_ctx *c = j->c;
    const int64_t K = j->m[0].w->cols, first = j->n_s + j->n_m, gs = j->xb.gs;
    for (int64_t p = t * IB_POS; p < (t + 1) * IB_POS && p < j->n_b; p++) {
        dp_xq_quantize(&c->ib_xq[thread], j->x + (size_t)(first + p) * K, K, j->k);
        dp_iblocks_position(&c->ib_xq[thread], c->ib_q + p * gs * DP_IGROUP, c->ib_a + p * gs * 16,
                            c->ib_m + p * gs * 16);
    }
}

/* Room for n positions of G groups in dp_iblocks layout and a quantiser
 * per thread; 0, or -1 (the blocked rows then take the float panels). */
static int ib_room(cpu_ctx *c, int64_t n, int64_t G) {
    if (!c->ib_xq) {
        dp_xq *q = dp_calloc((size_t)c->n_threads, sizeof(dp_xq));
        int ok = q != NULL;
        for (int i = 0; ok && i < c->n_threads; i++) ok = dp_xq_alloc(&q[i], c->max_cols) == 0;
        if (!ok) {
            for (int i = 0; q && i < c->n_threads; i++) dp_xq_free(&q[i]);
            free(q);
            return -1;
        }
        c->ib_xq = q;
    }
    if (n * G <= c->ib_cap) return 0;
    dp_free_aligned(c->ib_q);
    dp_free_aligned(c->ib_a);
    dp_free_aligned(c->ib_m);
    c->ib_q = dp_malloc_aligned((size_t)(n * G) * DP_IGROUP * sizeof(int16_t));
    c->ib_a = dp_malloc_aligned((size_t)(n * G) * 16 * sizeof(float));
    c->ib_m = dp_malloc_aligned((size_t)(n * G) * 16 * sizeof(float));
    c->ib_cap = c->ib_q && c->ib_a && c->ib_m ? n * G : 0;
    return c->ib_cap ? 0 : -1;
}

/* Weight rows per row task: about 8 tasks per thread (the load is uneven
 * on a shared machine), at least 16 rows each. */
static int64_t row_chunk(const cpu_ctx *c, int64_t rows) {
    int64_t chunk = (rows + 8 * c->n_threads - 1) / (8 * c->n_threads);
    if (chunk < 16) chunk = 16;
    return (chunk + 3) & ~(int64_t)3;
}

/* Splits matrix m's n blocked rows into tasks; returns the count. Panels
 * and position blocks are sized by their bytes: float32 values, or the
 * integer layout (m->ipath; positions go through its tile 3 at a time). */
static int64_t plan_blocked(const cpu_ctx *c, mm_mat *m, int n) {
    const int64_t K = m->w->cols, rows = m->w->rows;
    const int T = c->n_threads;
    if (n == 0) return 0;
    const int64_t kc = K < KCHUNK ? K : KCHUNK, row_bytes = m->ipath ? iblocks_bytes(kc) : 4 * kc;
    int64_t pr = PANEL_BYTES / row_bytes;
    if (pr > 64) pr = 64;
    pr &= ~(int64_t)3;
    if (pr < 4) pr = 4;
    if (pr > rows) pr = rows;
    const int tile = m->ipath ? 3 : 6;
    int64_t pb = XBLOCK_BYTES / row_bytes;
    pb -= pb % tile;
    if (pb < tile) pb = tile;
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

/* Per-32 sums of rows of x (K values each) into dst. */
static void row_sums(const float *x, int n, int64_t K, float *dst) {
    int64_t nb = K / 32;
    for (int p = 0; p < n; p++)
        for (int64_t b = 0; b < nb; b++) {
            const float *xb = x + (size_t)p * K + b * 32;
            float s = 0;
            for (int i = 0; i < 32; i++) s += xb[i];
            dst[p * nb + b] = s;
        }
}

static void run(cpu_ctx *c, mm_job *j) {
    const int64_t K = j->m[0].w->cols;
    /* single rows: quantised once per row for every matrix; per-32 sums for
     * the float kernels of the types with a per-block minimum */
    int q = 0, sums = 0;
    for (int i = 0; i < j->n_mats; i++) {
        int t = j->m[i].w->type, has_q = c->act_int && j->k->matvec_q[t];
        q |= has_q;
        sums |= dp_type_needs_xsum(t) && (j->n_m || !has_q);
    }
    if (q && j->n_s) {
        for (int p = 0; p < j->n_s; p++) dp_xq_quantize(&c->xq[p], j->x + (size_t)p * K, K, j->k);
        j->xq = c->xq;
    }
    if (sums && j->n_s + j->n_m) {
        row_sums(j->x, j->n_s + j->n_m, K, c->xsum);
        j->xsum = c->xsum;
    }
    /* blocked rows: integer panels for the types igemm.c decodes (gate and
     * up together or not at all: they share a plan), the positions
     * quantised once for every matrix */
    int ib = 0;
    for (int i = 0; i < j->n_mats; i++) {
        j->m[i].ipath = j->n_b && c->act_int && j->k->igemm && dp_iblocks_type_ok(j->m[i].w->type);
        ib |= j->m[i].ipath;
    }
    if (j->act_out && j->m[0].ipath != j->m[1].ipath) j->m[0].ipath = j->m[1].ipath = 0;
    const int64_t G = (K + DP_IGROUP - 1) / DP_IGROUP;
    if (ib && ib_room(c, j->n_b, G) != 0)
        for (int i = 0; i < j->n_mats; i++) j->m[i].ipath = 0;
    else if (ib) {
        j->xb = (dp_iblocks){.q = c->ib_q, .a = c->ib_a, .m = c->ib_m, .gs = G};
        dp_pool_run(c->pool, ib_task, j, (j->n_b + IB_POS - 1) / IB_POS);
    }
    /* gated: the tasks of m[0] also do m[1] */
    int planned = j->act_out ? 1 : j->n_mats;
    int64_t tasks = 0;
    for (int i = 0; j->n_s + j->n_m && i < planned; i++) {
        j->m[i].row_first = tasks;
        j->m[i].chunk = row_chunk(c, j->m[i].w->rows);
        tasks += (j->m[i].w->rows + j->m[i].chunk - 1) / j->m[i].chunk;
    }
    j->row_tasks = tasks;
    tasks = 0;
    for (int i = 0; i < planned; i++) {
        j->m[i].first_task = tasks;
        tasks += plan_blocked(c, &j->m[i], j->n_b);
    }
    if (j->act_out) {
        j->m[1].panel_rows = j->m[0].panel_rows;
        j->m[1].n_panels = j->m[0].n_panels;
        j->m[1].pos_block = j->m[0].pos_block;
        j->m[1].pos_per_task = j->m[0].pos_per_task;
        j->m[1].pos_chunks = j->m[0].pos_chunks;
        j->n_mats = 1;
    }
    dp_pool_run(c->pool, mm_task, j, j->row_tasks + tasks);
}

cpu_rows cpu_rows_plain(int n) {
    if (n == 1) return (cpu_rows){.single = 1};
    if (n <= DP_NX_MAX) return (cpu_rows){.matvec = n};
    return (cpu_rows){.blocked = n};
}

/* More single or matvec rows than the context has room for go with the
 * blocked ones (cpu_ctx_rows sizes it; the forward pass asks first). */
static mm_job job(cpu_ctx *c, const float *x, cpu_rows g) {
    if (g.single > c->n_xq) {
        g.blocked += g.single - c->n_xq;
        g.single = c->n_xq;
    }
    if (g.single + g.matvec > c->n_sum_rows) {
        g.blocked += g.matvec;
        g.matvec = 0;
    }
    return (mm_job){.c = c, .k = c->k, .x = x, .n_s = g.single, .n_m = g.matvec, .n_b = g.blocked};
}

void cpu_matmul_rows(cpu_ctx *c, const dp_weight *w, const float *x, cpu_rows g, float *out) {
    mm_job j = job(c, x, g);
    j.n_mats = 1;
    j.m[0] = (mm_mat){.w = w, .out = out};
    run(c, &j);
}

void cpu_matmul(cpu_ctx *c, const dp_weight *w, const float *x, int n, float *out) {
    cpu_matmul_rows(c, w, x, cpu_rows_plain(n), out);
}

void cpu_matmul_multi_rows(cpu_ctx *c, int n_mats, const dp_weight *const *w, float *const *out, const float *x,
                           cpu_rows g) {
    for (int i0 = 0; i0 < n_mats; i0 += MAX_MATS) {
        mm_job j = job(c, x, g);
        for (int i = i0; i < n_mats && i < i0 + MAX_MATS; i++) j.m[j.n_mats++] = (mm_mat){.w = w[i], .out = out[i]};
        run(c, &j);
    }
}

void cpu_matmul_multi(cpu_ctx *c, int n_mats, const dp_weight *const *w, float *const *out, const float *x, int n) {
    cpu_matmul_multi_rows(c, n_mats, w, out, x, cpu_rows_plain(n));
}

void cpu_matmul_gated_rows(cpu_ctx *c, const dp_weight *gate, const dp_weight *up, const float *x, cpu_rows g,
                           float *gate_out, float *up_out, float *act_out, dp_act act) {
    mm_job j = job(c, x, g);
    j.n_mats = 2;
    j.act_out = act_out;
    j.act = act;
    j.m[0] = (mm_mat){.w = gate, .out = gate_out};
    j.m[1] = (mm_mat){.w = up, .out = up_out};
    run(c, &j);
}

void cpu_matmul_gated(cpu_ctx *c, const dp_weight *gate, const dp_weight *up, const float *x, int n, float *gate_out,
                      float *up_out, float *act_out, dp_act act) {
    cpu_matmul_gated_rows(c, gate, up, x, cpu_rows_plain(n), gate_out, up_out, act_out, act);
}

int cpu_ctx_rows(cpu_ctx *c, int n_single, int n_sum) {
    if (n_single > c->n_xq) {
        dp_xq *xq = realloc(c->xq, sizeof(dp_xq) * (size_t)n_single);
        if (!xq) return DP_ERR_NOMEM;
        c->xq = xq;
        for (; c->n_xq < n_single; c->n_xq++)
            if (dp_xq_alloc(&c->xq[c->n_xq], c->max_cols) != 0) return DP_ERR_NOMEM;
    }
    if (n_sum > c->n_sum_rows) {
        dp_free_aligned(c->xsum);
        c->xsum = dp_malloc_aligned((size_t)n_sum * (size_t)(c->max_cols / 32 + 1) * sizeof(float));
        c->n_sum_rows = c->xsum ? n_sum : 0;
        if (!c->xsum) return DP_ERR_NOMEM;
    }
    return DP_OK;
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
    c->attn_page = dp_calloc((size_t)c->n_threads, sizeof(float *));
    if (!c->panel || !c->scores || !c->attn_page) return DP_ERR_NOMEM;
    if (cpu_ctx_rows(c, 1, DP_NX_MAX) != DP_OK) return DP_ERR_NOMEM;
    c->n_ctx = n_ctx > 0 ? n_ctx : 1;
    c->n_head = n_head > 0 ? n_head : 1;
    c->head_dim = head_dim > 0 ? head_dim : 1;
    c->attn_max_chunks = 64;
    for (int i = 0; i < c->n_threads; i++) {
        c->panel[i] = dp_malloc_aligned((size_t)c->panel_floats * sizeof(float));
        int rows = c->n_head > CPU_ATTN_QBLOCK ? c->n_head : CPU_ATTN_QBLOCK;
        c->scores[i] = dp_malloc_aligned((size_t)rows * c->n_ctx * sizeof(float));
        c->attn_page[i] = dp_malloc_aligned((size_t)c->head_dim * (c->n_ctx + CPU_ATTN_PAGE) * sizeof(float));
        if (!c->panel[i] || !c->scores[i] || !c->attn_page[i]) return DP_ERR_NOMEM;
    }
    return DP_OK;
}

void cpu_ctx_free(cpu_ctx *c) {
    if (c->pool) dp_pool_free(c->pool);
    for (int i = 0; i < c->n_threads; i++) {
        if (c->panel) dp_free_aligned(c->panel[i]);
        if (c->scores) dp_free_aligned(c->scores[i]);
        if (c->attn_page) dp_free_aligned(c->attn_page[i]);
    }
    free(c->panel);
    free(c->scores);
    free(c->attn_page);
    dp_free_aligned(c->xsum);
    for (int i = 0; i < c->n_xq; i++) dp_xq_free(&c->xq[i]);
    free(c->xq);
    for (int i = 0; c->ib_xq && i < c->n_threads; i++) dp_xq_free(&c->ib_xq[i]);
    free(c->ib_xq);
    dp_free_aligned(c->ib_q);
    dp_free_aligned(c->ib_a);
    dp_free_aligned(c->ib_m);
    dp_free_aligned(c->attn_part);
    dp_free_aligned(c->attn_plan);
    dp_free_aligned(c->attn_task0);
    memset(c, 0, sizeof *c);
}
