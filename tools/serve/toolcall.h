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
 * whole text.
 *
 * A "sure" split reads text drawn under a tool-call constraint, where a
 * block, once opened, is a call: it reads each call as it is written, its
 * name as soon as the string closes and its arguments as they grow, so
 * that a stream can send them as OpenAI's does (calls_next). Its arguments
 * are the same text as an unsure split's (cJSON_PrintUnformatted's, see
 * toolcall.c); a block whose name it read is a call, and a </tool_call>
 * inside the call's JSON is its text. A call the answer cuts (max_tokens,
 * a stop string) once its name is read is a call too, its arguments as far
 * as they were written (not JSON, as OpenAI's then): a stream has sent its
 * start, and the answer not streamed shows the same call. */
#ifndef SERVE_TOOLCALL_H
#define SERVE_TOOLCALL_H

#include <stddef.h>

#include "jsonw.h"

typedef struct {
    char *name, *arguments;  /* malloc'ed; arguments: JSON text */
} tool_call;

enum { TOOLS_NONE = 0, TOOLS_TAGGED = 1, TOOLS_JSON = 2 };

/* Where a sure split is in a call's JSON object (toolcall.c). */
typedef struct {
    int ph, depth;           /* phase; containers open (1: the call's object) */
    unsigned char arr[125];  /* a bit per level, as deep as cJSON parses (1000): an array, else an object */
    int sink, raw;           /* where a top-level member's value goes; a string value without quotes */
    int esc, hex, cut;       /* in a string: escape phase, \u digits read, \u0000 met (cJSON ends it there) */
    unsigned u, hi;          /* the \u code read; a high surrogate waiting for its low half */
    char key[11];            /* a top-level key's first bytes, key_n of them (11: longer than those looked for) */
    int key_n, in_key;
    const char *lit;         /* true, false or null, lit_k bytes of it read */
    int lit_k;
    int name_seen, named;    /* the first "name" met; its value is a complete, non-empty string */
    int args_key;            /* arguments: 0 none yet, 1 the format's word, 2 the other (held back) */
} call_scan;

typedef struct {
    int format;              /* TOOLS_TAGGED or TOOLS_JSON */
    int sure;                /* set after calls_init: a block is a call once opened (see above) */
    int in_call;             /* inside <tool_call> ..., or (JSON) an answer that opened with '{' */
    int plain;               /* (JSON) the answer is content */
    sbuf hold;               /* outside: a possible start of <tool_call>; inside: the block's text */
    sbuf ws;                 /* outside: whitespace not yet released */
    tool_call *calls;        /* every call so far */
    int n_calls, cap_calls;
    call_scan scan;          /* sure: the open call, */
    sbuf name, args;         /* its name (complete once scan.named) and arguments so far */
    sbuf num;                /* the text of the number being read (any length, as cJSON reads one) */
    size_t ready;            /* bytes of args that may go out (no character cut) */
    int taken, shown;        /* calls_next: calls sent; whether call `taken` had its first delta, */
    size_t sent;             /* and the bytes of its arguments sent */
    int cut;                 /* the last call was cut short: the answer ended inside its JSON */
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
 * (whitespace only when there was no call). In a sure split, a call left
 * open (max_tokens, a stop string) whose name was read goes to c->calls
 * instead, with the arguments written so far (c->cut when its JSON had not
 * ended), whether or not calls_next sent its start: the same call streamed
 * or not. */
void calls_flush(call_split *c, sbuf *content);

/* One delta of a streamed call: its first (name set, args its arguments,
 * all of them for an unsure split's call, "" for a sure one's), or the
 * next fragment args[0..n) of a sure call's arguments. */
typedef struct {
    int index;
    const char *name, *args;
    size_t n;
} call_delta;
/* The next delta of the calls a stream can send now: 1 with *d, 0 when
 * nothing (more) may go out yet. An unsure split's call goes out whole
 * once its block closed; a sure one's first delta once its name is known,
 * then its arguments as they grow, so that they add up to the arguments
 * of its completed call, or of the call calls_flush cut. */
int calls_next(call_split *c, call_delta *d);

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
