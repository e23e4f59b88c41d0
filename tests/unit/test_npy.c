/* Unit tests for the .npy reader: the header parser (src/data/npy.c) and the
 * npy format of the data set interface (src/data/npy_dataset.c).
 *
 * Two sources of files: the ones NumPy itself wrote (tests/fixtures/npy/,
 * make_npy.py beside them: the three format versions, the layouts, the
 * label dtypes, and the refusals as numpy writes them: Fortran order,
 * big-endian, object, float64), and files this test writes byte by byte
 * into a temporary directory for every malformed header and mismatch numpy
 * would never write. Every refusal checks the code and that the message
 * names the file and the reason. Opening goes through ct_dataset_open, so
 * the gathers (layout to NCHW) are checked on the real storage too.
 */
#include "core/error.h"
#include "data/dataset.h"
#include "data/npy.h"

#include "ct_test.h"

#include <limits.h>
#include <stdint.h>

#define FIX CT_FIXTURE_DIR "/npy"

static char tmp[256]; /* this test's directory, made per test */

static void tmp_make(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
}

/* A path in the temporary directory (rotating static buffers). */
static const char *tpath(const char *name) { return ct_test_path(tmp, name); }

/* Writes dir/name: the .npy preamble of version `major`, the header text
 * (padded as numpy pads when `pad`: spaces, then '\n', to a multiple of 64
 * bytes; as it is otherwise), then the payload. */
static void write_npy_text(const char *name, int major, const char *text, int pad,
                           const void *payload, size_t len)
{
    const size_t pre = major == 1 ? 10 : 12, tl = strlen(text);
    size_t hlen = tl;
    if (pad)
        hlen = (pre + tl + 1 + 63) / 64 * 64 - pre;
    uint8_t *b = malloc(pre + hlen + len + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    memcpy(b, "\x93NUMPY", 6);
    b[6] = (uint8_t)major;
    b[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        b[8 + i] = (uint8_t)(hlen >> (8 * i));
    memcpy(b + pre, text, tl);
    if (pad) {
        memset(b + pre + tl, ' ', hlen - tl - 1);
        b[pre + hlen - 1] = '\n';
    }
    if (len)
        memcpy(b + pre + hlen, payload, len);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath(name), b, pre + hlen + len), 0);
    free(b);
}

/* numpy's header for descr and shape (fortran_order False), version 1.0. */
static void write_npy(const char *name, const char *descr, const char *shape, const void *payload,
                      size_t len)
{
    char text[256];
    snprintf(text, sizeof text, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr,
             shape);
    write_npy_text(name, 1, text, 1, payload, len);
}

static uint8_t u8_at(size_t i)
{
    return (uint8_t)(i * 7 % 256); /* make_npy.py's u8() */
}

static int open_npy(struct ct_dataset *ds, const char *dir, const char *images, const char *labels,
                    enum ct_data_layout layout)
{
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = CT_DATA_FORMAT_NPY;
    p.layout = layout;
    p.dir = dir;
    p.images = images;
    p.labels = labels;
    ct_error_clear();
    int rc = ct_dataset_open(ds, &p);
    if (rc != 0)
        fprintf(stderr, "\n  %s\n", ct_error_message());
    return rc;
}

/* ct_dataset_open must fail with `code`, leave ds zeroed, and say every
 * NULL-terminated phrase (the first: the file). */
static void expect_fail(const char *dir, const char *images, const char *labels,
                        enum ct_data_layout layout, int code, const char *const *phrases)
{
    struct ct_dataset ds;
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = CT_DATA_FORMAT_NPY;
    p.layout = layout;
    p.dir = dir;
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

#define EXPECT_FAIL(dir, images, labels, layout, code, ...)                 \
    do {                                                                    \
        const char *const phrases_[] = {__VA_ARGS__, NULL};                 \
        expect_fail((dir), (images), (labels), (layout), (code), phrases_); \
    } while (0)

/* The parser alone on a buffer must fail with CT_EFORMAT and these phrases. */
static void expect_parse_fail(const uint8_t *buf, size_t len, const char *const *phrases)
{
    struct ct_npy_header h;
    memset(&h, 0xA5, sizeof h);
    ct_error_clear();
    int rc = ct_npy_parse_header("buf.npy", buf, len, &h);
    const char *msg = ct_error_message();
    CU_ASSERT_EQUAL(rc, CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "buf.npy: "));
    for (const char *const *ph = phrases; *ph; ph++) {
        if (!strstr(msg, *ph))
            fprintf(stderr, "\n  message lacks \"%s\": %s\n", *ph, msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, *ph));
    }
    static const struct ct_npy_header zero;
    CU_ASSERT(memcmp(&h, &zero, sizeof h) == 0);
}

/* A v1 header buffer with `text` exactly as the header (no padding). */
static size_t header_buf(uint8_t *b, const char *text)
{
    const size_t tl = strlen(text);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)tl;
    b[9] = (uint8_t)(tl >> 8);
    memcpy(b + 10, text, tl);
    return 10 + tl;
}

#define EXPECT_PARSE_FAIL(text, ...)                                  \
    do {                                                              \
        const char *const phrases_[] = {__VA_ARGS__, NULL};           \
        uint8_t b_[512];                                              \
        expect_parse_fail(b_, header_buf(b_, (text)), phrases_);      \
    } while (0)

