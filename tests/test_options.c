/* The option table, walked: every option of every command (from 'doppler
 * options') appears in that command's --help with its description, parses
 * under each of its spellings (--name value and --name=value, checked with
 * --show-options), and a bad value of it exits 2 with one line naming it.
 * Values are drawn at random within each option's range. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "testlib.h"

#define MAX_OPTS 512
#define MAX_NAMES 4

typedef struct {
    char cmd[32], names[128], type[16], arg[64], def[128], example[128], flags[64], help[256];
    double lo, hi;
    char name[MAX_NAMES][40];
    int n_names;
} opt;

static opt g_opts[MAX_OPTS];
static int g_n;
static const char *g_file; /* an existing file for input options */

/* Splits a tab-separated line into at most n fields (in place). */
static int split_tabs(char *line, char **f, int n) {
    int k = 0;
    f[k++] = line;
    for (char *p = line; *p && k < n; p++)
        if (*p == '\t') {
            *p = 0;
            f[k++] = p + 1;
        }
    return k;
}

static void load_table(void) {
    char *out = NULL;
    CHECK(t_run_doppler("options", &out, NULL) == 0);
    for (char *line = out, *nl; line && *line; line = nl + 1) {
        nl = strchr(line, '\n');
        if (!nl) break;
        *nl = 0;
        char *f[10];
        if (split_tabs(line, f, 10) != 10 || g_n == MAX_OPTS) {
            CHECKF(0, "bad table line: %s", line);
            continue;
        }
        opt *o = &g_opts[g_n++];
        snprintf(o->cmd, sizeof o->cmd, "%s", f[0]);
        snprintf(o->names, sizeof o->names, "%s", f[1]);
        snprintf(o->type, sizeof o->type, "%s", f[2]);
        o->lo = atof(f[3]);
        o->hi = atof(f[4]);
        snprintf(o->arg, sizeof o->arg, "%s", f[5]);
        snprintf(o->def, sizeof o->def, "%s", f[6]);
        snprintf(o->example, sizeof o->example, "%s", f[7]);
        snprintf(o->flags, sizeof o->flags, "%s", f[8]);
        snprintf(o->help, sizeof o->help, "%s", f[9]);
        char names[128];
        snprintf(names, sizeof names, "%s", o->names);
        for (char *save = NULL, *t = strtok_r(names, "|", &save); t && o->n_names < MAX_NAMES;
             t = strtok_r(NULL, "|", &save))
            snprintf(o->name[o->n_names++], sizeof o->name[0], "%s", t);
    }
    free(out);
}

static int is(const opt *o, const char *type) { return !strcmp(o->type, type); }
static int has_flag(const opt *o, const char *f) { return strstr(o->flags, f) != NULL; }

/* The name --show-options prints: the first long spelling. */
static const char *shown_name(const opt *o) {
    for (int i = 0; i < o->n_names; i++)
        if (!strncmp(o->name[i], "--", 2)) return o->name[i];
    return o->name[0];
}

/* A good value of the option into buf ("" for none). */
static const char *good_value(const opt *o, char *buf, size_t cap) {
    buf[0] = 0;
    if (is(o, "int")) {
        double hi = fmin(o->hi, o->lo + 1000);
        snprintf(buf, cap, "%.0f", o->lo + floor(t_rand_unit() * (hi - o->lo + 1)));
    } else if (is(o, "float")) {
        double hi = fmin(o->hi, o->lo + 10);
        double x = o->lo + t_rand_unit() * (hi - o->lo);
        snprintf(buf, cap, "%.9g", x);
        if (atof(buf) < o->lo || atof(buf) > o->hi) snprintf(buf, cap, "%.17g", o->lo);
    } else if (is(o, "u64")) {
        snprintf(buf, cap, "%llu", (unsigned long long)(t_rand_u64() >> 11));
    } else if (is(o, "choice")) {
        /* a random one of the choices */
        int n = 1;
        for (const char *p = o->arg; *p; p++) n += *p == '|';
        int k = (int)(t_rand_unit() * n);
        const char *p = o->arg;
        while (k-- > 0) p = strchr(p, '|') + 1;
        snprintf(buf, cap, "%.*s", (int)strcspn(p, "|"), p);
    } else if (is(o, "text") || is(o, "list")) {
        snprintf(buf, cap, "%s", *o->example ? o->example : "some text");
    } else if (is(o, "in")) {
        snprintf(buf, cap, "%s", has_flag(o, "stdin") && t_rand_unit() < 0.5 ? "-" : g_file);
    } else if (is(o, "out")) {
        snprintf(buf, cap, "%s", t_tmp_path(".out"));
    } else if (is(o, "ignored") && *o->arg && o->arg[0] != '[') {
        snprintf(buf, cap, "1");
    }
    return buf;
}

