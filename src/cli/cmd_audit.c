/* ctrain-dist audit verify|diff|replay and ctrain-dist summary (the audit
 * of several runs' final metrics, which shares audit's usage text): argument
 * parsing and exit statuses; the audits themselves are src/report/audit.c
 * (verify, diff, summary) and src/train/replay.c (replay). Both commands
 * parse their own arguments (cli.h: run_argv). Every error is agreed across
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

static int usage_error(struct ct_comm *c, const char *fmt, const char *arg)
{
    int rc = ct_comm_agree(c, ct_error_set(CT_EUSAGE, fmt, arg));
    if (c->rank == 0)
        fputs(audit_usage, stderr);
    return report(c, rc);
}

struct replay_args {
    struct ct_audit_replay_params p;
    const char *sets[MAX_AUDIT_SETS];
    int gemm; /* -1 auto, 0 OpenBLAS, 1 ours */
};

/* Options after "replay A B". 0, or CT_EUSAGE with the message set. */
static int parse_replay(struct replay_args *r, int argc, char **argv)
{
    r->gemm = -1;
    r->p.ckpt_a = argv[2];
    r->p.ckpt_b = argv[3];
    r->p.sets = r->sets;
    for (int i = 4; i < argc; i++) {
        const char *o = argv[i];
        if (i + 1 >= argc)
            return ct_error_set(CT_EUSAGE, "audit replay: option %s needs a value", o);
        const char *v = argv[++i];
        if (strcmp(o, "--out") == 0) {
            r->p.out_dir = v;
        } else if (strcmp(o, "--set") == 0) {
            if (r->p.n_sets == MAX_AUDIT_SETS)
                return ct_error_set(CT_EUSAGE, "audit replay: more than %d --set options", MAX_AUDIT_SETS);
            r->sets[r->p.n_sets++] = v;
        } else if (strcmp(o, "--gemm") == 0) {
            if (strcmp(v, "auto") == 0)
                r->gemm = -1;
            else if (strcmp(v, "openblas") == 0)
                r->gemm = 0;
            else if (strcmp(v, "own") == 0)
                r->gemm = 1;
            else
                return ct_error_set(CT_EUSAGE, "audit replay: --gemm '%s' (known: auto, openblas, own)", v);
        } else {
            return ct_error_set(CT_EUSAGE, "audit replay: unknown option '%s'", o);
        }
    }
    return 0;
}

static int cmd_replay(struct ct_comm *c, int argc, char **argv)
{
    struct replay_args r;
    memset(&r, 0, sizeof r);
    int rc = ct_comm_agree(c, parse_replay(&r, argc, argv));
    if (rc < 0) {
        if (c->rank == 0)
            fputs(audit_usage, stderr);
        return report(c, rc);
    }
    /* A replay with the other matrix products shows what a different gemm
     * does to the bits (and is how the tests prove the audit notices). */
    if (r.gemm >= 0 && r.gemm == 1 && !ct_sgemm_own_available())
        return report(c, ct_comm_agree(c, ct_error_set(CT_EUSAGE, "audit replay: --gemm own needs a CPU "
                                                       "with AVX-512F")));
    ct_sgemm_force(r.gemm);
    return report(c, ct_audit_replay(c, &r.p, c->rank == 0 ? stdout : NULL));
}

/* Rank 0 runs a read-only audit; everybody learns the result. */
static int rank0(struct ct_comm *c, int rc_rank0)
{
    return report(c, ct_comm_agree(c, rc_rank0));
}

static int run_audit(struct ct_comm *c, int argc, char **argv)
{
    const char *sub = argc > 1 ? argv[1] : NULL;
    if (!sub || strcmp(sub, "-h") == 0 || strcmp(sub, "--help") == 0) {
        if (sub) {
            if (c->rank == 0)
                fputs(audit_usage, stdout);
            return CT_EXIT_OK;
        }
        return usage_error(c, "audit needs a subcommand (verify, diff or replay)%s", "");
    }
    if (strcmp(sub, "verify") == 0) {
        if (argc != 3)
            return usage_error(c, "audit verify takes one run directory%s", "");
        return rank0(c, c->rank == 0 ? ct_audit_verify(argv[2], stdout) : 0);
    }
    if (strcmp(sub, "diff") == 0) {
        if (argc != 4)
            return usage_error(c, "audit diff takes two checkpoints%s", "");
        return rank0(c, c->rank == 0 ? ct_audit_diff(argv[2], argv[3], stdout) : 0);
    }
    if (strcmp(sub, "replay") == 0) {
        if (argc < 4)
            return usage_error(c, "audit replay takes two checkpoints, A and B%s", "");
        return cmd_replay(c, argc, argv);
    }
    return usage_error(c, "unknown audit subcommand '%s' (known: verify, diff, replay)", sub);
}

static int run_summary(struct ct_comm *c, int argc, char **argv)
{
    if (argc < 2)
        return usage_error(c, "summary takes one or more run directories%s", "");
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-')
            return usage_error(c, "summary: unknown option '%s'", argv[i]);
    return rank0(c, c->rank == 0 ? ct_audit_summary((const char *const *)argv + 1, argc - 1, stdout) : 0);
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
    .run_argv = run_audit,
};

const struct ct_cli_command ct_cli_summary = {
    .name = "summary",
    .synopsis = "summary RUN_DIR...",
    .summary = "mean +- std of the final metrics of several runs (e.g. train --seeds)",
    .help = "",
    .run_argv = run_summary,
};
