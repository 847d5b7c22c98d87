/* The Responses API's answers (POST /v1/responses, see responses.h): the
 * response object, whole, or as server-sent events ("event: <type>" and
 * "data: {"type": <type>, "sequence_number": k, ...}", no [DONE]). Its
 * output items, in order: a reasoning item (the answer's reasoning split,
 * reasoning.h), a message item (the content; an empty one when the answer
 * is nothing else), a function_call item per tool call (toolcall.h). The
 * answer is read through the same splits as a chat answer (answer_feed),
 * so a response holds what the equivalent chat completion does. A stream
 * opens an item when its first text or call arrives and closes it when
 * another opens or the answer ends; text between calls opens another
 * message item there. */
#ifndef SERVE_RESPONSES_OUT_H
#define SERVE_RESPONSES_OUT_H

#include "respond.h"

typedef struct {
    answer_split a;
    int seq;                 /* the next event's sequence_number */
    int n_items;             /* output items opened */
    int open;                /* the item open now (responses_out.c: ITEM_*), 0 for none */
    sbuf text;               /* its text so far (a call's: its arguments) */
    sbuf name;               /* a call's name */
    int call;                /* a call's index among the answer's calls */
    sbuf items;              /* the closed items, comma-separated: the final object's output */
    int answered;            /* a message or call item was opened */
    int reasoning_tokens;
} rsp_stream;

void rsp_stream_init(rsp_stream *s, const srv_req *r);
void rsp_stream_free(rsp_stream *s);
/* response.created and response.in_progress. */
void rsp_stream_start(sbuf *o, rsp_stream *s, const srv_req *r, const char *model_id);
/* The events of a piece of the answer. */
void rsp_stream_pieces(sbuf *o, rsp_stream *s, const srv_req *r, const req_output *out, const dp_model *m);
/* The end of a finished request: what the splits still hold, the open item
 * closed, response.completed (or response.incomplete, max_output_tokens),
 * or response.failed where r failed. */
void rsp_stream_end(sbuf *o, rsp_stream *s, const srv_req *r, const char *model_id, const dp_model *m);

/* The whole response object of a finished request (all: its output). */
void rsp_full(sbuf *o, const srv_req *r, const char *model_id, const req_output *all, const dp_model *m);

#endif
