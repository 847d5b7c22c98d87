/* AVX-512 F/BW/VL kernels (16 floats per vector). This file is compiled with
 * AVX-512 target flags and runs only when the CPU has them (kernels.c). */
#if defined(__x86_64__) || defined(_M_X64)
#define KVL 16
#define KTABLE dp_kernels_avx512
#define KNAME "avx512"
#define KISA DP_ISA_AVX512
#include "kernels_x86.h"
#endif
