/* CPU micro-benchmarks (not a test: skipped unless DOPPLER_CPU_BENCH=1).
 *
 *   DOPPLER_CPU_BENCH=1 ./build/test_cpu_bench [threads]
 *   DOPPLER_CPU_BENCH_ONLY=matvec: only the matvec table; =rows: only the
 *   integer matvec over several rows; =screen: only the screened LM head; =sampler: only the sampler;
 *   =gemm: only the blocked matmul (prompt products)
 *   DOPPLER_CPU_BENCH_TYPES="IQ3_S Q3_K": the matvec table's rows of these formats only;
 *   DOPPLER_CPU_BENCH_L2=1: its in-L2 columns of the SIMD levels only (seconds: for repeated runs)
 *
 * Prints, as medians of repeated runs:
 *  - memory read bandwidth (1 and N threads) over 512 MB: the decode roofline
 *  - matvec per type and level over ~96 MB of weights (out of cache): GB/s of
 *    weights, and in L2 (compute bound): weights per nanosecond per thread,
 *    with float32 and with 16-bit integer activations; the x quantiser
 *  - the integer matvec over 1, 2 and 4 decode rows (a batch of sequences)
 *  - the blocked matmul (n = 64 and 512 positions): GFLOP/s
 *  - the screened LM head of 4 greedy rows against the integer path
 *  - the host sampler's draw over a 262144-token vocabulary
 * Run it on a quiet machine (uptime). */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "quant.h"
#include "quant_iq.h"
#include "testlib.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* CPU time of this thread: compute throughput that a busy machine does not
 * distort (as long as the caches are not thrashed) */
static double cpu_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    const uint8_t *buf;
    size_t bytes, chunk;
    _Atomic uint64_t sink;
} bw_job;

static void bw_task(void *arg, int64_t t, int thread) {
    (void)thread;
    bw_job *j = arg;
    const uint64_t *p = (const uint64_t *)(j->buf + (size_t)t * j->chunk);
    size_t n = j->chunk / 8;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < n; i += 8) a ^= p[i], b ^= p[i + 2], c ^= p[i + 4], d ^= p[i + 6];
    atomic_fetch_xor(&j->sink, a ^ b ^ c ^ d);
}

/* Reads every cache line of 512 MB (the odd words are never touched, but
 * their lines come in with the even ones). */
static double bandwidth(cpu_ctx *c) {
    size_t bytes = (size_t)512 << 20;
    uint8_t *buf = malloc(bytes);
    memset(buf, 1, bytes);
    bw_job j = {buf, bytes, (size_t)1 << 20, 0};
    double r[7];
    for (int i = 0; i < 7; i++) {
        double t0 = now();
        dp_pool_run(c->pool, bw_task, &j, (int64_t)(bytes / j.chunk));
        r[i] = bytes / (now() - t0) / 1e9;
    }
    free(buf);
    return median(r, 7);
}

/* DOPPLER_CPU_BENCH_L2=1: the matvec table in L2 only, without the scalar
 * level (seconds instead of minutes) */
static int l2_only(void) {
    const char *v = getenv("DOPPLER_CPU_BENCH_L2");
    return v && *v && strcmp(v, "0");
}
/* DOPPLER_CPU_BENCH_TYPES="IQ3_S Q3_K": the matvec table's rows of these formats only */
static int type_wanted(int type) {
    const char *v = getenv("DOPPLER_CPU_BENCH_TYPES");
    if (!v || !*v) return 1;
    const char *name = dp_type_name(type);
    const size_t n = strlen(name);
    for (const char *p = v; (p = strstr(p, name)) != NULL; p += n)
        if ((p == v || p[-1] == ' ' || p[-1] == ',') && (p[n] == 0 || p[n] == ' ' || p[n] == ',')) return 1;
    return 0;
}

/* one matvec configuration: out of cache (GB/s, 2 threads) and in L2 (w/ns, one thread) */
static void bench_one(cpu_ctx *c1, cpu_ctx *cn, const dp_weight *big, int64_t K, const float *x, float *out,
                      double *gbs, double *wns) {
    dp_weight small = *big;
    small.rows = 256;
    double r[7];
    *gbs = 0.0;
    for (int i = 0; i < 5 && !l2_only(); i++) {
        double t0 = now();
        cpu_matmul(cn, big, x, 1, out);
        r[i] = big->row_bytes * (double)big->rows / (now() - t0) / 1e9;
    }
    if (!l2_only()) *gbs = median(r, 5);
    for (int i = 0; i < 7; i++) {
        cpu_matmul(c1, &small, x, 1, out);
        double t0 = cpu_now();
        for (int it = 0; it < 20; it++) cpu_matmul(c1, &small, x, 1, out);
        r[i] = 20.0 * 256 * K / ((cpu_now() - t0) * 1e9);
    }
    *wns = median(r, 7);
}

