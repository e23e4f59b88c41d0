/* The section digests of a checkpoint write, shared out over the ranks:
 * each rank hashes the sections ct__ckpt_hash_owners gives it on a helper
 * thread while its main thread writes data.bin (hashing costs about as much
 * as the write on a fast disk; overlapped, the pair costs the larger of the
 * two), and the sharded sections spread over several ranks are gathered to
 * rank 0 one at a time, 8 MiB windows of it at a time, and hashed there. Not here: who owns what (layout.c),
 * gathering the digests for the manifest (write.c). */
#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

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

/* Bytes of a sharded section gathered to rank 0 at a time: its digest is
 * computed as the windows arrive, so rank 0 holds one window, not the
 * section (a GPT-2 small embedding's AdamW moment is 154 MB). */
uint64_t ct__ckpt_spread_window = (uint64_t)8 << 20; /* tests may lower it */
#define SPREAD_WINDOW ct__ckpt_spread_window

/* Section i (spread over the ranks) through windows of SPREAD_WINDOW bytes:
 * each rank sends what its part holds of the window, rank 0 hashes it. */
static int hash_one_spread(struct ct_comm *c, const struct ct__ckpt_layout *L,
                           const struct ct_ckpt_tensor *t, int i, int *counts, uint8_t *buf,
                           uint8_t sha[CT_SHA256_LEN])
{
    const int world = c->world;
    struct ct_sha256 h;
    int rc = 0, open = 0;
    if (c->rank == 0)
        open = (rc = ct_sha256_init(&h)) == 0;
    /* Every rank takes part in every window's gather, also after rank 0's
     * hashing failed (the error is agreed by the caller's writer). */
    for (uint64_t w0 = 0; w0 < L->len[i]; w0 += SPREAD_WINDOW) {
        const uint64_t w1 = L->len[i] - w0 < SPREAD_WINDOW ? L->len[i] : w0 + SPREAD_WINDOW;
        for (int r = 0; r < world; r++) {
            const uint64_t *p = ct__ckpt_part_of(L, r, i);
            const uint64_t a = p[0] > w0 ? p[0] : w0, b = p[1] < w1 ? p[1] : w1;
            counts[r] = a < b ? (int)(b - a) : 0;
            counts[world + r] = a < b ? (int)(a - w0) : 0;
        }
        const uint64_t *mine = ct__ckpt_part_of(L, c->rank, i);
        const int n = counts[c->rank];
        const uint8_t *send = n > 0 ? (const uint8_t *)t->data + (counts[world + c->rank] + w0 -
                                                                   mine[0])
                                    : (const uint8_t *)t->data;
        int g = ct_comm_gatherv(c, send, n, buf, counts, counts + world, CT_ELEM_BYTE, 0);
        if (g < 0)
            return g; /* a failed collective ends the job; the context is not freed */
        if (open && rc == 0)
            rc = ct_sha256_update(&h, buf, (size_t)(w1 - w0));
    }
    if (open) {
        uint8_t out[CT_SHA256_LEN];
        int f = ct_sha256_final(&h, out);
        rc = rc < 0 ? rc : f;
        if (rc == 0)
            memcpy(sha, out, CT_SHA256_LEN);
    }
    return rc;
}

/* One section at a time, through windows (hash_one_spread). */
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
    most = most < SPREAD_WINDOW ? most : SPREAD_WINDOW;
    int rc = 0;
    int *counts = malloc(2 * (size_t)world * sizeof *counts);
    uint8_t *buf = c->rank == 0 ? malloc((size_t)most) : NULL;
    if (!counts || (c->rank == 0 && !buf))
        rc = ct_error_set(CT_ENOMEM, "checkpoint: out of memory for a window of %" PRIu64
                          " bytes", most);
    if ((rc = ct_comm_agree(c, rc)) < 0)
        goto out;
    /* Every section on every rank, whatever failed before: the gathers must
     * pair up; the first error is kept. */
    for (int i = 0; i < L->n; i++) {
        if (owner[i] >= 0)
            continue;
        int r = hash_one_spread(c, L, &ct->tensors[i], i, counts, buf,
                                &sha[(size_t)i * CT_SHA256_LEN]);
        rc = rc < 0 ? rc : r;
        owner[i] = 0;
    }
out:
    free(counts);
    free(buf);
    return rc;
}
