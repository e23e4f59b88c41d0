/* Plots as inline SVG (see svg.h): ticks, escaping, line plots with bands,
 * stacked bars. Pure functions of their inputs; the only side effect is the
 * text written to the FILE *. */
#include "report/svg.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

#define DEFAULT_W 560
#define DEFAULT_H 320
#define LEGEND_ROW_H 16
/* Legend names longer than this show their tail ("...seed-1"): run
 * directories differ at their ends. */
#define LEGEND_MAX_CHARS 44

/* 1, 2, 5 or 10 times a power of ten near x (> 0): the nearest when
 * rounding, else the smallest not below x (after Heckbert, "Nice numbers
 * for graph labels", Graphics Gems, 1990; the step is rounded from the
 * range itself, not from a rounded-up range, so that 0..58 gets steps of 10
 * rather than 20). */
static double nice_number(double x, int round_it)
{
    double e = floor(log10(x));
    double f = x / pow(10.0, e), nf;
    if (round_it)
        nf = f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10;
    else
        nf = f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10;
    return nf * pow(10.0, e);
}

int ct_svg_nice_ticks(double lo, double hi, int target, struct ct_svg_ticks *t)
{
    if (!t || !isfinite(lo) || !isfinite(hi) || lo > hi)
        return ct_error_set(CT_EINVAL, "svg ticks: bad range [%g, %g]", lo, hi);
    if (target < 2)
        target = 2;
    /* Ranges no metric reaches, clamped so that hi - lo, the step and its
     * logarithm stay finite (a crafted file may hold 1e308 or 5e-324). */
    lo = lo < -1e300 ? -1e300 : lo;
    hi = hi > 1e300 ? 1e300 : hi;
    if (lo == hi) {
        double d = lo == 0 ? 1.0 : fabs(lo) * 0.1 > 1e-300 ? fabs(lo) * 0.1 : 1e-300;
        lo -= d;
        hi += d;
    }
    double step = nice_number((hi - lo) / (target - 1), 1);
    /* The epsilon keeps 0.3 / 0.1 = 2.9999999999999996 from adding a tick. */
    double first = floor(lo / step + 1e-9) * step;
    double last = ceil(hi / step - 1e-9) * step;
    t->first = first;
    t->step = step;
    t->n = (int)llround((last - first) / step) + 1;
    if (t->n < 2)
        t->n = 2;
    int d = (int)-floor(log10(step) + 1e-9);
    t->decimals = d > 0 ? d : 0;
    return 0;
}

void ct_svg_format_number(double v, int decimals, char *buf, size_t cap)
{
    if (cap == 0)
        return;
    if (!isfinite(v)) {
        snprintf(buf, cap, "%s", isnan(v) ? "nan" : v > 0 ? "inf" : "-inf");
        return;
    }
    if (fabs(v) >= 1e7 || decimals > 6)
        snprintf(buf, cap, "%.4g", v);
    else
        snprintf(buf, cap, "%.*f", decimals < 0 ? 0 : decimals, v);
    if (buf[0] == '-' && strspn(buf + 1, "0.") == strlen(buf + 1))
        memmove(buf, buf + 1, strlen(buf));
}

void ct_svg_escape(FILE *f, const char *s)
{
    for (; s && *s; s++) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&#39;", f); break;
        default: fputc(*s, f);
        }
    }
}

/* A legend name, its tail when long (cut at a UTF-8 character boundary). */
static void escape_legend(FILE *f, const char *s)
{
    size_t len = s ? strlen(s) : 0;
    if (len <= LEGEND_MAX_CHARS) {
        ct_svg_escape(f, s);
        return;
    }
    const char *p = s + len - (LEGEND_MAX_CHARS - 3);
    while ((*p & 0xC0) == 0x80)
        p++;
    fputs("...", f);
    ct_svg_escape(f, p);
}

/* ------------------------------------------------------------ the frame */

/* Where data values land in pixels. */
struct frame {
    int w, h;
    double px0, px1, py0, py1; /* the plot area */
    struct ct_svg_ticks xt, yt;
    double x0, x1, y0, y1;     /* the data range the area shows */
};

static double sx(const struct frame *fr, double x)
{
    return fr->px0 + (x - fr->x0) / (fr->x1 - fr->x0) * (fr->px1 - fr->px0);
}

