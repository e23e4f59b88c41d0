/* npz and safetensors writers (see export.h). */
#include "report/export.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "core/error.h"
#include "core/path.h"
#include "run/json.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "export.c writes the host's float bytes as little-endian: add byte swapping for this host"
#endif

const char *const ct_export_format_names[] = {"npz", "safetensors", NULL};

#define ZIP_MAX 0xffffffffu /* no ZIP64: sizes and offsets are 32-bit */

static uint64_t tensor_numel(const struct ct_export_tensor *t)
{
    uint64_t n = 1;
    for (int d = 0; d < t->ndim; d++)
        n *= (uint64_t)t->shape[d];
    return n;
}

static int check_tensors(const char *path, const struct ct_export_tensor *t, int n)
{
    for (int i = 0; i < n; i++) {
        const char *name = t[i].name;
        if (!name || !*name || strlen(name) > 200)
            return ct_error_set(CT_EINVAL, "%s: tensor %d has no name or one over 200 characters",
                                path, i);
        for (const char *p = name; *p; p++)
            if (*p == '/' || (unsigned char)*p < 0x20 || *p == '\'' || *p == '\\')
                return ct_error_set(CT_EINVAL, "%s: tensor name '%s' has a character a file name "
                                    "or header cannot hold", path, name);
        if (t[i].ndim < 0 || t[i].ndim > 4)
            return ct_error_set(CT_EINVAL, "%s: tensor %s has %d dimensions (0..4)", path, name,
                                t[i].ndim);
        for (int d = 0; d < t[i].ndim; d++)
            if (t[i].shape[d] < 0)
                return ct_error_set(CT_EINVAL, "%s: tensor %s has a negative dimension", path, name);
        for (int j = 0; j < i; j++)
            if (strcmp(t[j].name, name) == 0)
                return ct_error_set(CT_EINVAL, "%s: tensor name '%s' appears twice", path, name);
    }
    return 0;
}

/* ------------------------------------------------------------------ npz */

static void put16(unsigned char *p, unsigned v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    put16(p, v & 0xffff);
    put16(p + 2, v >> 16);
}

/* The npz member holding the metadata. */
#define META_MEMBER "__metadata__.npy"

/* An NPY v1.0 header: magic, version, length, the dict, spaces and '\n' up
 * to a multiple of 64 bytes (NumPy's own alignment). Of tensor t ('<f4'),
 * or with t NULL of a 0-d string of `chars` code points ('<U'). Returns its
 * length. */
static size_t npy_header(const struct ct_export_tensor *t, size_t chars, char *out, size_t cap)
{
    char shape[128] = "", descr[32] = "<f4";
    size_t used = 0;
    for (int d = 0; t && d < t->ndim; d++)
        used += (size_t)snprintf(shape + used, sizeof shape - used, "%s%lld", d ? ", " : "",
                                 (long long)t->shape[d]);
    if (t && t->ndim == 1)
        snprintf(shape + used, sizeof shape - used, ",");
    if (!t)
        snprintf(descr, sizeof descr, "<U%zu", chars);
    char dict[256];
    int dl = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (%s), }",
                      descr, shape);
    size_t total = 10 + (size_t)dl + 1;
    total = (total + 63) / 64 * 64;
    if (total > cap)
        return 0;
    memcpy(out, "\x93NUMPY\x01\x00", 8);
    put16((unsigned char *)out + 8, (unsigned)(total - 10));
    memcpy(out + 10, dict, (size_t)dl);
    memset(out + 10 + dl, ' ', total - 10 - (size_t)dl - 1);
    out[total - 1] = '\n';
    return total;
}

struct zip_entry {
    uint32_t crc, size, offset;
};

/* DOS date 1980-01-01 00:00: the archive does not depend on the time it was written. */
enum { ZIP_TIME = 0, ZIP_DATE = 0x21, ZIP_VERSION = 20 };

