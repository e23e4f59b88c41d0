/* Collective checkpoint writes under real mpirun (1, 2 and 4 ranks): round
 * trip byte for byte (tensors of every dtype, an odd-sized one, one over
 * 1 MiB, an empty one; a distinct record per rank), the hash chain, the
 * `latest` pointer, retention, stale temporary directories, replacing an
 * existing step, many small MPI-IO rounds, and ":fail" failpoints at every
 * phase of the commit protocol on the last rank and on rank 0.
 *
 * The SIGKILL failpoints cannot run inside one CUnit process; the end-to-end
 * tests kill ranks of a real training run at each phase instead.
 *
 * Every rank runs every assertion; no assertion is fatal, so a failure on
 * one rank never leaves the others waiting in a collective. */
#include <dirent.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/write-impl.h"
#include "ckpt/ckpt.h"
#include "core/error.h"
#include "ct_mpi_test.h"
#include "proto/checkpoint.pb-c.h"

#define NT 6
#define BIG_ROWS 300
#define BIG_COLS 1001 /* 300 x 1001 f32 = 1.15 MiB */

struct fixture {
    float a[3 * 5];
    uint8_t b[37];
    float *big;
    double d[7];
    int64_t i[2 * 3];
    struct ct_ckpt_tensor t[NT];
    uint8_t record[4096];
    size_t record_len;
};

static uint32_t mix(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352dU;
    x ^= x >> 15;
    x *= 0x846ca68bU;
    x ^= x >> 16;
    return x;
}

static void set_tensor(struct ct_ckpt_tensor *t, const char *name, enum ct_dtype dt, int ndim,
                       int64_t d0, int64_t d1, const void *data)
{
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dt;
    t->ndim = ndim;
    t->shape[0] = d0;
    t->shape[1] = d1;
    t->data = data;
}

/* The serialized RankRecord of `rank` at `step`: distinct per rank, and of a
 * different length per rank, so record offsets really depend on the scan. */
static size_t make_record(int rank, int world, int64_t step, uint8_t *out, size_t cap)
{
    char binding[256];
    int k = 0;
    for (int i = 0; i <= rank; i++)
        k += snprintf(binding + k, sizeof binding - (size_t)k, "cores %d-%d; ", 4 * i, 4 * i + 3);
    Ctrain__RngStream s0 = CTRAIN__RNG_STREAM__INIT, s1 = CTRAIN__RNG_STREAM__INIT;
    s0.purpose = "dropout";
    s0.key0 = mix((uint32_t)rank);
    s0.key1 = 7;
    s0.counter = (uint64_t)step * 1000 + (uint64_t)rank;
    s1.purpose = "augment";
    s1.key0 = 1;
    s1.key1 = mix((uint32_t)rank + 100);
    s1.counter = (uint64_t)step;
    Ctrain__RngStream *streams[2] = {&s0, &s1};
    Ctrain__RankRecord r = CTRAIN__RANK_RECORD__INIT;
    r.rank = rank;
    r.world_size = world;
    r.host = "testhost";
    r.binding = binding;
    r.n_rng = 2;
    r.rng = streams;
    r.loader_epoch = step / 10;
    r.loader_step = step % 10;
    r.loader_first = (uint64_t)rank * 8;
    r.loader_count = 8;
    size_t n = ctrain__rank_record__get_packed_size(&r);
    if (n > cap)
        abort();
    ctrain__rank_record__pack(&r, out);
    return n;
}

static void fx_init(struct fixture *f, int64_t step)
{
    uint32_t s = (uint32_t)step * 7919u;
    for (int i = 0; i < 15; i++)
        f->a[i] = (float)(mix(s + (uint32_t)i) % 1000) / 7.0f;
    for (int i = 0; i < 37; i++)
        f->b[i] = (uint8_t)mix(s + 100 + (uint32_t)i);
    f->big = malloc(sizeof(float) * BIG_ROWS * BIG_COLS);
    for (int i = 0; i < BIG_ROWS * BIG_COLS; i++)
        f->big[i] = (float)(int32_t)mix(s + 1000 + (uint32_t)i) * 1e-6f;
    for (int i = 0; i < 7; i++)
        f->d[i] = 1.0 / (double)(i + 1 + step);
    for (int i = 0; i < 6; i++)
        f->i[i] = (int64_t)mix(s + 50 + (uint32_t)i) << 20;
    set_tensor(&f->t[0], "params/a", CT_DTYPE_F32, 2, 3, 5, f->a);
    set_tensor(&f->t[1], "buffers/odd", CT_DTYPE_U8, 1, 37, 0, f->b);
    set_tensor(&f->t[2], "params/big", CT_DTYPE_F32, 2, BIG_ROWS, BIG_COLS, f->big);
    set_tensor(&f->t[3], "optim/d", CT_DTYPE_F64, 1, 7, 0, f->d);
    set_tensor(&f->t[4], "optim/empty", CT_DTYPE_F32, 1, 0, 0, NULL);
    set_tensor(&f->t[5], "counters/i", CT_DTYPE_I64, 2, 2, 3, f->i);
    f->record_len = make_record(g_comm.rank, g_comm.world, step, f->record, sizeof f->record);
}

