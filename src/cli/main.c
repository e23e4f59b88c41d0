/* ctrain-dist: the command line. This is the only place that prints errors
 * and picks exit statuses; everything below returns codes and messages.
 *
 * Exit status: 0 success; 1 a run-time error (bad data file, I/O, MPI);
 * 2 a bad command line or config. Under mpirun every rank exits with the same
 * status: errors are agreed on collectively first (ct_comm_agree), so no rank
 * is left waiting in a collective.
 */
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "config/config.h"
#include "core/error.h"
#include "core/simd.h"
#include "core/log.h"
#include "core/version.h"
#include "parallel/comm.h"
#include "parallel/watchdog.h"
#include "core/threads.h"
#include "train/session.h"
#include "train/state.h"
#include "train/trainer.h"

#define MAX_SETS 256

/* 3: the run was asked to stop (SIGUSR1/SIGTERM), wrote a checkpoint and
 * stopped: requeue it with --resume auto to continue exactly. */
enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_REQUEUE = 3 };

struct args {
    const char *command;    /* train | eval | inspect */
    const char *config;
    const char *run_dir;
    const char *resume;     /* train: auto | PATH */
    const char *checkpoint; /* eval, inspect */
    const char *sets[MAX_SETS];
    int n_sets;
    int verbose;
    int help, version;
};

static const char usage_text[] =
    "usage: ctrain-dist [train] --config FILE [--set SECTION.KEY=VALUE]... [--run-dir DIR]\n"
    "                           [--resume auto|CHECKPOINT] [-v]\n"
    "       ctrain-dist eval --checkpoint CHECKPOINT [--set SECTION.KEY=VALUE]...\n"
    "       ctrain-dist inspect CHECKPOINT\n"
    "       ctrain-dist --version | --help\n"
    "\n"
    "train    trains the model that FILE describes, data-parallel over the ranks\n"
    "         that mpirun started (or on one process without mpirun)\n"
    "eval     evaluates a checkpoint on the test set, in eval mode\n"
    "inspect  prints a checkpoint's manifest and verifies every digest\n"
    "\n"
    "  --config FILE        INI file (see configs/); required for train\n"
    "  --set S.K=V          override one key, e.g. --set train.epochs=1 (repeatable)\n"
    "  --run-dir DIR        where metrics, checkpoints and the run record go\n"
    "                       (default runs/<config name>)\n"
    "  --resume auto        continue from the newest checkpoint in the run directory,\n"
    "                       or start from scratch if there is none (for requeued jobs)\n"
    "  --resume CHECKPOINT  continue from that checkpoint directory\n"
    "  --checkpoint DIR     the checkpoint to evaluate\n"
    "  -v, --verbose        progress lines every log.every_steps steps\n"
    "  --version            print the version and the libraries it was built with\n"
    "  -h, --help           this text\n"
    "\n"
    "SIGUSR1 or SIGTERM: checkpoint at the next step on every rank, then exit 3.\n"
    "Exit status: 0 success, 1 run-time error, 2 bad command line or config,\n"
    "3 checkpointed on request (requeue with --resume auto).\n";

