/* The CUDA backend against the CPU backend (skipped, with the reason, when
 * the build has no CUDA or the machine no GPU):
 *  - the per-op checks of doppler verify (tools/verify) pass on fresh random inputs;
 *  - tiny synthetic models of every architecture in every weight format
 *    (the newer families in the common ones and the IQ4 types), and the tiny
 *    HF-checked models of tests/fixtures/models (soft-capping, NoPE,
 *    LongRoPE, fused tensors, windows on every layer):
 *    prefill and decode logits within rel-L2 1e-2 of the CPU's at every step
 *    (past the sliding window), greedy tokens equal except near-ties;
 *  - decode is deterministic across sessions (graph replay), tracing and
 *    profiling leave the logits unchanged (to 1e-6) and produce every point,
 *    never all zeros; truncation reuses the cache correctly; logits_all rows
 *    equal the one-at-a-time logits; the device greedy sampler returns the
 *    argmax of the logits; temperature sampling returns valid tokens; top-k/
 *    top-p/min-p sampling on the device (repetition penalty too) picks the
 *    host sampler's tokens from the same logits and seed;
 *  - decode over a 700-token context (grouped heads: k_attn_gqa) within
 *    rel-L2 1e-2 of the CPU, and a second CUDA session beside the first
 *    gives the same logits;
 *  - verify's argument errors exit 2, and without a GPU it fails clearly. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "doppler.h"
#include "cuda_probe.h"
#include "testlib.h"
#include "verify/ops.h"

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void rand_tokens(int32_t *toks, int n, int V) {
    for (int i = 0; i < n; i++) toks[i] = (int32_t)(t_rand_u64() % (uint64_t)V);
}

static dp_session *session(dp_model *m, dp_backend be, int n_ctx, int logits_all) {
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = be;
    sp.n_ctx = n_ctx;
    sp.logits_all = logits_all;
    dp_session *s = dp_session_new(m, &sp);
    CHECKF(s != NULL, "session: %s", dp_last_error());
    return s;
}

typedef struct {
    int events, zeros;
} trace_count;

static int count_trace(void *user, const dp_trace_event *ev) {
    trace_count *c = user;
    c->events++;
    size_t n = (size_t)ev->n_pos * ev->dim, nz = 0;
    for (size_t i = 0; i < n; i++) nz += ev->data[i] != 0.0f;
    /* attention weights of masked keys are legitimately zero, and so is the
     * whole row of a query at position 0 except its first key */
    if (nz == 0) c->zeros++;
    return 0;
}

