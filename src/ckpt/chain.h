/* The run's hash chain, chain.jsonl: one line per committed checkpoint,
 * appended by rank 0 right after the commit and kept when retention deletes
 * the checkpoint (the line format is run/record.h's; this module says what
 * goes into it and keeps the file in step with the checkpoints). It is the
 * commit protocol's last phase (ckpt.h, failpoint "chain"), hence here,
 * beside the writer; it uses run/record.h's line format, and run never
 * includes ckpt.
 *
 * Durability follows the checkpoint commit protocol (ckpt/ckpt.h): the
 * checkpoint commits first (`latest` replaced), then its line is appended
 * (one write, fsync). A crash between the two leaves a committed checkpoint
 * without its line, and a crash inside the append a torn last line;
 * ct__chain_repair, run on every resume of a run directory, cuts the torn
 * line off and appends the lines of committed checkpoints newer than the
 * chain's last one, built from their manifests, so the chain is whole again
 * before the next commit. "Committed" is up to the checkpoint `latest`
 * names (ct_ckpt_find_latest): a directory published under its final name
 * by a job stopped before it replaced `latest` is not part of the lineage;
 * the repair removes it (unless a line names its step: an older lineage's,
 * kept after a resume from an earlier checkpoint).
 *
 *     rc = ct__chain_commit(run_dir, "runs/x/ckpt-40");  // rank 0, after ct_ckpt_write
 *     rc = ct__chain_repair(run_dir, &appended);         // rank 0, on resume
 */
#ifndef CT_CKPT_CHAIN_H
#define CT_CKPT_CHAIN_H

#include "ckpt/ckpt.h"
#include "run/record.h"

#define CT_CHAIN_FILE "chain.jsonl"

/* The chain entry of an open checkpoint, from its manifest and rank records. */
int ct__chain_entry_from_ckpt(const struct ct_ckpt *ck, struct ct_chain_entry *e);
/* Open (and so verify) the checkpoint just committed and append its line. */
int ct__chain_commit(const char *run_dir, const char *ckpt_dir);
/* The step of run_dir's newest committed checkpoint (ct_ckpt_find_latest),
 * -1 when there is none. */
int ct__chain_committed_step(const char *run_dir, int64_t *step);
/* Make chain.jsonl whole: drop a torn last line, append the entries of
 * committed checkpoints (ckpt-<step> with a verifying manifest, up to the
 * committed step above) with steps above the chain's last entry, in step
 * order, and remove the published but uncommitted ones above it that no
 * line names. *appended gets the number appended. */
int ct__chain_repair(const char *run_dir, int *appended);

#endif