/* the formats dp_quantize_row does not write */
static int iq_nonquant(int type) {
    return type == DP_TYPE_IQ2_XXS || type == DP_TYPE_IQ2_XS || type == DP_TYPE_IQ2_S || type == DP_TYPE_IQ3_XXS ||
           type == DP_TYPE_IQ3_S;
}

/* ~96 MB of weights of a type with K columns (src: K floats of scratch) */
static dp_weight big_weight(int type, int K, float *src) {
    size_t rb = dp_row_size(type, K);
    int64_t rows = (int64_t)((96u << 20) / rb);
    uint8_t *w = malloc(rb * (size_t)rows);
    for (int i = 0; i < K; i++) src[i] = t_rand_normal();
    const int iq = iq_nonquant(type);
    for (int64_t r = 0; r < rows; r++) {
        uint8_t *row = w + (size_t)r * rb;
        if (r >= 64) memcpy(row, w + (size_t)(r % 64) * rb, rb);
        else if (!iq) dp_quantize_row(type, src, row, K);
        else /* no quantizer here: random valid blocks (every index is in its grid), d = 2^-10 */
            for (size_t i = 0; i < rb; i++) row[i] = (i % (size_t)dp_iq_block_bytes(type)) == 0 ? 0x00
                                                     : (i % (size_t)dp_iq_block_bytes(type)) == 1 ? 0x14
                                                                                                  : (uint8_t)rand();
    }
    return (dp_weight){.data = w, .type = type, .cols = K, .rows = rows, .row_bytes = rb};
}

static void bench_matvec(cpu_ctx *c1, cpu_ctx *cn, int threads) {
    const int types[] = {DP_TYPE_Q4_0,    DP_TYPE_Q4_1,  DP_TYPE_Q5_0,    DP_TYPE_Q5_1,    DP_TYPE_Q8_0,
                         DP_TYPE_Q2_K,    DP_TYPE_Q3_K,  DP_TYPE_Q4_K,    DP_TYPE_Q5_K,    DP_TYPE_Q6_K,
                         DP_TYPE_IQ4_XS,  DP_TYPE_IQ2_XXS, DP_TYPE_IQ2_XS, DP_TYPE_IQ2_S, DP_TYPE_IQ3_XXS,
                         DP_TYPE_IQ3_S,   DP_TYPE_F16};
    const int K = 1024;
    printf("\nmatvec, K=%d, one position. Out of cache: ~96 MB of weights, GB/s with %d thread(s); "
           "in L2: 256 rows, weights/ns on one thread (x quantisation included); f32 / int16 activations\n", K,
           threads);
    printf("%-6s", "type");
    for (int isa = 0; isa < DP_ISA_COUNT; isa++)
        if (dp_cpu_kernels_for((dp_isa)isa)) printf(" | %-6s GB/s f32 int16   w/ns f32 int16", dp_isa_name((dp_isa)isa));
    printf("\n");
    float *x = malloc(sizeof(float) * K), *src = malloc(sizeof(float) * K);
    for (int i = 0; i < K; i++) x[i] = t_rand_normal();
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int type = types[ti];
        if (!type_wanted(type)) continue;
        dp_weight big = big_weight(type, K, src);
        const int64_t rows = big.rows;
        uint8_t *w = (uint8_t *)big.data;
        float *out = malloc(sizeof(float) * (size_t)rows);
        printf("%-6s", dp_type_name(type));
        for (int isa = 0; isa < DP_ISA_COUNT; isa++) {
            const dp_cpu_kernels *k = dp_cpu_kernels_for((dp_isa)isa);
            if (!k || (l2_only() && (dp_isa)isa == DP_ISA_SCALAR)) continue;
            cn->k = c1->k = k;
            double g[2], v[2];
            for (int a = 0; a < 2; a++) {
                c1->act_int = cn->act_int = a;
                bench_one(c1, cn, &big, K, x, out, &g[a], &v[a]);
            }
            if (k->matvec_q[type]) printf(" |     %9.1f %5.1f  %9.2f %5.2f", g[0], g[1], v[0], v[1]);
            else printf(" |     %9.1f %5s  %9.2f %5s", g[0], "-", v[0], "-");
        }
        printf("\n");
        free(out);
        free(w);
    }
    /* the quantiser alone */
    dp_xq q;
    dp_xq_alloc(&q, 8192);
    float *xl = malloc(sizeof(float) * 8192);
    for (int i = 0; i < 8192; i++) xl[i] = t_rand_normal();
    const int Ks[] = {1152, 6912};
    for (int ki = 0; ki < 2; ki++) {
        printf("x quantisation, K=%d:", Ks[ki]);
        for (int isa = 0; isa < DP_ISA_COUNT; isa++) {
            const dp_cpu_kernels *k = dp_cpu_kernels_for((dp_isa)isa);
            if (!k) continue;
            double r[7];
            for (int i = 0; i < 7; i++) {
                double t0 = cpu_now();
                for (int it = 0; it < 200; it++) dp_xq_quantize(&q, xl, Ks[ki], k);
                r[i] = (cpu_now() - t0) / 200 * 1e6;
            }
            printf(" %s %.2f us", k->name, median(r, 7));
        }
        printf("\n");
    }
    free(xl);
    dp_xq_free(&q);
    free(x);
    free(src);
}

