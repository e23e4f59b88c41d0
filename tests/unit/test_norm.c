/* Unit tests for the normalisation and extra activation kernels:
 * src/nn/norm.c (BatchNorm, SyncBatchNorm, LayerNorm) and src/nn/gelu.c, softmax.c
 * (GELU, Softmax).
 *
 * Dims legend: B = batch rows, C = channels, S = spatial size per channel
 * (H * W; 1 for BatchNorm1d), N = rows, D = features per row, R = simulated
 * ranks.
 *
 * Evidence, per kernel:
 * - golden tests against PyTorch 1.13 (tests/fixtures/<name>.ctfx, written by
 *   tests/fixtures/make_fixtures_norm.py; committed, as CI has no torch);
 * - central finite differences of every backward. The loss sum(out .* R) is
 *   evaluated by float64 references of the forwards written below (the same
 *   functions, in double, on the same float inputs), so a difference quotient
 *   with step 1e-4 is exact to ~1e-9 and the tolerances only have to absorb
 *   the float32 rounding of the kernels' backward. Each kernel's forward is
 *   checked against the same reference, which ties the two together;
 * - SyncBatchNorm: R ranks simulated in one process, one thread per rank and
 *   an in-process loopback allreduce (barrier, sum in rank order, barrier),
 *   against one single-rank call over the whole batch. The real multi-rank
 *   test under mpirun belongs with the BatchNorm module (tests/mpi, written by
 *   the lead who integrates it).
 *
 * Set CT_TEST_VERBOSE=1 to print the max difference of every comparison.
 */
#include "core/error.h"
#include "core/rng.h"
#include "nn/gelu.h"
#include "nn/softmax.h"
#include "nn/module.h"
#include "nn/norm.h"

#include "ct_fixture.h"
#include "ct_test.h"

#include <pthread.h>
#include <stdint.h>
#include <time.h>

/* Deterministic U(-bound, bound) test data: one Philox stream per buffer. */
static void fill(float *p, size_t n, float bound, uint32_t stream)
{
    ct_init_uniform(p, n, bound, ct_rng_key(20240612, CT_RNG_INIT), stream);
}

static double *alloc_doubles(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof(double));
    CU_ASSERT_PTR_NOT_NULL_FATAL(p);
    return p;
}

static double *to_double(const float *p, size_t n)
{
    double *d = alloc_doubles(n);
    for (size_t i = 0; i < n; i++)
        d[i] = p[i];
    return d;
}

static void to_float(float *dst, const double *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = (float)src[i];
}

/* ------------------------------------------------------------ finite differences */

/* A scalar loss of the double buffers that ctx points into. */
typedef double (*loss_fn)(void *ctx);

/* fd[i] = (loss(p_i + h) - loss(p_i - h)) / 2h for every element of p, a
 * buffer the loss reads. */
static void fd_grad(float *fd, double *p, size_t n, double h, loss_fn loss, void *ctx)
{
    for (size_t i = 0; i < n; i++) {
        double orig = p[i];
        p[i] = orig + h;
        double Lp = loss(ctx);
        p[i] = orig - h;
        double Lm = loss(ctx);
        p[i] = orig;
        fd[i] = (float)((Lp - Lm) / (2 * h));
    }
}

static double dot(const double *a, const double *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += a[i] * b[i];
    return s;
}

#define FD_STEP 1e-4

/* BatchNorm and LayerNorm forwards against their float64 references: the
 * statistics are exact to double precision, so only the float rounding of
 * ((x - hi) - lo) * scale + shift remains, ~1 ulp of outputs of magnitude
 * <= ~4: atol 2e-7 + rtol 3e-7. This is tight on purpose: it holds on rows
 * and channels sitting at 25..90 only because the mean is subtracted in two
 * float parts (with one, the error is ulp(mean) * invstd, several 1e-6). */
#define OUT_VS_REF_ATOL 2e-7
#define OUT_VS_REF_RTOL 3e-7

/* ------------------------------------------------------------ BatchNorm references */

/* Training-mode BatchNorm in double, two-pass statistics. g, b NULL: 1, 0. */
static void bn_ref(double *y, const double *x, const double *g, const double *b, int B, int C,
                   int S, double eps)
{
    const double n = (double)B * S;
    for (int c = 0; c < C; c++) {
        double mean = 0, var = 0;
        for (int i = 0; i < B; i++)
            for (int s = 0; s < S; s++)
                mean += x[((size_t)i * C + c) * S + s];
        mean /= n;
        for (int i = 0; i < B; i++)
            for (int s = 0; s < S; s++) {
                double d = x[((size_t)i * C + c) * S + s] - mean;
                var += d * d;
            }
        var /= n;
        double is = 1.0 / sqrt(var + eps);
        for (int i = 0; i < B; i++)
            for (int s = 0; s < S; s++) {
                size_t k = ((size_t)i * C + c) * S + s;
                y[k] = (x[k] - mean) * is * (g ? g[c] : 1.0) + (b ? b[c] : 0.0);
            }
    }
}

struct bn_fd {
    double *x, *g, *b, *y;
    const double *R;
    int B, C, S;
};

static double bn_fd_loss(void *ctx)
{
    struct bn_fd *f = ctx;
    bn_ref(f->y, f->x, f->g, f->b, f->B, f->C, f->S, CT_BATCHNORM_EPS);
    return dot(f->y, f->R, (size_t)f->B * f->C * f->S);
}

/* ------------------------------------------------------------ BatchNorm golden */

/* Tolerances against torch, float32 on both sides. Measured: torch's
 * training outputs are within 2.8e-7 (out) and 5e-7 (dx) of float64 (printed
 * by make_fixtures_norm.py), ours within 2.4e-7 (the FD test's reference
 * check), and the two differ by <= 6e-7. Torch's eval form x * a + (beta -
 * rm * a), a = gamma / sqrt(rv + eps), rounds x * a ~ 30 on the channel with
 * mean 20: 1.9e-6 observed. Hence outputs atol 5e-6 + rtol 1e-5. Statistics
 * and running statistics are accumulated in double on both sides and rounded
 * once: rtol 2e-6 (a few ulp) plus atol 1e-6 for values near 0. Gradients:
 * sums of B*S <= 60 products of magnitude ~1 in float: atol 1e-5 + rtol
 * 1e-4 (observed <= 1e-6). A wrong convention (biased vs unbiased running
 * variance: a factor n/(n-1) >= 1.017; momentum applied the other way round;
 * eps outside the sqrt) misses these by orders of magnitude. */
#define BN_OUT_ATOL 5e-6
#define BN_OUT_RTOL 1e-5
#define BN_STAT_ATOL 1e-6
#define BN_STAT_RTOL 2e-6
#define BN_GRAD_ATOL 1e-5
#define BN_GRAD_RTOL 1e-4

