/* Unit tests for the matrix products (src/core/gemm.c): our AVX-512 kernel
 * and the dispatching ct_sgemm against the naive double-precision
 * reference, over transposes, alpha and beta, leading dimensions wider than
 * the matrices, every ragged tile edge (M, N around multiples of 8, 16 and
 * 32) and K long enough to be cut into blocks; that C outside its M x N
 * corner is never written and beta = 0 never reads C; that results do not
 * depend on how a product is split into calls, nor on the thread count
 * (ours and OpenBLAS's); that the kernel chosen does not depend on the thread
 * count; the fork-join pool; and the dispatch override.
 *
 * Dims legend: C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C.
 *
 * On a CPU without AVX-512F ct_sgemm_own is OpenBLAS: the same checks then
 * test that path (and say so once).
 */
#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/gemm.h"
#include "core/threadpool.h"
#include "core/rng.h"
#include "core/threads.h"

int openblas_get_num_threads(void);
#include "ct_gemm_test.h"
#include "ct_test.h"

/* Checks C against the exact product: |C - ref| <= (K + 2) u (|alpha|
 * sum |a b| + |beta c|) per element, u = 2^-24, the float rounding bound
 * of a K-term sum plus the scaling (a wrong term, index or stride is off
 * by about |a b| ~ 0.3); the ldc gap columns must hold C0's values.
 * Returns the number of failures. */
static int check(const char *label, const struct gemm_problem *p, const float *C)
{
    int bad = 0;
    double maxerr = 0;
    for (int i = 0; i < p->M; i++)
        for (int j = 0; j < p->ldc; j++) {
            const size_t at = (size_t)i * p->ldc + j;
            if (j >= p->N) {
                if (memcmp(&C[at], &p->C0[at], sizeof(float)) != 0 && bad++ < 3)
                    fprintf(stderr, "  %s: C[%d][%d] (past N) written\n", label, i, j);
                continue;
            }
            double acc = 0, mag = 0;
            for (int k = 0; k < p->K; k++) {
                const double a = p->ta ? p->A[(size_t)k * p->lda + i] : p->A[(size_t)i * p->lda + k];
                const double b = p->tb ? p->B[(size_t)j * p->ldb + k] : p->B[(size_t)k * p->ldb + j];
                acc += a * b;
                mag += fabs(a * b);
            }
            const double c0 = p->beta == 0.0f ? 0.0 : (double)p->beta * p->C0[at];
            const double want = p->alpha * acc + c0;
            const double tol = (p->K + 2) * ldexp(1.0, -24) * (fabs(p->alpha) * mag + fabs(c0)) +
                               FLT_MIN;
            const double err = fabs((double)C[at] - want);
            if (err > maxerr || isnan(err))
                maxerr = isnan(err) ? INFINITY : err;
            if (!(err <= tol) && bad++ < 3)
                fprintf(stderr, "  %s: C[%d][%d] = %.9g, want %.9g (err %.3g > tol %.3g)\n",
                        label, i, j, (double)C[at], want, err, tol);
        }
    if (bad)
        fprintf(stderr, "  %s: %d bad, max err %.3g\n", label, bad, maxerr);
    return bad;
}

/* Our kernel against the exact product on every tile edge. */
static void test_own_vs_exact(void)
{
    if (!ct_sgemm_own_available())
        printf("\n    (no AVX-512F on this CPU: ct_sgemm_own runs OpenBLAS) ");
    static const int mdims[] = {1, 2, 7, 8, 9, 15, 17, 31, 64, 65};
    static const int ndims[] = {1, 5, 15, 16, 17, 31, 32, 33, 47, 48, 49, 196};
    static const int kdims[] = {1, 3, 10, 64, 289};
    uint32_t seed = 100;
    int failed = 0, cases = 0;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (size_t mi = 0; mi < sizeof mdims / sizeof *mdims; mi++)
                for (size_t ni = 0; ni < sizeof ndims / sizeof *ndims; ni++) {
                    /* One K per (M, N), cycling, and alpha/beta variants. */
                    const int K = kdims[(mi + ni) % (sizeof kdims / sizeof *kdims)];
                    const float alpha = (ni % 3 == 2) ? -0.5f : 1.0f;
                    const float beta = (mi % 3 == 0) ? 0.0f : (mi % 3 == 1) ? 1.0f : 0.25f;
                    struct gemm_problem p =
                        gemm_problem_new(ta, tb, mdims[mi], ndims[ni], K, alpha, beta, seed += 3);
                    float *C = gemm_run(&p, ct_sgemm_own);
                    char label[128];
                    gemm_label(label, sizeof label, "own", &p);
                    failed += check(label, &p, C) != 0;
                    cases++;
                    free(C);
                    gemm_problem_free(&p);
                }
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT_EQUAL(cases, 4 * 10 * 12);
}

