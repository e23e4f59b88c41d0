/* One global training step (see step.h). */
#include "train/step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/failpoint.h"
#include "core/trace.h"
#include "nn/loss.h"
#include "optim/clip.h"
#include "train/step_det.h"
#include "train/step_shard.h"

/* The test-only hooks (step.h), "<step>:<rank>[:params]" (core/failpoint.h);
 * *step = -1 when unset; *params: the ":params" form was given. A malformed
 * value is refused (CT_EINVAL, naming the variable). */
static int parse_hook(const char *name, int64_t *step, int *rank, int *params)
{
    static const char *const params_only[] = {"params", NULL};
    const struct ct_failpoint_spec spec = {name, NULL, params != NULL ? params_only : NULL};
    struct ct_failpoint fp;
    int rc = ct_failpoint_get(&fp, &spec);
    *step = fp.armed ? fp.at : -1;
    *rank = fp.rank;
    if (params)
        *params = fp.armed && fp.action == 0;
    return rc;
}

/* Is this rank told to inject a non-finite gradient into 0-based step `step`? */
static int inject_now(const struct ct_stepper *st, int64_t step)
{
    return !st->inject_params && step + 1 == st->inject_step && st->s->comm->rank == st->inject_rank;
}

int ct_stepper_init(struct ct_stepper *st, struct ct_session *s)
{
    memset(st, 0, sizeof *st);
    st->s = s;
    int rc = parse_hook("CT_DIVERGE", &st->diverge_step, &st->diverge_rank, NULL);
    if (rc == 0)
        rc = parse_hook("CT_INJECT_NONFINITE", &st->inject_step, &st->inject_rank, &st->inject_params);
    if (rc < 0)
        return rc;
    st->clip_norm = ct_spec_clip_norm(s->cfg);
    struct ct_model *m = &s->model;
    if (s->sharded) {
        if (!(st->shard = malloc(sizeof *st->shard)))
            return ct_error_set(CT_ENOMEM, "dist.shard_optimizer: out of memory");
        if ((rc = ct_step_shard_init(st->shard, s, st->clip_norm)) < 0)
            return rc;
    }
    if (s->batches.deterministic) {
        if (!(st->det = malloc(sizeof *st->det)))
            return ct_error_set(CT_ENOMEM, "deterministic mode: out of memory");
        return ct_step_det_init(st->det, s);
    }
    st->buf0 = malloc((m->buffers.numel ? m->buffers.numel : 1) * sizeof(float));
    if (!st->buf0)
        return ct_error_set(CT_ENOMEM, "step: out of memory for %zu buffer values", m->buffers.numel);
    struct ct_grad_span *spans = calloc((size_t)(m->n > 0 ? m->n : 1), sizeof *spans);
    if (!spans)
        return ct_error_set(CT_ENOMEM, "gradient sync plan: out of memory");
    for (int i = 0; i < m->n; i++)
        ct_model_param_span(m, i, &spans[i].begin, &spans[i].end);
    struct ct_gradsync_params gp = ct_spec_gradsync(s->cfg);
    rc = ct_gradsync_init(&st->gs, s->comm, m->grads.data, m->grads.numel, spans, m->n, &gp);
    free(spans);
    if (rc < 0)
        return ct_error_wrap(rc, "%s: planning the gradient sync", s->cfg->path);
    st->have_gs = 1;
    if (s->sharded && (rc = ct_gradsync_shard(&st->gs, &s->shard)) < 0)
        return ct_error_wrap(rc, "%s: planning the gradient sync", s->cfg->path);
    return 0;
}

void ct_stepper_free(struct ct_stepper *st)
{
    if (st->have_gs)
        ct_gradsync_free(&st->gs);
    if (st->det)
        ct_step_det_free(st->det);
    free(st->det);
    if (st->shard)
        ct_step_shard_free(st->shard);
    free(st->shard);
    free(st->buf0);
    memset(st, 0, sizeof *st);
}

struct ct_step_times ct_stepper_take_times(struct ct_stepper *st)
{
    struct ct_step_times t = st->t;
    memset(&st->t, 0, sizeof st->t);
    return t;
}

/* Forward and backward over the batch's micro-batches; backward accumulates
 * into the gradients, and with `sync` the last micro-batch's backward drives
 * the gradient sync through the hook (without, the gradients stay this
 * rank's own: the non-finite path recomputes them so).
 *
 * A non-finite loss of this rank, and the test-only injection, make this
 * rank's first gradient element NaN after backward: that element is in the
 * last bucket, which gradsync reduces only in finish (gradsync.h), so the
 * NaN reaches the sum and the one check of the summed gradient (check_sum)
 * covers losses too, with no collective of its own. */
