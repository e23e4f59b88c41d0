/* Paths, directories, atomic file replacement and durable writes (see path.h). */
#include "core/path.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"

int ct_path_join(char *out, size_t cap, const char *dir, const char *name)
{
    if (!out || cap == 0 || !dir || !name)
        return ct_error_set(CT_EINVAL, "ct_path_join: NULL argument or empty buffer");
    out[0] = '\0';
    size_t dlen = strlen(dir);
    /* Keep a lone "/" (the root) but drop the slashes that would double. */
    while (dlen > 1 && dir[dlen - 1] == '/')
        dlen--;
    while (*name == '/')
        name++;
    size_t nlen = strlen(name);
    int slash = dlen > 0 && nlen > 0 && dir[dlen - 1] != '/';
    size_t need = dlen + (size_t)slash + nlen + 1;
    if (need > cap)
        return ct_error_set(CT_ERANGE, "path %.*s/%s is too long: %zu bytes, room for %zu",
                            (int)dlen, dir, name, need - 1, cap - 1);
    memcpy(out, dir, dlen);
    if (slash)
        out[dlen] = '/';
    memcpy(out + dlen + (size_t)slash, name, nlen + 1);
    return 0;
}

/* One component: create it, or accept it when it already is a directory.
 * The stat after a failed mkdir (rather than a test of EEXIST) also accepts
 * an existing directory on a read-only file system, where mkdir says EROFS. */
static int mkdir_one(const char *p, mode_t mode)
{
    if (mkdir(p, mode) == 0)
        return 0;
    int err = errno;
    struct stat st;
    if (stat(p, &st) == 0) {
        if (S_ISDIR(st.st_mode))
            return 0;
        return ct_error_set(CT_EIO, "%s: cannot create directory: exists and is not a directory", p);
    }
    return ct_error_set(CT_EIO, "%s: cannot create directory: %s", p, strerror(err));
}

int ct_mkdir_p(const char *path, mode_t mode)
{
    if (!path || !*path)
        return ct_error_set(CT_EINVAL, "cannot create a directory with an empty path");
    char *p = strdup(path);
    if (!p)
        return ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    int rc = 0;
    /* Each prefix that ends before a slash is one component; runs of slashes
     * ("a//b") and a trailing slash add no empty components. */
    for (char *s = p + 1; *s && rc == 0; s++) {
        if (*s != '/' || s[-1] == '/')
            continue;
        *s = '\0';
        rc = mkdir_one(p, mode);
        *s = '/';
    }
    if (rc == 0)
        rc = mkdir_one(p, mode);
    free(p);
    return rc;
}

/* ---------------------------------------------------------------- replace */

void ct_replace_abort(struct ct_replace *r)
{
    if (r->f)
        fclose(r->f);
    if (r->tmp)
        unlink(r->tmp);
    free(r->tmp);
    free(r->path);
    r->f = NULL;
    r->tmp = r->path = NULL;
}

int ct_replace_open(struct ct_replace *r, const char *path)
{
    /* A per-process counter beside the pid makes the name unique among
     * threads and processes; O_EXCL makes a clash an error we retry, never a
     * shared file. open() with 0666 gives the file the umask's usual
     * permissions, which mkstemp's 0600 would not. */
    static atomic_uint counter;
    memset(r, 0, sizeof *r);
    size_t n = strlen(path) + 64;
    r->path = strdup(path);
    r->tmp = malloc(n);
    if (!r->path || !r->tmp) {
        ct_replace_abort(r);
        return ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    }
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 100; tries++) {
        snprintf(r->tmp, n, "%s.tmp-%ld-%u", path, (long)getpid(), atomic_fetch_add(&counter, 1));
        fd = open(r->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST)
            break;
    }
    if (fd < 0) {
        int err = errno;
        free(r->tmp);
        r->tmp = NULL; /* not ours: nothing to unlink */
        ct_replace_abort(r);
        return ct_error_set(CT_EIO, "%s: cannot create a temporary file beside it: %s", path,
                            strerror(err));
    }
    if (!(r->f = fdopen(fd, "w"))) {
        int err = errno;
        close(fd);
        ct_replace_abort(r);
        return ct_error_set(CT_EIO, "%s: cannot open a stream: %s", path, strerror(err));
    }
    return 0;
}

