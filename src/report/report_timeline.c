/* The report's timeline chart (report-impl.h): one traced step of
 * trace.json (report_trace.c reads it) drawn per rank on one time axis, as
 * inline SVG, and the page's section around it: a caption saying which step
 * and how well the clocks agree, and each rank's totals per phase.
 *
 * Each rank is a <g class="rank" data-rank="R"> of lanes: main (the step as
 * a grey band; its phases; below, thinner, what nests in them: modules,
 * checkpoint phases), one lane per collective in flight ("comm K": the
 * allreduce a backward hook started, which is the overlap to see) and the
 * loader thread's batches. Each span is a <rect class="span" data-name=...>
 * with its times in a tooltip; a span narrower than a pixel is drawn one
 * pixel wide, so that nothing traced vanishes.
 *
 * Deliberately not here: reading the file, interaction (no script: the
 * tooltips are SVG titles), more than one step (Perfetto shows them all).
 */
#include "report/report-impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/log.h"
#include "core/path.h"
#include "report/svg.h"

#define WIDTH 1132
#define PX0 84.0 /* the lanes' names left of it */
#define PX1 (WIDTH - 16.0)
#define ROW_PHASE 14  /* main's first row: the phases */
#define ROW_NESTED 8  /* main's rows below it */
#define ROW_LANE 10   /* a comm or loader row */
#define MAIN_ROWS 3   /* deeper nesting shares the last row */
#define MAX_COMM_LANES 8 /* comm lanes beyond share the last */
#define RANK_HEAD 18
#define LEGEND_ROW 16

/* The colour of each kind of span: fixed, so that pages compare; the phases
 * in the colours of the report's phase split. A NULL name is any name. */
struct kind {
    const char *cat, *name, *label, *color;
};

static const struct kind kinds[] = {
    {"step", "step", "step", "#e4e4e4"},
    {"phase", "data_wait", "data wait", "#e6a817"},
    {"phase", "forward", "forward", "#1f77b4"},
    {"phase", "backward", "backward", "#9467bd"},
    {"phase", "sync_wait", "sync wait (exposed)", "#d62728"},
    {"phase", "optimizer", "optimizer", "#2ca02c"},
    {"phase", "allgather", "all-gather (sharded)", "#8c564b"},
    {"module", NULL, "module", "#9ecae1"},
    {"comm", "allreduce", "allreduce", "#ff7f0e"},
    {"comm", "reduce_scatter", "reduce-scatter", "#e377c2"},
    {"comm", "allgather", "all-gather (comm)", "#bcbd22"},
    {"loader", NULL, "loader batch", "#8c8c8c"},
    {"eval", NULL, "eval", "#17becf"},
    {"checkpoint", "checkpoint", "checkpoint", "#393b79"},
    {"checkpoint", NULL, "checkpoint phase", "#8184d6"},
    {"clock", NULL, "clock barrier", "#c7c7c7"},
    {NULL, NULL, "other", "#b5b5b5"},
};
#define N_KINDS (sizeof kinds / sizeof *kinds)

static size_t kind_of(const struct ct__tl_span *s)
{
    size_t k = 0;
    while (kinds[k].cat && !(strcmp(kinds[k].cat, s->cat) == 0 && (!kinds[k].name || strcmp(kinds[k].name, s->name) == 0)))
        k++;
    return k;
}

/* ================================================================ layout */

struct lane {
    int tid, rows;
    double y, h;
};

struct rank_box {
    double y, h;              /* the rank's label row and its lanes */
    size_t first, n;          /* its spans */
    struct lane lanes[2 + MAX_COMM_LANES];
    int n_lanes;
};

/* The lane of a tid (comm lanes beyond the last drawn share it). */
static int lane_slot(const struct rank_box *b, int tid)
{
    if (tid >= 2 + MAX_COMM_LANES)
        tid = 1 + MAX_COMM_LANES;
    for (int l = 0; l < b->n_lanes; l++)
        if (b->lanes[l].tid == tid)
            return l;
    return -1;
}

