/* The signals of the process, from the first instruction of main: the stop
 * requests (SIGUSR1, SIGTERM), SIGPIPE, and the re-exec that picks better
 * OpenBLAS kernels (which must carry a caught stop signal across). */
#include "cli/cli.h"

#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/threads.h"
#include "train/trainer.h"

/* SIGUSR1 (Slurm's warning before the time limit) and SIGTERM (preemption,
 * scancel) ask a training run to checkpoint at the next step and exit 3.
 * They are caught from the first instruction of main, before the command is
 * known, so that one arriving while the ranks start (MPI_Init, the BLAS
 * re-exec, loading the data) is remembered instead of killing the rank with
 * the default action. A handler, not a blocked mask: OpenBLAS starts its
 * thread pool in a library constructor, before main, and a signal sent to
 * the process goes to any thread that does not block it, so only the
 * disposition, which is process-wide, holds everywhere. `train` then takes
 * a remembered signal as its stop request; every other command gets the
 * default action back, and a remembered signal is raised again. (Between
 * exec and main, while the dynamic loader runs, nothing of ours can catch
 * it.) SA_RESTART: a signal must not fail a blocking read of a data file
 * (a pipe, a slow file system) with EINTR; the stop is taken at the next
 * step anyway. */
static volatile sig_atomic_t g_early_stop;

static void on_early_stop(int sig) { g_early_stop = sig; }

static void on_stop_signal(int sig) { ct_trainer_request_stop(sig); }

static void set_stop_handler(void (*handler)(int))
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = handler;
    sa.sa_flags = handler == SIG_DFL ? 0 : SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGUSR1, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
}

static void stop_signal_mask(int how)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(how, &set, NULL);
}

void ct_cli_signals_early(void)
{
    set_stop_handler(on_early_stop);
    /* A write to a closed pipe (`ctrain-dist inspect CKPT | grep -q ...`,
     * grep gone after its match) fails with EPIPE instead of killing the
     * process with SIGPIPE (status 141: a failed pipeline under `set -o
     * pipefail`). Neither MPI changes SIGPIPE in a rank (Open MPI 4.1.4 and
     * MPICH 4.0.2 leave the default action), so whether the last write
     * comes before the reader goes is a race, seen lost under MPICH. */
    signal(SIGPIPE, SIG_IGN);
    stop_signal_mask(SIG_UNBLOCK); /* after a re-exec: a signal raised before it arrives now */
}

/* OpenBLAS picks its kernels when the library is loaded, before main(), from
 * OPENBLAS_CORETYPE or its own CPU detection; on CPUs it does not know it
 * falls back to generic SSE3 kernels. When that happened on a CPU that
 * supports better ones (ct_blas_better_coretype), run this program again with
 * OPENBLAS_CORETYPE set, before MPI starts: same PID, same arguments, same
 * environment plus that variable, so mpirun does not notice. A variable that
 * is already set is never changed; CT_BLAS_CORETYPE_AUTO=0 turns this off. */
void ct_cli_reexec_with_better_blas(char **argv)
{
    const char *off = getenv("CT_BLAS_CORETYPE_AUTO");
    if ((off && strcmp(off, "0") == 0) || getenv("CT__BLAS_REEXEC"))
        return;
    const char *better = ct_blas_better_coretype();
    if (!better)
        return;
    setenv("OPENBLAS_CORETYPE", better, 1);
    setenv("CT__BLAS_REEXEC", better, 1);
    /* A stop signal already caught would die with this image: block them
     * and raise the caught one again, so it is pending across the exec
     * (the mask and pending signals survive it) until the new main
     * installs its handler and unblocks. */
    stop_signal_mask(SIG_BLOCK);
    if (g_early_stop)
        raise(g_early_stop);
    execv("/proc/self/exe", argv);
    /* exec failed: carry on with the kernels we have (the trainer warns). */
    unsetenv("OPENBLAS_CORETYPE");
    stop_signal_mask(SIG_UNBLOCK);
}

void ct_cli_route_stop_signals(int train)
{
    if (train) {
        set_stop_handler(on_stop_signal);
        if (g_early_stop)
            ct_trainer_request_stop(g_early_stop);
        return;
    }
    set_stop_handler(SIG_DFL);
    if (g_early_stop)
        raise(g_early_stop);
}
