/* What both transports share (see comm.h): element sizes, the argument
 * checks that make "self" refuse what MPI would, and ct_comm_free. The
 * transports are comm_mpi.c and comm_self.c; agreement is comm_agree.c,
 * node-shared buffers comm_shm.c. */
#include "parallel/comm-impl.h"

#include <limits.h>
#include <string.h>

#include "core/error.h"
#include "core/liveness.h"

size_t ct_elem_size(enum ct_elem t)
{
    static const size_t size[CT_ELEM_COUNT] = {4, 8, 4, 8, 2, 1};
    return (unsigned)t < CT_ELEM_COUNT ? size[t] : 0;
}

int ct__comm_request_check(const struct ct_request *req, size_t n, const char *what)
{
    if (!req)
        return 0;
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

int ct__comm_elem_check(const struct ct_request *req, enum ct_elem t, const char *what)
{
    if ((unsigned)t >= CT_ELEM_COUNT)
        return ct_error_set(CT_EINVAL, "%s: unknown element type %d", what, (int)t);
    return ct__comm_request_check(req, 0, what);
}

int ct__comm_reduce_check(enum ct_elem t, enum ct_reduce_op op, const char *what)
{
    if (t == CT_ELEM_BYTE || (t == CT_ELEM_BF16 && op != CT_REDUCE_SUM))
        return ct_error_set(CT_EINVAL, "%s: no %s of %s elements", what,
                            op == CT_REDUCE_SUM ? "sum" : "max/min",
                            t == CT_ELEM_BYTE ? "byte" : "bf16");
    return 0;
}

uint64_t ct__comm_started(void) { return ct_liveness_collective(); }
void ct__comm_wait_begin(const char *what, uint64_t seq) { ct_liveness_wait_begin(what, seq); }
void ct__comm_wait_end(void) { ct_liveness_wait_end(); }

void ct_comm_free(struct ct_comm *c)
{
    if (c->ops && c->ops->free)
        c->ops->free(c);
    memset(c, 0, sizeof *c);
}
