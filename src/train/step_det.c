/* The step's deterministic mode (see step_det.h). */
#include "train/step_det.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/trace.h"
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

/* The side slots of the exponents' MAX: the stop request, the non-finite flag. */
#define DET_N_SIDE 2

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
    d->first = cut.first;
    d->count = (int)cut.count;
    d->total = (int)cut.n_mb;
    /* A row is a micro-batch's gradient and its buffer terms; the grid and
     * the sums' width come from the global micro-batch count, so every N
     * sums on the same grid. Side slots: the stop request, the non-finite
     * flag. */
    const size_t n[2] = {P, NB};
    const struct ct_reprosum_params rp = {
        .n = n, .n_seg = 2, .n_terms = cut.n_mb, .max_rows = d->count, .n_side = DET_N_SIDE};
    /* The last micro-batch's gradient stays in the model's buffer (det_row). */
    d->grads = malloc((size_t)(cut.count - 1 > 0 ? cut.count - 1 : 1) * (P ? P : 1) *
                      sizeof(float));
    d->bufs = malloc((size_t)cut.count * (NB ? NB : 1) * sizeof(float));
    d->buf0 = malloc((NB ? NB : 1) * sizeof(float));
    if (d->grads && d->bufs && d->buf0 && (rc = ct_reprosum_init(&d->sum, s->comm, &rp)) < 0 &&
        rc != CT_ENOMEM)
        return rc;
    if (!d->grads || !d->bufs || !d->buf0 || rc < 0)
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
    const int K = s->targets;
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
        m->fwd.epoch = b->epoch;
        m->fwd.sample_index = b->idx + off;
        const int tr = ct_trace_on(); /* log.trace (core/trace.h) */
        const double f0 = tr ? ct_now_s() : 0.0;
        const float *logits = ct_model_forward(m, mb);
        int64_t hits = 0;
        double loss = ct_xent_forward_backward(ct_model_output_grad(m), logits,
                                               b->y + (size_t)off * K, mb * K, s->n_classes, scale,
                                               &hits);
        *correct += hits;
        const double f1 = tr ? ct_now_s() : 0.0;
        ct_model_backward(m, mb, NULL, NULL);
        if (tr) {
            ct_trace_span(CT_TRACE_MAIN, "phase", "forward", f0, f1);
            ct_trace_span(CT_TRACE_MAIN, "phase", "backward", f1, ct_now_s());
        }
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

/* One collective pair for the whole step (the reproducible sum's): a MAX
 * of the block exponents of every row, plus the stop request and a
 * non-finite flag (world - rank of the lowest rank that saw one) as side
 * slots; then one SUM of the integer sums of gradients and buffer terms.
 * Sharded, the gradients' sums are reduce-scattered instead (exact, so the
 * same sums as the allreduce's) and turned into floats at this rank's slice
 * only (a slice starts on a whole block). Every rank sees the same reduced
 * exponents, so every rank learns of a non-finite value at the same step. */
static int det_sync(struct ct_step_det *d, int64_t step, int64_t stop_local, int64_t *stop,
                    int *bad_rank)
{
    struct ct_session *s = d->s;
    struct ct_model *m = &s->model;
    struct ct_reprosum *sum = &d->sum;
    const size_t NB = m->buffers.numel;
    ct_reprosum_begin(sum);
    int rc = 0;
    for (int j = 0; j < d->count && rc == 0; j++) {
        float *row = d->bufs + (size_t)j * NB;
        const float w = det_weight(d->first + j, d->total);
        for (size_t i = 0; i < NB; i++)
            row[i] *= w;
        rc = ct_reprosum_add(sum, (const float *[]){det_row(d, j), row});
    }
    if (rc < 0)
        return rc;
    int64_t *side = ct_reprosum_side(sum);
    side[0] = stop_local;
    side[1] = ct_reprosum_local_nonfinite(sum) ? s->comm->world - s->comm->rank : 0;
    rc = ct_reprosum_exchange(sum);
    if (rc < 0)
        return ct_error_wrap(rc, "step %lld: deterministic sync (exponents)", (long long)step);
    *stop = side[0];
    *bad_rank = side[1] > 0 ? (int)(s->comm->world - side[1]) : -1;
    if (*bad_rank >= 0)
        return 0; /* nothing summed: the caller drops the step */
    if ((rc = ct_reprosum_reduce(sum, s->sharded ? s->shard.counts : NULL)) < 0)
        return ct_error_wrap(rc, "step %lld: deterministic sync (int%d sums)", (long long)step,
                             sum->bits);
    ct_reprosum_finish(sum, 0, m->grads.data);
    ct_reprosum_finish(sum, 1, d->bufs);
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
    if (m->fwd.status < 0)
        return ct_error_wrap(m->fwd.status, "step %lld: inside the model", (long long)step);
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
    ct_reprosum_free(&d->sum);
    memset(d, 0, sizeof *d);
}