static int forward_backward(struct ct_stepper *st, const struct ct_batch *b, int64_t step,
                            int sync, int64_t stop_local, double *loss_sum, int64_t *correct)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    /* The loss is the mean over the global batch's B*K targets (K = 1: a
     * class label; K = T: a token at every position, as nanoGPT/llm.c). */
    const int K = s->targets;
    const float scale = 1.0f / ((float)s->batches.global_batch * (float)K);
    const int mb_rows = s->batches.micro_batch;
    const size_t D = m->in_numel;
    *loss_sum = 0.0;
    *correct = 0;
    ct_model_zero_grad(m);
    for (int off = 0; off < b->n; off += mb_rows) {
        const int mb = b->n - off < mb_rows ? b->n - off : mb_rows;
        const int last = off + mb >= b->n;
        memcpy(ct_model_input(m), b->x + (size_t)off * D, (size_t)mb * D * sizeof(float));
        m->fwd.epoch = b->epoch;
        m->fwd.sample_index = b->idx + off;
        const int tr = ct_trace_on();
        const double f0 = tr ? ct_now_s() : 0.0;
        const float *logits = ct_model_forward(m, mb);
        int64_t hits = 0;
        *loss_sum += ct_xent_forward_backward(ct_model_output_grad(m), logits,
                                              b->y + (size_t)off * K, mb * K, s->n_classes, scale,
                                              &hits);
        *correct += hits;
        const double f1 = tr ? ct_now_s() : 0.0;
        if (tr)
            ct_trace_span(CT_TRACE_MAIN, "phase", "forward", f0, f1);
        if (last && sync) {
            int rc = ct_gradsync_begin(&st->gs, stop_local);
            if (rc < 0)
                return rc;
            ct_model_backward(m, mb, ct_gradsync_hook, &st->gs);
        } else {
            ct_model_backward(m, mb, NULL, NULL);
        }
        if (tr)
            ct_trace_span(CT_TRACE_MAIN, "phase", "backward", f1, ct_now_s());
    }
    if (m->grads.numel > 0 && (!isfinite(*loss_sum) || inject_now(st, step)))
        m->grads.data[0] = NAN;
    return 0;
}

/* Default mode, after the sum was found non-finite (on every rank alike):
 * which rank's own loss or gradient was? The sum overwrote them, so every
 * rank recomputes its own (the same bits: the parameters are those of the
 * step, and dropout is keyed by sample) without a sync, and a MIN-allreduce
 * finds the lowest. This costs a forward/backward, on this path only; the
 * steps that are finite pay one scan of the summed gradient and nothing
 * else. The buffers go back to the step's start afterwards. */
static int find_nonfinite_rank(struct ct_stepper *st, const struct ct_batch *b, int64_t step,
                               int *rank)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    double loss = 0.0;
    int64_t correct = 0;
    int rc = forward_backward(st, b, step, 0, 0, &loss, &correct);
    if (rc == 0 && m->fwd.status < 0)
        rc = ct_error_wrap(m->fwd.status, "step %lld: a cross-rank sum inside the model failed",
                           (long long)step);
    if (rc < 0)
        return rc;
    int bad = !isfinite(loss) || ct_first_nonfinite(m->grads.data, m->grads.numel) < m->grads.numel;
    int64_t v = bad ? s->comm->rank : s->comm->world;
    if ((rc = ct_comm_allreduce_i64(s->comm, &v, 1, CT_REDUCE_MIN)) < 0)
        return ct_error_wrap(rc, "step %lld: finding the rank of a non-finite gradient",
                             (long long)step);
    *rank = v < s->comm->world ? (int)v : -1;
    memcpy(m->buffers.data, st->buf0, m->buffers.numel * sizeof(float));
    return 0;
}

/* The summed gradient, the same buffer on every rank, checked once: through
 * the clipping norm when clipping is on (the norm is computed anyway, and a
 * sum of squares in double of floats cannot overflow, so it is finite
 * exactly when every gradient is), else one scan (ct_first_nonfinite). It
 * catches a rank's non-finite gradient or loss (forward_backward), and a
 * sum of finite gradients that overflowed. Clipping changes the gradients
 * before the update is decided: harmless, since a non-finite step drops
 * them. */
static int check_sum(struct ct_stepper *st, struct ct_step_result *r)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    if (st->clip_norm > 0) {
        r->grad_norm = ct_clip_grad_norm(m->grads.data, m->grads.numel, st->clip_norm);
        return !isfinite(r->grad_norm);
    }
    return ct_first_nonfinite(m->grads.data, m->grads.numel) < m->grads.numel;
}

/* The update, after the sync and check_sum (which clipped): every rank sees
 * the same summed gradient, so every rank computes the same norm and scale.
 * Sharded: each rank updates its slice with its slice of the state, and
 * the parameters are all-gathered (step_shard.h; *gather_s: the seconds
 * that took). */
static int update(struct ct_stepper *st, int64_t step, struct ct_step_result *r, double *gather_s)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    const double lr = ct_schedule_lr(&s->sched, step);
    st->last_grad_norm = r->grad_norm;
    if (!st->shard) {
        ct_optimizer_step(&s->opt, m->params.data, m->grads.data, m->params.numel, lr);
        return 0;
    }
    int rc = ct_step_shard_update(st->shard, lr, gather_s);
    if (rc < 0)
        return ct_error_wrap(rc, "step %lld: all-gathering the updated parameters",
                             (long long)step);
    return 0;
}