static void fx_free(struct fixture *f) { free(f->big); }

static const struct ct_ckpt_kv g_libs[] = {{"Open MPI", "4.1"}, {"protobuf-c", "1.4"}};
static const struct ct_ckpt_kv g_scalars[] = {{"optim.step", "17"}, {"lr", "0.05"}};

static int write_step(const char *run_dir, int64_t step, const uint8_t *parent, int keep_last,
                      int keep_every, uint8_t digest[CT_SHA256_LEN], char *path, size_t path_len)
{
    struct fixture f;
    fx_init(&f, step);
    struct ct_ckpt_data_file df = {"train-images.gz", 1234, {1, 2, 3}, "idx"};
    const char *changes[] = {"train.max_steps: 10 -> 20"};
    struct ct_ckpt_content c = {
        .step = step, .epoch = step / 10, .epoch_step = step % 10,
        .config_text = "[model]\nkind = mlp\n", .code_version = "test",
        .libraries = g_libs, .n_libraries = 2, .data_files = &df, .n_data_files = 1,
        .parent_sha256 = parent, .placement = "rank 0: cores 0-3\nrank 1: cores 4-7",
        .changes = changes, .n_changes = 1, .scalars = g_scalars, .n_scalars = 2,
        .tensors = f.t, .n_tensors = NT, .record = f.record, .record_len = f.record_len,
    };
    struct ct_ckpt_write_params wp = {.run_dir = run_dir, .keep_last = keep_last, .keep_every = keep_every};
    int rc = ct_ckpt_write(&g_comm, &wp, &c, digest, path, path_len);
    fx_free(&f);
    return rc;
}

/* Every tensor and every rank's record of `step` read back byte for byte. */
static int check_content(const struct ct_ckpt *ck, int64_t step)
{
    struct fixture f;
    fx_init(&f, step);
    int bad = 0;
    for (int i = 0; i < NT; i++) {
        const struct ct_ckpt_tensor *t = &f.t[i];
        size_t n = ct_dtype_size(t->dtype);
        for (int k = 0; k < t->ndim; k++)
            n *= (size_t)t->shape[k];
        uint8_t *got = malloc(n + 1);
        int rc = ct_ckpt_read_tensor(ck, t->name, t->dtype, t->ndim, t->shape, got);
        if (rc != 0 || (n && memcmp(got, t->data, n) != 0)) {
            fprintf(stderr, "  [rank %d] %s: rc %d (%s), bytes %s\n", g_comm.rank, t->name, rc,
                    ct_error_message(), rc ? "-" : "differ");
            bad++;
        }
        free(got);
    }
    for (int r = 0; r < g_comm.world; r++) {
        uint8_t want[4096];
        size_t wn = make_record(r, g_comm.world, step, want, sizeof want);
        const uint8_t *b;
        size_t n;
        if (ct_ckpt_rank_record(ck, r, &b, &n) != 0 || n != wn || memcmp(b, want, n) != 0) {
            fprintf(stderr, "  [rank %d] record of rank %d differs\n", g_comm.rank, r);
            bad++;
        }
    }
    fx_free(&f);
    return bad;
}

static void read_latest(const char *run_dir, char *out, size_t n)
{
    char p[512];
    snprintf(p, sizeof p, "%s/latest", run_dir);
    out[0] = '\0';
    FILE *f = fopen(p, "r");
    if (!f)
        return;
    size_t r = fread(out, 1, n - 1, f);
    out[r] = '\0';
    fclose(f);
}

