/* CPU kernels of every level this CPU can run (scalar, avx2, avx512) against
 * a plain double-precision reference built from quant.c's dequantizers, on
 * fresh random data: every weight type, odd row counts, 1..many positions
 * (matvec and blocked matmul through cpu_matmul with 1, 2, 3 and 7
 * threads), K with odd block counts and (float types) odd lengths, the
 * vector helpers (dot, axpy, wsum, exp, activations, sum of squares). The integer
 * path: the activation quantiser's planes and bounds, and every integer
 * matvec against the dequantised weights times the same quantised x (tight)
 * and times the float x (within the 16-bit quantisation bound), with
 * extreme activations (outliers, tiny values, equal values, zero blocks).
 * The attention kernels: test_cpu_attention.c. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels_check.h"
#include "util.h"

static const int g_types[] = {DP_TYPE_F32,  DP_TYPE_F16,  DP_TYPE_BF16, DP_TYPE_Q4_0, DP_TYPE_Q4_1,
                              DP_TYPE_Q5_0, DP_TYPE_Q5_1, DP_TYPE_Q8_0, DP_TYPE_Q2_K, DP_TYPE_Q3_K,
                              DP_TYPE_Q4_K, DP_TYPE_Q5_K, DP_TYPE_Q6_K, DP_TYPE_IQ4_NL, DP_TYPE_IQ4_XS};
#define N_TYPES (int)(sizeof g_types / sizeof g_types[0])

/* A random K for the type: odd block counts; odd lengths for float types.
 * big: beyond the blocked matmul's column chunk (2048). */
static int pick_k_big(int type, int big) {
    int bs = dp_type_get(type)->block_size;
    if (bs == 1) return big ? t_rand_int(2049, 4500) : t_rand_int(1, 700);
    if (bs == 32) return 32 * (big ? t_rand_int(65, 140) : t_rand_int(1, 23));
    return 256 * (big ? t_rand_int(9, 17) : t_rand_int(1, 3));
}
static int pick_k(int type) { return pick_k_big(type, 0); }

static void wmat_make(wmat *m, int type, int rows, int K) {
    m->type = type;
    m->rows = rows;
    m->K = K;
    m->row_bytes = dp_row_size(type, K);
    m->q = malloc(m->row_bytes * (size_t)rows + 64);
    m->deq = malloc(sizeof(float) * (size_t)rows * K);
    float *src = malloc(sizeof(float) * (size_t)K);
    for (int r = 0; r < rows; r++) {
        /* rows with an offset and varying scale, so minimums matter */
        float off = t_rand_normal() * 0.5f, sc = 0.1f + (float)t_rand_unit() * 2.0f;
        for (int k = 0; k < K; k++) src[k] = off + sc * t_rand_normal();
        CHECK(dp_quantize_row(type, src, m->q + (size_t)r * m->row_bytes, K) == 0);
        dp_dequantize_row(type, m->q + (size_t)r * m->row_bytes, m->deq + (size_t)r * K, K);
    }
    free(src);
}

static void test_matvec_dequant(const dp_cpu_kernels *kt) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        int type = g_types[ti];
        for (int rep = 0; rep < 4; rep++) {
            int K = pick_k(type), rows = t_rand_int(1, 37);
            if (rep == 3) { /* very long rows (kernels keep per-row scale buffers) */
                K = dp_type_get(type)->block_size == 1 ? 40001 : 32 * 1100;
                if (K % dp_type_get(type)->block_size) K = QK_K * 140;
                rows = 2;
            }
            wmat m;
            wmat_make(&m, type, rows, K);
            float *x = malloc(sizeof(float) * (size_t)DP_NX_MAX * K);
            for (int i = 0; i < DP_NX_MAX * K; i++) x[i] = t_rand_normal();
            float *xsum = malloc(sizeof(float) * (size_t)DP_NX_MAX * (K / 32 + 1));
            for (int p = 0; p < DP_NX_MAX; p++)
                for (int b = 0; b < K / 32; b++) {
                    float s = 0;
                    for (int i = 0; i < 32; i++) s += x[p * K + b * 32 + i];
                    xsum[p * (K / 32) + b] = s;
                }
            double *ref = malloc(sizeof(double) * DP_NX_MAX * rows), *mag = malloc(sizeof(double) * DP_NX_MAX * rows);
            ref_out(&m, x, DP_NX_MAX, ref, mag);
            float *out = malloc(sizeof(float) * DP_NX_MAX * rows);
            for (int nx = 1; nx <= DP_NX_MAX; nx++) {
                for (int i = 0; i < DP_NX_MAX * rows; i++) out[i] = NAN;
                kt->matvec[type](m.q, m.row_bytes, rows, K, x, K, dp_type_needs_xsum(type) ? xsum : NULL, nx, out, rows);
                const int bad = count_off("matvec", kt, &m, out, ref, mag, nx * rows, 2e-6);
                CHECKF(bad == 0, "%s %s matvec nx=%d: %d wrong", kt->name, dp_type_name(type), nx, bad);
            }
            /* dequantization: the reference values to float rounding */
            float *dq = malloc(sizeof(float) * (size_t)K);
            int bad = 0;
            for (int r = 0; r < rows; r++) {
                kt->dequant[type](m.q + (size_t)r * m.row_bytes, dq, K);
                for (int k = 0; k < K; k++) {
                    float e = m.deq[(size_t)r * K + k];
                    if (!(fabsf(dq[k] - e) <= 1e-6f * fabsf(e) + 1e-7f)) bad++;
                }
            }
            CHECKF(bad == 0, "%s %s dequant K=%d: %d wrong values", kt->name, dp_type_name(type), K, bad);
            free(dq);
            free(out);
            free(ref);
            free(mag);
            free(xsum);
            free(x);
            wmat_free(&m);
        }
    }
}

