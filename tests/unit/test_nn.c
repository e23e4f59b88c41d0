/* Unit tests for the layers, the loss and the mlp model (src/nn, src/models).
 *
 * Dims legend: B = batch rows, C = input features, OC = output features,
 * K = classes.
 *
 * Three kinds of evidence: golden tests against values PyTorch produced
 * (tests/fixtures/<name>.ctfx, made by tests/fixtures/make_fixtures.py; CI has no
 * torch, so the files are committed), central finite-difference checks of
 * every backward, and the fast (sgemm) kernels against the naive references.
 * The optimizer and schedules are tested in test_optim.c; this file is not a
 * test of training convergence.
 *
 * Set CT_TEST_VERBOSE=1 to print the max difference of every comparison.
 */
#include "core/error.h"
#include "core/gemm.h"
#include "core/rng.h"
#include "models/models.h"
#include "nn/activation.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/optim.h"

#include "ct_test.h"

#include <stdint.h>


#include "ct_fixture.h"

/* Deterministic U(-bound, bound) test data: one Philox stream per buffer. */
static void fill(float *p, size_t n, float bound, uint32_t stream)
{
    ct_init_uniform(p, n, bound, ct_rng_key(20240611, CT_RNG_INIT), stream);
}

/* ------------------------------------------------------------ golden: linear */

/* Tolerances for our float32 kernels against torch's float32 kernels: both
 * round differently (sgemm blocking, FMA), so results agree to a few ulp of
 * the partial sums. With C <= 12 terms of magnitude <= ~3 the sums carry
 * absolute errors near 1e-6; atol 1e-5 + rtol 1e-4 leaves a 10x margin and is
 * still 1e4 times smaller than any real mistake (a wrong index, transpose or
 * sign changes values by O(0.1..1)). */
#define GOLD_ATOL 1e-5
#define GOLD_RTOL 1e-4

/* linear.ctfx: the layer's inputs and torch's outputs, (B, C) -> (B, OC). */
struct linear_gold {
    struct fx_file f;
    const float *x, *w, *b, *dout, *out_want, *dx_want, *dw_want, *db_want;
};

/* 0, or -1 (and a failure; nothing to free) when the file or a record is
 * missing; fx_free(&g->f) when done. */
static int linear_gold_open(struct linear_gold *g, int B, int C, int OC)
{
    if (fx_open(&g->f, "linear.ctfx"))
        return -1;
    struct fx_file *f = &g->f;
    g->x = fx_get(f, "x", B * C);
    g->w = fx_get(f, "weight", OC * C);
    g->b = fx_get(f, "bias", OC);
    g->dout = fx_get(f, "dout", B * OC);
    g->out_want = fx_get(f, "out", B * OC);
    g->dx_want = fx_get(f, "dx", B * C);
    g->dw_want = fx_get(f, "dweight", OC * C);
    g->db_want = fx_get(f, "dbias", OC);
    if (g->x && g->w && g->b && g->dout && g->out_want && g->dx_want && g->dw_want && g->db_want)
        return 0;
    fx_free(f);
    return -1;
}

static void test_linear_golden(void)
{
    enum { B = 4, C = 7, OC = 5 };
    struct linear_gold g;
    if (linear_gold_open(&g, B, C, OC))
        return;
    const float *x = g.x, *w = g.w, *b = g.b, *dout = g.dout;
    float out[B * OC], dx[B * C], dw[OC * C], db[OC];

    ct_linear_forward(out, x, w, b, B, C, OC);
    check_close("linear.out", out, g.out_want, B * OC, GOLD_ATOL, GOLD_RTOL);
    memset(dw, 0, sizeof dw);
    memset(db, 0, sizeof db);
    ct_linear_backward(dx, dw, db, dout, x, w, B, C, OC);
    check_close("linear.dx", dx, g.dx_want, B * C, GOLD_ATOL, GOLD_RTOL);
    check_close("linear.dweight", dw, g.dw_want, OC * C, GOLD_ATOL, GOLD_RTOL);
    check_close("linear.dbias", db, g.db_want, OC, GOLD_ATOL, GOLD_RTOL);

    /* The naive references must match torch just as well. */
    ct_linear_forward_ref(out, x, w, b, B, C, OC);
    check_close("linear_ref.out", out, g.out_want, B * OC, GOLD_ATOL, GOLD_RTOL);
    memset(dw, 0, sizeof dw);
    memset(db, 0, sizeof db);
    ct_linear_backward_ref(dx, dw, db, dout, x, w, B, C, OC);
    check_close("linear_ref.dx", dx, g.dx_want, B * C, GOLD_ATOL, GOLD_RTOL);
    check_close("linear_ref.dweight", dw, g.dw_want, OC * C, GOLD_ATOL, GOLD_RTOL);
    check_close("linear_ref.dbias", db, g.db_want, OC, GOLD_ATOL, GOLD_RTOL);
    fx_free(&g.f);
}

/* The same in bf16 (train.precision): within check_bf16's bound, derived
 * from the operand rounding (mag: the same layer over |x|, |w|, |dout|);
 * dbias is not a product and stays float32's. */
