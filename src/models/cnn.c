/* cnn: [Conv3x3-BN-ReLU-MaxPool2] x len(channels), Flatten, Linear-ReLU-
 * Dropout-Linear (see models.h). Layer indices match the PyTorch peer's
 * nn.Sequential, so state_dict names match too.
 *
 * Each Conv-BN-ReLU-MaxPool stage is either one fused block (spec->fused,
 * the default; src/nn/convblock.h), or four modules computed as
 * Conv-BN-MaxPool-ReLU (the same function, see below). Both forms have the
 * same parameters, buffers, names and dropout streams: a checkpoint of one
 * resumes in the other. */
#include "models/models.h"

#include "core/error.h"
#include "nn/activation.h"
#include "nn/conv2d.h"
#include "nn/convblock.h"
#include "nn/dropout.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/pool.h"
#include "nn/shape.h"

int ct_cnn_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx)
{
    (void)ctx;
    int C = spec->in_c, H = spec->in_h, W = spec->in_w, rc = 0;
    if (spec->n_hidden < 1)
        return ct_error_set(CT_EINVAL, "cnn: model.hidden needs the width of the fully connected layer");
    for (int i = 0; i < spec->n_channels && rc == 0; i++) {
        int OC = spec->channels[i];
        if (H < 2 || W < 2)
            return ct_error_set(CT_EINVAL, "cnn: %d stages pool a %dx%d input below 1x1",
                                spec->n_channels, spec->in_h, spec->in_w);
        if (spec->fused) {
            rc = ct_model_add(m, ct_conv_bn_relu_pool_new(C, H, W, OC, 3, 1, spec->bn_sync));
        } else {
            rc = ct_model_add(m, ct_conv2d_new(C, H, W, OC, 3, 1, 1, 1));
            if (rc == 0)
                rc = ct_model_add(m, ct_batchnorm2d_new(OC, H, W, spec->bn_sync));
            /* ReLU and max-pooling commute (both are monotone, max(0, max x)
             * = max(max(0, x))), so pool first and apply ReLU to a quarter
             * of the values: the same function and gradient (up to which of
             * several non-positive inputs of a window receives a zero
             * gradient), and half the memory traffic of these layers. The
             * layer indices (and so the state_dict names) stay those of the
             * peer's Conv-BN-ReLU-Pool. */
            if (rc == 0)
                rc = ct_model_add(m, ct_maxpool2d_new(OC, H, W, 2, 2));
            if (rc == 0)
                rc = ct_model_add(m, ct_relu_new((size_t)OC * (H / 2) * (W / 2)));
        }
        C = OC;
        H /= 2;
        W /= 2;
    }
    int flat = C * H * W, fc = spec->hidden[0];
    if (rc == 0)
        rc = ct_model_add(m, ct_flatten_new((size_t)flat));
    if (rc == 0)
        rc = ct_model_add(m, ct_linear_new(flat, fc, 1));
    if (rc == 0)
        rc = ct_model_add(m, ct_relu_new((size_t)fc));
    if (rc == 0)
        rc = ct_model_add(m, ct_dropout_new((size_t)fc, spec->dropout));
    if (rc == 0)
        rc = ct_model_add(m, ct_linear_new(fc, spec->n_classes, 1));
    return rc;
}
