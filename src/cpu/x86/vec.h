/* The vector layer of the x86 kernels: one set of names (vf, vload, vfma,
 * vhsum, ...) for a vector of KVL floats, 8 with AVX2 + FMA + F16C, 16 with
 * AVX-512, and the element loaders the other kernel headers share. */
#ifndef DP_CPU_X86_VEC_H
#define DP_CPU_X86_VEC_H

#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../kernels.h"

#ifndef KVL
#error "define KVL (8 or 16) before including the x86 kernels"
#endif

#define ALWAYS static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")

#if KVL == 16
typedef __m512 vf;
#define vzero() _mm512_setzero_ps()
#define vload(p) _mm512_loadu_ps(p)
#define vstore(p, v) _mm512_storeu_ps(p, v)
#define vset1(a) _mm512_set1_ps(a)
#define vfma(a, b, c) _mm512_fmadd_ps(a, b, c)
#define vmul(a, b) _mm512_mul_ps(a, b)
#define vadd(a, b) _mm512_add_ps(a, b)
#define vdiv(a, b) _mm512_div_ps(a, b)
#define vmax(a, b) _mm512_max_ps(a, b)
#define vmin(a, b) _mm512_min_ps(a, b)
ALWAYS __m256 vhi256(vf a) { return _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)); }
ALWAYS float vhsum(vf a) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(a), vhi256(a));
    __m128 l = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    l = _mm_add_ps(l, _mm_movehl_ps(l, l));
    l = _mm_add_ss(l, _mm_movehdup_ps(l));
    return _mm_cvtss_f32(l);
}
/* 16 int8 -> 16 / KVL float vectors */
ALWAYS void cvt16(__m128i b, vf *o) { o[0] = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(b)); }
ALWAYS vf load_f16(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
ALWAYS vf load_bf16(const uint8_t *p) {
    __m512i v = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
/* 2^n for integral float n in [-126, 127] */
ALWAYS vf vpow2i(vf n) {
    __m512i i = _mm512_cvtps_epi32(n);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(i, _mm512_set1_epi32(127)), 23));
}
#define vround(x) _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
ALWAYS __m512d vcvt_lo_pd(vf a) { return _mm512_cvtps_pd(_mm512_castps512_ps256(a)); }
ALWAYS __m512d vcvt_hi_pd(vf a) { return _mm512_cvtps_pd(vhi256(a)); }
#define vdfma(a, b, c) _mm512_fmadd_pd(a, b, c)
#define vdzero() _mm512_setzero_pd()
#define vdadd(a, b) _mm512_add_pd(a, b)
ALWAYS double vdhsum(__m512d a) { return _mm512_reduce_add_pd(a); }
typedef __m512d vd;
#else
typedef __m256 vf;
#define vzero() _mm256_setzero_ps()
#define vload(p) _mm256_loadu_ps(p)
#define vstore(p, v) _mm256_storeu_ps(p, v)
#define vset1(a) _mm256_set1_ps(a)
#define vfma(a, b, c) _mm256_fmadd_ps(a, b, c)
#define vmul(a, b) _mm256_mul_ps(a, b)
#define vadd(a, b) _mm256_add_ps(a, b)
#define vdiv(a, b) _mm256_div_ps(a, b)
#define vmax(a, b) _mm256_max_ps(a, b)
#define vmin(a, b) _mm256_min_ps(a, b)
ALWAYS float vhsum(vf a) {
    __m128 l = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    l = _mm_add_ps(l, _mm_movehl_ps(l, l));
    l = _mm_add_ss(l, _mm_movehdup_ps(l));
    return _mm_cvtss_f32(l);
}
ALWAYS void cvt16(__m128i b, vf *o) {
    o[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(b));
    o[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_unpackhi_epi64(b, b)));
}
ALWAYS vf load_f16(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
ALWAYS vf load_bf16(const uint8_t *p) {
    __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}
ALWAYS vf vpow2i(vf n) {
    __m256i i = _mm256_cvtps_epi32(n);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(i, _mm256_set1_epi32(127)), 23));
}
#define vround(x) _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
typedef __m256d vd;
ALWAYS vd vcvt_lo_pd(vf a) { return _mm256_cvtps_pd(_mm256_castps256_ps128(a)); }
ALWAYS vd vcvt_hi_pd(vf a) { return _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)); }
#define vdfma(a, b, c) _mm256_fmadd_pd(a, b, c)
#define vdzero() _mm256_setzero_pd()
#define vdadd(a, b) _mm256_add_pd(a, b)
ALWAYS double vdhsum(vd a) {
    __m128d l = _mm_add_pd(_mm256_castpd256_pd128(a), _mm256_extractf128_pd(a, 1));
    return _mm_cvtsd_f64(_mm_add_sd(l, _mm_unpackhi_pd(l, l)));
}
#endif

#define NV16 (16 / KVL) /* float vectors per 16 values */

ALWAYS float h2f(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}
ALWAYS __m128i ld16(const uint8_t *p) { return _mm_loadu_si128((const __m128i *)p); }
ALWAYS uint32_t ld32(const uint8_t *p) {
    uint32_t u;
    memcpy(&u, p, 4);
    return u;
}

ALWAYS vf load_f32(const uint8_t *p) { return vload((const float *)p); }
ALWAYS float sc_f32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}
ALWAYS float sc_bf16(const uint8_t *p) {
    uint32_t u = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 24;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

#endif