static void test_linear_golden_bf16(void)
{
    enum { B = 4, C = 7, OC = 5 };
    struct linear_gold g;
    if (linear_gold_open(&g, B, C, OC))
        return;
    const float *x = g.x, *w = g.w, *b = g.b, *dout = g.dout;
    float out[B * OC], dx[B * C], dw[OC * C], db[OC];
    float out32[B * OC], dx32[B * C], dw32[OC * C], db32[OC];
    float mout[B * OC], mdx[B * C], mdw[OC * C], mdb[OC], zero[OC] = {0};
    float *ax = abs_copy(x, B * C), *aw = abs_copy(w, OC * C), *ad = abs_copy(dout, B * OC);
    ct_linear_forward_ref(mout, ax, aw, zero, B, C, OC);
    memset(mdw, 0, sizeof mdw);
    memset(mdb, 0, sizeof mdb);
    ct_linear_backward_ref(mdx, mdw, mdb, ad, ax, aw, B, C, OC);
    free(ax);
    free(aw);
    free(ad);

    for (int bf = 0; bf < 2; bf++) {
        ct_gemm_set_precision(bf ? CT_PRECISION_BF16 : CT_PRECISION_FP32);
        float *o = bf ? out : out32, *gx = bf ? dx : dx32, *gw = bf ? dw : dw32, *gb = bf ? db : db32;
        ct_linear_forward(o, x, w, b, B, C, OC);
        memset(gw, 0, sizeof dw);
        memset(gb, 0, sizeof db);
        ct_linear_backward(gx, gw, gb, dout, x, w, B, C, OC);
    }
    ct_gemm_set_precision(CT_PRECISION_FP32);
    check_bf16("linear bf16.out", out, g.out_want, mout, out32, B * OC, GOLD_ATOL, GOLD_RTOL);
    check_bf16("linear bf16.dx", dx, g.dx_want, mdx, dx32, B * C, GOLD_ATOL, GOLD_RTOL);
    check_bf16("linear bf16.dweight", dw, g.dw_want, mdw, dw32, OC * C, GOLD_ATOL, GOLD_RTOL);
    check_close("linear bf16.dbias", db, g.db_want, OC, GOLD_ATOL, GOLD_RTOL);
    fx_free(&g.f);
}

/* ------------------------------------------------------------ golden: relu */

static void test_relu_golden(void)
{
    struct fx_file f;
    if (fx_open(&f, "relu.ctfx"))
        return;
    const struct fx_tensor *tx = fx_find(&f, "x");
    if (!tx)
        goto done;
    size_t n = tx->numel;
    const float *x = tx->data, *dout = fx_get(&f, "dout", n), *out_want = fx_get(&f, "out", n),
                *dx_want = fx_get(&f, "dx", n);
    if (!dout || !out_want || !dx_want)
        goto done;
    float *out = ct_test_floats(n), *dx = ct_test_floats(n);
    /* max() and a mask are exact: no tolerance. */
    ct_relu_forward(out, x, n);
    check_close("relu.out", out, out_want, n, 0, 0);
    ct_relu_backward(dx, dout, out, n);
    check_close("relu.dx", dx, dx_want, n, 0, 0);
    free(out);
    free(dx);
done:
    fx_free(&f);
}

/* ------------------------------------------------------------ golden: xent */

static void test_xent_golden(void)
{
    enum { B = 6, K = 10 };
    struct fx_file f;
    if (fx_open(&f, "xent.ctfx"))
        return;
    const float *logits = fx_get(&f, "logits", B * K), *labels = fx_get(&f, "labels", B),
                *loss = fx_get(&f, "loss", 1), *dl_want = fx_get(&f, "dlogits", B * K);
    if (!logits || !labels || !loss || !dl_want)
        goto done;
    int32_t y[B];
    for (int b = 0; b < B; b++)
        y[b] = (int32_t)labels[b];
    float dl[B * K];
    int64_t correct = -1;
    double sum = ct_xent_forward_backward(dl, logits, y, B, K, 1.0f / B, &correct);
    /* Our loss is computed in double, torch's mean in float32: with
     * per-row losses up to ~60 (a label on a -30 logit) float32 carries
     * ~4e-6 absolute error, hence atol 2e-5. The gradients are
     * probabilities / B <= 0.17, computed to float rounding (1e-8) on both
     * sides; atol 1e-6 is 100x that. */
    check_scalar("xent.loss", sum / B, loss[0], 2e-5, 1e-6);
    check_close("xent.dlogits", dl, dl_want, B * K, 1e-6, 1e-5);
    CU_ASSERT(correct >= 0 && correct <= B);
    /* Row 3 puts 30 on its label: certainly correct; row 1 puts its label
     * on -30: certainly wrong. Count the argmax by hand for the rest. */
    int64_t want = 0;
    for (int b = 0; b < B; b++) {
        int arg = 0;
        for (int k = 1; k < K; k++)
            if (logits[b * K + k] > logits[b * K + arg])
                arg = k;
        want += arg == y[b];
    }
    CU_ASSERT_EQUAL(correct, want);
    /* In place (dlogits == logits, as ct_model_output_grad() gives a
     * language model): the same loss, count and gradient, bit for bit. */
    float inplace[B * K];
    memcpy(inplace, logits, sizeof inplace);
    int64_t correct2 = -1;
    double sum2 = ct_xent_forward_backward(inplace, inplace, y, B, K, 1.0f / B, &correct2);
    CU_ASSERT_EQUAL(memcmp(&sum2, &sum, sizeof sum), 0);
    CU_ASSERT_EQUAL(correct2, correct);
    CU_ASSERT_EQUAL(memcmp(inplace, dl, sizeof dl), 0);
done:
    fx_free(&f);
}

/* In place over rows longer than the loss's 16 lanes (a vocabulary-sized
 * row, its tail not a multiple of 16): the same bits as two buffers. */
