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

static void shape(const char *what, int rows0, int rows1, int rows2, int U, int njobs, int gu, int want) {
    const int rows[3] = {rows0, rows1, rows2}, Us[3] = {U, U, U};
    const long long nw = 132LL * 2 * 8;
    const int got = dp_cu_mv_balanced(rows, Us, njobs, gu, nw);
    CHECKF(got == want, "%s (%d units a row): %s, want %s", what, U, got ? "8x2" : "w", want ? "8x2" : "w");
}

int main(void) {
    t_seed();
    dp_cu_set.mvw_pairs = 32; /* the default: (row, unit) pairs per k_matvec_w group */
    /* rows of 64 units or more fill k_matvec_w's chunks but cannot hold x in registers */
    shape("Qwen3-4B o", 2560, 0, 0, 64, 1, 0, 1);
    shape("Qwen3-8B Q/K/V", 4096, 1024, 1024, 64, 3, 0, 1);
    shape("Qwen3-8B gate/up", 12288, 12288, 0, 64, 2, 1, 1);
    shape("Qwen3-8B down", 4096, 0, 0, 192, 1, 0, 1);
    /* idle lanes in the chunks */
    shape("Qwen3-4B Q/K/V", 4096, 1024, 1024, 40, 3, 0, 1);
    shape("Qwen3-4B down", 2560, 0, 0, 152, 1, 0, 1);
    shape("Gemma-3-1B gate/up", 6912, 6912, 0, 18, 2, 1, 1);
    /* 32-unit rows hold x in registers: k_matvec_w */
    shape("Qwen2.5-3B gate/up", 11008, 11008, 0, 32, 2, 1, 0);
    shape("Qwen2.5-3B Q/K/V", 2048, 256, 256, 32, 3, 0, 0);
    /* one round of groups: every group a warp of its own */
    shape("Qwen2.5-3B down", 2048, 0, 0, 172, 1, 0, 0);
    shape("Qwen2.5-3B o", 2048, 0, 0, 32, 1, 0, 0);
    shape("Gemma-3-1B down", 1152, 0, 0, 108, 1, 0, 0);
    return t_done("test_cuda_matvec_shape");
}
