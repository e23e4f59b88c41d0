/* Golden tests of whole training steps of the cnn, resnet and vit models
 * against PyTorch (tests/fixtures/model_<name>.ctfx, made by
 * tests/fixtures/make_fixtures_models.py; CI has no torch, so the files are
 * committed).
 *
 * Dims legend: B = batch rows, K = classes.
 *
 * Each test builds the model with ct_model_build() at the fixture's small
 * sizes, copies torch's initial parameters and BatchNorm running statistics
 * in by name, then takes the two training steps the fixture took, as the
 * trainer does: forward, cross-entropy (mean: grad_scale 1/B), zero-grad,
 * backward, one optimizer step over the whole flat buffer (SGD for cnn and
 * resnet, AdamW for vit). It compares the logits, the losses, every
 * gradient, every parameter after each step and the running statistics after
 * each forward. Finite differences (test_models.c) cannot check cnn and
 * resnet as a whole (BatchNorm + ReLU kinks); this test can. It is not a
 * test of the dropout masks (the golden cnn has p = 0: torch cannot
 * reproduce our Philox masks) nor of multi-rank BatchNorm.
 *
 * Tolerances. Both sides compute in float32 with different summation orders
 * (sgemm blocking, im2col, double accumulators on our side), so every value
 * carries a rounding error of a few float ulp of its partial sums. The
 * fixture script recomputes the same steps in float64 and prints torch's own
 * float32 error: at most ~1e-7 for logits and losses and 4e-6 for the
 * largest gradient (the resnet shortcut conv's, |g| ~ 1.5, which comes
 * through a BatchNorm backward: a difference of sums scaled by 1/std). The
 * bounds below are 5x (parameters after an SGD step) to 40x (logits) what we
 * measured between torch and C, and still 1e3 to 1e4 times smaller than a
 * real mistake (a wrong index, transpose, sign or statistic changes values
 * by 1e-2..1; see below for the optimizers' hyperparameters). The fixture's
 * seed keeps every ReLU input >= 1e-4 from 0 and every pooling maximum
 * >= 1e-4 above its runner-up, so rounding cannot flip a kink.
 *
 * Set CT_TEST_VERBOSE=1 to print the max difference of every comparison.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "models/models.h"
#include "nn/loss.h"
#include "optim/adamw.h"
#include "optim/optim.h"

#include "ct_test.h"

#include "ct_fixture.h"

enum { BATCH = 4, IN_C = 1, IN_HW = 8, NCLS = 3, VIT_WIDTH = 8 };

/* torch's hyperparameters (Python doubles); the fixture's float32 copies
 * are checked against them. */
#define SGD_LR 0.05
#define SGD_MOMENTUM 0.9
#define SGD_WD 5e-4
#define ADAMW_LR 1e-3
#define ADAMW_WD 0.01

struct tol {
    double atol, rtol;
};

struct golden {
    const char *model;
    int adamw; /* else SGD */
    int unfused; /* cnn: the four modules per stage instead of the fused block */
    struct tol logits, loss, grad, param, buffer;
};

/* The sizes make_fixtures_models.py uses; dropout 0 (see the top). */
static struct ct_model_spec golden_spec(const char *name)
{
    struct ct_model_spec s = ct_model_default_spec();
    s.name = name;
    s.in_c = IN_C;
    s.in_h = s.in_w = IN_HW;
    s.n_classes = NCLS;
    if (strcmp(name, "cnn") == 0) {
        s.channels[0] = 3, s.channels[1] = 4, s.n_channels = 2;
        s.hidden[0] = 6, s.n_hidden = 1;
        s.dropout = 0.0f;
    } else if (strcmp(name, "resnet") == 0) {
        s.channels[0] = 2, s.channels[1] = 3, s.n_channels = 2;
        s.blocks = 1;
    } else if (strcmp(name, "vit") == 0) {
        s.patch = 4, s.width = VIT_WIDTH, s.heads = 2, s.depth = 1, s.mlp_ratio = 2;
        s.gelu_tanh = 0;
    }
    return s;
}

/* ------------------------------------------------------------ fixture <-> views */

