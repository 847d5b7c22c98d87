/* The CPU attention of every level this CPU can run against a naive double
 * reference on fresh random data (see test_attention below). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "cpu/ops.h"
#include "testlib.h"
#include "util.h"

/* Attention (prefill blocks and split-key decode) over a paged cache
 * against a naive double reference: several runs (sequences) per call,
 * each with its own shuffled pages, page sizes 1..32, GQA groups, sliding
 * windows, the exclude-self fault, the softmax weights, contexts longer
 * than a decode chunk, float32 and f16 caches (the reference then takes
 * K and V rounded to f16, as the cache holds them). */
typedef struct {
    int pos0, n, n_kv;
    float *kr, *vr, *q, *out, *probs; /* the sequence's K and V rows, its queries */
    int32_t *pages;
} att_seq;

/* a's outputs and softmax weights against a double reference (scores
 * soft-capped at cap when it is not 0); returns the wrong outputs, *badp
 * the wrong weights */
static int att_check(const att_seq *a, int NH, int NKV, int HD, int window, int excl, float scale, float cap,
                     double *sc, int *badp) {
    const int Q = NH * HD, KV = NKV * HD, group = NH / NKV;
    int bad = 0;
    for (int i = 0; i < a->n; i++)
        for (int h = 0; h < NH; h++) {
            int p = a->pos0 + i, g = h / group;
            int lo = window && p - window + 1 > 0 ? p - window + 1 : 0, hi = excl && p > 0 ? p - 1 : p;
            double mx = -INFINITY, sum = 0;
            for (int j = lo; j <= hi; j++) {
                double d = 0;
                for (int x = 0; x < HD; x++) d += (double)a->q[i * Q + h * HD + x] * a->kr[j * KV + g * HD + x];
                sc[j] = d * scale;
                if (cap != 0.0f) sc[j] = cap * tanh(sc[j] / cap);
                if (sc[j] > mx) mx = sc[j];
            }
            for (int j = lo; j <= hi; j++) sum += sc[j] = exp(sc[j] - mx);
            for (int j = 0; j < a->n_kv; j++) {
                double e = j >= lo && j <= hi ? sc[j] / sum : 0.0;
                *badp += !(fabs(a->probs[((size_t)i * NH + h) * a->n_kv + j] - e) <= 2e-6 * e + 1e-7);
            }
            for (int x = 0; x < HD; x++) {
                double o = 0, mag = 0;
                for (int j = lo; j <= hi; j++) {
                    o += sc[j] / sum * a->vr[j * KV + g * HD + x];
                    mag += sc[j] / sum * fabs(a->vr[j * KV + g * HD + x]);
                }
                if (!(fabs(a->out[i * Q + h * HD + x] - o) <= 1e-5 * mag + 1e-30)) bad++;
            }
        }
    return bad;
}

