/* doppler trace dump | compare: capture named hidden states to a file and
 * find the first place where two runs diverge. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "debug.h"
#include "trace_io.h"

/* ------------------------------------------------------------------ dump */

typedef struct {
    trace_set set;
    debug_opts *d;
} dump_ctx;

static int on_dump(void *user, const dp_trace_event *ev) {
    dump_ctx *c = user;
    const debug_opts *d = c->d;
    if (d->pos_all) {
        if (trace_set_add(&c->set, ev)) cli_die(EXIT_RUNTIME, "out of memory while tracing");
        return 0;
    }
    for (int r = 0; r < ev->n_pos; r++) {
        int pos = ev->pos0 + r, take = 0;
        if (!d->n_pos_list) take = r == ev->n_pos - 1;
        for (int k = 0; k < d->n_pos_list; k++) take |= d->pos_list[k] == pos;
        if (!take) continue;
        dp_trace_event one = *ev;
        one.pos0 = pos;
        one.n_pos = 1;
        one.data = ev->data + (size_t)r * (size_t)ev->dim;
        if (trace_set_add(&c->set, &one)) cli_die(EXIT_RUNTIME, "out of memory while tracing");
    }
    return 0;
}

static void dump_usage(void) {
    printf("usage: doppler trace dump [-m FILE] (-p TEXT | --tokens ID,ID,...) [-n N] [selectors] -o FILE.trace\n\n"
           "Runs the prompt (and N greedy decode steps) and writes the selected trace points as full float32\n"
           "tensors with a JSON index (format: docs/trace-format.md).\n\n"
           "  -m, --model FILE       GGUF model (default: the default model)\n"
           "  -p, --prompt TEXT      prompt text\n"
           "  --tokens LIST          token ids instead of text\n"
           "  -n N                   greedy decode steps after the prompt (default 0)\n"
           "  --debug-points LIST    points (default: all except attn_scores)\n"
           "  --debug-layers LIST    layers (default: all)\n"
           "  --debug-pos SEL        all (default), last, or N,M\n"
           "  --no-bos, --special    tokenizer options as for run\n"
           "  --backend cpu|cuda     compute backend\n"
           "  -o FILE                output file\n");
}

static int trace_dump(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *out = NULL, *tok_arg = NULL;
    int n_gen = 0, add_bos = 1, special = 0;
    debug_opts d = {0};
    d.pos_all = 1;
    dp_session_params sp;
    dp_session_params_default(&sp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { dump_usage(); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--tokens")) tok_arg = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-n")) n_gen = cli_int(a, cli_value(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "-o")) out = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--no-bos")) add_bos = 0;
        else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "--ctx")) sp.n_ctx = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 24);
        else if (!strcmp(a, "--backend")) sp.backend = cli_backend(cli_value(argc, argv, &i), 0);
        else if (!strcmp(a, "--debug-points") || !strcmp(a, "--debug-layers") || !strcmp(a, "--debug-pos"))
            debug_parse(&d, argc, argv, &i);
        else if (!strcmp(a, "--log-tags")) cli_set_log_tags(cli_value(argc, argv, &i));
        else if (!strcmp(a, "--verbose")) cli_verbose = 1;
        else cli_die(EXIT_BADINPUT, "trace dump: unknown option '%s'", a);
    }
    if (!out) cli_die(EXIT_BADINPUT, "trace dump: no output file (-o FILE.trace)");
    if (!prompt == !tok_arg) cli_die(EXIT_BADINPUT, "trace dump: give exactly one of -p TEXT or --tokens LIST");
    /* the output first: an unusable path fails before the model runs */
    dp_outfile *of = dp_outfile_open(out);
    if (!of) cli_die_lib(DP_ERR_IO);
    if (!d.points_set) d.points = ~0ull & ~(1ull << DP_TP_ATTN_SCORES) & ((1ull << DP_TP_COUNT) - 1);
    d.points_set = 1;
    dp_model *m = cli_load_model(model);
    debug_resolve(&d, m);
    const dp_model_info *in = dp_model_get_info(m);

    int cap = 1024, n_tok = 0;
    int32_t *toks = malloc(sizeof(int32_t) * (size_t)cap);
    if (tok_arg) {
        for (const char *p = tok_arg; *p;) {
            char *end;
            long v = strtol(p, &end, 10);
            if (end == p || (*end && *end != ',') || v < 0 || v >= in->n_vocab)
                cli_die(EXIT_BADINPUT, "--tokens expects comma-separated ids in [0, %d), got '%s'", in->n_vocab, tok_arg);
            if (n_tok == cap) toks = realloc(toks, sizeof(int32_t) * (size_t)(cap *= 2));
            toks[n_tok++] = (int32_t)v;
            p = *end ? end + 1 : end;
        }
    } else {
        n_tok = cli_tokenize(m, prompt, strlen(prompt), add_bos, special, &toks, &cap);
    }
    if (n_tok == 0) cli_die(EXIT_BADINPUT, "trace dump: the prompt produced no tokens");
    dp_session *s = dp_session_new(m, &sp);
    if (!s) cli_die_lib(DP_ERR_BACKEND);
    cli_log_session(s);
    if (n_tok + n_gen > dp_session_ctx(s))
        cli_die(EXIT_BADINPUT, "prompt (%d tokens) + %d steps exceed the context %d", n_tok, n_gen, dp_session_ctx(s));
    dump_ctx c = {.d = &d};
    dp_trace_filter f = {.points = d.points, .layers = d.layers, .n_layers = in->n_layer};
    if (dp_session_set_trace(s, on_dump, &c, &f)) cli_die_lib(DP_ERR_NOMEM);
    int rc = dp_eval(s, toks, n_tok);
    if (rc) cli_die_lib(rc);
    int total = n_tok;
    for (int k = 0; k < n_gen; k++) {
        const float *lg = dp_logits(s, -1);
        int32_t best = 0;
        for (int v = 1; v < in->n_vocab; v++)
            if (lg[v] > lg[best]) best = v;
        if (total == cap) toks = realloc(toks, sizeof(int32_t) * (size_t)(cap *= 2));
        toks[total++] = best;
        rc = dp_eval(s, &best, 1);
        if (rc) cli_die_lib(rc);
    }
    char points[2048] = "";
    for (int p = 0; p < DP_TP_COUNT; p++)
        if ((d.points >> p) & 1) {
            strcat(points, *points ? "," : "");
            strcat(points, dp_trace_point_name(p));
        }
    c.set.meta_json = strdup(points);
    if (trace_set_write(&c.set, of, model ? model : cli_default_model(), dp_session_backend(s), toks, total))
        cli_die(EXIT_RUNTIME, "out of memory writing %s", out);
    rc = dp_outfile_commit(of);
    if (rc) cli_die_lib(rc);
    cli_log(LOG_STATS, "wrote %s: %d entries, %.1f MB, %d tokens (%d prompt + %d generated)", out, c.set.n,
            c.set.blob_len * 4 / 1e6, total, n_tok, n_gen);
    trace_set_free(&c.set);
    dp_session_free(s);
    dp_model_free(m);
    free(toks);
    debug_free(&d);
    return 0;
}

