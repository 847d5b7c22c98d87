/* A /v1/responses body -> the chat request it stands for (see responses.h). */
#include "responses.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#define MAX_ITEMS 100000 /* input items, as the chat endpoint's messages */

#define OOM(e) req_fail(e, NULL, "out of memory")

static int is_str(const cJSON *v, const char *s) { return cJSON_IsString(v) && !strcmp(v->valuestring, s); }

/* Adds a copy of v to obj as name (nothing when v is NULL): 0, or -1 out of memory. */
static int put(cJSON *obj, const char *name, const cJSON *v) {
    if (!v) return 0;
    cJSON *copy = cJSON_Duplicate(v, 1);
    if (copy && cJSON_AddItemToObject(obj, name, copy)) return 0;
    cJSON_Delete(copy);
    return -1;
}

static int put_str(cJSON *obj, const char *name, const char *s) { return cJSON_AddStringToObject(obj, name, s) ? 0 : -1; }

static const char *const text_parts[] = {"input_text", "output_text"};
static const char *const reasoning_parts[] = {"reasoning_text"};

/* The conversation as chat messages, built item by item. */
typedef struct {
    cJSON *msgs;
    char *reasoning;         /* a reasoning item's text, for the next assistant message */
} convo;

/* A new message of this role at the end (an assistant's takes the pending
 * reasoning); NULL out of memory. */
static cJSON *add_message(convo *cv, const char *role, const char *content) {
    cJSON *m = cJSON_CreateObject();
    if (!m || !cJSON_AddItemToArray(cv->msgs, m)) {
        cJSON_Delete(m);
        return NULL;
    }
    if (put_str(m, "role", role) || (content && put_str(m, "content", content))) return NULL;
    if (cv->reasoning && !strcmp(role, "assistant")) {
        if (put_str(m, "reasoning_content", cv->reasoning)) return NULL;
        free(cv->reasoning);
        cv->reasoning = NULL;
    }
    return m;
}

static int message_item(convo *cv, const cJSON *it, const char *what, req_error *e) {
    const cJSON *role = cJSON_GetObjectItemCaseSensitive(it, "role");
    if (!cJSON_IsString(role))
        return req_fail(e, "input", "%s.role must be \"user\", \"system\", \"developer\" or \"assistant\"", what);
    const char *rs = role->valuestring;
    if (strcmp(rs, "user") && strcmp(rs, "system") && strcmp(rs, "developer") && strcmp(rs, "assistant"))
        return req_fail(e, "input", "%s.role '%.40s' is not supported (user, system, developer or assistant)", what, rs);
    char where[64], *text;
    snprintf(where, sizeof where, "%s.content", what);
    if (req_text_parts(req_field(it, "content"), text_parts, 2, "input", where, &text, e)) return -1;
    if (strcmp(rs, "assistant")) { /* a reasoning item belongs to the assistant's turn that follows it */
        free(cv->reasoning);
        cv->reasoning = NULL;
    }
    int rc = add_message(cv, rs, text) ? 0 : OOM(e);
    free(text);
    return rc;
}

/* An earlier call of the assistant: a tool call of the assistant message
 * just before (the Responses API lists a turn's text and calls as separate
 * items, chat as one message), or of a message of its own. */
static int call_item(convo *cv, const cJSON *it, const char *what, req_error *e) {
    const cJSON *id = req_field(it, "call_id"), *name = req_field(it, "name"), *args = req_field(it, "arguments");
    if (!cJSON_IsString(id) || !cJSON_IsString(name) || !name->valuestring[0] || !cJSON_IsString(args))
        return req_fail(e, "input", "%s: a function_call needs 'call_id', 'name' and 'arguments' strings", what);
    cJSON *last = cJSON_GetArrayItem(cv->msgs, cJSON_GetArraySize(cv->msgs) - 1);
    if (!last || !is_str(cJSON_GetObjectItemCaseSensitive(last, "role"), "assistant") || cv->reasoning)
        last = add_message(cv, "assistant", NULL);
    cJSON *calls = last ? cJSON_GetObjectItemCaseSensitive(last, "tool_calls") : NULL;
    if (last && !calls) calls = cJSON_AddArrayToObject(last, "tool_calls");
    /* OpenAI's order of members: a template that writes the call as JSON writes the chat request's text */
    cJSON *call = cJSON_CreateObject();
    if (!calls || !call || !cJSON_AddItemToArray(calls, call)) {
        cJSON_Delete(call);
        return OOM(e);
    }
    cJSON *fn = put(call, "id", id) || put_str(call, "type", "function") ? NULL : cJSON_AddObjectToObject(call, "function");
    return fn && !put(fn, "name", name) && !put(fn, "arguments", args) ? 0 : OOM(e);
}

