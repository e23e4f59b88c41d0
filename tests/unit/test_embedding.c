/* Unit tests for the token + position embedding and the tied LM head
 * (src/nn/embedding.c) and ct_init_normal.
 *
 * Dims legend: B = samples, T = tokens per sample, C = width, V = vocabulary.
 *
 * Evidence: golden values PyTorch produced (tests/fixtures/embedding.ctfx,
 * made by tests/fixtures/make_fixtures_gpt.py: nn.Embedding + positions,
 * F.linear(x, wte) as the tied head, and both in one graph where wte's
 * gradient is the sum of its two uses); central finite differences of a
 * float64 oracle written independently of src/nn; the model-level facts of a
 * tied parameter (one tensor in the layout, the head owns no span); ids
 * that are not tokens (out of range, fractional, NaN) reported, never read;
 * the head's three products in bf16 (train.precision) within the bound of
 * their operands' rounding (ct_fixture.h check_bf16).
 */
#include "core/error.h"
#include "core/gemm.h"
#include "core/rng.h"
#include "nn/embedding.h"
#include "nn/module.h"

#include "ct_test.h"

#include <math.h>
#include <stdint.h>

#include "ct_fixture.h"

enum { B = 3, T = 5, C = 6, V = 11 };

/* A model emb -> head, finalized for B rows; *emb and *head point into it. */
static int tied_model(struct ct_model *m, struct ct_module **emb, struct ct_module **head)
{
    ct_model_init(m, T);
    *emb = ct_embedding_new(V, T, C);
    int rc = ct_model_add(m, *emb);
    if (rc == 0) {
        *head = ct_lm_head_new(*emb, T, C, V);
        rc = ct_model_add(m, *head);
    }
    if (rc == 0)
        rc = ct_model_finalize(m, B);
    return rc;
}

/* The golden fixture and the tied model it was made for; -1: no fixture
 * (fx_open said why). */
static int golden_open(struct fx_file *f, struct ct_model *m, struct ct_module **emb,
                       struct ct_module **head)
{
    if (fx_open(f, "embedding.ctfx"))
        return -1;
    CU_ASSERT_EQUAL_FATAL(tied_model(m, emb, head), 0);
    return 0;
}

static void test_golden(void)
{
    struct fx_file f;
    struct ct_model m;
    struct ct_module *emb = NULL, *head = NULL;
    if (golden_open(&f, &m, &emb, &head))
        return;
    const float *ids = fx_get(&f, "ids", B * T), *wte = fx_get(&f, "wte", V * C),
                *wpe = fx_get(&f, "wpe", T * C);
    CU_ASSERT_PTR_NOT_NULL_FATAL(ids && wte && wpe);
    memcpy(emb->p[0], wte, sizeof(float) * V * C);
    memcpy(emb->p[1], wpe, sizeof(float) * T * C);

    /* The embedding alone, through its ops. */
    float out[B * T * C], dx[B * T * C], logits[B * T * V];
    emb->ops->forward(emb, out, ids, B);
    check_close("emb.out", out, fx_get(&f, "emb.out", B * T * C), B * T * C, 1e-6, 1e-6);
    ct_model_zero_grad(&m);
    emb->ops->backward(emb, NULL, fx_get(&f, "emb.dout", B * T * C), ids, out, B);
    check_close("emb.dwte", emb->g[0], fx_get(&f, "emb.dwte", V * C), V * C, 1e-5, 1e-5);
    check_close("emb.dwpe", emb->g[1], fx_get(&f, "emb.dwpe", T * C), T * C, 1e-5, 1e-5);

    /* The head alone: its gradient lands in the embedding's wte gradient. */
    const float *x = fx_get(&f, "head.x", B * T * C);
    head->ops->forward(head, logits, x, B);
    check_close("head.logits", logits, fx_get(&f, "head.logits", B * T * V), B * T * V, 1e-5, 1e-5);
    ct_model_zero_grad(&m);
    head->ops->backward(head, dx, fx_get(&f, "head.dlogits", B * T * V), x, logits, B);
    check_close("head.dx", dx, fx_get(&f, "head.dx", B * T * C), B * T * C, 1e-5, 1e-5);
    check_close("head.dwte", emb->g[0], fx_get(&f, "head.dwte", V * C), V * C, 1e-5, 1e-5);

    /* Both in the model: wte's gradient is the sum of its two uses. */
    memcpy(ct_model_input(&m), ids, sizeof(float) * B * T);
    const float *y = ct_model_forward(&m, B);
    check_close("tied.logits", y, fx_get(&f, "tied.logits", B * T * V), B * T * V, 1e-5, 1e-5);
    ct_model_zero_grad(&m);
    memcpy(ct_model_output_grad(&m), fx_get(&f, "head.dlogits", B * T * V), sizeof(float) * B * T * V);
    ct_model_backward(&m, B, NULL, NULL);
    check_close("tied.dwte", emb->g[0], fx_get(&f, "tied.dwte", V * C), V * C, 1e-5, 1e-5);
    CU_ASSERT_EQUAL(m.fwd.status, 0);
    ct_model_free(&m);
    fx_free(&f);
}