static double sy(const struct frame *fr, double y)
{
    return fr->py1 - (y - fr->y0) / (fr->y1 - fr->y0) * (fr->py1 - fr->py0);
}

/* One legend entry. */
struct legend_item {
    const char *name, *color;
    int kind; /* 0 line, 1 dashed line, 2 marker, 3 shaded area, 4 solid area (bars) */
};

/* Pixels a legend entry takes (a rough width of 11 px sans-serif). */
static double legend_width(const char *name)
{
    size_t n = strlen(name);
    if (n > LEGEND_MAX_CHARS)
        n = LEGEND_MAX_CHARS;
    return 30.0 + 6.2 * (double)n + 14.0;
}

static int legend_rows(const struct legend_item *it, size_t n, int w)
{
    if (n == 0)
        return 0;
    int rows = 1;
    double x = 60;
    for (size_t i = 0; i < n; i++) {
        double iw = legend_width(it[i].name);
        if (x + iw > w - 10 && x > 60) {
            rows++;
            x = 60;
        }
        x += iw;
    }
    return rows;
}

static void write_legend(FILE *f, const struct legend_item *it, size_t n, int w, double top)
{
    double x = 60, y = top;
    fputs("<g class=\"legend\">", f);
    for (size_t i = 0; i < n; i++) {
        double iw = legend_width(it[i].name);
        if (x + iw > w - 10 && x > 60) {
            x = 60;
            y += LEGEND_ROW_H;
        }
        fputs("<g>", f);
        if (it[i].kind >= 3) {
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"9\" fill=\"", x, y - 8);
            ct_svg_escape(f, it[i].color);
            fputs(it[i].kind == 3 ? "\" fill-opacity=\"0.25\"/>" : "\"/>", f);
        } else if (it[i].kind == 2) {
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"", x + 11, y - 4);
            ct_svg_escape(f, it[i].color);
            fputs("\"/>", f);
        } else {
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke-width=\"2\"%s stroke=\"",
                    x, y - 4, x + 22, y - 4, it[i].kind == 1 ? " stroke-dasharray=\"5 3\"" : "");
            ct_svg_escape(f, it[i].color);
            fputs("\"/>", f);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">", x + 28, y);
        escape_legend(f, it[i].name);
        fputs("</text></g>", f);
        x += iw;
    }
    fputs("</g>\n", f);
}

static void write_open(FILE *f, const struct frame *fr, const char *cls, const char *title)
{
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"%s\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\" role=\"img\">"
               "<title>", cls, fr->w, fr->h, fr->w, fr->h);
    ct_svg_escape(f, title);
    fprintf(f, "</title>\n<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n", fr->w, fr->h);
    fprintf(f, "<text x=\"%d\" y=\"17\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">",
            fr->w / 2);
    ct_svg_escape(f, title);
    fputs("</text>\n", f);
}

/* Grid, tick labels, the frame and the axis labels. */
static void write_axes(FILE *f, const struct frame *fr, const char *xlabel, const char *ylabel,
                       int x_ticks)
{
    char num[64];
    fputs("<g class=\"axes\" stroke-width=\"1\">", f);
    for (int i = 0; i < fr->yt.n; i++) {
        double v = fr->yt.first + i * fr->yt.step, y = sy(fr, v);
        ct_svg_format_number(v, fr->yt.decimals, num, sizeof num);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>",
                fr->px0, y, fr->px1, y, fr->px0 - 5, y + 4, num);
    }
    for (int i = 0; x_ticks && i < fr->xt.n; i++) {
        double v = fr->xt.first + i * fr->xt.step, x = sx(fr, v);
        ct_svg_format_number(v, fr->xt.decimals, num, sizeof num);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>"
                   "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>",
                x, fr->py0, x, fr->py1, x, fr->py1 + 15, num);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>",
            fr->px0, fr->py0, fr->px1 - fr->px0, fr->py1 - fr->py0);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">", (fr->px0 + fr->px1) / 2, fr->h - 6);
    ct_svg_escape(f, xlabel);
    double ym = (fr->py0 + fr->py1) / 2;
    fprintf(f, "</text><text x=\"13\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 13 %.1f)\">",
            ym, ym);
    ct_svg_escape(f, ylabel);
    fputs("</text></g>\n", f);
}

