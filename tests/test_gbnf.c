/* GBNF grammars (src/constrain/gbnf.c, gbnf_machine.c): the parser's
 * refusals with their messages, the byte machine on whole texts and
 * prefixes (accepted, refused, unfinished), random byte walks that never
 * reach a dead end, and the token masks of dp_constraint_gbnf against the
 * machine fed each token's bytes one at a time.
 *
 * Also a helper of tests/serve/test_gbnf.py, which compares acceptance with
 * Python's lark:
 *   test_gbnf check GRAMMAR    hex texts on stdin: 1 a whole root, 0 not */
#include <stdlib.h>
#include <string.h>

#include "constrain/constrain.h"
#include "constrain/gbnf.h"
#include "doppler.h"
#include "testlib.h"

/* 1 complete, 2 a viable prefix, 0 refused, -1 the grammar did not compile */
static int run_text(const char *grammar, const char *text) {
    gbnf G;
    char err[240];
    if (gbnf_compile(&G, grammar, strlen(grammar), err, sizeof err)) return -1;
    static gstate st;
    gm_start(&G, &st);
    const int alive = gm_feed_bytes(&G, &st, (const uint8_t *)text, (int)strlen(text)) > 0;
    const int r = !alive ? 0 : gm_can_end(&st) ? 1 : 2;
    gbnf_free(&G);
    return r;
}

