/* The data set interface (see dataset.h): format names and detection, the
 * open/close dispatch, normalization, augmentation, and the gathers that
 * every image format shares.
 *
 * Dims legend: N = samples, C = channels, H = height, W = width,
 * S = C*H*W = sample_numel, K = targets per sample, B = samples in one
 * gather.
 *
 * This file knows nothing of any file format: a format's ops (idx.c,
 * npy_dataset.c, cifar.c) fill the shape, the targets and a way to find
 * sample i's stored values; everything a batch does with them (layout to NCHW, per-channel
 * normalization, crop and flip) is written once here. A format whose samples
 * are not stored one after another (tokens.c: windows that move per epoch)
 * brings its own gather, and the two gathers here hand over to it. It
 * deliberately is not a sampler or a sharder: which indices a rank asks for
 * is the caller's.
 */
#include "data/dataset.h"

#include "core/error.h"
#include "core/path.h"
#include "core/rng.h"
#include "data/dataset-impl.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ------------------------------------------------------------ names */

static const char *const format_names[CT_DATA_FORMAT_COUNT] = {"auto", "idx", "npy", "cifar10", "tokens"};
static const char *const layout_names[CT_DATA_LAYOUT_COUNT] = {"auto", "nchw", "nhwc"};
static const char *const augment_names[CT_DATA_AUGMENT_COUNT] = {"none", "crop_flip"};
static const char *const dtype_names[CT_DATA_DTYPE_COUNT] = {"uint8", "float32", "uint16"};

static int parse_name(const char *const *names, int n, const char *s)
{
    for (int i = 0; s && i < n; i++)
        if (strcmp(names[i], s) == 0)
            return i;
    return -1;
}

const char *ct_data_format_name(enum ct_data_format f)
{
    return (unsigned)f < CT_DATA_FORMAT_COUNT ? format_names[f] : "?";
}
int ct_data_format_parse(const char *s) { return parse_name(format_names, CT_DATA_FORMAT_COUNT, s); }
const char *ct_data_layout_name(enum ct_data_layout l)
{
    return (unsigned)l < CT_DATA_LAYOUT_COUNT ? layout_names[l] : "?";
}
int ct_data_layout_parse(const char *s) { return parse_name(layout_names, CT_DATA_LAYOUT_COUNT, s); }
const char *ct_data_augment_name(enum ct_data_augment a)
{
    return (unsigned)a < CT_DATA_AUGMENT_COUNT ? augment_names[a] : "?";
}
int ct_data_augment_parse(const char *s) { return parse_name(augment_names, CT_DATA_AUGMENT_COUNT, s); }
const char *ct_data_dtype_name(enum ct_data_dtype t) { return (unsigned)t < CT_DATA_DTYPE_COUNT ? dtype_names[t] : "?"; }

struct ct_dataset_params ct_dataset_default_params(void)
{
    return (struct ct_dataset_params){.format = CT_DATA_FORMAT_AUTO,
                                      .layout = CT_DATA_LAYOUT_AUTO,
                                      .n_mean = 1,
                                      .mean = {0},
                                      .std = {1, 1, 1, 1},
                                      .augment = CT_DATA_AUGMENT_NONE,
                                      .crop_pad = 4};
}

/* ------------------------------------------------------------ files */

char *ct_dataset_path(const char *dir, const char *file)
{
    size_t dl = (dir && file[0] != '/') ? strlen(dir) : 0;
    size_t fl = strlen(file);
    /* A dir given as "data/" should not produce "data//x" in messages. */
    int slash = dl > 0 && dir[dl - 1] != '/';
    char *p = malloc(dl + (size_t)slash + fl + 1);
    if (!p)
        return NULL;
    if (dl)
        memcpy(p, dir, dl);
    if (slash)
        p[dl] = '/';
    memcpy(p + dl + (size_t)slash, file, fl + 1);
    return p;
}

int ct__data_map(const char *path, struct ct__mapping *m)
{
    m->data = NULL;
    m->size = 0;
    uint64_t size;
    int fd = ct_open_regular(path, &size);
    if (fd < 0)
        return fd;
    if (size > (uint64_t)SIZE_MAX) {
        close(fd);
        return ct_error_set(CT_EFORMAT, "%s: %" PRIu64 " bytes do not fit this address space", path, size);
    }
    if (size > 0) {
        void *p = mmap(NULL, (size_t)size, PROT_READ, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return ct_error_set(CT_EIO, "%s: cannot map %" PRIu64 " bytes: %s", path, size, strerror(e));
        }
        m->data = p;
        m->size = (size_t)size;
    }
    close(fd);
    return 0;
}

