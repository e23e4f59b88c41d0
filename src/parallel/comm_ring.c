/* Our ring allreduce and reduce-scatter over MPI point-to-point (see
 * allreduce.h for when they run). The allreduce: the n elements are cut
 * into p segments (ct_allreduce_segment); in p - 1 stages of
 * reduce-scatter each rank sends a segment to its right
 * neighbour and adds the one from its left, after which rank r holds the
 * whole sum of segment r + 1; in p - 1 stages of all-gather the sums go
 * round. Each direction of every link carries 2 (p - 1) / p of the buffer,
 * both directions at once, the least any allreduce can.
 *
 * Pipelined: each segment travels in chunks (CT_ALLREDUCE_CHUNK_BYTES), and
 * chunk column c (the c-th chunk of whichever segment a stage moves) goes
 * from one stage to the next on its own, as soon as its send and its
 * receive of the stage are done: reducing one chunk overlaps moving the
 * others, and the all-gather of early chunks overlaps the reduce-scatter
 * of late ones. Unified stage t = 0 .. 2p - 3 sends segment (r - t) mod p
 * and receives segment (r - t - 1) mod p (into a scratch chunk to add, for
 * t < p - 1; in place after), which it forwards at stage t + 1.
 *
 * Every element's sum is made on one rank, in one order (segment k: rank k's
 * value, then k + 1's added, ...), and the all-gather copies it: every rank
 * gets the same bits. Integer sums are exact, so they equal MPI's bit for
 * bit (the deterministic mode's sums). Started non-blocking, it progresses
 * inside test() and wait(), as libnbc does.
 *
 * The reduce-scatter is its first half over the caller's segments (rank k's
 * counts[k] elements), the stages shifted by one so that rank r ends with
 * the sum of segment r (made on rank r: its own value last), which then
 * moves to the buffer's start as MPI_IN_PLACE's contract has it. Every rank
 * adds and sends (p - 1) / p of the buffer: Open MPI's non-blocking one
 * (libnbc) reduces the whole buffer on rank 0 and scatters it from there,
 * which makes rank 0 do p times the work and hold a temporary of every
 * bucket in flight (docs/parallel.md). */
#include "parallel/comm-impl.h"

#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "parallel/allreduce.h"
#include "parallel/compress.h"

/* MPI guarantees tags up to 32767. */
#define RING_TAGS 32767
/* Columns in their reduce-scatter stages at once, per collective: each
 * holds one chunk of scratch, so a collective's scratch is at most this many
 * chunks (1 MiB) whatever its size, also when many are in flight at once
 * (gradient buckets that a peer has not reached yet). A column takes a free
 * slot when the one before it leaves its reduce-scatter stages. */
#define RING_SLOTS 8

struct ring_op {
    char *buf;              /* (n) the caller's, summed in place */
    char *tmp;              /* (n_slots * chunk) reduce-scatter scratch */
    size_t n, w, chunk;     /* elements, element size, chunk in elements */
    /* Reduce-scatter alone (ct__ring_reduce_scatter): segment k is
     * [seg[k], seg[k + 1]) (the caller's counts), the stages stop after the
     * reduce-scatter, shifted by one so that rank r ends with segment r,
     * which then moves to the buffer's start. NULL: an allreduce over
     * ct_allreduce_segment's segments. */
    size_t *seg;            /* (p + 1) */
    int shift, last_stage;  /* allreduce: 0, 2p - 2; reduce-scatter: 1, p - 1 */
    enum ct_elem t;
    enum ct_reduce_op op;
    MPI_Comm comm;
    int p, r, left, right, tag; /* column c's messages carry tag (tag + c) % RING_TAGS */
    int n_cols;             /* chunks of the longest segment */
    int n_slots, next_col;  /* scratch slots; the next column to start */
    int *slot;              /* (n_cols) column c's scratch slot while in the reduce-scatter */
    int *stage;             /* (n_cols) each column's stage; 2p - 2: done */
    MPI_Request *reqs;      /* (2 n_cols) column c's send at 2c, receive at 2c + 1 */
    int *done_idx;          /* (2 n_cols) MPI_Testsome's indices */
    MPI_Status *st;         /* (2 n_cols) its statuses (MPI_STATUSES_IGNORE trips MPICH's
                             * access attributes under gcc's -Wstringop-overflow) */
    int cols_left;
};

