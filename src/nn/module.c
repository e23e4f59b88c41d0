/* Modules, chains and the sequential model: naming, layout, allocation,
 * forward and backward over the module tree (see module.h). */
#include "nn/module.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/trace.h"

static int add_view(struct ct_module *m, struct ct_layout *lay, const char *suffix, int ndim,
                    const int64_t *shape, int *slots, int *count, int max, const char *what)
{
    if (*count >= max)
        return ct_error_set(CT_EINVAL, "%s: more than %d %s", m->name, max, what);
    char name[CT_NAME_MAX];
    if (snprintf(name, sizeof name, "%s.%s", m->name, suffix) >= (int)sizeof name)
        return ct_error_set(CT_EINVAL, "%s.%s: name too long", m->name, suffix);
    int idx = ct_layout_add(lay, name, ndim, shape);
    if (idx < 0)
        return idx;
    slots[*count] = idx;
    return (*count)++;
}

int ct_module_param(struct ct_module *m, struct ct_decl *d, const char *suffix, int ndim,
                    const int64_t *shape)
{
    return add_view(m, d->params, suffix, ndim, shape, m->view, &m->n_params,
                    CT_MODULE_MAX_PARAMS, "parameters");
}

int ct_module_buffer(struct ct_module *m, struct ct_decl *d, const char *suffix, int ndim,
                     const int64_t *shape)
{
    return add_view(m, d->buffers, suffix, ndim, shape, m->bview, &m->n_buffers,
                    CT_MODULE_MAX_BUFFERS, "buffers");
}

int ct_module_add_child(struct ct_module *m, struct ct_module *child, const char *suffix)
{
    if (!child)
        return ct_error_set(CT_ENOMEM, "%s: cannot create child %s", m->ops->kind, suffix);
    if (child->span > 1) {
        ct_module_free(child);
        return ct_error_set(CT_EINVAL, "%s: a fused block (%s) can only be a layer of the model",
                            m->ops->kind, suffix);
    }
    struct ct_module **v = realloc(m->children, (size_t)(m->n_children + 1) * sizeof *v);
    if (!v) {
        ct_module_free(child);
        return ct_error_set(CT_ENOMEM, "%s: out of memory", m->ops->kind);
    }
    m->children = v;
    snprintf(child->suffix, sizeof child->suffix, "%s", suffix);
    m->children[m->n_children++] = child;
    return 0;
}

struct ct_module *ct_module_alloc(const struct ct_module_ops *ops, size_t in_numel,
                                  size_t out_numel, size_t ctx_size)
{
    struct ct_module *m = calloc(1, sizeof *m);
    void *ctx = ctx_size ? calloc(1, ctx_size) : NULL;
    if (!m || (ctx_size && !ctx)) {
        free(m);
        free(ctx);
        return NULL;
    }
    m->ops = ops;
    m->ctx = ctx;
    m->in_numel = in_numel;
    m->out_numel = out_numel;
    return m;
}

void ct_init_uniform(float *p, size_t n, float bound, struct ct_rng_key key, uint32_t stream)
{
    for (size_t i = 0; i < n; i += 4) {
        uint32_t r[4];
        ct_rng_block(key, (const uint32_t[4]){stream, (uint32_t)(i / 4), (uint32_t)((uint64_t)i >> 34), 0}, r);
        for (size_t j = 0; j < 4 && i + j < n; j++)
            p[i + j] = (2.0f * ct_rng_u01(r[j]) - 1.0f) * bound;
    }
}

void ct_init_normal(float *p, size_t n, float std, struct ct_rng_key key, uint32_t stream)
{
    for (size_t i = 0; i < n; i += 4) {
        uint32_t r[4];
        ct_rng_block(key, (const uint32_t[4]){stream, (uint32_t)(i / 4), (uint32_t)((uint64_t)i >> 34), 0}, r);
        for (size_t j = 0; j < 4 && i + j < n; j += 2) {
            /* u1 in (0, 1]: log never sees 0. In double, then one rounding. */
            double u1 = 1.0 - (double)(r[j] >> 8) * (1.0 / 16777216.0);
            double u2 = (double)(r[j + 1] >> 8) * (1.0 / 16777216.0);
            double rad = sqrt(-2.0 * log(u1)), th = 6.283185307179586 * u2;
            p[i + j] = (float)(std * rad * cos(th));
            if (i + j + 1 < n)
                p[i + j + 1] = (float)(std * rad * sin(th));
        }
    }
}

