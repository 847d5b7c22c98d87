/* doppler run with several prompts: continuous batching in one session.
 *
 * Up to --parallel prompts hold a sequence each; every step evaluates one
 * batch (dp_eval_batch) with a decode entry for each sequence past its
 * prompt and prompt chunks of the others; a prompt whose sequence ends
 * hands the sequence to the next waiting prompt.
 *
 * A prompt is cut into chunks exactly where `doppler run` alone cuts it
 * (at multiples of the prefill chunk, -b capped by the context), and a
 * chunk goes into a step whole: the CPU backend picks its kernels by the
 * rows a sequence has in a pass, so each sequence computes what it would
 * alone and its greedy output is byte for byte that of `doppler run`. A
 * chunk that does not fit beside the decode entries gets a step of its own
 * (prompt chunks only), so long prompts are not starved.
 *
 * Each prompt's text is collected (gen_state.quiet) and printed in input
 * order, after a header line naming its length, as soon as it and every
 * earlier prompt are done.
 *
 * With --json-schema every prompt has a constraint of its own, which its
 * batch entries carry: the engine draws under it (on the device where
 * there is one). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "generate.h"
#include "interrupt.h"
#include "profile_print.h"
#include "run.h"

enum { J_WAITING, J_PROMPT, J_DECODE, J_DONE };

typedef struct {
    run_prompt *p;
    int state, seq;
    int pos;                 /* prompt tokens evaluated */
    int rows;                /* prompt rows in the current step */
    int32_t next;            /* the token to evaluate next (J_DECODE) */
    dp_sampler *smpl;
    gen_state g;
    double t_start, t_first, t_last;
} job;

typedef struct {
    const cli_args *A;
    dp_model *m;
    dp_session *s;
    debug_opts *dbg;
    job *jobs;
    int n, n_seq, chunk, n_batch, printed;
    dp_sampler_params smp;
    dp_batch_entry *e;
    job **owner;             /* the job of each entry */
    int32_t *out;
    /* aggregate figures: steps with prompt rows count as prefill */
    int prompt_rows, decode_rows, all_rows;
    double prefill_s, decode_s;
} par;

static void start_job(par *P, job *j, int index) {
    j->seq = dp_seq_new(P->s);
    if (j->seq < 0) cli_die_lib(j->seq);
    dp_sampler_params sp = P->smp;
    sp.seed += (uint64_t)index; /* prompt K samples with seed + K - 1 */
    j->smpl = dp_sampler_new(&sp, dp_model_get_info(P->m)->n_vocab);
    if (!j->smpl) cli_die_lib(DP_ERR_ARG);
    for (int i = 0; i < j->p->n_tok; i++) dp_sampler_accept(j->smpl, j->p->toks[i]);
    const cli_args *A = P->A;
    const run_prompt *p = j->p;
    dp_constraint *cons = p->chat_text ? cli_run_constraint(A, P->m, p->chat_text, strlen(p->chat_text))
                                       : cli_run_constraint(A, P->m, p->text, p->len);
    j->g = (gen_state){.m = P->m, .s = P->s, .smpl = j->smpl, .seq = j->seq, .quiet = 1,
                       .n_predict = arg_int(A, O_N_PREDICT), .ignore_eos = arg_flag(A, O_IGNORE_EOS),
                       .render_special = arg_flag(A, O_SPECIAL), .stop = A->v[O_STOP].list,
                       .n_stop = A->v[O_STOP].n_list, .cons = cons};
    j->state = J_PROMPT;
    j->t_start = dp_time_s();
}

static void end_job(par *P, job *j) {
    gen_end(&j->g);
    if (dp_seq_free(P->s, j->seq)) cli_die_lib(DP_ERR_ARG);
    j->state = J_DONE;
    j->t_last = dp_time_s();
}

/* sample: the entry's next token is wanted (drawn in the batch, under the
 * job's constraint if any). */
static void add(par *P, int *n, job *j, int pos, int32_t tok, int sample) {
    P->e[*n] = (dp_batch_entry){.seq = j->seq, .pos = pos, .token = tok, .sampler = sample ? j->smpl : NULL,
                                .constraint = sample ? j->g.cons : NULL};
    P->owner[(*n)++] = j;
}

/* The step's entries: decode entries first, then whole prompt chunks in
 * input order while they fit; a first chunk that does not fit beside the
 * decode entries makes this a step of prompt chunks only. */
