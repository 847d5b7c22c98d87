/* verify: the kernels of batched decode against the CPU: k_mmv (one
 * matrix times up to 64 rows of x on the tensor cores, split-K and not,
 * stored with a bias, added, with each row's argmax) against a float64
 * product of the same weights, and the KV page copy of copy on write. */
#include "verify.cuh"

/* y = W x in float64 over x rounded to f16 once and W rounded likewise, as
 * k_mmv's tensor cores and the f16 copies' GEMMs take them, or exact where
 * k_mmv keeps the weights exact (dp_cu_mmv_exact). */
static void ref_matvec_f16(const Mat *m, const float *x, float *y, int exact_w) {
    for (int r = 0; r < m->rows; r++) {
        double s = 0;
        const float *w = m->deq + (size_t)r * m->cols;
        for (int k = 0; k < m->cols; k++) {
            const double wk = exact_w ? (double)w[k] : (double)__half2float(__float2half_rn(w[k]));
            s += wk * (double)__half2float(__float2half_rn(x[k]));
        }
        y[r] = (float)s;
    }
}

void check_mmv(Ctx *c, int type, int rows, int cols, int nb) {
    char what[128];
    snprintf(what, sizeof what, "mmv %s %dx%d x %d rows", dp_type_name(type), rows, cols, nb);
    Mat m;
    memset(&m, 0, sizeof m);
    if (make_mat(c, &m, type, rows, cols)) {
        report(c, 0, what, "upload failed: %s", dp_last_error());
        free_mat(&m);
        return;
    }
    const size_t nx = (size_t)nb * cols, ny = (size_t)nb * rows;
    float *x = halloc<float>(nx), *bias = halloc<float>(rows), *y0 = halloc<float>(ny), *ref = halloc<float>(ny);
    float *h = halloc<float>(ny);
    for (size_t i = 0; i < nx; i++) x[i] = c->rng.normal();
    for (int i = 0; i < rows; i++) bias[i] = c->rng.normal();
    for (size_t i = 0; i < ny; i++) y0[i] = c->rng.normal();
    for (int b = 0; b < nb; b++) ref_matvec(&m, x + (size_t)b * cols, ref + (size_t)b * rows);
    float *dx = dalloc<float>(nx), *dy = dalloc<float>(ny), *db = dalloc<float>(rows);
    const size_t cap = (size_t)16 * nb * rows;
    const int tiles = (rows + 127) / 128;
    float *dpart = dalloc<float>(cap);
    int *dcnt = dalloc<int>(tiles);
    unsigned long long *dkeys = dalloc<unsigned long long>(nb), *hkeys = halloc<unsigned long long>(nb);
    __half *x16 = dalloc<__half>(nx);
    cudaMemset(dcnt, 0, sizeof(int) * tiles);
    upload(dx, x, nx);
    upload(db, bias, rows);
    dp_cu_to_f16(x16, dx, (long long)nx, c->st);
    MmLaunch M;
    memset(&M, 0, sizeof M);
    M.w[0] = m.dev, M.y[0] = dy, M.njobs = 1;
    M.x16 = x16, M.nb = nb, M.part = dpart, M.part_cap = cap, M.counters = dcnt, M.n_counters = tiles;
    double e_store = 0, e_add = 0, e_key = 0, e_f16 = 0;
    int rc = 0, wrong = 0;
    /* the operands' own product, on the shapes small enough to compute it
     * twice: each weight rounded once (or exact), within the f32 sums' error */
    const int f16_ref = (size_t)rows * cols * nb <= ((size_t)1 << 26), exact_w = dp_cu_mmv_exact(type, nb);
    float *ref16 = f16_ref ? halloc<float>(ny) : NULL;
    for (int b = 0; f16_ref && b < nb; b++)
        ref_matvec_f16(&m, x + (size_t)b * cols, ref16 + (size_t)b * rows, exact_w);
    /* stored with the bias (split-K where it chooses to), twice: the counters reset */
    for (int rep = 0; rep < 2 && !rc; rep++) {
        M.mode = MV_STORE, M.bias[0] = db;
        cudaMemset(dy, 0xFF, sizeof(float) * ny);
        rc = dp_cu_mmv(&M, c->st);
        cudaStreamSynchronize(c->st);
        download(h, dy, ny);
        for (int b = 0; b < nb; b++)
            for (int r = 0; r < rows; r++) h[(size_t)b * rows + r] -= bias[r];
        const double e = dp_rel_l2(h, ref, ny);
        if (!(e <= e_store)) e_store = e;
        const double e16 = f16_ref ? dp_rel_l2(h, ref16, ny) : 0.0;
        if (!(e16 <= e_f16)) e_f16 = e16;
    }
    /* added to y */
    if (!rc) {
        M.mode = MV_ADD, M.bias[0] = NULL;
        upload(dy, y0, ny);
        rc = dp_cu_mmv(&M, c->st);
        cudaStreamSynchronize(c->st);
        download(h, dy, ny);
        for (size_t i = 0; i < ny; i++) h[i] -= y0[i];
        e_add = dp_rel_l2(h, ref, ny);
    }
    /* stored, each row's argmax (the LM head of a batched step) */
    if (!rc) {
        M.mode = MV_STORE, M.argmax_keys = dkeys;
        cudaMemset(dkeys, 0, sizeof(unsigned long long) * nb);
        cudaMemset(dy, 0xFF, sizeof(float) * ny);
        rc = dp_cu_mmv(&M, c->st);
        cudaStreamSynchronize(c->st);
        download(h, dy, ny);
        download(hkeys, dkeys, nb);
        e_key = dp_rel_l2(h, ref, ny);
        for (int b = 0; b < nb; b++) {
            const float *yb = h + (size_t)b * rows;
            int best = 0;
            for (int r = 1; r < rows; r++)
                if (yb[r] > yb[best]) best = r;
            wrong += key_token(hkeys[b]) != best;
        }
    }
    double e = e_store > e_add ? e_store : e_add;
    e = e > e_key ? e : e_key;
    report(c, !rc && e <= TOL && e_f16 <= TOL_EXACT && !wrong, what,
           "rel-L2 store %.2e add %.2e argmax run %.2e, to the product of x in f16 and the weights %s %.2e (limit "
           "%.0e), %d rows' argmax wrong%s%s",
           e_store, e_add, e_key, exact_w ? "exact" : "in f16", e_f16, TOL_EXACT, wrong, rc ? ": " : "",
           rc ? dp_last_error() : "");
    cudaFree(dx), cudaFree(dy), cudaFree(db), cudaFree(dpart), cudaFree(dcnt), cudaFree(dkeys), cudaFree(x16);
    free(x), free(bias), free(y0), free(ref), free(h), free(hkeys), free(ref16);
    free_mat(&m);
}

