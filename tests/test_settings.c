/* The settings table (src/settings.c): defaults when unset; values in
 * range taken; a value out of range, not a number, not one of the words,
 * an unknown DOPPLER_CUDA_* name (a removed switch too) each a one-line
 * error naming the variable, and a session is then not made; words in any
 * case; the [Kernel] description; every setting documented in docs/. */
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "settings.h"
#include "testlib.h"

extern char **environ;

/* Clears every DOPPLER_* variable the table reads or rejects. */
static void clear_env(void) {
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; *e; e++)
            if (!strncmp(*e, "DOPPLER_CUDA_", 13) || !strncmp(*e, "DOPPLER_CPU", 11) ||
                !strncmp(*e, "DOPPLER_NO_CUDA", 15) || !strncmp(*e, "DOPPLER_FAULT", 13)) {
                char name[128];
                snprintf(name, sizeof name, "%.*s", (int)(strchr(*e, '=') - *e), *e);
                unsetenv(name);
                again = 1;
                break;
            }
    }
}

/* dp_settings_read with one variable set; returns its status. */
static int read_with(const char *name, const char *value, dp_settings *s) {
    clear_env();
    setenv(name, value, 1);
    int rc = dp_settings_read(s, DP_SET_ALL);
    unsetenv(name);
    return rc;
}

static void expect_error(const char *name, const char *value, const char *want) {
    dp_settings s;
    int rc = read_with(name, value, &s);
    const char *msg = dp_last_error();
    CHECKF(rc == DP_ERR_ARG && strstr(msg, name) && strstr(msg, want) && !strchr(msg, '\n'),
           "%s=%s: rc %d, message '%s' (want '%s')", name, value, rc, msg, want);
}

