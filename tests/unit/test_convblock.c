/* Unit tests for the fused Conv2d-BatchNorm2d-ReLU-MaxPool2d block
 * (src/nn/convblock.c) against the four unfused modules it replaces.
 *
 * Dims legend: B = batch rows, C = input channels, H, W = input size,
 * OC = output channels, K = conv kernel size, OH, OW = conv output size,
 * PH, PW = pooled size (OH / 2, OW / 2).
 *
 * Each case builds two models with the same input: "fused" is Flatten then
 * the block, "unfused" is Flatten, Conv2d, BatchNorm2d, MaxPool2d(2, 2),
 * ReLU (the order src/models/cnn.c uses; the same function as ReLU then
 * pooling). The Flatten in front (a copy, the identity) puts the block at
 * layer 1, so the model asks it for its input gradient; the cnn test at the
 * end covers a block at layer 0. Evidence:
 *
 * - fused vs unfused, with each kernel set: same state_dict layout and
 *   initial values; in training mode the same outputs and running
 *   statistics bit for bit, and gradients equal up to rounding (see
 *   GRAD_REL); in eval mode the same outputs bit for bit; sync-mode
 *   BatchNorm through a fake two-rank allreduce; a NaN in the input; exact
 *   ties in the pooling windows (the first maximum gets the gradient);
 * - the AVX-512 kernels against the portable ones (ct_simd_set_portable,
 *   which switches every hand-written AVX-512 kernel, the conv's im2col and
 *   col2im included): bit for bit, forward and backward, NaN and ties
 *   included;
 * - central finite differences of the fused block's own backward, with a
 *   float64 reference of the block that also checks the forward and tells
 *   which perturbations move a max-pool choice or a ReLU across its kink;
 * - gradient accumulation, eval outputs independent of the rest of the
 *   batch, the failure of the sync callback reaching model.fwd.status;
 * - the cnn model with fused = 1 and 0: layouts, dropout ids, and a
 *   checkpoint-style copy of the state from one form into the other, after
 *   which eval and training (dropout included) outputs agree bit for bit.
 *
 * The model arenas are filled with NaN bytes after finalize, so a kernel that
 * reads scratch it has not written shows up as NaN in a comparison.
 *
 * Set CT_TEST_VERBOSE=1 to print the max difference of every comparison.
 */
#include "core/error.h"
#include "core/gemm.h"
#include "core/rng.h"
#include "core/simd.h"
#include "models/models.h"
#include "nn/activation.h"
#include "nn/conv2d.h"
#include "nn/convblock.h"
#include "nn/module.h"
#include "nn/norm.h"
#include "nn/pool.h"
#include "nn/shape.h"

#include "ct_test.h"

#include <stdint.h>

/* ------------------------------------------------------------ helpers */

enum { B = 5 };

static int verbose(void) { return getenv("CT_TEST_VERBOSE") != NULL; }

/* Deterministic U(-bound, bound) test data: one Philox stream per buffer. */
static void fill(float *p, size_t n, float bound, uint32_t stream)
{
    ct_init_uniform(p, n, bound, ct_rng_key(20240701, CT_RNG_INIT), stream);
}

static float *dup_floats(const float *src, size_t n)
{
    float *p = ct_test_floats(n);
    memcpy(p, src, n * sizeof(float));
    return p;
}

static double max_abs(const float *p, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs((double)p[i]));
    return m;
}

/* max |got - want|; a NaN on either side counts as infinite. */
static double max_diff(const float *got, const float *want, size_t n)
{
    double md = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = fabs((double)got[i] - (double)want[i]);
        md = isnan(d) ? INFINITY : fmax(md, d);
    }
    return md;
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Elements whose bits differ (any NaN matches any NaN; +0 and -0 differ).
 * Prints the first few. */
static size_t diff_bits(const char *label, const float *got, const float *want, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (bits(got[i]) == bits(want[i]) || (isnan(got[i]) && isnan(want[i])))
            continue;
        if (bad < 5)
            fprintf(stderr, "\n  %s[%zu]: got %.9g (0x%08x) want %.9g (0x%08x)", label, i,
                    (double)got[i], (unsigned)bits(got[i]), (double)want[i],
                    (unsigned)bits(want[i]));
        bad++;
    }
    if (bad)
        fprintf(stderr, "\n  %s: %zu of %zu differ in their bits\n", label, bad, n);
    else if (verbose())
        printf("\n    %-44s bit-identical (%zu values)", label, n);
    return bad;
}

#define CHECK_SAME(label, got, want, n) CU_ASSERT_EQUAL(diff_bits((label), (got), (want), (n)), 0)

/* Largest observed |got - want| / max|want| over the whole run, per kind of
 * comparison, for the summary that CT_TEST_VERBOSE prints. */
static double worst_grad_rel, worst_bias_rel, worst_fd_rel;

/* |got - want| <= rel * max|want| element-wise: a bound relative to the
 * tensor's scale, not to each element, since an element of a sum that
 * cancels carries the rounding error of its terms, not of itself. */
static void check_rel(const char *label, const float *got, const float *want, size_t n, double rel)
{
    const double scale = max_abs(want, n);
    const double md = max_diff(got, want, n);
    if (verbose())
        printf("\n    %-44s max diff %.3g (%.3g of max %.3g)", label, md, md / scale, scale);
    worst_grad_rel = fmax(worst_grad_rel, scale > 0 ? md / scale : md);
    CU_ASSERT(scale > 0); /* a gradient of zeros would make the check vacuous */
    CT_ASSERT_CLOSE(label, got, want, n, rel * scale, 0);
}

/* ------------------------------------------------------------ the two models */

struct cfg {
    const char *label;
    int C, H, W, OC, K, pad;
};

/* C = 2 and OC = 3 (B = 5): planes even and odd (pooling floors
 * the last row and column, which still receive BatchNorm's gradient), a
 * pooled width above the kernels' 16-window tile (18), a 17-window row (a
 * one-window tail tile) with an odd width, H != W, 1x1 and unpadded 3x3
 * convolutions, and a plane large enough that the block works in chunks of
 * 2 samples (96x96x3 floats: 256 KiB / 108 KiB), so B = 5 ends in a short
 * chunk. With C = 2 every conv has at most 18 terms: the block recomputes
 * its output (convblock.c, "Recomputed blocks"); the C = 4 sizes (36 terms)
 * keep it, in one chunk and in chunks of 4 samples (512 KiB / 108 KiB). */
static const struct cfg sizes[] = {
    {"8x8 K3 p1", 2, 8, 8, 3, 3, 1},
    {"7x7 K3 p1", 2, 7, 7, 3, 3, 1},
    {"36x36 K3 p1", 2, 36, 36, 3, 3, 1},
    {"6x35 K3 p1", 2, 6, 35, 3, 3, 1},
    {"9x9 K1 p0", 2, 9, 9, 3, 1, 0},
    {"10x9 K3 p0", 2, 10, 9, 3, 3, 0},
    {"96x96 K3 p1", 2, 96, 96, 3, 3, 1},
    {"9x8 C4 K3 p1 kept", 4, 9, 8, 3, 3, 1},
    {"96x96 C4 K3 p1 kept", 4, 96, 96, 3, 3, 1},
};
#define N_SIZES ((int)(sizeof sizes / sizeof *sizes))

