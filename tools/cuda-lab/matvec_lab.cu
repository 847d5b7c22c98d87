// Decode matvec lab (not part of the build): per-kernel time of Gemma-3-1B-shaped
// matvec chains in a CUDA graph with programmatic dependent launch. See BENCHMARKS.md, CUDA.
// Build: nvcc -O3 -arch=sm_90a -o lab tools/cuda-lab/matvec_lab.cu; run on the GPU machine.
// Feasibility lab: per-kernel time of decode-like matvec chains in a CUDA graph with PDL.
#include <cuda_runtime.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <vector>
#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1);} } while (0)
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__global__ void k_empty(float *y) { pdl_trigger(); pdl_wait(); if (threadIdx.x == 0 && blockIdx.x == 0) y[0] += 1.0f; }

// Q4_0-like repacked: body uint4 per block (32 nibbles), d half per block. Rows K/32 blocks.
// One warp per row; lane takes blocks lane, lane+32, ... ; up to MAXB blocks per lane loaded before the wait.
template <int MAXB, bool EARLY>
__global__ void __launch_bounds__(256) k_mv(const uint4 *__restrict__ body, const __half *__restrict__ d, int rows, int nb,
                                            const float *__restrict__ x, float *__restrict__ y) {
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * 8 + warp;
    uint4 q[MAXB];
    float s[MAXB];
    const bool ok = row < rows;
    if (EARLY && ok) {
#pragma unroll
        for (int i = 0; i < MAXB; i++) {
            const int b = lane + 32 * i;
            if (b < nb) { q[i] = __ldcs(body + (size_t)row * nb + b); s[i] = __half2float(d[(size_t)row * nb + b]); }
        }
    }
    pdl_wait();
    if (!ok) return;
    if (!EARLY) {
#pragma unroll
        for (int i = 0; i < MAXB; i++) {
            const int b = lane + 32 * i;
            if (b < nb) { q[i] = __ldcs(body + (size_t)row * nb + b); s[i] = __half2float(d[(size_t)row * nb + b]); }
        }
    }
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < MAXB; i++) {
        const int b = lane + 32 * i;
        if (b < nb) {
            const float4 *xp = (const float4 *)(x + b * 32);
            const uint32_t w[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
            float a = 0.f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float4 lo = __ldg(xp + j), hi = __ldg(xp + 4 + j);
                uint32_t v = w[j];
                a += ((v & 15) - 8.f) * lo.x + (((v >> 8) & 15) - 8.f) * lo.y + (((v >> 16) & 15) - 8.f) * lo.z + (((v >> 24) & 15) - 8.f) * lo.w;
                a += (((v >> 4) & 15) - 8.f) * hi.x + (((v >> 12) & 15) - 8.f) * hi.y + (((v >> 20) & 15) - 8.f) * hi.z + (((v >> 28) & 15) - 8.f) * hi.w;
            }
            acc += s[i] * a;
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
    if (lane == 0) y[row] = acc;
}


// V: 0 float x via ldg (k_mv), 1 float x staged in smem, 2 16-bit x planes via ldg + dp4a, 3 planes staged in smem
__device__ __forceinline__ int dp4a_ss(int a, int b, int c) { return __dp4a(a, b, c); }
__device__ __forceinline__ int dp4a_us(unsigned a, unsigned b, int c) { int d; asm("dp4a.u32.u32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c)); return d; }
template <int MAXB, int V>
__global__ void __launch_bounds__(256) k_mv2(const uint4 *__restrict__ body, const __half *__restrict__ d, int rows, int nb,
                                            const float *__restrict__ x, const uint4 *__restrict__ xh, const uint4 *__restrict__ xl,
                                            const float2 *__restrict__ xs, float *__restrict__ y) {
    extern __shared__ uint4 sm[];
    pdl_trigger();
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * 8 + warp;
    uint4 q[MAXB]; float s[MAXB];
    const bool ok = row < rows;
    if (ok) {
#pragma unroll
        for (int i = 0; i < MAXB; i++) { const int b = lane + 32 * i;
            if (b < nb) { q[i] = __ldcs(body + (size_t)row * nb + b); s[i] = __half2float(d[(size_t)row * nb + b]); } }
    }
    pdl_wait();
    const int K = nb * 32;
    if (V == 1) { float4 *f = (float4 *)sm; for (int i = threadIdx.x; i < K / 4; i += 256) f[i] = ((const float4 *)x)[i]; __syncthreads(); }
    if (V == 3) { uint4 *h = sm, *l = sm + K / 16; float2 *sc = (float2 *)(sm + K / 8);
        for (int i = threadIdx.x; i < K / 16; i += 256) { h[i] = xh[i]; l[i] = xl[i]; }
        for (int i = threadIdx.x; i < nb; i += 256) sc[i] = xs[i]; __syncthreads(); }
    if (!ok) return;
    float acc = 0.f;
#pragma unroll
    for (int i = 0; i < MAXB; i++) {
        const int b = lane + 32 * i;
        if (b >= nb) continue;
        const uint32_t w[4] = {q[i].x, q[i].y, q[i].z, q[i].w};
        if (V <= 1) {
            const float4 *xp = V == 1 ? (const float4 *)sm + b * 8 : (const float4 *)(x + b * 32);
            float a = 0.f;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                float4 lo = xp[j], hi = xp[4 + j]; uint32_t v = w[j];
                a += ((v & 15) - 8.f) * lo.x + (((v >> 8) & 15) - 8.f) * lo.y + (((v >> 16) & 15) - 8.f) * lo.z + (((v >> 24) & 15) - 8.f) * lo.w;
                a += (((v >> 4) & 15) - 8.f) * hi.x + (((v >> 12) & 15) - 8.f) * hi.y + (((v >> 20) & 15) - 8.f) * hi.z + (((v >> 28) & 15) - 8.f) * hi.w;
            }
            acc += s[i] * a;
        } else {
            // planes: 32 int8 per block = 2 uint4; value index order 0..31
            uint4 h0, h1, l0, l1; float2 sc;
            if (V == 2) { h0 = __ldg(xh + 2 * b); h1 = __ldg(xh + 2 * b + 1); l0 = __ldg(xl + 2 * b); l1 = __ldg(xl + 2 * b + 1); sc = __ldg(xs + b); }
            else { const uint4 *h = sm, *l = sm + K / 16; h0 = h[2 * b]; h1 = h[2 * b + 1]; l0 = l[2 * b]; l1 = l[2 * b + 1]; sc = ((const float2 *)(sm + K / 8))[b]; }
            const uint32_t hv[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w}, lv[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
            int ah = 0, al = 0;
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const uint32_t lo = w[j] & 0x0F0F0F0F, hi = (w[j] >> 4) & 0x0F0F0F0F;
                ah = dp4a_ss((int)lo, (int)hv[j], ah); ah = dp4a_ss((int)hi, (int)hv[4 + j], ah);
                al = dp4a_us(lo, lv[j], al); al = dp4a_us(hi, lv[4 + j], al);
            }
            // x = dx*(256 h + l) ; sum q x - 8 sum x ; sc.y = sum of x ints
            acc += s[i] * sc.x * ((float)(ah * 256 + al) - 8.f * sc.y);
        }
    }
#pragma unroll
    for (int o = 16; o; o >>= 1) acc += __shfl_xor_sync(0xffffffff, acc, o);
    if (lane == 0) y[row] = acc;
}

struct Mat { int rows, K; uint4 *body; __half *d; };
static Mat mk(int rows, int K) {
    Mat m{rows, K}; size_t nb = (size_t)rows * (K / 32);
    CK(cudaMalloc(&m.body, nb * 16)); CK(cudaMalloc(&m.d, nb * 2));
    CK(cudaMemset(m.body, 0x5a, nb * 16)); CK(cudaMemset(m.d, 0x1c, nb * 2));
    return m;
}
template <int MAXB, bool EARLY>
static void launch1(const Mat &m, const float *x, float *y, cudaStream_t st, int pdl) {
    cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t c = {}; c.gridDim = dim3((m.rows + 7) / 8); c.blockDim = dim3(256); c.stream = st; c.attrs = a; c.numAttrs = pdl;
    CK(cudaLaunchKernelEx(&c, k_mv<MAXB, EARLY>, (const uint4 *)m.body, (const __half *)m.d, m.rows, m.K / 32, x, y));
}
static void launch(const Mat &m, const float *x, float *y, cudaStream_t st, int pdl, int early) {
    int nb = m.K / 32, per = (nb + 31) / 32;
    if (early) { if (per <= 2) launch1<2, true>(m, x, y, st, pdl); else if (per <= 4) launch1<4, true>(m, x, y, st, pdl); else launch1<8, true>(m, x, y, st, pdl); }
    else { if (per <= 2) launch1<2, false>(m, x, y, st, pdl); else if (per <= 4) launch1<4, false>(m, x, y, st, pdl); else launch1<8, false>(m, x, y, st, pdl); }
}
int main() {
    cudaStream_t st; CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    float *x, *y; CK(cudaMalloc(&x, 1 << 20)); CK(cudaMalloc(&y, 1 << 22)); CK(cudaMemset(x, 0, 1 << 20));
    const int L = 26;
    // gemma-1b-like per layer: qkv 1536x1152, o 1152x1024, gate+up 13824x1152, down 1152x6912 (distinct buffers per layer)
    std::vector<Mat> W;
    for (int l = 0; l < L; l++) { W.push_back(mk(1536, 1152)); W.push_back(mk(1152, 1024)); W.push_back(mk(13824, 1152)); W.push_back(mk(1152, 6912)); }
    Mat head = mk(262144, 1152);
    double bytes = 0; for (auto &m : W) bytes += (double)m.rows * m.K / 32 * 18; bytes += 262144.0 * 36 * 18;
    cudaEvent_t e0, e1; CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
    for (int mode = 0; mode < 7; mode++) {
        // 0 empty pdl, 1 empty nopdl, 2 mv pdl early, 3 mv pdl late, 4 mv nopdl, 5 only-small (qkv,o) early, 6 only big early
        int pdl = (mode == 1 || mode == 4) ? 0 : 1, early = (mode == 2 || mode >= 5);
        cudaGraph_t g; cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
        int n = 0;
        for (int l = 0; l < L; l++) for (int j = 0; j < 4; j++) {
            if (mode == 5 && j >= 2) continue;
            if (mode == 6 && j < 2) continue;
            if (mode <= 1) {
                cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[0].val.programmaticStreamSerializationAllowed = 1;
                cudaLaunchConfig_t c = {}; c.gridDim = dim3(132); c.blockDim = dim3(256); c.stream = st; c.attrs = a; c.numAttrs = pdl;
                CK(cudaLaunchKernelEx(&c, k_empty, y));
            } else launch(W[l * 4 + j], x, y + (j & 1) * 65536, st, pdl, early);
            n++;
        }
        if (mode >= 2 && mode <= 4) { launch(head, x, y, st, pdl, early); n++; }
        CK(cudaStreamEndCapture(st, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
        for (int i = 0; i < 5; i++) CK(cudaGraphLaunch(ge, st));
        CK(cudaStreamSynchronize(st));
        const int R = 50; CK(cudaEventRecord(e0, st));
        for (int i = 0; i < R; i++) CK(cudaGraphLaunch(ge, st));
        CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
        float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
        double us = ms * 1000 / R;
        printf("mode %d: %d kernels, %.1f us per graph, %.2f us per kernel%s\n", mode, n, us, us / n,
               (mode >= 2 && mode <= 4) ? "" : "");
        if (mode >= 2 && mode <= 4) printf("   bytes %.1f MB -> %.0f GB/s, %.0f tok/s\n", bytes / 1e6, bytes / us / 1e3, 1e6 / us);
        cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    }
    // per-shape timing, 200 launches of one shape in a graph, early+pdl
    int shapes[5][2] = {{1536, 1152}, {1152, 1024}, {13824, 1152}, {1152, 6912}, {262144, 1152}};
    for (int s = 0; s < 5; s++) {
        Mat m = s < 4 ? W[s] : head; // note: same buffer -> L2 hits for small ones
        for (int early = 0; early < 2; early++) {
            cudaGraph_t g; cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int l = 0; l < L; l++) launch(s < 4 ? W[l * 4 + s] : head, x, y, st, 1, early);
            CK(cudaStreamEndCapture(st, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
            for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e0, st)); for (int i = 0; i < 20; i++) CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            double us = ms * 1000 / 20 / L, b = (double)m.rows * m.K / 32 * 18;
            printf("shape %6dx%-5d early %d: %.2f us  %.0f GB/s\n", shapes[s][0], shapes[s][1], early, us, b / us / 1e3);
            cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
        }
    }

    uint4 *xh, *xl; float2 *xs; CK(cudaMalloc(&xh, 1 << 16)); CK(cudaMalloc(&xl, 1 << 16)); CK(cudaMalloc(&xs, 1 << 16));
    CK(cudaMemset(xh, 3, 1 << 16)); CK(cudaMemset(xl, 7, 1 << 16)); CK(cudaMemset(xs, 0, 1 << 16));
    for (int V = 0; V < 4; V++) {
        double tot = 0;
        for (int s = 0; s < 5; s++) {
            cudaGraph_t g; cudaGraphExec_t ge;
            CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
            for (int l = 0; l < L; l++) {
                const Mat &m = s < 4 ? W[l * 4 + s] : head;
                int nb = m.K / 32, per = (nb + 31) / 32;
                size_t smem = V == 1 ? m.K * 4 : V == 3 ? m.K / 8 * 16 + nb * 8 : 0;
                cudaLaunchAttribute a[1]; a[0].id = cudaLaunchAttributeProgrammaticStreamSerialization; a[0].val.programmaticStreamSerializationAllowed = 1;
                cudaLaunchConfig_t c = {}; c.gridDim = dim3((m.rows + 7) / 8); c.blockDim = dim3(256); c.stream = st; c.attrs = a; c.numAttrs = 1; c.dynamicSmemBytes = smem;
#define LV(MB, VV) do { void (*f)(const uint4 *, const __half *, int, int, const float *, const uint4 *, const uint4 *, const float2 *, float *) = k_mv2<MB, VV>; \
    if (smem > 48 * 1024) CK(cudaFuncSetAttribute(f, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)); \
    CK(cudaLaunchKernelEx(&c, f, (const uint4 *)m.body, (const __half *)m.d, m.rows, nb, (const float *)x, (const uint4 *)xh, (const uint4 *)xl, (const float2 *)xs, y)); } while (0)
                if (per <= 2) { if (V == 0) LV(2, 0); else if (V == 1) LV(2, 1); else if (V == 2) LV(2, 2); else LV(2, 3); }
                else { if (V == 0) LV(8, 0); else if (V == 1) LV(8, 1); else if (V == 2) LV(8, 2); else LV(8, 3); }
            }
            CK(cudaStreamEndCapture(st, &g)); CK(cudaGraphInstantiate(&ge, g, 0));
            for (int i = 0; i < 3; i++) CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e0, st)); for (int i = 0; i < 20; i++) CK(cudaGraphLaunch(ge, st));
            CK(cudaEventRecord(e1, st)); CK(cudaEventSynchronize(e1));
            float ms; CK(cudaEventElapsedTime(&ms, e0, e1));
            const Mat &m = s < 4 ? W[s] : head;
            double us = ms * 1000 / 20 / L, b = (double)m.rows * m.K / 32 * 18;
            tot += s < 4 ? us * L : us;
            printf("V%d shape %6dx%-5d: %.2f us  %.0f GB/s\n", V, m.rows, m.K, us, b / us / 1e3);
            cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
        }
        printf("V%d: gemma-1b-like step (26 layers of 4 + head) %.0f us -> %.0f tok/s without attention\n", V, tot, 1e6 / tot);
    }
    return 0;
}
