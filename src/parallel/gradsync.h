/* Gradient synchronisation: the sum over ranks of the flat gradient buffer,
 * cut into buckets that start while backward is still running.
 *
 * Backward finishes the model's top-level modules last to first. Gradients
 * are summed in buckets (byte ranges of the flat buffer, made of whole
 * modules, formed in that reverse order): as soon as every module of a bucket
 * is final, the backward hook starts a non-blocking allreduce of it, so most
 * of the communication hides behind the rest of backward, as in PyTorch DDP.
 *
 * Two layers, as for placement:
 *  - ct_gradsync_plan() is pure: module spans and caps in, buckets out. No
 *    MPI, so tests can check any layout.
 *  - ct_gradsync_init/begin/hook/finish run a plan over a communicator.
 *
 * Reproducibility: overlap on and off give the same bits. Both modes issue
 * the same allreduces over the same buckets in the same order; blocking mode
 * only starts them all after backward. Every bucket but the last is a
 * non-blocking allreduce; the last one (the first layers, complete only when
 * backward is, so there is nothing left to hide it behind) is a blocking
 * allreduce in finish, in both modes, because MPI's blocking algorithms are
 * faster (Open MPI 4.1, one node, N = 2: 128 against 224 us for 1 MiB). A
 * blocking MPI_Allreduce of the whole buffer is deliberately not used in
 * blocking mode, because MPI may pick another algorithm (another summation
 * order) for another count. The buckets tile the whole buffer, padding
 * included, so the result is the sum of the whole buffer.
 *
 * A step also carries a side channel: one int64 MAX-allreduce (the trainer's
 * stop request, for instance) started in begin and completed in finish, so
 * the step needs no extra latency-bound blocking collective.
 *
 * Compression (params.compress = CT_GRAD_COMPRESS_BF16, dist.grad_compress):
 * a bucket is rounded to bf16 into a staging buffer (2 bytes per element,
 * the buffer's layout) when it starts, summed there by the bf16 allreduce
 * (comm.h: float32 adds, a rounding to bf16 at each step) and widened back
 * into the gradients when it completes; parallel/compress.h has the
 * arithmetic and its error. Both paths do it the same way per bucket, so
 * overlap on and off still give the same bits. With params.feedback each
 * rank keeps its own rounding residual and adds it to the gradient before
 * the next rounding; a step's new residual is kept apart until
 * ct_gradsync_commit, so a step that is dropped (non-finite) leaves the
 * residual as it was, as it leaves the weights.
 *
 * Sharding (dist.shard_optimizer, ZeRO-1; ct_gradsync_shard): every bucket
 * is reduce-scattered instead of allreduced, the same buckets started at the
 * same moments: rank r receives the sum of the bucket's elements that fall
 * in its slice (parallel/shard.h), in place: the sums land in the gradient
 * buffer at the slice's own elements [lo, hi) (MPI_IN_PLACE puts a rank's
 * part at the bucket's start; it is moved to its offset when the bucket
 * completes), so no buffer of the slice's size is added beside the
 * gradients, and the rest of the buffer holds nothing meaningful after the
 * step's finish. The bytes each rank sends are those of the allreduce's
 * reduce-scatter half; the all-gather half moves the updated parameters
 * instead (the stepper's). Compression works the same way (each bucket
 * rounded whole, reduce-scattered in place in the staging buffer, this
 * rank's part widened into the gradients).
 *
 * What this is not: it neither averages (the loss is already scaled by
 * 1/global_batch, so the sum is the mean) nor makes sums independent of
 * the number of ranks (the deterministic mode does that before the sum,
 * and refuses compression).
 *
 *     struct ct_gradsync gs;
 *     struct ct_gradsync_params p = ct_gradsync_default_params();
 *     rc = ct_gradsync_init(&gs, comm, m->grads.data, m->grads.numel, spans, m->n, &p);
 *     for each step:
 *         ... backward of every micro-batch but the last ...
 *         rc = ct_gradsync_begin(&gs, stop_requested);          // collective
 *         ct_model_backward(m, B, ct_gradsync_hook, &gs);
 *         rc = ct_gradsync_finish(&gs, &stop_any);               // collective
 *     ct_gradsync_free(&gs);
 *
 * Every rank must call begin and finish for every step, also when something
 * else failed during backward (report it afterwards, with ct_comm_agree): the
 * other ranks are waiting in the same collectives. A CT_EMPI from begin or
 * finish means MPI itself failed and the collectives may be out of step
 * between ranks: the caller ends the job (MPI_Abort) rather than go on.
 */
