/* doppler chat: interactive multi-turn chat. Each turn renders the whole
 * conversation with the chat template, tokenizes it, and evaluates only the
 * tokens after the longest prefix already in the KV cache (normally just the
 * new turn). When the conversation no longer fits the context, the oldest
 * turns are dropped. Reads one user message per line, so it works from a
 * pipe; on a terminal with line editing and history (libedit). */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <editline/readline.h>

#include "cli.h"
#include "generate.h"
#include "interrupt.h"

static const char *USAGE =
    "usage: doppler chat [-m FILE] [-sys TEXT] [options]\n\n"
    "Type a message and press Enter; one message per line when stdin is a pipe.\n"
    "Commands: /reset (forget the conversation), /exit (or end of input).\n"
    "Ctrl-C stops the answer; at the prompt it exits. When the conversation outgrows the\n"
    "context, the oldest turns are dropped (a [KV] line says so).\n"
    "A stats line per turn goes to stderr: tokens prefilled, cache size, speed.";

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
    if (!l->v[l->n].content) cli_die(EXIT_RUNTIME, "out of memory");
    l->n++;
}

static void msg_truncate(msg_list *l, int n) {
    while (l->n > n) free((char *)l->v[--l->n].content);
}

/* Removes messages [at, at + k). */
static void msg_remove(msg_list *l, int at, int k) {
    for (int i = at; i < at + k; i++) free((char *)l->v[i].content);
    memmove(l->v + at, l->v + at + k, sizeof *l->v * (size_t)(l->n - at - k));
    l->n -= k;
}

/* The model: -m, else the default one when it carries a chat template, else
 * SmolLM2-135M-Instruct (the default Gemma 3 270M is a base model). */
static dp_model *load_chat_model(const char *path) {
    if (path) return cli_load_model(path);
    dp_model *m = cli_load_model(NULL);
    if (dp_chat_template(m)) return m;
    char alt[4200];
    snprintf(alt, sizeof alt, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", cli_models_dir());
    if (access(alt, R_OK))
        cli_die(EXIT_BADINPUT, "the default model has no chat template (a base model) and %s is missing; run "
                "scripts/fetch-models or pass -m FILE", alt);
    dp_model_free(m);
    cli_note(LOG_LOADER, "the default model has no chat template; chatting with SmolLM2-135M-Instruct (-m picks another)");
    return cli_load_model(alt);
}

/* One line of input without its newline (malloc'ed), or NULL at the end. */
static char *read_message(int tty) {
    cli_interrupt_exit_at_once(1);
    if (cli_interrupted()) return NULL; /* a Ctrl-C just before: the prompt would wait for another */
    char *line = NULL;
    if (tty) {
        line = readline("> ");
        if (line && *line) add_history(line);
    } else {
        size_t cap = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            free(line);
            line = NULL;
        }
    }
    cli_interrupt_exit_at_once(0);
    if (line) {
        size_t n = strlen(line);
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    }
    return line;
}

typedef struct {
    dp_model *m;
    dp_session *s;
    dp_sampler *smpl;
    const cli_args *A;
    char *tmpl;
    msg_list msgs;
    int first;               /* index of the first message that may be dropped (after the system one) */
    int32_t *cache;          /* the tokens in the KV cache */
    int n_cache, n_ctx, turn;
    int think;               /* the answer's <think> block shown dim (generate.h), from the rendered prompt */
    const char *schema;      /* --json-schema: every answer is a JSON value it accepts, or NULL */
    const char *grammar;     /* --grammar: every answer is a text it accepts, or NULL */
    int json_think;          /* the answer's constraint may reason first (DP_THINK_*), from the rendered prompt */
} chat;

/* Renders and tokenizes the conversation, dropping the oldest turns while
 * it leaves less than `room` positions to answer in. Returns the tokens, or
 * NULL when even the newest message alone does not fit. */
