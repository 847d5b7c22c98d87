/* doppler verify: is the GPU backend computing what the CPU computes?
 *
 *  1. Per-op checks of the CUDA kernels on fresh random inputs
 *     (verify/ops.cu: dequantisation exact, matvec/attention rel-L2 <= 1e-3).
 *  2. With -m: a full trace compare, CPU vs CUDA, on a random prompt and a
 *     few decode steps, for each prompt length asked for (by default a
 *     short one and a longer one: a session of one multiplies a prompt of
 *     a few tokens with k_mmv and a longer one with GEMMs on the f16
 *     copies, so each path is checked): every point at every layer within
 *     rel-L2 1e-2, and no CUDA trace that is all zeros where the CPU's is
 *     not.
 *  3. With -m: teacher-forced greedy decoding along the CPU's greedy run:
 *     at every step the CUDA logits of the CPU's 32 best tokens within
 *     rel-L2 1e-2 of the CPU's, and the CUDA top-1 equal to the CPU top-1,
 *     except where the CPU's margin between the two is within what the
 *     step's measured logit error can swap: twice the largest error, one
 *     logit up and the other down (a near-tie, counted and reported). The device
 *     sampler (argmax fused into the LM head, only the id comes back) must
 *     pick the argmax of the CUDA logits at every step.
 * The CPU's greedy run can be computed once elsewhere (--save-ref) and
 * replayed (--ref) when the CPU is too slow for full-size models on the GPU
 * machine; the model file must then be identical (checked by size and a
 * hash of its first and last 16 MiB). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "verify/ops.h"

enum { TOPK = 32, MAX_EVALS = 64, MAX_PROMPTS = 4 };

typedef struct {
    const char *model, *save_ref, *ref;
    uint64_t seed;
    int speed, ops, decode_n, greedy_n, backend_cpu;
    int prompt_n[MAX_PROMPTS], n_prompts; /* the trace compares' prompt lengths; the greedy run takes the first */
} verify_opts;

static const char *USAGE =
    "usage: doppler verify [-m FILE] [options]\n\n"
    "Checks the CUDA backend against the CPU backend: per-op checks of every kernel on fresh random\n"
    "inputs, then (with -m) a full trace compare and a teacher-forced greedy comparison on a model.\n"
    "--backend cpu only makes sense with --save-ref; auto means cuda here.";

/* ------------------------------------------------------------ helpers */

/* The prompt lengths of --prompt-tokens into out[MAX_PROMPTS] (out may be NULL). */
static int parse_lengths(const char *v, int *out, char *err, size_t errlen) {
    return cli_parse_ints(v, 1, 4096, out, MAX_PROMPTS, "prompt lengths", err, errlen);
}

int verify_check_lengths(const char *v, char *err, size_t errlen) {
    return parse_lengths(v, NULL, err, errlen) < 0 ? -1 : 0;
}

static uint64_t g_rng;
static uint64_t rnd(void) {
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return g_rng;
}

/* n random token ids below V, malloc'ed. */
static int32_t *random_prompt(int n, int V) {
    int32_t *t = malloc(sizeof(int32_t) * (size_t)n);
    if (!t) cli_die(EXIT_RUNTIME, "out of memory");
    for (int i = 0; i < n; i++) t[i] = (int32_t)(rnd() % (uint64_t)V);
    return t;
}

static int all_zero(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (a[i] != 0.0f) return 0;
    return 1;
}

static uint64_t file_hash(const char *path, uint64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) cli_die(EXIT_BADINPUT, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    *size = (uint64_t)n;
    uint64_t h = 1469598103934665603ull;
    const long chunk = 16L << 20;
    unsigned char *buf = malloc((size_t)chunk);
    long starts[2] = {0, n > chunk ? n - chunk : 0};
    for (int k = 0; k < 2; k++) {
        fseek(f, starts[k], SEEK_SET);
        size_t got = fread(buf, 1, (size_t)chunk, f);
        for (size_t i = 0; i < got; i++) h = (h ^ buf[i]) * 1099511628211ull;
    }
    free(buf);
    fclose(f);
    return h;
}

/* A session of n_ctx positions that takes the whole context in one batch,
 * so that a prompt is one evaluation (one trace event per point) on both
 * backends. */
static dp_session *new_session(dp_model *m, dp_backend be, int n_ctx) {
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = be;
    sp.n_ctx = n_ctx;
    sp.n_batch = n_ctx;
    dp_session *s = dp_session_new(m, &sp);
    if (!s) cli_die_lib(DP_ERR_BACKEND);
    return s;
}

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

/* ------------------------------------------------------ trace compare */

