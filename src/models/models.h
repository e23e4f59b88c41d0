/* The model zoo and the model registry: each model is built only from src/nn
 * modules, selected by name and sized by plain parameters (the config layer
 * fills them from the [model] section).
 *
 *     struct ct_model_spec spec = ct_model_default_spec();
 *     spec.name = "cnn"; spec.in_c = 1; spec.in_h = spec.in_w = 28; spec.n_classes = 10;
 *     struct ct_model m;
 *     ct_model_build(&m, &spec, max_batch);
 *
 * A program that links libctrain adds its own models by name before it loads
 * a config; `model.name = tinynet` then selects it like any zoo model (the
 * config checks the name against this registry, `config --list` shows it,
 * checkpoints record it, a resume rebuilds it):
 *
 *     static int tinynet_build(struct ct_model *m, const struct ct_model_spec *s, void *ctx)
 *     {
 *         int rc = ct_model_add(m, ct_linear_new(s->in_c * s->in_h * s->in_w, 128, 1));
 *         ...
 *         return rc < 0 ? rc : ct_model_add(m, ct_linear_new(128, s->n_classes, 1));
 *     }
 *     ct_model_register("tinynet", tinynet_build, NULL);
 *
 * The registry is append-only and process-wide; the zoo's five models are
 * always its first entries, in the order below. It deliberately has no
 * unregister: a config or checkpoint that named a model must keep meaning
 * the same builder for the life of the process.
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
 * gpt     a GPT-2-style language model over windows of `block` tokens:
 *         token + position embedding (vocabulary n_classes); `depth` pre-norm
 *         blocks x + CausalAttn(LN(x)), x + MLP(LN(x)) (GELU, mlp_ratio*width),
 *         dropout after the embedding and each block's body when dropout > 0;
 *         final LN; the LM head tied to the token embedding. Input (T) token
 *         ids as floats, output (T, vocabulary) logits per sample.
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
