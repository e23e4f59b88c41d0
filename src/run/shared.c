/* The run directory's start-up check (see shared.h): rank 0's probe, every
 * rank's reading of it, one verdict. */
#include "run/shared.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/path.h"

/* What rank 0 tells every rank: the probe's name and its content. */
struct probe {
    char name[64];
    char text[384];
};

/* What a rank saw, gathered on rank 0. */
enum { SEEN, MISSING, DIFFERENT, UNREADABLE };
struct sighting {
    int32_t status;
    int32_t err; /* errno for MISSING / UNREADABLE */
    char host[120];
};

/* The verdict every rank returns. */
struct verdict {
    int32_t failed;
    char msg[1900];
};

static uint64_t job_nonce(void)
{
    uint64_t n = 0;
    if (getrandom(&n, sizeof n, GRND_NONBLOCK) != (ssize_t)sizeof n) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        n = ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 16);
    }
    return n;
}

/* Rank 0: the first component of dir that does not exist yet, into top
 * ("" when dir exists), so that a refused start can remove what it made. */
static void first_missing(const char *dir, char *top, size_t cap)
{
    struct stat st;
    top[0] = '\0';
    if (snprintf(top, cap, "%s", dir) >= (int)cap || stat(top, &st) == 0) {
        top[0] = '\0';
        return;
    }
    /* Walk up while the parent is missing too. */
    for (;;) {
        char *slash = strrchr(top, '/');
        while (slash && slash > top && slash[1] == '\0') { /* trailing slashes */
            *slash = '\0';
            slash = strrchr(top, '/');
        }
        if (!slash || slash == top)
            return;
        *slash = '\0';
        if (stat(top, &st) == 0) {
            *slash = '/';
            return;
        }
    }
}

/* Rank 0: remove dir and its parents up to top (rmdir: only if empty). */
static void remove_made(const char *dir, const char *top)
{
    char p[CT_PATH_MAX];
    size_t lt = strlen(top);
    if (!lt || snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p)
        return;
    for (;;) {
        size_t lp = strlen(p);
        while (lp > 1 && p[lp - 1] == '/')
            p[--lp] = '\0';
        if (lp < lt || rmdir(p) != 0 || strcmp(p, top) == 0)
            return;
        char *slash = strrchr(p, '/');
        if (!slash || slash == p)
            return;
        *slash = '\0';
    }
}

/* Rank 0: create dir and the probe in it, durably (so that another host's
 * reading is not racing our page cache). */
static int write_probe(const char *dir, const char *path, const struct probe *pr, char *top,
                       size_t cap)
{
    first_missing(dir, top, cap);
    int rc = ct_mkdir_p(dir, 0777); /* the umask decides, as for the run directory */
    if (rc == 0)
        rc = ct_file_write_durable(path, pr->text, strlen(pr->text));
    if (rc == 0)
        rc = ct_fsync_dir(dir);
    if (rc < 0) {
        unlink(path);
        remove_made(dir, top);
    }
    return rc;
}

/* One try at reading the probe: SEEN, MISSING, DIFFERENT or UNREADABLE. */
static int read_once(const char *path, const char *want, int *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        *err = errno;
        return errno == ENOENT || errno == ENOTDIR || errno == ESTALE ? MISSING : UNREADABLE;
    }
    char buf[sizeof ((struct probe *)0)->text + 1];
    size_t len = strlen(want), got = 0;
    ssize_t n;
    while (got < sizeof buf && (n = read(fd, buf + got, sizeof buf - got)) > 0)
        got += (size_t)n;
    *err = n < 0 ? errno : 0;
    close(fd);
    if (n < 0)
        return UNREADABLE;
    return got == len && memcmp(buf, want, len) == 0 ? SEEN : DIFFERENT;
}

/* Every rank: read the probe, retrying for up to CT_SHARED_WAIT_MS (a file
 * another NFS client has just created can take that long to appear). */
static void read_probe(const char *path, const char *want, struct sighting *s)
{
    struct timespec t0, now, pause = {0, 50 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        s->status = read_once(path, want, &s->err);
        clock_gettime(CLOCK_MONOTONIC, &now);
        double ms = (double)(now.tv_sec - t0.tv_sec) * 1e3 + (double)(now.tv_nsec - t0.tv_nsec) / 1e6;
        if (s->status == SEEN || ms >= CT_SHARED_WAIT_MS)
            return;
        nanosleep(&pause, NULL);
    }
}

static const char *why(const struct sighting *s)
{
    return s->status == DIFFERENT ? "a file of that name with other content" : strerror(s->err);
}

/* Rank 0: the hosts that did not see the probe, each once with its ranks
 * and what it saw: "h1 (ranks 1,3: No such file or directory)". */
