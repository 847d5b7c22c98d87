/* doppler verify: per-op checks of the CUDA kernels against the CPU on fresh
 * random inputs (a new seed per run unless given).
 *
 *  - dequantisation of every format: bit-identical to dp_dequantize_row;
 *  - matrix-vector products (plain, with the fused RMSNorm and bias, the
 *    residual add, gate/up with both activations, several matrices in one
 *    launch, the fused argmax) and the prefill GEMM: relative L2 distance to
 *    a float64 reference on the same weights <= 1e-3;
 *  - attention (decode with one and many key splits, sliding windows,
 *    prefill, GQA shapes) and its softmax weights against cpu_attention on
 *    the same f16-rounded cache: rel-L2 <= 1e-3;
 *  - RMSNorm, q/k norm + RoPE in both styles, the gated activations:
 *    rel-L2 <= 1e-5 against src/cpu/ops.c;
 *  - the argmax with ties against the CPU's first maximum.
 * Every output buffer is poisoned with NaN before the kernel runs, so an
 * unwritten element fails the check. Optionally (flag 1) it also measures
 * the device copy bandwidth and each format's matvec bandwidth. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.cuh"

extern "C" {
#include "../cpu/ops.h"
#include "../sampler.h"
}

namespace {

/* AttnLaunch.gqa of the attention checks: -1 k_attn_split, 1 k_attn_gqa where it applies */
int g_gqa = -1;
const char *slice_kernel(int slices) {
    return slices > 1 && g_gqa > 0 ? (dp_cu_attn_gqa_spin(-1) ? "k_attn_gqa" : "k_attn_gqa, last slice combines")
                                   : "k_attn_split";
}

struct Rng {
    uint64_t s;
    uint64_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return s;
    }
    double unit() { return (double)(next() >> 11) * (1.0 / 9007199254740992.0); }
    float normal() {
        double u1 = unit(), u2 = unit();
        if (u1 < 1e-300) u1 = 1e-300;
        return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
};

struct Ctx {
    FILE *out;
    Rng rng;
    int fails, checks;
    cudaStream_t st;
    cpu_ctx cpu; /* the CPU ops the kernels are compared with */
};

