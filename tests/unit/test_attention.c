/* Unit tests for the multi-head self-attention kernels (src/nn/attention.c).
 *
 * Dims legend: B = batch, T = tokens, C = channels, NH = heads, hs = C / NH.
 *
 * Evidence, from strongest to most specific:
 *   - golden: out and every gradient against PyTorch (tests/fixtures/
 *     attention.ctfx, made by tests/fixtures/make_fixtures_attn.py), with and
 *     without the causal mask, for the fast and the reference kernels;
 *   - central finite differences of a float64 forward written here, against
 *     the backward w.r.t. the input and every parameter;
 *   - fast (sgemm) against reference (double loops) on edge shapes: T = 1,
 *     NH = 1, NH = C (hs = 1), odd T, the ViT's shape;
 *   - bf16 (train.precision): each of the eight products (two projections
 *     forward, q k^T and P v, and backward's dy, dW, dP, dv, dq, dk, dx)
 *     against a float64 oracle over the same bf16-rounded operands, taken
 *     from what forward and backward stored, within float32 accumulation
 *     error; softmax and the bias sums checked as float32;
 *   - the probabilities, which the workspace does not keep: backward's
 *     recomputed P is forward's bit for bit (float32 and bf16, both sgemm
 *     kernels), and the workspace has no (T, T) part;
 *   - contracts: parameter gradients accumulate, dinp is overwritten, NULL
 *     dinp and biases, no write outside the workspace, a sample's output and
 *     gradients do not depend on the other samples of the batch, and with
 *     the causal mask a token's output does not depend on later tokens.
 * Speed is measured elsewhere (a benchmark is not a test).
 *
 * Set CT_TEST_VERBOSE=1 to print the max difference of every comparison.
 */
#include "nn/attention.h"
#include "nn/module.h"

#include "core/bf16.h"
#include "core/gemm.h"

#include "ct_test.h"

#include <stdint.h>

#include "ct_fixture.h"

/* Deterministic U(-bound, bound) test data: one Philox stream per buffer. */
static void fill(float *p, size_t n, float bound, uint32_t stream)
{
    ct_init_uniform(p, n, bound, ct_rng_key(20240612, CT_RNG_INIT), stream);
}

/* A workspace (or scratch) as the arena would hand it out: 64-byte aligned,
 * filled with NaN so that reading anything the kernels did not write poisons
 * the result. */
static float *alloc_nan(size_t bytes)
{
    CU_ASSERT_FATAL(bytes % 64 == 0);
    float *ws = aligned_alloc(64, bytes);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ws);
    for (size_t i = 0; i < bytes / sizeof(float); i++)
        ws[i] = NAN;
    return ws;
}

/* The inputs and parameters of one attention layer, and their gradients. */
struct attn_case {
    int B, T, C, NH, causal;
    float *x, *wqkv, *bqkv, *wproj, *bproj, *dout;    /* inputs */
    float *out, *dx, *dwqkv, *dbqkv, *dwproj, *dbproj; /* results */
    float *ws, *scratch;
};

static void case_alloc(struct attn_case *a, int B, int T, int C, int NH, int causal)
{
    memset(a, 0, sizeof *a);
    a->B = B, a->T = T, a->C = C, a->NH = NH, a->causal = causal;
    size_t n = (size_t)B * T * C;
    a->x = ct_test_floats(n), a->dout = ct_test_floats(n), a->out = ct_test_floats(n);
    a->dx = ct_test_floats(n);
    a->wqkv = ct_test_floats((size_t)3 * C * C), a->dwqkv = ct_test_floats((size_t)3 * C * C);
    a->bqkv = ct_test_floats((size_t)3 * C), a->dbqkv = ct_test_floats((size_t)3 * C);
    a->wproj = ct_test_floats((size_t)C * C), a->dwproj = ct_test_floats((size_t)C * C);
    a->bproj = ct_test_floats(C), a->dbproj = ct_test_floats(C);
    a->ws = alloc_nan(ct_attention_workspace(B, T, C, NH));
    a->scratch = alloc_nan(ct_attention_scratch(B, T, C, NH));
}

/* Random data; the weights at twice nn.Linear's range, so that attention is
 * far from uniform and a wrong scale or mask shows. */
static void case_fill(struct attn_case *a, uint32_t seed)
{
    int C = a->C;
    size_t n = (size_t)a->B * a->T * C;
    float bound = 1.0f / sqrtf((float)C);
    fill(a->x, n, 1.5f, seed);
    fill(a->dout, n, 1.0f, seed + 1);
    fill(a->wqkv, (size_t)3 * C * C, 2 * bound, seed + 2);
    fill(a->bqkv, (size_t)3 * C, bound, seed + 3);
    fill(a->wproj, (size_t)C * C, bound, seed + 4);
    fill(a->bproj, C, bound, seed + 5);
}

static void case_free(struct attn_case *a)
{
    float *bufs[] = {a->x,     a->wqkv,  a->bqkv,  a->wproj,  a->bproj,  a->dout, a->out,
                     a->dx,    a->dwqkv, a->dbqkv, a->dwproj, a->dbproj, a->ws, a->scratch};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    memset(a, 0, sizeof *a);
}

static void case_zero_grads(struct attn_case *a)
{
    int C = a->C;
    memset(a->dwqkv, 0, (size_t)3 * C * C * sizeof(float));
    memset(a->dbqkv, 0, (size_t)3 * C * sizeof(float));
    memset(a->dwproj, 0, (size_t)C * C * sizeof(float));
    memset(a->dbproj, 0, (size_t)C * sizeof(float));
}

/* Forward then backward (fast or reference) into a's result buffers; the
 * parameter gradients are zeroed first and dinp is filled with NaN (it must
 * be overwritten). */
