/* libFuzzer target: the model loader on arbitrary bytes, from memory. A
 * model it accepts must work: its tokenizer encodes and decodes a text with
 * special tokens, its chat template is detected and applied, and a tiny CPU
 * session evaluates two tokens (one batch) and one more (a decode step),
 * whose logits are read in full. */
#include <string.h>

#include "fuzzlib.h"
#include "util.h"

static volatile float g_sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = fz_copy(data, size);
    dp_set_error(DP_OK, "sentinel");
    dp_model *m = dp_model_load_memory(buf, size, "fuzz");
    if (!m) {
        if (!strcmp(dp_last_error(), "sentinel")) abort(); /* every failure says why */
        free(buf);
        return 0;
    }
    const dp_model_info *in = dp_model_get_info(m);
    /* the tokenizer and template built from the same untrusted metadata */
    static const char text[] = "Hello wor\xc3\xa9ld <bos><|im_start|> \xe2\x96\x81x  12\n";
    int32_t ids[64];
    int n = dp_tokenize(m, text, sizeof text - 1, 1, 1, ids, 64);
    if (n < 0 || n > 64) abort(); /* valid text always tokenizes (64: one token per byte at most) */
    dp_detok *d = dp_detok_new(m, 1);
    char piece[256];
    for (int i = 0; d && i < n; i++) {
        if (ids[i] < 0 || ids[i] >= in->n_vocab || dp_detok_push(d, ids[i], piece, sizeof piece) < 0) abort();
        if (dp_token_to_bytes(m, ids[i], 1, piece, sizeof piece) < 0) abort();
    }
    if (d) dp_detok_flush(d, piece, sizeof piece);
    dp_detok_free(d);
    dp_chat_msg msgs[2] = {{"user", "hi"}, {"assistant", "yo"}};
    free(dp_chat_apply(m, NULL, msgs, 2, 1));
    dp_session_params sp;
    dp_session_params_default(&sp);
    sp.backend = DP_BACKEND_CPU;
    sp.n_ctx = 8;
    sp.n_batch = 4;
    sp.n_threads = 1;
    dp_session *s = dp_session_new(m, &sp);
    if (s) {
        int32_t toks[3];
        for (int i = 0; i < 3; i++) toks[i] = (int32_t)((size > (size_t)i ? data[size - 1 - i] : 0) % in->n_vocab);
        /* a batch of two, then one decode step */
        if (dp_eval(s, toks, 2) == DP_OK && dp_eval(s, toks + 2, 1) == DP_OK) {
            const float *lg = dp_logits(s, -1);
            if (!lg) abort();
            float acc = 0;
            for (int v = 0; v < in->n_vocab; v++) acc += lg[v];
            g_sink = acc;
        }
        dp_session_free(s);
    }
    dp_model_free(m);
    free(buf);
    return 0;
}
