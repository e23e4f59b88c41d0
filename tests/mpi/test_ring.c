/* Our ring allreduce and reduce-scatter (parallel/comm_ring.c) under real
 * mpirun at 1, 2 and 4 ranks: for odd sizes (empty segments, a last short chunk, several chunks),
 * every element type and reduction it takes, blocking and started, it gives
 * what MPI's allreduce gives (exactly: integer sums, max, min, and float
 * sums of values whose every partial sum is exact), and the same bits on
 * every rank for float sums that round. Also the policy (allreduce.h). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ct_mpi_test.h"
#include "parallel/compress.h"
#include "parallel/transport.h"

/* Odd sizes: below the world (empty segments), around a chunk, several. */
static const size_t sizes[] = {0, 1, 2, 3, 5, 7, 1000, 32767, 32768 * 4 + 3, 300007};
#define N_SIZES (sizeof sizes / sizeof sizes[0])

/* Rank-dependent values of type t; exact: every partial sum is exact. */
static void fill(void *buf, size_t n, enum ct_elem t, int rank, int exact)
{
    for (size_t i = 0; i < n; i++) {
        double v = exact ? (double)((int)((i * 7 + (size_t)rank * 13) % 1000) - 500) * 0.25
                         : sin((double)i * 0.37 + rank) * 1e3 / (1.0 + (double)(i % 17));
        switch (t) {
        case CT_ELEM_F32: ((float *)buf)[i] = (float)v; break;
        case CT_ELEM_F64: ((double *)buf)[i] = v; break;
        case CT_ELEM_I32: ((int32_t *)buf)[i] = (int32_t)(v * 4) + (int32_t)(i % 3) * 1000000; break;
        case CT_ELEM_I64: ((int64_t *)buf)[i] = (int64_t)(v * 4) * ((int64_t)1 << 30); break;
        case CT_ELEM_BF16: {
            float f = (float)v;
            ct_compress_round_bf16(&((uint16_t *)buf)[i], &f, 1);
            break;
        }
        default: break;
        }
    }
}

/* Rank 0's bytes to every rank; 1 if this rank's are the same. */
static int same_on_all(const void *buf, size_t bytes)
{
    char *copy = malloc(bytes ? bytes : 1);
    memcpy(copy, buf, bytes);
    ct_comm_bcast(&g_comm, copy, bytes, 0);
    int same = memcmp(copy, buf, bytes) == 0;
    free(copy);
    int all = same;
    ct_comm_allreduce_i32(&g_comm, &all, 1, CT_REDUCE_MIN);
    return all;
}

/* One type and op at every size: the ring (blocking, or started and waited
 * for) against MPI's allreduce of the same values. */
static void check(enum ct_elem t, enum ct_reduce_op op, int exact, int started)
{
    struct ct_comm *c = &g_comm;
    const size_t w = ct_elem_size(t);
    for (size_t s = 0; s < N_SIZES; s++) {
        const size_t n = sizes[s];
        char *ring = malloc(n * w + 1), *ref = malloc(n * w + 1);
        fill(ring, n, t, c->rank, exact);
        memcpy(ref, ring, n * w);
        ct_comm_set_allreduce(c, CT_ALLREDUCE_MPI);
        CU_ASSERT_EQUAL_FATAL(ct_comm_allreduce(c, ref, n, t, op, NULL), 0);
        ct_comm_set_allreduce(c, CT_ALLREDUCE_RING);
        if (started) {
            struct ct_request r = {0};
            CU_ASSERT_EQUAL_FATAL(ct_comm_allreduce(c, ring, n, t, op, &r), 0);
            int done = 0;
            CU_ASSERT_EQUAL(ct_comm_test(c, &r, &done), 0);
            CU_ASSERT_EQUAL_FATAL(ct_comm_wait(c, &r), 0);
            CU_ASSERT_EQUAL(r.active, 0);
        } else {
            CU_ASSERT_EQUAL_FATAL(ct_comm_allreduce(c, ring, n, t, op, NULL), 0);
        }
        ct_comm_set_allreduce(c, CT_ALLREDUCE_AUTO);
        if (exact || c->world <= 2) {
            /* Two operands: a + b == b + a, whatever the order. */
            int eq = memcmp(ring, ref, n * w) == 0;
            if (!eq)
                fprintf(stderr, "rank %d: ring != MPI: elem %d op %d n %zu\n", c->rank, (int)t,
                        (int)op, n);
            CU_ASSERT(eq);
        }
        CU_ASSERT(same_on_all(ring, n * w));
        free(ring);
        free(ref);
    }
}

