/* Multi-head self-attention kernels: OpenBLAS and naive reference (see
 * attention.h). This file holds kernels only; wrapping them in a module
 * (parameter names, init, workspace from the arena) is the caller's job.
 *
 * Dims legend: B = batch, T = tokens, C = channels, NH = heads, hs = C / NH.
 */
#include "nn/attention.h"

#include <assert.h>
#include <math.h>

#include "core/gemm.h"
#include "core/simd.h"
#include "nn/fastexp-impl.h"
#include "nn/linear.h"

/* The workspace (what forward saves for backward) and the scratch (what
 * one call uses and drops), each carved in this order, each part padded to
 * 16 floats so every part is 64-byte aligned when the base is. The
 * probabilities are not kept: (B, NH, T, T) floats, the largest activation
 * of a GPT-2 block by far (50 MB per layer at T = 1024, NH = 12, B = 1).
 * Forward keeps each softmax row's max and 1/sum instead, and backward
 * recomputes q k^T and the probabilities from them, bit for bit. */
struct attn_ws {
    float *qkv;   /* (B, T, 3C)     saved by forward */
    float *stats; /* (B, NH, T, 2)  each softmax row's max and 1/sum, saved by forward */
    float *y;     /* (B, T, C)      heads merged, saved by forward */
};

struct attn_scratch {
    float *dy;   /* (B, T, C)      backward */
    float *dqkv; /* (B, T, 3C)     backward */
    float *att;  /* (T, T)         probabilities of one (sample, head) at a time */
    float *datt; /* (T, T)         dS of one (sample, head) at a time, backward */
};

static size_t pad16(size_t n) { return (n + 15) & ~(size_t)15; }

/* Floats of each part, in carving order: sz[0..2] workspace, sz[3..6]
 * scratch. */
static void attn_sizes(size_t sz[7], int B, int T, int C, int NH)
{
    size_t BT = (size_t)B * T;
    sz[0] = pad16(BT * 3 * C);
    sz[1] = pad16((size_t)B * NH * T * 2);
    sz[2] = pad16(BT * C);
    sz[3] = pad16(BT * C);
    sz[4] = pad16(BT * 3 * C);
    sz[5] = pad16((size_t)T * T);
    sz[6] = pad16((size_t)T * T);
}

static struct attn_ws attn_carve(const float *base, int B, int T, int C, int NH)
{
    assert(B >= 1 && T >= 1 && NH >= 1 && C >= NH && C % NH == 0);
    size_t sz[7];
    attn_sizes(sz, B, T, C, NH);
    struct attn_ws w;
    w.qkv = (float *)base;
    w.stats = w.qkv + sz[0];
    w.y = w.stats + sz[1];
    return w;
}

static struct attn_scratch scratch_carve(float *base, int B, int T, int C, int NH)
{
    size_t sz[7];
    attn_sizes(sz, B, T, C, NH);
    struct attn_scratch s;
    s.dy = base;
    s.dqkv = s.dy + sz[3];
    s.att = s.dqkv + sz[4];
    s.datt = s.att + sz[5];
    return s;
}

size_t ct_attention_workspace(int B, int T, int C, int NH)
{
    size_t sz[7];
    attn_sizes(sz, B, T, C, NH);
    return (sz[0] + sz[1] + sz[2]) * sizeof(float);
}

size_t ct_attention_scratch(int B, int T, int C, int NH)
{
    size_t sz[7];
    attn_sizes(sz, B, T, C, NH);
    return (sz[3] + sz[4] + sz[5] + sz[6]) * sizeof(float);
}

struct ct_attention_view ct_attention_view(const float *ws, const float *scratch, int B, int T,
                                           int C, int NH)
{
    struct attn_ws w = attn_carve(ws, B, T, C, NH);
    struct ct_attention_view v = {.qkv = w.qkv, .stats = w.stats, .y = w.y};
    if (scratch) {
        struct attn_scratch sc = scratch_carve((float *)scratch, B, T, C, NH);
        v.dy = sc.dy, v.dqkv = sc.dqkv, v.att = sc.att, v.datt = sc.datt;
    }
    return v;
}

/* ---------------------------------------------------------------- fast */

/* Rows of a head's (T, T) matrices per product with the causal mask: the
 * products of a block of rows stop at the block's last key (the masked
 * upper triangle is never computed; about 1/2 + R/(2T) of the full work). */
enum { CAUSAL_ROWS = 64, LANES = 16 };

