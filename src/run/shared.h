/* Is the run directory the same directory for every rank? Checked once at
 * start, before anything else is written there, because every rank writes
 * into it (checkpoints through MPI-IO, the watchdog's heartbeats): a
 * directory on each host's own disk (/tmp, a node-local scratch) would
 * otherwise train for a while and then fail or hang at the first checkpoint.
 *
 * Rank 0 creates the directory and writes a probe file holding a nonce of
 * this job (fsync'd, with its directory); every rank reads it back, retrying
 * for up to CT_SHARED_WAIT_MS against a network file system's attribute
 * cache; rank 0 gathers who saw it, removes the probe and, when some rank
 * did not, the directories it created, and every rank returns the same
 * verdict. Ranks other than 0 create nothing.
 *
 *     if ((rc = ct_run_shared_check(comm, run_dir)) < 0)   // collective
 *         ... every rank fails; the message names the hosts that did not see it
 *
 * Deliberately not here: what the run directory then holds (rundir.h), who
 * owns it (another job's heartbeats), checkpoints' own agreement (src/ckpt).
 */
#ifndef CT_RUN_SHARED_H
#define CT_RUN_SHARED_H

#include "parallel/comm.h"

/* How long a rank keeps looking for the probe before it says it cannot see
 * it: long enough for NFS to revalidate a directory it has cached, short
 * enough that a refused start is refused within seconds. */
#define CT_SHARED_WAIT_MS 2000

/* A probe file is named CT_SHARED_PROBE_PREFIX<pid>-<nonce> (a stale one,
 * left by a job killed during its check, is never taken for a live one: its
 * nonce differs; ".tmp-<pid>-<hex>" is also how the tests' message tables
 * mask temporary names). */
#define CT_SHARED_PROBE_PREFIX ".ct-shared-probe.tmp-"

/* Collective. 0 when every rank saw rank 0's probe in dir (then dir exists
 * and holds nothing new); else the same negative code and message on every
 * rank: CT_EIO "run directory DIR is not shared between the hosts of this
 * job: host H (ranks ...) does not see ..." with what to do, or rank 0's
 * failure to create dir or the probe. One rank: nothing to check, 0. */
int ct_run_shared_check(struct ct_comm *c, const char *dir);

#endif
