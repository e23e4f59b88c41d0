/* The report's HTML page (see report.h): one self-contained page, sections
 * in page order: summary, per-epoch curves, per-step curves, phase split,
 * timeline of a traced step (report_timeline.c), checkpoints, provenance.
 * The numbers come from report_data.c. */
#define _GNU_SOURCE
#include "report/report-impl.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/error.h"
#include "core/path.h"
#include "core/version.h"
#include "report/svg.h"
#include "run/runread.h"

/* Run colours (one per run, in order) and the mean's. */
static const char *const palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
                                      "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};
#define N_PALETTE (sizeof palette / sizeof *palette)
#define MEAN_COLOR "#222222"

static const char *run_color(size_t i) { return palette[i % N_PALETTE]; }

/* ================================================================ HTML pieces */

static void esc(FILE *f, const char *s) { ct_svg_escape(f, s); }

/* A number for a table cell; "n/a" when not recorded. */
static void cell_num(FILE *f, double v, int decimals)
{
    if (isfinite(v))
        fprintf(f, "<td class=\"num\">%.*f</td>", decimals, v);
    else
        fputs("<td class=\"num\">n/a</td>", f);
}

static void cell_text(FILE *f, const char *s)
{
    fputs("<td>", f);
    esc(f, s ? s : "n/a");
    fputs("</td>", f);
}

/* What the page calls run i: with several runs, its directory without the
 * parent they share ("seed-0", "seed-1"; the page's head names them in
 * full), else the directory as given. */
static const char *run_label(const struct ct_report_run *runs, size_t n, size_t i)
{
    if (n < 2)
        return runs[i].dir;
    size_t common = strlen(runs[0].dir);
    for (size_t j = 1; j < n; j++) {
        size_t k = 0;
        while (k < common && runs[j].dir[k] == runs[0].dir[k])
            k++;
        common = k;
    }
    size_t cut = 0;
    for (size_t k = 0; k < common; k++)
        if (runs[0].dir[k] == '/')
            cut = k + 1;
    for (size_t j = 0; j < n; j++)
        if (!runs[j].dir[cut])
            return runs[i].dir; /* one of them is the parent itself */
    return runs[i].dir + cut;
}

/* Every run's curve of a kind overlaid; with several runs, also their mean
 * (dashed) and the mean +- std band. */
struct overlay {
    const char *title, *xlabel, *ylabel;
    enum ct__curve_kind kind;
    const char *metric; /* a metrics.jsonl key; NULL for steps.jsonl's curves */
    enum ct_svg_style style;
    int y_from_zero;
};

static int write_overlay(FILE *f, const struct ct_report_run *runs, size_t n, const struct overlay *o)
{
    struct ct__curve *c = calloc(n, sizeof *c);
    struct ct_svg_series *s = calloc(n + 1, sizeof *s);
    struct ct__aggregate ag = {0};
    int rc = c && s ? 0 : ct_error_set(CT_ENOMEM, "report: out of memory");
    for (size_t i = 0; rc == 0 && i < n; i++)
        if ((rc = ct__report_curve_of(&runs[i], o->kind, o->metric, &c[i])) == 0)
            s[i] = (struct ct_svg_series){.name = run_label(runs, n, i), .color = run_color(i),
                                          .style = o->style, .n = c[i].n, .x = c[i].x, .y = c[i].y};
    if (rc == 0 && n > 1)
        rc = ct__report_aggregate_of(c, n, &ag);
    char mean_name[64], band_name[64];
    snprintf(mean_name, sizeof mean_name, "mean of %zu runs", n);
    snprintf(band_name, sizeof band_name, "mean \xc2\xb1 std"); /* UTF-8 plus-minus */
    struct ct_svg_band band = {.name = band_name, .color = MEAN_COLOR, .n = ag.mean.n, .x = ag.mean.x,
                               .lo = ag.lo, .hi = ag.hi};
    size_t n_series = n;
    if (rc == 0 && n > 1 && ag.mean.n > 0)
        s[n_series++] = (struct ct_svg_series){.name = mean_name, .color = MEAN_COLOR,
                                               .style = CT_SVG_DASHED, .n = ag.mean.n,
                                               .x = ag.mean.x, .y = ag.mean.y};
    if (rc == 0) {
        struct ct_svg_plot p = {.title = o->title, .xlabel = o->xlabel, .ylabel = o->ylabel,
                                .series = s, .n_series = n_series, .bands = &band,
                                .n_bands = n > 1 && ag.mean.n > 0, .y_from_zero = o->y_from_zero,
                                .x_integer = 1};
        rc = ct_svg_plot_write(f, &p);
    }
    ct__report_aggregate_free(&ag);
    ct__report_curves_free(c, n);
    free(s);
    return rc;
}