typedef struct {
    int n_layer, eval;
    float *cpu[MAX_EVALS][DP_TP_COUNT];   /* [eval][point] -> (n_layer+1) slots of data */
    size_t len[MAX_EVALS][DP_TP_COUNT];   /* floats per layer slot */
    float **slot[MAX_EVALS][DP_TP_COUNT];
    double worst[DP_TP_COUNT];
    double worst_in[2][DP_TP_COUNT]; /* the prompt's evaluation, the decode steps' */
    int worst_layer[DP_TP_COUNT], count[DP_TP_COUNT], zeros[DP_TP_COUNT], missing;
} trace_cmp;

static int on_cpu(void *user, const dp_trace_event *ev) {
    trace_cmp *c = user;
    size_t n = (size_t)ev->n_pos * ev->dim;
    float ***sl = &c->slot[c->eval][ev->point];
    if (!*sl) *sl = calloc((size_t)c->n_layer + 1, sizeof(float *));
    float *copy = malloc(n * sizeof(float) + 4);
    memcpy(copy, ev->data, n * sizeof(float));
    (*sl)[ev->layer + 1] = copy;
    c->len[c->eval][ev->point] = n;
    return 0;
}

static int on_cuda(void *user, const dp_trace_event *ev) {
    trace_cmp *c = user;
    size_t n = (size_t)ev->n_pos * ev->dim;
    float **sl = c->slot[c->eval][ev->point];
    const float *ref = sl ? sl[ev->layer + 1] : NULL;
    if (!ref || c->len[c->eval][ev->point] != n) {
        c->missing++;
        return 0;
    }
    double e = dp_rel_l2(ev->data, ref, n);
    int p = ev->point;
    c->count[p]++;
    if (all_zero(ev->data, n) && !all_zero(ref, n)) c->zeros[p]++;
    double *wk = &c->worst_in[c->eval > 0][p];
    if (!(e <= *wk)) *wk = e;
    if (!(e <= c->worst[p])) {
        c->worst[p] = e;
        c->worst_layer[p] = ev->layer;
    }
    return 0;
}

static int trace_compare(dp_model *m, const int32_t *toks, int P, int D) {
    const dp_model_info *in = dp_model_get_info(m);
    trace_cmp *c = calloc(1, sizeof *c);
    c->n_layer = in->n_layer;
    dp_trace_filter f = {.points = ~0ull};
    int n_ctx = P + D + 4;
    dp_session *cpu = new_session(m, DP_BACKEND_CPU, n_ctx), *gpu = new_session(m, DP_BACKEND_CUDA, n_ctx);
    dp_session_set_trace(cpu, on_cpu, c, &f);
    dp_session_set_trace(gpu, on_cuda, c, &f);
    int32_t seq[MAX_EVALS];
    double t0 = dp_time_s();
    /* CPU: the prompt, then greedy decode steps; CUDA: the same inputs */
    c->eval = 0;
    if (dp_eval(cpu, toks, P)) cli_die_lib(DP_ERR_BACKEND);
    seq[0] = argmax(dp_logits(cpu, -1), in->n_vocab);
    for (int i = 1; i <= D; i++) {
        c->eval = i;
        if (dp_eval(cpu, &seq[i - 1], 1)) cli_die_lib(DP_ERR_BACKEND);
        seq[i] = argmax(dp_logits(cpu, -1), in->n_vocab);
    }
    double t1 = dp_time_s();
    c->eval = 0;
    if (dp_eval(gpu, toks, P)) cli_die_lib(DP_ERR_BACKEND);
    for (int i = 1; i <= D; i++) {
        c->eval = i;
        if (dp_eval(gpu, &seq[i - 1], 1)) cli_die_lib(DP_ERR_BACKEND);
    }
    double t2 = dp_time_s();
    printf("trace compare: %d prompt tokens + %d decode steps, all points, all layers (CPU %.1f s, CUDA %.1f s)\n", P,
           D, t1 - t0, t2 - t1);
    /* both worsts: a prompt of two or more rows takes other kernels than
     * the decode steps (its activations and weights rounded to f16) */
    printf("  %-16s %12s %8s %7s %10s %10s\n", "point", "worst rel-L2", "layer", "events", "prompt", "decode");
    int bad = 0, seen = 0;
    for (int p = 0; p < DP_TP_COUNT; p++) {
        if (!c->count[p]) continue;
        seen++;
        int ok = c->worst[p] <= 1e-2 && !c->zeros[p];
        bad += !ok;
        char lay[16];
        if (c->worst_layer[p] < 0) snprintf(lay, sizeof lay, "-");
        else snprintf(lay, sizeof lay, "%d", c->worst_layer[p]);
        char dec[16];
        if (D > 0) snprintf(dec, sizeof dec, "%.2e", c->worst_in[1][p]);
        else snprintf(dec, sizeof dec, "-");
        printf("  %-16s %12.2e %8s %7d %10.2e %10s%s%s\n", dp_trace_point_name(p), c->worst[p], lay, c->count[p],
               c->worst_in[0][p], dec,
               ok ? "" : "  FAIL", c->zeros[p] ? " (all-zero CUDA data)" : "");
    }
    if (c->missing) printf("  %d CUDA trace events had no CPU counterpart\n", c->missing);
    bad += c->missing > 0 || seen == 0;
    printf("%s trace compare CPU vs CUDA: %d points, limit rel-L2 1e-2\n", bad ? "FAIL" : "PASS", seen);
    for (int e = 0; e < MAX_EVALS; e++)
        for (int p = 0; p < DP_TP_COUNT; p++)
            if (c->slot[e][p]) {
                for (int l = 0; l <= c->n_layer; l++) free(c->slot[e][p][l]);
                free(c->slot[e][p]);
            }
    free(c);
    dp_session_free(cpu);
    dp_session_free(gpu);
    return bad;
}

