/* BatchNorm and LayerNorm kernels (see norm.h).
 *
 * Dims legend: B = batch rows (this rank), C = channels, S = spatial size per
 * channel, N = rows, D = features per row.
 *
 * Statistics are accumulated in double, in one pass over memory order, with a
 * shift: sums of (x - k) and (x - k)^2 for k = one value of the same channel
 * (or row). With k within a few standard deviations of the mean, as a value
 * drawn from the data is, M2 = sum (x-k)^2 - (sum (x-k))^2 / n cancels
 * nothing of importance, so this is as accurate as two passes and reads the
 * input once. The element-wise passes run in float.
 */
#include "nn/norm.h"

#include <math.h>
#include <stddef.h>

#include "core/error.h"
#include "core/simd.h"

/* Eight independent accumulator lanes: the adds do not wait on each
 * other's latency, and the compiler can keep the lanes in vector registers
 * (each lane is its own sum, so no reassociation is needed). */
enum { LANES = 8 };

/* s1 += sum (x - k), s2 += sum (x - k)^2 over x[0..n), in double. */
CT_VECTOR_CLONES
static void shifted_sums(const float *x, size_t n, double k, double *s1, double *s2)
{
    double a[LANES] = {0}, q[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            double d = x[i + l] - k;
            a[l] += d;
            q[l] += d * d;
        }
    for (; i < n; i++) {
        double d = x[i] - k;
        a[0] += d;
        q[0] += d * d;
    }
    double sa = 0, sq = 0;
    for (int l = 0; l < LANES; l++) {
        sa += a[l];
        sq += q[l];
    }
    *s1 += sa;
    *s2 += sq;
}

/* sdy += sum dy, sdyx += sum dy * (x - m) over [0..n), in double. */
CT_VECTOR_CLONES
static void grad_sums(const float *dy, const float *x, size_t n, double m, double *sdy,
                      double *sdyx)
{
    double a[LANES] = {0}, q[LANES] = {0};
    size_t i = 0;
    for (; i + LANES <= n; i += LANES)
        for (int l = 0; l < LANES; l++) {
            a[l] += dy[i + l];
            q[l] += (double)dy[i + l] * (x[i + l] - m);
        }
    for (; i < n; i++) {
        a[0] += dy[i];
        q[0] += (double)dy[i] * (x[i] - m);
    }
    double sa = 0, sq = 0;
    for (int l = 0; l < LANES; l++) {
        sa += a[l];
        sq += q[l];
    }
    *sdy += sa;
    *sdyx += sq;
}

/* ------------------------------------------------------------ BatchNorm */

/* work = [count | s1 (C) | s2 (C)]. */

void ct_batchnorm_stats_zero(double *work, int C)
{
    for (int i = 0; i < 2 * C + 1; i++)
        work[i] = 0;
}

/* The shift of channel c is the channel's first value on this rank (any
 * value of the channel would do, see the top): first[c * S]. */
void ct_batchnorm_stats_add(double *work, const float *x, const float *first, int nb, int C, int S)
{
    const size_t Sz = (size_t)S;
    double *s1 = work + 1, *s2 = work + 1 + C;
    for (int b = 0; b < nb; b++)
        for (int c = 0; c < C; c++)
            shifted_sums(x + ((size_t)b * C + c) * Sz, Sz, first[(size_t)c * Sz], &s1[c], &s2[c]);
}

