/* doppler perplexity: llama.cpp's method.
 *
 * The whole text is tokenized once (with BOS when the model adds one) and cut
 * into floor(n / ctx) non-overlapping windows of ctx tokens; when the model
 * adds BOS the first token of each window is replaced by BOS. Each window is
 * evaluated from an empty cache with the logits of every position kept, and
 * only its second half is scored: the logits at positions ctx/2 .. ctx-2
 * predict the tokens at ctx/2+1 .. ctx-1. PPL = exp(mean NLL); the error is
 * PPL * sqrt(var(NLL) / (N - 1)) over the N scored tokens. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "interrupt.h"

static const char *USAGE = "usage: doppler perplexity [-m FILE] (-f TEXT | --tokens FILE) [options]\n\n"
                           "Prints the running perplexity after each window, then 'PPL = X +/- Y'.";

static int32_t *read_token_file(const char *path, int n_vocab, int *n_out) {
    size_t len;
    char *txt = cli_read_file(path, &len);
    int cap = 1024, n = 0;
    int32_t *t = malloc(sizeof(int32_t) * (size_t)cap);
    char *p = txt;
    for (;;) {
        while (*p && isspace((unsigned char)*p)) p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || (*end && !isspace((unsigned char)*end)) || v < 0 || v >= n_vocab)
            cli_die(EXIT_BADINPUT, "%s: token %d is not an id in [0, %d)", path, n + 1, n_vocab);
        if (n == cap) {
            cap *= 2;
            t = realloc(t, sizeof(int32_t) * (size_t)cap);
            if (!t) cli_die(EXIT_RUNTIME, "out of memory");
        }
        t[n++] = (int32_t)v;
        p = end;
    }
    free(txt);
    *n_out = n;
    return t;
}

/* -log softmax(logits)[tok], as llama.cpp computes it: float max, double sum
 * of expf(l - max). */
static double token_nll(const float *logits, int n_vocab, int tok) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += expf(logits[i] - mx);
    return (double)mx + log(sum) - (double)logits[tok];
}

int cmd_perplexity(int argc, char **argv) {
    const cli_args *A = cli_parse(C_PPL, "perplexity", USAGE, argc, argv);
    cli_interrupt_install(); /* from here on Ctrl-C stops the work at the next check */
    cli_positionals(A, 0, 0, "");
    const char *text_path = arg_str(A, O_FILE), *tok_path = arg_str(A, O_TOKENS);
    int ctx = arg_int(A, O_CTX), max_chunks = arg_int(A, O_CHUNKS), batch = arg_int(A, O_BATCH);
    if (!text_path && !tok_path) cli_die(EXIT_BADINPUT, "perplexity: no text given (use -f TEXT or --tokens FILE)");
    if (text_path && tok_path) cli_die(EXIT_BADINPUT, "perplexity: give either -f or --tokens, not both");

    dp_model *m = cli_load_model(arg_str(A, O_MODEL));
    const dp_model_info *in = dp_model_get_info(m);
    const int V = in->n_vocab;
    if (ctx > in->n_ctx_train)
        cli_die(EXIT_BADINPUT, "perplexity: --ctx-size %d exceeds the model's context %d", ctx, in->n_ctx_train);

    int n_tok = 0;
    int32_t *toks = NULL;
    double t0 = dp_time_s();
    if (tok_path) {
        toks = read_token_file(tok_path, V, &n_tok);
    } else {
        size_t len;
        char *text = cli_read_file(text_path, &len);
        int cap = 0;
        n_tok = cli_tokenize(m, text, len, 1, 0, &toks, &cap);
        free(text);
    }
    int add_bos = in->add_bos && in->bos_id >= 0;
    if (n_tok == 0) cli_die(EXIT_BADINPUT, "perplexity: %s holds no tokens", tok_path ? tok_path : text_path);
    if (n_tok < 2 * ctx)
        cli_die(EXIT_BADINPUT, "perplexity: the text has %d tokens; a context of %d needs at least %d", n_tok, ctx,
                2 * ctx);
    int n_chunks = n_tok / ctx;
    if (max_chunks && max_chunks < n_chunks) n_chunks = max_chunks;

    dp_session_params sp;
    cli_session_from_args(A, &sp, in);
    sp.n_ctx = ctx;
    sp.n_batch = batch ? (batch < ctx ? batch : ctx) : (ctx < 512 ? ctx : 512);
    sp.logits_all = 1;
    dp_session *s = dp_session_new(m, &sp);
    if (!s) cli_die_lib(DP_ERR_BACKEND);
    cli_log_session(s);
    const int nb = sp.n_batch, first = ctx / 2;
    fprintf(stderr,
            "perplexity: %d tokens (tokenized in %.2f s), %d chunks of %d, scoring the last %d tokens of each, "
            "batch %d, backend %s, BOS %s\n",
            n_tok, dp_time_s() - t0, n_chunks, ctx, ctx - 1 - first, nb, dp_session_backend(s),
            add_bos ? "replaces each window's first token" : "none");

    int32_t *win = malloc(sizeof(int32_t) * (size_t)ctx);
    double nll = 0, nll2 = 0, nll_done = 0, nll2_done = 0;
    long count = 0, count_done = 0;
    double t_start = dp_time_s();
    int done = 0;
    for (int c = 0; c < n_chunks && !cli_interrupted(); c++) {
        memcpy(win, toks + (size_t)c * ctx, sizeof(int32_t) * (size_t)ctx);
        if (add_bos) win[0] = in->bos_id;
        dp_session_truncate(s, 0);
        for (int b0 = 0; b0 < ctx && !cli_interrupted(); b0 += nb) {
            int n = ctx - b0 < nb ? ctx - b0 : nb;
            int rc = dp_eval(s, win + b0, n);
            if (rc) cli_die_lib(rc);
            /* score positions first .. ctx-2 that fall in this batch */
            for (int j = b0 > first ? b0 : first; j < b0 + n && j < ctx - 1; j++) {
                double v = token_nll(dp_logits(s, j - b0), V, win[j + 1]);
                nll += v;
                nll2 += v * v;
                count++;
            }
        }
        if (cli_interrupted()) break; /* a window half done is not scored */
        done++;
        nll_done = nll;
        nll2_done = nll2;
        count_done = count;
        if (c == 0) {
            double dt = dp_time_s() - t_start;
            fprintf(stderr, "perplexity: %.2f s per chunk, ETA %.1f min\n", dt, dt * (n_chunks - 1) / 60);
        }
        printf("[%d]%.4f,", c + 1, exp(nll_done / (double)count_done));
        fflush(stdout);
    }
    printf("\n");
    fprintf(stderr, "perplexity: %ld tokens scored in %.1f s%s\n", count_done, dp_time_s() - t_start,
            done < n_chunks ? " (interrupted)" : "");
    if (count_done) {
        double mean = nll_done / (double)count_done, var = nll2_done / (double)count_done - mean * mean;
        double ppl = exp(mean), err = var > 0 && count_done > 1 ? ppl * sqrt(var / (double)(count_done - 1)) : 0;
        printf("PPL = %.4f +/- %.5f%s\n", ppl, err, done < n_chunks ? " (over the windows done)" : "");
    }
    free(win);
    free(toks);
    dp_session_free(s);
    dp_model_free(m);
    cli_finish_stdout();
    return done < n_chunks ? EXIT_INTERRUPTED : 0;
}