/* Random activations with extremes: per block one of normal values, a large
 * outlier, tiny values, all-equal values, an all-zero block, alternating
 * +-max (the largest integer sums). */
static void fill_x(float *x, int64_t K) {
    for (int64_t b = 0; b < K / 32; b++) {
        float *xb = x + 32 * b;
        int mode = (int)(t_rand_u64() % 8);
        float scale = (float)exp((t_rand_unit() - 0.5) * 6.0);
        for (int i = 0; i < 32; i++) xb[i] = scale * t_rand_normal();
        if (mode == 1) xb[t_rand_int(0, 31)] = scale * 3000.0f * (t_rand_u64() % 2 ? 1 : -1);
        if (mode == 2) /* tiny (d_w d_x must stay a normal float: |x| above ~1e-30) */
            for (int i = 0; i < 32; i++) xb[i] *= 1e-20f;
        if (mode == 3) {
            float v = scale * t_rand_normal();
            for (int i = 0; i < 32; i++) xb[i] = v;
        }
        if (mode == 4) memset(xb, 0, sizeof(float) * 32);
        if (mode == 5)
            for (int i = 0; i < 32; i++) xb[i] = (i % 2 ? -1.0f : 1.0f) * scale * 50.0f;
        if (mode == 6)
            for (int i = 0; i < 32; i++) xb[i] = -fabsf(xb[i]) * 1e4f;
    }
}

/* x_int of value i (q16: in value order) */
static int xq_val(const dp_xq *q, int64_t i) { return q->q16[i]; }

/* The slot of value i of block b in the quad plane, written from its
 * description in kernels.h (dp_xq.pq): m = i / 8, h = (i % 8) / 4, lane t0
 * + 2 h of block position pos, t0 = (0, 4, 1, 5)[pos]; the even half holds
 * i % 4 = 0, 2, the odd half 1, 3. */
static int64_t pq_slot(int64_t b, int i, int64_t nb) {
    static const int t0_of_pos[4] = {0, 4, 1, 5};
    if (nb % 4 != 0 && nb % 4 != 3 && b >= nb / 4 * 4) /* the pair: runs of 8 values of A then B */
        return 128 * (b / 4) + 16 * (2 * (i / 16) + i % 2) + 8 * (b % 4) + (i % 16) / 2;
    int m = i / 8, h = (i % 8) / 4, k = i % 4, t = t0_of_pos[b % 4] + 2 * h;
    return 128 * (b / 4) + 32 * m + (k % 2) * 16 + 2 * t + k / 2;
}

/* The quad plane and the group-order scales against q16, d and s; zero
 * past K up to a whole group of 8 blocks. */
static int xq_groups_bad(const dp_xq *q, int64_t K) {
    static const int lane_of_block[8] = {0, 4, 2, 6, 1, 5, 3, 7};
    int64_t nb = K / 32, ng = (nb + 7) / 8 * 8;
    int bad = 0;
    int16_t *seen = calloc((size_t)ng * 32, sizeof(int16_t));
    for (int64_t b = 0; b < ng; b++) {
        for (int i = 0; i < 32; i++) {
            int64_t at = pq_slot(b, i, nb);
            if (b < nb) bad += q->pq[at] != q->q16[32 * b + i] || seen[at]++;
        }
        int64_t g = b / 8 * 8 + lane_of_block[b % 8];
        float d = b < nb ? q->d[b] : 0.0f, s = b < nb ? q->s[b] : 0.0f;
        bad += memcmp(&q->dg[g], &d, sizeof d) != 0 || memcmp(&q->sg[g], &s, sizeof s) != 0;
        for (int h = 0, sum = 0; h < 2; h++, sum = 0) { /* sg16: d times the sums of values 0..15, 16..31 */
            for (int i = 16 * h; i < 16 * h + 16 && b < nb; i++) sum += q->q16[32 * b + i];
            const float want = b < nb ? q->d[b] * (float)sum : 0.0f;
            bad += memcmp(&q->sg16[2 * (g - g % 8) + 8 * h + g % 8], &want, sizeof want) != 0;
        }
    }
    /* every slot no value of a block below K occupies is zero */
    for (int64_t at = 0; at < ng * 32; at++) bad += !seen[at] && q->pq[at] != 0;
    free(seen);
    return bad;
}

/* The quantiser: the planes' layouts and range, sums, the rounding bound
 * (which also places each value: a value read from the wrong slot misses
 * it), zero and non-finite blocks. */
