/* Max, average and global average pooling kernels (see pool.h).
 *
 * Dims legend: B = batch, C = channels, H, W = input size, OH, OW = output
 * size, K = kernel size, HW = H * W, OHW = OH * OW. The B * C planes are
 * independent, so every kernel walks planes and never looks across them.
 *
 * Not here: padding, ceil_mode, dilation, adaptive pooling to sizes other
 * than 1x1 (nothing in the model zoo uses them).
 */
#include "nn/pool.h"

#include <math.h>
#include <string.h>

void ct_pool2d_out_size(int H, int W, int K, int stride, int *OH, int *OW)
{
    *OH = (H - K) / stride + 1;
    *OW = (W - K) / stride + 1;
}

/* ------------------------------------------------------------ max pool */

size_t ct_maxpool2d_workspace(int B, int C, int H, int W, int K, int stride)
{
    int OH, OW;
    ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    return (size_t)B * C * OH * OW * sizeof(int32_t);
}

/* One plane. The window scan keeps the first maximum (strictly greater
 * replaces) and lets a NaN replace anything, which is PyTorch's rule
 * (starting from the window's first pixel is the same as PyTorch's start
 * from -inf: that pixel wins either way, an all -inf window included). The
 * choice is computed without branches, as data decides it at random and a
 * mispredicted branch per pixel cost more than the memory traffic.
 * Inlined with K and stride as constants for the 2x2 / stride 2 case that
 * the cnn model runs. */
static inline void maxpool_plane(float *y, int32_t *arg, const float *x, int W, int OH, int OW,
                                 int K, int stride)
{
    for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
            const int first = oh * stride * W + ow * stride;
            int best = first;
            float m = x[first];
            for (int kh = 0; kh < K; kh++)
                for (int kw = 0; kw < K; kw++) {
                    const int i = first + kh * W + kw;
                    const float v = x[i];
                    const int take = (v > m) | (v != v);
                    m = take ? v : m;
                    best = take ? i : best;
                }
            y[oh * OW + ow] = m;
            arg[oh * OW + ow] = best;
        }
}

void ct_maxpool2d_forward(float *out, int32_t *argmax, const float *inp, int B, int C, int H,
                          int W, int K, int stride)
{
    int OH, OW;
    ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    const size_t HW = (size_t)H * W, OHW = (size_t)OH * OW;
    for (size_t pl = 0; pl < (size_t)B * C; pl++) {
        if (K == 2 && stride == 2)
            maxpool_plane(out + pl * OHW, argmax + pl * OHW, inp + pl * HW, W, OH, OW, 2, 2);
        else
            maxpool_plane(out + pl * OHW, argmax + pl * OHW, inp + pl * HW, W, OH, OW, K, stride);
    }
}

/* With stride == K the windows tile the top-left (OH K, OW K) part of a
 * plane without overlapping: backward can write each window once (zeros and
 * the routed value) instead of clearing the whole plane first and adding.
 * This zeroes what the windows leave out: the right columns and bottom rows
 * that floor() dropped. */
static void zero_uncovered(float *dx, int H, int W, int CH, int CW)
{
    if (CW < W)
        for (int r = 0; r < CH; r++)
            memset(dx + (size_t)r * W + CW, 0, (size_t)(W - CW) * sizeof(float));
    memset(dx + (size_t)CH * W, 0, (size_t)(H - CH) * W * sizeof(float));
}

void ct_maxpool2d_backward(float *dinp, const float *dout, const int32_t *argmax, int B, int C,
                           int H, int W, int K, int stride)
{
    int OH, OW;
    ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    const size_t HW = (size_t)H * W, OHW = (size_t)OH * OW;
    if (stride != K)
        memset(dinp, 0, (size_t)B * C * HW * sizeof(float));
    for (size_t pl = 0; pl < (size_t)B * C; pl++) {
        float *dx = dinp + pl * HW;
        const float *dy = dout + pl * OHW;
        const int32_t *a = argmax + pl * OHW;
        if (stride != K) {
            for (size_t i = 0; i < OHW; i++)
                dx[a[i]] += dy[i];
            continue;
        }
        for (int oh = 0; oh < OH; oh++) {
            for (int kh = 0; kh < K; kh++)
                memset(dx + (size_t)(oh * K + kh) * W, 0, (size_t)OW * K * sizeof(float));
            for (int ow = 0; ow < OW; ow++)
                dx[a[oh * OW + ow]] = dy[oh * OW + ow];
        }
        zero_uncovered(dx, H, W, OH * K, OW * K);
    }
}