int ct_batchnorm_stats_end(float *save_mean, float *save_invstd, float *running_mean,
                           float *running_var, double *work, const float *first,
                           const float *gamma, int B, int C, int S, float eps, float momentum,
                           ct_batchnorm_allreduce_fn allreduce_sum, void *ctx)
{
    const size_t Sz = (size_t)S;
    double *s1 = work + 1, *s2 = work + 1 + C; /* (C) each */
    const double nloc = (double)B * (double)S;

    /* Local mean and M2, then (sync) global ones. s1 becomes the mean, s2
     * the biased variance. */
    double n = nloc;
    for (int c = 0; c < C; c++) {
        double k = B > 0 ? first[(size_t)c * Sz] : 0.0;
        double mean = nloc > 0 ? k + s1[c] / nloc : 0.0;
        double m2 = nloc > 0 ? s2[c] - s1[c] * (s1[c] / nloc) : 0.0;
        m2 = m2 > 0 ? m2 : 0.0;
        if (allreduce_sum) {
            /* What sums across ranks: the plain sums of x and x^2. */
            double sum = mean * nloc;
            s1[c] = sum;
            s2[c] = m2 + sum * mean;
        } else {
            s1[c] = mean;
            s2[c] = nloc > 0 ? m2 / nloc : 0.0;
        }
    }
    if (allreduce_sum) {
        work[0] = nloc;
        int rc = allreduce_sum(ctx, work, 2 * (size_t)C + 1);
        if (rc < 0)
            return rc;
        n = work[0];
        for (int c = 0; c < C && n > 0; c++) {
            double mean = s1[c] / n;
            double var = s2[c] / n - mean * mean;
            s1[c] = mean;
            s2[c] = var > 0 ? var : 0.0;
        }
    }
    if (!(n > 1))
        return ct_error_set(CT_EINVAL,
                            "batchnorm: training needs more than 1 value per channel, got %.0f "
                            "(batch %d x spatial %d%s)",
                            n, B, S, allreduce_sum ? " on this rank, summed over all ranks" : "");

    const double m = momentum;
    for (int c = 0; c < C; c++) {
        double mean = s1[c], var = s2[c];
        float mean_f = (float)mean, invstd_f = (float)(1.0 / sqrt(var + (double)eps));
        if (save_mean)
            save_mean[c] = mean_f;
        if (save_invstd)
            save_invstd[c] = invstd_f;
        if (running_mean)
            running_mean[c] = (float)(m * mean + (1.0 - m) * running_mean[c]);
        if (running_var)
            running_var[c] = (float)(m * (var * n / (n - 1.0)) + (1.0 - m) * running_var[c]);
        s2[c] = gamma ? invstd_f * gamma[c] : invstd_f; /* s1 keeps the double mean */
    }
    return 0;
}

int ct_batchnorm_forward_train(float *out, float *save_mean, float *save_invstd,
                               float *running_mean, float *running_var, double *work,
                               const float *inp, const float *gamma, const float *beta, int B,
                               int C, int S, float eps, float momentum,
                               ct_batchnorm_allreduce_fn allreduce_sum, void *ctx)
{
    /* Pass 1: shifted sums per channel; then the statistics. */
    ct_batchnorm_stats_zero(work, C);
    ct_batchnorm_stats_add(work, inp, inp, B, C, S);
    int rc = ct_batchnorm_stats_end(save_mean, save_invstd, running_mean, running_var, work, inp,
                                    gamma, B, C, S, eps, momentum, allreduce_sum, ctx);
    if (rc < 0)
        return rc;

    /* Pass 2: out = (x - mean) * scale + beta, subtracting the mean as
     * float hi + lo parts (see ct_batchnorm_coeffs): x - hi is exact for x
     * near the mean, so a channel whose mean is many standard deviations
     * from 0 keeps full precision (with hi alone its xhat would be off by
     * ulp(mean) * invstd). */
    const size_t Sz = (size_t)S;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            const size_t off = ((size_t)b * C + c) * Sz;
            const float *x = inp + off;
            float *y = out + off;
            const struct ct_batchnorm_coeffs k = ct_batchnorm_coeffs(work, beta, C, c);
            for (size_t i = 0; i < Sz; i++)
                y[i] = ((x[i] - k.hi) - k.lo) * k.scale + k.shift;
        }
    return 0;
}

struct ct_batchnorm_coeffs ct_batchnorm_eval_coeffs(const float *running_mean,
                                                    const float *running_var, const float *gamma,
                                                    const float *beta, int c, float eps)
{
    const float sc =
        (float)((gamma ? gamma[c] : 1.0) / sqrt((double)running_var[c] + (double)eps));
    return (struct ct_batchnorm_coeffs){running_mean[c], 0.0f, sc, beta ? beta[c] : 0.0f};
}

