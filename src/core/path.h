/* Paths, directories and atomic file replacement: the one copy of each.
 *
 * Every module that touches the file system (the run directory, checkpoints,
 * the run's records) builds paths with ct_path_join, creates directories with
 * ct_mkdir_p and replaces small files with ct_file_replace or the
 * ct_replace_open / ct_replace_commit pair, so that a path that does not fit
 * is an error instead of a silently truncated name, and every failure message
 * names the path and the system's reason.
 *
 *     char p[CT_PATH_MAX];
 *     if ((rc = ct_path_join(p, sizeof p, run_dir, "run.json")) < 0) return rc;
 *     if ((rc = ct_file_replace(p, text, len)) < 0) return rc;
 *
 * Deliberately not here: path normalisation (".", "..", symlinks), globbing,
 * removal of trees, anything that needs MPI (rank 0 alone calls these).
 */
#ifndef CT_CORE_PATH_H
#define CT_CORE_PATH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/* A comfortable size for path buffers on the stack; ct_path_join checks the
 * real capacity it is given, so this is a convenience, not a limit. */
#define CT_PATH_MAX 4096

/* out = dir + "/" + name with exactly one slash between them: trailing
 * slashes of dir and leading slashes of name are not repeated (name is always
 * taken as relative to dir). An empty dir gives name alone. Returns CT_ERANGE
 * with a message naming both parts when the result (with its NUL) does not
 * fit in cap bytes; out is then "" rather than a truncated path. */
int ct_path_join(char *out, size_t cap, const char *dir, const char *name);

/* mkdir -p: create every missing component of path with `mode` (before the
 * umask); a component that exists must be a directory. Errors name the
 * component that failed and strerror (CT_EIO), or CT_EINVAL for "". */
int ct_mkdir_p(const char *path, mode_t mode);

/* A file being replaced: written under a temporary name in the same
 * directory, then renamed over `path`, so that readers see the old content or
 * the new, never a part. */
struct ct_replace {
    FILE *f;    /* write the new content here */
    char *path; /* the file to replace (owned copy) */
    char *tmp;  /* the temporary file beside it (owned) */
};

/* Create the temporary file; on failure nothing is left behind. */
int ct_replace_open(struct ct_replace *r, const char *path);
/* Flush, fsync, close and rename over the path. On failure (including an
 * earlier write error on r->f) the temporary file is removed, the old file
 * is untouched, and the error names the path. Always releases r. */
int ct_replace_commit(struct ct_replace *r);
/* Give up: close and remove the temporary file. Safe on a released r. */
void ct_replace_abort(struct ct_replace *r);

/* Replace path's content with len bytes of data, atomically as above. */
int ct_file_replace(const char *path, const void *data, size_t len);

/* Open an input file read-only (O_CLOEXEC) and check that it is a regular
 * file; its size goes to *size. Returns the descriptor (>= 0), or a negative
 * code with a message naming the path: CT_ENOENT when it does not exist,
 * CT_EIO when it cannot be opened or stat'ed, CT_EFORMAT when it is not a
 * regular file (a directory, a FIFO, a device). The one copy of this
 * prologue for every reader of data files and checkpoints. */
int ct_open_regular(const char *path, uint64_t *size);

/* fsync a directory, so that a name created or renamed in it is durable
 * (EINVAL, a file system that cannot sync directories, is not an error). */
int ct_fsync_dir(const char *dir);

/* Durable writes: the one copy of the pwrite and fsync loops.
 *
 * ct_pwrite_all writes all len bytes at offset off, retrying after EINTR and
 * after short writes, in pieces of at most ct__pwrite_piece bytes (1 GiB; a
 * variable so tests can make it small). An error names the file, the offset
 * and the reason: "PATH: write failed at offset OFF: REASON" (CT_EIO; "no
 * progress" when pwrite writes nothing). */
int ct_pwrite_all(int fd, const void *data, uint64_t len, uint64_t off, const char *path);
extern uint64_t ct__pwrite_piece;
/* fsync(fd): "PATH: fsync failed: REASON" (CT_EIO) on failure. */
int ct_fsync_file(int fd, const char *path);
/* Create (0644) or truncate path, write len bytes, fsync and close it:
 * its content is durable, its name not yet (ct_fsync_dir of its directory
 * does that). Errors name the path: "cannot create", ct_pwrite_all's,
 * "fsync failed", "close failed". */
int ct_file_write_durable(const char *path, const void *data, size_t len);

#endif
