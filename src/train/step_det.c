/* The step's deterministic mode (see step_det.h). */
#include "train/step_det.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "nn/loss.h"
#include "nn/norm.h"
#include "parallel/mbcut.h"
#include "parallel/reprosum.h"

/* A slice starts on a multiple of CT_SHARD_ALIGN, so the deterministic
 * mode's blocks never straddle two ranks' slices. */
_Static_assert(CT_SHARD_ALIGN % CT_REPRO_BLOCK == 0,
               "shard slices must start on whole summation blocks");

/* Deterministic mode's per-micro-batch losses go on this fixed grid
 * (2^-30): every partial sum of them is then exact in a double up to 2^23,
 * so the loss reported does not depend on how micro-batches fall on ranks. */
#define DET_LOSS_SHIFT (-30)

int ct_step_det_init(struct ct_step_det *d, struct ct_session *s)
{
    memset(d, 0, sizeof *d);
    d->s = s;
    struct ct_mbcut cut;
    int rc = ct_mbcut_plan(s->batches.global_batch, s->batches.micro_batch, s->comm->world,
                           s->comm->rank, &cut);
    if (rc < 0)
        return ct_error_wrap(rc, "%s", s->cfg->path);
    const size_t P = s->model.grads.numel, NB = s->model.buffers.numel;
    const size_t ne = ct_repro_n_blocks(P, CT_REPRO_BLOCK) + ct_repro_n_blocks(NB, CT_REPRO_BLOCK);
    d->first = cut.first;
    d->count = (int)cut.count;
    d->total = (int)cut.n_mb;
    d->bits = ct_repro_acc_bits(cut.n_mb);
    /* The last micro-batch's gradient stays in the model's buffer (det_row). */
    d->grads = malloc((size_t)(cut.count - 1 > 0 ? cut.count - 1 : 1) * (P ? P : 1) *
                      sizeof(float));
    d->bufs = malloc((size_t)cut.count * (NB ? NB : 1) * sizeof(float));
    d->buf0 = malloc((NB ? NB : 1) * sizeof(float));
    d->work = malloc((ne + 2) * sizeof(int64_t));
    d->acc = malloc((P + NB ? P + NB : 1) * (size_t)(d->bits / 8));
    if (!d->grads || !d->bufs || !d->buf0 || !d->work || !d->acc)
        return ct_error_set(CT_ENOMEM, "deterministic mode: %d micro-batch rows of %zu floats",
                            d->count, P + NB);
    return 0;
}

/* Micro-batch j's gradient row: the last one is left where backward wrote
 * it, in the model's gradient buffer (which the sync overwrites only after
 * every row is accumulated), saving a copy of the whole gradient per step. */
static const float *det_row(const struct ct_step_det *d, int j)
{
    if (j == d->count - 1)
        return d->s->model.grads.data;
    return d->grads + (size_t)j * d->s->model.grads.numel;
}

/* Deterministic mode: each of this rank's micro-batches from zeroed
 * gradients and zeroed buffers, into its own rows, so what a row holds is a
 * function of that micro-batch alone. Buffers from zero hold momentum times
 * the micro-batch's statistics (BatchNorm's running-stat rule, the only
 * buffers there are). */