static void test_xq(void) {
    for (int rep = 0; rep < 20; rep++) {
        int64_t K = 32 * t_rand_int(1, 300);
        float *x = malloc(sizeof(float) * (size_t)K);
        fill_x(x, K);
        int nonfinite = rep % 5 == 4 ? t_rand_int(0, (int)K - 1) : -1;
        if (nonfinite >= 0) x[nonfinite] = rep % 2 ? NAN : -INFINITY;
        dp_xq q;
        CHECK(dp_xq_alloc(&q, K + 32 * t_rand_int(0, 3)) == 0);
        dp_xq_quantize(&q, x, K, NULL);
        int bad_range = 0, bad_sum = 0, bad_round = 0, bad_special = 0;
        for (int64_t b = 0; b < K / 32; b++) {
            int32_t sum = 0;
            float amax = 0;
            int has_nf = nonfinite >= 32 * b && nonfinite < 32 * b + 32;
            for (int i = 0; i < 32; i++) {
                int v = xq_val(&q, 32 * b + i);
                bad_range += v > DP_XQ_MAX || v < -DP_XQ_MAX;
                sum += v;
                if (fabsf(x[32 * b + i]) > amax) amax = fabsf(x[32 * b + i]);
                /* x_int = round(x / d): |x - d x_int| <= d / 2 (x / d is formed in double) */
                double e = fabs((double)x[32 * b + i] - (double)q.d[b] * v);
                if (!has_nf && !(e <= 0.5 * q.d[b] * (1 + 1e-9))) bad_round++;
            }
            if (has_nf) bad_special += !isnan(q.d[b]) || sum != 0;
            else if (amax == 0) bad_special += q.d[b] != 0.0f || sum != 0;
            else {
                bad_special += q.d[b] != amax / (float)DP_XQ_MAX;
                bad_sum += q.s[b] != q.d[b] * (float)sum;
            }
        }
        bad_range += xq_groups_bad(&q, K);
        CHECKF(bad_range == 0 && bad_sum == 0 && bad_round == 0 && bad_special == 0,
               "xq K=%lld: range/layout %d, sums %d, rounding %d, zero/non-finite %d wrong", (long long)K, bad_range,
               bad_sum, bad_round, bad_special);
        /* every level's quantiser: the same bits */
        for (int isa = 0; isa < DP_ISA_COUNT; isa++) {
            const dp_cpu_kernels *kt = dp_cpu_kernels_for((dp_isa)isa);
            if (!kt) continue;
            dp_xq v;
            CHECK(dp_xq_alloc(&v, K) == 0);
            /* stale planes: a block neither the SIMD nor the portable code wrote shows */
            memset(v.q16, 0x55, (size_t)K * 2);
            memset(v.pq, 0x55, (size_t)(K + 255) / 256 * 512);
            memset(v.dg, 0x55, (size_t)(K + 255) / 256 * 32);
            memset(v.sg, 0x55, (size_t)(K + 255) / 256 * 32);
            memset(v.sg16, 0x55, (size_t)(K + 255) / 256 * 64);
            memset(v.d, 0x55, (size_t)K / 8);
            memset(v.s, 0x55, (size_t)K / 8);
            dp_xq_quantize(&v, x, K, kt);
            const size_t gb = (size_t)(K + 255) / 256;
            int same = v.K == K && !memcmp(v.q16, q.q16, (size_t)K * 2) && !memcmp(v.d, q.d, (size_t)K / 8) &&
                       !memcmp(v.s, q.s, (size_t)K / 8) && !memcmp(v.pq, q.pq, gb * 512) &&
                       !memcmp(v.dg, q.dg, gb * 32) && !memcmp(v.sg, q.sg, gb * 32) &&
                       !memcmp(v.sg16, q.sg16, gb * 64);
            CHECKF(same, "%s xq_block K=%lld differs from the portable quantiser", kt->name, (long long)K);
            dp_xq_free(&v);
        }
        dp_xq_free(&q);
        free(x);
    }
}

/* |m|, the minimum of values 16 h .. 16 h + 15 of 32-value unit b of a row
 * of a type with minimums (value = d q + m); 0 for the other types */
static double unit_min(int type, const uint8_t *row, int b, int h) {
    const uint8_t *p;
    if (type == DP_TYPE_Q2_K) { /* 4-bit minimums per 16 values times dmin */
        p = row + (size_t)(b / 8) * 84;
        return fabs(dp_fp16_to_f32((uint16_t)(p[82] | p[83] << 8))) * (p[2 * (b % 8) + h] >> 4);
    }
    if (type == DP_TYPE_Q4_1 || type == DP_TYPE_Q5_1) {
        p = row + (size_t)b * (type == DP_TYPE_Q4_1 ? 20 : 24);
        return fabs(dp_fp16_to_f32((uint16_t)(p[2] | p[3] << 8)));
    }
    if (type != DP_TYPE_Q4_K && type != DP_TYPE_Q5_K) return 0;
    p = row + (size_t)(b / 8) * (type == DP_TYPE_Q4_K ? 144 : 176);
    int j = b % 8, mn = j < 4 ? p[4 + j + 4] & 63 : (p[4 + j + 4] >> 4) | (p[4 + j] >> 6) << 4;
    return fabs(dp_fp16_to_f32((uint16_t)(p[2] | p[3] << 8))) * mn;
}

