/* Request bodies: JSON -> req_params (see request.h for the rules). */
#include "request.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "doppler.h"

#define MAX_PROMPT_TOKENS (1 << 24)
#define MAX_MESSAGES 100000

int req_fail(req_error *e, const char *param, const char *fmt, ...) {
    e->status = 400;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return -1;
}

int req_utf8_valid(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        int len;
        unsigned cp, min;
        if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F, min = 0x80;
        else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F, min = 0x800;
        else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07, min = 0x10000;
        else return 0;
        if (n - i < (size_t)len) return 0;
        for (int k = 1; k < len; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += (size_t)len;
    }
    return 1;
}

/* A raw NUL byte, or a \u0000 escape inside a string, would cut the C
 * string cJSON hands back: refuse both rather than lose text silently. */
static int has_nul(const char *s, size_t n) {
    int in_str = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!c) return 1;
        if (!in_str) {
            if (c == '"') in_str = 1;
            continue;
        }
        if (c == '"') in_str = 0;
        else if (c == '\\' && i + 1 < n) {
            if (s[i + 1] == 'u' && i + 5 < n && !memcmp(s + i + 2, "0000", 4)) return 1;
            i++;
        }
    }
    return 0;
}

const cJSON *req_field(const cJSON *obj, const char *name) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, name);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int get_number(const cJSON *obj, const char *name, double lo, double hi, double *out, req_error *e) {
    const cJSON *v = req_field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return req_fail(e, name, "'%s' must be a number", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return req_fail(e, name, "'%s' must be between %g and %g (got %g)", name, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return 1;
}

/* An integral JSON number in [lo, hi]. */
static int get_int(const cJSON *obj, const char *name, double lo, double hi, double *out, req_error *e) {
    const cJSON *v = req_field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || floor(v->valuedouble) != v->valuedouble)
        return req_fail(e, name, "'%s' must be an integer", name);
    if (v->valuedouble < lo || v->valuedouble > hi)
        return req_fail(e, name, "'%s' must be between %.0f and %.0f (got %.0f)", name, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return 1;
}

static int get_bool(const cJSON *obj, const char *name, int *out, req_error *e) {
    const cJSON *v = req_field(obj, name);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return req_fail(e, name, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 1;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

#define NOMEM(e) req_fail(e, NULL, "out of memory")

int req_text_parts(const struct cJSON *c, const char *const *types, int n_types, const char *param, const char *what,
                   char **out, req_error *e) {
    if (!c) {
        *out = dup_str("");
        return *out ? 0 : NOMEM(e);
    }
    if (cJSON_IsString(c)) {
        *out = dup_str(c->valuestring);
        return *out ? 0 : NOMEM(e);
    }
    if (!cJSON_IsArray(c)) return req_fail(e, param, "%s must be a string or a list of text parts", what);
    size_t len = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type))
            return req_fail(e, param, "%s: parts must be objects with a 'type'", what);
        int known = 0;
        for (int k = 0; k < n_types; k++) known |= !strcmp(type->valuestring, types[k]);
        if (!known)
            return req_fail(e, param, "%s: parts of type '%.40s' are not supported (%s only)", what, type->valuestring,
                        types[0]);
        if (!cJSON_IsString(text)) return req_fail(e, param, "%s: a %s part needs a 'text' string", what, types[0]);
        len += strlen(text->valuestring);
    }
    char *s = malloc(len + 1), *p = s;
    if (!s) return NOMEM(e);
    cJSON_ArrayForEach(part, c) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t n = strlen(t);
        memcpy(p, t, n);
        p += n;
    }
    *p = 0;
    *out = s;
    return 0;
}

/* A message's content: a string, or a list of {"type": "text", "text": ...}
 * parts joined. */
static int message_content(const cJSON *c, int i, char **out, req_error *e) {
    static const char *const text[] = {"text"};
    char what[40];
    snprintf(what, sizeof what, "messages[%d].content", i);
    return req_text_parts(c, text, 1, "messages", what, out, e);
}

/* tools (OpenAI's: [{"type": "function", "function": {"name", ...}}]) and
 * tool_choice: "auto" (the default), "none" (the template sees no tools),
 * "required" (the answer is one call, or several where
 * parallel_tool_calls is not false) or {"type": "function", "function":
 * {"name": ...}} (a call of that one). */
