/* Token + position embedding and the tied LM head (see embedding.h).
 *
 * Ids arrive as floats. One that is not an integer in [0, V) (negative, too
 * large, fractional, NaN) is never used as an index: forward writes a zero
 * row for that position and, when the model's forward context is bound, sets
 * fwd->status to CT_ERANGE with a message naming the module and the value
 * (the first such id of a step wins); backward skips the position, so
 * neither wte nor wpe gets a gradient from it. The data layer should never
 * produce such ids; this is the guard that keeps a bad one from reading
 * outside wte.
 */
#include "nn/embedding.h"

#include <string.h>

#include "core/error.h"
#include "core/gemm.h"

struct embedding_ctx {
    int V, T, C;
};

static int embedding_declare(struct ct_module *m, struct ct_decl *d)
{
    struct embedding_ctx *c = m->ctx;
    int rc = ct_module_param(m, d, "wte.weight", 2, (const int64_t[]){c->V, c->C});
    if (rc >= 0)
        rc = ct_module_param(m, d, "wpe.weight", 2, (const int64_t[]){c->T, c->C});
    return rc < 0 ? rc : 0;
}

static void embedding_init(struct ct_module *m, struct ct_rng_key key)
{
    struct embedding_ctx *c = m->ctx;
    ct_init_normal(m->p[0], (size_t)c->V * c->C, 0.02f, key, (uint32_t)m->view[0]);
    ct_init_normal(m->p[1], (size_t)c->T * c->C, 0.02f, key, (uint32_t)m->view[1]);
}

/* The token id a float holds, or -1 when it is not an integer in [0, V):
 * the comparison form also refuses NaN. */
static int token_id(float v, int V)
{
    if (!(v >= 0.0f && v < (float)V))
        return -1;
    int id = (int)v;
    return (float)id == v ? id : -1;
}

static void bad_token(struct ct_module *m, float v, int V)
{
    if (m->fwd && m->fwd->status == 0)
        m->fwd->status = ct_error_set(CT_ERANGE, "%s: input %g is not a token id in [0, %d)",
                                       m->name, (double)v, V);
}

static void embedding_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct embedding_ctx *c = m->ctx;
    const int T = c->T, C = c->C;
    const float *wte = m->p[0], *wpe = m->p[1];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            float *o = out + ((size_t)b * T + t) * C;
            const float *pos = wpe + (size_t)t * C;
            int id = token_id(inp[(size_t)b * T + t], c->V);
            if (id < 0) {
                bad_token(m, inp[(size_t)b * T + t], c->V);
                memset(o, 0, (size_t)C * sizeof *o);
                continue;
            }
            const float *tok = wte + (size_t)id * C;
            for (int k = 0; k < C; k++)
                o[k] = tok[k] + pos[k];
        }
}

/* A scatter-add in (sample, position) order on one thread: the same sums
 * in the same order whatever the thread count. Ids have no gradient. */
static void embedding_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                          const float *out, int B)
{
    (void)dinp;
    (void)out;
    struct embedding_ctx *c = m->ctx;
    const int T = c->T, C = c->C;
    float *dwte = m->g[0], *dwpe = m->g[1];
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int id = token_id(inp[(size_t)b * T + t], c->V);
            if (id < 0)
                continue; /* reported by forward, whose row is zero: no gradient */
            const float *d = dout + ((size_t)b * T + t) * C;
            float *pos = dwpe + (size_t)t * C;
            for (int k = 0; k < C; k++)
                pos[k] += d[k];
            float *tok = dwte + (size_t)id * C;
            for (int k = 0; k < C; k++)
                tok[k] += d[k];
        }
}

static const struct ct_module_ops embedding_ops = {
    .kind = "embedding",
    .declare = embedding_declare,
    .init = embedding_init,
    .forward = embedding_fwd,
    .backward = embedding_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_embedding_new(int V, int T, int C)
{
    if (V < 1 || T < 1 || C < 1)
        return NULL;
    struct ct_module *m = ct_module_alloc(&embedding_ops, (size_t)T, (size_t)T * C,
                                          sizeof(struct embedding_ctx));
    if (!m)
        return NULL;
    struct embedding_ctx *c = m->ctx;
    c->V = V;
    c->T = T;
    c->C = C;
    return m;
}

/* ---------------------------------------------------------------- lm head */

struct lm_head_ctx {
    const struct ct_module *emb; /* borrowed: the model owns it */
    int T, C, V;
};

/* logits (B*T, V) = x (B*T, C) . wte^T */
static void lm_head_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct lm_head_ctx *c = m->ctx;
    ct_gemm(0, 1, B * c->T, c->V, c->C, 1.0f, inp, c->C, c->emb->p[0], c->C, 0.0f, out, c->V);
}

/* dx = dlogits . wte; dwte += dlogits^T . x (into the embedding's gradient) */
static void lm_head_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                        const float *out, int B)
{
    (void)out;
    struct lm_head_ctx *c = m->ctx;
    const int R = B * c->T;
    if (dinp)
        ct_gemm(0, 0, R, c->C, c->V, 1.0f, dout, c->V, c->emb->p[0], c->C, 0.0f, dinp, c->C);
    ct_gemm(1, 0, c->V, c->C, R, 1.0f, dout, c->V, inp, c->C, 1.0f, c->emb->g[0], c->C);
}

/* (T, C) x (C, V) a sample against the tied wte, and its two gradients. */
static struct ct_flops lm_head_flops(const struct ct_module *m, int need_dinp)
{
    const struct lm_head_ctx *c = m->ctx;
    return ct_flops_weight_product((double)c->T * c->C * c->V, need_dinp);
}

static const struct ct_module_ops lm_head_ops = {
    .kind = "lm_head",
    .flops = lm_head_flops,
    .forward = lm_head_fwd,
    .backward = lm_head_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_lm_head_new(struct ct_module *emb, int T, int C, int V)
{
    if (!emb || emb->ops != &embedding_ops || T < 1)
        return NULL;
    const struct embedding_ctx *e = emb->ctx;
    if (e->C != C || e->V != V)
        return NULL;
    struct ct_module *m = ct_module_alloc(&lm_head_ops, (size_t)T * C, (size_t)T * V,
                                          sizeof(struct lm_head_ctx));
    if (!m)
        return NULL;
    struct lm_head_ctx *c = m->ctx;
    c->emb = emb;
    c->T = T;
    c->C = C;
    c->V = V;
    return m;
}
