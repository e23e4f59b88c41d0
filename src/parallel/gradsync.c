/* Gradient synchronisation (see gradsync.h): the pure bucket planner, then
 * the runtime that starts the buckets from the backward hook and completes
 * them in finish. Nothing here chooses how gradients are scaled or clipped. */
#include "parallel/gradsync.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/trace.h"

struct ct_gradsync_params ct_gradsync_default_params(void)
{
    return (struct ct_gradsync_params){
        .bucket_bytes = (size_t)4 << 20,
        .first_bucket_bytes = (size_t)1 << 20,
        .overlap = 1,
        .compress = CT_GRAD_COMPRESS_NONE,
        .feedback = 0,
        .max_call_bytes = CT_COMM_MAX_CALL_BYTES,
    };
}

/* ---------------------------------------------------------------- planner */

/* Caps are in bytes and buckets in floats; round up so that a bucket is
 * never closed below its cap. */
static size_t cap_elems(size_t bytes)
{
    return bytes / sizeof(float) + (bytes % sizeof(float) != 0);
}

static int check_spans(const struct ct_grad_span *spans, int n_modules, size_t numel)
{
    if (n_modules < 0)
        return ct_error_set(CT_EINVAL, "gradient buckets: %d modules", n_modules);
    if (n_modules > 0 && !spans)
        return ct_error_set(CT_EINVAL, "gradient buckets: %d modules but no spans", n_modules);
    int prev = -1; /* the last module with parameters */
    for (int i = 0; i < n_modules; i++) {
        const struct ct_grad_span *s = &spans[i];
        if (s->begin > s->end)
            return ct_error_set(CT_EINVAL,
                                "gradient span of module %d is [%zu, %zu): begins after it ends",
                                i, s->begin, s->end);
        if (s->begin == s->end)
            continue;
        if (s->end > numel)
            return ct_error_set(CT_EINVAL,
                                "gradient span of module %d is [%zu, %zu): past the end of the "
                                "buffer (%zu elements)",
                                i, s->begin, s->end, numel);
        if (prev >= 0 && s->begin < spans[prev].end)
            return ct_error_set(CT_EINVAL,
                                "gradient span of module %d is [%zu, %zu) but module %d ends at "
                                "%zu: spans must follow the module order without overlapping",
                                i, s->begin, s->end, prev, spans[prev].end);
        prev = i;
    }
    return 0;
}

static int emit(struct ct_bucket *out, int max_out, int *nb, size_t begin, size_t end, int ready)
{
    if (out) {
        if (*nb >= max_out)
            return ct_error_set(CT_ERANGE, "gradient buckets: room for %d, the plan needs more",
                                max_out);
        out[*nb] = (struct ct_bucket){.begin = begin, .end = end, .ready_after = ready};
    }
    (*nb)++;
    return 0;
}

int ct_gradsync_plan(const struct ct_grad_span *spans, int n_modules, size_t numel,
                     const struct ct_gradsync_params *p, struct ct_bucket *out, int max_out)
{
    struct ct_gradsync_params defaults = ct_gradsync_default_params();
    if (!p)
        p = &defaults;
    int rc = check_spans(spans, n_modules, numel);
    if (rc < 0)
        return rc;
    if (numel == 0)
        return 0;

    int nb = 0;
    size_t end = numel;                     /* the open bucket is [.., end) */
    size_t cap = cap_elems(p->first_bucket_bytes);
    int lowest = -1;                        /* its lowest module with parameters */
    for (int i = n_modules - 1; i >= 0; i--) {
        if (spans[i].begin == spans[i].end)
            continue;
        lowest = i;
        if (end - spans[i].begin < cap)
            continue;
        if ((rc = emit(out, max_out, &nb, spans[i].begin, end, i)) < 0)
            return rc;
        end = spans[i].begin;
        lowest = -1;
        cap = cap_elems(p->bucket_bytes);
    }
    if (lowest >= 0)
        return (rc = emit(out, max_out, &nb, 0, end, lowest)) < 0 ? rc : nb;
    /* What is left below the last closed bucket holds no module's elements
     * (leading padding at most): it joins that bucket rather than costing a
     * collective of its own. With no module at all, it is the only bucket. */
    if (nb > 0) {
        if (out)
            out[nb - 1].begin = 0;
        return nb;
    }
    return (rc = emit(out, max_out, &nb, 0, numel, 0)) < 0 ? rc : nb;
}