/* Three matrices of one format and width in one launch (a layer's Q/K/V),
 * split-K, each with its bias; joint: their outputs side by side in one
 * buffer of rows [nb][512 + 64 + 200] (MmLaunch.ldy, the joint Q/K/V
 * layout the fused RoPE reads). */
void check_mmv_jobs(Ctx *c, int type, int nb, int joint) {
    const int cols = 1024, rows[3] = {512, 64, 200}, ld = rows[0] + rows[1] + rows[2];
    char what[112];
    snprintf(what, sizeof what, "mmv %s 3 jobs %d/%d/%dx%d x %d rows%s", dp_type_name(type), rows[0], rows[1],
             rows[2], cols, nb, joint ? ", joint output" : "");
    Mat m[3];
    memset(m, 0, sizeof m);
    int ok = 1;
    for (int j = 0; j < 3; j++) ok &= make_mat(c, &m[j], type, rows[j], cols) == 0;
    const size_t nx = (size_t)nb * cols, cap = (size_t)16 * nb * ld;
    float *x = halloc<float>(nx), *dx = dalloc<float>(nx), *dpart = dalloc<float>(cap);
    float *dj = dalloc<float>((size_t)nb * ld), *hj = halloc<float>((size_t)nb * ld);
    __half *x16 = dalloc<__half>(nx);
    int *dcnt = dalloc<int>(16);
    cudaMemset(dcnt, 0, 16 * sizeof(int));
    for (size_t i = 0; i < nx; i++) x[i] = c->rng.normal();
    upload(dx, x, nx);
    dp_cu_to_f16(x16, dx, (long long)nx, c->st);
    MmLaunch M;
    memset(&M, 0, sizeof M);
    float *dy[3], *hb[3], *db[3];
    for (int j = 0, off = 0; j < 3; off += rows[j], j++) {
        dy[j] = joint ? dj + off : dalloc<float>((size_t)nb * rows[j]);
        db[j] = dalloc<float>(rows[j]), hb[j] = halloc<float>(rows[j]);
        for (int r = 0; r < rows[j]; r++) hb[j][r] = c->rng.normal();
        upload(db[j], hb[j], rows[j]);
        M.w[j] = m[j].dev, M.y[j] = dy[j], M.bias[j] = db[j];
    }
    M.njobs = 3, M.x16 = x16, M.nb = nb, M.mode = MV_STORE, M.part = dpart, M.part_cap = cap, M.counters = dcnt;
    M.n_counters = 16, M.ldy = joint ? ld : 0;
    const int rc = ok ? dp_cu_mmv(&M, c->st) : -1;
    cudaStreamSynchronize(c->st);
    if (joint) download(hj, dj, (size_t)nb * ld);
    double worst = 0;
    for (int j = 0, off = 0; j < 3; off += rows[j], j++) {
        const size_t ny = (size_t)nb * rows[j];
        float *h = halloc<float>(ny), *ref = halloc<float>(ny);
        if (joint)
            for (int b = 0; b < nb; b++) memcpy(h + (size_t)b * rows[j], hj + (size_t)b * ld + off, rows[j] * sizeof(float));
        else
            download(h, dy[j], ny);
        for (int b = 0; b < nb; b++) {
            ref_matvec(&m[j], x + (size_t)b * cols, ref + (size_t)b * rows[j]);
            for (int r = 0; r < rows[j]; r++) h[(size_t)b * rows[j] + r] -= hb[j][r];
        }
        const double e = rc ? INFINITY : dp_rel_l2(h, ref, ny);
        if (!(e <= worst)) worst = e;
        free(h), free(ref);
        if (!joint) cudaFree(dy[j]);
        cudaFree(db[j]), free(hb[j]);
        free_mat(&m[j]);
    }
    report(c, worst <= TOL, what, "worst job rel-L2 %.2e%s%s", worst, rc ? ": " : "", rc ? dp_last_error() : "");
    cudaFree(dx), cudaFree(dpart), cudaFree(x16), cudaFree(dcnt), cudaFree(dj);
    free(x), free(hj);
}

