/* doppler run: prompt in, streamed continuation out, stats on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "debug.h"
#include "generate.h"
#include "interrupt.h"
#include "profile_print.h"

static const char *USAGE = "usage: doppler run [-m FILE] (-p TEXT | -f FILE) [options]\n\n"
                           "Streams the continuation of the prompt to stdout; a stats line goes to stderr.";

/* The prompt as text, wrapped in the chat template with --chat (then BOS
 * and special tokens come from the template and the prompt is not echoed). */
static char *render_chat(const cli_args *A, const dp_model *m, const char *prompt, size_t plen) {
    dp_chat_msg msg[2];
    int n = 0;
    if (memchr(prompt, 0, plen)) cli_die(EXIT_BADINPUT, "run: the prompt contains a NUL byte");
    if (arg_str(A, O_SYSTEM)) msg[n++] = (dp_chat_msg){"system", arg_str(A, O_SYSTEM)};
    msg[n++] = (dp_chat_msg){"user", prompt};
    char *tmpl = cli_chat_template(arg_str(A, O_CHAT_TEMPLATE));
    char *text = dp_chat_apply(m, tmpl, msg, n, 1);
    free(tmpl);
    if (!text) cli_die_lib(DP_ERR_ARG);
    if (arg_flag(A, O_PRINT_PROMPT)) fprintf(stderr, "%s\n", text);
    return text;
}

int cmd_run(int argc, char **argv) {
    const cli_args *A = cli_parse(C_RUN, "run", USAGE, argc, argv);
    cli_interrupt_install(); /* from here on Ctrl-C stops the work at the next check */
    cli_positionals(A, 0, 0, "");
    const char *prompt = arg_str(A, O_PROMPT);
    int add_bos = !arg_flag(A, O_NO_BOS), special = arg_flag(A, O_PARSE_SPECIAL);
    int echo = !arg_flag(A, O_NO_DISPLAY_PROMPT), profile = arg_flag(A, O_PROFILE);
    if (arg_str(A, O_SYSTEM) && !arg_flag(A, O_CHAT)) cli_die(EXIT_BADINPUT, "run: --system-prompt needs --chat");
    size_t plen = 0;
    char *file_text = NULL;
    if (prompt && arg_str(A, O_FILE)) cli_die(EXIT_BADINPUT, "run: give either -p or -f, not both");
    if (arg_str(A, O_FILE)) prompt = file_text = cli_read_file(arg_str(A, O_FILE), &plen);
    else if (prompt) plen = strlen(prompt);
    else cli_die(EXIT_BADINPUT, "run: no prompt given (use -p TEXT or -f FILE)");
    dp_sampler_params smp;
    cli_sampler_from_args(A, &smp);
    debug_opts dbg;
    debug_from_args(&dbg, A);

    dp_model *m = cli_load_model(arg_str(A, O_MODEL));
    const dp_model_info *info = dp_model_get_info(m);
    debug_resolve(&dbg, m);
    char *chat_text = NULL;
    if (arg_flag(A, O_CHAT)) {
        prompt = chat_text = render_chat(A, m, prompt, plen);
        plen = strlen(chat_text);
        add_bos = 0;
        special = 1;
        echo = 0;
    }
    int32_t *toks = NULL;
    int cap = 0, n_tok = cli_tokenize(m, prompt, plen, add_bos, special, &toks, &cap);
    if (n_tok == 0) cli_die(EXIT_BADINPUT, "run: the prompt produced no tokens");

    dp_session_params sp;
    cli_session_from_args(A, &sp, info);
    dp_session *s = dp_session_new(m, &sp);
    if (!s) cli_die_lib(DP_ERR_BACKEND);
    if (profile && dp_session_set_profile(s, 1)) cli_die_lib(DP_ERR_NOMEM);
    prof_acc *prof_prefill = profile ? prof_acc_new() : NULL;
    int n_ctx = dp_session_ctx(s);
    if (n_tok >= n_ctx)
        cli_die(EXIT_BADINPUT, "prompt has %d tokens but the context holds %d (raise --ctx-size, model maximum %d)",
                n_tok, n_ctx, info->n_ctx_train);
    cli_log(LOG_PIPELINE, "backend %s, context %d, prompt %d tokens", dp_session_backend(s), n_ctx, n_tok);
    cli_log_session(s);
    debug_attach(&dbg, s, m);

    dp_sampler *smpl = dp_sampler_new(&smp, info->n_vocab);
    if (!smpl) cli_die_lib(DP_ERR_ARG);
    for (int i = 0; i < n_tok; i++) dp_sampler_accept(smpl, toks[i]);

    cli_log_seed(A, &smp);
    if (echo) cli_emit(prompt, plen);
    gen_state g = {.m = m, .s = s, .smpl = smpl, .dbg = &dbg, .n_batch = sp.n_batch,
                   .n_predict = arg_int(A, O_N_PREDICT), .ignore_eos = arg_flag(A, O_IGNORE_EOS),
                   .render_special = arg_flag(A, O_SPECIAL), .stop = A->v[O_STOP].list,
                   .n_stop = A->v[O_STOP].n_list};
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
    dp_sampler_free(smpl);
    dp_session_free(s);
    dp_model_free(m);
    free(toks);
    free(file_text);
    debug_free(&dbg);
    free(chat_text);
    cli_finish_stdout();
    return interrupted ? EXIT_INTERRUPTED : 0;
}
