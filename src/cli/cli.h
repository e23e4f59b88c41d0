/* The ctrain-dist subcommands that live outside main.c: each takes the
 * arguments after its name and returns the process's exit status (0, 1 a
 * run-time error or a failed audit, 2 a bad command line), the same on every
 * rank. */
#ifndef CT_CLI_CLI_H
#define CT_CLI_CLI_H

#include "parallel/comm.h"

enum { CT_EXIT_OK = 0, CT_EXIT_RUNTIME = 1, CT_EXIT_USAGE = 2 };

/* ctrain-dist audit verify|diff|replay ... (argv[0] is "audit"). */
int ct_cli_audit(struct ct_comm *c, int argc, char **argv);
/* ctrain-dist summary RUN_DIR... (argv[0] is "summary"). */
int ct_cli_summary(struct ct_comm *c, int argc, char **argv);
/* ctrain-dist data inspect|stats ... (argv[0] is "data"; src/cli/data.c):
 * rank 0 reads, every rank exits with its status. Its help texts, which
 * main.c's command table shows too. */
int ct_cli_data(struct ct_comm *c, int argc, char **argv);
extern const char ct_cli_data_synopsis[], ct_cli_data_summary[], ct_cli_data_help[];

#endif