/* ------------------------------------------------------------ bf16 */

/* The head's products in bf16 against torch's float32 golden values,
 * within check_bf16's bound: each output element is a sum of products, off
 * by at most (2^-7 + 2^-16) times the same sum over the operands' absolute
 * values (mag: the head in float32 over |x|, |wte|, |dlogits|), plus the
 * float tolerance of the fp32 golden check. */
static void test_head_golden_bf16(void)
{
    struct fx_file f;
    struct ct_model m;
    struct ct_module *emb = NULL, *head = NULL;
    if (golden_open(&f, &m, &emb, &head))
        return;
    const float *wte = fx_get(&f, "wte", V * C), *x = fx_get(&f, "head.x", B * T * C),
                *dl = fx_get(&f, "head.dlogits", B * T * V);
    CU_ASSERT_PTR_NOT_NULL_FATAL(wte && x && dl);
    float logits[3][B * T * V], dx[3][B * T * C], dwte[3][V * C];
    float *ax = abs_copy(x, B * T * C), *adl = abs_copy(dl, B * T * V);
    /* run 0: float32, 1: bf16, 2: float32 over absolute values (mag) */
    for (int run = 0; run < 3; run++) {
        ct_gemm_set_precision(run == 1 ? CT_PRECISION_BF16 : CT_PRECISION_FP32);
        for (int i = 0; i < V * C; i++)
            emb->p[0][i] = run == 2 ? fabsf(wte[i]) : wte[i];
        head->ops->forward(head, logits[run], run == 2 ? ax : x, B);
        ct_model_zero_grad(&m);
        head->ops->backward(head, dx[run], run == 2 ? adl : dl, run == 2 ? ax : x, logits[run], B);
        memcpy(dwte[run], emb->g[0], sizeof dwte[run]);
    }
    ct_gemm_set_precision(CT_PRECISION_FP32);
    check_bf16("head bf16.logits", logits[1], fx_get(&f, "head.logits", B * T * V), logits[2],
               logits[0], B * T * V, 1e-5, 1e-5);
    check_bf16("head bf16.dx", dx[1], fx_get(&f, "head.dx", B * T * C), dx[2], dx[0], B * T * C,
               1e-5, 1e-5);
    check_bf16("head bf16.dwte", dwte[1], fx_get(&f, "head.dwte", V * C), dwte[2], dwte[0], V * C,
               1e-5, 1e-5);
    free(ax);
    free(adl);
    ct_model_free(&m);
    fx_free(&f);
}

/* ------------------------------------------------------------ finite differences */

/* sum(logits * G) of emb -> tied head in double, by direct loops. */
static double oracle(const double *wte, const double *wpe, const int *ids, const double *G)
{
    double loss = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            double h[C];
            for (int c = 0; c < C; c++)
                h[c] = wte[ids[b * T + t] * C + c] + wpe[t * C + c];
            for (int v = 0; v < V; v++) {
                double z = 0;
                for (int c = 0; c < C; c++)
                    z += h[c] * wte[v * C + c];
                loss += z * G[(b * T + t) * V + v];
            }
        }
    return loss;
}

