/* data inspect / data stats in words (data/describe.h): the header facts of
 * a data file, and its statistics (data/stats.h) as the lines a config's
 * [data] section wants. Rank 0's work in the CLI; nothing here is
 * collective. */
#include "data/describe.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/sha256.h"
#include "data/npy.h"
#include "data/stats.h"
#include "data/tokens.h"

struct ct_data_probe ct_data_probe_default(void)
{
    return (struct ct_data_probe){.format = CT_DATA_FORMAT_AUTO, .layout = CT_DATA_LAYOUT_AUTO};
}

static int print_file(FILE *out, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot stat: %s", path,
                            strerror(errno));
    fprintf(out, "file     %s (%llu bytes)\n", path, (unsigned long long)st.st_size);
    return 0;
}

/* The facts every image data set shares, from an open one. */
static void print_shape(FILE *out, const struct ct_dataset *ds)
{
    fprintf(out, "samples  %zu\n", ds->n);
    fprintf(out, "shape    %d x %d x %d (C x H x W)\n", ds->c, ds->h, ds->w);
    fprintf(out, "dtype    %s\n", ct_data_dtype_name(ds->dtype));
    fprintf(out, "layout   %s (as stored; the model gets NCHW)\n", ct_data_layout_name(ds->layout));
}

/* The windows of W tokens that ntok tokens hold, as a line. */
static void print_windows(FILE *out, uint64_t ntok, uint64_t nwin, int window)
{
    if (!window) {
        fprintf(out, "windows  give --window W (model.block + 1) to count them\n");
        return;
    }
    fprintf(out, "windows  %llu of %d tokens (model.block %d), %llu tokens left over for the "
            "epochs' offsets\n",
            (unsigned long long)nwin, window, window - 1,
            (unsigned long long)(ntok - nwin * (uint64_t)window));
}

static struct ct_dataset_params params_of(const struct ct_data_probe *p, const char *labels)
{
    struct ct_dataset_params dp = ct_dataset_default_params();
    dp.format = p->format;
    dp.layout = p->layout;
    dp.images = p->files[0];
    dp.labels = labels;
    /* Token shards: without --window, windows of 2 (every shard of 2 or
     * more tokens opens; the window count is then not printed). */
    dp.window = p->window ? p->window : 2;
    dp.vocab = p->vocab;
    return dp;
}

/* ------------------------------------------------------------ header */

/* Opens the set as training would (labels none: cifar10's are in the
 * records) and prints what the open found. */
static int header_open(FILE *out, const struct ct_data_probe *p, enum ct_data_format f)
{
    struct ct_dataset ds;
    struct ct_dataset_params dp = params_of(p, NULL);
    dp.format = f;
    int rc = ct_dataset_open(&ds, &dp);
    if (rc < 0)
        return rc;
    if (f == CT_DATA_FORMAT_CIFAR10) {
        for (int i = 0; rc == 0 && i < ds.n_files; i++)
            rc = print_file(out, ds.files[i]);
        fprintf(out, "format   cifar10, records of 1 label byte + 3x32x32 pixel bytes\n");
    }
    if (rc == 0)
        print_shape(out, &ds);
    if (rc == 0 && f == CT_DATA_FORMAT_CIFAR10)
        fprintf(out, "labels   in the records: %d classes\n", ds.n_classes);
    ct_dataset_close(&ds);
    return rc;
}

int ct_data_idx_image_shape(const struct ct_idx *h, struct ct_dataset *ds)
{
    const int four = h->rank == 4;
    int refused = h->rank != 3 && h->rank != 4;
    for (int i = 1; i < h->rank; i++)
        refused |= h->dims[i] > INT_MAX;
    refused |= four && h->dims[1] > CT_DATA_MAX_CHANNELS;
    if (refused)
        return 0;
    ds->n = h->dims[0];
    ds->c = four ? (int)h->dims[1] : 1;
    ds->h = (int)h->dims[1 + four];
    ds->w = (int)h->dims[2 + four];
    ds->dtype = CT_DATA_U8;
    ds->layout = CT_DATA_LAYOUT_NCHW;
    return 1;
}

