/* The model zoo: shapes and state_dict names, finite-difference checks of a
 * whole training step's gradients through every model (small sizes), eval
 * outputs that do not depend on the rest of the batch, and train/eval
 * behaviour of dropout and batch norm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "models/models.h"
#include "nn/loss.h"

static struct ct_model_spec small_spec(const char *name)
{
    struct ct_model_spec s = ct_model_default_spec();
    s.name = name;
    s.in_c = 1;
    s.in_h = s.in_w = 8;
    s.n_classes = 3;
    if (strcmp(name, "cnn") == 0) {
        s.channels[0] = 3, s.channels[1] = 4, s.n_channels = 2;
        s.hidden[0] = 6, s.n_hidden = 1;
        s.dropout = 0.25f;
    } else if (strcmp(name, "resnet") == 0) {
        s.channels[0] = 2, s.channels[1] = 3, s.n_channels = 2;
        s.blocks = 1;
    } else if (strcmp(name, "vit") == 0) {
        s.patch = 4, s.width = 6, s.heads = 2, s.depth = 1, s.mlp_ratio = 2;
    }
    return s;
}

enum { B = 4 };
static uint32_t sample_idx[B] = {11, 5, 7, 2};
static int32_t labels[B] = {0, 2, 1, 2};

static void fill_input(float *x, size_t n)
{
    ct_init_uniform(x, n, 1.5f, ct_rng_key(99, CT_RNG_INIT), 1);
}

/* Mean loss of the batch in training mode (BN batch statistics; dropout
 * masks keyed by sample_idx, so identical across calls). */
static double train_loss(struct ct_model *m, const float *x, int with_grad)
{
    memcpy(ct_model_input(m), x, (size_t)B * m->in_numel * sizeof(float));
    m->step.sample_index = sample_idx;
    m->step.epoch = 3;
    const float *logits = ct_model_forward(m, B);
    int K = (int)ct_model_out_numel(m);
    double l = ct_xent_forward_backward(with_grad ? ct_model_output_grad(m) : NULL, logits,
                                        labels, B, K, 1.0f / B, NULL) / B;
    if (with_grad) {
        ct_model_zero_grad(m);
        ct_model_backward(m, B, NULL, NULL);
    }
    return l;
}

static void check_fd(const char *name)
{
    struct ct_model_spec spec = small_spec(name);
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &spec, B), 0);
    ct_model_init_params(&m, 5);
    float x[B * 64];
    fill_input(x, sizeof x / sizeof *x);
    /* Running statistics change on every training forward; keep a copy to
     * restore, so that every evaluation below starts from the same state
     * (they do not affect training-mode outputs anyway). */
    float *buf0 = malloc(m.buffers.numel * sizeof(float) + 1);
    memcpy(buf0, m.buffers.data, m.buffers.numel * sizeof(float));
    train_loss(&m, x, 1);
    float *an = malloc(m.grads.numel * sizeof(float));
    memcpy(an, m.grads.data, m.grads.numel * sizeof(float));
    /* Central differences in float32. ReLU, max-pool and batch statistics
     * make the loss piecewise smooth: a perturbation that moves some
     * pre-activation across zero (likely here, since a weight before a
     * BatchNorm moves every value of its channel) breaks the difference
     * quotient, not the gradient. So each element is differenced at eps and
     * eps/2: where the two agree the loss is smooth there and the backward
     * must match; where they do not, the element is skipped, and at most a
     * quarter of the elements may be. Rounding: ~1e-7 / (2 eps) ~ 1e-4. */
    const float eps = 2e-3f;
    size_t bad = 0, total = 0, kinks = 0;
    for (int v = 0; v < m.layout.n; v++) {
        float *p = ct_flat_view(&m.params, v);
        for (size_t i = 0; i < m.layout.views[v].numel; i++) {
            double fd[2];
            for (int k = 0; k < 2; k++) {
                float e = k ? eps / 2 : eps, keep = p[i];
                p[i] = keep + e;
                double lp = train_loss(&m, x, 0);
                p[i] = keep - e;
                double lm = train_loss(&m, x, 0);
                p[i] = keep;
                fd[k] = (lp - lm) / (2.0 * e);
            }
            total++;
            if (fabs(fd[0] - fd[1]) > 5e-4 + 1e-2 * fabs(fd[1])) {
                kinks++;
                continue;
            }
            double g = an[m.layout.views[v].offset + i];
            if (fabs(fd[1] - g) > 5e-4 + 1e-2 * fabs(fd[1])) {
                if (bad < 5)
                    fprintf(stderr, "\n  %s %s[%zu]: backward %.6g, finite difference %.6g", name,
                            m.layout.views[v].name, i, g, fd[1]);
                bad++;
            }
        }
    }
    if (bad || kinks * 4 > total)
        fprintf(stderr, "\n  %s: %zu of %zu gradients disagree, %zu skipped at kinks\n", name,
                bad, total, kinks);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(kinks * 4 <= total);
    free(an);
    free(buf0);
    ct_model_free(&m);
}

/* Only the vit: it is smooth (GELU, LayerNorm, softmax). In cnn and resnet
 * every conv weight feeds a training-mode BatchNorm followed by ReLU, so a
 * perturbation moves all values of a channel and crosses many ReLU kinks at
 * any usable float32 step; their difference quotients measure a smoothed
 * loss, not the gradient (seen: consistent 3-7% offsets at two step sizes).
 * Their backward is checked module by module (test_conv, test_norm,
 * test_residual, with finite differences) and as a whole against PyTorch
 * (test_model_golden). */
static void test_fd_vit(void) { check_fd("vit"); }

