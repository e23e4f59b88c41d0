/* Token and position embedding, and the tied language-model head, as in
 * GPT-2 (nanoGPT's transformer.wte / transformer.wpe / lm_head).
 *
 * Dims legend: B = samples, T = tokens per sample (the block), C = width,
 * V = vocabulary.
 *
 *     embedding   inp (B, T) token ids held as floats (exact below 2^24)
 *                 out (B, T, C) = wte[id[b, t]] + wpe[t]
 *                 parameters "wte.weight" (V, C), "wpe.weight" (T, C)
 *     lm head     inp (B, T, C) -> logits (B, T, V) = inp . wte^T, with the
 *                 embedding's wte: no parameter of its own (one tensor in the
 *                 flat buffer, used twice, its gradient the sum of both uses)
 *
 *     struct ct_module *emb = ct_embedding_new(V, T, C);
 *     ct_model_add(&m, emb);
 *     ... blocks, final LayerNorm ...
 *     ct_model_add(&m, ct_lm_head_new(emb, T, C, V));
 *
 * The head only borrows `emb` (the model owns both) and reads its bound
 * parameter and gradient at every call, so it must come after the embedding
 * in the same model. Since the embedding's parameter span is the only one
 * holding wte, its gradient is final (and its sync hook fires) only when the
 * embedding's own backward, the model's last, has added its part: the head's
 * part is accumulated first, in backward order.
 *
 * Backward of the embedding is a scatter-add of dout into the rows of wte
 * (and a sum over the batch into wpe), in sample order on one thread: the
 * same bits for any thread count. Forward and backward of the head go
 * through ct_sgemm (core/gemm.h). Token ids must be in [0, V): the data
 * layer and the sampler of `generate` guarantee it.
 */
#ifndef CT_NN_EMBEDDING_H
#define CT_NN_EMBEDDING_H

#include "nn/module.h"

/* NULL on bad sizes (any of V, T, C < 1) or out of memory. wte and wpe are
 * initialised N(0, 0.02^2), as GPT-2. */
struct ct_module *ct_embedding_new(int V, int T, int C);

/* The tied head of `emb` (a module made by ct_embedding_new with the same V
 * and C). NULL on a mismatch or out of memory. */
struct ct_module *ct_lm_head_new(struct ct_module *emb, int T, int C, int V);

#endif
