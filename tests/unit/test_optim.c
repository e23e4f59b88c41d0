/* Unit tests for SGD and the learning-rate schedules (src/optim).
 *
 * SGD and the cosine and step schedules are compared with what
 * torch.optim.SGD and torch.optim.lr_scheduler produced
 * (tests/fixtures/sgd.ctfx and schedule.ctfx, made by
 * tests/fixtures/make_fixtures.py); the warmup and constant schedules, which
 * have no single torch counterpart, are checked against their definitions.
 * A full model step (layers + SGD) is tested in test_nn.c. A step taken in
 * pieces (ct_optimizer_update + ct_optimizer_count_step, the sharded
 * update's) gives the whole step's bits, for SGD and AdamW.
 *
 * Set CT_TEST_VERBOSE=1 to print the max difference of every comparison.
 */
#include "core/tensor.h"
#include "optim/optim.h"
#include "optim/optimizer.h"

#include "ct_test.h"

#include <stdint.h>


#include "ct_fixture.h"

static void check_lr(const char *label, int64_t step, double got, double want, double rtol)
{
    int ok = fabs(got - want) <= rtol * fabs(want);
    if (!ok)
        fprintf(stderr, "\n  %s: step %lld: got %.17g want %.17g\n", label, (long long)step, got,
                want);
    CU_ASSERT(ok);
}

/* ------------------------------------------------------------ SGD vs torch */

static void run_sgd_variant(const struct fx_file *f, const char *name)
{
    enum { N = 10, STEPS = 4 };
    char key[FX_NAME_MAX];
    snprintf(key, sizeof key, "%s.hparams", name);
    const float *hp = fx_get(f, key, 5); /* lr, momentum, dampening, weight_decay, nesterov */
    snprintf(key, sizeof key, "%s.params", name);
    const float *want = fx_get(f, key, STEPS * N);
    const float *p0 = fx_get(f, "param0", N), *grads = fx_get(f, "grads", STEPS * N);
    if (!hp || !want || !p0 || !grads)
        return;

    struct ct_layout lay = {0};
    struct ct_flat params;
    struct ct_sgd opt;
    CU_ASSERT_FATAL(ct_layout_add(&lay, "p", 1, (const int64_t[]){N}) == 0);
    CU_ASSERT_FATAL(ct_flat_alloc(&params, &lay) == 0);
    memcpy(params.data, p0, N * sizeof(float));
    /* The hyperparameters went through float32 in the fixture; SGD uses
     * them as float, so nothing is lost. */
    struct ct_sgd_params sp = {
        .momentum = hp[1], .dampening = hp[2], .weight_decay = hp[3], .nesterov = hp[4] != 0};
    CU_ASSERT_FATAL(ct_sgd_init(&opt, &sp, lay.numel) == 0);
    for (int s = 0; s < STEPS; s++) {
        /* The gradient buffer has the layout's size, padding included. */
        float g[16] = {0};
        CU_ASSERT_FATAL(params.numel <= 16);
        memcpy(g, grads + s * N, N * sizeof(float));
        ct_sgd_step(&opt, params.data, g, params.numel, hp[0]);
        /* Element-wise float32 arithmetic on values of order 1 in both;
         * torch may round the momentum update in another order (a few ulp
         * per step, compounding over 4 steps): atol 1e-6 is ~10 ulp. An
         * update that ignored dampening, Nesterov or weight decay would be
         * off by >= 1e-4 here. */
        snprintf(key, sizeof key, "sgd.%s.step%d", name, s + 1);
        check_close(key, params.data, want + s * N, N, 1e-6, 1e-6);
    }
    CU_ASSERT_EQUAL(opt.steps, STEPS);
    ct_sgd_free(&opt);
    ct_flat_free(&params);
    ct_layout_free(&lay);
}

static void test_sgd_golden(void)
{
    struct fx_file f;
    if (fx_open(&f, "sgd.ctfx"))
        return;
    run_sgd_variant(&f, "plain");    /* momentum 0 */
    run_sgd_variant(&f, "damp");     /* momentum 0.9, dampening 0.1 */
    run_sgd_variant(&f, "nesterov"); /* momentum 0.9, Nesterov, weight decay 0.01 */
    fx_free(&f);
}

/* ------------------------------------------------------------ schedules vs torch */

