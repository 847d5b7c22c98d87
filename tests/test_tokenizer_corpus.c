/* Exact tokenization against HuggingFace on the generated corpus
 * (tests/fixtures/tokenizer/corpus.json; expected ids from
 * tools/reference/tokenizer_reference.py): ids with and without special-token
 * parsing, and decode(encode(x)) == x (or HF's decoded text). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "gguf.h"
#include "testlib.h"
#include "testmodel.h"
#include "tokenizer/internal.h" /* tk_utf8_validate */

static int g_bad_chunks;

static cJSON *load_json(const char *rel) {
    size_t n;
    char *s = t_read_file(t_src_path(rel), &n);
    if (!s) return NULL;
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    return j;
}

static int ids_equal(const int32_t *a, int n, const cJSON *arr) {
    if (cJSON_GetArraySize(arr) != n) return 0;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) if ((int32_t)e->valuedouble != a[i++]) return 0;
    return 1;
}

static void show(const char *what, const char *line, const int32_t *a, int n, const cJSON *arr) {
    fprintf(stderr, "  %s mismatch on \"%.80s\"\n    doppler:", what, line);
    for (int i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", a[i]);
    char *e = cJSON_PrintUnformatted(arr);
    fprintf(stderr, "\n    HF:      %.400s\n", e);
    free(e);
}

static int decode_all(dp_model *m, const int32_t *ids, int n, char *out, int cap) {
    dp_detok *d = dp_detok_new(m, 1);
    int k = 0;
    for (int i = 0; i < n; i++) {
        int c = dp_detok_push(d, ids[i], out + k, cap - k);
        if (tk_utf8_validate(out + k, (size_t)c) >= 0) g_bad_chunks++; /* streaming must never cut a character */
        k += c;
    }
    k += dp_detok_flush(d, out + k, cap - k);
    dp_detok_free(d);
    return k;
}

static void run_one(const cJSON *lines, const char *name, const char *path) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/fixtures/tokenizer/expected_%s.json", name);
    cJSON *exp = load_json(rel);
    CHECKF(exp != NULL, "cannot read %s", rel);
    if (!exp) return;
    if (!path) {
        fprintf(stderr, "%s: SKIPPED (model file not present)\n", name);
        cJSON_Delete(exp);
        return;
    }
    dp_model *m = dp_model_load(path);
    CHECKF(m != NULL, "%s: %s", path, dp_last_error());
    if (!m) return;
    int add_bos = cJSON_IsTrue(cJSON_GetObjectItem(exp, "add_bos"));
    const cJSON *special = cJSON_GetObjectItem(exp, "special");
    const cJSON *plain = cJSON_GetObjectItem(exp, "plain");
    const cJSON *decoded = cJSON_GetObjectItem(exp, "decoded");
    int n_lines = cJSON_GetArraySize(lines), ok_s = 0, ok_p = 0, ok_d = 0, shown = 0;
    CHECK(cJSON_GetArraySize(special) == n_lines);
    int cap = 1 << 16;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    char *text = malloc(1 << 20);
    for (int i = 0; i < n_lines; i++) {
        const char *line = cJSON_GetArrayItem(lines, i)->valuestring;
        size_t len = strlen(line);
        char key[16];
        snprintf(key, sizeof key, "%d", i);
        const cJSON *want = cJSON_GetArrayItem(special, i);
        int n = dp_tokenize(m, line, len, add_bos, 1, ids, cap);
        if (n >= 0 && n <= cap && ids_equal(ids, n, want)) ok_s++;
        else if (shown++ < 8) show("special", line, ids, n, want);
        /* the text after the BOS decodes back to the line (HF's decode where it differs) */
        int skip = add_bos && n > 0 ? 1 : 0;
        int k = n >= 0 && n <= cap ? decode_all(m, ids + skip, n - skip, text, 1 << 20) : -1;
        const cJSON *dw = cJSON_GetObjectItem(decoded, key);
        const char *dtext = dw ? dw->valuestring : line;
        if (k == (int)strlen(dtext) && !memcmp(text, dtext, (size_t)k)) ok_d++;
        else if (shown++ < 8) fprintf(stderr, "  decode mismatch on \"%.80s\": got \"%.*s\"\n", line, k < 200 ? k : 200, text);
        const cJSON *pw = cJSON_GetObjectItem(plain, key);
        if (!pw) pw = want;
        n = dp_tokenize(m, line, len, add_bos, 0, ids, cap);
        if (n >= 0 && n <= cap && ids_equal(ids, n, pw)) ok_p++;
        else if (shown++ < 8) show("plain", line, ids, n, pw);
    }
    fprintf(stderr, "%s: %d/%d lines match with special tokens, %d/%d without, %d/%d decode back\n", name, ok_s,
            n_lines, ok_p, n_lines, ok_d, n_lines);
    CHECKF(ok_s == n_lines, "%s: %d lines differ (special)", name, n_lines - ok_s);
    CHECKF(ok_p == n_lines, "%s: %d lines differ (plain)", name, n_lines - ok_p);
    CHECKF(ok_d == n_lines, "%s: %d lines do not decode back", name, n_lines - ok_d);
    CHECKF(g_bad_chunks == 0, "%s: %d streamed chunks were not complete UTF-8", name, g_bad_chunks);
    free(ids);
    free(text);
    dp_model_free(m);
    cJSON_Delete(exp);
}

