/* Which launches the decode matvec takes as k_matvec_l 8x2 (balanced items)
 * rather than k_matvec_w, on the host (no GPU needed), for the shapes the
 * rule was measured on (BENCHMARKS.md), on an H200's resident warps (132
 * SMs x 2 CTAs x 8 warps): more than one round of k_matvec_w's groups and
 * either idle lanes in its chunks or rows too long to hold x in registers. */
#include "cuda/kernels/kernels.cuh"

#include "doppler.h"
extern "C" {
#include "testlib.h"
}

/* a launch: its matrices' rows, units a row, gate/up or not, and the shape auto must take */
struct Case {
    const char *what;
    int rows[3], U, njobs, gu, balanced;
};
static const Case cases[] = {
    /* rows of 64 units or more fill k_matvec_w's chunks but cannot hold x in registers */
    {"Qwen3-4B o", {2560}, 64, 1, 0, 1},
    {"Qwen3-8B Q/K/V", {4096, 1024, 1024}, 64, 3, 0, 1},
    {"Qwen3-8B gate/up", {12288, 12288}, 64, 2, 1, 1},
    {"Qwen3-8B down", {4096}, 192, 1, 0, 1},
    /* idle lanes in the chunks */
    {"Qwen3-4B Q/K/V", {4096, 1024, 1024}, 40, 3, 0, 1},
    {"Qwen3-4B down", {2560}, 152, 1, 0, 1},
    {"Gemma-3-1B gate/up", {6912, 6912}, 18, 2, 1, 1},
    /* 32-unit rows hold x in registers: k_matvec_w */
    {"Qwen2.5-3B gate/up", {11008, 11008}, 32, 2, 1, 0},
    {"Qwen2.5-3B Q/K/V", {2048, 256, 256}, 32, 3, 0, 0},
    /* one round of groups: every group a warp of its own */
    {"Qwen2.5-3B down", {2048}, 172, 1, 0, 0},
    {"Qwen2.5-3B o", {2048}, 32, 1, 0, 0},
    {"Gemma-3-1B down", {1152}, 108, 1, 0, 0},
};

int main(void) {
    t_seed();
    dp_cu_set.mvw_pairs = 32; /* the default: (row, unit) pairs per k_matvec_w group */
    const long long nw = 132LL * 2 * 8;
    for (const Case &c : cases) {
        const int U[3] = {c.U, c.U, c.U};
        const int got = dp_cu_mv_balanced(c.rows, U, c.njobs, c.gu, nw);
        CHECKF(got == c.balanced, "%s (%d units a row): %s, want %s", c.what, c.U, got ? "8x2" : "w",
               c.balanced ? "8x2" : "w");
    }
    return t_done("test_cuda_matvec_shape");
}
