/* The communicator: the few collectives data-parallel training needs, behind
 * a small table of functions, so the trainer runs the same over MPI
 * (comm_mpi.c) or over one in-process rank (comm_self.c: unit tests, tools
 * that need no MPI). Every slot has an inline wrapper ct_comm_<slot>; call
 * those, never c->ops directly. docs/parallel.md has the design.
 *
 * Collectives are called by every rank in the same order. Blocking ones take
 * buffers of any length (MPI counts are chunked below INT_MAX); a collective
 * started into a struct ct_request (req non-NULL) is one MPI call, so its
 * counts are at most INT_MAX (CT_ERANGE otherwise), and its buffers belong
 * to MPI until test() or wait() reports it complete. Errors come back as
 * CT_EMPI with the MPI error string.
 *
 *     struct ct_comm c;
 *     ct_comm_init_mpi(&c, &world);                         // or ct_comm_init_self(&c)
 *     ct_comm_allreduce(&c, grads, n, CT_ELEM_F32, CT_REDUCE_SUM, NULL);  // blocking
 *     struct ct_request r = {0};
 *     ct_comm_allreduce(&c, grads, n, CT_ELEM_F32, CT_REDUCE_SUM, &r);    // started
 *     ... backward ...; ct_comm_wait(&c, &r);
 *     rc = ct_comm_agree(&c, rc);          // every rank learns if any failed
 *     ct_comm_free(&c);
 */
#ifndef CT_PARALLEL_COMM_H
#define CT_PARALLEL_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "core/shmem.h"
#include "parallel/allreduce.h"

/* The largest reduction one collective call should carry, in bytes: Open MPI
 * 4.1 on one host reduces above 16 MiB at a tenth of its rate below (its
 * temporary buffer per call is mmapped and faulted in again each time; see
 * cli/main.c's keep_freed_memory and tests/bench/README.md, stop 41). The
 * MPI communicator cuts its blocking allreduce at this size; the gradient
 * sync cuts its non-blocking buckets at it (parallel/gradsync.h). */
#define CT_COMM_MAX_CALL_BYTES ((size_t)8 << 20)

enum ct_reduce_op {
    CT_REDUCE_SUM,
    CT_REDUCE_MAX,
    CT_REDUCE_MIN,
    CT_REDUCE_COUNT
};

/* A non-blocking collective, owned by the caller (on the stack, in an array)
 * from its start until test() or wait() reports it complete. `impl` holds the
 * transport's handle (an MPI_Request) without this header including mpi.h;
 * comm_mpi.c checks at compile time that it fits. A zeroed request, or one
 * that has completed, is inactive: test() reports it done and wait() returns
 * at once, as MPI does for MPI_REQUEST_NULL. */
struct ct_request {
    union {
        unsigned char bytes[16];
        void *align_ptr;
        int64_t align_i64;
    } impl;
    int active; /* started and not yet completed: 1 impl holds MPI's handle, 2 the state
                 * of a collective of our own (comm_ring.c) */
    /* The collective started ("allreduce") and its number (core/liveness.h),
     * for the watchdog's record of what a rank waits in. */
    const char *what;
    uint64_t seq;
};

struct ct_comm;

/* Element types of the collectives. CT_ELEM_BF16 is uint16_t bf16 patterns,
 * summed in place: each step of the reduction adds two vectors in float32
 * and rounds to bf16 (parallel/compress.h says what error that implies);
 * its op must be CT_REDUCE_SUM. CT_ELEM_BYTE is only moved, never reduced. */
enum ct_elem {
    CT_ELEM_F32,
    CT_ELEM_F64,
    CT_ELEM_I32,
    CT_ELEM_I64,
    CT_ELEM_BF16,
    CT_ELEM_BYTE,
    CT_ELEM_COUNT
};
size_t ct_elem_size(enum ct_elem t);

/* req, where a slot takes one: NULL blocks; else the collective is started
 * into *req, which must be inactive (CT_ESTATE otherwise: its handle would be
 * lost), and every buffer and array passed must stay valid until it
 * completes. */