static void test_sums(void)
{
    for (int started = 0; started < 2; started++) {
        check(CT_ELEM_I32, CT_REDUCE_SUM, 1, started);
        check(CT_ELEM_I64, CT_REDUCE_SUM, 1, started);
        check(CT_ELEM_F32, CT_REDUCE_SUM, 1, started);
        check(CT_ELEM_F64, CT_REDUCE_SUM, 1, started);
    }
}

static void test_max_min(void)
{
    static const enum ct_elem types[] = {CT_ELEM_F32, CT_ELEM_F64, CT_ELEM_I32, CT_ELEM_I64};
    for (size_t k = 0; k < 4; k++) {
        check(types[k], CT_REDUCE_MAX, 0, 0);
        check(types[k], CT_REDUCE_MIN, 0, 1);
    }
}

/* Sums that round: the same bits on every rank (and, at 2 ranks, MPI's). */
static void test_rounding_sums(void)
{
    check(CT_ELEM_F32, CT_REDUCE_SUM, 0, 0);
    check(CT_ELEM_F64, CT_REDUCE_SUM, 0, 1);
    check(CT_ELEM_BF16, CT_REDUCE_SUM, 0, 0);
    check(CT_ELEM_BF16, CT_REDUCE_SUM, 0, 1);
}

/* Several started at once, completed out of order, as gradient buckets are. */
static void test_concurrent(void)
{
    struct ct_comm *c = &g_comm;
    enum { K = 5 };
    const size_t n[K] = {100003, 7, 65536, 1, 250000};
    int32_t *buf[K], *ref[K];
    struct ct_request r[K];
    memset(r, 0, sizeof r);
    ct_comm_set_allreduce(c, CT_ALLREDUCE_RING);
    for (int k = 0; k < K; k++) {
        buf[k] = malloc(n[k] * sizeof(int32_t));
        ref[k] = malloc(n[k] * sizeof(int32_t));
        fill(buf[k], n[k], CT_ELEM_I32, c->rank + k, 1);
        fill(ref[k], n[k], CT_ELEM_I32, c->rank + k, 1);
        CU_ASSERT_EQUAL_FATAL(ct_comm_allreduce(c, buf[k], n[k], CT_ELEM_I32, CT_REDUCE_SUM, &r[k]), 0);
    }
    for (int k = K - 1; k >= 0; k--)
        CU_ASSERT_EQUAL(ct_comm_wait(c, &r[k]), 0);
    ct_comm_set_allreduce(c, CT_ALLREDUCE_MPI);
    for (int k = 0; k < K; k++) {
        CU_ASSERT_EQUAL(ct_comm_allreduce(c, ref[k], n[k], CT_ELEM_I32, CT_REDUCE_SUM, NULL), 0);
        CU_ASSERT(memcmp(buf[k], ref[k], n[k] * sizeof(int32_t)) == 0);
        free(buf[k]);
        free(ref[k]);
    }
    ct_comm_set_allreduce(c, CT_ALLREDUCE_AUTO);
}

/* The ring's reduce-scatter (in place, result at the buffer's start) against
 * MPI's, for parts of unequal and empty sizes (several chunks, a short last
 * one), every type, blocking and started, several in flight waited for out
 * of order: exact sums equal; sums that round the same at 2 ranks; the
 * elements past the result are not looked at. */