static void test_refusals(void) {
    static const struct {
        const char *grammar, *want;
    } cases[] = {
        {"root ::= foo", "undefined rule 'foo' at line 1, column 10"},
        {"start ::= \"x\"", "no rule 'root'"},
        {"root ::= \"abc", "unterminated literal at line 1, column 10"},
        {"root ::= \"a\\qb\"", "bad escape '\\q' at line 1, column 12"},
        {"root ::= \"\\x4\"", "bad escape: \\x needs 2 hex digits"},
        {"root ::= \"\\uD800\"", "bad escape: U+D800 is not a character"},
        {"root ::= \"\\U00110000\"", "bad escape: U+110000 is not a character"},
        {"root ::= [z-a]", "bad range: U+7A is above U+61 at line 1, column 11"},
        {"root ::= [a-z", "unterminated character class"},
        {"root ::= []", "empty character class"},
        {"root ::= expr\nexpr ::= expr \"+\" [0-9] | [0-9]", "left recursion in rule 'expr'"},
        {"root ::= a\na ::= b \"x\"\nb ::= \"\" | a", "left recursion in rule"},
        {"root ::= x* \"y\"\nx ::= \"a\"?", "left recursion in rule 'root'"},
        {"root ::= (\"a\" | \"b\"", "unclosed group: expected ')' at line 1, column 10"},
        {"root ::= \"a\" )", "unexpected ')' at line 1, column 14"},
        {"root ::= \"a\"\nroot ::= \"b\"", "rule 'root' defined twice at line 2, column 1"},
        {"root = \"a\"", "expected '::=' after 'root' at line 1, column 6"},
        {"root ::= \"a\"{3,2}", "maximum below its minimum"},
        {"root ::= \"a\"{1001}", "repetition bound above 1000"},
        {"root ::= \"a\"{x}", "bad repetition"},
        {"root ::= \"\xff\"", "invalid UTF-8"},
        {"# only a comment\n\n  # and another\n", "no rule 'root'"},
        {"root ::= \"a\"\n  \"b\"", "expected a rule name at line 2, column 3"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        gbnf G;
        char err[240] = "";
        const int rc = gbnf_compile(&G, cases[i].grammar, strlen(cases[i].grammar), err, sizeof err);
        CHECKF(rc == -1 && strstr(err, cases[i].want) && !strchr(err, '\n'), "case %zu: rc %d, '%s' (want '%s')", i,
               rc, err, cases[i].want);
        if (!rc) gbnf_free(&G);
    }
    /* the limits: nesting, rule count, size; each refused with a message, not a crash */
    char *big = malloc(GB_MAX_BYTES + 64);
    int n = sprintf(big, "root ::= ");
    for (int i = 0; i < GB_MAX_DEPTH + 1; i++) big[n++] = '(';
    big[n++] = '"', big[n++] = 'a', big[n++] = '"';
    for (int i = 0; i < GB_MAX_DEPTH + 1; i++) big[n++] = ')';
    big[n] = 0;
    CHECK(run_text(big, "a") == -1);
    n = sprintf(big, "root ::= ");
    for (int i = 0; i < GB_MAX_DEPTH - 1; i++) big[n++] = '(';
    big[n++] = '"', big[n++] = 'a', big[n++] = '"';
    for (int i = 0; i < GB_MAX_DEPTH - 1; i++) big[n++] = ')';
    big[n] = 0;
    CHECK(run_text(big, "a") == 1);
    n = sprintf(big, "root ::= ");
    for (int i = 0; i < 12; i++) big[n++] = '(';
    n += sprintf(big + n, "\"x\"");
    for (int i = 0; i < 12; i++) n += sprintf(big + n, "){0,1000}");
    gbnf G;
    char err[240];
    CHECKF(gbnf_compile(&G, big, (size_t)n, err, sizeof err) == -1 && strstr(err, "too many rules"), "%s", err);
    memset(big, ' ', GB_MAX_BYTES + 1);
    memcpy(big, "root ::= \"a\"", 12);
    CHECKF(gbnf_compile(&G, big, GB_MAX_BYTES + 1, err, sizeof err) == -1 && strstr(err, "longer than"), "%s", err);
    free(big);
    CHECK(dp_gbnf_check("root ::= [0-9]+", 15) == DP_OK);
    CHECK(dp_gbnf_check("root ::= x", 10) == DP_ERR_ARG && strstr(dp_last_error(), "grammar: undefined rule 'x'"));
}

static const char *JSONISH =
    "# a JSON value, whitespace-free\n"
    "root   ::= value\n"
    "value  ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ( string \":\" value (\",\" string \":\" value)* )? \"}\"\n"
    "array  ::= \"[\" ( value (\",\" value)* )? \"]\"\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1F] | \"\\\\\" [\"\\\\/bfnrt] )* \"\\\"\"\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]*) (\".\" [0-9]+)?\n";

static const char *ARITH = "root ::= expr\n"
                           "expr ::= term (ws [-+] ws term)*\n"
                           "term ::= factor (ws [*/] ws factor)*\n"
                           "factor ::= [0-9]+ | \"(\" ws expr ws \")\"  # nested\n"
                           "ws ::= [ ]?\n";

static const char *CHOICE = "root ::= (\"yes\" | \"no\" | \"maybe\" | \"yesterday\") \"\\n\"?";

static const char *UNICODE = "root ::= [a-zé\\u4e00-\\u9fff]+ \"-\" [^\\x00-\\x7F]{2} [\\U0001F600-\\U0001F64F]?";

static const char *BOUNDS = "root ::= [0-9]{2,4} (\",\" x){1,} y{3} \".\"?\n"
                            "x ::= [a-c]{0,2}\n"
                            "y ::= \"z\"";

static void test_texts(void) {
    static const struct {
        const char **grammar;
        const char *text;
        int want;
    } cases[] = {
        {&JSONISH, "{\"a\":[1,-2.5,\"x\\n\",true,null,{}],\"b\":\"\xc3\xa9\"}", 1},
        {&JSONISH, "{\"a\":[1,", 2},
        {&JSONISH, "{\"a\":01}", 0},
        {&JSONISH, "[1,]", 0},
        {&JSONISH, "\"a\tb\"", 0},
        {&JSONISH, "tru", 2},
        {&JSONISH, "truex", 0},
        {&JSONISH, "-", 2},
        {&JSONISH, "-0.5", 1},
        {&ARITH, "1+2*(3 - 4)/5", 1},
        {&ARITH, "((1))", 1},
        {&ARITH, "(1", 2},
        {&ARITH, "1 +", 2},
        {&ARITH, "1  + 2", 0},
        {&ARITH, "1+)", 0},
        {&ARITH, "", 2},
        {&CHOICE, "yes", 1},
        {&CHOICE, "yes\n", 1},
        {&CHOICE, "yest", 2},
        {&CHOICE, "yesterday", 1},
        {&CHOICE, "ye", 2},
        {&CHOICE, "nope", 0},
        {&CHOICE, "maybe\n\n", 0},
        {&UNICODE, "ab\xc3\xa9\xe4\xb8\x80-\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 1}, /* abé一-é€😀 */
        {&UNICODE, "a-\xc3\xa9\xe2\x82\xac", 1},
        {&UNICODE, "a-\xc3\xa9\xe2\x82", 2},                    /* a character cut short */
        {&UNICODE, "a-\xc3\xa9" "a", 0},                         /* ASCII in [^\x00-\x7F] */
        {&UNICODE, "\xc3\xa8-", 0},                              /* è is not in the class */
        {&UNICODE, "\xe4", 2},                                   /* U+4xxx: may be CJK */
        {&UNICODE, "\xe3", 0},                                   /* U+3xxx: none is */
        {&UNICODE, "\xe9\xbf", 2},                               /* U+9FC0..U+9FFF */
        {&UNICODE, "a-\xc3\xa9\xc3\xa9\xf0\x9f\x99\x90", 0},     /* U+1F650 is past the range */
        {&UNICODE, "a-\xc3\xa9\xc3\xa9\xf0\x9f\x98", 2},
        {&UNICODE, "a\xc0\xaf", 0},                              /* overlong */
        {&UNICODE, "a-\xed\xa0\x80", 0},                         /* an encoded surrogate */
        {&BOUNDS, "12,zzz", 1},
        {&BOUNDS, "1234,ab,,c,zzz.", 1},
        {&BOUNDS, "1,zzz", 0},
        {&BOUNDS, "12345", 0},
        {&BOUNDS, "12zzz", 0},
        {&BOUNDS, "12,abc", 0},
        {&BOUNDS, "12,zz", 2},
        {&BOUNDS, "12,zzzz", 0},
        {&BOUNDS, "12,zzz..", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const int r = run_text(*cases[i].grammar, cases[i].text);
        CHECKF(r == cases[i].want, "case %zu '%s': %d, want %d", i, cases[i].text, r, cases[i].want);
    }
    /* escapes, comments, any character, rules defined after use, newlines inside groups */
    CHECK(run_text("root ::= \"\\x41\\u00e9\\U0001F600\\t\\\"\" . # c\n", "A\xc3\xa9\xf0\x9f\x98\x80\t\"\n") == 1);
    CHECK(run_text("root ::= (\n  a |\n  b\n)\na ::= \"[\" [\\]\\-\\[] \"]\"\nb ::= [^\\n]", "[-]") == 1);
    CHECK(run_text("root ::= (\n  a |\n  b\n)\na ::= \"[\" [\\]\\-\\[] \"]\"\nb ::= [^\\n]", "\n") == 0);
    CHECK(run_text("root ::= [a-]+", "a-a") == 1);
    CHECK(run_text("root ::= .", "\xe4\xb8\x80") == 1 && run_text("root ::= .", "\xe4\xb8") == 2); /* no ranges at all */
    CHECK(run_text("root ::= \"\"", "") == 1);
    CHECK(run_text("root ::= \"a\"{0}", "a") == 0);
    CHECK(run_text("root ::= (\"ab\"){2}", "abab") == 1);
    CHECK(run_text("root ::= \"a\"{,2}", "aa") == 1 && run_text("root ::= \"a\"{ ,2}", "aaa") == 0);
    /* a long repetition runs in constant depth (a reference that ends its alternative is a tail call) */
    static char many[8001];
    memset(many, 'a', 8000);
    CHECK(run_text("root ::= \"a\"* \"b\"?", many) == 1);
    CHECK(run_text("root ::= x\nx ::= \"a\" x | \"\"", many) == 1);
    /* nesting deeper than a reading holds is narrowed (refused), never a crash */
    static char deep[2 * GM_DEPTH + 8];
    for (int i = 0; i < GM_DEPTH + 2; i++) deep[i] = '(';
    CHECK(run_text(ARITH, deep) == 0);
    deep[GM_DEPTH / 8] = 0; /* each level keeps a few return positions */
    CHECK(run_text(ARITH, deep) == 2);
    /* a done text takes nothing more */
    gbnf G;
    char err[240];
    CHECK(!gbnf_compile(&G, CHOICE, strlen(CHOICE), err, sizeof err));
    static gstate st;
    gm_start(&G, &st);
    gm_feed_bytes(&G, &st, (const uint8_t *)"no\n", 3);
    CHECK(gm_done(&st) && gm_can_end(&st));
    gm_start(&G, &st);
    gm_feed_bytes(&G, &st, (const uint8_t *)"yes", 3);
    CHECK(!gm_done(&st) && gm_can_end(&st));
    gbnf_free(&G);
}

/* A random text the machine allows, byte by byte. Returns its length, -1
 * on a dead end (a live state no byte continues, yet not whole), -2 when
 * it ran out of room. */
static int walk(const gbnf *G, char *out, int cap) {
    static gstate st, tmp;
    gm_start(G, &st);
    int n = 0;
    while (n < cap - 1) {
        if (gm_done(&st) || (gm_can_end(&st) && t_rand_unit() < 0.15)) break;
        int ok[256], nok = 0;
        for (int b = 0; b < 256; b++)
            if (gm_feed_to(G, &st, (uint8_t)b, &tmp)) ok[nok++] = b;
        if (!nok) break;
        const int b = ok[t_rand_int(0, nok - 1)];
        gm_feed(G, &st, (uint8_t)b);
        out[n++] = (char)b;
    }
    out[n] = 0;
    return gm_can_end(&st) ? n : n < cap - 1 ? -1 : -2;
}

static void test_walks(void) {
    const char *grammars[] = {JSONISH, ARITH, CHOICE, UNICODE, BOUNDS};
    for (int g = 0; g < 5; g++) {
        gbnf G;
        char err[240];
        CHECK(!gbnf_compile(&G, grammars[g], strlen(grammars[g]), err, sizeof err));
        int ended = 0;
        for (int i = 0; i < 200; i++) {
            static char text[2048];
            const int n = walk(&G, text, sizeof text);
            CHECKF(n != -1, "grammar %d: a dead end after '%s'", g, text);
            ended += n >= 0;
        }
        CHECKF(ended >= 100, "grammar %d: %d of 200 walks ended", g, ended);
        gbnf_free(&G);
    }
}

/* c's mask now, against a fresh machine fed the text so far and each
 * token's bytes one at a time (an end token: allowed when the text is a
 * whole root); the mask is left in lg (0: allowed). Returns how many
 * tokens it allows; *bad counts the tokens it gets wrong. */
static int check_mask(dp_model *m, const gbnf *G, dp_constraint *c, const char *text, size_t tl, float *lg, int g,
                      int step, int *bad) {
    const int V = dp_model_get_info(m)->n_vocab;
    static gstate base, st;
    gm_start(G, &base);
    gm_feed_bytes(G, &base, (const uint8_t *)text, (int)tl);
    for (int t = 0; t < V; t++) lg[t] = 0;
    const int k = dp_constraint_mask(c, lg, V);
    int k2 = 0;
    for (int t = 0; t < V; t++) {
        char buf[256];
        const int n = dp_token_to_bytes(m, t, 0, buf, sizeof buf);
        int want;
        if (n <= 0) {
            want = n == 0 && dp_token_is_eog(m, t) && gm_can_end(&base);
        } else {
            gm_copy(&st, &base);
            want = 1;
            for (int j = 0; j < n && want; j++) want = gm_feed(G, &st, (uint8_t)buf[j]) > 0;
        }
        k2 += want;
        if (want != (lg[t] == 0) && (*bad)++ < 5)
            CHECKF(0, "grammar %d step %d token %d: mask %d, byte by byte %d", g, step, t, lg[t] == 0, want);
    }
    CHECKF(k == k2, "grammar %d step %d: %d allowed, %d byte by byte", g, step, k, k2);
    return k;
}

/* The masks of dp_constraint_gbnf along random constrained generations
 * (check_mask at every step). */
static void test_masks(dp_model *m) {
    if (!m) return;
    const int V = dp_model_get_info(m)->n_vocab;
    const char *grammars[] = {JSONISH, ARITH, CHOICE, UNICODE, BOUNDS, "root ::= [0-9]+"};
    float *lg = malloc(sizeof(float) * (size_t)V);
    for (int g = 0; g < 6; g++) {
        gbnf G;
        char err[240];
        CHECK(!gbnf_compile(&G, grammars[g], strlen(grammars[g]), err, sizeof err));
        dp_constraint *c = dp_constraint_gbnf(m, grammars[g], strlen(grammars[g]));
        CHECKF(c != NULL, "%s", dp_last_error());
        if (!c) continue;
        static char text[4096];
        size_t tl = 0;
        int steps = 0, bad = 0, masks = 0;
        for (; steps < 30 && !dp_constraint_done(c); steps++) {
            const int k = check_mask(m, &G, c, text, tl, lg, g, steps, &bad);
            masks++;
            CHECKF(k > 0, "grammar %d step %d: no token allowed", g, steps);
            int pick = -1;
            for (int tries = 0; tries < 2000 && pick < 0; tries++) {
                const int t = t_rand_int(0, V - 1);
                if (lg[t] == 0 && (steps > 15 || !dp_token_is_eog(m, t))) pick = t;
            }
            for (int t = 0; pick < 0 && t < V; t++)
                if (lg[t] == 0) pick = t;
            if (pick < 0 || dp_token_is_eog(m, pick)) break;
            CHECK(dp_constraint_accept(c, pick) == DP_OK);
            char buf[256];
            const int n = dp_token_to_bytes(m, pick, 0, buf, sizeof buf);
            if (n > 0 && tl + (size_t)n < sizeof text) memcpy(text + tl, buf, (size_t)n), tl += (size_t)n;
        }
        text[tl] = 0;
        CHECKF(!bad, "grammar %d: %d tokens masked wrongly", g, bad);
        long hits, misses;
        dp_constraint_cache_stats(c, &hits, &misses);
        printf("grammar %d: %d steps (masks: %ld kept, %ld worked out): '%s'\n", g, steps, hits, misses, text);
        CHECKF(hits + misses == masks, "grammar %d: %ld + %ld masks, %d asked for", g, hits, misses, masks);
        /* after its first digit every state of [0-9]+ is the same: the masks above came from the cache */
        if (g == 5) CHECKF(steps < 4 || hits >= steps - 2, "grammar %d: %ld of %d masks kept", g, hits, steps);
        tl = 0;
        text[0] = 0;
        dp_constraint_free(c);
        gbnf_free(&G);
    }
    free(lg);
}

/* The masks a model keeps for a grammar's states serve its later
 * constraints too; states that hold the same readings and differ only in a
 * character cut short must not share one: the start of [^\x00-\x7F]+ and the
 * state after a lone lead byte (E0: no bits of the code point yet; C3 and
 * E4 too) keep the one reading, but after the lead byte only continuation
 * bytes may come. Byte-level vocabularies have a token for each byte. */
static void test_split_chars(dp_model *m) {
    if (!m) return;
    const char *grammar = "root ::= [^\\x00-\\x7F]+";
    const int V = dp_model_get_info(m)->n_vocab;
    float *lg = malloc(sizeof(float) * (size_t)V);
    gbnf G;
    char err[240];
    CHECK(!gbnf_compile(&G, grammar, strlen(grammar), err, sizeof err));
    static const char *const leads[] = {"\xe0", "\xc3", "\xe4", "\xf0\x9f"};
    for (int l = 0; l < 4; l++) {
        dp_constraint *c = dp_constraint_gbnf(m, grammar, strlen(grammar));
        if (!c) break;
        int bad = 0;
        check_mask(m, &G, c, "", 0, lg, 10 + l, 0, &bad); /* the start's mask, kept */
        long hits, misses;
        dp_constraint_cache_stats(c, &hits, &misses);
        /* the model keeps the masks for every constraint of the same grammar */
        CHECKF(hits == (l > 0) && misses == (l == 0), "lead %d: start mask kept %ld, worked out %ld", l, hits, misses);
        int fed = 1;
        for (const char *p = leads[l]; *p && fed; p++) { /* each byte's own token */
            int32_t tok = -1;
            for (int t = 0; t < V && tok < 0; t++) {
                char buf[8];
                if (dp_token_to_bytes(m, t, 0, buf, sizeof buf) == 1 && buf[0] == *p) tok = t;
            }
            fed = tok >= 0 && dp_constraint_accept(c, tok) == DP_OK;
        }
        CHECKF(fed, "lead %d: a byte without its token, or refused", l);
        check_mask(m, &G, c, leads[l], strlen(leads[l]), lg, 10 + l, 1, &bad);
        CHECKF(!bad, "lead %d: %d tokens masked wrongly after a cut character", l, bad);
        dp_constraint_free(c);
    }
    gbnf_free(&G);
    free(lg);
}

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

static int helper(const char *grammar) {
    gbnf G;
    char err[240];
    if (gbnf_compile(&G, grammar, strlen(grammar), err, sizeof err)) {
        fprintf(stderr, "grammar: %s\n", err);
        return 2;
    }
    static char line[65536];
    static gstate st;
    while (fgets(line, sizeof line, stdin)) {
        gm_start(&G, &st);
        int ok = 1;
        for (char *p = line; p[0] && p[0] != '\n' && p[1] && ok; p += 2)
            ok = gm_feed(&G, &st, (uint8_t)(hexval(p[0]) * 16 + hexval(p[1]))) > 0;
        printf("%d\n", ok && gm_can_end(&st));
    }
    gbnf_free(&G);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "check")) return helper(argv[2]);
    t_seed();
    test_refusals();
    test_texts();
    test_walks();
    /* byte-level vocabularies of a few hundred tokens, then a real one (many tokens share long prefixes) */
    static const char *const fixtures[] = {"tests/fixtures/models/qwen3-tiny.gguf", "tests/fixtures/models/llama-tiny.gguf"};
    for (int i = 0; i < 2; i++) {
        dp_model *m = dp_model_load(t_src_path(fixtures[i]));
        CHECKF(m != NULL, "%s: %s", fixtures[i], dp_last_error());
        test_masks(m);
        test_split_chars(m);
        dp_model_free(m);
    }
    dp_model *m = t_load_cached_model("SmolLM2-135M-Instruct.Q4_1.gguf");
    test_masks(m);
    dp_model_free(m);
    return t_done("test_gbnf");
}
