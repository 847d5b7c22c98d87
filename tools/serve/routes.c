/* The endpoints. A completion request is parsed, turned into prompt tokens
 * (chat: through the model's chat template), checked against the context,
 * given its own sampler (with n choices: n scheduler requests sharing the
 * prompt, a sampler each; with several prompts, such a group per prompt)
 * and queued; its connection thread then streams the output as the
 * scheduler releases it, or waits for the whole answer. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "embed.h"
#include "respond.h"
#include "responses.h"
#include "responses_out.h"
#include "serve.h"
#include "tokens.h"

#define DEFAULT_COMPLETION_TOKENS 16 /* /v1/completions without max_tokens, as OpenAI */
#define WAIT_MS 1000
#define MAX_CALLS 16 /* tool_choice "required" with parallel_tool_calls: calls in one answer at most */

static void page(http_req *c, void *user) {
    (void)user;
    http_reply(c, 200, "text/html; charset=utf-8", serve_page_html, serve_page_len);
}

static void health(http_req *c, void *user) {
    (void)user;
    static const char ok[] = "{\"status\":\"ok\"}\n";
    http_reply(c, 200, "application/json", ok, sizeof ok - 1);
}

static void models(http_req *c, void *user) {
    server *S = user;
    sbuf b = {0};
    sb_puts(&b, "{\"object\":\"list\",\"data\":[{\"id\":");
    sb_json_str(&b, S->model_id, strlen(S->model_id));
    sb_printf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"doppler\",\"meta\":{\"arch\":",
              (long long)S->started);
    sb_json_str(&b, S->info->arch, strlen(S->info->arch));
    /* thinking_switch: the chat template reads enable_thinking, so the page offers the switch */
    sb_printf(&b, ",\"n_vocab\":%d,\"n_params\":%llu,\"n_ctx\":%d,\"n_ctx_train\":%d,\"parallel\":%d,"
                 "\"thinking_switch\":%s}}]}\n",
              S->info->n_vocab, (unsigned long long)S->info->n_params, S->n_ctx, S->info->n_ctx_train, S->parallel,
              S->thinking_switch ? "true" : "false");
    if (b.oom) http_reply_error(c, 500, NULL, "out of memory");
    else http_reply(c, 200, "application/json", b.s, b.n);
    sb_free(&b);
}

static void metrics_page(http_req *c, void *user) {
    server *S = user;
    int waiting, running;
    sched_counts(S->q, &waiting, &running);
    sbuf b = {0};
    metrics_render(S->met, &b, waiting, running, S->parallel);
    if (b.oom) http_reply_error(c, 500, NULL, "out of memory");
    else http_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.s ? b.s : "", b.n);
    sb_free(&b);
}

/* ------------------------------------------------------------- prompts */

/* A chat field as r's endpoint names it (a /v1/responses request's). */
static const char *param(const srv_req *r, const char *chat_name) {
    return r->p.responses ? resp_param(chat_name) : chat_name;
}

static int tokenize(http_req *c, const server *S, const char *text, int add_bos, srv_req *r) {
    size_t len = strlen(text);
    int cap = (int)(len < (1u << 26) ? len : (1u << 26)) + 16;
    for (;;) {
        free(r->prompt);
        if (!(r->prompt = malloc(sizeof(int32_t) * (size_t)cap))) {
            http_reply_error(c, 500, NULL, "out of memory for the prompt's tokens");
            return -1;
        }
        int n = dp_tokenize(S->m, text, len, add_bos, 1, r->prompt, cap);
        if (n < 0) {
            http_reply_error(c, 400, "prompt", "cannot tokenize the prompt: %s", dp_last_error());
            return -1;
        }
        if (n <= cap) {
            r->n_prompt = n;
            return 0;
        }
        cap = n;
    }
}

/* The template variables of a request: --chat-template-kwargs with the
 * request's chat_template_kwargs over it, member by member (llama-server's
 * rule). 0 with *text a malloc'ed JSON object or NULL (none); -1 when out
 * of memory. */
