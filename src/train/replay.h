/* audit replay: re-train an interval of a run and certify that it gives the
 * recorded checkpoint bit for bit. The one audit that trains (the read-only
 * ones, verify, diff and summary, are report/audit.h).
 *
 *     struct ct_audit_replay_params rp = {.ckpt_a = "runs/cnn/ckpt-20",
 *                                         .ckpt_b = "runs/cnn/ckpt-40"};
 *     rc = ct_audit_replay(&comm, &rp, stdout);          // collective
 *
 * Return codes: 0 when the replay gives B bit for bit; CT_EMISMATCH when it
 * does not (the message names the first differing tensor and the likely
 * cause; the details are in the printed report and the certificate); other
 * codes when the inputs cannot be read or the replay cannot train.
 *
 * Deliberately not here: argument parsing and exit statuses (src/cli), the
 * checkpoint format (src/ckpt), the section-by-section comparison
 * (ckpt/compare.h).
 */
#ifndef CT_TRAIN_REPLAY_H
#define CT_TRAIN_REPLAY_H

#include <stdio.h>

#include "parallel/comm.h"

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

#endif
