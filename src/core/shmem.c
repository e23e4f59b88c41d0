/* The private node-shared table (see shmem.h): one rank, its own malloc'd
 * copy. The "self" communicator hands it out, and a data set opened without
 * a shared table uses it, so that both take the same steps as a real one. */
#include "core/shmem.h"

#include <stdlib.h>

#include "core/error.h"

static int private_alloc(void *ctx, size_t bytes, void **ptr, int *fill)
{
    (void)ctx;
    *ptr = malloc(bytes ? bytes : 1);
    *fill = 1;
    if (!*ptr)
        return ct_error_set(CT_ENOMEM, "out of memory allocating %zu bytes", bytes);
    return 0;
}

static int private_ready(void *ctx, int rc)
{
    (void)ctx;
    return rc;
}

static void private_release(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

const struct ct_shared_alloc *ct_shared_private(void)
{
    static const struct ct_shared_alloc private_table = {
        .alloc = private_alloc, .ready = private_ready, .release = private_release};
    return &private_table;
}
