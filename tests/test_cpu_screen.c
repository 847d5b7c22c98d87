/* The screened LM head (src/cpu/lm_screen.c) against the integer path's
 * full logits, on fresh random Q8_0 and Q6_K weights: for 2..7 positions
 * and K with whole quads, a trailing pair (K / 32 = 4 j + 1, 4 j + 2) and a
 * partial group (Q8_0), whole super-blocks (Q6_K),
 *  - the 8-bit approximations equal the dequantised weights times the
 *    8-bit x (computed here in double) within float rounding: the kernels
 *    and the quad order of x's bytes;
 *  - every approximation lies within the bound |w_r| |x8 - x16| plus the
 *    rounding allowance (computed here from the two quantisations) of the
 *    exact logit: the premise of the screening;
 *  - every decided token is the first maximum of the full logits, also
 *    where the maximum is tied (duplicated rows) or nearly tied (rows that
 *    differ in one code), and most draws are decided (so the screening,
 *    not the fallback, is what passes);
 *  - a row whose approximation is as far below its logit as the bound
 *    allows, and that beats by less than that a row approximated exactly,
 *    still wins (a bound too small fails here);
 *  - a position with a non-finite value is not decided; thousands of rows
 *    tied at the maximum are decided right or left to the full path; rows
 *    whose logits rise with the row number (every one listed as a new
 *    maximum) are decided after the second scan.
 * Needs the VNNI kernels; skipped (with the reason) on CPUs without them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "quant.h"
#include "testlib.h"
#include "util.h"

static int g_type; /* the weight type under test */

static int argmax_first(const float *l, int64_t n) {
    int64_t b = 0;
    for (int64_t i = 1; i < n; i++)
        if (l[i] > l[b]) b = i;
    return (int)b;
}

/* rows of Q8_0 weights; a few rows copy an earlier one (exact ties) or
 * differ from it in one code (near ties) */
static uint8_t *make_weights(int64_t rows, int K, size_t rb, int ties) {
    uint8_t *w = malloc(rb * (size_t)rows);
    float *src = malloc(sizeof(float) * (size_t)K);
    for (int64_t r = 0; r < rows; r++) {
        const float sc = 0.02f + 0.04f * (float)t_rand_unit();
        for (int i = 0; i < K; i++) src[i] = sc * t_rand_normal();
        CHECK(dp_quantize_row(g_type, src, w + (size_t)r * rb, K) == 0);
    }
    for (int k = 0; k < ties; k++) {
        const int64_t a = (int64_t)(t_rand_u64() % (uint64_t)rows), b = (int64_t)(t_rand_u64() % (uint64_t)rows);
        memcpy(w + (size_t)b * rb, w + (size_t)a * rb, rb);
        if (k % 2 && g_type == DP_TYPE_Q8_0) { /* one code one step up: a logit apart by d_w x_i */
            uint8_t *q = w + (size_t)b * rb + 2 + t_rand_u64() % 32;
            if ((int8_t)*q < 127) *q = (uint8_t)((int8_t)*q + 1);
        } else if (k % 2) { /* Q6_K: a low nibble of ql one step up */
            uint8_t *q = w + (size_t)b * rb + t_rand_u64() % 128;
            if ((*q & 15) < 15) *q = (uint8_t)(*q + 1);
        }
    }
    free(src);
    return w;
}

