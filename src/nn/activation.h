/* Element-wise activations. Dims legend: N = elements (B * D). */
#ifndef CT_NN_ACTIVATION_H
#define CT_NN_ACTIVATION_H

#include <stddef.h>

#include "nn/module.h"

/* out = max(inp, 0) */
void ct_relu_forward(float *out, const float *inp, size_t N);
/* dinp = dout where out > 0, else 0 (PyTorch's convention: zero gradient at 0). */
void ct_relu_backward(float *dinp, const float *dout, const float *out, size_t N);

/* A ReLU module over `numel` features per sample. */
struct ct_module *ct_relu_new(size_t numel);

#endif