static int header_idx(FILE *out, const struct ct_data_probe *p)
{
    struct ct_idx h;
    int rc = ct_idx_read_header(&h, p->files[0]);
    if (rc < 0)
        return rc;
    char dims[64] = "";
    for (int i = 0; i < h.rank; i++)
        snprintf(dims + strlen(dims), sizeof dims - strlen(dims), "%s%lu", i ? " x " : "",
                 (unsigned long)h.dims[i]);
    fprintf(out, "format   idx%s, uint8 dims %s\n", h.gzip ? " (gzip)" : "", dims);
    if (h.rank == 1) {
        fprintf(out, "labels   %lu (uint8): a labels file\n", (unsigned long)h.dims[0]);
        return 0;
    }
    /* Gzipped, the open would decode every pixel; the header says it all.
     * A raw file is only mapped, and a header training refuses is refused
     * before anything is decoded: both go through the open, for its checks. */
    struct ct_dataset ds = {0};
    if (!h.gzip || !ct_data_idx_image_shape(&h, &ds))
        return header_open(out, p, CT_DATA_FORMAT_IDX);
    print_shape(out, &ds);
    return 0;
}

static int header_npy(FILE *out, const struct ct_data_probe *p)
{
    struct ct_npy_header h;
    uint64_t size;
    int rc = ct_npy_read_header(p->files[0], &h, &size);
    if (rc < 0)
        return rc;
    char shape[96];
    fprintf(out, "format   npy %d.%d, descr '%s' (%s), shape %s\n", h.major, h.minor, h.descr,
            ct_npy_dtype_name(h.dtype), ct_npy_shape_str(&h, shape, sizeof shape));
    if (h.ndim == 1) {
        fprintf(out, "labels   %llu (%s): a labels file\n", (unsigned long long)h.shape[0],
                ct_npy_dtype_name(h.dtype));
        return 0;
    }
    return header_open(out, p, CT_DATA_FORMAT_NPY);
}

/* A token shard's header alone: no token is read. */
static int header_tokens(FILE *out, const struct ct_data_probe *p)
{
    struct ct_tokens_header h;
    int rc = ct_tokens_read_header(p->files[0], &h);
    if (rc < 0)
        return rc;
    fprintf(out, "format   tokens (llm.c's shard layout), version %d: a %d-byte header, then "
            "uint16 tokens\n", h.version, CT_TOKENS_HEADER_BYTES);
    fprintf(out, "tokens   %llu\n", (unsigned long long)h.count);
    print_windows(out, h.count, p->window ? h.count / (uint64_t)p->window : 0, p->window);
    return 0;
}

int ct_data_describe_header(FILE *out, const struct ct_data_probe *p)
{
    enum ct_data_format f = p->format;
    int rc = 0;
    if (f == CT_DATA_FORMAT_AUTO && (rc = ct_data_format_detect(p->files[0], &f)) < 0)
        return rc;
    if (f == CT_DATA_FORMAT_CIFAR10)
        return header_open(out, p, f); /* a list of files, no header */
    if ((rc = print_file(out, p->files[0])) < 0)
        return rc;
    return f == CT_DATA_FORMAT_IDX      ? header_idx(out, p)
           : f == CT_DATA_FORMAT_TOKENS ? header_tokens(out, p)
                                        : header_npy(out, p);
}

/* ------------------------------------------------------------ stats */

static int print_histogram(FILE *out, const struct ct_dataset *ds, const char *labels)
{
    if (!ct_data_has_classes(ds))
        return 0;
    uint64_t *count = calloc((size_t)ds->n_classes, sizeof *count);
    if (!count)
        return ct_error_set(CT_ENOMEM, "out of memory for %d class counts", ds->n_classes);
    int rc = ct_data_class_counts(ds, count);
    fprintf(out, "classes  %d (labels 0..%d, from %s)\n", ds->n_classes, ds->n_classes - 1,
            labels ? labels : "the records");
    for (int k = 0; rc == 0 && k < ds->n_classes; k++)
        fprintf(out, "  class %d: %llu (%.2f%%)\n", k, (unsigned long long)count[k],
                100.0 * (double)count[k] / (double)ds->n);
    free(count);
    return rc;
}

