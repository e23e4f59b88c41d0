/* npz and safetensors weights in (report/weights.h). */
#include "report/weights.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/error.h"
#include "data/npy.h"
#include "run/json.h"

/* A safetensors header longer than this is refused before it is parsed
 * (GPT-2-small's is 15 KB; one per tensor, a few hundred bytes each). */
#define MAX_HEADER ((uint64_t)64 << 20)

static const char *const dtype_names[CT_WEIGHTS_DTYPE_COUNT] = {"float32", "float16", "bfloat16"};
static const size_t dtype_size[CT_WEIGHTS_DTYPE_COUNT] = {4, 2, 2};

const char *ct_weights_dtype_name(enum ct_weights_dtype d)
{
    return (unsigned)d < CT_WEIGHTS_DTYPE_COUNT ? dtype_names[d] : "?";
}

char *ct_weights_shape_str(int ndim, const int64_t *shape, char *buf, size_t cap)
{
    size_t at = 0;
    int n = snprintf(buf, cap, "(");
    at = (size_t)n;
    for (int i = 0; i < ndim && at < cap; i++) {
        n = snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)shape[i]);
        at += n > 0 ? (size_t)n : 0;
    }
    if (at < cap)
        at += (size_t)snprintf(buf + at, cap - at, ndim == 1 ? ",)" : ")");
    if (at >= cap)
        snprintf(buf + cap - 5, 5, "...)");
    return buf;
}

static uint16_t le16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t le32(const uint8_t *p) { return (uint32_t)le16(p) | (uint32_t)le16(p + 2) << 16; }
static uint64_t le64(const uint8_t *p) { return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32; }

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | man << 13; /* inf, NaN (payload kept) */
    } else if (exp != 0) {
        bits = sign | (exp + 112) << 23 | man << 13;
    } else if (man == 0) {
        bits = sign; /* +-0 */
    } else {         /* subnormal: normalise */
        int e = -1;
        do {
            man <<= 1;
            e++;
        } while (!(man & 0x400));
        bits = sign | (uint32_t)(112 - e) << 23 | (man & 0x3ff) << 13;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

void ct_weights_to_f32(const struct ct_weights_tensor *t, float *out)
{
    const uint8_t *p = t->data;
    for (uint64_t i = 0; i < t->numel; i++) {
        uint32_t bits;
        switch (t->dtype) {
        case CT_WEIGHTS_F32:
            bits = le32(p + 4 * i);
            memcpy(&out[i], &bits, sizeof bits);
            break;
        case CT_WEIGHTS_BF16:
            bits = (uint32_t)le16(p + 2 * i) << 16;
            memcpy(&out[i], &bits, sizeof bits);
            break;
        default:
            out[i] = f16_to_f32(le16(p + 2 * i));
            break;
        }
    }
}

const struct ct_weights_tensor *ct_weights_find(const struct ct_weights *w, const char *name)
{
    for (int i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return &w->t[i];
    return NULL;
}

void ct_weights_close(struct ct_weights *w)
{
    for (int i = 0; w->inflated && i < w->n; i++)
        free(w->inflated[i]);
    free(w->inflated);
    free(w->t);
    free(w->names);
    free(w->file);
    memset(w, 0, sizeof *w);
}

/* ---------------------------------------------------------------- tensors */

/* Room for n tensors and names of names_bytes bytes in all. */
static int alloc_tensors(struct ct_weights *w, size_t n, size_t names_bytes)
{
    w->t = calloc(n ? n : 1, sizeof *w->t);
    w->inflated = calloc(n ? n : 1, sizeof *w->inflated);
    w->names = malloc(names_bytes ? names_bytes : 1);
    if (!w->t || !w->inflated || !w->names)
        return ct_error_set(CT_ENOMEM, "%s: out of memory for %zu tensors", w->path, n);
    return 0;
}

/* Appends tensor `name` (len bytes) to w; names_at is where the next name
 * goes in w->names. Checks the name and the shape's element count; the
 * caller checks that the data holds numel * size bytes. */
static int add_tensor(struct ct_weights *w, size_t *names_at, const char *name, size_t len,
                      enum ct_weights_dtype dtype, int ndim, const int64_t *shape)
{
    if (len == 0 || memchr(name, '\0', len))
        return ct_error_set(CT_EFORMAT, "%s: tensor %d has %s name", w->path, w->n,
                            len ? "a NUL inside its" : "an empty");
    char *copy = w->names + *names_at;
    memcpy(copy, name, len);
    copy[len] = '\0';
    *names_at += len + 1;
    if (ct_weights_find(w, copy))
        return ct_error_set(CT_EFORMAT, "%s: tensor '%s' appears twice", w->path, copy);
    if (ndim > CT_WEIGHTS_MAX_DIMS)
        return ct_error_set(CT_EFORMAT, "%s: tensor '%s' has %d axes (at most %d are read)", w->path,
                            copy, ndim, CT_WEIGHTS_MAX_DIMS);
    struct ct_weights_tensor *t = &w->t[w->n];
    t->name = copy;
    t->dtype = dtype;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0 || (shape[i] > 0 && t->numel > (UINT64_MAX / 8) / (uint64_t)shape[i]))
            return ct_error_set(CT_EFORMAT, "%s: tensor '%s': axis %d of size %lld", w->path, copy, i,
                                (long long)shape[i]);
        t->shape[i] = shape[i];
        t->numel *= (uint64_t)shape[i];
    }
    w->n++;
    return 0;
}

