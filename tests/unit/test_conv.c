/* Unit tests for the Conv2d and pooling kernels (src/nn/conv2d.c, src/nn/pool.c).
 *
 * Dims legend: B = batch, C = input channels, OC = output channels, H, W =
 * input size, OH, OW = output size, KH, KW = conv kernel size, K = pool
 * kernel size, P = OH * OW.
 *
 * Three kinds of evidence: golden tests against PyTorch (tests/fixtures/
 * conv.ctfx and pool.ctfx, made by tests/fixtures/make_fixtures_conv.py; CI
 * has no torch, so the files are committed), central finite differences of
 * every backward, and the fast kernels against the naive references on many
 * shapes, with the accumulate / overwrite contract. This file tests kernels,
 * not modules or models.
 *
 * Set CT_TEST_VERBOSE=1 to print the max difference of every comparison.
 */
#include "core/gemm.h"
#include "core/rng.h"
#include "core/simd.h"
#include "nn/conv2d.h"
#include "nn/pool.h"

#include "ct_test.h"

#include <stdint.h>

#include "ct_fixture.h"

/* ------------------------------------------------------------ helpers */

/* Deterministic U(-bound, bound) test data: one Philox stream per buffer. */
static void fill(float *p, size_t n, float bound, uint32_t stream)
{
    struct ct_rng_key key = ct_rng_key(20240612, CT_RNG_INIT);
    for (size_t i = 0; i < n; i += 4) {
        uint32_t r[4];
        ct_rng_block(key, (const uint32_t[4]){stream, (uint32_t)(i >> 2), 0xC0, 0}, r);
        for (size_t j = 0; j < 4 && i + j < n; j++)
            p[i + j] = (2.0f * ct_rng_u01(r[j]) - 1.0f) * bound;
    }
}

/* Like fill, then rounded to multiples of 1/8: sums and products of a few
 * hundred such values are exact in float (and double), whatever the order
 * of the additions, so results can be compared with no tolerance at all. */
static void fill_q(float *p, size_t n, float bound, uint32_t stream)
{
    fill(p, n, bound, stream);
    for (size_t i = 0; i < n; i++)
        p[i] = roundf(p[i] * 8.0f) / 8.0f;
}

static void fill_nan(float *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        p[i] = NAN;
}

