/* The CLI's input and output edges: standard output that cannot be written
 * is an error (exit 1), a directory given as a file says so, '-' reads
 * standard input wherever a file is read, chat input that overflows the
 * context exits 2; the printed seed reproduces a sampled run; stop strings
 * end the output before them; -n 1 reports no decode speed; trace compare
 * refuses traces of different prompts and shows injected faults. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testlib.h"
#include "testmodel.h"

static const char *g_tiny;

/* Runs doppler; checks the exit code and that stderr holds needle. */
static void expect(const char *args, int code, const char *needle) {
    char *err = NULL;
    int rc = t_run_doppler(args, NULL, &err);
    CHECKF(rc == code && err && strstr(err, needle), "'%s': exit %d (want %d), stderr lacks '%s': %s", args, rc, code,
           needle, err);
    free(err);
}

static void test_unwritable_stdout(void) {
    char a[1024];
    snprintf(a, sizeof a, "run -m %s -p 'a b' -n 4 --temp 0 > /dev/full", g_tiny);
    expect(a, 1, "cannot write standard output: No space left on device");
    snprintf(a, sizeof a, "inspect %s > /dev/full", g_tiny);
    expect(a, 1, "cannot write standard output");
    snprintf(a, sizeof a, "tokenize -m %s 'hello world' > /dev/full", g_tiny);
    expect(a, 1, "cannot write standard output");
    snprintf(a, sizeof a, "options > /dev/full");
    expect(a, 1, "cannot write standard output");
}

static void test_directories(void) {
    const char *dir = "/tmp";
    const char *cases[] = {"tokenize -m %s -f %s", "run -m %s -f %s", "perplexity -m %s -f %s",
                           "perplexity -m %s --tokens %s", "trace dump -m %s -f %s -o /dev/null"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char a[1024];
        snprintf(a, sizeof a, cases[i], g_tiny, dir);
        expect(a, 2, "/tmp is a directory");
    }
}

/* '-f -' gives what -p gives. */
static void test_stdin(void) {
    char a[1024], *o1 = NULL, *o2 = NULL;
    /* the same text from a file and from stdin */
    const char *f = t_tmp_path(".txt");
    t_write_file(f, "a b c", 5);
    snprintf(a, sizeof a, "run -m %s -f %s -n 6 --temp 0 --ignore-eos", g_tiny, f);
    CHECK(t_run_doppler(a, &o1, NULL) == 0);
    snprintf(a, sizeof a, "run -m %s -f - -n 6 --temp 0 --ignore-eos < %s", g_tiny, f);
    CHECK(t_run_doppler(a, &o2, NULL) == 0);
    CHECKF(o1 && o2 && !strcmp(o1, o2), "-f FILE gave '%s', -f - gave '%s'", o1, o2);
    free(o1), free(o2);
    snprintf(a, sizeof a, "tokenize -m %s --ids -f %s", g_tiny, f);
    CHECK(t_run_doppler(a, &o1, NULL) == 0);
    snprintf(a, sizeof a, "tokenize -m %s --ids -f - < %s", g_tiny, f);
    CHECK(t_run_doppler(a, &o2, NULL) == 0);
    CHECK(o1 && o2 && *o1 && !strcmp(o1, o2));
    free(o1), free(o2);
    /* token ids from stdin */
    char ids[512];
    size_t n = 0;
    for (int i = 0; i < 40; i++) n += (size_t)snprintf(ids + n, sizeof ids - n, "%d ", 1 + (int)(t_rand_unit() * 250));
    t_write_file(f, ids, n);
    snprintf(a, sizeof a, "perplexity -m %s --tokens - -c 8 --backend cpu < %s", g_tiny, f);
    CHECK(t_run_doppler(a, &o1, NULL) == 0);
    snprintf(a, sizeof a, "perplexity -m %s --tokens %s -c 8 --backend cpu", g_tiny, f);
    CHECK(t_run_doppler(a, &o2, NULL) == 0);
    CHECK(o1 && o2 && strstr(o1, "PPL = ") && !strcmp(o1, o2));
    free(o1), free(o2);
    remove(f);
}

