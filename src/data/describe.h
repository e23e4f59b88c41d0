/* A data file described in words, before a config points at it: what
 * `ctrain-dist data inspect` and `data stats` print, as functions writing
 * to a FILE * (the numbers themselves: data/stats.h).
 *
 *     struct ct_data_probe p = ct_data_probe_default();
 *     p.files[0] = "train-images-idx3-ubyte.gz";
 *     p.n_files = 1;
 *     rc = ct_data_describe_header(stdout, &p);   // header facts, no pixel read
 *     rc = ct_data_describe_stats(stdout, &p);    // every value read
 *
 * Dims legend: N = samples, C, H, W = an image's channels, height, width;
 * for token shards, window = model.block + 1 tokens.
 */
#ifndef CT_DATA_DESCRIBE_H
#define CT_DATA_DESCRIBE_H

#include <stdio.h>

#include "data/dataset.h"
#include "data/idx.h"

/* The file(s) to describe and how to read them. */
struct ct_data_probe {
    const char *files[2]; /* IMAGES [LABELS]; a comma list for cifar10 and tokens */
    int n_files;
    enum ct_data_format format; /* auto: by the first bytes */
    enum ct_data_layout layout;
    int window, vocab; /* token shards; 0: not given */
};
struct ct_data_probe ct_data_probe_default(void);

/* The header facts (format, count, per-sample shape, dtype, stored layout,
 * file size, gzip) without reading the pixels: the set is opened as
 * training opens it, with no labels (a map and the header's checks); a
 * gzipped IDX file, whose open would decode it all, by its header alone.
 * A token shard: its header alone. Errors name the file. */
int ct_data_describe_header(FILE *out, const struct ct_data_probe *p);

/* Every value read: the class histogram, the per-channel mean and
 * population std as data.mean / data.std want them, each file's SHA-256;
 * token shards: tokens, windows, vocabulary, the most frequent tokens. */
int ct_data_describe_stats(FILE *out, const struct ct_data_probe *p);

/* An IDX header's image shape (N, C, H, W) when the header alone gives the
 * one training would read ((N, H, W) or (N, C, H, W), dims that fit an int,
 * C <= CT_DATA_MAX_CHANNELS): 1 with ds's n, c, h, w, dtype and layout set;
 * 0 when training would refuse it. */
int ct_data_idx_image_shape(const struct ct_idx *h, struct ct_dataset *ds);

#endif
