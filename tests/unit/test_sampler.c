/* The distributed sampler, without MPI: ranks 0..N-1 are built side by side. */
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "core/error.h"
#include "data/sampler.h"

static int is_permutation(const uint32_t *p, uint32_t n)
{
    char *seen = calloc(n, 1);
    int ok = 1;
    for (uint32_t i = 0; i < n && ok; i++) {
        if (p[i] >= n || seen[p[i]])
            ok = 0;
        else
            seen[p[i]] = 1;
    }
    free(seen);
    return ok;
}

static void test_permutation(void)
{
    enum { N = 1000 };
    uint32_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c = malloc(N * sizeof *c);
    ct_sampler_permutation(a, N, 42, 0);
    ct_sampler_permutation(b, N, 42, 0);
    CU_ASSERT(is_permutation(a, N));
    CU_ASSERT(memcmp(a, b, N * sizeof *a) == 0);       /* deterministic */
    ct_sampler_permutation(c, N, 42, 1);
    CU_ASSERT(is_permutation(c, N));
    CU_ASSERT(memcmp(a, c, N * sizeof *a) != 0);       /* differs across epochs */
    ct_sampler_permutation(c, N, 43, 0);
    CU_ASSERT(memcmp(a, c, N * sizeof *a) != 0);       /* differs across seeds */
    size_t fixed = 0;
    for (uint32_t i = 0; i < N; i++)
        fixed += a[i] == i;
    CU_ASSERT(fixed < 10); /* expected ~1 for a random permutation */

    /* Uniformity: where does element 0 land, over many epochs (n = 4)? */
    int where[4] = {0};
    uint32_t p4[4];
    for (int e = 0; e < 4000; e++) {
        ct_sampler_permutation(p4, 4, 7, e);
        for (int i = 0; i < 4; i++)
            if (p4[i] == 0)
                where[i]++;
    }
    for (int i = 0; i < 4; i++)
        CU_ASSERT(where[i] > 850 && where[i] < 1150);
    free(a);
    free(b);
    free(c);
}

static void test_shard_range(void)
{
    for (size_t total = 0; total < 40; total++)
        for (int world = 1; world <= 8; world++) {
            size_t next = 0;
            for (int r = 0; r < world; r++) {
                size_t first, count;
                ct_shard_range(total, world, r, &first, &count);
                CU_ASSERT_EQUAL(first, next); /* contiguous, in rank order */
                CU_ASSERT(count == total / world || count == total / world + 1);
                next = first + count;
            }
            CU_ASSERT_EQUAL(next, total); /* covers everything once */
        }
}

/* For N ranks side by side: each epoch's batches are disjoint and cover
 * steps*G samples, and the union over ranks of step s is the same set, in the
 * same order, as the single-rank batch of step s. */
static void check_world(uint32_t n, int G, int world, uint64_t seed, int epochs)
{
    struct ct_sampler one, *s = calloc((size_t)world, sizeof *s);
    CU_ASSERT_EQUAL_FATAL(ct_sampler_init(&one, n, G, seed, 1, 0), 0);
    for (int r = 0; r < world; r++)
        CU_ASSERT_EQUAL_FATAL(ct_sampler_init(&s[r], n, G, seed, world, r), 0);
    char *seen = malloc(n);
    int64_t steps = ct_sampler_steps_per_epoch(n, G);
    for (int e = 0; e < epochs; e++) {
        memset(seen, 0, n);
        for (int64_t st = 0; st < steps; st++) {
            const uint32_t *ref;
            int nref;
            CU_ASSERT_FATAL(ct_sampler_next(&one, &ref, &nref));
            CU_ASSERT_EQUAL(nref, G);
            int off = 0;
            for (int r = 0; r < world; r++) {
                const uint32_t *idx;
                int cnt;
                CU_ASSERT_FATAL(ct_sampler_next(&s[r], &idx, &cnt));
                CU_ASSERT_EQUAL(cnt, G / world);
                CU_ASSERT(memcmp(idx, ref + off, (size_t)cnt * sizeof *idx) == 0);
                for (int i = 0; i < cnt; i++) {
                    CU_ASSERT(!seen[idx[i]]);
                    seen[idx[i]] = 1;
                }
                off += cnt;
            }
        }
        size_t covered = 0;
        for (uint32_t i = 0; i < n; i++)
            covered += seen[i];
        CU_ASSERT_EQUAL(covered, (size_t)(steps * G)); /* drop_last: the rest is unused */
        const uint32_t *idx;
        int cnt;
        CU_ASSERT_FALSE(ct_sampler_next(&one, &idx, &cnt)); /* end of epoch */
        CU_ASSERT_EQUAL(one.epoch, e + 1);
        for (int r = 0; r < world; r++)
            CU_ASSERT_FALSE(ct_sampler_next(&s[r], &idx, &cnt));
    }
    free(seen);
    ct_sampler_free(&one);
    for (int r = 0; r < world; r++)
        ct_sampler_free(&s[r]);
    free(s);
}

static void test_worlds(void)
{
    for (int world = 1; world <= 8; world *= 2)
        check_world(1000, 64, world, 5, 3);
    check_world(1003, 96, 3, 11, 2); /* odd sizes, a non-power-of-two world */
}

static void test_seek(void)
{
    /* Seeking to (epoch, step) gives what stepping there gives: a pure
     * function of (seed, epoch, step, rank, world). */
    struct ct_sampler a, b;
    CU_ASSERT_EQUAL_FATAL(ct_sampler_init(&a, 500, 50, 3, 2, 1), 0);
    CU_ASSERT_EQUAL_FATAL(ct_sampler_init(&b, 500, 50, 3, 2, 1), 0);
    const uint32_t *ia, *ib;
    int na, nb;
    for (int i = 0; i < 10 + 1 + 3; i++) /* 10 steps, the epoch end, 3 steps */
        ct_sampler_next(&a, &ia, &na);
    ct_sampler_seek(&b, 1, 3);
    CU_ASSERT_EQUAL(a.epoch, 1);
    CU_ASSERT_EQUAL(a.step, 3);
    CU_ASSERT_FATAL(ct_sampler_next(&a, &ia, &na));
    CU_ASSERT_FATAL(ct_sampler_next(&b, &ib, &nb));
    CU_ASSERT_EQUAL(na, nb);
    CU_ASSERT(memcmp(ia, ib, (size_t)na * sizeof *ia) == 0);
    ct_sampler_free(&a);
    ct_sampler_free(&b);
}

static void test_errors(void)
{
    struct ct_sampler s;
    CU_ASSERT_EQUAL(ct_sampler_init(&s, 1000, 66, 0, 4, 0), CT_EINVAL); /* 66 % 4 != 0 */
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "not divisible"));
    CU_ASSERT_EQUAL(ct_sampler_init(&s, 10, 16, 0, 1, 0), CT_EINVAL);   /* batch > n */
    CU_ASSERT_EQUAL(ct_sampler_init(&s, 10, 4, 0, 2, 2), CT_EINVAL);    /* rank >= world */
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"permutation", test_permutation},
        {"shard range", test_shard_range},
        {"worlds 1..8 agree with one rank", test_worlds},
        {"seek", test_seek},
        {"errors", test_errors},
        {NULL, NULL},
    };
    return ct_test_run("sampler", cases);
}
