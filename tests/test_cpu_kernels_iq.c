/* The IQ2 / IQ3 grid types (IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S) through
 * the CPU kernels of every level this CPU can run, on random valid blocks
 * (every bit pattern is one: indices address the whole grid, signs and
 * scales are free bits; only the f16 d at offset 0 is set, ~1e-3..1e-2 of
 * either sign): the SIMD dequantisation bit for bit against
 * dp_dequantize_row; the float matvec, the integer matvec (against the
 * dequantised rows times the quantised x, tight, and times the float x,
 * within the 16-bit quantisation bound) and cpu_matmul (1 to many
 * positions, 1..7 threads, results independent of the thread count)
 * against a double-precision reference; several positions per integer
 * call bit-identical to one at a time. Shapes: row counts off every
 * blocking, widths 256, 2560, 4096 and more. test_cpu_kernels.c holds the
 * other types. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels_check.h"
#include "util.h"

static const int g_types[] = {DP_TYPE_IQ2_XXS, DP_TYPE_IQ2_XS, DP_TYPE_IQ2_S, DP_TYPE_IQ3_XXS, DP_TYPE_IQ3_S};
#define N_TYPES (int)(sizeof g_types / sizeof g_types[0])

static void wmat_make(wmat *m, int type, int rows, int K) {
    m->type = type, m->rows = rows, m->K = K;
    m->row_bytes = dp_row_size(type, K);
    const size_t bs = dp_row_size(type, QK_K), n = m->row_bytes * (size_t)rows;
    m->q = malloc(n + 64);
    m->deq = malloc(sizeof(float) * (size_t)rows * (size_t)K);
    for (size_t i = 0; i < n; i++) m->q[i] = (uint8_t)t_rand_u64();
    for (size_t o = 0; o < n; o += bs) {
        float d = (float)(1e-3 * pow(10.0, t_rand_unit())) * (t_rand_u64() % 2 ? -1.0f : 1.0f);
        uint16_t h = dp_f32_to_fp16(d);
        memcpy(m->q + o, &h, 2);
    }
    for (int r = 0; r < rows; r++)
        dp_dequantize_row(type, m->q + (size_t)r * m->row_bytes, m->deq + (size_t)r * K, K);
}

static int pick_k(int i) {
    static const int fixed[] = {256, 2560, 4096};
    return i < 3 ? fixed[i] : 256 * t_rand_int(17, 40);
}

/* dequantisation bit for bit; float matvec for 1..DP_NX_MAX positions */
static void test_dequant_matvec(const dp_cpu_kernels *kt, int type) {
    for (int rep = 0; rep < 5; rep++) {
        const int K = pick_k(rep), rows = t_rand_int(1, 37);
        wmat m;
        wmat_make(&m, type, rows, K);
        float *dq = malloc(sizeof(float) * (size_t)K);
        int bad = 0;
        for (int r = 0; r < rows; r++) {
            kt->dequant[type](m.q + (size_t)r * m.row_bytes, dq, K);
            bad += memcmp(dq, m.deq + (size_t)r * K, sizeof(float) * (size_t)K) != 0;
        }
        CHECKF(bad == 0, "%s %s dequant K=%d: %d rows not bit-identical", kt->name, dp_type_name(type), K, bad);
        float *x = malloc(sizeof(float) * (size_t)DP_NX_MAX * K), *out = malloc(sizeof(float) * DP_NX_MAX * rows);
        for (int i = 0; i < DP_NX_MAX * K; i++) x[i] = t_rand_normal();
        double *ref = malloc(sizeof(double) * DP_NX_MAX * rows), *mag = malloc(sizeof(double) * DP_NX_MAX * rows);
        ref_out(&m, x, DP_NX_MAX, ref, mag);
        for (int nx = 1; nx <= DP_NX_MAX; nx++) {
            for (int i = 0; i < DP_NX_MAX * rows; i++) out[i] = NAN;
            kt->matvec[type](m.q, m.row_bytes, rows, K, x, K, NULL, nx, out, rows);
            bad = count_off("matvec", kt, &m, out, ref, mag, nx * rows, 2e-6);
            CHECKF(bad == 0, "%s %s matvec nx=%d: %d wrong", kt->name, dp_type_name(type), nx, bad);
        }
        free(ref);
        free(mag);
        free(out);
        free(x);
        free(dq);
        wmat_free(&m);
    }
}

