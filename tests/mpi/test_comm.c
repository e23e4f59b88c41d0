/* The MPI communicator under real mpirun: collectives and error agreement. */
#include <limits.h>
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

/* The one allreduce slot, over MPI and over "self": every element type that
 * reduces, blocking and started into a request, and the same refusals on
 * both (bytes, a bf16 max, a busy request, a started count over INT_MAX). */
static void allreduce_slot(struct ct_comm *c)
{
    const int R = c->rank, W = c->world;
    float f[3] = {1.0f, (float)R, -2.0f};
    double d[2] = {0.5, (double)R};
    int32_t i32[2] = {R, -R};
    int64_t i64[2] = {(int64_t)R << 33, 1};
    uint16_t h[2] = {0x3f80, 0x4000}; /* bf16 1.0, 2.0 */
    struct ct_request req[5];
    memset(req, 0, sizeof req);
    CU_ASSERT_EQUAL(ct_comm_allreduce(c, f, 3, CT_ELEM_F32, CT_REDUCE_SUM, &req[0]), 0);
    CU_ASSERT_EQUAL(ct_comm_allreduce(c, d, 2, CT_ELEM_F64, CT_REDUCE_MAX, &req[1]), 0);
    CU_ASSERT_EQUAL(ct_comm_allreduce(c, i32, 2, CT_ELEM_I32, CT_REDUCE_MIN, &req[2]), 0);
    /* A request still in flight is refused (MPI's; "self" completes at once). */
    if (req[2].active)
        CU_ASSERT_EQUAL(ct_comm_allreduce(c, i64, 2, CT_ELEM_I64, CT_REDUCE_SUM, &req[2]),
                        CT_ESTATE);
    CU_ASSERT_EQUAL(ct_comm_allreduce(c, i64, 2, CT_ELEM_I64, CT_REDUCE_SUM, NULL), 0);
    CU_ASSERT_EQUAL(ct_comm_allreduce(c, h, 2, CT_ELEM_BF16, CT_REDUCE_SUM, &req[3]), 0);
    for (int k = 0; k < 4; k++)
        CU_ASSERT_EQUAL(ct_comm_wait(c, &req[k]), 0);
    CU_ASSERT_EQUAL(f[0], (float)W);
    CU_ASSERT_EQUAL(f[1], (float)(W * (W - 1) / 2));
    CU_ASSERT_EQUAL(d[1], (double)(W - 1));
    CU_ASSERT_EQUAL(i32[0], 0);
    CU_ASSERT_EQUAL(i32[1], -(W - 1));
    CU_ASSERT_EQUAL(i64[0], ((int64_t)W * (W - 1) / 2) << 33);
    CU_ASSERT_EQUAL(i64[1], W);
    /* W ones and W twos: small whole numbers, exact in bf16 (a float's top half). */
    for (int k = 0; k < 2; k++) {
        const float want = (float)((k + 1) * W);
        uint32_t u;
        memcpy(&u, &want, sizeof u);
        CU_ASSERT_EQUAL(h[k], (uint16_t)(u >> 16));
    }
    /* Refused on every rank before any collective. */
    unsigned char b[2] = {1, 2};
    CU_ASSERT_EQUAL(ct_comm_allreduce(c, b, 2, CT_ELEM_BYTE, CT_REDUCE_SUM, NULL), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_comm_allreduce(c, h, 2, CT_ELEM_BF16, CT_REDUCE_MAX, NULL), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_comm_allreduce(c, f, 1, CT_ELEM_COUNT, CT_REDUCE_SUM, NULL), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_comm_allreduce(c, f, (size_t)INT_MAX + 1, CT_ELEM_F32, CT_REDUCE_SUM,
                                      &req[4]),
                    CT_ERANGE);
    CU_ASSERT_EQUAL(req[4].active, 0);
}

static void test_allreduce_slot(void)
{
    allreduce_slot(&g_comm);
    struct ct_comm self;
    ct_comm_init_self(&self);
    allreduce_slot(&self);
    ct_comm_free(&self);
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
        {"one allreduce slot: element types, requests, refusals", test_allreduce_slot},
        {"bcast and gather", test_bcast_gather},
        {"error agreement", test_agree},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "comm", cases);
}
