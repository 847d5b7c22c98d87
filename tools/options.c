/* One parser for every command's options (the table is option_table.c). */
#define _GNU_SOURCE
#include "options.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"

static const char *const g_type_names[] = {"section", "flag", "int", "float", "u64", "text",
                                           "choice",  "list", "in",  "out",   "ignored"};

/* Whether `name` (n bytes) is one of the '|'-separated spellings. */
static int has_name(const char *names, const char *name, size_t n) {
    for (const char *p = names; *p;) {
        const char *e = strchr(p, '|');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == n && !memcmp(p, name, n)) return 1;
        p += k + (e ? 1 : 0);
    }
    return 0;
}

/* The first spelling into buf ("-c" of "-c|--ctx-size"); the long one when
 * prefer_long and there is one. */
static const char *first_name(const opt_def *d, int prefer_long, char *buf, size_t cap) {
    const char *p = d->names, *pick = p;
    size_t pick_n = strcspn(p, "|");
    if (prefer_long)
        for (const char *q = p; *q;) {
            size_t k = strcspn(q, "|");
            if (k > 2 && q[1] == '-') {
                pick = q;
                pick_n = k;
                break;
            }
            q += k + (q[k] ? 1 : 0);
        }
    snprintf(buf, cap, "%.*s", (int)pick_n, pick);
    return buf;
}

static const opt_def *find(unsigned cmd, const char *name, size_t n) {
    for (int i = 0; i < opt_table_len; i++) {
        const opt_def *d = &opt_table[i];
        if (d->type != T_SECTION && (d->cmds & cmd) && has_name(d->names, name, n)) return d;
    }
    return NULL;
}

/* Whether v is one of the '|'-separated words of list; returns its index or -1. */
static int choice_index(const char *list, const char *v) {
    int idx = 0;
    for (const char *p = list; *p; idx++) {
        size_t k = strcspn(p, "|");
        if (strlen(v) == k && !strncmp(p, v, k)) return idx;
        p += k + (p[k] ? 1 : 0);
    }
    return -1;
}

static void choices_text(const char *list, char *buf, size_t cap) {
    /* "cpu|cuda|auto" -> "cpu, cuda or auto" */
    size_t n = 0;
    int count = 0;
    for (const char *p = list; *p; p += strcspn(p, "|") + (p[strcspn(p, "|")] ? 1 : 0)) count++;
    int idx = 0;
    buf[0] = 0;
    for (const char *p = list; *p && n < cap; idx++) {
        size_t k = strcspn(p, "|");
        n += (size_t)snprintf(buf + n, cap - n, "%s%.*s", idx == 0 ? "" : idx == count - 1 ? " or " : ", ", (int)k, p);
        p += k + (p[k] ? 1 : 0);
    }
}

/* Converts and checks one value; on failure returns -1 with a message. */
static int convert(const opt_def *d, const char *flag, const char *v, opt_value *out, char *err, size_t errlen) {
    char *end;
    errno = 0;
    switch (d->type) {
    case T_INT: {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end || x < (long long)d->lo || x > (long long)d->hi) {
            snprintf(err, errlen, "%s expects an integer in [%.0f, %.0f], got '%s'", flag, d->lo, d->hi, v);
            return -1;
        }
        out->i = x;
        break;
    }
    case T_FLOAT: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || !isfinite(x) || x < d->lo || x > d->hi) {
            snprintf(err, errlen, "%s expects a number in [%g, %g], got '%s'", flag, d->lo, d->hi, v);
            return -1;
        }
        out->f = x;
        break;
    }
    case T_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == '-' || *v == '+' || errno || end == v || *end) {
            snprintf(err, errlen, "%s expects a non-negative integer, got '%s'", flag, v);
            return -1;
        }
        out->u = x;
        break;
    }
    case T_CHOICE: {
        int k = choice_index(d->arg, v);
        if (k < 0) {
            char c[256];
            choices_text(d->arg, c, sizeof c);
            snprintf(err, errlen, "%s expects %s, got '%s'", flag, c, v);
            return -1;
        }
        out->i = k;
        break;
    }
    case T_TEXT:
    case T_LIST: {
        char why[400];
        if (d->check && d->check(v, why, sizeof why)) {
            snprintf(err, errlen, "%s: %s", flag, why);
            return -1;
        }
        break;
    }
    case T_IN: {
        struct stat st;
        if (!strcmp(v, "-")) {
            if (d->flags & O_STDIN) break;
            snprintf(err, errlen, "%s: this file cannot be read from standard input", flag);
            return -1;
        }
        if (stat(v, &st)) {
            snprintf(err, errlen, "%s: cannot open %s: %s", flag, v, strerror(errno));
            return -1;
        }
        if (S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s: %s is a directory", flag, v);
            return -1;
        }
        break;
    }
    case T_OUT: {
        struct stat st;
        if (!*v) {
            snprintf(err, errlen, "%s: empty file name", flag);
            return -1;
        }
        if (!stat(v, &st) && S_ISDIR(st.st_mode)) {
            snprintf(err, errlen, "%s: cannot write %s: %s", flag, v, strerror(EISDIR));
            return -1;
        }
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", v);
        char *slash = strrchr(dir, '/');
        if (slash) {
            slash[slash == dir ? 1 : 0] = 0;
            int e = stat(dir, &st) ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
            if (e) {
                snprintf(err, errlen, "%s: cannot write %s: %s", flag, v, strerror(e));
                return -1;
            }
        }
        break;
    }
    default: break;
    }
    out->text = v;
    return 0;
}

