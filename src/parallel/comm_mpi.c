/* The "mpi" communicator (see comm.h): each slot is the MPI collective of
 * the same name on a duplicate of the caller's communicator, with errors
 * returned as codes (MPI_ERRORS_RETURN) so that they can be reported and
 * agreed on. Node-shared windows on its node communicator are comm_shm.c. */
#include "parallel/comm-impl.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "parallel/compress.h"

/* Largest count per MPI call: counts are int, and some transports misbehave
 * close to INT_MAX bytes, so stay well below it. */
#define CT_MPI_CHUNK ((size_t)1 << 28)

/* The handle lives in the request's opaque storage; copying it in and out
 * keeps the code free of casts that would break strict aliasing. */
_Static_assert(sizeof(MPI_Request) <= sizeof(((struct ct_request *)0)->impl.bytes),
               "struct ct_request is too small for an MPI_Request");

int ct__comm_mpi_fail(int err, const char *what)
{
    char s[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, s, &len);
    return ct_error_set(CT_EMPI, "%s failed: %s", what, s);
}

static MPI_Op mpi_op(enum ct_reduce_op op)
{
    switch (op) {
    case CT_REDUCE_MAX: return MPI_MAX;
    case CT_REDUCE_MIN: return MPI_MIN;
    default: return MPI_SUM;
    }
}

static MPI_Datatype mpi_elem(enum ct_elem t)
{
    switch (t) {
    case CT_ELEM_F32: return MPI_FLOAT;
    case CT_ELEM_F64: return MPI_DOUBLE;
    case CT_ELEM_I32: return MPI_INT32_T;
    case CT_ELEM_I64: return MPI_INT64_T;
    case CT_ELEM_BF16: return MPI_UINT16_T;
    default: return MPI_BYTE;
    }
}

/* The reduction of t by op: bf16 vectors have their own sum. */
static MPI_Op mpi_reduce_op(const struct ct__mpi_ctx *m, enum ct_elem t, enum ct_reduce_op op)
{
    return t == CT_ELEM_BF16 ? m->bf16_sum : mpi_op(op);
}

/* The user-defined operation: MPI calls it with inout = in + inout on
 * `len` elements of the datatype we passed (only MPI_UINT16_T: bf16 bit
 * patterns). Commutative (float addition is, rounding included), so MPI may
 * combine operands in any order, as it may for MPI_SUM on floats. */
static void mpi_bf16_sum(void *in, void *inout, int *len, MPI_Datatype *type)
{
    (void)type;
    ct_compress_sum_bf16(inout, in, (size_t)*len);
}

/* A started collective's handle into req. */
static int mpi_started(int err, MPI_Request r, struct ct_request *req, const char *what)
{
    if (err != MPI_SUCCESS)
        return ct__comm_mpi_fail(err, what);
    memcpy(req->impl.bytes, &r, sizeof r);
    req->active = 1;
    return 0;
}

static int mpi_allreduce(struct ct_comm *c, void *buf, size_t n, enum ct_elem t,
                         enum ct_reduce_op op, struct ct_request *req)
{
    const char *what = req ? "MPI_Iallreduce" : "MPI_Allreduce";
    int rc = ct__comm_elem_check(NULL, t, what);
    if (rc == 0)
        rc = ct__comm_reduce_check(t, op, what);
    if (rc == 0)
        rc = ct__comm_request_check(req, n, what);
    if (rc < 0)
        return rc;
    struct ct__mpi_ctx *m = c->ctx;
    const size_t w = ct_elem_size(t);
    if (ct_allreduce_use_ring(m->allreduce, n * w, c->world, m->spans_hosts)) {
        if (req)
            return ct__ring_allreduce(c, buf, n, t, op, req);
        /* In slices, so that the ring's scratch stays bounded. */
        for (size_t off = 0; off < n && rc == 0; off += CT_MPI_CHUNK)
            rc = ct__ring_allreduce(c, (char *)buf + off * w,
                                    n - off < CT_MPI_CHUNK ? n - off : CT_MPI_CHUNK, t, op, NULL);
        return rc;
    }
    const MPI_Op o = mpi_reduce_op(m, t, op);
    if (req) {
        MPI_Request r = MPI_REQUEST_NULL;
        int err = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, mpi_elem(t), o, m->comm, &r);
        return mpi_started(err, r, req, what);
    }
    const size_t most = CT_COMM_MAX_CALL_BYTES / w; /* parallel/comm.h */
    for (size_t off = 0; off < n; off += most) {
        size_t cnt = n - off < most ? n - off : most;
        int err = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * w, (int)cnt, mpi_elem(t), o,
                                m->comm);
        if (err != MPI_SUCCESS)
            return ct__comm_mpi_fail(err, t == CT_ELEM_BF16 ? "MPI_Allreduce (bf16)"
                                                            : "MPI_Allreduce");
    }
    return 0;
}