/* View names with the block at layer 1. */
static const char conv_w[] = "layers.1.weight", conv_b[] = "layers.1.bias",
                  bn_w[] = "layers.2.weight", bn_b[] = "layers.2.bias",
                  bn_rm[] = "layers.2.running_mean", bn_rv[] = "layers.2.running_var";

struct pair {
    struct cfg c;
    int OH, OW, PH, PW;
    size_t in, out;        /* per sample */
    struct ct_model f, u;  /* fused, unfused */
    float *x, *R;          /* (B, in) input, (B, out) output gradient */
};

/* Fills the model's arena (activations, gradients, workspaces) with NaN
 * bytes: whatever is read before it is written becomes NaN. */
static void poison(struct ct_model *m) { memset(m->arena.base, 0xff, m->arena.size); }

static int build(struct ct_model *m, const struct pair *p, int fused, int sync)
{
    const struct cfg *c = &p->c;
    ct_model_init(m, p->in);
    int rc = ct_model_add(m, ct_flatten_new(p->in));
    if (fused) {
        if (rc == 0)
            rc = ct_model_add(
                m, ct_conv_bn_relu_pool_new(c->C, c->H, c->W, c->OC, c->K, c->pad, sync));
    } else {
        if (rc == 0)
            rc = ct_model_add(m, ct_conv2d_new(c->C, c->H, c->W, c->OC, c->K, 1, c->pad, 1));
        if (rc == 0)
            rc = ct_model_add(m, ct_batchnorm2d_new(c->OC, p->OH, p->OW, sync));
        if (rc == 0)
            rc = ct_model_add(m, ct_maxpool2d_new(c->OC, p->OH, p->OW, 2, 2));
        if (rc == 0)
            rc = ct_model_add(m, ct_relu_new(p->out));
    }
    if (rc == 0)
        rc = ct_model_finalize(m, B);
    if (rc < 0) {
        fprintf(stderr, "\n  %s: %s\n", c->label, ct_error_message());
        ct_model_free(m);
        return rc;
    }
    poison(m);
    return 0;
}

static void check_same_layout(const char *label, const struct ct_layout *a,
                              const struct ct_layout *b)
{
    CU_ASSERT_EQUAL(a->n, b->n);
    CU_ASSERT_EQUAL(a->numel, b->numel);
    for (int i = 0; i < a->n && i < b->n; i++) {
        const struct ct_view *va = &a->views[i], *vb = &b->views[i];
        int same = strcmp(va->name, vb->name) == 0 && va->ndim == vb->ndim &&
                   va->offset == vb->offset && va->numel == vb->numel;
        for (int d = 0; same && d < va->ndim; d++)
            same = va->shape[d] == vb->shape[d];
        if (!same)
            fprintf(stderr, "\n  %s: view %d is %s (%zu values at %zu) in one, %s (%zu at %zu) "
                            "in the other\n",
                    label, i, va->name, va->numel, va->offset, vb->name, vb->numel, vb->offset);
        CU_ASSERT(same);
    }
}

static float *view(const struct ct_model *m, const char *name, int buffer)
{
    const struct ct_layout *lay = buffer ? &m->buffer_layout : &m->layout;
    int v = ct_layout_find(lay, name);
    CU_ASSERT_FATAL(v >= 0);
    return ct_flat_view(buffer ? &m->buffers : &m->params, v);
}

static float *grad(const struct ct_model *m, const char *name)
{
    int v = ct_layout_find(&m->layout, name);
    CU_ASSERT_FATAL(v >= 0);
    return ct_flat_view(&m->grads, v);
}

/* BatchNorm's gamma in [0.5, 1.5] but negative on channel 1 (there the
 * window's maximum after BatchNorm is its minimum before), beta in
 * [-0.5, 0.5], and running statistics near those of the conv outputs
 * (mean ~0, std ~0.3), so that eval outputs are O(1). */
static void randomise_bn(struct ct_model *m, int OC)
{
    float *g = view(m, bn_w, 0), *b = view(m, bn_b, 0), *rm = view(m, bn_rm, 1),
          *rv = view(m, bn_rv, 1);
    fill(g, (size_t)OC, 0.5f, 101);
    fill(b, (size_t)OC, 0.5f, 102);
    fill(rm, (size_t)OC, 0.1f, 103);
    fill(rv, (size_t)OC, 0.03f, 104);
    for (int o = 0; o < OC; o++) {
        g[o] += 1.0f;
        rv[o] += 0.1f;
    }
    g[1] = -g[1];
}

/* Builds both models, checks that they have one layout and one
 * initialisation, randomises BatchNorm identically in both. */
static void pair_init(struct pair *p, const struct cfg *c, int sync)
{
    memset(p, 0, sizeof *p);
    p->c = *c;
    ct_conv2d_out_size(c->H, c->W, c->K, c->K, 1, c->pad, &p->OH, &p->OW);
    p->PH = p->OH / 2, p->PW = p->OW / 2;
    p->in = (size_t)c->C * c->H * c->W;
    p->out = (size_t)c->OC * p->PH * p->PW;
    CU_ASSERT_EQUAL_FATAL(build(&p->f, p, 1, sync), 0);
    if (build(&p->u, p, 0, sync) != 0) {
        ct_model_free(&p->f);
        CU_FAIL_FATAL("cannot build the unfused model");
    }
    CU_ASSERT_EQUAL(p->f.n_layers, p->u.n_layers);
    CU_ASSERT_EQUAL(ct_model_out_numel(&p->f), p->out);
    check_same_layout(c->label, &p->f.layout, &p->u.layout);
    check_same_layout(c->label, &p->f.buffer_layout, &p->u.buffer_layout);
    CU_ASSERT_FATAL(p->f.params.numel == p->u.params.numel &&
                    p->f.buffers.numel == p->u.buffers.numel);
    ct_model_init_params(&p->f, 11);
    ct_model_init_params(&p->u, 11);
    char l[256];
    snprintf(l, sizeof l, "%s initial params", c->label);
    CHECK_SAME(l, p->f.params.data, p->u.params.data, p->f.params.numel);
    snprintf(l, sizeof l, "%s initial buffers", c->label);
    CHECK_SAME(l, p->f.buffers.data, p->u.buffers.data, p->f.buffers.numel);
    randomise_bn(&p->f, c->OC);
    randomise_bn(&p->u, c->OC);
    p->x = ct_test_floats(B * p->in);
    p->R = ct_test_floats(B * p->out);
    fill(p->x, B * p->in, 1.0f, 1);
    fill(p->R, B * p->out, 1.0f, 2);
}

static void pair_free(struct pair *p)
{
    ct_model_free(&p->f);
    ct_model_free(&p->u);
    free(p->x);
    free(p->R);
}

static const float *forward(struct ct_model *m, const float *x, int nb)
{
    memcpy(ct_model_input(m), x, (size_t)nb * m->in_numel * sizeof(float));
    return ct_model_forward(m, nb);
}

static void backward(struct ct_model *m, const float *R, int nb, int zero)
{
    memcpy(ct_model_output_grad(m), R, (size_t)nb * ct_model_out_numel(m) * sizeof(float));
    if (zero)
        ct_model_zero_grad(m);
    ct_model_backward(m, nb, NULL, NULL);
}

