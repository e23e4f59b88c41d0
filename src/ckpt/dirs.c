/* Rank 0's side of the directory tree of a checkpoint write: the temporary
 * directory (made after clearing crashed writes' leftovers), its publication
 * under the final name (an existing checkpoint of that step swapped out
 * atomically with renameat2 RENAME_EXCHANGE) and the undoing of that, and
 * retention. Only directories that are ours (ct__ckpt_dir_is_ours) are ever
 * replaced or deleted; failpoint "retain" fires between a deletion's two
 * halves. Not here: when each happens (the commit, write.c). */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt/write-impl.h"
#include "core/error.h"
#include "core/log.h"
#include "core/path.h"

/* Remove the temporary directories that crashed writes left behind; one
 * that holds anything a writer does not make is left alone (with a warning):
 * a name like ours is no proof that the contents are. */
static int clean_stale(const char *run_dir)
{
    DIR *d = opendir(run_dir);
    if (!d)
        return ct_error_set(CT_EIO, "%s: cannot open: %s", run_dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!ct__ckpt_is_tmp_name(e->d_name))
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", run_dir, e->d_name);
        int r = ct__ckpt_dir_is_ours(p);
        if (r == CT_ESTATE) {
            ct_log_warn("leaving %s in place: %s", p, ct_error_message());
            ct_error_clear();
            continue;
        }
        if (r == 0)
            r = ct__ckpt_remove_dir(p, NULL);
        if (r < 0 && r != CT_ENOENT && rc == 0)
            rc = r;
    }
    closedir(d);
    return rc;
}

struct step_dir {
    int64_t step;
    int has_manifest;
    char name[32]; /* "ckpt-<step>", as read from the directory */
};

static int cmp_step_desc(const void *a, const void *b)
{
    int64_t x = ((const struct step_dir *)a)->step, y = ((const struct step_dir *)b)->step;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* The checkpoint directories of run_dir that are ours (ct__ckpt_dir_is_ours),
 * newest first; the others are named in a warning and left out, so nothing
 * below can count or delete them. */
static int list_step_dirs(const char *run_dir, struct step_dir **out, size_t *out_n)
{
    *out = NULL;
    *out_n = 0;
    DIR *d = opendir(run_dir);
    if (!d)
        return ct_error_set(CT_EIO, "%s: cannot open: %s", run_dir, strerror(errno));
    struct step_dir *v = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    int rc = 0;
    while ((e = readdir(d)) != NULL) {
        int64_t s;
        if (!ct__ckpt_parse_name(e->d_name, &s) || strlen(e->d_name) >= sizeof v->name)
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", run_dir, e->d_name);
        int r = ct__ckpt_dir_is_ours(p);
        if (r < 0) {
            if (r != CT_ENOENT)
                ct_log_warn("checkpoint retention leaves %s alone: %s", p, ct_error_message());
            ct_error_clear();
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            struct step_dir *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                rc = ct_error_set(CT_ENOMEM, "retention: out of memory");
                break;
            }
            v = nv;
        }
        struct stat st;
        snprintf(p, sizeof p, "%s/%s/manifest.pb", run_dir, e->d_name);
        v[n].step = s;
        v[n].has_manifest = lstat(p, &st) == 0;
        snprintf(v[n].name, sizeof v[n].name, "%s", e->d_name);
        n++;
    }
    closedir(d);
    if (rc < 0) {
        free(v);
        return rc;
    }
    if (n)
        qsort(v, n, sizeof *v, cmp_step_desc);
    *out = v;
    *out_n = n;
    return 0;
}

/* Delete one checkpoint: its manifest first, made durable, so that a crash
 * from here on leaves a directory that no reader takes for a checkpoint and
 * that the next retention finishes off; failpoint "retain" sits in between. */
static int delete_step_dir(const char *dir)
{
    char p[1500];
    snprintf(p, sizeof p, "%s/manifest.pb", dir);
    if (unlink(p) != 0 && errno != ENOENT)
        return ct_error_set(CT_EIO, "%s: cannot remove: %s", p, strerror(errno));
    int rc = ct__ckpt_fsync_dir(dir);
    if (rc == 0)
        rc = ct__ckpt_fp_at(CT__FP_RETAIN, 0, p, "unlink");
    return rc < 0 ? rc : ct__ckpt_remove_dir(dir, NULL);
}

