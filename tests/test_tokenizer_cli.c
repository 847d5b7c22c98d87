/* doppler tokenize: --ids per line of -f FILE equals the HF fixture ids, with
 * and without --special; TEXT mode; bad input exits 2. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

static cJSON *load_json(const char *rel) {
    size_t n;
    char *s = t_read_file(t_src_path(rel), &n);
    cJSON *j = s ? cJSON_ParseWithLength(s, n) : NULL;
    free(s);
    return j;
}

static char *ids_line(const cJSON *arr) {
    size_t cap = 16 * (size_t)cJSON_GetArraySize(arr) + 2, n = 0;
    char *s = malloc(cap);
    s[0] = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) n += (size_t)snprintf(s + n, cap - n, n ? " %d" : "%d", (int)e->valuedouble);
    return s;
}

static void check_file(const char *name, const char *model, const cJSON *lines, int special) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/fixtures/tokenizer/expected_%s.json", name);
    cJSON *exp = load_json(rel);
    CHECK(exp != NULL);
    if (!exp) return;
    const char *file = t_src_path("tests/fixtures/tokenizer/corpus_lines.txt");
    char args[1200];
    snprintf(args, sizeof args, "tokenize -m '%s' --ids %s%s -f '%s'", model, special ? "--special " : "",
             cJSON_IsTrue(cJSON_GetObjectItem(exp, "add_bos")) ? "" : "--no-bos", file);
    char *out = NULL, *err = NULL;
    int rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0, "%s: exit %d: %s", args, rc, err);
    size_t flen;
    char *text = t_read_file(file, &flen);
    int n_lines = 0, ok = 0;
    char *op = out, *tp = text;
    while (tp && *tp && op) {
        char *te = strchr(tp, '\n'), *oe = strchr(op, '\n');
        if (!te || !oe) break;
        *te = 0;
        *oe = 0;
        /* find the corpus entry of this line */
        int idx = -1, i = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, lines) {
            if (!strcmp(e->valuestring, tp)) { idx = i; break; }
            i++;
        }
        char key[16];
        snprintf(key, sizeof key, "%d", idx);
        const cJSON *want = special ? NULL : cJSON_GetObjectItem(cJSON_GetObjectItem(exp, "plain"), key);
        if (!want) want = cJSON_GetArrayItem(cJSON_GetObjectItem(exp, "special"), idx);
        char *w = want ? ids_line(want) : NULL;
        if (w && !strcmp(w, op)) ok++;
        else if (n_lines - ok < 4) fprintf(stderr, "  line '%.60s': got '%.100s' want '%.100s'\n", tp, op, w ? w : "?");
        free(w);
        n_lines++;
        tp = te + 1;
        op = oe + 1;
    }
    fprintf(stderr, "%s%s: %d/%d lines of corpus_lines.txt match\n", name, special ? " --special" : "", ok, n_lines);
    CHECK(n_lines >= 300 && ok == n_lines);
    free(text);
    free(out);
    free(err);
    cJSON_Delete(exp);
}

int main(void) {
    const char *gemma = t_model_path("gemma-3-270m-q4_k_m.gguf");
    const char *smol = t_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    const char *qwen = t_shared_fixture("qwen2-tokenizer-tiny.gguf");
    const char *any = gemma ? gemma : smol ? smol : qwen;
    if (!any) t_skip("no model with a tokenizer found (models cache and shared fixtures absent)");
    cJSON *corpus = load_json("tests/fixtures/tokenizer/corpus.json");
    const cJSON *lines = cJSON_GetObjectItem(corpus, "lines");
    if (gemma) { check_file("gemma3", gemma, lines, 0); check_file("gemma3", gemma, lines, 1); }
    if (smol) check_file("smollm2", smol, lines, 1);
    if (qwen) check_file("qwen2", qwen, lines, 0);

    char args[1200], *out = NULL, *err = NULL;
    /* TEXT mode, pieces and the default table */
    snprintf(args, sizeof args, "tokenize -m '%s' --ids 'Hello world'", any);
    CHECK(t_run_doppler(args, &out, &err) == 0 && strchr(out, '\n') == strrchr(out, '\n'));
    free(out); free(err);
    if (gemma) {
        snprintf(args, sizeof args, "tokenize -m '%s' --ids --special '<start_of_turn>user'", gemma);
        CHECK(t_run_doppler(args, &out, &err) == 0 && !strcmp(out, "2 105 2364\n"));
        free(out); free(err);
        snprintf(args, sizeof args, "tokenize -m '%s' --pieces --no-bos 'Hello world'", gemma);
        CHECK(t_run_doppler(args, &out, &err) == 0 && !strcmp(out, "Hello \xE2\x96\x81world\n"));
        free(out); free(err);
        snprintf(args, sizeof args, "tokenize -m '%s' --no-bos 'a\tb'", gemma);
        CHECK(t_run_doppler(args, &out, &err) == 0 && strstr(out, "\t\\t\n"));
        free(out); free(err);
    }
    /* bad input: exit 2 with one line */
    const char *bad[] = {"tokenize", "tokenize --frob x", "tokenize a b", "tokenize -f /nonexistent/file"};
    for (int i = 0; i < 4; i++) {
        snprintf(args, sizeof args, "%s -m '%s'", bad[i], any);
        int rc = t_run_doppler(args, &out, &err);
        CHECKF(rc == 2 && strncmp(err, "doppler: error:", 15) == 0 && strchr(err, '\n') == err + strlen(err) - 1,
               "%s: rc %d, stderr %s", bad[i], rc, err);
        free(out); free(err);
    }
    const char *inv = t_tmp_path(".txt");
    t_write_file(inv, "ok\n\xFF\xFE bad\n", 11);
    snprintf(args, sizeof args, "tokenize -m '%s' --ids -f '%s'", any, inv);
    int rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 2 && strstr(err, "UTF-8"), "rc %d, stderr %s", rc, err);
    free(out); free(err);
    remove(inv);
    cJSON_Delete(corpus);
    return t_done("test_tokenizer_cli");
}