/* The range of the finite values, widened by v (min/max start at +-inf). */
static void widen(double v, double *lo, double *hi)
{
    if (!isfinite(v))
        return;
    if (v < *lo)
        *lo = v;
    if (v > *hi)
        *hi = v;
}

/* Ticks for an axis; whole-number steps when asked. */
static void axis_ticks(double lo, double hi, int target, int integer, struct ct_svg_ticks *t,
                       double *a0, double *a1)
{
    ct_svg_nice_ticks(lo, hi, target, t); /* lo <= hi, both finite: cannot fail */
    if (integer && t->step < 1) {
        double first = floor(lo), last = ceil(hi);
        if (last <= first)
            last = first + 1;
        t->first = first;
        t->step = 1;
        t->n = (int)(last - first) + 1;
        t->decimals = 0;
    }
    *a0 = t->first;
    *a1 = t->first + (t->n - 1) * t->step;
}

/* ------------------------------------------------------------ plots */

static int check_plot(const struct ct_svg_plot *p)
{
    if (!p || (p->n_series && !p->series) || (p->n_bands && !p->bands))
        return ct_error_set(CT_EINVAL, "svg plot: no plot, or series/bands NULL with a count");
    for (size_t i = 0; i < p->n_series; i++) {
        const struct ct_svg_series *s = &p->series[i];
        if (s->n && (!s->x || !s->y))
            return ct_error_set(CT_EINVAL, "svg plot '%s': series %zu has %zu points and no arrays",
                                p->title ? p->title : "", i, s->n);
        if ((int)s->style < 0 || s->style >= CT_SVG_STYLE_COUNT)
            return ct_error_set(CT_EINVAL, "svg plot: series %zu: unknown style %d", i, (int)s->style);
    }
    for (size_t i = 0; i < p->n_bands; i++) {
        const struct ct_svg_band *b = &p->bands[i];
        if (b->n && (!b->x || !b->lo || !b->hi))
            return ct_error_set(CT_EINVAL, "svg plot '%s': band %zu has %zu points and no arrays",
                                p->title ? p->title : "", i, b->n);
    }
    return 0;
}

static void write_band(FILE *f, const struct frame *fr, const struct ct_svg_band *b)
{
    fputs("<g class=\"band\" data-series=\"", f);
    ct_svg_escape(f, b->name);
    fputs("\">", f);
    /* One closed area per run of points where x, lo and hi are all finite. */
    for (size_t i = 0; i < b->n;) {
        size_t j = i;
        while (j < b->n && isfinite(b->x[j]) && isfinite(b->lo[j]) && isfinite(b->hi[j]))
            j++;
        if (j > i) {
            fputs("<path d=\"", f);
            for (size_t k = i; k < j; k++)
                fprintf(f, "%c%.1f %.1f", k == i ? 'M' : 'L', sx(fr, b->x[k]), sy(fr, b->hi[k]));
            for (size_t k = j; k-- > i;)
                fprintf(f, "L%.1f %.1f", sx(fr, b->x[k]), sy(fr, b->lo[k]));
            fputs("Z\" stroke=\"none\" fill-opacity=\"0.22\" fill=\"", f);
            ct_svg_escape(f, b->color);
            fputs("\"/>", f);
        }
        i = j < b->n ? j + 1 : j;
    }
    fputs("</g>\n", f);
}

