/* Tool calls out of a chat answer, in the format its chat template teaches
 * the model:
 *
 *   TOOLS_TAGGED   Qwen2.5, Qwen3, Hermes: blocks anywhere in the answer,
 *                  <tool_call>\n{"name": "f", "arguments": {"city": "Paris"}}\n</tool_call>
 *                  each well-formed block a call, text outside them content
 *                  (the whitespace around blocks dropped); a block whose
 *                  JSON does not parse, or that the answer leaves open,
 *                  stays content.
 *   TOOLS_JSON     Llama 3.1 / 3.2 / 3.3: the whole answer is one call,
 *                  {"name": "f", "parameters": {"city": "Paris"}}; an answer
 *                  that is not such an object is content.
 *
 * A call's arguments are kept as JSON text, as OpenAI's tool_calls carry
 * them. Text comes in pieces (a stream's tokens); bytes that may still
 * belong to a call, and whitespace that may precede one, are held back
 * until they cannot, so the split of a stream equals the split of its
 * whole text. */
#ifndef SERVE_TOOLCALL_H
#define SERVE_TOOLCALL_H

#include <stddef.h>

#include "jsonw.h"

typedef struct {
    char *name, *arguments;  /* malloc'ed; arguments: JSON text */
} tool_call;

enum { TOOLS_NONE = 0, TOOLS_TAGGED = 1, TOOLS_JSON = 2 };

typedef struct {
    int format;              /* TOOLS_TAGGED or TOOLS_JSON */
    int in_call;             /* inside <tool_call> ..., or (JSON) an answer that opened with '{' */
    int plain;               /* (JSON) the answer is content */
    sbuf hold;               /* outside: a possible start of <tool_call>; inside: the block's text */
    sbuf ws;                 /* outside: whitespace not yet released */
    tool_call *calls;        /* every call so far */
    int n_calls, cap_calls, taken;
    int oom;
} call_split;

/* format: TOOLS_TAGGED or TOOLS_JSON; the template teaches it (tools_format). */
void calls_init(call_split *c, int format);
/* The format a chat template (Jinja source) teaches, TOOLS_NONE for none. */
int tools_format(const char *template_src);
void calls_free(call_split *c);
/* Splits the next n bytes of content text: released text to content,
 * completed calls to c->calls. */
void calls_feed(call_split *c, const char *s, size_t n, sbuf *content);
/* The end of the answer: an open block and held text go to content
 * (whitespace only when there was no call). */
void calls_flush(call_split *c, sbuf *content);

/* tool_choice "required" or a named function: the JSON Schema of one call
 * in the format (an object of the function's name as a const and its
 * parameters, under "arguments" for TOOLS_TAGGED, "parameters" for
 * TOOLS_JSON; an anyOf over the functions), from the request's tools (a
 * JSON array's text); name: only that function, NULL: any. The text
 * written around it: *before / *after (static; NULL for none). Returns
 * malloc'ed JSON text, or NULL (out of memory, or tools that do not
 * parse). */
char *calls_schema(const char *tools_json, const char *name, int format, const char **before, const char **after);

#endif
