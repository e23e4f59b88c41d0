/* What one global step reports (struct ct_step_result), apart from the
 * stepper (train/step.h) so that the step's modes (step_det.h) fill it
 * without including the stepper that calls them. */
#ifndef CT_TRAIN_STEP_RESULT_H
#define CT_TRAIN_STEP_RESULT_H

#include <stdint.h>

struct ct_step_result {
    double loss_sum;          /* the sum of this rank's per-sample losses */
    int64_t correct;          /* this rank's samples whose training-mode logits (dropout
                               * on, BatchNorm on batch statistics) picked their label */
    int64_t stop;             /* the stop request, max over ranks */
    double grad_norm;         /* before clipping (0 when clipping is off) */
    /* 1: a loss or the summed gradient held a NaN or an Inf, and the step
     * made no change at all (no update, optimizer state and BatchNorm
     * running statistics as before the step); the same on every rank. */
    int nonfinite;
    int nonfinite_rank;       /* the lowest rank whose own loss or gradient was
                               * non-finite; -1: none (the sum overflowed) */
};

#endif
