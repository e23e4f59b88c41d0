/* Modules and the sequential model that holds them.
 *
 * Dims legend: B = rows in the batch (per rank), D = features per sample.
 *
 * A module is a small table of functions (struct ct_module_ops) plus its
 * dotted name, per-sample input and output sizes, and views of its
 * parameters in the model's flat buffers. Backward ACCUMULATES (+=) into the
 * parameter gradients and OVERWRITES dinp (NULL for the first module). The
 * model names its modules layers.0, layers.1, ... as nn.Sequential, lays out
 * and allocates everything once, and calls a hook as soon as a module's
 * gradients are final (so the allreduce can start during backward). Not
 * here: the kernels (one header each) and the zoo (models/models.h). The
 * module contract, buffers, workspaces and FLOP counting are explained in
 * docs/models.md and docs/performance.md.
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

#define CT_MODULE_MAX_PARAMS 8
#define CT_MODULE_MAX_BUFFERS 4

struct ct_module;

/* The forward context: what the current forward and backward run on, beyond
 * their activations. One per model, shared by all its modules; filled by
 * the caller (the trainer's step, evaluation, generation), read by modules
 * (dropout's keys, synchronized BatchNorm's cross-rank sums). */
struct ct_forward_ctx {
    int64_t epoch;
    const uint32_t *sample_index; /* (B) global index of each row's sample; NULL if unknown */
    uint64_t seed;                /* the run's seed */
    /* Sum n doubles across all ranks in place (NULL: a single rank). */
    int (*allreduce_sum)(void *ctx, double *buf, size_t n);
    void *allreduce_ctx;
    /* The first error a module hit during forward or backward (0: none):
     * forward and backward return nothing, so a failing cross-rank sum is
     * recorded here for the trainer to check after the step. */
    int status;
};

/* FLOPs of one sample through a module, for MFU: matrix products only (a
 * multiply-add is 2 FLOPs); backward counts the weight gradient and, when
 * need_dinp, the input gradient; elementwise work counts 0 (the full rule:
 * docs/performance.md). Doubles: exact integers up to 2^53. */
struct ct_flops {
    double fwd, bwd;
};

/* Where declare() puts things. */
struct ct_decl {
    struct ct_layout *params;
    struct ct_layout *buffers;
};

struct ct_module_ops {
    const char *kind; /* "linear", "relu", ... */
    /* Declare parameters with ct_module_param() and buffers with
     * ct_module_buffer() (NULL: none). Children are declared by the model
     * after their parent, in order (state_dict order). */
    int (*declare)(struct ct_module *m, struct ct_decl *d);
    /* Bytes of workspace for batches of up to max_batch rows (NULL: none):
     * memory of this module alone, kept from forward to backward. */
    size_t (*workspace)(struct ct_module *m, int max_batch);
    /* Bytes of scratch for batches of up to max_batch rows (NULL: none):
     * memory valid only during one call of forward or backward. Modules
     * that never run at the same time share it (the model lays scratch out
     * as a stack: a child's follows its parent's, siblings and the model's
     * layers all start at the same place), so nothing may be kept in it
     * from one call to the next. */
    size_t (*scratch)(struct ct_module *m, int max_batch);
    /* Initialise the bound parameters (NULL: none). `key` is the run's
     * CT_RNG_INIT key; use the view index as the stream so every tensor's
     * values depend only on the seed and its place in the model. */
    void (*init)(struct ct_module *m, struct ct_rng_key key);
    void (*forward)(struct ct_module *m, float *out, const float *inp, int B);
    void (*backward)(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                     const float *out, int B);
    /* Free ctx (NULL: plain free()). */
    void (*destroy)(struct ct_module *m);
    /* Matrix-product FLOPs of one sample, forward and backward (struct
     * ct_flops); need_dinp = 0 when backward gets dinp == NULL. NULL: the sum
     * of the children's (each with the same need_dinp), 0 without children. */
    struct ct_flops (*flops)(const struct ct_module *m, int need_dinp);
    /* 1: backward never reads `out`, so a container may let the module write
     * its output where it wants the result and change it afterwards (a
     * residual block adds its shortcut in place: one buffer fewer per
     * block). 0, the safe default: backward gets out as forward left it. */
    int backward_ignores_out;
    /* 1: forward run again on the same input gives the same output bit for
     * bit and leaves the workspace as the first run did (no randomness, no
     * running statistics, nothing accumulated), and it is cheap: a container
     * may drop the output after forward and recompute it in backward where
     * it is needed, as llm.c recomputes LayerNorm. 0: never recomputed. */
    int forward_recomputable;
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
    int n_buffers;
    int bview[CT_MODULE_MAX_BUFFERS];  /* index in the model's buffer layout */
    float *b[CT_MODULE_MAX_BUFFERS];   /* buffers (bound by the model) */
    void *ws;                          /* workspace (bound by the model), 64-byte aligned */
    void *scratch;                     /* scratch (bound by the model, shared), 64-byte aligned */
    struct ct_forward_ctx *fwd;        /* the model's; never NULL once finalized */
    uint32_t id;                       /* depth-first position in the model: a stable stream id */
    /* Layers of the sequential model this module stands for: 0 or 1 for a
     * plain module; s > 1 for a fused block that computes s consecutive
     * layers in one (conv-BN-ReLU-pool: 4). Its children are named after
     * those layers (suffix "k": layers.<index + k>) and it reserves s ids,
     * so a model with and without fusion has the same state_dict names and
     * the same dropout streams. Only at the model's top level. */
    int span;
    int training;
    /* Containers: children, run by the container itself. Each child is named
     * "<parent name>.<suffix>". Owned: freed with the parent. */
    struct ct_module **children;
    int n_children;
    char suffix[32];
    void *ctx;
};

