/* mlp: a multilayer perceptron, Linear-ReLU pairs then a Linear head, named
 * like torch.nn.Sequential (layers.0.weight, layers.2.weight, ...); and the
 * defaults of a model spec. */
#include "models/models.h"

#include "nn/activation.h"
#include "nn/linear.h"

struct ct_model_spec ct_model_default_spec(void)
{
    struct ct_model_spec s = {
        .hidden = {256, 128}, .n_hidden = 2, .channels = {32, 64}, .n_channels = 2,
        .blocks = 2, .depth = 4, .width = 64, .heads = 4, .patch = 7, .mlp_ratio = 2,
        .fused = 1,
    };
    return s;
}

int ct_mlp_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx)
{
    (void)ctx;
    int rc;
    size_t width = (size_t)spec->in_c * spec->in_h * spec->in_w;
    for (int i = 0; i < spec->n_hidden; i++) {
        if ((rc = ct_model_add(m, ct_linear_new((int)width, spec->hidden[i], 1))) < 0)
            return rc;
        if ((rc = ct_model_add(m, ct_relu_new((size_t)spec->hidden[i]))) < 0)
            return rc;
        width = (size_t)spec->hidden[i];
    }
    return ct_model_add(m, ct_linear_new((int)width, spec->n_classes, 1));
}
