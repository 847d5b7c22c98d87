/* Whole CPU sessions with the fast kernels, on both activation paths of
 * the one-position matvecs (float32, and 16-bit integer: kernels.h).
 *  - Tiny random models with quantized weights (Q4_0, Q4_1, Q5_0, Q5_1,
 *    Q8_0, F16): logits do not depend on the thread count (1, 2, 3, 7),
 *    for a prefill that takes the blocked path and for decode steps.
 *  - Every kernel level this CPU runs gives the scalar level's logits: to
 *    float rounding (1e-5) on the float path. On the integer path the levels
 *    run the same integer math (test_cpu_kernels checks each kernel to 2e-6),
 *    but rounding x to 16 bits is discontinuous: a float-rounding difference
 *    upstream (~1e-7) flips some x_int by one step and comes out ~20x larger
 *    (1e-6 -> 1e-5 -> 1e-4 over the layers). There the bound is the fidelity
 *    bound, 1e-3, and the integer path must stay within it of the float path.
 *  - The real models, when cached: every SIMD level against the scalar level
 *    after a 40-token prefill and 4 greedy steps (rel-L2, same top-1).
 *  - An f16 cache (DP_KV_F16): half the pool's bytes, logits within the
 *    trace tolerance (1e-2) of the float32 cache's and not equal to them
 *    (test_cpu_attention checks its attention exactly against K and V
 *    rounded to f16). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/kernels.h"
#include "doppler.h"
#include "quant.h"
#include "testlib.h"
#include "testmodel.h"

enum { N_PROMPT = 12, N_DECODE = 4 };

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* Logits after a prefill of toks and n_decode decode tokens: (1 + n_decode)
 * x V floats. The decode tokens are toks[n_prompt..]; with greedy, each is
 * first set to the argmax of the logits before it. */
static dp_kv_type g_kv = DP_KV_DEFAULT; /* the cache type run() asks for */
static uint64_t g_kv_bytes;            /* and the pool size its session reported */

static float *run(dp_model *m, int threads, int32_t *toks, int n_prompt, int n_decode, int greedy) {
    int V = dp_model_get_info(m)->n_vocab;
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = DP_BACKEND_CPU;
    sp.kv_type = g_kv;
    sp.n_ctx = n_prompt + n_decode + 8;
    sp.n_threads = threads;
    dp_session *s = dp_session_new(m, &sp);
    CHECKF(s != NULL, "session: %s", dp_last_error());
    if (!s) return NULL;
    dp_backend_info bi;
    CHECK(dp_session_describe(s, &bi) == DP_OK);
    CHECKF(!strcmp(bi.kv_type, g_kv == DP_KV_F16 ? "f16" : "f32"), "kv_type %s", bi.kv_type);
    g_kv_bytes = bi.kv_bytes;
    float *out = malloc(sizeof(float) * (size_t)V * (1 + n_decode));
    CHECK(dp_eval(s, toks, n_prompt) == DP_OK);
    memcpy(out, dp_logits(s, -1), sizeof(float) * (size_t)V);
    for (int i = 0; i < n_decode; i++) {
        if (greedy) toks[n_prompt + i] = argmax(out + (size_t)i * V, V);
        CHECK(dp_eval(s, &toks[n_prompt + i], 1) == DP_OK);
        memcpy(out + (size_t)(1 + i) * V, dp_logits(s, -1), sizeof(float) * (size_t)V);
    }
    dp_session_free(s);
    return out;
}

/* the bound of level-vs-scalar differences on the current path */
static int g_act_int;
static double level_tol(void) { return g_act_int ? 1e-3 : 1e-5; }
static const char *path_name(void) { return g_act_int ? "int16" : "f32"; }