/* Every integer matvec: K not a multiple of 256 where the type allows,
 * rows with a stride, row subsets. Against (a) the dequantised weights
 * times the quantised x, tight: 2e-6 of sum |w x| plus, for types with
 * minimums, of sum_b |m_b sum_{k in b} x_k| (Q2_K: per 16 values; the kernels add the minimums
 * through block sums of x, so an outlier at a weight near zero cancels
 * between the two terms); (b) times the float x, within that plus the
 * quantisation bound sum_b d_b / 2 sum_{k in b} |w_k|. */
static void test_matvec_q(const dp_cpu_kernels *kt) {
    int n_types = 0;
    for (int ti = 0; ti < N_TYPES; ti++) {
        int type = g_types[ti];
        if (!kt->matvec_q[type]) continue;
        n_types++;
        for (int rep = 0; rep < 5; rep++) {
            int bs = dp_type_get(type)->block_size;
            int K = bs == 32 ? 32 * t_rand_int(1, 90) : 256 * t_rand_int(1, 12), rows = t_rand_int(1, 41);
            if (rep == 4) K = bs == 32 ? 32 * 1100 : QK_K * 140, rows = 3; /* long rows */
            wmat m;
            wmat_make(&m, type, rows, K);
            /* rows copied with a stride larger than the row */
            size_t stride = m.row_bytes + (size_t)t_rand_int(0, 3) * 64 + (size_t)t_rand_int(0, 40);
            uint8_t *ws = malloc(stride * (size_t)rows);
            for (int r = 0; r < rows; r++) memcpy(ws + stride * r, m.q + m.row_bytes * r, m.row_bytes);
            float *x = malloc(sizeof(float) * (size_t)K);
            fill_x(x, K);
            dp_xq q;
            CHECK(dp_xq_alloc(&q, K) == 0);
            dp_xq_quantize(&q, x, K, NULL);
            float *out = malloc(sizeof(float) * (size_t)rows);
            for (int r = 0; r < rows; r++) out[r] = NAN;
            int r0 = rows > 2 ? t_rand_int(0, 1) : 0;
            if (r0) kt->matvec_q[type](ws, stride, r0, &q, 1, out, rows);
            kt->matvec_q[type](ws + stride * r0, stride, rows - r0, &q, 1, out + r0, rows);
            int bad_q = 0, bad_f = 0;
            double worst_q = 0, worst_f = 0;
            for (int r = 0; r < rows; r++) {
                const float *wr = m.deq + (size_t)r * K;
                double sq = 0, mq = 0, sf = 0, mf = 0, bound = 0;
                for (int b = 0; b < K / 32; b++) {
                    double aw = 0, xh[2] = {0, 0}; /* x's sums over values 0..15, 16..31 */
                    for (int i = 0; i < 32; i++) xh[i / 16] += (double)q.d[b] * xq_val(&q, 32 * b + i);
                    if (type == DP_TYPE_Q2_K) /* a minimum per 16 values */
                        for (int h = 0; h < 2; h++) mq += unit_min(type, m.q + m.row_bytes * r, b, h) * fabs(xh[h]);
                    else mq += unit_min(type, m.q + m.row_bytes * r, b, 0) * fabs(xh[0] + xh[1]);
                    for (int i = 32 * b; i < 32 * b + 32; i++) {
                        double xq = (double)q.d[b] * xq_val(&q, i);
                        sq += wr[i] * xq, mq += fabs(wr[i] * xq);
                        sf += wr[i] * (double)x[i], mf += fabs(wr[i] * (double)x[i]);
                        aw += fabs(wr[i]);
                    }
                    bound += 0.5 * q.d[b] * (1 + 1e-9) * aw;
                }
                double eq = fabs(out[r] - sq), ef = fabs(out[r] - sf);
                /* 2e-6: the float kernels' tolerance (block scale and minimum terms partly cancel) */
                if (!(eq <= 2e-6 * mq + 1e-30)) {
                    if (!bad_q)
                        fprintf(stderr, "%s %s matvec_q K=%d row %d: %.9g vs %.9g (mag %.3g)\n", kt->name,
                                dp_type_name(type), K, r, out[r], sq, mq);
                    bad_q++;
                }
                if (!(ef <= 2e-6 * mq + bound + 1e-30)) bad_f++;
                if (mq > 0 && eq / mq > worst_q) worst_q = eq / mq;
                if (bound > 0 && ef / (bound + 2e-6 * mq) > worst_f) worst_f = ef / (bound + 2e-6 * mq);
            }
            CHECKF(bad_q == 0 && bad_f == 0,
                   "%s %s matvec_q K=%d rows=%d: %d rows off the quantised-x dot (worst %.2g of mag), %d beyond the "
                   "quantisation bound (worst %.2f of it)", kt->name, dp_type_name(type), K, rows, bad_q, worst_q, bad_f,
                   worst_f);
            free(out);
            dp_xq_free(&q);
            free(x);
            free(ws);
            wmat_free(&m);
        }
    }
    /* the integer path covers the decode-heavy types at every level */
    CHECKF(n_types == 12, "%s: %d types with an integer matvec, expected 12", kt->name, n_types);
}

/* Several positions per integer matvec call (up to DP_NX_MAX share each
 * decoded block; more run in groups): each position's outputs are
 * bit-identical to a call with it alone, in any order and mix of
 * positions; outputs go to rows os apart and nothing else is written. */
