/* Unit tests for the in-memory data set (src/data/dataset.c).
 *
 * A tiny data set is written as raw IDX files into a temporary directory and
 * loaded: shapes, class count, the normalization table (bit-exact against the
 * float32 formula PyTorch uses), gather and gather_range, and the errors for
 * files that do not belong together. The IDX parsing itself is tested in
 * test_idx.c.
 */
#include "core/error.h"
#include "data/dataset.h"

#include "ct_test.h"

#include <stdint.h>


/* Sample 0's stored bytes: IDX samples lie one after the other from there. */
static const uint8_t *images_of(const struct ct_dataset *ds)
{
    return ds->ops->sample(ds, 0);
}

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define MEAN 0.2860
#define STD 0.3530

/* Writes a raw u8 IDX file dir/name with the given dims and payload. */
static void write_idx(const char *dir, const char *name, int rank, const uint32_t *dims,
                      const uint8_t *payload, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_idx(path, rank, dims, payload, len), 0);
}

/* 5 images of 2x3 whose bytes cover 0 and 255, and labels {3,0,7,1,3}. */
#define TINY_N 5
#define TINY_S 6
static uint8_t tiny_images[TINY_N * TINY_S];
static const uint8_t tiny_labels[TINY_N] = {3, 0, 7, 1, 3};

static void write_tiny(const char *dir)
{
    for (int i = 0; i < TINY_N * TINY_S; i++)
        tiny_images[i] = (uint8_t)(i * 37 + 11);
    tiny_images[0] = 0;
    tiny_images[TINY_S + 2] = 255;
    const uint32_t idims[] = {TINY_N, 2, 3};
    const uint32_t ldims[] = {TINY_N};
    write_idx(dir, "images", 3, idims, tiny_images, sizeof tiny_images);
    write_idx(dir, "labels", 1, ldims, tiny_labels, sizeof tiny_labels);
}

static int is_zeroed(const struct ct_dataset *ds)
{
    static struct ct_dataset zero;
    return memcmp(ds, &zero, sizeof zero) == 0;
}

/* What PyTorch's ToTensor + Normalize make of byte v, in float32. */
static float reference_norm(int v, double mean, double std)
{
    float x = (float)v / 255.0f;
    x = x - (float)mean;
    x = x / (float)std;
    return x;
}