static void test_round_trip_and_chain(void)
{
    char run[256], path1[1024], path2[1024], p[1100];
    ct_mpi_test_tmpdir(run, sizeof run);
    uint8_t d1[CT_SHA256_LEN], d2[CT_SHA256_LEN];
    int rc = write_step(run, 1, NULL, 0, 0, d1, path1, sizeof path1);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc)
        fprintf(stderr, "  [rank %d] %s\n", g_comm.rank, ct_error_message());
    snprintf(p, sizeof p, "%s/ckpt-1", run);
    CU_ASSERT_STRING_EQUAL(path1, p);

    /* Every rank reads the whole checkpoint back. */
    struct ct_ckpt ck;
    rc = ct_ckpt_open(&ck, path1);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0) {
        const Ctrain__Manifest *m = ck.manifest;
        CU_ASSERT_EQUAL(memcmp(ck.digest, d1, CT_SHA256_LEN), 0);
        CU_ASSERT_EQUAL(check_content(&ck, 1), 0);
        CU_ASSERT_FALSE(m->has_parent_sha256);
        CU_ASSERT_EQUAL(m->world_size, g_comm.world);
        CU_ASSERT_EQUAL(m->step, 1);
        CU_ASSERT_STRING_EQUAL(m->config, "[model]\nkind = mlp\n");
        for (size_t i = 0; i < m->n_tensors; i++)
            CU_ASSERT_EQUAL(m->tensors[i]->offset % 64, 0);
        const char *v = NULL;
        CU_ASSERT_EQUAL(ct_ckpt_scalar(&ck, "optim.step", &v), 0);
        CU_ASSERT_STRING_EQUAL(v ? v : "", "17");
        CU_ASSERT_EQUAL(ct_ckpt_scalar(&ck, "nope", &v), CT_ENOENT);
        CU_ASSERT_TRUE(ct_ckpt_has_tensor(&ck, "params/big"));
        CU_ASSERT_FALSE(ct_ckpt_has_tensor(&ck, "params/missing"));
        /* Wrong dtype and shape are refused with both sides named. */
        float tmp[15];
        int64_t bad_shape[2] = {5, 3};
        CU_ASSERT_EQUAL(ct_ckpt_read_tensor(&ck, "params/a", CT_DTYPE_F32, 2, bad_shape, tmp),
                        CT_EMISMATCH);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "expected [5, 3], found [3, 5]"));
        int64_t good_shape[2] = {3, 5};
        CU_ASSERT_EQUAL(ct_ckpt_read_tensor(&ck, "params/a", CT_DTYPE_F64, 2, good_shape, tmp),
                        CT_EMISMATCH);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "expected f64, found f32"));
        const uint8_t *b;
        size_t n;
        CU_ASSERT_EQUAL(ct_ckpt_rank_record(&ck, g_comm.world, &b, &n), CT_ENOENT);
    }
    ct_ckpt_close(&ck);

    /* The second checkpoint names the first as its parent. */
    rc = write_step(run, 2, d1, 0, 0, d2, path2, sizeof path2);
    CU_ASSERT_EQUAL(rc, 0);
    rc = ct_ckpt_open(&ck, path2);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0) {
        const Ctrain__Manifest *m = ck.manifest;
        CU_ASSERT_TRUE(m->has_parent_sha256 && m->parent_sha256.len == CT_SHA256_LEN &&
                       memcmp(m->parent_sha256.data, d1, CT_SHA256_LEN) == 0);
        CU_ASSERT_EQUAL(memcmp(ck.digest, d2, CT_SHA256_LEN), 0);
        CU_ASSERT_EQUAL(check_content(&ck, 2), 0);
    }
    ct_ckpt_close(&ck);
    CU_ASSERT_NOT_EQUAL(memcmp(d1, d2, CT_SHA256_LEN), 0);

    char latest[64], found[1024], list[512];
    read_latest(run, latest, sizeof latest);
    CU_ASSERT_STRING_EQUAL(latest, "ckpt-2\n");
    CU_ASSERT_EQUAL(ct_ckpt_find_latest(run, found, sizeof found), 0);
    CU_ASSERT_STRING_EQUAL(found, path2);
    ct_test_listing(run, 0, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, "ckpt-1,ckpt-2,latest");
    ct_mpi_test_rmtree(run);
}

