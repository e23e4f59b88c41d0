/* Reproducible summation (parallel/reprosum.h) without MPI: exponents,
 * shifts, exactness of the int64 sums, independence of the order and of the
 * grouping of the terms (term sets split over simulated ranks, any number of
 * them, powers of two or not), non-finite detection, and the deterministic
 * micro-batch cut built rank by rank side by side. The collective wrapper is
 * run over the "self" communicator here and over real ranks in
 * tests/mpi/test_reprosum.c. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ct_test.h"
#include "parallel/comm.h"
#include "parallel/reprosum.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint64_t next_u64(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}
/* A float with a random sign, mantissa and an exponent in [lo, hi]. */
static float rand_float(int lo, int hi)
{
    const double m = 0.5 + (double)(next_u64() >> 11) / (double)(1ull << 54);
    const int e = lo + (int)(next_u64() % (uint64_t)(hi - lo + 1));
    const float f = (float)ldexp(m, e);
    return (next_u64() & 1) ? -f : f;
}

static void test_exponent(void)
{
    CU_ASSERT_EQUAL(ct_repro_exponent(0.0), CT_REPRO_EXP_ZERO);
    CU_ASSERT_EQUAL(ct_repro_exponent(NAN), CT_REPRO_EXP_NONFINITE);
    CU_ASSERT_EQUAL(ct_repro_exponent(-INFINITY), CT_REPRO_EXP_NONFINITE);
    CU_ASSERT_EQUAL(ct_repro_exponent(1.0), 1);    /* 1 < 2^1 */
    CU_ASSERT_EQUAL(ct_repro_exponent(0.999), 0);  /* < 2^0 */
    CU_ASSERT_EQUAL(ct_repro_exponent(-3.0), 2);
    CU_ASSERT_EQUAL(ct_repro_exponent(0x1p-140), -139); /* a float subnormal */
    int64_t e[3];
    ct_repro_exp_init(e, 3);
    const float x[5] = {0.5f, -6.0f, 0.0f, 0.0f, 0.25f};
    ct_repro_block_exponents(e, x, 5, 2);
    CU_ASSERT_EQUAL(e[0], 3);
    CU_ASSERT_EQUAL(e[1], CT_REPRO_EXP_ZERO);
    CU_ASSERT_EQUAL(e[2], -1);
    /* Max-accumulating: a smaller second set changes nothing, a larger one does. */
    const float y[5] = {1.0f, 1.0f, 1.0f, 100.0f, 0.0f};
    ct_repro_block_exponents(e, y, 5, 2);
    CU_ASSERT_EQUAL(e[0], 3);
    CU_ASSERT_EQUAL(e[1], 7);
    CU_ASSERT_EQUAL(e[2], -1);
    CU_ASSERT_EQUAL(ct_repro_n_blocks(5, 2), 3);
    CU_ASSERT_EQUAL(ct_repro_n_blocks(4, 2), 2);
    CU_ASSERT_EQUAL(ct_repro_n_blocks(0, 2), 0);
}

static void test_nonfinite(void)
{
    float x[600];
    for (int i = 0; i < 600; i++)
        x[i] = 1.0f;
    x[300] = NAN;
    int64_t e[3];
    ct_repro_exp_init(e, 3);
    ct_repro_block_exponents(e, x, 600, 256);
    CU_ASSERT_EQUAL(e[1], CT_REPRO_EXP_NONFINITE);
    CU_ASSERT_EQUAL(ct_repro_shifts(e, 3, 4), CT_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "block 1"));
    x[300] = 1.0f;
    x[599] = -INFINITY;
    ct_repro_exp_init(e, 3);
    ct_repro_block_exponents(e, x, 600, 256);
    CU_ASSERT_EQUAL(e[2], CT_REPRO_EXP_NONFINITE);
    CU_ASSERT_EQUAL(e[0], 1);
    CU_ASSERT_EQUAL(ct_repro_shifts(e, 1, 0), CT_EINVAL);
}

/* The reproducible sum of k term sets of n floats, computed by splitting the
 * sets into `ranks` groups (group g takes sets [bounds[g], bounds[g+1])),
 * each accumulating its own int64 partial sums in its own order (reversed
 * for odd groups), then adding the partial sums group by group, like the
 * SUM-allreduce. */
