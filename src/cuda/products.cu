/* The matrix products of a CUDA forward pass (Pass, state.cuh): y = W x
 * for the pass's n rows as a matvec for one row, k_mmv for up to 64 rows
 * of the formats it takes, else a cuBLAS GEMM on the resident f16 copies
 * (the rows padded to the session's GEMM buckets); a GEMM of few rows split
 * into k-parts where one would leave most SMs idle; several matrices whose
 * copies lie side by side as one (joint). forward.cu's layers call them. */
#include <string.h>

#include "state.cuh"

MvLaunch launch_of(const DMat &w, float *y, const float *bias, const float *x, int mode) {
    MvLaunch L;
    memset(&L, 0, sizeof L);
    L.job[0] = {w, y, bias};
    L.njobs = 1;
    L.x = x;
    L.cols = w.cols;
    L.mode = mode;
    return L;
}

/* k_mmv of W over n rows of x16 into y (rows of W.rows). */
MmLaunch mm_launch(const CudaState *cs, const DMat &W, const __half *x16, int n, float *y, int mode,
                   const float *bias) {
    MmLaunch M;
    memset(&M, 0, sizeof M);
    M.w[0] = W, M.y[0] = y, M.bias[0] = bias, M.njobs = 1;
    M.x16 = x16, M.nb = n, M.mode = mode;
    M.part = cs->mm_part, M.part_cap = cs->mm_part_cap, M.counters = cs->mm_counters, M.n_counters = cs->n_mm_counters;
    return M;
}

/* Whether a pass of n rows multiplies W through its resident f16 copy (a
 * GEMM) rather than k_mmv: in sessions of several sequences from
 * DOPPLER_CUDA_F16_ROWS rows on, where the tensor cores at full rate on f16
 * weights beat k_mmv's dequantisation; in a session of one from more rows
 * (backend.cu f16_copies: SOLO_F16_ROWS). The matrices k_mmv multiplies with
 * exact weights (its K-quant form) stay on it longer, from
 * DOPPLER_CUDA_F16_ROWS_K rows: one n-tile of its exact form is faster
 * than the GEMM. */
static int f16_rows(const CudaState *cs, const DMat &W, int n) {
    return W.w16 && n >= (dp_cu_mmv_exact(W.type, n) ? cs->f16_min_rows_k : cs->f16_min_rows);
}

/* The columns a GEMM on the resident f16 copies computes for n rows: n
 * padded to its bucket (DOPPLER_CUDA_GEMM_BUCKETS) where the output holds
 * cap rows. cuBLAS picks a kernel per shape and loads each kernel at its
 * first use, milliseconds that a prompt of a new length would wait for;
 * with the buckets every shape is one that session start ran
 * (cu_warm_gemms). The extra columns read stale rows of x16 and write
 * rows past n that nothing reads. */
static int gemm_cols(const CudaState *cs, int n, int cap) {
    if (!dp_cu_set.gemm_buckets) return n;
    const int b = cu_gemm_bucket(n);
    return b <= cap && b <= cs->rows_cap ? b : n;
}

int cu_gemm_bucket(int n) {
    if (n <= 64) {
        int b = 1;
        while (b < n) b *= 2;
        return b;
    }
    const int step = n <= 512 ? 64 : 256;
    return (n + step - 1) / step * step;
}

/* y (+)= W x16 (+ bias) for n rows through W's resident f16 copy (or its
 * dequantised chunks when it has none): a cuBLAS GEMM over the rows'
 * bucket (y holds cap rows), the bias by a launch of its own. */
int f16_product(Pass &p, const DMat &W, int n, float *y, int cap, int accumulate, const float *bias) {
    CudaState *cs = p.cs;
    const int cols = W.w16 ? gemm_cols(cs, n, cap) : n;
    TRY(dp_cu_gemm(cs->blas, &W, p.x16, cols, y, W.rows, accumulate ? 1.0f : 0.0f, cs->w16, cs->w16_elems, p.st));
    if (bias) TRY(dp_cu_add_bias(y, bias, n, W.rows, p.st));
    return DP_OK;
}

/* The k-parts a product of W over n rows is split into (0: not split):
 * untraced passes of at most KPART_ROWS rows on W's resident f16 copy,
 * where cuBLAS's tiles over W's rows alone leave most SMs idle. */
int split_parts(const Pass &p, const DMat &W, int n) {
    const int S = dp_cu_set.split_k;
    if (S < 2 || p.tracing || !p.cs->kpart || n > KPART_ROWS || !f16_rows(p.cs, W, n) || W.rows > p.cs->kpart_ld ||
        W.cols % (8 * S) || !dp_cu_gemm_parts_ok())
        return 0;
    return S;
}

