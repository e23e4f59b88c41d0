/* Reading IDX files (see idx.h), raw or gzip-compressed.
 *
 * This file turns one IDX file into a validated, owned byte array. It reads
 * the header, checks every field before trusting it, allocates what the
 * header promises (after bounding it) as the bytes arrive, and insists that
 * the payload has exactly that length. It deliberately is not a general IDX library: only
 * the unsigned-byte dtype is accepted.
 *
 * At its end, the IDX format of the data set interface (ct_dataset_idx_ops,
 * data/dataset.h): an images file (rank 3 (n,h,w) or 4 (n,c,h,w)) and a
 * labels file (rank 1). A raw images file is memory-mapped; a gzipped one is
 * decoded into a buffer, node-shared when the params give a table.
 *
 * Raw and gzip input go through one small byte source so the header and
 * payload logic is written once. Gzip is decoded with zlib's inflate on the
 * FILE we already opened rather than with gzopen(): gzopen would silently pass
 * a non-gzip file through and re-open the path, and driving inflate ourselves
 * lets us tell a corrupt stream, a truncated stream and junk after the stream
 * apart in the messages.
 */
#include "data/idx.h"

#include "core/error.h"
#include "core/liveness.h"
#include "data/dataset-impl.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define IDX_IN_CHUNK (64 * 1024)
/* How many bytes past the payload we are willing to decode just to report how
 * many there are; beyond this the message says "at least". It bounds the work
 * a gzip file with an enormous tail can make us do. */
#define IDX_TRAILING_COUNT_MAX ((size_t)1 << 20)

/* A forward-only byte source over a FILE: either the file's bytes or the
 * bytes its gzip members inflate to. */
struct idx_src {
    FILE *f;
    const char *path;
    int gz;           /* 1: inflate the file's bytes; 0: hand them out as they are */
    int zs_live;      /* inflateInit2 succeeded, so inflateEnd is owed */
    int in_eof;       /* fread has reported end of file */
    int done;         /* gzip: the last member ended and no input follows */
    z_stream zs;
    unsigned char *in;     /* IDX_IN_CHUNK bytes of file input */
    unsigned char *in_pos; /* raw: next unread byte of `in` */
    size_t in_avail;       /* raw: bytes left at in_pos */
};

static int src_read_error(const struct idx_src *s)
{
    return ct_error_set(CT_EIO, "%s: read error: %s", s->path, strerror(errno));
}

/* Read from the file into `dst` until `len` bytes or end of file, in
 * pieces of at most 64 MiB, each a liveness mark for the hang watchdog (a
 * data set of many GiB takes a while to load; that is not a hang). */
static int src_fread(struct idx_src *s, unsigned char *dst, size_t len, size_t *got)
{
    *got = 0;
    while (!s->in_eof && *got < len) {
        size_t want = len - *got < ((size_t)64 << 20) ? len - *got : ((size_t)64 << 20);
        size_t n = fread(dst + *got, 1, want, s->f);
        *got += n;
        if (n < want) {
            if (ferror(s->f))
                return src_read_error(s);
            s->in_eof = 1;
        }
        ct_liveness_mark(-1);
    }
    return 0;
}

/* Make at least `want` (<= IDX_IN_CHUNK) bytes of compressed input available,
 * fewer only at end of file. Used to peek at what follows a gzip member. */
static int src_fill_input(struct idx_src *s, size_t want)
{
    if (s->zs.avail_in >= want || s->in_eof)
        return 0;
    memmove(s->in, s->zs.next_in, s->zs.avail_in);
    size_t got;
    int rc = src_fread(s, s->in + s->zs.avail_in, IDX_IN_CHUNK - s->zs.avail_in, &got);
    if (rc < 0)
        return rc;
    s->zs.next_in = s->in;
    s->zs.avail_in += (uInt)got;
    return 0;
}

/* Called when inflate reports the end of a gzip member. gzip(1) writes
 * several members when files are concatenated, and decompressors (ours
 * included) treat that as one stream; anything else after a member is junk
 * we refuse rather than ignore. */
static int src_member_end(struct idx_src *s)
{
    int rc = src_fill_input(s, 2);
    if (rc < 0)
        return rc;
    if (s->zs.avail_in == 0) {
        s->done = 1;
        return 0;
    }
    if (s->zs.avail_in >= 2 && s->zs.next_in[0] == 0x1f && s->zs.next_in[1] == 0x8b) {
        inflateReset(&s->zs);
        return 0;
    }
    return ct_error_set(CT_EFORMAT, "%s: unexpected non-gzip data after the end of the gzip stream",
                        s->path);
}

