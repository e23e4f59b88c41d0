/* The distributed sampler (see sampler.h). */
#include "data/sampler.h"

#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/rng.h"

void ct_sampler_permutation(uint32_t *perm, uint32_t n, uint64_t seed, int64_t epoch)
{
    struct ct_rng_key key = ct_rng_key(seed, CT_RNG_SHUFFLE);
    for (uint32_t i = 0; i < n; i++)
        perm[i] = i;
    /* Fisher-Yates from the top: position i swaps with a uniform j in [0, i]. */
    for (uint32_t i = n; i-- > 1;) {
        uint32_t ctr[3] = {(uint32_t)epoch, (uint32_t)((uint64_t)epoch >> 32), i};
        uint32_t j = ct_rng_below(key, ctr, i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

void ct_shard_range(size_t total, int world, int rank, size_t *first, size_t *count)
{
    size_t lo = total * (size_t)rank / (size_t)world;
    size_t hi = total * (size_t)(rank + 1) / (size_t)world;
    *first = lo;
    *count = hi - lo;
}

int ct_sampler_init(struct ct_sampler *s, uint32_t n, int global_batch, uint64_t seed, int world,
                    int rank)
{
    memset(s, 0, sizeof *s);
    if (world < 1 || rank < 0 || rank >= world)
        return ct_error_set(CT_EINVAL, "sampler: rank %d of %d", rank, world);
    if (global_batch < 1 || global_batch % world != 0)
        return ct_error_set(CT_EINVAL,
                            "train.global_batch = %d is not divisible by the number of ranks (%d)",
                            global_batch, world);
    if ((uint32_t)global_batch > n)
        return ct_error_set(CT_EINVAL, "train.global_batch = %d exceeds the data set size (%u)",
                            global_batch, n);
    s->perm = malloc((size_t)n * sizeof *s->perm);
    if (!s->perm)
        return ct_error_set(CT_ENOMEM, "sampler: out of memory");
    s->n = n;
    s->global_batch = global_batch;
    s->seed = seed;
    s->world = world;
    s->rank = rank;
    s->epoch = 0;
    s->step = 0;
    ct_sampler_permutation(s->perm, n, seed, 0);
    return 0;
}

void ct_sampler_free(struct ct_sampler *s)
{
    free(s->perm);
    memset(s, 0, sizeof *s);
}

void ct_sampler_seek(struct ct_sampler *s, int64_t epoch, int64_t step)
{
    if (epoch != s->epoch)
        ct_sampler_permutation(s->perm, s->n, s->seed, epoch);
    s->epoch = epoch;
    s->step = step;
}

int ct_sampler_next(struct ct_sampler *s, const uint32_t **idx, int *count)
{
    if (s->step >= ct_sampler_steps_per_epoch(s->n, s->global_batch)) {
        ct_sampler_seek(s, s->epoch + 1, 0);
        return 0;
    }
    size_t first, cnt;
    ct_shard_range((size_t)s->global_batch, s->world, s->rank, &first, &cnt);
    *idx = s->perm + (size_t)s->step * (size_t)s->global_batch + first;
    *count = (int)cnt;
    s->step++;
    return 1;
}