/* ------------------------------------------------------------ fused vs unfused */

/* Gradient tolerances, fused against unfused. Both forms compute BatchNorm's
 * two gradient sums per channel in double (only in another order: the
 * block sums over the pooled maxima, the unfused kernel over the whole
 * routed plane, zeros included), and round them to float once, so dgamma,
 * dbeta and the coefficients k1, k2 of the conv output gradient agree to
 * within an ulp; the conv output gradients then agree to a few ulp of their
 * terms, and the conv backward (the same sgemm calls on both sides, but for
 * chunking) turns that into a few ulp of the sums' scale, ~1e-7 of max|g|.
 * Measured: no difference at all in any case here (the double sums round
 * to the same floats). GRAD_REL = 1e-5 leaves room for a differently
 * rounded k1 or k2 on other data and is still 1e3 times below what any
 * wrong term gives (a gradient missing the floored row or column, a lost k1
 * or k2, a misrouted window changes values by 1e-2 to 1 of the scale).
 *
 * The conv bias gradient is 0 in exact arithmetic (BatchNorm removes any
 * shift of a channel), so both forms produce a sum of B*OH*OW terms that
 * cancel: it carries the rounding of those terms, and comparing it relative
 * to its own size would compare noise. It is held, per channel, to
 * BIAS_REL * S, S = sum of |terms| (the unfused model's conv output
 * gradient for that channel), on both sides and against each other. Float
 * summation of n terms errs by at most ~n eps S in the worst case, ~sqrt(n)
 * eps S typically; the sums here are blocked (16 lanes per plane, planes
 * in double), so a few eps S is expected (measured: the bias gradients
 * themselves are <= 5e-8 S, the two forms' identical): BIAS_REL = 1e-5 is
 * ~100 eps, and
 * a real bias gradient (a conv not followed by BatchNorm, or a BatchNorm
 * that does not subtract its mean) is a sizeable fraction of S. */
#define GRAD_REL 1e-5
#define BIAS_REL 1e-5

static void check_bias_grad(const char *label, const struct pair *p)
{
    const int OC = p->c.OC;
    const size_t P = (size_t)p->OH * p->OW;
    const float *gf = grad(&p->f, conv_b), *gu = grad(&p->u, conv_b);
    const float *dy = p->u.dact[2]; /* unfused: the gradient w.r.t. the conv output */
    for (int o = 0; o < OC; o++) {
        double S = 0;
        for (int b = 0; b < B; b++)
            for (size_t i = 0; i < P; i++)
                S += fabs((double)dy[((size_t)b * OC + o) * P + i]);
        const double d = max_diff(gf + o, gu + o, 1);
        const double worst = isnan((double)gf[o] + gu[o])
                                 ? INFINITY
                                 : fmax(d, fmax(fabs((double)gf[o]), fabs((double)gu[o])));
        worst_bias_rel = fmax(worst_bias_rel, worst / S);
        if (verbose())
            printf("\n    %s conv bias[%d]: fused %.3g unfused %.3g diff %.3g (S %.3g)", label, o,
                   (double)gf[o], (double)gu[o], d, S);
        CU_ASSERT(S > 0);
        if (!(worst <= BIAS_REL * S))
            fprintf(stderr, "\n  %s conv bias[%d]: fused %.9g unfused %.9g, bound %.3g\n", label,
                    o, (double)gf[o], (double)gu[o], BIAS_REL * S);
        CU_ASSERT(worst <= BIAS_REL * S);
    }
}

static void check_grads(const char *label, const struct pair *p)
{
    char l[256];
    static const char *const rel_views[] = {conv_w, bn_w, bn_b};
    for (int i = 0; i < 3; i++) {
        int v = ct_layout_find(&p->f.layout, rel_views[i]);
        CU_ASSERT_FATAL(v >= 0);
        snprintf(l, sizeof l, "%s grad %s", label, rel_views[i]);
        check_rel(l, ct_flat_view(&p->f.grads, v), ct_flat_view(&p->u.grads, v),
                  p->f.layout.views[v].numel, GRAD_REL);
    }
    check_bias_grad(label, p);
    snprintf(l, sizeof l, "%s grad input", label);
    check_rel(l, p->f.dact[1], p->u.dact[1], B * p->in, GRAD_REL);
}

/* One training step of both forms: outputs and running statistics bit for
 * bit, gradients close. */
static void compare_train(const char *label, struct pair *p)
{
    char l[256];
    const float *of = forward(&p->f, p->x, B), *ou = forward(&p->u, p->x, B);
    CU_ASSERT_EQUAL(p->f.fwd.status, 0);
    CU_ASSERT_EQUAL(p->u.fwd.status, 0);
    snprintf(l, sizeof l, "%s train out", label);
    CHECK_SAME(l, of, ou, B * p->out);
    snprintf(l, sizeof l, "%s running stats", label);
    CHECK_SAME(l, p->f.buffers.data, p->u.buffers.data, p->f.buffers.numel);
    /* Not vacuous: ReLU passes some values and zeroes others. */
    size_t pos = 0;
    for (size_t i = 0; i < B * p->out; i++)
        pos += of[i] > 0;
    CU_ASSERT(pos > 0 && pos < B * p->out);
    backward(&p->f, p->R, B, 1);
    backward(&p->u, p->R, B, 1);
    CU_ASSERT_EQUAL(p->f.fwd.status, 0);
    CU_ASSERT_EQUAL(p->u.fwd.status, 0);
    check_grads(label, p);
}

/* With either kernel set (the AVX-512 one where the CPU has it, and the
 * portable one), so that each is checked against the unfused modules on
 * its own, not only against the other. */
static void test_fused_vs_unfused_train(void)
{
    for (int portable = 0; portable < 2; portable++) {
        ct_simd_set_portable(portable);
        for (int s = 0; s < N_SIZES; s++) {
            char label[96];
            snprintf(label, sizeof label, "%s%s", sizes[s].label, portable ? " portable" : "");
            struct pair p;
            pair_init(&p, &sizes[s], 0);
            compare_train(label, &p);
            /* A second step from the updated running statistics (training
             * outputs ignore them; the blend must still match). */
            compare_train(label, &p);
            pair_free(&p);
        }
    }
    ct_simd_set_portable(0);
}

/* ------------------------------------------------------------ eval mode */

