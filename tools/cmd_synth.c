/* doppler synth: write a synthetic model (random weights, real shapes). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static void usage(void) {
    printf("usage: doppler synth --arch A --preset P --type T [options] -o FILE\n\n"
           "Writes a GGUF with random weights and the exact tensor names, shapes, per-tensor\n"
           "types and metadata of a real model of that shape.\n\n"
           "  --arch gemma3|qwen2|llama|qwen3|gemma2|phi3|smollm3\n"
           "  --preset NAME          per architecture:\n%s\n"
           "  --type T               %s\n"
           "                         (q4_k_m etc. reproduce llama.cpp's per-tensor mix)\n"
           "  --vocab-from FILE      copy the tokenizer.* keys of another GGUF\n"
           "  --seed S               random seed (default 1)\n"
           "  --layers N             override the number of layers (widths unchanged)\n"
           "  -o, --output FILE      where to write\n",
           "                           gemma3: tiny 270m 1b; qwen2: tiny 0.5b 3b; llama: tiny 1b;\n"
           "                           qwen3: tiny 0.6b 4b 8b; gemma2: tiny 2b; phi3: tiny mini 4-mini;\n"
           "                           smollm3: tiny 3b",
           dp_synth_types());
}

int cmd_synth(int argc, char **argv) {
    dp_synth_params p = {.seed = 1};
    const char *out = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(); return 0; }
        else if (!strcmp(a, "--arch")) p.arch = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--preset")) p.preset = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--type")) p.type = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--vocab-from")) p.vocab_from = cli_value(argc, argv, &i);
        else if (!strcmp(a, "--seed")) p.seed = cli_u64(a, cli_value(argc, argv, &i));
        else if (!strcmp(a, "--layers")) p.n_layer = cli_int(a, cli_value(argc, argv, &i), 1, 1024);
        else if (!strcmp(a, "-o") || !strcmp(a, "--output")) out = cli_value(argc, argv, &i);
        else cli_die(EXIT_BADINPUT, "synth: unknown option '%s' (see 'doppler synth --help')", a);
    }
    if (!p.arch) cli_die(EXIT_BADINPUT, "synth: --arch is required (gemma3, qwen2 or llama)");
    if (!p.preset) cli_die(EXIT_BADINPUT, "synth: --preset is required (see 'doppler synth --help')");
    if (!p.type) cli_die(EXIT_BADINPUT, "synth: --type is required (%s)", dp_synth_types());
    if (!out) cli_die(EXIT_BADINPUT, "synth: no output file (use -o FILE)");
    double t0 = dp_time_s();
    int rc = dp_synth(&p, out);
    if (rc) cli_die_lib(rc);
    FILE *f = fopen(out, "rb");
    long size = 0;
    if (f) {
        fseek(f, 0, SEEK_END);
        size = ftell(f);
        fclose(f);
    }
    fprintf(stderr, "synth: wrote %s (%s %s %s, %.1f MB) in %.1f s\n", out, p.arch, p.preset, p.type, size / 1e6,
            dp_time_s() - t0);
    return 0;
}