static void bn_golden(const char *file, int B, int C, int S)
{
    const size_t n = (size_t)B * C * S;
    struct fx_file f;
    if (fx_open(&f, file))
        return;
    const float *hp = fx_get(&f, "hparams", 2), *x = fx_get(&f, "x", n),
                *w = fx_get(&f, "weight", C), *b = fx_get(&f, "bias", C),
                *rm0 = fx_get(&f, "running_mean0", C), *rv0 = fx_get(&f, "running_var0", C),
                *dout = fx_get(&f, "dout", n), *out_want = fx_get(&f, "out", n),
                *mean_want = fx_get(&f, "save_mean", C),
                *invstd_want = fx_get(&f, "save_invstd", C), *dx_want = fx_get(&f, "dx", n),
                *dw_want = fx_get(&f, "dweight", C), *db_want = fx_get(&f, "dbias", C),
                *rm_want = fx_get(&f, "running_mean", C), *rv_want = fx_get(&f, "running_var", C);
    const struct fx_tensor *txe = fx_find(&f, "x_eval");
    if (!hp || !x || !w || !b || !rm0 || !rv0 || !dout || !out_want || !mean_want ||
        !invstd_want || !dx_want || !dw_want || !db_want || !rm_want || !rv_want || !txe)
        goto done;
    const size_t ne = txe->numel;
    const float *oe_want = fx_get(&f, "out_eval", ne);
    if (!oe_want || ne % ((size_t)C * S) != 0) {
        CU_FAIL("x_eval has the wrong shape");
        goto done;
    }
    const float eps = hp[0], momentum = hp[1];
    CU_ASSERT(fabsf(eps - CT_BATCHNORM_EPS) < 1e-12f);

    float *out = ct_test_floats(n), *dx = ct_test_floats(n), *oe = ct_test_floats(ne);
    float *mean = ct_test_floats(C), *invstd = ct_test_floats(C), *rm = ct_test_floats(C),
          *rv = ct_test_floats(C), *dw = ct_test_floats(C), *db = ct_test_floats(C);
    double *work = alloc_doubles(2 * (size_t)C + 1);
    memcpy(rm, rm0, C * sizeof(float));
    memcpy(rv, rv0, C * sizeof(float));

    char label[96];
#define BN_LABEL(what) (snprintf(label, sizeof label, "%s.%s", file, what), label)
    int rc = ct_batchnorm_forward_train(out, mean, invstd, rm, rv, work, x, w, b, B, C, S, eps,
                                        momentum, NULL, NULL);
    CU_ASSERT_EQUAL(rc, 0);
    check_close(BN_LABEL("out"), out, out_want, n, BN_OUT_ATOL, BN_OUT_RTOL);
    check_close(BN_LABEL("save_mean"), mean, mean_want, C, BN_STAT_ATOL, BN_STAT_RTOL);
    check_close(BN_LABEL("save_invstd"), invstd, invstd_want, C, BN_STAT_ATOL, BN_STAT_RTOL);
    check_close(BN_LABEL("running_mean"), rm, rm_want, C, BN_STAT_ATOL, BN_STAT_RTOL);
    check_close(BN_LABEL("running_var"), rv, rv_want, C, BN_STAT_ATOL, BN_STAT_RTOL);

    /* Backward accumulates into the parameter gradients: start them at 1
     * and subtract it again. */
    for (int c = 0; c < C; c++)
        dw[c] = db[c] = 1.0f;
    rc = ct_batchnorm_backward(dx, dw, db, work, dout, x, w, mean, invstd, B, C, S, NULL, NULL);
    CU_ASSERT_EQUAL(rc, 0);
    for (int c = 0; c < C; c++) {
        dw[c] -= 1.0f;
        db[c] -= 1.0f;
    }
    check_close(BN_LABEL("dx"), dx, dx_want, n, BN_GRAD_ATOL, BN_GRAD_RTOL);
    check_close(BN_LABEL("dweight"), dw, dw_want, C, BN_GRAD_ATOL, BN_GRAD_RTOL);
    check_close(BN_LABEL("dbias"), db, db_want, C, BN_GRAD_ATOL, BN_GRAD_RTOL);

    /* Eval with torch's running statistics after the step (ours are checked
     * above), then in place. */
    ct_batchnorm_forward_eval(oe, txe->data, rm_want, rv_want, w, b, (int)(ne / ((size_t)C * S)),
                              C, S, eps);
    check_close(BN_LABEL("out_eval"), oe, oe_want, ne, BN_OUT_ATOL, BN_OUT_RTOL);
    memcpy(oe, txe->data, ne * sizeof(float));
    ct_batchnorm_forward_eval(oe, oe, rm_want, rv_want, w, b, (int)(ne / ((size_t)C * S)), C, S,
                              eps);
    check_close(BN_LABEL("out_eval_inplace"), oe, oe_want, ne, BN_OUT_ATOL, BN_OUT_RTOL);
#undef BN_LABEL

    free(out);
    free(dx);
    free(oe);
    free(mean);
    free(invstd);
    free(rm);
    free(rv);
    free(dw);
    free(db);
    free(work);
done:
    fx_free(&f);
}

static void test_bn2d_golden(void) { bn_golden("batchnorm2d.ctfx", 4, 3, 15); }
static void test_bn1d_golden(void) { bn_golden("batchnorm1d.ctfx", 8, 5, 1); }

/* ------------------------------------------------------------ BatchNorm finite differences */

/* The loss depends on x through the batch statistics too, so the difference
 * quotient includes the mean and variance terms of the gradient; the test
 * also shows that leaving them out (dx = gamma * invstd * dout) would fail by
 * far more than the tolerance. Kernel error: dinp = g (dy - k1 - xhat k2)
 * with terms ~1, in float: a few 1e-7; the saved float mean/invstd add ~1e-7
 * relative. atol 5e-6 + rtol 1e-4 leaves ~10x margin; the gradients are
 * ~0.01..1 and the terms a mistake would drop are >= 1e-2. With a channel
 * offset, backward's xhat uses the float-rounded saved mean (as torch does):
 * xhat is shifted by up to ulp(mean)/2 * invstd (3.3e-6 at mean 90), which
 * dgamma = sum dy * xhat multiplies by sum |dy| ~ 7: hence grad_atol 3e-5
 * there. */
static void bn_fd_case(const char *label, int B, int C, int S, int affine, float offset)
{
    const double grad_atol = offset != 0.0f ? 3e-5 : 5e-6;
    const size_t n = (size_t)B * C * S;
    float *x = ct_test_floats(n), *R = ct_test_floats(n), *out = ct_test_floats(n),
          *dx = ct_test_floats(n), *fd = ct_test_floats(n), *naive = ct_test_floats(n);
    float g[8], b[8], dg[8], db[8], mean[8], invstd[8], fdg[8], fdb[8];
    CU_ASSERT_FATAL(C <= 8);
    fill(x, n, 2.0f, 10);
    fill(R, n, 1.0f, 11);
    fill(g, C, 1.0f, 12);
    fill(b, C, 1.0f, 13);
    for (size_t i = 0; i < n; i++)
        x[i] += offset * (float)(1 + (i / S) % C); /* channel c sits near offset * (c+1) */
    for (int c = 0; c < C; c++)
        g[c] += 1.5f; /* gamma in [0.5, 2.5]: away from 0 */
    double *work = alloc_doubles(2 * (size_t)C + 1);

    int rc = ct_batchnorm_forward_train(out, mean, invstd, NULL, NULL, work, x, affine ? g : NULL,
                                        affine ? b : NULL, B, C, S, CT_BATCHNORM_EPS,
                                        CT_BATCHNORM_MOMENTUM, NULL, NULL);
    CU_ASSERT_EQUAL(rc, 0);
    memset(dg, 0, sizeof dg);
    memset(db, 0, sizeof db);
    rc = ct_batchnorm_backward(dx, affine ? dg : NULL, affine ? db : NULL, work, R, x,
                               affine ? g : NULL, mean, invstd, B, C, S, NULL, NULL);
    CU_ASSERT_EQUAL(rc, 0);

    struct bn_fd f = {.x = to_double(x, n), .g = affine ? to_double(g, C) : NULL,
                      .b = affine ? to_double(b, C) : NULL, .y = alloc_doubles(n),
                      .R = to_double(R, n), .B = B, .C = C, .S = S};
    char l[96];
    /* The kernel's forward is the function being differentiated. */
    bn_fd_loss(&f);
    float *yref = ct_test_floats(n);
    to_float(yref, f.y, n);
    snprintf(l, sizeof l, "%s.out_vs_ref", label);
    check_close(l, out, yref, n, OUT_VS_REF_ATOL, OUT_VS_REF_RTOL);

    fd_grad(fd, f.x, n, FD_STEP, bn_fd_loss, &f);
    snprintf(l, sizeof l, "%s.dx", label);
    check_close(l, dx, fd, n, grad_atol, 1e-4);
    /* Sensitivity: the gradient without the statistics terms is far off. */
    double far = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (int)((i / S) % C);
        naive[i] = (affine ? g[c] : 1.0f) * invstd[c] * R[i];
        far = fmax(far, fabs((double)naive[i] - fd[i]));
    }
    CU_ASSERT(far > 1e-2);
    if (affine) {
        fd_grad(fdg, f.g, C, FD_STEP, bn_fd_loss, &f);
        fd_grad(fdb, f.b, C, FD_STEP, bn_fd_loss, &f);
        snprintf(l, sizeof l, "%s.dgamma", label);
        check_close(l, dg, fdg, C, grad_atol, 1e-4);
        snprintf(l, sizeof l, "%s.dbeta", label);
        check_close(l, db, fdb, C, grad_atol, 1e-4);
    }
    free(f.x);
    free(f.g);
    free(f.b);
    free(f.y);
    free((double *)f.R);
    free(x);
    free(R);
    free(out);
    free(dx);
    free(fd);
    free(naive);
    free(yref);
    free(work);
}

