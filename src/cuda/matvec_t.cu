/* k_matvec_t: the default decode matrix-vector product for Q4_0, Q5_0,
 * Q8_0, Q4_K and Q6_K, its integer dot products done by the tensor cores.
 *
 * k_matvec_w spends about four integer instructions per weight (nibble
 * masks, two __dp4a per four weights for the two bytes of the 16-bit x,
 * scales): a Qwen2.5-3B gate/up launch was issue-bound at ~1.7 TB/s. One
 * mma.sync.m16n8k32 multiplies a 16 x 32 tile of 8-bit weights by a 32 x 8
 * tile of 8-bit x in one instruction per warp; the weights need only their
 * nibble masks (a Q4_K high nibble is used in place, 16 q, its 1/16 going
 * into the scale).
 *
 * x is quantised per block of 32 as for k_matvec_w, but with both bytes
 * signed: q = rint(x * 32639 / amax) = 256 h + l, h and l in [-128, 127], so
 * that one s8 B operand holds both: column 2j the high bytes and column 2j+1
 * the low bytes of scale group j (j = 0..3). The 16 rows of the A operand are
 * (matrix row, scale group) pairs, so the wanted sums are the "diagonal"
 * outputs where the A row's group is the B column's group: 16 of the 128
 * outputs, spread over the lanes, each an exact int32 dot product of one
 * scale group, scaled in float and summed per row.
 *
 * A warp takes a tile of 4 rows and walks its k-steps (one 256-weight block
 * of a K-quant, four 32-weight blocks otherwise), the next step's weights
 * loaded into registers while the current one is used (the first before
 * griddepcontrol.wait, so that they stream in while the previous kernel
 * finishes). Matrices with few tiles split each tile's k-steps over ks warps
 * of the CTA (a CTA task: 8 / ks tiles x ks parts), summed in a fixed order
 * in shared memory. Every CTA stages x (with the RMSNorm, and Gemma's
 * sandwich post-norm + residual add, when the launch asks) in its prologue.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k32 / m16n8k16 with 8-bit types): lane
 * = 4 g + t; A registers a0..a3 hold rows g, g + 8, g, g + 8 at k = 4t..4t+3
 * (a0, a1) and 16 + 4t.. (a2, a3); B registers b0, b1 hold column g at k =
 * 4t.. and 16 + 4t..; C c0, c1 hold row g, columns 2t, 2t + 1 and c2, c3 row
 * g + 8 (k16: a0, a1 and b0 only). The order of k inside a group is free as
 * long as A and B agree: a lane takes the bytes it loads in memory order. */
#include "xstage.cuh"

enum { T_THREADS = 256, T_WARPS = 8, TQMAX = 32639 };

/* x in shared memory: per block of 32 positions 64 bytes (the 32 high
 * bytes, then the 32 low bytes) and a float4 {dx, dx S32, dx S16a, dx S16b}
 * (S: the sum of q over the block, its first and its second half). */
struct TArgs {
    MvLaunch L;
    int nj;        /* jobs (gate/up: one, over both matrices) */
    int tile0[4];  /* first tile (4 rows) of each job; tile0[nj]: all tiles */
    int task0[4];  /* first CTA task of each job; task0[nj]: the grid */
    int nk[3];     /* k-steps per row of each job */
    int ks[3];     /* k-parts per tile (1, 2, 4, 8) of each job */
    int run[3];    /* consecutive tiles per slot (8 / ks slots per CTA) */
    int off_xs, off_xe;
    int l1pf;
};

/* One lane's weights of one k-step (the meaning of the words by format). */
struct TRaw {
    uint32_t w[8];
    uint4 hd;
    uint32_t d;
};

__device__ __forceinline__ uint2 ldg64(const uint8_t *p) { return __ldg((const uint2 *)p); }
__device__ __forceinline__ uint32_t ldg32(const uint8_t *p) { return __ldg((const uint32_t *)p); }

__device__ __forceinline__ void mma_k32(int *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1, bool sa) {
    if (sa)
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    else
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};"
            : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_k16(int *c, uint32_t a0, uint32_t a1, uint32_t b0) {
    asm("mma.sync.aligned.m16n8k16.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};"
        : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
        : "r"(a0), "r"(a1), "r"(b0));
}

