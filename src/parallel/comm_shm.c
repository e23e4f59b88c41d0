/* Node-shared buffers over a communicator (ct_comm_shared_alloc, see comm.h
 * and core/shmem.h): MPI-3 shared-memory windows on the "mpi" communicator's
 * node communicator, core/shmem.h's private malloc table on "self". */
#include "parallel/comm-impl.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define SHM_MSG 1024

/* ready(): the lowest failing rank of the node wins, so that the filler
 * (node rank 0) is the one reported when it failed, and its message is copied
 * to every rank so that each can report the file that was bad. */
static int mpi_shm_ready(void *ctx, int rc)
{
    struct ct__mpi_ctx *m = ctx;
    int me, size;
    MPI_Comm_rank(m->local, &me);
    MPI_Comm_size(m->local, &size);
    int first = rc < 0 ? me : size;
    int err = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, m->local);
    if (err != MPI_SUCCESS)
        return ct__comm_mpi_fail(err, "MPI_Allreduce (node status)");
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
        return ct__comm_mpi_fail(err, "MPI_Bcast (node status)");
    if (me != first)
        ct_error_set(r.code, "%s", r.msg);
    return r.code;
}

static int mpi_shm_alloc(void *ctx, size_t bytes, void **ptr, int *fill)
{
    struct ct__mpi_ctx *m = ctx;
    *ptr = NULL;
    *fill = 0;
    int me;
    MPI_Comm_rank(m->local, &me);
    int rc = 0;
    if (bytes > (size_t)PTRDIFF_MAX)
        rc = ct_error_set(CT_EINVAL, "node-shared buffer of %zu bytes is too large", bytes);
    if (rc == 0 && m->n_wins == m->cap_wins) {
        size_t cap = m->cap_wins ? 2 * m->cap_wins : 4;
        struct ct__mpi_shm_win *w = realloc(m->wins, cap * sizeof *w);
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
        rc = ct__comm_mpi_fail(err, "MPI_Win_allocate_shared");
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
        rc = ct__comm_mpi_fail(err, "MPI_Win_shared_query");
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
    struct ct__mpi_ctx *m = ctx;
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
void ct__comm_mpi_shm_free_all(struct ct__mpi_ctx *m)
{
    while (m->n_wins > 0)
        mpi_shm_release(m, m->wins[m->n_wins - 1].base);
}

int ct_comm_shared_alloc(struct ct_comm *c, struct ct_shared_alloc *out)
{
    memset(out, 0, sizeof *out);
    if (c->ops == &ct__comm_mpi_ops) {
        struct ct__mpi_ctx *m = c->ctx;
        /* Errors as codes, so that they can be agreed on (see ready()). */
        MPI_Comm_set_errhandler(m->local, MPI_ERRORS_RETURN);
        out->alloc = mpi_shm_alloc;
        out->ready = mpi_shm_ready;
        out->release = mpi_shm_release;
        out->ctx = m;
        return 0;
    }
    if (c->ops == &ct__comm_self_ops) {
        *out = *ct_shared_private();
        return 0;
    }
    return ct_error_set(CT_ENOSYS, "communicator '%s' has no node-shared buffers", c->ops->kind);
}
