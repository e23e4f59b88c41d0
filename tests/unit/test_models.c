/* The model zoo: shapes and state_dict names, finite-difference checks of a
 * whole training step's gradients through every smooth model (vit, gpt: small
 * sizes), the gpt's parameter count, tied head and causality, eval
 * outputs that do not depend on the rest of the batch, and train/eval
 * behaviour of dropout and batch norm. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ct_model_test.h"
#include "ct_test.h"
#include "models/models.h"
#include "nn/loss.h"

/* ct_test_image_spec, the cnn with dropout (its train/eval difference). */
static struct ct_model_spec small_spec(const char *name)
{
    struct ct_model_spec s = ct_test_image_spec(name);
    if (strcmp(name, "cnn") == 0)
        s.dropout = 0.25f;
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
    m->fwd.sample_index = sample_idx;
    m->fwd.epoch = 3;
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
    m.fwd.sample_index = NULL;
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
    m.fwd.sample_index = sample_idx;
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

/* ------------------------------------------------------------------ gpt */

/* Parameters: wte (V, C) and wpe (T, C); per block two LayerNorms (4C),
 * qkv (3C, C) + 3C, proj (C, C) + C, fc (4C, C) + 4C, proj (C, 4C) + C,
 * i.e. 12 C^2 + 13 C; the final LayerNorm 2C; the tied head nothing. */
static size_t gpt_param_formula(size_t V, size_t T, size_t C, size_t depth)
{
    return V * C + T * C + depth * (12 * C * C + 13 * C) + 2 * C;
}

/* Count, state_dict names and shapes, the tied head: with and without
 * dropout (dropout modules take layer numbers but hold nothing). */
static void test_gpt_build(void)
{
    static const char *const block[] = {"body.0.weight", "body.0.bias", "body.1.qkv.weight",
                                        "body.1.qkv.bias", "body.1.proj.weight", "body.1.proj.bias"};
    static const char *const mlp[] = {"body.0.weight", "body.0.bias", "body.1.weight",
                                      "body.1.bias", "body.3.weight", "body.3.bias"};
    const size_t C = 12, V = 16, T = 8;
    const size_t attn_numel[] = {C, C, 3 * C * C, 3 * C, C * C, C};
    const size_t mlp_numel[] = {C, C, 4 * C * C, 4 * C, 4 * C * C, C};
    for (int drop = 0; drop < 2; drop++) {
        struct ct_model_spec s = ct_test_gpt_spec(V, T, C, 3, 2, drop ? 0.1f : 0.0f);
        struct ct_model m;
        CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &s, 2), 0);
        CU_ASSERT_EQUAL(ct_model_param_count(&m), gpt_param_formula(V, T, C, 2));
        CU_ASSERT_EQUAL(ct_model_param_count(&m), 4080);
        CU_ASSERT_EQUAL(m.buffers.numel, 0);
        CU_ASSERT_EQUAL(ct_model_out_numel(&m), T * V);
        CU_ASSERT_EQUAL(m.in_numel, T);
        /* embedding, [dropout], 2 x (attention block, MLP block), ln_f, head */
        CU_ASSERT_EQUAL(m.n, 7 + drop);
        CU_ASSERT_EQUAL_FATAL(m.layout.n, 2 + 2 * 12 + 2);
        CU_ASSERT_STRING_EQUAL(m.layout.views[0].name, "layers.0.wte.weight");
        CU_ASSERT_EQUAL(m.layout.views[0].numel, V * C);
        CU_ASSERT(m.layout.views[0].ndim == 2 && m.layout.views[0].shape[0] == (int64_t)V &&
                  m.layout.views[0].shape[1] == (int64_t)C);
        CU_ASSERT_STRING_EQUAL(m.layout.views[1].name, "layers.0.wpe.weight");
        CU_ASSERT_EQUAL(m.layout.views[1].numel, T * C);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 6; j++) {
                char want[64];
                const struct ct_view *a = &m.layout.views[2 + 12 * i + j];
                const struct ct_view *b = &m.layout.views[2 + 12 * i + 6 + j];
                snprintf(want, sizeof want, "layers.%d.%s", 1 + drop + 2 * i, block[j]);
                CU_ASSERT_STRING_EQUAL(a->name, want);
                CU_ASSERT_EQUAL(a->numel, attn_numel[j]);
                snprintf(want, sizeof want, "layers.%d.%s", 2 + drop + 2 * i, mlp[j]);
                CU_ASSERT_STRING_EQUAL(b->name, want);
                CU_ASSERT_EQUAL(b->numel, mlp_numel[j]);
            }
        char lnf[32];
        snprintf(lnf, sizeof lnf, "layers.%d.weight", 5 + drop);
        CU_ASSERT_STRING_EQUAL(m.layout.views[26].name, lnf);
        snprintf(lnf, sizeof lnf, "layers.%d.bias", 5 + drop);
        CU_ASSERT_STRING_EQUAL(m.layout.views[27].name, lnf);
        /* No lm_head tensor: nothing named after the head's layer. */
        snprintf(lnf, sizeof lnf, "layers.%d.weight", 6 + drop);
        CU_ASSERT_EQUAL(ct_layout_find(&m.layout, lnf), -1);
        ct_model_free(&m);
    }
    /* configs/moby-gpt.ini's model: the formula at V = 256, T = C = 128, depth 4. */
    struct ct_model_spec s = ct_test_gpt_spec(256, 128, 128, 4, 4, 0.0f);
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &s, 1), 0);
    CU_ASSERT_EQUAL(ct_model_param_count(&m), 842496);
    CU_ASSERT_EQUAL(ct_model_param_count(&m), gpt_param_formula(256, 128, 128, 4));
    ct_model_free(&m);
}