void ct_batchnorm_forward_eval(float *out, const float *inp, const float *running_mean,
                               const float *running_var, const float *gamma, const float *beta,
                               int B, int C, int S, float eps)
{
    const size_t Sz = (size_t)S;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            const size_t off = ((size_t)b * C + c) * Sz;
            const struct ct_batchnorm_coeffs k =
                ct_batchnorm_eval_coeffs(running_mean, running_var, gamma, beta, c, eps);
            for (size_t i = 0; i < Sz; i++)
                out[off + i] = (inp[off + i] - k.hi) * k.scale + k.shift;
        }
}

void ct_batchnorm_grad_add(double *work, const float *dout, const float *inp,
                           const float *save_mean, int nb, int C, int S)
{
    const size_t Sz = (size_t)S;
    double *sdy = work + 1, *sdyx = work + 1 + C;
    for (int b = 0; b < nb; b++)
        for (int c = 0; c < C; c++) {
            const size_t off = ((size_t)b * C + c) * Sz;
            grad_sums(dout + off, inp + off, Sz, save_mean[c], &sdy[c], &sdyx[c]);
        }
}

int ct_batchnorm_grad_end(float *dgamma, float *dbeta, double *work, const float *save_invstd,
                          int B, int C, int S, int need_dinp,
                          ct_batchnorm_allreduce_fn allreduce_sum, void *ctx)
{
    double *sdy = work + 1, *sdyx = work + 1 + C;
    for (int c = 0; c < C; c++) {
        sdyx[c] *= save_invstd[c];
        if (dgamma)
            dgamma[c] += (float)sdyx[c];
        if (dbeta)
            dbeta[c] += (float)sdy[c];
    }
    work[0] = (double)B * (double)S;
    if (!need_dinp)
        return 0;
    if (allreduce_sum) {
        int rc = allreduce_sum(ctx, work, 2 * (size_t)C + 1);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int ct_batchnorm_backward(float *dinp, float *dgamma, float *dbeta, double *work,
                          const float *dout, const float *inp, const float *gamma,
                          const float *save_mean, const float *save_invstd, int B, int C, int S,
                          ct_batchnorm_allreduce_fn allreduce_sum, void *ctx)
{
    /* Pass 1: per channel sum(dy) and sum(dy * xhat) = invstd * sum(dy * (x - mean)). */
    ct_batchnorm_stats_zero(work, C);
    ct_batchnorm_grad_add(work, dout, inp, save_mean, B, C, S);
    int rc = ct_batchnorm_grad_end(dgamma, dbeta, work, save_invstd, B, C, S, dinp != NULL,
                                   allreduce_sum, ctx);
    if (rc < 0 || !dinp || !(work[0] > 0))
        return rc; /* failed, not needed, or no rows anywhere: nothing to write */

    /* Pass 2: dinp = gamma * invstd * (dy - mean(dy) - xhat * mean(dy * xhat)). */
    const size_t Sz = (size_t)S;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            const size_t off = ((size_t)b * C + c) * Sz;
            const float *dy = dout + off, *x = inp + off;
            float *dx = dinp + off;
            const struct ct_batchnorm_dcoeffs k =
                ct_batchnorm_dcoeffs(work, gamma, save_mean, save_invstd, C, c);
            for (size_t i = 0; i < Sz; i++) {
                float xhat = (x[i] - k.mean) * k.invstd;
                dx[i] = k.g * (dy[i] - k.k1 - xhat * k.k2);
            }
        }
    return 0;
}

/* ------------------------------------------------------------ LayerNorm */

void ct_layernorm_forward(float *out, float *save_mean, float *save_rstd, const float *inp,
                          const float *weight, const float *bias, int N, int D, float eps)
{
    const size_t Dz = (size_t)D;
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * Dz;
        float *y = out + (size_t)r * Dz;
        double s1 = 0, s2 = 0, k = x[0];
        shifted_sums(x, Dz, k, &s1, &s2);
        double var = (s2 - s1 * (s1 / D)) / D, mean = k + s1 / D;
        const float rstd = (float)(1.0 / sqrt((var > 0 ? var : 0.0) + (double)eps));
        /* The mean as float hi + lo, as in BatchNorm's forward. */
        const float hi = (float)mean, lo = (float)(mean - hi);
        if (save_mean)
            save_mean[r] = hi;
        if (save_rstd)
            save_rstd[r] = rstd;
        /* y may alias x: each element is read before it is written. */
        for (size_t i = 0; i < Dz; i++) {
            float xhat = ((x[i] - hi) - lo) * rstd;
            y[i] = (weight ? xhat * weight[i] : xhat) + (bias ? bias[i] : 0.0f);
        }
    }
}