/* ---------------------------------------------------- greedy reference */

typedef struct {
    int32_t top1;
    float gap;            /* CPU top-1 minus top-2 logit */
    int32_t id[TOPK];     /* the CPU's TOPK best, best first */
    float logit[TOPK];
} ref_step;

typedef struct {
    uint64_t file_size, file_hash;
    int32_t n_vocab, n_prompt, n_steps;
    int32_t *prompt;
    ref_step *step;
} greedy_ref;

static void top_k(const float *x, int n, int32_t *id, float *val) {
    for (int k = 0; k < TOPK; k++) id[k] = -1, val[k] = -INFINITY;
    for (int i = 0; i < n; i++) {
        if (!(x[i] > val[TOPK - 1])) continue;
        int k = TOPK - 1;
        while (k > 0 && x[i] > val[k - 1]) {
            val[k] = val[k - 1];
            id[k] = id[k - 1];
            k--;
        }
        val[k] = x[i];
        id[k] = i;
    }
}

static void cpu_greedy(dp_model *m, greedy_ref *r) {
    const int V = dp_model_get_info(m)->n_vocab;
    dp_session *s = new_session(m, DP_BACKEND_CPU, r->n_prompt + r->n_steps + 4);
    r->step = calloc((size_t)r->n_steps, sizeof(ref_step));
    if (dp_eval(s, r->prompt, r->n_prompt)) cli_die_lib(DP_ERR_BACKEND);
    for (int i = 0; i < r->n_steps; i++) {
        ref_step *st = &r->step[i];
        top_k(dp_logits(s, -1), V, st->id, st->logit);
        st->top1 = st->id[0];
        st->gap = st->logit[0] - st->logit[1];
        if (i + 1 < r->n_steps && dp_eval(s, &st->top1, 1)) cli_die_lib(DP_ERR_BACKEND);
    }
    dp_session_free(s);
}

static void save_ref(const char *path, const greedy_ref *r) {
    dp_outfile *f = dp_outfile_open(path);
    if (!f) cli_die_lib(DP_ERR_IO);
    dp_outfile_write(f, "DPVREF1\n", 8);
    dp_outfile_write(f, &r->file_size, 8);
    dp_outfile_write(f, &r->file_hash, 8);
    dp_outfile_write(f, &r->n_vocab, 4);
    dp_outfile_write(f, &r->n_prompt, 4);
    dp_outfile_write(f, &r->n_steps, 4);
    dp_outfile_write(f, r->prompt, 4 * (size_t)r->n_prompt);
    dp_outfile_write(f, r->step, sizeof(ref_step) * (size_t)r->n_steps);
    int rc = dp_outfile_commit(f); /* reports any failed write above */
    if (rc) cli_die_lib(rc);
}

static void load_ref(const char *path, greedy_ref *r) {
    FILE *f = fopen(path, "rb");
    if (!f) cli_die(EXIT_BADINPUT, "cannot open the reference %s", path);
    char magic[8];
    int ok = fread(magic, 1, 8, f) == 8 && !memcmp(magic, "DPVREF1\n", 8) && fread(&r->file_size, 8, 1, f) == 1 &&
             fread(&r->file_hash, 8, 1, f) == 1 && fread(&r->n_vocab, 4, 1, f) == 1 &&
             fread(&r->n_prompt, 4, 1, f) == 1 && fread(&r->n_steps, 4, 1, f) == 1 && r->n_prompt > 0 &&
             r->n_prompt < 1 << 20 && r->n_steps >= 0 && r->n_steps < 1 << 20;
    if (ok) {
        r->prompt = malloc(4 * (size_t)r->n_prompt);
        r->step = malloc(sizeof(ref_step) * (size_t)(r->n_steps ? r->n_steps : 1));
        ok = fread(r->prompt, 4, (size_t)r->n_prompt, f) == (size_t)r->n_prompt &&
             fread(r->step, sizeof(ref_step), (size_t)r->n_steps, f) == (size_t)r->n_steps;
    }
    fclose(f);
    if (!ok) cli_die(EXIT_BADINPUT, "%s is not a doppler verify reference (or it is truncated)", path);
}

