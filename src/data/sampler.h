/* The distributed sampler: one global sample order per epoch, cut into
 * per-rank slices.
 *
 * The order of epoch e is a Fisher-Yates permutation of [0, n) whose draws
 * come from Philox keyed by (seed, CT_RNG_SHUFFLE) with counter (e, i): a pure
 * function of (seed, epoch), identical for every world size. Global step s of
 * the epoch takes positions [s*G, (s+1)*G) of that order; rank r of N takes the
 * contiguous slice [r*G/N, (r+1)*G/N) of it. An incomplete last global batch
 * is dropped (drop_last), so every step is a full global batch and the
 * trajectory does not depend on N. Which sample a rank sees is therefore a
 * pure function of (seed, epoch, step, rank, N), testable without MPI.
 *
 * The epoch is part of the sampler's state and moves with it: there is no
 * set_epoch() to forget.
 *
 *     struct ct_sampler s;
 *     ct_sampler_init(&s, 60000, 256, seed, world, rank);
 *     const uint32_t *idx; int n;
 *     while (ct_sampler_next(&s, &idx, &n)) { ... n == 256 / world ... }
 *     // returns 0 at the end of the epoch; the next call starts epoch + 1
 */
#ifndef CT_DATA_SAMPLER_H
#define CT_DATA_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

/* perm[0..n) = the order of `epoch`. */
void ct_sampler_permutation(uint32_t *perm, uint32_t n, uint64_t seed, int64_t epoch);

/* Rank `rank`'s slice [*first, *first + *count) of a batch of `total` items
 * shared by `world` ranks: contiguous, in rank order, sizes differing by at most
 * one, covering every item exactly once. Used for training slices (where
 * world divides total) and for the test set. */
void ct_shard_range(size_t total, int world, int rank, size_t *first, size_t *count);

/* Full global batches per epoch (drop_last). */
static inline int64_t ct_sampler_steps_per_epoch(size_t n, int global_batch)
{
    return (int64_t)(n / (size_t)global_batch);
}

struct ct_sampler {
    uint32_t n;          /* data set size */
    int global_batch;
    uint64_t seed;
    int world, rank;
    int64_t epoch;       /* current epoch (0-based) */
    int64_t step;        /* next global step inside the epoch */
    uint32_t *perm;      /* order of `epoch` */
};

/* global_batch must be a multiple of world and <= n (CT_EINVAL otherwise). */
int ct_sampler_init(struct ct_sampler *s, uint32_t n, int global_batch, uint64_t seed, int world,
                    int rank);
void ct_sampler_free(struct ct_sampler *s);
/* Jump to (epoch, step); recomputes the order when the epoch changes. */
void ct_sampler_seek(struct ct_sampler *s, int64_t epoch, int64_t step);
/* This rank's indices of the next global batch; returns 1, or 0 at the end of
 * the epoch (after which the sampler stands at step 0 of the next epoch). */
int ct_sampler_next(struct ct_sampler *s, const uint32_t **idx, int *count);

#endif
