/* doppler run: prompt in, streamed continuation out, stats on stderr. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "debug.h"
#include "profile_print.h"

static void usage(void) {
    printf("usage: doppler run [-m FILE] -p TEXT [options]\n\n"
           "  -m, --model FILE       GGUF model (default: %s)\n"
           "  -p, --prompt TEXT      prompt text\n"
           "  -f, --file FILE        read the prompt from a file\n"
           "  -n, --n-predict N      tokens to generate (default 64)\n"
           "  --temp T               temperature, 0 = greedy (default 0.8)\n"
           "  --top-k K              keep the K most likely tokens, 0 = off (default 40)\n"
           "  --top-p P              nucleus sampling, 1 = off (default 0.95)\n"
           "  --min-p P              drop tokens below P x the best's probability (default 0.05)\n"
           "  --repeat-penalty R     penalise recent tokens, 1 = off (default 1)\n"
           "  --repeat-last-n N      window of the penalty (default 64)\n"
           "  --seed S               sampling seed (default: from the clock)\n"
           "  --ctx N                context size (default 4096, capped by the model's)\n"
           "  --batch N              positions per forward pass (default 512)\n"
           "  -t, --threads N        CPU threads (default: all cores)\n"
           "  --backend cpu|cuda     compute backend (default: cuda when a GPU is present)\n"
           "  --no-bos               do not prepend BOS\n"
           "  --special              match special-token strings in the prompt\n"
           "  --ignore-eos           keep generating after end-of-generation tokens\n"
           "  --no-echo              do not print the prompt before the continuation\n"
           "  --profile              time every op; print tables by op kind and layer on stderr\n"
           "  --chat                 wrap the prompt as one user message in the chat template (implies --special)\n"
           "  --chat-template NAME   gemma, chatml or llama3 (default: detected from the model)\n"
           "  --log-tags LIST        only these log tags (Loader,Pipeline,Layer,...)\n"
           "  --verbose              all logs\n"
           "debugging:\n%s",
           cli_default_model(), debug_help);
}

int cmd_run(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *prompt_file = NULL;
    int n_predict = 64, add_bos = 1, special = 0, ignore_eos = 0, echo = 1, seed_set = 0, profile = 0, chat = 0;
    const char *chat_tmpl = NULL;
    dp_session_params sp;
    dp_sampler_params smp;
    dp_session_params_default(&sp);
    dp_sampler_params_default(&smp);
    debug_opts dbg = {0};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (debug_parse(&dbg, argc, argv, &i)) continue;
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-p") || !strcmp(a, "--prompt")) prompt = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) prompt_file = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) n_predict = cli_int(a, cli_value(argc, argv, &i), 0, 1 << 24);
        else if (cli_sampler_flag(argc, argv, &i, &smp, &seed_set)) continue;
        else if (!strcmp(a, "--repeat-last-n")) smp.repeat_last_n = cli_int(a, cli_value(argc, argv, &i), 0, 1 << 20);
        else if (!strcmp(a, "--ctx")) sp.n_ctx = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 24);
        else if (!strcmp(a, "--batch")) sp.n_batch = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 20);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) sp.n_threads = cli_int(a, cli_value(argc, argv, &i), 1, 1024);
        else if (!strcmp(a, "--backend")) sp.backend = cli_backend(cli_value(argc, argv, &i), 1);
        else if (!strcmp(a, "--no-bos")) add_bos = 0;
        else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "--ignore-eos")) ignore_eos = 1;
        else if (!strcmp(a, "--no-echo")) echo = 0;
        else if (!strcmp(a, "--profile")) profile = 1;
        else if (!strcmp(a, "--chat")) chat = 1;
        else if (!strcmp(a, "--chat-template")) chat_tmpl = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--log-tags")) cli_set_log_tags(cli_value(argc, argv, &i));
        else if (!strcmp(a, "--verbose")) cli_verbose = 1;
        else cli_die(EXIT_BADINPUT, "run: unknown option '%s' (see 'doppler run --help')", a);
    }
    size_t plen = 0;
    char *file_text = NULL;
    if (prompt && prompt_file) cli_die(EXIT_BADINPUT, "run: give either -p or -f, not both");
    if (prompt_file) prompt = file_text = cli_read_file(prompt_file, &plen);
    else if (prompt) plen = strlen(prompt);
    else cli_die(EXIT_BADINPUT, "run: no prompt given (use -p TEXT or -f FILE)");
    if (!seed_set) smp.seed = (uint64_t)time(NULL);

    dp_model *m = cli_load_model(model);
    const dp_model_info *info = dp_model_get_info(m);
    debug_resolve(&dbg, m);
    char *chat_text = NULL;
    if (chat) { /* the template carries BOS and special tokens; the reply is printed without the prompt */
        dp_chat_msg msg = {"user", prompt};
        if (memchr(prompt, 0, plen)) cli_die(EXIT_BADINPUT, "run: the prompt contains a NUL byte");
        if (!(chat_text = dp_chat_apply(m, chat_tmpl, &msg, 1, 1))) cli_die_lib(DP_ERR_ARG);
        prompt = chat_text;
        plen = strlen(chat_text);
        add_bos = 0;
        special = 1;
        echo = 0;
    }

    int32_t *toks = NULL;
    int cap = 0, n_tok = cli_tokenize(m, prompt, plen, add_bos, special, &toks, &cap);
    if (n_tok == 0) cli_die(EXIT_BADINPUT, "run: the prompt produced no tokens");

    dp_session *s = dp_session_new(m, &sp);
    if (!s) cli_die_lib(DP_ERR_BACKEND);
    if (profile && dp_session_set_profile(s, 1)) cli_die_lib(DP_ERR_NOMEM);
    prof_acc *prof_prefill = profile ? prof_acc_new() : NULL;
    int n_ctx = dp_session_ctx(s);
    if (n_tok >= n_ctx)
        cli_die(EXIT_BADINPUT, "prompt has %d tokens but the context holds %d (raise --ctx, model maximum %d)", n_tok,
                n_ctx, info->n_ctx_train);
    cli_log(LOG_PIPELINE, "backend %s, context %d, prompt %d tokens", dp_session_backend(s), n_ctx, n_tok);
    cli_log_session(s);
    debug_attach(&dbg, s, m);

    dp_sampler *smpl = dp_sampler_new(&smp, info->n_vocab);
    if (!smpl) cli_die_lib(DP_ERR_ARG);
    for (int i = 0; i < n_tok; i++) dp_sampler_accept(smpl, toks[i]);

    if (echo) {
        fwrite(prompt, 1, plen, stdout);
        fflush(stdout);
    }
    double t_start = dp_time_s(), t_first = 0;
    dp_detok *dt = dp_detok_new(m, 0);
    char buf[1024];
    int n_gen = 0, rc;
    const char *stop = "length";
    int32_t tok;
    /* Evaluate, then pick the next token: on the device unless a debug
     * report needs the host logits. */