/* CPU vs CUDA on one model: N tokens of prompt, then T decode steps. */
static void compare_model(const char *path, const char *what) {
    dp_model *m = dp_model_load(path);
    CHECKF(m != NULL, "%s: %s", what, dp_last_error());
    if (!m) return;
    const int V = dp_model_get_info(m)->n_vocab;
    enum { P = 9, T = 28 };
    int32_t toks[P + T];
    rand_tokens(toks, P + T, V);
    dp_session *c = session(m, DP_BACKEND_CPU, 64, 0), *g = session(m, DP_BACKEND_CUDA, 64, 0);
    dp_session *g2 = session(m, DP_BACKEND_CUDA, 64, 0);
    if (!c || !g || !g2) {
        dp_session_free(c), dp_session_free(g), dp_session_free(g2);
        dp_model_free(m);
        return;
    }
    CHECK(!strcmp(dp_session_backend(g), "cuda"));
    double worst = 0, worst_det = 0;
    int mism = 0;
    for (int step = 0; step <= T; step++) {
        const int32_t *in = step == 0 ? toks : &toks[P + step - 1];
        int n = step == 0 ? P : 1;
        CHECKF(dp_eval(c, in, n) == DP_OK, "%s cpu: %s", what, dp_last_error());
        CHECKF(dp_eval(g, in, n) == DP_OK, "%s cuda: %s", what, dp_last_error());
        CHECKF(dp_eval(g2, in, n) == DP_OK, "%s cuda: %s", what, dp_last_error());
        const float *lc = dp_logits(c, -1), *lg = dp_logits(g, -1), *lg2 = dp_logits(g2, -1);
        double e = dp_rel_l2(lg, lc, (size_t)V);
        if (!(e <= worst)) worst = e;
        double d = dp_rel_l2(lg2, lg, (size_t)V);
        if (!(d <= worst_det)) worst_det = d;
        int a = argmax(lc, V), b = argmax(lg, V);
        if (a != b) {
            /* a near-tie: the CPU's margin is inside the CPU-CUDA difference */
            double margin = lc[a] - lc[b], err = fabs(lc[a] - lg[a]) + fabs(lc[b] - lg[b]);
            if (margin > err) mism++;
        }
    }
    printf("%-28s logits rel-L2 worst %.2e, replay difference %.1e\n", what, worst, worst_det);
    /* decode traffic: the CUDA cache is f16, half the CPU's float32 bytes */
    {
        int ok = 1;
        const uint64_t w0 = dp_session_decode_bytes(c, 0) - 2 * (dp_session_decode_bytes(c, 0) - dp_session_decode_bytes(g, 0));
        for (int np = 0; np < 64; np += 21) {
            const uint64_t bc = dp_session_decode_bytes(c, np), bg = dp_session_decode_bytes(g, np);
            ok &= bg < bc && bc - 2 * (bc - bg) == w0;
        }
        CHECKF(ok, "%s: the CUDA decode-bytes estimate does not count an f16 cache", what);
    }
    CHECKF(worst <= 1e-2, "%s: CUDA logits differ from the CPU's: rel-L2 %g", what, worst);
    CHECKF(worst_det == 0, "%s: two CUDA sessions differ: %g", what, worst_det);
    CHECKF(mism == 0, "%s: %d greedy tokens differ beyond the logit error", what, mism);

    /* tracing everything and profiling change nothing */
    dp_session *h = session(m, DP_BACKEND_CUDA, 64, 0);
    trace_count tc = {0};
    dp_trace_filter f = {.points = ~0ull};
    CHECK(dp_session_set_trace(h, count_trace, &tc, &f) == DP_OK);
    CHECK(dp_session_set_profile(h, 1) == DP_OK);
    CHECK(dp_eval(h, toks, P) == DP_OK);
    for (int i = 0; i < 3; i++) CHECK(dp_eval(h, &toks[P + i], 1) == DP_OK);
    dp_session *r = session(m, DP_BACKEND_CUDA, 64, 0);
    CHECK(dp_eval(r, toks, P) == DP_OK);
    for (int i = 0; i < 3; i++) CHECK(dp_eval(r, &toks[P + i], 1) == DP_OK);
    if (!dp_logits(h, -1) || !dp_logits(r, -1)) {
        CHECKF(0, "%s: no logits after a traced and profiled evaluation: %s", what, dp_last_error());
        dp_session_free(c), dp_session_free(g), dp_session_free(g2), dp_session_free(h), dp_session_free(r);
        dp_model_free(m);
        return;
    }
    double te = dp_rel_l2(dp_logits(h, -1), dp_logits(r, -1), (size_t)V);
    CHECKF(te <= 1e-6, "%s: tracing changed the CUDA logits: rel-L2 %g", what, te);
    const dp_model_info *info = dp_model_get_info(m);
    CHECKF(tc.events >= 4 * (2 + info->n_layer * 15), "%s: only %d trace events", what, tc.events);
    CHECKF(tc.zeros == 0, "%s: %d trace events were all zeros", what, tc.zeros);
    /* the same for a prompt long enough to multiply through the resident f16
     * copies (a session of one sequence: from 16 rows) */
    {
        enum { PL = 24 };
        dp_session *hl = session(m, DP_BACKEND_CUDA, 64, 0), *rl = session(m, DP_BACKEND_CUDA, 64, 0);
        trace_count tl = {0};
        int ok = hl && rl && dp_session_set_trace(hl, count_trace, &tl, &f) == DP_OK;
        ok = ok && dp_eval(hl, toks, PL) == DP_OK && dp_eval(rl, toks, PL) == DP_OK;
        ok = ok && dp_eval(hl, &toks[PL], 1) == DP_OK && dp_eval(rl, &toks[PL], 1) == DP_OK;
        CHECKF(ok && dp_logits(hl, -1) && dp_logits(rl, -1), "%s: %d-token prompt, traced: %s", what, PL,
               dp_last_error());
        if (ok && dp_logits(hl, -1) && dp_logits(rl, -1)) {
            const double tl_e = dp_rel_l2(dp_logits(hl, -1), dp_logits(rl, -1), (size_t)V);
            CHECKF(tl_e <= 1e-6, "%s: tracing changed the CUDA logits of a %d-token prompt: rel-L2 %g", what, PL,
                   tl_e);
        }
        dp_session_free(hl), dp_session_free(rl);
    }
    dp_profile_entry pe[512];
    int np = dp_session_get_profile(h, pe, 512);
    double ms = 0;
    for (int i = 0; i < np; i++) ms += pe[i].total_ms;
    CHECKF(np > info->n_layer && ms > 0, "%s: profile has %d entries, %.3f ms", what, np, ms);

    /* truncate and evaluate the tail again, one token at a time as the first
     * time: the kernels are deterministic, so the same logits exactly (a batch
     * of two would take the prefill path, whose rounding differs; the batch
     * rows are checked against decoding below) */
    float *before = malloc(sizeof(float) * (size_t)V);
    memcpy(before, dp_logits(r, -1), sizeof(float) * (size_t)V);
    CHECK(dp_session_truncate(r, P + 1) == DP_OK);
    CHECK(dp_eval(r, &toks[P + 1], 1) == DP_OK);
    CHECK(dp_eval(r, &toks[P + 2], 1) == DP_OK);
    double tr = dp_rel_l2(dp_logits(r, -1), before, (size_t)V);
    CHECKF(tr == 0, "%s: truncate + re-eval: rel-L2 %g", what, tr);

    /* logits for every row of a batch equal one-at-a-time decoding */
    dp_session *all = session(m, DP_BACKEND_CUDA, 64, 1), *one = session(m, DP_BACKEND_CUDA, 64, 0);
    CHECK(dp_eval(all, toks, P) == DP_OK);
    double wa = 0;
    for (int i = 0; i < P; i++) {
        CHECK(dp_eval(one, &toks[i], 1) == DP_OK);
        double e = dp_rel_l2(dp_logits(all, i), dp_logits(one, -1), (size_t)V);
        if (!(e <= wa)) wa = e;
    }
    CHECKF(wa <= 1e-2, "%s: logits_all rows vs decode: rel-L2 %g", what, wa);

    /* the device greedy sampler returns the argmax; temperature sampling works */
    dp_sampler_params spp;
    dp_sampler_params_default(&spp);
    spp.temp = 0;
    dp_sampler *greedy = dp_sampler_new(&spp, V);
    spp.temp = 0.8f;
    spp.seed = 7;
    dp_sampler *warm = dp_sampler_new(&spp, V);
    dp_session *gs = session(m, DP_BACKEND_CUDA, 64, 0), *gl = session(m, DP_BACKEND_CUDA, 64, 0);
    int32_t tok = -1, bad = 0;
    CHECK(dp_eval_sample(gs, toks, P, greedy, &tok) == DP_OK);
    CHECK(dp_eval(gl, toks, P) == DP_OK);
    for (int i = 0; i < 6; i++) {
        int want = argmax(dp_logits(gl, -1), V);
        bad += tok != want;
        CHECK(dp_eval_sample(gs, &toks[P + i], 1, greedy, &tok) == DP_OK);
        CHECK(dp_eval(gl, &toks[P + i], 1) == DP_OK);
    }
    CHECKF(bad == 0, "%s: device greedy differs from the argmax at %d steps", what, bad);
    /* greedy steps fed the token they returned run one step ahead on the
     * device (the queued step is taken); step 4 feeds another token (the
     * queued step is dropped), a prompt after them waits for the last one:
     * every token is still the argmax of the same steps on plain logits */
    CHECK(dp_session_truncate(gs, 0) == DP_OK && dp_session_truncate(gl, 0) == DP_OK);
    CHECK(dp_eval_sample(gs, toks, P, greedy, &tok) == DP_OK);
    CHECK(dp_eval(gl, toks, P) == DP_OK);
    bad = 0;
    for (int i = 0; i < 10; i++) {
        bad += tok != argmax(dp_logits(gl, -1), V);
        const int32_t in = i == 4 ? (tok + 1) % V : tok;
        CHECK(dp_eval_sample(gs, &in, 1, greedy, &tok) == DP_OK);
        CHECK(dp_eval(gl, &in, 1) == DP_OK);
    }
    bad += tok != argmax(dp_logits(gl, -1), V);
    CHECKF(bad == 0, "%s: greedy steps run ahead differ from the argmax at %d steps", what, bad);
    CHECK(dp_session_truncate(gs, 2) == DP_OK && dp_session_truncate(gl, 2) == DP_OK);
    CHECK(dp_eval_sample(gs, toks + 2, P - 2, greedy, &tok) == DP_OK);
    CHECK(dp_eval(gl, toks + 2, P - 2) == DP_OK);
    CHECKF(tok == argmax(dp_logits(gl, -1), V), "%s: a prompt after greedy steps run ahead", what);
    CHECK(dp_session_wait(gs) == DP_OK);
    CHECK(dp_eval_sample(gs, &toks[P + 6], 1, warm, &tok) == DP_OK && tok >= 0 && tok < V);

    /* top-k/top-p/min-p sampling on the device (with a repetition penalty too)
     * against the host sampler on the same logits, twin samplers with one seed */
    for (int pen = 0; pen < 2; pen++) {
        spp.temp = 0.9f, spp.top_k = 40, spp.top_p = 0.9f, spp.min_p = 0.02f, spp.seed = 11 + pen;
        spp.repeat_penalty = pen ? 1.2f : 1.0f;
        dp_sampler *sd = dp_sampler_new(&spp, V), *sh = dp_sampler_new(&spp, V);
        dp_session *sa = session(m, DP_BACKEND_CUDA, 64, 0), *sb = session(m, DP_BACKEND_CUDA, 64, 0);
        int32_t td = -1, next_h;
        int differ = 0;
        CHECK(dp_eval_sample(sa, toks, P, sd, &td) == DP_OK);
        CHECK(dp_eval(sb, toks, P) == DP_OK);
        for (int i = 0; i < 8; i++) {
            next_h = dp_sampler_sample(sh, dp_logits(sb, -1));
            differ += td != next_h;
            dp_sampler_accept(sd, next_h);
            dp_sampler_accept(sh, next_h);
            CHECK(dp_eval_sample(sa, &next_h, 1, sd, &td) == DP_OK);
            CHECK(dp_eval(sb, &next_h, 1) == DP_OK);
        }
        CHECKF(differ <= 1, "%s: device sampling (penalty %.1f) differs from the host sampler at %d of 8 steps", what,
               spp.repeat_penalty, differ);
        dp_sampler_free(sd), dp_sampler_free(sh);
        dp_session_free(sa), dp_session_free(sb);
    }

    free(before);
    dp_sampler_free(greedy);
    dp_sampler_free(warm);
    dp_session_free(c), dp_session_free(g), dp_session_free(g2), dp_session_free(h), dp_session_free(r);
    dp_session_free(all), dp_session_free(one), dp_session_free(gs), dp_session_free(gl);
    dp_model_free(m);
}