/* Exactly the ws bytes the kernels asked for, so ASan sees any overrun. */
static float *alloc_ws(size_t bytes)
{
    float *p = malloc(bytes ? bytes : 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    memset(p, 0xff, bytes); /* NaN garbage: the kernels must not read stale scratch */
    return p;
}

/* Element count of a record the test needs; 0 (and a failure) if missing. */
static const float *rec(const struct fx_file *f, const char *c, const char *what, size_t n)
{
    char key[FX_NAME_MAX];
    snprintf(key, sizeof key, "%s.%s", c, what);
    return fx_get(f, key, n);
}

/* ------------------------------------------------------------ golden: conv */

/* Ours (float32, sgemm or double-accumulated reference) against torch's
 * float32 conv2d. Every output is a sum of CKK <= 27 products of |x| < ~4
 * and |w| <= 1/sqrt(CKK); every dweight / dbias a sum of B * P <= 128 terms
 * of |dout| * |x| < ~10. Both sides round differently (blocking, FMA, order),
 * so they agree to a few float ulps of the results. Observed: out and dx
 * <= 3.6e-7 on values up to 2.2 (1.5 ulp), dweight <= 6.7e-6 and dbias
 * <= 7.6e-6 on values up to 31 (4 ulp). atol 2e-5 + rtol 1e-4 leaves more
 * than a 10x margin and is still far below any real mistake (a wrong tap, a
 * flipped kernel, a missing padding zero changes values by O(0.1..1)). */
#define GOLD_ATOL 2e-5
#define GOLD_RTOL 1e-4

/* One case of conv.ctfx: its shape, inputs and torch's outputs. */
struct conv_gold {
    const char *name;
    int B, C, H, W, OC, KH, KW, stride, pad, has_bias;
    size_t nx, nw, ny;
    const float *x, *w, *bias, *dout; /* bias: NULL when the case has none */
    const float *y_want, *dx_want, *dw_want, *db_want;
};

/* Case c of f into g; 0, or -1 (and a failure) when a record is missing. */
static int conv_gold_load(struct conv_gold *g, const struct fx_file *f, const char *c)
{
    const float *dims = rec(f, c, "dims", 10);
    if (!dims)
        return -1;
    *g = (struct conv_gold){.name = c, .B = (int)dims[0], .C = (int)dims[1], .H = (int)dims[2],
                            .W = (int)dims[3], .OC = (int)dims[4], .KH = (int)dims[5],
                            .KW = (int)dims[6], .stride = (int)dims[7], .pad = (int)dims[8],
                            .has_bias = (int)dims[9]};
    int OH, OW;
    ct_conv2d_out_size(g->H, g->W, g->KH, g->KW, g->stride, g->pad, &OH, &OW);
    g->nx = (size_t)g->B * g->C * g->H * g->W;
    g->nw = (size_t)g->OC * g->C * g->KH * g->KW;
    g->ny = (size_t)g->B * g->OC * OH * OW;
    const float *b = rec(f, c, "bias", g->OC);
    g->x = rec(f, c, "x", g->nx);
    g->w = rec(f, c, "weight", g->nw);
    g->dout = rec(f, c, "dout", g->ny);
    g->y_want = rec(f, c, "out", g->ny);
    g->dx_want = rec(f, c, "dx", g->nx);
    g->dw_want = rec(f, c, "dweight", g->nw);
    g->db_want = rec(f, c, "dbias", g->OC);
    g->bias = g->has_bias ? b : NULL;
    return b && g->x && g->w && g->dout && g->y_want && g->dx_want && g->dw_want && g->db_want
               ? 0
               : -1;
}

/* fn on every case of conv.ctfx. */
static void each_conv_gold(void (*fn)(const struct conv_gold *g))
{
    struct fx_file f;
    if (fx_open(&f, "conv.ctfx"))
        return;
    static const char *const cases[] = {"pad1", "rect_s2", "k5", "odd"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct conv_gold g;
        if (conv_gold_load(&g, &f, cases[i]) == 0)
            fn(&g);
    }
    fx_free(&f);
}

/* ws for g's shapes. */
static float *conv_gold_ws(const struct conv_gold *g)
{
    return alloc_ws(ct_conv2d_workspace(g->B, g->C, g->H, g->W, g->OC, g->KH, g->KW, g->stride,
                                        g->pad));
}

/* y, dx, dweight and dbias (when g has a bias) of g's inputs, by the fast
 * kernels or (ref) the references; dweight and dbias accumulate. */
static void conv_gold_run(const struct conv_gold *g, int ref, float *ws, float *y, float *dx,
                          float *dw, float *db)
{
    float *dbias = g->has_bias ? db : NULL;
    if (ref) {
        ct_conv2d_forward_ref(y, g->x, g->w, g->bias, g->B, g->C, g->H, g->W, g->OC, g->KH, g->KW,
                              g->stride, g->pad);
        ct_conv2d_backward_ref(dx, dw, dbias, g->dout, g->x, g->w, g->B, g->C, g->H, g->W, g->OC,
                               g->KH, g->KW, g->stride, g->pad);
    } else {
        ct_conv2d_forward(y, g->x, g->w, g->bias, ws, g->B, g->C, g->H, g->W, g->OC, g->KH, g->KW,
                          g->stride, g->pad);
        ct_conv2d_backward(dx, dw, dbias, g->dout, g->x, g->w, ws, g->B, g->C, g->H, g->W, g->OC,
                           g->KH, g->KW, g->stride, g->pad);
    }
}

static void conv_golden_case(const struct conv_gold *g)
{
    float *y = ct_test_floats(g->ny), *dx = ct_test_floats(g->nx), *dw = ct_test_floats(g->nw),
          *db = ct_test_floats(g->OC);
    float *ws = conv_gold_ws(g);
    char label[96];

    for (int ref = 0; ref < 2; ref++) {
        const char *kind = ref ? "conv_ref" : "conv";
        fill_nan(y, g->ny);
        fill_nan(dx, g->nx);
        memset(dw, 0, g->nw * sizeof(float));
        memset(db, 0, g->OC * sizeof(float));
        conv_gold_run(g, ref, ws, y, dx, dw, db);
        snprintf(label, sizeof label, "%s.%s.out", kind, g->name);
        check_close(label, y, g->y_want, g->ny, GOLD_ATOL, GOLD_RTOL);
        snprintf(label, sizeof label, "%s.%s.dx", kind, g->name);
        check_close(label, dx, g->dx_want, g->nx, GOLD_ATOL, GOLD_RTOL);
        snprintf(label, sizeof label, "%s.%s.dweight", kind, g->name);
        check_close(label, dw, g->dw_want, g->nw, GOLD_ATOL, GOLD_RTOL);
        /* Without bias, torch has no dbias and ours must stay untouched. */
        snprintf(label, sizeof label, "%s.%s.dbias", kind, g->name);
        check_close(label, db, g->db_want, g->OC, GOLD_ATOL, GOLD_RTOL);
    }
    free(y);
    free(dx);
    free(dw);
    free(db);
    free(ws);
}

static void test_conv_golden(void)
{
    each_conv_gold(conv_golden_case);
}

/* The same products in bf16 (train.precision), within check_bf16's bound
 * (ct_fixture.h: derived from the operand rounding; mag = the reference
 * convolution over |x|, |w|, |dout|); dbias is a float sum of dout, not a
 * product: float32's tolerance. */
static void conv_golden_bf16_case(const struct conv_gold *g)
{
    float *ws = conv_gold_ws(g);
    float *y[2], *dx[2], *dw[2], *db[2];
    for (int bf = 0; bf < 2; bf++) {
        y[bf] = ct_test_floats(g->ny);
        dx[bf] = ct_test_floats(g->nx);
        dw[bf] = ct_test_floats(g->nw);
        db[bf] = ct_test_floats(g->OC);
        ct_gemm_set_precision(bf ? CT_PRECISION_BF16 : CT_PRECISION_FP32);
        conv_gold_run(g, 0, ws, y[bf], dx[bf], dw[bf], db[bf]);
    }
    ct_gemm_set_precision(CT_PRECISION_FP32);
    /* mag: the reference on |x|, |w|, |dout|, without bias. */
    float *ax = abs_copy(g->x, g->nx), *aw = abs_copy(g->w, g->nw), *ad = abs_copy(g->dout, g->ny);
    struct conv_gold m = *g;
    m.x = ax;
    m.w = aw;
    m.dout = ad;
    m.bias = NULL;
    m.has_bias = 0;
    float *my = ct_test_floats(g->ny), *mdx = ct_test_floats(g->nx), *mdw = ct_test_floats(g->nw);
    conv_gold_run(&m, 1, NULL, my, mdx, mdw, NULL);
    char label[96];
    snprintf(label, sizeof label, "conv bf16.%s.out", g->name);
    check_bf16(label, y[1], g->y_want, my, y[0], g->ny, GOLD_ATOL, GOLD_RTOL);
    snprintf(label, sizeof label, "conv bf16.%s.dx", g->name);
    check_bf16(label, dx[1], g->dx_want, mdx, dx[0], g->nx, GOLD_ATOL, GOLD_RTOL);
    snprintf(label, sizeof label, "conv bf16.%s.dweight", g->name);
    check_bf16(label, dw[1], g->dw_want, mdw, dw[0], g->nw, GOLD_ATOL, GOLD_RTOL);
    snprintf(label, sizeof label, "conv bf16.%s.dbias", g->name);
    check_close(label, db[1], g->db_want, g->OC, GOLD_ATOL, GOLD_RTOL);
    for (int bf = 0; bf < 2; bf++) {
        free(y[bf]);
        free(dx[bf]);
        free(dw[bf]);
        free(db[bf]);
    }
    free(ax);
    free(aw);
    free(ad);
    free(my);
    free(mdx);
    free(mdw);
    free(ws);
}

static void test_conv_golden_bf16(void)
{
    each_conv_gold(conv_golden_bf16_case);
}

/* ------------------------------------------------------------ golden: pool */

/* Like check_close, but a NaN matches a NaN (max pooling propagates NaN). */
static void check_same_nan(const char *label, const float *got, const float *want, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        int ok = isnan(want[i]) ? isnan(got[i]) : got[i] == want[i];
        if (!ok && bad++ < 5)
            fprintf(stderr, "\n  %s[%zu]: got %.9g want %.9g", label, i, (double)got[i],
                    (double)want[i]);
    }
    if (bad)
        fprintf(stderr, "\n  %s: %zu of %zu differ\n", label, bad, n);
    CU_ASSERT_EQUAL(bad, 0);
}