static int mpi_bcast(struct ct_comm *c, void *buf, size_t bytes, int root)
{
    struct ct__mpi_ctx *m = c->ctx;
    for (size_t off = 0; off < bytes; off += CT_MPI_CHUNK) {
        size_t cnt = bytes - off < CT_MPI_CHUNK ? bytes - off : CT_MPI_CHUNK;
        int err = MPI_Bcast((char *)buf + off, (int)cnt, MPI_BYTE, root, m->comm);
        if (err != MPI_SUCCESS)
            return ct__comm_mpi_fail(err, "MPI_Bcast");
    }
    return 0;
}

static int mpi_gather(struct ct_comm *c, const void *send, size_t bytes, void *recv, int root)
{
    struct ct__mpi_ctx *m = c->ctx;
    if (bytes > CT_MPI_CHUNK)
        return ct_error_set(CT_EINVAL, "gather of %zu bytes per rank is too large", bytes);
    int err = MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root, m->comm);
    return err == MPI_SUCCESS ? 0 : ct__comm_mpi_fail(err, "MPI_Gather");
}

static int mpi_barrier(struct ct_comm *c)
{
    struct ct__mpi_ctx *m = c->ctx;
    int err = MPI_Barrier(m->comm);
    return err == MPI_SUCCESS ? 0 : ct__comm_mpi_fail(err, "MPI_Barrier");
}

static int mpi_reduce_scatter(struct ct_comm *c, const void *send, void *recv, const int *counts,
                              enum ct_elem t, enum ct_reduce_op op, struct ct_request *req)
{
    int rc = ct__comm_elem_check(req, t, "MPI_Reduce_scatter");
    if (rc == 0)
        rc = ct__comm_reduce_check(t, op, "MPI_Reduce_scatter");
    if (rc < 0)
        return rc;
    struct ct__mpi_ctx *m = c->ctx;
    if (!send) {
        size_t n = 0;
        for (int k = 0; k < c->world; k++)
            n += (size_t)counts[k];
        if (ct_reduce_scatter_use_ring(m->allreduce, n * ct_elem_size(t), c->world))
            return ct__ring_reduce_scatter(c, recv, counts, t, op, req);
    }
    const MPI_Op o = mpi_reduce_op(m, t, op);
    if (!send)
        send = MPI_IN_PLACE;
    if (!req) {
        int err = MPI_Reduce_scatter(send, recv, counts, mpi_elem(t), o, m->comm);
        return err == MPI_SUCCESS ? 0 : ct__comm_mpi_fail(err, "MPI_Reduce_scatter");
    }
    MPI_Request r = MPI_REQUEST_NULL;
    int err = MPI_Ireduce_scatter(send, recv, counts, mpi_elem(t), o, m->comm, &r);
    return mpi_started(err, r, req, "MPI_Ireduce_scatter");
}

static int mpi_allgatherv(struct ct_comm *c, const void *send, void *buf, const int *counts,
                          const int *displs, enum ct_elem t, struct ct_request *req)
{
    int rc = ct__comm_elem_check(req, t, "MPI_Allgatherv");
    if (rc < 0)
        return rc;
    struct ct__mpi_ctx *m = c->ctx;
    const MPI_Datatype type = mpi_elem(t);
    const int count = send ? counts[c->rank] : 0;
    const MPI_Datatype send_type = send ? type : MPI_DATATYPE_NULL;
    if (!send)
        send = MPI_IN_PLACE;
    if (!req) {
        int err = MPI_Allgatherv(send, count, send_type, buf, counts, displs, type, m->comm);
        return err == MPI_SUCCESS ? 0 : ct__comm_mpi_fail(err, "MPI_Allgatherv");
    }
    MPI_Request r = MPI_REQUEST_NULL;
    int err = MPI_Iallgatherv(send, count, send_type, buf, counts, displs, type, m->comm, &r);
    return mpi_started(err, r, req, "MPI_Iallgatherv");
}

static int mpi_gatherv(struct ct_comm *c, const void *send, int count, void *recv,
                       const int *counts, const int *displs, enum ct_elem t, int root)
{
    int rc = ct__comm_elem_check(NULL, t, "MPI_Gatherv");
    if (rc < 0)
        return rc;
    struct ct__mpi_ctx *m = c->ctx;
    int err = MPI_Gatherv(send, count, mpi_elem(t), recv, counts, displs, mpi_elem(t), root,
                          m->comm);
    return err == MPI_SUCCESS ? 0 : ct__comm_mpi_fail(err, "MPI_Gatherv");
}

/* MPI frees a non-persistent request when it completes, with or without an
 * error, so the request is inactive after either outcome. */
static int mpi_test(struct ct_comm *c, struct ct_request *req, int *done)
{
    (void)c;
    *done = 1;
    if (!req->active)
        return 0;
    if (req->active == CT__REQ_OURS)
        return ct__ring_test(req, done);
    MPI_Request r;
    memcpy(&r, req->impl.bytes, sizeof r);
    int flag = 0;
    int err = MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    memcpy(req->impl.bytes, &r, sizeof r);
    if (err != MPI_SUCCESS) {
        req->active = 0;
        return ct__comm_mpi_fail(err, "MPI_Test");
    }
    req->active = !flag;
    *done = flag;
    return 0;
}