/* In eval mode a sample's output is the same alone and inside a batch.
 * fused: the cnn's stages as fused blocks (the default) or four modules. */
static void check_eval_independent(const char *name, int fused)
{
    struct ct_model_spec spec = small_spec(name);
    spec.fused = fused;
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &spec, B), 0);
    ct_model_init_params(&m, 6);
    float x[B * 64];
    fill_input(x, sizeof x / sizeof *x);
    train_loss(&m, x, 1); /* move the running statistics away from their init */
    ct_model_set_training(&m, 0);
    m.step.sample_index = NULL;
    memcpy(ct_model_input(&m), x, sizeof x);
    float batch[B * 3];
    memcpy(batch, ct_model_forward(&m, B), sizeof batch);
    for (int b = 0; b < B; b++) {
        memcpy(ct_model_input(&m), x + b * 64, 64 * sizeof(float));
        const float *one = ct_model_forward(&m, 1);
        CT_ASSERT_CLOSE(name, one, batch + b * 3, 3, 1e-6, 1e-5);
    }
    ct_model_free(&m);
}

static void test_eval_independent(void)
{
    check_eval_independent("cnn", 1);
    check_eval_independent("cnn", 0);
    check_eval_independent("resnet", 1);
    check_eval_independent("vit", 1);
}

/* Training mode uses batch statistics and dropout; eval mode does not. */
static void test_train_eval_differ(void)
{
    struct ct_model_spec spec = small_spec("cnn");
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &spec, B), 0);
    ct_model_init_params(&m, 7);
    float x[B * 64];
    fill_input(x, sizeof x / sizeof *x);
    float train_out[B * 3], eval_out[B * 3];
    memcpy(ct_model_input(&m), x, sizeof x);
    m.step.sample_index = sample_idx;
    memcpy(train_out, ct_model_forward(&m, B), sizeof train_out);
    /* The same batch again: identical (masks are keyed, not drawn). */
    memcpy(ct_model_input(&m), x, sizeof x);
    CT_ASSERT_CLOSE("train repeat", ct_model_forward(&m, B), train_out, B * 3, 0, 0);
    ct_model_set_training(&m, 0);
    memcpy(ct_model_input(&m), x, sizeof x);
    memcpy(eval_out, ct_model_forward(&m, B), sizeof eval_out);
    size_t same = 0;
    for (int i = 0; i < B * 3; i++)
        same += train_out[i] == eval_out[i];
    CU_ASSERT(same < B * 3);
    /* Running stats moved: one training forward with momentum 0.1. */
    int rm = ct_layout_find(&m.buffer_layout, "layers.1.running_mean");
    CU_ASSERT_FATAL(rm >= 0);
    float moved = 0;
    for (size_t i = 0; i < m.buffer_layout.views[rm].numel; i++)
        moved += fabsf(ct_flat_view(&m.buffers, rm)[i]);
    CU_ASSERT(moved > 0);
    ct_model_free(&m);
}

/* The cnn of the PyTorch peer: same parameter count and state_dict names,
 * with fused blocks and with four modules per stage. */
static void check_cnn_matches_peer(int fused)
{
    struct ct_model_spec s = ct_model_default_spec();
    s.fused = fused;
    s.name = "cnn";
    s.in_c = 1, s.in_h = s.in_w = 28, s.n_classes = 10;
    s.channels[0] = 32, s.channels[1] = 64, s.n_channels = 2;
    s.hidden[0] = 128, s.n_hidden = 1;
    s.dropout = 0.25f;
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &s, 2), 0);
    CU_ASSERT_EQUAL(ct_model_param_count(&m), 421834); /* the peer's count */
    static const char *const names[] = {"layers.0.weight", "layers.0.bias", "layers.1.weight",
                                        "layers.1.bias", "layers.4.weight", "layers.4.bias",
                                        "layers.5.weight", "layers.5.bias", "layers.9.weight",
                                        "layers.9.bias", "layers.12.weight", "layers.12.bias"};
    CU_ASSERT_EQUAL(m.layout.n, 12);
    for (int i = 0; i < 12 && i < m.layout.n; i++)
        CU_ASSERT_STRING_EQUAL(m.layout.views[i].name, names[i]);
    CU_ASSERT_EQUAL(ct_layout_find(&m.buffer_layout, "layers.5.running_var"), 3);
    CU_ASSERT_EQUAL(m.n_layers, 13); /* the peer's nn.Sequential has 13 layers */
    CU_ASSERT_EQUAL(m.n, fused ? 7 : 13);
    ct_model_free(&m);
}

static void test_cnn_matches_peer(void)
{
    check_cnn_matches_peer(1);
    check_cnn_matches_peer(0);
}

static void test_bad_specs(void)
{
    struct ct_model m;
    struct ct_model_spec s = small_spec("vit");
    s.patch = 3; /* does not divide 8 */
    CU_ASSERT(ct_model_build(&m, &s, 2) < 0);
    s = small_spec("vit");
    s.heads = 4; /* does not divide 6 */
    CU_ASSERT(ct_model_build(&m, &s, 2) < 0);
    s = small_spec("cnn");
    s.n_channels = 4; /* 8 -> 4 -> 2 -> 1 -> pooled below 1x1 */
    s.channels[2] = s.channels[3] = 2;
    CU_ASSERT(ct_model_build(&m, &s, 2) < 0);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"finite differences: vit", test_fd_vit},
        {"eval output independent of the batch", test_eval_independent},
        {"train vs eval (dropout, batch norm)", test_train_eval_differ},
        {"cnn matches the PyTorch peer", test_cnn_matches_peer},
        {"bad model sizes", test_bad_specs},
        {NULL, NULL},
    };
    return ct_test_run("models", cases);
}