/* Copy on write: page src to dst in every layer of the K and V pools,
 * nothing else touched. */
void check_copy_page(Ctx *c) {
    const int L = 3, pages = 10, ps = 64, KV = 256, src = 3, dst = 7;
    const size_t page = (size_t)ps * KV, layer = pages * page, n = L * layer;
    uint16_t *hk = halloc<uint16_t>(n), *hv = halloc<uint16_t>(n), *gk = halloc<uint16_t>(n), *gv = halloc<uint16_t>(n);
    for (size_t i = 0; i < n; i++) hk[i] = (uint16_t)c->rng.next(), hv[i] = (uint16_t)c->rng.next();
    __half *dk = dalloc<__half>(n), *dv = dalloc<__half>(n);
    cudaMemcpy(dk, hk, 2 * n, cudaMemcpyHostToDevice);
    cudaMemcpy(dv, hv, 2 * n, cudaMemcpyHostToDevice);
    const int rc = dp_cu_copy_page(dk, dv, L, layer, page, src, dst, c->st);
    cudaStreamSynchronize(c->st);
    cudaMemcpy(gk, dk, 2 * n, cudaMemcpyDeviceToHost);
    cudaMemcpy(gv, dv, 2 * n, cudaMemcpyDeviceToHost);
    size_t bad = 0;
    for (int l = 0; l < L; l++)
        for (size_t i = 0; i < layer; i++) {
            const size_t at = l * layer + i, from = i / page == (size_t)dst ? l * layer + src * page + i % page : at;
            bad += gk[at] != hk[from];
            bad += gv[at] != hv[from];
        }
    report(c, !rc && !bad, "kv copy page (3 layers, K and V)", "%zu values differ%s%s", bad, rc ? ": " : "",
           rc ? dp_last_error() : "");
    cudaFree(dk), cudaFree(dv);
    free(hk), free(hv), free(gk), free(gv);
}