static int template_vars(const server *S, const srv_req *r, char **text) {
    const char *base = S->template_kwargs, *over = r->p.template_kwargs;
    *text = NULL;
    if (!base || !over) {
        const char *one = over ? over : base;
        return one && !(*text = strdup(one)) ? -1 : 0;
    }
    cJSON *b = cJSON_Parse(base), *o = cJSON_Parse(over);
    int ok = b && o;
    for (cJSON *it = o ? o->child : NULL; it && ok; it = it->next) {
        cJSON *copy = cJSON_Duplicate(it, 1);
        cJSON_DeleteItemFromObjectCaseSensitive(b, it->string);
        ok = copy && cJSON_AddItemToObject(b, it->string, copy);
        if (!ok) cJSON_Delete(copy);
    }
    char *out = ok ? cJSON_PrintUnformatted(b) : NULL;
    if (out) *text = strdup(out);
    cJSON_free(out);
    cJSON_Delete(b);
    cJSON_Delete(o);
    return *text ? 0 : -1;
}

static int chat_prompt(http_req *c, const server *S, srv_req *r) {
    if (!S->tmpl && !dp_chat_template(S->m) && !dp_chat_template_detect(S->m)) {
        http_reply_error(c, 400, param(r, "messages"),
                         "this model has no chat template (tokenizer.chat_template) and its architecture '%s' has "
                         "no default one: use /v1/completions with a prompt", S->info->arch);
        return -1;
    }
    dp_chat_msg *msgs = malloc(sizeof *msgs * (size_t)r->p.n_msgs);
    if (!msgs) {
        http_reply_error(c, 500, NULL, "out of memory");
        return -1;
    }
    for (int i = 0; i < r->p.n_msgs; i++) msgs[i] = (dp_chat_msg){r->p.msgs[i].role, r->p.msgs[i].content};
    char *vars;
    if (template_vars(S, r, &vars)) {
        free(msgs);
        http_reply_error(c, 500, NULL, "out of memory");
        return -1;
    }
    /* tools, or a conversation with tool calls: OpenAI's message form through the Jinja template; the
     * answer's calls are read in the format the template teaches, so it must teach one doppler reads */
    if (r->p.tools_json && !S->tools_format) {
        free(msgs);
        free(vars);
        http_reply_error(c, 400, "tools", "tool calling needs a chat template that teaches a tool-call format doppler "
                                          "reads: <tool_call> (Qwen2.5, Qwen3, Hermes) or Llama 3.1's JSON; this "
                                          "model's has neither");
        return -1;
    }
    /* OpenAI's form where the template is Jinja, or where only it can carry the request (a built-in one then
     * fails with the reason); a built-in template takes a reasoning_content-only conversation without it */
    const int as_json = r->p.messages_json && (S->tmpl_jinja || r->p.tools_json || r->p.tool_msgs);
    char *text = as_json ? dp_chat_apply_json(S->m, S->tmpl, r->p.messages_json, r->p.tools_json, 1, vars)
                         : dp_chat_apply_vars(S->m, S->tmpl, msgs, r->p.n_msgs, 1, vars);
    free(msgs);
    free(vars);
    if (!text) {
        http_reply_error(c, 400, param(r, "messages"), "the chat template failed: %s", dp_last_error());
        return -1;
    }
    r->tools = r->p.tools_json ? S->tools_format : TOOLS_NONE;
    const int split = r->p.reasoning_format >= 0 ? r->p.reasoning_format : S->reasoning_format;
    r->cons_think = think_constraint_mode(text, S->template_thinks);
    r->think = !split ? THINK_NONE : r->cons_think == DP_THINK_INSIDE ? THINK_INSIDE : THINK_SPLIT;
    int rc = tokenize(c, S, text, 0, r); /* the template writes BOS and the turn markers itself */
    free(text);
    return rc;
}

