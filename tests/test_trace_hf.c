/* doppler's trace against HF transformers' trace of the same GGUF
 * (tests/fixtures/traces/, written by tools/reference/hf_trace.py):
 * for each fixture, `doppler trace dump` with the fixture's tokens, points
 * and layers, then `doppler trace compare <dump> <fixture> --tol 1e-3` must
 * compare every fixture entry and say `no divergence`; a dump with an
 * injected fault must diverge first where the fault acts. The tiny models
 * of tools/reference/make_tiny_models.py come from tests/fixtures/models;
 * a real model absent from the cache is skipped with a message. */
#include <cjson/cJSON.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"

typedef struct {
    const char *fixture;
    const char *fault; /* DOPPLER_FAULT for the negative check, or NULL */
    const char *want;  /* the start of compare's last line with the fault */
} hf_case;

static const hf_case g_cases[] = {
    /* Gemma 3: q/k norm weights without their +1 (seed 004) */
    {"tests/fixtures/traces/gemma-3-270m.sky.trace", "no_qk_norm_offset",
     "first divergence: layer 0 point q_normed pos 0 "},
    /* Llama: RoPE on halves instead of the pairs the file's permuted rows need (position 0 is not rotated) */
    {"tests/fixtures/traces/smollm2-135m.sky.trace", "rope_wrong_style",
     "first divergence: layer 0 point q_rope pos 1 "},
    /* tiny models (hf_trace.py --tiny): every family's quirks, all positions */
    {"tests/fixtures/traces/qwen3-tiny.trace", NULL, NULL},
    /* Gemma 2: attention scores left uncapped (position 0 sees only itself, so its weight stays 1) */
    {"tests/fixtures/traces/gemma2-tiny.trace", "no_softcap", "first divergence: layer 0 point attn_scores pos 1 "},
    {"tests/fixtures/traces/phi3-tiny.trace", NULL, NULL},
    {"tests/fixtures/traces/smollm3-tiny.trace", NULL, NULL},
    {"tests/fixtures/traces/mistral-tiny.trace", NULL, NULL},
};

typedef struct {
    char model[256];
    char tokens[4096];
    char points[1024];
    char layers[1024];
    int n_entries;
} fixture_info;

static const char *last_line(const char *s) {
    const char *end = s + strlen(s);
    while (end > s && end[-1] == '\n') end--;
    const char *p = end;
    while (p > s && p[-1] != '\n') p--;
    return p;
}

static void append(char *dst, size_t cap, const char *sep, const char *item) {
    size_t n = strlen(dst);
    snprintf(dst + n, cap - n, "%s%s", n ? sep : "", item);
}

/* The selectors doppler needs to produce the same entries, from the header. */
static int read_fixture(const char *path, fixture_info *fi) {
    memset(fi, 0, sizeof *fi);
    size_t len;
    char *buf = t_read_file(path, &len);
    CHECKF(buf != NULL, "cannot read %s", path);
    if (!buf) return -1;
    char *nl = memchr(buf, '\n', len);
    CHECKF(nl != NULL, "%s: no header line", path);
    if (!nl) return free(buf), -1;
    *nl = 0;
    cJSON *h = cJSON_Parse(buf);
    cJSON *model = cJSON_GetObjectItem(h, "model"), *toks = cJSON_GetObjectItem(h, "tokens");
    cJSON *pts = cJSON_GetObjectItem(h, "points"), *ents = cJSON_GetObjectItem(h, "entries"), *it;
    int ok = h && cJSON_IsString(model) && cJSON_IsArray(toks) && cJSON_IsArray(pts) && cJSON_IsArray(ents);
    CHECKF(ok, "%s: header lacks model/tokens/points/entries", path);
    if (ok) {
        snprintf(fi->model, sizeof fi->model, "%s", model->valuestring);
        char num[32];
        cJSON_ArrayForEach(it, toks) {
            snprintf(num, sizeof num, "%d", it->valueint);
            append(fi->tokens, sizeof fi->tokens, ",", num);
        }
        cJSON_ArrayForEach(it, pts) append(fi->points, sizeof fi->points, ",", it->valuestring);
        int seen[4096] = {0};
        cJSON_ArrayForEach(it, ents) {
            int l = cJSON_GetObjectItem(it, "layer")->valueint;
            fi->n_entries++;
            if (l >= 0 && l < 4096 && !seen[l]) {
                seen[l] = 1;
                snprintf(num, sizeof num, "%d", l);
                append(fi->layers, sizeof fi->layers, ",", num);
            }
        }
    }
    cJSON_Delete(h);
    free(buf);
    return ok ? 0 : -1;
}

