/* doppler chat on a terminal, as a newcomer meets it: no -m (the default
 * set-up picks an instruction-tuned model), line editing and history, an
 * answer, Ctrl-C in the middle of an answer (stops it; the chat goes on), a
 * conversation that outgrows the context (the oldest turns are dropped and
 * it still answers), Ctrl-C at the prompt (exit 130), and a reasoning
 * model's thinking shown dim. Driven through a pseudo-terminal. */
#define _GNU_SOURCE
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "testlib.h"

static int g_fd;
static pid_t g_pid;
static char g_buf[1 << 20];
static size_t g_len, g_mark; /* g_mark: where the current step's output starts */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads the terminal for up to t seconds, until the output since the mark
 * holds needle; returns whether it does. */
static int wait_for(const char *needle, double t) {
    double end = now() + t;
    for (;;) {
        if (needle && strstr(g_buf + g_mark, needle)) return 1;
        if (now() >= end) return 0;
        struct pollfd pf = {g_fd, POLLIN, 0};
        if (poll(&pf, 1, 50) > 0) {
            ssize_t k = read(g_fd, g_buf + g_len, sizeof g_buf - g_len - 1);
            if (k <= 0) return needle && strstr(g_buf + g_mark, needle);
            /* the terminal turns \n into \r\n: keep the text as written */
            char *in = g_buf + g_len;
            size_t w = 0;
            for (ssize_t i = 0; i < k; i++)
                if (in[i] != '\r') in[w++] = in[i];
            g_len += w;
            g_buf[g_len] = 0;
        }
    }
}

static void type(const char *s) {
    g_mark = g_len;
    ssize_t n = write(g_fd, s, strlen(s));
    (void)n;
}

/* Waits for first, then for then after it: an answer's own text may hold
 * "\n> " (a quote), which is not yet the prompt. */
static int wait_then(const char *first, const char *then, double t) {
    if (!wait_for(first, t)) return 0;
    size_t mark = g_mark;
    g_mark = (size_t)(strstr(g_buf + g_mark, first) - g_buf);
    int ok = wait_for(then, t);
    g_mark = mark;
    return ok;
}

/* The prompt after a turn: a stats line, then "> ". */
static int wait_turn(double t) { return wait_then("[Stats] turn", "\n> ", t); }

/* A reasoning model's answer on a terminal: DeepSeek-R1's template opens the answer inside <think> (the tiny
 * Qwen3 fixture never closes it), so chat shows it all dim (SGR 2 ... 22) without tags; the dim text is what
 * run --chat prints into a pipe, the newlines at its ends dropped. --reasoning-format none: as generated. */
static void think_on_terminal(const char *bin) {
    const char *model = t_src_path("tests/fixtures/models/qwen3-tiny.gguf");
    const char *tmpl = t_src_path("tests/fixtures/jinja/templates/deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja");
    const char *q = "What is 2+2?";
    char args[2048], *raw = NULL;
    snprintf(args, sizeof args, "run -m '%s' --chat --chat-template '%s' -p '%s' -n 12 --temp 0 -t 2 --backend cpu",
             model, tmpl, q);
    CHECK(t_run_doppler(args, &raw, NULL) == 0 && raw);
    if (!raw) return;
    char *r = raw, *e = raw + strlen(raw);
    while (*r == '\n') r++;
    while (e > r && e[-1] == '\n') e--;
    *e = 0;
    CHECKF(*r && !strchr(r, '<'), "the reference answer: '%s'", r);
    for (int none = 0; none < 2; none++) {
        g_len = g_mark = 0;
        g_buf[0] = 0;
        g_pid = forkpty(&g_fd, NULL, NULL, NULL);
        if (g_pid == 0) {
            execl(bin ? bin : "doppler", "doppler", "chat", "-m", model, "--chat-template", tmpl, "-n", "12", "--temp",
                  "0", "-t", "2", "--backend", "cpu", "--reasoning-format", none ? "none" : "auto", (char *)NULL);
            _exit(127);
        }
        CHECKF(wait_for("> ", 60), "no prompt: %s", g_buf);
        type("What is 2+2?\r");
        CHECKF(wait_turn(60), "no answer: %s", g_buf + g_mark);
        /* the dim segments of the answer (after the echoed line), joined */
        const char *ans = strstr(g_buf + g_mark, "2+2?\n");
        char dim[4096] = "";
        size_t nd = 0;
        for (const char *p = ans ? strstr(ans, "\033[2m") : NULL; p; p = strstr(p, "\033[2m")) {
            const char *q2 = strstr(p, "\033[22m");
            if (!q2) break;
            const size_t k = (size_t)(q2 - p - 4);
            if (nd + k < sizeof dim) memcpy(dim + nd, p + 4, k), nd += k, dim[nd] = 0;
            p = q2;
        }
        if (!none)
            CHECKF(!strcmp(dim, r) && !strstr(ans ? ans : "", "<think>"), "dim '%s', want '%s': %s", dim, r,
                   ans ? ans : g_buf);
        else
            CHECKF(nd == 0 && ans && strstr(ans, r), "--reasoning-format none: %s", ans ? ans : g_buf);
        kill(g_pid, SIGTERM);
        int st;
        waitpid(g_pid, &st, 0);
        close(g_fd);
    }
    free(raw);
}

