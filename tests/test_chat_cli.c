/* doppler chat from a pipe: two turns, the second prefilling only the new
 * turn (the stats line shows the cache reused), /reset starting over,
 * --json-schema on every answer, and doppler run --chat. Runs SmolLM2 on
 * the CPU with a few tokens per reply. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "testlib.h"

static int turn_stats(const char *err, int turn, int *pre, int *from, int *to, int *reused) {
    char pat[64];
    snprintf(pat, sizeof pat, "[Stats] turn %d: prefilled ", turn);
    const char *p = strstr(err, pat);
    if (!p) return 0;
    return sscanf(p + strlen(pat), "%d tokens (cache %d -> %d, %d reused)", pre, from, to, reused) == 4;
}

int main(void) {
    const char *model = t_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!model) t_skip("SmolLM2-135M-Instruct.Q4_1.gguf not in the model cache");
    const char *in = t_tmp_path(".txt");
    const char *msgs = "What is the capital of France?\nAnd of Italy?\n/reset\nHi\n";
    t_write_file(in, msgs, strlen(msgs));
    char args[1200], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "chat -m '%s' --temp 0 -n 6 --ctx 256 < '%s'", model, in);
    int rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0, "exit %d: %s", rc, err);
    fprintf(stderr, "%s", err);
    int pre1, f1, t1, r1, pre2, f2, t2, r2, pre3, f3, t3, r3;
    CHECK(turn_stats(err, 1, &pre1, &f1, &t1, &r1));
    CHECK(turn_stats(err, 2, &pre2, &f2, &t2, &r2));
    CHECK(turn_stats(err, 3, &pre3, &f3, &t3, &r3));
    /* turn 1 prefills the whole prompt; turn 2 keeps every cached token and
     * prefills only its own turn */
    CHECK(f1 == 0 && r1 == 0 && pre1 == t1 && pre1 > 20);
    CHECK(f2 > t1 && r2 == f2 && pre2 == t2 - f2 && pre2 < 25 && pre2 > 5);
    /* after /reset nothing is reused */
    CHECK(f3 == 0 && r3 == 0 && pre3 == t3);
    int lines = 0;
    for (const char *p = out; p && *p; p++) lines += *p == '\n';
    CHECKF(lines == 3, "one reply line per user message, got %d lines:\n%s", lines, out);
    CHECK(strstr(out, "Paris") != NULL);
    free(out);
    free(err);

    /* --json-schema: each answer is one value the schema accepts, whitespace around it */
    const char *two_people = "Describe a person named Ann, aged 31.\nNow a person named Bob.\n";
    t_write_file(in, two_people, strlen(two_people));
    const char *schema = "'{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                         "\"age\":{\"type\":\"integer\"}},\"required\":[\"name\",\"age\"]}'";
    for (int sampled = 0; sampled < 2; sampled++) {
        snprintf(args, sizeof args, "chat -m '%s' %s -n 100 --ctx 512 --json-schema %s --log-tags Stats < '%s'",
                 model, sampled ? "--temp 1.0 --seed 4" : "--temp 0", schema, in);
        rc = t_run_doppler(args, &out, &err);
        CHECKF(rc == 0, "exit %d: %s", rc, err);
        const char *p = out ? out : "";
        for (int k = 0; k < 2; k++) {
            const char *end = NULL;
            cJSON *j = cJSON_ParseWithOpts(p, &end, 0);
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
            const cJSON *age = cJSON_GetObjectItemCaseSensitive(j, "age");
            CHECKF(cJSON_IsObject(j) && cJSON_IsString(name) && cJSON_IsNumber(age) &&
                   (age->valuedouble >= 9e15 || age->valuedouble == (double)(long long)age->valuedouble),
                   "sampled %d, answer %d: %s", sampled, k + 1, p);
            p = end ? end : "";
            cJSON_Delete(j);
        }
        for (; *p; p++) CHECKF(*p == ' ' || *p == '\n', "after the answers: %s", p);
        CHECKF(err && strstr(err, "turn 2:") && strstr(strstr(err, "turn 2:"), "stop: end of value"), "%s", err);
        free(out);
        free(err);
    }
    remove(in);

    /* run --chat: the template wraps the prompt and generation stops at <|im_end|> */
    snprintf(args, sizeof args, "run -m '%s' --chat -p 'What is the capital of France?' --temp 0 -n 24 --ctx 256 "
             "--log-tags Pipeline,Stats", model);
    rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0, "exit %d: %s", rc, err);
    CHECKF(strstr(err, "prompt 37 tokens") && strstr(err, "stop: end of generation") && strstr(out, "Paris") &&
           !strstr(out, "<|im_start|>"), "stdout %s\nstderr %s", out, err);
    free(out);
    free(err);

    /* -sp prints special tokens: past the end of the turn with --ignore-eos */
    for (int sp = 0; sp < 2; sp++) {
        snprintf(args, sizeof args, "run -m '%s' --chat -p 'Hi' --temp 0 -n 40 --ignore-eos --ctx 256 %s", model,
                 sp ? "-sp" : "");
        rc = t_run_doppler(args, &out, &err);
        CHECKF(rc == 0 && (strstr(out, "<|im_end|>") != NULL) == sp, "-sp %d: %s", sp, out);
        free(out);
        free(err);
    }
    /* --chat-template FILE: the file's Jinja renders the prompt; --print-prompt shows it */
    const char *tf = t_tmp_path(".jinja");
    const char *jinja = "{% for m in messages %}{{ '<|im_start|>' + m['role'] | upper + '\\n' + m['content'] + "
                        "'<|im_end|>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
                        "{% endif %}";
    t_write_file(tf, jinja, strlen(jinja));
    snprintf(args, sizeof args, "run -m '%s' --chat --chat-template %s -sys 'Be brief.' -p 'Hi' --temp 0 -n 4 "
             "--ctx 256 --print-prompt", model, tf);
    rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0 && strstr(err, "<|im_start|>SYSTEM\nBe brief.<|im_end|>\n<|im_start|>USER\nHi<|im_end|>\n"
                                  "<|im_start|>assistant\n"), "%s", err);
    free(out);
    free(err);
    /* --chat-template-kwargs: the template's own variables, in run and in chat (SmolLM3's template reads
     * enable_thinking; a prompt-less chat from /dev/null still renders its first turn for --print-prompt) */
    const char *think = "{{ 'mode=' ~ ('think' if enable_thinking is not defined or enable_thinking else 'no_think') "
                        "~ ' ' ~ extra|default('-') }}{% for m in messages %}{{ '|' + m['content'] }}{% endfor %}";
    t_write_file(tf, think, strlen(think));
    snprintf(args, sizeof args, "run -m '%s' --chat --chat-template %s -p 'Hi' --temp 0 -n 1 --ctx 256 "
             "--print-prompt --chat-template-kwargs '{\"enable_thinking\": false, \"extra\": [1, \"\\u00e9\"]}'", model, tf);
    rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0 && strstr(err, "mode=no_think [1, '\xc3\xa9']|Hi"), "exit %d: %s", rc, err);
    free(out);
    free(err);
    const char *two = "Hello\nAgain\n";
    t_write_file(in, two, strlen(two));
    snprintf(args, sizeof args, "chat -m '%s' --chat-template %s --temp 0 -n 1 --ctx 256 --print-prompt "
             "--chat-template-kwargs '{\"enable_thinking\": true}' < '%s'", model, tf, in);
    rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0 && strstr(err, "mode=think -|Hello") && strstr(err, "mode=think -|Hello|"), "exit %d: %s", rc, err);
    free(out);
    free(err);
    /* a template's raise_exception is a one-line error naming the line, exit 2 */
    const char *bad = "{% if messages[0]['role'] == 'system' %}\n{{ raise_exception('no system role here') }}\n"
                      "{% endif %}";
    t_write_file(tf, bad, strlen(bad));
    snprintf(args, sizeof args, "chat -m '%s' --chat-template %s -sys 'Be brief.' --ctx 256 < /dev/null", model, tf);
    rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 2 && strstr(err, "no system role here") && strstr(err, "line 2"), "exit %d: %s", rc, err);
    free(out);
    free(err);
    remove(tf);
    return t_done("test_chat_cli");
}