void ct_module_free(struct ct_module *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_children; i++)
        ct_module_free(m->children[i]);
    free(m->children);
    if (m->ops && m->ops->destroy)
        m->ops->destroy(m);
    else
        free(m->ctx);
    free(m);
}

void ct_module_forward(struct ct_module *m, float *out, const float *inp, int B)
{
    if (!ct_trace_on()) {
        m->ops->forward(m, out, inp, B);
        return;
    }
    const double t0 = ct_now_s();
    m->ops->forward(m, out, inp, B);
    ct_trace_span(CT_TRACE_MAIN, "module", m->name, t0, ct_now_s());
}

void ct_module_backward(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                        const float *out, int B)
{
    if (!ct_trace_on()) {
        m->ops->backward(m, dinp, dout, inp, out, B);
        return;
    }
    const double t0 = ct_now_s();
    m->ops->backward(m, dinp, dout, inp, out, B);
    ct_trace_span(CT_TRACE_MAIN, "module", m->name, t0, ct_now_s());
}

void ct_chain_forward(struct ct_module **mods, int n, float **act, int B)
{
    for (int i = 0; i < n; i++)
        ct_module_forward(mods[i], act[i + 1], act[i], B);
}

void ct_chain_backward(struct ct_module **mods, int n, float **act, float **dact, int B)
{
    for (int i = n - 1; i >= 0; i--)
        ct_module_backward(mods[i], dact[i], dact[i + 1], act[i], act[i + 1], B);
}

/* ---------------------------------------------------------------- the model */

void ct_model_init(struct ct_model *m, size_t in_numel)
{
    memset(m, 0, sizeof *m);
    m->in_numel = in_numel;
    m->training = 1;
}

int ct_model_add(struct ct_model *m, struct ct_module *mod)
{
    if (!mod)
        return ct_error_set(CT_ENOMEM, "model: cannot create layers.%d", m->n_layers);
    if (m->finalized) {
        ct_module_free(mod);
        return ct_error_set(CT_ESTATE, "model: add after finalize");
    }
    size_t expect = ct_model_out_numel(m);
    if (mod->in_numel != expect) {
        int rc = ct_error_set(CT_EINVAL, "layers.%d (%s): takes %zu inputs per sample but the previous layer gives %zu",
                              m->n_layers, mod->ops->kind, mod->in_numel, expect);
        ct_module_free(mod);
        return rc;
    }
    if (m->n == m->cap) {
        int cap = m->cap ? 2 * m->cap : 8;
        struct ct_module **v = realloc(m->mods, (size_t)cap * sizeof *v);
        if (!v) {
            ct_module_free(mod);
            return ct_error_set(CT_ENOMEM, "model: out of memory");
        }
        m->mods = v;
        m->cap = cap;
    }
    snprintf(mod->suffix, sizeof mod->suffix, "%d", m->n_layers);
    m->mods[m->n++] = mod;
    m->n_layers += mod->span > 1 ? mod->span : 1;
    return 0;
}

/* Depth-first pre-order walk over the module tree. */
typedef int (*walk_fn)(struct ct_model *model, struct ct_module *mod, void *arg);

static int walk(struct ct_model *model, struct ct_module **mods, int n, walk_fn fn, void *arg)
{
    for (int i = 0; i < n; i++) {
        int rc = fn(model, mods[i], arg);
        if (rc < 0)
            return rc;
        if ((rc = walk(model, mods[i]->children, mods[i]->n_children, fn, arg)) < 0)
            return rc;
    }
    return 0;
}

