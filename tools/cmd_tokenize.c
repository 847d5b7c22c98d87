/* doppler tokenize: text in, token ids / pieces out. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void usage(void) {
    printf("usage: doppler tokenize [-m FILE] [--ids|--pieces] [--no-bos] [--special] (TEXT | -f FILE)\n\n"
           "  -m, --model FILE   GGUF model whose tokenizer to use (default: %s)\n"
           "  --ids              print only the ids, separated by single spaces, one line per input\n"
           "  --pieces           print only the vocabulary pieces, one line per input\n"
           "  --no-bos           do not add BOS (even when the model adds one by default)\n"
           "  --special          match special-token strings (e.g. <start_of_turn>) as single tokens\n"
           "  -f, --file FILE    tokenize each line of FILE ('-' = stdin) separately\n"
           "  --whole            with -f: tokenize the whole file as one text\n"
           "  --stats            print the token count and the time taken on stderr\n"
           "  --log-tags LIST, --verbose   logs on stderr (e.g. Loader: model load time)\n"
           "Without --ids/--pieces every token is printed as 'ID<TAB>PIECE' on its own line.\n",
           cli_default_model());
}

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
    const char *model = NULL, *file = NULL, *text = NULL;
    int mode = 0, add_bos = 1, special = 0, whole = 0, stats = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "-m") || !strcmp(a, "--model")) model = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--ids")) mode = 1;
        else if (!strcmp(a, "--pieces")) mode = 2;
        else if (!strcmp(a, "--no-bos")) add_bos = 0;
        else if (!strcmp(a, "--special")) special = 1;
        else if (!strcmp(a, "-f") || !strcmp(a, "--file")) file = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--whole")) whole = 1;
        else if (!strcmp(a, "--stats")) stats = 1;
        else if (!strcmp(a, "--log-tags")) cli_set_log_tags(cli_value(argc, argv, &i));
        else if (!strcmp(a, "--verbose")) cli_verbose = 1;
        else if (a[0] == '-' && a[1]) cli_die(EXIT_BADINPUT, "tokenize: unknown option '%s' (see 'doppler tokenize --help')", a);
        else if (text) cli_die(EXIT_BADINPUT, "tokenize: give one TEXT argument (quote it), got '%s' too", a);
        else text = a;
    }
    if (text && file) cli_die(EXIT_BADINPUT, "tokenize: give either TEXT or -f FILE, not both");
    if (!text && !file) cli_die(EXIT_BADINPUT, "tokenize: no input (give TEXT or -f FILE)");
    char *data = NULL;
    size_t len = 0;
    if (file) {
        if (!strcmp(file, "-")) {
            size_t cap = 1 << 16;
            data = malloc(cap + 1);
            size_t k;
            while (data && (k = fread(data + len, 1, cap - len, stdin)) > 0)
                if ((len += k) == cap) data = realloc(data, (cap *= 2) + 1);
            if (!data) cli_die(EXIT_RUNTIME, "out of memory reading stdin");
            data[len] = 0;
        } else {
            data = cli_read_file(file, &len);
        }
    }
    dp_model *m = cli_load_model(model);
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
    return 0;
}
