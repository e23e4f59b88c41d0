/* Config -> plain parameter structs.
 *
 * The one place where the resolved config (struct ct_config) becomes the
 * parameter structs the lower modules take: the model spec, the optimizer's
 * hyper-parameters, the schedule, placement, gradient sync, the loader and
 * the batch arithmetic. Below src/train nothing reads a config; above it
 * (session, step, trainer) nothing reads a config section for a module.
 * Every function is pure: no allocation, no I/O, no MPI, so each mapping is
 * testable on its own.
 *
 * Not here: parsing and validating keys (src/config does that, through the
 * name tables the modules own: ct_model_names() (the model registry), ct_optim_kind_names,
 * ct_sched_kind_names, ct_placement_mode_names).
 *
 *     struct ct_batch_plan bp;
 *     if (ct_spec_batches(&cfg, world, &bp) < 0) ...;   // batch does not divide
 *     struct ct_model_spec ms;
 *     ct_spec_model(&cfg, &(struct ct_data_shape){1, 28, 28, 10}, &ms);
 */
#ifndef CT_TRAIN_SPEC_H
#define CT_TRAIN_SPEC_H

#include <stdint.h>

#include "config/config.h"
#include "data/loader.h"
#include "models/models.h"
#include "optim/optimizer.h"
#include "parallel/gradsync.h"
#include "parallel/placement.h"

/* What the data set says about the model's input and output. */
struct ct_data_shape {
    int c, h, w;
    int n_classes;
};

/* How a step's samples are cut. */
struct ct_batch_plan {
    int global_batch; /* samples per global step, all ranks */
    int local_batch;  /* this rank's: global_batch / world */
    int micro_batch;  /* rows per forward: local_batch / accum_steps */
    int accum_steps;
    int eval_batch;   /* rows per evaluation forward */
    int max_batch;    /* the activation arena's rows: max(micro, eval) */
    int deterministic; /* train.deterministic: micro_batch is train.micro_batch, for any world */
    int n_micro;      /* micro-batches in the global batch (deterministic mode) */
};

/* CT_ECONFIG naming the config file when world does not divide the global
 * batch or accum_steps does not divide the per-rank batch. In deterministic
 * mode the micro-batch is train.micro_batch (auto: global_batch /
 * accum_steps) for every world, so it must divide the global batch and the
 * world must divide the number of micro-batches (parallel/mbcut.h's cut);
 * BatchNorm is then per micro-batch (model.bn_sync = sync is refused). */
int ct_spec_batches(const struct ct_config *cfg, int world, struct ct_batch_plan *out);
/* The model named by model.* for inputs of shape `in`. */
void ct_spec_model(const struct ct_config *cfg, const struct ct_data_shape *in,
                   struct ct_model_spec *out);
struct ct_optimizer_params ct_spec_optimizer(const struct ct_config *cfg);
/* The global gradient norm the step clips to (optim.clip_norm; 0: off). */
double ct_spec_clip_norm(const struct ct_config *cfg);
/* The schedule over a run of `total_steps` global steps. */
struct ct_schedule ct_spec_schedule(const struct ct_config *cfg, int64_t total_steps);
struct ct_placement_params ct_spec_placement(const struct ct_config *cfg);
struct ct_gradsync_params ct_spec_gradsync(const struct ct_config *cfg);
struct ct_loader_params ct_spec_loader(const struct ct_config *cfg);
/* The training (train = 1) or test set's open params (the strings point
 * into cfg; augmentation only for training; shared = NULL). */
struct ct_dataset_params ct_spec_dataset(const struct ct_config *cfg, int train);

#endif
