/* Unit tests for AdamW (src/optim/adamw.c) and global-norm gradient clipping
 * (src/optim/clip.c).
 *
 * Golden tests against torch.optim.AdamW and torch.nn.utils.clip_grad_norm_
 * (tests/fixtures/adamw.ctfx and clip.ctfx, made by
 * tests/fixtures/make_fixtures_attn.py), plus the properties a trainer relies
 * on: the optimizer state resumes exactly, the padding of a flat buffer stays
 * zero, clipping is a no-op below the threshold and propagates NaN like torch.
 *
 * Set CT_TEST_VERBOSE=1 to print the max difference of every comparison.
 */
#include "core/error.h"
#include "core/tensor.h"
#include "optim/adamw.h"
#include "optim/clip.h"

#include "ct_test.h"

#include <stdint.h>

#include "ct_fixture.h"

/* ------------------------------------------------------------ AdamW golden */

enum { ADAM_N = 10, ADAM_STEPS = 5 };

/* Runs the fixture's 5 steps; `pad` puts the 10 values behind another view
 * so that they start at an aligned offset inside a padded flat buffer, as
 * in a model. */
static void run_adamw_variant(const struct fx_file *f, const char *name, double wd)
{
    char key[64];
    snprintf(key, sizeof key, "%s.params", name);
    const float *want_p = fx_get(f, key, ADAM_STEPS * ADAM_N);
    snprintf(key, sizeof key, "%s.exp_avg", name);
    const float *want_m = fx_get(f, key, ADAM_STEPS * ADAM_N);
    snprintf(key, sizeof key, "%s.exp_avg_sq", name);
    const float *want_v = fx_get(f, key, ADAM_STEPS * ADAM_N);
    snprintf(key, sizeof key, "%s.hparams", name);
    const float *hp32 = fx_get(f, key, 5);
    const float *p0 = fx_get(f, "param0", ADAM_N), *grads = fx_get(f, "grads", ADAM_STEPS * ADAM_N);
    if (!want_p || !want_m || !want_v || !hp32 || !p0 || !grads)
        return;
    /* The fixture stores the hyperparameters as float32; torch used these
     * Python doubles, and so do we (1e-3 is not a float). */
    CU_ASSERT((float)wd == hp32[4] && hp32[0] == 1e-3f && hp32[1] == 0.9f);
    const double lr = 1e-3;

    struct ct_layout lay = {0};
    struct ct_flat params, grad;
    CU_ASSERT_FATAL(ct_layout_add(&lay, "other", 1, (const int64_t[]){3}) >= 0);
    int vi = ct_layout_add(&lay, "p", 1, (const int64_t[]){ADAM_N});
    CU_ASSERT_FATAL(vi >= 0);
    CU_ASSERT_FATAL(ct_flat_alloc(&params, &lay) == 0);
    CU_ASSERT_FATAL(ct_flat_alloc(&grad, &lay) == 0);
    float *p = ct_flat_view(&params, vi), *g = ct_flat_view(&grad, vi);
    memcpy(p, p0, sizeof(float) * ADAM_N);

    struct ct_adamw opt;
    struct ct_adamw_params hp = ct_adamw_default_params();
    hp.weight_decay = wd;
    CU_ASSERT_FATAL(ct_adamw_init(&opt, &hp, lay.numel) == 0);
    for (int s = 0; s < ADAM_STEPS; s++) {
        memcpy(g, grads + s * ADAM_N, sizeof(float) * ADAM_N);
        ct_adamw_step(&opt, params.data, grad.data, params.numel, lr);
        /* We do torch's float32 operations in torch's order, with its two
         * fused multiply-adds (see adamw.c), so the result is bit for bit
         * torch's on this machine's torch build; a torch run without FMA
         * would differ by an ulp of m, v or p per step. atol 1e-8 + rtol
         * 4e-7 allows ~3 ulp of the values (|p| ~ 0.1..2, |m| ~ 0.1,
         * |v| ~ 1e-3), while the smallest effect of a real mistake is
         * larger: weight decay moves p by lr*wd*|p| >= 1e-6 per step, a
         * missing bias correction changes the first update 10x (1e-3),
         * eps inside the sqrt changes element 1's update by ~50%, and
         * m, v mistakes show directly in the state. */
        snprintf(key, sizeof key, "adamw.%s.step%d.param", name, s + 1);
        check_close(key, p, want_p + s * ADAM_N, ADAM_N, 1e-8, 4e-7);
        snprintf(key, sizeof key, "adamw.%s.step%d.exp_avg", name, s + 1);
        check_close(key, opt.m.data + lay.views[vi].offset, want_m + s * ADAM_N, ADAM_N, 1e-10, 4e-7);
        snprintf(key, sizeof key, "adamw.%s.step%d.exp_avg_sq", name, s + 1);
        check_close(key, opt.v.data + lay.views[vi].offset, want_v + s * ADAM_N, ADAM_N, 1e-14, 4e-7);
    }
    CU_ASSERT_EQUAL(opt.steps, ADAM_STEPS);
    /* The other view and the padding had zero gradients on zero values:
     * still exactly zero, in the parameters and in both moments. */
    for (size_t i = 0; i < params.numel; i++) {
        if (i >= lay.views[vi].offset && i < lay.views[vi].offset + ADAM_N)
            continue;
        CU_ASSERT(params.data[i] == 0.0f && opt.m.data[i] == 0.0f && opt.v.data[i] == 0.0f);
    }
    ct_adamw_free(&opt);
    CU_ASSERT_PTR_NULL(opt.m.data);
    ct_flat_free(&params);
    ct_flat_free(&grad);
    ct_layout_free(&lay);
}

