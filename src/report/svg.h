/* Plots as inline SVG, for the run report (report/report.h): line and marker
 * plots with shaded bands, and stacked bar charts, written as text to a
 * FILE * (a file, or a buffer from open_memstream in the tests).
 *
 * A plot is plain data: axes labels, series (x, y arrays) and bands (x, lo,
 * hi arrays); the writer picks the ranges, "nice" ticks (1, 2 or 5 times a
 * power of ten), the legend and the layout. Non-finite values are gaps: a
 * line breaks there and no marker is drawn. Every text that reaches the SVG
 * (titles, names, tooltips) is escaped for HTML and XML.
 *
 *     const double x[] = {1, 2, 3}, y[] = {0.9, 0.5, 0.4};
 *     struct ct_svg_series s = {.name = "train", .color = "#1f77b4",
 *                               .style = CT_SVG_LINE_MARKERS, .n = 3, .x = x, .y = y};
 *     struct ct_svg_plot p = {.title = "loss", .xlabel = "epoch", .ylabel = "loss",
 *                             .series = &s, .n_series = 1};
 *     if ((rc = ct_svg_plot_write(f, &p)) < 0) return rc;
 *
 * Each series is a <g class="series" data-series="NAME" data-points="N">
 * (N: its finite points), each band a <g class="band">, so that a test can
 * find them in the page.
 *
 * Deliberately not here: log scales, dates on axes, interaction (the report
 * needs no JavaScript), reading any file.
 */
#ifndef CT_REPORT_SVG_H
#define CT_REPORT_SVG_H

#include <stddef.h>
#include <stdio.h>

/* Ticks covering [lo, hi]: first, first + step, ..., first + (n-1)*step,
 * with first <= lo and the last >= hi; `decimals` is how many digits after
 * the point tell them apart. */
struct ct_svg_ticks {
    double first, step;
    int n;
    int decimals;
};

/* About `target` ticks (>= 2) at 1, 2 or 5 times a power of ten. lo == hi
 * is widened around the value; lo > hi or non-finite bounds are CT_EINVAL. */
int ct_svg_nice_ticks(double lo, double hi, int target, struct ct_svg_ticks *t);

/* v with that many decimals ("0.25"); never "-0"; %g beyond 1e7 or when more
 * than 6 decimals would be needed. */
void ct_svg_format_number(double v, int decimals, char *buf, size_t cap);

/* s (NUL-terminated, NULL prints nothing) with & < > " ' escaped: safe in
 * HTML and XML text and in quoted attributes. */
void ct_svg_escape(FILE *f, const char *s);

enum ct_svg_style {
    CT_SVG_LINE,         /* a solid line */
    CT_SVG_LINE_MARKERS, /* a solid line and a dot per point */
    CT_SVG_DASHED,       /* a dashed line */
    CT_SVG_DASHED_MARKERS,
    CT_SVG_MARKERS,      /* dots only */
    CT_SVG_STYLE_COUNT
};

struct ct_svg_series {
    const char *name;    /* legend and data-series; NULL: not in the legend */
    const char *color;   /* CSS colour ("#1f77b4"); written escaped */
    enum ct_svg_style style;
    size_t n;
    const double *x, *y; /* n each */
    const char *const *tips; /* optional, n: a tooltip per point (markers) */
};

/* A shaded area between lo and hi (e.g. mean +- std). */
struct ct_svg_band {
    const char *name;
    const char *color;
    size_t n;
    const double *x, *lo, *hi;
};

struct ct_svg_plot {
    const char *title, *xlabel, *ylabel;
    int width, height; /* pixels; 0: 560 x 320 */
    const struct ct_svg_series *series;
    size_t n_series;
    const struct ct_svg_band *bands; /* drawn below the series */
    size_t n_bands;
    int y_from_zero;   /* the y range includes 0 */
    int x_integer;     /* x ticks at whole numbers only (epochs, steps) */
};

/* The plot as one <svg> element. CT_EINVAL for a series or band whose
 * arrays are NULL while n > 0, or a style outside the enum; CT_EIO when f
 * reports a write error. A plot without finite points draws its axes and
 * says "no data". */
int ct_svg_plot_write(FILE *f, const struct ct_svg_plot *p);

/* Bars of stacked segments: one bar per group (a rank), one segment per
 * part (a phase), values[group * n_segments + segment] >= 0 (non-finite and
 * negative values count as 0). */
struct ct_svg_bars {
    const char *title, *ylabel;
    int width, height; /* 0: 560 x 320 */
    size_t n_groups;
    const char *const *groups;   /* bar labels */
    size_t n_segments;
    const char *const *segments; /* legend names */
    const char *const *colors;   /* one per segment */
    const double *values;
};

/* The chart as one <svg> element; each bar is a <g class="bar"
 * data-group="NAME" data-total="T">. Errors as ct_svg_plot_write. */
int ct_svg_bars_write(FILE *f, const struct ct_svg_bars *b);

#endif
