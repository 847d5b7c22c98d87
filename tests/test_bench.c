/* doppler bench inference on a tiny synthetic model: the JSON has every
 * field with sane, self-consistent values; the decode byte count equals one
 * computed independently from the GGUF tensor table; --profile counts every
 * op call exactly; the text table prints; bad flags exit 2. */
#include <math.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "doppler.h"
#include "gguf.h"
#include "testlib.h"
#include "testmodel.h"

enum { REPS = 3, GEN = 4, P16 = 16, DEPTH = 8 };

static double num(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

/* Bytes a decode step reads with n_past cached tokens, from the file alone:
 * every tensor, except that an untied embedding contributes one row; plus K
 * and V (float32) for n_past + 1 positions in every layer (no windows in
 * llama). */
static double expected_decode_bytes(const char *path, int n_past) {
    gguf_file *f = gguf_open(path);
    if (!f) return NAN;
    double b = 0;
    int tied = gguf_find_tensor(f, "output.weight") == NULL;
    for (int i = 0; i < f->n_tensors; i++) {
        const gguf_tensor *t = &f->tensors[i];
        if (!strcmp(t->name, "token_embd.weight") && !tied) b += (double)t->nbytes / (double)t->ne[1];
        else b += (double)t->nbytes;
    }
    int64_t L, kv, hd;
    gguf_get_int(f, "llama.block_count", &L);
    gguf_get_int(f, "llama.attention.head_count_kv", &kv);
    gguf_get_int(f, "llama.attention.key_length", &hd);
    b += 2.0 * (double)L * (n_past + 1) * (double)(kv * hd) * 4;
    gguf_close(f);
    return b;
}

static void check_stat(const cJSON *o, const char *k, int want_null) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (want_null) {
        CHECKF(cJSON_IsNull(v), "%s should be null", k);
        return;
    }
    char kmin[64], kmax[64];
    snprintf(kmin, sizeof kmin, "%s_min", k);
    snprintf(kmax, sizeof kmax, "%s_max", k);
    double med = num(o, k), lo = num(o, kmin), hi = num(o, kmax);
    CHECKF(isfinite(med) && med > 0, "%s = %g", k, med);
    CHECKF(lo <= med && med <= hi, "%s: min %g med %g max %g", k, lo, med, hi);
}

static void check_profile_phase(const cJSON *ph, double calls_per_layer_op, int n_layer, const char *what) {
    CHECKF(cJSON_IsObject(ph), "%s profile missing", what);
    if (!cJSON_IsObject(ph)) return;
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(ph, "ops"), *layers = cJSON_GetObjectItemCaseSensitive(ph, "layers");
    CHECK(cJSON_IsArray(ops) && cJSON_GetArraySize(ops) >= 8);
    CHECKF(cJSON_GetArraySize(layers) == n_layer + 1, "%s: %d layer rows", what, cJSON_GetArraySize(layers));
    double share = 0, prev = INFINITY;
    int saw_qkv = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ops) {
        double ms = num(e, "total_ms");
        share += num(e, "share");
        CHECKF(ms <= prev, "%s: ops not sorted by time", what);
        prev = ms;
        const cJSON *op = cJSON_GetObjectItemCaseSensitive(e, "op");
        if (cJSON_IsString(op) && !strncmp(op->valuestring, "matmul", 6))
            CHECKF(num(e, "gbps") > 0, "%s: %s has no GB/s", what, op->valuestring);
        if (cJSON_IsString(op) && !strcmp(op->valuestring, "matmul_qkv")) {
            saw_qkv = 1;
            CHECKF(num(e, "calls") == calls_per_layer_op * n_layer, "%s: matmul_qkv calls %g, want %g", what,
                   num(e, "calls"), calls_per_layer_op * n_layer);
        }
    }
    CHECK(saw_qkv);
    CHECKF(fabs(share - 1) < 1e-6, "%s: shares sum to %g", what, share);
}

