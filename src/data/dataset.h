/* A data set: N samples, each an input of S values and K integer targets,
 * read from files of one format through a small table of functions
 * (struct ct_dataset_ops; one file per format: idx.c, npy_dataset.c,
 * cifar.c, tokens.c). Inputs are handed out as normalized floats, NCHW; targets as
 * int32. Uncompressed files are memory-mapped; gzipped IDX files are
 * decoded once per node into params.shared, or privately. Training gathers
 * may augment (Philox keyed by seed and sample, never by rank); evaluation
 * (ct_dataset_gather_range) never does.
 *
 * Dims legend: N = samples, C, H, W = an image's channels, height, width,
 * S = inputs per sample (C*H*W for an image; T for a window of T tokens),
 * K = targets per sample (1: a class label; T: the next token at every
 * position of a window), B = samples in one gather.
 *
 *     struct ct_dataset_params p = ct_dataset_default_params();
 *     p.dir = "/usr/share/datasets/fashion-mnist";
 *     p.images = "train-images-idx3-ubyte.gz";
 *     p.labels = "train-labels-idx1-ubyte.gz";
 *     struct ct_dataset train;
 *     if (ct_dataset_open(&train, &p) < 0) ... ct_error_message() names the file ...
 *     ct_dataset_gather(&train, idx, B, epoch, x, y);   // x (B, S) floats, y (B, K)
 *     ct_dataset_close(&train);
 *
 * Not here: which samples a rank asks for (sampler.h), the prefetch thread
 * (loader.h), MPI (the node-shared buffer comes through core/shmem.h). The
 * formats, their checks, normalization and node sharing: docs/data.md.
 */
#ifndef CT_DATA_DATASET_H
#define CT_DATA_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "core/shmem.h"

/* Append-only, with a _COUNT sentinel that sizes the name tables. */
enum ct_data_format {
    CT_DATA_FORMAT_AUTO,
    CT_DATA_FORMAT_IDX,
    CT_DATA_FORMAT_NPY,
    CT_DATA_FORMAT_CIFAR10,
    CT_DATA_FORMAT_TOKENS,
    CT_DATA_FORMAT_COUNT
};

/* A token shard's first int32 (llm.c's layout, data/tokens.h), here because
 * format detection (data.format = auto) reads it. */
#define CT_TOKENS_MAGIC 20240520

enum ct_data_layout { CT_DATA_LAYOUT_AUTO, CT_DATA_LAYOUT_NCHW, CT_DATA_LAYOUT_NHWC, CT_DATA_LAYOUT_COUNT };

enum ct_data_augment { CT_DATA_AUGMENT_NONE, CT_DATA_AUGMENT_CROP_FLIP, CT_DATA_AUGMENT_COUNT };

/* The stored element type of the inputs. */
enum ct_data_dtype { CT_DATA_U8, CT_DATA_F32, CT_DATA_U16, CT_DATA_DTYPE_COUNT };

/* Names ("auto", "idx", ...), and the value of a name (< 0: unknown). */
const char *ct_data_format_name(enum ct_data_format f);
int ct_data_format_parse(const char *name);
const char *ct_data_layout_name(enum ct_data_layout l);
int ct_data_layout_parse(const char *name);
const char *ct_data_augment_name(enum ct_data_augment a);
int ct_data_augment_parse(const char *name);
const char *ct_data_dtype_name(enum ct_data_dtype t);

#define CT_DATA_MAX_CHANNELS 4
#define CT_DATA_MAX_FILES 16
/* Targets (class labels, token ids) are below this. */
#define CT_DATA_MAX_TARGET 65536

struct ct_dataset_params {
    enum ct_data_format format;
    enum ct_data_layout layout;   /* of .npy images; auto: a last axis of 1, 3 or 4 is channels */
    const char *dir;              /* NULL or "": paths as given */
    const char *images;           /* a file, or a comma list (cifar10) */
    const char *labels;           /* NULL or "" where the images file holds them (cifar10) */
    int n_mean;                   /* 1 (every channel) or C */
    double mean[CT_DATA_MAX_CHANNELS], std[CT_DATA_MAX_CHANNELS];
    enum ct_data_augment augment; /* applied by ct_dataset_gather only */
    int crop_pad;                 /* crop_flip: zero padding on each side */
    uint64_t seed;                /* the run's seed, for augmentation and window draws */
    int window;                   /* tokens: tokens per sample, T + 1 (model.block + 1) */
    int vocab;                    /* tokens: every token must be below it; 0: 1 + the largest */
    const struct ct_shared_alloc *shared; /* NULL: private; else collective over the node */
};

/* format auto, layout auto, mean 0, std 1, no augmentation, crop_pad 4. */
struct ct_dataset_params ct_dataset_default_params(void);

struct ct_dataset;

