/* The CLI: bad flags and prompts give one-line errors with exit code 2;
 * the default model runs within its memory budget; run --json-schema
 * writes a value the schema accepts. */
#include <string.h>

#include <cjson/cJSON.h>

#include "testlib.h"
#include "testmodel.h"

static void expect(const char *args, int code, const char *needle) {
    char *out = NULL, *err = NULL;
    int rc = t_run_doppler(args, &out, &err);
    int lines = 0;
    for (const char *p = err; p && *p; p++) lines += *p == '\n';
    CHECKF(rc == code, "'%s': exit %d, want %d; stderr: %s", args, rc, code, err);
    if (code == 2) CHECKF(lines == 1, "'%s': %d stderr lines: %s", args, lines, err);
    CHECKF(err && strstr(err, needle), "'%s': stderr lacks '%s': %s", args, needle, err);
    free(out);
    free(err);
}


#define PERSON "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":" \
               "\"integer\"}},\"required\":[\"name\",\"age\"]}"

/* Whether text[0 .. n) is, apart from whitespace around it, one object with
 * a string name and an integer age (PERSON). */
static int is_person(const char *text, size_t n) {
    char *s = strndup(text, n);
    const char *p = s, *end = NULL;
    while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
    cJSON *j = cJSON_ParseWithOpts(p, &end, 0);
    int ok = cJSON_IsObject(j);
    for (; ok && *end; end++) ok = *end == ' ' || *end == '\n' || *end == '\t' || *end == '\r';
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name"), *age = cJSON_GetObjectItemCaseSensitive(j, "age");
    ok = ok && cJSON_IsString(name) && cJSON_IsNumber(age);
    /* an integer: beyond 2^53 every double is one */
    double v = ok ? age->valuedouble : 0;
    ok = ok && (v >= 9e15 || v <= -9e15 || v == (double)(long long)v);
    cJSON_Delete(j);
    free(s);
    return ok;
}

/* run --json-schema on Gemma 3 270M (a base model: the constraint alone
 * makes the text JSON): greedy and sampled, from a file, cut short, and
 * several prompts at once. */
static void json_schema_run(const char *gemma) {
    char a[2048], q[512], *out = NULL, *err = NULL, *out2 = NULL;
    t_shell_quote(q, sizeof q, PERSON);
    const char *base = "run -m '%s' -p 'Here is a person as JSON:' --ctx 512 -n 200 --json-schema %s %s";
    const char *modes[] = {"--temp 0", "--temp 1.0 --seed 1", "--temp 1.0 --seed 2", "--temp 1.0 --seed 3"};
    for (int k = 0; k < 4; k++) {
        snprintf(a, sizeof a, base, gemma, q, modes[k]);
        int rc = t_run_doppler(a, &out, &err);
        CHECKF(rc == 0 && out && is_person(out, strlen(out)) && strstr(err, "stop: end of value"),
               "%s: exit %d, stdout: %s\nstderr: %s", modes[k], rc, out, err);
        free(out);
        free(err);
    }
    /* the same schema from a file gives the same text */
    const char *sf = t_tmp_path(".json");
    t_write_file(sf, PERSON, strlen(PERSON));
    for (int k = 0; k < 2; k++) {
        const char *mode = k ? "--temp 0.8 --seed 7" : "--temp 0 --seed 7";
        snprintf(a, sizeof a, base, gemma, q, mode);
        CHECK(t_run_doppler(a, &out, NULL) == 0);
        snprintf(a, sizeof a, "run -m '%s' -p 'Here is a person as JSON:' --ctx 512 -n 200 --json-schema-file %s %s",
                 gemma, sf, mode);
        CHECK(t_run_doppler(a, &out2, NULL) == 0);
        CHECKF(out && out2 && !strcmp(out, out2) && is_person(out, strlen(out)), "%s: inline %s, file %s", mode, out,
               out2);
        free(out);
        free(out2);
    }
    remove(sf);
    /* cut short by -n: unfinished text, a normal exit */
    snprintf(a, sizeof a, "run -m '%s' -p 'Here is a person as JSON:' -n 4 --temp 0 --json-schema %s", gemma, q);
    int rc = t_run_doppler(a, &out, &err);
    CHECKF(rc == 0 && out && !is_person(out, strlen(out)) && strstr(err, "stop: length"), "exit %d: %s %s", rc, out,
           err);
    free(out);
    free(err);
    /* '{}': any value */
    snprintf(a, sizeof a, "run -m '%s' -p 'Here is a person as JSON:' -n 200 --temp 0 -j '{}'", gemma);
    rc = t_run_doppler(a, &out, &err);
    cJSON *j = out ? cJSON_Parse(out) : NULL;
    CHECKF(rc == 0 && j && strstr(err, "stop: end of"), "exit %d: %s %s", rc, out, err);
    cJSON_Delete(j);
    free(out);
    free(err);
    /* several prompts: one constraint each, and each text that of the prompt alone */
    snprintf(a, sizeof a, "run -m '%s' -p 'Here is a person as JSON:' -p 'Alice is 30.' -p 'A user record:' "
             "--parallel 2 --ctx 512 -n 200 --temp 0 -j %s", gemma, q);
    CHECK(t_run_doppler(a, &out, NULL) == 0);
    snprintf(a, sizeof a, "run -m '%s' -p 'Alice is 30.' --ctx 512 -n 200 --temp 0 -j %s", gemma, q);
    CHECK(t_run_doppler(a, &out2, NULL) == 0);
    const char *p = out;
    for (int k = 1; k <= 3; k++) {
        char head[64];
        size_t len = 0;
        snprintf(head, sizeof head, "### prompt %d/3 (", k);
        p = p ? strstr(p, head) : NULL;
        CHECKF(p && sscanf(p + strlen(head), "%zu", &len) == 1, "prompt %d: no header in %s", k, out);
        if (!p || !len) break;
        p = strchr(p, '\n') + 1;
        CHECKF(is_person(p, len), "prompt %d: %.*s", k, (int)len, p);
        if (k == 2) CHECKF(out2 && strlen(out2) == len && !memcmp(p, out2, len), "alone %s, with others %.*s", out2,
                           (int)len, p);
        p += len;
    }
    free(out);
    free(out2);
}

