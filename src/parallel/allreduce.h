/* Which allreduce runs: MPI's own (MPI_Allreduce / MPI_Iallreduce) or our
 * ring over point-to-point (comm_ring.c: reduce-scatter then all-gather,
 * pipelined in chunks), chosen per call by a pure policy from
 * dist.allreduce, the message size and whether the ranks span hosts. Why a
 * ring of our own: across hosts Open MPI's in-place MPI_Iallreduce is a
 * binomial reduce + broadcast (libnbc, p < 4 or in place), which uses each
 * direction of a link one after the other (twice the wire time), and its
 * blocking algorithms' many rendezvous round trips stall when a rank is not
 * on a CPU; docs/parallel.md has the measurements. Not here: the ring
 * itself (comm_ring.c, MPI), the records (transport.h).
 *
 *     ct_comm_set_allreduce(&comm, CT_ALLREDUCE_AUTO);    // dist.allreduce
 *     if (ct_allreduce_use_ring(mode, bytes, world, spans_hosts)) ...
 */
#ifndef CT_PARALLEL_ALLREDUCE_H
#define CT_PARALLEL_ALLREDUCE_H

#include <stddef.h>

/* dist.allreduce. Append-only; the names are the config's values. */
enum ct_allreduce {
    CT_ALLREDUCE_AUTO, /* ring for large messages when the ranks span hosts, else MPI's */
    CT_ALLREDUCE_MPI,  /* always MPI's */
    CT_ALLREDUCE_RING, /* always the ring (world > 1) */
    CT_ALLREDUCE_COUNT
};
extern const char *const ct_allreduce_names[]; /* "auto", "mpi", "ring", NULL */

/* auto: messages from this size on go round the ring. Below it an
 * allreduce is latency-bound and MPI's (recursive doubling: log2 p rounds,
 * against the ring's 2(p - 1)) is faster. */
#define CT_ALLREDUCE_RING_MIN_BYTES ((size_t)64 << 10)
/* The ring's chunk: each segment travels in pieces of at most this many
 * bytes, so that reducing one piece overlaps sending the next. */
#define CT_ALLREDUCE_CHUNK_BYTES ((size_t)128 << 10)

/* 1 if an allreduce of `bytes` over `world` ranks runs as the ring under
 * `mode`; spans_hosts: the ranks are on more than one host. Pure; the same
 * answer on every rank as long as they pass the same arguments. */
int ct_allreduce_use_ring(enum ct_allreduce mode, size_t bytes, int world, int spans_hosts);

/* 1 if an in-place reduce-scatter of `bytes` in all over `world` ranks
 * runs as our ring (comm_ring.c) under `mode`: ring always (world > 1);
 * auto from CT_ALLREDUCE_RING_MIN_BYTES on, on one host too (Open MPI's
 * non-blocking reduce-scatter reduces everything on rank 0, then scatters:
 * ZeRO-1's gradients at GPT-2 small's shape ran 15 % slower and rank 0 held
 * a temporary of every bucket in flight); mpi never. Pure. */
int ct_reduce_scatter_use_ring(enum ct_allreduce mode, size_t bytes, int world);

/* Segment k of n elements cut into p (the ring's unit): [*lo, *hi), the
 * first n % p segments one element longer. */
void ct_allreduce_segment(size_t n, int p, int k, size_t *lo, size_t *hi);

/* What the policy makes of large (gradient-sized) messages on this job, for
 * run.json's "allreduce": "ring", "mpi" or "mpi (1 rank)". */
const char *ct_allreduce_describe(enum ct_allreduce mode, int world, int spans_hosts);

#endif
