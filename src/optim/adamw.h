/* AdamW over flat buffers, exactly as torch.optim.AdamW (torch 1.13,
 * foreach=False, amsgrad=False, maximize=False).
 *
 * Per element, at step t = 1, 2, ... (the step count is kept here):
 *
 *     p  = p * (1 - lr * weight_decay)          decoupled weight decay first
 *     m  = beta1 * m + (1 - beta1) * g
 *     v  = beta2 * v + (1 - beta2) * g * g
 *     p  = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 *
 * Like torch, the per-step scalars (1 - lr*wd, the bias corrections, lr / bc1,
 * sqrt(bc2)) are computed in double and rounded once to float; the element
 * arithmetic is float32 in torch's order. m and v are two flat buffers with
 * the parameters' layout (the padding between views stays zero: a zero
 * gradient on a zero parameter never moves), so a checkpoint saves them as
 * named views exactly like the parameters.
 *
 *     struct ct_adamw opt;
 *     struct ct_adamw_params hp = ct_adamw_default_params();
 *     hp.weight_decay = 0.05;
 *     if (ct_adamw_init(&opt, &hp, params.numel) < 0) ...
 *     ct_adamw_step(&opt, params.data, grads.data, params.numel, lr);
 *     ct_adamw_free(&opt);
 */
#ifndef CT_OPTIM_ADAMW_H
#define CT_OPTIM_ADAMW_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"

struct ct_adamw_params {
    double beta1, beta2, eps, weight_decay;
};

struct ct_adamw {
    struct ct_adamw_params hp;
    struct ct_flat m; /* first moment (exp_avg), elementwise with the parameters it updates */
    struct ct_flat v; /* second moment (exp_avg_sq), likewise */
    int64_t steps;    /* steps taken (torch's state["step"]) */
};

/* torch's defaults: betas (0.9, 0.999), eps 1e-8, weight_decay 0.01. */
struct ct_adamw_params ct_adamw_default_params(void);

/* Zeroed m and v of `numel` floats (the parameters' flat buffer, or the
 * slice of it this rank updates when the optimizer is sharded), steps = 0. Returns 0,
 * CT_EINVAL for a hyperparameter out of torch's accepted range (with a
 * message), or CT_ENOMEM. */
int ct_adamw_init(struct ct_adamw *opt, const struct ct_adamw_params *hp, size_t numel);
void ct_adamw_free(struct ct_adamw *opt);
/* One step over n floats of the flat buffers (n <= the layout's numel). lr is
 * a double, as ct_schedule_lr() returns it and torch keeps it. */
void ct_adamw_step(struct ct_adamw *opt, float *params, const float *grads, size_t n, double lr);
/* A step in pieces: elements [off, off + n) of the state with the n
 * parameters and gradients given, as step t = steps + 1, without counting
 * it; ct_adamw_step is this over [0, n) and then steps++. Any partition of
 * the state into pieces, in any order, gives ct_adamw_step's bits. */
void ct_adamw_update(struct ct_adamw *opt, size_t off, float *params, const float *grads,
                     size_t n, double lr);

#endif
