/* OpenAI response bodies (see respond.h), written by hand: a stream
 * formats a chunk per token, so no cJSON trees on that path. */
#include "respond.h"

#include <stdlib.h>
#include <string.h>

void req_output_free(req_output *o) {
    sb_free(&o->text);
    free(o->pieces);
    free(o->lp);
    memset(o, 0, sizeof *o);
}

static int is_chat(const srv_req *r) { return r->p.kind == REQ_CHAT; }

static void token_text(sbuf *o, const dp_model *m, int32_t id, int bytes) {
    char buf[128];
    int k = dp_token_to_bytes(m, id, 1, buf, sizeof buf);
    if (k < 0) k = 0;
    if (k > (int)sizeof buf) k = (int)sizeof buf;
    sb_json_str(o, buf, (size_t)k); /* a token's bytes may be part of a character: U+FFFD then */
    if (!bytes) return;
    sb_puts(o, ",\"bytes\":[");
    for (int i = 0; i < k; i++) sb_printf(o, "%s%u", i ? "," : "", (unsigned char)buf[i]);
    sb_puts(o, "]");
}

/* "logprobs": ... for entries lp[0..n) (chat: content list; completions:
 * the four parallel lists). */
static void logprobs(sbuf *o, const srv_req *r, const tok_lp *lp, int n, const dp_model *m) {
    if (!r->p.logprobs) {
        sb_puts(o, "\"logprobs\":null");
        return;
    }
    if (is_chat(r)) {
        sb_puts(o, "\"logprobs\":{\"content\":[");
        for (int i = 0; i < n; i++) {
            sb_puts(o, i ? ",{\"token\":" : "{\"token\":");
            token_text(o, m, lp[i].id, 1);
            sb_puts(o, ",\"logprob\":");
            sb_json_logprob(o, lp[i].logprob);
            sb_puts(o, ",\"top_logprobs\":[");
            for (int j = 0; j < lp[i].n_top; j++) {
                sb_puts(o, j ? ",{\"token\":" : "{\"token\":");
                token_text(o, m, lp[i].top_id[j], 1);
                sb_puts(o, ",\"logprob\":");
                sb_json_logprob(o, lp[i].top_lp[j]);
                sb_puts(o, "}");
            }
            sb_puts(o, "]}");
        }
        sb_puts(o, "]}");
        return;
    }
    sb_puts(o, "\"logprobs\":{\"tokens\":[");
    for (int i = 0; i < n; i++) {
        if (i) sb_puts(o, ",");
        token_text(o, m, lp[i].id, 0);
    }
    sb_puts(o, "],\"token_logprobs\":[");
    for (int i = 0; i < n; i++) {
        if (i) sb_puts(o, ",");
        sb_json_logprob(o, lp[i].logprob);
    }
    sb_puts(o, "],\"top_logprobs\":[");
    for (int i = 0; i < n; i++) {
        sb_puts(o, i ? ",{" : "{");
        for (int j = 0; j < lp[i].n_top; j++) {
            if (j) sb_puts(o, ",");
            token_text(o, m, lp[i].top_id[j], 0);
            sb_puts(o, ":");
            sb_json_logprob(o, lp[i].top_lp[j]);
        }
        sb_puts(o, "}");
    }
    sb_puts(o, "],\"text_offset\":[");
    for (int i = 0; i < n; i++) sb_printf(o, "%s%d", i ? "," : "", lp[i].text_offset);
    sb_puts(o, "]}");
}

/* The usage of a request's choices r[0..n): each prompt once (its lead's,
 * with what that one took from the prefix cache: the later choices take
 * the rest of it from there), the tokens of all. */
static void usage(sbuf *o, srv_req *const *r, int n) {
    int gen = 0, prompt = 0, cached = 0;
    for (int i = 0; i < n; i++) {
        gen += r[i]->n_gen;
        if (!r[i]->lead) prompt += r[i]->n_prompt, cached += r[i]->n_cached;
    }
    sb_printf(o, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
                 "\"prompt_tokens_details\":{\"cached_tokens\":%d}}",
              prompt, gen, prompt + gen, cached);
}