/* A GGUF with the synthetic Llama-2-style SPM vocabulary of
 * spm_llama_vocab.json (tools/reference/spm_tokenizer_reference.py) and the
 * random weights of the shared llama3 fixture (its embedding has enough rows). */
static const char *build_spm_gguf(void) {
    const char *base = t_shared_fixture("llama3-tokenizer-tiny.gguf");
    cJSON *v = load_json("tests/fixtures/tokenizer/spm_llama_vocab.json");
    if (!base || !v) {
        cJSON_Delete(v);
        return NULL;
    }
    gguf_file *f = gguf_open(base);
    gguf_writer *w = gguf_writer_new(32);
    for (int i = 0; i < f->n_kv; i++)
        if (strncmp(f->kv[i].key, "tokenizer.", 10)) gguf_w_copy_kv(w, &f->kv[i]);
    const cJSON *toks = cJSON_GetObjectItem(v, "tokens"), *sc = cJSON_GetObjectItem(v, "scores"),
                *ty = cJSON_GetObjectItem(v, "token_type");
    int n = cJSON_GetArraySize(toks);
    const char **strs = malloc(sizeof(char *) * (size_t)n);
    size_t *lens = malloc(sizeof(size_t) * (size_t)n);
    float *scores = malloc(sizeof(float) * (size_t)n);
    int32_t *types = malloc(sizeof(int32_t) * (size_t)n);
    for (int i = 0; i < n; i++) {
        strs[i] = cJSON_GetArrayItem(toks, i)->valuestring;
        lens[i] = strlen(strs[i]);
        scores[i] = (float)cJSON_GetArrayItem(sc, i)->valuedouble;
        types[i] = (int32_t)cJSON_GetArrayItem(ty, i)->valuedouble;
    }
    gguf_w_str(w, "tokenizer.ggml.model", "llama");
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", strs, lens, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.scores", GGUF_FLOAT32, scores, (uint64_t)n);
    gguf_w_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n);
    gguf_w_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)cJSON_GetObjectItem(v, "bos_token_id")->valuedouble);
    gguf_w_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)cJSON_GetObjectItem(v, "eos_token_id")->valuedouble);
    gguf_w_u32(w, "tokenizer.ggml.unknown_token_id", (uint32_t)cJSON_GetObjectItem(v, "unknown_token_id")->valuedouble);
    gguf_w_bool(w, "tokenizer.ggml.add_bos_token", 1);
    gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", 1);
    const char *out = tm_write_copy(w, f);
    gguf_close(f);
    free(strs);
    free(lens);
    free(scores);
    free(types);
    cJSON_Delete(v);
    return out;
}

int main(void) {
    cJSON *corpus = load_json("tests/fixtures/tokenizer/corpus.json");
    CHECK(corpus != NULL);
    if (!corpus) return t_done("test_tokenizer_corpus");
    const cJSON *lines = cJSON_GetObjectItem(corpus, "lines");
    CHECK(cJSON_GetArraySize(lines) >= 2000);
    const char *which = getenv("DOPPLER_TOK_ONLY"); /* e.g. "qwen2" while debugging */
    const char *spm = build_spm_gguf();
    struct { const char *name, *path; } runs[] = {
        {"gemma3", t_model_path("gemma-3-270m-q4_k_m.gguf")},
        {"smollm2", t_model_path("SmolLM2-135M-Instruct.Q4_1.gguf")},
        {"qwen2", t_shared_fixture("qwen2-tokenizer-tiny.gguf")},
        {"llama3", t_shared_fixture("llama3-tokenizer-tiny.gguf")},
        {"spm_llama", spm},
    };
    int ran = 0;
    for (int i = 0; i < 5; i++) {
        if (which && !strstr(which, runs[i].name)) continue;
        run_one(lines, runs[i].name, runs[i].path);
        ran += runs[i].path != NULL;
    }
    cJSON_Delete(corpus);
    if (spm) remove(spm);
    if (!ran) t_skip("no tokenizer model found (models cache and shared fixtures absent)");
    return t_done("test_tokenizer_corpus");
}