static void test_matvec_q_rows(const dp_cpu_kernels *kt) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        int type = g_types[ti];
        if (!kt->matvec_q[type]) continue;
        int bs = dp_type_get(type)->block_size, bad = 0, worst_nx = 0;
        for (int rep = 0; rep < 6; rep++) {
            int K = bs == 32 ? 32 * t_rand_int(1, 70) : 256 * t_rand_int(1, 6), rows = t_rand_int(1, 23), nx = t_rand_int(2, 2 * DP_NX_MAX + 1);
            wmat m;
            wmat_make(&m, type, rows, K);
            dp_xq q[2 * DP_NX_MAX + 1];
            float *x = malloc(sizeof(float) * (size_t)K);
            for (int p = 0; p < nx; p++) {
                fill_x(x, K);
                CHECK(dp_xq_alloc(&q[p], K) == 0);
                dp_xq_quantize(&q[p], x, K, kt);
            }
            int64_t os = rows + t_rand_int(0, 5);
            float *solo = malloc(sizeof(float) * (size_t)(nx * os)), *out = malloc(sizeof(float) * (size_t)(nx * os));
            for (int p = 0; p < nx; p++) kt->matvec_q[type](m.q, m.row_bytes, rows, &q[p], 1, solo + p * os, os);
            for (int i = 0; i < nx * os; i++) out[i] = NAN;
            kt->matvec_q[type](m.q, m.row_bytes, rows, q, nx, out, os);
            for (int p = 0; p < nx; p++) {
                bad += memcmp(out + p * os, solo + p * os, sizeof(float) * (size_t)rows) != 0;
                for (int64_t r = rows; r < os; r++) bad += !isnan(out[p * os + r]);
            }
            /* the positions reversed: position p's row lands at nx - 1 - p */
            dp_xq rev[2 * DP_NX_MAX + 1];
            for (int p = 0; p < nx; p++) rev[p] = q[nx - 1 - p];
            kt->matvec_q[type](m.q, m.row_bytes, rows, rev, nx, out, os);
            for (int p = 0; p < nx; p++) bad += memcmp(out + (nx - 1 - p) * os, solo + p * os, sizeof(float) * (size_t)rows) != 0;
            if (bad && !worst_nx) worst_nx = nx;
            for (int p = 0; p < nx; p++) dp_xq_free(&q[p]);
            free(solo);
            free(out);
            free(x);
            wmat_free(&m);
        }
        CHECKF(bad == 0, "%s %s matvec_q over several positions: %d rows differ from the one-position calls (nx %d)",
               kt->name, dp_type_name(type), bad, worst_nx);
    }
}

/* cpu_matmul through a context of this level: matvec and blocked paths,
 * several thread counts; the result must not depend on the thread count. */
static void test_matmul(const dp_cpu_kernels *kt) {
    for (int ti = 0; ti < N_TYPES; ti++) {
        int type = g_types[ti];
        int big = (int)(t_rand_u64() % 2), K = pick_k_big(type, big), rows = t_rand_int(1, big ? 40 : 150);
        if (ti % 3 == 0) rows = t_rand_int(150, 700); /* several panels */
        wmat m;
        wmat_make(&m, type, rows, K);
        const int ns[] = {1, 1, 2, 3, 4, 5, 7, 13, t_rand_int(14, 80)}; /* n = 1: the integer path, then float */
        for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++) {
            int n = ns[ni];
            float *x = malloc(sizeof(float) * (size_t)n * K);
            for (int i = 0; i < n * K; i++) x[i] = t_rand_normal();
            double *ref = malloc(sizeof(double) * (size_t)n * rows), *mag = malloc(sizeof(double) * (size_t)n * rows);
            ref_out(&m, x, n, ref, mag);
            /* the integer path (one position: matvec_q; more than DP_NX_MAX:
             * the integer prompt products): the reference takes the quantised x */
            int int_path = (ni % 2 == 0) && ((n == 1 && kt->matvec_q[type]) ||
                                             (n > DP_NX_MAX && kt->igemm && dp_iblocks_type_ok(type)));
            if (int_path) {
                dp_xq q;
                CHECK(dp_xq_alloc(&q, K) == 0);
                float *xq = malloc(sizeof(float) * (size_t)n * K);
                for (int p = 0; p < n; p++) {
                    dp_xq_quantize(&q, x + (size_t)p * K, K, NULL);
                    for (int i = 0; i < K; i++) xq[(size_t)p * K + i] = q.d[i / 32] * xq_val(&q, i);
                }
                ref_out(&m, xq, n, ref, mag);
                free(xq);
                dp_xq_free(&q);
            }
            check_matmul(kt, &m, x, n, int_path, ref, mag);
            free(ref);
            free(mag);
            free(x);
        }
        wmat_free(&m);
    }
}

/* The integer prompt products' SIMD panel decoding against igemm.c's
 * portable one, bit for bit: every type it takes, column chunks that start
 * past the first group and end inside a group. */
