/* doppler serve's tool-call split (tools/serve/toolcall.c): answers in the
 * <tool_call> format of Qwen and Hermes templates, with text around the
 * calls, several calls, broken and open blocks, tag-like text; each cut at
 * every byte and in random pieces (a stream's split must equal the whole
 * text's). And tool_choice's schema of a call: what its constraint lets
 * through is split into that call.
 *
 * A stream's deltas (calls_next): an unsure split sends each call whole;
 * a sure one (text drawn under the constraint) sends the name first, then
 * fragments that a client, decoding each chunk's JSON string, joins into
 * the arguments the whole answer has, cJSON's text. A sure call the answer
 * cuts (max_tokens, a stop string) once its name is known is a call of the
 * answer not streamed too, its arguments what the stream sent: cut at every
 * byte, in both formats. Random texts the constraint takes (its byte
 * machine walked at random) are split sure in random pieces against their
 * unsure split, and cut short anywhere. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "constrain/json_machine.h"

#include "serve_split.h"
#include "testlib.h"
#include "toolcall.h"

/* content and the calls as "name(arguments);" of text fed in pieces cut at cuts[0..n_cuts); json: the
 * format is TOOLS_JSON, else TOOLS_TAGGED */
static void split(const char *text, const size_t *cuts, int n_cuts, int json, sbuf *content, sbuf *calls) {
    call_split c;
    calls_init(&c, json ? TOOLS_JSON : TOOLS_TAGGED);
    size_t at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        const size_t end = i < n_cuts ? cuts[i] : strlen(text);
        calls_feed(&c, text + at, end - at, content);
        at = end;
    }
    calls_flush(&c, content);
    for (int i = 0; i < c.n_calls; i++) sb_printf(calls, "%s(%s);", c.calls[i].name, c.calls[i].arguments);
    CHECK(!c.oom);
    calls_free(&c);
}

enum { O_JSON = 1, O_SURE = 2, O_LIVE = 4 }; /* TOOLS_JSON; a sure split; deltas taken after every piece */

#define MAX_STREAMED 32

/* A stream's calls as a client gets them. */
typedef struct {
    sbuf name[MAX_STREAMED], args[MAX_STREAMED];
    int n, frags;
} streamed;

static int most_frags; /* the most fragments of one stream's call (O_SURE) */

/* s[0..n) as a client reads it: the JSON string the server writes, decoded. */
static void client_add(sbuf *to, const char *s, size_t n) {
    sbuf j = {0};
    sb_json_str(&j, s, n);
    cJSON *v = cJSON_Parse(j.s);
    CHECKF(cJSON_IsString(v), "%s", j.s);
    if (cJSON_IsString(v)) sb_puts(to, v->valuestring);
    cJSON_Delete(v);
    sb_free(&j);
}

/* The deltas c has ready, checked: a call's first names it (arguments "" when sure, all of them otherwise),
 * fragments (sure only) follow the first of the last call begun. */
static void take(call_split *c, int sure, streamed *st) {
    call_delta d;
    while (calls_next(c, &d)) {
        if (d.name) {
            CHECKF(d.index == st->n && st->n < MAX_STREAMED && d.name[0] && (!sure || !d.n), "call %d of %d: %s",
                   d.index, st->n, d.name);
            if (d.index != st->n || st->n == MAX_STREAMED) return;
            sb_puts(&st->name[st->n], d.name);
            client_add(&st->args[st->n++], d.args, d.n);
            st->frags = 0;
        } else {
            CHECKF(sure && st->n && d.index == st->n - 1 && d.n, "a fragment of call %d, %d begun", d.index, st->n);
            if (!st->n || d.index != st->n - 1) return;
            client_add(&st->args[st->n - 1], d.args, d.n);
            if (++st->frags > most_frags) most_frags = st->frags;
        }
    }
}

