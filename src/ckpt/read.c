/* Opening, verifying and reading checkpoints, and finding the newest one.
 *
 * ct_ckpt_open trusts nothing it has not checked: the manifest's size is
 * capped before it is read, it must parse and carry a known version, data.bin
 * must have exactly the size the manifest promises before it is read, and
 * every tensor and rank record is checked (bounds, alignment, dtype, shape,
 * SHA-256) before ct_ckpt_open returns. data.bin is read whole into one
 * aligned buffer: the trainer needs every byte anyway, and a private copy
 * cannot change under us the way a mapping of a file can (SIGBUS on a
 * truncated file).
 *
 * ct_ckpt_find_latest checks lightly (manifest parses, version known,
 * data.bin has the promised size): enough to tell a committed checkpoint from
 * a damaged pointer or a half-deleted directory; the full digests are checked
 * by ct_ckpt_open on the one that is then used. A checkpoint that is
 * committed but corrupt is therefore reported loudly rather than silently
 * skipped for an older one.
 *
 * Not here: writing (write.c), the human-readable report (inspect.c).
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt/ckpt-impl.h"
#include "core/error.h"
#include "core/log.h"

/* records_only: of data.bin, the span of the rank records alone. */
static int open_impl(struct ct_ckpt *ck, const char *dir, int records_only)
{
    memset(ck, 0, sizeof *ck);
    if ((size_t)snprintf(ck->dir, sizeof ck->dir, "%s", dir) >= sizeof ck->dir)
        return ct_error_set(CT_EINVAL, "%s: path too long", dir);
    /* A trailing slash would double up in every message. */
    size_t dl = strlen(ck->dir);
    while (dl > 1 && ck->dir[dl - 1] == '/')
        ck->dir[--dl] = '\0';
    Ctrain__Manifest *m;
    uint8_t *data = NULL;
    int rc = ct__ckpt_load_manifest(ck->dir, &m, ck->digest);
    if (rc < 0)
        return rc;
    uint64_t base = 0, end = m->data_size;
    if (records_only) {
        base = m->data_size, end = 0;
        for (size_t i = 0; i < m->n_ranks; i++) {
            const uint64_t off = m->ranks[i]->offset, len = m->ranks[i]->length;
            if (off > m->data_size || len > m->data_size - off) {
                base = 0, end = m->data_size; /* the whole file: verify names the record */
                break;
            }
            base = off < base ? off : base;
            end = off + len > end ? off + len : end;
        }
        if (base > end)
            base = end = 0;
    }
    if ((rc = ct__ckpt_load_range(ck->dir, m, base, end, &data)) < 0)
        goto fail;
    for (size_t i = 0; i < m->n_tensors; i++) {
        if ((rc = ct__ckpt_verify_tensor(ck->dir, m, records_only ? NULL : data, i)) < 0)
            goto fail;
        for (size_t j = 0; j < i; j++)
            if (strcmp(m->tensors[j]->name, m->tensors[i]->name) == 0) {
                rc = ct_error_set(CT_EFORMAT, "%s/manifest.pb: section %s appears twice", ck->dir,
                                  m->tensors[i]->name);
                goto fail;
            }
    }
    for (size_t i = 0; i < m->n_ranks; i++)
        if ((rc = ct__ckpt_verify_rank_at(ck->dir, m, data, base, i)) < 0)
            goto fail;
    ck->manifest = m;
    ck->data = data;
    ck->data_size = (size_t)(end - base);
    ck->data_base = (size_t)base;
    ck->records_only = records_only;
    return 0;
fail:
    free(data);
    ctrain__manifest__free_unpacked(m, NULL);
    char d[sizeof ck->dir];
    memcpy(d, ck->dir, sizeof d);
    memset(ck, 0, sizeof *ck);
    memcpy(ck->dir, d, sizeof d);
    return rc;
}

int ct_ckpt_open(struct ct_ckpt *ck, const char *dir) { return open_impl(ck, dir, 0); }

