/* Shared pieces of the CUDA backend: error checks, the device view of a
 * weight matrix (DMat), warp/block reductions and bit tricks. */
#ifndef DP_CUDA_COMMON_CUH
#define DP_CUDA_COMMON_CUH

#include <math.h>

#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "arch.h"
#include "quant.h"
#include "settings.h"
#include "util.h"
}

/* Records the failing call in dp_last_error and returns DP_ERR_BACKEND from
 * the enclosing function. */
#define CU_TRY(call)                                                                                   \
    do {                                                                                               \
        cudaError_t e_ = (call);                                                                       \
        if (e_ != cudaSuccess)                                                                         \
            return dp_set_error(DP_ERR_BACKEND, "CUDA: %s failed: %s (%s:%d)", #call, cudaGetErrorString(e_), \
                                __FILE__, __LINE__);                                                   \
    } while (0)
/* After a kernel launch. */
#define CU_LAUNCHED() CU_TRY(cudaGetLastError())

/* A weight matrix on the device, repacked so that every block's quants start
 * on a 16-byte boundary (see weights.cu). Row r's blocks are in body at
 * r * body_row; per-block scales live in separate arrays indexed
 * r * nblk + b. */
struct DMat {
    int type;           /* DP_TYPE_* */
    int rows, cols;
    int nblk;           /* blocks per row (cols for float types; IQ4_XS: its 32-weight sub-blocks) */
    long long body_row; /* bytes of body per row */
    const uint8_t *body;
    const uint16_t *d16; /* Q4_0, Q5_0, Q8_0, Q6_K, Q3_K, IQ4_NL, IQ2 / IQ3: f16 d (IQ4_XS: per super-block of 8 blocks) */
    const uint32_t *dm;  /* Q4_1, Q5_1: f16 d | f16 m << 16; IQ4_XS: each 32 weights' ls - 32, a signed byte */
    const uint32_t *qh;  /* Q5_0, Q5_1: the fifth bits */
    const __half *w16;   /* a resident f16 copy ([rows][cols]) for the GEMMs of batched sessions, or NULL */
    const void *grid;    /* IQ2 / IQ3: the format's grid of magnitudes (weights.cu), else NULL */
};

/* Bytes of one block's body in the repacked layout (0 = not repacked: the
 * block is stored as in the file, see dp_cu_repacked()). */
static inline int dp_cu_body_bytes(int type) {
    switch (type) {
    case DP_TYPE_Q4_0: case DP_TYPE_Q4_1: case DP_TYPE_Q5_0: case DP_TYPE_Q5_1: case DP_TYPE_IQ4_NL: return 16;
    case DP_TYPE_IQ4_XS: return 16; /* per 32-weight sub-block */
    case DP_TYPE_Q8_0: return 32;
    case DP_TYPE_Q6_K: return 208;
    case DP_TYPE_Q3_K: return 112; /* qs, hmask, the 16 scales unpacked (weights.cu) */
    case DP_TYPE_Q2_K: return 80;  /* qs, scales */
    /* IQ2 / IQ3 (weights.cu): without d; 8 index bytes per 32 weights first */
    case DP_TYPE_IQ2_XXS: return 64;
    case DP_TYPE_IQ2_XS: return 72;
    case DP_TYPE_IQ2_S: return 80;
    case DP_TYPE_IQ3_XXS: return 96;
    case DP_TYPE_IQ3_S: return 112;
    default: return 0;
    }
}

#define FULL_MASK 0xffffffffu

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

/* A warp reduction (warp_sum, warp_max) over the block (blockDim.x a
 * multiple of 32, at most 1024); red holds 32 floats of shared memory, idle
 * is the operation's neutral value. Every thread gets the result. The order
 * of the operations is fixed, so results are reproducible. */