/* The tokens of the request's prompt k (chat: the conversation) into r. */
static int prompt_tokens(http_req *c, const server *S, srv_req *r, int k) {
    if (r->p.kind == REQ_CHAT) return chat_prompt(c, S, r);
    const char *text = req_prompt_text(&r->p, k);
    if (text) return tokenize(c, S, text, 1, r);
    int n;
    const int32_t *ids = req_prompt_ids(&r->p, k, &n);
    const int several = r->p.n_prompts > 1;
    for (int i = 0; i < n; i++)
        if (ids[i] >= S->info->n_vocab) {
            if (several)
                http_reply_error(c, 400, "prompt", "prompt[%d][%d] = %d is not a token id (the vocabulary has %d)", k,
                                 i, ids[i], S->info->n_vocab);
            else
                http_reply_error(c, 400, "prompt", "prompt[%d] = %d is not a token id (the vocabulary has %d)", i,
                                 ids[i], S->info->n_vocab);
            return -1;
        }
    r->n_prompt = n;
    if (!several) { /* taken over */
        r->prompt = r->p.prompt_tokens;
        r->p.prompt_tokens = NULL;
        return 0;
    }
    if (!(r->prompt = malloc(sizeof *r->prompt * (size_t)n))) {
        http_reply_error(c, 500, NULL, "out of memory for the prompt's tokens");
        return -1;
    }
    memcpy(r->prompt, ids, sizeof *r->prompt * (size_t)n);
    return 0;
}

