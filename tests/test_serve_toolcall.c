/* doppler serve's tool-call split (tools/serve/toolcall.c): answers in the
 * <tool_call> format of Qwen and Hermes templates, with text around the
 * calls, several calls, broken and open blocks, tag-like text; each cut at
 * every byte and in random pieces (a stream's split must equal the whole
 * text's). And tool_choice's schema of a call: what its constraint lets
 * through is split into that call. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "constrain/json_machine.h"

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

    /* tool_choice: the schema of one call; the texts its constraint takes (one call, or with repeat up to
     * that many in a row: parallel_tool_calls) split into those calls */
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {\"type\": "
                        "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}, "
                        "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";
    static const struct {
        int format;
        const char *name, *text, *calls;
        int taken, repeat;
    } tc[] = {
        {TOOLS_TAGGED, NULL, "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
         "w({\"city\":\"Paris\"});", 1, 1},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", "now({});", 1, 1},
        {TOOLS_TAGGED, "now", "<tool_call>{\"name\":\"w\",\"arguments\":{\"city\":\"P\"}}</tool_call>", "", 0, 1},
        {TOOLS_TAGGED, NULL, "{\"name\":\"now\",\"arguments\":{}}", "", 0, 1},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"w\",\"arguments\":{}}</tool_call>", "", 0, 1}, /* city required */
        {TOOLS_JSON, NULL, "{\"name\": \"w\", \"parameters\": {\"city\": \"Oslo\"}}", "w({\"city\":\"Oslo\"});", 1, 1},
        {TOOLS_JSON, "w", "{\"name\": \"w\", \"arguments\": {\"city\": \"Oslo\"}}", "", 0, 1},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"w\",\"arguments\":{\"city\":\"P\"}}</tool_call>\n<tool_call>"
         "{\"name\":\"now\",\"arguments\":{}}</tool_call>", "w({\"city\":\"P\"});now({});", 1, 16},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", "now({});", 1, 16},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call><tool_call>"
         "{\"name\":\"now\",\"arguments\":{}}</tool_call>", "", 0, 1},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>x", "", 0, 16},
    };
    for (int i = 0; i < (int)(sizeof tc / sizeof *tc); i++) {
        const char *before, *after;
        char *sch = calls_schema(tools, tc[i].name, tc[i].format, &before, &after);
        jschema S;
        char err[200];
        CHECKF(sch && !jschema_compile(&S, sch, strlen(sch), err, sizeof err), "%d: %s", i, sch ? err : "no schema");
        if (!sch) continue;
        CHECK((tc[i].format == TOOLS_TAGGED) == (before && after && !strcmp(before, "<tool_call>") &&
                                                 !strcmp(after, "</tool_call>")));
        S.before = before, S.after = after, S.repeat = tc[i].repeat;
        jstate st;
        jm_start(&S, &st, 0);
        const int taken = jm_feed_bytes(&S, &st, (const uint8_t *)tc[i].text, (int)strlen(tc[i].text)) > 0 &&
                          (tc[i].repeat > 1 ? jm_can_end(&S, &st) : jm_done(&S, &st));
        CHECKF(taken == tc[i].taken, "%d: taken %d: %s", i, taken, tc[i].text);
        if (taken) {
            sbuf content = {0}, calls = {0};
            split(tc[i].text, NULL, 0, tc[i].format == TOOLS_JSON, &content, &calls);
            CHECKF(!content.n && calls.n && !strcmp(calls.s, tc[i].calls), "%d: content '%s', calls '%s'", i,
                   content.n ? content.s : "", calls.n ? calls.s : "");
            sb_free(&content);
            sb_free(&calls);
        }
        S.before = S.after = NULL, S.repeat = 0;
        jschema_free(&S);
        cJSON_free(sch);
    }

    /* random pieces of random answers from tag and JSON fragments, in either format */
    static const char *frag[] = {"<tool_call>", "</tool_call>", "<", "</", "<tool", "</tool_", "\n", " ", "a",
                                 "{\"name\": \"f\", \"arguments\": {}}", "{", "é"};
    sp_random(split, frag, (int)(sizeof frag / sizeof *frag), 3000);
    return t_done("test_serve_toolcall");
}
