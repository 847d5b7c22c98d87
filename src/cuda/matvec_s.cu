/* k_matvec_s: the default decode matrix-vector product of the integer path
 * (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K), with the weights
 * streamed into shared memory by the bulk copy engine.
 *
 * A decode step is a chain of small kernels, each of which needs the one
 * before it (x) but not for its weights. k_matvec_w loaded only its first
 * chunk of weights into registers before griddepcontrol.wait; a Qwen2.5-3B
 * gate/up launch then ran at ~1.7 TB/s and the small Q/K/V and o_proj
 * launches took 4-6 us for 1-3 MB. Here each CTA owns a contiguous range
 * of rows and copies them, stage by stage, into a ring of shared-memory
 * slots with cp.async.bulk (one instruction per contiguous range, no
 * registers, completion counted on an mbarrier per slot). The first slots
 * are filled *before* griddepcontrol.wait: a CTA is as small as two per SM
 * allow (256 threads, <= 128 registers, <= 112 KB of shared memory), so the
 * next kernel's CTAs sit beside the running ones, and its weights stream in
 * while the previous kernel finishes (the whole matrix when it fits the
 * rings: Q/K/V, o_proj, Gemma's FFN). After the wait the CTA stages x as
 * k_matvec_w does (q_stage_x), then computes each stage from shared memory
 * and refills the slot it frees.
 *
 * Work: the launch's rows (a gate/up launch: gate row r with up row r) are
 * cut into items of RW rows, RW from the row's units alone (so a separate
 * gate matvec sums exactly like the fused gate/up one), and the CTA's items
 * into stages of up to 32 items (a warp takes every 8th). A warp spreads its
 * item's (row, unit) pairs over the lanes. Rows of more than 64 units
 * (a down projection) go in segments of about 64 units, one stage per
 * segment, the warp accumulating its row across them. */
#include "qunit.cuh"

enum { S_THREADS = 256, S_WARPS = S_THREADS / 32, S_SLOTS = 8, S_RW = 4, S_SEGU = 64 };
enum { SA_BODY = 0, SA_D16 = 1, SA_DM = 2, SA_QH = 3, SA_N = 4 };
/* dynamic shared memory of a CTA: two CTAs (and their static memory and the
 * 1 KB the system keeps per CTA) fit the 228 KB of a Hopper SM */
enum { S_SMEM = 112 * 1024 };

/* One job of the item space (a gate/up launch has one, over both matrices). */
struct SJob {
    int U, RW, nseg, segU, upb; /* units per row, rows per item, segments, units per segment, units per block */
    int item0, nitems, ips;     /* first item, items, items per stage (8 per warp or fewer) */
    int rb[SA_N];               /* bytes per row of each array (0: absent) */
    int es[SA_N];               /* bytes per block of each array */
    int stride[SA_N];           /* segmented: bytes per row in a slot */
    int reg[2][SA_N];           /* offset of each (matrix, array) region in a slot */
};

struct SArgs {
    MqArgs Q;     /* the launch and the staged x (q_stage_x) */
    SJob job[3];
    int nj;       /* jobs in the item space */
    int nmat;     /* matrices per item: 2 for gate/up */
    int nitems;
    int ring_off, slot_bytes, nslots;
};

/* A stage: items [it0, it1) of job j, segment s. */
struct SStage {
    int j, it0, it1, s;
};
/* Rows [row0, row0 + nrows) of the job's matrices, units [u0, u0 + nu)
 * (blocks [b0, b0 + nb)) of those rows. */
struct SGeo {
    int row0, nrows, u0, nu, b0, nb;
};

QHD bool s_open(const SArgs &A, int pos, int iend, SStage &st) {
    if (pos >= iend) return false;
    int j = 0;
    while (j + 1 < A.nj && pos >= A.job[j + 1].item0) j++;
    const SJob &J = A.job[j];
    int e = J.item0 + J.nitems;
    if (e > iend) e = iend;
    if (e > pos + J.ips) e = pos + J.ips;
    st.j = j, st.it0 = pos, st.it1 = e, st.s = 0;
    return true;
}
QHD bool s_next(const SArgs &A, int iend, SStage &st) {
    if (st.s + 1 < A.job[st.j].nseg) {
        st.s++;
        return true;
    }
    return s_open(A, st.it1, iend, st);
}
QHD const DMat &s_mat(const SArgs &A, const SStage &st, int m) { return A.Q.L.job[A.nmat == 2 ? m : st.j].w; }
QHD SGeo s_geo(const SArgs &A, const SStage &st) {
    const SJob &J = A.job[st.j];
    const int rows = s_mat(A, st, 0).rows;
    SGeo g;
    g.row0 = (st.it0 - J.item0) * J.RW;
    const int end = (st.it1 - J.item0) * J.RW;
    g.nrows = (end < rows ? end : rows) - g.row0;
    g.u0 = st.s * J.segU;
    g.nu = J.U - g.u0 < J.segU ? J.U - g.u0 : J.segU;
    g.b0 = g.u0 / J.upb;
    g.nb = g.nu / J.upb;
    return g;
}
QHD const uint8_t *s_base(const DMat &W, int a) {
    return a == SA_BODY ? W.body : a == SA_D16 ? (const uint8_t *)W.d16 : a == SA_DM ? (const uint8_t *)W.dm
                                                                                      : (const uint8_t *)W.qh;
}
/* Copies per (matrix, array) of a stage: one range of whole rows, or one
 * per row segment. */
