/* Read-only reproducibility audits from the files alone: walk and check a
 * run's hash chain (verify), compare two checkpoints (diff), and summarise
 * the final metrics of several runs (summary). The audit that re-trains an
 * interval, replay, is train/replay.h.
 *
 *     rc = ct_audit_verify("runs/cnn", stdout);          // rank 0; 0 = everything holds
 *     rc = ct_audit_diff("runs/a/ckpt-10", "runs/b/ckpt-10", stdout);
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
#ifndef CT_REPORT_AUDIT_H
#define CT_REPORT_AUDIT_H

#include <stdio.h>

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

/* Mean +- std (sample std, n-1) of the final epoch's train_loss, test_loss,
 * test_acc over the runs; a directory without metrics.jsonl that holds
 * seed-* run directories stands for them. */
int ct_audit_summary(const char *const *dirs, int n, FILE *out);

#endif
