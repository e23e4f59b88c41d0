/* The step's deterministic mode (train.deterministic; internal to
 * src/train, used by step.c only). Each of this rank's micro-batches
 * (parallel/mbcut.h's cut) runs forward and backward on its own into a row
 * of its own (its gradient, its buffer terms); the rows are summed over
 * micro-batches and ranks by the reproducible sum (parallel/reprosum.h), so
 * the summed gradient and buffers have the same bits for any rank count.
 * What is the step's is here: which micro-batches, which rows, the buffers'
 * weights, the sharded or unsharded sum. docs/determinism.md has the design.
 *
 *     struct ct_step_det d;
 *     ct_step_det_init(&d, &session);
 *     rc = ct_step_det_run(&d, &batch, step, stop_local, inject, &r, &t1);
 *     ct_step_det_restore(&d);                  // drop the step: buffers back
 *     ct_step_det_free(&d);
 */
#ifndef CT_TRAIN_STEP_DET_H
#define CT_TRAIN_STEP_DET_H

#include <stdint.h>

#include "data/loader.h"
#include "parallel/reprosum.h"
#include "train/session.h"
#include "train/step_result.h"

struct ct_step_det {
    struct ct_session *s;
    int64_t first;          /* this rank's first micro-batch in the global batch */
    int count, total;       /* this rank's micro-batches, and all ranks' */
    float *grads;           /* (count - 1, P): the last row is the model's gradient */
    float *bufs;            /* (count, NB): each micro-batch's running-stat term */
    float *buf0;            /* (NB) the buffers at the start of the step */
    struct ct_reprosum sum; /* rows (gradient, buffer terms) summed over ranks */
};

/* This rank's rows of the cut. CT_EINVAL naming the config file when the
 * cut fails, CT_ENOMEM. */
int ct_step_det_init(struct ct_step_det *d, struct ct_session *s);
void ct_step_det_free(struct ct_step_det *d);

/* Collective. The forward/backward of this rank's micro-batches, then the
 * sync: fills r's loss_sum, correct and stop; *t1 is when the
 * forward/backward ended. inject (test-only, step.h's CT_INJECT_NONFINITE):
 * this rank's first row is made NaN. A non-finite row anywhere is seen by
 * every rank in the same reduced exponents: nothing is summed, the buffers
 * go back to the step's start and r->nonfinite, r->nonfinite_rank say so.
 * Otherwise the summed gradient is in the model's gradients (sharded: its
 * slice [shard.lo, shard.hi) only, the rest undefined) and the buffers are
 * updated. Only MPI failures
 * fail, the same on every rank. */
int ct_step_det_run(struct ct_step_det *d, const struct ct_batch *b, int64_t step,
                    int64_t stop_local, int inject, struct ct_step_result *r, double *t1);

/* The model's buffers back to the start of the step (the step is dropped). */
void ct_step_det_restore(struct ct_step_det *d);

#endif
