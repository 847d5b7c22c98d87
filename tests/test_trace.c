/* The debugging toolkit: injected faults are found where they act by
 * trace compare; --debug selects layers and prints nothing when off;
 * --check-finite names the first NaN; the trace file is plain JSON + f32. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "testlib.h"
#include "testmodel.h"

static const char *g_model;
static char g_tokens[256];

static void dump(const char *fault, const char *out, const char *extra) {
    char args[2048], *err = NULL;
    if (fault) setenv("DOPPLER_FAULT", fault, 1);
    snprintf(args, sizeof args, "trace dump -m '%s' --tokens %s -n 2 -o '%s' %s", g_model, g_tokens, out,
             extra ? extra : "");
    int rc = t_run_doppler(args, NULL, &err);
    unsetenv("DOPPLER_FAULT");
    CHECKF(rc == 0, "dump (%s): exit %d: %s", fault ? fault : "clean", rc, err);
    free(err);
}

static char *compare(const char *a, const char *b, int *rc) {
    char args[1024], *out = NULL;
    snprintf(args, sizeof args, "trace compare '%s' '%s'", a, b);
    *rc = t_run_doppler(args, &out, NULL);
    return out;
}

static const char *last_line(const char *s) {
    const char *end = s + strlen(s);
    while (end > s && end[-1] == '\n') end--;
    const char *p = end;
    while (p > s && p[-1] != '\n') p--;
    return p;
}

static void test_faults(void) {
    const char *clean = t_tmp_path(".trace"), *clean2 = t_tmp_path(".trace");
    dump(NULL, clean, NULL);
    dump(NULL, clean2, NULL);
    int rc;
    char *out = compare(clean, clean2, &rc);
    CHECKF(rc == 0 && out && strstr(out, "no divergence"), "clean vs clean: rc %d: %s", rc, out ? last_line(out) : "");
    free(out);

    /* prompt of 9 tokens: positions 0..8 prefill, 9 and 10 decode */
    struct {
        const char *fault, *want;
    } cases[] = {
        {"no_qk_norm_offset", "first divergence: layer 0 point q_normed pos 0 "},
        {"no_embed_scale", "first divergence: layer - point embed_scaled pos 0 "},
        {"no_post_norms", "first divergence: layer 0 point post_attn_norm pos 0 "},
        {"rope_wrong_style", "first divergence: layer 0 point q_rope pos 1 "},
        {"decode_mask_off_by_one", "first divergence: layer 0 point attn_out pos 9 "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *f = t_tmp_path(".trace");
        dump(cases[i].fault, f, NULL);
        out = compare(clean, f, &rc);
        const char *ll = out ? last_line(out) : "";
        printf("  %-24s %s", cases[i].fault, ll);
        CHECKF(rc == 1, "%s: compare exit %d", cases[i].fault, rc);
        CHECKF(out && strstr(ll, cases[i].want) == ll, "%s: want '%s', got '%s'", cases[i].fault, cases[i].want, ll);
        free(out);
        remove(f);
    }
    /* an unknown fault name is refused */
    setenv("DOPPLER_FAULT", "no_such_fault", 1);
    char args[1024], *err = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p hi -n 1", g_model);
    rc = t_run_doppler(args, NULL, &err);
    unsetenv("DOPPLER_FAULT");
    CHECKF(rc == 2 && err && strstr(err, "unknown fault 'no_such_fault'"), "rc %d: %s", rc, err);
    free(err);
    remove(clean);
    remove(clean2);
}

