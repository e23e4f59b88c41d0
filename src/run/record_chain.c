/* chain.jsonl (see record.h): one line per committed checkpoint, written
 * and read through its key table (record_keys.c), appended durably, read
 * with torn-line detection. */
#include "run/record.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/path.h"
#include "run/json.h"

/* ================================================================ chain.jsonl */

/* A string field into its fixed array, refused when it does not fit. */
static int copy_field(char *dst, size_t cap, const char *src, const char *key)
{
    size_t l = src ? strlen(src) : 0;
    if (l >= cap)
        return ct_error_set(CT_ERANGE, "chain entry: %s is %zu bytes long (at most %zu)", key, l,
                            cap - 1);
    memcpy(dst, src ? src : "", l + 1);
    return 0;
}

/* Every string field of e must be NUL-terminated inside its array. */
static int check_entry_strings(const struct ct_chain_entry *e)
{
    for (size_t i = 0; i < ct_chain_schema.n_keys; i++) {
        const struct ct_rec_key *k = &ct_chain_schema.keys[i];
        if (k->type == CT_REC_CHARS && !memchr((const char *)e + k->offset, '\0', k->size))
            return ct_error_set(CT_EINVAL, "chain entry: %s is not NUL-terminated", k->name);
    }
    return 0;
}

int ct_chain_format(const struct ct_chain_entry *e, char **line, size_t *len)
{
    *line = NULL;
    int rc = check_entry_strings(e);
    if (rc < 0)
        return rc;
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_rec_write(&w, &ct_chain_schema, e);
    ct_json_end_object(&w);
    if ((rc = ct_json_writer_status(&w)) < 0) {
        ct_json_writer_free(&w);
        return ct_error_wrap(rc, "chain entry of step %" PRId64 ": cannot format it", e->step);
    }
    *line = w.buf; /* the writer's buffer, handed over */
    *len = w.len;
    return 0;
}

static int is_hex_digest(const char *s)
{
    if (strlen(s) != 64)
        return 0;
    for (const char *p = s; *p; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
            return 0;
    return 1;
}

static int parse_chain(const struct ct_json_value *o, struct ct_chain_entry *e)
{
    const char *strs[CT_REC_MAX_KEYS] = {0};
    int rc = ct_rec_read(o, &ct_chain_schema, e, CT_REC_ALL, strs);
    for (size_t i = 0; rc == 0 && i < ct_chain_schema.n_keys; i++) {
        const struct ct_rec_key *k = &ct_chain_schema.keys[i];
        if (k->type == CT_REC_CHARS)
            rc = copy_field((char *)e + k->offset, k->size, strs[i], k->name);
    }
    if (rc < 0)
        return rc;
    if (!is_hex_digest(e->digest) || (e->parent[0] && !is_hex_digest(e->parent)) ||
        !is_hex_digest(e->config_digest))
        return ct_error_set(CT_EFORMAT, "a digest is not 64 lower-case hex digits");
    if (e->step < 0 || e->world < 1)
        return ct_error_set(CT_EFORMAT, "step %" PRId64 " or world %d out of range", e->step,
                            e->world);
    return 0;
}

int ct_chain_entry_parse(const char *line, size_t len, struct ct_chain_entry *e)
{
    memset(e, 0, sizeof *e);
    struct ct_json_doc doc;
    int rc = ct_json_parse(&doc, line, len, NULL);
    if (rc < 0)
        return rc;
    rc = parse_chain(doc.root, e);
    ct_json_doc_free(&doc);
    return rc;
}

int ct_chain_append(const char *path, const struct ct_chain_entry *e)
{
    char *line;
    size_t len;
    int rc = ct_chain_format(e, &line, &len);
    if (rc < 0)
        return rc;
    line[len] = '\n'; /* over the NUL: the writer's buffer has room for it */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = ct_error_set(CT_EIO, "%s: cannot open for appending: %s", path, strerror(errno));
        goto out;
    }
    /* One write: with O_APPEND the line lands whole at the end or, if the
     * process dies inside it, as a torn last line the reader detects. */
    ssize_t w = write(fd, line, len + 1);
    if (w != (ssize_t)(len + 1))
        rc = ct_error_set(CT_EIO, "%s: append failed: %s", path, w < 0 ? strerror(errno) : "short write");
    else
        rc = ct_fsync_file(fd, path);
    if (close(fd) != 0 && rc == 0)
        rc = ct_error_set(CT_EIO, "%s: close failed: %s", path, strerror(errno));
    if (rc == 0) {
        char dir[CT_PATH_MAX];
        snprintf(dir, sizeof dir, "%s", path);
        char *slash = strrchr(dir, '/');
        rc = ct_fsync_dir(slash ? (slash == dir ? "/" : (*slash = '\0', dir)) : ".");
    }
out:
    free(line);
    return rc;
}

static int push_entry(struct ct_chain_entry **v, size_t *n, size_t *cap, const struct ct_chain_entry *e)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 16;
        struct ct_chain_entry *nv = realloc(*v, c * sizeof *nv);
        if (!nv)
            return ct_error_set(CT_ENOMEM, "out of memory reading the chain");
        *v = nv;
        *cap = c;
    }
    (*v)[(*n)++] = *e;
    return 0;
}

int ct_chain_read(const char *path, struct ct_chain_entry **out, size_t *n_out, long *torn)
{
    *out = NULL;
    *n_out = 0;
    if (torn)
        *torn = 0;
    FILE *f = fopen(path, "r");
    if (!f)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    struct ct_chain_entry *v = NULL, e;
    size_t n = 0, cap = 0, lcap = 0;
    char *line = NULL;
    ssize_t len;
    long lineno = 0;
    int rc = 0;
    errno = 0;
    while (rc == 0 && (len = getline(&line, &lcap, f)) > 0) {
        lineno++;
        if (line[len - 1] != '\n') {
            if (torn)
                *torn = lineno;
            else
                rc = ct_error_set(CT_EFORMAT, "%s:%ld: torn last line (no newline: a write cut "
                                  "short)", path, lineno);
            break;
        }
        if ((rc = ct_chain_entry_parse(line, (size_t)len - 1, &e)) < 0)
            rc = ct_error_wrap(rc, "%s:%ld", path, lineno);
        else
            rc = push_entry(&v, &n, &cap, &e);
    }
    if (rc == 0 && ferror(f))
        rc = ct_error_set(CT_EIO, "%s: read failed: %s", path, strerror(errno));
    free(line);
    fclose(f);
    if (rc < 0) {
        free(v);
        return rc;
    }
    *out = v;
    *n_out = n;
    return 0;
}

int ct_chain_drop_torn(const char *path)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : ct_error_set(CT_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0) {
        rc = ct_error_set(CT_EIO, "%s: cannot stat: %s", path, strerror(errno));
        goto out;
    }
    /* Scan back from the end for the last newline. */
    off_t keep = st.st_size;
    char c;
    while (keep > 0) {
        if (pread(fd, &c, 1, keep - 1) != 1) {
            rc = ct_error_set(CT_EIO, "%s: read failed: %s", path, strerror(errno));
            goto out;
        }
        if (c == '\n')
            break;
        keep--;
    }
    if (keep == st.st_size)
        goto out;
    ct_log_warn("%s: dropping a torn last line of %lld bytes (a write cut short)", path,
                (long long)(st.st_size - keep));
    if (ftruncate(fd, keep) != 0 || fsync(fd) != 0)
        rc = ct_error_set(CT_EIO, "%s: cannot cut the torn line off: %s", path, strerror(errno));
out:
    close(fd);
    return rc;
}