static int call_output_item(convo *cv, const cJSON *it, const char *what, req_error *e) {
    const cJSON *id = req_field(it, "call_id");
    if (!cJSON_IsString(id)) return req_fail(e, "input", "%s: a function_call_output needs a 'call_id' string", what);
    char where[64], *text;
    snprintf(where, sizeof where, "%s.output", what);
    if (!req_field(it, "output")) return req_fail(e, "input", "%s: a function_call_output needs an 'output'", what);
    if (req_text_parts(req_field(it, "output"), text_parts, 1, "input", where, &text, e)) return -1;
    cJSON *m = add_message(cv, "tool", text);
    free(text);
    return m && !put(m, "tool_call_id", id) ? 0 : OOM(e);
}

static int reasoning_item(convo *cv, const cJSON *it, const char *what, req_error *e) {
    char where[64], *text;
    snprintf(where, sizeof where, "%s.content", what);
    const cJSON *c = req_field(it, "content");
    if (c && !cJSON_IsArray(c)) return req_fail(e, "input", "%s must be a list of reasoning_text parts", where);
    if (req_text_parts(c, reasoning_parts, 1, "input", where, &text, e)) return -1;
    free(cv->reasoning);
    cv->reasoning = NULL;
    if (text[0]) cv->reasoning = text;
    else free(text);
    return 0;
}

/* input (and instructions before it) as chat's messages. */
static int input_messages(const cJSON *root, convo *cv, req_error *e) {
    const cJSON *ins = req_field(root, "instructions"), *in = req_field(root, "input");
    if (ins && !cJSON_IsString(ins)) return req_fail(e, "instructions", "'instructions' must be a string");
    if (ins && !add_message(cv, "system", ins->valuestring)) return OOM(e);
    if (!in) return req_fail(e, "input", "'input' is required");
    if (cJSON_IsString(in)) return add_message(cv, "user", in->valuestring) ? 0 : OOM(e);
    if (!cJSON_IsArray(in)) return req_fail(e, "input", "'input' must be a string or a list of items");
    if (cJSON_GetArraySize(in) == 0) return req_fail(e, "input", "'input' is empty");
    if (cJSON_GetArraySize(in) > MAX_ITEMS) return req_fail(e, "input", "'input' holds more than %d items", MAX_ITEMS);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, in) {
        char what[32];
        snprintf(what, sizeof what, "input[%d]", i++);
        if (!cJSON_IsObject(it)) return req_fail(e, "input", "%s must be an object", what);
        const cJSON *type = req_field(it, "type");
        if (type && !cJSON_IsString(type)) return req_fail(e, "input", "%s.type must be a string", what);
        const char *t = type ? type->valuestring : "message";
        int rc = !strcmp(t, "message")              ? message_item(cv, it, what, e)
                 : !strcmp(t, "function_call")        ? call_item(cv, it, what, e)
                 : !strcmp(t, "function_call_output") ? call_output_item(cv, it, what, e)
                 : !strcmp(t, "reasoning")            ? reasoning_item(cv, it, what, e)
                                                      : req_fail(e, "input", "%s: items of type '%.40s' are not "
                                                               "supported (message, function_call, "
                                                               "function_call_output, reasoning)", what, t);
        if (rc) return -1;
    }
    return 0;
}