static int src_read_gz(struct idx_src *s, unsigned char *dst, size_t len, size_t *got)
{
    size_t produced = 0;
    while (produced < len && !s->done) {
        if (s->zs.avail_in == 0) {
            int rc = src_fill_input(s, 1);
            if (rc < 0)
                return rc;
        }
        size_t want = len - produced;
        s->zs.next_out = dst + produced;
        s->zs.avail_out = want > UINT_MAX ? UINT_MAX : (uInt)want;
        uInt before = s->zs.avail_out;
        int zrc = inflate(&s->zs, Z_NO_FLUSH);
        produced += before - s->zs.avail_out;
        switch (zrc) {
        case Z_OK:
            break;
        case Z_STREAM_END: {
            int rc = src_member_end(s);
            if (rc < 0)
                return rc;
            break;
        }
        case Z_BUF_ERROR:
            /* No progress was possible with output space left: inflate needs
             * input the file no longer has. */
            if (s->zs.avail_in == 0 && s->in_eof)
                return ct_error_set(CT_EFORMAT, "%s: truncated gzip stream", s->path);
            break;
        case Z_MEM_ERROR:
            return ct_error_set(CT_ENOMEM, "%s: out of memory decoding gzip data", s->path);
        default:
            return ct_error_set(CT_EFORMAT, "%s: corrupt gzip data: %s", s->path,
                                s->zs.msg ? s->zs.msg : zError(zrc));
        }
    }
    *got = produced;
    return 0;
}

static int src_read_raw(struct idx_src *s, unsigned char *dst, size_t len, size_t *got)
{
    /* The bytes read while sniffing for gzip come first. */
    size_t n = s->in_avail < len ? s->in_avail : len;
    memcpy(dst, s->in_pos, n);
    s->in_pos += n;
    s->in_avail -= n;
    size_t more;
    int rc = src_fread(s, dst + n, len - n, &more);
    *got = n + more;
    return rc;
}

/* Read up to `len` bytes; fewer only at the end of the data. Returns 0 or a
 * negative code with the message set. */
static int src_read(struct idx_src *s, void *dst, size_t len, size_t *got)
{
    return s->gz ? src_read_gz(s, dst, len, got) : src_read_raw(s, dst, len, got);
}

static int src_open(struct idx_src *s, const char *path)
{
    memset(s, 0, sizeof *s);
    s->path = path;
    s->f = fopen(path, "rb");
    if (!s->f) {
        int e = errno;
        return ct_error_set(e == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                            strerror(e));
    }
    s->in = malloc(IDX_IN_CHUNK);
    if (!s->in) {
        fclose(s->f);
        s->f = NULL;
        return ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    }
    /* Sniff the first two bytes: the gzip magic decides the decoder, whatever
     * the file is called. They stay in the input buffer either way. */
    size_t got;
    int rc = src_fread(s, s->in, 2, &got);
    if (rc < 0)
        goto fail;
    s->gz = got == 2 && s->in[0] == 0x1f && s->in[1] == 0x8b;
    if (!s->gz) {
        s->in_pos = s->in;
        s->in_avail = got;
        return 0;
    }
    s->zs.next_in = s->in;
    s->zs.avail_in = (uInt)got;
    /* 15 + 16: the largest window, and expect a gzip (not zlib) wrapper, whose
     * CRC-32 and length trailer inflate then checks for us. */
    int zrc = inflateInit2(&s->zs, 15 + 16);
    if (zrc != Z_OK) {
        rc = ct_error_set(zrc == Z_MEM_ERROR ? CT_ENOMEM : CT_EIO, "%s: cannot start gzip decoder: %s",
                          path, s->zs.msg ? s->zs.msg : zError(zrc));
        goto fail;
    }
    s->zs_live = 1;
    return 0;
fail:
    free(s->in);
    fclose(s->f);
    memset(s, 0, sizeof *s);
    return rc;
}

static void src_close(struct idx_src *s)
{
    if (s->zs_live)
        inflateEnd(&s->zs);
    free(s->in);
    if (s->f)
        fclose(s->f); /* read-only: nothing to lose if close fails */
    memset(s, 0, sizeof *s);
}

static const char *idx_dtype_name(unsigned dtype)
{
    switch (dtype) {
    case 0x08: return "unsigned byte";
    case 0x09: return "signed byte";
    case 0x0B: return "int16";
    case 0x0C: return "int32";
    case 0x0D: return "float32";
    case 0x0E: return "float64";
    }
    return "unknown";
}

