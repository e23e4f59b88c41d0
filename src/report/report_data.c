/* The numbers the report draws (see report-impl.h): metrics by key, the
 * epochs shown, each run's curves and their mean +- std over the runs. */
#include "report/report-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "run/runread.h"

/* ================================================================ numbers */

/* A metric of an epoch, by its metrics.jsonl key (run/record_keys.c): NaN
 * when not recorded. "optim_state_mib" is optim_state_bytes in MiB. */
double ct__report_metric(const struct ct_epoch_record *e, const char *key)
{
    if (strcmp(key, "optim_state_mib") == 0)
        return ct__report_metric(e, "optim_state_bytes") / 1048576.0;
    const struct ct_rec_key *k = ct_rec_find(&ct_epoch_schema, key);
    return k ? ct_rec_number(k, e, &ct_epoch_schema) : NAN;
}

/* An epoch stopped part-way and finished after a resume has two lines; the
 * per-epoch curves show the last of each run of lines with one epoch. */
int ct__report_epoch_shown(const struct ct_report_run *r, size_t k)
{
    return k + 1 >= r->n_epochs || r->epochs[k + 1].epoch != r->epochs[k].epoch;
}

size_t ct__report_epochs_shown(const struct ct_report_run *r)
{
    size_t n = 0;
    for (size_t k = 0; k < r->n_epochs; k++)
        n += ct__report_epoch_shown(r, k);
    return n;
}

/* The last finite value of a metric over the shown epochs; NaN when none. */
double ct__report_final_metric(const struct ct_report_run *r, const char *m)
{
    for (size_t k = r->n_epochs; k-- > 0;)
        if (ct__report_epoch_shown(r, k) && isfinite(ct__report_metric(&r->epochs[k], m)))
            return ct__report_metric(&r->epochs[k], m);
    return NAN;
}

void ct__report_curves_free(struct ct__curve *c, size_t n)
{
    for (size_t i = 0; c && i < n; i++) {
        free(c[i].x);
        free(c[i].y);
    }
    free(c);
}

int ct__report_curve_alloc(struct ct__curve *c, size_t n)
{
    c->n = 0;
    c->x = malloc((n ? n : 1) * sizeof *c->x);
    c->y = malloc((n ? n : 1) * sizeof *c->y);
    return c->x && c->y ? 0 : ct_error_set(CT_ENOMEM, "report: out of memory");
}

int ct__report_curve_of(const struct ct_report_run *r, enum ct__curve_kind kind, const char *m, struct ct__curve *c)
{
    const int per_step = kind == C_STEP_LOSS || kind == C_STEP_ACC || kind == C_STEP_LR;
    size_t cap = per_step ? r->n_steps : r->n_epochs;
    int rc = ct__report_curve_alloc(c, cap);
    if (rc < 0)
        return rc;
    if (per_step) {
        for (size_t k = 0; k < r->n_steps; k++) {
            c->x[c->n] = (double)r->steps[k].step;
            c->y[c->n++] = kind == C_STEP_LOSS  ? r->steps[k].loss
                           : kind == C_STEP_ACC ? r->steps[k].acc
                                                : r->steps[k].lr;
        }
        return 0;
    }
    for (size_t k = 0; k < r->n_epochs; k++) {
        if (!ct__report_epoch_shown(r, k) || !isfinite(ct__report_metric(&r->epochs[k], m)))
            continue;
        c->x[c->n] = kind == C_EPOCH ? (double)r->epochs[k].epoch : (double)r->epochs[k].step;
        c->y[c->n++] = ct__report_metric(&r->epochs[k], m);
    }
    return 0;
}

void ct__report_aggregate_free(struct ct__aggregate *a)
{
    free(a->mean.x);
    free(a->mean.y);
    free(a->lo);
    free(a->hi);
    memset(a, 0, sizeof *a);
}

int ct__report_aggregate_of(const struct ct__curve *c, size_t n, struct ct__aggregate *a)
{
    memset(a, 0, sizeof *a);
    size_t *pos = calloc(n, sizeof *pos);
    double *v = calloc(n, sizeof *v);
    int rc = pos && v ? ct__report_curve_alloc(&a->mean, c[0].n) : ct_error_set(CT_ENOMEM, "report: out of memory");
    if (rc == 0) {
        a->lo = malloc((c[0].n ? c[0].n : 1) * sizeof *a->lo);
        a->hi = malloc((c[0].n ? c[0].n : 1) * sizeof *a->hi);
        if (!a->lo || !a->hi)
            rc = ct_error_set(CT_ENOMEM, "report: out of memory");
    }
    for (size_t k = 0; rc == 0 && k < c[0].n; k++) {
        const double x = c[0].x[k];
        size_t have = 0;
        for (size_t j = 0; j < n; j++) {
            while (pos[j] < c[j].n && c[j].x[pos[j]] < x)
                pos[j]++;
            if (pos[j] < c[j].n && c[j].x[pos[j]] == x && isfinite(c[j].y[pos[j]]))
                v[have++] = c[j].y[pos[j]];
        }
        double mean, std;
        if (have != n || ct_run_mean_std(v, n, &mean, &std) != n)
            continue;
        a->mean.x[a->mean.n] = x;
        a->mean.y[a->mean.n] = mean;
        a->lo[a->mean.n] = mean - std;
        a->hi[a->mean.n++] = mean + std;
    }
    free(pos);
    free(v);
    if (rc < 0)
        ct__report_aggregate_free(a);
    return rc;
}