static const char css[] =
    "body{font-family:sans-serif;margin:20px 24px;color:#222;max-width:1180px}"
    "h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:22px 0 8px;border-bottom:1px solid #ddd}"
    "h3{font-size:14px;margin:14px 0 6px}table.provenance th{white-space:nowrap}"
    ".meta{color:#555;font-size:13px;margin:0 0 8px}"
    ".grid{display:flex;flex-wrap:wrap;gap:10px}.grid svg{border:1px solid #e4e4e4}"
    "table{border-collapse:collapse;font-size:12.5px;margin:4px 0}"
    "th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}"
    "th{background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"
    ".wide{overflow-x:auto}pre{background:#f7f7f7;padding:8px;font-size:12px;overflow-x:auto;margin:4px 0}"
    "code{font-size:12px}.note{color:#a40000}details{margin:4px 0}summary{cursor:pointer}";

static void write_head(FILE *f, const struct ct_report_run *runs, size_t n, const struct ct_report_params *p)
{
    const char *title = p && p->title ? p->title : "ctrain-dist run report";
    char now[64];
    const char *generated = p ? p->generated : NULL;
    if (!generated) {
        time_t t = time(NULL);
        struct tm tm;
        gmtime_r(&t, &tm);
        strftime(now, sizeof now, "%Y-%m-%d %H:%M:%S UTC", &tm);
        generated = now;
    }
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          "<meta name=\"generator\" content=\"ctrain-dist report\"><title>", f);
    esc(f, title);
    fprintf(f, "</title><style>%s</style></head>\n<body>\n<h1>", css);
    esc(f, title);
    fprintf(f, "</h1>\n<p class=\"meta\">%zu run%s: ", n, n == 1 ? "" : "s");
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "%s<span style=\"color:%s\">&#9632;</span> <code>", i ? ", " : "", run_color(i));
        esc(f, runs[i].dir);
        fputs("</code>", f);
    }
    fputs(". Generated ", f);
    esc(f, generated);
    fputs(" by ctrain-dist " CT_VERSION ".</p>\n", f);
    for (size_t i = 0; i < n; i++)
        if (runs[i].notes[0]) {
            fputs("<p class=\"note\">", f);
            esc(f, runs[i].notes);
            fputs("</p>\n", f);
        }
}

