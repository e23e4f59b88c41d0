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

/* A slice starts on a multiple of CT_SHARD_ALIGN, so the deterministic
 * mode's blocks and the norm's blocks never straddle two ranks' slices. */
_Static_assert(CT_SHARD_ALIGN % CT_REPRO_BLOCK == 0 && CT_SHARD_ALIGN % CT_NORM_BLOCK == 0,
               "shard slices must start on whole summation and norm blocks");

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
    if (s->sharded)
        st->det_acc_slice = malloc((s->shard.slice ? s->shard.slice : 1) * (size_t)(st->det_bits / 8));
    if (!st->det_grads || !st->det_bufs || !st->det_buf0 || !st->det_work || !st->det_acc ||
        (s->sharded && !st->det_acc_slice))
        return ct_error_set(CT_ENOMEM, "deterministic mode: %d micro-batch rows of %zu floats",
                            st->det_count, P + NB);
    return 0;
}

/* Sharded: the slice of summed gradients and the norm's block bookkeeping. */
static int shard_init(struct ct_stepper *st, struct ct_session *s)
{
    const struct ct_shard *sh = &s->shard;
    const int world = sh->world;
    st->gslice = calloc(sh->slice ? sh->slice : 1, sizeof *st->gslice);
    st->norm_blocks = calloc(ct_norm_blocks(sh->numel) + 1, sizeof *st->norm_blocks);
    st->norm_counts = malloc((size_t)world * sizeof *st->norm_counts);
    st->norm_displs = malloc((size_t)world * sizeof *st->norm_displs);
    if (!st->gslice || !st->norm_blocks || !st->norm_counts || !st->norm_displs)
        return ct_error_set(CT_ENOMEM, "dist.shard_optimizer: out of memory for a slice of %zu "
                            "gradients", sh->slice);
    for (int r = 0; r < world; r++) {
        st->norm_counts[r] = (int)ct_norm_blocks((size_t)sh->counts[r]);
        st->norm_displs[r] = sh->displs[r] / CT_NORM_BLOCK;
    }
    return 0;
}

/* A test-only "<step>:<rank>[:params]" variable (step.h); *step = -1 when
 * unset; *params: the ":params" form was given. */
