/* Running a CUnit suite under mpirun: every rank runs every test (tests are
 * collective), rank 0 reports verbosely, and the process exits non-zero if
 * any assertion failed on ANY rank, so mpirun's exit status tells. */
#ifndef CT_MPI_TEST_H
#define CT_MPI_TEST_H

#include <mpi.h>

#include "core/log.h"
#include "ct_test.h"
#include "parallel/comm.h"

static struct ct_comm g_comm;

/* A fresh temporary directory shared by all ranks of g_comm: rank 0 makes
 * it (ct_test_tmpdir), every rank gets its name. */
static inline void ct_mpi_test_tmpdir(char *dir, size_t n)
{
    if (g_comm.rank == 0)
        snprintf(dir, n, "%s", ct_test_tmpdir());
    ct_comm_bcast(&g_comm, dir, n, 0);
}

/* Remove a directory of ct_mpi_test_tmpdir once every rank is done with it. */
static inline void ct_mpi_test_rmtree(const char *dir)
{
    ct_comm_barrier(&g_comm);
    if (g_comm.rank == 0)
        ct_test_rmtree(dir);
}

static inline int ct_mpi_test_run(int argc, char **argv, const char *suite,
                                  const struct ct_test_case *cases)
{
    MPI_Init(&argc, &argv);
    MPI_Comm world = MPI_COMM_WORLD;
    if (ct_comm_init_mpi(&g_comm, &world) < 0) {
        fprintf(stderr, "ct_comm_init_mpi failed\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    /* Library progress lines only from rank 0, warnings and errors kept. */
    ct_log_init(g_comm.rank, g_comm.world, CT_LOG_LEVEL_WARN);
    if (CU_initialize_registry() != CUE_SUCCESS)
        MPI_Abort(MPI_COMM_WORLD, 2);
    CU_pSuite s = CU_add_suite(suite, NULL, NULL);
    for (const struct ct_test_case *c = cases; c->name; c++)
        CU_add_test(s, c->name, c->fn);
    CU_basic_set_mode(g_comm.rank == 0 ? CU_BRM_VERBOSE : CU_BRM_SILENT);
    CU_basic_run_tests();
    int failed = (int)(CU_get_number_of_failures() + CU_get_number_of_tests_failed());
    if (failed && g_comm.rank != 0) {
        fprintf(stderr, "[rank %d] %d failure(s):\n", g_comm.rank, failed);
        CU_basic_show_failures(CU_get_failure_list());
        fprintf(stderr, "\n");
    }
    CU_cleanup_registry();
    int any = failed;
    MPI_Allreduce(MPI_IN_PLACE, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_comm.rank == 0)
        printf("%s: %d rank(s), %s\n", suite, g_comm.world, any ? "FAILED on some rank" : "all ranks passed");
    ct_comm_free(&g_comm);
    MPI_Finalize();
    return any ? 1 : 0;
}

#endif
