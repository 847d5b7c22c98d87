/* The Responses API's response object and events (see responses_out.h),
 * written by hand as respond.c writes chat's. */
#include "responses_out.h"

#include <string.h>

enum { ITEM_NONE = 0, ITEM_REASONING = 1, ITEM_MESSAGE = 2, ITEM_CALL = 3 };

/* An item's id: its prefix, the hex of the response's id, its output index. */
static void item_id(sbuf *o, const char *prefix, const srv_req *r, int k) {
    const char *hex = strchr(r->id, '_');
    sb_printf(o, "\"%s_%s_%d\"", prefix, hex ? hex + 1 : r->id, k);
}

static const char *const item_prefix[] = {"", "rs", "msg", "fc"};

static void reasoning_item(sbuf *o, const srv_req *r, int k, const char *status, const char *text, size_t n) {
    sb_puts(o, "{\"type\":\"reasoning\",\"id\":");
    item_id(o, "rs", r, k);
    sb_puts(o, ",\"summary\":[],\"content\":[");
    if (text) {
        sb_puts(o, "{\"type\":\"reasoning_text\",\"text\":");
        sb_json_str(o, text, n);
        sb_puts(o, "}");
    }
    sb_printf(o, "],\"status\":\"%s\"}", status);
}

static void text_part(sbuf *o, const char *text, size_t n) {
    sb_puts(o, "{\"type\":\"output_text\",\"text\":");
    sb_json_str(o, text ? text : "", n);
    sb_puts(o, ",\"annotations\":[],\"logprobs\":[]}");
}

static void message_item(sbuf *o, const srv_req *r, int k, const char *status, const char *text, size_t n) {
    sb_puts(o, "{\"type\":\"message\",\"id\":");
    item_id(o, "msg", r, k);
    sb_printf(o, ",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[", status);
    if (text) text_part(o, text, n);
    sb_puts(o, "]}");
}

static void call_item(sbuf *o, const srv_req *r, int k, int call, const char *status, const char *name,
                      const char *args, size_t n) {
    sb_puts(o, "{\"type\":\"function_call\",\"id\":");
    item_id(o, "fc", r, k);
    sb_puts(o, ",\"call_id\":");
    resp_call_id(o, r, call);
    sb_puts(o, ",\"name\":");
    sb_json_str(o, name, strlen(name));
    sb_puts(o, ",\"arguments\":");
    sb_json_str(o, args ? args : "", n);
    sb_printf(o, ",\"status\":\"%s\"}", status);
}

static int incomplete(const srv_req *r) { return r->finish_reason && !strcmp(r->finish_reason, "length"); }

/* The response object, its output the items' text (NULL: none yet); with
 * usage once finished (done), and the error of a failed r. */
static void response_object(sbuf *o, const srv_req *r, const char *model_id, int done, const char *items, size_t n,
                            int reasoning_tokens) {
    const char *status = !done ? "in_progress" : r->err_status ? "failed" : incomplete(r) ? "incomplete" : "completed";
    sb_printf(o, "{\"id\":\"%s\",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\",\"error\":", r->id,
              (long long)r->created, status);
    if (done && r->err_status) {
        sb_puts(o, "{\"code\":\"server_error\",\"message\":");
        sb_json_str(o, r->err_msg, strlen(r->err_msg));
        sb_puts(o, "}");
    } else {
        sb_puts(o, "null");
    }
    sb_puts(o, done && incomplete(r) ? ",\"incomplete_details\":{\"reason\":\"max_output_tokens\"}"
                                     : ",\"incomplete_details\":null");
    sb_puts(o, ",\"model\":");
    sb_json_str(o, model_id, strlen(model_id));
    sb_puts(o, ",\"output\":[");
    if (items) sb_add(o, items, n);
    sb_puts(o, "],");
    if (r->p.echo) sb_printf(o, "%s,", r->p.echo);
    if (done && !r->err_status)
        sb_printf(o, "\"usage\":{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},"
                     "\"output_tokens\":%d,\"output_tokens_details\":{\"reasoning_tokens\":%d},\"total_tokens\":%d}}",
                  r->n_prompt, r->n_cached, r->n_gen, reasoning_tokens, r->n_prompt + r->n_gen);
    else
        sb_puts(o, "\"usage\":null}");
}

/* The tokens of reasoning text, as OpenAI counts reasoning_tokens apart
 * from output_tokens: the split's text tokenized again (a tokenizer may
 * merge differently than the model wrote, so it is a count of the text). */
static int count_tokens(const dp_model *m, const char *s, size_t n) {
    int32_t one;
    int k = n && m ? dp_tokenize(m, s, n, 0, 0, &one, 1) : 0;
    return k > 0 ? k : 0;
}

/* ----------------------------------------------------------- the whole */

/* Item k of n: a response cut by max_output_tokens has its last item cut. */
static const char *item_status(const srv_req *r, int k, int n) {
    return incomplete(r) && k == n - 1 ? "incomplete" : "completed";
}

