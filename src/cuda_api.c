/* Entry points of the CUDA backend that exist in every build: without CUDA
 * support compiled in they report that clearly (src/cuda/ has the real ones). */
#include "doppler.h"
#include "util.h"

#ifndef DOPPLER_HAVE_CUDA
int dp_cuda_selftest(FILE *out, uint64_t seed, int flags) {
    (void)out;
    (void)seed;
    (void)flags;
    return dp_set_error(DP_ERR_BACKEND, "this build has no CUDA support (configure with -DDOPPLER_CUDA=ON where "
                                        "nvcc is installed)");
}
#endif