static int record_key(char *key, size_t size, const char *prefix, const char *name)
{
    if (snprintf(key, size, "%s.%s", prefix, name) >= (int)size) {
        CU_FAIL("record name too long");
        return -1;
    }
    return 0;
}

/* Copies record "init.<view name>" into every view of `flat`; the record's
 * shape must equal the view's. Returns 0 when every view was filled. */
static int load_views(const struct fx_file *f, const struct ct_flat *flat)
{
    const struct ct_layout *lay = flat->layout;
    int rc = 0;
    for (int i = 0; i < lay->n; i++) {
        const struct ct_view *v = &lay->views[i];
        char key[CT_NAME_MAX + 32];
        const struct fx_tensor *t = record_key(key, sizeof key, "init", v->name) ? NULL
                                                                                  : fx_find(f, key);
        if (!t) {
            rc = -1;
            continue;
        }
        int same = t->ndim == v->ndim && t->numel == v->numel;
        for (int d = 0; same && d < v->ndim; d++)
            same = (int64_t)t->dims[d] == v->shape[d];
        if (!same) {
            fprintf(stderr, "\n  %s: record shape differs from the view's (%d dims, %zu values; "
                            "view %d dims, %zu values)\n",
                    key, t->ndim, t->numel, v->ndim, v->numel);
            CU_FAIL("fixture shape differs from the model's");
            rc = -1;
            continue;
        }
        memcpy(ct_flat_view(flat, i), t->data, t->numel * sizeof(float));
    }
    return rc;
}

/* The fixture's "init." records, in file order, must be exactly our
 * parameter views then our buffer views, in layout order: torch's
 * state_dict order and names are ours (less num_batches_tracked). */
static void check_state_dict_order(const struct fx_file *f, const struct ct_model *m)
{
    int p = 0, b = 0;
    for (int r = 0; r < f->n; r++) {
        if (strncmp(f->t[r].name, "init.", 5) != 0)
            continue;
        const char *name = f->t[r].name + 5;
        const char *want = p < m->layout.n          ? m->layout.views[p++].name
                           : b < m->buffer_layout.n ? m->buffer_layout.views[b++].name
                                                    : "(none: the model has no more tensors)";
        if (strcmp(name, want) != 0) {
            fprintf(stderr, "\n  state_dict order: torch has %s where we have %s\n", name, want);
            CU_FAIL("state_dict order differs");
            return;
        }
    }
    CU_ASSERT_EQUAL(p, m->layout.n);
    CU_ASSERT_EQUAL(b, m->buffer_layout.n);
}

/* Compares every view of `flat` (but `skip`, if set) with the records
 * "<prefix>.<view name>"; labels "<model>.<record>". */
static void check_views(const struct fx_file *f, const char *model, const struct ct_flat *flat,
                        const char *prefix, struct tol t, const char *skip)
{
    const struct ct_layout *lay = flat->layout;
    for (int i = 0; i < lay->n; i++) {
        char key[CT_NAME_MAX + 32], label[CT_NAME_MAX + 48];
        if (skip && strcmp(lay->views[i].name, skip) == 0)
            continue;
        if (record_key(key, sizeof key, prefix, lay->views[i].name))
            continue;
        const float *want = fx_get(f, key, lay->views[i].numel);
        snprintf(label, sizeof label, "%s.%s", model, key);
        if (want)
            check_close(label, ct_flat_view(flat, i), want, lay->views[i].numel, t.atol, t.rtol);
    }
}

/* ------------------------------------------------------------ optimizers */

struct opt {
    int adamw;
    struct ct_sgd sgd;
    struct ct_adamw adam;
};

