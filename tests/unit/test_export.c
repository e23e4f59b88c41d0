/* Unit tests for the weight export writers (src/report/export.c): the npz is read
 * back as a ZIP archive by hand (every header field, CRC-32, NPY header and
 * alignment, the central directory), the safetensors header through our JSON
 * reader (dtype, shapes, offsets, alignment, metadata), and bad names and
 * failed writes leave nothing behind; a gpt built by the zoo gets nanoGPT's
 * names (with and without dropout modules between its layers) and its tied
 * head. The e2e tests test_export.sh and test_gpt_export.sh load the same
 * files with NumPy and PyTorch. */
#include "core/error.h"
#include "models/models.h"
#include "report/export.h"
#include "run/json.h"
#include "ct_test.h"

#include <stdint.h>
#include <sys/stat.h>
#include <zlib.h>

static const float W[6] = {1.5f, -2.0f, 0.25f, 3.0f, -0.0f, 1e-30f};
static const float BIAS[3] = {0.5f, -0.5f, 7.0f};
static const float S = 42.0f;

static const struct ct_export_tensor T[] = {
    {"layers.0.weight", 2, (const int64_t[]){3, 2}, W},
    {"layers.0.bias", 1, (const int64_t[]){3}, BIAS},
    {"scale", 0, NULL, &S},
};
static const struct ct_export_meta META[] = {{"model", "mlp"}, {"note", "quote \" and\nnewline"},
                                             {"text", "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80 bad\xff \xc3"}};

/* UTF-32LE code points back to UTF-8, NUL-terminated; for reading the npz's
 * '<U' metadata. */
static char *utf32le_to_utf8(const unsigned char *p, size_t n)
{
    char *s = malloc(4 * n + 1), *o = s;
    for (size_t i = 0; s && i < n; i++) {
        uint32_t c = (uint32_t)p[4 * i] | (uint32_t)p[4 * i + 1] << 8 | (uint32_t)p[4 * i + 2] << 16 |
                     (uint32_t)p[4 * i + 3] << 24;
        if (c < 0x80) {
            *o++ = (char)c;
        } else if (c < 0x800) {
            *o++ = (char)(0xc0 | c >> 6);
            *o++ = (char)(0x80 | (c & 0x3f));
        } else if (c < 0x10000) {
            *o++ = (char)(0xe0 | c >> 12);
            *o++ = (char)(0x80 | (c >> 6 & 0x3f));
            *o++ = (char)(0x80 | (c & 0x3f));
        } else {
            *o++ = (char)(0xf0 | c >> 18);
            *o++ = (char)(0x80 | (c >> 12 & 0x3f));
            *o++ = (char)(0x80 | (c >> 6 & 0x3f));
            *o++ = (char)(0x80 | (c & 0x3f));
        }
    }
    if (s)
        *o = '\0';
    return s;
}

static uint32_t get16(const unsigned char *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8; }
static uint32_t get32(const unsigned char *p) { return get16(p) | get16(p + 2) << 16; }

/* The local entry at *off: checks the header and CRC, returns the content. */
static const unsigned char *zip_entry(const unsigned char *b, size_t len, size_t *off,
                                      const char *want_name, uint32_t *size)
{
    const unsigned char *h = b + *off;
    CU_ASSERT_FATAL(*off + 30 <= len);
    CU_ASSERT_EQUAL(get32(h), 0x04034b50u);
    CU_ASSERT_EQUAL(get16(h + 8), 0); /* stored */
    uint32_t nl = get16(h + 26), el = get16(h + 28);
    *size = get32(h + 22);
    CU_ASSERT_EQUAL(get32(h + 18), *size);
    CU_ASSERT_EQUAL(nl, strlen(want_name));
    CU_ASSERT_EQUAL(memcmp(h + 30, want_name, nl), 0);
    const unsigned char *data = h + 30 + nl + el;
    CU_ASSERT_FATAL((size_t)(data - b) + *size <= len);
    CU_ASSERT_EQUAL(get32(h + 14), (uint32_t)crc32(0, data, *size));
    *off = (size_t)(data - b) + *size;
    return data;
}