static int parse_tools(const cJSON *root, req_params *r, req_error *e) {
    r->parallel_calls = 1;
    if (get_bool(root, "parallel_tool_calls", &r->parallel_calls, e) < 0) return -1;
    const cJSON *t = req_field(root, "tools"), *tc = req_field(root, "tool_choice");
    const cJSON *tcf = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, "function") : NULL;
    const cJSON *tcn = cJSON_GetObjectItemCaseSensitive(tcf, "name");
    if (tc && !(cJSON_IsString(tc) && (!strcmp(tc->valuestring, "none") || !strcmp(tc->valuestring, "auto") ||
                                       !strcmp(tc->valuestring, "required"))) &&
        !cJSON_IsString(tcn))
        return req_fail(e, "tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": "
                                      "\"function\", \"function\": {\"name\": ...}}");
    if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "required")) r->tool_choice = TOOL_CHOICE_REQUIRED;
    if (tcn && !(r->tool_name = dup_str(tcn->valuestring))) return NOMEM(e);
    if (tcn) r->tool_choice = TOOL_CHOICE_NAMED;
    if (!t) return r->tool_choice ? req_fail(e, "tool_choice", "'tool_choice' asks for a call, but there are no 'tools'") : 0;
    if (!cJSON_IsArray(t)) return req_fail(e, "tools", "'tools' must be a list of {type, function} objects");
    if (cJSON_GetArraySize(t) > REQ_MAX_TOOLS) return req_fail(e, "tools", "'tools' holds more than %d tools", REQ_MAX_TOOLS);
    const cJSON *tool;
    int i = 0;
    cJSON_ArrayForEach(tool, t) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(tool, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsObject(tool) || (type && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function"))) ||
            !cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0])
            return req_fail(e, "tools", "tools[%d] must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
        i++;
    }
    if (r->tool_choice == TOOL_CHOICE_NAMED) {
        int found = 0;
        cJSON_ArrayForEach(tool, t) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tool, "function"), "name");
            found |= !strcmp(name->valuestring, r->tool_name);
        }
        if (!found) return req_fail(e, "tool_choice", "tool_choice names '%.60s', which is not among the tools", r->tool_name);
    }
    if (r->tool_choice && !i) return req_fail(e, "tool_choice", "'tool_choice' asks for a call, but 'tools' is empty");
    if (!i || (cJSON_IsString(tc) && !strcmp(tc->valuestring, "none"))) return 0;
    if (!(r->tools_json = cJSON_PrintUnformatted(t))) return NOMEM(e);
    return 0;
}

/* An assistant message's tool_calls: a list of {id, type, function: {name,
 * arguments}} (arguments a JSON string as OpenAI sends them, or an object). */
static int check_tool_calls(const cJSON *calls, int i, req_error *e) {
    if (!cJSON_IsArray(calls)) return req_fail(e, "messages", "messages[%d].tool_calls must be a list", i);
    if (cJSON_GetArraySize(calls) > REQ_MAX_TOOLS)
        return req_fail(e, "messages", "messages[%d].tool_calls holds more than %d calls", i, REQ_MAX_TOOLS);
    const cJSON *call;
    cJSON_ArrayForEach(call, calls) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(call, "id");
        if (!cJSON_IsObject(call) || !cJSON_IsObject(fn) || !cJSON_IsString(name) ||
            (args && !cJSON_IsString(args) && !cJSON_IsObject(args)) || (id && !cJSON_IsString(id)))
            return req_fail(e, "messages", "messages[%d].tool_calls: each needs a function with a name and arguments", i);
    }
    return 0;
}

/* The checked messages m (r->msgs holds their roles and contents) in
 * OpenAI's form as JSON text, for a template that sees tool calls: role,
 * content, an assistant's tool_calls and reasoning_content, a tool's
 * tool_call_id. */