/* tools in chat's form; tool_choice likewise. */
static int chat_tools(const cJSON *root, cJSON *chat, req_error *e) {
    const cJSON *t = req_field(root, "tools"), *tc = req_field(root, "tool_choice");
    if (t) {
        if (!cJSON_IsArray(t)) return req_fail(e, "tools", "'tools' must be a list of {\"type\": \"function\", ...}");
        cJSON *out = cJSON_AddArrayToObject(chat, "tools");
        if (!out) return OOM(e);
        int i = 0;
        const cJSON *tool;
        cJSON_ArrayForEach(tool, t) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(tool, "type");
            if (!cJSON_IsObject(tool) || !cJSON_IsString(type))
                return req_fail(e, "tools", "tools[%d] must be an object with a 'type'", i);
            if (strcmp(type->valuestring, "function"))
                return req_fail(e, "tools", "tools[%d]: tools of type '%.40s' are not supported (function only)", i,
                              type->valuestring);
            const cJSON *name = req_field(tool, "name"), *desc = req_field(tool, "description");
            const cJSON *params = req_field(tool, "parameters"), *strict = req_field(tool, "strict");
            if (!cJSON_IsString(name) || !name->valuestring[0])
                return req_fail(e, "tools", "tools[%d] needs a 'name' (the Responses API's flat form: {\"type\": "
                              "\"function\", \"name\": ..., \"parameters\": ...})", i);
            if ((desc && !cJSON_IsString(desc)) || (params && !cJSON_IsObject(params)) ||
                (strict && !cJSON_IsBool(strict)))
                return req_fail(e, "tools", "tools[%d]: 'description' must be a string, 'parameters' an object and "
                              "'strict' true or false", i);
            /* chat's form in OpenAI's order of members: the template writes the tools as JSON */
            cJSON *ct = cJSON_CreateObject();
            if (!ct || !cJSON_AddItemToArray(out, ct)) {
                cJSON_Delete(ct);
                return OOM(e);
            }
            cJSON *fn = put_str(ct, "type", "function") ? NULL : cJSON_AddObjectToObject(ct, "function");
            if (!fn || put(fn, "name", name) || put(fn, "description", desc) || put(fn, "parameters", params) ||
                put(fn, "strict", strict))
                return OOM(e);
            i++;
        }
    }
    if (!tc) return 0;
    if (cJSON_IsString(tc)) /* chat's words are the same: the chat parser checks them */
        return put(chat, "tool_choice", tc) ? OOM(e) : 0;
    const cJSON *name = cJSON_IsObject(tc) ? req_field(tc, "name") : NULL;
    if (!is_str(cJSON_GetObjectItemCaseSensitive(tc, "type"), "function") || !cJSON_IsString(name))
        return req_fail(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                      "\"function\", \"name\": ...}");
    cJSON *o = cJSON_AddObjectToObject(chat, "tool_choice"), *fn = o ? cJSON_AddObjectToObject(o, "function") : NULL;
    return fn && !put_str(o, "type", "function") && !put(fn, "name", name) ? 0 : OOM(e);
}

/* text.format as chat's response_format. */
static int chat_format(const cJSON *root, cJSON *chat, req_error *e) {
    const cJSON *text = req_field(root, "text");
    if (!text) return 0;
    if (!cJSON_IsObject(text)) return req_fail(e, "text", "'text' must be an object ({\"format\": {\"type\": ...}})");
    const cJSON *f = req_field(text, "format");
    if (!f) return 0;
    const cJSON *type = cJSON_IsObject(f) ? req_field(f, "type") : NULL;
    if (!cJSON_IsString(type)) return req_fail(e, "text", "text.format must be an object with a 'type'");
    const char *t = type->valuestring;
    if (!strcmp(t, "text")) return 0;
    cJSON *rf = cJSON_AddObjectToObject(chat, "response_format");
    if (!rf || put(rf, "type", type)) return OOM(e);
    if (!strcmp(t, "json_object")) return 0;
    if (strcmp(t, "json_schema"))
        return req_fail(e, "text", "text.format '%.40s' is not supported (text, json_object, json_schema)", t);
    const cJSON *name = req_field(f, "name"), *schema = req_field(f, "schema"), *strict = req_field(f, "strict");
    if ((name && !cJSON_IsString(name)) || (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema)) ||
        (strict && !cJSON_IsBool(strict)))
        return req_fail(e, "text", "text.format json_schema: 'name' must be a string, 'schema' a JSON Schema and "
                      "'strict' true or false");
    cJSON *js = cJSON_AddObjectToObject(rf, "json_schema");
    return js && !put(js, "name", name) && !put(js, "schema", schema) && !put(js, "strict", strict) ? 0 : OOM(e);
}

/* Fields the Responses API has and doppler cannot honour, or that need
 * responses kept on the server: refused, not ignored. */
