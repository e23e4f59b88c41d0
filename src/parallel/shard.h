/* ZeRO-1's cut of the flat parameter space into one contiguous slice per
 * rank (dist.shard_optimizer).
 *
 * Rank r owns elements [lo_r, hi_r) of the flat parameter (and gradient)
 * buffer: it receives the summed gradients of that slice (a reduce-scatter
 * instead of an allreduce), keeps the optimizer state of that slice only,
 * updates those parameters, and all-gathers them back. Any buffer size and
 * any world size: every slice but the last holds `slice` elements, the last
 * what is left (possibly nothing, for tiny buffers and many ranks).
 *
 * `slice` is ceil(numel / world) rounded up to CT_SHARD_ALIGN elements, so
 * every slice starts on a multiple of it: 1 KiB of floats, a multiple of
 * the deterministic mode's summation block (CT_REPRO_BLOCK) and of the
 * clipping norm's block (CT_NORM_BLOCK), so that both are computed from
 * whole blocks on one rank and give the same bits for any world size; and
 * of the 64-byte line, so that no two ranks' slices share one. A rank's
 * optimizer state is then at most CT_SHARD_ALIGN elements more than
 * numel / world.
 *
 *     struct ct_shard sh;
 *     rc = ct_shard_plan(&sh, params.numel, world, rank);
 *     ... sh.lo, sh.hi, sh.counts[r], sh.displs[r] ...
 *     ct_shard_free(&sh);
 */
#ifndef CT_PARALLEL_SHARD_H
#define CT_PARALLEL_SHARD_H

#include <stddef.h>

#define CT_SHARD_ALIGN 256

struct ct_shard {
    size_t numel;   /* the flat buffer's elements */
    size_t slice;   /* elements per slice (the last may be shorter or empty) */
    int world, rank;
    size_t lo, hi;  /* this rank's slice [lo, hi) */
    int *counts;    /* (world) each rank's element count, for the collectives */
    int *displs;    /* (world) each rank's first element */
};

/* Plans the slices; CT_EINVAL for world < 1 or rank outside it, CT_ERANGE
 * when numel exceeds what one MPI collective can address (INT_MAX elements:
 * counts and displacements are int), CT_ENOMEM. */
int ct_shard_plan(struct ct_shard *sh, size_t numel, int world, int rank);
void ct_shard_free(struct ct_shard *sh);

/* Rank r's slice [*lo, *hi). */
void ct_shard_slice(const struct ct_shard *sh, int r, size_t *lo, size_t *hi);

#endif
