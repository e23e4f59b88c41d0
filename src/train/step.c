/* One global training step (see step.h). */
#include "train/step.h"

#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "nn/loss.h"
#include "optim/clip.h"

int ct_stepper_init(struct ct_stepper *st, struct ct_session *s)
{
    memset(st, 0, sizeof *st);
    st->s = s;
    struct ct_model *m = &s->model;
    struct ct_grad_span *spans = calloc((size_t)(m->n > 0 ? m->n : 1), sizeof *spans);
    if (!spans)
        return ct_error_set(CT_ENOMEM, "gradient sync plan: out of memory");
    for (int i = 0; i < m->n; i++)
        ct_model_param_span(m, i, &spans[i].begin, &spans[i].end);
    struct ct_gradsync_params gp = ct_spec_gradsync(s->cfg);
    int rc = ct_gradsync_init(&st->gs, s->comm, m->grads.data, m->grads.numel, spans, m->n, &gp);
    free(spans);
    if (rc < 0)
        return ct_error_wrap(rc, "%s: planning the gradient sync", s->cfg->path);
    st->have_gs = 1;
    return 0;
}

void ct_stepper_free(struct ct_stepper *st)
{
    if (st->have_gs)
        ct_gradsync_free(&st->gs);
    memset(st, 0, sizeof *st);
}

struct ct_step_times ct_stepper_take_times(struct ct_stepper *st)
{
    struct ct_step_times t = st->t;
    memset(&st->t, 0, sizeof st->t);
    return t;
}

/* Forward and backward over the batch's micro-batches; backward accumulates
 * into the gradients, and the last micro-batch's backward drives the
 * gradient sync through the hook. */
static int forward_backward(struct ct_stepper *st, const struct ct_batch *b, int64_t stop_local,
                            double *loss_sum)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    const float scale = 1.0f / (float)s->batches.global_batch;
    const int mb_rows = s->batches.micro_batch;
    const size_t D = m->in_numel;
    *loss_sum = 0.0;
    ct_model_zero_grad(m);
    for (int off = 0; off < b->n; off += mb_rows) {
        const int mb = b->n - off < mb_rows ? b->n - off : mb_rows;
        const int last = off + mb >= b->n;
        memcpy(ct_model_input(m), b->x + (size_t)off * D, (size_t)mb * D * sizeof(float));
        m->step.epoch = b->epoch;
        m->step.sample_index = b->idx + off;
        const float *logits = ct_model_forward(m, mb);
        *loss_sum += ct_xent_forward_backward(ct_model_output_grad(m), logits, b->y + off, mb,
                                              s->n_classes, scale, NULL);
        if (last) {
            int rc = ct_gradsync_begin(&st->gs, stop_local);
            if (rc < 0)
                return rc;
            ct_model_backward(m, mb, ct_gradsync_hook, &st->gs);
        } else {
            ct_model_backward(m, mb, NULL, NULL);
        }
    }
    return 0;
}

int ct_step(struct ct_stepper *st, const struct ct_batch *b, int64_t step, int64_t stop_local,
            struct ct_step_result *r)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    memset(r, 0, sizeof *r);
    double t0 = ct_now_s();
    int rc = forward_backward(st, b, stop_local, &r->loss_sum);
    double t1 = ct_now_s();
    /* finish is collective with the buckets already started: it runs even
     * after a failure inside the model, and the failure is reported after. */
    int sync = rc == 0 ? ct_gradsync_finish(&st->gs, &r->stop) : rc;
    double t2 = ct_now_s();
    if (m->step.status < 0)
        return ct_error_wrap(m->step.status, "step %lld: a cross-rank sum inside the model failed",
                             (long long)step);
    if (sync < 0)
        return ct_error_wrap(sync, "step %lld: gradient sync", (long long)step);
    /* Clipping after the sync: every rank sees the same summed gradient, so
     * every rank computes the same norm and scale. */
    if (s->cfg->optim.clip_norm > 0)
        r->grad_norm = ct_clip_grad_norm(m->grads.data, m->grads.numel, s->cfg->optim.clip_norm);
    st->last_grad_norm = r->grad_norm;
    ct_optimizer_step(&s->opt, m->params.data, m->grads.data, m->params.numel,
                      ct_schedule_lr(&s->sched, step));
    double t3 = ct_now_s();
    st->t.forward_backward_s += t1 - t0;
    st->t.exposed_comm_s += t2 - t1;
    st->t.optim_s += t3 - t2;
    return 0;
}
