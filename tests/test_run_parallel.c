/* doppler run with several prompts (--parallel N): each prompt's output,
 * split at its '### prompt K/COUNT (B bytes)' header, equals byte for byte
 * what `doppler run` prints for that prompt alone: greedy over random
 * prompts of 1 to about 300 tokens (more prompts than sequences, so some
 * join when others end; prompt chunks smaller than a prompt too), with -f
 * FILE lines, stop strings, --chat, and sampled with seed + K - 1. A
 * sampled run repeats with the seed it printed; bad values exit 2 with one
 * line. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "testmodel.h"

#define MAX_P 8

static const char *WORDS[] = {"river", "stone", "light", "the", "a", "of", "garden", "winter", "quietly", "machine",
                              "seven", "blue", "market", "under", "and", "song", "paper", "north", "was", "clock"};

/* A random prompt of n words (n = 0: empty, BOS only). */
static char *random_prompt(int n) {
    char *s = calloc((size_t)n * 12 + 1, 1);
    for (int i = 0; i < n; i++) {
        if (i) strcat(s, " ");
        strcat(s, WORDS[(int)(t_rand_unit() * (sizeof WORDS / sizeof WORDS[0]))]);
    }
    return s;
}

/* Splits a --parallel output into its sections; returns their count, or -1
 * when it is malformed (a header missing or wrong, a length running past
 * the end, bytes after the last section). */
static int split(const char *out, int count, const char **sec, size_t *len) {
    const char *p = out, *end = out + strlen(out);
    int k = 0;
    while (p < end) {
        int K, C, used = 0;
        size_t B;
        if (sscanf(p, "### prompt %d/%d (%zu bytes)\n%n", &K, &C, &B, &used) != 3 || !used || K != k + 1 ||
            C != count || k == MAX_P)
            return -1;
        p += used;
        if ((size_t)(end - p) < B) return -1;
        sec[k] = p;
        len[k++] = B;
        p += B;
    }
    return k;
}

/* Runs args (which name the prompts) and checks that section K equals
 * want[K] for every prompt, and that stderr holds needle (NULL: no check). */
static void expect_sections(const char *what, const char *args, char **want, int n, const char *needle) {
    char *out = NULL, *err = NULL;
    int rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0, "%s: exit %d: %s", what, rc, err);
    const char *sec[MAX_P];
    size_t len[MAX_P];
    int k = out ? split(out, n, sec, len) : -1;
    CHECKF(k == n, "%s: %d sections, want %d:\n%s", what, k, n, out);
    for (int i = 0; i < k && i < n; i++)
        CHECKF(want[i] && len[i] == strlen(want[i]) && !memcmp(sec[i], want[i], len[i]),
               "%s: prompt %d differs from its run alone:\n--- alone:\n%s--- together:\n%.*s", what, i + 1, want[i],
               (int)len[i], sec[i]);
    CHECKF(err && strstr(err, "at once"), "%s: no aggregate stats line: %s", what, err);
    CHECKF(!needle || (err && strstr(err, needle)), "%s: stderr lacks '%s': %s", what, needle, err);
    free(out);
    free(err);
}

/* stdout of one prompt alone */
static char *alone(const char *common, const char *prompt, const char *extra) {
    char q[8192], args[16384], *out = NULL;
    t_shell_quote(q, sizeof q, prompt);
    snprintf(args, sizeof args, "run %s %s -p %s", common, extra, q);
    int rc = t_run_doppler(args, &out, NULL);
    CHECKF(rc == 0, "'%s': exit %d", args, rc);
    return out;
}

static void prompts_args(char *dst, size_t cap, char **prompts, int n) {
    size_t k = 0;
    dst[0] = 0;
    for (int i = 0; i < n; i++) {
        char q[8192];
        t_shell_quote(q, sizeof q, prompts[i]);
        k += (size_t)snprintf(dst + k, cap - k, " -p %s", q);
    }
}

