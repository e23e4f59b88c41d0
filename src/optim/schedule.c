/* Learning-rate schedules as pure functions of the global step (see optim.h). */
#include "optim/optim.h"

#include <math.h>

const char *const ct_sched_kind_names[CT_SCHED_COUNT + 1] = {
    [CT_SCHED_CONSTANT] = "constant",
    [CT_SCHED_STEP] = "step",
    [CT_SCHED_COSINE] = "cosine",
    [CT_SCHED_COUNT] = NULL,
};

const char *ct_sched_kind_name(enum ct_sched_kind kind)
{
    return (unsigned)kind < CT_SCHED_COUNT ? ct_sched_kind_names[kind] : "unknown";
}

double ct_schedule_lr(const struct ct_schedule *s, int64_t step)
{
    if (s->warmup_steps > 0 && step < s->warmup_steps)
        return s->base_lr * (double)(step + 1) / (double)s->warmup_steps;
    int64_t t = step - s->warmup_steps; /* steps since the warmup ended */
    switch (s->kind) {
    case CT_SCHED_STEP:
        return s->base_lr * pow(s->gamma, (double)(t / (s->step_size > 0 ? s->step_size : 1)));
    case CT_SCHED_COSINE: {
        int64_t T = s->total_steps - s->warmup_steps;
        if (T <= 0)
            return s->base_lr;
        if (t > T)
            t = T;
        return s->min_lr + (s->base_lr - s->min_lr) * (1.0 + cos(M_PI * (double)t / (double)T)) / 2.0;
    }
    case CT_SCHED_CONSTANT:
    default:
        return s->base_lr;
    }
}
