#include "debug.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Points "a,b" into a bit mask; -1 with why on an unknown or empty list. */
static int points_parse(const char *list, uint64_t *out, char *err, size_t errlen) {
    uint64_t m = 0;
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(n < 63 ? n : 63), p);
        int pt = dp_trace_point_lookup(name);
        if (pt < 0 && n) {
            char known[1024] = "";
            for (int i = 0; i < DP_TP_COUNT; i++) {
                strcat(known, i ? "," : "");
                strcat(known, dp_trace_point_name(i));
            }
            snprintf(err, errlen, "unknown trace point '%s' (known: %s)", name, known);
            return -1;
        }
        if (n) m |= 1ull << pt;
        p += n;
        if (*p == ',') p++;
    }
    if (!m) {
        snprintf(err, errlen, "empty list");
        return -1;
    }
    *out = m;
    return 0;
}

/* Parses "1,2,5" into ints within [lo, hi] (*out malloc'ed when out is not
 * NULL); returns the count, or -1 with why. */
static int int_list_parse(const char *s, int lo, int hi, int **out, char *err, size_t errlen) {
    int n = 0, cap = 8;
    int *v = malloc(sizeof(int) * (size_t)cap);
    const char *p = s;
    while (v && *p) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || x < lo || x > hi) {
            free(v);
            snprintf(err, errlen, "expects comma-separated integers in [%d, %d], got '%s'", lo, hi, s);
            return -1;
        }
        if (n == cap) {
            int *nv = realloc(v, sizeof(int) * (size_t)(cap *= 2));
            if (!nv) free(v);
            v = nv;
        }
        if (v) v[n++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (!v) cli_die(EXIT_RUNTIME, "out of memory");
    if (!n) {
        free(v);
        snprintf(err, errlen, "empty list");
        return -1;
    }
    if (out) *out = v;
    else free(v);
    return n;
}

int debug_check_points(const char *v, char *err, size_t errlen) {
    uint64_t m;
    return points_parse(v, &m, err, errlen);
}

int debug_check_layers(const char *v, char *err, size_t errlen) {
    return int_list_parse(v, 0, 1 << 20, NULL, err, errlen) < 0 ? -1 : 0;
}

int debug_check_pos(const char *v, char *err, size_t errlen) {
    if (!strcmp(v, "all") || !strcmp(v, "last")) return 0;
    return int_list_parse(v, 0, 1 << 24, NULL, err, errlen) < 0 ? -1 : 0;
}

void debug_from_args(debug_opts *d, const cli_args *a) {
    char err[1200];
    memset(d, 0, sizeof *d);
    d->debug = arg_flag(a, O_DEBUG);
    d->check_finite = arg_flag(a, O_CHECK_FINITE);
    d->top_k_print = arg_int(a, O_TOP_K_PRINT);
    if (arg_str(a, O_DEBUG_LAYERS)) d->layers_arg = strdup(arg_str(a, O_DEBUG_LAYERS));
    if (arg_str(a, O_DEBUG_POINTS)) {
        if (points_parse(arg_str(a, O_DEBUG_POINTS), &d->points, err, sizeof err))
            cli_die(EXIT_BADINPUT, "--debug-points: %s", err);
        d->points_set = 1;
    }
    const char *pos = arg_str(a, O_DEBUG_POS);
    if (pos && !strcmp(pos, "all")) d->pos_all = 1;
    else if (pos && strcmp(pos, "last") &&
             (d->n_pos_list = int_list_parse(pos, 0, 1 << 24, &d->pos_list, err, sizeof err)) < 0)
        cli_die(EXIT_BADINPUT, "--debug-pos: %s", err);
    const opt_value *t = &a->v[O_TRACK_TOKEN];
    if (t->n_list > DEBUG_MAX_TRACK) cli_die(EXIT_BADINPUT, "--track-token: at most %d tokens", DEBUG_MAX_TRACK);
    for (int k = 0; k < t->n_list; k++) d->track_arg[d->n_track++] = t->list[k];
}