/* A sampled run prints its seed; --seed with it gives the same text. */
static void test_seed(void) {
    char a[1024], *o1 = NULL, *e1 = NULL, *o2 = NULL, *o3 = NULL, *e3 = NULL;
    const char *common = "-p 'a b' -n 24 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --ignore-eos";
    snprintf(a, sizeof a, "run -m %s %s", g_tiny, common);
    CHECK(t_run_doppler(a, &o1, &e1) == 0);
    const char *p = e1 ? strstr(e1, "[Sampler] seed ") : NULL;
    CHECKF(p, "no seed line: %s", e1);
    unsigned long long seed = p ? strtoull(p + 15, NULL, 10) : 0;
    snprintf(a, sizeof a, "run -m %s %s --seed %llu", g_tiny, common, seed);
    CHECK(t_run_doppler(a, &o2, NULL) == 0);
    CHECKF(o1 && o2 && !strcmp(o1, o2), "seed %llu: '%s' then '%s'", seed, o1, o2);
    /* another run draws another seed */
    snprintf(a, sizeof a, "run -m %s %s", g_tiny, common);
    CHECK(t_run_doppler(a, &o3, &e3) == 0);
    p = e3 ? strstr(e3, "[Sampler] seed ") : NULL;
    CHECK(p && strtoull(p + 15, NULL, 10) != seed);
    free(o1), free(e1), free(o2), free(o3), free(e3);
    /* greedy runs print none */
    snprintf(a, sizeof a, "run -m %s -p hi -n 2 --temp 0", g_tiny);
    CHECK(t_run_doppler(a, NULL, &e1) == 0 && !strstr(e1, "seed"));
    free(e1);
}

/* --stop TEXT: the output ends just before the first TEXT the model writes. */
static void test_stop_strings(void) {
    char a[1024], *full = NULL, *cut = NULL, *err = NULL;
    snprintf(a, sizeof a, "run -m %s -p 'a b' -n 40 --temp 0 --ignore-eos --no-display-prompt", g_tiny);
    CHECK(t_run_doppler(a, &full, NULL) == 0);
    size_t len = full ? strlen(full) : 0;
    if (len < 12) {
        CHECKF(0, "too little output: '%s'", full);
        free(full);
        return;
    }
    for (int trial = 0; trial < 3; trial++) {
        size_t at = 2 + (size_t)(t_rand_unit() * (double)(len - 8)), sl = 2 + (size_t)(t_rand_unit() * 3);
        char stop[8];
        memcpy(stop, full + at, sl);
        stop[sl] = 0;
        if (strchr(stop, '\'') || strchr(stop, '\n')) continue;
        size_t first = (size_t)(strstr(full, stop) - full);
        char q[1200];
        snprintf(q, sizeof q, "%s --stop '%s' --log-tags Stats", a, stop);
        CHECK(t_run_doppler(q, &cut, &err) == 0);
        /* the text before the stop string, then run's final newline */
        CHECKF(cut && strlen(cut) == first + 1 && !strncmp(cut, full, first) && strstr(err, "stop: stop string"),
               "stop '%s' at %zu: got '%s' of '%s'", stop, first, cut, full);
        free(cut), free(err);
    }
    free(full);
    snprintf(a, sizeof a, "run -m %s -p hi --stop ''", g_tiny);
    expect(a, 2, "--stop");
}

static void test_decode_speed(void) {
    char a[1024], *err = NULL;
    snprintf(a, sizeof a, "run -m %s -p 'a b' -n 1 --temp 0", g_tiny);
    CHECK(t_run_doppler(a, NULL, &err) == 0);
    /* no "decode 0.0 tok/s" (the prefill's figure may end in 0.0 tok/s: 150000.0) */
    CHECKF(err && strstr(err, "decode - (no decode step)") && !strstr(err, "decode 0.0 tok/s"), "%s", err);
    free(err);
    snprintf(a, sizeof a, "run -m %s -p 'a b' -n 4 --temp 0 --ignore-eos", g_tiny);
    CHECK(t_run_doppler(a, NULL, &err) == 0);
    const char *p = err ? strstr(err, ", decode ") : NULL;
    CHECKF(p && atof(p + 9) > 0, "%s", err);
    free(err);
}

static void test_chat_overflow(void) {
    const char *in = t_tmp_path(".txt");
    char line[4000];
    size_t n = 0;
    for (int i = 0; i < 300; i++) n += (size_t)snprintf(line + n, sizeof line - n, "w%d ", i);
    line[n++] = '\n';
    t_write_file(in, line, n);
    char a[1024];
    snprintf(a, sizeof a, "chat -m %s --chat-template chatml -n 4 < %s", g_tiny, in);
    expect(a, 2, "does not fit the context");
    remove(in);
}

/* trace compare: traces of different prompts are refused naming the first
 * differing position; a trace made under DOPPLER_FAULT says so. */