static uint64_t random_u64(void) {
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t z = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                 (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* A choice's own sampler, constraint and detokenizer: 0, or -1 after
 * answering with the error. With a seed, choice i (of every prompt) draws
 * with seed + i, so that each choice is reproducible, the first is the
 * answer of n = 1, and each prompt's choices are the answer of a request
 * of that prompt alone. */
static int prepare_choice(http_req *c, const server *S, srv_req *r) {
    dp_sampler_params sp = S->smp;
    if (!isnan(r->p.temperature)) sp.temp = (float)r->p.temperature;
    if (!isnan(r->p.top_p)) sp.top_p = (float)r->p.top_p;
    if (!isnan(r->p.min_p)) sp.min_p = (float)r->p.min_p;
    if (!isnan(r->p.repeat_penalty)) sp.repeat_penalty = (float)r->p.repeat_penalty;
    if (r->p.top_k >= 0) sp.top_k = r->p.top_k;
    if (r->p.repeat_last_n >= 0) sp.repeat_last_n = r->p.repeat_last_n;
    sp.seed = r->p.has_seed ? r->p.seed + (uint64_t)r->choice : random_u64();
    if (!(r->smp = dp_sampler_new(&sp, S->info->n_vocab))) {
        http_reply_error(c, 400, NULL, "sampling parameters: %s", dp_last_error());
        return -1;
    }
    for (int i = 0; i < r->n_prompt; i++) dp_sampler_accept(r->smp, r->prompt[i]);
    if (r->p.json) {
        const char *sch = r->p.json_schema;
        if (!(r->cons = dp_constraint_json(S->m, sch, sch ? strlen(sch) : 0, r->cons_think))) {
            http_reply_error(c, 400, param(r, "response_format"), "%s", dp_last_error());
            return -1;
        }
    } else if (r->p.grammar) {
        if (!(r->cons = dp_constraint_gbnf(S->m, r->p.grammar, strlen(r->p.grammar)))) {
            http_reply_error(c, 400, param(r, "grammar"), "%s", dp_last_error());
            return -1;
        }
    } else if (r->tools != TOOLS_NONE) {
        /* the tools' calls in the template's format: the whole answer ("required", a named function), or, in
         * "auto", the blocks a talking answer opens, or (Llama's format) the answer that opens with '{' */
        const char *before, *after;
        char *sch = calls_schema(r->p.tools_json, r->p.tool_name, r->tools, &before, &after);
        if (!sch) {
            http_reply_error(c, 500, NULL, "out of memory");
            return -1;
        }
        /* "required" with parallel calls: one to MAX_CALLS blocks (a format of tagged blocks); else one */
        const int several = r->p.tool_choice == TOOL_CHOICE_REQUIRED && r->p.parallel_calls && before && after;
        if (r->p.tool_choice) {
            r->cons = dp_constraint_json_repeat(S->m, sch, strlen(sch), r->cons_think, before, after,
                                                several ? MAX_CALLS : 1);
        } else if (r->tools == TOOLS_JSON) {
            /* the reasoning split takes an opening <think> block out even where the template writes none, and
             * the call split reads what follows it: the constraint reads the answer so too */
            const int think = r->think && r->cons_think == DP_THINK_NONE ? DP_THINK_MAY_OPEN : r->cons_think;
            r->cons = dp_constraint_json_lazy(S->m, sch, strlen(sch), think);
        } else {
            r->cons = dp_constraint_json_tagged(S->m, sch, strlen(sch), before, after, r->p.parallel_calls ? 0 : 1);
        }
        cJSON_free(sch);
        /* "auto" with parameters the constraint cannot honour: its calls go unconstrained (docs/serve.md) */
        if (!r->cons && r->p.tool_choice) {
            http_reply_error(c, 400, "tools", "tool_choice: the function's parameters: %s", dp_last_error());
            return -1;
        }
        /* every block the call split sees is then a call the constraint draws (the tagged and the lazy one
         * watch the whole text, the lazy one past an opening <think> block as the reasoning split reads it;
         * the others leave that block free, which the reasoning split takes out unless it is off), so a stream
         * may send each call as it is written */
        r->p.tools_constrained = r->cons && (!r->p.tool_choice || r->think || r->cons_think == DP_THINK_NONE);
    }
    r->host_sample = (!isnan(r->p.presence_penalty) && r->p.presence_penalty != 0) ||
                     (!isnan(r->p.frequency_penalty) && r->p.frequency_penalty != 0) || r->p.n_logit_bias > 0;
    if (r->host_sample && !(r->work = malloc(sizeof(float) * (size_t)S->info->n_vocab))) {
        http_reply_error(c, 500, NULL, "out of memory");
        return -1;
    }
    if (!(r->dt = dp_detok_new(S->m, 0))) {
        http_reply_error(c, 500, NULL, "cannot make a detokenizer: %s", dp_last_error());
        return -1;
    }
    return 0;
}

/* The tokens of the request's prompt k into its lead r, checked against
 * the context, and r's limit of tokens: 0, or -1 after answering with the
 * error. */
static int prompt_fits(http_req *c, const server *S, srv_req *r, int k) {
    if (prompt_tokens(c, S, r, k)) return -1;
    char what[32]; /* the prompt, as the messages name it */
    if (r->p.n_prompts > 1) snprintf(what, sizeof what, "prompt[%d]", k);
    else snprintf(what, sizeof what, "the prompt");
    if (r->n_prompt == 0) {
        http_reply_error(c, 400, "prompt", "%s is empty (no tokens)", what);
        return -1;
    }
    if (r->n_prompt >= S->n_ctx) {
        http_reply_error(c, 400, param(r, r->p.kind == REQ_CHAT ? "messages" : "prompt"),
                         "%s has %d tokens but the context holds %d (one more is needed to generate)", what,
                         r->n_prompt, S->n_ctx);
        return -1;
    }
    int room = S->n_ctx - r->n_prompt;
    if (r->p.max_tokens > room) {
        const char *mt = param(r, "max_tokens");
        http_reply_error(c, 400, mt, "%s (%d tokens) plus %s (%d) is %d tokens, beyond the context of %d", what,
                         r->n_prompt, mt, r->p.max_tokens, r->n_prompt + r->p.max_tokens, S->n_ctx);
        return -1;
    }
    r->max_tokens = r->p.max_tokens > 0 ? r->p.max_tokens
                    : r->p.kind == REQ_COMPLETION && room > DEFAULT_COMPLETION_TOKENS ? DEFAULT_COMPLETION_TOKENS
                                                                                       : room;
    return 0;
}

/* The request's first prompt and limits into its first choice r, then r's
 * own parts: 0, or -1 after answering with the error. */
static int prepare(http_req *c, const server *S, srv_req *r) {
    if (prompt_fits(c, S, r, 0)) return -1;
    for (int i = 0; i < r->p.n_logit_bias; i++)
        if (r->p.bias_tok[i] >= S->info->n_vocab) {
            http_reply_error(c, 400, "logit_bias", "logit_bias token %d is not a token id (the vocabulary has %d)",
                             r->p.bias_tok[i], S->info->n_vocab);
            return -1;
        }
    uint64_t a = random_u64(), b = random_u64();
    snprintf(r->id, sizeof r->id, "%s%016llx%08llx",
             r->p.responses ? "resp_" : r->p.kind == REQ_CHAT ? "chatcmpl-" : "cmpl-", (unsigned long long)a,
             (unsigned long long)(b >> 32));
    r->created = (int64_t)time(NULL);
    r->client_fd = http_client_fd(c);
    return prepare_choice(c, S, r);
}

/* ----------------------------------------------------------- answering */

/* A request's choices r[0..n) (r[0] its first): 1 when all have finished,
 * -1 when one failed (*bad: which), else 0. */
static int choices_done(sched *q, srv_req *const *r, int n, int *bad) {
    int all = 1;
    for (int i = 0; i < n; i++) {
        if (!sched_done(q, r[i])) all = 0;
        else if (r[i]->err_status) {
            *bad = i;
            return -1;
        }
    }
    return all;
}

static void release_all(sched *q, srv_req *const *r, int n) {
    for (int i = n - 1; i >= 0; i--) srv_req_release(q, r[i]);
}

typedef struct {
    const server *S;
    srv_req **r;             /* the choices (the array is the stream's); r[0] the first, whose wait watches all */
    int n;
    sbuf head, pend;
    size_t sent;
    req_output part;
    answer_split *as;        /* per choice: r[i]->think, r[i]->tools */
    rsp_stream *rs;          /* a /v1/responses request's events (of its one choice), else NULL */
    unsigned char *fin;      /* per choice: it has sent its finish */
    int started, ended;
} stream_state;

/* The chunks of what the choices released since the last call, each
 * choice's finish when it finished, and the end when all have (or the
 * error of one that failed: the others are cancelled). */
static void stream_step(stream_state *st) {
    sched *q = st->S->q;
    if (st->rs) {
        srv_req *r = st->r[0];
        const int fin = sched_take(q, r, &st->part);
        rsp_stream_pieces(&st->pend, st->rs, r, &st->part, st->S->m);
        if (fin) rsp_stream_end(&st->pend, st->rs, r, st->S->model_id, st->S->m);
        st->ended = fin;
        return;
    }
    int open = 0, bad = -1;
    for (int i = 0; i < st->n && bad < 0; i++) {
        if (st->fin[i]) continue;
        srv_req *r = st->r[i];
        int fin = sched_take(q, r, &st->part);
        answer_split *as = r->think || r->tools ? &st->as[i] : NULL;
        resp_stream_pieces(&st->pend, &st->head, r, &st->part, st->S->m, as);
        if (!fin) {
            open++;
        } else if (r->err_status) {
            bad = i;
        } else {
            resp_stream_finish(&st->pend, &st->head, r, as, st->S->m);
            st->fin[i] = 1;
        }
    }
    if (bad >= 0) {
        resp_stream_error(&st->pend, st->r[bad]);
        sched_cancel(q, st->r[0]);
        st->ended = 1;
    } else if (!open) {
        resp_stream_close(&st->pend, &st->head, st->r, st->n);
        st->ended = 1;
    }
}

static ssize_t stream_read(void *arg, char *buf, size_t max) {
    stream_state *st = arg;
    for (;;) {
        if (st->sent < st->pend.n) {
            size_t k = st->pend.n - st->sent < max ? st->pend.n - st->sent : max;
            memcpy(buf, st->pend.s + st->sent, k);
            st->sent += k;
            return (ssize_t)k;
        }
        sb_clear(&st->pend);
        st->sent = 0;
        if (st->ended) return -1;
        if (!st->started) {
            st->started = 1;
            if (st->rs) rsp_stream_start(&st->pend, st->rs, st->r[0], st->S->model_id);
            else
                for (int i = 0; i < st->n; i++) resp_stream_start(&st->pend, &st->head, st->r[i]);
            if (st->pend.n) continue;
        }
        stream_step(st);
        if (st->pend.oom) return -2;
        if (st->pend.n) continue;
        if (sched_wait(st->S->q, st->r[0], WAIT_MS) < 0) return -2; /* the client went away: its sequences are freed */
    }
}

static void stream_done(void *arg) {
    stream_state *st = arg;
    if (!st->ended) sched_cancel(st->S->q, st->r[0]);
    release_all(st->S->q, st->r, st->n);
    sb_free(&st->head);
    sb_free(&st->pend);
    req_output_free(&st->part);
    for (int i = 0; i < st->n; i++) answer_free(&st->as[i]);
    free(st->as);
    if (st->rs) rsp_stream_free(st->rs);
    free(st->rs);
    free(st->fin);
    free(st->r);
    free(st);
}

/* Streams the answer of the submitted choices r[0..n); the array is the
 * stream's. */
static void answer_stream(http_req *c, const server *S, srv_req **r, int n) {
    stream_state *st = calloc(1, sizeof *st);
    answer_split *as = calloc((size_t)n, sizeof *as);
    unsigned char *fin = calloc((size_t)n, 1);
    rsp_stream *rs = r[0]->p.responses ? malloc(sizeof *rs) : NULL;
    if (!st || !as || !fin || (r[0]->p.responses && !rs)) {
        sched_cancel(S->q, r[0]);
        release_all(S->q, r, n);
        free(r), free(st), free(as), free(fin), free(rs);
        http_reply_error(c, 500, NULL, "out of memory");
        return;
    }
    st->S = S;
    st->r = r;
    st->n = n;
    st->as = as;
    st->fin = fin;
    for (int i = 0; i < n; i++) answer_init(&st->as[i], r[i]);
    if ((st->rs = rs)) rsp_stream_init(rs, r[0]);
    resp_chunk_head(&st->head, r[0], S->model_id);
    http_reply_stream(c, "text/event-stream", stream_read, st, stream_done);
}

/* Answers with the whole output of the submitted choices r[0..n), and
 * frees the array. */
static void answer_whole(http_req *c, const server *S, srv_req **r, int n) {
    http_long_wait(c, 1);
    int gone = 0, bad = -1;
    while (!choices_done(S->q, r, n, &bad))
        if (sched_wait(S->q, r[0], WAIT_MS) < 0) {
            gone = 1;
            break;
        }
    http_long_wait(c, 0);
    if (gone) {
        http_reply_error(c, 499, NULL, "the client closed the connection"); /* nginx's code; nobody reads it */
    } else if (bad >= 0) {
        sched_cancel(S->q, r[0]); /* the other choices are of no use now */
        if (r[bad]->err_status == 503) http_add_header(c, "Retry-After", "1");
        http_reply_error(c, r[bad]->err_status, NULL, "%s", r[bad]->err_msg);
    } else {
        req_output *all = calloc((size_t)n, sizeof *all);
        int oom = !all;
        for (int i = 0; i < n && all; i++) {
            sched_take(S->q, r[i], &all[i]);
            oom |= all[i].text.oom;
        }
        sbuf b = {0};
        if (!oom && r[0]->p.responses) rsp_full(&b, r[0], S->model_id, &all[0], S->m);
        else if (!oom) resp_full_n(&b, r, n, S->model_id, all, S->m);
        if (b.oom || oom) http_reply_error(c, 500, NULL, "out of memory for the answer");
        else http_reply(c, 200, "application/json", b.s, b.n);
        sb_free(&b);
        for (int i = 0; i < n && all; i++) req_output_free(&all[i]);
        free(all);
    }
    release_all(S->q, r, n);
    free(r);
}

/* A request never submitted (r[0..n), NULLs where none was made): its
 * later choices and prompts go before the leads they hold; frees r. */
static void destroy_all(srv_req **r, int n) {
    for (int i = n - 1; i >= 0; i--) srv_req_destroy(r[i]);
    free(r);
}

/* The choices r[1..total) after the prepared first r[0], in the response's
 * order: prompt k's lead at k * n, its later choices after it. 0, or -1
 * after answering with the error. */
static int make_choices(http_req *c, const server *S, srv_req **r, int total) {
    const int n = r[0]->p.n;
    for (int k = 1; k < total; k++) {
        const int i = k % n;
        if (!(r[k] = i ? srv_req_choice(r[k - i]) : srv_req_prompt(r[0]))) {
            http_reply_error(c, 500, NULL, "out of memory");
            return -1;
        }
        if ((!i && prompt_fits(c, S, r[k], k / n)) || prepare_choice(c, S, r[k])) return -1;
    }
    return 0;
}

/* kind: the body's; responses: a /v1/responses body (a chat request). */
static void completion(http_req *c, server *S, req_kind kind, int responses) {
    double t0 = dp_time_s();
    size_t len;
    const char *body = http_body(c, &len);
    srv_req *first = srv_req_new();
    if (!first) {
        http_reply_error(c, 500, NULL, "out of memory");
        return;
    }
    req_error e;
    if (responses ? resp_parse(body, len, &first->p, &e) : req_parse(kind, body, len, &first->p, &e)) {
        http_reply_error(c, e.status, e.param, "%s", e.message);
        srv_req_destroy(first);
        return;
    }
    const int n = first->p.n, total = first->p.n_prompts * n;
    if (n > S->parallel) { /* a prompt's choices run at once, a sequence each */
        http_reply_error(c, 400, "n", "'n' is %d, above this server's limit of %d choices (--parallel)", n,
                         S->parallel);
        srv_req_destroy(first);
        return;
    }
    srv_req **r = calloc((size_t)total, sizeof *r);
    if (!r) {
        http_reply_error(c, 500, NULL, "out of memory");
        srv_req_destroy(first);
        return;
    }
    r[0] = first;
    first->t_submit = t0;
    if (prepare(c, S, first) || make_choices(c, S, r, total)) {
        destroy_all(r, total);
        return;
    }
    char msg[200];
    int status = sched_submit(S->q, first, msg, sizeof msg);
    if (status) {
        http_add_header(c, "Retry-After", "1");
        http_reply_error(c, status, NULL, "%s", msg);
        destroy_all(r, total);
        return;
    }
    if (first->p.stream) answer_stream(c, S, r, total);
    else answer_whole(c, S, r, total);
}

static void chat(http_req *c, void *user) { completion(c, user, REQ_CHAT, 0); }
static void text(http_req *c, void *user) { completion(c, user, REQ_COMPLETION, 0); }
static void responses(http_req *c, void *user) { completion(c, user, REQ_CHAT, 1); }

const http_route serve_routes[] = {
    {"GET", "/", page, 1},
    {"GET", "/health", health, 1},
    {"GET", "/v1/models", models, 0},
    {"GET", "/metrics", metrics_page, 0},
    {"POST", "/v1/chat/completions", chat, 0},
    {"POST", "/v1/completions", text, 0},
    {"POST", "/v1/responses", responses, 0},
    {"POST", "/v1/embeddings", serve_embeddings, 0}, /* embed.c */
    {"POST", "/tokenize", serve_tokenize, 0},     /* llama-server's (tokens.c) */
    {"POST", "/detokenize", serve_detokenize, 0},
};
const int serve_n_routes = (int)(sizeof serve_routes / sizeof serve_routes[0]);
