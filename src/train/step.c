/* One global training step (see step.h). */
#include "train/step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "nn/loss.h"
#include "nn/norm.h"
#include "optim/clip.h"
#include "parallel/reprosum.h"

/* Deterministic mode's per-micro-batch losses go on this fixed grid
 * (2^-30): every partial sum of them is then exact in a double up to 2^23,
 * so the loss reported does not depend on how micro-batches fall on ranks. */
#define DET_LOSS_SHIFT (-30)

/* The rows of the deterministic mode: this rank's micro-batches of the cut. */
static int det_init(struct ct_stepper *st, struct ct_session *s)
{
    struct ct_mbcut cut;
    int rc = ct_mbcut_plan(s->batches.global_batch, s->batches.micro_batch, s->comm->world,
                           s->comm->rank, &cut);
    if (rc < 0)
        return ct_error_wrap(rc, "%s", s->cfg->path);
    const size_t P = s->model.grads.numel, NB = s->model.buffers.numel;
    const size_t ne = ct_repro_n_blocks(P, CT_REPRO_BLOCK) + ct_repro_n_blocks(NB, CT_REPRO_BLOCK);
    st->det = 1;
    st->det_first = cut.first;
    st->det_count = (int)cut.count;
    st->det_total = (int)cut.n_mb;
    st->det_bits = ct_repro_acc_bits(cut.n_mb);
    /* The last micro-batch's gradient stays in the model's buffer (det_row). */
    st->det_grads = malloc((size_t)(cut.count - 1 > 0 ? cut.count - 1 : 1) * (P ? P : 1) *
                           sizeof(float));
    st->det_bufs = malloc((size_t)cut.count * (NB ? NB : 1) * sizeof(float));
    st->det_buf0 = malloc((NB ? NB : 1) * sizeof(float));
    st->det_work = malloc((ne + 2) * sizeof(int64_t));
    st->det_acc = malloc((P + NB ? P + NB : 1) * (size_t)(st->det_bits / 8));
    if (!st->det_grads || !st->det_bufs || !st->det_buf0 || !st->det_work || !st->det_acc)
        return ct_error_set(CT_ENOMEM, "deterministic mode: %d micro-batch rows of %zu floats",
                            st->det_count, P + NB);
    return 0;
}

static void parse_diverge(struct ct_stepper *st)
{
    const char *v = getenv("CT_DIVERGE");
    long long step;
    int rank;
    st->diverge_step = -1;
    if (v && sscanf(v, "%lld:%d", &step, &rank) == 2) {
        st->diverge_step = step;
        st->diverge_rank = rank;
    }
}

int ct_stepper_init(struct ct_stepper *st, struct ct_session *s)
{
    memset(st, 0, sizeof *st);
    st->s = s;
    parse_diverge(st);
    struct ct_model *m = &s->model;
    if (s->batches.deterministic)
        return det_init(st, s);
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
    free(st->det_grads);
    free(st->det_bufs);
    free(st->det_buf0);
    free(st->det_work);
    free(st->det_acc);
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

/* Micro-batch j's gradient row: the last one is left where backward wrote
 * it, in the model's gradient buffer (which the sync overwrites only after
 * every row is accumulated), saving a copy of the whole gradient per step. */
static const float *det_row(const struct ct_stepper *st, int j)
{
    if (j == st->det_count - 1)
        return st->s->model.grads.data;
    return st->det_grads + (size_t)j * st->s->model.grads.numel;
}

/* Deterministic mode: each of this rank's micro-batches from zeroed
 * gradients and zeroed buffers, into its own rows, so what a row holds is a
 * function of that micro-batch alone. Buffers from zero hold momentum times
 * the micro-batch's statistics (BatchNorm's running-stat rule, the only
 * buffers there are). */
static void det_forward_backward(struct ct_stepper *st, const struct ct_batch *b,
                                 double *loss_sum)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    const float scale = 1.0f / (float)s->batches.global_batch;
    const int mb = s->batches.micro_batch;
    const size_t D = m->in_numel, P = m->grads.numel, NB = m->buffers.numel;
    int64_t q = 0;
    memcpy(st->det_buf0, m->buffers.data, NB * sizeof(float));
    for (int j = 0; j < st->det_count; j++) {
        const int off = j * mb;
        ct_model_zero_grad(m);
        memset(m->buffers.data, 0, NB * sizeof(float));
        memcpy(ct_model_input(m), b->x + (size_t)off * D, (size_t)mb * D * sizeof(float));
        m->step.epoch = b->epoch;
        m->step.sample_index = b->idx + off;
        const float *logits = ct_model_forward(m, mb);
        q += ct_repro_round(ct_xent_forward_backward(ct_model_output_grad(m), logits, b->y + off,
                                                     mb, s->n_classes, scale, NULL),
                            DET_LOSS_SHIFT);
        ct_model_backward(m, mb, NULL, NULL);
        if (j < st->det_count - 1)
            memcpy(st->det_grads + (size_t)j * P, m->grads.data, P * sizeof(float));
        memcpy(st->det_bufs + (size_t)j * NB, m->buffers.data, NB * sizeof(float));
    }
    *loss_sum = ct_repro_unround(q, DET_LOSS_SHIFT);
}