/* inout[i] = inout[i] op in[i]; unsigned arithmetic for integer sums, whose
 * wrap-around is then defined (and the same as two's complement MPI's). */
#define REDUCE_LOOP(T, UT)                                                            \
    do {                                                                              \
        T *a = inout;                                                                 \
        const T *b = in;                                                              \
        for (size_t i = 0; i < n; i++)                                                \
            a[i] = op == CT_REDUCE_SUM ? (T)((UT)a[i] + (UT)b[i])                      \
                 : op == CT_REDUCE_MAX ? (b[i] > a[i] ? b[i] : a[i])                  \
                                       : (b[i] < a[i] ? b[i] : a[i]);                 \
    } while (0)

static void reduce(void *inout, const void *in, size_t n, enum ct_elem t, enum ct_reduce_op op)
{
    switch (t) {
    case CT_ELEM_F32: REDUCE_LOOP(float, float); break;
    case CT_ELEM_F64: REDUCE_LOOP(double, double); break;
    case CT_ELEM_I32: REDUCE_LOOP(int32_t, uint32_t); break;
    case CT_ELEM_I64: REDUCE_LOOP(int64_t, uint64_t); break;
    case CT_ELEM_BF16: ct_compress_sum_bf16(inout, in, n); break;
    default: break;
    }
}

/* Column c's piece of segment k: its first element and its length (0 when
 * the segment is shorter: an empty message keeps both sides in step). */
static size_t piece(const struct ring_op *o, int k, int c, size_t *len)
{
    size_t lo, hi;
    k = ((k % o->p) + o->p) % o->p;
    if (o->seg)
        lo = o->seg[k], hi = o->seg[k + 1];
    else
        ct_allreduce_segment(o->n, o->p, k, &lo, &hi);
    size_t at = lo + (size_t)c * o->chunk;
    *len = at < hi ? (hi - at < o->chunk ? hi - at : o->chunk) : 0;
    return at < hi ? at : lo;
}

/* Post column c's send and receive of its current stage. */
static int post(struct ring_op *o, int c)
{
    const int t = o->stage[c];
    size_t slen, rlen;
    size_t s_at = piece(o, o->r - t - o->shift, c, &slen);
    size_t r_at = piece(o, o->r - t - 1 - o->shift, c, &rlen);
    void *rbuf = t < o->p - 1 ? o->tmp + (size_t)o->slot[c] * o->chunk * o->w
                              : o->buf + r_at * o->w;
    /* A tag per column: columns advance in a different order on each rank,
     * but within a column both sides move stage by stage, one message each
     * way at a time, so MPI's in-order matching pairs them right. */
    const int tag = (o->tag + c) % RING_TAGS;
    int err = MPI_Irecv(rbuf, (int)(rlen * o->w), MPI_BYTE, o->left, tag, o->comm,
                        &o->reqs[2 * c + 1]);
    if (err == MPI_SUCCESS)
        err = MPI_Isend(o->buf + s_at * o->w, (int)(slen * o->w), MPI_BYTE, o->right, tag,
                        o->comm, &o->reqs[2 * c]);
    return err == MPI_SUCCESS ? 0 : ct__comm_mpi_fail(err, "ring allreduce: MPI_Isend/MPI_Irecv");
}

/* Column c finished its stage: add what it received (reduce-scatter) and
 * go on to the next stage, or end. */