static int zip_local(FILE *f, const char *name, const struct zip_entry *e)
{
    unsigned char h[30] = {0};
    size_t nl = strlen(name);
    put32(h, 0x04034b50);
    put16(h + 4, ZIP_VERSION);
    put16(h + 10, ZIP_TIME);
    put16(h + 12, ZIP_DATE);
    put32(h + 14, e->crc);
    put32(h + 18, e->size);
    put32(h + 22, e->size);
    put16(h + 26, (unsigned)nl);
    return fwrite(h, 1, 30, f) == 30 && fwrite(name, 1, nl, f) == nl ? 0 : -1;
}

static int zip_central(FILE *f, const char *name, const struct zip_entry *e)
{
    unsigned char h[46] = {0};
    size_t nl = strlen(name);
    put32(h, 0x02014b50);
    put16(h + 4, ZIP_VERSION);
    put16(h + 6, ZIP_VERSION);
    put16(h + 12, ZIP_TIME);
    put16(h + 14, ZIP_DATE);
    put32(h + 16, e->crc);
    put32(h + 20, e->size);
    put32(h + 24, e->size);
    put16(h + 28, (unsigned)nl);
    put32(h + 42, e->offset);
    return fwrite(h, 1, 46, f) == 46 && fwrite(name, 1, nl, f) == nl ? 0 : -1;
}

static int metadata_json(const struct ct_export_meta *meta, int n_meta, struct ct_json_writer *w)
{
    ct_json_begin_object(w);
    for (int i = 0; i < n_meta; i++)
        ct_json_kv_string(w, meta[i].key, meta[i].value);
    ct_json_end_object(w);
    return ct_json_writer_status(w);
}

/* UTF-8 -> UTF-32LE code points (NumPy's '<U' strings), a byte that does
 * not start or continue a valid sequence (overlong, surrogate, above
 * U+10FFFF, cut short) as U+FFFD. out has room for len code points. Returns
 * the count. */
static size_t utf8_to_utf32le(const unsigned char *s, size_t len, unsigned char *out)
{
    static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000}; /* no overlong forms */
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c = s[i];
        int k = c < 0x80 ? 0 : c >= 0xc2 && c < 0xe0 ? 1 : c >= 0xe0 && c < 0xf0 ? 2
              : c >= 0xf0 && c < 0xf5 ? 3 : -1; /* continuation bytes that follow */
        int ok = k >= 0 && i + (size_t)k < len;
        if (ok && k > 0) {
            c &= 0x3fu >> k;
            for (int j = 1; j <= k && ok; j++) {
                ok = (s[i + (size_t)j] & 0xc0) == 0x80;
                c = c << 6 | (s[i + (size_t)j] & 0x3fu);
            }
            ok = ok && c >= least[k] && c <= 0x10ffff && !(c >= 0xd800 && c < 0xe000);
        }
        put32(out + 4 * n++, ok ? c : 0xfffd);
        i += ok ? (size_t)k + 1 : 1;
    }
    return n;
}

/* One stored entry: the local header, then the pieces. */
static int zip_add(FILE *f, const char *name, const void *a, size_t na, const void *b, size_t nb,
                   uint64_t *offset, struct zip_entry *e)
{
    if (na + nb > ZIP_MAX || *offset > ZIP_MAX)
        return -2;
    uLong crc = crc32(0L, Z_NULL, 0);
    crc = crc32(crc, a, (uInt)na);
    for (size_t done = 0; done < nb;) { /* crc32 takes uInt lengths */
        size_t chunk = nb - done > (1u << 30) ? (1u << 30) : nb - done;
        crc = crc32(crc, (const Bytef *)b + done, (uInt)chunk);
        done += chunk;
    }
    e->crc = (uint32_t)crc;
    e->size = (uint32_t)(na + nb);
    e->offset = (uint32_t)*offset;
    if (zip_local(f, name, e) < 0 || fwrite(a, 1, na, f) != na || (nb && fwrite(b, 1, nb, f) != nb))
        return -1;
    *offset += 30 + strlen(name) + na + nb;
    return 0;
}