static void help_line(const opt_def *d) {
    char left[160];
    size_t n = 0;
    for (const char *p = d->names; *p;) {
        size_t k = strcspn(p, "|");
        n += (size_t)snprintf(left + n, sizeof left - n, "%s%.*s", n ? ", " : "", (int)k, p);
        p += k + (p[k] ? 1 : 0);
    }
    if (d->arg && d->type != T_FLAG) snprintf(left + n, sizeof left - n, " %s", d->arg);
    if (strlen(left) > 30) printf("  %s\n  %-30s %s", left, "", d->help);
    else printf("  %-30s %s", left, d->help);
    if (d->def_text && !strcmp(d->def_text, "@model")) printf(" (default: %s)", cli_default_model());
    else if (d->def_text) printf(" (default: %s)", d->def_text);
    else if (d->def && d->type != T_FLAG) printf(" (default: %s)", d->def);
    if (d->flags & O_MULTI) printf(" (repeatable)");
    printf("\n");
}

static void print_help(unsigned cmd, const char *usage) {
    printf("%s\n\noptions:\n", usage);
    int ignored = 0;
    for (int i = 0; i < opt_table_len; i++) {
        const opt_def *d = &opt_table[i];
        if (!(d->cmds & cmd)) continue;
        if (d->type == T_SECTION) printf("\n%s\n", d->help);
        else if (d->type == T_IGNORED) ignored = 1;
        else help_line(d);
    }
    if (!ignored) return;
    printf("\nllama.cpp options with no meaning here (accepted with a note, otherwise ignored):\n");
    for (int i = 0; i < opt_table_len; i++) {
        const opt_def *d = &opt_table[i];
        if ((d->cmds & cmd) && d->type == T_IGNORED) help_line(d);
    }
}

static void show_values(const cli_args *a) {
    char nm[64];
    for (int i = 0; i < opt_table_len; i++) {
        const opt_def *d = &opt_table[i];
        if (!(d->cmds & a->cmd) || d->type == T_SECTION || d->id == O_IGNORED || d->id == O_SHOW_OPTIONS ||
            d->id == O_HELP)
            continue;
        const opt_value *v = &a->v[d->id];
        first_name(d, 1, nm, sizeof nm);
        if (d->flags & O_MULTI) {
            for (int k = 0; k < v->n_list; k++) printf("%s=%s\n", nm, v->list[k]);
            if (!v->n_list) printf("%s (none)\n", nm);
        } else if (d->type == T_FLAG) {
            printf("%s=%s\n", nm, v->set ? "on" : "off");
        } else if (v->text) {
            printf("%s=%s%s\n", nm, v->text, v->set ? "" : " (default)");
        } else {
            printf("%s (unset%s%s)\n", nm, d->def_text ? ": " : "",
                   d->def_text ? (!strcmp(d->def_text, "@model") ? cli_default_model() : d->def_text) : "");
        }
    }
    for (int k = 0; k < a->n_pos; k++) printf("argument %d=%s\n", k + 1, a->pos[k]);
}

static void die_opt(const cli_args *a, const char *msg) { cli_die(EXIT_BADINPUT, "%s: %s", a->cmd_name, msg); }

/* One parse per process: the values live in static storage, so what they
 * point to stays reachable until exit. */
static cli_args g_args;