/* Several decode rows (single positions, the integer path) per matmul
 * call, as a batch of sequences gives them: each weight block is decoded
 * once for up to 4 rows. Per type: CPU ns per block of 32 weights for 1, 2
 * and 4 rows in L2 (one thread), and wall ms for 1 and 4 rows over ~96 MB
 * (the LM head's case: weights from memory, every thread). */
static void bench_rows(cpu_ctx *c1, cpu_ctx *cn, int threads) {
    const int types[] = {DP_TYPE_Q4_0, DP_TYPE_Q4_1, DP_TYPE_Q5_0, DP_TYPE_Q5_1, DP_TYPE_Q8_0,
                         DP_TYPE_Q2_K, DP_TYPE_Q3_K, DP_TYPE_Q4_K, DP_TYPE_Q5_K, DP_TYPE_Q6_K};
    const int K = 1024, nr[] = {1, 2, 4};
    const dp_cpu_kernels *k = dp_cpu_kernels_get();
    printf("\ninteger matvec over several rows (%s), K=%d: in L2, CPU ns per weight block for 1 / 2 / 4 rows (one "
           "thread); out of cache, ms for 1 / 4 rows (%d threads)\n", k->name, K, threads);
    cpu_ctx_rows(c1, 4, 4);
    cpu_ctx_rows(cn, 4, 4);
    c1->k = cn->k = k;
    c1->act_int = cn->act_int = 1;
    float *x = malloc(sizeof(float) * 4 * K), *src = malloc(sizeof(float) * K);
    for (int i = 0; i < 4 * K; i++) x[i] = t_rand_normal();
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        int type = types[ti];
        if (!type_wanted(type)) continue;
        dp_weight big = big_weight(type, K, src);
        const int64_t rows = big.rows;
        uint8_t *w = (uint8_t *)big.data;
        float *out = malloc(sizeof(float) * 4 * (size_t)rows);
        dp_weight small = big;
        small.rows = 256;
        printf("%-6s in L2", dp_type_name(type));
        for (int ni = 0; ni < 3; ni++) {
            double r[7];
            for (int i = 0; i < 7; i++) {
                cpu_matmul_rows(c1, &small, x, (cpu_rows){.single = nr[ni]}, out);
                double t0 = cpu_now();
                for (int it = 0; it < 20; it++) cpu_matmul_rows(c1, &small, x, (cpu_rows){.single = nr[ni]}, out);
                r[i] = (cpu_now() - t0) * 1e9 / (20.0 * 256 * K / 32);
            }
            printf(" %6.2f", median(r, 7));
        }
        printf("   out of cache");
        for (int ni = 0; ni < 3; ni += 2) {
            double r[5];
            for (int i = 0; i < 5; i++) {
                double t0 = now();
                cpu_matmul_rows(cn, &big, x, (cpu_rows){.single = nr[ni]}, out);
                r[i] = (now() - t0) * 1e3;
            }
            printf(" %7.2f", median(r, 5));
        }
        printf("\n");
        free(out);
        free(w);
    }
    free(x);
    free(src);
}