/* Test-only (step.h), after the update of 0-based step `step` (sharded:
 * after the parameters' all-gather, so only this rank's copy changes):
 * CT_DIVERGE nudges this rank's first parameter by one ulp;
 * CT_INJECT_NONFINITE's ":params" form makes it NaN. */
static void test_hooks_after_update(const struct ct_stepper *st, int64_t step)
{
    struct ct_model *m = &st->s->model;
    const int rank = st->s->comm->rank;
    if (m->params.numel == 0)
        return;
    if (step == st->diverge_step && rank == st->diverge_rank)
        m->params.data[0] = nextafterf(m->params.data[0], INFINITY);
    if (st->inject_params && step + 1 == st->inject_step && rank == st->inject_rank)
        m->params.data[0] = NAN;
}

/* Default mode: forward and backward, the last micro-batch's backward
 * starting the gradient sync, then its finish (+ the stop request); *t1:
 * when the backward ended. */
static int default_step(struct ct_stepper *st, const struct ct_batch *b, int64_t step,
                        int64_t stop_local, struct ct_step_result *r, double *t1)
{
    struct ct_model *m = &st->s->model;
    memcpy(st->buf0, m->buffers.data, m->buffers.numel * sizeof(float));
    int rc = forward_backward(st, b, step, 1, stop_local, &r->loss_sum, &r->correct);
    *t1 = ct_now_s();
    /* finish is collective with the buckets already started: it runs even
     * after a failure inside the model, and the failure is reported after. */
    int sync = rc == 0 ? ct_gradsync_finish(&st->gs, &r->stop) : rc;
    if (m->fwd.status < 0)
        return ct_error_wrap(m->fwd.status, "step %lld: a cross-rank sum inside the model failed",
                             (long long)step);
    if (sync < 0)
        return ct_error_wrap(sync, "step %lld: gradient sync", (long long)step);
    return 0;
}

/* The summed gradient checked, and clipped, once (check_sum, sharded:
 * ct_step_shard_check; *norm_s: the seconds the norm's all-gather took). A
 * non-finite sum drops the step: r->nonfinite, the buffers back to the
 * step's start and, in default mode, the rank to blame found. */
static int check_step(struct ct_stepper *st, const struct ct_batch *b, int64_t step,
                      struct ct_step_result *r, double *norm_s)
{
    int bad = 0, rc;
    if (r->nonfinite) /* deterministic mode saw it in the rows already */
        return 0;
    if (st->shard) {
        if ((rc = ct_step_shard_check(st->shard, &r->grad_norm, &bad, norm_s)) < 0)
            return ct_error_wrap(rc, "step %lld: the gradient norm's block sums", (long long)step);
    } else {
        bad = check_sum(st, r);
    }
    if (!bad)
        return 0;
    r->nonfinite = 1;
    r->nonfinite_rank = -1;
    if (st->det) { /* every row was finite, their sum overflowed */
        ct_step_det_restore(st->det);
        return 0;
    }
    return find_nonfinite_rank(st, b, step, &r->nonfinite_rank);
}

int ct_step(struct ct_stepper *st, const struct ct_batch *b, int64_t step, int64_t stop_local,
            struct ct_step_result *r)
{
    memset(r, 0, sizeof *r);
    const double t0 = ct_now_s();
    double t1 = t0, norm_s = 0.0, gather_s = 0.0;
    /* forward, loss, backward; the gradient sync (+ the stop request) */
    int rc = st->det ? ct_step_det_run(st->det, b, step, stop_local, inject_now(st, step), r, &t1)
                     : default_step(st, b, step, stop_local, r, &t1);
    const double t2 = ct_now_s();
    if (rc < 0)
        return rc;
    /* clip the global gradient norm, which says whether the sum is finite */
    if ((rc = check_step(st, b, step, r, &norm_s)) < 0)
        return rc;
    /* the optimizer update (none when it is not) */
    if (!r->nonfinite) {
        if ((rc = update(st, step, r, &gather_s)) < 0)
            return rc;
        test_hooks_after_update(st, step);
        if (st->have_gs) /* error feedback: this step's residuals are the next one's */
            ct_gradsync_commit(&st->gs);
    }
    /* Sharded: the norm's collective and what the updates did not hide of
     * the parameters' all-gather count as exposed communication. */
    const double t3 = ct_now_s();
    if (ct_trace_on()) {
        ct_trace_span(CT_TRACE_MAIN, "phase", "sync_wait", t1, t2);
        ct_trace_span(CT_TRACE_MAIN, "phase", "optimizer", t2, t3);
    }
    st->t.forward_backward_s += t1 - t0;
    st->t.exposed_comm_s += t2 - t1 + norm_s + gather_s;
    st->t.optim_s += t3 - t2 - norm_s - gather_s;
    return 0;
}
