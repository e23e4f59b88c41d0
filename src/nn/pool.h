/* Pooling kernels (NCHW), as torch.nn.MaxPool2d, AvgPool2d and a global
 * average pool, with padding 0, dilation 1 and ceil_mode False.
 *
 * Dims legend: B = batch, C = channels, H, W = input size, OH, OW = output
 * size, K = kernel size (square), stride = step between windows.
 *
 * Plain functions over raw buffers (outputs first, inputs next, dimensions
 * last). Pooling has no parameters; every backward overwrites dinp. Max
 * pooling stores, in forward, the position of each window's maximum in a
 * caller-provided int32 buffer (ct_maxpool2d_workspace bytes), which must
 * live until the matching backward: backward routes each gradient there
 * without looking at the input again. The *_ref functions are naive loops
 * kept for tests; the max-pool reference recomputes the argmax from the
 * input instead, so it checks the stored indices too.
 *
 *     int OH, OW;
 *     ct_pool2d_out_size(H, W, 2, 2, &OH, &OW);
 *     int32_t *arg = arena_alloc(ct_maxpool2d_workspace(B, C, H, W, 2, 2));
 *     ct_maxpool2d_forward(out, arg, inp, B, C, H, W, 2, 2);
 *     ct_maxpool2d_backward(dinp, dout, arg, B, C, H, W, 2, 2);
 *
 * Preconditions (checked by the module, not here): every dimension >= 1,
 * 1 <= K <= min(H, W), stride >= 1.
 */
#ifndef CT_NN_POOL_H
#define CT_NN_POOL_H

#include <stddef.h>
#include <stdint.h>

/* OH = (H - K) / stride + 1, OW likewise (floor, as PyTorch without padding). */
void ct_pool2d_out_size(int H, int W, int K, int stride, int *OH, int *OW);

/* ------------------------------------------------------------ max pool */

/* Bytes of the argmax buffer: one int32 per output value. */
size_t ct_maxpool2d_workspace(int B, int C, int H, int W, int K, int stride);

/* out (B, C, OH, OW) = max over each K x K window of inp (B, C, H, W);
 * argmax (B, C, OH, OW) = its position in the input plane, ih * W + iw (what
 * PyTorch's return_indices gives). Ties go to the first maximum in row-major
 * window order, and a NaN wins over any number, exactly as PyTorch's CPU
 * kernel decides (of several NaNs in one window, the last). */
void ct_maxpool2d_forward(float *out, int32_t *argmax, const float *inp, int B, int C, int H,
                          int W, int K, int stride);
/* dinp (B, C, H, W) = dout (B, C, OH, OW) routed to the argmax positions;
 * overlapping windows (stride < K) that share a maximum add up there. */
void ct_maxpool2d_backward(float *dinp, const float *dout, const int32_t *argmax, int B, int C,
                           int H, int W, int K, int stride);

void ct_maxpool2d_forward_ref(float *out, const float *inp, int B, int C, int H, int W, int K,
                              int stride);
/* Recomputes each window's argmax from inp. */
void ct_maxpool2d_backward_ref(float *dinp, const float *dout, const float *inp, int B, int C,
                               int H, int W, int K, int stride);

/* ------------------------------------------------------------ average pool */

/* out (B, C, OH, OW) = mean over each K x K window of inp (B, C, H, W). */
void ct_avgpool2d_forward(float *out, const float *inp, int B, int C, int H, int W, int K,
                          int stride);
/* dinp (B, C, H, W) = each dout (B, C, OH, OW) / (K * K) spread over its window. */
void ct_avgpool2d_backward(float *dinp, const float *dout, int B, int C, int H, int W, int K,
                           int stride);

void ct_avgpool2d_forward_ref(float *out, const float *inp, int B, int C, int H, int W, int K,
                              int stride);
/* For each input pixel, gathers from the windows that cover it. */
void ct_avgpool2d_backward_ref(float *dinp, const float *dout, int B, int C, int H, int W, int K,
                               int stride);

/* ------------------------------------------------------------ global average pool */

/* out (B, C) = mean of each (H, W) plane of inp (B, C, H, W), summed in double. */
void ct_global_avgpool_forward(float *out, const float *inp, int B, int C, int H, int W);
/* dinp (B, C, H, W) = dout (B, C) / (H * W) over each plane. */
void ct_global_avgpool_backward(float *dinp, const float *dout, int B, int C, int H, int W);

#include "nn/module.h"

/* Modules: MaxPool2d(K, stride) over (C, H, W) inputs, and the global
 * average pool (C, H, W) -> (C). NULL on bad sizes or allocation failure. */
struct ct_module *ct_maxpool2d_new(int C, int H, int W, int K, int stride);
struct ct_module *ct_global_avgpool_new(int C, int H, int W);

#endif
