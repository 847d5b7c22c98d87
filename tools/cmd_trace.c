/* doppler trace dump | compare: capture named hidden states to a file and
 * find the first place where two runs diverge. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "debug.h"
#include "interrupt.h"
#include "trace_io.h"

/* ------------------------------------------------------------------ dump */

typedef struct {
    trace_set set;
    debug_opts *d;
} dump_ctx;

static int on_dump(void *user, const dp_trace_event *ev) {
    dump_ctx *c = user;
    const debug_opts *d = c->d;
    if (cli_interrupted()) return 1; /* dp_eval stops with DP_ERR_STOPPED */
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

/* Token ids "1,2,3" (at most max_id when max_id >= 0) into *out; the count,
 * or -1 with why. */
static int parse_ids(const char *v, int max_id, int32_t **out, char *err, size_t errlen) {
    int n = 0, cap = 64;
    int32_t *t = out ? malloc(sizeof(int32_t) * (size_t)cap) : NULL;
    for (const char *p = v;;) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || (*end && *end != ',') || x < 0 || (max_id >= 0 && x > max_id) || x > INT32_MAX) {
            free(t);
            if (max_id >= 0) snprintf(err, errlen, "expects comma-separated ids in [0, %d], got '%s'", max_id, v);
            else snprintf(err, errlen, "expects comma-separated token ids, got '%s'", v);
            return -1;
        }
        if (out) {
            if (n == cap) {
                int32_t *nt = realloc(t, sizeof(int32_t) * (size_t)(cap *= 2));
                if (!nt) cli_die(EXIT_RUNTIME, "out of memory");
                t = nt;
            }
            t[n] = (int32_t)x;
        }
        n++;
        if (!*end) break;
        p = end + 1;
    }
    if (out) *out = t;
    return n;
}

int trace_check_ids(const char *v, char *err, size_t errlen) { return parse_ids(v, -1, NULL, err, errlen) < 0; }

/* Above this size, trace dump says how large the file will be and shows its
 * progress while writing. */
#define DUMP_LARGE (100ull * 1000 * 1000)

static int on_write(void *user, uint64_t done, uint64_t total) {
    int *last = user;
    int pct = (int)(100 * done / total);
    if (pct / 10 != *last / 10 || done == total) {
        fprintf(stderr, "trace dump: %3d%% (%.0f of %.0f MB)\n", pct, done / 1e6, total / 1e6);
        *last = pct;
    }
    return cli_interrupted();
}

static const char *DUMP_USAGE =
    "usage: doppler trace dump [-m FILE] (-p TEXT | -f FILE | --tokens ID,ID,...) [-n N] [options] -o FILE.trace\n\n"
    "Runs the prompt (and N decode steps) and writes the selected trace points as full float32\n"
    "tensors with a JSON index (format: docs/trace-format.md).";

