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

/* sqrt(sum g[i]^2), accumulated in double (NaN or inf if any g[i] is). */
double ct_grad_norm(const float *g, size_t n);

/* Returns the norm before clipping and multiplies g by
 * min(max_norm / (norm + 1e-6), 1) as torch does: a no-op when norm <=
 * max_norm (up to the 1e-6), gradients of norm just under max_norm otherwise;
 * a NaN norm makes every gradient NaN, an infinite one zeroes the finite
 * ones, exactly like torch. */
double ct_clip_grad_norm(float *g, size_t n, double max_norm);

#endif