static int unsupported_fields(const cJSON *root, req_error *e) {
    static const char *const stateful[] = {"previous_response_id", "conversation", "prompt"};
    for (size_t k = 0; k < sizeof stateful / sizeof *stateful; k++)
        if (req_field(root, stateful[k]))
            return req_fail(e, stateful[k], "'%s' is not supported: doppler serve keeps no responses, conversations "
                          "or prompts (send the whole conversation as 'input')", stateful[k]);
    const cJSON *bg = req_field(root, "background"), *tr = req_field(root, "truncation"), *inc = req_field(root, "include");
    const cJSON *tl = req_field(root, "top_logprobs"), *rs = req_field(root, "reasoning");
    if (bg && !cJSON_IsBool(bg)) return req_fail(e, "background", "'background' must be true or false");
    if (cJSON_IsTrue(bg)) return req_fail(e, "background", "'background' is not supported: nothing is stored to poll");
    if (tr && !is_str(tr, "disabled") && !is_str(tr, "auto"))
        return req_fail(e, "truncation", "'truncation' must be \"disabled\" or \"auto\"");
    if (is_str(tr, "auto"))
        return req_fail(e, "truncation", "truncation \"auto\" is not supported: a conversation longer than the context "
                      "is a 400, never cut");
    if (inc && !cJSON_IsArray(inc)) return req_fail(e, "include", "'include' must be a list of strings");
    const cJSON *v;
    cJSON_ArrayForEach(v, inc) {
        if (!cJSON_IsString(v)) return req_fail(e, "include", "'include' must be a list of strings");
        if (!strcmp(v->valuestring, "message.output_text.logprobs"))
            return req_fail(e, "include", "include \"message.output_text.logprobs\" is not supported");
    }
    if (tl && (!cJSON_IsNumber(tl) || tl->valuedouble != 0))
        return req_fail(e, "top_logprobs", "'top_logprobs' is not supported (0 or absent)");
    if (rs && !cJSON_IsObject(rs)) return req_fail(e, "reasoning", "'reasoning' must be an object");
    const cJSON *effort = req_field(rs, "effort"), *summary = req_field(rs, "summary");
    if ((effort && !cJSON_IsString(effort)) || (summary && !cJSON_IsString(summary)))
        return req_fail(e, "reasoning", "reasoning.effort and reasoning.summary must be strings");
    static const char *const typed[][2] = {{"store", "b"}, {"metadata", "o"}, {"user", "s"}, {"stream", "b"},
                                           {"parallel_tool_calls", "b"}};
    for (size_t k = 0; k < sizeof typed / sizeof *typed; k++) {
        const cJSON *f = req_field(root, typed[k][0]);
        const char t = typed[k][1][0];
        if (f && !(t == 'b' ? cJSON_IsBool(f) : t == 'o' ? cJSON_IsObject(f) : cJSON_IsString(f)))
            return req_fail(e, typed[k][0], "'%s' must be %s", typed[k][0],
                          t == 'b' ? "true or false" : t == 'o' ? "an object" : "a string");
    }
    return 0;
}

/* The chat request of a Responses body root (the caller checked its fields
 * with unsupported_fields). */
static cJSON *chat_body(const cJSON *root, req_error *e) {
    cJSON *chat = cJSON_CreateObject();
    convo cv = {cJSON_CreateArray(), NULL};
    if (!chat || !cv.msgs || !cJSON_AddItemToObject(chat, "messages", cv.msgs)) {
        cJSON_Delete(cv.msgs);
        cJSON_Delete(chat);
        OOM(e);
        return NULL;
    }
    int rc = input_messages(root, &cv, e);
    free(cv.reasoning);
    const cJSON *mt = req_field(root, "max_output_tokens");
    if (!rc && mt && (!cJSON_IsNumber(mt) || floor(mt->valuedouble) != mt->valuedouble || mt->valuedouble < 1 ||
                      mt->valuedouble > (1 << 30)))
        rc = req_fail(e, "max_output_tokens", "'max_output_tokens' must be an integer between 1 and %d", 1 << 30);
    if (!rc && put(chat, "max_tokens", mt)) rc = OOM(e);
    /* the chat endpoint's own fields and extensions, checked by its parser under the same names */
    static const char *const same[] = {"model", "temperature", "top_p", "stream", "parallel_tool_calls", "seed",
                                       "top_k", "min_p", "repeat_penalty", "repetition_penalty", "repeat_last_n",
                                       "presence_penalty", "frequency_penalty", "logit_bias", "stop",
                                       "chat_template_kwargs", "reasoning_format", "ignore_eos"};
    for (size_t k = 0; k < sizeof same / sizeof *same && !rc; k++)
        if (put(chat, same[k], req_field(root, same[k]))) rc = OOM(e);
    if (!rc) rc = chat_tools(root, chat, e);
    if (!rc) rc = chat_format(root, chat, e);
    if (rc) {
        cJSON_Delete(chat);
        return NULL;
    }
    return chat;
}

