/* Node-shared buffers, as a small table of functions.
 *
 * Ranks on one node can map ONE copy of a large read-only buffer (the
 * training images) instead of one copy each. How that memory is obtained
 * depends on the communicator (an MPI-3 shared-memory window, or plain malloc
 * for a single in-process rank), and src/data may not know about MPI, so the
 * data code receives this table and src/parallel fills it
 * (ct_comm_shared_alloc in parallel/comm.h). It deliberately is not an
 * allocator for anything written after it is filled: the buffer is written by
 * one rank, once, between alloc() and ready(), and only read afterwards.
 * ct_shared_private() is the table of one rank alone (malloc, fill = 1,
 * free), for a caller that shares nothing.
 *
 *     void *p; int fill;
 *     rc = sh->alloc(sh->ctx, bytes, &p, &fill);     // collective over the node
 *     if (rc < 0) return rc;                          // the same on every rank
 *     int mine = fill ? fill_buffer(p) : 0;
 *     rc = sh->ready(sh->ctx, mine);                  // collective: agreed status
 *     ...
 *     sh->release(sh->ctx, p);                        // collective over the node
 */
#ifndef CT_CORE_SHMEM_H
#define CT_CORE_SHMEM_H

#include <stddef.h>

struct ct_shared_alloc {
    /* Collective over the node's ranks: a buffer of `bytes` all of them map;
     * *fill = 1 on exactly one rank, which must fill it. Returns 0 or the same
     * negative code on every rank of the node. */
    int (*alloc)(void *ctx, size_t bytes, void **ptr, int *fill);
    /* Collective over the node: every rank passes its status (the filler the
     * outcome of filling; the others usually 0); every rank gets the agreed
     * status: 0 when all succeeded, else the code and the error message of the
     * lowest failing rank of the node, which is the filler when it failed. */
    int (*ready)(void *ctx, int rc);
    /* Collective over the node: unmaps a buffer from alloc() on every rank
     * (the memory is gone once all of them have released it). */
    void (*release)(void *ctx, void *ptr);
    void *ctx;
};

/* The table of a single rank: alloc() is malloc and sets *fill = 1, ready()
 * returns the status it is given, release() is free. Static; never freed. */
const struct ct_shared_alloc *ct_shared_private(void);

#endif