static void case_run(struct attn_case *a, int ref)
{
    int B = a->B, T = a->T, C = a->C, NH = a->NH;
    case_zero_grads(a);
    for (size_t i = 0; i < (size_t)B * T * C; i++)
        a->dx[i] = NAN;
    if (ref) {
        ct_attention_forward_ref(a->out, a->ws, a->scratch, a->x, a->wqkv, a->bqkv, a->wproj,
                                 a->bproj, B, T, C, NH, a->causal);
        ct_attention_backward_ref(a->dx, a->dwqkv, a->dbqkv, a->dwproj, a->dbproj, a->dout, a->ws,
                                  a->scratch, a->x, a->wqkv, a->wproj, B, T, C, NH, a->causal);
    } else {
        ct_attention_forward(a->out, a->ws, a->scratch, a->x, a->wqkv, a->bqkv, a->wproj,
                             a->bproj, B, T, C, NH, a->causal);
        ct_attention_backward(a->dx, a->dwqkv, a->dbqkv, a->dwproj, a->dbproj, a->dout, a->ws,
                              a->scratch, a->x, a->wqkv, a->wproj, B, T, C, NH, a->causal);
    }
}

/* ------------------------------------------------------------ golden */

/* Our float32 kernels against torch's float32 kernels: both round the same
 * sums of at most C = 8 (projections) or T = 5 (attention) products of O(1)
 * values in different orders, so they agree to a few ulp of those sums,
 * ~1e-6 absolute. atol 1e-5 + rtol 1e-4 leaves a 10x margin and is still
 * 1e3..1e4 times smaller than a real mistake (a missing 1/sqrt(hs) halves
 * the scores, a missing mask or a wrong head stride moves values by
 * O(0.01..1)). */
#define GOLD_ATOL 1e-5
#define GOLD_RTOL 1e-4

static void golden_variant(const struct fx_file *f, const char *variant, int causal, int ref)
{
    enum { B = 2, T = 5, C = 8, NH = 2 };
    const float *dims = fx_get(f, "dims", 4);
    if (!dims)
        return;
    CU_ASSERT_FATAL(dims[0] == B && dims[1] == T && dims[2] == C && dims[3] == NH);
    struct attn_case a;
    case_alloc(&a, B, T, C, NH, causal);
    static const char *const in_names[] = {"x", "wqkv", "bqkv", "wproj", "bproj", "dout"};
    float *in_bufs[] = {a.x, a.wqkv, a.bqkv, a.wproj, a.bproj, a.dout};
    const size_t in_n[] = {B * T * C, 3 * C * C, 3 * C, C * C, C, B * T * C};
    for (int i = 0; i < 6; i++) {
        const float *src = fx_get(f, in_names[i], in_n[i]);
        if (!src)
            goto done;
        memcpy(in_bufs[i], src, in_n[i] * sizeof(float));
    }
    case_run(&a, ref);

    static const char *const out_names[] = {"out", "dx", "dwqkv", "dbqkv", "dwproj", "dbproj"};
    const float *out_bufs[] = {a.out, a.dx, a.dwqkv, a.dbqkv, a.dwproj, a.dbproj};
    const size_t out_n[] = {B * T * C, B * T * C, 3 * C * C, 3 * C, C * C, C};
    for (int i = 0; i < 6; i++) {
        char key[64], label[96];
        snprintf(key, sizeof key, "%s.%s", variant, out_names[i]);
        snprintf(label, sizeof label, "attn%s.%s", ref ? "_ref" : "", key);
        const float *want = fx_get(f, key, out_n[i]);
        if (want)
            check_close(label, out_bufs[i], want, out_n[i], GOLD_ATOL, GOLD_RTOL);
    }
done:
    case_free(&a);
}

static void test_attention_golden(void)
{
    struct fx_file f;
    if (fx_open(&f, "attention.ctfx"))
        return;
    for (int ref = 0; ref <= 1; ref++) {
        golden_variant(&f, "full", 0, ref);
        golden_variant(&f, "causal", 1, ref);
    }
    /* The fixture itself must tell the variants apart, or the causal golden
     * test proves nothing about the mask: the last token sees every key in
     * both, earlier ones do not. */
    const float *full = fx_get(&f, "full.out", 2 * 5 * 8), *causal = fx_get(&f, "causal.out", 80);
    if (full && causal) {
        double d = 0;
        for (int i = 0; i < 80; i++)
            d = fmax(d, fabs((double)full[i] - causal[i]));
        CU_ASSERT(d > 0.05);
    }
    fx_free(&f);
}

/* ------------------------------------------------------------ float64 oracle */

/* The attention loss sum(out * dout) in double, written independently of
 * src/nn (direct loops, per-head indexing spelled out), on double copies of
 * the inputs so that finite differences are exact to ~1e-10. */
struct attn64 {
    int B, T, C, NH, causal;
    double *t[6]; /* x, wqkv, bqkv, wproj, bproj, dout */
    double *qkv, *y, *p; /* scratch: (B*T, 3C), (B*T, C), (T) */
};

static double attn64_loss(const struct attn64 *a)
{
    const int B = a->B, T = a->T, C = a->C, NH = a->NH, hs = C / NH;
    const double *x = a->t[0], *wqkv = a->t[1], *bqkv = a->t[2], *wproj = a->t[3],
                 *bproj = a->t[4], *dout = a->t[5];
    for (int r = 0; r < B * T; r++)
        for (int o = 0; o < 3 * C; o++) {
            double s = bqkv[o];
            for (int c = 0; c < C; c++)
                s += x[r * C + c] * wqkv[o * C + c];
            a->qkv[r * 3 * C + o] = s;
        }
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const double *q = &a->qkv[(b * T + i) * 3 * C + h * hs];
                int n = a->causal ? i + 1 : T;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    const double *k = &a->qkv[(b * T + j) * 3 * C + C + h * hs];
                    double s = 0;
                    for (int d = 0; d < hs; d++)
                        s += q[d] * k[d];
                    a->p[j] = s / sqrt((double)hs);
                    mx = fmax(mx, a->p[j]);
                }
                for (int j = 0; j < n; j++)
                    sum += (a->p[j] = exp(a->p[j] - mx));
                for (int d = 0; d < hs; d++) {
                    double s = 0;
                    for (int j = 0; j < n; j++)
                        s += a->p[j] / sum * a->qkv[(b * T + j) * 3 * C + 2 * C + h * hs + d];
                    a->y[(b * T + i) * C + h * hs + d] = s;
                }
            }
    double loss = 0;
    for (int r = 0; r < B * T; r++)
        for (int o = 0; o < C; o++) {
            double s = bproj[o];
            for (int c = 0; c < C; c++)
                s += a->y[r * C + c] * wproj[o * C + c];
            loss += s * dout[r * C + o];
        }
    return loss;
}

