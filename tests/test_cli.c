/* The CLI: bad flags and prompts give one-line errors with exit code 2;
 * the default model runs within its memory budget. */
#include <string.h>

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
    }
    return t_done("test_cli");
}