static void test_finite_differences(void)
{
    struct ct_model m;
    struct ct_module *emb = NULL, *head = NULL;
    CU_ASSERT_EQUAL_FATAL(tied_model(&m, &emb, &head), 0);
    ct_model_init_params(&m, 7);
    int ids[B * T];
    float G[B * T * V];
    float *in = ct_model_input(&m);
    for (int i = 0; i < B * T; i++) {
        ids[i] = (i * 7 + 3) % V;
        in[i] = (float)ids[i];
    }
    ct_init_uniform(G, B * T * V, 1.0f, ct_rng_key(3, CT_RNG_INIT), 99);
    ct_model_forward(&m, B);
    ct_model_zero_grad(&m);
    memcpy(ct_model_output_grad(&m), G, sizeof G);
    ct_model_backward(&m, B, NULL, NULL);

    double wte[V * C], wpe[T * C], Gd[B * T * V];
    for (int i = 0; i < V * C; i++)
        wte[i] = emb->p[0][i];
    for (int i = 0; i < T * C; i++)
        wpe[i] = emb->p[1][i];
    for (int i = 0; i < B * T * V; i++)
        Gd[i] = G[i];
    const double h = 1e-6;
    double worst = 0;
    for (int which = 0; which < 2; which++) {
        double *w = which ? wpe : wte;
        const float *g = emb->g[which];
        int n = which ? T * C : V * C;
        for (int i = 0; i < n; i++) {
            double keep = w[i];
            w[i] = keep + h;
            double up = oracle(wte, wpe, ids, Gd);
            w[i] = keep - h;
            double down = oracle(wte, wpe, ids, Gd);
            w[i] = keep;
            double fd = (up - down) / (2 * h), d = fabs(fd - g[i]) / (1e-3 + fabs(fd));
            worst = fmax(worst, d);
        }
    }
    if (getenv("CT_TEST_VERBOSE"))
        printf("\n    worst relative difference to finite differences %.3g", worst);
    CU_ASSERT(worst < 1e-4);
    ct_model_free(&m);
}

/* sum(logits * G) of the head alone, logits = x . wte^T, in double. */
static double head_oracle(const double *x, const double *wte, const double *G)
{
    double loss = 0;
    for (int r = 0; r < B * T; r++)
        for (int v = 0; v < V; v++) {
            double z = 0;
            for (int c = 0; c < C; c++)
                z += x[r * C + c] * wte[v * C + c];
            loss += z * G[r * V + v];
        }
    return loss;
}

/* The head through its ops on an input that is not the embedding's output:
 * dx overwritten, its own part of dwte accumulated (onto a nonzero start),
 * both against central differences of head_oracle; a NULL dinp skips dx and
 * leaves dwte the same bits. */
static void test_head_finite_differences(void)
{
    struct ct_model m;
    struct ct_module *emb = NULL, *head = NULL;
    CU_ASSERT_EQUAL_FATAL(tied_model(&m, &emb, &head), 0);
    ct_model_init_params(&m, 11);
    float x[B * T * C], G[B * T * V], logits[B * T * V], dx[B * T * C], start[V * C], g1[V * C];
    ct_init_uniform(x, B * T * C, 1.0f, ct_rng_key(4, CT_RNG_INIT), 1);
    ct_init_uniform(G, B * T * V, 1.0f, ct_rng_key(4, CT_RNG_INIT), 2);
    ct_init_uniform(start, V * C, 1.0f, ct_rng_key(4, CT_RNG_INIT), 3);
    head->ops->forward(head, logits, x, B);
    for (int i = 0; i < B * T * C; i++)
        dx[i] = NAN; /* overwritten, never read */
    memcpy(emb->g[0], start, sizeof start);
    head->ops->backward(head, dx, G, x, logits, B);
    memcpy(g1, emb->g[0], sizeof g1);

    double xd[B * T * C], wd[V * C], Gd[B * T * V];
    for (int i = 0; i < B * T * C; i++)
        xd[i] = x[i];
    for (int i = 0; i < V * C; i++)
        wd[i] = emb->p[0][i];
    for (int i = 0; i < B * T * V; i++)
        Gd[i] = G[i];
    for (int r = 0; r < B * T; r++) /* the logits too, against the oracle's products */
        for (int v = 0; v < V; v++) {
            double z = 0;
            for (int c = 0; c < C; c++)
                z += xd[r * C + c] * wd[v * C + c];
            CU_ASSERT(fabs(z - logits[r * V + v]) < 1e-5);
        }
    const double h = 1e-6;
    double worst[2] = {0, 0};
    for (int which = 0; which < 2; which++) {
        double *w = which ? wd : xd;
        int n = which ? V * C : B * T * C;
        for (int i = 0; i < n; i++) {
            double keep = w[i];
            w[i] = keep + h;
            double up = head_oracle(xd, wd, Gd);
            w[i] = keep - h;
            double down = head_oracle(xd, wd, Gd);
            w[i] = keep;
            double fd = (up - down) / (2 * h);
            double got = which ? (double)g1[i] - start[i] : dx[i];
            worst[which] = fmax(worst[which], fabs(fd - got) / (1e-3 + fabs(fd)));
        }
    }
    if (getenv("CT_TEST_VERBOSE"))
        printf("\n    worst relative difference: head dx %.3g, head dwte %.3g", worst[0], worst[1]);
    CU_ASSERT(worst[0] < 1e-4);
    CU_ASSERT(worst[1] < 1e-4);

    memcpy(emb->g[0], start, sizeof start);
    head->ops->backward(head, NULL, G, x, logits, B);
    CU_ASSERT_EQUAL(memcmp(emb->g[0], g1, sizeof g1), 0);
    ct_model_free(&m);
}