__host__ __device__ static constexpr bool t_kquant(int type) { return type == DP_TYPE_Q4_K || type == DP_TYPE_Q6_K; }
/* k-steps of a row of cols weights */
__host__ __device__ static inline int t_steps(int type, int cols) {
    return t_kquant(type) ? cols / 256 : (cols / 32 + 3) / 4;
}

/* ------------------------------------------------------------- loads */

/* The fields of a matrix the loads need, copied into registers once. */
struct TM {
    const uint8_t *body;
    long long brow;
    int rows, nblk;
    const uint16_t *d16;
    const uint32_t *qh;
};
__device__ __forceinline__ TM t_mat(const DMat &W) {
    TM m;
    m.body = W.body, m.brow = W.body_row, m.rows = W.rows, m.nblk = W.nblk, m.d16 = W.d16, m.qh = W.qh;
    return m;
}

/* Lane (g, t)'s weights of k-step s of the tile at row0. K-quants: the
 * lane's row is row0 + g/2; the 32-weight formats: rows row0 + g/4 (h = 0)
 * and row0 + 2 + g/4 (h = 1), block 4s + g%4 (quants in w[2h], w[2h+1],
 * fifth bits in w[4+h], d in w[6+h]). Rows and blocks past the matrix read
 * as zeros. Nothing here uses the loaded values, so that the loads stay in
 * flight until the step is computed. */
template <int T> __device__ __forceinline__ void t_load(const TM &W, int row0, int s, TRaw &r) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int i = 0; i < 8; i++) r.w[i] = 0;
    r.hd = make_uint4(0u, 0u, 0u, 0u);
    r.d = 0;
    if (T == DP_TYPE_Q4_K || T == DP_TYPE_Q6_K) {
        const int row = row0 + (g >> 1);
        if (row >= W.rows) return;
        if (T == DP_TYPE_Q4_K) {
            /* chunk 2h + g%2 of the block: its low nibbles are sub-block
             * 4h + 2 (g%2), its high nibbles the next one */
            const uint8_t *blk = W.body + (long long)row * W.brow + (long long)s * 144;
            const uint2 a = ldg64(blk + 16 + 32 * (g & 1) + 8 * t), b = ldg64(blk + 80 + 32 * (g & 1) + 8 * t);
            r.w[0] = a.x, r.w[1] = a.y, r.w[2] = b.x, r.w[3] = b.y;
            r.hd = __ldg((const uint4 *)blk);
        } else {
            /* half n, sub-block e of 16: the ql bytes of q = g%2 (low
             * nibbles) and q = 2 + g%2 (high nibbles), their qh bytes */
            const uint8_t *blk = W.body + (long long)row * W.brow + (long long)s * 208;
#pragma unroll
            for (int n = 0; n < 2; n++)
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    r.w[2 * n + e] = ldg32(blk + 64 * n + 32 * (g & 1) + 16 * e + 4 * t);
                    r.w[4 + 2 * n + e] = ldg32(blk + 128 + 32 * n + 16 * e + 4 * t);
                }
            r.hd = __ldg((const uint4 *)(blk + 192));
            r.d = __ldg(W.d16 + (long long)row * W.nblk + s);
        }
        return;
    }
    const int blk = 4 * s + (g & 3);
    if (blk >= W.nblk) return;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        const int row = row0 + 2 * h + (g >> 2);
        if (row >= W.rows) continue;
        const long long bi = (long long)row * W.nblk + blk;
        const uint8_t *rb = W.body + (long long)row * W.brow;
        if (T == DP_TYPE_Q8_0) {
            const uint2 a = ldg64(rb + blk * 32 + 8 * t);
            r.w[2 * h] = a.x, r.w[2 * h + 1] = a.y;
        } else {
            r.w[2 * h] = ldg32(rb + blk * 16 + 4 * t);
            if (T == DP_TYPE_Q5_0) r.w[4 + h] = __ldg(W.qh + bi);
        }
        r.w[6 + h] = __ldg(W.d16 + bi);
    }
}

/* ------------------------------------------------------------ compute */