QHD int s_per(const SJob &J, const SGeo &g) { return J.nseg > 1 ? g.nrows : 1; }
/* Copy k of a stage: the 16-byte aligned source range [*lo, *lo + *n) and
 * its place in the slot; false when that array is absent. */
QHD bool s_copy(const SArgs &A, const SStage &st, const SGeo &g, int k, uintptr_t *lo, uint32_t *n, int *dst) {
    const SJob &J = A.job[st.j];
    const int per = s_per(J, g);
    const int m = k / (SA_N * per), a = (k / per) % SA_N, r = k % per;
    if (!J.rb[a]) return false;
    const uint8_t *src;
    long long len;
    if (J.nseg == 1) {
        src = s_base(s_mat(A, st, m), a) + (long long)g.row0 * J.rb[a];
        len = (long long)g.nrows * J.rb[a];
        *dst = J.reg[m][a];
    } else {
        src = s_base(s_mat(A, st, m), a) + (long long)(g.row0 + r) * J.rb[a] + (long long)g.b0 * J.es[a];
        len = (long long)g.nb * J.es[a];
        *dst = J.reg[m][a] + r * J.stride[a];
    }
    const uintptr_t s = (uintptr_t)src;
    *lo = s & ~(uintptr_t)15;
    *n = (uint32_t)(((s + (uintptr_t)len + 15) & ~(uintptr_t)15) - *lo);
    return true;
}
/* Where row r (of the stage) of matrix m's array a starts in the slot. */
QHD const uint8_t *s_ptr(const SArgs &A, const SStage &st, const SGeo &g, const uint8_t *slot, int m, int a, int r) {
    const SJob &J = A.job[st.j];
    if (!J.rb[a]) return NULL;
    const uint8_t *b = s_base(s_mat(A, st, m), a);
    if (J.nseg == 1) {
        const uintptr_t s = (uintptr_t)(b + (long long)g.row0 * J.rb[a]);
        return slot + J.reg[m][a] + (s & 15) + (long long)r * J.rb[a];
    }
    const uintptr_t s = (uintptr_t)(b + (long long)(g.row0 + r) * J.rb[a] + (long long)g.b0 * J.es[a]);
    return slot + J.reg[m][a] + r * J.stride[a] + (s & 15);
}

/* Unit u of a row segment whose arrays start at P[SA_*] (shared memory). */
template <int T> QHD void s_load(const uint8_t *const *P, int u, QRaw &r) {
    if (T == DP_TYPE_Q8_0) {
        const uint8_t *b = P[SA_BODY] + u * 32;
        r.a = *(const uint4 *)b;
        r.b = *(const uint4 *)(b + 16);
        r.s = ((const uint16_t *)P[SA_D16])[u];
    } else if (T == DP_TYPE_Q4_0 || T == DP_TYPE_Q4_1 || T == DP_TYPE_Q5_0 || T == DP_TYPE_Q5_1) {
        r.a = *(const uint4 *)(P[SA_BODY] + u * 16);
        if (T == DP_TYPE_Q4_1 || T == DP_TYPE_Q5_1) r.s = ((const uint32_t *)P[SA_DM])[u];
        else r.s = ((const uint16_t *)P[SA_D16])[u];
        if (T == DP_TYPE_Q5_0 || T == DP_TYPE_Q5_1) r.h = ((const uint32_t *)P[SA_QH])[u];
    } else if (T == DP_TYPE_Q4_K) {
        const uint8_t *blk = P[SA_BODY] + (u >> 2) * 144;
        const int c = u & 3;
        r.a = *(const uint4 *)blk;
        r.b = *(const uint4 *)(blk + 16 + 32 * c);
        r.c = *(const uint4 *)(blk + 32 + 32 * c);
    } else if (T == DP_TYPE_Q5_K) {
        const uint8_t *blk = P[SA_BODY] + (u >> 2) * 176;
        const int c = u & 3;
        r.a = *(const uint4 *)blk;
        r.d = *(const uint4 *)(blk + 16);
        r.e = *(const uint4 *)(blk + 32);
        r.b = *(const uint4 *)(blk + 48 + 32 * c);
        r.c = *(const uint4 *)(blk + 64 + 32 * c);
    } else { /* Q6_K */
        const int b = u >> 2, n = (u >> 1) & 1, h = u & 1;
        const uint8_t *blk = P[SA_BODY] + b * 208;
        r.a = *(const uint4 *)(blk + 64 * n + 16 * h);
        r.b = *(const uint4 *)(blk + 64 * n + 32 + 16 * h);
        r.c = *(const uint4 *)(blk + 128 + 32 * n + 16 * h);
        r.d = *(const uint4 *)(blk + 192);
        r.s = ((const uint16_t *)P[SA_D16])[b];
    }
}