static void test_xent_in_place(void)
{
    enum { B = 3, K = 1037 };
    static float logits[B * K], two[B * K], one[B * K];
    uint32_t r = 12345u;
    for (int i = 0; i < B * K; i++) {
        r = r * 1664525u + 1013904223u;
        logits[i] = (float)((int32_t)(r >> 8) - (1 << 23)) / (float)(1 << 20);
    }
    const int32_t y[B] = {0, K - 1, 517};
    int64_t c1 = -1, c2 = -2;
    double s1 = ct_xent_forward_backward(two, logits, y, B, K, 0.25f, &c1);
    memcpy(one, logits, sizeof one);
    double s2 = ct_xent_forward_backward(one, one, y, B, K, 0.25f, &c2);
    CU_ASSERT_EQUAL(memcmp(&s1, &s2, sizeof s1), 0);
    CU_ASSERT_EQUAL(c1, c2);
    CU_ASSERT_EQUAL(memcmp(one, two, sizeof one), 0);
    CU_ASSERT(s1 > 0.0 && isfinite(s1));
}

/* ------------------------------------------------------------ golden: mlp step */

static const char *const mlp_names[] = {"layers.0.weight", "layers.0.bias", "layers.2.weight",
                                        "layers.2.bias",   "layers.4.weight", "layers.4.bias"};
enum { MLP_NPARAM = 6 };

/* Compares every view of `flat` with the records "<prefix>.<view name>". */
static void check_views(const struct fx_file *f, const struct ct_flat *flat, const char *prefix,
                        double atol, double rtol)
{
    const struct ct_layout *lay = flat->layout;
    for (int i = 0; i < lay->n; i++) {
        char key[CT_NAME_MAX + 32];
        if (snprintf(key, sizeof key, "%s.%s", prefix, lay->views[i].name) >= (int)sizeof key) {
            CU_FAIL("record name too long");
            continue;
        }
        const float *want = fx_get(f, key, lay->views[i].numel);
        if (want)
            check_close(key, ct_flat_view(flat, i), want, lay->views[i].numel, atol, rtol);
    }
}

/* One training step of the C model as the trainer does it; returns the
 * mean loss, and the logits (B, K) in logits_out (copied before the loss:
 * its gradient overwrites them, ct_model_output_grad). */
static double mlp_step(struct ct_model *m, struct ct_sgd *opt, const float *x, const int32_t *y,
                       int B, float lr, float *logits_out)
{
    memcpy(ct_model_input(m), x, (size_t)B * m->in_numel * sizeof(float));
    const float *logits = ct_model_forward(m, B);
    int K = (int)ct_model_out_numel(m);
    if (logits_out)
        memcpy(logits_out, logits, (size_t)B * K * sizeof(float));
    double sum = ct_xent_forward_backward(ct_model_output_grad(m), logits, y, B, K, 1.0f / B, NULL);
    ct_model_zero_grad(m);
    ct_model_backward(m, B, NULL, NULL);
    if (opt)
        ct_sgd_step(opt, m->params.data, m->grads.data, m->params.numel, lr);
    return sum / B;
}

static void test_mlp_golden(void)
{
    enum { B = 5, IN = 12, NCLS = 3 };
    struct fx_file f;
    if (fx_open(&f, "mlp.ctfx"))
        return;
    struct ct_model m;
    struct ct_sgd opt;
    int have_model = 0, have_opt = 0;
    const float *x = fx_get(&f, "x", B * IN), *labels = fx_get(&f, "labels", B),
                *hp = fx_get(&f, "hparams", 5), *logits1 = fx_get(&f, "step1.logits", B * NCLS),
                *loss1 = fx_get(&f, "step1.loss", 1), *loss2 = fx_get(&f, "step2.loss", 1),
                *logits2 = fx_get(&f, "step2.logits", B * NCLS);
    if (!x || !labels || !hp || !logits1 || !loss1 || !loss2 || !logits2)
        goto done;
    struct ct_model_spec spec = {
        .name = "mlp", .in_c = 1, .in_h = 1, .in_w = IN, .n_classes = NCLS, .hidden = {8, 6}, .n_hidden = 2};
    /* max_batch > B: the model must handle a short batch. */
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &spec, 8), 0);
    have_model = 1;
    CU_ASSERT_EQUAL(m.layout.n, MLP_NPARAM);
    for (int i = 0; i < MLP_NPARAM; i++) {
        char key[FX_NAME_MAX + 8];
        snprintf(key, sizeof key, "init.%s", mlp_names[i]);
        const struct fx_tensor *t = fx_find(&f, key);
        int v = ct_layout_find(&m.layout, mlp_names[i]);
        CU_ASSERT(v >= 0);
        if (!t || v < 0)
            goto done;
        const struct ct_view *view = &m.layout.views[v];
        CU_ASSERT_EQUAL(view->ndim, t->ndim);
        CU_ASSERT_EQUAL(view->numel, t->numel);
        for (int d = 0; d < t->ndim && d < view->ndim; d++)
            CU_ASSERT_EQUAL(view->shape[d], (int64_t)t->dims[d]);
        if (view->numel != t->numel)
            goto done;
        memcpy(ct_flat_view(&m.params, v), t->data, t->numel * sizeof(float));
    }
    int32_t y[B];
    for (int b = 0; b < B; b++)
        y[b] = (int32_t)labels[b];
    struct ct_sgd_params sp = {
        .momentum = hp[1], .dampening = hp[2], .weight_decay = hp[3], .nesterov = hp[4] != 0};
    CU_ASSERT_EQUAL_FATAL(ct_sgd_init(&opt, &sp, m.layout.numel), 0);
    have_opt = 1;

    /* Losses: double (ours) vs float32 (torch) at ~1: rtol 1e-6 is a few
     * float ulp. Activations and gradients: GOLD_* (see above). Parameters
     * after a step move by lr * grad ~ 1e-2, so their error is ~lr times
     * the gradient error: atol 2e-6 still sees a 1% error in an update. */
    float logits[B * NCLS];
    double l1 = mlp_step(&m, &opt, x, y, B, hp[0], logits);
    check_scalar("mlp.step1.loss", l1, loss1[0], 1e-6, 1e-6);
    check_close("mlp.step1.logits", logits, logits1, B * NCLS, GOLD_ATOL, GOLD_RTOL);
    check_views(&f, &m.grads, "step1.grad", GOLD_ATOL, GOLD_RTOL);
    check_views(&f, &m.params, "step1.param", 2e-6, 1e-5);

    double l2 = mlp_step(&m, &opt, x, y, B, hp[0], logits);
    check_scalar("mlp.step2.loss", l2, loss2[0], 1e-6, 1e-6);
    check_close("mlp.step2.logits", logits, logits2, B * NCLS, GOLD_ATOL, GOLD_RTOL);
    check_views(&f, &m.grads, "step2.grad", GOLD_ATOL, GOLD_RTOL);
    check_views(&f, &m.params, "step2.param", 2e-6, 1e-5);
