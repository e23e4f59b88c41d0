/* SGD with momentum, dampening, Nesterov and weight decay (see optim.h). */
#include "optim/optim.h"

#include <string.h>

int ct_sgd_init(struct ct_sgd *opt, const struct ct_sgd_params *hp, size_t numel)
{
    memset(opt, 0, sizeof *opt);
    opt->hp = *hp;
    if (hp->momentum != 0.0)
        return ct_flat_alloc_n(&opt->momentum_buf, numel);
    return 0;
}

void ct_sgd_free(struct ct_sgd *opt)
{
    ct_flat_free(&opt->momentum_buf);
    memset(opt, 0, sizeof *opt);
}

void ct_sgd_update(struct ct_sgd *opt, size_t off, float *restrict params,
                   const float *restrict grads, size_t n, float lr)
{
    const float wd = (float)opt->hp.weight_decay;
    const float mu = (float)opt->hp.momentum;
    const float damp = 1.0f - (float)opt->hp.dampening;
    float *restrict buf = opt->momentum_buf.data ? opt->momentum_buf.data + off : NULL;

    if (mu == 0.0f) {
        for (size_t i = 0; i < n; i++)
            params[i] -= lr * (grads[i] + wd * params[i]);
    } else if (opt->steps == 0) {
        /* torch: the buffer starts as a clone of the first (decayed) gradient,
         * without dampening. */
        for (size_t i = 0; i < n; i++) {
            float d = grads[i] + wd * params[i];
            buf[i] = d;
            params[i] -= lr * (opt->hp.nesterov ? d + mu * d : d);
        }
    } else if (opt->hp.nesterov) {
        for (size_t i = 0; i < n; i++) {
            float d = grads[i] + wd * params[i];
            buf[i] = mu * buf[i] + damp * d;
            params[i] -= lr * (d + mu * buf[i]);
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            float d = grads[i] + wd * params[i];
            buf[i] = mu * buf[i] + damp * d;
            params[i] -= lr * buf[i];
        }
    }
}

void ct_sgd_step(struct ct_sgd *opt, float *params, const float *grads, size_t n, float lr)
{
    ct_sgd_update(opt, 0, params, grads, n, lr);
    opt->steps++;
}