static double *to_double(const float *p, size_t n)
{
    double *d = malloc(n * sizeof *d);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    for (size_t i = 0; i < n; i++)
        d[i] = p[i];
    return d;
}

/* Central differences (h = 1e-5 in double: truncation ~1e-10, rounding
 * ~1e-11) of sum(out * dout) against the float32 backward. The analytic
 * gradients carry float32 rounding of sums of <= B*T = 10 products of O(1)
 * values (~1e-6); atol 2e-5 + rtol 2e-4 is 10x that, while dropping the
 * softmax's row-sum term, the 1/sqrt(hs) in dq/dk or the mask in backward
 * changes gradients by O(0.01..1). */
static void fd_check(int B, int T, int C, int NH, int causal, int ref)
{
    struct attn_case a;
    case_alloc(&a, B, T, C, NH, causal);
    case_fill(&a, 100 + (uint32_t)(T * 7 + NH));
    case_run(&a, ref);

    struct attn64 o = {.B = B, .T = T, .C = C, .NH = NH, .causal = causal};
    const float *src[6] = {a.x, a.wqkv, a.bqkv, a.wproj, a.bproj, a.dout};
    const size_t n[6] = {(size_t)B * T * C, (size_t)3 * C * C, (size_t)3 * C, (size_t)C * C,
                         (size_t)C, (size_t)B * T * C};
    for (int i = 0; i < 6; i++)
        o.t[i] = to_double(src[i], n[i]);
    o.qkv = malloc((size_t)B * T * 3 * C * sizeof(double));
    o.y = malloc((size_t)B * T * C * sizeof(double));
    o.p = malloc((size_t)T * sizeof(double));
    CU_ASSERT_FATAL(o.qkv && o.y && o.p);

    /* The oracle's forward must agree with the kernel's before its
     * derivatives mean anything. */
    double L = attn64_loss(&o), Lk = 0;
    for (size_t i = 0; i < n[0]; i++)
        Lk += (double)a.out[i] * a.dout[i];
    char label[96];
    snprintf(label, sizeof label, "fd%s B%d T%d C%d NH%d%s loss", ref ? "_ref" : "", B, T, C, NH,
             causal ? " causal" : "");
    check_scalar(label, Lk, L, 1e-4, 1e-5);

    static const char *const names[] = {"dx", "dwqkv", "dbqkv", "dwproj", "dbproj"};
    const float *grads[5] = {a.dx, a.dwqkv, a.dbqkv, a.dwproj, a.dbproj};
    for (int v = 0; v < 5; v++) {
        float *fd = ct_test_floats(n[v]);
        for (size_t i = 0; i < n[v]; i++) {
            const double h = 1e-5, orig = o.t[v][i];
            o.t[v][i] = orig + h;
            double Lp = attn64_loss(&o);
            o.t[v][i] = orig - h;
            double Lm = attn64_loss(&o);
            o.t[v][i] = orig;
            fd[i] = (float)((Lp - Lm) / (2 * h));
        }
        snprintf(label, sizeof label, "fd%s B%d T%d C%d NH%d%s %s", ref ? "_ref" : "", B, T, C,
                 NH, causal ? " causal" : "", names[v]);
        check_close(label, grads[v], fd, n[v], 2e-5, 2e-4);
        free(fd);
    }
    for (int i = 0; i < 6; i++)
        free(o.t[i]);
    free(o.qkv);
    free(o.y);
    free(o.p);
    case_free(&a);
}

static void test_attention_fd(void)
{
    /* {B, T, C, NH}: the golden shape, more heads than one, a head of size 1. */
    static const int shapes[][4] = {{2, 5, 8, 2}, {1, 4, 6, 3}, {2, 3, 4, 4}, {1, 6, 4, 1}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int causal = 0; causal <= 1; causal++)
            for (int ref = 0; ref <= 1; ref++)
                fd_check(shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3], causal, ref);
}

/* ------------------------------------------------------------ fast vs reference */

static void test_attention_fast_vs_ref(void)
{
    /* {B, T, C, NH} */
    static const int shapes[][4] = {
        {1, 1, 4, 1},   /* one token, one head */
        {3, 1, 8, 2},   /* T = 1: softmax of one score is exactly 1 */
        {3, 7, 12, 1},  /* NH = 1 */
        {2, 6, 6, 6},   /* NH = C: hs = 1 */
        {2, 9, 12, 4},
        {1, 33, 24, 3}, /* odd T beyond sgemm's small blocks */
        {4, 16, 64, 4}, /* the ViT's block */
        {2, 150, 16, 2}, /* causal: three blocks of rows (64, 64, 22), see attention.c */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int causal = 0; causal <= 1; causal++) {
            int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
            struct attn_case f, r;
            case_alloc(&f, B, T, C, NH, causal);
            case_alloc(&r, B, T, C, NH, causal);
            case_fill(&f, 200 + (uint32_t)s * 8);
            case_fill(&r, 200 + (uint32_t)s * 8);
            case_run(&f, 0);
            case_run(&r, 1);
            /* Float32 sums of up to C = 64 products of O(1) values against
             * double sums: ~1e-6 apart; the golden tolerances hold. */
            const float *fb[] = {f.out, f.dx, f.dwqkv, f.dbqkv, f.dwproj, f.dbproj};
            const float *rb[] = {r.out, r.dx, r.dwqkv, r.dbqkv, r.dwproj, r.dbproj};
            const size_t n[] = {(size_t)B * T * C, (size_t)B * T * C, (size_t)3 * C * C,
                                (size_t)3 * C,     (size_t)C * C,     (size_t)C};
            static const char *const names[] = {"out", "dx", "dwqkv", "dbqkv", "dwproj", "dbproj"};
            for (int i = 0; i < 6; i++) {
                char label[96];
                snprintf(label, sizeof label, "fast/ref B%d T%d C%d NH%d%s %s", B, T, C, NH,
                         causal ? " causal" : "", names[i]);
                check_close(label, fb[i], rb[i], n[i], GOLD_ATOL, GOLD_RTOL);
            }
            case_free(&f);
            case_free(&r);
        }
}