int main(void) {
    t_seed();
    if (!t_model_path("gemma-3-270m-q4_k_m.gguf") || !t_model_path("SmolLM2-135M-Instruct.Q4_1.gguf"))
        t_skip("the default models are not in the model cache (run scripts/fetch-models)");
    const char *bin = getenv("DOPPLER_BIN");
    g_pid = forkpty(&g_fd, NULL, NULL, NULL);
    if (g_pid < 0) t_skip("no pseudo-terminal (forkpty failed)");
    if (g_pid == 0) {
        execl(bin ? bin : "doppler", "doppler", "chat", "--temp", "0", "-n", "40", "-c", "300", "-t", "2",
              "--backend", "cpu", "--print-prompt", (char *)NULL);
        _exit(127);
    }
    CHECKF(wait_for("> ", 60), "no prompt: %s", g_buf);

    /* line editing: a typo fixed with the left arrow */
    type("What is the capital of Frnce?\x1b[D\x1b[D\x1b[D\x1b[Da\r");
    CHECKF(wait_turn(60), "no answer: %s", g_buf + g_mark);
    CHECKF(strstr(g_buf + g_mark, "user\nWhat is the capital of France?"), "the edited line did not arrive: %s",
           g_buf + g_mark);
    CHECKF(strstr(g_buf + g_mark, "Paris"), "no answer: %s", g_buf + g_mark);

    /* Ctrl-C in the middle of an answer */
    type("Tell me a long story about a dragon who learns to read.\r");
    CHECKF(wait_for("<|im_start|>assistant\n\n", 30), "%s", g_buf + g_mark);
    size_t before = g_len;
    for (double end = now() + 60; g_len <= before + 8 && now() < end;) wait_for(NULL, 0.1); /* some of the answer */
    CHECKF(g_len > before + 8, "the answer does not stream: %s", g_buf + before);
    type("\x03");
    CHECKF(wait_then("stop: interrupted", "\n> ", 10), "Ctrl-C mid-answer: %s", g_buf + g_mark);

    /* history: the up arrow brings back the last message */
    type("\x1b[A\r");
    CHECKF(wait_turn(60), "no answer after the history recall: %s", g_buf + g_mark);
    CHECKF(strstr(g_buf + g_mark, "user\nTell me a long story about a dragon who learns to read.<|im_end|>\n"
                                  "<|im_start|>assistant\n"),
           "the recalled line did not arrive: %s", g_buf + g_mark);

    /* fill the context: the oldest turns go and the answers go on */
    int dropped = 0;
    for (int i = 0; i < 12 && !dropped; i++) {
        type("Tell me more, with many details.\r");
        CHECKF(wait_turn(60), "turn %d: %s", i, g_buf + g_mark);
        dropped = strstr(g_buf + g_mark, "[KV] context full: dropped the oldest") != NULL;
        if (dropped) {
            const char *st = strstr(g_buf + g_mark, "[Stats] turn");
            int generated = 0;
            const char *p = st ? strstr(st, "generated ") : NULL;
            if (p) generated = atoi(p + 10);
            CHECKF(generated > 0, "no answer after the drop: %s", g_buf + g_mark);
        }
    }
    CHECKF(dropped, "the context never filled: %s", g_buf + g_mark);
    type("Thanks!\r");
    CHECKF(wait_turn(60), "after the drop: %s", g_buf + g_mark);

    /* Ctrl-C at the prompt ends the program */
    type("\x03");
    int st = 0;
    double end = now() + 10;
    while (waitpid(g_pid, &st, WNOHANG) == 0 && now() < end) wait_for(NULL, 0.05);
    if (now() >= end) {
        kill(g_pid, SIGKILL);
        waitpid(g_pid, &st, 0);
        CHECKF(0, "Ctrl-C at the prompt did not end chat");
    } else {
        CHECKF(WIFEXITED(st) && WEXITSTATUS(st) == 130, "exit status %d", st);
    }
    close(g_fd);
    think_on_terminal(bin);
    return t_done("test_chat_pty");
}