done:
    if (have_opt)
        ct_sgd_free(&opt);
    if (have_model)
        ct_model_free(&m);
    fx_free(&f);
}

/* ------------------------------------------------------------ finite differences */

/* L = sum(out .* R) with out from the naive forward, summed in double. */
static double linear_loss(float *out, const float *x, const float *w, const float *b,
                          const float *R, int B, int C, int OC)
{
    ct_linear_forward_ref(out, x, w, b, B, C, OC);
    double L = 0;
    for (int i = 0; i < B * OC; i++)
        L += (double)out[i] * R[i];
    return L;
}

/* Central differences of linear_loss over every element of p[0..n) (one of
 * x, w, b); compares with `grad`. L is affine in any single input, so the
 * central difference is exact whatever the step: the only error is the
 * float rounding of the outputs that the perturbed element touches (at most
 * OC or B values of |out| <= ~5, each off by <= 2^-24 relative, weighted by
 * |R| <= 1), which a step of 0.5 divides by ~1: <= 1e-5 in all. The
 * perturbation is measured as float(p+eps) - float(p-eps), in double, so the
 * rounding of p +- eps costs nothing. A wrong gradient is off by O(0.1..1). */
static void fd_linear_param(const char *label, float *p, size_t n, const float *grad, float *out,
                            const float *x, const float *w, const float *b, const float *R, int B,
                            int C, int OC)
{
    float *fd = ct_test_floats(n);
    const float eps = 0.5f;
    for (size_t i = 0; i < n; i++) {
        float orig = p[i];
        float hi = orig + eps, lo = orig - eps;
        p[i] = hi;
        double Lp = linear_loss(out, x, w, b, R, B, C, OC);
        p[i] = lo;
        double Lm = linear_loss(out, x, w, b, R, B, C, OC);
        p[i] = orig;
        fd[i] = (float)((Lp - Lm) / ((double)hi - (double)lo));
    }
    check_close(label, grad, fd, n, 2e-5, 1e-5);
    free(fd);
}

static void test_linear_fd(void)
{
    /* Non-square on purpose: a transposed dweight would not even fit. */
    enum { B = 3, C = 5, OC = 4 };
    float x[B * C], w[OC * C], b[OC], R[B * OC], out[B * OC];
    float dx[B * C], dw[OC * C], db[OC];
    fill(x, B * C, 2.0f, 1);
    fill(w, OC * C, 1.0f, 2);
    fill(b, OC, 1.0f, 3);
    fill(R, B * OC, 1.0f, 4);
    memset(dw, 0, sizeof dw);
    memset(db, 0, sizeof db);
    ct_linear_backward(dx, dw, db, R, x, w, B, C, OC);
    fd_linear_param("fd.linear.dx", x, B * C, dx, out, x, w, b, R, B, C, OC);
    fd_linear_param("fd.linear.dweight", w, OC * C, dw, out, x, w, b, R, B, C, OC);
    fd_linear_param("fd.linear.dbias", b, OC, db, out, x, w, b, R, B, C, OC);
}

/* Softmax-xent w.r.t. the logits. The loss is computed in double from float
 * logits, so with a step of 1e-3 the central difference is accurate to the
 * truncation term h^2/6 * |L'''| <= ~2e-7 (third derivatives of the mean
 * log-sum-exp are below 1/B); the float gradient carries ~1e-8. atol 2e-6 is
 * 10x the error budget; a missing softmax term or a wrong sign is off by
 * O(1/(B K)) ~ 1e-2. */
static void test_xent_fd(void)
{
    enum { B = 4, K = 7 };
    float logits[B * K], dl[B * K], fd[B * K];
    int32_t y[B] = {0, 6, 3, 3};
    fill(logits, B * K, 3.0f, 5);
    logits[1 * K + 2] = 30.0f; /* a dominant wrong class */
    double sum = ct_xent_forward_backward(dl, logits, y, B, K, 1.0f / B, NULL);
    CU_ASSERT(isfinite(sum));
    for (int i = 0; i < B * K; i++) {
        float orig = logits[i];
        float hi = orig + 1e-3f, lo = orig - 1e-3f;
        logits[i] = hi;
        double Lp = ct_xent_forward_backward(NULL, logits, y, B, K, 1.0f / B, NULL) / B;
        logits[i] = lo;
        double Lm = ct_xent_forward_backward(NULL, logits, y, B, K, 1.0f / B, NULL) / B;
        logits[i] = orig;
        fd[i] = (float)((Lp - Lm) / ((double)hi - (double)lo));
    }
    check_close("fd.xent.dlogits", dl, fd, B * K, 2e-6, 1e-4);
}

