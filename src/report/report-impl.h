/* Internals of the report shared by its files: the numbers drawn
 * (report_data.c) and the page (report_html.c). Not installed. */
#ifndef CT_REPORT_REPORT_IMPL_H
#define CT_REPORT_REPORT_IMPL_H

#include <stddef.h>

#include "report/report.h"

/* A metric of an epoch, by its metrics.jsonl key (run/record_keys.c): NaN
 * when not recorded. "optim_state_mib" is optim_state_bytes in MiB. */
double ct__report_metric(const struct ct_epoch_record *e, const char *key);
/* An epoch stopped part-way and finished after a resume has two lines; the
 * per-epoch curves show the last of each run of lines with one epoch. */
int ct__report_epoch_shown(const struct ct_report_run *r, size_t k);
size_t ct__report_epochs_shown(const struct ct_report_run *r);
/* The last finite value of a metric over the shown epochs; NaN when none. */
double ct__report_final_metric(const struct ct_report_run *r, const char *key);

/* One run's points of a curve. */
struct ct__curve {
    double *x, *y;
    size_t n;
};

enum ct__curve_kind {
    C_EPOCH,      /* x = epoch, over the shown epochs */
    C_EPOCH_STEP, /* x = the epoch's last step */
    C_STEP_LOSS,  /* steps.jsonl */
    C_STEP_ACC,
    C_STEP_LR
};

void ct__report_curves_free(struct ct__curve *c, size_t n);
int ct__report_curve_alloc(struct ct__curve *c, size_t n);
/* Run r's curve of a kind (key: the metric of the per-epoch kinds). */
int ct__report_curve_of(const struct ct_report_run *r, enum ct__curve_kind kind, const char *key,
                        struct ct__curve *c);

/* Mean and mean +- std over the runs at each x that every run has (the x
 * values of each curve ascend, as epochs and steps do in the files). */
struct ct__aggregate {
    struct ct__curve mean;
    double *lo, *hi;
};

void ct__report_aggregate_free(struct ct__aggregate *a);
int ct__report_aggregate_of(const struct ct__curve *c, size_t n, struct ct__aggregate *a);

#endif