static void trial(cpu_ctx *c, cpu_screen *sc, int K, int64_t rows, int n, int ties, int *decided, int *trials,
                  int copies) {
    const size_t rb = dp_row_size(g_type, K);
    uint8_t *w = make_weights(rows, K, rb, ties);
    const dp_weight W = {.data = w, .type = g_type, .cols = K, .rows = rows, .row_bytes = rb};
    float *x = malloc(sizeof(float) * (size_t)n * K), *full = malloc(sizeof(float) * (size_t)n * rows);
    float *approx = malloc(sizeof(float) * (size_t)n * rows), *deq = malloc(sizeof(float) * (size_t)K);
    for (int i = 0; i < n * K; i++) /* normal, a few large values, some blocks of one value */
        x[i] = (i % 53 == 7 ? 25.0f : 2.0f) * t_rand_normal();
    for (int i = 0; i < 32 && n * K >= 64; i++) x[32 + i] = 1.5f;
    cpu_matmul_rows(c, &W, x, (cpu_rows){.single = n}, full);
    if (ties) { /* position 0's best row also before it and after it: a tie for the maximum */
        const int64_t best = argmax_first(full, rows), lo = best / 2, hi = best + (rows - best) / 2;
        if (lo != best) memcpy(w + (size_t)lo * rb, w + (size_t)best * rb, rb);
        if (hi != best) memcpy(w + (size_t)hi * rb, w + (size_t)best * rb, rb);
        for (int k = 0; k < copies; k++) /* many rows at the maximum: lists past their room */
            memcpy(w + (size_t)(t_rand_u64() % (uint64_t)rows) * rb, w + (size_t)best * rb, rb);
        cpu_matmul_rows(c, &W, x, (cpu_rows){.single = n}, full);
    }
    int32_t tok[8];
    const int ok = cpu_screen_argmax(c, sc, &W, x, n, approx, tok);
    *decided += ok;
    (*trials)++;
    double worst_kernel = 0, worst_bound = 0;
    for (int p = 0; p < n; p++) {
        const dp_xq8 *q8 = &sc->xq8[p];
        const dp_xq *q16 = &c->xq[p];
        double dd = 0, n8 = 0, n16 = 0;
        for (int i = 0; i < K; i++) {
            const double a = (double)q8->d[i / 32] * q8->q8[i], b = (double)q16->d[i / 32] * q16->q16[i];
            dd += (a - b) * (a - b);
            n8 += a * a;
            n16 += b * b;
        }
        /* |x8 - x16| and the float rounding of both paths (G + 6 operations of 2^-24 each per path, x2) */
        const double G = (K / 32 + 7) / 8, allow = sqrt(dd) + 2.0 * sqrt(n8 > n16 ? n8 : n16) * (G + 6) * 0x1p-23;
        for (int64_t r = 0; r < rows; r++) {
            dp_dequantize_row(g_type, w + (size_t)r * rb, deq, K);
            double ref8 = 0, mag = 0, wn = 0;
            for (int i = 0; i < K; i++) {
                const double t = (double)deq[i] * q8->d[i / 32] * q8->q8[i];
                ref8 += t;
                mag += fabs(t);
                wn += (double)deq[i] * deq[i];
            }
            const double a = approx[(size_t)p * rows + r], l = full[(size_t)p * rows + r];
            const double ek = fabs(a - ref8) / (mag + 1e-30), eb = fabs(a - l) / (sqrt(wn) * allow + 1e-30);
            worst_kernel = ek > worst_kernel ? ek : worst_kernel;
            worst_bound = eb > worst_bound ? eb : worst_bound;
        }
        if (ok) {
            const int want = argmax_first(full + (size_t)p * rows, rows);
            CHECKF(tok[p] == want, "K %d rows %lld n %d position %d: screened token %d, full logits %d", K,
                   (long long)rows, n, p, tok[p], want);
        }
    }
    if (ok) {
        /* 8-bit products exact, one float step per group of 8 blocks */
        CHECKF(worst_kernel < 1e-5, "K %d n %d: approximations off the 8-bit dot by %.3g of sum |w x|", K, n,
               worst_kernel);
        /* the distance the screening assumes */
        CHECKF(worst_bound <= 1.0, "K %d n %d: |A - L| reaches %.3g of its bound", K, n, worst_bound);
    }
    /* a NaN in one position: not decided */
    x[(size_t)(n - 1) * K + K / 2] = NAN;
    CHECK(cpu_screen_argmax(c, sc, &W, x, n, approx, tok) == 0);
    cpu_screen_free(sc); /* the next weights may come at the same address */
    free(w);
    free(x);
    free(full);
    free(approx);
    free(deq);
}

/* Rows whose logits rise with the row number (multiples of one row): each
 * is a new maximum as a task scans its rows, so every one is listed and
 * the lists overflow; scanned again against the final threshold, a few
 * remain. */