static void pool_golden_case(const struct fx_file *f, const char *c)
{
    const float *dims = rec(f, c, "dims", 6);
    if (!dims)
        return;
    const int B = (int)dims[0], C = (int)dims[1], H = (int)dims[2], W = (int)dims[3],
              K = (int)dims[4], stride = (int)dims[5];
    const int global = strcmp(c, "global") == 0, max = strncmp(c, "max", 3) == 0;
    int OH = 1, OW = 1;
    if (!global)
        ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    const size_t nx = (size_t)B * C * H * W, ny = (size_t)B * C * OH * OW;
    const float *x = rec(f, c, "x", nx), *dout = rec(f, c, "dout", ny),
                *y_want = rec(f, c, "out", ny), *dx_want = rec(f, c, "dx", nx);
    const float *arg_want = max ? rec(f, c, "arg", ny) : NULL;
    if (!x || !dout || !y_want || !dx_want || (max && !arg_want))
        return;
    float *y = ct_test_floats(ny), *dx = ct_test_floats(nx);
    char label[96];
    fill_nan(y, ny);
    fill_nan(dx, nx);

    if (max) {
        CU_ASSERT_EQUAL(ct_maxpool2d_workspace(B, C, H, W, K, stride), ny * sizeof(int32_t));
        int32_t *arg = malloc(ct_maxpool2d_workspace(B, C, H, W, K, stride));
        CU_ASSERT_PTR_NOT_NULL_FATAL(arg);
        ct_maxpool2d_forward(y, arg, x, B, C, H, W, K, stride);
        /* A max is a copy, not a computation: exact, NaN included. The
         * indices must be torch's: the first of tied maxima, a NaN over
         * anything. */
        snprintf(label, sizeof label, "maxpool.%s.out", c);
        check_same_nan(label, y, y_want, ny);
        size_t bad = 0;
        for (size_t i = 0; i < ny; i++)
            if (arg[i] != (int32_t)arg_want[i] && bad++ < 5)
                fprintf(stderr, "\n  maxpool.%s.arg[%zu]: got %d want %d", c, i, (int)arg[i],
                        (int)arg_want[i]);
        CU_ASSERT_EQUAL(bad, 0);
        ct_maxpool2d_backward(dx, dout, arg, B, C, H, W, K, stride);
        /* Each input gets the sum of at most 4 routed gradients (3x3 windows
         * at stride 2 overlap in one row or column); torch adds them in
         * another order: a few ulps of |dx| < ~6, hence 1e-6. Non-overlapping
         * windows give exact copies. */
        snprintf(label, sizeof label, "maxpool.%s.dx", c);
        check_close(label, dx, dx_want, nx, 1e-6, 0);

        fill_nan(y, ny);
        ct_maxpool2d_forward_ref(y, x, B, C, H, W, K, stride);
        snprintf(label, sizeof label, "maxpool_ref.%s.out", c);
        check_same_nan(label, y, y_want, ny);
        fill_nan(dx, nx);
        ct_maxpool2d_backward_ref(dx, dout, x, B, C, H, W, K, stride);
        snprintf(label, sizeof label, "maxpool_ref.%s.dx", c);
        check_close(label, dx, dx_want, nx, 1e-6, 0);
        free(arg);
    } else if (global) {
        /* Means of 35 values |x| < ~4: ours sums in double, torch in float;
         * the results differ by the float rounding of torch's sum, ~1e-7. */
        ct_global_avgpool_forward(y, x, B, C, H, W);
        check_close("global_avgpool.out", y, y_want, ny, 1e-6, 1e-6);
        /* dout / 35 in float on both sides: exact agreement expected; 1 ulp allowed. */
        ct_global_avgpool_backward(dx, dout, B, C, H, W);
        check_close("global_avgpool.dx", dx, dx_want, nx, 0, 2.4e-7);
    } else {
        /* Window sums of K * K <= 9 values |x| < ~4 divided by K * K; both
         * sides add in row-major order in float, so they agree to an ulp or
         * two: 1e-6 absolute. The backward divides dout by K * K and adds
         * up to 9 shares per input pixel: the same bound. */
        ct_avgpool2d_forward(y, x, B, C, H, W, K, stride);
        snprintf(label, sizeof label, "avgpool.%s.out", c);
        check_close(label, y, y_want, ny, 1e-6, 0);
        ct_avgpool2d_backward(dx, dout, B, C, H, W, K, stride);
        snprintf(label, sizeof label, "avgpool.%s.dx", c);
        check_close(label, dx, dx_want, nx, 1e-6, 0);
        fill_nan(y, ny);
        fill_nan(dx, nx);
        ct_avgpool2d_forward_ref(y, x, B, C, H, W, K, stride);
        snprintf(label, sizeof label, "avgpool_ref.%s.out", c);
        check_close(label, y, y_want, ny, 1e-6, 0);
        ct_avgpool2d_backward_ref(dx, dout, B, C, H, W, K, stride);
        snprintf(label, sizeof label, "avgpool_ref.%s.dx", c);
        check_close(label, dx, dx_want, nx, 1e-6, 0);
    }
    free(y);
    free(dx);
}