/* Bad values of the option (NULL-terminated; none for free text). */
static int bad_values(const opt *o, const char **v, char bufs[][64]) {
    int n = 0;
    if (is(o, "int")) {
        v[n++] = "abc";
        v[n++] = "1.5";
        snprintf(bufs[0], 64, "%.0f", o->lo - 1);
        v[n++] = bufs[0];
        snprintf(bufs[1], 64, "%.0f", o->hi + 1);
        v[n++] = bufs[1];
    } else if (is(o, "float")) {
        v[n++] = "abc";
        v[n++] = "nan";
        snprintf(bufs[0], 64, "%.17g", o->lo - fabs(o->lo) - 1);
        v[n++] = bufs[0];
        snprintf(bufs[1], 64, "%.17g", o->hi * 2 + 1);
        v[n++] = bufs[1];
    } else if (is(o, "u64")) {
        v[n++] = "-1";
        v[n++] = "x";
        v[n++] = "18446744073709551616";
    } else if (is(o, "choice")) {
        v[n++] = "bogus";
    } else if (is(o, "list")) {
        v[n++] = "?";
        v[n++] = "";
    } else if (is(o, "text") && has_flag(o, "checked")) {
        v[n++] = "";
    } else if (is(o, "in")) {
        v[n++] = "/nonexistent/input";
        v[n++] = "/";
        if (!has_flag(o, "stdin")) v[n++] = "-";
    } else if (is(o, "out")) {
        v[n++] = "/nonexistent/dir/out";
        v[n++] = "/tmp";
    }
    v[n] = NULL;
    return n;
}

/* Whether name occurs in text as a whole option name. */
static int mentions(const char *text, const char *name) {
    size_t n = strlen(name);
    for (const char *p = text; (p = strstr(p, name)); p++) {
        char before = p == text ? ' ' : p[-1], after = p[n];
        if ((before == ' ' || before == ',' || before == '\n') &&
            (after == ' ' || after == ',' || after == '\n' || after == 0))
            return 1;
    }
    return 0;
}

static int value_takes(const opt *o) {
    return !is(o, "flag") && !(is(o, "ignored") && (!*o->arg || o->arg[0] == '['));
}

/* All options of one command at once, spelling `round` of each (the last
 * when it has fewer), with --name=value on odd rounds; every value must come
 * back from --show-options. */
static void parse_round(const char *cmd, int round) {
    static char args[65536], expect[MAX_OPTS][200];
    int n_expect = 0;
    size_t n = (size_t)snprintf(args, sizeof args, "%s", cmd);
    for (int i = 0; i < g_n; i++) {
        const opt *o = &g_opts[i];
        if (strcmp(o->cmd, cmd) || !strcmp(o->name[0], "-h") || !strcmp(shown_name(o), "--show-options")) continue;
        const char *name = o->name[round < o->n_names ? round : o->n_names - 1];
        char v[512], q[1100];
        good_value(o, v, sizeof v);
        t_shell_quote(q, sizeof q, v);
        int eq = round % 2 && value_takes(o);
        if (!value_takes(o)) n += (size_t)snprintf(args + n, sizeof args - n, " %s", name);
        else if (eq) n += (size_t)snprintf(args + n, sizeof args - n, " %s=%s", name, q);
        else n += (size_t)snprintf(args + n, sizeof args - n, " %s %s", name, q);
        if (is(o, "ignored")) continue;
        if (is(o, "flag")) snprintf(expect[n_expect++], sizeof expect[0], "%s=on\n", shown_name(o));
        else if (has_flag(o, "multi")) snprintf(expect[n_expect++], sizeof expect[0], "%s=%s\n", shown_name(o), v);
        else snprintf(expect[n_expect++], sizeof expect[0], "%s=%s\n", shown_name(o), v);
    }
    snprintf(args + n, sizeof args - n, " --show-options");
    char *out = NULL, *err = NULL;
    int rc = t_run_doppler(args, &out, &err);
    CHECKF(rc == 0, "%s: exit %d: %s\nargs: %s", cmd, rc, err, args);
    for (int k = 0; k < n_expect; k++) {
        /* the line starts a line of the output */
        const char *p = out ? strstr(out, expect[k]) : NULL;
        while (p && p != out && p[-1] != '\n') p = strstr(p + 1, expect[k]);
        CHECKF(p != NULL, "%s round %d: --show-options lacks '%.*s'", cmd, round, (int)strlen(expect[k]) - 1,
               expect[k]);
    }
    free(out);
    free(err);
}