/* --------------------------------------------------------------- compare */

static int point_order(const char *name) {
    int p = dp_trace_point_lookup(name);
    return p < 0 ? DP_TP_COUNT : p;
}

/* Finds B's entry with the same point and layer covering position pos. */
static const trace_entry *find_entry(const trace_set *b, const char *point, int layer, int pos) {
    for (int i = 0; i < b->n; i++) {
        const trace_entry *e = &b->e[i];
        if (e->layer == layer && !strcmp(e->point, point) && pos >= e->pos0 && pos < e->pos0 + e->n_pos) return e;
    }
    return NULL;
}

/* Whether B recorded this point at all, or at least selected it (then its
 * absence is itself a divergence: the run never produced it). */
static int has_point(const trace_set *b, const char *point, int *selected_only) {
    *selected_only = 0;
    for (int i = 0; i < b->n; i++)
        if (!strcmp(b->e[i].point, point)) return 1;
    if (b->meta_json) {
        size_t n = strlen(point);
        for (const char *p = b->meta_json; (p = strstr(p, point)); p += n)
            if ((p == b->meta_json || p[-1] == ',') && (p[n] == ',' || !p[n])) {
                *selected_only = 1;
                return 1;
            }
    }
    return 0;
}

static void compare_usage(void) {
    printf("usage: doppler trace compare A.trace B.trace [--tol T] [--quiet]\n\n"
           "For every point of A in forward order (with B as the reference): rel-L2 = |A-B|/|B|, cosine,\n"
           "maxAbs ratio max|A|/max|B|, and the largest absolute difference and where. Then one line\n"
           "'first divergence: layer L point P pos N rel-L2 X' for the first position whose rel-L2 exceeds\n"
           "the tolerance (default 1e-3), or 'no divergence'. Points that B never recorded are skipped.\n"
           "Exit code: 0 no divergence, 1 divergence, 2 bad input.\n");
}