/* ReLU masks of the model's current activations (1 where an output is > 0). */
static void relu_masks(const struct ct_model *m, int B, unsigned char *mask, size_t *n)
{
    size_t k = 0;
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->mods[i]->ops->kind, "relu") == 0)
            for (size_t j = 0; j < (size_t)B * m->mods[i]->out_numel; j++)
                mask[k++] = m->act[i + 1][j] > 0.0f;
    *n = k;
}

static double model_loss(struct ct_model *m, const float *x, const int32_t *y, int B)
{
    memcpy(ct_model_input(m), x, (size_t)B * m->in_numel * sizeof(float));
    const float *logits = ct_model_forward(m, B);
    return ct_xent_forward_backward(NULL, logits, y, B, (int)ct_model_out_numel(m), 1.0f, NULL) / B;
}

/* The whole mlp w.r.t. every parameter: perturb, rerun forward and loss.
 * The forward runs in float32 (sgemm), so L carries float rounding noise
 * (~1e-8, as L ~ 1); a step of 5e-3 turns that into a few 1e-6 in the
 * difference quotient, and the truncation error (the network is piecewise
 * linear, the curvature comes from the softmax: h^2/6 * |L'''|) is smaller.
 * Observed: <= 4e-6. atol 3e-5 + rtol 2e-3 leaves a 7x margin for other
 * BLAS builds; with this data every gradient is between 6e-4 and 0.5, so a
 * wrong one (dropped term, transposed weight, sign) misses by far more. A
 * perturbation that flips a ReLU mask makes the difference quotient
 * meaningless and is skipped; the test requires such skips to stay rare
 * (none with this data). */
static void test_mlp_fd(void)
{
    enum { B = 10, IN = 6, NCLS = 3 };
    struct ct_model m;
    struct ct_model_spec spec = {
        .name = "mlp", .in_c = 1, .in_h = 1, .in_w = IN, .n_classes = NCLS, .hidden = {6, 5}, .n_hidden = 2};
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &spec, B), 0);
    ct_model_init_params(&m, 7);
    /* Scale the init up so every layer's gradient is well above the noise,
     * and shift the hidden biases up so that few units are dead for the
     * whole batch (a dead unit's weights have a zero gradient, which a
     * finite difference confirms but which proves little). */
    for (size_t i = 0; i < m.params.numel; i++)
        m.params.data[i] *= 2.0f;
    for (int v = 0; v < m.layout.n; v++)
        if (strstr(m.layout.views[v].name, "bias") && v + 1 < m.layout.n)
            for (size_t i = 0; i < m.layout.views[v].numel; i++)
                ct_flat_view(&m.params, v)[i] += 0.3f;
    float x[B * IN];
    int32_t y[B];
    for (int b = 0; b < B; b++)
        y[b] = b % NCLS;
    fill(x, B * IN, 2.0f, 6);

    memcpy(ct_model_input(&m), x, sizeof x);
    const float *logits = ct_model_forward(&m, B);
    ct_xent_forward_backward(ct_model_output_grad(&m), logits, y, B, NCLS, 1.0f / B, NULL);
    ct_model_zero_grad(&m);
    ct_model_backward(&m, B, NULL, NULL);

    unsigned char base[256], mask[256];
    size_t nmask, nm2;
    relu_masks(&m, B, base, &nmask);
    CU_ASSERT_FATAL(nmask <= sizeof base);

    int skipped = 0, total = 0;
    for (int v = 0; v < m.layout.n; v++) {
        const struct ct_view *view = &m.layout.views[v];
        float *p = ct_flat_view(&m.params, v);
        float *g = ct_flat_view(&m.grads, v);
        float *fd = ct_test_floats(view->numel), *an = ct_test_floats(view->numel);
        size_t k = 0;
        for (size_t i = 0; i < view->numel; i++) {
            float orig = p[i];
            float hi = orig + 5e-3f, lo = orig - 5e-3f;
            int flipped = 0;
            p[i] = hi;
            double Lp = model_loss(&m, x, y, B);
            relu_masks(&m, B, mask, &nm2);
            flipped |= memcmp(mask, base, nmask) != 0;
            p[i] = lo;
            double Lm = model_loss(&m, x, y, B);
            relu_masks(&m, B, mask, &nm2);
            flipped |= memcmp(mask, base, nmask) != 0;
            p[i] = orig;
            total++;
            if (flipped) {
                skipped++;
                continue;
            }
            fd[k] = (float)((Lp - Lm) / ((double)hi - (double)lo));
            an[k++] = g[i];
        }
        char label[CT_NAME_MAX + 16];
        snprintf(label, sizeof label, "fd.mlp.%s", view->name);
        check_close(label, an, fd, k, 3e-5, 2e-3);
        free(fd);
        free(an);
    }
    if (getenv("CT_TEST_VERBOSE"))
        printf("\n    fd.mlp: %d of %d perturbations skipped (ReLU flip)", skipped, total);
    if (skipped * 10 > total)
        fprintf(stderr, "\n  fd.mlp: %d of %d perturbations flipped a ReLU\n", skipped, total);
    CU_ASSERT(skipped * 10 <= total);
    ct_model_free(&m);
}

/* ------------------------------------------------------------ sgemm vs naive */