/* Final metrics per run and their mean +- std. */
static int write_summary(FILE *f, const struct ct_report_run *runs, size_t n)
{
    double *fin = calloc(4 * n, sizeof *fin);
    if (!fin)
        return ct_error_set(CT_ENOMEM, "report: out of memory for the summary of %zu runs", n);
    fputs("<h2 id=\"summary\">Summary</h2>\n<div class=\"wide\"><table class=\"summary\"><tr><th>run</th>"
          "<th>seed</th><th>model</th><th>ranks</th><th>epochs</th><th>steps</th><th>train_loss</th>"
          "<th>test_loss</th><th>test_acc</th><th>samples/s (mean)</th><th>training time (s)</th></tr>\n", f);
    for (size_t i = 0; i < n; i++) {
        const struct ct_report_run *r = &runs[i];
        double sps = 0, train_s = 0;
        size_t k_sps = 0;
        for (size_t k = 0; k < r->n_epochs; k++) {
            train_s += isfinite(r->epochs[k].epoch_s) ? r->epochs[k].epoch_s : 0;
            if (ct__report_epoch_shown(r, k) && isfinite(r->epochs[k].samples_per_s)) {
                sps += r->epochs[k].samples_per_s;
                k_sps++;
            }
        }
        double v[4] = {ct__report_final_metric(r, "train_loss"), ct__report_final_metric(r, "test_loss"),
                       ct__report_final_metric(r, "test_acc"), k_sps ? sps / (double)k_sps : NAN};
        for (int m = 0; m < 4; m++)
            fin[(size_t)m * n + i] = v[m];
        fprintf(f, "<tr class=\"run\"><td><span style=\"color:%s\">&#9632;</span> ", run_color(i));
        esc(f, run_label(runs, n, i));
        fputs("</td>", f);
        cell_text(f, ct_report_run_config(r, "train.seed"));
        cell_text(f, ct_report_run_config(r, "model.name"));
        fprintf(f, "<td class=\"num\">%d</td><td class=\"num\">%zu</td><td class=\"num\">%lld</td>",
                r->run.world, ct__report_epochs_shown(r),
                r->n_epochs ? (long long)r->epochs[r->n_epochs - 1].step : 0LL);
        cell_num(f, v[0], 6);
        cell_num(f, v[1], 6);
        cell_num(f, v[2], 4);
        cell_num(f, v[3], 1);
        cell_num(f, train_s, 2);
        fputs("</tr>\n", f);
    }
    if (n > 1) {
        fprintf(f, "<tr class=\"mean\"><th colspan=\"6\">mean &plusmn; std over %zu runs</th>", n);
        const int dec[4] = {6, 6, 4, 1};
        for (int m = 0; m < 4; m++) {
            double mean, std;
            ct_run_mean_std(fin + (size_t)m * n, n, &mean, &std);
            if (isfinite(mean) && isfinite(std))
                fprintf(f, "<td class=\"num\">%.*f &plusmn; %.*f</td>", dec[m], mean, dec[m], std);
            else
                fputs("<td class=\"num\">n/a</td>", f);
        }
        fputs("<td></td></tr>\n", f);
    }
    free(fin);
    fputs("</table></div>\n", f);
    return 0;
}

