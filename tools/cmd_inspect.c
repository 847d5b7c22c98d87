/* doppler inspect FILE */
#include <stdio.h>
#include <string.h>

#include "cli.h"

int cmd_inspect(int argc, char **argv) {
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: doppler inspect FILE\n\nPrints the GGUF header, metadata (long arrays abbreviated) and "
                   "the tensor table.\n");
            return 0;
        } else if (argv[i][0] == '-' && argv[i][1]) {
            cli_die(EXIT_BADINPUT, "inspect: unknown option '%s'", argv[i]);
        } else if (!path) {
            path = argv[i];
        } else {
            cli_die(EXIT_BADINPUT, "inspect: only one file may be given");
        }
    }
    if (!path) cli_die(EXIT_BADINPUT, "inspect: no file given (usage: doppler inspect FILE)");
    int rc = dp_inspect_file(path, stdout);
    if (rc) cli_die_lib(rc);
    return 0;
}