static size_t list_hosts(const struct sighting *all, int world, char *out, size_t cap, int *n_hosts)
{
    size_t used = 0;
    char *done = calloc((size_t)world, 1);
    *n_hosts = 0;
    for (int r = 0; r < world && done && used < cap; r++) {
        if (done[r] || all[r].status == SEEN)
            continue;
        char ranks[200];
        size_t rl = 0;
        int n = 0;
        for (int q = r; q < world; q++)
            if (!done[q] && all[q].status == all[r].status && all[q].err == all[r].err &&
                strcmp(all[q].host, all[r].host) == 0) {
                done[q] = 1;
                if (rl < sizeof ranks - 16)
                    rl += (size_t)snprintf(ranks + rl, sizeof ranks - rl, "%s%d", n ? "," : "", q);
                n++;
            }
        int w = snprintf(out + used, cap - used, "%s%s (%s %s: %s)", *n_hosts ? ", " : "",
                         all[r].host, n == 1 ? "rank" : "ranks", ranks, why(&all[r]));
        used += w > 0 ? ((size_t)w < cap - used ? (size_t)w : cap - used - 1) : 0;
        (*n_hosts)++;
    }
    free(done);
    return used;
}

/* Rank 0: the verdict from every rank's sighting. */
static void decide(const struct sighting *all, int world, const char *dir, const char *probe,
                   struct verdict *v)
{
    char hosts[1200];
    int n_hosts = 0;
    list_hosts(all, world, hosts, sizeof hosts, &n_hosts);
    v->failed = n_hosts > 0;
    if (!v->failed)
        return;
    snprintf(v->msg, sizeof v->msg,
             "run directory %s is not shared between the hosts of this job: %s %s %s not see the "
             "file %s that rank 0 wrote there on host %s (looked for %.1f s). Every rank writes "
             "into the run directory (checkpoints, heartbeats): put it on a file system that "
             "every host mounts at the same path (an NFS or Lustre path, not /tmp or a "
             "node-local disk) and pass it with --run-dir",
             dir, n_hosts == 1 ? "host" : "hosts", hosts, n_hosts == 1 ? "does" : "do", probe,
             all[0].host, CT_SHARED_WAIT_MS / 1000.0);
}

/* Every rank reads the probe; rank 0 gathers, removes the probe (and what it
 * made, on a refusal) and broadcasts the verdict. */
static int sight_and_decide(struct ct_comm *c, const char *dir, const char *path,
                            const struct probe *pr, const char *top)
{
    struct sighting mine;
    memset(&mine, 0, sizeof mine);
    snprintf(mine.host, sizeof mine.host, "%.119s", c->host);
    read_probe(path, pr->text, &mine);
    struct sighting *all = c->rank == 0 ? calloc((size_t)c->world, sizeof *all) : NULL;
    int rc = ct_comm_agree(c, c->rank == 0 && !all ? ct_error_set(CT_ENOMEM, "out of memory") : 0);
    if (rc == 0)
        rc = ct_comm_gather(c, &mine, sizeof mine, all, 0);
    struct verdict *v = calloc(1, sizeof *v);
    if (rc == 0)
        rc = ct_comm_agree(c, v ? 0 : ct_error_set(CT_ENOMEM, "out of memory"));
    if (c->rank == 0) {
        unlink(path);
        if (rc == 0)
            decide(all, c->world, dir, pr->name, v);
        if (rc < 0 || v->failed)
            remove_made(dir, top);
    }
    if (rc == 0)
        rc = ct_comm_bcast(c, v, sizeof *v, 0);
    if (rc == 0 && v->failed)
        rc = ct_error_set(CT_EIO, "%s", v->msg);
    free(v);
    free(all);
    return rc;
}

int ct_run_shared_check(struct ct_comm *c, const char *dir)
{
    if (c->world == 1)
        return 0;
    struct probe pr;
    memset(&pr, 0, sizeof pr);
    char top[CT_PATH_MAX] = "", path[CT_PATH_MAX];
    int rc = 0;
    if (c->rank == 0) {
        uint64_t nonce = job_nonce();
        snprintf(pr.name, sizeof pr.name, CT_SHARED_PROBE_PREFIX "%ld-%016" PRIx64, (long)getpid(), nonce);
        snprintf(pr.text, sizeof pr.text,
                 "ctrain-dist: a probe of whether every host sees this directory, written by "
                 "rank 0 on host %.120s, pid %ld, nonce %016" PRIx64 "; removed at once\n",
                 c->host, (long)getpid(), nonce);
        rc = ct_path_join(path, sizeof path, dir, pr.name);
        if (rc == 0)
            rc = write_probe(dir, path, &pr, top, sizeof top);
    }
    if ((rc = ct_comm_agree(c, rc)) < 0)
        return rc;
    rc = ct_comm_bcast(c, &pr, sizeof pr, 0);
    if (rc == 0 && c->rank != 0)
        rc = ct_path_join(path, sizeof path, dir, pr.name); /* as rank 0 did: fits */
    if ((rc = ct_comm_agree(c, rc)) < 0) {
        if (c->rank == 0) {
            unlink(path);
            remove_made(dir, top);
        }
        return rc;
    }
    return sight_and_decide(c, dir, path, &pr, top);
}
