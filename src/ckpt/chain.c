/* chain.jsonl: entries from checkpoints, the append after a commit, the
 * repair on resume (see chain.h). */
#include "ckpt/chain.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/ckpt-impl.h"
#include "core/error.h"
#include "core/log.h"
#include "core/path.h"
#include "core/sha256.h"

/* The ranks' distinct host names, comma-separated, in rank order. */
static int chain_hosts(const struct ct_ckpt *ck, char *out, size_t cap)
{
    out[0] = '\0';
    size_t used = 0;
    for (int r = 0; r < ct_ckpt_world_size(ck); r++) {
        struct ct_rank_record rec;
        int rc = ct_ckpt_read_rank_record(ck, r, &rec);
        if (rc < 0)
            return rc;
        /* Already listed? Compare whole names between the commas. */
        int seen = 0;
        size_t hl = strlen(rec.host);
        for (const char *p = out; *p && !seen;) {
            const char *c = strchr(p, ',');
            size_t l = c ? (size_t)(c - p) : strlen(p);
            seen = l == hl && strncmp(p, rec.host, l) == 0;
            p = c ? c + 1 : p + l;
        }
        if (seen)
            continue;
        if (used + hl + 2 > cap)
            return ct_error_set(CT_ERANGE, "%s: the ranks' host names do not fit in %zu bytes",
                                ck->dir, cap);
        used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "," : "", rec.host);
    }
    return 0;
}

/* The manifest's libraries other than gemm and openblas (fields of their
 * own) and gemm_threads (which changes no bits: a resume at another thread
 * count is not another segment), "key=value; ..." in the manifest's order. */
static int other_libraries(const struct ct_ckpt *ck, char *out, size_t cap)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < ct_ckpt_n_libraries(ck); i++) {
        struct ct_ckpt_kv kv;
        if (ct_ckpt_library(ck, i, &kv) < 0 || strcmp(kv.key, "gemm") == 0 ||
            strcmp(kv.key, "openblas") == 0 || strcmp(kv.key, "gemm_threads") == 0)
            continue;
        int n = snprintf(out + used, cap - used, "%s%s=%s", used ? "; " : "", kv.key, kv.value);
        if (n < 0 || (size_t)n >= cap - used)
            return ct_error_set(CT_ERANGE, "%s: the library versions do not fit in %zu bytes",
                                ck->dir, cap);
        used += (size_t)n;
    }
    return 0;
}

static void library_value(const struct ct_ckpt *ck, const char *name, char *out, size_t cap)
{
    snprintf(out, cap, "unknown");
    for (int i = 0; i < ct_ckpt_n_libraries(ck); i++) {
        struct ct_ckpt_kv kv;
        if (ct_ckpt_library(ck, i, &kv) == 0 && strcmp(kv.key, name) == 0) {
            snprintf(out, cap, "%s", kv.value);
            return;
        }
    }
}

int ct__chain_entry_from_ckpt(const struct ct_ckpt *ck, struct ct_chain_entry *e)
{
    memset(e, 0, sizeof *e);
    e->step = ct_ckpt_step(ck);
    e->epoch = ct_ckpt_epoch(ck);
    e->world = ct_ckpt_world_size(ck);
    snprintf(e->ckpt, sizeof e->ckpt, "ckpt-%" PRId64, e->step);
    ct_sha256_hex(ck->digest, e->digest);
    uint8_t d[CT_SHA256_LEN];
    int rc = ct_ckpt_parent_digest(ck, d);
    if (rc == 0)
        ct_sha256_hex(d, e->parent);
    else if (rc != CT_ENOENT)
        return rc;
    const char *cfg = ct_ckpt_config_text(ck);
    if ((rc = ct_sha256_buf(cfg, strlen(cfg), d)) < 0)
        return rc;
    ct_sha256_hex(d, e->config_digest);
    if (snprintf(e->code_version, sizeof e->code_version, "%s", ct_ckpt_code_version(ck)) >=
        (int)sizeof e->code_version)
        return ct_error_set(CT_ERANGE, "%s: code version too long for the chain", ck->dir);
    library_value(ck, "gemm", e->gemm, sizeof e->gemm);
    library_value(ck, "openblas", e->blas, sizeof e->blas);
    if ((rc = other_libraries(ck, e->libraries, sizeof e->libraries)) < 0)
        return rc;
    time_t t = (time_t)ct_ckpt_created_unix(ck);
    struct tm tm;
    if (t > 0 && gmtime_r(&t, &tm))
        strftime(e->time, sizeof e->time, "%Y-%m-%dT%H:%M:%SZ", &tm);
    else
        snprintf(e->time, sizeof e->time, "unknown");
    return chain_hosts(ck, e->hosts, sizeof e->hosts);
}