static void parse_failpoint(const char *name, int64_t *step, int *rank, int *params)
{
    const char *v = getenv(name);
    long long k;
    int r;
    char what[16] = "";
    *step = -1;
    *params = 0;
    int n = v ? sscanf(v, "%lld:%d:%15s", &k, &r, what) : 0;
    if (n >= 2) {
        *step = k;
        *rank = r;
        *params = n == 3 && strcmp(what, "params") == 0;
    }
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
    int unused;
    parse_failpoint("CT_DIVERGE", &st->diverge_step, &st->diverge_rank, &unused);
    parse_failpoint("CT_INJECT_NONFINITE", &st->inject_step, &st->inject_rank, &st->inject_params);
    struct ct_model *m = &s->model;
    int rc;
    if (s->sharded && (rc = shard_init(st, s)) < 0)
        return rc;
    if (s->batches.deterministic)
        return det_init(st, s);
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
    if (s->sharded && (rc = ct_gradsync_shard(&st->gs, &s->shard, st->gslice)) < 0)
        return ct_error_wrap(rc, "%s: planning the gradient sync", s->cfg->path);
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
    free(st->det_acc_slice);
    free(st->buf0);
    free(st->gslice);
    free(st->norm_blocks);
    free(st->norm_counts);
    free(st->norm_displs);
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
    const int K = s->test.targets;
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
        m->step.epoch = b->epoch;
        m->step.sample_index = b->idx + off;
        const float *logits = ct_model_forward(m, mb);
        int64_t hits = 0;
        *loss_sum += ct_xent_forward_backward(ct_model_output_grad(m), logits,
                                              b->y + (size_t)off * K, mb * K, s->n_classes, scale,
                                              &hits);
        *correct += hits;
        if (last && sync) {
            int rc = ct_gradsync_begin(&st->gs, stop_local);
            if (rc < 0)
                return rc;
            ct_model_backward(m, mb, ct_gradsync_hook, &st->gs);
        } else {
            ct_model_backward(m, mb, NULL, NULL);
        }
    }
    if (m->grads.numel > 0 && (!isfinite(*loss_sum) || inject_now(st, step)))
        m->grads.data[0] = NAN;
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
static void det_forward_backward(struct ct_stepper *st, const struct ct_batch *b, int64_t step,
                                 double *loss_sum, int64_t *correct)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    const int K = s->test.targets;
    const float scale = 1.0f / ((float)s->batches.global_batch * (float)K);
    const int mb = s->batches.micro_batch;
    const size_t D = m->in_numel, P = m->grads.numel, NB = m->buffers.numel;
    int64_t q = 0;
    *correct = 0;
    memcpy(st->det_buf0, m->buffers.data, NB * sizeof(float));
    for (int j = 0; j < st->det_count; j++) {
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
        float *row = j < st->det_count - 1 ? st->det_grads + (size_t)j * P : m->grads.data;
        if (j < st->det_count - 1)
            memcpy(row, m->grads.data, P * sizeof(float));
        /* A non-finite loss (and the test-only injection) marks the row, so
         * the exponents' MAX-reduce carries it like a non-finite gradient. */
        if (isfinite(loss))
            q += ct_repro_round(loss, DET_LOSS_SHIFT);
        if (P > 0 && (!isfinite(loss) || (j == 0 && inject_now(st, step))))
            row[0] = NAN;
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

/* The integer sums of gradients and buffer terms, over ranks, back to
 * floats: the gradients into the model's buffer, the buffer terms into
 * det_bufs. */
static int det_sum(struct ct_stepper *st, const int64_t *e, size_t ng)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    const size_t P = m->grads.numel, NB = m->buffers.numel, B = CT_REPRO_BLOCK;
    int rc;
    if (st->det_bits == 32) {
        int32_t *acc = st->det_acc;
        if ((rc = ct_comm_allreduce_i32(s->comm, acc, P + NB, CT_REDUCE_SUM)) < 0)
            return rc;
        ct_repro_finish_i32(m->grads.data, acc, P, e, B);
        ct_repro_finish_i32(st->det_bufs, acc + P, NB, e + ng, B);
    } else {
        int64_t *acc = st->det_acc;
        if ((rc = ct_comm_allreduce_i64(s->comm, acc, P + NB, CT_REDUCE_SUM)) < 0)
            return rc;
        ct_repro_finish(m->grads.data, acc, P, e, B);
        ct_repro_finish(st->det_bufs, acc + P, NB, e + ng, B);
    }
    return 0;
}

/* Sharded: the gradients' integer sums reduce-scattered (exact, so the
 * same sums as the allreduce's) and this rank's slice of them turned into
 * floats in gslice, by the same blocks' shifts (a slice starts on a whole
 * block); the buffer terms allreduced as before. */
static int det_sum_sharded(struct ct_stepper *st, const int64_t *e, size_t ng)
{
    struct ct_session *s = st->s;
    const struct ct_shard *sh = &s->shard;
    const size_t P = s->model.grads.numel, NB = s->model.buffers.numel, B = CT_REPRO_BLOCK;
    const size_t n = sh->hi - sh->lo;
    const int64_t *es = e + sh->lo / B;
    int rc;
    if (st->det_bits == 32) {
        int32_t *acc = st->det_acc, *mine = st->det_acc_slice;
        rc = s->comm->ops->reduce_scatter(s->comm, acc, mine, sh->counts, CT_ELEM_I32,
                                          CT_REDUCE_SUM, NULL);
        if (rc == 0 && NB > 0)
            rc = ct_comm_allreduce_i32(s->comm, acc + P, NB, CT_REDUCE_SUM);
        if (rc < 0)
            return rc;
        ct_repro_finish_i32(st->gslice, mine, n, es, B);
        ct_repro_finish_i32(st->det_bufs, acc + P, NB, e + ng, B);
    } else {
        int64_t *acc = st->det_acc, *mine = st->det_acc_slice;
        rc = s->comm->ops->reduce_scatter(s->comm, acc, mine, sh->counts, CT_ELEM_I64,
                                          CT_REDUCE_SUM, NULL);
        if (rc == 0 && NB > 0)
            rc = ct_comm_allreduce_i64(s->comm, acc + P, NB, CT_REDUCE_SUM);
        if (rc < 0)
            return rc;
        ct_repro_finish(st->gslice, mine, n, es, B);
        ct_repro_finish(st->det_bufs, acc + P, NB, e + ng, B);
    }
    return 0;
}