void ct__data_unmap(struct ct__mapping *m)
{
    if (m->data)
        munmap((void *)m->data, m->size);
    m->data = NULL;
    m->size = 0;
}

int ct__data_add_file(struct ct_dataset *ds, const char *path)
{
    if (ds->n_files >= CT_DATA_MAX_FILES)
        return ct_error_set(CT_ERANGE, "%s: more than %d data files in one data set", path,
                            CT_DATA_MAX_FILES);
    if (!(ds->files[ds->n_files] = strdup(path)))
        return ct_error_set(CT_ENOMEM, "out of memory");
    ds->n_files++;
    return 0;
}

void ct__data_free_list(char **paths, int n)
{
    for (int i = 0; paths && i < n; i++)
        free(paths[i]);
    free(paths);
}

int ct__data_split_list(const char *dir, const char *list, const char *what, char ***paths, int *n)
{
    *paths = NULL;
    *n = 0;
    char **out = calloc(CT_DATA_MAX_FILES, sizeof *out);
    if (!out)
        return ct_error_set(CT_ENOMEM, "out of memory");
    int k = 0, rc = 0;
    for (const char *s = list ? list : "";;) {
        const char *end = strchr(s, ',');
        size_t len = end ? (size_t)(end - s) : strlen(s);
        while (len && isspace((unsigned char)*s))
            s++, len--;
        while (len && isspace((unsigned char)s[len - 1]))
            len--;
        if (len == 0) {
            rc = ct_error_set(CT_EINVAL, "%s: an empty file name in the list '%s'", what,
                              list ? list : "");
            break;
        }
        if (k == CT_DATA_MAX_FILES) {
            rc = ct_error_set(CT_ERANGE, "%s: more than %d files in '%s'", what, CT_DATA_MAX_FILES,
                              list);
            break;
        }
        char *name = strndup(s, len);
        out[k] = name ? ct_dataset_path(dir && dir[0] ? dir : NULL, name) : NULL;
        free(name);
        if (!out[k]) {
            rc = ct_error_set(CT_ENOMEM, "out of memory");
            break;
        }
        k++;
        if (!end)
            break;
        s = end + 1;
    }
    if (rc < 0) {
        ct__data_free_list(out, k);
        return rc;
    }
    *paths = out;
    *n = k;
    return 0;
}

int ct_data_format_detect(const char *path, enum ct_data_format *out)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    unsigned char b[6] = {0};
    size_t got = fread(b, 1, sizeof b, f);
    fclose(f);
    if (got >= 6 && memcmp(b, "\x93NUMPY", 6) == 0)
        *out = CT_DATA_FORMAT_NPY;
    else if (got >= 2 && b[0] == 0x1f && b[1] == 0x8b)
        *out = CT_DATA_FORMAT_IDX; /* gzip: only IDX files are read gzipped */
    else if (got >= 4 && b[0] == 0 && b[1] == 0 && b[2] == 0x08 && b[3] >= 1 && b[3] <= 4)
        *out = CT_DATA_FORMAT_IDX;
    else if (got >= 4 && ((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 |
                          (uint32_t)b[3] << 24) == (uint32_t)CT_TOKENS_MAGIC)
        *out = CT_DATA_FORMAT_TOKENS;
    else
        return ct_error_set(CT_EFORMAT,
                            "%s: unknown data format: the first bytes are %02X %02X %02X %02X, "
                            "neither IDX (00 00 08 0r, or gzip 1F 8B) nor .npy (93 'NUMPY') nor a "
                            "token shard (int32 %d, little-endian); CIFAR-10 batches have no "
                            "magic: set data.format = cifar10",
                            path, b[0], b[1], b[2], b[3], CT_TOKENS_MAGIC);
    return 0;
}

/* ------------------------------------------------------------ open/close */

static const struct ct_dataset_ops *ops_of(enum ct_data_format f)
{
    switch (f) {
    case CT_DATA_FORMAT_IDX:
        return &ct_dataset_idx_ops;
    case CT_DATA_FORMAT_NPY:
        return &ct_dataset_npy_ops;
    case CT_DATA_FORMAT_CIFAR10:
        return &ct_dataset_cifar10_ops;
    case CT_DATA_FORMAT_TOKENS:
        return &ct_dataset_tokens_ops;
    default:
        return NULL;
    }
}

