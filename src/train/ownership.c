/* The run directory's ownership, collectively (see ownership.h): every
 * decision is rank 0's, on what every rank saw, and agreed, so all ranks
 * start or all refuse. */
#include "train/ownership.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/path.h"

/* Rank 0 reads the record; every rank gets it (*have = 0: none). */
static int share_record(struct ct_comm *comm, const char *run_dir, struct ct_owner *o, int *have)
{
    char *text = NULL;
    size_t len = 0;
    int64_t n = -1;
    int rc = 0;
    if (comm->rank == 0) {
        rc = ct_owner_read(run_dir, o);
        if (rc == CT_ENOENT) {
            ct_error_clear();
            rc = 0;
        } else if (rc == 0 && (rc = ct_owner_format(o, &text, &len)) == 0) {
            n = (int64_t)len;
        }
        if (rc < 0)
            rc = ct_error_wrap(rc, "%s: cannot tell whether another job owns this run directory "
                               "(remove %s if no job runs there)", run_dir, CT_OWNER_FILE);
    }
    if ((rc = ct_comm_agree(comm, rc)) < 0 || (rc = ct_comm_bcast(comm, &n, sizeof n, 0)) < 0)
        goto out;
    *have = n >= 0;
    if (!*have || comm->world == 1)
        goto out;
    if (comm->rank != 0 && !(text = malloc((size_t)n + 1)))
        rc = ct_error_set(CT_ENOMEM, "out of memory");
    if ((rc = ct_comm_agree(comm, rc)) < 0 || (rc = ct_comm_bcast(comm, text, (size_t)n, 0)) < 0)
        goto out;
    if (comm->rank != 0)
        rc = ct_owner_parse(o, text, (size_t)n, CT_OWNER_FILE);
    rc = ct_comm_agree(comm, rc);
out:
    free(text);
    return rc;
}

/* The host name as the record keeps it (at most 63 bytes). */
static void short_host(const struct ct_comm *comm, char out[64])
{
    snprintf(out, 64, "%.63s", comm->host);
}

/* Every rank: the owner's processes on this rank's host; the most alive any
 * rank saw of each. */
static int look_for_pids(struct ct_comm *comm, const struct ct_owner *o, int8_t *pids)
{
    int32_t *v = calloc((size_t)o->world, sizeof *v);
    int rc = ct_comm_agree(comm, v ? 0 : ct_error_set(CT_ENOMEM, "out of memory"));
    if (rc == 0) {
        char host[64];
        short_host(comm, host);
        for (int r = 0; r < o->world; r++)
            v[r] = (int32_t)ct_owner_pid_state(&o->ranks[r], host);
        rc = ct_comm_allreduce_i32(comm, v, (size_t)o->world, CT_REDUCE_MAX);
        for (int r = 0; rc == 0 && r < o->world; r++)
            pids[r] = (int8_t)v[r];
    }
    free(v);
    return rc;
}

