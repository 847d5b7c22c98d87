/* doppler chat (placeholder until written) */
#include "cli.h"
int cmd_chat(int argc, char **argv) { cli_die(EXIT_BADINPUT, "chat: not yet"); }
