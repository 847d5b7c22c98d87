/* Chat templates against transformers' apply_chat_template (golden strings in
 * tests/fixtures/chat/golden.json from tools/reference/chat_reference.py):
 * through each model's own Jinja template, through the built-in template
 * that suits it, and through Jinja source given by the caller; with template
 * variables, and with tools and tool calls in OpenAI's message form (Qwen3's
 * template, Llama 3.1's as source); template detection, and errors (one line
 * naming the template line). */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doppler.h"
#include "testlib.h"

typedef struct {
    const char *name;
    const char *path;
    dp_model *m;
} model_slot;

int main(void) {
    size_t n;
    char *s = t_read_file(t_src_path("tests/fixtures/chat/golden.json"), &n);
    CHECK(s != NULL);
    if (!s) return t_done("test_chat_templates");
    cJSON *j = cJSON_ParseWithLength(s, n);
    free(s);
    char *gemma_src = t_read_file(t_src_path("tests/fixtures/jinja/templates/google-gemma-3-it.jinja"), &n);
    CHECK(gemma_src != NULL);
    /* Llama 3.1's template (tools in its JSON format), given as source on the Llama 3 vocabulary */
    char *llama31_src = t_read_file(t_src_path("tests/fixtures/jinja/templates/meta-llama-Llama-3.1-8B-Instruct.jinja"), &n);
    CHECK(llama31_src != NULL);
    model_slot models[] = {
        {"gemma-3-270m-q4_k_m.gguf", t_model_path("gemma-3-270m-q4_k_m.gguf"), NULL},
        {"SmolLM2-135M-Instruct.Q4_1.gguf", t_model_path("SmolLM2-135M-Instruct.Q4_1.gguf"), NULL},
        {"qwen2-tokenizer-tiny.gguf", t_shared_fixture("qwen2-tokenizer-tiny.gguf"), NULL},
        {"llama3-tokenizer-tiny.gguf", t_shared_fixture("llama3-tokenizer-tiny.gguf"), NULL},
    };
    const char *detect_want[] = {"gemma", "chatml", "chatml", "llama3"};
    for (int i = 0; i < 4; i++) {
        if (!models[i].path) {
            fprintf(stderr, "%s: not present, its model-specific checks are skipped\n", models[i].name);
            continue;
        }
        models[i].m = dp_model_load(models[i].path);
        CHECKF(models[i].m != NULL, "%s", dp_last_error());
        if (models[i].m) {
            const char *d = dp_chat_template_detect(models[i].m);
            CHECKF(d && !strcmp(d, detect_want[i]), "%s: detected %s", models[i].name, d ? d : "(none)");
        }
    }
    int n_cases = 0, n_ok = 0, n_model = 0, n_kw = 0, n_tools = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
        const char *tmpl = cJSON_GetObjectItem(c, "template")->valuestring;
        const char *model = cJSON_GetObjectItem(c, "model")->valuestring;
        const cJSON *rj = cJSON_GetObjectItem(c, "rendered");
        const char *want = cJSON_IsString(rj) ? rj->valuestring : NULL;
        int gen = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
        const cJSON *ms = cJSON_GetObjectItem(c, "messages");
        /* template variables (apply_chat_template's keyword arguments), as JSON text */
        char *kw = cJSON_GetObjectItem(c, "kwargs") ? cJSON_PrintUnformatted(cJSON_GetObjectItem(c, "kwargs")) : NULL;
        int nm = cJSON_GetArraySize(ms);
        dp_chat_msg msgs[16];
        CHECK(nm <= 16);
        for (int i = 0; i < nm && i < 16; i++) {
            const cJSON *m = cJSON_GetArrayItem(ms, i);
            msgs[i].role = cJSON_GetObjectItem(m, "role")->valuestring;
            msgs[i].content = cJSON_GetObjectItem(m, "content")->valuestring;
        }
        n_cases++;
        int ok = 1;
        /* tools or tool calls: OpenAI's message form through dp_chat_apply_json (Jinja only), the calls'
         * arguments as the golden's objects and as the JSON strings OpenAI clients send */
        const cJSON *tools = cJSON_GetObjectItem(c, "tools");
        int has_calls = 0;
        for (int i = 0; i < nm; i++) {
            const cJSON *m = cJSON_GetArrayItem(ms, i);
            has_calls |= cJSON_GetObjectItem(m, "tool_calls") != NULL || !strcmp(msgs[i].role, "tool");
        }
        if (tools || has_calls) {
            for (int i = 0; i < 4; i++) {
                if (strcmp(models[i].name, model) || !models[i].m) continue;
                cJSON *as_strings = cJSON_Duplicate(ms, 1);
                cJSON *m;
                cJSON_ArrayForEach(m, as_strings) {
                    cJSON *call;
                    cJSON_ArrayForEach(call, cJSON_GetObjectItem(m, "tool_calls")) {
                        cJSON *fn = cJSON_GetObjectItem(call, "function");
                        char *a = cJSON_PrintUnformatted(cJSON_GetObjectItem(fn, "arguments"));
                        cJSON_ReplaceItemInObject(fn, "arguments", cJSON_CreateString(a));
                        cJSON_free(a);
                    }
                }
                char *mj[2] = {cJSON_PrintUnformatted(ms), cJSON_PrintUnformatted(as_strings)};
                char *tj = tools ? cJSON_PrintUnformatted(tools) : NULL;
                for (int k = 0; k < 2; k++) {
                    char *got = dp_chat_apply_json(models[i].m, !strcmp(tmpl, "llama31") ? llama31_src : NULL, mj[k],
                                                   tj, gen, kw);
                    const int good = want ? got && !strcmp(got, want) : got == NULL;
                    CHECKF(good, "%s (%s, tools, arguments as %s): got\n%s\nwant\n%s", tmpl, model,
                           k ? "strings" : "objects", got ? got : dp_last_error(), want ? want : "(null)");
                    ok &= good;
                    n_tools++;
                    free(got);
                }
                /* the built-in templates have no tools */
                char *got = dp_chat_apply_json(models[i].m, detect_want[i], mj[0], tj, gen, NULL);
                CHECKF(!got && strstr(dp_last_error(), "need a Jinja chat template"), "%s", got ? got : dp_last_error());
                free(got);
                cJSON_free(mj[0]);
                cJSON_free(mj[1]);
                cJSON_free(tj);
                cJSON_Delete(as_strings);
            }
            n_ok += ok;
            cJSON_free(kw);
            continue;
        }
        /* the generic renderer where it is model-independent */
        if (!kw && (!strcmp(tmpl, "gemma") || !strcmp(tmpl, "llama3"))) {
            char *got = dp_chat_render(tmpl, msgs, nm, gen);
            ok &= want ? got && !strcmp(got, want) : got == NULL;
            CHECKF(want ? got && !strcmp(got, want) : got == NULL, "%s (generic): got\n%s\nwant\n%s", tmpl,
                   got ? got : "(null)", want ? want : "(null)");
            free(got);
        }
        for (int i = 0; i < 4; i++) {
            if (strcmp(models[i].name, model) || !models[i].m) continue;
            /* the model's own template (Jinja), the built-in one, and for Gemma 3 270M
             * (no template in the file) its published Jinja template given as source */
            const char *how[3] = {NULL, detect_want[i], i == 0 ? gemma_src : NULL};
            for (int k = 0; k < 3; k++) {
                if (k == 2 && !how[k]) continue;
                char *got = kw ? dp_chat_apply_vars(models[i].m, how[k], msgs, nm, gen, kw)
                               : dp_chat_apply(models[i].m, how[k], msgs, nm, gen);
                int good = want ? got && !strcmp(got, want) : got == NULL;
                CHECKF(good, "%s (%s, %s): got\n%s\nwant\n%s", tmpl, model, k == 0 ? "own" : k == 1 ? "built-in" : "source",
                       got ? got : dp_last_error(), want ? want : "(null)");
                ok &= good;
                n_model++;
                free(got);
            }
        }
        n_ok += ok;
        n_kw += kw != NULL;
        cJSON_free(kw);
    }
    fprintf(stderr, "%d/%d golden prompts match (%d renderings through a model: own, built-in, source)\n", n_ok, n_cases, n_model);
    CHECK(n_cases >= 30);
    CHECKF(n_kw >= 20, "%d cases with template variables", n_kw);
    CHECKF(n_tools >= 10 || !models[2].m, "%d renderings with tools", n_tools);

    /* errors: unknown template names, gemma's role alternation */
    dp_chat_msg bad[2] = {{"user", "a"}, {"user", "b"}};
    char *r = dp_chat_render("vicuna", bad, 1, 1);
    CHECK(r == NULL && strstr(dp_last_error(), "vicuna"));
    r = dp_chat_render("gemma", bad, 2, 1);
    CHECK(r == NULL && strstr(dp_last_error(), "alternate"));
    r = dp_chat_render("chatml", bad, 2, 1); /* chatml has no such rule */
    CHECK(r && !strcmp(r, "<|im_start|>user\na<|im_end|>\n<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n"));
    free(r);
    if (models[0].m) {
        r = dp_chat_apply(models[0].m, "llama3", bad, 1, 1); /* explicit override */
        CHECK(r && !strncmp(r, "<bos><|start_header_id|>user", 28));
        free(r);
        CHECK(dp_chat_template(models[0].m) == NULL); /* the 270M file has none */
        if (gemma_src) { /* raise_exception names the template's line */
            r = dp_chat_apply(models[0].m, gemma_src, bad, 2, 1);
            CHECKF(!r && !strncmp(dp_last_error(), "chat template line ", 19) &&
                       strstr(dp_last_error(), "Conversation roles must alternate") && !strchr(dp_last_error(), '\n'),
                   "%s", dp_last_error());
            free(r);
        }
        /* syntax errors and unsupported tags: one line naming the line */
        static const char *const broken[][2] = {
            {"{% for m in messages %}\n{{ m.content }}\n{% endif %}", "chat template line 3: syntax error"},
            {"a\n\n{% include 'other.jinja' %}", "chat template line 3: syntax error: unknown or unsupported tag 'include'"},
            {"{{ messages[0].content.nosuch() }}", "chat template line 1: "},
            {"{{ messages | nosuchfilter }}", "chat template line 1: syntax error: no filter named 'nosuchfilter'"},
        };
        for (size_t k = 0; k < sizeof broken / sizeof broken[0]; k++) {
            r = dp_chat_apply(models[0].m, broken[k][0], bad, 1, 1);
            CHECKF(!r && strstr(dp_last_error(), broken[k][1]), "%s: %s", broken[k][0], dp_last_error());
            free(r);
        }
    }
    if (models[1].m) { /* SmolLM2 carries its template; Jinja sees the vocabulary's BOS and EOS */
        CHECK(dp_chat_template(models[1].m) && strstr(dp_chat_template(models[1].m), "<|im_start|>"));
        r = dp_chat_apply(models[1].m, "{{ bos_token }}|{{ eos_token }}|{{ tools }}|{{ add_generation_prompt }}", bad, 1, 0);
        CHECKF(r && !strcmp(r, "<|im_start|>|<|im_end|>|None|False"), "%s", r ? r : dp_last_error());
        free(r);
        /* the caller's variables: bos_token replaced, new ones added, the last of a repeated name wins
         * (json.loads); not an object, or a variable doppler sets: one-line errors */
        const char *show = "{{ bos_token }}|{{ eos_token }}|{{ x }}|{{ enable_thinking }}";
        r = dp_chat_apply_vars(models[1].m, show, bad, 1, 0,
                               "{\"bos_token\": \"B\", \"x\": 1, \"enable_thinking\": false, \"x\": [1, {\"k\": null}]}");
        CHECKF(r && !strcmp(r, "B|<|im_end|>|[1, {'k': None}]|False"), "%s", r ? r : dp_last_error());
        free(r);
        r = dp_chat_apply_vars(models[1].m, show, bad, 1, 0, NULL);
        CHECKF(r && !strcmp(r, "<|im_start|>|<|im_end|>||"), "%s", r ? r : dp_last_error());
        free(r);
        static const char *const bad_vars[][2] = {
            {"[1]", "must be a JSON object"}, {"{\"a\": 1", "must be a JSON object"}, {"", "must be a JSON object"},
            {"{\"messages\": []}", "'messages' is set by doppler"},
            {"{\"add_generation_prompt\": true}", "'add_generation_prompt' is set by doppler"},
            {"{\"tools\": []}", "'tools' is set by doppler"}};
        for (size_t k = 0; k < sizeof bad_vars / sizeof bad_vars[0]; k++) {
            r = dp_chat_apply_vars(models[1].m, NULL, bad, 1, 1, bad_vars[k][0]);
            CHECKF(!r && strstr(dp_last_error(), bad_vars[k][1]) && !strchr(dp_last_error(), '\n'), "%s: %s",
                   bad_vars[k][0], r ? r : dp_last_error());
            free(r);
        }
    }
    /* Jinja source without a model: bos_token and eos_token are undefined */
    r = dp_chat_render("{{ bos_token }}{% for m in messages %}[{{ m.role }}:{{ m.content|upper }}]{% endfor %}", bad, 2, 1);
    CHECKF(r && !strcmp(r, "[user:A][user:B]"), "%s", r ? r : dp_last_error());
    free(r);
    r = dp_chat_render("{{ '\\x00' }}", bad, 1, 1);
    CHECK(!r && strstr(dp_last_error(), "NUL"));
    free(gemma_src);
    free(llama31_src);
    for (int i = 0; i < 4; i++) dp_model_free(models[i].m);
    cJSON_Delete(j);
    return t_done("test_chat_templates");
}