static void write_series(FILE *f, const struct frame *fr, const struct ct_svg_series *s)
{
    size_t finite = 0;
    for (size_t i = 0; i < s->n; i++)
        finite += isfinite(s->x[i]) && isfinite(s->y[i]);
    fputs("<g class=\"series\" data-series=\"", f);
    ct_svg_escape(f, s->name);
    fprintf(f, "\" data-points=\"%zu\">", finite);
    const int line = s->style != CT_SVG_MARKERS;
    const int dashed = s->style == CT_SVG_DASHED || s->style == CT_SVG_DASHED_MARKERS;
    const int markers = s->style == CT_SVG_MARKERS || s->style == CT_SVG_LINE_MARKERS ||
                        s->style == CT_SVG_DASHED_MARKERS;
    if (line && finite > 1) {
        fputs("<path d=\"", f);
        int pen_down = 0;
        for (size_t i = 0; i < s->n; i++) {
            if (!isfinite(s->x[i]) || !isfinite(s->y[i])) {
                pen_down = 0; /* a gap */
                continue;
            }
            fprintf(f, "%c%.1f %.1f", pen_down ? 'L' : 'M', sx(fr, s->x[i]), sy(fr, s->y[i]));
            pen_down = 1;
        }
        fprintf(f, "\" fill=\"none\" stroke-width=\"1.8\" stroke-linejoin=\"round\"%s stroke=\"",
                dashed ? " stroke-dasharray=\"5 3\"" : "");
        ct_svg_escape(f, s->color);
        fputs("\"/>", f);
    }
    /* A single point of a line would be invisible: it gets its dot. */
    for (size_t i = 0; (markers || finite == 1) && i < s->n; i++) {
        if (!isfinite(s->x[i]) || !isfinite(s->y[i]))
            continue;
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.8\" fill=\"", sx(fr, s->x[i]), sy(fr, s->y[i]));
        ct_svg_escape(f, s->color);
        fputs("\"><title>", f);
        if (s->tips && s->tips[i]) {
            ct_svg_escape(f, s->tips[i]);
        } else {
            ct_svg_escape(f, s->name);
            fprintf(f, ": %.6g, %.6g", s->x[i], s->y[i]);
        }
        fputs("</title></circle>", f);
    }
    fputs("</g>\n", f);
}

int ct_svg_plot_write(FILE *f, const struct ct_svg_plot *p)
{
    int rc = check_plot(p);
    if (rc < 0)
        return rc;
    struct frame fr = {.w = p->width > 0 ? p->width : DEFAULT_W, .h = p->height > 0 ? p->height : DEFAULT_H};
    size_t n_items = 0;
    struct legend_item *items = calloc(p->n_series + p->n_bands + 1, sizeof *items);
    if (!items)
        return ct_error_set(CT_ENOMEM, "svg plot: out of memory");
    for (size_t i = 0; i < p->n_bands; i++)
        if (p->bands[i].name)
            items[n_items++] = (struct legend_item){p->bands[i].name, p->bands[i].color, 3};
    for (size_t i = 0; i < p->n_series; i++) {
        const struct ct_svg_series *s = &p->series[i];
        if (s->name)
            items[n_items++] = (struct legend_item){
                s->name, s->color,
                s->style == CT_SVG_MARKERS ? 2 : s->style == CT_SVG_DASHED || s->style == CT_SVG_DASHED_MARKERS};
    }
    const int rows = legend_rows(items, n_items, fr.w);
    fr.px0 = 62;
    fr.px1 = fr.w - 14;
    fr.py0 = 28 + rows * LEGEND_ROW_H + (rows ? 4 : 0);
    fr.py1 = fr.h - 36;

    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (size_t i = 0; i < p->n_series; i++)
        for (size_t k = 0; k < p->series[i].n; k++)
            if (isfinite(p->series[i].x[k]) && isfinite(p->series[i].y[k])) {
                widen(p->series[i].x[k], &xlo, &xhi);
                widen(p->series[i].y[k], &ylo, &yhi);
            }
    for (size_t i = 0; i < p->n_bands; i++)
        for (size_t k = 0; k < p->bands[i].n; k++)
            if (isfinite(p->bands[i].x[k]) && isfinite(p->bands[i].lo[k]) && isfinite(p->bands[i].hi[k])) {
                widen(p->bands[i].x[k], &xlo, &xhi);
                widen(p->bands[i].lo[k], &ylo, &yhi);
                widen(p->bands[i].hi[k], &ylo, &yhi);
            }
    const int empty = !(xlo <= xhi);
    if (empty) {
        xlo = ylo = 0;
        xhi = yhi = 1;
    }
    if (p->y_from_zero) {
        widen(0.0, &ylo, &yhi);
    }
    axis_ticks(xlo, xhi, 7, p->x_integer, &fr.xt, &fr.x0, &fr.x1);
    axis_ticks(ylo, yhi, 6, 0, &fr.yt, &fr.y0, &fr.y1);

    write_open(f, &fr, "plot", p->title);
    write_legend(f, items, n_items, fr.w, 28 + LEGEND_ROW_H - 4);
    free(items);
    write_axes(f, &fr, p->xlabel, p->ylabel, 1);
    if (empty)
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n",
                (fr.px0 + fr.px1) / 2, (fr.py0 + fr.py1) / 2);
    for (size_t i = 0; i < p->n_bands; i++)
        write_band(f, &fr, &p->bands[i]);
    for (size_t i = 0; i < p->n_series; i++)
        write_series(f, &fr, &p->series[i]);
    fputs("</svg>\n", f);
    return ferror(f) ? ct_error_set(CT_EIO, "svg plot '%s': write failed", p->title ? p->title : "") : 0;
}