static void test_npz_layout(void)
{
    const char *dir = ct_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/m.npz", dir);
    CU_ASSERT_EQUAL_FATAL(ct_export_write(path, CT_EXPORT_NPZ, T, 3, META, 3), 0);
    size_t len;
    unsigned char *b = ct_test_read_file(path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);

    const char *shapes[] = {"(3, 2)", "(3,)", "()"};
    size_t off = 0;
    for (int i = 0; i < 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s.npy", T[i].name);
        uint32_t size;
        const unsigned char *npy = zip_entry(b, len, &off, name, &size);
        CU_ASSERT_EQUAL(memcmp(npy, "\x93NUMPY\x01\x00", 8), 0);
        uint32_t hl = get16(npy + 8);
        CU_ASSERT_EQUAL((10 + hl) % 64, 0);
        CU_ASSERT_EQUAL(npy[10 + hl - 1], '\n');
        char want[128];
        snprintf(want, sizeof want, "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }",
                 shapes[i]);
        CU_ASSERT_EQUAL(memcmp(npy + 10, want, strlen(want)), 0);
        size_t n = i == 0 ? 6 : i == 1 ? 3 : 1;
        CU_ASSERT_EQUAL(size, 10 + hl + n * sizeof(float));
        CU_ASSERT_EQUAL(memcmp(npy + 10 + hl, T[i].data, n * sizeof(float)), 0);
    }
    /* The metadata: __metadata__.npy, a 0-d '<U' array of the JSON text
     * (UTF-32LE; bytes that are not UTF-8 become U+FFFD). */
    uint32_t msize;
    const unsigned char *meta = zip_entry(b, len, &off, "__metadata__.npy", &msize);
    CU_ASSERT_PTR_NOT_NULL_FATAL(meta);
    CU_ASSERT_EQUAL_FATAL(memcmp(meta, "\x93NUMPY\x01\x00", 8), 0);
    uint32_t mhl = get16(meta + 8);
    CU_ASSERT_EQUAL((10 + mhl) % 64, 0);
    unsigned chars = 0;
    CU_ASSERT_EQUAL_FATAL(sscanf((const char *)meta + 10, "{'descr': '<U%u', 'fortran_order': False, 'shape': (), }",
                                 &chars), 1);
    CU_ASSERT_EQUAL_FATAL(msize, 10 + mhl + 4 * chars);
    char *text = utf32le_to_utf8(meta + 10 + mhl, chars);
    struct ct_json_doc d;
    CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, text, strlen(text), NULL), 0);
    const char *s;
    CU_ASSERT_EQUAL(ct_json_get_string(d.root, "note", &s), 0);
    CU_ASSERT_STRING_EQUAL(s, "quote \" and\nnewline");
    CU_ASSERT_EQUAL(ct_json_get_string(d.root, "text", &s), 0);
    CU_ASSERT_STRING_EQUAL(s, "caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x98\x80 bad\xef\xbf\xbd \xef\xbf\xbd");
    ct_json_doc_free(&d);
    free(text);

    /* Central directory: 4 entries pointing at the local headers, then the end record. */
    const unsigned char *end = b + len - 22;
    CU_ASSERT_EQUAL(get32(end), 0x06054b50u);
    CU_ASSERT_EQUAL(get16(end + 8), 4);
    CU_ASSERT_EQUAL(get16(end + 10), 4);
    uint32_t cd = get32(end + 16), cd_size = get32(end + 12);
    CU_ASSERT_EQUAL(cd, off);
    CU_ASSERT_EQUAL(cd + cd_size, len - 22);
    size_t p = cd, local = 0;
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL_FATAL(get32(b + p), 0x02014b50u);
        CU_ASSERT_EQUAL(get32(b + p + 42), local);
        CU_ASSERT_EQUAL(get32(b + p + 16), get32(b + local + 14)); /* same CRC */
        local += 30 + get16(b + local + 26) + get32(b + local + 22);
        p += 46 + get16(b + p + 28);
    }
    free(b);
    ct_test_rmtree(dir);
}

static void test_safetensors_layout(void)
{
    const char *dir = ct_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    CU_ASSERT_EQUAL_FATAL(ct_export_write(path, CT_EXPORT_SAFETENSORS, T, 3, META, 2), 0);
    size_t len;
    unsigned char *b = ct_test_read_file(path, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    uint64_t hl = get32(b) | (uint64_t)get32(b + 4) << 32;
    CU_ASSERT_EQUAL((8 + hl) % 8, 0);
    CU_ASSERT_EQUAL_FATAL(8 + hl + (6 + 3 + 1) * sizeof(float), len);
    struct ct_json_doc d;
    CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, (const char *)b + 8, hl, NULL), 0); /* trailing spaces are JSON whitespace */
    const char *s;
    const struct ct_json_value *md = ct_json_get(d.root, "__metadata__");
    CU_ASSERT_EQUAL(ct_json_get_string(md, "model", &s), 0);
    CU_ASSERT_STRING_EQUAL(s, "mlp");
    int64_t at = 0;
    for (int i = 0; i < 3; i++) {
        const struct ct_json_value *t = ct_json_get(d.root, T[i].name);
        CU_ASSERT_PTR_NOT_NULL_FATAL(t);
        CU_ASSERT_EQUAL(ct_json_get_string(t, "dtype", &s), 0);
        CU_ASSERT_STRING_EQUAL(s, "F32");
        const struct ct_json_value *shape = ct_json_get(t, "shape");
        CU_ASSERT_EQUAL_FATAL(shape->n, (size_t)T[i].ndim);
        int64_t n = 1;
        for (int k = 0; k < T[i].ndim; k++) {
            CU_ASSERT_EQUAL(ct_json_at(shape, (size_t)k)->integer, T[i].shape[k]);
            n *= T[i].shape[k];
        }
        const struct ct_json_value *o = ct_json_get(t, "data_offsets");
        CU_ASSERT_EQUAL(ct_json_at(o, 0)->integer, at);
        CU_ASSERT_EQUAL(ct_json_at(o, 1)->integer, at + n * 4);
        CU_ASSERT_EQUAL(memcmp(b + 8 + hl + at, T[i].data, (size_t)n * 4), 0);
        at += n * 4;
    }
    ct_json_doc_free(&d);
    free(b);
    ct_test_rmtree(dir);
}

