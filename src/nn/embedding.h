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
 *                 embedding's wte: no parameter of its own
 *
 *     struct ct_module *emb = ct_embedding_new(V, T, C);
 *     ct_model_add(&m, emb);
 *     ... blocks, final LayerNorm ...
 *     ct_model_add(&m, ct_lm_head_new(emb, T, C, V));
 *
 * The head borrows `emb` (the model owns both), so it must come after the
 * embedding in the same model; token ids must be in [0, V). Why the tied
 * gradient is final only after the embedding's backward, and why the bits
 * do not depend on threads: docs/models.md.
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
