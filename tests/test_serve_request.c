/* doppler serve's request parser (tools/serve/request.c): the fields of
 * both endpoints, null = absent, wrong types and ranges naming the field,
 * UTF-8 and NUL rules, trailing data, deep nesting, and random mutations of
 * good bodies (every one parses or fails with a message). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"
#include "testlib.h"

static int parse(req_kind k, const char *body, req_params *p, req_error *e) {
    return req_parse(k, body, strlen(body), p, e);
}

/* Expects an error about param (NULL: any) and returns its message. */
static void bad(req_kind k, const char *body, const char *param) {
    req_params p;
    req_error e;
    int rc = parse(k, body, &p, &e);
    CHECKF(rc == -1 && e.status == 400 && e.message[0], "accepted: %s", body);
    if (rc == 0) req_params_free(&p);
    else if (param) CHECKF(!strcmp(e.param, param), "%s: param '%s', want '%s' (%s)", body, e.param, param, e.message);
}

static void t_chat(void) {
    req_params p;
    req_error e;
    const char *b = "{\"model\": \"m\", \"messages\": [{\"role\": \"developer\", \"content\": \"be brief\"},"
                    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"h\\u00e9\"}, "
                    "{\"type\": \"text\", \"text\": \"llo\"}]}, {\"role\": \"assistant\", \"content\": null}],"
                    "\"max_tokens\": 9, \"max_completion_tokens\": 7, \"temperature\": 0.5, \"top_p\": 0.9,"
                    "\"top_k\": -1, \"min_p\": null, \"seed\": -3, \"stop\": [\"a\", \"\", \"bc\"], \"logprobs\": true,"
                    "\"top_logprobs\": 4, \"stream\": true, \"stream_options\": {\"include_usage\": true},"
                    "\"presence_penalty\": -1.5, \"repetition_penalty\": 1.1, \"n\": 1, \"unknown\": {\"x\": [1]}}";
    CHECKF(parse(REQ_CHAT, b, &p, &e) == 0, "%s", e.message);
    CHECK(p.n_msgs == 3 && !strcmp(p.msgs[0].role, "system") && !strcmp(p.msgs[1].content, "h\xc3\xa9llo") &&
          !strcmp(p.msgs[2].content, ""));
    CHECK(p.max_tokens == 7 && p.temperature == 0.5 && fabs(p.top_p - 0.9) < 1e-12 && p.top_k == 0 && isnan(p.min_p));
    CHECK(p.has_seed && p.seed == (uint64_t)(int64_t)-3);
    CHECK(p.n_stop == 2 && !strcmp(p.stop[0], "a") && !strcmp(p.stop[1], "bc"));
    CHECK(p.logprobs == 1 && p.top_logprobs == 4 && p.stream && p.include_usage);
    CHECK(p.presence_penalty == -1.5 && fabs(p.repeat_penalty - 1.1) < 1e-12 && isnan(p.frequency_penalty));
    CHECK(p.model && !strcmp(p.model, "m"));
    req_params_free(&p);

    bad(REQ_CHAT, "{}", "messages");
    bad(REQ_CHAT, "{\"messages\": []}", "messages");
    bad(REQ_CHAT, "{\"messages\": {\"role\": \"user\"}}", "messages");
    bad(REQ_CHAT, "{\"messages\": [{\"role\": \"function\", \"content\": \"x\"}]}", "messages");
    bad(REQ_CHAT, "{\"messages\": [{\"content\": \"x\"}]}", "messages");
    bad(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}", "messages");
    bad(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": 2}", "logprobs");
    bad(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"top_logprobs\": 2}", "top_logprobs");
    bad(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logprobs\": true, \"top_logprobs\": 21}",
        "top_logprobs");
    bad(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"max_completion_tokens\": 0}",
        "max_completion_tokens");

    /* chat_template_kwargs: an object, kept as its JSON text; null is absent; not the variables doppler sets */
    CHECK(parse(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": "
                          "{\"enable_thinking\": false, \"n\": [1, \"\\u00e9\"]}}", &p, &e) == 0);
    CHECKF(p.template_kwargs && !strcmp(p.template_kwargs, "{\"enable_thinking\":false,\"n\":[1,\"\xc3\xa9\"]}"), "%s",
           p.template_kwargs ? p.template_kwargs : "(null)");
    req_params_free(&p);
    CHECK(parse(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": null}",
                &p, &e) == 0 && !p.template_kwargs);
    req_params_free(&p);
    /* reasoning_format: llama-server's words; absent -1 */
    static const char *const rf[][2] = {{"\"none\"", "0"}, {"\"deepseek\"", "1"}, {"\"auto\"", "1"}, {"null", "-1"}};
    for (size_t i = 0; i < sizeof rf / sizeof rf[0]; i++) {
        char body[160];
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_format\": %s}",
                 rf[i][0]);
        CHECKF(parse(REQ_CHAT, body, &p, &e) == 0 && p.reasoning_format == atoi(rf[i][1]), "%s: %d", body,
               p.reasoning_format);
        req_params_free(&p);
    }
    bad(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_format\": \"raw\"}",
        "reasoning_format");
    bad(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"reasoning_format\": 1}",
        "reasoning_format");
    static const char *const kw_bad[] = {"5", "\"x\"", "[]", "true", "{\"messages\": []}", "{\"tools\": null}",
                                         "{\"add_generation_prompt\": false}", "{\"documents\": 1}"};
    for (size_t i = 0; i < sizeof kw_bad / sizeof kw_bad[0]; i++) {
        char body[256];
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"chat_template_kwargs\": %s}",
                 kw_bad[i]);
        bad(REQ_CHAT, body, "chat_template_kwargs");
    }
}