/* ------------------------------------------------------ bulk copies */

__device__ __forceinline__ uint32_t s_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void mbar_init(uint64_t *b, int count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(s_smem(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect(uint64_t *b, uint32_t bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;" ::"r"(s_smem(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *b) {
    asm volatile("{\n\t.reg .b64 st;\n\tmbarrier.arrive.shared::cta.b64 st, [%0];\n\t}" ::"r"(s_smem(b)) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t *b, int parity) {
    uint32_t done = 0;
    while (!done)
        asm volatile("{\n\t.reg .pred p;\n\t"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
                     "selp.u32 %0, 1, 0, p;\n\t}"
                     : "=r"(done)
                     : "r"(s_smem(b)), "r"(parity)
                     : "memory");
}
__device__ __forceinline__ void bulk_copy(void *dst, uintptr_t src, uint32_t n, uint64_t *b) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     s_smem(dst)),
                 "l"((unsigned long long)src), "r"(n), "r"(s_smem(b))
                 : "memory");
}

/* Issues a stage's copies into a slot: every lane of one warp takes part. */
__device__ void s_issue(const SArgs &A, const SStage &st, uint8_t *slot, uint64_t *bar) {
    const int lane = threadIdx.x & 31;
    const SGeo g = s_geo(A, st);
    const int nc = A.nmat * SA_N * s_per(A.job[st.j], g);
    for (int k = lane; k < nc; k += 32) {
        uintptr_t lo;
        uint32_t n;
        int dst;
        if (!s_copy(A, st, g, k, &lo, &n, &dst)) continue;
        mbar_expect(bar, n);
        bulk_copy(slot + dst, lo, n, bar);
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(bar);
}

/* ------------------------------------------------------------ compute */

struct SOut {
    float acc[S_RW], acc2[S_RW];
    unsigned long long best;
};

/* The warp's items of a stage (slot: its copy in shared memory). */
template <int T, int GU, bool XR>
__device__ __forceinline__ void s_stage(const SArgs &A, const SStage &st, const uint8_t *slot, const uint8_t *sm,
                                        const uint4 *xr, const float *dxr, const int *isr, SOut &o) {
    const MvLaunch &L = A.Q.L;
    const SJob &J = A.job[st.j];
    const SGeo g = s_geo(A, st);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int RW = J.RW, nu = g.nu, npairs = RW * nu;
    const uint8_t *xs = sm + A.Q.famoff[q_family(T)];
    const float *dxs = (const float *)(sm + A.Q.off_dx);
    const int *iss = (const int *)(sm + A.Q.off_is);
    /* the lane's first pair: row i0, unit v0 (the same for every item) */
    int i0 = 0, v0 = lane;
    while (v0 >= nu) v0 -= nu, i0++;
    const int nit = st.it1 - st.it0;
    for (int k = warp; k < nit; k += S_WARPS) {
        const int r0 = k * RW; /* the item's first row in the stage */
        const uint8_t *P[SA_N], *P2[SA_N];
#pragma unroll
        for (int a = 0; a < SA_N; a++) {
            P[a] = s_ptr(A, st, g, slot, 0, a, r0);
            P2[a] = GU ? s_ptr(A, st, g, slot, 1, a, r0) : NULL;
        }
        int i = i0, v = v0;
        for (int p = lane; p < npairs; p += 32) {
            const uint8_t *Q[SA_N], *Q2[SA_N];
#pragma unroll
            for (int a = 0; a < SA_N; a++) {
                Q[a] = P[a] + (long long)i * J.rb[a]; /* i > 0 only for whole rows (RW > 1) */
                if (GU) Q2[a] = P2[a] + (long long)i * J.rb[a];
            }
            QRaw raw, raw2;
            s_load<T>(Q, v, raw);
            if (GU) s_load<T>(Q2, v, raw2);
            float val, val2 = 0.0f;
            if (XR) {
                val = q_math_x<T>(raw, g.u0 + v, xr, dxr, isr);
                if (GU) val2 = q_math_x<T>(raw2, g.u0 + v, xr, dxr, isr);
            } else {
                val = q_math<T>(raw, g.u0 + v, xs, dxs, iss);
                if (GU) val2 = q_math<T>(raw2, g.u0 + v, xs, dxs, iss);
            }
            if (XR) { /* one row per item */
                o.acc[0] += val;
                if (GU) o.acc2[0] += val2;
            } else {
#pragma unroll
                for (int r = 0; r < S_RW; r++) {
                    o.acc[r] += i == r ? val : 0.0f;
                    if (GU) o.acc2[r] += i == r ? val2 : 0.0f;
                }
            }
            v += 32;
            while (v >= nu) v -= nu, i++;
        }
        if (st.s + 1 < J.nseg) continue; /* the row goes on in the next stage */
        const MvJob &Jb = L.job[GU ? 0 : st.j];
#pragma unroll
        for (int r = 0; r < S_RW; r++) {
            if (r < RW) { /* warp-uniform */
                const float s = warp_sum(o.acc[r]);
                const float s2 = GU ? warp_sum(o.acc2[r]) : 0.0f;
                const int row = g.row0 + r0 + r;
                if (lane == 0 && r0 + r < g.nrows) {
                    if (GU) Jb.y[row] = act_fn(L.act, s, s2);
                    else if (L.mode == MV_ADD) Jb.y[row] += s;
                    else Jb.y[row] = Jb.bias ? s + Jb.bias[row] : s;
                    if (!GU && L.argmax_key) {
                        const unsigned long long key =
                            ((unsigned long long)float_key(Jb.y[row]) << 32) | (0xFFFFFFFFu - (uint32_t)row);
                        o.best = key > o.best ? key : o.best;
                    }
                }
            }
            o.acc[r] = o.acc2[r] = 0.0f;
        }
    }
}

template <int T, int GU, bool XR>
__device__ __forceinline__ void s_stage_any(const SArgs &A, const SStage &st, const uint8_t *slot, const uint8_t *sm,
                                            const uint4 *xr, const float *dxr, const int *isr, SOut &o) {
    if (T >= 0) {
        s_stage<(T >= 0 ? T : DP_TYPE_Q4_0), GU, XR>(A, st, slot, sm, xr, dxr, isr, o);
        return;
    }
    switch (s_mat(A, st, 0).type) {
    case DP_TYPE_Q4_0: s_stage<DP_TYPE_Q4_0, GU, false>(A, st, slot, sm, xr, dxr, isr, o); break;
    case DP_TYPE_Q4_1: s_stage<DP_TYPE_Q4_1, GU, false>(A, st, slot, sm, xr, dxr, isr, o); break;
    case DP_TYPE_Q5_0: s_stage<DP_TYPE_Q5_0, GU, false>(A, st, slot, sm, xr, dxr, isr, o); break;
    case DP_TYPE_Q5_1: s_stage<DP_TYPE_Q5_1, GU, false>(A, st, slot, sm, xr, dxr, isr, o); break;
    case DP_TYPE_Q8_0: s_stage<DP_TYPE_Q8_0, GU, false>(A, st, slot, sm, xr, dxr, isr, o); break;
    case DP_TYPE_Q4_K: s_stage<DP_TYPE_Q4_K, GU, false>(A, st, slot, sm, xr, dxr, isr, o); break;
    case DP_TYPE_Q5_K: s_stage<DP_TYPE_Q5_K, GU, false>(A, st, slot, sm, xr, dxr, isr, o); break;
    default: s_stage<DP_TYPE_Q6_K, GU, false>(A, st, slot, sm, xr, dxr, isr, o); break;
    }
}

/* T < 0: the jobs differ in format (dispatched per stage). XR: every job
 * has one row per item and at most 32 units, so lane l always takes unit
 * l: its x elements, scales and sums sit in registers. */
template <int T, int GU, bool XR> __global__ void __launch_bounds__(S_THREADS, 2) k_matvec_s(const SArgs A) {
    extern __shared__ __align__(128) uint8_t sms[];
    __shared__ float red[32];
    __shared__ unsigned long long best_s[S_WARPS];
    __shared__ __align__(8) uint64_t bar[S_SLOTS];
    const MvLaunch &L = A.Q.L;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int i0 = (int)((long long)A.nitems * blockIdx.x / gridDim.x);
    const int i1 = (int)((long long)A.nitems * (blockIdx.x + 1) / gridDim.x);
    uint8_t *ring = sms + A.ring_off;
    pdl_trigger();
    /* the first slots' weights, before waiting for the previous kernel */
    SStage pst;
    bool pok = s_open(A, i0, i1, pst);
    if (warp == 0) {
        if (lane == 0) {
            for (int s = 0; s < A.nslots; s++) mbar_init(&bar[s], 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        }
        __syncwarp();
    }
    for (int s = 0; s < A.nslots && pok; s++) {
        if (warp == 0) s_issue(A, pst, ring + s * A.slot_bytes, &bar[s]);
        pok = s_next(A, i1, pst);
    }
    pdl_wait();
    q_stage_x(A.Q, sms, red); /* ends with __syncthreads: the barriers are initialised for every thread */

    constexpr int TX = T >= 0 ? T : DP_TYPE_Q4_0;
    uint4 xr[XR ? (int)QX<TX>::n : 1];
    float dxr[4];
    int isr[8];
    if (XR) {
        const uint4 *X;
        const float *dxp;
        const int *isp;
        q_xview<TX>(lane < A.job[0].U ? lane : 0, sms + A.Q.famoff[q_family(TX)], (const float *)(sms + A.Q.off_dx),
                    (const int *)(sms + A.Q.off_is), &X, &dxp, &isp);
#pragma unroll
        for (int k = 0; k < (XR ? (int)QX<TX>::n : 1); k++) xr[k] = X[k];
        q_xscales<TX>(dxp, isp, dxr, isr);
    }
    SOut o;
#pragma unroll
    for (int r = 0; r < S_RW; r++) o.acc[r] = o.acc2[r] = 0.0f;
    o.best = 0;
    SStage st;
    bool ok = s_open(A, i0, i1, st);
    for (int k = 0; ok; k++) {
        const int slot = k % A.nslots;
        uint8_t *sp = ring + slot * A.slot_bytes;
        mbar_wait(&bar[slot], (k / A.nslots) & 1);
        s_stage_any<T, GU, XR>(A, st, sp, sms, xr, dxr, isr, o);
        ok = s_next(A, i1, st);
        if (pok) { /* CTA-uniform: refill the slot every warp is done with */
            __syncthreads();
            if (warp == 0) s_issue(A, pst, sp, &bar[slot]);
            pok = s_next(A, i1, pst);
        }
    }
    if (!GU && L.argmax_key) {
        if (lane == 0) best_s[warp] = o.best;
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long best = best_s[0];
            for (int w = 1; w < S_WARPS; w++) best = best_s[w] > best ? best_s[w] : best;
            if (best) atomicMax(L.argmax_key, best);
        }
    }
}

/* ------------------------------------------------------------- launch */

/* Rows per item for rows of U units: the fewest (1, 2 or 4) that fill the
 * lanes' rounds of 32 pairs best. A function of U alone. */
static int s_rw(int U) {
    int best = 1;
    double bu = 0.0;
    for (int rw = 1; rw <= S_RW; rw *= 2) {
        const int p = rw * U, slots = (p + 31) / 32 * 32;
        const double u = (double)p / slots;
        if (u > bu + 1e-9) bu = u, best = rw;
    }
    return best;
}

/* Bytes of a slot holding rows rows of job J (and the region offsets). */
static int s_layout(SJob *J, int nmat, int rows) {
    int off = 0;
    for (int m = 0; m < 2; m++)
        for (int a = 0; a < SA_N; a++) {
            J->reg[m][a] = -1;
            if (m >= nmat || !J->rb[a]) continue;
            J->reg[m][a] = off;
            if (J->nseg > 1) off += rows * J->stride[a];
            else off += ((rows * J->rb[a] + 15) & ~15) + 16;
        }
    return (off + 127) & ~127;
}

/* Plans a launch for k_matvec_s; 0 when it does not fit (the caller falls
 * back to k_matvec_w). */
static int s_plan(const MvLaunch *L, SArgs *A, size_t xbytes) {
    const int gu = L->mode == MV_GATEUP;
    A->nmat = gu ? 2 : 1;
    A->nj = gu ? 1 : L->njobs;
    if (gu && (L->job[0].w.type != L->job[1].w.type || L->job[0].w.rows != L->job[1].w.rows)) return 0;
    A->ring_off = (int)((xbytes + 127) & ~(size_t)127);
    const int budget = S_SMEM - A->ring_off;
    if (budget < 8 * 1024) return 0;
    int items = 0, slot = 0;
    for (int j = 0; j < A->nj; j++) {
        const DMat &W = L->job[j].w;
        SJob *J = &A->job[j];
        memset(J, 0, sizeof *J);
        J->U = L->cols / q_unit(W.type);
        J->upb = J->U / W.nblk;
        if (J->upb < 1 || J->U % W.nblk) return 0;
        if (J->U > S_SEGU) {
            J->nseg = (J->U + S_SEGU - 1) / S_SEGU;
            J->segU = ((J->U + J->nseg - 1) / J->nseg + 3) & ~3;
            J->nseg = (J->U + J->segU - 1) / J->segU;
            J->RW = 1;
        } else {
            J->nseg = 1, J->segU = J->U, J->RW = s_rw(J->U);
        }
        if (J->segU % J->upb) return 0;
        J->rb[SA_BODY] = (int)W.body_row, J->es[SA_BODY] = (int)(W.body_row / W.nblk);
        if (W.d16) J->rb[SA_D16] = W.nblk * 2, J->es[SA_D16] = 2;
        if (W.dm) J->rb[SA_DM] = W.nblk * 4, J->es[SA_DM] = 4;
        if (W.qh) J->rb[SA_QH] = W.nblk * 4, J->es[SA_QH] = 4;
        for (int a = 0; a < SA_N; a++)
            J->stride[a] = ((J->segU / J->upb * J->es[a] + 15) & ~15) + 16;
        J->item0 = items;
        J->nitems = (W.rows + J->RW - 1) / J->RW;
        items += J->nitems;
        /* the most items per stage (8 per warp at most, one per warp for
         * segmented rows) with three slots in the ring, else two */
        int sb = 0;
        J->ips = 0;
        for (int ips = J->nseg > 1 ? S_WARPS : 4 * S_WARPS; ips >= 1 && !J->ips; ips /= 2) {
            sb = s_layout(J, A->nmat, ips * J->RW);
            if (3 * sb <= budget) J->ips = ips;
        }
        for (int ips = S_WARPS; ips >= 1 && !J->ips; ips /= 2) {
            sb = s_layout(J, A->nmat, ips * J->RW);
            if (2 * sb <= budget) J->ips = ips;
        }
        if (!J->ips) return 0;
        sb = s_layout(J, A->nmat, J->ips * J->RW);
        if (sb > slot) slot = sb;
    }
    A->nitems = items;
    A->slot_bytes = slot;
    A->nslots = budget / slot;
    if (A->nslots > S_SLOTS) A->nslots = S_SLOTS;
    return A->nslots >= 2;
}

typedef void (*MvsFn)(const SArgs);
#define S_FNS(GU, XR)                                                                                             \
    {k_matvec_s<DP_TYPE_Q4_0, GU, XR>, k_matvec_s<DP_TYPE_Q4_1, GU, XR>, k_matvec_s<DP_TYPE_Q5_0, GU, XR>,          \
     k_matvec_s<DP_TYPE_Q5_1, GU, XR>, k_matvec_s<DP_TYPE_Q8_0, GU, XR>, k_matvec_s<DP_TYPE_Q4_K, GU, XR>,          \
     k_matvec_s<DP_TYPE_Q5_K, GU, XR>, k_matvec_s<DP_TYPE_Q6_K, GU, XR>, XR ? NULL : k_matvec_s<-1, GU, false>}
/* [XR][GU][format], format index 8: mixed */
static const MvsFn g_s_fn[2][2][9] = {{S_FNS(0, false), S_FNS(1, false)}, {S_FNS(0, true), S_FNS(1, true)}};
#undef S_FNS
static const int g_s_types[8] = {DP_TYPE_Q4_0, DP_TYPE_Q4_1, DP_TYPE_Q5_0, DP_TYPE_Q5_1,
                                 DP_TYPE_Q8_0, DP_TYPE_Q4_K, DP_TYPE_Q5_K, DP_TYPE_Q6_K};

static int g_s_on = -1, g_s_ready = 0, g_s_nsm = 0;

int dp_cu_matvec_s_on(void) {
    if (g_s_on < 0) {
        const char *e = getenv("DOPPLER_CUDA_MVS"); /* 0: k_matvec_w (or k_matvec_q) for every launch */
        g_s_on = !(e && *e == '0');
    }
    return g_s_on;
}
void dp_cu_matvec_s_set(int on) { g_s_on = on; }

static int s_init(void) {
    int dev;
    CU_TRY(cudaGetDevice(&dev));
    CU_TRY(cudaDeviceGetAttribute(&g_s_nsm, cudaDevAttrMultiProcessorCount, dev));
    for (int x = 0; x < 2; x++)
        for (int gu = 0; gu < 2; gu++)
            for (int i = 0; i < 9; i++) {
                if (!g_s_fn[x][gu][i]) continue;
                CU_TRY(cudaFuncSetAttribute(g_s_fn[x][gu][i], cudaFuncAttributeMaxDynamicSharedMemorySize, S_SMEM));
                /* all of the SM's shared memory, so that two CTAs fit */
                CU_TRY(cudaFuncSetAttribute(g_s_fn[x][gu][i], cudaFuncAttributePreferredSharedMemoryCarveout,
                                            cudaSharedmemCarveoutMaxShared));
            }
    g_s_ready = 1;
    return DP_OK;
}

/* Launches k_matvec_s when it can take the launch: *taken = 0 otherwise. */
int dp_cu_matvec_s(const MvLaunch *L, int *taken, cudaStream_t st) {
    *taken = 0;
    if (!dp_cu_matvec_s_on() || L->xq_in.piece || L->xq_out.piece) return DP_OK;
    if (!g_s_ready) {
        int rc = s_init();
        if (rc) return rc;
    }
    SArgs A;
    memset(&A, 0, sizeof A);
    A.Q.L = *L;
    const size_t xbytes = q_layout(L, &A.Q);
    if (!s_plan(L, &A, xbytes)) return DP_OK;
    int same = 1, xr = 1;
    for (int j = 0; j < L->njobs; j++) same &= L->job[j].w.type == L->job[0].w.type;
    for (int j = 0; j < A.nj; j++) xr &= A.job[j].RW == 1 && A.job[j].nseg == 1 && A.job[j].U <= 32;
    xr &= same;
    int fi = 8;
    if (same)
        for (int i = 0; i < 8; i++)
            if (g_s_types[i] == L->job[0].w.type) fi = i;
    const MvsFn fn = g_s_fn[xr][L->mode == MV_GATEUP][fi];
    if (!fn) return DP_OK;
    const int grid = A.nitems < g_s_nsm ? A.nitems : g_s_nsm;
    const size_t smem = (size_t)A.ring_off + (size_t)A.nslots * A.slot_bytes;
    CU_TRY(dp_cu_launch(fn, dim3(grid < 1 ? 1 : grid), dim3(S_THREADS), smem, st, A));
    *taken = 1;
    return DP_OK;
}

/* --------------------------------------------------- host emulation */

/* x quantised into the staged layouts on the host (q_stage_x without the
 * sandwich norm): what the kernel's shared memory holds after the prologue. */
static void s_host_stage(const MvLaunch &L, const float *x, const MqArgs &Q, uint8_t *sm) {
    const int cols = L.cols, npos = (cols + 127) / 128 * 128;
    float *xn = (float *)calloc((size_t)npos, sizeof(float));
    int *q = (int *)calloc((size_t)npos, sizeof(int));
    float sc = 1.0f;
    if (L.norm_w) {
        float ss = 0.0f;
        for (int i = 0; i < cols; i++) ss += x[i] * x[i];
        sc = 1.0f / sqrtf(ss / (float)cols + L.eps);
    }
    for (int i = 0; i < cols; i++) xn[i] = L.norm_w ? x[i] * sc * (L.norm_w[i] + L.norm_off) : x[i];
    float *dxs = (float *)(sm + Q.off_dx);
    int *iss = (int *)(sm + Q.off_is);
    for (int b = 0; b < npos / 32; b++) {
        float am = 0.0f;
        for (int i = 0; i < 32; i++) am = fmaxf(am, fabsf(xn[32 * b + i]));
        const float inv = am > 0.0f ? 32767.0f / am : 0.0f;
        for (int i = 0; i < 32; i++) q[32 * b + i] = (int)nearbyintf(xn[32 * b + i] * inv);
        if (32 * b < cols) dxs[b] = am / 32767.0f;
    }
    for (int s = 0; s < cols / 16; s++) {
        int t = 0;
        for (int i = 0; i < 16; i++) t += q[16 * s + i];
        iss[s] = t;
    }
    /* the piece of positions a..a+3: high bytes, low bytes */
    auto piece = [&](int a, uint32_t *hi, uint32_t *lo) {
        *hi = *lo = 0;
        for (int i = 0; i < 4; i++) {
            *hi |= (uint32_t)((q[a + i] >> 8) & 0xFF) << (8 * i);
            *lo |= (uint32_t)(q[a + i] & 0xFF) << (8 * i);
        }
    };
    for (int a = 0; a < cols; a += 4) {
        uint32_t e[4];
        if (Q.famoff[FAM_A] >= 0 && !(a & 16)) {
            piece(a, &e[0], &e[1]), piece(a + 16, &e[2], &e[3]);
            memcpy(sm + Q.famoff[FAM_A] + phys_a(a), e, 16);
        }
        if (Q.famoff[FAM_B] >= 0 && !(a & 32)) {
            piece(a, &e[0], &e[1]), piece(a + 32, &e[2], &e[3]);
            memcpy(sm + Q.famoff[FAM_B] + phys_b(a), e, 16);
        }
        if (Q.famoff[FAM_C] >= 0 && !(a & 64)) {
            piece(a, &e[0], &e[1]), piece(a + 64, &e[2], &e[3]);
            memcpy(sm + Q.famoff[FAM_C] + phys_c(a), e, 16);
        }
    }
    free(xn);
    free(q);
}

static float s_host_act(int act, float g, float u) {
    if (act == DP_ACT_GELU_TANH) return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g))) * u;
    return g / (1.0f + expf(-g)) * u;
}

