/* The body of an OpenAI-style completion request, parsed and checked.
 *
 * JSON in, a filled req_params or a one-line error with the HTTP status
 * (400) and the field it is about. No HTTP, engine or model here, so the
 * fuzz target (tests/fuzz/fuzz_request.c) links this file alone with cJSON.
 *
 * Rules, as the OpenAI API has them: unknown fields are ignored; null is
 * the same as an absent field; a field of the wrong type or out of range is
 * an error; n is 1 to REQ_MAX_N (routes.c caps it at --parallel too), and
 * a completion's prompts times n at most REQ_MAX_CHOICES. OpenAI fields
 * that would change the answer and are not implemented (tool_choice
 * "required" or a named function, response_format other than text, echo,
 * suffix, best_of) are errors rather than ignored. The body must be valid
 * UTF-8 and its strings may not hold NUL (\u0000). */
#ifndef SERVE_REQUEST_H
#define SERVE_REQUEST_H

#include <stddef.h>
#include <stdint.h>

typedef enum { REQ_CHAT = 0, REQ_COMPLETION = 1 } req_kind;

typedef struct {
    char *role;                /* "system", "user", "assistant", "tool" ("developer" is read as "system") */
    char *content;
} req_msg;

#define REQ_MAX_TOOLS 128      /* tools per request, and tool calls per message */

#define REQ_MAX_STOP 16        /* stop strings per request */
#define REQ_MAX_STOP_LEN 512   /* bytes per stop string */
#define REQ_MAX_TOP_LOGPROBS 20
#define REQ_MAX_LOGIT_BIAS 1024 /* logit_bias entries per request */
#define REQ_MAX_N 16           /* choices per request ('n') */
#define REQ_MAX_CHOICES 64     /* completions: prompts times n per request (so at most 64 prompts) */

enum { TOOL_CHOICE_AUTO = 0, TOOL_CHOICE_REQUIRED = 1, TOOL_CHOICE_NAMED = 2 };

typedef struct {
    req_kind kind;
    char *model;               /* NULL when absent */
    req_msg *msgs;             /* chat */
    int n_msgs;
    /* completion: the prompts, texts or token-id lists, one after another (req_prompt_text, req_prompt_ids) */
    int n_prompts;             /* 1, or as many as a list of prompts holds (chat: 1) */
    char *prompt;              /* the texts, each ending in its NUL; or NULL when prompt_tokens is set */
    int32_t *prompt_tokens;    /* or the token ids of all */
    int n_prompt_tokens;       /* (all the prompts') */
    size_t *prompt_end;        /* prompt i ends at prompt_end[i] (bytes of prompt, NUL included, or ids) */
    int max_tokens;            /* -1: absent (until the end of the text or the context) */
    int n;                     /* choices: independent answers to the same prompt (1..REQ_MAX_N) */
    /* sampling; a field not given keeps its "unset" value (has_* 0, or NAN / -1) */
    double temperature, top_p, min_p, presence_penalty, frequency_penalty, repeat_penalty;
    int top_k;                 /* -1: absent; 0 (or -1 given) = off */
    int repeat_last_n;         /* -1: absent */
    int has_seed;
    uint64_t seed;
    char *stop[REQ_MAX_STOP];
    int n_stop;
    int logprobs;              /* 1: return the sampled tokens' log probabilities */
    int top_logprobs;          /* and this many alternatives per position (0..REQ_MAX_TOP_LOGPROBS) */
    int stream;
    int include_usage;         /* stream_options.include_usage */
    int ignore_eos;            /* keep going after end-of-generation tokens (llama-server, vLLM) */
    char *template_kwargs;     /* chat: chat_template_kwargs (llama-server, vLLM), a JSON object's text; or NULL */
    int reasoning_format;      /* chat: llama-server's reasoning_format, 1 deepseek / auto, 0 none, -1 absent */
    char *tools_json;          /* chat: the tools (a JSON array) unless absent, empty or tool_choice "none" */
    char *messages_json;       /* chat: the messages in OpenAI's form (JSON) when they hold tool calls, tool
                                * messages or reasoning_content, or the request tools */
    int tool_msgs;             /* chat: a message holds tool calls or is a tool's */
    int32_t *bias_tok;         /* logit_bias: added to the logits of these tokens (ids not yet checked) */
    float *bias_val;
    int n_logit_bias;
    int tool_choice;           /* chat: TOOL_CHOICE_AUTO, _REQUIRED (the answer is calls), _NAMED (one of tool_name) */
    int parallel_calls;        /* chat: parallel_tool_calls (default 1): "required" may give several calls */
    char *tool_name;
    int tools_constrained;     /* chat, set by routes.c (not a field of the body): every tool-call block the
                                * answer's split sees is drawn under a tool-call constraint (toolcall.h "sure") */
    int json;                  /* response_format: 1 json_object or json_schema (the answer is constrained) */
    char *json_schema;         /* its schema (checked, compact JSON text); NULL: any JSON object */
    char *grammar;             /* grammar (llama-server's): a GBNF grammar (checked) the answer is written in, or NULL */
    /* a /v1/responses request (responses.c translated it into this chat request): the response object and
     * its events instead of chat's, and what the response repeats of the request (JSON members' text) */
    int responses;
    char *echo;
} req_params;

typedef struct {
    int status;                /* HTTP status (400) */
    char param[64];            /* the field concerned, "" when none */
    char message[320];
} req_error;

/* Parses the body of a /v1/chat/completions (REQ_CHAT) or /v1/completions
 * request. Returns 0 with *out filled (free with req_params_free), or -1
 * with *err set and *out empty. */
int req_parse(req_kind kind, const char *body, size_t len, req_params *out, req_error *err);
void req_params_free(req_params *p);

/* The body as a JSON value (a cJSON tree to free with cJSON_Delete), after
 * the checks every endpoint makes (UTF-8, no NUL, one JSON value); NULL
 * with *err set. */
struct cJSON *req_json(const char *body, size_t len, req_error *err);

/* Text content c: a string, or a list of parts {"type", "text"} of the
 * types[0..n_types) joined; NULL is "". *out malloc'ed; errors name param,
 * and what (c's path, "messages[2].content") in the message. */
int req_text_parts(const struct cJSON *c, const char *const *types, int n_types, const char *param, const char *what,
                   char **out, req_error *err);

/* A completion's prompt i (0..n_prompts): its text, or NULL when the
 * prompts are token ids; its ids (*n of them), or NULL (*n = 0) when the
 * prompts are texts. */
const char *req_prompt_text(const req_params *p, int i);
const int32_t *req_prompt_ids(const req_params *p, int i, int *n);

/* 1 when s[0..n) is well-formed UTF-8 (no overlong forms, surrogates or
 * code points above U+10FFFF). */
int req_utf8_valid(const char *s, size_t n);
/* A member of obj; null is the same as absent (NULL), as everywhere in a request. */
const struct cJSON *req_field(const struct cJSON *obj, const char *name);

/* Fills *err as a 400 naming param (NULL: none) with the formatted
 * message; returns -1 (the parsers' failure). */
int req_fail(req_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