/* ---------------------------------------------------------------- runtime */

/* Keep the step's first error, with its message: the hook cannot return it,
 * and other code may overwrite this thread's message before finish. */
static void keep_error(struct ct_gradsync *gs, int rc)
{
    if (rc >= 0 || gs->err < 0)
        return;
    gs->err = rc;
    snprintf(gs->err_msg, sizeof gs->err_msg, "%s", ct_error_message());
}

/* A failed communicator call: no more buckets are started, since the
 * collectives are out of step with the peers' anyway (the job must end). */
static void comm_error(struct ct_gradsync *gs, int rc)
{
    keep_error(gs, rc);
    if (rc < 0)
        gs->comm_failed = 1;
}

/* Planned bucket b as collectives of at most `most` elements (0: one),
 * into out (NULL: only counted): equal pieces, from b's end down (the order
 * buckets start in), each ready when b is. Returns how many. */
static size_t split_bucket(const struct ct_bucket *b, size_t most, struct ct_bucket *out)
{
    const size_t len = b->end - b->begin;
    const size_t n = most == 0 || len <= most ? 1 : (len + most - 1) / most;
    if (out) {
        const size_t base = len / n, extra = len % n;
        size_t end = b->end;
        for (size_t i = 0; i < n; i++) {
            const size_t sz = base + (i < extra);
            out[i] = (struct ct_bucket){.begin = end - sz, .end = end, .ready_after = b->ready_after};
            end -= sz;
        }
    }
    return n;
}

int ct_gradsync_init(struct ct_gradsync *gs, struct ct_comm *c, float *grads, size_t numel,
                     const struct ct_grad_span *spans, int n_modules,
                     const struct ct_gradsync_params *p)
{
    memset(gs, 0, sizeof *gs);
    if (!c || (numel > 0 && !grads))
        return ct_error_set(CT_EINVAL, "gradient sync: no communicator or no gradient buffer");
    gs->params = p ? *p : ct_gradsync_default_params();
    if ((unsigned)gs->params.compress >= CT_GRAD_COMPRESS_COUNT)
        return ct_error_set(CT_EINVAL, "gradient sync: unknown compression %d",
                            (int)gs->params.compress);
    if (gs->params.feedback && gs->params.compress == CT_GRAD_COMPRESS_NONE)
        return ct_error_set(CT_EINVAL, "gradient sync: error feedback needs a compression");
    const int planned = ct_gradsync_plan(spans, n_modules, numel, &gs->params, NULL, 0);
    if (planned < 0)
        return planned;
    int rc = CT_ENOMEM, nb = 0;
    /* The plan, then its buckets cut into collectives (what the runtime
     * calls buckets from here on). */
    struct ct_bucket *plan = calloc(planned > 0 ? (size_t)planned : 1, sizeof *plan);
    if (!plan)
        goto fail_buckets;
    if ((rc = ct_gradsync_plan(spans, n_modules, numel, &gs->params, plan, planned)) < 0) {
        free(plan);
        return rc;
    }
    const size_t most = gs->params.max_call_bytes / sizeof(float);
    size_t pieces = 0;
    for (int k = 0; k < planned; k++)
        pieces += split_bucket(&plan[k], most, NULL);
    if (pieces > (size_t)INT_MAX / 2) {
        free(plan);
        return ct_error_set(CT_ERANGE, "gradient sync: %zu collectives of at most %zu bytes",
                            pieces, gs->params.max_call_bytes);
    }
    nb = (int)pieces;
    rc = CT_ENOMEM;
    gs->buckets = calloc(nb > 0 ? (size_t)nb : 1, sizeof *gs->buckets);
    if (!gs->buckets) {
        free(plan);
        goto fail_buckets;
    }
    for (int k = 0, at = 0; k < planned; k++)
        at += (int)split_bucket(&plan[k], most, gs->buckets + at);
    free(plan);
    gs->reqs = calloc(nb > 0 ? (size_t)nb : 1, sizeof *gs->reqs);
    gs->started_at = calloc(nb > 0 ? (size_t)nb : 1, sizeof *gs->started_at);
    if (!gs->reqs || !gs->started_at)
        goto fail_reqs;
    const size_t cells = numel > 0 ? numel : 1;
    if (gs->params.compress == CT_GRAD_COMPRESS_BF16 &&
        !(gs->wire = calloc(cells, sizeof *gs->wire)))
        goto fail_wire;
    if (gs->params.feedback && (!(gs->residual = calloc(cells, sizeof *gs->residual)) ||
                                !(gs->residual_next = calloc(cells, sizeof *gs->residual_next))))
        goto fail_wire;
    /* Found now rather than in the middle of a step, when peers would wait. */
    for (int k = 0; k < nb; k++) {
        size_t len = gs->buckets[k].end - gs->buckets[k].begin;
        if (len > (size_t)INT_MAX) {
            rc = ct_error_set(CT_ERANGE,
                              "gradient bucket %d of %zu elements (module %d) exceeds one MPI "
                              "call's %d",
                              k, len, gs->buckets[k].ready_after, INT_MAX);
            goto fail_plan;
        }
    }
    gs->comm = c;
    gs->grads = grads;
    gs->numel = numel;
    gs->n_modules = n_modules;
    gs->n_buckets = nb;
    return 0;

fail_wire:
    free(gs->residual_next);
    free(gs->residual);
    free(gs->wire);
fail_plan:
fail_reqs:
    free(gs->started_at);
    free(gs->reqs);
    free(gs->buckets);
fail_buckets:
    if (rc == CT_ENOMEM)
        ct_error_set(rc, "gradient sync: out of memory for %d buckets of %zu elements", nb, numel);
    memset(gs, 0, sizeof *gs);
    return rc;
}

