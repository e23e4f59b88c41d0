/* Conv2d kernels: im2col + OpenBLAS sgemm, and the direct reference (see conv2d.h).
 *
 * Dims legend: B = batch, C = input channels, OC = output channels, H, W =
 * input size, OH, OW = output size, KH, KW = kernel size, P = OH * OW,
 * CKK = C * KH * KW, G = samples per sgemm (ct_conv2d_batch_group), N = G * P.
 *
 * Forward, per group of G samples: the input is unfolded into
 * col (CKK, G, P), one sgemm computes tmp (OC, G, P) = weight (OC, CKK) . col,
 * and tmp is scattered to out (G, OC, P) with the bias added on the way. When
 * G = 1 the sgemm writes straight into out (bias seeded, beta = 1).
 * Backward, per group: the same columns are rebuilt, dout is gathered to
 * dg (OC, G, P), dweight += dg . col^T, then col = weight^T . dg is folded back
 * (col2im) into dinp. Padding is handled by computing, once per kernel tap, the
 * range of output pixels whose input lies inside the image: the inner loops
 * copy or add contiguous runs with no bounds tests.
 *
 * Not here: dilation, groups, and parallelism of our own (sgemm may thread).
 */
#include "nn/conv2d.h"

#include <cblas.h>
#include <string.h>

/* Unfold at least this many output columns per sgemm: below about a thousand
 * columns OpenBLAS spends a noticeable share of its time packing and in loop
 * edges (measured with tests/bench/bench_conv.c: see there). The cap keeps the
 * workspace within a few MB for wide layers. */
#ifndef CT_CONV_TARGET_COLS
#define CT_CONV_TARGET_COLS 2048
#endif

void ct_conv2d_out_size(int H, int W, int KH, int KW, int stride, int pad, int *OH, int *OW)
{
    *OH = (H + 2 * pad - KH) / stride + 1;
    *OW = (W + 2 * pad - KW) / stride + 1;
}

int ct_conv2d_batch_group(int B, int C, int H, int W, int OC, int KH, int KW, int stride, int pad)
{
    (void)C;
    (void)OC;
    int OH, OW;
    ct_conv2d_out_size(H, W, KH, KW, stride, pad, &OH, &OW);
    int P = OH * OW;
    int G = CT_CONV_TARGET_COLS / P;
    if (G > B)
        G = B;
    return G < 1 ? 1 : G;
}

/* Floats rounded up to a whole number of 64-byte lines, so that the second
 * part of the workspace starts as aligned as the first. */
static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

size_t ct_conv2d_workspace(int B, int C, int H, int W, int OC, int KH, int KW, int stride, int pad)
{
    int OH, OW;
    ct_conv2d_out_size(H, W, KH, KW, stride, pad, &OH, &OW);
    int G = ct_conv2d_batch_group(B, C, H, W, OC, KH, KW, stride, pad);
    size_t N = (size_t)G * OH * OW;
    size_t col = round16((size_t)C * KH * KW * N);
    size_t tmp = G > 1 ? round16((size_t)OC * N) : 0;
    return (col + tmp) * sizeof(float);
}

/* Output pixels o in [lo, hi) read input row/column o * stride + off, with
 * off = k - pad, inside [0, n). Empty ranges come back as lo == hi. */
static void valid_range(int n, int off, int stride, int out_n, int *lo, int *hi)
{
    int l = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int h = n - 1 - off < 0 ? 0 : (n - 1 - off) / stride + 1;
    if (h > out_n)
        h = out_n;
    if (l > h)
        l = h;
    *lo = l;
    *hi = h;
}

/* col rows (c, kh, kw), each ld floats apart, get the P values of one sample:
 * col[r * ld + oh * OW + ow] = img[c, oh*stride + kh - pad, ow*stride + kw - pad]
 * or 0 outside the image. img (C, H, W). */
