/* Tool calls out of a chat answer, in the <tool_call> format of Qwen2.5,
 * Qwen3 and Hermes templates (the format those templates teach the model):
 *
 *   <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>
 *
 * Each well-formed block becomes a call (its arguments as JSON text, as
 * OpenAI's tool_calls carry them); text outside the blocks is content,
 * the whitespace around blocks dropped. A block whose JSON does not parse,
 * or that the answer leaves open, stays content. Text comes in pieces (a
 * stream's tokens); bytes that may start a tag, and whitespace that may
 * precede one, are held back until they cannot, so the split of a stream
 * equals the split of its whole text. */
#ifndef SERVE_TOOLCALL_H
#define SERVE_TOOLCALL_H

#include <stddef.h>

#include "jsonw.h"

typedef struct {
    char *name, *arguments;  /* malloc'ed; arguments: JSON text */
} tool_call;

typedef struct {
    int in_call;             /* inside <tool_call> ... */
    sbuf hold;               /* outside: a possible start of <tool_call>; inside: the block's text */
    sbuf ws;                 /* outside: whitespace not yet released */
    tool_call *calls;        /* every call so far */
    int n_calls, cap_calls, taken;
    int oom;
} call_split;

void calls_init(call_split *c);
void calls_free(call_split *c);
/* Splits the next n bytes of content text: released text to content,
 * completed calls to c->calls. */
void calls_feed(call_split *c, const char *s, size_t n, sbuf *content);
/* The end of the answer: an open block and held text go to content
 * (whitespace only when there was no call). */
void calls_flush(call_split *c, sbuf *content);

#endif