template <typename WarpOp>
__device__ __forceinline__ float block_reduce(float v, float *red, float idle, WarpOp warp_op) {
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_op(v);
    __syncthreads();
    if (lane == 0) red[w] = v;
    __syncthreads();
    v = lane < nw ? red[lane] : idle;
    return warp_op(v);
}
__device__ __forceinline__ float block_sum(float v, float *red) {
    return block_reduce(v, red, 0.0f, [](float x) { return warp_sum(x); });
}
__device__ __forceinline__ float block_max(float v, float *red) {
    return block_reduce(v, red, -INFINITY, [](float x) { return warp_max(x); });
}

/* The sum of squares of d values get(i) over the block, in one fixed order
 * that every norm uses (the standalone kernels and the ones fused into a
 * matvec prologue, which may hold the values in registers): thread t adds
 * positions 4 (t + k blockDim) + 0..3, k = 0, 1, .., one fmaf each, then
 * block_sum. Every thread gets the result. */
template <typename G> __device__ __forceinline__ float block_ss(G get, int d, float *red) {
    float ss = 0.0f;
    for (int b = 4 * (int)threadIdx.x; b < d; b += 4 * (int)blockDim.x)
#pragma unroll
        for (int i = 0; i < 4; i++)
            if (b + i < d) {
                const float v = get(b + i);
                ss = fmaf(v, v, ss);
            }
    return block_sum(ss, red);
}

/* 1 / rms(x) over d values with the CPU's formula 1 / sqrt(ss / d + eps). */
__device__ __forceinline__ float block_rms_scale(const float *x, int d, float eps, float *red) {
    const float ss = block_ss([&](int i) { return x[i]; }, d, red);
    return 1.0f / sqrtf(ss / (float)d + eps);
}

__host__ __device__ __forceinline__ float h2f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* Byte i (0..3) of v as the float 2^23 + byte: subtracting 2^23 (+ an
 * offset) converts small unsigned integers to floats exactly with one PRMT
 * and one FADD instead of a slow integer-to-float conversion. */
#define MAGIC_F 8388608.0f
__device__ __forceinline__ float byte_f(uint32_t v, int i) {
    return __uint_as_float(__byte_perm(v, 0x4B000000u, 0x7440u | (unsigned)i));
}

/* Word k (0..3) of a 16-byte load. */
__host__ __device__ __forceinline__ uint32_t wd(const uint4 &v, int k) {
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
}

/* IQ4 codes as the device keeps them (weights.cu, at upload): each code n
 * (src/quant_iq.c's codebook entry, 0..15) is stored as the byte selector
 * iq4_sel(n), which pairs selectors m and m + 8 with codebook values of one
 * sign (the even and odd codes of either half), and the nibbles are
 * reordered. IQ4_NL, per 32-weight block (16 bytes): in word k, nibble i
 * (0..3) holds the code of position 4k + i, nibble 4 + i that of position
 * 16 + 4k + i. IQ4_XS, per pair of 32-weight sub-blocks (32 bytes, the
 * K-quants' 64-weight unit): in word k (0..7), nibble i holds the code of
 * position 4k + i of the first sub-block, nibble 4 + i that of the second
 * (the pairing of Q4_K's nibbles, so that both share one x layout). */
__host__ __device__ __forceinline__ unsigned iq4_sel(unsigned n) { return (n & 8) >> 1 | (n & 6) >> 1 | (n & 1) << 3; }

/* PRMT as the hardware does it: a selector nibble with its top bit set
 * gives the selected byte's sign replicated (__byte_perm masks every
 * selector to three bits first, an instruction more per call). The host
 * version computes the same (tests/test_cuda_repack.cu decodes with it). */
__host__ __device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t s) {
#ifdef __CUDA_ARCH__
    uint32_t d;
    asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(s));
    return d;
#else
    const uint64_t t = (uint64_t)b << 32 | a;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        const unsigned c = (s >> (4 * i)) & 15u;
        uint32_t byte = (uint32_t)(t >> (8 * (c & 7u))) & 0xFFu;
        if (c & 8u) byte = byte & 0x80u ? 0xFFu : 0u;
        r |= byte << (8 * i);
    }
    return r;
#endif
}