/* ------------------------------------------------------------ numpy's files */

static void check_u8_nhw(const char *images)
{
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_npy(&ds, FIX, images, "labels_u1.npy", CT_DATA_LAYOUT_AUTO), 0);
    CU_ASSERT_EQUAL(ds.format, CT_DATA_FORMAT_NPY);
    CU_ASSERT_EQUAL(ds.n, 3);
    CU_ASSERT_EQUAL(ds.c, 1);
    CU_ASSERT_EQUAL(ds.h, 4);
    CU_ASSERT_EQUAL(ds.w, 5);
    CU_ASSERT_EQUAL(ds.sample_numel, 20);
    CU_ASSERT_EQUAL(ds.dtype, CT_DATA_U8);
    CU_ASSERT_EQUAL(ds.layout, CT_DATA_LAYOUT_NCHW);
    CU_ASSERT_EQUAL(ds.targets, 1);
    CU_ASSERT_EQUAL(ds.n_classes, 8);
    CU_ASSERT_EQUAL(ds.y[0], 3);
    CU_ASSERT_EQUAL(ds.y[1], 0);
    CU_ASSERT_EQUAL(ds.y[2], 7);
    CU_ASSERT_EQUAL_FATAL(ds.n_files, 2);
    char want[512];
    snprintf(want, sizeof want, "%s/%s", FIX, images);
    CU_ASSERT_STRING_EQUAL(ds.files[0], want);
    CU_ASSERT_STRING_EQUAL(ds.files[1], FIX "/labels_u1.npy");
    /* sample(i): the stored bytes, in place, one after the other. */
    const uint8_t *s0 = ds.ops->sample(&ds, 0);
    for (size_t i = 0; i < 3; i++) {
        const uint8_t *s = ds.ops->sample(&ds, i);
        CU_ASSERT_PTR_EQUAL(s, s0 + i * 20);
        int bad = 0;
        for (size_t k = 0; k < 20; k++)
            bad += s[k] != u8_at(i * 20 + k);
        CU_ASSERT_EQUAL(bad, 0);
    }
    ct_dataset_close(&ds);
}

static void test_numpy_versions(void)
{
    check_u8_nhw("u8_nhw_v1.npy");
    check_u8_nhw("u8_nhw_v2.npy");
    check_u8_nhw("u8_nhw_v3.npy");
    struct ct_npy_header h;
    uint64_t size;
    CU_ASSERT_EQUAL_FATAL(ct_npy_read_header(FIX "/u8_nhw_v2.npy", &h, &size), 0);
    CU_ASSERT_EQUAL(h.major, 2);
    CU_ASSERT_EQUAL(h.data_offset, 128);
    CU_ASSERT_EQUAL(size, 188);
    CU_ASSERT_EQUAL_FATAL(ct_npy_read_header(FIX "/u8_nhw_v3.npy", &h, &size), 0);
    CU_ASSERT_EQUAL(h.major, 3);
    CU_ASSERT_EQUAL_FATAL(ct_npy_read_header(FIX "/u8_nhw_v1.npy", &h, &size), 0);
    CU_ASSERT_EQUAL(h.major, 1);
    CU_ASSERT_EQUAL(h.minor, 0);
    CU_ASSERT_STRING_EQUAL(h.descr, "|u1");
    CU_ASSERT_EQUAL(h.dtype, CT_NPY_U8);
    CU_ASSERT_EQUAL(h.itemsize, 1);
    CU_ASSERT_EQUAL(h.ndim, 3);
    CU_ASSERT_EQUAL(h.shape[0], 3);
    CU_ASSERT_EQUAL(h.shape[1], 4);
    CU_ASSERT_EQUAL(h.shape[2], 5);
    CU_ASSERT_EQUAL(h.numel, 60);
    CU_ASSERT_EQUAL(h.data_bytes, 60);
    CU_ASSERT_EQUAL(h.data_offset, 128);
}

/* Format auto picks npy by the magic; the labels path is absolute. */
static void test_auto_format_and_paths(void)
{
    struct ct_dataset ds;
    struct ct_dataset_params p = ct_dataset_default_params();
    p.dir = FIX;
    p.images = "u8_nhw_v1.npy";
    p.labels = FIX "/labels_i4.npy";
    int rc = ct_dataset_open(&ds, &p);
    if (rc)
        fprintf(stderr, "\n  %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(ds.format, CT_DATA_FORMAT_NPY);
    CU_ASSERT_PTR_EQUAL(ds.ops, &ct_dataset_npy_ops);
    CU_ASSERT_STRING_EQUAL(ds.files[0], FIX "/u8_nhw_v1.npy");
    CU_ASSERT_STRING_EQUAL(ds.files[1], FIX "/labels_i4.npy");
    ct_dataset_close(&ds);
}

/* Our writer makes numpy's bytes: the refusal tests below write what numpy
 * would, except for the one thing each one breaks. */
static void test_writer_matches_numpy(void)
{
    tmp_make();
    uint8_t payload[60];
    for (size_t i = 0; i < 60; i++)
        payload[i] = u8_at(i);
    write_npy("mine.npy", "|u1", "(3, 4, 5)", payload, sizeof payload);
    size_t la, lb;
    uint8_t *a = ct_test_read_file(tpath("mine.npy"), &la);
    uint8_t *b = ct_test_read_file(FIX "/u8_nhw_v1.npy", &lb);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(la, lb);
    CU_ASSERT(la == lb && memcmp(a, b, la) == 0);
    free(a);
    free(b);
    ct_test_rmtree(tmp);
}

/* The samples are the file's pages, not a copy: sample 0 lies in a
 * mapping of the images file (/proc/self/maps). */
static void test_mapped_not_copied(void)
{
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_npy(&ds, FIX, "u8_nhwc.npy", "labels_u1.npy", CT_DATA_LAYOUT_AUTO), 0);
    const uintptr_t at = (uintptr_t)ds.ops->sample(&ds, 0);
    FILE *f = fopen("/proc/self/maps", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    char line[1024];
    int found = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && at >= lo && at < hi)
            found = strstr(line, "/npy/u8_nhwc.npy") != NULL;
    }
    fclose(f);
    CU_ASSERT(found);
    ct_dataset_close(&ds);
}