/* "60000x28x28" into buf, for messages. */
static void idx_format_dims(char *buf, size_t cap, const uint32_t *dims, int rank)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < rank && used < cap; i++) {
        int n = snprintf(buf + used, cap - used, "%s%lu", i ? "x" : "", (unsigned long)dims[i]);
        if (n < 0)
            break;
        used += (size_t)n;
    }
}

static uint32_t idx_be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

/* Read and check the header, filling rank, dims and numel of `out`. */
static int idx_read_header(struct idx_src *s, struct ct_idx *out)
{
    const char *path = s->path;
    unsigned char hdr[4 + 4 * CT_IDX_MAX_RANK];
    size_t got;
    int rc = src_read(s, hdr, 4, &got);
    if (rc < 0)
        return rc;
    if (got < 4)
        return ct_error_set(CT_EFORMAT,
                            "%s: not an IDX file: %zu bytes, too short for the 4-byte header",
                            path, got);
    if (hdr[0] != 0 || hdr[1] != 0)
        return ct_error_set(CT_EFORMAT,
                            "%s: not an IDX file: expected magic 0x0000 at offset 0, found 0x%02X%02X",
                            path, hdr[0], hdr[1]);
    if (hdr[2] != CT_IDX_DTYPE_U8)
        return ct_error_set(CT_EFORMAT,
                            "%s: unsupported IDX dtype 0x%02X (%s) at offset 2: only 0x%02X "
                            "(unsigned byte) is supported",
                            path, hdr[2], idx_dtype_name(hdr[2]), CT_IDX_DTYPE_U8);
    int rank = hdr[3];
    if (rank < 1 || rank > CT_IDX_MAX_RANK)
        return ct_error_set(CT_EFORMAT, "%s: IDX rank %d at offset 3 is out of range: expected 1..%d",
                            path, rank, CT_IDX_MAX_RANK);
    size_t dim_bytes = 4 * (size_t)rank;
    rc = src_read(s, hdr + 4, dim_bytes, &got);
    if (rc < 0)
        return rc;
    if (got < dim_bytes)
        return ct_error_set(CT_EFORMAT,
                            "%s: truncated header: rank %d needs %zu header bytes, found %zu", path,
                            rank, 4 + dim_bytes, 4 + got);

    out->rank = rank;
    for (int i = 0; i < rank; i++)
        out->dims[i] = idx_be32(hdr + 4 + 4 * i);
    char dims[64];
    idx_format_dims(dims, sizeof dims, out->dims, rank);

    /* Bound the product one factor at a time, by division, so that a header
     * of four huge dimensions cannot wrap size_t into a small, plausible
     * allocation. */
    size_t numel = 1;
    for (int i = 0; i < rank; i++) {
        uint32_t d = out->dims[i];
        if (d == 0)
            return ct_error_set(CT_EFORMAT, "%s: dimension %d of the header is zero (dims %s)", path,
                                i, dims);
        if (d > CT_IDX_MAX_BYTES / numel)
            return ct_error_set(CT_EFORMAT,
                                "%s: header dims %s describe more data than the limit of %zu bytes",
                                path, dims, CT_IDX_MAX_BYTES);
        numel *= d;
    }
    out->numel = numel;
    return 0;
}

/* Count (up to a bound) what is left after the payload; any byte is an error. */
static int idx_check_end(struct idx_src *s)
{
    unsigned char scratch[4096];
    size_t extra = 0, got;
    do {
        int rc = src_read(s, scratch, sizeof scratch, &got);
        if (rc < 0)
            return rc;
        extra += got;
    } while (got == sizeof scratch && extra < IDX_TRAILING_COUNT_MAX);
    if (extra == 0)
        return 0;
    return ct_error_set(CT_EFORMAT, "%s: %s%zu trailing bytes after the data the header describes",
                        s->path, got == sizeof scratch ? "at least " : "", extra);
}

static int idx_truncated(const struct idx_src *s, const struct ct_idx *idx, size_t got)
{
    char dims[64];
    idx_format_dims(dims, sizeof dims, idx->dims, idx->rank);
    return ct_error_set(CT_EFORMAT,
                        "%s: truncated: header promises %zu bytes of data (dims %s), found %zu",
                        s->path, idx->numel, dims, got);
}

/* Read the payload that the header in `idx` promises into `data` (numel
 * bytes) and insist that nothing follows it. */