static void test_attention(const dp_cpu_kernels *kt) {
    for (int rep = 0; rep < 12; rep++) {
        int NKV = t_rand_int(1, 3), group = t_rand_int(1, 4), NH = NKV * group, HD = 8 * t_rand_int(1, 9) + (rep % 3 == 0 ? 3 : 0);
        int ps = 1 << t_rand_int(0, 5), n_ctx = t_rand_int(8, 700), n_runs = t_rand_int(1, 4);
        int max_pages = (n_ctx + ps - 1) / ps, n_pages = max_pages * n_runs;
        int window = rep % 3 == 1 ? t_rand_int(1, 40) : 0;
        int T = 1 + rep % 3, Q = NH * HD, KV = NKV * HD;
        float scale = 1.0f / sqrtf((float)HD);
        /* Gemma 2's soft-capping on some repetitions, small enough to bite */
        float cap = rep % 4 == 2 ? 1.5f : 0.0f;
        size_t pf = (size_t)ps * KV;
        const int eb = (rep / 2) % 2 ? 2 : 4; /* the cache's element bytes: f16 or float32 */
        void *kc = malloc((size_t)eb * pf * n_pages), *vc = malloc((size_t)eb * pf * n_pages);
        for (size_t i = 0; i < pf * n_pages; i++) { /* pages nobody owns must not be read */
            if (eb == 2) ((uint16_t *)kc)[i] = ((uint16_t *)vc)[i] = 0x7e00;
            else ((float *)kc)[i] = ((float *)vc)[i] = NAN;
        }
        /* a random permutation of the pages, dealt out to the runs */
        int32_t *perm = malloc(sizeof(int32_t) * n_pages);
        for (int i = 0; i < n_pages; i++) perm[i] = i;
        for (int i = n_pages - 1; i > 0; i--) {
            int k = t_rand_int(0, i);
            int32_t t = perm[i];
            perm[i] = perm[k];
            perm[k] = t;
        }
        att_seq sq[4];
        cpu_attn_run runs[4];
        for (int r = 0; r < n_runs; r++) {
            att_seq *a = &sq[r];
            a->pos0 = t_rand_int(0, n_ctx - 2);
            a->n = (rep + r) % 2 ? 1 : t_rand_int(1, n_ctx - a->pos0);
            if (a->pos0 + a->n > n_ctx) a->n = n_ctx - a->pos0;
            a->n_kv = a->pos0 + a->n;
            a->pages = perm + r * max_pages;
            a->kr = malloc(sizeof(float) * (size_t)a->n_kv * KV);
            a->vr = malloc(sizeof(float) * (size_t)a->n_kv * KV);
            a->q = malloc(sizeof(float) * (size_t)a->n * Q);
            a->out = malloc(sizeof(float) * (size_t)a->n * Q);
            a->probs = malloc(sizeof(float) * (size_t)a->n * NH * a->n_kv);
            for (int i = 0; i < a->n_kv * KV; i++) a->kr[i] = t_rand_normal(), a->vr[i] = t_rand_normal();
            for (int i = 0; i < a->n * Q; i++) a->q[i] = 2.0f * t_rand_normal();
            /* in two stores, as a cache filled by earlier passes and this one */
            cpu_kv_store(kc, vc, eb, ps, a->pages, 0, a->pos0, a->kr, a->vr, KV);
            cpu_kv_store(kc, vc, eb, ps, a->pages, a->pos0, a->n, a->kr + (size_t)a->pos0 * KV,
                         a->vr + (size_t)a->pos0 * KV, KV);
            for (int i = 0; eb == 2 && i < a->n_kv * KV; i++) /* the values an f16 cache holds */
                a->kr[i] = dp_fp16_to_f32(dp_f32_to_fp16(a->kr[i])), a->vr[i] = dp_fp16_to_f32(dp_f32_to_fp16(a->vr[i]));
            runs[r] = (cpu_attn_run){.pos0 = a->pos0, .n = a->n, .pages = a->pages, .q = a->q, .out = a->out,
                                     .probs = a->probs, .exclude_self = a->n == 1 && rep % 4 == 3};
        }
        cpu_ctx c;
        CHECK(cpu_ctx_init(&c, T, 64, n_ctx + ps, NH, HD, kt) == 0);
        CHECK(cpu_attention_runs(&c, runs, n_runs, kc, vc, eb, ps, NH, NKV, HD, window, scale, cap) == 0);
        double *sc = malloc(sizeof(double) * (size_t)n_ctx);
        for (int r = 0; r < n_runs; r++) {
            const att_seq *a = &sq[r];
            int excl = runs[r].exclude_self, badp = 0;
            int bad = att_check(a, NH, NKV, HD, window, excl, scale, cap, sc, &badp);
            CHECKF(bad == 0 && badp == 0, "%s attention (%s cache) run %d/%d n=%d pos0=%d NH=%d NKV=%d HD=%d page=%d "
                   "window=%d excl=%d cap=%g T=%d: %d outputs, %d weights wrong", kt->name, eb == 2 ? "f16" : "f32", r,
                   n_runs, a->n, a->pos0, NH, NKV, HD, ps, window, excl, cap, T, bad, badp);
        }
        /* the contiguous form (the CUDA self-test's reference) on the first sequence */
        const att_seq *a = &sq[0];
        float *kf = malloc(sizeof(float) * (size_t)n_ctx * KV), *vt = malloc(sizeof(float) * (size_t)c.n_ctx * KV);
        memcpy(kf, a->kr, sizeof(float) * (size_t)a->n_kv * KV);
        cpu_store_vt(vt, a->vr, a->n_kv, 0, KV, c.n_ctx);
        memset(a->out, 0, sizeof(float) * (size_t)a->n * Q);
        cpu_attention(&c, a->out, a->q, kf, vt, a->n, a->pos0, NH, NKV, HD, window, scale, cap, runs[0].exclude_self,
                      a->probs);
        int badp = 0, bad = att_check(a, NH, NKV, HD, window, runs[0].exclude_self, scale, cap, sc, &badp);
        CHECKF(bad == 0 && badp == 0, "%s contiguous attention n=%d pos0=%d: %d outputs, %d weights wrong", kt->name,
               a->n, a->pos0, bad, badp);
        free(kf);
        free(vt);
        cpu_ctx_free(&c);
        for (int r = 0; r < n_runs; r++) {
            free(sq[r].kr);
            free(sq[r].vr);
            free(sq[r].q);
            free(sq[r].out);
            free(sq[r].probs);
        }
        free(sc);
        free(perm);
        free(kc);
        free(vc);
    }
}

int main(void) {
    t_seed();
    int levels = 0;
    for (int isa = 0; isa < DP_ISA_COUNT; isa++) {
        const dp_cpu_kernels *kt = dp_cpu_kernels_for((dp_isa)isa);
        if (!kt) continue;
        levels++;
        int before = t_failures;
        test_attention(kt);
        printf("level %s: %s\n", kt->name, t_failures == before ? "ok" : "FAILED");
    }
    CHECK(levels >= 1);
    return t_done("test_cpu_attention");
}