static int trace_compare(int argc, char **argv) {
    const char *pa = NULL, *pb = NULL;
    double tol = 1e-3;
    int quiet = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { compare_usage(); return 0; }
        else if (!strcmp(a, "--tol")) tol = cli_float(a, cli_value(argc, argv, &i), 0, 1e30);
        else if (!strcmp(a, "--quiet")) quiet = 1;
        else if (a[0] == '-' && a[1]) cli_die(EXIT_BADINPUT, "trace compare: unknown option '%s'", a);
        else if (!pa) pa = a;
        else if (!pb) pb = a;
        else cli_die(EXIT_BADINPUT, "trace compare: give exactly two trace files");
    }
    if (!pa || !pb) cli_die(EXIT_BADINPUT, "trace compare: give two trace files (A.trace B.trace)");
    trace_set A, B;
    char err[512];
    if (trace_set_read(&A, pa, err, sizeof err)) cli_die(EXIT_BADINPUT, "%s", err);
    if (trace_set_read(&B, pb, err, sizeof err)) cli_die(EXIT_BADINPUT, "%s", err);

    if (!quiet)
        printf("%-5s %-15s %-9s %11s %9s %9s %12s  %s\n", "layer", "point", "pos", "rel-L2", "cosine", "maxAbs A/B",
               "max|A-B|", "at pos:index");
    int diverged = 0, compared = 0;
    char first[256] = "";
    for (int i = 0; i < A.n; i++) {
        const trace_entry *ea = &A.e[i];
        int never;
        if (!has_point(&B, ea->point, &never)) continue;
        double num = 0, den = 0, dot = 0, na = 0, ma = 0, mb = 0, md = -1;
        int mdpos = 0, mdidx = 0, rows = 0, row_bad = -1, dim_mismatch = 0, missing = 0;
        double row_bad_rel = 0;
        for (int r = 0; r < ea->n_pos; r++) {
            int pos = ea->pos0 + r;
            const trace_entry *eb = find_entry(&B, ea->point, ea->layer, pos);
            if (!eb) {
                missing++;
                continue;
            }
            if (eb->dim != ea->dim) {
                dim_mismatch = 1;
                continue;
            }
            const float *x = ea->data + (size_t)r * (size_t)ea->dim;
            const float *y = eb->data + (size_t)(pos - eb->pos0) * (size_t)eb->dim;
            double rn = 0, rd = 0;
            for (int k = 0; k < ea->dim; k++) {
                double dx = (double)x[k] - y[k];
                rn += dx * dx;
                rd += (double)y[k] * y[k];
                dot += (double)x[k] * y[k];
                na += (double)x[k] * x[k];
                if (fabs(x[k]) > ma) ma = fabs(x[k]);
                if (fabs(y[k]) > mb) mb = fabs(y[k]);
                if (fabs(dx) > md || isnan(dx)) {
                    md = isnan(dx) ? INFINITY : fabs(dx);
                    mdpos = pos;
                    mdidx = k;
                }
            }
            num += rn;
            den += rd;
            rows++;
            double rel = rd > 0 ? sqrt(rn / rd) : sqrt(rn);
            if (isnan(rel)) rel = INFINITY;
            if (row_bad < 0 && rel > tol) {
                row_bad = pos;
                row_bad_rel = rel;
            }
        }
        char L[16], P[32];
        if (ea->layer >= 0) snprintf(L, sizeof L, "%d", ea->layer);
        else snprintf(L, sizeof L, "-");
        if (ea->n_pos > 1) snprintf(P, sizeof P, "%d-%d", ea->pos0, ea->pos0 + ea->n_pos - 1);
        else snprintf(P, sizeof P, "%d", ea->pos0);
        if (dim_mismatch) {
            if (!quiet) printf("%-5s %-15s %-9s  dimension differs between A and B\n", L, ea->point, P);
            if (!diverged)
                snprintf(first, sizeof first, "first divergence: layer %s point %s pos %d (dimension differs)", L,
                         ea->point, ea->pos0);
            diverged = 1;
            continue;
        }
        if (!rows) {
            if (!quiet) printf("%-5s %-15s %-9s  not in B%s\n", L, ea->point, P, never ? " (B selected it but never produced it)" : "");
            if (never && !diverged) {
                diverged = 1;
                snprintf(first, sizeof first, "first divergence: layer %s point %s pos %d (missing in B)", L,
                         ea->point, ea->pos0);
            }
            continue;
        }
        compared++;
        double rel = den > 0 ? sqrt(num / den) : sqrt(num);
        double cosv = na > 0 && den > 0 ? dot / sqrt(na * den) : (na == den ? 1.0 : 0.0);
        if (!quiet)
            printf("%-5s %-15s %-9s %11.3e %9.6f %10.4f %12.4g  %d:%d%s\n", L, ea->point, P, rel, cosv,
                   mb > 0 ? ma / mb : (ma > 0 ? INFINITY : 1.0), md, mdpos, mdidx,
                   missing ? "  (some positions not in B)" : "");
        if (row_bad >= 0 && !diverged) {
            diverged = 1;
            snprintf(first, sizeof first, "first divergence: layer %s point %s pos %d rel-L2 %.3e", L, ea->point,
                     row_bad, row_bad_rel);
        }
    }
    (void)point_order;
    if (!compared) cli_die(EXIT_BADINPUT, "trace compare: the two traces share no points and positions");
    printf("%s\n", diverged ? first : "no divergence");
    trace_set_free(&A);
    trace_set_free(&B);
    return diverged ? 1 : 0;
}

int cmd_trace(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("usage: doppler trace dump ... | doppler trace compare A.trace B.trace\n");
        return argc < 2 ? EXIT_BADINPUT : 0;
    }
    if (!strcmp(argv[1], "dump")) return trace_dump(argc - 1, argv + 1);
    if (!strcmp(argv[1], "compare")) return trace_compare(argc - 1, argv + 1);
    cli_die(EXIT_BADINPUT, "trace: unknown subcommand '%s' (dump or compare)", argv[1]);
}
