/* The model zoo: each model is built only from src/nn modules, selected by
 * name and sized by plain parameters (the config layer fills them).
 *
 *     struct ct_model_spec spec = ct_model_default_spec();
 *     spec.name = "cnn"; spec.in_c = 1; spec.in_h = spec.in_w = 28; spec.n_classes = 10;
 *     struct ct_model m;
 *     ct_model_build(&m, &spec, max_batch);
 *
 * mlp     Linear(in, h0)-ReLU-...-Linear(h_last, classes)
 * cnn     [Conv3x3(p1)-BN-ReLU-MaxPool2] per entry of `channels`, Flatten,
 *         Linear(hidden[0])-ReLU-Dropout-Linear(classes): with channels 32,64
 *         and hidden 128 exactly the PyTorch peer's cnn (same layer indices)
 * resnet  stem Conv3x3(channels[0])-BN-ReLU; one stage per entry of
 *         `channels` (the first at stride 1, the others halving the size),
 *         each `blocks` basic blocks (Conv3x3-BN-ReLU-Conv3x3-BN plus the
 *         identity, or a Conv1x1-BN projection when the shape changes, then
 *         ReLU); global average pool; Linear(classes)
 * vit     patch embedding (patch x patch, width, learned positions); `depth`
 *         pre-norm blocks x + Attn(LN(x)), x + MLP(LN(x)) with GELU and
 *         hidden width mlp_ratio*width; final LN; mean over tokens; Linear
 */
#ifndef CT_MODELS_MODELS_H
#define CT_MODELS_MODELS_H

#include <stddef.h>

#include "nn/module.h"

#define CT_MODEL_MAX_HIDDEN 16

struct ct_model_spec {
    const char *name;   /* "mlp", "cnn", "resnet", "vit" */
    int in_c, in_h, in_w; /* input image shape (mlp uses only their product) */
    int n_classes;
    int hidden[CT_MODEL_MAX_HIDDEN]; /* mlp: hidden widths; cnn: FC width */
    int n_hidden;
    int channels[CT_MODEL_MAX_HIDDEN]; /* cnn, resnet */
    int n_channels;
    int blocks;         /* resnet: blocks per stage */
    int depth, width, heads, patch, mlp_ratio; /* vit */
    int gelu_tanh;      /* vit: GELU tanh approximation instead of erf */
    float dropout;      /* cnn: dropout before the last Linear */
    int bn_sync;        /* BatchNorm statistics over the global batch */
    int fused;          /* cnn: each Conv-BN-ReLU-MaxPool as one fused block
                         * (src/nn/convblock.h): same function and state_dict */
};

/* The names ct_model_build knows, in registry order, NULL-terminated: the one
 * list of model names (the config's model.name parses through it). */
extern const char *const ct_model_names[];

/* Defaults of every field but name, in_* and n_classes. */
struct ct_model_spec ct_model_default_spec(void);

/* Build and finalize (allocate) the named model. Parameters are not yet
 * initialised: call ct_model_init_params(). Errors name the model. */
int ct_model_build(struct ct_model *m, const struct ct_model_spec *spec, int max_batch);

int ct_mlp_build(struct ct_model *m, const struct ct_model_spec *spec);
int ct_cnn_build(struct ct_model *m, const struct ct_model_spec *spec);
int ct_resnet_build(struct ct_model *m, const struct ct_model_spec *spec);
int ct_vit_build(struct ct_model *m, const struct ct_model_spec *spec);

#endif