static int build(par *P, int *n_prompt_rows) {
    int n = 0, rows = 0;
    for (int with_decode = 1; with_decode >= 0; with_decode--) {
        n = rows = 0;
        if (with_decode)
            for (int i = 0; i < P->n; i++)
                if (P->jobs[i].state == J_DECODE) add(P, &n, &P->jobs[i], dp_seq_pos(P->s, P->jobs[i].seq),
                                                      P->jobs[i].next, 1);
        int n_decode = n, stuck = 0;
        for (int i = 0; i < P->n; i++) {
            job *j = &P->jobs[i];
            j->rows = 0;
            if (j->state != J_PROMPT || stuck) continue;
            int end = (j->pos / P->chunk + 1) * P->chunk, k = (end < j->p->n_tok ? end : j->p->n_tok) - j->pos;
            if (n + k > P->n_batch) {
                stuck = 1;
                continue;
            }
            for (int r = 0; r < k; r++)
                add(P, &n, j, j->pos + r, j->p->toks[j->pos + r], j->pos + r == j->p->n_tok - 1);
            j->rows = k;
            rows += k;
        }
        if (!stuck || rows || !n_decode) break;
    }
    *n_prompt_rows = rows;
    return n;
}

/* Runs one step; returns 0 or a dp_status. */
static int step(par *P) {
    int rows, n = build(P, &rows);
    double t0 = dp_time_s();
    int rc = dp_eval_batch(P->s, P->e, n, P->out);
    if (rc) return rc;
    double now = dp_time_s(), dt = now - t0;
    P->all_rows += n;
    if (rows) {
        P->prompt_rows += rows;
        P->prefill_s += dt;
    } else {
        P->decode_rows += n;
        P->decode_s += dt;
    }
    for (int i = 0; i < P->n; i++) P->jobs[i].pos += P->jobs[i].rows;
    for (int i = 0; i < n; i++) {
        job *j = P->owner[i];
        if (!P->e[i].sampler) continue;
        const int32_t tok = P->out[i];
        if (tok < 0) return DP_ERR_ARG; /* no token can continue: dp_last_error says so */
        if (j->state == J_PROMPT) { /* the prompt's last chunk: the first token */
            j->state = J_DECODE;
            j->t_first = now;
            gen_begin(&j->g);
        }
        j->t_last = now;
        if (gen_take(&j->g, tok)) end_job(P, j);
        else j->next = tok;
    }
    return DP_OK;
}

/* Prints the finished prompts that every earlier prompt precedes. */
static void print_ready(par *P) {
    for (; P->printed < P->n && P->jobs[P->printed].state == J_DONE; P->printed++) {
        const job *j = &P->jobs[P->printed];
        size_t echo = j->p->echo ? j->p->len : 0;
        char head[96];
        int k = snprintf(head, sizeof head, "### prompt %d/%d (%zu bytes)\n", P->printed + 1, P->n,
                         echo + j->g.len + 1);
        cli_emit(head, (size_t)k);
        cli_emit(j->p->text, echo);
        cli_emit(j->g.text ? j->g.text : "", j->g.len);
        cli_emit("\n", 1);
    }
}

/* Ctrl-C: every prompt ends where it is (those not started with nothing). */
static void stop_all(par *P) {
    for (int i = 0; i < P->n; i++) {
        job *j = &P->jobs[i];
        if (j->state == J_DONE) continue;
        if (j->state == J_DECODE) end_job(P, j);
        else if (j->state == J_PROMPT) dp_seq_free(P->s, j->seq);
        j->state = J_DONE;
        j->g.stop_reason = "interrupted";
    }
}

static dp_session *new_session(const cli_args *A, dp_model *m, int n_seq, int *n_batch) {
    dp_session_params sp;
    cli_session_from_args(A, &sp, dp_model_get_info(m));
    sp.n_seq_max = n_seq;
    if (sp.n_batch < n_seq) sp.n_batch = n_seq; /* every decode entry fits in a step */
    dp_session *s = dp_session_new(m, &sp);
    if (!s && n_seq > 1 && dp_last_status() == DP_ERR_BACKEND) {
        if (sp.backend != DP_BACKEND_AUTO)
            cli_die(EXIT_BADINPUT, "run --parallel %d: %s", n_seq, dp_last_error());
        cli_note(LOG_PIPELINE, "%s; running on the CPU", dp_last_error());
        sp.backend = DP_BACKEND_CPU;
        s = dp_session_new(m, &sp);
    }
    if (!s) cli_die_lib(DP_ERR_BACKEND);
    /* as dp_session_new caps it: no more positions than the sequences take */
    int64_t cap = (int64_t)dp_session_ctx(s) * n_seq;
    *n_batch = sp.n_batch < cap ? sp.n_batch : (int)cap;
    return s;
}

