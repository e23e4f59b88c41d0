/* ctrain-dist [train] --config FILE: train the model FILE describes,
 * data-parallel over the ranks mpirun started; with --seeds, one run per
 * seed. The hang watchdog and the stop signals are this command's alone. */
#include "cli/cli.h"

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "parallel/launcher.h"
#include "parallel/watchdog.h"
#include "run/shared.h"
#include "train/ownership.h"
#include "train/trainer-impl.h"

#define MAX_SEEDS 64

static const char help[] =
    "  --config FILE        INI file (see configs/ and `ctrain-dist config --list`)\n"
    "  --set S.K=V          override one config key, e.g. --set train.epochs=1 (repeatable)\n"
    "  --run-dir DIR        where metrics, checkpoints and the run record go\n"
    "                       (default runs/<config name>)\n"
    "  --resume auto        continue from the newest checkpoint in the run directory,\n"
    "                       or start from scratch if there is none (for requeued jobs)\n"
    "  --resume CHECKPOINT  continue from that checkpoint directory\n"
    "  --seeds 0,1,2        one run per seed, one after the other, each in RUN_DIR/seed-K\n"
    "                       (then `ctrain-dist summary RUN_DIR/seed-*`)\n"
    "  -v, --verbose        also the global mean loss every log.every_steps steps\n"
    "  -q, --quiet          warnings and errors only (no progress, no epoch lines)\n"
    "\n"
    "Progress: a line every log.every_steps steps or 30 s; on a terminal, a bar redrawn\n"
    "in place (stderr). CT_PROGRESS=auto|bar|lines|off (under mpirun auto means lines:\n"
    "launch/ctrain-run sets bar on a terminal); NO_COLOR: no colours.\n"
    "\n"
    "SIGUSR1 or SIGTERM: checkpoint at the next step on every rank, then exit 3.\n";

static const struct ct_cli_option options[] = {
    CT_CLI_OPTION("--config", NULL, CT_CLI_VALUE, config, NULL),
    CT_CLI_OPTION("--run-dir", NULL, CT_CLI_VALUE, run_dir, "--run-dir needs a non-empty value"),
    CT_CLI_OPTION("--resume", NULL, CT_CLI_VALUE, resume, "--resume needs 'auto' or a checkpoint directory"),
    CT_CLI_OPTION("--seeds", NULL, CT_CLI_VALUE, seeds, NULL),
    CT_CLI_END,
};

static int check(const struct ct_cli_args *a)
{
    int rc = ct_cli_refuse(a, CT_CLI_NO_FORMAT | CT_CLI_NO_OUTPUT | CT_CLI_NO_GENERATE | CT_CLI_NO_PREDICT |
                                  CT_CLI_NO_CONFIG);
    if (rc == 0 && !a->config)
        rc = ct_error_set(CT_EUSAGE, "--config FILE is required (see ctrain-dist --help)");
    return rc;
}

/* The watchdog found the job stalled and printed why: end every rank, with
 * a status of its own so a batch script can tell a hang from an error.
 * MPI_Abort ends this rank, but across a partition it can neither reach the
 * ranks beyond it nor let the launcher return (parallel/launcher.h): so
 * this host's launcher processes are ended after a grace period if they
 * are still there, and this rank ends itself should MPI_Abort block. */
static void on_stall(const char *message, void *ctx)
{
    (void)message;
    const struct ct_watchdog *wd = ctx;
    double grace_s = 2 * wd->period_s > 10 ? 2 * wd->period_s : 10;
    struct ct_launcher_procs lp;
    ct_launcher_find(&lp);
    ct_launcher_end_after(&lp, grace_s);
    ct_exit_after(grace_s, CT_EXIT_HANG, NULL);
    MPI_Abort(MPI_COMM_WORLD, CT_EXIT_HANG);
}

/* Collective: a nonce of this job (rank 0's clock and pid), the same on
 * every rank, new for each job: its watchdog heartbeats and its ownership
 * record (train/ownership.h) are told from any earlier job's by it. */
static int job_nonce(struct ct_comm *comm, uint64_t *nonce)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    *nonce = (((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16)) | 1;
    return ct_comm_agree(comm, ct_comm_bcast(comm, nonce, sizeof *nonce, 0));
}

/* Collective. dist.watchdog_s > 0: start the hang watchdog over the run
 * directory with this job's nonce, so heartbeats left by an earlier job
 * there are never taken for this one's. */
