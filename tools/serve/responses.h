/* OpenAI's Responses API (POST /v1/responses) as a chat request: the body
 * is checked and translated into the /v1/chat/completions body that asks
 * the same thing, which req_parse then reads, so that the model sees
 * exactly the prompt the equivalent chat request gives it:
 *
 *   instructions                  a system message first
 *   input (a string)              one user message
 *   input items: message          a message of its role (developer: system),
 *                                 its input_text / output_text parts joined
 *                function_call    a tool call of the assistant message before
 *                                 it (one of its own when there is none)
 *                function_call_output  a tool message (tool_call_id: call_id)
 *                reasoning        the next assistant message's reasoning_content
 *   max_output_tokens             max_tokens
 *   tools (flat: name, ...)       tools ({"type": "function", "function": {...}})
 *   tool_choice {"type": "function", "name"}   {"type": "function", "function": {"name"}}
 *   text.format (json_schema flat)  response_format
 *
 * and temperature, top_p, stream, parallel_tool_calls as they are, with the
 * chat endpoint's extensions (seed, top_k, chat_template_kwargs, ...). What
 * needs state on the server (previous_response_id, conversation, background)
 * or that doppler cannot do (tools other than functions, truncation "auto",
 * logprobs) is a 400 naming the field. No HTTP, engine or model here: the
 * fuzz target (tests/fuzz/fuzz_request.c) links it with request.c. */
#ifndef SERVE_RESPONSES_H
#define SERVE_RESPONSES_H

#include <stddef.h>

#include "request.h"

/* Parses a /v1/responses body into the chat request it stands for:
 * 0 with *out filled (out->responses set, out->echo what the response
 * repeats; free with req_params_free), or -1 with *err set (its param named
 * as the Responses API names it) and *out empty. */
int resp_parse(const char *body, size_t len, req_params *out, req_error *err);

/* The Responses API's name for a field of the chat request (max_tokens:
 * max_output_tokens, messages: input, response_format: text); others are
 * the same. */
const char *resp_param(const char *chat_name);

#endif
