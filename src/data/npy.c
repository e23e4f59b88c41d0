/* NumPy .npy files (see npy.h): the strict header parser, and the .npy
 * format of the data set interface (ct_dataset_npy_ops, data/dataset.h).
 *
 * Dims legend: N = samples, C = channels, H = height, W = width,
 * S = C*H*W elements per sample.
 *
 * The parser reads the header as the grammar of the dict numpy writes, one
 * token at a time, with a byte offset for every refusal; it never evaluates
 * anything and never allocates. Every size the header implies is checked for
 * overflow and against the file's size before the file is mapped, so a
 * 128-byte file that says (2^40, 2^20) costs nothing.
 *
 * The data set: an images file, (N, H, W) or (N, H, W, C) or (N, C, H, W),
 * uint8 or float32, memory-mapped read-only and used in place (never copied:
 * the page cache is the node's one shared copy); and a labels file, (N,) of
 * uint8, int32 or int64, read once into ds->y. Float32 images are scanned
 * once at open for non-finite values, so a NaN is refused with its sample
 * index instead of turning into a NaN loss a thousand steps later. It is
 * deliberately not a general .npy reader: no Fortran order, no byte
 * swapping, no object arrays, no copies.
 */
#include "data/npy.h"

#include "core/error.h"
#include "core/path.h"
#include "core/liveness.h"
#include "data/dataset-impl.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Float32 images are read in place from the mapping, as the host's floats. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "npy.c uses little-endian float32 data in place: a big-endian host needs a swap");

static const char *const dtype_names[CT_NPY_DTYPE_COUNT] = {"uint8", "int32", "int64", "float32"};

const char *ct_npy_dtype_name(enum ct_npy_dtype t)
{
    return (unsigned)t < CT_NPY_DTYPE_COUNT ? dtype_names[t] : "?";
}

char *ct_npy_shape_str(const struct ct_npy_header *h, char *buf, size_t cap)
{
    size_t at = 0;
    buf[at++] = '(';
    for (int i = 0; i < h->ndim; i++) {
        char item[32];
        const int k = snprintf(item, sizeof item, "%s%llu", i ? ", " : "",
                               (unsigned long long)h->shape[i]);
        /* After this item there must still be room for what ends the
         * string: "," ")" NUL for the last one, else ", ...)" NUL. */
        const size_t tail = i + 1 < h->ndim ? 7 : h->ndim == 1 ? 3 : 2;
        if (at + (size_t)k + tail > cap) {
            snprintf(buf + at, cap - at, "%s...)", i ? ", " : "");
            return buf;
        }
        memcpy(buf + at, item, (size_t)k);
        at += (size_t)k;
    }
    if (h->ndim == 1)
        buf[at++] = ',';
    buf[at++] = ')';
    buf[at] = '\0';
    return buf;
}

/* ------------------------------------------------------------ the header */

/* The header text [pos, end) of `s`, whose byte 0 is at file offset `base`. */
struct cursor {
    const char *path;
    const uint8_t *s;
    size_t pos, end, base;
};

/* CT_EFORMAT: at this byte, `expected` was expected; says what was found. */
static int bad(const struct cursor *c, const char *expected)
{
    char found[32];
    if (c->pos >= c->end)
        snprintf(found, sizeof found, "the end of the header");
    else if (c->s[c->pos] >= 0x20 && c->s[c->pos] < 0x7f)
        snprintf(found, sizeof found, "'%c'", c->s[c->pos]);
    else
        snprintf(found, sizeof found, "byte 0x%02X", c->s[c->pos]);
    return ct_error_set(CT_EFORMAT, "%s: malformed .npy header at byte %zu: expected %s, found %s",
                        c->path, c->base + c->pos, expected, found);
}

static int peek(const struct cursor *c)
{
    return c->pos < c->end ? c->s[c->pos] : -1;
}