static int write_curves(FILE *f, const struct ct_report_run *runs, size_t n)
{
    const struct overlay per_epoch[] = {
        {"Training loss per epoch", "epoch", "train_loss", C_EPOCH, "train_loss", CT_SVG_LINE_MARKERS, 0},
        {"Test loss per epoch", "epoch", "test_loss", C_EPOCH, "test_loss", CT_SVG_LINE_MARKERS, 0},
        {"Training accuracy per epoch (training mode: dropout on)", "epoch", "train_acc", C_EPOCH,
         "train_acc", CT_SVG_LINE_MARKERS, 0},
        {"Test accuracy per epoch", "epoch", "test_acc", C_EPOCH, "test_acc", CT_SVG_LINE_MARKERS, 0},
        {"Throughput per epoch", "epoch", "samples/s (training)", C_EPOCH, "samples_per_s",
         CT_SVG_LINE_MARKERS, 1},
    };
    const struct overlay per_step[] = {
        {"Training loss per step (steps.jsonl)", "step", "loss (mean since the previous point)",
         C_STEP_LOSS, NULL, CT_SVG_LINE, 0},
        {"Training accuracy per step (steps.jsonl)", "step", "acc (training mode, since the previous point)",
         C_STEP_ACC, NULL, CT_SVG_LINE, 0},
        {"Learning rate per step", "step", "lr", C_STEP_LR, NULL, CT_SVG_LINE, 1},
        {"Test loss by step", "step", "test_loss", C_EPOCH_STEP, "test_loss", CT_SVG_LINE_MARKERS, 0},
        {"Test accuracy by step", "step", "test_acc", C_EPOCH_STEP, "test_acc", CT_SVG_LINE_MARKERS, 0},
    };
    /* Language models (token data): their throughput in tokens and, for
     * byte vocabularies, the val loss in bits per byte. */
    const struct overlay per_epoch_tokens[] = {
        {"Throughput per epoch, tokens", "epoch", "tokens/s (training)", C_EPOCH, "tokens_per_s",
         CT_SVG_LINE_MARKERS, 1},
        {"Validation bits per byte per epoch", "epoch", "val_bpb", C_EPOCH, "val_bpb",
         CT_SVG_LINE_MARKERS, 0},
    };
    /* Runs that recorded it (nn/module.h, "FLOPs"; older runs did not). */
    const struct overlay per_epoch_mfu = {
        "Model FLOP utilization per epoch", "epoch", "mfu (matmul FLOPs/s / gemm peak)", C_EPOCH,
        "mfu", CT_SVG_LINE_MARKERS, 0};
    /* Runs that recorded it (dist.shard_optimizer divides it by N). */
    const struct overlay per_epoch_optim = {
        "Optimizer state per rank", "epoch", "MiB (max over ranks)", C_EPOCH, "optim_state_mib",
        CT_SVG_LINE_MARKERS, 0};
    int tokens = 0, mfu = 0, optim = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < runs[i].n_epochs; k++) {
            tokens |= runs[i].epochs[k].tokens_per_s > 0;
            mfu |= isfinite(runs[i].epochs[k].mfu);
            optim |= runs[i].epochs[k].optim_state_bytes >= 0;
        }
    int rc = 0;
    fputs("<h2 id=\"epochs\">Per epoch</h2>\n<div class=\"grid\">\n", f);
    for (size_t i = 0; rc == 0 && i < sizeof per_epoch / sizeof *per_epoch; i++)
        rc = write_overlay(f, runs, n, &per_epoch[i]);
    for (size_t i = 0; rc == 0 && tokens && i < sizeof per_epoch_tokens / sizeof *per_epoch_tokens; i++)
        rc = write_overlay(f, runs, n, &per_epoch_tokens[i]);
    if (rc == 0 && mfu)
        rc = write_overlay(f, runs, n, &per_epoch_mfu);
    if (rc == 0 && optim)
        rc = write_overlay(f, runs, n, &per_epoch_optim);
    fputs("</div>\n<h2 id=\"steps\">Per step</h2>\n", f);
    size_t with_steps = 0;
    for (size_t i = 0; i < n; i++)
        with_steps += runs[i].n_steps > 0;
    if (with_steps < n)
        fprintf(f, "<p class=\"meta\">%zu of %zu runs have no per-step log (steps.jsonl, written every "
                   "log.every_steps steps).</p>\n", n - with_steps, n);
    fputs("<div class=\"grid\">\n", f);
    for (size_t i = 0; rc == 0 && i < sizeof per_step / sizeof *per_step; i++)
        rc = write_overlay(f, runs, n, &per_step[i]);
    fputs("</div>\n", f);
    return rc;
}

/* Each rank's seconds per phase, summed over the run's metrics lines (a
 * resumed epoch's two lines hold two parts of its work). */
