/* dp_batch_entry.hidden against HF transformers: the final norm's output
 * at chosen positions equals the `final_norm` rows of the HF traces in
 * tests/fixtures/traces/ (transformers in float32 on the same GGUF's
 * weights), within trace compare's 1e-3 on the CPU (DOPPLER_TEST_BACKEND=cuda:
 * the CUDA backend, within verify's 1e-2 between backends). Each trace's
 * tokens go in as one sequence, cut at a random point into two batches,
 * beside a second sequence of random tokens that asks for logits; the
 * positions that ask for their hidden state are drawn at random, the last
 * one sometimes with its logits too, sometimes in a batch of decode rows. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "testlib.h"

typedef struct {
    const char *trace;
    const char *model; /* under tests/fixtures/models, or a cached model's file name (skipped when absent) */
    int cached;
    /* LongRoPE: HF's one pass over the trace's tokens, which pass the original context, takes the long
     * factors at every position; a first batch ending before that context takes the short ones (as a
     * generation does), so the cut must come after it */
    int cut_min;
} hid_case;

static const hid_case g_cases[] = {
    {"tests/fixtures/traces/qwen3-tiny.trace", "tests/fixtures/models/qwen3-tiny.gguf", 0, 0},
    {"tests/fixtures/traces/gemma2-tiny.trace", "tests/fixtures/models/gemma2-tiny.gguf", 0, 0},
    /* phi3.rope.scaling.original_context_length 24 */
    {"tests/fixtures/traces/phi3-tiny.trace", "tests/fixtures/models/phi3-tiny.gguf", 0, 25},
    {"tests/fixtures/traces/smollm3-tiny.trace", "tests/fixtures/models/smollm3-tiny.gguf", 0, 0},
    {"tests/fixtures/traces/mistral-tiny.trace", "tests/fixtures/models/mistral-tiny.gguf", 0, 0},
    {"tests/fixtures/traces/gemma-3-270m.sky.trace", "gemma-3-270m-q4_k_m.gguf", 1, 0},
    {"tests/fixtures/traces/smollm2-135m.sky.trace", "SmolLM2-135M-Instruct.Q4_1.gguf", 1, 0},
};

/* The trace's tokens and its final_norm rows (rows[p * dim ..]: position p),
 * from every final_norm entry; 0, or -1 with a failed check. */
static int read_trace(const char *path, int32_t **tokens, int *n, float **rows, int *dim) {
    size_t len;
    char *buf = t_read_file(path, &len);
    CHECKF(buf != NULL, "cannot read %s", path);
    if (!buf) return -1;
    const char *nl = memchr(buf, '\n', len);
    cJSON *h = nl ? cJSON_ParseWithLength(buf, (size_t)(nl - buf)) : NULL;
    const cJSON *toks = cJSON_GetObjectItem(h, "tokens"), *ents = cJSON_GetObjectItem(h, "entries");
    const cJSON *off = cJSON_GetObjectItem(h, "data_offset");
    int ok = h && cJSON_IsArray(toks) && cJSON_IsArray(ents) && cJSON_IsNumber(off);
    CHECKF(ok, "%s: no header", path);
    *n = ok ? cJSON_GetArraySize(toks) : 0;
    *tokens = calloc((size_t)*n + 1, sizeof(int32_t));
    *rows = NULL;
    *dim = 0;
    for (int i = 0; ok && i < *n; i++) (*tokens)[i] = (int32_t)cJSON_GetArrayItem(toks, i)->valueint;
    int covered = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, ents) {
        if (!ok || strcmp(cJSON_GetObjectItem(e, "point")->valuestring, "final_norm")) continue;
        const int d = cJSON_GetObjectItem(e, "dim")->valueint, p0 = cJSON_GetObjectItem(e, "pos0")->valueint;
        const int np = cJSON_GetObjectItem(e, "n_pos")->valueint;
        const size_t at = (size_t)off->valuedouble + (size_t)cJSON_GetObjectItem(e, "offset")->valuedouble;
        if (!*rows) *dim = d, *rows = calloc((size_t)*n * (size_t)d, sizeof(float));
        ok = d == *dim && p0 >= 0 && p0 + np <= *n && at + (size_t)np * d * 4 <= len;
        if (ok) memcpy(*rows + (size_t)p0 * d, buf + at, (size_t)np * d * 4), covered += np;
    }
    CHECKF(ok && covered == *n, "%s: final_norm covers %d of %d positions", path, covered, *n);
    cJSON_Delete(h);
    free(buf);
    return ok && covered == *n ? 0 : -1;
}