static void bench_gemm_type(cpu_ctx *c1, cpu_ctx *cn, int threads, int type) {
    const int K = 1024, rows = 2048;
    printf("\nblocked matmul, %s %dx%d: GFLOP/s with %d thread(s) (wall) / per second of one thread's CPU time;\n"
           "float panels, and (+int) the integer prompt products where the level has them\n",
           dp_type_name(type), rows, K, threads);
    size_t rb = dp_row_size(type, K);
    uint8_t *w = malloc(rb * rows);
    float *src = malloc(sizeof(float) * K);
    for (int r = 0; r < rows; r++) {
        for (int i = 0; i < K; i++) src[i] = t_rand_normal();
        dp_quantize_row(type, src, w + (size_t)r * rb, K);
    }
    dp_weight wt = {.data = w, .type = type, .cols = K, .rows = rows, .row_bytes = rb};
    const int ns[] = {64, 512};
    for (int ni = 0; ni < 2; ni++) {
        int n = ns[ni];
        float *x = malloc(sizeof(float) * (size_t)n * K), *out = malloc(sizeof(float) * (size_t)n * rows);
        for (int i = 0; i < n * K; i++) x[i] = t_rand_normal();
        printf("n=%-4d", n);
        for (int v = 0; v < 2 * DP_ISA_COUNT; v++) {
            const dp_cpu_kernels *k = dp_cpu_kernels_for((dp_isa)(v / 2));
            const int ai = v % 2;
            if (!k || (ai && !k->igemm)) continue;
            cn->k = k;
            cn->act_int = c1->act_int = ai;
            double r[5];
            for (int i = 0; i < 5; i++) {
                double t0 = now();
                cpu_matmul(cn, &wt, x, n, out);
                r[i] = 2.0 * n * K * rows / (now() - t0) / 1e9;
            }
            double wall = median(r, 5);
            c1->k = k;
            for (int i = 0; i < 3; i++) {
                double t0 = cpu_now();
                cpu_matmul(c1, &wt, x, n, out);
                r[i] = 2.0 * n * K * rows / (cpu_now() - t0) / 1e9;
            }
            printf("  %s%s %.1f / %.1f", k->name, ai ? "+int" : "", wall, median(r, 3));
        }
        printf("\n");
        free(x);
        free(out);
    }
    free(w);
    free(src);
}

static void bench_gemm(cpu_ctx *c1, cpu_ctx *cn, int threads) {
    const int act = cn->act_int;
    bench_gemm_type(c1, cn, threads, DP_TYPE_Q4_K);
    bench_gemm_type(c1, cn, threads, DP_TYPE_IQ4_XS);
    bench_gemm_type(c1, cn, threads, DP_TYPE_Q3_K);
    bench_gemm_type(c1, cn, threads, DP_TYPE_Q2_K);
    cn->act_int = c1->act_int = act;
}

/* The screened LM head (lm_screen.c) against the integer path over the
 * same 4 positions: an LM head of Gemma 3 270M's shape (262144 rows of 640
 * Q8_0 weights, each row its own random values), wall ms over every
 * thread; x normal with a few large values, as a final norm's output has. */
static void bench_screen(cpu_ctx *cn, int threads) {
    const int K = 640, type = DP_TYPE_Q8_0;
    const int64_t rows = 262144;
    const size_t rb = dp_row_size(type, K);
    printf("\nscreened LM head (%s, %lld x %d, %d threads): wall ms for 1 row / 4 rows / 4 rows screened\n",
           dp_type_name(type), (long long)rows, K, threads);
    if (!cpu_screen_usable(cn, &(dp_weight){.type = type, .cols = K, .rows = rows, .row_bytes = rb})) {
        printf("  not available on this CPU (no VNNI)\n");
        return;
    }
    uint8_t *w = malloc(rb * (size_t)rows);
    float *src = malloc(sizeof(float) * K), *x = malloc(sizeof(float) * 4 * K), *out = malloc(sizeof(float) * 4 * rows);
    for (int64_t r = 0; r < rows; r++) {
        for (int i = 0; i < K; i++) src[i] = 0.03f * t_rand_normal();
        dp_quantize_row(type, src, w + (size_t)r * rb, K);
    }
    for (int i = 0; i < 4 * K; i++) x[i] = t_rand_normal() * (i % 97 == 5 ? 30.0f : 3.0f);
    const dp_weight big = {.data = w, .type = type, .cols = K, .rows = rows, .row_bytes = rb};
    cpu_screen sc = {0};
    int32_t tok[4];
    cpu_ctx_rows(cn, 4, 4);
    double r[3][7];
    int decided = 0;
    for (int i = 0; i < 7; i++) {
        double t0 = now();
        cpu_matmul_rows(cn, &big, x, (cpu_rows){.single = 1}, out);
        double t1 = now();
        cpu_matmul_rows(cn, &big, x, (cpu_rows){.single = 4}, out);
        double t2 = now();
        decided += cpu_screen_argmax(cn, &sc, &big, x, 4, out, tok);
        r[0][i] = (t1 - t0) * 1e3, r[1][i] = (t2 - t1) * 1e3, r[2][i] = (now() - t2) * 1e3;
    }
    printf("  %7.2f %7.2f %7.2f   (%d of 7 decided; the first screened call computes the row norms)\n",
           median(r[0], 7), median(r[1], 7), median(r[2], 7), decided);
    cpu_screen_free(&sc);
    free(w);
    free(src);
    free(x);
    free(out);
}