/* ------------------------------------------------------------ contracts */

/* A second backward adds the same gradients again (2x) and overwrites dinp
 * (1x); NULL dinp and NULL biases are accepted and leave nothing written. */
static void test_attention_accumulate(void)
{
    enum { B = 2, T = 6, C = 12, NH = 3 };
    for (int ref = 0; ref <= 1; ref++) {
        struct attn_case a;
        case_alloc(&a, B, T, C, NH, 1);
        case_fill(&a, 300);
        case_run(&a, ref);
        float *dx1 = ct_test_floats(B * T * C), *dw1 = ct_test_floats(3 * C * C),
              *db1 = ct_test_floats(3 * C), *dp1 = ct_test_floats(C * C), *dpb1 = ct_test_floats(C);
        memcpy(dx1, a.dx, sizeof(float) * B * T * C);
        for (int i = 0; i < 3 * C * C; i++)
            dw1[i] = 2 * a.dwqkv[i];
        for (int i = 0; i < 3 * C; i++)
            db1[i] = 2 * a.dbqkv[i];
        for (int i = 0; i < C * C; i++)
            dp1[i] = 2 * a.dwproj[i];
        for (int i = 0; i < C; i++)
            dpb1[i] = 2 * a.dbproj[i];
        void (*bwd)(float *, float *, float *, float *, float *, const float *, const float *,
                    float *, const float *, const float *, const float *, int, int, int, int,
                    int) =
            ref ? ct_attention_backward_ref : ct_attention_backward;
        bwd(a.dx, a.dwqkv, a.dbqkv, a.dwproj, a.dbproj, a.dout, a.ws, a.scratch, a.x, a.wqkv,
            a.wproj, B, T, C, NH, 1);
        /* Doubling is exact, and the second pass adds the same float
         * values as the first (the bias sums are added row by row, whose
         * roundings can differ by an ulp of the running sum: 1e-6). */
        check_close(ref ? "acc_ref.dx (1x)" : "acc.dx (1x)", a.dx, dx1, B * T * C, 0, 0);
        check_close(ref ? "acc_ref.dwqkv (2x)" : "acc.dwqkv (2x)", a.dwqkv, dw1, 3 * C * C, 1e-6,
                    1e-6);
        check_close(ref ? "acc_ref.dbqkv (2x)" : "acc.dbqkv (2x)", a.dbqkv, db1, 3 * C, 1e-6,
                    1e-6);
        check_close(ref ? "acc_ref.dwproj (2x)" : "acc.dwproj (2x)", a.dwproj, dp1, C * C, 1e-6,
                    1e-6);
        check_close(ref ? "acc_ref.dbproj (2x)" : "acc.dbproj (2x)", a.dbproj, dpb1, C, 1e-6,
                    1e-6);

        /* NULL dinp and biases: the weight gradients still accumulate
         * (now 3x), nothing else is touched. */
        for (int i = 0; i < B * T * C; i++)
            a.dx[i] = NAN;
        memcpy(db1, a.dbqkv, sizeof(float) * 3 * C);
        bwd(NULL, a.dwqkv, NULL, a.dwproj, NULL, a.dout, a.ws, a.scratch, a.x, a.wqkv, a.wproj,
            B, T, C, NH, 1);
        for (int i = 0; i < 3 * C * C; i++)
            dw1[i] = dw1[i] / 2 * 3;
        for (int i = 0; i < C * C; i++)
            dp1[i] = dp1[i] / 2 * 3;
        check_close("acc.dwqkv (3x, NULL dinp)", a.dwqkv, dw1, 3 * C * C, 2e-6, 1e-6);
        check_close("acc.dwproj (3x, NULL dinp)", a.dwproj, dp1, C * C, 2e-6, 1e-6);
        check_close("acc.dbqkv untouched", a.dbqkv, db1, 3 * C, 0, 0);
        for (int i = 0; i < B * T * C; i++)
            CU_ASSERT(isnan(a.dx[i]));
        free(dx1);
        free(dw1);
        free(db1);
        free(dp1);
        free(dpb1);
        case_free(&a);
    }
}

/* No bias: the same as a zero bias. */
static void test_attention_no_bias(void)
{
    enum { B = 2, T = 4, C = 8, NH = 2 };
    struct attn_case a;
    case_alloc(&a, B, T, C, NH, 0);
    case_fill(&a, 350);
    memset(a.bqkv, 0, sizeof(float) * 3 * C);
    memset(a.bproj, 0, sizeof(float) * C);
    case_run(&a, 0);
    float *out = ct_test_floats(B * T * C), *dx = ct_test_floats(B * T * C);
    float *dw = ct_test_floats(3 * C * C), *dp = ct_test_floats(C * C);
    ct_attention_forward(out, a.ws, a.scratch, a.x, a.wqkv, NULL, a.wproj, NULL, B, T, C, NH, 0);
    ct_attention_backward(dx, dw, NULL, dp, NULL, a.dout, a.ws, a.scratch, a.x, a.wqkv, a.wproj,
                          B, T, C, NH, 0);
    check_close("nobias.out", out, a.out, B * T * C, 0, 0);
    check_close("nobias.dx", dx, a.dx, B * T * C, 0, 0);
    check_close("nobias.dwqkv", dw, a.dwqkv, 3 * C * C, 0, 0);
    check_close("nobias.dwproj", dp, a.dwproj, C * C, 0, 0);
    free(out);
    free(dx);
    free(dw);
    free(dp);
    case_free(&a);
}

/* The kernels write only inside the workspace and scratch they asked for:
 * guard floats after each keep their values through forward and backward. */
