/* Constrained JSON output (src/constrain/): the schema compiler's refusals,
 * the byte machine on written texts (accepted, refused, unfinished), random
 * byte walks that must never reach a dead end and always parse, free text
 * that a first '{' turns into one call (Llama's tool calls in "auto"), and,
 * on a real vocabulary, the token masks against walking every token through
 * the machine.
 *
 * Also a helper of tests/serve/test_constrain.py, which checks the walks and
 * the acceptance against Python's jsonschema:
 *   test_constrain walk SCHEMA N SEED   N random texts, hex, one a line
 *   test_constrain check SCHEMA         hex texts on stdin: 1 accepted, 0 not */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "constrain/json_machine.h"
#include "doppler.h"
#include "testlib.h"

/* 1 complete, 2 unfinished, 0 refused, -1 the schema did not compile */
static int run_text(const char *schema, const char *text) {
    jschema S;
    char err[200];
    if (jschema_compile(&S, schema, schema ? strlen(schema) : 0, err, sizeof err)) return -1;
    jstate st;
    jm_start(&S, &st, 0);
    int alive = jm_feed_bytes(&S, &st, (const uint8_t *)text, (int)strlen(text)) > 0;
    int r = !alive ? 0 : jm_can_end(&S, &st) ? 1 : 2;
    jschema_free(&S);
    return r;
}

