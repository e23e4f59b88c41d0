/* AdamW (see adamw.h): torch.optim.AdamW's single-tensor update, float32
 * element arithmetic in torch's order.
 *
 * torch 1.13 on an x86-64 CPU runs these updates through its vectorised
 * AVX2/AVX-512 kernels, which fuse two of the multiply-adds:
 *     exp_avg.mul_(b1).add_(g, alpha=1-b1)          m = fma(1-b1, g, m*b1)
 *     exp_avg_sq.mul_(b2).addcmul_(g, g, value=1-b2) v = fma((1-b2)*g, g, v*b2)
 *     p.addcdiv_(m, denom, value=-step_size)         p = p + (-step_size*m)/denom
 * (checked bit for bit against torch on 4000 elements; the last one is not
 * fused because of the division). We call fmaf() for the two fused ones, so
 * the result is the same on every CPU and matches the fixtures exactly; torch
 * built without FMA would differ from us by an ulp, no more.
 */
#include "optim/adamw.h"

#include <math.h>
#include <string.h>

#include "core/error.h"

struct ct_adamw_params ct_adamw_default_params(void)
{
    return (struct ct_adamw_params){
        .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01};
}

int ct_adamw_init(struct ct_adamw *opt, const struct ct_adamw_params *hp, size_t numel)
{
    memset(opt, 0, sizeof *opt);
    /* torch's checks, with its wording of the valid ranges. */
    if (!(hp->beta1 >= 0.0 && hp->beta1 < 1.0))
        return ct_error_set(CT_EINVAL, "adamw: beta1 must be in [0, 1), found %g", hp->beta1);
    if (!(hp->beta2 >= 0.0 && hp->beta2 < 1.0))
        return ct_error_set(CT_EINVAL, "adamw: beta2 must be in [0, 1), found %g", hp->beta2);
    if (!(hp->eps >= 0.0))
        return ct_error_set(CT_EINVAL, "adamw: eps must be >= 0, found %g", hp->eps);
    if (!(hp->weight_decay >= 0.0))
        return ct_error_set(CT_EINVAL, "adamw: weight_decay must be >= 0, found %g",
                            hp->weight_decay);
    opt->hp = *hp;
    int rc = ct_flat_alloc_n(&opt->m, numel);
    if (rc < 0)
        goto fail_m;
    rc = ct_flat_alloc_n(&opt->v, numel);
    if (rc < 0)
        goto fail_v;
    return 0;
fail_v:
    ct_flat_free(&opt->m);
fail_m:
    memset(opt, 0, sizeof *opt);
    return rc;
}

void ct_adamw_free(struct ct_adamw *opt)
{
    ct_flat_free(&opt->m);
    ct_flat_free(&opt->v);
    memset(opt, 0, sizeof *opt);
}

/* On x86-64 with GCC, a second copy of the step is compiled for CPUs with
 * FMA and picked at load time (an ifunc): there fmaf() is one instruction
 * instead of a library call, 2x faster, and the results are the same bits
 * (fmaf is exact either way; nothing else in the loop can be contracted, as
 * every other multiply feeds a division or stands alone). Not with clang
 * (the fuzz build, CT_FUZZ): clang 14 names the dispatcher
 * "ct_adamw_step.ifunc", so calls from other files do not link (as
 * CT_VECTOR_CLONES in core/simd.h). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && defined(__linux__)
#define CT_ADAMW_CLONES __attribute__((target_clones("fma", "default")))
#else
#define CT_ADAMW_CLONES
#endif

CT_ADAMW_CLONES
void ct_adamw_update(struct ct_adamw *opt, size_t off, float *restrict params,
                     const float *restrict grads, size_t n, double lr)
{
    float *restrict m = opt->m.data + off;
    float *restrict v = opt->v.data + off;
    const struct ct_adamw_params *hp = &opt->hp;

    /* torch computes these in Python (double) and each tensor op rounds its
     * scalar to float once; t counts the step being taken. */
    const double t = (double)(opt->steps + 1);
    const float decay = (float)(1.0 - lr * hp->weight_decay);
    const float b1 = (float)hp->beta1, one_minus_b1 = (float)(1.0 - hp->beta1);
    const float b2 = (float)hp->beta2, one_minus_b2 = (float)(1.0 - hp->beta2);
    const float neg_step_size = (float)-(lr / (1.0 - pow(hp->beta1, t)));
    const float bc2_sqrt = (float)sqrt(1.0 - pow(hp->beta2, t));
    const float eps = (float)hp->eps;

    for (size_t i = 0; i < n; i++) {
        const float g = grads[i];
        const float p = params[i] * decay;
        const float mi = fmaf(one_minus_b1, g, m[i] * b1);
        const float vi = fmaf(one_minus_b2 * g, g, v[i] * b2);
        const float denom = sqrtf(vi) / bc2_sqrt + eps;
        m[i] = mi;
        v[i] = vi;
        params[i] = p + neg_step_size * mi / denom;
    }
}

void ct_adamw_step(struct ct_adamw *opt, float *params, const float *grads, size_t n, double lr)
{
    ct_adamw_update(opt, 0, params, grads, n, lr);
    opt->steps++;
}