/* Position (ih * W + iw) of the first maximum of one window, or of a NaN. */
static int window_argmax_ref(const float *x, int W, int ih0, int iw0, int K)
{
    int best = -1;
    for (int kh = 0; kh < K; kh++)
        for (int kw = 0; kw < K; kw++) {
            int i = (ih0 + kh) * W + iw0 + kw;
            if (best < 0 || isnan(x[i]) || (!isnan(x[best]) && x[i] > x[best]))
                best = i;
        }
    return best;
}

void ct_maxpool2d_forward_ref(float *out, const float *inp, int B, int C, int H, int W, int K,
                              int stride)
{
    int OH, OW;
    ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    for (int pl = 0; pl < B * C; pl++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                const float *x = inp + (size_t)pl * H * W;
                out[((size_t)pl * OH + oh) * OW + ow] =
                    x[window_argmax_ref(x, W, oh * stride, ow * stride, K)];
            }
}

void ct_maxpool2d_backward_ref(float *dinp, const float *dout, const float *inp, int B, int C,
                               int H, int W, int K, int stride)
{
    int OH, OW;
    ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    /* For each input pixel, the sum over the windows whose argmax it is. */
    for (int pl = 0; pl < B * C; pl++) {
        const float *x = inp + (size_t)pl * H * W;
        for (int i = 0; i < H * W; i++) {
            double acc = 0.0;
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++)
                    if (window_argmax_ref(x, W, oh * stride, ow * stride, K) == i)
                        acc += dout[((size_t)pl * OH + oh) * OW + ow];
            dinp[(size_t)pl * H * W + i] = (float)acc;
        }
    }
}

/* ------------------------------------------------------------ average pool */

/* Both directions divide by K * K in float, as PyTorch does (its forward
 * divides the float sum; its backward divides dout before spreading it), so
 * that our results match its bit for bit where the sums are ordered alike. */

static inline void avgpool_plane(float *y, const float *x, int W, int OH, int OW, int K, int stride)
{
    const float div = (float)(K * K);
    for (int oh = 0; oh < OH; oh++)
        for (int ow = 0; ow < OW; ow++) {
            const float *r = x + (size_t)oh * stride * W + (size_t)ow * stride;
            float s = 0.0f;
            for (int kh = 0; kh < K; kh++)
                for (int kw = 0; kw < K; kw++)
                    s += r[(size_t)kh * W + kw];
            y[oh * OW + ow] = s / div;
        }
}

void ct_avgpool2d_forward(float *out, const float *inp, int B, int C, int H, int W, int K,
                          int stride)
{
    int OH, OW;
    ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    const size_t HW = (size_t)H * W, OHW = (size_t)OH * OW;
    for (size_t pl = 0; pl < (size_t)B * C; pl++) {
        if (K == 2 && stride == 2)
            avgpool_plane(out + pl * OHW, inp + pl * HW, W, OH, OW, 2, 2);
        else
            avgpool_plane(out + pl * OHW, inp + pl * HW, W, OH, OW, K, stride);
    }
}

void ct_avgpool2d_backward(float *dinp, const float *dout, int B, int C, int H, int W, int K,
                           int stride)
{
    int OH, OW;
    ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    const size_t HW = (size_t)H * W, OHW = (size_t)OH * OW;
    const float div = (float)(K * K);
    if (stride != K)
        memset(dinp, 0, (size_t)B * C * HW * sizeof(float));
    for (size_t pl = 0; pl < (size_t)B * C; pl++) {
        float *dx = dinp + pl * HW;
        const float *dy = dout + pl * OHW;
        if (stride == K) {
            /* Tiling windows: each pixel gets exactly one share, written
             * once; the K rows of a band are equal, so the first is copied. */
            for (int oh = 0; oh < OH; oh++) {
                float *r = dx + (size_t)oh * K * W;
                for (int ow = 0; ow < OW; ow++) {
                    const float g = dy[oh * OW + ow] / div;
                    for (int kw = 0; kw < K; kw++)
                        r[ow * K + kw] = g;
                }
                for (int kh = 1; kh < K; kh++)
                    memcpy(r + (size_t)kh * W, r, (size_t)OW * K * sizeof(float));
            }
            zero_uncovered(dx, H, W, OH * K, OW * K);
            continue;
        }
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                const float g = dy[oh * OW + ow] / div;
                float *r = dx + (size_t)oh * stride * W + (size_t)ow * stride;
                for (int kh = 0; kh < K; kh++)
                    for (int kw = 0; kw < K; kw++)
                        r[(size_t)kh * W + kw] += g;
            }
    }
}