void ct_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *save_mean,
                           const float *save_rstd, int N, int D)
{
    const size_t Dz = (size_t)D;
    for (int r = 0; r < N; r++) {
        const float *x = inp + (size_t)r * Dz, *dy = dout + (size_t)r * Dz;
        const float mean = save_mean[r], rstd = save_rstd[r];
        double sg = 0, sgx = 0;
        for (size_t i = 0; i < Dz; i++) {
            float xhat = (x[i] - mean) * rstd;
            float g = weight ? dy[i] * weight[i] : dy[i];
            sg += g;
            sgx += (double)g * xhat;
            if (dweight)
                dweight[i] += dy[i] * xhat;
            if (dbias)
                dbias[i] += dy[i];
        }
        if (!dinp)
            continue;
        float *dx = dinp + (size_t)r * Dz;
        const float k1 = (float)(sg / D), k2 = (float)(sgx / D);
        for (size_t i = 0; i < Dz; i++) {
            float xhat = (x[i] - mean) * rstd;
            float g = weight ? dy[i] * weight[i] : dy[i];
            dx[i] = rstd * (g - k1 - xhat * k2);
        }
    }
}

/* ---------------------------------------------------------------- modules */

struct bn_ctx {
    int C, S, sync;
};

static int bn_declare(struct ct_module *m, struct ct_decl *d)
{
    struct bn_ctx *c = m->ctx;
    const int64_t shape[1] = {c->C};
    int rc = ct_module_param(m, d, "weight", 1, shape);
    if (rc >= 0)
        rc = ct_module_param(m, d, "bias", 1, shape);
    if (rc >= 0)
        rc = ct_module_buffer(m, d, "running_mean", 1, shape);
    if (rc >= 0)
        rc = ct_module_buffer(m, d, "running_var", 1, shape);
    return rc < 0 ? rc : 0;
}

/* Workspace: save_mean (C), save_invstd (C) floats, then the (2C+1)-double
 * scratch of the kernels. */
static size_t bn_workspace(struct ct_module *m, int max_batch)
{
    (void)max_batch;
    struct bn_ctx *c = m->ctx;
    return ct_arena_round(2 * (size_t)c->C * sizeof(float)) + (2 * (size_t)c->C + 1) * sizeof(double);
}

static double *bn_work(struct ct_module *m)
{
    struct bn_ctx *c = m->ctx;
    return (double *)((char *)m->ws + ct_arena_round(2 * (size_t)c->C * sizeof(float)));
}

static void bn_init(struct ct_module *m, struct ct_rng_key key)
{
    (void)key;
    struct bn_ctx *c = m->ctx;
    for (int i = 0; i < c->C; i++) {
        m->p[0][i] = 1.0f; /* gamma */
        m->p[1][i] = 0.0f; /* beta */
        m->b[0][i] = 0.0f; /* running_mean */
        m->b[1][i] = 1.0f; /* running_var */
    }
}

static void bn_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct bn_ctx *c = m->ctx;
    float *mean = m->ws, *invstd = (float *)m->ws + c->C;
    if (!m->training) {
        ct_batchnorm_forward_eval(out, inp, m->b[0], m->b[1], m->p[0], m->p[1], B, c->C, c->S,
                                  CT_BATCHNORM_EPS);
        return;
    }
    int sync = c->sync && m->fwd->allreduce_sum;
    int rc = ct_batchnorm_forward_train(out, mean, invstd, m->b[0], m->b[1], bn_work(m), inp,
                                        m->p[0], m->p[1], B, c->C, c->S, CT_BATCHNORM_EPS,
                                        CT_BATCHNORM_MOMENTUM, sync ? m->fwd->allreduce_sum : NULL,
                                        m->fwd->allreduce_ctx);
    if (rc < 0 && m->fwd->status == 0)
        m->fwd->status = rc;
}