static void ascending(cpu_ctx *c, cpu_screen *sc, int K) {
    const int64_t rows = 20000;
    const size_t rb = dp_row_size(g_type, K);
    float *x = malloc(sizeof(float) * 2 * (size_t)K), *full = malloc(sizeof(float) * 2 * (size_t)rows);
    float *approx = malloc(sizeof(float) * 2 * (size_t)rows), *u = malloc(sizeof(float) * (size_t)K);
    float *row = malloc(sizeof(float) * (size_t)K);
    for (int i = 0; i < 2 * K; i++) x[i] = t_rand_u64() % 2 ? 2.0f : -2.0f; /* 8 bits hold it: a tight bound */
    for (int i = 0; i < K; i++) u[i] = 0.05f * (x[i] > 0 ? 1.0f : -1.0f) + 0.01f * t_rand_normal();
    uint8_t *w = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) {
        for (int i = 0; i < K; i++) row[i] = (0.5f + (float)r / (float)rows) * u[i];
        dp_quantize_row(g_type, row, w + (size_t)r * rb, K);
    }
    const dp_weight W = {.data = w, .type = g_type, .cols = K, .rows = rows, .row_bytes = rb};
    cpu_matmul_rows(c, &W, x, (cpu_rows){.single = 2}, full);
    int32_t tok[2];
    const int ok = cpu_screen_argmax(c, sc, &W, x, 2, approx, tok);
    CHECKF(ok, "K %d: rising logits were not decided", K);
    for (int p = 0; ok && p < 2; p++)
        CHECKF(tok[p] == argmax_first(full + (size_t)p * rows, rows), "K %d position %d: rising logits: token %d, want %d",
               K, p, tok[p], argmax_first(full + (size_t)p * rows, rows));
    cpu_screen_free(sc);
    free(w);
    free(x);
    free(full);
    free(approx);
    free(u);
    free(row);
}

/* A row whose approximation falls short of its logit by as much as the
 * bound allows (its weights along x8 - x16, against the error) beats, by
 * less than that, a row whose approximation is exact (its weights
 * orthogonal to x8 - x16): only a bound that is not too small keeps the
 * first row a candidate. */
static void adversarial(cpu_ctx *c, cpu_screen *sc, int K) {
    const int64_t rows = 1000;
    const int n = 2;
    const size_t rb = dp_row_size(g_type, K);
    float *x = malloc(sizeof(float) * (size_t)n * K), *full = malloc(sizeof(float) * (size_t)n * rows);
    float *approx = malloc(sizeof(float) * (size_t)n * rows), *row = malloc(sizeof(float) * (size_t)K);
    double *dl = malloc(sizeof(double) * (size_t)K), *u = malloc(sizeof(double) * (size_t)K);
    for (int i = 0; i < n * K; i++) x[i] = (i % 41 == 3 ? 20.0f : 2.0f) * t_rand_normal();
    dp_xq q16;
    dp_xq8 q8;
    CHECK(dp_xq_alloc(&q16, K) == 0 && dp_xq8_alloc(&q8, K) == 0);
    dp_xq_quantize(&q16, x, K, c->k);
    CHECK(dp_xq8_quantize(&q8, x, K) == 0);
    double dn = 0, dx = 0;
    for (int i = 0; i < K; i++) {
        dl[i] = (double)q8.d[i / 32] * q8.q8[i] - (double)q16.d[i / 32] * q16.q16[i];
        dn += dl[i] * dl[i];
    }
    dn = sqrt(dn);
    for (int i = 0; i < K; i++) dx += dl[i] / dn * ((double)q16.d[i / 32] * q16.q16[i]);
    double un = 0; /* u: x16 without its component along the error */
    for (int i = 0; i < K; i++) {
        u[i] = (double)q16.d[i / 32] * q16.q16[i] - dx * dl[i] / dn;
        un += u[i] * u[i];
    }
    un = sqrt(un);
    uint8_t *w = malloc(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; r++) { /* the others: logits of about +-0.5 */
        for (int i = 0; i < K; i++) row[i] = (float)(0.5 / un * t_rand_normal());
        dp_quantize_row(g_type, row, w + (size_t)r * rb, K);
    }
    /* row 300: logit ~5, approximation ~3 (alpha |d| = 2); row 700 (below): approximation = logit */
    const double alpha = 2.0 / dn, b = (5.0 + alpha * dx) / un;
    for (int i = 0; i < K; i++) row[i] = (float)(-alpha * dl[i] / dn + b * u[i] / un);
    dp_quantize_row(g_type, row, w + 300 * rb, K);
    const dp_weight W = {.data = w, .type = g_type, .cols = K, .rows = rows, .row_bytes = rb};
    /* row 300's logit as quantised (its two large parts cancel: a Q6_K row moves it by up to ~0.6), row 700
     * half a logit below it */
    cpu_matmul_rows(c, &W, x, (cpu_rows){.single = n}, full);
    for (int i = 0; i < K; i++) row[i] = (float)((full[300] - 0.5) / un * u[i] / un);
    dp_quantize_row(g_type, row, w + 700 * rb, K);
    cpu_matmul_rows(c, &W, x, (cpu_rows){.single = n}, full);
    int32_t tok[2];
    const int ok = cpu_screen_argmax(c, sc, &W, x, n, approx, tok);
    CHECKF(argmax_first(full, rows) == 300 && approx[300] < approx[700],
           "K %d: the construction failed: logits %.3f / %.3f, approximations %.3f / %.3f", K, full[300], full[700],
           approx[300], approx[700]);
    CHECKF(ok && tok[0] == 300, "K %d: adversarial rows: decided %d, token %d (want 300)", K, ok, tok[0]);
    cpu_screen_free(sc);
    dp_xq_free(&q16);
    dp_xq8_free(&q8);
    free(w);
    free(x);
    free(full);
    free(approx);
    free(row);
    free(dl);
    free(u);
}

