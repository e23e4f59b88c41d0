/* Unit tests for the CIFAR-10 binary batch reader (src/data/cifar.c).
 *
 * Batch files are written byte by byte into a temporary directory: records
 * of a label byte and 3x32x32 pixel bytes (red, green, blue planes), several
 * files of different record counts opened as one data set through
 * ct_dataset_open. Checked: the shape, the labels, that sample(i) is record
 * i's pixel bytes in place (across file boundaries), the NCHW gather, and
 * every refusal (bad size, bad label, a labels file given, missing files,
 * too many files), each by its code and a message naming the file and the
 * reason. This is not a test of the gathers themselves (test_dataset.c).
 */
#include "core/error.h"
#include "data/dataset.h"

#include "ct_test.h"

#include <stdint.h>

#define REC 3073
#define PIX 3072

static char tmp[256];

static const char *tpath(const char *name) { return ct_test_path(tmp, name); }

/* Pixel k of global record r: a pattern that differs between records. */
static uint8_t pixel(size_t r, size_t k)
{
    return (uint8_t)(r * 131 + k * 7 + (k >> 10) * 3);
}

static uint8_t label_of(size_t r)
{
    return (uint8_t)(r * 7 % 10);
}

/* Writes `n` records (global indices first..first+n-1), then `extra` bytes. */
static void write_batch(const char *name, size_t first, size_t n, size_t extra)
{
    uint8_t *b = calloc(n * REC + extra + 1, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    for (size_t i = 0; i < n; i++) {
        b[i * REC] = label_of(first + i);
        for (size_t k = 0; k < PIX; k++)
            b[i * REC + 1 + k] = pixel(first + i, k);
    }
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath(name), b, n * REC + extra), 0);
    free(b);
}

static int open_cifar(struct ct_dataset *ds, const char *dir, const char *images, const char *labels)
{
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = CT_DATA_FORMAT_CIFAR10;
    p.dir = dir;
    p.images = images;
    p.labels = labels;
    ct_error_clear();
    int rc = ct_dataset_open(ds, &p);
    if (rc)
        fprintf(stderr, "\n  %s\n", ct_error_message());
    return rc;
}

static void expect_fail(const char *images, const char *labels, int code, const char *const *phrases)
{
    struct ct_dataset ds;
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = CT_DATA_FORMAT_CIFAR10;
    p.dir = tmp;
    p.images = images;
    p.labels = labels;
    ct_error_clear();
    int rc = ct_dataset_open(&ds, &p);
    const char *msg = ct_error_message();
    if (rc != code)
        fprintf(stderr, "\n  %s: got %s, want %s: %s\n", images, ct_err_name(rc), ct_err_name(code),
                msg);
    CU_ASSERT_EQUAL(rc, code);
    for (const char *const *ph = phrases; *ph; ph++) {
        if (!strstr(msg, *ph))
            fprintf(stderr, "\n  message lacks \"%s\": %s\n", *ph, msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, *ph));
    }
    static const struct ct_dataset zero;
    CU_ASSERT(memcmp(&ds, &zero, sizeof ds) == 0);
    if (rc == 0)
        ct_dataset_close(&ds);
}

#define EXPECT_FAIL(images, labels, code, ...)                  \
    do {                                                        \
        const char *const phrases_[] = {__VA_ARGS__, NULL};     \
        expect_fail((images), (labels), (code), phrases_);      \
    } while (0)