int main(void) {
    t_seed();
    const char *path = t_tmp_path(".gguf");
    dp_synth_params sp = {.arch = "llama", .preset = "tiny", .type = "f32", .seed = t_rand_u64()};
    CHECKF(dp_synth(&sp, path) == DP_OK, "%s", dp_last_error());
    int n_layer = 3; /* llama tiny */

    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args,
             "bench inference -m %s --prompt %d,xs --gen %d --depth 0,%d --reps %d --threads 1 --backend cpu "
             "--peak-gbps 10 --json --profile",
             path, P16, GEN, DEPTH, REPS);
    int rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0, "bench exited %d: %s", rc, err ? err : "");
    int n_obj = 0;
    for (char *save = NULL, *line = out ? strtok_r(out, "\n", &save) : NULL; line; line = strtok_r(NULL, "\n", &save)) {
        cJSON *o = cJSON_Parse(line);
        CHECKF(o != NULL, "not JSON: %s", line);
        if (!o) continue;
        n_obj++;
        static const char *required[] = {"model", "backend", "threads", "prompt_tokens", "gen_tokens", "depth",
                                         "prefill_tok_s", "decode_tok_s", "ttft_ms", "decode_gbps", "peak_rss_mb",
                                         "reps"};
        for (size_t k = 0; k < sizeof required / sizeof required[0]; k++)
            CHECKF(cJSON_HasObjectItem(o, required[k]), "missing field %s", required[k]);
        const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model"), *be = cJSON_GetObjectItemCaseSensitive(o, "backend");
        CHECK(cJSON_IsString(model) && !strcmp(model->valuestring, path));
        CHECK(cJSON_IsString(be) && !strcmp(be->valuestring, "cpu"));
        CHECK(num(o, "threads") == 1 && num(o, "reps") == REPS && num(o, "gen_tokens") == GEN);
        int P = (int)num(o, "prompt_tokens"), D = (int)num(o, "depth");
        CHECKF(P == P16 || (P >= 4 && P <= 16), "prompt_tokens %d", P);
        CHECK(D == 0 || D == DEPTH);
        check_stat(o, "prefill_tok_s", 0);
        check_stat(o, "ttft_ms", 0);
        check_stat(o, "decode_tok_s", 0);
        check_stat(o, "decode_gbps", 0);
        check_stat(o, "decode_depth_tok_s", D == 0);
        /* the first token needs at least the prefill's evaluation time */
        CHECKF(num(o, "ttft_ms") >= 1e3 * P / num(o, "prefill_tok_s") * (1 - 1e-9), "ttft %g ms < prefill %g ms",
               num(o, "ttft_ms"), 1e3 * P / num(o, "prefill_tok_s"));
        /* bytes per token: independent count from the tensor table */
        double want = expected_decode_bytes(path, P);
        CHECKF(num(o, "decode_bytes_per_token") == want, "decode bytes %.0f, want %.0f", num(o, "decode_bytes_per_token"), want);
        /* GB/s is bytes x tok/s (bytes grow by one KV row per step: < 1%) */
        double g = want * num(o, "decode_tok_s") / 1e9;
        CHECKF(fabs(num(o, "decode_gbps") / g - 1) < 0.25, "decode_gbps %g vs bytes x tok/s %g", num(o, "decode_gbps"), g);
        CHECK(fabs(num(o, "decode_peak_frac") - num(o, "decode_gbps") / 10) < 1e-9);
        CHECK(num(o, "peak_rss_mb") > 1 && num(o, "peak_rss_mb") < 4096);
        const cJSON *prof = cJSON_GetObjectItemCaseSensitive(o, "profile");
        CHECK(cJSON_IsObject(prof));
        if (cJSON_IsObject(prof)) {
            /* prefill: one forward per rep; decode: GEN per rep, twice with depth */
            check_profile_phase(cJSON_GetObjectItemCaseSensitive(prof, "prefill"), REPS, n_layer, "prefill");
            check_profile_phase(cJSON_GetObjectItemCaseSensitive(prof, "decode"), (double)REPS * GEN * (D ? 2 : 1),
                                n_layer, "decode");
        }
        cJSON_Delete(o);
    }
    CHECKF(n_obj == 4, "%d JSON objects, want 4 (2 prompts x 2 depths)", n_obj);
    free(out);
    free(err);

    /* without --profile there is no profile; the text table prints */
    snprintf(args, sizeof args, "bench inference -m %s --prompt 8 --gen 2 --reps 1 --json", path);
    CHECK(t_run_doppler(args, &out, &err) == 0);
    CHECK(out && strstr(out, "\"prefill_tok_s\"") && !strstr(out, "\"profile\""));
    free(out);
    free(err);
    snprintf(args, sizeof args, "bench inference -m %s --prompt xs --gen 2 --reps 1 --profile", path);
    CHECK(t_run_doppler(args, &out, &err) == 0);
    CHECK(out && strstr(out, "prefill tok/s") && strstr(out, "decode tok/s") && strstr(out, "profile, decode") &&
          strstr(out, "matmul_gate_up"));
    free(out);
    free(err);

    /* run --profile prints the tables on stderr */
    snprintf(args, sizeof args, "run -m %s -p \"the sky\" -n 3 --temp 0 --profile", path);
    CHECK(t_run_doppler(args, &out, &err) == 0);
    CHECK(err && strstr(err, "profile, prefill") && strstr(err, "matmul_qkv"));
    free(out);
    free(err);

    /* bad input: exit 2 with one line */
    static const char *bad[] = {"--prompt xl", "--prompt 0", "--gen 0", "--reps x", "--depth -1", "--prompt 5000",
                                "--backend tpu", "--peak-gbps 0", "--frobnicate"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "bench inference -m %s %s", path, bad[i]);
        rc = t_run_doppler(args, &out, &err);
        CHECKF(rc == 2, "'%s' exited %d", bad[i], rc);
        CHECKF(err && strstr(err, "error") && strchr(err, '\n') == err + strlen(err) - 1, "'%s': %s", bad[i], err ? err : "");
        free(out);
        free(err);
    }
    rc = t_run_doppler("bench speed", &out, &err);
    CHECK(rc == 2 && err && strstr(err, "inference"));
    free(out);
    free(err);

    /* the library call agrees with the file-based count at other depths */
    dp_model *m = dp_model_load(path);
    dp_session_params p;
    dp_session_params_default(&p);
    p.backend = DP_BACKEND_CPU;
    p.n_ctx = 128;
    dp_session *s = m ? dp_session_new(m, &p) : NULL;
    CHECK(s != NULL);
    for (int n = 0; s && n < 128; n += 37)
        CHECKF((double)dp_session_decode_bytes(s, n) == expected_decode_bytes(path, n), "n_past %d", n);
    dp_session_free(s);
    dp_model_free(m);

    /* Gemma 3: sliding layers (all but every sixth) read at most the window */
    dp_synth_params gp = {.arch = "gemma3", .preset = "tiny", .type = "f16", .seed = 5};
    CHECK(dp_synth(&gp, path) == DP_OK);
    m = dp_model_load(path);
    s = m ? dp_session_new(m, &p) : NULL;
    gguf_file *f = gguf_open(path);
    CHECK(s && f);
    int64_t L = 0, W = 0, kv = 0, hd = 0;
    double weights = 0;
    if (f) {
        CHECK(gguf_get_int(f, "gemma3.block_count", &L) && gguf_get_int(f, "gemma3.attention.sliding_window", &W) &&
              gguf_get_int(f, "gemma3.attention.head_count_kv", &kv) && gguf_get_int(f, "gemma3.attention.key_length", &hd));
        for (int i = 0; i < f->n_tensors; i++) weights += (double)f->tensors[i].nbytes; /* tied: all read */
    }
    for (int n = 0; s && f && n < 128; n += 5) {
        double want = weights;
        for (int l = 0; l < L; l++) {
            int64_t keys = n + 1;
            if ((l + 1) % 6 != 0 && keys > W) keys = W;
            want += 2.0 * (double)keys * (double)(kv * hd) * 4;
        }
        CHECKF((double)dp_session_decode_bytes(s, n) == want, "gemma3 n_past %d: %llu vs %.0f", n,
               (unsigned long long)dp_session_decode_bytes(s, n), want);
    }
    gguf_close(f);
    dp_session_free(s);
    dp_model_free(m);

    /* A byte-fallback vocabulary turns the filler text into more tokens than
     * bytes; prompt and depth both cycle through all of them. */
    CHECK(tm_write(path, &(tm_opts){.n_ctx = 4096, .seed = (unsigned)t_rand_u64()}) == 0);
    m = dp_model_load(path);
    int32_t few[8];
    const char *words = "and what is the use of a book";
    CHECKF(m && dp_tokenize(m, words, strlen(words), 0, 0, few, 8) > (int)strlen(words),
           "the test vocabulary should spell text with more tokens than bytes");
    dp_model_free(m);
    snprintf(args, sizeof args, "bench inference -m %s --prompt 1500 --gen 2 --depth 2500 --reps 1 --threads 1 "
             "--backend cpu --json", path);
    rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0 && out && strstr(out, "\"decode_depth_tok_s\""), "byte-fallback bench exited %d: %s", rc,
           err ? err : "");
    free(out);
    free(err);
    remove(path);
    return t_done("test_bench");
}
