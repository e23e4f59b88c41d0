/* One live job per run directory, collectively: at start the job claims the
 * directory (refused, on every rank, while another job that owns it is
 * alive; taken over, with one log line, when that job is dead), and at its
 * end it releases it, so that a requeue or `--resume auto` right after
 * never waits. The record, its beat and the pure live/dead decision are
 * run/owner.h; the check before each commit is ct_owner_check, which the
 * trainer passes to the checkpoint writer (trainer->owner_nonce).
 *
 *     struct ct_ownership own;
 *     rc = ct_ownership_claim(&own, comm, run_dir, nonce);   // collective, agreed
 *     ... train, with tr->owner_nonce = nonce ...
 *     ct_ownership_release(&own, comm, "done");              // every rank (rank 0 acts)
 *     (or ct_ownership_abandon(&own, comm) when the start failed)
 */
#ifndef CT_TRAIN_OWNERSHIP_H
#define CT_TRAIN_OWNERSHIP_H

#include <stdint.h>

#include "parallel/comm.h"
#include "run/owner.h"

struct ct_ownership {
    uint64_t nonce;
    char run_dir[1024];
    int held;                  /* this job wrote the record (and rank 0 beats) */
    int had_record;            /* rank 0: the directory had a record before this job's */
    struct ct_owner_beat beat; /* rank 0 */
};

/* Collective. Rank 0 reads RUN_DIR/owner.json; when another job's record
 * that is not released is there, every rank looks for that job's processes
 * on its own host, and when none of them tells, rank 0 reads the owner's
 * beat twice ct_owner_wait_s apart (1-10 s, 2.5 s by default). A live
 * owner: CT_EBUSY on every rank, naming the job and the directory, nothing
 * written. Otherwise rank 0 writes this job's record (nonce, start time,
 * SLURM_JOB_ID, every rank's host, pid and pid start) and starts the beat. */
int ct_ownership_claim(struct ct_ownership *own, struct ct_comm *comm, const char *run_dir,
                       uint64_t nonce);
/* Marks the record released with how the job ended ("done", "error",
 * "stopped by signal 10"), unless another job owns the directory now; stops
 * the beat. Rank 0 acts, the others return; failures are warnings. Safe
 * on an ownership never claimed, and twice. */
void ct_ownership_release(struct ct_ownership *own, const struct ct_comm *comm, const char *how);
/* A start that failed before training (a data file refused, a checkpoint
 * that does not load): as release("error"), but a record where there was
 * none before this job is removed, so the directory is left as it was found
 * but for heartbeat/. */
void ct_ownership_abandon(struct ct_ownership *own, const struct ct_comm *comm);

#endif