/* acc[0] (+)= the lane's share of its row (K-quants), acc[0] / acc[1] of
 * rows g/4 and 2 + g/4 (32-weight formats). xq, xs: the staged x. */
template <int T>
__device__ __forceinline__ void t_math(const TRaw &r, int s, const uint8_t *xq, const float4 *xs, int nblk,
                                       float *acc) {
    const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    if (T == DP_TYPE_Q4_K) {
        int dot[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint2 b = *(const uint2 *)(xq + (8 * s + 4 * h + (g >> 1)) * 64 + (g & 1) * 32 + 8 * t);
            int c[4] = {0, 0, 0, 0};
            const uint32_t w0 = r.w[2 * h], w1 = r.w[2 * h + 1];
            mma_k32(c, w0 & 0x0F0F0F0Fu, w0 & 0xF0F0F0F0u, w1 & 0x0F0F0F0Fu, w1 & 0xF0F0F0F0u, b.x, b.y, false);
            dot[h] = (t & 1) ? c[2] * 256 + c[3] : c[0] * 256 + c[1];
        }
        /* the lane's sub-blocks: t and 4 + t of its row (when (t >> 1) == g % 2) */
        const int sh = 8 * t;
        const uint32_t y = r.hd.y >> sh, z = r.hd.z >> sh, w = r.hd.w >> sh;
        const float sc0 = (float)(y & 63u), m0 = (float)(z & 63u);
        const float sc1 = (float)((w & 15u) | ((y >> 2) & 48u)), m1 = (float)(((w >> 4) & 15u) | ((z >> 2) & 48u));
        const float d = h2f((uint16_t)r.hd.x) * ((t & 1) ? 0.0625f : 1.0f), dmin = h2f((uint16_t)(r.hd.x >> 16));
        const float4 x0 = xs[8 * s + t], x1 = xs[8 * s + 4 + t];
        const float v = d * fmaf(sc0, (float)dot[0] * x0.x, sc1 * ((float)dot[1] * x1.x)) -
                        dmin * fmaf(m0, x0.y, m1 * x1.y);
        if ((t >> 1) == (g & 1)) acc[0] += v;
    } else if (T == DP_TYPE_Q6_K) {
        float v = 0.0f;
#pragma unroll
        for (int n = 0; n < 2; n++) {
            const float4 xv = xs[8 * s + 4 * n + t];
            const uint32_t scw = n ? (t >> 1 ? r.hd.w : r.hd.z) : (t >> 1 ? r.hd.y : r.hd.x);
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int i = 2 * n + e;
                const uint32_t ql = r.w[i], qh = r.w[4 + i];
                const uint32_t a0 = (ql & 0x0F0F0F0Fu) | (((qh >> (2 * (g & 1))) & 0x03030303u) << 4);
                const uint32_t a1 = ((ql >> 4) & 0x0F0F0F0Fu) | (((qh >> (4 + 2 * (g & 1))) & 0x03030303u) << 4);
                const uint32_t b = *(const uint32_t *)(xq + (8 * s + 4 * n + (g >> 1)) * 64 + (g & 1) * 32 + 16 * e +
                                                       4 * t);
                int c[4] = {0, 0, 0, 0};
                mma_k16(c, a0, a1, b);
                const int dot = t >= 2 ? c[2] * 256 + c[3] : c[0] * 256 + c[1];
                const float sc = (float)(int8_t)(scw >> (8 * (2 * (t & 1) + e)));
                v = fmaf(sc, fmaf((float)dot, xv.x, -32.0f * (e ? xv.w : xv.z)), v);
            }
        }
        if ((t & 1) == (g & 1)) acc[0] = fmaf(h2f((uint16_t)r.d), v, acc[0]);
    } else {
        int c[4] = {0, 0, 0, 0};
        const uint8_t *xb = xq + (4 * s + (g >> 1)) * 64 + (g & 1) * 32;
        if (T == DP_TYPE_Q8_0) {
            const uint2 b = *(const uint2 *)(xb + 8 * t);
            mma_k32(c, r.w[0], r.w[2], r.w[1], r.w[3], b.x, b.y, true);
        } else {
            /* a lane's quant word holds weights 4t.. (low nibbles) and 16 + 4t.. (high) */
            const uint32_t b0 = *(const uint32_t *)(xb + 4 * t), b1 = *(const uint32_t *)(xb + 16 + 4 * t);
            uint32_t a[4];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint32_t q = r.w[2 * h];
                a[h] = q & 0x0F0F0F0Fu;
                a[2 + h] = (q >> 4) & 0x0F0F0F0Fu;
                if (T == DP_TYPE_Q5_0) {
                    a[h] |= q5_bits(r.w[4 + h], t);
                    a[2 + h] |= q5_bits(r.w[4 + h], 4 + t);
                }
            }
            mma_k32(c, a[0], a[1], a[2], a[3], b0, b1, false);
        }
        const int bl = 4 * s + t;
        if (t == (g & 3) && bl < nblk) {
            const float4 xv = xs[bl];
            const float off = T == DP_TYPE_Q8_0 ? 0.0f : T == DP_TYPE_Q5_0 ? -16.0f : -8.0f;
            acc[0] = fmaf(h2f((uint16_t)r.w[6]), fmaf((float)(c[0] * 256 + c[1]), xv.x, off * xv.y), acc[0]);
            acc[1] = fmaf(h2f((uint16_t)r.w[7]), fmaf((float)(c[2] * 256 + c[3]), xv.x, off * xv.y), acc[1]);
        }
    }
}

