/* Text to token ids for the commands: every caller of dp_tokenize in the
 * CLI goes through here, so a result larger than the buffer is always
 * handled. The count is not bounded by the text's bytes: a byte-fallback
 * vocabulary spells a character (or the space marker U+2581) missing from
 * it as one token per byte. */
#include <stdlib.h>

#include "cli.h"

int cli_tokenize(const dp_model *m, const char *text, size_t len, int add_bos, int special, int32_t **buf, int *cap) {
    int guess = (int)(len < (1u << 30) ? len : (1u << 30)) + 16;
    for (int pass = 0;; pass++) {
        if (*cap < guess) {
            int32_t *b = realloc(*buf, sizeof(int32_t) * (size_t)guess);
            if (!b) cli_die(EXIT_RUNTIME, "out of memory for %d tokens", guess);
            *buf = b;
            *cap = guess;
        }
        int n = dp_tokenize(m, text, len, add_bos, special, *buf, *cap);
        if (n < 0) cli_die_lib(n);
        if (n <= *cap) return n;
        if (pass) cli_die(EXIT_RUNTIME, "tokenizer: %d tokens did not fit a buffer of %d", n, *cap);
        guess = n;
    }
}
