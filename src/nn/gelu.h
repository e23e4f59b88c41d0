/* GELU (exact and tanh approximation), as
 * torch.nn.functional.gelu(approximate='none'|'tanh'): the kernels and the
 * module that wraps them (vit and gpt's MLPs).
 *
 * Dims legend: N = elements.
 *
 * Plain kernels over raw buffers, outputs first, inputs next, dimensions
 * (and options) last; backward overwrites dinp. ReLU lives in activation.h,
 * softmax in softmax.h.
 */
#ifndef CT_NN_GELU_H
#define CT_NN_GELU_H

#include <stddef.h>

/* torch's `approximate=` argument. Append-only. */
enum ct_gelu_approx {
    CT_GELU_APPROX_NONE = 0, /* x * Phi(x), Phi the normal CDF (erf) */
    CT_GELU_APPROX_TANH = 1, /* 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) */
    CT_GELU_APPROX_COUNT
};

/* out (N) = gelu(inp (N)); out may alias inp. No libm calls (see gelu.c):
 * exact form within 6e-7 relative for |x| <= 4 and 4e-6 for any normal
 * result (0.5 x erfc(-x/sqrt 2), so large negative x keep their relative
 * precision, where torch's 0.5 x (1 + erf(x/sqrt 2)) cancels); tanh form
 * written as x * sigmoid(2u), within 1.5e-6 relative for |x| <= 4; both
 * within 5e-7 absolute everywhere. */
void ct_gelu_forward(float *out, const float *inp, size_t N, enum ct_gelu_approx approx);
/* dinp (N) = dout * gelu'(inp); dinp may alias dout. */
void ct_gelu_backward(float *dinp, const float *dout, const float *inp, size_t N,
                      enum ct_gelu_approx approx);

#include "nn/module.h"

/* A GELU module over `numel` features per sample (tanh_approx: the tanh
 * form, else the exact erf form). */
struct ct_module *ct_gelu_new(size_t numel, int tanh_approx);

#endif