static void test_bn_fd(void)
{
    bn_fd_case("fd.bn2d", 3, 2, 5, 1, 0.0f);
    bn_fd_case("fd.bn2d_offset", 2, 3, 7, 1, 30.0f); /* channel means 30, 60, 90 */
    bn_fd_case("fd.bn1d", 6, 3, 1, 1, 0.0f);
    bn_fd_case("fd.bn2d_noaffine", 2, 2, 6, 0, 0.0f);
    bn_fd_case("fd.bn1d_tiny_batch", 2, 4, 1, 1, 0.0f); /* n = 2: xhat = +-1 */
}

/* Fewer than 2 values per channel: refused (as torch does), nothing written. */
static void test_bn_too_small(void)
{
    enum { C = 3 };
    float x[C] = {1, 2, 3}, out[C], mean[C], invstd[C], rm[C], rv[C];
    double work[2 * C + 1];
    for (int c = 0; c < C; c++)
        out[c] = mean[c] = invstd[c] = rm[c] = rv[c] = -7.0f;
    ct_error_clear();
    int rc = ct_batchnorm_forward_train(out, mean, invstd, rm, rv, work, x, NULL, NULL, 1, C, 1,
                                        CT_BATCHNORM_EPS, CT_BATCHNORM_MOMENTUM, NULL, NULL);
    CU_ASSERT_EQUAL(rc, CT_EINVAL);
    CU_ASSERT(strstr(ct_error_message(), "more than 1 value") != NULL);
    for (int c = 0; c < C; c++)
        CU_ASSERT(out[c] == -7.0f && mean[c] == -7.0f && invstd[c] == -7.0f && rm[c] == -7.0f &&
                  rv[c] == -7.0f);
    /* One sample of S = 2 values is enough (BatchNorm2d on a 1x2 image). */
    float x2[2 * C] = {1, 2, 3, 5, 8, 13}, out2[2 * C];
    rc = ct_batchnorm_forward_train(out2, mean, invstd, rm, rv, work, x2, NULL, NULL, 1, C, 2,
                                    CT_BATCHNORM_EPS, CT_BATCHNORM_MOMENTUM, NULL, NULL);
    CU_ASSERT_EQUAL(rc, 0);
    /* Two values a, b: xhat = -+1 (up to eps); running var: 0.9*(-7) + 0.1*(a-b)^2/2. */
    CU_ASSERT(fabsf(out2[0] + 1.0f) < 1e-4f && fabsf(out2[1] - 1.0f) < 1e-4f);
    CU_ASSERT(fabsf(rv[0] - (0.9f * -7.0f + 0.1f * 0.5f)) < 1e-5f);
    CU_ASSERT(fabsf(rm[2] - (0.9f * -7.0f + 0.1f * 10.5f)) < 1e-5f);
}

/* ------------------------------------------------------------ SyncBatchNorm simulation */

/* R ranks as R threads. The loopback allreduce is a real collective over
 * shared memory: every rank posts its buffer, a barrier, every rank sums all
 * buffers in rank order into a private copy (so all get the same bits, as
 * MPI_Allreduce gives), a barrier (nobody overwrites a buffer another is
 * still reading), copy back. The barrier gives up after 10 s and then fails
 * every later wait at once: a kernel that leaves a rank out of a collective
 * (a real run would hang) makes the test fail instead of hang. CUnit is not
 * thread-safe: the threads only record, the main thread asserts. */
enum { SIM_MAX_RANKS = 8, SIM_TIMEOUT_S = 10 };

struct loopback {
    int R;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting;        /* ranks in the current barrier */
    unsigned long gen;  /* barrier generation */
    int broken;         /* a wait timed out: the collective is dead */
    double *slot[SIM_MAX_RANKS];
    size_t n[SIM_MAX_RANKS];
};

static void loopback_init(struct loopback *lb, int R)
{
    memset(lb, 0, sizeof *lb);
    lb->R = R;
    pthread_mutex_init(&lb->mu, NULL);
    pthread_cond_init(&lb->cv, NULL);
}

static void loopback_destroy(struct loopback *lb)
{
    pthread_mutex_destroy(&lb->mu);
    pthread_cond_destroy(&lb->cv);
}

/* 0 when all R ranks arrived; -1 on timeout (or an earlier one). */
static int loopback_barrier(struct loopback *lb)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += SIM_TIMEOUT_S;
    pthread_mutex_lock(&lb->mu);
    unsigned long gen = lb->gen;
    if (++lb->waiting == lb->R) {
        lb->waiting = 0;
        lb->gen++;
        pthread_cond_broadcast(&lb->cv);
    }
    while (lb->gen == gen && !lb->broken)
        if (pthread_cond_timedwait(&lb->cv, &lb->mu, &until) != 0) {
            lb->broken = 1;
            pthread_cond_broadcast(&lb->cv);
        }
    int rc = lb->gen == gen ? -1 : 0;
    pthread_mutex_unlock(&lb->mu);
    return rc;
}

struct sim_rank {
    struct loopback *lb;
    int rank;
    int calls;       /* allreduce calls made */
    size_t bad_n;    /* a call whose n differed from 2C+1 or from another rank's (0: none) */
    int timed_out;   /* a barrier gave up */
    int B, C, S;
    const float *x, *dout, *gamma, *beta; /* (B, C, S), (C) */
    float *out, *dx;                      /* (B, C, S) */
    float *mean, *invstd, *rm, *rv;       /* (C) */
    float *dgamma, *dbeta;                /* (C) */
    double *work;                         /* (2C+1) */
    int rc_fwd, rc_bwd;
};