void resp_chunk_head(sbuf *head, const srv_req *r, const char *model_id) {
    sb_printf(head, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", r->id,
              is_chat(r) ? "chat.completion.chunk" : "text_completion", (long long)r->created);
    sb_json_str(head, model_id, strlen(model_id));
    sb_puts(head, ",");
}

static void chunk_tail(sbuf *o, const srv_req *r) {
    sb_puts(o, r->p.include_usage ? "}],\"usage\":null}\n\n" : "}]}\n\n");
}

void resp_stream_start(sbuf *o, const sbuf *head, const srv_req *r) {
    if (!is_chat(r)) return;
    sb_add(o, head->s, head->n);
    sb_printf(o, "\"choices\":[{\"index\":%d,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,"
                 "\"finish_reason\":null", r->index);
    chunk_tail(o, r);
}

/* One chunk of a chat stream, delta.field = s[0..n), with the log
 * probabilities lp[0..n_lp). */
static void chat_delta(sbuf *o, const sbuf *head, const srv_req *r, const char *field, const char *s, size_t n,
                       const tok_lp *lp, int n_lp, const dp_model *m) {
    sb_add(o, head->s, head->n);
    sb_printf(o, "\"choices\":[{\"index\":%d,\"delta\":{\"%s\":", r->index, field);
    sb_json_str(o, s ? s : "", n);
    sb_puts(o, "},");
    logprobs(o, r, lp, n_lp, m);
    sb_puts(o, ",\"finish_reason\":null");
    chunk_tail(o, r);
}

void answer_init(answer_split *a, const srv_req *r) {
    think_init(&a->ts, r->think == THINK_INSIDE);
    calls_init(&a->cs, r->tools);
    a->cs.sure = r->p.tools_constrained;
}

void answer_free(answer_split *a) { calls_free(&a->cs); }

void answer_feed(answer_split *a, const srv_req *r, const char *s, size_t n, int flush, sbuf *rs, sbuf *cs) {
    sbuf mid = {0};
    sbuf *content = r->tools ? &mid : cs;
    if (r->think) {
        think_feed(&a->ts, s, n, rs, content);
        if (flush) think_flush(&a->ts, rs, content);
    } else {
        sb_add(content, s, n);
    }
    if (r->tools) {
        calls_feed(&a->cs, mid.s, mid.n, cs);
        if (flush) calls_flush(&a->cs, cs);
        if (mid.oom || a->cs.oom) cs->oom = 1;
    }
    sb_free(&mid);
}

void resp_call_id(sbuf *o, const srv_req *r, int k) {
    const char *hex = strpbrk(r->id, "-_");
    if (r->index) sb_printf(o, "\"call_%s_%d_%d\"", hex ? hex + 1 : r->id, r->index, k);
    else sb_printf(o, "\"call_%s_%d\"", hex ? hex + 1 : r->id, k);
}

/* OpenAI's tool_calls entries of a whole answer. */
static void tool_calls(sbuf *o, const srv_req *r, const call_split *c) {
    sb_puts(o, "\"tool_calls\":[");
    for (int k = 0; k < c->n_calls; k++) {
        sb_puts(o, k ? ",{" : "{");
        sb_puts(o, "\"id\":");
        resp_call_id(o, r, k);
        sb_puts(o, ",\"type\":\"function\",\"function\":{\"name\":");
        sb_json_str(o, c->calls[k].name, strlen(c->calls[k].name));
        sb_puts(o, ",\"arguments\":");
        sb_json_str(o, c->calls[k].arguments, strlen(c->calls[k].arguments));
        sb_puts(o, "}}");
    }
    sb_puts(o, "]");
}

/* A stream's chunk of one call delta (calls_next): the first with id,
 * type and name, the others the next fragment of the arguments alone. */
