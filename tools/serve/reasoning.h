/* A chat answer's reasoning apart from its content, as llama-server's
 * --reasoning-format deepseek and vLLM's reasoning parsers return it
 * (message.reasoning_content, delta.reasoning_content): an answer that
 * opens with <think> (after whitespace), or whose prompt ended inside an
 * open <think> block (DeepSeek-R1's template), has its text up to </think>
 * as reasoning, without the tags, the newlines next to them, or the
 * whitespace after </think>; the rest is content. An answer that does not
 * open with <think> is all content. Text comes in pieces (a stream's
 * tokens); bytes that may still turn out to be a tag are held back until
 * they cannot, so the split of a stream equals the split of its whole text. */
#ifndef SERVE_REASONING_H
#define SERVE_REASONING_H

#include <stddef.h>

#include "jsonw.h"

enum { THINK_HOLD = 64 };

/* Whether an answer is split, and how it starts (the callers' flag). */
enum { THINK_NONE = 0, THINK_SPLIT = 1, THINK_INSIDE = 2 };

typedef struct {
    int state;
    char hold[THINK_HOLD];
    int n_hold;
} think_split;

/* inside: the prompt ended inside an open <think> block. */
void think_init(think_split *t, int inside);
/* Splits the next n bytes of the answer, appending to reasoning and content
 * what is decided. */
void think_feed(think_split *t, const char *s, size_t n, sbuf *reasoning, sbuf *content);
/* The end of the answer: what is held back goes where it stands. */
void think_flush(think_split *t, sbuf *reasoning, sbuf *content);

/* 1 when text (a rendered prompt) ends inside a <think> block: its last
 * <think> has no </think> after it. */
int think_open_at_end(const char *text);
/* The think mode (doppler.h DP_THINK_*) of a constrained answer to the
 * rendered prompt text: inside a block where text ends inside one; may open
 * one where the template writes <think> (template_thinks) and text does not
 * end with a closed block (Qwen3's enable_thinking false writes an empty
 * one: the answer thinks no more); else none. */
int think_constraint_mode(const char *text, int template_thinks);

#endif
