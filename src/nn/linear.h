/* Linear layer: out = inp . weight^T + bias, as torch.nn.Linear.
 *
 * Dims legend: B = batch rows, C = input features, OC = output features.
 *
 * The kernels are plain functions over raw buffers (outputs first, inputs
 * next, dimensions last). The fast ones call ct_sgemm (core/gemm.h: our
 * AVX-512 kernel or OpenBLAS, the same bits at any thread count); the *_ref
 * ones are naive loops kept as the reference that tests compare against.
 * Backward accumulates into dweight and dbias and overwrites dinp.
 */
#ifndef CT_NN_LINEAR_H
#define CT_NN_LINEAR_H

#include "nn/module.h"

/* out (B, OC) = inp (B, C) . weight (OC, C)^T + bias (OC); bias may be NULL. */
void ct_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int B,
                       int C, int OC);
/* dinp (B, C) = dout . weight; dweight (OC, C) += dout^T . inp; dbias (OC) +=
 * column sums of dout. Each output may be NULL (skipped; inp is only read
 * for dweight). */
void ct_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, int B, int C, int OC);

void ct_linear_forward_ref(float *out, const float *inp, const float *weight, const float *bias,
                           int B, int C, int OC);
void ct_linear_backward_ref(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int B, int C, int OC);

/* A Linear module with parameters "weight" (OC, C) and, if `bias`, "bias"
 * (OC), initialised like PyTorch: U(-1/sqrt(C), 1/sqrt(C)) for both
 * (kaiming_uniform_ with a = sqrt(5)). NULL on allocation failure. */
struct ct_module *ct_linear_new(int C, int OC, int bias);
/* The same applied to each of T rows (tokens) of a sample: (T, C) -> (T, OC). */
struct ct_module *ct_linear_tokens_new(int T, int C, int OC, int bias);

#endif
