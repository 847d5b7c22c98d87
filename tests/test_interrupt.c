/* Ctrl-C (SIGINT): run (one prompt or several), perplexity, bench and
 * trace dump stop at the next token or chunk, keep what they printed,
 * print their stats so far, leave no unfinished output file and exit 130;
 * a second Ctrl-C exits at once.
 * Runs SmolLM2-135M on the CPU. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

static const char *g_model;

typedef struct {
    pid_t pid;
    int out_fd;
    char *out;
    size_t len, cap;
    const char *err_path;
} proc;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Starts doppler with argv (NULL-terminated, without the program). */
static void start(proc *p, const char *const *args) {
    memset(p, 0, sizeof *p);
    int fds[2];
    if (pipe(fds)) abort();
    p->err_path = t_tmp_path(".stderr");
    p->pid = fork();
    if (p->pid == 0) {
        dup2(fds[1], 1);
        int e = open(p->err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(e, 2);
        close(fds[0]);
        const char *argv[64] = {"doppler"};
        int n = 1;
        for (; args[n - 1] && n < 63; n++) argv[n] = args[n - 1];
        argv[n] = NULL;
        const char *bin = getenv("DOPPLER_BIN");
        execv(bin ? bin : "doppler", (char **)argv);
        _exit(127);
    }
    close(fds[1]);
    p->out_fd = fds[0];
    p->cap = 1 << 16;
    p->out = calloc(p->cap, 1);
}

/* Reads stdout for up to t seconds or until it holds needle (NULL: just wait). */
static int read_until(proc *p, const char *needle, double t) {
    double end = now() + t;
    while (now() < end) {
        if (needle && strstr(p->out, needle)) return 1;
        struct pollfd pf = {p->out_fd, POLLIN, 0};
        if (poll(&pf, 1, 50) > 0) {
            if (p->len + 4096 >= p->cap) p->out = realloc(p->out, p->cap *= 2);
            ssize_t k = read(p->out_fd, p->out + p->len, p->cap - p->len - 1);
            if (k <= 0) break;
            p->len += (size_t)k;
            p->out[p->len] = 0;
        }
    }
    return needle && strstr(p->out, needle);
}

/* Waits up to t seconds for the exit; returns the exit code (-1 when it is
 * still running: then it is killed). */
static int finish(proc *p, double t, char **err) {
    double end = now() + t;
    int st = 0, code = -1;
    while (now() < end) {
        read_until(p, NULL, 0.05);
        if (waitpid(p->pid, &st, WNOHANG) == p->pid) {
            code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            break;
        }
    }
    if (code < 0) {
        kill(p->pid, SIGKILL);
        waitpid(p->pid, &st, 0);
    }
    read_until(p, NULL, 0.05);
    close(p->out_fd);
    *err = t_read_file(p->err_path, NULL);
    unlink(p->err_path);
    return code;
}

static void test_run(void) {
    proc p;
    const char *args[] = {"run", "-m", g_model, "-p", "Once upon a time", "-n", "-1", "--ignore-eos",
                          "--temp", "0", "-c", "2048", "-t", "2", "--backend", "cpu", NULL};
    start(&p, args);
    CHECK(read_until(&p, "Once upon a time", 60));
    size_t before = p.len;
    for (double end = now() + 60; p.len < before + 8 && now() < end;) read_until(&p, NULL, 0.1);
    CHECKF(p.len >= before + 8, "no tokens within 60 s");
    kill(p.pid, SIGINT);
    char *err = NULL;
    double t0 = now();
    int rc = finish(&p, 10, &err);
    CHECKF(rc == 130, "run: exit %d: %s", rc, err);
    CHECKF(now() - t0 < 8, "run took %.1f s to stop", now() - t0);
    CHECKF(err && strstr(err, "stop: interrupted") && strstr(err, "[Stats] prompt"), "run stderr: %s", err);
    CHECK(p.len > 0 && p.out[p.len - 1] == '\n');
    free(err);
    free(p.out);
}

/* Several prompts: every one ends at the next step and prints what it has
 * (the one not started yet its prompt alone). */
static void test_run_parallel(void) {
    proc p;
    const char *args[] = {"run", "-m", g_model, "-p", "Once upon a time", "-p", "The river", "-p", "Third one",
                          "--parallel", "2", "-n", "-1", "--ignore-eos", "--temp", "0", "-c", "2048", "-t", "2",
                          "--backend", "cpu", "--log-tags", "KV,Stats", NULL};
    start(&p, args);
    char *log = NULL;
    for (double end = now() + 60; now() < end && !(log && strstr(log, "[KV] cache")); usleep(50 * 1000)) {
        free(log);
        log = t_read_file(p.err_path, NULL);
    }
    CHECKF(log && strstr(log, "[KV] cache"), "no session within 60 s: %s", log);
    free(log);
    usleep(1500 * 1000); /* decoding the first two */
    kill(p.pid, SIGINT);
    char *err = NULL;
    double t0 = now();
    int rc = finish(&p, 10, &err);
    CHECKF(rc == 130 && now() - t0 < 8, "run --parallel: exit %d after %.1f s: %s", rc, now() - t0, err);
    int n1 = 0, n2 = 0, n3 = -1;
    const char *s1 = err ? strstr(err, "prompt 1/3: ") : NULL, *s2 = err ? strstr(err, "prompt 2/3: ") : NULL,
               *s3 = err ? strstr(err, "prompt 3/3: ") : NULL;
    CHECKF(s1 && s2 && s3 && sscanf(s1, "prompt 1/3: %*d tokens, %d generated (stop: interrupted)", &n1) == 1 &&
               sscanf(s2, "prompt 2/3: %*d tokens, %d generated (stop: interrupted)", &n2) == 1 &&
               sscanf(s3, "prompt 3/3: %*d tokens, %d generated (stop: interrupted)", &n3) == 1,
           "run --parallel stderr: %s", err);
    CHECKF(n1 > 0 && n2 > 0 && n3 == 0, "generated %d, %d, %d", n1, n2, n3);
    const char *tail = "### prompt 3/3 (10 bytes)\nThird one\n";
    CHECKF(!strncmp(p.out, "### prompt 1/3 (", 16) && strstr(p.out, "\n### prompt 2/3 (") && p.len > strlen(tail) &&
               !strcmp(p.out + p.len - strlen(tail), tail),
           "run --parallel stdout: %s", p.out);
    free(err);
    free(p.out);
}

/* The first Ctrl-C waits for the end of a long prefill chunk; the second
 * does not. */
static void test_second_interrupt(void) {
    const char *f = t_tmp_path(".txt");
    char text[12000];
    size_t n = 0;
    while (n < sizeof text - 64) n += (size_t)snprintf(text + n, sizeof text - n, "word%d and ", (int)n % 997);
    t_write_file(f, text, n);
    proc p;
    const char *args[] = {"run", "-m", g_model, "-f", f, "-n", "4", "-c", "8192", "-b", "8192", "-t", "2",
                          "--backend", "cpu", NULL};
    start(&p, args);
    usleep(1500 * 1000); /* loaded, prefilling ~10k tokens */
    kill(p.pid, SIGINT);
    usleep(200 * 1000);
    kill(p.pid, SIGINT);
    double t0 = now();
    char *err = NULL;
    int rc = finish(&p, 20, &err);
    CHECKF(rc == 130 && now() - t0 < 5, "second Ctrl-C: exit %d after %.1f s: %s", rc, now() - t0, err);
    CHECKF(err && !strstr(err, "[Stats]"), "the stats line means it did not exit at once: %s", err);
    free(err);
    free(p.out);
    remove(f);
}

static void test_perplexity(void) {
    const char *text = t_src_path("docs/text/alice-ch1.txt");
    proc p;
    const char *args[] = {"perplexity", "-m", g_model, "-f", text, "-c", "128", "-t", "2", "--backend", "cpu", NULL};
    start(&p, args);
    CHECK(read_until(&p, "[1]", 60));
    kill(p.pid, SIGINT);
    char *err = NULL;
    /* it stops after the chunk in flight: one forward pass of 128 tokens,
     * which takes tens of seconds under the sanitizers on a loaded machine */
    int rc = finish(&p, 120, &err);
    CHECKF(rc == 130, "perplexity: exit %d: %s", rc, err);
    CHECKF(strstr(p.out, "PPL = ") && strstr(p.out, "(over the windows done)"), "perplexity stdout: %s", p.out);
    CHECKF(err && strstr(err, "(interrupted)"), "perplexity stderr: %s", err);
    free(err);
    free(p.out);
}

static void test_bench(void) {
    proc p;
    const char *args[] = {"bench", "inference", "-m", g_model, "--prompt", "s", "--gen", "16", "--reps", "1000",
                          "-t", "2", "--backend", "cpu", NULL};
    start(&p, args);
    CHECK(read_until(&p, "decoded tokens per rep", 60));
    usleep(2500 * 1000);
    kill(p.pid, SIGINT);
    char *err = NULL;
    int rc = finish(&p, 20, &err);
    CHECKF(rc == 130, "bench: exit %d: %s", rc, err);
    /* the table's row of the test, with the repetitions done */
    CHECKF(strstr(p.out, "decode tok/s") && strstr(p.out, "\n    64    16      0 | "), "bench stdout: %s", p.out);
    free(err);
    free(p.out);
}

static void test_trace_dump(void) {
    const char *out = t_tmp_path(".trace");
    const char *text = t_src_path("docs/text/alice-ch1.txt");
    proc p;
    /* small batches: the trace callback's stop is honoured between layers */
    const char *args[] = {"trace", "dump", "-m", g_model, "-f", text, "-c", "8192", "-b", "32", "-t", "2",
                          "--backend", "cpu", "-o", out, NULL};
    start(&p, args);
    usleep(1500 * 1000);
    kill(p.pid, SIGINT);
    char *err = NULL;
    int rc = finish(&p, 60, &err);
    struct stat st;
    CHECKF(rc == 130 && stat(out, &st) != 0, "trace dump: exit %d, output %s: %s", rc,
           stat(out, &st) ? "absent" : "present", err);
    CHECKF(err && strstr(err, "interrupted"), "trace dump stderr: %s", err);
    remove(out);
    free(err);
    free(p.out);
}

int main(void) {
    t_seed();
    g_model = t_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
    if (!g_model) t_skip("SmolLM2-135M-Instruct.Q4_1.gguf not in the model cache");
    signal(SIGPIPE, SIG_IGN);
    test_run();
    test_run_parallel();
    test_second_interrupt();
    test_perplexity();
    test_bench();
    test_trace_dump();
    return t_done("test_interrupt");
}
