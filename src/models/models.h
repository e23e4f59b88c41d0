/* The model zoo and the model registry: each model is built only from src/nn
 * modules, selected by name and sized by plain parameters (the config layer
 * fills them from the [model] section). The registry is append-only and
 * process-wide: the zoo's mlp, cnn, resnet, vit and gpt first, then what a
 * program registers before it loads a config (no unregister: a name must
 * keep meaning one builder). The zoo's architectures and the registry's
 * rules: docs/models.md.
 *
 *     struct ct_model_spec spec = ct_model_default_spec();
 *     spec.name = "cnn"; spec.in_c = 1; spec.in_h = spec.in_w = 28; spec.n_classes = 10;
 *     struct ct_model m;
 *     ct_model_build(&m, &spec, max_batch);
 *
 *     static int tinynet_build(struct ct_model *m, const struct ct_model_spec *s, void *ctx)
 *     {
 *         int rc = ct_model_add(m, ct_linear_new(s->in_c * s->in_h * s->in_w, 128, 1));
 *         ...
 *         return rc < 0 ? rc : ct_model_add(m, ct_linear_new(128, s->n_classes, 1));
 *     }
 *     ct_model_register("tinynet", tinynet_build, NULL);   // then model.name = tinynet
 */
#ifndef CT_MODELS_MODELS_H
#define CT_MODELS_MODELS_H

#include <stddef.h>

#include "nn/module.h"

#define CT_MODEL_MAX_HIDDEN 16

struct ct_model_spec {
    const char *name;   /* a registered name: "mlp", "cnn", "resnet", "vit", ... */
    int in_c, in_h, in_w; /* input image shape (mlp uses only their product) */
    int n_classes;
    int hidden[CT_MODEL_MAX_HIDDEN]; /* mlp: hidden widths; cnn: FC width */
    int n_hidden;
    int channels[CT_MODEL_MAX_HIDDEN]; /* cnn, resnet */
    int n_channels;
    int blocks;         /* resnet: blocks per stage */
    int depth, width, heads, patch, mlp_ratio; /* vit, gpt (patch: vit) */
    int block;          /* gpt: context length T (its input is T token ids; n_classes is the vocabulary) */
    int gelu_tanh;      /* vit: GELU tanh approximation instead of erf */
    float dropout;      /* cnn: dropout before the last Linear (a registered model may use it too) */
    int bn_sync;        /* BatchNorm statistics over the global batch */
    int fused;          /* cnn: each Conv-BN-ReLU-MaxPool as one fused block
                         * (src/nn/convblock.h): same function and state_dict */
};

#define CT_MODEL_NAME_MAX 64   /* a name is shorter than this (the config's field) */
#define CT_MODEL_MAX_MODELS 32  /* registry capacity, the zoo's four included */

/* Adds a model's modules to m, which ct_model_build has initialised with the
 * input size; ct_model_build finalizes it after. Returns 0 or a CT_E* code
 * with a message (ct_error_set) saying what in the spec does not fit; ctx is
 * the pointer registered with the builder. */
typedef int (*ct_model_build_fn)(struct ct_model *m, const struct ct_model_spec *spec, void *ctx);

/* Registers `build` under `name` (copied). The name must be new, start with
 * a lowercase letter and use only [a-z0-9_-], under CT_MODEL_NAME_MAX
 * characters; CT_EINVAL otherwise (a taken name included, zoo names too),
 * CT_ERANGE when the registry is full. Call it at start-up, before loading
 * a config that names the model (registrations from several threads are
 * serialized, but the list ct_model_names() returns is read without a lock). */
int ct_model_register(const char *name, ct_model_build_fn build, void *ctx);

/* The registered names in registration order, NULL-terminated: the one list
 * of model names (the config's model.name parses through it). The array
 * stays valid for the life of the process and grows in place. */
const char *const *ct_model_names(void);

/* Defaults of every field but name, in_* and n_classes. */
struct ct_model_spec ct_model_default_spec(void);

/* Build and finalize (allocate) the model registered as spec->name.
 * Parameters are not yet initialised: call ct_model_init_params(). Errors
 * name the model; an unknown name lists the registered ones. */
int ct_model_build(struct ct_model *m, const struct ct_model_spec *spec, int max_batch);

/* The zoo's builders (registered as mlp, cnn, resnet, vit; ctx unused). */
int ct_mlp_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx);
int ct_cnn_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx);
int ct_resnet_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx);
int ct_vit_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx);
int ct_gpt_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx);

#endif
