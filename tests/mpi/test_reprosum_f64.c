/* Reproducible sums under real mpirun (np 1, 2, 4).
 *
 * The sum object (struct ct_reprosum): rows of two segments, split unevenly
 * over ranks (rank 0 none when world > 1), give the bits one process gets
 * from all the rows, through the allreduce and through the reduce-scatter of
 * the first segment by ZeRO-1's slices; side slots are MAX-reduced; a NaN on
 * the last rank is seen by every rank.
 *
 * ct_repro_allreduce_f64: the deterministic
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
#include "parallel/shard.h"

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

/* Row j's value at element i of segment g: spread over 40 binades, so that
 * a float sum depends on the order. */
static float row_value(int j, int g, size_t i)
{
    uint64_t s = ((uint64_t)j * 1000003u + (uint64_t)g * 7919u + i) * 6364136223846793005u +
                 1442695040888963407u;
    s ^= s >> 29;
    s *= 0xbf58476d1ce4e5b9u;
    s ^= s >> 32;
    const double m = 0.5 + (double)(s >> 11) / 18014398509481984.0; /* [0.5, 1) */
    const float f = (float)ldexp(m, (int)(s % 40) - 30);
    return (s >> 7) & 1 ? -f : f;
}

enum { OBJ_N0 = 1000, OBJ_N1 = 300 };

/* The rows [first, first + count) summed with the object over c; counts:
 * NULL (allreduce) or the slices' counts (reduce-scatter). */
static int object_sum(struct ct_comm *c, int k_total, size_t first, size_t count,
                      const int *counts, float *out0, float *out1, int64_t *side_max, int nan)
{
    float *rows = malloc((count ? count : 1) * (OBJ_N0 + OBJ_N1) * sizeof(float));
    CU_ASSERT_FATAL(rows != NULL);
    for (size_t t = 0; t < count; t++) {
        float *r = rows + t * (OBJ_N0 + OBJ_N1);
        for (size_t i = 0; i < OBJ_N0; i++)
            r[i] = row_value((int)(first + t), 0, i);
        for (size_t i = 0; i < OBJ_N1; i++)
            r[OBJ_N0 + i] = row_value((int)(first + t), 1, i);
    }
    if (nan && count > 0)
        rows[(count - 1) * (OBJ_N0 + OBJ_N1) + OBJ_N0 + 5] = NAN; /* a buffer term */
    const size_t n[2] = {OBJ_N0, OBJ_N1};
    const struct ct_reprosum_params p = {
        .n = n, .n_seg = 2, .n_terms = k_total, .max_rows = (int)count, .n_side = 1};
    struct ct_reprosum r;
    int rc = ct_reprosum_init(&r, c, &p);
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    ct_reprosum_begin(&r);
    for (size_t t = count; t-- > 0;) { /* reversed: the order does not matter */
        const float *row = rows + t * (OBJ_N0 + OBJ_N1);
        CU_ASSERT_EQUAL(ct_reprosum_add(&r, (const float *[]){row, row + OBJ_N0}), 0);
    }
    CU_ASSERT_EQUAL(ct_reprosum_local_nonfinite(&r), nan && count > 0);
    ct_reprosum_side(&r)[0] = c->rank + 1;
    rc = ct_reprosum_exchange(&r);
    *side_max = ct_reprosum_side(&r)[0];
    if (rc == 0 && r.nonfinite)
        rc = 1;
    else if (rc == 0 && (rc = ct_reprosum_reduce(&r, counts)) == 0) {
        ct_reprosum_finish(&r, 0, out0);
        ct_reprosum_finish(&r, 1, out1);
    }
    ct_reprosum_free(&r);
    free(rows);
    return rc;
}

static void test_object(void)
{
    struct ct_comm *c = &g_comm;
    const int ks[2] = {12, 90}; /* int32 sums, int64 sums */
    for (int v = 0; v < 2; v++) {
        const int K = ks[v];
        static float ref0[OBJ_N0], ref1[OBJ_N1], out0[OBJ_N0], out1[OBJ_N1];
        struct ct_comm self;
        ct_comm_init_self(&self);
        int64_t side = 0;
        CU_ASSERT_EQUAL_FATAL(object_sum(&self, K, 0, (size_t)K, NULL, ref0, ref1, &side, 0), 0);
        ct_comm_free(&self);
        /* Rank r's rows: a share growing with r, none on rank 0 when world > 1. */
        const size_t tw = (size_t)c->world * (size_t)(c->world - 1) / 2;
        const size_t before = (size_t)c->rank * (size_t)(c->rank - 1) / 2;
        size_t first = 0, count = (size_t)K;
        if (c->world > 1) {
            first = c->rank == 0 ? 0 : (size_t)K * before / tw;
            count = c->rank == 0 ? 0 : (size_t)K * (before + (size_t)c->rank) / tw - first;
        }
        CU_ASSERT_EQUAL(object_sum(c, K, first, count, NULL, out0, out1, &side, 0), 0);
        CU_ASSERT_EQUAL(side, c->world);
        CU_ASSERT_EQUAL(memcmp(out0, ref0, sizeof ref0), 0);
        CU_ASSERT_EQUAL(memcmp(out1, ref1, sizeof ref1), 0);
        /* Reduce-scatter of segment 0 by ZeRO-1's slices: this rank's slice
         * has the same bits, the rest is untouched. */
        struct ct_shard sh;
        CU_ASSERT_EQUAL_FATAL(ct_shard_plan(&sh, OBJ_N0, c->world, c->rank), 0);
        for (size_t i = 0; i < OBJ_N0; i++)
            out0[i] = -7.0f;
        memset(out1, 0, sizeof out1);
        CU_ASSERT_EQUAL(object_sum(c, K, first, count, sh.counts, out0, out1, &side, 0), 0);
        for (size_t i = 0, bad = 0; i < OBJ_N0 && !bad; i++) {
            const int mine = i >= sh.lo && i < sh.hi;
            bad = mine ? memcmp(&out0[i], &ref0[i], sizeof(float)) != 0 : out0[i] != -7.0f;
            CU_ASSERT_FALSE(bad);
        }
        CU_ASSERT_EQUAL(memcmp(out1, ref1, sizeof ref1), 0);
        ct_shard_free(&sh);
        /* A NaN in the last rank's rows: every rank sees it, nothing is summed. */
        const int nan = c->rank == c->world - 1;
        CU_ASSERT_EQUAL(object_sum(c, K, first, count, NULL, out0, out1, &side, nan), 1);
    }
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"sum independent of the split over ranks", test_split_independent},
        {"non-finite terms give NaN everywhere", test_nonfinite},
        {"sum object: the bits of one process, allreduce and reduce-scatter", test_object},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "reprosum_f64", cases);
}