/* ---------------------------------------------------------------- npz */

enum {
    ZIP_LOCAL = 0x04034b50,
    ZIP_CENTRAL = 0x02014b50,
    ZIP_END = 0x06054b50,
    ZIP64_END = 0x06064b50,
    ZIP64_LOCATOR = 0x07064b50,
};

struct zip_entry {
    const uint8_t *name;
    size_t name_len;
    unsigned method, flags;
    uint32_t crc;
    uint64_t comp, size, local;
};

/* The end of central directory record (and ZIP64's, when the archive needs
 * it): where the central directory lies and how many entries it holds. */
static int zip_directory(const struct ct_weights *w, uint64_t *cd_off, uint64_t *cd_size, uint64_t *count)
{
    const uint8_t *f = w->file;
    const size_t size = w->size;
    size_t end = SIZE_MAX;
    for (size_t back = 0; size >= 22 + back && back <= 0xffff; back++)
        if (le32(f + size - 22 - back) == ZIP_END && le16(f + size - 2 - back) == back) {
            end = size - 22 - back;
            break;
        }
    if (end == SIZE_MAX)
        return ct_error_set(CT_EFORMAT, "%s: a ZIP archive without its end record (cut short?)", w->path);
    if (le16(f + end + 4) != 0 || le16(f + end + 6) != 0)
        return ct_error_set(CT_EFORMAT, "%s: a ZIP archive split over several disks", w->path);
    *count = le16(f + end + 10);
    *cd_size = le32(f + end + 12);
    *cd_off = le32(f + end + 16);
    if (*count == 0xffff || *cd_size == 0xffffffffu || *cd_off == 0xffffffffu) {
        if (end < 20 || le32(f + end - 20) != ZIP64_LOCATOR)
            return ct_error_set(CT_EFORMAT, "%s: a ZIP64 archive without its ZIP64 locator", w->path);
        uint64_t at = le64(f + end - 20 + 8);
        if (size < 56 || at > size - 56 || le32(f + at) != ZIP64_END)
            return ct_error_set(CT_EFORMAT, "%s: the ZIP64 end record is not where its locator says",
                                w->path);
        *count = le64(f + at + 32);
        *cd_size = le64(f + at + 40);
        *cd_off = le64(f + at + 48);
    }
    if (*cd_off > size || *cd_size > size - *cd_off)
        return ct_error_set(CT_EFORMAT, "%s: the ZIP central directory (%llu bytes at %llu) lies "
                            "outside the file's %zu bytes", w->path, (unsigned long long)*cd_size,
                            (unsigned long long)*cd_off, size);
    if (*count > *cd_size / 46)
        return ct_error_set(CT_EFORMAT, "%s: %llu ZIP entries in a central directory of %llu bytes",
                            w->path, (unsigned long long)*count, (unsigned long long)*cd_size);
    return 0;
}

