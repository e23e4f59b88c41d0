/* Conv2d kernels: im2col + OpenBLAS sgemm, and the direct reference (see conv2d.h).
 *
 * Dims legend: B = batch, C = input channels, OC = output channels, H, W =
 * input size, OH, OW = output size, KH, KW = kernel size, P = OH * OW,
 * CKK = C * KH * KW, G = samples per sgemm (ct_conv2d_batch_group), N = G * P.
 *
 * Forward, per group of G samples: the input is unfolded into
 * col (CKK, G, P) (plus a row of ones that multiplies the bias), one sgemm
 * computes tmp (OC, G, P) = [weight | bias] (OC, CKK + 1) . col, and tmp is
 * scattered to out (G, OC, P). When G = 1 the sgemm writes straight into out.
 * Backward, per group: the same columns are rebuilt, dout is gathered to
 * dg (OC, G, P) (and summed for dbias while it is read), dweight += dg . col^T,
 * then col = weight^T . dg is folded back (col2im) into dinp. The cnn model's
 * layers (28x28 and 14x14 planes) run with G = 1. Padding is handled by
 * computing, once per kernel tap, the range of output pixels whose input lies
 * inside the image: the inner loops copy or add contiguous runs with no
 * bounds tests.
 *
 * The products go through ct_gemm (core/gemm.h): in fp32 ct_sgemm (OpenBLAS,
 * or our AVX-512 kernel where OpenBLAS runs narrower kernels than the CPU
 * has), in bf16 (train.precision) ct_bgemm.
 *
 * Not here: dilation, groups, and parallelism of our own (OpenBLAS may thread).
 */
#include "nn/conv2d.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/gemm_common.h"
#include "core/gemm.h"
#include "core/simd.h"

/* Unfold at least this many output columns per sgemm. OpenBLAS runs a single
 * sample's (OC, CKK) x (CKK, P) product near its peak once P is a couple of
 * hundred columns (measured with tests/bench/bench_conv.c: for the cnn layers,
 * P = 784 and 196, one sample per call is as fast as 5-40 samples per call,
 * and skips the scatter and gather); planes of 7x7 or 4x4 pixels gain up to
 * 1.5x from grouping. */
#ifndef CT_CONV_TARGET_COLS
#define CT_CONV_TARGET_COLS 256
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
    int G = CT_CONV_TARGET_COLS / (OH * OW);
    if (G > B)
        G = B;
    return G < 1 ? 1 : G;
}

/* Floats rounded up to a whole number of 64-byte lines, so that each part of
 * the workspace starts as aligned as the first. */
static size_t round16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The workspace: col (CKK + 1, G * P) | wb (OC, CKK + 1), which backward
 * uses as dwt (CKK, OC) (see dweight_products) | tmp (OC, G * P),
 * only when G > 1 | dbias partial sums (OC doubles). Forward with a bias
 * multiplies wb = [weight | bias] by col with a last row of ones, so that
 * sgemm adds the bias itself: a separate pass that seeds or adds the bias
 * cost 40% of the first cnn layer's forward (measured), one more term per
 * dot product costs nothing measurable. */
struct conv_ws {
    float *col, *wb, *tmp;
    double *bsum;
};

static size_t conv_ws_parts(int G, size_t P, size_t CKK, int OC, size_t part[3])
{
    part[0] = round16((CKK + 1) * G * P);
    part[1] = round16((size_t)OC * (CKK + 1));
    part[2] = G > 1 ? round16((size_t)OC * G * P) : 0;
    return part[0] + part[1] + part[2] + round16(2 * (size_t)OC);
}

static struct conv_ws conv_ws_carve(float *ws, int G, size_t P, size_t CKK, int OC)
{
    size_t part[3];
    conv_ws_parts(G, P, CKK, OC, part);
    /* The double part starts at a multiple of 16 floats from ws: aligned
     * for a double whenever ws is 8-byte aligned. */
    return (struct conv_ws){ws, ws + part[0], ws + part[0] + part[1],
                            (double *)(void *)(ws + part[0] + part[1] + part[2])};
}

