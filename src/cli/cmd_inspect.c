/* ctrain-dist inspect CKPT: a checkpoint's manifest, every digest verified
 * (ckpt/inspect.h); rank 0 prints, every rank learns the verdict. */
#include "cli/cli.h"

#include <stdio.h>

#include "ckpt/inspect.h"

static int check(const struct ct_cli_args *a)
{
    int rc = ct_cli_refuse(a, CT_CLI_NO_FORMAT | CT_CLI_NO_OUTPUT | CT_CLI_NO_GENERATE | CT_CLI_NO_PREDICT |
                                  CT_CLI_NO_CONFIG);
    return rc ? rc : ct_cli_check_checkpoint_command(a);
}

static int run(struct ct_comm *comm, struct ct_cli_args *a)
{
    int rc = 0;
    if (comm->rank == 0)
        rc = ct_ckpt_inspect(a->checkpoint, stdout);
    rc = ct_comm_agree(comm, rc);
    return rc < 0 ? ct_cli_fail(comm, CT_EXIT_RUNTIME) : 0;
}

const struct ct_cli_command ct_cli_inspect = {
    .name = "inspect",
    .synopsis = "inspect CHECKPOINT",
    .summary = "print a checkpoint's manifest and verify every digest",
    .help = "",
    .operand = CT_CLI_CHECKPOINT_FIRST,
    .check = check,
    .run = run,
};
