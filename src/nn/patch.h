/* Patch embedding with learned positional embeddings (the input layer of a
 * Vision Transformer).
 *
 * Dims legend: B batch, C image channels, H, W image size, P patch size,
 * T = (H/P)*(W/P) tokens, D token width, K = C*P*P values per patch.
 *
 * Each non-overlapping P x P patch is flattened in (c, i, j) order -- the
 * order of a Conv2d(C, D, kernel P, stride P) weight, which this layer
 * equals -- and projected: tokens (B, T, D) = patches (B*T, K) . weight^T
 * + bias + pos[t]. Parameters: "weight" (D, K), "bias" (D), "pos" (T, D).
 */
#ifndef CT_NN_PATCH_H
#define CT_NN_PATCH_H

#include "nn/module.h"

/* (C, H, W) -> (T, D); H and W must be multiples of P (NULL otherwise). */
struct ct_module *ct_patch_embed_new(int C, int H, int W, int P, int D);

/* patches (B, T, K) from images (B, C, H, W), and back (accumulating). */
void ct_patch_extract(float *patches, const float *img, int B, int C, int H, int W, int P);
void ct_patch_scatter(float *dimg, const float *dpatches, int B, int C, int H, int W, int P);

#endif
