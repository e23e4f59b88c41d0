/* Communicators over MPI and over a single in-process rank (see comm.h). */
#include "parallel/comm.h"

#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/error.h"
#include "parallel/compress.h"

/* Largest count per MPI call: counts are int, and some transports misbehave
 * close to INT_MAX bytes, so stay well below it. */
#define CT_MPI_CHUNK ((size_t)1 << 28)

/* One node-shared buffer: the address handed out and the window behind it,
 * which release() must find to free it. */
struct mpi_shm_win {
    void *base;
    MPI_Win win;
};

struct mpi_ctx {
    MPI_Comm comm;
    MPI_Comm local;
    MPI_Op bf16_sum;          /* the user-defined sum of bf16 vectors */
    struct mpi_shm_win *wins; /* live node-shared buffers, in allocation order */
    size_t n_wins, cap_wins;
};

static void mpi_shm_free_all(struct mpi_ctx *m);

static int mpi_fail(int err, const char *what)
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

static int mpi_allreduce(struct ct_comm *c, void *buf, size_t n, size_t elem, MPI_Datatype t,
                         enum ct_reduce_op op)
{
    struct mpi_ctx *m = c->ctx;
    for (size_t off = 0; off < n; off += CT_MPI_CHUNK) {
        size_t cnt = n - off < CT_MPI_CHUNK ? n - off : CT_MPI_CHUNK;
        int err = MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * elem, (int)cnt, t, mpi_op(op),
                                m->comm);
        if (err != MPI_SUCCESS)
            return mpi_fail(err, "MPI_Allreduce");
    }
    return 0;
}

static int mpi_allreduce_f32(struct ct_comm *c, float *buf, size_t n, enum ct_reduce_op op)
{
    return mpi_allreduce(c, buf, n, sizeof *buf, MPI_FLOAT, op);
}

static int mpi_allreduce_f64(struct ct_comm *c, double *buf, size_t n, enum ct_reduce_op op)
{
    return mpi_allreduce(c, buf, n, sizeof *buf, MPI_DOUBLE, op);
}

static int mpi_allreduce_i64(struct ct_comm *c, int64_t *buf, size_t n, enum ct_reduce_op op)
{
    return mpi_allreduce(c, buf, n, sizeof *buf, MPI_INT64_T, op);
}