static int start_watchdog(struct ct_watchdog *wd, struct ct_comm *comm, const struct ct_config *cfg,
                          const char *run_dir, uint64_t nonce)
{
    memset(wd, 0, sizeof *wd);
    wd->fd = -1;
    if (cfg->dist.watchdog_s <= 0)
        return 0;
    int rc = ct_watchdog_start(wd, &(struct ct_watchdog_params){
                                       .run_dir = run_dir, .rank = comm->rank, .world = comm->world,
                                       .host = comm->host, .deadline_s = cfg->dist.watchdog_s,
                                       .nonce = nonce, .on_stall = on_stall, .ctx = wd});
    /* Started on some ranks only: stop those (safe on the others). */
    if ((rc = ct_comm_agree(comm, rc)) < 0)
        ct_watchdog_stop(wd);
    return rc;
}

/* The initialised trainer's run to its end: the exit status. */
static int train_loop(struct ct_comm *comm, struct ct_trainer *tr, struct ct_watchdog *wd,
                      struct ct_ownership *own)
{
    struct ct_train_summary sum;
    int rc = ct_trainer_run(tr, &sum);
    ct_watchdog_stop(wd);
    /* Released when every rank ends here (not after MPI_Abort below: the
     * next job decides by this one's processes and beat then). */
    char how[64] = "error";
    if (rc == 0 && sum.stopped_by_signal)
        snprintf(how, sizeof how, "stopped by signal %d", sum.stopped_by_signal);
    else if (rc == 0)
        snprintf(how, sizeof how, "done");
    if (rc == 0 || tr->error_agreed)
        ct_ownership_release(own, comm, how);
    if (rc < 0) {
        if (tr->error_agreed) {
            /* Every rank saw the same failure (a checkpoint that could not be
             * written with checkpoint.on_error = stop): exit cleanly. */
            ct_trainer_free(tr);
            return ct_cli_fail(comm, CT_EXIT_RUNTIME);
        }
        /* A failure inside the step loop may have happened on one rank only,
         * with the others already waiting in the next collective: agreement is
         * not possible any more, so end the job. */
        ct_log_error("%s", ct_error_message());
        MPI_Abort(MPI_COMM_WORLD, CT_EXIT_RUNTIME);
    }
    if (sum.stopped_by_signal) {
        ct_log_info("stopped by signal %d at step %lld after writing a checkpoint; continue with "
                    "--resume auto (exit status %d)",
                    sum.stopped_by_signal, (long long)sum.steps, CT_EXIT_REQUEUE);
        ct_trainer_free(tr);
        return CT_EXIT_REQUEUE;
    }
    ct_log_info("done: %lld steps in %.2f s of training, %.*f samples/s; final test_acc %.4f "
                "test_loss %.4f; params sha256 %s",
                (long long)sum.steps, sum.train_s, CT_RATE_DECIMALS(sum.samples_per_s),
                sum.samples_per_s, sum.last.test_acc,
                sum.last.test_loss, sum.last.param_sha256);
    ct_trainer_free(tr);
    return 0;
}

/* One run, with the config loaded: the exit status. */
static int train_config(struct ct_comm *comm, const struct ct_cli_args *a, const struct ct_config *cfg)
{
    char run_dir[1024];
    if (a->run_dir)
        snprintf(run_dir, sizeof run_dir, "%s", a->run_dir);
    else
        snprintf(run_dir, sizeof run_dir, "runs/%s", cfg->name);
    if (a->seed_dir[0] && strlen(run_dir) + strlen(a->seed_dir) + 2 < sizeof run_dir)
        strcat(strcat(run_dir, "/"), a->seed_dir);

    /* The watchdog watches the start-up too (loading the data, verifying
     * the checkpoint to resume from: both mark their progress), so a rank
     * stopped there does not hold the others forever. Its heartbeats live
     * in RUN_DIR/heartbeat/, which ct_trainer_init does not move aside with
     * an earlier run's files: the records carry this job's nonce. */
    uint64_t nonce;
    struct ct_ownership own;
    /* First of all: is the run directory one directory for every rank? */
    int rc = ct_run_shared_check(comm, run_dir);
    if (rc == 0)
        rc = job_nonce(comm, &nonce);
    /* One live job per run directory: claimed before anything is written
     * there (a refusal leaves it as it was), released at the end. */
    if (rc == 0)
        rc = ct_ownership_claim(&own, comm, run_dir, nonce);
    if (rc < 0)
        return ct_cli_fail(comm, CT_EXIT_RUNTIME);
    struct ct_watchdog wd;
    if ((rc = start_watchdog(&wd, comm, cfg, run_dir, nonce)) < 0) {
        ct_ownership_abandon(&own, comm);
        return ct_cli_fail(comm, CT_EXIT_RUNTIME);
    }
    struct ct_trainer *tr = calloc(1, sizeof *tr);
    rc = ct_comm_agree(comm, tr ? 0 : ct_error_set(CT_ENOMEM, "out of memory"));
    if (rc == 0)
        rc = ct_trainer_init(tr, cfg, comm, run_dir, a->resume);
    if (rc < 0) {
        ct_watchdog_stop(&wd);
        ct_ownership_abandon(&own, comm);
        free(tr);
        return ct_cli_fail(comm, rc == CT_ECONFIG || rc == CT_EMISMATCH ? CT_EXIT_USAGE : CT_EXIT_RUNTIME);
    }
    tr->owner_nonce = nonce;
    int status = train_loop(comm, tr, &wd, &own);
    free(tr);
    return status;
}

