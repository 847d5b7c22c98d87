/* doppler run: prompt in, streamed continuation out, stats on stderr;
 * several prompts go to run_parallel.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "debug.h"
#include "generate.h"
#include "interrupt.h"
#include "profile_print.h"
#include "run.h"

static const char *USAGE =
    "usage: doppler run [-m FILE] (-p TEXT [-p TEXT ...] | -f FILE) [--parallel N] [options]\n\n"
    "Streams the continuation of the prompt to stdout; a stats line goes to stderr. Without --parallel, -f FILE\n"
    "is one prompt (the whole file).\n\n"
    "Several prompts (several -p, or --parallel N with -f FILE: one prompt per line, empty lines skipped) are\n"
    "decoded together, N at once (default 1); the next prompt starts when one ends. Prompt K samples with seed\n"
    "+ K - 1. Their outputs come in input order, each after a line '### prompt K/COUNT (B bytes)' and exactly B\n"
    "bytes long: what doppler run prints for that prompt alone. Stats lines: one per prompt and the aggregate.";

/* The prompt as text, wrapped in the chat template with --chat (then BOS
 * and special tokens come from the template and the prompt is not echoed). */
static char *render_chat(const cli_args *A, const dp_model *m, const char *prompt, size_t plen) {
    dp_chat_msg msg[2];
    int n = 0;
    if (memchr(prompt, 0, plen)) cli_die(EXIT_BADINPUT, "run: the prompt contains a NUL byte");
    if (arg_str(A, O_SYSTEM)) msg[n++] = (dp_chat_msg){"system", arg_str(A, O_SYSTEM)};
    msg[n++] = (dp_chat_msg){"user", prompt};
    char *tmpl = cli_chat_template(arg_str(A, O_CHAT_TEMPLATE));
    char *text = dp_chat_apply_vars(m, tmpl, msg, n, 1, arg_str(A, O_CHAT_TEMPLATE_KWARGS));
    free(tmpl);
    if (!text) cli_die_lib(DP_ERR_ARG);
    if (arg_flag(A, O_PRINT_PROMPT)) fprintf(stderr, "%s\n", text);
    return text;
}

/* "" for the only prompt, else " K" (1-based), for messages. */
static const char *prompt_label(char *buf, size_t cap, int index, int n) {
    if (n > 1) snprintf(buf, cap, " %d", index + 1);
    else buf[0] = 0;
    return buf;
}

void run_prompt_prepare(run_prompt *p, const cli_args *A, const dp_model *m, int index, int n) {
    int add_bos = !arg_flag(A, O_NO_BOS), special = arg_flag(A, O_PARSE_SPECIAL);
    const char *text = p->text;
    size_t len = p->len;
    p->echo = !arg_flag(A, O_NO_DISPLAY_PROMPT) && !cli_json_schema(A) && !cli_grammar(A); /* the output alone is the value */
    if (arg_flag(A, O_CHAT)) {
        text = p->chat_text = render_chat(A, m, p->text, p->len);
        len = strlen(text);
        add_bos = 0;
        special = 1;
        p->echo = 0;
    }
    p->n_tok = cli_tokenize(m, text, len, add_bos, special, &p->toks, &p->cap);
    char lb[16];
    if (p->n_tok == 0)
        cli_die(EXIT_BADINPUT, "run: %s%s produced no tokens", n > 1 ? "prompt" : "the prompt",
                prompt_label(lb, sizeof lb, index, n));
}

void run_prompt_check_ctx(const run_prompt *p, int n_ctx, const dp_model_info *info, int index, int n) {
    char lb[16];
    if (p->n_tok >= n_ctx)
        cli_die(EXIT_BADINPUT, "prompt%s has %d tokens but the context holds %d (raise --ctx-size, model maximum %d)",
                prompt_label(lb, sizeof lb, index, n), p->n_tok, n_ctx, info->n_ctx_train);
}

void run_prompt_free(run_prompt *p) {
    free(p->chat_text);
    free(p->toks);
    p->chat_text = NULL;
    p->toks = NULL;
}

/* -f with --parallel: one prompt per line (a CR before the newline is not
 * part of it; empty lines are skipped). Returns the count. */
