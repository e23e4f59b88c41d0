/* The optimizer interface over SGD and AdamW (see optimizer.h). */
#include "optim/optimizer.h"

#include <string.h>

int ct_optimizer_init(struct ct_optimizer *opt, const struct ct_optimizer_params *hp,
                      size_t numel)
{
    memset(opt, 0, sizeof *opt);
    opt->kind = hp->kind;
    if (hp->kind == CT_OPTIM_ADAMW)
        return ct_adamw_init(&opt->adamw, &hp->adamw, numel);
    return ct_sgd_init(&opt->sgd, &hp->sgd, numel);
}

void ct_optimizer_free(struct ct_optimizer *opt)
{
    if (opt->kind == CT_OPTIM_ADAMW)
        ct_adamw_free(&opt->adamw);
    else
        ct_sgd_free(&opt->sgd);
    memset(opt, 0, sizeof *opt);
}

void ct_optimizer_step(struct ct_optimizer *opt, float *params, const float *grads, size_t n,
                       double lr)
{
    ct_optimizer_update(opt, 0, params, grads, n, lr);
    ct_optimizer_count_step(opt);
}

void ct_optimizer_update(struct ct_optimizer *opt, size_t off, float *params, const float *grads,
                         size_t n, double lr)
{
    if (opt->kind == CT_OPTIM_ADAMW)
        ct_adamw_update(&opt->adamw, off, params, grads, n, lr);
    else
        ct_sgd_update(&opt->sgd, off, params, grads, n, (float)lr);
}

void ct_optimizer_count_step(struct ct_optimizer *opt) { (*ct_optimizer_steps(opt))++; }

int ct_optimizer_state(struct ct_optimizer *opt, struct ct_flat **bufs, const char **names)
{
    if (opt->kind == CT_OPTIM_ADAMW) {
        bufs[0] = &opt->adamw.m;
        names[0] = "exp_avg";
        bufs[1] = &opt->adamw.v;
        names[1] = "exp_avg_sq";
        return 2;
    }
    if (opt->sgd.momentum_buf.data) {
        bufs[0] = &opt->sgd.momentum_buf;
        names[0] = "momentum_buffer";
        return 1;
    }
    return 0;
}

int64_t *ct_optimizer_steps(struct ct_optimizer *opt)
{
    return opt->kind == CT_OPTIM_ADAMW ? &opt->adamw.steps : &opt->sgd.steps;
}

const char *const ct_optim_kind_names[CT_OPTIM_COUNT + 1] = {
    [CT_OPTIM_SGD] = "sgd",
    [CT_OPTIM_ADAMW] = "adamw",
    [CT_OPTIM_COUNT] = NULL,
};

const char *ct_optim_kind_name(enum ct_optim_kind kind)
{
    return (unsigned)kind < CT_OPTIM_COUNT ? ct_optim_kind_names[kind] : "unknown";
}
