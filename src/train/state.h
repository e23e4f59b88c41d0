/* The trainer's state as checkpoint sections, and back (state_dict-style).
 *
 * Sections (all float32, replicated): "params/<name>" for every parameter,
 * "buffers/<name>" for every buffer (BatchNorm running statistics),
 * "optim/<state>/<name>" for every optimizer state tensor ("momentum_buffer",
 * "exp_avg", "exp_avg_sq"). Scalars: the optimizer's step count and kind,
 * the global step, the loader's position, the schedule's definition. Each
 * rank adds a rank record (src/ckpt: struct ct_rank_record): its host and
 * binding, its random streams (keys and next counters: Philox is
 * counter-based, so this is all the RNG state there is), and its loader
 * position.
 *
 * Internal to src/train and src/cli. The trainer's save and restore are
 * declared with the trainer's parts (trainer-impl.h); this header is what
 * needs only a model: eval, export and generate restore its parameters.
 */
#ifndef CT_TRAIN_STATE_H
#define CT_TRAIN_STATE_H

#include "ckpt/ckpt.h"
#include "nn/module.h"

/* Restore only parameters and buffers (evaluation of a checkpoint). */
int ct__model_restore(struct ct_model *m, const struct ct_ckpt *ck);

#endif