void debug_resolve(debug_opts *d, const dp_model *m) {
    const dp_model_info *in = dp_model_get_info(m);
    if (!d->points_set)
        d->points = 1ull << DP_TP_EMBED_SCALED | 1ull << DP_TP_RESID_ATTN | 1ull << DP_TP_RESID_FFN |
                    1ull << DP_TP_FINAL_NORM;
    if (d->layers_arg) {
        char err[256];
        int *v, n = int_list_parse(d->layers_arg, 0, in->n_layer - 1, &v, err, sizeof err);
        if (n < 0) cli_die(EXIT_BADINPUT, "--debug-layers %s", err);
        d->layers = calloc((size_t)in->n_layer, 1);
        for (int k = 0; k < n; k++) d->layers[v[k]] = 1;
        free(v);
    }
    for (int k = 0; k < d->n_track; k++) {
        const char *t = d->track_arg[k];
        char *end;
        long id = strtol(t, &end, 10);
        if (*t && !*end) {
            if (id < 0 || id >= in->n_vocab)
                cli_die(EXIT_BADINPUT, "--track-token %ld is outside the vocabulary (0..%d)", id, in->n_vocab - 1);
            d->track_id[k] = (int32_t)id;
            continue;
        }
        int32_t *ids = NULL;
        int cap = 0, n = cli_tokenize(m, t, strlen(t), 0, 1, &ids, &cap);
        if (n == 0) cli_die(EXIT_BADINPUT, "--track-token '%s' gives no token", t);
        if (n > 1)
            cli_note(LOG_SAMPLER, "--track-token '%s' is %d tokens; tracking the first (%d)", t, n, ids[0]);
        d->track_id[k] = ids[0];
        free(ids);
    }
}

static int pos_selected(const debug_opts *d, int pos, int last) {
    if (d->pos_all) return 1;
    if (!d->n_pos_list) return pos == last;
    for (int k = 0; k < d->n_pos_list; k++)
        if (d->pos_list[k] == pos) return 1;
    return 0;
}

/* Statistics of the finite values of one vector (NaN when there are none). */
struct debug_vstats {
    int seq, pos, dim, imax_abs, nan, inf;
    double min, max, mean, rms, max_abs;
};

static void vec_stats(const float *x, int dim, struct debug_vstats *st) {
    double sum = 0, ss = 0, mn = INFINITY, mx = -INFINITY, ma = -1;
    int ima = 0, nan = 0, inf = 0, n = 0;
    for (int i = 0; i < dim; i++) {
        float v = x[i];
        if (isnan(v)) { nan++; continue; }
        if (isinf(v)) { inf++; continue; }
        n++;
        sum += v;
        ss += (double)v * v;
        if (v < mn) mn = v;
        if (v > mx) mx = v;
        if (fabs(v) > ma) { ma = fabs(v); ima = i; }
    }
    st->dim = dim;
    st->imax_abs = ima;
    st->nan = nan;
    st->inf = inf;
    st->min = n ? mn : NAN;
    st->max = n ? mx : NAN;
    st->mean = n ? sum / n : NAN;
    st->rms = n ? sqrt(ss / n) : NAN;
    st->max_abs = n ? ma : NAN;
}

static void print_stats(debug_opts *d, const dp_trace_event *ev, int row) {
    struct debug_vstats st;
    vec_stats(ev->data + (size_t)row * (size_t)ev->dim, ev->dim, &st);
    char L[16];
    if (ev->layer >= 0) snprintf(L, sizeof L, "%d", ev->layer);
    else snprintf(L, sizeof L, "-");
    cli_log(LOG_LAYER, "L=%s seq=%d pos=%d point=%s n=%d min=%.6g max=%.6g mean=%.6g rms=%.6g maxAbs=%.6g@%d nan=%d inf=%d",
            L, ev->seq, ev->pos0 + row, dp_trace_point_name(ev->point), ev->dim, st.min, st.max, st.mean, st.rms, st.max_abs,
            st.imax_abs, st.nan, st.inf);
    d->n_lines++;
}

/* [FFN]: act's statistics are kept per selected row (sequence and
 * position: a batch gives one event per sequence) until the same layer's
 * down projection arrives; then one line per row with both. */
