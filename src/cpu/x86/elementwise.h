/* Element-wise kernels and reductions over float vectors: dot, axpy, wsum, scale,
 * the softmax's exp and sum, the gated activations and the RMS norm's sum of
 * squares. */
#ifndef DP_CPU_X86_ELEMENTWISE_H
#define DP_CPU_X86_ELEMENTWISE_H

#include "vec.h"

static float dot(const float *a, const float *b, int64_t n) {
    vf s0 = vzero(), s1 = vzero();
    int64_t k = 0;
    for (; k + 2 * KVL <= n; k += 2 * KVL) {
        s0 = vfma(vload(a + k), vload(b + k), s0);
        s1 = vfma(vload(a + k + KVL), vload(b + k + KVL), s1);
    }
    for (; k + KVL <= n; k += KVL) s0 = vfma(vload(a + k), vload(b + k), s0);
    float s = vhsum(vadd(s0, s1));
    for (; k < n; k++) s += a[k] * b[k];
    return s;
}

static void axpy(float *y, float a, const float *x, int64_t n) {
    vf va = vset1(a);
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) vstore(y + k, vfma(va, vload(x + k), vload(y + k)));
    for (; k < n; k++) y[k] += a * x[k];
}

/* element i of x (float32, or f16 when XH: an f16 KV cache's values) */
ALWAYS vf xvec(const void *x, const int XH, int64_t i) {
    return XH ? load_f16((const uint8_t *)x + 2 * i) : vload((const float *)x + i);
}
ALWAYS float xval(const void *x, const int XH, int64_t i) {
    return XH ? h2f((const uint8_t *)x + 2 * i) : ((const float *)x)[i];
}

/* Rows h0..h0+H-1 of wsum over 4 vectors of columns from k: each row of
 * x loaded once for the H rows of y. */
ALWAYS void wsum_tile(float *y, int64_t ys, int h0, const int H, const float *w, int64_t ws, const void *x,
                      const int XH, int64_t xs, int nx, int64_t k) {
    vf a[4][4];
    UNROLL for (int h = 0; h < H; h++) UNROLL for (int c = 0; c < 4; c++)
        a[h][c] = vload(y + (h0 + h) * ys + k + c * KVL);
    for (int r = 0; r < nx; r++) {
        vf xv[4];
        UNROLL for (int c = 0; c < 4; c++) xv[c] = xvec(x, XH, r * xs + k + c * KVL);
        UNROLL for (int h = 0; h < H; h++) {
            const vf va = vset1(w[(h0 + h) * ws + r]);
            UNROLL for (int c = 0; c < 4; c++) a[h][c] = vfma(va, xv[c], a[h][c]);
        }
    }
    UNROLL for (int h = 0; h < H; h++) UNROLL for (int c = 0; c < 4; c++)
        vstore(y + (h0 + h) * ys + k + c * KVL, a[h][c]);
}

/* y[h][k] += sum over rows r of w[h][r] x[r][k], h < ny, k < n, rows in
 * order: per element the operations of an axpy per row and h, with the
 * sums kept in registers across the rows (4 vectors of columns and up to 4
 * rows of y at a time, so that each loaded row of x feeds 4 rows of y) */
ALWAYS void wsum_rows(float *y, int64_t ys, int ny, const float *w, int64_t ws, const void *x, const int XH,
                      int64_t xs, int nx, int64_t n) {
    int64_t k = 0;
    for (; k + 4 * KVL <= n; k += 4 * KVL) {
        int h = 0;
        for (; h + 4 <= ny; h += 4) wsum_tile(y, ys, h, 4, w, ws, x, XH, xs, nx, k);
        for (; h < ny; h++) wsum_tile(y, ys, h, 1, w, ws, x, XH, xs, nx, k);
    }
    for (; k + KVL <= n; k += KVL)
        for (int h = 0; h < ny; h++) {
            vf a0 = vload(y + h * ys + k);
            for (int r = 0; r < nx; r++) a0 = vfma(vset1(w[h * ws + r]), xvec(x, XH, r * xs + k), a0);
            vstore(y + h * ys + k, a0);
        }
    for (; k < n; k++)
        for (int h = 0; h < ny; h++)
            for (int r = 0; r < nx; r++) {
                float a = w[h * ws + r];
                y[h * ys + k] += a * xval(x, XH, r * xs + k);
            }
}

static void wsum(float *y, int64_t ys, int ny, const float *w, int64_t ws, const float *x, int64_t xs, int nx,
                 int64_t n) {
    wsum_rows(y, ys, ny, w, ws, x, 0, xs, nx, n);
}

static void wsum_x16(float *y, int64_t ys, int ny, const float *w, int64_t ws, const uint16_t *x, int64_t xs, int nx,
                     int64_t n) {
    wsum_rows(y, ys, ny, w, ws, x, 1, xs, nx, n);
}

static void scale(float *y, float a, int64_t n) {
    vf va = vset1(a);
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) vstore(y + k, vmul(va, vload(y + k)));
    for (; k < n; k++) y[k] *= a;
}