/* ------------------------------------------------------------ layouts */

static void test_layout_nhwc_auto(void)
{
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_npy(&ds, FIX, "u8_nhwc.npy", "labels_u1.npy", CT_DATA_LAYOUT_AUTO), 0);
    CU_ASSERT_EQUAL(ds.c, 3);
    CU_ASSERT_EQUAL(ds.h, 2);
    CU_ASSERT_EQUAL(ds.w, 4);
    CU_ASSERT_EQUAL(ds.sample_numel, 24);
    CU_ASSERT_EQUAL(ds.layout, CT_DATA_LAYOUT_NHWC);
    /* The gather hands out NCHW: x[c][k] = stored[k * C + c] / 255. */
    float x[3 * 24], want[3 * 24];
    int32_t y[3];
    ct_dataset_gather_range(&ds, 0, 3, x, y);
    for (size_t i = 0; i < 3; i++)
        for (size_t c = 0; c < 3; c++)
            for (size_t k = 0; k < 8; k++)
                want[i * 24 + c * 8 + k] = (float)u8_at(i * 24 + k * 3 + c) / 255.0f;
    CT_ASSERT_CLOSE("nhwc gather", x, want, 3 * 24, 0, 0);
    CU_ASSERT_EQUAL(y[0], 3);
    CU_ASSERT_EQUAL(y[2], 7);
    ct_dataset_close(&ds);
}

static void test_layout_nchw_auto_and_explicit(void)
{
    struct ct_dataset ds;
    /* (2, 3, 4, 5): a last axis of 5 is not channels. */
    CU_ASSERT_EQUAL_FATAL(open_npy(&ds, FIX, "u8_nchw.npy", NULL, CT_DATA_LAYOUT_AUTO), 0);
    CU_ASSERT_EQUAL(ds.n, 2);
    CU_ASSERT_EQUAL(ds.c, 3);
    CU_ASSERT_EQUAL(ds.h, 4);
    CU_ASSERT_EQUAL(ds.w, 5);
    CU_ASSERT_EQUAL(ds.layout, CT_DATA_LAYOUT_NCHW);
    float x[2 * 60];
    ct_dataset_gather_range(&ds, 0, 2, x, NULL);
    int bad = 0;
    for (size_t k = 0; k < 120; k++)
        bad += x[k] != (float)u8_at(k) / 255.0f;
    CU_ASSERT_EQUAL(bad, 0);
    ct_dataset_close(&ds);
    /* (3, 2, 4, 3) taken as NCHW when the layout says so: 2 channels. */
    CU_ASSERT_EQUAL_FATAL(open_npy(&ds, FIX, "u8_nhwc.npy", NULL, CT_DATA_LAYOUT_NCHW), 0);
    CU_ASSERT_EQUAL(ds.c, 2);
    CU_ASSERT_EQUAL(ds.h, 4);
    CU_ASSERT_EQUAL(ds.w, 3);
    CU_ASSERT_EQUAL(ds.layout, CT_DATA_LAYOUT_NCHW);
    ct_dataset_close(&ds);
    /* (2, 3, 4, 5) as NHWC: 5 channels, one too many. */
    EXPECT_FAIL(FIX, "u8_nchw.npy", NULL, CT_DATA_LAYOUT_NHWC, CT_EFORMAT, FIX "/u8_nchw.npy: ",
                "(2, 3, 4, 5)", "nhwc", "5 channels", "at most 4");
}