/* Softmax of one score row in place over its first n entries (n >= 1),
 * exact zeros from n to T (what torch's masked_fill(-inf) + softmax gives,
 * and what backward and the blocked products rely on); st[0], st[1] = the
 * row's max and 1/sum, from which softmax_row_again() makes the same row
 * again. exp is fastexp-impl.h's; the max and the sum keep 16 explicit
 * lanes, so the loops vectorize and every vector width gives the same bits. */
CT_VECTOR_CLONES
static void softmax_row(float *row, int n, int T, float st[2])
{
    float lm[LANES], ls[LANES];
    for (int l = 0; l < LANES; l++)
        lm[l] = row[0], ls[l] = 0.0f;
    int j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++)
            lm[l] = pick(row[j + l] > lm[l], row[j + l], lm[l]);
    float mx = lm[0];
    for (int l = 1; l < LANES; l++)
        mx = lm[l] > mx ? lm[l] : mx;
    for (; j < n; j++)
        mx = row[j] > mx ? row[j] : mx;
    for (j = 0; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++) {
            const float e = fexp(row[j + l] - mx);
            row[j + l] = e;
            ls[l] += e;
        }
    for (; j < n; j++) {
        row[j] = fexp(row[j] - mx);
        ls[j % LANES] += row[j];
    }
    double sum = 0.0;
    for (int l = 0; l < LANES; l++)
        sum += ls[l];
    /* sum >= 1 (the max contributes exp(0)), so the inverse is finite. */
    const float inv = (float)(1.0 / sum);
    for (j = 0; j < n; j++)
        row[j] *= inv;
    for (j = n; j < T; j++)
        row[j] = 0.0f;
    st[0] = mx, st[1] = inv;
}

/* softmax_row()'s result from the same score row and its st: the same
 * float operations on the same operands, exp(s - max) rounded to float and
 * then times 1/sum (ISO C: no fused multiply-add, no excess precision), so
 * the same bits. */
CT_VECTOR_CLONES
static void softmax_row_again(float *row, int n, int T, const float st[2])
{
    const float mx = st[0], inv = st[1];
    int j;
    for (j = 0; j < n; j++)
        row[j] = fexp(row[j] - mx) * inv;
    for (j = n; j < T; j++)
        row[j] = 0.0f;
}

/* dS = P * (dP - rowsum(P * dP)) in place over one row of dP, its first n
 * entries; exact zeros from n to T (the masked entries, P == 0). */
CT_VECTOR_CLONES
static void softmax_row_backward(float *drow, const float *prow, int n, int T)
{
    float ld[LANES] = {0};
    int j = 0;
    for (; j + LANES <= n; j += LANES)
        for (int l = 0; l < LANES; l++)
            ld[l] += prow[j + l] * drow[j + l];
    for (; j < n; j++)
        ld[j % LANES] += prow[j] * drow[j];
    double dot = 0.0;
    for (int l = 0; l < LANES; l++)
        dot += ld[l];
    const float d = (float)dot;
    for (j = 0; j < n; j++)
        drow[j] = prow[j] * (drow[j] - d);
    for (j = n; j < T; j++)
        drow[j] = 0.0f;
}

/* Scores of rows [i0, i1) of head (q, k)'s (T, T) att: scale q k^T over
 * keys 0..i1-1 (all T without the mask). Forward and backward's recompute
 * both make them here, so they are the same product and the same bits. */
static void head_scores(float *att, const float *q, const float *k, int i0, int i1, int T, int C,
                        int hs, float scale, int causal)
{
    const int C3 = 3 * C, rows = i1 - i0, keys = causal ? i1 : T;
    ct_gemm(0, 1, rows, keys, hs, scale, q + (size_t)i0 * C3, C3, k, C3, 0.0f,
            att + (size_t)i0 * T, T);
}

/* Rows [i0, i1) of head (q, k, v)'s attention: att = softmax(scale q k^T)
 * over keys 0..i (all T without the mask), each row's max and 1/sum into
 * st (T, 2), y = att v. */
static void head_forward(float *att, float *st, float *y, const float *q, const float *k,
                         const float *v, int i0, int i1, int T, int C, int hs, float scale,
                         int causal)
{
    const int C3 = 3 * C, rows = i1 - i0, keys = causal ? i1 : T;
    head_scores(att, q, k, i0, i1, T, C, hs, scale, causal);
    for (int i = i0; i < i1; i++)
        softmax_row(att + (size_t)i * T, causal ? i + 1 : T, T, st + (size_t)2 * i);
    ct_gemm(0, 0, rows, hs, keys, 1.0f, att + (size_t)i0 * T, T, v, C3, 0.0f, y + (size_t)i0 * C,
            C);
}