/* Teacher-forced CUDA run along the CPU's greedy tokens. */
static int greedy_compare(dp_model *m, const greedy_ref *r) {
    const int V = dp_model_get_info(m)->n_vocab, G = r->n_steps;
    dp_session *s = new_session(m, DP_BACKEND_CUDA, r->n_prompt + G + 4);
    dp_session *d = new_session(m, DP_BACKEND_CUDA, r->n_prompt + G + 4);
    dp_sampler_params sp;
    dp_sampler_params_default(&sp);
    sp.temp = 0;
    sp.repeat_penalty = 1;
    dp_sampler *smp = dp_sampler_new(&sp, V);
    int match = 0, near = 0, fail = 0, dev_bad = 0, far = 0;
    double max_err = 0, sum_err = 0, worst_rel = 0;
    int32_t dev_tok = -1;
    if (dp_eval(s, r->prompt, r->n_prompt)) cli_die_lib(DP_ERR_BACKEND);
    if (dp_eval_sample(d, r->prompt, r->n_prompt, smp, &dev_tok)) cli_die_lib(DP_ERR_BACKEND);
    double t0 = dp_time_s();
    for (int i = 0; i < G; i++) {
        const ref_step *st = &r->step[i];
        const float *lg = dp_logits(s, -1);
        int top = argmax(lg, V);
        double err = 0, se = 0, sr = 0;
        for (int k = 0; k < TOPK; k++)
            if (st->id[k] >= 0) {
                const double e = (double)lg[st->id[k]] - st->logit[k];
                err = fmax(err, fabs(e));
                se += e * e, sr += (double)st->logit[k] * st->logit[k];
            }
        max_err = fmax(max_err, err);
        sum_err += err;
        const double rel = sr > 0 ? sqrt(se / sr) : sqrt(se);
        worst_rel = fmax(worst_rel, rel);
        if (!(rel <= 1e-2)) {
            far++;
            printf("  step %d: the CPU's %d best logits differ by rel-L2 %.3g\n", i, TOPK, rel);
        }
        if (top == st->top1) {
            match++;
        } else {
            /* excused when errors of the size measured, one logit up and the
             * other down, can swap the CPU's two (the CUDA top-1 among its
             * best) */
            float cpu_alt = -INFINITY;
            for (int k = 0; k < TOPK; k++)
                if (st->id[k] == top) cpu_alt = st->logit[k];
            double margin = (double)st->logit[0] - cpu_alt;
            if (margin <= 2 * err) {
                near++;
                printf("  step %d: near-tie, CPU top-1 %d, CUDA top-1 %d, CPU margin %.3g <= twice the error %.3g\n",
                       i, st->top1, top, margin, err);
            } else {
                fail++;
                printf("  step %d: MISMATCH, CPU top-1 %d (gap %.3g), CUDA top-1 %d, error %.3g\n", i, st->top1,
                       st->gap, top, err);
            }
        }
        if (dev_tok != top) {
            dev_bad++;
            printf("  step %d: device sampler picked %d, the CUDA logits' argmax is %d\n", i, dev_tok, top);
        }
        if (i + 1 < G) {
            if (dp_eval(s, &st->top1, 1)) cli_die_lib(DP_ERR_BACKEND);
            if (dp_eval_sample(d, &st->top1, 1, smp, &dev_tok)) cli_die_lib(DP_ERR_BACKEND);
        }
    }
    double dt = dp_time_s() - t0;
    int ok = fail == 0 && dev_bad == 0 && far == 0;
    printf("%s greedy teacher-forced %d steps: %d equal, %d near-ties (CPU gap < twice the CPU-CUDA logit error), %d "
           "mismatches; logit error max %.3g mean %.3g, worst step rel-L2 %.2e (limit 1e-2); device sampler %d/%d steps "
           "equal to the argmax (%.1f s)\n",
           ok ? "PASS" : "FAIL", G, match, near, fail, max_err, G ? sum_err / G : 0.0, worst_rel, G - dev_bad, G, dt);
    dp_sampler_free(smp);
    dp_session_free(s);
    dp_session_free(d);
    return !ok;
}