static void test_iweights(const dp_cpu_kernels *kt) {
    if (!kt->iweights) return;
    for (int ti = 0; ti < N_TYPES; ti++) {
        const int type = g_types[ti];
        if (!dp_iblocks_type_ok(type)) continue;
        const int K = pick_k_big(type, 1), rows = t_rand_int(1, 9);
        wmat m;
        wmat_make(&m, type, rows, K);
        const int64_t k0 = DP_IGROUP * t_rand_int(0, (K - 1) / DP_IGROUP), kc = K - k0;
        const int64_t gc = (kc + DP_IGROUP - 1) / DP_IGROUP, nq = rows * gc * DP_IGROUP, ns = rows * gc * 16;
        int16_t *q1 = malloc(sizeof(int16_t) * nq), *q2 = malloc(sizeof(int16_t) * nq);
        float *a1 = malloc(sizeof(float) * ns), *a2 = malloc(sizeof(float) * ns);
        float *m1 = calloc(ns, sizeof(float)), *m2 = calloc(ns, sizeof(float));
        dp_iblocks_weights(type, m.q, m.row_bytes, rows, k0, kc, q1, a1, m1);
        kt->iweights(type, m.q, m.row_bytes, rows, k0, kc, q2, a2, m2);
        CHECKF(!memcmp(q1, q2, sizeof(int16_t) * nq) && !memcmp(a1, a2, sizeof(float) * ns) &&
                   !memcmp(m1, m2, sizeof(float) * ns),
               "%s %s iweights K=%d k0=%d rows=%d: differs from dp_iblocks_weights", kt->name, dp_type_name(type), K,
               (int)k0, rows);
        free(q1), free(q2), free(a1), free(a2), free(m1), free(m2);
        wmat_free(&m);
    }
}

/* The integer products of the largest codes and x_int = DP_XQ_MAX (constant
 * rows), one position (matvec_q) and a prompt (the integer prompt products
 * where the level has them): Q6_K's (0 - 32) x scale -128 = 4096 at every
 * value (32 products, 4.3e9, would overflow an int32 lane; 16, 2.1e9, do
 * not), Q3_K's (0 - 4) x -32, Q2_K's 3 x 15 less 15 x 15. Positions
 * alternate in sign, rows take the extreme scales and their mirrors. */
static double extreme_block(int type, int r, uint8_t *b) { /* b zeroed; returns every value of it */
    if (type == DP_TYPE_Q6_K) { /* scales 127 or -128; ql, qh 0: codes 0 - 32; d = 1 */
        memset(b + 192, r % 2 ? 0x7f : 0x80, 16), b[209] = 0x3c;
        return (r % 2 ? 127 : -128) * -32.0;
    }
    if (type == DP_TYPE_Q3_K) { /* scales 31 or -32; hmask, qs 0: codes 0 - 4 */
        memset(b + 96, r % 2 ? 0xff : 0x00, 12), b[109] = 0x3c;
        return (r % 2 ? 31 : -32) * -4.0;
    }
    memset(b, r % 2 ? 0xff : 0x0f, 16), memset(b + 16, 0xff, 64), b[81] = b[83] = 0x3c; /* codes 3, scales 15 */
    return 45.0 - (r % 2 ? 15 : 0);                                                   /* minimums 15 or 0 */
}
static void test_int_bound(const dp_cpu_kernels *kt) {
    static const int types[] = {DP_TYPE_Q6_K, DP_TYPE_Q3_K, DP_TYPE_Q2_K};
    const int K = 512, rows = 6, n = 2 * DP_NX_MAX + 1;
    for (int ti = 0; ti < 3; ti++) {
        const int type = types[ti], bs = dp_type_get(type)->type_size;
        const size_t rb = dp_row_size(type, K);
        uint8_t *q = calloc(rows, rb);
        double val[6];
        for (int r = 0; r < rows; r++)
            for (int sb = 0; sb < K / 256; sb++) val[r] = extreme_block(type, r, q + r * rb + sb * bs);
        dp_weight w = {.name = "w", .data = q, .type = type, .cols = K, .rows = rows, .row_bytes = rb,
                       .nbytes = rb * rows};
        float *x = malloc(sizeof(float) * n * K), *out = malloc(sizeof(float) * n * rows);
        for (int p = 0; p < n; p++)
            for (int i = 0; i < K; i++) x[p * K + i] = p % 2 ? -3.0f : 2.5f;
        cpu_ctx c;
        CHECK(cpu_ctx_init(&c, 2, K, 16, 1, 1, kt) == 0);
        c.act_int = 1;
        for (int np = 1; np <= n; np += n - 1) {
            cpu_matmul(&c, &w, x, np, out);
            int bad = 0;
            for (int p = 0; p < np; p++)
                for (int r = 0; r < rows; r++)
                    bad += !(fabs(out[p * rows + r] - K * val[r] * x[p * K]) <= 1e-5 * fabs(K * val[r] * x[p * K]));
            CHECKF(bad == 0, "%s %s integer products at the largest codes, %d positions: %d of %d wrong (e.g. %.9g)",
                   kt->name, dp_type_name(type), np, bad, np * rows, out[0]);
        }
        cpu_ctx_free(&c);
        free(q), free(x), free(out);
    }
}

