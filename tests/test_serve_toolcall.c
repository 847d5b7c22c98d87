/* doppler serve's tool-call split (tools/serve/toolcall.c): answers in the
 * <tool_call> format of Qwen and Hermes templates, with text around the
 * calls, several calls, broken and open blocks, tag-like text; each cut at
 * every byte and in random pieces (a stream's split must equal the whole
 * text's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "toolcall.h"

/* content and the calls as "name(arguments);" of text fed in pieces cut at cuts[0..n_cuts) */
static void split(const char *text, const size_t *cuts, int n_cuts, sbuf *content, sbuf *calls) {
    call_split c;
    calls_init(&c);
    size_t at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        const size_t end = i < n_cuts ? cuts[i] : strlen(text);
        calls_feed(&c, text + at, end - at, content);
        at = end;
    }
    calls_flush(&c, content);
    for (int i = 0; i < c.n_calls; i++) sb_printf(calls, "%s(%s);", c.calls[i].name, c.calls[i].arguments);
    CHECK(!c.oom);
    calls_free(&c);
}

static const char *str(const sbuf *b) { return b->s ? b->s : ""; }

static void expect(const char *text, const char *want_content, const char *want_calls) {
    sbuf c = {0}, k = {0};
    split(text, NULL, 0, &c, &k);
    CHECKF(!strcmp(str(&c), want_content) && !strcmp(str(&k), want_calls), "%s: content '%s' calls '%s', want '%s' / '%s'",
           text, str(&c), str(&k), want_content, want_calls);
    const size_t n = strlen(text);
    for (size_t cut = 0; cut <= n; cut++) {
        sbuf c2 = {0}, k2 = {0};
        split(text, &cut, 1, &c2, &k2);
        CHECKF(!strcmp(str(&c2), str(&c)) && !strcmp(str(&k2), str(&k)), "%s cut at %zu: '%s' / '%s'", text, cut,
               str(&c2), str(&k2));
        sb_free(&c2);
        sb_free(&k2);
    }
    size_t *every = malloc(sizeof *every * (n + 1));
    for (size_t i = 0; i < n; i++) every[i] = i + 1;
    sbuf c3 = {0}, k3 = {0};
    split(text, every, n ? (int)n - 1 : 0, &c3, &k3);
    CHECKF(!strcmp(str(&c3), str(&c)) && !strcmp(str(&k3), str(&k)), "%s byte by byte: '%s' / '%s'", text, str(&c3),
           str(&k3));
    free(every);
    sb_free(&c3);
    sb_free(&k3);
    sb_free(&c);
    sb_free(&k);
}

int main(void) {
    t_seed();
    /* Qwen2.5 / Qwen3 / Hermes: one call, several, text before them */
    expect("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
           "", "get_weather({\"city\":\"Paris\",\"unit\":\"c\"});");
    expect("Let me check both.\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>\n",
           "Let me check both.", "w({\"city\":\"Paris\"});w({\"city\":\"Rome\"});");
    /* arguments as a JSON string stay that string; none is {}; Llama's "parameters" */
    expect("<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "", "f({\"a\": 1});");
    expect("<tool_call>{\"name\": \"now\"}</tool_call>", "", "now({});");
    expect("<tool_call>{\"name\": \"f\", \"parameters\": {\"x\": [1, 2]}}</tool_call>", "", "f({\"x\":[1,2]});");
    /* no call: the text as it is, whitespace kept */
    expect("No tools needed, thanks. \n", "No tools needed, thanks. \n", "");
    expect("  a <tool b <tool_ca <<tool_call", "  a <tool b <tool_ca <<tool_call", "");
    expect("", "", "");
    /* broken or open blocks stay text */
    expect("<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", "");
    expect("<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", "");
    expect("x <tool_call>{\"name\": \"f\"", "x <tool_call>{\"name\": \"f\"", "");
    /* a '<' right before the tag, text after a call, a broken block beside a good one */
    expect("x<<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> done",
           "x< done", "f({});");
    expect("<tool_call>[1]</tool_call>\n<tool_call>{\"name\": \"g\", \"arguments\": {\"q\": \"é😀\"}}</tool_call>",
           "<tool_call>[1]</tool_call>", "g({\"q\":\"é😀\"});");

    /* random pieces of random answers from tag and JSON fragments */
    static const char *frag[] = {"<tool_call>", "</tool_call>", "<", "</", "<tool", "</tool_", "\n", " ", "a",
                                 "{\"name\": \"f\", \"arguments\": {}}", "{", "é"};
    for (int it = 0; it < 3000; it++) {
        char text[512] = "";
        const int nf = 1 + (int)(t_rand_u64() % 12);
        for (int f = 0; f < nf; f++) strcat(text, frag[t_rand_u64() % (sizeof frag / sizeof *frag)]);
        sbuf c = {0}, k = {0}, c2 = {0}, k2 = {0};
        split(text, NULL, 0, &c, &k);
        size_t cuts[8];
        int nc = 0;
        const size_t n = strlen(text);
        for (int i = 0; i < 8 && n; i++) {
            const size_t at = (size_t)(t_rand_u64() % (n + 1));
            if (!nc || at >= cuts[nc - 1]) cuts[nc++] = at;
        }
        split(text, cuts, nc, &c2, &k2);
        CHECKF(!strcmp(str(&c), str(&c2)) && !strcmp(str(&k), str(&k2)), "'%s' in %d pieces", text, nc + 1);
        sb_free(&c);
        sb_free(&k);
        sb_free(&c2);
        sb_free(&k2);
    }
    return t_done("test_serve_toolcall");
}
