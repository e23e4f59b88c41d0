/* Multi-head self-attention kernels, as in a pre-norm ViT/GPT block.
 *
 * Dims legend: B = batch (samples), T = tokens per sample, C = channels (model
 * width), NH = heads, hs = C / NH (head size; C % NH == 0).
 *
 *     qkv = inp . wqkv^T + bqkv                     (B, T, 3C): q | k | v
 *     per sample b and head h, with q, k, v the (T, hs) slices of head h:
 *         att = softmax(q k^T / sqrt(hs) [causal: -inf above the diagonal])
 *         y[b, :, h*hs:(h+1)*hs] = att v            (heads merged back: (B, T, C))
 *     out = y . wproj^T + bproj                     (B, T, C)
 *
 * Allocate ct_attention_workspace(B, T, C, NH) bytes per layer (kept from
 * forward to the same step's backward) and ct_attention_scratch() bytes for
 * the temporaries of one call of forward or backward (not kept; layers may
 * share it); the kernels never allocate. The workspace does not hold the
 * (B, NH, T, T) probabilities att: forward keeps each softmax row's max and
 * 1/sum, and backward recomputes att one (sample, head) at a time from them
 * and q k^T, bit for bit what forward used (one more q k^T product per head
 * for (B, NH, T, T) floats less: 50 MB per layer at GPT-2 small's T = 1024,
 * NH = 12, B = 1). Backward ACCUMULATES into the parameter gradients and
 * OVERWRITES dinp (NULL: skipped); bqkv/bproj may be NULL (then their
 * gradients too). The *_ref kernels are naive loops in double that tests
 * compare with. How the fast kernels avoid copies: docs/models.md.
 *
 *     float *ws = ct_arena_alloc(&arena, ct_attention_workspace(B, T, C, NH));
 *     float *scratch = ct_arena_alloc(&arena, ct_attention_scratch(B, T, C, NH));
 *     ct_attention_forward(out, ws, scratch, x, wqkv, bqkv, wproj, bproj, B, T, C, NH, 1);
 *     ...
 *     ct_attention_backward(dx, dwqkv, dbqkv, dwproj, dbproj, dout, ws, scratch, x, wqkv,
 *                           wproj, B, T, C, NH, 1);
 */
#ifndef CT_NN_ATTENTION_H
#define CT_NN_ATTENTION_H

#include <stddef.h>

/* Bytes of workspace for one attention layer at batch B (qkv, the softmax
 * rows' max and 1/sum, y), and of the scratch of one call (multiples of 64,
 * so that areas carved one after another stay aligned). */
size_t ct_attention_workspace(int B, int T, int C, int NH);
size_t ct_attention_scratch(int B, int T, int C, int NH);

/* out (B, T, C); ws: ct_attention_workspace() bytes, filled for backward;
 * scratch: ct_attention_scratch() bytes, overwritten (what backward needs is
 * in ws); inp (B, T, C); wqkv (3C, C); bqkv (3C) or NULL; wproj (C, C);
 * bproj (C) or NULL. causal != 0 masks key j > query i. */
void ct_attention_forward(float *out, float *ws, float *scratch, const float *inp,
                          const float *wqkv, const float *bqkv, const float *wproj,
                          const float *bproj, int B, int T, int C, int NH, int causal);

/* dinp (B, T, C) overwritten (NULL: skipped); dwqkv (3C, C), dbqkv (3C),
 * dwproj (C, C), dbproj (C) accumulated (the biases' may be NULL); dout
 * (B, T, C); ws as left by ct_attention_forward() on the same inp and
 * weights; scratch: ct_attention_scratch() bytes, overwritten. */
void ct_attention_backward(float *dinp, float *dwqkv, float *dbqkv, float *dwproj, float *dbproj,
                           const float *dout, const float *ws, float *scratch, const float *inp,
                           const float *wqkv, const float *wproj, int B, int T, int C, int NH,
                           int causal);

/* What forward saved in ws and what the last call left in scratch, for
 * inspection (tests check every product from them and ct_attention_probs):
 * from ws qkv (B, T, 3C), stats (B, NH, T, 2) each softmax row's max and
 * 1/sum (float)(1.0 / sum), y (B, T, C) the merged heads; from scratch dy
 * (B, T, C) and dqkv (B, T, 3C) after backward, att (T, T) the last
 * sample's last head's probabilities (after forward: forward's; after
 * backward: backward's recomputed ones), datt (T, T) that head's dS after
 * backward. scratch NULL: the last four are NULL. */
struct ct_attention_view {
    const float *qkv, *stats, *y, *dy, *dqkv, *att, *datt;
};
struct ct_attention_view ct_attention_view(const float *ws, const float *scratch, int B, int T,
                                           int C, int NH);

/* att (T, T): the probabilities of sample b's head h recomputed from ws as
 * ct_attention_forward() left it, as backward recomputes them: the same
 * bits as forward's. For inspection; the reference kernels' ws holds the
 * same quantities rounded from double, from which this gives their
 * probabilities to within float32 error only. */
void ct_attention_probs(float *att, const float *ws, int b, int h, int B, int T, int C, int NH,
                        int causal);

/* Naive references with the same contracts, workspace and scratch layouts. */
void ct_attention_forward_ref(float *out, float *ws, float *scratch, const float *inp,
                              const float *wqkv, const float *bqkv, const float *wproj,
                              const float *bproj, int B, int T, int C, int NH, int causal);
void ct_attention_backward_ref(float *dinp, float *dwqkv, float *dbqkv, float *dwproj,
                               float *dbproj, const float *dout, const float *ws, float *scratch,
                               const float *inp, const float *wqkv, const float *wproj, int B,
                               int T, int C, int NH, int causal);

#include "nn/module.h"

/* A multi-head self-attention module over (T, C) samples: parameters
 * "qkv.weight" (3C, C), "qkv.bias" (3C), "proj.weight" (C, C), "proj.bias"
 * (C), initialised as nn.Linear. NULL on bad sizes (NH must divide C). */
struct ct_module *ct_attention_new(int T, int C, int NH, int causal);

#endif