static void test_reduce_scatter(void)
{
    struct ct_comm *c = &g_comm;
    const int W = c->world;
    static const enum ct_elem types[] = {CT_ELEM_I32, CT_ELEM_I64, CT_ELEM_F32, CT_ELEM_F64,
                                         CT_ELEM_BF16};
    enum { K = 3 };
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const enum ct_elem t = types[ti];
        const size_t w = ct_elem_size(t);
        for (int exact = 0; exact < 2; exact++) {
            if (t == CT_ELEM_I32 || t == CT_ELEM_I64) /* integer sums are always exact */
                exact = 1;
            if (t == CT_ELEM_BF16 && exact) /* fill()'s exact values need 9 bits: not in bf16 */
                break;
            int counts[K][8];
            size_t total[K];
            char *buf[K], *ref[K];
            struct ct_request r[K];
            memset(r, 0, sizeof r);
            for (int k = 0; k < K; k++) {
                total[k] = 0;
                for (int q = 0; q < W; q++) {
                    /* k 0: rank 1 gets nothing; k 1: several chunks each, one
                     * odd; k 2: one element each. */
                    counts[k][q] = k == 0 ? (q == 1 ? 0 : 70001 + q * 3)
                                 : k == 1 ? 300007 - q * 1000 : 1;
                    total[k] += (size_t)counts[k][q];
                }
                buf[k] = malloc(total[k] * w);
                ref[k] = malloc(total[k] * w);
                fill(buf[k], total[k], t, c->rank + k, exact);
                /* The reference out of place (MPICH 4.0's in-place reduce-scatter
                 * trips its own memcpy-overlap assertion at 4 ranks with an empty
                 * part): MPI's, whatever the policy, since the ring is in place only. */
                CU_ASSERT_EQUAL_FATAL(ct_comm_reduce_scatter(c, buf[k], ref[k], counts[k], t,
                                                             CT_REDUCE_SUM, NULL), 0);
                ct_comm_set_allreduce(c, CT_ALLREDUCE_RING);
                /* k 1 blocking; the others started, waited for below. */
                CU_ASSERT_EQUAL_FATAL(ct_comm_reduce_scatter(c, NULL, buf[k], counts[k], t,
                                                             CT_REDUCE_SUM, k == 1 ? NULL : &r[k]),
                                      0);
            }
            for (int k = K - 1; k >= 0; k--) {
                CU_ASSERT_EQUAL(ct_comm_wait(c, &r[k]), 0);
                CU_ASSERT_EQUAL(r[k].active, 0);
            }
            ct_comm_set_allreduce(c, CT_ALLREDUCE_AUTO);
            for (int k = 0; k < K; k++) {
                const size_t mine = (size_t)counts[k][c->rank];
                if (exact || W <= 2) {
                    int eq = memcmp(buf[k], ref[k], mine * w) == 0;
                    if (!eq)
                        fprintf(stderr, "rank %d: ring reduce-scatter != MPI's: elem %d k %d\n",
                                c->rank, (int)t, k);
                    CU_ASSERT(eq);
                }
                free(buf[k]);
                free(ref[k]);
            }
        }
    }
}

/* Auto sends large in-place reduce-scatters round the ring on one host too. */
static void test_reduce_scatter_policy(void)
{
    const size_t big = CT_ALLREDUCE_RING_MIN_BYTES;
    CU_ASSERT_EQUAL(ct_reduce_scatter_use_ring(CT_ALLREDUCE_AUTO, big, 2), 1);
    CU_ASSERT_EQUAL(ct_reduce_scatter_use_ring(CT_ALLREDUCE_AUTO, big - 1, 2), 0);
    CU_ASSERT_EQUAL(ct_reduce_scatter_use_ring(CT_ALLREDUCE_AUTO, big, 1), 0);
    CU_ASSERT_EQUAL(ct_reduce_scatter_use_ring(CT_ALLREDUCE_RING, 4, 2), 1);
    CU_ASSERT_EQUAL(ct_reduce_scatter_use_ring(CT_ALLREDUCE_MPI, big * 100, 4), 0);
}