const cli_args *cli_parse(unsigned cmd, const char *cmd_name, const char *usage, int argc, char **argv) {
    cli_args *a = &g_args;
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->cmd_name = cmd_name;
    a->pos = calloc((size_t)argc + 1, sizeof *a->pos);
    char err[700], nm[64];
    /* defaults first: a table error here is a bug of the table itself */
    for (int i = 0; i < opt_table_len; i++) {
        const opt_def *d = &opt_table[i];
        if (!(d->cmds & cmd) || d->type == T_SECTION || !d->def || d->type == T_FLAG) continue;
        if (convert(d, first_name(d, 1, nm, sizeof nm), d->def, &a->v[d->id], err, sizeof err))
            cli_die(EXIT_RUNTIME, "option table: default of %s: %s", nm, err);
    }
    int show = 0, only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (only_pos || arg[0] != '-' || !arg[1]) {
            a->pos[a->n_pos++] = arg;
            continue;
        }
        if (!strcmp(arg, "--")) {
            only_pos = 1;
            continue;
        }
        const char *eq = strchr(arg, '=');
        size_t n = eq ? (size_t)(eq - arg) : strlen(arg);
        const opt_def *d = find(cmd, arg, n);
        if (!d) {
            snprintf(err, sizeof err, "unknown option '%.*s' (see 'doppler %s --help')", (int)n, arg, cmd_name);
            die_opt(a, err);
        }
        char flag[128];
        snprintf(flag, sizeof flag, "%.*s", (int)n, arg);
        opt_value *v = &a->v[d->id];
        const char *val = NULL;
        int takes = d->type != T_FLAG && !(d->type == T_IGNORED && !d->arg);
        int optional = d->type == T_IGNORED && d->arg && d->arg[0] == '[';
        if (eq) {
            if (!takes) {
                snprintf(err, sizeof err, "%s takes no value, got '%s'", flag, eq + 1);
                die_opt(a, err);
            }
            val = eq + 1;
        } else if (takes && optional) {
            char choices[64];
            snprintf(choices, sizeof choices, "%.*s", (int)strlen(d->arg) - 2, d->arg + 1);
            if (i + 1 < argc && choice_index(choices, argv[i + 1]) >= 0) val = argv[++i];
        } else if (takes) {
            if (i + 1 >= argc) {
                snprintf(err, sizeof err, "%s needs a value (%s)", flag, d->arg ? d->arg : "a value");
                die_opt(a, err);
            }
            val = argv[++i];
        }
        if (d->id == O_HELP) {
            print_help(cmd, usage);
            exit(0);
        }
        if (d->id == O_SHOW_OPTIONS) {
            show = 1;
            continue;
        }
        if (d->type == T_IGNORED) {
            fprintf(stderr, "doppler: note: ignoring %s%s%s (llama.cpp): %s\n", flag, val ? " " : "", val ? val : "",
                    d->help);
            continue;
        }
        if (val && convert(d, flag, val, v, err, sizeof err)) die_opt(a, err);
        v->set = 1;
        v->spelling = argv[i - (val && !eq ? 1 : 0)];
        v->spelling_len = (int)n;
        if (d->flags & O_MULTI) {
            v->list = realloc(v->list, sizeof *v->list * (size_t)(v->n_list + 1));
            if (!v->list) cli_die(EXIT_RUNTIME, "out of memory");
            v->list[v->n_list++] = val;
        }
    }
    if (a->v[O_VERBOSE].set) cli_verbose = 1;
    if (a->v[O_LOG_TAGS].text) cli_set_log_tags(a->v[O_LOG_TAGS].text);
    if (show) {
        show_values(a);
        exit(0);
    }
    return a;
}

void cli_positionals(const cli_args *a, int min, int max, const char *what) {
    if (a->n_pos > max) {
        if (max == 0)
            cli_die(EXIT_BADINPUT, "%s: unexpected argument '%s' (see 'doppler %s --help')", a->cmd_name,
                    a->pos[0], a->cmd_name);
        cli_die(EXIT_BADINPUT, "%s: too many arguments ('%s'); expected %s", a->cmd_name, a->pos[max], what);
    }
    if (a->n_pos < min) cli_die(EXIT_BADINPUT, "%s: missing %s (see 'doppler %s --help')", a->cmd_name, what, a->cmd_name);
}

int arg_given(const cli_args *a, int id) { return a->v[id].set; }
int arg_flag(const cli_args *a, int id) { return a->v[id].set; }
int arg_int(const cli_args *a, int id) { return (int)a->v[id].i; }
double arg_float(const cli_args *a, int id) { return a->v[id].f; }
uint64_t arg_u64(const cli_args *a, int id) { return a->v[id].u; }
const char *arg_str(const cli_args *a, int id) { return a->v[id].text; }

const char *arg_name(const cli_args *a, int id) {
    static char buf[64];
    if (a->v[id].spelling) {
        snprintf(buf, sizeof buf, "%.*s", a->v[id].spelling_len, a->v[id].spelling);
        return buf;
    }
    for (int i = 0; i < opt_table_len; i++)
        if (opt_table[i].id == id && (opt_table[i].cmds & a->cmd)) return first_name(&opt_table[i], 1, buf, sizeof buf);
    return "?";
}

void opt_print_table(void) {
    static const struct {
        unsigned bit;
        const char *name;
    } cmds[] = {{C_RUN, "run"},     {C_CHAT, "chat"},   {C_TOKENIZE, "tokenize"}, {C_INSPECT, "inspect"},
                {C_BENCH, "bench"}, {C_PPL, "perplexity"}, {C_SYNTH, "synth"},  {C_VERIFY, "verify"},
                {C_DUMP, "trace dump"}, {C_COMPARE, "trace compare"}, {C_SERVE, "serve"},
                {C_BATCHED, "bench batched"}};
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++)
        for (int i = 0; i < opt_table_len; i++) {
            const opt_def *d = &opt_table[i];
            if (!(d->cmds & cmds[c].bit) || d->type == T_SECTION) continue;
            printf("%s\t%s\t%s\t%.17g\t%.17g\t%s\t%s\t%s\t%s%s%s\t%s\n", cmds[c].name, d->names,
                   g_type_names[d->type], d->lo, d->hi, d->arg ? d->arg : "", d->def ? d->def : "",
                   d->example ? d->example : "", d->flags & O_MULTI ? "multi," : "", d->flags & O_STDIN ? "stdin," : "",
                   d->check ? "checked" : "", d->help);
        }
}