static void test_adamw_golden(void)
{
    struct fx_file f;
    if (fx_open(&f, "adamw.ctfx"))
        return;
    run_adamw_variant(&f, "wd", 0.01);
    run_adamw_variant(&f, "nowd", 0.0);
    fx_free(&f);
}

/* ------------------------------------------------------------ AdamW properties */

/* An optimizer rebuilt from saved (m, v, steps) continues exactly like the
 * one that never stopped: all a checkpoint needs to store. */
static void test_adamw_resume(void)
{
    enum { N = 37, STEPS = 6, SPLIT = 2 };
    struct ct_layout lay = {0};
    CU_ASSERT_FATAL(ct_layout_add(&lay, "w", 1, (const int64_t[]){N}) >= 0);
    struct ct_flat pa, pb;
    CU_ASSERT_FATAL(ct_flat_alloc(&pa, &lay) == 0 && ct_flat_alloc(&pb, &lay) == 0);
    float *g = calloc(pa.numel, sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    for (int i = 0; i < N; i++)
        pa.data[i] = pb.data[i] = (float)sin(i + 1.0);
    struct ct_adamw_params hp = ct_adamw_default_params();
    struct ct_adamw a, b;
    CU_ASSERT_FATAL(ct_adamw_init(&a, &hp, lay.numel) == 0 && ct_adamw_init(&b, &hp, lay.numel) == 0);
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < N; i++)
            g[i] = (float)cos(0.7 * i + s);
        double lr = 1e-2 * (s + 1);
        ct_adamw_step(&a, pa.data, g, pa.numel, lr);
        if (s == SPLIT) {
            /* "Checkpoint" b's state into a fresh optimizer. */
            struct ct_adamw c;
            CU_ASSERT_FATAL(ct_adamw_init(&c, &hp, lay.numel) == 0);
            memcpy(c.m.data, b.m.data, b.m.numel * sizeof(float));
            memcpy(c.v.data, b.v.data, b.v.numel * sizeof(float));
            c.steps = b.steps;
            ct_adamw_free(&b);
            b = c;
        }
        ct_adamw_step(&b, pb.data, g, pb.numel, lr);
    }
    CU_ASSERT(memcmp(pa.data, pb.data, pa.numel * sizeof(float)) == 0);
    CU_ASSERT(memcmp(a.m.data, b.m.data, a.m.numel * sizeof(float)) == 0);
    CU_ASSERT(memcmp(a.v.data, b.v.data, a.v.numel * sizeof(float)) == 0);
    CU_ASSERT_EQUAL(a.steps, STEPS);
    CU_ASSERT_EQUAL(b.steps, STEPS);
    ct_adamw_free(&a);
    ct_adamw_free(&b);
    free(g);
    ct_flat_free(&pa);
    ct_flat_free(&pb);
    ct_layout_free(&lay);
}

/* The first step's update is lr * sign(g) (m_hat / sqrt(v_hat) = g / |g|)
 * when eps is negligible: a closed form independent of torch. */