static char *openai_messages(const cJSON *m, const req_params *r) {
    cJSON *conv = cJSON_CreateArray();
    int ok = conv != NULL, i = 0;
    const cJSON *msg;
    cJSON_ArrayForEach(msg, m) {
        if (!ok) break;
        const char *rs = r->msgs[i].role;
        const cJSON *calls = !strcmp(rs, "assistant") ? req_field(msg, "tool_calls") : NULL;
        const cJSON *id = !strcmp(rs, "tool") ? req_field(msg, "tool_call_id") : NULL;
        const cJSON *reasoning = !strcmp(rs, "assistant") ? req_field(msg, "reasoning_content") : NULL;
        cJSON *o = cJSON_CreateObject();
        if (!o || !cJSON_AddItemToArray(conv, o)) {
            cJSON_Delete(o);
            ok = 0;
            break;
        }
        ok = cJSON_AddStringToObject(o, "role", rs) && cJSON_AddStringToObject(o, "content", r->msgs[i].content) &&
             (!calls || cJSON_AddItemToObject(o, "tool_calls", cJSON_Duplicate(calls, 1))) &&
             (!id || cJSON_AddStringToObject(o, "tool_call_id", id->valuestring)) &&
             (!reasoning || cJSON_AddStringToObject(o, "reasoning_content", reasoning->valuestring));
        i++;
    }
    char *text = ok ? cJSON_PrintUnformatted(conv) : NULL;
    cJSON_Delete(conv);
    return text;
}

static int parse_messages(const cJSON *root, req_params *r, req_error *e) {
    const cJSON *m = req_field(root, "messages");
    if (!m) return req_fail(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(m)) return req_fail(e, "messages", "'messages' must be a list of {role, content} objects");
    int n = cJSON_GetArraySize(m);
    if (n == 0) return req_fail(e, "messages", "'messages' is empty");
    if (n > MAX_MESSAGES) return req_fail(e, "messages", "'messages' holds more than %d messages", MAX_MESSAGES);
    if (!(r->msgs = calloc((size_t)n, sizeof *r->msgs))) return NOMEM(e);
    int openai_form = 0; /* a message only a template in OpenAI's form sees whole */
    const cJSON *msg;
    int i = 0;
    cJSON_ArrayForEach(msg, m) {
        if (!cJSON_IsObject(msg)) return req_fail(e, "messages", "messages[%d] must be an object", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsString(role)) return req_fail(e, "messages", "messages[%d].role must be a string", i);
        const char *rs = role->valuestring;
        if (!strcmp(rs, "developer")) rs = "system";
        if (strcmp(rs, "system") && strcmp(rs, "user") && strcmp(rs, "assistant") && strcmp(rs, "tool"))
            return req_fail(e, "messages", "messages[%d].role '%.40s' is not supported (system, user, assistant or tool)",
                        i, role->valuestring);
        if (!(r->msgs[i].role = dup_str(rs))) return NOMEM(e);
        r->n_msgs = i + 1;
        if (message_content(req_field(msg, "content"), i, &r->msgs[i].content, e)) return -1;
        const cJSON *calls = !strcmp(rs, "assistant") ? req_field(msg, "tool_calls") : NULL;
        const cJSON *id = !strcmp(rs, "tool") ? req_field(msg, "tool_call_id") : NULL;
        const cJSON *reasoning = !strcmp(rs, "assistant") ? req_field(msg, "reasoning_content") : NULL;
        if (reasoning && !cJSON_IsString(reasoning))
            return req_fail(e, "messages", "messages[%d].reasoning_content must be a string", i);
        if (calls && check_tool_calls(calls, i, e)) return -1;
        if (id && !cJSON_IsString(id)) return req_fail(e, "messages", "messages[%d].tool_call_id must be a string", i);
        r->tool_msgs |= calls != NULL || !strcmp(rs, "tool");
        openai_form |= calls != NULL || !strcmp(rs, "tool") || reasoning != NULL;
        i++;
    }
    if (parse_tools(root, r, e)) return -1;
    if ((openai_form || r->tools_json) && !(r->messages_json = openai_messages(m, r))) return NOMEM(e);
    return 0;
}

/* np prompts of a well-formed list: within REQ_MAX_CHOICES with n, and
 * room for where each ends. */