struct ct_comm_ops {
    const char *kind; /* "mpi", "self" */
    /* In place over n elements of type t. */
    int (*allreduce)(struct ct_comm *c, void *buf, size_t n, enum ct_elem t,
                     enum ct_reduce_op op, struct ct_request *req);
    int (*bcast)(struct ct_comm *c, void *buf, size_t bytes, int root);
    /* Root receives world * bytes (rank order) in recv; others may pass NULL. */
    int (*gather)(struct ct_comm *c, const void *send, size_t bytes, void *recv, int root);
    int (*barrier)(struct ct_comm *c);
    /* Reduce-scatter (the sharded optimizer's gradient sync): send holds
     * sum(counts) elements on every rank; rank r receives in recv the
     * reduction over ranks of elements [counts[0] + ... + counts[r-1], ...
     * + counts[r]). send and recv must not overlap; send NULL: in place,
     * recv holds the sum(counts) elements to reduce and rank r's result
     * lands at its start (MPI_IN_PLACE). Each count <= INT_MAX. */
    int (*reduce_scatter)(struct ct_comm *c, const void *send, void *recv, const int *counts,
                          enum ct_elem t, enum ct_reduce_op op, struct ct_request *req);
    /* All-gather: rank r's counts[r] elements land at buf + displs[r] (in
     * elements) on every rank. send NULL: in place, they are read from
     * there; else from send (which must not overlap buf), and also land at
     * this rank's own place in buf. */
    int (*allgatherv)(struct ct_comm *c, const void *send, void *buf, const int *counts,
                      const int *displs, enum ct_elem t, struct ct_request *req);
    /* Gather to root: this rank's `count` elements of send land at recv +
     * displs[r] on root (recv, counts and displs are read on root only). */
    int (*gatherv)(struct ct_comm *c, const void *send, int count, void *recv, const int *counts,
                   const int *displs, enum ct_elem t, int root);
    /* *done = 1 once req has completed (it is then inactive), else 0; each
     * call also lets MPI progress every collective in flight. */
    int (*test)(struct ct_comm *c, struct ct_request *req, int *done);
    /* Block until req has completed (it is then inactive). */
    int (*wait)(struct ct_comm *c, struct ct_request *req);
    void (*free)(struct ct_comm *c);
};

struct ct_comm {
    const struct ct_comm_ops *ops;
    void *ctx;
    int rank, world;             /* in the job */
    int local_rank, local_world; /* among the ranks on this node */
    char host[256];
};

/* Wrap an MPI communicator (duplicated, so our traffic never mixes with the
 * caller's). MPI must be initialised. */
int ct_comm_init_mpi(struct ct_comm *c, void *mpi_comm /* MPI_Comm* */);
/* A single rank, no MPI: every collective is the identity. */
void ct_comm_init_self(struct ct_comm *c);
void ct_comm_free(struct ct_comm *c);
/* The MPI communicator behind an "mpi" communicator, for MPI-IO: writes it
 * to *(MPI_Comm *)out and returns 0; CT_ENOSYS for the "self" communicator
 * (callers fall back to plain POSIX I/O there). */
int ct_comm_mpi_handle(const struct ct_comm *c, void *out);
/* How this communicator's allreduces run from now on (dist.allreduce,
 * parallel/allreduce.h): every rank must pass the same mode. "self" has
 * nothing to choose. */
void ct_comm_set_allreduce(struct ct_comm *c, enum ct_allreduce mode);
/* run.json's "allreduce": what the mode makes of gradient-sized messages
 * on this communicator ("ring", "mpi"; "self" for one rank without MPI). */
const char *ct_comm_allreduce_name(const struct ct_comm *c);

/* Fill *out with node-shared buffers over this communicator (core/shmem.h).
 * "mpi": alloc() is MPI_Win_allocate_shared over the node's ranks
 * (MPI_COMM_TYPE_SHARED, split once when the communicator is made) with all
 * the bytes on the node's first rank, which fills them; ready() agrees over
 * the node and hands the failing rank's message to every rank; release() is
 * MPI_Win_free, so it is COLLECTIVE over the node, like alloc(). "self":
 * core/shmem.h's private table (malloc, fill = 1, identity, free). The table
 * points into `c`: c must outlive every buffer from it; ct_comm_free frees
 * windows still allocated (collectively, as it is called). */
int ct_comm_shared_alloc(struct ct_comm *c, struct ct_shared_alloc *out);

/* Collective error agreement. Every rank passes its own status; every rank
 * gets back CT_OK if all succeeded, else the failing code of the lowest
 * failing rank. When something failed, rank 0's error message becomes one
 * report of every distinct failure, with the ranks that hit it
 * ("ranks 0,1,2,3: configs/x.ini:4: ..."), and the other ranks' message says
 * which rank failed, so each rank can exit non-zero without a hang and the
 * user reads each problem once. */
int ct_comm_agree(struct ct_comm *c, int rc);

/* ---------------------------------------------------------------- the slots */

/* Every blocking call is marked as a wait (core/liveness.h: which
 * collective this rank is blocked in, for the hang watchdog); a started
 * one is marked where it is waited for. */
/* core/liveness.h's collective count and waits (comm.c; internal). */
uint64_t ct__comm_started(void);
void ct__comm_wait_begin(const char *what, uint64_t seq);
void ct__comm_wait_end(void);

#define CT__COMM_WAIT(name_, call)                                \
    do {                                                         \
        ct__comm_wait_begin(name_, ct__comm_started());  \
        int rc_ = (call);                                        \
        ct__comm_wait_end();                                  \
        return rc_;                                              \
    } while (0)
