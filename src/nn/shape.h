/* Modules that only reshape or reduce: Flatten and the mean over tokens.
 *
 * Activations are stored per sample as flat, row-major arrays (NCHW images,
 * (T, D) token sequences), so Flatten moves no data in principle; it exists
 * as a module (a copy) so that models keep PyTorch's layer numbering, where
 * nn.Flatten occupies an index of nn.Sequential and the state_dict names of
 * the layers after it count it.
 */
#ifndef CT_NN_SHAPE_H
#define CT_NN_SHAPE_H

#include <stddef.h>

#include "nn/module.h"

/* (numel) -> (numel), a copy. */
struct ct_module *ct_flatten_new(size_t numel);
/* (T, D) -> (D): the mean over the T tokens of each sample (a ViT head's
 * pooling). */
struct ct_module *ct_token_mean_new(int T, int D);

#endif
