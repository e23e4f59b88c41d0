/* 2-D convolution kernels (NCHW), as torch.nn.functional.conv2d with
 * dilation 1 and groups 1.
 *
 * Dims legend: B = batch, C = input channels, OC = output channels,
 * H, W = input height and width, OH, OW = output height and width,
 * KH, KW = kernel height and width, P = OH * OW output pixels per plane,
 * CKK = C * KH * KW (one column of the im2col matrix).
 *
 * The kernels are plain functions over raw buffers (outputs first, inputs
 * next, dimensions last). The fast ones unfold the input (im2col) and call
 * ct_sgemm (core/gemm.h: OpenBLAS, or our AVX-512 kernel); the *_ref ones
 * are direct convolution loops accumulating in double, kept as the
 * reference that tests compare against. Backward accumulates into dweight
 * and dbias and overwrites dinp. This file is only the arithmetic: the
 * module (parameters, init, workspace binding) lives elsewhere.
 *
 *     int OH, OW;
 *     ct_conv2d_out_size(H, W, KH, KW, stride, pad, &OH, &OW);
 *     float *ws = arena_alloc(ct_conv2d_workspace(Bmax, C, H, W, OC, KH, KW, stride, pad));
 *     ct_conv2d_forward(out, inp, weight, bias, ws, B, C, H, W, OC, KH, KW, stride, pad);
 *     ct_conv2d_backward(dinp, dweight, dbias, dout, inp, weight, ws, B, ...same dims...);
 *
 * Preconditions (checked by the module, not here): every dimension >= 1,
 * stride >= 1, pad >= 0, H + 2 pad >= KH and W + 2 pad >= KW.
 */
#ifndef CT_NN_CONV2D_H
#define CT_NN_CONV2D_H

#include <stddef.h>

/* OH = (H + 2 pad - KH) / stride + 1, OW likewise (floor, as PyTorch). */
void ct_conv2d_out_size(int H, int W, int KH, int KW, int stride, int pad, int *OH, int *OW);

/* Bytes of scratch the fast kernels need, a multiple of 64. A workspace sized
 * for B serves every batch of at most B samples. It only lives during one
 * call: backward recomputes the columns rather than keeping them from
 * forward. ws must be 8-byte aligned (it holds a few doubles); 64 bytes,
 * as the model's arena gives, is what sgemm likes best. */
size_t ct_conv2d_workspace(int B, int C, int H, int W, int OC, int KH, int KW, int stride, int pad);

/* How many samples one sgemm call covers (1 .. B). Small output planes are
 * unfolded several samples at a time so that one sgemm sees enough columns to
 * run near its peak. Exposed so that tests can choose shapes that exercise
 * both the one-sample and the grouped paths. */
int ct_conv2d_batch_group(int B, int C, int H, int W, int OC, int KH, int KW, int stride, int pad);

/* out (B, OC, OH, OW) = inp (B, C, H, W) * weight (OC, C, KH, KW) + bias (OC);
 * bias may be NULL. ws: ct_conv2d_workspace(B, ...) bytes. */
void ct_conv2d_forward(float *out, const float *inp, const float *weight, const float *bias,
                       float *ws, int B, int C, int H, int W, int OC, int KH, int KW, int stride,
                       int pad);

/* dinp (B, C, H, W) = gradient w.r.t. inp (overwritten; NULL: skipped);
 * dweight (OC, C, KH, KW) += gradient w.r.t. weight;
 * dbias (OC) += sums of dout over batch and pixels (NULL: skipped).
 * dout (B, OC, OH, OW). ws as for forward. */
void ct_conv2d_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, float *ws, int B, int C, int H,
                        int W, int OC, int KH, int KW, int stride, int pad);

/* Direct convolution, no workspace; same contracts as above. */
/* The bias gradient's sums as ct_conv2d_backward makes them: bsum[o] +=
 * the float sum (16 lanes) of each (sample, channel) plane of dout (B, OC,
 * P), in sample order; the caller adds (float)bsum to dbias once. For a
 * caller that runs the backward in chunks and wants the same bits as one
 * call over the whole batch (the fused conv block). */
void ct_conv2d_bias_sums(double *bsum, const float *dout, int B, int OC, size_t P);

void ct_conv2d_forward_ref(float *out, const float *inp, const float *weight, const float *bias,
                           int B, int C, int H, int W, int OC, int KH, int KW, int stride, int pad);
void ct_conv2d_backward_ref(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int B, int C, int H, int W,
                            int OC, int KH, int KW, int stride, int pad);

#include "nn/module.h"

/* A Conv2d module over (C, H, W) inputs with a square K x K kernel:
 * parameters "weight" (OC, C, K, K) and, if `bias`, "bias" (OC), initialised
 * as torch.nn.Conv2d. NULL on bad sizes or allocation failure. */
struct ct_module *ct_conv2d_new(int C, int H, int W, int OC, int K, int stride, int pad, int bias);

#endif
