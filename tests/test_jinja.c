/* The Jinja interpreter against Python's Jinja2 as transformers runs chat
 * templates (golden strings in tests/fixtures/jinja/golden.json from
 * tools/reference/jinja_reference.py): the published chat templates of
 * tests/fixtures/jinja/templates/ with many message sets, then hand-written
 * and randomized templates of the interpreter itself. A golden error means
 * doppler must fail too, with a one-line message naming the template line.
 * Finally the limits: hostile templates end with an error, quickly. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja/jinja.h"
#include "testlib.h"

static struct tm fixed_now(const char *iso) {
    struct tm t;
    memset(&t, 0, sizeof t);
    sscanf(iso, "%d-%d-%dT%d:%d:%d", &t.tm_year, &t.tm_mon, &t.tm_mday, &t.tm_hour, &t.tm_min, &t.tm_sec);
    t.tm_year -= 1900;
    t.tm_mon -= 1;
    time_t tt = timegm(&t);
    gmtime_r(&tt, &t); /* fills in the weekday and day of year */
    return t;
}

static int shown;

/* renders src with vars; compares with the case's "rendered" or "error" */
static int check_case(const char *label, const char *src, const cJSON *vars, const cJSON *c, const jinja_options *o) {
    char err[512] = "";
    const cJSON *want = cJSON_GetObjectItem(c, "rendered");
    jinja_template *t = jinja_parse(src, strlen(src), err, sizeof err);
    size_t n = 0;
    char *got = t ? jinja_render(t, vars, o, &n, err, sizeof err) : NULL;
    jinja_free(t);
    int ok;
    if (cJSON_IsString(want)) {
        ok = got && n == strlen(want->valuestring) && !memcmp(got, want->valuestring, n);
    } else { /* an error is expected: one line naming the template line */
        ok = !got && !strncmp(err, "line ", 5) && !strchr(err, '\n');
    }
    if (!ok && shown++ < 12) {
        fprintf(stderr, "--- %s\ntemplate: %.300s\n got: %s\nwant: %s\n", label, src, got ? got : err,
                cJSON_IsString(want) ? want->valuestring : cJSON_GetObjectItem(c, "error")->valuestring);
    }
    free(got);
    return ok;
}

static void golden(void) {
    size_t len;
    char *s = t_read_file(t_src_path("tests/fixtures/jinja/golden.json"), &len);
    CHECK(s != NULL);
    if (!s) return;
    cJSON *j = cJSON_ParseWithLength(s, len);
    free(s);
    CHECK(j != NULL);
    if (!j) return;
    struct tm now = fixed_now(cJSON_GetObjectItem(j, "strftime_now")->valuestring);
    jinja_options o = {0, 0, 0, &now};
    int n_chat = 0, ok_chat = 0, n_int = 0, ok_int = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "chat")) {
        const char *name = cJSON_GetObjectItem(c, "template")->valuestring;
        char rel[512];
        snprintf(rel, sizeof rel, "tests/fixtures/jinja/templates/%s", name);
        char *src = t_read_file(t_src_path(rel), &len);
        CHECKF(src != NULL, "%s", rel);
        if (!src) continue;
        cJSON *vars = cJSON_CreateObject();
        cJSON_AddItemToObject(vars, "messages", cJSON_Duplicate(cJSON_GetObjectItem(c, "messages"), 1));
        cJSON_AddBoolToObject(vars, "add_generation_prompt", cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")));
        const char *sp[] = {"bos_token", "eos_token"};
        for (int k = 0; k < 2; k++) {
            const cJSON *v = cJSON_GetObjectItem(c, sp[k]);
            if (cJSON_IsString(v)) cJSON_AddStringToObject(vars, sp[k], v->valuestring);
        }
        cJSON_AddItemToObject(vars, "tools", cJSON_Duplicate(cJSON_GetObjectItem(c, "tools"), 1));
        cJSON_AddNullToObject(vars, "documents");
        const cJSON *kw; /* apply_chat_template's keyword arguments (enable_thinking) */
        cJSON_ArrayForEach(kw, cJSON_GetObjectItem(c, "kwargs")) cJSON_AddItemToObject(vars, kw->string, cJSON_Duplicate(kw, 1));
        n_chat++;
        ok_chat += check_case(name, src, vars, c, &o);
        cJSON_Delete(vars);
        free(src);
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "interp")) {
        n_int++;
        ok_int += check_case(cJSON_GetObjectItem(c, "kind")->valuestring, cJSON_GetObjectItem(c, "template")->valuestring,
                             cJSON_GetObjectItem(c, "vars"), c, &o);
    }
    fprintf(stderr, "chat templates: %d/%d golden renderings match\n", ok_chat, n_chat);
    fprintf(stderr, "interpreter: %d/%d golden renderings match\n", ok_int, n_int);
    CHECK(n_chat >= 500 && ok_chat == n_chat);
    CHECK(n_int >= 300 && ok_int == n_int);
    cJSON_Delete(j);
}