static void test_pool_golden(void)
{
    struct fx_file f;
    if (fx_open(&f, "pool.ctfx"))
        return;
    static const char *const cases[] = {"max2", "max3", "maxnan", "avg2", "avg3", "global"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        pool_golden_case(&f, cases[i]);
    fx_free(&f);
}

/* ------------------------------------------------------------ finite differences: conv */

/* The finite-difference checks use data on a 1/8 grid (fill_q) and a step of
 * 1/2, so that every quantity involved is exact: the convolution of such
 * values (sums of at most a few hundred products, each a multiple of 1/64
 * below 2^4) fits in float's 24 bits, the loss L = sum(out .* R) fits in
 * double, and L is linear in any single input, so the central difference
 * (L(p + h) - L(p - h)) / 2h is the exact derivative. The backward kernels
 * produce sums of the same kind of products, also exact in any order. Hence
 * the comparison allows no difference at all: any wrong index, transposed
 * kernel, lost tap or missing accumulation shows. */
struct conv_shape {
    int B, C, H, W, OC, KH, KW, stride, pad;
};

static double conv_loss(float *y, const float *x, const float *w, const float *b, const float *R,
                        const struct conv_shape *s, size_t ny)
{
    ct_conv2d_forward_ref(y, x, w, b, s->B, s->C, s->H, s->W, s->OC, s->KH, s->KW, s->stride,
                          s->pad);
    double L = 0;
    for (size_t i = 0; i < ny; i++)
        L += (double)y[i] * R[i];
    return L;
}

static void fd_conv_param(const char *label, float *p, size_t n, const float *grad, float *y,
                          const float *x, const float *w, const float *b, const float *R,
                          const struct conv_shape *s, size_t ny)
{
    float *fd = ct_test_floats(n);
    const float h = 0.5f;
    for (size_t i = 0; i < n; i++) {
        float orig = p[i];
        p[i] = orig + h;
        double Lp = conv_loss(y, x, w, b, R, s, ny);
        p[i] = orig - h;
        double Lm = conv_loss(y, x, w, b, R, s, ny);
        p[i] = orig;
        fd[i] = (float)((Lp - Lm) / (2.0 * h));
    }
    check_close(label, grad, fd, n, 0, 0);
    free(fd);
}

static void test_conv_fd(void)
{
    static const struct conv_shape shapes[] = {
        /* B  C  H  W OC KH KW s  p */
        {2, 3, 6, 5, 4, 3, 2, 2, 1}, /* rectangular everything, stride 2, padding */
        {2, 2, 5, 5, 3, 3, 3, 1, 1}, /* "same" convolution (the flat im2col path) */
        {3, 2, 7, 6, 2, 2, 4, 3, 2}, /* stride 3, padding wider than the stride */
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const struct conv_shape *s = &shapes[k];
        int OH, OW;
        ct_conv2d_out_size(s->H, s->W, s->KH, s->KW, s->stride, s->pad, &OH, &OW);
        const size_t nx = (size_t)s->B * s->C * s->H * s->W,
                     nw = (size_t)s->OC * s->C * s->KH * s->KW, ny = (size_t)s->B * s->OC * OH * OW;
        float *x = ct_test_floats(nx), *w = ct_test_floats(nw), *b = ct_test_floats(s->OC);
        float *R = ct_test_floats(ny), *y = ct_test_floats(ny);
        float *dx = ct_test_floats(nx), *dw = ct_test_floats(nw), *db = ct_test_floats(s->OC);
        float *ws = alloc_ws(ct_conv2d_workspace(s->B, s->C, s->H, s->W, s->OC, s->KH, s->KW,
                                                 s->stride, s->pad));
        fill_q(x, nx, 2.0f, 100 + (uint32_t)k);
        fill_q(w, nw, 1.0f, 110 + (uint32_t)k);
        fill_q(b, s->OC, 1.0f, 120 + (uint32_t)k);
        fill_q(R, ny, 1.0f, 130 + (uint32_t)k);
        char label[64];
        for (int ref = 0; ref < 2; ref++) {
            memset(dw, 0, nw * sizeof(float));
            memset(db, 0, s->OC * sizeof(float));
            if (ref)
                ct_conv2d_backward_ref(dx, dw, db, R, x, w, s->B, s->C, s->H, s->W, s->OC, s->KH,
                                       s->KW, s->stride, s->pad);
            else
                ct_conv2d_backward(dx, dw, db, R, x, w, ws, s->B, s->C, s->H, s->W, s->OC, s->KH,
                                   s->KW, s->stride, s->pad);
            const char *kind = ref ? "fd.conv_ref" : "fd.conv";
            snprintf(label, sizeof label, "%s%zu.dx", kind, k);
            fd_conv_param(label, x, nx, dx, y, x, w, b, R, s, ny);
            snprintf(label, sizeof label, "%s%zu.dweight", kind, k);
            fd_conv_param(label, w, nw, dw, y, x, w, b, R, s, ny);
            snprintf(label, sizeof label, "%s%zu.dbias", kind, k);
            fd_conv_param(label, b, s->OC, db, y, x, w, b, R, s, ny);
        }
        free(x);
        free(w);
        free(b);
        free(R);
        free(y);
        free(dx);
        free(dw);
        free(db);
        free(ws);
    }
}

/* ------------------------------------------------------------ finite differences: pool */

enum { POOL_MAX, POOL_AVG, POOL_GLOBAL };

struct pool_shape {
    int kind, B, C, H, W, K, stride;
};

static double pool_loss(float *y, int32_t *arg, const float *x, const float *R,
                        const struct pool_shape *s, size_t ny)
{
    if (s->kind == POOL_MAX)
        ct_maxpool2d_forward(y, arg, x, s->B, s->C, s->H, s->W, s->K, s->stride);
    else if (s->kind == POOL_AVG)
        ct_avgpool2d_forward(y, x, s->B, s->C, s->H, s->W, s->K, s->stride);
    else
        ct_global_avgpool_forward(y, x, s->B, s->C, s->H, s->W);
    double L = 0;
    for (size_t i = 0; i < ny; i++)
        L += (double)y[i] * R[i];
    return L;
}

/* Max pooling is piecewise linear: the inputs are distinct multiples of
 * 1/8 and the step is 1/32, so no perturbation changes any window's argmax,
 * and L is exactly linear around the point. Average pools divide by K * K
 * (or H * W), here powers of two, so they are exact too; the 3x3 case
 * divides by 9, which rounds each output by <= 2^-24 relative: with a step
 * of 1/32 and |L| terms < 2, that is < 3e-6 in the difference quotient, so
 * it gets atol 1e-5 (a wrong share is off by >= 1/9 * |R| ~ 0.01). */
static void test_pool_fd(void)
{
    static const struct pool_shape shapes[] = {
        {POOL_MAX, 2, 2, 6, 6, 2, 2},    {POOL_MAX, 2, 2, 7, 7, 3, 2},
        {POOL_MAX, 1, 3, 5, 6, 2, 1},    {POOL_AVG, 2, 2, 6, 7, 2, 2},
        {POOL_AVG, 2, 2, 6, 6, 2, 1},    {POOL_AVG, 1, 2, 7, 8, 3, 2},
        {POOL_GLOBAL, 2, 3, 4, 8, 0, 0},
    };
    for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
        const struct pool_shape *s = &shapes[k];
        int OH = 1, OW = 1;
        if (s->kind != POOL_GLOBAL)
            ct_pool2d_out_size(s->H, s->W, s->K, s->stride, &OH, &OW);
        const size_t nx = (size_t)s->B * s->C * s->H * s->W, ny = (size_t)s->B * s->C * OH * OW;
        float *x = ct_test_floats(nx), *R = ct_test_floats(ny), *y = ct_test_floats(ny);
        float *dx = ct_test_floats(nx), *fd = ct_test_floats(nx);
        int32_t *arg = calloc(ny, sizeof(int32_t));
        CU_ASSERT_PTR_NOT_NULL_FATAL(arg);
        /* Distinct values: a permutation of (i - nx/2) / 8 (37 is prime to
         * every nx here: none is a multiple of 37). */
        for (size_t i = 0; i < nx; i++)
            x[i] = (float)((double)((i * 37) % nx) - (double)(nx / 2)) / 8.0f;
        fill_q(R, ny, 1.0f, 200 + (uint32_t)k);
        pool_loss(y, arg, x, R, s, ny);
        fill_nan(dx, nx);
        if (s->kind == POOL_MAX)
            ct_maxpool2d_backward(dx, R, arg, s->B, s->C, s->H, s->W, s->K, s->stride);
        else if (s->kind == POOL_AVG)
            ct_avgpool2d_backward(dx, R, s->B, s->C, s->H, s->W, s->K, s->stride);
        else
            ct_global_avgpool_backward(dx, R, s->B, s->C, s->H, s->W);
        const float h = 1.0f / 32;
        for (size_t i = 0; i < nx; i++) {
            float orig = x[i];
            x[i] = orig + h;
            double Lp = pool_loss(y, arg, x, R, s, ny);
            x[i] = orig - h;
            double Lm = pool_loss(y, arg, x, R, s, ny);
            x[i] = orig;
            fd[i] = (float)((Lp - Lm) / (2.0 * h));
        }
        char label[64];
        static const char *const names[] = {"max", "avg", "global"};
        snprintf(label, sizeof label, "fd.%spool%zu.dx", names[s->kind], k);
        check_close(label, dx, fd, nx, s->K == 3 && s->kind == POOL_AVG ? 1e-5 : 0, 0);
        free(x);
        free(R);
        free(y);
        free(dx);
        free(fd);
        free(arg);
    }
}