/* Rank k's lanes: main, each comm lane used, the loader; rows by nesting. */
static double layout_rank(const struct ct__timeline *t, size_t k, size_t *at, double y, struct rank_box *b)
{
    memset(b, 0, sizeof *b);
    b->y = y;
    b->first = *at;
    while (*at < t->n_spans && t->spans[*at].rank == t->ranks[k].rank)
        (*at)++;
    b->n = *at - b->first;
    int depth[2 + MAX_COMM_LANES] = {0}, used[2 + MAX_COMM_LANES] = {1, 0};
    for (size_t i = b->first; i < *at; i++) {
        int tid = t->spans[i].tid < 2 + MAX_COMM_LANES ? t->spans[i].tid : 1 + MAX_COMM_LANES;
        used[tid] = 1;
        depth[tid] = t->spans[i].depth > depth[tid] ? t->spans[i].depth : depth[tid];
    }
    y += RANK_HEAD;
    for (int pass = 0; pass < 3; pass++) /* main, comm, loader */
        for (int tid = 0; tid < 2 + MAX_COMM_LANES; tid++) {
            if (!used[tid] || (pass == 0) != (tid == 0) || (pass == 2) != (tid == 1))
                continue;
            struct lane *l = &b->lanes[b->n_lanes++];
            l->tid = tid;
            l->y = y;
            if (tid == 0) {
                l->rows = depth[0] < 1 ? 1 : depth[0] > MAIN_ROWS ? MAIN_ROWS : depth[0];
                l->h = ROW_PHASE + (l->rows - 1) * (ROW_NESTED + 1);
            } else {
                l->rows = depth[tid] >= 1 ? 2 : 1;
                l->h = l->rows * ROW_LANE + (l->rows - 1);
            }
            y += l->h + 3;
        }
    b->h = y - b->y;
    return y + 6;
}

/* The row of a span in its lane: y and height. */
static void span_row(const struct lane *l, int depth, double *y, double *h)
{
    if (l->tid == 0 && depth == 0) { /* the step: behind all of main */
        *y = l->y - 1;
        *h = l->h + 2;
    } else if (l->tid == 0) {
        int row = (depth < l->rows ? depth : l->rows) - 1;
        *y = row == 0 ? l->y : l->y + ROW_PHASE + 1 + (row - 1) * (ROW_NESTED + 1);
        *h = row == 0 ? ROW_PHASE : ROW_NESTED;
    } else {
        int row = depth < l->rows ? depth : l->rows - 1;
        *y = l->y + row * (ROW_LANE + 1);
        *h = ROW_LANE;
    }
}

/* ================================================================ drawing */

struct axis {
    struct ct_svg_ticks ticks;
    double ms0, ms1, px_per_ms;
};

static void lane_name(int tid, char *buf, size_t cap)
{
    if (tid == 0)
        snprintf(buf, cap, "main");
    else if (tid == 1)
        snprintf(buf, cap, "loader");
    else
        snprintf(buf, cap, "comm %d", tid - 2);
}

static void write_span(FILE *f, const struct ct__tl_span *s, const struct lane *l, const struct axis *a)
{
    const double ms = s->ts / 1000, end = (s->ts + s->dur) / 1000;
    const double x0 = PX0 + (fmax(ms, a->ms0) - a->ms0) * a->px_per_ms;
    const double x1 = PX0 + (fmin(end, a->ms1) - a->ms0) * a->px_per_ms;
    double y, h;
    span_row(l, s->depth, &y, &h);
    char lane[32];
    lane_name(s->tid, lane, sizeof lane);
    fprintf(f, "<rect class=\"span\" data-lane=\"%s\" data-name=\"", lane);
    ct_svg_escape(f, s->name);
    fprintf(f, "\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"%s><title>", x0, y,
            fmax(1.0, x1 - x0), h, kinds[kind_of(s)].color,
            s->tid == 0 && s->depth == 0 ? " stroke=\"#bdbdbd\"" : " stroke=\"#fff\" stroke-width=\"0.4\"");
    ct_svg_escape(f, s->name);
    fprintf(f, " (%s, ", lane);
    ct_svg_escape(f, s->cat);
    fprintf(f, "): %.3f ms, %.3f to %.3f ms", s->dur / 1000, ms, end);
    if (s->bucket >= 0)
        fprintf(f, ", bucket %lld", (long long)s->bucket);
    if (s->bytes >= 0)
        fprintf(f, ", %.2f MiB", (double)s->bytes / 1048576.0);
    fputs("</title></rect>", f);
}