static int idx_read_payload(struct idx_src *s, const struct ct_idx *idx, uint8_t *data)
{
    size_t got;
    int rc = src_read(s, data, idx->numel, &got);
    if (rc < 0)
        return rc;
    if (got < idx->numel)
        return idx_truncated(s, idx, got);
    return idx_check_end(s);
}

/* The first buffer ct_idx_load allocates; it doubles from there. */
#define IDX_ALLOC_FIRST ((size_t)1 << 20)

/* The same into a buffer of our own (malloc'd, numel bytes, in *out) that
 * grows with what the file delivers, doubling up to numel: the header's
 * promise is bounded (CT_IDX_MAX_BYTES) but not proof, and a 20-byte file
 * whose header says 65536x65536 must get "truncated", not a 4 GiB
 * allocation (tests/fuzz/regress/idx/). Gzip gives no size to check
 * up front, so the bytes have to arrive before the memory is spent. */
static int idx_read_payload_alloc(struct idx_src *s, const struct ct_idx *idx, uint8_t **out)
{
    *out = NULL;
    size_t cap = idx->numel < IDX_ALLOC_FIRST ? idx->numel : IDX_ALLOC_FIRST;
    size_t have = 0;
    uint8_t *buf = NULL;
    int rc;
    for (;;) {
        uint8_t *grown = realloc(buf, cap);
        if (!grown) {
            rc = ct_error_set(CT_ENOMEM, "%s: out of memory allocating %zu bytes for the data",
                              s->path, cap);
            goto fail;
        }
        buf = grown;
        size_t got = 0;
        if ((rc = src_read(s, buf + have, cap - have, &got)) < 0)
            goto fail;
        have += got;
        if (have < cap) {
            rc = idx_truncated(s, idx, have);
            goto fail;
        }
        if (have == idx->numel)
            break;
        cap = idx->numel - cap < cap ? idx->numel : 2 * cap;
    }
    if ((rc = idx_check_end(s)) < 0)
        goto fail;
    *out = buf;
    return 0;
fail:
    free(buf);
    return rc;
}

/* Open `path` and read its header; on failure nothing stays open. */
static int open_header(struct idx_src *s, struct ct_idx *idx, const char *path)
{
    int rc = src_open(s, path);
    if (rc < 0)
        return rc;
    if ((rc = idx_read_header(s, idx)) < 0)
        src_close(s);
    return rc;
}

int ct_idx_load(struct ct_idx *out, const char *path)
{
    memset(out, 0, sizeof *out);
    struct idx_src s;
    struct ct_idx idx = {0};
    int rc = open_header(&s, &idx, path);
    if (rc < 0)
        return rc;

    rc = idx_read_payload_alloc(&s, &idx, &idx.data);
    if (rc < 0)
        goto fail;

    src_close(&s);
    *out = idx;
    return 0;
fail:
    free(idx.data);
    src_close(&s);
    return rc;
}

/* Deflate's largest expansion: a 258-byte match in 2 bits (a 1-bit length
 * code and a 1-bit distance code), i.e. 1032 bytes out per byte in. Block
 * headers, the gzip wrapper and the literal a match needs first only lower
 * the ratio, so no gzip file of C bytes inflates to more than 1032 C. */
#define IDX_GZIP_MAX_RATIO 1032

/* The header promises numel bytes after it: can the file deliver them? A raw
 * file must hold exactly header + payload bytes; a gzip file must be at least
 * 1/1032 of that. Cheap (one fstat), and what lets a caller size a buffer
 * from the header without a 16-byte file saying 10x65536x6553 costing 4 GiB
 * of memory before "truncated" (tests/fuzz/README.md). */
static int idx_check_file_size(const struct idx_src *s, const struct ct_idx *idx)
{
    struct stat st;
    if (fstat(fileno(s->f), &st) != 0)
        return ct_error_set(CT_EIO, "%s: cannot stat: %s", s->path, strerror(errno));
    if (!S_ISREG(st.st_mode))
        return 0; /* a pipe or device has no size to compare: the read decides */
    const size_t header = 4 + 4 * (size_t)idx->rank;
    const uint64_t file = (uint64_t)st.st_size;
    const uint64_t want = (uint64_t)header + idx->numel;
    char dims[64];
    idx_format_dims(dims, sizeof dims, idx->dims, idx->rank);
    if (!s->gz && file < want)
        return ct_error_set(CT_EFORMAT,
                            "%s: truncated: header promises %zu bytes of data (dims %s), the file "
                            "holds %llu after the %zu-byte header",
                            s->path, idx->numel, dims, (unsigned long long)(file - header), header);
    if (!s->gz && file > want)
        return ct_error_set(CT_EFORMAT, "%s: %llu trailing bytes after the data the header describes",
                            s->path, (unsigned long long)(file - want));
    if (s->gz && want / IDX_GZIP_MAX_RATIO > file)
        return ct_error_set(CT_EFORMAT,
                            "%s: truncated: header promises %zu bytes of data (dims %s), more than "
                            "the file's %llu gzip bytes can inflate to (at most %d:1)",
                            s->path, idx->numel, dims, (unsigned long long)file,
                            IDX_GZIP_MAX_RATIO);
    return 0;
}