/* content and the calls as a stream sends them, "name(arguments);", of text fed in pieces (opt: O_*) */
static void stream(const char *text, const size_t *cuts, int n_cuts, int opt, sbuf *content, sbuf *calls) {
    call_split c;
    calls_init(&c, opt & O_JSON ? TOOLS_JSON : TOOLS_TAGGED);
    c.sure = (opt & O_SURE) != 0;
    streamed st;
    memset(&st, 0, sizeof st);
    size_t at = 0;
    for (int i = 0; i <= n_cuts; i++) {
        const size_t end = i < n_cuts ? cuts[i] : strlen(text);
        calls_feed(&c, text + at, end - at, content);
        at = end;
        if (opt & O_LIVE) take(&c, c.sure, &st);
    }
    calls_flush(&c, content);
    take(&c, c.sure, &st);
    /* the whole answer's calls, a call the answer cut included */
    CHECKF(st.n == c.n_calls, "'%s': %d calls sent, %d", text, st.n, c.n_calls);
    for (int i = 0; i < c.n_calls && i < st.n; i++) {
        sbuf whole = {0};
        client_add(&whole, c.calls[i].arguments, strlen(c.calls[i].arguments));
        CHECKF(!strcmp(st.name[i].s, c.calls[i].name) && !strcmp(sp_str(&st.args[i]), sp_str(&whole)),
               "'%s': sent %s(%s), the call is %s(%s)", text, st.name[i].s, sp_str(&st.args[i]), c.calls[i].name,
               c.calls[i].arguments);
        sb_free(&whole);
    }
    for (int i = 0; i < st.n; i++) sb_printf(calls, "%s(%s);", st.name[i].s, sp_str(&st.args[i]));
    CHECK(!c.oom);
    for (int i = 0; i < MAX_STREAMED; i++) sb_free(&st.name[i]), sb_free(&st.args[i]);
    calls_free(&c);
}

/* the split, and an unsure stream, which sends each call whole as the split has it */
static void expect(const char *text, const char *want_content, const char *want_calls) {
    sp_expect(split, text, 0, want_content, want_calls);
    sp_expect(stream, text, O_LIVE, want_content, want_calls);
}

static void expect_json(const char *text, const char *want_content, const char *want_calls) {
    sp_expect(split, text, 1, want_content, want_calls);
    sp_expect(stream, text, O_JSON | O_LIVE, want_content, want_calls);
}

/* A sure split streamed live and whole (deltas taken only at the end, as for an answer not streamed), the
 * same; the unsure split of the text. */
static void expect_cut(int opt, const char *text, const char *sure_content, const char *sure_calls,
                       const char *unsure_content, const char *unsure_calls) {
    sp_expect(stream, text, opt | O_SURE | O_LIVE, sure_content, sure_calls);
    sp_expect(stream, text, opt | O_SURE, sure_content, sure_calls);
    sp_expect(split, text, opt & O_JSON, unsure_content, unsure_calls);
}

/* The same where the unsure split finds what the sure one does. */
static void expect_sure(int opt, const char *text, const char *want_content, const char *want_calls) {
    expect_cut(opt, text, want_content, want_calls, want_content, want_calls);
}

/* A sure split of text (calls, the last one's JSON complete) cut at every byte, as max_tokens or a stop string
 * may cut it: the answer not streamed (fed whole, no delta taken before the end) has the calls that a stream's
 * deltas add up to (fed a byte at a time, the deltas taken after each), names and arguments byte for byte, and
 * the same content. A call whose name was read by the cut is one of them, cut short (c.cut) while its JSON is
 * open, its arguments then a prefix of those of the whole text's call. */