/* One warp's items of a stage, lane by lane (acc[lane][row]). */
template <int T>
static void s_host_items(const SArgs &A, const SStage &st, const uint8_t *slot, const uint8_t *sm, int warp,
                         float (*acc)[S_RW], float (*acc2)[S_RW]) {
    const MvLaunch &L = A.Q.L;
    const SJob &J = A.job[st.j];
    const SGeo g = s_geo(A, st);
    const int GU = A.nmat == 2, RW = J.RW, nu = g.nu, npairs = RW * nu, nit = st.it1 - st.it0;
    const uint8_t *xs = sm + A.Q.famoff[q_family(T)];
    const float *dxs = (const float *)(sm + A.Q.off_dx);
    const int *iss = (const int *)(sm + A.Q.off_is);
    for (int k = warp; k < nit; k += S_WARPS) {
        const int r0 = k * RW;
        for (int lane = 0; lane < 32; lane++) {
            int i = 0, v = lane;
            while (v >= nu) v -= nu, i++;
            for (int p = lane; p < npairs; p += 32) {
                for (int m = 0; m < A.nmat; m++) {
                    const uint8_t *Qp[SA_N];
                    for (int a = 0; a < SA_N; a++) Qp[a] = J.rb[a] ? s_ptr(A, st, g, slot, m, a, r0) + (long long)i * J.rb[a] : NULL;
                    QRaw raw;
                    memset(&raw, 0, sizeof raw);
                    s_load<T>(Qp, v, raw);
                    const float val = q_math<T>(raw, g.u0 + v, xs, dxs, iss);
                    (m ? acc2 : acc)[lane][i] += val;
                }
                v += 32;
                while (v >= nu) v -= nu, i++;
            }
        }
        if (st.s + 1 < J.nseg) continue;
        const MvJob &Jb = L.job[GU ? 0 : st.j];
        for (int r = 0; r < RW; r++) {
            float s = 0.0f, s2 = 0.0f;
            for (int lane = 0; lane < 32; lane++) s += acc[lane][r], s2 += acc2[lane][r], acc[lane][r] = acc2[lane][r] = 0.0f;
            const int row = g.row0 + r0 + r;
            if (r0 + r >= g.nrows) continue;
            if (GU) Jb.y[row] = s_host_act(L.act, s, s2);
            else if (L.mode == MV_ADD) Jb.y[row] += s;
            else Jb.y[row] = Jb.bias ? s + Jb.bias[row] : s;
        }
    }
}