int ct_idx_read_header(struct ct_idx *out, const char *path)
{
    memset(out, 0, sizeof *out);
    struct idx_src s;
    struct ct_idx idx = {0};
    int rc = open_header(&s, &idx, path);
    if (rc < 0)
        return rc;
    rc = idx_check_file_size(&s, &idx);
    idx.gzip = s.gz;
    idx.header_bytes = 4 + 4 * (size_t)idx.rank;
    src_close(&s);
    if (rc < 0)
        return rc;
    *out = idx;
    return 0;
}

int ct_idx_load_into(const char *path, const struct ct_idx *expect, uint8_t *data)
{
    struct idx_src s;
    struct ct_idx idx = {0};
    int rc = src_open(&s, path);
    if (rc < 0)
        return rc;
    rc = idx_read_header(&s, &idx);
    if (rc < 0)
        goto out;
    /* The buffer was sized from an earlier read of the header (possibly by
     * another process); a file replaced in between must not overrun it. */
    if (idx.rank != expect->rank ||
        memcmp(idx.dims, expect->dims, (size_t)idx.rank * sizeof idx.dims[0]) != 0) {
        char now[64], before[64];
        idx_format_dims(now, sizeof now, idx.dims, idx.rank);
        idx_format_dims(before, sizeof before, expect->dims, expect->rank);
        rc = ct_error_set(CT_EFORMAT,
                          "%s: the header changed while loading: dims %s, earlier %s", path, now,
                          before);
        goto out;
    }
    rc = idx_read_payload(&s, &idx, data);
out:
    src_close(&s);
    return rc;
}

void ct_idx_free(struct ct_idx *idx)
{
    if (!idx)
        return;
    free(idx->data);
    memset(idx, 0, sizeof *idx);
}

/* ------------------------------------------------------------ data set format */

struct idx_ds {
    struct ct__mapping map; /* a raw images file, mapped */
    const uint8_t *pixels;  /* (N, S) */
    uint8_t *decoded;       /* a gzipped images file, decoded into this */
    struct ct_shared_alloc sh; /* how `decoded` is released (release NULL: free) */
};

static int idx_check_images(const struct ct_idx *im, const char *path, struct ct_dataset *ds)
{
    if (im->rank != 3 && im->rank != 4)
        return ct_error_set(CT_EFORMAT,
                            "%s: expected images of rank 3 (n,h,w) or 4 (n,c,h,w), found rank %d",
                            path, im->rank);
    /* The product of the dims is bounded by CT_IDX_MAX_BYTES, but a single
     * dim (with the others 1) can still exceed what an int holds. */
    for (int i = 1; i < im->rank; i++)
        if (im->dims[i] > INT_MAX)
            return ct_error_set(CT_EFORMAT, "%s: image dimension %d is %lu, larger than %d", path,
                                i, (unsigned long)im->dims[i], INT_MAX);
    const int off = im->rank - 3;
    ds->n = im->dims[0];
    ds->c = off ? (int)im->dims[1] : 1;
    ds->h = (int)im->dims[1 + off];
    ds->w = (int)im->dims[2 + off];
    if (ds->c > CT_DATA_MAX_CHANNELS)
        return ct_error_set(CT_EFORMAT, "%s: %d channels, at most %d", path, ds->c,
                            CT_DATA_MAX_CHANNELS);
    ds->sample_numel = im->numel / im->dims[0];
    ds->dtype = CT_DATA_U8;
    ds->layout = CT_DATA_LAYOUT_NCHW;
    return 0;
}

/* The labels file, whole: rank 1, one per image, into ds->y. IDX labels are
 * unsigned bytes, below 256 by construction. */