static void test_eval(void)
{
    char l[256];
    for (int s = 0; s < N_SIZES; s++) {
        struct pair p;
        pair_init(&p, &sizes[s], 0);
        ct_model_set_training(&p.f, 0);
        ct_model_set_training(&p.u, 0);
        float *buf0 = dup_floats(p.f.buffers.data, p.f.buffers.numel);
        float *batch = dup_floats(forward(&p.f, p.x, B), B * p.out);
        snprintf(l, sizeof l, "%s eval out", sizes[s].label);
        CHECK_SAME(l, batch, forward(&p.u, p.x, B), B * p.out);
        /* Eval mode changes no state. */
        snprintf(l, sizeof l, "%s eval running stats unchanged", sizes[s].label);
        CHECK_SAME(l, p.f.buffers.data, buf0, p.f.buffers.numel);
        free(buf0);
        /* Each sample alone gives what it gave in the batch. The conv may
         * group samples differently for another batch size (sgemm over
         * more columns), so allow for rounding: a few ulp of outputs <= ~5
         * (observed: identical); a dependence on the batch (statistics of
         * the batch instead of the running ones) changes outputs by O(0.1). */
        for (int b = 0; b < B; b++) {
            const float *one = forward(&p.f, p.x + b * p.in, 1);
            snprintf(l, sizeof l, "%s eval sample %d alone", sizes[s].label, b);
            CT_ASSERT_CLOSE(l, one, batch + b * p.out, p.out, 1e-6, 1e-6);
            if (verbose() && b == 0)
                diff_bits(l, one, batch + b * p.out, p.out);
        }
        /* Eval really uses the running statistics: training mode differs. */
        ct_model_set_training(&p.f, 1);
        const float *tr = forward(&p.f, p.x, B);
        size_t same = 0;
        for (size_t i = 0; i < B * p.out; i++)
            same += tr[i] == batch[i];
        CU_ASSERT(same < B * p.out);
        free(batch);
        pair_free(&p);
    }
}

/* ------------------------------------------------------------ portable vs AVX-512 */

struct snapshot {
    float *out, *grads, *dinp, *buffers;
};

static void snap(struct snapshot *s, const struct ct_model *m, size_t in, size_t out)
{
    s->out = dup_floats(m->act[m->n], B * out);
    s->grads = dup_floats(m->grads.data, m->grads.numel);
    s->dinp = dup_floats(m->dact[1], B * in);
    s->buffers = dup_floats(m->buffers.data, m->buffers.numel);
}

static void snap_free(struct snapshot *s)
{
    free(s->out);
    free(s->grads);
    free(s->dinp);
    free(s->buffers);
}

static int have_avx512(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    return __builtin_cpu_supports("avx512f");
#else
    return 0;
#endif
}

/* One training step and one eval forward of the fused model with either
 * kernel set, from the same state. */
static void kernels_run(struct pair *p, int portable, const float *buf0, struct snapshot *s,
                        float **eval_out)
{
    ct_simd_set_portable(portable);
    memcpy(p->f.buffers.data, buf0, p->f.buffers.numel * sizeof(float));
    poison(&p->f);
    ct_model_set_training(&p->f, 1);
    forward(&p->f, p->x, B);
    backward(&p->f, p->R, B, 1);
    CU_ASSERT_EQUAL(p->f.fwd.status, 0);
    snap(s, &p->f, p->in, p->out);
    ct_model_set_training(&p->f, 0);
    *eval_out = dup_floats(forward(&p->f, p->x, B), B * p->out);
}

static void compare_kernels(const char *label, struct pair *p)
{
    char l[256];
    struct snapshot a, q;
    float *ea, *eq;
    float *buf0 = dup_floats(p->f.buffers.data, p->f.buffers.numel);
    kernels_run(p, 0, buf0, &a, &ea);
    kernels_run(p, 1, buf0, &q, &eq);
    ct_simd_set_portable(0);
    snprintf(l, sizeof l, "%s avx512/portable train out", label);
    CHECK_SAME(l, a.out, q.out, B * p->out);
    snprintf(l, sizeof l, "%s avx512/portable running stats", label);
    CHECK_SAME(l, a.buffers, q.buffers, p->f.buffers.numel);
    snprintf(l, sizeof l, "%s avx512/portable grads", label);
    CHECK_SAME(l, a.grads, q.grads, p->f.grads.numel);
    snprintf(l, sizeof l, "%s avx512/portable grad input", label);
    CHECK_SAME(l, a.dinp, q.dinp, B * p->in);
    snprintf(l, sizeof l, "%s avx512/portable eval out", label);
    CHECK_SAME(l, ea, eq, B * p->out);
    snap_free(&a);
    snap_free(&q);
    free(ea);
    free(eq);
    free(buf0);
}

static void test_portable_vs_avx512(void)
{
    if (!have_avx512())
        printf("\n    (no AVX-512 on this CPU: both runs use the portable kernels)");
    for (int s = 0; s < N_SIZES; s++) {
        struct pair p;
        pair_init(&p, &sizes[s], 0);
        compare_kernels(sizes[s].label, &p);
        pair_free(&p);
    }
    ct_simd_set_portable(0);
}

/* Exact ties: sample 2 is 0 in its first rows, so the conv outputs there
 * (rows whose receptive field holds only zeros and padding) all equal the
 * channel's bias, and every 2x2 window of them is a four-way tie. Max
 * pooling takes the first maximum (PyTorch's rule, ct_maxpool2d_forward's),
 * so the window's top-left value receives the gradient; another choice
 * gives the same outputs but routes the gradient elsewhere, which the input
 * and weight gradients show. beta = 1 on channel 0 keeps ReLU open on ties. */
static void test_ties(void)
{
    static const int which[] = {0, 3};
    for (int k = 0; k < 2; k++) {
        const struct cfg *c = &sizes[which[k]];
        struct pair p;
        pair_init(&p, c, 0);
        const int zero_rows = 5; /* conv rows 0..3 (K = 3, pad 1) see only zeros */
        memset(p.x + 2 * p.in, 0, (size_t)c->C * c->H * c->W * sizeof(float));
        for (int ci = 0; ci < c->C; ci++)
            for (int h = zero_rows; h < c->H; h++)
                fill(p.x + 2 * p.in + ((size_t)ci * c->H + h) * c->W, (size_t)c->W, 1.0f,
                     (uint32_t)(200 + ci * c->H + h));
        view(&p.f, bn_b, 0)[0] = view(&p.u, bn_b, 0)[0] = 1.0f;
        for (int portable = 0; portable < 2; portable++) {
            char label[96];
            snprintf(label, sizeof label, "%s ties%s", c->label, portable ? " portable" : "");
            ct_simd_set_portable(portable);
            compare_train(label, &p);
        }
        ct_simd_set_portable(0);
        /* Not vacuous: the tied windows passed ReLU. */
        const float *o = p.f.act[p.f.n] + 2 * p.out;
        size_t open = 0;
        for (int ch = 0; ch < c->OC; ch++)
            for (int pw = 0; pw < p.PW; pw++)
                open += o[(size_t)ch * p.PH * p.PW + pw] > 0; /* pooled row 0: conv rows 0, 1 */
        CU_ASSERT(open > 0);
        compare_kernels(c->label, &p);
        pair_free(&p);
    }
}

/* ------------------------------------------------------------ sync BatchNorm */

/* An allreduce as two ranks holding the same batch would see it: every sum
 * doubles. The global statistics are then this batch's, so sync mode must
 * give what local mode gives, up to the rounding of its other variance
 * formula. fail: return this code instead. */
struct fake_comm {
    int calls;
    int fail;
};

static int fake_allreduce(void *ctx, double *buf, size_t n)
{
    struct fake_comm *fc = ctx;
    fc->calls++;
    if (fc->fail)
        return fc->fail;
    for (size_t i = 0; i < n; i++)
        buf[i] *= 2.0;
    return 0;
}