int ct_ckpt_open_records(struct ct_ckpt *ck, const char *dir) { return open_impl(ck, dir, 1); }

void ct_ckpt_close(struct ct_ckpt *ck)
{
    if (!ck)
        return;
    if (ck->manifest)
        ctrain__manifest__free_unpacked(ck->manifest, NULL);
    free(ck->data);
    memset(ck, 0, sizeof *ck);
}

static const Ctrain__TensorEntry *find_tensor(const struct ct_ckpt *ck, const char *name)
{
    const Ctrain__Manifest *m = ck->manifest;
    for (size_t i = 0; m && i < m->n_tensors; i++)
        if (strcmp(m->tensors[i]->name, name) == 0)
            return m->tensors[i];
    return NULL;
}

int ct_ckpt_has_tensor(const struct ct_ckpt *ck, const char *name)
{
    return find_tensor(ck, name) != NULL;
}

static void shape_str(char *out, size_t n, const int64_t *shape, size_t ndim)
{
    size_t k = (size_t)snprintf(out, n, "[");
    for (size_t i = 0; i < ndim && k < n; i++)
        k += (size_t)snprintf(out + k, n - k, "%s%" PRId64, i ? ", " : "", shape[i]);
    if (k < n)
        snprintf(out + k, n - k, "]");
}

/* Section `name`, checked for dtype and shape. */
static int checked_tensor(const struct ct_ckpt *ck, const char *name, enum ct_dtype dtype, int ndim,
                          const int64_t *shape, const Ctrain__TensorEntry **out)
{
    if (!ck->manifest)
        return ct_error_set(CT_ESTATE, "checkpoint %s is not open", ck->dir);
    if (ck->records_only)
        return ct_error_set(CT_ESTATE, "%s: opened for its rank records only: section %s was not "
                            "read", ck->dir, name);
    const Ctrain__TensorEntry *t = find_tensor(ck, name);
    if (!t)
        return ct_error_set(CT_ENOENT, "%s: no section %s", ck->dir, name);
    if (strcmp(t->dtype, ct_dtype_name(dtype)) != 0)
        return ct_error_set(CT_EMISMATCH, "%s: section %s: dtype mismatch (expected %s, found %s)",
                            ck->dir, name, ct_dtype_name(dtype), t->dtype);
    int same = ndim >= 0 && (size_t)ndim == t->n_shape;
    for (int i = 0; same && i < ndim; i++)
        same = shape[i] == t->shape[i];
    if (!same) {
        char e[160], f[160];
        shape_str(e, sizeof e, shape, ndim > 0 ? (size_t)ndim : 0);
        shape_str(f, sizeof f, t->shape, t->n_shape);
        return ct_error_set(CT_EMISMATCH, "%s: section %s: shape mismatch (expected %s, found %s)",
                            ck->dir, name, e, f);
    }
    *out = t;
    return 0;
}

int ct_ckpt_read_tensor(const struct ct_ckpt *ck, const char *name, enum ct_dtype dtype, int ndim,
                        const int64_t *shape, void *dst)
{
    const Ctrain__TensorEntry *t;
    int rc = checked_tensor(ck, name, dtype, ndim, shape, &t);
    if (rc < 0)
        return rc;
    /* Bounds were verified at open. */
    memcpy(dst, ck->data + t->offset, (size_t)t->length);
    return 0;
}

int ct_ckpt_read_tensor_part(const struct ct_ckpt *ck, const char *name, enum ct_dtype dtype,
                             int ndim, const int64_t *shape, uint64_t begin, uint64_t end,
                             void *dst)
{
    const Ctrain__TensorEntry *t;
    int rc = checked_tensor(ck, name, dtype, ndim, shape, &t);
    if (rc < 0)
        return rc;
    if (begin > end || end > t->length)
        return ct_error_set(CT_EINVAL, "%s: section %s: bytes [%" PRIu64 ", %" PRIu64 ") asked of "
                            "%" PRIu64, ck->dir, name, begin, end, (uint64_t)t->length);
    memcpy(dst, ck->data + t->offset + begin, (size_t)(end - begin));
    return 0;
}

