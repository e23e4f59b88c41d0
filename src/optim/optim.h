/* Optimizers and learning-rate schedules over flat buffers.
 *
 * SGD follows torch.optim.SGD exactly: weight decay is added to the gradient
 * (L2, coupled), the momentum buffer starts as a copy of the first gradient,
 * dampening applies from the second step on, Nesterov uses g + momentum*buf.
 * Its state is one flat buffer with the parameters' layout plus a step count.
 *
 * A schedule is a pure function of the global step: lr(step) for the step
 * about to be taken (step 0 is the first), so resuming at step k needs no
 * schedule state beyond k itself.
 */
#ifndef CT_OPTIM_OPTIM_H
#define CT_OPTIM_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

struct ct_sgd_params {
    double momentum, dampening, weight_decay;
    int nesterov;
};

struct ct_sgd {
    struct ct_sgd_params hp;
    struct ct_flat momentum_buf; /* elementwise with the parameters; unused if momentum == 0 */
    int64_t steps;               /* steps taken */
};

/* State for `numel` parameters (the flat buffer or this rank's slice of it). */
int ct_sgd_init(struct ct_sgd *opt, const struct ct_sgd_params *hp, size_t numel);
void ct_sgd_free(struct ct_sgd *opt);
/* One step over the whole flat buffer: params -= lr * update(grads). */
void ct_sgd_step(struct ct_sgd *opt, float *params, const float *grads, size_t n, float lr);
/* A step in pieces, as ct_adamw_update: elements [off, off + n) of the
 * momentum buffer, the step not counted (ct_sgd_step = this over [0, n),
 * then steps++). */
void ct_sgd_update(struct ct_sgd *opt, size_t off, float *params, const float *grads, size_t n,
                   float lr);

enum ct_sched_kind {
    CT_SCHED_CONSTANT,
    CT_SCHED_STEP,
    CT_SCHED_COSINE,
    CT_SCHED_COUNT
};

struct ct_schedule {
    enum ct_sched_kind kind;
    double base_lr;
    int64_t total_steps;  /* the whole run's steps (all configured epochs) */
    int64_t warmup_steps; /* linear warmup: lr * (step+1)/warmup for step < warmup */
    int64_t step_size;    /* step: multiply by gamma every step_size steps */
    double gamma;
    double min_lr;        /* cosine: eta_min */
};

/* "constant", "step", "cosine", NULL: indexed by enum ct_sched_kind (the
 * config's schedule.name parses through it). */
extern const char *const ct_sched_kind_names[CT_SCHED_COUNT + 1];
/* The name of a kind; "unknown" when out of range. */
const char *ct_sched_kind_name(enum ct_sched_kind kind);

/* The learning rate for global step `step` (0-based). Cosine follows
 * torch's CosineAnnealingLR(T_max = total_steps - warmup) in closed form,
 * starting after the warmup. */
double ct_schedule_lr(const struct ct_schedule *s, int64_t step);

#endif
