/* The run-directory reader (see runread.h): each file through its record
 * reader (run/record.h), .jsonl files line by line with the torn-last-line
 * rule, config.ini through inih; and the one mean +- std of the runs. */
#define _GNU_SOURCE /* timegm, strptime */
#include "run/runread.h"

#include <errno.h>
#include <ini.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/log.h"
#include "core/path.h"

/* config.ini and placement.txt are a few KiB; anything near this is not ours. */
#define TEXT_MAX_BYTES ((size_t)4 << 20)

/* The whole of a small file, NUL-terminated. */
static int read_text(const char *path, char **out)
{
    return ct_run_read_file(path, TEXT_MAX_BYTES, out, NULL);
}

static void add_note(struct ct_run *r, const char *fmt, const char *path, long line)
{
    size_t l = strlen(r->notes);
    snprintf(r->notes + l, sizeof r->notes - l, fmt, path, line);
}

/* Each line of a .jsonl file to parse_line(line, i, ctx). A last line
 * without its newline is a write cut short: dropped, with a warning and a
 * note. A missing file is CT_ENOENT (the caller decides whether it may be). */
static int read_jsonl(const char *path, struct ct_run *r,
                      int (*parse_line)(const char *line, void *ctx), void *ctx)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long no = 0;
    int rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, f)) > 0) {
        no++;
        if (line[len - 1] != '\n') {
            ct_log_warn("%s:%ld: last line cut short (no newline): left out", path, no);
            add_note(r, "%s:%ld: the last line was cut short (no newline) and is left out. ", path, no);
            break;
        }
        if ((rc = parse_line(line, ctx)) < 0)
            rc = ct_error_wrap(rc, "%s:%ld", path, no);
    }
    if (rc == 0 && ferror(f))
        rc = ct_error_set(CT_EIO, "%s: read failed", path);
    free(line);
    fclose(f);
    return rc;
}

/* Room for element n of an array that holds n: the capacity doubles when n
 * reaches a power of two (1, 2, 4, ...), so it is never stored. */
static int grow(void **v, size_t n, size_t size)
{
    if (n != 0 && (n & (n - 1)) != 0)
        return 0;
    void *nv = realloc(*v, (n ? 2 * n : 1) * size);
    if (!nv)
        return ct_error_set(CT_ENOMEM, "out of memory");
    *v = nv;
    return 0;
}

static int parse_epoch_line(const char *line, void *ctx)
{
    struct ct_run *r = ctx;
    int rc = grow((void **)&r->epochs, r->n_epochs, sizeof *r->epochs);
    if (rc < 0)
        return rc;
    if ((rc = ct_epoch_record_parse(line, &r->epochs[r->n_epochs])) < 0) {
        ct_epoch_record_free(&r->epochs[r->n_epochs]);
        return rc;
    }
    r->n_epochs++;
    return 0;
}

static int parse_step_line(const char *line, void *ctx)
{
    struct ct_run *r = ctx;
    int rc = grow((void **)&r->steps, r->n_steps, sizeof *r->steps);
    if (rc == 0 && (rc = ct_step_record_parse(line, &r->steps[r->n_steps])) == 0)
        r->n_steps++;
    return rc;
}

static int push_string(char ***v, size_t n, const char *s)
{
    int rc = grow((void **)v, n, sizeof **v);
    if (rc == 0 && !((*v)[n] = strdup(s)))
        rc = ct_error_set(CT_ENOMEM, "out of memory");
    return rc;
}

static int on_ini_pair(void *user, const char *section, const char *name, const char *value)
{
    struct ct_run *r = user;
    if (!name)
        return 1; /* a section header alone (inih built to report those) */
    char key[512];
    snprintf(key, sizeof key, "%s.%s", section, name);
    if (push_string(&r->cfg_keys, r->n_cfg, key) < 0)
        return 0;
    if (push_string(&r->cfg_values, r->n_cfg, value ? value : "") < 0) {
        free(r->cfg_keys[r->n_cfg]);
        return 0;
    }
    r->n_cfg++;
    return 1;
}

/* "2026-12-03T08:40:00Z" as seconds since 1970; -1 when it is not that. */
double ct_run_chain_time(const char *s)
{
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(s, "%Y-%m-%dT%H:%M:%SZ", &tm);
    if (!end || *end)
        return -1;
    return (double)timegm(&tm);
}

/* path = dir/name, or an error naming both. */
static int join(char *path, const char *dir, const char *name)
{
    return ct_path_join(path, CT_PATH_MAX, dir, name);
}

static int load_chain(const char *dir, struct ct_run *r)
{
    char path[CT_PATH_MAX];
    int rc = join(path, dir, "chain.jsonl");
    long torn = 0;
    if (rc == 0 && (rc = ct_chain_read(path, &r->chain, &r->n_chain, &torn)) == CT_ENOENT) {
        ct_error_clear(); /* no checkpoint yet */
        r->chain = NULL;
        r->n_chain = 0;
        return 0;
    }
    if (rc < 0)
        return rc;
    if (torn) {
        ct_log_warn("%s:%ld: last line cut short (no newline): left out", path, torn);
        add_note(r, "%s:%ld: the last line was cut short (no newline) and is left out. ", path, torn);
    }
    for (size_t i = 0; i < r->n_chain; i++)
        if (ct_run_chain_time(r->chain[i].time) < 0)
            return ct_error_set(CT_EFORMAT, "%s:%zu: time \"%s\" of %s is not UTC ISO 8601 "
                                "(YYYY-MM-DDTHH:MM:SSZ)", path, i + 1, r->chain[i].time, r->chain[i].ckpt);
    return 0;
}