/* For ops->declare: add "<m->name>.<suffix>" to the parameter layout and
 * remember it as the module's next parameter. Returns the slot (0, 1, ...) or
 * an error. */
int ct_module_param(struct ct_module *m, struct ct_decl *d, const char *suffix, int ndim,
                    const int64_t *shape);
/* The same for a buffer (running statistics and other untrained state). */
int ct_module_buffer(struct ct_module *m, struct ct_decl *d, const char *suffix, int ndim,
                     const int64_t *shape);
/* For containers: append a child named "<m->name>.<suffix>" (takes ownership,
 * also on failure; NULL child = a failed constructor, CT_ENOMEM). */
int ct_module_add_child(struct ct_module *m, struct ct_module *child, const char *suffix);
/* A plain module struct with ops and sizes set, ctx = calloc(ctx_size)
 * (NULL on allocation failure). */
struct ct_module *ct_module_alloc(const struct ct_module_ops *ops, size_t in_numel,
                                  size_t out_numel, size_t ctx_size);
/* Run modules[0..n) in a chain: act[i+1] = mods[i](act[i]); and back:
 * dact[i] from dact[i+1] (dact[0] may be NULL: the chain's input gradient is
 * not needed). For the model and for containers. */
void ct_chain_forward(struct ct_module **mods, int n, float **act, int B);
void ct_chain_backward(struct ct_module **mods, int n, float **act, float **dact, int B);
/* One module's forward or backward, as the chains and the model run them:
 * under log.trace also a span of cat "module" named m->name (core/trace.h),
 * so a container that runs its children itself calls these. */
void ct_module_forward(struct ct_module *m, float *out, const float *inp, int B);
void ct_module_backward(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                        const float *out, int B);

/* Fill p[0..n) with U(-bound, bound) drawn from Philox(key, (stream, i/4)). */
void ct_init_uniform(float *p, size_t n, float bound, struct ct_rng_key key, uint32_t stream);
/* Fill p[0..n) with N(0, std^2): Box-Muller over the uniforms of
 * Philox(key, (stream, i/4)), two normals from each pair of words (values
 * depend only on the key, the stream and i). */
void ct_init_normal(float *p, size_t n, float std, struct ct_rng_key key, uint32_t stream);

void ct_module_free(struct ct_module *m);

/* The FLOPs of a weight product of `macs` multiply-adds per sample:
 * forward 2 macs; backward 2 macs for the weight gradient plus, with
 * need_dinp, 2 macs for the input gradient. */