static int print_channel_stats(FILE *out, const struct ct_dataset *ds)
{
    struct ct_channel_stats cs;
    int rc = ct_data_channel_stats(ds, &cs);
    if (rc < 0)
        return rc;
    fprintf(out,
            "per channel, of the values as training scales them (%s), from exact sums;\n"
            "std is the population std (divided by N*H*W = %llu values), as torchvision users "
            "compute it:\n",
            ds->dtype == CT_DATA_U8 ? "uint8: v/255" : "float32: as stored", (unsigned long long)cs.count);
    for (int c = 0; c < cs.c; c++)
        fprintf(out, "  channel %d: mean %.17g  std %.17g\n", c, cs.mean[c], cs.std[c]);
    fprintf(out, "for the config's [data] section:\n");
    for (int k = 0; k < 2; k++) {
        fprintf(out, "%s = ", k ? "std" : "mean");
        for (int c = 0; c < cs.c; c++)
            fprintf(out, "%s%.4f", c ? "," : "", k ? cs.std[c] : cs.mean[c]);
        fputc('\n', out);
    }
    return 0;
}

static int print_digests(FILE *out, const struct ct_dataset *ds)
{
    for (int i = 0; i < ds->n_files; i++) {
        uint8_t d[CT_SHA256_LEN];
        char hex[CT_SHA256_HEX_LEN];
        int rc = ct_sha256_file(ds->files[i], d);
        if (rc < 0)
            return rc;
        ct_sha256_hex(d, hex);
        fprintf(out, "sha256   %s  %s\n", hex, ds->files[i]);
    }
    return 0;
}

static int print_token_stats(FILE *out, const struct ct_dataset *ds, int window, int vocab)
{
    struct ct_token_stats st;
    int rc = ct_data_token_stats(ds, &st);
    if (rc < 0)
        return rc;
    fprintf(out, "format   tokens\n");
    fprintf(out, "tokens   %llu (uint16) in %d shard%s\n", (unsigned long long)st.total, ds->n_files,
            ds->n_files == 1 ? "" : "s");
    print_windows(out, st.total, ds->n, window);
    fprintf(out, "vocab    %d (%s); the largest token %d; %d distinct tokens occur\n", ds->n_classes,
            vocab ? "--vocab" : "1 + the largest token", st.largest, st.distinct);
    fprintf(out, "the %d most frequent tokens:\n", st.ntop);
    for (int k = 0; k < st.ntop; k++) {
        const int v = st.top[k];
        char shown[16] = "";
        /* A byte-level vocabulary: show the byte. */
        if (ds->n_classes <= 256 && v < 128 && isprint(v))
            snprintf(shown, sizeof shown, " '%c'", v);
        else if (ds->n_classes <= 256 && v < 128)
            snprintf(shown, sizeof shown, " (0x%02X)", v);
        fprintf(out, "  token %d%s: %llu (%.2f%%)\n", v, shown, (unsigned long long)st.top_count[k],
                100.0 * (double)st.top_count[k] / (double)st.total);
    }
    return 0;
}

int ct_data_describe_stats(FILE *out, const struct ct_data_probe *p)
{
    const char *labels = p->n_files > 1 ? p->files[1] : NULL;
    struct ct_dataset ds;
    struct ct_dataset_params dp = params_of(p, labels);
    int rc = ct_dataset_open(&ds, &dp);
    if (rc < 0)
        return rc;
    for (int i = 0; rc == 0 && i < ds.n_files; i++)
        rc = print_file(out, ds.files[i]);
    if (rc == 0 && ds.format == CT_DATA_FORMAT_TOKENS) {
        rc = print_token_stats(out, &ds, p->window, p->vocab);
    } else if (rc == 0) {
        fprintf(out, "format   %s\n", ct_data_format_name(ds.format));
        print_shape(out, &ds);
        rc = print_histogram(out, &ds, labels);
        if (rc == 0)
            rc = print_channel_stats(out, &ds);
    }
    if (rc == 0)
        rc = print_digests(out, &ds);
    ct_dataset_close(&ds);
    return rc;
}
