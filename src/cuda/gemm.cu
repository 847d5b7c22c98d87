/* Prefill matrix products: dequantise W to f16 (exact values rounded to
 * f16), then one cuBLAS GEMM per chunk of rows on the tensor cores with f32
 * accumulation and f32 output. */
#include "kernels.cuh"

int dp_cu_gemm(cublasHandle_t h, const DMat *W, const __half *in16, int n, float *out, int ldo, float beta,
               __half *w16, size_t w16_elems, cudaStream_t st) {
    const float one = 1.0f;
    int chunk = (int)(w16_elems / (size_t)W->cols);
    if (chunk < 1) return dp_set_error(DP_ERR_BACKEND, "CUDA GEMM: scratch too small for rows of %d", W->cols);
    if (chunk > W->rows) chunk = W->rows;
    if (cublasSetStream(h, st) != CUBLAS_STATUS_SUCCESS) return dp_set_error(DP_ERR_BACKEND, "cuBLAS: set stream failed");
    for (int r0 = 0; r0 < W->rows; r0 += chunk) {
        int nr = W->rows - r0 < chunk ? W->rows - r0 : chunk;
        int rc = dp_cu_dequant_f16(W, r0, nr, w16, st);
        if (rc) return rc;
        cublasStatus_t bs = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, nr, n, W->cols, &one, w16, CUDA_R_16F, W->cols,
                                         in16, CUDA_R_16F, W->cols, &beta, out + r0, CUDA_R_32F, ldo,
                                         CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        if (bs != CUBLAS_STATUS_SUCCESS)
            return dp_set_error(DP_ERR_BACKEND, "cuBLAS: GEMM %d x %d x %d failed (status %d)", nr, n, W->cols,
                                (int)bs);
    }
    return DP_OK;
}
