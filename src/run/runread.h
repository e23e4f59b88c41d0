/* One reader of a run directory: run.json, metrics.jsonl, steps.jsonl,
 * chain.jsonl, config.ini (its text and "section.key" = value pairs) and
 * placement.txt, each loaded when the caller asks for it. Report, audit
 * verify and summary read a run through it, so a file is parsed one way
 * and its errors read the same everywhere.
 *
 *     struct ct_run run;
 *     if ((rc = ct_run_open("runs/x/seed-0", CT_RUN_ALL, &run)) < 0) return rc;
 *     ... run.epochs[run.n_epochs - 1].test_acc, ct_run_config_value(&run, "train.seed") ...
 *     ct_run_close(&run);
 *
 * Every error names the file (and, for .jsonl, the line). run.json,
 * metrics.jsonl and config.ini must be there when asked for (a run always
 * writes them); steps.jsonl, chain.jsonl and placement.txt may be absent
 * (no per-step log, no checkpoint yet). A .jsonl whose last line lacks its
 * newline (a write cut short by a kill) loses that line, with a warning
 * and a note in run.notes.
 *
 * Deliberately not here: the records' formats (run/record.h), validating
 * config.ini against the schema (src/config: ct_config_load_recorded).
 */
#ifndef CT_RUN_RUNREAD_H
#define CT_RUN_RUNREAD_H

#include <stddef.h>

#include "run/record.h"

/* What ct_run_open loads. */
enum {
    CT_RUN_JSON = 1 << 0,       /* run.json (required) */
    CT_RUN_METRICS = 1 << 1,    /* metrics.jsonl, every line (required) */
    CT_RUN_STEPS = 1 << 2,      /* steps.jsonl (may be absent) */
    CT_RUN_CHAIN = 1 << 3,      /* chain.jsonl (may be absent); each time must be UTC ISO 8601 */
    CT_RUN_CONFIG = 1 << 4,     /* config.ini (required) */
    CT_RUN_PLACEMENT = 1 << 5,  /* placement.txt (may be absent) */
    CT_RUN_ALL = (1 << 6) - 1,
    /* Instead of CT_RUN_METRICS: only the last line, as it is (newline or
     * not), into epochs[0]; an empty file is CT_EFORMAT "no epoch recorded". */
    CT_RUN_LAST_EPOCH = 1 << 6,
    /* Instead of CT_RUN_CHAIN: the file must be there (CT_ENOENT) and a torn
     * last line is an error, as audit verify wants. */
    CT_RUN_CHAIN_STRICT = 1 << 7,
};

struct ct_run {
    char *dir;                      /* as given */
    struct ct_run_record run;       /* run.json */
    struct ct_epoch_record *epochs; /* metrics.jsonl, file order */
    size_t n_epochs;
    struct ct_step_record *steps;   /* steps.jsonl; none when absent */
    size_t n_steps;
    struct ct_chain_entry *chain;   /* chain.jsonl; none when absent */
    size_t n_chain;
    char *config;                   /* config.ini, the text */
    char **cfg_keys, **cfg_values;  /* its "section.key" = value pairs, file order */
    size_t n_cfg;
    char *placement;                /* placement.txt; NULL when absent */
    char notes[1024];               /* what was left out (torn last lines) */
};

/* Read what `what` names of dir into r. On failure r holds nothing (close
 * is harmless) and the message names the file (and line). */
int ct_run_open(const char *dir, unsigned what, struct ct_run *r);
void ct_run_close(struct ct_run *r);

/* The value of config key "section.key" (the last, if repeated); NULL when
 * absent or config.ini was not loaded. */
const char *ct_run_config_value(const struct ct_run *r, const char *key);

/* "2026-12-03T08:40:00Z" (a chain entry's time) as seconds since 1970; -1
 * when it is not that. */
double ct_run_chain_time(const char *s);

/* Mean and sample standard deviation (n - 1) of the finite values of
 * v[0..n); the count of those is returned. Values that are not numbers (a
 * test_loss never evaluated: null in the file) are left out rather than
 * turning the mean into NaN. No finite value: mean NaN; fewer than two:
 * std NaN. Report and summary both use it, so they agree. */
size_t ct_run_mean_std(const double *v, size_t n, double *mean, double *std);

#endif