/* ----------------------------------------------------------------- main */

int cmd_verify(int argc, char **argv) {
    const cli_args *A = cli_parse(C_VERIFY, "verify", USAGE, argc, argv);
    cli_positionals(A, 0, 0, "");
    verify_opts o = {.model = arg_str(A, O_MODEL), .save_ref = arg_str(A, O_SAVE_REF), .ref = arg_str(A, O_REF),
                     .seed = arg_given(A, O_SEED) ? arg_u64(A, O_SEED) : cli_draw_seed(), .speed = arg_flag(A, O_SPEED),
                     .ops = !arg_flag(A, O_NO_OPS), .decode_n = arg_int(A, O_DECODE_STEPS),
                     .greedy_n = arg_int(A, O_GREEDY_STEPS), .backend_cpu = cli_backend(A) == DP_BACKEND_CPU};
    char err[96];
    o.n_prompts = parse_lengths(arg_str(A, O_PROMPT_TOKENS), o.prompt_n, err, sizeof err);
    if (o.n_prompts < 0) cli_die(EXIT_BADINPUT, "verify: --prompt-tokens %s", err); /* the option's check took it */
    g_rng = o.seed ? o.seed : 1;
    if ((o.save_ref || o.ref) && !o.model) cli_die(EXIT_BADINPUT, "verify: --save-ref and --ref need -m FILE");
    if (o.save_ref && o.ref) cli_die(EXIT_BADINPUT, "verify: give either --save-ref or --ref, not both");
    if (o.backend_cpu && !o.save_ref)
        cli_die(EXIT_BADINPUT, "verify compares the CUDA backend with the CPU; --backend cpu only goes with --save-ref");

    dp_model *m = NULL;
    greedy_ref ref = {0};
    if (o.model) {
        m = cli_load_model(o.model);
        const dp_model_info *in = dp_model_get_info(m);
        ref.file_hash = file_hash(o.model, &ref.file_size);
        ref.n_vocab = in->n_vocab;
        ref.n_prompt = o.prompt_n[0];
        ref.n_steps = o.greedy_n;
        ref.prompt = random_prompt(ref.n_prompt, in->n_vocab);
    }
    if (o.save_ref) {
        double t0 = dp_time_s();
        cpu_greedy(m, &ref);
        save_ref(o.save_ref, &ref);
        printf("saved the CPU greedy reference (%d prompt tokens, %d steps, seed %llu) to %s in %.1f s\n", ref.n_prompt,
               ref.n_steps, (unsigned long long)o.seed, o.save_ref, dp_time_s() - t0);
        return 0;
    }

    int fails = 0;
    printf("doppler verify: CUDA vs CPU, seed %llu\n", (unsigned long long)o.seed);
    if (o.ops || o.speed) { /* --speed --no-ops: the measurements alone */
        int rc = verify_ops(stdout, o.seed, (o.speed ? VERIFY_SPEED : 0) | (o.ops ? 0 : VERIFY_NO_CHECKS));
        if (rc < 0) cli_die_lib(rc);
        fails += rc;
    }
    if (m) {
        /* the first prompt is the greedy run's; the others are drawn after it */
        fails += trace_compare(m, ref.prompt, ref.n_prompt, o.decode_n);
        for (int k = 1; k < o.n_prompts; k++) {
            int32_t *toks = random_prompt(o.prompt_n[k], dp_model_get_info(m)->n_vocab);
            fails += trace_compare(m, toks, o.prompt_n[k], o.decode_n);
            free(toks);
        }
        if (o.greedy_n > 0) {
            if (o.ref) {
                greedy_ref saved = {0};
                load_ref(o.ref, &saved);
                if (saved.file_size != ref.file_size || saved.file_hash != ref.file_hash || saved.n_vocab != ref.n_vocab)
                    cli_die(EXIT_BADINPUT, "verify: %s was made from a different model file than %s", o.ref, o.model);
                fails += greedy_compare(m, &saved);
                free(saved.prompt);
                free(saved.step);
            } else {
                double t0 = dp_time_s();
                cpu_greedy(m, &ref);
                printf("CPU greedy reference: %d steps in %.1f s\n", ref.n_steps, dp_time_s() - t0);
                fails += greedy_compare(m, &ref);
            }
        }
        dp_model_free(m);
    }
    free(ref.prompt);
    free(ref.step);
    printf("%s: %d failed check(s)\n", fails ? "FAIL" : "PASS", fails);
    return fails ? EXIT_RUNTIME : 0;
}