/* logit_bias, and the OpenAI fields doppler does not implement: refused, not ignored */
static void t_unsupported(void) {
    req_params p;
    req_error e;
    CHECK(parse(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"logit_bias\": "
                          "{\"5\": 10, \"70000\": -100, \"5\": 2.5}, \"tools\": [], \"tool_choice\": \"none\", "
                          "\"response_format\": {\"type\": \"text\"}}", &p, &e) == 0);
    CHECKF(p.n_logit_bias == 2 && p.bias_tok[0] == 5 && p.bias_val[0] == 2.5f && p.bias_tok[1] == 70000 &&
               p.bias_val[1] == -100.0f, "%d entries", p.n_logit_bias);
    req_params_free(&p);
    CHECK(parse(REQ_COMPLETION, "{\"prompt\": \"x\", \"echo\": false, \"suffix\": \"\", \"best_of\": 1, "
                                "\"logit_bias\": {}, \"tool_choice\": \"auto\"}", &p, &e) == 0 && p.n_logit_bias == 0);
    req_params_free(&p);
    static const char *wrong[][2] = {
        {"\"logit_bias\": [1]", "logit_bias"}, {"\"logit_bias\": {\"abc\": 1}", "logit_bias"},
        {"\"logit_bias\": {\"-1\": 1}", "logit_bias"}, {"\"logit_bias\": {\"\": 1}", "logit_bias"},
        {"\"logit_bias\": {\"1x\": 1}", "logit_bias"}, {"\"logit_bias\": {\"3000000000\": 1}", "logit_bias"},
        {"\"logit_bias\": {\"1\": 101}", "logit_bias"}, {"\"logit_bias\": {\"1\": \"5\"}", "logit_bias"},
        {"\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]", "tools"},
        {"\"tools\": {}", "tools"}, {"\"tools\": []", "tools"},
        {"\"response_format\": {\"type\": \"json_schema\"}", "response_format"},
        {"\"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"schema\": {\"type\": \"str\"}}}",
         "response_format"},
        {"\"response_format\": {\"type\": \"json_object\", \"schema\": {\"type\": \"string\", \"pattern\": \"a\"}}",
         "response_format"},
        {"\"response_format\": {\"type\": \"xml\"}", "response_format"},
        {"\"response_format\": \"json\"", "response_format"}, {"\"echo\": true", "echo"},
        {"\"suffix\": \"}\"", "suffix"}, {"\"best_of\": 2", "best_of"},
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"prompt\": \"x\", %s}", wrong[i][0]);
        bad(REQ_COMPLETION, body, wrong[i][1]);
    }
    /* response_format: json_object (any object, or llama-server's schema beside it), json_schema (its schema
     * checked and kept as compact JSON; none: any value); not with tools */
    CHECK(parse(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": "
                          "{\"type\": \"json_object\"}}", &p, &e) == 0 && p.json == 1 && !p.json_schema);
    req_params_free(&p);
    CHECK(parse(REQ_COMPLETION, "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": "
                                "{\"name\": \"n\", \"strict\": true, \"schema\": {\"type\": \"object\",  \"properties\": "
                                "{\"a\": {\"type\": \"integer\"}}}}}}", &p, &e) == 0 && p.json == 1 && p.json_schema &&
          !strcmp(p.json_schema, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}"));
    req_params_free(&p);
    CHECK(parse(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": "
                          "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"n\"}}}", &p, &e) == 0 && p.json == 1 &&
          p.json_schema && !strcmp(p.json_schema, "{}"));
    req_params_free(&p);
    bad(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"response_format\": {\"type\": "
                  "\"json_object\"}, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"w\"}}]}",
        "response_format");
    /* grammar (llama-server's): a GBNF string, checked and kept; "" is none; not with response_format or tools */
    CHECK(parse(REQ_COMPLETION, "{\"prompt\": \"x\", \"grammar\": \"root ::= [0-9]+\"}", &p, &e) == 0 && p.grammar &&
          !strcmp(p.grammar, "root ::= [0-9]+") && !p.json);
    req_params_free(&p);
    CHECK(parse(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"grammar\": \"\"}", &p, &e) ==
              0 && !p.grammar);
    req_params_free(&p);
    static const char *bad_grammar[] = {
        "\"grammar\": 5", "\"grammar\": \"root ::= foo\"", "\"grammar\": \"root ::= expr\\nexpr ::= expr \\\"a\\\" | \\\"b\\\"\"",
        "\"grammar\": \"root ::= \\\"a\", \"grammar\": \"root ::= [0-9]\", \"response_format\": {\"type\": \"json_object\"}",
        "\"grammar\": \"root ::= [0-9]\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"w\"}}]",
    };
    for (size_t i = 0; i < sizeof bad_grammar / sizeof *bad_grammar; i++) {
        char gb[512];
        snprintf(gb, sizeof gb, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], %s}", bad_grammar[i]);
        bad(REQ_CHAT, gb, "grammar");
    }
    CHECK(parse(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"grammar\": \"root ::= x\"}", &p,
                &e) == -1 && strstr(e.message, "undefined rule 'x' at line 1, column 10"));
    /* tools: OpenAI's function tools, the conversation then kept in OpenAI's form for the template;
     * tool_choice "none" hides them */
    const char *tool = "{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {}}}";
    char body[2048];
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather?\"}, {\"role\": "
             "\"assistant\", \"content\": null, \"reasoning_content\": \"R\", \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", "
             "\"function\": {\"name\": \"w\", \"arguments\": \"{\\\"city\\\": 1}\"}}]}, {\"role\": \"tool\", "
             "\"content\": [{\"type\": \"text\", \"text\": \"18C\"}], \"tool_call_id\": \"c1\"}], \"tools\": [%s], "
             "\"tool_choice\": \"auto\"}", tool);
    CHECKF(parse(REQ_CHAT, body, &p, &e) == 0, "%s", e.message);
    CHECKF(p.tools_json && !strcmp(p.tools_json, "[{\"type\":\"function\",\"function\":{\"name\":\"w\",\"parameters\":{}}}]"),
           "%s", p.tools_json ? p.tools_json : "(null)");
    CHECKF(p.messages_json && !strcmp(p.messages_json,
                                      "[{\"role\":\"user\",\"content\":\"Weather?\"},{\"role\":\"assistant\",\"content\":\"\","
                                      "\"tool_calls\":[{\"id\":\"c1\",\"type\":\"function\",\"function\":{\"name\":\"w\","
                                      "\"arguments\":\"{\\\"city\\\": 1}\"}}],\"reasoning_content\":\"R\"},{\"role\":\"tool\",\"content\":\"18C\","
                                      "\"tool_call_id\":\"c1\"}]"),
           "%s", p.messages_json ? p.messages_json : "(null)");
    req_params_free(&p);
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [%s], "
             "\"tool_choice\": \"none\"}", tool);
    CHECK(parse(REQ_CHAT, body, &p, &e) == 0 && !p.tools_json && !p.messages_json);
    req_params_free(&p);
    CHECK(parse(REQ_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": []}", &p, &e) == 0 &&
          !p.tools_json && !p.messages_json);
    req_params_free(&p);
    /* tool_choice "required" and a named function: the answer will be a call (its schema: test_serve_toolcall) */
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [%s], "
             "\"tool_choice\": \"required\"}", tool);
    CHECK(parse(REQ_CHAT, body, &p, &e) == 0 && p.tool_choice == TOOL_CHOICE_REQUIRED && p.tools_json && !p.tool_name &&
          p.parallel_calls == 1);
    req_params_free(&p);
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [%s], "
             "\"tool_choice\": \"required\", \"parallel_tool_calls\": false}", tool);
    CHECK(parse(REQ_CHAT, body, &p, &e) == 0 && p.tool_choice == TOOL_CHOICE_REQUIRED && p.parallel_calls == 0);
    req_params_free(&p);
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [%s], "
             "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"w\"}}}", tool);
    CHECK(parse(REQ_CHAT, body, &p, &e) == 0 && p.tool_choice == TOOL_CHOICE_NAMED && p.tool_name &&
          !strcmp(p.tool_name, "w"));
    req_params_free(&p);
    snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"tools\": [%s], "
             "\"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"v\"}}}", tool);
    bad(REQ_CHAT, body, "tool_choice"); /* not among the tools */
    static const char *chat_wrong[][2] = {
        {"\"tool_choice\": \"required\"", "tool_choice"}, {"\"tool_choice\": {\"type\": \"function\"}", "tool_choice"},
        {"\"tool_choice\": \"any\"", "tool_choice"},
        {"\"tools\": [], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}", "tool_choice"},
        {"\"tool_choice\": 1", "tool_choice"}, {"\"tools\": [{\"type\": \"function\"}]", "tools"},
        {"\"tools\": [{\"type\": \"retrieval\", \"function\": {\"name\": \"f\"}}]", "tools"},
        {"\"tools\": [{\"function\": {\"name\": \"\"}}]", "tools"}, {"\"tools\": \"f\"", "tools"},
        {"\"parallel_tool_calls\": 0", "parallel_tool_calls"},
    };
    for (size_t i = 0; i < sizeof chat_wrong / sizeof chat_wrong[0]; i++) {
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], %s}", chat_wrong[i][0]);
        bad(REQ_CHAT, body, chat_wrong[i][1]);
    }
    static const char *bad_msgs[] = {
        "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": {}}",
        "{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"arguments\": \"{}\"}}]}",
        "{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": 5}}]}",
        "{\"role\": \"assistant\", \"tool_calls\": [{\"id\": 3, \"function\": {\"name\": \"f\"}}]}",
        "{\"role\": \"tool\", \"content\": \"x\", \"tool_call_id\": 5}",
        "{\"role\": \"assistant\", \"content\": \"x\", \"reasoning_content\": [1]}",
    };
    for (size_t i = 0; i < sizeof bad_msgs / sizeof bad_msgs[0]; i++) {
        snprintf(body, sizeof body, "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}, %s]}", bad_msgs[i]);
        bad(REQ_CHAT, body, "messages");
    }
    /* more than REQ_MAX_LOGIT_BIAS entries */
    char *big = malloc(32 * (REQ_MAX_LOGIT_BIAS + 2) + 64);
    size_t n = (size_t)sprintf(big, "{\"prompt\": \"x\", \"logit_bias\": {");
    for (int i = 0; i <= REQ_MAX_LOGIT_BIAS; i++) n += (size_t)sprintf(big + n, "%s\"%d\": 1", i ? ", " : "", i);
    strcpy(big + n, "}}");
    bad(REQ_COMPLETION, big, "logit_bias");
    free(big);
}

