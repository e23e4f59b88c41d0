/* Normalisation kernels: BatchNorm (1d and 2d, local or synchronised across
 * ranks) and LayerNorm, as torch.nn.BatchNorm1d/2d, SyncBatchNorm and
 * torch.nn.LayerNorm. Plain functions over raw buffers (outputs first,
 * inputs next, dimensions last); backward accumulates (+=) into the
 * parameter gradients and overwrites dinp. Not here: the modules (which own
 * parameters, running statistics and workspaces), and a "fast" second copy
 * (these loops already run in memory order; tests compare them with float64
 * references): docs/models.md.
 *
 * Dims legend: B = batch rows (on this rank), C = channels, S = spatial size
 * per channel (H * W for NCHW input, 1 for BatchNorm1d on (B, C)),
 * N = rows, D = features normalised by LayerNorm (the last dimension).
 *
 *     double *work = ws;                       // (2C+1), from the module's workspace
 *     rc = ct_batchnorm_forward_train(out, mean, invstd, running_mean, running_var, work,
 *                                     x, gamma, beta, B, C, S, CT_BATCHNORM_EPS,
 *                                     CT_BATCHNORM_MOMENTUM, allreduce_sum, ctx);
 *     ...
 *     rc = ct_batchnorm_backward(dx, dgamma, dbeta, work, dout, x, gamma, mean, invstd,
 *                                B, C, S, allreduce_sum, ctx);
 *
 * allreduce_sum == NULL: this rank's own statistics (local BN, DDP's
 * default). With a callback, each kernel calls it exactly once with 2C+1
 * doubles and uses the global batch's sums (SyncBatchNorm); every rank must
 * then make the same calls in the same order, as with any collective.
 */
#ifndef CT_NN_NORM_H
#define CT_NN_NORM_H

#include <stddef.h>

/* PyTorch's defaults for BatchNorm and LayerNorm. */
#define CT_BATCHNORM_EPS 1e-5f
#define CT_BATCHNORM_MOMENTUM 0.1f
#define CT_LAYERNORM_EPS 1e-5f

/* Sum buf[0..n) element-wise across all ranks, in place; every rank must
 * receive the same sums. Returns 0 or a negative CT_E* code. */
typedef int (*ct_batchnorm_allreduce_fn)(void *ctx, double *buf, size_t n);

/* ------------------------------------------------------------ BatchNorm */

/* Training forward. Per channel c, over the B*S values of the batch (the
 * global batch when allreduce_sum is set):
 *     mean[c], var[c] (biased) accumulated in double,
 *     out = (inp - mean) * invstd * gamma + beta,   invstd = 1/sqrt(var + eps).
 *
 * out          (B, C, S)  may not alias inp
 * save_mean    (C)        batch mean, for backward (NULL: not saved)
 * save_invstd  (C)        1/sqrt(var + eps), for backward (NULL: not saved)
 * running_mean (C)        updated in place: (1 - momentum) * r + momentum * mean
 * running_var  (C)        updated in place with the unbiased variance
 *                         var * n/(n-1) (both NULL: no running statistics)
 * work         (2C+1)     scratch; with a callback, the buffer it is given
 * inp          (B, C, S)
 * gamma, beta  (C)        NULL: 1 and 0 (affine=False)
 *
 * B may be 0 on a rank in sync mode. Returns 0; CT_EINVAL (with a message)
 * when the batch holds fewer than 2 values per channel, as PyTorch refuses
 * them (the unbiased variance is undefined); or the callback's error. On an
 * error nothing but work is written. In sync mode every rank sees the same
 * global count, so all ranks fail alike and none is left in a collective.
 *
 * Sync mode sends [count, sum(x)[C], sum(x^2)[C]] in one call, where each
 * rank computes its sum(x^2) as M2 + sum*mean from a shifted, exact-enough
 * local M2; the global variance is then sum(x^2)/n - mean^2 in double, which
 * loses ~log10(mean^2/var) of double's 16 digits: harmless for any
 * activation whose mean is below 1e4 standard deviations. Without a callback
 * the variance is M2/n directly. */
int ct_batchnorm_forward_train(float *out, float *save_mean, float *save_invstd,
                               float *running_mean, float *running_var, double *work,
                               const float *inp, const float *gamma, const float *beta, int B,
                               int C, int S, float eps, float momentum,
                               ct_batchnorm_allreduce_fn allreduce_sum, void *ctx);