static void cut_everywhere(int json, const char *text) {
    const int format = json ? TOOLS_JSON : TOOLS_TAGGED;
    const size_t n = strlen(text);
    call_split all, at;
    sbuf all_content = {0}, at_content = {0};
    calls_init(&all, format), calls_init(&at, format);
    all.sure = at.sure = 1;
    calls_feed(&all, text, n, &all_content);
    calls_flush(&all, &all_content);
    CHECKF(all.n_calls > 0 && !all.cut, "'%s': %d calls", text, all.n_calls);
    int cuts_in_call = 0;
    for (size_t len = 0; len <= n; len++) {
        if (len) calls_feed(&at, text + len - 1, 1, &at_content); /* where the split is after len bytes */
        const int named = at.in_call && at.scan.named, open = named && at.scan.depth > 0;
        call_split w, s;
        sbuf wc = {0}, sc = {0}, names[4] = {{0}}, args[4] = {{0}};
        calls_init(&w, format), calls_init(&s, format);
        w.sure = s.sure = 1;
        calls_feed(&w, text, len, &wc);
        calls_flush(&w, &wc);
        int sent = 0;
        call_delta d;
        for (size_t k = 0; k <= len; k++) {
            if (k < len) calls_feed(&s, text + k, 1, &sc);
            else calls_flush(&s, &sc);
            while (calls_next(&s, &d)) {
                if (d.name) sent++;
                CHECKF(d.index == sent - 1 && sent <= 4, "'%.*s': delta of call %d, %d begun", (int)len, text, d.index,
                       sent);
                if (d.index != sent - 1 || sent > 4) continue;
                if (d.name) sb_puts(&names[d.index], d.name);
                sb_add(&args[d.index], d.args, d.n);
            }
        }
        CHECKF(w.n_calls == at.n_calls + named && sent == w.n_calls && w.cut == open &&
                   !strcmp(sp_str(&wc), sp_str(&sc)),
               "'%.*s': %d calls (%d before, named %d), %d sent, cut %d (open %d), content '%s' / streamed '%s'",
               (int)len, text, w.n_calls, at.n_calls, named, sent, w.cut, open, sp_str(&wc), sp_str(&sc));
        for (int i = 0; i < w.n_calls && i < sent && i < all.n_calls; i++) {
            const char *a = w.calls[i].arguments, *whole = all.calls[i].arguments;
            CHECKF(!strcmp(w.calls[i].name, sp_str(&names[i])) && !strcmp(a, sp_str(&args[i])) &&
                       strlen(a) == args[i].n && !strcmp(w.calls[i].name, all.calls[i].name) &&
                       (open && i == w.n_calls - 1 ? !strncmp(a, whole, strlen(a)) : !strcmp(a, whole)),
                   "'%.*s': call %d %s(%s), streamed %s(%s), the whole text's %s(%s)", (int)len, text, i,
                   w.calls[i].name, a, sp_str(&names[i]), sp_str(&args[i]), all.calls[i].name, whole);
        }
        cuts_in_call += open;
        CHECK(!w.oom && !s.oom);
        calls_free(&w), calls_free(&s);
        sb_free(&wc), sb_free(&sc);
        for (int i = 0; i < 4; i++) sb_free(&names[i]), sb_free(&args[i]);
    }
    CHECKF(cuts_in_call > 20, "'%s': %d cuts inside a named call", text, cuts_in_call);
    calls_free(&all), calls_free(&at);
    sb_free(&all_content), sb_free(&at_content);
}

/* The bytes a random walk may write, the rarer ones once. */
static const char ALPHA[] = "\"{}[]:,\\/-+.0123456789abcdefghijklmnopqrstuvwxyzEFUP<>_"
                            "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80 \n\t";

/* A random text the schema's machine takes (from st on): bytes of ALPHA it allows, drawn at random for about
 * budget bytes, then those that close what is open first. Stops where the text may end (block: as soon as it
 * may, the end of a block of free text). 0 when it went on too long. */
static int walk(const jschema *S, jstate *st, sbuf *out, int budget, int block) {
    static const char close_first[] = "\"}]</tool_call>";
    jstate tmp;
    for (int step = 0; step < 2000; step++) {
        if (jm_done(S, st)) return 1;
        if (jm_can_end(S, st) && (block || step > budget || t_rand_u64() % 4 == 0)) return 1;
        unsigned char ok[sizeof ALPHA];
        int n_ok = 0, n_ws = 0, best = -1, best_rank = 1 << 20;
        for (int i = 0; ALPHA[i]; i++) {
            const unsigned char b = (unsigned char)ALPHA[i];
            if (!jm_feed_to(S, st, b, &tmp)) continue;
            const int ws = b == ' ' || b == '\n' || b == '\t';
            const char *at = strchr(close_first, b);
            const int rank = at ? (int)(at - close_first) : 100 + i + ws * 100;
            if (rank < best_rank) best_rank = rank, best = n_ok;
            n_ws += ws;
            ok[n_ok++] = b;
        }
        if (!n_ok) return 0;
        /* whitespace, last in ALPHA, only now and then */
        const int pool = n_ws < n_ok && t_rand_u64() % 8 ? n_ok - n_ws : n_ok;
        unsigned char b = ok[t_rand_u64() % (uint64_t)pool];
        if (step > budget) b = ok[best];
        jm_feed(S, st, b);
        sb_add(out, (const char *)&b, 1);
    }
    return 0;
}

