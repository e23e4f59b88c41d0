/* The key-table engine of the run's records (see reckey.h): one loop over
 * a record's rows writes it, reads it, reads one value as a number and
 * prints the key list. The rows themselves live beside the records
 * (record.c). */
#include "run/reckey.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define FIELD(rec, k, T) ((T *)((char *)(rec) + (k)->offset))
#define CFIELD(rec, off, T) ((const T *)((const char *)(rec) + (off)))
/* Pointer members named by one word, so that CFIELD's const applies to the
 * member (clang refuses a "const const char *" spelled out). */
typedef const void *ct__cptr;
typedef const char *ct__cstr;
typedef const double *ct__cdoubles;

static int world_of(const struct ct_rec_schema *s, const void *rec)
{
    return *CFIELD(rec, s->world_offset, int);
}

static int gate_holds(const struct ct_rec_key *k, const void *rec)
{
    switch (k->gate) {
    case CT_REC_IF_POSITIVE: return *CFIELD(rec, k->gate_offset, double) > 0;
    case CT_REC_IF_SET: return *CFIELD(rec, k->gate_offset, ct__cptr) != NULL;
    case CT_REC_ALWAYS: break;
    }
    return 1;
}

static int64_t int_of(const struct ct_rec_key *k, const void *rec)
{
    return k->type == CT_REC_INT ? *CFIELD(rec, k->offset, int) : *CFIELD(rec, k->offset, int64_t);
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

static void write_key(struct ct_json_writer *w, const struct ct_rec_key *k, const void *rec, int world)
{
    const double *ranks;
    const char *chars;
    switch (k->type) {
    case CT_REC_INT:
    case CT_REC_INT64:
        if ((k->flags & CT_REC_NULLABLE) && int_of(k, rec) < 0)
            ct_json_kv_null(w, k->name);
        else
            ct_json_kv_int(w, k->name, int_of(k, rec));
        break;
    case CT_REC_BOOL: ct_json_kv_bool(w, k->name, *CFIELD(rec, k->offset, int)); break;
    case CT_REC_FIXED: ct_json_kv_fixed(w, k->name, *CFIELD(rec, k->offset, double), k->prec); break;
    case CT_REC_DOUBLE: ct_json_kv_double(w, k->name, *CFIELD(rec, k->offset, double), k->prec); break;
    case CT_REC_STRING: ct_json_kv_string(w, k->name, *CFIELD(rec, k->offset, ct__cstr)); break;
    case CT_REC_CHARS:
        chars = CFIELD(rec, k->offset, char);
        ct_json_kv_string(w, k->name, (k->flags & CT_REC_EMPTY_NULL) && !chars[0] ? NULL : chars);
        break;
    case CT_REC_RANKS:
        ranks = *CFIELD(rec, k->offset, ct__cdoubles);
        ct_json_key(w, k->name);
        if (ranks)
            ct_json_fixed_array(w, ranks, (size_t)world, k->prec);
        else
            ct_json_null(w);
        break;
    case CT_REC_RANKS_MAX:
        ranks = *CFIELD(rec, k->offset, ct__cdoubles);
        ct_json_kv_fixed(w, k->name, ranks ? max_of(ranks, world) : NAN, k->prec);
        break;
    case CT_REC_TYPE_COUNT: break;
    }
}

void ct_rec_write(struct ct_json_writer *w, const struct ct_rec_schema *s, const void *rec)
{
    int world = s->world_offset != SIZE_MAX ? world_of(s, rec) : 0;
    for (size_t i = 0; i < s->n_keys; i++)
        if (gate_holds(&s->keys[i], rec))
            write_key(w, &s->keys[i], rec, world);
}

/* ---------------------------------------------------------------- reading */

/* A per-rank array: absent or null gives NULL; otherwise world numbers
 * (null entries as NaN) copied into dst. */
static int read_ranks(const struct ct_json_value *o, const char *key, int world, double *dst,
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

/* An optional key that is absent: its default. */
static void set_default(const struct ct_rec_key *k, void *rec, const char **str)
{
    switch (k->type) {
    case CT_REC_INT: *FIELD(rec, k, int) = (int)k->dflt; break;
    case CT_REC_INT64: *FIELD(rec, k, int64_t) = (int64_t)k->dflt; break;
    case CT_REC_BOOL: *FIELD(rec, k, int) = k->dflt != 0; break;
    case CT_REC_FIXED:
    case CT_REC_DOUBLE: *FIELD(rec, k, double) = k->dflt; break;
    case CT_REC_STRING: *FIELD(rec, k, const char *) = NULL; break;
    case CT_REC_CHARS:
        if (str)
            *str = NULL;
        break;
    case CT_REC_RANKS: *FIELD(rec, k, const double *) = NULL; break;
    case CT_REC_RANKS_MAX:
    case CT_REC_TYPE_COUNT: break;
    }
}

static int read_key(const struct ct_json_value *o, const struct ct_rec_key *k, void *rec,
                    const char **str, double **ranks, int world)
{
    const struct ct_json_value *v = ct_json_get(o, k->name);
    if (!v && k->since) {
        set_default(k, rec, str);
        return 0;
    }
    if (v && v->type == CT_JSON_NULL && (k->flags & CT_REC_NULLABLE) && k->type != CT_REC_FIXED &&
        k->type != CT_REC_DOUBLE) {
        set_default(k, rec, str); /* numbers read null as NaN below */
        return 0;
    }
    int rc = 0;
    switch (k->type) {
    case CT_REC_INT: return ct_json_get_int(o, k->name, FIELD(rec, k, int));
    case CT_REC_INT64: return ct_json_get_int64(o, k->name, FIELD(rec, k, int64_t));
    case CT_REC_BOOL: return ct_json_get_bool(o, k->name, FIELD(rec, k, int));
    case CT_REC_FIXED:
    case CT_REC_DOUBLE: return ct_json_get_double(o, k->name, FIELD(rec, k, double));
    case CT_REC_STRING: return ct_json_get_string(o, k->name, FIELD(rec, k, const char *));
    case CT_REC_CHARS:
        if (!str)
            return ct_error_set(CT_EINVAL, "key \"%s\": no room for its string", k->name);
        return ct_json_get_string(o, k->name, str);
    case CT_REC_RANKS:
        rc = read_ranks(o, k->name, world, *ranks, FIELD(rec, k, const double *));
        *ranks += world;
        return rc;
    case CT_REC_RANKS_MAX:
    case CT_REC_TYPE_COUNT: break;
    }
    return 0;
}

/* One block for every per-rank array of the record, kept at owned_offset. */
static int ranks_storage(const struct ct_rec_schema *s, void *rec, int world, double **out)
{
    size_t n = 0;
    for (size_t i = 0; i < s->n_keys; i++)
        n += s->keys[i].type == CT_REC_RANKS;
    *out = NULL;
    if (n == 0)
        return 0;
    double *store = malloc(n * (size_t)world * sizeof *store);
    if (!store)
        return ct_error_set(CT_ENOMEM, s->oom, world);
    *(void **)((char *)rec + s->owned_offset) = store;
    *out = store;
    return 0;
}

int ct_rec_read(const struct ct_json_value *o, const struct ct_rec_schema *s, void *rec,
                enum ct_rec_which which, const char **strs)
{
    double *ranks = NULL;
    int world = 0, rc = 0;
    if (s->n_keys > CT_REC_MAX_KEYS)
        return ct_error_set(CT_EINVAL, "%s: %zu keys, at most %d", s->file, s->n_keys, CT_REC_MAX_KEYS);
    for (size_t i = 0; i < s->n_keys && rc == 0; i++) {
        const struct ct_rec_key *k = &s->keys[i];
        if ((which == CT_REC_REQUIRED && k->since) || (which == CT_REC_OPTIONAL && !k->since) ||
            k->type == CT_REC_RANKS_MAX)
            continue;
        if (k->type == CT_REC_RANKS && !ranks) {
            world = world_of(s, rec);
            if ((rc = ranks_storage(s, rec, world, &ranks)) < 0)
                break;
        }
        rc = read_key(o, k, rec, strs ? &strs[i] : NULL, &ranks, world);
    }
    return rc;
}

/* ---------------------------------------------------------------- look-ups */

const struct ct_rec_key *ct_rec_find(const struct ct_rec_schema *s, const char *name)
{
    for (size_t i = 0; i < s->n_keys; i++)
        if (strcmp(s->keys[i].name, name) == 0)
            return &s->keys[i];
    return NULL;
}

double ct_rec_number(const struct ct_rec_key *k, const void *rec, const struct ct_rec_schema *s)
{
    /* A key that gates itself (tokens_per_s, flops_per_sample) is not
     * recorded when its gate fails; one gated by another is read as is. */
    if (k->gate != CT_REC_ALWAYS && k->gate_offset == k->offset && !gate_holds(k, rec))
        return NAN;
    const double *ranks;
    int world = s->world_offset != SIZE_MAX ? world_of(s, rec) : 0;
    double v = NAN;
    switch (k->type) {
    case CT_REC_INT:
    case CT_REC_INT64:
        return (k->flags & CT_REC_NULLABLE) && int_of(k, rec) < 0 ? NAN : (double)int_of(k, rec);
    case CT_REC_BOOL: return *CFIELD(rec, k->offset, int) != 0;
    case CT_REC_FIXED:
    case CT_REC_DOUBLE: return *CFIELD(rec, k->offset, double);
    case CT_REC_RANKS: /* the ranks' mean */
        ranks = *CFIELD(rec, k->offset, ct__cdoubles);
        if (!ranks)
            return NAN;
        v = 0.0;
        for (int r = 0; r < world; r++)
            v += ranks[r] / world;
        return v;
    case CT_REC_RANKS_MAX: /* the largest finite value */
        ranks = *CFIELD(rec, k->offset, ct__cdoubles);
        for (int r = 0; ranks && r < world; r++)
            if (isfinite(ranks[r]) && !(ranks[r] <= v))
                v = ranks[r];
        return v;
    case CT_REC_STRING:
    case CT_REC_CHARS:
    case CT_REC_TYPE_COUNT: break;
    }
    return NAN;
}

int ct_rec_integer(const struct ct_rec_key *k, const void *rec, int64_t *v)
{
    if (k->type == CT_REC_BOOL) {
        *v = *CFIELD(rec, k->offset, int) != 0;
        return 1;
    }
    if (k->type != CT_REC_INT && k->type != CT_REC_INT64)
        return 0;
    *v = int_of(k, rec);
    return !((k->flags & CT_REC_NULLABLE) && *v < 0);
}

/* ---------------------------------------------------------------- docs */

static void md_format(FILE *f, const struct ct_rec_key *k)
{
    switch (k->type) {
    case CT_REC_INT:
    case CT_REC_INT64: fputs(k->flags & CT_REC_NULLABLE ? "integer or null" : "integer", f); break;
    case CT_REC_BOOL: fputs("true / false", f); break;
    case CT_REC_FIXED: fprintf(f, "number, %%.%df (null: not a number)", k->prec); break;
    case CT_REC_DOUBLE: fprintf(f, "number, %%.%dg (null: not a number)", k->prec); break;
    case CT_REC_STRING: fputs("string or null", f); break;
    case CT_REC_CHARS:
        fprintf(f, "string%s, at most %zu bytes", k->flags & (CT_REC_NULLABLE | CT_REC_EMPTY_NULL) ?
                " or null" : "", k->size - 1);
        break;
    case CT_REC_RANKS: fprintf(f, "[one per rank, %%.%df] or null", k->prec); break;
    case CT_REC_RANKS_MAX: fprintf(f, "number, %%.%df (the largest non-null rank's)", k->prec); break;
    case CT_REC_TYPE_COUNT: break;
    }
}

void ct_rec_markdown(FILE *f, const struct ct_rec_schema *s)
{
    fprintf(f, "## %s\n\n%s\n\n| key | written as | when | optional since (default) | meaning |\n"
            "|---|---|---|---|---|\n", s->file, s->doc);
    for (size_t i = 0; i < s->n_keys; i++) {
        const struct ct_rec_key *k = &s->keys[i];
        fprintf(f, "| `%s` | ", k->name);
        md_format(f, k);
        fputs(" | ", f);
        if (k->gate == CT_REC_ALWAYS)
            fputs("always", f);
        for (size_t j = 0; k->gate != CT_REC_ALWAYS && j < s->n_keys; j++)
            if (s->keys[j].offset == k->gate_offset && s->keys[j].type != CT_REC_RANKS_MAX)
                fprintf(f, k->gate == CT_REC_IF_POSITIVE ? "`%s` > 0" : "`%s` set", s->keys[j].name);
        fputs(" | ", f);
        if (k->type == CT_REC_RANKS_MAX)
            fputs("not read", f);
        else if (!k->since)
            fputs("required", f);
        else if (isnan(k->dflt) && (k->type == CT_REC_FIXED || k->type == CT_REC_DOUBLE))
            fprintf(f, "%s (null)", k->since);
        else if (k->type == CT_REC_STRING || k->type == CT_REC_RANKS)
            fprintf(f, "%s (null)", k->since);
        else if (k->type == CT_REC_CHARS)
            fprintf(f, "%s (\"\")", k->since);
        else
            fprintf(f, "%s (%g)", k->since, k->dflt);
        fprintf(f, " | %s |\n", k->doc);
    }
    fputc('\n', f);
}