static int advance(struct ring_op *o, int c)
{
    const int t = o->stage[c];
    if (t < o->p - 1) {
        size_t len, at = piece(o, o->r - t - 1 - o->shift, c, &len);
        reduce(o->buf + at * o->w, o->tmp + (size_t)o->slot[c] * o->chunk * o->w, len, o->t,
               o->op);
        if (t == o->p - 2 && o->next_col < o->n_cols) {
            /* Its last reduce-scatter stage: the slot goes to the next column. */
            const int next = o->next_col++;
            o->slot[next] = o->slot[c];
            int rc = post(o, next);
            if (rc < 0)
                return rc;
        }
    }
    if (++o->stage[c] == o->last_stage) {
        o->cols_left--;
        return 0;
    }
    return post(o, c);
}

static void op_free(struct ring_op *o)
{
    if (!o)
        return;
    free(o->tmp);
    free(o->seg);
    free(o->slot);
    free(o->stage);
    free(o->reqs);
    free(o->done_idx);
    free(o->st);
    free(o);
}

/* Let the columns move: wait for at least one request (block) or not. */
static int progress(struct ring_op *o, int block)
{
    while (o->cols_left > 0) {
        int n_done = 0;
        int err = block ? MPI_Waitsome(2 * o->n_cols, o->reqs, &n_done, o->done_idx, o->st)
                        : MPI_Testsome(2 * o->n_cols, o->reqs, &n_done, o->done_idx, o->st);
        if (err != MPI_SUCCESS)
            return ct__comm_mpi_fail(err, block ? "ring allreduce: MPI_Waitsome"
                                                : "ring allreduce: MPI_Testsome");
        if (n_done == MPI_UNDEFINED || n_done == 0)
            return 0; /* nothing in flight (cannot happen while columns are left), or not yet */
        for (int i = 0; i < n_done; i++) {
            const int c = o->done_idx[i] / 2;
            if (o->reqs[2 * c] == MPI_REQUEST_NULL && o->reqs[2 * c + 1] == MPI_REQUEST_NULL &&
                o->stage[c] < o->last_stage) {
                int rc = advance(o, c);
                if (rc < 0)
                    return rc;
            }
        }
        if (!block)
            continue; /* keep testing while something completes */
        if (o->cols_left == 0)
            break;
    }
    return 0;
}

/* counts NULL: an allreduce of n elements; else a reduce-scatter of
 * n = sum(counts) elements, rank k's part counts[k] long. */
static int op_start(struct ct__mpi_ctx *m, const struct ct_comm *c, void *buf, size_t n,
                    const int *counts, enum ct_elem t, enum ct_reduce_op op, struct ring_op **out)
{
    struct ring_op *o = calloc(1, sizeof *o);
    if (!o || (counts && !(o->seg = malloc(((size_t)c->world + 1) * sizeof *o->seg)))) {
        free(o);
        return ct_error_set(CT_ENOMEM, "ring allreduce: out of memory");
    }
    o->shift = counts ? 1 : 0;
    o->last_stage = counts ? c->world - 1 : 2 * c->world - 2;
    size_t longest = 0;
    if (counts) {
        o->seg[0] = 0;
        for (int k = 0; k < c->world; k++) {
            o->seg[k + 1] = o->seg[k] + (size_t)counts[k];
            longest = (size_t)counts[k] > longest ? (size_t)counts[k] : longest;
        }
    }
    o->buf = buf;
    o->n = n;
    o->t = t;
    o->op = op;
    o->w = ct_elem_size(t);
    o->chunk = CT_ALLREDUCE_CHUNK_BYTES / o->w;
    o->comm = m->ring;
    o->p = c->world;
    o->r = c->rank;
    o->left = (c->rank + c->world - 1) % c->world;
    o->right = (c->rank + 1) % c->world;
    if (!counts) {
        size_t lo, hi;
        ct_allreduce_segment(n, c->world, 0, &lo, &hi); /* segment 0 is a longest one */
        longest = hi - lo;
    }
    size_t cols = (longest + o->chunk - 1) / o->chunk;
    o->n_cols = (int)(cols > 0 ? cols : 1);
    /* Tags are reused only after RING_TAGS columns: never while in flight. */
    o->tag = (int)(m->ring_seq % RING_TAGS);
    m->ring_seq = (unsigned)((m->ring_seq + (unsigned)o->n_cols) % RING_TAGS);
    o->cols_left = o->n_cols;
    o->n_slots = o->n_cols < RING_SLOTS ? o->n_cols : RING_SLOTS;
    o->next_col = o->n_slots;
    o->tmp = malloc((size_t)o->n_slots * o->chunk * o->w);
    o->slot = malloc((size_t)o->n_cols * sizeof *o->slot);
    o->stage = calloc((size_t)o->n_cols, sizeof *o->stage);
    o->reqs = malloc(2 * (size_t)o->n_cols * sizeof *o->reqs);
    o->done_idx = malloc(2 * (size_t)o->n_cols * sizeof *o->done_idx);
    o->st = malloc(2 * (size_t)o->n_cols * sizeof *o->st);
    if (!o->tmp || !o->slot || !o->stage || !o->reqs || !o->done_idx || !o->st) {
        op_free(o);
        return ct_error_set(CT_ENOMEM, "ring allreduce of %zu elements: out of memory", n);
    }
    for (int k = 0; k < 2 * o->n_cols; k++)
        o->reqs[k] = MPI_REQUEST_NULL;
    for (int col = 0; col < o->n_slots; col++) {
        o->slot[col] = col;
        int rc = post(o, col);
        if (rc < 0) {
            /* Posted requests still own the buffers: the job ends (CT_EMPI), leak them. */
            return rc;
        }
    }
    *out = o;
    return 0;
}

