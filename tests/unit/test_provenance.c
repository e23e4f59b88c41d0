/* What produced a run (src/run/provenance.h): the library list has the names
 * and order checkpoint manifests have always had, every version is filled
 * in and is the one the library itself reports, the count is capped by the
 * room given; the code version is the build's. Also core/clock.h's monotonic
 * clock, which replaced MPI_Wtime in the trainer's timing (no other test
 * file of ours covers core/clock).
 */
#include <mpi.h>
#include <protobuf-c/protobuf-c.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <zlib.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/gemm.h"
#include "core/threads.h"
#include "core/version.h"
#include "ct_test.h"
#include "run/provenance.h"

static const char *const want_names[] = {"mpi",  "hwloc",   "openblas", "protobuf-c",
                                         "zlib", "openssl", "gemm",  "gemm_threads"};
#define N_WANT 8

static void test_names_and_order(void)
{
    struct ct_library_version v[CT_PROVENANCE_MAX_LIBS];
    memset(v, 0, sizeof v);
    int n = ct_provenance_libraries(v, CT_PROVENANCE_MAX_LIBS);
    CU_ASSERT_EQUAL_FATAL(n, N_WANT);
    for (int i = 0; i < n; i++) {
        CU_ASSERT_PTR_NOT_NULL_FATAL(v[i].name);
        CU_ASSERT_STRING_EQUAL(v[i].name, want_names[i]);
        CU_ASSERT_TRUE(v[i].version[0] != '\0');
        CU_ASSERT_PTR_NOT_NULL(memchr(v[i].version, '\0', sizeof v[i].version));
        CU_ASSERT_PTR_NULL(strchr(v[i].version, '\n'));
    }
}

/* Each value is what the library says at run time, as state.c wrote it. */
static void test_values(void)
{
    struct ct_library_version v[CT_PROVENANCE_MAX_LIBS];
    int n = ct_provenance_libraries(v, CT_PROVENANCE_MAX_LIBS);
    CU_ASSERT_EQUAL_FATAL(n, N_WANT);
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(mpi, &len);
    mpi[strcspn(mpi, "\n")] = '\0';
    /* The first line, its words joined by single spaces (MPICH's has a tab):
     * it says which MPI ran, Open MPI or MPICH. */
    char want[MPI_MAX_LIBRARY_VERSION_STRING] = "";
    for (char *save = NULL, *w = strtok_r(mpi, " \t\r", &save); w; w = strtok_r(NULL, " \t\r", &save))
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%s", want[0] ? " " : "", w);
    CU_ASSERT_STRING_EQUAL(v[0].version, want);
    CU_ASSERT(strncmp(want, "Open MPI v", 10) == 0 || strncmp(want, "MPICH Version: ", 15) == 0);
    unsigned a, b, c;
    CU_ASSERT_EQUAL(sscanf(v[1].version, "%u.%u.%u", &a, &b, &c), 3);
    CU_ASSERT_TRUE(a >= 1);
    CU_ASSERT_EQUAL(strncmp(v[2].version, ct_blas_config(), sizeof v[2].version - 1), 0);
    CU_ASSERT_STRING_EQUAL(v[3].version, protobuf_c_version());
    CU_ASSERT_STRING_EQUAL(v[4].version, zlibVersion());
    CU_ASSERT_PTR_NOT_NULL(strstr(v[5].version, "OpenSSL"));
    CU_ASSERT_STRING_EQUAL(v[6].version, ct_sgemm_impl());
    char threads[16];
    snprintf(threads, sizeof threads, "%d", ct_sgemm_threads());
    CU_ASSERT_STRING_EQUAL(v[7].version, threads);
}

static void test_count_capped(void)
{
    struct ct_library_version v[CT_PROVENANCE_MAX_LIBS + 4];
    memset(v, 0, sizeof v);
    /* Only the room given is written: the entry after it stays untouched. */
    CU_ASSERT_EQUAL(ct_provenance_libraries(v, 3), 3);
    CU_ASSERT_STRING_EQUAL(v[2].name, "openblas");
    CU_ASSERT_PTR_NULL(v[3].name);
    CU_ASSERT_EQUAL(v[3].version[0], '\0');
    CU_ASSERT_EQUAL(ct_provenance_libraries(v, 1), 1);
    CU_ASSERT_STRING_EQUAL(v[0].name, "mpi");
    /* More room than libraries: the count is the number of libraries. */
    CU_ASSERT_EQUAL(ct_provenance_libraries(v, CT_PROVENANCE_MAX_LIBS + 4), N_WANT);
    CU_ASSERT_PTR_NULL(v[N_WANT].name);
    CU_ASSERT_EQUAL(ct_provenance_libraries(v, 0), 0);
    CU_ASSERT_EQUAL(ct_provenance_libraries(v, -5), 0);
    CU_ASSERT_EQUAL(ct_provenance_libraries(NULL, 0), 0);
    CU_ASSERT_EQUAL(ct_provenance_libraries(NULL, 2), CT_EINVAL);
}

static void test_code_version(void)
{
    const char *cv = ct_code_version();
    CU_ASSERT_PTR_NOT_NULL_FATAL(cv);
    char want[512];
    snprintf(want, sizeof want, "%s (%s)", CT_VERSION, CT_GIT_DESCRIBE);
    CU_ASSERT_STRING_EQUAL(cv, want);
    CU_ASSERT_TRUE(strlen(CT_VERSION) > 0);
}

static void test_clock(void)
{
    double t0 = ct_now_s();
    CU_ASSERT_TRUE(t0 > 0);
    double prev = t0;
    int monotonic = 1;
    for (int i = 0; i < 100000; i++) {
        double t = ct_now_s();
        monotonic &= t >= prev;
        prev = t;
    }
    CU_ASSERT_TRUE(monotonic);
    /* Seconds, not milli- or nanoseconds: a 20 ms sleep lasts at least 20 ms
     * and (on any machine that runs the tests) well under 20 s. */
    struct timespec ts = {0, 20 * 1000 * 1000};
    double a = ct_now_s();
    nanosleep(&ts, NULL);
    double d = ct_now_s() - a;
    CU_ASSERT_TRUE(d >= 0.019);
    CU_ASSERT_TRUE(d < 20.0);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"library names and order", test_names_and_order},
        {"library versions are the libraries' own", test_values},
        {"count capped by the room given", test_count_capped},
        {"code version of the build", test_code_version},
        {"monotonic clock in seconds", test_clock},
        {NULL, NULL},
    };
    return ct_test_run("provenance", cases);
}