static void test_adamw_first_step(void)
{
    enum { N = 8 };
    struct ct_layout lay = {0};
    CU_ASSERT_FATAL(ct_layout_add(&lay, "w", 1, (const int64_t[]){N}) >= 0);
    struct ct_flat p;
    CU_ASSERT_FATAL(ct_flat_alloc(&p, &lay) == 0);
    float *g = calloc(p.numel, sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    float want[N];
    const double lr = 0.01, wd = 0.1;
    for (int i = 0; i < N; i++) {
        p.data[i] = 0.5f * (float)(i - 3);
        g[i] = (i % 2 ? 1.0f : -1.0f) * (float)(0.01 * (i + 1));
        want[i] = (float)(p.data[i] * (1.0 - lr * wd) - lr * (g[i] > 0 ? 1 : -1));
    }
    struct ct_adamw_params hp = ct_adamw_default_params();
    hp.weight_decay = wd;
    struct ct_adamw opt;
    CU_ASSERT_FATAL(ct_adamw_init(&opt, &hp, lay.numel) == 0);
    ct_adamw_step(&opt, p.data, g, p.numel, lr);
    /* eps / |g| <= 1e-6 relative on the update of 1e-2: 1e-8, plus float
     * rounding of p (~1e-7). */
    check_close("adamw.first_step", p.data, want, N, 3e-7, 0);
    ct_adamw_free(&opt);
    free(g);
    ct_flat_free(&p);
    ct_layout_free(&lay);
}

static void test_adamw_bad_params(void)
{
    struct ct_layout lay = {0};
    CU_ASSERT_FATAL(ct_layout_add(&lay, "w", 1, (const int64_t[]){4}) >= 0);
    struct ct_adamw opt;
    struct ct_adamw_params bad[4];
    for (int i = 0; i < 4; i++)
        bad[i] = ct_adamw_default_params();
    bad[0].beta1 = 1.0;
    bad[1].beta2 = -0.1;
    bad[2].eps = -1e-8;
    bad[3].weight_decay = NAN;
    static const char *const what[] = {"beta1", "beta2", "eps", "weight_decay"};
    for (int i = 0; i < 4; i++) {
        ct_error_clear();
        CU_ASSERT_EQUAL(ct_adamw_init(&opt, &bad[i], lay.numel), CT_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), what[i]));
        CU_ASSERT_PTR_NULL(opt.m.data);
        ct_adamw_free(&opt); /* safe on a failed init */
    }
    ct_layout_free(&lay);
}

/* ------------------------------------------------------------ clipping */

/* The two gradient tensors in one padded flat buffer, as in a model. */
static void test_clip_golden(void)
{
    struct fx_file f;
    if (fx_open(&f, "clip.ctfx"))
        return;
    const float *g1 = fx_get(&f, "g1", 12), *g2 = fx_get(&f, "g2", 5);
    if (!g1 || !g2)
        goto done;
    struct ct_layout lay = {0};
    CU_ASSERT_FATAL(ct_layout_add(&lay, "a", 2, (const int64_t[]){3, 4}) == 0);
    CU_ASSERT_FATAL(ct_layout_add(&lay, "b", 1, (const int64_t[]){5}) == 1);
    struct ct_flat grads;
    CU_ASSERT_FATAL(ct_flat_alloc(&grads, &lay) == 0);
    CU_ASSERT(grads.numel > 17); /* there is padding between the views */
    static const char *const variants[] = {"clip", "noclip"};
    for (int v = 0; v < 2; v++) {
        char key[64];
        snprintf(key, sizeof key, "%s.max_norm", variants[v]);
        const float *mn = fx_get(&f, key, 1);
        snprintf(key, sizeof key, "%s.norm", variants[v]);
        const float *norm_want = fx_get(&f, key, 1);
        snprintf(key, sizeof key, "%s.g1", variants[v]);
        const float *g1_want = fx_get(&f, key, 12);
        snprintf(key, sizeof key, "%s.g2", variants[v]);
        const float *g2_want = fx_get(&f, key, 5);
        if (!mn || !norm_want || !g1_want || !g2_want)
            break;
        memcpy(ct_flat_view(&grads, 0), g1, sizeof(float) * 12);
        memcpy(ct_flat_view(&grads, 1), g2, sizeof(float) * 5);
        /* torch's max_norm was a double; the fixture holds it rounded to
         * float, which moves the clipped gradients by <= 6e-8 relative. */
        double norm = ct_clip_grad_norm(grads.data, grads.numel, mn[0]);
        /* Our norm is summed in double, torch's in float32 (per tensor,
         * then the norm of the norms): they agree to float rounding, 1e-7
         * relative; rtol 1e-6. */
        snprintf(key, sizeof key, "clip.%s.norm", variants[v]);
        check_scalar(key, norm, norm_want[0], 0, 1e-6);
        /* The scaled gradients: a coefficient from a norm 1e-7 apart,
         * rounded to float, times g, rounded: ~2e-7 relative; rtol 5e-7.
         * Clipping to the wrong norm (a missing tensor, per-tensor norms)
         * changes them by percents. */
        snprintf(key, sizeof key, "clip.%s.g1", variants[v]);
        check_close(key, ct_flat_view(&grads, 0), g1_want, 12, 0, 5e-7);
        snprintf(key, sizeof key, "clip.%s.g2", variants[v]);
        check_close(key, ct_flat_view(&grads, 1), g2_want, 5, 0, 5e-7);
        if (v == 1) { /* below the threshold: untouched, bit for bit */
            CU_ASSERT(memcmp(ct_flat_view(&grads, 0), g1, sizeof(float) * 12) == 0);
        } else { /* above: the new norm is max_norm (up to the 1e-6 and rounding) */
            check_scalar("clip.clip.renorm", ct_grad_norm(grads.data, grads.numel), mn[0], 0,
                         1e-6);
        }
    }
    ct_flat_free(&grads);
    ct_layout_free(&lay);
done:
    fx_free(&f);
}