/* Every spelling of every option is in --help, with the description. */
static void check_help(const char *cmd) {
    char args[128], *out = NULL;
    snprintf(args, sizeof args, "%s --help", cmd);
    CHECKF(t_run_doppler(args, &out, NULL) == 0, "%s --help", cmd);
    for (int i = 0; i < g_n; i++) {
        const opt *o = &g_opts[i];
        if (strcmp(o->cmd, cmd)) continue;
        CHECKF(strlen(o->help) > 8, "%s %s: no description", cmd, o->names);
        CHECKF(out && strstr(out, o->help), "%s --help lacks the description of %s", cmd, o->names);
        for (int k = 0; k < o->n_names; k++)
            CHECKF(out && mentions(out, o->name[k]), "%s --help lacks %s", cmd, o->name[k]);
    }
    free(out);
}

static void check_bad(const opt *o) {
    const char *bad[8];
    char bufs[2][64];
    int nb = bad_values(o, bad, bufs);
    char args[2048], q[200];
    if (value_takes(o)) { /* the value missing */
        snprintf(args, sizeof args, "%.31s %.39s", o->cmd, o->name[0]);
        char *err = NULL;
        int rc = t_run_doppler(args, NULL, &err);
        CHECKF(rc == 2 && err && strstr(err, "needs a value"), "'%s': exit %d: %s", args, rc, err);
        free(err);
    }
    if (is(o, "flag")) { /* a flag given a value */
        snprintf(args, sizeof args, "%.31s %.39s=1", o->cmd, o->name[(int)(t_rand_unit() * o->n_names)]);
        char *err = NULL;
        int rc = t_run_doppler(args, NULL, &err);
        CHECKF(rc == 2 && err && strstr(err, "takes no value"), "'%s': exit %d: %s", args, rc, err);
        free(err);
    }
    for (int k = 0; k < nb; k++) {
        const char *name = o->name[(int)(t_rand_unit() * o->n_names)];
        t_shell_quote(q, sizeof q, bad[k]);
        snprintf(args, sizeof args, "%.31s %.39s %.199s --show-options", o->cmd, name, q);
        char *out = NULL, *err = NULL;
        int rc = t_run_doppler(args, &out, &err);
        int lines = 0;
        for (const char *p = err; p && *p; p++) lines += *p == '\n';
        CHECKF(rc == 2 && lines == 1 && strstr(err, name), "'%s': exit %d, stderr: %s", args, rc, err);
        free(out);
        free(err);
    }
}

int main(void) {
    t_seed();
    g_file = t_tmp_path(".txt");
    t_write_file(g_file, "x\n", 2);
    load_table();
    CHECKF(g_n > 150, "only %d options in the table", g_n);
    const char *cmds[] = {"run", "chat", "tokenize", "inspect", "bench", "perplexity", "synth", "verify",
                          "trace dump", "trace compare", "serve", "bench batched"};
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        int n = 0, max_names = 1;
        for (int i = 0; i < g_n; i++)
            if (!strcmp(g_opts[i].cmd, cmds[c])) {
                n++;
                if (g_opts[i].n_names > max_names) max_names = g_opts[i].n_names;
            }
        CHECKF(n > 3, "%s has %d options", cmds[c], n);
        check_help(cmds[c]);
        /* the defaults alone, then every spelling */
        char args[64], *out = NULL;
        snprintf(args, sizeof args, "%s --show-options", cmds[c]);
        CHECKF(t_run_doppler(args, &out, NULL) == 0, "%s: the defaults do not parse", cmds[c]);
        free(out);
        for (int r = 0; r < max_names + 1; r++) parse_round(cmds[c], r);
    }
    for (int i = 0; i < g_n; i++) check_bad(&g_opts[i]);

    /* unknown options, "--" ending the options, llama.cpp's negative -n */
    char *out = NULL, *err = NULL;
    CHECK(t_run_doppler("run --frobnicate", NULL, &err) == 2 && strstr(err, "unknown option '--frobnicate'"));
    free(err);
    CHECK(t_run_doppler("tokenize --show-options -- --ids", &out, NULL) == 0 && strstr(out, "--ids=off\n") &&
          strstr(out, "argument 1=--ids\n"));
    free(out);
    CHECK(t_run_doppler("run -n -1 --temp=0 --show-options", &out, NULL) == 0 && strstr(out, "--n-predict=-1\n") &&
          strstr(out, "--temp=0\n"));
    free(out);
    /* a llama.cpp option: one note line, then on */
    CHECK(t_run_doppler("run -ngl 99 -p hi --show-options", &out, &err) == 0 && strstr(err, "-ngl") &&
          strstr(out, "--prompt=hi\n"));
    free(out);
    free(err);
    remove(g_file);
    return t_done("test_options");
}
