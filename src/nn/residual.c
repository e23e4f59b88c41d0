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

/* Where the activations go. The workspace (kept from forward to backward)
 * holds each child's output, (max_batch, D_i), in order, but for two kinds:
 * - the body's last output when that child's backward ignores its output:
 *   the body then writes straight into the block's output and the shortcut
 *   is added there;
 * - a body output that is recomputed (the child declares
 *   forward_recomputable and ignores its output in backward, it is not the
 *   body's last, and its input is kept): forward writes it to the scratch,
 *   backward runs that child's forward again, just before the next child's
 *   backward needs it (llm.c's recompute of LayerNorm).
 * The scratch (valid inside one call) holds, in order: the gradients between
 * children, which alternate between two buffers (child i's backward reads
 * dact[i+1] and writes dact[i]; the chain's ends are the block's own dout
 * and dinp); with a shortcut chain, its input gradient (max_batch, D_in);
 * the buffer for recomputed outputs. */
struct chain_bufs {
    float *act[MAX_CHAIN + 1];
    float *dact[MAX_CHAIN + 1];
};

struct scratch_bufs {
    float *pp[2];    /* (max_batch, largest gradient between children) each */
    float *dshort;   /* (max_batch, D_in), with a shortcut chain */
    float *re;       /* (max_batch, largest recomputed output) */
};

static size_t round_floats(size_t n) { return ct_arena_round(n * sizeof(float)) / sizeof(float); }

/* Does the body write into the block's output? */
static int body_direct(const struct ct_module *m)
{
    const struct residual_ctx *c = m->ctx;
    return m->children[c->n_body - 1]->ops->backward_ignores_out;
}

/* Is body child i's output recomputed rather than kept? Never two in a row
 * (the recomputation reads the previous output), never the body's last. */
static int recomputed(const struct ct_module *m, int i)
{
    const struct residual_ctx *c = m->ctx;
    if (i < 0 || i >= c->n_body - 1)
        return 0;
    const struct ct_module_ops *ops = m->children[i]->ops;
    return ops->forward_recomputable && ops->backward_ignores_out && !recomputed(m, i - 1);
}

/* act[1..n] of the body (off = 0) or the shortcut chain (off = n_body):
 * from the workspace ws, or `last` for the body's last when not NULL, or
 * `re` for a recomputed one; returns the workspace after them. */
static float *layout_acts(struct ct_module *m, int off, int n, float *ws, float *last, float *re,
                          struct chain_bufs *c)
{
    const int max_batch = ((const struct residual_ctx *)m->ctx)->max_batch;
    for (int i = 0; i < n; i++) {
        if (i == n - 1 && last)
            c->act[i + 1] = last;
        else if (off == 0 && recomputed(m, i))
            c->act[i + 1] = re;
        else {
            c->act[i + 1] = ws;
            ws += round_floats((size_t)max_batch * m->children[off + i]->out_numel);
        }
    }
    return ws;
}

/* dact[1..n-1] of a chain: alternating between pp[0] and pp[1]. */
static void layout_grads(int n, float *const pp[2], struct chain_bufs *c)
{
    for (int i = 1; i < n; i++)
        c->dact[i] = pp[(n - 1 - i) % 2];
}

/* The largest gradient between the children of the chain mods[0..n), in
 * floats per sample, and how many buffers it needs (0, 1 or 2). */
static size_t inner_grads(struct ct_module **mods, int n, int *count)
{
    size_t big = 0;
    for (int i = 0; i + 1 < n; i++)
        big = mods[i]->out_numel > big ? mods[i]->out_numel : big;
    *count = n - 1 < 2 ? n - 1 : 2;
    return big;
}

static size_t residual_workspace(struct ct_module *m, int max_batch)
{
    struct residual_ctx *c = m->ctx;
    c->max_batch = max_batch;
    size_t floats = 0;
    const int skip = body_direct(m) ? c->n_body - 1 : -1;
    for (int i = 0; i < m->n_children; i++)
        if (i != skip && !recomputed(m, i))
            floats += round_floats((size_t)max_batch * m->children[i]->out_numel);
    return floats * sizeof(float);
}

