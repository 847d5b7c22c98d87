/* Prefill matrix products: dequantise W to f16 (exact values rounded to
 * f16), then one cuBLAS GEMM per chunk of rows on the tensor cores with f32
 * accumulation and f32 output; a matrix with a resident f16 copy (batched
 * sessions, backend.cu) goes straight to one GEMM.
 *
 * cuBLAS is loaded with dlopen the first time a CUDA session starts, so that
 * a CPU-only run of a CUDA build neither needs the library nor pays the
 * memory of mapping it. Without it, prefill falls back to one matvec per
 * position (correct, slower; see dp_cu_blas()). */
#include <dlfcn.h>

#include "kernels.cuh"

typedef cublasStatus_t (*fn_create)(cublasHandle_t *);
typedef cublasStatus_t (*fn_destroy)(cublasHandle_t);
typedef cublasStatus_t (*fn_set_stream)(cublasHandle_t, cudaStream_t);
typedef cublasStatus_t (*fn_set_workspace)(cublasHandle_t, void *, size_t);
typedef cublasStatus_t (*fn_gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                     const void *, const void *, cudaDataType, int, const void *, cudaDataType, int,
                                     const void *, void *, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);

typedef cublasStatus_t (*fn_gemm_sb)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                     const void *, const void *, cudaDataType, int, long long, const void *,
                                     cudaDataType, int, long long, const void *, void *, cudaDataType, int, long long,
                                     int, cublasComputeType_t, cublasGemmAlgo_t);

static struct {
    int tried, ok;
    fn_create create;
    fn_destroy destroy;
    fn_set_stream set_stream;
    fn_set_workspace set_workspace; /* optional */
    fn_gemm_ex gemm_ex;
    fn_gemm_sb gemm_sb; /* optional: without it products are not split */
    char why[256];
} g_blas;

static int blas_load(void) {
    if (g_blas.tried) return g_blas.ok;
    g_blas.tried = 1;
    const char *names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};
    void *h = NULL;
    for (int i = 0; i < 3 && !h; i++) h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(g_blas.why, sizeof g_blas.why, "%s", dlerror());
        return 0;
    }
    g_blas.create = (fn_create)dlsym(h, "cublasCreate_v2");
    g_blas.destroy = (fn_destroy)dlsym(h, "cublasDestroy_v2");
    g_blas.set_stream = (fn_set_stream)dlsym(h, "cublasSetStream_v2");
    g_blas.gemm_ex = (fn_gemm_ex)dlsym(h, "cublasGemmEx");
    g_blas.set_workspace = (fn_set_workspace)dlsym(h, "cublasSetWorkspace_v2");
    g_blas.gemm_sb = (fn_gemm_sb)dlsym(h, "cublasGemmStridedBatchedEx");
    g_blas.ok = g_blas.create && g_blas.destroy && g_blas.set_stream && g_blas.gemm_ex;
    if (!g_blas.ok) snprintf(g_blas.why, sizeof g_blas.why, "cuBLAS lacks an expected symbol");
    return g_blas.ok;
}

cublasHandle_t dp_cu_blas_create(void) {
    cublasHandle_t h = NULL;
    if (!blas_load() || g_blas.create(&h) != CUBLAS_STATUS_SUCCESS) return NULL;
    return h;
}

void dp_cu_blas_destroy(cublasHandle_t h) {
    if (h && g_blas.ok) g_blas.destroy(h);
}

int dp_cu_blas_workspace(cublasHandle_t h, void *ws, size_t bytes) {
    return h && g_blas.ok && g_blas.set_workspace && g_blas.set_workspace(h, ws, bytes) == CUBLAS_STATUS_SUCCESS ? 0
                                                                                                             : -1;
}

const char *dp_cu_blas_error(void) { return g_blas.why[0] ? g_blas.why : "cuBLAS initialisation failed"; }

int dp_cu_gemm(cublasHandle_t h, const DMat *W, const __half *in16, int n, float *out, int ldo, float beta,
               __half *w16, size_t w16_elems, cudaStream_t st) {
    const float one = 1.0f;
    if (!h) return dp_set_error(DP_ERR_BACKEND, "cuBLAS is not available: %s", dp_cu_blas_error());
    if (W->w16) { /* the resident copy: one product, nothing to dequantise */
        w16 = (__half *)W->w16;
        w16_elems = (size_t)W->rows * (size_t)W->cols;
    }
    int chunk = (int)(w16_elems / (size_t)W->cols);
    if (chunk < 1) return dp_set_error(DP_ERR_BACKEND, "CUDA GEMM: scratch too small for rows of %d", W->cols);
    if (chunk > W->rows) chunk = W->rows;
    if (g_blas.set_stream(h, st) != CUBLAS_STATUS_SUCCESS)
        return dp_set_error(DP_ERR_BACKEND, "cuBLAS: set stream failed");
    for (int r0 = 0; r0 < W->rows; r0 += chunk) {
        int nr = W->rows - r0 < chunk ? W->rows - r0 : chunk;
        int rc = W->w16 ? DP_OK : dp_cu_dequant_f16(W, r0, nr, w16, st);
        if (rc) return rc;
        cublasStatus_t bs = g_blas.gemm_ex(h, CUBLAS_OP_T, CUBLAS_OP_N, nr, n, W->cols, &one, w16, CUDA_R_16F,
                                           W->cols, in16, CUDA_R_16F, W->cols, &beta, out + r0, CUDA_R_32F, ldo,
                                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return dp_set_error(DP_ERR_BACKEND, "cuBLAS: GEMM %d x %d x %d failed (status %d)", nr, n, W->cols,
                                (int)bs);
    }
    return DP_OK;
}

int dp_cu_gemm_parts_ok(void) { return g_blas.ok && g_blas.gemm_sb; }

int dp_cu_gemm_parts(cublasHandle_t h, const DMat *W, const __half *in16, int n, float *part, int ldo,
                     long long pstride, int parts, cudaStream_t st) {
    const float one = 1.0f, zero = 0.0f;
    if (!h || !dp_cu_gemm_parts_ok() || !W->w16 || parts < 1 || W->cols % (8 * parts))
        return dp_set_error(DP_ERR_BACKEND, "CUDA GEMM: no split product of %d x %d in %d parts", W->rows, W->cols,
                            parts);
    if (g_blas.set_stream(h, st) != CUBLAS_STATUS_SUCCESS)
        return dp_set_error(DP_ERR_BACKEND, "cuBLAS: set stream failed");
    const int kc = W->cols / parts;
    cublasStatus_t bs = g_blas.gemm_sb(h, CUBLAS_OP_T, CUBLAS_OP_N, W->rows, n, kc, &one, W->w16, CUDA_R_16F, W->cols,
                                       kc, in16, CUDA_R_16F, W->cols, kc, &zero, part, CUDA_R_32F, ldo, pstride, parts,
                                       CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (bs != CUBLAS_STATUS_SUCCESS)
        return dp_set_error(DP_ERR_BACKEND, "cuBLAS: GEMM %d x %d x %d in %d parts failed (status %d)", W->rows, n,
                            W->cols, parts, (int)bs);
    return DP_OK;
}
