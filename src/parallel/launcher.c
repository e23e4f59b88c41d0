/* The launcher's processes on this host, and ending them (see launcher.h). */
#include "parallel/launcher.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/proc.h"

enum ct_launcher_kind ct_launcher_kind(const char *comm)
{
    static const char *const daemons[] = {"orted", "prted", "hydra_pmi_proxy"};
    static const char *const frontends[] = {"mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra",
                                            "mpiexec.mpich", "mpirun.mpich", "mpiexec.openmpi",
                                            "mpirun.openmpi"};
    static const char *const stops[] = {"slurmstepd", "srun", "slurmd"};
    for (size_t i = 0; i < sizeof daemons / sizeof *daemons; i++)
        if (strcmp(comm, daemons[i]) == 0)
            return CT_LAUNCHER_DAEMON;
    for (size_t i = 0; i < sizeof frontends / sizeof *frontends; i++)
        if (strcmp(comm, frontends[i]) == 0)
            return CT_LAUNCHER_FRONTEND;
    for (size_t i = 0; i < sizeof stops / sizeof *stops; i++)
        if (strcmp(comm, stops[i]) == 0)
            return CT_LAUNCHER_STOP;
    return CT_LAUNCHER_NONE;
}

/* Same network namespace as this process: the same host, also where hosts
 * are namespaces of one machine sharing its process ids (tests/net). */
static int same_host(pid_t pid)
{
    char path[64];
    struct stat mine, theirs;
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)pid);
    if (stat("/proc/self/ns/net", &mine) != 0 || stat(path, &theirs) != 0)
        return 0;
    return mine.st_ino == theirs.st_ino && mine.st_dev == theirs.st_dev;
}

void ct_launcher_find(struct ct_launcher_procs *lp)
{
    memset(lp, 0, sizeof *lp);
    pid_t pid = getppid();
    for (int depth = 0; depth < 16 && pid > 1 && lp->n < CT_LAUNCHER_MAX; depth++) {
        struct ct_proc_stat ps;
        if (ct_proc_stat(pid, &ps) != 0 || !same_host(pid))
            return;
        enum ct_launcher_kind k = ct_launcher_kind(ps.comm);
        if (k == CT_LAUNCHER_STOP)
            return;
        if (k != CT_LAUNCHER_NONE) {
            lp->pid[lp->n] = pid;
            lp->kind[lp->n] = k;
            snprintf(lp->comm[lp->n], sizeof lp->comm[lp->n], "%s", ps.comm);
            lp->n++;
        }
        pid = (pid_t)ps.ppid;
    }
}

/* In the forked child only async-signal-safe calls (the parent has threads). */
static void nap_ms(long ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int any_alive(const struct ct_launcher_procs *lp)
{
    for (int i = 0; i < lp->n; i++)
        if (kill(lp->pid[i], 0) == 0)
            return 1;
    return 0;
}

/* Until every process has gone, for at most ms: 1 when all have. */
static int wait_gone(const struct ct_launcher_procs *lp, long ms)
{
    for (long t = 0; t < ms; t += 100) {
        if (!any_alive(lp))
            return 1;
        nap_ms(100);
    }
    return !any_alive(lp);
}

static void watcher(const struct ct_launcher_procs *lp, long grace_ms)
{
    if (wait_gone(lp, grace_ms))
        _exit(0);
    for (int i = 0; i < lp->n; i++)
        kill(lp->pid[i], lp->kind[i] == CT_LAUNCHER_DAEMON ? SIGTERM : SIGKILL);
    if (wait_gone(lp, 3000))
        _exit(0);
    for (int i = 0; i < lp->n; i++)
        kill(lp->pid[i], SIGKILL);
    _exit(0);
}

int ct_launcher_end_after(const struct ct_launcher_procs *lp, double grace_s)
{
    if (lp->n == 0)
        return -1;
    long grace_ms = (long)(grace_s * 1000.0);
    int max_fd = (int)sysconf(_SC_OPEN_MAX);
    max_fd = max_fd < 0 || max_fd > 65536 ? 65536 : max_fd;
    pid_t child = fork();
    if (child < 0)
        return -1;
    if (child > 0)
        return 0;
    /* The watcher: no file of the rank's (its stdout is the launcher's
     * pipe, which the launcher drains until every holder has closed it). */
    setsid();
    for (int fd = 0; fd < max_fd; fd++)
        close(fd);
    int null = open("/dev/null", O_RDWR);
    if (null >= 0) {
        dup2(null, 0);
        dup2(null, 1);
        dup2(null, 2);
    }
    watcher(lp, grace_ms);
    _exit(0);
}

struct exit_guard {
    double delay_s;
    int status;
    char message[512];
};

static void *exit_guard(void *arg)
{
    struct exit_guard g = *(struct exit_guard *)arg;
    free(arg);
    nap_ms((long)(g.delay_s * 1000.0));
    size_t n = strlen(g.message);
    if (n > 0 && write(STDERR_FILENO, g.message, n) < 0)
        n = 0; /* nowhere to say it: end anyway */
    _exit(g.status);
    return NULL;
}

void ct_exit_after(double delay_s, int status, const char *message)
{
    struct exit_guard *g = malloc(sizeof *g);
    if (!g)
        return;
    g->delay_s = delay_s;
    g->status = status;
    snprintf(g->message, sizeof g->message, "%s%s", message ? message : "", message ? "\n" : "");
    pthread_t t;
    if (pthread_create(&t, NULL, exit_guard, g) != 0) {
        free(g);
        return;
    }
    pthread_detach(t);
}
