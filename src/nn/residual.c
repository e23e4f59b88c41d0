/* Residual composition (see residual.h). Dims legend: B rows, D features per
 * sample (D_in for the block's input, D_i for child i's output). */
#include "nn/residual.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define MAX_CHAIN 32

struct residual_ctx {
    int n_body, n_short;  /* children[0..n_body) body, then the shortcut */
    int max_batch;
};

/* Pointers into the workspace for the current chain. The workspace holds, in
 * order: for each body child i its output and output gradient (max_batch,
 * D_i); the same for each shortcut child; then one (max_batch, D_in) buffer
 * for the shortcut's input gradient. */
struct chain_bufs {
    float *act[MAX_CHAIN + 1];
    float *dact[MAX_CHAIN + 1];
};

static size_t round_floats(size_t n) { return ct_arena_round(n * sizeof(float)) / sizeof(float); }

static float *layout_chain(struct ct_module **mods, int n, int max_batch, float *ws,
                           struct chain_bufs *c)
{
    for (int i = 0; i < n; i++) {
        size_t sz = round_floats((size_t)max_batch * mods[i]->out_numel);
        c->act[i + 1] = ws;
        ws += sz;
        c->dact[i + 1] = ws;
        ws += sz;
    }
    return ws;
}

static size_t residual_workspace(struct ct_module *m, int max_batch)
{
    struct residual_ctx *c = m->ctx;
    c->max_batch = max_batch;
    size_t floats = 0;
    for (int i = 0; i < m->n_children; i++)
        floats += 2 * round_floats((size_t)max_batch * m->children[i]->out_numel);
    floats += round_floats((size_t)max_batch * m->in_numel);
    return floats * sizeof(float);
}

static void residual_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct residual_ctx *c = m->ctx;
    struct chain_bufs body, sc;
    float *ws = layout_chain(m->children, c->n_body, c->max_batch, m->ws, &body);
    layout_chain(m->children + c->n_body, c->n_short, c->max_batch, ws, &sc);
    body.act[0] = (float *)inp;
    ct_chain_forward(m->children, c->n_body, body.act, B);
    const float *b = body.act[c->n_body];
    const float *s = inp;
    if (c->n_short) {
        sc.act[0] = (float *)inp;
        ct_chain_forward(m->children + c->n_body, c->n_short, sc.act, B);
        s = sc.act[c->n_short];
    }
    size_t n = (size_t)B * m->out_numel;
    for (size_t i = 0; i < n; i++)
        out[i] = b[i] + s[i];
}

static void residual_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                         const float *out, int B)
{
    (void)out;
    struct residual_ctx *c = m->ctx;
    struct chain_bufs body, sc;
    float *ws = layout_chain(m->children, c->n_body, c->max_batch, m->ws, &body);
    float *dshort_in = layout_chain(m->children + c->n_body, c->n_short, c->max_batch, ws, &sc);
    body.act[0] = (float *)inp;
    body.dact[0] = dinp;
    body.dact[c->n_body] = (float *)dout; /* read only: the chain writes dact[0..n) */
    ct_chain_backward(m->children, c->n_body, body.act, body.dact, B);
    size_t n = (size_t)B * m->in_numel;
    if (c->n_short) {
        sc.act[0] = (float *)inp;
        sc.dact[0] = dinp ? dshort_in : NULL;
        sc.dact[c->n_short] = (float *)dout;
        ct_chain_backward(m->children + c->n_body, c->n_short, sc.act, sc.dact, B);
        if (dinp)
            for (size_t i = 0; i < n; i++)
                dinp[i] += dshort_in[i];
    } else if (dinp) {
        for (size_t i = 0; i < n; i++)
            dinp[i] += dout[i];
    }
}

/* Called once at finalize, when both chains are complete: their ends must
 * agree (the identity shortcut's end is the block's input). */
static int residual_declare(struct ct_module *m, struct ct_decl *d)
{
    (void)d;
    struct residual_ctx *c = m->ctx;
    if (c->n_body == 0)
        return ct_error_set(CT_EINVAL, "%s: residual block with an empty body", m->name);
    size_t s = c->n_short ? m->children[c->n_body + c->n_short - 1]->out_numel : m->in_numel;
    if (s != m->out_numel)
        return ct_error_set(CT_EINVAL, "%s: the body gives %zu features per sample, the %s %zu",
                            m->name, m->out_numel, c->n_short ? "shortcut" : "identity shortcut", s);
    return 0;
}

/* Each chain as ct_chain_backward runs it: its first module gets the
 * block's input gradient only when the block's is wanted. */
static struct ct_flops residual_flops(const struct ct_module *m, int need_dinp)
{
    const struct residual_ctx *c = m->ctx;
    struct ct_flops f = {0, 0};
    for (int i = 0; i < m->n_children; i++) {
        int first = i == 0 || i == c->n_body;
        struct ct_flops k = ct_module_flops(m->children[i], first ? need_dinp : 1);
        f.fwd += k.fwd;
        f.bwd += k.bwd;
    }
    return f;
}

static const struct ct_module_ops residual_ops = {
    .kind = "residual",
    .flops = residual_flops,
    .declare = residual_declare,
    .workspace = residual_workspace,
    .forward = residual_fwd,
    .backward = residual_bwd,
};

struct ct_module *ct_residual_new(size_t in_numel)
{
    return ct_module_alloc(&residual_ops, in_numel, in_numel, sizeof(struct residual_ctx));
}

static int add(struct ct_module *res, struct ct_module *m, int shortcut)
{
    struct residual_ctx *c = res->ctx;
    if (!m)
        return ct_error_set(CT_ENOMEM, "residual: cannot create a %s module", shortcut ? "shortcut" : "body");
    int n = shortcut ? c->n_short : c->n_body;
    if (n == MAX_CHAIN) {
        ct_module_free(m);
        return ct_error_set(CT_EINVAL, "residual: more than %d modules in a chain", MAX_CHAIN);
    }
    struct ct_module *const *chain = res->children + (shortcut ? c->n_body : 0);
    size_t expect = n ? chain[n - 1]->out_numel : res->in_numel;
    if (m->in_numel != expect) {
        int rc = ct_error_set(CT_EINVAL, "residual %s.%d (%s): takes %zu inputs per sample, gets %zu",
                              shortcut ? "shortcut" : "body", n, m->ops->kind, m->in_numel, expect);
        ct_module_free(m);
        return rc;
    }
    if (!shortcut && c->n_short)
        return ct_error_set(CT_ESTATE, "residual: add the body before the shortcut");
    char suffix[32];
    snprintf(suffix, sizeof suffix, "%s.%d", shortcut ? "shortcut" : "body", n);
    int rc = ct_module_add_child(res, m, suffix);
    if (rc < 0)
        return rc;
    if (shortcut)
        c->n_short++;
    else
        c->n_body++;
    /* The block's output size is the body's; the shortcut must match it. */
    res->out_numel = res->children[c->n_body - 1]->out_numel;
    return 0;
}

int ct_residual_add_body(struct ct_module *res, struct ct_module *m) { return add(res, m, 0); }
int ct_residual_add_shortcut(struct ct_module *res, struct ct_module *m) { return add(res, m, 1); }
