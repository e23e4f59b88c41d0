/* The MPI launcher's processes on this host, and ending them when the
 * launcher cannot end itself.
 *
 * MPI_Abort asks the launcher to end the job: mpirun (Open MPI's HNP) or
 * hydra's mpiexec tells its daemons on every host (orted, hydra_pmi_proxy)
 * to kill their ranks, and returns once they report. Across a network
 * partition that report never comes: the ranks have exited, but mpirun
 * waits for the daemons on the far side and they wait for it, forever
 * (measured: Open MPI 4.1 over TCP, a cut link, 229 s and still waiting;
 * its OOB keepalive would notice after 300 + 9 x 20 s at best). So when the
 * watchdog ends a job, each rank first leaves behind a small process that
 * watches this host's launcher processes (the rank's ancestors with a
 * launcher's name, in this host's network namespace, up to Slurm's
 * slurmstepd, which Slurm ends itself) and ends the ones still there after
 * a grace period: daemons with SIGTERM (orted then kills its ranks and
 * exits), mpirun and mpiexec with SIGKILL (Open MPI 4.1's mpirun, aborting
 * with a daemon it cannot reach, segfaults on SIGTERM, measured), anything
 * left a few seconds later with SIGKILL. When the launcher ends the job by
 * itself within the grace period (no partition) the watcher just exits.
 *
 *     struct ct_launcher_procs lp;
 *     ct_launcher_find(&lp);                    // before anything else
 *     ct_launcher_end_after(&lp, grace_s);      // then MPI_Abort
 */
#ifndef CT_PARALLEL_LAUNCHER_H
#define CT_PARALLEL_LAUNCHER_H

#include <sys/types.h>

enum ct_launcher_kind {
    CT_LAUNCHER_NONE,     /* not a launcher process */
    CT_LAUNCHER_DAEMON,   /* a per-host daemon: orted, prted, hydra_pmi_proxy */
    CT_LAUNCHER_FRONTEND, /* the command the user ran: mpirun, mpiexec, orterun, prterun */
    CT_LAUNCHER_STOP      /* Slurm's step daemon or srun: Slurm ends its own */
};

/* Pure. What a process named comm (as /proc/PID/comm gives it, at most 15
 * characters) is to us. */
enum ct_launcher_kind ct_launcher_kind(const char *comm);

#define CT_LAUNCHER_MAX 8
struct ct_launcher_procs {
    int n;
    pid_t pid[CT_LAUNCHER_MAX];
    enum ct_launcher_kind kind[CT_LAUNCHER_MAX];
    char comm[CT_LAUNCHER_MAX][16];
};

/* This process's launcher ancestors on this host, nearest first (none when
 * run without a launcher, or under srun). Reads /proc; never fails (an
 * unreadable /proc finds none). */
void ct_launcher_find(struct ct_launcher_procs *lp);

/* Forks the watcher described above (detached: its own session, no open
 * files, so no pipe of the launcher waits on it) and returns. Nothing to
 * watch, or fork failing: returns -1 and does nothing (the caller aborts
 * anyway). */
int ct_launcher_end_after(const struct ct_launcher_procs *lp, double grace_s);

/* A guard for a call that might block (MPI_Abort across a partition,
 * MPI_Finalize of a faulty MPI): a thread that, after delay_s, writes
 * message (if not NULL; a line of its own) to stderr and _exits with
 * status. The process ending first is the normal case. */
void ct_exit_after(double delay_s, int status, const char *message);

#endif
