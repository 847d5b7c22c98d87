/* The screened LM head: greedy tokens of several positions without the
 * 16-bit path's full logits, and the same tokens.
 *
 * With several positions the integer LM head is bound by its multiply-adds,
 * not by the weights (read once for all positions): two 16-bit
 * multiply-adds per 32 values and position. A greedy row needs only the
 * first index of the maximum. So:
 *  1. every logit approximately from 8-bit activations (x86/screen.h), at
 *     half the multiply-adds: A_r;
 *  2. each within t_r = W_r beta of the exact logit L_r (the 16-bit path's
 *     value): A_r - L_r is sum_i w_ri (x8_i - x16_i) (the two quantised
 *     x, exactly) plus the float rounding of both paths, so by
 *     Cauchy-Schwarz W_r = |w_r| (the row's 2-norm, computed once per
 *     weight, rounded up) and beta = |x8 - x16| (computed in double) plus
 *     the rounding: at most 2^-24 |w_r| |x~| per operation, G + 6 of them
 *     for G groups of 8 blocks (counted twice over, per path). The 2-norm
 *     keeps the bound near the typical error where one large activation
 *     makes the largest one big;
 *  3. m = max_r (A_r - t_r) is at most the largest L; a row whose A_r + t_r
 *     is below m cannot hold the maximum. The others (a handful) get L_r
 *     from the 16-bit kernel, the one a one-position matmul uses, and the
 *     first maximum among them (ascending rows) is the token: the one the
 *     full logits give, whatever the bound's slack. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../util.h"
#include "ops.h"

/* candidate rows listed per task and position; a task that finds more is
 * scanned again against the final threshold, and one with more than that
 * near the maximum (near-flat logits) gives up */
#define SCREEN_CAP 512
/* bytes of weight rows a task keeps in L1 while the positions pass over them */
#define SCREEN_SLICE (16 * 1024)

int cpu_screen_usable(const cpu_ctx *c, const dp_weight *w) {
    return c->act_int && c->k->screen[w->type] && c->k->screen_scan && c->k->matvec_q[w->type] &&
           w->cols % 32 == 0 && w->cols <= c->panel_floats && w->rows < INT32_MAX;
}

void cpu_screen_free(cpu_screen *sc) {
    dp_free_aligned(sc->wnorm);
    for (int i = 0; i < sc->n_xq8; i++) dp_xq8_free(&sc->xq8[i]);
    free(sc->xq8);
    free(sc->lo_max);
    free(sc->cand);
    free(sc->n_cand);
    memset(sc, 0, sizeof *sc);
}

typedef struct {
    cpu_ctx *c;
    cpu_screen *sc;
    const dp_weight *w;
    int n;
    float *out;
    float beta[64];
    int64_t chunk;
} screen_job;

static int64_t chunk_rows(const cpu_ctx *c, int64_t rows) {
    int64_t chunk = (rows + 8 * c->n_threads - 1) / (8 * c->n_threads);
    return chunk < 64 ? 64 : (chunk + 7) & ~(int64_t)7;
}

/* W_r of the task's rows: the dequantized row's 2-norm in double, rounded
 * up (inf when not finite: the bound then excludes nothing) */
static void wnorm_task(void *arg, int64_t t, int thread) {
    const screen_job *j = arg;
    const dp_weight *w = j->w;
    const int64_t r0 = t * j->chunk, r1 = r0 + j->chunk < w->rows ? r0 + j->chunk : w->rows;
    float *buf = j->c->panel[thread];
    for (int64_t r = r0; r < r1; r++) {
        j->c->k->dequant[w->type]((const uint8_t *)w->data + (size_t)r * w->row_bytes, buf, w->cols);
        double s = 0;
        for (int64_t i = 0; i < w->cols; i++) s += (double)buf[i] * buf[i];
        s = sqrt(s);
        j->sc->wnorm[r] = s < 3.0e38 ? (float)(s * (1.0 + 0x1p-20)) : INFINITY;
    }
}

