/* Small zoo models for the unit tests (header-only): test_models,
 * test_flops. */
#ifndef CT_MODEL_TEST_H
#define CT_MODEL_TEST_H

#include <string.h>

#include "models/models.h"

/* Model `name` on 1 x 8 x 8 images, 3 classes, at sizes that build in
 * microseconds: cnn channels 3, 4 and hidden 6; resnet channels 2, 3 and one
 * block a stage; vit patch 4, width 6, 2 heads, depth 1, mlp_ratio 2; the
 * mlp as its defaults. No dropout. */
static inline struct ct_model_spec ct_test_image_spec(const char *name)
{
    struct ct_model_spec s = ct_model_default_spec();
    s.name = name;
    s.in_c = 1, s.in_h = s.in_w = 8, s.n_classes = 3;
    if (strcmp(name, "cnn") == 0) {
        s.channels[0] = 3, s.channels[1] = 4, s.n_channels = 2;
        s.hidden[0] = 6, s.n_hidden = 1;
    } else if (strcmp(name, "resnet") == 0) {
        s.channels[0] = 2, s.channels[1] = 3, s.n_channels = 2;
        s.blocks = 1;
    } else if (strcmp(name, "vit") == 0) {
        s.patch = 4, s.width = 6, s.heads = 2, s.depth = 1, s.mlp_ratio = 2;
    }
    return s;
}

/* A gpt of the sizes given: T token ids in, (T, V) logits out; mlp_ratio 4. */
static inline struct ct_model_spec ct_test_gpt_spec(int V, int T, int C, int heads, int depth,
                                                    float dropout)
{
    struct ct_model_spec s = ct_model_default_spec();
    s.name = "gpt";
    s.in_c = 1, s.in_h = 1, s.in_w = T;
    s.block = T, s.n_classes = V;
    s.width = C, s.heads = heads, s.depth = depth, s.mlp_ratio = 4;
    s.dropout = dropout;
    return s;
}

#endif
