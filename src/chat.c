/* Chat templates. A model's own tokenizer.chat_template (Jinja) is rendered
 * by the interpreter in src/jinja with the variables apply_chat_template
 * passes (messages, add_generation_prompt, bos_token / eos_token from the
 * vocabulary, tools and documents none). Models without one use built-in
 * templates: the prompt formats of Gemma, ChatML (Qwen2/2.5/3,
 * SmolLM2) and Llama 3, written out in C so that the output equals what
 * transformers' apply_chat_template renders from the models' own Jinja
 * templates (golden strings in tests/fixtures/chat/, produced by
 * tools/reference/chat_reference.py).
 *
 *  gemma   <bos><start_of_turn>user\n{system\n\n}{content|trim}<end_of_turn>\n
 *          <start_of_turn>model\n...  (roles must alternate user/model)
 *  chatml  {<|im_start|>system\n{default}<|im_end|>\n}<|im_start|>{role}\n{content}<|im_end|>\n
 *          the default system prompt is taken from the model's template when
 *          it has one (SmolLM2, Qwen2.5), none otherwise (Qwen3); with a
 *          Qwen3 template (reasoning_content), assistant turns drop their
 *          <think> part, and the last one after the last user turn is
 *          written with a <think> block, as that template does
 *  llama3  <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content|trim}<|eot_id|>
 *
 * The caller's variables (dp_chat_apply_vars: chat_template_kwargs) join
 * those of a Jinja template; the built-ins read enable_thinking alone.
 *
 * Detection: tokenizer.chat_template containing <start_of_turn>, <|im_start|>
 * or <|start_header_id|>; without a template, Gemma architectures use gemma
 * (the Gemma 3 270M GGUF carries no template). */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "jinja/jinja.h"
#include "model.h"
#include "tokenizer/internal.h"
#include "util.h"

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} sbuf;