/* Eval forward with the running statistics (no state changes, no
 * communication): out = (inp - rm) / sqrt(rv + eps) * gamma + beta.
 * out (B, C, S) may alias inp; gamma, beta (C) may be NULL. */
void ct_batchnorm_forward_eval(float *out, const float *inp, const float *running_mean,
                               const float *running_var, const float *gamma, const float *beta,
                               int B, int C, int S, float eps);

/* Training backward, from the mean and invstd that the forward saved
 * (float: on a channel whose mean sits m standard deviations from 0, xhat
 * here differs from forward's, which subtracts the mean in double precision,
 * by ~m * 6e-8; torch's saved statistics have the same limit):
 *     xhat = (inp - mean) * invstd,
 *     dgamma[c] += sum dout * xhat,  dbeta[c] += sum dout        (this rank's rows)
 *     dinp = gamma * invstd * (dout - sum(dout)/n - xhat * sum(dout * xhat)/n)
 * where the two sums and n are over the global batch in sync mode: the
 * callback is called once with [count, sum(dout)[C], sum(dout*xhat)[C]].
 * The parameter gradients are this rank's own sums, as in PyTorch's
 * SyncBatchNorm: the gradient allreduce that follows combines them like any
 * other parameter's.
 *
 * dinp (B, C, S) NULL: not needed (then there is no callback call; all ranks
 * must agree, as they do when it is the model's first layer); dgamma, dbeta
 * (C) NULL: skipped; work (2C+1) scratch. Returns 0 or the callback's error
 * (then dinp is unwritten, but dgamma/dbeta have been accumulated: a failed
 * collective is fatal to the step). */
int ct_batchnorm_backward(float *dinp, float *dgamma, float *dbeta, double *work,
                          const float *dout, const float *inp, const float *gamma,
                          const float *save_mean, const float *save_invstd, int B, int C, int S,
                          ct_batchnorm_allreduce_fn allreduce_sum, void *ctx);

/* ------------------------------------------------------------ BatchNorm in pieces
 *
 * The two training kernels above are these pieces with their element-wise
 * passes in between. Fused kernels (src/nn/convblock.c) call the pieces
 * themselves, so that they can gather statistics a few samples at a time
 * while those samples are still in cache, and write their own element-wise
 * passes, yet share every formula (shift, variance, running statistics,
 * sync-mode sums, gradient coefficients) with the plain kernels:
 *
 *     ct_batchnorm_stats_zero(work, C);
 *     for each chunk of nb samples x (nb, C, S):
 *         ct_batchnorm_stats_add(work, x, first, nb, C, S);
 *     rc = ct_batchnorm_stats_end(mean, invstd, rm, rv, work, first, gamma, B, C, S, ...);
 *     k = ct_batchnorm_coeffs(work, beta, C, c);     // y = ((x - k.hi) - k.lo) * k.scale + k.shift
 *
 *     ct_batchnorm_stats_zero(work, C);                // backward
 *     work[1 + c] += sum dy,  work[1 + C + c] += sum dy * (x - mean[c])    (double; or
 *         ct_batchnorm_grad_add(work, dout, x, mean, nb, C, S) on dense chunks)
 *     rc = ct_batchnorm_grad_end(dgamma, dbeta, work, invstd, B, C, S, need_dinp, ...);
 *     if (need_dinp && work[0] > 0)
 *         d = ct_batchnorm_dcoeffs(work, gamma, mean, invstd, C, c);
 *         dx = d.g * (dy - d.k1 - (x - d.mean) * d.invstd * d.k2)
 *
 * `first` is this rank's first sample (C, S): the shift of channel c is
 * first[c * S] (any value of the channel would do; see norm.c). work is the
 * same (2C+1) doubles as above. stats_end makes the one callback call of
 * sync mode, and so does grad_end when need_dinp != 0 (every rank must pass
 * the same need_dinp, as with ct_batchnorm_backward's dinp); both return
 * what the kernels above return. */
