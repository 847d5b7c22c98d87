/* libFuzzer target: doppler serve's request parsers (tools/serve/request.c
 * and the Responses API's translation, responses.c, compiled in; they need
 * cJSON, and the library for response_format's schema check). The first
 * byte picks the endpoint (bit 1: /v1/responses, else bit 0: completions
 * or chat), the rest is the body. Every input must end in a request whose
 * fields keep the parser's promises, or in a 400 with a message: no crash,
 * leak or hang.
 *
 * Built by the fuzz build (-DDOPPLER_FUZZ=ON) or by hand:
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Itools tests/fuzz/fuzz_request.c -lcjson -lm
 * run as
 *   fuzz_request -dict=tests/fuzz/request.dict tests/fuzz/corpus/request */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "serve/request.c"
#include "serve/responses.c"

static void expect(int cond) {
    if (!cond) abort();
}

static void check_str(const char *s) {
    expect(s != NULL);
    expect(req_utf8_valid(s, strlen(s)));
}

/* NULL, or the text of a JSON value of this type (< 0: any), valid UTF-8 */
static void check_json(const char *s, int type) {
    if (!s) return;
    check_str(s);
    cJSON *j = cJSON_Parse(s);
    expect(j && (type < 0 || (j->type & 0xFF) == type)); /* type < 0: any JSON value */
    cJSON_Delete(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size == 0) return 0;
    const int responses = (data[0] & 2) != 0;
    req_kind kind = !responses && data[0] & 1 ? REQ_COMPLETION : REQ_CHAT;
    /* the body on the heap at its exact size: reads past it are caught */
    size_t n = size - 1;
    char *body = malloc(n ? n : 1);
    memcpy(body, data + 1, n);
    req_params p;
    req_error e;
    if ((responses ? resp_parse(body, n, &p, &e) : req_parse(kind, body, n, &p, &e)) == 0) {
        expect(p.kind == kind && p.responses == responses);
        /* a Responses request: one answer, and the members its response repeats */
        if (responses) {
            expect(p.n == 1 && p.echo != NULL);
            size_t k = strlen(p.echo);
            char *obj = malloc(k + 3);
            obj[0] = '{';
            memcpy(obj + 1, p.echo, k);
            memcpy(obj + 1 + k, "}", 2);
            check_json(obj, cJSON_Object);
            free(obj);
        } else {
            expect(p.echo == NULL);
        }
        if (kind == REQ_CHAT) {
            expect(p.n_msgs > 0);
            for (int i = 0; i < p.n_msgs; i++) {
                check_str(p.msgs[i].role);
                check_str(p.msgs[i].content);
                expect(!strcmp(p.msgs[i].role, "system") || !strcmp(p.msgs[i].role, "user") ||
                       !strcmp(p.msgs[i].role, "assistant") || !strcmp(p.msgs[i].role, "tool"));
            }
            /* the JSON handed on to the chat template: what it promises */
            check_json(p.template_kwargs, cJSON_Object);
            check_json(p.tools_json, cJSON_Array);
            check_json(p.messages_json, cJSON_Array);
            expect(!p.tools_json || p.messages_json);
            expect(p.reasoning_format >= -1 && p.reasoning_format <= 1);
        } else {
            expect((p.prompt != NULL) != (p.prompt_tokens != NULL));
            if (p.prompt) check_str(p.prompt);
            for (int i = 0; i < p.n_prompt_tokens; i++) expect(p.prompt_tokens[i] >= 0);
            /* several prompts: all texts or all non-empty id lists, prompts times n within the cap */
            expect(p.n_prompts >= 1 && p.n_prompts * p.n <= REQ_MAX_CHOICES);
            for (int i = 0; i < p.n_prompts; i++) {
                int k = 0;
                const char *t = req_prompt_text(&p, i);
                const int32_t *ids = req_prompt_ids(&p, i, &k);
                expect((t != NULL) == (p.prompt != NULL) && (ids != NULL) == (p.prompt_tokens != NULL));
                if (t) check_str(t);
                if (ids) {
                    expect(k > 0);
                    for (int j = 0; j < k; j++) expect(ids[j] >= 0);
                }
            }
        }
        expect(p.n_logit_bias >= 0 && p.n_logit_bias <= REQ_MAX_LOGIT_BIAS);
        for (int i = 0; i < p.n_logit_bias; i++)
            expect(p.bias_tok[i] >= 0 && p.bias_val[i] >= -100 && p.bias_val[i] <= 100);
        /* response_format: a schema the constraint takes (NULL: any object), never beside tools */
        expect(p.json == 0 || p.json == 1);
        expect(!p.json_schema || p.json);
        check_json(p.json_schema, -1);
        if (p.json_schema) expect(dp_json_schema_check(p.json_schema, strlen(p.json_schema)) == DP_OK);
        expect(!p.json || !p.tools_json);
        /* tool_choice asking for a call comes with tools; a named one names one of them */
        expect(p.tool_choice >= TOOL_CHOICE_AUTO && p.tool_choice <= TOOL_CHOICE_NAMED);
        expect((p.tool_choice == TOOL_CHOICE_NAMED) == (p.tool_name != NULL));
        if (p.tool_name) check_str(p.tool_name);
        expect(!p.tool_choice || p.tools_json || kind == REQ_COMPLETION);
        expect(p.max_tokens == -1 || p.max_tokens >= 1);
        expect(p.n_stop >= 0 && p.n_stop <= REQ_MAX_STOP);
        for (int i = 0; i < p.n_stop; i++) {
            check_str(p.stop[i]);
            expect(p.stop[i][0] && strlen(p.stop[i]) <= REQ_MAX_STOP_LEN);
        }
        expect(p.top_logprobs >= 0 && p.top_logprobs <= REQ_MAX_TOP_LOGPROBS);
        expect(!p.top_logprobs || p.logprobs);
        expect(p.top_k >= -1);
        expect(isnan(p.top_p) || (p.top_p > 0 && p.top_p <= 1));
        expect(isnan(p.temperature) || p.temperature >= 0);
        if (p.model) check_str(p.model);
        req_params_free(&p);
    } else {
        expect(e.status == 400 && e.message[0]); /* a refusal says why */
    }
    free(body);
    return 0;
}