/* Three files of 3, 5 and 1 records: one data set of 9. */
static void test_three_files(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    write_batch("a.bin", 0, 3, 0);
    write_batch("b.bin", 3, 5, 0);
    write_batch("c.bin", 8, 1, 0);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_cifar(&ds, tmp, "a.bin, b.bin ,c.bin", NULL), 0);
    CU_ASSERT_EQUAL(ds.format, CT_DATA_FORMAT_CIFAR10);
    CU_ASSERT_PTR_EQUAL(ds.ops, &ct_dataset_cifar10_ops);
    CU_ASSERT_EQUAL(ds.n, 9);
    CU_ASSERT_EQUAL(ds.c, 3);
    CU_ASSERT_EQUAL(ds.h, 32);
    CU_ASSERT_EQUAL(ds.w, 32);
    CU_ASSERT_EQUAL(ds.sample_numel, PIX);
    CU_ASSERT_EQUAL(ds.targets, 1);
    CU_ASSERT_EQUAL(ds.n_classes, 10);
    CU_ASSERT_EQUAL(ds.dtype, CT_DATA_U8);
    CU_ASSERT_EQUAL(ds.layout, CT_DATA_LAYOUT_NCHW);
    CU_ASSERT_EQUAL_FATAL(ds.n_files, 3);
    CU_ASSERT_STRING_EQUAL(ds.files[0], tpath("a.bin"));
    CU_ASSERT_STRING_EQUAL(ds.files[1], tpath("b.bin"));
    CU_ASSERT_STRING_EQUAL(ds.files[2], tpath("c.bin"));
    for (size_t i = 0; i < 9; i++) {
        CU_ASSERT_EQUAL(ds.y[i], label_of(i));
        const uint8_t *s = ds.ops->sample(&ds, i);
        int bad = 0;
        for (size_t k = 0; k < PIX; k++)
            bad += s[k] != pixel(i, k);
        if (bad)
            fprintf(stderr, "\n  sample %zu: %d bytes differ\n", i, bad);
        CU_ASSERT_EQUAL(bad, 0);
        /* within a file, records lie 3073 bytes apart (in place, no copy) */
        if (i != 0 && i != 3 && i != 8)
            CU_ASSERT_PTR_EQUAL(s, (const uint8_t *)ds.ops->sample(&ds, i - 1) + REC);
    }
    /* the gather: red plane, then green, then blue (NCHW) */
    float *x = ct_test_floats(2 * PIX);
    int32_t y[2];
    ct_dataset_gather_range(&ds, 2, 2, x, y);
    CU_ASSERT_EQUAL(y[0], label_of(2));
    CU_ASSERT_EQUAL(y[1], label_of(3));
    int bad = 0;
    for (size_t i = 0; i < 2; i++)
        for (size_t k = 0; k < PIX; k++)
            bad += x[i * PIX + k] != (float)pixel(2 + i, k) / 255.0f;
    CU_ASSERT_EQUAL(bad, 0);
    free(x);
    ct_dataset_close(&ds);

    /* one file; labels "" is as good as none; an absolute path */
    CU_ASSERT_EQUAL_FATAL(open_cifar(&ds, NULL, tpath("b.bin"), ""), 0);
    CU_ASSERT_EQUAL(ds.n, 5);
    CU_ASSERT_EQUAL(ds.y[4], label_of(7));
    CU_ASSERT_EQUAL(((const uint8_t *)ds.ops->sample(&ds, 4))[100], pixel(7, 100));
    ct_dataset_close(&ds);
    ct_test_rmtree(tmp);
}

/* Sixteen files of one record each: the most a data set takes; and sample()
 * finds each one. */
static void test_sixteen_files(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    char list[512] = "";
    for (int f = 0; f < CT_DATA_MAX_FILES; f++) {
        char name[16];
        snprintf(name, sizeof name, "f%d.bin", f);
        write_batch(name, (size_t)f, 1, 0);
        strcat(list, f ? "," : "");
        strcat(list, name);
    }
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_cifar(&ds, tmp, list, NULL), 0);
    CU_ASSERT_EQUAL(ds.n, CT_DATA_MAX_FILES);
    CU_ASSERT_EQUAL(ds.n_files, CT_DATA_MAX_FILES);
    for (size_t i = 0; i < CT_DATA_MAX_FILES; i++) {
        CU_ASSERT_EQUAL(((const uint8_t *)ds.ops->sample(&ds, i))[5], pixel(i, 5));
        CU_ASSERT_EQUAL(ds.y[i], label_of(i));
    }
    ct_dataset_close(&ds);
    strcat(list, ",f0.bin");
    EXPECT_FAIL(list, NULL, CT_ERANGE, "more than 16 files");
    ct_test_rmtree(tmp);
}