static int prompts_room(int np, req_params *r, req_error *e) {
    if (np > REQ_MAX_CHOICES / r->n)
        return req_fail(e, "prompt", "'prompt' holds %d prompts and 'n' is %d: %d choices, beyond the limit of %d per "
                    "request", np, r->n, np * r->n, REQ_MAX_CHOICES);
    if (!(r->prompt_end = malloc(sizeof *r->prompt_end * (size_t)np))) return NOMEM(e);
    r->n_prompts = np;
    return 0;
}

/* The np texts from first on (a list's items, or the one string) into
 * r->prompt, each ending in its NUL (strings never hold one: has_nul). */
static int prompt_texts(const cJSON *first, int np, req_params *r, req_error *e) {
    size_t len = 0;
    const cJSON *s = first;
    for (int i = 0; i < np; i++, s = s->next) {
        if (!cJSON_IsString(s))
            return req_fail(e, "prompt", "prompt[%d] must be a string, as prompt[0] is (a list of prompts holds strings "
                        "or lists of token ids, not both)", i);
        len += strlen(s->valuestring) + 1;
    }
    if (prompts_room(np, r, e)) return -1;
    if (!(r->prompt = malloc(len))) return NOMEM(e);
    size_t at = 0;
    s = first;
    for (int i = 0; i < np; i++, s = s->next) {
        size_t n = strlen(s->valuestring) + 1;
        memcpy(r->prompt + at, s->valuestring, n);
        r->prompt_end[i] = at += n;
    }
    return 0;
}

/* The np lists of token ids from first on (nested: a list's items; else
 * first is the one list) into r->prompt_tokens. */
static int prompt_ids(const cJSON *first, int np, int nested, req_params *r, req_error *e) {
    size_t total = 0;
    const cJSON *a = first;
    for (int i = 0; i < np; i++, a = a->next) {
        if (!cJSON_IsArray(a))
            return req_fail(e, "prompt", "prompt[%d] must be a list of token ids, as prompt[0] is (a list of prompts "
                        "holds strings or lists of token ids, not both)", i);
        int n = cJSON_GetArraySize(a);
        if (n == 0)
            return nested && np > 1 ? req_fail(e, "prompt", "prompt[%d] is an empty list of tokens", i)
                                    : req_fail(e, "prompt", "'prompt' is an empty list of tokens");
        if ((total += (size_t)n) > MAX_PROMPT_TOKENS)
            return req_fail(e, "prompt", "'prompt' holds more than %d tokens", MAX_PROMPT_TOKENS);
    }
    if (prompts_room(np, r, e)) return -1;
    if (!(r->prompt_tokens = malloc(sizeof(int32_t) * total))) return NOMEM(e);
    int at = 0;
    a = first;
    for (int i = 0; i < np; i++, a = a->next) {
        const cJSON *t;
        int j = 0;
        cJSON_ArrayForEach(t, a) {
            if (!cJSON_IsNumber(t) || !isfinite(t->valuedouble) || floor(t->valuedouble) != t->valuedouble ||
                t->valuedouble < 0 || t->valuedouble > INT32_MAX)
                return nested ? req_fail(e, "prompt", "prompt[%d][%d] is not a token id (a non-negative integer)", i, j)
                              : req_fail(e, "prompt", "prompt[%d] is not a token id (a non-negative integer)", j);
            r->prompt_tokens[at++] = (int32_t)t->valuedouble;
            j++;
        }
        r->prompt_end[i] = (size_t)at;
    }
    r->n_prompt_tokens = at;
    return 0;
}

/* prompt: a string, a list of token ids, or a list of prompts (all strings
 * or all lists of token ids), as OpenAI's legacy completions take it. */
static int parse_prompt(const cJSON *root, req_params *r, req_error *e) {
    const cJSON *p = req_field(root, "prompt");
    if (!p) return req_fail(e, "prompt", "'prompt' is required");
    if (cJSON_IsString(p)) return prompt_texts(p, 1, r, e);
    if (!cJSON_IsArray(p))
        return req_fail(e, "prompt", "'prompt' must be a string, a list of token ids or a list of prompts");
    const cJSON *first = p->child;
    if (!cJSON_IsString(first) && !cJSON_IsArray(first)) return prompt_ids(p, 1, 0, r, e);
    const int np = cJSON_GetArraySize(p);
    if (np > REQ_MAX_CHOICES)
        return req_fail(e, "prompt", "'prompt' holds more than %d prompts (the limit per request, times 'n')",
                    REQ_MAX_CHOICES);
    return cJSON_IsString(first) ? prompt_texts(first, np, r, e) : prompt_ids(first, np, 1, r, e);
}

