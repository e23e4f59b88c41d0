/* Unit tests for the weights reader (src/report/weights.c): what export
 * writes reads back bit for bit in both formats; NumPy's files (deflated
 * and stored npz with ZIP64 extras, '<f2') and a BF16 safetensors file read
 * with the values they hold; float16 widened exactly (subnormals, the
 * largest, infinities, -0); every cut of a file refused, a damaged entry's
 * CRC-32 caught, and each malformed safetensors header refused by name.
 * test_init_from.sh (e2e) loads PyTorch's files through train.init_from. */
#include "core/error.h"
#include "report/export.h"
#include "report/weights.h"
#include "ct_test.h"

#include <math.h>
#include <stdint.h>

#ifndef CT_FIXTURE_DIR
#define CT_FIXTURE_DIR "tests/fixtures"
#endif

static const float W[6] = {1.5f, -2.0f, 0.25f, 3.0f, -0.0f, 1e-30f};
static const float BIAS[3] = {0.5f, -0.5f, 7.0f};
static const float S = 42.0f;
static const struct ct_export_tensor T[] = {
    {"layers.0.weight", 2, (const int64_t[]){3, 2}, W},
    {"layers.0.bias", 1, (const int64_t[]){3}, BIAS},
    {"scale", 0, NULL, &S},
};
static const struct ct_export_meta META[] = {{"model", "mlp"}};

static void expect_tensor(const struct ct_weights *w, const struct ct_export_tensor *want, size_t numel)
{
    const struct ct_weights_tensor *t = ct_weights_find(w, want->name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->dtype, CT_WEIGHTS_F32);
    CU_ASSERT_EQUAL_FATAL(t->ndim, want->ndim);
    for (int i = 0; i < t->ndim; i++)
        CU_ASSERT_EQUAL(t->shape[i], want->shape[i]);
    CU_ASSERT_EQUAL_FATAL(t->numel, numel);
    float got[8];
    ct_weights_to_f32(t, got);
    CU_ASSERT_EQUAL(memcmp(got, want->data, numel * sizeof(float)), 0);
}

static void test_export_round_trip(void)
{
    const char *dir = ct_test_tmpdir();
    for (int f = 0; f < CT_EXPORT_FORMAT_COUNT; f++) {
        char path[512];
        snprintf(path, sizeof path, "%s/w.%s", dir, ct_export_format_names[f]);
        CU_ASSERT_EQUAL_FATAL(ct_export_write(path, (enum ct_export_format)f, T, 3, META, 1), 0);
        struct ct_weights w;
        CU_ASSERT_EQUAL_FATAL(ct_weights_open(&w, path), 0);
        CU_ASSERT_EQUAL(w.format, (enum ct_export_format)f);
        CU_ASSERT_EQUAL(w.n, 3); /* __metadata__ is no tensor */
        CU_ASSERT_PTR_NULL(ct_weights_find(&w, "__metadata__"));
        expect_tensor(&w, &T[0], 6);
        expect_tensor(&w, &T[1], 3);
        expect_tensor(&w, &T[2], 1);
        CU_ASSERT_STRING_EQUAL(w.t[0].name, "layers.0.weight"); /* the file's order */
        ct_weights_close(&w);
        /* Every cut of the file is refused cleanly. */
        size_t len;
        uint8_t *whole = ct_test_read_file(path, &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(whole);
        int refused = 0;
        for (size_t cut = 0; cut < len; cut++) {
            uint8_t *b = malloc(cut ? cut : 1);
            memcpy(b, whole, cut);
            if (ct_weights_parse(&w, "cut", b, cut) == CT_EFORMAT)
                refused++;
            ct_error_clear();
        }
        CU_ASSERT_EQUAL(refused, (int)len);
        free(whole);
    }
    struct ct_weights w;
    CU_ASSERT_EQUAL(ct_weights_open(&w, "/nonexistent/w.npz"), CT_ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "/nonexistent/w.npz"));
    ct_weights_close(&w); /* harmless on an empty one */
    ct_test_rmtree(dir);
}