int ct_gradsync_shard(struct ct_gradsync *gs, const struct ct_shard *sh)
{
    if (!sh || sh->numel != gs->numel || sh->world != gs->comm->world)
        return ct_error_set(CT_EINVAL,
                            "gradient sync: a shard plan of %zu elements for a buffer of %zu",
                            sh ? sh->numel : 0, gs->numel);
    const size_t world = (size_t)sh->world;
    int *counts = calloc((size_t)(gs->n_buckets > 0 ? gs->n_buckets : 1) * world, sizeof *counts);
    if (!counts)
        return ct_error_set(CT_ENOMEM, "gradient sync: out of memory for the shard plan");
    for (int k = 0; k < gs->n_buckets; k++) {
        const struct ct_bucket *b = &gs->buckets[k];
        for (size_t r = 0; r < world; r++) {
            size_t lo, hi;
            ct_shard_slice(sh, (int)r, &lo, &hi);
            lo = lo > b->begin ? lo : b->begin;
            hi = hi < b->end ? hi : b->end;
            counts[(size_t)k * world + r] = hi > lo ? (int)(hi - lo) : 0;
        }
    }
    free(gs->counts);
    gs->counts = counts;
    gs->shard = sh;
    return 0;
}

void ct_gradsync_free(struct ct_gradsync *gs)
{
    free(gs->counts);
    free(gs->residual_next);
    free(gs->residual);
    free(gs->wire);
    free(gs->started_at);
    free(gs->reqs);
    free(gs->buckets);
    memset(gs, 0, sizeof *gs);
}

int ct_gradsync_begin(struct ct_gradsync *gs, int64_t side)
{
    if (gs->in_step)
        return ct_error_set(CT_ESTATE, "gradient sync: begin called twice without finish");
    gs->lowest_done = gs->n_modules;
    gs->n_started = 0;
    gs->n_completed = 0;
    gs->err = 0;
    gs->err_msg[0] = '\0';
    gs->comm_failed = 0;
    gs->n_started_in_backward = 0;
    gs->residual_pending = 0;
    gs->side = side;
    int rc = ct_comm_iallreduce_i64(gs->comm, &gs->side, 1, CT_REDUCE_MAX, &gs->side_req);
    if (rc < 0)
        return rc;
    gs->in_step = 1;
    return 0;
}

/* Compression: bucket b's gradients (plus this rank's residual, with
 * feedback) rounded into its part of the staging buffer. */
static void stage(struct ct_gradsync *gs, const struct ct_bucket *b)
{
    const size_t n = b->end - b->begin;
    if (gs->residual)
        ct_compress_round_bf16_feedback(gs->wire + b->begin, gs->grads + b->begin,
                                        gs->residual + b->begin, gs->residual_next + b->begin, n);
    else
        ct_compress_round_bf16(gs->wire + b->begin, gs->grads + b->begin, n);
}

/* Sharded: this rank's part of bucket k, as the offset of its first
 * element from the bucket's begin (the parts tile the bucket in rank
 * order), and its length. */