static void call_chunk(sbuf *o, const sbuf *head, const srv_req *r, const call_delta *d) {
    sb_add(o, head->s, head->n);
    sb_printf(o, "\"choices\":[{\"index\":%d,\"delta\":{\"tool_calls\":[{\"index\":%d,", r->index, d->index);
    if (d->name) {
        sb_puts(o, "\"id\":");
        resp_call_id(o, r, d->index);
        sb_puts(o, ",\"type\":\"function\",\"function\":{\"name\":");
        sb_json_str(o, d->name, strlen(d->name));
        sb_puts(o, ",\"arguments\":");
    } else {
        sb_puts(o, "\"function\":{\"arguments\":");
    }
    sb_json_str(o, d->args, d->n);
    sb_puts(o, "}}]},\"logprobs\":null,\"finish_reason\":null");
    chunk_tail(o, r);
}

/* The chunks of what the splits decided (a piece's text, or the flush at
 * the end): reasoning, content, then the tool calls' deltas; the piece's
 * log probabilities go with the first, or with an empty content chunk when
 * the splits hold all of its text. */
static void split_chunks(sbuf *o, const sbuf *head, const srv_req *r, answer_split *a, sbuf *rs, sbuf *cs,
                         const tok_lp *lp, int n_lp, const dp_model *m) {
    if (rs->oom || cs->oom) o->oom = 1;
    int sent = 0;
    if (rs->n) chat_delta(o, head, r, "reasoning_content", rs->s, rs->n, lp, n_lp, m), sent = 1;
    if (cs->n || (!sent && n_lp && r->p.logprobs))
        chat_delta(o, head, r, "content", cs->s, cs->n, sent ? NULL : lp, sent ? 0 : n_lp, m);
    call_delta d;
    while (calls_next(&a->cs, &d)) call_chunk(o, head, r, &d);
    sb_clear(rs);
    sb_clear(cs);
}

/* "tool_calls" for an answer that ended by itself after calling tools; one
 * a stop string cut inside a call keeps "stop", as max_tokens keeps "length". */
static const char *finish(const srv_req *r, const answer_split *a) {
    const char *f = r->finish_reason ? r->finish_reason : "stop";
    return a && a->cs.n_calls && !a->cs.cut && !strcmp(f, "stop") ? "tool_calls" : f;
}

void resp_stream_pieces(sbuf *o, const sbuf *head, const srv_req *r, const req_output *out, const dp_model *m,
                        answer_split *a) {
    size_t at = 0;
    int lp_at = 0;
    sbuf rs = {0}, cs = {0};
    for (int i = 0; i < out->n_pieces; i++) {
        const out_piece *p = &out->pieces[i];
        const char *text = out->text.s ? out->text.s + at : "";
        const tok_lp *lp = out->lp ? out->lp + lp_at : NULL; /* NULL + 0 is undefined */
        if (a) {
            answer_feed(a, r, text, (size_t)p->len, 0, &rs, &cs);
            split_chunks(o, head, r, a, &rs, &cs, lp, p->n_lp, m);
        } else if (is_chat(r)) {
            chat_delta(o, head, r, "content", text, (size_t)p->len, lp, p->n_lp, m);
        } else {
            sb_add(o, head->s, head->n);
            sb_printf(o, "\"choices\":[{\"index\":%d,\"text\":", r->index);
            sb_json_str(o, text, (size_t)p->len);
            sb_puts(o, ",");
            logprobs(o, r, lp, p->n_lp, m);
            sb_puts(o, ",\"finish_reason\":null");
            chunk_tail(o, r);
        }
        at += (size_t)p->len;
        lp_at += p->n_lp;
    }
    sb_free(&rs);
    sb_free(&cs);
}

