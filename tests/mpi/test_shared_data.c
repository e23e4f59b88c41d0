/* Node-shared training images under real mpirun (ct_dataset_load_shared over
 * ct_comm_shared_alloc).
 *
 * Checks: every rank sees bytes identical to a private load; the ranks of a
 * node map the same memory (the same backing file and the same SHA-256 of
 * the contents: nothing is written to the shared buffer); a bad file gives
 * the same error code and message on every rank, whichever rank hit it,
 * without a hang; loads and releases repeat and interleave; the "self"
 * table works too. For information it prints each rank's proportional set
 * size (PSS, /proc/self/smaps_rollup: shared pages divided among the
 * processes that map them; ru_maxrss would count them whole in every rank)
 * with the Fashion-MNIST training images shared and private.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <sys/stat.h>
#include <zlib.h>

#include "core/error.h"
#include "core/sha256.h"
#include "ct_mpi_test.h"
#include "data/dataset.h"


/* Sample 0's stored bytes: IDX samples lie one after the other from there. */
static const uint8_t *images_of(const struct ct_dataset *ds)
{
    return ds->ops->sample(ds, 0);
}

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define MEAN 0.2860
#define STD 0.3530
#define TN 37 /* samples of the small set */
#define TH 5
#define TW 6
#define MSG 1024

static char g_dir[256];
static MPI_Comm g_node;
static int g_node_rank, g_node_size;

/* dst = src gzipped. */
static int gzip_file(const char *src, const char *dst)
{
    FILE *in = fopen(src, "rb");
    gzFile out = gzopen(dst, "wb");
    int rc = in && out ? 0 : -1;
    char buf[4096];
    size_t got;
    while (rc == 0 && (got = fread(buf, 1, sizeof buf, in)) > 0)
        rc = gzwrite(out, buf, (unsigned)got) == (int)got ? 0 : -1;
    if (in)
        fclose(in);
    if (out && gzclose(out) != Z_OK)
        rc = -1;
    return rc;
}

static void write_idx(const char *name, int rank, const uint32_t *dims, const uint8_t *payload,
                      size_t len)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    if (ct_test_write_idx(path, rank, dims, payload, len) != 0)
        MPI_Abort(MPI_COMM_WORLD, 3);
}

/* Rank 0 writes the files; every rank learns the directory. The ranks are
 * on one node in these tests, so /tmp is shared. */
static void files_make(void)
{
    if (g_comm.rank == 0) {
        snprintf(g_dir, sizeof g_dir, "%s", ct_test_tmpdir());
        static uint8_t im[TN * TH * TW], lb[TN];
        for (int i = 0; i < TN * TH * TW; i++)
            im[i] = (uint8_t)(i * 13 + (i >> 5));
        for (int i = 0; i < TN; i++)
            lb[i] = (uint8_t)(i % 7);
        const uint32_t idims[] = {TN, TH, TW}, ldims[] = {TN}, sdims[] = {TN - 1};
        write_idx("images", 3, idims, im, sizeof im);
        /* The same images gzipped: decoded once per node into the shared
         * window (a raw file is mapped from the page cache instead). */
        char raw[600], gz[600];
        snprintf(raw, sizeof raw, "%s/images", g_dir);
        snprintf(gz, sizeof gz, "%s/images.gz", g_dir);
        if (gzip_file(raw, gz) != 0)
            MPI_Abort(MPI_COMM_WORLD, 3);
        write_idx("labels", 1, ldims, lb, sizeof lb);
        write_idx("images_trunc", 3, idims, im, sizeof im - 10);
        write_idx("labels_short", 1, sdims, lb, TN - 1);
        const uint8_t junk[] = {0x12, 0x34, 0x08, 0x03, 0, 0, 0, 1};
        char path[600];
        snprintf(path, sizeof path, "%s/images_magic", g_dir);
        if (ct_test_write_file(path, junk, sizeof junk) != 0)
            MPI_Abort(MPI_COMM_WORLD, 3);
    }
    MPI_Bcast(g_dir, sizeof g_dir, MPI_CHAR, 0, MPI_COMM_WORLD);
}

static void digest(const struct ct_dataset *ds, uint8_t out[CT_SHA256_LEN])
{
    CU_ASSERT_EQUAL(ct_sha256_buf(images_of(ds), ds->n * ds->sample_numel, out), 0);
}

/* The backing file of the mapping that holds p, as "dev inode" from
 * /proc/self/maps; 0 when p is in no file-backed mapping. */
