/* ct_repro_allreduce_f64 under real mpirun (np 1, 2, 4): the deterministic
 * mode's test-loss sum gives the same bits whatever the split of the terms
 * over ranks (uneven shards, an empty one, reversed order within a shard),
 * the bits a single process gets from all the terms; NaN or Inf anywhere
 * gives NaN on every rank. The terms are chosen so that a plain double sum
 * depends on their order (magnitudes 2^-20 .. 2^10), so the comparison can
 * fail. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ct_mpi_test.h"
#include "parallel/reprosum.h"

#define N_TERMS 1000

static void make_terms(double *x)
{
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < N_TERMS; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        double m = (double)(s >> 11) / 9007199254740992.0; /* [0, 1) */
        x[i] = ldexp(m, (int)(s % 31) - 20) * (i % 3 == 0 ? -1.0 : 1.0);
    }
}

/* Rank r's share of the terms: uneven (rank r gets a share growing with r,
 * rank 0 none when world > 1). */
static void share(int rank, int world, size_t *first, size_t *count)
{
    size_t total_w = (size_t)world * (size_t)(world - 1) / 2, before = (size_t)rank * (size_t)(rank - 1) / 2;
    if (world == 1) {
        *first = 0;
        *count = N_TERMS;
        return;
    }
    *first = rank == 0 ? 0 : N_TERMS * before / total_w;
    size_t end = N_TERMS * (before + (size_t)rank) / total_w;
    *count = rank == 0 ? 0 : end - *first;
}

static void test_split_independent(void)
{
    struct ct_comm *c = &g_comm;
    double x[N_TERMS], mine[N_TERMS];
    make_terms(x);
    struct ct_comm self;
    ct_comm_init_self(&self);
    double ref = 0.0, got = 1.0;
    CU_ASSERT_EQUAL_FATAL(ct_repro_allreduce_f64(&self, x, N_TERMS, N_TERMS, &ref), 0);
    ct_comm_free(&self);
    /* The plain sum forwards and backwards differ: the order matters for it. */
    double fwd = 0.0, bwd = 0.0;
    for (int i = 0; i < N_TERMS; i++) {
        fwd += x[i];
        bwd += x[N_TERMS - 1 - i];
    }
    CU_ASSERT(fwd != bwd);
    CU_ASSERT(fabs(ref - fwd) < 1e-9 * fabs(fwd) + 1e-12);
    size_t first, count;
    share(c->rank, c->world, &first, &count);
    for (size_t i = 0; i < count; i++)
        mine[i] = x[first + count - 1 - i]; /* reversed */
    CU_ASSERT_EQUAL(ct_repro_allreduce_f64(c, mine, count, N_TERMS, &got), 0);
    CU_ASSERT(memcmp(&got, &ref, sizeof got) == 0);
    int64_t all = (int64_t)count;
    CU_ASSERT_EQUAL(ct_comm_allreduce_i64(c, &all, 1, CT_REDUCE_SUM), 0);
    CU_ASSERT_EQUAL(all, N_TERMS);
}

static void test_nonfinite(void)
{
    struct ct_comm *c = &g_comm;
    double x[3] = {1.0, 2.0, 3.0}, out = 0.0;
    const double bad[2] = {NAN, -INFINITY};
    for (int k = 0; k < 2; k++) {
        x[1] = c->rank == c->world - 1 ? bad[k] : 2.0;
        CU_ASSERT_EQUAL(ct_repro_allreduce_f64(c, x, 3, 3 * c->world, &out), 0);
        CU_ASSERT(isnan(out));
    }
    /* No terms anywhere: 0. */
    CU_ASSERT_EQUAL(ct_repro_allreduce_f64(c, x, 0, 0, &out), 0);
    CU_ASSERT_EQUAL(out, 0.0);
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"sum independent of the split over ranks", test_split_independent},
        {"non-finite terms give NaN everywhere", test_nonfinite},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "reprosum_f64", cases);
}