static int parse_args(struct args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->command = "train";
    int i = 1;
    if (i < argc && argv[i][0] != '-') {
        if (strcmp(argv[i], "train") != 0 && strcmp(argv[i], "eval") != 0 &&
            strcmp(argv[i], "inspect") != 0)
            return ct_error_set(CT_EUSAGE, "unknown command '%s' (known: train, eval, inspect)", argv[i]);
        a->command = argv[i++];
        if (strcmp(a->command, "inspect") == 0 && i < argc && argv[i][0] != '-')
            a->checkpoint = argv[i++];
    }
    for (; i < argc; i++) {
        const char *arg = argv[i];
        const char *val = NULL;
#define TAKE_VALUE(opt)                                                                      \
    do {                                                                                     \
        size_t l = strlen(opt);                                                              \
        if (strncmp(arg, opt "=", l + 1) == 0)                                               \
            val = arg + l + 1;                                                               \
        else if (i + 1 < argc)                                                               \
            val = argv[++i];                                                                 \
        else                                                                                 \
            return ct_error_set(CT_EUSAGE, "option %s needs a value", opt);                  \
    } while (0)
#define IS_OPT(opt) (strcmp(arg, opt) == 0 || strncmp(arg, opt "=", strlen(opt) + 1) == 0)
        if (IS_OPT("--config")) {
            TAKE_VALUE("--config");
            a->config = val;
        } else if (IS_OPT("--set")) {
            TAKE_VALUE("--set");
            if (a->n_sets == MAX_SETS)
                return ct_error_set(CT_EUSAGE, "more than %d --set options", MAX_SETS);
            a->sets[a->n_sets++] = val;
        } else if (IS_OPT("--run-dir")) {
            TAKE_VALUE("--run-dir");
            if (!*val)
                return ct_error_set(CT_EUSAGE, "--run-dir needs a non-empty value");
            a->run_dir = val;
        } else if (IS_OPT("--resume")) {
            TAKE_VALUE("--resume");
            if (!*val)
                return ct_error_set(CT_EUSAGE, "--resume needs 'auto' or a checkpoint directory");
            a->resume = val;
        } else if (IS_OPT("--checkpoint")) {
            TAKE_VALUE("--checkpoint");
            a->checkpoint = val;
        } else if (strcmp(arg, "-v") == 0 || strcmp(arg, "--verbose") == 0) {
            a->verbose = 1;
        } else if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            a->help = 1;
        } else if (strcmp(arg, "--version") == 0) {
            a->version = 1;
        } else {
            return ct_error_set(CT_EUSAGE, "unknown option '%s' (see ctrain-dist --help)", arg);
        }
#undef TAKE_VALUE
#undef IS_OPT
    }
    if (a->help || a->version)
        return 0;
    if (strcmp(a->command, "train") == 0 && !a->config)
        return ct_error_set(CT_EUSAGE, "--config FILE is required (see ctrain-dist --help)");
    if (strcmp(a->command, "train") != 0 && !a->checkpoint)
        return ct_error_set(CT_EUSAGE, "%s needs a checkpoint (see ctrain-dist --help)", a->command);
    if (strcmp(a->command, "train") != 0 && (a->config || a->resume))
        return ct_error_set(CT_EUSAGE, "%s takes its config from the checkpoint: no --config or --resume",
                            a->command);
    return 0;
}

static void print_version(void)
{
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    char *nl = strchr(mpi, '\n');
    if (nl)
        *nl = '\0';
    printf("ctrain-dist %s (%s)\n  MPI: %s\n  OpenBLAS: %s\n", CT_VERSION, CT_GIT_DESCRIBE, mpi,
           ct_blas_config());
}

/* Report an agreed error once (rank 0 holds the combined report) and pick the
 * exit status. */
static int fail(const struct ct_comm *c, int rc, int status)
{
    if (c->rank == 0)
        fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
    (void)rc;
    return status;
}

/* OpenBLAS picks its kernels when the library is loaded, before main(), from
 * OPENBLAS_CORETYPE or its own CPU detection; on CPUs it does not know it
 * falls back to generic SSE3 kernels. When that happened on a CPU that
 * supports better ones (ct_blas_better_coretype), run this program again with
 * OPENBLAS_CORETYPE set, before MPI starts: same PID, same arguments, same
 * environment plus that variable, so mpirun does not notice. A variable that
 * is already set is never changed; CT_BLAS_CORETYPE_AUTO=0 turns this off. */
static void reexec_with_better_blas(char **argv)
{
    const char *off = getenv("CT_BLAS_CORETYPE_AUTO");
    if ((off && strcmp(off, "0") == 0) || getenv("CT__BLAS_REEXEC"))
        return;
    const char *better = ct_blas_better_coretype();
    if (!better)
        return;
    setenv("OPENBLAS_CORETYPE", better, 1);
    setenv("CT__BLAS_REEXEC", better, 1);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the kernels we have (the trainer warns). */
    unsetenv("OPENBLAS_CORETYPE");
}

