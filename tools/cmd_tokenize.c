/* doppler tokenize: text in, token ids / pieces out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static const char *USAGE = "usage: doppler tokenize [-m FILE] [--ids|--pieces] [options] (TEXT | -p TEXT | -f FILE)\n\n"
                           "Without --ids/--pieces every token is printed as 'ID<TAB>PIECE' on its own line.";

/* piece with non-printable bytes, backslashes and (when sep) spaces escaped */
static void print_piece(const char *p, size_t n, int sep) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\') fputs("\\\\", stdout);
        else if (c < 0x20 || c == 0x7f || (sep && c == ' ')) printf("\\x%02x", c);
        else putchar(c);
    }
}

typedef struct {
    int32_t *toks;
    int cap;
    long long n_tokens;
} tok_buf;

static int tokenize(dp_model *m, tok_buf *b, const char *text, size_t len, int add_bos, int special) {
    int n = cli_tokenize(m, text, len, add_bos, special, &b->toks, &b->cap);
    b->n_tokens += n;
    return n;
}

static void print_tokens(dp_model *m, const int32_t *t, int n, int mode) {
    for (int i = 0; i < n; i++) {
        size_t pl;
        const char *p = dp_token_piece(m, t[i], &pl);
        if (mode == 1) {
            printf(i ? " %d" : "%d", t[i]);
        } else if (mode == 2) {
            if (i) putchar(' ');
            print_piece(p, pl, 1);
        } else {
            printf("%d\t", t[i]);
            print_piece(p, pl, 0);
            putchar('\n');
        }
    }
    if (mode) putchar('\n');
}

int cmd_tokenize(int argc, char **argv) {
    const cli_args *A = cli_parse(C_TOKENIZE, "tokenize", USAGE, argc, argv);
    cli_positionals(A, 0, 1, "one TEXT argument (quote it)");
    const char *file = arg_str(A, O_FILE), *text = arg_str(A, O_PROMPT);
    int mode = arg_flag(A, O_PIECES) ? 2 : arg_flag(A, O_IDS) ? 1 : 0;
    int add_bos = !arg_flag(A, O_NO_BOS), special = arg_flag(A, O_PARSE_SPECIAL);
    int whole = arg_flag(A, O_WHOLE), stats = arg_flag(A, O_STATS);
    if (arg_flag(A, O_PIECES) && arg_flag(A, O_IDS)) cli_die(EXIT_BADINPUT, "tokenize: give --ids or --pieces, not both");
    if (A->n_pos && text) cli_die(EXIT_BADINPUT, "tokenize: give either TEXT or -p TEXT, not both");
    if (A->n_pos) text = A->pos[0];
    if (text && file) cli_die(EXIT_BADINPUT, "tokenize: give either TEXT or -f FILE, not both");
    if (!text && !file) cli_die(EXIT_BADINPUT, "tokenize: no input (give TEXT or -f FILE)");
    char *data = NULL;
    size_t len = 0;
    if (file) data = cli_read_file(file, &len);
    dp_model *m = cli_load_model(arg_str(A, O_MODEL));
    tok_buf b = {NULL, 0, 0};
    b.cap = 1024;
    b.toks = malloc(sizeof(int32_t) * (size_t)b.cap);
    double t0 = dp_time_s();
    long lines = 0;
    if (text) {
        int n = tokenize(m, &b, text, strlen(text), add_bos, special);
        print_tokens(m, b.toks, n, mode);
        len = strlen(text);
    } else if (whole) {
        int n = tokenize(m, &b, data, len, add_bos, special);
        print_tokens(m, b.toks, n, mode);
    } else {
        size_t i = 0;
        while (i < len) {
            const char *nl = memchr(data + i, '\n', len - i);
            size_t e = nl ? (size_t)(nl - data) : len;
            int n = tokenize(m, &b, data + i, e - i, add_bos, special);
            print_tokens(m, b.toks, n, mode);
            if (!mode) putchar('\n');
            lines++;
            i = e + 1;
        }
    }
    double dt = dp_time_s() - t0;
    fflush(stdout);
    if (stats)
        fprintf(stderr, "[Stats] %zu bytes%s -> %lld tokens in %.1f ms (%.2f MB/s), peak RSS %.0f MB\n", len,
                lines ? " (per line)" : "", b.n_tokens, dt * 1e3, dt > 0 ? len / dt / 1e6 : 0,
                dp_peak_rss_bytes() / 1048576.0);
    free(b.toks);
    free(data);
    dp_model_free(m);
    cli_finish_stdout();
    return 0;
}