static void det_forward_backward(struct ct_step_det *d, const struct ct_batch *b, int inject,
                                 double *loss_sum, int64_t *correct)
{
    struct ct_session *s = d->s;
    struct ct_model *m = &s->model;
    const int K = s->test.targets;
    const float scale = 1.0f / ((float)s->batches.global_batch * (float)K);
    const int mb = s->batches.micro_batch;
    const size_t D = m->in_numel, P = m->grads.numel, NB = m->buffers.numel;
    int64_t q = 0;
    *correct = 0;
    memcpy(d->buf0, m->buffers.data, NB * sizeof(float));
    for (int j = 0; j < d->count; j++) {
        const int off = j * mb;
        ct_model_zero_grad(m);
        memset(m->buffers.data, 0, NB * sizeof(float));
        memcpy(ct_model_input(m), b->x + (size_t)off * D, (size_t)mb * D * sizeof(float));
        m->step.epoch = b->epoch;
        m->step.sample_index = b->idx + off;
        const float *logits = ct_model_forward(m, mb);
        int64_t hits = 0;
        double loss = ct_xent_forward_backward(ct_model_output_grad(m), logits,
                                               b->y + (size_t)off * K, mb * K, s->n_classes, scale,
                                               &hits);
        *correct += hits;
        ct_model_backward(m, mb, NULL, NULL);
        float *row = j < d->count - 1 ? d->grads + (size_t)j * P : m->grads.data;
        if (j < d->count - 1)
            memcpy(row, m->grads.data, P * sizeof(float));
        /* A non-finite loss (and the test-only injection) marks the row, so
         * the exponents' MAX-reduce carries it like a non-finite gradient. */
        if (isfinite(loss))
            q += ct_repro_round(loss, DET_LOSS_SHIFT);
        if (P > 0 && (!isfinite(loss) || (j == 0 && inject)))
            row[0] = NAN;
        memcpy(d->bufs + (size_t)j * NB, m->buffers.data, NB * sizeof(float));
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
 * int32 or int64 sums (d->bits, from the global micro-batch count, so
 * the same for every N): the first row is stored, the others added, so the
 * usual case of one micro-batch per rank is one pass with no memset. */
static void det_accumulate(struct ct_step_det *d, const int64_t *e, size_t ng)
{
    const size_t P = d->s->model.grads.numel, NB = d->s->model.buffers.numel;
    const size_t B = CT_REPRO_BLOCK;
    if (d->bits == 32) {
        int32_t *acc = d->acc;
        for (int j = 0; j < d->count; j++) {
            const float *bufs = d->bufs + (size_t)j * NB;
            if (j == 0) {
                ct_repro_store_i32(acc, det_row(d, j), P, e, B);
                ct_repro_store_i32(acc + P, bufs, NB, e + ng, B);
            } else {
                ct_repro_accumulate_i32(acc, det_row(d, j), P, e, B);
                ct_repro_accumulate_i32(acc + P, bufs, NB, e + ng, B);
            }
        }
        return;
    }
    int64_t *acc = d->acc;
    memset(acc, 0, (P + NB) * sizeof *acc);
    for (int j = 0; j < d->count; j++) {
        ct_repro_accumulate(acc, det_row(d, j), P, e, B);
        ct_repro_accumulate(acc + P, d->bufs + (size_t)j * NB, NB, e + ng, B);
    }
}

/* Integer sums (int32 or int64, by t) of n values at acc, back to floats
 * by the blocks' shifts e. */
static void det_finish(float *out, const char *acc, size_t n, const int64_t *e, enum ct_elem t)
{
    if (t == CT_ELEM_I32)
        ct_repro_finish_i32(out, (const int32_t *)acc, n, e, CT_REPRO_BLOCK);
    else
        ct_repro_finish(out, (const int64_t *)acc, n, e, CT_REPRO_BLOCK);
}

/* The integer sums of gradients and buffer terms, over ranks, back to
 * floats: the gradients into the model's buffer, the buffer terms into
 * bufs. Unsharded, one allreduce of both. Sharded, the gradients' sums are
 * reduce-scattered in place (exact, so the same sums as the allreduce's;
 * this rank's land at the start of acc) and turned into floats at this
 * rank's slice of the gradients by the same blocks' shifts (a slice starts
 * on a whole block); the buffer terms, after them in acc, are allreduced. */
static int det_sum(struct ct_step_det *d, const int64_t *e, size_t ng)
{
    struct ct_session *s = d->s;
    const struct ct_shard *sh = &s->shard;
    const size_t P = s->model.grads.numel, NB = s->model.buffers.numel, w = (size_t)d->bits / 8;
    const enum ct_elem t = d->bits == 32 ? CT_ELEM_I32 : CT_ELEM_I64;
    char *acc = d->acc;
    int rc;
    if (s->sharded) {
        rc = ct_comm_reduce_scatter(s->comm, NULL, acc, sh->counts, t, CT_REDUCE_SUM, NULL);
        if (rc == 0 && NB > 0)
            rc = t == CT_ELEM_I32 ? ct_comm_allreduce_i32(s->comm, (int32_t *)(acc + P * w), NB,
                                                          CT_REDUCE_SUM)
                                  : ct_comm_allreduce_i64(s->comm, (int64_t *)(acc + P * w), NB,
                                                          CT_REDUCE_SUM);
    } else {
        rc = t == CT_ELEM_I32 ? ct_comm_allreduce_i32(s->comm, d->acc, P + NB, CT_REDUCE_SUM)
                              : ct_comm_allreduce_i64(s->comm, d->acc, P + NB, CT_REDUCE_SUM);
    }
    if (rc < 0)
        return rc;
    if (s->sharded)
        det_finish(s->model.grads.data + sh->lo, acc, sh->hi - sh->lo, e + sh->lo / CT_REPRO_BLOCK,
                   t);
    else
        det_finish(s->model.grads.data, acc, P, e, t);
    det_finish(d->bufs, acc + P * w, NB, e + ng, t);
    return 0;
}

/* One collective pair for the whole step: a MAX of the block exponents of
 * every row, plus the stop request and a non-finite flag (world - rank of
 * the lowest rank that saw one) as side slots; then one SUM of the integer
 * sums of gradients and buffer terms (int32 or int64: det_accumulate).
 * Every rank sees the same reduced exponents, so every rank learns of a
 * non-finite value at the same step. */
static int det_sync(struct ct_step_det *d, int64_t step, int64_t stop_local, int64_t *stop,
                    int *bad_rank)
{
    struct ct_session *s = d->s;
    struct ct_model *m = &s->model;
    const size_t P = m->grads.numel, NB = m->buffers.numel, B = CT_REPRO_BLOCK;
    const size_t ng = ct_repro_n_blocks(P, B), nbb = ct_repro_n_blocks(NB, B), ne = ng + nbb;
    int64_t *e = d->work;
    ct_repro_exp_init(e, ne);
    for (int j = 0; j < d->count; j++) {
        float *row = d->bufs + (size_t)j * NB;
        const float w = det_weight(d->first + j, d->total);
        for (size_t i = 0; i < NB; i++)
            row[i] *= w;
        ct_repro_block_exponents(e, det_row(d, j), P, B);
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
    *bad_rank = e[ne + 1] > 0 ? (int)(s->comm->world - e[ne + 1]) : -1;
    if (*bad_rank >= 0)
        return 0; /* nothing summed: the caller drops the step */
    if ((rc = ct_repro_shifts_bits(e, ne, d->total, d->bits)) < 0)
        return rc;
    det_accumulate(d, e, ng);
    if ((rc = det_sum(d, e, ng)) < 0)
        return ct_error_wrap(rc, "step %lld: deterministic sync (int%d sums)", (long long)step,
                             d->bits);
    const float decay = det_weight(-1, d->total);
    for (size_t i = 0; i < NB; i++)
        m->buffers.data[i] = decay * d->buf0[i] + d->bufs[i];
    return 0;
}

int ct_step_det_run(struct ct_step_det *d, const struct ct_batch *b, int64_t step,
                    int64_t stop_local, int inject, struct ct_step_result *r, double *t1)
{
    struct ct_model *m = &d->s->model;
    det_forward_backward(d, b, inject, &r->loss_sum, &r->correct);
    *t1 = ct_now_s();
    int bad_rank = -1;
    int rc = det_sync(d, step, stop_local, &r->stop, &bad_rank);
    if (m->step.status < 0)
        return ct_error_wrap(m->step.status, "step %lld: inside the model", (long long)step);
    if (rc == 0 && bad_rank >= 0) {
        ct_step_det_restore(d);
        r->nonfinite = 1;
        r->nonfinite_rank = bad_rank;
    }
    return rc;
}

void ct_step_det_restore(struct ct_step_det *d)
{
    struct ct_model *m = &d->s->model;
    memcpy(m->buffers.data, d->buf0, m->buffers.numel * sizeof(float));
}

void ct_step_det_free(struct ct_step_det *d)
{
    free(d->grads);
    free(d->bufs);
    free(d->buf0);
    free(d->work);
    free(d->acc);
    memset(d, 0, sizeof *d);
}
