/* Linear layer kernels (ct_gemm: fp32 or bf16 products; and the naive reference) and module (see linear.h). */
#include "nn/linear.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"

void ct_linear_forward(float *out, const float *inp, const float *weight, const float *bias, int B,
                       int C, int OC)
{
    /* Seed every row with the bias and let sgemm accumulate onto it (beta=1):
     * one pass over `out` fewer than adding the bias afterwards. */
    float beta = 0.0f;
    if (bias) {
        for (int b = 0; b < B; b++)
            memcpy(out + (size_t)b * OC, bias, (size_t)OC * sizeof(float));
        beta = 1.0f;
    }
    ct_gemm(0, 1, B, OC, C, 1.0f, inp, C, weight, C, beta,
                out, OC);
}

void ct_linear_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, int B, int C, int OC)
{
    if (dinp)
        ct_gemm(0, 0, B, C, OC, 1.0f, dout, OC, weight, C,
                    0.0f, dinp, C);
    if (dweight)
        ct_gemm(1, 0, OC, C, B, 1.0f, dout, OC, inp, C,
                    1.0f, dweight, C);
    if (dbias) {
        for (int b = 0; b < B; b++) {
            const float *row = dout + (size_t)b * OC;
            for (int o = 0; o < OC; o++)
                dbias[o] += row[o];
        }
    }
}

void ct_linear_forward_ref(float *out, const float *inp, const float *weight, const float *bias,
                           int B, int C, int OC)
{
    for (int b = 0; b < B; b++)
        for (int o = 0; o < OC; o++) {
            double acc = bias ? bias[o] : 0.0;
            for (int c = 0; c < C; c++)
                acc += (double)inp[(size_t)b * C + c] * weight[(size_t)o * C + c];
            out[(size_t)b * OC + o] = (float)acc;
        }
}

void ct_linear_backward_ref(float *dinp, float *dweight, float *dbias, const float *dout,
                            const float *inp, const float *weight, int B, int C, int OC)
{
    if (dinp)
        for (int b = 0; b < B; b++)
            for (int c = 0; c < C; c++) {
                double acc = 0.0;
                for (int o = 0; o < OC; o++)
                    acc += (double)dout[(size_t)b * OC + o] * weight[(size_t)o * C + c];
                dinp[(size_t)b * C + c] = (float)acc;
            }
    if (dweight)
        for (int o = 0; o < OC; o++)
            for (int c = 0; c < C; c++) {
                double acc = 0.0;
                for (int b = 0; b < B; b++)
                    acc += (double)dout[(size_t)b * OC + o] * inp[(size_t)b * C + c];
                dweight[(size_t)o * C + c] += (float)acc;
            }
    if (dbias)
        for (int o = 0; o < OC; o++) {
            double acc = 0.0;
            for (int b = 0; b < B; b++)
                acc += dout[(size_t)b * OC + o];
            dbias[o] += (float)acc;
        }
}

/* ---------------------------------------------------------------- module */

struct linear_ctx {
    int T, C, OC, bias; /* T rows (tokens) per sample */
};

static int linear_declare(struct ct_module *m, struct ct_decl *d)
{
    struct linear_ctx *c = m->ctx;
    int rc = ct_module_param(m, d, "weight", 2, (const int64_t[]){c->OC, c->C});
    if (rc >= 0 && c->bias)
        rc = ct_module_param(m, d, "bias", 1, (const int64_t[]){c->OC});
    return rc < 0 ? rc : 0;
}

static void linear_init(struct ct_module *m, struct ct_rng_key key)
{
    struct linear_ctx *c = m->ctx;
    float bound = 1.0f / sqrtf((float)c->C);
    ct_init_uniform(m->p[0], (size_t)c->OC * c->C, bound, key, (uint32_t)m->view[0]);
    if (c->bias)
        ct_init_uniform(m->p[1], (size_t)c->OC, bound, key, (uint32_t)m->view[1]);
}

static void linear_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct linear_ctx *c = m->ctx;
    ct_linear_forward(out, inp, m->p[0], c->bias ? m->p[1] : NULL, B * c->T, c->C, c->OC);
}

static void linear_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                       const float *out, int B)
{
    (void)out;
    struct linear_ctx *c = m->ctx;
    ct_linear_backward(dinp, m->g[0], c->bias ? m->g[1] : NULL, dout, inp, m->p[0], B * c->T,
                       c->C, c->OC);
}

/* (B*T, C) x (C, OC): T*C*OC multiply-adds a sample, and as many for each
 * gradient; the bias adds are elementwise (not counted). */
static struct ct_flops linear_flops(const struct ct_module *m, int need_dinp)
{
    const struct linear_ctx *c = m->ctx;
    return ct_flops_weight_product((double)c->T * c->C * c->OC, need_dinp);
}

static const struct ct_module_ops linear_ops = {
    .kind = "linear",
    .flops = linear_flops,
    .declare = linear_declare,
    .init = linear_init,
    .forward = linear_fwd,
    .backward = linear_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_linear_tokens_new(int T, int C, int OC, int bias)
{
    if (T < 1 || C < 1 || OC < 1)
        return NULL;
    struct ct_module *m = ct_module_alloc(&linear_ops, (size_t)T * C, (size_t)T * OC, sizeof(struct linear_ctx));
    if (!m)
        return NULL;
    struct linear_ctx *c = m->ctx;
    c->T = T;
    c->C = C;
    c->OC = OC;
    c->bias = bias != 0;
    return m;
}

struct ct_module *ct_linear_new(int C, int OC, int bias) { return ct_linear_tokens_new(1, C, OC, bias); }