static void write_rank(FILE *f, const struct ct__timeline *t, size_t k, const struct rank_box *b,
                       const struct axis *a)
{
    const struct ct__tl_rank *r = &t->ranks[k];
    fprintf(f, "<g class=\"rank\" data-rank=\"%d\"><text x=\"8\" y=\"%.1f\" font-weight=\"bold\">", r->rank,
            b->y + 13);
    ct_svg_escape(f, r->label);
    fprintf(f, "</text><text x=\"%.1f\" y=\"%.1f\" fill=\"#555\">step %.3f ms</text>\n",
            8 + 7.0 * (double)strlen(r->label) + 12, b->y + 13, r->dur / 1000);
    for (int l = 0; l < b->n_lanes; l++) {
        char name[32];
        lane_name(b->lanes[l].tid, name, sizeof name);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" font-size=\"10\" fill=\"#555\">%s</text>",
                PX0 - 6, b->lanes[l].y + 9, name);
    }
    for (size_t i = b->first; i < b->first + b->n; i++) {
        int l = lane_slot(b, t->spans[i].tid);
        if (l >= 0)
            write_span(f, &t->spans[i], &b->lanes[l], a);
    }
    fputs("\n</g>\n", f);
}

/* The kinds drawn, each once, as coloured boxes; returns the rows used. */
static int write_legend(FILE *f, const struct ct__timeline *t, double top, int draw)
{
    int present[N_KINDS] = {0};
    for (size_t i = 0; i < t->n_spans; i++)
        present[kind_of(&t->spans[i])] = 1;
    double x = PX0, y = top;
    int rows = 1;
    if (draw)
        fputs("<g class=\"legend\">", f);
    for (size_t k = 0; k < N_KINDS; k++) {
        if (!present[k])
            continue;
        const double w = 42 + 6.4 * (double)strlen(kinds[k].label);
        if (x + w > PX1 && x > PX0) {
            x = PX0;
            y += LEGEND_ROW;
            rows++;
        }
        if (draw)
            fprintf(f, "<g><rect x=\"%.1f\" y=\"%.1f\" width=\"22\" height=\"9\" fill=\"%s\" stroke=\"#bdbdbd\" "
                       "stroke-width=\"0.5\"/><text x=\"%.1f\" y=\"%.1f\">%s</text></g>",
                    x, y - 8, kinds[k].color, x + 28, y, kinds[k].label);
        x += w;
    }
    if (draw)
        fputs("</g>\n", f);
    return rows;
}

static void write_axis(FILE *f, const struct axis *a, double top, double bottom)
{
    char num[64];
    fputs("<g class=\"axes\">", f);
    for (int i = 0; i < a->ticks.n; i++) {
        const double v = a->ticks.first + i * a->ticks.step, x = PX0 + (v - a->ms0) * a->px_per_ms;
        ct_svg_format_number(v, a->ticks.decimals, num, sizeof num);
        fprintf(f, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#e6e6e6\"/>"
                   "<text x=\"%.2f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>",
                x, top, x, bottom, x, bottom + 14, num);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>"
               "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">ms since the step&#39;s earliest start "
               "over the ranks</text></g>\n",
            PX0, bottom, PX1, bottom, (PX0 + PX1) / 2, bottom + 30);
}

