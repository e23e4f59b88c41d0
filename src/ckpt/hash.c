/* The section digests of a checkpoint write, shared out over the ranks:
 * each rank hashes the sections ct__ckpt_hash_owners gives it on a helper
 * thread while its main thread writes data.bin (hashing costs about as much
 * as the write on a fast disk; overlapped, the pair costs the larger of the
 * two), and the sharded sections spread over several ranks are gathered to
 * rank 0 one at a time and hashed there. Not here: who owns what (layout.c),
 * gathering the digests for the manifest (write.c). */
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>

#include "ckpt/write-impl.h"
#include "core/error.h"

/* The thread makes no MPI calls. */
static void *hash_main(void *arg)
{
    struct ct__ckpt_hasher *j = arg;
    for (int i = 0; i < j->L->n && j->rc == 0; i++)
        if (j->owner[i] == j->rank)
            j->rc = ct_sha256_buf(j->ct->tensors[i].data, j->L->len[i],
                                  &j->out[(size_t)i * CT_SHA256_LEN]);
    return NULL;
}

void ct__ckpt_hash_start(struct ct__ckpt_hasher *h)
{
    h->rc = 0;
    h->threaded = pthread_create(&h->thread, NULL, hash_main, h) == 0;
}

int ct__ckpt_hash_finish(struct ct__ckpt_hasher *h)
{
    if (h->threaded)
        pthread_join(h->thread, NULL);
    else
        hash_main(h); /* no thread to be had: hash here, after the write */
    h->threaded = 0;
    return h->rc < 0 ? ct_error_set(h->rc, "checkpoint: hashing the tensors failed") : 0;
}

/* One section at a time, so rank 0 holds at most the largest of them. */
int ct__ckpt_hash_spread(struct ct_comm *c, const struct ct__ckpt_layout *L,
                         const struct ct_ckpt_content *ct, int *owner, uint8_t *sha)
{
    const int world = c->world;
    uint64_t most = 0;
    for (int i = 0; i < L->n; i++)
        if (owner[i] < 0 && L->len[i] > most)
            most = L->len[i];
    if (most == 0)
        return 0;
    int rc = 0;
    if (most > (uint64_t)INT_MAX)
        rc = ct_error_set(CT_ERANGE, "checkpoint: a sharded section of %" PRIu64 " bytes spread over "
                          "several ranks (at most %d can be gathered to be hashed)", most, INT_MAX);
    int *counts = malloc(2 * (size_t)world * sizeof *counts);
    uint8_t *buf = c->rank == 0 ? malloc((size_t)most) : NULL;
    if (rc == 0 && (!counts || (c->rank == 0 && !buf)))
        rc = ct_error_set(CT_ENOMEM, "checkpoint: out of memory for a section of %" PRIu64
                          " bytes", most);
    if ((rc = ct_comm_agree(c, rc)) < 0)
        goto out;
    for (int i = 0; i < L->n && rc == 0; i++) {
        if (owner[i] >= 0)
            continue;
        for (int r = 0; r < world; r++) {
            const uint64_t *p = ct__ckpt_part_of(L, r, i);
            counts[r] = (int)(p[1] - p[0]);
            counts[world + r] = (int)p[0];
        }
        const struct ct_ckpt_tensor *t = &ct->tensors[i];
        rc = ct_comm_gatherv(c, t->data, (int)(t->part_end - t->part_begin), buf, counts,
                             counts + world, CT_ELEM_BYTE, 0);
        if (rc == 0 && c->rank == 0)
            rc = ct_sha256_buf(buf, L->len[i], &sha[(size_t)i * CT_SHA256_LEN]);
        owner[i] = 0;
    }
out:
    free(counts);
    free(buf);
    return rc;
}