static void tiny_models(void) {
    const int types[] = {DP_TYPE_Q4_0, DP_TYPE_Q4_1, DP_TYPE_Q5_0, DP_TYPE_Q5_1, DP_TYPE_Q8_0, DP_TYPE_F16};
    const char *archs[] = {"llama", "gemma3", "qwen2"};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const char *arch = archs[ti % 3];
        const char *path = t_tmp_path(".gguf");
        CHECK(tm_write(path, &(tm_opts){.arch = arch, .n_layer = 3, .weight_type = types[ti],
                                        .seed = (unsigned)t_rand_u64()}) == 0);
        dp_model *m = dp_model_load(path);
        CHECKF(m != NULL, "%s %s: %s", arch, dp_type_name(types[ti]), dp_last_error());
        if (!m) continue;
        int V = dp_model_get_info(m)->n_vocab;
        int32_t toks[N_PROMPT + N_DECODE];
        for (int i = 0; i < N_PROMPT + N_DECODE; i++) toks[i] = (int32_t)(t_rand_u64() % (uint64_t)V);
        size_t nl = (size_t)V * (1 + N_DECODE);

        dp_cpu_kernels_force(DP_ISA_SCALAR);
        float *scalar = run(m, 1, toks, N_PROMPT, N_DECODE, 0);
        for (int isa = DP_ISA_COUNT - 1; isa >= 0; isa--) {
            if (!dp_cpu_kernels_for((dp_isa)isa)) continue;
            dp_cpu_kernels_force((dp_isa)isa);
            float *one = run(m, 1, toks, N_PROMPT, N_DECODE, 0);
            const int threads[] = {2, 3, 7};
            for (size_t k = 0; k < 3 && one; k++) {
                float *many = run(m, threads[k], toks, N_PROMPT, N_DECODE, 0);
                double worst = 0;
                for (int i = 0; many && i <= N_DECODE; i++) {
                    double e = dp_rel_l2(many + (size_t)i * V, one + (size_t)i * V, (size_t)V);
                    if (e > worst) worst = e;
                }
                /* each output is computed by one task with the same code: identical */
                CHECKF(many && worst == 0, "%s %s %s: %d threads differ from 1 (rel-L2 %g)", arch,
                       dp_type_name(types[ti]), dp_isa_name((dp_isa)isa), threads[k], worst);
                free(many);
            }
            double worst = 0;
            for (int i = 0; one && scalar && i <= N_DECODE; i++) {
                double e = dp_rel_l2(one + (size_t)i * V, scalar + (size_t)i * V, (size_t)V);
                if (e > worst) worst = e;
            }
            CHECKF(worst < level_tol(), "%s %s %s: %s vs scalar rel-L2 %g", path_name(), arch,
                   dp_type_name(types[ti]), dp_isa_name((dp_isa)isa), worst);
            if (g_act_int && one) { /* the integer path against the float path of this level */
                dp_cpu_act_force(0);
                float *f = run(m, 1, toks, N_PROMPT, N_DECODE, 0);
                dp_cpu_act_force(1);
                double wf = 0;
                for (int i = 0; f && i <= N_DECODE; i++) {
                    double e = dp_rel_l2(one + (size_t)i * V, f + (size_t)i * V, (size_t)V);
                    if (e > wf) wf = e;
                }
                printf("tiny %s %s %s: int16 vs f32 logits rel-L2 %.2g, vs scalar %.2g\n", arch,
                       dp_type_name(types[ti]), dp_isa_name((dp_isa)isa), wf, worst);
                CHECKF(f && wf < 1e-3, "%s %s %s: int16 vs f32 rel-L2 %g", arch, dp_type_name(types[ti]),
                       dp_isa_name((dp_isa)isa), wf);
                free(f);
            }
            (void)nl;
            free(one);
        }
        free(scalar);
        dp_model_free(m);
        remove(path);
    }
}