/* One central directory entry at *at (advanced past it), ZIP64 sizes read. */
static int zip_entry(const struct ct_weights *w, uint64_t *at, uint64_t cd_end, struct zip_entry *e)
{
    const uint8_t *p = w->file + *at;
    if (cd_end - *at < 46 || le32(p) != ZIP_CENTRAL)
        return ct_error_set(CT_EFORMAT, "%s: a broken ZIP central directory at byte %llu", w->path,
                            (unsigned long long)*at);
    size_t nl = le16(p + 28), xl = le16(p + 30), cl = le16(p + 32);
    if (cd_end - *at - 46 < nl + xl + cl)
        return ct_error_set(CT_EFORMAT, "%s: a ZIP entry at byte %llu runs past its directory", w->path,
                            (unsigned long long)*at);
    e->flags = le16(p + 8);
    e->method = le16(p + 10);
    e->crc = le32(p + 16);
    e->comp = le32(p + 20);
    e->size = le32(p + 24);
    e->local = le32(p + 42);
    e->name = p + 46;
    e->name_len = nl;
    /* ZIP64: the fields saturated above follow in this order in extra 0x0001. */
    uint64_t *wide[3] = {&e->size, &e->comp, &e->local};
    const uint8_t *x = p + 46 + nl, *x_end = x + xl;
    while (x_end - x >= 4) {
        size_t len = le16(x + 2);
        if ((size_t)(x_end - x - 4) < len)
            break;
        if (le16(x) == 0x0001) {
            const uint8_t *v = x + 4;
            for (int k = 0; k < 3; k++)
                if (*wide[k] == 0xffffffffu) {
                    if (v + 8 > x + 4 + len)
                        return ct_error_set(CT_EFORMAT, "%s: a ZIP64 extra field too short for its "
                                            "sizes (entry at byte %llu)", w->path,
                                            (unsigned long long)*at);
                    *wide[k] = le64(v);
                    v += 8;
                }
        }
        x += 4 + len;
    }
    *at += 46 + nl + xl + cl;
    return 0;
}

/* Entry e's bytes: in place when stored, inflated into *own when deflated;
 * the CRC-32 checked either way. */