void report(Ctx *c, int ok, const char *what, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
void report(Ctx *c, int ok, const char *what, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->checks++;
    if (!ok) c->fails++;
    fprintf(c->out, "%s %-44s %s\n", ok ? "PASS" : "FAIL", what, msg);
    fflush(c->out);
}

double rel_l2(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (!(num == num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

double rel_l2f(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (!(num == num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

uint16_t rand_scale(Rng &r, float lo, float hi, int allow_neg) {
    float f = lo + (hi - lo) * (float)r.unit();
    if (allow_neg && (r.next() & 1)) f = -f;
    return dp_f32_to_fp16(f);
}

/* A random matrix of type in the file layout: random quant bytes, sane f16
 * scales (so no Inf/NaN), normal floats for the float types. */
uint8_t *random_matrix(Rng &r, int type, int rows, int cols) {
    const dp_type_traits *t = dp_type_get(type);
    size_t rb = dp_row_size(type, cols), nb = (size_t)rows * (cols / t->block_size);
    uint8_t *p = (uint8_t *)malloc((size_t)rows * rb);
    if (type == DP_TYPE_F32) {
        float *f = (float *)p;
        for (size_t i = 0; i < (size_t)rows * cols; i++) f[i] = r.normal();
        return p;
    }
    if (type == DP_TYPE_F16 || type == DP_TYPE_BF16) {
        uint16_t *h = (uint16_t *)p;
        for (size_t i = 0; i < (size_t)rows * cols; i++)
            h[i] = type == DP_TYPE_F16 ? dp_f32_to_fp16(r.normal()) : dp_f32_to_bf16(r.normal());
        return p;
    }
    for (size_t i = 0; i < (size_t)rows * rb; i++) p[i] = (uint8_t)r.next();
    for (size_t b = 0; b < nb; b++) {
        uint8_t *blk = p + b * t->type_size;
        uint16_t d = rand_scale(r, 0.002f, 0.02f, 1), m = rand_scale(r, 0.002f, 0.02f, 1);
        switch (type) {
        case DP_TYPE_Q4_0: case DP_TYPE_Q5_0: case DP_TYPE_Q8_0: memcpy(blk, &d, 2); break;
        case DP_TYPE_Q4_1: case DP_TYPE_Q5_1: case DP_TYPE_Q4_K: case DP_TYPE_Q5_K:
            memcpy(blk, &d, 2);
            memcpy(blk + 2, &m, 2);
            break;
        case DP_TYPE_Q2_K: memcpy(blk + 80, &d, 2); memcpy(blk + 82, &m, 2); break;
        case DP_TYPE_Q3_K: memcpy(blk + 108, &d, 2); break;
        case DP_TYPE_Q6_K: memcpy(blk + 208, &d, 2); break;
        }
    }
    return p;
}

template <typename T> T *dalloc(size_t n) {
    T *p = NULL;
    if (cudaMalloc((void **)&p, n * sizeof(T) + 16) != cudaSuccess) return NULL;
    cudaMemset(p, 0xFF, n * sizeof(T)); /* NaN poison */
    return p;
}

template <typename T> void upload(T *d, const T *h, size_t n) { cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice); }
template <typename T> void download(T *h, const T *d, size_t n) { cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost); }

struct Mat {
    int type, rows, cols;
    uint8_t *host;
    float *deq; /* rows x cols, CPU dequantised */
    DMat dev;
    void *alloc;
};

int make_mat(Ctx *c, Mat *m, int type, int rows, int cols) {
    m->type = type, m->rows = rows, m->cols = cols;
    m->host = random_matrix(c->rng, type, rows, cols);
    m->deq = (float *)malloc(sizeof(float) * (size_t)rows * cols);
    size_t rb = dp_row_size(type, cols);
    for (int r = 0; r < rows; r++) dp_dequantize_row(type, m->host + r * rb, m->deq + (size_t)r * cols, cols);
    return dp_cu_upload_matrix(m->host, type, rows, cols, &m->dev, &m->alloc);
}

void free_mat(Mat *m) {
    free(m->host);
    free(m->deq);
    if (m->alloc) cudaFree(m->alloc);
}

void ref_matvec(const Mat *m, const float *x, double *y) {
    for (int r = 0; r < m->rows; r++) {
        double s = 0;
        const float *w = m->deq + (size_t)r * m->cols;
        for (int k = 0; k < m->cols; k++) s += (double)w[k] * x[k];
        y[r] = s;
    }
}

const float TOL = 1e-3f, TOL_EXACT = 1e-5f;

void check_type(Ctx *c, int type, int rows, int cols) {
    char what[96];
    const char *tn = dp_type_name(type);
    Mat m, m2;
    memset(&m, 0, sizeof m);
    memset(&m2, 0, sizeof m2);
    if (make_mat(c, &m, type, rows, cols) || make_mat(c, &m2, type, rows, cols)) {
        snprintf(what, sizeof what, "upload %s %dx%d", tn, rows, cols);
        report(c, 0, what, "%s", dp_last_error());
        free_mat(&m);
        free_mat(&m2);
        return;
    }
    size_t n = (size_t)rows * cols;
    /* dequantisation: bit-exact */
    float *d_deq = dalloc<float>(n), *h = (float *)malloc(n * sizeof(float));
    dp_cu_dequant_f32(&m.dev, 0, rows, d_deq, c->st);
    cudaStreamSynchronize(c->st);
    download(h, d_deq, n);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(&h[i], &m.deq[i], 4) != 0;
    snprintf(what, sizeof what, "dequant %s %dx%d", tn, rows, cols);
    report(c, diff == 0, what, "%zu of %zu values differ from dp_dequantize_row", diff, n);
    cudaFree(d_deq);

    /* matvec: plain */
    float *x = (float *)malloc(sizeof(float) * cols), *nw = (float *)malloc(sizeof(float) * cols);
    float *bias = (float *)malloc(sizeof(float) * rows), *y0 = (float *)malloc(sizeof(float) * rows);
    double *ref = (double *)malloc(sizeof(double) * rows), *ref2 = (double *)malloc(sizeof(double) * rows);
    for (int i = 0; i < cols; i++) x[i] = c->rng.normal(), nw[i] = 1.0f + 0.2f * c->rng.normal();
    for (int i = 0; i < rows; i++) bias[i] = c->rng.normal(), y0[i] = c->rng.normal();
    float *dx = dalloc<float>(cols), *dnw = dalloc<float>(cols), *dy = dalloc<float>(rows),
          *dy2 = dalloc<float>(rows), *db = dalloc<float>(rows);
    unsigned long long *dkey = dalloc<unsigned long long>(1);
    upload(dx, x, cols);
    upload(dnw, nw, cols);
    upload(db, bias, rows);
    /* the formats of the tensor-core kernel through both decode kernels:
     * the default (k_matvec_w; DOPPLER_CUDA_MVT=1: k_matvec_t) and the other */
    double *refu = (double *)malloc(sizeof(double) * rows);
    ref_matvec(&m2, x, refu);
    float *xn = (float *)malloc(sizeof(float) * cols);
    const int nk = dp_cu_matvec_t_type(type) ? 2 : 1, t_def = dp_cu_matvec_t_ok(type);
    int rc = 0, best, got;
    double e, ss;
    float sc;
    unsigned long long key;
    for (int kern = 0; kern < nk; kern++) {
        const char *kt = !kern ? "" : t_def ? " (k_matvec_w)" : " (k_matvec_t)";
        dp_cu_matvec_t_set(kern ? !t_def : -1);
        MvLaunch L;
        memset(&L, 0, sizeof L);
        L.job[0] = {m.dev, dy, NULL};
        L.njobs = 1;
        L.x = dx;
        L.cols = cols;
        L.mode = MV_STORE;
        L.argmax_key = dkey;
        cudaMemset(dkey, 0, 8);
        rc = dp_cu_matvec(&L, c->st);
        cudaStreamSynchronize(c->st);
        download(h, dy, rows);
        ref_matvec(&m, x, ref);
        e = rc ? INFINITY : rel_l2(h, ref, rows);
        snprintf(what, sizeof what, "matvec %s %dx%d%s", tn, rows, cols, kt);
        report(c, e <= TOL, what, "rel-L2 %.2e (limit %.0e)%s%s", e, TOL, rc ? ": " : "", rc ? dp_last_error() : "");
        /* fused argmax: the index of the largest output, lowest on ties */
        key = 0;
        download(&key, dkey, 1);
        best = 0;
        for (int i = 1; i < rows; i++)
            if (h[i] > h[best]) best = i;
        got = key_token(key);
        snprintf(what, sizeof what, "matvec+argmax %s%s", tn, kt);
        report(c, got == best, what, "device %d, first maximum of its output %d", got, best);

        /* RMSNorm prologue + bias */
        ss = 0;
        for (int i = 0; i < cols; i++) ss += (double)x[i] * x[i];
        sc = 1.0f / sqrtf((float)(ss / cols) + 1e-6f);
            for (int i = 0; i < cols; i++) xn[i] = x[i] * sc * (nw[i] + 0.0f);
        ref_matvec(&m, xn, ref2);
        for (int i = 0; i < rows; i++) ref2[i] += bias[i];
        L.job[0] = {m.dev, dy, db};
        L.norm_w = dnw;
        L.eps = 1e-6f;
        L.argmax_key = NULL;
        rc = dp_cu_matvec(&L, c->st);
        cudaStreamSynchronize(c->st);
        download(h, dy, rows);
        e = rc ? INFINITY : rel_l2(h, ref2, rows);
        snprintf(what, sizeof what, "matvec+norm+bias %s%s", tn, kt);
        report(c, e <= TOL, what, "rel-L2 %.2e", e);

        /* residual add */
        upload(dy, y0, rows);
        L.job[0] = {m.dev, dy, NULL};
        L.norm_w = NULL;
        L.mode = MV_ADD;
        rc = dp_cu_matvec(&L, c->st);
        cudaStreamSynchronize(c->st);
        download(h, dy, rows);
        for (int i = 0; i < rows; i++) ref2[i] = ref[i] + y0[i];
        e = rc ? INFINITY : rel_l2(h, ref2, rows);
        snprintf(what, sizeof what, "matvec+add %s%s", tn, kt);
        report(c, e <= TOL, what, "rel-L2 %.2e", e);

        /* gate/up with both activations */
        for (int act = 0; act < 2; act++) {
            cudaMemset(dy, 0xFF, rows * 4);
            L.job[0] = {m.dev, dy, NULL};
            L.job[1] = {m2.dev, dy2, NULL};
            L.njobs = 2;
            L.mode = MV_GATEUP;
            L.act = act;
            rc = dp_cu_matvec(&L, c->st);
            cudaStreamSynchronize(c->st);
            download(h, dy, rows);
            for (int i = 0; i < rows; i++) {
                double g = ref[i], u = refu[i];
                ref2[i] = act == DP_ACT_GELU_TANH ? 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u
                                                  : g / (1.0 + exp(-g)) * u;
            }
            e = rc ? INFINITY : rel_l2(h, ref2, rows);
            snprintf(what, sizeof what, "matvec gate/up %s %s%s", act ? "gelu" : "silu", tn, kt);
            report(c, e <= TOL, what, "rel-L2 %.2e", e);
        }
    }
    dp_cu_matvec_t_set(-1);

    /* prefill GEMM: f16 operands, f32 accumulation */
    {
        const int nt = 5;
        cublasHandle_t hb = dp_cu_blas_create();
        __half *x16 = dalloc<__half>((size_t)nt * cols), *w16 = dalloc<__half>((size_t)rows * cols / 2 + cols);
        float *xs = (float *)malloc(sizeof(float) * nt * cols), *dys = dalloc<float>((size_t)nt * rows);
        float *d_xs = dalloc<float>((size_t)nt * cols), *ys = (float *)malloc(sizeof(float) * nt * rows);
        double *refs = (double *)malloc(sizeof(double) * nt * rows);
        for (int i = 0; i < nt * cols; i++) xs[i] = c->rng.normal();
        upload(d_xs, xs, (size_t)nt * cols);
        dp_cu_to_f16(x16, d_xs, (long long)nt * cols, c->st);
        /* a scratch of half the matrix forces two row chunks */
        rc = dp_cu_gemm(hb, &m.dev, x16, nt, dys, rows, 0.0f, w16, (size_t)rows * cols / 2 + cols, c->st);
        cudaStreamSynchronize(c->st);
        download(ys, dys, (size_t)nt * rows);
        for (int t = 0; t < nt; t++) ref_matvec(&m, xs + (size_t)t * cols, refs + (size_t)t * rows);
        e = rc ? INFINITY : rel_l2(ys, refs, (size_t)nt * rows);
        snprintf(what, sizeof what, "gemm f16 %s %dx%dx%d", tn, rows, nt, cols);
        report(c, e <= TOL, what, "rel-L2 %.2e (f16 operands)%s%s", e, rc ? ": " : "", rc ? dp_last_error() : "");
        dp_cu_blas_destroy(hb);
        cudaFree(x16), cudaFree(w16), cudaFree(dys), cudaFree(d_xs);
        free(xs), free(ys), free(refs);
    }

    cudaFree(dx), cudaFree(dnw), cudaFree(dy), cudaFree(dy2), cudaFree(db), cudaFree(dkey);
    free(x), free(nw), free(bias), free(y0), free(ref), free(ref2), free(refu), free(xn), free(h);
    free_mat(&m);
    free_mat(&m2);
}

/* Three matrices of different formats in one launch (the QKV projection):
 * any formats (k_matvec_w's W_ANY), or the Q4_K_M mix of Q4_K beside Q6_K
 * (W_KM). */
void check_multi(Ctx *c, const int *types) {
    const int cols = 768, rows[3] = {256, 64, 96};
    Mat m[3];
    memset(m, 0, sizeof m);
    int ok = 1;
    for (int j = 0; j < 3; j++) ok &= make_mat(c, &m[j], types[j], rows[j], cols) == 0;
    float *x = (float *)malloc(sizeof(float) * cols);
    for (int i = 0; i < cols; i++) x[i] = c->rng.normal();
    float *dx = dalloc<float>(cols), *dy[3];
    upload(dx, x, cols);
    MvLaunch L;
    memset(&L, 0, sizeof L);
    for (int j = 0; j < 3; j++) {
        dy[j] = dalloc<float>(rows[j]);
        L.job[j] = {m[j].dev, dy[j], NULL};
    }
    L.njobs = 3;
    L.x = dx;
    L.cols = cols;
    L.mode = MV_STORE;
    int rc = ok ? dp_cu_matvec(&L, c->st) : -1;
    cudaStreamSynchronize(c->st);
    double worst = 0;
    for (int j = 0; j < 3; j++) {
        float *h = (float *)malloc(sizeof(float) * rows[j]);
        double *ref = (double *)malloc(sizeof(double) * rows[j]);
        download(h, dy[j], rows[j]);
        ref_matvec(&m[j], x, ref);
        double e = rel_l2(h, ref, rows[j]);
        if (!(e <= worst)) worst = e;
        free(h), free(ref);
        cudaFree(dy[j]);
        free_mat(&m[j]);
    }
    if (rc) worst = INFINITY;
    char what[96];
    snprintf(what, sizeof what, "matvec 3 jobs %s+%s+%s", dp_type_name(types[0]), dp_type_name(types[1]),
             dp_type_name(types[2]));
    report(c, worst <= TOL, what, "worst rel-L2 %.2e", worst);
    cudaFree(dx);
    free(x);
}


/* The decode FFN chain of the integer path: gate/up (fused activation) quantise
 * their output (xq_out), the down matvec takes it (xq_in); the down output
 * against float64 on the exact activations. */
void check_qchain(Ctx *c, int tgu, int tdown, int E, int F) {
    char what[128];
    Mat g, u, dn;
    memset(&g, 0, sizeof g), memset(&u, 0, sizeof u), memset(&dn, 0, sizeof dn);
    snprintf(what, sizeof what, "gate/up %s -> quantised -> down %s %dx%d", dp_type_name(tgu), dp_type_name(tdown), E, F);
    if (!dp_cu_matvec_q_ok(tgu) || !dp_cu_matvec_q_ok(tdown)) {
        report(c, 1, what, "skipped: the integer path is off");
        return;
    }
    if (make_mat(c, &g, tgu, F, E) || make_mat(c, &u, tgu, F, E) || make_mat(c, &dn, tdown, E, F)) {
        report(c, 0, what, "upload: %s", dp_last_error());
        free_mat(&g), free_mat(&u), free_mat(&dn);
        return;
    }
    float *x = (float *)malloc(sizeof(float) * E), *act = (float *)malloc(sizeof(float) * F);
    double *rg = (double *)malloc(sizeof(double) * F), *ru = (double *)malloc(sizeof(double) * F);
    double *ra = (double *)malloc(sizeof(double) * F), *ry = (double *)malloc(sizeof(double) * E);
    for (int i = 0; i < E; i++) x[i] = c->rng.normal();
    ref_matvec(&g, x, rg);
    ref_matvec(&u, x, ru);
    for (int i = 0; i < F; i++) ra[i] = rg[i] / (1.0 + exp(-rg[i])) * ru[i], act[i] = (float)ra[i];
    for (int r = 0; r < E; r++) {
        double sum = 0;
        for (int k = 0; k < F; k++) sum += (double)dn.deq[(size_t)r * F + k] * ra[k];
        ry[r] = sum;
    }
    float *dx = dalloc<float>(E), *da = dalloc<float>(F), *du = dalloc<float>(F), *dy = dalloc<float>(E);
    QXBuf q;
    q.piece = dalloc<uint2>(F / 4), q.dx = dalloc<float>(F / 32), q.isum = dalloc<int>(F / 16);
    upload(dx, x, E);
    MvLaunch L;
    memset(&L, 0, sizeof L);
    L.job[0] = {g.dev, da, NULL};
    L.job[1] = {u.dev, du, NULL};
    L.njobs = 2, L.x = dx, L.cols = E, L.mode = MV_GATEUP, L.act = DP_ACT_SILU;
    L.xq_out = q;
    int rc = dp_cu_matvec(&L, c->st);
    memset(&L, 0, sizeof L);
    L.job[0] = {dn.dev, dy, NULL};
    L.njobs = 1, L.x = NULL, L.cols = F, L.mode = MV_STORE, L.xq_in = q;
    if (!rc) rc = dp_cu_matvec(&L, c->st);
    cudaStreamSynchronize(c->st);
    float *ha = (float *)malloc(sizeof(float) * F), *hy = (float *)malloc(sizeof(float) * E);
    download(ha, da, F);
    download(hy, dy, E);
    const double ea = rc ? INFINITY : rel_l2(ha, ra, F), ey = rc ? INFINITY : rel_l2(hy, ry, E);
    report(c, ea <= TOL && ey <= TOL, what, "activation rel-L2 %.2e, down rel-L2 %.2e%s%s", ea, ey, rc ? ": " : "",
           rc ? dp_last_error() : "");
    cudaFree(dx), cudaFree(da), cudaFree(du), cudaFree(dy), cudaFree(q.piece), cudaFree(q.dx), cudaFree(q.isum);
    free(x), free(act), free(rg), free(ru), free(ra), free(ry), free(ha), free(hy);
    free_mat(&g), free_mat(&u), free_mat(&dn);
}

/* Decode attention with the q/k norm, RoPE and the K/V store fused in,
 * against the CPU doing them first (cpu_rmsnorm, cpu_rope, f16 cache). */
void check_attention_rope(Ctx *c, int NH, int NKV, int HD, int pos0, int window, int qk_norm, int neox, int n_rot,
                          int splits, int min_keys, int slices) {
    char what[128];
    const int Q = NH * HD, KV = NKV * HD, n_kv = pos0 + 1;
    const size_t cache = (size_t)n_kv * KV;
    float *q = (float *)malloc(sizeof(float) * Q), *k = (float *)malloc(sizeof(float) * KV),
          *v = (float *)malloc(sizeof(float) * KV), *qw = (float *)malloc(sizeof(float) * HD),
          *kw = (float *)malloc(sizeof(float) * HD), *inv = (float *)malloc(sizeof(float) * n_rot / 2);
    float *kf = (float *)malloc(sizeof(float) * cache), *vf = (float *)malloc(sizeof(float) * cache);
    uint16_t *kh = (uint16_t *)malloc(2 * cache), *vh = (uint16_t *)malloc(2 * cache);
    for (int i = 0; i < Q; i++) q[i] = c->rng.normal();
    for (int i = 0; i < KV; i++) k[i] = c->rng.normal(), v[i] = c->rng.normal();
    for (int i = 0; i < HD; i++) qw[i] = 0.2f * c->rng.normal(), kw[i] = 0.2f * c->rng.normal();
    for (int i = 0; i < n_rot / 2; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)n_rot);
    for (size_t i = 0; i < cache; i++) {
        kh[i] = dp_f32_to_fp16(c->rng.normal()), vh[i] = dp_f32_to_fp16(c->rng.normal());
        kf[i] = dp_fp16_to_f32(kh[i]), vf[i] = dp_fp16_to_f32(vh[i]);
    }
    float *dq = dalloc<float>(Q), *dk = dalloc<float>(KV), *dv = dalloc<float>(KV), *dout = dalloc<float>(Q);
    float *dqw = dalloc<float>(HD), *dkw = dalloc<float>(HD), *dinv = dalloc<float>(n_rot / 2);
    __half *kc = dalloc<__half>(cache), *vc = dalloc<__half>(cache);
    int *dpos = dalloc<int>(1), *dcnt = dalloc<int>(NH);
    float *dpart = dalloc<float>((size_t)NH * splits * (HD + 2));
    upload(dq, q, Q), upload(dk, k, KV), upload(dv, v, KV), upload(dqw, qw, HD), upload(dkw, kw, HD);
    upload(dinv, inv, n_rot / 2), upload(dpos, &pos0, 1);
    cudaMemcpy(kc, kh, 2 * cache, cudaMemcpyHostToDevice); /* row pos0 holds junk until the kernel stores it */
    cudaMemcpy(vc, vh, 2 * cache, cudaMemcpyHostToDevice);
    cudaMemset(dcnt, 0, sizeof(int) * NH);
    AttnLaunch A;
    memset(&A, 0, sizeof A);
    A.q = dq, A.out = dout, A.k = kc, A.v = vc, A.pos0 = dpos, A.n = 1, A.n_head = NH, A.n_head_kv = NKV;
    A.head_dim = HD, A.window = window, A.scale = 1.0f / sqrtf((float)HD), A.splits = splits;
    A.min_keys = min_keys, A.part = dpart, A.counters = dcnt;
    A.rope = 1, A.kf = dk, A.vf = dv, A.norm_off = 1.0f, A.eps = 1e-6f, A.inv_freq = dinv;
    A.n_rot = n_rot, A.neox = neox;
    if (qk_norm) A.q_norm = dqw, A.k_norm = dkw;
    A.slices = slices, A.gqa = g_gqa;
    int rc = dp_cu_attention(&A, c->st);
    cudaStreamSynchronize(c->st);
    /* the CPU: norm (weights + 1), rope, f16 store, attention */
    if (qk_norm) {
        cpu_rmsnorm(&c->cpu, q, q, qw, 1.0f, NH, HD, 1e-6f);
        cpu_rmsnorm(&c->cpu, k, k, kw, 1.0f, NKV, HD, 1e-6f);
    }
    for (int h = 0; h < NH; h++) cpu_rope(q + h * HD, n_rot, inv, (float)pos0, (dp_rope_style)neox);
    for (int h = 0; h < NKV; h++) cpu_rope(k + h * HD, n_rot, inv, (float)pos0, (dp_rope_style)neox);
    for (int i = 0; i < KV; i++) {
        kf[(size_t)pos0 * KV + i] = dp_fp16_to_f32(dp_f32_to_fp16(k[i]));
        vf[(size_t)pos0 * KV + i] = dp_fp16_to_f32(dp_f32_to_fp16(v[i]));
    }
    float *ref = (float *)malloc(sizeof(float) * Q), *h = (float *)malloc(sizeof(float) * Q);
    /* the CPU reference keeps V transposed, [kv_dim][n_ctx of its context] */
    float *vt = (float *)malloc(sizeof(float) * (size_t)KV * c->cpu.n_ctx);
    cpu_store_vt(vt, vf, n_kv, 0, KV, c->cpu.n_ctx);
    cpu_attention(&c->cpu, ref, q, kf, vt, 1, pos0, NH, NKV, HD, window, 1.0f / sqrtf((float)HD), 0, NULL);
    free(vt);
    download(h, dout, Q);
    double e = rc ? INFINITY : rel_l2f(h, ref, Q);
    /* the cache row: k as stored vs the CPU's roped k; v exactly */
    uint16_t *row = (uint16_t *)malloc(2 * KV);
    float *rk = (float *)malloc(sizeof(float) * KV);
    cudaMemcpy(row, kc + (size_t)pos0 * KV, 2 * KV, cudaMemcpyDeviceToHost);
    for (int i = 0; i < KV; i++) rk[i] = dp_fp16_to_f32(row[i]);
    double ek = rel_l2f(rk, k, KV);
    cudaMemcpy(row, vc + (size_t)pos0 * KV, 2 * KV, cudaMemcpyDeviceToHost);
    int bad = 0;
    for (int i = 0; i < KV; i++) bad += row[i] != dp_f32_to_fp16(v[i]);
    snprintf(what, sizeof what, "attention+rope h%d/%d d%d pos%d w%d%s %s rot%d ", NH, NKV, HD, pos0, window,
             qk_norm ? " qk-norm" : "", neox ? "neox" : "adjacent", n_rot);
    if (slices) snprintf(what + strlen(what), sizeof what - strlen(what), "%s %d slices", slice_kernel(slices), slices);
    else snprintf(what + strlen(what), sizeof what - strlen(what), "s%d/%d", splits, min_keys);
    report(c, e <= TOL && ek <= TOL && bad == 0, what, "out rel-L2 %.2e, cached k rel-L2 %.2e, %d v values differ%s%s",
           e, ek, bad, rc ? ": " : "", rc ? dp_last_error() : "");
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dout), cudaFree(dqw), cudaFree(dkw), cudaFree(dinv);
    cudaFree(kc), cudaFree(vc), cudaFree(dpos), cudaFree(dcnt), cudaFree(dpart);
    free(q), free(k), free(v), free(qw), free(kw), free(inv), free(kf), free(vf), free(kh), free(vh), free(ref);
    free(h), free(row), free(rk);
}

/* Device sampling against the host sampler: twin samplers with the same
 * seed, the device one drawing its uniform first; the same token expected
 * (a difference only where the uniform falls within float rounding of a
 * boundary: then the token must be one of the host's candidates). */
void check_sampler(Ctx *c, int V) {
    struct Cfg {
        float temp, top_p, min_p, pen;
        int top_k;
    } cfg[] = {{0.8f, 0.95f, 0.05f, 1.0f, 40}, {1.0f, 1.0f, 0.0f, 1.0f, 40},  {1.5f, 0.5f, 0.0f, 1.0f, 256},
               {0.7f, 0.9f, 0.1f, 1.3f, 64},   {0.0f, 1.0f, 0.0f, 1.3f, 40},  {1.0f, 1.0f, 0.0f, 1.0f, 1},
               {2.0f, 0.99f, 0.0f, 1.1f, 200}};
    float *lg = (float *)malloc(sizeof(float) * V);
    float *dl = dalloc<float>(V);
    const int nb = dp_cu_sample_blocks(V);
    uint32_t *ck = dalloc<uint32_t>((size_t)nb * DP_SAMPLE_KMAX);
    int *ci = dalloc<int>((size_t)nb * DP_SAMPLE_KMAX), *dtok = dalloc<int>(1);
    DpSampleArgs *dsp = dalloc<DpSampleArgs>(1), hsp;
    for (size_t ic = 0; ic < sizeof cfg / sizeof cfg[0]; ic++) {
        dp_sampler_params sp;
        dp_sampler_params_default(&sp);
        sp.temp = cfg[ic].temp, sp.top_p = cfg[ic].top_p, sp.min_p = cfg[ic].min_p;
        sp.repeat_penalty = cfg[ic].pen, sp.top_k = cfg[ic].top_k, sp.seed = c->rng.next();
        dp_sampler *hs = dp_sampler_new(&sp, V), *ds = dp_sampler_new(&sp, V);
        int same = 0, near = 0, bad = 0, steps = 12;
        for (int step = 0; step < steps; step++) {
            /* logits: normal x 3, a few exact ties at the top */
            for (int i = 0; i < V; i++) lg[i] = 3.0f * c->rng.normal();
            for (int t = 0; t < 6; t++) lg[c->rng.next() % V] = 12.0f;
            upload(dl, lg, V);
            memset(&hsp, 0, sizeof hsp);
            hsp.u = sp.temp > 0 ? dp_sampler_uniform(ds) : 0.0;
            hsp.temp = sp.temp, hsp.top_p = sp.top_p, hsp.min_p = sp.min_p, hsp.penalty = sp.repeat_penalty;
            hsp.top_k = sp.temp > 0 ? sp.top_k : 1;
            const int32_t *rec;
            const int nr = sp.repeat_penalty != 1.0f ? dp_sampler_recent(ds, &rec) : 0;
            for (int i = 0; i < nr; i++) {
                int seen = 0;
                for (int j = 0; j < hsp.n_recent; j++) seen |= hsp.recent[j] == rec[i];
                if (!seen) hsp.recent[hsp.n_recent++] = rec[i];
            }
            upload(dsp, &hsp, 1);
            int rc = dp_cu_sample(dl, V, dsp, ck, ci, dtok, c->st);
            cudaStreamSynchronize(c->st);
            int dev = -1;
            download(&dev, dtok, 1);
            const int host = dp_sampler_sample(hs, lg);
            if (rc) bad++;
            else if (dev == host) same++;
            else {
                /* allowed only at a rounding boundary: the device token must be
                 * one of the top k of the penalised logits */
                float *pl = (float *)malloc(sizeof(float) * V);
                memcpy(pl, lg, sizeof(float) * V);
                for (int i = 0; i < hsp.n_recent; i++) {
                    float &l = pl[hsp.recent[i]];
                    l = l > 0 ? l / sp.repeat_penalty : l * sp.repeat_penalty;
                }
                const float mine = dev >= 0 && dev < V ? pl[dev] : -INFINITY;
                int above = 0;
                for (int i = 0; i < V; i++) above += pl[i] > mine;
                if (dev >= 0 && dev < V && above < hsp.top_k) near++;
                else bad++;
                free(pl);
            }
            dp_sampler_accept(hs, host);
            dp_sampler_accept(ds, host);
        }
        char what[128];
        snprintf(what, sizeof what, "device sampling V%d temp %.1f top-k %d top-p %.2f min-p %.2f pen %.1f", V,
                 sp.temp, sp.top_k, sp.top_p, sp.min_p, sp.repeat_penalty);
        report(c, bad == 0 && near <= 1, what, "%d of %d tokens equal the host sampler's, %d at a boundary, %d wrong",
               same, steps, near, bad);
        dp_sampler_free(hs);
        dp_sampler_free(ds);
    }
    cudaFree(dl), cudaFree(ck), cudaFree(ci), cudaFree(dtok), cudaFree(dsp);
    free(lg);
}

void check_attention(Ctx *c, int NH, int NKV, int HD, int n, int pos0, int window, int splits, int min_keys,
                     int exclude_self, int slices = 0) {
    char what[128];
    const int Q = NH * HD, KV = NKV * HD, n_kv = pos0 + n;
    const size_t cache = (size_t)n_kv * KV;
    float *q = (float *)malloc(sizeof(float) * n * Q), *kf = (float *)malloc(sizeof(float) * cache),
          *vf = (float *)malloc(sizeof(float) * cache);
    uint16_t *kh = (uint16_t *)malloc(2 * cache), *vh = (uint16_t *)malloc(2 * cache);
    for (int i = 0; i < n * Q; i++) q[i] = c->rng.normal();
    for (size_t i = 0; i < cache; i++) {
        uint16_t a = dp_f32_to_fp16(c->rng.normal()), b = dp_f32_to_fp16(c->rng.normal());
        kh[i] = a;
        vh[i] = b;
        kf[i] = dp_fp16_to_f32(a);
        vf[i] = dp_fp16_to_f32(b);
    }
    float scale = 1.0f / sqrtf((float)HD);
    float *ref = (float *)malloc(sizeof(float) * n * Q);
    float *probs = (float *)malloc(sizeof(float) * n * NH * n_kv);
    /* the CPU reference keeps V transposed, [kv_dim][n_ctx of its context] */
    float *vt = (float *)malloc(sizeof(float) * (size_t)KV * c->cpu.n_ctx);
    cpu_store_vt(vt, vf, n_kv, 0, KV, c->cpu.n_ctx);
    cpu_attention(&c->cpu, ref, q, kf, vt, n, pos0, NH, NKV, HD, window, scale, exclude_self, probs);
    free(vt);

    float *dq = dalloc<float>((size_t)n * Q), *dout = dalloc<float>((size_t)n * Q);
    __half *dk = dalloc<__half>(cache), *dv = dalloc<__half>(cache);
    int *dpos = dalloc<int>(1), *dcnt = dalloc<int>((size_t)n * NH);
    float *dpart = dalloc<float>((size_t)n * NH * splits * (HD + 2));
    float *dprobs = dalloc<float>((size_t)n * NH * n_kv);
    upload(dq, q, (size_t)n * Q);
    cudaMemcpy(dk, kh, 2 * cache, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, vh, 2 * cache, cudaMemcpyHostToDevice);
    upload(dpos, &pos0, 1);
    cudaMemset(dcnt, 0, sizeof(int) * n * NH);
    AttnLaunch A;
    memset(&A, 0, sizeof A);
    A.q = dq, A.out = dout, A.k = dk, A.v = dv, A.pos0 = dpos;
    A.n = n, A.n_head = NH, A.n_head_kv = NKV, A.head_dim = HD;
    A.window = window, A.scale = scale, A.exclude_self = exclude_self, A.slices = slices, A.gqa = g_gqa;
    A.splits = splits, A.min_keys = min_keys, A.part = dpart, A.counters = dcnt;
    float *h = (float *)malloc(sizeof(float) * n * Q);
    /* twice: the second run checks that the counters were reset */
    double e = 0;
    for (int rep = 0; rep < 2; rep++) {
        cudaMemset(dout, 0xFF, sizeof(float) * n * Q);
        int rc = dp_cu_attention(&A, c->st);
        cudaStreamSynchronize(c->st);
        download(h, dout, (size_t)n * Q);
        double er = rc ? INFINITY : rel_l2f(h, ref, (size_t)n * Q);
        if (!(er <= e)) e = er;
    }
    snprintf(what, sizeof what, "attention h%d/%d d%d n%d pos%d w%d s%d/%d%s%s%s", NH, NKV, HD, n, pos0, window, splits,
             min_keys, exclude_self ? " excl" : "", slices ? " " : "", slices ? slice_kernel(slices) : "");
    report(c, e <= TOL, what, "rel-L2 %.2e (limit %.0e)", e, TOL);
    int rc = dp_cu_attention_probs(&A, dprobs, n_kv, c->st);
    cudaStreamSynchronize(c->st);
    float *hp = (float *)malloc(sizeof(float) * n * NH * n_kv);
    download(hp, dprobs, (size_t)n * NH * n_kv);
    e = rc ? INFINITY : rel_l2f(hp, probs, (size_t)n * NH * n_kv);
    snprintf(what, sizeof what, "attention probs h%d/%d d%d n%d pos%d w%d", NH, NKV, HD, n, pos0, window);
    report(c, e <= TOL, what, "rel-L2 %.2e", e);
    cudaFree(dq), cudaFree(dout), cudaFree(dk), cudaFree(dv), cudaFree(dpos), cudaFree(dcnt), cudaFree(dpart);
    cudaFree(dprobs);
    free(q), free(kf), free(vf), free(kh), free(vh), free(ref), free(probs), free(h), free(hp);
}

void check_small_ops(Ctx *c) {
    /* RMSNorm and the post-norm + residual add */
    const int n = 3, d = 1152;
    float *x = (float *)malloc(sizeof(float) * n * d), *w = (float *)malloc(sizeof(float) * d);
    float *o = (float *)malloc(sizeof(float) * n * d), *ref = (float *)malloc(sizeof(float) * n * d);
    float *h = (float *)malloc(sizeof(float) * n * d);
    for (int i = 0; i < n * d; i++) x[i] = 3.0f * c->rng.normal(), o[i] = c->rng.normal();
    for (int i = 0; i < d; i++) w[i] = 1.0f + 0.3f * c->rng.normal();
    float *dx = dalloc<float>((size_t)n * d), *dw = dalloc<float>(d), *dout = dalloc<float>((size_t)n * d),
          *do_ = dalloc<float>((size_t)n * d);
    upload(dx, x, (size_t)n * d);
    upload(dw, w, d);
    upload(do_, o, (size_t)n * d);
    dp_cu_rmsnorm(dout, NULL, dx, dw, 0.5f, n, d, 1e-6f, c->st);
    cudaStreamSynchronize(c->st);
    download(h, dout, (size_t)n * d);
    cpu_rmsnorm(&c->cpu, ref, x, w, 0.5f, n, d, 1e-6f);
    double e = rel_l2f(h, ref, (size_t)n * d);
    report(c, e <= TOL_EXACT, "rmsnorm 3x1152", "rel-L2 %.2e (limit %.0e)", e, TOL_EXACT);
    dp_cu_postnorm_add(dx, do_, NULL, dw, 0.0f, n, d, 1e-6f, c->st);
    cudaStreamSynchronize(c->st);
    download(h, dx, (size_t)n * d);
    cpu_rmsnorm(&c->cpu, o, o, w, 0.0f, n, d, 1e-6f);
    cpu_add(x, o, n * d);
    e = rel_l2f(h, x, (size_t)n * d);
    report(c, e <= TOL_EXACT, "post-norm + residual 3x1152", "rel-L2 %.2e", e);
    cudaFree(dx), cudaFree(dw), cudaFree(dout), cudaFree(do_);
    free(x), free(w), free(o), free(ref), free(h);

    /* gated activations */
    const long long N = 10007;
    float *g = (float *)malloc(sizeof(float) * N), *u = (float *)malloc(sizeof(float) * N);
    float *r2 = (float *)malloc(sizeof(float) * N), *h2 = (float *)malloc(sizeof(float) * N);
    for (long long i = 0; i < N; i++) g[i] = 4.0f * c->rng.normal(), u[i] = c->rng.normal();
    float *dg = dalloc<float>(N), *du = dalloc<float>(N), *dr = dalloc<float>(N);
    upload(dg, g, N);
    upload(du, u, N);
    for (int act = 0; act < 2; act++) {
        cudaMemset(dr, 0xFF, N * 4);
        dp_cu_gated_act(dr, dg, du, N, act, c->st);
        cudaStreamSynchronize(c->st);
        download(h2, dr, N);
        cpu_gated_act(&c->cpu, r2, g, u, N, (dp_act)act);
        e = rel_l2f(h2, r2, N);
        report(c, e <= TOL_EXACT, act ? "gated act gelu-tanh" : "gated act silu", "rel-L2 %.2e", e);
    }
    cudaFree(dg), cudaFree(du), cudaFree(dr);
    free(g), free(u), free(r2), free(h2);

    /* q/k norm + RoPE + KV store, both styles, partial rotation */
    for (int style = 0; style < 2; style++) {
        const int nt = 4, NH = 4, NKV = 2, HD = 128, n_rot = style ? 128 : 64, pos0 = 1000;
        const int Qd = NH * HD, KVd = NKV * HD, ctx = pos0 + nt;
        float *q = (float *)malloc(sizeof(float) * nt * Qd), *k = (float *)malloc(sizeof(float) * nt * KVd);
        float *v = (float *)malloc(sizeof(float) * nt * KVd), *qw = (float *)malloc(sizeof(float) * HD);
        float *kw = (float *)malloc(sizeof(float) * HD), *inv = (float *)malloc(sizeof(float) * n_rot / 2);
        for (int i = 0; i < nt * Qd; i++) q[i] = c->rng.normal();
        for (int i = 0; i < nt * KVd; i++) k[i] = c->rng.normal(), v[i] = c->rng.normal();
        for (int i = 0; i < HD; i++) qw[i] = 1.0f + 0.2f * c->rng.normal(), kw[i] = 1.0f + 0.2f * c->rng.normal();
        for (int i = 0; i < n_rot / 2; i++) inv[i] = 1.0f / powf(10000.0f, (float)(2 * i) / (float)n_rot);
        float *dq = dalloc<float>((size_t)nt * Qd), *dk = dalloc<float>((size_t)nt * KVd),
              *dv = dalloc<float>((size_t)nt * KVd), *dqw = dalloc<float>(HD), *dkw = dalloc<float>(HD),
              *dinv = dalloc<float>(n_rot / 2);
        __half *kc = dalloc<__half>((size_t)ctx * KVd), *vc = dalloc<__half>((size_t)ctx * KVd);
        int *dpos = dalloc<int>(1);
        upload(dq, q, (size_t)nt * Qd), upload(dk, k, (size_t)nt * KVd), upload(dv, v, (size_t)nt * KVd);
        upload(dqw, qw, HD), upload(dkw, kw, HD), upload(dinv, inv, n_rot / 2), upload(dpos, &pos0, 1);
        RopeLaunch R;
        memset(&R, 0, sizeof R);
        R.q = dq, R.k = dk, R.v = dv, R.kc = kc, R.vc = vc, R.pos0 = dpos;
        R.n = nt, R.n_head = NH, R.n_head_kv = NKV, R.head_dim = HD, R.n_rot = n_rot, R.neox = style;
        R.q_norm = dqw, R.k_norm = dkw, R.norm_off = 0.0f, R.eps = 1e-6f, R.inv_freq = dinv;
        dp_cu_qk_rope_store(&R, c->st);
        cudaStreamSynchronize(c->st);
        cpu_rmsnorm(&c->cpu, q, q, qw, 0.0f, nt * NH, HD, 1e-6f);
        cpu_rmsnorm(&c->cpu, k, k, kw, 0.0f, nt * NKV, HD, 1e-6f);
        for (int i = 0; i < nt; i++) {
            for (int hh = 0; hh < NH; hh++)
                cpu_rope(q + (size_t)i * Qd + hh * HD, n_rot, inv, (float)(pos0 + i), (dp_rope_style)style);
            for (int hh = 0; hh < NKV; hh++)
                cpu_rope(k + (size_t)i * KVd + hh * HD, n_rot, inv, (float)(pos0 + i), (dp_rope_style)style);
        }
        float *hq = (float *)malloc(sizeof(float) * nt * Qd), *hk = (float *)malloc(sizeof(float) * nt * KVd);
        download(hq, dq, (size_t)nt * Qd);
        download(hk, dk, (size_t)nt * KVd);
        double eq = rel_l2f(hq, q, (size_t)nt * Qd), ek = rel_l2f(hk, k, (size_t)nt * KVd);
        /* the cache rows pos0.. hold k and v as f16 */
        __half *hc = (__half *)malloc(sizeof(__half) * nt * KVd);
        cudaMemcpy(hc, kc + (size_t)pos0 * KVd, sizeof(__half) * nt * KVd, cudaMemcpyDeviceToHost);
        size_t bad = 0;
        for (int i = 0; i < nt * KVd; i++) {
            uint16_t b;
            memcpy(&b, &hc[i], 2);
            bad += b != dp_f32_to_fp16(hk[i]);
        }
        cudaMemcpy(hc, vc + (size_t)pos0 * KVd, sizeof(__half) * nt * KVd, cudaMemcpyDeviceToHost);
        for (int i = 0; i < nt * KVd; i++) {
            uint16_t b;
            memcpy(&b, &hc[i], 2);
            bad += b != dp_f32_to_fp16(v[i]);
        }
        char what[96];
        snprintf(what, sizeof what, "qk-norm + rope %s (n_rot %d)", style ? "neox" : "adjacent", n_rot);
        report(c, eq <= TOL_EXACT && ek <= TOL_EXACT && bad == 0, what,
               "q rel-L2 %.2e, k rel-L2 %.2e, %zu cache values differ", eq, ek, bad);
        cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(dqw), cudaFree(dkw), cudaFree(dinv), cudaFree(kc),
            cudaFree(vc), cudaFree(dpos);
        free(q), free(k), free(v), free(qw), free(kw), free(inv), free(hq), free(hk), free(hc);
    }

    /* argmax with ties: the lowest index wins, as in the CPU sampler */
    const int nv = 262144;
    float *lg = (float *)malloc(sizeof(float) * nv);
    for (int i = 0; i < nv; i++) lg[i] = (float)(c->rng.next() % 1000) * 0.01f - 5.0f;
    int want = 0;
    for (int i = 1; i < nv; i++)
        if (lg[i] > lg[want]) want = i;
    float *dl = dalloc<float>(nv);
    unsigned long long *dkey = dalloc<unsigned long long>(1), key = 0;
    upload(dl, lg, nv);
    cudaMemset(dkey, 0, 8);
    dp_cu_argmax(dl, nv, dkey, c->st);
    cudaStreamSynchronize(c->st);
    download(&key, dkey, 1);
    int got = key_token(key);
    report(c, got == want, "argmax 262144 with ties", "device %d, CPU %d", got, want);
    cudaFree(dl), cudaFree(dkey);
    free(lg);
}

/* Bandwidth: a large device-to-device copy (bytes read + written) and each
 * format's matvec over a matrix several times the L2 cache. */
void measure_speed(Ctx *c) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const size_t nb = (size_t)2 << 30;
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, nb) == cudaSuccess && cudaMalloc(&b, nb) == cudaSuccess) {
        cudaMemset(a, 1, nb);
        float best[11];
        for (int i = 0; i < 11; i++) {
            cudaEventRecord(e0, c->st);
            cudaMemcpyAsync(b, a, nb, cudaMemcpyDeviceToDevice, c->st);
            cudaEventRecord(e1, c->st);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&best[i], e0, e1);
        }
        float med[11];
        memcpy(med, best, sizeof med);
        for (int i = 0; i < 11; i++)
            for (int j = i + 1; j < 11; j++)
                if (med[j] < med[i]) { float t = med[i]; med[i] = med[j]; med[j] = t; }
        fprintf(c->out, "SPEED copy %.0f GB/s (read + write, 2 GiB, median of 11)\n", 2.0 * nb / (med[5] * 1e-3) / 1e9);
    }
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    cudaGetLastError();
    const int types[] = {DP_TYPE_Q4_K, DP_TYPE_Q6_K, DP_TYPE_Q8_0, DP_TYPE_Q4_0, DP_TYPE_Q4_1, DP_TYPE_Q5_0,
                         DP_TYPE_Q5_1, DP_TYPE_F16, DP_TYPE_BF16};
    const int shapes[][2] = {{16384, 4096}, {4096, 11008}, {2048, 2048}};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (size_t sh = 0; sh < 3; sh++) {
            const int rows = shapes[sh][0], cols = shapes[sh][1];
            if (cols % dp_type_get(types[t])->block_size) continue;
            uint8_t *host = random_matrix(c->rng, types[t], rows, cols);
            DMat W;
            void *alloc = NULL;
            if (dp_cu_upload_matrix(host, types[t], rows, cols, &W, &alloc)) {
                free(host);
                continue;
            }
            float *dx = dalloc<float>(cols), *dy = dalloc<float>(rows);
            float *x = (float *)malloc(sizeof(float) * cols);
            for (int i = 0; i < cols; i++) x[i] = c->rng.normal();
            upload(dx, x, cols);
            MvLaunch L;
            memset(&L, 0, sizeof L);
            L.job[0] = {W, dy, NULL};
            L.njobs = 1, L.x = dx, L.cols = cols, L.mode = MV_STORE;
            const double bytes = (double)dp_row_size(types[t], cols) * rows;
            /* 3 warm-up launches, then 50 back to back */
            auto time_launch = [&](const char *what) {
                for (int i = 0; i < 3; i++) dp_cu_matvec(&L, c->st);
                const int reps = 50;
                cudaEventRecord(e0, c->st);
                for (int i = 0; i < reps; i++) dp_cu_matvec(&L, c->st);
                cudaEventRecord(e1, c->st);
                cudaEventSynchronize(e1);
                float ms = 0;
                cudaEventElapsedTime(&ms, e0, e1);
                fprintf(c->out, "SPEED matvec %-5s %5dx%-5d %7.1f MB %8.2f us %7.0f GB/s%s\n", dp_type_name(types[t]),
                        rows, cols, bytes / 1e6, ms * 1e3 / reps, bytes / (ms * 1e-3 / reps) / 1e9, what);
            };
            /* the default kernel, then the other one for the formats of the tensor-core kernel */
            auto time_both = [&](const char *what) {
                time_launch(what);
                if (!dp_cu_matvec_t_type(types[t])) return;
                const int t_def = dp_cu_matvec_t_ok(types[t]);
                char w2[96];
                snprintf(w2, sizeof w2, "%s (%s)", what, t_def ? "k_matvec_w" : "k_matvec_t");
                dp_cu_matvec_t_set(!t_def);
                time_launch(w2);
                dp_cu_matvec_t_set(-1);
            };
            time_both("");
            if (sh == 2) { /* the small matrix again with the RMSNorm fused into the prologue (a Q/K/V launch) */
                float *dw = dalloc<float>(cols);
                upload(dw, x, cols);
                L.norm_w = dw, L.norm_off = 0.0f, L.eps = 1e-6f;
                time_both(" with RMSNorm");
                /* and with Gemma's sandwich post-norm + residual add before it */
                float *dro = dalloc<float>(cols), *dxo = dalloc<float>(cols);
                upload(dro, x, cols);
                L.res_o = dro, L.res_w = dw, L.x_out = dxo;
                time_both(" with post-norm + add + RMSNorm");
                cudaFree(dw), cudaFree(dro), cudaFree(dxo);
            }
            cudaFree(dx), cudaFree(dy), cudaFree(alloc);
            free(host), free(x);
        }
    }
    /* decode attention at depth 4096 over a cache several times the L2 (48
     * layers of 4 MB: each launch reads its layer from DRAM, as in decode) */
    const int shapes_a[][3] = {{16, 2, 128}, {4, 1, 256}};
    /* splits, keys per split of k_attention; slices > 0: k_attn_split */
    const int cfg[][4] = {{64, 64, 0, 1}, {32, 128, 0, 1}, {16, 256, 0, 1}, {16, 1, 16, 1}, {32, 1, 32, 1},
                          {64, 1, 16, 0}, {64, 1, 32, 0}, {64, 1, 8, 0}};
    for (int sa = 0; sa < 2; sa++) {
        const int NH = shapes_a[sa][0], NKV = shapes_a[sa][1], HD = shapes_a[sa][2], L = 48, ctx = 4096;
        const size_t cache = (size_t)L * ctx * NKV * HD;
        __half *kc = dalloc<__half>(cache), *vc = dalloc<__half>(cache);
        cudaMemset(kc, 0x3c, cache * 2); /* 1.0 in f16 bytes 0x3c3c: finite, not zero */
        cudaMemset(vc, 0x3c, cache * 2);
        float *dq = dalloc<float>((size_t)NH * HD), *dout = dalloc<float>((size_t)NH * HD);
        float *dpart = dalloc<float>((size_t)NH * 64 * (HD + 2));
        int *dcnt = dalloc<int>(NH), *dpos = dalloc<int>(1), pos = ctx - 1;
        cudaMemset(dcnt, 0, sizeof(int) * NH);
        cudaMemset(dq, 0x3c, sizeof(float) * NH * HD);
        upload(dpos, &pos, 1);
        for (int ci = 0; ci < (int)(sizeof cfg / sizeof cfg[0]); ci++) {
            AttnLaunch A;
            memset(&A, 0, sizeof A);
            A.q = dq, A.out = dout, A.pos0 = dpos, A.n = 1, A.n_head = NH, A.n_head_kv = NKV, A.head_dim = HD;
            A.scale = 0.1f, A.splits = cfg[ci][0], A.min_keys = cfg[ci][1], A.part = dpart, A.counters = dcnt;
            A.slices = cfg[ci][2], A.gqa = cfg[ci][3] ? -1 : 1;
            const int reps = 40;
            cudaEventRecord(e0, c->st);
            for (int i = 0; i < reps; i++) {
                size_t lay = (size_t)(i % L) * ctx * NKV * HD;
                A.k = kc + lay, A.v = vc + lay;
                dp_cu_attention(&A, c->st);
            }
            cudaEventRecord(e1, c->st);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            double bytes = 2.0 * ctx * NKV * HD * 2;
            if (cfg[ci][2])
                fprintf(c->out, "SPEED attention decode h%d/%d d%d depth %d %s %d slices: %7.2f us %6.0f GB/s\n", NH,
                        NKV, HD, ctx, cfg[ci][3] ? "k_attn_split" : "k_attn_gqa", cfg[ci][2], ms * 1e3 / reps,
                        bytes / (ms * 1e-3 / reps) / 1e9);
            else
                fprintf(c->out, "SPEED attention decode h%d/%d d%d depth %d splits %d/%d keys: %7.2f us %6.0f GB/s\n",
                        NH, NKV, HD, ctx, cfg[ci][0], cfg[ci][1], ms * 1e3 / reps, bytes / (ms * 1e-3 / reps) / 1e9);
        }
        cudaFree(kc), cudaFree(vc), cudaFree(dq), cudaFree(dout), cudaFree(dpart), cudaFree(dcnt), cudaFree(dpos);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

/* The integer matvecs address a matrix with 32-bit offsets: one of 4 GiB or
 * more gets an error naming it, before anything is read (the matrix here
 * has no memory behind it). */
void check_huge_refused(Ctx *c) {
    MvLaunch L;
    memset(&L, 0, sizeof L);
    DMat w;
    memset(&w, 0, sizeof w);
    w.type = DP_TYPE_Q8_0, w.rows = 1 << 20, w.cols = 4096, w.nblk = 128, w.body_row = 128 * 32;
    L.job[0] = {w, NULL, NULL};
    L.njobs = 1;
    L.cols = 4096;
    L.mode = MV_STORE;
    const int rc = dp_cu_matvec(&L, c->st);
    const char *msg = rc ? dp_last_error() : "";
    report(c, rc == DP_ERR_BACKEND && strstr(msg, "4 GiB") != NULL, "matvec refuses a 4 GiB Q8_0 matrix", "rc %d: %s",
           rc, msg);
}

/* Decode attention with several key slices (k_attn_split, or k_attn_gqa
 * where g_gqa asks for it): several slices, more slices than keys. */
void check_sliced(Ctx *c) {
    check_attention(c, 16, 2, 128, 1, 4095, 0, 16, 1, 0, 16);
    check_attention(c, 4, 2, 64, 1, 5, 0, 16, 1, 1, 16);
    check_attention_rope(c, 4, 1, 256, 255, 100, 1, 0, 128, 2, 1, 2);
    check_attention_rope(c, 14, 2, 64, 3, 0, 0, 1, 64, 4, 1, 4);
    check_attention_rope(c, 4, 1, 256, 1000, 512, 1, 1, 256, 4, 1, 4);
    check_attention_rope(c, 16, 2, 128, 4095, 0, 0, 1, 128, 16, 1, 16);
    check_attention_rope(c, 8, 2, 64, 2047, 0, 0, 0, 64, 8, 1, 8);
}

void run_checks(Ctx *c_) {
    Ctx &c = *c_;
    const int types[] = {DP_TYPE_Q4_0, DP_TYPE_Q4_1, DP_TYPE_Q5_0, DP_TYPE_Q5_1, DP_TYPE_Q8_0,
                         DP_TYPE_Q2_K, DP_TYPE_Q3_K, DP_TYPE_Q4_K, DP_TYPE_Q5_K, DP_TYPE_Q6_K,
                         DP_TYPE_F16, DP_TYPE_BF16, DP_TYPE_F32};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        check_type(&c, types[t], 301, 768);                 /* 24 units per row: groups of 6 rows */
        if (dp_type_get(types[t])->block_size == 32) check_type(&c, types[t], 77, 1152); /* Gemma's width */
        check_type(&c, types[t], 40, 4096);                 /* one row per group */
    }
    /* an LM head's row count: k_matvec_w picks rows per group by how well they fill the lanes */
    check_type(&c, DP_TYPE_Q8_0, 70001, 1152);
    check_type(&c, DP_TYPE_Q6_K, 70001, 512);
    {
        static const int any[3] = {DP_TYPE_Q4_K, DP_TYPE_Q6_K, DP_TYPE_Q8_0}, km[3] = {DP_TYPE_Q4_K, DP_TYPE_Q4_K,
                                                                                     DP_TYPE_Q6_K};
        check_multi(&c, any);
        check_multi(&c, km);
    }
    check_huge_refused(&c);
    check_qchain(&c, DP_TYPE_Q5_0, DP_TYPE_Q6_K, 1152, 1536);  /* Gemma-3-1B's mix */
    check_qchain(&c, DP_TYPE_Q4_K, DP_TYPE_Q4_K, 2048, 2816);  /* Qwen2.5-3B's */
    check_qchain(&c, DP_TYPE_Q8_0, DP_TYPE_Q5_1, 512, 1024);
    check_qchain(&c, DP_TYPE_Q4_1, DP_TYPE_Q5_K, 768, 768);
    check_small_ops(&c);
    check_sampler(&c, 262144);
    check_sampler(&c, 3000);
    /* attention: decode (one split, many splits, windows), prefill, shapes of
     * Gemma 3 (4/1 x 256), Qwen2.5-3B (16/2 x 128), Qwen2.5-0.5B (14/2 x 64) */
    check_attention(&c, 16, 2, 128, 1, 0, 0, 32, 128, 0);
    check_attention(&c, 16, 2, 128, 1, 37, 0, 32, 128, 0);
    check_attention(&c, 16, 2, 128, 1, 4095, 0, 32, 128, 0);
    check_attention(&c, 16, 2, 128, 1, 3000, 0, 64, 1, 0);
    check_attention(&c, 4, 1, 256, 1, 2000, 512, 32, 16, 0);
    check_attention(&c, 4, 1, 256, 1, 100, 0, 32, 8, 1);
    check_attention(&c, 14, 2, 64, 1, 777, 0, 32, 32, 0);
    check_attention(&c, 4, 1, 256, 37, 10, 16, 8, 4, 0);
    check_attention(&c, 16, 2, 128, 64, 0, 0, 8, 128, 0);
    check_attention(&c, 4, 2, 8, 9, 3, 0, 8, 2, 0);
    /* decode by k_attn_split: one slice, several, more slices than keys */
    check_attention(&c, 16, 2, 128, 1, 100, 0, 1, 1, 0, 1);
    check_attention(&c, 4, 1, 256, 1, 255, 64, 1, 1, 1, 1);
    check_attention(&c, 8, 8, 64, 1, 600, 0, 4, 1, 0, 4);
    /* decode with the q/k norm + RoPE + K/V store fused in: one cluster, several */
    check_attention_rope(&c, 16, 2, 128, 300, 0, 0, 1, 128, 64, 64, 0);
    check_attention_rope(&c, 16, 2, 128, 4095, 0, 0, 1, 128, 64, 64, 0);
    check_attention_rope(&c, 4, 1, 256, 1000, 512, 1, 1, 256, 64, 64, 0);
    check_attention_rope(&c, 4, 1, 256, 3000, 0, 1, 0, 128, 32, 16, 0);
    check_attention_rope(&c, 4, 1, 256, 0, 0, 1, 1, 256, 64, 64, 0);
    check_attention_rope(&c, 16, 2, 128, 4095, 0, 0, 1, 128, 256, 16, 0);
    check_attention_rope(&c, 4, 1, 256, 3000, 512, 1, 1, 256, 128, 8, 0);
    check_attention_rope(&c, 8, 2, 64, 2047, 0, 0, 0, 64, 256, 1, 0);
    /* the same by k_attn_split: one slice (several tiles) */
    check_attention_rope(&c, 16, 2, 128, 10, 0, 0, 1, 128, 1, 1, 1);
    check_attention_rope(&c, 4, 1, 256, 200, 0, 1, 1, 256, 1, 1, 1);
    check_attention_rope(&c, 8, 2, 64, 0, 0, 0, 0, 64, 1, 1, 1);
    check_attention_rope(&c, 16, 2, 128, 700, 0, 0, 1, 128, 1, 1, 1);
    /* several slices by k_attn_split, then by k_attn_gqa (opt-in), then
     * k_attn_gqa on longer slices (several shared-memory stages), 7 heads
     * per KV head (k_attn_split), windows, more slices than keys, whole
     * clusters of empty slices */
    check_sliced(&c);
    g_gqa = 1;
    check_sliced(&c);
    check_attention(&c, 16, 2, 128, 1, 8191, 0, 16, 1, 0, 16);
    check_attention(&c, 4, 1, 256, 1, 6000, 0, 16, 1, 0, 16);
    check_attention(&c, 14, 2, 64, 1, 5000, 0, 16, 1, 0, 16);
    check_attention(&c, 16, 2, 128, 1, 3000, 1024, 8, 1, 1, 8);
    check_attention_rope(&c, 16, 2, 128, 8191, 0, 0, 1, 128, 16, 1, 16);
    check_attention_rope(&c, 4, 1, 256, 5000, 0, 1, 1, 256, 16, 1, 16);
    check_attention_rope(&c, 4, 1, 256, 4000, 512, 1, 1, 256, 16, 1, 16);
    check_attention_rope(&c, 14, 2, 64, 700, 0, 0, 1, 64, 2, 1, 2);
    check_attention_rope(&c, 32, 8, 64, 1500, 0, 0, 0, 64, 4, 1, 4);
    check_attention(&c, 8, 2, 128, 1, 20, 0, 64, 1, 0, 32);
    /* several tiles per slice */
    check_attention(&c, 16, 2, 128, 1, 8191, 0, 16, 1, 0, 2);
    check_attention_rope(&c, 4, 1, 256, 3000, 0, 1, 1, 256, 16, 1, 2);
    /* the last slice to finish combines (no waiting for each other) */
    const int spin = dp_cu_attn_gqa_spin(0);
    check_sliced(&c);
    check_attention(&c, 16, 2, 128, 1, 8191, 0, 16, 1, 0, 16);
    dp_cu_attn_gqa_spin(spin);
    g_gqa = -1;
}

} // namespace

