/* Residual blocks and the module tree: naming, layout, forward by definition,
 * a finite-difference check of the whole model's backward, and the memory
 * plan (shared scratch, output written in place, recomputed LayerNorm)
 * giving the same bits as keeping every buffer. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "nn/gelu.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/norm.h"
#include "nn/residual.h"

enum { B = 4, D = 6, E = 4, K = 3 };

/* Linear(D,D)-ReLU, Residual(body Linear-ReLU-Linear, identity),
 * Residual(body Linear(D,E), shortcut Linear(D,E)), Linear(E,K). */
static int build(struct ct_model *m)
{
    ct_model_init(m, D);
    int rc = ct_model_add(m, ct_linear_new(D, D, 1));
    if (rc == 0)
        rc = ct_model_add(m, ct_relu_new(D));
    struct ct_module *r1 = ct_residual_new(D);
    if (rc == 0) {
        rc = ct_residual_add_body(r1, ct_linear_new(D, D, 1));
        if (rc == 0)
            rc = ct_residual_add_body(r1, ct_relu_new(D));
        if (rc == 0)
            rc = ct_residual_add_body(r1, ct_linear_new(D, D, 0));
        rc = rc ? rc : ct_model_add(m, r1);
    }
    struct ct_module *r2 = ct_residual_new(D);
    if (rc == 0) {
        rc = ct_residual_add_body(r2, ct_linear_new(D, E, 1));
        if (rc == 0)
            rc = ct_residual_add_shortcut(r2, ct_linear_new(D, E, 0));
        rc = rc ? rc : ct_model_add(m, r2);
    }
    if (rc == 0)
        rc = ct_model_add(m, ct_linear_new(E, K, 1));
    if (rc == 0)
        rc = ct_model_finalize(m, B);
    return rc;
}

static const float X[B * D] = {0.3f, -1.2f, 0.8f, 0.1f, -0.5f, 0.9f, 1.1f, 0.2f, -0.7f, 0.4f, 0.6f, -0.3f,
                               -0.9f, 0.5f, 0.05f, 1.3f, -0.2f, 0.7f, 0.2f, 0.9f, -1.1f, -0.6f, 0.3f, 0.15f};
static const int32_t Y[B] = {0, 2, 1, 2};

static double loss(struct ct_model *m, int with_grad)
{
    memcpy(ct_model_input(m), X, sizeof X);
    const float *logits = ct_model_forward(m, B);
    double l = ct_xent_forward_backward(with_grad ? ct_model_output_grad(m) : NULL, logits, Y, B,
                                        K, 1.0f / B, NULL) / B;
    if (with_grad) {
        ct_model_zero_grad(m);
        ct_model_backward(m, B, NULL, NULL);
    }
    return l;
}

static void test_names(void)
{
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(build(&m), 0);
    static const char *const names[] = {
        "layers.0.weight", "layers.0.bias", "layers.2.body.0.weight", "layers.2.body.0.bias",
        "layers.2.body.2.weight", "layers.3.body.0.weight", "layers.3.body.0.bias",
        "layers.3.shortcut.0.weight", "layers.4.weight", "layers.4.bias"};
    CU_ASSERT_EQUAL(m.layout.n, 10);
    for (int i = 0; i < 10 && i < m.layout.n; i++)
        CU_ASSERT_STRING_EQUAL(m.layout.views[i].name, names[i]);
    CU_ASSERT_EQUAL(m.mods[3]->out_numel, E);
    ct_model_free(&m);
}

