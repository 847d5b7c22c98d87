/* Reasoning apart from content (see reasoning.h), a byte at a time: the
 * tags are short and the text is a stream's few bytes a token. */
#include "reasoning.h"

#include <string.h>

#include "doppler.h"

static const char OPEN[] = "<think>", CLOSE[] = "</think>";

enum {
    TS_START,   /* nothing decided: whitespace and a prefix of <think> held */
    TS_LEAD,    /* after <think>: its newlines dropped */
    TS_THINK,   /* reasoning; held: newlines and a prefix of </think> */
    TS_AFTER,   /* after </think>: whitespace dropped */
    TS_CONTENT, /* everything else */
};

void think_init(think_split *t, int inside) {
    memset(t, 0, sizeof *t);
    t->state = inside ? TS_LEAD : TS_START;
}

static int is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

/* Whether the held bytes may still become whitespace + <think> (START) or
 * newlines + </think> (THINK). */
static int may_be_tag(const think_split *t, const char *tag, int space_any) {
    int i = 0;
    while (i < t->n_hold && (space_any ? is_space(t->hold[i]) : t->hold[i] == '\n')) i++;
    const int rest = t->n_hold - i, len = (int)strlen(tag);
    return rest <= len && !memcmp(t->hold + i, tag, (size_t)rest);
}

static int hold_ends_with(const think_split *t, const char *tag) {
    const int len = (int)strlen(tag);
    return t->n_hold >= len && !memcmp(t->hold + t->n_hold - len, tag, (size_t)len);
}

static void byte(think_split *t, char c, sbuf *reasoning, sbuf *content) {
    switch (t->state) {
    case TS_START:
        t->hold[t->n_hold++] = c;
        if (may_be_tag(t, OPEN, 1) && t->n_hold < THINK_HOLD) {
            if (hold_ends_with(t, OPEN)) t->state = TS_LEAD, t->n_hold = 0;
            return;
        }
        sb_add(content, t->hold, (size_t)t->n_hold); /* no <think>: all of it is content */
        t->n_hold = 0;
        t->state = TS_CONTENT;
        return;
    case TS_LEAD:
        if (c == '\n') return;
        t->state = TS_THINK;
        /* fall through */
    case TS_THINK:
        t->hold[t->n_hold++] = c;
        if (hold_ends_with(t, CLOSE) && may_be_tag(t, CLOSE, 0)) {
            t->state = TS_AFTER, t->n_hold = 0;
            return;
        }
        /* release from the front until the rest may still be newlines + </think> */
        int k = 0;
        while (k < t->n_hold) {
            think_split rest = *t;
            memmove(rest.hold, t->hold + k, (size_t)(t->n_hold - k));
            rest.n_hold = t->n_hold - k;
            if (rest.n_hold < THINK_HOLD && may_be_tag(&rest, CLOSE, 0)) break;
            k++;
        }
        sb_add(reasoning, t->hold, (size_t)k);
        memmove(t->hold, t->hold + k, (size_t)(t->n_hold - k));
        t->n_hold -= k;
        return;
    case TS_AFTER:
        if (is_space(c)) return;
        t->state = TS_CONTENT;
        /* fall through */
    default:
        sb_add(content, &c, 1);
    }
}

void think_feed(think_split *t, const char *s, size_t n, sbuf *reasoning, sbuf *content) {
    for (size_t i = 0; i < n; i++) byte(t, s[i], reasoning, content);
}

void think_flush(think_split *t, sbuf *reasoning, sbuf *content) {
    if (t->state == TS_THINK) {
        /* an unfinished block: its trailing newlines go, as they would before </think> */
        int n = t->n_hold;
        while (n > 0 && t->hold[n - 1] == '\n') n--;
        sb_add(reasoning, t->hold, (size_t)n);
    } else if (t->state == TS_START) {
        sb_add(content, t->hold, (size_t)t->n_hold);
    }
    t->n_hold = 0;
}

int think_open_at_end(const char *text) {
    const char *last = NULL;
    for (const char *p = strstr(text, OPEN); p; p = strstr(p + 1, OPEN)) last = p;
    return last && !strstr(last, CLOSE);
}

/* text ends with a closed block (and whitespace) */
static int think_closed_at_end(const char *text) {
    size_t n = strlen(text), c = strlen(CLOSE);
    while (n && (text[n - 1] == ' ' || text[n - 1] == '\n' || text[n - 1] == '\r' || text[n - 1] == '\t')) n--;
    return n >= c && !memcmp(text + n - c, CLOSE, c);
}

int think_constraint_mode(const char *text, int template_thinks) {
    if (think_open_at_end(text)) return DP_THINK_INSIDE;
    return template_thinks && !think_closed_at_end(text) ? DP_THINK_MAY_OPEN : DP_THINK_NONE;
}