static void test_retention(void)
{
    char run[256], list[512], latest[64];
    ct_mpi_test_tmpdir(run, sizeof run);
    uint8_t d[CT_SHA256_LEN];
    int ok = 1;
    for (int s = 1; s <= 7; s++)
        ok &= write_step(run, s, s > 1 ? d : NULL, 2, 3, d, NULL, 0) == 0;
    CU_ASSERT_TRUE(ok);
    ct_test_listing(run, 0, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, "ckpt-3,ckpt-6,ckpt-7,latest");
    read_latest(run, latest, sizeof latest);
    CU_ASSERT_STRING_EQUAL(latest, "ckpt-7\n");
    ct_comm_barrier(&g_comm);

    /* keep_last 1 without keep_every leaves only the newest. */
    CU_ASSERT_EQUAL(write_step(run, 8, d, 1, 0, d, NULL, 0), 0);
    ct_test_listing(run, 0, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, "ckpt-8,latest");
    ct_mpi_test_rmtree(run);
}

static void test_stale_tmp_cleaned(void)
{
    char run[256], list[512], p[600];
    ct_mpi_test_tmpdir(run, sizeof run);
    if (g_comm.rank == 0) {
        snprintf(p, sizeof p, "%s/ckpt-5.tmp-1234-dead", run);
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/ckpt-5.tmp-1234-dead/data.bin", run);
        ct_test_write_file(p, "partial", 7);
        snprintf(p, sizeof p, "%s/notes", run); /* not ours: must survive */
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/ckpt-x.tmp-1", run); /* not our pattern either */
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/ckpt-6.tmp-mine", run); /* our pattern, a user's file */
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/ckpt-6.tmp-mine/notes.txt", run);
        ct_test_write_file(p, "mine", 4);
    }
    ct_comm_barrier(&g_comm);
    uint8_t d[CT_SHA256_LEN];
    CU_ASSERT_EQUAL(write_step(run, 9, NULL, 2, 0, d, NULL, 0), 0);
    ct_test_listing(run, 0, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, "ckpt-6.tmp-mine,ckpt-9,ckpt-x.tmp-1,latest,notes");
    if (g_comm.rank == 0) {
        snprintf(p, sizeof p, "%s/ckpt-6.tmp-mine/notes.txt", run);
        CU_ASSERT_EQUAL(access(p, F_OK), 0);
        unlink(p);
    }
    ct_mpi_test_rmtree(run);
}

/* Writing a step that exists already (a run resumed from an older
 * checkpoint) replaces it atomically. */
static void test_replace_existing_step(void)
{
    char run[256], list[512], path[1024];
    ct_mpi_test_tmpdir(run, sizeof run);
    uint8_t d1[CT_SHA256_LEN], d2[CT_SHA256_LEN];
    CU_ASSERT_EQUAL(write_step(run, 4, NULL, 0, 0, d1, path, sizeof path), 0);
    uint8_t parent[CT_SHA256_LEN] = {9};
    CU_ASSERT_EQUAL(write_step(run, 4, parent, 0, 0, d2, path, sizeof path), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(d1, d2, CT_SHA256_LEN), 0);
    struct ct_ckpt ck;
    CU_ASSERT_EQUAL(ct_ckpt_open(&ck, path), 0);
    CU_ASSERT_EQUAL(memcmp(ck.digest, d2, CT_SHA256_LEN), 0);
    ct_ckpt_close(&ck);
    ct_test_listing(run, 0, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, "ckpt-4,latest");

    /* A directory of that name that is not a checkpoint (a user's file in
     * it) is refused, not swapped out and deleted. */
    char p[1100];
    snprintf(p, sizeof p, "%s/ckpt-5", run);
    ct_comm_barrier(&g_comm); /* every rank has listed the directory */
    if (g_comm.rank == 0) {
        mkdir(p, 0755);
        snprintf(p, sizeof p, "%s/ckpt-5/notes.txt", run);
        ct_test_write_file(p, "mine", 4);
    }
    ct_comm_barrier(&g_comm);
    CU_ASSERT_EQUAL(write_step(run, 5, d2, 0, 0, d1, NULL, 0), CT_ESTATE);
    if (g_comm.rank == 0) {
        const char *msg = ct_error_message();
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "is not a checkpoint to replace"));
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "notes.txt"));
        snprintf(p, sizeof p, "%s/ckpt-5/notes.txt", run);
        CU_ASSERT_EQUAL(access(p, F_OK), 0);
        unlink(p);
    }
    ct_test_listing(run, 0, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, "ckpt-4,ckpt-5,latest");
    ct_mpi_test_rmtree(run);
}