static void print_stats(par *P, double t_start, double t_end) {
    long tok_in = 0, tok_out = 0;
    for (int i = 0; i < P->n; i++) {
        const job *j = &P->jobs[i];
        tok_in += j->p->n_tok;
        tok_out += j->g.n_gen;
        char first[48] = "-", dec[48] = "-";
        if (j->g.n_gen) snprintf(first, sizeof first, "%.0f ms", (j->t_first - j->t_start) * 1e3);
        if (j->g.n_gen > 1 && j->t_last > j->t_first)
            snprintf(dec, sizeof dec, "%.1f tok/s", (j->g.n_gen - 1) / (j->t_last - j->t_first));
        cli_log(LOG_STATS, "prompt %d/%d: %d tokens, %d generated (stop: %s), first token %s, decode %s", i + 1, P->n,
                j->p->n_tok, j->g.n_gen, j->g.stop_reason, first, dec);
    }
    char pre[48] = "-", dec[48] = "- (no decode-only step)";
    if (P->prefill_s > 0) snprintf(pre, sizeof pre, "%.1f tok/s", P->prompt_rows / P->prefill_s);
    if (P->decode_s > 0) snprintf(dec, sizeof dec, "%.1f tok/s", P->decode_rows / P->decode_s);
    cli_log(LOG_STATS,
            "%d prompts, %d at once: prompt %ld tokens, prefill %s, decode %s aggregate (%ld generated), total %.2f s, "
            "backend %s, peak RSS %.0f MB",
            P->n, P->n_seq, tok_in, pre, dec, tok_out, t_end - t_start, dp_session_backend(P->s),
            dp_peak_rss_bytes() / 1048576.0);
}

int run_parallel(const cli_args *A, dp_model *m, run_prompt *prompts, int n, debug_opts *dbg) {
    const dp_model_info *info = dp_model_get_info(m);
    par P = {.A = A, .m = m, .dbg = dbg, .n = n};
    P.n_seq = arg_int(A, O_PARALLEL) < n ? arg_int(A, O_PARALLEL) : n;
    cli_sampler_from_args(A, &P.smp);
    P.s = new_session(A, m, P.n_seq, &P.n_batch);
    int n_ctx = dp_session_ctx(P.s);
    /* the chunk a session of one sequence cuts a prompt into (dp_session_new
     * caps the batch at the context) */
    P.chunk = arg_int(A, O_BATCH) < n_ctx ? arg_int(A, O_BATCH) : n_ctx;
    long tok_in = 0;
    for (int i = 0; i < n; i++) {
        run_prompt_check_ctx(&prompts[i], n_ctx, info, i, n);
        tok_in += prompts[i].n_tok;
    }
    int profile = arg_flag(A, O_PROFILE);
    if (profile && dp_session_set_profile(P.s, 1)) cli_die_lib(DP_ERR_NOMEM);
    cli_log(LOG_PIPELINE, "backend %s, context %d per sequence, %d prompts (%ld tokens), %d at once, batch %d",
            dp_session_backend(P.s), n_ctx, n, tok_in, P.n_seq, P.n_batch);
    cli_log_session(P.s);
    debug_attach(dbg, P.s, m);
    if (!arg_given(A, O_SEED) && P.smp.temp > 0)
        cli_log(LOG_SAMPLER, "seed %llu (prompt K samples with seed + K - 1)", (unsigned long long)P.smp.seed);

    P.jobs = calloc((size_t)n, sizeof *P.jobs);
    P.e = calloc((size_t)P.n_batch, sizeof *P.e);
    P.owner = calloc((size_t)P.n_batch, sizeof *P.owner);
    P.out = calloc((size_t)P.n_batch, sizeof *P.out);
    if (!P.jobs || !P.e || !P.owner || !P.out) cli_die(EXIT_RUNTIME, "out of memory");
    for (int i = 0; i < n; i++) P.jobs[i].p = &prompts[i];
    /* every sequence comes from dp_seq_new, the first one too */
    if (dp_seq_free(P.s, 0)) cli_die_lib(DP_ERR_ARG);

    double t_start = dp_time_s();
    int interrupted = 0, next = 0;
    for (;;) {
        if (cli_interrupted()) {
            interrupted = 1;
            stop_all(&P);
            break;
        }
        int alive = 0;
        for (int i = 0; i < next; i++) alive += P.jobs[i].state != J_DONE;
        for (; alive < P.n_seq && next < n; alive++, next++) start_job(&P, &P.jobs[next], next);
        if (!alive) break;
        int rc = step(&P);
        if (rc == DP_ERR_STOPPED && dbg) debug_report_stop(dbg);
        if (rc) cli_die_lib(rc);
        print_ready(&P);
    }
    print_ready(&P);
    double t_end = dp_time_s();
    if (cli_log_on(LOG_KV)) {
        dp_kv_stats ks;
        dp_session_kv_stats(P.s, &ks);
        cli_log(LOG_KV, "at end: pages used=%d shared=%d cached=%d free=%d of %d", ks.used, ks.shared, ks.cached,
                ks.free, ks.n_pages);
    }
    print_stats(&P, t_start, t_end);
    if (profile) {
        prof_acc *acc = prof_acc_new();
        prof_acc_add_session(acc, P.s);
        prof_print(stderr, "profile, all steps", acc, P.all_rows);
        prof_acc_free(acc);
    }
    for (int i = 0; i < n; i++) {
        gen_free(&P.jobs[i].g);
        dp_constraint_free(P.jobs[i].g.cons);
        dp_sampler_free(P.jobs[i].smpl);
    }
    free(P.jobs);
    free(P.e);
    free(P.owner);
    free(P.out);
    dp_session_free(P.s);
    return interrupted ? EXIT_INTERRUPTED : 0;
}
