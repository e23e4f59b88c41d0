/* Unit tests for the data tools' library (src/data/stats.c, tokenize.c,
 * describe.c): what `ctrain-dist data stats|inspect|tokenize` print, on
 * small synthetic data sets written into a temporary directory.
 *
 * Checked: the exact sum (ct_xsum) on sums that naive double summation gets
 * wrong, ties rounded to even across the partials, order independence; the
 * per-channel mean and population std of uint8 (v/255) and float32 images,
 * NCHW and NHWC, against a float64 two-pass reference; a non-finite value
 * refused naming the sample; the class histogram; a token shard's counts
 * (total, largest, distinct, the most frequent with ties to the smaller
 * token); tokenize of two text files into a shard read back through the
 * tokens reader, and its refusals (empty texts, a missing file, a
 * directory); the IDX header's image shape; the header description of a
 * small IDX file.
 */
#include "core/error.h"
#include "data/dataset.h"
#include "data/describe.h"
#include "data/stats.h"
#include "data/tokenize.h"
#include "data/tokens.h"

#include "ct_test.h"

static char tmp[256];

static const char *tpath(const char *name) { return ct_test_path(tmp, name); }

static double xsum_of(const double *v, int n)
{
    struct ct_xsum s;
    ct_xsum_init(&s);
    for (int i = 0; i < n; i++)
        ct_xsum_add(&s, v[i]);
    return ct_xsum_value(&s);
}

/* Sums naive left-to-right double addition gets wrong. */
static void test_xsum_exact(void)
{
    const double a[] = {1e16, 1.0, -1e16};
    volatile double naive = (a[0] + a[1]) + a[2];
    CU_ASSERT_EQUAL(naive, 0.0); /* the 1 is lost */
    CU_ASSERT_EQUAL(xsum_of(a, 3), 1.0);
    const double b[] = {1.0, 1e100, 1.0, -1e100};
    CU_ASSERT_EQUAL(xsum_of(b, 4), 2.0);
    double tenth[10];
    volatile double t = 0.0;
    for (int i = 0; i < 10; i++) {
        tenth[i] = 0.1;
        t += 0.1;
    }
    CU_ASSERT_NOT_EQUAL(t, 1.0); /* 0.9999999999999999 */
    CU_ASSERT_EQUAL(xsum_of(tenth, 10), 1.0); /* math.fsum([0.1] * 10) */
    CU_ASSERT_EQUAL(xsum_of(NULL, 0), 0.0);
}

/* A tie at the last rounding goes to even, unless a smaller partial breaks
 * it (math.fsum's correction). */
static void test_xsum_ties(void)
{
    const double tie[] = {1.0, 0x1p-53};
    CU_ASSERT_EQUAL(xsum_of(tie, 2), 1.0);
    const double above[] = {1.0, 0x1p-53, 0x1p-106};
    CU_ASSERT_EQUAL(xsum_of(above, 3), 1.0 + 0x1p-52);
    const double below[] = {1.0, 0x1p-53, -0x1p-106};
    CU_ASSERT_EQUAL(xsum_of(below, 3), 1.0);
    const double odd[] = {1.0 + 0x1p-52, 0x1p-53}; /* tie from an odd significand: up */
    CU_ASSERT_EQUAL(xsum_of(odd, 2), 1.0 + 0x1p-51);
}

/* Float32 values and their negatives in a scrambled order sum to exactly 0,
 * and the squares of float32 values to the same double in any order. */
static void test_xsum_order(void)
{
    enum { N = 2000 };
    static double v[2 * N], sq[2 * N];
    uint32_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 1664525u + 1013904223u;
        const float f = ldexpf((float)(x >> 8), (int)(x % 61) - 30);
        v[i] = f;
        v[2 * N - 1 - i] = -(double)f;
        sq[i] = sq[2 * N - 1 - i] = (double)f * f;
    }
    CU_ASSERT_EQUAL(xsum_of(v, 2 * N), 0.0);
    const double fwd = xsum_of(sq, 2 * N);
    for (int i = 0; i < N; i++) { /* reverse */
        const double t = sq[i];
        sq[i] = sq[2 * N - 1 - i];
        sq[2 * N - 1 - i] = t;
    }
    CU_ASSERT_EQUAL(xsum_of(sq, 2 * N), fwd);
}