enum { GB = 3, GV = 5, GT = 4, GC = 4 };
static uint32_t gpt_idx[GB] = {4, 9, 1};

/* Mean loss over the GB*GT targets in training mode. */
static double gpt_loss(struct ct_model *m, const float *x, const int32_t *y, int with_grad)
{
    memcpy(ct_model_input(m), x, sizeof(float) * GB * GT);
    m->fwd.sample_index = gpt_idx;
    m->fwd.epoch = 2;
    const float *logits = ct_model_forward(m, GB);
    double l = ct_xent_forward_backward(with_grad ? ct_model_output_grad(m) : NULL, logits, y,
                                        GB * GT, GV, 1.0f / (GB * GT), NULL) / (GB * GT);
    if (with_grad) {
        ct_model_zero_grad(m);
        ct_model_backward(m, GB, NULL, NULL);
    }
    return l;
}

/* Central differences of every parameter through the whole gpt: the loss at
 * every position, causal attention, GELU, LayerNorm and the tied head (wte's
 * gradient is the sum of the embedding's and the head's parts), with and
 * without dropout (its masks are keyed by sample and epoch, the same at
 * every call). The model is smooth: no kinks to skip. */
static void check_fd_gpt(float dropout)
{
    struct ct_model_spec s = ct_test_gpt_spec(GV, GT, GC, 2, 1, dropout);
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &s, GB), 0);
    ct_model_init_params(&m, 8);
    /* Larger weights than GPT-2's N(0, 0.02) so that every path matters. */
    ct_init_uniform(m.params.data, m.params.numel, 0.5f, ct_rng_key(3, CT_RNG_INIT), 1);
    const float x[GB * GT] = {0, 3, 1, 4, 2, 2, 0, 1, 4, 4, 3, 0};
    const int32_t y[GB * GT] = {3, 1, 4, 0, 2, 0, 1, 3, 4, 3, 0, 2};
    gpt_loss(&m, x, y, 1);
    float *an = malloc(m.grads.numel * sizeof(float));
    memcpy(an, m.grads.data, m.grads.numel * sizeof(float));
    const float eps = 1e-2f;
    size_t bad = 0;
    double worst = 0;
    for (size_t i = 0; i < m.params.numel; i++) {
        float keep = m.params.data[i];
        m.params.data[i] = keep + eps;
        double lp = gpt_loss(&m, x, y, 0);
        m.params.data[i] = keep - eps;
        double lm = gpt_loss(&m, x, y, 0);
        m.params.data[i] = keep;
        double fd = (lp - lm) / (2.0 * eps), g = an[i], d = fabs(fd - g);
        if (d > worst)
            worst = d;
        if (d > 2e-4 + 1e-2 * fabs(fd)) {
            if (bad < 5)
                fprintf(stderr, "\n  gpt (dropout %.1f) param %zu: backward %.6g, finite difference %.6g",
                        dropout, i, g, fd);
            bad++;
        }
    }
    if (bad)
        fprintf(stderr, "\n  gpt: %zu of %zu gradients disagree (max diff %.3g)\n", bad,
                m.params.numel, worst);
    CU_ASSERT_EQUAL(bad, 0);
    /* wte's gradient is nonzero for rows no input uses: the head's part. */
    CU_ASSERT(m.params.numel > 0 && an[0] != 0.0f);
    free(an);
    ct_model_free(&m);
}