static void test_sync(void)
{
    static const int which[] = {0, 1, 3};
    for (int k = 0; k < 3; k++) {
        const struct cfg *c = &sizes[which[k]];
        char label[96];
        snprintf(label, sizeof label, "%s sync", c->label);
        struct pair p, loc;
        pair_init(&p, c, 1);
        struct fake_comm cf = {0, 0}, cu = {0, 0};
        p.f.fwd.allreduce_sum = fake_allreduce;
        p.f.fwd.allreduce_ctx = &cf;
        p.u.fwd.allreduce_sum = fake_allreduce;
        p.u.fwd.allreduce_ctx = &cu;
        compare_train(label, &p);
        /* One call in forward, one in backward, on both forms. */
        CU_ASSERT_EQUAL(cf.calls, 2);
        CU_ASSERT_EQUAL(cu.calls, 2);

        /* The same as local statistics: outputs ~1 within a few ulp
         * (the sync variance is E[x^2] - mean^2 in double: ~1e-15 off). */
        pair_init(&loc, c, 0);
        const float *ol = forward(&loc.f, loc.x, B);
        CT_ASSERT_CLOSE("sync vs local out", p.f.act[p.f.n], ol, B * p.out, 1e-6, 1e-6);
        pair_free(&loc);

        /* A failing collective is reported, in forward and in backward. */
        cf.fail = CT_EMPI;
        forward(&p.f, p.x, B);
        CU_ASSERT_EQUAL(p.f.fwd.status, CT_EMPI);
        cf.fail = 0;
        p.f.fwd.status = 0;
        forward(&p.f, p.x, B);
        CU_ASSERT_EQUAL(p.f.fwd.status, 0);
        cf.fail = CT_EIO;
        backward(&p.f, p.R, B, 1);
        CU_ASSERT_EQUAL(p.f.fwd.status, CT_EIO);
        /* The unfused modules report it alike. */
        cu.fail = CT_EIO;
        forward(&p.u, p.x, B);
        CU_ASSERT_EQUAL(p.u.fwd.status, CT_EIO);
        pair_free(&p);
    }
}

/* ------------------------------------------------------------ accumulation */

static void test_accumulate(void)
{
    static const int which[] = {0, 1, 2, 6};
    for (int k = 0; k < 4; k++) {
        const struct cfg *c = &sizes[which[k]];
        char l[256];
        struct pair p;
        pair_init(&p, c, 0);
        forward(&p.f, p.x, B);
        backward(&p.f, p.R, B, 1);
        float *g1 = dup_floats(p.f.grads.data, p.f.grads.numel);
        float *d1 = dup_floats(p.f.dact[1], B * p.in);
        backward(&p.f, p.R, B, 0);
        for (size_t i = 0; i < p.f.grads.numel; i++)
            g1[i] *= 2.0f;
        /* 2g is exact in float; the second backward repeats the first's
         * arithmetic and adds, so the sum rounds at most once more (the
         * sgemm's accumulation into dweight may add in another order):
         * 1e-6 of the scale. The input gradient is overwritten, not
         * accumulated: the same bits. */
        snprintf(l, sizeof l, "%s accumulated grads", c->label);
        check_rel(l, p.f.grads.data, g1, p.f.grads.numel, 1e-6);
        snprintf(l, sizeof l, "%s grad input after 2 backwards", c->label);
        CHECK_SAME(l, p.f.dact[1], d1, B * p.in);
        free(g1);
        free(d1);
        pair_free(&p);
    }
}

/* ------------------------------------------------------------ NaN */

static void test_nan(void)
{
    char l[256];
    static const int which[] = {0, 3};
    for (int k = 0; k < 2; k++) {
        const struct cfg *c = &sizes[which[k]];
        struct pair p;
        pair_init(&p, c, 0);
        /* One NaN in sample 1, channel 0, row 3, column 4: a 3x3 patch of
         * NaN conv outputs in every channel. */
        p.x[1 * p.in + 3 * (size_t)c->W + 4] = NAN;
        /* Training: the NaN reaches every channel's batch statistics, so
         * every value is NaN after BatchNorm and ReLU makes it 0; the
         * running statistics become NaN. Both forms alike. */
        snprintf(l, sizeof l, "%s NaN train out", c->label);
        CHECK_SAME(l, forward(&p.f, p.x, B), forward(&p.u, p.x, B), B * p.out);
        snprintf(l, sizeof l, "%s NaN running stats", c->label);
        CHECK_SAME(l, p.f.buffers.data, p.u.buffers.data, p.f.buffers.numel);
        randomise_bn(&p.f, c->OC); /* finite running statistics again */
        randomise_bn(&p.u, c->OC);
        /* Eval: only the windows that hold a NaN conv output; there the NaN
         * wins the max and ReLU maps it to 0. */
        ct_model_set_training(&p.f, 0);
        ct_model_set_training(&p.u, 0);
        const float *of = forward(&p.f, p.x, B), *ou = forward(&p.u, p.x, B);
        snprintf(l, sizeof l, "%s NaN eval out", c->label);
        CHECK_SAME(l, of, ou, B * p.out);
        /* Not vacuous: some window held a NaN and a positive value (ReLU
         * before the max would give that value), and its output is 0. */
        const float *z = p.u.act[3]; /* BatchNorm's output (B, OC, OH, OW) */
        size_t nan_beats_positive = 0, nans = 0;
        for (size_t pl = 0; pl < (size_t)B * c->OC; pl++)
            for (int ph = 0; ph < p.PH; ph++)
                for (int pw = 0; pw < p.PW; pw++) {
                    int has_nan = 0, has_pos = 0;
                    for (int d = 0; d < 4; d++) {
                        float v = z[(pl * p.OH + 2 * ph + d / 2) * p.OW + 2 * pw + d % 2];
                        has_nan |= isnan(v);
                        has_pos |= v > 0;
                    }
                    const float o = of[(pl * p.PH + ph) * p.PW + pw];
                    CU_ASSERT(!isnan(o));
                    nans += has_nan;
                    if (has_nan) {
                        CU_ASSERT(o == 0.0f);
                        nan_beats_positive += has_pos;
                    }
                }
        CU_ASSERT(nans > 0);
        CU_ASSERT(nan_beats_positive > 0);
        /* And the AVX-512 kernels handle it as the portable ones. */
        float *keep = dup_floats(of, B * p.out);
        ct_simd_set_portable(1);
        snprintf(l, sizeof l, "%s NaN eval out portable", c->label);
        CHECK_SAME(l, forward(&p.f, p.x, B), keep, B * p.out);
        ct_model_set_training(&p.f, 1);
        float *tp = dup_floats(forward(&p.f, p.x, B), B * p.out);
        ct_simd_set_portable(0);
        snprintf(l, sizeof l, "%s NaN train out portable", c->label);
        CHECK_SAME(l, forward(&p.f, p.x, B), tp, B * p.out);
        ct_simd_set_portable(0);
        free(tp);
        free(keep);
        pair_free(&p);
    }
}

/* ------------------------------------------------------------ finite differences */

/* The block in float64: conv (stride 1), BatchNorm with the batch's
 * statistics (biased variance, eps), the first maximum of each 2x2 window
 * of the normalised values, ReLU. Returns the loss sum(out .* R); state
 * gets one byte per window, its maximum's place (0..3) plus 4 if ReLU
 * passes it, so that a perturbation that changes any state can be told
 * from one that does not; out (B, OC, PH, PW) may be NULL. */
