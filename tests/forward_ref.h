/* Compares doppler's forward pass with HuggingFace reference fixtures written
 * by tools/reference/ (format: tools/reference/README.md). Shared by
 * test_forward_ref.c (real models) and test_forward_tiny.c (tiny models).
 *
 * Per prompt: one prefill (dp_eval of all prompt ids) -> last-position logits
 * (rel-L2 and top-1) and hidden-state summaries (embed_scaled, resid_ffn per
 * layer, final_norm via the trace API); then the greedy continuation, one
 * dp_eval per token, teacher-forced with the fixture's ids so that a tolerated
 * near-tie flip does not derail the later steps. Uses only include/doppler.h. */
#ifndef DP_FORWARD_REF_H
#define DP_FORWARD_REF_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "testlib.h"

#define FR_LOGITS_TOL 1e-3  /* rel-L2 of the last-position logits */
#define FR_HIDDEN_TOL 1e-3  /* rel-L2 of the strided samples, relative rms, min/max */
#define FR_STEP_TOL 1e-3    /* rel-L2 of each greedy step's top-5 logits */
#define FR_TIE 1e-3         /* a top-1 flip is tolerated only below this top-2 gap */

typedef struct {
    int n_layer, n_embd;
    int n_entries;          /* 1 + n_layer + 1 */
    float *rows;            /* [n_entries][n_embd]: last prompt position */
    int *seen;
    int bad_event;
} fr_trace;

static int fr_entry(const fr_trace *t, int point, int layer) {
    if (point == DP_TP_EMBED_SCALED) return 0;
    if (point == DP_TP_RESID_FFN && layer >= 0 && layer < t->n_layer) return 1 + layer;
    if (point == DP_TP_FINAL_NORM) return t->n_layer + 1;
    return -1;
}

static int fr_trace_cb(void *user, const dp_trace_event *ev) {
    fr_trace *t = user;
    int e = fr_entry(t, ev->point, ev->layer);
    if (e < 0 || ev->dim != t->n_embd || ev->n_pos < 1) {
        t->bad_event = 1;
        return 0;
    }
    /* Keep the last row; with one prefill call that is the last prompt position. */
    memcpy(t->rows + (size_t)e * t->n_embd, ev->data + (size_t)(ev->n_pos - 1) * ev->dim, (size_t)ev->dim * sizeof(float));
    t->seen[e]++;
    return 0;
}

static const char *fr_entry_name(int n_layer, int e, char *buf, size_t cap) {
    if (e == 0) snprintf(buf, cap, "embed_scaled");
    else if (e == n_layer + 1) snprintf(buf, cap, "final_norm");
    else snprintf(buf, cap, "resid_ffn[%d]", e - 1);
    return buf;
}