static void im2col(float *col, size_t ld, const float *img, int C, int H, int W, int KH, int KW,
                   int stride, int pad, int OH, int OW)
{
    for (int c = 0; c < C; c++) {
        const float *plane = img + (size_t)c * H * W;
        for (int kh = 0; kh < KH; kh++) {
            int oh0, oh1;
            valid_range(H, kh - pad, stride, OH, &oh0, &oh1);
            for (int kw = 0; kw < KW; kw++) {
                int ow0, ow1;
                valid_range(W, kw - pad, stride, OW, &ow0, &ow1);
                float *row = col + ((size_t)(c * KH + kh) * KW + kw) * ld;
                int n = ow1 - ow0;
                memset(row, 0, (size_t)oh0 * OW * sizeof(float));
                for (int oh = oh0; oh < oh1; oh++) {
                    float *d = row + (size_t)oh * OW;
                    const float *s = plane + (size_t)(oh * stride + kh - pad) * W +
                                     (ow0 * stride + kw - pad);
                    for (int ow = 0; ow < ow0; ow++)
                        d[ow] = 0.0f;
                    if (stride == 1) {
                        memcpy(d + ow0, s, (size_t)n * sizeof(float));
                    } else {
                        for (int j = 0; j < n; j++)
                            d[ow0 + j] = s[(size_t)j * stride];
                    }
                    for (int ow = ow1; ow < OW; ow++)
                        d[ow] = 0.0f;
                }
                memset(row + (size_t)oh1 * OW, 0, (size_t)(OH - oh1) * OW * sizeof(float));
            }
        }
    }
}

/* The adjoint of im2col: img (C, H, W) = sum over taps of the column values
 * that came from each pixel (img is overwritten). */
static void col2im(float *img, const float *col, size_t ld, int C, int H, int W, int KH, int KW,
                   int stride, int pad, int OH, int OW)
{
    memset(img, 0, (size_t)C * H * W * sizeof(float));
    for (int c = 0; c < C; c++) {
        float *plane = img + (size_t)c * H * W;
        for (int kh = 0; kh < KH; kh++) {
            int oh0, oh1;
            valid_range(H, kh - pad, stride, OH, &oh0, &oh1);
            for (int kw = 0; kw < KW; kw++) {
                int ow0, ow1;
                valid_range(W, kw - pad, stride, OW, &ow0, &ow1);
                const float *row = col + ((size_t)(c * KH + kh) * KW + kw) * ld;
                int n = ow1 - ow0;
                for (int oh = oh0; oh < oh1; oh++) {
                    const float *s = row + (size_t)oh * OW + ow0;
                    float *d = plane + (size_t)(oh * stride + kh - pad) * W +
                               (ow0 * stride + kw - pad);
                    if (stride == 1) {
                        for (int j = 0; j < n; j++)
                            d[j] += s[j];
                    } else {
                        for (int j = 0; j < n; j++)
                            d[(size_t)j * stride] += s[j];
                    }
                }
            }
        }
    }
}

/* A 1x1 kernel with stride 1 and no padding unfolds to the input itself. */
static int is_pointwise(int KH, int KW, int stride, int pad)
{
    return KH == 1 && KW == 1 && stride == 1 && pad == 0;
}

