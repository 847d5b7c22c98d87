/* Writes the committed seed corpora of the fuzz targets (run by hand after
 * a change of the formats: `make_fuzz_seeds tests/fuzz/corpus`):
 *   gguf/, model/  small valid models of each architecture, tokenizer kind
 *                  and a few weight types (1 layer, ~10-50 KB), and for gguf/
 *                  a file with every metadata value type;
 *   tokenizer/     lines of the tokenizer corpus and special-token strings,
 *                  one per vocabulary;
 *   chat/          the real chat templates (from the models and fixtures at
 *                  hand) with conversations. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "gguf.h"
#include "quant.h"
#include "testlib.h"
#include "testmodel.h"

static const char *g_out;

static void put(const char *sub, const char *name, const void *data, size_t n) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", g_out, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s", g_out, sub, name);
    if (t_write_file(path, data, n)) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(1);
    }
}

static const char *CHATML = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}";
static const char *GEMMA = "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}"
                           "<end_of_turn>\n{% endfor %}";

static void models(void) {
    const struct {
        const char *name;
        tm_opts o;
    } v[] = {
        {"llama-q8_0-spm", {.arch = "llama", .weight_type = DP_TYPE_Q8_0}},
        {"qwen2-q4_0-bpe-qwen2", {.arch = "qwen2", .weight_type = DP_TYPE_Q4_0, .bpe_pre = "qwen2", .chat_template = NULL}},
        {"gemma3-q4_1-spm", {.arch = "gemma3", .weight_type = DP_TYPE_Q4_1}},
        {"llama-q5_0-bpe-llama3", {.arch = "llama", .weight_type = DP_TYPE_Q5_0, .bpe_pre = "llama-bpe"}},
        {"qwen2-q5_1-bpe-gpt2", {.arch = "qwen2", .weight_type = DP_TYPE_Q5_1, .bpe_pre = "gpt2"}},
        {"gemma3-f16-spm", {.arch = "gemma3", .weight_type = DP_TYPE_F16}},
        {"llama-bf16-spm", {.arch = "llama", .weight_type = DP_TYPE_BF16}},
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        tm_opts o = v[i].o;
        o.n_layer = 1;
        o.seed = 1000 + (unsigned)i;
        if (o.bpe_pre && !strcmp(o.bpe_pre, "qwen2")) o.chat_template = CHATML;
        if (!strcmp(o.arch, "gemma3")) o.chat_template = GEMMA;
        const char *tmp = t_tmp_path(".gguf");
        if (tm_write(tmp, &o)) {
            fprintf(stderr, "%s: %s\n", v[i].name, dp_last_error());
            exit(1);
        }
        size_t n;
        char *buf = t_read_file(tmp, &n);
        char name[128];
        snprintf(name, sizeof name, "%s.gguf", v[i].name);
        put("model", name, buf, n);
        put("gguf", name, buf, n);
        free(buf);
        remove(tmp);
    }
    /* every value type, nested arrays, no tensors */
    gguf_writer *w = gguf_writer_new(32);
    uint8_t u8[3] = {1, 2, 255};
    int16_t i16[2] = {-5, 7};
    double f64[2] = {1.5, -2.25};
    int64_t i64[2] = {-1, 1LL << 40};
    const char *strs[3] = {"a", "", "\xe2\x96\x81z"};
    gguf_w_str(w, "general.architecture", "llama");
    gguf_w_u32(w, "u32", 7);
    gguf_w_i32(w, "i32", -7);
    gguf_w_u64(w, "u64", 1ull << 50);
    gguf_w_f32(w, "f32", 0.5f);
    gguf_w_bool(w, "bool", 1);
    gguf_w_arr(w, "arr.u8", GGUF_UINT8, u8, 3);
    gguf_w_arr(w, "arr.i16", GGUF_INT16, i16, 2);
    gguf_w_arr(w, "arr.f64", GGUF_FLOAT64, f64, 2);
    gguf_w_arr(w, "arr.i64", GGUF_INT64, i64, 2);
    gguf_w_arr_str(w, "arr.str", strs, NULL, 3);
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    gguf_w_tensor(w, "t", DP_TYPE_F32, 1, (int64_t[]){8}, x);
    const char *tmp = t_tmp_path(".gguf");
    if (gguf_writer_write(w, tmp, NULL, NULL)) exit(1);
    gguf_writer_free(w);
    size_t n;
    char *buf = t_read_file(tmp, &n);
    put("gguf", "value-types.gguf", buf, n);
    free(buf);
    remove(tmp);
}