static void test_refusals(void) {
    static const struct {
        const char *schema, *want;
    } cases[] = {
        {"{\"type\":\"string\",\"pattern\":\"^a\"}", "'pattern' is not supported"},
        {"{\"type\":\"string\",\"format\":\"date-time\"}", "'format' is not supported"},
        {"{\"oneOf\":[{\"type\":\"string\"}]}", "'oneOf' is not supported"},
        {"{\"type\":\"integer\",\"minimum\":3}", "'minimum' is not supported"},
        {"{\"type\":\"strnig\"}", "unknown type 'strnig'"},
        {"{\"$ref\":\"#/$defs/missing\"}", "points at nothing"},
        {"{\"$ref\":\"http://example.com/s.json\"}", "only references into the schema itself"},
        {"{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/b\"},\"b\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}",
         "cycle"},
        {"{\"type\":\"object\"", "not valid JSON"},
        {"false", "accepts nothing"},
        {"[1,2]", "must be an object or a boolean"},
        {"{\"enum\":[1,2],\"type\":\"string\"}", "leaves no value"},
        {"{\"type\":\"array\",\"minItems\":3,\"maxItems\":2}", "maximum is below the minimum"},
        {"{\"type\":\"string\",\"maxLength\":-1}", "'maxLength' must be a whole number"},
        {"{\"allOf\":[{\"type\":\"string\"},{\"maxLength\":3}]}", "'allOf' is supported with one schema only"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        jschema S;
        char err[200];
        int rc = jschema_compile(&S, cases[i].schema, strlen(cases[i].schema), err, sizeof err);
        CHECKF(rc == -1 && strstr(err, cases[i].want), "%s: rc %d, '%s' (want '%s')", cases[i].schema, rc,
               rc ? err : "", cases[i].want);
        if (!rc) jschema_free(&S);
    }
    /* deep nesting is an error, not a crash */
    char deep[4000] = "";
    for (int i = 0; i < 200; i++) strcat(deep, "{\"items\":");
    strcat(deep, "true");
    for (int i = 0; i < 200; i++) strcat(deep, "}");
    CHECK(run_text(deep, "[]") == -1);
    /* an enum of more than 4096 values is refused (a mask scans a literal range byte by byte) */
    char *big = malloc(80000);
    int n = sprintf(big, "{\"enum\":[");
    for (int i = 0; i < 4097; i++) n += sprintf(big + n, "%s%d", i ? "," : "", i);
    strcpy(big + n, "]}");
    jschema S;
    char err[200];
    CHECK(jschema_compile(&S, big, strlen(big), err, sizeof err) == -1 && strstr(err, "more than 4096"));
    big[n - 5] = 0, strcat(big, "]}"); /* 4096 values */
    CHECKF(!jschema_compile(&S, big, strlen(big), err, sizeof err), "%s", err);
    jschema_free(&S);
    free(big);
}

static const char *PERSON =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\",\"maxLength\":5},"
    "\"age\":{\"type\":\"integer\"},\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"ab\",1,10]},"
    "\"minItems\":1,\"maxItems\":2},\"ok\":{\"type\":[\"boolean\",\"null\"]},\"x\":{\"type\":\"number\"}},"
    "\"required\":[\"name\",\"tags\"]}";

static const char *TREE = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"const\":{\"k\":[1,true]}},"
                          "\"kids\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/$defs/node\"}}},"
                          "\"required\":[\"v\"]}},\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":\"null\"}]}";

static void test_texts(void) {
    static const struct {
        const char **schema;
        const char *text;
        int want;
    } cases[] = {
        {&PERSON, "{\"name\":\"bob\",\"tags\":[\"a\"]}", 1},
        {&PERSON, "{ \"name\" : \"\\u00e9\\n\" ,\n  \"age\": -0, \"tags\": [10, \"ab\"], \"ok\": null, \"x\": 1.5e-3 }", 1},
        {&PERSON, "{\"name\":\"bob\",\"age\":01,\"tags\":[\"a\"]}", 0},          /* leading zero */
        {&PERSON, "{\"name\":\"bob\",\"age\":1.0,\"tags\":[\"a\"]}", 0},         /* integer */
        {&PERSON, "{\"tags\":[\"a\"],\"name\":\"bob\"}", 0},                     /* schema order */
        {&PERSON, "{\"name\":\"bob\"}", 0},                                     /* tags required */
        {&PERSON, "{\"name\":\"bobbyb\",\"tags\":[1]}", 0},                      /* maxLength 5 */
        {&PERSON, "{\"name\":\"\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\",\"tags\":[1]}", 1}, /* 5 characters */
        {&PERSON, "{\"name\":\"a\",\"tags\":[1,1,1]}", 0},                       /* maxItems 2 */
        {&PERSON, "{\"name\":\"a\",\"tags\":[]}", 0},                            /* minItems 1 */
        {&PERSON, "{\"name\":\"a\",\"tags\":[2]}", 0},                           /* enum */
        {&PERSON, "{\"name\":\"a\",\"tags\":[1", 2},
        {&PERSON, "{\"name\":\"a\",\"tags\":[1],}", 0},                          /* trailing comma */
        {&PERSON, "{\"name\":\"a\",\"tags\":[1],\"extra\":1}", 0},
        {&PERSON, "{\"name\":\"\xed\xa0\x80\",\"tags\":[1]}", 0},                /* an encoded surrogate */
        {&PERSON, "{\"name\":\"\\ud800\",\"tags\":[1]}", 0},
        {&PERSON, "{\"name\":\"\xc0\xaf\",\"tags\":[1]}", 0},                    /* overlong */
        {&PERSON, "{\"name\":\"a\tb\",\"tags\":[1]}", 0},                        /* raw control */
        {&PERSON, "{\"name\":\"a\",\"tags\":[1]} ", 0},                          /* nothing after the value */
        {&TREE, "null", 1},
        {&TREE, "{\"v\":{\"k\":[1,true]},\"kids\":[{\"v\":{\"k\":[1,true]},\"kids\":[]}]}", 1},
        {&TREE, "{\"v\":{\"k\":[1, true]}}", 0}, /* a const is written compactly */
        {&TREE, "{\"kids\":[]}", 0},
        {NULL, "{\"a\":[1,{\"b\":null}],\"c\":\"\xf0\x9f\x98\x80\"}", 1}, /* json_object */
        {NULL, "[1]", 0},
        {NULL, "{\"a\":tru", 2},
        {NULL, "{\"a\":1,\"a\":2}", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *sch = cases[i].schema ? *cases[i].schema : NULL;
        int r = run_text(sch, cases[i].text);
        CHECKF(r == cases[i].want, "case %zu '%s': %d, want %d", i, cases[i].text, r, cases[i].want);
    }
    /* root scalars end without a closing byte */
    CHECK(run_text("{\"type\":\"number\"}", "-12.5e+3") == 1);
    CHECK(run_text("{\"type\":\"number\"}", "-12.") == 2);
    CHECK(run_text("{\"enum\":[1,10,100]}", "10") == 1);
    CHECK(run_text("{\"enum\":[1,10,100]}", "1000") == 0);
    /* whitespace is bounded */
    char ws[80] = "{";
    memset(ws + 1, ' ', JM_WS);
    CHECK(run_text(NULL, ws) == 2);
    strcat(ws, " ");
    CHECK(run_text(NULL, ws) == 0);
    /* the think block */
    jschema S;
    char err[200];
    CHECK(!jschema_compile(&S, NULL, 0, err, sizeof err));
    const char *think_texts[] = {"<think>a < b {</thin</think>\n{}", "{\"x\":1}", "<think></think>{}"};
    for (int i = 0; i < 3; i++) {
        jstate st;
        jm_start(&S, &st, 1);
        jm_feed_bytes(&S, &st, (const uint8_t *)think_texts[i], (int)strlen(think_texts[i]));
        CHECKF(jm_done(&S, &st), "think text %d", i);
    }
    jstate st;
    jm_start(&S, &st, 2);
    CHECK(jm_feed_bytes(&S, &st, (const uint8_t *)"x</think>{}", 11) && jm_done(&S, &st));
    jm_start(&S, &st, 0);
    CHECK(!jm_feed_bytes(&S, &st, (const uint8_t *)"<think>", 7));
    jm_start(&S, &st, 1); /* nothing before the text's first token */
    CHECK(!jm_feed_bytes(&S, &st, (const uint8_t *)" <think>", 8));
    jm_start(&S, &st, 0);
    CHECK(!jm_feed_bytes(&S, &st, (const uint8_t *)"\n{}", 3));
    /* a value between two texts (a tool call), after an optional think block; then up to three such values (a
     * turn of tool calls); then free text with such blocks (tool calls in a talking answer). Outcomes: -1
     * refused, 0 unfinished, 1 may end, 2 done */
    S.before = "<tool_call>", S.after = "</tool_call>";
    static const struct {
        int free_text, repeat, think;
        const char *text;
        int want;
    } tagged[] = {
        {0, 1, 1, "<think>x</think>\n\n<tool_call>\n{\"a\":1}\n</tool_call>", 2},
        {0, 1, 1, "<tool_call>{}</tool_call>", 2},
        {0, 1, 0, "<tool_call> {} </tool_call>", 2},
        {0, 1, 0, "<tool_call>{}", 0},
        {0, 1, 0, " <tool_call>{}</tool_call>", -1},
        {0, 1, 0, "{}", -1},
        {0, 1, 0, "<tool_call>{}</tool_call>\n", -1},
        {0, 3, 1, "<think>x</think><tool_call>{}</tool_call>", 1},
        {0, 3, 0, "<tool_call>{}</tool_call>\n<tool_call>{\"a\":1}</tool_call>", 1},
        {0, 3, 0, "<tool_call>{}</tool_call><tool_call>{}</tool_call>\n\n<tool_call> {} </tool_call>", 2},
        {0, 3, 0, "<tool_call>{}</tool_call><tool_call>{}</tool_call><tool_call>{}</tool_call><tool_call>", -1},
        {0, 3, 0, "<tool_call>{}</tool_call> x", -1},
        {0, 3, 0, "<tool_call>{}</tool_call> <tool", 0},
        {0, 3, 0, "<tool_call>{}</tool_call>\n<tool_call>{}", 0},
        {0, 3, 1, "<tool_call>{}</tool_call>\n<think>", -1},
        {1, 0, 0, "hello", 1},
        {1, 0, 0, "hi <tool_call>{}</tool_call> bye", 1},
        {1, 0, 0, "hi <tool_call>\n{\"a\": 1}\n</tool_call>\n<tool_call>{}</tool_call>", 1},
        {1, 0, 0, "hi <tool_call>{", 0},
        {1, 0, 0, "hi <tool_call>x", -1},
        {1, 0, 0, "a < b <<tool_call>{}</tool_call><tool", 1},
        {1, 0, 0, "<think>x <tool_call>{}</tool_call></think> ok", 1},
        {1, 1, 0, "<tool_call>{}</tool_call> and <tool_call>", -1},
        {1, 1, 0, "<tool_call>{}</tool_call> and <tool_cal", 1},
    };
    for (int i = 0; i < (int)(sizeof tagged / sizeof *tagged); i++) {
        S.free_text = tagged[i].free_text, S.repeat = tagged[i].repeat;
        jm_start(&S, &st, tagged[i].think);
        int alive = jm_feed_bytes(&S, &st, (const uint8_t *)tagged[i].text, (int)strlen(tagged[i].text)) > 0;
        int got = !alive ? -1 : jm_done(&S, &st) ? 2 : jm_can_end(&S, &st);
        CHECKF(got == tagged[i].want, "tagged %d: %d, want %d", i, got, tagged[i].want);
    }
    S.free_text = S.repeat = 0;
    S.before = S.after = NULL;
    jschema_free(&S);
}

/* A random text the machine allows: random allowed bytes, turning to the
 * ones that close values as the text grows. Returns its length, or -1 on a
 * dead end (a live state that no byte continues). */
static int walk(const jschema *S, int think, const char *lead, char *out, int cap) {
    jstate st, tmp;
    jm_start(S, &st, think);
    int n = 0;
    for (; lead && lead[n] && n < cap - 1; n++) { /* bytes the walk must begin with */
        out[n] = lead[n];
        if (!jm_feed(S, &st, (uint8_t)lead[n])) return out[n + 1] = 0, -1;
    }
    while (n < cap - 1) {
        if (jm_done(S, &st)) break;
        if (jm_can_end(S, &st) && t_rand_unit() < 0.3) break;
        int ok[256], nok = 0, close[256], nclose = 0;
        for (int b = 0; b < 256; b++) {
            jm_copy(&tmp, &st);
            if (!jm_feed(S, &tmp, (uint8_t)b)) continue;
            ok[nok++] = b;
            if (strchr("\"}]0123456789eulsn", b) && b) close[nclose++] = b;
        }
        if (!nok) { /* nothing may follow: the text must be complete (a root number at its digit limit) */
            out[n] = 0;
            return jm_can_end(S, &st) ? n : -1;
        }
        int b = nclose && t_rand_unit() < (double)n / 300 ? close[t_rand_int(0, nclose - 1)] : ok[t_rand_int(0, nok - 1)];
        if ((b == '{' || b == '[') && n > 400 && nok > 1) continue;
        jm_feed(S, &st, (uint8_t)b);
        out[n++] = (char)b;
    }
    out[n] = 0;
    return jm_can_end(S, &st) ? n : -2;
}

static void test_walks(void) {
    const char *schemas[] = {PERSON, TREE, NULL, "{}", "{\"type\":[\"number\",\"string\"],\"maxLength\":3}"};
    for (int s = 0; s < (int)(sizeof schemas / sizeof *schemas); s++) {
        jschema S;
        char err[200];
        CHECK(!jschema_compile(&S, schemas[s], schemas[s] ? strlen(schemas[s]) : 0, err, sizeof err));
        int parsed = 0, ended = 0;
        for (int i = 0; i < 200; i++) {
            static char text[8192];
            int n = walk(&S, 0, NULL, text, sizeof text);
            CHECKF(n != -1, "schema %d: a dead end after '%s'", s, text);
            if (n < 0) continue;
            ended++;
            cJSON *j = cJSON_ParseWithLength(text, strlen(text));
            parsed += j != NULL;
            CHECKF(j != NULL, "schema %d: '%s' does not parse", s, text);
            cJSON_Delete(j);
        }
        CHECKF(ended >= 150 && parsed == ended, "schema %d: %d of 200 walks ended, %d parsed", s, ended, parsed);
        jschema_free(&S);
    }
    /* up to four PERSONs between tags: never a dead end, each ending text 1-4 parsing values */
    jschema S;
    char err[200];
    CHECK(!jschema_compile(&S, PERSON, strlen(PERSON), err, sizeof err));
    S.before = "<c>", S.after = "</c>", S.repeat = 4;
    int ended = 0, counts[5] = {0};
    for (int i = 0; i < 200; i++) {
        static char text[8192];
        int n = walk(&S, 0, NULL, text, sizeof text);
        CHECKF(n != -1, "repeated: a dead end after '%s'", text);
        if (n < 0) continue;
        ended++;
        int k = 0, ok = 1;
        for (const char *p = text; (p = strstr(p, "<c>")); k++) {
            const char *e = strstr(p, "</c>");
            cJSON *j = e ? cJSON_ParseWithLength(p + 3, (size_t)(e - p - 3)) : NULL;
            ok &= j != NULL;
            cJSON_Delete(j);
            p = e ? e : p + 3;
        }
        CHECKF(ok && k >= 1 && k <= 4, "repeated: %d values in '%s'", k, text);
        if (k >= 1 && k <= 4) counts[k]++;
    }
    printf("repeated walks: %d ended, %d %d %d %d\n", ended, counts[1], counts[2], counts[3], counts[4]);
    CHECKF(ended >= 150 && counts[1] && counts[2], "repeated: %d of 200 walks ended, %d / %d / %d / %d with 1-4 values",
           ended, counts[1], counts[2], counts[3], counts[4]);
    jschema_free(&S);
}

/* tool_choice "auto" in Llama 3.1's format (dp_constraint_json_lazy): free text, or from a first '{' one call,
 * here in the schema the server writes (calls_schema) for person(PERSON) and get_time({"utc": boolean}). */
static const char *calls(void) {
    static char buf[1024];
    if (!buf[0])
        snprintf(buf, sizeof buf,
                 "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"name\":{\"const\":\"person\"},\"parameters\":%s},"
                 "\"required\":[\"name\",\"parameters\"]},{\"type\":\"object\",\"properties\":{\"name\":{\"const\":"
                 "\"get_time\"},\"parameters\":{\"type\":\"object\",\"properties\":{\"utc\":{\"type\":\"boolean\"}},"
                 "\"required\":[\"utc\"]}},\"required\":[\"name\",\"parameters\"]}]}",
                 PERSON);
    return buf;
}

static int utf8_chars(const char *s) {
    int n = 0;
    for (; *s; s++) n += ((uint8_t)*s & 0xC0) != 0x80;
    return n;
}

/* Whether j is a call that calls() accepts, checked here by hand rather than by the machine. */
static int valid_call(const cJSON *j) {
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name"), *p = cJSON_GetObjectItemCaseSensitive(j, "parameters");
    if (!cJSON_IsObject(j) || !cJSON_IsString(name) || !cJSON_IsObject(p) || cJSON_GetArraySize(j) != 2) return 0;
    if (!strcmp(name->valuestring, "get_time"))
        return cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(p, "utc")) && cJSON_GetArraySize(p) == 1;
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(p, "name"), *tags = cJSON_GetObjectItemCaseSensitive(p, "tags");
    if (strcmp(name->valuestring, "person") || !cJSON_IsString(nm) || utf8_chars(nm->valuestring) > 5 ||
        !cJSON_IsArray(tags) || cJSON_GetArraySize(tags) < 1 || cJSON_GetArraySize(tags) > 2)
        return 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, tags) {
        const int str = cJSON_IsString(it) && (!strcmp(it->valuestring, "a") || !strcmp(it->valuestring, "ab"));
        if (!str && !(cJSON_IsNumber(it) && (it->valuedouble == 1 || it->valuedouble == 10))) return 0;
    }
    cJSON_ArrayForEach(it, p) {
        const char *k = it->string;
        const int ok = !strcmp(k, "name") || !strcmp(k, "tags") ||
                       (!strcmp(k, "age") && cJSON_IsNumber(it) && it->valuedouble == floor(it->valuedouble)) ||
                       (!strcmp(k, "ok") && (cJSON_IsBool(it) || cJSON_IsNull(it))) ||
                       (!strcmp(k, "x") && cJSON_IsNumber(it));
        if (!ok) return 0;
    }
    return 1;
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* 1 when text (after whitespace) is one call calls() accepts and whitespace, 0 when it is something else that
 * opens with '{', -1 when it does not open with '{' (free text). */
static int lazy_verdict(const char *text) {
    while (is_space(*text)) text++;
    if (*text != '{') return -1;
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(text, &end, 0);
    while (j && is_space(*end)) end++;
    const int ok = j && !*end && valid_call(j);
    cJSON_Delete(j);
    return ok;
}

/* 1 complete, 0 unfinished, -1 refused: text from the start, no think block */
static int run_lazy_bytes(const jschema *S, const char *text) {
    jstate st;
    jm_start(S, &st, 0);
    if (!jm_feed_bytes(S, &st, (const uint8_t *)text, (int)strlen(text))) return -1;
    return jm_can_end(S, &st);
}

#define CALL "{\"name\":\"get_time\",\"parameters\":{\"utc\":true}}"
static void test_lazy(void) {
    jschema S;
    char err[200];
    CHECK(!jschema_compile(&S, calls(), strlen(calls()), err, sizeof err));
    S.lazy = 1;
    /* -1 refused, 0 unfinished, 1 may end */
    static const struct {
        int think;
        const char *text;
        int want;
    } cases[] = {
        {0, "", 1},
        {0, "Sure, here it is.", 1},
        {0, "It is {", 1},
        {0, "ok " CALL " {x", 1},
        {0, "[1]", 1},
        {0, "{", 0},
        {0, " \n\t{", 0},
        {0, CALL, 1},
        {0, " \n" CALL "\n\n", 1},
        {0, "{ \"name\" : \"person\", \"parameters\": {\"name\":\"bob\",\"tags\":[\"a\", 10]} }", 1},
        {0, "{\"name\":\"person\",\"parameters\":{\"name\":\"bob\"}}", -1}, /* tags required */
        {0, CALL " x", -1},
        {0, CALL CALL, -1},
        {0, "{}", -1},
        {0, "{\"name\":\"nope\"", -1},
        {0, "{\"parameters\":{\"utc\":true},\"name\":\"get_time\"}", -1},
        {0, "{x", -1},
        {0, "<think>a</think>{x", 1}, /* no think block here: text */
        {1, "", 1},
        {1, "<think>a {</think>\n\n" CALL, 1},
        {1, "<think>a {</think>\n\n{x", -1},
        {1, "  <think>x</think> {", 0},
        {1, "<think>x</think>hi {x", 1},
        {1, "<thinking> {x", 1},
        {1, "<think> {x", 1},
        {1, "<", 1},
        {1, " {\"name\":", 0},
        {2, "x</think>" CALL, 1},
        {2, "x</think> {x", -1},
        {2, "a { b", 1},
    };
    for (int i = 0; i < (int)(sizeof cases / sizeof *cases); i++) {
        jstate st;
        jm_start(&S, &st, cases[i].think);
        int alive = jm_feed_bytes(&S, &st, (const uint8_t *)cases[i].text, (int)strlen(cases[i].text)) > 0;
        int got = !alive ? -1 : jm_can_end(&S, &st);
        CHECKF(got == cases[i].want && !jm_done(&S, &st), "lazy %d '%s': %d, want %d", i, cases[i].text, got,
               cases[i].want);
    }
    /* whitespace after the call, up to the end, is bounded */
    char ws[200] = CALL;
    memset(ws + strlen(CALL), '\n', JM_WS);
    CHECK(run_lazy_bytes(&S, ws) == 1);
    strcat(ws, " ");
    CHECK(run_lazy_bytes(&S, ws) == -1);
    /* random walks: free text, or one call the schema accepts; opened by the walk or led to it */
    int n_calls = 0, n_free = 0, ended = 0;
    for (int i = 0; i < 300; i++) {
        static char text[8192];
        char lead[32] = "";
        const int kind = i % 4, think = kind == 3;
        if (kind == 1) strcpy(lead, "{");
        if (kind == 2) {
            for (int k = t_rand_int(0, 3); k > 0; k--) strncat(lead, &" \n\t\r"[t_rand_int(0, 3)], 1);
            strcat(lead, "{");
        }
        if (kind == 3) strcpy(lead, "<think>{</think>\n{");
        int n = walk(&S, think, lead, text, sizeof text);
        CHECKF(n != -1, "lazy: a dead end after '%s'", text);
        if (n < 0) continue;
        ended++;
        const int v = lazy_verdict(think ? strstr(text, "</think>") + 8 : text);
        CHECKF(v != 0 && (kind == 0 || v == 1), "lazy walk %d: '%s'", kind, text);
        n_calls += v == 1, n_free += v == -1;
    }
    printf("lazy walks: %d ended, %d calls, %d free\n", ended, n_calls, n_free);
    CHECKF(ended >= 225 && n_calls >= 150 && n_free >= 50, "lazy: %d of 300 walks ended, %d calls, %d free", ended,
           n_calls, n_free);
    jschema_free(&S);
}
#undef CALL

/* On a real vocabulary: the masks (with their shortcuts) equal walking every
 * token through the machine, along random constrained generations (of the
 * schemas from `from` on). */
/* A random allowed token (lg 0) of whitespace alone (brace 0), or whose first byte but whitespace is '{' (1);
 * -1 when there is none. */
static int pick_led(const dp_model *m, const float *lg, int V, int brace) {
    int pick = -1, seen = 0;
    for (int t = 0; t < V; t++) {
        char buf[256];
        const int n = lg[t] == 0 ? dp_token_to_bytes(m, t, 0, buf, sizeof buf) : 0;
        if (n <= 0 || n > (int)sizeof buf) continue;
        int k = 0;
        while (k < n && is_space(buf[k])) k++;
        if ((brace ? k < n && buf[k] == '{' : k == n) && t_rand_int(0, seen++) == 0) pick = t;
    }
    return pick;
}

static void test_masks(const char *file, int shared, int from) {
    dp_model *m = NULL;
    if (!shared) {
        m = t_load_cached_model(file);
    } else if (!t_shared_fixture(file)) {
        printf("%s: no shared fixtures: skipped\n", file);
    } else {
        m = dp_model_load(t_shared_fixture(file));
        CHECKF(m != NULL, "%s: %s", file, dp_last_error());
    }
    if (!m) return;
    const int V = dp_model_get_info(m)->n_vocab;
    /* 4: two readings inside one string, with room for 3 and for 6 characters; 5: two inside an unbounded
     * one, 6: a string with room for more characters than any token has (the masks' plain shortcut); 7: free
     * text with <tool_call> blocks of PERSONs (one opened at step 4); 8-10: Llama's calls in free text
     * (dp_constraint_json_lazy): 8 opened by the first token ('{' after any whitespace), 9 after a think block
     * and a token of whitespace, 10 (most likely) free text */
    const char *schemas[] = {PERSON, NULL, "{\"type\":\"string\",\"maxLength\":4}", PERSON,
                             "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":3},"
                             "\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]},{\"type\":\"object\",\"properties\":"
                             "{\"a\":{\"type\":\"string\",\"maxLength\":6},\"c\":{\"type\":\"null\"}},\"required\":[\"a\",\"c\"]}]}",
                             "{\"anyOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\"},"
                             "\"b\":{\"type\":\"integer\"}},\"required\":[\"a\",\"b\"]},{\"type\":\"object\",\"properties\":"
                             "{\"a\":{\"type\":\"string\",\"minLength\":30},\"c\":{\"type\":\"null\"}},\"required\":[\"a\",\"c\"]}]}",
                             "{\"type\":\"array\",\"items\":{\"type\":\"string\",\"maxLength\":400}}", PERSON,
                             calls(), calls(), calls()};
    const int tagged = 7, lazy = 8;
    float *lg = malloc(sizeof(float) * (size_t)V);
    for (int s = from; s < (int)(sizeof schemas / sizeof *schemas); s++) {
        /* c masks; w, fed the same tokens and never asked for a mask, walks each token it is asked about */
        dp_constraint *c = NULL, *w = NULL;
        for (int k = 0; k < 2; k++)
            *(k ? &w : &c) =
                s >= lazy ? dp_constraint_json_lazy(m, schemas[s], strlen(schemas[s]),
                                                    s == lazy + 1 ? DP_THINK_MAY_OPEN : DP_THINK_NONE)
                : s == tagged
                    ? dp_constraint_json_tagged(m, schemas[s], strlen(schemas[s]), "<tool_call>", "</tool_call>", 0)
                    : dp_constraint_json_between(m, schemas[s], schemas[s] ? strlen(schemas[s]) : 0,
                                                 s == 1 || s == 3 ? DP_THINK_MAY_OPEN : DP_THINK_NONE,
                                                 s == 3 ? "<tool_call>" : NULL, s == 3 ? "</tool_call>" : NULL);
        CHECKF(c && w, "%s", dp_last_error());
        if (!c || !w) continue;
        char text[4096] = "";
        size_t tl = 0;
        int steps = 0, bad = 0;
        for (; steps < 60 && !dp_constraint_done(c); steps++) {
            for (int t = 0; t < V; t++) lg[t] = 0;
            int k = dp_constraint_mask(c, lg, V), k2 = 0;
            for (int t = 0; t < V; t++) {
                const int walked = dp_constraint_allows(w, t);
                k2 += walked;
                if (walked != (lg[t] == 0) && bad++ < 5)
                    CHECKF(0, "%s schema %d step %d token %d: mask %d, walk %d", file, s, steps, t, lg[t] == 0, walked);
            }
            CHECK(k == k2 && k > 0);
            /* the next token: random among the allowed, closing ones later */
            int pick = -1;
            const int led = s == lazy && steps == 0 ? 1 : s == lazy + 1 && steps <= 2 ? steps - 1 : -1;
            if (led >= 0) CHECKF((pick = pick_led(m, lg, V, led)) >= 0, "%s: no token to lead with (%d)", file, led);
            for (int tries = 0; tries < 1000 && pick < 0; tries++) {
                int t = t_rand_int(0, V - 1);
                if (lg[t] == 0) pick = t;
            }
            for (int t = 0; pick < 0 && t < V; t++)
                if (lg[t] == 0) pick = t;
            const char *tag = s == tagged && steps == 4 ? "<tool_call>" : s == lazy + 1 && !steps ? "<think>{</think>" : NULL;
            if (tag) { /* a block opens (or a think block is written): its tokens */
                int32_t tt[16];
                const int nt = dp_tokenize(m, tag, (int)strlen(tag), 0, 1, tt, 16);
                for (int j = 0; j < nt && j < 16; j++)
                    CHECK(dp_constraint_accept(c, tt[j]) == DP_OK && dp_constraint_accept(w, tt[j]) == DP_OK);
                memcpy(text + tl, tag, strlen(tag)), tl += strlen(tag);
                continue;
            }
            if (dp_token_is_eog(m, pick)) break;
            CHECK(dp_constraint_allows(c, pick) && dp_constraint_accept(c, pick) == DP_OK &&
                  dp_constraint_accept(w, pick) == DP_OK);
            char buf[256];
            int n = dp_token_to_bytes(m, pick, 0, buf, sizeof buf);
            if (n > 0 && tl + (size_t)n < sizeof text) memcpy(text + tl, buf, (size_t)n), tl += (size_t)n;
        }
        text[tl] = 0;
        CHECKF(!bad, "%s schema %d: %d tokens masked wrongly", file, s, bad);
        cJSON *js = cJSON_CreateString(text);
        char *shown = js ? cJSON_PrintUnformatted(js) : NULL;
        printf("%s schema %d: %d steps: %s\n", file, s, steps, shown ? shown : "?");
        free(shown);
        cJSON_Delete(js);
        dp_constraint_free(c);
        dp_constraint_free(w);
    }
    free(lg);
    dp_model_free(m);
}