/* lut[v] is what PyTorch's reference pipeline makes of byte v. torchvision's
 * ToTensor computes img.float().div(255) and Normalize computes
 * t.sub_(mean).div_(std) with mean and std turned into float32 tensors: three
 * float32 operations, each rounded. Evaluating (v/255 - mean)/std in double
 * and rounding once differs from that in the last bit for some v, and the
 * golden tests compare against PyTorch, so we repeat its roundings exactly.
 * (On the targets we build for, float arithmetic is evaluated in float:
 * FLT_EVAL_METHOD == 0; there is no multiply-add here to contract.) */
static void build_lut(float lut[256], float m, float s)
{
    for (int v = 0; v < 256; v++) {
        float x = (float)v / 255.0f;
        x = x - m;
        x = x / s;
        lut[v] = x;
    }
}

/* Per-channel normalization from the params, checked against the shape. */
static int set_normalization(struct ct_dataset *ds, const struct ct_dataset_params *p)
{
    if (p->n_mean < 0)
        return ct_error_set(CT_EINVAL, "data.mean and data.std give different numbers of values");
    if (p->n_mean != 1 && p->n_mean != ds->c)
        return ct_error_set(CT_EINVAL,
                            "%s: data.mean and data.std give %d values but the images have %d "
                            "channel%s (give 1 value, or one per channel)",
                            ds->files[0], p->n_mean, ds->c, ds->c == 1 ? "" : "s");
    for (int c = 0; c < ds->c; c++) {
        const int k = p->n_mean == 1 ? 0 : c;
        if (!isfinite(p->mean[k]) || !isfinite(p->std[k]) || !(p->std[k] > 0))
            return ct_error_set(CT_EINVAL,
                                "dataset normalization: std must be > 0 and both finite, got "
                                "mean %g, std %g (channel %d)",
                                p->mean[k], p->std[k], c);
        ds->mean[c] = (float)p->mean[k];
        ds->std[c] = (float)p->std[k];
        build_lut(ds->lut[c], ds->mean[c], ds->std[c]);
        ds->fill[c] = ds->lut[c][0]; /* (0/255 - m)/s = (0 - m)/s: the same float */
    }
    return 0;
}

int ct_dataset_open(struct ct_dataset *ds, const struct ct_dataset_params *p)
{
    memset(ds, 0, sizeof *ds);
    int rc = 0;
    enum ct_data_format f = p->format;
    /* A node-shared open is collective: every rank must reach the format's
     * open (which agrees the status over the node) with the same format, so
     * detection failures are not returned early when shared. */
    if (f == CT_DATA_FORMAT_AUTO) {
        char *path = NULL;
        if (!p->images || !p->images[0])
            rc = ct_error_set(CT_EINVAL, "data: no images file given");
        else if (!(path = ct_dataset_path(p->dir && p->dir[0] ? p->dir : NULL, p->images)))
            rc = ct_error_set(CT_ENOMEM, "out of memory");
        else if (strchr(p->images, ','))
            rc = ct_error_set(CT_EINVAL,
                              "data: '%s' is a list of files: only cifar10 and tokens take "
                              "several (set data.format = cifar10 or tokens)",
                              p->images);
        else
            rc = ct_data_format_detect(path, &f);
        free(path);
        if (rc < 0 && !p->shared)
            return rc;
        if (rc < 0)
            f = CT_DATA_FORMAT_IDX; /* still enter the collective; its status wins below */
    }
    ds->ops = ops_of(f);
    if (!ds->ops)
        return ct_error_set(CT_EINVAL, "data.format: %d is not a format", (int)f);
    ds->format = f;
    int orc = ds->ops->open(ds, p);
    if (rc == 0)
        rc = orc;
    else if (orc == 0)
        ds->ops->close(ds);
    if (rc == 0)
        rc = set_normalization(ds, p);
    if (rc == 0 && (p->augment < 0 || p->augment >= CT_DATA_AUGMENT_COUNT || p->crop_pad < 0 ||
                    p->crop_pad > 64))
        rc = ct_error_set(CT_EINVAL, "data.augment/crop_pad: %d/%d out of range", (int)p->augment,
                          p->crop_pad);
    if (rc < 0) {
        if (orc == 0 && ds->ops)
            ct_dataset_close(ds);
        for (int i = 0; i < ds->n_files; i++)
            free(ds->files[i]);
        free(ds->y);
        memset(ds, 0, sizeof *ds);
        return rc;
    }
    ds->augment = p->augment;
    ds->crop_pad = p->crop_pad;
    ds->seed = p->seed;
    return 0;
}

