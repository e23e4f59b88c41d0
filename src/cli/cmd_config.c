/* ctrain-dist config --list | --check FILE: the config schema (and a file's
 * resolved values), or everything training checks before its first step,
 * without a run directory: the config, the data files, the model against
 * the data's shape, the batch split over this many ranks. */
#include "cli/cli.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "train/session.h"

static const struct ct_cli_option options[] = {
    CT_CLI_OPTION("--list", NULL, CT_CLI_FLAG, list, NULL),
    CT_CLI_OPTION("--tsv", NULL, CT_CLI_FLAG, tsv, NULL),
    CT_CLI_OPTION("--check", NULL, CT_CLI_VALUE, check, NULL),
    CT_CLI_OPTION("--config", NULL, CT_CLI_VALUE, config, NULL),
    CT_CLI_END,
};

static int check(const struct ct_cli_args *a)
{
    int rc = ct_cli_refuse(a, CT_CLI_NO_FORMAT | CT_CLI_NO_OUTPUT | CT_CLI_NO_GENERATE | CT_CLI_NO_PREDICT);
    if (rc == 0 && a->list == !!a->check)
        rc = ct_error_set(CT_EUSAGE, "config needs exactly one of --list or --check FILE");
    if (rc == 0 && a->check && (a->config || a->tsv))
        rc = ct_error_set(CT_EUSAGE, "config --check takes the file itself: no --config or --tsv");
    if (rc == 0 && (a->run_dir || a->resume || a->checkpoint))
        rc = ct_error_set(CT_EUSAGE, "config takes no --run-dir, --resume or --checkpoint");
    return rc;
}

/* --check: the session training would set up, then its numbers. */
static int check_session(struct ct_comm *comm, const char *path, const struct ct_config *cfg)
{
    struct ct_session *s = calloc(1, sizeof *s);
    struct ct_session_params sp = {.train = 1, .digests = 0};
    int rc = ct_comm_agree(comm, s ? 0 : ct_error_set(CT_ENOMEM, "out of memory"));
    if (rc == 0)
        rc = ct_session_init(s, cfg, comm, &sp);
    if (rc < 0) {
        free(s);
        return ct_cli_fail(comm, ct_cli_config_status(rc));
    }
    if (comm->rank == 0)
        printf("%s: ok: model %s, %zu parameters, %zu training and %zu test samples, "
               "%d rank%s x %d samples per step, %lld steps per epoch\n",
               path, cfg->model.name, s->model.params.numel, s->train.n, s->test.n, comm->world,
               comm->world == 1 ? "" : "s", s->batches.local_batch, (long long)s->steps_per_epoch);
    ct_session_free(s);
    free(s);
    return 0;
}

static int run_config(struct ct_comm *comm, const struct ct_cli_args *a, struct ct_config *cfg)
{
    const char *path = a->check ? a->check : a->config;
    int rc = 0;
    if (path) {
        rc = ct_comm_agree(comm, ct_config_load(cfg, path, a->sets, a->n_sets));
        if (rc < 0)
            return ct_cli_fail(comm, ct_cli_config_status(rc));
    } else if (a->n_sets) {
        ct_comm_agree(comm, ct_error_set(CT_EUSAGE, "--set needs --config FILE"));
        return ct_cli_fail(comm, CT_EXIT_USAGE);
    }
    if (a->list) {
        if (comm->rank == 0)
            rc = ct_config_list(stdout, path ? cfg : NULL, a->tsv);
        rc = ct_comm_agree(comm, rc);
        return rc < 0 ? ct_cli_fail(comm, CT_EXIT_RUNTIME) : 0;
    }
    return check_session(comm, path, cfg);
}

static int run(struct ct_comm *comm, struct ct_cli_args *a)
{
    struct ct_config *cfg = malloc(sizeof *cfg);
    int rc = ct_comm_agree(comm, cfg ? 0 : ct_error_set(CT_ENOMEM, "out of memory"));
    int status = rc < 0 ? ct_cli_fail(comm, CT_EXIT_RUNTIME) : run_config(comm, a, cfg);
    free(cfg);
    return status;
}

const struct ct_cli_command ct_cli_config = {
    .name = "config",
    .synopsis = "config --list [--tsv] [--config FILE [--set S.K=V]...] | --check FILE [--set S.K=V]...",
    .summary = "list every config key, or check a config as training would",
    .help = "  --list               every key: type, allowed values, default, whether it changes\n"
            "                       the experiment, help\n"
            "  --config FILE        with --list: also FILE's resolved values ('*': not the default)\n"
            "  --tsv                with --list: tab-separated, one line per key\n"
            "  --check FILE         check the config, the data files, the model and the batch\n"
            "                       split over the ranks (run it under mpirun with your N)\n"
            "  --set S.K=V          override one config key, e.g. --set train.epochs=1 (repeatable)\n",
    .options = options,
    .check = check,
    .run = run,
};