static void t_completion(void) {
    req_params p;
    req_error e;
    CHECK(parse(REQ_COMPLETION, "{\"prompt\": \"abc\", \"logprobs\": 0, \"ignore_eos\": true, "
                                "\"chat_template_kwargs\": 5}", &p, &e) == 0); /* a chat field: ignored here */
    CHECK(!p.template_kwargs);
    CHECK(p.prompt && !strcmp(p.prompt, "abc") && p.logprobs == 1 && p.top_logprobs == 0 && p.ignore_eos &&
          p.max_tokens == -1 && p.top_k == -1 && !p.has_seed && p.n_stop == 0 && !p.stream);
    req_params_free(&p);
    CHECK(parse(REQ_COMPLETION, "{\"prompt\": [1, 2, 3], \"stop\": \"x\"}", &p, &e) == 0);
    CHECK(!p.prompt && p.n_prompt_tokens == 3 && p.prompt_tokens[2] == 3 && p.n_stop == 1);
    req_params_free(&p);
    CHECK(parse(REQ_COMPLETION, "{\"prompt\": [\"one\"]}", &p, &e) == 0 && p.prompt && !strcmp(p.prompt, "one"));
    req_params_free(&p);
    CHECK(parse(REQ_COMPLETION, "{\"prompt\": [[5, 6]]}", &p, &e) == 0 && p.n_prompt_tokens == 2);
    req_params_free(&p);

    CHECK(parse(REQ_COMPLETION, "{\"prompt\": [\"a\", \"bc\"], \"n\": 2}", &p, &e) == 0 && p.n_prompts == 2 &&
          !strcmp(req_prompt_text(&p, 0), "a") && !strcmp(req_prompt_text(&p, 1), "bc"));
    req_params_free(&p);
    {
        int k0 = 0, k1 = 0;
        CHECK(parse(REQ_COMPLETION, "{\"prompt\": [[7], [8, 9]]}", &p, &e) == 0 && p.n_prompts == 2 &&
              req_prompt_ids(&p, 0, &k0)[0] == 7 && k0 == 1 && req_prompt_ids(&p, 1, &k1)[1] == 9 && k1 == 2);
        req_params_free(&p);
    }
    bad(REQ_COMPLETION, "{\"prompt\": [\"a\", [1]]}", "prompt");
    bad(REQ_COMPLETION, "{\"prompt\": [[1], []]}", "prompt");
    bad(REQ_COMPLETION, "{\"prompt\": []}", "prompt");
    bad(REQ_COMPLETION, "{\"prompt\": [1.5]}", "prompt");
    bad(REQ_COMPLETION, "{\"prompt\": [-1]}", "prompt");
    bad(REQ_COMPLETION, "{\"prompt\": {\"a\": 1}}", "prompt");
    bad(REQ_COMPLETION, "{\"prompt\": null}", "prompt");
    bad(REQ_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": true}", "logprobs");
    bad(REQ_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs");
    static const char *wrong[][2] = {
        {"\"max_tokens\": \"5\"", "max_tokens"}, {"\"max_tokens\": 2.5", "max_tokens"},
        {"\"max_tokens\": 0", "max_tokens"}, {"\"max_tokens\": 1e300", "max_tokens"},
        {"\"temperature\": \"hot\"", "temperature"}, {"\"temperature\": -1", "temperature"},
        {"\"top_p\": 0", "top_p"}, {"\"top_p\": 1.5", "top_p"}, {"\"top_k\": 1.5", "top_k"},
        {"\"top_k\": -2", "top_k"}, {"\"min_p\": 2", "min_p"}, {"\"seed\": \"1\"", "seed"},
        {"\"seed\": 0.5", "seed"}, {"\"stop\": 5", "stop"}, {"\"stop\": [\"a\", 1]", "stop"},
        {"\"stream\": 1", "stream"}, {"\"stream\": \"true\"", "stream"}, {"\"n\": 17", "n"}, {"\"n\": 0", "n"}, {"\"n\": \"1\"", "n"},
        {"\"presence_penalty\": 3", "presence_penalty"}, {"\"frequency_penalty\": [1]", "frequency_penalty"},
        {"\"repeat_penalty\": 0", "repeat_penalty"}, {"\"repetition_penalty\": -1", "repetition_penalty"},
        {"\"stream_options\": true", "stream_options"}, {"\"stream_options\": {\"include_usage\": 1}", "include_usage"},
        {"\"model\": 5", "model"}, {"\"ignore_eos\": \"no\"", "ignore_eos"},
        {"\"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\",\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]",
         "stop"},
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        char body[512];
        snprintf(body, sizeof body, "{\"prompt\": \"x\", %s}", wrong[i][0]);
        bad(REQ_COMPLETION, body, wrong[i][1]);
    }
    /* nulls are absent fields */
    CHECK(parse(REQ_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": null, \"stop\": null, \"n\": null, \"seed\": null}",
                &p, &e) == 0 && p.max_tokens == -1 && !p.has_seed);
    req_params_free(&p);
}

static void t_bytes(void) {
    bad(REQ_COMPLETION, "", NULL);
    bad(REQ_COMPLETION, "[1]", NULL);
    bad(REQ_COMPLETION, "{\"prompt\": \"x\"} {}", NULL);
    bad(REQ_COMPLETION, "{\"prompt\": \"x\",}", NULL);
    bad(REQ_COMPLETION, "{\"prompt\": \"a\\u0000b\"}", NULL);
    bad(REQ_COMPLETION, "{\"prompt\": \"\\ud800\"}", NULL);
    const char *utf8_bad[] = {"\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82", "\xff", "\x80"};
    for (size_t i = 0; i < sizeof utf8_bad / sizeof utf8_bad[0]; i++) {
        char body[64];
        snprintf(body, sizeof body, "{\"prompt\": \"a%sb\"}", utf8_bad[i]);
        bad(REQ_COMPLETION, body, NULL);
        CHECK(!req_utf8_valid(utf8_bad[i], strlen(utf8_bad[i])));
    }
    req_params p;
    req_error e;
    const char nul_raw[] = "{\"prompt\": \"a\0b\"}";
    CHECK(req_parse(REQ_COMPLETION, nul_raw, sizeof nul_raw - 1, &p, &e) == -1);
    /* an escaped backslash before u0000 is text, not a NUL */
    CHECK(parse(REQ_COMPLETION, "{\"prompt\": \"a\\\\u0000b\"}", &p, &e) == 0 && !strcmp(p.prompt, "a\\u0000b"));
    req_params_free(&p);
    CHECK(parse(REQ_COMPLETION, "{\"prompt\": \"\xf0\x9f\x98\x80 \\ud83d\\ude00\"}", &p, &e) == 0 &&
          !strcmp(p.prompt, "\xf0\x9f\x98\x80 \xf0\x9f\x98\x80"));
    req_params_free(&p);
    /* a body cut anywhere is an error, never a crash */
    const char *good = "{\"prompt\": \"hello \xc3\xa9\", \"max_tokens\": 5, \"stop\": [\"x\"]}";
    for (size_t n = 0; n < strlen(good); n++) CHECK(req_parse(REQ_COMPLETION, good, n, &p, &e) == -1);
    /* deep nesting */
    size_t depth = 5000;
    char *deep = malloc(2 * depth + 64);
    strcpy(deep, "{\"prompt\": \"x\", \"junk\": ");
    size_t k = strlen(deep);
    for (size_t i = 0; i < depth; i++) deep[k++] = '[';
    for (size_t i = 0; i < depth; i++) deep[k++] = ']';
    deep[k++] = '}';
    deep[k] = 0;
    CHECK(req_parse(REQ_COMPLETION, deep, k, &p, &e) == -1);
    free(deep);
}

/* Random byte edits of good bodies: each parses or fails with a message. */
static void t_mutations(void) {
    const char *seeds[] = {
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"max_tokens\": 4, \"stop\": [\"a\"], "
        "\"logprobs\": true, \"top_logprobs\": 2, \"stream\": true}",
        "{\"prompt\": [1, 2, 3], \"temperature\": 0.5, \"seed\": 7, \"stream_options\": {\"include_usage\": true}}",
    };
    const char alphabet[] = "{}[]\",:0123456789.eE-+ \\u\x80\xc3\xa9nulltruefalse";
    int ok = 0, err = 0;
    for (int it = 0; it < 20000; it++) {
        const char *s = seeds[it % 2];
        size_t n = strlen(s);
        char buf[512];
        memcpy(buf, s, n);
        int edits = 1 + (int)(t_rand_unit() * 4);
        for (int j = 0; j < edits; j++) {
            size_t at = (size_t)(t_rand_unit() * n);
            double r = t_rand_unit();
            if (r < 0.4) buf[at] = alphabet[(size_t)(t_rand_unit() * (sizeof alphabet - 1))];
            else if (r < 0.7 && n > 1) memmove(buf + at, buf + at + 1, n - at - 1), n--;
            else if (n < sizeof buf - 1) {
                memmove(buf + at + 1, buf + at, n - at);
                buf[at] = alphabet[(size_t)(t_rand_unit() * (sizeof alphabet - 1))];
                n++;
            }
        }
        req_params p;
        req_error e;
        if (req_parse(it % 2 ? REQ_COMPLETION : REQ_CHAT, buf, n, &p, &e) == 0) {
            ok++;
            req_params_free(&p);
        } else {
            err++;
            if (!e.message[0] || e.status != 400) {
                CHECKF(0, "mutation %d: error without a message", it);
                break;
            }
        }
    }
    printf("  20000 mutated bodies: %d parsed, %d refused with a message\n", ok, err);
    CHECK(ok > 0 && err > 0);
}

int main(void) {
    t_seed();
    t_chat();
    t_completion();
    t_unsupported();
    t_bytes();
    t_mutations();
    return t_done("serve request parser");
}
