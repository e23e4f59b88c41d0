/* The run's records: run.json, metrics.jsonl, steps.jsonl, log trimming
 * (see record.h). Every line is built with the JSON writer and read back
 * with the JSON reader; the key names live in this file only. */
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

static const char *const run_keys[] = {"version", "git", "config", "world", "blas_threads", "blas",
                                       "gemm", "host0", "params", "steps_per_epoch", "total_steps",
                                       "flops_per_sample", "peak_gflops", "peak_source",
                                       "peak_kernel"};

static int is_run_key(const char *key)
{
    for (size_t i = 0; i < sizeof run_keys / sizeof *run_keys; i++)
        if (strcmp(key, run_keys[i]) == 0)
            return 1;
    return 0;
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
    ct_json_kv_string(&w, "version", r->version);
    ct_json_kv_string(&w, "git", r->git);
    ct_json_kv_string(&w, "config", r->config);
    ct_json_kv_int(&w, "world", r->world);
    ct_json_kv_int(&w, "blas_threads", r->blas_threads);
    ct_json_kv_string(&w, "blas", r->blas);
    ct_json_kv_string(&w, "gemm", r->gemm);
    ct_json_kv_string(&w, "host0", r->host0);
    ct_json_kv_int(&w, "params", r->params);
    ct_json_kv_int(&w, "steps_per_epoch", r->steps_per_epoch);
    ct_json_kv_int(&w, "total_steps", r->total_steps);
    if (r->peak_source) {
        ct_json_kv_fixed(&w, "flops_per_sample", r->flops_per_sample, 0);
        ct_json_kv_fixed(&w, "peak_gflops", r->peak_gflops, 2);
        ct_json_kv_string(&w, "peak_source", r->peak_source);
        ct_json_kv_string(&w, "peak_kernel", r->peak_kernel);
    }
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

/* A string or null (NULL); the key must be there. */
static int get_opt_string(const struct ct_json_value *obj, const char *key, const char **out)
{
    const struct ct_json_value *v = ct_json_get(obj, key);
    if (v && v->type == CT_JSON_NULL) {
        *out = NULL;
        return 0;
    }
    return ct_json_get_string(obj, key, out);
}

/* The MFU keys, each optional (runs before MFU lack them). */
static int get_optional_mfu(const struct ct_json_value *o, struct ct_run_record *r)
{
    int rc = 0;
    r->flops_per_sample = 0.0;
    r->peak_gflops = NAN;
    if ((ct_json_get(o, "flops_per_sample") &&
         (rc = ct_json_get_double(o, "flops_per_sample", &r->flops_per_sample)) < 0) ||
        (ct_json_get(o, "peak_gflops") &&
         (rc = ct_json_get_double(o, "peak_gflops", &r->peak_gflops)) < 0) ||
        (ct_json_get(o, "peak_source") && (rc = get_opt_string(o, "peak_source", &r->peak_source)) < 0) ||
        (ct_json_get(o, "peak_kernel") && (rc = get_opt_string(o, "peak_kernel", &r->peak_kernel)) < 0))
        return rc;
    return 0;
}

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
    if ((rc = get_opt_string(o, "version", &r->version)) < 0 ||
        (rc = get_opt_string(o, "git", &r->git)) < 0 ||
        (rc = get_opt_string(o, "config", &r->config)) < 0 ||
        (rc = ct_json_get_int(o, "world", &r->world)) < 0 ||
        (rc = ct_json_get_int(o, "blas_threads", &r->blas_threads)) < 0 ||
        (rc = get_opt_string(o, "blas", &r->blas)) < 0 ||
        (rc = get_opt_string(o, "gemm", &r->gemm)) < 0 ||
        (rc = get_opt_string(o, "host0", &r->host0)) < 0 ||
        (rc = ct_json_get_int64(o, "params", &r->params)) < 0 ||
        (rc = ct_json_get_int64(o, "steps_per_epoch", &r->steps_per_epoch)) < 0 ||
        (rc = ct_json_get_int64(o, "total_steps", &r->total_steps)) < 0 ||
        (rc = get_optional_mfu(o, r)) < 0) {
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

static const double **phase_slot(struct ct_epoch_record *r, enum ct_run_phase p)
{
    switch (p) {
    case CT_RUN_PHASE_DATA_WAIT: return &r->data_wait_s;
    case CT_RUN_PHASE_FORWARD_BACKWARD: return &r->forward_backward_s;
    case CT_RUN_PHASE_EXPOSED_COMM: return &r->exposed_comm_s;
    case CT_RUN_PHASE_OPTIM: return &r->optim_s;
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

/* The largest value, ignoring NaN (a rank that measured nothing); NaN when
 * none is a number, which the writer turns into null. */
static double max_of(const double *v, int n)
{
    double m = NAN;
    for (int i = 0; i < n; i++)
        if (!isnan(v[i]) && (isnan(m) || v[i] > m))
            m = v[i];
    return m;
}

int ct_metrics_append(FILE *f, const char *path, const struct ct_epoch_record *r)
{
    if (r->world < 1)
        return ct_error_set(CT_EINVAL, "%s: epoch record with world %d", path, r->world);
    struct ct_json_writer w;
    ct_json_writer_init(&w);
    ct_json_begin_object(&w);
    ct_json_kv_int(&w, "epoch", r->epoch);
    ct_json_kv_int(&w, "step", r->step);
    ct_json_kv_bool(&w, "partial", r->partial);
    ct_json_kv_fixed(&w, "train_loss", r->train_loss, 6);
    ct_json_kv_fixed(&w, "train_acc", r->train_acc, 4);
    ct_json_kv_fixed(&w, "test_loss", r->test_loss, 6);
    ct_json_kv_fixed(&w, "test_acc", r->test_acc, 4);
    ct_json_kv_fixed(&w, "samples_per_s", r->samples_per_s, 1);
    if (r->tokens_per_s > 0) {
        ct_json_kv_fixed(&w, "tokens_per_s", r->tokens_per_s, 1);
        ct_json_kv_fixed(&w, "val_bpb", r->val_bpb, 4);
    }
    ct_json_kv_fixed(&w, "epoch_s", r->epoch_s, 4);
    ct_json_kv_fixed(&w, "eval_s", r->eval_s, 4);
    ct_json_kv_double(&w, "lr", r->lr, 8);
    ct_json_kv_fixed(&w, "peak_rss_mib", r->peak_rss_mib, 1);
    ct_json_kv_fixed(&w, "pss_mib", r->pss_mib, 1);
    if (r->optim_state_bytes >= 0)
        ct_json_kv_int(&w, "optim_state_bytes", r->optim_state_bytes);
    else
        ct_json_kv_null(&w, "optim_state_bytes");
    ct_json_kv_int(&w, "world", r->world);
    for (int p = 0; p < CT_RUN_PHASE_COUNT; p++) {
        const double *v = ct_epoch_record_phase(r, (enum ct_run_phase)p);
        char max_key[64];
        snprintf(max_key, sizeof max_key, "%s_max", phase_keys[p]);
        ct_json_key(&w, phase_keys[p]);
        if (v)
            ct_json_fixed_array(&w, v, (size_t)r->world, 4);
        else
            ct_json_null(&w);
        ct_json_kv_fixed(&w, max_key, v ? max_of(v, r->world) : NAN, 4);
    }
    ct_json_key(&w, "slowest_rank");
    if (r->slowest_rank >= 0)
        ct_json_int(&w, r->slowest_rank);
    else
        ct_json_null(&w);
    ct_json_kv_int(&w, "nonfinite_skipped", r->nonfinite_skipped);
    ct_json_kv_int(&w, "nonfinite_skipped_total", r->nonfinite_skipped_total);
    if (r->flops_per_sample > 0) {
        ct_json_kv_fixed(&w, "flops_per_sample", r->flops_per_sample, 0);
        ct_json_key(&w, "achieved_gflops");
        if (r->achieved_gflops)
            ct_json_fixed_array(&w, r->achieved_gflops, (size_t)r->world, 2);
        else
            ct_json_null(&w);
        ct_json_kv_fixed(&w, "peak_gflops", r->peak_gflops, 2);
        ct_json_kv_fixed(&w, "mfu", r->mfu, 4);
    }
    ct_json_kv_string(&w, "param_sha256", r->param_sha256);
    ct_json_end_object(&w);
    int rc = append_line(f, path, &w);
    ct_json_writer_free(&w);
    return rc;
}

/* A phase array: absent or null gives NULL; otherwise world numbers (null
 * entries as NaN) copied into dst. */
static int parse_phase(const struct ct_json_value *o, const char *key, int world, double *dst,
                       const double **out)
{
    const struct ct_json_value *a = ct_json_get(o, key);
    *out = NULL;
    if (!a || a->type == CT_JSON_NULL)
        return 0;
    if (a->type != CT_JSON_ARRAY || a->n != (size_t)world)
        return ct_error_set(CT_EFORMAT, "offset %zu: key \"%s\": expected an array of %d numbers "
                            "(one per rank), found %s of %zu", a->offset, key, world,
                            ct_json_type_name(a->type), a->n);
    for (int k = 0; k < world; k++) {
        int rc = ct_json_as_double(&a->items[k], &dst[k]);
        if (rc < 0)
            return ct_error_wrap(rc, "key \"%s\"[%d]", key, k);
    }
    *out = dst;
    return 0;
}

static int parse_epoch(const struct ct_json_value *o, struct ct_epoch_record *r)
{
    const char *sha;
    int rc;
    if ((rc = ct_json_get_int(o, "epoch", &r->epoch)) < 0 ||
        (rc = ct_json_get_int64(o, "step", &r->step)) < 0 ||
        (rc = ct_json_get_bool(o, "partial", &r->partial)) < 0 ||
        (rc = ct_json_get_double(o, "train_loss", &r->train_loss)) < 0 ||
        (rc = ct_json_get_double(o, "test_loss", &r->test_loss)) < 0 ||
        (rc = ct_json_get_double(o, "test_acc", &r->test_acc)) < 0 ||
        (rc = ct_json_get_double(o, "samples_per_s", &r->samples_per_s)) < 0 ||
        (rc = ct_json_get_double(o, "epoch_s", &r->epoch_s)) < 0 ||
        (rc = ct_json_get_double(o, "eval_s", &r->eval_s)) < 0 ||
        (rc = ct_json_get_double(o, "lr", &r->lr)) < 0 ||
        (rc = ct_json_get_double(o, "peak_rss_mib", &r->peak_rss_mib)) < 0 ||
        (rc = ct_json_get_int(o, "world", &r->world)) < 0 ||
        (rc = ct_json_get_string(o, "param_sha256", &sha)) < 0)
        return rc;
    if (r->world < 1 || r->world > (1 << 20))
        return ct_error_set(CT_EFORMAT, "offset %zu: key \"world\": %d ranks, expected 1..2^20",
                            ct_json_get(o, "world")->offset, r->world);
    if (strlen(sha) >= sizeof r->param_sha256)
        return ct_error_set(CT_EFORMAT, "offset %zu: key \"param_sha256\": %zu characters, a "
                            "SHA-256 in hex has 64", ct_json_get(o, "param_sha256")->offset,
                            strlen(sha));
    memcpy(r->param_sha256, sha, strlen(sha) + 1);
    /* Optional (older lines lack them): NaN when absent or null. */
    r->train_acc = NAN;
    if (ct_json_get(o, "train_acc") && (rc = ct_json_get_double(o, "train_acc", &r->train_acc)) < 0)
        return rc;
    r->pss_mib = NAN;
    if (ct_json_get(o, "pss_mib") && (rc = ct_json_get_double(o, "pss_mib", &r->pss_mib)) < 0)
        return rc;
    r->optim_state_bytes = -1;
    const struct ct_json_value *osb = ct_json_get(o, "optim_state_bytes");
    if (osb && osb->type != CT_JSON_NULL &&
        (rc = ct_json_get_int64(o, "optim_state_bytes", &r->optim_state_bytes)) < 0)
        return rc;
    r->tokens_per_s = 0.0; /* image data */
    r->val_bpb = NAN;
    if ((ct_json_get(o, "tokens_per_s") &&
         (rc = ct_json_get_double(o, "tokens_per_s", &r->tokens_per_s)) < 0) ||
        (ct_json_get(o, "val_bpb") && (rc = ct_json_get_double(o, "val_bpb", &r->val_bpb)) < 0))
        return rc;
    r->nonfinite_skipped = r->nonfinite_skipped_total = 0;
    if ((ct_json_get(o, "nonfinite_skipped") &&
         (rc = ct_json_get_int64(o, "nonfinite_skipped", &r->nonfinite_skipped)) < 0) ||
        (ct_json_get(o, "nonfinite_skipped_total") &&
         (rc = ct_json_get_int64(o, "nonfinite_skipped_total", &r->nonfinite_skipped_total)) < 0))
        return rc;
    r->slowest_rank = -1;
    const struct ct_json_value *s = ct_json_get(o, "slowest_rank");
    if (s && s->type != CT_JSON_NULL && (rc = ct_json_get_int(o, "slowest_rank", &r->slowest_rank)) < 0)
        return rc;
    /* The phases' arrays, then achieved_gflops'. */
    double *store = malloc(((size_t)CT_RUN_PHASE_COUNT + 1) * (size_t)r->world * sizeof *store);
    if (!store)
        return ct_error_set(CT_ENOMEM, "out of memory for %d ranks' phase times", r->world);
    r->owned = store;
    for (int p = 0; p < CT_RUN_PHASE_COUNT; p++)
        if ((rc = parse_phase(o, phase_keys[p], r->world, store + (size_t)p * (size_t)r->world,
                              phase_slot(r, (enum ct_run_phase)p))) < 0)
            return rc;
    /* MFU (optional: older lines lack it). */
    r->flops_per_sample = 0.0;
    r->peak_gflops = r->mfu = NAN;
    if ((ct_json_get(o, "flops_per_sample") &&
         (rc = ct_json_get_double(o, "flops_per_sample", &r->flops_per_sample)) < 0) ||
        (ct_json_get(o, "peak_gflops") &&
         (rc = ct_json_get_double(o, "peak_gflops", &r->peak_gflops)) < 0) ||
        (ct_json_get(o, "mfu") && (rc = ct_json_get_double(o, "mfu", &r->mfu)) < 0))
        return rc;
    return parse_phase(o, "achieved_gflops", r->world,
                       store + (size_t)CT_RUN_PHASE_COUNT * (size_t)r->world, &r->achieved_gflops);
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
    ct_json_kv_int(&w, "step", r->step);
    ct_json_kv_double(&w, "loss", r->loss, 9);
    ct_json_kv_fixed(&w, "acc", r->acc, 6);
    ct_json_kv_double(&w, "lr", r->lr, 9);
    if (r->tokens_per_s > 0)
        ct_json_kv_fixed(&w, "tokens_per_s", r->tokens_per_s, 1);
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
    r->acc = NAN;
    if ((rc = ct_json_get_int64(doc.root, "step", &r->step)) == 0 &&
        (rc = ct_json_get_double(doc.root, "loss", &r->loss)) == 0 &&
        (!ct_json_get(doc.root, "acc") || (rc = ct_json_get_double(doc.root, "acc", &r->acc)) == 0))
        rc = ct_json_get_double(doc.root, "lr", &r->lr);
    if (rc == 0 && ct_json_get(doc.root, "tokens_per_s"))
        rc = ct_json_get_double(doc.root, "tokens_per_s", &r->tokens_per_s);
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

/* Every field of e must be NUL-terminated inside its array. */
static int check_entry_strings(const struct ct_chain_entry *e)
{
    const struct {
        const char *s;
        size_t cap;
        const char *key;
    } f[] = {{e->ckpt, sizeof e->ckpt, "ckpt"},
             {e->digest, sizeof e->digest, "digest"},
             {e->parent, sizeof e->parent, "parent"},
             {e->config_digest, sizeof e->config_digest, "config_digest"},
             {e->code_version, sizeof e->code_version, "code_version"},
             {e->hosts, sizeof e->hosts, "hosts"},
             {e->gemm, sizeof e->gemm, "gemm"},
             {e->blas, sizeof e->blas, "blas"},
             {e->libraries, sizeof e->libraries, "libraries"},
             {e->time, sizeof e->time, "time"}};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++)
        if (!memchr(f[i].s, '\0', f[i].cap))
            return ct_error_set(CT_EINVAL, "chain entry: %s is not NUL-terminated", f[i].key);
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
    ct_json_kv_int(&w, "step", e->step);
    ct_json_kv_int(&w, "epoch", e->epoch);
    ct_json_kv_string(&w, "ckpt", e->ckpt);
    ct_json_kv_string(&w, "digest", e->digest);
    ct_json_kv_string(&w, "parent", e->parent[0] ? e->parent : NULL);
    ct_json_kv_string(&w, "config_digest", e->config_digest);
    ct_json_kv_string(&w, "code_version", e->code_version);
    ct_json_kv_int(&w, "world", e->world);
    ct_json_kv_string(&w, "hosts", e->hosts);
    ct_json_kv_string(&w, "gemm", e->gemm);
    ct_json_kv_string(&w, "blas", e->blas);
    ct_json_kv_string(&w, "libraries", e->libraries);
    ct_json_kv_string(&w, "time", e->time);
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
    const char *ckpt, *digest, *parent, *cfg, *code, *hosts, *gemm, *blas, *time;
    const char *libs = NULL; /* absent from chains written before it existed */
    int rc;
    if ((rc = ct_json_get_int64(o, "step", &e->step)) < 0 ||
        (rc = ct_json_get_int64(o, "epoch", &e->epoch)) < 0 ||
        (rc = ct_json_get_string(o, "ckpt", &ckpt)) < 0 ||
        (rc = ct_json_get_string(o, "digest", &digest)) < 0 ||
        (rc = get_opt_string(o, "parent", &parent)) < 0 ||
        (rc = ct_json_get_string(o, "config_digest", &cfg)) < 0 ||
        (rc = ct_json_get_string(o, "code_version", &code)) < 0 ||
        (rc = ct_json_get_int(o, "world", &e->world)) < 0 ||
        (rc = ct_json_get_string(o, "hosts", &hosts)) < 0 ||
        (rc = ct_json_get_string(o, "gemm", &gemm)) < 0 ||
        (rc = ct_json_get_string(o, "blas", &blas)) < 0 ||
        (ct_json_get(o, "libraries") && (rc = get_opt_string(o, "libraries", &libs)) < 0) ||
        (rc = ct_json_get_string(o, "time", &time)) < 0)
        return rc;
    if ((rc = copy_field(e->ckpt, sizeof e->ckpt, ckpt, "ckpt")) < 0 ||
        (rc = copy_field(e->digest, sizeof e->digest, digest, "digest")) < 0 ||
        (rc = copy_field(e->parent, sizeof e->parent, parent, "parent")) < 0 ||
        (rc = copy_field(e->config_digest, sizeof e->config_digest, cfg, "config_digest")) < 0 ||
        (rc = copy_field(e->code_version, sizeof e->code_version, code, "code_version")) < 0 ||
        (rc = copy_field(e->hosts, sizeof e->hosts, hosts, "hosts")) < 0 ||
        (rc = copy_field(e->gemm, sizeof e->gemm, gemm, "gemm")) < 0 ||
        (rc = copy_field(e->blas, sizeof e->blas, blas, "blas")) < 0 ||
        (rc = copy_field(e->libraries, sizeof e->libraries, libs, "libraries")) < 0 ||
        (rc = copy_field(e->time, sizeof e->time, time, "time")) < 0)
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