static void test_fd_gpt(void)
{
    check_fd_gpt(0.0f);
    check_fd_gpt(0.25f);
}

/* Causal: the logits at position t do not depend on the tokens after t,
 * and (eval mode) a window's logits are the same alone and in a batch. */
static void test_gpt_causal(void)
{
    struct ct_model_spec s = ct_test_gpt_spec(7, 6, 8, 2, 2, 0.0f);
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &s, 2), 0);
    ct_model_init_params(&m, 9);
    ct_model_set_training(&m, 0);
    m.fwd.sample_index = NULL;
    const float a[6] = {1, 5, 2, 6, 0, 3};
    float ref[6 * 7];
    memcpy(ct_model_input(&m), a, sizeof a);
    memcpy(ref, ct_model_forward(&m, 1), sizeof ref);
    for (int t = 0; t < 6; t++) {
        float b[6];
        memcpy(b, a, sizeof b);
        b[t] = (float)(((int)a[t] + 3) % 7); /* another token at t */
        memcpy(ct_model_input(&m), b, sizeof b);
        const float *z = ct_model_forward(&m, 1);
        CT_ASSERT_CLOSE("positions before the change", z, ref, (size_t)t * 7, 0, 0);
        size_t moved = 0;
        for (int k = 0; k < 7; k++)
            moved += z[t * 7 + k] != ref[t * 7 + k];
        CU_ASSERT(moved > 0); /* the position itself sees its token */
    }
    float two[2 * 6] = {4, 4, 0, 1, 2, 6};
    memcpy(two + 6, a, sizeof a);
    memcpy(ct_model_input(&m), two, sizeof two);
    CT_ASSERT_CLOSE("in a batch of two", ct_model_forward(&m, 2) + 6 * 7, ref, 6 * 7, 1e-6, 1e-5);
    ct_model_free(&m);
}

/* Refused: a block that is not the data's window, heads that do not divide
 * the width, a vocabulary of fewer than two tokens. */
static void test_gpt_bad_specs(void)
{
    struct ct_model m;
    struct ct_model_spec s = ct_test_gpt_spec(16, 8, 12, 3, 1, 0.0f);
    s.block = 16; /* samples of 8 tokens */
    CU_ASSERT_EQUAL(ct_model_build(&m, &s, 2), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "model.block = 16"));
    s = ct_test_gpt_spec(16, 8, 12, 5, 1, 0.0f);
    CU_ASSERT_EQUAL(ct_model_build(&m, &s, 2), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "does not divide"));
    s = ct_test_gpt_spec(1, 8, 12, 3, 1, 0.0f);
    CU_ASSERT_EQUAL(ct_model_build(&m, &s, 2), CT_EINVAL);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"finite differences: vit", test_fd_vit},
        {"eval output independent of the batch", test_eval_independent},
        {"train vs eval (dropout, batch norm)", test_train_eval_differ},
        {"cnn matches the PyTorch peer", test_cnn_matches_peer},
        {"bad model sizes", test_bad_specs},
        {"gpt: parameters, names, tied head", test_gpt_build},
        {"finite differences: gpt", test_fd_gpt},
        {"gpt: causal, batch-independent", test_gpt_causal},
        {"gpt: bad sizes", test_gpt_bad_specs},
        {NULL, NULL},
    };
    return ct_test_run("models", cases);
}