void resp_stream_finish(sbuf *o, const sbuf *head, const srv_req *r, answer_split *a, const dp_model *m) {
    if (a) { /* what the splits still hold */
        sbuf rs = {0}, cs = {0};
        answer_feed(a, r, "", 0, 1, &rs, &cs);
        split_chunks(o, head, r, a, &rs, &cs, NULL, 0, m);
        sb_free(&rs);
        sb_free(&cs);
    }
    sb_add(o, head->s, head->n);
    sb_printf(o, "\"choices\":[{\"index\":%d,%s\"logprobs\":null,\"finish_reason\":\"%s\"", r->index,
              is_chat(r) ? "\"delta\":{}," : "\"text\":\"\",", finish(r, a));
    chunk_tail(o, r);
}

void resp_stream_error(sbuf *o, const srv_req *r) {
    sb_puts(o, "data: {\"error\":{\"message\":");
    sb_json_str(o, r->err_msg, strlen(r->err_msg));
    sb_printf(o, ",\"type\":\"server_error\",\"param\":null,\"code\":%d}}\n\ndata: [DONE]\n\n", r->err_status);
}

void resp_stream_close(sbuf *o, const sbuf *head, srv_req *const *r, int n) {
    if (r[0]->p.include_usage) {
        sb_add(o, head->s, head->n);
        sb_puts(o, "\"choices\":[],");
        usage(o, r, n);
        sb_puts(o, "}\n\n");
    }
    sb_puts(o, "data: [DONE]\n\n");
}

void resp_stream_end(sbuf *o, const sbuf *head, const srv_req *r, answer_split *a, const dp_model *m) {
    if (r->err_status) {
        resp_stream_error(o, r);
        return;
    }
    resp_stream_finish(o, head, r, a, m);
    resp_stream_close(o, head, (srv_req *const *)&r, 1);
}

/* One entry of "choices" for r, all its output. */
static void full_choice(sbuf *o, const srv_req *r, const req_output *all, const dp_model *m) {
    sb_printf(o, is_chat(r) ? "{\"index\":%d,\"message\":{\"role\":\"assistant\",\"content\":"
                            : "{\"index\":%d,\"text\":", r->index);
    answer_split a;
    const int split = is_chat(r) && (r->think || r->tools);
    if (split) { /* content (null when the answer is only tool calls), reasoning and calls apart */
        sbuf rs = {0}, cs = {0};
        answer_init(&a, r);
        answer_feed(&a, r, all->text.s ? all->text.s : "", all->text.n, 1, &rs, &cs);
        if (rs.oom || cs.oom) o->oom = 1;
        if (cs.n || !a.cs.n_calls) sb_json_str(o, cs.s ? cs.s : "", cs.n);
        else sb_puts(o, "null");
        if (rs.n) {
            sb_puts(o, ",\"reasoning_content\":");
            sb_json_str(o, rs.s, rs.n);
        }
        if (a.cs.n_calls) {
            sb_puts(o, ",");
            tool_calls(o, r, &a.cs);
        }
        sb_free(&rs);
        sb_free(&cs);
    } else {
        sb_json_str(o, all->text.s ? all->text.s : "", all->text.n);
    }
    sb_puts(o, is_chat(r) ? "}," : ",");
    logprobs(o, r, all->lp, all->n_lp, m);
    sb_printf(o, ",\"finish_reason\":\"%s\"}", finish(r, split ? &a : NULL));
    if (split) answer_free(&a);
}

void resp_full_n(sbuf *o, srv_req *const *r, int n, const char *model_id, const req_output *all, const dp_model *m) {
    sb_printf(o, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", r[0]->id,
              is_chat(r[0]) ? "chat.completion" : "text_completion", (long long)r[0]->created);
    sb_json_str(o, model_id, strlen(model_id));
    sb_puts(o, ",\"choices\":[");
    for (int i = 0; i < n; i++) {
        if (i) sb_puts(o, ",");
        full_choice(o, r[i], &all[i], m);
    }
    sb_puts(o, "],");
    usage(o, r, n);
    sb_puts(o, "}\n");
}

void resp_full(sbuf *o, const srv_req *r, const char *model_id, const req_output *all, const dp_model *m) {
    resp_full_n(o, (srv_req *const *)&r, 1, model_id, all, m);
}
