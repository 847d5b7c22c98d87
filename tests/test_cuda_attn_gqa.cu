/* k_attn_gqa's slice count on the host (no GPU needed): the slices per KV
 * head never make a larger grid than k_attn_split's for the same step (KV
 * heads x slices <= query heads x k_attn_split's slices), take the whole
 * DOPPLER_CUDA_ATTN_GQA_MUL where G allows it, and stay within the scratch
 * and GQ_MAXS (128). */
#include "cuda/kernels/kernels.cuh"

#include "doppler.h"
extern "C" {
#include "testlib.h"
}

int main(void) {
    t_seed();
    for (int mul = 1; mul <= 8; mul++) {
        dp_cu_set.gqa_mul = mul;
        for (int G = 2; G <= 8; G++)
            for (int slices = 2; slices <= 64; slices *= 2) {
                const int splits = t_rand_int(0, 3) ? 1024 : t_rand_int(2, 256);
                const int S = dp_cu_gqa_slices(slices, G, splits);
                CHECKF(S >= 1 && S <= slices * G, "mul %d G %d slices %d: %d slices a KV head, more than %d", mul, G,
                       slices, S, slices * G);
                CHECKF(S <= 128 && (S == 1 || S <= splits), "mul %d G %d slices %d splits %d: %d slices", mul, G,
                       slices, splits, S);
                const int want = slices * (mul < G ? mul : G);
                if (want <= 128 && want <= splits)
                    CHECKF(S == want, "mul %d G %d slices %d: %d slices, not %d", mul, G, slices, S, want);
            }
    }
    return t_done("test_cuda_attn_gqa");
}