static int loopback_sum(void *ctx, double *buf, size_t n)
{
    struct sim_rank *me = ctx;
    struct loopback *lb = me->lb;
    me->calls++;
    if (n != 2 * (size_t)me->C + 1)
        me->bad_n = n;
    lb->slot[me->rank] = buf;
    lb->n[me->rank] = n;
    if (loopback_barrier(lb) != 0) {
        me->timed_out = 1;
        return CT_EMPI;
    }
    double *acc = malloc(n * sizeof(double));
    if (!acc)
        abort();
    for (int r = 0; r < lb->R; r++)
        if (lb->n[r] != n)
            me->bad_n = n;
    for (size_t i = 0; i < n; i++) {
        double s = 0;
        for (int r = 0; r < lb->R; r++)
            s += lb->n[r] == n ? lb->slot[r][i] : 0.0;
        acc[i] = s;
    }
    int rc = loopback_barrier(lb);
    if (rc == 0)
        memcpy(buf, acc, n * sizeof(double));
    else
        me->timed_out = 1;
    free(acc);
    return rc ? CT_EMPI : me->bad_n ? CT_EMISMATCH : 0;
}

static void *sim_rank_main(void *arg)
{
    struct sim_rank *r = arg;
    r->rc_fwd = ct_batchnorm_forward_train(r->out, r->mean, r->invstd, r->rm, r->rv, r->work, r->x,
                                           r->gamma, r->beta, r->B, r->C, r->S, CT_BATCHNORM_EPS,
                                           CT_BATCHNORM_MOMENTUM, loopback_sum, r);
    if (r->rc_fwd == 0)
        r->rc_bwd = ct_batchnorm_backward(r->dx, r->dgamma, r->dbeta, r->work, r->dout, r->x,
                                          r->gamma, r->mean, r->invstd, r->B, r->C, r->S,
                                          loopback_sum, r);
    return NULL;
}

/* The sync result of ranks holding rows [start_r, start_r + rows[r]) equals a
 * single-rank call over all B rows: outputs and input gradients row for row,
 * statistics and running statistics on every rank, parameter gradients
 * summed over ranks (as the gradient allreduce that follows will do). The
 * sync path combines sums of x and x^2 where the local one uses M2: the
 * statistics may differ in the last float bit, so out and dx (~1..3) differ
 * by a few 1e-7: atol 2e-6. Across ranks, statistics must agree bit for bit. */
static void sync_case(const char *label, const int *rows, int R, int use_offset)
{
    enum { C = 3, S = 6 };
    int B = 0;
    for (int r = 0; r < R; r++)
        B += rows[r];
    const size_t per = (size_t)C * S, n = (size_t)B * per;
    float *x = ct_test_floats(n), *dout = ct_test_floats(n), *out = ct_test_floats(n),
          *dx = ct_test_floats(n), *sout = ct_test_floats(n), *sdx = ct_test_floats(n);
    float g[C], be[C], mean[C], invstd[C], rm[C], rv[C], dg[C], db[C];
    fill(x, n, 2.0f, 20);
    fill(dout, n, 1.0f, 21);
    fill(g, C, 0.5f, 22);
    fill(be, C, 1.0f, 23);
    for (int c = 0; c < C; c++) {
        g[c] += 1.0f;
        rm[c] = 0.25f * c;
        rv[c] = 1.0f + 0.5f * c;
        dg[c] = db[c] = 0;
    }
    if (use_offset)
        for (size_t i = 0; i < n; i++)
            x[i] += 20.0f * (float)((i / S) % C);
    double work[2 * C + 1];

    /* The reference: one rank, the whole batch. */
    float rm_ref[C], rv_ref[C];
    memcpy(rm_ref, rm, sizeof rm);
    memcpy(rv_ref, rv, sizeof rv);
    CU_ASSERT_EQUAL(ct_batchnorm_forward_train(out, mean, invstd, rm_ref, rv_ref, work, x, g, be, B,
                                               C, S, CT_BATCHNORM_EPS, CT_BATCHNORM_MOMENTUM, NULL,
                                               NULL),
                    0);
    CU_ASSERT_EQUAL(ct_batchnorm_backward(dx, dg, db, work, dout, x, g, mean, invstd, B, C, S,
                                          NULL, NULL),
                    0);

    struct loopback lb;
    struct sim_rank rk[SIM_MAX_RANKS];
    pthread_t th[SIM_MAX_RANKS];
    float st[SIM_MAX_RANKS][6][C]; /* per rank: mean, invstd, rm, rv, dgamma, dbeta */
    double wk[SIM_MAX_RANKS][2 * C + 1];
    CU_ASSERT_FATAL(R <= SIM_MAX_RANKS);
    loopback_init(&lb, R);
    size_t start = 0;
    for (int r = 0; r < R; r++) {
        rk[r] = (struct sim_rank){.lb = &lb, .rank = r, .B = rows[r], .C = C, .S = S,
                                  .x = x + start, .dout = dout + start, .gamma = g, .beta = be,
                                  .out = sout + start, .dx = sdx + start, .mean = st[r][0],
                                  .invstd = st[r][1], .rm = st[r][2], .rv = st[r][3],
                                  .dgamma = st[r][4], .dbeta = st[r][5], .work = wk[r]};
        memcpy(st[r][2], rm, sizeof rm);
        memcpy(st[r][3], rv, sizeof rv);
        memset(st[r][4], 0, 2 * sizeof st[r][4]);
        start += (size_t)rows[r] * per;
    }
    for (int r = 0; r < R; r++)
        CU_ASSERT_FATAL(pthread_create(&th[r], NULL, sim_rank_main, &rk[r]) == 0);
    for (int r = 0; r < R; r++)
        pthread_join(th[r], NULL);
    loopback_destroy(&lb);

    char l[96];
    float dg_sum[C] = {0}, db_sum[C] = {0};
    for (int r = 0; r < R; r++) {
        CU_ASSERT_EQUAL(rk[r].rc_fwd, 0);
        CU_ASSERT_EQUAL(rk[r].rc_bwd, 0);
        CU_ASSERT_EQUAL(rk[r].calls, 2); /* one allreduce in forward, one in backward */
        CU_ASSERT_EQUAL(rk[r].bad_n, 0);
        CU_ASSERT_EQUAL(rk[r].timed_out, 0);
        for (int k = 0; k < 4; k++)
            CU_ASSERT(memcmp(st[r][k], st[0][k], sizeof st[0][k]) == 0);
        for (int c = 0; c < C; c++) {
            dg_sum[c] += st[r][4][c];
            db_sum[c] += st[r][5][c];
        }
    }
    snprintf(l, sizeof l, "%s.out", label);
    check_close(l, sout, out, n, 2e-6, 1e-6);
    snprintf(l, sizeof l, "%s.dx", label);
    check_close(l, sdx, dx, n, 2e-6, 1e-5);
    snprintf(l, sizeof l, "%s.save_mean", label);
    check_close(l, st[0][0], mean, C, 1e-6, 1e-6);
    snprintf(l, sizeof l, "%s.save_invstd", label);
    check_close(l, st[0][1], invstd, C, 1e-6, 1e-6);
    snprintf(l, sizeof l, "%s.running_mean", label);
    check_close(l, st[0][2], rm_ref, C, 1e-6, 1e-6);
    snprintf(l, sizeof l, "%s.running_var", label);
    check_close(l, st[0][3], rv_ref, C, 1e-6, 1e-6);
    /* Parameter gradients: each rank's own sums; they add up to the whole. */
    snprintf(l, sizeof l, "%s.dgamma_sum", label);
    check_close(l, dg_sum, dg, C, 1e-5, 1e-5);
    snprintf(l, sizeof l, "%s.dbeta_sum", label);
    check_close(l, db_sum, db, C, 1e-5, 1e-5);

    /* The control: without the callback, a rank's slice is normalised with
     * its own statistics and its rows come out different (this is what the
     * comparisons above would see if the kernel ignored the callback). */
    if (R > 1 && rows[0] >= 2) {
        float lm[C], li[C];
        CU_ASSERT_EQUAL(ct_batchnorm_forward_train(sout, lm, li, NULL, NULL, work, x, g, be,
                                                   rows[0], C, S, CT_BATCHNORM_EPS,
                                                   CT_BATCHNORM_MOMENTUM, NULL, NULL),
                        0);
        double d = 0;
        for (size_t i = 0; i < (size_t)rows[0] * per; i++)
            d = fmax(d, fabs((double)sout[i] - out[i]));
        CU_ASSERT(d > 1e-2);
    }
    free(x);
    free(dout);
    free(out);
    free(dx);
    free(sout);
    free(sdx);
}

