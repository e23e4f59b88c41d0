/* The .npy format of the data set interface (ct_dataset_npy_ops,
 * data/dataset.h), over the header parser of npy.c (data/npy.h).
 *
 * Dims legend: N = samples, C = channels, H = height, W = width,
 * S = C*H*W elements per sample.
 *
 * The data set: an images file, (N, H, W) or (N, H, W, C) or (N, C, H, W),
 * uint8 or float32, memory-mapped read-only and used in place (never copied:
 * the page cache is the node's one shared copy); and a labels file, (N,) of
 * uint8, int32 or int64, read once into ds->y. Float32 images are scanned
 * once at open for non-finite values, so a NaN is refused with its sample
 * index instead of turning into a NaN loss a thousand steps later. One
 * images file: a list of files is cifar10's and tokens' (data/filetable.h).
 */
#include "data/npy.h"

#include "core/error.h"
#include "core/liveness.h"
#include "data/dataset-impl.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Float32 images are read in place from the mapping, as the host's floats. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "npy_dataset.c uses little-endian float32 data in place: a big-endian host needs "
               "a swap");

struct npy_ds {
    struct ct__mapping map; /* the whole images file */
    const uint8_t *data;    /* (N, S) elements: map.data + data_offset */
    size_t sample_bytes;    /* S * itemsize */
};

/* The image shape from the header and the layout (auto: a last axis of 1,
 * 3 or 4 is channels). */
static int images_shape(struct ct_dataset *ds, const struct ct_npy_header *h, const char *path,
                        enum ct_data_layout layout)
{
    char shape[96];
    ct_npy_shape_str(h, shape, sizeof shape);
    if (h->dtype != CT_NPY_U8 && h->dtype != CT_NPY_F32)
        return ct_error_set(CT_EFORMAT,
                            "%s: images of dtype '%s' (%s): expected '|u1' (uint8) or '<f4' "
                            "(float32)",
                            path, h->descr, ct_npy_dtype_name(h->dtype));
    if (h->ndim != 3 && h->ndim != 4)
        return ct_error_set(CT_EFORMAT,
                            "%s: images of shape %s: expected (N, H, W), (N, H, W, C) or "
                            "(N, C, H, W)",
                            path, shape);
    for (int i = 0; i < h->ndim; i++)
        if (h->shape[i] == 0)
            return ct_error_set(CT_EFORMAT,
                                "%s: images of shape %s: axis %d is empty (expected at least one "
                                "image of at least 1x1 pixels)",
                                path, shape, i);
    if ((unsigned)layout >= CT_DATA_LAYOUT_COUNT)
        return ct_error_set(CT_EINVAL, "%s: data.layout %d is not a layout", path, (int)layout);
    uint64_t c = 1, hh = h->shape[1], ww = h->shape[2];
    enum ct_data_layout l = layout == CT_DATA_LAYOUT_AUTO ? CT_DATA_LAYOUT_NCHW : layout;
    if (h->ndim == 4) {
        const uint64_t last = h->shape[3];
        if (layout == CT_DATA_LAYOUT_AUTO)
            l = last == 1 || last == 3 || last == 4 ? CT_DATA_LAYOUT_NHWC : CT_DATA_LAYOUT_NCHW;
        if (l == CT_DATA_LAYOUT_NHWC)
            c = last;
        else
            c = h->shape[1], hh = h->shape[2], ww = h->shape[3];
        if (c > CT_DATA_MAX_CHANNELS)
            return ct_error_set(CT_EFORMAT,
                                "%s: images of shape %s read as %s (data.layout = %s%s) have %llu "
                                "channels: at most %d",
                                path, shape, l == CT_DATA_LAYOUT_NHWC ? "(N, H, W, C)" : "(N, C, H, W)",
                                ct_data_layout_name(layout),
                                layout == CT_DATA_LAYOUT_AUTO ? ": a last axis of 1, 3 or 4 is channels"
                                                              : "",
                                (unsigned long long)c, CT_DATA_MAX_CHANNELS);
    }
    if (h->shape[0] > UINT32_MAX || hh > INT_MAX || ww > INT_MAX)
        return ct_error_set(CT_EFORMAT,
                            "%s: images of shape %s: at most %lu images of at most %d x %d pixels",
                            path, shape, (unsigned long)UINT32_MAX, INT_MAX, INT_MAX);
    ds->n = (size_t)h->shape[0];
    ds->c = (int)c;
    ds->h = (int)hh;
    ds->w = (int)ww;
    ds->sample_numel = (size_t)(h->numel / h->shape[0]);
    ds->dtype = h->dtype == CT_NPY_U8 ? CT_DATA_U8 : CT_DATA_F32;
    ds->layout = l;
    return 0;
}

