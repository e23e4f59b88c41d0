/* The step's sharded end (dist.shard_optimizer, ZeRO-1; internal to
 * src/train, used by step.c only). After the reduce-scatter this rank holds
 * the summed gradients of its slice; this checks the slice (clipping's norm
 * from every rank's block sums, else a non-finite scan), updates it piece by
 * piece and all-gathers each piece from a send buffer while the next one is
 * updated. docs/parallel.md has the pipeline and why a send buffer.
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
    double *piece_t0;          /* (n_pieces) log.trace: when piece k's all-gather started */
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