/* Many small MPI-IO rounds: shares split over several calls, some ranks
 * with nothing left to write in later rounds. */
static void test_small_write_chunks(void)
{
    char run[256], path[1024];
    ct_mpi_test_tmpdir(run, sizeof run);
    uint64_t saved = ct__ckpt_write_chunk;
    ct__ckpt_write_chunk = 4096 + 64;
    uint8_t d[CT_SHA256_LEN];
    int rc = write_step(run, 3, NULL, 0, 0, d, path, sizeof path);
    ct__ckpt_write_chunk = saved;
    CU_ASSERT_EQUAL(rc, 0);
    struct ct_ckpt ck;
    rc = ct_ckpt_open(&ck, path);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0)
        CU_ASSERT_EQUAL(check_content(&ck, 3), 0);
    ct_ckpt_close(&ck);
    ct_mpi_test_rmtree(run);
}

/* ":fail" on one rank at each phase: every rank returns the error, rank 0's
 * message names the failing rank, nothing is published, `latest` and the
 * previous checkpoint are untouched. */
static void test_failpoints(void)
{
    static const char *const phases[] = {"data", "sync", "synced", "agreed", "manifest", "renamed"};
    char run[256], list[512], latest[64], fp[64], path[1024];
    ct_mpi_test_tmpdir(run, sizeof run);
    uint8_t d1[CT_SHA256_LEN], d[CT_SHA256_LEN];
    CU_ASSERT_EQUAL(write_step(run, 1, NULL, 0, 0, d1, NULL, 0), 0);
    int victims[2] = {g_comm.world - 1, 0};
    for (int v = 0; v < 2; v++) {
        for (size_t p = 0; p < sizeof phases / sizeof *phases; p++) {
            snprintf(fp, sizeof fp, "%s:%d:fail", phases[p], victims[v]);
            setenv("CT_FAILPOINT", fp, 1);
            int rc = write_step(run, 2, d1, 0, 0, d, path, sizeof path);
            unsetenv("CT_FAILPOINT");
            CU_ASSERT_EQUAL(rc, CT_EIO);
            char want[64];
            snprintf(want, sizeof want, "rank %d", victims[v]);
            const char *msg = ct_error_message();
            int ok = strstr(msg, want) != NULL && (g_comm.rank != 0 || strstr(msg, "failpoint") != NULL);
            CU_ASSERT_TRUE(ok);
            if (!ok || rc != CT_EIO)
                fprintf(stderr, "  [rank %d] %s: rc %d, message '%s'\n", g_comm.rank, fp, rc, msg);
            ct_test_listing(run, 0, list, sizeof list);
            CU_ASSERT_STRING_EQUAL(list, "ckpt-1,latest");
            read_latest(run, latest, sizeof latest);
            CU_ASSERT_STRING_EQUAL(latest, "ckpt-1\n");
            ct_comm_barrier(&g_comm);
        }
    }
    struct ct_ckpt ck;
    snprintf(path, sizeof path, "%s/ckpt-2", run);
    CU_ASSERT_EQUAL(ct_ckpt_open(&ck, path), CT_ENOENT);
    snprintf(path, sizeof path, "%s/ckpt-1", run);
    CU_ASSERT_EQUAL(ct_ckpt_open(&ck, path), 0);
    CU_ASSERT_EQUAL(memcmp(ck.digest, d1, CT_SHA256_LEN), 0);
    ct_ckpt_close(&ck);

    /* After the commit point, ":fail" is still reported by every rank, but
     * the checkpoint stays published. */
    snprintf(fp, sizeof fp, "latest:%d:fail", g_comm.world - 1);
    setenv("CT_FAILPOINT", fp, 1);
    CU_ASSERT_EQUAL(write_step(run, 2, d1, 0, 0, d, NULL, 0), CT_EIO);
    unsetenv("CT_FAILPOINT");
    read_latest(run, latest, sizeof latest);
    CU_ASSERT_STRING_EQUAL(latest, "ckpt-2\n");

    /* An injected errno reads as the system call's own error would, naming
     * the file: ENOSPC on the last rank only, EIO from rank 0's data sync. */
    static const char *const errno_fps[][2] = {{"data:%d:enospc", "No space left on device"},
                                               {"sync:%d:eio", "Input/output error"}};
    for (int k = 0; k < 2; k++) {
        snprintf(fp, sizeof fp, errno_fps[k][0], k == 0 ? g_comm.world - 1 : 0);
        setenv("CT_FAILPOINT", fp, 1);
        int rc = write_step(run, 3, d1, 0, 0, d, NULL, 0);
        unsetenv("CT_FAILPOINT");
        CU_ASSERT_EQUAL(rc, CT_EIO);
        const char *msg = ct_error_message();
        int ok = g_comm.rank != 0 || (strstr(msg, "data.bin: ") && strstr(msg, errno_fps[k][1]));
        CU_ASSERT_TRUE(ok);
        if (!ok)
            fprintf(stderr, "  [rank %d] %s: message '%s'\n", g_comm.rank, fp, msg);
        ct_comm_barrier(&g_comm);
    }
    ct_test_listing(run, 0, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, "ckpt-1,ckpt-2,latest");

    /* A malformed failpoint is refused rather than silently ignored. */
    setenv("CT_FAILPOINT", "dat:0", 1);
    CU_ASSERT_EQUAL(write_step(run, 3, d1, 0, 0, d, NULL, 0), CT_EINVAL);
    unsetenv("CT_FAILPOINT");
    ct_test_listing(run, 0, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, "ckpt-1,ckpt-2,latest");
    ct_mpi_test_rmtree(run);
}

