/* The x86 kernel table, written once for a vector of KVL floats:
 * kernels_avx2.c includes this with KVL 8 (AVX2/FMA/F16C), kernels_avx512.c
 * with KVL 16 (AVX-512 F/BW/VL). Each of those files is compiled with its
 * own target flags and is only called after the run-time CPU check
 * (kernels.c). The kernels live in x86/, one header per job:
 *
 *   vec.h         the vector layer (vf, vload, vfma, ...) and element loaders
 *   unpack.h      quantised block layouts to int8 codes / scaled weights
 *   matvec.h      float-activation matvec, every type, 1..DP_NX_MAX positions
 *   matvec_int.h  integer matvec on activations quantised by actq.c
 *   matvec_kq.h   its super-block types (K-quants, IQ4_XS; included by
 *                 matvec_int.h)
 *   iq23.h        IQ2 / IQ3 (grid) types: integer matvec on that
 *                 machinery, dequantisation, float matvec
 *   screen.h      8-bit screening of an LM head (VNNI only, lm_screen.c)
 *   actq.h        the activation quantiser's block kernel
 *   dequant.h     rows of weights to float32 (the blocked matmul's panels)
 *   gemm.h        the blocked matmul's float tile kernel
 *   igemm.h       its integer tile kernel (VNNI only)
 *   elementwise.h dot, axpy, weighted row sums, softmax exp, gated
 *                 activations, sum of squares */
#include "x86/actq.h"
#include "x86/dequant.h"
#include "x86/elementwise.h"
#include "x86/gemm.h"
#include "x86/igemm.h"
#include "x86/matvec.h"
#include "x86/matvec_int.h"
#include "x86/iq23.h"
#include "x86/screen.h"

const dp_cpu_kernels KTABLE = {
    .name = KNAME,
    .isa = KISA,
    .matvec = {[DP_TYPE_F32] = mv_f32, [DP_TYPE_F16] = mv_f16, [DP_TYPE_BF16] = mv_bf16, [DP_TYPE_Q4_0] = mv_q4_0,
               [DP_TYPE_Q4_1] = mv_q4_1, [DP_TYPE_Q5_0] = mv_q5_0, [DP_TYPE_Q5_1] = mv_q5_1,
               [DP_TYPE_Q8_0] = mv_q8_0, [DP_TYPE_Q4_K] = mv_q4_k, [DP_TYPE_Q5_K] = mv_q5_k,
               [DP_TYPE_Q6_K] = mv_q6_k, [DP_TYPE_IQ4_NL] = mv_iq4_nl, [DP_TYPE_IQ4_XS] = mv_iq4_xs,
               [DP_TYPE_IQ2_XXS] = mv_iq2_xxs, [DP_TYPE_IQ2_XS] = mv_iq2_xs, [DP_TYPE_IQ2_S] = mv_iq2_s,
               [DP_TYPE_IQ3_XXS] = mv_iq3_xxs, [DP_TYPE_IQ3_S] = mv_iq3_s},
    .dequant = {[DP_TYPE_F16] = dq_f16, [DP_TYPE_BF16] = dq_bf16, [DP_TYPE_Q4_0] = dq_q4_0, [DP_TYPE_Q4_1] = dq_q4_1,
                [DP_TYPE_Q5_0] = dq_q5_0, [DP_TYPE_Q5_1] = dq_q5_1, [DP_TYPE_Q8_0] = dq_q8_0,
                [DP_TYPE_Q2_K] = dq_q2_k, [DP_TYPE_Q3_K] = dq_q3_k, [DP_TYPE_Q4_K] = dq_q4_k,
                [DP_TYPE_Q5_K] = dq_q5_k, [DP_TYPE_Q6_K] = dq_q6_k, [DP_TYPE_IQ4_NL] = dq_iq4_nl,
                [DP_TYPE_IQ4_XS] = dq_iq4_xs, [DP_TYPE_IQ2_XXS] = dq_iq2_xxs, [DP_TYPE_IQ2_XS] = dq_iq2_xs,
                [DP_TYPE_IQ2_S] = dq_iq2_s, [DP_TYPE_IQ3_XXS] = dq_iq3_xxs, [DP_TYPE_IQ3_S] = dq_iq3_s},
    .matvec_q = {[DP_TYPE_Q4_0] = mvq_q4_0, [DP_TYPE_Q4_1] = mvq_q4_1, [DP_TYPE_Q5_0] = mvq_q5_0,
                 [DP_TYPE_Q5_1] = mvq_q5_1, [DP_TYPE_Q8_0] = mvq_q8_0, [DP_TYPE_Q2_K] = mvq_q2_k,
                 [DP_TYPE_Q3_K] = mvq_q3_k, [DP_TYPE_Q4_K] = mvq_q4_k,
                 [DP_TYPE_Q5_K] = mvq_q5_k, [DP_TYPE_Q6_K] = mvq_q6_k, [DP_TYPE_IQ4_NL] = mvq_iq4_nl,
                 [DP_TYPE_IQ4_XS] = mvq_iq4_xs, [DP_TYPE_IQ2_XXS] = mvq_iq2_xxs, [DP_TYPE_IQ2_XS] = mvq_iq2_xs,
                 [DP_TYPE_IQ2_S] = mvq_iq2_s, [DP_TYPE_IQ3_XXS] = mvq_iq3_xxs, [DP_TYPE_IQ3_S] = mvq_iq3_s},
    SCREEN_TABLE
    IGEMM_TABLE
    .xq_block = xq_block,
    .xq_quads = xq_quads,
    .gemm = gemm,
    .gemm_w16 = gemm_w16,
    .dot = dot,
    .axpy = axpy,
    .wsum = wsum,
    .wsum_x16 = wsum_x16,
    .scale = scale,
    .maxv = maxv,
    .exp_sum = exp_sum,
    .silu_mul = silu_mul,
    .gelu_mul = gelu_mul,
    .sumsq = sumsq,
};