void ct_dataset_close(struct ct_dataset *ds)
{
    if (!ds || !ds->ops)
        return;
    ds->ops->close(ds);
    for (int i = 0; i < ds->n_files; i++)
        free(ds->files[i]);
    free(ds->y);
    memset(ds, 0, sizeof *ds);
}

/* ------------------------------------------------------------ augmentation */

void ct_augment_crop_flip_draw(uint64_t seed, int64_t epoch, uint32_t sample, int pad, int *dy,
                               int *dx, int *flip)
{
    const struct ct_rng_key key = ct_rng_key(seed, CT_RNG_AUGMENT);
    const uint32_t e = (uint32_t)epoch;
    *dy = (int)ct_rng_below(key, (const uint32_t[3]){e, sample, 0}, (uint32_t)(2 * pad + 1));
    *dx = (int)ct_rng_below(key, (const uint32_t[3]){e, sample, 1}, (uint32_t)(2 * pad + 1));
    *flip = (int)ct_rng_below(key, (const uint32_t[3]){e, sample, 2}, 2);
}

void ct_augment_crop_flip_apply(float *out, const float *in, int C, int H, int W, int pad, int dy,
                                int dx, int flip, const float *fill)
{
    /* Output pixel (y, x) is padded pixel (y + dy, x' + dx), x' = flip ?
     * W - 1 - x : x, i.e. input pixel (y + dy - pad, x' + dx - pad), or the
     * padding outside the image. */
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++) {
            const int sy = y + dy - pad;
            float *o = out + ((size_t)c * H + y) * W;
            const float f = fill ? fill[c] : 0.0f;
            if (sy < 0 || sy >= H) {
                for (int x = 0; x < W; x++)
                    o[x] = f;
                continue;
            }
            const float *row = in + ((size_t)c * H + sy) * W;
            for (int x = 0; x < W; x++) {
                const int sx = (flip ? W - 1 - x : x) + dx - pad;
                o[x] = sx >= 0 && sx < W ? row[sx] : f;
            }
        }
}

/* ------------------------------------------------------------ gathers */

/* One sample's stored values into x (C, H, W), normalized. */
static void copy_sample(const struct ct_dataset *ds, size_t i, float *restrict x)
{
    const void *src = ds->ops->sample(ds, i);
    const size_t HW = (size_t)ds->h * ds->w, C = (size_t)ds->c;
    if (ds->dtype == CT_DATA_U8) {
        const uint8_t *s = src;
        if (ds->layout == CT_DATA_LAYOUT_NCHW || C == 1) {
            for (size_t c = 0; c < C; c++) {
                const float *lut = ds->lut[c];
                for (size_t k = 0; k < HW; k++)
                    x[c * HW + k] = lut[s[c * HW + k]];
            }
        } else {
            for (size_t k = 0; k < HW; k++)
                for (size_t c = 0; c < C; c++)
                    x[c * HW + k] = ds->lut[c][s[k * C + c]];
        }
        return;
    }
    /* float32: (v - mean) / std, two roundings, as Normalize on a float tensor. */
    const float *s = src;
    for (size_t c = 0; c < C; c++) {
        const float m = ds->mean[c], d = ds->std[c];
        const size_t step = ds->layout == CT_DATA_LAYOUT_NCHW ? 1 : C;
        const float *sc = ds->layout == CT_DATA_LAYOUT_NCHW ? s + c * HW : s + c;
        for (size_t k = 0; k < HW; k++) {
            float v = sc[k * step];
            v = v - m;
            x[c * HW + k] = v / d;
        }
    }
}

/* The stored bytes of one sample into the cache, ahead of its copy. */
static void prefetch_sample(const struct ct_dataset *ds, size_t i)
{
    const char *p = ds->ops->sample(ds, i);
    const size_t bytes = ds->sample_numel * (ds->dtype == CT_DATA_F32 ? 4 : 1);
    for (size_t k = 0; k < bytes; k += 64)
        __builtin_prefetch(p + k);
}

/* A shuffled batch reads rows scattered over the whole image array (47 MB for
 * Fashion-MNIST, far beyond the caches), each a few cache lines: the copy
 * waits on memory, not on the table. Prefetching the rows two samples ahead
 * halves the gather (128 x 784 bytes: 76 -> 39 us, Xeon, best of 200). */