/* One member the response repeats: the request's, else fallback (taken). */
static int echo_one(cJSON *o, const cJSON *root, const char *name, cJSON *fallback) {
    const cJSON *v = req_field(root, name);
    if (v) {
        cJSON_Delete(fallback);
        return !put(o, name, v);
    }
    if (fallback && cJSON_AddItemToObject(o, name, fallback)) return 1;
    cJSON_Delete(fallback);
    return 0;
}

/* What the response object repeats of the request, as OpenAI's does, as
 * JSON members' text ("a":..,"b":..); NULL out of memory. */
static char *echo_members(const cJSON *root) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    int ok = echo_one(o, root, "instructions", cJSON_CreateNull());
    ok = echo_one(o, root, "max_output_tokens", cJSON_CreateNull()) && ok;
    ok = echo_one(o, root, "metadata", cJSON_CreateObject()) && ok;
    ok = echo_one(o, root, "parallel_tool_calls", cJSON_CreateTrue()) && ok;
    ok = echo_one(o, root, "reasoning", cJSON_Parse("{\"effort\":null,\"summary\":null}")) && ok;
    ok = echo_one(o, root, "temperature", cJSON_CreateNull()) && ok;
    ok = echo_one(o, root, "text", cJSON_Parse("{\"format\":{\"type\":\"text\"}}")) && ok;
    ok = echo_one(o, root, "tool_choice", cJSON_CreateString("auto")) && ok;
    ok = echo_one(o, root, "tools", cJSON_CreateArray()) && ok;
    ok = echo_one(o, root, "top_p", cJSON_CreateNull()) && ok;
    ok = echo_one(o, root, "user", cJSON_CreateNull()) && ok;
    /* nothing is kept on the server, whatever store asked */
    ok = ok && cJSON_AddNullToObject(o, "previous_response_id") && cJSON_AddStringToObject(o, "truncation", "disabled") &&
         cJSON_AddFalseToObject(o, "store") && cJSON_AddFalseToObject(o, "background");
    char *text = ok ? cJSON_PrintUnformatted(o) : NULL, *members = NULL;
    cJSON_Delete(o);
    if (text && (members = strdup(text + 1))) members[strlen(members) - 1] = 0; /* without the braces */
    cJSON_free(text);
    return members;
}

const char *resp_param(const char *chat_name) {
    static const char *const names[][2] = {{"messages", "input"},           {"max_tokens", "max_output_tokens"},
                                           {"response_format", "text"},     {"max_completion_tokens", "max_output_tokens"},
                                           {"prompt", "input"}};
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (!strcmp(chat_name, names[k][0])) return names[k][1];
    return chat_name;
}

int resp_parse(const char *body, size_t len, req_params *out, req_error *e) {
    memset(out, 0, sizeof *out);
    memset(e, 0, sizeof *e);
    cJSON *root = req_json(body, len, e), *chat = NULL;
    if (!root) return -1;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return req_fail(e, NULL, "the request body must be a JSON object");
    }
    char *echo = NULL, *text = NULL;
    int rc = unsupported_fields(root, e);
    if (!rc && !(chat = chat_body(root, e))) rc = -1;
    if (!rc && !((text = cJSON_PrintUnformatted(chat)) && (echo = echo_members(root)))) rc = OOM(e);
    cJSON_Delete(chat);
    cJSON_Delete(root);
    if (!rc && (rc = req_parse(REQ_CHAT, text, strlen(text), out, e))) {
        char chat_name[sizeof e->param];
        memcpy(chat_name, e->param, sizeof chat_name);
        snprintf(e->param, sizeof e->param, "%s", resp_param(chat_name));
    }
    cJSON_free(text);
    if (rc) {
        free(echo);
        return -1;
    }
    out->responses = 1;
    out->echo = echo;
    return 0;
}
