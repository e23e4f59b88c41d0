/* CIFAR-10 binary batches: the cifar10 format of the data set interface
 * (ct_dataset_cifar10_ops, data/dataset.h).
 *
 * Dims legend: N = records (samples) over all files, C = 3 channels,
 * H = W = 32.
 *
 * A batch file (data_batch_1.bin ... data_batch_5.bin, test_batch.bin) is a
 * run of 3073-byte records: one label byte 0..9, then the image as 1024 red,
 * 1024 green and 1024 blue bytes, each plane row-major 32x32: NCHW uint8, so
 * a sample is the record's last 3072 bytes, used in place. The files of one
 * data set (a comma list) are each memory-mapped read-only, never copied;
 * sample i is found through the prefix counts of records per file
 * (data/filetable.h: files may hold different numbers). The labels are
 * copied into ds->y at open, which checks each one. There is no header and no magic: the only checks are the
 * file sizes and the label bytes. It deliberately is not a CIFAR-100 reader
 * (two label bytes, 3074-byte records) nor a reader of the Python pickles.
 */
#include "core/error.h"
#include "core/liveness.h"
#include "data/dataset-impl.h"
#include "data/filetable.h"

#include <stdlib.h>
#include <string.h>

#define CIFAR_LABEL_BYTES 1
#define CIFAR_C 3
#define CIFAR_H 32
#define CIFAR_W 32
#define CIFAR_PIXELS (CIFAR_C * CIFAR_H * CIFAR_W)           /* 3072 */
#define CIFAR_RECORD (CIFAR_LABEL_BYTES + CIFAR_PIXELS)     /* 3073 */
#define CIFAR_CLASSES 10

struct cifar_ds {
    int n_files;
    struct ct__mapping map[CT_DATA_MAX_FILES];
    struct ct_filetable files; /* which file holds sample i */
};

static void cifar_release(struct cifar_ds *st)
{
    if (!st)
        return;
    for (int f = 0; f < st->n_files; f++)
        ct__data_unmap(&st->map[f]);
    free(st);
}

/* Maps every file and checks its size; fills the file table. */
static int cifar_map_files(struct cifar_ds *st, char **paths, int n)
{
    for (int f = 0; f < n; f++) {
        int rc = ct__data_map(paths[f], &st->map[f]);
        if (rc < 0)
            return rc;
        st->n_files = f + 1;
        const size_t size = st->map[f].size;
        if (size == 0 || size % CIFAR_RECORD != 0)
            return ct_error_set(CT_EFORMAT,
                                "%s: %zu bytes is not a whole, non-zero number of %d-byte CIFAR-10 "
                                "records (1 label byte + 3x32x32 pixel bytes; %zu whole records "
                                "and %zu bytes over)",
                                paths[f], size, CIFAR_RECORD, size / CIFAR_RECORD,
                                size % CIFAR_RECORD);
        if ((rc = ct_filetable_add(&st->files, paths[f], size / CIFAR_RECORD, "records")) < 0)
            return rc;
    }
    return 0;
}

/* The label bytes into ds->y, each checked. */
static int cifar_read_labels(struct ct_dataset *ds, const struct cifar_ds *st, char **paths)
{
    if (!(ds->y = malloc(ds->n * sizeof *ds->y)))
        return ct_error_set(CT_ENOMEM, "out of memory for %zu labels", ds->n);
    for (int f = 0; f < st->n_files; f++) {
        const uint8_t *rec = st->map[f].data;
        int32_t *y = ds->y + st->files.first[f];
        const size_t n = st->files.first[f + 1] - st->files.first[f];
        for (size_t r = 0; r < n; r++, rec += CIFAR_RECORD) {
            if (rec[0] >= CIFAR_CLASSES)
                return ct_error_set(CT_EFORMAT,
                                    "%s: record %zu (byte offset %zu) has label %u: expected 0..%d "
                                    "(CIFAR-10 has %d classes)",
                                    paths[f], r, r * CIFAR_RECORD, rec[0], CIFAR_CLASSES - 1,
                                    CIFAR_CLASSES);
            y[r] = rec[0];
        }
        ct_liveness_mark(-1);
    }
    return 0;
}

static int cifar_open(struct ct_dataset *ds, const struct ct_dataset_params *p)
{
    char **paths = NULL;
    int n = 0, rc = 0;
    struct cifar_ds *st = NULL;
    if (p->labels && p->labels[0])
        rc = ct_error_set(CT_EINVAL,
                          "data.train_labels/test_labels must be empty for cifar10: the labels are "
                          "inside the records (found '%s')",
                          p->labels);
    else if (!p->images || !p->images[0])
        rc = ct_error_set(CT_EINVAL, "data: no images file given (cifar10: a comma list of batch files)");
    else if (!(st = calloc(1, sizeof *st)))
        rc = ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0)
        rc = ct__data_split_list(p->dir, p->images, "cifar10 batch files", &paths, &n);
    if (rc == 0)
        rc = cifar_map_files(st, paths, n);
    if (rc == 0) {
        ds->n = ct_filetable_total(&st->files);
        ds->c = CIFAR_C;
        ds->h = CIFAR_H;
        ds->w = CIFAR_W;
        ds->sample_numel = CIFAR_PIXELS;
        ds->targets = 1;
        ds->n_classes = CIFAR_CLASSES;
        ds->dtype = CT_DATA_U8;
        ds->layout = CT_DATA_LAYOUT_NCHW;
        rc = cifar_read_labels(ds, st, paths);
    }
    for (int f = 0; rc == 0 && f < n; f++)
        rc = ct__data_add_file(ds, paths[f]);
    /* Nothing here is collective, but a node-shared open returns the same
     * status on every rank of the node (dataset.h). */
    if (p->shared)
        rc = p->shared->ready(p->shared->ctx, rc);
    ct__data_free_list(paths, n);
    if (rc < 0) {
        cifar_release(st);
        free(ds->y);
        ds->y = NULL;
        return rc;
    }
    ds->impl = st;
    return 0;
}

static const void *cifar_sample(const struct ct_dataset *ds, size_t i)
{
    const struct cifar_ds *st = ds->impl;
    const int f = ct_filetable_find(&st->files, i);
    return st->map[f].data + (i - st->files.first[f]) * CIFAR_RECORD + CIFAR_LABEL_BYTES;
}

static void cifar_close(struct ct_dataset *ds)
{
    cifar_release(ds->impl);
    ds->impl = NULL;
}

const struct ct_dataset_ops ct_dataset_cifar10_ops = {
    .name = "cifar10", .open = cifar_open, .sample = cifar_sample, .close = cifar_close};