enum { GATHER_PREFETCH_AHEAD = 2 };

/* Stored value (c, y, x) of a sample, normalized. */
static inline float load_norm(const struct ct_dataset *ds, const void *src, int c, int y, int x)
{
    const size_t at = ds->layout == CT_DATA_LAYOUT_NCHW
                          ? ((size_t)c * ds->h + y) * ds->w + x
                          : ((size_t)y * ds->w + x) * ds->c + c;
    if (ds->dtype == CT_DATA_U8)
        return ds->lut[c][((const uint8_t *)src)[at]];
    float v = ((const float *)src)[at];
    v = v - ds->mean[c];
    return v / ds->std[c];
}

/* One sample cropped and flipped as (dy, dx, flip) say, normalized, into x
 * (C, H, W): what ct_augment_crop_flip_apply makes of the normalized
 * sample with the padding filled by the normalized value of a stored 0
 * (torchvision pads the image before ToTensor and Normalize). */
static void copy_sample_crop_flip(const struct ct_dataset *ds, size_t i, int dy, int dx, int flip,
                                  float *restrict x)
{
    const void *src = ds->ops->sample(ds, i);
    const int C = ds->c, H = ds->h, W = ds->w, pad = ds->crop_pad;
    for (int c = 0; c < C; c++) {
        const float fill = ds->fill[c];
        for (int y = 0; y < H; y++) {
            const int sy = y + dy - pad;
            float *o = x + ((size_t)c * H + y) * W;
            for (int xx = 0; xx < W; xx++) {
                const int sx = (flip ? W - 1 - xx : xx) + dx - pad;
                o[xx] = sy >= 0 && sy < H && sx >= 0 && sx < W ? load_norm(ds, src, c, sy, sx) : fill;
            }
        }
    }
}

void ct_dataset_gather(const struct ct_dataset *ds, const uint32_t *idx, size_t n, int64_t epoch,
                       float *x, int32_t *y)
{
    /* x: (B, S), y: (B, K) */
    if (ds->ops->gather) {
        ds->ops->gather(ds, idx, n, epoch, x, y);
        return;
    }
    const size_t S = ds->sample_numel, K = (size_t)ds->targets;
    for (size_t i = 0; i < n && i < GATHER_PREFETCH_AHEAD; i++)
        prefetch_sample(ds, idx[i]);
    for (size_t i = 0; i < n; i++) {
        assert(idx[i] < ds->n);
        if (i + GATHER_PREFETCH_AHEAD < n && idx[i + GATHER_PREFETCH_AHEAD] < ds->n)
            prefetch_sample(ds, idx[i + GATHER_PREFETCH_AHEAD]);
        float *xi = x + i * S;
        if (ds->augment == CT_DATA_AUGMENT_CROP_FLIP) {
            int dy, dx, flip;
            ct_augment_crop_flip_draw(ds->seed, epoch, idx[i], ds->crop_pad, &dy, &dx, &flip);
            copy_sample_crop_flip(ds, idx[i], dy, dx, flip, xi);
        } else {
            copy_sample(ds, idx[i], xi);
        }
        if (K)
            memcpy(y + i * K, ds->y + (size_t)idx[i] * K, K * sizeof *y);
    }
}

void ct_dataset_gather_range(const struct ct_dataset *ds, size_t first, size_t n, float *x,
                             int32_t *y)
{
    /* x: (B, S), y: (B, K) */
    assert(first <= ds->n && n <= ds->n - first);
    const size_t S = ds->sample_numel, K = (size_t)ds->targets;
    if (ds->ops->gather) {
        /* The format's own gather, at the evaluation layout (epoch -1), for
         * the indices first .. first + n - 1, a stack chunk at a time: no
         * allocation, and safe beside the loader thread's gathers. */
        enum { CHUNK = 256 };
        uint32_t idx[CHUNK];
        for (size_t at = 0; at < n; at += CHUNK) {
            const size_t m = n - at < CHUNK ? n - at : CHUNK;
            for (size_t k = 0; k < m; k++)
                idx[k] = (uint32_t)(first + at + k);
            ds->ops->gather(ds, idx, m, -1, x + at * S, y + at * K);
        }
        return;
    }
    for (size_t i = 0; i < n; i++)
        copy_sample(ds, first + i, x + i * S);
    if (K && n)
        memcpy(y, ds->y + first * K, n * K * sizeof *y);
}
