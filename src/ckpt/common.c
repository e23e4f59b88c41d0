/* Checkpoint internals shared by writer, reader and inspector: dtypes, the
 * naming of checkpoint directories, durable POSIX file operations, and the
 * checks that stand between bytes on disk and anything that trusts them
 * (manifest size cap, version, structure; data size; per-section bounds,
 * shape and SHA-256). No MPI here: reading is done by each process alone. */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ckpt/ckpt-impl.h"
#include "core/error.h"
#include "core/liveness.h"
#include "core/path.h"

static const char *const dtype_names[CT_DTYPE_COUNT] = {"f32", "f64", "i64", "u8"};
static const size_t dtype_sizes[CT_DTYPE_COUNT] = {4, 8, 8, 1};

const char *ct_dtype_name(enum ct_dtype t)
{
    return (unsigned)t < CT_DTYPE_COUNT ? dtype_names[t] : "?";
}

size_t ct_dtype_size(enum ct_dtype t)
{
    return (unsigned)t < CT_DTYPE_COUNT ? dtype_sizes[t] : 0;
}

int ct__ckpt_dtype_parse(const char *s)
{
    for (int i = 0; s && i < CT_DTYPE_COUNT; i++)
        if (strcmp(s, dtype_names[i]) == 0)
            return i;
    return -1;
}

void ct__ckpt_hex_prefix(const uint8_t *d, size_t dlen, char *out, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    size_t k = 0;
    for (size_t i = 0; i < dlen && k + 2 < n && k < 16; i++) {
        out[k++] = hx[d[i] >> 4];
        out[k++] = hx[d[i] & 15];
    }
    if (dlen == 0 && n > 2)
        out[k++] = '-';
    if (k + 2 < n && dlen > 8) {
        out[k++] = '.';
        out[k++] = '.';
    }
    out[k] = '\0';
}

int ct__ckpt_parse_name(const char *name, int64_t *step)
{
    if (strncmp(name, "ckpt-", 5) != 0)
        return 0;
    const char *p = name + 5;
    /* One spelling per step, the one the writer uses: "ckpt-007" would name
     * step 7 while being another directory than ckpt-7. */
    if (!*p || strlen(p) > 18 || (p[0] == '0' && p[1] != '\0'))
        return 0;
    int64_t v = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return 0;
        v = v * 10 + (*p - '0');
    }
    *step = v;
    return 1;
}

int ct__ckpt_is_tmp_name(const char *name)
{
    if (strncmp(name, "ckpt-", 5) != 0)
        return 0;
    const char *p = name + 5;
    if (*p < '0' || *p > '9')
        return 0;
    while (*p >= '0' && *p <= '9')
        p++;
    return strncmp(p, ".tmp-", 5) == 0;
}

/* ---------------------------------------------------------------- files */

int ct__ckpt_fsync_dir(const char *dir) { return ct_fsync_dir(dir); }

int ct__ckpt_write_file(const char *dir, const char *name, const void *data, size_t len)
{
    char path[1100];
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return ct_error_set(CT_EINVAL, "%s/%s: path too long", dir, name);
    return ct_file_write_durable(path, data, len);
}

int ct__ckpt_write_atomic(const char *dir, const char *name, const void *data, size_t len,
                          int *renamed)
{
    char path[1100], tmp[1120];
    if (renamed)
        *renamed = 0;
    if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, name) >= sizeof path)
        return ct_error_set(CT_EINVAL, "%s/%s: path too long", dir, name);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int rc = ct_file_write_durable(tmp, data, len);
    if (rc == 0 && rename(tmp, path) != 0)
        rc = ct_error_set(CT_EIO, "rename %s -> %s failed: %s", tmp, path, strerror(errno));
    if (rc < 0) {
        unlink(tmp);
        return rc;
    }
    if (renamed)
        *renamed = 1;
    return ct__ckpt_fsync_dir(dir);
}

/* The only names a checkpoint directory (final or temporary) holds: ours,
 * and the lock probe Open MPI's MPI-IO creates beside data.bin and removes at
 * once (left behind by a crash in between). */
static const char *const own_files[] = {"manifest.pb", "manifest.sha256", "data.bin"};
#define MPIIO_PROBE_PREFIX "data.bin.locktest."

