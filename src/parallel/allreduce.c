/* The allreduce policy (see allreduce.h): pure functions, no MPI. */
#include "parallel/allreduce.h"

const char *const ct_allreduce_names[] = {"auto", "mpi", "ring", NULL};

int ct_allreduce_use_ring(enum ct_allreduce mode, size_t bytes, int world, int spans_hosts)
{
    if (world < 2 || bytes == 0)
        return 0;
    switch (mode) {
    case CT_ALLREDUCE_RING: return 1;
    case CT_ALLREDUCE_AUTO: return spans_hosts && bytes >= CT_ALLREDUCE_RING_MIN_BYTES;
    default: return 0;
    }
}

int ct_reduce_scatter_use_ring(enum ct_allreduce mode, size_t bytes, int world)
{
    if (world < 2 || bytes == 0)
        return 0;
    switch (mode) {
    case CT_ALLREDUCE_RING: return 1;
    case CT_ALLREDUCE_AUTO: return bytes >= CT_ALLREDUCE_RING_MIN_BYTES;
    default: return 0;
    }
}

void ct_allreduce_segment(size_t n, int p, int k, size_t *lo, size_t *hi)
{
    const size_t q = n / (size_t)p, rem = n % (size_t)p, uk = (size_t)k;
    *lo = uk * q + (uk < rem ? uk : rem);
    *hi = *lo + q + (uk < rem);
}

const char *ct_allreduce_describe(enum ct_allreduce mode, int world, int spans_hosts)
{
    if (world < 2)
        return "mpi (1 rank)";
    return ct_allreduce_use_ring(mode, CT_ALLREDUCE_RING_MIN_BYTES, world, spans_hosts) ? "ring"
                                                                                        : "mpi";
}