static void test_linear_fast_vs_ref(void)
{
    /* {B, C, OC, with bias, with dinp} */
    static const int shapes[][5] = {
        {1, 1, 1, 1, 1},    {1, 7, 3, 1, 1},   {4, 7, 5, 1, 1},  {3, 17, 33, 1, 1},
        {64, 33, 17, 1, 1}, {5, 128, 10, 1, 1}, {2, 9, 4, 0, 0},  {16, 3, 70, 0, 1},
        {7, 20, 1, 1, 0},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], C = shapes[s][1], OC = shapes[s][2];
        int has_bias = shapes[s][3], has_dinp = shapes[s][4];
        float *x = ct_test_floats((size_t)B * C), *w = ct_test_floats((size_t)OC * C);
        float *b = ct_test_floats(OC), *dout = ct_test_floats((size_t)B * OC);
        float *out = ct_test_floats((size_t)B * OC), *out_ref = ct_test_floats((size_t)B * OC);
        float *dx = ct_test_floats((size_t)B * C), *dx_ref = ct_test_floats((size_t)B * C);
        float *dw = ct_test_floats((size_t)OC * C), *dw_ref = ct_test_floats((size_t)OC * C);
        float *db = ct_test_floats(OC), *db_ref = ct_test_floats(OC);
        fill(x, (size_t)B * C, 1.0f, 10);
        fill(w, (size_t)OC * C, 1.0f, 11);
        fill(b, OC, 1.0f, 12);
        fill(dout, (size_t)B * OC, 1.0f, 13);
        const float *bias = has_bias ? b : NULL;
        char label[64];

        ct_linear_forward(out, x, w, bias, B, C, OC);
        ct_linear_forward_ref(out_ref, x, w, bias, B, C, OC);
        /* Sums of up to 128 products of |.| <= 1: float32 error well below
         * 1e-5; the reference accumulates in double. */
        snprintf(label, sizeof label, "out B=%d C=%d OC=%d", B, C, OC);
        check_close(label, out, out_ref, (size_t)B * OC, GOLD_ATOL, GOLD_RTOL);

        /* Garbage (NaN) in dinp: backward must overwrite it, not add to it;
         * BLAS with beta = 0 never reads C. */
        for (size_t i = 0; i < (size_t)B * C; i++)
            dx[i] = dx_ref[i] = NAN;
        ct_linear_backward(has_dinp ? dx : NULL, dw, has_bias ? db : NULL, dout, x, w, B, C, OC);
        ct_linear_backward_ref(has_dinp ? dx_ref : NULL, dw_ref, has_bias ? db_ref : NULL, dout,
                               x, w, B, C, OC);
        if (has_dinp) {
            snprintf(label, sizeof label, "dinp B=%d C=%d OC=%d", B, C, OC);
            check_close(label, dx, dx_ref, (size_t)B * C, GOLD_ATOL, GOLD_RTOL);
        } else {
            for (size_t i = 0; i < (size_t)B * C; i++)
                CU_ASSERT(isnan(dx[i])); /* NULL dinp: nothing written */
        }
        snprintf(label, sizeof label, "dweight B=%d C=%d OC=%d", B, C, OC);
        check_close(label, dw, dw_ref, (size_t)OC * C, GOLD_ATOL, GOLD_RTOL);
        if (has_bias) {
            snprintf(label, sizeof label, "dbias B=%d C=%d OC=%d", B, C, OC);
            check_close(label, db, db_ref, OC, GOLD_ATOL, GOLD_RTOL);
        } else {
            for (int o = 0; o < OC; o++)
                CU_ASSERT_EQUAL(db[o], 0.0f); /* NULL dbias: nothing written */
        }

        /* A second call accumulates into dweight / dbias (2x) and
         * overwrites dinp (1x). Adding the same sum again is not exact when
         * the rows are added one at a time (dbias): B roundings of |.| <= 1
         * values stay below 64 * 6e-8 = 4e-6, hence atol 1e-5. Forgetting
         * to accumulate would leave 1x, off by O(0.1..1). */
        float *dw1 = ct_test_floats((size_t)OC * C), *db1 = ct_test_floats(OC);
        float *dx1 = ct_test_floats((size_t)B * C);
        memcpy(dw1, dw, (size_t)OC * C * sizeof(float));
        memcpy(db1, db, (size_t)OC * sizeof(float));
        memcpy(dx1, dx, (size_t)B * C * sizeof(float));
        for (size_t i = 0; i < (size_t)OC * C; i++)
            dw1[i] *= 2.0f;
        for (int o = 0; o < OC; o++)
            db1[o] *= 2.0f;
        ct_linear_backward(has_dinp ? dx : NULL, dw, has_bias ? db : NULL, dout, x, w, B, C, OC);
        snprintf(label, sizeof label, "2x dweight B=%d C=%d OC=%d", B, C, OC);
        check_close(label, dw, dw1, (size_t)OC * C, 1e-5, 1e-6);
        snprintf(label, sizeof label, "2x dbias B=%d C=%d OC=%d", B, C, OC);
        check_close(label, db, db1, OC, 1e-5, 1e-6);
        if (has_dinp) {
            snprintf(label, sizeof label, "1x dinp B=%d C=%d OC=%d", B, C, OC);
            check_close(label, dx, dx1, (size_t)B * C, 0, 0);
        }
        /* The same contract for the reference. */
        memcpy(dw1, dw_ref, (size_t)OC * C * sizeof(float));
        for (size_t i = 0; i < (size_t)OC * C; i++)
            dw1[i] *= 2.0f;
        ct_linear_backward_ref(NULL, dw_ref, NULL, dout, x, w, B, C, OC);
        snprintf(label, sizeof label, "2x dweight_ref B=%d C=%d OC=%d", B, C, OC);
        check_close(label, dw_ref, dw1, (size_t)OC * C, 1e-5, 1e-6);

        free(dw1);
        free(db1);
        free(dx1);
        free(x);
        free(w);
        free(b);
        free(dout);
        free(out);
        free(out_ref);
        free(dx);
        free(dx_ref);
        free(dw);
        free(dw_ref);
        free(db);
        free(db_ref);
    }
}

