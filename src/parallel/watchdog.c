/* The hang watchdog (see watchdog.h): the pure decision and record format,
 * then the thread that writes this rank's heartbeat and reads the others'
 * only when this rank has been idle for the deadline. */
#include "parallel/watchdog.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/liveness.h"
#include "core/path.h"

/* ------------------------------------------------------------ pure */

int ct_watchdog_decide(const struct ct_watchdog_peer *peers, int world, double deadline_s,
                       int *lagging, int *n_lagging)
{
    *n_lagging = 0;
    for (int r = 0; r < world; r++)
        if (peers[r].valid && peers[r].alive && peers[r].idle_s < deadline_s)
            return 0; /* somebody still makes progress */
    int n = 0;
    for (int r = 0; r < world; r++)
        if (!peers[r].valid || !peers[r].alive)
            lagging[n++] = r;
    if (n == 0) {
        int64_t lo = peers[0].step, hi = peers[0].step;
        for (int r = 1; r < world; r++) {
            lo = peers[r].step < lo ? peers[r].step : lo;
            hi = peers[r].step > hi ? peers[r].step : hi;
        }
        for (int r = 0; r < world; r++)
            if (lo == hi || peers[r].step == lo)
                lagging[n++] = r;
    }
    *n_lagging = n;
    return 1;
}

#define ADD(...)                                                                    \
    do {                                                                            \
        int k_ = snprintf(out + len, len < cap ? cap - len : 0, __VA_ARGS__);       \
        if (k_ > 0)                                                                 \
            len = len + (size_t)k_ < cap ? len + (size_t)k_ : cap;                  \
    } while (0)

/* The collective the most advanced waiting ranks are blocked in: the index
 * of one such peer, or -1 when no rank waits in a collective. */
static int deepest_wait(const struct ct_watchdog_peer *peers, int world)
{
    int best = -1;
    for (int r = 0; r < world; r++)
        if (peers[r].valid && peers[r].wait[0] && (best < 0 || peers[r].seq > peers[best].seq))
            best = r;
    return best;
}

static int waits_in(const struct ct_watchdog_peer *p, const struct ct_watchdog_peer *w)
{
    return p->valid && p->wait[0] && p->seq == w->seq && strcmp(p->wait, w->wait) == 0;
}

/* Rank q is listed: it waits in w's collective (in = 1) or does not (in =
 * 0); with w NULL, every rank is. */
static int listed(const struct ct_watchdog_peer *peers, int q, const struct ct_watchdog_peer *w, int in)
{
    return w ? waits_in(&peers[q], w) == in : 1;
}

/* "h0 (ranks 0,1), h1 (rank 2)": the distinct hosts of the listed ranks, in
 * rank order. */
static size_t add_hosts(char *out, size_t cap, size_t len, const struct ct_watchdog_peer *peers,
                        int world, const struct ct_watchdog_peer *w, int in)
{
    int n_hosts = 0;
    for (int r = 0; r < world; r++) {
        if (!listed(peers, r, w, in))
            continue;
        int seen = 0;
        for (int q = 0; q < r && !seen; q++)
            seen = listed(peers, q, w, in) && strcmp(peers[q].host, peers[r].host) == 0;
        if (seen)
            continue;
        int k = 0;
        for (int q = r; q < world; q++)
            k += listed(peers, q, w, in) && strcmp(peers[q].host, peers[r].host) == 0;
        ADD("%s%s (rank%s", n_hosts ? ", " : "", peers[r].valid ? peers[r].host : "?", k > 1 ? "s" : "");
        int n = 0;
        for (int q = r; q < world; q++)
            if (listed(peers, q, w, in) && strcmp(peers[q].host, peers[r].host) == 0)
                ADD("%s%d", n++ ? "," : " ", q);
        ADD(")");
        n_hosts++;
    }
    return len;
}