/* ----------------------------------------------------------- prologue */

/* Quantises window w (128 positions, 4 per lane: v) into the layout above. */
__device__ __forceinline__ void t_quant_win(uint8_t *sm, float4 *xs, int pos, bool valid, float4 v) {
    const int lane = threadIdx.x & 31;
    float am = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    am = fmaxf(am, __shfl_xor_sync(FULL_MASK, am, 1));
    am = fmaxf(am, __shfl_xor_sync(FULL_MASK, am, 2));
    am = fmaxf(am, __shfl_xor_sync(FULL_MASK, am, 4));
    const float inv = am > 0.0f ? (float)TQMAX / am : 0.0f, dx = am / (float)TQMAX;
    const int q[4] = {__float2int_rn(v.x * inv), __float2int_rn(v.y * inv), __float2int_rn(v.z * inv),
                      __float2int_rn(v.w * inv)};
    uint32_t hw = 0, lw = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int h = (q[i] + 128) >> 8, l = q[i] - 256 * h;
        hw |= (uint32_t)(h & 255) << (8 * i);
        lw |= (uint32_t)(l & 255) << (8 * i);
    }
    int s16 = q[0] + q[1] + q[2] + q[3];
    s16 += __shfl_xor_sync(FULL_MASK, s16, 1);
    s16 += __shfl_xor_sync(FULL_MASK, s16, 2);
    const int s16b = __shfl_down_sync(FULL_MASK, s16, 4);
    if (valid) {
        uint8_t *blk = sm + (pos >> 5) * 64 + (pos & 31);
        *(uint32_t *)blk = hw;
        *(uint32_t *)(blk + 32) = lw;
        if (!(lane & 7)) xs[pos >> 5] = make_float4(dx, dx * (float)(s16 + s16b), dx * (float)s16, dx * (float)s16b);
    }
}

/* x prepared by xs_stage (xstage.cuh) and quantised into the layout above;
 * ends with __syncthreads. */
__device__ __forceinline__ void t_stage_x(const TArgs &A, uint8_t *sm, float *red) {
    float4 *xs = (float4 *)(sm + A.off_xs);
    xs_stage(A.L, (float *)(sm + A.off_xe), red,
             [&](int pos, bool valid, float4 v) { t_quant_win(sm, xs, pos, valid, v); });
    __syncthreads();
}

/* -------------------------------------------------------------- kernel */

/* A CTA is one job's: 8 / ks slots of `run` consecutive tiles each, every
 * tile's k-steps split into ks parts of q = ceil(nk / ks) items (one warp
 * each; the last part's items past nk are empty, so that all warps of a CTA
 * reach the end of a tile together). A warp walks its (tile, item) pairs;
 * TIt is its place. */
