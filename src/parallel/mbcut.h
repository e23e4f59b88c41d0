/* The deterministic micro-batch cut (train.deterministic): how a global
 * batch falls into micro-batches, and which of them each rank owns. The
 * cut depends on the global batch and the micro-batch alone, never on the
 * rank count, so the reproducible sums (parallel/reprosum.h) see the same
 * terms for every N.
 *
 *     struct ct_mbcut cut;
 *     if (ct_mbcut_plan(global_batch, micro_batch, world, rank, &cut) < 0) ...;
 */
#ifndef CT_PARALLEL_MBCUT_H
#define CT_PARALLEL_MBCUT_H

#include <stdint.h>

/* A global batch of global_batch samples is cut into micro-batches of
 * micro_batch samples (the last may be shorter), the same cut for any number of ranks; rank r of world owns the
 * contiguous micro-batches [first, first + count), with count = n_mb / world.
 * CT_EINVAL (with a message) when world does not divide the number of
 * micro-batches or an argument is out of range. */
struct ct_mbcut {
    int64_t n_mb;        /* micro-batches in the global batch */
    int64_t first, count; /* this rank's */
    int64_t sample_begin, sample_end; /* this rank's samples, within the global batch */
};
int ct_mbcut_plan(int64_t global_batch, int64_t micro_batch, int world, int rank,
                  struct ct_mbcut *out);

#endif