#define CT__COMM_MAYBE_WAIT(name_, req, call)         \
    do {                                             \
        if (req) {                                   \
            uint64_t seq_ = ct__comm_started();      \
            int rc_ = (call);                        \
            (req)->what = name_;                     \
            (req)->seq = seq_;                       \
            return rc_;                              \
        }                                            \
        CT__COMM_WAIT(name_, call);                  \
    } while (0)

static inline int ct_comm_allreduce(struct ct_comm *c, void *buf, size_t n, enum ct_elem t,
                                    enum ct_reduce_op op, struct ct_request *req)
{
    CT__COMM_MAYBE_WAIT("allreduce", req, c->ops->allreduce(c, buf, n, t, op, req));
}
static inline int ct_comm_bcast(struct ct_comm *c, void *buf, size_t bytes, int root)
{
    CT__COMM_WAIT("bcast", c->ops->bcast(c, buf, bytes, root));
}
static inline int ct_comm_gather(struct ct_comm *c, const void *send, size_t bytes, void *recv,
                                 int root)
{
    CT__COMM_WAIT("gather", c->ops->gather(c, send, bytes, recv, root));
}
static inline int ct_comm_barrier(struct ct_comm *c) { CT__COMM_WAIT("barrier", c->ops->barrier(c)); }
static inline int ct_comm_reduce_scatter(struct ct_comm *c, const void *send, void *recv,
                                         const int *counts, enum ct_elem t, enum ct_reduce_op op,
                                         struct ct_request *req)
{
    CT__COMM_MAYBE_WAIT("reduce_scatter", req, c->ops->reduce_scatter(c, send, recv, counts, t, op, req));
}
static inline int ct_comm_allgatherv(struct ct_comm *c, const void *send, void *buf,
                                     const int *counts, const int *displs, enum ct_elem t,
                                     struct ct_request *req)
{
    CT__COMM_MAYBE_WAIT("allgather", req, c->ops->allgatherv(c, send, buf, counts, displs, t, req));
}
static inline int ct_comm_gatherv(struct ct_comm *c, const void *send, int count, void *recv,
                                  const int *counts, const int *displs, enum ct_elem t, int root)
{
    CT__COMM_WAIT("gather", c->ops->gatherv(c, send, count, recv, counts, displs, t, root));
}
static inline int ct_comm_test(struct ct_comm *c, struct ct_request *req, int *done)
{
    return c->ops->test(c, req, done);
}
static inline int ct_comm_wait(struct ct_comm *c, struct ct_request *req)
{
    if (!req->active)
        return c->ops->wait(c, req);
    ct__comm_wait_begin(req->what ? req->what : "collective", req->seq);
    int rc = c->ops->wait(c, req);
    ct__comm_wait_end();
    return rc;
}

/* Typed shorthands for the common allreduces: each is the one slot above. */
static inline int ct_comm_allreduce_f32(struct ct_comm *c, float *buf, size_t n)
{
    return ct_comm_allreduce(c, buf, n, CT_ELEM_F32, CT_REDUCE_SUM, NULL);
}
static inline int ct_comm_allreduce_f64(struct ct_comm *c, double *buf, size_t n,
                                        enum ct_reduce_op op)
{
    return ct_comm_allreduce(c, buf, n, CT_ELEM_F64, op, NULL);
}
static inline int ct_comm_allreduce_i64(struct ct_comm *c, int64_t *buf, size_t n,
                                        enum ct_reduce_op op)
{
    return ct_comm_allreduce(c, buf, n, CT_ELEM_I64, op, NULL);
}
static inline int ct_comm_allreduce_i32(struct ct_comm *c, int32_t *buf, size_t n,
                                        enum ct_reduce_op op)
{
    return ct_comm_allreduce(c, buf, n, CT_ELEM_I32, op, NULL);
}
static inline int ct_comm_allreduce_bf16(struct ct_comm *c, uint16_t *buf, size_t n)
{
    return ct_comm_allreduce(c, buf, n, CT_ELEM_BF16, CT_REDUCE_SUM, NULL);
}
static inline int ct_comm_iallreduce_f32(struct ct_comm *c, float *buf, size_t n,
                                         enum ct_reduce_op op, struct ct_request *req)
{
    return ct_comm_allreduce(c, buf, n, CT_ELEM_F32, op, req);
}
static inline int ct_comm_iallreduce_i64(struct ct_comm *c, int64_t *buf, size_t n,
                                         enum ct_reduce_op op, struct ct_request *req)
{
    return ct_comm_allreduce(c, buf, n, CT_ELEM_I64, op, req);
}
static inline int ct_comm_iallreduce_bf16(struct ct_comm *c, uint16_t *buf, size_t n,
                                          struct ct_request *req)
{
    return ct_comm_allreduce(c, buf, n, CT_ELEM_BF16, CT_REDUCE_SUM, req);
}

#endif
