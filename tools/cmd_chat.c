/* doppler chat: interactive multi-turn chat. Each turn renders the whole
 * conversation with the chat template, tokenizes it, and evaluates only the
 * tokens after the longest prefix already in the KV cache (normally just the
 * new turn). Reads one user message per line, so it works from a pipe. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

static void usage(void) {
    printf("usage: doppler chat [-m FILE] [--system TEXT] [options]\n\n"
           "Type a message and press Enter; one message per line when stdin is a pipe.\n"
           "Commands: /reset (forget the conversation), /exit (or end of input).\n\n"
           "  -m, --model FILE         GGUF model (default: %s)\n"
           "  --system TEXT            system prompt\n"
           "  --chat-template NAME     gemma, chatml or llama3 (default: detected from the model)\n"
           "  -n, --n-predict N        most tokens per reply (default 512)\n"
           "  --temp T                 temperature, 0 = greedy (default 0.8)\n"
           "  --top-k K                (default 40)\n"
           "  --top-p P                (default 0.95)\n"
           "  --min-p P                (default 0.05)\n"
           "  --repeat-penalty R       (default 1)\n"
           "  --seed S                 sampling seed (default: from the clock)\n"
           "  --ctx N                  context size (default 4096, capped by the model's)\n"
           "  -t, --threads N          CPU threads (default: all cores)\n"
           "  --backend cpu|cuda|auto  compute backend\n"
           "  --log-tags LIST, --verbose\n"
           "A stats line per turn goes to stderr: tokens prefilled, cache size, speed.\n",
           cli_default_model());
}

typedef struct {
    dp_chat_msg *v;
    int n, cap;
} msg_list;

static void msg_push(msg_list *l, const char *role, const char *content) {
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 8;
        l->v = realloc(l->v, sizeof *l->v * (size_t)l->cap);
        if (!l->v) cli_die(EXIT_RUNTIME, "out of memory");
    }
    l->v[l->n].role = role;
    l->v[l->n].content = strdup(content);
    l->n++;
}

static void msg_truncate(msg_list *l, int n) {
    while (l->n > n) free((char *)l->v[--l->n].content);
}

static int32_t *tokenize_all(dp_model *m, const char *text, int *n_out) {
    int32_t *t = NULL;
    int cap = 0;
    *n_out = cli_tokenize(m, text, strlen(text), 0, 1, &t, &cap);
    return t;
}

int cmd_chat(int argc, char **argv) {
    const char *model = NULL, *system = NULL, *tmpl = NULL;
    int n_predict = 512, seed_set = 0;
    dp_session_params sp;
    dp_sampler_params smp;
    dp_session_params_default(&sp);
    dp_sampler_params_default(&smp);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--system")) system = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--chat-template")) tmpl = cli_value(argc, argv, &i);
        else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) n_predict = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 24);
        else if (cli_sampler_flag(argc, argv, &i, &smp, &seed_set)) continue;
        else if (!strcmp(a, "--ctx")) sp.n_ctx = cli_int(a, cli_value(argc, argv, &i), 1, 1 << 24);
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) sp.n_threads = cli_int(a, cli_value(argc, argv, &i), 1, 1024);
        else if (!strcmp(a, "--backend")) sp.backend = cli_backend(cli_value(argc, argv, &i), 1);
        else if (!strcmp(a, "--log-tags")) cli_set_log_tags(cli_value(argc, argv, &i));
        else if (!strcmp(a, "--verbose")) cli_verbose = 1;
        else cli_die(EXIT_BADINPUT, "chat: unknown option '%s' (see 'doppler chat --help')", a);
    }
    if (!seed_set) smp.seed = (uint64_t)time(NULL);

    dp_model *m = cli_load_model(model);
    const dp_model_info *info = dp_model_get_info(m);
    msg_list msgs = {0};
    if (system) msg_push(&msgs, "system", system);
    /* fail early on an unknown template */
    char *probe = dp_chat_apply(m, tmpl, msgs.v, msgs.n, 1);
    if (!probe) cli_die_lib(DP_ERR_ARG);
    free(probe);
    cli_log(LOG_PIPELINE, "chat template %s", tmpl ? tmpl : dp_chat_template_detect(m));

    dp_session *s = dp_session_new(m, &sp);
    if (!s) cli_die_lib(DP_ERR_BACKEND);
    int n_ctx = dp_session_ctx(s);
    cli_log_session(s);
    dp_sampler *smpl = dp_sampler_new(&smp, info->n_vocab);
    if (!smpl) cli_die_lib(DP_ERR_ARG);

    int interactive = isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
    int32_t *cache = malloc(sizeof(int32_t) * (size_t)n_ctx); /* the tokens in the KV cache */
    int n_cache = 0, turn = 0;
    size_t reply_cap = 4096;
    char *reply = malloc(reply_cap), *line = NULL;
    size_t line_cap = 0;
    for (;;) {
        if (interactive) {
            fputs("> ", stdout);
            fflush(stdout);
        }
        ssize_t ll = getline(&line, &line_cap, stdin);
        if (ll < 0) break;
        while (ll > 0 && (line[ll - 1] == '\n' || line[ll - 1] == '\r')) line[--ll] = 0;
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) break;
        if (!strcmp(line, "/reset")) {
            msg_truncate(&msgs, system ? 1 : 0);
            cli_log(LOG_KV, "/reset: cache truncated from %d to 0 of %d positions", dp_session_pos(s), n_ctx);
            dp_session_truncate(s, 0);
            dp_sampler_reset(smpl);
            n_cache = 0;
            cli_log(LOG_STATS, "conversation reset");
            continue;
        }
        if (ll == 0) continue;
        turn++;
        int n_msgs_before = msgs.n;
        msg_push(&msgs, "user", line);
        char *prompt = dp_chat_apply(m, tmpl, msgs.v, msgs.n, 1);
        if (!prompt) {
            fprintf(stderr, "doppler: error: %s\n", dp_last_error());
            msg_truncate(&msgs, n_msgs_before);
            continue;
        }
        int n_tok;
        int32_t *toks = tokenize_all(m, prompt, &n_tok);
        free(prompt);
        if (n_tok >= n_ctx) {
            fprintf(stderr, "doppler: error: the conversation has %d tokens but the context holds %d; /reset to start "
                    "over (or raise --ctx)\n", n_tok, n_ctx);
            msg_truncate(&msgs, n_msgs_before);
            free(toks);
            continue;
        }
        /* reuse the longest common prefix of the cache */
        int keep = 0;
        while (keep < n_cache && keep < n_tok && cache[keep] == toks[keep]) keep++;
        if (keep == n_tok) keep--; /* evaluate at least one token to get logits */
        int pos_before = dp_session_pos(s);
        if (dp_session_truncate(s, keep)) cli_die_lib(DP_ERR_ARG);
        if (keep < pos_before)
            cli_log(LOG_KV, "turn %d: cache truncated from %d to %d positions (the prefix shared with the new prompt)",
                    turn, pos_before, keep);
        dp_session_stats st0, st1, st2;
        dp_session_get_stats(s, &st0);
        int rc = dp_eval(s, toks + keep, n_tok - keep);
        if (rc) cli_die_lib(rc);
        memcpy(cache + keep, toks + keep, sizeof(int32_t) * (size_t)(n_tok - keep));
        n_cache = n_tok;
        for (int i = keep; i < n_tok; i++) dp_sampler_accept(smpl, toks[i]);
        dp_session_get_stats(s, &st1);
        free(toks);
        char when[64];
        snprintf(when, sizeof when, "turn %d after prefill", turn);
        cli_log_kv_fill(s, when);

        dp_detok *dt = dp_detok_new(m, 0);
        size_t rl = 0;
        int n_gen = 0;
        const char *stop = "length";
        char buf[512];
        for (;;) {
            int32_t tok = dp_sampler_sample(smpl, dp_logits(s, -1));
            if (dp_token_is_eog(m, tok)) {
                stop = "end of turn";
                break;
            }
            dp_sampler_accept(smpl, tok);
            int k = dp_detok_push(dt, tok, buf, sizeof buf);
            if (k > (int)sizeof buf) k = sizeof buf;
            fwrite(buf, 1, (size_t)k, stdout);
            fflush(stdout);
            if (rl + (size_t)k + 1 > reply_cap) reply = realloc(reply, reply_cap = 2 * (rl + (size_t)k + 1));
            memcpy(reply + rl, buf, (size_t)k);
            rl += (size_t)k;
            if (++n_gen >= n_predict) break;
            if (dp_session_pos(s) >= n_ctx) {
                stop = "context full";
                break;
            }
            rc = dp_eval(s, &tok, 1);
            if (rc) cli_die_lib(rc);
            cache[n_cache++] = tok;
        }
        int k = dp_detok_flush(dt, buf, sizeof buf);
        if (k > (int)sizeof buf) k = sizeof buf;
        fwrite(buf, 1, (size_t)k, stdout);
        if (rl + (size_t)k + 1 > reply_cap) reply = realloc(reply, reply_cap = rl + (size_t)k + 1);
        memcpy(reply + rl, buf, (size_t)k);
        rl += (size_t)k;
        reply[rl] = 0;
        dp_detok_free(dt);
        fputs("\n", stdout);
        fflush(stdout);
        msg_push(&msgs, "assistant", reply);
        snprintf(when, sizeof when, "turn %d at end", turn);
        cli_log_kv_fill(s, when);
        dp_session_get_stats(s, &st2);
        uint64_t pre = (st1.n_prefill_tokens - st0.n_prefill_tokens) + (st1.n_decode_tokens - st0.n_decode_tokens);
        double pre_s = (st1.prefill_s - st0.prefill_s) + (st1.decode_s - st0.decode_s);
        double dec_s = st2.decode_s - st1.decode_s;
        cli_log(LOG_STATS,
                "turn %d: prefilled %llu tokens (cache %d -> %d, %d reused), generated %d tokens (stop: %s), "
                "prefill %.1f tok/s, decode %.1f tok/s",
                turn, (unsigned long long)pre, pos_before, n_tok, keep, n_gen, stop, pre_s > 0 ? pre / pre_s : 0,
                dec_s > 0 ? (st2.n_decode_tokens - st1.n_decode_tokens) / dec_s : 0);
    }
    cli_log(LOG_STATS, "%d turns, peak RSS %.0f MB", turn, dp_peak_rss_bytes() / 1048576.0);
    free(line);
    free(reply);
    free(cache);
    msg_truncate(&msgs, 0);
    free(msgs.v);
    dp_sampler_free(smpl);
    dp_session_free(s);
    dp_model_free(m);
    return 0;
}