/* ------------------------------------------------------------ bars */

static double bar_value(const struct ct_svg_bars *b, size_t g, size_t s)
{
    double v = b->values[g * b->n_segments + s];
    return isfinite(v) && v > 0 ? v : 0.0;
}

int ct_svg_bars_write(FILE *f, const struct ct_svg_bars *b)
{
    if (!b || (b->n_groups && (!b->groups || !b->values)) || (b->n_segments && (!b->segments || !b->colors)))
        return ct_error_set(CT_EINVAL, "svg bars: NULL arrays with a count");
    struct frame fr = {.w = b->width > 0 ? b->width : DEFAULT_W, .h = b->height > 0 ? b->height : DEFAULT_H};
    struct legend_item *items = calloc(b->n_segments + 1, sizeof *items);
    if (!items)
        return ct_error_set(CT_ENOMEM, "svg bars: out of memory");
    for (size_t s = 0; s < b->n_segments; s++)
        items[s] = (struct legend_item){b->segments[s], b->colors[s], 4};
    const int rows = legend_rows(items, b->n_segments, fr.w);
    fr.px0 = 62;
    fr.px1 = fr.w - 14;
    fr.py0 = 28 + rows * LEGEND_ROW_H + (rows ? 4 : 0);
    fr.py1 = fr.h - 36;
    double top = 0;
    for (size_t g = 0; g < b->n_groups; g++) {
        double t = 0;
        for (size_t s = 0; s < b->n_segments; s++)
            t += bar_value(b, g, s);
        if (t > top)
            top = t;
    }
    axis_ticks(0, top > 0 ? top : 1, 6, 0, &fr.yt, &fr.y0, &fr.y1);
    fr.xt.n = 0;
    fr.x0 = 0;
    fr.x1 = 1;
    write_open(f, &fr, "bars", b->title);
    write_legend(f, items, b->n_segments, fr.w, 28 + LEGEND_ROW_H - 4);
    free(items);
    write_axes(f, &fr, "", b->ylabel, 0);
    const double slot = (fr.px1 - fr.px0) / (double)(b->n_groups ? b->n_groups : 1);
    const double bw = fmin(64.0, slot * 0.6);
    char num[64];
    for (size_t g = 0; g < b->n_groups; g++) {
        double total = 0;
        for (size_t s = 0; s < b->n_segments; s++)
            total += bar_value(b, g, s);
        double x = fr.px0 + slot * ((double)g + 0.5) - bw / 2, y = fr.y0;
        fputs("<g class=\"bar\" data-group=\"", f);
        ct_svg_escape(f, b->groups[g]);
        fprintf(f, "\" data-total=\"%.6g\">", total);
        for (size_t s = 0; s < b->n_segments; s++) {
            double v = bar_value(b, g, s);
            double ya = sy(&fr, y), yb = sy(&fr, y + v);
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"", x, yb, bw, ya - yb);
            ct_svg_escape(f, b->colors[s]);
            fputs("\"><title>", f);
            ct_svg_escape(f, b->groups[g]);
            fputs(", ", f);
            ct_svg_escape(f, b->segments[s]);
            fprintf(f, ": %.4g</title></rect>", v);
            y += v;
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", x + bw / 2, fr.py1 + 15);
        ct_svg_escape(f, b->groups[g]);
        ct_svg_format_number(total, total >= 100 ? 0 : total >= 1 ? 2 : 3, num, sizeof num);
        fprintf(f, "</text><text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%s</text></g>\n",
                x + bw / 2, sy(&fr, total) - 4, num);
    }
    fputs("</svg>\n", f);
    return ferror(f) ? ct_error_set(CT_EIO, "svg bars '%s': write failed", b->title ? b->title : "") : 0;
}