int ct__timeline_svg_write(FILE *f, const struct ct__timeline *t)
{
    struct axis a;
    ct_svg_nice_ticks(0, t->span_us > 0 ? t->span_us / 1000 : 1, 9, &a.ticks); /* 0 <= hi: cannot fail */
    a.ms0 = a.ticks.first;
    a.ms1 = a.ticks.first + (a.ticks.n - 1) * a.ticks.step;
    a.px_per_ms = (PX1 - PX0) / (a.ms1 - a.ms0);
    struct rank_box *boxes = calloc(t->n_ranks ? t->n_ranks : 1, sizeof *boxes);
    if (!boxes)
        return ct_error_set(CT_ENOMEM, "timeline: out of memory");
    const double top = 50 + write_legend(f, t, 0, 0) * LEGEND_ROW + 4;
    double y = top;
    size_t at = 0;
    for (size_t k = 0; k < t->n_ranks; k++)
        y = layout_rank(t, k, &at, y, &boxes[k]);
    const int height = (int)ceil(y + 40);
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"timeline\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"11\" role=\"img\">"
               "<title>Timeline of step %lld per rank</title>\n<rect width=\"%d\" height=\"%d\" fill=\"#fff\"/>\n"
               "<text x=\"%d\" y=\"17\" text-anchor=\"middle\" font-size=\"13\" font-weight=\"bold\">Timeline "
               "of step %lld, per rank</text>\n<text x=\"%d\" y=\"33\" text-anchor=\"middle\" fill=\"#555\">",
            WIDTH, height, WIDTH, height, (long long)t->step, WIDTH, height, WIDTH / 2, (long long)t->step,
            WIDTH / 2);
    fprintf(f, "%s of %d ranks traced it; ", t->full ? "all" : "only", t->world);
    if (isfinite(t->bound_us))
        fprintf(f, "clocks aligned to rank 0 within &#177;%.1f &#181;s", t->bound_us);
    else
        fputs("clock alignment not recorded", f);
    fputs("</text>\n", f);
    write_legend(f, t, 50, 1);
    write_axis(f, &a, top - 4, y - 4);
    for (size_t k = 0; k < t->n_ranks; k++)
        write_rank(f, t, k, &boxes[k], &a);
    fputs("</svg>\n", f);
    free(boxes);
    return ferror(f) ? ct_error_set(CT_EIO, "timeline: write failed") : 0;
}

/* ================================================================ the section */

/* Which step, and what to trust of it. */
static void write_caption(FILE *f, const struct ct__timeline *t)
{
    fprintf(f, "<p class=\"meta\">Step %lld ", (long long)t->step);
    if (t->full && t->n_candidates > 1)
        fprintf(f, "(the middle one of the %zu steps traced on every rank, %lld to %lld)",
                t->n_candidates, (long long)t->first, (long long)t->last);
    else if (t->full)
        fputs("(the one step traced on every rank)", f);
    else
        fprintf(f, "(no step was traced on every rank: this one is on %d of %d)", t->on_ranks, t->world);
    fputs(" of trace.json, each rank&#39;s threads on one time axis: main (the step&#39;s phases, modules "
          "nested below), the collectives in flight (comm K) and the loader&#39;s batches; 0 ms is the "
          "earliest start of the step over the ranks. ", f);
    if (isfinite(t->bound_us)) {
        fprintf(f, "Clocks aligned to rank 0 within &plusmn;%.1f &micro;s (the largest residual bound", t->bound_us);
        if (t->rounds > 0)
            fprintf(f, ", best of %lld rounds", (long long)t->rounds);
        fputs(").", f);
    } else {
        fputs("The clocks&#39; alignment is not recorded.", f);
    }
    if (t->on_ranks > (int)t->n_ranks)
        fprintf(f, " The first %zu of the %d ranks are drawn.", t->n_ranks, t->on_ranks);
    if (t->dropped > 0)
        fprintf(f, " The tracer dropped %lld events (its size cap): parts of the step may be missing.",
                (long long)t->dropped);
    if (t->n_left_out > 0)
        fprintf(f, " %zu spans beyond the report&#39;s cap of %d are not drawn.", t->n_left_out, CT__TL_MAX_SPANS);
    fputs(" All steps: open trace.json in Perfetto (ui.perfetto.dev).</p>\n", f);
}