static int mpi_wait(struct ct_comm *c, struct ct_request *req)
{
    (void)c;
    if (!req->active)
        return 0;
    if (req->active == CT__REQ_OURS)
        return ct__ring_wait(req);
    MPI_Request r;
    memcpy(&r, req->impl.bytes, sizeof r);
    int err = MPI_Wait(&r, MPI_STATUS_IGNORE);
    memcpy(req->impl.bytes, &r, sizeof r);
    req->active = 0;
    return err == MPI_SUCCESS ? 0 : ct__comm_mpi_fail(err, "MPI_Wait");
}

static void mpi_free(struct ct_comm *c)
{
    struct ct__mpi_ctx *m = c->ctx;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        ct__comm_mpi_shm_free_all(m);
        MPI_Op_free(&m->bf16_sum);
        MPI_Comm_free(&m->ring);
        MPI_Comm_free(&m->local);
        MPI_Comm_free(&m->comm);
    }
    free(m->wins);
    free(m);
}

const struct ct_comm_ops ct__comm_mpi_ops = {
    .kind = "mpi",
    .allreduce = mpi_allreduce,
    .bcast = mpi_bcast,
    .gather = mpi_gather,
    .barrier = mpi_barrier,
    .reduce_scatter = mpi_reduce_scatter,
    .allgatherv = mpi_allgatherv,
    .gatherv = mpi_gatherv,
    .test = mpi_test,
    .wait = mpi_wait,
    .free = mpi_free,
};

int ct_comm_init_mpi(struct ct_comm *c, void *mpi_comm)
{
    memset(c, 0, sizeof *c);
    struct ct__mpi_ctx *m = calloc(1, sizeof *m);
    if (!m)
        return ct_error_set(CT_ENOMEM, "communicator: out of memory");
    int err = MPI_Comm_dup(*(MPI_Comm *)mpi_comm, &m->comm);
    if (err != MPI_SUCCESS) {
        free(m);
        return ct__comm_mpi_fail(err, "MPI_Comm_dup");
    }
    /* Errors come back as codes so that we can report them and agree on them,
     * instead of the default handler aborting with a generic message. */
    MPI_Comm_set_errhandler(m->comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(m->comm, &c->rank);
    MPI_Comm_size(m->comm, &c->world);
    err = MPI_Comm_split_type(m->comm, MPI_COMM_TYPE_SHARED, c->rank, MPI_INFO_NULL, &m->local);
    if (err != MPI_SUCCESS) {
        MPI_Comm_free(&m->comm);
        free(m);
        return ct__comm_mpi_fail(err, "MPI_Comm_split_type");
    }
    MPI_Comm_rank(m->local, &c->local_rank);
    MPI_Comm_size(m->local, &c->local_world);
    err = MPI_Op_create(mpi_bf16_sum, 1, &m->bf16_sum);
    if (err != MPI_SUCCESS) {
        MPI_Comm_free(&m->local);
        MPI_Comm_free(&m->comm);
        free(m);
        return ct__comm_mpi_fail(err, "MPI_Op_create (bf16 sum)");
    }
    /* The ring's own communicator: its messages can never match anything
     * else's, whatever tags they carry. */
    err = MPI_Comm_dup(m->comm, &m->ring);
    if (err != MPI_SUCCESS) {
        MPI_Op_free(&m->bf16_sum);
        MPI_Comm_free(&m->local);
        MPI_Comm_free(&m->comm);
        free(m);
        return ct__comm_mpi_fail(err, "MPI_Comm_dup (ring)");
    }
    /* A node holds every rank exactly when no rank is elsewhere, so every
     * rank reaches the same answer. */
    m->spans_hosts = c->local_world < c->world;
    m->allreduce = CT_ALLREDUCE_AUTO;
    c->ops = &ct__comm_mpi_ops;
    c->ctx = m;
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "unknown");
    return 0;
}

int ct_comm_mpi_handle(const struct ct_comm *c, void *out)
{
    if (c->ops != &ct__comm_mpi_ops)
        return ct_error_set(CT_ENOSYS, "communicator '%s' has no MPI handle", c->ops->kind);
    *(MPI_Comm *)out = ((struct ct__mpi_ctx *)c->ctx)->comm;
    return 0;
}

void ct_comm_set_allreduce(struct ct_comm *c, enum ct_allreduce mode)
{
    if (c->ops == &ct__comm_mpi_ops && (unsigned)mode < CT_ALLREDUCE_COUNT)
        ((struct ct__mpi_ctx *)c->ctx)->allreduce = (int)mode;
}

const char *ct_comm_allreduce_name(const struct ct_comm *c)
{
    if (c->ops != &ct__comm_mpi_ops)
        return "self";
    const struct ct__mpi_ctx *m = c->ctx;
    return ct_allreduce_describe((enum ct_allreduce)m->allreduce, c->world, m->spans_hosts);
}