static void grouped_sum(float *out, float **terms, int k, size_t n, size_t block, int ranks,
                        int reverse_odd)
{
    const size_t nb = ct_repro_n_blocks(n, block);
    int64_t *e = malloc(nb * sizeof *e), *acc = calloc(n, sizeof *acc),
            *part = malloc(n * sizeof *part);
    CU_ASSERT_FATAL(e && acc && part);
    ct_repro_exp_init(e, nb);
    for (int g = ranks - 1; g >= 0; g--) { /* the MAX: any order */
        int64_t *eg = malloc(nb * sizeof *eg);
        ct_repro_exp_init(eg, nb);
        for (int j = g * k / ranks; j < (g + 1) * k / ranks; j++)
            ct_repro_block_exponents(eg, terms[j], n, block);
        for (size_t b = 0; b < nb; b++)
            e[b] = eg[b] > e[b] ? eg[b] : e[b];
        free(eg);
    }
    CU_ASSERT_EQUAL(ct_repro_shifts(e, nb, k), 0);
    for (int g = 0; g < ranks; g++) {
        memset(part, 0, n * sizeof *part);
        const int lo = g * k / ranks, hi = (g + 1) * k / ranks;
        for (int t = 0; t < hi - lo; t++) {
            const int j = (reverse_odd && (g & 1)) ? hi - 1 - t : lo + t;
            ct_repro_accumulate(part, terms[j], n, e, block);
        }
        for (size_t i = 0; i < n; i++)
            acc[i] += part[i];
    }
    ct_repro_finish(out, acc, n, e, block);
    free(e);
    free(acc);
    free(part);
}

/* Dyadic terms well inside the grid: the result is the exact sum, which a
 * double holds exactly here (few terms of 24-bit mantissas within a narrow
 * exponent range). */
static void test_exact(void)
{
    enum { K = 6, N = 1000 };
    float *terms[K];
    for (int j = 0; j < K; j++) {
        terms[j] = malloc(N * sizeof(float));
        for (int i = 0; i < N; i++)
            terms[j][i] = rand_float(-20, 4);
    }
    float out[N];
    grouped_sum(out, terms, K, N, 256, 1, 0);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double exact = 0;
        for (int j = 0; j < K; j++)
            exact += terms[j][i];
        if (out[i] != (float)exact && bad++ < 5)
            fprintf(stderr, "  element %d: %a, exact %a\n", i, (double)out[i], exact);
    }
    CU_ASSERT_EQUAL(bad, 0);
    for (int j = 0; j < K; j++)
        free(terms[j]);
}

/* The same bits for every grouping into 1, 2, 3, 4, 6 and 12 "ranks", each
 * in its own order, and for shuffled term orders; the result is close to
 * the double sum. Terms span 60 binades, so grid rounding really happens. */
static void test_order_independent(void)
{
    enum { K = 12, N = 777 };
    float *terms[K], *shuffled[K];
    for (int j = 0; j < K; j++) {
        terms[j] = malloc(N * sizeof(float));
        for (int i = 0; i < N; i++)
            terms[j][i] = rand_float(-50, 10);
    }
    float ref[N], out[N];
    grouped_sum(ref, terms, K, N, 64, 1, 0);
    const int splits[] = {2, 3, 4, 6, 12};
    for (int s = 0; s < 5; s++) {
        grouped_sum(out, terms, K, N, 64, splits[s], 1);
        CU_ASSERT_EQUAL(memcmp(out, ref, sizeof ref), 0);
    }
    for (int trial = 0; trial < 5; trial++) {
        memcpy(shuffled, terms, sizeof terms);
        for (int j = K - 1; j > 0; j--) {
            const int r = (int)(next_u64() % (uint64_t)(j + 1));
            float *t = shuffled[j];
            shuffled[j] = shuffled[r];
            shuffled[r] = t;
        }
        grouped_sum(out, shuffled, K, N, 64, 1 + trial, 1);
        CU_ASSERT_EQUAL(memcmp(out, ref, sizeof ref), 0);
    }
    /* Accuracy: within a few float ulps of the block maximum's grid. */
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double exact = 0, amax = 0;
        for (int j = 0; j < K; j++) {
            exact += terms[j][i];
            amax = fabs(terms[j][i]) > amax ? fabs(terms[j][i]) : amax;
        }
        if (fabs(ref[i] - exact) > 1e-6 * fabs(exact) + 1e-12 * amax && bad++ < 5)
            fprintf(stderr, "  element %d: %g, double sum %g\n", i, (double)ref[i], exact);
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* A plain float sum in two orders does differ on these terms: the test
     * exercises what it claims to. */
    int differs = 0;
    for (int i = 0; i < N; i++) {
        float f = 0, r = 0;
        for (int j = 0; j < K; j++) {
            f += terms[j][i];
            r += terms[K - 1 - j][i];
        }
        differs += f != r;
    }
    CU_ASSERT(differs > 0);
    for (int j = 0; j < K; j++)
        free(terms[j]);
}

/* The worst case the shift allows: n_terms terms all at the largest
 * magnitude of the block's exponent do not overflow the int64. */
static void test_no_overflow(void)
{
    enum { K = 7 };
    float *terms[K];
    for (int j = 0; j < K; j++) {
        terms[j] = malloc(3 * sizeof(float));
        terms[j][0] = nextafterf(0x1p20f, 0.0f); /* just under 2^20 */
        terms[j][1] = -nextafterf(0x1p20f, 0.0f);
        terms[j][2] = 0x1p127f * 1.5f; /* near FLT_MAX */
    }
    float out[3];
    grouped_sum(out, terms, K, 3, 1, 3, 1);
    CU_ASSERT_EQUAL(out[0], (float)(7.0 * nextafterf(0x1p20f, 0.0f)));
    CU_ASSERT_EQUAL(out[1], -(float)(7.0 * nextafterf(0x1p20f, 0.0f)));
    CU_ASSERT(isinf(out[2])); /* 7 * 1.5 * 2^127 is beyond float: Inf, not a wrapped int */
    CU_ASSERT(out[2] > 0);
    for (int j = 0; j < K; j++)
        free(terms[j]);
}