/* A rank whose record is over the cap fails the write on every rank. */
static void test_record_too_large(void)
{
    char run[256], list[512];
    ct_mpi_test_tmpdir(run, sizeof run);
    struct ct_ckpt_content c = {.step = 1, .config_text = "", .code_version = "t"};
    uint8_t *big = calloc(CT_CKPT_MAX_RECORD_BYTES + 1, 1);
    c.record = big;
    c.record_len = g_comm.rank == g_comm.world - 1 ? CT_CKPT_MAX_RECORD_BYTES + 1 : 10;
    struct ct_ckpt_write_params wp = {.run_dir = run};
    uint8_t d[CT_SHA256_LEN];
    CU_ASSERT_EQUAL(ct_ckpt_write(&g_comm, &wp, &c, d, NULL, 0), CT_EINVAL);
    free(big);
    ct_test_listing(run, 0, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, "");
    ct_mpi_test_rmtree(run);
}

/* Ranks that disagree on the section list are refused before any write. */
static void test_sections_must_agree(void)
{
    char run[256], list[512];
    ct_mpi_test_tmpdir(run, sizeof run);
    struct fixture f;
    fx_init(&f, 1);
    if (g_comm.rank == g_comm.world - 1 && g_comm.world > 1)
        f.t[0].shape[0] = 5, f.t[0].shape[1] = 3; /* same bytes, other shape */
    struct ct_ckpt_content c = {.step = 1, .config_text = "", .code_version = "t", .tensors = f.t,
                                .n_tensors = NT, .record = f.record, .record_len = f.record_len};
    struct ct_ckpt_write_params wp = {.run_dir = run};
    uint8_t d[CT_SHA256_LEN];
    int rc = ct_ckpt_write(&g_comm, &wp, &c, d, NULL, 0);
    CU_ASSERT_EQUAL(rc, g_comm.world > 1 ? CT_EMISMATCH : 0);
    fx_free(&f);
    ct_test_listing(run, 0, list, sizeof list);
    CU_ASSERT_STRING_EQUAL(list, g_comm.world > 1 ? "" : "ckpt-1,latest");
    ct_mpi_test_rmtree(run);
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"round trip, parent chain, latest", test_round_trip_and_chain},
        {"retention keep_last 2 + keep_every 3", test_retention},
        {"stale temporary directories are cleaned", test_stale_tmp_cleaned},
        {"an existing step is replaced atomically", test_replace_existing_step},
        {"many small MPI-IO rounds", test_small_write_chunks},
        {"failpoints: nothing published, every rank told", test_failpoints},
        {"oversized rank record refused on every rank", test_record_too_large},
        {"ranks must pass the same sections", test_sections_must_agree},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "ckpt (MPI)", cases);
}