struct ref {
    const struct pair *p;
    double *y; /* (B, OC, OH, OW) */
};

static double block_ref(struct ref *r, const float *x, const float *w, const float *bias,
                        const float *gamma, const float *beta, const float *R,
                        unsigned char *state, double *out)
{
    const struct pair *p = r->p;
    const int C = p->c.C, H = p->c.H, W = p->c.W, OC = p->c.OC, K = p->c.K, pad = p->c.pad;
    const int OH = p->OH, OW = p->OW;
    const size_t P = (size_t)OH * OW;
    for (int b = 0; b < B; b++)
        for (int o = 0; o < OC; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double s = bias[o];
                    for (int ci = 0; ci < C; ci++)
                        for (int kh = 0; kh < K; kh++)
                            for (int kw = 0; kw < K; kw++) {
                                int ih = oh + kh - pad, iw = ow + kw - pad;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                    continue;
                                s += (double)w[((o * C + ci) * K + kh) * K + kw] *
                                     x[(((size_t)b * C + ci) * H + ih) * W + iw];
                            }
                    r->y[((size_t)b * OC + o) * P + (size_t)oh * OW + ow] = s;
                }
    double L = 0;
    for (int o = 0; o < OC; o++) {
        double mean = 0, var = 0;
        for (int b = 0; b < B; b++)
            for (size_t i = 0; i < P; i++)
                mean += r->y[((size_t)b * OC + o) * P + i];
        mean /= (double)B * P;
        for (int b = 0; b < B; b++)
            for (size_t i = 0; i < P; i++) {
                double d = r->y[((size_t)b * OC + o) * P + i] - mean;
                var += d * d;
            }
        var /= (double)B * P;
        const double sc = gamma[o] / sqrt(var + (double)CT_BATCHNORM_EPS);
        for (int b = 0; b < B; b++) {
            const double *y = r->y + ((size_t)b * OC + o) * P;
            for (int ph = 0; ph < p->PH; ph++)
                for (int pw = 0; pw < p->PW; pw++) {
                    double m = 0;
                    int best = 0;
                    for (int d = 0; d < 4; d++) {
                        double z = (y[(size_t)(2 * ph + d / 2) * OW + 2 * pw + d % 2] - mean) *
                                       sc + beta[o];
                        if (d == 0 || z > m)
                            m = z, best = d;
                    }
                    const size_t k = (((size_t)b * OC + o) * p->PH + ph) * p->PW + pw;
                    const double v = m > 0 ? m : 0;
                    state[k] = (unsigned char)(best + (m > 0 ? 4 : 0));
                    if (out)
                        out[k] = v;
                    L += v * R[k];
                }
        }
    }
    return L;
}

static double fused_loss(struct pair *p)
{
    const float *o = forward(&p->f, p->x, B);
    double L = 0;
    for (size_t i = 0; i < B * p->out; i++)
        L += (double)o[i] * p->R[i];
    return L;
}

/* Finite-difference steps and tolerance. The loss is evaluated by the
 * fused block in float (what is under test), so it carries the rounding of
 * its outputs: each of the B*OC*PH*PW <= 240 outputs (|out| <= ~4, ulp
 * <= 5e-7) is off by a few ulp, and a perturbation reshuffles those errors.
 * Measured: the difference quotient's error times 2h is ~2e-6 and stays so
 * for h from 2.5e-4 to 1e-2 (noise, not truncation: BatchNorm's higher
 * derivatives do not show at these steps). So the bound is FD_NOISE / (2h)
 * with FD_NOISE = 2e-5, ten times the noise measured, plus FD_RTOL = 1e-3 of
 * the gradient for the truncation term h^2/6 |L'''|. The steps trade that
 * noise against kinks: a conv weight moves a whole channel (every window's
 * choice and every ReLU of it), so it gets the smallest step (5e-4: error
 * bound 2e-2 against gradients of 10..20, 1e-3 of them); BatchNorm's
 * parameters 2e-3; an input value moves only the K x K patch it feeds, so
 * 5e-3. Perturbations are measured as float(p+h) - float(p-h) in double,
 * so rounding p +- h costs nothing. A wrong gradient (a term missing, the
 * floored row or column left out of BatchNorm's backward, a misrouted
 * window, gamma's sign ignored) is off by 1e-2..1 of the gradients' scale.
 * The conv bias gradient is exactly 0 (BatchNorm removes a shift): the
 * difference quotient and the backward must both be within the bound of 0. */
#define FD_H_W 5e-4f
#define FD_H_BN 2e-3f
#define FD_H_X 5e-3f
#define FD_NOISE 2e-5
#define FD_RTOL 1e-3

struct fd_target {
    const char *name;
    float *p;       /* the float values perturbed */
    const float *g; /* the backward's gradient */
    size_t n;
    float h;        /* the step */
};

