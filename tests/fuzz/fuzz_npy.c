/* libFuzzer harness: the .npy header parser and the npy and cifar10 formats
 * of the data set interface (src/data/npy.c, npy_dataset.c, cifar.c).
 *
 * Input (README.md):  flags:u8  len:u32le A  B (the rest)
 * A always goes to ct_npy_parse_header in memory. flags:
 *   0x01  also write A as im.npy and open it with ct_dataset_open (format
 *         npy), layout (flags >> 4) % 3 (auto, nchw, nhwc)
 *   0x02  with 0x01: B as the labels file lb.npy; with 0x08: B as a second
 *         batch file
 *   0x04  with 0x01: format auto (detection by the magic) instead of npy
 *   0x08  write A as a.bin (and B as b.bin) and open them as cifar10
 * Invariants (abort otherwise): an accepted header is self-consistent
 * (shape product, bytes, offset, dtype) and survives a round trip through
 * the header numpy would write for it; ct_npy_check_size agrees with the
 * sums; an opened data set's samples are the file's bytes at the offsets
 * the header and the records say, its labels are the file's, in range,
 * its float32 values finite, and the gather's output finite. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "data/dataset.h"
#include "data/npy.h"
#include "fuzz_util.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CIFAR_REC 3073

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    ct_fuzz_dir();
    return 0;
}

static void fail(const char *what)
{
    fprintf(stderr, "fuzz_npy: %s\n", what);
    abort();
}

/* The header numpy writes for h (version h->major), then parsed again. */
static void round_trip(const struct ct_npy_header *h)
{
    char shape[1024], text[1200];
    ct_npy_shape_str(h, shape, sizeof shape);
    int tl = snprintf(text, sizeof text, "{'descr': '%s', 'fortran_order': False, 'shape': %s, }",
                      h->descr, shape);
    const size_t pre = h->major == 1 ? 10 : 12;
    const size_t hlen = (pre + (size_t)tl + 1 + 63) / 64 * 64 - pre;
    uint8_t buf[1400];
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)h->major;
    buf[7] = 0;
    for (size_t i = 0; i < pre - 8; i++)
        buf[8 + i] = (uint8_t)(hlen >> (8 * i));
    memcpy(buf + pre, text, (size_t)tl);
    memset(buf + pre + tl, ' ', hlen - (size_t)tl - 1);
    buf[pre + hlen - 1] = '\n';
    struct ct_npy_header b;
    if (ct_npy_parse_header("round trip", buf, pre + hlen, &b) != 0) {
        fprintf(stderr, "%s\n%s\n", text, ct_error_message());
        fail("an accepted header, written as numpy writes it, is refused");
    }
    if (b.major != h->major || strcmp(b.descr, h->descr) != 0 || b.dtype != h->dtype ||
        b.itemsize != h->itemsize || b.ndim != h->ndim ||
        memcmp(b.shape, h->shape, sizeof b.shape) != 0 || b.numel != h->numel ||
        b.data_bytes != h->data_bytes || b.data_offset != pre + hlen)
        fail("an accepted header does not survive a round trip");
}

