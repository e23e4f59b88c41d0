/* The training data loader: the distributed sampler plus a prefetch thread
 * that gathers this rank's next batches while the caller's step computes.
 *
 * The batches are exactly those of ct_sampler_next + ct_dataset_gather (bit
 * for bit, whatever the prefetch depth): the thread only moves the same work
 * earlier. It runs ahead across epoch boundaries (the next epoch's shuffle is
 * computed in the background too) and hands out an end-of-epoch marker in
 * order, so the caller sees the sampler's sequence: batches of epoch e, then
 * 0 once, then the batches of epoch e + 1.
 *
 * Ownership: the loader owns its sampler, ring buffers and thread; it
 * BORROWS the data set, which must stay alive and unchanged until
 * ct_loader_free (it is only read, so a node-shared data set is fine).
 *
 *     struct ct_loader l;
 *     struct ct_loader_params p = ct_loader_default_params();
 *     ct_loader_init(&l, &train, 256, seed, world, rank, &p);
 *     ct_loader_seek(&l, epoch, step);                    // resume
 *     struct ct_batch b;
 *     while ((rc = ct_loader_next(&l, &b)) == 1) { ... b.x: (b.n, S) ... }
 *     // rc == 0: end of the epoch; the loader stands at step 0 of the next
 *     save(ct_loader_epoch(&l), ct_loader_step(&l));      // checkpoint
 *     ct_loader_free(&l);
 *
 * One thread (the caller's) uses a loader; the prefetch thread is internal.
 */
#ifndef CT_DATA_LOADER_H
#define CT_DATA_LOADER_H

#include <stdint.h>

#include "data/dataset.h"

struct ct_loader_params {
    /* How many batches the thread may have ready ahead of the caller
     * (0..CT_LOADER_MAX_PREFETCH). The ring holds prefetch + 1 buffers: one is
     * the batch the caller is working on. 0: no thread, next() gathers in the
     * caller's thread. */
    int prefetch;
};
#define CT_LOADER_MAX_PREFETCH 64

struct ct_loader_params ct_loader_default_params(void); /* prefetch = 2 */

/* One batch of this rank; its pointers stay valid until the next call of
 * ct_loader_next, ct_loader_seek or ct_loader_free. Dims: B = n, S = sample_numel,
 * K = the data set's targets per sample. */
struct ct_batch {
    int n;               /* B = global_batch / world; 0 at the end of an epoch */
    const float *x;      /* (B, S) normalized */
    const int32_t *y;    /* (B, K) targets */
    const uint32_t *idx; /* (B) global sample indices */
    int64_t epoch, step; /* the position this batch comes from */
};

struct ct_loader {
    struct ct__loader *impl; /* internal (loader.c); NULL when not initialised */
};

/* The sampler's arguments and checks (CT_EINVAL: global_batch not a multiple
 * of world, larger than the data set, ...); p NULL: the defaults. Starts the
 * thread at (epoch 0, step 0). */
int ct_loader_init(struct ct_loader *l, const struct ct_dataset *train, int global_batch,
                   uint64_t seed, int world, int rank, const struct ct_loader_params *p);
/* 1: *b is the next batch; 0: end of the epoch (b->n = 0, b->epoch = the
 * epoch that ended), after which the loader stands at step 0 of the next
 * epoch, exactly like ct_sampler_next; < 0: error. */
int ct_loader_next(struct ct_loader *l, struct ct_batch *b);
/* Make (epoch, step) the position of the next batch, as ct_sampler_seek
 * does (step == steps per epoch: next() first reports the end of that
 * epoch). Stops the thread, drops what it prefetched, and restarts it there.
 * Returns 0 or CT_EINVAL (a negative position, or step past the epoch's end)
 * or an error starting the thread. */
int ct_loader_seek(struct ct_loader *l, int64_t epoch, int64_t step);
/* The position of the next batch the CALLER will get, whatever the thread has
 * run ahead: what a checkpoint stores so that a resume is bit-exact. */
int64_t ct_loader_epoch(const struct ct_loader *l);
int64_t ct_loader_step(const struct ct_loader *l);
int64_t ct_loader_steps_per_epoch(const struct ct_loader *l);
/* Seconds the caller has spent inside ct_loader_next since init: waiting for
 * the thread, or, with prefetch 0, gathering (the data_wait_s metric; take
 * differences for an interval). Never negative, never decreasing. */
double ct_loader_wait_s(const struct ct_loader *l);
/* Batches (and end markers) ready in the ring now; for tests and metrics. */
int ct_loader_ready(const struct ct_loader *l);
/* Stops the thread (also while it waits on a full ring) and frees everything
 * but the borrowed data set. Safe on a zeroed or freed loader. */
void ct_loader_free(struct ct_loader *l);

#endif