static int opt_init(struct opt *o, int adamw, const struct fx_file *f, const struct ct_layout *lay)
{
    memset(o, 0, sizeof *o);
    o->adamw = adamw;
    /* The fixture stores the hyperparameters as float32; torch used the
     * Python doubles above, and so do we. A regenerated fixture with other
     * values fails here rather than somewhere in the comparisons. */
    if (adamw) {
        const float *hp = fx_get(f, "hparams", 5);
        struct ct_adamw_params ap = ct_adamw_default_params();
        CU_ASSERT(hp && hp[0] == (float)ADAMW_LR && hp[1] == (float)ap.beta1 &&
                  hp[2] == (float)ap.beta2 && hp[3] == (float)ap.eps && hp[4] == (float)ADAMW_WD);
        ap.weight_decay = ADAMW_WD;
        return ct_adamw_init(&o->adam, &ap, lay->numel);
    }
    const float *hp = fx_get(f, "hparams", 3);
    CU_ASSERT(hp && hp[0] == (float)SGD_LR && hp[1] == (float)SGD_MOMENTUM &&
              hp[2] == (float)SGD_WD);
    struct ct_sgd_params sp = {.momentum = SGD_MOMENTUM, .weight_decay = SGD_WD};
    return ct_sgd_init(&o->sgd, &sp, lay->numel);
}

static void opt_step(struct opt *o, struct ct_model *m)
{
    if (o->adamw)
        ct_adamw_step(&o->adam, m->params.data, m->grads.data, m->params.numel, ADAMW_LR);
    else
        ct_sgd_step(&o->sgd, m->params.data, m->grads.data, m->params.numel, (float)SGD_LR);
}

static void opt_free(struct opt *o)
{
    if (o->adamw)
        ct_adamw_free(&o->adam);
    else
        ct_sgd_free(&o->sgd);
}

/* AdamW scales each element's update to about lr whatever the size of its
 * gradient. The attention's k bias has a gradient that is 0 in exact
 * arithmetic (adding q.b_k to every score of a softmax row changes nothing),
 * so both torch and we get rounding noise (~5e-9) there, and AdamW turns it
 * into updates of up to +-lr with unrelated signs: the fixture script's own
 * float32-vs-float64 check shows 4e-4 after one step. So the k part of our
 * gradient is checked to be 0 up to rounding (a sum over 16 rows of terms
 * <= ~0.1 that cancel: 1e-7 is 20x the noise measured, and a real k-bias
 * gradient would be ~1e-2), and the k part of the bias after step t only to
 * be within 2 lr t of torch's (each step moves it by at most ~lr on either
 * side: |m_hat| / sqrt(v_hat) <= ~1.001 over the first two steps). The q
 * and v parts get the ordinary tolerances. */
static const char qkv_bias[] = "layers.1.body.1.qkv.bias";

static void check_k_bias_grad(const struct ct_model *m, int step)
{
    const int C = VIT_WIDTH;
    static const float zeros[VIT_WIDTH];
    char label[64];
    int v = ct_layout_find(&m->layout, qkv_bias);
    CU_ASSERT(v >= 0);
    if (v < 0)
        return;
    snprintf(label, sizeof label, "vit.step%d.grad.k_bias", step);
    check_close(label, ct_flat_view(&m->grads, v) + C, zeros, C, 1e-7, 0);
}

static void check_qkv_bias(const struct fx_file *f, const struct ct_model *m, const char *prefix,
                           int step, struct tol t)
{
    const char *name = qkv_bias;
    const int C = VIT_WIDTH;
    char key[CT_NAME_MAX + 32], label[CT_NAME_MAX + 48];
    int v = ct_layout_find(&m->layout, name);
    CU_ASSERT(v >= 0);
    if (v < 0 || record_key(key, sizeof key, prefix, name))
        return;
    const float *want = fx_get(f, key, 3 * C), *got = ct_flat_view(&m->params, v);
    if (!want)
        return;
    snprintf(label, sizeof label, "vit.%s[q]", key);
    check_close(label, got, want, C, t.atol, t.rtol);
    snprintf(label, sizeof label, "vit.%s[k]", key);
    check_close(label, got + C, want + C, C, 2.0 * ADAMW_LR * step * 1.01, 0);
    snprintf(label, sizeof label, "vit.%s[v]", key);
    check_close(label, got + 2 * C, want + 2 * C, C, t.atol, t.rtol);
}

/* ------------------------------------------------------------ the steps */