int main(void) {
    t_seed();
    const dp_weight probe = {.type = DP_TYPE_Q8_0, .cols = 640, .rows = 1000, .row_bytes = dp_row_size(DP_TYPE_Q8_0, 640)};
    for (int threads = 1; threads <= 3; threads += 2) {
        cpu_ctx c;
        CHECK(cpu_ctx_init(&c, threads, 4096, 16, 1, 1, NULL) == DP_OK);
        CHECK(cpu_ctx_rows(&c, 8, 8) == DP_OK);
        c.act_int = 1;
        if (!cpu_screen_usable(&c, &probe)) {
            cpu_ctx_free(&c);
            t_skip("no screening kernels on this CPU (%s level, VNNI needed)", dp_cpu_kernels_get()->name);
        }
        cpu_screen sc = {0};
        for (int ti = 0; ti < 2; ti++) {
            g_type = ti ? DP_TYPE_Q6_K : DP_TYPE_Q8_0;
            int decided = 0, trials = 0;
            const int K8[] = {640, 576, 544, 160, 96, 64, 32, 2048}, K6[] = {256, 512, 768, 1536, 2048, 256, 512, 768};
            for (int i = 0; i < 8; i++) {
                const int n = 2 + (int)(t_rand_u64() % 6), K = ti ? K6[i] : K8[i];
                trial(&c, &sc, K, 3000 + (int64_t)(t_rand_u64() % 3000), n, 0, &decided, &trials, 0);
                trial(&c, &sc, K, 2000 + (int64_t)(t_rand_u64() % 2000), n, 400, &decided, &trials, 0);
            }
            /* thousands of rows tied at the maximum: decided right, or left to the full path */
            int d2 = 0, t2 = 0;
            trial(&c, &sc, ti ? 768 : 640, 40000, 3, 2, &d2, &t2, 3000);
            ascending(&c, &sc, ti ? 768 : 640);
            adversarial(&c, &sc, ti ? 768 : 640);
            if (!ti) adversarial(&c, &sc, 576);
            printf("%s, %d threads: %d of %d trials decided by the screening; 3000 rows at the maximum: %s\n",
                   dp_type_name(g_type), threads, decided, trials, d2 ? "decided" : "left to the full path");
            CHECKF(decided * 4 >= trials * 3, "%s: only %d of %d trials decided", dp_type_name(g_type), decided, trials);
        }
        cpu_screen_free(&sc);
        cpu_ctx_free(&c);
    }
    return t_done("test_cpu_screen");
}