static int idx_read_labels(struct ct_dataset *ds, const char *path, const char *images_path)
{
    struct ct_idx lb;
    int rc = ct_idx_load(&lb, path);
    if (rc < 0)
        return rc;
    if (lb.rank != 1)
        rc = ct_error_set(CT_EFORMAT, "%s: expected labels of rank 1 (n), found rank %d", path,
                          lb.rank);
    else if (lb.dims[0] != ds->n)
        rc = ct_error_set(CT_EFORMAT, "%s: %lu labels but %s has %zu images", path,
                          (unsigned long)lb.dims[0], images_path, ds->n);
    else if (!(ds->y = malloc((ds->n ? ds->n : 1) * sizeof *ds->y)))
        rc = ct_error_set(CT_ENOMEM, "out of memory for %zu labels", ds->n);
    if (rc == 0) {
        int max = 0;
        for (size_t i = 0; i < ds->n; i++) {
            ds->y[i] = lb.data[i];
            if (lb.data[i] > max)
                max = lb.data[i];
        }
        ds->n_classes = max + 1;
        ds->targets = 1;
    }
    ct_idx_free(&lb);
    return rc;
}

/* Every rank of a node-shared open takes the same collective steps in the
 * same order whatever fails where: ready(meta), then for a gzipped file
 * alloc, fill, ready; for a raw one ready(map). */
static int idx_open(struct ct_dataset *ds, const struct ct_dataset_params *p)
{
    const struct ct_shared_alloc *a = p->shared ? p->shared : ct_shared_private();
    const char *dir = p->dir && p->dir[0] ? p->dir : NULL;
    const int have_labels = p->labels && p->labels[0];
    struct idx_ds *st = calloc(1, sizeof *st);
    char *images = p->images ? ct_dataset_path(dir, p->images) : NULL;
    char *labels = have_labels ? ct_dataset_path(dir, p->labels) : NULL;
    struct ct_idx im = {0};
    int rc = 0;
    if (!st || !images || (have_labels && !labels))
        rc = ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0 && strchr(p->images, ','))
        rc = ct_error_set(CT_EINVAL, "%s: a list of files: only cifar10 takes several", images);
    if (rc == 0)
        rc = ct_idx_read_header(&im, images);
    if (rc == 0)
        rc = idx_check_images(&im, images, ds);
    if (rc == 0 && have_labels)
        rc = idx_read_labels(ds, labels, images);
    if (rc == 0 && (rc = ct__data_add_file(ds, images)) == 0 && have_labels)
        rc = ct__data_add_file(ds, labels);
    if ((rc = a->ready(a->ctx, rc)) < 0)
        goto fail;
    if (im.gzip) {
        void *buf = NULL;
        int fill = 0;
        if ((rc = a->alloc(a->ctx, im.numel, &buf, &fill)) < 0) {
            if (!p->shared && rc == CT_ENOMEM) /* the private table: say what for */
                ct_error_set(rc, "out of memory allocating %zu bytes for the images", im.numel);
            goto fail;
        }
        rc = fill ? ct_idx_load_into(images, &im, buf) : 0;
        if ((rc = a->ready(a->ctx, rc)) < 0) {
            a->release(a->ctx, buf);
            goto fail;
        }
        st->decoded = buf;
        st->sh = *a;
        st->pixels = buf;
    } else {
        rc = ct__data_map(images, &st->map);
        if (rc == 0 && st->map.size != im.header_bytes + im.numel)
            rc = ct_error_set(CT_EFORMAT, "%s: the file changed while opening: %zu bytes, not %zu",
                              images, st->map.size, im.header_bytes + im.numel);
        if ((rc = a->ready(a->ctx, rc)) < 0)
            goto fail;
        st->pixels = st->map.data + im.header_bytes;
    }
    ds->impl = st;
    free(images);
    free(labels);
    return 0;
fail:
    if (st)
        ct__data_unmap(&st->map);
    free(st);
    free(images);
    free(labels);
    return rc;
}

static const void *idx_sample(const struct ct_dataset *ds, size_t i)
{
    const struct idx_ds *st = ds->impl;
    return st->pixels + i * ds->sample_numel;
}

static void idx_close(struct ct_dataset *ds)
{
    struct idx_ds *st = ds->impl;
    if (!st)
        return;
    if (st->decoded)
        st->sh.release(st->sh.ctx, st->decoded);
    ct__data_unmap(&st->map);
    free(st);
    ds->impl = NULL;
}

const struct ct_dataset_ops ct_dataset_idx_ops = {
    .name = "idx", .open = idx_open, .sample = idx_sample, .close = idx_close};
