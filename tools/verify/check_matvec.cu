/* verify: dequantisation (bit-exact with dp_dequantize_row), the decode
 * matvecs (plain, fused RMSNorm + bias, residual add, gate/up with both
 * activations, fused argmax, several matrices in one launch) and the
 * prefill GEMM, against float64 products on the same weights. */
#include "verify.cuh"

namespace {

/* One launch of L over the poisoned output y (rows), compared with ref. */
double run_matvec(Ctx *c, const MvLaunch &L, float *dy, int rows, float *h, const float *ref, int *rc) {
    *rc = dp_cu_matvec(&L, c->st);
    cudaStreamSynchronize(c->st);
    download(h, dy, rows);
    return *rc ? INFINITY : dp_rel_l2(h, ref, rows);
}

const char *err_of(int rc) { return rc ? dp_last_error() : ""; }

} // namespace

void check_matvec(Ctx *c, const MatvecCase &k) {
    const int type = k.type, rows = k.rows, cols = k.cols;
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
    const size_t n = (size_t)rows * cols;
    /* dequantisation: bit-exact */
    float *d_deq = dalloc<float>(n), *h = halloc<float>(n);
    dp_cu_dequant_f32(&m.dev, 0, rows, d_deq, c->st);
    cudaStreamSynchronize(c->st);
    download(h, d_deq, n);
    size_t diff = 0;
    for (size_t i = 0; i < n; i++) diff += memcmp(&h[i], &m.deq[i], 4) != 0;
    snprintf(what, sizeof what, "dequant %s %dx%d", tn, rows, cols);
    report(c, diff == 0, what, "%zu of %zu values differ from dp_dequantize_row", diff, n);
    cudaFree(d_deq);

    float *x = halloc<float>(cols), *nw = halloc<float>(cols), *xn = halloc<float>(cols);
    float *bias = halloc<float>(rows), *y0 = halloc<float>(rows);
    float *ref = halloc<float>(rows), *ref2 = halloc<float>(rows), *refu = halloc<float>(rows);
    for (int i = 0; i < cols; i++) x[i] = c->rng.normal(), nw[i] = 1.0f + 0.2f * c->rng.normal();
    for (int i = 0; i < rows; i++) bias[i] = c->rng.normal(), y0[i] = c->rng.normal();
    float *dx = dalloc<float>(cols), *dnw = dalloc<float>(cols), *dy = dalloc<float>(rows),
          *dy2 = dalloc<float>(rows), *db = dalloc<float>(rows);
    unsigned long long *dkey = dalloc<unsigned long long>(1);
    upload(dx, x, cols);
    upload(dnw, nw, cols);
    upload(db, bias, rows);
    ref_matvec(&m, x, ref);
    ref_matvec(&m2, x, refu);
    /* the references of the residual add (y0 + W x) and of gate/up (act(W x) * W2 x, per activation) */
    float *ref_add = halloc<float>(rows), *ref_gu[2] = {halloc<float>(rows), halloc<float>(rows)};
    for (int i = 0; i < rows; i++) {
        const double g = ref[i], u = refu[i];
        ref_add[i] = (float)(g + y0[i]);
        ref_gu[DP_ACT_SILU][i] = (float)(g / (1.0 + exp(-g)) * u);
        ref_gu[DP_ACT_GELU_TANH][i] = (float)(0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u);
    }
    int rc;

    /* plain, with the fused argmax: the index of the largest output, lowest on ties */
    MvLaunch L;
    memset(&L, 0, sizeof L);
    L.job[0] = {m.dev, dy, NULL};
    L.njobs = 1;
    L.x = dx;
    L.cols = cols;
    L.mode = MV_STORE;
    L.argmax_key = dkey;
    cudaMemset(dkey, 0, 8);
    double e = run_matvec(c, L, dy, rows, h, ref, &rc);
    snprintf(what, sizeof what, "matvec %s %dx%d", tn, rows, cols);
    report(c, e <= TOL, what, "rel-L2 %.2e (limit %.0e)%s%s", e, TOL, rc ? ": " : "", err_of(rc));
    unsigned long long key = 0;
    download(&key, dkey, 1);
    int best = 0;
    for (int i = 1; i < rows; i++)
        if (h[i] > h[best]) best = i;
    snprintf(what, sizeof what, "matvec+argmax %s", tn);
    report(c, key_token(key) == best, what, "device %d, first maximum of its output %d", key_token(key), best);

    /* RMSNorm prologue + bias */
    double ss = 0;
    for (int i = 0; i < cols; i++) ss += (double)x[i] * x[i];
    const float sc = 1.0f / sqrtf((float)(ss / cols) + 1e-6f);
    for (int i = 0; i < cols; i++) xn[i] = x[i] * sc * nw[i];
    ref_matvec(&m, xn, ref2);
    for (int i = 0; i < rows; i++) ref2[i] += bias[i];
    L.job[0] = {m.dev, dy, db};
    L.norm_w = dnw;
    L.eps = 1e-6f;
    L.argmax_key = NULL;
    e = run_matvec(c, L, dy, rows, h, ref2, &rc);
    snprintf(what, sizeof what, "matvec+norm+bias %s", tn);
    report(c, e <= TOL, what, "rel-L2 %.2e", e);

    /* residual add */
    upload(dy, y0, rows);
    L.job[0] = {m.dev, dy, NULL};
    L.norm_w = NULL;
    L.mode = MV_ADD;
    e = run_matvec(c, L, dy, rows, h, ref_add, &rc);
    snprintf(what, sizeof what, "matvec+add %s", tn);
    report(c, e <= TOL, what, "rel-L2 %.2e", e);

    /* gate/up with both activations */
    for (int act = 0; act < 2; act++) {
        cudaMemset(dy, 0xFF, rows * 4);
        L.job[0] = {m.dev, dy, NULL};
        L.job[1] = {m2.dev, dy2, NULL};
        L.njobs = 2;
        L.mode = MV_GATEUP;
        L.act = act;
        e = run_matvec(c, L, dy, rows, h, ref_gu[act], &rc);
        snprintf(what, sizeof what, "matvec gate/up %s %s", act ? "gelu" : "silu", tn);
        report(c, e <= TOL, what, "rel-L2 %.2e", e);
    }

    /* k_matvec_l at forced shapes (DOPPLER_CUDA_MVW_LANES): at these sizes
     * a CTA's items are cut into ranges of one or two per warp, so most
     * groups are finished from the parts of several warps. Bias, residual add, gate/up. */
    if (dp_cu_matvec_q_ok(type)) {
        static const int shape[3] = {DP_MVW_4, DP_MVW_4X2, DP_MVW_32X2};
        static const char *shape_name[3] = {"4", "4x2", "32x2"};
        const int saved = dp_cu_set.mvw_lanes;
        for (int si = 0; si < 3; si++) {
            dp_cu_set.mvw_lanes = shape[si];
            L.njobs = 1, L.mode = MV_STORE, L.norm_w = NULL;
            L.job[0] = {m.dev, dy, db};
            for (int i = 0; i < rows; i++) ref2[i] = ref[i] + bias[i];
            cudaMemset(dy, 0xFF, rows * 4);
            double worst = run_matvec(c, L, dy, rows, h, ref2, &rc);
            auto keep_worst = [&](double v) { worst = v > worst || v != v ? v : worst; };
            upload(dy, y0, rows);
            L.job[0] = {m.dev, dy, NULL};
            L.mode = MV_ADD;
            keep_worst(run_matvec(c, L, dy, rows, h, ref_add, &rc));
            cudaMemset(dy, 0xFF, rows * 4);
            L.job[1] = {m2.dev, dy2, NULL};
            L.njobs = 2, L.mode = MV_GATEUP, L.act = DP_ACT_SILU;
            keep_worst(run_matvec(c, L, dy, rows, h, ref_gu[DP_ACT_SILU], &rc));
            snprintf(what, sizeof what, "matvec lanes %s %s %dx%d", shape_name[si], tn, rows, cols);
            report(c, worst <= TOL, what, "worst rel-L2 %.2e (bias, add, gate/up)%s%s", worst, rc ? ": " : "",
                   err_of(rc));
        }
        dp_cu_set.mvw_lanes = saved;
    }

    /* prefill GEMM: f16 operands, f32 accumulation; a scratch of half the
     * matrix forces two row chunks */
    {
        const int nt = 5;
        cublasHandle_t hb = dp_cu_blas_create();
        __half *x16 = dalloc<__half>((size_t)nt * cols), *w16 = dalloc<__half>((size_t)rows * cols / 2 + cols);
        float *xs = halloc<float>((size_t)nt * cols), *dys = dalloc<float>((size_t)nt * rows);
        float *d_xs = dalloc<float>((size_t)nt * cols), *ys = halloc<float>((size_t)nt * rows);
        float *refs = halloc<float>((size_t)nt * rows);
        for (int i = 0; i < nt * cols; i++) xs[i] = c->rng.normal();
        upload(d_xs, xs, (size_t)nt * cols);
        dp_cu_to_f16(x16, d_xs, (long long)nt * cols, c->st);
        rc = dp_cu_gemm(hb, &m.dev, x16, nt, dys, rows, 0.0f, w16, (size_t)rows * cols / 2 + cols, c->st);
        cudaStreamSynchronize(c->st);
        download(ys, dys, (size_t)nt * rows);
        for (int t = 0; t < nt; t++) ref_matvec(&m, xs + (size_t)t * cols, refs + (size_t)t * rows);
        e = rc ? INFINITY : dp_rel_l2(ys, refs, (size_t)nt * rows);
        snprintf(what, sizeof what, "gemm f16 %s %dx%dx%d", tn, rows, nt, cols);
        report(c, e <= TOL, what, "rel-L2 %.2e (f16 operands)%s%s", e, rc ? ": " : "", err_of(rc));
        dp_cu_blas_destroy(hb);
        cudaFree(x16), cudaFree(w16), cudaFree(dys), cudaFree(d_xs);
        free(xs), free(ys), free(refs);
    }

    cudaFree(dx), cudaFree(dnw), cudaFree(dy), cudaFree(dy2), cudaFree(db), cudaFree(dkey);
    free(x), free(nw), free(xn), free(bias), free(y0), free(ref), free(ref2), free(refu), free(h);
    free(ref_add), free(ref_gu[0]), free(ref_gu[1]);
    free_mat(&m);
    free_mat(&m2);
}

