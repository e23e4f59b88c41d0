/* ctrain-dist audit verify|diff|replay and ctrain-dist summary (the audit
 * of several runs' final metrics, which shares audit's usage text): their
 * command lines (tables for args.c: options of their own, cli.h) and exit
 * statuses; the audits themselves are src/report/audit.c (verify, diff,
 * summary) and src/train/replay.c (replay). Every error is agreed across
 * ranks first, so every rank exits with the same status. */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

#include "core/error.h"
#include "core/gemm.h"
#include "report/audit.h"
#include "train/replay.h"

#define MAX_AUDIT_SETS 64

static const char audit_usage[] =
    "usage: ctrain-dist audit verify RUN_DIR\n"
    "       ctrain-dist audit diff CKPT_A CKPT_B\n"
    "       mpirun -np N ctrain-dist audit replay CKPT_A CKPT_B [--out DIR] [--set S.K=V]...\n"
    "                                             [--gemm auto|openblas|own]\n"
    "       ctrain-dist summary RUN_DIR...\n";

/* Print the agreed error once and pick the status. */
static int report(const struct ct_comm *c, int rc)
{
    if (rc == 0)
        return CT_EXIT_OK;
    if (c->rank == 0)
        fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
    return rc == CT_EUSAGE || rc == CT_ECONFIG ? CT_EXIT_USAGE : CT_EXIT_RUNTIME;
}

/* Rank 0 runs a read-only audit; everybody learns the result. */
static int rank0(struct ct_comm *c, int rc_rank0)
{
    return report(c, ct_comm_agree(c, rc_rank0));
}

static int run_verify(struct ct_comm *c, struct ct_cli_args *a)
{
    return rank0(c, c->rank == 0 ? ct_audit_verify(a->operands[0], stdout) : 0);
}

static int run_diff(struct ct_comm *c, struct ct_cli_args *a)
{
    return rank0(c, c->rank == 0 ? ct_audit_diff(a->operands[0], a->operands[1], stdout) : 0);
}

static int run_replay(struct ct_comm *c, struct ct_cli_args *a)
{
    const int gemm = a->gemm - 1; /* -1 auto, 0 OpenBLAS, 1 ours */
    /* A replay with the other matrix products shows what a different gemm
     * does to the bits (and is how the tests prove the audit notices). */
    if (gemm == 1 && !ct_sgemm_own_available())
        return report(c, ct_comm_agree(c, ct_error_set(CT_EUSAGE, "audit replay: --gemm own needs a CPU "
                                                       "with AVX-512F")));
    ct_sgemm_force(gemm);
    struct ct_audit_replay_params p = {.ckpt_a = a->operands[0], .ckpt_b = a->operands[1],
                                       .out_dir = a->out_dir, .sets = a->sets, .n_sets = a->n_sets};
    return report(c, ct_audit_replay(c, &p, c->rank == 0 ? stdout : NULL));
}

static const struct ct_cli_command verify = {
    .name = "verify",
    .leading_operands = CT_CLI_ALL_OPERANDS,
    .min_operands = 1,
    .max_operands = 1,
    .too_few = "audit verify takes one run directory",
    .too_many = "audit verify takes one run directory",
    .run = run_verify,
};

static const struct ct_cli_command diff = {
    .name = "diff",
    .leading_operands = CT_CLI_ALL_OPERANDS,
    .min_operands = 2,
    .max_operands = 2,
    .too_few = "audit diff takes two checkpoints",
    .too_many = "audit diff takes two checkpoints",
    .run = run_diff,
};

static const char *const gemm_names[] = {"auto", "openblas", "own", NULL};

static const struct ct_cli_option replay_options[] = {
    CT_CLI_OPTION("--out", NULL, CT_CLI_VALUE, out_dir, NULL),
    CT_CLI_OPTION("--set", NULL, CT_CLI_SET, sets, NULL),
    CT_CLI_CHOICE_OPTION("--gemm", gemm, gemm_names),
    CT_CLI_END,
};

static const struct ct_cli_command replay = {
    .name = "replay",
    .options = replay_options,
    .prefix = "audit replay: ",
    .unknown_hint = "",
    .leading_operands = 2,
    .pairs = 1,
    .min_operands = 2,
    .too_few = "audit replay takes two checkpoints, A and B",
    .max_sets = MAX_AUDIT_SETS,
    .run = run_replay,
};

static void print_audit_usage(FILE *out)
{
    fputs(audit_usage, out);
}

const struct ct_cli_command ct_cli_audit = {
    .name = "audit",
    .synopsis = "audit verify RUN_DIR | diff CKPT_A CKPT_B | replay CKPT_A CKPT_B [--out DIR] [--set S.K=V]...\n"
                "                   [--gemm auto|openblas|own]",
    .summary = "verify a run's hash chain, diff two checkpoints, or replay an interval bit for bit",
    .help = "  verify RUN_DIR       every checkpoint of chain.jsonl and every link; the provenance\n"
            "                       table; exit 1 naming the checkpoint on any break\n"
            "  diff CKPT_A CKPT_B   config, provenance and per-tensor differences\n"
            "  replay CKPT_A CKPT_B under mpirun with any N: restore A, train to B's step with B's\n"
            "                       config, compare every tensor and rank record with B, write the\n"
            "                       certificate audit-<A>-<B>.json (in --out DIR; without it, in\n"
            "                       <B's run directory>-audit beside the audited run)\n"
            "  --set S.K=V          replay: runtime keys only\n"
            "  --gemm IMPL          replay: force the convolutions' matrix products\n",
    .own_options = 1,
    .subcommands = (const struct ct_cli_command *const[]){&verify, &diff, &replay, NULL},
    .no_subcommand = "audit needs a subcommand (verify, diff or replay)",
    .unknown_subcommand = "unknown audit subcommand '%s' (known: verify, diff, replay)",
    .print_help = print_audit_usage,
    .usage = audit_usage,
    .usage_first = 1,
};

static int run_summary(struct ct_comm *c, struct ct_cli_args *a)
{
    return rank0(c, c->rank == 0 ? ct_audit_summary(a->operands, a->n_operands, stdout) : 0);
}

const struct ct_cli_command ct_cli_summary = {
    .name = "summary",
    .synopsis = "summary RUN_DIR...",
    .summary = "mean +- std of the final metrics of several runs (e.g. train --seeds)",
    .help = "",
    .own_options = 1,
    .usage = audit_usage,
    .usage_first = 1,
    .prefix = "summary: ",
    .unknown_hint = "",
    .min_operands = 1,
    .too_few = "summary takes one or more run directories",
    .run = run_summary,
};
