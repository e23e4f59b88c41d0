/* resnet: a small residual network of basic blocks (see models.h). */
#include "models/models.h"

#include "core/error.h"
#include "nn/activation.h"
#include "nn/conv2d.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/pool.h"
#include "nn/residual.h"

/* Conv3x3(stride)-BN-ReLU-Conv3x3-BN + shortcut; the ReLU after the sum is
 * the next module. */
static struct ct_module *basic_block(int C, int H, int W, int OC, int stride, int sync, int *rc)
{
    int OH = (H + 2 - 3) / stride + 1, OW = (W + 2 - 3) / stride + 1;
    struct ct_module *r = ct_residual_new((size_t)C * H * W);
    if (!r) {
        *rc = ct_error_set(CT_ENOMEM, "resnet: out of memory");
        return NULL;
    }
    *rc = ct_residual_add_body(r, ct_conv2d_new(C, H, W, OC, 3, stride, 1, 0));
    if (*rc == 0)
        *rc = ct_residual_add_body(r, ct_batchnorm2d_new(OC, OH, OW, sync));
    if (*rc == 0)
        *rc = ct_residual_add_body(r, ct_relu_new((size_t)OC * OH * OW));
    if (*rc == 0)
        *rc = ct_residual_add_body(r, ct_conv2d_new(OC, OH, OW, OC, 3, 1, 1, 0));
    if (*rc == 0)
        *rc = ct_residual_add_body(r, ct_batchnorm2d_new(OC, OH, OW, sync));
    if (*rc == 0 && (stride != 1 || C != OC)) {
        *rc = ct_residual_add_shortcut(r, ct_conv2d_new(C, H, W, OC, 1, stride, 0, 0));
        if (*rc == 0)
            *rc = ct_residual_add_shortcut(r, ct_batchnorm2d_new(OC, OH, OW, sync));
    }
    if (*rc < 0) {
        ct_module_free(r);
        return NULL;
    }
    return r;
}

int ct_resnet_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx)
{
    (void)ctx;
    int C = spec->in_c, H = spec->in_h, W = spec->in_w, rc;
    if (spec->n_channels < 1)
        return ct_error_set(CT_EINVAL, "resnet: model.channels needs at least one stage width");
    int c0 = spec->channels[0];
    rc = ct_model_add(m, ct_conv2d_new(C, H, W, c0, 3, 1, 1, 0));
    if (rc == 0)
        rc = ct_model_add(m, ct_batchnorm2d_new(c0, H, W, spec->bn_sync));
    if (rc == 0)
        rc = ct_model_add(m, ct_relu_new((size_t)c0 * H * W));
    C = c0;
    for (int s = 0; s < spec->n_channels && rc == 0; s++) {
        for (int j = 0; j < spec->blocks && rc == 0; j++) {
            int stride = (s > 0 && j == 0) ? 2 : 1;
            int OC = spec->channels[s];
            struct ct_module *blk = basic_block(C, H, W, OC, stride, spec->bn_sync, &rc);
            if (rc < 0)
                break;
            rc = ct_model_add(m, blk);
            H = (H + 2 - 3) / stride + 1;
            W = (W + 2 - 3) / stride + 1;
            C = OC;
            if (rc == 0)
                rc = ct_model_add(m, ct_relu_new((size_t)C * H * W));
        }
    }
    if (rc == 0)
        rc = ct_model_add(m, ct_global_avgpool_new(C, H, W));
    if (rc == 0)
        rc = ct_model_add(m, ct_linear_new(C, spec->n_classes, 1));
    return rc;
}