/* Statistics of channels far from 0, against two-pass float64: the local
 * path's shifted sums keep the variance exact even at 2e5 standard
 * deviations from 0 (mean 1e4, std 0.05; the naive sum(x^2)/n - mean^2
 * would lose ~4e-6 of it in double), and the sync path (which must combine
 * plain sums) holds its documented bound at 1e4 standard deviations (mean
 * 1000, std 0.1: mean^2/var = 1e8, so ~1e-8). rtol 3e-7 is ~2 ulp of invstd. */
static void test_bn_far_from_zero(void)
{
    enum { B = 16, C = 2, S = 9, NN = B * C * S };
    static const double loc[C] = {1e4, 1e3}, spread[C] = {0.05, 0.1};
    float x[NN], out[NN], mean[C], invstd[C], want[C];
    double work[2 * C + 1];
    fill(x, NN, 1.0f, 70);
    for (int i = 0; i < NN; i++) {
        int c = (i / S) % C;
        x[i] = (float)(loc[c] + spread[c] * 1.7 * x[i]); /* U(-1,1) * 1.7: std ~1 * spread */
    }
    for (int c = 0; c < C; c++) {
        double m = 0, v = 0;
        for (int i = 0; i < NN; i++)
            if ((i / S) % C == c)
                m += x[i];
        m /= B * S;
        for (int i = 0; i < NN; i++)
            if ((i / S) % C == c)
                v += (x[i] - m) * (x[i] - m);
        want[c] = (float)(1.0 / sqrt(v / (B * S) + CT_BATCHNORM_EPS));
    }
    CU_ASSERT_EQUAL(ct_batchnorm_forward_train(out, mean, invstd, NULL, NULL, work, x, NULL, NULL,
                                               B, C, S, CT_BATCHNORM_EPS, CT_BATCHNORM_MOMENTUM,
                                               NULL, NULL),
                    0);
    check_close("far.local.invstd", invstd, want, C, 0, 3e-7);
    /* Sync path, one rank (the loopback sums one buffer): channel 1 only. */
    struct loopback lb;
    loopback_init(&lb, 1);
    struct sim_rank rk = {.lb = &lb, .C = C};
    CU_ASSERT_EQUAL(ct_batchnorm_forward_train(out, mean, invstd, NULL, NULL, work, x, NULL, NULL,
                                               B, C, S, CT_BATCHNORM_EPS, CT_BATCHNORM_MOMENTUM,
                                               loopback_sum, &rk),
                    0);
    loopback_destroy(&lb);
    check_close("far.sync.invstd[1]", invstd + 1, want + 1, 1, 0, 3e-7);
}

static void test_bn_sync(void)
{
    static const int r1[] = {10}, r2[] = {6, 4}, r3[] = {4, 3, 3}, r4[] = {3, 0, 4, 3},
                     r8[] = {1, 1, 1, 1, 2, 1, 1, 2};
    sync_case("sync.R1", r1, 1, 0);
    sync_case("sync.R2", r2, 2, 0);
    sync_case("sync.R3", r3, 3, 1);
    sync_case("sync.R4_empty_rank", r4, 4, 0); /* a rank with no rows still takes part */
    sync_case("sync.R8_offset", r8, 8, 1);     /* single-row ranks, channel means 0..40 */
}

/* Under 2 values per channel globally: every rank is refused alike, after
 * the one collective (so nobody waits in it). */
static void test_bn_sync_too_small(void)
{
    enum { C = 2 };
    float x[C] = {1, 2};
    struct loopback lb;
    struct sim_rank rk[2];
    pthread_t th[2];
    float buf[2][8][C];
    double wk[2][2 * C + 1];
    loopback_init(&lb, 2);
    for (int r = 0; r < 2; r++) {
        rk[r] = (struct sim_rank){.lb = &lb, .rank = r, .B = r == 0 ? 1 : 0, .C = C, .S = 1,
                                  .x = x, .dout = x, .out = buf[r][0], .dx = buf[r][1],
                                  .mean = buf[r][2], .invstd = buf[r][3], .rm = buf[r][4],
                                  .rv = buf[r][5], .dgamma = buf[r][6], .dbeta = buf[r][7],
                                  .work = wk[r]};
        memset(buf[r], 0, sizeof buf[r]);
    }
    for (int r = 0; r < 2; r++)
        CU_ASSERT_FATAL(pthread_create(&th[r], NULL, sim_rank_main, &rk[r]) == 0);
    for (int r = 0; r < 2; r++)
        pthread_join(th[r], NULL);
    loopback_destroy(&lb);
    for (int r = 0; r < 2; r++) {
        CU_ASSERT_EQUAL(rk[r].rc_fwd, CT_EINVAL);
        CU_ASSERT_EQUAL(rk[r].calls, 1);
        CU_ASSERT_EQUAL(rk[r].timed_out, 0);
    }
}

/* A failing collective: the error comes back and nothing is written. */
static int failing_allreduce(void *ctx, double *buf, size_t n)
{
    (void)buf;
    (void)n;
    ++*(int *)ctx;
    return CT_EMPI;
}

static void test_bn_sync_error(void)
{
    enum { B = 4, C = 2, S = 3, NN = B * C * S };
    float x[NN], dout[NN], out[NN], dx[NN], mean[C], invstd[C], rm[C], rv[C];
    double work[2 * C + 1];
    fill(x, NN, 1.0f, 30);
    fill(dout, NN, 1.0f, 31);
    for (int i = 0; i < NN; i++)
        out[i] = dx[i] = 42.0f;
    for (int c = 0; c < C; c++)
        mean[c] = invstd[c] = rm[c] = rv[c] = 42.0f;
    int calls = 0;
    int rc = ct_batchnorm_forward_train(out, mean, invstd, rm, rv, work, x, NULL, NULL, B, C, S,
                                        CT_BATCHNORM_EPS, CT_BATCHNORM_MOMENTUM, failing_allreduce,
                                        &calls);
    CU_ASSERT_EQUAL(rc, CT_EMPI);
    CU_ASSERT_EQUAL(calls, 1);
    for (int i = 0; i < NN; i++)
        CU_ASSERT(out[i] == 42.0f);
    for (int c = 0; c < C; c++)
        CU_ASSERT(mean[c] == 42.0f && invstd[c] == 42.0f && rm[c] == 42.0f && rv[c] == 42.0f);
    for (int c = 0; c < C; c++) {
        mean[c] = 0.0f;
        invstd[c] = 1.0f;
    }
    rc = ct_batchnorm_backward(dx, NULL, NULL, work, dout, x, NULL, mean, invstd, B, C, S,
                               failing_allreduce, &calls);
    CU_ASSERT_EQUAL(rc, CT_EMPI);
    CU_ASSERT_EQUAL(calls, 2);
    for (int i = 0; i < NN; i++)
        CU_ASSERT(dx[i] == 42.0f);
    /* dinp NULL: no input gradient, hence no collective. */
    float dg[C] = {0}, db[C] = {0};
    rc = ct_batchnorm_backward(NULL, dg, db, work, dout, x, NULL, mean, invstd, B, C, S,
                               failing_allreduce, &calls);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(calls, 2);
}