/* The running statistics after K sequential updates r <- (1-m) r + m x_k
 * are (1-m)^K r0 + sum_k (1-m)^(K-1-k) m x_k: micro-batch k's row is scaled
 * by its weight (a function of k alone), then summed reproducibly. */
static float det_weight(int64_t k, int total)
{
    double w = 1.0;
    for (int64_t i = k + 1; i < total; i++)
        w *= 1.0 - (double)CT_BATCHNORM_MOMENTUM;
    return (float)w;
}

/* This rank's rows rounded onto the grid of shifts e and summed, into the
 * int32 or int64 sums (st->det_bits, from the global micro-batch count, so
 * the same for every N): the first row is stored, the others added, so the
 * usual case of one micro-batch per rank is one pass with no memset. */
static void det_accumulate(struct ct_stepper *st, const int64_t *e, size_t ng)
{
    const size_t P = st->s->model.grads.numel, NB = st->s->model.buffers.numel;
    const size_t B = CT_REPRO_BLOCK;
    if (st->det_bits == 32) {
        int32_t *acc = st->det_acc;
        for (int j = 0; j < st->det_count; j++) {
            const float *bufs = st->det_bufs + (size_t)j * NB;
            if (j == 0) {
                ct_repro_store_i32(acc, det_row(st, j), P, e, B);
                ct_repro_store_i32(acc + P, bufs, NB, e + ng, B);
            } else {
                ct_repro_accumulate_i32(acc, det_row(st, j), P, e, B);
                ct_repro_accumulate_i32(acc + P, bufs, NB, e + ng, B);
            }
        }
        return;
    }
    int64_t *acc = st->det_acc;
    memset(acc, 0, (P + NB) * sizeof *acc);
    for (int j = 0; j < st->det_count; j++) {
        ct_repro_accumulate(acc, det_row(st, j), P, e, B);
        ct_repro_accumulate(acc + P, st->det_bufs + (size_t)j * NB, NB, e + ng, B);
    }
}

/* One collective pair for the whole step: a MAX of the block exponents of
 * every row, plus the stop request and a non-finite flag (world - rank of
 * the lowest rank that saw one) as side slots; then one SUM of the integer
 * sums of gradients and buffer terms (int32 or int64: det_accumulate).
 * Every rank sees the same reduced exponents, so a non-finite value fails
 * every rank at the same step. */