/* Keep the newest keep_last and every step that is a multiple of keep_every;
 * never the one just written nor the newest. Directories named ckpt-<step>
 * without a manifest are the remains of an interrupted deletion (the
 * manifest goes first) and are finished off. Only directories that are ours
 * are counted or touched (list_step_dirs). */
int ct__ckpt_retention(const char *run_dir, int64_t current, int keep_last, int keep_every)
{
    if (keep_last <= 0)
        return 0;
    struct step_dir *v;
    size_t n;
    int rc = list_step_dirs(run_dir, &v, &n);
    if (rc < 0)
        return rc;
    int kept = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        int keep;
        if (!v[i].has_manifest)
            keep = v[i].step == current;
        else
            keep = v[i].step == current || kept < keep_last || i == 0 ||
                   (keep_every > 0 && v[i].step % keep_every == 0);
        if (v[i].has_manifest && kept < keep_last)
            kept++;
        if (keep)
            continue;
        char p[1400];
        snprintf(p, sizeof p, "%s/%s", run_dir, v[i].name);
        rc = delete_step_dir(p);
    }
    free(v);
    if (rc == 0)
        rc = ct__ckpt_fsync_dir(run_dir);
    return rc;
}

int ct__ckpt_make_tmp(const char *run_dir, int64_t step, struct ct__ckpt_publish *p, char *id,
                      size_t id_len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    snprintf(id, id_len, "%ld-%llx", (long)getpid(),
             (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec);
    int rc = ct_mkdir_p(run_dir, 0755);
    if (rc == 0)
        rc = clean_stale(run_dir);
    if (rc == 0 && (size_t)snprintf(p->tmp, sizeof p->tmp, "%s/ckpt-%" PRId64 ".tmp-%s", run_dir,
                                    step, id) >= sizeof p->tmp - 16)
        rc = ct_error_set(CT_EINVAL, "%s: path too long", run_dir);
    if (rc == 0 && mkdir(p->tmp, 0755) != 0)
        rc = ct_error_set(CT_EIO, "%s: cannot create directory: %s", p->tmp, strerror(errno));
    return rc;
}

int ct__ckpt_publish_dir(struct ct__ckpt_publish *p, const char *run_dir)
{
    if (rename(p->tmp, p->final) == 0) {
        p->renamed = 1;
    } else if (errno == ENOTEMPTY || errno == EEXIST) {
        /* Swapped out, it would be deleted after the commit: only ever a
         * checkpoint of ours, never a user's directory of the same name. */
        int r = ct__ckpt_dir_is_ours(p->final);
        if (r < 0)
            return ct_error_wrap(r, "%s exists already and is not a checkpoint to replace; remove it "
                                 "or move it away", p->final);
        if (renameat2(AT_FDCWD, p->tmp, AT_FDCWD, p->final, RENAME_EXCHANGE) != 0)
            return ct_error_set(CT_EIO, "%s exists already and cannot be replaced atomically (%s); "
                                "remove it or move it away", p->final, strerror(errno));
        p->renamed = p->exchanged = 1;
    } else {
        return ct_error_set(CT_EIO, "rename %s -> %s failed: %s", p->tmp, p->final, strerror(errno));
    }
    return ct__ckpt_fsync_dir(run_dir);
}

void ct__ckpt_unpublish_dir(struct ct__ckpt_publish *p, const char *run_dir)
{
    if (p->renamed) {
        if (p->exchanged)
            renameat2(AT_FDCWD, p->tmp, AT_FDCWD, p->final, RENAME_EXCHANGE);
        else
            rename(p->final, p->tmp);
        p->renamed = p->exchanged = 0;
    }
    ct__ckpt_remove_dir(p->tmp, "manifest.pb");
    ct__ckpt_fsync_dir(run_dir);
}