/* W x16 for n rows as S k-parts into cs->kpart (rows of W.rows floats). */
int split_product(Pass &p, const DMat &W, int n, int S, KParts *kp) {
    CudaState *cs = p.cs;
    const long long stride = (long long)KPART_ROWS * W.rows;
    TRY(dp_cu_gemm_parts(cs->blas, &W, p.x16, gemm_cols(cs, n, KPART_ROWS), cs->kpart, W.rows, stride, S, p.st));
    *kp = {cs->kpart, S, W.rows, stride};
    return DP_OK;
}

/* Matrices W[0 .. nj - 1] as one f16 matrix *J (their rows one after
 * another), for one GEMM of a pass of n rows instead of nj: where each
 * one's resident copy serves n rows and the copies lie side by side
 * (f16_copies lays out a layer's matrices in order) with the same width.
 * A session of one sequence takes it traced or not (its trace points read
 * the joint rows), so that a traced prompt multiplies as an untraced one
 * does: cuBLAS may sum a GEMM of other rows in another order. A batched
 * session's traced pass multiplies each matrix alone. */
int joint(const Pass &p, const DMat *const *W, int nj, int n, DMat *J) {
    if (!dp_cu_set.batch_fuse || (p.tracing && p.cs->batched) || !p.cs->blas || n < 2) return 0;
    *J = *W[0];
    for (int j = 0; j < nj; j++) {
        if (!f16_rows(p.cs, *W[j], n) || W[j]->cols != J->cols) return 0;
        if (j && W[j]->w16 != W[j - 1]->w16 + (size_t)W[j - 1]->rows * (size_t)W[j - 1]->cols) return 0;
        if (j) J->rows += W[j]->rows;
    }
    return 1;
}

/* Whether k_mmv takes every one of the nj matrices for n rows. */
int mm_all(const CudaState *cs, const DMat *const *W, int nj, int n) {
    int ok = 1;
    for (int j = 0; j < nj; j++) ok &= dp_cu_mmv_ok(W[j]->type, n) && !f16_rows(cs, *W[j], n);
    return ok;
}

/* y_j = W_j x16 (stored, biases added) for n rows and nj matrices that
 * k_mmv takes, the consecutive ones of one format and width in one launch;
 * ld: floats between a row's outputs and the next row's (0: W_j's rows). */
int mm_jobs(Pass &p, const DMat *const *W, float *const *y, const float *const *bias, int nj, int n, int ld) {
    for (int j = 0; j < nj;) {
        MmLaunch M = mm_launch(p.cs, *W[j], p.x16, n, y[j], MV_STORE, bias[j]);
        M.ldy = ld;
        int k = j + 1;
        for (; k < nj && W[k]->type == W[j]->type && W[k]->cols == W[j]->cols; k++)
            M.w[k - j] = *W[k], M.y[k - j] = y[k], M.bias[k - j] = bias[k], M.njobs++;
        TRY(dp_cu_mmv(&M, p.st));
        j = k;
    }
    return DP_OK;
}

/* y = W x for n positions: a matvec for one, k_mmv for up to 64 rows of
 * the formats it takes (unless the resident f16 copy serves n rows), else
 * the f16 GEMM; both read x16 (which must hold x as f16). accumulate adds
 * into y. */
int matmul(Pass &p, const DMat &W, const float *x, int n, float *y, int accumulate, const float *bias) {
    CudaState *cs = p.cs;
    if (n == 1) {
        const MvLaunch L = launch_of(W, y, accumulate ? NULL : bias, x, accumulate ? MV_ADD : MV_STORE);
        return dp_cu_matvec(&L, p.st);
    }
    if (dp_cu_mmv_ok(W.type, n) && !f16_rows(p.cs, W, n)) {
        const MmLaunch M = mm_launch(cs, W, p.x16, n, y, accumulate ? MV_ADD : MV_STORE, accumulate ? NULL : bias);
        return dp_cu_mmv(&M, p.st);
    }
    if (!cs->blas) { /* no cuBLAS: one matvec per position (x holds the f32 rows) */
        for (int t = 0; t < n; t++)
            TRY(matmul(p, W, x + (size_t)t * W.cols, 1, y + (size_t)t * W.rows, accumulate, bias));
        return DP_OK;
    }
    return f16_product(p, W, n, y, y == cs->logits ? cs->logit_rows : cs->rows_cap, accumulate, bias);
}