/* Rows [i0, i1) of att as head_forward() left them, from the same scores
 * and the st it saved. The product is forward's again: the model's FLOPs
 * (attn_flops, ct_sgemm_count_macs) count it once, in forward. */
static void head_probs(float *att, const float *st, const float *q, const float *k, int i0,
                       int i1, int T, int C, int hs, float scale, int causal)
{
    double *counter = ct_sgemm_mac_counter();
    ct_sgemm_count_macs(NULL);
    head_scores(att, q, k, i0, i1, T, C, hs, scale, causal);
    ct_sgemm_count_macs(counter);
    for (int i = i0; i < i1; i++)
        softmax_row_again(att + (size_t)i * T, causal ? i + 1 : T, T, st + (size_t)2 * i);
}

void ct_attention_probs(float *att, const float *ws, int b, int h, int B, int T, int C, int NH,
                        int causal)
{
    struct attn_ws w = attn_carve(ws, B, T, C, NH);
    assert(b >= 0 && b < B && h >= 0 && h < NH);
    const int C3 = 3 * C, hs = C / NH, R = causal ? CAUSAL_ROWS : T;
    const float scale = (float)(1.0 / sqrt((double)hs));
    const float *q = w.qkv + (size_t)b * T * C3 + (size_t)h * hs;
    const float *st = w.stats + ((size_t)b * NH + h) * T * 2;
    for (int i0 = 0; i0 < T; i0 += R)
        head_probs(att, st, q, q + C, i0, i0 + R < T ? i0 + R : T, T, C, hs, scale, causal);
}

void ct_attention_forward(float *out, float *ws, float *scratch, const float *inp,
                          const float *wqkv, const float *bqkv, const float *wproj,
                          const float *bproj, int B, int T, int C, int NH, int causal)
{
    struct attn_ws w = attn_carve(ws, B, T, C, NH);
    struct attn_scratch sc = scratch_carve(scratch, B, T, C, NH);
    const int C3 = 3 * C, hs = C / NH, R = causal ? CAUSAL_ROWS : T;
    const float scale = (float)(1.0 / sqrt((double)hs));

    ct_linear_forward(w.qkv, inp, wqkv, bqkv, B * T, C, C3);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            /* Head h of sample b: (T, hs) slices with row stride 3C. */
            const float *q = w.qkv + (size_t)b * T * C3 + (size_t)h * hs;
            const float *k = q + C, *v = q + 2 * C;
            /* Its probabilities go to the scratch and are dropped: the
             * next head overwrites them. */
            float *st = w.stats + ((size_t)b * NH + h) * T * 2;
            float *y = w.y + (size_t)b * T * C + (size_t)h * hs;
            for (int i0 = 0; i0 < T; i0 += R)
                head_forward(sc.att, st, y, q, k, v, i0, i0 + R < T ? i0 + R : T, T, C, hs, scale,
                             causal);
        }
    }
    ct_linear_forward(out, w.y, wproj, bproj, B * T, C, C);
}