/* The values of the eight codes of a device word w: *lo those of the low
 * four nibbles, *hi those of the high four, as signed bytes. A selector m
 * < 8 takes entry m of the table L (IQ4_L0/L1) and, flipped by the XOR to m
 * + 8, a sign byte of entry m of H (IQ4_H0/H1); a selector m + 8 takes a
 * sign byte of L's entry m and entry m of H. L holds each value XOR the
 * sign byte its partner in H gives, and its own sign bytes are zero (L's
 * entries are below 128), so the XOR of the two lookups is the value: nine
 * instructions for eight codes. */
enum : uint32_t { IQ4_L0 = 0x1530527eu, IQ4_L1 = 0x59351901u, IQ4_H0 = 0xf6ddbf98u, IQ4_H1 = 0x7145260du };
/* The tables' first words as the lookups read them. A PRMT takes one of
 * its two table words as an immediate and the other from a register; given
 * the constants, ptxas sets that register again before every PRMT (8% of
 * the IQ4_XS gate/up matvec's loop). A kernel that loads the words once
 * from memory with iq4_tab (a load ptxas cannot fold) keeps them in two
 * registers instead. */
struct Iq4Tab {
    uint32_t l, h;
};
#define IQ4_TAB_CONST (Iq4Tab{IQ4_L0, IQ4_H0})
/* p: IQ4_L0, IQ4_H0 in device memory */
__device__ __forceinline__ Iq4Tab iq4_tab(const uint2 *p) {
    Iq4Tab t;
    asm volatile("ld.global.nc.v2.u32 {%0, %1}, [%2];" : "=r"(t.l), "=r"(t.h) : "l"(p));
    return t;
}
/* The values of the low four codes of w (its high half is ignored). */
__host__ __device__ __forceinline__ uint32_t iq4_lo4(uint32_t w, Iq4Tab t = IQ4_TAB_CONST) {
    return prmt(t.l, IQ4_L1, w) ^ prmt(t.h, IQ4_H1, w ^ 0x8888u);
}
/* The values of all eight codes of w: *lo those of its low half, *hi those
 * of its high half; a reader that needs one half calls iq4_lo4. */
__host__ __device__ __forceinline__ void iq4_bytes(uint32_t w, uint32_t *lo, uint32_t *hi,
                                                   Iq4Tab t = IQ4_TAB_CONST) {
    *lo = iq4_lo4(w, t);
    *hi = iq4_lo4(w >> 16, t);
}
/* Code p (0..31) of a block's 16 bytes of IQ4 nibbles as the file holds
 * them (byte j: the codes of positions j, low, and 16 + j, high). */
static inline uint32_t iq4_code(const uint8_t *src, int p) { return p < 16 ? src[p] & 15u : (uint32_t)src[p - 16] >> 4; }
/* An IQ4_NL block's 16 bytes in the device form of iq4_bytes; for weights.cu. */
static inline void iq4_reorder(const uint8_t *src, uint8_t *dst) {
    for (int k = 0; k < 4; k++) {
        uint32_t w = 0;
        for (int i = 0; i < 4; i++)
            w |= iq4_sel(iq4_code(src, 4 * k + i)) << (4 * i) | iq4_sel(iq4_code(src, 16 + 4 * k + i)) << (16 + 4 * i);
        memcpy(dst + 4 * k, &w, 4);
    }
}
/* Two IQ4_XS sub-blocks' 16 bytes each (s0: positions 0..31 of the unit,
 * s1: 32..63) as the device's 32 bytes; for weights.cu. */
static inline void iq4_reorder_pair(const uint8_t *s0, const uint8_t *s1, uint8_t *dst) {
    for (int k = 0; k < 8; k++) {
        uint32_t w = 0;
        for (int i = 0; i < 4; i++)
            w |= iq4_sel(iq4_code(s0, 4 * k + i)) << (4 * i) | iq4_sel(iq4_code(s1, 4 * k + i)) << (16 + 4 * i);
        memcpy(dst + 4 * k, &w, 4);
    }
}