int main(void) {
    t_seed();
    const char *tiny = t_tmp_path(".gguf");
    CHECK(tm_write(tiny, NULL) == 0);
    char a[1024];
    expect("", 2, "no command given");
    expect("frobnicate", 2, "unknown command 'frobnicate'");
    snprintf(a, sizeof a, "run -m %s", tiny);
    expect(a, 2, "no prompt");
    snprintf(a, sizeof a, "run -m %s -p hi --temp abc", tiny);
    expect(a, 2, "--temp expects a number");
    snprintf(a, sizeof a, "run -m %s -p hi -n -3", tiny);
    expect(a, 2, "-n expects an integer");
    snprintf(a, sizeof a, "run -m %s -p hi --top-p 0", tiny);
    expect(a, 2, "--top-p");
    snprintf(a, sizeof a, "run -m %s -p hi --bogus", tiny);
    expect(a, 2, "unknown option '--bogus'");
    snprintf(a, sizeof a, "run -m %s -p hi --backend tpu", tiny);
    expect(a, 2, "--backend");
    snprintf(a, sizeof a, "chat -m %s --backend tpu", tiny);
    expect(a, 2, "--backend expects cpu, cuda or auto, got 'tpu'");
    snprintf(a, sizeof a, "trace dump -m %s -p hi --backend gpu -o /dev/null", tiny);
    expect(a, 2, "--backend expects cpu, cuda or auto, got 'gpu'");
    snprintf(a, sizeof a, "chat -m %s --top-k x", tiny);
    expect(a, 2, "--top-k expects an integer");
    snprintf(a, sizeof a, "run -m %s -p hi --ctx", tiny);
    expect(a, 2, "--ctx needs a value");
    snprintf(a, sizeof a, "run -m %s --ctx 8 -p 'w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13 w14 w15 w16'", tiny);
    expect(a, 2, "context holds 8");
    snprintf(a, sizeof a, "run -m %s -f /nonexistent/prompt.txt", tiny);
    expect(a, 2, "cannot open /nonexistent/prompt.txt");
    /* chat template variables: a JSON object, not one doppler sets, with --chat; serve checks them at start-up */
    snprintf(a, sizeof a, "run -m %s -p hi --chat-template-kwargs '{}'", tiny);
    expect(a, 2, "--chat-template-kwargs needs --chat");
    snprintf(a, sizeof a, "run -m %s -p hi --chat --chat-template chatml --chat-template-kwargs '[1]'", tiny);
    expect(a, 2, "--chat-template-kwargs: expects a JSON object");
    snprintf(a, sizeof a, "run -m %s -p hi --chat --chat-template chatml --chat-template-kwargs '{\"messages\": 1}'", tiny);
    expect(a, 2, "chat template variable 'messages' is set by doppler");
    snprintf(a, sizeof a, "serve -m %s --port 0 --chat-template-kwargs '{\"enable_thinking\": false}'", tiny);
    expect(a, 2, "serve: --chat-template-kwargs, but the model has no chat template");
    snprintf(a, sizeof a, "serve -m %s --port 0 --chat-template vicuna", tiny);
    expect(a, 2, "serve: unknown chat template 'vicuna'");
    /* --json-schema: a schema constrained output cannot honour, or a file that cannot be read, fails at start-up */
    snprintf(a, sizeof a, "run -m %s -p hi --json-schema '{\"type\": \"string\", \"pattern\": \"a+\"}'", tiny);
    expect(a, 2, "run: --json-schema: json schema: the schema keyword 'pattern' is not supported");
    snprintf(a, sizeof a, "run -m %s -p hi -j '{\"type\": '", tiny);
    expect(a, 2, "run: -j: json schema: the schema is not valid JSON");
    snprintf(a, sizeof a, "run -m %s -p hi --json-schema ''", tiny);
    expect(a, 2, "--json-schema: expects a JSON Schema");
    snprintf(a, sizeof a, "run -m %s -p hi --json-schema-file /nonexistent/schema.json", tiny);
    expect(a, 2, "--json-schema-file: cannot open /nonexistent/schema.json");
    snprintf(a, sizeof a, "chat -m %s --json-schema-file /tmp", tiny);
    expect(a, 2, "--json-schema-file: /tmp is a directory");
    const char *sf = t_tmp_path(".json");
    t_write_file(sf, "{\"type\": \"object\", \"patternProperties\": {}}", 43);
    snprintf(a, sizeof a, "chat -m %s --json-schema-file %s < /dev/null", tiny, sf);
    expect(a, 2, "is not supported in constrained output");
    snprintf(a, sizeof a, "run -m %s -p hi --json-schema-file %s --json-schema '{}'", tiny, sf);
    expect(a, 2, "run: give either --json-schema or --json-schema-file, not both");
    t_write_file(sf, "", 0);
    snprintf(a, sizeof a, "run -m %s -p hi --json-schema-file %s", tiny, sf);
    expect(a, 2, "the file is empty");
    remove(sf);
    /* generation that reaches the context end stops cleanly */
    snprintf(a, sizeof a, "run -m %s --ctx 24 -p 'a b c' -n 100 --temp 0 --ignore-eos --log-tags Pipeline,Stats", tiny);
    expect(a, 0, "context of 24 tokens is full");
    /* greedy is deterministic */
    char *o1 = NULL, *o2 = NULL;
    snprintf(a, sizeof a, "run -m %s -p 'a b' -n 8 --temp 0 --ignore-eos", tiny);
    CHECK(t_run_doppler(a, &o1, NULL) == 0);
    CHECK(t_run_doppler(a, &o2, NULL) == 0);
    CHECK(o1 && o2 && !strcmp(o1, o2));
    free(o1);
    free(o2);
    remove(tiny);

    /* Memory: the model is mapped, not copied. Gemma 3 270M with a 2048
     * context stays below file size + 150 MB (the stats line reports it). */
    const char *gemma = t_model_path("gemma-3-270m-q4_k_m.gguf");
    if (!gemma) {
        printf("SKIP memory check: gemma-3-270m-q4_k_m.gguf not in the model cache (run scripts/fetch-models)\n");
    } else {
        FILE *f = fopen(gemma, "rb");
        fseek(f, 0, SEEK_END);
        double file_mb = ftell(f) / 1048576.0;
        fclose(f);
        char *err = NULL;
        snprintf(a, sizeof a, "run -m '%s' --ctx 2048 -p 'The color of the sky is' -n 2 --temp 0", gemma);
        CHECK(t_run_doppler(a, NULL, &err) == 0);
        const char *p = err ? strstr(err, "peak RSS ") : NULL;
        double rss = p ? atof(p + 9) : 1e9;
        printf("gemma 270M --ctx 2048: peak RSS %.0f MB, file %.0f MB, budget %.0f MB\n", rss, file_mb, file_mb + 150);
        CHECKF(rss < file_mb + 150, "peak RSS %.0f MB exceeds %.0f MB", rss, file_mb + 150);
        free(err);
        json_schema_run(gemma);
    }
    return t_done("test_cli");
}
