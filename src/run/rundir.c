/* The run directory (see rundir.h). */
#include "run/rundir.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/path.h"
#include "run/record.h"

int ct_rundir_owns(const char *name)
{
    static const char *const owned[] = {"metrics.jsonl", "steps.jsonl", "config.ini", "run.json",
                                        "placement.txt", "latest", "chain.jsonl", "tb"};
    for (size_t i = 0; i < sizeof owned / sizeof *owned; i++)
        if (strcmp(name, owned[i]) == 0)
            return 1;
    return strncmp(name, "ckpt-", 5) == 0;
}

int ct_rundir_has(const char *dir, const char *name)
{
    char path[CT_PATH_MAX];
    struct stat st;
    if (ct_path_join(path, sizeof path, dir, name) < 0) {
        ct_error_clear();
        return 0;
    }
    return lstat(path, &st) == 0;
}

/* The names of the entries the run owns. They are listed before anything
 * moves because readdir's view of a directory changed during the listing is
 * unspecified. */
struct names {
    char **v;
    size_t n, cap;
};

static void names_free(struct names *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    memset(l, 0, sizeof *l);
}

static int list_owned(const char *dir, struct names *l)
{
    memset(l, 0, sizeof *l);
    DIR *d = opendir(dir);
    if (!d)
        return ct_error_set(CT_EIO, "%s: cannot list: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while (rc == 0 && (e = readdir(d)) != NULL) {
        if (!ct_rundir_owns(e->d_name))
            continue;
        if (l->n == l->cap) {
            size_t cap = l->cap ? 2 * l->cap : 16;
            char **v = realloc(l->v, cap * sizeof *v);
            if (!v) {
                rc = ct_error_set(CT_ENOMEM, "%s: out of memory listing it", dir);
                break;
            }
            l->v = v;
            l->cap = cap;
        }
        if (!(l->v[l->n] = strdup(e->d_name)))
            rc = ct_error_set(CT_ENOMEM, "%s: out of memory listing it", dir);
        else
            l->n++;
    }
    closedir(d);
    if (rc < 0)
        names_free(l);
    return rc;
}

/* Create dir/previous-<stamp>[-k] with a plain mkdir, so that two runs
 * preparing in the same second cannot both take the same name: the loser's
 * mkdir fails with EEXIST and it tries the next k. */