/* numpy's .npy header (version 1.0) for descr and shape, then payload. */
static void write_npy(const char *name, const char *descr, const char *shape, const void *payload,
                      size_t len)
{
    char text[256];
    snprintf(text, sizeof text, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }", descr, shape);
    const size_t tl = strlen(text), hlen = (10 + tl + 1 + 63) / 64 * 64 - 10;
    uint8_t *b = malloc(10 + hlen + len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (uint8_t)hlen;
    b[9] = (uint8_t)(hlen >> 8);
    memcpy(b + 10, text, tl);
    memset(b + 10 + tl, ' ', hlen - tl - 1);
    b[10 + hlen - 1] = '\n';
    memcpy(b + 10 + hlen, payload, len);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath(name), b, 10 + hlen + len), 0);
    free(b);
}

static int open_set(struct ct_dataset *ds, const char *images, const char *labels, enum ct_data_format f,
                    enum ct_data_layout layout)
{
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = f;
    p.layout = layout;
    p.images = images;
    p.labels = labels;
    p.window = 2;
    return ct_dataset_open(ds, &p);
}

/* The float64 two-pass reference of channel c: value k of sample i is
 * at(i, c, k), scaled by 1/scale. */
static void two_pass(const float *v, int n, int C, int HW, int nhwc, double scale, int c, double *mean,
                     double *std)
{
    double s = 0.0, q = 0.0;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < HW; k++)
            s += v[nhwc ? ((size_t)i * HW + k) * C + c : ((size_t)i * C + c) * HW + k] / scale;
    *mean = s / ((double)n * HW);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < HW; k++) {
            const double d = v[nhwc ? ((size_t)i * HW + k) * C + c : ((size_t)i * C + c) * HW + k] / scale - *mean;
            q += d * d;
        }
    *std = sqrt(q / ((double)n * HW));
}

static int close_to(double got, double want, double rel)
{
    const int ok = fabs(got - want) <= rel * fmax(1.0, fabs(want));
    if (!ok)
        fprintf(stderr, "  got %.17g want %.17g\n", got, want);
    return ok;
}

/* uint8 NHWC (10, 4, 4, 3): mean and std of v/255 per channel. */
static void test_channel_stats_u8_nhwc(void)
{
    enum { N = 10, H = 4, W = 4, C = 3 };
    uint8_t b[N * H * W * C];
    float ref[N * H * W * C];
    for (int i = 0; i < N * H * W * C; i++) {
        b[i] = (uint8_t)((i * 37 + 11) % 256);
        ref[i] = b[i];
    }
    write_npy("u8.npy", "|u1", "(10, 4, 4, 3)", b, sizeof b);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_set(&ds, tpath("u8.npy"), NULL, CT_DATA_FORMAT_NPY, CT_DATA_LAYOUT_AUTO), 0);
    struct ct_channel_stats cs;
    CU_ASSERT_EQUAL(ct_data_channel_stats(&ds, &cs), 0);
    CU_ASSERT_EQUAL(cs.c, C);
    CU_ASSERT_EQUAL(cs.count, (uint64_t)N * H * W);
    for (int c = 0; c < C; c++) {
        double m, s;
        two_pass(ref, N, C, H * W, 1, 255.0, c, &m, &s);
        CU_ASSERT(close_to(cs.mean[c], m, 1e-14));
        CU_ASSERT(close_to(cs.std[c], s, 1e-14));
    }
    ct_dataset_close(&ds);
}

/* float32 NCHW (6, 2, 5, 5), values 1000 + N(0, 1)-like: a large mean next
 * to the spread, where a single-precision running sum would drift. */
static void test_channel_stats_f32_nchw(void)
{
    enum { N = 6, C = 2, H = 5, W = 5 };
    float v[N * C * H * W];
    uint32_t x = 7;
    for (int i = 0; i < N * C * H * W; i++) {
        x = x * 1664525u + 1013904223u;
        v[i] = 3.0f + (float)((int)(x >> 16) - 32768) / 16384.0f + (float)((i / (H * W)) % C);
    }
    write_npy("f32.npy", "<f4", "(6, 2, 5, 5)", v, sizeof v);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_set(&ds, tpath("f32.npy"), NULL, CT_DATA_FORMAT_NPY, CT_DATA_LAYOUT_NCHW), 0);
    struct ct_channel_stats cs;
    CU_ASSERT_EQUAL(ct_data_channel_stats(&ds, &cs), 0);
    CU_ASSERT_EQUAL(cs.count, (uint64_t)N * H * W);
    for (int c = 0; c < C; c++) {
        double m, s;
        two_pass(v, N, C, H * W, 0, 1.0, c, &m, &s);
        CU_ASSERT(close_to(cs.mean[c], m, 1e-14));
        CU_ASSERT(close_to(cs.std[c], s, 1e-12));
    }
    ct_dataset_close(&ds);
    /* A constant channel: std exactly 0, mean exact. */
    for (int i = 0; i < N * C * H * W; i++)
        v[i] = 0.1f;
    write_npy("const.npy", "<f4", "(6, 2, 5, 5)", v, sizeof v);
    CU_ASSERT_EQUAL_FATAL(open_set(&ds, tpath("const.npy"), NULL, CT_DATA_FORMAT_NPY, CT_DATA_LAYOUT_NCHW), 0);
    CU_ASSERT_EQUAL(ct_data_channel_stats(&ds, &cs), 0);
    CU_ASSERT_EQUAL(cs.mean[0], (double)0.1f);
    CU_ASSERT_EQUAL(cs.std[1], 0.0);
    ct_dataset_close(&ds);
}

