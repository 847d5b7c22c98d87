/* What a request's sampled tokens become: detokenized text with stop
 * strings matched on it (text that could be the start of a stop string is
 * held back until it cannot), the log probabilities that go with it, and
 * presence/frequency penalties on the host. Runs on the scheduler thread;
 * the text_* calls write r->out, so the caller holds the scheduler's lock. */
#ifndef SERVE_TEXTOUT_H
#define SERVE_TEXTOUT_H

#include "scheduler.h"

/* Adds the text of tok (and r->lp_cur when r->lp_ok) and releases what can
 * no longer start a stop string. Returns 1 when a stop string was found:
 * the text before it is released, the rest dropped. */
int text_add_token(srv_req *r, int32_t tok);
/* The end: flushes the detokenizer and releases all held text (up to a
 * stop string found in it: then returns 1). */
int text_finish(srv_req *r);

/* Log probabilities of the distribution logits[0..V) for tok and the top
 * alternatives. */
void lp_compute(const float *logits, int V, int32_t tok, int n_top, tok_lp *out);

/* Presence/frequency penalties (OpenAI's, over the tokens generated so
 * far): count a generated token / subtract from logits in place, and add
 * the request's logit_bias. */
int pen_count(srv_req *r, int32_t tok);
void pen_apply(const srv_req *r, float *logits);

#endif