static void test_bad_size(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    write_batch("ok.bin", 0, 2, 0);
    write_batch("odd.bin", 0, 2, 5);
    write_batch("empty.bin", 0, 0, 0);
    write_batch("c100.bin", 0, 0, 3074 * 3); /* CIFAR-100's 3074-byte records */
    EXPECT_FAIL("ok.bin,odd.bin", NULL, CT_EFORMAT, tpath("odd.bin: 6151 bytes"), "3073-byte",
                "2 whole records and 5 bytes over");
    EXPECT_FAIL("empty.bin", NULL, CT_EFORMAT, tpath("empty.bin: 0 bytes"), "non-zero");
    EXPECT_FAIL("c100.bin", NULL, CT_EFORMAT, tpath("c100.bin: 9222 bytes"));
    EXPECT_FAIL("ok.bin,missing.bin", NULL, CT_ENOENT, tpath("missing.bin: "));
    ct_test_rmtree(tmp);
}

static void test_bad_label(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    write_batch("a.bin", 0, 2, 0);
    write_batch("b.bin", 2, 6, 0);
    size_t len;
    uint8_t *b = ct_test_read_file(tpath("b.bin"), &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    b[4 * REC] = 10;
    b[5 * REC] = 255;
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("b.bin"), b, len), 0);
    free(b);
    EXPECT_FAIL("a.bin,b.bin", NULL, CT_EFORMAT, tpath("b.bin: record 4 "), "byte offset 12292",
                "label 10", "expected 0..9");
    ct_test_rmtree(tmp);
}

static void test_bad_params(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    write_batch("a.bin", 0, 1, 0);
    EXPECT_FAIL("a.bin", "labels.bin", CT_EINVAL,
                "data.train_labels/test_labels must be empty for cifar10", "'labels.bin'");
    EXPECT_FAIL("a.bin,,a.bin", NULL, CT_EINVAL, "an empty file name");
    EXPECT_FAIL("", NULL, CT_EINVAL, "no images file");
    /* format auto cannot tell a batch file: it says to name the format */
    struct ct_dataset ds;
    struct ct_dataset_params p = ct_dataset_default_params();
    p.dir = tmp;
    p.images = "a.bin";
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "data.format = cifar10"));
    ct_test_rmtree(tmp);
}

/* A node-shared open agrees its status once through ready(); a failure on
 * another rank releases the mapped files here. */
static int ready_calls, ready_fail;

static int fake_ready(void *ctx, int rc)
{
    (void)ctx;
    ready_calls++;
    if (rc == 0 && ready_fail)
        return ct_error_set(CT_EIO, "rank 1: another rank failed");
    return rc;
}

static void test_shared_status(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    write_batch("a.bin", 0, 2, 0);
    write_batch("b.bin", 2, 1, 0);
    const struct ct_shared_alloc sh = {.ready = fake_ready};
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = CT_DATA_FORMAT_CIFAR10;
    p.dir = tmp;
    p.images = "a.bin,b.bin";
    p.shared = &sh;
    struct ct_dataset ds;
    ready_calls = 0, ready_fail = 0;
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), 0);
    CU_ASSERT_EQUAL(ready_calls, 1);
    CU_ASSERT_EQUAL(ds.n, 3);
    ct_dataset_close(&ds);
    ready_calls = 0, ready_fail = 1;
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), CT_EIO);
    CU_ASSERT_EQUAL(ready_calls, 1);
    ready_calls = 0, ready_fail = 0;
    p.images = "a.bin,missing.bin";
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), CT_ENOENT);
    CU_ASSERT_EQUAL(ready_calls, 1);
    ct_test_rmtree(tmp);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"three files of 3, 5 and 1 records", test_three_files},
        {"sixteen files, and seventeen", test_sixteen_files},
        {"file sizes", test_bad_size},
        {"label bytes", test_bad_label},
        {"labels key, empty items, format auto", test_bad_params},
        {"node-shared open: one agreed status", test_shared_status},
        {NULL, NULL},
    };
    return ct_test_run("cifar", cases);
}
