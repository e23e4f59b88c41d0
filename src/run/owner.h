/* Who owns a run directory: RUN_DIR/owner.json names the one job allowed
 * to commit checkpoints there (its nonce, start time, Slurm job id, and per
 * rank the host, pid and pid start), and says whether that job has ended
 * and released it. While it runs, the owner's rank 0 rewrites a beat in
 * RUN_DIR/heartbeat/owner every beat_s seconds, so a job on another host can
 * tell a live owner from a dead one by reading the beat twice a little more
 * than two beats apart. docs/checkpoints.md ("One live job per run
 * directory") has the rules; train/ownership.h makes them collective.
 *
 *     struct ct_owner o;
 *     rc = ct_owner_read(dir, &o);                  // CT_ENOENT: nobody owns it
 *     pids[r] = ct_owner_pid_state(&o.ranks[r], my_host);
 *     v = ct_owner_decide(&o, my_nonce, pids, -1, why, sizeof why);
 *     if (v == CT_OWNER_ASK_BEAT) { ...ct_owner_beat_read twice, ct_owner_wait_s apart... }
 *     ct_owner_free(&o);
 *     rc = ct_owner_check(dir, my_nonce);           // before a commit: still ours?
 *
 * Not here: anything collective (train/ownership.c), the hang watchdog's
 * per-rank heartbeats (parallel/watchdog.h), which beat too slowly (up to
 * 10 s) for a short wait at start and not at all with dist.watchdog_s = 0.
 */
#ifndef CT_RUN_OWNER_H
#define CT_RUN_OWNER_H

#include <stddef.h>
#include <stdint.h>

#include "core/ticker.h"

#define CT_OWNER_FILE "owner.json"
#define CT_OWNER_BEAT_FILE "heartbeat/owner"
#define CT_OWNER_BEAT_S 1.0 /* the owner's beat period */

struct ct_owner_rank {
    char host[64];
    int64_t pid;
    int64_t pid_start; /* the process's start (clock ticks after boot, /proc); 0: unknown */
};

struct ct_owner {
    uint64_t nonce;         /* the job's, the same as its watchdog's */
    int released;           /* the job ended and gave the directory up */
    char end[64];           /* released: how it ended ("done", "error", "stopped by signal 15") */
    int64_t started_unix;
    char slurm_job[32];     /* SLURM_JOB_ID, "" outside Slurm */
    double beat_s;          /* its beat period */
    int world;
    struct ct_owner_rank *ranks; /* world entries (malloc'd) */
};

void ct_owner_free(struct ct_owner *o);

/* Pure. The record as one JSON object and a newline (malloc'd *text). */
int ct_owner_format(const struct ct_owner *o, char **text, size_t *len);
/* Pure. Parse a record; `what` names its source in errors (CT_EFORMAT:
 * not JSON, a key missing or of the wrong type, an unknown format). */
int ct_owner_parse(struct ct_owner *o, const char *text, size_t len, const char *what);
/* Pure. "job 5f3c...e1 (Slurm job 77), started 2026-12-05T19:41:27Z, on h0
 * (pids 123, 124), h1 (pid 200)": the job for a message, cut to cap. */
void ct_owner_describe(const struct ct_owner *o, char *out, size_t cap);

/* RUN_DIR/owner.json: read (CT_ENOENT when absent) and replaced atomically
 * (temporary file, fsync, rename, fsync of the directory). */
int ct_owner_read(const char *run_dir, struct ct_owner *o);
int ct_owner_write(const char *run_dir, const struct ct_owner *o);

/* Rank 0, before a commit: 0 when owner.json still names `nonce` and is not
 * released; else CT_EBUSY naming the job that owns the directory now (or
 * CT_EBUSY/CT_EFORMAT for a record gone or unreadable). */
int ct_owner_check(const char *run_dir, uint64_t nonce);

/* What one rank can see of an owner's process. */
enum ct_owner_pid { CT_OWNER_PID_UNKNOWN = 0, CT_OWNER_PID_GONE = 1, CT_OWNER_PID_ALIVE = 2 };
/* Not pure (kill(pid, 0), /proc): UNKNOWN unless r->host is `host`. */
enum ct_owner_pid ct_owner_pid_state(const struct ct_owner_rank *r, const char *host);
/* This process's start in clock ticks after boot (/proc/self/stat); 0 when unknown. */
int64_t ct_owner_self_start(void);

enum ct_owner_verdict {
    CT_OWNER_FREE,      /* no record: nobody owns it */
    CT_OWNER_OURS,      /* the record names this job */
    CT_OWNER_RELEASED,  /* its job ended and released it */
    CT_OWNER_LIVE,      /* another job runs: refuse */
    CT_OWNER_DEAD,      /* another job's record, but it is dead: take over */
    CT_OWNER_ASK_BEAT,  /* the pids tell nothing: read the beat */
    CT_OWNER_VERDICT_COUNT
};
/* Pure. o NULL: no record. pids: o->world states, the most alive any rank
 * of this job saw (ALIVE > GONE > UNKNOWN). beat: -1 not read yet, 0 did
 * not advance (or none of that job), 1 advanced. Live: any pid alive, or
 * the beat advanced. Dead: the owner's rank 0 (the one rank that commits)
 * gone on a host of this job, or every pid seen and gone, or the beat did
 * not advance. `why` says which, for the message. */
enum ct_owner_verdict ct_owner_decide(const struct ct_owner *o, uint64_t nonce, const int8_t *pids,
                                      int beat, char *why, size_t cap);
/* Pure. How long to wait between the two reads of the owner's beat: 2.5
 * beats, between 1 and 10 s. */
double ct_owner_wait_s(const struct ct_owner *o);

/* The owner's beat: a fixed-size record rewritten in place by one thread of
 * the owner's rank 0 (open, pwrite, close: a reader on another host sees it
 * after the close). */
#define CT_OWNER_BEAT_RECORD 64
void ct_owner_beat_format(char out[CT_OWNER_BEAT_RECORD], uint64_t nonce, uint64_t beat);
/* Pure. 0 and *beat when text is a beat record of `nonce`, else -1. */
int ct_owner_beat_parse(const char *text, size_t len, uint64_t nonce, uint64_t *beat);
/* 0 and *beat when RUN_DIR/heartbeat/owner holds a beat of `nonce`, else -1. */
int ct_owner_beat_read(const char *run_dir, uint64_t nonce, uint64_t *beat);

struct ct_owner_beat {
    char path[1100];
    uint64_t nonce, beat;
    double period_s;
    struct ct_ticker tick; /* the thread */
};
/* Writes the first beat (CT_EIO naming the file when it cannot), then
 * starts the thread. */
int ct_owner_beat_start(struct ct_owner_beat *b, const char *run_dir, uint64_t nonce, double period_s);
/* Stops and joins the thread; safe on one never started. */
void ct_owner_beat_stop(struct ct_owner_beat *b);

#endif