void ct_conv2d_forward(float *out, const float *inp, const float *weight, const float *bias,
                       float *ws, int B, int C, int H, int W, int OC, int KH, int KW, int stride,
                       int pad)
{
    int OH, OW;
    ct_conv2d_out_size(H, W, KH, KW, stride, pad, &OH, &OW);
    const int G = ct_conv2d_batch_group(B, C, H, W, OC, KH, KW, stride, pad);
    const size_t P = (size_t)OH * OW, CKK = (size_t)C * KH * KW, HW = (size_t)H * W;
    float *col = ws;
    float *tmp = ws + round16(CKK * G * P);

    for (int b0 = 0; b0 < B; b0 += G) {
        const int g = B - b0 < G ? B - b0 : G;
        const size_t N = (size_t)g * P;
        if (g == 1) {
            /* One sample: sgemm writes its (OC, P) plane in place. */
            const float *src = inp + (size_t)b0 * C * HW;
            float *dst = out + (size_t)b0 * OC * P;
            if (!is_pointwise(KH, KW, stride, pad)) {
                im2col(col, P, src, C, H, W, KH, KW, stride, pad, OH, OW);
                src = col;
            }
            float beta = 0.0f;
            if (bias) {
                for (int o = 0; o < OC; o++)
                    for (size_t p = 0; p < P; p++)
                        dst[(size_t)o * P + p] = bias[o];
                beta = 1.0f;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, (int)P, (int)CKK, 1.0f,
                        weight, (int)CKK, src, (int)P, beta, dst, (int)P);
            continue;
        }
        for (int i = 0; i < g; i++)
            im2col(col + (size_t)i * P, N, inp + (size_t)(b0 + i) * C * HW, C, H, W, KH, KW,
                   stride, pad, OH, OW);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, (int)N, (int)CKK, 1.0f, weight,
                    (int)CKK, col, (int)N, 0.0f, tmp, (int)N);
        /* tmp (OC, g, P) -> out (g, OC, P), plus bias. */
        for (int i = 0; i < g; i++)
            for (int o = 0; o < OC; o++) {
                const float *s = tmp + (size_t)o * N + (size_t)i * P;
                float *d = out + ((size_t)(b0 + i) * OC + o) * P;
                const float bo = bias ? bias[o] : 0.0f;
                for (size_t p = 0; p < P; p++)
                    d[p] = s[p] + bo;
            }
    }
}

void ct_conv2d_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, float *ws, int B, int C, int H,
                        int W, int OC, int KH, int KW, int stride, int pad)
{
    int OH, OW;
    ct_conv2d_out_size(H, W, KH, KW, stride, pad, &OH, &OW);
    const int G = ct_conv2d_batch_group(B, C, H, W, OC, KH, KW, stride, pad);
    const size_t P = (size_t)OH * OW, CKK = (size_t)C * KH * KW, HW = (size_t)H * W;
    const int pointwise = is_pointwise(KH, KW, stride, pad);
    float *col = ws;
    float *dg = ws + round16(CKK * G * P);

    if (dbias) {
        /* Per channel in double: B * P terms (100k for the cnn model) would
         * lose digits in a float running sum. */
        for (int o = 0; o < OC; o++) {
            double acc = 0.0;
            for (int b = 0; b < B; b++) {
                const float *s = dout + ((size_t)b * OC + o) * P;
                float part = 0.0f;
                for (size_t p = 0; p < P; p++)
                    part += s[p];
                acc += part;
            }
            dbias[o] += (float)acc;
        }
    }

    for (int b0 = 0; b0 < B; b0 += G) {
        const int g = B - b0 < G ? B - b0 : G;
        const size_t N = (size_t)g * P;
        const float *x = inp + (size_t)b0 * C * HW;
        float *dx = dinp ? dinp + (size_t)b0 * C * HW : NULL;
        const float *cols = col;
        const float *d = dout + (size_t)b0 * OC * P;
        if (g == 1) {
            if (pointwise)
                cols = x;
            else
                im2col(col, P, x, C, H, W, KH, KW, stride, pad, OH, OW);
        } else {
            for (int i = 0; i < g; i++) {
                im2col(col + (size_t)i * P, N, x + (size_t)i * C * HW, C, H, W, KH, KW, stride,
                       pad, OH, OW);
                for (int o = 0; o < OC; o++)
                    memcpy(dg + (size_t)o * N + (size_t)i * P, d + ((size_t)i * OC + o) * P,
                           P * sizeof(float));
            }
            d = dg;
        }
        /* dweight (OC, CKK) += d (OC, N) . cols (CKK, N)^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, (int)CKK, (int)N, 1.0f, d,
                    (int)N, cols, (int)N, 1.0f, dweight, (int)CKK);
        if (!dx)
            continue;
        if (g == 1 && pointwise) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)CKK, (int)N, OC, 1.0f,
                        weight, (int)CKK, d, (int)N, 0.0f, dx, (int)N);
            continue;
        }
        /* col (CKK, N) = weight^T . d, then fold each sample back. */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)CKK, (int)N, OC, 1.0f, weight,
                    (int)CKK, d, (int)N, 0.0f, col, (int)N);
        for (int i = 0; i < g; i++)
            col2im(dx + (size_t)i * C * HW, col + (size_t)i * P, N, C, H, W, KH, KW, stride, pad,
                   OH, OW);
    }
}

