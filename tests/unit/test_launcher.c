/* The launcher's processes on this host (parallel/launcher.h): names
 * classified, ancestors found up to a Slurm step and not beyond, and the
 * watcher ending a daemon that outlives the grace period with SIGTERM, the
 * exit guard (ct_exit_after) ending a process stuck in a call. The
 * whole story (a cut link, every rank and daemon gone) is tests/net's
 * test_partition.sh. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ct_test.h"
#include "core/liveness.h"
#include "parallel/launcher.h"

static void test_kind(void)
{
    CU_ASSERT_EQUAL(ct_launcher_kind("orted"), CT_LAUNCHER_DAEMON);
    CU_ASSERT_EQUAL(ct_launcher_kind("hydra_pmi_proxy"), CT_LAUNCHER_DAEMON);
    CU_ASSERT_EQUAL(ct_launcher_kind("mpirun"), CT_LAUNCHER_FRONTEND);
    CU_ASSERT_EQUAL(ct_launcher_kind("mpiexec.mpich"), CT_LAUNCHER_FRONTEND);
    CU_ASSERT_EQUAL(ct_launcher_kind("slurmstepd"), CT_LAUNCHER_STOP);
    CU_ASSERT_EQUAL(ct_launcher_kind("bash"), CT_LAUNCHER_NONE);
    CU_ASSERT_EQUAL(ct_launcher_kind("orted2"), CT_LAUNCHER_NONE);
    CU_ASSERT_EQUAL(ct_launcher_kind(""), CT_LAUNCHER_NONE);
}

/* A process named `name` (prctl) that forks a child which runs fn and
 * exits; the named process then sleeps until signalled. Returns its pid. */
static pid_t named_parent(const char *name, void (*fn)(void))
{
    pid_t p = fork();
    if (p != 0)
        return p;
    prctl(PR_SET_NAME, name, 0, 0, 0);
    pid_t c = fork();
    if (c == 0) {
        fn();
        _exit(0);
    }
    waitpid(c, NULL, 0);
    for (;;)
        pause();
}

static void find_and_end(void)
{
    struct ct_launcher_procs lp;
    ct_launcher_find(&lp);
    /* Exactly the parent: the test program above it is no launcher. */
    if (lp.n != 1 || lp.pid[0] != getppid() || lp.kind[0] != CT_LAUNCHER_DAEMON ||
        strcmp(lp.comm[0], "orted") != 0)
        _exit(1); /* the parent would then sleep forever: the test fails on its wait */
    ct_launcher_end_after(&lp, 0.2);
}

static void find_under_slurm(void)
{
    struct ct_launcher_procs lp;
    ct_launcher_find(&lp);
    /* orted under slurmstepd: the daemon, and nothing above the step. */
    if (lp.n == 1)
        kill(getppid(), SIGUSR2);
}

/* waitpid with a generous bound (a loaded machine is slow, never this slow). */
static int wait_bounded(pid_t p, int *status)
{
    for (int i = 0; i < 600; i++) {
        if (waitpid(p, status, WNOHANG) == p)
            return 0;
        usleep(100000);
    }
    kill(p, SIGKILL);
    waitpid(p, status, 0);
    return -1;
}

static void test_watcher_ends_daemon(void)
{
    pid_t d = named_parent("orted", find_and_end);
    int st = 0;
    CU_ASSERT_EQUAL(wait_bounded(d, &st), 0);
    CU_ASSERT(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM);
}

static void test_stops_at_slurm(void)
{
    pid_t s = fork();
    if (s == 0) {
        prctl(PR_SET_NAME, "slurmstepd", 0, 0, 0);
        pid_t d = named_parent("orted", find_under_slurm);
        int st;
        waitpid(d, &st, 0);
        _exit(WIFSIGNALED(st) && WTERMSIG(st) == SIGUSR2 ? 0 : 1);
    }
    int st = 0;
    CU_ASSERT_EQUAL(wait_bounded(s, &st), 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* ct_exit_after: a process stuck in a call that does not return (here a
 * pause(); MPI_Finalize in main.c) ends after the delay with the status,
 * the message on its stderr. */
static void test_exit_guard(void)
{
    int fds[2];
    CU_ASSERT_EQUAL_FATAL(pipe(fds), 0);
    pid_t p = fork();
    CU_ASSERT_FATAL(p >= 0);
    if (p == 0) {
        dup2(fds[1], STDERR_FILENO);
        close(fds[0]);
        ct_exit_after(0.2, 7, "guard: ending without it");
        for (;;)
            pause();
    }
    close(fds[1]);
    int st = 0;
    CU_ASSERT_EQUAL(wait_bounded(p, &st), 0);
    CU_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 7);
    char buf[128] = "";
    ssize_t n = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    buf[n > 0 ? n : 0] = '\0';
    CU_ASSERT_STRING_EQUAL(buf, "guard: ending without it\n");
}

/* What a rank records it waits in (core/liveness.h). */
static void test_waits(void)
{
    uint64_t seq;
    double for_s;
    CU_ASSERT_PTR_NULL(ct_liveness_waiting(&seq, &for_s));
    uint64_t a = ct_liveness_collective();
    ct_liveness_wait_begin("agree", a);
    ct_liveness_wait_begin("allreduce", ct_liveness_collective()); /* nested: the outer stays */
    CU_ASSERT_STRING_EQUAL(ct_liveness_waiting(&seq, &for_s), "agree");
    CU_ASSERT_EQUAL(seq, a);
    ct_liveness_wait_end();
    CU_ASSERT_STRING_EQUAL(ct_liveness_waiting(&seq, &for_s), "agree");
    ct_liveness_wait_end();
    CU_ASSERT_PTR_NULL(ct_liveness_waiting(&seq, &for_s));
    CU_ASSERT_EQUAL(seq, a + 1); /* not waiting: the collectives started */
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"kinds of launcher process", test_kind},
        {"watcher: a daemon past the grace period gets SIGTERM", test_watcher_ends_daemon},
        {"ancestors: not above Slurm's step", test_stops_at_slurm},
        {"liveness: what a rank waits in", test_waits},
        {"exit guard: the status and the message after the delay", test_exit_guard},
        {NULL, NULL},
    };
    return ct_test_run("launcher", cases);
}