/* ------------------------------------------------------------ relu */

static void test_relu_zero(void)
{
    const float x[6] = {0.0f, -0.0f, -1.0f, 1e-30f, -1e-30f, 2.5f};
    const float dout[6] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f};
    const float want_out[6] = {0.0f, 0.0f, 0.0f, 1e-30f, 0.0f, 2.5f};
    const float want_dx[6] = {0.0f, 0.0f, 0.0f, 4.0f, 0.0f, 6.0f};
    float out[6], dx[6];
    ct_relu_forward(out, x, 6);
    check_close("relu0.out", out, want_out, 6, 0, 0);
    ct_relu_backward(dx, dout, out, 6);
    check_close("relu0.dx", dx, want_dx, 6, 0, 0);
    /* The gradient at 0 is exactly +0 (not -0 or dout). */
    CU_ASSERT(!signbit(dx[0]) && !signbit(dx[1]));
}

/* ------------------------------------------------------------ cross entropy */

static void test_xent_stable(void)
{
    enum { B = 3, K = 4 };
    const float logits[B * K] = {
        1000.0f,  -1000.0f, 0.0f,     999.0f,  /* label 0 */
        -1000.0f, 1000.0f,  -1000.0f, -1000.0f, /* label 0: loss 2000 */
        -1000.0f, -1000.0f, -1000.0f, -1000.0f, /* label 2: loss log 4 */
    };
    const int32_t y[B] = {0, 0, 2};
    float dl[B * K];
    int64_t correct = -1;
    double sum = ct_xent_forward_backward(dl, logits, y, B, K, 1.0f, &correct);
    double want = log1p(exp(-1.0)) + 2000.0 + log(4.0);
    CU_ASSERT(isfinite(sum));
    /* exp in float (within 2 ulp): each row's log-sum-exp within ~3e-7. */
    check_scalar("xent1000.loss", sum, want, 1e-6, 1e-12);
    for (int i = 0; i < B * K; i++)
        CU_ASSERT(isfinite(dl[i]));
    const float want_dl[B * K] = {
        (float)(1.0 / (1.0 + exp(-1.0)) - 1.0), 0.0f, 0.0f, (float)(exp(-1.0) / (1.0 + exp(-1.0))),
        -1.0f, 1.0f, 0.0f, 0.0f,
        0.25f, 0.25f, -0.75f, 0.25f,
    };
    check_close("xent1000.dlogits", dl, want_dl, B * K, 1e-7, 1e-6);
    CU_ASSERT_EQUAL(correct, 1); /* only row 0's argmax is its label */
}

static void test_xent_correct_ties(void)
{
    enum { B = 6, K = 4 };
    /* Rows 0, 2 and 4 count only if ties go to the first maximum, row 1
     * only if they go to the last: first-max gives 4, last-max 2. */
    const float logits[B * K] = {
        1, 3, 3, 0, /* tie 1,2: the first max, 1, is the label */
        1, 3, 3, 0, /* label 2 loses the tie */
        5, 5, 5, 5, /* all tied: 0 */
        0, 0, 0, 7, /* clear */
        2, 1, 0, 2, /* tie 0,3: label 0 wins */
        0, 9, 0, 0, /* clear miss */
    };
    const int32_t y[B] = {1, 2, 0, 3, 0, 2};
    int64_t correct = -1;
    float dl[B * K];
    ct_xent_forward_backward(dl, logits, y, B, K, 1.0f, &correct);
    CU_ASSERT_EQUAL(correct, 4);
    /* Also without a gradient buffer. */
    correct = -1;
    double s1 = ct_xent_forward_backward(NULL, logits, y, B, K, 1.0f, &correct);
    CU_ASSERT_EQUAL(correct, 4);
    /* The loss does not care about ties: log-sum-exp minus the label's logit. */
    double want = 0;
    for (int b = 0; b < B; b++) {
        double s = 0;
        for (int k = 0; k < K; k++)
            s += exp(logits[b * K + k]);
        want += log(s) - logits[b * K + y[b]];
    }
    check_scalar("xent_ties.loss", s1, want, 1e-12, 1e-12);
}

/* ------------------------------------------------------------ model */

static void test_model_unknown(void)
{
    struct ct_model m;
    struct ct_model_spec spec = {
        .name = "resnet9000", .in_c = 1, .in_h = 3, .in_w = 4, .n_classes = 3, .hidden = {8}, .n_hidden = 1};
    ct_error_clear();
    int rc = ct_model_build(&m, &spec, 4);
    CU_ASSERT(rc < 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "resnet9000"));
    CU_ASSERT_PTR_NULL(m.params.data);
    CU_ASSERT_EQUAL(m.n, 0);
}