/* ------------------------------------------------------------ LayerNorm */

static void ln_ref(double *y, const double *x, const double *w, const double *b, int N, int D,
                   double eps)
{
    for (int r = 0; r < N; r++) {
        const double *xr = x + (size_t)r * D;
        double mean = 0, var = 0;
        for (int i = 0; i < D; i++)
            mean += xr[i];
        mean /= D;
        for (int i = 0; i < D; i++)
            var += (xr[i] - mean) * (xr[i] - mean);
        var /= D;
        double rs = 1.0 / sqrt(var + eps);
        for (int i = 0; i < D; i++)
            y[(size_t)r * D + i] = (xr[i] - mean) * rs * (w ? w[i] : 1.0) + (b ? b[i] : 0.0);
    }
}

struct ln_fd {
    double *x, *w, *b, *y;
    const double *R;
    int N, D;
};

static double ln_fd_loss(void *ctx)
{
    struct ln_fd *f = ctx;
    ln_ref(f->y, f->x, f->w, f->b, f->N, f->D, CT_LAYERNORM_EPS);
    return dot(f->y, f->R, (size_t)f->N * f->D);
}

/* Against torch: one row sits at 50 with spread 0.2, one has a variance
 * (~1e-6) below eps. Torch's float32 result is itself off on the row at 50:
 * 3.2e-6 in out and 1.3e-5 in dx against torch in float64 (measured when
 * the fixture was made), while ours stays ~1e-7 there (the float64
 * reference check in the FD test holds us to that), so the differences seen
 * here are torch's rounding. out: atol 1e-5 (3x); mean: ~1 ulp; rstd: the
 * near-eps row's is ~311, its rounding is relative (rtol 2e-6). dx: ~1..630
 * (the near-eps row scales with rstd), dweight: sums of 6 terms ~1; atol 5e-5
 * + rtol 1e-4 covers torch's 1.3e-5 with margin. A wrong eps placement,
 * unbiased variance (x 10/9) or missing term misses by >= 1e-2. */
static void test_ln_golden(void)
{
    enum { N = 6, D = 10, ND = N * D };
    struct fx_file f;
    if (fx_open(&f, "layernorm.ctfx"))
        return;
    const float *hp = fx_get(&f, "hparams", 1), *x = fx_get(&f, "x", ND),
                *w = fx_get(&f, "weight", D), *b = fx_get(&f, "bias", D),
                *dout = fx_get(&f, "dout", ND), *out_want = fx_get(&f, "out", ND),
                *mean_want = fx_get(&f, "mean", N), *rstd_want = fx_get(&f, "rstd", N),
                *dx_want = fx_get(&f, "dx", ND), *dw_want = fx_get(&f, "dweight", D),
                *db_want = fx_get(&f, "dbias", D);
    if (!hp || !x || !w || !b || !dout || !out_want || !mean_want || !rstd_want || !dx_want ||
        !dw_want || !db_want)
        goto done;
    CU_ASSERT(fabsf(hp[0] - CT_LAYERNORM_EPS) < 1e-12f);
    float out[ND], mean[N], rstd[N], dx[ND], dw[D], db[D];
    ct_layernorm_forward(out, mean, rstd, x, w, b, N, D, hp[0]);
    check_close("layernorm.out", out, out_want, ND, 1e-5, 1e-6);
    check_close("layernorm.mean", mean, mean_want, N, 1e-6, 2e-6);
    check_close("layernorm.rstd", rstd, rstd_want, N, 1e-6, 2e-6);
    memset(dw, 0, sizeof dw);
    memset(db, 0, sizeof db);
    ct_layernorm_backward(dx, dw, db, dout, x, w, mean, rstd, N, D);
    check_close("layernorm.dx", dx, dx_want, ND, 5e-5, 1e-4);
    check_close("layernorm.dweight", dw, dw_want, D, 5e-5, 1e-4);
    check_close("layernorm.dbias", db, db_want, D, 1e-5, 1e-5);
    /* In place, without saving the statistics (eval). */
    float y[ND];
    memcpy(y, x, sizeof y);
    ct_layernorm_forward(y, NULL, NULL, y, w, b, N, D, hp[0]);
    check_close("layernorm.out_inplace", y, out, ND, 0, 0);
done:
    fx_free(&f);
}

/* Same error budget as the BatchNorm FD test (rows of D terms of ~1),
 * including the float-rounded saved mean on offset rows. */
static void ln_fd_case(const char *label, int N, int D, int affine, float offset)
{
    const double grad_atol = offset != 0.0f ? 2e-5 : 5e-6;
    const size_t n = (size_t)N * D;
    float *x = ct_test_floats(n), *R = ct_test_floats(n), *out = ct_test_floats(n),
          *dx = ct_test_floats(n), *fd = ct_test_floats(n), *yref = ct_test_floats(n);
    float w[16], b[16], dw[16], db[16], fdw[16], fdb[16], mean[16], rstd[16];
    CU_ASSERT_FATAL(D <= 16 && N <= 16);
    fill(x, n, 2.0f, 40);
    fill(R, n, 1.0f, 41);
    fill(w, D, 1.0f, 42);
    fill(b, D, 1.0f, 43);
    for (size_t i = 0; i < n; i++)
        x[i] += offset * (float)(i / D);
    ct_layernorm_forward(out, mean, rstd, x, affine ? w : NULL, affine ? b : NULL, N, D,
                         CT_LAYERNORM_EPS);
    memset(dw, 0, sizeof dw);
    memset(db, 0, sizeof db);
    ct_layernorm_backward(dx, affine ? dw : NULL, affine ? db : NULL, R, x, affine ? w : NULL,
                          mean, rstd, N, D);
    struct ln_fd f = {.x = to_double(x, n), .w = affine ? to_double(w, D) : NULL,
                      .b = affine ? to_double(b, D) : NULL, .y = alloc_doubles(n),
                      .R = to_double(R, n), .N = N, .D = D};
    char l[96];
    ln_fd_loss(&f);
    to_float(yref, f.y, n);
    snprintf(l, sizeof l, "%s.out_vs_ref", label);
    check_close(l, out, yref, n, OUT_VS_REF_ATOL, OUT_VS_REF_RTOL);
    fd_grad(fd, f.x, n, FD_STEP, ln_fd_loss, &f);
    snprintf(l, sizeof l, "%s.dx", label);
    check_close(l, dx, fd, n, grad_atol, 1e-4);
    if (affine) {
        fd_grad(fdw, f.w, D, FD_STEP, ln_fd_loss, &f);
        fd_grad(fdb, f.b, D, FD_STEP, ln_fd_loss, &f);
        snprintf(l, sizeof l, "%s.dweight", label);
        check_close(l, dw, fdw, D, grad_atol, 1e-4);
        snprintf(l, sizeof l, "%s.dbias", label);
        check_close(l, db, fdb, D, grad_atol, 1e-4);
    }
    free(f.x);
    free(f.w);
    free(f.b);
    free(f.y);
    free((double *)f.R);
    free(x);
    free(R);
    free(out);
    free(dx);
    free(fd);
    free(yref);
}

