/* One global training step, visible in one place (as in llm.c):
 *
 *     zero the gradients
 *     for each micro-batch of this rank's slice:
 *         forward, loss, backward          (the last micro-batch's backward
 *                                           starts each gradient bucket's
 *                                           allreduce from the backward hook)
 *     wait for the gradient sync            (+ the stop request, folded in)
 *     clip the global gradient norm         (the clipping norm, or one scan,
 *                                           says whether the sum is finite)
 *     optimizer update                      (none when it is not: r->nonfinite)
 *
 * Sharded (dist.shard_optimizer, ZeRO-1): the sync is a reduce-scatter,
 * each rank updates its slice (train/step_shard.h) and an all-gather of the
 * parameters ends the step; the deterministic mode is train/step_det.h's.
 * Both keep the weights' bits: docs/performance.md, docs/determinism.md.
 *
 * The loss is scaled by 1/global_batch (the summed gradient is the global
 * batch's mean). The stepper owns the gradient sync (src/parallel/gradsync.h);
 * the batch comes from the session's loader, fetched by the caller so that
 * the time spent waiting for data is the loop's to measure.
 *
 *     struct ct_stepper st;
 *     ct_stepper_init(&st, &session);
 *     struct ct_step_result r;
 *     rc = ct_step(&st, &batch, step, stop_request, &r);  // collective
 *     ct_stepper_free(&st);
 */
#ifndef CT_TRAIN_STEP_H
#define CT_TRAIN_STEP_H

#include <stdint.h>

#include "data/loader.h"
#include "parallel/gradsync.h"
#include "train/session.h"
#include "train/step_result.h"

/* Where this rank's step time goes. */
struct ct_step_times {
    double data_wait_s;       /* waiting for the loader's next batch (filled by the caller) */
    double forward_backward_s;
    double exposed_comm_s;    /* waiting for the gradient sync after backward finished (and,
                               * sharded, for the parameters' all-gather) */
    double optim_s;           /* clipping and the optimizer update */
};

struct ct_step_det;
struct ct_step_shard;

struct ct_stepper {
    struct ct_session *s;
    struct ct_gradsync gs;
    int have_gs;
    double last_grad_norm;    /* of the last step, before clipping (0 when clipping is off) */
    struct ct_step_times t;   /* accumulated since the last ct_stepper_take_times */
    double clip_norm;         /* optim.clip_norm (ct_spec_clip_norm); 0: off */
    /* Deterministic mode (train.deterministic; step_det.h), else NULL. */
    struct ct_step_det *det;
    int64_t diverge_step;     /* test-only CT_DIVERGE="<step>:<rank>" (-1: off) */
    int diverge_rank;
    int64_t inject_step;      /* test-only CT_INJECT_NONFINITE="<step>:<rank>[:params]" (-1: off) */
    int inject_rank;
    int inject_params;        /* ... ":params": into a parameter, after the update */
    float *buf0;              /* (NB) default mode: the buffers at the start of the step */
    /* Sharded (session->sharded; step_shard.h), else NULL. */
    struct ct_step_shard *shard;
};

/* Test-only: CT_DIVERGE="<step>:<rank>" makes that rank nudge its first
 * parameter by one ulp after the update of that (0-based) step, so tests can
 * show the replica check (dist.check_every) naming the rank.
 * Test-only: CT_INJECT_NONFINITE="<step>:<rank>" makes that rank's own
 * gradient NaN (its first element, before the sum) in global step <step>,
 * counted from 1 as in steps.jsonl and ckpt-<step>, so tests can show
 * train.on_nonfinite at work. The step is named, not a sample: in
 * deterministic mode the same step is dropped whatever rank holds it.
 * "<step>:<rank>:params" instead makes that rank's first parameter NaN
 * after the update of that step, past the step's check, so tests can show
 * a checkpoint refusing non-finite weights. Both are parsed by
 * core/failpoint.h (the syntax CT_FAILPOINT shares); a malformed value fails
 * the init with CT_EINVAL, naming the variable. */
int ct_stepper_init(struct ct_stepper *st, struct ct_session *s);
void ct_stepper_free(struct ct_stepper *st);

/* Collective. Global step `step` (0-based, for the schedule) on this rank's
 * batch. `stop_local` is this rank's stop request (a signal number or 0); the
 * result's `stop` is the max over ranks, so all ranks stop at the same step.
 * A non-finite loss or gradient is not an error here: the step makes no
 * change and says so in r->nonfinite, the same on every rank; the caller
 * applies train.on_nonfinite. */
int ct_step(struct ct_stepper *st, const struct ct_batch *b, int64_t step, int64_t stop_local,
            struct ct_step_result *r);

/* The accumulated phase times, then zeroed. */
struct ct_step_times ct_stepper_take_times(struct ct_stepper *st);

#endif