struct TIt {
    int tile, tend, i, q, s0, nk, ntiles;
};
__device__ __forceinline__ bool t_next(TIt &it) {
    if (it.i + 1 < it.q) {
        it.i++;
        return true;
    }
    if (it.tile + 1 < it.tend) {
        it.tile++;
        it.i = 0;
        return true;
    }
    return false;
}
/* the item's k-step, or -1 when it is empty */
__device__ __forceinline__ int t_step(const TIt &it) {
    const int s = it.s0 + it.i;
    return it.tile < it.ntiles && s < it.nk ? s : -1;
}

/* Loading depth: k-steps in flight per warp (registers: about 8 per step
 * of Q4_K, 13 of Q6_K, 3-5 of the 32-weight formats; twice for gate/up). */
__host__ __device__ constexpr int t_depth(int T, int GU) {
    return T == DP_TYPE_Q6_K ? (GU ? 2 : 3) : T == DP_TYPE_Q4_K ? 4 : GU ? 4 : 6;
}

/* Lanes' shares of each row summed over the warp: K-quants: lane 8R ends
 * with row R; otherwise lane 16R with rows R (v[0]) and 2 + R (v[1]). */
template <int T, int GU> __device__ __forceinline__ void t_warp_sum(float *v, float *v2) {
#pragma unroll
    for (int o = 1; o < (t_kquant(T) ? 8 : 16); o <<= 1)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            v[i] += __shfl_xor_sync(FULL_MASK, v[i], o);
            if (GU) v2[i] += __shfl_xor_sync(FULL_MASK, v2[i], o);
        }
}

/* Writes output row `row` of job j from its sums (s: gate with GU, s2: up). */
/* What row `row` of job j adds to its sum: the old y (MV_ADD), the bias, or 0. */
template <int GU> __device__ __forceinline__ float t_pre(const MvLaunch &L, int j, int row) {
    const MvJob &J = L.job[j];
    if (GU || row >= J.w.rows) return 0.0f;
    if (L.mode == MV_ADD) return J.y[row];
    return J.bias ? __ldg(J.bias + row) : 0.0f;
}
/* Writes output row `row` of job j from its sums (s: gate with GU, s2: up)
 * and what it adds (pre: t_pre). */
template <int GU>
__device__ __forceinline__ void t_out(const MvLaunch &L, int j, int row, float s, float s2, float pre,
                                      unsigned long long &best) {
    const MvJob &J = L.job[j];
    float y;
    if (GU) y = act_fn(L.act, s, s2);
    else if (L.mode == MV_ADD) y = pre + s;
    else y = J.bias ? s + pre : s;
    J.y[row] = y;
    if (!GU && L.argmax_key) {
        const unsigned long long key = ((unsigned long long)float_key(y) << 32) | (0xFFFFFFFFu - (uint32_t)row);
        best = key > best ? key : best;
    }
}

