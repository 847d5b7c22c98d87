/* OpenAI response bodies: whole (chat.completion, text_completion) and as
 * server-sent events (one "data:" event per released piece of text, the
 * finish reason, usage when asked, "data: [DONE]"). A request's choices
 * (n per prompt) are a srv_req each; each chunk names its choice's index
 * (prompt * n + choice). */
#ifndef SERVE_RESPOND_H
#define SERVE_RESPOND_H

#include "jsonw.h"
#include "reasoning.h"
#include "scheduler.h"
#include "toolcall.h"

/* A chat answer's splits, kept across a stream's chunks: reasoning apart
 * (r->think) and tool calls (r->tools). */
typedef struct {
    think_split ts;
    call_split cs;
} answer_split;

void answer_init(answer_split *a, const srv_req *r);
void answer_free(answer_split *a);
/* Text of the answer through the splits r asks for: its reasoning to rs,
 * its content to cs, its tool calls to a->cs.calls; flush: the end. */
void answer_feed(answer_split *a, const srv_req *r, const char *s, size_t n, int flush, sbuf *rs, sbuf *cs);
/* The id of r's k-th tool call, quoted: call_ and the hex of r's id (the
 * choices of a request share its id: a later one's calls add its index). */
void resp_call_id(sbuf *o, const srv_req *r, int k);

/* The part every chunk of r's stream starts with: "data: {...,"model":..,". */
void resp_chunk_head(sbuf *head, const srv_req *r, const char *model_id);
/* Chat: the first chunk (the assistant role). */
void resp_stream_start(sbuf *o, const sbuf *head, const srv_req *r);
/* One event per piece of out; with a (r->think, r->tools), its reasoning
 * as delta.reasoning_content, its tool calls as delta.tool_calls (whole,
 * or as they are written under a call constraint: calls_next) and the
 * rest as delta.content. */
void resp_stream_pieces(sbuf *o, const sbuf *head, const srv_req *r, const req_output *out, const dp_model *m,
                        answer_split *a);
/* The end of a finished choice: what a still holds, its finish reason
 * ("tool_calls" after calls). */
void resp_stream_finish(sbuf *o, const sbuf *head, const srv_req *r, answer_split *a, const dp_model *m);
/* The end of a stream whose choices r[0..n) all finished: usage
 * (include_usage), [DONE]. */
void resp_stream_close(sbuf *o, const sbuf *head, srv_req *const *r, int n);
/* The end of a stream where r failed: an error event, [DONE]. */
void resp_stream_error(sbuf *o, const srv_req *r);
/* The end of a finished request of one choice: finish, close; or error. */
void resp_stream_end(sbuf *o, const sbuf *head, const srv_req *r, answer_split *a, const dp_model *m);

/* The whole answer of a finished request of choices r[0..n) (all[i] =
 * everything r[i] produced); with think, message.reasoning_content apart
 * from message.content, with tools message.tool_calls. */
void resp_full_n(sbuf *o, srv_req *const *r, int n, const char *model_id, const req_output *all, const dp_model *m);
/* The same for one choice. */
void resp_full(sbuf *o, const srv_req *r, const char *model_id, const req_output *all, const dp_model *m);

#endif