/* A shared fixture's model, NULL where the fixtures are absent. */
static dp_model *shared_model(const char *name) {
    const char *path = t_shared_fixture(name);
    return path ? dp_model_load(path) : NULL;
}

/* On Qwen's vocabulary: a tool call may open with its tag as one token,
 * a think block with <think>, and <|im_end|> (no bytes, the end of a turn)
 * comes only once the value is complete. */
static void test_qwen_tokens(void) {
    dp_model *m = shared_model("qwen2-tokenizer-tiny.gguf");
    if (!m) return; /* said by test_masks */
    const int32_t call = dp_token_lookup(m, "<tool_call>", 11), think = dp_token_lookup(m, "<think>", 7);
    const int32_t end = dp_token_lookup(m, "<|im_end|>", 10), brace = dp_token_lookup(m, "{}", 2);
    CHECKF(call >= 0 && think >= 0 && end >= 0 && brace >= 0, "%d %d %d %d", call, think, end, brace);
    dp_constraint *c = dp_constraint_json_between(m, "{}", 2, DP_THINK_MAY_OPEN, "<tool_call>", "</tool_call>");
    CHECK(c && dp_constraint_allows(c, call) && dp_constraint_allows(c, think) && !dp_constraint_allows(c, end) &&
          !dp_constraint_allows(c, brace));
    dp_constraint_free(c);
    c = dp_constraint_json(m, NULL, 0, DP_THINK_NONE);
    CHECK(c && !dp_constraint_allows(c, end) && dp_constraint_allows(c, brace) && !dp_constraint_allows(c, think));
    CHECK(c && dp_constraint_accept(c, brace) == DP_OK && dp_constraint_done(c));
    dp_constraint_free(c);
    c = dp_constraint_json(m, "{\"type\":\"integer\"}", 20, DP_THINK_NONE); /* a root number ends with the turn */
    const int32_t seven = dp_token_lookup(m, "7", 1);
    CHECK(c && !dp_constraint_allows(c, end) && dp_constraint_accept(c, seven) == DP_OK && !dp_constraint_done(c) &&
          dp_constraint_allows(c, end));
    dp_constraint_free(c);
    dp_model_free(m);
}

