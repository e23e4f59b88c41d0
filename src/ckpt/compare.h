/* Two checkpoints compared section by section: what `audit diff` prints and
 * what `audit replay` certifies. Both open the pair the same way and walk
 * B's sections against A's, by name, dtype, shape and bytes; f32 sections
 * that differ also get their largest absolute and relative difference.
 *
 *     struct ct_ckpt *a, *b;
 *     int rc = ct_ckpt_open_pair(&a, &b, "runs/x/ckpt-10", "runs/y/ckpt-10");
 *     struct ct_ckpt_cmp cmp;
 *     if (rc == 0)
 *         rc = ct_ckpt_compare(a, b, stdout, 1, &cmp);
 *     ct_ckpt_close_pair(a, b);
 *
 * Deliberately not here: what a difference means (src/report/audit.c for a
 * diff, src/train/replay.c for a replay's verdict and likely cause).
 */
#ifndef CT_CKPT_COMPARE_H
#define CT_CKPT_COMPARE_H

#include <stdio.h>

#include "ckpt/ckpt.h"

struct ct_ckpt_cmp {
    int n_differ, n_missing;
    char first[200];      /* first differing section, in B's order */
    double first_abs;     /* its largest absolute difference (f32 sections) */
};

/* Both checkpoints allocated and opened (every digest verified); on failure
 * the message names the one that failed. Close with ct_ckpt_close_pair
 * whatever the result. */
int ct_ckpt_open_pair(struct ct_ckpt **a, struct ct_ckpt **b, const char *pa, const char *pb);
void ct_ckpt_close_pair(struct ct_ckpt *a, struct ct_ckpt *b);

/* Every section of b against a, in b's order: one line per section that
 * differs or is missing (with `all`, one per section), counts and the first
 * differing section in *cmp. */
int ct_ckpt_compare(const struct ct_ckpt *a, const struct ct_ckpt *b, FILE *out, int all,
                    struct ct_ckpt_cmp *cmp);

#endif
