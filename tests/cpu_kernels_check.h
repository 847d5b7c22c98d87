/* What test_cpu_kernels.c and test_cpu_kernels_iq.c share: a weight matrix
 * beside its reference dequantisation, the double-precision reference
 * product, the closeness rule, and the check of cpu_matmul across thread
 * counts. Each file fills its matrices its own way (quantised random rows;
 * random valid IQ blocks) with its own wmat_make. */
#ifndef DP_TESTS_CPU_KERNELS_CHECK_H
#define DP_TESTS_CPU_KERNELS_CHECK_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "quant.h"
#include "testlib.h"

typedef struct {
  int type, rows, K;
  uint8_t *q; /* quantised rows */
  float *deq; /* reference dequantisation */
  size_t row_bytes;
} wmat;

static inline void wmat_free(wmat *m) {
  free(m->q);
  free(m->deq);
}

/* |got - ref| <= tol * sum |w x| (plus a tiny absolute floor) */
static inline int close_to(double got, double ref, double mag, double tol) {
  return fabs(got - ref) <= tol * mag + 1e-30;
}

/* ref[p rows + r] = row r of m times position p of x in double precision;
 * mag the sum of the products' magnitudes (the scale of the tolerance) */
static inline void ref_out(const wmat *m, const float *x, int n, double *ref,
                           double *mag) {
  for (int p = 0; p < n; p++)
    for (int r = 0; r < m->rows; r++) {
      double s = 0, a = 0;
      for (int k = 0; k < m->K; k++) {
        double t =
            (double)m->deq[(size_t)r * m->K + k] * x[(size_t)p * m->K + k];
        s += t;
        a += fabs(t);
      }
      ref[(size_t)p * m->rows + r] = s;
      mag[(size_t)p * m->rows + r] = a;
    }
}

/* out[0..n) against ref within tol of mag; the count of misses (the first
 * reported) */
static inline int count_off(const char *what, const dp_cpu_kernels *kt,
                            const wmat *m, const float *out, const double *ref,
                            const double *mag, int n, double tol) {
  int bad = 0;
  for (int i = 0; i < n; i++)
    if (!close_to(out[i], ref[i], mag[i], tol)) {
      if (!bad)
        fprintf(stderr, "%s %s %s K=%d rows=%d [%d]: %.9g vs %.9g (mag %.3g)\n",
                kt->name, dp_type_name(m->type), what, m->K, m->rows, i, out[i],
                ref[i], mag[i]);
      bad++;
    }
  return bad;
}

/* cpu_matmul of m over the n positions of x at 1, 2, 3 and 7 threads
 * (int_path: with the integer activations): every output within 2e-6 of
 * ref relative to mag, and the same bits at every thread count. */
static inline void check_matmul(const dp_cpu_kernels *kt, const wmat *m,
                                const float *x, int n, int int_path,
                                const double *ref, const double *mag) {
  static const int threads[] = {1, 2, 3, 7};
  const dp_weight w = {.name = "w",
                       .data = m->q,
                       .type = m->type,
                       .cols = m->K,
                       .rows = m->rows,
                       .row_bytes = m->row_bytes,
                       .nbytes = m->row_bytes * (size_t)m->rows};
  const size_t nout = (size_t)n * m->rows;
  float *first = malloc(sizeof(float) * nout),
        *out = malloc(sizeof(float) * nout);
  for (size_t tt = 0; tt < sizeof threads / sizeof threads[0]; tt++) {
    cpu_ctx c;
    CHECK(cpu_ctx_init(&c, threads[tt], m->K, 16, 1, 1, kt) == 0);
    c.act_int = int_path;
    for (size_t i = 0; i < nout; i++)
      out[i] = NAN;
    cpu_matmul(&c, &w, x, n, out);
    char what[48];
    snprintf(what, sizeof what, "matmul n=%d threads=%d", n, threads[tt]);
    const int bad = count_off(what, kt, m, out, ref, mag, (int)nout, 2e-6);
    CHECKF(bad == 0, "%s %s %s: %d wrong", kt->name, dp_type_name(m->type),
           what, bad);
    if (tt == 0)
      memcpy(first, out, sizeof(float) * nout);
    else
      CHECKF(memcmp(first, out, sizeof(float) * nout) == 0,
             "%s %s matmul n=%d: %d threads differ from 1", kt->name,
             dp_type_name(m->type), n, threads[tt]);
    cpu_ctx_free(&c);
  }
  free(first);
  free(out);
}

#endif