static int is_own_file(const char *name)
{
    for (size_t i = 0; i < sizeof own_files / sizeof *own_files; i++)
        if (strcmp(name, own_files[i]) == 0)
            return 1;
    return strncmp(name, MPIIO_PROBE_PREFIX, strlen(MPIIO_PROBE_PREFIX)) == 0;
}

int ct__ckpt_dir_is_ours(const char *dir)
{
    struct stat st;
    if (lstat(dir, &st) != 0)
        return errno == ENOENT
                   ? ct_error_set(CT_ENOENT, "%s: does not exist", dir)
                   : ct_error_set(CT_EIO, "%s: cannot stat: %s", dir, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ct_error_set(CT_ESTATE, "%s: not a checkpoint: %s", dir,
                            S_ISLNK(st.st_mode) ? "a symbolic link" : "not a directory");
    DIR *d = opendir(dir);
    if (!d)
        return ct_error_set(CT_EIO, "%s: cannot open: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    char path[1400];
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (!is_own_file(e->d_name)) {
            rc = ct_error_set(CT_ESTATE, "%s: not a checkpoint: holds '%s', which no checkpoint "
                              "writer makes", dir, e->d_name);
            break;
        }
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (lstat(path, &st) != 0) {
            if (errno != ENOENT) /* gone meanwhile: fine */
                rc = ct_error_set(CT_EIO, "%s: cannot stat: %s", path, strerror(errno));
        } else if (!S_ISREG(st.st_mode)) {
            rc = ct_error_set(CT_ESTATE, "%s: not a checkpoint: %s is not a regular file", dir,
                              e->d_name);
        }
    }
    closedir(d);
    return rc;
}

int ct__ckpt_remove_dir(const char *dir, const char *first)
{
    char path[1400];
    /* Refuse before touching anything: a directory with a name like ours
     * but other contents (a user's, a symlink elsewhere) is not ours to
     * delete, in whole or in part. */
    int rc = ct__ckpt_dir_is_ours(dir);
    if (rc == CT_ENOENT) {
        ct_error_clear();
        return 0;
    }
    if (rc < 0)
        return rc;
    if (first) {
        snprintf(path, sizeof path, "%s/%s", dir, first);
        if (unlink(path) != 0 && errno != ENOENT)
            return ct_error_set(CT_EIO, "%s: cannot remove: %s", path, strerror(errno));
        if ((rc = ct__ckpt_fsync_dir(dir)) < 0)
            return rc;
    }
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : ct_error_set(CT_EIO, "%s: cannot open: %s", dir, strerror(errno));
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!is_own_file(e->d_name)) /* only "." and "..": the check above saw the rest */
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT && rc == 0)
            rc = ct_error_set(CT_EIO, "%s: cannot remove: %s", path, strerror(errno));
    }
    closedir(d);
    if (rc == 0 && rmdir(dir) != 0 && errno != ENOENT)
        rc = ct_error_set(CT_EIO, "%s: cannot remove directory: %s", dir, strerror(errno));
    return rc;
}

/* Read exactly n bytes from offset `at` of fd (pread in chunks of at most
 * 64 MiB, retrying on EINTR, each chunk a liveness mark for the hang
 * watchdog); an error names the file and the offset. */