static void bn_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                   const float *out, int B)
{
    (void)out;
    struct bn_ctx *c = m->ctx;
    const float *mean = m->ws, *invstd = (const float *)m->ws + c->C;
    int sync = c->sync && m->fwd->allreduce_sum;
    int rc = ct_batchnorm_backward(dinp, m->g[0], m->g[1], bn_work(m), dout, inp, m->p[0], mean,
                                   invstd, B, c->C, c->S, sync ? m->fwd->allreduce_sum : NULL,
                                   m->fwd->allreduce_ctx);
    if (rc < 0 && m->fwd->status == 0)
        m->fwd->status = rc;
}

static const struct ct_module_ops bn_ops = {
    .kind = "batchnorm",
    .declare = bn_declare,
    .workspace = bn_workspace,
    .init = bn_init,
    .forward = bn_fwd,
    .backward = bn_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_batchnorm2d_new(int C, int H, int W, int sync)
{
    if (C < 1 || H < 1 || W < 1)
        return NULL;
    size_t n = (size_t)C * H * W;
    struct ct_module *m = ct_module_alloc(&bn_ops, n, n, sizeof(struct bn_ctx));
    if (m)
        *(struct bn_ctx *)m->ctx = (struct bn_ctx){C, H * W, sync != 0};
    return m;
}

struct ct_module *ct_batchnorm1d_new(int C, int sync) { return ct_batchnorm2d_new(C, 1, 1, sync); }

struct ln_ctx {
    int T, D, max_batch;
};

static int ln_declare(struct ct_module *m, struct ct_decl *d)
{
    struct ln_ctx *c = m->ctx;
    int rc = ct_module_param(m, d, "weight", 1, (const int64_t[]){c->D});
    if (rc >= 0)
        rc = ct_module_param(m, d, "bias", 1, (const int64_t[]){c->D});
    return rc < 0 ? rc : 0;
}

static size_t ln_workspace(struct ct_module *m, int max_batch)
{
    struct ln_ctx *c = m->ctx;
    c->max_batch = max_batch;
    return 2 * (size_t)max_batch * c->T * sizeof(float); /* mean, rstd per row */
}

static void ln_init(struct ct_module *m, struct ct_rng_key key)
{
    (void)key;
    struct ln_ctx *c = m->ctx;
    for (int i = 0; i < c->D; i++) {
        m->p[0][i] = 1.0f;
        m->p[1][i] = 0.0f;
    }
}

static void ln_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct ln_ctx *c = m->ctx;
    float *mean = m->ws, *rstd = (float *)m->ws + (size_t)c->max_batch * c->T;
    ct_layernorm_forward(out, mean, rstd, inp, m->p[0], m->p[1], B * c->T, c->D, CT_LAYERNORM_EPS);
}

static void ln_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                   const float *out, int B)
{
    (void)out;
    struct ln_ctx *c = m->ctx;
    const float *mean = m->ws, *rstd = (const float *)m->ws + (size_t)c->max_batch * c->T;
    ct_layernorm_backward(dinp, m->g[0], m->g[1], dout, inp, m->p[0], mean, rstd, B * c->T, c->D);
}

static const struct ct_module_ops ln_ops = {
    .kind = "layernorm",
    .declare = ln_declare,
    .workspace = ln_workspace,
    .init = ln_init,
    .forward = ln_fwd,
    .backward = ln_bwd,
    .backward_ignores_out = 1,
    .forward_recomputable = 1,
};

struct ct_module *ct_layernorm_new(int T, int D)
{
    if (T < 1 || D < 1)
        return NULL;
    size_t n = (size_t)T * D;
    struct ct_module *m = ct_module_alloc(&ln_ops, n, n, sizeof(struct ln_ctx));
    if (m)
        *(struct ln_ctx *)m->ctx = (struct ln_ctx){T, D, 0};
    return m;
}