static size_t bucket_part(const struct ct_gradsync *gs, int k, int *count)
{
    const struct ct_bucket *b = &gs->buckets[k];
    *count = gs->counts[(size_t)k * (size_t)gs->shard->world + (size_t)gs->shard->rank];
    return *count > 0 && gs->shard->lo > b->begin ? gs->shard->lo - b->begin : 0;
}

/* Sharded: reduce-scatter bucket k in place (req NULL: blocking); the
 * rank's sums land at the bucket's start until complete_bucket. */
static int scatter_bucket(struct ct_gradsync *gs, int k, struct ct_request *req)
{
    const struct ct_bucket *b = &gs->buckets[k];
    const int *counts = &gs->counts[(size_t)k * (size_t)gs->shard->world];
    if (!gs->wire)
        return ct_comm_reduce_scatter(gs->comm, NULL, gs->grads + b->begin, counts,
                                      CT_ELEM_F32, CT_REDUCE_SUM, req);
    stage(gs, b);
    return ct_comm_reduce_scatter(gs->comm, NULL, gs->wire + b->begin, counts, CT_ELEM_BF16,
                                  CT_REDUCE_SUM, req);
}

/* Bucket k's sum is complete: with compression, widened back into the
 * gradients; sharded, this rank's part moved (or widened) from the
 * bucket's start to its own elements. */
static void complete_bucket(struct ct_gradsync *gs, int k)
{
    const struct ct_bucket *b = &gs->buckets[k];
    if (gs->shard) {
        int count;
        const size_t at = bucket_part(gs, k, &count);
        if (count == 0)
            return;
        if (gs->wire)
            ct_compress_widen_bf16(gs->grads + b->begin + at, gs->wire + b->begin, (size_t)count);
        else if (at > 0)
            memmove(gs->grads + b->begin + at, gs->grads + b->begin, (size_t)count * sizeof(float));
        return;
    }
    if (gs->wire)
        ct_compress_widen_bf16(gs->grads + b->begin, gs->wire + b->begin, b->end - b->begin);
}

/* log.trace: bucket k's collective, from its start to now, on a comm lane. */
static void trace_bucket(const struct ct_gradsync *gs, int k)
{
    if (!ct_trace_on() || gs->started_at[k] <= 0.0) /* started before the window */
        return;
    const struct ct_bucket *b = &gs->buckets[k];
    const size_t n = b->end - b->begin;
    ct_trace_span_args(CT_TRACE_COMM, "comm", gs->shard ? "reduce_scatter" : "allreduce",
                       gs->started_at[k], ct_now_s(), "bucket", k, "bytes",
                       (int64_t)(n * (gs->wire ? sizeof *gs->wire : sizeof(float))));
}

/* Start bucket k, non-blocking. */
static int start_bucket(struct ct_gradsync *gs, int k)
{
    const struct ct_bucket *b = &gs->buckets[k];
    gs->started_at[k] = ct_trace_on() ? ct_now_s() : 0.0;
    if (gs->shard)
        return scatter_bucket(gs, k, &gs->reqs[k]);
    if (!gs->wire)
        return ct_comm_iallreduce_f32(gs->comm, gs->grads + b->begin, b->end - b->begin,
                                      CT_REDUCE_SUM, &gs->reqs[k]);
    stage(gs, b);
    return ct_comm_iallreduce_bf16(gs->comm, gs->wire + b->begin, b->end - b->begin, &gs->reqs[k]);
}

/* Reduce bucket k with the blocking allreduce. */
static int reduce_blocking(struct ct_gradsync *gs, int k)
{
    const struct ct_bucket *b = &gs->buckets[k];
    if (gs->shard) {
        int rc = scatter_bucket(gs, k, NULL);
        if (rc == 0)
            complete_bucket(gs, k);
        return rc;
    }
    if (!gs->wire)
        return ct_comm_allreduce_f32(gs->comm, gs->grads + b->begin, b->end - b->begin);
    stage(gs, b);
    int rc = ct_comm_allreduce_bf16(gs->comm, gs->wire + b->begin, b->end - b->begin);
    complete_bucket(gs, k);
    return rc;
}

/* Start buckets in order while the next one is ready (every bucket when
 * `all`). Order matters: every rank must start the same collectives in the
 * same order, and readiness is monotone in bucket order. */
