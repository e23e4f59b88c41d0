/* Residual composition: out = body(x) + shortcut(x), where the shortcut is
 * the identity unless it is given modules (a projection such as a strided
 * 1x1 convolution with BatchNorm). Body and shortcut are chains of modules,
 * named "<name>.body.<i>" and "<name>.shortcut.<i>"; their activations live
 * in the residual module's workspace, the gradients between them in its
 * scratch. Two outputs are not kept: the body's last, written straight into
 * the block's output when that module's backward ignores its output, and a
 * body output whose module declares forward_recomputable (LayerNorm), run
 * again in backward where the next module needs it (residual.c says when).
 *
 *     struct ct_module *r = ct_residual_new(C * H * W);
 *     ct_residual_add_body(r, ct_conv2d_new(...));
 *     ct_residual_add_body(r, ct_batchnorm2d_new(...));
 *     ct_residual_add_shortcut(r, ...);   // optional
 */
#ifndef CT_NN_RESIDUAL_H
#define CT_NN_RESIDUAL_H

#include "nn/module.h"

/* A residual block taking in_numel features per sample. */
struct ct_module *ct_residual_new(size_t in_numel);
/* Append to the body / the shortcut (takes ownership, also on failure).
 * Each module must accept what the previous one gives; the two chains must
 * end at the same size, which becomes the block's output size. */
int ct_residual_add_body(struct ct_module *res, struct ct_module *m);
int ct_residual_add_shortcut(struct ct_module *res, struct ct_module *m);

#endif