size_t ct_conv2d_workspace(int B, int C, int H, int W, int OC, int KH, int KW, int stride, int pad)
{
    int OH, OW;
    ct_conv2d_out_size(H, W, KH, KW, stride, pad, &OH, &OW);
    int G = ct_conv2d_batch_group(B, C, H, W, OC, KH, KW, stride, pad);
    size_t part[3];
    return conv_ws_parts(G, (size_t)OH * OW, (size_t)C * KH * KW, OC, part) * sizeof(float);
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

/* ------------------------------------------------------------ AVX-512 im2col / col2im
 *
 * For stride 1 (every conv of the model zoo but the resnet's downsampling
 * ones): each output row of a column row is one shifted segment of an input
 * row, at most 16 pixels per step, moved with one masked load and one masked
 * store. The lanes that fall outside the image are masked off: loaded as
 * zeros (im2col) or left alone (col2im); a masked-off lane is never read, so
 * a segment that starts before its row is fine. This replaces ~3 small
 * memset/memcpy calls and a scalar edge loop per column row of the portable
 * kernels (their cost dominated im2col for 14x14 planes). Same data moved,
 * same additions in the same order: the same bits as the portable kernels. */
#if CT_HAVE_AVX512_KERNELS
#include <immintrin.h>

/* Lanes [lo, hi) of 16, clipped. */
static inline __mmask16 lane_range(int lo, int hi)
{
    lo = lo < 0 ? 0 : lo;
    hi = hi > 16 ? 16 : hi;
    if (hi <= lo)
        return 0;
    return (__mmask16)((((uint32_t)1 << hi) - 1) & ~(((uint32_t)1 << lo) - 1));
}

CT_TARGET_AVX512
static void im2col_s1_avx512(float *col, size_t ld, const float *img, int C, int H, int W,
                             int KH, int KW, int pad, int OH, int OW)
{
    const __m512 zero = _mm512_setzero_ps();
    for (int c = 0; c < C; c++) {
        const float *plane = img + (size_t)c * H * W;
        for (int kh = 0; kh < KH; kh++) {
            int oh0, oh1;
            valid_range(H, kh - pad, 1, OH, &oh0, &oh1);
            for (int kw = 0; kw < KW; kw++) {
                float *row = col + ((size_t)(c * KH + kh) * KW + kw) * ld;
                const int dw = kw - pad;
                for (int ow = 0; ow < OW; ow += 16) {
                    /* Lane j: output column ow + j (< OW), input column
                     * ow + j + dw (inside [0, W) or loaded as 0). */
                    const __mmask16 all = lane_range(0, OW - ow);
                    const __mmask16 in = all & lane_range(-(ow + dw), W - (ow + dw));
                    for (int oh = 0; oh < oh0; oh++)
                        _mm512_mask_storeu_ps(row + (size_t)oh * OW + ow, all, zero);
                    for (int oh = oh0; oh < oh1; oh++) {
                        const float *s = plane + (size_t)(oh + kh - pad) * W + ow;
                        _mm512_mask_storeu_ps(row + (size_t)oh * OW + ow, all,
                                              _mm512_maskz_loadu_ps(in, s + dw));
                    }
                    for (int oh = oh1; oh < OH; oh++)
                        _mm512_mask_storeu_ps(row + (size_t)oh * OW + ow, all, zero);
                }
            }
        }
    }
}

/* Gathers rather than scatters: each 16-pixel segment of the image sums
 * its taps in registers, in the portable kernel's (kh, kw) order starting
 * from 0, and is stored once. (Adding each tap into the image in turn, as
 * the portable kernel does, makes every masked load wait for the masked
 * store before it: masked stores do not forward to loads.) */
CT_TARGET_AVX512
static void col2im_s1_avx512(float *img, const float *col, size_t ld, int C, int H, int W,
                             int KH, int KW, int pad, int OH, int OW)
{
    for (int c = 0; c < C; c++) {
        float *plane = img + (size_t)c * H * W;
        const float *crow = col + (size_t)c * KH * KW * ld;
        for (int ih = 0; ih < H; ih++)
            for (int iw = 0; iw < W; iw += 16) {
                const __mmask16 all = lane_range(0, W - iw);
                __m512 acc = _mm512_setzero_ps();
                for (int kh = 0; kh < KH; kh++) {
                    const int oh = ih + pad - kh; /* output row whose tap kh reads row ih */
                    if (oh < 0 || oh >= OH)
                        continue;
                    for (int kw = 0; kw < KW; kw++) {
                        /* Lane j: pixel iw + j came from output column iw + j + pad - kw. */
                        const int ow = iw + pad - kw;
                        const __mmask16 in = all & lane_range(-ow, OW - ow);
                        const float *s = crow + (size_t)(kh * KW + kw) * ld + (size_t)oh * OW;
                        acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(in, s + ow));
                    }
                }
                _mm512_mask_storeu_ps(plane + (size_t)ih * W + iw, all, acc);
            }
    }
}
#endif