void ct_watchdog_message(char *out, size_t cap, const struct ct_watchdog_peer *peers, int world,
                         const int *lagging, int n_lagging, double deadline_s)
{
    size_t len = 0;
    int all_alive = n_lagging > 0, all_wait = n_lagging > 0, all_comm = n_lagging > 0;
    int w = deepest_wait(peers, world), low = w;
    for (int r = 0; r < world; r++) {
        all_alive &= peers[r].valid && peers[r].alive;
        all_wait &= w >= 0 && waits_in(&peers[r], &peers[w]);
        all_comm &= peers[r].valid && peers[r].wait[0] != '\0';
        if (peers[r].valid && peers[r].wait[0] && peers[r].seq < peers[low].seq)
            low = r;
    }
    const int same = all_wait && n_lagging == world;
    if (all_alive && all_comm) {
        /* A partition: nobody stopped, everybody waits for somebody. The
         * ranks may wait in different collectives: a cut in the middle of one
         * lets the ranks whose data arrived go on to the next, while what they
         * sent the others is lost. */
        ADD("watchdog: no rank made progress for %.0f s (dist.watchdog_s), yet every rank is alive "
            "(heartbeats fresh) and blocked in communication: ", deadline_s);
        if (same)
            ADD("every rank waits in %s #%" PRIu64 " (for %.0f s) at step %" PRId64 "; ", peers[w].wait,
                peers[w].seq, peers[w].wait_s, peers[w].step);
        else
            ADD("ranks wait in %s #%" PRIu64 " (for %.0f s) at step %" PRId64 " and, still in an earlier one, "
                "%s #%" PRIu64 " at step %" PRId64 " (what the others sent them has not arrived); ",
                peers[w].wait, peers[w].seq, peers[w].wait_s, peers[w].step, peers[low].wait, peers[low].seq,
                peers[low].step);
        int one_host = 1;
        for (int r = 1; r < world; r++)
            one_host &= strcmp(peers[r].host, peers[0].host) == 0;
        if (one_host) {
            ADD("all on host %s: a fault of MPI or its transport there", peers[0].host);
        } else {
            ADD("the hosts ");
            len = add_hosts(out, cap, len, peers, world, same ? &peers[w] : NULL, 1);
            ADD(" have not answered each other: a network partition or a failed link between them "
                "(MPI cannot deliver, and MPI_Abort cannot cross it: every rank ends itself)");
        }
        ADD("; ending the job");
        return;
    }
    ADD("watchdog: no rank made progress for %.0f s (dist.watchdog_s); behind:", deadline_s);
    for (int i = 0; i < n_lagging; i++) {
        const struct ct_watchdog_peer *p = &peers[lagging[i]];
        if (!p->valid)
            ADD("%s rank %d (no heartbeat: never started, or its run directory is not shared)",
                i ? ";" : "", lagging[i]);
        else
            ADD("%s rank %d (host %s, last step %" PRId64 "%s)", i ? ";" : "", lagging[i], p->host,
                p->step, p->alive ? ", still running" : ", not responding: stopped, dead or hung");
    }
    if (w >= 0) {
        /* Some wait in a collective that others have not entered. */
        ADD("; ranks on ");
        len = add_hosts(out, cap, len, peers, world, &peers[w], 1);
        ADD(" wait in %s #%" PRIu64 " (for %.0f s), which ", peers[w].wait, peers[w].seq,
            peers[w].wait_s);
        len = add_hosts(out, cap, len, peers, world, &peers[w], 0);
        ADD(" never entered");
    }
    ADD("; ending the job");
}
#undef ADD

void ct_watchdog_format(char out[CT_WATCHDOG_RECORD], uint64_t nonce, int rank,
                        const struct ct_watchdog_peer *self, uint64_t beat)
{
    memset(out, ' ', CT_WATCHDOG_RECORD);
    int n = snprintf(out, CT_WATCHDOG_RECORD,
                     "ctrain-heartbeat 2 nonce=%016" PRIx64 " rank=%d step=%" PRId64 " beat=%" PRIu64
                     " idle_ms=%" PRId64 " wait=%.23s seq=%" PRIu64 " wait_ms=%" PRId64 " host=%.63s",
                     nonce, rank, self->step, beat, (int64_t)(self->idle_s * 1000.0),
                     self->wait[0] ? self->wait : "-", self->seq, (int64_t)(self->wait_s * 1000.0),
                     self->host);
    if (n >= 0 && n < CT_WATCHDOG_RECORD)
        out[n] = ' '; /* keep the padding, no NUL inside */
    out[CT_WATCHDOG_RECORD - 1] = '\n';
}