static void screen_task(void *arg, int64_t t, int thread) {
    (void)thread;
    const screen_job *j = arg;
    const dp_weight *w = j->w;
    const dp_cpu_kernels *k = j->c->k;
    cpu_screen *sc = j->sc;
    const int64_t rows = w->rows, r0 = t * j->chunk, r1 = r0 + j->chunk < rows ? r0 + j->chunk : rows;
    int64_t slice = SCREEN_SLICE / (int64_t)w->row_bytes;
    slice = slice < 8 ? 8 : slice & ~(int64_t)7;
    /* kept here and stored once: the slots of other tasks share cache lines */
    float lo_max[64];
    int nc[64];
    for (int p = 0; p < j->n; p++) lo_max[p] = -INFINITY, nc[p] = 0;
    for (int64_t r = r0; r < r1; r += slice) {
        const int64_t nr = r1 - r < slice ? r1 - r : slice;
        const uint8_t *wr = (const uint8_t *)w->data + (size_t)r * w->row_bytes;
        for (int p = 0; p < j->n; p += DP_NX_MAX)
            k->screen[w->type](wr, w->row_bytes, nr, &sc->xq8[p], j->n - p < DP_NX_MAX ? j->n - p : DP_NX_MAX,
                               j->out + (size_t)p * rows + r, rows);
        for (int p = 0; p < j->n; p++) {
            if (nc[p] < 0) continue;
            const int room = nc[p] < SCREEN_CAP ? SCREEN_CAP - nc[p] : 0;
            const int got = k->screen_scan(j->out + (size_t)p * rows + r, sc->wnorm + r, nr, j->beta[p], &lo_max[p],
                                           sc->cand + (t * j->n + p) * SCREEN_CAP + (SCREEN_CAP - room), room,
                                           (int32_t)r);
            nc[p] = got < 0 ? -1 : nc[p] + got; /* -1: a NaN; over SCREEN_CAP: too many */
        }
    }
    for (int p = 0; p < j->n; p++) {
        sc->lo_max[t * j->n + p] = lo_max[p];
        sc->n_cand[t * j->n + p] = nc[p];
    }
}

static int ensure(cpu_ctx *c, cpu_screen *sc, const dp_weight *w, int n, int64_t tasks) {
    if (sc->w_data != w->data) {
        dp_free_aligned(sc->wnorm);
        sc->w_data = NULL;
        sc->wnorm = dp_malloc_aligned((size_t)w->rows * sizeof(float));
        if (!sc->wnorm) return 0;
        screen_job j = {.c = c, .sc = sc, .w = w, .chunk = chunk_rows(c, w->rows)};
        dp_pool_run(c->pool, wnorm_task, &j, (w->rows + j.chunk - 1) / j.chunk);
        sc->w_data = w->data;
    }
    if (n > sc->n_xq8) {
        dp_xq8 *q = realloc(sc->xq8, sizeof(dp_xq8) * (size_t)n);
        if (!q) return 0;
        sc->xq8 = q;
        for (; sc->n_xq8 < n; sc->n_xq8++)
            if (dp_xq8_alloc(&sc->xq8[sc->n_xq8], c->max_cols) != 0) return 0;
    }
    if (tasks * n > sc->n_slots) {
        free(sc->lo_max);
        free(sc->cand);
        free(sc->n_cand);
        sc->n_slots = tasks * n;
        sc->lo_max = malloc(sizeof(float) * (size_t)sc->n_slots);
        sc->n_cand = malloc(sizeof(int) * (size_t)sc->n_slots);
        sc->cand = malloc(sizeof(int32_t) * SCREEN_CAP * (size_t)sc->n_slots);
        if (!sc->lo_max || !sc->n_cand || !sc->cand) {
            sc->n_slots = 0;
            return 0;
        }
    }
    return 1;
}