void rsp_full(sbuf *o, const srv_req *r, const char *model_id, const req_output *all, const dp_model *m) {
    answer_split a;
    sbuf rs = {0}, cs = {0}, items = {0};
    answer_init(&a, r);
    answer_feed(&a, r, all->text.s ? all->text.s : "", all->text.n, 1, &rs, &cs);
    const int msg = cs.n || !a.cs.n_calls, n_items = !!rs.n + msg + a.cs.n_calls;
    int k = 0;
    if (rs.n) reasoning_item(&items, r, k, item_status(r, k, n_items), rs.s, rs.n), k++;
    if (msg) {
        if (k) sb_puts(&items, ",");
        message_item(&items, r, k, item_status(r, k, n_items), cs.s ? cs.s : "", cs.n), k++;
    }
    for (int i = 0; i < a.cs.n_calls; i++, k++) {
        if (k) sb_puts(&items, ",");
        const tool_call *c = &a.cs.calls[i];
        call_item(&items, r, k, i, item_status(r, k, n_items), c->name, c->arguments, strlen(c->arguments));
    }
    if (rs.oom || cs.oom || items.oom) o->oom = 1;
    response_object(o, r, model_id, 1, items.s, items.n, count_tokens(m, rs.s, rs.n));
    sb_puts(o, "\n");
    sb_free(&rs);
    sb_free(&cs);
    sb_free(&items);
    answer_free(&a);
}

/* -------------------------------------------------------------- events */