static void run_golden(const struct golden *g)
{
    char file[64];
    snprintf(file, sizeof file, "model_%s.ctfx", g->model);
    struct fx_file f;
    if (fx_open(&f, file))
        return;
    struct ct_model m;
    struct opt o;
    int have_model = 0, have_opt = 0;
    const float *x = fx_get(&f, "x", (size_t)BATCH * IN_C * IN_HW * IN_HW),
                *labels = fx_get(&f, "labels", BATCH);
    if (!x || !labels)
        goto done;
    struct ct_model_spec spec = golden_spec(g->model);
    spec.fused = !g->unfused;
    /* max_batch > B: the model must handle a short batch. */
    int rc = ct_model_build(&m, &spec, BATCH + 3);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0)
        goto done;
    have_model = 1;
    if (strcmp(g->model, "cnn") == 0) /* two stages: 2 blocks or 8 modules, then 5 */
        CU_ASSERT_EQUAL(m.n, g->unfused ? 13 : 7);
    /* Fill everything first, so a view the fixture lacks is still defined. */
    ct_model_init_params(&m, 1);
    check_state_dict_order(&f, &m);
    if (load_views(&f, &m.params) || load_views(&f, &m.buffers))
        goto done;
    rc = opt_init(&o, g->adamw, &f, &m.layout);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc != 0)
        goto done;
    have_opt = 1;

    int32_t y[BATCH];
    for (int b = 0; b < BATCH; b++)
        y[b] = (int32_t)labels[b];
    /* Dropout has p = 0 (the identity); the forward context is set as the
     * trainer would set it all the same. */
    static const uint32_t sample_index[BATCH] = {3, 0, 2, 1};
    m.fwd.sample_index = sample_index;
    m.fwd.epoch = 0;
    m.fwd.seed = 1;
    ct_model_set_training(&m, 1);

    for (int step = 1; step <= 2; step++) {
        char key[32], prefix[96];
        memcpy(ct_model_input(&m), x, (size_t)BATCH * m.in_numel * sizeof(float));
        const float *logits = ct_model_forward(&m, BATCH);
        CU_ASSERT_EQUAL(m.fwd.status, 0);
        if (ct_model_out_numel(&m) != NCLS) {
            CU_FAIL("the model does not output one logit per class");
            goto done;
        }
        snprintf(key, sizeof key, "step%d.logits", step);
        const float *want = fx_get(&f, key, BATCH * NCLS);
        if (want) {
            snprintf(prefix, sizeof prefix, "%s.%s", g->model, key);
            check_close(prefix, logits, want, BATCH * NCLS, g->logits.atol, g->logits.rtol);
        }
        snprintf(prefix, sizeof prefix, "step%d.buffer", step);
        check_views(&f, g->model, &m.buffers, prefix, g->buffer, NULL);

        double loss = ct_xent_forward_backward(ct_model_output_grad(&m), logits, y, BATCH, NCLS,
                                               1.0f / BATCH, NULL) / BATCH;
        snprintf(key, sizeof key, "step%d.loss", step);
        want = fx_get(&f, key, 1);
        if (want) {
            snprintf(prefix, sizeof prefix, "%s.%s", g->model, key);
            check_scalar(prefix, loss, want[0], g->loss.atol, g->loss.rtol);
        }
        ct_model_zero_grad(&m);
        ct_model_backward(&m, BATCH, NULL, NULL);
        CU_ASSERT_EQUAL(m.fwd.status, 0);
        snprintf(prefix, sizeof prefix, "step%d.grad", step);
        check_views(&f, g->model, &m.grads, prefix, g->grad, NULL);
        if (g->adamw)
            check_k_bias_grad(&m, step);

        opt_step(&o, &m);
        snprintf(prefix, sizeof prefix, "step%d.param", step);
        if (g->adamw) {
            check_views(&f, g->model, &m.params, prefix, g->param, qkv_bias);
            check_qkv_bias(&f, &m, prefix, step, g->param);
        } else {
            check_views(&f, g->model, &m.params, prefix, g->param, NULL);
        }
    }
done:
    if (have_opt)
        opt_free(&o);
    if (have_model)
        ct_model_free(&m);
    fx_free(&f);
}

