/* gpt: a GPT-2-style language model (see models.h). */
#include "models/models.h"

#include "core/error.h"
#include "nn/gelu.h"
#include "nn/attention.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/linear.h"
#include "nn/norm.h"
#include "nn/residual.h"

/* body's modules added to a new residual block, then the block to m.
 * mods is NULL-terminated; a NULL constructor result before the end is
 * reported by ct_residual_add_body as out of memory. */
static int add_residual(struct ct_model *m, size_t numel, struct ct_module **mods, int n)
{
    struct ct_module *block = ct_residual_new(numel);
    int rc = block ? 0 : ct_error_set(CT_ENOMEM, "gpt: out of memory");
    int i = 0;
    for (; i < n && rc == 0; i++)
        rc = ct_residual_add_body(block, mods[i]);
    for (; i < n; i++) /* not taken by the block */
        ct_module_free(mods[i]);
    if (rc < 0) {
        ct_module_free(block);
        return rc;
    }
    return ct_model_add(m, block);
}

int ct_gpt_build(struct ct_model *m, const struct ct_model_spec *spec, void *ctx)
{
    (void)ctx;
    const int T = spec->block, C = spec->width, NH = spec->heads, V = spec->n_classes;
    const int Hd = spec->mlp_ratio * C;
    const float p = spec->dropout;
    if (T < 1 || (size_t)spec->in_c * spec->in_h * spec->in_w != (size_t)T)
        return ct_error_set(CT_EINVAL, "gpt: model.block = %d but the data's samples are %d tokens "
                            "(a gpt reads token data: data.format = tokens)", T,
                            spec->in_c * spec->in_h * spec->in_w);
    if (C % NH)
        return ct_error_set(CT_EINVAL, "gpt: model.heads = %d does not divide model.width = %d", NH, C);
    if (V < 2)
        return ct_error_set(CT_EINVAL, "gpt: a vocabulary of %d tokens", V);
    const size_t TC = (size_t)T * C;
    struct ct_module *emb = ct_embedding_new(V, T, C);
    if (!emb)
        return ct_error_set(CT_ENOMEM, "gpt: out of memory");
    int rc = ct_model_add(m, emb);
    if (rc == 0 && p > 0)
        rc = ct_model_add(m, ct_dropout_new(TC, p));
    for (int i = 0; i < spec->depth && rc == 0; i++) {
        struct ct_module *attn[3] = {ct_layernorm_new(T, C), ct_attention_new(T, C, NH, 1),
                                     p > 0 ? ct_dropout_new(TC, p) : NULL};
        rc = add_residual(m, TC, attn, p > 0 ? 3 : 2);
        if (rc < 0)
            break;
        struct ct_module *mlp[5] = {ct_layernorm_new(T, C), ct_linear_tokens_new(T, C, Hd, 1),
                                    ct_gelu_new((size_t)T * Hd, spec->gelu_tanh),
                                    ct_linear_tokens_new(T, Hd, C, 1),
                                    p > 0 ? ct_dropout_new(TC, p) : NULL};
        rc = add_residual(m, TC, mlp, p > 0 ? 5 : 4);
    }
    if (rc == 0)
        rc = ct_model_add(m, ct_layernorm_new(T, C));
    if (rc == 0)
        rc = ct_model_add(m, ct_lm_head_new(emb, T, C, V));
    return rc;
}