template <int T, int GU>
__device__ __forceinline__ void t_body(const TArgs &A, int j, int local, uint8_t *smt, float *red,
                                       float (*part)[2][4], unsigned long long &best) {
    constexpr int P = t_depth(T, GU);
    constexpr bool KQ = t_kquant(T);
    const MvLaunch &L = A.L;
    const TM W = t_mat(L.job[j].w), W2 = t_mat(L.job[GU ? 1 : j].w);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int ks = A.ks[j], run = A.run[j], tps = T_WARPS / ks;
    const int slot = warp / ks, kp = warp - slot * ks;
    TIt it;
    it.nk = A.nk[j];
    it.ntiles = A.tile0[j + 1] - A.tile0[j];
    it.q = (it.nk + ks - 1) / ks;
    it.s0 = kp * it.q;
    it.tile = (local * tps + slot) * run;
    it.tend = it.tile + run;
    it.i = 0;
    /* the first P items' weights, before waiting for the previous kernel */
    TRaw buf[P], buf2[GU ? P : 1];
    TIt li = it;
    bool lok = true;
#pragma unroll
    for (int i = 0; i < P; i++)
        if (lok) {
            const int s = t_step(li);
            if (s >= 0) {
                t_load<T>(W, li.tile * 4, s, buf[i]);
                if (GU) t_load<T>(W2, li.tile * 4, s, buf2[i]);
            }
            lok = t_next(li);
        }
    if (A.l1pf) xs_prefetch_l1(L);
    pdl_wait();
    /* what the first tile's output rows add (the old y of a residual add is
     * the previous kernels' output): loaded now, used after the k-steps. The
     * writers: ks == 1, lane 8R (K-quants: row R) or 16R (rows R, 2 + R);
     * ks > 1, thread 4 sl + R of the CTA (slot sl, row R). */
    const int first = it.tile, csl = threadIdx.x >> 2, cR = threadIdx.x & 3;
    float pre[2] = {0.0f, 0.0f};
    if (ks == 1) {
        if (KQ ? !(lane & 7) : !(lane & 15)) {
            const int R = KQ ? lane >> 3 : lane >> 4;
            pre[0] = t_pre<GU>(L, j, first * 4 + R);
            if (!KQ) pre[1] = t_pre<GU>(L, j, first * 4 + 2 + R);
        }
    } else if (csl < tps) {
        pre[0] = t_pre<GU>(L, j, (local * tps + csl) * run * 4 + cR);
    }
    t_stage_x(A, smt, red);
    const uint8_t *xq = smt;
    const float4 *xs = (const float4 *)(smt + A.off_xs);

    float acc[2] = {0.0f, 0.0f}, acc2[2] = {0.0f, 0.0f};
    bool ok = true;
    while (ok) {
#pragma unroll
        for (int i = 0; i < P; i++) {
            if (ok) { /* uniform over the CTA */
                const int s = t_step(it);
                if (s >= 0) {
                    t_math<T>(buf[i], s, xq, xs, W.nblk, acc);
                    if (GU) t_math<T>(buf2[i], s, xq, xs, W.nblk, acc2);
                }
                if (lok) { /* the slot is free: the item P ahead */
                    const int sl = t_step(li);
                    if (sl >= 0) {
                        t_load<T>(W, li.tile * 4, sl, buf[i]);
                        if (GU) t_load<T>(W2, li.tile * 4, sl, buf2[i]);
                    }
                    lok = t_next(li);
                }
                if (it.i + 1 == it.q) { /* the end of a tile */
                    t_warp_sum<T, GU>(acc, acc2);
                    const int row0 = it.tile * 4;
                    const bool fst = it.tile == first;
                    if (ks == 1) {
                        if (KQ ? !(lane & 7) : !(lane & 15)) {
                            const int R = KQ ? lane >> 3 : lane >> 4;
                            if (row0 + R < W.rows)
                                t_out<GU>(L, j, row0 + R, acc[0], acc2[0], fst ? pre[0] : t_pre<GU>(L, j, row0 + R),
                                          best);
                            if (!KQ && row0 + 2 + R < W.rows)
                                t_out<GU>(L, j, row0 + 2 + R, acc[1], acc2[1],
                                          fst ? pre[1] : t_pre<GU>(L, j, row0 + 2 + R), best);
                        }
                    } else { /* the warps' k-parts, summed in order */
                        if (KQ ? !(lane & 7) : !(lane & 15)) {
                            const int R = KQ ? lane >> 3 : lane >> 4;
                            part[warp][0][R] = acc[0];
                            part[warp][1][R] = acc2[0];
                            if (!KQ) part[warp][0][2 + R] = acc[1], part[warp][1][2 + R] = acc2[1];
                        }
                        __syncthreads();
                        const int ctile = (local * tps + csl) * run + (it.tile - first), row = ctile * 4 + cR;
                        if (csl < tps && ctile < it.ntiles && row < W.rows) {
                            float sum = 0.0f, sum2 = 0.0f;
                            for (int k = 0; k < ks; k++) {
                                sum += part[csl * ks + k][0][cR];
                                if (GU) sum2 += part[csl * ks + k][1][cR];
                            }
                            t_out<GU>(L, j, row, sum, sum2, fst ? pre[0] : t_pre<GU>(L, j, row), best);
                        }
                        __syncthreads();
                    }
                    acc[0] = acc[1] = acc2[0] = acc2[1] = 0.0f;
                }
                ok = t_next(it);
            }
        }
    }
}