static void test_numpy_files(void)
{
    const float w[6] = {-0.5f, -0.25f, 0.0f, 0.25f, 0.5f, 0.75f};
    const float h[4] = {1.0f, -2.0f, 65504.0f, 5.9604644775390625e-08f};
    const char *npz[2] = {CT_FIXTURE_DIR "/weights/compressed.npz", CT_FIXTURE_DIR "/weights/plain.npz"};
    for (int k = 0; k < 2; k++) {
        struct ct_weights wt;
        int rc = ct_weights_open(&wt, npz[k]);
        if (rc < 0)
            fprintf(stderr, "%s\n", ct_error_message());
        CU_ASSERT_EQUAL_FATAL(rc, 0);
        CU_ASSERT_EQUAL(wt.format, CT_EXPORT_NPZ);
        CU_ASSERT_EQUAL(wt.n, 2);
        const struct ct_weights_tensor *a = ct_weights_find(&wt, "w"), *b = ct_weights_find(&wt, "h");
        CU_ASSERT_PTR_NOT_NULL_FATAL(a);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b);
        CU_ASSERT_EQUAL(a->dtype, CT_WEIGHTS_F32);
        CU_ASSERT_EQUAL(b->dtype, CT_WEIGHTS_F16);
        CU_ASSERT(a->ndim == 2 && a->shape[0] == 2 && a->shape[1] == 3);
        float got[6];
        ct_weights_to_f32(a, got);
        CU_ASSERT_EQUAL(memcmp(got, w, sizeof w), 0);
        ct_weights_to_f32(b, got);
        CU_ASSERT_EQUAL(memcmp(got, h, sizeof h), 0);
        ct_weights_close(&wt);
    }
    /* One byte of a deflated entry changed: inflate or the CRC-32 catches it. */
    size_t len;
    uint8_t *b = ct_test_read_file(npz[0], &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    b[60] ^= 0x5a;
    struct ct_weights wt;
    CU_ASSERT_EQUAL(ct_weights_parse(&wt, "damaged.npz", b, len), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "damaged.npz: entry"));
    /* A stored entry's byte: the CRC-32. */
    b = ct_test_read_file(npz[1], &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    size_t at = 0;
    while (at + 5 < len && memcmp(b + at, "w.npy", 5) != 0)
        at++;
    b[at + 5 + 20 + 128 + 2] ^= 0x01; /* past its extra field and .npy header: a value */
    CU_ASSERT_EQUAL(ct_weights_parse(&wt, "plain.npz", b, len), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "CRC-32"));

    CU_ASSERT_EQUAL_FATAL(ct_weights_open(&wt, CT_FIXTURE_DIR "/weights/bf16.safetensors"), 0);
    CU_ASSERT_EQUAL(wt.format, CT_EXPORT_SAFETENSORS);
    const struct ct_weights_tensor *t = ct_weights_find(&wt, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->dtype, CT_WEIGHTS_BF16);
    float got[6];
    ct_weights_to_f32(t, got);
    CU_ASSERT_EQUAL(memcmp(got, w, sizeof w), 0); /* these values have 8 significant bits */
    t = ct_weights_find(&wt, "s");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->ndim, 0);
    ct_weights_to_f32(t, got);
    CU_ASSERT_EQUAL(got[0], 42.0f);
    ct_weights_close(&wt);
}

static void test_f16_widening(void)
{
    const uint16_t h[] = {0x0000, 0x8000, 0x3c00, 0xc000, 0x7bff, 0x0001, 0x03ff, 0x0400, 0x7c00, 0xfc00, 0x3555};
    const float want[] = {0.0f, -0.0f, 1.0f, -2.0f, 65504.0f, 0x1p-24f, 0x3ffp-24f, 0x1p-14f,
                          INFINITY, -INFINITY, 0x1.554p-2f};
    uint8_t raw[2 * sizeof h / sizeof h[0]];
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) {
        raw[2 * i] = (uint8_t)h[i];
        raw[2 * i + 1] = (uint8_t)(h[i] >> 8);
    }
    struct ct_weights_tensor t = {.name = "h", .dtype = CT_WEIGHTS_F16, .ndim = 1,
                                  .numel = sizeof h / sizeof h[0], .data = raw};
    float got[sizeof h / sizeof h[0]];
    ct_weights_to_f32(&t, got);
    CU_ASSERT_EQUAL(memcmp(got, want, sizeof want), 0);
    const uint8_t nan[2] = {0x00, 0x7e};
    t.numel = 1;
    t.data = nan;
    ct_weights_to_f32(&t, got);
    CU_ASSERT(isnan(got[0]));
}

/* A safetensors file of header text and data bytes, parsed. */
static int parse_st(const char *header, size_t data_bytes)
{
    size_t hl = strlen(header), len = 8 + hl + data_bytes;
    uint8_t *b = calloc(1, len);
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    struct ct_weights w;
    int rc = ct_weights_parse(&w, "x.safetensors", b, len);
    if (rc == 0)
        ct_weights_close(&w);
    return rc;
}