/* The host sampler's draw with the default settings (temperature 0.8,
 * top-k 40, top-p 0.95, min-p 0.05) over a 262144-token vocabulary (Gemma
 * 3's), with and without a repetition penalty over 64 recent tokens: ms
 * per draw, median of 7 runs of 100 draws. */
static void bench_sampler(void) {
    const int V = 262144;
    float *l = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) l[i] = 3.0f * t_rand_normal();
    printf("\nsampler, %d tokens, default settings: ms per draw without / with a repetition penalty\n", V);
    for (int pen = 0; pen < 2; pen++) {
        dp_sampler_params p;
        dp_sampler_params_default(&p);
        p.repeat_penalty = pen ? 1.1f : 1.0f;
        p.seed = 1;
        dp_sampler *s = dp_sampler_new(&p, V);
        for (int i = 0; i < 64; i++) dp_sampler_accept(s, (int32_t)(t_rand_u64() % V));
        double r[7];
        int sink = 0;
        for (int k = 0; k < 7; k++) {
            double t0 = now();
            for (int i = 0; i < 100; i++) sink += dp_sampler_sample(s, l);
            r[k] = (now() - t0) * 1e3 / 100;
        }
        printf("  %7.3f%s", median(r, 7), pen ? "\n" : "");
        CHECK(sink >= 0);
        dp_sampler_free(s);
    }
    free(l);
}

int main(int argc, char **argv) {
    const char *on = getenv("DOPPLER_CPU_BENCH");
    if (!on || !*on || !strcmp(on, "0")) t_skip("micro-benchmarks run only with DOPPLER_CPU_BENCH=1");
    t_seed();
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    cpu_ctx c1, cn;
    cpu_ctx_init(&c1, 1, 4096, 16, 1, 1, NULL);
    cpu_ctx_init(&cn, threads, 4096, 16, 1, 1, NULL);
    const char *only = getenv("DOPPLER_CPU_BENCH_ONLY"); /* "matvec" / "rows": one table only */
    if (only && !strcmp(only, "rows")) {
        bench_rows(&c1, &cn, threads);
        cpu_ctx_free(&c1);
        cpu_ctx_free(&cn);
        return t_done("test_cpu_bench");
    }
    if (only && !strcmp(only, "sampler")) {
        bench_sampler();
        cpu_ctx_free(&c1);
        cpu_ctx_free(&cn);
        return t_done("test_cpu_bench");
    }
    if (only && !strcmp(only, "screen")) {
        bench_screen(&cn, threads);
        cpu_ctx_free(&c1);
        cpu_ctx_free(&cn);
        return t_done("test_cpu_bench");
    }
    if (only && !strcmp(only, "gemm")) {
        bench_gemm(&c1, &cn, threads);
        cpu_ctx_free(&c1);
        cpu_ctx_free(&cn);
        return t_done("test_cpu_bench");
    }
    if (only && !strcmp(only, "matvec")) {
        bench_matvec(&c1, &cn, threads);
        cpu_ctx_free(&c1);
        cpu_ctx_free(&cn);
        return t_done("test_cpu_bench");
    }
    printf("memory read bandwidth: 1 thread %.1f GB/s, %d threads %.1f GB/s\n", bandwidth(&c1), threads,
           bandwidth(&cn));
    bench_matvec(&c1, &cn, threads);
    bench_rows(&c1, &cn, threads);
    bench_gemm(&c1, &cn, threads);
    bench_screen(&cn, threads);
    bench_sampler();
    cpu_ctx_free(&c1);
    cpu_ctx_free(&cn);
    return t_done("test_cpu_bench");
}