/* Names the children of mod, sets ids, the forward context and the mode
 * over its subtree: ids in depth-first pre-order. A module with span s > 1 (a fused block that
 * stands for s consecutive layers) reserves s ids, so that the modules after
 * it get the ids they would get with those layers unfused (dropout masks are
 * keyed by id), and its children are named after the layers they stand for:
 * in "layers.4", the child with suffix "1" is "layers.5". */
static int name_tree(struct ct_model *model, struct ct_module *mod, uint32_t *next_id)
{
    const uint32_t base = (*next_id)++;
    mod->id = base;
    mod->fwd = &model->fwd;
    mod->training = model->training;
    const char *dot = strrchr(mod->name, '.');
    for (int i = 0; i < mod->n_children; i++) {
        struct ct_module *c = mod->children[i];
        int n;
        if (mod->span > 1 && !dot)
            return ct_error_set(CT_EINVAL, "%s: a fused block must be a numbered layer", mod->name);
        if (mod->span > 1)
            n = snprintf(c->name, sizeof c->name, "%.*s.%ld", (int)(dot - mod->name), mod->name,
                         strtol(dot + 1, NULL, 10) + strtol(c->suffix, NULL, 10));
        else
            n = snprintf(c->name, sizeof c->name, "%s.%s", mod->name, c->suffix);
        if (n < 0 || n >= (int)sizeof c->name)
            return ct_error_set(CT_EINVAL, "%s.%s: name too long", mod->name, c->suffix);
        int rc = name_tree(model, c, next_id);
        if (rc < 0)
            return rc;
    }
    if (mod->span > 1 && *next_id < base + (uint32_t)mod->span)
        *next_id = base + (uint32_t)mod->span;
    return 0;
}

static int declare_one(struct ct_model *model, struct ct_module *mod, void *arg)
{
    struct ct_decl *d = arg;
    (void)model;
    return mod->ops->declare ? mod->ops->declare(mod, d) : 0;
}

static int bind_one(struct ct_model *model, struct ct_module *mod, void *arg)
{
    (void)arg;
    for (int j = 0; j < mod->n_params; j++) {
        mod->p[j] = ct_flat_view(&model->params, mod->view[j]);
        mod->g[j] = ct_flat_view(&model->grads, mod->view[j]);
    }
    for (int j = 0; j < mod->n_buffers; j++)
        mod->b[j] = ct_flat_view(&model->buffers, mod->bview[j]);
    return 0;
}

static int size_ws(struct ct_model *model, struct ct_module *mod, void *arg)
{
    size_t *bytes = arg;
    if (mod->ops->workspace)
        *bytes += ct_arena_round(mod->ops->workspace(mod, model->max_batch));
    return 0;
}

static int alloc_ws(struct ct_model *model, struct ct_module *mod, void *arg)
{
    (void)arg;
    if (!mod->ops->workspace)
        return 0;
    size_t bytes = mod->ops->workspace(mod, model->max_batch);
    mod->ws = ct_arena_alloc(&model->arena, bytes);
    if (!mod->ws && bytes)
        return ct_error_set(CT_ESTATE, "%s: workspace of %zu bytes does not fit the arena", mod->name, bytes);
    return 0;
}

/* Bytes of scratch the subtree of mod needs: its own, then (stacked after
 * it) the largest of its children's, which never run at the same time. */
static size_t scratch_need(const struct ct_model *model, struct ct_module *mod)
{
    size_t own = mod->ops->scratch ? ct_arena_round(mod->ops->scratch(mod, model->max_batch)) : 0;
    size_t kids = 0;
    for (int i = 0; i < mod->n_children; i++) {
        size_t k = scratch_need(model, mod->children[i]);
        kids = k > kids ? k : kids;
    }
    return own + kids;
}

static void bind_scratch(const struct ct_model *model, struct ct_module *mod, char *base)
{
    size_t own = mod->ops->scratch ? ct_arena_round(mod->ops->scratch(mod, model->max_batch)) : 0;
    mod->scratch = own ? base : NULL;
    for (int i = 0; i < mod->n_children; i++)
        bind_scratch(model, mod->children[i], base + own);
}