static void test_model_names_shapes(void)
{
    struct ct_model m;
    struct ct_model_spec spec = {
        .name = "mlp", .in_c = 1, .in_h = 3, .in_w = 4, .n_classes = 3, .hidden = {8, 6}, .n_hidden = 2};
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &spec, 4), 0);
    static const int64_t shapes[MLP_NPARAM][2] = {{8, 12}, {8, 0}, {6, 8}, {6, 0}, {3, 6}, {3, 0}};
    CU_ASSERT_EQUAL(m.n, 5); /* Linear, ReLU, Linear, ReLU, Linear */
    CU_ASSERT_EQUAL(m.layout.n, MLP_NPARAM);
    for (int i = 0; i < MLP_NPARAM && i < m.layout.n; i++) {
        const struct ct_view *v = &m.layout.views[i];
        CU_ASSERT_STRING_EQUAL(v->name, mlp_names[i]);
        CU_ASSERT_EQUAL(ct_layout_find(&m.layout, mlp_names[i]), i);
        int ndim = shapes[i][1] ? 2 : 1;
        CU_ASSERT_EQUAL(v->ndim, ndim);
        CU_ASSERT_EQUAL(v->shape[0], shapes[i][0]);
        if (ndim == 2)
            CU_ASSERT_EQUAL(v->shape[1], shapes[i][1]);
    }
    CU_ASSERT_EQUAL(ct_model_param_count(&m), 8 * 12 + 8 + 6 * 8 + 6 + 3 * 6 + 3);
    CU_ASSERT_EQUAL(ct_model_out_numel(&m), 3);
    ct_model_free(&m);
}

static void test_model_init(void)
{
    struct ct_model a, b;
    struct ct_model_spec spec = {
        .name = "mlp", .in_c = 1, .in_h = 3, .in_w = 4, .n_classes = 3, .hidden = {8, 6}, .n_hidden = 2};
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&a, &spec, 4), 0);
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&b, &spec, 4), 0);
    size_t bytes = a.params.numel * sizeof(float);
    ct_model_init_params(&a, 42);
    ct_model_init_params(&b, 42);
    CU_ASSERT(memcmp(a.params.data, b.params.data, bytes) == 0);
    ct_model_init_params(&b, 43);
    CU_ASSERT(memcmp(a.params.data, b.params.data, bytes) != 0);
    /* Every tensor differs for the new seed, not just one. */
    for (int v = 0; v < a.layout.n; v++)
        CU_ASSERT(memcmp(ct_flat_view(&a.params, v), ct_flat_view(&b.params, v),
                         a.layout.views[v].numel * sizeof(float)) != 0);
    /* Each tensor has its own random stream (its view index): layers.0.bias
     * has the same bound as layers.0.weight, so a shared stream would make it
     * a copy of the weight's first row. */
    CU_ASSERT(memcmp(ct_flat_view(&a.params, 0), ct_flat_view(&a.params, 1), 8 * sizeof(float)) !=
              0);
    /* Re-initialising with the old seed restores the old values exactly. */
    ct_model_init_params(&b, 42);
    CU_ASSERT(memcmp(a.params.data, b.params.data, bytes) == 0);

    /* layers.0: U(-1/sqrt(12), 1/sqrt(12)) for weight and bias. With 96
     * weights the sample mean has sd bound/17 (checked to ~5 sd) and the
     * sample variance is bound^2/3 within ~15%; max |w| > 0.9 bound fails
     * with probability 0.9^96 ~ 4e-5 for a correct init but certainly for a
     * bound that is 10% too small, and <= bound catches one too large. */
    double bound = 1.0 / sqrt(12.0);
    int v = ct_layout_find(&a.layout, "layers.0.weight");
    CU_ASSERT_FATAL(v >= 0);
    const float *w = ct_flat_view(&a.params, v);
    size_t n = a.layout.views[v].numel;
    double sum = 0, sq = 0, mx = 0;
    for (size_t i = 0; i < n; i++) {
        sum += w[i];
        sq += (double)w[i] * w[i];
        mx = fmax(mx, fabs(w[i]));
    }
    double mean = sum / n, var = sq / n - mean * mean;
    CU_ASSERT(mx <= bound);
    CU_ASSERT(mx > 0.9 * bound);
    CU_ASSERT(fabs(mean) < 0.3 * bound);
    CU_ASSERT(var > 0.6 * bound * bound / 3 && var < 1.4 * bound * bound / 3);
    int vb = ct_layout_find(&a.layout, "layers.0.bias");
    CU_ASSERT_FATAL(vb >= 0);
    for (int i = 0; i < 8; i++)
        CU_ASSERT(fabs(ct_flat_view(&a.params, vb)[i]) <= bound);
    /* layers.2 has fan-in 8, hence a wider bound that it must use. */
    int v2 = ct_layout_find(&a.layout, "layers.2.weight");
    CU_ASSERT_FATAL(v2 >= 0);
    double mx2 = 0;
    for (int i = 0; i < 48; i++)
        mx2 = fmax(mx2, fabs(ct_flat_view(&a.params, v2)[i]));
    CU_ASSERT(mx2 <= 1.0 / sqrt(8.0) && mx2 > bound);
    ct_model_free(&a);
    ct_model_free(&b);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"linear golden (torch)", test_linear_golden},
        {"linear golden in bf16 (torch, rounding bound)", test_linear_golden_bf16},
        {"relu golden (torch)", test_relu_golden},
        {"cross entropy golden (torch)", test_xent_golden},
        {"mlp two SGD steps golden (torch)", test_mlp_golden},
        {"linear finite differences", test_linear_fd},
        {"cross entropy finite differences", test_xent_fd},
        {"mlp finite differences", test_mlp_fd},
        {"linear sgemm vs naive", test_linear_fast_vs_ref},
        {"relu gradient at zero", test_relu_zero},
        {"cross entropy stable at +-1000", test_xent_stable},
        {"cross entropy in place", test_xent_in_place},
        {"cross entropy correct count and ties", test_xent_correct_ties},
        {"model unknown name", test_model_unknown},
        {"mlp parameter names and shapes", test_model_names_shapes},
        {"mlp init deterministic and bounded", test_model_init},
        {NULL, NULL},
    };
    return ct_test_run("nn", cases);
}