static int write_npz(FILE *f, const char *path, const struct ct_export_tensor *t, int n,
                     const struct ct_export_meta *meta, int n_meta)
{
    if (n + 1 > 0xffff)
        return ct_error_set(CT_EINVAL, "%s: %d tensors do not fit a ZIP archive without ZIP64",
                            path, n);
    struct zip_entry *e = calloc((size_t)n + 1, sizeof *e);
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    int rc = e ? metadata_json(meta, n_meta, &w) : ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    /* The metadata as `__metadata__.npy`: a 0-d '<U' array of the JSON text,
     * so that numpy.load gives an array for every member (str(z[...]) is the
     * JSON). */
    unsigned char *meta32 = rc == 0 ? malloc(4 * (w.len ? w.len : 1)) : NULL;
    size_t meta_chars = 0;
    if (rc == 0 && !meta32)
        rc = ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    else if (rc == 0)
        meta_chars = utf8_to_utf32le((const unsigned char *)w.buf, w.len, meta32);
    uint64_t offset = 0;
    char name[256], hdr[512];
    for (int i = 0; rc == 0 && i <= n; i++) {
        int io;
        if (i == n) {
            size_t hl = npy_header(NULL, meta_chars, hdr, sizeof hdr);
            io = zip_add(f, META_MEMBER, hdr, hl, meta32, 4 * meta_chars, &offset, &e[i]);
        } else {
            snprintf(name, sizeof name, "%s.npy", t[i].name);
            size_t hl = npy_header(&t[i], 0, hdr, sizeof hdr);
            io = zip_add(f, name, hdr, hl, t[i].data, tensor_numel(&t[i]) * sizeof(float),
                         &offset, &e[i]);
        }
        if (io == -2)
            rc = ct_error_set(CT_EINVAL, "%s: over 4 GiB, more than a ZIP archive without ZIP64 "
                              "holds; use --format safetensors", path);
        else if (io < 0)
            rc = ct_error_set(CT_EIO, "%s: write failed: %s", path, strerror(errno ? errno : EIO));
    }
    uint64_t cd_begin = offset, cd_size = 0;
    for (int i = 0; rc == 0 && i <= n; i++) {
        if (i < n)
            snprintf(name, sizeof name, "%s.npy", t[i].name);
        const char *nm = i < n ? name : META_MEMBER;
        if (zip_central(f, nm, &e[i]) < 0)
            rc = ct_error_set(CT_EIO, "%s: write failed: %s", path, strerror(errno ? errno : EIO));
        cd_size += 46 + strlen(nm);
    }
    if (rc == 0 && cd_begin + cd_size > ZIP_MAX)
        rc = ct_error_set(CT_EINVAL, "%s: over 4 GiB; use --format safetensors", path);
    if (rc == 0) {
        unsigned char end[22] = {0};
        put32(end, 0x06054b50);
        put16(end + 8, (unsigned)n + 1);
        put16(end + 10, (unsigned)n + 1);
        put32(end + 12, (uint32_t)cd_size);
        put32(end + 16, (uint32_t)cd_begin);
        if (fwrite(end, 1, sizeof end, f) != sizeof end)
            rc = ct_error_set(CT_EIO, "%s: write failed: %s", path, strerror(errno ? errno : EIO));
    }
    ct_json_writer_free(&w);
    free(meta32);
    free(e);
    return rc;
}

/* ---------------------------------------------------------- safetensors */

