/* doppler inspect FILE */
#include <stdio.h>

#include "cli.h"

static const char *USAGE = "usage: doppler inspect FILE\n\n"
                           "Prints the GGUF header, metadata (long arrays abbreviated) and the tensor table.";

int cmd_inspect(int argc, char **argv) {
    const cli_args *A = cli_parse(C_INSPECT, "inspect", USAGE, argc, argv);
    cli_positionals(A, 1, 1, "one FILE");
    int rc = dp_inspect_file(A->pos[0], stdout);
    if (rc) cli_die_lib(rc);
    cli_finish_stdout();
    return 0;
}