void ct_attention_backward(float *dinp, float *dwqkv, float *dbqkv, float *dwproj, float *dbproj,
                           const float *dout, const float *ws, float *scratch, const float *inp,
                           const float *wqkv, const float *wproj, int B, int T, int C, int NH,
                           int causal)
{
    struct attn_ws w = attn_carve(ws, B, T, C, NH);
    struct attn_scratch sc = scratch_carve(scratch, B, T, C, NH);
    const int C3 = 3 * C, hs = C / NH, R = causal ? CAUSAL_ROWS : T;
    const float scale = (float)(1.0 / sqrt((double)hs));

    /* Output projection: dy overwritten, dwproj/dbproj accumulated. */
    ct_linear_backward(sc.dy, dwproj, dbproj, dout, w.y, wproj, B * T, C, C);
    for (int b = 0; b < B; b++) {
        for (int h = 0; h < NH; h++) {
            size_t row0 = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = w.qkv + row0, *k = q + C, *v = q + 2 * C;
            float *dq = sc.dqkv + row0, *dk = dq + C, *dv = dq + 2 * C;
            const float *st = w.stats + ((size_t)b * NH + h) * T * 2;
            const float *att = sc.att;
            const float *dy = sc.dy + (size_t)b * T * C + (size_t)h * hs;
            /* By blocks of rows [i0, i1): with the mask, query i's row
             * stops at key i and key j's sums (dv, dk) start at query j. */
            for (int i0 = 0; i0 < T; i0 += R) {
                const int i1 = i0 + R < T ? i0 + R : T, rows = i1 - i0;
                const int keys = causal ? i1 : T;
                float *dp = sc.datt + (size_t)i0 * T;
                /* P again, forward's bits: its rows of blocks before this
                 * one are done, the dv/dk loop below reads them all. */
                head_probs(sc.att, st, q, k, i0, i1, T, C, hs, scale, causal);
                /* dP = dy v^T, then dS over it. */
                ct_gemm(0, 1, rows, keys, hs, 1.0f, dy + (size_t)i0 * C, C, v, C3, 0.0f, dp, T);
                for (int i = i0; i < i1; i++)
                    softmax_row_backward(sc.datt + (size_t)i * T, att + (size_t)i * T,
                                         causal ? i + 1 : T, T);
                /* S = scale q k^T: dq = scale dS k. */
                ct_gemm(0, 0, rows, hs, keys, scale, dp, T, k, C3, 0.0f, dq + (size_t)i0 * C3,
                        C3);
            }
            /* dv = P^T dy and dk = scale dS^T q, rows of keys [j0, j1):
             * with the mask the sums run over queries from j0 on. */
            for (int j0 = 0; j0 < T; j0 += R) {
                const int j1 = j0 + R < T ? j0 + R : T, rows = j1 - j0, from = causal ? j0 : 0;
                const size_t at = (size_t)from * T + j0;
                ct_gemm(1, 0, rows, hs, T - from, 1.0f, att + at, T, dy + (size_t)from * C, C,
                        0.0f, dv + (size_t)j0 * C3, C3);
                ct_gemm(1, 0, rows, hs, T - from, scale, sc.datt + at, T, q + (size_t)from * C3,
                        C3, 0.0f, dk + (size_t)j0 * C3, C3);
            }
        }
    }
    /* QKV projection: dinp overwritten, dwqkv/dbqkv accumulated. */
    ct_linear_backward(dinp, dwqkv, dbqkv, sc.dqkv, inp, wqkv, B * T, C, C3);
}

/* ---------------------------------------------------------------- reference */

/* scale * q[i] . k[j] in double for the head whose q starts at `q` (rows of
 * stride C3; its k is C floats further on). */
static double ref_score(const float *q, int i, int j, int C3, int C, int hs, double scale)
{
    const float *qi = q + (size_t)i * C3, *kj = q + (size_t)j * C3 + C;
    double s = 0.0;
    for (int d = 0; d < hs; d++)
        s += (double)qi[d] * kj[d];
    return s * scale;
}

/* The (T, T) probabilities of the head whose q starts at `base`, in double
 * rounded once to float; st (T, 2) NULL or the rows' max and 1/sum rounded
 * to float (the fast kernels' layout; the reference does not read them
 * back: its backward calls this again, which gives the same bits). */
static void ref_probs(float *att, float *st, const float *base, int T, int C, int hs,
                      double scale, int causal)
{
    const int C3 = 3 * C;
    for (int i = 0; i < T; i++) {
        float *row = att + (size_t)i * T;
        int n = causal ? i + 1 : T;
        /* The scores are recomputed in double for each pass rather than
         * stored in float between them. */
        double mx = -INFINITY, sum = 0.0;
        for (int j = 0; j < n; j++)
            mx = fmax(mx, ref_score(base, i, j, C3, C, hs, scale));
        for (int j = 0; j < n; j++)
            sum += exp(ref_score(base, i, j, C3, C, hs, scale) - mx);
        for (int j = 0; j < n; j++)
            row[j] = (float)(exp(ref_score(base, i, j, C3, C, hs, scale) - mx) / sum);
        for (int j = n; j < T; j++)
            row[j] = 0.0f;
        if (st)
            st[2 * i] = (float)mx, st[2 * i + 1] = (float)(1.0 / sum);
    }
}