static int write_safetensors(FILE *f, const char *path, const struct ct_export_tensor *t, int n,
                             const struct ct_export_meta *meta, int n_meta)
{
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_json_key(&w, "__metadata__");
    metadata_json(meta, n_meta, &w);
    uint64_t offset = 0;
    for (int i = 0; i < n; i++) {
        uint64_t bytes = tensor_numel(&t[i]) * sizeof(float);
        ct_json_key(&w, t[i].name);
        ct_json_begin_object(&w);
        ct_json_kv_string(&w, "dtype", "F32");
        ct_json_key(&w, "shape");
        ct_json_int_array(&w, t[i].shape, (size_t)t[i].ndim);
        ct_json_key(&w, "data_offsets");
        ct_json_int_array(&w, (const int64_t[]){(int64_t)offset, (int64_t)(offset + bytes)}, 2);
        ct_json_end_object(&w);
        offset += bytes;
    }
    ct_json_end_object(&w);
    int rc = ct_json_writer_status(&w);
    if (rc < 0) {
        ct_json_writer_free(&w);
        return ct_error_wrap(rc, "%s: the safetensors header", path);
    }
    /* Spaces after the JSON (allowed by the format) align the data to 8 bytes. */
    uint64_t hl = (w.len + 7) / 8 * 8;
    unsigned char len8[8];
    put32(len8, (uint32_t)hl);
    put32(len8 + 4, (uint32_t)(hl >> 32));
    int bad = fwrite(len8, 1, 8, f) != 8 || fwrite(w.buf, 1, w.len, f) != w.len;
    for (uint64_t k = w.len; k < hl && !bad; k++)
        bad = fputc(' ', f) == EOF;
    for (int i = 0; i < n && !bad; i++) {
        size_t cnt = (size_t)tensor_numel(&t[i]);
        bad = cnt && fwrite(t[i].data, sizeof(float), cnt, f) != cnt;
    }
    ct_json_writer_free(&w);
    return bad ? ct_error_set(CT_EIO, "%s: write failed: %s", path, strerror(errno ? errno : EIO)) : 0;
}

int ct_export_write(const char *path, enum ct_export_format format,
                    const struct ct_export_tensor *t, int n, const struct ct_export_meta *meta,
                    int n_meta)
{
    if ((unsigned)format >= CT_EXPORT_FORMAT_COUNT || n < 0 || (n && !t) || n_meta < 0)
        return ct_error_set(CT_EINVAL, "ct_export_write: bad arguments");
    int rc = check_tensors(path, t, n);
    if (rc < 0)
        return rc;
    struct ct_replace r;
    if ((rc = ct_replace_open(&r, path)) < 0)
        return rc;
    rc = format == CT_EXPORT_NPZ ? write_npz(r.f, path, t, n, meta, n_meta)
                                 : write_safetensors(r.f, path, t, n, meta, n_meta);
    if (rc < 0) {
        ct_replace_abort(&r);
        return rc;
    }
    return ct_replace_commit(&r);
}

/* ------------------------------------------------------- nanoGPT's names */

/* "layers.<L>.<rest>": L and rest, or -1 when name is not of that form. */
static long layer_of(const char *name, const char **rest)
{
    static const char prefix[] = "layers.";
    if (strncmp(name, prefix, sizeof prefix - 1) != 0)
        return -1;
    const char *p = name + sizeof prefix - 1;
    if (*p < '0' || *p > '9')
        return -1;
    char *end;
    long L = strtol(p, &end, 10);
    if (*end != '.')
        return -1;
    *rest = end + 1;
    return L;
}

/* Within one residual block: our name after "body." -> nanoGPT's after
 * "transformer.h.<i>.". Row 0: the attention block, row 1: the MLP block. */
static const char *const gpt_block_names[2][6][2] = {
    {{"0.weight", "ln_1.weight"},
     {"0.bias", "ln_1.bias"},
     {"1.qkv.weight", "attn.c_attn.weight"},
     {"1.qkv.bias", "attn.c_attn.bias"},
     {"1.proj.weight", "attn.c_proj.weight"},
     {"1.proj.bias", "attn.c_proj.bias"}},
    {{"0.weight", "ln_2.weight"},
     {"0.bias", "ln_2.bias"},
     {"1.weight", "mlp.c_fc.weight"},
     {"1.bias", "mlp.c_fc.bias"},
     {"3.weight", "mlp.c_proj.weight"},
     {"3.bias", "mlp.c_proj.bias"}},
};