/* The tied gradient against an untied computation in C: the head's part
 * (dlogits^T . h) plus the embedding's part (scatter-add of the head's dx),
 * each computed alone into a zeroed gradient and summed. */
static void test_tied_is_sum_of_uses(void)
{
    struct ct_model m;
    struct ct_module *emb = NULL, *head = NULL;
    CU_ASSERT_EQUAL_FATAL(tied_model(&m, &emb, &head), 0);
    ct_model_init_params(&m, 13);
    float *in = ct_model_input(&m);
    for (int i = 0; i < B * T; i++)
        in[i] = (float)((i * 5 + 2) % V);
    in[B * T - 1] = in[0]; /* a repeated token */
    float G[B * T * V];
    ct_init_uniform(G, B * T * V, 1.0f, ct_rng_key(5, CT_RNG_INIT), 1);
    ct_model_forward(&m, B);
    ct_model_zero_grad(&m);
    memcpy(ct_model_output_grad(&m), G, sizeof G);
    ct_model_backward(&m, B, NULL, NULL);
    float tied[V * C], tied_wpe[T * C];
    memcpy(tied, emb->g[0], sizeof tied);
    memcpy(tied_wpe, emb->g[1], sizeof tied_wpe);

    float hcur[B * T * C], logits[B * T * V], dh[B * T * C], head_part[V * C], sum[V * C];
    emb->ops->forward(emb, hcur, in, B);
    head->ops->forward(head, logits, hcur, B);
    ct_model_zero_grad(&m);
    head->ops->backward(head, dh, G, hcur, logits, B);
    memcpy(head_part, emb->g[0], sizeof head_part);
    ct_model_zero_grad(&m);
    emb->ops->backward(emb, NULL, dh, in, hcur, B);
    double diff = 0, emb_part = 0;
    for (int i = 0; i < V * C; i++) {
        sum[i] = head_part[i] + emb->g[0][i];
        emb_part = fmax(emb_part, fabs(emb->g[0][i]));
        diff = fmax(diff, fabs((double)head_part[i] - tied[i]));
    }
    check_close("tied vs head + embedding", tied, sum, V * C, 1e-6, 1e-6);
    check_close("tied wpe vs embedding", tied_wpe, emb->g[1], T * C, 0, 0);
    /* Both parts matter here: neither alone equals the sum. */
    CU_ASSERT(emb_part > 1e-3);
    CU_ASSERT(diff > 1e-3);
    ct_model_free(&m);
}

/* ------------------------------------------------------------ model facts */