/* Three matrices in one launch (the Q/K/V projection): of different formats
 * (k_matvec_w's W_ANY), the Q4_K_M mix of Q4_K beside Q6_K (W_KM), the
 * IQ4_XS mix of IQ4_XS beside Q5_K (W_IX), or of one format (rows: NULL
 * for 256, 64, 96). */
void check_multi(Ctx *c, const int *types, int cols, const int *rows_in) {
    static const int rows_def[3] = {256, 64, 96};
    const int *rows = rows_in ? rows_in : rows_def;
    Mat m[3];
    memset(m, 0, sizeof m);
    int ok = 1;
    for (int j = 0; j < 3; j++) ok &= make_mat(c, &m[j], types[j], rows[j], cols) == 0;
    float *x = halloc<float>(cols);
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
    const int rc = ok ? dp_cu_matvec(&L, c->st) : -1;
    cudaStreamSynchronize(c->st);
    double worst = 0;
    for (int j = 0; j < 3; j++) {
        float *h = halloc<float>(rows[j]), *ref = halloc<float>(rows[j]);
        download(h, dy[j], rows[j]);
        ref_matvec(&m[j], x, ref);
        const double e = dp_rel_l2(h, ref, rows[j]);
        if (!(e <= worst)) worst = e;
        free(h), free(ref);
        cudaFree(dy[j]);
        free_mat(&m[j]);
    }
    if (rc) worst = INFINITY;
    char what[96];
    snprintf(what, sizeof what, "matvec 3 jobs %s+%s+%s %d+%d+%d x%d (lanes %d)", dp_type_name(types[0]),
             dp_type_name(types[1]), dp_type_name(types[2]), rows[0], rows[1], rows[2], cols, dp_cu_set.mvw_lanes);
    report(c, worst <= TOL, what, "worst rel-L2 %.2e", worst);
    cudaFree(dx);
    free(x);
}

/* The integer matvec addresses a matrix with 32-bit offsets: one of 4 GiB
 * or more gets an error naming it, before anything is read (the matrix
 * here has no memory behind it). */
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
