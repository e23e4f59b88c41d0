/* ZeRO-1's slices (parallel/shard.h) and the clipping norm by blocks
 * (optim/clip.h) that lets the slices compute one rank's norm:
 * - slices tile [0, numel) in rank order, start on multiples of
 *   CT_SHARD_ALIGN, every one but the last has `slice` elements, a rank
 *   holds at most numel / world + CT_SHARD_ALIGN, counts/displs agree;
 *   tiny buffers leave the last ranks empty; bad ranks and sizes refused;
 * - the norm from block sums equals ct_grad_norm bit for bit, and the block
 *   sums of any cut at block multiples (the slices of any world size) are
 *   the same bits as those of the whole; ct_clip_grad_norm = norm + scale. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ct_test.h"
#include "optim/clip.h"
#include "parallel/shard.h"

static void test_plan_tiles(void)
{
    const size_t sizes[] = {0, 1, 255, 256, 257, 1000, 40016, 71946, 235146, 1000003};
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++)
        for (int world = 1; world <= 9; world++) {
            size_t next = 0;
            for (int r = 0; r < world; r++) {
                struct ct_shard sh;
                CU_ASSERT_EQUAL_FATAL(ct_shard_plan(&sh, sizes[k], world, r), 0);
                CU_ASSERT_EQUAL(sh.slice % CT_SHARD_ALIGN, 0);
                CU_ASSERT(sh.slice * (size_t)world >= sizes[k]);
                CU_ASSERT(sh.slice <= sizes[k] / (size_t)world + CT_SHARD_ALIGN);
                CU_ASSERT_EQUAL(sh.lo, next);
                CU_ASSERT(sh.lo == sizes[k] || sh.lo % CT_SHARD_ALIGN == 0);
                CU_ASSERT(sh.hi - sh.lo <= sh.slice);
                CU_ASSERT(sh.hi - sh.lo == sh.slice || sh.hi == sizes[k]);
                CU_ASSERT_EQUAL((size_t)sh.counts[r], sh.hi - sh.lo);
                CU_ASSERT_EQUAL((size_t)sh.displs[r], sh.lo);
                size_t sum = 0;
                for (int q = 0; q < world; q++)
                    sum += (size_t)sh.counts[q];
                CU_ASSERT_EQUAL(sum, sizes[k]);
                next = sh.hi;
                ct_shard_free(&sh);
            }
            CU_ASSERT_EQUAL(next, sizes[k]);
        }
    /* 300 elements over 4 ranks: 256, 44, then nothing. */
    struct ct_shard sh;
    CU_ASSERT_EQUAL_FATAL(ct_shard_plan(&sh, 300, 4, 3), 0);
    CU_ASSERT(sh.counts[0] == 256 && sh.counts[1] == 44 && sh.counts[2] == 0 && sh.counts[3] == 0);
    CU_ASSERT_EQUAL(sh.lo, sh.hi);
    ct_shard_free(&sh);
    ct_shard_free(&sh); /* harmless twice */
}

static void test_plan_refuses(void)
{
    struct ct_shard sh;
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_shard_plan(&sh, 10, 0, 0), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_shard_plan(&sh, 10, 2, 2), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_shard_plan(&sh, 10, 2, -1), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_shard_plan(&sh, (size_t)INT_MAX + 1, 2, 0), CT_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "dist.shard_optimizer"));
    CU_ASSERT_PTR_NULL(sh.counts);
}

static float value(size_t i)
{
    uint64_t z = (i + 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ull;
    double u = (double)(z >> 11) * 0x1p-53 * 2.0 - 1.0;
    return (float)ldexp(u, (int)(z % 24) - 12);
}

static void test_norm_blocks(void)
{
    enum { N = 100003 };
    float *g = malloc(N * sizeof *g);
    double *whole = malloc((ct_norm_blocks(N) + 1) * sizeof *whole);
    double *cut = malloc((ct_norm_blocks(N) + 1) * sizeof *cut);
    for (size_t i = 0; i < N; i++)
        g[i] = value(i);
    const size_t lens[] = {0, 1, 3, 255, 256, 257, 1024, N};
    for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
        ct_grad_sumsq_blocks(g, lens[k], whole);
        double a = ct_grad_norm(g, lens[k]), b = ct_grad_norm_blocks(whole, ct_norm_blocks(lens[k]));
        CU_ASSERT_EQUAL(memcmp(&a, &b, sizeof a), 0);
        long double ref = 0.0L; /* a reference with 11 more bits */
        for (size_t i = 0; i < lens[k]; i++)
            ref += (long double)g[i] * g[i];
        CU_ASSERT(fabs(a - (double)sqrtl(ref)) <= 1e-13 * (double)sqrtl(ref));
    }
    /* The slices of every world size: the same block sums, the same norm. */
    ct_grad_sumsq_blocks(g, N, whole);
    const double norm = ct_grad_norm(g, N);
    for (int world = 1; world <= 9; world++) {
        memset(cut, 0, (ct_norm_blocks(N) + 1) * sizeof *cut);
        for (int r = 0; r < world; r++) {
            struct ct_shard sh;
            CU_ASSERT_EQUAL_FATAL(ct_shard_plan(&sh, N, world, r), 0);
            ct_grad_sumsq_blocks(g + sh.lo, sh.hi - sh.lo, cut + sh.lo / CT_NORM_BLOCK);
            ct_shard_free(&sh);
        }
        CU_ASSERT_EQUAL(memcmp(cut, whole, ct_norm_blocks(N) * sizeof *cut), 0);
        double n = ct_grad_norm_blocks(cut, ct_norm_blocks(N));
        CU_ASSERT_EQUAL(memcmp(&n, &norm, sizeof n), 0);
    }
    /* Clipping = the norm, then the scale on the same buffer. */
    float *h = malloc(N * sizeof *h);
    memcpy(h, g, N * sizeof *h);
    double n1 = ct_clip_grad_norm(g, N, 0.5 * norm);
    ct_clip_scale(h, N, norm, 0.5 * norm);
    CU_ASSERT_EQUAL(n1, norm);
    CU_ASSERT_EQUAL(memcmp(g, h, N * sizeof *h), 0);
    free(g);
    free(h);
    free(whole);
    free(cut);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"slices tile the buffer, aligned, at most numel/N + align", test_plan_tiles},
        {"bad ranks and sizes refused", test_plan_refuses},
        {"norm by blocks: the same bits from any slices", test_norm_blocks},
        {NULL, NULL},
    };
    return ct_test_run("shard", cases);
}
