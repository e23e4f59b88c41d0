/* A directory that is not the same for every rank, under real mpirun (1, 2
 * and 4 ranks), at the two places it matters:
 *
 * - the start-up check (run/shared.h): a shared directory passes and is left
 *   as it was (created if missing, the probe gone); rank 0 unable to create
 *   it fails every rank, naming the path. (A directory private to one rank
 *   needs a mount namespace per rank: tests/e2e/test_private_dir.sh and the
 *   multi-host tests/net/test_shared_dir.sh.)
 * - the collective open of data.bin (ckpt/data.c): with failpoint "open:R",
 *   rank R does not see the checkpoint's temporary directory, as on a host
 *   that does not share the run directory. Under Open MPI that open used to
 *   block every rank inside MPI_File_open for ever; now every rank returns
 *   the error (rank R's, naming the file and its host), nothing is
 *   published, the previous checkpoint and `latest` are untouched.
 *
 * Every rank runs every assertion; none is fatal, so a failure on one rank
 * never leaves the others waiting in a collective. */
#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt.h"
#include "core/error.h"
#include "ct_mpi_test.h"
#include "run/shared.h"

/* ---------------------------------------------------------------- start-up check */

static void test_shared_passes(void)
{
    char run[256], dir[512], list[512];
    ct_mpi_test_tmpdir(run, sizeof run);
    /* Missing (two levels): rank 0 creates it; nothing else is left. */
    snprintf(dir, sizeof dir, "%s/a/run", run);
    int rc = ct_run_shared_check(&g_comm, dir);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc < 0)
        fprintf(stderr, "  [rank %d] %s\n", g_comm.rank, ct_error_message());
    ct_test_listing(dir, 1, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, "");
    struct stat st;
    /* One rank: nothing to check, nothing made. */
    CU_ASSERT_EQUAL(stat(dir, &st) == 0, g_comm.world > 1);
    ct_comm_barrier(&g_comm);
    /* Existing, with files: they stay, the probe goes. */
    if (g_comm.rank == 0)
        ct_test_write_file(ct_test_path(run, "keep.txt"), "x", 1);
    ct_comm_barrier(&g_comm);
    CU_ASSERT_EQUAL(ct_run_shared_check(&g_comm, run), 0);
    ct_test_listing(run, 1, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, g_comm.world > 1 ? "a,keep.txt" : "keep.txt");
    ct_mpi_test_rmtree(run);
}

static void test_rank0_cannot_create(void)
{
    if (g_comm.world == 1)
        return; /* nothing is created with one rank */
    char run[256], dir[512];
    ct_mpi_test_tmpdir(run, sizeof run);
    if (g_comm.rank == 0)
        ct_test_write_file(ct_test_path(run, "file"), "x", 1);
    ct_comm_barrier(&g_comm);
    snprintf(dir, sizeof dir, "%s/file/run", run); /* under a regular file */
    int rc = ct_run_shared_check(&g_comm, dir);
    CU_ASSERT_TRUE(rc < 0);
    int ok = g_comm.rank != 0 || strstr(ct_error_message(), "/file") != NULL;
    CU_ASSERT_TRUE(ok);
    if (!ok)
        fprintf(stderr, "  [rank %d] message '%s'\n", g_comm.rank, ct_error_message());
    ct_mpi_test_rmtree(run);
}

/* ---------------------------------------------------------------- data.bin open */

static float g_w[1000];

static int write_step(const char *run, int64_t step)
{
    struct ct_ckpt_tensor t;
    memset(&t, 0, sizeof t);
    snprintf(t.name, sizeof t.name, "params/w");
    t.dtype = CT_DTYPE_F32;
    t.ndim = 1;
    t.shape[0] = 1000;
    t.data = g_w;
    uint8_t record[8] = {(uint8_t)g_comm.rank};
    struct ct_ckpt_content c = {.step = step, .config_text = "", .code_version = "t", .tensors = &t,
                                .n_tensors = 1, .record = record, .record_len = sizeof record};
    struct ct_ckpt_write_params wp = {.run_dir = run};
    uint8_t d[CT_SHA256_LEN];
    return ct_ckpt_write(&g_comm, &wp, &c, d, NULL, 0);
}

static void test_open_fails_on_one_rank(void)
{
    char run[256], list[512], fp[64], path[512];
    for (int i = 0; i < 1000; i++)
        g_w[i] = (float)i;
    ct_mpi_test_tmpdir(run, sizeof run);
    CU_ASSERT_EQUAL(write_step(run, 1), 0);
    snprintf(path, sizeof path, "%s/ckpt-1", run);
    struct ct_ckpt ck;
    CU_ASSERT_EQUAL(ct_ckpt_open(&ck, path), 0);
    uint8_t d1[CT_SHA256_LEN];
    memcpy(d1, ck.digest, sizeof d1);
    ct_ckpt_close(&ck);

    int victims[2] = {g_comm.world - 1, 0};
    for (int v = 0; v < 2; v++) {
        snprintf(fp, sizeof fp, "open:%d", victims[v]);
        setenv("CT_FAILPOINT", fp, 1);
        int rc = write_step(run, 2);
        unsetenv("CT_FAILPOINT");
        CU_ASSERT_EQUAL(rc, CT_EIO);
        /* Rank 0 tells what the victim saw: its open (or, rank 0's own
         * directory hidden, its create) of the file, naming data.bin. */
        const char *want = victims[v] == 0 ? "cannot create: No such file" : "cannot open the file rank 0 created";
        const char *msg = ct_error_message();
        int ok = g_comm.rank != 0 || (strstr(msg, want) && strstr(msg, "data.bin"));
        CU_ASSERT_TRUE(ok);
        if (!ok || rc != CT_EIO)
            fprintf(stderr, "  [rank %d] %s: rc %d, message '%s'\n", g_comm.rank, fp, rc, msg);
        ct_test_listing(run, 1, list, sizeof list);
        CU_ASSERT_STRING_EQUAL(list, "ckpt-1,latest");
        ct_comm_barrier(&g_comm);
    }
    /* Nothing lost: ckpt-1 is the latest, whole, with its digest. */
    CU_ASSERT_EQUAL(ct_ckpt_find_latest(run, path, sizeof path), 0);
    CU_ASSERT_TRUE(strstr(path, "ckpt-1") != NULL);
    CU_ASSERT_EQUAL(ct_ckpt_open(&ck, path), 0);
    CU_ASSERT_EQUAL(memcmp(ck.digest, d1, CT_SHA256_LEN), 0);
    ct_ckpt_close(&ck);
    /* And the next write, every rank seeing the directory, succeeds. */
    CU_ASSERT_EQUAL(write_step(run, 2), 0);
    ct_mpi_test_rmtree(run);
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"shared run directory passes, nothing left", test_shared_passes},
        {"rank 0 cannot create the directory: every rank fails", test_rank0_cannot_create},
        {"data.bin open fails on one rank: every rank told", test_open_fails_on_one_rank},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "shared directories (MPI)", cases);
}