static void on_stop_signal(int sig) { ct_trainer_request_stop(sig); }

/* The watchdog found the job stalled and printed why: end every rank. */
static void on_stall(const char *message, void *ctx)
{
    (void)message;
    (void)ctx;
    MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME);
}

/* Collective. dist.watchdog_s > 0: start the hang watchdog over the run
 * directory with a nonce of this job (rank 0's clock), so heartbeats left by
 * an earlier job there are never taken for this one's. */
static int start_watchdog(struct ct_watchdog *wd, struct ct_comm *comm, const struct ct_config *cfg,
                          const char *run_dir)
{
    memset(wd, 0, sizeof *wd);
    wd->fd = -1;
    if (cfg->dist.watchdog_s <= 0)
        return 0;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t nonce = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    int rc = ct_comm_bcast(comm, &nonce, sizeof nonce, 0);
    if (rc == 0)
        rc = ct_watchdog_start(wd, &(struct ct_watchdog_params){
                                       .run_dir = run_dir, .rank = comm->rank, .world = comm->world,
                                       .host = comm->host, .deadline_s = cfg->dist.watchdog_s,
                                       .nonce = nonce, .on_stall = on_stall});
    return ct_comm_agree(comm, rc);
}

static int cmd_train(struct ct_comm *comm, const struct args *a)
{
    static struct ct_config cfg;
    int rc = ct_comm_agree(comm, ct_config_load(&cfg, a->config, a->sets, a->n_sets));
    if (rc < 0)
        return fail(comm, rc, rc == CT_ECONFIG ? EXIT_USAGE : EXIT_RUNTIME);
    char run_dir[1024];
    if (a->run_dir)
        snprintf(run_dir, sizeof run_dir, "%s", a->run_dir);
    else
        snprintf(run_dir, sizeof run_dir, "runs/%s", cfg.name);

    /* SIGUSR1 (Slurm's warning before the time limit) and SIGTERM
     * (preemption, scancel): checkpoint at the next step, then exit 3. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    static struct ct_trainer tr;
    rc = ct_trainer_init(&tr, &cfg, comm, run_dir, a->resume);
    if (rc < 0)
        return fail(comm, rc, rc == CT_ECONFIG || rc == CT_EMISMATCH ? EXIT_USAGE : EXIT_RUNTIME);
    static struct ct_watchdog wd;
    if ((rc = start_watchdog(&wd, comm, &cfg, run_dir)) < 0) {
        ct_trainer_free(&tr);
        return fail(comm, rc, EXIT_RUNTIME);
    }
    struct ct_train_summary sum;
    rc = ct_trainer_run(&tr, &sum);
    ct_watchdog_stop(&wd);
    if (rc < 0) {
        if (tr.error_agreed) {
            /* Every rank saw the same failure (a checkpoint that could not be
             * written with checkpoint.on_error = stop): exit cleanly. */
            ct_trainer_free(&tr);
            return fail(comm, rc, EXIT_RUNTIME);
        }
        /* A failure inside the step loop may have happened on one rank only,
         * with the others already waiting in the next collective: agreement is
         * not possible any more, so end the job. */
        ct_log_error("%s", ct_error_message());
        MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME);
    }
    if (sum.stopped_by_signal) {
        ct_log_info("stopped by signal %d at step %lld after writing a checkpoint; continue with "
                    "--resume auto (exit status %d)",
                    sum.stopped_by_signal, (long long)sum.steps, EXIT_REQUEUE);
        ct_trainer_free(&tr);
        return EXIT_REQUEUE;
    }
    ct_log_info("done: %lld steps in %.2f s of training, %.0f samples/s; final test_acc %.4f "
                "test_loss %.4f; params sha256 %s",
                (long long)sum.steps, sum.train_s, sum.samples_per_s, sum.last.test_acc,
                sum.last.test_loss, sum.last.param_sha256);
    ct_trainer_free(&tr);
    return 0;
}

