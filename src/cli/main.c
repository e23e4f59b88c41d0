/* ctrain-dist: the command line. This is the only place that prints errors
 * and picks exit statuses; everything below returns codes and messages.
 * The commands are one file each (src/cli/cmd_*.c, see cli.h); this file
 * holds their one table, which drives dispatch and --help, and main.
 *
 * Exit status: 0 success; 1 a run-time error (bad data file, I/O, MPI, a
 * failed audit); 2 a bad command line or config; 3 the run checkpointed on
 * request (SIGUSR1/SIGTERM: requeue it with --resume auto); 4 the hang
 * watchdog ended the job. Under mpirun every rank exits with the same
 * status: errors are agreed on collectively first (ct_comm_agree), so no
 * rank is left waiting in a collective.
 */
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include "cli/cli.h"
#include "core/error.h"
#include "core/log.h"
#include "core/simd.h"
#include "core/threads.h"
#include "core/version.h"
#include "parallel/launcher.h"
#include "train/progress.h"

/* Every command, in --help order. The command names the parser accepts are
 * this table's. */
const struct ct_cli_command *const ct_cli_commands[] = {
    &ct_cli_train, &ct_cli_eval, &ct_cli_predict, &ct_cli_generate, &ct_cli_inspect, &ct_cli_export,
    &ct_cli_config, &ct_cli_audit, &ct_cli_data, &ct_cli_summary, &ct_cli_report, NULL,
};

static const char exit_text[] =
    "Exit status: 0 success, 1 run-time error, 2 bad command line or config,\n"
    "3 checkpointed on request (requeue with --resume auto), 4 ended by the hang watchdog.\n";

const struct ct_cli_command *ct_cli_find_command(const char *name)
{
    for (int i = 0; ct_cli_commands[i]; i++)
        if (strcmp(ct_cli_commands[i]->name, name) == 0)
            return ct_cli_commands[i];
    return NULL;
}