/* The op is complete: a reduce-scatter's segment moves to the buffer's
 * start (MPI_IN_PLACE's contract); then it is freed. */
static void op_finish(struct ring_op *o)
{
    if (o->seg && o->seg[o->r] > 0 && o->seg[o->r + 1] > o->seg[o->r])
        memmove(o->buf, o->buf + o->seg[o->r] * o->w, (o->seg[o->r + 1] - o->seg[o->r]) * o->w);
    op_free(o);
}

static int ring_run(struct ct_comm *c, void *buf, size_t n, const int *counts, enum ct_elem t,
                    enum ct_reduce_op op, struct ct_request *req)
{
    struct ct__mpi_ctx *m = c->ctx;
    struct ring_op *o = NULL;
    if (n == 0 || c->world < 2)
        return 0;
    int rc = op_start(m, c, buf, n, counts, t, op, &o);
    if (rc < 0)
        return rc;
    if (req) {
        memcpy(req->impl.bytes, &o, sizeof o);
        req->active = CT__REQ_OURS;
        return 0;
    }
    rc = progress(o, 1);
    if (rc == 0)
        op_finish(o);
    return rc;
}

int ct__ring_allreduce(struct ct_comm *c, void *buf, size_t n, enum ct_elem t,
                       enum ct_reduce_op op, struct ct_request *req)
{
    return ring_run(c, buf, n, NULL, t, op, req);
}

int ct__ring_reduce_scatter(struct ct_comm *c, void *buf, const int *counts, enum ct_elem t,
                            enum ct_reduce_op op, struct ct_request *req)
{
    size_t n = 0;
    for (int k = 0; k < c->world; k++)
        n += (size_t)counts[k];
    return ring_run(c, buf, n, counts, t, op, req);
}

_Static_assert(sizeof(struct ring_op *) <= sizeof(((struct ct_request *)0)->impl.bytes),
               "struct ct_request is too small for a pointer");

static struct ring_op *op_of(const struct ct_request *req)
{
    struct ring_op *o;
    memcpy(&o, req->impl.bytes, sizeof o);
    return o;
}

int ct__ring_test(struct ct_request *req, int *done)
{
    struct ring_op *o = op_of(req);
    int rc = progress(o, 0);
    *done = rc < 0 || o->cols_left == 0;
    if (*done) {
        if (rc == 0)
            op_finish(o);
        req->active = 0;
    }
    return rc;
}

int ct__ring_wait(struct ct_request *req)
{
    struct ring_op *o = op_of(req);
    int rc = progress(o, 1);
    if (rc == 0)
        op_finish(o);
    req->active = 0;
    return rc;
}