static void test_trace_edges(void) {
    const char *t1 = t_tmp_path(".trace"), *t2 = t_tmp_path(".trace"), *t3 = t_tmp_path(".trace");
    int k = 2 + (int)(t_rand_unit() * 3);
    char ids1[128] = "", ids2[128] = "";
    size_t n1 = 0, n2 = 0;
    for (int i = 0; i < 6; i++) {
        int id = 1 + (int)(t_rand_unit() * 250);
        n1 += (size_t)snprintf(ids1 + n1, sizeof ids1 - n1, "%s%d", i ? "," : "", id);
        n2 += (size_t)snprintf(ids2 + n2, sizeof ids2 - n2, "%s%d", i ? "," : "", i == k ? id + 1 : id);
    }
    char a[1024], *out = NULL, *err = NULL;
    snprintf(a, sizeof a, "trace dump -m %s --tokens %s -o %s", g_tiny, ids1, t1);
    CHECK(t_run_doppler(a, NULL, NULL) == 0);
    snprintf(a, sizeof a, "trace dump -m %s --tokens %s -o %s", g_tiny, ids2, t2);
    CHECK(t_run_doppler(a, NULL, NULL) == 0);
    snprintf(a, sizeof a, "trace compare %s %s", t1, t2);
    char want[64];
    snprintf(want, sizeof want, "position %d holds", k);
    expect(a, 2, want);
    /* the fault: logged at load, recorded, shown by compare */
    snprintf(a, sizeof a, "trace dump -m %s --tokens %s -n 2 --temp 0.7 -s 5 -o %s", g_tiny, ids1, t3);
    setenv("DOPPLER_FAULT", "no_post_norms", 1);
    CHECK(t_run_doppler(a, NULL, &err) == 0 && strstr(err, "DOPPLER_FAULT active: no_post_norms"));
    unsetenv("DOPPLER_FAULT");
    free(err);
    char *hdr = t_read_file(t3, NULL);
    CHECKF(hdr && strstr(hdr, "\"faults\":\"no_post_norms\"") && strstr(hdr, "\"seed\":5") &&
           strstr(hdr, "\"n_prompt\":6"), "header: %.300s", hdr);
    free(hdr);
    snprintf(a, sizeof a, "trace compare %s %s", t1, t3);
    t_run_doppler(a, &out, NULL);
    CHECKF(out && strstr(out, "B was traced with DOPPLER_FAULT=no_post_norms"), "%s", out);
    free(out);
    remove(t1), remove(t2), remove(t3);
}

/* --track-token of a text that is several tokens warns whatever the log
 * tags; inspect names the file type. */
static void test_notes(void) {
    char a[1024], *out = NULL, *err = NULL;
    snprintf(a, sizeof a, "run -m %s -p 'a b' -n 1 --temp 0 --track-token 'hello world' --log-tags Stats", g_tiny);
    CHECK(t_run_doppler(a, NULL, &err) == 0);
    CHECKF(err && strstr(err, "[Sampler] --track-token 'hello world' is ") && strstr(err, "tracking the first"), "%s",
           err);
    free(err);
    const char *types[][2] = {{"q8_0", "= 7 (Q8_0)"}, {"q4_k_m", "= 15 (Q4_K_M)"}, {"f16", "= 1 (F16)"}};
    int k = (int)(t_rand_unit() * 3);
    const char *f = t_tmp_path(".gguf");
    snprintf(a, sizeof a, "synth --arch llama --preset tiny --type %s -o %s", types[k][0], f);
    CHECK(t_run_doppler(a, NULL, NULL) == 0);
    snprintf(a, sizeof a, "inspect %s", f);
    CHECK(t_run_doppler(a, &out, NULL) == 0);
    const char *line = out ? strstr(out, "general.file_type") : NULL;
    CHECKF(line && strstr(line, types[k][1]) && strstr(line, types[k][1]) < strchr(line, '\n'), "%s: %.80s",
           types[k][0], line);
    free(out);
    remove(f);
}

/* A trace over 100 MB is announced with its size, then its progress. */
static void test_large_dump(void) {
    const char *model = t_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!model) {
        printf("SKIP large trace dump: SmolLM2-135M-Instruct.Q4_1.gguf not in the model cache\n");
        return;
    }
    char ids[1024] = "", a[2048], *err = NULL;
    size_t n = 0;
    for (int i = 0; i < 96; i++) n += (size_t)snprintf(ids + n, sizeof ids - n, "%s%d", i ? "," : "", 200 + (int)(t_rand_unit() * 40000));
    const char *f = t_tmp_path(".trace");
    snprintf(a, sizeof a, "trace dump -m '%s' --tokens %s -t 2 --backend cpu -o %s --log-tags Loader", model, ids, f);
    CHECK(t_run_doppler(a, NULL, &err) == 0);
    const char *w = err ? strstr(err, "[Stats] writing ") : NULL;
    int lines = 0;
    for (const char *p = w; p && (p = strstr(p, "\ntrace dump: ")); p++) lines++;
    CHECKF(w && strstr(w, " MB (") && lines >= 3 && strstr(w, "trace dump: 100%"), "%s", err);
    free(err);
    remove(f);
}

int main(void) {
    t_seed();
    g_tiny = t_tmp_path(".gguf");
    CHECK(tm_write(g_tiny, NULL) == 0);
    test_unwritable_stdout();
    test_directories();
    test_stdin();
    test_seed();
    test_stop_strings();
    test_decode_speed();
    test_chat_overflow();
    test_trace_edges();
    test_notes();
    test_large_dump();
    remove(g_tiny);
    return t_done("test_cli_io");
}