/* The labels file: (N,) of uint8, int32 or int64, each in [0, 65536),
 * into ds->y (malloc'd). */
static int read_labels(struct ct_dataset *ds, const char *path, const char *images_path)
{
    struct ct_npy_header h;
    uint64_t size;
    int rc = ct_npy_read_header(path, &h, &size);
    if (rc < 0)
        return rc;
    char shape[96];
    ct_npy_shape_str(&h, shape, sizeof shape);
    if (h.dtype != CT_NPY_U8 && h.dtype != CT_NPY_I32 && h.dtype != CT_NPY_I64)
        return ct_error_set(CT_EFORMAT,
                            "%s: labels of dtype '%s' (%s): expected integers: '|u1' (uint8), "
                            "'<i4' (int32) or '<i8' (int64)",
                            path, h.descr, ct_npy_dtype_name(h.dtype));
    if (h.ndim != 1)
        return ct_error_set(CT_EFORMAT, "%s: labels of shape %s: expected (N,) (save arr.reshape(-1))",
                            path, shape);
    if (h.shape[0] != ds->n)
        return ct_error_set(CT_EFORMAT, "%s: %llu labels, but %s has %zu images", path,
                            (unsigned long long)h.shape[0], images_path, ds->n);
    struct ct__mapping m;
    if ((rc = ct__data_map(path, &m)) < 0)
        return rc;
    if (m.size != size) {
        ct__data_unmap(&m);
        return ct_error_set(CT_EFORMAT, "%s: the file changed while opening: %zu bytes, not %llu",
                            path, m.size, (unsigned long long)size);
    }
    if (!(ds->y = malloc((ds->n ? ds->n : 1) * sizeof *ds->y))) {
        ct__data_unmap(&m);
        return ct_error_set(CT_ENOMEM, "out of memory for %zu labels", ds->n);
    }
    /* Little-endian by the header's word, whatever the host, and through
     * bytes: the data offset need not be aligned for int32 or int64. */
    const uint8_t *p = m.data + h.data_offset;
    int32_t max = 0;
    for (size_t i = 0; i < ds->n; i++, p += h.itemsize) {
        uint64_t u = 0;
        for (size_t b = 0; b < h.itemsize; b++)
            u |= (uint64_t)p[b] << (8 * b);
        /* sign-extend int32 and int64 */
        const int64_t v = h.itemsize == 1 ? (int64_t)u
                          : h.itemsize == 4 ? (int64_t)(int32_t)(uint32_t)u
                                            : (int64_t)u;
        if (v < 0 || v >= CT_DATA_MAX_TARGET) {
            ct__data_unmap(&m);
            free(ds->y);
            ds->y = NULL;
            return ct_error_set(CT_EFORMAT,
                                "%s: label %zu is %lld: expected 0 <= label < %d", path, i,
                                (long long)v, CT_DATA_MAX_TARGET);
        }
        ds->y[i] = (int32_t)v;
        if (ds->y[i] > max)
            max = ds->y[i];
    }
    ct__data_unmap(&m);
    ds->targets = 1;
    ds->n_classes = max + 1;
    return 0;
}

/* Every float of the mapped images is finite: the first one that is not is
 * refused with its sample. A NaN or infinity has all exponent bits set;
 * counting those per block keeps the loop branch-free (vectorized), and
 * only a block that holds one is searched again. */
static int check_finite(const struct ct_dataset *ds, const struct npy_ds *st, const char *path)
{
    const size_t total = ds->n * ds->sample_numel;
    const uint32_t *u = (const uint32_t *)(const void *)st->data;
    enum { BLOCK = 4096 };
    size_t marked = 0;
    for (size_t at = 0; at < total; at += BLOCK) {
        const size_t len = total - at < BLOCK ? total - at : BLOCK;
        unsigned bad = 0;
        for (size_t k = 0; k < len; k++)
            bad += (u[at + k] & 0x7f800000u) == 0x7f800000u;
        if (bad) {
            size_t k = 0;
            while ((u[at + k] & 0x7f800000u) != 0x7f800000u)
                k++;
            float v;
            memcpy(&v, &u[at + k], sizeof v);
            const size_t e = at + k;
            return ct_error_set(CT_EFORMAT,
                                "%s: sample %zu holds a non-finite value (%g, element %zu of the "
                                "sample): float32 images must be finite",
                                path, e / ds->sample_numel, (double)v, e % ds->sample_numel);
        }
        /* A liveness mark per 64 MiB scanned: a large set takes a while. */
        if ((at + len) * 4 - marked >= ((size_t)64 << 20)) {
            ct_liveness_mark(-1);
            marked = (at + len) * 4;
        }
    }
    return 0;
}