static int dump(const char *model, const fixture_info *fi, const char *fault, const char *out) {
    char args[8192], *err = NULL;
    snprintf(args, sizeof args, "trace dump -m '%s' --tokens %s --debug-points %s --debug-layers %s -o '%s'", model,
             fi->tokens, fi->points, fi->layers, out);
    if (fault) setenv("DOPPLER_FAULT", fault, 1);
    int rc = t_run_doppler(args, NULL, &err);
    unsetenv("DOPPLER_FAULT");
    CHECKF(rc == 0, "dump (%s): exit %d: %s", fault ? fault : "clean", rc, err);
    free(err);
    return rc;
}

/* Runs compare; returns its exit code, the output in *out, the number of
 * compared rows and the worst rel-L2 with where it was. */
static int compare(const char *a, const char *b, char **out, int *n_rows, double *worst, char *where, size_t wlen) {
    char args[2048];
    snprintf(args, sizeof args, "trace compare '%s' '%s' --tol 1e-3", a, b);
    int rc = t_run_doppler(args, out, NULL);
    *n_rows = 0;
    *worst = -1;
    for (const char *p = *out; p && *p;) {
        char layer[16], point[32], pos[32];
        double rel;
        if (sscanf(p, "%15s %31s %31s %lf", layer, point, pos, &rel) == 4 &&
            (layer[0] == '-' || isdigit((unsigned char)layer[0])) && isdigit((unsigned char)pos[0])) {
            (*n_rows)++;
            if (rel > *worst) {
                *worst = rel;
                snprintf(where, wlen, "layer %s %s", layer, point);
            }
        }
        const char *nl = strchr(p, '\n');
        p = nl ? nl + 1 : NULL;
    }
    return rc;
}

static int run_case(const hf_case *c) {
    const char *fx = t_src_path(c->fixture);
    fixture_info fi;
    if (read_fixture(fx, &fi)) return 0;
    char rel[320];
    snprintf(rel, sizeof rel, "tests/fixtures/models/%s", fi.model);
    const char *model = strstr(fi.model, "-tiny") ? t_src_path(rel) : t_model_path(fi.model);
    if (!model) {
        printf("  %s: skipped, %s is not in the model cache (~/.cache/doppler/models or $DOPPLER_MODELS)\n",
               c->fixture, fi.model);
        return 0;
    }
    const char *clean = t_tmp_path(".trace"), *faulted = t_tmp_path(".trace");
    if (dump(model, &fi, NULL, clean)) return 1;
    char *out = NULL, where[96] = "";
    int n_rows;
    double worst;
    int rc = compare(clean, fx, &out, &n_rows, &worst, where, sizeof where);
    const char *ll = out ? last_line(out) : "";
    printf("  %-45s %d entries compared, worst rel-L2 %.2e (%s): %s", c->fixture, n_rows, worst, where, ll);
    CHECKF(rc == 0 && !strncmp(ll, "no divergence", 13), "%s: compare exit %d: %s", c->fixture, rc, ll);
    /* every entry of the fixture was compared (doppler produced all of them) */
    CHECKF(n_rows == fi.n_entries, "%s: compared %d rows, the fixture has %d entries\n%s", c->fixture, n_rows,
           fi.n_entries, out ? out : "");
    free(out);

    if (c->fault && !dump(model, &fi, c->fault, faulted)) {
        rc = compare(faulted, fx, &out, &n_rows, &worst, where, sizeof where);
        ll = out ? last_line(out) : "";
        printf("  %-45s %s", c->fault, ll);
        CHECKF(rc == 1, "%s with %s: compare exit %d", c->fixture, c->fault, rc);
        CHECKF(strstr(ll, c->want) == ll, "%s with %s: want '%s', got '%s'", c->fixture, c->fault, c->want, ll);
        free(out);
    }
    remove(clean);
    remove(faulted);
    return 1;
}

int main(void) {
    int ran = 0;
    for (size_t i = 0; i < sizeof g_cases / sizeof g_cases[0]; i++) ran += run_case(&g_cases[i]);
    if (!ran && !t_failures) t_skip("none of the fixtures' models is in the model cache");
    return t_done("test_trace_hf");
}
