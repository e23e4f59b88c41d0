/* NumPy .npy files (see npy.h): the strict header parser. The .npy format
 * of the data set interface is npy_dataset.c.
 *
 * The parser reads the header as the grammar of the dict numpy writes, one
 * token at a time, with a byte offset for every refusal; it never evaluates
 * anything and never allocates. Every size the header implies is checked for
 * overflow and against the file's size before the file is mapped, so a
 * 128-byte file that says (2^40, 2^20) costs nothing. It is deliberately not
 * a general .npy reader: no Fortran order, no byte swapping, no object
 * arrays.
 */
#include "data/npy.h"

#include "core/error.h"
#include "core/path.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *const dtype_names[CT_NPY_DTYPE_COUNT] = {"uint8", "int32", "int64", "float32",
                                                                 "float16"};

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
                 {"<i8", CT_NPY_I64, 8}, {"<f4", CT_NPY_F32, 4}, {"<f2", CT_NPY_F16, 2}};
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
                        "(int32), '<i8' (int64), '<f4' (float32) or '<f2' (float16)",
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