void ct_avgpool2d_forward_ref(float *out, const float *inp, int B, int C, int H, int W, int K,
                              int stride)
{
    int OH, OW;
    ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    for (int pl = 0; pl < B * C; pl++)
        for (int oh = 0; oh < OH; oh++)
            for (int ow = 0; ow < OW; ow++) {
                double acc = 0.0;
                for (int kh = 0; kh < K; kh++)
                    for (int kw = 0; kw < K; kw++)
                        acc += inp[((size_t)pl * H + oh * stride + kh) * W + ow * stride + kw];
                out[((size_t)pl * OH + oh) * OW + ow] = (float)(acc / (K * K));
            }
}

void ct_avgpool2d_backward_ref(float *dinp, const float *dout, int B, int C, int H, int W, int K,
                               int stride)
{
    int OH, OW;
    ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    for (int pl = 0; pl < B * C; pl++)
        for (int ih = 0; ih < H; ih++)
            for (int iw = 0; iw < W; iw++) {
                double acc = 0.0;
                for (int oh = 0; oh < OH; oh++)
                    for (int ow = 0; ow < OW; ow++)
                        if (ih >= oh * stride && ih < oh * stride + K && iw >= ow * stride &&
                            iw < ow * stride + K)
                            acc += dout[((size_t)pl * OH + oh) * OW + ow];
                dinp[((size_t)pl * H + ih) * W + iw] = (float)(acc / (K * K));
            }
}

/* ------------------------------------------------------------ global average pool */

void ct_global_avgpool_forward(float *out, const float *inp, int B, int C, int H, int W)
{
    const size_t HW = (size_t)H * W;
    for (size_t pl = 0; pl < (size_t)B * C; pl++) {
        const float *x = inp + pl * HW;
        double acc = 0.0;
        for (size_t i = 0; i < HW; i++)
            acc += x[i];
        out[pl] = (float)(acc / (double)HW);
    }
}

void ct_global_avgpool_backward(float *dinp, const float *dout, int B, int C, int H, int W)
{
    const size_t HW = (size_t)H * W;
    for (size_t pl = 0; pl < (size_t)B * C; pl++) {
        const float g = dout[pl] / (float)HW;
        float *dx = dinp + pl * HW;
        for (size_t i = 0; i < HW; i++)
            dx[i] = g;
    }
}

/* ---------------------------------------------------------------- modules */

struct pool_ctx {
    int C, H, W, K, stride;
};

static size_t maxpool_workspace(struct ct_module *m, int max_batch)
{
    struct pool_ctx *c = m->ctx;
    return ct_maxpool2d_workspace(max_batch, c->C, c->H, c->W, c->K, c->stride);
}

static void maxpool_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct pool_ctx *c = m->ctx;
    ct_maxpool2d_forward(out, m->ws, inp, B, c->C, c->H, c->W, c->K, c->stride);
}

static void maxpool_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                        const float *out, int B)
{
    (void)inp, (void)out;
    struct pool_ctx *c = m->ctx;
    if (dinp)
        ct_maxpool2d_backward(dinp, dout, m->ws, B, c->C, c->H, c->W, c->K, c->stride);
}

static const struct ct_module_ops maxpool_ops = {
    .kind = "maxpool2d",
    .workspace = maxpool_workspace,
    .forward = maxpool_fwd,
    .backward = maxpool_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_maxpool2d_new(int C, int H, int W, int K, int stride)
{
    if (C < 1 || K < 1 || stride < 1 || H < K || W < K)
        return NULL;
    int OH, OW;
    ct_pool2d_out_size(H, W, K, stride, &OH, &OW);
    struct ct_module *m = ct_module_alloc(&maxpool_ops, (size_t)C * H * W, (size_t)C * OH * OW,
                                          sizeof(struct pool_ctx));
    if (m)
        *(struct pool_ctx *)m->ctx = (struct pool_ctx){C, H, W, K, stride};
    return m;
}

static void gap_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct pool_ctx *c = m->ctx;
    ct_global_avgpool_forward(out, inp, B, c->C, c->H, c->W);
}

static void gap_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                    const float *out, int B)
{
    (void)inp, (void)out;
    struct pool_ctx *c = m->ctx;
    if (dinp)
        ct_global_avgpool_backward(dinp, dout, B, c->C, c->H, c->W);
}

static const struct ct_module_ops gap_ops = {
    .kind = "global_avgpool",
    .forward = gap_fwd,
    .backward = gap_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_global_avgpool_new(int C, int H, int W)
{
    if (C < 1 || H < 1 || W < 1)
        return NULL;
    struct ct_module *m = ct_module_alloc(&gap_ops, (size_t)C * H * W, (size_t)C, sizeof(struct pool_ctx));
    if (m)
        *(struct pool_ctx *)m->ctx = (struct pool_ctx){C, H, W, H, 1};
    return m;
}