static void test_clip_properties(void)
{
    enum { N = 1001 }; /* not a multiple of the unrolling */
    float *g = malloc(N * sizeof(float));
    CU_ASSERT_PTR_NOT_NULL_FATAL(g);
    double ss = 0;
    for (int i = 0; i < N; i++) {
        g[i] = (float)((i % 7) - 3) * 0.25f;
        ss += (double)g[i] * g[i];
    }
    check_scalar("grad_norm", ct_grad_norm(g, N), sqrt(ss), 0, 1e-15);
    CU_ASSERT_EQUAL(ct_grad_norm(g, 0), 0.0);
    CU_ASSERT_EQUAL(ct_grad_norm(g, 1), 0.75);
    /* A zero gradient: norm 0, nothing scaled, no division by zero. */
    float z[5] = {0};
    CU_ASSERT_EQUAL(ct_clip_grad_norm(z, 5, 1.0), 0.0);
    for (int i = 0; i < 5; i++)
        CU_ASSERT(z[i] == 0.0f && !signbit(z[i]));
    /* Exactly at the threshold: coefficient max/(max+1e-6) < 1, as torch. */
    float e[2] = {3.0f, 4.0f};
    double n5 = ct_clip_grad_norm(e, 2, 5.0);
    CU_ASSERT_EQUAL(n5, 5.0);
    CU_ASSERT(e[0] < 3.0f && e[0] > 3.0f * (1 - 1e-6f));
    /* NaN anywhere: the norm is NaN and, as in torch (clamp keeps NaN),
     * every gradient becomes NaN. */
    float nanv[3] = {1.0f, NAN, 2.0f};
    CU_ASSERT(isnan(ct_clip_grad_norm(nanv, 3, 1.0)));
    for (int i = 0; i < 3; i++)
        CU_ASSERT(isnan(nanv[i]));
    /* An infinite gradient: coefficient 0, the finite ones become zero. */
    float infv[3] = {1.0f, INFINITY, -2.0f};
    CU_ASSERT(isinf(ct_clip_grad_norm(infv, 3, 1.0)));
    CU_ASSERT(infv[0] == 0.0f && infv[2] == 0.0f && isnan(infv[1]));
    free(g);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"AdamW golden (torch), weight decay 0.01 and 0", test_adamw_golden},
        {"AdamW resumes exactly from (m, v, steps)", test_adamw_resume},
        {"AdamW first step is lr * sign(g) plus decay", test_adamw_first_step},
        {"AdamW rejects bad hyperparameters", test_adamw_bad_params},
        {"clip_grad_norm golden (torch), above and below", test_clip_golden},
        {"clip_grad_norm edge cases", test_clip_properties},
        {NULL, NULL},
    };
    return ct_test_run("adamw", cases);
}