static int load_config(const char *dir, struct ct_run *r)
{
    char path[CT_PATH_MAX];
    int rc = join(path, dir, "config.ini");
    if (rc == 0)
        rc = read_text(path, &r->config);
    if (rc < 0)
        return rc;
    int line = ini_parse_string(r->config, on_ini_pair, r);
    if (line > 0)
        return ct_error_set(CT_EFORMAT, "%s:%d: not an INI line (section, key = value or comment)",
                            path, line);
    if (line < 0)
        return ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    return 0;
}

/* The last line of metrics.jsonl as it is (summary's view: the final
 * epoch, whatever came before it). */
static int load_last_epoch(const char *dir, struct ct_run *r)
{
    char p[CT_PATH_MAX];
    snprintf(p, sizeof p, "%s/metrics.jsonl", dir);
    FILE *f = fopen(p, "r");
    if (!f)
        return ct_error_set(CT_ENOENT, "%s: cannot open: %s", p, strerror(errno));
    char *line = NULL, *last = NULL;
    size_t cap = 0;
    long lineno = 0, last_no = 0;
    while (getline(&line, &cap, f) > 0) {
        lineno++;
        free(last);
        last = strdup(line);
        last_no = lineno;
    }
    free(line);
    fclose(f);
    if (!last)
        return ct_error_set(CT_EFORMAT, "%s: no epoch recorded", p);
    int rc = (r->epochs = calloc(1, sizeof *r->epochs)) ? 0 : ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0 && (rc = ct_epoch_record_parse(last, r->epochs)) == 0)
        r->n_epochs = 1;
    free(last);
    return rc < 0 ? ct_error_wrap(rc, "%s:%ld", p, last_no) : 0;
}

/* A file that may be absent: CT_ENOENT becomes "none". */
static int absent_ok(int rc)
{
    if (rc == CT_ENOENT) {
        ct_error_clear();
        return 0;
    }
    return rc;
}

int ct_run_open(const char *dir, unsigned what, struct ct_run *r)
{
    memset(r, 0, sizeof *r);
    char path[CT_PATH_MAX];
    int rc = (r->dir = strdup(dir)) ? 0 : ct_error_set(CT_ENOMEM, "out of memory");
    if (rc == 0 && (what & CT_RUN_JSON) && (rc = join(path, dir, "run.json")) == 0)
        rc = ct_run_record_read(path, &r->run);
    if (rc == 0 && (what & CT_RUN_METRICS) && (rc = join(path, dir, "metrics.jsonl")) == 0)
        rc = read_jsonl(path, r, parse_epoch_line, r);
    if (rc == 0 && (what & CT_RUN_LAST_EPOCH))
        rc = load_last_epoch(dir, r);
    /* No steps.jsonl: log.every_steps = 0, or a run of an older version. */
    if (rc == 0 && (what & CT_RUN_STEPS) && (rc = join(path, dir, "steps.jsonl")) == 0)
        rc = absent_ok(read_jsonl(path, r, parse_step_line, r));
    if (rc == 0 && (what & CT_RUN_CHAIN))
        rc = load_chain(dir, r);
    if (rc == 0 && (what & CT_RUN_CHAIN_STRICT) && (rc = join(path, dir, "chain.jsonl")) == 0)
        rc = ct_chain_read(path, &r->chain, &r->n_chain, NULL);
    if (rc == 0 && (what & CT_RUN_CONFIG))
        rc = load_config(dir, r);
    if (rc == 0 && (what & CT_RUN_PLACEMENT) && (rc = join(path, dir, "placement.txt")) == 0)
        rc = absent_ok(read_text(path, &r->placement));
    if (rc < 0)
        ct_run_close(r);
    return rc;
}

void ct_run_close(struct ct_run *r)
{
    if (!r)
        return;
    free(r->dir);
    ct_run_record_free(&r->run);
    for (size_t i = 0; i < r->n_epochs; i++)
        ct_epoch_record_free(&r->epochs[i]);
    free(r->epochs);
    free(r->steps);
    free(r->chain);
    free(r->config);
    for (size_t i = 0; i < r->n_cfg; i++) {
        free(r->cfg_keys[i]);
        free(r->cfg_values[i]);
    }
    free(r->cfg_keys);
    free(r->cfg_values);
    free(r->placement);
    memset(r, 0, sizeof *r);
}

const char *ct_run_config_value(const struct ct_run *r, const char *key)
{
    for (size_t i = r->n_cfg; i-- > 0;)
        if (strcmp(r->cfg_keys[i], key) == 0)
            return r->cfg_values[i];
    return NULL;
}

size_t ct_run_mean_std(const double *v, size_t n, double *mean, double *std)
{
    double s = 0, q = 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i])) {
            s += v[i];
            k++;
        }
    *mean = k ? s / (double)k : NAN;
    for (size_t i = 0; i < n; i++)
        if (isfinite(v[i]))
            q += (v[i] - *mean) * (v[i] - *mean);
    *std = k > 1 ? sqrt(q / (double)(k - 1)) : NAN;
    return k;
}
