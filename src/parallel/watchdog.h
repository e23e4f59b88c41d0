/* The hang watchdog: ends a job whose step loop stopped making progress. A
 * thread per rank rewrites a heartbeat file (RUN_DIR/heartbeat/rank-NNNNN)
 * and, when no rank made progress (ct_liveness_mark) for the deadline, names
 * the ranks behind and calls the caller's on_stall (MPI_Abort), so the job
 * ends non-zero instead of waiting in MPI forever. Deciding is pure
 * (ct_watchdog_decide); aborting is the caller's. docs/parallel.md says why
 * a file and not an MPI window, and what counts as progress.
 *
 *     struct ct_watchdog wd;
 *     ct_watchdog_start(&wd, &(struct ct_watchdog_params){.run_dir = dir, .rank = r,
 *                       .world = n, .host = host, .deadline_s = 300, .nonce = nonce,
 *                       .on_stall = abort_job});
 *     ... ct_liveness_mark(step) in the loop ...
 *     ct_watchdog_stop(&wd);
 */
#ifndef CT_PARALLEL_WATCHDOG_H
#define CT_PARALLEL_WATCHDOG_H

#include <pthread.h>

#include "core/ticker.h"
#include <stdint.h>

/* What one rank's heartbeat said, read twice a few periods apart. */
struct ct_watchdog_peer {
    int valid;      /* a record of this job was read */
    int alive;      /* its beat advanced between the two reads (its process runs) */
    int64_t step;   /* global steps it had completed */
    double idle_s;  /* seconds since its last progress, by its own clock */
    char host[64];
    /* The collective it is blocked in ("" when none, core/liveness.h), its
     * number (when none: the collectives it has started) and for how long. */
    char wait[24];
    uint64_t seq;
    double wait_s;
};

/* Pure. Given every rank's heartbeat, is the job stalled (no live rank made
 * progress within deadline_s), and which ranks are behind? Behind: the ranks
 * that do not respond (stopped, dead, or no record), else those at the
 * lowest step when steps differ, else all ranks (every one stuck in the same
 * step: a collective that never completes). Returns 1 and fills lagging
 * (world entries) and *n_lagging when stalled, else 0. */
int ct_watchdog_decide(const struct ct_watchdog_peer *peers, int world, double deadline_s,
                       int *lagging, int *n_lagging);

/* Pure. One line naming the lagging ranks, their hosts and last steps, and
 * what the ranks wait in. When every rank is alive (its heartbeat advances)
 * and blocked in the same collective, it is no stopped rank but a failure
 * of communication between the hosts (a partition): the line says so and
 * names the collective and the hosts; when some ranks wait in a collective
 * that others have not entered, it names those others. */
void ct_watchdog_message(char *out, size_t cap, const struct ct_watchdog_peer *peers, int world,
                         const int *lagging, int n_lagging, double deadline_s);

/* Pure. Heartbeat records (fixed size CT_WATCHDOG_RECORD bytes). format
 * writes self's host, step, idle_s, wait, seq and wait_s; parse returns 0
 * and fills *p (valid = 1) when text is a record of `nonce` and `rank`,
 * else -1. */
#define CT_WATCHDOG_RECORD 256
void ct_watchdog_format(char out[CT_WATCHDOG_RECORD], uint64_t nonce, int rank,
                        const struct ct_watchdog_peer *self, uint64_t beat);
int ct_watchdog_parse(const char *text, size_t len, uint64_t nonce, int rank,
                      struct ct_watchdog_peer *p, uint64_t *beat);

struct ct_watchdog_params {
    const char *run_dir;  /* heartbeats go to run_dir/heartbeat/ */
    int rank, world;
    const char *host;
    double deadline_s;    /* > 0 */
    uint64_t nonce;       /* the same on every rank of this job, new for each job */
    /* Called once from the watchdog's thread with the message (already
     * printed on stderr); expected not to return (MPI_Abort). */
    void (*on_stall)(const char *message, void *ctx);
    void *ctx;
};

struct ct_watchdog {
    struct ct_watchdog_params p;
    char dir[1100];
    char host[64];
    int fd;               /* this rank's heartbeat file */
    struct ct_ticker tick; /* the thread */
    int beat_failing;     /* the last heartbeat write failed (warned once per streak) */
    double period_s;
};

/* Creates the heartbeat directory and file, starts the thread. CT_EIO
 * naming the file when it cannot be made. */
int ct_watchdog_start(struct ct_watchdog *wd, const struct ct_watchdog_params *p);
/* Stops and joins the thread (the file stays). Safe on a watchdog never started. */
void ct_watchdog_stop(struct ct_watchdog *wd);

#endif