static int write_phases(FILE *f, const struct ct_report_run *runs, size_t n)
{
    static const char *const names[CT_RUN_PHASE_COUNT] = {"data wait", "forward/backward",
                                                          "exposed comm", "optimizer"};
    static const char *const colors[CT_RUN_PHASE_COUNT] = {"#e6a817", "#1f77b4", "#d62728", "#2ca02c"};
    int rc = 0;
    fputs("<h2 id=\"phases\">Phase split per rank</h2>\n<p class=\"meta\">Seconds per phase of the "
          "training steps, summed over the epochs. Exposed comm is the gradient synchronisation not "
          "hidden behind backward: time a rank waits for the others.</p>\n<div class=\"grid\">\n", f);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct ct_report_run *r = &runs[i];
        int world = 0;
        for (size_t k = 0; k < r->n_epochs; k++)
            if (ct_epoch_record_phase(&r->epochs[k], 0) && r->epochs[k].world > world)
                world = r->epochs[k].world;
        char title[CT_PATH_MAX + 64];
        snprintf(title, sizeof title, "Phase split: %s", run_label(runs, n, i));
        if (world == 0) {
            struct ct_svg_plot p = {.title = title, .xlabel = "rank", .ylabel = "s"};
            rc = ct_svg_plot_write(f, &p); /* "no data": older runs did not record phases */
            continue;
        }
        double *v = calloc((size_t)world * CT_RUN_PHASE_COUNT, sizeof *v);
        char (*labels)[24] = calloc((size_t)world, sizeof *labels);
        const char **groups = calloc((size_t)world, sizeof *groups);
        if (!v || !labels || !groups)
            rc = ct_error_set(CT_ENOMEM, "report: out of memory");
        for (size_t k = 0; rc == 0 && k < r->n_epochs; k++)
            for (int ph = 0; ph < CT_RUN_PHASE_COUNT; ph++) {
                const double *a = ct_epoch_record_phase(&r->epochs[k], (enum ct_run_phase)ph);
                for (int rank = 0; a && rank < r->epochs[k].world; rank++)
                    if (isfinite(a[rank]))
                        v[(size_t)rank * CT_RUN_PHASE_COUNT + (size_t)ph] += a[rank];
            }
        for (int rank = 0; rc == 0 && rank < world; rank++) {
            snprintf(labels[rank], sizeof labels[rank], "rank %d", rank);
            groups[rank] = labels[rank];
        }
        if (rc == 0) {
            struct ct_svg_bars b = {.title = title, .ylabel = "seconds", .n_groups = (size_t)world,
                                    .groups = groups, .n_segments = CT_RUN_PHASE_COUNT,
                                    .segments = names, .colors = colors, .values = v};
            rc = ct_svg_bars_write(f, &b);
        }
        free(v);
        free(labels);
        free(groups);
    }
    fputs("</div>\n", f);
    return rc;
}

/* One traced step per rank, for each run with a trace.json (log.trace). */
static int write_step_timelines(FILE *f, const struct ct_report_run *runs, size_t n)
{
    int heading = 0, rc = 0;
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = ct__report_timeline_section(f, runs[i].dir, n > 1 ? run_label(runs, n, i) : NULL, &heading);
    return rc;
}

/* The first 12 hex digits, the whole digest in the tooltip. */
static void cell_digest(FILE *f, const char *hex)
{
    if (!hex || !hex[0]) {
        fputs("<td>none</td>", f);
        return;
    }
    fputs("<td><code title=\"", f);
    esc(f, hex);
    fprintf(f, "\">%.12s</code></td>", hex);
}

/* Step against wall time of every checkpoint (total of them over the
 * runs): a gap is a stop and resume, a flat stretch a slow checkpoint. */
