/* mlp: a multilayer perceptron, Linear-ReLU pairs then a Linear head, named
 * like torch.nn.Sequential (layers.0.weight, layers.2.weight, ...); and the
 * model registry. */
#include "models/models.h"

#include <string.h>

#include "core/error.h"
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

int ct_mlp_build(struct ct_model *m, const struct ct_model_spec *spec)
{
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

/* The registry: names and builders side by side, in one order. */
const char *const ct_model_names[] = {"mlp", "cnn", "resnet", "vit", NULL};
static int (*const builders[])(struct ct_model *m, const struct ct_model_spec *spec) = {
    ct_mlp_build, ct_cnn_build, ct_resnet_build, ct_vit_build,
};
#define N_MODELS (sizeof builders / sizeof *builders)
_Static_assert(sizeof ct_model_names / sizeof *ct_model_names == N_MODELS + 1,
               "ct_model_names and builders list the same models");

int ct_model_build(struct ct_model *m, const struct ct_model_spec *spec, int max_batch)
{
    ct_model_init(m, (size_t)spec->in_c * spec->in_h * spec->in_w);
    int rc = CT_EINVAL;
    size_t i;
    for (i = 0; i < N_MODELS; i++)
        if (strcmp(spec->name, ct_model_names[i]) == 0)
            break;
    if (i == N_MODELS)
        rc = ct_error_set(CT_EINVAL, "unknown model '%s' (known: mlp, cnn, resnet, vit)", spec->name);
    else
        rc = builders[i](m, spec);
    if (rc == 0)
        rc = ct_model_finalize(m, max_batch);
    if (rc < 0) {
        ct_error_wrap(rc, "building model %s", spec->name);
        ct_model_free(m);
    }
    return rc;
}