static void test_float32(void)
{
    struct ct_dataset ds;
    /* (3, 2, 2, 3), auto: NHWC, 3 channels of 2x2. */
    CU_ASSERT_EQUAL_FATAL(open_npy(&ds, FIX, "f32_4d.npy", "labels_i8.npy", CT_DATA_LAYOUT_AUTO), 0);
    CU_ASSERT_EQUAL(ds.dtype, CT_DATA_F32);
    CU_ASSERT_EQUAL(ds.layout, CT_DATA_LAYOUT_NHWC);
    CU_ASSERT_EQUAL(ds.c, 3);
    CU_ASSERT_EQUAL(ds.h, 2);
    CU_ASSERT_EQUAL(ds.w, 2);
    const float *s1 = ds.ops->sample(&ds, 1);
    CU_ASSERT_EQUAL(s1[0], 12.0f / 8 - 1);
    CU_ASSERT_PTR_EQUAL(s1, (const float *)ds.ops->sample(&ds, 0) + 12);
    float x[12], want[12];
    int32_t y[1];
    ct_dataset_gather_range(&ds, 2, 1, x, y);
    CU_ASSERT_EQUAL(y[0], 2);
    for (size_t c = 0; c < 3; c++)
        for (size_t k = 0; k < 4; k++)
            want[c * 4 + k] = (float)(24 + k * 3 + c) / 8 - 1;
    CT_ASSERT_CLOSE("f32 nhwc gather", x, want, 12, 0, 0);
    /* labels int64, the largest target 65535 */
    CU_ASSERT_EQUAL(ds.y[0], 65535);
    CU_ASSERT_EQUAL(ds.y[2], 2);
    CU_ASSERT_EQUAL(ds.n_classes, 65536);
    ct_dataset_close(&ds);
    /* nchw: 2 channels of 2x3 */
    CU_ASSERT_EQUAL_FATAL(open_npy(&ds, FIX, "f32_4d.npy", "labels_i4.npy", CT_DATA_LAYOUT_NCHW), 0);
    CU_ASSERT_EQUAL(ds.c, 2);
    CU_ASSERT_EQUAL(ds.h, 2);
    CU_ASSERT_EQUAL(ds.w, 3);
    CU_ASSERT_EQUAL(ds.n_classes, 8);
    ct_dataset_gather_range(&ds, 2, 1, x, y);
    CU_ASSERT_EQUAL(y[0], 7);
    for (size_t k = 0; k < 12; k++)
        want[k] = (float)(24 + k) / 8 - 1;
    CT_ASSERT_CLOSE("f32 nchw gather", x, want, 12, 0, 0);
    ct_dataset_close(&ds);
}

/* (N, H, W) with an explicit layout: one channel either way. */
static void test_nhw_explicit_layout(void)
{
    struct ct_dataset ds;
    for (int l = CT_DATA_LAYOUT_NCHW; l <= CT_DATA_LAYOUT_NHWC; l++) {
        CU_ASSERT_EQUAL_FATAL(open_npy(&ds, FIX, "u8_nhw_v1.npy", NULL, (enum ct_data_layout)l), 0);
        CU_ASSERT_EQUAL(ds.c, 1);
        CU_ASSERT_EQUAL(ds.h, 4);
        CU_ASSERT_EQUAL(ds.w, 5);
        ct_dataset_close(&ds);
    }
}

/* Images alone (`data inspect`, `data stats`): no targets. */
static void test_no_labels(void)
{
    struct ct_dataset ds;
    const char *none[] = {NULL, ""};
    for (int i = 0; i < 2; i++) {
        CU_ASSERT_EQUAL_FATAL(open_npy(&ds, FIX, "u8_nhw_v1.npy", none[i], CT_DATA_LAYOUT_AUTO), 0);
        CU_ASSERT_EQUAL(ds.targets, 0);
        CU_ASSERT_PTR_NULL(ds.y);
        CU_ASSERT_EQUAL(ds.n_classes, 0);
        CU_ASSERT_EQUAL(ds.n_files, 1);
        ct_dataset_close(&ds);
    }
}

/* A node-shared open (params.shared): nothing is allocated through the
 * table, but the status is agreed once through ready(), and a failure on
 * another rank (ready() returns it) releases everything here. */
static int ready_calls, ready_rc_in, ready_fail;

static int fake_ready(void *ctx, int rc)
{
    (void)ctx;
    ready_calls++;
    ready_rc_in = rc;
    if (rc == 0 && ready_fail)
        return ct_error_set(CT_EIO, "rank 1: another rank failed");
    return rc;
}

static int fake_alloc(void *ctx, size_t bytes, void **ptr, int *fill)
{
    (void)ctx, (void)bytes, (void)ptr, (void)fill;
    CU_FAIL("the npy format allocated through the shared table");
    return CT_EINVAL;
}

static void fake_release(void *ctx, void *ptr)
{
    (void)ctx, (void)ptr;
}

static void test_shared_status(void)
{
    const struct ct_shared_alloc sh = {.alloc = fake_alloc, .ready = fake_ready, .release = fake_release};
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = CT_DATA_FORMAT_NPY;
    p.dir = FIX;
    p.images = "f32_4d.npy";
    p.labels = "labels_u1.npy";
    p.shared = &sh;
    struct ct_dataset ds;
    ready_calls = 0, ready_fail = 0;
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), 0);
    CU_ASSERT_EQUAL(ready_calls, 1);
    CU_ASSERT_EQUAL(ready_rc_in, 0);
    ct_dataset_close(&ds);
    /* another rank failed: this one, which succeeded, returns its code */
    ready_calls = 0, ready_fail = 1;
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), CT_EIO);
    CU_ASSERT_EQUAL(ready_calls, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "another rank failed"));
    /* this rank fails: its status goes into ready() */
    ready_calls = 0, ready_fail = 0;
    p.labels = "labels_i8.npy"; /* fine */
    p.images = "fortran.npy";
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), CT_EFORMAT);
    CU_ASSERT_EQUAL(ready_calls, 1);
    CU_ASSERT_EQUAL(ready_rc_in, CT_EFORMAT);
}

/* ------------------------------------------------------------ numpy's refusals */