const char *req_prompt_text(const req_params *p, int i) {
    return p->prompt ? p->prompt + (i ? p->prompt_end[i - 1] : 0) : NULL;
}

const int32_t *req_prompt_ids(const req_params *p, int i, int *n) {
    if (!p->prompt_tokens) return *n = 0, NULL;
    const size_t at = i ? p->prompt_end[i - 1] : 0;
    *n = (int)(p->prompt_end[i] - at);
    return p->prompt_tokens + at;
}

static int parse_stop(const cJSON *root, req_params *r, req_error *e) {
    const cJSON *s = req_field(root, "stop");
    if (!s) return 0;
    if (cJSON_IsString(s)) {
        if (!s->valuestring[0]) return 0;
        if (strlen(s->valuestring) > REQ_MAX_STOP_LEN)
            return req_fail(e, "stop", "a stop string is longer than %d bytes", REQ_MAX_STOP_LEN);
        if (!(r->stop[0] = dup_str(s->valuestring))) return NOMEM(e);
        r->n_stop = 1;
        return 0;
    }
    if (!cJSON_IsArray(s)) return req_fail(e, "stop", "'stop' must be a string or a list of strings");
    if (cJSON_GetArraySize(s) > REQ_MAX_STOP) return req_fail(e, "stop", "'stop' holds more than %d strings", REQ_MAX_STOP);
    const cJSON *x;
    cJSON_ArrayForEach(x, s) {
        if (!cJSON_IsString(x)) return req_fail(e, "stop", "'stop' must be a string or a list of strings");
        if (!x->valuestring[0]) continue;
        if (strlen(x->valuestring) > REQ_MAX_STOP_LEN)
            return req_fail(e, "stop", "a stop string is longer than %d bytes", REQ_MAX_STOP_LEN);
        if (!(r->stop[r->n_stop] = dup_str(x->valuestring))) return NOMEM(e);
        r->n_stop++;
    }
    return 0;
}