/* torch's chained CosineAnnealingLR updates the lr recursively from the
 * previous one; ours is the closed form. The two agree to accumulated
 * double rounding, and the fixture stores float32 (6e-8 relative), so
 * rtol 1e-6 is ample while any off-by-one step (a shift of ~1e-3 relative
 * per step at least, here) or a wrong T_max fails. */
static void test_schedule_golden(void)
{
    enum { STEPS = 30 };
    struct fx_file f;
    if (fx_open(&f, "schedule.ctfx"))
        return;
    const float *chp = fx_get(&f, "cosine.hparams", 3), *clr = fx_get(&f, "cosine.lr", STEPS);
    const float *shp = fx_get(&f, "step.hparams", 3), *slr = fx_get(&f, "step.lr", STEPS);
    if (!chp || !clr || !shp || !slr)
        goto done;
    struct ct_schedule cos_s = {.kind = CT_SCHED_COSINE, .base_lr = chp[0],
                                .total_steps = (int64_t)chp[1], .min_lr = chp[2]};
    struct ct_schedule step_s = {.kind = CT_SCHED_STEP, .base_lr = shp[0], .total_steps = STEPS,
                                 .step_size = (int64_t)shp[1], .gamma = shp[2]};
    float got_c[STEPS], got_s[STEPS];
    for (int i = 0; i < STEPS; i++) {
        got_c[i] = (float)ct_schedule_lr(&cos_s, i);
        got_s[i] = (float)ct_schedule_lr(&step_s, i);
    }
    check_close("schedule.cosine", got_c, clr, STEPS, 0, 1e-6);
    check_close("schedule.step", got_s, slr, STEPS, 0, 1e-6);
done:
    fx_free(&f);
}

/* ------------------------------------------------------------ schedules by definition */

static void test_schedule_warmup_cosine(void)
{
    const double base = 0.1, min = 0.001;
    struct ct_schedule s = {.kind = CT_SCHED_COSINE, .base_lr = base, .total_steps = 50,
                            .warmup_steps = 5, .min_lr = min};
    /* Linear warmup: base * (step+1) / 5, reaching base at step 4. */
    for (int64_t i = 0; i < 5; i++)
        check_lr("warmup", i, ct_schedule_lr(&s, i), base * (double)(i + 1) / 5.0, 1e-12);
    check_lr("warmup", 0, ct_schedule_lr(&s, 0), base / 5, 1e-12);
    check_lr("warmup", 4, ct_schedule_lr(&s, 4), base, 1e-12);
    /* Then cosine over the remaining T = 45 steps, starting at base. */
    check_lr("cosine start", 5, ct_schedule_lr(&s, 5), base, 1e-12);
    double prev = ct_schedule_lr(&s, 5);
    for (int64_t i = 6; i < 50; i++) {
        double lr = ct_schedule_lr(&s, i);
        if (!(lr < prev))
            fprintf(stderr, "\n  cosine not decreasing at step %lld: %.17g after %.17g\n",
                    (long long)i, lr, prev);
        CU_ASSERT(lr < prev);
        prev = lr;
    }
    double last = ct_schedule_lr(&s, 49);
    double want_last = min + (base - min) * (1.0 + cos(M_PI * 44.0 / 45.0)) / 2.0;
    check_lr("cosine last", 49, last, want_last, 1e-12);
    CU_ASSERT(last > min && last - min < 0.01 * (base - min));
    /* At and after the end the schedule rests at min_lr. */
    check_lr("cosine end", 50, ct_schedule_lr(&s, 50), min, 1e-12);
    check_lr("cosine after end", 1000, ct_schedule_lr(&s, 1000), min, 1e-12);
    /* Halfway through the cosine part: the mean of base and min. */
    struct ct_schedule h = s;
    h.total_steps = 5 + 40;
    check_lr("cosine half", 25, ct_schedule_lr(&h, 25), (base + min) / 2, 1e-12);
}

static void test_schedule_constant(void)
{
    struct ct_schedule s = {.kind = CT_SCHED_CONSTANT, .base_lr = 0.05, .total_steps = 100};
    for (int64_t i = 0; i < 200; i++)
        CU_ASSERT_EQUAL(ct_schedule_lr(&s, i), 0.05);
    /* With a warmup, constant after it. */
    s.warmup_steps = 4;
    check_lr("constant warmup", 0, ct_schedule_lr(&s, 0), 0.0125, 1e-12);
    check_lr("constant warmup", 2, ct_schedule_lr(&s, 2), 0.0375, 1e-12);
    for (int64_t i = 3; i < 200; i++)
        CU_ASSERT_EQUAL(ct_schedule_lr(&s, i), 0.05);
}

