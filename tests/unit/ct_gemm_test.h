/* The test problems of the matrix-product tests (test_gemm, test_bgemm;
 * header-only): C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C with
 * U(-1, 1) data, leading dimensions a little wider than the rows (the
 * kernels must use them and never touch the gaps), and C's starting
 * values kept (C0) so that every implementation starts from the same C.
 * Each test file checks the results against its own bound. */
#ifndef CT_GEMM_TEST_H
#define CT_GEMM_TEST_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/rng.h"
#include "ct_test.h"

/* Deterministic U(-1, 1) data, one Philox stream per buffer. */
static inline void gemm_fill(float *p, size_t n, uint32_t stream)
{
    struct ct_rng_key key = ct_rng_key(20261202, CT_RNG_INIT);
    for (size_t i = 0; i < n; i += 4) {
        uint32_t r[4];
        ct_rng_block(key, (const uint32_t[4]){stream, (uint32_t)(i >> 2), 0x6E, 0}, r);
        for (size_t j = 0; j < 4 && i + j < n; j++)
            p[i + j] = 2.0f * ct_rng_u01(r[j]) - 1.0f;
    }
}

/* The signature of ct_sgemm, ct_bgemm and their variants. */
typedef void (*gemm_fn)(int, int, int, int, int, float, const float *, int, const float *, int,
                        float, float *, int);

struct gemm_problem {
    int ta, tb, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    float *A, *B, *C0; /* C0: C before the product */
};

static inline struct gemm_problem gemm_problem_new(int ta, int tb, int M, int N, int K,
                                                   float alpha, float beta, uint32_t seed)
{
    struct gemm_problem p = {
        .ta = ta, .tb = tb, .M = M, .N = N, .K = K, .alpha = alpha, .beta = beta};
    p.lda = (ta ? M : K) + 3;
    p.ldb = (tb ? K : N) + 5;
    p.ldc = N + 7;
    const size_t na = (size_t)(ta ? K : M) * p.lda, nb = (size_t)(tb ? N : K) * p.ldb,
                 nc = (size_t)M * p.ldc;
    p.A = ct_test_floats(na);
    p.B = ct_test_floats(nb);
    p.C0 = ct_test_floats(nc);
    gemm_fill(p.A, na, seed);
    gemm_fill(p.B, nb, seed + 1);
    gemm_fill(p.C0, nc, seed + 2);
    return p;
}

static inline void gemm_problem_free(struct gemm_problem *p)
{
    free(p->A);
    free(p->B);
    free(p->C0);
}

/* C = f's product of p, from C0 (malloc'd; free() it). */
static inline float *gemm_run(const struct gemm_problem *p, gemm_fn f)
{
    const size_t nc = (size_t)p->M * p->ldc;
    float *C = ct_test_floats(nc);
    memcpy(C, p->C0, nc * sizeof(float));
    f(p->ta, p->tb, p->M, p->N, p->K, p->alpha, p->A, p->lda, p->B, p->ldb, p->beta, C, p->ldc);
    return C;
}

/* "WHAT NT M.. N.. K.. alpha .. beta ..": a failure's label. */
static inline void gemm_label(char *buf, size_t n, const char *what, const struct gemm_problem *p)
{
    snprintf(buf, n, "%s %c%c M%d N%d K%d alpha %g beta %g", what, p->ta ? 'T' : 'N',
             p->tb ? 'T' : 'N', p->M, p->N, p->K, (double)p->alpha, (double)p->beta);
}

#endif