/* The file is a one-line JSON header padded to data_offset, then float32. */
static void test_format(void) {
    const char *f = t_tmp_path(".trace");
    dump(NULL, f, "--debug-points embed,resid_ffn --debug-layers 2 --debug-pos last");
    size_t len;
    char *buf = t_read_file(f, &len);
    CHECK(buf != NULL);
    if (!buf) return;
    char *nl = strchr(buf, '\n');
    CHECK(nl != NULL);
    *nl = 0;
    cJSON *h = cJSON_Parse(buf);
    CHECK(h != NULL);
    double doff = cJSON_GetObjectItem(h, "data_offset")->valuedouble;
    CHECK((long)doff % 64 == 0 && (size_t)(nl - buf) + 1 == (size_t)doff);
    cJSON *ents = cJSON_GetObjectItem(h, "entries"), *e;
    int n = 0, n_embed = 0, n_resid = 0;
    size_t end = 0;
    cJSON_ArrayForEach(e, ents) {
        const char *pt = cJSON_GetObjectItem(e, "point")->valuestring;
        int layer = cJSON_GetObjectItem(e, "layer")->valueint;
        int np = cJSON_GetObjectItem(e, "n_pos")->valueint, dim = cJSON_GetObjectItem(e, "dim")->valueint;
        size_t off = (size_t)cJSON_GetObjectItem(e, "offset")->valuedouble;
        CHECK(np == 1); /* --debug-pos last */
        n_embed += !strcmp(pt, "embed");
        n_resid += !strcmp(pt, "resid_ffn") && layer == 2;
        CHECK(strcmp(pt, "resid_ffn") || layer == 2);
        const float *x = (const float *)(buf + (size_t)doff + off);
        int finite = 1;
        for (int k = 0; k < np * dim; k++) finite &= isfinite(x[k]);
        CHECK(finite);
        if (off + (size_t)np * dim * 4 > end) end = off + (size_t)np * dim * 4;
        n++;
    }
    /* prefill + 2 decode steps, last position of each */
    CHECKF(n_embed == 3 && n_resid == 3 && n == 6, "entries %d embed %d resid %d", n, n_embed, n_resid);
    CHECK((size_t)doff + end == len);
    cJSON_Delete(h);
    free(buf);
    remove(f);
}

static int count(const char *s, const char *needle) {
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, needle)); p++) n++;
    return n;
}

static void test_debug_flags(void) {
    char args[2048], *err = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p 'w1 w2 w3' -n 2 --temp 0 --ignore-eos", g_model);
    CHECK(t_run_doppler(args, NULL, &err) == 0);
    CHECKF(count(err, "[Layer]") == 0, "no --debug but %d [Layer] lines", count(err, "[Layer]"));
    free(err);
    snprintf(args, sizeof args,
             "run -m '%s' -p 'w1 w2 w3' -n 2 --temp 0 --ignore-eos --debug --debug-layers 1,5 --debug-points "
             "resid_ffn,q_rope",
             g_model);
    CHECK(t_run_doppler(args, NULL, &err) == 0);
    /* 2 evaluations (prefill + 1 decode step) x 2 layers x 2 points, last position */
    CHECKF(count(err, "[Layer]") == 8, "%d [Layer] lines:\n%s", count(err, "[Layer]"), err);
    CHECK(count(err, "[Layer] L=1 ") == 4 && count(err, "[Layer] L=5 ") == 4);
    CHECK(count(err, "point=q_rope n=32 ") == 4 && count(err, "point=resid_ffn n=32 ") == 4);
    CHECK(count(err, " nan=0 inf=0") == 8 && count(err, "maxAbs=") == 8);
    free(err);
    snprintf(args, sizeof args, "run -m '%s' -p 'w1 w2 w3' -n 1 --debug --debug-points bogus", g_model);
    CHECK(t_run_doppler(args, NULL, &err) == 2 && strstr(err, "unknown trace point 'bogus'"));
    free(err);
    snprintf(args, sizeof args, "run -m '%s' -p 'w1' -n 2 --temp 0 --track-token 7 --top-k-print 3", g_model);
    CHECK(t_run_doppler(args, NULL, &err) == 0);
    CHECKF(count(err, "track token=7 ") == 2 && count(err, " top3 ") == 2, "%s", err);
    free(err);
}

static void test_check_finite(void) {
    const char *bad = t_tmp_path(".gguf");
    CHECK(tm_write(bad, &(tm_opts){.arch = "gemma3", .n_layer = 7, .nan_tensor = "blk.3.ffn_up.weight"}) == 0);
    char args[1024], *err = NULL;
    snprintf(args, sizeof args, "run -m '%s' -p 'w1 w2 w3' -n 2 --check-finite", bad);
    int rc = t_run_doppler(args, NULL, &err);
    CHECKF(rc == 1 && err && strstr(err, "non-finite value at layer 3 point up pos "), "rc %d: %s", rc, err);
    free(err);
    remove(bad);
}

int main(void) {
    t_seed();
    g_model = t_tmp_path(".gguf");
    CHECK(tm_write(g_model, &(tm_opts){.arch = "gemma3", .n_layer = 7, .seed = (unsigned)t_rand_u64()}) == 0);
    int n = 0;
    for (int i = 0; i < 9; i++) n += snprintf(g_tokens + n, sizeof g_tokens - (size_t)n, "%s%d", i ? "," : "",
                                              (int)(4 + t_rand_u64() % 290));
    test_faults();
    test_format();
    test_debug_flags();
    test_check_finite();
    remove(g_model);
    return t_done("test_trace");
}
