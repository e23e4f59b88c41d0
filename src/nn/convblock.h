/* Conv2d-BatchNorm2d-ReLU-MaxPool2d(2) as one fused module (the cnn's
 * model.fused = true).
 *
 * The same function, parameters, buffers and state_dict names as the four
 * modules in a row (ct_conv2d_new, ct_batchnorm2d_new, ct_relu_new,
 * ct_maxpool2d_new(2, 2)), so a checkpoint of either form loads into the
 * other, computed chunk by chunk in cache instead of through full-size
 * intermediates. Forward is bit for bit the unfused one; backward sums some
 * terms in another order, so gradients may differ in their last bits (tests
 * found them equal). How it is fused and what was checked: docs/models.md.
 *
 *     ct_model_add(&m, ct_conv_bn_relu_pool_new(C, H, W, OC, 3, 1, sync));  // 4 layers
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