/* numpy writes ", " and ": " between tokens; Python allows any spaces. */
static void skip_spaces(struct cursor *c)
{
    while (c->pos < c->end && c->s[c->pos] == ' ')
        c->pos++;
}

static int expect_char(struct cursor *c, char ch, const char *what)
{
    skip_spaces(c);
    if (peek(c) != (unsigned char)ch)
        return bad(c, what);
    c->pos++;
    skip_spaces(c);
    return 0;
}

/* A quoted string without escapes: 'x' or "x", printable ASCII, shorter
 * than cap. */
static int parse_string(struct cursor *c, char *out, size_t cap, const char *what)
{
    const int q = peek(c);
    if (q != '\'' && q != '"')
        return bad(c, what);
    const size_t start = ++c->pos;
    for (;;) {
        const int ch = peek(c);
        if (ch == q)
            break;
        if (ch < 0x20 || ch >= 0x7f || ch == '\\')
            return bad(c, ch == '\\' ? "a string without escapes" : "a closing quote");
        if (c->pos - start + 1 >= cap) {
            c->pos = start - 1;
            return ct_error_set(CT_EFORMAT,
                                "%s: malformed .npy header at byte %zu: a string longer than %zu "
                                "characters where %s was expected",
                                c->path, c->base + c->pos, cap - 1, what);
        }
        c->pos++;
    }
    memcpy(out, c->s + start, c->pos - start);
    out[c->pos - start] = '\0';
    c->pos++;
    return 0;
}

static int is_ident(int ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           ch == '_';
}

static int parse_bool(struct cursor *c, int *out)
{
    const size_t start = c->pos;
    while (is_ident(peek(c)))
        c->pos++;
    const size_t n = c->pos - start;
    if (n == 4 && memcmp(c->s + start, "True", 4) == 0)
        *out = 1;
    else if (n == 5 && memcmp(c->s + start, "False", 5) == 0)
        *out = 0;
    else {
        c->pos = start;
        return bad(c, "True or False");
    }
    return 0;
}

/* A decimal integer as Python writes it: no sign, no leading zeros. */
static int parse_dim(struct cursor *c, uint64_t *out)
{
    const size_t start = c->pos;
    uint64_t v = 0;
    while (peek(c) >= '0' && peek(c) <= '9') {
        const unsigned d = (unsigned)(peek(c) - '0');
        if (v > (UINT64_MAX - d) / 10) {
            c->pos = start;
            return ct_error_set(CT_EFORMAT,
                                "%s: .npy header at byte %zu: a dimension of the shape does not "
                                "fit in 64 bits",
                                c->path, c->base + c->pos);
        }
        v = v * 10 + d;
        c->pos++;
    }
    if (c->pos == start)
        return bad(c, "a dimension (a non-negative integer)");
    if (c->s[start] == '0' && c->pos - start > 1) {
        c->pos = start;
        return bad(c, "a dimension without leading zeros");
    }
    *out = v;
    return 0;
}

/* A tuple of dimensions: "()", "(7,)", "(7, 8)", "(7, 8,)". */
static int parse_shape(struct cursor *c, struct ct_npy_header *h)
{
    if (peek(c) != '(')
        return bad(c, "a tuple '(' for the shape");
    c->pos++;
    skip_spaces(c);
    while (peek(c) != ')') {
        if (h->ndim == CT_NPY_MAX_DIMS)
            return ct_error_set(CT_EFORMAT, "%s: .npy header at byte %zu: more than %d axes in the shape",
                                c->path, c->base + c->pos, CT_NPY_MAX_DIMS);
        int rc = parse_dim(c, &h->shape[h->ndim]);
        if (rc < 0)
            return rc;
        h->ndim++;
        skip_spaces(c);
        if (peek(c) == ',') {
            c->pos++;
            skip_spaces(c);
        } else if (peek(c) == ')') {
            if (h->ndim == 1)
                return ct_error_set(CT_EFORMAT,
                                    "%s: malformed .npy header at byte %zu: the shape (%llu) is "
                                    "not a tuple (a shape of one axis is written (%llu,))",
                                    c->path, c->base + c->pos,
                                    (unsigned long long)h->shape[0], (unsigned long long)h->shape[0]);
        } else {
            return bad(c, "',' or ')' in the shape");
        }
    }
    c->pos++;
    return 0;
}