/* Checks the images header and the labels (all before anything sized by a
 * header is mapped or allocated), maps the images, scans float32 data. */
static int npy_open_files(struct ct_dataset *ds, const struct ct_dataset_params *p,
                          struct npy_ds *st, const char *images, const char *labels)
{
    struct ct_npy_header h;
    uint64_t size;
    int rc = ct_npy_read_header(images, &h, &size);
    if (rc == 0)
        rc = images_shape(ds, &h, images, p->layout);
    if (rc == 0 && h.dtype == CT_NPY_F32 && h.data_offset % 4 != 0)
        rc = ct_error_set(CT_EFORMAT,
                          "%s: float32 data at offset %zu, not a multiple of 4 (numpy pads its "
                          "headers to 64 bytes)",
                          images, h.data_offset);
    if (rc == 0 && labels)
        rc = read_labels(ds, labels, images);
    if (rc == 0)
        rc = ct__data_map(images, &st->map);
    if (rc == 0 && st->map.size != size)
        rc = ct_error_set(CT_EFORMAT, "%s: the file changed while opening: %zu bytes, not %llu",
                          images, st->map.size, (unsigned long long)size);
    if (rc < 0)
        return rc;
    st->data = st->map.data + h.data_offset;
    st->sample_bytes = ds->sample_numel * h.itemsize;
    if (ds->dtype == CT_DATA_F32 && (rc = check_finite(ds, st, images)) < 0)
        return rc;
    if ((rc = ct__data_add_file(ds, images)) < 0)
        return rc;
    return labels ? ct__data_add_file(ds, labels) : 0;
}

static int npy_open(struct ct_dataset *ds, const struct ct_dataset_params *p)
{
    const char *dir = p->dir && p->dir[0] ? p->dir : NULL;
    const int have_labels = p->labels && p->labels[0];
    struct npy_ds *st = calloc(1, sizeof *st);
    char *images = p->images && p->images[0] ? ct_dataset_path(dir, p->images) : NULL;
    char *labels = have_labels ? ct_dataset_path(dir, p->labels) : NULL;
    int rc = 0;
    if (!p->images || !p->images[0])
        rc = ct_error_set(CT_EINVAL, "data: no images file given");
    else if (!st || !images || (have_labels && !labels))
        rc = ct_error_set(CT_ENOMEM, "out of memory");
    else if (strchr(p->images, ','))
        rc = ct_error_set(CT_EINVAL, "%s: a list of files: only cifar10 takes several", images);
    if (rc == 0)
        rc = npy_open_files(ds, p, st, images, labels);
    /* Nothing here is collective, but a node-shared open returns the same
     * status on every rank of the node (dataset.h). */
    if (p->shared)
        rc = p->shared->ready(p->shared->ctx, rc);
    free(images);
    free(labels);
    if (rc < 0) {
        if (st)
            ct__data_unmap(&st->map);
        free(st);
        free(ds->y);
        ds->y = NULL;
        return rc;
    }
    if (!have_labels) {
        /* `data inspect` and `data stats` open images alone. */
        ds->targets = 0;
        ds->n_classes = 0;
    }
    ds->impl = st;
    return 0;
}

static const void *npy_sample(const struct ct_dataset *ds, size_t i)
{
    const struct npy_ds *st = ds->impl;
    return st->data + i * st->sample_bytes;
}

static void npy_close(struct ct_dataset *ds)
{
    struct npy_ds *st = ds->impl;
    if (!st)
        return;
    ct__data_unmap(&st->map);
    free(st);
    ds->impl = NULL;
}

const struct ct_dataset_ops ct_dataset_npy_ops = {
    .name = "npy", .open = npy_open, .sample = npy_sample, .close = npy_close};