/* On Llama 3's vocabulary, "auto"'s calls (dp_constraint_json_lazy): the first token may be text, hold
 * whitespace and '{' together, or '{' and the call's next bytes; an empty answer is one (<|eot_id|>, no bytes,
 * first); once a call opens only it may follow, and then whitespace or the end. */
static void test_llama_tokens(void) {
    dp_model *m = shared_model("llama3-tokenizer-tiny.gguf");
    if (!m) return; /* said by test_masks */
    const int32_t sp_brace = dp_token_lookup(m, "\xc4\xa0{", 3), brace_q = dp_token_lookup(m, "{\"", 2);
    const int32_t empty = dp_token_lookup(m, "{}", 2), hello = dp_token_lookup(m, "Hello", 5);
    const int32_t quote = dp_token_lookup(m, "\"", 1), eot = dp_token_lookup(m, "<|eot_id|>", 10);
    const int32_t nl = dp_token_lookup(m, "\xc4\x8a", 2);
    CHECKF(sp_brace >= 0 && brace_q >= 0 && empty >= 0 && hello >= 0 && quote >= 0 && eot >= 0 && nl >= 0,
           "%d %d %d %d %d %d %d", sp_brace, brace_q, empty, hello, quote, eot, nl);
    const size_t len = strlen(calls());
    dp_constraint *c = dp_constraint_json_lazy(m, calls(), len, DP_THINK_NONE);
    CHECK(c && dp_constraint_allows(c, sp_brace) && dp_constraint_allows(c, brace_q) &&
          !dp_constraint_allows(c, empty) && dp_constraint_allows(c, hello) && dp_constraint_allows(c, eot));
    CHECK(c && dp_constraint_accept(c, sp_brace) == DP_OK && !dp_constraint_allows(c, eot) &&
          !dp_constraint_allows(c, hello) && dp_constraint_allows(c, quote) && !dp_constraint_done(c));
    dp_constraint_free(c);
    c = dp_constraint_json_lazy(m, calls(), len, DP_THINK_NONE); /* text, then a '{' that opens nothing */
    CHECK(c && dp_constraint_accept(c, hello) == DP_OK && dp_constraint_accept(c, sp_brace) == DP_OK &&
          dp_constraint_allows(c, empty) && dp_constraint_allows(c, eot));
    dp_constraint_free(c);
    /* a whole call as the tokenizer cuts it, then a newline, then the end */
    static const char call[] = "{\"name\": \"get_time\", \"parameters\": {\"utc\": false}}";
    int32_t toks[64];
    const int nt = dp_tokenize(m, call, sizeof call - 1, 0, 0, toks, 64);
    c = dp_constraint_json_lazy(m, calls(), len, DP_THINK_NONE);
    CHECK(c && nt > 0 && nt <= 64);
    for (int i = 0; c && i < nt && i < 64; i++) CHECKF(dp_constraint_accept(c, toks[i]) == DP_OK, "call token %d", i);
    CHECK(c && dp_constraint_allows(c, eot) && dp_constraint_allows(c, nl) && !dp_constraint_allows(c, hello) &&
          !dp_constraint_allows(c, sp_brace) && dp_constraint_accept(c, nl) == DP_OK && dp_constraint_allows(c, eot));
    dp_constraint_free(c);
    dp_model_free(m);
}