/* Random activations with per-block extremes (outliers, tiny, equal, zero) */
static void fill_x(float *x, int64_t K) {
    for (int64_t b = 0; b < K / 32; b++) {
        float *xb = x + 32 * b, scale = (float)exp((t_rand_unit() - 0.5) * 6.0);
        int mode = (int)(t_rand_u64() % 6);
        for (int i = 0; i < 32; i++) xb[i] = scale * t_rand_normal();
        if (mode == 1) xb[t_rand_int(0, 31)] = scale * 3000.0f * (t_rand_u64() % 2 ? 1 : -1);
        if (mode == 2)
            for (int i = 0; i < 32; i++) xb[i] *= 1e-20f;
        if (mode == 3)
            for (int i = 0; i < 32; i++) xb[i] = xb[0];
        if (mode == 4) memset(xb, 0, sizeof(float) * 32);
    }
}

/* Integer matvec: against the quantised x (2e-6 of sum |w x|) and the float
 * x (plus sum_b d_b / 2 sum |w|); rows with a stride; several positions
 * per call bit-identical to one at a time, outputs os apart. */
static void test_matvec_q(const dp_cpu_kernels *kt, int type) {
    CHECKF(kt->matvec_q[type] != NULL, "%s %s: no integer matvec", kt->name, dp_type_name(type));
    if (!kt->matvec_q[type]) return;
    for (int rep = 0; rep < 5; rep++) {
        const int K = pick_k(rep), rows = t_rand_int(1, 41), nx = t_rand_int(2, 2 * DP_NX_MAX + 1);
        wmat m;
        wmat_make(&m, type, rows, K);
        const size_t stride = m.row_bytes + (size_t)t_rand_int(0, 40);
        uint8_t *ws = malloc(stride * (size_t)rows);
        for (int r = 0; r < rows; r++) memcpy(ws + stride * r, m.q + m.row_bytes * r, m.row_bytes);
        float *x = malloc(sizeof(float) * (size_t)nx * K);
        dp_xq q[2 * DP_NX_MAX + 1];
        for (int p = 0; p < nx; p++) {
            fill_x(x + (size_t)p * K, K);
            CHECK(dp_xq_alloc(&q[p], K) == 0);
            dp_xq_quantize(&q[p], x + (size_t)p * K, K, kt);
        }
        const int64_t os = rows + t_rand_int(0, 5);
        float *solo = malloc(sizeof(float) * (size_t)(nx * os)), *out = malloc(sizeof(float) * (size_t)(nx * os));
        for (int p = 0; p < nx; p++) kt->matvec_q[type](ws, stride, rows, &q[p], 1, solo + p * os, os);
        int bad_q = 0, bad_f = 0;
        for (int p = 0; p < nx; p++)
            for (int r = 0; r < rows; r++) {
                const float *wr = m.deq + (size_t)r * K, *xp = x + (size_t)p * K;
                double sq = 0, mq = 0, sf = 0, bound = 0;
                for (int b = 0; b < K / 32; b++) {
                    double aw = 0;
                    for (int i = 32 * b; i < 32 * b + 32; i++) {
                        const double xq = (double)q[p].d[b] * q[p].q16[i];
                        sq += wr[i] * xq, mq += fabs(wr[i] * xq), sf += wr[i] * (double)xp[i];
                        aw += fabs(wr[i]);
                    }
                    bound += 0.5 * q[p].d[b] * (1 + 1e-9) * aw;
                }
                const double got = solo[p * os + r];
                if (!(fabs(got - sq) <= 2e-6 * mq + 1e-30)) {
                    if (!bad_q)
                        fprintf(stderr, "%s %s matvec_q K=%d row %d: %.9g vs %.9g (mag %.3g)\n", kt->name,
                                dp_type_name(type), K, r, got, sq, mq);
                    bad_q++;
                }
                bad_f += !(fabs(got - sf) <= 2e-6 * mq + bound + 1e-30);
            }
        CHECKF(bad_q == 0 && bad_f == 0, "%s %s matvec_q K=%d rows=%d: %d off the quantised-x dot, %d beyond the bound",
               kt->name, dp_type_name(type), K, rows, bad_q, bad_f);
        for (int i = 0; i < nx * os; i++) out[i] = NAN;
        kt->matvec_q[type](ws, stride, rows, q, nx, out, os);
        int bad = 0;
        for (int p = 0; p < nx; p++) {
            bad += memcmp(out + p * os, solo + p * os, sizeof(float) * (size_t)rows) != 0;
            for (int64_t r = rows; r < os; r++) bad += !isnan(out[p * os + r]);
        }
        CHECKF(bad == 0, "%s %s matvec_q nx=%d: %d positions differ from one-position calls", kt->name,
               dp_type_name(type), nx, bad);
        for (int p = 0; p < nx; p++) dp_xq_free(&q[p]);
        free(solo);
        free(out);
        free(x);
        free(ws);
        wmat_free(&m);
    }
}