static uint64_t mapping_inode(const void *p, char *dev, size_t devcap)
{
    FILE *f = fopen("/proc/self/maps", "r");
    uint64_t inode = 0;
    char line[1024];
    dev[0] = '\0';
    while (f && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        char perms[8], d[32];
        unsigned long long off, ino;
        if (sscanf(line, "%lx-%lx %7s %llx %31s %llu", &lo, &hi, perms, &off, d, &ino) != 6)
            continue;
        if ((uintptr_t)p >= lo && (uintptr_t)p < hi) {
            inode = ino;
            snprintf(dev, devcap, "%s", d);
            break;
        }
    }
    if (f)
        fclose(f);
    return inode;
}

/* Is the same buffer (of n bytes) identical on every rank of the node? */
static int node_same(const void *buf, size_t n)
{
    void *root = malloc(n);
    memcpy(root, buf, n);
    MPI_Bcast(root, (int)n, MPI_BYTE, 0, g_node);
    int diff = memcmp(root, buf, n) != 0;
    free(root);
    MPI_Allreduce(MPI_IN_PLACE, &diff, 1, MPI_INT, MPI_MAX, g_node);
    return !diff;
}

static void load_ok(struct ct_dataset *ds, const char *dir, const char *im, const char *lb,
                    const struct ct_shared_alloc *sh)
{
    int rc = ct_test_open_idx(ds, dir, im, lb, MEAN, STD, sh);
    if (rc < 0)
        fprintf(stderr, "\n  rank %d: %s\n", g_comm.rank, ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

/* Shared against private: the same data set in every respect. */
static void check_same_as_private(const struct ct_dataset *sh, const struct ct_dataset *pr)
{
    CU_ASSERT_EQUAL(sh->n, pr->n);
    CU_ASSERT(sh->c == pr->c && sh->h == pr->h && sh->w == pr->w);
    CU_ASSERT_EQUAL(sh->sample_numel, pr->sample_numel);
    CU_ASSERT_EQUAL(sh->n_classes, pr->n_classes);
    CU_ASSERT(memcmp(sh->lut, pr->lut, sizeof sh->lut) == 0);
    CU_ASSERT(memcmp(sh->y, pr->y, sh->n * sizeof *sh->y) == 0);
    CU_ASSERT(memcmp(images_of(sh), images_of(pr), sh->n * sh->sample_numel) == 0);
    CU_ASSERT(images_of(sh) != images_of(pr));
}

/* The node's ranks map one buffer: the same contents everywhere and, with
 * more than one rank, the same backing file (a private heap copy has none). */
static void check_one_copy(const struct ct_dataset *ds)
{
    uint8_t d[CT_SHA256_LEN];
    digest(ds, d);
    CU_ASSERT(node_same(d, sizeof d));
    char dev[32];
    struct {
        uint64_t inode;
        char dev[32];
    } m;
    memset(&m, 0, sizeof m);
    m.inode = mapping_inode(images_of(ds), dev, sizeof dev);
    snprintf(m.dev, sizeof m.dev, "%s", dev);
    CU_ASSERT(node_same(&m, sizeof m));
    if (g_node_size > 1)
        CU_ASSERT(m.inode != 0);
}

static void test_shared_identical(void)
{
    struct ct_shared_alloc sh;
    CU_ASSERT_EQUAL_FATAL(ct_comm_shared_alloc(&g_comm, &sh), 0);
    struct ct_dataset a, b;
    load_ok(&a, g_dir, "images.gz", "labels", &sh);
    load_ok(&b, g_dir, "images.gz", "labels", NULL);
    CU_ASSERT_EQUAL(a.n, TN);
    CU_ASSERT(a.h == TH && a.w == TW && a.n_classes == 7);
    check_same_as_private(&a, &b);
    check_one_copy(&a);
    ct_dataset_close(&a);
    ct_dataset_close(&b);
    static struct ct_dataset zero;
    CU_ASSERT(memcmp(&a, &zero, sizeof a) == 0);
}

static void test_self_table(void)
{
    struct ct_comm self;
    ct_comm_init_self(&self);
    struct ct_shared_alloc sh;
    CU_ASSERT_EQUAL_FATAL(ct_comm_shared_alloc(&self, &sh), 0);
    struct ct_dataset a, b;
    load_ok(&a, g_dir, "images.gz", "labels", &sh);
    load_ok(&b, g_dir, "images.gz", "labels", NULL);
    check_same_as_private(&a, &b);
    ct_dataset_close(&a);
    ct_dataset_close(&b);
    /* The self table's ready() passes a status through. */
    CU_ASSERT_EQUAL(sh.ready(sh.ctx, CT_EIO), CT_EIO);
    ct_comm_free(&self);
}

/* Load with a bad file: every rank must return `want` with the same
 * message, which contains `needle`, and a zeroed data set. */
static void expect_error(const char *im, const char *lb, int want, const char *needle)
{
    struct ct_shared_alloc sh;
    CU_ASSERT_EQUAL_FATAL(ct_comm_shared_alloc(&g_comm, &sh), 0);
    struct ct_dataset ds;
    int rc = ct_test_open_idx(&ds, g_dir, im, lb, MEAN, STD, &sh);
    CU_ASSERT_EQUAL(rc, want);
    static struct ct_dataset zero;
    CU_ASSERT(memcmp(&ds, &zero, sizeof ds) == 0);
    char msg[MSG];
    memset(msg, 0, sizeof msg); /* node_same compares every byte */
    snprintf(msg, sizeof msg, "%s", ct_error_message());
    int has = strstr(msg, needle) != NULL;
    if (!has)
        fprintf(stderr, "\n  rank %d: message '%s' lacks '%s'\n", g_comm.rank, msg, needle);
    CU_ASSERT(has);
    CU_ASSERT(node_same(msg, sizeof msg));
    int all = rc == want;
    MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    CU_ASSERT(all);
}

/* A raw file is not copied: every rank maps the file itself (its inode),
 * so the page cache holds the node's one copy, with or without the table. */
static void test_raw_mapped(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/images", g_dir);
    struct stat st;
    CU_ASSERT_EQUAL_FATAL(stat(path, &st), 0);
    struct ct_shared_alloc sh;
    CU_ASSERT_EQUAL_FATAL(ct_comm_shared_alloc(&g_comm, &sh), 0);
    for (int shared = 0; shared < 2; shared++) {
        struct ct_dataset ds;
        load_ok(&ds, g_dir, "images", "labels", shared ? &sh : NULL);
        check_one_copy(&ds);
        char dev[32];
        CU_ASSERT_EQUAL(mapping_inode(images_of(&ds), dev, sizeof dev), (uint64_t)st.st_ino);
        ct_dataset_close(&ds);
    }
}

static void test_bad_files(void)
{
    /* Only the filler decodes the payload: the others learn through ready(). */
    expect_error("images_trunc", "labels", CT_EFORMAT, "images_trunc: truncated: header promises");
    /* Every rank reads the header. */
    expect_error("images_magic", "labels", CT_EFORMAT, "images_magic: not an IDX file");
    expect_error("no_such_images", "labels", CT_ENOENT, "no_such_images: cannot open");
    /* One rank alone fails (the node's last, with its own labels file): its
     * peers must not wait for it in the allocation. */
    const char *lb = g_node_rank == g_node_size - 1 ? "labels_short" : "labels";
    expect_error("images", lb, CT_EFORMAT, "labels_short: 36 labels but");
    /* Arguments fail on every rank before any file is read. */
    struct ct_shared_alloc sh;
    ct_comm_shared_alloc(&g_comm, &sh);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL(ct_test_open_idx(&ds, g_dir, "images", "labels", MEAN, 0.0, &sh),
                    CT_EINVAL);
    /* And afterwards a good load works as before. */
    test_shared_identical();
}

static void test_repeat_and_interleave(void)
{
    struct ct_shared_alloc sh;
    CU_ASSERT_EQUAL_FATAL(ct_comm_shared_alloc(&g_comm, &sh), 0);
    for (int i = 0; i < 5; i++) {
        struct ct_dataset ds;
        load_ok(&ds, g_dir, "images.gz", "labels", &sh);
        check_one_copy(&ds);
        ct_dataset_close(&ds);
    }
    /* Three live at once, released out of order. */
    struct ct_dataset a, b, c;
    load_ok(&a, g_dir, "images.gz", "labels", &sh);
    load_ok(&b, g_dir, "images.gz", "labels", &sh);
    load_ok(&c, g_dir, "images.gz", "labels", &sh);
    CU_ASSERT(images_of(&a) != images_of(&b) && images_of(&b) != images_of(&c));
    ct_dataset_close(&b);
    CU_ASSERT(memcmp(images_of(&a), images_of(&c), a.n * a.sample_numel) == 0);
    ct_dataset_close(&a);
    check_one_copy(&c);
    ct_dataset_close(&c);
    /* A communicator freed with a buffer still live frees its window too. */
    struct ct_comm extra;
    MPI_Comm world = MPI_COMM_WORLD;
    CU_ASSERT_EQUAL_FATAL(ct_comm_init_mpi(&extra, &world), 0);
    struct ct_shared_alloc sh2;
    CU_ASSERT_EQUAL_FATAL(ct_comm_shared_alloc(&extra, &sh2), 0);
    struct ct_dataset d;
    load_ok(&d, g_dir, "images.gz", "labels", &sh2);
    ct_comm_free(&extra);
    /* The decoded images went with the window; what is left is the
     * format's state (no mapping: the file was gzipped), the labels and
     * the file names. */
    free(d.impl);
    free(d.y);
    for (int i = 0; i < d.n_files; i++)
        free(d.files[i]);
}

/* Pss of this process in kB, or -1. */
static long pss_kb(void)
{
    FILE *f = fopen("/proc/self/smaps_rollup", "r");
    if (!f)
        return -1;
    char line[256];
    long kb = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "Pss: %ld kB", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static void test_fashion_mnist_pss(void)
{
    const char *im = "train-images-idx3-ubyte.gz", *lb = "train-labels-idx1-ubyte.gz";
    if (access(FMNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        if (g_comm.rank == 0)
            fprintf(stderr, "(skipped: %s not installed) ", FMNIST_DIR);
        return;
    }
    struct ct_shared_alloc sh;
    CU_ASSERT_EQUAL_FATAL(ct_comm_shared_alloc(&g_comm, &sh), 0);
    struct ct_dataset ds;
    uint8_t d_shared[CT_SHA256_LEN], d_private[CT_SHA256_LEN];

    MPI_Barrier(MPI_COMM_WORLD);
    long p0 = pss_kb();
    double t0 = MPI_Wtime();
    load_ok(&ds, FMNIST_DIR, im, lb, &sh);
    double t_shared = MPI_Wtime() - t0;
    digest(&ds, d_shared); /* every rank reads every page */
    MPI_Barrier(MPI_COMM_WORLD); /* all ranks have mapped it before anyone measures */
    long p_shared = pss_kb() - p0;
    check_one_copy(&ds);
    size_t bytes = ds.n * ds.sample_numel;
    ct_dataset_close(&ds);

    MPI_Barrier(MPI_COMM_WORLD);
    p0 = pss_kb();
    t0 = MPI_Wtime();
    load_ok(&ds, FMNIST_DIR, im, lb, NULL);
    double t_private = MPI_Wtime() - t0;
    digest(&ds, d_private);
    MPI_Barrier(MPI_COMM_WORLD);
    long p_private = pss_kb() - p0;
    ct_dataset_close(&ds);
    CU_ASSERT(memcmp(d_shared, d_private, sizeof d_shared) == 0);

    double all[4] = {(double)p_shared, (double)p_private, t_shared, t_private};
    double *g = g_comm.rank == 0 ? malloc(4 * sizeof(double) * (size_t)g_comm.world) : NULL;
    MPI_Gather(all, 4, MPI_DOUBLE, g, 4, MPI_DOUBLE, 0, MPI_COMM_WORLD);
    if (g_comm.rank == 0) {
        printf("\n  Fashion-MNIST train images: %.1f MiB; growth of each rank's PSS "
               "(/proc/self/smaps_rollup, shared pages divided among their mappers):\n",
               (double)bytes / (1 << 20));
        for (int r = 0; r < g_comm.world; r++)
            printf("    rank %d: shared %+7.1f MiB (load %.2f s), private %+7.1f MiB (load %.2f s)\n",
                   r, g[4 * r] / 1024, g[4 * r + 2], g[4 * r + 1] / 1024, g[4 * r + 3]);
        free(g);
    }
}

/* Runs first: the files and the node communicator (MPI is up by then). */
static void test_setup(void)
{
    files_make();
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &g_node);
    MPI_Comm_rank(g_node, &g_node_rank);
    MPI_Comm_size(g_node, &g_node_size);
    CU_ASSERT_EQUAL(g_node_size, g_comm.local_world);
}

/* Runs last: every rank is done with the files before rank 0 removes them. */
static void test_teardown(void)
{
    MPI_Barrier(MPI_COMM_WORLD);
    if (g_comm.rank == 0)
        ct_test_rmtree(g_dir);
    MPI_Comm_free(&g_node);
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"set-up", test_setup},
        {"shared equals private, one copy per node", test_shared_identical},
        {"self table", test_self_table},
        {"raw files are mapped, not copied", test_raw_mapped},
        {"bad files: the same error on every rank", test_bad_files},
        {"repeat, interleave, release", test_repeat_and_interleave},
        {"fashion-mnist PSS shared vs private", test_fashion_mnist_pss},
        {"tear-down", test_teardown},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "shared_data", cases);
}
