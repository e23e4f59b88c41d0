/* Reproducible summation (parallel/reprosum.h) without MPI: exponents,
 * shifts, exactness of the int64 and int32 sums, independence of the order
 * and of the grouping of the terms (term sets split over simulated ranks,
 * any number of them, powers of two or not) for both widths, the int32
 * overflow bound, the vectorized kernels against their naive twins,
 * non-finite detection, and the deterministic micro-batch cut built rank by
 * rank side by side. The collective wrapper is run over the "self"
 * communicator here; over real ranks, the deterministic e2e test
 * (tests/e2e/test_deterministic.sh) compares whole runs at N = 1..6. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ct_test.h"
#include "parallel/comm.h"
#include "parallel/mbcut.h"
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
 * each accumulating its own partial sums (int32 or int64: `bits`) in its own
 * order (reversed for odd groups), then adding the partial sums group by
 * group, like the SUM-allreduce. */
static void grouped_sum_bits(float *out, float **terms, int k, size_t n, size_t block, int ranks,
                             int reverse_odd, int bits)
{
    const size_t nb = ct_repro_n_blocks(n, block);
    int64_t *e = malloc(nb * sizeof *e), *acc = calloc(n, sizeof *acc),
            *part = malloc(n * sizeof *part);
    int32_t *acc32 = calloc(n, sizeof *acc32), *part32 = malloc(n * sizeof *part32);
    CU_ASSERT_FATAL(e && acc && part && acc32 && part32);
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
    CU_ASSERT_EQUAL(ct_repro_shifts_bits(e, nb, k, bits), 0);
    for (int g = 0; g < ranks; g++) {
        memset(part, 0, n * sizeof *part);
        const int lo = g * k / ranks, hi = (g + 1) * k / ranks;
        for (int t = 0; t < hi - lo; t++) {
            const int j = (reverse_odd && (g & 1)) ? hi - 1 - t : lo + t;
            if (bits == 64)
                ct_repro_accumulate(part, terms[j], n, e, block);
            else if (t == 0)
                ct_repro_store_i32(part32, terms[j], n, e, block);
            else
                ct_repro_accumulate_i32(part32, terms[j], n, e, block);
        }
        for (size_t i = 0; i < n; i++) {
            if (bits == 64)
                acc[i] += part[i];
            else if (hi > lo) /* a group without terms stored nothing */
                acc32[i] += part32[i];
        }
    }
    if (bits == 64)
        ct_repro_finish(out, acc, n, e, block);
    else
        ct_repro_finish_i32(out, acc32, n, e, block);
    free(e);
    free(acc);
    free(part);
    free(acc32);
    free(part32);
}