static int split_lines(const char *text, size_t len, run_prompt **out) {
    int n = 0, cap = 0;
    run_prompt *v = NULL;
    for (size_t i = 0; i < len;) {
        const char *nl = memchr(text + i, '\n', len - i);
        size_t e = nl ? (size_t)(nl - text) : len, k = e - i;
        if (k && text[i + k - 1] == '\r') k--;
        if (k) {
            if (n == cap) {
                cap = cap ? 2 * cap : 16;
                v = realloc(v, sizeof *v * (size_t)cap);
                if (!v) cli_die(EXIT_RUNTIME, "out of memory");
            }
            v[n++] = (run_prompt){.text = text + i, .len = k};
        }
        i = e + 1;
    }
    *out = v;
    return n;
}

/* One prompt, streamed as it is generated. */
static int run_one(const cli_args *A, dp_model *m, run_prompt *P, debug_opts *dbg) {
    const dp_model_info *info = dp_model_get_info(m);
    int profile = arg_flag(A, O_PROFILE), n_tok = P->n_tok;
    const int32_t *toks = P->toks;
    dp_sampler_params smp;
    cli_sampler_from_args(A, &smp);

    dp_session_params sp;
    cli_session_from_args(A, &sp, info);
    dp_session *s = dp_session_new(m, &sp);
    if (!s) cli_die_lib(DP_ERR_BACKEND);
    if (profile && dp_session_set_profile(s, 1)) cli_die_lib(DP_ERR_NOMEM);
    prof_acc *prof_prefill = profile ? prof_acc_new() : NULL;
    int n_ctx = dp_session_ctx(s);
    run_prompt_check_ctx(P, n_ctx, info, 0, 1);
    cli_log(LOG_PIPELINE, "backend %s, context %d, prompt %d tokens", dp_session_backend(s), n_ctx, n_tok);
    cli_log_session(s);
    debug_attach(dbg, s, m);

    dp_sampler *smpl = dp_sampler_new(&smp, info->n_vocab);
    if (!smpl) cli_die_lib(DP_ERR_ARG);
    for (int i = 0; i < n_tok; i++) dp_sampler_accept(smpl, toks[i]);
    dp_constraint *cons = P->chat_text ? cli_run_constraint(A, m, P->chat_text, strlen(P->chat_text))
                                       : cli_run_constraint(A, m, P->text, P->len);

    cli_log_seed(A, &smp);
    if (P->echo) cli_emit(P->text, P->len);
    gen_state g = {.m = m, .s = s, .smpl = smpl, .dbg = dbg, .n_batch = sp.n_batch,
                   .n_predict = arg_int(A, O_N_PREDICT), .ignore_eos = arg_flag(A, O_IGNORE_EOS),
                   .render_special = arg_flag(A, O_SPECIAL), .stop = A->v[O_STOP].list,
                   .n_stop = A->v[O_STOP].n_list, .think = cli_think_display(A, P->chat_text), .cons = cons};
    double t_start = dp_time_s(), t_first;
    int32_t tok;
    int rc = gen_prefill(&g, toks, n_tok, &tok);
    t_first = dp_time_s();
    if (rc == GEN_INTERRUPTED) {
        g.stop_reason = "interrupted";
    } else {
        if (rc) cli_die_lib(rc);
        cli_log_kv_fill(s, "after prefill");
        if (profile) {
            prof_acc_add_session(prof_prefill, s);
            dp_session_reset_profile(s);
        }
        if ((rc = gen_run(&g, tok))) cli_die_lib(rc);
        if (!strcmp(g.stop_reason, "context full"))
            cli_log(LOG_PIPELINE, "stopped: the context of %d tokens is full", n_ctx);
    }
    cli_emit("\n", 1);
    double t_end = dp_time_s();
    cli_log_kv_fill(s, "at end");

    dp_session_stats st;
    dp_session_get_stats(s, &st);
    /* a speed needs a measured step: -n 1 decodes nothing, prefill of one token is a decode step */
    char pre[48], dec[48];
    double pre_s = n_tok > 1 ? st.prefill_s : t_first - t_start;
    if (rc != GEN_INTERRUPTED && pre_s > 0) snprintf(pre, sizeof pre, "%.1f tok/s", n_tok / pre_s);
    else snprintf(pre, sizeof pre, "-");
    uint64_t n_dec = st.n_decode_tokens;
    double dec_s = st.decode_s;
    if (n_tok == 1 && n_dec) { /* the one-token prompt's step */
        n_dec--;
        dec_s -= t_first - t_start;
    }
    if (n_dec && dec_s > 0) snprintf(dec, sizeof dec, "%.1f tok/s", n_dec / dec_s);
    else snprintf(dec, sizeof dec, "- (no decode step)");
    cli_log(LOG_STATS,
            "prompt %d tokens, prefill %s, decode %s (%d generated, stop: %s), first token %.0f ms, total %.2f s, "
            "backend %s, peak RSS %.0f MB",
            n_tok, pre, dec, g.n_gen, g.stop_reason, (t_first - t_start) * 1e3, t_end - t_start,
            dp_session_backend(s), dp_peak_rss_bytes() / 1048576.0);

    if (profile) {
        prof_acc *prof_decode = prof_acc_new();
        prof_acc_add_session(prof_decode, s);
        prof_print(stderr, "profile, prefill", prof_prefill, n_tok);
        prof_print(stderr, "profile, decode", prof_decode, (int)st.n_decode_tokens);
        prof_acc_free(prof_decode);
        prof_acc_free(prof_prefill);
    }
    int interrupted = !strcmp(g.stop_reason, "interrupted");
    gen_free(&g);
    dp_constraint_free(cons);
    dp_sampler_free(smpl);
    dp_session_free(s);
    return interrupted ? EXIT_INTERRUPTED : 0;
}

