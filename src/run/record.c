/* The run's records: run.json, metrics.jsonl, steps.jsonl, log trimming
 * (see record.h); chain.jsonl is record_chain.c. Every line is written and
 * read through its key table (record_keys.c, reckey.h); what is here is
 * each record's own checks around those calls. */
#include "run/record.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "core/error.h"
#include "core/log.h"
#include "core/path.h"
#include "run/json.h"

/* run.json is a few hundred bytes; anything near this is not ours. */
#define RUN_JSON_MAX_BYTES ((size_t)1 << 20)

/* Write the writer's text and a newline to f and flush, so that a crash
 * loses at most the line being written. */
static int append_line(FILE *f, const char *path, struct ct_json_writer *w)
{
    int rc = ct_json_writer_status(w);
    if (rc < 0)
        return ct_error_wrap(rc, "%s: cannot format the record", path);
    if (fwrite(w->buf, 1, w->len, f) != w->len || fputc('\n', f) == EOF || fflush(f) != 0)
        return ct_error_set(CT_EIO, "%s: write failed: %s", path, strerror(errno));
    return 0;
}

/* ================================================================ run.json */

static int is_run_key(const char *key)
{
    return ct_rec_find(&ct_run_schema, key) != NULL;
}

int ct_run_record_write(const char *dir, const struct ct_run_record *r)
{
    char path[CT_PATH_MAX];
    int rc = ct_path_join(path, sizeof path, dir, "run.json");
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < r->n_extra; i++) {
        if (!r->extra[i].key || is_run_key(r->extra[i].key))
            return ct_error_set(CT_EINVAL, "%s: extra key %zu (\"%s\") is NULL or repeats a fixed "
                                "key", path, i, r->extra[i].key ? r->extra[i].key : "");
        for (size_t j = 0; j < i; j++)
            if (strcmp(r->extra[i].key, r->extra[j].key) == 0)
                return ct_error_set(CT_EINVAL, "%s: extra key \"%s\" given twice", path,
                                    r->extra[i].key);
    }
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_rec_write(&w, &ct_run_schema, r);
    for (size_t i = 0; i < r->n_extra; i++)
        ct_json_kv_string(&w, r->extra[i].key, r->extra[i].value);
    ct_json_end_object(&w);
    if ((rc = ct_json_writer_status(&w)) < 0) {
        ct_json_writer_free(&w);
        return ct_error_wrap(rc, "%s", path);
    }
    struct ct_replace rep;
    if ((rc = ct_replace_open(&rep, path)) == 0) {
        fwrite(w.buf, 1, w.len, rep.f);
        fputc('\n', rep.f);
        rc = ct_replace_commit(&rep); /* checks the stream's error flag */
    }
    ct_json_writer_free(&w);
    return rc;
}

/* The reader's storage: the parsed document (the strings point into it) and
 * the extra pairs. */
struct run_owned {
    struct ct_json_doc doc;
    size_t n_extra;
    struct ct_run_extra extra[];
};

int ct_run_read_file(const char *path, size_t max, char **text, size_t *len)
{
    *text = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return ct_error_set(errno == ENOENT ? CT_ENOENT : CT_EIO, "%s: cannot open: %s", path,
                            strerror(errno));
    char *buf = malloc(max + 1);
    if (!buf) {
        fclose(f);
        return ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    }
    size_t n = fread(buf, 1, max + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return ct_error_set(CT_EIO, "%s: read failed", path);
    }
    if (n > max) {
        free(buf);
        return ct_error_set(CT_EFORMAT, "%s: larger than %zu bytes: not a file of a run", path, max);
    }
    buf[n] = '\0';
    char *fit = realloc(buf, n + 1); /* keep what the file holds, not the cap */
    *text = fit ? fit : buf;
    if (len)
        *len = n;
    return 0;
}