#ifndef CT_PARALLEL_GRADSYNC_H
#define CT_PARALLEL_GRADSYNC_H

#include <stddef.h>
#include <stdint.h>

#include "parallel/comm.h"
#include "parallel/compress.h"
#include "parallel/shard.h"

/* A top-level module's elements in the flat gradient buffer. begin == end:
 * the module has no parameters (its position is then ignored). Non-empty
 * spans increase with the module index and do not overlap; gaps between them
 * (alignment padding) are allowed. */
struct ct_grad_span {
    size_t begin, end;
};

/* Elements [begin, end) of the flat buffer, summed by one allreduce. It is
 * ready once module `ready_after` finished backward: the lowest-indexed
 * module with parameters in it (0 for a bucket of padding only), and since
 * backward runs modules in reverse, every other module in it is final by
 * then. Because ready_after always names a module with parameters, a caller
 * that reports only such modules to the hook still starts every bucket. */
struct ct_bucket {
    size_t begin, end;
    int ready_after;
};

struct ct_gradsync_params {
    size_t bucket_bytes;       /* close a bucket once it holds this many bytes (4 MiB) */
    size_t first_bucket_bytes; /* ... the first one (1 MiB); 0: one module per bucket */
    int overlap;               /* 1: start buckets from the backward hook; 0: all in finish */
    enum ct_grad_compress compress; /* what travels: float32 (none) or bf16 */
    int feedback;              /* bf16 only: error feedback of each rank's rounding residual */
};

/* 4 MiB buckets, 1 MiB for the first: backward finishes the last modules
 * first, and a small first bucket starts communication early, as PyTorch DDP
 * does. Overlap on, no compression. The caps count float32 bytes also when
 * compressing, so a plan does not depend on what travels. */
struct ct_gradsync_params ct_gradsync_default_params(void);

/* Plan the buckets of a flat buffer of `numel` elements holding n_modules
 * modules. Walking the modules from the last to the first, each module's span
 * joins the open bucket (modules are never split), which closes once it
 * holds at least the cap (first_bucket_bytes for the first bucket,
 * bucket_bytes after) and some module's elements. Buckets come out in that
 * order (the order to start them) and tile [0, numel) exactly: the first
 * extends to numel, the last to 0, padding goes with the module below it.
 * numel == 0 gives no bucket; at most max(n_modules, 1) buckets. out == NULL
 * only counts. p == NULL: the defaults.
 * Returns the bucket count; CT_EINVAL for bad spans (with the module, the
 * span and the rule it breaks), CT_ERANGE if more than max_out buckets. */
int ct_gradsync_plan(const struct ct_grad_span *spans, int n_modules, size_t numel,
                     const struct ct_gradsync_params *p, struct ct_bucket *out, int max_out);

struct ct_gradsync {
    struct ct_comm *comm;
    float *grads;                    /* (numel) summed in place */
    size_t numel;
    int n_modules;
    struct ct_gradsync_params params;
    struct ct_bucket *buckets;       /* (n_buckets) in start order */
    struct ct_request *reqs;         /* (n_buckets) */
    int n_buckets;
    uint16_t *wire;                  /* (numel) bf16 staging, bucket k at its begin; NULL: none */
    float *residual;                 /* (numel) feedback: this rank's committed residual; NULL: off */
    float *residual_next;            /* (numel) the residual of the step being synced */
    int residual_pending;            /* residual_next holds a finished step's, not committed */
    const struct ct_shard *shard;    /* NULL: allreduce; else reduce-scatter in place */
    int *counts;                     /* (n_buckets, world) bucket k's elements per rank */