/* One collective pair for the whole step: a MAX of the block exponents of
 * every row, plus the stop request and a non-finite flag (world - rank of
 * the lowest rank that saw one) as side slots; then one SUM of the integer
 * sums of gradients and buffer terms (int32 or int64: det_accumulate).
 * Every rank sees the same reduced exponents, so every rank learns of a
 * non-finite value at the same step. */
static int det_sync(struct ct_stepper *st, int64_t step, int64_t stop_local, int64_t *stop,
                    int *bad_rank)
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
    *bad_rank = e[ne + 1] > 0 ? (int)(s->comm->world - e[ne + 1]) : -1;
    if (*bad_rank >= 0)
        return 0; /* nothing summed: the caller drops the step */
    if ((rc = ct_repro_shifts_bits(e, ne, st->det_total, st->det_bits)) < 0)
        return rc;
    det_accumulate(st, e, ng);
    if ((rc = s->sharded ? det_sum_sharded(st, e, ng) : det_sum(st, e, ng)) < 0)
        return ct_error_wrap(rc, "step %lld: deterministic sync (int%d sums)", (long long)step,
                             st->det_bits);
    const float decay = det_weight(-1, st->det_total);
    for (size_t i = 0; i < NB; i++)
        m->buffers.data[i] = decay * st->det_buf0[i] + st->det_bufs[i];
    return 0;
}

/* The forward/backward and sync of the deterministic mode. Only MPI
 * failures can fail, the same on every rank. A non-finite row anywhere is
 * seen by every rank in the same reduced exponents: the buffers go back to
 * the step's start and r->nonfinite says the step is to be dropped. */
