/* Shared pieces of the integer decode matvec (matvec_q.cu: k_matvec_w):
 * the quantised input vector, its
 * shared-memory layouts, the prologue that stages it, and each format's
 * unit of work (load and dot product).
 *
 * The input vector is quantised to 16 bits per block of 32 values:
 * q = rint(x * 32767 / amax), so x ~ dx q with dx = amax / 32767 (an error
 * of at most 1.5e-5 of the block's largest value), and q is split into a
 * signed high byte and an unsigned low byte, q = 256 h + l. A weight block
 * times x is then an exact integer sum, four bytes per __dp4a (one for the
 * high bytes, one for the low bytes of x), scaled once per block: about 1.4
 * integer instructions per weight instead of a conversion and an FMA.
 *
 * Each CTA quantises x itself in its prologue (xstage.cuh prepares it: the
 * RMSNorm, and the sandwich post-norm + residual add, when the launch
 * asks). The bytes go to shared memory
 * in the order the format's lanes read them: 16-byte elements holding x at
 * positions a..a+3 and a+P..a+P+3, where P pairs the two nibbles of a quant
 * byte (32-weight blocks: 16; Q4_K/Q5_K/IQ4_XS: 32; Q6_K, Q3_K, Q2_K: 64), so one 16-byte read
 * feeds four __dp4a; a unit's elements are contiguous and units are padded
 * by one element, so that the 8 lanes of a quarter-warp, reading consecutive
 * units, hit 8 different bank groups with fixed offsets from the unit.
 */
#ifndef DP_CUDA_QUNIT_CUH
#define DP_CUDA_QUNIT_CUH

#include <string.h>

#include "iqgrid.cuh"
#include "xstage.cuh"

enum { Q_THREADS = 256, Q_WARPS = Q_THREADS / 32, Q_RMAX = 4 };
enum { FAM_A = 0, FAM_B = 1, FAM_C = 2 }; /* 32-weight blocks; Q4_K/Q5_K/IQ4_XS; Q6_K/Q3_K/Q2_K */

__host__ __device__ static constexpr int q_family(int type) {
    switch (type) {
    case DP_TYPE_Q4_0: case DP_TYPE_Q4_1: case DP_TYPE_Q5_0: case DP_TYPE_Q5_1: case DP_TYPE_Q8_0: return FAM_A;
    case DP_TYPE_IQ4_NL: return FAM_A; /* 32-weight units, nibbles as Q4_0 */
    case DP_TYPE_Q4_K: case DP_TYPE_Q5_K: return FAM_B;
    case DP_TYPE_IQ4_XS: return FAM_B; /* 64-weight units (two sub-blocks), nibbles paired as Q4_K's */
    case DP_TYPE_Q6_K: case DP_TYPE_Q3_K: case DP_TYPE_Q2_K: return FAM_C; /* 16-weight scales, codes of
                                                                             * 4 groups of 32 interleaved */
    case DP_TYPE_IQ2_XXS: case DP_TYPE_IQ2_XS: case DP_TYPE_IQ2_S: case DP_TYPE_IQ3_XXS: case DP_TYPE_IQ3_S:
        return FAM_A; /* 32-weight units of signed grid magnitudes */
    default: return -1;
    }
}
/* weights per unit (one lane's share of a row at a time) */
__host__ __device__ static inline int q_unit(int type) { return q_family(type) == FAM_A ? 32 : 64; }

/* ------------------------------------------------------------ helpers */

/* The per-unit code is also compiled for the host (a development check
 * emulates it there); the intrinsics have plain host versions. */