static int mpi_allreduce_i32(struct ct_comm *c, int32_t *buf, size_t n, enum ct_reduce_op op)
{
    return mpi_allreduce(c, buf, n, sizeof *buf, MPI_INT32_T, op);
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

static int mpi_allreduce_bf16(struct ct_comm *c, uint16_t *buf, size_t n)
{
    struct mpi_ctx *m = c->ctx;
    for (size_t off = 0; off < n; off += CT_MPI_CHUNK) {
        size_t cnt = n - off < CT_MPI_CHUNK ? n - off : CT_MPI_CHUNK;
        int err = MPI_Allreduce(MPI_IN_PLACE, buf + off, (int)cnt, MPI_UINT16_T, m->bf16_sum,
                                m->comm);
        if (err != MPI_SUCCESS)
            return mpi_fail(err, "MPI_Allreduce (bf16)");
    }
    return 0;
}

static int mpi_bcast(struct ct_comm *c, void *buf, size_t bytes, int root)
{
    struct mpi_ctx *m = c->ctx;
    for (size_t off = 0; off < bytes; off += CT_MPI_CHUNK) {
        size_t cnt = bytes - off < CT_MPI_CHUNK ? bytes - off : CT_MPI_CHUNK;
        int err = MPI_Bcast((char *)buf + off, (int)cnt, MPI_BYTE, root, m->comm);
        if (err != MPI_SUCCESS)
            return mpi_fail(err, "MPI_Bcast");
    }
    return 0;
}

static int mpi_gather(struct ct_comm *c, const void *send, size_t bytes, void *recv, int root)
{
    struct mpi_ctx *m = c->ctx;
    if (bytes > CT_MPI_CHUNK)
        return ct_error_set(CT_EINVAL, "gather of %zu bytes per rank is too large", bytes);
    int err = MPI_Gather(send, (int)bytes, MPI_BYTE, recv, (int)bytes, MPI_BYTE, root, m->comm);
    return err == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Gather");
}

static int mpi_barrier(struct ct_comm *c)
{
    struct mpi_ctx *m = c->ctx;
    int err = MPI_Barrier(m->comm);
    return err == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Barrier");
}

/* The handle lives in the request's opaque storage; copying it in and out
 * keeps the code free of casts that would break strict aliasing. */
_Static_assert(sizeof(MPI_Request) <= sizeof(((struct ct_request *)0)->impl.bytes),
               "struct ct_request is too small for an MPI_Request");

/* Checks shared by both transports, so a caller that works over "self" also
 * works over MPI. */
static int request_check(const struct ct_request *req, size_t n, const char *what)
{
    if (req->active)
        return ct_error_set(CT_ESTATE, "%s: the request is still in flight (wait for it first)",
                            what);
    if (n > (size_t)INT_MAX)
        return ct_error_set(CT_ERANGE,
                            "%s of %zu elements: one non-blocking collective takes at most "
                            "%d (split the buffer)",
                            what, n, INT_MAX);
    return 0;
}

static int mpi_iallreduce_op(struct ct_comm *c, void *buf, size_t n, MPI_Datatype t, MPI_Op op,
                             struct ct_request *req)
{
    int rc = request_check(req, n, "MPI_Iallreduce");
    if (rc < 0)
        return rc;
    struct mpi_ctx *m = c->ctx;
    MPI_Request r = MPI_REQUEST_NULL;
    int err = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, t, op, m->comm, &r);
    if (err != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Iallreduce");
    memcpy(req->impl.bytes, &r, sizeof r);
    req->active = 1;
    return 0;
}

static int mpi_iallreduce_f32(struct ct_comm *c, float *buf, size_t n, enum ct_reduce_op op,
                              struct ct_request *req)
{
    return mpi_iallreduce_op(c, buf, n, MPI_FLOAT, mpi_op(op), req);
}

static int mpi_iallreduce_i64(struct ct_comm *c, int64_t *buf, size_t n, enum ct_reduce_op op,
                              struct ct_request *req)
{
    return mpi_iallreduce_op(c, buf, n, MPI_INT64_T, mpi_op(op), req);
}

static int mpi_iallreduce_bf16(struct ct_comm *c, uint16_t *buf, size_t n, struct ct_request *req)
{
    return mpi_iallreduce_op(c, buf, n, MPI_UINT16_T, ((struct mpi_ctx *)c->ctx)->bf16_sum, req);
}

size_t ct_elem_size(enum ct_elem t)
{
    static const size_t size[CT_ELEM_COUNT] = {4, 8, 4, 8, 2, 1};
    return (unsigned)t < CT_ELEM_COUNT ? size[t] : 0;
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

static int vector_check(const struct ct_request *req, enum ct_elem t, const char *what)
{
    if ((unsigned)t >= CT_ELEM_COUNT)
        return ct_error_set(CT_EINVAL, "%s: unknown element type %d", what, (int)t);
    return req ? request_check(req, 0, what) : 0;
}

static int mpi_reduce_scatter(struct ct_comm *c, const void *send, void *recv, const int *counts,
                              enum ct_elem t, enum ct_reduce_op op, struct ct_request *req)
{
    int rc = vector_check(req, t, "MPI_Reduce_scatter");
    if (rc == 0 && (t == CT_ELEM_BYTE || (t == CT_ELEM_BF16 && op != CT_REDUCE_SUM)))
        rc = ct_error_set(CT_EINVAL, "MPI_Reduce_scatter: no %s of %s elements",
                          op == CT_REDUCE_SUM ? "sum" : "max/min",
                          t == CT_ELEM_BYTE ? "byte" : "bf16");
    if (rc < 0)
        return rc;
    struct mpi_ctx *m = c->ctx;
    MPI_Op o = t == CT_ELEM_BF16 ? m->bf16_sum : mpi_op(op);
    if (!send)
        send = MPI_IN_PLACE;
    if (!req) {
        int err = MPI_Reduce_scatter(send, recv, counts, mpi_elem(t), o, m->comm);
        return err == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Reduce_scatter");
    }
    MPI_Request r = MPI_REQUEST_NULL;
    int err = MPI_Ireduce_scatter(send, recv, counts, mpi_elem(t), o, m->comm, &r);
    if (err != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Ireduce_scatter");
    memcpy(req->impl.bytes, &r, sizeof r);
    req->active = 1;
    return 0;
}

static int mpi_allgatherv(struct ct_comm *c, const void *send, void *buf, const int *counts,
                          const int *displs, enum ct_elem t, struct ct_request *req)
{
    int rc = vector_check(req, t, "MPI_Allgatherv");
    if (rc < 0)
        return rc;
    struct mpi_ctx *m = c->ctx;
    const MPI_Datatype type = mpi_elem(t);
    const int count = send ? counts[c->rank] : 0;
    const MPI_Datatype send_type = send ? type : MPI_DATATYPE_NULL;
    if (!send)
        send = MPI_IN_PLACE;
    if (!req) {
        int err = MPI_Allgatherv(send, count, send_type, buf, counts, displs, type, m->comm);
        return err == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Allgatherv");
    }
    MPI_Request r = MPI_REQUEST_NULL;
    int err = MPI_Iallgatherv(send, count, send_type, buf, counts, displs, type, m->comm, &r);
    if (err != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Iallgatherv");
    memcpy(req->impl.bytes, &r, sizeof r);
    req->active = 1;
    return 0;
}

static int mpi_gatherv(struct ct_comm *c, const void *send, int count, void *recv,
                       const int *counts, const int *displs, enum ct_elem t, int root)
{
    int rc = vector_check(NULL, t, "MPI_Gatherv");
    if (rc < 0)
        return rc;
    struct mpi_ctx *m = c->ctx;
    int err = MPI_Gatherv(send, count, mpi_elem(t), recv, counts, displs, mpi_elem(t), root,
                          m->comm);
    return err == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Gatherv");
}

/* MPI frees a non-persistent request when it completes, with or without an
 * error, so the request is inactive after either outcome. */
static int mpi_test(struct ct_comm *c, struct ct_request *req, int *done)
{
    (void)c;
    *done = 1;
    if (!req->active)
        return 0;
    MPI_Request r;
    memcpy(&r, req->impl.bytes, sizeof r);
    int flag = 0;
    int err = MPI_Test(&r, &flag, MPI_STATUS_IGNORE);
    memcpy(req->impl.bytes, &r, sizeof r);
    if (err != MPI_SUCCESS) {
        req->active = 0;
        return mpi_fail(err, "MPI_Test");
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
    MPI_Request r;
    memcpy(&r, req->impl.bytes, sizeof r);
    int err = MPI_Wait(&r, MPI_STATUS_IGNORE);
    memcpy(req->impl.bytes, &r, sizeof r);
    req->active = 0;
    return err == MPI_SUCCESS ? 0 : mpi_fail(err, "MPI_Wait");
}

static void mpi_free(struct ct_comm *c)
{
    struct mpi_ctx *m = c->ctx;
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
        mpi_shm_free_all(m);
        MPI_Op_free(&m->bf16_sum);
        MPI_Comm_free(&m->local);
        MPI_Comm_free(&m->comm);
    }
    free(m->wins);
    free(m);
}

static const struct ct_comm_ops mpi_ops = {
    .kind = "mpi",
    .allreduce_f32 = mpi_allreduce_f32,
    .allreduce_f64 = mpi_allreduce_f64,
    .allreduce_i64 = mpi_allreduce_i64,
    .allreduce_i32 = mpi_allreduce_i32,
    .bcast = mpi_bcast,
    .gather = mpi_gather,
    .barrier = mpi_barrier,
    .iallreduce_f32 = mpi_iallreduce_f32,
    .iallreduce_i64 = mpi_iallreduce_i64,
    .allreduce_bf16 = mpi_allreduce_bf16,
    .iallreduce_bf16 = mpi_iallreduce_bf16,
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
    struct mpi_ctx *m = calloc(1, sizeof *m);
    if (!m)
        return ct_error_set(CT_ENOMEM, "communicator: out of memory");
    int err = MPI_Comm_dup(*(MPI_Comm *)mpi_comm, &m->comm);
    if (err != MPI_SUCCESS) {
        free(m);
        return mpi_fail(err, "MPI_Comm_dup");
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
        return mpi_fail(err, "MPI_Comm_split_type");
    }
    MPI_Comm_rank(m->local, &c->local_rank);
    MPI_Comm_size(m->local, &c->local_world);
    err = MPI_Op_create(mpi_bf16_sum, 1, &m->bf16_sum);
    if (err != MPI_SUCCESS) {
        MPI_Comm_free(&m->local);
        MPI_Comm_free(&m->comm);
        free(m);
        return mpi_fail(err, "MPI_Op_create (bf16 sum)");
    }
    c->ops = &mpi_ops;
    c->ctx = m;
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "unknown");
    return 0;
}

int ct_comm_mpi_handle(const struct ct_comm *c, void *out)
{
    if (c->ops != &mpi_ops)
        return ct_error_set(CT_ENOSYS, "communicator '%s' has no MPI handle", c->ops->kind);
    *(MPI_Comm *)out = ((struct mpi_ctx *)c->ctx)->comm;
    return 0;
}

/* ---------------------------------------------------------------- self */

static int self_allreduce_f32(struct ct_comm *c, float *buf, size_t n, enum ct_reduce_op op)
{
    (void)c, (void)buf, (void)n, (void)op;
    return 0;
}
static int self_allreduce_f64(struct ct_comm *c, double *buf, size_t n, enum ct_reduce_op op)
{
    (void)c, (void)buf, (void)n, (void)op;
    return 0;
}
static int self_allreduce_i64(struct ct_comm *c, int64_t *buf, size_t n, enum ct_reduce_op op)
{
    (void)c, (void)buf, (void)n, (void)op;
    return 0;
}
static int self_allreduce_i32(struct ct_comm *c, int32_t *buf, size_t n, enum ct_reduce_op op)
{
    (void)c, (void)buf, (void)n, (void)op;
    return 0;
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
/* One rank: the reduction is the identity, so a request completes as it
 * starts and is never left active. */
static int self_iallreduce_f32(struct ct_comm *c, float *buf, size_t n, enum ct_reduce_op op,
                               struct ct_request *req)
{
    (void)c, (void)buf, (void)op;
    return request_check(req, n, "iallreduce");
}
static int self_iallreduce_i64(struct ct_comm *c, int64_t *buf, size_t n, enum ct_reduce_op op,
                               struct ct_request *req)
{
    (void)c, (void)buf, (void)op;
    return request_check(req, n, "iallreduce");
}
static int self_allreduce_bf16(struct ct_comm *c, uint16_t *buf, size_t n)
{
    (void)c, (void)buf, (void)n;
    return 0;
}
static int self_iallreduce_bf16(struct ct_comm *c, uint16_t *buf, size_t n, struct ct_request *req)
{
    (void)c, (void)buf;
    return request_check(req, n, "iallreduce");
}
/* One rank: a reduce-scatter is a copy (in place: nothing), an all-gather nothing, a gather a
 * copy; requests complete as they start. */
static int self_reduce_scatter(struct ct_comm *c, const void *send, void *recv, const int *counts,
                               enum ct_elem t, enum ct_reduce_op op, struct ct_request *req)
{
    (void)c, (void)op;
    int rc = vector_check(req, t, "reduce_scatter");
    if (rc == 0 && t == CT_ELEM_BYTE)
        rc = ct_error_set(CT_EINVAL, "reduce_scatter: no sum of byte elements");
    if (rc == 0 && send && counts[0] > 0)
        memcpy(recv, send, (size_t)counts[0] * ct_elem_size(t));
    return rc;
}
static int self_allgatherv(struct ct_comm *c, const void *send, void *buf, const int *counts,
                           const int *displs, enum ct_elem t, struct ct_request *req)
{
    (void)c;
    int rc = vector_check(req, t, "allgatherv");
    if (rc == 0 && send && counts[0] > 0)
        memcpy((char *)buf + (size_t)displs[0] * ct_elem_size(t), send,
               (size_t)counts[0] * ct_elem_size(t));
    return rc;
}
static int self_gatherv(struct ct_comm *c, const void *send, int count, void *recv,
                        const int *counts, const int *displs, enum ct_elem t, int root)
{
    (void)c, (void)counts, (void)root;
    int rc = vector_check(NULL, t, "gatherv");
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

static const struct ct_comm_ops self_ops = {
    .kind = "self",
    .allreduce_f32 = self_allreduce_f32,
    .allreduce_f64 = self_allreduce_f64,
    .allreduce_i64 = self_allreduce_i64,
    .allreduce_i32 = self_allreduce_i32,
    .bcast = self_bcast,
    .gather = self_gather,
    .barrier = self_barrier,
    .iallreduce_f32 = self_iallreduce_f32,
    .iallreduce_i64 = self_iallreduce_i64,
    .allreduce_bf16 = self_allreduce_bf16,
    .iallreduce_bf16 = self_iallreduce_bf16,
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
    c->ops = &self_ops;
    c->world = c->local_world = 1;
    if (gethostname(c->host, sizeof c->host - 1) != 0)
        snprintf(c->host, sizeof c->host, "unknown");
}

void ct_comm_free(struct ct_comm *c)
{
    if (c->ops && c->ops->free)
        c->ops->free(c);
    memset(c, 0, sizeof *c);
}

/* ---------------------------------------------------------------- agreement */

#define AGREE_MSG 1024

int ct_comm_agree(struct ct_comm *c, int rc)
{
    /* Encode (status, rank) so that MIN finds the lowest failing rank:
     * failures sort before successes, then by rank. */
    int64_t key = rc < 0 ? (int64_t)c->rank : (int64_t)c->world;
    int64_t code = rc < 0 ? rc : 0;
    int64_t v[2] = {key, -code};
    int err = c->ops->allreduce_i64(c, v, 1, CT_REDUCE_MIN);
    if (err < 0)
        return err;
    if (v[0] == c->world)
        return 0;
    int first = (int)v[0];
    /* The failing code of the lowest failing rank. */
    int64_t fc = c->rank == first ? code : 0;
    if ((err = c->ops->allreduce_i64(c, &fc, 1, CT_REDUCE_MIN)) < 0)
        return err;

    char mine[AGREE_MSG];
    memset(mine, 0, sizeof mine);
    if (rc < 0)
        snprintf(mine, sizeof mine, "%s", ct_error_message()[0] ? ct_error_message() : ct_strerror(rc));
    char *all = c->rank == 0 ? calloc((size_t)c->world, AGREE_MSG) : NULL;
    if (c->rank == 0 && !all)
        return ct_error_set((int)fc, "rank %d failed (and rank 0 ran out of memory collecting why)", first);
    if ((err = c->ops->gather(c, mine, AGREE_MSG, all, 0)) < 0) {
        free(all);
        return err;
    }
    if (c->rank != 0) {
        if (rc >= 0)
            ct_error_set((int)fc, "stopping because rank %d failed", first);
        return (int)fc;
    }

    /* Rank 0: one line per distinct message, with the ranks that reported it. */
    char report[4 * AGREE_MSG];
    size_t used = 0;
    report[0] = '\0';
    char *done = calloc((size_t)c->world, 1);
    for (int r = 0; r < c->world && done; r++) {
        const char *msg = all + (size_t)r * AGREE_MSG;
        if (done[r] || !msg[0])
            continue;
        char ranks[256];
        size_t rl = 0;
        int n = 0;
        for (int q = r; q < c->world; q++) {
            if (done[q] || strcmp(msg, all + (size_t)q * AGREE_MSG) != 0)
                continue;
            done[q] = 1;
            if (rl < sizeof ranks - 16)
                rl += (size_t)snprintf(ranks + rl, sizeof ranks - rl, "%s%d", n ? "," : "", q);
            n++;
        }
        if (used < sizeof report - 1) {
            int w;
            if (c->world == 1)
                w = snprintf(report + used, sizeof report - used, "%s%s", used ? "\n" : "", msg);
            else
                w = snprintf(report + used, sizeof report - used, "%s%s %s: %s", used ? "\n" : "",
                             n == 1 ? "rank" : "ranks", ranks, msg);
            if (w > 0)
                used += (size_t)w < sizeof report - used ? (size_t)w : sizeof report - used - 1;
        }
    }
    free(done);
    free(all);
    ct_error_set((int)fc, "%s", report);
    return (int)fc;
}

/* ---------------------------------------------------------------- node-shared buffers */

#define SHM_MSG 1024

/* ready(): the lowest failing rank of the node wins, so that the filler
 * (node rank 0) is the one reported when it failed, and its message is copied
 * to every rank so that each can report the file that was bad. */
static int mpi_shm_ready(void *ctx, int rc)
{
    struct mpi_ctx *m = ctx;
    int me, size;
    MPI_Comm_rank(m->local, &me);
    MPI_Comm_size(m->local, &size);
    int first = rc < 0 ? me : size;
    int err = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, m->local);
    if (err != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Allreduce (node status)");
    if (first == size)
        return 0;
    struct {
        int code;
        char msg[SHM_MSG];
    } r;
    memset(&r, 0, sizeof r);
    if (me == first) {
        r.code = rc;
        snprintf(r.msg, sizeof r.msg, "%s", ct_error_message()[0] ? ct_error_message() : ct_strerror(rc));
    }
    err = MPI_Bcast(&r, (int)sizeof r, MPI_BYTE, first, m->local);
    if (err != MPI_SUCCESS)
        return mpi_fail(err, "MPI_Bcast (node status)");
    if (me != first)
        ct_error_set(r.code, "%s", r.msg);
    return r.code;
}

static int mpi_shm_alloc(void *ctx, size_t bytes, void **ptr, int *fill)
{
    struct mpi_ctx *m = ctx;
    *ptr = NULL;
    *fill = 0;
    int me;
    MPI_Comm_rank(m->local, &me);
    int rc = 0;
    if (bytes > (size_t)PTRDIFF_MAX)
        rc = ct_error_set(CT_EINVAL, "node-shared buffer of %zu bytes is too large", bytes);
    if (rc == 0 && m->n_wins == m->cap_wins) {
        size_t cap = m->cap_wins ? 2 * m->cap_wins : 4;
        struct mpi_shm_win *w = realloc(m->wins, cap * sizeof *w);
        if (w) {
            m->wins = w;
            m->cap_wins = cap;
        } else {
            rc = ct_error_set(CT_ENOMEM, "node-shared buffer: out of memory");
        }
    }
    /* Agree before the window: a rank that cannot take part must not leave
     * its peers waiting in MPI_Win_allocate_shared. */
    if ((rc = mpi_shm_ready(m, rc)) < 0)
        return rc;

    /* All the bytes on the node's first rank: one contiguous segment whose
     * pages that rank touches first while filling it. A zero-byte window is
     * legal but may come back without an address, so ask for at least one. */
    MPI_Aint size = me == 0 ? (MPI_Aint)(bytes ? bytes : 1) : 0;
    MPI_Win win = MPI_WIN_NULL;
    void *mine = NULL;
    int err = MPI_Win_allocate_shared(size, 1, MPI_INFO_NULL, m->local, &mine, &win);
    if (err != MPI_SUCCESS)
        rc = mpi_fail(err, "MPI_Win_allocate_shared");
    /* A window that some rank failed to create cannot be freed collectively,
     * so the ranks that have one keep it until MPI_Finalize: a leak on a path
     * that ends the run anyway, instead of a hang. */
    if ((rc = mpi_shm_ready(m, rc)) < 0)
        return rc;

    MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN);
    MPI_Aint qsize = 0;
    int disp = 0;
    void *base = NULL;
    err = MPI_Win_shared_query(win, 0, &qsize, &disp, &base);
    if (err != MPI_SUCCESS)
        rc = mpi_fail(err, "MPI_Win_shared_query");
    else if ((size_t)qsize < (bytes ? bytes : 1) || !base)
        rc = ct_error_set(CT_EMPI, "MPI_Win_shared_query: node rank 0 has %ld bytes, expected %zu",
                          (long)qsize, bytes);
    if ((rc = mpi_shm_ready(m, rc)) < 0) {
        MPI_Win_free(&win);
        return rc;
    }
    m->wins[m->n_wins].base = base;
    m->wins[m->n_wins].win = win;
    m->n_wins++;
    *ptr = base;
    *fill = me == 0;
    return 0;
}

static void mpi_shm_release(void *ctx, void *ptr)
{
    struct mpi_ctx *m = ctx;
    if (!ptr)
        return;
    for (size_t i = 0; i < m->n_wins; i++) {
        if (m->wins[i].base != ptr)
            continue;
        int finalized = 0;
        MPI_Finalized(&finalized);
        if (!finalized)
            MPI_Win_free(&m->wins[i].win);
        /* Keep the order: every rank frees in the same sequence. */
        memmove(m->wins + i, m->wins + i + 1, (m->n_wins - i - 1) * sizeof *m->wins);
        m->n_wins--;
        return;
    }
}

/* Windows still live when the communicator goes: freed newest first, the
 * same order on every rank, since ct_comm_free is collective too. */
static void mpi_shm_free_all(struct mpi_ctx *m)
{
    while (m->n_wins > 0)
        mpi_shm_release(m, m->wins[m->n_wins - 1].base);
}

static int self_shm_alloc(void *ctx, size_t bytes, void **ptr, int *fill)
{
    (void)ctx;
    *ptr = malloc(bytes ? bytes : 1);
    *fill = 1;
    if (!*ptr)
        return ct_error_set(CT_ENOMEM, "out of memory allocating %zu bytes", bytes);
    return 0;
}

static int self_shm_ready(void *ctx, int rc)
{
    (void)ctx;
    return rc;
}

static void self_shm_release(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

int ct_comm_shared_alloc(struct ct_comm *c, struct ct_shared_alloc *out)
{
    memset(out, 0, sizeof *out);
    if (c->ops == &mpi_ops) {
        struct mpi_ctx *m = c->ctx;
        /* Errors as codes, so that they can be agreed on (see ready()). */
        MPI_Comm_set_errhandler(m->local, MPI_ERRORS_RETURN);
        out->alloc = mpi_shm_alloc;
        out->ready = mpi_shm_ready;
        out->release = mpi_shm_release;
        out->ctx = m;
        return 0;
    }
    if (c->ops == &self_ops) {
        out->alloc = self_shm_alloc;
        out->ready = self_shm_ready;
        out->release = self_shm_release;
        return 0;
    }
    return ct_error_set(CT_ENOSYS, "communicator '%s' has no node-shared buffers", c->ops->kind);
}