static void test_schedule_step_warmup(void)
{
    /* The step decay counts from the end of the warmup. */
    struct ct_schedule s = {.kind = CT_SCHED_STEP, .base_lr = 0.2, .total_steps = 20,
                            .warmup_steps = 2, .step_size = 3, .gamma = 0.1};
    check_lr("step warmup", 0, ct_schedule_lr(&s, 0), 0.1, 1e-12);
    check_lr("step", 2, ct_schedule_lr(&s, 2), 0.2, 1e-12);
    check_lr("step", 4, ct_schedule_lr(&s, 4), 0.2, 1e-12);
    check_lr("step", 5, ct_schedule_lr(&s, 5), 0.02, 1e-12);
    check_lr("step", 8, ct_schedule_lr(&s, 8), 0.002, 1e-12);
}

/* ------------------------------------------------------------ a step in pieces */

/* Five steps of `hp` over N elements, whole (a) and in pieces of `piece`
 * elements taken last piece first (b): the same parameters, state and step
 * count, bit for bit. */
static void pieces_case(const struct ct_optimizer_params *hp, size_t piece)
{
    enum { N = 1000, STEPS = 5 };
    float pa[N], pb[N], g[N];
    struct ct_optimizer a, b;
    CU_ASSERT_FATAL(ct_optimizer_init(&a, hp, N) == 0 && ct_optimizer_init(&b, hp, N) == 0);
    for (int i = 0; i < N; i++)
        pa[i] = pb[i] = (float)sin(0.1 * i);
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < N; i++)
            g[i] = (float)cos(0.37 * i + s) * (i % 7 == 0 ? 0.0f : 1.0f);
        const double lr = 1e-2 / (s + 1);
        ct_optimizer_step(&a, pa, g, N, lr);
        for (size_t at = (N - 1) / piece * piece;; at -= piece) {
            const size_t n = N - at < piece ? N - at : piece;
            ct_optimizer_update(&b, at, pb + at, g + at, n, lr);
            if (at == 0)
                break;
        }
        ct_optimizer_count_step(&b);
    }
    CU_ASSERT(memcmp(pa, pb, sizeof pa) == 0);
    struct ct_flat *sa[CT_OPTIM_MAX_STATE], *sb[CT_OPTIM_MAX_STATE];
    const char *na[CT_OPTIM_MAX_STATE], *nb[CT_OPTIM_MAX_STATE];
    const int k = ct_optimizer_state(&a, sa, na);
    CU_ASSERT_EQUAL(ct_optimizer_state(&b, sb, nb), k);
    for (int j = 0; j < k; j++)
        CU_ASSERT(memcmp(sa[j]->data, sb[j]->data, N * sizeof(float)) == 0);
    CU_ASSERT_EQUAL(*ct_optimizer_steps(&a), STEPS);
    CU_ASSERT_EQUAL(*ct_optimizer_steps(&b), STEPS);
    ct_optimizer_free(&a);
    ct_optimizer_free(&b);
}

static void test_step_in_pieces(void)
{
    struct ct_optimizer_params sgd = {.kind = CT_OPTIM_SGD,
                                      .sgd = {.momentum = 0.9, .dampening = 0.1,
                                              .weight_decay = 1e-3}};
    struct ct_optimizer_params nesterov = sgd;
    nesterov.sgd.nesterov = 1;
    nesterov.sgd.dampening = 0.0;
    struct ct_optimizer_params adamw = {.kind = CT_OPTIM_ADAMW, .adamw = ct_adamw_default_params()};
    adamw.adamw.weight_decay = 0.1;
    const size_t pieces[] = {1, 7, 256, 999, 1000, 4096};
    for (size_t i = 0; i < sizeof pieces / sizeof *pieces; i++) {
        pieces_case(&sgd, pieces[i]);
        pieces_case(&nesterov, pieces[i]);
        pieces_case(&adamw, pieces[i]);
    }
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"SGD variants golden (torch)", test_sgd_golden},
        {"cosine and step schedules golden (torch)", test_schedule_golden},
        {"warmup then cosine", test_schedule_warmup_cosine},
        {"constant schedule", test_schedule_constant},
        {"step schedule after warmup", test_schedule_step_warmup},
        {"a step in pieces = the whole step (SGD, Nesterov, AdamW)", test_step_in_pieces},
        {NULL, NULL},
    };
    return ct_test_run("optim", cases);
}
