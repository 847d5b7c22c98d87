/* doppler: command-line entry point. Each subcommand lives in cmd_<name>.c. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static int cmd_options(int argc, char **argv) {
    if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: doppler options\n\nOne tab-separated line per option and command: command, names, type, "
               "lo, hi, argument, default, example, flags, help.\n");
        return 0;
    }
    if (argc > 1) cli_die(EXIT_BADINPUT, "options: unexpected argument '%s'", argv[1]);
    opt_print_table();
    return 0;
}

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *help;
} command;

static const command g_commands[] = {
    {"run", cmd_run, "generate text from a prompt"},
    {"inspect", cmd_inspect, "print a GGUF file's metadata and tensor table"},
    {"trace", cmd_trace, "dump named hidden states to a file, or compare two dumps"},
    {"tokenize", cmd_tokenize, "print the tokens of a text"},
    {"chat", cmd_chat, "interactive multi-turn chat"},
    {"bench", cmd_bench, "measure speed: doppler bench inference [options]"},
    {"perplexity", cmd_perplexity, "perplexity of a text (llama.cpp's method)"},
    {"synth", cmd_synth, "write a synthetic model with real shapes and random weights"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server with continuous batching and a chat page"},
    {"verify", cmd_verify, "check the CUDA backend against the CPU (per op, then a whole model)"},
    {"options", cmd_options, "list every option of every command (tab-separated, for scripts)"},
};

static void usage(FILE *out) {
    fprintf(out, "doppler %s - LLM inference for GGUF models\n\nusage: doppler COMMAND [options]\n\ncommands:\n",
            DOPPLER_VERSION);
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        fprintf(out, "  %-12s %s\n", g_commands[i].name, g_commands[i].help);
    fprintf(out, "\n'doppler COMMAND --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) cli_die(EXIT_BADINPUT, "no command given (usage: doppler COMMAND [options]; see 'doppler --help')");
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("doppler %s\n", DOPPLER_VERSION);
        return 0;
    }
    for (size_t i = 0; i < sizeof g_commands / sizeof g_commands[0]; i++)
        if (!strcmp(argv[1], g_commands[i].name)) {
            int rc = g_commands[i].fn(argc - 1, argv + 1);
            cli_finish_stdout();
            return rc;
        }
    cli_die(EXIT_BADINPUT, "unknown command '%s' (see 'doppler --help')", argv[1]);
}