static int write_timeline(FILE *f, const struct ct_report_run *runs, size_t n, size_t total)
{
    double span = 0;
    for (size_t i = 0; i < n; i++)
        if (runs[i].n_chain)
            span = fmax(span, ct_run_chain_time(runs[i].chain[runs[i].n_chain - 1].time) -
                                  ct_run_chain_time(runs[i].chain[0].time));
    const double unit = span > 3 * 3600 ? 3600 : span > 600 ? 60 : 1;
    const char *unit_name = unit == 3600 ? "hours" : unit == 60 ? "minutes" : "seconds";
    char xlabel[96];
    snprintf(xlabel, sizeof xlabel, "%s since the run's first checkpoint", unit_name);
    struct ct_svg_series *s = calloc(n, sizeof *s);
    double *xy = calloc(2 * total + 1, sizeof *xy);
    char **tips = calloc(total + 1, sizeof *tips);
    int rc = s && xy && tips ? 0 : ct_error_set(CT_ENOMEM, "report: out of memory");
    size_t at = 0;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const struct ct_report_run *r = &runs[i];
        s[i] = (struct ct_svg_series){.name = run_label(runs, n, i), .color = run_color(i),
                                      .style = CT_SVG_LINE_MARKERS, .n = r->n_chain, .x = xy + at,
                                      .y = xy + total + at, .tips = (const char *const *)tips + at};
        double t0 = r->n_chain ? ct_run_chain_time(r->chain[0].time) : 0;
        for (size_t k = 0; rc == 0 && k < r->n_chain; k++, at++) {
            xy[at] = (ct_run_chain_time(r->chain[k].time) - t0) / unit;
            xy[total + at] = (double)r->chain[k].step;
            size_t len = 64 + strlen(r->chain[k].ckpt) + strlen(r->chain[k].time) + 64;
            if (!(tips[at] = malloc(len)))
                rc = ct_error_set(CT_ENOMEM, "report: out of memory");
            else
                snprintf(tips[at], len, "%s: step %lld, epoch %lld, %s, digest %.16s", r->chain[k].ckpt,
                         (long long)r->chain[k].step, (long long)r->chain[k].epoch, r->chain[k].time,
                         r->chain[k].digest);
        }
    }
    if (rc == 0) {
        struct ct_svg_plot p = {.title = "Checkpoint timeline", .xlabel = xlabel, .ylabel = "step",
                                .width = 1132, .height = 260, .series = s, .n_series = n,
                                .y_from_zero = 1};
        fputs("<div class=\"grid\">\n", f);
        rc = ct_svg_plot_write(f, &p);
        fputs("</div>\n", f);
    }
    for (size_t i = 0; i < total && tips; i++)
        free(tips[i]);
    free(tips);
    free(xy);
    free(s);
    return rc;
}

/* One table per run: every chain entry. */
static void write_chain_tables(FILE *f, const struct ct_report_run *runs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const struct ct_report_run *r = &runs[i];
        fputs("<details", f);
        fputs(i == 0 ? " open><summary>" : "><summary>", f);
        esc(f, run_label(runs, n, i));
        fprintf(f, ": %zu checkpoint%s</summary><div class=\"wide\"><table class=\"chain\"><tr><th>checkpoint"
                   "</th><th>step</th><th>epoch</th><th>time (UTC)</th><th>digest</th><th>parent</th>"
                   "<th>ranks</th><th>hosts</th><th>code</th></tr>\n", r->n_chain, r->n_chain == 1 ? "" : "s");
        for (size_t k = 0; k < r->n_chain; k++) {
            const struct ct_chain_entry *e = &r->chain[k];
            fputs("<tr>", f);
            cell_text(f, e->ckpt);
            fprintf(f, "<td class=\"num\">%lld</td><td class=\"num\">%lld</td>", (long long)e->step,
                    (long long)e->epoch);
            cell_text(f, e->time);
            cell_digest(f, e->digest);
            cell_digest(f, e->parent);
            fprintf(f, "<td class=\"num\">%d</td>", e->world);
            cell_text(f, e->hosts);
            cell_text(f, e->code_version);
            fputs("</tr>\n", f);
        }
        fputs("</table></div></details>\n", f);
    }
}

static int write_checkpoints(FILE *f, const struct ct_report_run *runs, size_t n)
{
    fputs("<h2 id=\"checkpoints\">Checkpoints</h2>\n", f);
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += runs[i].n_chain;
    if (total == 0) {
        fputs("<p class=\"meta\">No checkpoint recorded (no chain.jsonl).</p>\n", f);
        return 0;
    }
    int rc = write_timeline(f, runs, n, total);
    if (rc == 0)
        write_chain_tables(f, runs, n);
    return rc;
}

/* The distinct hosts of a run's checkpoints, comma-separated, in order. */
static void run_hosts(const struct ct_report_run *r, char *out, size_t cap)
{
    out[0] = '\0';
    for (size_t k = 0; k < r->n_chain; k++) {
        const char *h = r->chain[k].hosts;
        if (!h[0])
            continue; /* strstr(p, "") would never advance */
        size_t l = strlen(out), hl = strlen(h);
        int seen = 0;
        for (const char *p = out; (p = strstr(p, h)) != NULL && !seen; p += hl)
            seen = (p == out || p[-1] == ' ') && (p[hl] == '\0' || p[hl] == ';');
        if (!seen && l + hl + 3 < cap)
            snprintf(out + l, cap - l, "%s%s", l ? "; " : "", h);
    }
}