/* Gate and up in one launch with the activation fused (MV_GATEUP): the f16
 * rows act(gate) * up against the float64 products through the CPU's
 * activation, with the k-blocks split over CTAs (the last one applies the
 * activation) and not (the up warps hand their sums to the gate warps). */
static double act_ref(int act, double g, double u) {
    if (act == DP_ACT_GELU_TANH) return 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
    return g / (1.0 + exp(-g)) * u;
}

void check_mmv_gateup(Ctx *c, int type, int rows, int cols, int nb, int act) {
    Mat m[2];
    memset(m, 0, sizeof m);
    const int ok = make_mat(c, &m[0], type, rows, cols) == 0 && make_mat(c, &m[1], type, rows, cols) == 0;
    const size_t nx = (size_t)nb * cols, ny = (size_t)nb * rows, cap = (size_t)16 * nb * 2 * rows;
    const int tiles = (rows + 63) / 64;
    float *x = halloc<float>(nx), *rg = halloc<float>(ny), *ru = halloc<float>(ny), *dx = dalloc<float>(nx);
    float *dpart = dalloc<float>(cap), *ref = halloc<float>(ny), *h = halloc<float>(ny);
    __half *x16 = dalloc<__half>(nx), *out16 = dalloc<__half>(ny), *h16 = halloc<__half>(ny);
    int *dcnt = dalloc<int>(tiles);
    cudaMemset(dcnt, 0, sizeof(int) * tiles);
    for (size_t i = 0; i < nx; i++) x[i] = c->rng.normal();
    for (int b = 0; b < nb && ok; b++) {
        ref_matvec(&m[0], x + (size_t)b * cols, rg + (size_t)b * rows);
        ref_matvec(&m[1], x + (size_t)b * cols, ru + (size_t)b * rows);
    }
    /* x scaled so that gate and up are about 1 (the random weights' products
     * reach hundreds, whose products overflow f16): the references with it */
    double ss = 0;
    for (size_t i = 0; i < ny; i++) ss += (double)rg[i] * rg[i] + (double)ru[i] * ru[i];
    const float k = ss > 0 ? (float)(1.0 / sqrt(ss / (2.0 * (double)ny))) : 1.0f;
    for (size_t i = 0; i < nx; i++) x[i] *= k;
    for (size_t i = 0; i < ny; i++) rg[i] *= k, ru[i] *= k;
    upload(dx, x, nx);
    dp_cu_to_f16(x16, dx, (long long)nx, c->st);
    for (size_t i = 0; i < ny; i++) ref[i] = (float)act_ref(act, rg[i], ru[i]);
    for (int split = 0; split < 2; split++) {
        char what[128];
        snprintf(what, sizeof what, "mmv %s gate/up + %s %dx%d x %d rows%s", dp_type_name(type),
                 act == DP_ACT_GELU_TANH ? "gelu" : "silu", rows, cols, nb, split ? ", split-K" : "");
        MmLaunch M;
        memset(&M, 0, sizeof M);
        M.w[0] = m[0].dev, M.w[1] = m[1].dev, M.njobs = 2, M.x16 = x16, M.nb = nb, M.mode = MV_GATEUP;
        M.out16 = out16, M.act = act;
        if (split) M.part = dpart, M.part_cap = cap, M.counters = dcnt, M.n_counters = tiles;
        cudaMemset(out16, 0xFF, sizeof(__half) * ny);
        const int rc = ok ? dp_cu_mmv(&M, c->st) : -1;
        cudaStreamSynchronize(c->st);
        download(h16, out16, ny);
        for (size_t i = 0; i < ny; i++) h[i] = __half2float(h16[i]);
        const double e = rc ? INFINITY : dp_rel_l2(h, ref, ny);
        report(c, e <= TOL, what, "rel-L2 %.2e%s%s", e, rc ? ": " : "", rc ? dp_last_error() : "");
    }
    cudaFree(dx), cudaFree(dpart), cudaFree(x16), cudaFree(out16), cudaFree(dcnt);
    free(x), free(rg), free(ru), free(ref), free(h), free(h16);
    free_mat(&m[0]), free_mat(&m[1]);
}
