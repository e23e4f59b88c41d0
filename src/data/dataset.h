/* An in-memory labelled image data set (Fashion-MNIST and friends).
 *
 * Images stay as the bytes the files hold (uint8): 47 MB for the 60k training
 * images instead of 188 MB of floats, per rank. Batches are normalized on the
 * way out through a 256-entry lookup table, x -> (x/255 - mean)/std, which is
 * bit-identical to normalizing the whole set in advance.
 *
 *     struct ct_dataset train;
 *     ct_dataset_load(&train, "/usr/share/datasets/fashion-mnist",
 *                     "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz",
 *                     0.2860, 0.3530);
 *     ct_dataset_gather(&train, idx, n, x, y);  // x: (n, C*H*W) floats, y: n labels
 *
 * Ranks on one node can share ONE copy of the images (ct_dataset_load_shared
 * with a table from ct_comm_shared_alloc): every rank reads the images file's
 * header and its own labels, one rank per node decodes the images into a
 * buffer all of them map, and errors reach every rank of the node.
 */
#ifndef CT_DATA_DATASET_H
#define CT_DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/shmem.h"

struct ct_dataset {
    size_t n;             /* number of samples */
    int c, h, w;          /* per-sample shape; c = 1 for IDX rank-3 images */
    size_t sample_numel;  /* c*h*w */
    int n_classes;        /* 1 + the largest label */
    uint8_t *images;      /* (n, c*h*w) raw bytes; owned, or node-shared (read only!) */
    uint8_t *labels;      /* (n); owned */
    float lut[256];       /* byte -> normalized float */
    struct ct_shared_alloc shared; /* the table `images` came from; all NULL: private */
};

/* Load images and labels (paths relative to `dir` unless absolute), check that
 * they agree (same count; labels rank 1; images rank 3 or 4) and build the
 * normalization table. Errors name the offending file. */
int ct_dataset_load(struct ct_dataset *ds, const char *dir, const char *images_file,
                    const char *labels_file, double mean, double std);
/* The same, with the images in a buffer from `sh` (sh NULL: a private copy,
 * exactly ct_dataset_load). Collective over the node's ranks when sh is
 * node-shared: every rank reads the images file's header (to learn the shape)
 * and its own labels; the one rank sh->alloc picks decodes the images into the
 * shared buffer, which the others then read and nobody may write. Every rank
 * of the node returns the same status, and on failure the same message (the
 * one of the lowest failing node rank, naming the file). The table is copied,
 * but what its ctx points to (the communicator) must outlive the data set. */
int ct_dataset_load_shared(struct ct_dataset *ds, const char *dir, const char *images_file,
                           const char *labels_file, double mean, double std,
                           const struct ct_shared_alloc *sh);
/* Frees the labels and the images. For a node-shared data set this is
 * collective over the node (the images are released through the table). */
void ct_dataset_free(struct ct_dataset *ds);
/* The path ct_dataset_load opens for `file`: dir + "/" + file (no doubled
 * slash), or file alone when it is absolute or dir is NULL. malloc'd; NULL
 * when out of memory. */
char *ct_dataset_path(const char *dir, const char *file);

/* Copy samples idx[0..n) into x (n, sample_numel), normalized, and their labels
 * into y (n). Indices must be < ds->n. */
void ct_dataset_gather(const struct ct_dataset *ds, const uint32_t *idx, size_t n, float *x,
                       int32_t *y);
/* The same for the contiguous range [first, first + n). */
void ct_dataset_gather_range(const struct ct_dataset *ds, size_t first, size_t n, float *x,
                             int32_t *y);

#endif