static void check_header(const struct ct_npy_header *h, const uint8_t *a, size_t len)
{
    static const size_t itemsize[CT_NPY_DTYPE_COUNT] = {1, 4, 8, 4, 2};
    if (h->major < 1 || h->major > 3 || h->minor != 0)
        fail("accepted version");
    const size_t pre = h->major == 1 ? 10 : 12;
    size_t hlen = (size_t)a[8] | (size_t)a[9] << 8;
    if (h->major > 1)
        hlen |= (size_t)a[10] << 16 | (size_t)a[11] << 24;
    if (h->data_offset != pre + hlen || h->data_offset > len || a[h->data_offset - 1] != '\n')
        fail("data offset");
    if ((unsigned)h->dtype >= CT_NPY_DTYPE_COUNT || h->itemsize != itemsize[h->dtype])
        fail("dtype and itemsize");
    if (h->ndim < 0 || h->ndim > CT_NPY_MAX_DIMS)
        fail("ndim");
    uint64_t numel = 1;
    int zero = 0;
    for (int i = 0; i < h->ndim; i++)
        zero |= h->shape[i] == 0;
    for (int i = 0; i < h->ndim && !zero; i++)
        if (__builtin_mul_overflow(numel, h->shape[i], &numel))
            fail("an accepted shape overflows");
    if (zero)
        numel = 0;
    uint64_t bytes;
    if (numel != h->numel || __builtin_mul_overflow(numel, h->itemsize, &bytes) ||
        bytes != h->data_bytes || h->data_offset + bytes < bytes)
        fail("numel and data bytes");
    const int size_ok = ct_npy_check_size("input", h, len) == 0;
    if (size_ok != (h->data_offset + h->data_bytes == len))
        fail("ct_npy_check_size disagrees with the sum");
    /* The shape string fits whatever the buffer. */
    char s[64];
    for (size_t cap = 8; cap <= sizeof s; cap += 7) {
        memset(s, 'x', sizeof s);
        ct_npy_shape_str(h, s, cap);
        const size_t n = strnlen(s, cap);
        if (n >= cap || s[0] != '(' || s[n - 1] != ')')
            fail("ct_npy_shape_str");
    }
    round_trip(h);
}

/* An opened npy data set against the bytes of its files. */
static void check_npy(const struct ct_dataset *ds, const uint8_t *a, size_t alen, const uint8_t *b,
                      size_t blen, int labels)
{
    struct ct_npy_header h, hl;
    if (ct_npy_parse_header("images", a, alen, &h) != 0)
        fail("an opened images file has a header the parser refuses");
    if (ds->n == 0 || ds->n != h.shape[0] || (size_t)ds->c * ds->h * ds->w != ds->sample_numel ||
        ds->c < 1 || ds->c > CT_DATA_MAX_CHANNELS || ds->n * ds->sample_numel != h.numel ||
        h.data_offset + h.data_bytes != alen)
        fail("images shape");
    if (ds->layout != CT_DATA_LAYOUT_NCHW && ds->layout != CT_DATA_LAYOUT_NHWC)
        fail("layout");
    const size_t sb = ds->sample_numel * h.itemsize;
    const size_t last = ds->n - 1;
    if (memcmp(ds->ops->sample(ds, 0), a + h.data_offset, sb) != 0 ||
        memcmp(ds->ops->sample(ds, last), a + h.data_offset + last * sb, sb) != 0)
        fail("sample() is not the file's bytes");
    if (ds->dtype == CT_DATA_F32)
        for (size_t k = 0; k < h.numel; k++) {
            float v;
            memcpy(&v, a + h.data_offset + 4 * k, 4);
            if (!isfinite(v))
                fail("a non-finite float32 value was accepted");
        }
    if (!labels) {
        if (ds->targets != 0 || ds->y || ds->n_classes != 0 || ds->n_files != 1)
            fail("images alone have targets");
        return;
    }
    if (ct_npy_parse_header("labels", b, blen, &hl) != 0 || hl.ndim != 1 || hl.shape[0] != ds->n ||
        ds->targets != 1 || ds->n_files != 2)
        fail("labels header");
    int32_t max = 0;
    for (size_t i = 0; i < ds->n; i++) {
        int64_t v = 0;
        const uint8_t *p = b + hl.data_offset + i * hl.itemsize;
        if (hl.itemsize == 1)
            v = p[0];
        else if (hl.itemsize == 4) {
            int32_t t;
            memcpy(&t, p, 4);
            v = t;
        } else
            memcpy(&v, p, 8);
        if (v != ds->y[i] || v < 0 || v >= CT_DATA_MAX_TARGET)
            fail("labels are not the file's");
        max = ds->y[i] > max ? ds->y[i] : max;
    }
    if (ds->n_classes != max + 1)
        fail("n_classes");
}