static void test_attention_workspace_bounds(void)
{
    /* {B, T, C, NH}: sizes whose parts are not multiples of 16 floats. */
    static const int shapes[][4] = {{1, 1, 4, 1}, {3, 7, 12, 3}, {2, 5, 10, 5}};
    enum { GUARD = 64 };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
        for (int ref = 0; ref <= 1; ref++) {
            size_t n[2] = {ct_attention_workspace(B, T, C, NH) / sizeof(float),
                           ct_attention_scratch(B, T, C, NH) / sizeof(float)};
            /* At least what the kernels must keep: qkv, y, each softmax
             * row's max and 1/sum; and what backward needs at once: dy,
             * dqkv, a head's P and dS. */
            CU_ASSERT(n[0] >= (size_t)B * T * 4 * C + (size_t)2 * B * NH * T);
            CU_ASSERT(n[1] >= (size_t)B * T * 4 * C + (size_t)2 * T * T);
            float *buf[2];
            for (int k = 0; k < 2; k++) {
                buf[k] = aligned_alloc(64, (n[k] + GUARD) * sizeof(float));
                CU_ASSERT_PTR_NOT_NULL_FATAL(buf[k]);
                for (size_t i = 0; i < n[k] + GUARD; i++)
                    buf[k][i] = i < n[k] ? NAN : (float)i;
            }
            struct attn_case a;
            case_alloc(&a, B, T, C, NH, 1);
            case_fill(&a, 400);
            free(a.ws);
            free(a.scratch);
            a.ws = buf[0];
            a.scratch = buf[1];
            case_run(&a, ref);
            int intact = 1;
            for (int k = 0; k < 2; k++)
                for (size_t i = n[k]; i < n[k] + GUARD; i++)
                    intact &= buf[k][i] == (float)i;
            CU_ASSERT(intact);
            /* And nothing NaN leaked from the unwritten workspace. */
            int finite = 1;
            for (int i = 0; i < B * T * C; i++)
                finite &= isfinite(a.out[i]) && isfinite(a.dx[i]);
            CU_ASSERT(finite);
            case_free(&a); /* frees both */
        }
    }
}

/* The workspace keeps no (T, T) matrix: at GPT-2 small's shape (T = 1024,
 * C = 768, NH = 12) qkv, y and two floats per softmax row, 12.1 MiB a
 * sample (with the probabilities it was 60 MiB), the scratch one head's P
 * and dS besides dy and dqkv. Every part is a multiple of 16 floats there,
 * so the sizes are exact. */
static void test_attention_workspace_size(void)
{
    const size_t T = 1024, C = 768, NH = 12;
    for (int B = 1; B <= 4; B *= 2) {
        CU_ASSERT_EQUAL(ct_attention_workspace(B, (int)T, (int)C, (int)NH),
                        (B * T * 4 * C + 2 * B * NH * T) * sizeof(float));
        CU_ASSERT_EQUAL(ct_attention_scratch(B, (int)T, (int)C, (int)NH),
                        (B * T * 4 * C + 2 * T * T) * sizeof(float));
    }
    CU_ASSERT_EQUAL(ct_attention_workspace(1, (int)T, (int)C, (int)NH), 12681216);
}

/* Backward recomputes the probabilities that the workspace does not keep,
 * from q k^T and each row's max and 1/sum: they must be forward's bit for
 * bit, or the gradients are no longer those of forward's output. The
 * scratch shows the last (sample, head)'s P after forward (forward's own
 * softmax, in place) and after backward (recomputed), and
 * ct_attention_probs recomputes it as backward does. Since a NaN scratch
 * that nobody wrote would compare equal too, the rows must also be
 * probabilities: sums of 1, zeros above the diagonal with the mask. Shapes:
 * one head alone; several samples and heads (the last at b, h > 0); the
 * blocks of rows with the mask (64 rows: T = 150 is 64 + 64 + 22, T = 65
 * ends with a block of one); hs = 1. In float32 and bf16. */
static void test_attention_recompute_bits(void)
{
    /* {B, T, C, NH} */
    static const int shapes[][4] = {
        {1, 1, 4, 1}, {1, 150, 16, 1}, {2, 150, 24, 3}, {2, 64, 12, 12}, {3, 65, 32, 4},
    };
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int causal = 0; causal <= 1; causal++)
            for (int prec = 0; prec <= 1; prec++) {
                const int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
                const size_t TT = (size_t)T * T;
                char label[96];
                snprintf(label, sizeof label, "recompute B%d T%d C%d NH%d%s%s", B, T, C, NH,
                         causal ? " causal" : "", prec ? " bf16" : "");
                struct attn_case a;
                case_alloc(&a, B, T, C, NH, causal);
                case_fill(&a, 700 + (uint32_t)(4 * s + 2 * causal + prec));
                ct_gemm_set_precision(prec ? CT_PRECISION_BF16 : CT_PRECISION_FP32);
                ct_attention_forward(a.out, a.ws, a.scratch, a.x, a.wqkv, a.bqkv, a.wproj,
                                     a.bproj, B, T, C, NH, causal);
                struct ct_attention_view v = ct_attention_view(a.ws, a.scratch, B, T, C, NH);
                float *fwd = ct_test_floats(TT), *again = ct_test_floats(TT);
                memcpy(fwd, v.att, TT * sizeof(float));
                ct_attention_probs(again, a.ws, B - 1, NH - 1, B, T, C, NH, causal);
                const int same_probs = memcmp(again, fwd, TT * sizeof(float)) == 0;
                case_zero_grads(&a);
                ct_attention_backward(a.dx, a.dwqkv, a.dbqkv, a.dwproj, a.dbproj, a.dout, a.ws,
                                      a.scratch, a.x, a.wqkv, a.wproj, B, T, C, NH, causal);
                ct_gemm_set_precision(CT_PRECISION_FP32);
                const int same_bwd = memcmp(v.att, fwd, TT * sizeof(float)) == 0;
                if (!same_probs || !same_bwd)
                    fprintf(stderr, "  %s: %s\n", label,
                            !same_probs ? "ct_attention_probs differs from forward's P"
                                        : "backward's P differs from forward's");
                CU_ASSERT(same_probs);
                CU_ASSERT(same_bwd);
                double worst = 0.0;
                int masked = 1;
                for (int i = 0; i < T; i++) {
                    const int n = causal ? i + 1 : T;
                    double sum = 0.0;
                    for (int j = 0; j < n; j++)
                        sum += fwd[(size_t)i * T + j];
                    for (int j = n; j < T; j++)
                        masked &= fwd[(size_t)i * T + j] == 0.0f;
                    worst = isnan(sum) ? INFINITY : fmax(worst, fabs(sum - 1.0));
                }
                /* float32 rounding of the sums of e (16 lanes of T / 16
                 * terms), of 1/sum and of each e times it: below (T + 4) u. */
                check_scalar(label, worst, 0.0, (T + 4) * 0x1p-24, 0.0);
                CU_ASSERT(masked);
                free(fwd);
                free(again);
                case_free(&a);
            }
}
CT_TEST_WITH_GEMM(test_attention_recompute_bits, 0)
CT_TEST_WITH_GEMM(test_attention_recompute_bits, 1)

