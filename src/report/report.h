/* The run report: one self-contained HTML page (inline SVG and CSS; no
 * script, nothing fetched) or a CSV of the metrics, made from the files of
 * one or more run directories (`ctrain-dist report RUN_DIR...`).
 *
 * The page holds: a summary of the final metrics (mean +- std over several
 * runs), training and test loss, test accuracy and throughput per epoch and
 * per step (steps.jsonl), every run overlaid with the mean +- std band of
 * the runs, each rank's phase split (data wait, forward/backward, exposed
 * communication, optimizer) as stacked bars, a timeline of one traced step
 * per rank (trace.json, written under log.trace; absent: no chart; malformed:
 * a note naming the file and the fault), the checkpoint timeline and
 * table (chain.jsonl), and the provenance: run.json, hosts, the config keys
 * that differ between the runs, config.ini and placement.txt.
 *
 *     struct ct_report_run runs[2];
 *     rc = ct_report_run_load("runs/x/seed-0", &runs[0]);   // ... and [1]
 *     rc = ct_report_write_html(f, runs, 2, NULL);
 *     ct_report_run_free(&runs[0]);
 *
 * or, the command in one call (expands seed-* directories, writes the file
 * atomically):
 *
 *     rc = ct_report(dirs, n, CT_REPORT_HTML, "report.html", stdout);
 *
 * Every file is read through the run-directory reader (run/runread.h). A
 * file that is missing (metrics.jsonl, run.json, config.ini: a run always
 * writes them), unreadable or malformed is an error naming the file and, for
 * .jsonl, the line. steps.jsonl, chain.jsonl and placement.txt may
 * be absent (no per-step log, no checkpoint yet). A .jsonl whose last line
 * lacks its newline (a write cut short by a kill) loses that line, with a
 * warning and a note in the report.
 *
 * Deliberately not here: drawing (report/svg.h), argument parsing (src/cli),
 * reading checkpoints (the provenance of run.json and chain.jsonl is what
 * the manifests hold, and `ctrain-dist audit verify` checks them).
 */
#ifndef CT_REPORT_REPORT_H
#define CT_REPORT_REPORT_H

#include <stddef.h>
#include <stdio.h>

#include "run/record.h"
#include "run/runread.h"

enum ct_report_format {
    CT_REPORT_HTML,
    CT_REPORT_CSV,
    CT_REPORT_FORMAT_COUNT
};

/* "html", "csv", then NULL. */
extern const char *const ct_report_format_names[];

/* Everything the report shows of one run directory: what the run reader
 * loads (run/runread.h: struct ct_run); the report's name for it stays,
 * for the C API and its callers. */
#define ct_report_run ct_run

/* Read all of dir's files into r (ct_run_open(dir, CT_RUN_ALL, r)). On failure r holds nothing (free is harmless)
 * and the message names the file (and line). */
int ct_report_run_load(const char *dir, struct ct_report_run *r);
void ct_report_run_free(struct ct_report_run *r);

/* The value of config key "section.key" in a loaded run; NULL when absent. */
const char *ct_report_run_config(const struct ct_report_run *r, const char *key);

struct ct_report_params {
    const char *title;     /* NULL: "ctrain-dist run report" */
    const char *generated; /* the time printed as the page's date; NULL: now (UTC) */
};

/* The page for runs[0..n) (n >= 1); p may be NULL. CT_EIO on a write error. */
int ct_report_write_html(FILE *f, const struct ct_report_run *runs, size_t n,
                         const struct ct_report_params *p);

/* One row per metrics.jsonl line of each run: run, epoch, step, partial,
 * train_loss, test_loss, test_acc, samples_per_s, epoch_s, eval_s, lr,
 * peak_rss_mib, pss_mib, world, the four phases' maximum over the ranks,
 * slowest_rank, param_sha256. A value not recorded is an empty field. */
int ct_report_write_csv(FILE *f, const struct ct_report_run *runs, size_t n);

/* The command: every directory expanded (ct_rundir_expand: a directory of
 * seed-* runs stands for them), loaded, and written to `path` atomically
 * (a temporary file renamed over it), or to `out` when path is NULL or "-".
 * Prints "PATH: report of N runs" to out when writing a file. */
int ct_report(const char *const *dirs, int n_dirs, enum ct_report_format format, const char *path,
              FILE *out);

#endif