/* Evaluate a checkpoint: its own recorded config (with --set overrides, e.g.
 * another data.dir), its parameters and buffers, the test set in eval mode. */
static int cmd_eval(struct ct_comm *comm, const struct args *a)
{
    static struct ct_ckpt ck;
    static struct ct_config cfg;
    int rc = ct_comm_agree(comm, ct_ckpt_open(&ck, a->checkpoint));
    if (rc < 0)
        return fail(comm, rc, EXIT_RUNTIME);
    char label[1200];
    snprintf(label, sizeof label, "%s/manifest.pb", a->checkpoint);
    rc = ct_comm_agree(comm, ct_config_load_text(&cfg, ct_ckpt_config_text(&ck), label, a->sets, a->n_sets));
    if (rc == 0) {
        /* No training set, no optimizer state, no run directory: the
         * session of the test set alone. */
        static struct ct_session s;
        struct ct_session_params sp = {.train = 0, .digests = 0};
        rc = ct_session_init(&s, &cfg, comm, &sp);
        if (rc == 0) {
            rc = ct_comm_agree(comm, ct__model_restore(&s.model, &ck));
            double loss = 0, acc = 0;
            if (rc == 0)
                rc = ct_session_evaluate(&s, &loss, &acc);
            if (rc == 0 && comm->rank == 0)
                printf("checkpoint %s (step %lld): test_loss %.6f test_acc %.4f on %zu samples, "
                       "%d rank%s\n",
                       a->checkpoint, (long long)ct_ckpt_step(&ck), loss, acc, s.test.n,
                       comm->world, comm->world == 1 ? "" : "s");
            ct_session_free(&s);
        }
    }
    ct_ckpt_close(&ck);
    return rc < 0 ? fail(comm, rc, rc == CT_ECONFIG ? EXIT_USAGE : EXIT_RUNTIME) : 0;
}

static int cmd_inspect(struct ct_comm *comm, const struct args *a)
{
    int rc = 0;
    if (comm->rank == 0)
        rc = ct_ckpt_inspect(a->checkpoint, stdout);
    rc = ct_comm_agree(comm, rc);
    return rc < 0 ? fail(comm, rc, EXIT_RUNTIME) : 0;
}

int main(int argc, char **argv)
{
    reexec_with_better_blas(argv);
    int provided;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "ctrain-dist: error: MPI_Init_thread failed\n");
        return EXIT_RUNTIME;
    }
    struct ct_comm comm;
    MPI_Comm world = MPI_COMM_WORLD;
    if (ct_comm_init_mpi(&comm, &world) < 0) {
        fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
        MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME);
        return EXIT_RUNTIME;
    }

    struct args a;
    int status = 0;
    int rc = parse_args(&a, argc, argv);
    if (rc == 0)
        rc = ct_simd_init(); /* a bad CT_SIMD is a usage error */
    rc = ct_comm_agree(&comm, rc);
    if (rc < 0) {
        status = fail(&comm, rc, EXIT_USAGE);
        goto out;
    }
    ct_log_init(comm.rank, comm.world, a.verbose ? CT_LOG_LEVEL_DEBUG : CT_LOG_LEVEL_INFO);
    if (a.help || a.version) {
        if (comm.rank == 0) {
            if (a.help)
                fputs(usage_text, stdout);
            else
                print_version();
        }
        goto out;
    }

    if (strcmp(a.command, "inspect") == 0)
        status = cmd_inspect(&comm, &a);
    else if (strcmp(a.command, "eval") == 0)
        status = cmd_eval(&comm, &a);
    else
        status = cmd_train(&comm, &a);
out:
    ct_comm_free(&comm);
    MPI_Finalize();
    return status;
}
