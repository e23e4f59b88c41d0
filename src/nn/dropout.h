/* Dropout kernels with counter-based masks, as torch.nn.Dropout in training
 * (inverted dropout: kept values are scaled by 1/(1-p), so evaluation is the
 * identity and needs no kernel).
 *
 * Dims legend: B = batch rows (this rank), D = features per sample.
 *
 * The mask is a pure function of (seed, layer id, epoch, global sample
 * index, element index), never of the rank, the batch composition or the
 * row a sample sits in:
 *
 *     key     = ct_rng_key(seed, CT_RNG_DROPOUT)
 *     counter = {layer_id, (uint32_t)epoch, sample_index[b], j / 4}
 *     keep element j of row b  <=>  ct_rng_u01(word j % 4 of Philox(key, counter)) >= p
 *
 * so one Philox block serves four consecutive elements, D may be up to 2^34
 * elements per sample, and epochs are taken modulo 2^32. An element's mask
 * does not depend on D either. P(keep) = 1 - p up to the 2^-24 resolution of
 * ct_rng_u01. The module passes its stable id as layer_id and the step's
 * epoch and global sample indices (struct ct_forward_ctx).
 *
 * Not here: the module, the train/eval switch (eval is the identity), and
 * torch's own masks, which come from another generator and are not
 * reproduced.
 */
#ifndef CT_NN_DROPOUT_H
#define CT_NN_DROPOUT_H

#include <stddef.h>
#include <stdint.h>

/* out (B, D) = mask ? inp / (1 - p) : 0. mask (B, D) receives 1 for kept and
 * 0 for dropped elements, for backward; NULL: not saved (backward
 * recomputes it). sample_index (B): each row's global sample index.
 * 0 <= p <= 1; p = 0 is the identity (bit for bit), p = 1 gives zeros.
 * out may alias inp. */
void ct_dropout_forward(float *out, uint8_t *mask, const float *inp, const uint32_t *sample_index,
                        int B, size_t D, float p, uint64_t seed, uint32_t layer_id, int64_t epoch);

/* dinp (B, D) = mask ? dout / (1 - p) : 0, with the mask forward saved, or,
 * when mask is NULL, the same mask recomputed from (sample_index, seed,
 * layer_id, epoch) (which are unused otherwise). dinp may alias dout. */
void ct_dropout_backward(float *dinp, const float *dout, const uint8_t *mask,
                         const uint32_t *sample_index, int B, size_t D, float p, uint64_t seed,
                         uint32_t layer_id, int64_t epoch);

/* Just the mask (B, D), as forward would save it; for tests and tools. */
void ct_dropout_mask(uint8_t *mask, const uint32_t *sample_index, int B, size_t D, float p,
                     uint64_t seed, uint32_t layer_id, int64_t epoch);

#include "nn/module.h"

/* A Dropout(p) module over `numel` features per sample: masks keyed by the
 * run's seed, the module's id, the epoch and each row's global sample index
 * (from the model's forward context); the identity in eval mode. 0 <= p < 1. */
struct ct_module *ct_dropout_new(size_t numel, float p);

#endif