/* An in-memory float32 set whose samples are rows of `fake_values` (the
 * .npy open refuses non-finite values first; this reaches the stats' own
 * check). */
static const float *fake_values;
static const void *fake_sample(const struct ct_dataset *ds, size_t i)
{
    return fake_values + i * ds->sample_numel;
}

static void test_channel_stats_nonfinite(void)
{
    float v[3 * 1 * 2 * 2] = {0};
    v[7] = NAN;
    write_npy("nan.npy", "<f4", "(3, 1, 2, 2)", v, sizeof v);
    struct ct_dataset ds;
    CU_ASSERT_NOT_EQUAL(open_set(&ds, tpath("nan.npy"), NULL, CT_DATA_FORMAT_NPY, CT_DATA_LAYOUT_NCHW), 0);
    static const struct ct_dataset_ops ops = {.sample = fake_sample};
    static char name[] = "fake";
    fake_values = v;
    struct ct_dataset *f = calloc(1, sizeof *f);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    *f = (struct ct_dataset){.ops = &ops, .n = 3, .c = 1, .h = 2, .w = 2, .sample_numel = 4,
                             .dtype = CT_DATA_F32, .layout = CT_DATA_LAYOUT_NCHW, .n_files = 1};
    f->files[0] = name;
    struct ct_channel_stats cs;
    CU_ASSERT_EQUAL(ct_data_channel_stats(f, &cs), CT_EFORMAT);
    CU_ASSERT_STRING_EQUAL(ct_error_message(), "fake: sample 1 holds a non-finite value (nan)");
    v[7] = 1.0f; /* then: 11 zeros and a 1 */
    CU_ASSERT_EQUAL(ct_data_channel_stats(f, &cs), 0);
    CU_ASSERT_EQUAL(cs.mean[0], 1.0 / 12);
    CU_ASSERT(close_to(cs.std[0], sqrt(1.0 / 12 - 1.0 / 144), 1e-15));
    free(f);
}

/* IDX images (N, H, W) with labels: the histogram and one channel. */
static void test_class_counts(void)
{
    enum { N = 12, H = 2, W = 3 };
    uint8_t im[N * H * W], lb[N];
    for (int i = 0; i < N * H * W; i++)
        im[i] = (uint8_t)(i * 11);
    for (int i = 0; i < N; i++)
        lb[i] = (uint8_t)(i % 5 == 0 ? 4 : i % 3);
    const uint32_t di[] = {N, H, W}, dl[] = {N};
    CU_ASSERT_EQUAL_FATAL(ct_test_write_idx(tpath("im.idx"), 3, di, im, sizeof im), 0);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_idx(tpath("lb.idx"), 1, dl, lb, sizeof lb), 0);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_set(&ds, tpath("im.idx"), tpath("lb.idx"), CT_DATA_FORMAT_IDX,
                                   CT_DATA_LAYOUT_AUTO), 0);
    CU_ASSERT_TRUE(ct_data_has_classes(&ds));
    CU_ASSERT_EQUAL_FATAL(ds.n_classes, 5);
    uint64_t count[5], want[5] = {0};
    for (int i = 0; i < N; i++)
        want[lb[i]]++;
    CU_ASSERT_EQUAL(ct_data_class_counts(&ds, count), 0);
    CU_ASSERT_EQUAL(memcmp(count, want, sizeof want), 0);
    ct_dataset_close(&ds);
    /* Without labels: nothing to count. */
    CU_ASSERT_EQUAL_FATAL(open_set(&ds, tpath("im.idx"), NULL, CT_DATA_FORMAT_IDX, CT_DATA_LAYOUT_AUTO), 0);
    CU_ASSERT_FALSE(ct_data_has_classes(&ds));
    CU_ASSERT_EQUAL(ct_data_class_counts(&ds, count), CT_EINVAL);
    ct_dataset_close(&ds);
}