/* Decode over a long context (700 keys: several key slices, so grouped
 * heads take k_attn_gqa where head_dim is 64/128/256) against the CPU; then
 * a second CUDA session alive beside the first (its slices no longer wait
 * for each other: the last one combines) must give the same logits. */
static void long_context(const char *arch) {
    const char *path = t_tmp_path(".gguf");
    dp_synth_params p = {.arch = arch, .preset = "tiny", .type = "q8_0", .seed = t_rand_u64()};
    CHECKF(dp_synth(&p, path) == DP_OK, "synth %s: %s", arch, dp_last_error());
    dp_model *m = dp_model_load(path);
    CHECKF(m != NULL, "%s: %s", arch, dp_last_error());
    if (!m) return;
    const int V = dp_model_get_info(m)->n_vocab;
    enum { P = 700, T = 6 };
    int32_t toks[P + T];
    rand_tokens(toks, P + T, V);
    dp_session *c = session(m, DP_BACKEND_CPU, 1024, 0), *g = session(m, DP_BACKEND_CUDA, 1024, 0), *g2 = NULL;
    double worst = 0, worst2 = 0;
    for (int step = 0; c && g && step <= T; step++) {
        const int32_t *in = step == 0 ? toks : &toks[P + step - 1];
        const int n = step == 0 ? P : 1;
        if (step == T / 2) { /* from here on two CUDA sessions: g2 replays g's evaluations so far */
            g2 = session(m, DP_BACKEND_CUDA, 1024, 0);
            if (!g2) break;
            CHECKF(dp_eval(g2, toks, P) == DP_OK, "%s cuda 2: %s", arch, dp_last_error());
            for (int k = 1; k < step; k++)
                CHECKF(dp_eval(g2, &toks[P + k - 1], 1) == DP_OK, "%s cuda 2: %s", arch, dp_last_error());
        }
        CHECKF(dp_eval(c, in, n) == DP_OK, "%s cpu: %s", arch, dp_last_error());
        CHECKF(dp_eval(g, in, n) == DP_OK, "%s cuda: %s", arch, dp_last_error());
        const double e = dp_rel_l2(dp_logits(g, -1), dp_logits(c, -1), (size_t)V);
        if (!(e <= worst)) worst = e;
        if (g2) {
            CHECKF(dp_eval(g2, in, n) == DP_OK, "%s cuda 2: %s", arch, dp_last_error());
            const double d = dp_rel_l2(dp_logits(g2, -1), dp_logits(g, -1), (size_t)V);
            if (!(d <= worst2)) worst2 = d;
        }
    }
    printf("%-6s tiny, 700-token context: CUDA vs CPU logits rel-L2 %.2e, two sessions %.2e\n", arch, worst, worst2);
    CHECKF(worst <= 1e-2, "%s: long-context CUDA logits differ from the CPU's: rel-L2 %g", arch, worst);
    CHECKF(g2 && worst2 <= 1e-4, "%s: a second CUDA session differs: rel-L2 %g", arch, worst2);
    dp_session_free(c), dp_session_free(g), dp_session_free(g2);
    dp_model_free(m);
    remove(path);
}

