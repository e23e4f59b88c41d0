/* A labelled image data set held in memory as raw bytes (see dataset.h).
 *
 * Dims legend: N = samples, C = channels, H = height, W = width,
 * S = C*H*W = sample_numel, B = samples in one gather.
 *
 * This file pairs an images IDX file with a labels IDX file, checks that they
 * describe the same samples, and hands out normalized float batches through a
 * 256-entry table. It deliberately is not a sampler or a sharder: which
 * indices a rank asks for (shuffling, splitting across ranks) is decided by
 * the caller, and there is no augmentation.
 *
 * The images may live in a buffer that the ranks of a node share: the
 * allocation comes through a table of functions (core/shmem.h) because this
 * layer knows nothing of MPI. A private load is the same code with a table
 * of malloc and free, so both paths check and report exactly alike.
 */
#include "data/dataset.h"

#include "core/error.h"
#include "data/idx.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

char *ct_dataset_path(const char *dir, const char *file)
{
    size_t dl = (dir && file[0] != '/') ? strlen(dir) : 0;
    size_t fl = strlen(file);
    /* A dir given as "data/" should not produce "data//x" in messages. */
    int slash = dl > 0 && dir[dl - 1] != '/';
    char *p = malloc(dl + (size_t)slash + fl + 1);
    if (!p)
        return NULL;
    memcpy(p, dir, dl);
    if (slash)
        p[dl] = '/';
    memcpy(p + dl + (size_t)slash, file, fl + 1);
    return p;
}

/* lut[v] is what PyTorch's reference pipeline makes of byte v. torchvision's
 * ToTensor computes img.float().div(255) and Normalize computes
 * t.sub_(mean).div_(std) with mean and std turned into float32 tensors: three
 * float32 operations, each rounded. Evaluating (v/255 - mean)/std in double
 * and rounding once differs from that in the last bit for some v, and the
 * golden tests compare against PyTorch, so we repeat its roundings exactly.
 * (On the targets we build for, float arithmetic is evaluated in float:
 * FLT_EVAL_METHOD == 0; there is no multiply-add here to contract.) */
static void dataset_build_lut(float lut[256], double mean, double std)
{
    const float m = (float)mean;
    const float s = (float)std;
    for (int v = 0; v < 256; v++) {
        float x = (float)v / 255.0f;
        x = x - m;
        x = x / s;
        lut[v] = x;
    }
}

static int dataset_check_images(const struct ct_idx *im, const char *path, struct ct_dataset *ds)
{
    if (im->rank != 3 && im->rank != 4)
        return ct_error_set(CT_EFORMAT,
                            "%s: expected images of rank 3 (n,h,w) or 4 (n,c,h,w), found rank %d",
                            path, im->rank);
    /* idx.c bounds the product of the dims by CT_IDX_MAX_BYTES, but a single
     * dim (with the others 1) can still exceed what an int holds. */
    for (int i = 1; i < im->rank; i++)
        if (im->dims[i] > INT_MAX)
            return ct_error_set(CT_EFORMAT, "%s: image dimension %d is %lu, larger than %d", path,
                                i, (unsigned long)im->dims[i], INT_MAX);
    int off = im->rank - 3;
    ds->n = im->dims[0];
    ds->c = off ? (int)im->dims[1] : 1;
    ds->h = (int)im->dims[1 + off];
    ds->w = (int)im->dims[2 + off];
    ds->sample_numel = im->numel / im->dims[0];
    return 0;
}

static int dataset_check_labels(const struct ct_idx *lb, const char *labels_path,
                                const char *images_path, size_t n_images)
{
    if (lb->rank != 1)
        return ct_error_set(CT_EFORMAT, "%s: expected labels of rank 1 (n), found rank %d",
                            labels_path, lb->rank);
    if (lb->dims[0] != n_images)
        return ct_error_set(CT_EFORMAT, "%s: %lu labels but %s has %zu images", labels_path,
                            (unsigned long)lb->dims[0], images_path, n_images);
    return 0;
}

/* The table behind a private load: one rank, its own malloc'd copy. */
static int private_alloc(void *ctx, size_t bytes, void **ptr, int *fill)
{
    (void)ctx;
    *ptr = malloc(bytes ? bytes : 1);
    *fill = 1;
    if (!*ptr)
        return ct_error_set(CT_ENOMEM, "out of memory allocating %zu bytes for the images", bytes);
    return 0;
}

static int private_ready(void *ctx, int rc)
{
    (void)ctx;
    return rc;
}

static void private_release(void *ctx, void *ptr)
{
    (void)ctx;
    free(ptr);
}

static const struct ct_shared_alloc dataset_private = {
    .alloc = private_alloc,
    .ready = private_ready,
    .release = private_release,
};

/* What every rank does alone: the images file's header (shape and size) and
 * the whole labels file, checked against each other. */