enum { KEY_DESCR, KEY_FORTRAN, KEY_SHAPE, KEY_COUNT };
static const char *const key_names[KEY_COUNT] = {"descr", "fortran_order", "shape"};

/* The dict itself, keys in any order, each exactly once, then spaces and
 * the final '\n'. Fills descr (the string as written) and fortran. */
static int parse_dict(struct cursor *c, struct ct_npy_header *h, char *descr, size_t descr_cap,
                      int *fortran)
{
    int seen[KEY_COUNT] = {0}, rc;
    if ((rc = expect_char(c, '{', "'{' (the header is a Python dict)")) < 0)
        return rc;
    while (peek(c) != '}') {
        char key[32];
        const size_t key_at = c->pos;
        if ((rc = parse_string(c, key, sizeof key, "a key ('descr', 'fortran_order', 'shape')")) < 0)
            return rc;
        int k = 0;
        while (k < KEY_COUNT && strcmp(key, key_names[k]) != 0)
            k++;
        if (k == KEY_COUNT || seen[k])
            return ct_error_set(CT_EFORMAT,
                                "%s: malformed .npy header at byte %zu: %s key '%s' (expected "
                                "'descr', 'fortran_order' and 'shape', each once)",
                                c->path, c->base + key_at, k == KEY_COUNT ? "unknown" : "repeated",
                                key);
        seen[k] = 1;
        if ((rc = expect_char(c, ':', "':' after the key")) < 0)
            return rc;
        if (k == KEY_DESCR && peek(c) == '[')
            return ct_error_set(CT_EFORMAT,
                                "%s: .npy header at byte %zu: descr is a list: structured "
                                "(record) arrays are not read; expected a plain dtype such as '<f4'",
                                c->path, c->base + c->pos);
        if (k == KEY_DESCR)
            rc = parse_string(c, descr, descr_cap, "the dtype string (e.g. '<f4')");
        else if (k == KEY_FORTRAN)
            rc = parse_bool(c, fortran);
        else
            rc = parse_shape(c, h);
        if (rc < 0)
            return rc;
        skip_spaces(c);
        if (peek(c) == ',') {
            c->pos++;
            skip_spaces(c);
        } else if (peek(c) != '}') {
            return bad(c, "',' or '}' after a value");
        }
    }
    c->pos++;
    skip_spaces(c);
    if (!(c->pos + 1 == c->end && c->s[c->pos] == '\n'))
        return bad(c, c->pos < c->end ? "spaces and the final '\\n' after the dict"
                                      : "the final '\\n' of the header");
    for (int k = 0; k < KEY_COUNT; k++)
        if (!seen[k])
            return ct_error_set(CT_EFORMAT, "%s: .npy header: the dict lacks the key '%s'", c->path,
                                key_names[k]);
    return 0;
}

/* The dtypes read, by their descr, and the refusals worth a sentence. */
static int classify_descr(const char *path, const char *descr, struct ct_npy_header *h)
{
    static const struct {
        const char *descr;
        enum ct_npy_dtype dtype;
        size_t itemsize;
    } known[] = {{"|u1", CT_NPY_U8, 1}, {"<u1", CT_NPY_U8, 1}, {"<i4", CT_NPY_I32, 4},
                 {"<i8", CT_NPY_I64, 8}, {"<f4", CT_NPY_F32, 4}};
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(descr, known[i].descr) == 0) {
            h->dtype = known[i].dtype;
            h->itemsize = known[i].itemsize;
            snprintf(h->descr, sizeof h->descr, "%s", descr);
            return 0;
        }
    if (descr[0] == '>')
        return ct_error_set(CT_EFORMAT,
                            "%s: .npy header: descr '%s' is big-endian: only little-endian data is "
                            "read (save arr.astype('<%s'))",
                            path, descr, descr + 1);
    if (strchr(descr, 'O'))
        return ct_error_set(CT_EFORMAT,
                            "%s: .npy header: descr '%s' is an object array (pickled Python "
                            "objects): only numbers are read",
                            path, descr);
    return ct_error_set(CT_EFORMAT,
                        "%s: .npy header: unsupported dtype '%s': expected '|u1' (uint8), '<i4' "
                        "(int32), '<i8' (int64) or '<f4' (float32)",
                        path, descr);
}