#define QHD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define QUNROLL _Pragma("unroll")
#else
#define QUNROLL
#endif
#ifdef __CUDA_ARCH__
#define DP4A(name, spec)                                                                                          \
    __device__ __forceinline__ int name(uint32_t a, uint32_t b, int c) {                                          \
        int d;                                                                                                    \
        asm("dp4a." spec " %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));                                  \
        return d;                                                                                                 \
    }
#else
#define DP4A(name, spec)                                                                                          \
    static inline int name(uint32_t a, uint32_t b, int c) {                                                       \
        const bool sa = spec[0] == 's', sb = spec[4] == 's';                                                      \
        for (int i = 0; i < 4; i++) {                                                                             \
            const int x = sa ? (int)(int8_t)(a >> (8 * i)) : (int)((a >> (8 * i)) & 0xFF);                        \
            const int y = sb ? (int)(int8_t)(b >> (8 * i)) : (int)((b >> (8 * i)) & 0xFF);                        \
            c += x * y;                                                                                           \
        }                                                                                                         \
        return c;                                                                                                 \
    }
#endif
DP4A(dp4a_us, "u32.s32")
DP4A(dp4a_uu, "u32.u32")
DP4A(dp4a_ss, "s32.s32")
DP4A(dp4a_su, "s32.u32")

/* Weight loads: the read-only path with the L2 evict-first policy, so that
 * the weight stream (the whole model every token) does not push out of L2
 * what the next launches read again: x and the small vectors, the K/V rows,
 * the page-table entries, the kernels' code (faster decode on both
 * measured shapes, BENCHMARKS.md). */
QHD uint4 ld16(const uint8_t *p) {
#ifdef __CUDA_ARCH__
    uint4 v;
    asm("ld.global.nc.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
        : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
        : "l"(p), "l"(l2_evict_first()));
    return v;
#else
    return *(const uint4 *)p;
#endif
}
/* A weight's scale word (f16 d, f16 d | m, the fifth bits), as ld16 loads. */
#ifdef __CUDA_ARCH__
#define LDW(NAME, T, PTX, C)                                                                                       \
    QHD T NAME(const T *p) {                                                                                       \
        T v;                                                                                                       \
        asm("ld.global.nc.L2::cache_hint." PTX " %0, [%1], %2;" : "=" C(v) : "l"(p), "l"(l2_evict_first()));       \
        return v;                                                                                                  \
    }
#else
#define LDW(NAME, T, PTX, C) \
    QHD T NAME(const T *p) { return *p; }
#endif
LDW(ldw32, uint32_t, "u32", "r")
LDW(ldw16, uint16_t, "u16", "h")
#undef LDW

/* Quantises the 4 values of each lane; lanes 8j..8j+7 hold one block of 32
 * positions. Returns the piece (high bytes, low bytes); dx of the block and
 * the sum of q over the lane's group of 4 lanes (16 positions). */
__device__ __forceinline__ uint2 quant4(float4 v, float &dx, int &s16) {
    float am = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    am = fmaxf(am, __shfl_xor_sync(FULL_MASK, am, 1));
    am = fmaxf(am, __shfl_xor_sync(FULL_MASK, am, 2));
    am = fmaxf(am, __shfl_xor_sync(FULL_MASK, am, 4));
    const float inv = am > 0.0f ? 32767.0f / am : 0.0f;
    dx = am / 32767.0f;
    const int q0 = __float2int_rn(v.x * inv), q1 = __float2int_rn(v.y * inv), q2 = __float2int_rn(v.z * inv),
              q3 = __float2int_rn(v.w * inv);
    int s = q0 + q1 + q2 + q3;
    s += __shfl_xor_sync(FULL_MASK, s, 1);
    s += __shfl_xor_sync(FULL_MASK, s, 2);
    s16 = s;
    const uint32_t p01 = ((uint32_t)q0 & 0xFFFFu) | ((uint32_t)q1 << 16),
                   p23 = ((uint32_t)q2 & 0xFFFFu) | ((uint32_t)q3 << 16);
    return make_uint2(__byte_perm(p01, p23, 0x7531), __byte_perm(p01, p23, 0x6420));
}

/* Byte offset of the 16-byte element holding the pair (a, a + P) in each
 * family's layout; a is the lower position (a multiple of 4). A unit's
 * elements are contiguous (4 for the 32-weight formats, 8 for the 64-weight
 * ones) and each unit is padded by one element (80 and 144 bytes), so the 8
 * lanes of a quarter-warp reading consecutive units hit 8 different bank
 * groups while every lane reads its unit at fixed offsets. */
enum { UB_A = 80, UB_B = 144 };
QHD int phys_a(int a) { return (a >> 5) * UB_A + ((a >> 2) & 3) * 16; }
QHD int phys_b(int a) { return (a >> 6) * UB_B + ((a >> 2) & 7) * 16; }
QHD int phys_c(int a) {
    const int b = a >> 8, n = (a >> 7) & 1, rr = a & 63;
    const int v = 4 * b + 2 * n + ((rr >> 4) & 1), k = 4 * (rr >> 5) + ((rr >> 2) & 3);
    return v * UB_B + k * 16;
}
/* Bytes of each family's layout for cols inputs. */
__host__ __device__ static inline size_t fam_bytes(int fam, int cols) {
    return fam == FAM_A ? (size_t)((cols + 31) / 32) * UB_A : (size_t)((cols + 63) / 64) * UB_B;
}

struct MqArgs {
    MvLaunch L;
    int R[3];        /* rows per group, per job */
    int U[3];        /* units per row, per job */
    float invU[3];   /* 1 / U, for w_div */
    int gstart[4];   /* first group of each job; gstart[njobs] = total (MV_GATEUP: gstart[1]) */
    int famoff[3];   /* byte offset of each family's x layout in shared memory, -1 = not staged */
    int off_dx, off_is, off_xe;
    int lshift;      /* k_matvec_l: log2 of the lanes per row */
    int NI[3];       /* k_matvec_l: steps (items) per group, per job */
    int istart[4];   /* k_matvec_l: first item of each job; istart[njobs] = total (MV_GATEUP: istart[1]) */
    int Gc;          /* k_matvec_l: groups per CTA */
};

/* Writes lane's piece (positions a..a+3) paired with its partner's into every
 * staged layout. Windows of 128 positions, lane = (a mod 128) / 4. */
template <int FM = 7> /* the families the kernel may stage (bit f: family f): the others' code is left out */
__device__ __forceinline__ void put_elems(uint8_t *sm, const MqArgs &A, uint2 pc, int a, bool valid, int lane) {
    if ((FM & (1 << FAM_A)) && A.famoff[FAM_A] >= 0) {
        const uint32_t px = __shfl_down_sync(FULL_MASK, pc.x, 4), py = __shfl_down_sync(FULL_MASK, pc.y, 4);
        if (valid && !(lane & 4)) *(uint4 *)(sm + A.famoff[FAM_A] + phys_a(a)) = make_uint4(pc.x, pc.y, px, py);
    }
    if ((FM & (1 << FAM_B)) && A.famoff[FAM_B] >= 0) {
        const uint32_t px = __shfl_down_sync(FULL_MASK, pc.x, 8), py = __shfl_down_sync(FULL_MASK, pc.y, 8);
        if (valid && !(lane & 8)) *(uint4 *)(sm + A.famoff[FAM_B] + phys_b(a)) = make_uint4(pc.x, pc.y, px, py);
    }
    if ((FM & (1 << FAM_C)) && A.famoff[FAM_C] >= 0) {
        const uint32_t px = __shfl_down_sync(FULL_MASK, pc.x, 16), py = __shfl_down_sync(FULL_MASK, pc.y, 16);
        if (valid && !(lane & 16)) *(uint4 *)(sm + A.famoff[FAM_C] + phys_c(a)) = make_uint4(pc.x, pc.y, px, py);
    }
}

/* ----------------------------------------------------- per-format units */

struct QRaw {
    uint4 a, b, c, d, e;
    uint32_t s, h;
};
/* An IQ2 / IQ3 unit in q_load's words: a.x, a.y, a.z, a.w, s the fields of
 * iqgrid.cuh's IqUnit, e.x / e.y the grid's address; the loads on the
 * read-only path */
struct IqLdNc {
    QHD uint32_t w32(const uint32_t *p) const {
#ifdef __CUDA_ARCH__
        return __ldg(p);
#else
        return *p;
#endif
    }
    QHD unsigned long long w64(const unsigned long long *p) const {
#ifdef __CUDA_ARCH__
        return __ldg(p);
#else
        return *p;
#endif
    }
};
/* the weights' words: ld16's L2 evict-first policy (the grids above stay cached) */
struct IqLdW {
    QHD uint32_t w32(const uint32_t *p) const { return ldw32(p); }
    QHD unsigned long long w64(const unsigned long long *p) const { return *p; }
};
QHD IqUnit iqq_unit(const QRaw &r) { return IqUnit{r.a.x, r.a.y, r.a.z, r.a.w, r.s}; }
QHD const void *iqq_grid(const QRaw &r) { return (const void *)((uint64_t)r.e.x | (uint64_t)r.e.y << 32); }
/* Four magnitudes m (bytes 1..62) with the signs of the low 4 bits of s as
 * signed bytes: the sign bits spread to a byte mask, then m or its two's
 * complement per byte ((m ^ 0xFF) + 1 does not carry: m >= 1). */
QHD uint32_t iqq_signed4(uint32_t m, uint32_t s) {
    const uint32_t one = ((s & 15u) * 0x00204081u) & 0x01010101u;
    return (m ^ (one * 0xFFu)) + one;
}

/* IQ4_XS's scales d (ls - 32) of the unit's two sub-blocks from q_load's
 * words (exact in float) */
QHD float2 iq4xs_scales(const QRaw &r) {
    const float d = h2f((uint16_t)r.h);
    return make_float2(d * (float)(int8_t)r.s, d * (float)(int8_t)(r.s >> 8));
}

/* Offsets within a matrix in 32 bits (one IMAD per address instead of
 * 64-bit multiplies: the decode matvecs issue on about half the cycles, so
 * address arithmetic costs time); dp_cu_matvec_q refuses matrices of 4 GiB
 * or more. */
template <int T> QHD void q_load(const DMat &W, int row, int v, QRaw &r) {
    const uint32_t ro = (uint32_t)row * (uint32_t)W.body_row, mi = (uint32_t)row * (uint32_t)W.nblk;
    if (T == DP_TYPE_Q8_0) {
        r.a = ld16(W.body + (ro + (uint32_t)v * 32));
        r.b = ld16(W.body + (ro + (uint32_t)v * 32 + 16));
        r.s = ldw16(W.d16 + (mi + v));
    } else if (T == DP_TYPE_IQ4_XS) { /* sub-blocks 2v and 2v + 1 (mi counts sub-blocks; rows hold whole
                                        * super-blocks): their nibbles, ls - 32 as two bytes, the d of the
                                        * super-block */
        const uint8_t *p = W.body + (ro + (uint32_t)v * 32);
        r.b = ld16(p);
        r.c = ld16(p + 16);
        r.s = ldw16((const uint16_t *)((const uint8_t *)W.dm + (mi + 2 * (uint32_t)v)));
        r.h = ldw16(W.d16 + ((mi >> 3) + ((uint32_t)v >> 2)));
    } else if (q_iq(T)) { /* weights.cu's body: index bytes [8 j], IQ3's words [64 + 4 j], the high bits and
                            * scales after them */
        const int b = v >> 3;
        const uint32_t *w = (const uint32_t *)(W.body + (ro + (uint32_t)b * iq_body(T)));
        const IqUnit u = iq_unit<T>(w, v & 7, ldw16(W.d16 + (mi + (uint32_t)b)), IqLdW());
        r.a = make_uint4(u.q0, u.q1, u.e, u.h);
        r.s = u.d;
        const uint64_t gp = (uint64_t)W.grid;
        r.e.x = (uint32_t)gp, r.e.y = (uint32_t)(gp >> 32);
    } else if (T == DP_TYPE_Q4_0 || T == DP_TYPE_Q4_1 || T == DP_TYPE_Q5_0 || T == DP_TYPE_Q5_1 ||
               T == DP_TYPE_IQ4_NL) {
        r.a = ld16(W.body + (ro + (uint32_t)v * 16));
        if (T == DP_TYPE_Q4_1 || T == DP_TYPE_Q5_1) r.s = ldw32(W.dm + (mi + v));
        else r.s = ldw16(W.d16 + (mi + v));
        if (T == DP_TYPE_Q5_0 || T == DP_TYPE_Q5_1) r.h = ldw32(W.qh + (mi + v));
    } else if (T == DP_TYPE_Q4_K) {
        const uint8_t *blk = W.body + (ro + (uint32_t)(v >> 2) * 144);
        const int c = v & 3;
        r.a = ld16(blk);
        r.b = ld16(blk + 16 + 32 * c);
        r.c = ld16(blk + 32 + 32 * c);
    } else if (T == DP_TYPE_Q5_K) {
        const uint8_t *blk = W.body + (ro + (uint32_t)(v >> 2) * 176);
        const int c = v & 3;
        r.a = ld16(blk);
        r.d = ld16(blk + 16);
        r.e = ld16(blk + 32);
        r.b = ld16(blk + 48 + 32 * c);
        r.c = ld16(blk + 64 + 32 * c);
    } else if (T == DP_TYPE_Q6_K) {
        const int b = v >> 2, n = (v >> 1) & 1, h = v & 1;
        const uint8_t *blk = W.body + (ro + (uint32_t)b * 208);
        r.a = ld16(blk + 64 * n + 16 * h);
        r.b = ld16(blk + 64 * n + 32 + 16 * h);
        r.c = ld16(blk + 128 + 32 * n + 16 * h);
        r.d = ld16(blk + 192);
        r.s = ldw16(W.d16 + (mi + b));
    } else if (T == DP_TYPE_Q3_K) { /* weights.cu's super-block: qs[64], hmask[32], scales - 32 [16]; d16 */
        const int b = v >> 2, n = (v >> 1) & 1, h = v & 1;
        const uint8_t *blk = W.body + (ro + (uint32_t)b * 112);
        r.a = ld16(blk + 32 * n + 16 * h);
        r.c = ld16(blk + 64 + 16 * h);
        r.d = ld16(blk + 96);
        r.s = ldw16(W.d16 + (mi + b));
    } else if (T == DP_TYPE_Q2_K) { /* weights.cu's super-block: qs[64], scales[16]; d | dmin << 16 in dm */
        const int b = v >> 2, n = (v >> 1) & 1, h = v & 1;
        const uint8_t *blk = W.body + (ro + (uint32_t)b * 80);
        r.a = ld16(blk + 32 * n + 16 * h);
        r.d = ld16(blk + 64);
        r.s = ldw32(W.dm + (mi + b));
    }
}

/* The 6-bit scales and mins of the K-quant sub-blocks j = 2c and 2c + 1 (c
 * the lane's 64-weight chunk, 0..3) from the header words 1..3, without
 * branches: all four scales (and mins) of the lower or upper half of the
 * super-block as bytes of one word, then the chunk's two bytes. */
QHD void k_scales(const uint4 &h, int c, float *sc0, float *m0, float *sc1, float *m1) {
    const bool up = c & 2;
    const uint32_t scw = up ? (h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u) : h.y & 0x3F3F3F3Fu;
    const uint32_t mnw = up ? ((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u) : h.z & 0x3F3F3F3Fu;
    const int sh = (c & 1) * 16;
    *sc0 = (float)((scw >> sh) & 0xFFu);
    *sc1 = (float)((scw >> (sh + 8)) & 0xFFu);
    *m0 = (float)((mnw >> sh) & 0xFFu);
    *m1 = (float)((mnw >> (sh + 8)) & 0xFFu);
}

/* The staged x a unit needs: its elements X[0..3] (32-weight formats) or
 * X[0..7], and from dxp / isp the block scales and sums of its positions
 * (32-weight formats: dx[v], isum[2v..2v+1]; Q4_K/Q5_K: dx[2v..2v+1],
 * isum[4v..4v+3]; Q6_K, Q3_K, Q2_K: dx[seg..seg+3], isum[2seg..2seg+7], seg = 8b + 4n).
 * Pointers into shared memory, or arrays held in registers by a lane whose
 * unit is the same for every row it takes (k_matvec_w's XR; QX gives the
 * counts). */
template <int T> struct QX {
    enum {
        n = q_family(T) == FAM_A ? 4 : 8,                             /* x elements */
        d = q_family(T) == FAM_A ? 1 : q_family(T) == FAM_B ? 2 : 4,  /* dx values (isum: twice as many) */
    };
};
template <int T> QHD void q_xview(int v, const uint8_t *xb, const float *dxs, const int *iss, const uint4 **X,
                                  const float **dxp, const int **isp) {
    if (q_family(T) == FAM_A) {
        *X = (const uint4 *)(xb + v * UB_A), *dxp = dxs + v, *isp = iss + 2 * v;
    } else if (q_family(T) == FAM_B) {
        *X = (const uint4 *)(xb + v * UB_B), *dxp = dxs + 2 * v, *isp = iss + 4 * v;
    } else {
        const int seg = 8 * (v >> 2) + 4 * ((v >> 1) & 1);
        *X = (const uint4 *)(xb + v * UB_B), *dxp = dxs + seg, *isp = iss + 2 * seg;
    }
}

template <int T>
QHD float q_math_x(const QRaw &r, int v, const uint4 *X, const float *dxp, const int *isp, Iq4Tab tab = IQ4_TAB_CONST);

/* A view's scales and sums copied out by vector loads (the views are
 * aligned to them): dl[0 .. QX<T>::d), il[0 .. 2 QX<T>::d). */
template <int T> QHD void q_xscales(const float *dxp, const int *isp, float *dl, int *il) {
    if (QX<T>::d == 1) {
        dl[0] = dxp[0];
        *(int2 *)il = *(const int2 *)isp;
    } else if (QX<T>::d == 2) {
        *(float2 *)dl = *(const float2 *)dxp;
        *(int4 *)il = *(const int4 *)isp;
    } else {
        *(float4 *)dl = *(const float4 *)dxp;
        *(int4 *)il = *(const int4 *)isp;
        *(int4 *)(il + 4) = *(const int4 *)(isp + 4);
    }
}

/* The unit's dot product with the staged x (xb: the family's layout). */
template <int T>
QHD float q_math(const QRaw &r, int v, const uint8_t *xb, const float *dxs, const int *iss, Iq4Tab tab = IQ4_TAB_CONST) {
    const uint4 *X;
    const float *dxp;
    const int *isp;
    q_xview<T>(v, xb, dxs, iss, &X, &dxp, &isp);
    float dl[4]; /* QX<T>::d used */
    int il[8];   /* 2 QX<T>::d used */
    q_xscales<T>(dxp, isp, dl, il);
    return q_math_x<T>(r, v, X, dl, il, tab);
}

template <int T> QHD float q_math_x(const QRaw &r, int v, const uint4 *X, const float *dxp, const int *isp, Iq4Tab tab) {
    if (q_iq(T)) { /* word k: positions 4k.. (group k / 2) and 16 + 4k.. (group 2 + k / 2), signed */
        const IqUnit u = iqq_unit(r);
        unsigned long long g[4];
        uint32_t sg[4];
QUNROLL
        for (int l = 0; l < 4; l++) g[l] = iq_grid8<T>(u, iqq_grid(r), l, IqLdNc()), sg[l] = iq_signs<T>(u, l);
        int h0 = 0, l0 = 0, h1 = 0, l1 = 0;
QUNROLL
        for (int k = 0; k < 4; k++) {
            const uint4 x = X[k];
            const int la = k >> 1, hb = 32 * (k & 1);
            const uint32_t w0 = iqq_signed4((uint32_t)(g[la] >> hb), sg[la] >> (hb >> 3));
            const uint32_t w1 = iqq_signed4((uint32_t)(g[2 + la] >> hb), sg[2 + la] >> (hb >> 3));
            h0 = dp4a_ss(w0, x.x, h0);
            l0 = dp4a_su(w0, x.y, l0);
            h1 = dp4a_ss(w1, x.z, h1);
            l1 = dp4a_su(w1, x.w, l1);
        }
        return dxp[0] * fmaf(iq_db<T>(u, 0), (float)(h0 * 256 + l0), iq_db<T>(u, 1) * (float)(h1 * 256 + l1));
    } else if (q_family(T) == FAM_A) {
        int sh = 0, sl = 0;
QUNROLL
        for (int k = 0; k < 4; k++) {
            const uint4 x = X[k];
            if (T == DP_TYPE_Q8_0 || T == DP_TYPE_IQ4_NL) { /* signed weights */
                uint32_t w0 = wd(r.a, k), w1;
                if (T == DP_TYPE_Q8_0) {
                    w1 = wd(r.b, k);
                } else {
                    iq4_bytes(w0, &w0, &w1, tab);
                }
                sh = dp4a_ss(w0, x.x, sh);
                sl = dp4a_su(w0, x.y, sl);
                sh = dp4a_ss(w1, x.z, sh);
                sl = dp4a_su(w1, x.w, sl);
            } else {
                const uint32_t w = wd(r.a, k);
                uint32_t lo = w & 0x0F0F0F0Fu, hi = (w >> 4) & 0x0F0F0F0Fu;
                if (T == DP_TYPE_Q5_0 || T == DP_TYPE_Q5_1) {
                    lo |= q5_bits(r.h, k);
                    hi |= q5_bits(r.h, 4 + k);
                }
                sh = dp4a_us(lo, x.x, sh);
                sl = dp4a_uu(lo, x.y, sl);
                sh = dp4a_us(hi, x.z, sh);
                sl = dp4a_uu(hi, x.w, sl);
            }
        }
        const int I = sh * 256 + sl;
        const int IS = isp[0] + isp[1];
        const float dxv = dxp[0];
        const float d = h2f((uint16_t)r.s);
        if (T == DP_TYPE_Q4_0) return d * dxv * (float)(I - 8 * IS);
        if (T == DP_TYPE_Q5_0) return d * dxv * (float)(I - 16 * IS);
        if (T == DP_TYPE_Q8_0 || T == DP_TYPE_IQ4_NL) return d * dxv * (float)I;
        return dxv * fmaf(d, (float)I, h2f((uint16_t)(r.s >> 16)) * (float)IS); /* q d + m */
    } else if (T == DP_TYPE_IQ4_XS) { /* word k: positions 4k.. of sub-block 2v (lo), of 2v + 1 (hi) */
        int hl = 0, ll = 0, hh = 0, lh = 0;
QUNROLL
        for (int k = 0; k < 8; k++) {
            const uint4 x = X[k];
            uint32_t lo, hi;
            iq4_bytes(wd(k < 4 ? r.b : r.c, k & 3), &lo, &hi, tab);
            hl = dp4a_ss(lo, x.x, hl);
            ll = dp4a_su(lo, x.y, ll);
            hh = dp4a_ss(hi, x.z, hh);
            lh = dp4a_su(hi, x.w, lh);
        }
        const float2 s = iq4xs_scales(r);
        return fmaf(s.x * dxp[0], (float)(hl * 256 + ll), s.y * dxp[1] * (float)(hh * 256 + lh));
    } else if (q_family(T) == FAM_B) {
        const int c = v & 3;
        int hl = 0, ll = 0, hh = 0, lh = 0;
QUNROLL
        for (int k = 0; k < 8; k++) {
            const uint4 x = X[k];
            const uint32_t w = wd(k < 4 ? r.b : r.c, k & 3);
            /* Q4_K: the high nibbles in place (16 q), the 1/16 goes into the scale */
            uint32_t lo = w & 0x0F0F0F0Fu, hi = T == DP_TYPE_Q4_K ? w & 0xF0F0F0F0u : (w >> 4) & 0x0F0F0F0Fu;
            if (T == DP_TYPE_Q5_K) {
                const uint32_t hb = wd(k < 4 ? r.d : r.e, k & 3);
                lo |= ((hb >> (2 * c)) & 0x01010101u) << 4;
                hi |= ((hb >> (2 * c + 1)) & 0x01010101u) << 4;
            }
            hl = dp4a_us(lo, x.x, hl);
            ll = dp4a_uu(lo, x.y, ll);
            hh = dp4a_us(hi, x.z, hh);
            lh = dp4a_uu(hi, x.w, lh);
        }
        const float2 dx2 = make_float2(dxp[0], dxp[1]);
        const int4 is4 = make_int4(isp[0], isp[1], isp[2], isp[3]);
        const float d = h2f((uint16_t)r.a.x), dmin = h2f((uint16_t)(r.a.x >> 16));
        float sc0, m0, sc1, m1;
        k_scales(r.a, c, &sc0, &m0, &sc1, &m1);
        const float hs = T == DP_TYPE_Q4_K ? 0.0625f : 1.0f;
        const float lo = d * sc0 * (float)(hl * 256 + ll) - dmin * m0 * (float)(is4.x + is4.y);
        const float hi = d * sc1 * hs * (float)(hh * 256 + lh) - dmin * m1 * (float)(is4.z + is4.w);
        return fmaf(dx2.x, lo, dx2.y * hi);
    } else { /* Q6_K, Q3_K, Q2_K: groups g = 0..3 of the unit's 128-half n, 16 values (half h) of each */
        const int n = (v >> 1) & 1, h = v & 1;
        int h1 = 0, l1 = 0, h2 = 0, l2 = 0, h3 = 0, l3 = 0, h4 = 0, l4 = 0;
QUNROLL
        for (int w = 0; w < 4; w++) {
            const uint4 x1 = X[w], x2 = X[4 + w];
            const uint32_t qa = wd(r.a, w);
            uint32_t q1, q2, q3, q4; /* groups 0, 1, 2, 3: unsigned codes */
            if (T == DP_TYPE_Q6_K) {
                const uint32_t qb = wd(r.b, w), qh = wd(r.c, w);
                q1 = (qa & 0x0F0F0F0Fu) | ((qh << 4) & 0x30303030u);
                q3 = ((qa >> 4) & 0x0F0F0F0Fu) | (qh & 0x30303030u);
                q2 = (qb & 0x0F0F0F0Fu) | ((qh << 2) & 0x30303030u);
                q4 = ((qb >> 4) & 0x0F0F0F0Fu) | ((qh >> 2) & 0x30303030u);
            } else { /* two bits of each group in every qs byte; Q3_K's third from hmask bit 4n + g */
                q1 = qa & 0x03030303u;
                q2 = (qa >> 2) & 0x03030303u;
                q3 = (qa >> 4) & 0x03030303u;
                q4 = (qa >> 6) & 0x03030303u;
                if (T == DP_TYPE_Q3_K) {
                    const uint32_t hm = wd(r.c, w) >> (4 * n);
                    q1 |= (hm << 2) & 0x04040404u;
                    q2 |= (hm << 1) & 0x04040404u;
                    q3 |= hm & 0x04040404u;
                    q4 |= (hm >> 1) & 0x04040404u;
                }
            }
            h1 = dp4a_us(q1, x1.x, h1);
            l1 = dp4a_uu(q1, x1.y, l1);
            h3 = dp4a_us(q3, x1.z, h3);
            l3 = dp4a_uu(q3, x1.w, l3);
            h2 = dp4a_us(q2, x2.x, h2);
            l2 = dp4a_uu(q2, x2.y, l2);
            h4 = dp4a_us(q4, x2.z, h4);
            l4 = dp4a_uu(q4, x2.w, l4);
        }
        const float4 dx4 = make_float4(dxp[0], dxp[1], dxp[2], dxp[3]);
        const int4 ia = make_int4(isp[0], isp[1], isp[2], isp[3]), ib = make_int4(isp[4], isp[5], isp[6], isp[7]);
        const int is1 = h ? ia.y : ia.x, is2 = h ? ia.w : ia.z, is3 = h ? ib.y : ib.x, is4 = h ? ib.w : ib.z;
        /* the scale bytes 8n + 2g + h of the four groups */
        const uint32_t W0 = n ? r.d.z : r.d.x, W1 = n ? r.d.w : r.d.y;
        const int sh = 8 * h;
        const uint32_t b1 = W0 >> sh, b2 = W0 >> (sh + 16), b3 = W1 >> sh, b4 = W1 >> (sh + 16);
        const int I1 = h1 * 256 + l1, I2 = h2 * 256 + l2, I3 = h3 * 256 + l3, I4 = h4 * 256 + l4;
        if (T == DP_TYPE_Q2_K) { /* scale | min << 4: d sc q - dmin m */
            const float d = h2f((uint16_t)r.s), dmin = h2f((uint16_t)(r.s >> 16));
            float acc = dx4.x * (d * (float)(b1 & 15u) * (float)I1 - dmin * (float)((b1 >> 4) & 15u) * (float)is1);
            acc = fmaf(dx4.y, d * (float)(b2 & 15u) * (float)I2 - dmin * (float)((b2 >> 4) & 15u) * (float)is2, acc);
            acc = fmaf(dx4.z, d * (float)(b3 & 15u) * (float)I3 - dmin * (float)((b3 >> 4) & 15u) * (float)is3, acc);
            acc = fmaf(dx4.w, d * (float)(b4 & 15u) * (float)I4 - dmin * (float)((b4 >> 4) & 15u) * (float)is4, acc);
            return acc;
        }
        /* signed scales; the codes' offset (Q6_K 32, Q3_K 4) through x's sums */
        const int off = T == DP_TYPE_Q6_K ? 32 : 4;
        float acc = (float)(int8_t)b1 * dx4.x * (float)(I1 - off * is1);
        acc = fmaf((float)(int8_t)b2 * dx4.y, (float)(I2 - off * is2), acc);
        acc = fmaf((float)(int8_t)b3 * dx4.z, (float)(I3 - off * is3), acc);
        acc = fmaf((float)(int8_t)b4 * dx4.w, (float)(I4 - off * is4), acc);
        return h2f((uint16_t)r.s) * acc;
    }
}

/* The kernel's prologue: x (RMS-normalised, with Gemma's sandwich
 * post-norm + residual add when the launch asks) quantised into the staged
 * layouts in shared memory. Every thread of the CTA takes part (it ends
 * with __syncthreads). */
template <int FM = 7> /* as put_elems */
__device__ __forceinline__ void q_stage_x(const MqArgs &A, uint8_t *sm, float *red) {
    const MvLaunch &L = A.L;
    const int lane = threadIdx.x & 31;
    float *dxs = (float *)(sm + A.off_dx);
    int *iss = (int *)(sm + A.off_is);
    xs_stage(L, (float *)(sm + A.off_xe), red, [&](int pos, bool valid, float4 v) {
        float dxv;
        int s16;
        const uint2 pc = quant4(v, dxv, s16);
        put_elems<FM>(sm, A, pc, pos, valid, lane);
        if (valid && !(lane & 7)) dxs[pos >> 5] = dxv;
        if (valid && !(lane & 3)) iss[pos >> 4] = s16;
    });
    __syncthreads();
}

/* Shared memory of a launch: the staged layouts, dx, the integer sums and
 * (sandwich norm) x_eff as floats; offsets into A. */
static inline size_t q_layout(const MvLaunch *L, MqArgs *A) {
    const int cols = L->cols;
    size_t off = 0;
    for (int f = 0; f < 3; f++) A->famoff[f] = -1;
    for (int j = 0; j < L->njobs; j++) {
        const int f = q_family(L->job[j].w.type);
        if (f >= 0 && A->famoff[f] < 0) {
            A->famoff[f] = (int)off;
            off += fam_bytes(f, cols);
        }
    }
    A->off_dx = (int)off;
    off += (size_t)(cols / 32) * 4;
    off = (off + 15) & ~(size_t)15;
    A->off_is = (int)off;
    off += (size_t)(cols / 16) * 4;
    off = (off + 15) & ~(size_t)15;
    A->off_xe = (int)off;
    if (L->res_o) off += (size_t)cols * 4;
    return off;
}

#endif