extern "C" int dp_cuda_selftest(FILE *out, uint64_t seed, int flags) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        cudaGetLastError();
        return dp_set_error(DP_ERR_BACKEND, "no usable GPU was found");
    }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    fprintf(out, "device: %s, %d SMs, %.0f GiB, compute capability %d.%d; seed %llu\n", prop.name,
            prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0, prop.major, prop.minor,
            (unsigned long long)seed);
    Ctx c;
    memset(&c, 0, sizeof c);
    c.out = out;
    c.rng.s = seed ? seed : 0x9E3779B97F4A7C15ull;
    cudaStreamCreate(&c.st);
    if (cpu_ctx_init(&c.cpu, 4, 16384, 8192, 64, 256, NULL) != DP_OK) {
        fprintf(out, "FAIL CPU reference init: %s\n", dp_last_error());
        return 1;
    }
    size_t smem = dp_cu_matvec_smem(16384);
    if (dp_cu_matvec_init(smem)) {
        fprintf(out, "FAIL matvec init: %s\n", dp_last_error());
        return 1;
    }
    if (!(flags & 2)) run_checks(&c);
    if (flags & 1) measure_speed(&c);
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) report(&c, 0, "device errors", "%s", cudaGetErrorString(e));
    fprintf(out, "%d of %d checks passed\n", c.checks - c.fails, c.checks);
    cudaStreamDestroy(c.st);
    cpu_ctx_free(&c.cpu);
    return c.fails;
}