/* ------------------------------------------------------------ conv: sgemm vs naive */

/* A small deterministic generator for shapes (not for data). */
static uint32_t lcg(uint32_t *st)
{
    *st = *st * 1664525u + 1013904223u;
    return *st >> 8;
}

static int rnd(uint32_t *st, int lo, int hi) { return lo + (int)(lcg(st) % (uint32_t)(hi - lo + 1)); }

/* Which paths of the fast kernels a shape runs through. */
struct coverage {
    int single_b1, single_many, grouped_full, grouped_tail, pointwise, flat, strided;
};

/* Fast vs reference for one shape, and the accumulate / overwrite contract.
 * Data U(-1, 1), weights U(-1, 1) / sqrt(CKK): outputs are sums of up to 200
 * products with |sum| < ~3, dweight and dbias sums of up to B * P = 720
 * terms, up to ~40 in size. The reference adds in double, sgemm in float,
 * so they differ by a few float ulps: observed out and dinp <= 5e-7,
 * dweight <= 6.2e-6, dbias <= 1.1e-5 (<= 3e-7 relative). atol 1e-5 + rtol
 * 1e-4 leaves a 10x margin or more, while a wrong tap, index or padding
 * misses by O(0.1) absolute or 10% relative. */
static void conv_fast_vs_ref(const struct conv_shape *s, int has_bias, int has_dinp,
                             struct coverage *cov)
{
    const int B = s->B, C = s->C, H = s->H, W = s->W, OC = s->OC, KH = s->KH, KW = s->KW,
              st = s->stride, pad = s->pad;
    int OH, OW;
    ct_conv2d_out_size(H, W, KH, KW, st, pad, &OH, &OW);
    const size_t nx = (size_t)B * C * H * W, nw = (size_t)OC * C * KH * KW,
                 ny = (size_t)B * OC * OH * OW;
    const int G = ct_conv2d_batch_group(B, C, H, W, OC, KH, KW, st, pad);
    CU_ASSERT(G >= 1 && G <= B);
    cov->single_b1 += B == 1;
    cov->single_many += G == 1 && B > 1;
    cov->grouped_full += G > 1 && B % G == 0;
    cov->grouped_tail += G > 1 && B % G != 0;
    cov->pointwise += KH == 1 && KW == 1 && st == 1 && pad == 0;
    cov->flat += st == 1 && OW == W && KW > 1;
    cov->strided += st > 1;

    /* A workspace sized for a batch serves every smaller batch. */
    size_t wsb = ct_conv2d_workspace(B, C, H, W, OC, KH, KW, st, pad);
    CU_ASSERT(wsb % 64 == 0);
    for (int b = 1; b < B; b++)
        CU_ASSERT(ct_conv2d_workspace(b, C, H, W, OC, KH, KW, st, pad) <= wsb);

    float *x = ct_test_floats(nx), *w = ct_test_floats(nw), *bias = ct_test_floats(OC);
    float *dout = ct_test_floats(ny), *y = ct_test_floats(ny), *y_ref = ct_test_floats(ny);
    float *dx = ct_test_floats(nx), *dx_ref = ct_test_floats(nx), *dx1 = ct_test_floats(nx);
    float *dw = ct_test_floats(nw), *dw_ref = ct_test_floats(nw), *dw2 = ct_test_floats(nw);
    float *db = ct_test_floats(OC), *db_ref = ct_test_floats(OC), *db2 = ct_test_floats(OC);
    float *ws = alloc_ws(wsb);
    fill(x, nx, 1.0f, 1);
    fill(w, nw, 1.0f / sqrtf((float)(C * KH * KW)), 2);
    fill(bias, OC, 1.0f, 3);
    fill(dout, ny, 1.0f, 4);
    const float *b = has_bias ? bias : NULL;
    char tag[96], label[128];
    snprintf(tag, sizeof tag, "B=%d C=%d %dx%d OC=%d k=%dx%d s=%d p=%d G=%d%s%s", B, C, H, W, OC,
             KH, KW, st, pad, G, has_bias ? "" : " nobias", has_dinp ? "" : " nodinp");

    fill_nan(y, ny); /* forward must overwrite every output */
    ct_conv2d_forward(y, x, w, b, ws, B, C, H, W, OC, KH, KW, st, pad);
    ct_conv2d_forward_ref(y_ref, x, w, b, B, C, H, W, OC, KH, KW, st, pad);
    snprintf(label, sizeof label, "out %s", tag);
    check_close(label, y, y_ref, ny, 1e-5, 1e-4);

    /* NaN in dinp: backward must overwrite it; a NaN in the workspace
     * (alloc_ws) must not leak either. */
    fill_nan(dx, nx);
    fill_nan(dx_ref, nx);
    ct_conv2d_backward(has_dinp ? dx : NULL, dw, has_bias ? db : NULL, dout, x, w, ws, B, C, H, W,
                       OC, KH, KW, st, pad);
    ct_conv2d_backward_ref(has_dinp ? dx_ref : NULL, dw_ref, has_bias ? db_ref : NULL, dout, x, w,
                           B, C, H, W, OC, KH, KW, st, pad);
    if (has_dinp) {
        snprintf(label, sizeof label, "dinp %s", tag);
        check_close(label, dx, dx_ref, nx, 1e-5, 1e-4);
    }
    snprintf(label, sizeof label, "dweight %s", tag);
    check_close(label, dw, dw_ref, nw, 1e-5, 1e-4);
    snprintf(label, sizeof label, "dbias %s", tag);
    check_close(label, db, db_ref, OC, 1e-5, 1e-4); /* stays 0 without bias */

