/* Tool calls out of a chat answer (see toolcall.h). */
#include "toolcall.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";

void calls_init(call_split *c, int format) {
    memset(c, 0, sizeof *c);
    c->format = format;
}

int tools_format(const char *t) {
    if (!t) return TOOLS_NONE;
    if (strstr(t, OPEN)) return TOOLS_TAGGED;
    if (strstr(t, "\"parameters\": dictionary of argument name")) return TOOLS_JSON; /* Llama 3.1's wording */
    return TOOLS_NONE;
}

void calls_free(call_split *c) {
    for (int i = 0; i < c->n_calls; i++) free(c->calls[i].name), free(c->calls[i].arguments);
    free(c->calls);
    sb_free(&c->hold);
    sb_free(&c->ws);
    memset(c, 0, sizeof *c);
}

static int is_space(char ch) { return ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t'; }

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) memcpy(d, s, n), d[n] = 0;
    return d;
}

/* The block's text as a call: {"name": string, "arguments": any} (or
 * "parameters", Llama's word); 0 when it is not one. */
static int add_call(call_split *c, const char *body, size_t n) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(body, n, &end, 0);
    while (j && end < body + n && is_space(*end)) end++;
    if (j && end != body + n) { /* text after the object: not a call */
        cJSON_Delete(j);
        return 0;
    }
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    if (!args) args = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    if (!cJSON_IsObject(j) || !cJSON_IsString(name) || !name->valuestring[0]) {
        cJSON_Delete(j);
        return 0;
    }
    char *a = !args ? dup_n("{}", 2) : cJSON_IsString(args) ? dup_n(args->valuestring, strlen(args->valuestring))
                                                            : cJSON_PrintUnformatted(args);
    char *nm = dup_n(name->valuestring, strlen(name->valuestring));
    cJSON_Delete(j);
    if (c->n_calls == c->cap_calls) {
        const int cap = c->cap_calls ? 2 * c->cap_calls : 4;
        tool_call *nc = realloc(c->calls, sizeof *nc * (size_t)cap);
        if (nc) c->calls = nc, c->cap_calls = cap;
    }
    if (!a || !nm || c->n_calls == c->cap_calls) {
        free(a), free(nm);
        c->oom = 1;
        return 1; /* dropped, not shown as text: the request reports out of memory */
    }
    c->calls[c->n_calls++] = (tool_call){nm, a};
    return 1;
}

/* Whether hold may still become OPEN. */
static int may_open(const sbuf *h) { return h->n <= sizeof OPEN - 1 && !memcmp(h->s, OPEN, h->n); }

/* TOOLS_JSON: an answer opening with '{' is held whole; anything else is content. */
static void json_byte(call_split *c, char ch, sbuf *content) {
    if (c->in_call) {
        sb_add(&c->hold, &ch, 1);
    } else if (c->plain) {
        sb_add(content, &ch, 1);
    } else if (is_space(ch)) {
        sb_add(&c->ws, &ch, 1);
    } else if (ch == '{') {
        c->in_call = 1;
        sb_add(&c->hold, &ch, 1);
    } else {
        c->plain = 1;
        sb_add(content, c->ws.s, c->ws.n);
        sb_clear(&c->ws);
        sb_add(content, &ch, 1);
    }
}

static void byte(call_split *c, char ch, sbuf *content) {
    if (c->format == TOOLS_JSON) {
        json_byte(c, ch, content);
        return;
    }
    if (c->in_call) {
        sb_add(&c->hold, &ch, 1);
        const size_t k = sizeof CLOSE - 1;
        if (c->hold.n < k || memcmp(c->hold.s + c->hold.n - k, CLOSE, k)) return;
        const size_t body = c->hold.n - k;
        c->in_call = 0;
        if (add_call(c, c->hold.s, body)) {
            sb_clear(&c->ws); /* the whitespace before the block */
        } else { /* not a call: the block is text */
            sb_add(content, c->ws.s, c->ws.n);
            sb_clear(&c->ws);
            sb_puts(content, OPEN);
            sb_add(content, c->hold.s, c->hold.n);
        }
        sb_clear(&c->hold);
        return;
    }
    if (!c->hold.n && is_space(ch)) {
        sb_add(&c->ws, &ch, 1);
        return;
    }
    sb_add(&c->hold, &ch, 1);
    if (may_open(&c->hold)) {
        if (c->hold.n == sizeof OPEN - 1) c->in_call = 1, sb_clear(&c->hold);
        return;
    }
    /* not a tag: the held whitespace and text are content; a '<' that ends the
     * hold may start the tag again */
    const int relaunch = c->hold.n > 1 && ch == '<';
    sb_add(content, c->ws.s, c->ws.n);
    sb_clear(&c->ws);
    sb_add(content, c->hold.s, c->hold.n - (size_t)relaunch);
    sb_clear(&c->hold);
    if (relaunch) sb_add(&c->hold, &ch, 1);
}