/* Open a checkpoint and append its entry to the chain at path. */
static int append_from(const char *path, const char *ckpt_dir)
{
    struct ct_ckpt *ck = calloc(1, sizeof *ck);
    if (!ck)
        return ct_error_set(CT_ENOMEM, "%s: out of memory", ckpt_dir);
    struct ct_chain_entry e;
    /* The entry needs the manifest and the rank records (hosts), not the
     * sections: a checkpoint just written is not read and hashed again. */
    int rc = ct_ckpt_open_records(ck, ckpt_dir);
    if (rc == 0)
        rc = ct__chain_entry_from_ckpt(ck, &e);
    ct_ckpt_close(ck);
    free(ck);
    if (rc == 0)
        rc = ct_chain_append(path, &e);
    return rc < 0 ? ct_error_wrap(rc, "%s: chain entry of %s", path, ckpt_dir) : 0;
}

/* Failpoint "chain" (ckpt.h): half the line written, then the kill, as a
 * crash inside the append would leave it. Test-only; a no-op unless armed. */
static int chain_failpoint(const char *path, const char *ckpt_dir)
{
    if (!ct__ckpt_failpoint_armed("chain", 0))
        return ct__ckpt_failpoint("chain", 0); /* 0, or a malformed CT_FAILPOINT refused */
    struct ct_ckpt *ck = calloc(1, sizeof *ck);
    struct ct_chain_entry e;
    char *line = NULL;
    size_t len = 0;
    if (ck && ct_ckpt_open_records(ck, ckpt_dir) == 0 && ct__chain_entry_from_ckpt(ck, &e) == 0 &&
        ct_chain_format(&e, &line, &len) == 0) {
        FILE *f = fopen(path, "a");
        if (f) {
            fwrite(line, 1, len / 2, f);
            fclose(f);
        }
    }
    free(line);
    if (ck)
        ct_ckpt_close(ck);
    free(ck);
    return ct__ckpt_failpoint("chain", 0);
}

int ct__chain_commit(const char *run_dir, const char *ckpt_dir)
{
    char path[CT_PATH_MAX];
    int rc = ct_path_join(path, sizeof path, run_dir, CT_CHAIN_FILE);
    if (rc == 0)
        rc = chain_failpoint(path, ckpt_dir);
    return rc < 0 ? rc : append_from(path, ckpt_dir);
}