void ct_attention_forward_ref(float *out, float *ws, float *scratch, const float *inp,
                              const float *wqkv, const float *bqkv, const float *wproj,
                              const float *bproj, int B, int T, int C, int NH, int causal)
{
    struct attn_ws w = attn_carve(ws, B, T, C, NH);
    struct attn_scratch sc = scratch_carve(scratch, B, T, C, NH);
    const int C3 = 3 * C, hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);

    ct_linear_forward_ref(w.qkv, inp, wqkv, bqkv, B * T, C, C3);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            const float *base = w.qkv + (size_t)b * T * C3 + (size_t)h * hs;
            ref_probs(sc.att, w.stats + ((size_t)b * NH + h) * T * 2, base, T, C, hs, scale,
                      causal);
            for (int i = 0; i < T; i++) {
                const float *row = sc.att + (size_t)i * T;
                int n = causal ? i + 1 : T;
                for (int d = 0; d < hs; d++) {
                    double acc = 0.0;
                    for (int j = 0; j < n; j++)
                        acc += (double)row[j] * base[(size_t)j * C3 + 2 * C + d];
                    w.y[((size_t)b * T + i) * C + (size_t)h * hs + d] = (float)acc;
                }
            }
        }
    ct_linear_forward_ref(out, w.y, wproj, bproj, B * T, C, C);
}

void ct_attention_backward_ref(float *dinp, float *dwqkv, float *dbqkv, float *dwproj,
                               float *dbproj, const float *dout, const float *ws, float *scratch,
                               const float *inp, const float *wqkv, const float *wproj, int B,
                               int T, int C, int NH, int causal)
{
    struct attn_ws w = attn_carve(ws, B, T, C, NH);
    struct attn_scratch sc = scratch_carve(scratch, B, T, C, NH);
    const int C3 = 3 * C, hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);

    ct_linear_backward_ref(sc.dy, dwproj, dbproj, dout, w.y, wproj, B * T, C, C);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++) {
            size_t off = (size_t)b * T * C3 + (size_t)h * hs;
            const float *qkv = w.qkv + off;
            float *dqkv = sc.dqkv + off;
            const float *att = sc.att;
            ref_probs(sc.att, NULL, qkv, T, C, hs, scale, causal);
            const float *dy = sc.dy + (size_t)b * T * C + (size_t)h * hs;
            float *ds = sc.datt;
            /* dS[i][j] = P[i][j] (dP[i][j] - sum_l P[i][l] dP[i][l]),
             * dP[i][j] = sum_d dy[i][d] v[j][d]. */
            for (int i = 0; i < T; i++) {
                int n = causal ? i + 1 : T;
                /* dP is computed twice (for the row sum, then for dS) so that
                 * it is never rounded to float before the subtraction. */
                double dot = 0.0;
                for (int pass = 0; pass < 2; pass++)
                    for (int j = 0; j < n; j++) {
                        double dp = 0.0;
                        for (int d = 0; d < hs; d++)
                            dp += (double)dy[(size_t)i * C + d] * qkv[(size_t)j * C3 + 2 * C + d];
                        double p = att[(size_t)i * T + j];
                        if (pass == 0)
                            dot += p * dp;
                        else
                            ds[(size_t)i * T + j] = (float)(p * (dp - dot));
                    }
                for (int j = n; j < T; j++)
                    ds[(size_t)i * T + j] = 0.0f;
            }
            for (int t = 0; t < T; t++)
                for (int d = 0; d < hs; d++) {
                    double aq = 0.0, ak = 0.0, av = 0.0;
                    for (int u = 0; u < T; u++) {
                        /* dq[t] = scale sum_u dS[t][u] k[u];
                         * dk[t] = scale sum_u dS[u][t] q[u];
                         * dv[t] = sum_u P[u][t] dy[u]. */
                        aq += (double)ds[(size_t)t * T + u] * qkv[(size_t)u * C3 + C + d];
                        ak += (double)ds[(size_t)u * T + t] * qkv[(size_t)u * C3 + d];
                        av += (double)att[(size_t)u * T + t] * dy[(size_t)u * C + d];
                    }
                    dqkv[(size_t)t * C3 + d] = (float)(scale * aq);
                    dqkv[(size_t)t * C3 + C + d] = (float)(scale * ak);
                    dqkv[(size_t)t * C3 + 2 * C + d] = (float)av;
                }
        }
    ct_linear_backward_ref(dinp, dwqkv, dbqkv, sc.dqkv, inp, wqkv, B * T, C, C3);
}

/* ---------------------------------------------------------------- module */

struct attn_ctx {
    int T, C, NH, causal;
};