/* The tile kernel alone: odd R, P and K (K not a multiple of the vector). */
static void test_gemm(const dp_cpu_kernels *kt) {
    for (int rep = 0; rep < 20; rep++) {
        int R = t_rand_int(1, 11), P = t_rand_int(1, 14), K = t_rand_int(1, 300), ws = K + t_rand_int(0, 5), xs = K + t_rand_int(0, 5);
        int os = R + t_rand_int(0, 3);
        float *W = malloc(sizeof(float) * (size_t)R * ws), *X = malloc(sizeof(float) * (size_t)P * xs);
        float *C = malloc(sizeof(float) * (size_t)P * os);
        for (int i = 0; i < R * ws; i++) W[i] = t_rand_normal();
        for (int i = 0; i < P * xs; i++) X[i] = t_rand_normal();
        int accum = rep % 2;
        for (int i = 0; i < P * os; i++) C[i] = 12345.0f;
        kt->gemm(W, ws, R, X, xs, P, K, C, os, accum);
        int bad = 0;
        for (int p = 0; p < P; p++) {
            for (int r = 0; r < R; r++) {
                double s = 0, a = 0;
                for (int k = 0; k < K; k++) {
                    s += (double)W[r * ws + k] * X[p * xs + k];
                    a += fabs((double)W[r * ws + k] * X[p * xs + k]);
                }
                if (accum) s += 12345.0, a += 12345.0;
                if (!close_to(C[p * os + r], s, a, 2e-6)) bad++;
            }
            for (int r = R; r < os; r++) bad += C[p * os + r] != 12345.0f; /* untouched */
        }
        CHECKF(bad == 0, "%s gemm R=%d P=%d K=%d: %d wrong", kt->name, R, P, K, bad);
        /* W as f16 (an f16 KV cache's keys): the bits of gemm on W converted */
        uint16_t *Wh = malloc(sizeof(uint16_t) * (size_t)R * ws);
        float *C2 = malloc(sizeof(float) * (size_t)P * os);
        for (int i = 0; i < R * ws; i++) Wh[i] = dp_f32_to_fp16(W[i]), W[i] = dp_fp16_to_f32(Wh[i]);
        for (int i = 0; i < P * os; i++) C[i] = C2[i] = t_rand_normal();
        kt->gemm(W, ws, R, X, xs, P, K, C, os, accum);
        kt->gemm_w16(Wh, ws, R, X, xs, P, K, C2, os, accum);
        CHECKF(!memcmp(C, C2, sizeof(float) * (size_t)P * os), "%s gemm_w16 R=%d P=%d K=%d differs from gemm", kt->name,
               R, P, K);
        free(Wh);
        free(C2);
        free(W);
        free(X);
        free(C);
    }
}