static int zip_data(const struct ct_weights *w, const struct zip_entry *e, const char *label,
                    const uint8_t **data, uint8_t **own)
{
    const uint8_t *f = w->file;
    if (e->flags & 1)
        return ct_error_set(CT_EFORMAT, "%s: entry %s is encrypted", w->path, label);
    if (e->local > w->size || w->size - e->local < 30 || le32(f + e->local) != ZIP_LOCAL)
        return ct_error_set(CT_EFORMAT, "%s: entry %s: no local header at byte %llu", w->path, label,
                            (unsigned long long)e->local);
    uint64_t begin = e->local + 30 + le16(f + e->local + 26) + le16(f + e->local + 28);
    if (begin > w->size || e->comp > w->size - begin)
        return ct_error_set(CT_EFORMAT, "%s: entry %s: %llu bytes at byte %llu run past the end of the "
                            "file (%zu bytes): cut short?", w->path, label, (unsigned long long)e->comp,
                            (unsigned long long)begin, w->size);
    if (e->method == 0) {
        if (e->comp != e->size)
            return ct_error_set(CT_EFORMAT, "%s: entry %s is stored but its sizes differ (%llu, %llu)",
                                w->path, label, (unsigned long long)e->comp, (unsigned long long)e->size);
        *data = f + begin;
    } else if (e->method == 8) {
        if (e->size > ((uint64_t)1 << 40) || e->size > (uint64_t)e->comp * 1032 + 1024)
            return ct_error_set(CT_EFORMAT, "%s: entry %s claims %llu bytes from %llu deflated", w->path,
                                label, (unsigned long long)e->size, (unsigned long long)e->comp);
        *own = malloc(e->size ? e->size : 1);
        if (!*own)
            return ct_error_set(CT_ENOMEM, "%s: entry %s: out of memory for %llu bytes", w->path, label,
                                (unsigned long long)e->size);
        z_stream z = {0};
        if (inflateInit2(&z, -15) != Z_OK)
            return ct_error_set(CT_ENOMEM, "%s: entry %s: zlib: %s", w->path, label, z.msg ? z.msg : "init");
        int zrc = Z_OK;
        uint64_t in_left = e->comp, out_left = e->size;
        z.next_in = (Bytef *)(f + begin);
        z.next_out = *own;
        /* In uInt-sized pieces (an entry may pass 4 GiB); inflate returns
         * Z_OK only after progress, Z_BUF_ERROR when none is possible: more
         * data than the header's size, or the data cut short. */
        while (zrc == Z_OK) {
            if (z.avail_in == 0 && in_left) {
                z.avail_in = in_left > 0x40000000u ? 0x40000000u : (uInt)in_left;
                in_left -= z.avail_in;
            }
            if (z.avail_out == 0 && out_left) {
                z.avail_out = out_left > 0x40000000u ? 0x40000000u : (uInt)out_left;
                out_left -= z.avail_out;
            }
            zrc = inflate(&z, Z_NO_FLUSH);
        }
        int complete = zrc == Z_STREAM_END && z.avail_out == 0 && out_left == 0 && z.avail_in == 0 &&
                       in_left == 0;
        inflateEnd(&z);
        if (!complete)
            return ct_error_set(CT_EFORMAT, "%s: entry %s: the deflated data does not inflate to the "
                                "%llu bytes its header says (%s)", w->path, label,
                                (unsigned long long)e->size, zrc == Z_DATA_ERROR ? "corrupt" : "sizes");
        *data = *own;
    } else {
        return ct_error_set(CT_EFORMAT, "%s: entry %s uses ZIP method %u: only stored (0) and deflated "
                            "(8) entries are read", w->path, label, e->method);
    }
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t done = 0; done < e->size;) {
        uInt piece = e->size - done > 0x40000000u ? 0x40000000u : (uInt)(e->size - done);
        crc = crc32(crc, *data + done, piece);
        done += piece;
    }
    if (crc != e->crc)
        return ct_error_set(CT_EFORMAT, "%s: entry %s: CRC-32 %08lx, the archive says %08lx: the file "
                            "is damaged", w->path, label, (unsigned long)crc, (unsigned long)e->crc);
    return 0;
}

static int parse_npz(struct ct_weights *w)
{
    uint64_t cd_off = 0, cd_size = 0, count = 0;
    int rc = zip_directory(w, &cd_off, &cd_size, &count);
    if (rc == 0)
        rc = alloc_tensors(w, count, cd_size);
    size_t names_at = 0;
    uint64_t at = cd_off;
    for (uint64_t i = 0; rc == 0 && i < count; i++) {
        struct zip_entry e = {0};
        if ((rc = zip_entry(w, &at, cd_off + cd_size, &e)) < 0)
            break;
        char label[160];
        snprintf(label, sizeof label, "'%.*s'", e.name_len > 120 ? 120 : (int)e.name_len,
                 (const char *)e.name);
        if (e.name_len < 5 || memcmp(e.name + e.name_len - 4, ".npy", 4) != 0) {
            rc = ct_error_set(CT_EFORMAT, "%s: entry %s is not a .npy file: an npz holds only "
                              "<name>.npy entries", w->path, label);
            break;
        }
        if (e.name_len == 16 && memcmp(e.name, "__metadata__.npy", 16) == 0)
            continue; /* export's metadata: strings, no tensor */
        const uint8_t *data = NULL;
        uint8_t *own = NULL;
        rc = zip_data(w, &e, label, &data, &own);
        w->inflated[w->n] = own; /* owned from here on, whatever happens */
        char where[4400];
        snprintf(where, sizeof where, "%s: entry %s", w->path, label);
        struct ct_npy_header h;
        if (rc == 0)
            rc = ct_npy_parse_header(where, data, e.size, &h);
        if (rc == 0)
            rc = ct_npy_check_size(where, &h, e.size);
        if (rc == 0 && h.dtype != CT_NPY_F32 && h.dtype != CT_NPY_F16)
            rc = ct_error_set(CT_EFORMAT, "%s: dtype '%s' (%s): weights are read as '<f4' (float32) or "
                              "'<f2' (float16)", where, h.descr, ct_npy_dtype_name(h.dtype));
        int64_t shape[CT_NPY_MAX_DIMS];
        for (int k = 0; rc == 0 && k < h.ndim; k++)
            shape[k] = (int64_t)h.shape[k];
        if (rc == 0)
            rc = add_tensor(w, &names_at, (const char *)e.name, e.name_len - 4,
                            h.dtype == CT_NPY_F32 ? CT_WEIGHTS_F32 : CT_WEIGHTS_F16, h.ndim, shape);
        if (rc == 0)
            w->t[w->n - 1].data = data + h.data_offset;
        else if (own && w->inflated[w->n] == own) { /* not added: not w->n's */
            free(own);
            w->inflated[w->n] = NULL;
        }
    }
    return rc;
}