static void load_ok(struct ct_dataset *ds, const char *dir, const char *im, const char *lb)
{
    int rc = ct_test_open_idx(ds, dir, im, lb, MEAN, STD, NULL);
    if (rc != 0)
        fprintf(stderr, "\n  %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

static void test_shapes(void)
{
    const char *dir = ct_test_tmpdir();
    write_tiny(dir);
    struct ct_dataset ds;
    load_ok(&ds, dir, "images", "labels");
    CU_ASSERT_EQUAL(ds.n, TINY_N);
    CU_ASSERT_EQUAL(ds.c, 1);
    CU_ASSERT_EQUAL(ds.h, 2);
    CU_ASSERT_EQUAL(ds.w, 3);
    CU_ASSERT_EQUAL(ds.sample_numel, TINY_S);
    CU_ASSERT_EQUAL(ds.n_classes, 8);
    CU_ASSERT(memcmp(images_of(&ds), tiny_images, sizeof tiny_images) == 0);
    for (int i = 0; i < TINY_N; i++)
        CU_ASSERT_EQUAL(ds.y[i], tiny_labels[i]);
    ct_dataset_close(&ds);
    CU_ASSERT(is_zeroed(&ds));
    ct_dataset_close(&ds);
    ct_test_rmtree(dir);
}

static void test_rank4_and_paths(void)
{
    /* (n,c,h,w) images; a dir with a trailing slash; an absolute labels path
     * that must not be joined to dir. */
    const char *tmp = ct_test_tmpdir();
    char dir[512], abs_labels[512];
    snprintf(dir, sizeof dir, "%s/", tmp);
    uint8_t im[2 * 3 * 2 * 2];
    for (size_t i = 0; i < sizeof im; i++)
        im[i] = (uint8_t)i;
    const uint32_t idims[] = {2, 3, 2, 2};
    const uint32_t ldims[] = {2};
    const uint8_t lb[] = {1, 1};
    write_idx(tmp, "im4", 4, idims, im, sizeof im);
    write_idx(tmp, "lb", 1, ldims, lb, sizeof lb);
    snprintf(abs_labels, sizeof abs_labels, "%s/lb", tmp);

    struct ct_dataset ds;
    int rc = ct_test_open_idx(&ds, "/nonexistent-dir", "im4", abs_labels, MEAN, STD, NULL);
    CU_ASSERT_EQUAL(rc, CT_ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "/nonexistent-dir/im4"));
    CU_ASSERT(is_zeroed(&ds));

    load_ok(&ds, dir, "im4", abs_labels);
    CU_ASSERT_EQUAL(ds.n, 2);
    CU_ASSERT_EQUAL(ds.c, 3);
    CU_ASSERT_EQUAL(ds.h, 2);
    CU_ASSERT_EQUAL(ds.w, 2);
    CU_ASSERT_EQUAL(ds.sample_numel, 12);
    CU_ASSERT_EQUAL(ds.n_classes, 2);
    ct_dataset_close(&ds);
    ct_test_rmtree(tmp);
}

static void test_lut(void)
{
    const char *dir = ct_test_tmpdir();
    write_tiny(dir);
    struct ct_dataset ds;
    load_ok(&ds, dir, "images", "labels");
    size_t bad = 0;
    for (int v = 0; v < 256; v++) {
        float want = reference_norm(v, MEAN, STD);
        /* Bitwise: the point of the table is to match PyTorch exactly. */
        if (memcmp(&ds.lut[0][v], &want, sizeof want) != 0) {
            if (bad < 5)
                fprintf(stderr, "\n  lut[%d] = %.9g, want %.9g", v, (double)ds.lut[0][v],
                        (double)want);
            bad++;
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* And the table is the normalization, not something else that happens
     * to agree with the helper above. */
    CU_ASSERT(fabs(ds.lut[0][0] - (0.0 - MEAN) / STD) < 1e-6);
    CU_ASSERT(fabs(ds.lut[0][255] - (1.0 - MEAN) / STD) < 1e-6);
    ct_dataset_close(&ds);

    CU_ASSERT_EQUAL(ct_test_open_idx(&ds, dir, "images", "labels", MEAN, 0.0, NULL), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "std"));
    CU_ASSERT(is_zeroed(&ds));
    CU_ASSERT_EQUAL(ct_test_open_idx(&ds, dir, "images", "labels", MEAN, -1.0, NULL), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_test_open_idx(&ds, dir, "images", "labels", MEAN, NAN, NULL), CT_EINVAL);
    ct_test_rmtree(dir);
}

static void test_gather(void)
{
    const char *dir = ct_test_tmpdir();
    write_tiny(dir);
    struct ct_dataset ds;
    load_ok(&ds, dir, "images", "labels");

    const uint32_t idx[] = {4, 0, 2, 2};
    enum { B = 4 };
    float x[B * TINY_S], want[B * TINY_S];
    int32_t y[B];
    memset(x, 0xFF, sizeof x);
    ct_dataset_gather(&ds, idx, B, 0, x, y);
    for (int i = 0; i < B; i++) {
        for (int k = 0; k < TINY_S; k++)
            want[i * TINY_S + k] = reference_norm(tiny_images[idx[i] * TINY_S + k], MEAN, STD);
        CU_ASSERT_EQUAL(y[i], tiny_labels[idx[i]]);
    }
    CT_ASSERT_CLOSE("gather x", x, want, B * TINY_S, 0.0, 0.0);

    float xr[3 * TINY_S + 1], wantr[3 * TINY_S];
    int32_t yr[3 + 1];
    xr[3 * TINY_S] = 42.0f; /* sentinels: nothing is written past n samples */
    yr[3] = 42;
    ct_dataset_gather_range(&ds, 1, 3, xr, yr);
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < TINY_S; k++)
            wantr[i * TINY_S + k] = reference_norm(tiny_images[(1 + i) * TINY_S + k], MEAN, STD);
        CU_ASSERT_EQUAL(yr[i], tiny_labels[1 + i]);
    }
    CT_ASSERT_CLOSE("gather_range x", xr, wantr, 3 * TINY_S, 0.0, 0.0);
    CU_ASSERT_EQUAL(xr[3 * TINY_S], 42.0f);
    CU_ASSERT_EQUAL(yr[3], 42);

    /* An empty gather touches nothing. */
    ct_dataset_gather(&ds, idx, 0, 0, NULL, NULL);
    ct_dataset_gather_range(&ds, TINY_N, 0, NULL, NULL);
    ct_dataset_close(&ds);
    ct_test_rmtree(dir);
}