static int det_sync(struct ct_stepper *st, int64_t step, int64_t stop_local, int64_t *stop)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    const size_t P = m->grads.numel, NB = m->buffers.numel, B = CT_REPRO_BLOCK;
    const size_t ng = ct_repro_n_blocks(P, B), nbb = ct_repro_n_blocks(NB, B), ne = ng + nbb;
    int64_t *e = st->det_work;
    ct_repro_exp_init(e, ne);
    for (int j = 0; j < st->det_count; j++) {
        float *row = st->det_bufs + (size_t)j * NB;
        const float w = det_weight(st->det_first + j, st->det_total);
        for (size_t i = 0; i < NB; i++)
            row[i] *= w;
        ct_repro_block_exponents(e, det_row(st, j), P, B);
        ct_repro_block_exponents(e + ng, row, NB, B);
    }
    int bad = 0;
    for (size_t i = 0; i < ne; i++)
        bad |= e[i] >= CT_REPRO_EXP_NONFINITE;
    e[ne] = stop_local;
    e[ne + 1] = bad ? s->comm->world - s->comm->rank : 0;
    int rc = ct_comm_allreduce_i64(s->comm, e, ne + 2, CT_REDUCE_MAX);
    if (rc < 0)
        return ct_error_wrap(rc, "step %lld: deterministic sync (exponents)", (long long)step);
    *stop = e[ne];
    if (e[ne + 1] > 0)
        return ct_error_set(CT_ERANGE,
                            "step %lld: a non-finite gradient or BatchNorm statistic, first seen "
                            "on rank %lld; no update made",
                            (long long)step, (long long)(s->comm->world - e[ne + 1]));
    if ((rc = ct_repro_shifts_bits(e, ne, st->det_total, st->det_bits)) < 0)
        return rc;
    det_accumulate(st, e, ng);
    if (st->det_bits == 32) {
        int32_t *acc = st->det_acc;
        if ((rc = ct_comm_allreduce_i32(s->comm, acc, P + NB, CT_REDUCE_SUM)) < 0)
            return ct_error_wrap(rc, "step %lld: deterministic sync (int32 sums)",
                                 (long long)step);
        ct_repro_finish_i32(m->grads.data, acc, P, e, B);
        ct_repro_finish_i32(st->det_bufs, acc + P, NB, e + ng, B);
    } else {
        int64_t *acc = st->det_acc;
        if ((rc = ct_comm_allreduce_i64(s->comm, acc, P + NB, CT_REDUCE_SUM)) < 0)
            return ct_error_wrap(rc, "step %lld: deterministic sync (int64 sums)",
                                 (long long)step);
        ct_repro_finish(m->grads.data, acc, P, e, B);
        ct_repro_finish(st->det_bufs, acc + P, NB, e + ng, B);
    }
    const float decay = det_weight(-1, st->det_total);
    for (size_t i = 0; i < NB; i++)
        m->buffers.data[i] = decay * st->det_buf0[i] + st->det_bufs[i];
    return 0;
}

/* The forward/backward and sync of the deterministic mode. Only MPI
 * failures and non-finite values can fail, both the same on every rank. */
static int det_step(struct ct_stepper *st, const struct ct_batch *b, int64_t step,
                    int64_t stop_local, struct ct_step_result *r, double *t1)
{
    det_forward_backward(st, b, &r->loss_sum);
    *t1 = ct_now_s();
    int rc = det_sync(st, step, stop_local, &r->stop);
    if (st->s->model.step.status < 0)
        return ct_error_wrap(st->s->model.step.status, "step %lld: inside the model",
                             (long long)step);
    return rc;
}

/* Clipping and the update, after the sync: every rank sees the same summed
 * gradient, so every rank computes the same norm and scale. */
static void update(struct ct_stepper *st, int64_t step, struct ct_step_result *r)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    if (s->cfg->optim.clip_norm > 0)
        r->grad_norm = ct_clip_grad_norm(m->grads.data, m->grads.numel, s->cfg->optim.clip_norm);
    st->last_grad_norm = r->grad_norm;
    ct_optimizer_step(&s->opt, m->params.data, m->grads.data, m->params.numel,
                      ct_schedule_lr(&s->sched, step));
    if (step == st->diverge_step && s->comm->rank == st->diverge_rank && m->params.numel > 0)
        m->params.data[0] = nextafterf(m->params.data[0], INFINITY);
}

int ct_step(struct ct_stepper *st, const struct ct_batch *b, int64_t step, int64_t stop_local,
            struct ct_step_result *r)
{
    struct ct_model *m = &st->s->model;
    memset(r, 0, sizeof *r);
    double t0 = ct_now_s(), t1;
    int rc;
    if (st->det) {
        rc = det_step(st, b, step, stop_local, r, &t1);
    } else {
        rc = forward_backward(st, b, stop_local, &r->loss_sum);
        t1 = ct_now_s();
        /* finish is collective with the buckets already started: it runs
         * even after a failure inside the model, and the failure is
         * reported after. */
        int sync = rc == 0 ? ct_gradsync_finish(&st->gs, &r->stop) : rc;
        if (m->step.status < 0)
            return ct_error_wrap(m->step.status,
                                 "step %lld: a cross-rank sum inside the model failed",
                                 (long long)step);
        if (sync < 0)
            return ct_error_wrap(sync, "step %lld: gradient sync", (long long)step);
    }
    double t2 = ct_now_s();
    if (rc < 0)
        return rc;
    update(st, step, r);
    double t3 = ct_now_s();
    st->t.forward_backward_s += t1 - t0;
    st->t.exposed_comm_s += t2 - t1;
    st->t.optim_s += t3 - t2;
    return 0;
}