int ct_ckpt_rank_record(const struct ct_ckpt *ck, int rank, const uint8_t **bytes, size_t *len)
{
    const Ctrain__Manifest *m = ck->manifest;
    if (!m)
        return ct_error_set(CT_ESTATE, "checkpoint %s is not open", ck->dir);
    if (rank < 0 || (size_t)rank >= m->n_ranks)
        return ct_error_set(CT_ENOENT, "%s: no rank record for rank %d (written by %d rank%s)", ck->dir,
                            rank, (int)m->world_size, m->world_size == 1 ? "" : "s");
    /* Within what open read (ct_ckpt_open_records: from data_base on). */
    *bytes = ck->data + (m->ranks[rank]->offset - ck->data_base);
    *len = (size_t)m->ranks[rank]->length;
    return 0;
}

int ct_ckpt_scalar(const struct ct_ckpt *ck, const char *key, const char **value)
{
    const Ctrain__Manifest *m = ck->manifest;
    for (size_t i = 0; m && i < m->n_scalars; i++)
        if (strcmp(m->scalars[i]->key, key) == 0) {
            *value = m->scalars[i]->value;
            return 0;
        }
    return ct_error_set(CT_ENOENT, "%s: no scalar '%s'", ck->dir, key);
}

int ct_ckpt_n_sections(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = ck->manifest;
    return m ? (int)m->n_tensors : 0;
}

int ct_ckpt_section_at(const struct ct_ckpt *ck, int i, struct ct_ckpt_section *out)
{
    const Ctrain__Manifest *m = ck->manifest;
    if (!m)
        return ct_error_set(CT_ESTATE, "checkpoint %s is not open", ck->dir);
    if (i < 0 || (size_t)i >= m->n_tensors)
        return ct_error_set(CT_ERANGE, "%s: no section %d (%zu sections)", ck->dir, i, m->n_tensors);
    if (ck->records_only)
        return ct_error_set(CT_ESTATE, "%s: opened for its rank records only: section %s was not "
                            "read", ck->dir, m->tensors[i]->name);
    const Ctrain__TensorEntry *t = m->tensors[i];
    int dt = ct__ckpt_dtype_parse(t->dtype);
    if (dt < 0 || t->n_shape > 4 || t->sha256.len != CT_SHA256_LEN)
        return ct_error_set(CT_EFORMAT, "%s: section %s: dtype '%s', %zu dimensions or its digest "
                            "is not what this reader knows", ck->dir, t->name, t->dtype, t->n_shape);
    memset(out, 0, sizeof *out);
    out->name = t->name;
    out->dtype = (enum ct_dtype)dt;
    out->ndim = (int)t->n_shape;
    for (size_t k = 0; k < t->n_shape; k++)
        out->shape[k] = t->shape[k];
    /* Bounds were verified at open. */
    out->data = ck->data + t->offset;
    out->length = (size_t)t->length;
    memcpy(out->sha256, t->sha256.data, CT_SHA256_LEN);
    return 0;
}

int ct_ckpt_n_scalars(const struct ct_ckpt *ck)
{
    const Ctrain__Manifest *m = ck->manifest;
    return m ? (int)m->n_scalars : 0;
}

int ct_ckpt_scalar_at(const struct ct_ckpt *ck, int i, struct ct_ckpt_kv *out)
{
    const Ctrain__Manifest *m = ck->manifest;
    if (!m || i < 0 || (size_t)i >= m->n_scalars)
        return ct_error_set(CT_ERANGE, "%s: no scalar %d", ck->dir, i);
    out->key = m->scalars[i]->key;
    out->value = m->scalars[i]->value;
    return 0;
}

/* ---------------------------------------------------------------- latest */