/* A row of the provenance table: one cell per run. */
static void prov_row(FILE *f, const char *name, const char *const *cells, size_t n)
{
    fputs("<tr><th>", f);
    esc(f, name);
    fputs("</th>", f);
    for (size_t i = 0; i < n; i++)
        cell_text(f, cells[i]);
    fputs("</tr>\n", f);
}

/* The run.json extras of all runs, first seen first, each once. */
static int extra_keys(const struct ct_report_run *runs, size_t n, const char ***keys, size_t *nk)
{
    size_t cap = 0;
    for (size_t i = 0; i < n; i++)
        cap += runs[i].run.n_extra;
    *nk = 0;
    *keys = calloc(cap + 1, sizeof **keys);
    if (!*keys)
        return ct_error_set(CT_ENOMEM, "report: out of memory");
    for (size_t i = 0; i < n; i++)
        for (size_t e = 0; e < runs[i].run.n_extra; e++) {
            const char *k = runs[i].run.extra[e].key;
            size_t j = 0;
            while (j < *nk && strcmp((*keys)[j], k) != 0)
                j++;
            if (j == *nk)
                (*keys)[(*nk)++] = k;
        }
    return 0;
}

static const char *extra_value(const struct ct_run_record *r, const char *key)
{
    for (size_t e = 0; e < r->n_extra; e++)
        if (strcmp(r->extra[e].key, key) == 0)
            return r->extra[e].value;
    return NULL;
}

/* Config keys whose values differ between the runs (absent counts). */
static void write_config_diff(FILE *f, const struct ct_report_run *runs, size_t n)
{
    fputs("<h3>Config keys that differ between the runs</h3>\n", f);
    size_t shown = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < runs[i].n_cfg; k++) {
            const char *key = runs[i].cfg_keys[k];
            int first = 1, differ = 0;
            for (size_t j = 0; j < n && first; j++)
                first = !(j < i && ct_report_run_config(&runs[j], key)); /* listed with an earlier run */
            if (!first || ct_report_run_config(&runs[i], key) != runs[i].cfg_values[k])
                continue; /* a repeated key: its last value counts */
            for (size_t j = 0; j < n; j++) {
                const char *v = ct_report_run_config(&runs[j], key);
                differ |= !v || strcmp(v, runs[i].cfg_values[k]) != 0;
            }
            if (!differ)
                continue;
            if (shown++ == 0) {
                fputs("<div class=\"wide\"><table class=\"config-diff\"><tr><th>key</th>", f);
                for (size_t j = 0; j < n; j++) {
                    fputs("<th>", f);
                    esc(f, run_label(runs, n, j));
                    fputs("</th>", f);
                }
                fputs("</tr>\n", f);
            }
            fputs("<tr><th>", f);
            esc(f, key);
            fputs("</th>", f);
            for (size_t j = 0; j < n; j++)
                cell_text(f, ct_report_run_config(&runs[j], key));
            fputs("</tr>\n", f);
        }
    if (shown)
        fputs("</table></div>\n", f);
    else
        fputs("<p class=\"meta\">None: the runs share every key of config.ini.</p>\n", f);
}