/* Two shards: counts over both, ties to the smaller token. */
static void test_token_stats(void)
{
    const uint16_t a[] = {5, 7, 7, 300, 5, 9};
    const uint16_t b[] = {7, 5, 2, 9, 300};
    CU_ASSERT_EQUAL_FATAL(ct_tokens_write(tpath("a.bin"), a, 6), 0);
    CU_ASSERT_EQUAL_FATAL(ct_tokens_write(tpath("b.bin"), b, 5), 0);
    char list[1100];
    snprintf(list, sizeof list, "%s,%s", tpath("a.bin"), tpath("b.bin"));
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_set(&ds, list, NULL, CT_DATA_FORMAT_TOKENS, CT_DATA_LAYOUT_AUTO), 0);
    struct ct_token_stats st;
    CU_ASSERT_EQUAL_FATAL(ct_data_token_stats(&ds, &st), 0);
    CU_ASSERT_EQUAL(st.total, 11);
    CU_ASSERT_EQUAL(st.largest, 300);
    CU_ASSERT_EQUAL(st.distinct, 5);
    CU_ASSERT_EQUAL(st.ntop, 5);
    /* 5: 3, 7: 3, 9: 2, 300: 2, 2: 1 */
    const int top[] = {5, 7, 9, 300, 2};
    const uint64_t cnt[] = {3, 3, 2, 2, 1};
    for (int k = 0; k < 5; k++) {
        CU_ASSERT_EQUAL(st.top[k], top[k]);
        CU_ASSERT_EQUAL(st.top_count[k], cnt[k]);
    }
    ct_dataset_close(&ds);
    /* Not a token set. */
    const uint8_t im[2 * 2 * 2] = {0};
    const uint32_t di[] = {2, 2, 2};
    CU_ASSERT_EQUAL_FATAL(ct_test_write_idx(tpath("small.idx"), 3, di, im, sizeof im), 0);
    CU_ASSERT_EQUAL_FATAL(open_set(&ds, tpath("small.idx"), NULL, CT_DATA_FORMAT_IDX, CT_DATA_LAYOUT_AUTO), 0);
    CU_ASSERT_EQUAL(ct_data_token_stats(&ds, &st), CT_EINVAL);
    ct_dataset_close(&ds);
}

/* Two texts into one shard, read back through the tokens reader. */
static void test_tokenize(void)
{
    const char t1[] = "hello, world\n", t2[] = "a bee sees the sea\xff";
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("t1.txt"), t1, strlen(t1)), 0);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("t2.txt"), t2, strlen(t2)), 0);
    char p1[512], p2[512], out[512];
    snprintf(p1, sizeof p1, "%s", tpath("t1.txt"));
    snprintf(p2, sizeof p2, "%s", tpath("t2.txt"));
    snprintf(out, sizeof out, "%s", tpath("t.bin"));
    const char *texts[] = {p1, p2};
    uint64_t n = 0;
    CU_ASSERT_EQUAL_FATAL(ct_tokenize_bytes(texts, 2, out, &n), 0);
    const size_t len = strlen(t1) + strlen(t2);
    CU_ASSERT_EQUAL(n, len);
    struct ct_tokens_header h;
    CU_ASSERT_EQUAL_FATAL(ct_tokens_read_header(out, &h), 0);
    CU_ASSERT_EQUAL(h.count, len);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_set(&ds, out, NULL, CT_DATA_FORMAT_TOKENS, CT_DATA_LAYOUT_AUTO), 0);
    size_t ntok, nwin;
    const uint16_t *tok = ct_tokens_shard(&ds, 0, &ntok, &nwin);
    CU_ASSERT_PTR_NOT_NULL_FATAL(tok);
    CU_ASSERT_EQUAL_FATAL(ntok, len);
    char both[64];
    snprintf(both, sizeof both, "%s%s", t1, t2);
    for (size_t i = 0; i < len; i++)
        CU_ASSERT_EQUAL(tok[i], (uint8_t)both[i]);
    ct_dataset_close(&ds);
}

