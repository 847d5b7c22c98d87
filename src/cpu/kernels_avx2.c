/* AVX2 + FMA + F16C kernels (8 floats per vector). This file is compiled with
 * -mavx2 -mfma -mf16c and runs only when the CPU has them (kernels.c). */
#if defined(__x86_64__) || defined(_M_X64)
#define KVL 8
#define KTABLE dp_kernels_avx2
#define KNAME "avx2"
#define KISA DP_ISA_AVX2
#include "kernels_x86.h"
#endif
