/* Gradient synchronisation: the sum over ranks of the flat gradient buffer,
 * cut into buckets (whole modules, in backward's reverse order) whose
 * non-blocking allreduce the backward hook starts as soon as they are final,
 * so most of the communication hides behind the rest of backward (PyTorch
 * DDP's idea). ct_gradsync_plan() is pure (spans in, buckets out);
 * init/begin/hook/finish run a plan over a communicator. Overlap on and off
 * give the same bits; bf16 compression, error feedback and ZeRO-1's
 * reduce-scatter work per bucket. docs/parallel.md has the design.
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
 * finish means MPI itself failed: the caller ends the job (MPI_Abort).
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
    size_t max_call_bytes;     /* a bigger bucket is reduced in equal collectives of at most
                                  this many bytes, started together (8 MiB); 0: one */
};

/* 4 MiB buckets, 1 MiB for the first: backward finishes the last modules
 * first, and a small first bucket starts communication early, as PyTorch DDP
 * does. Overlap on, no compression. The caps count float32 bytes also when
 * compressing, so a plan does not depend on what travels.
 * Collectives of at most CT_COMM_MAX_CALL_BYTES (8 MiB, parallel/comm.h): a
 * module is never split between buckets, so one bucket can be a whole
 * embedding (GPT-2's 154 MB), and Open MPI 4.1 on one host reduces above
 * 16 MiB at a tenth of its rate below (an MPI_Allreduce of 16 MiB in
 * 2.7 ms, of 32 MiB in 104 ms, at N = 2; same cliff for MPI_Iallreduce:
 * tests/bench/README.md, stop 41). At 2 ranks the
 * cut changes no bit (each element is one sum of two operands); at more,
 * MPI may choose another algorithm for the smaller calls, as dist.allreduce
 * may. */
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
    double *started_at;              /* (n_buckets) log.trace: when bucket k started */

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

/* Plan the buckets (ct_gradsync_plan), cut each into collectives of at most
 * max_call_bytes (from here on, `buckets` and n_buckets are these pieces,
 * all of one planned bucket ready together), and allocate the requests (and, with
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
