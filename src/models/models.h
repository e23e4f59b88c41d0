/* The model zoo: each model is built only from src/nn modules, selected by
 * name and sized by plain parameters (the config layer fills them).
 *
 *     struct ct_model_spec spec = {.name = "mlp", .in_numel = 784, .n_classes = 10,
 *                                  .hidden = {256, 128}, .n_hidden = 2};
 *     struct ct_model m;
 *     ct_model_build(&m, &spec, max_batch);
 */
#ifndef CT_MODELS_MODELS_H
#define CT_MODELS_MODELS_H

#include <stddef.h>

#include "nn/module.h"

#define CT_MODEL_MAX_HIDDEN 16

struct ct_model_spec {
    const char *name;   /* "mlp" */
    size_t in_numel;    /* features per input sample, e.g. 1*28*28 */
    int n_classes;
    int hidden[CT_MODEL_MAX_HIDDEN]; /* mlp: hidden widths */
    int n_hidden;
};

/* Build and finalize (allocate) the named model. Parameters are not yet
 * initialised: call ct_model_init_params(). Errors name the model. */
int ct_model_build(struct ct_model *m, const struct ct_model_spec *spec, int max_batch);

/* mlp: Linear(in, h0)-ReLU-...-Linear(h_last, n_classes). */
int ct_mlp_build(struct ct_model *m, const struct ct_model_spec *spec);

#endif