static int make_previous(const char *dir, char *out, size_t cap)
{
    time_t t = time(NULL);
    struct tm tm;
    char stamp[32], name[64];
    gmtime_r(&t, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    for (int k = 0; k < 10000; k++) {
        if (k == 0)
            snprintf(name, sizeof name, "previous-%s", stamp);
        else
            snprintf(name, sizeof name, "previous-%s-%d", stamp, k);
        int rc = ct_path_join(out, cap, dir, name);
        if (rc < 0)
            return rc;
        if (mkdir(out, 0777) == 0)
            return 0;
        if (errno != EEXIST)
            return ct_error_set(CT_EIO, "%s: cannot create directory: %s", out, strerror(errno));
    }
    return ct_error_set(CT_EIO, "%s: 10000 previous-%s-* directories exist already", dir, stamp);
}

int ct_rundir_prepare(const char *dir, int continue_in_place, char *moved_to, size_t moved_cap)
{
    if (!moved_to || moved_cap == 0)
        return ct_error_set(CT_EINVAL, "ct_rundir_prepare: no buffer for the moved-to path");
    moved_to[0] = '\0';
    int rc = ct_mkdir_p(dir, 0777);
    if (rc < 0 || continue_in_place)
        return rc;
    struct names owned;
    if ((rc = list_owned(dir, &owned)) < 0 || owned.n == 0)
        return rc;
    char prev[CT_PATH_MAX], from[CT_PATH_MAX], to[CT_PATH_MAX];
    if ((rc = make_previous(dir, prev, sizeof prev)) < 0)
        goto done;
    if (strlen(prev) >= moved_cap) {
        rmdir(prev);
        rc = ct_error_set(CT_ERANGE, "%s: the buffer for the moved-to path holds %zu bytes, "
                          "%zu needed", prev, moved_cap - 1, strlen(prev));
        goto done;
    }
    memcpy(moved_to, prev, strlen(prev) + 1);
    for (size_t i = 0; i < owned.n && rc == 0; i++) {
        if ((rc = ct_path_join(from, sizeof from, dir, owned.v[i])) < 0 ||
            (rc = ct_path_join(to, sizeof to, prev, owned.v[i])) < 0)
            break;
        if (rename(from, to) != 0)
            rc = ct_error_set(CT_EIO, "%s: cannot move the previous run's file to %s: %s", from,
                              to, strerror(errno));
    }
done:
    names_free(&owned);
    return rc;
}

int ct_rundir_write_file(const char *dir, const char *name, const char *text)
{
    char path[CT_PATH_MAX];
    int rc = ct_path_join(path, sizeof path, dir, name);
    if (rc < 0)
        return rc;
    return ct_file_replace(path, text ? text : "", text ? strlen(text) : 0);
}

int ct_rundir_open_log(const char *dir, const char *name, int continue_in_place, int64_t max_step,
                       FILE **f)
{
    *f = NULL;
    char path[CT_PATH_MAX];
    int rc = ct_path_join(path, sizeof path, dir, name);
    if (rc < 0)
        return rc;
    if (continue_in_place && (rc = ct_log_trim(path, max_step)) < 0)
        return rc;
    if (!(*f = fopen(path, continue_in_place ? "a" : "w")))
        return ct_error_set(CT_EIO, "%s: cannot open for writing: %s", path, strerror(errno));
    return 0;
}

/* seed-K directories by K, then by name (seed-x, seed-01). */
static int seed_order(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    char *ex, *ey;
    unsigned long long kx = strtoull(x + 5, &ex, 10), ky = strtoull(y + 5, &ey, 10);
    int nx = ex != x + 5 && !*ex, ny = ey != y + 5 && !*ey;
    if (nx && ny && kx != ky)
        return kx < ky ? -1 : 1;
    if (nx != ny)
        return nx ? -1 : 1;
    return strcmp(x, y);
}

static int push_path(char ***v, int *n, const char *path)
{
    char **nv = realloc(*v, (size_t)(*n + 1) * sizeof *nv);
    if (!nv)
        return ct_error_set(CT_ENOMEM, "out of memory");
    *v = nv;
    if (!(nv[*n] = strdup(path)))
        return ct_error_set(CT_ENOMEM, "out of memory");
    (*n)++;
    return 0;
}

int ct_rundir_expand(const char *dir, char ***v, int *n)
{
    if (ct_rundir_has(dir, "metrics.jsonl"))
        return push_path(v, n, dir);
    DIR *d = opendir(dir);
    if (!d)
        return ct_error_set(CT_ENOENT, "%s: no such run directory (%s)", dir, strerror(errno));
    struct names seeds = {0};
    int rc = 0;
    struct dirent *de;
    char p[CT_PATH_MAX];
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, "seed-", 5) != 0)
            continue;
        if (ct_path_join(p, sizeof p, dir, de->d_name) < 0) {
            ct_error_clear(); /* a name too long to join is no run of ours */
            continue;
        }
        if (!ct_rundir_has(p, "metrics.jsonl"))
            continue;
        if (seeds.n == seeds.cap) {
            size_t cap = seeds.cap ? 2 * seeds.cap : 8;
            char **nv = realloc(seeds.v, cap * sizeof *nv);
            if (!nv) {
                rc = ct_error_set(CT_ENOMEM, "out of memory");
                break;
            }
            seeds.v = nv;
            seeds.cap = cap;
        }
        if (!(seeds.v[seeds.n] = strdup(de->d_name)))
            rc = ct_error_set(CT_ENOMEM, "out of memory");
        else
            seeds.n++;
    }
    closedir(d);
    if (rc == 0 && seeds.n == 0)
        rc = ct_error_set(CT_ENOENT, "%s: no metrics.jsonl and no seed-* run directories with one", dir);
    if (rc == 0)
        qsort(seeds.v, seeds.n, sizeof *seeds.v, seed_order);
    for (size_t i = 0; rc == 0 && i < seeds.n; i++)
        if ((rc = ct_path_join(p, sizeof p, dir, seeds.v[i])) == 0)
            rc = push_path(v, n, p);
    names_free(&seeds);
    return rc;
}