/* col rows (c, kh, kw), each ld floats apart, get the P values of one sample:
 * col[r * ld + oh * OW + ow] = img[c, oh*stride + kh - pad, ow*stride + kw - pad]
 * or 0 outside the image. img (C, H, W).
 *
 * With stride 1 and OW == W ("same" padding, the common case) a tap is a
 * fixed shift of the flat image, so the whole valid span of a row is one
 * memcpy and only the pad columns are zeroed afterwards. Otherwise each
 * output row is a run of its own. */
static void im2col(float *col, size_t ld, const float *img, int C, int H, int W, int KH, int KW,
                   int stride, int pad, int OH, int OW)
{
#if CT_HAVE_AVX512_KERNELS
    if (stride == 1 && ct_simd_avx512()) {
        im2col_s1_avx512(col, ld, img, C, H, W, KH, KW, pad, OH, OW);
        return;
    }
#endif
    const int flat = stride == 1 && OW == W;
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
                if (flat && oh1 > oh0 && n > 0) {
                    size_t start = (size_t)oh0 * OW + ow0, end = (size_t)(oh1 - 1) * OW + ow1;
                    const float *s = plane + (size_t)(oh0 + kh - pad) * W + (ow0 + kw - pad);
                    memcpy(row + start, s, (end - start) * sizeof(float));
                    for (int oh = oh0; oh < oh1; oh++) {
                        float *d = row + (size_t)oh * OW;
                        for (int ow = 0; ow < ow0; ow++)
                            d[ow] = 0.0f;
                        for (int ow = ow1; ow < OW; ow++)
                            d[ow] = 0.0f;
                    }
                } else {
                    for (int oh = oh0; oh < oh1; oh++) {
                        float *d = row + (size_t)oh * OW;
                        for (int ow = 0; ow < ow0; ow++)
                            d[ow] = 0.0f;
                        if (n > 0) {
                            const float *s = plane + (size_t)(oh * stride + kh - pad) * W +
                                             (ow0 * stride + kw - pad);
                            if (stride == 1)
                                memcpy(d + ow0, s, (size_t)n * sizeof(float));
                            else
                                for (int j = 0; j < n; j++)
                                    d[ow0 + j] = s[(size_t)j * stride];
                        }
                        for (int ow = ow1; ow < OW; ow++)
                            d[ow] = 0.0f;
                    }
                }
                memset(row + (size_t)oh1 * OW, 0, (size_t)(OH - oh1) * OW * sizeof(float));
            }
        }
    }
}

/* The adjoint of im2col: img (C, H, W) = sum over taps of the column values
 * that came from each pixel (img is overwritten). col is scratch and is
 * clobbered: in the flat case (see im2col) the pad columns of a row are
 * zeroed so that the row can be added to the shifted image in one run. */
