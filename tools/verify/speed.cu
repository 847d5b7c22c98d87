/* verify --speed: the device copy bandwidth, each format's matvec bandwidth
 * with its weights read from DRAM beside a plain read of as many bytes, and
 * decode attention at depth 4096. Measurements, not checks. */
#include "verify.cuh"

#include "cuda/kernels/qunit.cuh" /* ld16: the weight loads' form */

/* What reading n16 16-byte words costs a launch at least: the loads as the
 * matvecs issue theirs (ld16, evict-first), a warp reading 512-byte lines
 * four at a time, every load before the PDL wait, so back-to-back launches
 * overlap as far as their bytes allow. The XOR keeps the loads; it never
 * matches. */
__global__ void __launch_bounds__(256) k_read_bytes(const uint4 *p, size_t n16, unsigned *sink) {
    const size_t lane = threadIdx.x & 31, nw = ((size_t)gridDim.x * blockDim.x) >> 5;
    uint32_t acc = 0;
    pdl_trigger();
    for (size_t i = ((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5) * 128 + lane; i < n16; i += nw * 128) {
        uint4 v[4];
#pragma unroll
        for (int u = 0; u < 4; u++) v[u] = ld16((const uint8_t *)(p + (i + 32 * u < n16 ? i + 32 * u : i)));
#pragma unroll
        for (int u = 0; u < 4; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    pdl_wait();
    if (acc == 0x9E3779B9u && lane == 0) *sink = acc;
}

/* Bandwidth: a large device-to-device copy (bytes read + written) and each
 * format's matvec at three shapes, each launch reading its weights from
 * DRAM, beside a plain read of as many bytes (k_read_bytes): how far the
 * product is from what its bytes alone cost (docs/benchmarks-log.md: the
 * launches' time goes to the work after the data has arrived). */
void measure_speed(Ctx *c) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const size_t nb = (size_t)2 << 30;
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, nb) == cudaSuccess && cudaMalloc(&b, nb) == cudaSuccess) {
        cudaMemset(a, 1, nb);
        float best[11];
        for (int i = 0; i < 11; i++) {
            cudaEventRecord(e0, c->st);
            cudaMemcpyAsync(b, a, nb, cudaMemcpyDeviceToDevice, c->st);
            cudaEventRecord(e1, c->st);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&best[i], e0, e1);
        }
        float med[11];
        memcpy(med, best, sizeof med);
        for (int i = 0; i < 11; i++)
            for (int j = i + 1; j < 11; j++)
                if (med[j] < med[i]) { float t = med[i]; med[i] = med[j]; med[j] = t; }
        fprintf(c->out, "SPEED copy %.0f GB/s (read + write, 2 GiB, median of 11)\n", 2.0 * nb / (med[5] * 1e-3) / 1e9);
    }
    if (a) cudaFree(a);
    if (b) cudaFree(b);
    cudaGetLastError();
    const int types[] = {DP_TYPE_Q4_K, DP_TYPE_Q6_K, DP_TYPE_Q3_K, DP_TYPE_Q2_K, DP_TYPE_Q8_0, DP_TYPE_Q4_0,
                         DP_TYPE_Q4_1, DP_TYPE_Q5_0, DP_TYPE_Q5_1, DP_TYPE_F16,  DP_TYPE_BF16,
                         DP_TYPE_IQ4_XS, DP_TYPE_IQ3_S, DP_TYPE_IQ3_XXS, DP_TYPE_IQ2_S, DP_TYPE_IQ2_XS,
                         DP_TYPE_IQ2_XXS};
    const int shapes[][2] = {{16384, 4096}, {4096, 11008}, {2048, 2048}};
    for (size_t t = 0; t < sizeof types / sizeof types[0]; t++) {
        for (size_t sh = 0; sh < 3; sh++) {
            const int rows = shapes[sh][0], cols = shapes[sh][1];
            if (cols % dp_type_get(types[t])->block_size) continue;
            uint8_t *host = random_matrix(c->rng, types[t], rows, cols);
            /* copies of the matrix, at least 256 MB in all, launch i reading copy i mod n: every launch reads
             * its weights from DRAM, as decode does (a model is many times the L2) */
            const double bytes = (double)dp_row_size(types[t], cols) * rows;
            int ncopy = (int)(256e6 / bytes) + 1;
            if (ncopy > 256) ncopy = 256;
            DMat W[256];
            void *alloc[256];
            int n = 0;
            while (n < ncopy && !dp_cu_upload_matrix(host, types[t], rows, cols, &W[n], &alloc[n])) n++;
            cudaGetLastError();
            if (n == 0) {
                free(host);
                continue;
            }
            float *dx = dalloc<float>(cols), *dy = dalloc<float>(rows);
            float *x = (float *)malloc(sizeof(float) * cols);
            for (int i = 0; i < cols; i++) x[i] = c->rng.normal();
            upload(dx, x, cols);
            MvLaunch L;
            memset(&L, 0, sizeof L);
            L.job[0] = {W[0], dy, NULL};
            L.njobs = 1, L.x = dx, L.cols = cols, L.mode = MV_STORE;
            /* a round of n warm-up launches, then 50 back to back; us a launch */
            auto time_reps = [&](auto launch) {
                for (int i = 0; i < n; i++) launch(i);
                const int reps = 50;
                cudaEventRecord(e0, c->st);
                for (int i = 0; i < reps; i++) launch(i);
                cudaEventRecord(e1, c->st);
                cudaEventSynchronize(e1);
                float ms = 0;
                cudaEventElapsedTime(&ms, e0, e1);
                return ms * 1e3 / reps;
            };
            auto time_launch = [&](const char *what, double read_us) {
                const double us = time_reps([&](int i) {
                    L.job[0].w = W[i % n];
                    dp_cu_matvec(&L, c->st);
                });
                fprintf(c->out, "SPEED matvec %-5s %5dx%-5d %7.1f MB %8.2f us %7.0f GB/s", dp_type_name(types[t]), rows,
                        cols, bytes / 1e6, us, bytes / (us * 1e-6) / 1e9);
                if (read_us > 0) fprintf(c->out, " (reading its bytes %.2f us: %.2fx)", read_us, us / read_us);
                fprintf(c->out, "%s\n", what);
            };
            double read_us = 0; /* the same bytes read by k_read_bytes, as many copies */
            const size_t n16 = (size_t)(bytes / 16);
            uint4 *rd = dalloc<uint4>(n16 * n);
            unsigned *sink = dalloc<unsigned>(1);
            if (rd && sink) {
                int nsm = 0;
                cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0);
                read_us = time_reps([&](int i) {
                    dp_cu_launch(k_read_bytes, dim3(4 * nsm), dim3(256), 0, c->st, (const uint4 *)(rd + n16 * (i % n)),
                                 n16, sink);
                });
            }
            cudaFree(rd), cudaFree(sink);
            cudaGetLastError();
            time_launch("", read_us);
            if (sh == 2) { /* the small matrix again with the RMSNorm fused into the prologue (a Q/K/V launch) */
                float *dw = dalloc<float>(cols);
                upload(dw, x, cols);
                L.norm_w = dw, L.norm_off = 0.0f, L.eps = 1e-6f;
                time_launch(" with RMSNorm", 0);
                /* and with Gemma's sandwich post-norm + residual add before it */
                float *dro = dalloc<float>(cols), *dxo = dalloc<float>(cols);
                upload(dro, x, cols);
                L.res_o = dro, L.res_w = dw, L.x_out = dxo;
                time_launch(" with post-norm + add + RMSNorm", 0);
                cudaFree(dw), cudaFree(dro), cudaFree(dxo);
            }
            cudaFree(dx), cudaFree(dy);
            for (int i = 0; i < n; i++) cudaFree(alloc[i]);
            free(host), free(x);
        }
    }
    /* decode attention at depth 4096 over a cache several times the L2 (48
     * layers of 4 MB: each launch reads its layer from DRAM, as in decode) */
    const int shapes_a[][3] = {{16, 2, 128}, {4, 1, 256}};
    /* splits, keys per split of k_attention; slices > 0: the sliced kernels,
     * k_attn_split (last column 1) or k_attn_gqa (0) */
    const int cfg[][4] = {{64, 64, 0, 1}, {32, 128, 0, 1}, {16, 256, 0, 1}, {16, 1, 16, 1}, {32, 1, 32, 1},
                          {64, 1, 16, 0}, {64, 1, 32, 0}, {64, 1, 8, 0}};
    for (int sa = 0; sa < 2; sa++) {
        const int NH = shapes_a[sa][0], NKV = shapes_a[sa][1], HD = shapes_a[sa][2], L = 48, ctx = 4096;
        Pages P; /* the positions in shuffled pages of 64, as a session keeps them */
        make_pages(c, &P, 1, &ctx, 6);
        const size_t lay_rows = (size_t)P.n_pages << P.shift, cache = (size_t)L * lay_rows * NKV * HD;
        __half *kc = dalloc<__half>(cache), *vc = dalloc<__half>(cache);
        cudaMemset(kc, 0x3c, cache * 2); /* 1.0 in f16 bytes 0x3c3c: finite, not zero */
        cudaMemset(vc, 0x3c, cache * 2);
        float *dq = dalloc<float>((size_t)NH * HD), *dout = dalloc<float>((size_t)NH * HD);
        float *dpart = dalloc<float>((size_t)NH * 64 * (HD + 2));
        int *dcnt = dalloc<int>(NH), pos = ctx - 1, seq = 0;
        cudaMemset(dcnt, 0, sizeof(int) * NH);
        cudaMemset(dq, 0x3c, sizeof(float) * NH * HD);
        set_rows(&P, 1, &pos, &seq);
        for (int ci = 0; ci < (int)(sizeof cfg / sizeof cfg[0]); ci++) {
            AttnLaunch A;
            memset(&A, 0, sizeof A);
            A.q = dq, A.out = dout, A.kv = P.kv(), A.n = 1, A.n_head = NH, A.n_head_kv = NKV, A.head_dim = HD;
            A.scale = 0.1f, A.splits = cfg[ci][0], A.min_keys = cfg[ci][1], A.part = dpart, A.counters = dcnt;
            A.slices = cfg[ci][2], A.gqa = cfg[ci][3] ? -1 : 0;
            const int reps = 40;
            cudaEventRecord(e0, c->st);
            for (int i = 0; i < reps; i++) {
                size_t lay = (size_t)(i % L) * lay_rows * NKV * HD;
                A.k = kc + lay, A.v = vc + lay;
                dp_cu_attention(&A, c->st);
            }
            cudaEventRecord(e1, c->st);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            double bytes = 2.0 * ctx * NKV * HD * 2;
            if (cfg[ci][2])
                fprintf(c->out, "SPEED attention decode h%d/%d d%d depth %d %s %d slices: %7.2f us %6.0f GB/s\n", NH,
                        NKV, HD, ctx, cfg[ci][3] ? "k_attn_split" : "k_attn_gqa", cfg[ci][2], ms * 1e3 / reps,
                        bytes / (ms * 1e-3 / reps) / 1e9);
            else
                fprintf(c->out, "SPEED attention decode h%d/%d d%d depth %d k_attention splits %d/%d keys: %7.2f us %6.0f GB/s\n",
                        NH, NKV, HD, ctx, cfg[ci][0], cfg[ci][1], ms * 1e3 / reps, bytes / (ms * 1e-3 / reps) / 1e9);
        }
        cudaFree(kc), cudaFree(vc), cudaFree(dq), cudaFree(dout), cudaFree(dpart), cudaFree(dcnt);
        free_pages(&P);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}