/* Sample b's output and input gradient depend on sample b alone, and the
 * parameter gradients of a batch are the sums over its samples: a batch of 3
 * against each sample run alone (B = 1), accumulating into one set of
 * gradients. sgemm may round a row differently when it sits at another
 * place in a larger matrix, hence a tolerance of float rounding (1e-6 on
 * O(1) values), far below what mixing samples (a wrong stride, a softmax
 * across the batch) would cause. */
static void test_attention_batch_independent(void)
{
    enum { B = 3, T = 7, C = 16, NH = 4 };
    for (int causal = 0; causal <= 1; causal++) {
        struct attn_case big, one;
        case_alloc(&big, B, T, C, NH, causal);
        case_alloc(&one, 1, T, C, NH, causal);
        case_fill(&big, 500);
        case_run(&big, 0);
        memcpy(one.wqkv, big.wqkv, sizeof(float) * 3 * C * C);
        memcpy(one.bqkv, big.bqkv, sizeof(float) * 3 * C);
        memcpy(one.wproj, big.wproj, sizeof(float) * C * C);
        memcpy(one.bproj, big.bproj, sizeof(float) * C);
        case_zero_grads(&one);
        for (int b = 0; b < B; b++) {
            size_t off = (size_t)b * T * C;
            memcpy(one.x, big.x + off, sizeof(float) * T * C);
            memcpy(one.dout, big.dout + off, sizeof(float) * T * C);
            ct_attention_forward(one.out, one.ws, one.scratch, one.x, one.wqkv, one.bqkv,
                                 one.wproj, one.bproj, 1, T, C, NH, causal);
            ct_attention_backward(one.dx, one.dwqkv, one.dbqkv, one.dwproj, one.dbproj, one.dout,
                                  one.ws, one.scratch, one.x, one.wqkv, one.wproj, 1, T, C, NH,
                                  causal);
            char label[64];
            snprintf(label, sizeof label, "batch%s sample %d out", causal ? " causal" : "", b);
            check_close(label, one.out, big.out + off, T * C, 1e-6, 1e-6);
            snprintf(label, sizeof label, "batch%s sample %d dx", causal ? " causal" : "", b);
            check_close(label, one.dx, big.dx + off, T * C, 1e-6, 1e-6);
        }
        check_close("batch sum dwqkv", one.dwqkv, big.dwqkv, 3 * C * C, 2e-6, 1e-5);
        check_close("batch sum dbqkv", one.dbqkv, big.dbqkv, 3 * C, 2e-6, 1e-5);
        check_close("batch sum dwproj", one.dwproj, big.dwproj, C * C, 2e-6, 1e-5);
        check_close("batch sum dbproj", one.dbproj, big.dbproj, C, 2e-6, 1e-5);
        case_free(&big);
        case_free(&one);
    }
}

/* With the causal mask, token i's output depends on tokens 0..i only:
 * changing the last token leaves every earlier output bit for bit the same
 * (its row of q k^T is masked to exact zeros before it meets v), and without
 * the mask it changes them all. */
static void test_attention_causal_future(void)
{
    enum { B = 2, T = 6, C = 8, NH = 2 };
    for (int causal = 0; causal <= 1; causal++)
        for (int ref = 0; ref <= 1; ref++) {
            struct attn_case a;
            case_alloc(&a, B, T, C, NH, causal);
            case_fill(&a, 600);
            float *out0 = ct_test_floats(B * T * C);
            void (*fwd)(float *, float *, float *, const float *, const float *, const float *,
                        const float *, const float *, int, int, int, int, int) =
                ref ? ct_attention_forward_ref : ct_attention_forward;
            fwd(out0, a.ws, a.scratch, a.x, a.wqkv, a.bqkv, a.wproj, a.bproj, B, T, C, NH, causal);
            for (int b = 0; b < B; b++)
                for (int c = 0; c < C; c++)
                    a.x[((size_t)b * T + T - 1) * C + c] += 1.0f;
            fwd(a.out, a.ws, a.scratch, a.x, a.wqkv, a.bqkv, a.wproj, a.bproj, B, T, C, NH, causal);
            for (int b = 0; b < B; b++) {
                size_t off = (size_t)b * T * C;
                size_t n = (size_t)(T - 1) * C; /* tokens 0 .. T-2 */
                double d = 0;
                for (size_t i = 0; i < n; i++)
                    d = fmax(d, fabs((double)a.out[off + i] - out0[off + i]));
                if (causal)
                    check_close("causal: earlier tokens", a.out + off, out0 + off, n, 0, 0);
                else
                    CU_ASSERT(d > 1e-3);
            }
            free(out0);
            case_free(&a);
        }
}

/* ------------------------------------------------------------ bf16 */

/* train.precision = bf16: every product takes its operands rounded to bf16
 * (ct_bgemm: nearest-even, zero for subnormals) and sums in float32;
 * softmax, its backward and the bias sums stay float32. A bound propagated
 * from the operand rounding through softmax to torch's float32 golden is
 * too loose to catch a product left in float32 or an operand rounded
 * twice, so each product is checked on its own: a float64 oracle over the
 * same rounded operands, read from what the kernels stored (qkv, y; dy,
 * dqkv and the last head's dS: ct_attention_view) and each head's P as
 * forward and backward used it (ct_attention_probs: the same bits, see
 * test_attention_recompute_bits), must agree to float32 accumulation
 * error. For a sum of K products (any order of
 * float32 additions), plus the scale's or the bias's rounding:
 *     |got - want| <= (K + 3) u sum|terms|,  u = 2^-24.
 * A float32 product instead (operands not rounded) misses by ~2^-9 of the
 * sum of |terms|: 2^15 / (K + 3) times the bound. */
struct bf16_stage {
    const char *name;
    int bad, n;
    double worst; /* max |got - want| / bound */
};

