/* doppler serve's chat answers as OpenAI bodies (tools/serve/respond.c):
 * an answer with reasoning and tool calls, whole (message.content null,
 * reasoning_content, tool_calls with ids, finish_reason "tool_calls") and
 * streamed a byte a chunk (the chunks' deltas add up to the whole answer's
 * fields; an unconstrained answer's tool call one chunk with its index, a
 * constrained one's its start and then fragments of its arguments), parsed
 * back with cJSON; an answer without calls keeps its content and finish
 * reason; a constrained call cut short is a call streamed or not, and the
 * finish reason says what cut it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "respond.h"
#include "testlib.h"

static void set_output(req_output *o, const char *text, int piece_len) {
    memset(o, 0, sizeof *o);
    const int n = (int)strlen(text);
    sb_add(&o->text, text, (size_t)n);
    o->n_pieces = (n + piece_len - 1) / piece_len;
    o->pieces = calloc((size_t)o->n_pieces + 1, sizeof *o->pieces);
    for (int i = 0; i < o->n_pieces; i++) o->pieces[i].len = n - i * piece_len < piece_len ? n - i * piece_len : piece_len;
}

static const char *sval(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The whole answer and its stream (a chunk per byte), compared field by field. */
static void check_answer(srv_req *r, const char *text, const char *want_content, const char *want_reasoning,
                         const char *want_calls, const char *want_finish) {
    req_output all;
    set_output(&all, text, 1 << 20);
    sbuf body = {0};
    resp_full(&body, r, "m", &all, NULL);
    cJSON *j = cJSON_Parse(body.s);
    const cJSON *ch = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "choices"), 0);
    const cJSON *msg = cJSON_GetObjectItem(ch, "message");
    const cJSON *content = cJSON_GetObjectItem(msg, "content");
    CHECKF(want_content ? cJSON_IsString(content) && !strcmp(content->valuestring, want_content) : cJSON_IsNull(content),
           "%s: content in %s", text, body.s);
    const char *rc = sval(msg, "reasoning_content");
    CHECKF(want_reasoning ? rc && !strcmp(rc, want_reasoning) : !rc, "%s: reasoning in %s", text, body.s);
    CHECKF(!strcmp(sval(ch, "finish_reason"), want_finish), "%s: finish in %s", text, body.s);
    /* the calls as "id name(arguments);" */
    sbuf calls = {0};
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(msg, "tool_calls")) {
        const cJSON *fn = cJSON_GetObjectItem(c, "function");
        CHECK(!strcmp(sval(c, "type"), "function"));
        sb_printf(&calls, "%s %s(%s);", sval(c, "id"), sval(fn, "name"), sval(fn, "arguments"));
    }
    CHECKF(!strcmp(calls.s ? calls.s : "", want_calls), "%s: calls '%s', want '%s'", text, calls.s ? calls.s : "",
           want_calls);

    /* streamed: every chunk parses; their deltas add up to the same fields */
    req_output pieces;
    set_output(&pieces, text, 1);
    sbuf head = {0}, o = {0};
    resp_chunk_head(&head, r, "m");
    answer_split a;
    answer_init(&a, r);
    resp_stream_start(&o, &head, r);
    resp_stream_pieces(&o, &head, r, &pieces, NULL, &a);
    resp_stream_end(&o, &head, r, &a, NULL);
    answer_free(&a);
    sbuf s_content = {0}, s_reason = {0}, s_calls = {0}, s_call[8] = {{0}};
    char finish[32] = "";
    int done = 0, index = 0;
    for (char *line = strtok(o.s, "\n"); line; line = strtok(NULL, "\n")) {
        CHECKF(!strncmp(line, "data: ", 6), "not an event line: %s", line);
        if (!strcmp(line + 6, "[DONE]")) {
            done = 1;
            continue;
        }
        cJSON *chunk = cJSON_Parse(line + 6);
        CHECKF(chunk != NULL, "chunk is not JSON: %s", line);
        const cJSON *cc = cJSON_GetArrayItem(cJSON_GetObjectItem(chunk, "choices"), 0);
        const cJSON *d = cJSON_GetObjectItem(cc, "delta");
        if (sval(d, "content")) sb_puts(&s_content, sval(d, "content"));
        if (sval(d, "reasoning_content")) sb_puts(&s_reason, sval(d, "reasoning_content"));
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(d, "tool_calls")) { /* a call's start (id), or a fragment */
            const cJSON *fn = cJSON_GetObjectItem(c, "function");
            const int k = cJSON_GetObjectItem(c, "index")->valueint;
            if (sval(c, "id")) index++;
            CHECKF(k == index - 1 && k < 8 && (!sval(c, "id") == !sval(fn, "name")), "tool call index in %s", line);
            if (k != index - 1 || k >= 8) continue;
            if (sval(c, "id")) sb_printf(&s_call[k], "%s %s(", sval(c, "id"), sval(fn, "name"));
            sb_puts(&s_call[k], sval(fn, "arguments"));
        }
        if (sval(cc, "finish_reason")) snprintf(finish, sizeof finish, "%s", sval(cc, "finish_reason"));
        cJSON_Delete(chunk);
    }
    for (int k = 0; k < index && k < 8; k++) sb_printf(&s_calls, "%s);", s_call[k].s), sb_free(&s_call[k]);
    CHECKF(done && !strcmp(finish, want_finish), "%s: finish '%s'", text, finish);
    CHECKF(!strcmp(s_content.s ? s_content.s : "", want_content ? want_content : ""), "%s: streamed content '%s'",
           text, s_content.s);
    CHECKF(!strcmp(s_reason.s ? s_reason.s : "", want_reasoning ? want_reasoning : ""), "%s: streamed reasoning", text);
    CHECKF(!strcmp(s_calls.s ? s_calls.s : "", want_calls), "%s: streamed calls '%s'", text, s_calls.s);
    sb_free(&s_content), sb_free(&s_reason), sb_free(&s_calls), sb_free(&head), sb_free(&o), sb_free(&calls);
    sb_free(&body);
    cJSON_Delete(j);
    req_output_free(&all);
    req_output_free(&pieces);
}