static void test_numpy_refusals(void)
{
    EXPECT_FAIL(FIX, "fortran.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, FIX "/fortran.npy: ",
                "fortran_order is True");
    EXPECT_FAIL(FIX, "bigendian.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, FIX "/bigendian.npy: ",
                "'>f4'", "big-endian");
    EXPECT_FAIL(FIX, "object.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, FIX "/object.npy: ",
                "'|O'", "object");
    EXPECT_FAIL(FIX, "f64.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, FIX "/f64.npy: ",
                "unsupported dtype '<f8'");
    /* labels as images: rank 1, and images as labels: rank 3 */
    EXPECT_FAIL(FIX, "labels_u1.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT,
                FIX "/labels_u1.npy: ", "images of shape (3,)", "expected (N, H, W)");
    EXPECT_FAIL(FIX, "u8_nhw_v1.npy", "u8_nhw_v2.npy", CT_DATA_LAYOUT_AUTO, CT_EFORMAT,
                FIX "/u8_nhw_v2.npy: ", "labels of shape (3, 4, 5)", "expected (N,)");
    /* float labels, integer images */
    EXPECT_FAIL(FIX, "u8_nhw_v1.npy", "f32_4d.npy", CT_DATA_LAYOUT_AUTO, CT_EFORMAT,
                FIX "/f32_4d.npy: ", "labels of dtype '<f4'", "expected integers");
    EXPECT_FAIL(FIX, "labels_i8.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT,
                FIX "/labels_i8.npy: ", "images of dtype '<i8'");
    /* labels that do not match the images: both files, both counts */
    EXPECT_FAIL(FIX, "u8_nchw.npy", "labels_u1.npy", CT_DATA_LAYOUT_AUTO, CT_EFORMAT,
                FIX "/labels_u1.npy: 3 labels, but " FIX "/u8_nchw.npy has 2 images");
    EXPECT_FAIL(FIX, "missing.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_ENOENT, FIX "/missing.npy: ");
    EXPECT_FAIL(FIX, "u8_nhw_v1.npy", "missing.npy", CT_DATA_LAYOUT_AUTO, CT_ENOENT,
                FIX "/missing.npy: ");
    EXPECT_FAIL(FIX, "u8_nhw_v1.npy,u8_nhw_v2.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EINVAL,
                "only cifar10 takes several");
}

/* ------------------------------------------------------------ our refusals */

static void test_size_mismatch(void)
{
    tmp_make();
    uint8_t p[61] = {0};
    write_npy("short.npy", "|u1", "(3, 4, 5)", p, 59);
    EXPECT_FAIL(tmp, "short.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("short.npy: "),
                "(3, 4, 5)", "needs 60 bytes of data after the 128-byte header, 188 in all",
                "the file has 187 bytes");
    write_npy("long.npy", "|u1", "(3, 4, 5)", p, 61);
    EXPECT_FAIL(tmp, "long.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("long.npy: "),
                "the file has 189 bytes");
    /* A header promising 4 TB in a 128-byte file: refused before mapping
     * or allocating anything. */
    write_npy("huge.npy", "<f4", "(1000000, 1000, 1000)", NULL, 0);
    EXPECT_FAIL(tmp, "huge.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("huge.npy: "),
                "needs 4000000000000 bytes");
    /* element count beyond 64 bits */
    write_npy("over.npy", "|u1", "(4294967296, 4294967296, 2)", NULL, 0);
    EXPECT_FAIL(tmp, "over.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("over.npy: "),
                "(4294967296, 4294967296, 2)", "more bytes than fit in 64 bits");
    write_npy("over8.npy", "<i8", "(2305843009213693952,)", NULL, 0); /* 2^61 x 8 bytes */
    struct ct_npy_header h;
    uint64_t size;
    CU_ASSERT_EQUAL(ct_npy_read_header(tpath("over8.npy"), &h, &size), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "more bytes than fit in 64 bits"));
    ct_test_rmtree(tmp);
}

static void test_bad_shapes(void)
{
    tmp_make();
    uint8_t p[64] = {0};
    write_npy("empty.npy", "|u1", "(0, 4, 5)", NULL, 0);
    EXPECT_FAIL(tmp, "empty.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("empty.npy: "),
                "axis 0 is empty");
    write_npy("emptyw.npy", "|u1", "(2, 4, 0)", NULL, 0);
    EXPECT_FAIL(tmp, "emptyw.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("emptyw.npy: "),
                "axis 2 is empty");
    write_npy("rank2.npy", "|u1", "(4, 5)", p, 20);
    EXPECT_FAIL(tmp, "rank2.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("rank2.npy: "),
                "images of shape (4, 5)");
    write_npy("rank5.npy", "|u1", "(1, 1, 2, 2, 3)", p, 12);
    EXPECT_FAIL(tmp, "rank5.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("rank5.npy: "),
                "images of shape (1, 1, 2, 2, 3)");
    /* auto: a last axis of 6 is not channels, so NCHW with 5 channels */
    write_npy("c5.npy", "|u1", "(1, 5, 2, 6)", p, 60);
    EXPECT_FAIL(tmp, "c5.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("c5.npy: "),
                "5 channels", "a last axis of 1, 3 or 4 is channels");
    /* labels: the count, both files named */
    write_npy("im.npy", "|u1", "(3, 2, 2)", p, 12);
    write_npy("lb4.npy", "|u1", "(4,)", p, 4);
    EXPECT_FAIL(tmp, "im.npy", "lb4.npy", CT_DATA_LAYOUT_AUTO, CT_EFORMAT,
                tpath("lb4.npy: 4 labels, but "), tpath("im.npy has 3 images"));
    write_npy("lb31.npy", "|u1", "(3, 1)", p, 3);
    EXPECT_FAIL(tmp, "im.npy", "lb31.npy", CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("lb31.npy: "),
                "labels of shape (3, 1)");
    ct_test_rmtree(tmp);
}