/* Losses are ours in double against torch's float32 at ~1: the logits'
 * error (~2e-7) moves them by about as much; atol 1e-6 is five times that.
 * Running statistics: a mean or variance of 64..256 values (~1e-7 error)
 * blended with momentum 0.1. Parameters after an SGD step move by lr = 0.05
 * times (gradient + weight decay), so their error is ~lr times the
 * gradient's (largest: 1.8e-7 for the resnet shortcut conv after step 2);
 * atol 1e-6 + rtol 1e-6 still sees the weight decay term (lr * 5e-4 * p)
 * of every parameter larger than ~0.05 and a 1% error in any update larger
 * than 1e-4. After an AdamW step each element moves by ~lr = 1e-3 whatever
 * its gradient, and the update's sensitivity to the gradient's relative
 * error (<= ~1e-4 here) is at most that error times lr: we measure 1.5e-8.
 * atol 5e-7 (no rtol, so that large parameters are held as tightly) is 30
 * times that and catches a missing or coupled weight decay (lr * 0.01 * p)
 * on every parameter larger than 0.05, and a wrong bias correction. */
static const struct golden cnn = {
    .model = "cnn",
    .logits = {1e-5, 1e-4},
    .loss = {1e-6, 1e-6},
    .grad = {1e-5, 1e-4},
    .param = {1e-6, 1e-6},
    .buffer = {1e-6, 1e-5},
};

/* The same steps with each Conv-BN-ReLU-MaxPool stage as four modules
 * (spec.fused = 0): both forms against the one fixture, same bounds. */
static const struct golden cnn_unfused = {
    .model = "cnn",
    .unfused = 1,
    .logits = {1e-5, 1e-4},
    .loss = {1e-6, 1e-6},
    .grad = {1e-5, 1e-4},
    .param = {1e-6, 1e-6},
    .buffer = {1e-6, 1e-5},
};

/* The resnet has the longest BatchNorm chain (five on the body path, each
 * backward dividing by a batch standard deviation); the same bounds hold
 * with the margins measured (see the top). */
static const struct golden resnet = {
    .model = "resnet",
    .logits = {1e-5, 1e-4},
    .loss = {1e-6, 1e-6},
    .grad = {1e-5, 1e-4},
    .param = {1e-6, 1e-6},
    .buffer = {1e-6, 1e-5},
};

static const struct golden vit = {
    .model = "vit",
    .adamw = 1,
    .logits = {1e-5, 1e-4},
    .loss = {1e-6, 1e-6},
    .grad = {1e-5, 1e-4},
    .param = {5e-7, 0},
    .buffer = {1e-6, 1e-5},
};

static void test_cnn_golden(void) { run_golden(&cnn); }
static void test_cnn_unfused_golden(void) { run_golden(&cnn_unfused); }
static void test_resnet_golden(void) { run_golden(&resnet); }
static void test_vit_golden(void) { run_golden(&vit); }
/* The convolutional models with each matrix product (core/gemm.h). */
CT_TEST_WITH_GEMM(test_cnn_golden, 0)
CT_TEST_WITH_GEMM(test_cnn_golden, 1)
CT_TEST_WITH_GEMM(test_cnn_unfused_golden, 0)
CT_TEST_WITH_GEMM(test_cnn_unfused_golden, 1)
CT_TEST_WITH_GEMM(test_resnet_golden, 0)
CT_TEST_WITH_GEMM(test_resnet_golden, 1)

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"cnn (fused blocks): two SGD steps against PyTorch, OpenBLAS", test_cnn_golden_gemm0},
        {"cnn (fused blocks): two SGD steps against PyTorch, our gemm", test_cnn_golden_gemm1},
        {"cnn (unfused modules): two SGD steps, OpenBLAS", test_cnn_unfused_golden_gemm0},
        {"cnn (unfused modules): two SGD steps, our gemm", test_cnn_unfused_golden_gemm1},
        {"resnet: two SGD steps against PyTorch, OpenBLAS", test_resnet_golden_gemm0},
        {"resnet: two SGD steps against PyTorch, our gemm", test_resnet_golden_gemm1},
        {"vit: two AdamW steps against PyTorch", test_vit_golden},
        {NULL, NULL},
    };
    return ct_test_run("model golden", cases);
}
