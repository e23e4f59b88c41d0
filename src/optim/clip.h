/* Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_ with
 * norm_type 2 (torch 1.13, error_if_nonfinite=False).
 *
 * Works on the flat gradient buffer: the norm over all parameters is the 2-norm
 * of the whole buffer (the zero padding between views adds nothing). Called
 * after the gradient allreduce, every rank holds the same buffer and so
 * computes the same norm and the same scaled gradients bit for bit.
 *
 *     double norm = ct_clip_grad_norm(grads.data, grads.numel, max_norm);
 */
#ifndef CT_OPTIM_CLIP_H
#define CT_OPTIM_CLIP_H

#include <stddef.h>

/* The sum of squares is taken per block of CT_NORM_BLOCK elements (each
 * block in a fixed order, in double), then over the blocks in order: a
 * function of the buffer alone, and computable from any cut of the buffer
 * at multiples of the block. The sharded optimizer (parallel/shard.h) sums
 * its slices' blocks, all-gathers them, and gets the same bits as one
 * rank with the whole buffer. */
#define CT_NORM_BLOCK 256

/* The number of blocks of a buffer of n elements. */
static inline size_t ct_norm_blocks(size_t n) { return n / CT_NORM_BLOCK + (n % CT_NORM_BLOCK != 0); }

/* out[b] = the sum of squares of block b of g[0..n) (the last one may be
 * short), ct_norm_blocks(n) values. */
void ct_grad_sumsq_blocks(const float *g, size_t n, double *out);
/* sqrt of the in-order sum of nb block values (NaN or inf if any is). */
double ct_grad_norm_blocks(const double *blocks, size_t nb);

/* sqrt(sum g[i]^2) by blocks as above (NaN or inf if any g[i] is). */
double ct_grad_norm(const float *g, size_t n);

/* Multiplies g by torch's clipping coefficient for a gradient of norm
 * `norm` (see ct_clip_grad_norm), which the caller computed, possibly over
 * more elements than these (a shard of the whole). */
void ct_clip_scale(float *g, size_t n, double norm, double max_norm);

/* Returns the norm before clipping and multiplies g by
 * min(max_norm / (norm + 1e-6), 1) as torch does: a no-op when norm <=
 * max_norm (up to the 1e-6), gradients of norm just under max_norm otherwise;
 * a NaN norm makes every gradient NaN, an infinite one zeroes the finite
 * ones, exactly like torch. */
double ct_clip_grad_norm(float *g, size_t n, double max_norm);

#endif