int main(void) {
    srv_req r;
    memset(&r, 0, sizeof r);
    r.p.kind = REQ_CHAT;
    snprintf(r.id, sizeof r.id, "chatcmpl-0123456789abcdef01234567");
    r.finish_reason = "stop";
    r.think = THINK_SPLIT;
    r.tools = 1;
    check_answer(&r,
                 "<think>\nThe user wants two cities.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                 "\"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", "
                 "\"arguments\": {\"city\": \"Rome\"}}\n</tool_call>",
                 NULL, "The user wants two cities.",
                 "call_0123456789abcdef01234567_0 get_weather({\"city\":\"Paris\"});"
                 "call_0123456789abcdef01234567_1 get_weather({\"city\":\"Rome\"});",
                 "tool_calls");
    check_answer(&r, "Checking.\n<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": \\\"\\u00e9\\\"}\"}</tool_call>",
                 "Checking.", NULL, "call_0123456789abcdef01234567_0 f({\"a\": \"\xc3\xa9\"});", "tool_calls");
    /* no calls: content and finish reason as they are */
    check_answer(&r, "<think>\nhm\n</think>\n\nParis is sunny.", "Paris is sunny.", "hm", "", "stop");
    r.finish_reason = "length"; /* cut short after a call: the finish reason says so */
    check_answer(&r, "<tool_call>{\"name\": \"f\"}</tool_call>\n<tool_call>{\"na", "\n<tool_call>{\"na", NULL,
                 "call_0123456789abcdef01234567_0 f({});", "length");
    /* constrained (tool_choice required, a named function, a lazy "auto"): a call cut short is a call, streamed
     * or not, its arguments as far as they were written; max_tokens's finish is length, a stop string's stop;
     * a call whose JSON ended is whole (tool_calls) */
    r.p.tools_constrained = 1;
    check_answer(&r, "<tool_call>{\"name\": \"f\"}</tool_call>\n<tool_call>{\"name\": \"g\", "
                 "\"arguments\": {\"a\": [1, \"x",
                 NULL, NULL, "call_0123456789abcdef01234567_0 f({});call_0123456789abcdef01234567_1 g({\"a\":[1,\"x);",
                 "length");
    r.finish_reason = "stop";
    check_answer(&r, "Let me see. <tool_call>{\"name\": \"g\", \"arguments\": {\"a\": ", "Let me see.", NULL,
                 "call_0123456789abcdef01234567_0 g({\"a\":);", "stop");
    check_answer(&r, "<tool_call>{\"name\": \"g\", \"arguments\": {}}</tool", NULL, NULL,
                 "call_0123456789abcdef01234567_0 g({});", "tool_calls");
    r.p.tools_constrained = 0; /* unconstrained, the block cut short is content */
    check_answer(&r, "Let me see. <tool_call>{\"name\": \"g\", \"arguments\": {\"a\": ",
                 "Let me see. <tool_call>{\"name\": \"g\", \"arguments\": {\"a\": ", NULL, "", "stop");
    r.tools = TOOLS_JSON; /* Llama 3.1: the whole answer is the call */
    r.think = THINK_NONE;
    check_answer(&r, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", NULL, NULL,
                 "call_0123456789abcdef01234567_0 get_weather({\"city\":\"Paris\"});", "tool_calls");
    check_answer(&r, "It is sunny in Paris.", "It is sunny in Paris.", NULL, "", "stop");
    r.p.tools_constrained = 1;
    r.finish_reason = "length";
    check_answer(&r, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Par", NULL, NULL,
                 "call_0123456789abcdef01234567_0 get_weather({\"city\":\"Par);", "length");
    r.finish_reason = "stop";
    check_answer(&r, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", NULL, NULL,
                 "call_0123456789abcdef01234567_0 get_weather({\"city\":\"Paris\"});", "tool_calls");
    r.p.tools_constrained = 0;
    r.tools = 0; /* tools not asked for: the block is text */
    check_answer(&r, "<tool_call>{\"name\": \"f\"}</tool_call>", "<tool_call>{\"name\": \"f\"}</tool_call>", NULL, "",
                 "stop");
    return t_done("test_serve_respond");
}