/* K past one block (384) is cut into equal blocks; a transposed B is
 * copied in blocks of columns (N past what one block holds at this K). */
static void test_own_blocks(void)
{
    static const int shapes[][3] = {
        {9, 40, 385}, {16, 33, 800}, {3, 300, 1000}, {8, 700, 200}, {20, 170, 384}, {5, 161, 383},
    };
    int failed = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                struct gemm_problem p =
                    gemm_problem_new(ta, tb, shapes[s][0], shapes[s][1], shapes[s][2], 1.0f,
                                     tb ? 1.0f : 0.0f, 500 + (uint32_t)s * 7);
                float *C = gemm_run(&p, ct_sgemm_own);
                char label[128];
                gemm_label(label, sizeof label, "own blocks", &p);
                failed += check(label, &p, C) != 0;
                free(C);
                gemm_problem_free(&p);
            }
    CU_ASSERT_EQUAL(failed, 0);
}

/* beta = 0 overwrites C without reading it: NaN there must not leak. */
static void test_beta_zero_ignores_c(void)
{
    for (int own = 0; own < 2; own++) {
        struct gemm_problem p = gemm_problem_new(0, 1, 13, 37, 20, 1.0f, 0.0f, 900);
        for (int i = 0; i < p.M; i++)
            for (int j = 0; j < p.N; j++)
                p.C0[(size_t)i * p.ldc + j] = NAN;
        float *C = gemm_run(&p, own ? ct_sgemm_own : ct_sgemm);
        CU_ASSERT_EQUAL(check(own ? "own beta 0 over NaN" : "ct_sgemm beta 0 over NaN", &p, C), 0);
        free(C);
        gemm_problem_free(&p);
    }
}

/* Each element's sum runs in one fixed order, whatever tile or call it
 * falls in: computing C in pieces (rows 0..4 and 5..M, columns 0..12 and
 * 13..N) gives the same bits as one call. The conv layers rely on this:
 * the fused block runs a batch in chunks and must match the whole-batch
 * module. */
static void test_own_split_invariant(void)
{
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            struct gemm_problem p = gemm_problem_new(ta, tb, 29, 70, 150, 1.0f, 1.0f, 1200);
            float *whole = gemm_run(&p, ct_sgemm_own);
            const size_t nc = (size_t)p.M * p.ldc;
            float *C = ct_test_floats(nc);
            memcpy(C, p.C0, nc * sizeof(float));
            const int ms[3] = {0, 5, p.M}, ns[3] = {0, 13, p.N};
            for (int a = 0; a < 2; a++)
                for (int b = 0; b < 2; b++) {
                    const int m0 = ms[a], m1 = ms[a + 1], n0 = ns[b], n1 = ns[b + 1];
                    const float *A = p.ta ? p.A + m0 : p.A + (size_t)m0 * p.lda;
                    const float *B = p.tb ? p.B + (size_t)n0 * p.ldb : p.B + n0;
                    ct_sgemm_own(p.ta, p.tb, m1 - m0, n1 - n0, p.K, p.alpha, A, p.lda, B, p.ldb,
                                 p.beta, C + (size_t)m0 * p.ldc + n0, p.ldc);
                }
            CU_ASSERT_EQUAL(memcmp(whole, C, nc * sizeof(float)), 0);
            free(whole);
            free(C);
            gemm_problem_free(&p);
        }
}

/* ct_sgemm_force: 0 gives OpenBLAS's bits, 1 ours, -1 the automatic choice,
 * which ct_sgemm_impl names. */
