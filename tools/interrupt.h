/* Ctrl-C: the first stops the work at the next token or chunk (commands
 * poll cli_interrupted(), flush what they produced, print their stats so far,
 * remove unfinished output and exit 130); a second one exits at once. */
#ifndef DP_INTERRUPT_H
#define DP_INTERRUPT_H

enum { EXIT_INTERRUPTED = 130 };

/* Installs the SIGINT handler (without SA_RESTART, so a blocking read
 * returns). */
void cli_interrupt_install(void);
/* Whether Ctrl-C was pressed since the last cli_interrupt_reset. */
int cli_interrupted(void);
void cli_interrupt_reset(void);
/* While on (chat waiting for input), Ctrl-C exits 130 at once. */
void cli_interrupt_exit_at_once(int on);

#endif