/* T < 0: the launch's jobs differ in format (a CTA's job decides). */
template <int T, int GU> __global__ void __launch_bounds__(T_THREADS, 2) k_matvec_t(const TArgs A) {
    extern __shared__ __align__(16) uint8_t smt[];
    __shared__ float red[32];
    __shared__ float part[T_WARPS][2][4];
    __shared__ unsigned long long best_s[T_WARPS];
    const MvLaunch &L = A.L;
    pdl_trigger();
    int j = 0;
    while (j + 1 < A.nj && (int)blockIdx.x >= A.task0[j + 1]) j++;
    const int local = blockIdx.x - A.task0[j];
    unsigned long long best = 0;
    if (T >= 0) {
        t_body<(T >= 0 ? T : DP_TYPE_Q4_K), GU>(A, j, local, smt, red, part, best);
    } else {
        switch (L.job[j].w.type) {
        case DP_TYPE_Q4_0: t_body<DP_TYPE_Q4_0, 0>(A, j, local, smt, red, part, best); break;
        case DP_TYPE_Q5_0: t_body<DP_TYPE_Q5_0, 0>(A, j, local, smt, red, part, best); break;
        case DP_TYPE_Q8_0: t_body<DP_TYPE_Q8_0, 0>(A, j, local, smt, red, part, best); break;
        case DP_TYPE_Q4_K: t_body<DP_TYPE_Q4_K, 0>(A, j, local, smt, red, part, best); break;
        default: t_body<DP_TYPE_Q6_K, 0>(A, j, local, smt, red, part, best); break;
        }
    }
    if (!GU && L.argmax_key) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            const unsigned long long b = __shfl_xor_sync(FULL_MASK, best, o);
            best = b > best ? b : best;
        }
        if (lane == 0) best_s[warp] = best;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < T_WARPS; w++) best = best_s[w] > best ? best_s[w] : best;
            if (best) atomicMax(L.argmax_key, best);
        }
    }
}

/* ------------------------------------------------------------- launch */

typedef void (*MvtFn)(const TArgs);
static const int g_t_types[5] = {DP_TYPE_Q4_0, DP_TYPE_Q5_0, DP_TYPE_Q8_0, DP_TYPE_Q4_K, DP_TYPE_Q6_K};
#define T_FNS(GU)                                                                                                 \
    {k_matvec_t<DP_TYPE_Q4_0, GU>, k_matvec_t<DP_TYPE_Q5_0, GU>, k_matvec_t<DP_TYPE_Q8_0, GU>,                     \
     k_matvec_t<DP_TYPE_Q4_K, GU>, k_matvec_t<DP_TYPE_Q6_K, GU>, GU ? NULL : k_matvec_t<-1, 0>}
/* [GU][format], format index 5: mixed */
static const MvtFn g_t_fn[2][6] = {T_FNS(0), T_FNS(1)};
#undef T_FNS

static int g_t_env = -1, g_t_on = -1, g_t_nsm = 0, g_t_smax = 0, g_t_l1 = 1, g_t_ks = 0;

static int t_env(void) {
    if (g_t_env < 0) {
        const char *e = getenv("DOPPLER_CUDA_MVT"); /* 1: k_matvec_t where it takes the launch */
        g_t_env = e && *e == '1';
        const char *l1 = getenv("DOPPLER_CUDA_MVW_L1PF"); /* 0: no L1 prefetch of the norm weights */
        g_t_l1 = !(l1 && *l1 == '0');
        const char *k = getenv("DOPPLER_CUDA_MVT_KS"); /* k-parts per tile for every job (1, 2, 4, 8) */
        if (k && (*k == '1' || *k == '2' || *k == '4' || *k == '8')) g_t_ks = *k - '0';
    }
    return g_t_env;
}
void dp_cu_matvec_t_set(int on) { g_t_on = on < 0 ? -1 : on; }
static int t_index(int type) {
    for (int i = 0; i < 5; i++)
        if (g_t_types[i] == type) return i;
    return -1;
}
int dp_cu_matvec_t_type(int type) { return dp_cu_matvec_q_ok(type) && t_index(type) >= 0; }
int dp_cu_matvec_t_ok(int type) {
    const int on = g_t_on >= 0 ? g_t_on : t_env();
    return on && dp_cu_matvec_t_type(type);
}

