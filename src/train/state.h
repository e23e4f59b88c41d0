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
 * Internal to src/train (included by trainer.c and cli eval).
 */
#ifndef CT_TRAIN_STATE_H
#define CT_TRAIN_STATE_H

#include "ckpt/ckpt.h"
#include "train/trainer-impl.h"

/* Collective: write a checkpoint of the trainer's current state. */
int ct__trainer_save(struct ct_trainer *tr);
/* Collective: restore everything from an opened checkpoint (verified by
 * ct_ckpt_open). Refuses a checkpoint of a different experiment (model,
 * optimizer, data, ...) with the differing keys; settings that do not
 * change the state may differ and are recorded for the next manifest. */
int ct__trainer_restore(struct ct_trainer *tr, const struct ct_ckpt *ck);
/* Restore only parameters and buffers (evaluation of a checkpoint). */
int ct__model_restore(struct ct_model *m, const struct ct_ckpt *ck);

#endif