/* The scratch's parts (carved from base when not NULL); returns its floats. */
static size_t carve_scratch(struct ct_module *m, int max_batch, float *base, struct scratch_bufs *sb)
{
    struct residual_ctx *c = m->ctx;
    int nb, ns;
    size_t db = inner_grads(m->children, c->n_body, &nb);
    size_t ds = inner_grads(m->children + c->n_body, c->n_short, &ns);
    size_t dre = 0;
    for (int i = 0; i < c->n_body; i++)
        if (recomputed(m, i) && m->children[i]->out_numel > dre)
            dre = m->children[i]->out_numel;
    /* The chains run one after the other: they share the two buffers. */
    size_t one = round_floats((size_t)max_batch * (db > ds ? db : ds));
    size_t part[4] = {nb > 0 || ns > 0 ? one : 0, nb > 1 || ns > 1 ? one : 0,
                      c->n_short ? round_floats((size_t)max_batch * m->in_numel) : 0,
                      round_floats((size_t)max_batch * dre)};
    float **where[4] = {&sb->pp[0], &sb->pp[1], &sb->dshort, &sb->re};
    size_t floats = 0;
    for (int k = 0; k < 4; k++) {
        *where[k] = base && part[k] ? base + floats : NULL;
        floats += part[k];
    }
    return floats;
}

static size_t residual_scratch(struct ct_module *m, int max_batch)
{
    struct scratch_bufs sb;
    return carve_scratch(m, max_batch, NULL, &sb) * sizeof(float);
}

static void residual_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct residual_ctx *c = m->ctx;
    struct chain_bufs body, sc;
    struct scratch_bufs sb;
    carve_scratch(m, c->max_batch, m->scratch, &sb);
    float *ws = layout_acts(m, 0, c->n_body, m->ws, body_direct(m) ? out : NULL, sb.re, &body);
    layout_acts(m, c->n_body, c->n_short, ws, NULL, NULL, &sc);
    body.act[0] = (float *)inp;
    ct_chain_forward(m->children, c->n_body, body.act, B);
    const float *b = body.act[c->n_body];
    const float *s = inp;
    if (c->n_short) {
        sc.act[0] = (float *)inp;
        ct_chain_forward(m->children + c->n_body, c->n_short, sc.act, B);
        s = sc.act[c->n_short];
    }
    /* b + s either way (with b == out, the same sum in place). */
    size_t n = (size_t)B * m->out_numel;
    for (size_t i = 0; i < n; i++)
        out[i] = b[i] + s[i];
}

static void residual_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                         const float *out, int B)
{
    struct residual_ctx *c = m->ctx;
    struct chain_bufs body, sc;
    struct scratch_bufs sb;
    carve_scratch(m, c->max_batch, m->scratch, &sb);
    /* The body's last child, when it wrote into out, ignores out here. */
    float *ws = layout_acts(m, 0, c->n_body, m->ws, body_direct(m) ? (float *)out : NULL, sb.re,
                            &body);
    layout_acts(m, c->n_body, c->n_short, ws, NULL, NULL, &sc);
    layout_grads(c->n_body, sb.pp, &body);
    body.act[0] = (float *)inp;
    body.dact[0] = dinp;
    body.dact[c->n_body] = (float *)dout; /* read only: the chain writes dact[0..n) */
    for (int i = c->n_body - 1; i >= 0; i--) {
        struct ct_module *k = m->children[i];
        if (recomputed(m, i - 1)) /* the same forward on the same input: the same bits */
            ct_module_forward(m->children[i - 1], body.act[i], body.act[i - 1], B);
        ct_module_backward(k, body.dact[i], body.dact[i + 1], body.act[i], body.act[i + 1], B);
    }
    size_t n = (size_t)B * m->in_numel;
    if (c->n_short) {
        layout_grads(c->n_short, sb.pp, &sc);
        sc.act[0] = (float *)inp;
        sc.dact[0] = dinp ? sb.dshort : NULL;
        sc.dact[c->n_short] = (float *)dout;
        ct_chain_backward(m->children + c->n_body, c->n_short, sc.act, sc.dact, B);
        if (dinp)
            for (size_t i = 0; i < n; i++)
                dinp[i] += sb.dshort[i];
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
    .scratch = residual_scratch,
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