static void ffn_event(debug_opts *d, const dp_trace_event *ev) {
    int last = ev->pos0 + ev->n_pos - 1;
    if (ev->point == DP_TP_ACT) {
        if (ev->layer != d->ffn_layer || d->ffn_down_seen) d->ffn_n = 0;
        d->ffn_layer = ev->layer;
        d->ffn_down_seen = 0;
        if (d->ffn_n + ev->n_pos > d->ffn_cap) {
            d->ffn_cap = d->ffn_n + ev->n_pos;
            d->ffn_rows = realloc(d->ffn_rows, sizeof *d->ffn_rows * (size_t)d->ffn_cap);
            if (!d->ffn_rows) cli_die(EXIT_RUNTIME, "out of memory");
        }
        for (int r = 0; r < ev->n_pos; r++) {
            if (!pos_selected(d, ev->pos0 + r, last)) continue;
            struct debug_vstats *a = &d->ffn_rows[d->ffn_n++];
            vec_stats(ev->data + (size_t)r * (size_t)ev->dim, ev->dim, a);
            a->seq = ev->seq;
            a->pos = ev->pos0 + r;
        }
        return;
    }
    if (ev->layer != d->ffn_layer) return; /* no act seen for this layer */
    d->ffn_down_seen = 1;
    for (int r = 0; r < ev->n_pos; r++)
        for (int k = 0; k < d->ffn_n; k++) {
            const struct debug_vstats *a = &d->ffn_rows[k];
            if (a->seq != ev->seq || a->pos != ev->pos0 + r) continue;
            struct debug_vstats o;
            vec_stats(ev->data + (size_t)r * (size_t)ev->dim, ev->dim, &o);
            cli_log(LOG_FFN,
                    "L=%d seq=%d pos=%d act=%s n_ff=%d act: min=%.6g max=%.6g mean=%.6g rms=%.6g maxAbs=%.6g@%d nan=%d "
                    "inf=%d | down: n=%d min=%.6g max=%.6g mean=%.6g rms=%.6g maxAbs=%.6g@%d nan=%d inf=%d",
                    ev->layer, a->seq, a->pos, d->ffn_act, a->dim, a->min, a->max, a->mean, a->rms, a->max_abs,
                    a->imax_abs, a->nan, a->inf, o.dim, o.min, o.max, o.mean, o.rms, o.max_abs, o.imax_abs, o.nan,
                    o.inf);
        }
}

/* attn_scores rows hold [n_head][n_kv] softmax weights: summarise each head. */
static void print_attn(const dp_trace_event *ev, int row, int n_head) {
    int n_kv = ev->dim / n_head;
    for (int h = 0; h < n_head; h++) {
        const float *w = ev->data + (size_t)row * (size_t)ev->dim + (size_t)h * (size_t)n_kv;
        double sum = 0, ent = 0;
        int am = 0;
        for (int j = 0; j < n_kv; j++) {
            sum += w[j];
            if (w[j] > 0) ent -= w[j] * log(w[j]);
            if (w[j] > w[am]) am = j;
        }
        cli_log(LOG_ATTN, "L=%d seq=%d pos=%d head=%d sum=%.6f max=%.4f@%d entropy=%.4f (uniform %.4f)", ev->layer,
                ev->seq, ev->pos0 + row, h, sum, w[am], am, ent, log((double)(ev->pos0 + row + 1)));
    }
}

typedef struct {
    debug_opts *d;
    int n_head;
} cb_ctx;

static cb_ctx g_ctx;

static int on_trace(void *user, const dp_trace_event *ev) {
    cb_ctx *c = user;
    debug_opts *d = c->d;
    if (d->check_finite) {
        size_t n = (size_t)ev->n_pos * (size_t)ev->dim;
        for (size_t i = 0; i < n; i++)
            if (!isfinite(ev->data[i])) {
                d->bad_point = ev->point;
                d->bad_layer = ev->layer;
                d->bad_pos = ev->pos0 + (int)(i / (size_t)ev->dim);
                d->bad_seq = ev->seq;
                d->bad_index = (int)(i % (size_t)ev->dim);
                d->bad_value = ev->data[i];
                return 1;
            }
    }
    int layer_on = ev->layer < 0 || !d->layers || d->layers[ev->layer];
    if (d->ffn && layer_on && (ev->point == DP_TP_ACT || ev->point == DP_TP_DOWN)) ffn_event(d, ev);
    if (d->debug && ((d->points >> ev->point) & 1) && layer_on) {
        int last = ev->pos0 + ev->n_pos - 1;
        for (int r = 0; r < ev->n_pos; r++)
            if (pos_selected(d, ev->pos0 + r, last)) {
                print_stats(d, ev, r);
                if (ev->point == DP_TP_ATTN_SCORES) print_attn(ev, r, c->n_head);
            }
    }
    return 0;
}