static int write_provenance(FILE *f, const struct ct_report_run *runs, size_t n)
{
    const char **cells = calloc(n, sizeof *cells);
    char(*buf)[1100] = calloc(n * 6, sizeof *buf);
    const char **keys = NULL;
    size_t nk = 0;
    int rc = cells && buf ? extra_keys(runs, n, &keys, &nk) : ct_error_set(CT_ENOMEM, "report: out of memory");
    if (rc < 0) {
        free(cells);
        free(buf);
        return rc;
    }
    fputs("<h2 id=\"provenance\">Provenance</h2>\n<div class=\"wide\"><table class=\"provenance\"><tr><th>"
          "</th>", f);
    for (size_t i = 0; i < n; i++) {
        fputs("<th>", f);
        esc(f, run_label(runs, n, i));
        fputs("</th>", f);
    }
    fputs("</tr>\n", f);
#define ROW(name, expr)                        \
    do {                                       \
        for (size_t i = 0; i < n; i++) {       \
            const struct ct_report_run *r = &runs[i]; \
            (void)r;                           \
            cells[i] = (expr);                 \
        }                                      \
        prov_row(f, name, cells, n);           \
    } while (0)
#define NUMBER(slot, fmt, v) (snprintf(buf[i * 6 + (slot)], sizeof buf[0], fmt, v), buf[i * 6 + (slot)])
    ROW("code version", r->run.version);
    ROW("git", r->run.git);
    ROW("config file", r->run.config);
    ROW("model", ct_report_run_config(r, "model.name"));
    ROW("seed", ct_report_run_config(r, "train.seed"));
    ROW("ranks", NUMBER(0, "%d", r->run.world));
    ROW("BLAS threads per rank", NUMBER(1, "%d", r->run.blas_threads));
    ROW("parameters", NUMBER(2, "%lld", (long long)r->run.params));
    ROW("steps per epoch", NUMBER(3, "%lld", (long long)r->run.steps_per_epoch));
    ROW("total steps", NUMBER(4, "%lld", (long long)r->run.total_steps));
    ROW("host of rank 0", r->run.host0);
    for (size_t i = 0; i < n; i++)
        run_hosts(&runs[i], buf[i * 6 + 5], sizeof buf[0]);
    ROW("hosts (checkpoints)", buf[i * 6 + 5][0] ? buf[i * 6 + 5] : NULL);
    ROW("gemm", r->run.gemm);
    ROW("OpenBLAS", r->run.blas);
    for (size_t k = 0; k < nk; k++)
        ROW(keys[k], extra_value(&r->run, keys[k]));
    ROW("final parameters (sha256)", r->n_epochs ? r->epochs[r->n_epochs - 1].param_sha256 : NULL);
    ROW("config digest (last checkpoint)", r->n_chain ? r->chain[r->n_chain - 1].config_digest : NULL);
#undef ROW
#undef NUMBER
    fputs("</table></div>\n", f);
    free(keys);
    free(cells);
    free(buf);
    if (n > 1)
        write_config_diff(f, runs, n);
    for (size_t i = 0; i < n; i++) {
        fputs(i == 0 ? "<details open><summary>config.ini of " : "<details><summary>config.ini of ", f);
        esc(f, run_label(runs, n, i));
        fputs("</summary><pre class=\"config\">", f);
        esc(f, runs[i].config);
        fputs("</pre></details>\n<details><summary>placement.txt of ", f);
        esc(f, run_label(runs, n, i));
        fputs("</summary><pre class=\"placement\">", f);
        esc(f, runs[i].placement && runs[i].placement[0] ? runs[i].placement : "(not recorded)");
        fputs("</pre></details>\n", f);
    }
    return 0;
}

int ct_report_write_html(FILE *f, const struct ct_report_run *runs, size_t n,
                         const struct ct_report_params *p)
{
    if (!f || !runs || n == 0)
        return ct_error_set(CT_EINVAL, "report: no runs");
    write_head(f, runs, n, p);
    int rc = write_summary(f, runs, n);
    if (rc == 0)
        rc = write_curves(f, runs, n);
    if (rc == 0)
        rc = write_phases(f, runs, n);
    if (rc == 0)
        rc = write_step_timelines(f, runs, n);
    if (rc == 0)
        rc = write_checkpoints(f, runs, n);
    if (rc == 0)
        rc = write_provenance(f, runs, n);
    fputs("</body></html>\n", f);
    if (rc == 0 && ferror(f))
        rc = ct_error_set(CT_EIO, "report: write failed");
    return rc;
}