static inline struct ct_flops ct_flops_weight_product(double macs, int need_dinp)
{
    return (struct ct_flops){2.0 * macs, 2.0 * macs * (need_dinp ? 2 : 1)};
}

/* ops->flops of m, or its default (see struct ct_module_ops). */
struct ct_flops ct_module_flops(const struct ct_module *m, int need_dinp);

/* Called from backward as soon as module `index`'s gradients are final
 * (modules finish in reverse order). */
typedef void (*ct_backward_hook)(void *ctx, int index);

struct ct_model {
    struct ct_module **mods;
    int n, cap;
    int n_layers;              /* sequential indices taken (fused blocks take several) */
    size_t in_numel;           /* per-sample input size */
    struct ct_layout layout;   /* parameter views, state_dict order */
    struct ct_flat params;
    struct ct_flat grads;      /* same layout as params */
    struct ct_layout buffer_layout; /* buffers (BatchNorm running stats...) */
    struct ct_flat buffers;
    struct ct_forward_ctx fwd; /* shared by all modules */
    struct ct_arena arena;     /* activations, workspaces, gradient buffers, scratch */
    float **act;               /* act[0] input, act[i+1] output of module i: (max_batch, D) */
    /* Gradients w.r.t. act[i] (dact[0] unused): dact[n] is the output's own
     * buffer; dact[1..n-1] alternate between two buffers (only dact[i+1]
     * and dact[i] are live while module i runs backward), so after backward
     * dact[1] and dact[2] hold their gradients, the others may not. */
    float **dact;
    int max_batch;
    int training;
    int finalized;
};

void ct_model_init(struct ct_model *m, size_t in_numel);
/* Takes ownership of `mod` (also on failure). NULL (a failed constructor) is
 * reported as CT_ENOMEM. */
int ct_model_add(struct ct_model *m, struct ct_module *mod);
/* Name the modules, lay out parameters and buffers, allocate params, grads,
 * buffers and the arena (activations and workspaces) for batches up to
 * max_batch rows. */
int ct_model_finalize(struct ct_model *m, int max_batch);
void ct_model_free(struct ct_model *m);

/* Initialise every parameter from the seed (and buffers to their defaults). */
void ct_model_init_params(struct ct_model *m, uint64_t seed);
void ct_model_set_training(struct ct_model *m, int training);
void ct_model_zero_grad(struct ct_model *m);

static inline float *ct_model_input(const struct ct_model *m) { return m->act[0]; }
static inline size_t ct_model_out_numel(const struct ct_model *m)
{
    return m->n ? m->mods[m->n - 1]->out_numel : m->in_numel;
}
/* Where backward reads the output's gradient from. When the last module's
 * backward ignores its output (backward_ignores_out: every model this
 * project builds) it IS the output buffer: writing it overwrites the output
 * (ct_xent_forward_backward may work in place), so read the output first. */
static inline float *ct_model_output_grad(const struct ct_model *m) { return m->dact[m->n]; }

/* Runs the modules on act[0] (B <= max_batch rows); returns the output. */
const float *ct_model_forward(struct ct_model *m, int B);
/* Back-propagates ct_model_output_grad() through all modules, calling
 * hook(ctx, i) after module i's parameter gradients are final. */
void ct_model_backward(struct ct_model *m, int B, ct_backward_hook hook, void *hook_ctx);

/* FLOPs of one sample through the whole model (the first module without
 * its input gradient, as ct_model_backward runs it). */
struct ct_flops ct_model_flops(const struct ct_model *m);

/* Number of parameters (padding excluded). */
size_t ct_model_param_count(const struct ct_model *m);
/* The elements [*begin, *end) of the flat parameter (and gradient) buffers
 * that module `index` and its children own, padding between their views
 * included; begin == end == 0 for a module without parameters. The layout
 * is in module order, so these spans increase with the index: a gradient
 * sync plans its buckets over them. */
void ct_model_param_span(const struct ct_model *m, int index, size_t *begin, size_t *end);

#endif