static int dataset_read_meta(struct ct_dataset *ds, struct ct_idx *im, const char *images_path,
                             const char *labels_path)
{
    int rc = ct_idx_read_header(im, images_path);
    if (rc < 0)
        return rc;
    if ((rc = dataset_check_images(im, images_path, ds)) < 0)
        return rc;
    struct ct_idx lb;
    if ((rc = ct_idx_load(&lb, labels_path)) < 0)
        return rc;
    if ((rc = dataset_check_labels(&lb, labels_path, images_path, ds->n)) < 0) {
        ct_idx_free(&lb);
        return rc;
    }
    /* Labels are IDX unsigned bytes, so they are below 256 by construction
     * and no range check is needed here (the class count stays far below any
     * limit the models care about). */
    unsigned max_label = 0;
    for (size_t i = 0; i < ds->n; i++)
        if (lb.data[i] > max_label)
            max_label = lb.data[i];
    ds->n_classes = (int)max_label + 1;
    ds->labels = lb.data; /* ownership moves to ds */
    return 0;
}

int ct_dataset_load_shared(struct ct_dataset *ds, const char *dir, const char *images_file,
                           const char *labels_file, double mean, double std,
                           const struct ct_shared_alloc *sh)
{
    memset(ds, 0, sizeof *ds);
    const struct ct_shared_alloc *a = sh ? sh : &dataset_private;
    /* Every step that can fail on one rank alone ends in a status that goes
     * through a->ready() before the next collective, so a rank that failed
     * never leaves its node peers waiting in alloc(). */
    int rc = 0;
    struct ct_idx im = {0};
    char *images_path = NULL, *labels_path = NULL;
    void *buf = NULL;
    int fill = 0;
    if (!isfinite(mean) || !isfinite(std) || !(std > 0))
        rc = ct_error_set(CT_EINVAL,
                          "dataset normalization: std must be > 0 and both finite, got mean %g, "
                          "std %g",
                          mean, std);
    if (rc == 0) {
        images_path = ct_dataset_path(dir, images_file);
        labels_path = ct_dataset_path(dir, labels_file);
        if (!images_path || !labels_path)
            rc = ct_error_set(CT_ENOMEM, "out of memory joining data set paths");
    }
    if (rc == 0)
        rc = dataset_read_meta(ds, &im, images_path, labels_path);
    if ((rc = a->ready(a->ctx, rc)) < 0)
        goto fail;

    if ((rc = a->alloc(a->ctx, im.numel, &buf, &fill)) < 0)
        goto fail;
    rc = fill ? ct_idx_load_into(images_path, &im, buf) : 0;
    if ((rc = a->ready(a->ctx, rc)) < 0) {
        a->release(a->ctx, buf);
        goto fail;
    }
    ds->images = buf;
    if (sh)
        ds->shared = *sh;
    dataset_build_lut(ds->lut, mean, std);
    free(labels_path);
    free(images_path);
    return 0;

fail:
    free(ds->labels);
    free(labels_path);
    free(images_path);
    memset(ds, 0, sizeof *ds);
    return rc;
}

int ct_dataset_load(struct ct_dataset *ds, const char *dir, const char *images_file,
                    const char *labels_file, double mean, double std)
{
    return ct_dataset_load_shared(ds, dir, images_file, labels_file, mean, std, NULL);
}

void ct_dataset_free(struct ct_dataset *ds)
{
    if (!ds)
        return;
    if (ds->shared.release)
        ds->shared.release(ds->shared.ctx, ds->images);
    else
        free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

/* One sample: S bytes through the table into S floats. */
static void dataset_copy_sample(const struct ct_dataset *ds, size_t sample, float *x)
{
    const uint8_t *src = ds->images + sample * ds->sample_numel; /* (S) */
    for (size_t k = 0; k < ds->sample_numel; k++)
        x[k] = ds->lut[src[k]];
}

/* The bytes of one sample into the cache, ahead of its copy. */
static void dataset_prefetch_sample(const struct ct_dataset *ds, size_t sample)
{
    const char *p = (const char *)(ds->images + sample * ds->sample_numel);
    for (size_t k = 0; k < ds->sample_numel; k += 64)
        __builtin_prefetch(p + k);
}

/* A shuffled batch reads rows scattered over the whole image array (47 MB for
 * Fashion-MNIST, far beyond the caches), each a few cache lines: the copy
 * waits on memory, not on the table. Prefetching the rows two samples ahead
 * halves the gather (128 x 784 bytes: 76 -> 39 us, Xeon, best of 200). */
enum { GATHER_PREFETCH_AHEAD = 2 };

void ct_dataset_gather(const struct ct_dataset *ds, const uint32_t *idx, size_t n, float *x,
                       int32_t *y)
{
    /* x: (B, S), y: (B) */
    for (size_t i = 0; i < n && i < GATHER_PREFETCH_AHEAD; i++)
        dataset_prefetch_sample(ds, idx[i]);
    for (size_t i = 0; i < n; i++) {
        assert(idx[i] < ds->n);
        if (i + GATHER_PREFETCH_AHEAD < n && idx[i + GATHER_PREFETCH_AHEAD] < ds->n)
            dataset_prefetch_sample(ds, idx[i + GATHER_PREFETCH_AHEAD]);
        dataset_copy_sample(ds, idx[i], x + i * ds->sample_numel);
        y[i] = ds->labels[idx[i]];
    }
}

void ct_dataset_gather_range(const struct ct_dataset *ds, size_t first, size_t n, float *x,
                             int32_t *y)
{
    /* x: (B, S), y: (B) */
    assert(first <= ds->n && n <= ds->n - first);
    for (size_t i = 0; i < n; i++) {
        dataset_copy_sample(ds, first + i, x + i * ds->sample_numel);
        y[i] = ds->labels[first + i];
    }
}
