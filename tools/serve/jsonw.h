/* Growable text buffers and JSON text written into them by hand: the
 * server's per-token chunks are formatted without building cJSON trees. */
#ifndef SERVE_JSONW_H
#define SERVE_JSONW_H

#include <stddef.h>

typedef struct {
    char *s;                 /* NUL-terminated once anything was appended */
    size_t n, cap;
    int oom;                 /* an append failed: the text is incomplete */
} sbuf;

void sb_free(sbuf *b);
void sb_clear(sbuf *b);      /* keeps the memory */
void sb_add(sbuf *b, const char *s, size_t n);
void sb_puts(sbuf *b, const char *s);
void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s[0..n) as a JSON string literal, quotes included. Invalid UTF-8 bytes
 * become U+FFFD so the output is always valid JSON. */
void sb_json_str(sbuf *b, const char *s, size_t n);
/* A log probability; NaN and anything below -9999 (an impossible token's
 * -inf) as -9999, as vLLM writes them, since JSON has no infinities. */
void sb_json_logprob(sbuf *b, double v);

#endif
