/* The NumPy .npy header, parsed strictly (the reader behind ct_dataset_npy_ops).
 *
 * Versions 1.0, 2.0 and 3.0; the header dict is parsed, never evaluated:
 * exactly 'descr' (one of the dtypes below), 'fortran_order' (False) and
 * 'shape' (non-negative integers whose byte count fits in 64 bits).
 * Anything else (Fortran order, big-endian, object or structured dtypes, a
 * cut or malformed header) is refused with CT_EFORMAT and a message naming
 * the caller's path, the field and what was expected. Deliberately not a
 * general .npy reader: no byte swapping, no pickles. The format in full:
 * docs/data.md.
 *
 *     struct ct_npy_header h;
 *     uint64_t size;
 *     if (ct_npy_read_header(path, &h, &size) < 0) ... ct_error_message() ...
 *     // h.ndim = 4, h.shape = {100, 32, 32, 3}, h.dtype = CT_NPY_U8,
 *     // the data: h.data_bytes bytes at offset h.data_offset (= size - data_bytes)
 */
#ifndef CT_DATA_NPY_H
#define CT_DATA_NPY_H

#include <stddef.h>
#include <stdint.h>

/* At most this many axes (numpy's own limit, NPY_MAXDIMS, is 32 or 64). */
#define CT_NPY_MAX_DIMS 32
/* Header lengths above this are refused before a byte of it is read
 * (version 2.0 allows 4 GiB; what we accept fits in a few hundred bytes). */
#define CT_NPY_MAX_HEADER ((size_t)1 << 20)

/* The dtypes read: "|u1" (or "<u1"), "<i4", "<i8", "<f4", "<f2" (float16:
 * weights only, report/weights.h; the data sets refuse it). */
enum ct_npy_dtype { CT_NPY_U8, CT_NPY_I32, CT_NPY_I64, CT_NPY_F32, CT_NPY_F16, CT_NPY_DTYPE_COUNT };

struct ct_npy_header {
    int major, minor;               /* format version: 1.0, 2.0 or 3.0 */
    char descr[8];                  /* the dtype as written ("<f4") */
    enum ct_npy_dtype dtype;
    size_t itemsize;                /* bytes per element: 1, 2, 4 or 8 */
    int ndim;                       /* 0..CT_NPY_MAX_DIMS */
    uint64_t shape[CT_NPY_MAX_DIMS];
    uint64_t numel;                 /* product of shape (1 for ndim 0) */
    uint64_t data_bytes;            /* numel * itemsize */
    size_t data_offset;             /* where the elements begin: preamble + header */
};

/* Parses the preamble and header at the start of buf (len bytes: at least
 * the whole header; the elements may follow). On failure *h is zeroed and
 * the message names `path` (any label: a file name, "input"). */
int ct_npy_parse_header(const char *path, const uint8_t *buf, size_t len, struct ct_npy_header *h);

/* CT_EFORMAT naming `path` unless data_offset + data_bytes == file_size:
 * the elements fill the file exactly. */
int ct_npy_check_size(const char *path, const struct ct_npy_header *h, uint64_t file_size);

/* Reads the header of the file at `path` (never more than the header's
 * bytes) and checks it against the file's size; *file_size gets the size.
 * CT_ENOENT / CT_EIO / CT_EFORMAT naming the file. */
int ct_npy_read_header(const char *path, struct ct_npy_header *h, uint64_t *file_size);

/* The shape as Python prints a tuple: "(100, 32, 32, 3)", "(100,)", "()".
 * Truncated with "...)" when it does not fit in cap bytes (cap >= 8).
 * Returns buf. */
char *ct_npy_shape_str(const struct ct_npy_header *h, char *buf, size_t cap);

/* "uint8", "int32", "int64", "float32", "float16". */
const char *ct_npy_dtype_name(enum ct_npy_dtype t);

#endif