void calls_feed(call_split *c, const char *s, size_t n, sbuf *content) {
    for (size_t i = 0; i < n; i++) byte(c, s[i], content);
    if (c->hold.oom || c->ws.oom) c->oom = 1;
}

void calls_flush(call_split *c, sbuf *content) {
    if (c->format == TOOLS_JSON) {
        size_t n = c->hold.n;
        while (n > 0 && is_space(c->hold.s[n - 1])) n--;
        if (!c->in_call || !add_call(c, c->hold.s, n)) { /* not a call: the answer as it came */
            sb_add(content, c->ws.s, c->ws.n);
            sb_add(content, c->hold.s, c->hold.n);
        }
        c->in_call = 0;
        sb_clear(&c->hold);
        sb_clear(&c->ws);
        return;
    }
    if (c->in_call) { /* left open: text */
        sb_add(content, c->ws.s, c->ws.n);
        sb_puts(content, OPEN);
        sb_add(content, c->hold.s, c->hold.n);
    } else {
        if (!c->n_calls || c->hold.n) sb_add(content, c->ws.s, c->ws.n);
        sb_add(content, c->hold.s, c->hold.n);
    }
    c->in_call = 0;
    sb_clear(&c->hold);
    sb_clear(&c->ws);
}

char *calls_schema(const char *tools_json, const char *name, int format, const char **before, const char **after) {
    *before = format == TOOLS_TAGGED ? "<tool_call>" : NULL;
    *after = format == TOOLS_TAGGED ? "</tool_call>" : NULL;
    const char *key = format == TOOLS_TAGGED ? "arguments" : "parameters";
    cJSON *tools = cJSON_Parse(tools_json), *alts = cJSON_CreateArray(), *tool;
    char *out = NULL;
    int ok = tools && alts;
    cJSON_ArrayForEach(tool, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *fname = cJSON_GetObjectItemCaseSensitive(fn, "name");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (!ok || !cJSON_IsString(fname) || (name && strcmp(fname->valuestring, name))) continue;
        cJSON *alt = cJSON_CreateObject(), *props = cJSON_CreateObject(), *nm = cJSON_CreateObject();
        cJSON *req = cJSON_CreateArray();
        ok = alt && props && nm && req && cJSON_AddStringToObject(alt, "type", "object") &&
             cJSON_AddStringToObject(nm, "const", fname->valuestring) && cJSON_AddItemToObject(props, "name", nm);
        if (ok) nm = NULL;
        /* a function without parameters takes an object, as OpenAI's arguments always are */
        cJSON *ps = params ? cJSON_Duplicate(params, 1) : cJSON_CreateObject();
        ok = ok && ps && (params || cJSON_AddStringToObject(ps, "type", "object")) && cJSON_AddItemToObject(props, key, ps);
        if (!ok) cJSON_Delete(ps);
        ok = ok && cJSON_AddItemToObject(alt, "properties", props);
        if (ok) props = NULL;
        ok = ok && cJSON_AddItemToArray(req, cJSON_CreateString("name")) &&
             cJSON_AddItemToArray(req, cJSON_CreateString(key)) && cJSON_AddItemToObject(alt, "required", req);
        if (ok) req = NULL;
        ok = ok && cJSON_AddItemToArray(alts, alt);
        if (!ok) cJSON_Delete(alt);
        cJSON_Delete(props);
        cJSON_Delete(nm);
        cJSON_Delete(req);
    }
    if (ok && cJSON_GetArraySize(alts)) {
        cJSON *sch = cJSON_CreateObject();
        if (sch && cJSON_AddItemToObject(sch, "anyOf", alts)) {
            alts = NULL;
            out = cJSON_PrintUnformatted(sch);
        }
        cJSON_Delete(sch);
    }
    cJSON_Delete(alts);
    cJSON_Delete(tools);
    return out;
}