static int read_exact_at(int fd, void *buf, size_t n, size_t at, const char *path)
{
    size_t got = 0;
    while (got < n) {
        size_t want = n - got > ((size_t)64 << 20) ? ((size_t)64 << 20) : n - got;
        ssize_t r = pread(fd, (uint8_t *)buf + got, want, (off_t)(at + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return ct_error_set(CT_EIO, "%s: read failed at offset %zu: %s", path, at + got,
                                r < 0 ? strerror(errno) : "file shrank while reading");
        got += (size_t)r;
        ct_liveness_mark(-1);
    }
    return 0;
}

static int read_exact(int fd, void *buf, size_t n, const char *path)
{
    return read_exact_at(fd, buf, n, 0, path);
}

int ct__ckpt_read_small(const char *path, size_t cap, uint8_t **out, size_t *len)
{
    *out = NULL;
    *len = 0;
    uint64_t size;
    int fd = ct_open_regular(path, &size);
    if (fd < 0)
        return fd;
    if (size > (uint64_t)cap) {
        close(fd);
        return ct_error_set(CT_EFORMAT, "%s: %" PRIu64 " bytes, larger than the %zu bytes allowed", path,
                            size, cap);
    }
    size_t n = (size_t)size;
    uint8_t *buf = malloc(n + 1);
    if (!buf) {
        close(fd);
        return ct_error_set(CT_ENOMEM, "%s: cannot allocate %zu bytes", path, n + 1);
    }
    int rc = read_exact(fd, buf, n, path);
    close(fd);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 0;
}

/* ---------------------------------------------------------------- manifest */

static int check_digest_field(const char *path, const char *what, const ProtobufCBinaryData *b)
{
    if (b->len != CT_SHA256_LEN)
        return ct_error_set(CT_EFORMAT, "%s: %s: digest of %zu bytes, expected %d", path, what,
                            b->len, CT_SHA256_LEN);
    return 0;
}

static int check_structure(const char *path, const Ctrain__Manifest *m)
{
    int rc;
    if (m->world_size < 1)
        return ct_error_set(CT_EFORMAT, "%s: world size %d", path, (int)m->world_size);
    if (m->n_ranks != (size_t)m->world_size)
        return ct_error_set(CT_EFORMAT, "%s: %zu rank records for a world of %d ranks", path,
                            m->n_ranks, (int)m->world_size);
    for (size_t i = 0; i < m->n_ranks; i++)
        if (m->ranks[i]->rank != (int32_t)i)
            return ct_error_set(CT_EFORMAT, "%s: rank entry %zu is for rank %d (expected rank order)",
                                path, i, (int)m->ranks[i]->rank);
    if ((rc = check_digest_field(path, "config_sha256", &m->config_sha256)) < 0)
        return rc;
    if (m->has_parent_sha256 && (rc = check_digest_field(path, "parent_sha256", &m->parent_sha256)) < 0)
        return rc;
    uint8_t d[CT_SHA256_LEN];
    if ((rc = ct_sha256_buf(m->config, strlen(m->config), d)) < 0)
        return rc;
    if (memcmp(d, m->config_sha256.data, CT_SHA256_LEN) != 0) {
        char e[40], f[40];
        ct__ckpt_hex_prefix(m->config_sha256.data, CT_SHA256_LEN, e, sizeof e);
        ct__ckpt_hex_prefix(d, CT_SHA256_LEN, f, sizeof f);
        return ct_error_set(CT_EFORMAT, "%s: config: sha256 mismatch (expected %s, found %s)", path,
                            e, f);
    }
    return 0;
}

/* DIR/manifest.sha256 ("HEX  manifest.pb\n", the format of sha256sum) must
 * hold the digest of the manifest bytes: the manifest indexes every other
 * byte of the checkpoint, and this is what makes a flipped bit in the
 * manifest itself (a step, a scalar) detectable. */
static int check_sidecar(const char *dir, const char *mpath, const uint8_t digest[CT_SHA256_LEN],
                         size_t mlen)
{
    char path[1100];
    snprintf(path, sizeof path, "%s/manifest.sha256", dir);
    uint8_t *buf;
    size_t len;
    int rc = ct__ckpt_read_small(path, 256, &buf, &len);
    if (rc < 0)
        return rc == CT_ENOENT ? ct_error_set(CT_EFORMAT, "%s: missing (the manifest's digest)", path)
                               : rc;
    uint8_t want[CT_SHA256_LEN];
    int ok = len >= 2 * CT_SHA256_LEN;
    for (size_t i = 0; ok && i < CT_SHA256_LEN; i++) {
        int v = 0;
        for (int h = 0; h < 2; h++) {
            char ch = (char)buf[2 * i + (size_t)h];
            int x = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
            if (x < 0)
                ok = 0;
            v = v * 16 + (x < 0 ? 0 : x);
        }
        want[i] = (uint8_t)v;
    }
    free(buf);
    if (!ok)
        return ct_error_set(CT_EFORMAT, "%s: does not hold a SHA-256 in hex", path);
    if (memcmp(want, digest, CT_SHA256_LEN) != 0) {
        char e[40], f[40];
        ct__ckpt_hex_prefix(want, CT_SHA256_LEN, e, sizeof e);
        ct__ckpt_hex_prefix(digest, CT_SHA256_LEN, f, sizeof f);
        return ct_error_set(CT_EFORMAT, "%s: sha256 mismatch (expected %s from manifest.sha256, found %s "
                            "over %zu bytes)", mpath, e, f, mlen);
    }
    return 0;
}

int ct__ckpt_load_manifest(const char *dir, Ctrain__Manifest **out, uint8_t digest[CT_SHA256_LEN])
{
    char path[1100];
    *out = NULL;
    if ((size_t)snprintf(path, sizeof path, "%s/manifest.pb", dir) >= sizeof path)
        return ct_error_set(CT_EINVAL, "%s: path too long", dir);
    uint8_t *buf;
    size_t len;
    int rc = ct__ckpt_read_small(path, CT_CKPT_MAX_MANIFEST_BYTES, &buf, &len);
    if (rc == CT_ENOENT)
        return ct_error_set(CT_ENOENT, "%s: no manifest (not a committed checkpoint)", path);
    if (rc < 0)
        return rc;
    if (len == 0) {
        free(buf);
        return ct_error_set(CT_EFORMAT, "%s: empty file", path);
    }
    if ((rc = ct_sha256_buf(buf, len, digest)) < 0) {
        free(buf);
        return rc;
    }
    Ctrain__Manifest *m = ctrain__manifest__unpack(NULL, len, buf);
    free(buf);
    if (!m)
        return ct_error_set(CT_EFORMAT, "%s: not a valid manifest (protobuf parse failed, %zu bytes)",
                            path, len);
    if (m->format_version != CT_CKPT_FORMAT_VERSION) {
        rc = ct_error_set(CT_EFORMAT, "%s: format version %u, this build reads version %d", path,
                          (unsigned)m->format_version, CT_CKPT_FORMAT_VERSION);
        ctrain__manifest__free_unpacked(m, NULL);
        return rc;
    }
    if ((rc = check_sidecar(dir, path, digest, len)) < 0 || (rc = check_structure(path, m)) < 0) {
        ctrain__manifest__free_unpacked(m, NULL);
        return rc;
    }
    *out = m;
    return 0;
}

int ct__ckpt_load_data(const char *dir, const Ctrain__Manifest *m, uint8_t **out)
{
    return ct__ckpt_load_range(dir, m, 0, m->data_size, out);
}

int ct__ckpt_load_range(const char *dir, const Ctrain__Manifest *m, uint64_t begin, uint64_t end,
                        uint8_t **out)
{
    char path[1100];
    *out = NULL;
    snprintf(path, sizeof path, "%s/data.bin", dir);
    uint64_t size;
    int fd = ct_open_regular(path, &size);
    if (fd < 0)
        return fd;
    if (size != m->data_size) {
        close(fd);
        return ct_error_set(CT_EFORMAT, "%s: %" PRIu64 " bytes, the manifest says %" PRIu64 " (truncated or replaced)",
                            path, size, m->data_size);
    }
    if (begin > end || end > m->data_size) {
        close(fd);
        return ct_error_set(CT_EFORMAT, "%s: bytes [%" PRIu64 ", %" PRIu64 ") lie outside the %" PRIu64
                            "-byte file", path, begin, end, m->data_size);
    }
    size_t n = (size_t)(end - begin);
    void *buf = NULL;
    if (posix_memalign(&buf, CT__CKPT_ALIGN, n ? n : 1) != 0) {
        close(fd);
        return ct_error_set(CT_ENOMEM, "%s: cannot allocate %zu bytes", path, n);
    }
    int rc = read_exact_at(fd, buf, n, (size_t)begin, path);
    close(fd);
    if (rc < 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    return 0;
}

static int check_sha(const char *dir, const char *what, const uint8_t *bytes, uint64_t len,
                     const ProtobufCBinaryData *want)
{
    uint8_t d[CT_SHA256_LEN];
    int rc = ct_sha256_buf(bytes, (size_t)len, d);
    if (rc < 0)
        return rc;
    if (memcmp(d, want->data, CT_SHA256_LEN) != 0) {
        char e[40], f[40];
        ct__ckpt_hex_prefix(want->data, CT_SHA256_LEN, e, sizeof e);
        ct__ckpt_hex_prefix(d, CT_SHA256_LEN, f, sizeof f);
        return ct_error_set(CT_EFORMAT, "%s/data.bin: %s: sha256 mismatch (expected %s, found %s)",
                            dir, what, e, f);
    }
    return 0;
}

/* What a tensor entry and a rank record have in common: bytes [offset,
 * +length) inside data.bin, a SHA-256 of the right size, and (data: the
 * file's bytes, or NULL to skip) those bytes matching it. */
static int check_span(const char *dir, const char *what, const Ctrain__Manifest *m,
                      const uint8_t *data, uint64_t offset, uint64_t length,
                      const ProtobufCBinaryData *sha)
{
    if (offset > m->data_size || length > m->data_size - offset)
        return ct_error_set(CT_EFORMAT, "%s/data.bin: %s: bytes [%" PRIu64 ", +%" PRIu64
                            ") lie outside the %" PRIu64 "-byte file", dir, what, offset, length,
                            m->data_size);
    if (sha->len != CT_SHA256_LEN)
        return ct_error_set(CT_EFORMAT, "%s/manifest.pb: %s: digest of %zu bytes, expected %d", dir,
                            what, sha->len, CT_SHA256_LEN);
    return data ? check_sha(dir, what, data + offset, length, sha) : 0;
}

int ct__ckpt_verify_tensor(const char *dir, const Ctrain__Manifest *m, const uint8_t *data,
                           size_t i)
{
    const Ctrain__TensorEntry *t = m->tensors[i];
    char what[300];
    snprintf(what, sizeof what, "section %s", t->name);
    if (!t->name[0])
        return ct_error_set(CT_EFORMAT, "%s/manifest.pb: tensor entry %zu has no name", dir, i);
    int dt = ct__ckpt_dtype_parse(t->dtype);
    if (dt < 0)
        return ct_error_set(CT_EFORMAT, "%s/manifest.pb: %s: unknown dtype '%s'", dir, what, t->dtype);
    if (t->n_shape > CT__CKPT_MAX_DIMS)
        return ct_error_set(CT_EFORMAT, "%s/manifest.pb: %s: %zu dimensions, at most %d allowed", dir,
                            what, t->n_shape, CT__CKPT_MAX_DIMS);
    uint64_t bytes = ct_dtype_size((enum ct_dtype)dt);
    for (size_t k = 0; k < t->n_shape; k++) {
        int64_t s = t->shape[k];
        if (s < 0 || (s > 0 && bytes > UINT64_MAX / (uint64_t)s))
            return ct_error_set(CT_EFORMAT, "%s/manifest.pb: %s: bad dimension %" PRId64, dir, what, s);
        bytes *= (uint64_t)s;
    }
    if (bytes != t->length)
        return ct_error_set(CT_EFORMAT, "%s/manifest.pb: %s: its shape and dtype %s need %" PRIu64
                            " bytes, the entry says %" PRIu64, dir, what, t->dtype, bytes, t->length);
    if (t->offset % CT__CKPT_ALIGN != 0)
        return ct_error_set(CT_EFORMAT, "%s/manifest.pb: %s: offset %" PRIu64 " is not %d-byte aligned",
                            dir, what, t->offset, CT__CKPT_ALIGN);
    return check_span(dir, what, m, data, t->offset, t->length, &t->sha256);
}

int ct__ckpt_verify_rank_at(const char *dir, const Ctrain__Manifest *m, const uint8_t *data,
                            uint64_t base, size_t i)
{
    int rc = ct__ckpt_verify_rank(dir, m, NULL, i); /* bounds, size cap, digest length */
    const Ctrain__RankEntry *r = m->ranks[i];
    if (rc < 0 || !data)
        return rc;
    char what[64];
    snprintf(what, sizeof what, "rank record %zu", i);
    if (r->offset < base)
        return ct_error_set(CT_ESTATE, "%s/data.bin: %s at offset %" PRIu64 ", before the %" PRIu64
                            " read", dir, what, r->offset, base);
    return check_sha(dir, what, data + (r->offset - base), r->length, &r->sha256);
}

int ct__ckpt_verify_rank(const char *dir, const Ctrain__Manifest *m, const uint8_t *data, size_t i)
{
    const Ctrain__RankEntry *r = m->ranks[i];
    char what[64];
    snprintf(what, sizeof what, "rank record %zu", i);
    if (r->length > CT_CKPT_MAX_RECORD_BYTES)
        return ct_error_set(CT_EFORMAT, "%s/manifest.pb: %s: %" PRIu64 " bytes, larger than the %zu allowed",
                            dir, what, r->length, CT_CKPT_MAX_RECORD_BYTES);
    return check_span(dir, what, m, data, r->offset, r->length, &r->sha256);
}
