/* Run-time choice of the kernel table: CPU detection, DOPPLER_CPU and
 * DOPPLER_CPU_ACT (settings.c). */
#include "kernels.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#if defined(DP_HAVE_X86_KERNELS) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include "../settings.h"

#ifdef DP_ASAN
#include <sanitizer/asan_interface.h>

void dp_asan_rows(const void *p, int64_t stride, int64_t rows, int64_t bytes) {
    for (int64_t i = 0; i < rows && bytes > 0; i++) {
        const volatile char *bad = __asan_region_is_poisoned((char *)p + i * stride, (size_t)bytes);
        if (bad) (void)*bad; /* an instrumented read: ASan's report, then abort */
    }
}
#endif

static const char *g_isa_names[DP_ISA_COUNT] = {"scalar", "avx2", "avx512"};

const char *dp_isa_name(dp_isa isa) { return isa >= 0 && isa < DP_ISA_COUNT ? g_isa_names[isa] : "?"; }

#if defined(DP_HAVE_X86_KERNELS) && defined(__GNUC__)
/* clang's __builtin_cpu_supports knows no "f16c": ask CPUID leaf 1 directly */
static int cpu_has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C);
}
/* nor "avxvnni" (VEX-encoded vpdpwssd): CPUID leaf 7, subleaf 1, EAX bit 4 */
static int cpu_has_avxvnni(void) {
    unsigned a, b, c, d;
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}
#endif

dp_isa dp_cpu_isa_detect(void) {
#if defined(DP_HAVE_X86_KERNELS) && defined(__GNUC__)
    __builtin_cpu_init();
    /* libgcc's and compiler-rt's checks include the OS saving the YMM/ZMM state (XCR0) */
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    int avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512vl");
    return avx512 ? DP_ISA_AVX512 : avx2 ? DP_ISA_AVX2 : DP_ISA_SCALAR;
#else
    return DP_ISA_SCALAR;
#endif
}

/* Tables with the NULL entries of a level filled from the scalar table. */
static dp_cpu_kernels g_merged[DP_ISA_COUNT];
static dp_isa g_detected, g_chosen;
static int g_vnni, g_act_int;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void merge(dp_cpu_kernels *dst, const dp_cpu_kernels *src) {
    const dp_cpu_kernels *s = &dp_kernels_scalar;
    *dst = *src;
    for (int t = 0; t < DP_TYPE_COUNT; t++) {
        if (!dst->matvec[t]) dst->matvec[t] = s->matvec[t];
        if (!dst->dequant[t]) dst->dequant[t] = s->dequant[t];
        if (!dst->matvec_q[t]) dst->matvec_q[t] = s->matvec_q[t];
    }
#define FILL(f) if (!dst->f) dst->f = s->f
    FILL(gemm);
    FILL(gemm_w16);
    FILL(dot);
    FILL(axpy);
    FILL(wsum);
    FILL(wsum_x16);
    FILL(scale);
    FILL(maxv);
    FILL(exp_sum);
    FILL(silu_mul);
    FILL(gelu_mul);
    FILL(sumsq);
#undef FILL
}

static void init_once(void) {
    g_detected = dp_cpu_isa_detect();
    merge(&g_merged[DP_ISA_SCALAR], &dp_kernels_scalar);
#ifdef DP_HAVE_X86_KERNELS
    merge(&g_merged[DP_ISA_AVX2], &dp_kernels_avx2);
    merge(&g_merged[DP_ISA_AVX512], &dp_kernels_avx512);
    /* the avx512 integer kernels use VNNI and BMI2; without them, avx2's */
#if defined(__GNUC__)
    g_vnni = g_detected == DP_ISA_AVX512 && __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("bmi2");
#endif
    if (!g_vnni) {
        memcpy(g_merged[DP_ISA_AVX512].matvec_q, g_merged[DP_ISA_AVX2].matvec_q, sizeof g_merged[0].matvec_q);
        memset(g_merged[DP_ISA_AVX512].screen, 0, sizeof g_merged[0].screen);
        g_merged[DP_ISA_AVX512].screen_scan = NULL;
        g_merged[DP_ISA_AVX512].igemm = NULL;
        g_merged[DP_ISA_AVX512].iweights = NULL;
    }
    /* avx2's integer prompt products use AVX-VNNI */
#if defined(__GNUC__)
    if (!(g_detected >= DP_ISA_AVX2 && cpu_has_avxvnni()))
#endif
    {
        g_merged[DP_ISA_AVX2].igemm = NULL;
        g_merged[DP_ISA_AVX2].iweights = NULL;
    }
#endif
    /* auto: the integer path where SIMD kernels exist; the scalar integer
     * kernels are a reference, slower than the scalar float ones */
    g_act_int = g_detected != DP_ISA_SCALAR;
    /* an invalid value fails every session with a message (session.c); here it counts as auto */
    dp_settings set;
    if (dp_settings_read(&set, DP_SET_CPU)) dp_settings_read(&set, 0);
    if (set.cpu_act >= 0) g_act_int = set.cpu_act;
    g_chosen = g_detected;
    if (set.cpu_level > (int)g_detected)
        fprintf(stderr, "doppler: warning: DOPPLER_CPU=%s but this CPU supports only %s\n", g_isa_names[set.cpu_level],
                g_isa_names[g_detected]);
    else if (set.cpu_level >= 0)
        g_chosen = (dp_isa)set.cpu_level;
}

const dp_cpu_kernels *dp_cpu_kernels_for(dp_isa isa) {
    pthread_once(&g_once, init_once);
    if (isa < 0 || isa > g_detected) return NULL;
    return &g_merged[isa];
}

const dp_cpu_kernels *dp_cpu_kernels_get(void) {
    pthread_once(&g_once, init_once);
    return &g_merged[g_chosen];
}

void dp_cpu_kernels_force(dp_isa isa) {
    pthread_once(&g_once, init_once);
    if (isa < 0) isa = DP_ISA_SCALAR;
    g_chosen = isa > g_detected ? g_detected : isa;
}

int dp_cpu_act_int(void) {
    pthread_once(&g_once, init_once);
    return g_act_int;
}

void dp_cpu_act_force(int use_int) {
    pthread_once(&g_once, init_once);
    g_act_int = use_int != 0;
}