static void check_fd(struct pair *p)
{
    const struct cfg *c = &p->c;
    struct ref r = {p, malloc((size_t)B * c->OC * p->OH * p->OW * sizeof(double))};
    CU_ASSERT_PTR_NOT_NULL_FATAL(r.y);
    const size_t nw = B * p->out;
    unsigned char *base = malloc(nw), *st = malloc(nw);
    double *ref_out = malloc(nw * sizeof(double));
    CU_ASSERT_FATAL(base && st && ref_out);
    float *w = view(&p->f, conv_w, 0), *bias = view(&p->f, conv_b, 0),
          *gamma = view(&p->f, bn_w, 0), *beta = view(&p->f, bn_b, 0);

    /* The analytic gradients and the forward against the reference. */
    const float *o = forward(&p->f, p->x, B);
    block_ref(&r, p->x, w, bias, gamma, beta, p->R, base, ref_out);
    float *ref_f = ct_test_floats(nw);
    for (size_t i = 0; i < nw; i++)
        ref_f[i] = (float)ref_out[i];
    char l[256];
    /* Outputs ~1 after float conv (<= 18 terms) and BatchNorm: a few ulp
     * of 4 at most, ~5e-7 measured. */
    snprintf(l, sizeof l, "%s fused out vs float64", c->label);
    if (verbose())
        printf("\n    %-44s max diff %.3g (max |out| %.3g)", l, max_diff(o, ref_f, nw),
               max_abs(o, nw));
    CT_ASSERT_CLOSE(l, o, ref_f, nw, 5e-6, 5e-6);
    /* The negative gamma channel really chooses the conv output's minimum,
     * not its maximum, in some window (else the test would not tell). */
    size_t min_not_max = 0;
    for (int b = 0; b < B; b++)
        for (int ph = 0; ph < p->PH; ph++)
            for (int pw = 0; pw < p->PW; pw++) {
                const double *y = r.y + ((size_t)b * c->OC + 1) * p->OH * p->OW;
                int ymax = 0;
                for (int d = 1; d < 4; d++)
                    if (y[(size_t)(2 * ph + d / 2) * p->OW + 2 * pw + d % 2] >
                        y[(size_t)(2 * ph + ymax / 2) * p->OW + 2 * pw + ymax % 2])
                        ymax = d;
                min_not_max += (base[(((size_t)b * c->OC + 1) * p->PH + ph) * p->PW + pw] & 3) !=
                               ymax;
            }
    CU_ASSERT(min_not_max > 0);
    free(ref_f);

    backward(&p->f, p->R, B, 1);
    struct fd_target t[] = {
        {"conv weight", w, dup_floats(grad(&p->f, conv_w), (size_t)c->OC * c->C * c->K * c->K),
         (size_t)c->OC * c->C * c->K * c->K, FD_H_W},
        {"conv bias", bias, dup_floats(grad(&p->f, conv_b), (size_t)c->OC), (size_t)c->OC, FD_H_BN},
        {"bn weight", gamma, dup_floats(grad(&p->f, bn_w), (size_t)c->OC), (size_t)c->OC, FD_H_BN},
        {"bn bias", beta, dup_floats(grad(&p->f, bn_b), (size_t)c->OC), (size_t)c->OC, FD_H_BN},
        {"input", p->x, dup_floats(p->f.dact[1], B * p->in), B * p->in, FD_H_X},
    };
    size_t skipped = 0, total = 0;
    for (size_t k = 0; k < sizeof t / sizeof *t; k++) {
        float *fd = ct_test_floats(t[k].n), *an = ct_test_floats(t[k].n);
        size_t m = 0;
        for (size_t i = 0; i < t[k].n; i++) {
            const float keep = t[k].p[i], hi = keep + t[k].h, lo = keep - t[k].h;
            int moved = 0;
            t[k].p[i] = hi;
            const double Lp = fused_loss(p);
            block_ref(&r, p->x, w, bias, gamma, beta, p->R, st, NULL);
            moved |= memcmp(st, base, nw) != 0;
            t[k].p[i] = lo;
            const double Lm = fused_loss(p);
            block_ref(&r, p->x, w, bias, gamma, beta, p->R, st, NULL);
            moved |= memcmp(st, base, nw) != 0;
            t[k].p[i] = keep;
            total++;
            if (moved) { /* a window's choice or a ReLU crossed its kink */
                skipped++;
                continue;
            }
            fd[m] = (float)((Lp - Lm) / ((double)hi - (double)lo));
            an[m++] = t[k].g[i];
        }
        snprintf(l, sizeof l, "%s fd %s", c->label, t[k].name);
        const double atol = FD_NOISE / (2.0 * t[k].h), scale = max_abs(an, m);
        const double md = max_diff(an, fd, m);
        worst_fd_rel = fmax(worst_fd_rel, md / atol);
        if (verbose())
            printf("\n    %-44s max diff %.3g (%.2g of atol %.2g; max |g| %.3g; %zu of %zu "
                   "checked)",
                   l, md, md / atol, atol, scale, m, t[k].n);
        /* Most entries must be checked: a test that skips them tests little. */
        CU_ASSERT(m * 4 >= t[k].n * 3 || m + 1 >= t[k].n);
        CT_ASSERT_CLOSE(l, an, fd, m, atol, FD_RTOL);
        if (k == 1) { /* the conv bias: both ~0 on their own */
            static const float zeros[16];
            CU_ASSERT_FATAL(m <= 16);
            CT_ASSERT_CLOSE("fd conv bias is 0", fd, zeros, m, atol, 0);
            CT_ASSERT_CLOSE("grad conv bias is 0", an, zeros, m, atol, 0);
        } else {
            CU_ASSERT(scale > 10 * atol); /* else a zero gradient would pass */
        }
        free(fd);
        free(an);
        free((void *)t[k].g);
    }
    if (verbose())
        printf("\n    %s fd: %zu of %zu perturbations skipped (a max-pool or ReLU kink)",
               c->label, skipped, total);
    CU_ASSERT(skipped * 10 <= total);
    free(r.y);
    free(base);
    free(st);
    free(ref_out);
}

static void test_fd(void)
{
    static const int which[] = {0, 1, 4, 5};
    for (int k = 0; k < 4; k++) {
        struct pair p;
        pair_init(&p, &sizes[which[k]], 0);
        check_fd(&p);
        pair_free(&p);
    }
}

/* ------------------------------------------------------------ the cnn model */

enum { CNN_HW = 14, CNN_CLASSES = 3 };

static struct ct_model_spec cnn_spec(int fused)
{
    struct ct_model_spec s = ct_model_default_spec();
    s.name = "cnn";
    s.in_c = 2;
    s.in_h = s.in_w = CNN_HW; /* 14 -> 7 -> 3: the second stage floors */
    s.n_classes = CNN_CLASSES;
    s.channels[0] = 3, s.channels[1] = 4, s.n_channels = 2;
    s.hidden[0] = 6, s.n_hidden = 1;
    s.dropout = 0.25f;
    s.fused = fused;
    return s;
}

static const struct ct_module *find_kind(const struct ct_model *m, const char *kind)
{
    for (int i = 0; i < m->n; i++)
        if (strcmp(m->mods[i]->ops->kind, kind) == 0)
            return m->mods[i];
    return NULL;
}

/* Copies every tensor of `from` into the tensor of the same name in `to`,
 * as a checkpoint load would. */
static void copy_state(struct ct_model *to, const struct ct_model *from)
{
    for (int buffer = 0; buffer < 2; buffer++) {
        const struct ct_layout *lt = buffer ? &to->buffer_layout : &to->layout,
                               *lf = buffer ? &from->buffer_layout : &from->layout;
        const struct ct_flat *ft = buffer ? &to->buffers : &to->params,
                             *ff = buffer ? &from->buffers : &from->params;
        for (int i = 0; i < lt->n; i++) {
            int j = ct_layout_find(lf, lt->views[i].name);
            CU_ASSERT_FATAL(j >= 0 && lf->views[j].numel == lt->views[i].numel);
            memcpy(ct_flat_view(ft, i), ct_flat_view(ff, j), lt->views[i].numel * sizeof(float));
        }
    }
}

/* A training step with an SGD-like update, so that parameters and running
 * statistics move away from their initial values. */
static void cnn_step(struct ct_model *m, const float *x, const float *R)
{
    ct_model_set_training(m, 1);
    forward(m, x, B);
    backward(m, R, B, 1);
    CU_ASSERT_EQUAL(m->fwd.status, 0);
    for (size_t i = 0; i < m->params.numel; i++)
        m->params.data[i] -= 0.05f * m->grads.data[i];
}