#define EVAL_NEXT(tokens, n)                                                      \
    do {                                                                          \
        if (debug_wants_logits(&dbg)) {                                           \
            rc = dp_eval(s, tokens, n);                                           \
            if (!rc) {                                                            \
                debug_step(&dbg, m, dp_logits(s, -1), n_gen);                     \
                tok = dp_sampler_sample(smpl, dp_logits(s, -1));                  \
            }                                                                     \
        } else {                                                                  \
            rc = dp_eval_sample(s, tokens, n, smpl, &tok);                        \
        }                                                                         \
        if (rc == DP_ERR_STOPPED) debug_report_stop(&dbg);                        \
        if (rc) cli_die_lib(rc);                                                  \
    } while (0)
    EVAL_NEXT(toks, n_tok);
    t_first = dp_time_s();
    cli_log_kv_fill(s, "after prefill");
    if (profile) {
        prof_acc_add_session(prof_prefill, s);
        dp_session_reset_profile(s);
    }
    while (n_gen < n_predict) {
        if (!ignore_eos && dp_token_is_eog(m, tok)) {
            stop = "end of generation";
            break;
        }
        dp_sampler_accept(smpl, tok);
        int k = dp_detok_push(dt, tok, buf, sizeof buf);
        fwrite(buf, 1, (size_t)(k > (int)sizeof buf ? (int)sizeof buf : k), stdout);
        fflush(stdout);
        if (++n_gen == n_predict) break;
        if (dp_session_pos(s) >= n_ctx) {
            stop = "context full";
            cli_log(LOG_PIPELINE, "stopped: the context of %d tokens is full", n_ctx);
            break;
        }
        int32_t cur = tok;
        EVAL_NEXT(&cur, 1);
    }
#undef EVAL_NEXT
    int k = dp_detok_flush(dt, buf, sizeof buf);
    fwrite(buf, 1, (size_t)(k > (int)sizeof buf ? (int)sizeof buf : k), stdout);
    printf("\n");
    fflush(stdout);
    double t_end = dp_time_s();
    cli_log_kv_fill(s, "at end");

    dp_session_stats st;
    dp_session_get_stats(s, &st);
    double pre_tps = st.prefill_s > 0 ? st.n_prefill_tokens / st.prefill_s : 0;
    double dec_tps = st.decode_s > 0 ? st.n_decode_tokens / st.decode_s : 0;
    cli_log(LOG_STATS,
            "prompt %d tokens, prefill %.1f tok/s, decode %.1f tok/s (%d generated, stop: %s), first token %.0f ms, "
            "total %.2f s, backend %s, peak RSS %.0f MB",
            n_tok, n_tok > 1 ? pre_tps : n_tok / (t_first - t_start), dec_tps, n_gen, stop, (t_first - t_start) * 1e3,
            t_end - t_start, dp_session_backend(s), dp_peak_rss_bytes() / 1048576.0);

    if (profile) {
        prof_acc *prof_decode = prof_acc_new();
        prof_acc_add_session(prof_decode, s);
        prof_print(stderr, "profile, prefill", prof_prefill, n_tok);
        prof_print(stderr, "profile, decode", prof_decode, (int)st.n_decode_tokens);
        prof_acc_free(prof_decode);
        prof_acc_free(prof_prefill);
    }
    dp_detok_free(dt);
    dp_sampler_free(smpl);
    dp_session_free(s);
    dp_model_free(m);
    free(toks);
    free(file_text);
    debug_free(&dbg);
    free(chat_text);
    return 0;
}