/* Rank 0: the owner's beat read twice, wait_s apart: 1 when it advanced. */
static int beat_advances(const char *run_dir, const struct ct_owner *o)
{
    uint64_t b1 = 0, b2 = 0;
    int r1 = ct_owner_beat_read(run_dir, o->nonce, &b1);
    double w = ct_owner_wait_s(o);
    struct timespec ts = {(time_t)w, (long)((w - (double)(time_t)w) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {
    }
    int r2 = ct_owner_beat_read(run_dir, o->nonce, &b2);
    return r2 == 0 && (r1 != 0 || b1 != b2);
}

/* Rank 0: this job's record, written, read back, and the beat started. */
static int write_ours(struct ct_ownership *own, struct ct_comm *comm, const struct ct_owner_rank *ranks)
{
    struct ct_owner me = {.nonce = own->nonce, .started_unix = (int64_t)time(NULL),
                          .beat_s = CT_OWNER_BEAT_S, .world = comm->world,
                          .ranks = (struct ct_owner_rank *)ranks};
    const char *slurm = getenv("SLURM_JOB_ID");
    snprintf(me.slurm_job, sizeof me.slurm_job, "%s", slurm ? slurm : "");
    int rc = ct_mkdir_p(own->run_dir, 0777);
    if (rc == 0)
        rc = ct_owner_write(own->run_dir, &me);
    if (rc < 0)
        return rc;
    /* Two jobs starting at the same moment both write: the later rename
     * wins, and the other learns it here (or, later, at its first commit). */
    struct ct_owner back;
    if ((rc = ct_owner_read(own->run_dir, &back)) < 0)
        return rc;
    if (back.nonce != own->nonce) {
        char who[640];
        ct_owner_describe(&back, who, sizeof who);
        ct_owner_free(&back);
        return ct_error_set(CT_EBUSY, "%s: another job claimed this run directory at the same moment: "
                            "%s; use another --run-dir", own->run_dir, who);
    }
    ct_owner_free(&back);
    return ct_owner_beat_start(&own->beat, own->run_dir, own->nonce, CT_OWNER_BEAT_S);
}

/* Every rank's host, pid and pid start to rank 0, which writes the record. */
static int take(struct ct_ownership *own, struct ct_comm *comm)
{
    struct ct_owner_rank mine = {.pid = (int64_t)getpid(), .pid_start = ct_owner_self_start()};
    short_host(comm, mine.host);
    struct ct_owner_rank *all = comm->rank == 0 ? calloc((size_t)comm->world, sizeof *all) : NULL;
    int rc = ct_comm_agree(comm, comm->rank == 0 && !all ? ct_error_set(CT_ENOMEM, "out of memory") : 0);
    if (rc == 0)
        rc = ct_comm_gather(comm, &mine, sizeof mine, all, 0);
    if (rc == 0 && comm->rank == 0)
        rc = write_ours(own, comm, all);
    free(all);
    if ((rc = ct_comm_agree(comm, rc)) == 0)
        own->held = 1;
    else if (comm->rank == 0)
        ct_owner_beat_stop(&own->beat);
    return rc;
}

int ct_ownership_claim(struct ct_ownership *own, struct ct_comm *comm, const char *run_dir,
                       uint64_t nonce)
{
    memset(own, 0, sizeof *own);
    own->nonce = nonce;
    if (strlen(run_dir) >= sizeof own->run_dir)
        return ct_comm_agree(comm, ct_error_set(CT_ERANGE, "%s: run directory path too long", run_dir));
    memcpy(own->run_dir, run_dir, strlen(run_dir) + 1);
    struct ct_owner o;
    memset(&o, 0, sizeof o);
    int have = 0;
    int rc = share_record(comm, run_dir, &o, &have);
    if (rc < 0)
        return rc;
    own->had_record = have;
    int8_t *pids = have ? calloc((size_t)o.world, 1) : NULL;
    enum ct_owner_verdict v = CT_OWNER_FREE;
    char why[256] = "", who[640] = "";
    rc = ct_comm_agree(comm, have && !pids ? ct_error_set(CT_ENOMEM, "out of memory") : 0);
    if (rc == 0 && have && !o.released && o.nonce != nonce)
        rc = look_for_pids(comm, &o, pids);
    if (rc == 0 && comm->rank == 0 && have) {
        v = ct_owner_decide(&o, nonce, pids, -1, why, sizeof why);
        if (v == CT_OWNER_ASK_BEAT)
            v = ct_owner_decide(&o, nonce, pids, beat_advances(run_dir, &o), why, sizeof why);
        ct_owner_describe(&o, who, sizeof who);
        if (v == CT_OWNER_LIVE)
            rc = ct_error_set(CT_EBUSY, "%s: another job owns this run directory and is running: %s (%s); "
                              "nothing here was changed: wait for that job to end or stop it, or use "
                              "another --run-dir", run_dir, who, why);
    }
    free(pids);
    ct_owner_free(&o);
    if ((rc = ct_comm_agree(comm, rc)) < 0)
        return rc;
    if ((rc = take(own, comm)) < 0)
        return rc;
    if (v == CT_OWNER_DEAD)
        ct_log_warn("%s: taking the run directory over from %s, which is dead: %s", run_dir, who, why);
    return 0;
}

/* Rank 0: mark the record released, or remove it (`remove`). */
static void give_up(struct ct_ownership *own, const struct ct_comm *comm, const char *how, int remove)
{
    if (!own->held)
        return;
    own->held = 0;
    if (comm->rank != 0)
        return;
    ct_owner_beat_stop(&own->beat);
    struct ct_owner o;
    int rc = ct_owner_read(own->run_dir, &o);
    if (rc == 0 && (o.nonce != own->nonce || o.released)) {
        ct_owner_free(&o);
        return; /* another job's now: not ours to release */
    }
    char path[CT_PATH_MAX];
    if (rc == 0 && remove) {
        ct_owner_free(&o);
        rc = ct_path_join(path, sizeof path, own->run_dir, CT_OWNER_FILE);
        if (rc == 0 && unlink(path) != 0)
            rc = ct_error_set(CT_EIO, "%s: cannot remove: %s", path, strerror(errno));
        else if (rc == 0)
            rc = ct_fsync_dir(own->run_dir);
    } else if (rc == 0) {
        o.released = 1;
        snprintf(o.end, sizeof o.end, "%s", how);
        rc = ct_owner_write(own->run_dir, &o);
        ct_owner_free(&o);
    }
    if (rc < 0)
        ct_log_warn("could not mark the run directory released (the next job there decides by this "
                    "job's processes and beat instead): %s", ct_error_message());
}

/* give_up keeping the error being reported (the caller prints it next). */
static void give_up_quietly(struct ct_ownership *own, const struct ct_comm *comm, const char *how,
                            int remove)
{
    char *saved = strdup(ct_error_message());
    give_up(own, comm, how, remove);
    if (saved && saved[0])
        ct_error_set(CT_EIO, "%s", saved); /* (the message is what is kept: the caller has its code) */
    free(saved);
}

void ct_ownership_release(struct ct_ownership *own, const struct ct_comm *comm, const char *how)
{
    give_up_quietly(own, comm, how, 0);
}

void ct_ownership_abandon(struct ct_ownership *own, const struct ct_comm *comm)
{
    give_up_quietly(own, comm, "error", !own->had_record);
}