static void test_vector_ops(const dp_cpu_kernels *kt) {
    for (int rep = 0; rep < 10; rep++) {
        int n = t_rand_int(1, 1000);
        float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
        float *y = malloc(sizeof(float) * (size_t)n), *o = malloc(sizeof(float) * (size_t)n);
        for (int i = 0; i < n; i++) a[i] = t_rand_normal(), b[i] = t_rand_normal();
        double s = 0, mag = 0, ss = 0;
        for (int i = 0; i < n; i++) s += (double)a[i] * b[i], mag += fabs((double)a[i] * b[i]), ss += (double)a[i] * a[i];
        CHECKF(close_to(kt->dot(a, b, n), s, mag, 2e-6), "%s dot n=%d", kt->name, n);
        CHECKF(fabs(kt->sumsq(a, n) - ss) <= 1e-12 * ss, "%s sumsq n=%d", kt->name, n);
        float al = t_rand_normal();
        memcpy(y, b, sizeof(float) * (size_t)n);
        kt->axpy(y, al, a, n);
        int bad = 0;
        for (int i = 0; i < n; i++) bad += !close_to(y[i], b[i] + (double)al * a[i], fabs(b[i]) + fabs(al * a[i]), 2e-7);
        CHECKF(bad == 0, "%s axpy n=%d: %d wrong", kt->name, n, bad);
        {   /* wsum: bit-identical to an axpy per row and output (rows in order), strided */
            int ny = t_rand_int(1, 5), nx = t_rand_int(1, 19);
            int64_t ys = n + t_rand_int(0, 9), ws = nx + t_rand_int(0, 3), xs = n + t_rand_int(0, 7);
            float *w = malloc(sizeof(float) * (size_t)(ny * ws)), *xr = malloc(sizeof(float) * (size_t)(nx * xs));
            float *y1 = malloc(sizeof(float) * (size_t)(ny * ys)), *y2 = malloc(sizeof(float) * (size_t)(ny * ys));
            for (int i = 0; i < ny * ws; i++) w[i] = t_rand_normal();
            for (int i = 0; i < nx * xs; i++) xr[i] = t_rand_normal();
            for (int i = 0; i < ny * ys; i++) y1[i] = y2[i] = t_rand_normal();
            kt->wsum(y1, ys, ny, w, ws, xr, xs, nx, n);
            for (int h = 0; h < ny; h++)
                for (int r = 0; r < nx; r++) kt->axpy(y2 + h * ys, w[h * ws + r], xr + r * xs, n);
            CHECKF(!memcmp(y1, y2, sizeof(float) * (size_t)(ny * ys)), "%s wsum n=%d rows=%d outputs=%d differs from axpy",
                   kt->name, n, nx, ny);
            /* x as f16 (an f16 KV cache's values): the bits of wsum on x converted */
            uint16_t *xh = malloc(sizeof(uint16_t) * (size_t)(nx * xs));
            for (int i = 0; i < nx * xs; i++) xh[i] = dp_f32_to_fp16(xr[i]), xr[i] = dp_fp16_to_f32(xh[i]);
            for (int i = 0; i < ny * ys; i++) y1[i] = y2[i] = t_rand_normal();
            kt->wsum(y1, ys, ny, w, ws, xr, xs, nx, n);
            kt->wsum_x16(y2, ys, ny, w, ws, xh, xs, nx, n);
            CHECKF(!memcmp(y1, y2, sizeof(float) * (size_t)(ny * ys)), "%s wsum_x16 n=%d rows=%d outputs=%d differs from "
                   "wsum", kt->name, n, nx, ny);
            free(xh);
            free(w), free(xr), free(y1), free(y2);
        }
        memcpy(y, b, sizeof(float) * (size_t)n);
        kt->scale(y, al, n);
        bad = 0;
        for (int i = 0; i < n; i++) bad += !close_to(y[i], (double)al * b[i], fabs(al * b[i]), 1e-7);
        CHECKF(bad == 0, "%s scale n=%d: %d wrong", kt->name, n, bad);

        /* the largest value, NaN skipped (the portable loop's result, bit for bit) */
        memcpy(y, a, sizeof(float) * (size_t)n);
        if (n > 3) y[t_rand_int(0, n - 1)] = NAN, y[t_rand_int(0, n - 1)] = -0.0f;
        float ref_max = -INFINITY;
        for (int i = 0; i < n; i++) ref_max = y[i] > ref_max ? y[i] : ref_max;
        const float got_max = kt->maxv(y, n);
        CHECKF(!memcmp(&got_max, &ref_max, sizeof got_max), "%s maxv n=%d: %g vs %g", kt->name, n, got_max, ref_max);
        CHECKF(kt->maxv(y, 0) == -INFINITY, "%s maxv of nothing: %g", kt->name, kt->maxv(y, 0));

        /* exp over the softmax range, including very negative inputs */
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) {
            y[i] = a[i] * 20.0f - (i % 7 == 0 ? 90.0f : 0.0f);
            if (y[i] > mx) mx = y[i];
        }
        memcpy(o, y, sizeof(float) * (size_t)n);
        double sum = kt->exp_sum(o, mx, n), rsum = 0;
        bad = 0;
        for (int i = 0; i < n; i++) {
            double e = exp((double)(y[i] - mx)); /* the kernel subtracts in float */
            rsum += e;
            if (!(fabs(o[i] - e) <= 4e-7 * e + 2e-38)) bad++;
        }
        CHECKF(bad == 0, "%s exp n=%d: %d wrong", kt->name, n, bad);
        CHECKF(fabs(sum - rsum) <= 1e-6 * rsum, "%s exp sum %g vs %g", kt->name, sum, rsum);

        /* activations against double references; large |gate| included */
        for (int i = 0; i < n; i++) a[i] = t_rand_normal() * (i % 5 == 0 ? 30.0f : 3.0f);
        kt->silu_mul(o, a, b, n);
        bad = 0;
        for (int i = 0; i < n; i++) {
            double g = a[i], r = g / (1.0 + exp(-g)) * b[i];
            if (!(fabs(o[i] - r) <= 1e-6 * fabs(g * b[i]) + 1e-30)) bad++;
        }
        CHECKF(bad == 0, "%s silu n=%d: %d wrong", kt->name, n, bad);
        kt->gelu_mul(o, a, b, n);
        bad = 0;
        for (int i = 0; i < n; i++) {
            double g = a[i], r = 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * b[i];
            if (!(fabs(o[i] - r) <= 1e-6 * fabs(g * b[i]) + 1e-30)) bad++;
        }
        CHECKF(bad == 0, "%s gelu n=%d: %d wrong", kt->name, n, bad);
        /* the pooled op gives the kernel's values */
        cpu_ctx c;
        CHECK(cpu_ctx_init(&c, 1 + rep % 3, 64, 16, 1, 1, kt) == 0);
        cpu_gated_act(&c, y, a, b, n, DP_ACT_GELU_TANH);
        CHECKF(memcmp(y, o, sizeof(float) * (size_t)n) == 0, "%s cpu_gated_act n=%d", kt->name, n);
        cpu_ctx_free(&c);
        free(a);
        free(b);
        free(y);
        free(o);
    }
}

int main(void) {
    t_seed();
    printf("detected level: %s\n", dp_isa_name(dp_cpu_isa_detect()));
    test_xq();
    int levels = 0;
    for (int isa = 0; isa < DP_ISA_COUNT; isa++) {
        const dp_cpu_kernels *kt = dp_cpu_kernels_for((dp_isa)isa);
        if (!kt) {
            printf("level %s: not supported by this CPU, skipped\n", dp_isa_name((dp_isa)isa));
            continue;
        }
        levels++;
        int before = t_failures;
        test_matvec_dequant(kt);
        test_matvec_q(kt);
        test_matvec_q_rows(kt);
        test_gemm(kt);
        test_iweights(kt);
        test_int_bound(kt);
        test_matmul(kt);
        test_vector_ops(kt);
        printf("level %s: %s\n", kt->name, t_failures == before ? "ok" : "FAILED");
    }
    CHECK(levels >= 1);
    CHECK(dp_cpu_kernels_for(DP_ISA_SCALAR) != NULL);
    return t_done("test_cpu_kernels");
}
