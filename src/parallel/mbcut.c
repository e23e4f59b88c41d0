/* The deterministic micro-batch cut (see mbcut.h). */
#include "parallel/mbcut.h"

#include <string.h>

#include "core/error.h"

int ct_mbcut_plan(int64_t global_batch, int64_t micro_batch, int world, int rank,
                  struct ct_mbcut *out)
{
    memset(out, 0, sizeof *out);
    if (global_batch < 1 || micro_batch < 1 || world < 1 || rank < 0 || rank >= world)
        return ct_error_set(CT_EINVAL,
                            "micro-batch cut: global batch %lld, micro-batch %lld, rank %d of %d "
                            "(all positive, rank below world)",
                            (long long)global_batch, (long long)micro_batch, rank, world);
    const int64_t n_mb = (global_batch + micro_batch - 1) / micro_batch;
    if (n_mb % world != 0)
        return ct_error_set(CT_EINVAL,
                            "deterministic mode: %d ranks do not divide the %lld micro-batches "
                            "of %lld samples in a global batch of %lld (choose a rank count "
                            "that divides %lld, or another train.micro_batch)",
                            world, (long long)n_mb, (long long)micro_batch,
                            (long long)global_batch, (long long)n_mb);
    out->n_mb = n_mb;
    out->count = n_mb / world;
    out->first = (int64_t)rank * out->count;
    out->sample_begin = out->first * micro_batch;
    const int64_t end = (out->first + out->count) * micro_batch;
    out->sample_end = end < global_batch ? end : global_batch;
    return 0;
}