static void test_tokenize_refusals(void)
{
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("e1.txt"), "", 0), 0);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("e2.txt"), "", 0), 0);
    char e1[512], e2[512], out[512], missing[512];
    snprintf(e1, sizeof e1, "%s", tpath("e1.txt"));
    snprintf(e2, sizeof e2, "%s", tpath("e2.txt"));
    snprintf(out, sizeof out, "%s", tpath("none.bin"));
    snprintf(missing, sizeof missing, "%s", tpath("missing.txt"));
    uint64_t n = 1;
    const char *one[] = {e1}, *two[] = {e1, e2}, *gone[] = {missing}, *dir[] = {tmp};
    CU_ASSERT_EQUAL(ct_tokenize_bytes(one, 1, out, &n), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "e1.txt holds no bytes: nothing to tokenize"));
    CU_ASSERT_EQUAL(n, 0);
    CU_ASSERT_EQUAL(ct_tokenize_bytes(two, 2, out, &n), CT_EINVAL);
    CU_ASSERT_STRING_EQUAL(ct_error_message(), "the text files hold no bytes: nothing to tokenize");
    CU_ASSERT_EQUAL(ct_tokenize_bytes(gone, 1, out, &n), CT_ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "missing.txt: cannot stat"));
    CU_ASSERT_EQUAL(ct_tokenize_bytes(dir, 1, out, &n), CT_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "not a regular file"));
    CU_ASSERT_NOT_EQUAL(access(out, F_OK), 0); /* nothing written */
}

static void test_idx_image_shape(void)
{
    struct ct_idx h = {.rank = 4, .dims = {7, 3, 5, 6}};
    struct ct_dataset ds = {0};
    CU_ASSERT_EQUAL(ct_data_idx_image_shape(&h, &ds), 1);
    CU_ASSERT(ds.n == 7 && ds.c == 3 && ds.h == 5 && ds.w == 6 && ds.dtype == CT_DATA_U8);
    h = (struct ct_idx){.rank = 3, .dims = {9, 28, 28}};
    CU_ASSERT_EQUAL(ct_data_idx_image_shape(&h, &ds), 1);
    CU_ASSERT(ds.n == 9 && ds.c == 1 && ds.h == 28 && ds.w == 28);
    h = (struct ct_idx){.rank = 4, .dims = {7, CT_DATA_MAX_CHANNELS + 1, 5, 6}};
    CU_ASSERT_EQUAL(ct_data_idx_image_shape(&h, &ds), 0);
    h = (struct ct_idx){.rank = 2, .dims = {7, 5}};
    CU_ASSERT_EQUAL(ct_data_idx_image_shape(&h, &ds), 0);
    h = (struct ct_idx){.rank = 3, .dims = {7, 0x80000000u, 5}};
    CU_ASSERT_EQUAL(ct_data_idx_image_shape(&h, &ds), 0);
}

/* The header description of a raw IDX file, into memory. */
static void test_describe_header(void)
{
    const uint8_t im[4 * 2 * 3] = {0};
    const uint32_t di[] = {4, 2, 3};
    CU_ASSERT_EQUAL_FATAL(ct_test_write_idx(tpath("d.idx"), 3, di, im, sizeof im), 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    struct ct_data_probe p = ct_data_probe_default();
    p.files[0] = tpath("d.idx");
    p.n_files = 1;
    CU_ASSERT_EQUAL(ct_data_describe_header(f, &p), 0);
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "format   idx, uint8 dims 4 x 2 x 3\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "samples  4\nshape    1 x 2 x 3 (C x H x W)\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "bytes)\n"));
    free(text);
}

int main(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    static const struct ct_test_case cases[] = {
        {"exact sum: what naive summation loses", test_xsum_exact},
        {"exact sum: ties to even across partials", test_xsum_ties},
        {"exact sum: order independence", test_xsum_order},
        {"channel stats: uint8 NHWC vs two-pass float64", test_channel_stats_u8_nhwc},
        {"channel stats: float32 NCHW vs two-pass float64", test_channel_stats_f32_nchw},
        {"channel stats: a non-finite value refused", test_channel_stats_nonfinite},
        {"class counts", test_class_counts},
        {"token stats over two shards", test_token_stats},
        {"tokenize two texts, read back", test_tokenize},
        {"tokenize refusals", test_tokenize_refusals},
        {"IDX header image shape", test_idx_image_shape},
        {"describe an IDX header", test_describe_header},
        {NULL, NULL},
    };
    int rc = ct_test_run("data_stats", cases);
    ct_test_rmtree(tmp);
    return rc;
}