static void test_policy(void)
{
    const size_t big = CT_ALLREDUCE_RING_MIN_BYTES;
    CU_ASSERT_EQUAL(ct_allreduce_use_ring(CT_ALLREDUCE_AUTO, big, 2, 1), 1);
    CU_ASSERT_EQUAL(ct_allreduce_use_ring(CT_ALLREDUCE_AUTO, big - 1, 2, 1), 0);
    CU_ASSERT_EQUAL(ct_allreduce_use_ring(CT_ALLREDUCE_AUTO, big, 2, 0), 0);
    CU_ASSERT_EQUAL(ct_allreduce_use_ring(CT_ALLREDUCE_RING, 4, 2, 0), 1);
    CU_ASSERT_EQUAL(ct_allreduce_use_ring(CT_ALLREDUCE_RING, 4, 1, 1), 0);
    CU_ASSERT_EQUAL(ct_allreduce_use_ring(CT_ALLREDUCE_MPI, big * 100, 4, 1), 0);
    /* Segments tile [0, n), the first n % p one longer. */
    for (size_t n = 0; n < 30; n++)
        for (int p = 1; p <= 5; p++) {
            size_t end = 0;
            for (int k = 0; k < p; k++) {
                size_t lo, hi;
                ct_allreduce_segment(n, p, k, &lo, &hi);
                CU_ASSERT_EQUAL(lo, end);
                CU_ASSERT_EQUAL(hi - lo, n / (size_t)p + ((size_t)k < n % (size_t)p));
                end = hi;
            }
            CU_ASSERT_EQUAL(end, n);
        }
    CU_ASSERT_STRING_EQUAL(ct_comm_allreduce_name(&g_comm), g_comm.world < 2 ? "mpi (1 rank)" : "mpi");
}

/* The transport record on one host: every key filled, the same on every
 * rank, no TCP connection to another host, the hosts line says so. */
static void test_transport(void)
{
    struct ct_transport t;
    CU_ASSERT_EQUAL_FATAL(ct_transport_probe(&g_comm, &t), 0);
    for (int k = 0; k < CT_TRANSPORT_N_KEYS; k++)
        CU_ASSERT(ct_transport_value(&t, k)[0] != '\0');
    const char *mpi = ct_transport_value(&t, CT_TRANSPORT_MPI);
    CU_ASSERT(strcmp(mpi, "openmpi") == 0 || strcmp(mpi, "mpich") == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_transport_value(&t, CT_TRANSPORT_HOSTS), "1 host,"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_transport_value(&t, CT_TRANSPORT_LINKS), " none"));
    CU_ASSERT_STRING_EQUAL(ct_transport_value(&t, CT_TRANSPORT_ALLREDUCE), ct_comm_allreduce_name(&g_comm));
    if (strcmp(mpi, "openmpi") == 0)
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_transport_value(&t, CT_TRANSPORT_PML), "(in use"));
    CU_ASSERT(same_on_all(&t, sizeof t));
    CU_ASSERT_STRING_EQUAL(ct_transport_keys[CT_TRANSPORT_N_KEYS - 1], "allreduce");
    CU_ASSERT_PTR_NULL(ct_transport_keys[CT_TRANSPORT_N_KEYS]);
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"ring = MPI: exact sums, every size, blocking and started", test_sums},
        {"ring = MPI: max and min", test_max_min},
        {"ring: sums that round are the same on every rank", test_rounding_sums},
        {"ring: several in flight, waited for out of order", test_concurrent},
        {"policy and segments", test_policy},
        {"ring reduce-scatter = MPI's: parts of any size, every type, started", test_reduce_scatter},
        {"reduce-scatter policy", test_reduce_scatter_policy},
        {"transport record", test_transport},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "ring", cases);
}
