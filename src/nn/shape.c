/* Flatten and token mean (see shape.h). Dims legend: B rows, T tokens, D
 * features per token. */
#include "nn/shape.h"

#include <string.h>

static void flatten_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    memcpy(out, inp, (size_t)B * m->in_numel * sizeof(float));
}

static void flatten_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                        const float *out, int B)
{
    (void)inp, (void)out;
    if (dinp)
        memcpy(dinp, dout, (size_t)B * m->in_numel * sizeof(float));
}

static const struct ct_module_ops flatten_ops = {
    .kind = "flatten",
    .forward = flatten_fwd,
    .backward = flatten_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_flatten_new(size_t numel) { return ct_module_alloc(&flatten_ops, numel, numel, 0); }

struct token_mean_ctx {
    int T, D;
};

static void token_mean_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    const struct token_mean_ctx *c = m->ctx;
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * c->D;
        const float *x = inp + (size_t)b * c->T * c->D;
        for (int d = 0; d < c->D; d++)
            o[d] = 0.0f;
        for (int t = 0; t < c->T; t++)
            for (int d = 0; d < c->D; d++)
                o[d] += x[(size_t)t * c->D + d];
        for (int d = 0; d < c->D; d++)
            o[d] /= (float)c->T;
    }
}

static void token_mean_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                           const float *out, int B)
{
    (void)inp, (void)out;
    const struct token_mean_ctx *c = m->ctx;
    if (!dinp)
        return;
    float inv = 1.0f / (float)c->T;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < c->T; t++)
            for (int d = 0; d < c->D; d++)
                dinp[((size_t)b * c->T + t) * c->D + d] = dout[(size_t)b * c->D + d] * inv;
}

static const struct ct_module_ops token_mean_ops = {
    .kind = "token_mean",
    .forward = token_mean_fwd,
    .backward = token_mean_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_token_mean_new(int T, int D)
{
    if (T < 1 || D < 1)
        return NULL;
    struct ct_module *m = ct_module_alloc(&token_mean_ops, (size_t)T * D, (size_t)D,
                                          sizeof(struct token_mean_ctx));
    if (m) {
        struct token_mean_ctx *c = m->ctx;
        c->T = T;
        c->D = D;
    }
    return m;
}
