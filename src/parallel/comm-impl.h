/* Internals shared by the communicator's files (comm.c, comm_mpi.c,
 * comm_self.c, comm_shm.c, comm_agree.c); not installed, not for callers. */
#ifndef CT_PARALLEL_COMM_IMPL_H
#define CT_PARALLEL_COMM_IMPL_H

#include <mpi.h>

#include "parallel/comm.h"

/* One node-shared buffer: the address handed out and the window behind it,
 * which release() must find to free it. */
struct ct__mpi_shm_win {
    void *base;
    MPI_Win win;
};

/* The "mpi" communicator's ctx. */
struct ct__mpi_ctx {
    MPI_Comm comm;
    MPI_Comm local;
    MPI_Op bf16_sum;              /* the user-defined sum of bf16 vectors */
    MPI_Comm ring;                /* our ring allreduce's point-to-point (comm_ring.c) */
    unsigned ring_seq;            /* ring allreduces started: each has its own tag */
    int allreduce;                /* enum ct_allreduce: dist.allreduce */
    int spans_hosts;              /* the ranks are on more than one host */
    struct ct__mpi_shm_win *wins; /* live node-shared buffers, in allocation order */
    size_t n_wins, cap_wins;
};

extern const struct ct_comm_ops ct__comm_mpi_ops;
extern const struct ct_comm_ops ct__comm_self_ops;

/* CT_EMPI naming the failed call, with MPI's error string. */
int ct__comm_mpi_fail(int err, const char *what);

/* Checks shared by both transports, so that a caller that works over "self"
 * also works over MPI. request: req (NULL: blocking) must be inactive and n
 * at most INT_MAX when it is started. reduce: t is a known element type that
 * op can reduce (no byte; bf16 only summed). `what` names the collective in
 * the message. */
int ct__comm_request_check(const struct ct_request *req, size_t n, const char *what);
int ct__comm_elem_check(const struct ct_request *req, enum ct_elem t, const char *what);
int ct__comm_reduce_check(enum ct_elem t, enum ct_reduce_op op, const char *what);

/* struct ct_request's active when impl holds the state of a collective of
 * our own rather than an MPI_Request. */
#define CT__REQ_OURS 2

/* Our ring allreduce (comm_ring.c), over the ctx's ring communicator:
 * blocking (req NULL) or started into req (active = CT__REQ_OURS, impl
 * holds its state, which test/wait progress and free). Arguments already
 * checked. */
int ct__ring_allreduce(struct ct_comm *c, void *buf, size_t n, enum ct_elem t,
                       enum ct_reduce_op op, struct ct_request *req);
/* Our ring reduce-scatter (comm_ring.c), in place: buf holds sum(counts)
 * elements, rank r's sums land at buf's start (MPI_IN_PLACE's contract);
 * blocking or started into req as ct__ring_allreduce. */
int ct__ring_reduce_scatter(struct ct_comm *c, void *buf, const int *counts, enum ct_elem t,
                            enum ct_reduce_op op, struct ct_request *req);
int ct__ring_test(struct ct_request *req, int *done);
int ct__ring_wait(struct ct_request *req);

/* Frees the node-shared windows still live (comm_shm.c), newest first. */
void ct__comm_mpi_shm_free_all(struct ct__mpi_ctx *m);

#endif