static int train_one(struct ct_comm *comm, const struct ct_cli_args *a)
{
    struct ct_config *cfg = malloc(sizeof *cfg);
    int rc = ct_comm_agree(comm, cfg ? ct_config_load(cfg, a->config, a->sets, a->n_sets)
                                     : ct_error_set(CT_ENOMEM, "out of memory"));
    int status = rc < 0 ? ct_cli_fail(comm, ct_cli_config_status(rc)) : train_config(comm, a, cfg);
    free(cfg);
    return status;
}

/* --seeds 0,1,2: the seeds, checked before anything runs (a bad list is a
 * usage error on every rank: every rank parses the same argument). */
static int parse_seeds(const char *list, unsigned long long *v, int max, int *n)
{
    *n = 0;
    for (const char *p = list; *p;) {
        char *end;
        if (*p < '0' || *p > '9')
            return ct_error_set(CT_EUSAGE, "--seeds '%s': expected non-negative integers separated "
                                "by commas", list);
        unsigned long long x = strtoull(p, &end, 10);
        if (*n == max)
            return ct_error_set(CT_EUSAGE, "--seeds: more than %d seeds", max);
        for (int i = 0; i < *n; i++)
            if (v[i] == x)
                return ct_error_set(CT_EUSAGE, "--seeds '%s': seed %llu twice", list, x);
        v[(*n)++] = x;
        if (*end == ',' && end[1])
            end++;
        else if (*end)
            return ct_error_set(CT_EUSAGE, "--seeds '%s': expected non-negative integers separated "
                                "by commas", list);
        p = end;
    }
    return *n ? 0 : ct_error_set(CT_EUSAGE, "--seeds needs at least one seed");
}

/* One experiment per seed, each in its own run directory RUN_DIR/seed-K
 * with train.seed = K (recorded in its config.ini and checkpoints); the
 * first failure or stop request ends the series with its status. */
static int train_seeds(struct ct_comm *comm, struct ct_cli_args *a)
{
    unsigned long long seeds[MAX_SEEDS];
    int n = 0;
    int rc = ct_comm_agree(comm, parse_seeds(a->seeds, seeds, MAX_SEEDS, &n));
    if (rc == 0 && a->n_sets == CT_CLI_MAX_SETS)
        rc = ct_comm_agree(comm, ct_error_set(CT_EUSAGE, "more than %d --set options", CT_CLI_MAX_SETS - 1));
    if (rc < 0)
        return ct_cli_fail(comm, CT_EXIT_USAGE);
    char seed_set[64];
    for (int i = 0; i < n; i++) {
        snprintf(seed_set, sizeof seed_set, "train.seed=%llu", seeds[i]);
        snprintf(a->seed_dir, sizeof a->seed_dir, "seed-%llu", seeds[i]);
        a->sets[a->n_sets++] = seed_set; /* last: it wins over any other train.seed */
        ct_log_info("seed %llu (%d of %d)", seeds[i], i + 1, n);
        int status = train_one(comm, a);
        a->n_sets--;
        if (status != 0)
            return status;
    }
    return 0;
}

static int run(struct ct_comm *comm, struct ct_cli_args *a)
{
    return a->seeds ? train_seeds(comm, a) : train_one(comm, a);
}

const struct ct_cli_command ct_cli_train = {
    .name = "train",
    .synopsis = "[train] --config FILE [--set S.K=V]... [--run-dir DIR] [--resume auto|CHECKPOINT]\n"
                "                   [--seeds S1,S2,...] [-v|-q]",
    .summary = "train the model FILE describes, data-parallel over the ranks mpirun started",
    .help = help,
    .options = options,
    .check = check,
    .run = run,
    .train = 1,
};
