/* Chat templates against transformers' apply_chat_template (golden strings in
 * tests/fixtures/chat/golden.json from tools/reference/chat_reference.py),
 * template detection, and errors. */
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
    int n_cases = 0, n_ok = 0, n_model = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "cases")) {
        const char *tmpl = cJSON_GetObjectItem(c, "template")->valuestring;
        const char *model = cJSON_GetObjectItem(c, "model")->valuestring;
        const cJSON *rj = cJSON_GetObjectItem(c, "rendered");
        const char *want = cJSON_IsString(rj) ? rj->valuestring : NULL;
        int gen = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt"));
        const cJSON *ms = cJSON_GetObjectItem(c, "messages");
        int nm = cJSON_GetArraySize(ms);
        dp_chat_msg msgs[16];
        for (int i = 0; i < nm && i < 16; i++) {
            const cJSON *m = cJSON_GetArrayItem(ms, i);
            msgs[i].role = cJSON_GetObjectItem(m, "role")->valuestring;
            msgs[i].content = cJSON_GetObjectItem(m, "content")->valuestring;
        }
        n_cases++;
        int ok = 1;
        /* the generic renderer where it is model-independent */
        if (!strcmp(tmpl, "gemma") || !strcmp(tmpl, "llama3")) {
            char *got = dp_chat_render(tmpl, msgs, nm, gen);
            ok &= want ? got && !strcmp(got, want) : got == NULL;
            CHECKF(want ? got && !strcmp(got, want) : got == NULL, "%s (generic): got\n%s\nwant\n%s", tmpl,
                   got ? got : "(null)", want ? want : "(null)");
            free(got);
        }
        for (int i = 0; i < 4; i++) {
            if (strcmp(models[i].name, model) || !models[i].m) continue;
            char *got = dp_chat_apply(models[i].m, NULL, msgs, nm, gen);
            int good = want ? got && !strcmp(got, want) : got == NULL;
            CHECKF(good, "%s (%s): got\n%s\nwant\n%s", tmpl, model, got ? got : dp_last_error(), want ? want : "(null)");
            ok &= good;
            n_model++;
            free(got);
        }
        n_ok += ok;
    }
    fprintf(stderr, "%d/%d golden prompts match (%d checked through a model's own template)\n", n_ok, n_cases, n_model);
    CHECK(n_cases >= 30);

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
    }
    for (int i = 0; i < 4; i++) dp_model_free(models[i].m);
    cJSON_Delete(j);
    return t_done("test_chat_templates");
}
