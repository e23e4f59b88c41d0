/* The sequential model: layout, allocation, forward and backward over the
 * modules (see module.h). */
#include "nn/module.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

int ct_module_param(struct ct_module *m, struct ct_layout *lay, const char *suffix, int ndim,
                    const int64_t *shape)
{
    if (m->n_params >= CT_MODULE_MAX_PARAMS)
        return ct_error_set(CT_EINVAL, "%s: more than %d parameters", m->name, CT_MODULE_MAX_PARAMS);
    char name[CT_NAME_MAX];
    if (snprintf(name, sizeof name, "%s.%s", m->name, suffix) >= (int)sizeof name)
        return ct_error_set(CT_EINVAL, "%s.%s: name too long", m->name, suffix);
    int idx = ct_layout_add(lay, name, ndim, shape);
    if (idx < 0)
        return idx;
    m->view[m->n_params] = idx;
    return m->n_params++;
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

void ct_module_free(struct ct_module *m)
{
    if (!m)
        return;
    if (m->ops && m->ops->destroy)
        m->ops->destroy(m);
    else
        free(m->ctx);
    free(m);
}

void ct_model_init(struct ct_model *m, size_t in_numel)
{
    memset(m, 0, sizeof *m);
    m->in_numel = in_numel;
    m->training = 1;
}

int ct_model_add(struct ct_model *m, struct ct_module *mod)
{
    if (!mod)
        return ct_error_set(CT_ENOMEM, "model: cannot create module %d", m->n);
    if (m->finalized) {
        ct_module_free(mod);
        return ct_error_set(CT_ESTATE, "model: add after finalize");
    }
    size_t expect = ct_model_out_numel(m);
    if (mod->in_numel != expect) {
        int rc = ct_error_set(CT_EINVAL, "layers.%d (%s): takes %zu inputs per sample but the previous layer gives %zu",
                              m->n, mod->ops->kind, mod->in_numel, expect);
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
    snprintf(mod->name, sizeof mod->name, "layers.%d", m->n);
    mod->training = m->training;
    m->mods[m->n++] = mod;
    return 0;
}

int ct_model_finalize(struct ct_model *m, int max_batch)
{
    if (m->finalized)
        return ct_error_set(CT_ESTATE, "model: finalized twice");
    if (max_batch < 1)
        return ct_error_set(CT_EINVAL, "model: max_batch %d", max_batch);
    int rc;
    for (int i = 0; i < m->n; i++) {
        struct ct_module *mod = m->mods[i];
        if (mod->ops->declare && (rc = mod->ops->declare(mod, &m->layout)) < 0)
            return rc;
    }
    if ((rc = ct_flat_alloc(&m->params, &m->layout)) < 0)
        return rc;
    if ((rc = ct_flat_alloc(&m->grads, &m->layout)) < 0)
        return rc;
    for (int i = 0; i < m->n; i++) {
        struct ct_module *mod = m->mods[i];
        for (int j = 0; j < mod->n_params; j++) {
            mod->p[j] = ct_flat_view(&m->params, mod->view[j]);
            mod->g[j] = ct_flat_view(&m->grads, mod->view[j]);
        }
    }

    /* One sizing pass, then one allocation: act[0..n] and dact[1..n]. */
    size_t bytes = 0;
    for (int i = 0; i <= m->n; i++) {
        size_t d = i == 0 ? m->in_numel : m->mods[i - 1]->out_numel;
        size_t one = ct_arena_round((size_t)max_batch * d * sizeof(float));
        bytes += i == 0 ? one : 2 * one;
    }
    if ((rc = ct_arena_init(&m->arena, bytes)) < 0)
        return rc;
    m->act = calloc((size_t)m->n + 1, sizeof *m->act);
    m->dact = calloc((size_t)m->n + 1, sizeof *m->dact);
    if (!m->act || !m->dact)
        return ct_error_set(CT_ENOMEM, "model: out of memory");
    for (int i = 0; i <= m->n; i++) {
        size_t d = i == 0 ? m->in_numel : m->mods[i - 1]->out_numel;
        m->act[i] = ct_arena_alloc(&m->arena, (size_t)max_batch * d * sizeof(float));
        if (i > 0)
            m->dact[i] = ct_arena_alloc(&m->arena, (size_t)max_batch * d * sizeof(float));
    }
    m->max_batch = max_batch;
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
    ct_layout_free(&m->layout);
    memset(m, 0, sizeof *m);
}

void ct_model_init_params(struct ct_model *m, uint64_t seed)
{
    struct ct_rng_key key = ct_rng_key(seed, CT_RNG_INIT);
    for (int i = 0; i < m->n; i++)
        if (m->mods[i]->ops->init)
            m->mods[i]->ops->init(m->mods[i], key);
}

void ct_model_set_training(struct ct_model *m, int training)
{
    m->training = training;
    for (int i = 0; i < m->n; i++)
        m->mods[i]->training = training;
}

void ct_model_zero_grad(struct ct_model *m)
{
    memset(m->grads.data, 0, m->grads.numel * sizeof(float));
}

const float *ct_model_forward(struct ct_model *m, int B)
{
    for (int i = 0; i < m->n; i++)
        m->mods[i]->ops->forward(m->mods[i], m->act[i + 1], m->act[i], B);
    return m->act[m->n];
}

void ct_model_backward(struct ct_model *m, int B, ct_backward_hook hook, void *hook_ctx)
{
    for (int i = m->n - 1; i >= 0; i--) {
        struct ct_module *mod = m->mods[i];
        mod->ops->backward(mod, i > 0 ? m->dact[i] : NULL, m->dact[i + 1], m->act[i],
                           m->act[i + 1], B);
        if (hook && mod->n_params > 0)
            hook(hook_ctx, i);
    }
}

size_t ct_model_param_count(const struct ct_model *m) { return ct_layout_count(&m->layout); }
