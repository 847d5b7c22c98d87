/* Sessions on tiny random models of each architecture: prefill equals
 * token-by-token decode, batching and truncation do not change results,
 * tracing never changes logits, limits give clear errors. */
#include <math.h>
#include <string.h>

#include "doppler.h"
#include "testlib.h"
#include "testmodel.h"

static int g_trace_calls;
static int count_trace(void *user, const dp_trace_event *ev) {
    (void)user;
    (void)ev;
    g_trace_calls++;
    return 0;
}

static void run_arch(const char *arch) {
    const char *path = t_tmp_path(".gguf");
    CHECK(tm_write(path, &(tm_opts){.arch = arch, .n_layer = 7, .seed = (unsigned)t_rand_u64()}) == 0);
    dp_model *m = dp_model_load(path);
    CHECKF(m != NULL, "%s: %s", arch, dp_last_error());
    if (!m) return;
    int V = dp_model_get_info(m)->n_vocab;
    enum { N = 12 };
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)(t_rand_u64() % (uint64_t)V);

    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = DP_BACKEND_CPU;
    sp.n_ctx = 64;
    sp.logits_all = 1;
    dp_session *a = dp_session_new(m, &sp);
    CHECK(a && dp_eval(a, toks, N) == DP_OK);
    float *all = malloc(sizeof(float) * (size_t)V * N);
    for (int i = 0; i < N; i++) memcpy(all + (size_t)i * V, dp_logits(a, i), sizeof(float) * (size_t)V);

    /* one token at a time gives the same logits at every position */
    sp.logits_all = 0;
    dp_session *b = dp_session_new(m, &sp);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        CHECK(dp_eval(b, &toks[i], 1) == DP_OK);
        double e = dp_rel_l2(dp_logits(b, -1), all + (size_t)i * V, (size_t)V);
        if (e > worst) worst = e;
    }
    CHECKF(worst < 1e-5, "%s: decode vs prefill rel-L2 %g", arch, worst);

    /* small batches: same last logits */
    sp.n_batch = 5;
    dp_session *c = dp_session_new(m, &sp);
    CHECK(dp_eval(c, toks, N) == DP_OK);
    CHECKF(dp_rel_l2(dp_logits(c, -1), all + (size_t)(N - 1) * V, (size_t)V) < 1e-5, "%s: batched", arch);

    /* truncate and re-evaluate the tail: same logits */
    CHECK(dp_session_truncate(c, 6) == DP_OK && dp_session_pos(c) == 6);
    CHECK(dp_eval(c, toks + 6, N - 6) == DP_OK);
    CHECKF(dp_rel_l2(dp_logits(c, -1), all + (size_t)(N - 1) * V, (size_t)V) < 1e-5, "%s: truncate", arch);

    /* tracing everything changes nothing, bit for bit */
    dp_session *d = dp_session_new(m, &sp);
    dp_trace_filter f = {.points = ~0ull};
    CHECK(dp_session_set_trace(d, count_trace, NULL, &f) == DP_OK);
    g_trace_calls = 0;
    CHECK(dp_eval(d, toks, N) == DP_OK);
    CHECK(g_trace_calls > 7 * 10);
    float *traced = malloc(sizeof(float) * (size_t)V);
    memcpy(traced, dp_logits(d, -1), sizeof(float) * (size_t)V);
    dp_session *e = dp_session_new(m, &sp);
    CHECK(dp_eval(e, toks, N) == DP_OK);
    CHECKF(memcmp(traced, dp_logits(e, -1), sizeof(float) * (size_t)V) == 0, "%s: tracing changed logits", arch);

    /* limits */
    int32_t bad = V + 5;
    CHECK(dp_eval(e, &bad, 1) == DP_ERR_ARG);
    int32_t many[64] = {0};
    CHECK(dp_eval(e, many, 64) == DP_ERR_CTX_FULL);
    CHECK(strstr(dp_last_error(), "context") != NULL);
    CHECK(dp_session_truncate(e, 1000) == DP_ERR_ARG);
    /* nothing is queued ahead on the CPU; no session is an argument error */
    CHECK(dp_session_wait(e) == DP_OK);
    CHECK(dp_session_wait(NULL) == DP_ERR_ARG && strstr(dp_last_error(), "no session") != NULL);

    free(all);
    free(traced);
    dp_session_free(a);
    dp_session_free(b);
    dp_session_free(c);
    dp_session_free(d);
    dp_session_free(e);
    dp_model_free(m);
    remove(path);
}

int main(void) {
    t_seed();
    run_arch("llama");
    run_arch("qwen2");
    run_arch("gemma3");
    return t_done("test_session");
}