static int hexval(int c) { return c <= '9' ? c - '0' : (c | 32) - 'a' + 10; }

static int helper(int argc, char **argv) {
    jschema S;
    char err[200];
    if (jschema_compile(&S, argv[2], strlen(argv[2]), err, sizeof err)) {
        fprintf(stderr, "schema: %s\n", err);
        return 2;
    }
    if (!strcmp(argv[1], "walk") && argc == 5) {
        setenv("DOPPLER_TEST_SEED", argv[4], 1);
        t_seed();
        static char text[8192];
        for (int i = 0, n = atoi(argv[3]); i < n; i++) {
            int len = walk(&S, 0, NULL, text, sizeof text);
            if (len == -1) return fprintf(stderr, "dead end after '%s'\n", text), 1;
            if (len < 0) continue;
            for (int k = 0; k < len; k++) printf("%02x", (uint8_t)text[k]);
            printf("\n");
        }
    } else {
        static char line[65536];
        while (fgets(line, sizeof line, stdin)) {
            jstate st;
            jm_start(&S, &st, 0);
            int ok = 1;
            for (char *p = line; p[0] && p[0] != '\n' && ok; p += 2)
                ok = jm_feed(&S, &st, (uint8_t)(hexval(p[0]) * 16 + hexval(p[1]))) > 0;
            printf("%d\n", ok && jm_can_end(&S, &st));
        }
    }
    jschema_free(&S);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3) return helper(argc, argv);
    t_seed();
    test_refusals();
    test_texts();
    test_walks();
    test_lazy();
    test_masks("SmolLM2-135M-Instruct.Q4_1.gguf", 0, 0);
    test_masks("gemma-3-270m-q4_k_m.gguf", 0, 0);
    test_masks("qwen2-tokenizer-tiny.gguf", 1, 0); /* Qwen's 151 936 tokens: <tool_call> and <think> are text */
    test_masks("llama3-tokenizer-tiny.gguf", 1, 8); /* Llama 3's 128 256: its calls in free text */
    test_qwen_tokens();
    test_llama_tokens();
    return t_done("test_constrain");
}