static double rel_l2(const float *a, const float *b, int n) {
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), r += (double)b[i] * b[i];
    return sqrt(d / (r > 0 ? r : 1));
}

static void check_case(const hid_case *c, dp_backend backend, double tol) {
    const char *mp = c->cached ? t_model_path(c->model) : t_src_path(c->model);
    if (!mp) {
        printf("%s: skipped (%s is not in the model cache)\n", c->trace, c->model);
        return;
    }
    int32_t *tok;
    float *ref;
    int n, E;
    if (read_trace(t_src_path(c->trace), &tok, &n, &ref, &E)) return;
    dp_model *m = dp_model_load(mp);
    CHECKF(m != NULL, "%s: %s", mp, dp_last_error());
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = backend, sp.n_ctx = 256, sp.n_seq_max = 2, sp.n_batch = 64;
    dp_session *s = m ? dp_session_new(m, &sp) : NULL;
    CHECKF(!m || s != NULL, "%s: %s", mp, dp_last_error());
    if (!s || dp_model_get_info(m)->n_embd != E) {
        CHECKF(!s, "%s: n_embd %d, the trace's rows %d", mp, dp_model_get_info(m)->n_embd, E);
        dp_session_free(s), dp_model_free(m), free(tok), free(ref);
        return;
    }
    const int V = dp_model_get_info(m)->n_vocab, b_seq = dp_seq_new(s);
    float *got = calloc((size_t)n * E, sizeof(float));
    unsigned char *want = calloc((size_t)n, 1);
    for (int p = 0; p < n; p++) want[p] = t_rand_unit() < 0.4;
    want[0] = want[n - 1] = 1;
    const int cut_min = c->cut_min > 1 ? c->cut_min : 1;
    /* a third of the time the second batch is two decode rows (the last position beside one other token):
     * a GPU's decode graphs keep no final norm, so such a batch must take the eager pass */
    const int decode_end = cut_min < n && t_rand_unit() < 0.34;
    const int cut = decode_end ? n - 1 : cut_min < n ? t_rand_int(cut_min, n - 1) : n, last_logits = t_rand_unit() < 0.5;
    dp_batch_entry e[64];
    int b_len = 0, worst_p = -1, checked = 0;
    double worst = 0;
    for (int part = 0; part < 2; part++) {
        const int p0 = part ? cut : 0, p1 = part ? n : cut;
        int k = 0;
        for (int p = p0; p < p1; p++)
            e[k++] = (dp_batch_entry){.seq = 0, .pos = p, .token = tok[p], .hidden = want[p] ? got + (size_t)p * E : NULL,
                                      .logits = p == n - 1 && last_logits};
        const int nb = part && decode_end ? 1 : t_rand_int(1, 8); /* the other sequence: random tokens, its last with logits */
        for (int j = 0; j < nb && k < 64; j++)
            e[k++] = (dp_batch_entry){.seq = b_seq, .pos = b_len++, .token = t_rand_int(0, V - 1), .logits = j == nb - 1};
        const int rc = dp_eval_batch(s, e, k, NULL);
        CHECKF(rc == DP_OK, "%s: dp_eval_batch: %s", c->trace, dp_last_error());
        for (int i = 0; i < k && rc == DP_OK; i++) {
            const int has = dp_batch_logits(s, i) != NULL;
            CHECKF(has == e[i].logits, "%s: entry %d (hidden %d): logits %d, asked %d", c->trace, i, e[i].hidden != NULL,
                   has, e[i].logits);
        }
    }
    for (int p = 0; p < n; p++) {
        if (!want[p]) continue;
        const double r = rel_l2(got + (size_t)p * E, ref + (size_t)p * E, E);
        checked++;
        if (r > worst) worst = r, worst_p = p;
        CHECKF(r <= tol, "%s: position %d: rel-L2 %.3g against HF's final_norm (limit %g)", c->trace, p, r, tol);
    }
    printf("%s: %d of %d positions (cut at %d), worst rel-L2 %.3g at %d\n", c->trace, checked, n, cut, worst, worst_p);
    free(got), free(want), free(tok), free(ref);
    dp_session_free(s);
    dp_model_free(m);
}

int main(void) {
    t_seed();
    const char *be = getenv("DOPPLER_TEST_BACKEND");
    const int cuda = be && !strcmp(be, "cuda");
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++)
        check_case(&g_cases[i], cuda ? DP_BACKEND_CUDA : DP_BACKEND_CPU, cuda ? 1e-2 : 1e-3);
    return t_done("test_hidden");
}
