/* libFuzzer target: doppler serve's tool-call split (tools/serve/toolcall.c,
 * compiled in), which reads what a model wrote, so any bytes. The first
 * byte picks the format (the <tool_call> blocks or Llama's JSON answer),
 * whether the split is "sure" (a constrained answer: calls streamed as they
 * are written) and how the text is cut into pieces; the rest is the
 * answer. The promises checked:
 *   - no crash, leak or hang;
 *   - a split gives the same content and calls however the text is cut,
 *     and whether its deltas are taken as it goes or only at the end (a
 *     stream splits as the answer not streamed does, a sure split's call
 *     that the answer cuts too);
 *   - the deltas a stream sends add up to the calls: each call's first
 *     delta carries its name, the fragments after it join into its
 *     arguments, in order, and nothing is sent twice or left out (a call
 *     cut short included: its start sent, it is one of the calls);
 *   - a sure split, which writes the arguments out as it reads them, gives
 *     the arguments an unsure one (a whole parse by cJSON) gives, wherever
 *     the two find the same calls in the same text (they may differ where
 *     a constraint would not have let the text through: a block with both
 *     "arguments" and "parameters", a </tool_call> in a string, JSON
 *     broken after the name, a \u escape without four hex digits, which
 *     cJSON reads as U+0000). */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/jsonw.c"
#include "serve/toolcall.c"

static void expect(int cond) {
    if (!cond) abort();
}

enum { MAX_KEPT = 64 };

/* What a client rebuilds from the deltas: each call's name and arguments
 * (the first MAX_KEPT calls'; n counts them all). */
typedef struct {
    sbuf name[MAX_KEPT], args[MAX_KEPT];
    int n;
} joined;

static void drain(call_split *c, joined *j) {
    call_delta d;
    while (calls_next(c, &d)) {
        /* a call's first delta comes once, with its name, before its fragments; then the next call's */
        expect(d.name ? d.index == j->n : d.index == j->n - 1);
        if (d.name) j->n++;
        if (d.index >= MAX_KEPT) continue;
        if (d.name) sb_puts(&j->name[d.index], d.name);
        sb_add(&j->args[d.index], d.args, d.n);
    }
}

/* Splits text cut at the pieces' lengths (taken from cuts, cycled; 0: whole,
 * the deltas taken only at the end, as for an answer not streamed). */
static void split(const char *text, size_t n, int format, int sure, const uint8_t *cuts, size_t n_cuts,
                  call_split *c, sbuf *content, joined *j) {
    calls_init(c, format);
    c->sure = sure;
    size_t at = 0, k = 0;
    while (at < n) {
        size_t len = n_cuts ? 1 + cuts[k++ % n_cuts] % 17 : n;
        if (len > n - at) len = n - at;
        calls_feed(c, text + at, len, content);
        if (n_cuts) drain(c, j);
        at += len;
    }
    calls_flush(c, content);
    drain(c, j);
}

/* Whether text holds a \u escape not followed by four hex digits. */
static int bad_u_escape(const char *text, size_t n) {
    for (size_t i = 0; i + 1 < n; i++) {
        if (text[i] != '\\' || text[i + 1] != 'u') continue;
        for (size_t k = i + 2; k < i + 6; k++)
            if (k >= n || !isxdigit((unsigned char)text[k])) return 1;
    }
    return 0;
}

static void free_joined(joined *j) {
    for (int i = 0; i < MAX_KEPT; i++) sb_free(&j->name[i]), sb_free(&j->args[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || size > 4096) return 0;
    const int format = data[0] & 1 ? TOOLS_JSON : TOOLS_TAGGED, sure = (data[0] >> 1) & 1;
    const size_t n_cuts = data[0] >> 2 & 7; /* the first bytes of the text set the cuts too */
    const char *text = (const char *)data + 1;
    const size_t n = size - 1;

    call_split a, b;
    sbuf ca = {0}, cb = {0};
    joined ja, jb;
    memset(&ja, 0, sizeof ja);
    memset(&jb, 0, sizeof jb);
    split(text, n, format, sure, data + 1, n_cuts < n ? n_cuts : n, &a, &ca, &ja);
    split(text, n, format, sure, NULL, 0, &b, &cb, &jb);
    if (!a.oom && !b.oom) {
        /* the deltas are the calls, a call cut short too */
        expect(ja.n == a.n_calls && jb.n == b.n_calls);
        for (int i = 0; i < a.n_calls && i < MAX_KEPT; i++) {
            expect(!strcmp(ja.name[i].s ? ja.name[i].s : "", a.calls[i].name));
            expect(ja.args[i].n == strlen(a.calls[i].arguments) &&
                   !memcmp(ja.args[i].s ? ja.args[i].s : "", a.calls[i].arguments, ja.args[i].n));
        }
        /* cut or whole, streamed or not, the same split */
        expect(ca.n == cb.n && (!ca.n || !memcmp(ca.s, cb.s, ca.n)) && a.n_calls == b.n_calls && a.cut == b.cut);
        expect(!a.cut || (sure && a.n_calls));
        for (int i = 0; i < a.n_calls; i++)
            expect(!strcmp(a.calls[i].name, b.calls[i].name) && !strcmp(a.calls[i].arguments, b.calls[i].arguments));
    }
    if (sure && !a.oom) { /* against the unsure split of the same text */
        call_split u;
        sbuf cu = {0};
        joined ju;
        memset(&ju, 0, sizeof ju);
        split(text, n, format, 0, NULL, 0, &u, &cu, &ju);
        const int both_words = memmem(text, n, "\"arguments\"", 11) && memmem(text, n, "\"parameters\"", 12);
        if (!u.oom && !both_words && !bad_u_escape(text, n) && u.n_calls == a.n_calls && cu.n == ca.n && (!cu.n || !memcmp(cu.s, ca.s, cu.n)))
            for (int i = 0; i < a.n_calls; i++)
                expect(!strcmp(a.calls[i].name, u.calls[i].name) && !strcmp(a.calls[i].arguments, u.calls[i].arguments));
        calls_free(&u);
        sb_free(&cu);
        free_joined(&ju);
    }
    calls_free(&a), calls_free(&b);
    sb_free(&ca), sb_free(&cb);
    free_joined(&ja), free_joined(&jb);
    return 0;
}