static char *render_with(const char *src, cJSON *vars) {
    char err[512];
    jinja_template *t = jinja_parse(src, strlen(src), err, sizeof err);
    char *r = t ? jinja_render(t, vars, NULL, NULL, err, sizeof err) : NULL;
    jinja_free(t);
    if (!r) fprintf(stderr, "%s: %s\n", src, err);
    return r;
}

static int cmp_int(const void *a, const void *b) { return (*(const int *)a > *(const int *)b) - (*(const int *)a < *(const int *)b); }

/* Properties on fresh random strings and lists (seeded by t_seed): tojson
 * reads back through cJSON, reversal twice and split/join are identities,
 * length and slices count code points, sort agrees with qsort. */
static void fresh(void) {
    static const char *const alphabet[] = {"a", "Z", " ", ",", "\n", "\t", "\"", "\\", "é", "日", "😀", "\u3000", "<", "&", "'"};
    const int na = sizeof alphabet / sizeof alphabet[0];
    t_seed();
    for (int it = 0; it < 200; it++) {
        char s[256] = "";
        size_t off[64];
        int ncp = (int)(t_rand_u64() % 40);
        for (int k = 0; k < ncp; k++) {
            off[k] = strlen(s);
            strcat(s, alphabet[t_rand_u64() % na]);
        }
        off[ncp] = strlen(s);
        int a = (int)(t_rand_u64() % (ncp + 3)) - 1, b = (int)(t_rand_u64() % (ncp + 3)) - 1;
        cJSON *vars = cJSON_CreateObject();
        cJSON_AddStringToObject(vars, "s", s);
        cJSON_AddNumberToObject(vars, "a", a);
        cJSON_AddNumberToObject(vars, "b", b);
        int ints[12], ni = (int)(t_rand_u64() % 12);
        cJSON *l = cJSON_AddArrayToObject(vars, "l");
        for (int k = 0; k < ni; k++) {
            ints[k] = (int)(t_rand_u64() % 2001) - 1000;
            cJSON_AddItemToArray(l, cJSON_CreateNumber(ints[k]));
        }
        char *r = render_with("{{ s|tojson }}", vars);
        cJSON *back = r ? cJSON_Parse(r) : NULL;
        CHECKF(cJSON_IsString(back) && !strcmp(back->valuestring, s), "tojson of [%s]: %s", s, r ? r : "");
        cJSON_Delete(back);
        free(r);
        r = render_with("{{ s[::-1][::-1] }}|{{ s.split(',')|join(',') }}", vars);
        char want[600];
        snprintf(want, sizeof want, "%s|%s", s, s);
        CHECKF(r && !strcmp(r, want), "[%s]: %s", s, r ? r : "");
        free(r);
        /* Python's s[a:b] by code points (negative indexes count from the end) */
        int x = a < 0 ? a + ncp : a, y = b < 0 ? b + ncp : b;
        x = x < 0 ? 0 : x > ncp ? ncp : x;
        y = y < 0 ? 0 : y > ncp ? ncp : y;
        snprintf(want, sizeof want, "%d|%.*s", ncp, y > x ? (int)(off[y] - off[x]) : 0, s + off[x]);
        r = render_with("{{ s|length }}|{{ s[a:b] }}", vars);
        CHECKF(r && !strcmp(r, want), "[%s][%d:%d]: %s, want %s", s, a, b, r ? r : "", want);
        free(r);
        qsort(ints, (size_t)ni, sizeof *ints, cmp_int);
        want[0] = 0;
        for (int k = 0; k < ni; k++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", k ? "," : "", ints[k]);
        r = render_with("{{ l|sort|join(',') }}", vars);
        CHECKF(r && !strcmp(r, want), "sort: %s, want %s", r ? r : "", want);
        free(r);
        cJSON_Delete(vars);
    }
}

/* renders and expects an error containing want (and naming a line) */
static void expect_error(const char *src, const char *want) {
    char err[512] = "";
    jinja_options o = {1 << 20, 200000, 64 << 20, NULL};
    jinja_template *t = jinja_parse(src, strlen(src), err, sizeof err);
    char *got = t ? jinja_render(t, NULL, &o, NULL, err, sizeof err) : NULL;
    jinja_free(t);
    CHECKF(!got && strstr(err, want) && !strncmp(err, "line ", 5), "%.80s: got %s", src, got ? got : err);
    free(got);
}

static void limits(void) {
    clock_t t0 = clock();
    expect_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "too long");
    expect_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "nested too deeply");
    expect_error("{% set ns = namespace(s='ab') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}",
                 "too long");
    expect_error("{{ 'x' * 100000000 }}", "too large");
    /* %d of a float beyond 64 bits (Jinja2 prints the exact integer): an error, never an undefined conversion
     * (a fuzz finding); integers are formatted exactly, past 2^53 too (Jinja2's output) */
    expect_error("{{ '%d' % 2.5e46 }}", "out of range");
    expect_error("{{ '%x' % (1e308 * 10) }}", "out of range");
    char *big = render_with("{{ '%d' % 9007199254740993 }}|{{ '%d' % -3.9 }}|{{ '%x' % 255 }}", NULL);
    CHECKF(big && !strcmp(big, "9007199254740993|-3|ff"), "%%d of integers: %s", big ? big : "(error)");
    free(big);
    /* empty sequences repeated are empty without a loop (a fuzz input ran 94 million empty appends) */
    char *e = render_with("{{ ('' * 3 ** 30)|length }}|{{ ([] * 3 ** 30)|length }}|{{ 'ab' * 2 }}", NULL);
    CHECKF(e && !strcmp(e, "0|0|abab"), "empty repetition: %s", e ? e : "(error)");
    free(e);
    expect_error("{% set ns = namespace(l=[]) %}{% for i in range(200) %}{% set ns.l = [ns.l] %}{% endfor %}",
                 "nested too deeply");
    expect_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", "nested too deeply");
    char deep[4000];
    memset(deep, '(', 3000);
    strcpy(deep + 3000, "1");
    char src[8000];
    snprintf(src, sizeof src, "{{ %s }}", deep);
    expect_error(src, "nested too deeply");
    expect_error("line one\n{% if x %}\n{% endfor %}", "line 3");
    expect_error("a\nb\n{{ raise_exception('custom message') }}", "line 3: custom message");
    CHECKF((double)(clock() - t0) / CLOCKS_PER_SEC < 20, "limits took %.1f s", (double)(clock() - t0) / CLOCKS_PER_SEC);
}

int main(void) {
    golden();
    fresh();
    limits();
    return t_done("test_jinja");
}