int cmd_run(int argc, char **argv) {
    const cli_args *A = cli_parse(C_RUN, "run", USAGE, argc, argv);
    cli_interrupt_install(); /* from here on Ctrl-C stops the work at the next check */
    cli_positionals(A, 0, 0, "");
    const opt_value *pv = &A->v[O_PROMPT];
    if (arg_str(A, O_SYSTEM) && !arg_flag(A, O_CHAT)) cli_die(EXIT_BADINPUT, "run: --system-prompt needs --chat");
    if (arg_str(A, O_CHAT_TEMPLATE_KWARGS) && !arg_flag(A, O_CHAT))
        cli_die(EXIT_BADINPUT, "run: --chat-template-kwargs needs --chat");
    if (pv->n_list && arg_str(A, O_FILE)) cli_die(EXIT_BADINPUT, "run: give either -p or -f, not both");
    char *file_text = NULL;
    run_prompt *P = NULL;
    int n = 0;
    if (arg_str(A, O_FILE)) {
        size_t flen;
        file_text = cli_read_file(arg_str(A, O_FILE), &flen);
        if (arg_given(A, O_PARALLEL)) {
            if (!(n = split_lines(file_text, flen, &P)))
                cli_die(EXIT_BADINPUT, "run: %s holds no prompt (one per line with --parallel)", arg_str(A, O_FILE));
        } else {
            P = calloc(1, sizeof *P);
            P[n++] = (run_prompt){.text = file_text, .len = flen};
        }
    } else if (pv->n_list) {
        P = calloc((size_t)pv->n_list, sizeof *P);
        for (; n < pv->n_list; n++) P[n] = (run_prompt){.text = pv->list[n], .len = strlen(pv->list[n])};
    } else {
        cli_die(EXIT_BADINPUT, "run: no prompt given (use -p TEXT or -f FILE)");
    }
    if (!P) cli_die(EXIT_RUNTIME, "out of memory");
    cli_json_schema(A); /* a bad schema, grammar or file fails before the model loads */
    cli_grammar(A);
    debug_opts dbg;
    debug_from_args(&dbg, A);
    if (n > 1) { /* what cannot tell the sequences apart */
        const int refused[] = {O_TRACK_TOKEN, O_TOP_K_PRINT};
        for (size_t k = 0; k < sizeof refused / sizeof refused[0]; k++)
            if (arg_given(A, refused[k]))
                cli_die(EXIT_BADINPUT, "run: %s works with one prompt only (its lines do not name the sequence), "
                        "not with %d", arg_name(A, refused[k]), n);
    }

    dp_model *m = cli_load_model(arg_str(A, O_MODEL));
    debug_resolve(&dbg, m);
    for (int i = 0; i < n; i++) run_prompt_prepare(&P[i], A, m, i, n);
    int rc = n == 1 ? run_one(A, m, &P[0], &dbg) : run_parallel(A, m, P, n, &dbg);
    for (int i = 0; i < n; i++) run_prompt_free(&P[i]);
    free(P);
    dp_model_free(m);
    free(file_text);
    debug_free(&dbg);
    cli_finish_stdout();
    return rc;
}
