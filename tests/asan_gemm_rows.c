/* The sanitizer builds' check that the uninstrumented float tile products
 * still report a bad row (src/cpu/kernels.h, DP_ASAN_BULK): every level's
 * gemm gets a weight matrix one float short, in fresh random shapes, and
 * must stop with ASan's heap-buffer-overflow report. ctest passes it on that
 * report (CMakeLists.txt); running to the end is the failure. argv[1]: the
 * level (scalar, avx2, avx512); one this CPU lacks is
 * skipped (77). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "testlib.h"

int main(int argc, char **argv) {
    t_seed();
    dp_isa isa = DP_ISA_SCALAR;
    for (int i = 0; i < DP_ISA_COUNT; i++)
        if (argc > 1 && strcmp(argv[1], dp_isa_name((dp_isa)i)) == 0) isa = (dp_isa)i;
    const dp_cpu_kernels *k = dp_cpu_kernels_for(isa);
    if (!k || !k->gemm) {
        printf("%s: not on this CPU\n", dp_isa_name(isa));
        return 77;
    }
    int R = t_rand_int(1, 10), P = t_rand_int(1, 8), K = t_rand_int(1, 300);
    float *W = malloc(sizeof(float) * ((size_t)R * K - 1)), *X = malloc(sizeof(float) * (size_t)P * K),
          *C = malloc(sizeof(float) * (size_t)P * R);
    for (int i = 0; i < R * K - 1; i++) W[i] = t_rand_normal();
    for (int i = 0; i < P * K; i++) X[i] = t_rand_normal();
    printf("%s gemm: R %d P %d K %d, W one float short\n", dp_isa_name(isa), R, P, K);
    fflush(stdout);
    k->gemm(W, K, R, X, K, P, K, C, R, 0);
    printf("no report: the check did not fire\n");
    free(W), free(X), free(C);
    return 1;
}
