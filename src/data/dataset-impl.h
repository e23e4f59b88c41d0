/* What the format files (idx.c, npy_dataset.c, cifar.c, tokens.c) share
 * with dataset.c; not part of the public API. A format of several files
 * finds a sample's file with data/filetable.h.
 *
 * A format's open() must, on success, fill in ds: n, c, h, w, sample_numel,
 * targets, n_classes, dtype, layout, y (malloc'd, (N, K) int32, every value
 * in [0, CT_DATA_MAX_TARGET)), impl (its own state), and add every file it
 * read with ct__data_add_file (the session hashes them for the manifest).
 * On failure it releases what it took and leaves the fields it set to be
 * cleared by dataset.c (which frees ds->files and ds->y).
 */
#ifndef CT_DATA_DATASET_IMPL_H
#define CT_DATA_DATASET_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include "data/dataset.h"
#include "data/filetable.h"

/* A multi-file format's table (data/filetable.h) holds all its files. */
_Static_assert(CT_FILETABLE_MAX_FILES == CT_DATA_MAX_FILES,
               "data/filetable.h and data/dataset.h disagree on the most files of a data set");

/* A whole file mapped read-only (MAP_SHARED: the page cache's copy). */
struct ct__mapping {
    const uint8_t *data;
    size_t size;
};

/* Maps `path`; CT_ENOENT / CT_EIO naming the file. An empty file maps to
 * data NULL, size 0. */
int ct__data_map(const char *path, struct ct__mapping *m);
void ct__data_unmap(struct ct__mapping *m);

/* Records `path` (copied) among ds->files; CT_ERANGE past CT_DATA_MAX_FILES. */
int ct__data_add_file(struct ct_dataset *ds, const char *path);

/* The comma-separated items of `list` (spaces around items ignored; an
 * empty item is an error naming `what`), each joined to `dir` with
 * ct_dataset_path: *n paths, malloc'd, freed with ct__data_free_list. */
int ct__data_split_list(const char *dir, const char *list, const char *what, char ***paths, int *n);
void ct__data_free_list(char **paths, int n);

#endif