static void test_bad_names_and_paths_leave_nothing(void)
{
    const char *dir = ct_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/m.npz", dir);
    struct ct_export_tensor bad[2] = {T[0], T[1]};
    bad[1].name = "layers.0.weight";
    CU_ASSERT_EQUAL(ct_export_write(path, CT_EXPORT_NPZ, bad, 2, NULL, 0), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "'layers.0.weight' appears twice"));
    bad[1].name = "a/b";
    CU_ASSERT_EQUAL(ct_export_write(path, CT_EXPORT_SAFETENSORS, bad, 2, NULL, 0), CT_EINVAL);
    bad[1].name = "";
    CU_ASSERT_EQUAL(ct_export_write(path, CT_EXPORT_NPZ, bad, 2, NULL, 0), CT_EINVAL);
    struct stat st;
    CU_ASSERT_NOT_EQUAL(stat(path, &st), 0);

    /* An existing file is kept when the new one cannot be written. */
    CU_ASSERT_EQUAL(ct_test_write_file(path, "old", 3), 0);
    bad[1].name = "x\ty";
    CU_ASSERT_EQUAL(ct_export_write(path, CT_EXPORT_NPZ, bad, 2, NULL, 0), CT_EINVAL);
    CU_ASSERT_EQUAL(stat(path, &st), 0);
    CU_ASSERT_EQUAL(st.st_size, 3);
    ct_test_rmtree(dir);

    CU_ASSERT(ct_export_write("/nonexistent-dir/m.npz", CT_EXPORT_NPZ, T, 3, NULL, 0) < 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "/nonexistent-dir/m.npz"));
}

/* A zoo gpt's parameters as export hands them over: our names, our order. */
static int gpt_tensors(struct ct_model *m, float dropout, struct ct_export_tensor *t)
{
    struct ct_model_spec spec = ct_model_default_spec();
    spec.name = "gpt";
    spec.in_c = 1, spec.in_h = 1, spec.in_w = 8; /* T = 8 token ids */
    spec.block = 8, spec.n_classes = 16, spec.depth = 2, spec.width = 12, spec.heads = 3;
    spec.mlp_ratio = 4, spec.dropout = dropout;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(m, &spec, 2), 0);
    CU_ASSERT_FATAL(m->layout.n <= 40);
    for (int i = 0; i < m->layout.n; i++)
        t[i] = (struct ct_export_tensor){m->layout.views[i].name, m->layout.views[i].ndim,
                                         m->layout.views[i].shape,
                                         m->params.data + m->layout.views[i].offset};
    return m->layout.n;
}

