/* IDX files (the MNIST / Fashion-MNIST container), raw or gzip-compressed.
 *
 * An IDX file is a big-endian header -- two zero bytes, a dtype byte, a rank
 * byte, then `rank` 32-bit dimensions -- followed by the elements. The reader
 * accepts the unsigned-byte dtype (0x08), which is what the image and label
 * files hold, and checks everything before trusting it: the magic, the dtype,
 * the rank (1..4), every dimension (non-zero, product within a sane bound) and
 * that the payload has exactly the length the header promises (no missing
 * bytes, no trailing garbage). Gzip is detected from the file's first two bytes,
 * not from its name, and decoded with zlib. Errors name the file and say what
 * was expected and what was found.
 *
 *     struct ct_idx im;
 *     if (ct_idx_load(&im, "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz") < 0)
 *         fprintf(stderr, "%s\n", ct_error_message());
 *     // im.dims = {10000, 28, 28}, im.data = 7,840,000 bytes
 *     ct_idx_free(&im);
 */
#ifndef CT_DATA_IDX_H
#define CT_DATA_IDX_H

#include <stddef.h>
#include <stdint.h>

#define CT_IDX_MAX_RANK 4
#define CT_IDX_DTYPE_U8 0x08
/* Refuse payloads above this many bytes before allocating (4 GiB). */
#define CT_IDX_MAX_BYTES ((size_t)1 << 32)

struct ct_idx {
    int rank;                       /* number of dimensions, 1..4 */
    uint32_t dims[CT_IDX_MAX_RANK]; /* dims[0] is the number of items */
    size_t numel;                   /* product of dims */
    uint8_t *data;                  /* numel bytes, row-major; owned */
    int gzip;                       /* the file is gzip-compressed */
    size_t header_bytes;            /* 4 + 4 rank: where a raw file's data starts */
};

/* Read and validate `path`. On failure returns CT_ENOENT, CT_EIO, CT_EFORMAT or
 * CT_ENOMEM, leaves *out zeroed, and sets a message naming the file. */
int ct_idx_load(struct ct_idx *out, const char *path);
void ct_idx_free(struct ct_idx *idx);

/* Read and validate only the header of `path`: rank, dims and numel, with
 * data NULL. Cheap also for gzip (only the first few bytes are inflated);
 * used to size a buffer before the payload is read. The header errors are
 * those of ct_idx_load; the payload is not looked at, but the header must be
 * one the file's size can hold (a raw file: exactly header + payload bytes; a
 * gzip file: at least 1/1032 of that, deflate's largest expansion), so that a
 * short file with a lying header cannot make the caller allocate gigabytes. */
int ct_idx_read_header(struct ct_idx *out, const char *path);
/* Read and validate `path` like ct_idx_load, but into the caller's buffer
 * `data` of expect->numel bytes, after checking that the file's header is the
 * one `expect` holds (from ct_idx_read_header): a file replaced in between
 * gives CT_EFORMAT instead of a buffer overrun. On failure the contents of
 * `data` are unspecified. */
int ct_idx_load_into(const char *path, const struct ct_idx *expect, uint8_t *data);

#endif