static int32_t *fit_conversation(chat *c, int room, int *n_tok) {
    int dropped = 0, dropped_msgs = 0;
    for (;;) {
        char *prompt = dp_chat_apply_vars(c->m, c->tmpl, c->msgs.v, c->msgs.n, 1, arg_str(c->A, O_CHAT_TEMPLATE_KWARGS));
        if (!prompt) cli_die_lib(DP_ERR_ARG);
        if (arg_flag(c->A, O_PRINT_PROMPT)) fprintf(stderr, "%s\n", prompt);
        c->think = cli_think_display(c->A, prompt);
        if (c->schema)
            c->json_think = cli_json_think(prompt, strlen(prompt), c->tmpl ? c->tmpl : dp_chat_template(c->m));
        int32_t *toks = NULL;
        int cap = 0;
        *n_tok = cli_tokenize(c->m, prompt, strlen(prompt), 0, 1, &toks, &cap);
        free(prompt);
        int older = c->msgs.n - 1 - c->first; /* messages before the new one */
        if (*n_tok + room <= c->n_ctx || (older <= 0 && *n_tok < c->n_ctx)) {
            if (dropped)
                cli_note(LOG_KV, "context full: dropped the oldest %d turn%s (%d messages); the conversation now takes "
                         "%d of %d positions", dropped, dropped > 1 ? "s" : "", dropped_msgs, *n_tok, c->n_ctx);
            return toks;
        }
        free(toks);
        if (older <= 0) return NULL;
        /* a user message and the answer to it */
        int k = older >= 2 && !strcmp(c->msgs.v[c->first + 1].role, "assistant") ? 2 : 1;
        msg_remove(&c->msgs, c->first, k);
        dropped++;
        dropped_msgs += k;
    }
}

/* One turn: the user's message is the last one. Returns 0, or -1 when the
 * message alone overflows the context (it is then removed again). */
static int turn(chat *c) {
    const cli_args *A = c->A;
    int n_predict = arg_int(A, O_N_PREDICT);
    int room = n_predict > 0 && n_predict < c->n_ctx / 2 ? n_predict : c->n_ctx / 4;
    int n_tok;
    int32_t *toks = fit_conversation(c, room, &n_tok);
    if (!toks) {
        fprintf(stderr, "doppler: error: the message does not fit the context of %d tokens (raise --ctx-size)\n",
                c->n_ctx);
        msg_truncate(&c->msgs, c->msgs.n - 1);
        return -1;
    }
    c->turn++;
    /* reuse the longest common prefix of the cache */
    int keep = 0;
    while (keep < c->n_cache && keep < n_tok && c->cache[keep] == toks[keep]) keep++;
    if (keep == n_tok) keep--; /* evaluate at least one token to get logits */
    int pos_before = dp_session_pos(c->s);
    if (dp_session_truncate(c->s, keep)) cli_die_lib(DP_ERR_ARG);
    if (keep < pos_before)
        cli_log(LOG_KV, "turn %d: cache truncated from %d to %d positions (the prefix shared with the new prompt)",
                c->turn, pos_before, keep);
    dp_session_stats st0, st1, st2;
    dp_session_get_stats(c->s, &st0);
    dp_session_params sp;
    cli_session_from_args(A, &sp, dp_model_get_info(c->m));
    gen_state g = {.m = c->m, .s = c->s, .smpl = c->smpl, .n_batch = sp.n_batch, .n_predict = n_predict,
                   .render_special = arg_flag(A, O_SPECIAL), .stop = A->v[O_STOP].list,
                   .n_stop = A->v[O_STOP].n_list, .keep_text = 1, .think = c->think,
                   .cons = c->grammar ? cli_grammar_constraint(c->m, c->grammar)
                                      : cli_json_constraint(c->m, c->schema, c->json_think)};
    for (int i = keep; i < n_tok; i++) dp_sampler_accept(c->smpl, toks[i]);
    int32_t tok;
    int rc = gen_prefill(&g, toks + keep, n_tok - keep, &tok);
    if (rc && rc != GEN_INTERRUPTED) cli_die_lib(rc);
    dp_session_get_stats(c->s, &st1);
    char when[64];
    snprintf(when, sizeof when, "turn %d after prefill", c->turn);
    cli_log_kv_fill(c->s, when);
    if (rc == GEN_INTERRUPTED) {
        g.stop_reason = "interrupted";
        msg_truncate(&c->msgs, c->msgs.n - 1); /* no answer: forget the question too */
    } else {
        if ((rc = gen_run(&g, tok))) cli_die_lib(rc);
        msg_push(&c->msgs, "assistant", g.text ? g.text : "");
    }
    cli_emit("\n", 1);
    /* the cache: the prompt, then the generated tokens that were evaluated */
    int pos = dp_session_pos(c->s);
    memcpy(c->cache, toks, sizeof(int32_t) * (size_t)(pos < n_tok ? pos : n_tok));
    if (pos > n_tok) memcpy(c->cache + n_tok, g.toks, sizeof(int32_t) * (size_t)(pos - n_tok));
    c->n_cache = pos;
    free(toks);
    snprintf(when, sizeof when, "turn %d at end", c->turn);
    cli_log_kv_fill(c->s, when);
    dp_session_get_stats(c->s, &st2);
    uint64_t pre = (st1.n_prefill_tokens - st0.n_prefill_tokens) + (st1.n_decode_tokens - st0.n_decode_tokens);
    double pre_s = (st1.prefill_s - st0.prefill_s) + (st1.decode_s - st0.decode_s);
    double dec_s = st2.decode_s - st1.decode_s;
    cli_log(LOG_STATS,
            "turn %d: prefilled %llu tokens (cache %d -> %d, %d reused), generated %d tokens (stop: %s), "
            "prefill %.1f tok/s, decode %.1f tok/s",
            c->turn, (unsigned long long)pre, pos_before, n_tok, keep, g.n_gen, g.stop_reason,
            pre_s > 0 ? pre / pre_s : 0, dec_s > 0 ? (st2.n_decode_tokens - st1.n_decode_tokens) / dec_s : 0);
    gen_free(&g);
    dp_constraint_free(g.cons);
    return 0;
}