static int parse_logprobs(const cJSON *root, req_params *r, req_error *e) {
    double v;
    int rc;
    if (r->kind == REQ_COMPLETION) { /* logprobs: how many alternatives (0 = only the sampled token's) */
        if ((rc = get_int(root, "logprobs", 0, REQ_MAX_TOP_LOGPROBS, &v, e)) < 0) return -1;
        if (rc) r->logprobs = 1, r->top_logprobs = (int)v;
        return 0;
    }
    if (get_bool(root, "logprobs", &r->logprobs, e) < 0) return -1;
    if ((rc = get_int(root, "top_logprobs", 0, REQ_MAX_TOP_LOGPROBS, &v, e)) < 0) return -1;
    if (rc) {
        if (!r->logprobs) return req_fail(e, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
        r->top_logprobs = (int)v;
    }
    return 0;
}

static int parse_sampling(const cJSON *root, req_params *r, req_error *e) {
    double v;
    int rc;
    if (get_number(root, "temperature", 0, 100, &r->temperature, e) < 0) return -1;
    if (get_number(root, "top_p", 0, 1, &r->top_p, e) < 0) return -1;
    if (!isnan(r->top_p) && r->top_p <= 0) return req_fail(e, "top_p", "'top_p' must be above 0 (got %g)", r->top_p);
    if (get_number(root, "min_p", 0, 1, &r->min_p, e) < 0) return -1;
    if (get_number(root, "presence_penalty", -2, 2, &r->presence_penalty, e) < 0) return -1;
    if (get_number(root, "frequency_penalty", -2, 2, &r->frequency_penalty, e) < 0) return -1;
    /* llama-server's name, then vLLM's */
    const char *rp = req_field(root, "repeat_penalty") ? "repeat_penalty" : "repetition_penalty";
    if (get_number(root, rp, 0, 100, &r->repeat_penalty, e) < 0) return -1;
    if (!isnan(r->repeat_penalty) && r->repeat_penalty <= 0)
        return req_fail(e, rp, "'%s' must be above 0 (got %g)", rp, r->repeat_penalty);
    if ((rc = get_int(root, "top_k", -1, 1 << 30, &v, e)) < 0) return -1;
    if (rc) r->top_k = v < 0 ? 0 : (int)v;
    if ((rc = get_int(root, "repeat_last_n", 0, 1 << 20, &v, e)) < 0) return -1;
    if (rc) r->repeat_last_n = (int)v;
    if ((rc = get_int(root, "seed", -9223372036854775808.0, 18446744073709551615.0, &v, e)) < 0) return -1;
    if (rc) {
        r->has_seed = 1;
        r->seed = v < 0 ? (uint64_t)(int64_t)v : v >= 18446744073709551615.0 ? UINT64_MAX : (uint64_t)v;
    }
    return 0;
}

/* chat: chat_template_kwargs and reasoning_format (llama-server's, vLLM's) */
static int parse_template_fields(const cJSON *root, req_params *r, req_error *e) {
    if (r->kind != REQ_CHAT) return 0;
    const cJSON *kw = req_field(root, "chat_template_kwargs");
    if (kw) { /* the template's own variables: checked when the template renders */
        if (!cJSON_IsObject(kw)) return req_fail(e, "chat_template_kwargs", "'chat_template_kwargs' must be an object");
        static const char *const own[] = {"messages", "add_generation_prompt", "tools", "documents"};
        for (size_t k = 0; k < sizeof own / sizeof *own; k++)
            if (cJSON_GetObjectItemCaseSensitive(kw, own[k]))
                return req_fail(e, "chat_template_kwargs", "chat_template_kwargs may not set '%s'", own[k]);
        if (!(r->template_kwargs = cJSON_PrintUnformatted(kw))) return NOMEM(e);
    }
    const cJSON *rf = req_field(root, "reasoning_format");
    if (rf) {
        const char *v = cJSON_IsString(rf) ? rf->valuestring : "";
        if (strcmp(v, "none") && strcmp(v, "deepseek") && strcmp(v, "auto"))
            return req_fail(e, "reasoning_format", "'reasoning_format' must be \"none\", \"deepseek\" or \"auto\"");
        r->reasoning_format = strcmp(v, "none") != 0;
    }
    return 0;
}

/* logit_bias: {"token id": bias in [-100, 100]}; a repeated id keeps its
 * last bias (as Python's json.loads would). The ids are checked against
 * the vocabulary where the model is known (routes.c). */
static int parse_logit_bias(const cJSON *root, req_params *r, req_error *e) {
    const cJSON *lb = req_field(root, "logit_bias");
    if (!lb) return 0;
    if (!cJSON_IsObject(lb)) return req_fail(e, "logit_bias", "'logit_bias' must be an object of token ids and biases");
    const int n = cJSON_GetArraySize(lb);
    if (n > REQ_MAX_LOGIT_BIAS) return req_fail(e, "logit_bias", "'logit_bias' holds more than %d tokens", REQ_MAX_LOGIT_BIAS);
    if (!n) return 0;
    if (!(r->bias_tok = malloc(sizeof *r->bias_tok * (size_t)n)) || !(r->bias_val = malloc(sizeof *r->bias_val * (size_t)n)))
        return NOMEM(e);
    for (const cJSON *it = lb->child; it; it = it->next) {
        const char *k = it->string;
        char *end = NULL;
        const long long id = strtoll(k, &end, 10);
        if (!*k || *end || k[0] == '-' || k[0] == '+' || k[0] == ' ' || id < 0 || id > INT32_MAX)
            return req_fail(e, "logit_bias", "logit_bias key '%.40s' is not a token id", k);
        if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble) || it->valuedouble < -100 || it->valuedouble > 100)
            return req_fail(e, "logit_bias", "logit_bias['%.40s'] must be a number between -100 and 100", k);
        int at = 0;
        while (at < r->n_logit_bias && r->bias_tok[at] != (int32_t)id) at++;
        r->bias_tok[at] = (int32_t)id;
        r->bias_val[at] = (float)it->valuedouble;
        if (at == r->n_logit_bias) r->n_logit_bias++;
    }
    return 0;
}