    /* This step. */
    int in_step;                     /* between begin and finish */
    int lowest_done;                 /* lowest module index reported by the hook */
    int n_started;                   /* buckets [0, n_started) started */
    int n_completed;                 /* buckets [0, n_completed) seen complete */
    int64_t side;                    /* the side channel's buffer */
    struct ct_request side_req;
    int err;                         /* first error of the step (0: none) */
    int comm_failed;                 /* a communicator call failed: start nothing more */
    char err_msg[512];               /* its message, as the hook cannot return it */

    /* The last finished step. */
    int n_started_in_backward;       /* buckets the hook started (overlapped) */
    double exposed_s;                /* seconds in finish: communication not hidden */
    int64_t steps;                   /* steps finished */
};

/* Plan the buckets (ct_gradsync_plan) and allocate the requests (and, with
 * compression, the staging buffer; with feedback, two zeroed residuals).
 * Keeps pointers to c, grads and nothing else. Not collective, but every
 * rank must pass the same layout and params (the plans must match).
 * CT_ERANGE if a bucket has more than INT_MAX elements; CT_EINVAL for an
 * unknown compression or feedback without compression. */
int ct_gradsync_init(struct ct_gradsync *gs, struct ct_comm *c, float *grads, size_t numel,
                     const struct ct_grad_span *spans, int n_modules,
                     const struct ct_gradsync_params *p);
/* Frees the plan. Call it outside a step: the requests of a step that was
 * begun and not finished still belong to MPI (collective requests cannot be
 * freed), which is only acceptable when the job is being aborted. */
void ct_gradsync_free(struct ct_gradsync *gs);

/* ZeRO-1: from the next step on, reduce-scatter every bucket so that this
 * rank receives the sums of sh's slice only: after finish, gradients
 * [sh->lo, sh->hi) are the sums and the others are undefined (used by MPI
 * as scratch). sh must outlive gs and describe a buffer of gs's numel. Not
 * collective, but every rank must call it (the collectives must match).
 * CT_EINVAL for a plan of another size, CT_ENOMEM. */
int ct_gradsync_shard(struct ct_gradsync *gs, const struct ct_shard *sh);

/* Call before the backward pass whose gradients are final (the last
 * micro-batch). Starts the side channel: a non-blocking MAX-allreduce of
 * `side`. Collective. CT_ESTATE if a step is already begun. */
int ct_gradsync_begin(struct ct_gradsync *gs, int64_t side);

/* A ct_backward_hook (nn/module.h), ctx = the struct ct_gradsync: module
 * `index`'s gradients are final. In overlap mode it starts, in bucket order,
 * every bucket that became ready (a bucket is ready once the hook has seen
 * its ready_after or a lower index), except the last, then tests the outstanding requests so
 * MPI progresses while backward goes on. Modules without parameters may be
 * reported or not, and reporting one twice is harmless. Outside begin..finish
 * and in blocking mode it does nothing, so it can be passed to every
 * micro-batch's backward. Errors are kept for finish; a module index out of
 * range is one (CT_EINVAL), but the sync still completes. */
void ct_gradsync_hook(void *gs, int index);

/* Starts the buckets not started yet (all of them in blocking mode, in the
 * same order through the same call), reduces the last bucket with a blocking
 * allreduce, waits for everything, and stores the
 * max over ranks of the side values in *side_out (may be NULL). Works
 * whether or not the hook was ever called. Records exposed_s (the seconds
 * spent here) and n_started_in_backward. Collective. Returns 0 or the step's
 * first error (CT_ESTATE without begin). */
int ct_gradsync_finish(struct ct_gradsync *gs, int64_t *side_out);

/* Feedback: the last finished step's sum was used (the update was made):
 * its residuals become the ones the next step adds. Not calling it (a
 * dropped step) keeps the previous residuals. No-op without feedback. */
void ct_gradsync_commit(struct ct_gradsync *gs);
/* This rank's committed residual, (numel) floats in the gradient layout,
 * for checkpoints to save and restore; NULL without feedback. */
float *ct_gradsync_residual(struct ct_gradsync *gs);

#endif
