/* ZeRO-1's slices of the flat parameter space (see shard.h). */
#include "parallel/shard.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void ct_shard_slice(const struct ct_shard *sh, int r, size_t *lo, size_t *hi)
{
    size_t a = sh->slice * (size_t)r;
    *lo = a < sh->numel ? a : sh->numel;
    *hi = *lo + sh->slice < sh->numel ? *lo + sh->slice : sh->numel;
}

int ct_shard_plan(struct ct_shard *sh, size_t numel, int world, int rank)
{
    memset(sh, 0, sizeof *sh);
    if (world < 1 || rank < 0 || rank >= world)
        return ct_error_set(CT_EINVAL, "optimizer sharding: rank %d of a world of %d", rank, world);
    if (numel > (size_t)INT_MAX)
        return ct_error_set(CT_ERANGE,
                            "dist.shard_optimizer: %zu parameters exceed the %d elements one MPI "
                            "collective addresses",
                            numel, INT_MAX);
    size_t per = numel / (size_t)world + (numel % (size_t)world != 0);
    sh->slice = (per + CT_SHARD_ALIGN - 1) / CT_SHARD_ALIGN * CT_SHARD_ALIGN;
    sh->numel = numel;
    sh->world = world;
    sh->rank = rank;
    sh->counts = malloc((size_t)world * sizeof *sh->counts);
    sh->displs = malloc((size_t)world * sizeof *sh->displs);
    if (!sh->counts || !sh->displs) {
        ct_shard_free(sh);
        return ct_error_set(CT_ENOMEM, "optimizer sharding: out of memory for %d ranks", world);
    }
    for (int r = 0; r < world; r++) {
        size_t lo, hi;
        ct_shard_slice(sh, r, &lo, &hi);
        sh->counts[r] = (int)(hi - lo);
        sh->displs[r] = (int)lo;
    }
    ct_shard_slice(sh, rank, &sh->lo, &sh->hi);
    return 0;
}

void ct_shard_free(struct ct_shard *sh)
{
    free(sh->counts);
    free(sh->displs);
    memset(sh, 0, sizeof *sh);
}
