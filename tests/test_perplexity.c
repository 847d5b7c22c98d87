/* doppler perplexity: on tiny synthetic models the printed PPL (and every
 * per-chunk value) equals exp(mean NLL) computed here independently (one
 * token at a time, long-double log-sum-exp); --tokens gives the same result
 * as -f; bad input exits 2; on the real models the PPL of the committed HF
 * token ids agrees with HF transformers' (tools/reference/hf_perplexity.py)
 * within 0.5%. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "doppler.h"
#include "testlib.h"

/* Parses "[1]x,[2]y,...\nPPL = X +/- Y" into per-chunk values. */
static int parse_output(const char *out, double *chunks, int cap, double *ppl, double *err) {
    int n = 0;
    const char *p = out;
    while (p && (p = strchr(p, '[')) != NULL) {
        int k;
        double v;
        if (sscanf(p, "[%d]%lf,", &k, &v) == 2 && k == n + 1 && n < cap) chunks[n++] = v;
        p++;
    }
    const char *q = out ? strstr(out, "PPL = ") : NULL;
    if (!q || sscanf(q, "PPL = %lf +/- %lf", ppl, err) != 2) return -1;
    return n;
}

/* Independent computation: fresh session per window, one token at a time. */
static void independent_ppl(dp_model *m, const int32_t *toks, int n_tok, int ctx, int n_chunks, double *cum,
                            double *ppl, double *err) {
    const dp_model_info *in = dp_model_get_info(m);
    int V = in->n_vocab, first = ctx / 2;
    long double sum = 0, sum2 = 0;
    long count = 0;
    (void)n_tok;
    for (int c = 0; c < n_chunks; c++) {
        dp_session_params p;
        dp_session_params_default(&p);
        p.backend = DP_BACKEND_CPU;
        p.n_ctx = ctx;
        dp_session *s = dp_session_new(m, &p);
        for (int j = 0; j < ctx - 1; j++) {
            int32_t t = toks[c * ctx + j];
            if (j == 0 && in->add_bos && in->bos_id >= 0) t = in->bos_id;
            CHECK(dp_eval(s, &t, 1) == DP_OK);
            if (j < first) continue;
            const float *lg = dp_logits(s, -1);
            long double mx = lg[0], se = 0;
            for (int i = 1; i < V; i++)
                if (lg[i] > mx) mx = lg[i];
            for (int i = 0; i < V; i++) se += expl((long double)lg[i] - mx);
            long double nll = mx + logl(se) - lg[toks[c * ctx + j + 1]];
            sum += nll;
            sum2 += nll * nll;
            count++;
        }
        cum[c] = (double)expl(sum / count);
        dp_session_free(s);
    }
    long double mean = sum / count, var = sum2 / count - mean * mean;
    *ppl = (double)expl(mean);
    *err = (double)(expl(mean) * sqrtl(var / (count - 1)));
}

static const char *TEXT =
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
    "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, it "
    "was the season of Darkness, it was the spring of hope, it was the winter of despair, we had everything "
    "before us, we had nothing before us, we were all going direct to Heaven, we were all going direct the "
    "other way.";

static void tiny(const char *arch) {
    const char *model = t_tmp_path(".gguf"), *text = t_tmp_path(".txt"), *tokf = t_tmp_path(".tok");
    dp_synth_params sp = {.arch = arch, .preset = "tiny", .type = "f32", .seed = t_rand_u64()};
    CHECKF(dp_synth(&sp, model) == DP_OK, "%s", dp_last_error());
    CHECK(t_write_file(text, TEXT, strlen(TEXT)) == 0);
    dp_model *m = dp_model_load(model);
    CHECK(m != NULL);
    if (!m) return;
    int32_t toks[4096];
    int n = dp_tokenize(m, TEXT, strlen(TEXT), 1, 0, toks, 4096);
    const int ctx = 32;
    CHECKF(n >= 3 * ctx && n <= 4096, "%s: %d tokens", arch, n);
    if (n > 4096) n = 4096;
    int n_chunks = n / ctx < 4 ? n / ctx : 4;

    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "perplexity -m %s -f %s --ctx %d --chunks %d --batch 7 --backend cpu", model, text,
             ctx, n_chunks);
    CHECKF(t_run_doppler(args, &out, &err) == 0, "%s: %s", arch, err ? err : "");
    double got[64], ppl = 0, e = 0, want[64], wppl, werr;
    int k = parse_output(out, got, 64, &ppl, &e);
    CHECKF(k == n_chunks, "%s: %d chunk values, want %d: %s", arch, k, n_chunks, out ? out : "");
    independent_ppl(m, toks, n, ctx, n_chunks, want, &wppl, &werr);
    for (int c = 0; c < k; c++)
        CHECKF(fabs(got[c] / want[c] - 1) < 2e-4, "%s chunk %d: %.4f vs independent %.6f", arch, c + 1, got[c], want[c]);
    CHECKF(fabs(ppl / wppl - 1) < 2e-4, "%s: PPL %.4f vs independent %.6f", arch, ppl, wppl);
    CHECKF(fabs(e / werr - 1) < 2e-3, "%s: error %.5f vs independent %.6f", arch, e, werr);
    CHECKF(wppl > 1 && wppl < 4 * dp_model_get_info(m)->n_vocab, "%s: PPL %g", arch, wppl);
    char *line = out ? strstr(out, "PPL = ") : NULL;
    char first_line[128] = "";
    if (line) snprintf(first_line, sizeof first_line, "%.*s", (int)strcspn(line, "\n"), line);
    free(out);
    free(err);

    /* --tokens with the same ids: the same output */
    FILE *f = fopen(tokf, "w");
    for (int i = 0; i < n; i++) fprintf(f, "%d%c", toks[i], i % 20 == 19 ? '\n' : ' ');
    fclose(f);
    snprintf(args, sizeof args, "perplexity -m %s --tokens %s --ctx %d --chunks %d --batch 7 --backend cpu", model, tokf,
             ctx, n_chunks);
    CHECK(t_run_doppler(args, &out, &err) == 0);
    CHECKF(out && first_line[0] && strstr(out, first_line), "%s: --tokens gave %s, -f gave %s", arch, out ? out : "",
           first_line);
    free(out);
    free(err);

    /* bad input */
    const char *bad[] = {"--ctx 1000", "--ctx 2", "--chunks 0", "--frob"};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "perplexity -m %s -f %s %s", model, text, bad[i]);
        int rc = t_run_doppler(args, &out, &err);
        CHECKF(rc == 2 && err && strstr(err, "error"), "'%s' exited %d", bad[i], rc);
        free(out);
        free(err);
    }
    f = fopen(tokf, "w");
    fprintf(f, "1 2 3 99999999");
    fclose(f);
    snprintf(args, sizeof args, "perplexity -m %s --tokens %s --ctx 4", model, tokf);
    CHECK(t_run_doppler(args, &out, &err) == 2 && err && strstr(err, "token 4"));
    free(out);
    free(err);
    snprintf(args, sizeof args, "perplexity -m %s", model);
    CHECK(t_run_doppler(args, &out, &err) == 2);
    free(out);
    free(err);
    dp_model_free(m);
    remove(model);
    remove(text);
    remove(tokf);
}

