/* doppler serve's reasoning split (tools/serve/reasoning.c): answers with
 * and without a <think> block, prompts that end inside one, tags cut at
 * every byte and in random pieces (a stream's split must equal the whole
 * text's), and prompts ending inside a block. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reasoning.h"
#include "serve_split.h"
#include "testlib.h"

/* opt: the prompt ended inside a <think> block */
static void split(const char *text, const size_t *cuts, int n_cuts, int inside, sbuf *r, sbuf *c) {
    think_split t;
    think_init(&t, inside);
    size_t at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        const size_t end = i < n_cuts ? cuts[i] : strlen(text);
        think_feed(&t, text + at, end - at, r, c);
        at = end;
    }
    think_flush(&t, r, c);
}

static void expect(const char *text, int inside, const char *want_r, const char *want_c) {
    sp_expect(split, text, inside, want_r, want_c);
}

int main(void) {
    t_seed();
    /* Qwen3: <think>\nR\n</think>\n\nC */
    expect("<think>\nThe user greets.\n</think>\n\nHello!", 0, "The user greets.", "Hello!");
    expect("<think>\nline 1\n\nline 2\n\n</think>\n\n\nA1\n", 0, "line 1\n\nline 2", "A1\n");
    expect("\n <think>x</think>y", 0, "x", "y");
    /* an empty block (enable_thinking false writes it in the prompt; a model may still write one) */
    expect("<think>\n\n</think>\n\nJust the answer.", 0, "", "Just the answer.");
    /* no block, or one that does not open the answer: all content, whitespace kept */
    expect("Hello <think>not reasoning</think>", 0, "", "Hello <think>not reasoning</think>");
    expect("  \nplain", 0, "", "  \nplain");
    expect("<thin", 0, "", "<thin");
    expect("<thinking>x</thinking>", 0, "", "<thinking>x</thinking>");
    expect("", 0, "", "");
    expect("<think>", 0, "", "");
    /* cut short inside the block (max_tokens): all reasoning */
    expect("<think>\nstill thinking\n\n", 0, "still thinking", "");
    expect("<think>\nalmost </thi", 0, "almost </thi", "");
    /* tag-like text inside the reasoning stays reasoning */
    expect("<think>a </b> <\\think> </thinker> \n</thin\nb\n</think>c", 0, "a </b> <\\think> </thinker> \n</thin\nb", "c");
    /* the prompt ended inside a block (DeepSeek-R1's template): no opening tag in the answer */
    expect("\nR1 reasons.\n</think>\n\nAnswer.", 1, "R1 reasons.", "Answer.");
    expect("Answer without closing", 1, "Answer without closing", "");
    /* UTF-8 through the split */
    expect("<think>\n日本語 😀\n</think>\n\nça va", 0, "日本語 😀", "ça va");
    /* long runs of newlines and whitespace beyond the hold */
    char lots[400];
    memset(lots, '\n', 300);
    strcpy(lots + 300, "x");
    expect(lots, 0, "", lots);
    char in_think[420] = "<think>a";
    memset(in_think + 8, '\n', 300);
    strcpy(in_think + 308, "b</think>c");
    char want_r[320] = "a";
    memset(want_r + 1, '\n', 300);
    strcpy(want_r + 301, "b");
    expect(in_think, 0, want_r, "c");

    /* random pieces of random answers from tag fragments */
    static const char *frag[] = {"<think>", "</think>", "<", "</", "<thi", "</thin", "\n", " ", "a", "é", "think", ">"};
    sp_random(split, frag, (int)(sizeof frag / sizeof *frag), 3000);

    CHECK(think_open_at_end("<|im_start|>assistant\n<think>\n"));
    CHECK(!think_open_at_end("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
    CHECK(!think_open_at_end("no tags"));
    CHECK(think_open_at_end("<think>a</think> then <think>"));
    return t_done("test_serve_reasoning");
}