static void real_model(const char *file) {
    dp_model *m = t_load_cached_model(file);
    if (!m) return;
    const char *text = "The history of the city begins with a small settlement on the river, where traders from "
                       "the north and the south met every spring to exchange salt, furs and tools. Over the next "
                       "centuries the market grew into a town with walls,";
    int32_t toks[128];
    int n = dp_tokenize(m, text, strlen(text), 1, 0, toks, 120);
    CHECK(n > 32 && n <= 120);
    int V = dp_model_get_info(m)->n_vocab;
    /* the scalar kernels' greedy continuation picks the decode tokens */
    dp_cpu_kernels_force(DP_ISA_SCALAR);
    int np = n < 40 ? n : 40; /* the scalar level is slow under sanitizers */
    enum { ND = 4 };
    float *ref = run(m, 2, toks, np, ND, 1);
    dp_isa best = dp_cpu_isa_detect();
    for (int isa = DP_ISA_AVX2; isa <= (int)best; isa++) {
        dp_cpu_kernels_force((dp_isa)isa);
        float *got = run(m, 2, toks, np, ND, 0);
        double worst = 0;
        int top1 = 0;
        for (int i = 0; got && ref && i <= ND; i++) {
            double e = dp_rel_l2(got + (size_t)i * V, ref + (size_t)i * V, (size_t)V);
            if (e > worst) worst = e;
            top1 += argmax(got + (size_t)i * V, V) == argmax(ref + (size_t)i * V, V);
        }
        printf("%s (%s): %s vs scalar: worst logits rel-L2 %.3g over %d steps, top-1 agrees %d/%d\n", file,
               path_name(), dp_isa_name((dp_isa)isa), worst, ND + 1, top1, ND + 1);
        CHECKF(worst < level_tol(), "%s (%s) %s vs scalar rel-L2 %g", file, path_name(), dp_isa_name((dp_isa)isa),
               worst);
        CHECK(top1 == ND + 1);
        if (g_act_int && isa == (int)best) { /* the integer path against the float path, same tokens */
            dp_cpu_act_force(0);
            float *f = run(m, 2, toks, np, ND, 0);
            dp_cpu_act_force(1);
            double wf = 0;
            for (int i = 0; f && got && i <= ND; i++) {
                double e = dp_rel_l2(got + (size_t)i * V, f + (size_t)i * V, (size_t)V);
                if (e > wf) wf = e;
            }
            printf("%s: %s int16 vs f32: worst logits rel-L2 %.3g over %d steps\n", file, dp_isa_name(best), wf, ND + 1);
            CHECKF(f && wf < 1e-3, "%s int16 vs f32 rel-L2 %g", file, wf);
            free(f);
        }
        free(got);
    }
    free(ref);
    dp_model_free(m);
}

/* The same tokens through a float32 and an f16 cache: prefill of 40
 * (several pages), 8 decode steps. */
static void kv_f16(void) {
    const char *archs[] = {"qwen2", "gemma3", "llama"};
    for (int ai = 0; ai < 3; ai++) {
        const char *path = t_tmp_path(".gguf");
        CHECK(tm_write(path, &(tm_opts){.arch = archs[ai], .n_layer = 3, .weight_type = DP_TYPE_Q8_0,
                                        .seed = (unsigned)t_rand_u64()}) == 0);
        dp_model *m = dp_model_load(path);
        CHECKF(m != NULL, "%s: %s", archs[ai], dp_last_error());
        if (!m) continue;
        enum { NP = 40, ND = 8 };
        const int V = dp_model_get_info(m)->n_vocab;
        int32_t toks[NP + ND];
        for (int i = 0; i < NP + ND; i++) toks[i] = (int32_t)(t_rand_u64() % (uint64_t)V);
        g_kv = DP_KV_F32;
        float *f32 = run(m, 2, toks, NP, ND, 0);
        const uint64_t b32 = g_kv_bytes;
        g_kv = DP_KV_F16;
        float *f16 = run(m, 2, toks, NP, ND, 0);
        g_kv = DP_KV_DEFAULT;
        CHECKF(g_kv_bytes * 2 == b32, "%s: f16 pool %llu bytes, float32 %llu", archs[ai],
               (unsigned long long)g_kv_bytes, (unsigned long long)b32);
        double worst = 0;
        for (int i = 0; f32 && f16 && i <= ND; i++) {
            double e = dp_rel_l2(f16 + (size_t)i * V, f32 + (size_t)i * V, (size_t)V);
            if (e > worst) worst = e;
        }
        printf("tiny %s: f16 cache vs float32 logits rel-L2 %.2g over %d steps\n", archs[ai], worst, ND + 1);
        CHECKF(f32 && f16 && worst > 0 && worst < 1e-2, "%s: f16 cache vs float32 rel-L2 %g", archs[ai], worst);
        free(f32);
        free(f16);
        if (ai == 0) { /* a value that is no K/V type: refused in one line */
            dp_session_params sp;
            dp_session_params_default(&sp);
            sp.backend = DP_BACKEND_CPU;
            sp.kv_type = (dp_kv_type)7;
            dp_session *s = dp_session_new(m, &sp);
            CHECKF(!s && strstr(dp_last_error(), "kv_type 7 is not a K/V type") && !strchr(dp_last_error(), '\n'),
                   "kv_type 7: %s", s ? "accepted" : dp_last_error());
            dp_session_free(s);
        }
        dp_model_free(m);
        remove(path);
    }
}

int main(void) {
    t_seed();
    kv_f16();
    for (g_act_int = 0; g_act_int <= 1; g_act_int++) {
        dp_cpu_act_force(g_act_int);
        tiny_models();
        real_model("gemma-3-270m-q4_k_m.gguf");
        real_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    }
    return t_done("test_cpu_session");
}