/* Fields of OpenAI's API that would change the answer and that doppler
 * serve does not implement: refused, not ignored (llama-server and vLLM
 * refuse tools they cannot parse too). */
static int refuse_unsupported(const cJSON *root, const req_params *r, req_error *e) {
    if (r->kind == REQ_COMPLETION && req_field(root, "tools")) /* a chat field: not the completions endpoint's */
        return req_fail(e, "tools", "'tools' needs /v1/chat/completions");
    if (r->kind != REQ_COMPLETION) return 0;
    const cJSON *echo = req_field(root, "echo"), *suffix = req_field(root, "suffix");
    double v;
    int rc;
    if (echo && !cJSON_IsFalse(echo)) return req_fail(e, "echo", "'echo' is not supported (it must be false)");
    if (suffix && !(cJSON_IsString(suffix) && !suffix->valuestring[0]))
        return req_fail(e, "suffix", "'suffix' (fill in the middle) is not supported");
    if ((rc = get_int(root, "best_of", -1e18, 1e18, &v, e)) < 0) return -1;
    if (rc && v != r->n)
        return req_fail(e, "best_of", "'best_of' must equal 'n' (%d): candidates are not ranked (got %.0f)", r->n, v);
    return 0;
}

/* response_format: text; json_object (llama-server's optional "schema"
 * beside it); json_schema with json_schema.schema (absent: any JSON value).
 * The schema is checked here, so that what cannot be honoured is a 400. */
static int parse_response_format(const cJSON *root, req_params *r, req_error *e) {
    const cJSON *f = req_field(root, "response_format");
    if (!f) return 0;
    const cJSON *ty = cJSON_IsObject(f) ? cJSON_GetObjectItemCaseSensitive(f, "type") : NULL;
    if (!cJSON_IsString(ty)) return req_fail(e, "response_format", "'response_format' must be an object with a 'type'");
    const char *t = ty->valuestring;
    if (!strcmp(t, "text")) return 0;
    const cJSON *sch = NULL;
    if (!strcmp(t, "json_object")) {
        sch = cJSON_GetObjectItemCaseSensitive(f, "schema");
    } else if (!strcmp(t, "json_schema")) {
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(f, "json_schema");
        if (!cJSON_IsObject(js))
            return req_fail(e, "response_format", "response_format json_schema needs a 'json_schema' object");
        if (!(sch = cJSON_GetObjectItemCaseSensitive(js, "schema")) && !(r->json_schema = dup_str("{}"))) return NOMEM(e);
    } else {
        return req_fail(e, "response_format", "response_format '%.40s' is not supported (text, json_object, json_schema)", t);
    }
    r->json = 1;
    if (sch) {
        char *txt = cJSON_PrintUnformatted(sch);
        r->json_schema = txt ? dup_str(txt) : NULL;
        cJSON_free(txt);
        if (!r->json_schema) return NOMEM(e);
    }
    if (r->json_schema && dp_json_schema_check(r->json_schema, strlen(r->json_schema)))
        return req_fail(e, "response_format", "%s", dp_last_error());
    if (r->tools_json)
        return req_fail(e, "response_format", "response_format %s with tools is not supported: the answer could not "
                    "call them", t);
    return 0;
}

/* grammar (llama-server's field): a GBNF grammar the answer is written in,
 * checked here so that a bad one is a 400 naming it; "" is none. Not with
 * response_format or tools, which constrain the answer too. */
static int parse_grammar(const cJSON *root, req_params *r, req_error *e) {
    const cJSON *g = req_field(root, "grammar");
    if (!g) return 0;
    if (!cJSON_IsString(g)) return req_fail(e, "grammar", "'grammar' must be a string (a GBNF grammar)");
    if (!g->valuestring[0]) return 0;
    if (r->json) return req_fail(e, "grammar", "'grammar' and 'response_format' cannot both constrain the answer");
    if (r->tools_json)
        return req_fail(e, "grammar", "'grammar' with tools is not supported: the answer could not call them");
    if (dp_gbnf_check(g->valuestring, strlen(g->valuestring))) return req_fail(e, "grammar", "%s", dp_last_error());
    return (r->grammar = dup_str(g->valuestring)) ? 0 : NOMEM(e);
}