int ct_run_record_read(const char *path, struct ct_run_record *r)
{
    memset(r, 0, sizeof *r);
    char *text;
    size_t len = 0;
    int rc = ct_run_read_file(path, RUN_JSON_MAX_BYTES, &text, &len);
    if (rc < 0)
        return rc;
    struct ct_json_doc doc;
    rc = ct_json_parse(&doc, text, len, NULL);
    free(text);
    if (rc < 0)
        return ct_error_wrap(rc, "%s", path);
    const struct ct_json_value *o = doc.root;
    size_t n_extra = 0;
    for (size_t i = 0; o->type == CT_JSON_OBJECT && i < o->n; i++)
        n_extra += !is_run_key(o->keys[i]) && o->items[i].type == CT_JSON_STRING;
    struct run_owned *own = malloc(sizeof *own + n_extra * sizeof own->extra[0]);
    if (!own) {
        ct_json_doc_free(&doc);
        return ct_error_set(CT_ENOMEM, "%s: out of memory", path);
    }
    own->doc = doc;
    own->n_extra = 0;
    r->owned = own;
    if ((rc = ct_rec_read(o, &ct_run_schema, r, CT_REC_ALL, NULL)) < 0) {
        ct_run_record_free(r);
        return ct_error_wrap(rc, "%s", path);
    }
    for (size_t i = 0; i < o->n; i++)
        if (!is_run_key(o->keys[i]) && o->items[i].type == CT_JSON_STRING)
            own->extra[own->n_extra++] = (struct ct_run_extra){o->keys[i], o->items[i].string};
    r->extra = own->extra;
    r->n_extra = own->n_extra;
    return 0;
}

void ct_run_record_free(struct ct_run_record *r)
{
    struct run_owned *own = r->owned;
    if (own) {
        ct_json_doc_free(&own->doc);
        free(own);
    }
    memset(r, 0, sizeof *r);
}

/* ================================================================ metrics.jsonl */

static const char *const phase_keys[CT_RUN_PHASE_COUNT] = {
    [CT_RUN_PHASE_DATA_WAIT] = "data_wait_s",
    [CT_RUN_PHASE_FORWARD_BACKWARD] = "forward_backward_s",
    [CT_RUN_PHASE_EXPOSED_COMM] = "exposed_comm_s",
    [CT_RUN_PHASE_OPTIM] = "optim_s",
};

const char *ct_run_phase_key(enum ct_run_phase p)
{
    return (unsigned)p < CT_RUN_PHASE_COUNT ? phase_keys[p] : NULL;
}

const double *ct_epoch_record_phase(const struct ct_epoch_record *r, enum ct_run_phase p)
{
    switch (p) {
    case CT_RUN_PHASE_DATA_WAIT: return r->data_wait_s;
    case CT_RUN_PHASE_FORWARD_BACKWARD: return r->forward_backward_s;
    case CT_RUN_PHASE_EXPOSED_COMM: return r->exposed_comm_s;
    case CT_RUN_PHASE_OPTIM: return r->optim_s;
    case CT_RUN_PHASE_COUNT: break;
    }
    return NULL;
}

int ct_epoch_record_slowest_rank(const struct ct_epoch_record *r)
{
    if (r->world < 1)
        return -1;
    for (int p = 0; p < CT_RUN_PHASE_COUNT; p++)
        if (!ct_epoch_record_phase(r, (enum ct_run_phase)p))
            return -1;
    int best = 0;
    double best_t = -INFINITY;
    for (int k = 0; k < r->world; k++) {
        double t = 0;
        for (int p = 0; p < CT_RUN_PHASE_COUNT; p++)
            if (p != CT_RUN_PHASE_EXPOSED_COMM)
                t += ct_epoch_record_phase(r, (enum ct_run_phase)p)[k];
        if (t > best_t) {
            best_t = t;
            best = k;
        }
    }
    return best;
}

int ct_metrics_append(FILE *f, const char *path, const struct ct_epoch_record *r)
{
    if (r->world < 1)
        return ct_error_set(CT_EINVAL, "%s: epoch record with world %d", path, r->world);
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_rec_write(&w, &ct_epoch_schema, r);
    ct_json_end_object(&w);
    int rc = append_line(f, path, &w);
    ct_json_writer_free(&w);
    return rc;
}