/* A text the constraint of a call in the format takes: repeat > 0 of tool_choice "required" (blocks in a row),
 * 0 of "auto" (free text around blocks). 0 when the walk went on too long. */
static int draw(const jschema *S, int repeat, sbuf *text) {
    static const char *free_text[] = {"Let me check. ", "\n", "<tool", "a < b", "</tool_call>", " ", "é"};
    jstate st;
    jm_start(S, &st, 0);
    if (repeat) return walk(S, &st, text, (int)(t_rand_u64() % 200), 0);
    const int blocks = 1 + (int)(t_rand_u64() % 3);
    for (int k = 0; k < blocks; k++) {
        for (int f = (int)(t_rand_u64() % 3); f > 0; f--) {
            const char *t = free_text[t_rand_u64() % (sizeof free_text / sizeof *free_text)];
            jm_feed_bytes(S, &st, (const uint8_t *)t, (int)strlen(t));
            sb_puts(text, t);
        }
        sb_puts(text, "<tool_call>");
        if (jm_feed_bytes(S, &st, (const uint8_t *)"<tool_call>", 11) <= 0 ||
            !walk(S, &st, text, (int)(t_rand_u64() % 200), 1))
            return 0;
    }
    return 1;
}

/* Up to 8 random ascending cuts of n bytes. */
static int random_cuts(size_t n, size_t *cuts) {
    int nc = 0;
    for (int k = 0; k < 8; k++) {
        const size_t at = (size_t)(t_rand_u64() % (n + 1));
        if (!nc || at >= cuts[nc - 1]) cuts[nc++] = at;
    }
    return nc;
}

/* Texts the constraint takes: split sure, live, in two pieces cut anywhere, a byte at a time and in random
 * pieces, as the unsure split of the whole text; cut short anywhere (max_tokens), split sure live and whole
 * the same, and as the unsure split but for the call left open, a call of the sure split only. */
static void sure_walks(const jschema *S, int format, int repeat, int n) {
    const int json = format == TOOLS_JSON;
    int drawn = 0;
    for (int it = 0; it < n; it++) {
        sbuf text = {0}, content = {0}, calls = {0};
        if (draw(S, repeat, &text)) {
            drawn++;
            split(text.s, NULL, 0, json, &content, &calls);
            CHECKF(calls.n, "no call in '%s'", text.s);
            const int opt = json | O_SURE | O_LIVE;
            sp_expect(stream, text.s, opt, sp_str(&content), sp_str(&calls));
            size_t cuts[8];
            sp_same(stream, text.s, opt, cuts, random_cuts(text.n, cuts), &content, &calls, "in random pieces");
            const size_t cut = (size_t)(t_rand_u64() % text.n);
            text.s[cut] = 0;
            sbuf c2 = {0}, k2 = {0}, c3 = {0}, k3 = {0};
            split(text.s, NULL, 0, json, &c2, &k2);
            stream(text.s, NULL, 0, opt, &c3, &k3);
            sp_expect(stream, text.s, json | O_SURE, sp_str(&c3), sp_str(&k3));
            CHECKF(!strncmp(sp_str(&c2), sp_str(&c3), c3.n) && !strncmp(sp_str(&k3), sp_str(&k2), k2.n),
                   "'%s' cut short: live '%s' '%s', whole '%s' '%s'", text.s, sp_str(&c3), sp_str(&k3), sp_str(&c2),
                   sp_str(&k2));
            sp_same(stream, text.s, opt, cuts, random_cuts(cut, cuts), &c3, &k3, "cut short, in random pieces");
            sb_free(&c2), sb_free(&k2), sb_free(&c3), sb_free(&k3);
        }
        sb_free(&text), sb_free(&content), sb_free(&calls);
    }
    CHECKF(drawn > n / 2, "%d of %d walks ended", drawn, n);
}