int ct_watchdog_parse(const char *text, size_t len, uint64_t nonce, int rank,
                      struct ct_watchdog_peer *p, uint64_t *beat)
{
    char buf[CT_WATCHDOG_RECORD + 1];
    if (len != CT_WATCHDOG_RECORD || text[len - 1] != '\n')
        return -1; /* short, or torn */
    memcpy(buf, text, len);
    buf[len] = '\0';
    uint64_t n = 0, seq = 0;
    int r = -1;
    int64_t step = 0, idle_ms = 0, wait_ms = 0;
    char host[64] = "", wait[24] = "";
    if (sscanf(buf, "ctrain-heartbeat 2 nonce=%" SCNx64 " rank=%d step=%" SCNd64 " beat=%" SCNu64
                    " idle_ms=%" SCNd64 " wait=%23s seq=%" SCNu64 " wait_ms=%" SCNd64 " host=%63s",
               &n, &r, &step, beat, &idle_ms, wait, &seq, &wait_ms, host) != 9)
        return -1;
    if (n != nonce || r != rank)
        return -1; /* another job's, or another rank's */
    memset(p, 0, sizeof *p);
    p->valid = 1;
    p->step = step;
    p->idle_s = (double)idle_ms / 1000.0;
    snprintf(p->host, sizeof p->host, "%s", host);
    if (strcmp(wait, "-") != 0)
        snprintf(p->wait, sizeof p->wait, "%s", wait);
    p->seq = seq;
    p->wait_s = (double)wait_ms / 1000.0;
    return 0;
}

/* This rank's own state, first hand. */
static void self_state(const struct ct_watchdog *wd, struct ct_watchdog_peer *p)
{
    memset(p, 0, sizeof *p);
    p->valid = p->alive = 1;
    p->step = ct_liveness_step();
    p->idle_s = ct_liveness_idle_s();
    snprintf(p->host, sizeof p->host, "%s", wd->host);
    const char *what = ct_liveness_waiting(&p->seq, &p->wait_s);
    if (what)
        snprintf(p->wait, sizeof p->wait, "%s", what);
}

/* ------------------------------------------------------------ the thread */

static void write_beat(struct ct_watchdog *wd, uint64_t beat)
{
    char rec[CT_WATCHDOG_RECORD];
    struct ct_watchdog_peer self;
    self_state(wd, &self);
    ct_watchdog_format(rec, wd->p.nonce, wd->p.rank, &self, beat);
    /* One pwrite of the whole record at offset 0: a reader sees the old or
     * the new record, or a torn one that parse rejects. Errors are not
     * fatal (training itself may be fine), but they are said, once per
     * streak: the other ranks' watchdogs may then see this rank as not
     * responding, and the user should know why. */
    ssize_t n = pwrite(wd->fd, rec, sizeof rec, 0);
    if (n == (ssize_t)sizeof rec) {
        wd->beat_failing = 0;
        return;
    }
    if (!wd->beat_failing)
        fprintf(stderr, "[rank %d] ctrain-dist: warning: %s/rank-%05d: heartbeat write failed: %s "
                "(the other ranks' watchdogs may take this rank for stalled)\n", wd->p.rank, wd->dir,
                wd->p.rank, n < 0 ? strerror(errno) : "short write");
    wd->beat_failing = 1;
}

static void read_peer(const struct ct_watchdog *wd, int r, struct ct_watchdog_peer *p, uint64_t *beat)
{
    char path[1200], rec[CT_WATCHDOG_RECORD];
    memset(p, 0, sizeof *p);
    *beat = 0;
    snprintf(path, sizeof path, "%s/rank-%05d", wd->dir, r);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = pread(fd, rec, sizeof rec, 0);
    close(fd);
    if (n > 0)
        ct_watchdog_parse(rec, (size_t)n, wd->p.nonce, r, p, beat);
}

/* Sleep s seconds unless asked to stop; 1 when asked. */
static int nap(struct ct_watchdog *wd, double s) { return ct_ticker_nap(&wd->tick, s); }

/* This rank has been idle for the deadline: read every heartbeat twice,
 * three periods apart (beating meanwhile), and decide. 1 when stalled
 * (*msg filled, *reporter = this rank is the lowest one not behind). */
