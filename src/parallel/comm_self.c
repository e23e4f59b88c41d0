/* The "self" communicator (see comm.h): one in-process rank, no MPI. A
 * reduction is the identity, a reduce-scatter or gather a copy, and a
 * started collective completes as it starts, so a request is never left
 * active. The arguments are checked as over MPI, so that a caller tested
 * here also works there. */
#include "parallel/comm-impl.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"

static int self_allreduce(struct ct_comm *c, void *buf, size_t n, enum ct_elem t,
                          enum ct_reduce_op op, struct ct_request *req)
{
    (void)c, (void)buf;
    int rc = ct__comm_elem_check(NULL, t, "allreduce");
    if (rc == 0)
        rc = ct__comm_reduce_check(t, op, "allreduce");
    return rc < 0 ? rc : ct__comm_request_check(req, n, "iallreduce");
}

static int self_bcast(struct ct_comm *c, void *buf, size_t bytes, int root)
{
    (void)c, (void)buf, (void)bytes, (void)root;
    return 0;
}

static int self_gather(struct ct_comm *c, const void *send, size_t bytes, void *recv, int root)
{
    (void)c, (void)root;
    if (recv != send)
        memcpy(recv, send, bytes);
    return 0;
}

static int self_barrier(struct ct_comm *c)
{
    (void)c;
    return 0;
}

static int self_reduce_scatter(struct ct_comm *c, const void *send, void *recv, const int *counts,
                               enum ct_elem t, enum ct_reduce_op op, struct ct_request *req)
{
    (void)c;
    int rc = ct__comm_elem_check(req, t, "reduce_scatter");
    if (rc == 0)
        rc = ct__comm_reduce_check(t, op, "reduce_scatter");
    if (rc == 0 && send && counts[0] > 0)
        memcpy(recv, send, (size_t)counts[0] * ct_elem_size(t));
    return rc;
}

static int self_allgatherv(struct ct_comm *c, const void *send, void *buf, const int *counts,
                           const int *displs, enum ct_elem t, struct ct_request *req)
{
    (void)c;
    int rc = ct__comm_elem_check(req, t, "allgatherv");
    if (rc == 0 && send && counts[0] > 0)
        memcpy((char *)buf + (size_t)displs[0] * ct_elem_size(t), send,
               (size_t)counts[0] * ct_elem_size(t));
    return rc;
}

static int self_gatherv(struct ct_comm *c, const void *send, int count, void *recv,
                        const int *counts, const int *displs, enum ct_elem t, int root)
{
    (void)c, (void)counts, (void)root;
    int rc = ct__comm_elem_check(NULL, t, "gatherv");
    if (rc == 0 && count > 0)
        memmove((char *)recv + (size_t)displs[0] * ct_elem_size(t), send,
                (size_t)count * ct_elem_size(t));
    return rc;
}

static int self_test(struct ct_comm *c, struct ct_request *req, int *done)
{
    (void)c;
    req->active = 0;
    *done = 1;
    return 0;
}

static int self_wait(struct ct_comm *c, struct ct_request *req)
{
    (void)c;
    req->active = 0;
    return 0;
}

static void self_free(struct ct_comm *c) { (void)c; }

const struct ct_comm_ops ct__comm_self_ops = {
    .kind = "self",
    .allreduce = self_allreduce,
    .bcast = self_bcast,
    .gather = self_gather,
    .barrier = self_barrier,
    .reduce_scatter = self_reduce_scatter,
    .allgatherv = self_allgatherv,
    .gatherv = self_gatherv,
    .test = self_test,
    .wait = self_wait,
    .free = self_free,
};

void ct_comm_init_self(struct ct_comm *c)
{
    memset(c, 0, sizeof *c);
    c->ops = &ct__comm_self_ops;
    c->world = c->local_world = 1;
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "unknown");
}