static void test_forward_by_definition(void)
{
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(build(&m), 0);
    ct_model_init_params(&m, 3);
    memcpy(ct_model_input(&m), X, sizeof X);
    ct_model_forward(&m, B);
    /* Block 1: out = x + W2 relu(W1 x + b1), computed by hand. */
    struct ct_module *r1 = m.mods[2];
    const float *x = m.act[2], *w1 = r1->children[0]->p[0], *b1 = r1->children[0]->p[1];
    const float *w2 = r1->children[2]->p[0];
    float want[B * D];
    for (int b = 0; b < B; b++)
        for (int o = 0; o < D; o++) {
            double acc = x[b * D + o];
            for (int j = 0; j < D; j++) {
                double h = b1[j];
                for (int c = 0; c < D; c++)
                    h += (double)w1[j * D + c] * x[b * D + c];
                acc += (double)w2[o * D + j] * (h > 0 ? h : 0);
            }
            want[b * D + o] = (float)acc;
        }
    CT_ASSERT_CLOSE("residual block", m.act[3], want, B * D, 1e-5, 1e-5);
    ct_model_free(&m);
}

static void test_gradients(void)
{
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(build(&m), 0);
    ct_model_init_params(&m, 11);
    loss(&m, 1);
    float *analytic = malloc(m.grads.numel * sizeof(float));
    memcpy(analytic, m.grads.data, m.grads.numel * sizeof(float));
    /* Central differences in float32 with eps 1e-3: rounding error of the
     * loss (~1e-7) over 2*eps gives ~1e-4 absolute; truncation error is
     * O(eps^2) and negligible. A larger eps crosses ReLU kinks of this
     * model (seen with 1e-2). A wrong gradient (a missing shortcut term, a
     * wrong transposition) is off by 1e-2 or more. */
    const float eps = 1e-3f;
    size_t bad = 0, checked = 0;
    double maxdiff = 0;
    for (int v = 0; v < m.layout.n; v++) {
        float *p = ct_flat_view(&m.params, v);
        for (size_t i = 0; i < m.layout.views[v].numel; i++) {
            float keep = p[i];
            p[i] = keep + eps;
            double lp = loss(&m, 0);
            p[i] = keep - eps;
            double lm = loss(&m, 0);
            p[i] = keep;
            double fd = (lp - lm) / (2 * eps);
            double an = analytic[m.layout.views[v].offset + i];
            double d = fabs(fd - an);
            maxdiff = d > maxdiff ? d : maxdiff;
            if (d > 2e-4 + 1e-2 * fabs(fd)) {
                if (bad++ < 5)
                    fprintf(stderr, "  %s[%zu]: analytic %.6g, finite difference %.6g\n",
                            m.layout.views[v].name, i, an, fd);
            }
            checked++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(checked == ct_model_param_count(&m));
    free(analytic);
    ct_model_free(&m);
}

static void test_shape_errors(void)
{
    struct ct_module *r = ct_residual_new(D);
    CU_ASSERT(ct_residual_add_body(r, ct_linear_new(D + 1, D, 1)) < 0); /* wrong input size */
    CU_ASSERT_EQUAL(ct_residual_add_body(r, ct_linear_new(D, E, 1)), 0);
    struct ct_model m;
    ct_model_init(&m, D);
    CU_ASSERT_EQUAL(ct_model_add(&m, r), 0);
    /* Identity shortcut but the body changes the size: refused at finalize. */
    CU_ASSERT(ct_model_finalize(&m, 2) < 0);
    ct_model_free(&m);
}

/* Two pre-LN transformer blocks (attention, MLP) between linear layers, as
 * the gpt builds them. With `keep`, every module's ops are replaced by a
 * copy that declares neither backward_ignores_out nor forward_recomputable:
 * the residual blocks then keep every output in their workspace. */
enum { TT = 5, TC = 8, TH = 16, TNH = 2 };

static struct ct_module *plain(struct ct_module *mod, struct ct_module_ops *copy, int keep)
{
    if (mod && keep) {
        *copy = *mod->ops;
        copy->backward_ignores_out = 0;
        copy->forward_recomputable = 0;
        mod->ops = copy;
    }
    return mod;
}

static int build_blocks(struct ct_model *m, int keep, struct ct_module_ops ops[8])
{
    ct_model_init(m, (size_t)TT * TC);
    int rc = ct_model_add(m, ct_linear_tokens_new(TT, TC, TC, 1));
    struct ct_module *r1 = ct_residual_new((size_t)TT * TC), *r2 = ct_residual_new((size_t)TT * TC);
    if (rc == 0)
        rc = ct_residual_add_body(r1, plain(ct_layernorm_new(TT, TC), &ops[0], keep));
    if (rc == 0)
        rc = ct_residual_add_body(r1, plain(ct_attention_new(TT, TC, TNH, 1), &ops[1], keep));
    rc = rc ? rc : ct_model_add(m, r1);
    if (rc == 0)
        rc = ct_residual_add_body(r2, plain(ct_layernorm_new(TT, TC), &ops[2], keep));
    if (rc == 0)
        rc = ct_residual_add_body(r2, plain(ct_linear_tokens_new(TT, TC, TH, 1), &ops[3], keep));
    if (rc == 0)
        rc = ct_residual_add_body(r2, plain(ct_gelu_new((size_t)TT * TH, 1), &ops[4], keep));
    if (rc == 0)
        rc = ct_residual_add_body(r2, plain(ct_linear_tokens_new(TT, TH, TC, 1), &ops[5], keep));
    rc = rc ? rc : ct_model_add(m, r2);
    if (rc == 0)
        rc = ct_model_add(m, ct_linear_tokens_new(TT, TC, TC, 1));
    if (rc == 0)
        rc = ct_model_finalize(m, B);
    return rc;
}

/* Forward, then backward of fixed output gradients, twice (the second
 * accumulates): the output and every gradient, bit for bit, with and without
 * the memory plan; and the plan takes less of the arena. */
static void test_memory_plan_same_bits(void)
{
    static struct ct_module_ops ops[2][8];
    struct ct_model m[2];
    const size_t n = (size_t)B * TT * TC;
    float *out[2], *x = malloc(n * sizeof *x), *dy = malloc(n * sizeof *dy);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x);
    CU_ASSERT_PTR_NOT_NULL_FATAL(dy);
    ct_init_uniform(x, n, 1.5f, ct_rng_key(7, CT_RNG_INIT), 1);
    ct_init_uniform(dy, n, 1.0f, ct_rng_key(7, CT_RNG_INIT), 2);
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_EQUAL_FATAL(build_blocks(&m[k], k, ops[k]), 0);
        ct_model_init_params(&m[k], 5);
        ct_model_zero_grad(&m[k]);
        out[k] = malloc(n * sizeof(float));
        CU_ASSERT_PTR_NOT_NULL_FATAL(out[k]);
        for (int pass = 0; pass < 2; pass++) {
            memcpy(ct_model_input(&m[k]), x, n * sizeof(float));
            memcpy(out[k], ct_model_forward(&m[k], B), n * sizeof(float));
            memcpy(ct_model_output_grad(&m[k]), dy, n * sizeof(float));
            ct_model_backward(&m[k], B, NULL, NULL);
        }
    }
    CU_ASSERT(m[0].arena.size < m[1].arena.size);
    CU_ASSERT_EQUAL_FATAL(m[0].grads.numel, m[1].grads.numel);
    CU_ASSERT(memcmp(out[0], out[1], n * sizeof(float)) == 0);
    CU_ASSERT(memcmp(m[0].grads.data, m[1].grads.data, m[0].grads.numel * sizeof(float)) == 0);
    /* The gradient w.r.t. the first block's input, which crosses both. */
    CU_ASSERT(memcmp(m[0].dact[1], m[1].dact[1], n * sizeof(float)) == 0);
    for (int k = 0; k < 2; k++) {
        free(out[k]);
        ct_model_free(&m[k]);
    }
    free(x);
    free(dy);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"names in state_dict order", test_names},
        {"forward by definition", test_forward_by_definition},
        {"finite differences through residual blocks", test_gradients},
        {"shape errors", test_shape_errors},
        {"memory plan gives the same bits", test_memory_plan_same_bits},
        {NULL, NULL},
    };
    return ct_test_run("residual", cases);
}