/* ------------------------------------------------------------ reference */

void ct_conv2d_forward_ref(float *out, const float *inp, const float *weight, const float *bias,
                           int B, int C, int H, int W, int OC, int KH, int KW, int stride, int pad)
{
    int OH, OW;
    ct_conv2d_out_size(H, W, KH, KW, stride, pad, &OH, &OW);
    for (int b = 0; b < B; b++)
        for (int o = 0; o < OC; o++)
            for (int oh = 0; oh < OH; oh++)
                for (int ow = 0; ow < OW; ow++) {
                    double acc = bias ? bias[o] : 0.0;
                    for (int c = 0; c < C; c++)
                        for (int kh = 0; kh < KH; kh++)
                            for (int kw = 0; kw < KW; kw++) {
                                int ih = oh * stride + kh - pad, iw = ow * stride + kw - pad;
                                if (ih < 0 || ih >= H || iw < 0 || iw >= W)
                                    continue;
                                acc += (double)inp[(((size_t)b * C + c) * H + ih) * W + iw] *
                                       weight[(((size_t)o * C + c) * KH + kh) * KW + kw];
                            }
                    out[(((size_t)b * OC + o) * OH + oh) * OW + ow] = (float)acc;
                }
}

void ct_conv2d_backward_ref(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int B, int C, int H, int W,
                            int OC, int KH, int KW, int stride, int pad)
{
    int OH, OW;
    ct_conv2d_out_size(H, W, KH, KW, stride, pad, &OH, &OW);
#define DOUT(b, o, oh, ow) dout[(((size_t)(b) * OC + (o)) * OH + (oh)) * OW + (ow)]
    /* dinp[b, c, ih, iw]: every output pixel whose window covers (ih, iw),
     * found by solving ih = oh * stride + kh - pad for oh. */
    if (dinp)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++)
                for (int ih = 0; ih < H; ih++)
                    for (int iw = 0; iw < W; iw++) {
                        double acc = 0.0;
                        for (int kh = 0; kh < KH; kh++) {
                            int th = ih + pad - kh;
                            if (th < 0 || th % stride || th / stride >= OH)
                                continue;
                            for (int kw = 0; kw < KW; kw++) {
                                int tw = iw + pad - kw;
                                if (tw < 0 || tw % stride || tw / stride >= OW)
                                    continue;
                                for (int o = 0; o < OC; o++)
                                    acc += (double)DOUT(b, o, th / stride, tw / stride) *
                                           weight[(((size_t)o * C + c) * KH + kh) * KW + kw];
                            }
                        }
                        dinp[(((size_t)b * C + c) * H + ih) * W + iw] = (float)acc;
                    }
    for (int o = 0; o < OC; o++)
        for (int c = 0; c < C; c++)
            for (int kh = 0; kh < KH; kh++)
                for (int kw = 0; kw < KW; kw++) {
                    double acc = 0.0;
                    for (int b = 0; b < B; b++)
                        for (int oh = 0; oh < OH; oh++) {
                            int ih = oh * stride + kh - pad;
                            if (ih < 0 || ih >= H)
                                continue;
                            for (int ow = 0; ow < OW; ow++) {
                                int iw = ow * stride + kw - pad;
                                if (iw < 0 || iw >= W)
                                    continue;
                                acc += (double)DOUT(b, o, oh, ow) *
                                       inp[(((size_t)b * C + c) * H + ih) * W + iw];
                            }
                        }
                    dweight[(((size_t)o * C + c) * KH + kh) * KW + kw] += (float)acc;
                }
    if (dbias)
        for (int o = 0; o < OC; o++) {
            double acc = 0.0;
            for (int b = 0; b < B; b++)
                for (int oh = 0; oh < OH; oh++)
                    for (int ow = 0; ow < OW; ow++)
                        acc += DOUT(b, o, oh, ow);
            dbias[o] += (float)acc;
        }
#undef DOUT
}