/* The magic and version, and where the header ends: [*start, *end). buf
 * holds the first min(len, 12) bytes of an input of len bytes. */
static int preamble(const char *path, const uint8_t *buf, uint64_t len, struct ct_npy_header *h,
                    size_t *start, size_t *end)
{
    if (len < 6 || memcmp(buf, "\x93NUMPY", 6) != 0) {
        char found[40] = "";
        for (size_t i = 0, at = 0; i < len && i < 6; i++)
            at += (size_t)snprintf(found + at, sizeof found - at, "%s%02X", i ? " " : "", buf[i]);
        return ct_error_set(CT_EFORMAT,
                            "%s: not a .npy file: expected the magic 93 4E 55 4D 50 59 "
                            "(\\x93NUMPY) at offset 0, found %s",
                            path, len ? found : "an empty file");
    }
    if (len < 8)
        return ct_error_set(CT_EFORMAT, "%s: cut .npy preamble: %llu bytes, the version needs 8",
                            path, (unsigned long long)len);
    h->major = buf[6];
    h->minor = buf[7];
    if (h->major < 1 || h->major > 3 || h->minor != 0)
        return ct_error_set(CT_EFORMAT,
                            "%s: .npy format version %d.%d at offset 6: expected 1.0, 2.0 or 3.0",
                            path, h->major, h->minor);
    *start = h->major == 1 ? 10 : 12;
    if (len < *start)
        return ct_error_set(CT_EFORMAT,
                            "%s: cut .npy preamble: %llu bytes, a version %d.0 preamble is %zu",
                            path, (unsigned long long)len, h->major, *start);
    size_t hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
    if (h->major > 1)
        hlen |= (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    if (hlen > CT_NPY_MAX_HEADER)
        return ct_error_set(CT_EFORMAT,
                            "%s: .npy header length %zu (offset 8) is over the limit of %zu bytes",
                            path, hlen, CT_NPY_MAX_HEADER);
    *end = *start + hlen;
    if (*end > len)
        return ct_error_set(CT_EFORMAT,
                            "%s: cut .npy header: the header length at offset 8 says it ends at "
                            "byte %zu, but there are %llu bytes",
                            path, *end, (unsigned long long)len);
    return 0;
}

static int parse_header(const char *path, const uint8_t *buf, size_t len, struct ct_npy_header *h)
{
    size_t start, end;
    int rc = preamble(path, buf, len, h, &start, &end);
    if (rc < 0)
        return rc;
    struct cursor c = {.path = path, .s = buf, .pos = start, .end = end, .base = 0};
    char descr[32] = "";
    int fortran = 0;
    if ((rc = parse_dict(&c, h, descr, sizeof descr, &fortran)) < 0)
        return rc;
    if ((rc = classify_descr(path, descr, h)) < 0)
        return rc;
    if (fortran)
        return ct_error_set(CT_EFORMAT,
                            "%s: .npy header: fortran_order is True: only C-order arrays are read "
                            "(save np.ascontiguousarray(arr))",
                            path);
    /* Overflow checks; an empty axis makes any shape 0 elements, as in numpy. */
    uint64_t numel = 1;
    int empty = 0;
    for (int i = 0; i < h->ndim; i++)
        empty |= h->shape[i] == 0;
    for (int i = 0; i < h->ndim && !empty; i++) {
        if (numel > UINT64_MAX / h->shape[i])
            numel = 0, empty = -1;
        else
            numel *= h->shape[i];
    }
    if (empty)
        numel = 0;
    if (empty < 0 || numel > (UINT64_MAX - end) / h->itemsize || numel > SIZE_MAX / h->itemsize) {
        char shape[96];
        return ct_error_set(CT_EFORMAT,
                            "%s: .npy header: the shape %s of '%s' is more bytes than fit in 64 bits",
                            path, ct_npy_shape_str(h, shape, sizeof shape), h->descr);
    }
    h->numel = numel;
    h->data_bytes = numel * h->itemsize;
    h->data_offset = end;
    return 0;
}

int ct_npy_parse_header(const char *path, const uint8_t *buf, size_t len, struct ct_npy_header *h)
{
    memset(h, 0, sizeof *h);
    int rc = parse_header(path, buf, len, h);
    if (rc < 0)
        memset(h, 0, sizeof *h);
    return rc;
}

int ct_npy_check_size(const char *path, const struct ct_npy_header *h, uint64_t file_size)
{
    if ((uint64_t)h->data_offset + h->data_bytes == file_size)
        return 0;
    char shape[96];
    return ct_error_set(CT_EFORMAT,
                        "%s: the shape %s of '%s' needs %llu bytes of data after the %zu-byte "
                        "header, %llu in all, but the file has %llu bytes",
                        path, ct_npy_shape_str(h, shape, sizeof shape), h->descr,
                        (unsigned long long)h->data_bytes, h->data_offset,
                        (unsigned long long)(h->data_offset + h->data_bytes),
                        (unsigned long long)file_size);
}

/* Reads len bytes at offset; a short read is a file that shrank. */
static int read_at(int fd, const char *path, uint8_t *buf, size_t len, off_t off)
{
    size_t got = 0;
    while (got < len) {
        ssize_t r = pread(fd, buf + got, len - got, off + (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return ct_error_set(CT_EIO, "%s: read error: %s", path, strerror(errno));
        if (r == 0)
            return ct_error_set(CT_EFORMAT, "%s: the file ended at byte %zu while its header was read",
                                path, (size_t)off + got);
        got += (size_t)r;
    }
    return 0;
}

int ct_npy_read_header(const char *path, struct ct_npy_header *h, uint64_t *file_size)
{
    memset(h, 0, sizeof *h);
    *file_size = 0;
    uint64_t size;
    int fd = ct_open_regular(path, &size);
    if (fd < 0)
        return fd;
    uint8_t pre[12];
    const size_t npre = size < sizeof pre ? (size_t)size : sizeof pre;
    size_t start, end;
    uint8_t *buf = NULL;
    int rc = read_at(fd, path, pre, npre, 0);
    if (rc == 0)
        rc = preamble(path, pre, size, h, &start, &end);
    if (rc == 0 && !(buf = malloc(end)))
        rc = ct_error_set(CT_ENOMEM, "out of memory for a %zu-byte .npy header", end);
    if (rc == 0)
        rc = read_at(fd, path, buf, end, 0);
    close(fd);
    if (rc == 0)
        rc = ct_npy_parse_header(path, buf, end, h);
    free(buf);
    if (rc == 0)
        rc = ct_npy_check_size(path, h, size);
    if (rc < 0) {
        memset(h, 0, sizeof *h);
        return rc;
    }
    *file_size = size;
    return 0;
}

/* ------------------------------------------------------------ the data set */

struct npy_ds {
    struct ct__mapping map; /* the whole images file */
    const uint8_t *data;    /* (N, S) elements: map.data + data_offset */
    size_t sample_bytes;    /* S * itemsize */
};

/* The image shape from the header and the layout (auto: a last axis of 1,
 * 3 or 4 is channels). */
static int images_shape(struct ct_dataset *ds, const struct ct_npy_header *h, const char *path,
                        enum ct_data_layout layout)
{
    char shape[96];
    ct_npy_shape_str(h, shape, sizeof shape);
    if (h->dtype != CT_NPY_U8 && h->dtype != CT_NPY_F32)
        return ct_error_set(CT_EFORMAT,
                            "%s: images of dtype '%s' (%s): expected '|u1' (uint8) or '<f4' "
                            "(float32)",
                            path, h->descr, ct_npy_dtype_name(h->dtype));
    if (h->ndim != 3 && h->ndim != 4)
        return ct_error_set(CT_EFORMAT,
                            "%s: images of shape %s: expected (N, H, W), (N, H, W, C) or "
                            "(N, C, H, W)",
                            path, shape);
    for (int i = 0; i < h->ndim; i++)
        if (h->shape[i] == 0)
            return ct_error_set(CT_EFORMAT,
                                "%s: images of shape %s: axis %d is empty (expected at least one "
                                "image of at least 1x1 pixels)",
                                path, shape, i);
    if ((unsigned)layout >= CT_DATA_LAYOUT_COUNT)
        return ct_error_set(CT_EINVAL, "%s: data.layout %d is not a layout", path, (int)layout);
    uint64_t c = 1, hh = h->shape[1], ww = h->shape[2];
    enum ct_data_layout l = layout == CT_DATA_LAYOUT_AUTO ? CT_DATA_LAYOUT_NCHW : layout;
    if (h->ndim == 4) {
        const uint64_t last = h->shape[3];
        if (layout == CT_DATA_LAYOUT_AUTO)
            l = last == 1 || last == 3 || last == 4 ? CT_DATA_LAYOUT_NHWC : CT_DATA_LAYOUT_NCHW;
        if (l == CT_DATA_LAYOUT_NHWC)
            c = last;
        else
            c = h->shape[1], hh = h->shape[2], ww = h->shape[3];
        if (c > CT_DATA_MAX_CHANNELS)
            return ct_error_set(CT_EFORMAT,
                                "%s: images of shape %s read as %s (data.layout = %s%s) have %llu "
                                "channels: at most %d",
                                path, shape, l == CT_DATA_LAYOUT_NHWC ? "(N, H, W, C)" : "(N, C, H, W)",
                                ct_data_layout_name(layout),
                                layout == CT_DATA_LAYOUT_AUTO ? ": a last axis of 1, 3 or 4 is channels"
                                                              : "",
                                (unsigned long long)c, CT_DATA_MAX_CHANNELS);
    }
    if (h->shape[0] > UINT32_MAX || hh > INT_MAX || ww > INT_MAX)
        return ct_error_set(CT_EFORMAT,
                            "%s: images of shape %s: at most %lu images of at most %d x %d pixels",
                            path, shape, (unsigned long)UINT32_MAX, INT_MAX, INT_MAX);
    ds->n = (size_t)h->shape[0];
    ds->c = (int)c;
    ds->h = (int)hh;
    ds->w = (int)ww;
    ds->sample_numel = (size_t)(h->numel / h->shape[0]);
    ds->dtype = h->dtype == CT_NPY_U8 ? CT_DATA_U8 : CT_DATA_F32;
    ds->layout = l;
    return 0;
}

/* The labels file: (N,) of uint8, int32 or int64, each in [0, 65536),
 * into ds->y (malloc'd). */
static int read_labels(struct ct_dataset *ds, const char *path, const char *images_path)
{
    struct ct_npy_header h;
    uint64_t size;
    int rc = ct_npy_read_header(path, &h, &size);
    if (rc < 0)
        return rc;
    char shape[96];
    ct_npy_shape_str(&h, shape, sizeof shape);
    if (h.dtype != CT_NPY_U8 && h.dtype != CT_NPY_I32 && h.dtype != CT_NPY_I64)
        return ct_error_set(CT_EFORMAT,
                            "%s: labels of dtype '%s' (%s): expected integers: '|u1' (uint8), "
                            "'<i4' (int32) or '<i8' (int64)",
                            path, h.descr, ct_npy_dtype_name(h.dtype));
    if (h.ndim != 1)
        return ct_error_set(CT_EFORMAT, "%s: labels of shape %s: expected (N,) (save arr.reshape(-1))",
                            path, shape);
    if (h.shape[0] != ds->n)
        return ct_error_set(CT_EFORMAT, "%s: %llu labels, but %s has %zu images", path,
                            (unsigned long long)h.shape[0], images_path, ds->n);
    struct ct__mapping m;
    if ((rc = ct__data_map(path, &m)) < 0)
        return rc;
    if (m.size != size) {
        ct__data_unmap(&m);
        return ct_error_set(CT_EFORMAT, "%s: the file changed while opening: %zu bytes, not %llu",
                            path, m.size, (unsigned long long)size);
    }
    if (!(ds->y = malloc((ds->n ? ds->n : 1) * sizeof *ds->y))) {
        ct__data_unmap(&m);
        return ct_error_set(CT_ENOMEM, "out of memory for %zu labels", ds->n);
    }
    /* Little-endian by the header's word, whatever the host, and through
     * bytes: the data offset need not be aligned for int32 or int64. */
    const uint8_t *p = m.data + h.data_offset;
    int32_t max = 0;
    for (size_t i = 0; i < ds->n; i++, p += h.itemsize) {
        uint64_t u = 0;
        for (size_t b = 0; b < h.itemsize; b++)
            u |= (uint64_t)p[b] << (8 * b);
        /* sign-extend int32 and int64 */
        const int64_t v = h.itemsize == 1 ? (int64_t)u
                          : h.itemsize == 4 ? (int64_t)(int32_t)(uint32_t)u
                                            : (int64_t)u;
        if (v < 0 || v >= CT_DATA_MAX_TARGET) {
            ct__data_unmap(&m);
            free(ds->y);
            ds->y = NULL;
            return ct_error_set(CT_EFORMAT,
                                "%s: label %zu is %lld: expected 0 <= label < %d", path, i,
                                (long long)v, CT_DATA_MAX_TARGET);
        }
        ds->y[i] = (int32_t)v;
        if (ds->y[i] > max)
            max = ds->y[i];
    }
    ct__data_unmap(&m);
    ds->targets = 1;
    ds->n_classes = max + 1;
    return 0;
}

/* Every float of the mapped images is finite: the first one that is not is
 * refused with its sample. A NaN or infinity has all exponent bits set;
 * counting those per block keeps the loop branch-free (vectorized), and
 * only a block that holds one is searched again. */
static int check_finite(const struct ct_dataset *ds, const struct npy_ds *st, const char *path)
{
    const size_t total = ds->n * ds->sample_numel;
    const uint32_t *u = (const uint32_t *)(const void *)st->data;
    enum { BLOCK = 4096 };
    size_t marked = 0;
    for (size_t at = 0; at < total; at += BLOCK) {
        const size_t len = total - at < BLOCK ? total - at : BLOCK;
        unsigned bad = 0;
        for (size_t k = 0; k < len; k++)
            bad += (u[at + k] & 0x7f800000u) == 0x7f800000u;
        if (bad) {
            size_t k = 0;
            while ((u[at + k] & 0x7f800000u) != 0x7f800000u)
                k++;
            float v;
            memcpy(&v, &u[at + k], sizeof v);
            const size_t e = at + k;
            return ct_error_set(CT_EFORMAT,
                                "%s: sample %zu holds a non-finite value (%g, element %zu of the "
                                "sample): float32 images must be finite",
                                path, e / ds->sample_numel, (double)v, e % ds->sample_numel);
        }
        /* A liveness mark per 64 MiB scanned: a large set takes a while. */
        if ((at + len) * 4 - marked >= ((size_t)64 << 20)) {
            ct_liveness_mark(-1);
            marked = (at + len) * 4;
        }
    }
    return 0;
}

/* Checks the images header and the labels (all before anything sized by a
 * header is mapped or allocated), maps the images, scans float32 data. */
static int npy_open_files(struct ct_dataset *ds, const struct ct_dataset_params *p,
                          struct npy_ds *st, const char *images, const char *labels)
{
    struct ct_npy_header h;
    uint64_t size;
    int rc = ct_npy_read_header(images, &h, &size);
    if (rc == 0)
        rc = images_shape(ds, &h, images, p->layout);
    if (rc == 0 && h.dtype == CT_NPY_F32 && h.data_offset % 4 != 0)
        rc = ct_error_set(CT_EFORMAT,
                          "%s: float32 data at offset %zu, not a multiple of 4 (numpy pads its "
                          "headers to 64 bytes)",
                          images, h.data_offset);
    if (rc == 0 && labels)
        rc = read_labels(ds, labels, images);
    if (rc == 0)
        rc = ct__data_map(images, &st->map);
    if (rc == 0 && st->map.size != size)
        rc = ct_error_set(CT_EFORMAT, "%s: the file changed while opening: %zu bytes, not %llu",
                          images, st->map.size, (unsigned long long)size);
    if (rc < 0)
        return rc;
    st->data = st->map.data + h.data_offset;
    st->sample_bytes = ds->sample_numel * h.itemsize;
    if (ds->dtype == CT_DATA_F32 && (rc = check_finite(ds, st, images)) < 0)
        return rc;
    if ((rc = ct__data_add_file(ds, images)) < 0)
        return rc;
    return labels ? ct__data_add_file(ds, labels) : 0;
}

static int npy_open(struct ct_dataset *ds, const struct ct_dataset_params *p)
{
    const char *dir = p->dir && p->dir[0] ? p->dir : NULL;
    const int have_labels = p->labels && p->labels[0];
    struct npy_ds *st = calloc(1, sizeof *st);
    char *images = p->images && p->images[0] ? ct_dataset_path(dir, p->images) : NULL;
    char *labels = have_labels ? ct_dataset_path(dir, p->labels) : NULL;
    int rc = 0;
    if (!p->images || !p->images[0])
        rc = ct_error_set(CT_EINVAL, "data: no images file given");
    else if (!st || !images || (have_labels && !labels))
        rc = ct_error_set(CT_ENOMEM, "out of memory");
    else if (strchr(p->images, ','))
        rc = ct_error_set(CT_EINVAL, "%s: a list of files: only cifar10 takes several", images);
    if (rc == 0)
        rc = npy_open_files(ds, p, st, images, labels);
    /* Nothing here is collective, but a node-shared open returns the same
     * status on every rank of the node (dataset.h). */
    if (p->shared)
        rc = p->shared->ready(p->shared->ctx, rc);
    free(images);
    free(labels);
    if (rc < 0) {
        if (st)
            ct__data_unmap(&st->map);
        free(st);
        free(ds->y);
        ds->y = NULL;
        return rc;
    }
    if (!have_labels) {
        /* `data inspect` and `data stats` open images alone. */
        ds->targets = 0;
        ds->n_classes = 0;
    }
    ds->impl = st;
    return 0;
}

static const void *npy_sample(const struct ct_dataset *ds, size_t i)
{
    const struct npy_ds *st = ds->impl;
    return st->data + i * st->sample_bytes;
}

static void npy_close(struct ct_dataset *ds)
{
    struct npy_ds *st = ds->impl;
    if (!st)
        return;
    ct__data_unmap(&st->map);
    free(st);
    ds->impl = NULL;
}

const struct ct_dataset_ops ct_dataset_npy_ops = {
    .name = "npy", .open = npy_open, .sample = npy_sample, .close = npy_close};