int main(void) {
    t_seed();
    /* Qwen2.5 / Qwen3 / Hermes: one call, several, text before them */
    expect("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n</tool_call>",
           "", "get_weather({\"city\":\"Paris\",\"unit\":\"c\"});");
    expect("Let me check both.\n<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>\n",
           "Let me check both.", "w({\"city\":\"Paris\"});w({\"city\":\"Rome\"});");
    /* arguments as a JSON string stay that string; none is {}; Llama's "parameters" */
    expect("<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>", "", "f({\"a\": 1});");
    expect("<tool_call>{\"name\": \"now\"}</tool_call>", "", "now({});");
    expect("<tool_call>{\"name\": \"f\", \"parameters\": {\"x\": [1, 2]}}</tool_call>", "", "f({\"x\":[1,2]});");
    /* no call: the text as it is, whitespace kept */
    expect("No tools needed, thanks. \n", "No tools needed, thanks. \n", "");
    expect("  a <tool b <tool_ca <<tool_call", "  a <tool b <tool_ca <<tool_call", "");
    expect("", "", "");
    /* broken or open blocks stay text */
    expect("<tool_call>\nnot json\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", "");
    expect("<tool_call>{\"arguments\": {}}</tool_call>", "<tool_call>{\"arguments\": {}}</tool_call>", "");
    expect("<tool_call>{\"name\": \"f\"} x</tool_call>", "<tool_call>{\"name\": \"f\"} x</tool_call>", "");
    expect("x <tool_call>{\"name\": \"f\"", "x <tool_call>{\"name\": \"f\"", "");
    /* a '<' right before the tag, text after a call, a broken block beside a good one */
    expect("x<<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> done",
           "x< done", "f({});");
    expect("<tool_call>[1]</tool_call>\n<tool_call>{\"name\": \"g\", \"arguments\": {\"q\": \"é😀\"}}</tool_call>",
           "<tool_call>[1]</tool_call>", "g({\"q\":\"é😀\"});");

    /* Llama 3.1's JSON: the whole answer is the call, or it is content */
    expect_json("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
                "get_weather({\"city\":\"Paris\"});");
    expect_json("\n {\"name\": \"f\", \"arguments\": {\"a\": [1]}} \n", "", "f({\"a\":[1]});");
    expect_json("The weather in Paris is sunny. {\"name\": \"f\"}", "The weather in Paris is sunny. {\"name\": \"f\"}",
                "");
    expect_json("  {\"name\": \"f\", \"parameters\": {}} and more", "  {\"name\": \"f\", \"parameters\": {}} and more",
                "");
    expect_json("{\"city\": \"Paris\"}", "{\"city\": \"Paris\"}", "");
    expect_json("{\"name\": \"f\", \"par", "{\"name\": \"f\", \"par", "");
    expect_json(" \n", " \n", "");
    expect_json("<tool_call>{\"name\": \"f\"}</tool_call>", "<tool_call>{\"name\": \"f\"}</tool_call>", "");
    CHECK(tools_format("...<tool_call>\n{\"name\": ...") == TOOLS_TAGGED);
    CHECK(tools_format("Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name and "
                       "its value}.") == TOOLS_JSON);
    CHECK(tools_format("{{ messages }}") == TOOLS_NONE && tools_format(NULL) == TOOLS_NONE);

    /* tool_choice: the schema of one call; the texts its constraint takes (one call, or with repeat up to
     * that many in a row: parallel_tool_calls) split into those calls */
    const char *tools = "[{\"type\": \"function\", \"function\": {\"name\": \"w\", \"parameters\": {\"type\": "
                        "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}, "
                        "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";
    static const struct {
        int format;
        const char *name, *text, *calls;
        int taken, repeat;
    } tc[] = {
        {TOOLS_TAGGED, NULL, "<tool_call>\n{\"name\": \"w\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
         "w({\"city\":\"Paris\"});", 1, 1},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", "now({});", 1, 1},
        {TOOLS_TAGGED, "now", "<tool_call>{\"name\":\"w\",\"arguments\":{\"city\":\"P\"}}</tool_call>", "", 0, 1},
        {TOOLS_TAGGED, NULL, "{\"name\":\"now\",\"arguments\":{}}", "", 0, 1},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"w\",\"arguments\":{}}</tool_call>", "", 0, 1}, /* city required */
        {TOOLS_JSON, NULL, "{\"name\": \"w\", \"parameters\": {\"city\": \"Oslo\"}}", "w({\"city\":\"Oslo\"});", 1, 1},
        {TOOLS_JSON, "w", "{\"name\": \"w\", \"arguments\": {\"city\": \"Oslo\"}}", "", 0, 1},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"w\",\"arguments\":{\"city\":\"P\"}}</tool_call>\n<tool_call>"
         "{\"name\":\"now\",\"arguments\":{}}</tool_call>", "w({\"city\":\"P\"});now({});", 1, 16},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", "now({});", 1, 16},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call><tool_call>"
         "{\"name\":\"now\",\"arguments\":{}}</tool_call>", "", 0, 1},
        {TOOLS_TAGGED, NULL, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>x", "", 0, 16},
    };
    for (int i = 0; i < (int)(sizeof tc / sizeof *tc); i++) {
        const char *before, *after;
        char *sch = calls_schema(tools, tc[i].name, tc[i].format, &before, &after);
        jschema S;
        char err[200];
        CHECKF(sch && !jschema_compile(&S, sch, strlen(sch), err, sizeof err), "%d: %s", i, sch ? err : "no schema");
        if (!sch) continue;
        CHECK((tc[i].format == TOOLS_TAGGED) == (before && after && !strcmp(before, "<tool_call>") &&
                                                 !strcmp(after, "</tool_call>")));
        S.before = before, S.after = after, S.repeat = tc[i].repeat;
        jstate st;
        jm_start(&S, &st, 0);
        const int taken = jm_feed_bytes(&S, &st, (const uint8_t *)tc[i].text, (int)strlen(tc[i].text)) > 0 &&
                          (tc[i].repeat > 1 ? jm_can_end(&S, &st) : jm_done(&S, &st));
        CHECKF(taken == tc[i].taken, "%d: taken %d: %s", i, taken, tc[i].text);
        if (taken) {
            sbuf content = {0}, calls = {0};
            split(tc[i].text, NULL, 0, tc[i].format == TOOLS_JSON, &content, &calls);
            CHECKF(!content.n && calls.n && !strcmp(calls.s, tc[i].calls), "%d: content '%s', calls '%s'", i,
                   content.n ? content.s : "", calls.n ? calls.s : "");
            sp_expect(stream, tc[i].text, (tc[i].format == TOOLS_JSON) | O_SURE | O_LIVE, "", tc[i].calls);
            sb_free(&content);
            sb_free(&calls);
        }
        S.before = S.after = NULL, S.repeat = 0;
        jschema_free(&S);
        cJSON_free(sch);
    }

    /* a sure split streams a call as it is written: the name first, then fragments of cJSON's text of the
     * arguments (compact, numbers as cJSON prints them, escapes decoded and written again), the same live and
     * whole; a byte at a time, many fragments */
    most_frags = 0;
    expect_sure(0,
                "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"unit\": \"c\"}}\n"
                "</tool_call>",
                "", "get_weather({\"city\":\"Paris\",\"unit\":\"c\"});");
    CHECKF(most_frags > 10, "%d fragments", most_frags);
    expect_sure(0,
                "Sure.\n<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2.50, -0, 1E2, 0.1, true, null, {}, []],"
                " \"s\": \"\\u00e9\\n\\/\\ud83d\\ude00\\u0001\\\"\"}}</tool_call> Done.",
                "Sure. Done.",
                "f({\"a\":[1,2.5,-0,100,0.1,true,null,{},[]],\"s\":\"\xc3\xa9\\n/\xf0\x9f\x98\x80\\u0001\\\"\"});");
    /* a \u0000 ends a string (cJSON's C strings), in a key too; control characters escaped as cJSON does */
    expect_sure(0,
                "<tool_call>{\"name\": \"f\", \"arguments\": {\"s\": \"ab\\u0000cd\", "
                "\"k\\u0000x\": \"\\b\\f\\r\\t\x7f\\u001f\"}}</tool_call>",
                "", "f({\"s\":\"ab\",\"k\":\"\\b\\f\\r\\t\x7f\\u001f\"});");
    /* arguments before the name: held back until it is known; escapes in the name decoded; the first of
     * duplicate members; string arguments as the text they hold; Qwen's "parameters" for want of "arguments" */
    expect_sure(0, "<tool_call>{\"arguments\": {\"q\": \"x\"}, \"name\": \"get\\u005fweather\"}</tool_call>", "",
                "get_weather({\"q\":\"x\"});");
    expect_sure(0,
                "<tool_call>{\"name\": \"f\", \"name\": \"g\", \"arguments\": {\"a\": 1}, \"arguments\": 2}"
                "</tool_call>",
                "", "f({\"a\":1});");
    expect_sure(0, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": \\\"\\u00e9\\\"}\"}</tool_call>", "",
                "f({\"a\": \"\xc3\xa9\"});");
    expect_sure(0, "<tool_call>{\"name\": \"f\", \"parameters\": {\"x\": [1, 2]}}</tool_call>", "",
                "f({\"x\":[1,2]});");
    expect_sure(0,
                "<tool_call>{\"parameters\": {\"x\": 1}, \"name\": \"f\", \"arguments\": {\"y\": 2}}</tool_call>",
                "", "f({\"y\":2});");
    expect_sure(0, "<tool_call>{\"name\": \"now\"}</tool_call>", "", "now({});");
    /* what is not a call stays text (a name that is not a string); a block after a call */
    expect_sure(0, "<tool_call>{\"name\": 1}</tool_call>", "<tool_call>{\"name\": 1}</tool_call>", "");
    expect_sure(0,
                "<tool_call>{\"name\": \"a\"}</tool_call>\n"
                "<tool_call>{\"name\": \"b\", \"arguments\": {\"k\": false}}</tool_call>",
                "", "a({});b({\"k\":false});");
    expect_sure(O_JSON, " {\"name\": \"f\", \"parameters\": {\"x\": \"\xc3\xa9\xf0\x9f\x98\x80\"}}", "",
                "f({\"x\":\"\xc3\xa9\xf0\x9f\x98\x80\"});");
    expect_sure(O_JSON, "It is sunny.", "It is sunny.", "");
    /* cut short (max_tokens, a stop string) once the name is known: a sure split's call, live or whole, with the
     * arguments the stream could send (not half a character, nor a number, literal or escape that might have
     * gone on; "" before they begin), the whitespace before it dropped; the unsure split, which never sends a
     * block before it closes, keeps it as text. Before the name is complete nothing was sent: text either way. */
    expect_cut(0, "Hi <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"\xc3\xa9\xc3", "Hi",
               "f({\"a\":\"\xc3\xa9);",
               "Hi <tool_call>{\"name\": \"f\", \"arguments\": {\"a\": \"\xc3\xa9\xc3", "");
    expect_cut(0, "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 12", "", "f({\"a\":);",
               "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 12", "");
    expect_cut(0, "Hi \n<tool_call>{\"name\": \"f\", \"argu", "Hi", "f();", "Hi \n<tool_call>{\"name\": \"f\", \"argu",
               "");
    expect_cut(0, "<tool_call>{\"name\": \"a\"}</tool_call>\n<tool_call>{\"name\": \"b\", \"arguments\": {\"k\": [tr",
               "", "a({});b({\"k\":[);", "\n<tool_call>{\"name\": \"b\", \"arguments\": {\"k\": [tr", "a({});");
    expect_cut(0, "<tool_call>{\"name\": \"f", "<tool_call>{\"name\": \"f", "", "<tool_call>{\"name\": \"f", "");
    expect_cut(O_JSON, "{\"name\": \"f\", \"parameters\": {\"x\": [true", "", "f({\"x\":[true);",
               "{\"name\": \"f\", \"parameters\": {\"x\": [true", "");
    expect_cut(O_JSON, " {\"name\": \"f\", \"parameters\": {\"s\": \"a\\u00", "", "f({\"s\":\"a);",
               " {\"name\": \"f\", \"parameters\": {\"s\": \"a\\u00", "");
    expect_cut(O_JSON, "{\"name\": \"f", "{\"name\": \"f", "", "{\"name\": \"f", "");
    /* the call's JSON complete, its closing tag cut: a whole call, not one cut short */
    expect_cut(0, "<tool_call>{\"name\": \"f\", \"arguments\": {}}\n</tool_", "", "f({});",
               "<tool_call>{\"name\": \"f\", \"arguments\": {}}\n</tool_", "");
    /* cut at every byte: streamed or not, the same calls */
    cut_everywhere(0, "Sure.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par\\u00eds "
                      "\xc3\xa9\xf0\x9f\x98\x80\", \"days\": [1, 2.50, -3e2], \"ok\": true, \"x\": null}}\n"
                      "</tool_call>\n<tool_call>{\"name\": \"now\", \"arguments\": {\"tz\": \"UTC\\n\"}}</tool_call>");
    cut_everywhere(0, "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": \\\"\xe2\x82\xac\\\"}\"}</tool_call>");
    cut_everywhere(1, " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Oslo \xe2\x82\xac\", \"n\": 12, "
                      "\"deep\": {\"a\": [false, {}, \"\\ud83d\\ude00\"]}}}");
    /* a </tool_call> in a string of a sure call is its text (an unsure split, which cannot tell, ends the block
     * there: not a call) */
    const char *in_str = "<tool_call>{\"name\": \"f\", \"arguments\": {\"code\": \"</tool_call>\"}}\n</tool_call>";
    sp_expect(stream, in_str, O_SURE | O_LIVE, "", "f({\"code\":\"</tool_call>\"});");
    sp_expect(stream, in_str, O_SURE, "", "f({\"code\":\"</tool_call>\"});");

    /* random texts of the constraints: tool_choice "required" (parallel calls or one), a named function,
     * "auto" (free text), Llama's call */
    static const struct {
        int format, repeat;
        const char *name;
    } walks[] = {{TOOLS_TAGGED, 16, NULL}, {TOOLS_TAGGED, 1, NULL}, {TOOLS_TAGGED, 1, "now"}, {TOOLS_TAGGED, 0, NULL},
                 {TOOLS_JSON, 1, NULL}};
    for (int i = 0; i < (int)(sizeof walks / sizeof *walks); i++) {
        const char *before, *after;
        char *sch = calls_schema(tools, walks[i].name, walks[i].format, &before, &after);
        jschema S;
        char err[200];
        CHECKF(sch && !jschema_compile(&S, sch, strlen(sch), err, sizeof err), "walk %d", i);
        if (!sch) continue;
        S.before = before, S.after = after, S.repeat = walks[i].repeat, S.free_text = !walks[i].repeat;
        sure_walks(&S, walks[i].format, walks[i].repeat, 150);
        S.before = S.after = NULL, S.repeat = 0, S.free_text = 0;
        jschema_free(&S);
        cJSON_free(sch);
    }

    /* random pieces of random answers from tag and JSON fragments, in either format */
    static const char *frag[] = {"<tool_call>", "</tool_call>", "<", "</", "<tool", "</tool_", "\n", " ", "a",
                                 "{\"name\": \"f\", \"arguments\": {}}", "{", "é"};
    sp_random(split, frag, (int)(sizeof frag / sizeof *frag), 3000);
    /* and streamed by a sure split, JSON or not: the same in any pieces */
    static const char *sure_frag[] = {"<tool_call>", "</tool_call>", "<", "{\"name\": \"f\"", ", \"arguments\": ",
                                      "{\"a\": ", "\"x\\\"", "[1", "}", "]", " ", "\xc3\xa9", "\xe2\x82", "\\u00",
                                      "true"};
    for (int opt = O_SURE | O_LIVE; opt <= (O_SURE | O_LIVE | O_JSON); opt++)
        for (int it = 0; it < 1500; it++) {
            char text[1024] = "";
            const int nf = 1 + (int)(t_rand_u64() % 12);
            for (int k = 0; k < nf; k++) strcat(text, sure_frag[t_rand_u64() % (sizeof sure_frag / sizeof *sure_frag)]);
            sbuf a = {0}, b = {0};
            stream(text, NULL, 0, opt, &a, &b);
            size_t cuts[8];
            sp_same(stream, text, opt, cuts, random_cuts(strlen(text), cuts), &a, &b, "in random pieces");
            sb_free(&a);
            sb_free(&b);
        }
    return t_done("test_serve_toolcall");
}
