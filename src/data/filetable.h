/* The samples of a data set spread over several files (cifar10 batches,
 * token shards): which file holds global sample i, and where in it. File f
 * holds samples [first[f], first[f + 1]), in the order the files were
 * listed; files may hold different numbers. Not a reader: the formats map
 * their files themselves and add each file's count here.
 *
 *     struct ct_filetable t = {0};
 *     rc = ct_filetable_add(&t, path, records_in_file, "records");   // per file
 *     int f = ct_filetable_find(&t, i);          // sample i: file f, row i - t.first[f]
 */
#ifndef CT_DATA_FILETABLE_H
#define CT_DATA_FILETABLE_H

#include <stddef.h>

/* Files a table holds: CT_DATA_MAX_FILES (data/dataset.h; dataset-impl.h
 * checks that they agree). A leaf of src/data: it includes no data header. */
#define CT_FILETABLE_MAX_FILES 16

struct ct_filetable {
    int n;                                    /* files */
    size_t first[CT_FILETABLE_MAX_FILES + 1]; /* file f holds samples [first[f], first[f + 1]) */
};

/* Appends a file of `count` samples. CT_ERANGE past CT_FILETABLE_MAX_FILES;
 * CT_EFORMAT when the data set passes 2^32 - 1 samples (the sampler's
 * indices are uint32), naming `path` and the samples' `unit` ("records",
 * "windows"). */
int ct_filetable_add(struct ct_filetable *t, const char *path, size_t count, const char *unit);

/* Samples in all files. */
static inline size_t ct_filetable_total(const struct ct_filetable *t) { return t->first[t->n]; }

/* The file holding sample i (i < ct_filetable_total(t); t->n >= 1): the last
 * f with first[f] <= i, by binary search (at most 4 steps for 16 files).
 * An empty file is never the answer. */
int ct_filetable_find(const struct ct_filetable *t, size_t i);

#endif