static int check_peers(struct ct_watchdog *wd, uint64_t *beat, char *msg, size_t cap, int *reporter)
{
    const int W = wd->p.world;
    struct ct_watchdog_peer *peers = calloc((size_t)W, sizeof *peers);
    uint64_t *first = calloc((size_t)W, sizeof *first);
    int *lagging = calloc((size_t)W, sizeof *lagging);
    int stalled = 0;
    if (!peers || !first || !lagging)
        goto out;
    for (int r = 0; r < W; r++)
        read_peer(wd, r, &peers[r], &first[r]);
    for (int k = 0; k < 3; k++) {
        if (nap(wd, wd->period_s))
            goto out;
        write_beat(wd, ++*beat);
    }
    for (int r = 0; r < W; r++) {
        uint64_t b;
        int was_valid = peers[r].valid;
        read_peer(wd, r, &peers[r], &b);
        peers[r].alive = was_valid && peers[r].valid && b != first[r];
    }
    self_state(wd, &peers[wd->p.rank]);
    int n = 0;
    stalled = ct_watchdog_decide(peers, W, wd->p.deadline_s, lagging, &n);
    if (stalled) {
        ct_watchdog_message(msg, cap, peers, W, lagging, n, wd->p.deadline_s);
        int lowest = -1;
        for (int r = 0; r < W && lowest < 0; r++) {
            int behind = 0;
            for (int i = 0; i < n; i++)
                behind |= lagging[i] == r;
            if (!behind)
                lowest = r;
        }
        *reporter = lowest == wd->p.rank || lowest < 0;
    }
out:
    free(peers);
    free(first);
    free(lagging);
    return stalled;
}

static void *watchdog_main(void *arg)
{
    struct ct_watchdog *wd = arg;
    uint64_t beat = 0;
    char msg[4096];
    for (;;) {
        write_beat(wd, ++beat);
        if (nap(wd, wd->period_s))
            return NULL;
        if (ct_liveness_idle_s() < wd->p.deadline_s)
            continue;
        int reporter = 0;
        if (!check_peers(wd, &beat, msg, sizeof msg, &reporter))
            continue;
        /* One rank reports (the lowest that is not behind); the others
         * give it a few periods and end the job themselves if it did not,
         * unless the job got going again meanwhile (their own progress, or
         * a second look at the heartbeats). */
        if (!reporter) {
            int resumed = 0;
            for (int k = 0; k < 2 && !resumed; k++) {
                if (nap(wd, wd->period_s))
                    return NULL;
                write_beat(wd, ++beat);
                resumed = ct_liveness_idle_s() < wd->p.deadline_s;
            }
            if (resumed || !check_peers(wd, &beat, msg, sizeof msg, &reporter))
                continue;
        }
        fprintf(stderr, "[rank %d] ctrain-dist: error: %s\n", wd->p.rank, msg);
        fflush(stderr);
        if (wd->p.on_stall)
            wd->p.on_stall(msg, wd->p.ctx);
        return NULL;
    }
}

int ct_watchdog_start(struct ct_watchdog *wd, const struct ct_watchdog_params *p)
{
    memset(wd, 0, sizeof *wd);
    wd->fd = -1;
    wd->p = *p;
    snprintf(wd->host, sizeof wd->host, "%s", p->host ? p->host : "?");
    for (char *c = wd->host; *c; c++)
        if (*c == ' ' || *c == '\n')
            *c = '_';
    /* A beat every tenth of the deadline, between 0.5 and 10 s: the check
     * after the deadline takes three more. */
    wd->period_s = p->deadline_s / 10.0 < 0.5 ? 0.5 : p->deadline_s / 10.0 > 10 ? 10 : p->deadline_s / 10.0;
    wd->p.run_dir = NULL;
    int rc = ct_path_join(wd->dir, sizeof wd->dir, p->run_dir, "heartbeat");
    if (rc == 0)
        rc = ct_mkdir_p(wd->dir, 0777); /* the umask decides, as for the run directory */
    if (rc < 0)
        return rc;
    char path[1200];
    snprintf(path, sizeof path, "%s/rank-%05d", wd->dir, p->rank);
    wd->fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (wd->fd < 0)
        return ct_error_set(CT_EIO, "%s: cannot open the watchdog's heartbeat file: %s", path,
                            strerror(errno));
    ct_liveness_mark(-1);
    if (ct_ticker_start(&wd->tick, watchdog_main, wd) < 0) {
        close(wd->fd);
        wd->fd = -1;
        return ct_error_set(CT_EIO, "cannot start the watchdog thread");
    }
    return 0;
}

void ct_watchdog_stop(struct ct_watchdog *wd)
{
    ct_ticker_stop(&wd->tick);
    if (wd->fd >= 0)
        close(wd->fd);
    wd->fd = -1;
}