int ct__chain_committed_step(const char *run_dir, int64_t *step)
{
    *step = -1;
    char path[CT_PATH_MAX];
    int rc = ct_ckpt_find_latest(run_dir, path, sizeof path);
    if (rc == CT_ENOENT) {
        ct_error_clear();
        return 0;
    }
    if (rc < 0)
        return rc;
    const char *base = strrchr(path, '/');
    if (!ct__ckpt_parse_name(base ? base + 1 : path, step))
        return ct_error_set(CT_EINVAL, "%s: not a checkpoint directory name", path);
    return 0;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Steps of the ckpt-<step> directories of run_dir above `above`, sorted. */
static int newer_steps(const char *run_dir, int64_t above, int64_t **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    DIR *d = opendir(run_dir);
    if (!d)
        return ct_error_set(CT_EIO, "%s: cannot open: %s", run_dir, strerror(errno));
    size_t cap = 0;
    int rc = 0;
    struct dirent *de;
    while (rc == 0 && (de = readdir(d)) != NULL) {
        int64_t s;
        char *end;
        if (strncmp(de->d_name, "ckpt-", 5) != 0 || !de->d_name[5])
            continue;
        s = strtoll(de->d_name + 5, &end, 10);
        if (*end || s <= above)
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *v = realloc(*out, cap * sizeof *v);
            if (!v) {
                rc = ct_error_set(CT_ENOMEM, "%s: out of memory", run_dir);
                break;
            }
            *out = v;
        }
        (*out)[(*n)++] = s;
    }
    closedir(d);
    if (rc == 0 && *n)
        qsort(*out, *n, sizeof **out, cmp_i64);
    return rc;
}

/* Whether step is one of the chain's n entries. */
static int chained(const struct ct_chain_entry *v, size_t n, int64_t step)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].step == step)
            return 1;
    return 0;
}

/* ckpt-<step> of run_dir into dir, and whether it has a manifest (a
 * directory without one is an interrupted deletion: retention removes the
 * manifest first; not part of the lineage). */
static int ckpt_dir(const char *run_dir, int64_t step, char *dir, size_t cap, int *has_manifest)
{
    char name[64], mf[CT_PATH_MAX];
    struct stat st;
    snprintf(name, sizeof name, "ckpt-%" PRId64, step);
    int rc = ct_path_join(dir, cap, run_dir, name);
    if (rc == 0)
        rc = ct_path_join(mf, sizeof mf, dir, "manifest.pb");
    *has_manifest = rc == 0 && stat(mf, &st) == 0;
    return rc;
}

int ct__chain_repair(const char *run_dir, int *appended)
{
    *appended = 0;
    char path[CT_PATH_MAX];
    int rc = ct_path_join(path, sizeof path, run_dir, CT_CHAIN_FILE);
    if (rc < 0 || (rc = ct_chain_drop_torn(path)) < 0)
        return rc;
    struct ct_chain_entry *v = NULL;
    size_t n = 0;
    rc = ct_chain_read(path, &v, &n, NULL);
    if (rc == CT_ENOENT) {
        ct_error_clear();
        rc = 0;
    }
    int64_t bound = -1, *steps = NULL;
    size_t ns = 0;
    if (rc == 0)
        rc = ct__chain_committed_step(run_dir, &bound);
    if (rc == 0)
        rc = newer_steps(run_dir, n ? v[n - 1].step : -1, &steps, &ns);
    /* Committed (up to `bound`) without a line: appended, a checkpoint that
     * does not verify being an error. Above it and in no line: published
     * but never committed by a job stopped before it replaced `latest`;
     * removed, as the commit that job never made would have replaced it. */
    for (size_t i = 0; i < ns && rc == 0; i++) {
        char dir[CT_PATH_MAX];
        int has_manifest;
        if ((rc = ckpt_dir(run_dir, steps[i], dir, sizeof dir, &has_manifest)) < 0 || !has_manifest)
            continue;
        if (steps[i] <= bound) {
            if ((rc = append_from(path, dir)) == 0) {
                ct_log_warn("%s: appended the missing entry of ckpt-%" PRId64 " (a stop between its "
                            "commit and the chain's append)", path, steps[i]);
                (*appended)++;
            }
        } else if (!chained(v, n, steps[i]) && (rc = ct__ckpt_remove_dir(dir, "manifest.pb")) == 0) {
            ct_log_warn("%s: removed, published but never committed (newer than the committed "
                        "checkpoint, step %" PRId64 ": a stop before `latest` was replaced)",
                        dir, bound);
        }
    }
    free(steps);
    free(v);
    return rc;
}