/* cpu_matmul: one position (integer path, and float), a few (float
 * matvec), many (blocked panels); 1, 2, 3, 7 threads, bit-identical */
static void test_matmul(const dp_cpu_kernels *kt, int type) {
    const int K = pick_k(t_rand_int(0, 3)), rows = t_rand_int(1, 3) == 1 ? t_rand_int(150, 400) : t_rand_int(1, 90);
    wmat m;
    wmat_make(&m, type, rows, K);
    const int ns[] = {1, 1, 2, 3, 4, 5, 13, t_rand_int(14, 70)};
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
        const int n = ns[ni], int_path = ni == 0;
        float *x = malloc(sizeof(float) * (size_t)n * K);
        for (int i = 0; i < n * K; i++) x[i] = t_rand_normal();
        double *ref = malloc(sizeof(double) * (size_t)n * rows), *mag = malloc(sizeof(double) * (size_t)n * rows);
        if (int_path) {
            dp_xq q;
            CHECK(dp_xq_alloc(&q, K) == 0);
            float *xq = malloc(sizeof(float) * (size_t)K);
            dp_xq_quantize(&q, x, K, NULL);
            for (int i = 0; i < K; i++) xq[i] = q.d[i / 32] * q.q16[i];
            ref_out(&m, xq, 1, ref, mag);
            free(xq);
            dp_xq_free(&q);
        } else
            ref_out(&m, x, n, ref, mag);
        check_matmul(kt, &m, x, n, int_path, ref, mag);
        free(ref);
        free(mag);
        free(x);
    }
    wmat_free(&m);
}

int main(void) {
    t_seed();
    printf("detected level: %s\n", dp_isa_name(dp_cpu_isa_detect()));
    int levels = 0;
    for (int isa = 0; isa < DP_ISA_COUNT; isa++) {
        const dp_cpu_kernels *kt = dp_cpu_kernels_for((dp_isa)isa);
        if (!kt) {
            printf("level %s: not supported by this CPU, skipped\n", dp_isa_name((dp_isa)isa));
            continue;
        }
        levels++;
        const int before = t_failures;
        for (int ti = 0; ti < N_TYPES; ti++) {
            test_dequant_matvec(kt, g_types[ti]);
            test_matvec_q(kt, g_types[ti]);
            test_matmul(kt, g_types[ti]);
        }
        printf("level %s: %s\n", kt->name, t_failures == before ? "ok" : "FAILED");
    }
    CHECK(levels >= 1);
    return t_done("test_cpu_kernels_iq");
}