static double bq(float x) { return (double)ct_bf16_to_f32(ct_bf16_from_f32_daz(x)); }

static void stage_note(struct bf16_stage *st, float got, double want, double bound)
{
    const double r = fabs((double)got - want) / (bound + 0x1p-60);
    st->worst = r > st->worst ? r : st->worst;
    st->bad += !(r <= 1.0);
    st->n++;
}

/* A sum of K products in float32: its bound from the sum of |terms|. */
static void stage_sum(struct bf16_stage *st, float got, double want, double mag, int K)
{
    stage_note(st, got, want, (K + 3) * 0x1p-24 * mag);
}

static void stage_done(const struct bf16_stage *st)
{
    if (getenv("CT_TEST_VERBOSE") || st->bad)
        printf("\n    bf16 %-28s %6d values, worst |got - want| / bound %.3f, %d outside",
               st->name, st->n, st->worst, st->bad);
    CU_ASSERT_TRUE(st->n > 0);
    CU_ASSERT_EQUAL(st->bad, 0);
}

/* A matrix as a product's operand: element (i, k) at p[i * row + k * col]. */
struct operand {
    const float *p;
    size_t row, col;
};

/* got[i * gi + j] = scale * sum_k a(i, k) b(j, k) + bias[j] (bias NULL:
 * none, added in float32) for i < I, j < J over k < K; a linear layer's
 * output or either gradient, or a head's product, by the strides. */
static void check_product(struct bf16_stage *st, const float *got, size_t gi, size_t gj,
                          struct operand a, struct operand b, const float *bias, int I, int J, int K,
                          double scale)
{
    for (int i = 0; i < I; i++)
        for (int j = 0; j < J; j++) {
            double want = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                double term = bq(a.p[(size_t)i * a.row + (size_t)k * a.col]) *
                              bq(b.p[(size_t)j * b.row + (size_t)k * b.col]);
                want += term, mag += fabs(term);
            }
            want *= scale, mag *= scale;
            if (bias)
                want += bias[j], mag += fabs(bias[j]);
            stage_sum(st, got[(size_t)i * gi + (size_t)j * gj], want, mag, K);
        }
}

/* A linear layer of K inputs and O outputs over R rows: out = a w^T + b,
 * din = dout w, dw = dout^T a, each against check_product. */
static void check_linear_out(struct bf16_stage *st, const float *out, const float *a,
                             const float *w, const float *bias, int R, int K, int O)
{
    check_product(st, out, (size_t)O, 1, (struct operand){a, (size_t)K, 1},
                  (struct operand){w, (size_t)K, 1}, bias, R, O, K, 1.0);
}

static void check_linear_din(struct bf16_stage *st, const float *din, const float *dout,
                             const float *w, int R, int K, int O)
{
    check_product(st, din, (size_t)K, 1, (struct operand){dout, (size_t)O, 1},
                  (struct operand){w, 1, (size_t)K}, NULL, R, K, O, 1.0);
}

static void check_linear_dw(struct bf16_stage *st, const float *dw, const float *dout,
                            const float *a, int R, int K, int O)
{
    check_product(st, dw, (size_t)K, 1, (struct operand){dout, 1, (size_t)O},
                  (struct operand){a, 1, (size_t)K}, NULL, O, K, R, 1.0);
}

/* A bias gradient, float32 (no bf16 rounding): db[o] = sum_t d[t][o]. */
static void check_bias_grad(struct bf16_stage *st, const float *db, const float *d, int R, int O)
{
    for (int o = 0; o < O; o++) {
        double want = 0.0, mag = 0.0;
        for (int t = 0; t < R; t++)
            want += d[(size_t)t * O + o], mag += fabs(d[(size_t)t * O + o]);
        stage_sum(st, db[o], want, mag, R);
    }
}

/* Forward's head products: the probabilities from q k^T (softmax in
 * float32 of float32 scores, against float64 softmax of the exact scores:
 * a score off by e moves a probability by at most 2 max e of itself, and
 * float32's exp, sum and division add (T + 8 + 2 |s - max|) u), then
 * y = P v from that P. P: a (T, T) buffer. */
static void check_heads_forward(struct bf16_stage *sp, struct bf16_stage *sy,
                                const struct attn_case *a, struct ct_attention_view v, float *P)
{
    const int T = a->T, C = a->C, NH = a->NH, C3 = 3 * C, hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    double *s = malloc((size_t)T * sizeof *s), *e = malloc((size_t)T * sizeof *e);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < NH; h++) {
            const float *q = v.qkv + (size_t)b * T * C3 + (size_t)h * hs, *k = q + C, *val = q + 2 * C;
            ct_attention_probs(P, a->ws, b, h, a->B, T, C, NH, a->causal);
            const float *y = v.y + (size_t)b * T * C + (size_t)h * hs;
            for (int i = 0; i < T; i++) {
                const int n = a->causal ? i + 1 : T;
                double mx = -INFINITY, emax = 0.0, sum = 0.0, range = 0.0;
                for (int j = 0; j < n; j++) {
                    double acc = 0.0, mag = 0.0;
                    for (int d = 0; d < hs; d++) {
                        double term = bq(q[(size_t)i * C3 + d]) * bq(k[(size_t)j * C3 + d]);
                        acc += term, mag += fabs(term);
                    }
                    s[j] = scale * acc;
                    e[j] = (hs + 3) * 0x1p-24 * scale * mag;
                    mx = fmax(mx, s[j]);
                    emax = fmax(emax, e[j]);
                }
                for (int j = 0; j < n; j++) {
                    sum += exp(s[j] - mx);
                    range = fmax(range, mx - s[j]);
                }
                for (int j = 0; j < n; j++) {
                    double p = exp(s[j] - mx) / sum;
                    stage_note(sp, P[(size_t)i * T + j], p,
                               p * (2 * emax + (T + 8 + 2 * range) * 0x1p-24) + 0x1p-30);
                }
                for (int j = n; j < T; j++)
                    stage_note(sp, P[(size_t)i * T + j], 0.0, 0.0);
            }
            /* y = P v: (T, hs) from (T, T) and (T, hs) of stride 3C */
            check_product(sy, y, (size_t)C, 1, (struct operand){P, (size_t)T, 1},
                          (struct operand){val, 1, (size_t)C3}, NULL, T, hs, T, 1.0);
        }
    free(s);
    free(e);
}

