/* The step's sharded end (see step_shard.h). */
#include "train/step_shard.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/trace.h"
#include "optim/clip.h"
#include "parallel/shard.h"
#include "train/spec.h"

/* A slice starts on a multiple of CT_SHARD_ALIGN, so the norm's blocks
 * never straddle two ranks' slices (step_det.c: nor the summation's). */
_Static_assert(CT_SHARD_ALIGN % CT_NORM_BLOCK == 0, "shard slices must start on whole norm blocks");

static int norm_init(struct ct_step_shard *z, const struct ct_shard *sh)
{
    const int world = sh->world;
    z->norm_blocks = calloc(ct_norm_blocks(sh->numel) + 1, sizeof *z->norm_blocks);
    z->norm_counts = malloc((size_t)world * sizeof *z->norm_counts);
    z->norm_displs = malloc((size_t)world * sizeof *z->norm_displs);
    if (!z->norm_blocks || !z->norm_counts || !z->norm_displs)
        return CT_ENOMEM;
    for (int r = 0; r < world; r++) {
        z->norm_counts[r] = (int)ct_norm_blocks((size_t)sh->counts[r]);
        z->norm_displs[r] = sh->displs[r] / CT_NORM_BLOCK;
    }
    return 0;
}

/* Piece k of every rank's slice: its count and where it starts. */
static int pieces_init(struct ct_step_shard *z, const struct ct_shard *sh, size_t bucket_bytes)
{
    const size_t world = (size_t)sh->world;
    z->piece = bucket_bytes / sizeof(float);
    if (z->piece < CT_SHARD_ALIGN)
        z->piece = CT_SHARD_ALIGN;
    const size_t n = sh->slice / z->piece + (sh->slice % z->piece != 0);
    if (n > (size_t)INT_MAX / world)
        return ct_error_set(CT_ERANGE, "dist.shard_optimizer: %zu pieces of a %zu-element slice",
                            n, sh->slice);
    z->n_pieces = n > 0 ? (int)n : 1;
    const size_t cells = (size_t)z->n_pieces * world;
    z->piece_counts = malloc(cells * sizeof *z->piece_counts);
    z->piece_displs = malloc(cells * sizeof *z->piece_displs);
    z->reqs = calloc((size_t)z->n_pieces, sizeof *z->reqs);
    z->piece_t0 = calloc((size_t)z->n_pieces, sizeof *z->piece_t0);
    const size_t slots = z->n_pieces > 1 ? 2 : 1;
    const size_t stage = sh->slice < slots * z->piece ? sh->slice : slots * z->piece;
    z->stage = malloc((stage > 0 ? stage : 1) * sizeof *z->stage);
    if (!z->piece_counts || !z->piece_displs || !z->reqs || !z->piece_t0 || !z->stage)
        return CT_ENOMEM;
    for (size_t k = 0; k < (size_t)z->n_pieces; k++)
        for (size_t r = 0; r < world; r++) {
            const size_t len = (size_t)sh->counts[r], at = k * z->piece;
            const size_t c = at >= len ? 0 : len - at < z->piece ? len - at : z->piece;
            z->piece_counts[k * world + r] = (int)c;
            z->piece_displs[k * world + r] = sh->displs[r] + (c ? (int)at : 0);
        }
    return 0;
}

int ct_step_shard_init(struct ct_step_shard *z, struct ct_session *s, double clip_norm)
{
    memset(z, 0, sizeof *z);
    z->s = s;
    z->clip_norm = clip_norm;
    const struct ct_shard *sh = &s->shard;
    int rc = clip_norm > 0 ? norm_init(z, sh) : 0;
    if (rc == 0)
        rc = pieces_init(z, sh, ct_spec_gradsync(s->cfg).bucket_bytes);
    if (rc == CT_ENOMEM)
        rc = ct_error_set(CT_ENOMEM, "dist.shard_optimizer: out of memory for the plan of a "
                          "%zu-element slice", sh->slice);
    return rc;
}

void ct_step_shard_free(struct ct_step_shard *z)
{
    free(z->norm_blocks);
    free(z->norm_counts);
    free(z->norm_displs);
    free(z->piece_counts);
    free(z->piece_displs);
    free(z->reqs);
    free(z->piece_t0);
    free(z->stage);
    memset(z, 0, sizeof *z);
}

int ct_step_shard_check(struct ct_step_shard *z, double *norm, int *bad, double *comm_s)
{
    struct ct_session *s = z->s;
    const struct ct_shard *sh = &s->shard;
    const size_t n = sh->hi - sh->lo;
    float *g = s->model.grads.data + sh->lo;
    *norm = 0.0;
    if (!(z->clip_norm > 0)) {
        int64_t flag = ct_first_nonfinite(g, n) < n;
        const double t0 = ct_now_s();
        int rc = ct_comm_allreduce_i64(s->comm, &flag, 1, CT_REDUCE_MAX);
        *comm_s = ct_now_s() - t0;
        *bad = flag != 0;
        return rc;
    }
    ct_grad_sumsq_blocks(g, n, z->norm_blocks + sh->lo / CT_NORM_BLOCK);
    const double t0 = ct_now_s();
    int rc = ct_comm_allgatherv(s->comm, NULL, z->norm_blocks, z->norm_counts, z->norm_displs,
                                CT_ELEM_F64, NULL);
    *comm_s = ct_now_s() - t0;
    if (rc < 0)
        return rc;
    *norm = ct_grad_norm_blocks(z->norm_blocks, ct_norm_blocks(sh->numel));
    ct_clip_scale(g, n, *norm, z->clip_norm);
    *bad = !isfinite(*norm);
    return 0;
}

