/* ctrain-dist: the command line. This is the only place that prints errors
 * and picks exit statuses; everything below returns codes and messages.
 *
 * Exit status: 0 success; 1 a run-time error (bad data file, I/O, MPI);
 * 2 a bad command line or config. Under mpirun every rank exits with the same
 * status: errors are agreed on collectively first (ct_comm_agree), so no rank
 * is left waiting in a collective.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/version.h"
#include "dist/comm.h"
#include "dist/threads.h"
#include "train/trainer.h"

#define MAX_SETS 256

enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2 };

struct args {
    const char *command;
    const char *config;
    const char *run_dir;
    const char *sets[MAX_SETS];
    int n_sets;
    int verbose;
    int help, version;
};

static const char usage_text[] =
    "usage: ctrain-dist [train] --config FILE [--set SECTION.KEY=VALUE]... [--run-dir DIR]\n"
    "       ctrain-dist --version | --help\n"
    "\n"
    "Trains the model that FILE describes, data-parallel over the ranks that\n"
    "mpirun started (or on one process without mpirun).\n"
    "\n"
    "  --config FILE        INI file (see configs/); required\n"
    "  --set S.K=V          override one key, e.g. --set train.epochs=1 (repeatable)\n"
    "  --run-dir DIR        where metrics.jsonl, config.ini and run.json go\n"
    "                       (default runs/<config name>)\n"
    "  -v, --verbose        progress lines every log.every_steps steps\n"
    "  --version            print the version and the libraries it was built with\n"
    "  -h, --help           this text\n"
    "\n"
    "Exit status: 0 success, 1 run-time error, 2 bad command line or config.\n";

static int parse_args(struct args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->command = "train";
    int i = 1;
    if (i < argc && argv[i][0] != '-') {
        if (strcmp(argv[i], "train") != 0)
            return ct_error_set(CT_EUSAGE, "unknown command '%s' (known: train)", argv[i]);
        i++;
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
    if (!a->help && !a->version && !a->config)
        return ct_error_set(CT_EUSAGE, "--config FILE is required (see ctrain-dist --help)");
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
    int rc = ct_comm_agree(&comm, parse_args(&a, argc, argv));
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

    static struct ct_config cfg;
    rc = ct_comm_agree(&comm, ct_config_load(&cfg, a.config, a.sets, a.n_sets));
    if (rc < 0) {
        status = fail(&comm, rc, rc == CT_ECONFIG ? EXIT_USAGE : EXIT_RUNTIME);
        goto out;
    }
    char run_dir[1024];
    if (a.run_dir)
        snprintf(run_dir, sizeof run_dir, "%s", a.run_dir);
    else
        snprintf(run_dir, sizeof run_dir, "runs/%s", cfg.name);

    static struct ct_trainer tr;
    rc = ct_trainer_init(&tr, &cfg, &comm, run_dir);
    if (rc < 0) {
        status = fail(&comm, rc, rc == CT_ECONFIG ? EXIT_USAGE : EXIT_RUNTIME);
        goto out;
    }
    struct ct_train_summary sum;
    rc = ct_trainer_run(&tr, &sum);
    if (rc < 0) {
        /* A failure inside the step loop may have happened on one rank only,
         * with the others already waiting in the next collective: agreement is
         * not possible any more, so end the job. */
        ct_log_error("%s", ct_error_message());
        MPI_Abort(MPI_COMM_WORLD, EXIT_RUNTIME);
    }
    ct_log_info("done: %lld steps in %.2f s of training, %.0f samples/s; final test_acc %.4f "
                "test_loss %.4f; params sha256 %s",
                (long long)sum.steps, sum.train_s, sum.samples_per_s, sum.last.test_acc,
                sum.last.test_loss, sum.last.param_sha256);
    ct_trainer_free(&tr);
out:
    ct_comm_free(&comm);
    MPI_Finalize();
    return status;
}