/* A committed checkpoint, checked lightly (see the top of this file). */
static int quick_check(const char *dir)
{
    Ctrain__Manifest *m;
    uint8_t d[CT_SHA256_LEN];
    int rc = ct__ckpt_load_manifest(dir, &m, d);
    if (rc < 0)
        return rc;
    char path[1100];
    struct stat st;
    snprintf(path, sizeof path, "%s/data.bin", dir);
    if (stat(path, &st) != 0)
        rc = ct_error_set(CT_ENOENT, "%s: missing: %s", path, strerror(errno));
    else if ((uint64_t)st.st_size != m->data_size)
        rc = ct_error_set(CT_EFORMAT, "%s: %lld bytes, the manifest says %" PRIu64, path,
                          (long long)st.st_size, m->data_size);
    ctrain__manifest__free_unpacked(m, NULL);
    return rc;
}

/* What `latest` names, if it is well-formed and the checkpoint checks out. */
static int from_pointer(const char *run_dir, char *path, size_t path_len)
{
    char p[1100];
    snprintf(p, sizeof p, "%s/latest", run_dir);
    uint8_t *buf;
    size_t len;
    int rc = ct__ckpt_read_small(p, CT__CKPT_MAX_LATEST_BYTES, &buf, &len);
    if (rc < 0)
        return rc;
    char *s = (char *)buf;
    if (len > 0 && s[len - 1] == '\n')
        s[--len] = '\0';
    int64_t step;
    if (strlen(s) != len || !ct__ckpt_parse_name(s, &step)) {
        free(buf);
        return ct_error_set(CT_EFORMAT, "%s: does not hold a checkpoint name (ckpt-<step>)", p);
    }
    if ((size_t)snprintf(path, path_len, "%s/%s", run_dir, s) >= path_len)
        rc = ct_error_set(CT_EINVAL, "%s/%s: path too long", run_dir, s);
    free(buf);
    if (rc == 0 && (rc = quick_check(path)) < 0)
        ct_error_wrap(rc, "%s names %s, which is not a valid checkpoint", p, path);
    return rc;
}

static int cmp_i64_desc(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int ct_ckpt_find_latest(const char *run_dir, char *path_out, size_t path_len)
{
    int rc = from_pointer(run_dir, path_out, path_len);
    if (rc == 0)
        return 0;
    char why[512];
    snprintf(why, sizeof why, "%s", ct_error_message());

    DIR *d = opendir(run_dir);
    if (!d)
        return ct_error_set(CT_ENOENT, "no checkpoint in %s (%s)", run_dir, strerror(errno));
    int64_t *steps = NULL;
    size_t n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int64_t s;
        if (!ct__ckpt_parse_name(e->d_name, &s))
            continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *ns = realloc(steps, cap * sizeof *ns);
            if (!ns) {
                free(steps);
                closedir(d);
                return ct_error_set(CT_ENOMEM, "%s: out of memory scanning", run_dir);
            }
            steps = ns;
        }
        steps[n++] = s;
    }
    closedir(d);
    if (n > 1) /* steps is NULL when the scan found nothing: qsort wants a real array */
        qsort(steps, n, sizeof *steps, cmp_i64_desc);
    rc = CT_ENOENT;
    for (size_t i = 0; i < n; i++) {
        if ((size_t)snprintf(path_out, path_len, "%s/ckpt-%" PRId64, run_dir, steps[i]) >= path_len)
            continue;
        if (quick_check(path_out) == 0) {
            rc = 0;
            break;
        }
    }
    free(steps);
    if (rc < 0) {
        if (path_len)
            path_out[0] = '\0';
        return ct_error_set(CT_ENOENT, "no checkpoint in %s", run_dir);
    }
    /* A missing or damaged pointer with checkpoints present is worth a word:
     * the user should know which checkpoint was taken and why. */
    ct_log_warn("%s; using %s, the newest checkpoint found by scanning", why, path_out);
    ct_error_clear();
    return 0;
}