static int fr_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static double fr_num(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *fr_str(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const cJSON *fr_get(const cJSON *o, const char *key) { return cJSON_GetObjectItemCaseSensitive(o, key); }

/* Compares one hidden-state entry; returns its worst relative error. */
static double fr_hidden_err(const cJSON *h, const float *v, int dim, char *why, size_t cap) {
    int stride = (int)fr_num(h, "stride");
    const cJSON *sample = fr_get(h, "sample");
    int ns = cJSON_GetArraySize(sample);
    if (stride < 1 || ns < 1 || (int)fr_num(h, "dim") != dim) {
        snprintf(why, cap, "malformed fixture entry");
        return INFINITY;
    }
    double ss = 0, mn = INFINITY, mx = -INFINITY;
    for (int i = 0; i < dim; i++) {
        ss += (double)v[i] * v[i];
        if (v[i] < mn) mn = v[i];
        if (v[i] > mx) mx = v[i];
    }
    double rms = sqrt(ss / dim);
    double frms = fr_num(h, "rms"), fmin = fr_num(h, "min"), fmax = fr_num(h, "max");
    double scale = fmax > -fmin ? fmax : -fmin;
    double num = 0, den = 0;
    for (int i = 0; i < ns; i++) {
        double f = cJSON_GetArrayItem(sample, i)->valuedouble;
        double d = (double)v[(size_t)i * stride] - f;
        num += d * d;
        den += f * f;
    }
    double e_sample = den > 0 ? sqrt(num / den) : sqrt(num);
    double e_rms = fabs(rms - frms) / (frms > 0 ? frms : 1);
    double e_min = fabs(mn - fmin) / (scale > 0 ? scale : 1);
    double e_max = fabs(mx - fmax) / (scale > 0 ? scale : 1);
    if (!(e_sample == e_sample) || !(e_rms == e_rms)) e_sample = INFINITY;
    double w = e_sample;
    if (e_rms > w) w = e_rms;
    if (e_min > w) w = e_min;
    if (e_max > w) w = e_max;
    snprintf(why, cap, "sample rel-L2 %.2e, rms %.6g vs %.6g, min %.6g vs %.6g, max %.6g vs %.6g", e_sample, rms, frms,
             mn, fmin, mx, fmax);
    return w;
}

/* Reads a fixture's raw little-endian float32 logits file; 0 on success. */
static int fr_read_logits(const char *file, float *dst, int n) {
    char rel[600];
    snprintf(rel, sizeof rel, "tests/fixtures/models/%s", file ? file : "?");
    size_t lb = 0;
    char *raw = t_read_file(t_src_path(rel), &lb);
    int ok = raw && lb == (size_t)n * 4;
    if (ok)
        for (int i = 0; i < n; i++) {
            uint32_t u = (uint32_t)(uint8_t)raw[4 * i] | (uint32_t)(uint8_t)raw[4 * i + 1] << 8 |
                         (uint32_t)(uint8_t)raw[4 * i + 2] << 16 | (uint32_t)(uint8_t)raw[4 * i + 3] << 24;
            memcpy(&dst[i], &u, 4);
        }
    free(raw);
    return ok ? 0 : -1;
}

/* The longest prompt again, prefilled in chunks of `chunk` positions (several
 * forward calls over a growing KV cache, window edges inside a chunk). */
static void fr_check_chunked(const char *name, dp_model *m, const cJSON *prompts, int n_greedy, int chunk,
                             float *ref_logits) {
    const cJSON *p, *longest = NULL;
    cJSON_ArrayForEach(p, prompts) {
        if (!longest || cJSON_GetArraySize(fr_get(p, "ids")) > cJSON_GetArraySize(fr_get(longest, "ids"))) longest = p;
    }
    if (!longest) return;
    const int V = dp_model_get_info(m)->n_vocab;
    int n = cJSON_GetArraySize(fr_get(longest, "ids"));
    int32_t *ids = malloc((size_t)n * sizeof(int32_t));
    for (int i = 0; i < n; i++) ids[i] = cJSON_GetArrayItem(fr_get(longest, "ids"), i)->valueint;
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = DP_BACKEND_CPU;
    sp.n_ctx = n + n_greedy + 8;
    sp.n_batch = chunk;
    dp_session *s = dp_session_new(m, &sp);
    CHECKF(s != NULL, "%s: session: %s", name, dp_last_error());
    int rc = s ? dp_eval(s, ids, n) : -1;
    CHECKF(rc == DP_OK, "%s: chunked prefill: %s", name, dp_last_error());
    CHECK(fr_read_logits(fr_str(longest, "logits_file"), ref_logits, V) == 0);
    if (rc == DP_OK) {
        const float *lg = dp_logits(s, -1);
        double rel = dp_rel_l2(lg, ref_logits, (size_t)V);
        int want = cJSON_GetArrayItem(cJSON_GetArrayItem(fr_get(longest, "top20"), 0), 0)->valueint;
        CHECKF(rel <= FR_LOGITS_TOL, "%s/%s: prefill in chunks of %d: logits rel-L2 %.3e > %.0e", name,
               fr_str(longest, "name"), chunk, rel, FR_LOGITS_TOL);
        CHECKF(fr_argmax(lg, V) == want, "%s/%s: prefill in chunks of %d: top-1 %d, reference %d", name,
               fr_str(longest, "name"), chunk, fr_argmax(lg, V), want);
        printf("  %-10s %4d tok  in chunks of %d: logits rel-L2 %.2e\n", fr_str(longest, "name"), n, chunk, rel);
    }
    dp_session_free(s);
    free(ids);
}

/* Runs every prompt of fixture `name` (tests/fixtures/models/<name>.json);
 * chunk > 0 also prefills the longest prompt in chunks of that many tokens.
 * Returns 1 when the model was checked, 0 when its file is absent (skipped). */
static int fr_check_model(const char *name, int chunk) {
    char rel[512];
    snprintf(rel, sizeof rel, "tests/fixtures/models/%s.json", name);
    char *js = t_read_file(t_src_path(rel), NULL);
    CHECKF(js != NULL, "cannot read fixture %s", rel);
    if (!js) return 1;
    cJSON *fx = cJSON_Parse(js);
    free(js);
    CHECKF(fx != NULL, "fixture %s is not valid JSON", rel);
    if (!fx) return 1;
    const cJSON *mj = fr_get(fx, "model");
    const char *file = fr_str(mj, "file"), *loc = fr_str(mj, "location");
    const char *path = NULL;
    if (file && loc && strcmp(loc, "cache") == 0) {
        path = t_model_path(file);
        if (!path) {
            printf("SKIP %s: model file %s not found in ~/.cache/doppler/models (or $DOPPLER_MODELS)\n", name, file);
            cJSON_Delete(fx);
            return 0;
        }
    } else if (file) {
        char r2[512];
        snprintf(r2, sizeof r2, "tests/fixtures/models/%s", file);
        path = t_src_path(r2);
    }
    CHECKF(path != NULL, "fixture %s names no model file", rel);
    if (!path) {
        cJSON_Delete(fx);
        return 1;
    }
    double t0 = dp_time_s();
    dp_model *m = dp_model_load(path);
    CHECKF(m != NULL, "loading %s: %s", path, dp_last_error());
    if (!m) {
        cJSON_Delete(fx);
        return 1;
    }
    const dp_model_info *info = dp_model_get_info(m);
    CHECKF(info->n_vocab == (int)fr_num(mj, "n_vocab") && info->n_layer == (int)fr_num(mj, "n_layer") &&
               info->n_embd == (int)fr_num(mj, "n_embd"),
           "%s: model shape (vocab %d, layers %d, embd %d) differs from the fixture's", name, info->n_vocab,
           info->n_layer, info->n_embd);
    const int V = info->n_vocab, L = info->n_layer, E = info->n_embd;
    const cJSON *prompts = fr_get(fx, "prompts");
    int n_greedy = (int)fr_num(fx, "n_greedy");
    int max_len = 0;
    const cJSON *p;
    cJSON_ArrayForEach(p, prompts) {
        int n = cJSON_GetArraySize(fr_get(p, "ids"));
        if (n > max_len) max_len = n;
    }
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = DP_BACKEND_CPU;
    sp.n_ctx = max_len + n_greedy + 8;
    sp.n_batch = max_len; /* every prompt is one forward call */
    dp_session *s = dp_session_new(m, &sp);
    CHECKF(s != NULL, "%s: session: %s", name, dp_last_error());
    if (!s) {
        dp_model_free(m);
        cJSON_Delete(fx);
        return 1;
    }
    printf("%s (%s, %d layers, vocab %d): %d prompts\n", name, info->arch, L, V, cJSON_GetArraySize(prompts));

    fr_trace tr = {.n_layer = L, .n_embd = E, .n_entries = L + 2};
    tr.rows = malloc((size_t)tr.n_entries * E * sizeof(float));
    tr.seen = calloc((size_t)tr.n_entries, sizeof(int));
    float *ref_logits = malloc((size_t)V * sizeof(float));
    int32_t *ids = malloc((size_t)(max_len + n_greedy) * sizeof(int32_t));
    dp_trace_filter filt = {.points = (1ull << DP_TP_EMBED_SCALED) | (1ull << DP_TP_RESID_FFN) | (1ull << DP_TP_FINAL_NORM)};

    cJSON_ArrayForEach(p, prompts) {
        const char *pname = fr_str(p, "name");
        const cJSON *jids = fr_get(p, "ids");
        int n = cJSON_GetArraySize(jids);
        for (int i = 0; i < n; i++) ids[i] = cJSON_GetArrayItem(jids, i)->valueint;

        /* ---- prefill with the hidden-state trace */
        CHECK(dp_session_truncate(s, 0) == DP_OK);
        memset(tr.seen, 0, (size_t)tr.n_entries * sizeof(int));
        tr.bad_event = 0;
        CHECK(dp_session_set_trace(s, fr_trace_cb, &tr, &filt) == DP_OK);
        int rc = dp_eval(s, ids, n);
        CHECKF(rc == DP_OK, "%s/%s: prefill: %s", name, pname, dp_last_error());
        dp_session_set_trace(s, NULL, NULL, NULL);
        if (rc != DP_OK) continue;
        CHECKF(!tr.bad_event, "%s/%s: unexpected trace event", name, pname);

        /* ---- last-position logits */
        const float *lg = dp_logits(s, -1);
        double rel = INFINITY;
        int top1_ok = 0, d_top = fr_argmax(lg, V);
        const cJSON *top20 = fr_get(p, "top20");
        int f_top = cJSON_GetArrayItem(cJSON_GetArrayItem(top20, 0), 0)->valueint;
        double f_gap = cJSON_GetArrayItem(cJSON_GetArrayItem(top20, 0), 1)->valuedouble -
                       cJSON_GetArrayItem(cJSON_GetArrayItem(top20, 1), 1)->valuedouble;
        int f_second = cJSON_GetArrayItem(cJSON_GetArrayItem(top20, 1), 0)->valueint;
        int have = fr_read_logits(fr_str(p, "logits_file"), ref_logits, V) == 0;
        CHECKF(have, "%s/%s: logits file %s missing or not %d floats", name, pname, fr_str(p, "logits_file"), V);
        if (have) rel = dp_rel_l2(lg, ref_logits, (size_t)V);
        CHECKF(rel <= FR_LOGITS_TOL, "%s/%s: last-position logits rel-L2 %.3e > %.0e", name, pname, rel, FR_LOGITS_TOL);
        if (d_top == f_top) top1_ok = 1;
        else if (f_gap < FR_TIE && d_top == f_second) {
            top1_ok = 1;
            printf("  note %s/%s: top-1 flip at a near-tie: doppler %d, reference %d (reference gap %.2e < %.0e)\n",
                   name, pname, d_top, f_top, f_gap, FR_TIE);
        }
        CHECKF(top1_ok, "%s/%s: top-1 %d (logit %.5f), reference %d (logit %.5f, gap to 2nd %.3e)", name, pname, d_top,
               lg[d_top], f_top, lg[f_top], f_gap);

        /* ---- hidden-state summaries */
        const cJSON *hidden = fr_get(p, "hidden");
        double hmax = 0;
        int first_bad = -1;
        char why[256], first_why[256] = "", ename[64];
        CHECKF(cJSON_GetArraySize(hidden) == tr.n_entries, "%s/%s: fixture has %d hidden entries, expected %d", name,
               pname, cJSON_GetArraySize(hidden), tr.n_entries);
        const cJSON *h;
        cJSON_ArrayForEach(h, hidden) {
            const char *pt = fr_str(h, "point");
            int e = fr_entry(&tr, pt ? dp_trace_point_lookup(pt) : -1, (int)fr_num(h, "layer"));
            CHECKF(e >= 0, "%s/%s: unknown hidden entry %s", name, pname, pt ? pt : "?");
            if (e < 0) continue;
            CHECKF(tr.seen[e] == 1, "%s/%s: trace point %s produced %d events", name, pname,
                   fr_entry_name(L, e, ename, sizeof ename), tr.seen[e]);
            double err = fr_hidden_err(h, tr.rows + (size_t)e * E, E, why, sizeof why);
            if (err > hmax) hmax = err;
            if (err > FR_HIDDEN_TOL && first_bad < 0) {
                first_bad = e;
                snprintf(first_why, sizeof first_why, "%s", why);
            }
        }
        CHECKF(first_bad < 0, "%s/%s: hidden states diverge first at %s: %s", name, pname,
               fr_entry_name(L, first_bad, ename, sizeof ename), first_why);

        /* ---- greedy continuation, one token per dp_eval, teacher-forced */
        const cJSON *gr = fr_get(p, "greedy");
        const cJSON *gids = fr_get(gr, "ids"), *gaps = fr_get(gr, "top2_gap"), *steps = fr_get(gr, "steps_top");
        CHECKF(cJSON_GetArraySize(gids) == n_greedy, "%s/%s: greedy length", name, pname);
        int match = 0, flips = 0;
        double step_max = 0;
        for (int k = 0; k < n_greedy && k < cJSON_GetArraySize(gids); k++) {
            if (k > 0) {
                int32_t t = cJSON_GetArrayItem(gids, k - 1)->valueint;
                rc = dp_eval(s, &t, 1);
                CHECKF(rc == DP_OK, "%s/%s: decode step %d: %s", name, pname, k, dp_last_error());
                if (rc != DP_OK) break;
                lg = dp_logits(s, -1);
            }
            int want = cJSON_GetArrayItem(gids, k)->valueint;
            int got = fr_argmax(lg, V);
            double gap = cJSON_GetArrayItem(gaps, k)->valuedouble;
            const cJSON *st = cJSON_GetArrayItem(steps, k);
            int second = cJSON_GetArrayItem(cJSON_GetArrayItem(st, 1), 0)->valueint;
            if (got == want) match++;
            else if (gap < FR_TIE && got == second) {
                flips++;
                printf("  note %s/%s: greedy step %d flips at a near-tie: doppler %d, reference %d (reference top-2 gap "
                       "%.2e < %.0e)\n", name, pname, k, got, want, gap, FR_TIE);
            } else {
                CHECKF(0, "%s/%s: greedy step %d: doppler picks %d (logit %.5f), reference %d (logit here %.5f, "
                       "reference gap %.3e)", name, pname, k, got, lg[got], want, lg[want], gap);
            }
            /* the step's top-5 logits, as numbers */
            double num = 0, den = 0;
            const cJSON *pair;
            cJSON_ArrayForEach(pair, st) {
                int id = cJSON_GetArrayItem(pair, 0)->valueint;
                double f = cJSON_GetArrayItem(pair, 1)->valuedouble;
                num += (lg[id] - f) * (lg[id] - f);
                den += f * f;
            }
            double se = den > 0 ? sqrt(num / den) : sqrt(num);
            if (!(se == se)) se = INFINITY;
            if (se > step_max) step_max = se;
        }
        CHECKF(step_max <= FR_STEP_TOL, "%s/%s: a greedy step's top-5 logits differ by rel-L2 %.3e > %.0e", name, pname,
               step_max, FR_STEP_TOL);
        printf("  %-10s %4d tok  logits rel-L2 %.2e  top1 %s  hidden max rel %.2e  greedy %d/%d%s  steps top-5 rel %.2e\n",
               pname, n, rel, d_top == f_top ? "same" : (top1_ok ? "near-tie flip" : "DIFFERENT"), hmax, match,
               n_greedy, flips ? " (+near-tie flips)" : "", step_max);
        fflush(stdout);
    }
    if (chunk > 0) fr_check_chunked(name, m, prompts, n_greedy, chunk, ref_logits);
    printf("  %s done in %.1f s\n", name, dp_time_s() - t0);
    free(tr.rows);
    free(tr.seen);
    free(ref_logits);
    free(ids);
    dp_session_free(s);
    dp_model_free(m);
    cJSON_Delete(fx);
    return 1;
}

#endif