/* The fifth bits of Q5_0/Q5_1 as the device keeps them (weights.cu permutes
 * them at upload): the bit of weight 4k+i (low nibble i of quant word k) sits
 * at bit 8i+k, that of weight 16+4k+i at bit 8i+4+k. q5_bits(qh, j) then puts
 * the bits of word j's low nibbles (j < 4) or of word j-4's high nibbles
 * (j >= 4) at bit 4 of each byte with one shift and one mask. */
__host__ __device__ __forceinline__ uint32_t q5_bits(uint32_t qh, int j) { return ((qh >> j) & 0x01010101u) << 4; }
/* Bit position of weight w (0..31) in the permuted word. */
__host__ __device__ __forceinline__ int q5_bitpos(int w) {
    return w < 16 ? 8 * (w & 3) + (w >> 2) : 8 * (w & 3) + 4 + ((w - 16) >> 2);
}

/* Monotone map from float to uint32 (larger float = larger key). */
__device__ __forceinline__ uint32_t float_key(float f) {
    uint32_t b = __float_as_uint(f);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
/* The argmax key of value v at row r: larger values first, then lower rows. */
__device__ __forceinline__ unsigned long long argmax_key(float v, int r) {
    return ((unsigned long long)float_key(v) << 32) | (0xFFFFFFFFu - (uint32_t)r);
}
/* The block's largest key into *key: best is each thread's, best_s holds a
 * key per warp (NW warps); one atomicMax per block. */
template <int NW>
__device__ __forceinline__ void block_argmax(unsigned long long best, unsigned long long *best_s,
                                             unsigned long long *key) {
    if ((threadIdx.x & 31) == 0) best_s[threadIdx.x >> 5] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < NW; w++) best = best_s[w] > best ? best_s[w] : best;
        if (best) atomicMax(key, best);
    }
}
/* The row of an argmax key (float_key(value) << 32 | ~row). */
__host__ __device__ __forceinline__ int32_t key_token(unsigned long long key) {
    return (int32_t)(0xFFFFFFFFu - (uint32_t)(key & 0xFFFFFFFFu));
}

/* Programmatic dependent launch (Hopper): a kernel lets the next one start
 * launching as soon as all its CTAs run (pdl_trigger), and waits for the
 * previous kernel's completion and memory (pdl_wait) before it reads what
 * that kernel wrote. Without the launch attribute both are no-ops. Every
 * kernel waits before it exits, so completion stays transitive. */
__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* x + rmsnorm(o) * (w + off) for one element, as the CPU computes it
 * (normalise o, round, then add), with explicit roundings so the fused and
 * the separate kernel agree bit for bit. */
__device__ __forceinline__ float postnorm_add(float x, float o, float sc, float w, float off) {
    return __fadd_rn(x, __fmul_rn(__fmul_rn(o, sc), __fadd_rn(w, off)));
}

/* The gated FFN activation act(gate) * up, written as in src/cpu/ops.c with
 * explicit roundings, so that every kernel using it (the fused gate/up
 * matvec and the separate activation of the traced path) computes the same
 * bits: no multiply-add contraction that could differ between contexts. */