    /* A second call adds the same gradient again (2x, up to the rounding
     * of one more addition per group: rtol 1e-6 plus a tiny atol for
     * values near 0) and overwrites dinp with the same values (exactly). */
    memcpy(dx1, dx, nx * sizeof(float));
    for (size_t i = 0; i < nw; i++)
        dw2[i] = 2.0f * dw[i];
    for (int o = 0; o < OC; o++)
        db2[o] = 2.0f * db[o];
    ct_conv2d_backward(has_dinp ? dx : NULL, dw, has_bias ? db : NULL, dout, x, w, ws, B, C, H, W,
                       OC, KH, KW, st, pad);
    snprintf(label, sizeof label, "2x dweight %s", tag);
    check_close(label, dw, dw2, nw, 1e-6, 1e-6);
    snprintf(label, sizeof label, "2x dbias %s", tag);
    check_close(label, db, db2, OC, 1e-6, 1e-6);
    if (has_dinp) {
        snprintf(label, sizeof label, "1x dinp %s", tag);
        check_close(label, dx, dx1, nx, 0, 0);
    } else {
        size_t touched = 0;
        for (size_t i = 0; i < nx; i++)
            touched += !isnan(dx[i]);
        CU_ASSERT_EQUAL(touched, 0); /* NULL dinp: nothing written anywhere */
    }
    /* The reference keeps the same contract. */
    for (size_t i = 0; i < nw; i++)
        dw2[i] = 2.0f * dw_ref[i];
    ct_conv2d_backward_ref(NULL, dw_ref, NULL, dout, x, w, B, C, H, W, OC, KH, KW, st, pad);
    snprintf(label, sizeof label, "2x dweight_ref %s", tag);
    check_close(label, dw_ref, dw2, nw, 1e-6, 1e-6);

    free(x);
    free(w);
    free(bias);
    free(dout);
    free(y);
    free(y_ref);
    free(dx);
    free(dx_ref);
    free(dx1);
    free(dw);
    free(dw_ref);
    free(dw2);
    free(db);
    free(db_ref);
    free(db2);
    free(ws);
}

