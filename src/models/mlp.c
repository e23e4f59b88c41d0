/* mlp: a multilayer perceptron, Linear-ReLU pairs then a Linear head, named
 * like torch.nn.Sequential (layers.0.weight, layers.2.weight, ...). */
#include "models/models.h"

#include <string.h>

#include "core/error.h"
#include "nn/activation.h"
#include "nn/linear.h"

int ct_mlp_build(struct ct_model *m, const struct ct_model_spec *spec)
{
    int rc;
    size_t width = spec->in_numel;
    for (int i = 0; i < spec->n_hidden; i++) {
        if ((rc = ct_model_add(m, ct_linear_new((int)width, spec->hidden[i], 1))) < 0)
            return rc;
        if ((rc = ct_model_add(m, ct_relu_new((size_t)spec->hidden[i]))) < 0)
            return rc;
        width = (size_t)spec->hidden[i];
    }
    return ct_model_add(m, ct_linear_new((int)width, spec->n_classes, 1));
}

int ct_model_build(struct ct_model *m, const struct ct_model_spec *spec, int max_batch)
{
    ct_model_init(m, spec->in_numel);
    int rc;
    if (strcmp(spec->name, "mlp") == 0)
        rc = ct_mlp_build(m, spec);
    else
        rc = ct_error_set(CT_EINVAL, "unknown model '%s' (known: mlp)", spec->name);
    if (rc == 0)
        rc = ct_model_finalize(m, max_batch);
    if (rc < 0) {
        ct_error_wrap(rc, "building model %s", spec->name);
        ct_model_free(m);
    }
    return rc;
}