/* ---------------------------------------------------------------- safetensors */

static int st_dtype(const struct ct_weights *w, const char *name, const struct ct_json_value *v,
                    enum ct_weights_dtype *d)
{
    static const char *const names[CT_WEIGHTS_DTYPE_COUNT] = {"F32", "F16", "BF16"};
    const char *s;
    if (ct_json_get_string(v, "dtype", &s) < 0)
        return ct_error_wrap(CT_EFORMAT, "%s: tensor '%s'", w->path, name);
    for (int k = 0; k < CT_WEIGHTS_DTYPE_COUNT; k++)
        if (strcmp(s, names[k]) == 0) {
            *d = (enum ct_weights_dtype)k;
            return 0;
        }
    return ct_error_set(CT_EFORMAT, "%s: tensor '%s' has dtype %s: weights are read as F32, F16 or "
                        "BF16", w->path, name, s);
}

static int st_tensor(struct ct_weights *w, size_t *names_at, const char *name, size_t name_len,
                     const struct ct_json_value *v, const uint8_t *data, uint64_t data_len)
{
    if (v->type != CT_JSON_OBJECT)
        return ct_error_set(CT_EFORMAT, "%s: tensor '%s' is described by a %s, not an object", w->path,
                            name, ct_json_type_name(v->type));
    enum ct_weights_dtype dtype = CT_WEIGHTS_F32;
    int rc = st_dtype(w, name, v, &dtype);
    if (rc < 0)
        return rc;
    const struct ct_json_value *sh = ct_json_get(v, "shape"), *off = ct_json_get(v, "data_offsets");
    if (!sh || sh->type != CT_JSON_ARRAY || !off || off->type != CT_JSON_ARRAY || off->n != 2)
        return ct_error_set(CT_EFORMAT, "%s: tensor '%s' needs \"shape\" (an array) and \"data_offsets\" "
                            "(an array of two)", w->path, name);
    int64_t shape[CT_WEIGHTS_MAX_DIMS], b, e;
    if (sh->n > CT_WEIGHTS_MAX_DIMS)
        return ct_error_set(CT_EFORMAT, "%s: tensor '%s' has %zu axes (at most %d are read)", w->path,
                            name, sh->n, CT_WEIGHTS_MAX_DIMS);
    for (size_t k = 0; k < sh->n; k++)
        if (ct_json_as_int64(&sh->items[k], &shape[k]) < 0)
            return ct_error_wrap(CT_EFORMAT, "%s: tensor '%s': shape", w->path, name);
    if (ct_json_as_int64(&off->items[0], &b) < 0 || ct_json_as_int64(&off->items[1], &e) < 0)
        return ct_error_wrap(CT_EFORMAT, "%s: tensor '%s': data_offsets", w->path, name);
    if ((rc = add_tensor(w, names_at, name, name_len, dtype, (int)sh->n, shape)) < 0)
        return rc;
    struct ct_weights_tensor *t = &w->t[w->n - 1];
    uint64_t want = t->numel * dtype_size[dtype];
    if (b < 0 || e < b || (uint64_t)e > data_len || (uint64_t)(e - b) != want)
        return ct_error_set(CT_EFORMAT, "%s: tensor '%s': data_offsets [%lld, %lld] for %llu bytes (%s "
                            "of %llu elements) in a data section of %llu bytes", w->path, t->name,
                            (long long)b, (long long)e, (unsigned long long)want, dtype_names[dtype],
                            (unsigned long long)t->numel, (unsigned long long)data_len);
    t->data = data + b;
    return 0;
}