void debug_attach(debug_opts *d, dp_session *s, const dp_model *m) {
    if (!d->debug && !d->check_finite) return;
    const dp_model_info *in = dp_model_get_info(m);
    dp_trace_filter f = {0};
    d->ffn = d->debug && cli_log_on(LOG_FFN);
    d->ffn_layer = -1;
    if (d->ffn) {
        dp_backend_info bi;
        snprintf(d->ffn_act, sizeof d->ffn_act, "%s", dp_session_describe(s, &bi) == DP_OK ? bi.ffn_act : "?");
    }
    if (d->check_finite) {
        /* every point of every layer (attention weights are large: only when asked) */
        f.points = ~0ull & ~(1ull << DP_TP_ATTN_SCORES);
        if (d->debug) f.points |= d->points;
    } else {
        f.points = d->points;
        if (d->ffn) f.points |= 1ull << DP_TP_ACT | 1ull << DP_TP_DOWN;
        f.layers = d->layers;
        f.n_layers = in->n_layer;
    }
    g_ctx.d = d;
    g_ctx.n_head = in->n_head;
    if (dp_session_set_trace(s, on_trace, &g_ctx, &f)) cli_die_lib(DP_ERR_NOMEM);
}

int debug_wants_logits(const debug_opts *d) { return d->n_track || d->top_k_print; }

void debug_step(debug_opts *d, const dp_model *m, const float *logits, int step) {
    if (!debug_wants_logits(d) || !logits) return;
    const dp_model_info *in = dp_model_get_info(m);
    int V = in->n_vocab;
    double mx = -INFINITY, mn = INFINITY, sum = 0;
    for (int i = 0; i < V; i++) {
        if (logits[i] > mx) mx = logits[i];
        if (logits[i] < mn) mn = logits[i];
        sum += logits[i];
    }
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(logits[i] - mx);
    char piece[128];
    for (int k = 0; k < d->n_track; k++) {
        int32_t t = d->track_id[k];
        int rank = 1;
        for (int i = 0; i < V; i++) rank += logits[i] > logits[t] || (logits[i] == logits[t] && i < t);
        int n = dp_token_to_bytes(m, t, 1, piece, sizeof piece - 1);
        piece[n < 0 ? 0 : n > (int)sizeof piece - 1 ? (int)sizeof piece - 1 : n] = 0;
        cli_log(LOG_SAMPLER, "step=%d track token=%d '%s' logit=%.6g p=%.6g rank=%d", step, t, piece, logits[t],
                exp(logits[t] - mx) / z, rank);
    }
    if (d->top_k_print) {
        int K = d->top_k_print < V ? d->top_k_print : V;
        int *best = malloc(sizeof(int) * (size_t)K);
        int nb = 0;
        for (int i = 0; i < V; i++) {
            int j = nb < K ? nb++ : K;
            if (j == K) {
                if (logits[i] <= logits[best[K - 1]]) continue;
                j = K - 1;
            }
            while (j > 0 && logits[best[j - 1]] < logits[i]) {
                best[j] = best[j - 1];
                j--;
            }
            best[j] = i;
        }
        cli_log(LOG_SAMPLER, "step=%d logits min=%.6g max=%.6g mean=%.6g", step, mn, mx, sum / V);
        for (int k = 0; k < nb; k++) {
            int n = dp_token_to_bytes(m, best[k], 1, piece, sizeof piece - 1);
            piece[n < 0 ? 0 : n > (int)sizeof piece - 1 ? (int)sizeof piece - 1 : n] = 0;
            for (char *p = piece; *p; p++)
                if (*p == '\n') *p = ' ';
            cli_log(LOG_SAMPLER, "step=%d top%d token=%d '%s' logit=%.6g p=%.6g", step, k + 1, best[k], piece,
                    logits[best[k]], exp(logits[best[k]] - mx) / z);
        }
        free(best);
    }
}

void debug_report_stop(debug_opts *d) {
    char L[16];
    if (d->bad_layer >= 0) snprintf(L, sizeof L, "%d", d->bad_layer);
    else snprintf(L, sizeof L, "-");
    cli_log(LOG_PIPELINE, "first non-finite value: layer %s point %s pos %d seq %d index %d value %g", L,
            dp_trace_point_name(d->bad_point), d->bad_pos, d->bad_seq, d->bad_index, d->bad_value);
    cli_die(EXIT_RUNTIME, "--check-finite: non-finite value at layer %s point %s pos %d seq %d (index %d = %g)", L,
            dp_trace_point_name(d->bad_point), d->bad_pos, d->bad_seq, d->bad_index, d->bad_value);
}

void debug_free(debug_opts *d) {
    free(d->layers_arg);
    free(d->layers);
    free(d->pos_list);
    free(d->ffn_rows);
}
