/* The optimizer a run uses, behind one small interface: SGD or AdamW.
 *
 * The trainer (and, later, checkpoints) see an optimizer as a step function
 * over the flat parameter and gradient buffers, plus its state: flat buffers
 * with the parameters' layout, named like torch's per-parameter state
 * ("momentum_buffer", "exp_avg", "exp_avg_sq"), and a step count.
 *
 *     struct ct_optimizer opt;
 *     ct_optimizer_init(&opt, &hp, model.params.numel);   // hp.kind = CT_OPTIM_ADAMW, ...
 *     ct_optimizer_step(&opt, params, grads, n, lr);
 *     ct_optimizer_free(&opt);
 */
#ifndef CT_OPTIM_OPTIMIZER_H
#define CT_OPTIM_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "core/tensor.h"
#include "optim/adamw.h"
#include "optim/optim.h"

enum ct_optim_kind {
    CT_OPTIM_SGD,
    CT_OPTIM_ADAMW,
    CT_OPTIM_COUNT
};

struct ct_optimizer_params {
    enum ct_optim_kind kind;
    struct ct_sgd_params sgd;
    struct ct_adamw_params adamw;
};

#define CT_OPTIM_MAX_STATE 2

struct ct_optimizer {
    enum ct_optim_kind kind;
    struct ct_sgd sgd;
    struct ct_adamw adamw;
};

/* State for `numel` parameters: the whole flat buffer, or the slice of it
 * this rank updates (dist.shard_optimizer). Element i of every state
 * buffer goes with the i-th parameter passed to ct_optimizer_step. */
int ct_optimizer_init(struct ct_optimizer *opt, const struct ct_optimizer_params *hp,
                      size_t numel);
void ct_optimizer_free(struct ct_optimizer *opt);
void ct_optimizer_step(struct ct_optimizer *opt, float *params, const float *grads, size_t n,
                       double lr);
/* The same step in pieces (the sharded update overlaps each piece's
 * all-gather with the next piece's update): ct_optimizer_update over
 * elements [off, off + n) of the state, for pieces that cover it, then
 * ct_optimizer_count_step once. The bits are ct_optimizer_step's. */
void ct_optimizer_update(struct ct_optimizer *opt, size_t off, float *params, const float *grads,
                         size_t n, double lr);
void ct_optimizer_count_step(struct ct_optimizer *opt);
/* The state buffers (up to CT_OPTIM_MAX_STATE; no layout, the numel of
 * init) and their names; returns how many. SGD without momentum has none. */
int ct_optimizer_state(struct ct_optimizer *opt, struct ct_flat **bufs, const char **names);
/* Steps taken (torch's state["step"]). */
int64_t *ct_optimizer_steps(struct ct_optimizer *opt);
const char *ct_optim_kind_name(enum ct_optim_kind kind);
/* "sgd", "adamw", NULL: indexed by enum ct_optim_kind (the config's
 * optim.name parses through it). */
extern const char *const ct_optim_kind_names[CT_OPTIM_COUNT + 1];

#endif
