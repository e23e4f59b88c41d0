/* The step's sharded end (dist.shard_optimizer, ZeRO-1; internal to
 * src/train, used by step.c only).
 *
 * After the gradient sync (a reduce-scatter, in place: gradsync.h) this
 * rank holds the summed gradients of its slice [lo, hi) of the flat buffer
 * (parallel/shard.h), at their own elements. What is left of the step:
 *
 *     check the slice                      (clipping: every rank's block sums
 *                                           of squares all-gathered, so every
 *                                           rank computes the norm of the
 *                                           whole, clip.h's bits; else a scan
 *                                           and one MAX flag)
 *     for each piece of the slice:         (pieces of dist.bucket_mb)
 *         update it with its part of the optimizer state
 *         copy it to a send buffer         (two, used in turn)
 *         start its all-gather             (from there into the parameters)
 *     wait for the all-gathers
 *
 * so the all-gather of piece k travels while piece k + 1 is updated. A
 * slice of one piece is all-gathered with the blocking call instead: there
 * is nothing to overlap it with, and the blocking algorithms are faster
 * (gradsync.c's note). Every piece's update is elementwise, so the pieces
 * change no bit of the result (ct_optimizer_update).
 *
 * Why a send buffer: an all-gather in place lets the peers read this
 * rank's parameters where they live (Open MPI's single-copy transfers
 * read the sender's pages from the receiver's core), and the next step's
 * update then waits for each of those cache lines to be taken back. On
 * the 2-vCPU AMD EPYC VM this made the mlp's update of half its
 * parameters 2-4x slower than the whole unsharded update (125-180 us
 * against 60-85 us); from the copy it takes 30-40 us, the copy 17-19 us
 * (tests/bench/README.md, "Stop 24"). The buffers hold at most two
 * pieces: min(slice, 2 x piece) floats.
 *
 *     struct ct_step_shard z;
 *     rc = ct_step_shard_init(&z, &session, clip_norm);
 *     rc = ct_step_shard_check(&z, &grad_norm, &bad, &comm_s);
 *     rc = ct_step_shard_update(&z, lr, &comm_s);
 *     ct_step_shard_free(&z);
 */
#ifndef CT_TRAIN_STEP_SHARD_H
#define CT_TRAIN_STEP_SHARD_H

#include <stddef.h>

#include "parallel/comm.h"
#include "train/session.h"

struct ct_step_shard {
    struct ct_session *s;
    double clip_norm;          /* > 0: the check computes the clipping norm */
    /* Clipping: every rank's per-block sums of squares (ct_norm_blocks(P)),
     * and each rank's count and first index of those blocks. */
    double *norm_blocks;
    int *norm_counts, *norm_displs; /* (world) */
    /* The update's pieces: piece k of rank r is elements [k * piece,
     * (k + 1) * piece) of r's slice, clipped to it. */
    size_t piece;              /* elements per piece */
    int n_pieces;              /* the same on every rank (from the slice size) */
    int *piece_counts;         /* (n_pieces, world) */
    int *piece_displs;         /* (n_pieces, world) in the flat buffer */
    struct ct_request *reqs;   /* (n_pieces) */
    /* The send buffers: piece k is sent from stage + (k % 2) * piece
     * (one piece's worth when the slice is one piece). */
    float *stage;
};

/* clip_norm: optim.clip_norm (0: off). The pieces are dist.bucket_mb's
 * size. CT_ENOMEM, CT_ERANGE (a piece count past INT_MAX). */
int ct_step_shard_init(struct ct_step_shard *z, struct ct_session *s, double clip_norm);
void ct_step_shard_free(struct ct_step_shard *z);

/* Collective. Checks (and, with clipping, clips) this rank's slice of the
 * summed gradients: *norm the whole gradient's norm before clipping (0
 * without clipping), *bad whether any rank's slice held a non-finite
 * value, *comm_s the seconds its collective took. */
int ct_step_shard_check(struct ct_step_shard *z, double *norm, int *bad, double *comm_s);

/* Collective. Updates this rank's slice of the parameters with its slice
 * of the optimizer state (one step counted), and all-gathers the
 * parameters; *comm_s: the seconds spent in the all-gather's calls and
 * waits (what the updates did not hide). */
int ct_step_shard_update(struct ct_step_shard *z, double lr, double *comm_s);

#endif