static void test_cnn_model(void)
{
    static const uint32_t sample_index[B] = {9, 4, 0, 7, 2};
    struct ct_model f, u;
    struct ct_model_spec sf = cnn_spec(1), su = cnn_spec(0);
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&f, &sf, B), 0);
    if (ct_model_build(&u, &su, B) != 0) {
        ct_model_free(&f);
        CU_FAIL_FATAL("cannot build the unfused cnn");
    }
    poison(&f);
    poison(&u);
    CU_ASSERT_EQUAL(f.n_layers, u.n_layers);
    CU_ASSERT_EQUAL(f.n, u.n - 6); /* two blocks of 4 modules became 2 */
    check_same_layout("cnn params", &f.layout, &u.layout);
    check_same_layout("cnn buffers", &f.buffer_layout, &u.buffer_layout);
    const struct ct_module *df = find_kind(&f, "dropout"), *du = find_kind(&u, "dropout");
    CU_ASSERT_FATAL(df && du);
    CU_ASSERT_EQUAL(df->id, du->id);
    CU_ASSERT_STRING_EQUAL(df->name, du->name);
    /* Every top-level module after the blocks keeps its name and id. */
    for (int i = 1; i <= 5; i++) {
        CU_ASSERT_STRING_EQUAL(f.mods[f.n - i]->name, u.mods[u.n - i]->name);
        CU_ASSERT_EQUAL(f.mods[f.n - i]->id, u.mods[u.n - i]->id);
    }
    const size_t in = (size_t)2 * CNN_HW * CNN_HW;
    float *x = ct_test_floats(B * in), *R = ct_test_floats(B * CNN_CLASSES);
    fill(x, B * in, 1.0f, 31);
    fill(R, B * CNN_CLASSES, 1.0f, 32);
    ct_model_init_params(&f, 21);
    ct_model_init_params(&u, 22); /* different on purpose: the copy must fix it */
    f.fwd.sample_index = u.fwd.sample_index = sample_index;
    f.fwd.epoch = u.fwd.epoch = 2;

    for (int dir = 0; dir < 2; dir++) {
        struct ct_model *src = dir ? &u : &f, *dst = dir ? &f : &u;
        const char *what = dir ? "unfused -> fused" : "fused -> unfused";
        char l[256];
        cnn_step(src, x, R);
        copy_state(dst, src);
        dst->fwd.seed = src->fwd.seed;
        CHECK_SAME("cnn params after copy", f.params.data, u.params.data, f.params.numel);
        /* Eval: the same function of the same state. */
        ct_model_set_training(&f, 0);
        ct_model_set_training(&u, 0);
        float *of = dup_floats(forward(&f, x, B), B * CNN_CLASSES);
        snprintf(l, sizeof l, "cnn eval out (%s)", what);
        CHECK_SAME(l, of, forward(&u, x, B), B * CNN_CLASSES);
        free(of);
        /* Training with dropout: the same masks (the same ids), the same
         * outputs and running statistics, gradients equal to rounding. */
        ct_model_set_training(&f, 1);
        ct_model_set_training(&u, 1);
        of = dup_floats(forward(&f, x, B), B * CNN_CLASSES);
        snprintf(l, sizeof l, "cnn train out (%s)", what);
        CHECK_SAME(l, of, forward(&u, x, B), B * CNN_CLASSES);
        free(of);
        CHECK_SAME("cnn running stats", f.buffers.data, u.buffers.data, f.buffers.numel);
        backward(&f, R, B, 1);
        backward(&u, R, B, 1);
        for (int v = 0; v < f.layout.n; v++) {
            const char *name = f.layout.views[v].name;
            /* Conv biases before BatchNorm: a gradient of 0 up to the
             * rounding of a sum that cancels (see BIAS_REL), compared at
             * 1e-4 of the conv weight gradient's scale: far above that
             * noise, far below a real bias gradient. The rest relative
             * to their scale (GRAD_REL). */
            snprintf(l, sizeof l, "cnn %s grad %s", what, name);
            const float *gf = ct_flat_view(&f.grads, v), *gu = ct_flat_view(&u.grads, v);
            const size_t n = f.layout.views[v].numel;
            if (strcmp(name, "layers.0.bias") == 0 || strcmp(name, "layers.4.bias") == 0) {
                const double s =
                    max_abs(ct_flat_view(&u.grads, v - 1), f.layout.views[v - 1].numel);
                if (verbose())
                    printf("\n    %-44s max diff %.3g (weight scale %.3g)", l, max_diff(gf, gu, n),
                           s);
                CT_ASSERT_CLOSE(l, gf, gu, n, 1e-4 * s, 0);
                continue;
            }
            check_rel(l, gf, gu, n, GRAD_REL);
        }
    }
    free(x);
    free(R);
    ct_model_free(&f);
    ct_model_free(&u);
}

/* ------------------------------------------------------------ bad sizes */

static void test_bad_sizes(void)
{
    CU_ASSERT_PTR_NULL(ct_conv_bn_relu_pool_new(0, 8, 8, 3, 3, 1, 0));
    CU_ASSERT_PTR_NULL(ct_conv_bn_relu_pool_new(2, 8, 8, 0, 3, 1, 0));
    CU_ASSERT_PTR_NULL(ct_conv_bn_relu_pool_new(2, 2, 2, 3, 5, 1, 0)); /* kernel > padded input */
    CU_ASSERT_PTR_NULL(ct_conv_bn_relu_pool_new(2, 1, 8, 3, 1, 0, 0)); /* conv output 1 high */
    CU_ASSERT_PTR_NULL(ct_conv_bn_relu_pool_new(2, 8, 8, 3, 3, -1, 0));
    struct ct_module *m = ct_conv_bn_relu_pool_new(2, 2, 2, 3, 1, 0, 0); /* pooled 1x1 */
    CU_ASSERT_PTR_NOT_NULL(m);
    if (m) {
        CU_ASSERT_EQUAL(m->span, 4);
        CU_ASSERT_EQUAL(m->out_numel, 3);
    }
    ct_module_free(m);
}

static void test_summary(void)
{
    if (verbose())
        printf("\n    worst: grads %.3g of scale, conv bias %.3g of S, fd %.3g of atol",
               worst_grad_rel, worst_bias_rel, worst_fd_rel);
}

/* Fused against unfused, and the two SIMD forms, with each matrix product
 * (core/gemm.h): both forms must call it the same way. */
CT_TEST_WITH_GEMM(test_fused_vs_unfused_train, 0)
CT_TEST_WITH_GEMM(test_fused_vs_unfused_train, 1)
CT_TEST_WITH_GEMM(test_portable_vs_avx512, 0)
CT_TEST_WITH_GEMM(test_portable_vs_avx512, 1)
CT_TEST_WITH_GEMM(test_cnn_model, 0)
CT_TEST_WITH_GEMM(test_cnn_model, 1)

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"fused vs unfused, training (all sizes), OpenBLAS", test_fused_vs_unfused_train_gemm0},
        {"fused vs unfused, training (all sizes), our gemm", test_fused_vs_unfused_train_gemm1},
        {"fused vs unfused, eval; a sample alone", test_eval},
        {"AVX-512 vs portable kernels, OpenBLAS", test_portable_vs_avx512_gemm0},
        {"AVX-512 vs portable kernels, our gemm", test_portable_vs_avx512_gemm1},
        {"exact ties in the max-pool windows", test_ties},
        {"sync BatchNorm (fake two-rank allreduce), failures", test_sync},
        {"gradient accumulation", test_accumulate},
        {"NaN in the input", test_nan},
        {"finite differences of the fused block", test_fd},
        {"cnn model fused vs unfused, state copied across, OpenBLAS", test_cnn_model_gemm0},
        {"cnn model fused vs unfused, state copied across, our gemm", test_cnn_model_gemm1},
        {"bad sizes", test_bad_sizes},
        {"summary", test_summary},
        {NULL, NULL},
    };
    return ct_test_run("convblock", cases);
}