/* An opened cifar10 data set against its records. */
static void check_cifar(const struct ct_dataset *ds, const uint8_t *a, size_t alen, const uint8_t *b,
                        size_t blen, int two)
{
    const size_t na = alen / CIFAR_REC, nb = two ? blen / CIFAR_REC : 0;
    if (alen % CIFAR_REC || (two && blen % CIFAR_REC) || ds->n != na + nb || ds->n_classes != 10 ||
        ds->sample_numel != CIFAR_REC - 1 || ds->n_files != 1 + two)
        fail("cifar10 shape");
    for (size_t i = 0; i < ds->n; i++) {
        const uint8_t *rec = i < na ? a + i * CIFAR_REC : b + (i - na) * CIFAR_REC;
        if (rec[0] > 9 || ds->y[i] != rec[0] ||
            memcmp(ds->ops->sample(ds, i), rec + 1, CIFAR_REC - 1) != 0)
            fail("a cifar10 record is not the file's");
    }
}

/* The first sample through the gather: finite floats, the labels copied. */
static void check_gather(const struct ct_dataset *ds)
{
    float *x = malloc(ds->sample_numel * sizeof *x);
    int32_t y[1];
    if (!x)
        abort();
    ct_dataset_gather_range(ds, 0, 1, x, y);
    for (size_t k = 0; k < ds->sample_numel; k++)
        if (!isfinite(x[k]))
            fail("the gather made a non-finite value");
    if (ds->targets && y[0] != ds->y[0])
        fail("the gather's label");
    free(x);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const unsigned flags = data[0];
    const uint8_t *p = data + 1, *a, *b;
    size_t n = size - 1, alen, blen;
    ct_fuzz_take(&p, &n, &a, &alen);
    b = p;
    blen = n;

    struct ct_npy_header h;
    int rc = ct_npy_parse_header("input", a, alen, &h);
    ct_fuzz_verbose("ct_npy_parse_header", rc);
    if (rc == 0)
        check_header(&h, a, alen);

    if (flags & 0x01) {
        const int labels = (flags & 0x02) != 0;
        ct_fuzz_write("im.npy", a, alen);
        if (labels)
            ct_fuzz_write("lb.npy", b, blen);
        struct ct_dataset_params prm = ct_dataset_default_params();
        prm.format = flags & 0x04 ? CT_DATA_FORMAT_AUTO : CT_DATA_FORMAT_NPY;
        prm.layout = (enum ct_data_layout)((flags >> 4) % 3);
        prm.dir = ct_fuzz_dir();
        prm.images = "im.npy";
        prm.labels = labels ? "lb.npy" : NULL;
        struct ct_dataset ds;
        rc = ct_dataset_open(&ds, &prm);
        ct_fuzz_verbose("ct_dataset_open (npy)", rc);
        if (rc == 0) {
            if (ds.format != CT_DATA_FORMAT_NPY)
                fail("an npy open made another format");
            check_npy(&ds, a, alen, b, blen, labels);
            check_gather(&ds);
            ct_dataset_close(&ds);
        }
    }
    if (flags & 0x08) {
        const int two = (flags & 0x02) != 0;
        ct_fuzz_write("a.bin", a, alen);
        if (two)
            ct_fuzz_write("b.bin", b, blen);
        struct ct_dataset_params prm = ct_dataset_default_params();
        prm.format = CT_DATA_FORMAT_CIFAR10;
        prm.dir = ct_fuzz_dir();
        prm.images = two ? "a.bin,b.bin" : "a.bin";
        struct ct_dataset ds;
        rc = ct_dataset_open(&ds, &prm);
        ct_fuzz_verbose("ct_dataset_open (cifar10)", rc);
        if (rc == 0) {
            check_cifar(&ds, a, alen, b, blen, two);
            check_gather(&ds);
            ct_dataset_close(&ds);
        }
    }
    return 0;
}