static void test_tied_layout(void)
{
    struct ct_model m;
    struct ct_module *emb = NULL, *head = NULL;
    CU_ASSERT_EQUAL_FATAL(tied_model(&m, &emb, &head), 0);
    CU_ASSERT_EQUAL(m.layout.n, 2); /* wte once, wpe: the head adds nothing */
    CU_ASSERT_STRING_EQUAL(m.layout.views[0].name, "layers.0.wte.weight");
    CU_ASSERT_STRING_EQUAL(m.layout.views[1].name, "layers.0.wpe.weight");
    CU_ASSERT_EQUAL(ct_model_param_count(&m), (size_t)(V * C + T * C));
    CU_ASSERT_EQUAL(head->n_params, 0);
    size_t b0, e0, b1, e1;
    ct_model_param_span(&m, 0, &b0, &e0);
    ct_model_param_span(&m, 1, &b1, &e1);
    CU_ASSERT(e0 > b0);
    CU_ASSERT_EQUAL(b1, e1);
    /* A head over another vocabulary or width, or over a non-embedding, is refused. */
    CU_ASSERT_PTR_NULL(ct_lm_head_new(emb, T, C, V + 1));
    CU_ASSERT_PTR_NULL(ct_lm_head_new(emb, T, C + 1, V));
    CU_ASSERT_PTR_NULL(ct_lm_head_new(head, T, C, V));
    CU_ASSERT_PTR_NULL(ct_embedding_new(0, T, C));
    ct_model_free(&m);
}

/* Ids that are not tokens: reported through fwd.status, their rows zero,
 * nothing read out of bounds (the ASan build checks that). */
static void test_bad_ids(void)
{
    const float bad[] = {(float)V, -1.0f, 2.5f, NAN, 1e30f};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        struct ct_model m;
        struct ct_module *emb = NULL, *head = NULL;
        CU_ASSERT_EQUAL_FATAL(tied_model(&m, &emb, &head), 0);
        ct_model_init_params(&m, 1);
        float *in = ct_model_input(&m);
        for (int i = 0; i < B * T; i++)
            in[i] = (float)(i % V);
        in[7] = bad[k];
        ct_error_clear();
        ct_model_forward(&m, B);
        CU_ASSERT(m.fwd.status < 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "is not a token id in [0, 11)"));
        const float *row = m.act[1] + 7 * C;
        for (int c = 0; c < C; c++)
            CU_ASSERT_EQUAL(row[c], 0.0f);
        ct_model_backward(&m, B, NULL, NULL); /* skips the row: no read of wte[bad] */
        ct_model_free(&m);
    }
}

static void test_init_normal(void)
{
    enum { N = 200001 };
    float *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a && b);
    ct_init_normal(a, N, 0.02f, ct_rng_key(1, CT_RNG_INIT), 4);
    ct_init_normal(b, N, 0.02f, ct_rng_key(1, CT_RNG_INIT), 4);
    CU_ASSERT_EQUAL(memcmp(a, b, N * sizeof *a), 0);
    double s = 0, s2 = 0, big = 0;
    for (int i = 0; i < N; i++) {
        CU_ASSERT_FATAL(isfinite(a[i]));
        s += a[i];
        s2 += (double)a[i] * a[i];
        big += fabs(a[i]) > 0.04; /* beyond 2 sigma: 4.55 % of a normal */
    }
    double mean = s / N, sd = sqrt(s2 / N - mean * mean);
    CU_ASSERT(fabs(mean) < 3 * 0.02 / sqrt(N) * 2);
    CU_ASSERT(fabs(sd - 0.02) < 0.0003);
    CU_ASSERT(fabs(big / N - 0.0455) < 0.003);
    ct_init_normal(b, N, 0.02f, ct_rng_key(1, CT_RNG_INIT), 5); /* another stream */
    CU_ASSERT(memcmp(a, b, N * sizeof *a) != 0);
    free(a);
    free(b);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"golden: embedding, tied head, both (PyTorch)", test_golden},
        {"golden: the tied head's products in bf16 (rounding bound)", test_head_golden_bf16},
        {"finite differences of wte and wpe through the tied model", test_finite_differences},
        {"finite differences of the head alone: dx and its part of dwte", test_head_finite_differences},
        {"tied gradient = head's part + embedding's part (untied)", test_tied_is_sum_of_uses},
        {"tied: one tensor, the head owns no span, mismatches refused", test_tied_layout},
        {"ids that are not tokens are reported, never read", test_bad_ids},
        {"ct_init_normal: deterministic, N(0, 0.02^2)", test_init_normal},
        {NULL, NULL},
    };
    return ct_test_run("embedding", cases);
}
