/* Global-norm gradient clipping (see clip.h). */
#include "optim/clip.h"

#include <math.h>

/* One block's sum of squares. Four independent double accumulators: the
 * loop is bound by the latency of the adds otherwise. The order is fixed,
 * so the result is deterministic for a given buffer (and so identical on
 * every rank). */
static double block_sumsq(const float *g, size_t n)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    size_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)g[i] * g[i];
        s1 += (double)g[i + 1] * g[i + 1];
        s2 += (double)g[i + 2] * g[i + 2];
        s3 += (double)g[i + 3] * g[i + 3];
    }
    for (; i < n; i++)
        s0 += (double)g[i] * g[i];
    return (s0 + s1) + (s2 + s3);
}

void ct_grad_sumsq_blocks(const float *g, size_t n, double *out)
{
    for (size_t b = 0, i = 0; i < n; b++, i += CT_NORM_BLOCK)
        out[b] = block_sumsq(g + i, n - i < CT_NORM_BLOCK ? n - i : CT_NORM_BLOCK);
}

double ct_grad_norm_blocks(const double *blocks, size_t nb)
{
    double s = 0.0;
    for (size_t b = 0; b < nb; b++)
        s += blocks[b];
    return sqrt(s);
}

double ct_grad_norm(const float *g, size_t n)
{
    /* ct_grad_norm_blocks of ct_grad_sumsq_blocks, without the array. */
    double s = 0.0;
    for (size_t i = 0; i < n; i += CT_NORM_BLOCK)
        s += block_sumsq(g + i, n - i < CT_NORM_BLOCK ? n - i : CT_NORM_BLOCK);
    return sqrt(s);
}

void ct_clip_scale(float *g, size_t n, double norm, double max_norm)
{
    /* torch: clip_coef = max_norm / (total_norm + 1e-6), clamped to at most
     * 1.0, and every gradient multiplied by it. The coefficient is rounded
     * to float once (torch computes it as a float32 tensor from a float32
     * norm; ours comes from the double norm, so it can differ by an ulp).
     * Multiplying by exactly 1.0f changes no float, so that pass is
     * skipped. A NaN coefficient (NaN gradients) is not clamped, as
     * torch.clamp propagates NaN: it reaches every gradient. */
    double coef = max_norm / (norm + 1e-6);
    float c = coef > 1.0 ? 1.0f : (float)coef;
    if (!(c == 1.0f))
        for (size_t i = 0; i < n; i++)
            g[i] *= c;
}

double ct_clip_grad_norm(float *g, size_t n, double max_norm)
{
    double norm = ct_grad_norm(g, n);
    ct_clip_scale(g, n, norm, max_norm);
    return norm;
}