#define EXPECT_ST_FAIL(header, bytes, ...)                                                         \
    do {                                                                                           \
        CU_ASSERT_EQUAL(parse_st(header, bytes), CT_EFORMAT);                                      \
        const char *want_[] = {"x.safetensors", __VA_ARGS__};                                      \
        for (size_t k_ = 0; k_ < sizeof want_ / sizeof want_[0]; k_++)                             \
            if (!strstr(ct_error_message(), want_[k_])) {                                          \
                fprintf(stderr, "\n  message '%s' lacks '%s'\n", ct_error_message(), want_[k_]);   \
                CU_FAIL("message");                                                                \
            }                                                                                      \
    } while (0)

static void test_safetensors_refusals(void)
{
    CU_ASSERT_EQUAL(parse_st("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8), 0);
    CU_ASSERT_EQUAL(parse_st("{}", 0), 0); /* no tensors: the caller finds every name missing */
    EXPECT_ST_FAIL("{\"a\": {\"dtype\": \"F64\", \"shape\": [2], \"data_offsets\": [0, 16]}}", 16,
                   "tensor 'a' has dtype F64", "F32, F16 or BF16");
    EXPECT_ST_FAIL("{\"a\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 8,
                   "tensor 'a': data_offsets [0, 8] for 12 bytes");
    EXPECT_ST_FAIL("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", 8,
                   "in a data section of 8 bytes");
    EXPECT_ST_FAIL("{\"a\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", 8,
                   "tensor 'a': axis 0 of size -2");
    EXPECT_ST_FAIL("{\"a\": {\"dtype\": \"F32\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 4]}}", 4,
                   "9 axes");
    EXPECT_ST_FAIL("{\"a\": {\"dtype\": \"F32\", \"shape\": [2]}}", 8, "\"data_offsets\"");
    EXPECT_ST_FAIL("{\"a\": [1, 2]}", 0, "tensor 'a' is described by a array");
    EXPECT_ST_FAIL("{\"\": {\"dtype\": \"F32\", \"shape\": [], \"data_offsets\": [0, 4]}}", 4, "an empty name");
    EXPECT_ST_FAIL("{\"a\": 1, \"a\": 2}", 0, "the safetensors header");
    EXPECT_ST_FAIL("{\"__metadata__\": 3}", 0, "__metadata__ is a number");
    EXPECT_ST_FAIL("[1]", 0, "neither an npz"); /* told by its first bytes */
    EXPECT_ST_FAIL("{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}", 8,
                   "the safetensors header");
    /* A header longer than the file. */
    uint8_t *b = calloc(1, 16);
    b[0] = 200;
    b[8] = '{';
    struct ct_weights w;
    CU_ASSERT_EQUAL(ct_weights_parse(&w, "x.safetensors", b, 16), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "a safetensors header of 200 bytes"));
    b = (uint8_t *)strdup("just text, no weights");
    CU_ASSERT_EQUAL(ct_weights_parse(&w, "x.txt", b, strlen((char *)b)), CT_EFORMAT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "neither an npz"));
}

static void test_shape_str(void)
{
    char buf[32];
    CU_ASSERT_STRING_EQUAL(ct_weights_shape_str(2, (const int64_t[]){768, 3072}, buf, sizeof buf), "(768, 3072)");
    CU_ASSERT_STRING_EQUAL(ct_weights_shape_str(1, (const int64_t[]){5}, buf, sizeof buf), "(5,)");
    CU_ASSERT_STRING_EQUAL(ct_weights_shape_str(0, NULL, buf, sizeof buf), "()");
    char small[16];
    ct_weights_shape_str(4, (const int64_t[]){123456, 123456, 123456, 123456}, small, sizeof small);
    CU_ASSERT_EQUAL(strlen(small), 15);
    CU_ASSERT_STRING_EQUAL(small + 11, "...)");
    CU_ASSERT_STRING_EQUAL(ct_weights_dtype_name(CT_WEIGHTS_BF16), "bfloat16");
}

static const struct ct_test_case cases[] = {
    {"export_round_trip", test_export_round_trip},
    {"numpy_files", test_numpy_files},
    {"f16_widening", test_f16_widening},
    {"safetensors_refusals", test_safetensors_refusals},
    {"shape_str", test_shape_str},
    {NULL, NULL},
};

int main(void) { return ct_test_run("weights", cases); }