static void test_dispatch(void)
{
    struct gemm_problem p = gemm_problem_new(1, 0, 24, 50, 77, 1.0f, 0.0f, 1500);
    float *blas = gemm_run(&p, ct_sgemm_blas), *own = gemm_run(&p, ct_sgemm_own);
    const size_t bytes = (size_t)p.M * p.ldc * sizeof(float);
    ct_sgemm_force(0);
    CU_ASSERT_STRING_EQUAL(ct_sgemm_impl(), "openblas");
    float *c = gemm_run(&p, ct_sgemm);
    CU_ASSERT_EQUAL(memcmp(c, blas, bytes), 0);
    free(c);
    ct_sgemm_force(1);
    CU_ASSERT_STRING_EQUAL(ct_sgemm_impl(), ct_sgemm_own_available() ? "ctrain-avx512" : "openblas");
    c = gemm_run(&p, ct_sgemm);
    CU_ASSERT_EQUAL(memcmp(c, own, bytes), 0);
    free(c);
    ct_sgemm_force(-1);
    const char *impl = ct_sgemm_impl();
    CU_ASSERT(strcmp(impl, "openblas") == 0 || strcmp(impl, "ctrain-avx512") == 0);
    c = gemm_run(&p, ct_sgemm);
    CU_ASSERT_EQUAL(memcmp(c, strcmp(impl, "openblas") == 0 ? blas : own, bytes), 0);
    free(c);
    free(blas);
    free(own);
    gemm_problem_free(&p);
}

/* The products of the threaded checks: odd sizes on both sides of every
 * cut (rows by 8, columns by 16) and of the size below which one thread
 * runs, the cnn's and the mlp's shapes, and K cut into blocks. */
static const int thread_shapes[][3] = {
    {64, 196, 289}, {289, 196, 64}, {64, 289, 196}, {33, 785, 17}, {7, 1001, 90},
    {129, 31, 250}, {200, 200, 385}, {17, 49, 9},  {128, 256, 784}, {1, 4096, 70},
};

/* Our kernel at 2, 3 and 4 threads gives the bits of one thread, on every
 * transpose pair, with and without beta; 3 threads is also checked against
 * the exact product (a part that computes the wrong slab is caught). */
static void test_own_threads_bit_identical(void)
{
    int failed = 0;
    for (size_t s = 0; s < sizeof thread_shapes / sizeof *thread_shapes; s++)
        for (int t = 0; t < 4; t++) {
            const int ta = t >> 1, tb = t & 1;
            struct gemm_problem p = gemm_problem_new(
                ta, tb, thread_shapes[s][0], thread_shapes[s][1], thread_shapes[s][2],
                s % 2 ? -0.5f : 1.0f, s % 3 ? 1.0f : 0.0f, 3000 + (uint32_t)(s * 4 + t) * 5);
            ct_threadpool_set_threads(1);
            float *one = gemm_run(&p, ct_sgemm_own);
            const size_t bytes = (size_t)p.M * p.ldc * sizeof(float);
            for (int n = 2; n <= 4; n++) {
                ct_threadpool_set_threads(n);
                float *C = gemm_run(&p, ct_sgemm_own);
                char label[128];
                gemm_label(label, sizeof label, "own threads", &p);
                if (memcmp(C, one, bytes) != 0) {
                    fprintf(stderr, "  %s: %d threads differ from 1\n", label, n);
                    failed++;
                }
                if (n == 3)
                    failed += check(label, &p, C) != 0;
                free(C);
            }
            free(one);
            gemm_problem_free(&p);
        }
    ct_threadpool_set_threads(1);
    CU_ASSERT_EQUAL(failed, 0);
}

/* OpenBLAS stays at one thread whatever the rank's thread count (its bits
 * depend on it), and ct_sgemm at 2 threads gives the bits of ct_sgemm at 1
 * on every shape, whichever kernel it runs. */
static void test_sgemm_threads_bit_identical(void)
{
    int failed = 0;
    for (size_t s = 0; s < sizeof thread_shapes / sizeof *thread_shapes; s++)
        for (int t = 0; t < 4; t++) {
            struct gemm_problem p = gemm_problem_new(
                t >> 1, t & 1, thread_shapes[s][0], thread_shapes[s][1], thread_shapes[s][2], 1.0f,
                s % 2 ? 1.0f : 0.0f, 4000 + (uint32_t)(s * 4 + t) * 5);
            ct_set_blas_threads(1, 1);
            float *one = gemm_run(&p, ct_sgemm);
            CU_ASSERT_EQUAL(ct_set_blas_threads(1, 2), 2);
            CU_ASSERT_EQUAL(openblas_get_num_threads(), 1);
            float *two = gemm_run(&p, ct_sgemm);
            if (memcmp(one, two, (size_t)p.M * p.ldc * sizeof(float)) != 0) {
                char label[128];
                gemm_label(label, sizeof label, ct_sgemm_impl(), &p);
                fprintf(stderr, "  %s: 2 threads differ from 1\n", label);
                failed++;
            }
            free(one);
            free(two);
            gemm_problem_free(&p);
        }
    ct_set_blas_threads(1, 1);
    CU_ASSERT_EQUAL(failed, 0);
}

