/* Conv2d-BatchNorm2d-ReLU-MaxPool2d(2) as one fused module.
 *
 * The same function, parameters, buffers and state_dict names as the four
 * modules in a row (ct_conv2d_new, ct_batchnorm2d_new, ct_relu_new,
 * ct_maxpool2d_new(2, 2)), so a checkpoint of either form loads into the
 * other, but computed with far less memory traffic. Unfused, a training step
 * reads or writes the full-size conv output about ten times (BN statistics,
 * BN output, pooling, the pooled gradient scattered back with zeros, BN's
 * two backward passes, conv bias sums); here:
 *
 * forward (training)  conv a chunk of samples, gather BN statistics from it
 *                     while it is in cache; then one pass that normalises,
 *                     pools and applies ReLU, writing only the pooled output,
 *                     the position of each window's maximum (1 byte) and the
 *                     conv value there (for backward's sums);
 * forward (eval)      conv a chunk into cache and normalise-pool-ReLU it at
 *                     once: nothing full-size reaches memory;
 * backward            BN's gradient sums from the pooled values alone (only
 *                     the maximum of a window receives a gradient); then per
 *                     chunk, the conv output gradient is built in cache from
 *                     one read of the conv output and consumed there by the
 *                     conv backward (weight, bias and input gradients).
 *
 * Results equal the unfused modules' up to float rounding: forward values
 * and the choice of maxima are computed by the same expressions (bit for
 * bit in the forward); backward sums the BatchNorm gradient terms over the
 * window maxima only (in double, as the unfused kernel does over all
 * values, in another order) and calls the conv backward per chunk (the
 * weight gradient's sgemm calls are the same, one per sample; the bias
 * gradient is summed over all chunks in double and rounded once, as in
 * one call). So gradients can differ in their last bits, and in practice do
 * not: tests/unit/test_convblock.c found them equal (and compares the two
 * forms, including sync-mode BatchNorm, odd sizes that pooling floors, and
 * eval mode), and tests/e2e/test_resume.sh gets identical weights after 24
 * training steps of a small cnn.
 *
 * The per-plane kernels come in a portable form and an AVX-512 form that
 * computes the same bits, chosen at run time (core/simd.h).
 *
 * Layout: in (C, H, W), conv stride 1 with K x K kernels and `pad` padding
 * (with bias) to (OC, OH, OW), out (OC, OH/2, OW/2). sync: BatchNorm
 * statistics over the global batch (SyncBatchNorm), as ct_batchnorm2d_new.
 * The module spans 4 layers: placed as layer i, its convolution is named
 * layers.i and its BatchNorm layers.(i+1) (ReLU and pooling, i+2 and i+3,
 * have no tensors). NULL on bad sizes or allocation failure.
 */
#ifndef CT_NN_CONVBLOCK_H
#define CT_NN_CONVBLOCK_H

#include "nn/module.h"

struct ct_module *ct_conv_bn_relu_pool_new(int C, int H, int W, int OC, int K, int pad, int sync);

#endif
