#define _GNU_SOURCE
#include "interrupt.h"

#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "doppler.h"

static volatile sig_atomic_t g_count, g_at_once;

static void on_sigint(int sig) {
    (void)sig;
    if (g_at_once || ++g_count >= 2) {
        /* only async-signal-safe calls here */
        static const char nl[] = "\n";
        ssize_t r = write(STDERR_FILENO, nl, 1);
        (void)r;
        dp_outfile_abort_all(); /* no unfinished output file stays behind */
        _exit(EXIT_INTERRUPTED);
    }
}

void cli_interrupt_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;
    sigaction(SIGINT, &sa, NULL);
}

int cli_interrupted(void) { return g_count > 0; }
void cli_interrupt_reset(void) { g_count = 0; }
void cli_interrupt_exit_at_once(int on) { g_at_once = on; }