int cmd_chat(int argc, char **argv) {
    const cli_args *A = cli_parse(C_CHAT, "chat", USAGE, argc, argv);
    cli_interrupt_install(); /* from here on Ctrl-C stops the work at the next check */
    cli_positionals(A, 0, 0, "");
    dp_sampler_params smp;
    cli_sampler_from_args(A, &smp);
    /* a bad schema, grammar or file fails before the model loads */
    chat c = {.A = A, .schema = cli_json_schema(A), .grammar = cli_grammar(A)};
    c.m = load_chat_model(arg_str(A, O_MODEL));
    const dp_model_info *info = dp_model_get_info(c.m);
    c.tmpl = cli_chat_template(arg_str(A, O_CHAT_TEMPLATE));
    const char *system = arg_str(A, O_SYSTEM);
    if (system) msg_push(&c.msgs, "system", system);
    c.first = c.msgs.n;
    /* fail early on an unknown template */
    msg_push(&c.msgs, "user", "hi");
    char *probe = dp_chat_apply_vars(c.m, c.tmpl, c.msgs.v, c.msgs.n, 1, arg_str(A, O_CHAT_TEMPLATE_KWARGS));
    if (!probe) cli_die_lib(DP_ERR_ARG);
    free(probe);
    msg_truncate(&c.msgs, c.first);
    const char *detected = dp_chat_template_detect(c.m);
    cli_log(LOG_PIPELINE, "chat template: %s", arg_str(A, O_CHAT_TEMPLATE) ? arg_str(A, O_CHAT_TEMPLATE)
                                               : dp_chat_template(c.m) ? "the model's own (Jinja)"
                                               : detected ? detected : "none");

    dp_session_params sp;
    cli_session_from_args(A, &sp, info);
    c.s = dp_session_new(c.m, &sp);
    if (!c.s) cli_die_lib(DP_ERR_BACKEND);
    c.n_ctx = dp_session_ctx(c.s);
    cli_log_session(c.s);
    c.smpl = dp_sampler_new(&smp, info->n_vocab);
    if (!c.smpl) cli_die_lib(DP_ERR_ARG);
    cli_log_seed(A, &smp);
    c.cache = malloc(sizeof(int32_t) * (size_t)c.n_ctx);
    if (!c.cache) cli_die(EXIT_RUNTIME, "out of memory");

    int tty = isatty(STDIN_FILENO), failed = 0;
    char *line = NULL;
    while (!cli_interrupted() && (line = read_message(tty))) {
        if (!strcmp(line, "/exit") || !strcmp(line, "/quit")) {
            free(line);
            break;
        }
        if (!strcmp(line, "/reset")) {
            msg_truncate(&c.msgs, c.first);
            cli_log(LOG_KV, "/reset: cache truncated from %d to 0 of %d positions", dp_session_pos(c.s), c.n_ctx);
            dp_session_truncate(c.s, 0);
            dp_sampler_reset(c.smpl);
            c.n_cache = 0;
            cli_log(LOG_STATS, "conversation reset");
        } else if (*line) {
            msg_push(&c.msgs, "user", line);
            if (turn(&c)) {
                failed = 1;
                if (!tty) { /* a script's conversation cannot go on without this turn */
                    free(line);
                    break;
                }
            }
            cli_interrupt_reset();
        }
        free(line);
        if (cli_emit("", 0)) break; /* stdout is gone */
    }
    if (tty && !line) cli_emit("\n", 1); /* Ctrl-D: end the prompt's line */
    int interrupted = cli_interrupted(); /* while loading, before the first prompt */
    cli_log(LOG_STATS, "%d turns, peak RSS %.0f MB", c.turn, dp_peak_rss_bytes() / 1048576.0);
    free(c.cache);
    free(c.tmpl);
    msg_truncate(&c.msgs, 0);
    free(c.msgs.v);
    dp_sampler_free(c.smpl);
    dp_session_free(c.s);
    dp_model_free(c.m);
    cli_finish_stdout();
    return interrupted ? EXIT_INTERRUPTED : failed ? EXIT_BADINPUT : 0;
}