static int t_init(void) {
    int dev, optin = 0;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaDeviceGetAttribute(&g_t_nsm, cudaDevAttrMultiProcessorCount, dev));
    CU_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    g_t_smax = optin - 2048;
    for (int gu = 0; gu < 2; gu++)
        for (int i = 0; i < 6; i++)
            if (g_t_fn[gu][i])
                CU_TRY(cudaFuncSetAttribute(g_t_fn[gu][i], cudaFuncAttributeMaxDynamicSharedMemorySize, g_t_smax));
    return DP_OK;
}

int dp_cu_matvec_t(const MvLaunch *L, int *taken, cudaStream_t st) {
    *taken = 0;
    if (L->xq_in.piece || L->xq_out.piece) return DP_OK;
    const int gu = L->mode == MV_GATEUP;
    int same = 1;
    for (int j = 0; j < L->njobs; j++) {
        if (!dp_cu_matvec_t_ok(L->job[j].w.type)) return DP_OK;
        same &= L->job[j].w.type == L->job[0].w.type;
    }
    if (gu && (!same || L->job[0].w.rows != L->job[1].w.rows)) return DP_OK;
    if (!g_t_nsm) {
        int rc = t_init();
        if (rc) return rc;
    }
    TArgs A;
    memset(&A, 0, sizeof A);
    A.L = *L;
    A.nj = gu ? 1 : L->njobs;
    /* One wave of CTAs (two per SM), shared among the jobs by their weights'
     * k-steps. Per job, the split (ks k-parts per tile) and the tiles per
     * slot (run) with the fewest items per warp (+ half an item for each
     * k-part sum) that fit its share. The launch composition decides, so
     * the traced path launches Q/K/V together too (gate and up are one job
     * either way). */
    int tiles = 0, tasks = 0;
    const long long cap = 2LL * g_t_nsm;
    long long work = 0;
    for (int j = 0; j < A.nj; j++)
        work += (long long)(L->job[j].w.rows + 3) / 4 * t_steps(L->job[j].w.type, L->cols);
    for (int j = 0; j < A.nj; j++) {
        const DMat &W = L->job[j].w;
        const int nt = (W.rows + 3) / 4, nk = t_steps(W.type, L->cols);
        A.tile0[j] = tiles, A.task0[j] = tasks, A.nk[j] = nk;
        tiles += nt;
        long long share = cap * ((long long)nt * nk) / (work > 0 ? work : 1);
        if (share < 1) share = 1;
        double bestc = -1.0;
        for (int ks = 1; ks <= 8 && ks <= nk; ks *= 2) {
            const int tps = 8 / ks, q = (nk + ks - 1) / ks;
            const long long run = (nt + tps * share - 1) / (tps * share);
            const double c = (double)run * (q + (ks > 1 ? 0.5 : 0.0));
            if (g_t_ks ? ks == g_t_ks : (bestc < 0 || c < bestc - 1e-9)) bestc = c, A.ks[j] = ks, A.run[j] = (int)run;
        }
        if (!A.ks[j]) A.ks[j] = 1, A.run[j] = (int)((nt + 8 * share - 1) / (8 * share));
        const int per = (8 / A.ks[j]) * A.run[j];
        tasks += (nt + per - 1) / per;
    }
    A.tile0[A.nj] = tiles, A.task0[A.nj] = tasks;
    const int nbq = (L->cols + 127) / 128 * 4; /* blocks of 32, whole k-steps */
    A.off_xs = nbq * 64;
    A.off_xe = A.off_xs + nbq * 16;
    const size_t smem = (size_t)A.off_xe + (L->res_o ? (size_t)L->cols * 4 : 0);
    if (smem > (size_t)g_t_smax) return DP_OK;
    A.l1pf = g_t_l1;
    const MvtFn fn = g_t_fn[gu][same ? t_index(L->job[0].w.type) : 5];
    if (!fn) return DP_OK;
    const long long grid = tasks;
    CU_TRY(dp_cu_launch(fn, dim3(grid < 1 ? 1 : (unsigned)grid), dim3(T_THREADS), smem, st, A));
    *taken = 1;
    return DP_OK;
}