/* With the width the library picks for k terms. */
static void grouped_sum(float *out, float **terms, int k, size_t n, size_t block, int ranks,
                        int reverse_odd)
{
    grouped_sum_bits(out, terms, k, n, block, ranks, reverse_odd, ct_repro_acc_bits(k));
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
    grouped_sum_bits(out, terms, K, N, 256, 1, 0, 64);
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

/* The int32 grid: with K = 6 terms (l = 3) a term loses nothing when it is
 * within 6 - l = 3 binades of its block's largest, so terms drawn from
 * [2^-4, 2^0) sum exactly; terms spread wider lose low bits, at most half a
 * grid step each, and never more than the float32 ulp bound of the header. */
static void test_exact_i32(void)
{
    enum { K = 6, N = 1000 };
    CU_ASSERT_EQUAL(ct_repro_acc_bits(K), 32);
    float *terms[K];
    for (int j = 0; j < K; j++) {
        terms[j] = malloc(N * sizeof(float));
        for (int i = 0; i < N; i++)
            terms[j][i] = rand_float(-3, 0);
    }
    float out[N];
    grouped_sum_bits(out, terms, K, N, 256, 3, 1, 32);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double exact = 0;
        for (int j = 0; j < K; j++)
            exact += terms[j][i];
        if (out[i] != (float)exact && bad++ < 5)
            fprintf(stderr, "  element %d: %a, exact %a\n", i, (double)out[i], exact);
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* Wider: 40 binades. Each element's error is within K half grid steps
     * (the grid step is 2^(e - 30 + 3) for the block exponent e), and
     * some elements do round (the test sees the grid). */
    for (int j = 0; j < K; j++)
        for (int i = 0; i < N; i++)
            terms[j][i] = rand_float(-40, 0);
    grouped_sum_bits(out, terms, K, N, 100, 2, 1, 32);
    int rounded = 0;
    bad = 0;
    for (int i = 0; i < N; i++) {
        double exact = 0, bmax = 0;
        for (int j = 0; j < K; j++) {
            exact += terms[j][i];
            for (int t = i / 100 * 100; t < i / 100 * 100 + 100 && t < N; t++)
                bmax = fabs(terms[j][t]) > bmax ? fabs(terms[j][t]) : bmax;
        }
        const double step = ldexp(1.0, (int)ct_repro_exponent(bmax) - 30 + 3);
        /* The grid error, plus the final rounding to float. */
        const double tol = K * step / 2 + fabs(exact) * 0x1p-24;
        if (fabs(out[i] - exact) > tol && bad++ < 5)
            fprintf(stderr, "  element %d: %a, exact %a, tolerance %a\n", i, (double)out[i],
                    exact, tol);
        rounded += (double)out[i] != exact && fabs(exact) < 0x1p-20;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(rounded > 0);
    for (int j = 0; j < K; j++)
        free(terms[j]);
}

/* The vectorized kernels against their naive twins, on every kind of
 * float: zeros of both signs, subnormals, the largest finite, NaN, Inf,
 * ties of the grid (x / 2^s exactly half-way between integers, which round
 * to even), for block sizes that do and do not divide n. */
static void test_fast_vs_ref(void)
{
    enum { N = 1031 };
    static float x[N];
    for (int i = 0; i < N; i++) {
        switch (next_u64() % 8) {
        case 0: x[i] = (next_u64() & 1) ? 0.0f : -0.0f; break;
        case 1: x[i] = rand_float(-149, -127); break; /* subnormal */
        case 2: x[i] = rand_float(100, 127); break;
        default: x[i] = rand_float(-30, 5); break;
        }
    }
    const size_t blocks[] = {1, 7, 64, 256, 2000};
    for (int bi = 0; bi < 5; bi++) {
        const size_t B = blocks[bi], nb = ct_repro_n_blocks(N, B);
        int64_t *e = malloc(nb * sizeof *e), *r = malloc(nb * sizeof *r);
        CU_ASSERT_FATAL(e && r);
        ct_repro_exp_init(e, nb);
        ct_repro_exp_init(r, nb);
        ct_repro_block_exponents(e, x, N, B);
        ct_repro_block_exponents_ref(r, x, N, B);
        CU_ASSERT_EQUAL(memcmp(e, r, nb * sizeof *e), 0);
        /* The int32 kernels against the naive one and the int64 kernel on
         * the same grid: the same integers. */
        CU_ASSERT_EQUAL_FATAL(ct_repro_shifts_bits(e, nb, 3, 32), 0);
        int32_t a[N], b[N];
        int64_t c[N];
        memset(b, 0, sizeof b);
        memset(c, 0, sizeof c);
        ct_repro_store_i32(a, x, N, e, B);
        ct_repro_accumulate_i32(a, x, N, e, B);
        for (int t = 0; t < 2; t++) {
            ct_repro_accumulate_i32_ref(b, x, N, e, B);
            ct_repro_accumulate(c, x, N, e, B);
        }
        int same = 1;
        for (int i = 0; i < N; i++)
            same &= a[i] == b[i] && (int64_t)a[i] == c[i];
        CU_ASSERT(same);
        float f32[N], f64[N];
        ct_repro_finish_i32(f32, a, N, e, B);
        ct_repro_finish(f64, c, N, e, B);
        CU_ASSERT_EQUAL(memcmp(f32, f64, sizeof f32), 0);
        free(e);
        free(r);
    }
    /* Non-finite values: the fast exponents flag them as the naive ones. */
    const float odd[4] = {1.0f, NAN, -INFINITY, INFINITY};
    for (int i = 1; i < 4; i++) {
        float y[300];
        for (int t = 0; t < 300; t++)
            y[t] = (float)t;
        y[257] = odd[i];
        int64_t e[2], r[2];
        ct_repro_exp_init(e, 2);
        ct_repro_exp_init(r, 2);
        ct_repro_block_exponents(e, y, 300, 256);
        ct_repro_block_exponents_ref(r, y, 300, 256);
        CU_ASSERT_EQUAL(e[0], r[0]);
        CU_ASSERT_EQUAL(e[1], CT_REPRO_EXP_NONFINITE);
        CU_ASSERT_EQUAL(r[1], CT_REPRO_EXP_NONFINITE);
    }
    /* Ties: the block's largest is 1.0 (e = 1), one term: s = 1 - 30 = -29,
     * so 2^-30 is half a step (to 0, even), 3 * 2^-30 one and a half (to 2),
     * 5 * 2^-30 two and a half (to 2), and negatives alike. */
    const float t[6] = {1.0f, 0x1p-30f, 0x3p-30f, 0x5p-30f, -0x3p-30f, -0x1p-30f};
    int64_t e = CT_REPRO_EXP_ZERO;
    ct_repro_block_exponents(&e, t, 6, 6);
    CU_ASSERT_EQUAL_FATAL(ct_repro_shifts_bits(&e, 1, 1, 32), 0);
    CU_ASSERT_EQUAL(e, -29);
    int32_t q[6];
    ct_repro_store_i32(q, t, 6, &e, 6);
    CU_ASSERT_EQUAL(q[0], 1 << 29);
    CU_ASSERT_EQUAL(q[1], 0);
    CU_ASSERT_EQUAL(q[2], 2);
    CU_ASSERT_EQUAL(q[3], 2);
    CU_ASSERT_EQUAL(q[4], -2);
    CU_ASSERT_EQUAL(q[5], 0);
}

/* The same bits for every grouping into 1, 2, 3, 4, 6 and 12 "ranks", each
 * in its own order, and for shuffled term orders; the result is close to
 * the double sum. Terms span 60 binades, so grid rounding really happens. */
static void order_independent(int bits)
{
    enum { K = 12, N = 777 };
    float *terms[K], *shuffled[K];
    for (int j = 0; j < K; j++) {
        terms[j] = malloc(N * sizeof(float));
        for (int i = 0; i < N; i++)
            terms[j][i] = rand_float(-50, 10);
    }
    float ref[N], out[N];
    grouped_sum_bits(ref, terms, K, N, 64, 1, 0, bits);
    const int splits[] = {2, 3, 4, 6, 12};
    for (int s = 0; s < 5; s++) {
        grouped_sum_bits(out, terms, K, N, 64, splits[s], 1, bits);
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
        grouped_sum_bits(out, shuffled, K, N, 64, 1 + trial, 1, bits);
        CU_ASSERT_EQUAL(memcmp(out, ref, sizeof ref), 0);
    }
    /* The widths round differently: the int32 grid is 32 binades coarser. */
    if (bits == 32) {
        float r64[N];
        grouped_sum_bits(r64, terms, K, N, 64, 1, 0, 64);
        CU_ASSERT(memcmp(r64, ref, sizeof ref) != 0);
    }
    /* Accuracy: the final rounding to float, plus the grid's error, at most
     * K half steps of the block's grid (2^(e - 62 + 4) or 2^(e - 30 + 4) for
     * K = 12 terms and the block exponent e). */
    int bad = 0;
    for (int i = 0; i < N; i++) {
        double exact = 0, bmax = 0;
        for (int j = 0; j < K; j++) {
            exact += terms[j][i];
            for (int t = i / 64 * 64; t < i / 64 * 64 + 64 && t < N; t++)
                bmax = fabs(terms[j][t]) > bmax ? fabs(terms[j][t]) : bmax;
        }
        const double step = ldexp(1.0, (int)ct_repro_exponent(bmax) - (bits - 2) + 4);
        if (fabs(ref[i] - exact) > 0x1p-24 * fabs(exact) + K * step / 2 && bad++ < 5)
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

/* The same bits for every grouping and order, int64 and int32 sums. */
static void test_order_independent(void) { order_independent(64); }
static void test_order_independent_i32(void) { order_independent(32); }

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
    grouped_sum_bits(out, terms, K, 3, 1, 3, 1, 64);
    CU_ASSERT_EQUAL(out[0], (float)(7.0 * nextafterf(0x1p20f, 0.0f)));
    CU_ASSERT_EQUAL(out[1], -(float)(7.0 * nextafterf(0x1p20f, 0.0f)));
    CU_ASSERT(isinf(out[2])); /* 7 * 1.5 * 2^127 is beyond float: Inf, not a wrapped int */
    CU_ASSERT(out[2] > 0);
    for (int j = 0; j < K; j++)
        free(terms[j]);
}

/* The int32 bound: CT_REPRO_I32_MAX_TERMS terms all at the top of their
 * block's exponent, one sign, sum to 64 * (2^24 - 1) grid steps, under 2^30:
 * exact, no wrap, in any grouping; one term more switches to int64; a count
 * the width cannot hold is refused. */
static void test_i32_boundary(void)
{
    enum { K = CT_REPRO_I32_MAX_TERMS };
    CU_ASSERT_EQUAL(K, 64);
    CU_ASSERT_EQUAL(ct_repro_acc_bits(1), 32);
    CU_ASSERT_EQUAL(ct_repro_acc_bits(K), 32);
    CU_ASSERT_EQUAL(ct_repro_acc_bits(K + 1), 64);
    float *terms[K + 1];
    for (int j = 0; j <= K; j++) {
        terms[j] = malloc(4 * sizeof(float));
        CU_ASSERT_FATAL(terms[j] != NULL);
        terms[j][0] = -nextafterf(0x1p20f, 0.0f);  /* just under 2^20 */
        terms[j][1] = nextafterf(0x1p-100f, 0.0f);
        terms[j][2] = 0x1p127f * 1.5f;              /* near FLT_MAX */
        terms[j][3] = (j & 1) ? 0x1p-10f : -0x1p-10f;
    }
    const int splits[] = {1, 2, 4, 8, 64};
    float ref[4], out[4];
    grouped_sum_bits(ref, terms, K, 4, 1, 1, 0, 32);
    CU_ASSERT_EQUAL(ref[0], (float)(-64.0 * nextafterf(0x1p20f, 0.0f)));
    CU_ASSERT_EQUAL(ref[1], (float)(64.0 * nextafterf(0x1p-100f, 0.0f)));
    CU_ASSERT(isinf(ref[2]) && ref[2] > 0); /* beyond float: Inf, not a wrapped int */
    CU_ASSERT_EQUAL(ref[3], 0.0f);
    for (int s = 0; s < 5; s++) {
        grouped_sum_bits(out, terms, K, 4, 1, splits[s], 1, 32);
        CU_ASSERT_EQUAL(memcmp(out, ref, sizeof ref), 0);
    }
    /* The partial sums reach 64 * (2^24 - 1): close to the bound 2^30. */
    int64_t e = CT_REPRO_EXP_ZERO;
    for (int j = 0; j < K; j++)
        ct_repro_block_exponents(&e, terms[j], 1, 1);
    CU_ASSERT_EQUAL_FATAL(ct_repro_shifts_bits(&e, 1, K, 32), 0);
    int32_t acc = 0;
    for (int j = 0; j < K; j++)
        ct_repro_accumulate_i32(&acc, terms[j], 1, &e, 1);
    CU_ASSERT_EQUAL(acc, -64 * ((1 << 24) - 1));
    /* 65 terms: int64, exact as well. */
    grouped_sum(out, terms, K + 1, 4, 1, 5, 1);
    CU_ASSERT_EQUAL(out[0], (float)(-65.0 * nextafterf(0x1p20f, 0.0f)));
    CU_ASSERT_EQUAL(out[3], -0x1p-10f);
    e = 5;
    CU_ASSERT_EQUAL(ct_repro_shifts_bits(&e, 1, (int64_t)1 << 31, 32), CT_ERANGE);
    e = 5;
    CU_ASSERT_EQUAL(ct_repro_shifts_bits(&e, 1, 2, 16), CT_EINVAL);
    for (int j = 0; j <= K; j++)
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
    void *work = malloc(ct_repro_work_bytes(N, 256));
    CU_ASSERT_FATAL(work != NULL);
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
    free(work);
    ct_comm_free(&c);
}

/* The sum object over "self": rows of two segments (a gradient of 700
 * floats, buffer terms of 300), for 5 rows (int32 sums) and 70 (int64),
 * give each segment's bits of the protocol done by hand (grouped_sum_bits)
 * in any order of the rows; a reduce-scatter by counts (one rank: all of
 * segment 0) gives the same bits; side slots are MAX-reduced; a NaN is seen
 * after the exchange and leaves the outputs untouched; misuse is refused. */
static void test_object_self(void)
{
    struct ct_comm c;
    ct_comm_init_self(&c);
    enum { N0 = 700, N1 = 300, KMAX = 70 };
    float *g[KMAX], *b[KMAX];
    for (int j = 0; j < KMAX; j++) {
        g[j] = malloc(N0 * sizeof(float));
        b[j] = malloc(N1 * sizeof(float));
        CU_ASSERT_FATAL(g[j] && b[j]);
        for (int i = 0; i < N0; i++)
            g[j][i] = rand_float(-40, 4);
        for (int i = 0; i < N1; i++)
            b[j][i] = rand_float(-10, 10);
    }
    const int ks[2] = {5, KMAX};
    for (int v = 0; v < 2; v++) {
        const int k = ks[v];
        float ref0[N0], ref1[N1], out0[N0], out1[N1];
        grouped_sum(ref0, g, k, N0, CT_REPRO_BLOCK, 1, 0);
        grouped_sum(ref1, b, k, N1, CT_REPRO_BLOCK, 1, 0);
        const size_t n[2] = {N0, N1};
        const struct ct_reprosum_params p = {
            .n = n, .n_seg = 2, .n_terms = k, .max_rows = k, .n_side = 2};
        struct ct_reprosum r;
        CU_ASSERT_EQUAL_FATAL(ct_reprosum_init(&r, &c, &p), 0);
        CU_ASSERT_EQUAL(r.bits, k <= CT_REPRO_I32_MAX_TERMS ? 32 : 64);
        for (int pass = 0; pass < 2; pass++) { /* forwards, then backwards */
            ct_reprosum_begin(&r);
            for (int t = 0; t < k; t++) {
                const int j = pass ? k - 1 - t : t;
                CU_ASSERT_EQUAL(ct_reprosum_add(&r, (const float *[]){g[j], b[j]}), 0);
            }
            CU_ASSERT_EQUAL(ct_reprosum_add(&r, (const float *[]){g[0], b[0]}), CT_ESTATE);
            ct_reprosum_side(&r)[0] = 7;
            ct_reprosum_side(&r)[1] = -3;
            CU_ASSERT_EQUAL(ct_reprosum_local_nonfinite(&r), 0);
            CU_ASSERT_EQUAL(ct_reprosum_exchange(&r), 0);
            CU_ASSERT_EQUAL(r.nonfinite, 0);
            CU_ASSERT_EQUAL(ct_reprosum_side(&r)[0], 7);
            CU_ASSERT_EQUAL(ct_reprosum_side(&r)[1], -3);
            const int counts[1] = {N0};
            CU_ASSERT_EQUAL(ct_reprosum_reduce(&r, pass ? counts : NULL), 0);
            ct_reprosum_finish(&r, 0, out0);
            ct_reprosum_finish(&r, 1, out1);
            CU_ASSERT_EQUAL(memcmp(out0, ref0, sizeof ref0), 0);
            CU_ASSERT_EQUAL(memcmp(out1, ref1, sizeof ref1), 0);
        }
        /* A NaN anywhere: seen after the exchange, nothing reduced. */
        ct_reprosum_begin(&r);
        g[k - 1][N0 - 1] = NAN;
        for (int j = 0; j < k; j++)
            CU_ASSERT_EQUAL(ct_reprosum_add(&r, (const float *[]){g[j], b[j]}), 0);
        CU_ASSERT_EQUAL(ct_reprosum_local_nonfinite(&r), 1);
        CU_ASSERT_EQUAL(ct_reprosum_exchange(&r), 0);
        CU_ASSERT_EQUAL(r.nonfinite, 1);
        CU_ASSERT_EQUAL(r.bad_block, ct_repro_n_blocks(N0, CT_REPRO_BLOCK) - 1);
        CU_ASSERT_EQUAL(ct_reprosum_reduce(&r, NULL), CT_ESTATE);
        g[k - 1][N0 - 1] = 1.0f;
        /* Counts that do not cover segment 0 are refused. */
        ct_reprosum_begin(&r);
        CU_ASSERT_EQUAL(ct_reprosum_exchange(&r), 0);
        const int short_counts[1] = {N0 - 1};
        CU_ASSERT_EQUAL(ct_reprosum_reduce(&r, short_counts), CT_EINVAL);
        ct_reprosum_free(&r);
    }
    /* Bad parameters, refused before any collective. */
    const size_t n1 = 10;
    struct ct_reprosum r;
    struct ct_reprosum_params p = {.n = &n1, .n_seg = 1, .n_terms = 0, .max_rows = 1};
    CU_ASSERT_EQUAL(ct_reprosum_init(&r, &c, &p), CT_EINVAL);
    p.n_terms = 1;
    p.n_seg = CT_REPROSUM_MAX_SEG + 1;
    CU_ASSERT_EQUAL(ct_reprosum_init(&r, &c, &p), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_reprosum_work_bytes(&p), 0);
    p.n_seg = 1;
    CU_ASSERT_EQUAL(ct_reprosum_work_bytes(&p), ct_repro_work_bytes(n1, CT_REPRO_BLOCK));
    for (int j = 0; j < KMAX; j++) {
        free(g[j]);
        free(b[j]);
    }
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
        {"exact int32 sums", test_exact_i32},
        {"fast kernels against the naive ones", test_fast_vs_ref},
        {"order and grouping independence", test_order_independent},
        {"order and grouping independence, int32", test_order_independent_i32},
        {"int32 bound", test_i32_boundary},
        {"no int64 overflow at the bound", test_no_overflow},
        {"scalars", test_scalar},
        {"self communicator", test_self_allreduce},
        {"sum object over the self communicator", test_object_self},
        {"micro-batch cut", test_mbcut},
        {NULL, NULL},
    };
    return ct_test_run("reprosum", cases);
}
