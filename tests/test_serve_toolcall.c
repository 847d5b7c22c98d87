/* doppler serve's tool-call split (tools/serve/toolcall.c): answers in the
 * <tool_call> format of Qwen and Hermes templates, with text around the
 * calls, several calls, broken and open blocks, tag-like text; each cut at
 * every byte and in random pieces (a stream's split must equal the whole
 * text's). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve_split.h"
#include "testlib.h"
#include "toolcall.h"

/* content and the calls as "name(arguments);" of text fed in pieces cut at cuts[0..n_cuts); json: the
 * format is TOOLS_JSON, else TOOLS_TAGGED */
static void split(const char *text, const size_t *cuts, int n_cuts, int json, sbuf *content, sbuf *calls) {
    call_split c;
    calls_init(&c, json ? TOOLS_JSON : TOOLS_TAGGED);
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

static void expect(const char *text, const char *want_content, const char *want_calls) {
    sp_expect(split, text, 0, want_content, want_calls);
}

static void expect_json(const char *text, const char *want_content, const char *want_calls) {
    sp_expect(split, text, 1, want_content, want_calls);
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
    expect("<tool_call>{\"name\": \"f\"} x</tool_call>", "<tool_call>{\"name\": \"f\"} x</tool_call>", "");
    expect("x <tool_call>{\"name\": \"f\"", "x <tool_call>{\"name\": \"f\"", "");
    /* a '<' right before the tag, text after a call, a broken block beside a good one */
    expect("x<<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> done",
           "x< done", "f({});");
    expect("<tool_call>[1]</tool_call>\n<tool_call>{\"name\": \"g\", \"arguments\": {\"q\": \"é😀\"}}</tool_call>",
           "<tool_call>[1]</tool_call>", "g({\"q\":\"é😀\"});");

    /* Llama 3.1's JSON: the whole answer is the call, or it is content */
    expect_json("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
                "get_weather({\"city\":\"Paris\"});");
    expect_json("\n {\"name\": \"f\", \"arguments\": {\"a\": [1]}} \n", "", "f({\"a\":[1]});");
    expect_json("The weather in Paris is sunny. {\"name\": \"f\"}", "The weather in Paris is sunny. {\"name\": \"f\"}",
                "");
    expect_json("  {\"name\": \"f\", \"parameters\": {}} and more", "  {\"name\": \"f\", \"parameters\": {}} and more",
                "");
    expect_json("{\"city\": \"Paris\"}", "{\"city\": \"Paris\"}", "");
    expect_json("{\"name\": \"f\", \"par", "{\"name\": \"f\", \"par", "");
    expect_json(" \n", " \n", "");
    expect_json("<tool_call>{\"name\": \"f\"}</tool_call>", "<tool_call>{\"name\": \"f\"}</tool_call>", "");
    CHECK(tools_format("...<tool_call>\n{\"name\": ...") == TOOLS_TAGGED);
    CHECK(tools_format("Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and "
                       "its value}.") == TOOLS_JSON);
    CHECK(tools_format("{{ messages }}") == TOOLS_NONE && tools_format(NULL) == TOOLS_NONE);

    /* random pieces of random answers from tag and JSON fragments, in either format */
    static const char *frag[] = {"<tool_call>", "</tool_call>", "<", "</", "<tool", "</tool_", "\n", " ", "a",
                                 "{\"name\": \"f\", \"arguments\": {}}", "{", "é"};
    sp_random(split, frag, (int)(sizeof frag / sizeof *frag), 3000);
    return t_done("test_serve_toolcall");
}