/* A command's help, or (c NULL) every command's synopsis and summary. */
static void print_usage(const struct ct_cli_command *c)
{
    if (c) {
        printf("usage: ctrain-dist %s\n\n%s.\n%s%s\n%s", c->synopsis, c->summary, *c->help ? "\n" : "",
               c->help, exit_text);
        return;
    }
    for (int i = 0; ct_cli_commands[i]; i++)
        printf("%s ctrain-dist %s\n", i ? "      " : "usage:", ct_cli_commands[i]->synopsis);
    printf("       ctrain-dist --version | --help | COMMAND --help\n\n");
    for (int i = 0; ct_cli_commands[i]; i++)
        printf("  %-9s %s\n", ct_cli_commands[i]->name, ct_cli_commands[i]->summary);
    printf("\n`ctrain-dist COMMAND --help` tells a command's options.\n%s", exit_text);
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

/* A command-line error of a command with options of its own: its usage
 * beside the agreed message, on rank 0. */
static int own_usage_error(const struct ct_comm *comm, const struct ct_cli_command *c, int rc)
{
    if (comm->rank == 0) {
        if (c->usage_first)
            fputs(c->usage, stderr);
        fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
        if (!c->usage_first)
            fputs(c->usage, stderr);
    }
    return rc == CT_EUSAGE ? CT_EXIT_USAGE : CT_EXIT_RUNTIME;
}

/* A command with options of its own (audit, summary, data): `CMD --help`
 * alone is the table's help; then CT_SIMD (before the command line: a bad
 * one is a usage error, whatever the line says; such a command prints no
 * progress, so CT_PROGRESS is not read), the command line, the command's
 * own help or its run. */
static int run_own(struct ct_comm *comm, struct ct_cli_args *a, int parse_rc)
{
    if (a->help) {
        if (comm->rank == 0)
            print_usage(a->cmd);
        return 0;
    }
    ct_cli_route_stop_signals(0);
    int rc = ct_comm_agree(comm, ct_simd_init());
    ct_log_init(comm->rank, comm->world, CT_LOG_LEVEL_INFO);
    if (rc < 0)
        return ct_cli_fail(comm, CT_EXIT_USAGE);
    if ((rc = ct_comm_agree(comm, parse_rc)) < 0)
        return own_usage_error(comm, a->cmd, rc);
    if (a->own_help) {
        if (comm->rank == 0)
            a->cmd->print_help(stdout);
        return 0;
    }
    return ct_cli_runner(a)->run(comm, a);
}

/* Every other command: the whole command line parsed and checked (with the
 * environment's CT_SIMD and CT_PROGRESS: a bad one is a usage error too),
 * then --help, --version or the command's run. */
static int run_shared(struct ct_comm *comm, struct ct_cli_args *a, int rc)
{
    if (rc == 0)
        rc = ct_simd_init(); /* a bad CT_SIMD is a usage error */
    enum ct_progress_mode progress_mode;
    if (rc == 0)
        rc = ct_progress_env_mode(&progress_mode); /* and so is a bad CT_PROGRESS */
    if (ct_comm_agree(comm, rc) < 0)
        return ct_cli_fail(comm, CT_EXIT_USAGE);
    ct_log_init(comm->rank, comm->world,
                a->quiet ? CT_LOG_LEVEL_WARN : a->verbose ? CT_LOG_LEVEL_DEBUG : CT_LOG_LEVEL_INFO);
    if (a->help || a->version) {
        if (comm->rank == 0 && a->help)
            print_usage(a->explicit_command ? a->cmd : NULL);
        else if (comm->rank == 0)
            print_version();
        return 0;
    }
    ct_cli_route_stop_signals(a->cmd->train);
    return a->cmd->run(comm, a);
}

static int run_command_line(struct ct_comm *comm, int argc, char **argv)
{
    struct ct_cli_args a;
    int rc = ct_cli_parse(&a, argc, argv);
    int status = a.cmd && a.cmd->own_options ? run_own(comm, &a, rc) : run_shared(comm, &a, rc);
    ct_cli_args_free(&a);
    return status;
}

/* MPI_Finalize should return at once: by then every rank has done and
 * saved all its work. MPICH 4.0.2 over UCX's TCP sometimes never returns
 * from it across hosts (one rank flushing its UCX endpoints forever, the
 * others waiting in the PMI barrier; tests/net/test_hosts.sh): rather than
 * hold the allocation until the job's time limit, a rank still in it after
 * FINALIZE_GRACE_S says so and ends with the status the command returned. */
#define FINALIZE_GRACE_S 60
static void guard_finalize(int rank, int status)
{
    char host[64] = "?", message[256];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    snprintf(message, sizeof message,
             "ctrain-dist: warning: rank %d (host %s): MPI_Finalize has not returned after %d s; ending "
             "without it, status %d (everything this command wrote was complete before it)",
             rank, host, FINALIZE_GRACE_S, status);
    ct_exit_after(FINALIZE_GRACE_S, status, message);
}

/* glibc's malloc hands a freed block of more than its mmap threshold (or a
 * heap top above the trim threshold) back to the kernel, so the next
 * allocation of that size faults its pages in again, zeroed. MPI allocates
 * its temporary buffers per collective: at GPT-2's 8 MiB gradient
 * collectives that was a tenth of the allreduce rate on a VM whose page
 * faults cost ~12 us each (Open MPI 4.1, N = 2, one host: 32 MiB in 104 ms,
 * 6.6 ms with freed memory kept; tests/bench/README.md, stop 41). So blocks
 * up to 32 MiB (glibc's largest threshold) come from the heap, and up to
 * 256 MiB of its free top stays mapped. Our own large buffers (parameters,
 * optimizer state, activations) are allocated once and are larger. */
static void keep_freed_memory(void)
{
#ifdef __GLIBC__
    mallopt(M_MMAP_THRESHOLD, 32 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

int main(int argc, char **argv)
{
    keep_freed_memory();
    ct_cli_signals_early();
    ct_cli_reexec_with_better_blas(argv);
    int provided;
    if (MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "ctrain-dist: error: MPI_Init_thread failed\n");
        return CT_EXIT_RUNTIME;
    }
    struct ct_comm comm;
    MPI_Comm world = MPI_COMM_WORLD;
    if (ct_comm_init_mpi(&comm, &world) < 0) {
        fprintf(stderr, "ctrain-dist: error: %s\n", ct_error_message());
        MPI_Abort(MPI_COMM_WORLD, CT_EXIT_RUNTIME);
        return CT_EXIT_RUNTIME;
    }
    int status = run_command_line(&comm, argc, argv);
    guard_finalize(comm.rank, status);
    ct_comm_free(&comm);
    MPI_Finalize();
    return status;
}