/* Runs k_matvec_s's plan, copies and arithmetic on the host for a launch
 * whose matrices, x, norm weights, biases and outputs are in host memory,
 * with grid CTAs; checks that every copy stays inside its slot and region
 * and that no two copies of a stage overlap. Returns DP_OK, or an error
 * naming what went wrong (also when the kernel would not take the launch). */
int dp_cu_matvec_s_emulate(const MvLaunch *L, int grid) {
    SArgs A;
    memset(&A, 0, sizeof A);
    A.Q.L = *L;
    const size_t xbytes = q_layout(L, &A.Q);
    if (!s_plan(L, &A, xbytes)) return dp_set_error(DP_ERR_BACKEND, "k_matvec_s does not take this launch");
    if (grid > A.nitems) grid = A.nitems;
    uint8_t *sm = (uint8_t *)calloc(1, (size_t)A.ring_off + (size_t)A.nslots * A.slot_bytes);
    uint8_t *mark = (uint8_t *)malloc((size_t)A.slot_bytes);
    s_host_stage(*L, L->x, A.Q, sm);
    float(*acc)[32][S_RW] = (float(*)[32][S_RW])calloc(S_WARPS, sizeof *acc);
    float(*acc2)[32][S_RW] = (float(*)[32][S_RW])calloc(S_WARPS, sizeof *acc2);
    int rc = DP_OK;
    for (int cta = 0; cta < grid && !rc; cta++) {
        const int i0 = (int)((long long)A.nitems * cta / grid), i1 = (int)((long long)A.nitems * (cta + 1) / grid);
        SStage st;
        bool ok = s_open(A, i0, i1, st);
        for (int k = 0; ok && !rc; k++) {
            uint8_t *slot = sm + A.ring_off + (size_t)(k % A.nslots) * A.slot_bytes;
            memset(slot, 0xA5, (size_t)A.slot_bytes); /* poison */
            memset(mark, 0, (size_t)A.slot_bytes);
            const SGeo g = s_geo(A, st);
            const int nc = A.nmat * SA_N * s_per(A.job[st.j], g);
            for (int c = 0; c < nc && !rc; c++) {
                uintptr_t lo;
                uint32_t n;
                int dst;
                if (!s_copy(A, st, g, c, &lo, &n, &dst)) continue;
                if (dst < 0 || dst % 16 || lo % 16 || n % 16 || (size_t)dst + n > (size_t)A.slot_bytes) {
                    rc = dp_set_error(DP_ERR_BACKEND, "copy %d of a stage: %u bytes at %d of a %d-byte slot", c, n,
                                      dst, A.slot_bytes);
                    break;
                }
                for (uint32_t b = 0; b < n; b++)
                    if (mark[dst + b]++) {
                        rc = dp_set_error(DP_ERR_BACKEND, "copies of a stage overlap at byte %u of the slot",
                                          dst + b);
                        break;
                    }
                memcpy(slot + dst, (const void *)lo, n);
            }
            if (rc) break;
            const int type = s_mat(A, st, 0).type;
            for (int w = 0; w < S_WARPS; w++) {
                switch (type) {
                case DP_TYPE_Q4_0: s_host_items<DP_TYPE_Q4_0>(A, st, slot, sm, w, acc[w], acc2[w]); break;
                case DP_TYPE_Q4_1: s_host_items<DP_TYPE_Q4_1>(A, st, slot, sm, w, acc[w], acc2[w]); break;
                case DP_TYPE_Q5_0: s_host_items<DP_TYPE_Q5_0>(A, st, slot, sm, w, acc[w], acc2[w]); break;
                case DP_TYPE_Q5_1: s_host_items<DP_TYPE_Q5_1>(A, st, slot, sm, w, acc[w], acc2[w]); break;
                case DP_TYPE_Q8_0: s_host_items<DP_TYPE_Q8_0>(A, st, slot, sm, w, acc[w], acc2[w]); break;
                case DP_TYPE_Q4_K: s_host_items<DP_TYPE_Q4_K>(A, st, slot, sm, w, acc[w], acc2[w]); break;
                case DP_TYPE_Q5_K: s_host_items<DP_TYPE_Q5_K>(A, st, slot, sm, w, acc[w], acc2[w]); break;
                default: s_host_items<DP_TYPE_Q6_K>(A, st, slot, sm, w, acc[w], acc2[w]); break;
                }
            }
            ok = s_next(A, i1, st);
        }
    }
    free(sm), free(mark), free(acc), free(acc2);
    return rc;
}
