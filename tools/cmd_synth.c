/* doppler synth: write a synthetic model (random weights, real shapes). */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char *USAGE =
    "usage: doppler synth --arch A --preset P --type T [options] -o FILE\n\n"
    "Writes a GGUF with random weights and the exact tensor names, shapes, per-tensor\n"
    "types and metadata of a real model of that shape.";

int synth_check_type(const char *v, char *err, size_t errlen) {
    const char *all = dp_synth_types();
    size_t n = strlen(v);
    for (const char *p = all; n && (p = strstr(p, v)); p += n)
        if ((p == all || p[-1] == ' ') && (p[n] == ' ' || !p[n])) return 0;
    snprintf(err, errlen, "expects one of %s, got '%s'", all, v);
    return -1;
}

int cmd_synth(int argc, char **argv) {
    const cli_args *A = cli_parse(C_SYNTH, "synth", USAGE, argc, argv);
    cli_positionals(A, 0, 0, "");
    dp_synth_params p = {.seed = arg_u64(A, O_SEED), .arch = arg_str(A, O_ARCH), .preset = arg_str(A, O_PRESET),
                         .type = arg_str(A, O_TYPE), .vocab_from = arg_str(A, O_VOCAB_FROM),
                         .n_layer = arg_int(A, O_LAYERS)};
    const char *out = arg_str(A, O_OUTPUT);
    if (!p.arch) cli_die(EXIT_BADINPUT, "synth: --arch is required (gemma3, qwen2, llama, qwen3, gemma2, phi3 or smollm3)");
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