static void start_ready(struct ct_gradsync *gs, int all)
{
    /* The last bucket (the first layers' gradients) is complete only when
     * backward is: nothing is left to overlap it with, so finish reduces it
     * with the blocking allreduce, whose algorithms are faster than the
     * non-blocking ones' (Open MPI 4.1 on one node: 128 vs 224 us for 1 MiB
     * at N = 2). Both modes do so, so both sum each element the same way. */
    while (!gs->comm_failed && gs->n_started < gs->n_buckets - 1) {
        const struct ct_bucket *b = &gs->buckets[gs->n_started];
        if (!all && b->ready_after < gs->lowest_done)
            return;
        int rc = start_bucket(gs, gs->n_started);
        if (rc < 0) {
            comm_error(gs, rc);
            return;
        }
        gs->n_started++;
    }
}

/* Give the collectives in flight a chance to move on: every one is tested,
 * not only the oldest (Open MPI's libnbc advances all of its collectives
 * inside any MPI call, but our ring's advance only inside their own test:
 * testing the oldest alone left the later buckets' reduce-scatters
 * unstarted until it finished, and most of them to the sync wait). Buckets
 * are completed in the order they started. */
static void progress(struct ct_gradsync *gs)
{
    int done = 0, rc = 0;
    if (gs->side_req.active && (rc = ct_comm_test(gs->comm, &gs->side_req, &done)) < 0)
        comm_error(gs, rc);
    for (int k = gs->n_completed; k < gs->n_started; k++) {
        if (!gs->reqs[k].active)
            continue; /* done, waiting for the ones before it */
        if ((rc = ct_comm_test(gs->comm, &gs->reqs[k], &done)) < 0)
            comm_error(gs, rc); /* MPI freed it: inactive, the step fails */
        else if (done)
            trace_bucket(gs, k);
    }
    while (gs->n_completed < gs->n_started && !gs->reqs[gs->n_completed].active) {
        complete_bucket(gs, gs->n_completed);
        gs->n_completed++;
    }
}

void ct_gradsync_hook(void *ctx, int index)
{
    struct ct_gradsync *gs = ctx;
    if (!gs->in_step || !gs->params.overlap || gs->comm_failed)
        return;
    /* A bad index is reported by finish, but the sync still completes, so
     * that the peers are not left waiting because of our bookkeeping. */
    if (index < 0 || index >= gs->n_modules) {
        keep_error(gs, ct_error_set(CT_EINVAL,
                                    "gradient sync: the backward hook reported module %d, "
                                    "outside the %d modules planned",
                                    index, gs->n_modules));
        return;
    }
    if (index < gs->lowest_done)
        gs->lowest_done = index;
    start_ready(gs, 0);
    gs->n_started_in_backward = gs->n_started;
    progress(gs);
}

int ct_gradsync_finish(struct ct_gradsync *gs, int64_t *side_out)
{
    if (!gs->in_step)
        return ct_error_set(CT_ESTATE, "gradient sync: finish called without begin");
    double t0 = ct_now_s();
    start_ready(gs, 1);
    int blocking_last = !gs->comm_failed && gs->n_started == gs->n_buckets - 1;
    if (blocking_last) {
        gs->started_at[gs->n_buckets - 1] = ct_trace_on() ? ct_now_s() : 0.0;
        comm_error(gs, reduce_blocking(gs, gs->n_buckets - 1));
        trace_bucket(gs, gs->n_buckets - 1);
    }
    /* Every started request is completed, also after an error, so that MPI
     * no longer uses the buffer once we return. */
    comm_error(gs, ct_comm_wait(gs->comm, &gs->side_req));
    for (int k = gs->n_completed; k < gs->n_started; k++) {
        const int was_active = gs->reqs[k].active;
        comm_error(gs, ct_comm_wait(gs->comm, &gs->reqs[k]));
        if (was_active)
            trace_bucket(gs, k);
        complete_bucket(gs, k);
    }
    gs->n_started += blocking_last;
    gs->n_completed = gs->n_started;
    gs->in_step = 0;
    gs->exposed_s = ct_now_s() - t0;
    gs->steps++;
    if (gs->err < 0)
        return ct_error_set(gs->err, "%s", gs->err_msg);
    gs->residual_pending = gs->residual != NULL;
    if (side_out)
        *side_out = gs->side;
    return 0;
}

void ct_gradsync_commit(struct ct_gradsync *gs)
{
    if (!gs->residual_pending)
        return;
    gs->residual_pending = 0;
    float *t = gs->residual;
    gs->residual = gs->residual_next;
    gs->residual_next = t;
}

float *ct_gradsync_residual(struct ct_gradsync *gs) { return gs->residual; }