/* The kernel ct_sgemm runs is chosen by the CPU alone: the same name and
 * the same bits at 1 and 2 threads. */
static void test_choice_ignores_threads(void)
{
    struct gemm_problem p = gemm_problem_new(0, 1, 64, 196, 289, 1.0f, 0.0f, 5000);
    ct_set_blas_threads(1, 1);
    const char *one_impl = ct_sgemm_impl();
    float *one = gemm_run(&p, ct_sgemm);
    ct_set_blas_threads(1, 2);
    CU_ASSERT_STRING_EQUAL(ct_sgemm_impl(), one_impl);
    CU_ASSERT_EQUAL(ct_sgemm_threads(), ct_sgemm_own_available() ? 2 : 1);
    float *two = gemm_run(&p, ct_sgemm);
    CU_ASSERT_EQUAL(memcmp(one, two, (size_t)p.M * p.ldc * sizeof(float)), 0);
    ct_set_blas_threads(1, 1);
    free(one);
    free(two);
    gemm_problem_free(&p);
}

/* The pool runs every part exactly once, at any thread count, and more
 * parts than threads. */
struct parts {
    _Atomic int runs[64];
    _Atomic int bad_nparts;
    int nparts;
};

static void count_part(void *ctx, int part, int nparts)
{
    struct parts *c = ctx;
    if (nparts != c->nparts || part < 0 || part >= nparts)
        atomic_fetch_add(&c->bad_nparts, 1);
    else
        atomic_fetch_add(&c->runs[part], 1);
}

static void test_pool_parts(void)
{
    static const int threads[] = {1, 2, 3, 4, 2, 1};
    int failed = 0;
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        ct_threadpool_set_threads(threads[t]);
        CU_ASSERT_EQUAL(ct_threadpool_threads(), threads[t]);
        for (int nparts = 1; nparts <= 64; nparts += 7)
            for (int rep = 0; rep < 50; rep++) {
                struct parts c = {.nparts = nparts};
                ct_threadpool_run(count_part, &c, nparts);
                failed += c.bad_nparts != 0;
                for (int p = 0; p < nparts; p++)
                    failed += c.runs[p] != 1;
            }
    }
    ct_threadpool_set_threads(1);
    CU_ASSERT_EQUAL(failed, 0);
}

/* The reference itself, on a product small enough to write out. */
static void test_ref(void)
{
    const float A[6] = {1, 2, 3, 4, 5, 6}; /* (2, 3) */
    const float B[6] = {1, 0, -1, 2, 0.5f, 1}; /* (3, 2) */
    float C[4] = {1, 1, 1, 1};
    ct_sgemm_ref(0, 0, 2, 2, 3, 2.0f, A, 3, B, 2, 0.5f, C, 2);
    /* A.B = [[1 - 2 + 1.5, 0 + 4 + 3], [4 - 5 + 3, 0 + 10 + 6]] = [[0.5, 7], [2, 16]] */
    const float want[4] = {1.5f, 14.5f, 4.5f, 32.5f};
    CT_ASSERT_CLOSE("ref", C, want, 4, 0, 0);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"reference on a written-out product", test_ref},
        {"own kernel vs exact, every tile edge", test_own_vs_exact},
        {"own kernel, K and N blocks", test_own_blocks},
        {"beta = 0 never reads C", test_beta_zero_ignores_c},
        {"own kernel: same bits however the product is split", test_own_split_invariant},
        {"dispatch and override", test_dispatch},
        {"own kernel: same bits at 1, 2, 3, 4 threads", test_own_threads_bit_identical},
        {"ct_sgemm: same bits at 1 and 2 threads, OpenBLAS at 1", test_sgemm_threads_bit_identical},
        {"the kernel chosen does not depend on the thread count", test_choice_ignores_threads},
        {"pool: every part once, at any thread count", test_pool_parts},
        {NULL, NULL},
    };
    return ct_test_run("gemm", cases);
}
