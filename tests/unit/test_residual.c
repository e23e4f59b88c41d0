/* Residual blocks and the module tree: naming, layout, forward by definition,
 * and a finite-difference check of the whole model's backward. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
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

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"names in state_dict order", test_names},
        {"forward by definition", test_forward_by_definition},
        {"finite differences through residual blocks", test_gradients},
        {"shape errors", test_shape_errors},
        {NULL, NULL},
    };
    return ct_test_run("residual", cases);
}