static void tokenizer(void) {
    size_t n;
    char *corpus = t_read_file(t_src_path("tests/fixtures/tokenizer/corpus_lines.txt"), &n);
    if (!corpus) exit(1);
    /* every 10th line, each for the next vocabulary in turn, with add_bos now and then */
    int line = 0, k = 0;
    char seed[8192];
    for (char *p = corpus, *e; p < corpus + n; p = e + 1, line++) {
        e = memchr(p, '\n', (size_t)(corpus + n - p));
        if (!e) e = corpus + n;
        if (line % 10) continue;
        size_t len = (size_t)(e - p) < sizeof seed - 1 ? (size_t)(e - p) : sizeof seed - 1;
        seed[0] = (char)((k % 8) | (k % 5 == 0 ? 16 : 0));
        memcpy(seed + 1, p, len);
        char name[32];
        snprintf(name, sizeof name, "line%03d", line);
        put("tokenizer", name, seed, len + 1);
        k++;
    }
    free(corpus);
    static const char *special[] = {
        "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n", "<|im_start|>system\nYou are<|im_end|>\n",
        "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>", "<bos><eos><pad><unk> <s></s>",
        "  \t\n\n   x  \xe2\x96\x81 y\xc2\xa0z", "caf\xc3\xa9 cafe\xcc\x81 \xef\xac\x81 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x98\x80",
        "\xff\xfe\xc3\x28 \xe2\x82 x\x00y", "12345 3.14159 ''' don't I'M you'll",
    };
    for (int i = 0; i < (int)(sizeof special / sizeof special[0]); i++)
        for (int v = 0; v < 8; v += 3) {
            seed[0] = (char)v;
            size_t len = i == 6 ? 11 : strlen(special[i]); /* that one holds a NUL */
            memcpy(seed + 1, special[i], len);
            char name[32];
            snprintf(name, sizeof name, "special%d-v%d", i, v);
            put("tokenizer", name, seed, len + 1);
        }
}

/* option byte, template, NUL, then role byte + content per message */
static void chat_seed(const char *name, int opt, const char *tmpl, const char *const *turns, int n) {
    char buf[1 << 16];
    size_t len = 0;
    buf[len++] = (char)opt;
    size_t tl = strlen(tmpl);
    if (tl > 30000) tl = 30000;
    memcpy(buf + len, tmpl, tl);
    len += tl;
    for (int i = 0; i < n; i++) {
        buf[len++] = 0;
        size_t cl = strlen(turns[i]);
        memcpy(buf + len, turns[i], cl);
        len += cl;
    }
    put("chat", name, buf, len);
}

static char *template_of(const char *path) {
    gguf_file *f = path ? gguf_open(path) : NULL;
    gguf_str s;
    char *r = f && gguf_get_str(f, "tokenizer.chat_template", &s) ? strndup(s.ptr, s.len) : NULL;
    gguf_close(f);
    return r;
}

static void chat(void) {
    /* role bytes (mod 5): 0 system, 1 user, 2 assistant, 3 tool; 0 itself separates */
    static const char *conv[] = {"\5You are terse.", "\1Hi there", "\2Hello! <think>hmm</think> Sure.", "\1  Bye  "};
    static const char *tool[] = {"\1What is 2+2?", "\2<tool_call>{\"name\":\"add\"}</tool_call>",
                                 "\3<tool_response>4</tool_response>", "\1thanks"};
    const char *files[] = {t_model_path("SmolLM2-135M-Instruct.Q4_1.gguf"), t_model_path("gemma-3-270m-q4_k_m.gguf"),
                           t_shared_fixture("qwen2-tokenizer-tiny.gguf"), t_shared_fixture("llama3-tokenizer-tiny.gguf")};
    const char *names[] = {"smollm2", "gemma3", "qwen2", "llama3"};
    char name[64];
    for (int i = 0; i < 4; i++) {
        char *t = template_of(files[i]);
        if (!t) {
            fprintf(stderr, "note: no chat template from %s\n", names[i]);
            continue;
        }
        /* option byte: template index (3 = detect), generation prompt, model */
        snprintf(name, sizeof name, "%s-detect", names[i]);
        chat_seed(name, 3 | 8 | (i << 4), t, conv, 4);
        snprintf(name, sizeof name, "%s-tools", names[i]);
        chat_seed(name, 1 | ((i + 1) << 4), t, tool, 4);
        /* bit 7: the first message's content is the caller's template variables */
        static const char *vars[] = {"\1{\"enable_thinking\": false, \"bos_token\": \"B\"}", "\1Hi there",
                                     "\2<think>x</think>A", "\1Bye"};
        snprintf(name, sizeof name, "%s-vars", names[i]);
        chat_seed(name, 3 | 8 | (i << 4) | 128, t, vars, 4);
        /* and OpenAI-style messages and tools as JSON (dp_chat_apply_json) */
        static const char *json[] = {
            "\1[{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": \"assistant\", \"content\": null, "
            "\"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"w\", \"arguments\": "
            "\"{\\\"city\\\": \\\"Paris\\\"}\"}}]}, {\"role\": \"tool\", \"content\": \"18C\", \"tool_call_id\": \"c1\"}]",
            "\1[{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {\"type\": \"object\"}}}]",
            "\1Bye"};
        snprintf(name, sizeof name, "%s-tools-json", names[i]);
        chat_seed(name, 3 | 8 | (i << 4) | 128, t, json, 3);
        free(t);
    }
    for (int k = 0; k < 3; k++) {
        snprintf(name, sizeof name, "named%d", k);
        chat_seed(name, k | 8, "", conv + 1, 3);
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_fuzz_seeds CORPUS_DIR\n");
        return 2;
    }
    g_out = argv[1];
    mkdir(g_out, 0755);
    models();
    tokenizer();
    chat();
    return 0;
}