static void test_gpt_nanogpt_names(void)
{
    static const char *const block[] = {
        "ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias",
        "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight", "ln_2.bias",
        "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"};
    static const int64_t shapes[12][2] = {{12}, {12}, {36, 12}, {36}, {12, 12}, {12},
                                          {12}, {12}, {48, 12}, {48}, {12, 48}, {12}};
    for (int drop = 0; drop < 2; drop++) {
        struct ct_model m;
        struct ct_export_tensor in[40], out[41];
        char names[41][CT_EXPORT_NAME_MAX];
        const int n = gpt_tensors(&m, drop ? 0.1f : 0.0f, in);
        CU_ASSERT_EQUAL_FATAL(n, 2 + 2 * 12 + 2);
        CU_ASSERT_EQUAL_FATAL(ct_export_gpt_names(in, n, out, names), n + 1);
        CU_ASSERT_STRING_EQUAL(out[0].name, "transformer.wte.weight");
        CU_ASSERT_STRING_EQUAL(out[1].name, "transformer.wpe.weight");
        CU_ASSERT(out[0].shape[0] == 16 && out[0].shape[1] == 12);
        CU_ASSERT(out[1].shape[0] == 8 && out[1].shape[1] == 12);
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 12; j++) {
                char want[CT_EXPORT_NAME_MAX];
                snprintf(want, sizeof want, "transformer.h.%d.%s", i, block[j]);
                const struct ct_export_tensor *o = &out[2 + 12 * i + j];
                CU_ASSERT_STRING_EQUAL(o->name, want);
                CU_ASSERT_EQUAL(o->data, in[2 + 12 * i + j].data);
                CU_ASSERT_EQUAL(o->shape[0], shapes[j][0]);
                if (o->ndim == 2)
                    CU_ASSERT_EQUAL(o->shape[1], shapes[j][1]);
            }
        CU_ASSERT_STRING_EQUAL(out[26].name, "transformer.ln_f.weight");
        CU_ASSERT_STRING_EQUAL(out[27].name, "transformer.ln_f.bias");
        /* The tied head: wte's values under lm_head.weight, last. */
        CU_ASSERT_STRING_EQUAL(out[28].name, "lm_head.weight");
        CU_ASSERT_EQUAL(out[28].data, in[0].data);
        CU_ASSERT(out[28].ndim == 2 && out[28].shape[0] == 16 && out[28].shape[1] == 12);

        /* Refused: a tensor without a nanoGPT name, and a gpt missing a part. */
        struct ct_export_tensor bad[40];
        memcpy(bad, in, sizeof(struct ct_export_tensor) * (size_t)n);
        bad[5].name = "layers.9.body.1.extra.weight";
        CU_ASSERT_EQUAL(ct_export_gpt_names(bad, n, out, names), CT_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "'layers.9.body.1.extra.weight' has no nanoGPT name"));
        CU_ASSERT_EQUAL(ct_export_gpt_names(in, n - 2, out, names), CT_EINVAL); /* no ln_f */
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "not a whole gpt"));
        CU_ASSERT_EQUAL(ct_export_gpt_names(in + 1, n - 1, out, names), CT_EINVAL); /* no wte */
        CU_ASSERT_EQUAL(ct_export_gpt_names(in, 2 + 18, out, names), CT_EINVAL); /* half a block */

        /* Through the writer: nanoGPT's names for "gpt", ours for any other model. */
        const char *dir = ct_test_tmpdir();
        char path[512];
        snprintf(path, sizeof path, "%s/g.safetensors", dir);
        /* The count of what the file holds: the tied lm_head.weight is one more. */
        CU_ASSERT_EQUAL_FATAL(ct_export_write_model(path, CT_EXPORT_SAFETENSORS, "gpt", in, n, META, 2), n + 1);
        size_t len;
        char *b = (char *)ct_test_read_file(path, &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b);
        uint64_t hl = get32((unsigned char *)b) | (uint64_t)get32((unsigned char *)b + 4) << 32;
        struct ct_json_doc d;
        CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, b + 8, hl, NULL), 0);
        CU_ASSERT_PTR_NOT_NULL(ct_json_get(d.root, "lm_head.weight"));
        CU_ASSERT_PTR_NOT_NULL(ct_json_get(d.root, "transformer.h.1.mlp.c_proj.bias"));
        CU_ASSERT_PTR_NULL(ct_json_get(d.root, in[0].name));
        ct_json_doc_free(&d);
        free(b);
        CU_ASSERT_EQUAL_FATAL(ct_export_write_model(path, CT_EXPORT_SAFETENSORS, "vit", in, n, META, 2), n);
        b = (char *)ct_test_read_file(path, &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b);
        hl = get32((unsigned char *)b) | (uint64_t)get32((unsigned char *)b + 4) << 32;
        CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, b + 8, hl, NULL), 0);
        CU_ASSERT_PTR_NOT_NULL(ct_json_get(d.root, in[0].name));
        CU_ASSERT_PTR_NULL(ct_json_get(d.root, "lm_head.weight"));
        ct_json_doc_free(&d);
        free(b);
        ct_test_rmtree(dir);
        ct_model_free(&m);
    }
}

static const struct ct_test_case cases[] = {
    {"npz_layout", test_npz_layout},
    {"safetensors_layout", test_safetensors_layout},
    {"bad_names_and_paths_leave_nothing", test_bad_names_and_paths_leave_nothing},
    {"gpt_nanogpt_names", test_gpt_nanogpt_names},
    {NULL, NULL},
};

int main(void) { return ct_test_run("export", cases); }
