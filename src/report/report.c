/* The run report (see report.h): loading goes through the run-directory
 * reader, the page is report_html.c (its numbers report_data.c); here the
 * CSV and the command. */
#include "report/report.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/path.h"
#include "run/rundir.h"

const char *const ct_report_format_names[] = {"html", "csv", NULL};

/* ================================================================ loading */

int ct_report_run_load(const char *dir, struct ct_report_run *r)
{
    return ct_run_open(dir, CT_RUN_ALL, r);
}

void ct_report_run_free(struct ct_report_run *r)
{
    if (r)
        ct_run_close(r);
}

const char *ct_report_run_config(const struct ct_report_run *r, const char *key)
{
    return ct_run_config_value(r, key);
}

/* ================================================================ CSV */

/* A field quoted when it holds a comma, quote or line break (RFC 4180). */
static void csv_text(FILE *f, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void csv_num(FILE *f, double v, const char *fmt, int prec)
{
    fputc(',', f);
    if (isfinite(v))
        fprintf(f, fmt, prec, v);
}

/* The key of CSV column c (1-based), NULL past the last. */
static const struct ct_rec_key *csv_column(int c)
{
    for (size_t i = 0; i < ct_epoch_schema.n_keys; i++)
        if (ct_epoch_schema.keys[i].csv == c)
            return &ct_epoch_schema.keys[i];
    return NULL;
}

/* One field: empty when not recorded; numbers in the key's format. */
static void csv_field(FILE *f, const struct ct_rec_key *k, const struct ct_epoch_record *e)
{
    double v = ct_rec_number(k, e, &ct_epoch_schema);
    int64_t i;
    switch (k->type) {
    case CT_REC_CHARS:
        fputc(',', f);
        csv_text(f, (const char *)e + k->offset); /* quoted if a malformed file put a comma there */
        break;
    case CT_REC_BOOL: fprintf(f, ",%s", v != 0 ? "true" : "false"); break;
    case CT_REC_INT:
    case CT_REC_INT64:
        fputc(',', f);
        if (ct_rec_integer(k, e, &i))
            fprintf(f, "%lld", (long long)i);
        break;
    case CT_REC_DOUBLE: csv_num(f, v, "%.*g", k->prec); break;
    default: csv_num(f, v, "%.*f", k->prec); break; /* fixed, a rank array's max or mean */
    }
}

/* The columns are the metrics keys with a csv number, in that order (an
 * array's column is its ranks' mean, "<key>_mean"). */
int ct_report_write_csv(FILE *f, const struct ct_report_run *runs, size_t n)
{
    if (!f || (n && !runs))
        return ct_error_set(CT_EINVAL, "report: no runs");
    fputs("run", f);
    const struct ct_rec_key *k;
    for (int c = 1; (k = csv_column(c)) != NULL; c++)
        fprintf(f, ",%s%s", k->name, k->type == CT_REC_RANKS ? "_mean" : "");
    fputc('\n', f);
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < runs[i].n_epochs; j++) {
            csv_text(f, runs[i].dir);
            for (int c = 1; (k = csv_column(c)) != NULL; c++)
                csv_field(f, k, &runs[i].epochs[j]);
            fputc('\n', f);
        }
    return ferror(f) ? ct_error_set(CT_EIO, "report: write failed") : 0;
}

/* ================================================================ the command */

int ct_report(const char *const *dirs, int n_dirs, enum ct_report_format format, const char *path,
              FILE *out)
{
    if (n_dirs < 1 || (int)format < 0 || format >= CT_REPORT_FORMAT_COUNT)
        return ct_error_set(CT_EUSAGE, "report needs one or more run directories and a known format");
    char **names = NULL;
    int n = 0, rc = 0;
    for (int i = 0; i < n_dirs && rc == 0; i++)
        rc = ct_rundir_expand(dirs[i], &names, &n);
    struct ct_report_run *runs = rc == 0 ? calloc((size_t)n, sizeof *runs) : NULL;
    if (rc == 0 && !runs)
        rc = ct_error_set(CT_ENOMEM, "report: out of memory");
    int loaded = 0;
    for (; rc == 0 && loaded < n; loaded++)
        if ((rc = ct_report_run_load(names[loaded], &runs[loaded])) < 0)
            break;
    if (rc == 0) {
        const int to_out = !path || strcmp(path, "-") == 0;
        struct ct_replace rep = {0};
        FILE *f = out;
        if (!to_out && (rc = ct_replace_open(&rep, path)) == 0)
            f = rep.f;
        if (rc == 0)
            rc = format == CT_REPORT_HTML ? ct_report_write_html(f, runs, (size_t)n, NULL)
                                          : ct_report_write_csv(f, runs, (size_t)n);
        if (!to_out && rc == 0)
            rc = ct_replace_commit(&rep);
        else if (!to_out && rep.f)
            ct_replace_abort(&rep);
        if (rc < 0 && !to_out)
            rc = ct_error_wrap(rc, "%s", path);
        else if (rc == 0 && !to_out)
            fprintf(out, "%s: %s report of %d run%s\n", path, ct_report_format_names[format], n,
                    n == 1 ? "" : "s");
    }
    for (int i = 0; i < loaded && runs; i++)
        ct_report_run_free(&runs[i]);
    free(runs);
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return rc;
}

