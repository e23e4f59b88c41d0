/* Fused softmax + cross-entropy, as torch.nn.functional.cross_entropy.
 *
 * Dims legend: B = rows on this rank, K = classes.
 *
 * Numerically stable (the row maximum is subtracted before exp, and the loss is
 * logsumexp - logit[y], computed in double). The loss of a data-parallel step
 * is the mean over the GLOBAL batch: each rank passes grad_scale = 1/global_B,
 * so the gradients, once summed across ranks, are exactly those of the mean;
 * the function returns this rank's SUM of per-sample losses for the caller to
 * reduce.
 */
#ifndef CT_NN_LOSS_H
#define CT_NN_LOSS_H

#include <stdint.h>

/* Returns sum_b loss_b. If dlogits is non-NULL it receives
 * (softmax(logits) - onehot(y)) * grad_scale; dlogits == logits is allowed
 * (in place: the same bits, the logits overwritten; ct_model_output_grad()
 * is the output itself when the model's last module allows it). If correct is non-NULL it
 * receives the number of rows whose argmax (first maximum) equals y.
 * Labels must be in [0, K). */
double ct_xent_forward_backward(float *dlogits, const float *logits, const int32_t *y, int B,
                                int K, float grad_scale, int64_t *correct);

#endif