static void bad_values(const char *model) {
    static const struct {
        const char *args, *needle;
    } bad[] = {
        {"--parallel 0 -p a -p b", "--parallel"},
        {"--parallel -2 -p a -p b", "--parallel"},
        {"--parallel 4097 -p a -p b", "--parallel"},
        {"-np x -p a -p b", "-np"},
        {"--parallel 2 -p a -p b --track-token 5", "one prompt only"},
        {"-p a -p b --top-k-print 3", "one prompt only"},
        {"--parallel 2 -p a -f /dev/null", "either -p or -f"},
        {"--parallel 2 -f /dev/null", "holds no prompt"},
        {"--parallel 2 --ctx 16 -p a -p 'w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12'", "prompt 2 has"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char args[1024], *err = NULL;
        snprintf(args, sizeof args, "run -m %s %s", model, bad[i].args);
        int rc = t_run_doppler(args, NULL, &err);
        int lines = 0;
        for (const char *p = err; p && *p; p++) lines += *p == '\n';
        CHECKF(rc == 2 && lines == 1 && strstr(err, bad[i].needle), "'%s': exit %d, stderr: %s", args, rc, err);
        free(err);
    }
}

/* Greedy: random prompts of different lengths, each alone and all together. */
static void greedy(const char *model) {
    static const int words[] = {0, 5, 40, 120, 280};
    const int n = 5;
    char *prompts[MAX_P], *base[MAX_P], *want[MAX_P], common[1024], pa[65536], args[70000];
    snprintf(common, sizeof common, "-m '%s' -t 2 -n 12 --temp 0 --ctx 1024", model);
    for (int i = 0; i < n; i++) {
        prompts[i] = random_prompt(words[i]);
        base[i] = alone(common, prompts[i], "");
    }
    prompts_args(pa, sizeof pa, prompts, n);
    snprintf(args, sizeof args, "run %s --parallel 3%s", common, pa);
    expect_sections("greedy --parallel 3", args, base, n, NULL);

    /* prompt chunks of 48: the two long prompts alone with the same -b,
     * the others are one chunk either way */
    for (int i = 0; i < n; i++) want[i] = i < 3 ? base[i] : alone(common, prompts[i], "-b 48");
    snprintf(args, sizeof args, "run %s -b 48 -np 2%s", common, pa);
    expect_sections("greedy -b 48 -np 2", args, want, n, NULL);
    for (int i = 3; i < n; i++) free(want[i]);

    /* -f: one prompt per line (a CRLF line and an empty one among them;
     * the empty first prompt cannot be a line) */
    const char *file = t_tmp_path(".txt");
    FILE *f = fopen(file, "wb");
    fprintf(f, "%s\r\n\n%s\n", prompts[1], prompts[2]);
    fclose(f);
    snprintf(args, sizeof args, "run %s --parallel 4 -f %s", common, file);
    expect_sections("-f lines", args, base + 1, 2, NULL);
    /* without --parallel the file is one prompt, printed as it is */
    char *out = NULL;
    snprintf(args, sizeof args, "run %s -f %s", common, file);
    CHECK(t_run_doppler(args, &out, NULL) == 0);
    CHECKF(out && !strncmp(out, prompts[1], strlen(prompts[1])) && !strstr(out, "### prompt"),
           "-f without --parallel: %s", out);
    free(out);
    remove(file);

    /* a stop string ends the short prompts early, each where it appears:
     * three bytes from the middle of the longest of their continuations */
    const char *cont = "";
    for (int i = 0; i < 3; i++)
        if (strlen(base[i] + strlen(prompts[i])) > strlen(cont)) cont = base[i] + strlen(prompts[i]);
    CHECKF(strlen(cont) > 6, "continuations too short for a stop string: '%s'", cont);
    char stop[4] = {0}, sq[64], extra[96];
    memcpy(stop, cont + strlen(cont) / 2, 3);
    t_shell_quote(sq, sizeof sq, stop);
    snprintf(extra, sizeof extra, "-r %s", sq);
    int ns = 3;
    for (int i = 0; i < ns; i++) want[i] = alone(common, prompts[i], extra);
    prompts_args(pa, sizeof pa, prompts, ns);
    snprintf(args, sizeof args, "run %s %s --parallel 2%s", common, extra, pa);
    expect_sections("stop string", args, want, ns, "stop: stop string");
    for (int i = 0; i < ns; i++) free(want[i]);
    for (int i = 0; i < n; i++) {
        free(base[i]);
        free(prompts[i]);
    }
}

/* Sampled: the printed seed repeats the run; prompt K equals its run alone
 * with seed + K - 1. */
static void sampled(const char *model) {
    const int n = 3;
    char *prompts[MAX_P], common[1024], pa[8192], args[16384];
    snprintf(common, sizeof common, "-m '%s' -t 2 -n 10 --temp 1.1 --top-k 0 --min-p 0 --top-p 1", model);
    for (int i = 0; i < n; i++) prompts[i] = random_prompt(3 + 4 * i);
    prompts_args(pa, sizeof pa, prompts, n);
    snprintf(args, sizeof args, "run %s --parallel 2%s", common, pa);
    char *out1 = NULL, *err = NULL, *out2 = NULL;
    CHECK(t_run_doppler(args, &out1, &err) == 0);
    const char *p = err ? strstr(err, "[Sampler] seed ") : NULL;
    CHECKF(p != NULL, "no seed printed: %s", err);
    unsigned long long seed = p ? strtoull(p + 15, NULL, 10) : 0;
    snprintf(args, sizeof args, "run %s --parallel 2 --seed %llu%s", common, seed, pa);
    CHECK(t_run_doppler(args, &out2, NULL) == 0);
    CHECKF(out1 && out2 && !strcmp(out1, out2), "seed %llu does not repeat:\n%s\n---\n%s", seed, out1, out2);
    char *want[MAX_P];
    for (int i = 0; i < n; i++) {
        char extra[64];
        snprintf(extra, sizeof extra, "--seed %llu", seed + (unsigned long long)i);
        want[i] = alone(common, prompts[i], extra);
    }
    expect_sections("sampled, seed + K - 1", args, want, n, NULL);
    int same = 1;
    for (int i = 1; i < n; i++) same &= !strcmp(want[i], want[0]);
    CHECK(!same);
    for (int i = 0; i < n; i++) {
        free(want[i]);
        free(prompts[i]);
    }
    free(out1);
    free(out2);
    free(err);
}

/* --chat: every prompt wrapped in the template on its own. */
static void chat(const char *model) {
    char *prompts[2] = {"Name a colour.", "What is two plus two?"}, *want[2], common[1024], pa[1024], args[4096];
    snprintf(common, sizeof common, "-m '%s' -t 2 -n 8 --temp 0 --chat -sys 'Be brief.'", model);
    for (int i = 0; i < 2; i++) want[i] = alone(common, prompts[i], "");
    prompts_args(pa, sizeof pa, prompts, 2);
    snprintf(args, sizeof args, "run %s --parallel 2%s", common, pa);
    expect_sections("--chat", args, want, 2, NULL);
    for (int i = 0; i < 2; i++) free(want[i]);
}

int main(void) {
    t_seed();
    const char *tiny = t_tmp_path(".gguf");
    tm_opts o = {.n_ctx = 1024};
    CHECK(tm_write(tiny, &o) == 0);
    bad_values(tiny);
    remove(tiny);

    const char *gemma = t_model_path("gemma-3-270m-q4_k_m.gguf");
    if (gemma) {
        greedy(gemma);
        sampled(gemma);
    } else {
        printf("SKIP greedy and sampled: gemma-3-270m-q4_k_m.gguf not in the model cache (run scripts/fetch-models)\n");
    }
    const char *smol = t_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (smol) chat(smol);
    else printf("SKIP --chat: SmolLM2-135M-Instruct.Q4_1.gguf not in the model cache\n");
    return t_done("test_run_parallel");
}