static void test_scalar(void)
{
    /* Doubles on a shared grid: any order of the int64 sum gives the same. */
    const double v[5] = {1.25, -3e-3, 7.5, 1e-9, 2.0 / 3.0};
    int64_t e = CT_REPRO_EXP_ZERO;
    for (int i = 0; i < 5; i++)
        e = ct_repro_exponent(v[i]) > e ? ct_repro_exponent(v[i]) : e;
    CU_ASSERT_EQUAL(ct_repro_shifts(&e, 1, 5), 0);
    int64_t a = 0, b = 0;
    for (int i = 0; i < 5; i++) {
        a += ct_repro_round(v[i], e);
        b += ct_repro_round(v[4 - i], e);
    }
    CU_ASSERT_EQUAL(a, b);
    CU_ASSERT(fabs(ct_repro_unround(a, e) - (1.25 - 3e-3 + 7.5 + 1e-9 + 2.0 / 3.0)) < 1e-15);
    CU_ASSERT_EQUAL(ct_repro_unround(ct_repro_round(0.75, -4), -4), 0.75);
    CU_ASSERT_EQUAL(ct_repro_round(0.5, 0), 0); /* half to even */
    CU_ASSERT_EQUAL(ct_repro_round(2.5, 0), 2);
    CU_ASSERT_EQUAL(ct_repro_round(1.5, 0), 2);
}

static void test_self_allreduce(void)
{
    struct ct_comm c;
    ct_comm_init_self(&c);
    enum { N = 300 };
    float a[N], b[N], out[N], ref[N];
    for (int i = 0; i < N; i++) {
        a[i] = rand_float(-30, 3);
        b[i] = rand_float(-30, 3);
    }
    const float *t2[2] = {a, b}, *t2r[2] = {b, a};
    int64_t work[N + 2];
    CU_ASSERT_EQUAL(ct_repro_allreduce(&c, ref, t2, 2, N, 2, 256, work), 0);
    CU_ASSERT_EQUAL(ct_repro_allreduce(&c, out, t2r, 2, N, 2, 256, work), 0);
    CU_ASSERT_EQUAL(memcmp(out, ref, sizeof ref), 0);
    float *terms[2] = {a, b};
    grouped_sum(out, terms, 2, N, 256, 2, 1);
    CU_ASSERT_EQUAL(memcmp(out, ref, sizeof ref), 0);
    a[17] = NAN;
    memset(out, 0, sizeof out);
    CU_ASSERT_EQUAL(ct_repro_allreduce(&c, out, t2, 2, N, 2, 256, work), CT_ERANGE);
    CU_ASSERT_EQUAL(out[0], 0.0f); /* untouched */
    ct_comm_free(&c);
}

/* The cut for every world that divides 12 micro-batches, built rank by rank:
 * the ranks' micro-batches tile [0, n_mb) in rank order, the samples tile
 * the global batch, the last micro-batch may be short. */
static void test_mbcut(void)
{
    const int worlds[] = {1, 2, 3, 4, 6, 12};
    for (int w = 0; w < 6; w++) {
        int64_t next_mb = 0, next_sample = 0;
        for (int r = 0; r < worlds[w]; r++) {
            struct ct_mbcut cut;
            CU_ASSERT_EQUAL_FATAL(ct_mbcut_plan(190, 16, worlds[w], r, &cut), 0);
            CU_ASSERT_EQUAL(cut.n_mb, 12);
            CU_ASSERT_EQUAL(cut.count, 12 / worlds[w]);
            CU_ASSERT_EQUAL(cut.first, next_mb);
            CU_ASSERT_EQUAL(cut.sample_begin, next_sample);
            next_mb = cut.first + cut.count;
            next_sample = cut.sample_end;
        }
        CU_ASSERT_EQUAL(next_mb, 12);
        CU_ASSERT_EQUAL(next_sample, 190);
    }
    struct ct_mbcut cut;
    CU_ASSERT_EQUAL(ct_mbcut_plan(192, 16, 5, 0, &cut), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "5 ranks do not divide the 12"));
    CU_ASSERT_EQUAL(ct_mbcut_plan(192, 16, 2, 2, &cut), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_mbcut_plan(0, 16, 1, 0, &cut), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_mbcut_plan(192, 0, 1, 0, &cut), CT_EINVAL);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"exponents", test_exponent},
        {"non-finite terms", test_nonfinite},
        {"exact sums", test_exact},
        {"order and grouping independence", test_order_independent},
        {"no int64 overflow at the bound", test_no_overflow},
        {"scalars", test_scalar},
        {"self communicator", test_self_allreduce},
        {"micro-batch cut", test_mbcut},
        {NULL, NULL},
    };
    return ct_test_run("reprosum", cases);
}