static int parse_safetensors(struct ct_weights *w)
{
    uint64_t n = le64(w->file);
    if (n > w->size - 8 || n > MAX_HEADER)
        return ct_error_set(CT_EFORMAT, "%s: a safetensors header of %llu bytes in a file of %zu: cut "
                            "short, or not safetensors", w->path, (unsigned long long)n, w->size);
    struct ct_json_parse_params pp = ct_json_parse_default_params();
    pp.max_bytes = MAX_HEADER;
    struct ct_json_doc d;
    int rc = ct_json_parse(&d, (const char *)w->file + 8, (size_t)n, &pp);
    if (rc < 0)
        return ct_error_wrap(CT_EFORMAT, "%s: the safetensors header", w->path);
    const struct ct_json_value *root = d.root;
    if (root->type != CT_JSON_OBJECT)
        rc = ct_error_set(CT_EFORMAT, "%s: the safetensors header is a %s, not an object", w->path,
                          ct_json_type_name(root->type));
    size_t names_bytes = 0;
    for (size_t i = 0; rc == 0 && i < root->n; i++)
        names_bytes += strlen(root->keys[i]) + 1;
    if (rc == 0)
        rc = alloc_tensors(w, root->n, names_bytes);
    size_t names_at = 0;
    for (size_t i = 0; rc == 0 && i < root->n; i++) {
        if (strcmp(root->keys[i], "__metadata__") == 0) {
            if (root->items[i].type != CT_JSON_OBJECT)
                rc = ct_error_set(CT_EFORMAT, "%s: __metadata__ is a %s, not an object", w->path,
                                  ct_json_type_name(root->items[i].type));
            continue;
        }
        rc = st_tensor(w, &names_at, root->keys[i], strlen(root->keys[i]), &root->items[i],
                       w->file + 8 + n, w->size - 8 - n);
    }
    ct_json_doc_free(&d);
    return rc;
}

/* ---------------------------------------------------------------- open */

int ct_weights_parse(struct ct_weights *w, const char *path, uint8_t *buf, size_t size)
{
    memset(w, 0, sizeof *w);
    snprintf(w->path, sizeof w->path, "%s", path);
    w->file = buf;
    w->size = size;
    int rc;
    if (size >= 4 && (le32(buf) == ZIP_LOCAL || le32(buf) == ZIP_END)) {
        w->format = CT_EXPORT_NPZ;
        rc = parse_npz(w);
    } else if (size >= 9 && buf[8] == '{') {
        w->format = CT_EXPORT_SAFETENSORS;
        rc = parse_safetensors(w);
    } else {
        rc = ct_error_set(CT_EFORMAT, "%s: neither an npz (a ZIP archive) nor a safetensors file (its "
                          "first bytes)", path);
    }
    if (rc < 0)
        ct_weights_close(w);
    return rc;
}

int ct_weights_open(struct ct_weights *w, const char *path)
{
    memset(w, 0, sizeof *w);
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: %s", path, strerror(errno));
    struct stat st;
    uint8_t *buf = NULL;
    int rc = 0;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode))
        rc = ct_error_set(CT_EIO, "%s: not a regular file", path);
    else if (!(buf = malloc(st.st_size ? (size_t)st.st_size : 1)))
        rc = ct_error_set(CT_ENOMEM, "%s: out of memory for its %lld bytes", path, (long long)st.st_size);
    else if (fread(buf, 1, (size_t)st.st_size, f) != (size_t)st.st_size)
        rc = ct_error_set(CT_EIO, "%s: read failed: %s", path, ferror(f) ? strerror(errno) : "it shrank");
    fclose(f);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    return ct_weights_parse(w, path, buf, (size_t)st.st_size);
}
