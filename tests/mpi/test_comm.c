/* The MPI communicator under real mpirun: collectives and error agreement. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ct_mpi_test.h"

static void test_allreduce_f32(void)
{
    struct ct_comm *c = &g_comm;
    /* A buffer big enough to use the transports' large-message paths. */
    size_t n = (size_t)3 << 20;
    float *buf = malloc(n * sizeof *buf);
    for (size_t i = 0; i < n; i++)
        buf[i] = (float)(c->rank + 1) * (float)(i % 1000) * 0.25f;
    CU_ASSERT_EQUAL_FATAL(ct_comm_allreduce_f32(c, buf, n), 0);
    /* Small integers times 0.25: every partial sum is exact, whatever the order. */
    float ranks = (float)(c->world * (c->world + 1) / 2);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += buf[i] != ranks * (float)(i % 1000) * 0.25f;
    CU_ASSERT_EQUAL(bad, 0);
    free(buf);
}

static void test_allreduce_ops(void)
{
    struct ct_comm *c = &g_comm;
    double d[2] = {c->rank, -c->rank};
    CU_ASSERT_EQUAL(ct_comm_allreduce_f64(c, d, 2, CT_REDUCE_MAX), 0);
    CU_ASSERT_EQUAL(d[0], c->world - 1);
    CU_ASSERT_EQUAL(d[1], 0);
    int64_t v[2] = {c->rank, (int64_t)1 << 40};
    CU_ASSERT_EQUAL(ct_comm_allreduce_i64(c, v, 2, CT_REDUCE_SUM), 0);
    CU_ASSERT_EQUAL(v[0], (int64_t)c->world * (c->world - 1) / 2);
    CU_ASSERT_EQUAL(v[1], (int64_t)c->world << 40);
    CU_ASSERT_EQUAL(ct_comm_allreduce_i64(c, v, 1, CT_REDUCE_MIN), 0);
}

static void test_bcast_gather(void)
{
    struct ct_comm *c = &g_comm;
    char buf[64];
    snprintf(buf, sizeof buf, "from rank %d", c->rank);
    CU_ASSERT_EQUAL(ct_comm_bcast(c, buf, sizeof buf, c->world - 1), 0);
    char want[64];
    snprintf(want, sizeof want, "from rank %d", c->world - 1);
    CU_ASSERT_STRING_EQUAL(buf, want);
    int *all = c->rank == 0 ? calloc((size_t)c->world, sizeof *all) : NULL;
    int mine = 10 * c->rank;
    CU_ASSERT_EQUAL(ct_comm_gather(c, &mine, sizeof mine, all, 0), 0);
    if (c->rank == 0)
        for (int r = 0; r < c->world; r++)
            CU_ASSERT_EQUAL(all[r], 10 * r);
    free(all);
    CU_ASSERT(c->local_world >= 1 && c->local_rank < c->local_world);
}

static void test_agree(void)
{
    struct ct_comm *c = &g_comm;
    CU_ASSERT_EQUAL(ct_comm_agree(c, 0), 0);

    /* The last rank fails alone: everybody learns, with its code. */
    int last = c->world - 1;
    int rc = c->rank == last ? ct_error_set(CT_EFORMAT, "data.bin: bad magic") : 0;
    CU_ASSERT_EQUAL(ct_comm_agree(c, rc), CT_EFORMAT);
    if (c->rank == 0)
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "data.bin: bad magic"));
    if (c->world > 1 && c->rank == 0) {
        char want[32];
        snprintf(want, sizeof want, "rank %d: data.bin", last);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), want));
    }
    if (c->rank != last && c->rank != 0)
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "failed"));

    /* Every rank fails the same way: one line naming all ranks. */
    ct_error_set(CT_ECONFIG, "x.ini:3: unknown key");
    CU_ASSERT_EQUAL(ct_comm_agree(c, CT_ECONFIG), CT_ECONFIG);
    if (c->rank == 0) {
        CU_ASSERT_PTR_NULL(strchr(ct_error_message(), '\n'));
        if (c->world == 4)
            CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "ranks 0,1,2,3: x.ini:3"));
    }

    /* Different failures: the lowest failing rank's code wins. */
    if (c->world > 1) {
        rc = c->rank == 0 ? 0 : (c->rank == 1 ? CT_EIO : CT_ENOMEM);
        if (rc)
            ct_error_set(rc, "problem on %d", c->rank);
        CU_ASSERT_EQUAL(ct_comm_agree(c, rc), CT_EIO);
    }
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"allreduce f32 (12 MiB)", test_allreduce_f32},
        {"allreduce ops", test_allreduce_ops},
        {"bcast and gather", test_bcast_gather},
        {"error agreement", test_agree},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "comm", cases);
}
