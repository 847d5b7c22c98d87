/* doppler serve: the pieces and what they share.
 *
 *   cmd_serve.c   options, start-up, signals and the orderly shutdown
 *   http.c        libmicrohttpd: routing, key, limits, timeouts, responses
 *   routes.c      the endpoints: request -> prompt -> scheduler -> answer
 *   request.c     JSON body -> req_params (no HTTP or engine: fuzzed alone)
 *   scheduler.c   the thread that runs the batched engine
 *   srvreq.c      a request's life: made, the later choices of n, destroyed
 *   textout.c     tokens -> text, stop strings, log probabilities, penalties
 *   reasoning.c   a chat answer's <think> block apart from its content
 *   toolcall.c    a chat answer's tool calls (<tool_call> blocks, Llama 3.1's JSON)
 *   respond.c     OpenAI response bodies and stream chunks
 *   responses.c   a /v1/responses body -> the chat request it stands for
 *   responses_out.c  the Responses API's response object and events
 *   tokens.c      llama-server's /tokenize and /detokenize: the tokenizer alone
 *   embed.c       /v1/embeddings: inputs as sequences that sample nothing, pooled
 *   metrics.c     Prometheus text
 *   page.c        the chat page at / (generated from page.html)
 */
#ifndef SERVE_SERVE_H
#define SERVE_SERVE_H

#include "doppler.h"
#include "http.h"
#include "metrics.h"
#include "scheduler.h"

typedef struct {
    dp_model *m;
    const dp_model_info *info;
    int n_ctx;
    int parallel;
    char model_id[256];      /* what /v1/models lists and responses name */
    dp_sampler_params smp;   /* defaults for fields a request leaves out */
    const char *tmpl;        /* --chat-template (a name or Jinja source), NULL: the model's */
    /* what the chat template in use (tmpl, else the model's own Jinja) is, read once at start-up */
    int tmpl_jinja;          /* Jinja source, not a built-in's name */
    int tools_format;        /* the tool-call format it teaches (toolcall.h), TOOLS_NONE for none */
    int thinking_switch;     /* it reads enable_thinking */
    int template_thinks;     /* it writes <think> (answers may open with a reasoning block) */
    const char *template_kwargs; /* --chat-template-kwargs (JSON object text) or NULL */
    int reasoning_format;    /* --reasoning-format: 1 reasoning apart (deepseek, auto), 0 in the content (none) */
    int pooling;             /* /v1/embeddings: --pooling, else the file's (DP_POOLING_*; UNSET: the last position) */
    sched *q;
    metrics *met;
    int64_t started;         /* unix time */
} server;

/* The route table (routes.c). */
extern const http_route serve_routes[];
extern const int serve_n_routes;

/* The chat page (page.c, generated at build time). */
extern const char serve_page_html[];
extern const unsigned serve_page_len;

#endif
