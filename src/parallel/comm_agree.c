/* Collective error agreement (ct_comm_agree, see comm.h): every rank
 * learns the lowest failing rank's code, and rank 0 gathers every rank's
 * message to print each distinct one once, with the ranks that hit it. It is
 * written over the communicator's slots alone, so it is the same over MPI
 * and over "self". */
#include "parallel/comm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/liveness.h"

#define AGREE_MSG 1024

static int agree(struct ct_comm *c, int rc)
{
    /* Encode (status, rank) so that MIN finds the lowest failing rank:
     * failures sort before successes, then by rank. */
    int64_t key = rc < 0 ? (int64_t)c->rank : (int64_t)c->world;
    int64_t code = rc < 0 ? rc : 0;
    int64_t v[2] = {key, -code};
    int err = ct_comm_allreduce_i64(c, v, 1, CT_REDUCE_MIN);
    if (err < 0)
        return err;
    if (v[0] == c->world)
        return 0;
    int first = (int)v[0];
    /* The failing code of the lowest failing rank. */
    int64_t fc = c->rank == first ? code : 0;
    if ((err = ct_comm_allreduce_i64(c, &fc, 1, CT_REDUCE_MIN)) < 0)
        return err;

    char mine[AGREE_MSG];
    memset(mine, 0, sizeof mine);
    if (rc < 0)
        snprintf(mine, sizeof mine, "%s", ct_error_message()[0] ? ct_error_message() : ct_strerror(rc));
    char *all = c->rank == 0 ? calloc((size_t)c->world, AGREE_MSG) : NULL;
    if (c->rank == 0 && !all)
        return ct_error_set((int)fc, "rank %d failed (and rank 0 ran out of memory collecting why)", first);
    if ((err = ct_comm_gather(c, mine, AGREE_MSG, all, 0)) < 0) {
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

/* The watchdog sees one "agree" wait, whatever collectives it takes. */
int ct_comm_agree(struct ct_comm *c, int rc)
{
    ct_liveness_wait_begin("agree", ct_liveness_collective());
    int out = agree(c, rc);
    ct_liveness_wait_end();
    return out;
}