static int trace_dump(int argc, char **argv) {
    const cli_args *A = cli_parse(C_DUMP, "trace dump", DUMP_USAGE, argc, argv);
    cli_interrupt_install(); /* from here on Ctrl-C stops the work at the next check */
    cli_positionals(A, 0, 0, "");
    const char *prompt = arg_str(A, O_PROMPT), *out = arg_str(A, O_OUTPUT), *tok_arg = arg_str(A, O_TOKENS);
    const char *file = arg_str(A, O_FILE);
    int n_gen = arg_int(A, O_N_PREDICT);
    if (!out) cli_die(EXIT_BADINPUT, "trace dump: no output file (-o FILE.trace)");
    if (!!prompt + !!tok_arg + !!file != 1)
        cli_die(EXIT_BADINPUT, "trace dump: give exactly one of -p TEXT, -f FILE or --tokens LIST");
    debug_opts d;
    debug_from_args(&d, A);
    /* the output first: an unusable path fails before the model runs */
    dp_outfile *of = dp_outfile_open(out);
    if (!of) cli_die_lib(DP_ERR_IO);
    if (!d.points_set) d.points = ~0ull & ~(1ull << DP_TP_ATTN_SCORES) & ((1ull << DP_TP_COUNT) - 1);
    d.points_set = 1;
    dp_sampler_params smp;
    cli_sampler_from_args(A, &smp);
    dp_model *m = cli_load_model(arg_str(A, O_MODEL));
    debug_resolve(&d, m);
    const dp_model_info *in = dp_model_get_info(m);

    int n_tok = 0;
    int32_t *toks = NULL;
    char err[512];
    if (tok_arg) {
        if ((n_tok = parse_ids(tok_arg, in->n_vocab - 1, &toks, err, sizeof err)) < 0)
            cli_die(EXIT_BADINPUT, "--tokens %s", err);
    } else {
        size_t len = prompt ? strlen(prompt) : 0;
        char *text = file ? cli_read_file(file, &len) : NULL;
        int cap = 0;
        n_tok = cli_tokenize(m, text ? text : prompt, len, !arg_flag(A, O_NO_BOS), arg_flag(A, O_PARSE_SPECIAL), &toks,
                             &cap);
        free(text);
    }
    if (n_tok == 0) cli_die(EXIT_BADINPUT, "trace dump: the prompt produced no tokens");
    int32_t *nt = realloc(toks, sizeof(int32_t) * (size_t)(n_tok + n_gen));
    if (!nt) cli_die(EXIT_RUNTIME, "out of memory");
    toks = nt;
    dp_session_params sp;
    cli_session_from_args(A, &sp, in);
    dp_session *s = dp_session_new(m, &sp);
    if (!s) cli_die_lib(DP_ERR_BACKEND);
    cli_log_session(s);
    if (n_tok + n_gen > dp_session_ctx(s))
        cli_die(EXIT_BADINPUT, "prompt (%d tokens) + %d steps exceed the context %d", n_tok, n_gen, dp_session_ctx(s));
    dump_ctx c = {.d = &d};
    dp_trace_filter f = {.points = d.points, .layers = d.layers, .n_layers = in->n_layer};
    if (dp_session_set_trace(s, on_dump, &c, &f)) cli_die_lib(DP_ERR_NOMEM);
    dp_sampler *smpl = dp_sampler_new(&smp, in->n_vocab);
    if (!smpl) cli_die_lib(DP_ERR_ARG);
    for (int i = 0; i < n_tok; i++) dp_sampler_accept(smpl, toks[i]);
    cli_log_seed(A, &smp);
    int total = n_tok, rc = dp_eval(s, toks, n_tok);
    for (int k = 0; k < n_gen && !rc; k++) {
        int32_t next = dp_sampler_sample(smpl, dp_logits(s, -1));
        dp_sampler_accept(smpl, next);
        toks[total++] = next;
        rc = dp_eval(s, &next, 1);
    }
    int result = 0;
    if (rc == DP_ERR_STOPPED && cli_interrupted()) {
        cli_log(LOG_STATS, "interrupted after %d of %d tokens; %s not written", dp_session_pos(s), n_tok + n_gen, out);
        result = EXIT_INTERRUPTED;
        goto done;
    }
    if (rc) cli_die_lib(rc);
    char points[2048] = "";
    for (int p = 0; p < DP_TP_COUNT; p++)
        if ((d.points >> p) & 1) {
            strcat(points, *points ? "," : "");
            strcat(points, dp_trace_point_name(p));
        }
    c.set.meta_json = strdup(points);
    c.set.faults = strdup(in->faults ? in->faults : "");
    c.set.has_sampler = 1;
    c.set.n_prompt = n_tok;
    c.set.temp = smp.temp;
    c.set.seed = smp.seed;
    int last_pct = -100;
    uint64_t bytes = c.set.blob_len * sizeof(float);
    if (bytes > DUMP_LARGE) {
        cli_note(LOG_STATS, "writing %s: %.0f MB (%d entries)", out, bytes / 1e6, c.set.n);
        c.set.progress = on_write;
        c.set.progress_user = &last_pct;
    }
    rc = trace_set_write(&c.set, of, arg_str(A, O_MODEL) ? arg_str(A, O_MODEL) : cli_default_model(),
                         dp_session_backend(s), toks, total);
    if (rc == TRACE_CANCELLED) {
        dp_outfile_abort(of);
        of = NULL;
        cli_log(LOG_STATS, "interrupted while writing; %s left as it was", out);
        result = EXIT_INTERRUPTED;
    } else {
        if (rc) cli_die(EXIT_RUNTIME, "out of memory writing %s", out);
        rc = dp_outfile_commit(of);
        of = NULL;
        if (rc) cli_die_lib(rc);
        cli_log(LOG_STATS, "wrote %s: %d entries, %.1f MB, %d tokens (%d prompt + %d generated)", out, c.set.n,
                bytes / 1e6, total, n_tok, n_gen);
    }
done:
    dp_outfile_abort(of);
    trace_set_free(&c.set);
    dp_sampler_free(smpl);
    dp_session_free(s);
    dp_model_free(m);
    free(toks);
    debug_free(&d);
    return result;
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

static const char *COMPARE_USAGE =
    "usage: doppler trace compare A.trace B.trace [--tol T] [--quiet]\n\n"
    "For every point of A in forward order (with B as the reference): rel-L2 = |A-B|/|B|, cosine,\n"
    "maxAbs ratio max|A|/max|B|, and the largest absolute difference and where. Then one line\n"
    "'first divergence: layer L point P pos N rel-L2 X' for the first position whose rel-L2 exceeds\n"
    "the tolerance, or 'no divergence'. Points that B never recorded are skipped. Traces of different\n"
    "token ids are refused. Exit code: 0 no divergence, 1 divergence, 2 bad input.";

/* Traces of different prompts cannot be compared position by position:
 * exits 2 naming the first position where the ids differ. Generated tokens
 * may differ (a divergence changes what is decoded): returns the first
 * such position, where the comparison stops, or INT32_MAX. */
static int check_tokens(const trace_set *A, const trace_set *B, const char *pa, const char *pb) {
    if (!A->tokens || !B->tokens) return INT32_MAX;
    int n = A->n_tokens < B->n_tokens ? A->n_tokens : B->n_tokens;
    for (int i = 0; i < n; i++) {
        if (A->tokens[i] == B->tokens[i]) continue;
        if (i < A->n_prompt && i < B->n_prompt)
            cli_die(EXIT_BADINPUT, "trace compare: %s and %s are traces of different tokens: position %d holds %d "
                    "in A and %d in B", pa, pb, i, A->tokens[i], B->tokens[i]);
        return i;
    }
    return INT32_MAX;
}

static int trace_compare(int argc, char **argv) {
    const cli_args *Args = cli_parse(C_COMPARE, "trace compare", COMPARE_USAGE, argc, argv);
    cli_positionals(Args, 2, 2, "two trace files (A.trace B.trace)");
    const char *pa = Args->pos[0], *pb = Args->pos[1];
    double tol = arg_float(Args, O_TOL);
    int quiet = arg_flag(Args, O_QUIET);
    trace_set A, B;
    char err[512];
    if (trace_set_read(&A, pa, err, sizeof err)) cli_die(EXIT_BADINPUT, "%s", err);
    if (trace_set_read(&B, pb, err, sizeof err)) cli_die(EXIT_BADINPUT, "%s", err);
    const int limit = check_tokens(&A, &B, pa, pb);
    /* a fault injected on purpose explains a divergence: say so first */
    if (A.faults && *A.faults) printf("A was traced with DOPPLER_FAULT=%s\n", A.faults);
    if (B.faults && *B.faults) printf("B was traced with DOPPLER_FAULT=%s\n", B.faults);

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
        int mdpos = 0, mdidx = 0, rows = 0, row_bad = -1, dim_mismatch = 0, missing = 0, beyond = 0;
        double row_bad_rel = 0;
        for (int r = 0; r < ea->n_pos; r++) {
            int pos = ea->pos0 + r;
            if (pos >= limit) { /* another token there */
                beyond++;
                continue;
            }
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
        if (!rows && beyond) continue;
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
    if (limit != INT32_MAX) {
        printf("the generated token at pos %d differs (A %d, B %d): later positions were not compared\n", limit,
               A.tokens[limit], B.tokens[limit]);
        if (!diverged)
            snprintf(first, sizeof first, "first divergence: the generated token at pos %d (A %d, B %d)", limit,
                     A.tokens[limit], B.tokens[limit]);
        diverged = 1;
    }
    printf("%s\n", diverged ? first : "no divergence");
    trace_set_free(&A);
    trace_set_free(&B);
    return diverged ? 1 : 0;
}

int cmd_trace(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "dump")) return trace_dump(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "compare")) return trace_compare(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: doppler trace dump ... | doppler trace compare A.trace B.trace\n\n"
               "'doppler trace dump --help' and 'doppler trace compare --help' describe the options.\n");
        return 0;
    }
    if (argc < 2) cli_die(EXIT_BADINPUT, "trace: give a subcommand: dump or compare");
    cli_die(EXIT_BADINPUT, "trace: unknown subcommand '%s' (dump or compare)", argv[1]);
}