static void test_bad_labels(void)
{
    tmp_make();
    uint8_t p[12] = {0};
    write_npy("im.npy", "|u1", "(3, 2, 2)", p, 12);
    const int32_t neg[3] = {1, 2, -1};
    write_npy("neg.npy", "<i4", "(3,)", neg, sizeof neg);
    EXPECT_FAIL(tmp, "im.npy", "neg.npy", CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("neg.npy: "),
                "label 2 is -1", "expected 0 <= label < 65536");
    const int64_t big[3] = {0, 65536, 7};
    write_npy("big.npy", "<i8", "(3,)", big, sizeof big);
    EXPECT_FAIL(tmp, "im.npy", "big.npy", CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("big.npy: "),
                "label 1 is 65536");
    const int64_t huge[3] = {(int64_t)1 << 40, 0, 0};
    write_npy("huge.npy", "<i8", "(3,)", huge, sizeof huge);
    EXPECT_FAIL(tmp, "im.npy", "huge.npy", CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("huge.npy: "),
                "label 0 is 1099511627776");
    const int64_t neg8[3] = {0, 0, INT64_MIN};
    write_npy("neg8.npy", "<i8", "(3,)", neg8, sizeof neg8);
    EXPECT_FAIL(tmp, "im.npy", "neg8.npy", CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("neg8.npy: "),
                "label 2 is -9223372036854775808");
    /* '<u1' is uint8 too (numpy writes '|u1') */
    const uint8_t ok[3] = {255, 0, 9};
    write_npy("lt.npy", "<u1", "(3,)", ok, sizeof ok);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_npy(&ds, tmp, "im.npy", "lt.npy", CT_DATA_LAYOUT_AUTO), 0);
    CU_ASSERT_EQUAL(ds.y[0], 255);
    CU_ASSERT_EQUAL(ds.n_classes, 256);
    ct_dataset_close(&ds);
    ct_test_rmtree(tmp);
}

static void test_non_finite(void)
{
    tmp_make();
    float v[4 * 2 * 3];
    for (size_t i = 0; i < 24; i++)
        v[i] = (float)i;
    v[2 * 6 + 4] = NAN;
    write_npy("nan.npy", "<f4", "(4, 2, 3)", v, sizeof v);
    EXPECT_FAIL(tmp, "nan.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("nan.npy: "),
                "sample 2 ", "nan", "element 4", "must be finite");
    v[2 * 6 + 4] = 0;
    v[3 * 6 + 5] = -INFINITY;
    write_npy("inf.npy", "<f4", "(4, 2, 3)", v, sizeof v);
    EXPECT_FAIL(tmp, "inf.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("inf.npy: "),
                "sample 3 ", "-inf");
    /* Past the first scan block (4096 floats): the index is still exact. */
    const size_t n = 3000, s = 4;
    float *big = calloc(n * s, sizeof *big);
    CU_ASSERT_PTR_NOT_NULL_FATAL(big);
    big[2500 * 4 + 1] = INFINITY;
    write_npy("inf2.npy", "<f4", "(3000, 2, 2)", big, n * s * sizeof *big);
    EXPECT_FAIL(tmp, "inf2.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("inf2.npy: "),
                "sample 2500 ", "inf", "element 1 ");
    big[2500 * 4 + 1] = 3e38f; /* large but finite */
    write_npy("fin.npy", "<f4", "(3000, 2, 2)", big, n * s * sizeof *big);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL(open_npy(&ds, tmp, "fin.npy", NULL, CT_DATA_LAYOUT_AUTO), 0);
    ct_dataset_close(&ds);
    free(big);
    /* float32 data must be aligned for in-place use: an exact 61-byte header */
    write_npy_text("odd.npy", 1,
                   "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 1, 1)}\n", 0, v, 4);
    EXPECT_FAIL(tmp, "odd.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("odd.npy: "),
                "offset 71, not a multiple of 4");
    ct_test_rmtree(tmp);
}