int ct_model_finalize(struct ct_model *m, int max_batch)
{
    if (m->finalized)
        return ct_error_set(CT_ESTATE, "model: finalized twice");
    if (max_batch < 1)
        return ct_error_set(CT_EINVAL, "model: max_batch %d", max_batch);
    m->max_batch = max_batch;
    uint32_t next_id = 0;
    int rc = 0;
    for (int i = 0; i < m->n && rc == 0; i++) {
        snprintf(m->mods[i]->name, sizeof m->mods[i]->name, "layers.%s", m->mods[i]->suffix);
        rc = name_tree(m, m->mods[i], &next_id);
    }
    struct ct_decl d = {&m->layout, &m->buffer_layout};
    if (rc == 0)
        rc = walk(m, m->mods, m->n, declare_one, &d);
    if (rc == 0)
        rc = ct_flat_alloc(&m->params, &m->layout);
    if (rc == 0)
        rc = ct_flat_alloc(&m->grads, &m->layout);
    if (rc == 0)
        rc = ct_flat_alloc(&m->buffers, &m->buffer_layout);
    if (rc == 0)
        rc = walk(m, m->mods, m->n, bind_one, NULL);
    if (rc < 0)
        return rc;

    /* One sizing pass, then one allocation: act[0..n]; dact[n] and the two
     * buffers that dact[1..n-1] alternate between (module i's backward reads
     * dact[i+1] and writes dact[i], nothing else); every module's workspace;
     * the scratch that the layers take turns to use. */
    size_t bytes = 0, inner = 0, scratch = 0;
    const int n_pp = m->n - 1 < 2 ? (m->n > 1 ? m->n - 1 : 0) : 2;
    for (int i = 0; i <= m->n; i++) {
        size_t dim = i == 0 ? m->in_numel : m->mods[i - 1]->out_numel;
        bytes += ct_arena_round((size_t)max_batch * dim * sizeof(float));
        if (i > 0 && i < m->n && dim > inner)
            inner = dim;
    }
    /* The output's gradient overwrites the output when the last module's
     * backward never reads its output (a language model's logits: one
     * (B*T, V) buffer, not two); the loss may work in place (loss.h). */
    const int out_in_place = m->n > 0 && m->mods[m->n - 1]->ops->backward_ignores_out;
    if (m->n > 0 && !out_in_place)
        bytes += ct_arena_round((size_t)max_batch * ct_model_out_numel(m) * sizeof(float));
    bytes += (size_t)n_pp * ct_arena_round((size_t)max_batch * inner * sizeof(float));
    if ((rc = walk(m, m->mods, m->n, size_ws, &bytes)) < 0)
        return rc;
    for (int i = 0; i < m->n; i++) {
        size_t k = scratch_need(m, m->mods[i]);
        scratch = k > scratch ? k : scratch;
    }
    if ((rc = ct_arena_init(&m->arena, bytes + scratch)) < 0)
        return rc;
    m->act = calloc((size_t)m->n + 1, sizeof *m->act);
    m->dact = calloc((size_t)m->n + 1, sizeof *m->dact);
    if (!m->act || !m->dact)
        return ct_error_set(CT_ENOMEM, "model: out of memory");
    for (int i = 0; i <= m->n; i++) {
        size_t dim = i == 0 ? m->in_numel : m->mods[i - 1]->out_numel;
        m->act[i] = ct_arena_alloc(&m->arena, (size_t)max_batch * dim * sizeof(float));
    }
    if (m->n > 0)
        m->dact[m->n] = out_in_place ? m->act[m->n]
                                     : ct_arena_alloc(&m->arena, (size_t)max_batch *
                                                                     ct_model_out_numel(m) * sizeof(float));
    float *pp[2] = {NULL, NULL};
    for (int k = 0; k < n_pp; k++)
        pp[k] = ct_arena_alloc(&m->arena, (size_t)max_batch * inner * sizeof(float));
    for (int i = 1; i < m->n; i++)
        m->dact[i] = pp[(m->n - 1 - i) % 2];
    if ((rc = walk(m, m->mods, m->n, alloc_ws, NULL)) < 0)
        return rc;
    char *sbase = scratch ? ct_arena_alloc(&m->arena, scratch) : NULL;
    if (scratch && !sbase)
        return ct_error_set(CT_ESTATE, "model: %zu bytes of scratch do not fit the arena", scratch);
    for (int i = 0; i < m->n; i++)
        bind_scratch(m, m->mods[i], sbase);
    m->finalized = 1;
    return 0;
}