int ct_replace_commit(struct ct_replace *r)
{
    int rc = 0;
    if (!r->f)
        return ct_error_set(CT_ESTATE, "ct_replace_commit without ct_replace_open");
    /* fflush reports a failed earlier write too (ferror stays set), so one
     * check covers everything written through r->f. fsync before rename: the
     * new name must not point at data still only in the page cache. */
    if (fflush(r->f) != 0 || ferror(r->f))
        rc = ct_error_set(CT_EIO, "%s: write failed: %s", r->path, strerror(errno));
    else
        rc = ct_fsync_file(fileno(r->f), r->path);
    FILE *f = r->f;
    r->f = NULL;
    if (fclose(f) != 0 && rc == 0)
        rc = ct_error_set(CT_EIO, "%s: close failed: %s", r->path, strerror(errno));
    if (rc == 0 && rename(r->tmp, r->path) != 0)
        rc = ct_error_set(CT_EIO, "%s: cannot rename %s over it: %s", r->path, r->tmp,
                          strerror(errno));
    if (rc == 0) {
        free(r->tmp); /* renamed: nothing left to unlink */
        r->tmp = NULL;
    }
    ct_replace_abort(r);
    return rc;
}

int ct_file_replace(const char *path, const void *data, size_t len)
{
    struct ct_replace r;
    int rc = ct_replace_open(&r, path);
    if (rc < 0)
        return rc;
    if (len > 0 && fwrite(data, 1, len, r.f) != len) {
        rc = ct_error_set(CT_EIO, "%s: write failed: %s", path, strerror(errno));
        ct_replace_abort(&r);
        return rc;
    }
    return ct_replace_commit(&r);
}

int ct_open_regular(const char *path, uint64_t *size)
{
    *size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ct_error_set(CT_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ct_error_set(CT_EFORMAT, "%s: not a regular file", path);
    }
    *size = (uint64_t)st.st_size;
    return fd;
}

int ct_fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return ct_error_set(CT_EIO, "%s: cannot open directory to sync: %s", dir, strerror(errno));
    int rc = 0;
    if (fsync(fd) != 0 && errno != EINVAL)
        rc = ct_error_set(CT_EIO, "%s: fsync of directory failed: %s", dir, strerror(errno));
    close(fd);
    return rc;
}

uint64_t ct__pwrite_piece = (uint64_t)1 << 30;

int ct_pwrite_all(int fd, const void *data, uint64_t len, uint64_t off, const char *path)
{
    const uint8_t *p = data;
    while (len > 0) {
        size_t n = len > ct__pwrite_piece ? (size_t)ct__pwrite_piece : (size_t)len;
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return ct_error_set(CT_EIO, "%s: write failed at offset %llu: %s", path,
                                (unsigned long long)off, w < 0 ? strerror(errno) : "no progress");
        p += w;
        off += (uint64_t)w;
        len -= (uint64_t)w;
    }
    return 0;
}

int ct_fsync_file(int fd, const char *path)
{
    if (fsync(fd) != 0)
        return ct_error_set(CT_EIO, "%s: fsync failed: %s", path, strerror(errno));
    return 0;
}

int ct_file_write_durable(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        return ct_error_set(CT_EIO, "%s: cannot create: %s", path, strerror(errno));
    int rc = ct_pwrite_all(fd, data, len, 0, path);
    if (rc == 0)
        rc = ct_fsync_file(fd, path);
    if (close(fd) != 0 && rc == 0)
        rc = ct_error_set(CT_EIO, "%s: close failed: %s", path, strerror(errno));
    return rc;
}