static int attn_declare(struct ct_module *m, struct ct_decl *d)
{
    struct attn_ctx *c = m->ctx;
    int rc = ct_module_param(m, d, "qkv.weight", 2, (const int64_t[]){3 * c->C, c->C});
    if (rc >= 0)
        rc = ct_module_param(m, d, "qkv.bias", 1, (const int64_t[]){3 * c->C});
    if (rc >= 0)
        rc = ct_module_param(m, d, "proj.weight", 2, (const int64_t[]){c->C, c->C});
    if (rc >= 0)
        rc = ct_module_param(m, d, "proj.bias", 1, (const int64_t[]){c->C});
    return rc < 0 ? rc : 0;
}

static size_t attn_workspace(struct ct_module *m, int max_batch)
{
    struct attn_ctx *c = m->ctx;
    return ct_attention_workspace(max_batch, c->T, c->C, c->NH);
}

static size_t attn_scratch(struct ct_module *m, int max_batch)
{
    struct attn_ctx *c = m->ctx;
    return ct_attention_scratch(max_batch, c->T, c->C, c->NH);
}

static void attn_init(struct ct_module *m, struct ct_rng_key key)
{
    struct attn_ctx *c = m->ctx;
    /* As the two nn.Linear layers they stand for: U(+-1/sqrt(C)). */
    float bound = 1.0f / sqrtf((float)c->C);
    ct_init_uniform(m->p[0], (size_t)3 * c->C * c->C, bound, key, (uint32_t)m->view[0]);
    ct_init_uniform(m->p[1], (size_t)3 * c->C, bound, key, (uint32_t)m->view[1]);
    ct_init_uniform(m->p[2], (size_t)c->C * c->C, bound, key, (uint32_t)m->view[2]);
    ct_init_uniform(m->p[3], (size_t)c->C, bound, key, (uint32_t)m->view[3]);
}

static void attn_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    struct attn_ctx *c = m->ctx;
    ct_attention_forward(out, m->ws, m->scratch, inp, m->p[0], m->p[1], m->p[2], m->p[3], B, c->T,
                         c->C, c->NH, c->causal);
}

static void attn_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                     const float *out, int B)
{
    (void)out;
    struct attn_ctx *c = m->ctx;
    ct_attention_backward(dinp, m->g[0], m->g[1], m->g[2], m->g[3], dout, m->ws, m->scratch, inp,
                          m->p[0], m->p[2], B, c->T, c->C, c->NH, c->causal);
}

/* Per sample: the projections qkv (T, C) x (C, 3C) and proj (T, C) x
 * (C, C) as weight products (qkv's input gradient only with need_dinp;
 * proj's is always needed), and per head two (T, hs, T) products forward
 * (QK^T, PV) and four backward (dP, dV, dQ, dK): over all heads T*T*C
 * multiply-adds each. A causal mask does not halve them: the kernel
 * computes the whole T x T score matrix and zeroes the masked half.
 * Backward's recompute of q k^T (the probabilities are not kept, see
 * attn_ws) is not counted: these are model FLOPs, not the kernels'. */
static struct ct_flops attn_flops(const struct ct_module *m, int need_dinp)
{
    const struct attn_ctx *c = m->ctx;
    const double T = c->T, C = c->C, TTC = T * T * C;
    struct ct_flops qkv = ct_flops_weight_product(T * C * 3 * C, need_dinp);
    struct ct_flops proj = ct_flops_weight_product(T * C * C, 1);
    return (struct ct_flops){qkv.fwd + proj.fwd + 2 * 2 * TTC, qkv.bwd + proj.bwd + 4 * 2 * TTC};
}

static const struct ct_module_ops attn_ops = {
    .kind = "attention",
    .flops = attn_flops,
    .declare = attn_declare,
    .workspace = attn_workspace,
    .scratch = attn_scratch,
    .init = attn_init,
    .forward = attn_fwd,
    .backward = attn_bwd,
    .backward_ignores_out = 1,
};

struct ct_module *ct_attention_new(int T, int C, int NH, int causal)
{
    if (T < 1 || C < 1 || NH < 1 || C % NH != 0)
        return NULL;
    size_t n = (size_t)T * C;
    struct ct_module *m = ct_module_alloc(&attn_ops, n, n, sizeof(struct attn_ctx));
    if (m)
        *(struct attn_ctx *)m->ctx = (struct attn_ctx){T, C, NH, causal != 0};
    return m;
}