static int parse_root(const cJSON *root, req_params *r, req_error *e) {
    double v;
    int rc;
    if (!cJSON_IsObject(root)) return req_fail(e, NULL, "the request body must be a JSON object");
    const cJSON *model = req_field(root, "model");
    if (model && !cJSON_IsString(model)) return req_fail(e, "model", "'model' must be a string");
    if (model && !(r->model = dup_str(model->valuestring))) return NOMEM(e);
    if ((rc = get_int(root, "n", 1, REQ_MAX_N, &v, e)) < 0) return -1;
    if (rc) r->n = (int)v;
    if (r->kind == REQ_CHAT ? parse_messages(root, r, e) : parse_prompt(root, r, e)) return -1;
    /* max_completion_tokens is the chat API's newer name; it wins */
    const char *mt = r->kind == REQ_CHAT && req_field(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
    if ((rc = get_int(root, mt, 1, 1 << 30, &v, e)) < 0) return -1;
    if (rc) r->max_tokens = (int)v;
    if (parse_sampling(root, r, e) || parse_stop(root, r, e) || parse_logprobs(root, r, e)) return -1;
    if (get_bool(root, "stream", &r->stream, e) < 0 || get_bool(root, "ignore_eos", &r->ignore_eos, e) < 0) return -1;
    if (parse_template_fields(root, r, e) || parse_logit_bias(root, r, e) || refuse_unsupported(root, r, e) ||
        parse_response_format(root, r, e) || parse_grammar(root, r, e))
        return -1;
    const cJSON *so = req_field(root, "stream_options");
    if (so) {
        if (!cJSON_IsObject(so)) return req_fail(e, "stream_options", "'stream_options' must be an object");
        if (get_bool(so, "include_usage", &r->include_usage, e) < 0) return -1;
    }
    return 0;
}

struct cJSON *req_json(const char *body, size_t len, req_error *e) {
    if (!req_utf8_valid(body, len)) return req_fail(e, NULL, "the request body is not valid UTF-8"), NULL;
    if (has_nul(body, len)) return req_fail(e, NULL, "the request body holds a NUL character, which is not supported"), NULL;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, 0);
    if (!root) {
        size_t at = end && end >= body && end <= body + len ? (size_t)(end - body) : 0;
        req_fail(e, NULL, "the request body is not valid JSON (error near byte %zu)", at);
        return NULL;
    }
    while (end < body + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r')) end++;
    if (end < body + len) {
        req_fail(e, NULL, "the request body has data after the JSON value (byte %zu)", (size_t)(end - body));
        cJSON_Delete(root);
        return NULL;
    }
    return root;
}

int req_parse(req_kind kind, const char *body, size_t len, req_params *r, req_error *e) {
    memset(r, 0, sizeof *r);
    memset(e, 0, sizeof *e);
    r->kind = kind;
    r->n = r->n_prompts = 1;
    r->max_tokens = r->top_k = r->repeat_last_n = r->reasoning_format = -1;
    r->temperature = r->top_p = r->min_p = r->presence_penalty = r->frequency_penalty = r->repeat_penalty = NAN;
    cJSON *root = req_json(body, len, e);
    int rc = root ? parse_root(root, r, e) : -1;
    cJSON_Delete(root);
    if (rc) req_params_free(r);
    return rc;
}

void req_params_free(req_params *r) {
    if (!r) return;
    free(r->model);
    for (int i = 0; i < r->n_msgs; i++) {
        free(r->msgs[i].role);
        free(r->msgs[i].content);
    }
    free(r->msgs);
    free(r->prompt);
    free(r->prompt_tokens);
    free(r->prompt_end);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    cJSON_free(r->template_kwargs);
    free(r->bias_tok);
    free(r->bias_val);
    cJSON_free(r->tools_json);
    cJSON_free(r->messages_json);
    free(r->json_schema);
    free(r->grammar);
    free(r->tool_name);
    free(r->echo);
    req_kind kind = r->kind;
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->n = r->n_prompts = 1;
}