/* Milliseconds per phase of each rank (what nests in a phase is in it). */
static void write_totals(FILE *f, const struct ct__timeline *t)
{
    static const char *const cols[][2] = {{"phase", "data_wait"}, {"phase", "forward"}, {"phase", "backward"},
                                          {"phase", "sync_wait"}, {"phase", "optimizer"}, {"phase", "allgather"},
                                          {"eval", NULL}, {"checkpoint", "checkpoint"}, {"comm", NULL}};
    enum { N_COLS = sizeof cols / sizeof *cols };
    static const char *const heads[N_COLS] = {"data wait", "forward", "backward", "sync wait", "optimizer",
                                              "all-gather", "eval", "checkpoint", "comm lanes, summed"};
    double *ms = calloc(t->n_ranks * N_COLS + 1, sizeof *ms);
    int shown[N_COLS] = {1, 1, 1, 1, 1, 0, 0, 0, 1};
    if (!ms)
        return;
    for (size_t k = 0, i = 0; k < t->n_ranks; k++)
        for (; i < t->n_spans && t->spans[i].rank == t->ranks[k].rank; i++)
            for (int c = 0; c < N_COLS; c++) {
                const struct ct__tl_span *s = &t->spans[i];
                if (strcmp(s->cat, cols[c][0]) == 0 && (!cols[c][1] || strcmp(s->name, cols[c][1]) == 0) &&
                    (c == N_COLS - 1 || s->tid == 0)) {
                    ms[k * N_COLS + (size_t)c] += s->dur / 1000;
                    shown[c] = 1;
                }
            }
    fputs("<div class=\"wide\"><table class=\"timeline-totals\"><tr><th>rank</th><th>step (ms)</th>"
          "<th>starts at (ms)</th>", f);
    for (int c = 0; c < N_COLS; c++)
        if (shown[c])
            fprintf(f, "<th>%s (ms)</th>", heads[c]);
    fputs("<th>clock bound (&micro;s)</th></tr>\n", f);
    for (size_t k = 0; k < t->n_ranks; k++) {
        const struct ct__tl_rank *r = &t->ranks[k];
        fputs("<tr><td>", f);
        ct_svg_escape(f, r->label);
        fprintf(f, "</td><td class=\"num\">%.3f</td><td class=\"num\">%.3f</td>", r->dur / 1000, r->ts / 1000);
        for (int c = 0; c < N_COLS; c++)
            if (shown[c])
                fprintf(f, "<td class=\"num\">%.3f</td>", ms[k * N_COLS + (size_t)c]);
        if (isfinite(r->bound_us))
            fprintf(f, "<td class=\"num\">%.1f</td></tr>\n", r->bound_us);
        else
            fputs("<td class=\"num\">n/a</td></tr>\n", f);
    }
    fputs("</table></div>\n", f);
    free(ms);
}

int ct__report_timeline_section(FILE *f, const char *dir, const char *label, int *heading)
{
    char path[CT_PATH_MAX];
    struct ct__timeline t;
    int rc = ct_path_join(path, sizeof path, dir, "trace.json");
    if (rc == 0 && (rc = ct__timeline_load(path, &t)) == CT_ENOENT)
        return 0; /* no trace: no chart, nothing to say */
    if (!*heading) {
        fputs("<h2 id=\"timeline\">Timeline of one traced step</h2>\n", f);
        *heading = 1;
    }
    if (label) {
        fputs("<h3>", f);
        ct_svg_escape(f, label);
        fputs("</h3>\n", f);
    }
    if (rc < 0) {
        ct_log_warn("report: no timeline: %s", ct_error_message());
        fputs("<p class=\"note timeline-note\">No timeline: ", f);
        ct_svg_escape(f, ct_error_message());
        fputs("</p>\n", f);
        ct_error_clear();
        return 0;
    }
    write_caption(f, &t);
    fputs("<div class=\"grid\">\n", f);
    rc = ct__timeline_svg_write(f, &t);
    fputs("</div>\n", f);
    if (rc == 0)
        write_totals(f, &t);
    ct__timeline_free(&t);
    return rc;
}
