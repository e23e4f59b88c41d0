/* Patch embedding (see patch.h). */
#include "nn/patch.h"

#include <math.h>
#include <string.h>

#include "nn/linear.h"

struct patch_ctx {
    int C, H, W, P, D, T, K;
    int max_batch;
};

void ct_patch_extract(float *patches, const float *img, int B, int C, int H, int W, int P)
{
    int TW = W / P, T = (H / P) * TW, K = C * P * P;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int py = t / TW, px = t % TW;
            float *dst = patches + ((size_t)b * T + t) * K;
            for (int c = 0; c < C; c++)
                for (int i = 0; i < P; i++) {
                    const float *src = img + (((size_t)b * C + c) * H + py * P + i) * W + px * P;
                    memcpy(dst + (c * P + i) * P, src, (size_t)P * sizeof(float));
                }
        }
}

void ct_patch_scatter(float *dimg, const float *dpatches, int B, int C, int H, int W, int P)
{
    int TW = W / P, T = (H / P) * TW, K = C * P * P;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            int py = t / TW, px = t % TW;
            const float *src = dpatches + ((size_t)b * T + t) * K;
            for (int c = 0; c < C; c++)
                for (int i = 0; i < P; i++) {
                    float *dst = dimg + (((size_t)b * C + c) * H + py * P + i) * W + px * P;
                    for (int j = 0; j < P; j++)
                        dst[j] = src[(c * P + i) * P + j];
                }
        }
}

static int patch_declare(struct ct_module *m, struct ct_decl *d)
{
    struct patch_ctx *c = m->ctx;
    int rc = ct_module_param(m, d, "weight", 2, (const int64_t[]){c->D, c->K});
    if (rc >= 0)
        rc = ct_module_param(m, d, "bias", 1, (const int64_t[]){c->D});
    if (rc >= 0)
        rc = ct_module_param(m, d, "pos", 2, (const int64_t[]){c->T, c->D});
    return rc < 0 ? rc : 0;
}

static size_t patch_workspace(struct ct_module *m, int max_batch)
{
    struct patch_ctx *c = m->ctx;
    c->max_batch = max_batch;
    /* patches (B, T, K), kept from forward for the weight gradient */
    return (size_t)max_batch * c->T * c->K * sizeof(float);
}

static void patch_init(struct ct_module *m, struct ct_rng_key key)
{
    struct patch_ctx *c = m->ctx;
    /* As Conv2d's default (kaiming_uniform a=sqrt(5)): U(+-1/sqrt(fan_in)). */
    float bound = 1.0f / sqrtf((float)c->K);
    ct_init_uniform(m->p[0], (size_t)c->D * c->K, bound, key, (uint32_t)m->view[0]);
    ct_init_uniform(m->p[1], (size_t)c->D, bound, key, (uint32_t)m->view[1]);
    /* Positional embeddings: small values (ViT uses trunc_normal(std 0.02);
     * a uniform with the same standard deviation: bound 0.02*sqrt(3)). */
    ct_init_uniform(m->p[2], (size_t)c->T * c->D, 0.02f * sqrtf(3.0f), key, (uint32_t)m->view[2]);
}

static void patch_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct patch_ctx *c = m->ctx;
    float *patches = m->ws;
    ct_patch_extract(patches, inp, B, c->C, c->H, c->W, c->P);
    ct_linear_forward(out, patches, m->p[0], m->p[1], B * c->T, c->K, c->D);
    const float *pos = m->p[2];
    for (int b = 0; b < B; b++) {
        float *o = out + (size_t)b * c->T * c->D;
        for (size_t i = 0; i < (size_t)c->T * c->D; i++)
            o[i] += pos[i];
    }
}

static void patch_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                      const float *out, int B)
{
    (void)inp, (void)out;
    struct patch_ctx *c = m->ctx;
    float *patches = m->ws;
    float *dpos = m->g[2];
    for (int b = 0; b < B; b++) {
        const float *g = dout + (size_t)b * c->T * c->D;
        for (size_t i = 0; i < (size_t)c->T * c->D; i++)
            dpos[i] += g[i];
    }
    /* The patch gradient, when wanted, reuses the patch buffer: the weight
     * gradient has already read the patches by then. */
    ct_linear_backward(NULL, m->g[0], m->g[1], dout, patches, m->p[0], B * c->T, c->K, c->D);
    if (dinp) {
        ct_linear_backward(patches, NULL, NULL, dout, NULL, m->p[0], B * c->T, c->K, c->D);
        ct_patch_scatter(dinp, patches, B, c->C, c->H, c->W, c->P);
    }
}

/* (T, K) x (K, D) a sample; extracting and scattering patches and the
 * position add are copies (not counted). */
static struct ct_flops patch_flops(const struct ct_module *m, int need_dinp)
{
    const struct patch_ctx *c = m->ctx;
    return ct_flops_weight_product((double)c->T * c->K * c->D, need_dinp);
}

static const struct ct_module_ops patch_ops = {
    .kind = "patch_embed",
    .flops = patch_flops,
    .declare = patch_declare,
    .workspace = patch_workspace,
    .init = patch_init,
    .forward = patch_fwd,
    .backward = patch_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_patch_embed_new(int C, int H, int W, int P, int D)
{
    if (C < 1 || P < 1 || D < 1 || H % P != 0 || W % P != 0)
        return NULL;
    int T = (H / P) * (W / P), K = C * P * P;
    struct ct_module *m = ct_module_alloc(&patch_ops, (size_t)C * H * W, (size_t)T * D,
                                          sizeof(struct patch_ctx));
    if (m) {
        struct patch_ctx *c = m->ctx;
        *c = (struct patch_ctx){.C = C, .H = H, .W = W, .P = P, .D = D, .T = T, .K = K};
    }
    return m;
}
