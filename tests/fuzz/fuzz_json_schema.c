/* libFuzzer target: constrained JSON output (src/constrain/). The input is
 * a JSON Schema, a NUL, then bytes for the machine (no NUL: the whole input
 * is the schema and a fixed text is fed); the first of those bytes also
 * picks a think mode and whether the values come between tags, up to four
 * in a row (a turn of tool calls), in tagged blocks of free text, or as
 * free text that a first '{' turns into one value (Llama's tool call in
 * "auto"). Every schema must compile or be refused with a one-line reason;
 * the machine must keep its promises on any bytes: at most JM_STACKS
 * readings, a complete text never continued, the token masks equal to
 * walking each token (on a small real vocabulary; a twin constraint walks,
 * as one never asked for a mask does), no crash, leak or hang.
 *
 *   fuzz_json_schema -dict=tests/fuzz/json_schema.dict tests/fuzz/corpus/json_schema */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/json_machine.h"
#include "fuzzlib.h"

static void expect(int cond) {
    if (!cond) abort();
}

static const char TEXT[] = "{\"a\": [1, -2.5e3, \"x\\u00e9\", true, null, {\"b\": {}}], \"c\": \"\xf0\x9f\x98\x80\"}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static fz_vocab vocab[] = {{"qwen3-tiny", "fixture", "tests/fixtures/models/qwen3-tiny.gguf", NULL}};
    static int loaded = -1;
    if (loaded < 0) {
        fz_init();
        loaded = fz_load_vocabs(vocab, 1);
    }
    if (size > 1 << 14) return 0;
    const uint8_t *nul = memchr(data, 0, size);
    size_t slen = nul ? (size_t)(nul - data) : size;
    const uint8_t *text = nul ? nul + 1 : (const uint8_t *)TEXT;
    size_t tlen = nul ? size - slen - 1 : sizeof TEXT - 1;
    uint8_t *schema = fz_copy(data, slen);
    jschema S;
    char err[200];
    if (jschema_compile(&S, (const char *)schema, slen, err, sizeof err)) {
        expect(err[0] && !strchr(err, '\n'));
        free(schema);
        return 0;
    }
    const int think = tlen ? text[0] % 3 : 0, mode = tlen ? text[0] / 3 % 4 : 0, repeat = tlen ? text[0] / 12 % 4 : 0;
    const int tags = mode == 1, free_text = mode == 2, lazy = mode == 3;
    const char *before = tags || free_text ? "<c>" : NULL, *after = tags || free_text ? "</c>" : NULL;
    S.before = before, S.after = after, S.repeat = tags ? repeat + 1 : repeat, S.free_text = free_text;
    S.lazy = lazy;
    jstate st;
    jm_start(&S, &st, think);
    for (size_t i = 0; i < tlen && st.n; i++) {
        const int was_done = jm_done(&S, &st);
        jm_feed(&S, &st, text[i]);
        expect(st.n >= 0 && st.n <= JM_STACKS);
        if (was_done) expect(st.n == 0); /* nothing follows a complete text */
        if (jm_done(&S, &st)) expect(jm_can_end(&S, &st));
    }
    /* the token level: the masks against walking every token, after the text's longest live prefix */
    if (loaded && vocab[0].m) {
        dp_model *m = vocab[0].m;
        /* c masks (prepared); w, fed the same tokens, walks each token it is asked about */
        dp_constraint *c, *w;
        if (free_text) {
            c = dp_constraint_json_tagged(m, (const char *)schema, slen, before, after, repeat);
            w = dp_constraint_json_tagged(m, (const char *)schema, slen, before, after, repeat);
        } else if (lazy) {
            c = dp_constraint_json_lazy(m, (const char *)schema, slen, think);
            w = dp_constraint_json_lazy(m, (const char *)schema, slen, think);
        } else {
            const int r = tags ? repeat + 1 : 1;
            c = dp_constraint_json_repeat(m, (const char *)schema, slen, think, before, after, r);
            w = dp_constraint_json_repeat(m, (const char *)schema, slen, think, before, after, r);
        }
        fz_check_masks(m, c, w, tlen);
    }
    jschema_free(&S);
    free(schema);
    return 0;
}