/* "event: type" and the start of its data, up to its first own member. */
static void ev(sbuf *o, rsp_stream *s, const char *type) {
    sb_printf(o, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", type, type, s->seq++);
}

/* ,"item_id":..,"output_index":k of the open item (and its content_index) */
static void ev_item(sbuf *o, const rsp_stream *s, const srv_req *r, int content) {
    sb_puts(o, ",\"item_id\":");
    item_id(o, item_prefix[s->open], r, s->n_items - 1);
    sb_printf(o, ",\"output_index\":%d", s->n_items - 1);
    if (content) sb_puts(o, ",\"content_index\":0");
}

/* The open item as a whole (text: NULL as it opens, else its text so far). */
static void open_item(sbuf *o, const rsp_stream *s, const srv_req *r, const char *status, const char *text) {
    const int k = s->n_items - 1;
    if (s->open == ITEM_REASONING) reasoning_item(o, r, k, status, text, s->text.n);
    else if (s->open == ITEM_MESSAGE) message_item(o, r, k, status, text, s->text.n);
    else call_item(o, r, k, s->call, status, s->name.s ? s->name.s : "", text, s->text.n);
}

static void item_done(sbuf *o, rsp_stream *s, const srv_req *r, const char *status, const dp_model *m) {
    const char *text = s->text.s ? s->text.s : "";
    if (s->open == ITEM_CALL) {
        ev(o, s, "response.function_call_arguments.done");
        ev_item(o, s, r, 0);
        sb_puts(o, ",\"name\":");
        sb_json_str(o, s->name.s ? s->name.s : "", s->name.n);
        sb_puts(o, ",\"arguments\":");
        sb_json_str(o, text, s->text.n);
        sb_puts(o, "}\n\n");
    } else {
        const int msg = s->open == ITEM_MESSAGE;
        ev(o, s, msg ? "response.output_text.done" : "response.reasoning_text.done");
        ev_item(o, s, r, 1);
        sb_puts(o, ",\"text\":");
        sb_json_str(o, text, s->text.n);
        sb_puts(o, msg ? ",\"logprobs\":[]}\n\n" : "}\n\n");
        ev(o, s, "response.content_part.done");
        ev_item(o, s, r, 1);
        sb_puts(o, ",\"part\":");
        if (msg) {
            text_part(o, text, s->text.n);
        } else {
            sb_puts(o, "{\"type\":\"reasoning_text\",\"text\":");
            sb_json_str(o, text, s->text.n);
            sb_puts(o, "}");
            s->reasoning_tokens += count_tokens(m, text, s->text.n);
        }
        sb_puts(o, "}\n\n");
    }
    ev(o, s, "response.output_item.done");
    sb_printf(o, ",\"output_index\":%d,\"item\":", s->n_items - 1);
    open_item(o, s, r, status, text);
    sb_puts(o, "}\n\n");
    if (s->items.n) sb_puts(&s->items, ",");
    open_item(&s->items, s, r, status, text);
    s->open = ITEM_NONE;
    sb_clear(&s->text);
    sb_clear(&s->name);
}

/* Opens an item of this kind (closing the one open), unless one is open;
 * a call item: of the answer's call `call`, named name. */
static void item_added(sbuf *o, rsp_stream *s, const srv_req *r, int kind, int call, const char *name,
                       const dp_model *m) {
    if (s->open == kind && kind != ITEM_CALL) return;
    if (s->open) item_done(o, s, r, "completed", m);
    if (kind == ITEM_CALL) {
        s->call = call;
        sb_puts(&s->name, name);
    }
    s->open = kind;
    s->n_items++;
    s->answered |= kind != ITEM_REASONING;
    ev(o, s, "response.output_item.added");
    sb_printf(o, ",\"output_index\":%d,\"item\":", s->n_items - 1);
    open_item(o, s, r, "in_progress", NULL);
    sb_puts(o, "}\n\n");
    if (kind == ITEM_CALL) return;
    ev(o, s, "response.content_part.added");
    ev_item(o, s, r, 1);
    if (kind == ITEM_MESSAGE) {
        sb_puts(o, ",\"part\":");
        text_part(o, "", 0);
        sb_puts(o, "}\n\n");
    } else {
        sb_puts(o, ",\"part\":{\"type\":\"reasoning_text\",\"text\":\"\"}}\n\n");
    }
}

static void delta(sbuf *o, rsp_stream *s, const srv_req *r, const char *text, size_t n) {
    static const char *const type[] = {"", "response.reasoning_text.delta", "response.output_text.delta",
                                       "response.function_call_arguments.delta"};
    ev(o, s, type[s->open]);
    ev_item(o, s, r, s->open != ITEM_CALL);
    sb_puts(o, ",\"delta\":");
    sb_json_str(o, text, n);
    sb_puts(o, s->open == ITEM_MESSAGE ? ",\"logprobs\":[]}\n\n" : "}\n\n");
    sb_add(&s->text, text, n);
}

/* The events of what the splits decided: reasoning, content, then calls. */
static void split_events(sbuf *o, rsp_stream *s, const srv_req *r, sbuf *rs, sbuf *cs, const dp_model *m) {
    if (rs->oom || cs->oom || s->a.cs.oom) o->oom = 1;
    if (rs->n) {
        item_added(o, s, r, ITEM_REASONING, 0, NULL, m);
        delta(o, s, r, rs->s, rs->n);
    }
    if (cs->n) {
        item_added(o, s, r, ITEM_MESSAGE, 0, NULL, m);
        delta(o, s, r, cs->s, cs->n);
    }
    call_delta d;
    while (calls_next(&s->a.cs, &d)) {
        if (d.name) item_added(o, s, r, ITEM_CALL, d.index, d.name, m);
        if (d.n && s->open == ITEM_CALL) delta(o, s, r, d.args, d.n);
    }
    sb_clear(rs);
    sb_clear(cs);
}

void rsp_stream_init(rsp_stream *s, const srv_req *r) {
    memset(s, 0, sizeof *s);
    answer_init(&s->a, r);
}

void rsp_stream_free(rsp_stream *s) {
    answer_free(&s->a);
    sb_free(&s->text);
    sb_free(&s->name);
    sb_free(&s->items);
}

void rsp_stream_start(sbuf *o, rsp_stream *s, const srv_req *r, const char *model_id) {
    static const char *const type[] = {"response.created", "response.in_progress"};
    for (int i = 0; i < 2; i++) {
        ev(o, s, type[i]);
        sb_puts(o, ",\"response\":");
        response_object(o, r, model_id, 0, NULL, 0, 0);
        sb_puts(o, "}\n\n");
    }
}

void rsp_stream_pieces(sbuf *o, rsp_stream *s, const srv_req *r, const req_output *out, const dp_model *m) {
    sbuf rs = {0}, cs = {0};
    size_t at = 0;
    for (int i = 0; i < out->n_pieces; i++) {
        answer_feed(&s->a, r, out->text.s ? out->text.s + at : "", (size_t)out->pieces[i].len, 0, &rs, &cs);
        split_events(o, s, r, &rs, &cs, m);
        at += (size_t)out->pieces[i].len;
    }
    sb_free(&rs);
    sb_free(&cs);
}

void rsp_stream_end(sbuf *o, rsp_stream *s, const srv_req *r, const char *model_id, const dp_model *m) {
    if (r->err_status) {
        ev(o, s, "response.failed");
        sb_puts(o, ",\"response\":");
        response_object(o, r, model_id, 1, s->items.s, s->items.n, 0);
        sb_puts(o, "}\n\n");
        return;
    }
    sbuf rs = {0}, cs = {0};
    answer_feed(&s->a, r, "", 0, 1, &rs, &cs);
    split_events(o, s, r, &rs, &cs, m);
    sb_free(&rs);
    sb_free(&cs);
    if (!s->answered) item_added(o, s, r, ITEM_MESSAGE, 0, NULL, m); /* an answer of no text is an empty message */
    item_done(o, s, r, incomplete(r) ? "incomplete" : "completed", m);
    if (s->items.oom) o->oom = 1;
    ev(o, s, incomplete(r) ? "response.incomplete" : "response.completed");
    sb_puts(o, ",\"response\":");
    response_object(o, r, model_id, 1, s->items.s, s->items.n, s->reasoning_tokens);
    sb_puts(o, "}\n\n");
}