static void test_count_mismatch(void)
{
    const char *dir = ct_test_tmpdir();
    write_tiny(dir);
    const uint32_t ldims[] = {TINY_N - 1};
    write_idx(dir, "labels4", 1, ldims, tiny_labels, TINY_N - 1);
    struct ct_dataset ds;
    memset(&ds, 0xA5, sizeof ds);
    int rc = ct_test_open_idx(&ds, dir, "images", "labels4", MEAN, STD, NULL);
    const char *msg = ct_error_message();
    CU_ASSERT_EQUAL(rc, CT_EFORMAT);
    CU_ASSERT(is_zeroed(&ds));
    char want[1200];
    snprintf(want, sizeof want, "%s/labels4: 4 labels but %s/images has 5 images", dir, dir);
    if (!strstr(msg, want))
        fprintf(stderr, "\n  got \"%s\"\n  want \"%s\"\n", msg, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
    ct_test_rmtree(dir);
}

static void test_bad_ranks(void)
{
    const char *dir = ct_test_tmpdir();
    write_tiny(dir);
    /* Labels shaped like images. */
    const uint32_t l3[] = {TINY_N, 1, 1};
    write_idx(dir, "labels3", 3, l3, tiny_labels, TINY_N);
    struct ct_dataset ds;
    int rc = ct_test_open_idx(&ds, dir, "images", "labels3", MEAN, STD, NULL);
    CU_ASSERT_EQUAL(rc, CT_EFORMAT);
    CU_ASSERT(is_zeroed(&ds));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "labels3"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "rank 3"));

    /* Images that are flat vectors. */
    const uint32_t i2[] = {TINY_N, TINY_S};
    write_idx(dir, "images2", 2, i2, tiny_images, sizeof tiny_images);
    rc = ct_test_open_idx(&ds, dir, "images2", "labels", MEAN, STD, NULL);
    CU_ASSERT_EQUAL(rc, CT_EFORMAT);
    CU_ASSERT(is_zeroed(&ds));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "images2"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "rank 2"));

    /* A missing labels file, after the images loaded fine: nothing leaks. */
    rc = ct_test_open_idx(&ds, dir, "images", "no-such-labels", MEAN, STD, NULL);
    CU_ASSERT_EQUAL(rc, CT_ENOENT);
    CU_ASSERT(is_zeroed(&ds));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "no-such-labels"));
    ct_test_rmtree(dir);
}

static void test_fashion_mnist_t10k(void)
{
    const char *im = FMNIST_DIR "/t10k-images-idx3-ubyte.gz";
    if (access(im, R_OK) != 0) {
        printf("\n  note: %s not found, skipped\n", im);
        return;
    }
    struct ct_dataset ds;
    load_ok(&ds, FMNIST_DIR, "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz");
    CU_ASSERT_EQUAL(ds.n, 10000);
    CU_ASSERT_EQUAL(ds.c, 1);
    CU_ASSERT_EQUAL(ds.h, 28);
    CU_ASSERT_EQUAL(ds.w, 28);
    CU_ASSERT_EQUAL(ds.n_classes, 10);
    ct_dataset_close(&ds);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"shapes", test_shapes},
        {"rank 4 and paths", test_rank4_and_paths},
        {"lut", test_lut},
        {"gather", test_gather},
        {"count mismatch", test_count_mismatch},
        {"bad ranks", test_bad_ranks},
        {"fashion-mnist t10k", test_fashion_mnist_t10k},
        {NULL, NULL},
    };
    return ct_test_run("dataset", cases);
}
