/* libFuzzer target: chat template rendering. Input: one byte of options
 * (template name or detection, add_generation_prompt, which model, whether
 * the first message's content is the caller's template variables), then
 * NUL-separated fields: the model's tokenizer.chat_template text (which
 * dp_chat_apply reads for detection and a ChatML default system prompt),
 * then the messages, each a role byte and the content. Both dp_chat_render
 * and dp_chat_apply (dp_chat_apply_vars) run; with template variables also
 * dp_chat_apply_json, the first two contents as messages and tools JSON.
 * A NULL result must come with an error message. */
#include <stdio.h>
#include <string.h>

#include "fuzzlib.h"
#include "model.h"
#include "util.h"

static fz_vocab g_vocab[] = {
    {"gemma3-tiny", "fixture", "tests/fixtures/models/gemma3-tiny.gguf", NULL},
    {"qwen2-tiny", "fixture", "tests/fixtures/models/qwen2-tiny.gguf", NULL},
    {"llama-tiny", "fixture", "tests/fixtures/models/llama-tiny.gguf", NULL},
    {"smollm2", "model", "SmolLM2-135M-Instruct.Q4_1.gguf", NULL},
};
enum { N_MODELS = sizeof g_vocab / sizeof g_vocab[0], MAX_MSGS = 64 };
static dp_model *g_models[N_MODELS];
static int g_n;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fz_load_vocabs(g_vocab, N_MODELS);
    for (int i = 0; i < N_MODELS; i++)
        if (g_vocab[i].m) g_models[g_n++] = g_vocab[i].m;
    if (!g_n) {
        fprintf(stderr, "fuzz: no model could be loaded\n");
        return 1;
    }
    return 0;
}

static void check(char *r) {
    if (!r && !strcmp(dp_last_error(), "sentinel")) abort(); /* a failure says why */
    if (r) {
        volatile size_t n = strlen(r);
        (void)n;
    }
    free(r);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static const char *names[] = {"gemma", "chatml", "llama3", NULL, "nonesuch"};
    static const char *roles[] = {"system", "user", "assistant", "tool", "x"};
    const char *name = names[(data[0] & 7) % 5];
    int gen = (data[0] >> 3) & 1;
    dp_model *m = g_models[((data[0] >> 4) & 7) % g_n];
    const int with_vars = data[0] >> 7;
    /* the fields, NUL-terminated, in a heap block of exactly their bytes */
    size_t len = size - 1;
    char *text = malloc(len + 1);
    memcpy(text, data + 1, len);
    text[len] = 0;
    const char *tmpl = text;
    dp_chat_msg msgs[MAX_MSGS];
    int n = 0;
    for (char *p = text + strlen(text) + 1; p <= text + len && n < MAX_MSGS; p += strlen(p) + 1) {
        msgs[n].role = roles[(unsigned char)*p % 5];
        msgs[n].content = *p ? p + 1 : p;
        n++;
    }
    dp_set_error(DP_OK, "sentinel");
    check(dp_chat_render(name, msgs, n, gen));
    char *saved = m->chat_template;
    m->chat_template = *tmpl ? (char *)tmpl : NULL;
    dp_set_error(DP_OK, "sentinel");
    if (with_vars && n > 0) {
        check(dp_chat_apply_vars(m, name, msgs + 1, n - 1, gen, msgs[0].content));
        /* the same fields as OpenAI-style messages and tools (JSON) */
        dp_set_error(DP_OK, "sentinel");
        check(dp_chat_apply_json(m, name, msgs[0].content, n > 1 ? msgs[1].content : NULL, gen, NULL));
    } else {
        check(dp_chat_apply(m, name, msgs, n, gen));
    }
    m->chat_template = saved;
    free(text);
    return 0;
}