static void sb_put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (tk_grow((void **)&b->p, &b->cap, b->n + n + 1, 1)) {
        b->oom = 1;
        return;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void sb_str(sbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

/* Jinja's trim: Python's str.strip() */
static void sb_trimmed(sbuf *b, const char *s) {
    size_t n = strlen(s), a = 0, e = n;
    while (a < n) {
        int adv;
        uint32_t c = tk_utf8_decode(s + a, n - a, &adv);
        if (!tk_py_isspace(c)) break;
        a += (size_t)adv;
    }
    while (e > a) {
        size_t k = e - 1;
        while (k > a && ((unsigned char)s[k] & 0xC0) == 0x80) k--;
        int adv;
        uint32_t c = tk_utf8_decode(s + k, e - k, &adv);
        if (!tk_py_isspace(c)) break;
        e = k;
    }
    sb_put(b, s + a, e - a);
}

typedef struct {
    const char *bos;            /* text of BOS for gemma/llama3 */
    const char *default_system; /* chatml */
    int think;                  /* chatml of Qwen3: assistant reasoning in <think> blocks */
    int no_think;               /* and enable_thinking false: an empty <think> block opens the answer */
} tmpl_opts;

static char *finish(sbuf *b) {
    if (b->oom) {
        free(b->p);
        dp_set_error(DP_ERR_NOMEM, "out of memory rendering the chat template");
        return NULL;
    }
    if (!b->p) sb_put(b, "", 0);
    return b->p;
}

static int check_msgs(const dp_chat_msg *m, int n) {
    if (n < 0 || (n > 0 && !m)) return dp_set_error(DP_ERR_ARG, "chat: bad message list");
    for (int i = 0; i < n; i++) {
        if (!m[i].role || !m[i].content) return dp_set_error(DP_ERR_ARG, "chat: message %d has no role or content", i);
        if (tk_utf8_validate(m[i].content, strlen(m[i].content)) >= 0)
            return dp_set_error(DP_ERR_ARG, "chat: message %d is not valid UTF-8", i);
    }
    return 0;
}

static char *render_gemma(const tmpl_opts *o, const dp_chat_msg *m, int n, int gen) {
    sbuf b = {0};
    sb_str(&b, o->bos);
    const char *prefix = NULL;
    int first = 0;
    if (n > 0 && !strcmp(m[0].role, "system")) {
        prefix = m[0].content;
        first = 1;
    }
    for (int i = first; i < n; i++) {
        int k = i - first;
        if ((strcmp(m[i].role, "user") == 0) != (k % 2 == 0)) {
            free(b.p);
            dp_set_error(DP_ERR_ARG, "gemma chat template: conversation roles must alternate user/assistant/user/... "
                                     "(message %d is '%s')", i, m[i].role);
            return NULL;
        }
        sb_str(&b, "<start_of_turn>");
        sb_str(&b, strcmp(m[i].role, "assistant") ? m[i].role : "model");
        sb_str(&b, "\n");
        if (k == 0 && prefix) {
            sb_str(&b, prefix);
            sb_str(&b, "\n\n");
        }
        sb_trimmed(&b, m[i].content);
        sb_str(&b, "<end_of_turn>\n");
    }
    if (gen) sb_str(&b, "<start_of_turn>model\n");
    return finish(&b);
}

/* Python's s.strip(chars) for a set of ASCII characters */
static void strip_set(const char **a, const char **e, const char *set, int left, int right) {
    while (left && *a < *e && strchr(set, **a)) (*a)++;
    while (right && *e > *a && strchr(set, (*e)[-1])) (*e)--;
}

static const char *rfind(const char *s, const char *e, const char *pat) {
    size_t k = strlen(pat);
    for (const char *p = e - k; p >= s; p--)
        if (!memcmp(p, pat, k)) return p;
    return NULL;
}

/* Qwen3: an assistant message "R</think>C" keeps only C (left-stripped of
 * newlines); after the last user query, the final message (or one with
 * reasoning) is written as <think>\nR\n</think>\n\nC. */
static void chatml_assistant(sbuf *b, const dp_chat_msg *m, int i, int n, int last_query) {
    const char *c = m[i].content, *ce = c + strlen(c);
    const char *ra = "", *re = ra;
    const char *tend = rfind(c, ce, "</think>");
    if (tend) {
        const char *first = strstr(c, "</think>");
        const char *content = tend + 8;
        /* reasoning: before the first </think>, right-stripped, after the last <think>, left-stripped */
        ra = c;
        re = first;
        strip_set(&ra, &re, "\n", 0, 1);
        const char *open = rfind(ra, re, "<think>");
        if (open) ra = open + 7;
        strip_set(&ra, &re, "\n", 1, 0);
        c = content;
        strip_set(&c, &ce, "\n", 1, 0);
    }
    sb_str(b, "<|im_start|>assistant\n");
    if (i > last_query && (i == n - 1 || re > ra)) {
        strip_set(&ra, &re, "\n", 1, 1);
        sb_str(b, "<think>\n");
        sb_put(b, ra, (size_t)(re - ra));
        sb_str(b, "\n</think>\n\n");
        strip_set(&c, &ce, "\n", 1, 0);
    }
    sb_put(b, c, (size_t)(ce - c));
}

static int is_tool_response(const char *s) {
    size_t n = strlen(s);
    return n >= 31 && !strncmp(s, "<tool_response>", 15) && !strcmp(s + n - 16, "</tool_response>");
}

static char *render_chatml(const tmpl_opts *o, const dp_chat_msg *m, int n, int gen) {
    sbuf b = {0};
    int last_query = n - 1;
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(m[i].role, "user") && !is_tool_response(m[i].content)) {
            last_query = i;
            break;
        }
    for (int i = 0; i < n; i++) {
        if (i == 0 && o->default_system && strcmp(m[0].role, "system")) {
            sb_str(&b, "<|im_start|>system\n");
            sb_str(&b, o->default_system);
            sb_str(&b, "<|im_end|>\n");
        }
        if (o->think && !strcmp(m[i].role, "assistant")) {
            chatml_assistant(&b, m, i, n, last_query);
        } else {
            sb_str(&b, "<|im_start|>");
            sb_str(&b, m[i].role);
            sb_str(&b, "\n");
            sb_str(&b, m[i].content);
        }
        sb_str(&b, "<|im_end|>\n");
    }
    if (gen) sb_str(&b, "<|im_start|>assistant\n");
    if (gen && o->think && o->no_think) sb_str(&b, "<think>\n\n</think>\n\n");
    return finish(&b);
}

static char *render_llama3(const tmpl_opts *o, const dp_chat_msg *m, int n, int gen) {
    sbuf b = {0};
    for (int i = 0; i < n; i++) {
        if (i == 0) sb_str(&b, o->bos);
        sb_str(&b, "<|start_header_id|>");
        sb_str(&b, m[i].role);
        sb_str(&b, "<|end_header_id|>\n\n");
        sb_trimmed(&b, m[i].content);
        sb_str(&b, "<|eot_id|>");
    }
    if (gen) sb_str(&b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return finish(&b);
}

static int is_builtin(const char *name) {
    return !strcmp(name, "gemma") || !strcmp(name, "chatml") || !strcmp(name, "llama3");
}

/* Jinja source rather than a template name: it has a tag */
static int is_jinja(const char *s) { return strstr(s, "{{") || strstr(s, "{%"); }

/* The template variables the caller's own (dp_chat_apply_vars) may not set:
 * doppler passes them, as apply_chat_template passes them by name. */
static const char *const RESERVED_VARS[] = {"messages", "add_generation_prompt", "tools", "documents"};

/* The caller's variables: NULL for none, else the parsed JSON object (the
 * last of duplicate names wins, as in Python's json.loads), or NULL with
 * *bad set and the error. */
static cJSON *parse_vars(const char *text, int *bad) {
    *bad = 0;
    if (!text) return NULL;
    cJSON *v = cJSON_Parse(text);
    if (!v || !cJSON_IsObject(v)) {
        cJSON_Delete(v);
        *bad = 1;
        dp_set_error(DP_ERR_ARG, "chat template variables must be a JSON object, e.g. {\"enable_thinking\": false}");
        return NULL;
    }
    for (const cJSON *it = v->child; it; it = it->next)
        for (size_t k = 0; k < sizeof RESERVED_VARS / sizeof *RESERVED_VARS; k++)
            if (!strcmp(it->string, RESERVED_VARS[k])) {
                cJSON_Delete(v);
                *bad = 1;
                dp_set_error(DP_ERR_ARG, "chat template variable '%s' is set by doppler, not by the caller",
                             RESERVED_VARS[k]);
                return NULL;
            }
    return v;
}

/* Renders Jinja source as apply_chat_template does, messages (taken) and
 * tools (NULL: none) as its variables; bos / eos may be NULL (then
 * undefined in the template, as when a tokenizer has none); extra: the
 * caller's variables (NULL: none), which override bos_token / eos_token as
 * apply_chat_template's keyword arguments do. */
static char *render_jinja_conv(const char *src, const char *bos, const char *eos, cJSON *msgs, const cJSON *tools,
                               int gen, const cJSON *extra) {
    char err[512];
    jinja_template *t = jinja_parse(src, strlen(src), err, sizeof err);
    if (!t) {
        cJSON_Delete(msgs);
        dp_set_error(DP_ERR_ARG, "chat template %s", err);
        return NULL;
    }
    cJSON *vars = cJSON_CreateObject();
    int oom = !vars || !msgs || !cJSON_AddItemToObject(vars, "messages", msgs);
    if (oom) cJSON_Delete(msgs);
    cJSON_AddBoolToObject(vars, "add_generation_prompt", gen);
    if (bos) cJSON_AddStringToObject(vars, "bos_token", bos);
    if (eos) cJSON_AddStringToObject(vars, "eos_token", eos);
    cJSON *tl = tools ? cJSON_Duplicate(tools, 1) : cJSON_CreateNull();
    if (!tl || !cJSON_AddItemToObject(vars, "tools", tl)) oom = 1, cJSON_Delete(tl);
    cJSON_AddNullToObject(vars, "documents");
    oom |= !cJSON_GetObjectItem(vars, "documents");
    for (const cJSON *it = extra ? extra->child : NULL; it && !oom; it = it->next) {
        cJSON *copy = cJSON_Duplicate(it, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(vars, it->string);
        oom = !copy || !cJSON_AddItemToObject(vars, it->string, copy);
        if (oom) cJSON_Delete(copy);
    }
    size_t len = 0;
    char *r = NULL;
    if (oom) dp_set_error(DP_ERR_NOMEM, "out of memory rendering the chat template");
    else if (!(r = jinja_render(t, vars, NULL, &len, err, sizeof err))) dp_set_error(DP_ERR_ARG, "chat template %s", err);
    else if (strlen(r) != len) {
        dp_set_error(DP_ERR_ARG, "the chat template rendered a NUL character");
        free(r);
        r = NULL;
    }
    cJSON_Delete(vars);
    jinja_free(t);
    return r;
}

/* Messages as a template's messages: [{role, content}]. */
static cJSON *msg_array(const dp_chat_msg *m, int n) {
    cJSON *msgs = cJSON_CreateArray();
    for (int i = 0; i < n && msgs; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(msgs, o);
        cJSON_AddStringToObject(o, "role", m[i].role);
        cJSON_AddStringToObject(o, "content", m[i].content);
    }
    return msgs;
}

/* OpenAI-style messages (dp_chat_apply_json) as a template's messages:
 * role and content strings (content null or absent: ""), tool_call_id,
 * name and reasoning_content where given, an assistant's tool_calls with each function's
 * arguments as an object where its JSON string holds one (templates write
 * arguments with tojson, as transformers' documentation passes them).
 * NULL with the error. */
static cJSON *conversation(const char *json) {
    cJSON *in = json ? cJSON_Parse(json) : NULL, *out = cJSON_CreateArray();
    const char *bad = !cJSON_IsArray(in) ? "the messages must be a JSON array" : NULL;
    int i = 0;
    for (const cJSON *msg = bad ? NULL : in->child; msg && !bad && out; msg = msg->next, i++) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(msg, "content");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(msg, "tool_call_id");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(msg, "name");
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(msg, "tool_calls");
        const cJSON *reasoning = cJSON_GetObjectItemCaseSensitive(msg, "reasoning_content");
        const char *c = cJSON_IsString(content) ? content->valuestring : "";
        if (!cJSON_IsString(role) || (content && !cJSON_IsString(content) && !cJSON_IsNull(content)) ||
            (id && !cJSON_IsString(id)) || (name && !cJSON_IsString(name)) || (calls && !cJSON_IsArray(calls)) ||
            (reasoning && !cJSON_IsString(reasoning) && !cJSON_IsNull(reasoning))) {
            bad = "a message needs a role and content strings (tool_calls a list)";
            break;
        }
        if (tk_utf8_validate(c, strlen(c)) >= 0 || tk_utf8_validate(role->valuestring, strlen(role->valuestring)) >= 0) {
            bad = "a message is not valid UTF-8";
            break;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(out, o);
        cJSON_AddStringToObject(o, "role", role->valuestring);
        cJSON_AddStringToObject(o, "content", c);
        if (id) cJSON_AddStringToObject(o, "tool_call_id", id->valuestring);
        if (name) cJSON_AddStringToObject(o, "name", name->valuestring);
        if (cJSON_IsString(reasoning)) cJSON_AddStringToObject(o, "reasoning_content", reasoning->valuestring);
        if (!calls) continue;
        cJSON *tc = cJSON_Duplicate(calls, 1);
        cJSON_AddItemToObject(o, "tool_calls", tc);
        for (cJSON *call = tc ? tc->child : NULL; call; call = call->next) {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
            cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            cJSON *parsed = cJSON_IsString(args) ? cJSON_Parse(args->valuestring) : NULL;
            if (cJSON_IsObject(parsed)) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", parsed);
            else cJSON_Delete(parsed);
        }
    }
    cJSON_Delete(in);
    if (bad || !out) {
        cJSON_Delete(out);
        if (bad) dp_set_error(DP_ERR_ARG, "chat: message %d: %s", i, bad);
        else dp_set_error(DP_ERR_NOMEM, "out of memory rendering the chat template");
        return NULL;
    }
    return out;
}

static char *render(const char *name, const tmpl_opts *o, const dp_chat_msg *m, int n, int gen) {
    if (!name) return dp_set_error(DP_ERR_ARG, "chat: no template name"), NULL;
    if (check_msgs(m, n)) return NULL;
    if (!strcmp(name, "gemma")) return render_gemma(o, m, n, gen);
    if (!strcmp(name, "chatml")) return render_chatml(o, m, n, gen);
    if (!strcmp(name, "llama3")) return render_llama3(o, m, n, gen);
    dp_set_error(DP_ERR_ARG, "unknown chat template '%.60s' (known: gemma, chatml, llama3, or Jinja source)", name);
    return NULL;
}

char *dp_chat_render(const char *name, const dp_chat_msg *msgs, int n, int add_generation_prompt) {
    if (name && !is_builtin(name) && is_jinja(name))
        return check_msgs(msgs, n) ? NULL
                                   : render_jinja_conv(name, NULL, NULL, msg_array(msgs, n), NULL, add_generation_prompt,
                                                       NULL);
    tmpl_opts o = {NULL, NULL, 0, 0};
    o.bos = name && !strcmp(name, "llama3") ? "<|begin_of_text|>" : "<bos>";
    return render(name, &o, msgs, n, add_generation_prompt);
}

const char *dp_chat_template_detect(const dp_model *m) {
    const char *t = m->chat_template;
    if (t) {
        if (strstr(t, "<start_of_turn>")) return "gemma";
        if (strstr(t, "<|im_start|>")) return "chatml";
        if (strstr(t, "<|start_header_id|>")) return "llama3";
        return NULL;
    }
    const char *a = m->info.arch ? m->info.arch : "";
    if (!strcmp(a, "gemma") || !strcmp(a, "gemma2") || !strcmp(a, "gemma3")) return "gemma";
    return NULL;
}

/* The default system prompt of a ChatML template: a string literal
 * '<|im_start|>system\n' + TEXT + '<|im_end|>' (TEXT without quotes), with
 * the newline written literally or as \n. Returns a malloc'ed TEXT or NULL. */
static char *chatml_default_system(const char *t) {
    static const char tag[] = "<|im_start|>system";
    for (const char *p = t ? strstr(t, tag) : NULL; p; p = strstr(p + 1, tag)) {
        const char *q = p + sizeof tag - 1;
        if (*q == '\n') q++;
        else if (q[0] == '\\' && q[1] == 'n') q += 2;
        else continue;
        const char *e = strstr(q, "<|im_end|>");
        if (!e || e == q) continue;
        int quoted = 0;
        for (const char *r = q; r < e; r++)
            if (*r == '\'' || *r == '"' || (*r == '{' && r[1] == '{') || (*r == '{' && r[1] == '%')) quoted = 1;
        if (quoted) continue;
        sbuf b = {0};
        for (const char *r = q; r < e; r++) {
            if (*r == '\\' && r + 1 < e) {
                r++;
                char c = *r == 'n' ? '\n' : *r == 't' ? '\t' : *r;
                sb_put(&b, &c, 1);
            } else {
                sb_put(&b, r, 1);
            }
        }
        return b.oom ? (free(b.p), NULL) : b.p;
    }
    return NULL;
}

static char *piece(const dp_tokenizer *t, int id) {
    return id >= 0 && id < t->n ? dp_strndup(t->piece[id].ptr, t->piece[id].len) : NULL;
}

const char *dp_chat_template(const dp_model *m) { return m ? m->chat_template : NULL; }

char *dp_chat_apply(const dp_model *m, const char *name, const dp_chat_msg *msgs, int n, int add_generation_prompt) {
    return dp_chat_apply_vars(m, name, msgs, n, add_generation_prompt, NULL);
}

/* Jinja source rendered for model m: bos_token and eos_token from its
 * vocabulary (msgs taken). */
static char *render_for_model(const dp_model *m, const char *src, cJSON *msgs, const cJSON *tools, int gen,
                              const cJSON *vars) {
    const dp_tokenizer *t = m->tok;
    char *bos = piece(t, t->bos), *eos = piece(t, t->eos);
    char *r = render_jinja_conv(src, bos, eos, msgs, tools, gen, vars);
    free(bos);
    free(eos);
    return r;
}

char *dp_chat_apply_json(const dp_model *m, const char *name, const char *messages_json, const char *tools_json,
                         int add_generation_prompt, const char *vars_json) {
    const char *src = name ? name : m->chat_template;
    if (!src || is_builtin(src) || !is_jinja(src)) {
        dp_set_error(DP_ERR_ARG, "tools and tool calls need a Jinja chat template (the model's own or "
                                 "--chat-template FILE); %s", name ? "a built-in one has no tools" : "the model has none");
        return NULL;
    }
    cJSON *tools = tools_json ? cJSON_Parse(tools_json) : NULL;
    if (tools_json && !cJSON_IsArray(tools)) {
        cJSON_Delete(tools);
        dp_set_error(DP_ERR_ARG, "chat: the tools must be a JSON array");
        return NULL;
    }
    int bad;
    cJSON *vars = parse_vars(vars_json, &bad), *msgs = bad ? NULL : conversation(messages_json);
    char *r = msgs ? render_for_model(m, src, msgs, tools, add_generation_prompt, vars) : NULL;
    cJSON_Delete(vars);
    cJSON_Delete(tools);
    return r;
}

char *dp_chat_apply_vars(const dp_model *m, const char *name, const dp_chat_msg *msgs, int n, int add_generation_prompt,
                         const char *vars_json) {
    const dp_tokenizer *t = m->tok;
    int bad;
    cJSON *vars = parse_vars(vars_json, &bad);
    if (bad) return NULL;
    if ((!name && m->chat_template) || (name && !is_builtin(name) && is_jinja(name))) {
        char *r = check_msgs(msgs, n) ? NULL
                                      : render_for_model(m, name ? name : m->chat_template, msg_array(msgs, n), NULL,
                                                         add_generation_prompt, vars);
        cJSON_Delete(vars);
        return r;
    }
    /* the built-ins read one variable: Qwen3's enable_thinking (exactly false, as "is false" tests) */
    const int no_think = cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(vars, "enable_thinking"));
    cJSON_Delete(vars);
    if (!name) {
        name = dp_chat_template_detect(m);
        if (!name) {
            dp_set_error(DP_ERR_ARG, "the model has no chat template (tokenizer.chat_template) and its "
                         "architecture '%s' has no default; choose one with --chat-template gemma|chatml|llama3|FILE",
                         m->info.arch ? m->info.arch : "?");
            return NULL;
        }
    }
    tmpl_opts o = {NULL, NULL, 0, no_think};
    char *bos = piece(t, t->bos), *sys = NULL;
    o.bos = bos ? bos : !strcmp(name, "llama3") ? "<|begin_of_text|>" : "<bos>";
    if (!strcmp(name, "chatml")) {
        o.default_system = sys = chatml_default_system(m->chat_template);
        o.think = m->chat_template && strstr(m->chat_template, "reasoning_content") != NULL;
    }
    char *r = render(name, &o, msgs, n, add_generation_prompt);
    free(bos);
    free(sys);
    return r;
}