static void test_conv_fast_vs_ref(void)
{
    struct coverage cov = {0};
    /* Shapes chosen for the paths: larger planes run one sample per sgemm,
     * 1x1 kernels skip im2col, small planes with B not a multiple of the
     * group leave a short last group. */
    static const struct conv_shape fixed[] = {
        {3, 2, 20, 20, 3, 3, 3, 1, 1},  {4, 3, 17, 19, 5, 1, 1, 1, 0}, {2, 5, 12, 12, 7, 1, 1, 1, 0},
        {5, 3, 8, 8, 4, 3, 3, 1, 1},    {5, 2, 9, 7, 3, 3, 2, 2, 2},   {1, 1, 5, 5, 1, 5, 5, 1, 0},
        {2, 4, 16, 16, 3, 1, 1, 2, 0},  {3, 1, 6, 6, 2, 5, 5, 1, 2},   {2, 3, 28, 28, 4, 3, 3, 1, 1},
        {2, 1, 1, 1, 2, 3, 3, 1, 1},    {2, 2, 2, 3, 2, 5, 5, 1, 2},   {3, 2, 3, 3, 2, 1, 1, 3, 0},
        /* 1x1 kernels that are not pointwise (stride or padding), one sample per sgemm */
        {1, 3, 9, 9, 2, 1, 1, 2, 0},    {2, 2, 33, 33, 3, 1, 1, 2, 0}, {1, 2, 6, 6, 2, 1, 1, 1, 1},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        conv_fast_vs_ref(&fixed[i], (int)(i % 3 != 2), (int)(i % 4 != 3), &cov);
    uint32_t st = 12345;
    int n = 0;
    while (n < 150) {
        struct conv_shape s = {
            .B = rnd(&st, 1, 5), .C = rnd(&st, 1, 8), .H = rnd(&st, 5, 12), .W = rnd(&st, 5, 12),
            .OC = rnd(&st, 1, 8), .KH = rnd(&st, 1, 5), .KW = rnd(&st, 1, 5),
            .stride = rnd(&st, 1, 3), .pad = rnd(&st, 0, 2)};
        if (s.H + 2 * s.pad < s.KH || s.W + 2 * s.pad < s.KW)
            continue;
        conv_fast_vs_ref(&s, rnd(&st, 0, 3) != 0, rnd(&st, 0, 3) != 0, &cov);
        n++;
    }
    if (getenv("CT_TEST_VERBOSE"))
        printf("\n    coverage: B=1 %d, one-sample groups %d, full groups %d, short last group "
               "%d, pointwise %d, flat im2col %d, strided %d",
               cov.single_b1, cov.single_many, cov.grouped_full, cov.grouped_tail, cov.pointwise,
               cov.flat, cov.strided);
    /* Every path must have run: a change of the grouping heuristic that
     * stops covering one fails here, not silently. */
    CU_ASSERT(cov.single_b1 > 0);
    CU_ASSERT(cov.single_many > 0);
    CU_ASSERT(cov.grouped_full > 0);
    CU_ASSERT(cov.grouped_tail > 0);
    CU_ASSERT(cov.pointwise > 0);
    CU_ASSERT(cov.flat > 0);
    CU_ASSERT(cov.strided > 0);
}

/* ------------------------------------------------------------ AVX-512 vs portable */

/* The AVX-512 im2col/col2im (stride 1, core/simd.h) move the same values
 * and add the same terms in the same order as the portable ones: forward
 * output and all three gradients must be bit-identical. Planes up to 40
 * wide cross the 16-lane segments; paddings up to 2 put segments before and
 * after the image. On a CPU without AVX-512 both runs take the portable
 * path and the test is trivially true. */
static void conv_isa_case(const struct conv_shape *s)
{
    int OH, OW;
    ct_conv2d_out_size(s->H, s->W, s->KH, s->KW, s->stride, s->pad, &OH, &OW);
    const size_t nx = (size_t)s->B * s->C * s->H * s->W, ny = (size_t)s->B * s->OC * OH * OW,
                 nw = (size_t)s->OC * s->C * s->KH * s->KW;
    float *x = ct_test_floats(nx), *w = ct_test_floats(nw), *bias = ct_test_floats((size_t)s->OC),
          *dout = ct_test_floats(ny);
    fill(x, nx, 1.0f, 1);
    fill(w, nw, 0.5f, 2);
    fill(bias, (size_t)s->OC, 0.5f, 3);
    fill(dout, ny, 1.0f, 4);
    float *y[2], *dx[2], *dw[2], *db[2];
    float *ws = alloc_ws(ct_conv2d_workspace(s->B, s->C, s->H, s->W, s->OC, s->KH, s->KW,
                                             s->stride, s->pad));
    for (int v = 0; v < 2; v++) {
        y[v] = ct_test_floats(ny);
        dx[v] = ct_test_floats(nx);
        dw[v] = ct_test_floats(nw);
        db[v] = ct_test_floats((size_t)s->OC);
        ct_simd_set_portable(v);
        ct_conv2d_forward(y[v], x, w, bias, ws, s->B, s->C, s->H, s->W, s->OC, s->KH, s->KW,
                          s->stride, s->pad);
        ct_conv2d_backward(dx[v], dw[v], db[v], dout, x, w, ws, s->B, s->C, s->H, s->W, s->OC,
                           s->KH, s->KW, s->stride, s->pad);
    }
    ct_simd_set_portable(0);
    char label[96];
    snprintf(label, sizeof label, "%dx%dx%dx%d k%dx%d s%d p%d", s->B, s->C, s->H, s->W, s->KH,
             s->KW, s->stride, s->pad);
    check_close(label, y[0], y[1], ny, 0, 0);
    check_close(label, dx[0], dx[1], nx, 0, 0);
    check_close(label, dw[0], dw[1], nw, 0, 0);
    check_close(label, db[0], db[1], (size_t)s->OC, 0, 0);
    for (int v = 0; v < 2; v++) {
        free(y[v]);
        free(dx[v]);
        free(dw[v]);
        free(db[v]);
    }
    free(x);
    free(w);
    free(bias);
    free(dout);
    free(ws);
}

static void test_conv_isa(void)
{
    static const struct conv_shape fixed[] = {
        {2, 1, 28, 28, 4, 3, 3, 1, 1}, {2, 3, 14, 14, 5, 3, 3, 1, 1}, {1, 2, 40, 33, 3, 5, 5, 1, 2},
        {3, 2, 17, 16, 2, 3, 3, 1, 0}, {2, 2, 1, 1, 2, 3, 3, 1, 1},  {2, 3, 20, 20, 2, 3, 3, 2, 1},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
        conv_isa_case(&fixed[i]);
    uint32_t st = 777;
    for (int n = 0; n < 60;) {
        struct conv_shape s = {
            .B = rnd(&st, 1, 3), .C = rnd(&st, 1, 4), .H = rnd(&st, 1, 40), .W = rnd(&st, 1, 40),
            .OC = rnd(&st, 1, 4), .KH = rnd(&st, 1, 5), .KW = rnd(&st, 1, 5), .stride = 1,
            .pad = rnd(&st, 0, 2)};
        if (s.H + 2 * s.pad < s.KH || s.W + 2 * s.pad < s.KW)
            continue;
        conv_isa_case(&s);
        n++;
    }
}

/* ------------------------------------------------------------ transposed weight gradient */

/* With our kernel the weight gradient is summed transposed, dweight^T +=
 * cols . dout^T (conv2d.c, dweight_products): it must give the bits of the
 * plain product dweight += dout . cols^T, one ct_sgemm_own call a sample.
 * 1x1 convolutions (the columns are the input) on planes large enough for
 * one sample per product (P >= 256), with sizes that leave ragged 16 x 16
 * squares in both transpositions (OC, C not multiples of 16) and full ones,
 * dweight starting non-zero (backward accumulates). */
static void test_conv_dweight_transposed(void)
{
    if (!ct_sgemm_own_available())
        return;
    static const int shapes[][4] = {{2, 3, 5, 289}, {1, 32, 64, 256}, {3, 17, 33, 300}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const int B = shapes[i][0], C = shapes[i][1], OC = shapes[i][2], P = shapes[i][3];
        const size_t nx = (size_t)B * C * P, ny = (size_t)B * OC * P, nw = (size_t)OC * C;
        float *x = ct_test_floats(nx), *w = ct_test_floats(nw), *dout = ct_test_floats(ny);
        float *dw = ct_test_floats(nw), *want = ct_test_floats(nw);
        fill(x, nx, 1.0f, 21);
        fill(w, nw, 0.5f, 22);
        fill(dout, ny, 1.0f, 23);
        fill(dw, nw, 0.5f, 24);
        memcpy(want, dw, nw * sizeof(float));
        float *ws = alloc_ws(ct_conv2d_workspace(B, C, 1, P, OC, 1, 1, 1, 0));
        ct_conv2d_backward(NULL, dw, NULL, dout, x, w, ws, B, C, 1, P, OC, 1, 1, 1, 0);
        for (int b = 0; b < B; b++)
            ct_sgemm_own(0, 1, OC, C, P, 1.0f, dout + (size_t)b * OC * P, P,
                         x + (size_t)b * C * P, P, 1.0f, want, C);
        char label[64];
        snprintf(label, sizeof label, "dweight^T B %d C %d OC %d P %d", B, C, OC, P);
        check_close(label, dw, want, nw, 0, 0);
        free(x);
        free(w);
        free(dout);
        free(dw);
        free(want);
        free(ws);
    }
}

/* ------------------------------------------------------------ pool: fast vs naive */

/* Max pooling on data with many ties (integers in [-2, 2]) and on
 * continuous data; the reference finds each argmax itself. Outputs are
 * copies (exact). An input pixel collects the gradients of up to
 * ceil(K / stride)^2 <= 16 windows, |dout| <= 1, added in float here and in
 * double there: at most 15 roundings of sums below 16, < 1.5e-5 in theory,
 * observed 2.4e-7; atol 5e-6 (a misrouted gradient is off by O(0.1..1)).
 * Average pooling: float window sums vs double, |x| <= 2.5, K * K <= 16
 * terms, observed 9e-8: 1e-6. */
static void test_pool_fast_vs_ref(void)
{
    uint32_t st = 777;
    for (int n = 0; n < 120; n++) {
        const int B = rnd(&st, 1, 3), C = rnd(&st, 1, 4), H = rnd(&st, 5, 12),
                  W = rnd(&st, 5, 12), K = rnd(&st, 1, 4), stride = rnd(&st, 1, 3);
        const int ties = n % 2;
        int OH, OW;
        ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
        const size_t nx = (size_t)B * C * H * W, ny = (size_t)B * C * OH * OW;
        float *x = ct_test_floats(nx), *dout = ct_test_floats(ny), *y = ct_test_floats(ny),
              *y_ref = ct_test_floats(ny), *dx = ct_test_floats(nx), *dx_ref = ct_test_floats(nx);
        int32_t *arg = malloc(ct_maxpool2d_workspace(B, C, H, W, K, stride));
        CU_ASSERT_PTR_NOT_NULL_FATAL(arg);
        fill(x, nx, ties ? 2.5f : 1.0f, 300 + (uint32_t)n);
        if (ties)
            for (size_t i = 0; i < nx; i++)
                x[i] = roundf(x[i]);
        fill(dout, ny, 1.0f, 400 + (uint32_t)n);
        char label[96];

        fill_nan(y, ny);
        fill_nan(dx, nx);
        ct_maxpool2d_forward(y, arg, x, B, C, H, W, K, stride);
        ct_maxpool2d_forward_ref(y_ref, x, B, C, H, W, K, stride);
        ct_maxpool2d_backward(dx, dout, arg, B, C, H, W, K, stride);
        ct_maxpool2d_backward_ref(dx_ref, dout, x, B, C, H, W, K, stride);
        snprintf(label, sizeof label, "maxpool out B=%d C=%d %dx%d K=%d s=%d", B, C, H, W, K,
                 stride);
        check_close(label, y, y_ref, ny, 0, 0);
        snprintf(label, sizeof label, "maxpool dinp B=%d C=%d %dx%d K=%d s=%d", B, C, H, W, K,
                 stride);
        check_close(label, dx, dx_ref, nx, 5e-6, 0);

        fill_nan(y, ny);
        fill_nan(dx, nx);
        ct_avgpool2d_forward(y, x, B, C, H, W, K, stride);
        ct_avgpool2d_forward_ref(y_ref, x, B, C, H, W, K, stride);
        ct_avgpool2d_backward(dx, dout, B, C, H, W, K, stride);
        ct_avgpool2d_backward_ref(dx_ref, dout, B, C, H, W, K, stride);
        snprintf(label, sizeof label, "avgpool out B=%d C=%d %dx%d K=%d s=%d", B, C, H, W, K,
                 stride);
        check_close(label, y, y_ref, ny, 1e-6, 0);
        snprintf(label, sizeof label, "avgpool dinp B=%d C=%d %dx%d K=%d s=%d", B, C, H, W, K,
                 stride);
        check_close(label, dx, dx_ref, nx, 1e-6, 0);

        free(x);
        free(dout);
        free(y);
        free(y_ref);
        free(dx);
        free(dx_ref);
        free(arg);
    }
}

/* An all -inf window reports its first pixel (as torch does), so its
 * gradient still lands inside the window; -0.0 and +0.0 compare equal, so
 * the first of them wins. */
static void test_maxpool_edge(void)
{
    const float x[8] = {-INFINITY, -INFINITY, 3.0f, 3.0f,  /* row 0 */
                        -INFINITY, -INFINITY, 3.0f, -1.0f}; /* row 1 */
    const float xz[4] = {-0.0f, 0.0f, 0.0f, -0.0f};
    float y[2], dx[8], yz[1], dxz[4];
    int32_t arg[2], argz[1];
    ct_maxpool2d_forward(y, arg, x, 1, 1, 2, 4, 2, 2);
    CU_ASSERT(isinf(y[0]) && y[0] < 0);
    CU_ASSERT_EQUAL(arg[0], 0);
    CU_ASSERT_EQUAL(y[1], 3.0f);
    CU_ASSERT_EQUAL(arg[1], 2);
    ct_maxpool2d_backward(dx, (const float[2]){1.5f, 2.5f}, arg, 1, 1, 2, 4, 2, 2);
    const float want[8] = {1.5f, 0, 2.5f, 0, 0, 0, 0, 0};
    check_close("maxpool_edge.dx", dx, want, 8, 0, 0);
    ct_maxpool2d_forward(yz, argz, xz, 1, 1, 2, 2, 2, 2);
    CU_ASSERT_EQUAL(argz[0], 0);
    CU_ASSERT(signbit(yz[0]));
    ct_maxpool2d_backward(dxz, (const float[1]){1.0f}, argz, 1, 1, 2, 2, 2, 2);
    CU_ASSERT_EQUAL(dxz[0], 1.0f);
}

static void test_out_size(void)
{
    int OH, OW;
    ct_conv2d_out_size(28, 28, 3, 3, 1, 1, &OH, &OW);
    CU_ASSERT(OH == 28 && OW == 28);
    ct_conv2d_out_size(8, 7, 3, 2, 2, 0, &OH, &OW);
    CU_ASSERT(OH == 3 && OW == 3);
    ct_conv2d_out_size(6, 9, 4, 3, 3, 2, &OH, &OW);
    CU_ASSERT(OH == 3 && OW == 4);
    ct_pool2d_out_size(28, 28, 2, 2, &OH, &OW);
    CU_ASSERT(OH == 14 && OW == 14);
    ct_pool2d_out_size(7, 6, 3, 2, &OH, &OW);
    CU_ASSERT(OH == 3 && OW == 2);
}

/* The conv tests once with each matrix product (core/gemm.h). */
CT_TEST_WITH_GEMM(test_conv_golden, 0)
CT_TEST_WITH_GEMM(test_conv_golden, 1)
CT_TEST_WITH_GEMM(test_conv_fd, 0)
CT_TEST_WITH_GEMM(test_conv_fd, 1)
CT_TEST_WITH_GEMM(test_conv_fast_vs_ref, 0)
CT_TEST_WITH_GEMM(test_conv_fast_vs_ref, 1)
CT_TEST_WITH_GEMM(test_conv_isa, 0)
CT_TEST_WITH_GEMM(test_conv_isa, 1)
CT_TEST_WITH_GEMM(test_conv_dweight_transposed, 1)

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"conv2d golden (torch), OpenBLAS", test_conv_golden_gemm0},
        {"conv2d golden (torch), our gemm", test_conv_golden_gemm1},
        {"conv2d golden in bf16 (torch, rounding bound)", test_conv_golden_bf16},
        {"pooling golden (torch)", test_pool_golden},
        {"conv2d finite differences, OpenBLAS", test_conv_fd_gemm0},
        {"conv2d finite differences, our gemm", test_conv_fd_gemm1},
        {"pooling finite differences", test_pool_fd},
        {"conv2d im2col+sgemm vs direct, OpenBLAS", test_conv_fast_vs_ref_gemm0},
        {"conv2d im2col+sgemm vs direct, our gemm", test_conv_fast_vs_ref_gemm1},
        {"conv2d AVX-512 vs portable im2col/col2im, OpenBLAS", test_conv_isa_gemm0},
        {"conv2d AVX-512 vs portable im2col/col2im, our gemm", test_conv_isa_gemm1},
        {"conv2d weight gradient summed transposed = plain product", test_conv_dweight_transposed_gemm1},
        {"pooling fast vs naive", test_pool_fast_vs_ref},
        {"maxpool -inf and signed zeros", test_maxpool_edge},
        {"output sizes", test_out_size},
        {NULL, NULL},
    };
    return ct_test_run("conv", cases);
}