static int det_step(struct ct_stepper *st, const struct ct_batch *b, int64_t step,
                    int64_t stop_local, struct ct_step_result *r, double *t1)
{
    struct ct_model *m = &st->s->model;
    det_forward_backward(st, b, step, &r->loss_sum, &r->correct);
    *t1 = ct_now_s();
    int bad_rank = -1;
    int rc = det_sync(st, step, stop_local, &r->stop, &bad_rank);
    if (m->step.status < 0)
        return ct_error_wrap(m->step.status, "step %lld: inside the model", (long long)step);
    if (rc == 0 && bad_rank >= 0) {
        memcpy(m->buffers.data, st->det_buf0, m->buffers.numel * sizeof(float));
        r->nonfinite = 1;
        r->nonfinite_rank = bad_rank;
    }
    return rc;
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
    if (rc == 0 && m->step.status < 0)
        rc = ct_error_wrap(m->step.status, "step %lld: a cross-rank sum inside the model failed",
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
    if (s->cfg->optim.clip_norm > 0) {
        r->grad_norm = ct_clip_grad_norm(m->grads.data, m->grads.numel, s->cfg->optim.clip_norm);
        return !isfinite(r->grad_norm);
    }
    return ct_first_nonfinite(m->grads.data, m->grads.numel) < m->grads.numel;
}

/* Sharded: check_sum from this rank's slice. Every rank's per-block sums
 * of squares are all-gathered, so every rank computes the norm of the whole
 * summed gradient, the same bits as ct_grad_norm of it on one rank
 * (clip.h), and learns whether any slice held a non-finite value (a sum of
 * squares of finite floats in double cannot overflow). The norm is needed
 * for that even when clipping is off, when it is not reported. */
static int check_sum_sharded(struct ct_stepper *st, struct ct_step_result *r, int *bad,
                             double *comm_s)
{
    struct ct_session *s = st->s;
    const struct ct_shard *sh = &s->shard;
    const size_t n = sh->hi - sh->lo;
    ct_grad_sumsq_blocks(st->gslice, n, st->norm_blocks + sh->lo / CT_NORM_BLOCK);
    const double t0 = ct_now_s();
    int rc = s->comm->ops->allgatherv(s->comm, st->norm_blocks, st->norm_counts, st->norm_displs,
                                      CT_ELEM_F64, NULL);
    *comm_s = ct_now_s() - t0;
    if (rc < 0)
        return rc;
    const double norm = ct_grad_norm_blocks(st->norm_blocks, ct_norm_blocks(sh->numel));
    if (s->cfg->optim.clip_norm > 0) {
        r->grad_norm = norm;
        ct_clip_scale(st->gslice, n, norm, s->cfg->optim.clip_norm);
    }
    *bad = !isfinite(norm);
    return 0;
}

/* The update, after the sync and check_sum (which clipped): every rank sees
 * the same summed gradient, so every rank computes the same norm and scale.
 * Sharded: each rank updates its slice with its slice of the state, then
 * the parameters are all-gathered (*gather_s: the seconds that took). */
static int update(struct ct_stepper *st, int64_t step, struct ct_step_result *r, double *gather_s)
{
    struct ct_session *s = st->s;
    struct ct_model *m = &s->model;
    const double lr = ct_schedule_lr(&s->sched, step);
    st->last_grad_norm = r->grad_norm;
    if (s->sharded) {
        const struct ct_shard *sh = &s->shard;
        ct_optimizer_step(&s->opt, m->params.data + sh->lo, st->gslice, sh->hi - sh->lo, lr);
        const double t0 = ct_now_s();
        int rc = s->comm->ops->allgatherv(s->comm, m->params.data, sh->counts, sh->displs,
                                          CT_ELEM_F32, NULL);
        *gather_s = ct_now_s() - t0;
        if (rc < 0)
            return ct_error_wrap(rc, "step %lld: all-gathering the updated parameters",
                                 (long long)step);
    } else {
        ct_optimizer_step(&s->opt, m->params.data, m->grads.data, m->params.numel, lr);
    }
    if (step == st->diverge_step && s->comm->rank == st->diverge_rank && m->params.numel > 0)
        m->params.data[0] = nextafterf(m->params.data[0], INFINITY);
    if (st->inject_params && step + 1 == st->inject_step && s->comm->rank == st->inject_rank &&
        m->params.numel > 0)
        m->params.data[0] = NAN;
    return 0;
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
        memcpy(st->buf0, m->buffers.data, m->buffers.numel * sizeof(float));
        rc = forward_backward(st, b, step, 1, stop_local, &r->loss_sum, &r->correct);
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
    /* Sharded: the norm's and the parameters' collectives, counted as
     * exposed communication (nothing overlaps them). */
    int bad = 0;
    double gather_s = 0.0, norm_s = 0.0;
    if (!r->nonfinite && st->s->sharded) {
        if ((rc = check_sum_sharded(st, r, &bad, &norm_s)) < 0)
            return ct_error_wrap(rc, "step %lld: the gradient norm's block sums", (long long)step);
    } else if (!r->nonfinite) {
        bad = check_sum(st, r);
    }
    if (bad) {
        r->nonfinite = 1;
        r->nonfinite_rank = -1;
        if (st->det) /* every row was finite, their sum overflowed */
            memcpy(m->buffers.data, st->det_buf0, m->buffers.numel * sizeof(float));
        else if ((rc = find_nonfinite_rank(st, b, step, &r->nonfinite_rank)) < 0)
            return rc;
    }
    if (!r->nonfinite) {
        if ((rc = update(st, step, r, &gather_s)) < 0)
            return rc;
        if (st->have_gs) /* error feedback: this step's residuals are the next one's */
            ct_gradsync_commit(&st->gs);
    }
    double t3 = ct_now_s();
    st->t.forward_backward_s += t1 - t0;
    st->t.exposed_comm_s += t2 - t1 + norm_s + gather_s;
    st->t.optim_s += t3 - t2 - norm_s - gather_s;
    return 0;
}
