/* Modules and the sequential model that holds them.
 *
 * Dims legend: B = rows in the batch (per rank), D = features per sample.
 *
 * A module is a small table of functions (struct ct_module_ops) plus the few
 * fields every module has: its dotted name ("layers.0"), the per-sample sizes
 * of its input and output, views of its parameters in the model's flat
 * buffers, and the train/eval flag. Kind-specific settings live behind `ctx`.
 * Forward and backward are plain functions over activation buffers:
 *
 *     forward (m, out, inp, B)                   out  (B, out_numel)
 *     backward(m, dinp, dout, inp, out, B)       dinp (B, in_numel), may be NULL
 *
 * Backward *accumulates* (+=) into the parameter gradients (so gradient
 * accumulation over micro-batches needs no extra code) and *overwrites* dinp
 * (so activation gradients need no zeroing). dinp is NULL for the first
 * module, whose input gradient nobody needs.
 *
 * The model (struct ct_model) is a sequential container: it names the modules
 * layers.0, layers.1, ... as PyTorch's nn.Sequential would, computes the
 * parameter layout before allocating anything, allocates the parameter and
 * gradient buffers and the activation arena once, and runs forward and
 * backward. A backward hook is called as soon as a module's parameter
 * gradients are final, so the gradient allreduce can start while backward
 * continues.
 *
 *     struct ct_model m;
 *     ct_model_init(&m, 784);
 *     ct_model_add(&m, ct_linear_new(784, 256, 1));
 *     ct_model_add(&m, ct_relu_new());
 *     ...
 *     ct_model_finalize(&m, max_batch);
 *     ct_model_init_params(&m, seed);
 *     memcpy(ct_model_input(&m), x, B * 784 * sizeof(float));
 *     const float *logits = ct_model_forward(&m, B);
 *     // write dlogits into ct_model_output_grad(&m), then
 *     ct_model_backward(&m, B, NULL, NULL);
 */
#ifndef CT_NN_MODULE_H
#define CT_NN_MODULE_H

#include <stddef.h>
#include <stdint.h>

#include "core/rng.h"
#include "core/tensor.h"

#define CT_MODULE_MAX_PARAMS 4

struct ct_module;

struct ct_module_ops {
    const char *kind; /* "linear", "relu", ... */
    /* Declare parameters with ct_module_param() (NULL: none). */
    int (*declare)(struct ct_module *m, struct ct_layout *lay);
    /* Initialise the bound parameters (NULL: none). `key` is the run's
     * CT_RNG_INIT key; use the view index as the stream so every tensor's
     * values depend only on the seed and its place in the model. */
    void (*init)(struct ct_module *m, struct ct_rng_key key);
    void (*forward)(struct ct_module *m, float *out, const float *inp, int B);
    void (*backward)(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                     const float *out, int B);
    /* Free ctx (NULL: plain free()). */
    void (*destroy)(struct ct_module *m);
};

struct ct_module {
    const struct ct_module_ops *ops;
    char name[CT_NAME_MAX];  /* "layers.0" */
    size_t in_numel;         /* per sample */
    size_t out_numel;        /* per sample */
    int n_params;
    int view[CT_MODULE_MAX_PARAMS];    /* index in the model's layout */
    float *p[CT_MODULE_MAX_PARAMS];    /* parameters (bound by the model) */
    float *g[CT_MODULE_MAX_PARAMS];    /* their gradients */
    int training;
    void *ctx;
};

/* For ops->declare: add "<m->name>.<suffix>" to the layout and remember it as
 * the module's next parameter. Returns the slot (0, 1, ...) or an error. */
int ct_module_param(struct ct_module *m, struct ct_layout *lay, const char *suffix, int ndim,
                    const int64_t *shape);

/* Fill p[0..n) with U(-bound, bound) drawn from Philox(key, (stream, i/4)). */
void ct_init_uniform(float *p, size_t n, float bound, struct ct_rng_key key, uint32_t stream);

void ct_module_free(struct ct_module *m);

/* Called from backward as soon as module `index`'s gradients are final
 * (modules finish in reverse order). */
typedef void (*ct_backward_hook)(void *ctx, int index);

struct ct_model {
    struct ct_module **mods;
    int n, cap;
    size_t in_numel;           /* per-sample input size */
    struct ct_layout layout;   /* parameter views, state_dict order */
    struct ct_flat params;
    struct ct_flat grads;      /* same layout as params */
    struct ct_arena arena;     /* activations */
    float **act;               /* act[0] input, act[i+1] output of module i: (max_batch, D) */
    float **dact;              /* gradients w.r.t. act[i] (dact[0] unused) */
    int max_batch;
    int training;
    int finalized;
};

void ct_model_init(struct ct_model *m, size_t in_numel);
/* Takes ownership of `mod` (also on failure). NULL (a failed constructor) is
 * reported as CT_ENOMEM. */
int ct_model_add(struct ct_model *m, struct ct_module *mod);
/* Lay out parameters, allocate params, grads and the activation arena for
 * batches up to max_batch rows. */
int ct_model_finalize(struct ct_model *m, int max_batch);
void ct_model_free(struct ct_model *m);

void ct_model_init_params(struct ct_model *m, uint64_t seed);
void ct_model_set_training(struct ct_model *m, int training);
void ct_model_zero_grad(struct ct_model *m);

static inline float *ct_model_input(const struct ct_model *m) { return m->act[0]; }
static inline size_t ct_model_out_numel(const struct ct_model *m)
{
    return m->n ? m->mods[m->n - 1]->out_numel : m->in_numel;
}
static inline float *ct_model_output_grad(const struct ct_model *m) { return m->dact[m->n]; }

/* Runs the modules on act[0] (B <= max_batch rows); returns the output. */
const float *ct_model_forward(struct ct_model *m, int B);
/* Back-propagates ct_model_output_grad() through all modules, calling
 * hook(ctx, i) after module i's parameter gradients are final. */
void ct_model_backward(struct ct_model *m, int B, ct_backward_hook hook, void *hook_ctx);

/* Number of parameters (padding excluded). */
size_t ct_model_param_count(const struct ct_model *m);

#endif
