/* Dropout kernels (see dropout.h). Dims legend: B = batch rows, D = features
 * per sample. */
#include "nn/dropout.h"

#include <string.h>

#include "core/rng.h"

/* The scale for kept elements. p = 1 keeps nothing, so its (infinite) scale
 * is never used; return 0 rather than inf so that nothing can turn it into a
 * NaN. */
static float keep_scale(float p)
{
    return p < 1.0f ? (float)(1.0 / (1.0 - (double)p)) : 0.0f;
}

/* Keep flags of elements j0 .. j0+3 (j0 a multiple of 4) of a sample's mask:
 * one Philox block, counter {layer, epoch, sample, j0/4} (see dropout.h). */
static inline void keep4(uint8_t keep[4], struct ct_rng_key key, uint32_t layer_id,
                         uint32_t epoch, uint32_t sample, size_t j0, float p)
{
    uint32_t r[4];
    ct_rng_block(key, (const uint32_t[4]){layer_id, epoch, sample, (uint32_t)(j0 >> 2)}, r);
    for (int l = 0; l < 4; l++)
        keep[l] = ct_rng_u01(r[l]) >= p;
}

static inline size_t min4(size_t left) { return left < 4 ? left : 4; }

void ct_dropout_mask(uint8_t *mask, const uint32_t *sample_index, int B, size_t D, float p,
                     uint64_t seed, uint32_t layer_id, int64_t epoch)
{
    const struct ct_rng_key key = ct_rng_key(seed, CT_RNG_DROPOUT);
    for (int b = 0; b < B; b++) {
        uint8_t *m = mask + (size_t)b * D;
        for (size_t j0 = 0; j0 < D; j0 += 4) {
            uint8_t k[4];
            keep4(k, key, layer_id, (uint32_t)epoch, sample_index[b], j0, p);
            for (size_t l = 0; l < min4(D - j0); l++)
                m[j0 + l] = k[l];
        }
    }
}

void ct_dropout_forward(float *out, uint8_t *mask, const float *inp, const uint32_t *sample_index,
                        int B, size_t D, float p, uint64_t seed, uint32_t layer_id, int64_t epoch)
{
    const size_t n = (size_t)B * D;
    if (p <= 0.0f) {
        /* Every u01 is >= 0, so all are kept with scale 1: skip the generator
         * (the result is the same bit for bit). */
        for (size_t i = 0; i < n; i++)
            out[i] = inp[i];
        if (mask)
            for (size_t i = 0; i < n; i++)
                mask[i] = 1;
        return;
    }
    const float scale = keep_scale(p);
    const struct ct_rng_key key = ct_rng_key(seed, CT_RNG_DROPOUT);
    for (int b = 0; b < B; b++) {
        const size_t row = (size_t)b * D;
        for (size_t j0 = 0; j0 < D; j0 += 4) {
            uint8_t k[4];
            keep4(k, key, layer_id, (uint32_t)epoch, sample_index[b], j0, p);
            for (size_t l = 0; l < min4(D - j0); l++) {
                const size_t i = row + j0 + l;
                out[i] = k[l] ? inp[i] * scale : 0.0f;
                if (mask)
                    mask[i] = k[l];
            }
        }
    }
}

void ct_dropout_backward(float *dinp, const float *dout, const uint8_t *mask,
                         const uint32_t *sample_index, int B, size_t D, float p, uint64_t seed,
                         uint32_t layer_id, int64_t epoch)
{
    const size_t n = (size_t)B * D;
    const float scale = keep_scale(p);
    if (mask) {
        for (size_t i = 0; i < n; i++) {
            const float g = dout[i] * scale; /* unconditional: vectorizes */
            dinp[i] = mask[i] ? g : 0.0f;
        }
        return;
    }
    if (p <= 0.0f) {
        for (size_t i = 0; i < n; i++)
            dinp[i] = dout[i];
        return;
    }
    const struct ct_rng_key key = ct_rng_key(seed, CT_RNG_DROPOUT);
    for (int b = 0; b < B; b++) {
        const size_t row = (size_t)b * D;
        for (size_t j0 = 0; j0 < D; j0 += 4) {
            uint8_t k[4];
            keep4(k, key, layer_id, (uint32_t)epoch, sample_index[b], j0, p);
            for (size_t l = 0; l < min4(D - j0); l++)
                dinp[row + j0 + l] = k[l] ? dout[row + j0 + l] * scale : 0.0f;
        }
    }
}

/* ---------------------------------------------------------------- module */

struct dropout_ctx {
    float p;
    int max_batch;
};

static size_t dropout_workspace(struct ct_module *m, int max_batch)
{
    struct dropout_ctx *c = m->ctx;
    c->max_batch = max_batch;
    return (size_t)max_batch * m->in_numel; /* the mask, one byte per element */
}

static void dropout_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct dropout_ctx *c = m->ctx;
    size_t n = (size_t)B * m->in_numel;
    /* Eval mode is the identity; so is training without sample indices to
     * key the masks by (never the case in the trainer). */
    if (!m->training || c->p == 0.0f || !m->fwd->sample_index) {
        memcpy(out, inp, n * sizeof(float));
        return;
    }
    ct_dropout_forward(out, m->ws, inp, m->fwd->sample_index, B, m->in_numel, c->p,
                       m->fwd->seed, m->id, m->fwd->epoch);
}

static void dropout_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                        const float *out, int B)
{
    (void)inp, (void)out;
    struct dropout_ctx *c = m->ctx;
    if (!dinp)
        return;
    if (!m->training || c->p == 0.0f || !m->fwd->sample_index) {
        memcpy(dinp, dout, (size_t)B * m->in_numel * sizeof(float));
        return;
    }
    ct_dropout_backward(dinp, dout, m->ws, m->fwd->sample_index, B, m->in_numel, c->p,
                        m->fwd->seed, m->id, m->fwd->epoch);
}

static const struct ct_module_ops dropout_ops = {
    .kind = "dropout",
    .workspace = dropout_workspace,
    .forward = dropout_fwd,
    .backward = dropout_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_dropout_new(size_t numel, float p)
{
    if (!(p >= 0.0f && p < 1.0f) || numel < 1)
        return NULL;
    struct ct_module *m = ct_module_alloc(&dropout_ops, numel, numel, sizeof(struct dropout_ctx));
    if (m)
        ((struct dropout_ctx *)m->ctx)->p = p;
    return m;
}