int cpu_screen_argmax(cpu_ctx *c, cpu_screen *sc, const dp_weight *w, const float *x, int n, float *out,
                      int32_t *tok) {
    const int64_t K = w->cols, rows = w->rows, G = (K / 32 + 7) / 8;
    screen_job j = {.c = c, .sc = sc, .w = w, .n = n, .out = out, .chunk = chunk_rows(c, rows)};
    const int64_t tasks = (rows + j.chunk - 1) / j.chunk;
    if (n < 1 || n > c->n_xq || n > (int)(sizeof j.beta / sizeof j.beta[0]) || !ensure(c, sc, w, n, tasks)) return 0;
    for (int p = 0; p < n; p++) {
        const float *xp = x + (size_t)p * K;
        dp_xq *q16 = &c->xq[p];
        dp_xq8 *q8 = &sc->xq8[p];
        dp_xq_quantize(q16, xp, K, c->k);
        if (dp_xq8_quantize(q8, xp, K) != 0) return 0;
        double dd = 0, n8 = 0, n16 = 0;
        for (int64_t i = 0; i < K; i++) {
            const double a = (double)q8->d[i / 32] * q8->q8[i], b = (double)q16->d[i / 32] * q16->q16[i];
            dd += (a - b) * (a - b);
            n8 += a * a;
            n16 += b * b;
        }
        const double beta = (sqrt(dd) + 2.0 * sqrt(n8 > n16 ? n8 : n16) * (double)(G + 6) * 0x1p-23) * (1.0 + 0x1p-16);
        if (!(beta < 1e30)) return 0;
        j.beta[p] = (float)beta * (1.0f + 0x1p-20f);
    }
    dp_pool_run(c->pool, screen_task, &j, tasks);
    const dp_matvec_q_fn exact = c->k->matvec_q[w->type];
    for (int p = 0; p < n; p++) {
        float m = -INFINITY;
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t slot = t * n + p;
            if (sc->n_cand[slot] < 0) return 0;
            m = sc->lo_max[slot] > m ? sc->lo_max[slot] : m;
        }
        if (!(m > -INFINITY)) return 0;
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t slot = t * n + p, r0 = t * j.chunk, r1 = r0 + j.chunk < rows ? r0 + j.chunk : rows;
            if (sc->n_cand[slot] <= SCREEN_CAP) continue;
            /* listed against its own running maximum: again against m (no lower bound exceeds it) */
            float lm = m;
            sc->n_cand[slot] = c->k->screen_scan(out + (size_t)p * rows + r0, sc->wnorm + r0, r1 - r0, j.beta[p], &lm,
                                                 sc->cand + slot * SCREEN_CAP, SCREEN_CAP, (int32_t)r0);
            if (sc->n_cand[slot] < 0 || sc->n_cand[slot] > SCREEN_CAP) return 0;
        }
        /* the candidates in ascending rows (tasks in order, each ascending):
         * the first exact maximum is the token */
        const float *a = out + (size_t)p * rows;
        const float beta = j.beta[p];
        int32_t best = -1;
        float best_v = 0;
        for (int64_t t = 0; t < tasks; t++) {
            const int64_t slot = t * n + p;
            for (int i = 0; i < sc->n_cand[slot]; i++) {
                const int32_t r = sc->cand[slot * SCREEN_CAP + i];
                const float v = a[r], tr = fmaf(sc->wnorm[r], beta, fabsf(v) * 0x1p-22f);
                if (!(v + tr >= m)) continue;
                float e;
                exact((const uint8_t *)w->data + (size_t)r * w->row_bytes, w->row_bytes, 1, &c->xq[p], 1, &e, 1);
                if (e != e) return 0;
                if (best < 0 || e > best_v) best = r, best_v = e;
            }
        }
        if (best < 0) return 0;
        tok[p] = best;
    }
    return 1;
}
