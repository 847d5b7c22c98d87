/* The command-line options of every doppler command: one table
 * (option_table.c) of names, argument types and ranges, defaults and help
 * lines, parsed by one function (options.c) that also writes each command's
 * --help from the table.
 *
 * Syntax: --name=value and --name value (short names too: -c 512, -c=512);
 * a value may start with '-' (-n -1); "--" ends the options; every input file
 * option takes '-' for standard input where the command can read one. */
#ifndef DP_OPTIONS_H
#define DP_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

/* Commands, one bit each: an option entry names the commands it belongs to. */
enum {
    C_RUN = 1 << 0, C_CHAT = 1 << 1, C_TOKENIZE = 1 << 2, C_INSPECT = 1 << 3, C_BENCH = 1 << 4,
    C_PPL = 1 << 5, C_SYNTH = 1 << 6, C_VERIFY = 1 << 7, C_DUMP = 1 << 8, C_COMPARE = 1 << 9,
    C_SERVE = 1 << 10, C_BATCHED = 1 << 11, C_ALL = (1 << 12) - 1
};

/* What an option's value is. */
typedef enum {
    T_SECTION,  /* not an option: a heading in --help */
    T_FLAG,     /* no value */
    T_INT,      /* integer in [lo, hi] */
    T_FLOAT,    /* finite number in [lo, hi] */
    T_U64,      /* non-negative 64-bit integer */
    T_TEXT,     /* any text (check, when set, may refuse it) */
    T_CHOICE,   /* one of the '|'-separated words in arg */
    T_LIST,     /* text checked by check (lists of layers, points, ...) */
    T_IN,       /* an existing readable file; '-' = stdin when O_STDIN */
    T_OUT,      /* a file to write: not a directory, its directory exists */
    T_IGNORED,  /* a llama.cpp option with no meaning here: accepted with a note;
                 * takes a value when arg is set ("N"), an optional one when arg
                 * lists choices in brackets ("[on|off|auto]") */
} opt_type;

enum { O_MULTI = 1, O_STDIN = 2 };

/* Option ids: where a parsed value is kept. Several entries may share an id
 * when their commands differ (the same option with another default). */
enum {
    O_HELP, O_VERBOSE, O_LOG_TAGS, O_SHOW_OPTIONS, O_MODEL,
    O_PROMPT, O_FILE, O_N_PREDICT, O_SYSTEM, O_CHAT, O_CHAT_TEMPLATE, O_CHAT_TEMPLATE_KWARGS, O_REASONING_FORMAT, O_PRINT_PROMPT, O_STOP,
    O_NO_DISPLAY_PROMPT, O_SPECIAL, O_PARSE_SPECIAL, O_NO_BOS, O_IGNORE_EOS, O_PROFILE,
    O_TEMP, O_TOP_K, O_TOP_P, O_MIN_P, O_REPEAT_PENALTY, O_REPEAT_LAST_N, O_SEED, O_JSON_SCHEMA, O_JSON_SCHEMA_FILE,
    O_GRAMMAR, O_GRAMMAR_FILE,
    O_CTX, O_BATCH, O_THREADS, O_BACKEND, O_CACHE_TYPE_K, O_CACHE_TYPE_V,
    O_DEBUG, O_DEBUG_LAYERS, O_DEBUG_POS, O_DEBUG_POINTS, O_TRACK_TOKEN, O_TOP_K_PRINT, O_CHECK_FINITE,
    O_IDS, O_PIECES, O_WHOLE, O_STATS,
    O_BENCH_PROMPTS, O_GEN, O_DEPTH, O_REPS, O_PEAK_GBPS, O_JSON, O_SEQS, O_SHARED_PREFIX,
    O_TOKENS, O_CHUNKS,
    O_ARCH, O_PRESET, O_TYPE, O_VOCAB_FROM, O_LAYERS, O_OUTPUT,
    O_SPEED, O_NO_OPS, O_PROMPT_TOKENS, O_DECODE_STEPS, O_GREEDY_STEPS, O_SAVE_REF, O_REF,
    O_TOL, O_QUIET,
    O_HOST, O_PORT, O_PARALLEL, O_API_KEY, O_API_KEY_FILE, O_ALIAS, O_MAX_QUEUE, O_MAX_BODY, O_HEADER_TIMEOUT,
    O_BODY_TIMEOUT, O_MAX_CONNS, O_SHUTDOWN_TIMEOUT, O_WARMUP, O_NO_WARMUP, O_HOST_THREADS, O_POOLING,
    O_IGNORED,
    O_COUNT
};

/* Checks a T_LIST / T_TEXT value: 0 when good, else -1 with the reason in err. */
typedef int (*opt_check_fn)(const char *v, char *err, size_t errlen);

typedef struct {
    int id;
    unsigned cmds;           /* C_* bits */
    const char *names;       /* '|'-separated spellings, e.g. "-c|--ctx-size|--ctx" */
    opt_type type;
    double lo, hi;           /* T_INT, T_FLOAT */
    const char *arg;         /* the value's name in --help ("N", "FILE"); T_CHOICE: the choices */
    const char *def;         /* the value when the option is absent (NULL = none) */
    const char *def_text;    /* what --help says the default is, when not def */
    const char *help;        /* one line */
    opt_check_fn check;      /* T_LIST (required), T_TEXT (optional) */
    const char *example;     /* a good value of a T_LIST / T_TEXT option, for the table test */
    unsigned flags;          /* O_MULTI, O_STDIN */
} opt_def;

extern const opt_def opt_table[];
extern const int opt_table_len;

typedef struct {
    int set;                 /* given on the command line */
    const char *text;        /* the value as given, or the default (NULL for none) */
    long long i;             /* T_INT, T_CHOICE (index of the choice) */
    double f;                /* T_FLOAT */
    uint64_t u;              /* T_U64 */
    const char **list;       /* O_MULTI: every value given, in order */
    int n_list;
    const char *spelling;    /* the name as the user wrote it (spelling_len bytes) */
    int spelling_len;
} opt_value;

typedef struct {
    unsigned cmd;
    const char *cmd_name;    /* "run", "trace dump" */
    opt_value v[O_COUNT];
    const char **pos;        /* positional arguments */
    int n_pos;
} cli_args;

/* Parses argv[1..argc-1] for one command (argv[0] is the command's name).
 * --help prints `usage` (the usage line and an optional paragraph) followed
 * by the option list, and exits 0; --show-options prints every value and
 * exits 0; a bad option or value exits 2 with one line naming it. */
const cli_args *cli_parse(unsigned cmd, const char *cmd_name, const char *usage, int argc, char **argv);
/* Exits 2 unless there are between min and max positional arguments. */
void cli_positionals(const cli_args *a, int min, int max, const char *what);

int arg_given(const cli_args *a, int id);
int arg_flag(const cli_args *a, int id);
int arg_int(const cli_args *a, int id);
double arg_float(const cli_args *a, int id);
uint64_t arg_u64(const cli_args *a, int id);
const char *arg_str(const cli_args *a, int id);   /* NULL when absent without a default */
/* The spelling the user gave (for messages), or the option's first name. */
const char *arg_name(const cli_args *a, int id);

/* Prints the whole table as tab-separated lines, one per option and command
 * (doppler options): command, names, type, lo, hi, arg, default, example,
 * flags (multi, stdin, checked: a value can be refused), help. */
void opt_print_table(void);

#endif