/* exp(x) to about 1 ulp: x = n ln2 + r, |r| <= ln2/2, a degree-7 polynomial
 * (Cephes expf's coefficients) for exp(r), then the exponent bits. Inputs
 * are clamped to [-87, 88] (results below 2^-126 come out as about 1.6e-38
 * times a power of two, never denormal garbage). */
ALWAYS vf vexp(vf x) {
    x = vmax(vmin(x, vset1(88.0f)), vset1(-87.0f));
    vf n = vround(vmul(x, vset1(1.44269504088896341f)));
    vf r = vfma(n, vset1(-0.693359375f), x);
    r = vfma(n, vset1(2.12194440e-4f), r);
    vf p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
    return vmul(p, vpow2i(n));
}


/* four running maxima (a scalar loop waits on each comparison); max_ps
 * returns its second operand when the first is NaN, so NaN are skipped as
 * by the portable loop */
static float maxv(const float *x, int64_t n) {
    vf m0 = vset1(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
    int64_t k = 0;
    for (; k + 4 * KVL <= n; k += 4 * KVL) {
        m0 = vmax(vload(x + k), m0);
        m1 = vmax(vload(x + k + KVL), m1);
        m2 = vmax(vload(x + k + 2 * KVL), m2);
        m3 = vmax(vload(x + k + 3 * KVL), m3);
    }
    for (; k + KVL <= n; k += KVL) m0 = vmax(vload(x + k), m0);
    float t[KVL], m = -INFINITY;
    vstore(t, vmax(vmax(m0, m1), vmax(m2, m3)));
    for (int i = 0; i < KVL; i++) m = t[i] > m ? t[i] : m;
    for (; k < n; k++) m = x[k] > m ? x[k] : m;
    return m;
}

static double exp_sum(float *x, float max, int64_t n) {
    vd s = vdzero();
    vf nm = vset1(-max);
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) {
        vf e = vexp(vadd(vload(x + k), nm));
        vstore(x + k, e);
        s = vdadd(s, vdadd(vcvt_lo_pd(e), vcvt_hi_pd(e)));
    }
    double sum = vdhsum(s);
    if (k < n) {
        float t[KVL];
        for (int i = 0; i < KVL; i++) t[i] = k + i < n ? x[k + i] - max : -INFINITY;
        vstore(t, vexp(vload(t)));
        for (int64_t i = 0; k + i < n; i++) {
            x[k + i] = t[i];
            sum += t[i];
        }
    }
    return sum;
}

/* g * sigmoid(t) * up */
ALWAYS vf sig_mul(vf g, vf t, vf up) { return vdiv(vmul(g, up), vadd(vset1(1.0f), vexp(vmul(t, vset1(-1.0f))))); }

/* Element-wise kernels: whole vectors, then the tail as one zero-padded
 * vector (activations run on short row slices of the fused matmul). */
#define TAIL(n, k, BODY)                                                                                         \
    if (k < n) {                                                                                                 \
        float tg[KVL] = {0}, tu[KVL] = {0}, to[KVL];                                                             \
        memcpy(tg, gate + k, sizeof(float) * (size_t)(n - k));                                                   \
        memcpy(tu, up + k, sizeof(float) * (size_t)(n - k));                                                     \
        vf g = vload(tg), u = vload(tu);                                                                         \
        vstore(to, BODY);                                                                                        \
        memcpy(out + k, to, sizeof(float) * (size_t)(n - k));                                                    \
    }

static void silu_mul(float *out, const float *gate, const float *up, int64_t n) {
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) {
        vf g = vload(gate + k);
        vstore(out + k, sig_mul(g, g, vload(up + k)));
    }
    TAIL(n, k, sig_mul(g, g, u))
}

/* 0.5 g (1 + tanh(u)) = g sigmoid(2u), u = sqrt(2/pi) (g + 0.044715 g^3) */
#define GELU_T(g) vmul(vset1(2.0f * 0.7978845608028654f), vfma(vmul(vset1(0.044715f), g), vmul(g, g), g))
static void gelu_mul(float *out, const float *gate, const float *up, int64_t n) {
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) {
        vf g = vload(gate + k);
        vstore(out + k, sig_mul(g, GELU_T(g), vload(up + k)));
    }
    TAIL(n, k, sig_mul(g, GELU_T(g), u))
}

static double sumsq(const float *x, int64_t n) {
    vd s0 = vdzero(), s1 = vdzero();
    int64_t k = 0;
    for (; k + KVL <= n; k += KVL) {
        vf v = vload(x + k);
        vd lo = vcvt_lo_pd(v), hi = vcvt_hi_pd(v);
        s0 = vdfma(lo, lo, s0);
        s1 = vdfma(hi, hi, s1);
    }
    double s = vdhsum(vdadd(s0, s1));
    for (; k < n; k++) s += (double)x[k] * x[k];
    return s;
}

#endif