/* Backward's head products from P, dy and dqkv: dv = P^T dy for every
 * head (P recomputed as backward did; the last head's is the one backward
 * left in the scratch); dq = scale dS k and dk = scale dS^T q for the last
 * head, whose dS the scratch keeps (the other heads' dS is a float32 value
 * rounded to bf16 that an oracle cannot reproduce bit for bit; their
 * products are the same calls). P: a (T, T) buffer. */
static void check_heads_backward(struct bf16_stage *sv, struct bf16_stage *sq,
                                 const struct attn_case *a, struct ct_attention_view v, float *P)
{
    const int T = a->T, C = a->C, NH = a->NH, C3 = 3 * C, hs = C / NH;
    const double scale = 1.0 / sqrt((double)hs);
    for (int b = 0; b < a->B; b++)
        for (int h = 0; h < NH; h++) {
            const size_t row0 = (size_t)b * T * C3 + (size_t)h * hs;
            const float *q = v.qkv + row0, *k = q + C;
            const float *dq = v.dqkv + row0, *dk = dq + C, *dv = dq + 2 * C;
            ct_attention_probs(P, a->ws, b, h, a->B, T, C, NH, a->causal);
            if (b == a->B - 1 && h == NH - 1)
                CU_ASSERT(memcmp(P, v.att, (size_t)T * T * sizeof(float)) == 0);
            const float *dy = v.dy + (size_t)b * T * C + (size_t)h * hs;
            check_product(sv, dv, (size_t)C3, 1, (struct operand){P, 1, (size_t)T},
                          (struct operand){dy, 1, (size_t)C}, NULL, T, hs, T, 1.0);
            if (b < a->B - 1 || h < NH - 1)
                continue;
            check_product(sq, dq, (size_t)C3, 1, (struct operand){v.datt, (size_t)T, 1},
                          (struct operand){k, 1, (size_t)C3}, NULL, T, hs, T, scale);
            check_product(sq, dk, (size_t)C3, 1, (struct operand){v.datt, 1, (size_t)T},
                          (struct operand){q, 1, (size_t)C3}, NULL, T, hs, T, scale);
        }
}

static void test_attention_bf16_products(void)
{
    static const int shapes[][4] = {{2, 7, 16, 2}, {1, 5, 12, 3}, {2, 17, 32, 4}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int causal = 0; causal <= 1; causal++) {
            const int B = shapes[s][0], T = shapes[s][1], C = shapes[s][2], NH = shapes[s][3];
            const int BT = B * T, C3 = 3 * C;
            struct attn_case a;
            case_alloc(&a, B, T, C, NH, causal);
            case_fill(&a, 40 + (uint32_t)(10 * s) + (uint32_t)causal);
            /* bf16 until the checks are done: ct_attention_probs makes P
             * with the products of the precision set. */
            ct_gemm_set_precision(CT_PRECISION_BF16);
            case_run(&a, 0);
            struct ct_attention_view v = ct_attention_view(a.ws, a.scratch, B, T, C, NH);
            struct bf16_stage st[] = {
                {"qkv = x wqkv^T + b", 0, 0, 0}, {"P = softmax(q k^T / sqrt(hs))", 0, 0, 0},
                {"y = P v", 0, 0, 0},            {"out = y wproj^T + b", 0, 0, 0},
                {"dy = dout wproj", 0, 0, 0},    {"dwproj = dout^T y", 0, 0, 0},
                {"dbproj (float32)", 0, 0, 0},   {"dv = P^T dy", 0, 0, 0},
                {"dq, dk = scale dS k, dS^T q", 0, 0, 0}, {"dx = dqkv wqkv", 0, 0, 0},
                {"dwqkv = dqkv^T x", 0, 0, 0},   {"dbqkv (float32)", 0, 0, 0},
            };
            check_linear_out(&st[0], v.qkv, a.x, a.wqkv, a.bqkv, BT, C, C3);
            float *P = ct_test_floats((size_t)T * T);
            check_heads_forward(&st[1], &st[2], &a, v, P);
            check_linear_out(&st[3], a.out, v.y, a.wproj, a.bproj, BT, C, C);
            check_linear_din(&st[4], v.dy, a.dout, a.wproj, BT, C, C);
            check_linear_dw(&st[5], a.dwproj, a.dout, v.y, BT, C, C);
            check_bias_grad(&st[6], a.dbproj, a.dout, BT, C);
            check_heads_backward(&st[7], &st[8], &a, v, P);
            ct_gemm_set_precision(CT_PRECISION_FP32);
            free(P);
            check_linear_din(&st[9], a.dx, v.dqkv, a.wqkv, BT, C, C3);
            check_linear_dw(&st[10], a.dwqkv, v.dqkv, a.x, BT, C, C3);
            check_bias_grad(&st[11], a.dbqkv, v.dqkv, BT, C3);
            for (size_t i = 0; i < sizeof st / sizeof st[0]; i++)
                stage_done(&st[i]);
            case_free(&a);
        }
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"attention golden (torch), full and causal", test_attention_golden},
        {"attention backward vs finite differences (float64)", test_attention_fd},
        {"attention sgemm vs naive reference", test_attention_fast_vs_ref},
        {"attention gradients accumulate, dinp overwritten", test_attention_accumulate},
        {"attention without biases", test_attention_no_bias},
        {"attention stays inside its workspace", test_attention_workspace_bounds},
        {"attention workspace keeps no (T, T) matrix", test_attention_workspace_size},
        {"attention: backward's recomputed P is forward's, bit for bit (OpenBLAS)",
         test_attention_recompute_bits_gemm0},
        {"attention: backward's recomputed P is forward's, bit for bit (own sgemm)",
         test_attention_recompute_bits_gemm1},
        {"attention: samples independent in a batch", test_attention_batch_independent},
        {"attention: causal mask hides later tokens", test_attention_causal_future},
        {"attention in bf16: every product from bf16 operands (float64 oracle)",
         test_attention_bf16_products},
        {NULL, NULL},
    };
    return ct_test_run("attention", cases);
}
