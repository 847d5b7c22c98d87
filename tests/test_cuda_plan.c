/* The CUDA decode matvec's work plan on the host: k_matvec_s's stages, bulk
 * copies (alignment, bounds, no overlap) and unit arithmetic, emulated on
 * the CPU over random matrices in the device layout, against float64
 * (dp_cuda_selftest with flag 2; needs a CUDA build, not a GPU). Fresh
 * random inputs each run (the seed is printed). */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "doppler.h"
#include "testlib.h"

int main(void) {
    const uint64_t seed = (uint64_t)time(NULL) * 2654435761u ^ (uint64_t)clock();
    printf("seed %llu\n", (unsigned long long)seed);
    int rc = dp_cuda_selftest(stdout, seed, 2);
    if (rc < 0) {
        if (strstr(dp_last_error(), "no CUDA support")) t_skip("%s", dp_last_error());
        CHECKF(0, "plan check: %s", dp_last_error());
    } else {
        CHECKF(rc == 0, "%d plan checks failed (seed %llu)", rc, (unsigned long long)seed);
    }
    return t_done("test_cuda_plan");
}