static void test_ln_fd(void)
{
    ln_fd_case("fd.layernorm", 4, 7, 1, 0.0f);
    ln_fd_case("fd.layernorm_offset", 3, 16, 1, 25.0f); /* rows near 0, 25, 50 */
    ln_fd_case("fd.layernorm_noaffine", 5, 5, 0, 0.0f);
    ln_fd_case("fd.layernorm_D2", 3, 2, 1, 0.0f);
}

/* ------------------------------------------------------------ GELU */

static double gelu_ref(double x, enum ct_gelu_approx a)
{
    /* 0.5 x (1 + tanh(u)) written as x / (1 + exp(-2u)): the same function,
     * without the cancellation that would make double lose all digits of
     * the tiny outputs at x < -6. */
    if (a == CT_GELU_APPROX_TANH)
        return x / (1.0 + exp(-2.0 * sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    return 0.5 * x * erfc(-x / sqrt(2.0));
}

/* Against torch: outputs up to 9, float on both sides with erf/tanh to a few
 * ulp: rtol 1e-6 plus atol 1e-6 (torch's 0.5x(1+erf) cancels for x << 0 and
 * is off by up to ~|x| * 6e-8 absolute there). Gradients: ~1, the same
 * budget. A wrong constant (sqrt(2/pi), 0.044715) or the other
 * approximation differs by >= 1e-4 on the fixture's range. */
static void test_gelu_golden(void)
{
    struct fx_file f;
    if (fx_open(&f, "gelu.ctfx"))
        return;
    const struct fx_tensor *tx = fx_find(&f, "x");
    if (!tx)
        goto done;
    const size_t n = tx->numel;
    float *out = ct_test_floats(n), *dx = ct_test_floats(n);
    const float *dout = fx_get(&f, "dout", n);
    static const char *const kinds[] = {"none", "tanh"};
    for (int k = 0; k < 2 && dout; k++) {
        char key[32], l[48];
        snprintf(key, sizeof key, "%s.out", kinds[k]);
        const float *ow = fx_get(&f, key, n);
        snprintf(key, sizeof key, "%s.dx", kinds[k]);
        const float *dw = fx_get(&f, key, n);
        if (!ow || !dw)
            continue;
        enum ct_gelu_approx a = k ? CT_GELU_APPROX_TANH : CT_GELU_APPROX_NONE;
        ct_gelu_forward(out, tx->data, n, a);
        snprintf(l, sizeof l, "gelu.%s.out", kinds[k]);
        check_close(l, out, ow, n, 1e-6, 1e-6);
        ct_gelu_backward(dx, dout, tx->data, n, a);
        snprintf(l, sizeof l, "gelu.%s.dx", kinds[k]);
        check_close(l, dx, dw, n, 1e-6, 1e-5);
        /* The other approximation must not pass: the test can tell them apart. */
        ct_gelu_forward(out, tx->data, n, k ? CT_GELU_APPROX_NONE : CT_GELU_APPROX_TANH);
        double far = 0;
        for (size_t i = 0; i < n; i++)
            far = fmax(far, fabs((double)out[i] - ow[i]));
        CU_ASSERT(far > 1e-4);
    }
    free(out);
    free(dx);
done:
    fx_free(&f);
}

struct gelu_fd {
    double *x, *y;
    const double *R;
    size_t n;
    enum ct_gelu_approx a;
};

static double gelu_fd_loss(void *ctx)
{
    struct gelu_fd *f = ctx;
    for (size_t i = 0; i < f->n; i++)
        f->y[i] = gelu_ref(f->x[i], f->a);
    return dot(f->y, f->R, f->n);
}

/* Gradients ~1 computed in float (erfc/exp/tanh to ~2 ulp): atol 1e-6 +
 * rtol 1e-5; the forward against float64: the same. */
static void test_gelu_fd(void)
{
    enum { N = 64 };
    float x[N], R[N], out[N], dx[N], fd[N], yref[N];
    fill(x, N, 6.0f, 50);
    fill(R, N, 1.0f, 51);
    x[0] = 0.0f;
    x[1] = -0.5f;
    x[2] = 0.5f;
    for (int k = 0; k < 2; k++) {
        enum ct_gelu_approx a = k ? CT_GELU_APPROX_TANH : CT_GELU_APPROX_NONE;
        struct gelu_fd f = {.x = to_double(x, N), .y = alloc_doubles(N), .R = to_double(R, N),
                            .n = N, .a = a};
        ct_gelu_forward(out, x, N, a);
        ct_gelu_backward(dx, R, x, N, a);
        gelu_fd_loss(&f);
        to_float(yref, f.y, N);
        check_close(k ? "fd.gelu_tanh.out_vs_ref" : "fd.gelu.out_vs_ref", out, yref, N, 1e-6,
                    1e-6);
        fd_grad(fd, f.x, N, FD_STEP, gelu_fd_loss, &f);
        check_close(k ? "fd.gelu_tanh.dx" : "fd.gelu.dx", dx, fd, N, 1e-6, 1e-5);
        free(f.x);
        free(f.y);
        free((double *)f.R);
    }
}

/* A dense sweep of x in [-16, 16] (and exactly the tails beyond) against
 * float64: GELU is computed without libm (an inline exp and a polynomial
 * erfc, see gelu.c), so every region of those approximations is checked,
 * not just the fixture's 64 points. The bound is relative where the value is
 * not tiny: 2e-6 |ref| + 1e-7 absolute covers the float rounding of x^2/2 in
 * exp(-x^2/2) (relative error ~x^2/2 * 6e-8, 4e-6 at x = -8, where
 * gelu(x) ~ 1e-14, hence the absolute part) and ~1e-7 elsewhere. The
 * derivatives are ~1, bound 1e-6 |ref| + 2e-7. */
static void test_gelu_sweep(void)
{
    enum { N = 64001 };
    float *x = ct_test_floats(N), *y = ct_test_floats(N), *d = ct_test_floats(N),
          *one = ct_test_floats(N), *yr = ct_test_floats(N), *dr = ct_test_floats(N);
    for (int i = 0; i < N; i++) {
        x[i] = -16.0f + 32.0f * (float)i / (N - 1);
        one[i] = 1.0f;
    }
    for (int k = 0; k < 2; k++) {
        enum ct_gelu_approx a = k ? CT_GELU_APPROX_TANH : CT_GELU_APPROX_NONE;
        ct_gelu_forward(y, x, N, a);
        ct_gelu_backward(d, one, x, N, a);
        for (int i = 0; i < N; i++) {
            double xd = x[i], h = 1e-6 * fmax(1.0, fabs(xd));
            yr[i] = (float)gelu_ref(xd, a);
            dr[i] = (float)((gelu_ref(xd + h, a) - gelu_ref(xd - h, a)) / (2 * h));
        }
        check_close(k ? "sweep.gelu_tanh.out" : "sweep.gelu.out", y, yr, N, 1e-7, 2e-6);
        check_close(k ? "sweep.gelu_tanh.dx" : "sweep.gelu.dx", d, dr, N, 2e-7, 1e-6);
    }
    free(x);
    free(y);
    free(d);
    free(one);
    free(yr);
    free(dr);
}

/* Far tails: finite, the right limits, and for the exact form full relative
 * precision of the tiny negative outputs (erfc, not 1 + erf). */
static void test_gelu_tails(void)
{
    float x[6] = {-40.0f, -12.0f, -6.0f, 6.0f, 12.0f, 40.0f}, y[6], d[6],
          one[6] = {1, 1, 1, 1, 1, 1};
    for (int k = 0; k < 2; k++) {
        enum ct_gelu_approx a = k ? CT_GELU_APPROX_TANH : CT_GELU_APPROX_NONE;
        ct_gelu_forward(y, x, 6, a);
        ct_gelu_backward(d, one, x, 6, a);
        for (int i = 0; i < 6; i++) {
            CU_ASSERT(isfinite(y[i]) && isfinite(d[i]));
            if (x[i] > 0) {
                CU_ASSERT(y[i] == x[i] || fabsf(y[i] - x[i]) <= 1e-6f * x[i]);
                CU_ASSERT(fabsf(d[i] - 1.0f) < 1e-6f);
            } else {
                CU_ASSERT(y[i] <= 0.0f && y[i] > -1e-6f);
                CU_ASSERT(fabsf(d[i]) < 1e-6f);
            }
        }
    }
    /* gelu(-6) = -6 Phi(-6) = -5.9196e-9: relative precision, not just absolute. */
    ct_gelu_forward(y, x, 6, CT_GELU_APPROX_NONE);
    check_scalar("gelu(-6) relative", y[2] / gelu_ref(-6.0, CT_GELU_APPROX_NONE), 1.0, 1e-5, 0);
}

/* ------------------------------------------------------------ Softmax */

/* Against torch: probabilities in [0, 1] to a few float ulp on both sides
 * (exp to ~1 ulp, one division or reciprocal): atol 1e-7 + rtol 1e-5 keeps
 * small probabilities honest too. Gradients ~1: atol 1e-6 + rtol 1e-5. A
 * non-stable implementation gives NaN on row 1 (exp(80) overflows). */
static void test_softmax_golden(void)
{
    enum { N = 6, D = 9, ND = N * D };
    struct fx_file f;
    if (fx_open(&f, "softmax.ctfx"))
        return;
    const float *x = fx_get(&f, "x", ND), *dout = fx_get(&f, "dout", ND),
                *out_want = fx_get(&f, "out", ND), *dx_want = fx_get(&f, "dx", ND);
    if (!x || !dout || !out_want || !dx_want)
        goto done;
    float out[ND], dx[ND], tmp[ND];
    ct_softmax_forward(out, x, N, D);
    check_close("softmax.out", out, out_want, ND, 1e-7, 1e-5);
    ct_softmax_backward(dx, dout, out, N, D);
    check_close("softmax.dx", dx, dx_want, ND, 1e-6, 1e-5);
    /* In place, both ways. */
    memcpy(tmp, x, sizeof tmp);
    ct_softmax_forward(tmp, tmp, N, D);
    check_close("softmax.out_inplace", tmp, out, ND, 0, 0);
    memcpy(tmp, dout, sizeof tmp);
    ct_softmax_backward(tmp, tmp, out, N, D);
    check_close("softmax.dx_inplace", tmp, dx, ND, 0, 0);
done:
    fx_free(&f);
}

static void softmax_ref(double *y, const double *x, int N, int D)
{
    for (int r = 0; r < N; r++) {
        const double *xr = x + (size_t)r * D;
        double mx = xr[0], s = 0;
        for (int i = 1; i < D; i++)
            mx = fmax(mx, xr[i]);
        for (int i = 0; i < D; i++)
            s += exp(xr[i] - mx);
        for (int i = 0; i < D; i++)
            y[(size_t)r * D + i] = exp(xr[i] - mx) / s;
    }
}

struct sm_fd {
    double *x, *y;
    const double *R;
    int N, D;
};

static double sm_fd_loss(void *ctx)
{
    struct sm_fd *f = ctx;
    softmax_ref(f->y, f->x, f->N, f->D);
    return dot(f->y, f->R, (size_t)f->N * f->D);
}

/* Gradients ~0.1..1, float rounding ~1e-7: atol 1e-6 + rtol 1e-4. */
static void test_softmax_fd(void)
{
    enum { N = 4, D = 7, ND = N * D };
    float x[ND], R[ND], out[ND], dx[ND], fd[ND], yref[ND];
    fill(x, ND, 3.0f, 60);
    fill(R, ND, 1.0f, 61);
    x[1 * D + 3] = 40.0f; /* a saturated row */
    ct_softmax_forward(out, x, N, D);
    ct_softmax_backward(dx, R, out, N, D);
    struct sm_fd f = {.x = to_double(x, ND), .y = alloc_doubles(ND), .R = to_double(R, ND),
                      .N = N, .D = D};
    sm_fd_loss(&f);
    to_float(yref, f.y, ND);
    check_close("fd.softmax.out_vs_ref", out, yref, ND, 1e-7, 1e-5);
    fd_grad(fd, f.x, ND, FD_STEP, sm_fd_loss, &f);
    check_close("fd.softmax.dx", dx, fd, ND, 1e-6, 1e-4);
    free(f.x);
    free(f.y);
    free((double *)f.R);
}

/* Rows of +-1000 (exp overflows at 88): finite, each row sums to 1; a row
 * of -inf but one entry (a causal mask) puts all mass on that entry. */
static void test_softmax_stable(void)
{
    enum { N = 3, D = 5 };
    float x[N * D] = {1000, 999, -1000, 0, 1000, -1000, -1001, -1002, -1000, -1003,
                      -INFINITY, 2.0f, -INFINITY, -INFINITY, -INFINITY};
    float y[N * D];
    ct_softmax_forward(y, x, N, D);
    for (int r = 0; r < N; r++) {
        double s = 0;
        for (int i = 0; i < D; i++) {
            CU_ASSERT(isfinite(y[r * D + i]) && y[r * D + i] >= 0);
            s += y[r * D + i];
        }
        CU_ASSERT(fabs(s - 1.0) < 1e-6);
    }
    CU_ASSERT(fabsf(y[0] - y[4]) == 0.0f && y[0] > 0.4f && y[2] == 0.0f);
    CU_ASSERT(y[2 * D + 1] == 1.0f && y[2 * D] == 0.0f);
    /* A row with nothing but -inf has no distribution: NaN, as torch gives. */
    float ninf[3] = {-INFINITY, -INFINITY, -INFINITY}, yn[3];
    ct_softmax_forward(yn, ninf, 1, 3);
    CU_ASSERT(isnan(yn[0]) && isnan(yn[1]) && isnan(yn[2]));
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"batchnorm2d golden (torch)", test_bn2d_golden},
        {"batchnorm1d golden (torch)", test_bn1d_golden},
        {"batchnorm finite differences (train)", test_bn_fd},
        {"batchnorm refuses < 2 values per channel", test_bn_too_small},
        {"syncbatchnorm R threads == one rank", test_bn_sync},
        {"batchnorm statistics far from 0", test_bn_far_from_zero},
        {"syncbatchnorm too small globally", test_bn_sync_too_small},
        {"syncbatchnorm failing allreduce", test_bn_sync_error},
        {"layernorm golden (torch)", test_ln_golden},
        {"layernorm finite differences", test_ln_fd},
        {"gelu golden (torch)", test_gelu_golden},
        {"gelu finite differences", test_gelu_fd},
        {"gelu dense sweep vs float64", test_gelu_sweep},
        {"gelu tails", test_gelu_tails},
        {"softmax golden (torch)", test_softmax_golden},
        {"softmax finite differences", test_softmax_fd},
        {"softmax stable", test_softmax_stable},
        {NULL, NULL},
    };
    return ct_test_run("norm", cases);
}
