/* Reproducibility audits from the files alone: walk and check a run's hash
 * chain (verify), compare two checkpoints (diff), re-train an interval and
 * certify that it gives the recorded checkpoint bit for bit (replay), and
 * summarise the final metrics of several runs (summary).
 *
 *     rc = ct_audit_verify("runs/cnn", stdout);          // rank 0; 0 = everything holds
 *     rc = ct_audit_diff("runs/a/ckpt-10", "runs/b/ckpt-10", stdout);
 *     rc = ct_audit_replay(&comm, &rp, stdout);          // collective
 *     rc = ct_audit_summary(dirs, n, stdout);
 *
 * Return codes: 0 when everything holds; CT_EMISMATCH when the audit found
 * a break or a difference (the message names the checkpoint and what is
 * wrong; the details are in the printed report); other codes when the
 * inputs cannot be read (no such directory, not a checkpoint).
 *
 * Deliberately not here: argument parsing and exit statuses (src/cli), the
 * checkpoint format (src/ckpt), the chain file's format (src/run/record.h).
 */
#ifndef CT_TRAIN_AUDIT_H
#define CT_TRAIN_AUDIT_H

#include <stdio.h>

#include "parallel/comm.h"

/* Every chain entry in order: every present checkpoint fully verified and
 * matching its entry, every parent link to an earlier entry with a lower
 * step, config changes along the lineage only in runtime keys (the config
 * schema's own split), the same data digests (or a recorded change naming
 * the file), every committed checkpoint in the chain. Prints a table of
 * checkpoints and one of segments (steps, world size, hosts, code version,
 * libraries, gemm, changes). A checkpoint deleted by retention whose entry
 * is kept is "absent" and passes. */
int ct_audit_verify(const char *run_dir, FILE *out);

/* Config diff, provenance diff and per-tensor max abs/rel difference of two
 * checkpoints; 0 whatever the differences (a diff is a report). */
int ct_audit_diff(const char *a, const char *b, FILE *out);

struct ct_audit_replay_params {
    const char *ckpt_a, *ckpt_b;
    const char *out_dir;          /* certificate audit-<A>-<B>.json and the replay's run dir;
                                   * NULL: "<B's run dir>-audit", beside the audited run */
    const char *const *sets;      /* runtime overrides from the replay's environment */
    int n_sets;
};

/* Collective. Restores A, trains to B's step with B's recorded config (plus
 * sets, which may change runtime keys only), in a run directory of its own
 * (<out_dir>/audit-<A>-<B>.run: nothing is written into A's or B's run
 * directory), compares every tensor, scalar and comparable rank-record field
 * with B, writes the certificate <out_dir>/audit-<A>-<B>.json (rank 0, atomically)
 * and returns 0 on identity, CT_EMISMATCH naming the first differing tensor,
 * its max abs difference and the likely cause otherwise. */
int ct_audit_replay(struct ct_comm *c, const struct ct_audit_replay_params *p, FILE *out);

/* Mean +- std (sample std, n-1) of the final epoch's train_loss, test_loss,
 * test_acc over the runs; a directory without metrics.jsonl that holds
 * seed-* run directories stands for them. */
int ct_audit_summary(const char *const *dirs, int n, FILE *out);

#endif
