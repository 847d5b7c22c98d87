/* doppler verify's per-op checks in a build without the CUDA backend. */
#include "util.h"
#include "verify/ops.h"

int verify_ops(FILE *out, uint64_t seed, int flags) {
    (void)out, (void)seed, (void)flags;
    return dp_set_error(DP_ERR_BACKEND, "this build has no CUDA support (configure with -DDOPPLER_CUDA=ON where "
                                        "nvcc is installed)");
}