void ct_model_free(struct ct_model *m)
{
    for (int i = 0; i < m->n; i++)
        ct_module_free(m->mods[i]);
    free(m->mods);
    free(m->act);
    free(m->dact);
    ct_arena_free(&m->arena);
    ct_flat_free(&m->params);
    ct_flat_free(&m->grads);
    ct_flat_free(&m->buffers);
    ct_layout_free(&m->layout);
    ct_layout_free(&m->buffer_layout);
    memset(m, 0, sizeof *m);
}

static int init_one(struct ct_model *model, struct ct_module *mod, void *arg)
{
    (void)model;
    if (mod->ops->init)
        mod->ops->init(mod, *(const struct ct_rng_key *)arg);
    return 0;
}

void ct_model_init_params(struct ct_model *m, uint64_t seed)
{
    struct ct_rng_key key = ct_rng_key(seed, CT_RNG_INIT);
    m->fwd.seed = seed;
    walk(m, m->mods, m->n, init_one, &key);
}

static int set_mode(struct ct_model *model, struct ct_module *mod, void *arg)
{
    (void)model;
    mod->training = *(const int *)arg;
    return 0;
}

void ct_model_set_training(struct ct_model *m, int training)
{
    m->training = training;
    walk(m, m->mods, m->n, set_mode, &training);
}

void ct_model_zero_grad(struct ct_model *m)
{
    memset(m->grads.data, 0, m->grads.numel * sizeof(float));
}

const float *ct_model_forward(struct ct_model *m, int B)
{
    ct_chain_forward(m->mods, m->n, m->act, B);
    return m->act[m->n];
}

void ct_model_backward(struct ct_model *m, int B, ct_backward_hook hook, void *hook_ctx)
{
    for (int i = m->n - 1; i >= 0; i--) {
        struct ct_module *mod = m->mods[i];
        ct_module_backward(mod, i > 0 ? m->dact[i] : NULL, m->dact[i + 1], m->act[i],
                           m->act[i + 1], B);
        if (hook)
            hook(hook_ctx, i);
    }
}

struct ct_flops ct_module_flops(const struct ct_module *m, int need_dinp)
{
    if (m->ops->flops)
        return m->ops->flops(m, need_dinp);
    struct ct_flops f = {0, 0};
    for (int i = 0; i < m->n_children; i++) {
        struct ct_flops c = ct_module_flops(m->children[i], need_dinp);
        f.fwd += c.fwd;
        f.bwd += c.bwd;
    }
    return f;
}

struct ct_flops ct_model_flops(const struct ct_model *m)
{
    struct ct_flops f = {0, 0};
    for (int i = 0; i < m->n; i++) {
        struct ct_flops c = ct_module_flops(m->mods[i], i > 0);
        f.fwd += c.fwd;
        f.bwd += c.bwd;
    }
    return f;
}

size_t ct_model_param_count(const struct ct_model *m) { return ct_layout_count(&m->layout); }

static void widen_span(const struct ct_layout *lay, const struct ct_module *mod, size_t *begin,
                       size_t *end)
{
    for (int k = 0; k < mod->n_params; k++) {
        const struct ct_view *v = &lay->views[mod->view[k]];
        if (v->offset < *begin)
            *begin = v->offset;
        if (v->offset + v->numel > *end)
            *end = v->offset + v->numel;
    }
    for (int c = 0; c < mod->n_children; c++)
        widen_span(lay, mod->children[c], begin, end);
}

void ct_model_param_span(const struct ct_model *m, int index, size_t *begin, size_t *end)
{
    *begin = SIZE_MAX;
    *end = 0;
    widen_span(&m->layout, m->mods[index], begin, end);
    if (*begin > *end)
        *begin = *end = 0; /* no parameters */
}