static void col2im(float *img, float *col, size_t ld, int C, int H, int W, int KH, int KW,
                   int stride, int pad, int OH, int OW)
{
#if CT_HAVE_AVX512_KERNELS
    if (stride == 1 && ct_simd_avx512()) {
        col2im_s1_avx512(img, col, ld, C, H, W, KH, KW, pad, OH, OW);
        return;
    }
#endif
    const int flat = stride == 1 && OW == W;
    memset(img, 0, (size_t)C * H * W * sizeof(float));
    for (int c = 0; c < C; c++) {
        float *plane = img + (size_t)c * H * W;
        for (int kh = 0; kh < KH; kh++) {
            int oh0, oh1;
            valid_range(H, kh - pad, stride, OH, &oh0, &oh1);
            for (int kw = 0; kw < KW; kw++) {
                int ow0, ow1;
                valid_range(W, kw - pad, stride, OW, &ow0, &ow1);
                float *row = col + ((size_t)(c * KH + kh) * KW + kw) * ld;
                int n = ow1 - ow0;
                if (n <= 0)
                    continue;
                if (flat) {
                    if (oh1 <= oh0)
                        continue;
                    for (int oh = oh0; oh < oh1; oh++) {
                        float *r = row + (size_t)oh * OW;
                        for (int ow = 0; ow < ow0; ow++)
                            r[ow] = 0.0f;
                        for (int ow = ow1; ow < OW; ow++)
                            r[ow] = 0.0f;
                    }
                    size_t start = (size_t)oh0 * OW + ow0, end = (size_t)(oh1 - 1) * OW + ow1;
                    const float *s = row + start;
                    float *d = plane + (size_t)(oh0 + kh - pad) * W + (ow0 + kw - pad);
                    for (size_t j = 0; j < end - start; j++)
                        d[j] += s[j];
                    continue;
                }
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

/* dst (cols, rows) = src (rows, cols)^T, ld = the row lengths: 16 x 16
 * squares in registers where our AVX-512 kernels run, the edges (and
 * everything elsewhere) element by element. Copies: the same bits either way. */
static void transpose(float *restrict dst, const float *restrict src, int rows, int cols)
{
    int r0 = 0;
#if CT_HAVE_AVX512_KERNELS
    if (ct_simd_avx512()) {
        for (; r0 + 16 <= rows; r0 += 16)
            for (int c0 = 0; c0 + 16 <= cols; c0 += 16)
                ct__transpose16x16_u32((const uint32_t *)(src + (size_t)r0 * cols + c0), cols,
                                       (uint32_t *)(dst + (size_t)c0 * rows + r0), rows);
        const int c1 = cols & ~15;
        for (int r = 0; r < r0; r++) /* the right edge of the squares' rows */
            for (int c = c1; c < cols; c++)
                dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
    }
#endif
    for (int r = r0; r < rows; r++)
        for (int c = 0; c < cols; c++)
            dst[(size_t)c * rows + r] = src[(size_t)r * cols + c];
}

/* Whether the weight gradient is summed transposed (dweight_products). */
static int dweight_transposed(void)
{
    return ct_gemm_precision() == CT_PRECISION_FP32 &&
           strcmp(ct_sgemm_impl(), "ctrain-avx512") == 0;
}

/* dweight (OC, CKK) += d (OC, N) . cols (CKK, N)^T. With our fp32 kernel,
 * summed as dwt (CKK, OC) += cols . d^T instead, dwt holding dweight^T
 * (the caller transposes it in before the first call and out after the
 * last): our kernel copies a transposed B into rows block by block, and d
 * (OC x N) is 4.5 times smaller than cols for the cnn's second layer
 * (64 x 196 against 288 x 196 a sample), and for its first, 9 x 784, the
 * copy ran element by element (under 16 rows). Each element is the same
 * sum of the same products in the same k order, added to the same C: the
 * same bits as the plain product. */
static void dweight_products(float *dweight, float *dwt, const float *d, const float *cols,
                             int OC, int CKK, int N)
{
    if (dwt)
        ct_gemm(0, 1, CKK, OC, N, 1.0f, cols, N, d, N, 1.0f, dwt, OC);
    else
        ct_gemm(0, 1, OC, CKK, N, 1.0f, d, N, cols, N, 1.0f, dweight, CKK);
}

/* Sum of n floats in 16 independent lanes: the compiler turns the lanes
 * into vector adds, where one running sum would be a chain of dependent
 * scalar adds (for the cnn's first layer, that chain alone took longer than
 * the whole rest of its backward). */
static float sum_floats(const float *s, size_t n)
{
    float lane[16] = {0};
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++)
            lane[j] += s[i + j];
    float t = 0.0f;
    for (; i < n; i++)
        t += s[i];
    for (int j = 0; j < 16; j++)
        t += lane[j];
    return t;
}

void ct_conv2d_bias_sums(double *bsum, const float *dout, int B, int OC, size_t P)
{
    for (int b = 0; b < B; b++)
        for (int o = 0; o < OC; o++)
            bsum[o] += sum_floats(dout + ((size_t)b * OC + o) * P, P);
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
    const struct conv_ws w = conv_ws_carve(ws, G, P, CKK, OC);
    /* Pointwise single samples use the input as the columns: no room for a
     * row of ones there, so their bias is seeded into out (beta = 1). */
    const int direct = G == 1 && is_pointwise(KH, KW, stride, pad);
    const int aug = bias && !direct;
    const float *wm = weight;
    if (aug) {
        for (int o = 0; o < OC; o++) {
            memcpy(w.wb + o * (CKK + 1), weight + o * CKK, CKK * sizeof(float));
            w.wb[o * (CKK + 1) + CKK] = bias[o];
        }
        wm = w.wb;
    }
    const int K = (int)CKK + aug, lda = (int)CKK + aug;

    for (int b0 = 0; b0 < B; b0 += G) {
        const int g = B - b0 < G ? B - b0 : G;
        const size_t N = (size_t)g * P;
        if (direct) {
            float *dst = out + (size_t)b0 * OC * P;
            float beta = 0.0f;
            if (bias) {
                for (int o = 0; o < OC; o++)
                    for (size_t p = 0; p < P; p++)
                        dst[(size_t)o * P + p] = bias[o];
                beta = 1.0f;
            }
            ct_gemm(0, 0, OC, (int)P, (int)CKK, 1.0f, weight, (int)CKK,
                     inp + (size_t)b0 * C * HW, (int)P, beta, dst, (int)P);
            continue;
        }
        for (int i = 0; i < g; i++)
            im2col(w.col + (size_t)i * P, N, inp + (size_t)(b0 + i) * C * HW, C, H, W, KH, KW,
                   stride, pad, OH, OW);
        if (aug)
            for (size_t j = 0; j < N; j++)
                w.col[CKK * N + j] = 1.0f;
        /* One sample: sgemm writes its (OC, P) plane in place. */
        float *dst = g == 1 ? out + (size_t)b0 * OC * P : w.tmp;
        ct_gemm(0, 0, OC, (int)N, K, 1.0f, wm, lda, w.col, (int)N, 0.0f, dst, (int)N);
        if (g == 1)
            continue;
        /* tmp (OC, g, P) -> out (g, OC, P). */
        for (int i = 0; i < g; i++)
            for (int o = 0; o < OC; o++)
                memcpy(out + ((size_t)(b0 + i) * OC + o) * P, w.tmp + (size_t)o * N + (size_t)i * P,
                       P * sizeof(float));
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
    const struct conv_ws w = conv_ws_carve(ws, G, P, CKK, OC);

    /* dbias: each (sample, channel) plane is summed in float while it is
     * being read anyway (just before sgemm reads it again, from cache), and
     * the B plane sums per channel are added in double. */
    if (dbias)
        for (int o = 0; o < OC; o++)
            w.bsum[o] = 0.0;
    float *dwt = dweight_transposed() ? w.wb : NULL;
    if (dwt)
        transpose(dwt, dweight, OC, (int)CKK);

    for (int b0 = 0; b0 < B; b0 += G) {
        const int g = B - b0 < G ? B - b0 : G;
        const size_t N = (size_t)g * P;
        const float *x = inp + (size_t)b0 * C * HW;
        const float *d = dout + (size_t)b0 * OC * P;
        if (dbias)
            ct_conv2d_bias_sums(w.bsum, d, g, OC, P);
        const float *cols = w.col;
        if (g == 1) {
            if (pointwise)
                cols = x;
            else
                im2col(w.col, P, x, C, H, W, KH, KW, stride, pad, OH, OW);
        } else {
            /* Unfold g samples side by side and gather their dout planes in
             * the same (channel, sample, pixel) order. */
            for (int i = 0; i < g; i++) {
                im2col(w.col + (size_t)i * P, N, x + (size_t)i * C * HW, C, H, W, KH, KW, stride,
                       pad, OH, OW);
                for (int o = 0; o < OC; o++)
                    memcpy(w.tmp + (size_t)o * N + (size_t)i * P, d + ((size_t)i * OC + o) * P,
                           P * sizeof(float));
            }
            d = w.tmp;
        }
        dweight_products(dweight, dwt, d, cols, OC, (int)CKK, (int)N);
        if (!dinp)
            continue;
        float *dx = dinp + (size_t)b0 * C * HW;
        if (g == 1 && pointwise) {
            /* The columns are the input: dinp = weight^T . dout directly. */
            ct_gemm(1, 0, (int)CKK, (int)N, OC, 1.0f, weight, (int)CKK, d, (int)N, 0.0f, dx,
                     (int)N);
            continue;
        }
        /* col (CKK, N) = weight^T . d, then fold each sample back. */
        ct_gemm(1, 0, (int)CKK, (int)N, OC, 1.0f, weight, (int)CKK, d, (int)N, 0.0f, w.col,
                 (int)N);
        for (int i = 0; i < g; i++)
            col2im(dx + (size_t)i * C * HW, w.col + (size_t)i * P, N, C, H, W, KH, KW, stride,
                   pad, OH, OW);
    }
    if (dwt)
        transpose(dweight, dwt, (int)CKK, OC);
    if (dbias)
        for (int o = 0; o < OC; o++)
            dbias[o] += (float)w.bsum[o];
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

/* ---------------------------------------------------------------- module */

struct conv_ctx {
    int C, H, W, OC, K, stride, pad, bias, OH, OW;
};

static int conv_declare(struct ct_module *m, struct ct_decl *d)
{
    struct conv_ctx *c = m->ctx;
    int rc = ct_module_param(m, d, "weight", 4, (const int64_t[]){c->OC, c->C, c->K, c->K});
    if (rc >= 0 && c->bias)
        rc = ct_module_param(m, d, "bias", 1, (const int64_t[]){c->OC});
    return rc < 0 ? rc : 0;
}

static size_t conv_workspace(struct ct_module *m, int max_batch)
{
    struct conv_ctx *c = m->ctx;
    return ct_conv2d_workspace(max_batch, c->C, c->H, c->W, c->OC, c->K, c->K, c->stride, c->pad);
}

static void conv_init(struct ct_module *m, struct ct_rng_key key)
{
    struct conv_ctx *c = m->ctx;
    /* torch's Conv2d default: kaiming_uniform_(a=sqrt(5)) = U(+-1/sqrt(fan_in)),
     * and the bias U(+-1/sqrt(fan_in)) too. */
    float bound = 1.0f / sqrtf((float)(c->C * c->K * c->K));
    ct_init_uniform(m->p[0], (size_t)c->OC * c->C * c->K * c->K, bound, key, (uint32_t)m->view[0]);
    if (c->bias)
        ct_init_uniform(m->p[1], (size_t)c->OC, bound, key, (uint32_t)m->view[1]);
}

static void conv_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct conv_ctx *c = m->ctx;
    ct_conv2d_forward(out, inp, m->p[0], c->bias ? m->p[1] : NULL, m->ws, B, c->C, c->H, c->W,
                      c->OC, c->K, c->K, c->stride, c->pad);
}

static void conv_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                     const float *out, int B)
{
    (void)out;
    struct conv_ctx *c = m->ctx;
    ct_conv2d_backward(dinp, m->g[0], c->bias ? m->g[1] : NULL, dout, inp, m->p[0], m->ws, B,
                       c->C, c->H, c->W, c->OC, c->K, c->K, c->stride, c->pad);
}

/* The im2col product: (OC, C*K*K) x (C*K*K, OH*OW) a sample, padding taps
 * included (the gemm multiplies them); the input gradient's product
 * (weight^T . dout) as many, its col2im fold not counted. */
static struct ct_flops conv_flops(const struct ct_module *m, int need_dinp)
{
    const struct conv_ctx *c = m->ctx;
    return ct_flops_weight_product((double)c->OC * c->OH * c->OW * c->C * c->K * c->K, need_dinp);
}

static const struct ct_module_ops conv_ops = {
    .kind = "conv2d",
    .flops = conv_flops,
    .declare = conv_declare,
    .workspace = conv_workspace,
    .init = conv_init,
    .forward = conv_fwd,
    .backward = conv_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_conv2d_new(int C, int H, int W, int OC, int K, int stride, int pad, int bias)
{
    if (C < 1 || H < 1 || W < 1 || OC < 1 || K < 1 || stride < 1 || pad < 0 || H + 2 * pad < K ||
        W + 2 * pad < K)
        return NULL;
    int OH, OW;
    ct_conv2d_out_size(H, W, K, K, stride, pad, &OH, &OW);
    struct ct_module *m = ct_module_alloc(&conv_ops, (size_t)C * H * W, (size_t)OC * OH * OW,
                                          sizeof(struct conv_ctx));
    if (m) {
        struct conv_ctx *c = m->ctx;
        *c = (struct conv_ctx){.C = C, .H = H, .W = W, .OC = OC, .K = K, .stride = stride,
                               .pad = pad, .bias = bias != 0, .OH = OH, .OW = OW};
    }
    return m;
}