int ct_export_gpt_names(const struct ct_export_tensor *in, int n, struct ct_export_tensor *out,
                        char (*names)[CT_EXPORT_NAME_MAX])
{
    long block_layer = -1; /* the layer number of the current residual block */
    int k = -1;            /* its ordinal */
    int wte = -1, wpe = -1, ln_f = 0, in_block = 0;
    for (int t = 0; t < n; t++) {
        const char *rest = NULL;
        const long L = layer_of(in[t].name, &rest);
        const char *mapped = NULL;
        char *dst = names[t];
        if (L < 0) {
            /* not a layer of ours: refused below */
        } else if (strcmp(rest, "wte.weight") == 0 || strcmp(rest, "wpe.weight") == 0) {
            mapped = rest[1] == 't' ? "transformer.wte.weight" : "transformer.wpe.weight";
            *(rest[1] == 't' ? &wte : &wpe) = t;
            snprintf(dst, CT_EXPORT_NAME_MAX, "%s", mapped);
        } else if (strncmp(rest, "body.", 5) == 0 && !ln_f) {
            if (L != block_layer) {
                block_layer = L;
                k++;
            }
            in_block += 1;
            for (int j = 0; j < 6 && !mapped; j++)
                if (strcmp(rest + 5, gpt_block_names[k % 2][j][0]) == 0)
                    mapped = gpt_block_names[k % 2][j][1];
            if (mapped)
                snprintf(dst, CT_EXPORT_NAME_MAX, "transformer.h.%d.%s", k / 2, mapped);
        } else if (strcmp(rest, "weight") == 0 || strcmp(rest, "bias") == 0) {
            ln_f++;
            mapped = rest;
            snprintf(dst, CT_EXPORT_NAME_MAX, "transformer.ln_f.%s", rest);
        }
        if (!mapped)
            return ct_error_set(CT_EINVAL, "export: the gpt's tensor '%s' has no nanoGPT name "
                                "(a table in src/report/export.c maps them)", in[t].name);
        out[t] = in[t];
        out[t].name = dst;
    }
    if (wte < 0 || wpe < 0 || ln_f != 2 || k < 0 || k % 2 == 0 || in_block != 6 * (k + 1))
        return ct_error_set(CT_EINVAL, "export: not a whole gpt (token and position embeddings, "
                            "pairs of attention and MLP blocks of 6 tensors each, a final "
                            "LayerNorm): %d tensors, %d residual blocks", n, k + 1);
    out[n] = in[wte];
    snprintf(names[n], CT_EXPORT_NAME_MAX, "lm_head.weight");
    out[n].name = names[n];
    return n + 1;
}

int ct_export_write_model(const char *path, enum ct_export_format format, const char *model,
                          const struct ct_export_tensor *t, int n, const struct ct_export_meta *meta,
                          int n_meta)
{
    if (!model || strcmp(model, "gpt") != 0 || n < 1) {
        int rc = ct_export_write(path, format, t, n, meta, n_meta);
        return rc < 0 ? rc : n;
    }
    struct ct_export_tensor *out = calloc((size_t)n + 1, sizeof *out);
    char(*names)[CT_EXPORT_NAME_MAX] = calloc((size_t)n + 1, sizeof *names);
    int rc = out && names ? ct_export_gpt_names(t, n, out, names)
                          : ct_error_set(CT_ENOMEM, "export: out of memory");
    if (rc > 0) {
        const int n_out = rc;
        rc = ct_export_write(path, format, out, n_out, meta, n_meta);
        if (rc == 0)
            rc = n_out;
    }
    free(out);
    free(names);
    return rc;
}
