/* libFuzzer target: GBNF grammars (src/constrain/gbnf.c, gbnf_machine.c),
 * which the server takes from requests. The input is a grammar, a NUL,
 * then bytes (no NUL: the whole input is the grammar and a fixed text is
 * used). Every grammar must compile or be refused with a one-line reason
 * naming a line and column; on one that compiles the machine must keep
 * its promises on the bytes and on a walk the bytes steer through the
 * bytes it allows (which, fed again, lives to its end): at most GM_STACKS
 * readings in GM_POOL positions, a done text never continued; and the
 * token masks must equal walking each token (on a small real
 * vocabulary; a twin constraint walks, as one never asked for a mask
 * does). No crash, leak or hang.
 *
 *   fuzz_gbnf -dict=tests/fuzz/gbnf.dict tests/fuzz/corpus/gbnf */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/gbnf.h"
#include "fuzzlib.h"

static void expect(int cond) {
    if (!cond) abort();
}

static const char TEXT[] = "{\"a\": [1, -2.5, \"x\\n\u00e9\"], \"b\": yes} 1+2*(3) \xf0\x9f\x98\x80";

static gstate st, tmp;

static void check_state(void) {
    expect(st.n >= 0 && st.n <= GM_STACKS && st.used <= GM_POOL && st.off[st.n] == st.used);
    if (gm_done(&st)) expect(gm_can_end(&st));
}

/* Feeds p[0 .. n) byte by byte, checking the machine's promises at each. */
static void feed_checked(const gbnf *G, const uint8_t *p, size_t n) {
    gm_start(G, &st);
    check_state();
    for (size_t i = 0; i < n && st.n; i++) {
        const int was_done = gm_done(&st);
        const int k = gm_feed(G, &st, p[i]);
        expect(k == st.n);
        check_state();
        if (was_done) expect(st.n == 0); /* nothing follows a done text */
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fz_vocab vocab[] = {{"qwen3-tiny", "fixture", "tests/fixtures/models/qwen3-tiny.gguf", NULL}};
    static int loaded = -1;
    if (loaded < 0) {
        fz_init();
        loaded = fz_load_vocabs(vocab, 1);
    }
    if (size > 1 << 14) return 0;
    const uint8_t *nul = memchr(data, 0, size);
    const size_t glen = nul ? (size_t)(nul - data) : size;
    const uint8_t *text = nul ? nul + 1 : (const uint8_t *)TEXT;
    const size_t tlen = nul ? size - glen - 1 : sizeof TEXT - 1;
    uint8_t *grammar = fz_copy(data, glen);
    gbnf G;
    char err[240];
    if (gbnf_compile(&G, (const char *)grammar, glen, err, sizeof err)) {
        expect(err[0] && !strchr(err, '\n') && strstr(err, "line "));
        expect(dp_gbnf_check((const char *)grammar, glen) == DP_ERR_ARG);
        free(grammar);
        return 0;
    }
    expect(G.root >= 0 && G.root < G.n_rules);
    /* the bytes as they are */
    feed_checked(&G, text, tlen);
    /* a walk the bytes steer: each picks among the bytes the state allows */
    uint8_t walk[256];
    size_t wn = 0;
    gm_start(&G, &st);
    for (size_t i = 0; i < tlen && wn < sizeof walk && !gm_done(&st); i++) {
        int ok[256], nok = 0;
        for (int b = 0; b < 256; b++)
            if (gm_feed_to(&G, &st, (uint8_t)b, &tmp)) ok[nok++] = b;
        if (!nok) break;
        const int b = ok[text[i] % nok];
        expect(gm_feed(&G, &st, (uint8_t)b) > 0);
        walk[wn++] = (uint8_t)b;
    }
    /* fed again from the start, the walk lives to its end */
    feed_checked(&G, walk, wn);
    expect(st.n > 0 || !wn);
    /* the token level: the masks against walking every token, along the walk's first tokens */
    if (loaded && vocab[0].m) {
        dp_model *m = vocab[0].m;
        dp_constraint *c = dp_constraint_gbnf(m, (const char *)grammar, glen);
        dp_constraint *w = dp_constraint_gbnf(m, (const char *)grammar, glen);
        fz_check_masks(m, c, w, tlen);
    }
    gbnf_free(&G);
    free(grammar);
    return 0;
}