static void test_bad_preamble(void)
{
    tmp_make();
    const uint8_t idx[8] = {0, 0, 8, 1, 0, 0, 0, 0};
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("idx.npy"), idx, sizeof idx), 0);
    EXPECT_FAIL(tmp, "idx.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("idx.npy: "),
                "not a .npy file", "found 00 00 08 01 00 00");
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("empty.npy"), "", 0), 0);
    EXPECT_FAIL(tmp, "empty.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("empty.npy: "),
                "found an empty file");
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("cut.npy"), "\x93NUMPY\x01\x00\x76", 9), 0);
    EXPECT_FAIL(tmp, "cut.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("cut.npy: "),
                "cut .npy preamble: 9 bytes");
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("v2cut.npy"), "\x93NUMPY\x02\x00\x76\x00\x00", 11), 0);
    EXPECT_FAIL(tmp, "v2cut.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("v2cut.npy: "),
                "cut .npy preamble: 11 bytes, a version 2.0 preamble is 12");
    /* the header length says more than the file holds */
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("hcut.npy"), "\x93NUMPY\x01\x00\x76\x00{'de", 14), 0);
    EXPECT_FAIL(tmp, "hcut.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("hcut.npy: "),
                "cut .npy header", "ends at byte 128, but there are 14 bytes");
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("hbig.npy"), "\x93NUMPY\x02\x00\x00\x00\x00\x01", 12), 0);
    EXPECT_FAIL(tmp, "hbig.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("hbig.npy: "),
                "header length 16777216", "over the limit");
    const char *versions[] = {"\x93NUMPY\x01\x01", "\x93NUMPY\x04\x00", "\x93NUMPY\x00\x00"};
    const char *said[] = {"version 1.1", "version 4.0", "version 0.0"};
    for (int i = 0; i < 3; i++) {
        uint8_t b[128];
        memcpy(b, versions[i], 8);
        memset(b + 8, ' ', sizeof b - 8);
        CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("ver.npy"), b, sizeof b), 0);
        EXPECT_FAIL(tmp, "ver.npy", NULL, CT_DATA_LAYOUT_AUTO, CT_EFORMAT, tpath("ver.npy: "),
                    said[i], "expected 1.0, 2.0 or 3.0");
    }
    /* a version 2.0 and 3.0 file of our own, parsed like numpy's */
    uint8_t p[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    write_npy_text("v3.npy", 3, "{'shape': (3, 2, 2), 'fortran_order': False, 'descr': '|u1'}", 1,
                   p, 12);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_npy(&ds, tmp, "v3.npy", NULL, CT_DATA_LAYOUT_AUTO), 0);
    CU_ASSERT_EQUAL(ds.n, 3);
    CU_ASSERT_EQUAL(((const uint8_t *)ds.ops->sample(&ds, 2))[3], 12);
    ct_dataset_close(&ds);
    ct_test_rmtree(tmp);
}

/* ------------------------------------------------------------ the parser alone */

static void parse_ok(const char *text, struct ct_npy_header *h)
{
    uint8_t b[512];
    const size_t len = header_buf(b, text);
    ct_error_clear();
    int rc = ct_npy_parse_header("buf.npy", b, len, h);
    if (rc)
        fprintf(stderr, "\n  %s: %s\n", text, ct_error_message());
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_EQUAL(h->data_offset, len);
}

static void test_parser_accepts(void)
{
    struct ct_npy_header h;
    char s[64];
    /* double quotes, any key order, no trailing comma, no spaces */
    parse_ok("{\"shape\":(7,),\"descr\":\"<i4\",\"fortran_order\":False}\n", &h);
    CU_ASSERT_EQUAL(h.ndim, 1);
    CU_ASSERT_EQUAL(h.shape[0], 7);
    CU_ASSERT_EQUAL(h.dtype, CT_NPY_I32);
    CU_ASSERT_EQUAL(h.data_bytes, 28);
    CU_ASSERT_STRING_EQUAL(ct_npy_shape_str(&h, s, sizeof s), "(7,)");
    /* spaces everywhere Python allows them, a trailing comma in the shape */
    parse_ok("  {  'descr'  :  '<f4'  ,  'fortran_order' : False , 'shape' : ( 2 , 3 , ) , }   \n", &h);
    CU_ASSERT_EQUAL(h.ndim, 2);
    CU_ASSERT_EQUAL(h.numel, 6);
    CU_ASSERT_EQUAL(h.itemsize, 4);
    CU_ASSERT_STRING_EQUAL(ct_npy_shape_str(&h, s, sizeof s), "(2, 3)");
    /* a 0-d array (one element) and an empty one */
    parse_ok("{'descr': '<i8', 'fortran_order': False, 'shape': (), }\n", &h);
    CU_ASSERT_EQUAL(h.ndim, 0);
    CU_ASSERT_EQUAL(h.numel, 1);
    CU_ASSERT_EQUAL(h.data_bytes, 8);
    CU_ASSERT_STRING_EQUAL(ct_npy_shape_str(&h, s, sizeof s), "()");
    parse_ok("{'descr': '|u1', 'fortran_order': False, 'shape': (0, 18446744073709551615), }\n", &h);
    CU_ASSERT_EQUAL(h.numel, 0);
    CU_ASSERT_EQUAL(h.shape[1], UINT64_MAX);
    /* 32 axes, and the shape string cut to the buffer */
    char text[256] = "{'descr': '|u1', 'fortran_order': False, 'shape': (";
    for (int i = 0; i < CT_NPY_MAX_DIMS; i++)
        strcat(text, "1, ");
    strcat(text, ")}\n");
    parse_ok(text, &h);
    CU_ASSERT_EQUAL(h.ndim, CT_NPY_MAX_DIMS);
    CU_ASSERT_STRING_EQUAL(ct_npy_shape_str(&h, s, 16), "(1, 1, 1, ...)");
    CU_ASSERT_STRING_EQUAL(ct_npy_shape_str(&h, s, 8), "(...)");
    /* the whole file may follow the header */
    uint8_t b[256];
    size_t len = header_buf(b, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,), }\n");
    memcpy(b + len, "abc", 3);
    CU_ASSERT_EQUAL(ct_npy_parse_header("buf.npy", b, len + 3, &h), 0);
    CU_ASSERT_EQUAL(ct_npy_check_size("buf.npy", &h, len + 3), 0);
    CU_ASSERT_EQUAL(ct_npy_check_size("buf.npy", &h, len + 2), CT_EFORMAT);
}

