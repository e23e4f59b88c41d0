/* ctrain-dist report RUN_DIR...: a self-contained HTML page (or CSV) of one
 * or more runs (report/report.h); rank 0 reads the run directories and
 * writes, everybody learns the outcome. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "report/report.h"

static const struct ct_cli_option options[] = {
    CT_CLI_OPTION("--output", "-o", CT_CLI_VALUE, output, NULL),
    CT_CLI_OPTION("--format", NULL, CT_CLI_VALUE, format, NULL),
    CT_CLI_END,
};

_Static_assert(CT_CLI_MAX_SETS == 256, "report's too_many message says 256");

static int check(const struct ct_cli_args *a)
{
    if (a->n_operands == 0)
        return ct_error_set(CT_EUSAGE, "report needs one or more run directories (see ctrain-dist "
                            "report --help)");
    if (a->config || a->n_sets || a->run_dir || a->resume || a->checkpoint || a->seeds || a->data ||
        a->labels || a->list || a->tsv || a->check)
        return ct_error_set(CT_EUSAGE, "report takes run directories, -o FILE and --format only");
    if (a->output && !*a->output)
        return ct_error_set(CT_EUSAGE, "report: -o needs a file name");
    return 0;
}

static int run(struct ct_comm *comm, struct ct_cli_args *a)
{
    int format;
    int rc = ct_comm_agree(comm, ct_cli_parse_format(a->format, ct_report_format_names, CT_REPORT_HTML,
                                                     &format));
    if (rc < 0)
        return ct_cli_fail(comm, CT_EXIT_USAGE);
    const char *path = a->output ? a->output : format == CT_REPORT_HTML ? "report.html" : NULL;
    if (comm->rank == 0)
        rc = ct_report(a->operands, a->n_operands, (enum ct_report_format)format, path, stdout);
    rc = ct_comm_agree(comm, rc);
    return rc < 0 ? ct_cli_fail(comm, rc == CT_EUSAGE ? CT_EXIT_USAGE : CT_EXIT_RUNTIME) : 0;
}

const struct ct_cli_command ct_cli_report = {
    .name = "report",
    .synopsis = "report RUN_DIR... [-o FILE] [--format html|csv]",
    .summary = "a self-contained HTML page of one or more runs (curves, phases, checkpoints, provenance)",
    .help = "  RUN_DIR              a run directory, or a directory of seed-* runs (train --seeds);\n"
            "                       several runs are overlaid with their mean +- std\n"
            "  -o, --output FILE    where to write it, atomically (html: default report.html;\n"
            "                       csv: default standard output; '-': standard output)\n"
            "  --format html        curves per epoch and per step, throughput, each rank's phase\n"
            "                       split, a traced step's timeline (trace.json: log.trace), the\n"
            "                       checkpoint timeline, provenance; no script, nothing fetched:\n"
            "                       open it anywhere, attach it to a ticket\n"
            "  --format csv         the metrics, one row per epoch of each run, with a run column\n",
    .options = options,
    .operand = CT_CLI_OPERANDS,
    .max_operands = CT_CLI_MAX_SETS,
    .too_many = "report: more than 256 run directories",
    .check = check,
    .run = run,
};