void ct_batchnorm_stats_zero(double *work, int C);
void ct_batchnorm_stats_add(double *work, const float *x, const float *first, int nb, int C, int S);
int ct_batchnorm_stats_end(float *save_mean, float *save_invstd, float *running_mean,
                           float *running_var, double *work, const float *first,
                           const float *gamma, int B, int C, int S, float eps, float momentum,
                           ct_batchnorm_allreduce_fn allreduce_sum, void *ctx);
void ct_batchnorm_grad_add(double *work, const float *dout, const float *inp,
                           const float *save_mean, int nb, int C, int S);
int ct_batchnorm_grad_end(float *dgamma, float *dbeta, double *work, const float *save_invstd,
                          int B, int C, int S, int need_dinp,
                          ct_batchnorm_allreduce_fn allreduce_sum, void *ctx);

/* Channel c's forward coefficients once stats_end has run: the mean as
 * float hi + lo (x - hi is exact for x near the mean), scale = gamma *
 * invstd, shift = beta. */
struct ct_batchnorm_coeffs {
    float hi, lo, scale, shift;
};

static inline struct ct_batchnorm_coeffs ct_batchnorm_coeffs(const double *work, const float *beta,
                                                             int C, int c)
{
    const double mean = work[1 + c];
    const float hi = (float)mean;
    return (struct ct_batchnorm_coeffs){hi, (float)(mean - hi), (float)work[1 + C + c],
                                        beta ? beta[c] : 0.0f};
}

/* Channel c's eval-mode coefficients, those of ct_batchnorm_forward_eval:
 * hi = running_mean, lo = 0, scale = gamma / sqrt(running_var + eps) (in
 * double, rounded once), shift = beta; gamma, beta NULL: 1 and 0. */
struct ct_batchnorm_coeffs ct_batchnorm_eval_coeffs(const float *running_mean,
                                                    const float *running_var, const float *gamma,
                                                    const float *beta, int c, float eps);

/* Channel c's backward coefficients once grad_end has run (work[0] > 0). */
struct ct_batchnorm_dcoeffs {
    float mean, invstd, g, k1, k2;
};

static inline struct ct_batchnorm_dcoeffs ct_batchnorm_dcoeffs(const double *work,
                                                               const float *gamma,
                                                               const float *save_mean,
                                                               const float *save_invstd, int C,
                                                               int c)
{
    const double n = work[0];
    const float is = save_invstd[c];
    return (struct ct_batchnorm_dcoeffs){save_mean[c], is, gamma ? gamma[c] * is : is,
                                         (float)(work[1 + c] / n), (float)(work[1 + C + c] / n)};
}

/* ------------------------------------------------------------ LayerNorm */

/* Per row of D values: mean, biased variance (double), rstd = 1/sqrt(var + eps),
 * out = (inp - mean) * rstd * weight + bias.
 * out (N, D) may alias inp; save_mean, save_rstd (N) NULL: not saved (eval);
 * weight, bias (D) NULL: 1 and 0 (elementwise_affine=False). */
void ct_layernorm_forward(float *out, float *save_mean, float *save_rstd, const float *inp,
                          const float *weight, const float *bias, int N, int D, float eps);

/* xhat = (inp - mean) * rstd, g = dout * weight:
 *     dinp = rstd * (g - mean(g) - xhat * mean(g * xhat))   (per row)
 *     dweight += sum over rows of dout * xhat,  dbias += sum of dout.
 * dinp (N, D) NULL: skipped; dweight, dbias (D) NULL: skipped. */
void ct_layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                           const float *inp, const float *weight, const float *save_mean,
                           const float *save_rstd, int N, int D);

#include "nn/module.h"

/* Modules. BatchNorm2d over (C, H, W) inputs (BatchNorm1d: (C)): parameters
 * "weight" (gamma, 1) and "bias" (beta, 0), buffers "running_mean" (0) and
 * "running_var" (1); batch statistics in training, running statistics in
 * eval. sync != 0: statistics over the global batch, summed across ranks
 * through the model's forward context (SyncBatchNorm). LayerNorm over the
 * last dimension D of (T, D) samples: "weight" (1), "bias" (0). NULL on bad sizes
 * or allocation failure. */
struct ct_module *ct_batchnorm2d_new(int C, int H, int W, int sync);
struct ct_module *ct_batchnorm1d_new(int C, int sync);
struct ct_module *ct_layernorm_new(int T, int D);

#endif
