/* Internals of the report shared by its files: the numbers drawn
 * (report_data.c) and the page (report_html.c). Not installed. */
#ifndef CT_REPORT_REPORT_IMPL_H
#define CT_REPORT_REPORT_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "report/report.h"
#include "run/json.h"

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


/* ---------------------------------------------------------------- timeline
 * One traced step of RUN_DIR/trace.json (the Chrome trace log.trace writes:
 * docs/performance.md "Timeline trace"), per rank, as the page's timeline
 * chart draws it: report_trace.c reads the file, report_timeline.c draws.
 *
 *     struct ct__timeline t;
 *     rc = ct__timeline_load("runs/x/trace.json", &t); // CT_ENOENT: no trace
 *     if (rc == 0) rc = ct__timeline_svg_write(f, &t);
 *     ct__timeline_free(&t);
 */
#define CT__TL_MAX_RANKS 32      /* ranks drawn; the others are counted in the caption */
#define CT__TL_MAX_SPANS 16384   /* spans of the step kept: modules and the rest half each */
#define CT__TL_MAX_BYTES ((size_t)1 << 30) /* a larger trace.json is refused (mapped, not read) */

/* One complete event of the step drawn. */
struct ct__tl_span {
    double ts, dur;        /* us; ts from the chart's 0 (the step's earliest start over the ranks) */
    int rank, tid;         /* tid 0 main, 1 loader, 2 + K comm lane K */
    int depth;             /* nesting on its tid: the step 0, its phases 1, modules 2, ... */
    int64_t bucket, bytes; /* a collective's args; -1 when absent */
    char cat[16], name[48];
};

struct ct__tl_rank {
    int rank;
    char label[128];  /* "rank R (HOST)" */
    double ts, dur;   /* its step on the chart's axis (us) */
    double bound_us;  /* its clock's residual bound; NaN when not recorded */
};

struct ct__timeline {
    int64_t step;           /* the step drawn */
    int full;               /* it was traced on every rank */
    size_t n_candidates;    /* steps traced on as many ranks as it was */
    int64_t first, last;    /* the first and last of those */
    int world;              /* ranks of the run (otherData), else the ranks seen */
    int on_ranks;           /* ranks that traced the step drawn */
    double span_us;         /* the chart's range: 0 .. the latest end of the step */
    double bound_us;        /* the largest bound_us; NaN when not recorded */
    int64_t rounds;         /* of the clock alignment; -1 when not recorded */
    int64_t dropped;        /* events the tracer dropped (its cap); 0 when not recorded */
    size_t n_ranks;         /* ranks drawn */
    struct ct__tl_rank ranks[CT__TL_MAX_RANKS];
    struct ct__tl_span *spans; /* by rank, tid, start, longest first */
    size_t n_spans;
    size_t n_left_out;      /* spans of the step beyond CT__TL_MAX_SPANS */
};

/* The top level of a trace's text (report_trace_scan.c): where the
 * traceEvents array starts, and otherData parsed (root NULL when absent).
 * Errors: "offset N: expected ..., found ..." or "no \"traceEvents\" array". */
struct ct__trace_top {
    size_t events_at; /* its '[' */
    int have_events;
    struct ct_json_doc other;
};
int ct__trace_scan_top(const char *text, size_t len, struct ct__trace_top *t);
/* fn on each element of the traceEvents array at `at`, each parsed on its
 * own (at most 1 MiB); an error is prefixed "traceEvents[I] at offset N". */
typedef int (*ct__trace_event_fn)(void *ctx, const struct ct_json_value *ev);
int ct__trace_each_event(const char *text, size_t len, size_t at, ct__trace_event_fn fn, void *ctx);

/* A trace's text; CT_EFORMAT names what breaks the contract (the event's
 * index and offset), without the file's name. */
int ct__timeline_parse(const char *text, size_t len, struct ct__timeline *t);
/* A trace.json: CT_ENOENT when absent; every error names the file. */
int ct__timeline_load(const char *path, struct ct__timeline *t);
void ct__timeline_free(struct ct__timeline *t);
/* The chart, one <svg class="timeline">. CT_EIO on a write error. */
int ct__timeline_svg_write(FILE *f, const struct ct__timeline *t);
/* The page's part for run directory dir (label: its name on the page, NULL
 * with one run): the heading once (*heading set), a caption, the chart and
 * the totals per rank; a note naming the file and the fault in their place
 * when trace.json is malformed; nothing when it is absent. */
int ct__report_timeline_section(FILE *f, const char *dir, const char *label, int *heading);

#endif