int main(void) {
    uint64_t seed = t_seed();
    /* argument errors are checked without a GPU */
    char *out = NULL, *err = NULL;
    int rc = t_run_doppler("verify --backend cpu", &out, &err);
    CHECKF(rc == 2 && err && strstr(err, "--save-ref"), "verify --backend cpu: rc %d, %s", rc, err ? err : "");
    free(out), free(err);
    rc = t_run_doppler("verify --ref /dev/null", &out, &err);
    CHECKF(rc == 2 && err && strstr(err, "-m"), "verify --ref without -m: rc %d", rc);
    free(out), free(err);

    /* is there a GPU? */
    dp_model *pm = NULL;
    char why[512];
    dp_session *probe_s = t_cuda_probe(seed, &pm, why, sizeof why);
    if (!probe_s) {
        rc = t_run_doppler("verify", &out, &err);
        CHECKF(rc == 1 && err && (strstr(err, "GPU") || strstr(err, "CUDA")), "verify without a GPU: rc %d, %s", rc,
               err ? err : "");
        free(out), free(err);
        /* --speed --no-ops runs the measurements alone: it needs the GPU too */
        rc = t_run_doppler("verify --speed --no-ops", &out, &err);
        CHECKF(rc == 1 && err && (strstr(err, "GPU") || strstr(err, "CUDA")),
               "verify --speed --no-ops without a GPU: rc %d, %s", rc, err ? err : "");
        free(out), free(err);
        dp_model_free(pm);
        if (t_failures) return t_done("test_cuda");
        t_skip("no CUDA backend here: %s", why);
    }
    dp_session_free(probe_s);
    dp_model_free(pm);

    CHECKF(verify_ops(stdout, seed, 0) == 0, "the CUDA per-op self-test failed (see above)");
    /* VERIFY_NO_CHECKS skips the checks (verify --speed --no-ops, without the timing here) */
    {
        const char *lp = t_tmp_path(".txt");
        FILE *lf = fopen(lp, "w+");
        CHECKF(lf != NULL, "cannot open %s", lp);
        if (lf) {
            CHECKF(verify_ops(lf, seed, VERIFY_NO_CHECKS) == 0, "self-test with the checks skipped failed");
            rewind(lf);
            char line[256];
            int checks = 0, summary = 0;
            while (fgets(line, sizeof line, lf)) {
                checks += !strncmp(line, "PASS", 4) || !strncmp(line, "FAIL", 4);
                summary += strstr(line, "0 of 0 checks passed") != NULL;
            }
            CHECKF(checks == 0 && summary == 1, "VERIFY_NO_CHECKS still ran %d checks (summary line %d)", checks, summary);
            fclose(lf);
        }
        remove(lp);
    }

    /* verify's trace compare with a prompt longer than a batch (512): one
     * evaluation on both backends, compared point for point */
    {
        const char *tp = t_tmp_path(".gguf");
        dp_synth_params p = {.arch = "qwen2", .preset = "tiny", .type = "q4_k_m", .seed = t_rand_u64()};
        CHECKF(dp_synth(&p, tp) == DP_OK, "synth: %s", dp_last_error());
        char cmd[512];
        snprintf(cmd, sizeof cmd, "verify --no-ops -m %s --prompt-tokens 600 --decode-steps 2", tp);
        rc = t_run_doppler(cmd, &out, &err);
        CHECKF(rc == 0 && out && strstr(out, "PASS trace compare") && !strstr(out, "no CPU counterpart"),
               "verify with a 600-token prompt: rc %d\n%s%s", rc, out ? out : "", err ? err : "");
        /* each point's worst over the prompt and over the decode steps apart */
        CHECKF(out && strstr(out, "worst rel-L2    layer  events     prompt     decode"),
               "verify's trace compare table has no prompt / decode columns:\n%s", out ? out : "");
        free(out), free(err);
        remove(tp);
    }

    long_context("llama");  /* 4 / 2 heads of 64 */
    long_context("gemma3"); /* 4 / 1 heads of 64, sliding windows of 16 */

    static const char *tiny[] = {"gemma3-tiny", "qwen2-tiny", "llama-tiny", "llama-tiny-rope-freqs", "qwen3-tiny",
                                 "gemma2-tiny", "phi3-tiny", "smollm3-tiny", "mistral-tiny"};
    for (size_t i = 0; i < sizeof tiny / sizeof tiny[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "tests/fixtures/models/%s.gguf", tiny[i]);
        compare_model(t_src_path(rel), tiny[i]);
    }

    const char *archs[] = {"llama", "qwen2", "gemma3", "qwen3", "gemma2", "phi3", "smollm3"};
    const char *types[] = {"q4_k_m", "iq4_nl", "iq4_xs", "f16", "q8_0", "f32", "bf16", "q4_0", "q4_1", "q5_0", "q5_1",
                           "q6_k", "q5_k_m", "q3_k_m", "q2_k"};
    for (int a = 0; a < (int)(sizeof archs / sizeof archs[0]); a++)
        /* the newer families in the first five formats, the others in all */
        for (size_t t = 0; t < (a < 3 ? sizeof types / sizeof types[0] : 5); t++) {
            const char *path = t_tmp_path(".gguf");
            dp_synth_params p = {.arch = archs[a], .preset = "tiny", .type = types[t], .seed = t_rand_u64()};
            if (dp_synth(&p, path) != DP_OK) {
                CHECKF(0, "synth %s %s: %s", archs[a], types[t], dp_last_error());
                continue;
            }
            char what[64];
            snprintf(what, sizeof what, "%s tiny %s", archs[a], types[t]);
            compare_model(path, what);
            remove(path);
        }
    /* the IQ2 / IQ3 mixes on Llama's shapes (rows of 256-multiples: the
     * tiny presets of other families fall back to other formats) */
    const char *iq[] = {"iq2_xxs", "iq2_xs", "iq2_s", "iq2_m", "iq3_xxs", "iq3_s", "iq3_m"};
    for (size_t t = 0; t < sizeof iq / sizeof iq[0]; t++) {
        const char *path = t_tmp_path(".gguf");
        dp_synth_params p = {.arch = "llama", .preset = "tiny", .type = iq[t], .seed = t_rand_u64()};
        if (dp_synth(&p, path) != DP_OK) {
            CHECKF(0, "synth llama %s: %s", iq[t], dp_last_error());
            continue;
        }
        char what[64];
        snprintf(what, sizeof what, "llama tiny %s", iq[t]);
        compare_model(path, what);
        remove(path);
    }
    return t_done("test_cuda");
}