/* A format. open() fills the shape, count, targets and storage of ds from
 * the params (every file checked against its size before anything is
 * allocated; errors name the file, the field and what was expected), or
 * returns a negative code having released what it took. sample() returns
 * sample i's stored inputs (S elements of ds->dtype in ds->layout). */
struct ct_dataset_ops {
    const char *name;
    int (*open)(struct ct_dataset *ds, const struct ct_dataset_params *p);
    const void *(*sample)(const struct ct_dataset *ds, size_t i);
    void (*close)(struct ct_dataset *ds);
    /* NULL for the image formats (dataset.c's generic gather: sample() +
     * normalization + augmentation, targets from ds->y). A format whose
     * samples are not stored one after another (tokens: windows that move
     * per epoch) gathers itself: x (n, S) and y (n, K) for idx[0..n), epoch
     * < 0 meaning the fixed evaluation layout. Such a format may leave
     * ds->y NULL and sample() NULL. */
    void (*gather)(const struct ct_dataset *ds, const uint32_t *idx, size_t n, int64_t epoch,
                   float *x, int32_t *y);
};

extern const struct ct_dataset_ops ct_dataset_idx_ops, ct_dataset_npy_ops, ct_dataset_cifar10_ops,
    ct_dataset_tokens_ops;

struct ct_dataset {
    const struct ct_dataset_ops *ops;
    void *impl;                /* the format's own state */
    enum ct_data_format format; /* resolved: never auto */
    size_t n;                  /* N */
    int c, h, w;               /* an image's shape */
    size_t sample_numel;       /* S */
    int targets;               /* K */
    int n_classes;             /* 1 + the largest target */
    enum ct_data_dtype dtype;       /* of the stored inputs */
    enum ct_data_layout layout; /* of the stored inputs (NCHW or NHWC) */
    int32_t *y;                /* (N, K) targets; owned; NULL for tokens (see ops->gather) */
    int n_files;               /* the files read, as opened (for digests) */
    char *files[CT_DATA_MAX_FILES];
    /* Normalization and augmentation, from the params. */
    float lut[CT_DATA_MAX_CHANNELS][256]; /* per channel: byte -> normalized float */
    float mean[CT_DATA_MAX_CHANNELS], std[CT_DATA_MAX_CHANNELS];
    float fill[CT_DATA_MAX_CHANNELS];     /* per channel: the normalized value of a stored 0 */
    enum ct_data_augment augment;
    int crop_pad;
    uint64_t seed;
};

/* Opens the data set the params describe (format auto: by the images
 * file's first bytes). Collective over the node when params->shared is set
 * (every rank returns the same status). */
int ct_dataset_open(struct ct_dataset *ds, const struct ct_dataset_params *p);
/* Releases everything (collective over the node for a node-shared set). */
void ct_dataset_close(struct ct_dataset *ds);

/* The format of `path` by its first bytes: IDX (00 00 08 0r, or gzip),
 * .npy (\x93NUMPY); CT_EFORMAT naming the file otherwise. CIFAR-10 batches
 * have no magic: auto never picks them (give format = cifar10). */
int ct_data_format_detect(const char *path, enum ct_data_format *out);

/* dir + "/" + file (no doubled slash), or file alone when it is absolute or
 * dir is NULL or empty. malloc'd; NULL when out of memory. */
char *ct_dataset_path(const char *dir, const char *file);

/* Samples idx[0..n) into x (n, S), normalized (and augmented as the params
 * said, with counter (epoch, idx[i])), their targets into y (n, K). Indices
 * must be < ds->n. */
void ct_dataset_gather(const struct ct_dataset *ds, const uint32_t *idx, size_t n, int64_t epoch,
                       float *x, int32_t *y);
/* Samples [first, first + n), never augmented (evaluation). */
void ct_dataset_gather_range(const struct ct_dataset *ds, size_t first, size_t n, float *x,
                             int32_t *y);

/* Crop+flip of one sample, the pure function the gather applies: the crop
 * offsets (dy, dx) in [0, 2 pad] of the zero-padded (H + 2 pad, W + 2 pad)
 * image and the flip (0/1), drawn from Philox keyed by (seed, augment),
 * counter (epoch, sample). */
void ct_augment_crop_flip_draw(uint64_t seed, int64_t epoch, uint32_t sample, int pad, int *dy,
                               int *dx, int *flip);
/* out (C, H, W) = crop (dy, dx) of in (C, H, W) padded by pad on each side
 * with fill[c] (NULL: zeros), flipped left-right when flip; in and out must
 * not overlap. The gather pads with the normalized value of a stored 0
 * (torchvision pads before it normalizes). */
void ct_augment_crop_flip_apply(float *out, const float *in, int C, int H, int W, int pad, int dy,
                                int dx, int flip, const float *fill);

#endif