static void test_parser_refuses(void)
{
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': False, 'shape': (3)}\n",
                      "the shape (3) is not a tuple", "(3,)");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': False, 'shape': (3, -4)}\n",
                      "at byte 64", "expected a dimension", "found '-'");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': False, 'shape': (03,)}\n",
                      "without leading zeros");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': False, 'shape': (3.0,)}\n",
                      "expected ',' or ')' in the shape", "found '.'");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': False, 'shape': [3]}\n",
                      "expected a tuple '(' for the shape", "found '['");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': False, 'shape': (18446744073709551616,)}\n",
                      "does not fit in 64 bits");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': 0, 'shape': (3,)}\n",
                      "expected True or False", "found '0'");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': Falsey, 'shape': (3,)}\n",
                      "expected True or False");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'shape': (3,)}\n", "lacks the key 'fortran_order'");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': False, 'shape': (3,), 'x': 1}\n",
                      "unknown key 'x'");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'descr': '|u1', 'fortran_order': False, 'shape': (3,)}\n",
                      "repeated key 'descr'");
    EXPECT_PARSE_FAIL("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,)}\n",
                      "descr is a list", "structured");
    EXPECT_PARSE_FAIL("{'descr': '|u1\\x', 'fortran_order': False, 'shape': (3,)}\n",
                      "a string without escapes");
    EXPECT_PARSE_FAIL("{'descr': '|u1\", 'fortran_order': False, 'shape': (3,)}\n",
                      "expected ',' or '}' after a value");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': False, 'shape': (3,)}", /* no '\n' */
                      "the final '\\n'");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': False, 'shape': (3,)}\n\n",
                      "spaces and the final '\\n'", "found byte 0x0A");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': False, 'shape': (3,)} x\n",
                      "spaces and the final '\\n'", "found 'x'");
    EXPECT_PARSE_FAIL("{'descr': '|u1',\t'fortran_order': False, 'shape': (3,)}\n",
                      "found byte 0x09");
    EXPECT_PARSE_FAIL("('descr', '|u1')\n", "expected '{'");
    EXPECT_PARSE_FAIL("", "expected '{'", "found the end of the header");
    EXPECT_PARSE_FAIL("{'descr': '<f8', 'fortran_order': False, 'shape': (3,)}\n",
                      "unsupported dtype '<f8'", "'<f4' (float32) or '<f2' (float16)");
    EXPECT_PARSE_FAIL("{'descr': '>i8', 'fortran_order': False, 'shape': (3,)}\n", "big-endian",
                      "astype('<i8')");
    EXPECT_PARSE_FAIL("{'descr': 'O', 'fortran_order': False, 'shape': (3,)}\n", "object array");
    EXPECT_PARSE_FAIL("{'descr': '|u1', 'fortran_order': True, 'shape': (3, 2)}\n",
                      "fortran_order is True");
    EXPECT_PARSE_FAIL("{'descr': 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa', 'fortran_order': "
                      "False, 'shape': (3,)}\n",
                      "a string longer than 31 characters");
    char text[256] = "{'descr': '|u1', 'fortran_order': False, 'shape': (";
    for (int i = 0; i <= CT_NPY_MAX_DIMS; i++)
        strcat(text, "1,");
    strcat(text, ")}\n");
    EXPECT_PARSE_FAIL(text, "more than 32 axes");
    /* preamble */
    const uint8_t nul[1] = {0};
    const char *const magic[] = {"not a .npy file", "found an empty file", NULL};
    expect_parse_fail(nul, 0, magic);
    const char *const cut[] = {"cut .npy header", NULL};
    uint8_t b[128];
    size_t len = header_buf(b, "{'descr': '|u1', 'fortran_order': False, 'shape': (3,)}\n");
    expect_parse_fail(b, len - 1, cut);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"numpy's files, versions 1.0, 2.0, 3.0", test_numpy_versions},
        {"format auto, absolute labels path", test_auto_format_and_paths},
        {"our writer makes numpy's bytes", test_writer_matches_numpy},
        {"images are mapped, not copied", test_mapped_not_copied},
        {"layout auto: NHWC", test_layout_nhwc_auto},
        {"layout auto and explicit: NCHW", test_layout_nchw_auto_and_explicit},
        {"float32 images, int64/int32 labels", test_float32},
        {"(N, H, W) with an explicit layout", test_nhw_explicit_layout},
        {"images without labels", test_no_labels},
        {"node-shared open: one agreed status", test_shared_status},
        {"numpy's refusals", test_numpy_refusals},
        {"size does not match the shape", test_size_mismatch},
        {"bad shapes", test_bad_shapes},
        {"bad labels", test_bad_labels},
        {"non-finite float32", test_non_finite},
        {"bad preamble", test_bad_preamble},
        {"parser accepts", test_parser_accepts},
        {"parser refuses", test_parser_refuses},
        {NULL, NULL},
    };
    return ct_test_run("npy", cases);
}
