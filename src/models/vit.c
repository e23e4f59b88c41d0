/* vit: a small Vision Transformer (see models.h). */
#include "models/models.h"

#include "core/error.h"
#include "nn/gelu.h"
#include "nn/attention.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/patch.h"
#include "nn/residual.h"
#include "nn/shape.h"

int ct_vit_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx)
{
    (void)ctx;
    int P = spec->patch, D = spec->width, NH = spec->heads;
    if (spec->in_h % P || spec->in_w % P)
        return ct_error_set(CT_EINVAL, "vit: model.patch = %d does not divide the %dx%d images", P,
                            spec->in_h, spec->in_w);
    if (D % NH)
        return ct_error_set(CT_EINVAL, "vit: model.heads = %d does not divide model.width = %d", NH, D);
    int T = (spec->in_h / P) * (spec->in_w / P), Hd = spec->mlp_ratio * D;
    size_t TD = (size_t)T * D;
    int rc = ct_model_add(m, ct_patch_embed_new(spec->in_c, spec->in_h, spec->in_w, P, D));
    for (int i = 0; i < spec->depth && rc == 0; i++) {
        struct ct_module *attn = ct_residual_new(TD);
        rc = ct_residual_add_body(attn, ct_layernorm_new(T, D));
        if (rc == 0)
            rc = ct_residual_add_body(attn, ct_attention_new(T, D, NH, 0));
        rc = rc == 0 ? ct_model_add(m, attn) : (ct_module_free(attn), rc);
        if (rc < 0)
            break;
        struct ct_module *mlp = ct_residual_new(TD);
        rc = ct_residual_add_body(mlp, ct_layernorm_new(T, D));
        if (rc == 0)
            rc = ct_residual_add_body(mlp, ct_linear_tokens_new(T, D, Hd, 1));
        if (rc == 0)
            rc = ct_residual_add_body(mlp, ct_gelu_new((size_t)T * Hd, spec->gelu_tanh));
        if (rc == 0)
            rc = ct_residual_add_body(mlp, ct_linear_tokens_new(T, Hd, D, 1));
        rc = rc == 0 ? ct_model_add(m, mlp) : (ct_module_free(mlp), rc);
    }
    if (rc == 0)
        rc = ct_model_add(m, ct_layernorm_new(T, D));
    if (rc == 0)
        rc = ct_model_add(m, ct_token_mean_new(T, D));
    if (rc == 0)
        rc = ct_model_add(m, ct_linear_new(D, spec->n_classes, 1));
    return rc;
}