__device__ __forceinline__ float act_fn(int act, float g, float u) {
    if (act == DP_ACT_GELU_TANH) {
        const float k = 0.7978845608028654f;
        float g3 = __fmul_rn(__fmul_rn(__fmul_rn(0.044715f, g), g), g);
        float t = tanhf(__fmul_rn(k, __fadd_rn(g, g3)));
        return __fmul_rn(__fmul_rn(__fmul_rn(0.5f, g), __fadd_rn(1.0f, t)), u);
    }
    return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

/* Value i of a split product's output (dp_cu_gemm_parts): its n k-parts,
 * stride floats apart, summed in part order (n <= 1: the value itself).
 * Every reader of a split product adds the parts this way. */
__device__ __forceinline__ float parts_at(const float *p, int n, long long stride, long long i) {
    float a = p[i];
    for (int j = 1; j < n; j++) a += p[j * stride + i];
    return a;
}

/* 1 / rms of one head vector (q/k norm) computed by one warp, lanes striding
 * the vector; the fused decode attention and k_qk_rope both use it, so
 * tracing (which takes k_qk_rope) sees the same values. */
__device__ __forceinline__ float warp_rms_scale(const float *v, int HD, float eps) {
    float ss = 0.0f;
    for (int d = (int)(threadIdx.x & 31); d < HD; d += 32) ss += v[d] * v[d];
    ss = warp_sum(ss);
    return 1.0f / sqrtf(ss / (float)HD + eps);
}

/* The rotation of pair i at position p: cos and sin of p * inv_freq[i],
 * each times ms (LongRoPE's attention factor; 1 otherwise), as the CPU. */
__device__ __forceinline__ float2 rope_cs(int i, const float *inv_freq, int p, float ms) {
    float s, c;
    sincosf((float)p * inv_freq[i], &s, &c); /* one range reduction for both */
    return ms == 1.0f ? make_float2(c, s) : make_float2(__fmul_rn(c, ms), __fmul_rn(s, ms));
}
/* A scaled attention score soft-capped: cap * tanh(s / cap), as HF writes
 * it (cap 0: none). */
__device__ __forceinline__ float softcap_f(float s, float cap) {
    return cap != 0.0f ? __fmul_rn(tanhf(__fdiv_rn(s, cap)), cap) : s;
}
/* The elements (x, y) of pair i (< n_rot / 2): NeoX pairs i with i + n_rot / 2, the adjacent style 2i with 2i + 1. */
__device__ __forceinline__ int2 rope_ab(int i, int n_rot, int neox) {
    return neox ? make_int2(i, i + n_rot / 2) : make_int2(2 * i, 2 * i + 1);
}
/* (x0, x1) rotated by cs, as src/cpu computes it (explicit roundings: no contraction). */
__device__ __forceinline__ float2 rope_rot(float x0, float x1, float2 cs) {
    return make_float2(__fsub_rn(__fmul_rn(x0, cs.x), __fmul_rn(x1, cs.y)), __fadd_rn(__fmul_rn(x0, cs.y), __fmul_rn(x1, cs.x)));
}
/* RoPE of element pair i (< n_rot / 2) of head vector v with its rotation cs. */
__device__ __forceinline__ void rope_pair_cs(float *v, int i, int n_rot, int neox, float2 cs) {
    const int2 ab = rope_ab(i, n_rot, neox);
    const float2 y = rope_rot(v[ab.x], v[ab.y], cs);
    v[ab.x] = y.x, v[ab.y] = y.y;
}
/* RoPE of pair i of v at position p (cos and sin computed here). */
__device__ __forceinline__ void rope_pair(float *v, int i, int n_rot, int neox, const float *inv_freq, int p,
                                          float ms) {
    rope_pair_cs(v, i, n_rot, neox, rope_cs(i, inv_freq, p, ms));
}

/* The L2 evict-first cache policy, for data read once per token (the
 * weights, the K/V rows): loads with it leave in L2 what the next launches
 * read again (see ld16 in qunit.cuh). */
__device__ __forceinline__ uint64_t l2_evict_first() {
    uint64_t pol;
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
    return pol;
}

/* The tuning settings the launchers read (settings.h), set when a CUDA
 * session is made (or by verify). */
extern dp_settings dp_cu_set;

/* Launches a kernel, with the programmatic-dependent-launch attribute when
 * dp_cu_pdl is on (DOPPLER_CUDA_PDL=0 turns it off, and so does a graph
 * capture that fails with it). */
extern int dp_cu_pdl;
template <typename... KArgs, typename... Args>
static inline cudaError_t dp_cu_launch(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                                       cudaStream_t st, Args... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = st;
    cfg.attrs = attr;
    cfg.numAttrs = dp_cu_pdl ? 1 : 0;
    return cudaLaunchKernelEx(&cfg, kernel, ((KArgs)args)...);
}

#endif