/* log.trace: piece k's all-gather, from its start to now, on a comm lane. */
static void trace_piece(const struct ct_step_shard *z, int k)
{
    if (!ct_trace_on() || z->piece_t0[k] <= 0.0)
        return;
    const size_t world = (size_t)z->s->shard.world;
    int64_t bytes = 0;
    for (size_t r = 0; r < world; r++)
        bytes += (int64_t)z->piece_counts[(size_t)k * world + r] * (int64_t)sizeof(float);
    ct_trace_span_args(CT_TRACE_COMM, "comm", "allgather", z->piece_t0[k], ct_now_s(), "bucket", k,
                       "bytes", bytes);
}

/* Let MPI move the pieces in flight on (Open MPI's libnbc progresses only
 * inside MPI calls); they complete in the order they started. */
static int progress(struct ct_step_shard *z, int started, int *done_upto)
{
    int done = 1, rc = 0;
    while (rc == 0 && done && *done_upto < started) {
        rc = ct_comm_test(z->s->comm, &z->reqs[*done_upto], &done);
        if (rc == 0 && done)
            trace_piece(z, *done_upto);
        *done_upto += rc == 0 && done;
    }
    return rc;
}

/* Updates piece k (c elements at `at` of the slice) and copies it to the
 * send buffer `out`. */
static void update_piece(struct ct_step_shard *z, size_t at, size_t c, float *out, double lr)
{
    struct ct_session *s = z->s;
    float *p = s->model.params.data + s->shard.lo + at;
    ct_optimizer_update(&s->opt, at, p, s->model.grads.data + s->shard.lo + at, c, lr);
    memcpy(out, p, c * sizeof *p);
}

/* The pieces in turn: piece k updated and copied to its send buffer (once
 * the piece that used it before, k - 2, has arrived everywhere), its
 * all-gather started, the ones in flight tested; then every started one
 * waited for (also after an error, so that MPI no longer uses the
 * parameters when we return). */
static int update_pieces(struct ct_step_shard *z, double lr, double *comm_s)
{
    struct ct_session *s = z->s;
    const struct ct_shard *sh = &s->shard;
    const size_t world = (size_t)sh->world;
    int rc = 0, started = 0, done = 0;
    for (int k = 0; k < z->n_pieces && rc == 0; k++) {
        double t0 = ct_now_s();
        for (; done < k - 1 && rc == 0; done++) {
            rc = ct_comm_wait(s->comm, &z->reqs[done]);
            trace_piece(z, done);
        }
        *comm_s += ct_now_s() - t0;
        if (rc < 0)
            break;
        const size_t at = (size_t)k * z->piece;
        const size_t c = (size_t)z->piece_counts[(size_t)k * world + (size_t)sh->rank];
        float *out = z->stage + (size_t)(k % 2) * z->piece;
        update_piece(z, at, c, out, lr);
        t0 = ct_now_s();
        z->piece_t0[k] = ct_trace_on() ? t0 : 0.0;
        rc = ct_comm_allgatherv(s->comm, out, s->model.params.data,
                                z->piece_counts + (size_t)k * world,
                                z->piece_displs + (size_t)k * world, CT_ELEM_F32,
                                &z->reqs[k]);
        started += rc == 0;
        if (rc == 0)
            rc = progress(z, started, &done);
        *comm_s += ct_now_s() - t0;
    }
    const double t0 = ct_now_s();
    for (int k = done; k < started; k++) {
        int w = ct_comm_wait(s->comm, &z->reqs[k]);
        trace_piece(z, k);
        rc = rc < 0 ? rc : w;
    }
    const double t1 = ct_now_s();
    *comm_s += t1 - t0;
    ct_trace_span(CT_TRACE_MAIN, "phase", "allgather", t0, t1); /* the exposed tail */
    return rc;
}

int ct_step_shard_update(struct ct_step_shard *z, double lr, double *comm_s)
{
    struct ct_session *s = z->s;
    const struct ct_shard *sh = &s->shard;
    int rc;
    *comm_s = 0.0;
    if (z->n_pieces > 1) {
        rc = update_pieces(z, lr, comm_s);
    } else {
        update_piece(z, 0, sh->hi - sh->lo, z->stage, lr);
        const double t0 = ct_now_s();
        z->piece_t0[0] = ct_trace_on() ? t0 : 0.0;
        rc = ct_comm_allgatherv(s->comm, z->stage, s->model.params.data, sh->counts,
                                sh->displs, CT_ELEM_F32, NULL);
        *comm_s = ct_now_s() - t0;
        ct_trace_span(CT_TRACE_MAIN, "phase", "allgather", t0, t0 + *comm_s);
        trace_piece(z, 0);
    }
    /* every rank counts the step, also one whose slice is empty */
    ct_optimizer_count_step(&s->opt);
    return rc;
}