int main(void) {
    t_seed();
    clear_env();
    dp_settings s;
    CHECK(dp_settings_read(&s, DP_SET_ALL) == DP_OK);
    CHECK(s.no_cuda == 0 && s.fault[0] == 0 && s.cpu_level == -1 && s.cpu_act == -1);
    CHECK(s.cuda_pdl == 1 && s.attn_slice_keys == 64 && s.gqa_mul == 4 && s.gqa_min_keys == 32 && s.gqa_spin == 1 &&
          s.mvw_pairs == 32);

    /* values in range, at the edges too; words in any case */
    int mul = 1 + (int)(t_rand_u64() % 8);
    char v[32];
    snprintf(v, sizeof v, "%d", mul);
    CHECK(read_with("DOPPLER_CUDA_ATTN_GQA_MUL", v, &s) == DP_OK && s.gqa_mul == mul);
    CHECK(read_with("DOPPLER_CUDA_MVW_PAIRS", "1024", &s) == DP_OK && s.mvw_pairs == 1024);
    CHECK(read_with("DOPPLER_CUDA_MVW_LANES", "16x2", &s) == DP_OK && s.mvw_lanes == DP_MVW_16X2);
    CHECK(read_with("DOPPLER_CUDA_MVW_LANES", "w", &s) == DP_OK && s.mvw_lanes == DP_MVW_W);
    CHECK(read_with("DOPPLER_CUDA_PDL", "0", &s) == DP_OK && s.cuda_pdl == 0);
    CHECK(read_with("DOPPLER_CPU", "AVX2", &s) == DP_OK && s.cpu_level == 1);
    CHECK(read_with("DOPPLER_CPU_ACT", "f32", &s) == DP_OK && s.cpu_act == 0);
    CHECK(read_with("DOPPLER_CPU_ACT", "Int16", &s) == DP_OK && s.cpu_act == 1);
    CHECK(read_with("DOPPLER_FAULT", "no_embed_scale", &s) == DP_OK && !strcmp(s.fault, "no_embed_scale"));
    CHECK(read_with("DOPPLER_NO_CUDA", "1", &s) == DP_OK && s.no_cuda == 1);
    CHECK(read_with("DOPPLER_CUDA_PDL", "", &s) == DP_OK && s.cuda_pdl == 1); /* empty: unset */

    /* not allowed */
    expect_error("DOPPLER_CUDA_ATTN_GQA_MUL", "9", "[1, 8]");
    expect_error("DOPPLER_CUDA_ATTN_GQA_MUL", "0", "[1, 8]");
    expect_error("DOPPLER_CUDA_MVW_PAIRS", "31", "[32, 1024]");
    expect_error("DOPPLER_CUDA_MVW_LANES", "12", "auto, w, 4, 8, 16, 32, 4x2, 8x2, 16x2, 32x2");
    expect_error("DOPPLER_CUDA_PDL", "yes", "not an integer");
    expect_error("DOPPLER_CUDA_ATTN_SLICE_KEYS", "64k", "not an integer");
    expect_error("DOPPLER_CUDA_ATTN_SLICE_KEYS", "99999999999999999999", "not an integer");
    expect_error("DOPPLER_NO_CUDA", "2", "[0, 1]");
    expect_error("DOPPLER_CPU", "sse4", "scalar, avx2, avx512");
    expect_error("DOPPLER_CPU_ACT", "int8", "auto, f32, int16");
    /* unknown DOPPLER_CUDA_* names: a typo, a removed switch, the lab one */
    expect_error("DOPPLER_CUDA_ATTN_GQA_MULT", "4", "not a doppler setting");
    expect_error("DOPPLER_CUDA_MVT", "1", "not a doppler setting");
#ifndef DOPPLER_CUDA_LAB
    expect_error("DOPPLER_CUDA_SKIP", "attn", "-DDOPPLER_CUDA_LAB=ON");
#endif
    /* other scopes are not read (a model load reads only DOPPLER_FAULT) */
    clear_env();
    setenv("DOPPLER_CUDA_MVT", "1", 1);
    setenv("DOPPLER_CPU_ACT", "int8", 1);
    CHECK(dp_settings_read(&s, DP_SET_MODEL) == DP_OK);
    clear_env();

    /* a session is not made with a bad setting */
    const char *path = t_tmp_path(".gguf");
    dp_synth_params sp = {.arch = "llama", .preset = "tiny", .type = "q8_0", .seed = t_rand_u64()};
    CHECKF(dp_synth(&sp, path) == DP_OK, "synth: %s", dp_last_error());
    dp_model *m = dp_model_load(path);
    CHECKF(m != NULL, "load: %s", dp_last_error());
    dp_session_params p;
    dp_session_params_default(&p);
    p.backend = DP_BACKEND_CPU;
    p.n_ctx = 32;
    setenv("DOPPLER_CUDA_ATTN_GQA_SPIN", "2", 1);
    dp_session *bad = m ? dp_session_new(m, &p) : NULL;
    CHECKF(!bad && dp_last_status() == DP_ERR_ARG && strstr(dp_last_error(), "DOPPLER_CUDA_ATTN_GQA_SPIN"),
           "session with a bad setting: %s", dp_last_error());
    dp_session_free(bad);
    clear_env();
    /* the description lists the backend's settings with their values */
    setenv("DOPPLER_CPU_ACT", "f32", 1);
    dp_session *ok = m ? dp_session_new(m, &p) : NULL;
    CHECKF(ok != NULL, "session: %s", dp_last_error());
    dp_backend_info bi;
    CHECK(ok && dp_session_describe(ok, &bi) == DP_OK && strstr(bi.settings, "DOPPLER_CPU_ACT=f32") &&
          strstr(bi.settings, "DOPPLER_CPU=auto") && !strstr(bi.settings, "DOPPLER_CUDA_"));
    dp_session_free(ok);
    dp_model_free(m);
    remove(path);
    clear_env();

    /* every setting is documented: the CUDA ones in docs/cuda.md, the others in docs/debugging.md */
    char *cuda_md = t_read_file(t_src_path("docs/cuda.md"), NULL), *debug_md = t_read_file(t_src_path("docs/debugging.md"), NULL);
    CHECK(cuda_md && debug_md);
    for (int i = 0; dp_setting_name(i); i++) {
        const char *name = dp_setting_name(i), *doc = !strncmp(name, "DOPPLER_CUDA_", 13) ? cuda_md : debug_md;
        char tick[96];
        snprintf(tick, sizeof tick, "`%s", name);
        CHECKF(doc && strstr(doc, tick), "%s is not documented", name);
        CHECKF(dp_setting_meaning(i) && *dp_setting_meaning(i), "%s has no meaning", name);
    }
    free(cuda_md);
    free(debug_md);
    return t_done("test_settings");
}