static int parse_epoch(const struct ct_json_value *o, struct ct_epoch_record *r)
{
    const char *strs[CT_REC_MAX_KEYS] = {0};
    int rc = ct_rec_read(o, &ct_epoch_schema, r, CT_REC_REQUIRED, strs);
    if (rc < 0)
        return rc;
    if (r->world < 1 || r->world > (1 << 20))
        return ct_error_set(CT_EFORMAT, "offset %zu: key \"world\": %d ranks, expected 1..2^20",
                            ct_json_get(o, "world")->offset, r->world);
    const char *sha = strs[ct_rec_find(&ct_epoch_schema, "param_sha256") - ct_epoch_schema.keys];
    if (strlen(sha) >= sizeof r->param_sha256)
        return ct_error_set(CT_EFORMAT, "offset %zu: key \"param_sha256\": %zu characters, a "
                            "SHA-256 in hex has 64", ct_json_get(o, "param_sha256")->offset,
                            strlen(sha));
    memcpy(r->param_sha256, sha, strlen(sha) + 1);
    /* Optional keys (older lines lack them) after the checks: the per-rank
     * arrays need the world. */
    return ct_rec_read(o, &ct_epoch_schema, r, CT_REC_OPTIONAL, strs);
}

int ct_epoch_record_parse(const char *line, struct ct_epoch_record *r)
{
    memset(r, 0, sizeof *r);
    struct ct_json_doc doc;
    int rc = ct_json_parse(&doc, line, strlen(line), NULL);
    if (rc < 0)
        return rc;
    rc = parse_epoch(doc.root, r);
    ct_json_doc_free(&doc);
    if (rc < 0)
        ct_epoch_record_free(r);
    return rc;
}

void ct_epoch_record_free(struct ct_epoch_record *r)
{
    free(r->owned);
    memset(r, 0, sizeof *r);
    r->slowest_rank = -1;
}

/* ================================================================ steps.jsonl */

int ct_steps_append(FILE *f, const char *path, const struct ct_step_record *r)
{
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_rec_write(&w, &ct_step_schema, r);
    ct_json_end_object(&w);
    int rc = append_line(f, path, &w);
    ct_json_writer_free(&w);
    return rc;
}

int ct_step_record_parse(const char *line, struct ct_step_record *r)
{
    memset(r, 0, sizeof *r);
    struct ct_json_doc doc;
    int rc = ct_json_parse(&doc, line, strlen(line), NULL);
    if (rc < 0)
        return rc;
    rc = ct_rec_read(doc.root, &ct_step_schema, r, CT_REC_ALL, NULL);
    ct_json_doc_free(&doc);
    return rc;
}

/* ================================================================ trimming */

/* The "step" of one line; the message says what is wrong with it. */
static int line_step(const char *line, size_t len, int64_t *step)
{
    struct ct_json_doc doc;
    int rc = ct_json_parse(&doc, line, len, NULL);
    if (rc < 0)
        return rc;
    rc = ct_json_get_int64(doc.root, "step", step);
    ct_json_doc_free(&doc);
    return rc;
}

int ct_log_trim(const char *path, int64_t max_step)
{
    FILE *in = fopen(path, "r");
    if (!in) {
        if (errno == ENOENT)
            return 0; /* nothing logged yet */
        return ct_error_set(CT_EIO, "%s: cannot open: %s", path, strerror(errno));
    }
    struct ct_replace out;
    int rc = ct_replace_open(&out, path);
    if (rc < 0) {
        fclose(in);
        return rc;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    long long lineno = 0;
    errno = 0;
    while (rc == 0 && (n = getline(&line, &cap, in)) > 0) {
        lineno++;
        int complete = line[n - 1] == '\n';
        int64_t step;
        rc = line_step(line, (size_t)n, &step);
        if (rc < 0 && !complete) {
            /* Lines are written and flushed whole; a last line without its
             * newline that does not parse is a write a kill cut short, and
             * its step is about to be redone anyway. */
            ct_log_warn("%s:%lld: dropping the last line, cut short by an earlier stop: %s", path,
                        lineno, ct_error_message());
            ct_error_clear();
            rc = 0;
            break;
        }
        if (rc < 0) {
            rc = ct_error_wrap(rc, "%s:%lld", path, lineno);
            break;
        }
        if (step <= max_step) {
            fwrite(line, 1, (size_t)n, out.f);
            /* A kept last line without its newline gets one, so that the
             * run's next append starts a line of its own. */
            if (!complete)
                fputc('\n', out.f);
        }
    }
    if (rc == 0 && ferror(in))
        rc = ct_error_set(CT_EIO, "%s: read failed: %s", path, strerror(errno));
    free(line);
    fclose(in);
    if (rc < 0) {
        ct_replace_abort(&out);
        return rc;
    }
    return ct_replace_commit(&out);
}