/* The real models against the committed HF numbers for the first chunks. */
static void real(const char *fixture, int chunks) {
    size_t len;
    char *js = t_read_file(t_src_path(fixture), &len);
    CHECKF(js != NULL, "missing fixture %s", fixture);
    if (!js) return;
    cJSON *o = cJSON_Parse(js);
    free(js);
    const char *file = cJSON_GetObjectItem(o, "model")->valuestring;
    const char *path = t_model_path(file);
    if (!path) {
        printf("note: %s not in the model cache: %s not checked\n", file, fixture);
        cJSON_Delete(o);
        return;
    }
    int ctx = cJSON_GetObjectItem(o, "ctx")->valueint;
    const cJSON *tok = cJSON_GetObjectItem(o, "tokens"), *after = cJSON_GetObjectItem(o, "ppl_after_chunk");
    const char *tokf = t_tmp_path(".tok");
    FILE *f = fopen(tokf, "w");
    const cJSON *e;
    int n = 0;
    cJSON_ArrayForEach(e, tok) fprintf(f, "%d\n", e->valueint), n++;
    fclose(f);
    char args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "perplexity -m %s --tokens %s --ctx %d --chunks %d --backend cpu", path, tokf, ctx,
             chunks);
    double t0 = dp_time_s();
    CHECKF(t_run_doppler(args, &out, &err) == 0, "%s", err ? err : "");
    double got[64], ppl = 0, pe = 0;
    int k = parse_output(out, got, 64, &ppl, &pe);
    double want = cJSON_GetArrayItem(after, chunks - 1)->valuedouble;
    printf("%s: doppler PPL %.4f, HF %.4f (%d chunk%s of %d), rel diff %.2e, %.0f s\n", file, ppl, want, chunks,
           chunks > 1 ? "s" : "", ctx, fabs(ppl / want - 1), dp_time_s() - t0);
    CHECK(k == chunks);
    CHECKF(fabs(ppl / want - 1) < 0.005, "%s: doppler %.4f vs HF %.4f", file, ppl, want);
    free(out);
    free(err);

    /* doppler's own tokens for the text: reported, checked by the tokenizer's tests */
    dp_model *m = dp_model_load(path);
    size_t tl;
    char *text = t_read_file(t_src_path("docs/text/alice-ch1.txt"), &tl);
    if (m && text) {
        static int32_t mine[8192];
        int nm = dp_tokenize(m, text, tl, 1, 0, mine, 8192), same = 0;
        while (same < nm && same < 8192 && same < n && mine[same] == cJSON_GetArrayItem(tok, same)->valueint) same++;
        if (nm == n && same == n) printf("%s: doppler's tokenization of the text equals HF's (%d tokens)\n", file, n);
        else
            printf("note: %s: doppler tokenizes the text into %d tokens, HF into %d; first difference at %d (the "
                   "comparison above uses HF's ids)\n", file, nm, n, same);
    }
    free(text);
    dp_model_free(m);
    cJSON_Delete(o);
    remove(tokf);
}

int main(void) {
    t_seed();
    tiny("gemma3");
    tiny("llama");
    tiny("qwen2");
    real("tests/fixtures/perplexity/smollm2-135m-instruct-q4_1-ctx128.json", 2);
    real("tests/fixtures/perplexity/gemma-3-270m-q4_k_m-ctx128.json", 1);
    return t_done("test_perplexity");
}
