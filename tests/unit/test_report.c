/* Unit tests for the run report: the SVG helpers (src/report/svg: nice ticks,
 * number formatting, escaping, plots with gaps and bands, stacked bars) and
 * the report writer (src/report/report) on synthetic run directories written
 * with the run's own record writers: the page's numbers, curves and tables,
 * several seeds with their mean band and config difference, the CSV, and
 * the errors for missing and malformed files (file and line named).
 */
#include "core/error.h"
#include "core/path.h"
#include "ct_test.h"
#include "run/record.h"
#include "report/report.h"
#include "report/svg.h"

#include <sys/stat.h>

static void expect_msg(const char *want)
{
    const char *msg = ct_error_message();
    if (!strstr(msg, want))
        fprintf(stderr, "\n    message: \"%s\"\n    lacks:   \"%s\"\n", msg, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
}

/* Occurrences of needle in hay. */
static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* What a writer printed, via open_memstream. */
struct capture {
    FILE *f;
    char *buf;
    size_t len;
};

static void capture_open(struct capture *c)
{
    memset(c, 0, sizeof *c);
    c->f = open_memstream(&c->buf, &c->len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c->f);
}

static const char *capture_text(struct capture *c)
{
    fclose(c->f);
    c->f = NULL;
    return c->buf;
}

/* ================================================================ svg */

static int is_nice_step(double step)
{
    double m = step / pow(10.0, floor(log10(step) + 1e-9));
    return fabs(m - 1) < 1e-9 || fabs(m - 2) < 1e-9 || fabs(m - 5) < 1e-9;
}

static void test_nice_ticks(void)
{
    struct ct_svg_ticks t;
    CU_ASSERT_EQUAL(ct_svg_nice_ticks(0, 1, 6, &t), 0);
    CU_ASSERT_DOUBLE_EQUAL(t.first, 0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(t.step, 0.2, 1e-12);
    CU_ASSERT_EQUAL(t.n, 6);
    CU_ASSERT_EQUAL(t.decimals, 1);
    /* 0.3 / 0.1 is 2.9999999999999996: no extra tick below. */
    CU_ASSERT_EQUAL(ct_svg_nice_ticks(0.3, 0.7, 5, &t), 0);
    CU_ASSERT_DOUBLE_EQUAL(t.first, 0.3, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(t.step, 0.1, 1e-12);
    CU_ASSERT_EQUAL(t.n, 5);
    CU_ASSERT_EQUAL(ct_svg_nice_ticks(0, 58, 7, &t), 0);
    CU_ASSERT_DOUBLE_EQUAL(t.step, 10, 1e-12);
    CU_ASSERT_EQUAL(t.n, 7); /* 0 .. 60 */
    CU_ASSERT_EQUAL(t.decimals, 0);
    CU_ASSERT_EQUAL(ct_svg_nice_ticks(0.74, 0.7923, 6, &t), 0);
    CU_ASSERT_DOUBLE_EQUAL(t.step, 0.01, 1e-12);
    CU_ASSERT_EQUAL(t.decimals, 2);
    /* One value: widened around it. */
    CU_ASSERT_EQUAL(ct_svg_nice_ticks(5, 5, 5, &t), 0);
    CU_ASSERT_TRUE(t.first < 5 && t.first + (t.n - 1) * t.step > 5);
    CU_ASSERT_EQUAL(ct_svg_nice_ticks(0, 0, 5, &t), 0);
    CU_ASSERT_TRUE(t.first < 0 && t.first + (t.n - 1) * t.step > 0);
    /* Every range of a sweep: covered, nice steps, a sensible count. */
    const double los[] = {-3.7, 0, 0.001, 12.5, 1e5, -1e-3};
    const double spans[] = {1e-6, 0.37, 1, 9.99, 250, 3.3e6};
    for (size_t i = 0; i < sizeof los / sizeof *los; i++)
        for (size_t j = 0; j < sizeof spans / sizeof *spans; j++) {
            double lo = los[i], hi = los[i] + spans[j];
            CU_ASSERT_EQUAL_FATAL(ct_svg_nice_ticks(lo, hi, 6, &t), 0);
            double last = t.first + (t.n - 1) * t.step;
            /* Within a billionth of a step (the rounding guard of the
             * ticks) and the doubles' own rounding of first = k * step. */
            const double tol = 1e-9 * t.step + 1e-15 * (fabs(lo) + fabs(hi));
            if (!(t.first <= lo + tol && last >= hi - tol && is_nice_step(t.step) && t.n >= 2 && t.n <= 12))
                fprintf(stderr, "\n    [%g, %g]: first %g step %g n %d\n", lo, hi, t.first, t.step, t.n);
            CU_ASSERT_TRUE(t.first <= lo + tol);
            CU_ASSERT_TRUE(last >= hi - tol);
            CU_ASSERT_TRUE(is_nice_step(t.step));
            CU_ASSERT_TRUE(t.n >= 2 && t.n <= 12);
        }
    CU_ASSERT_EQUAL(ct_svg_nice_ticks(1, 0, 5, &t), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_svg_nice_ticks(NAN, 1, 5, &t), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_svg_nice_ticks(0, INFINITY, 5, &t), CT_EINVAL);
}

static void test_format_and_escape(void)
{
    char b[64];
    ct_svg_format_number(0.25, 2, b, sizeof b);
    CU_ASSERT_STRING_EQUAL(b, "0.25");
    ct_svg_format_number(-0.0001, 2, b, sizeof b);
    CU_ASSERT_STRING_EQUAL(b, "0.00"); /* never "-0.00" */
    ct_svg_format_number(-1.5, 1, b, sizeof b);
    CU_ASSERT_STRING_EQUAL(b, "-1.5");
    ct_svg_format_number(40000, 0, b, sizeof b);
    CU_ASSERT_STRING_EQUAL(b, "40000");
    ct_svg_format_number(2e8, 0, b, sizeof b);
    CU_ASSERT_STRING_EQUAL(b, "2e+08");
    ct_svg_format_number(NAN, 2, b, sizeof b);
    CU_ASSERT_STRING_EQUAL(b, "nan");

    struct capture c;
    capture_open(&c);
    ct_svg_escape(c.f, "<a href='x'>&\"</a>");
    ct_svg_escape(c.f, NULL);
    CU_ASSERT_STRING_EQUAL(capture_text(&c), "&lt;a href=&#39;x&#39;&gt;&amp;&quot;&lt;/a&gt;");
    free(c.buf);
}

static void test_plot(void)
{
    const double x[] = {1, 2, 3, 4, 5}, y[] = {0.9, 0.6, NAN, 0.4, 0.35};
    const double bx[] = {1, 2}, lo[] = {0.8, 0.5}, hi[] = {1.0, 0.7};
    const char *tips[] = {"a", "b", "c", "d<e", "f"};
    struct ct_svg_series s[2] = {
        {.name = "run <one>", .color = "#1f77b4", .style = CT_SVG_LINE_MARKERS, .n = 5, .x = x, .y = y,
         .tips = tips},
        {.name = "two", .color = "#ff7f0e", .style = CT_SVG_DASHED, .n = 2, .x = bx, .y = lo},
    };
    struct ct_svg_band band = {.name = "band", .color = "#222", .n = 2, .x = bx, .lo = lo, .hi = hi};
    struct ct_svg_plot p = {.title = "Loss & more", .xlabel = "epoch", .ylabel = "loss",
                            .series = s, .n_series = 2, .bands = &band, .n_bands = 1, .x_integer = 1};
    struct capture c;
    capture_open(&c);
    CU_ASSERT_EQUAL(ct_svg_plot_write(c.f, &p), 0);
    const char *t = capture_text(&c);
    CU_ASSERT_EQUAL(count(t, "<svg "), 1);
    CU_ASSERT_EQUAL(count(t, "</svg>"), 1);
    CU_ASSERT_EQUAL(count(t, "<g"), count(t, "</g>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "<title>Loss &amp; more</title>"));
    /* The NaN is a gap: 4 points, the line starts twice, 4 dots. */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "data-series=\"run &lt;one&gt;\" data-points=\"4\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "data-series=\"two\" data-points=\"2\""));
    const char *g = strstr(t, "data-series=\"run &lt;one&gt;\"");
    const char *d = g ? strstr(g, " d=\"") : NULL;
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int moves = 0;
    for (const char *q = d + 4; *q != '"'; q++)
        moves += *q == 'M';
    CU_ASSERT_EQUAL(moves, 2);
    CU_ASSERT_EQUAL(count(t, "<circle"), 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "<title>d&lt;e</title>"));
    CU_ASSERT_PTR_NULL(strstr(t, "<one>"));
    CU_ASSERT_EQUAL(count(t, "class=\"band\""), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "stroke-dasharray"));
    /* Integer x ticks 1..5, y ticks from 0.3 to 1.0 by 0.1. */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, ">5</text>"));
    CU_ASSERT_PTR_NULL(strstr(t, ">1.5</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, ">0.3</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, ">1.0</text>"));
    CU_ASSERT_PTR_NULL(strstr(t, "no data"));
    free(c.buf);

    /* Nothing finite: axes and "no data". */
    const double nan2[] = {NAN, NAN};
    struct ct_svg_series e = {.name = "e", .color = "#000", .n = 2, .x = bx, .y = nan2};
    struct ct_svg_plot pe = {.title = "empty", .series = &e, .n_series = 1};
    capture_open(&c);
    CU_ASSERT_EQUAL(ct_svg_plot_write(c.f, &pe), 0);
    t = capture_text(&c);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "no data"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "data-points=\"0\""));
    free(c.buf);

    struct ct_svg_series bad = {.name = "bad", .n = 3};
    struct ct_svg_plot pb = {.title = "bad", .series = &bad, .n_series = 1};
    CU_ASSERT_EQUAL(ct_svg_plot_write(stderr, &pb), CT_EINVAL);
    struct ct_svg_series bad_style = {.name = "s", .style = CT_SVG_STYLE_COUNT, .n = 2, .x = bx, .y = lo};
    pb.series = &bad_style;
    CU_ASSERT_EQUAL(ct_svg_plot_write(stderr, &pb), CT_EINVAL);
    /* A stream that fails its writes is an error, not a silent cut. */
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        setvbuf(full, NULL, _IONBF, 0);
        CU_ASSERT_EQUAL(ct_svg_plot_write(full, &p), CT_EIO);
        fclose(full);
    }
}

static void test_bars(void)
{
    const char *groups[] = {"rank 0", "rank 1"};
    const char *segs[] = {"wait", "compute", "comm"};
    const char *colors[] = {"#a00", "#0a0", "#00a"};
    const double v[] = {0.5, 2.0, 1.0, /* rank 1: */ NAN, 3.0, -1.0};
    struct ct_svg_bars b = {.title = "phases", .ylabel = "s", .n_groups = 2, .groups = groups,
                            .n_segments = 3, .segments = segs, .colors = colors, .values = v};
    struct capture c;
    capture_open(&c);
    CU_ASSERT_EQUAL(ct_svg_bars_write(c.f, &b), 0);
    const char *t = capture_text(&c);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "data-group=\"rank 0\" data-total=\"3.5\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "data-group=\"rank 1\" data-total=\"3\""));
    CU_ASSERT_EQUAL(count(t, "<rect"), 1 + 1 + 3 + 6); /* background, frame, legend, segments */
    CU_ASSERT_EQUAL(count(t, "<g"), count(t, "</g>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "<title>rank 0, compute: 2</title>"));
    free(c.buf);
    b.values = NULL;
    CU_ASSERT_EQUAL(ct_svg_bars_write(stderr, &b), CT_EINVAL);
}

/* ================================================================ synthetic runs */

static void put(const char *dir, const char *name, const char *text)
{
    char p[CT_PATH_MAX];
    CU_ASSERT_EQUAL_FATAL(ct_path_join(p, sizeof p, dir, name), 0);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(p, text, strlen(text)), 0);
}

/* A run of two epochs on two ranks with a per-step log and two
 * checkpoints; `k` shifts its numbers (another seed). */
static void make_run(const char *dir, int k)
{
    CU_ASSERT_EQUAL_FATAL(ct_mkdir_p(dir, 0755), 0);
    const struct ct_run_extra extra[] = {{"lib.zlib", "1.2.13"}};
    struct ct_run_record rr = {.version = "0.1.0", .git = "abc1234", .config = "configs/x.ini", .world = 2,
                               .blas_threads = 1, .blas = "OpenBLAS 0.3.21", .gemm = "openblas",
                               .host0 = "node<1>", .params = 1234, .steps_per_epoch = 10,
                               .total_steps = 20, .extra = extra, .n_extra = 1};
    CU_ASSERT_EQUAL_FATAL(ct_run_record_write(dir, &rr), 0);
    char p[CT_PATH_MAX], text[256];
    CU_ASSERT_EQUAL_FATAL(ct_path_join(p, sizeof p, dir, "metrics.jsonl"), 0);
    FILE *f = fopen(p, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int e = 1; e <= 2; e++) {
        const double wait[] = {0.1, 0.2}, fb[] = {1.0, 1.1}, comm[] = {0.3 * e, 0.2}, opt[] = {0.05, 0.05},
                     achieved[] = {100.0 + 10 * e, 100.0};
        struct ct_epoch_record r = {
            .epoch = e, .step = 10 * e, .train_loss = 1.0 / e + 0.01 * k,
            .train_acc = 0.6 + 0.05 * e + 0.01 * k, .test_loss = 0.9 / e,
            .test_acc = 0.7 + 0.05 * e + 0.01 * k, .samples_per_s = 1000 + 100 * k, .epoch_s = 2.0,
            .eval_s = 0.1, .lr = 0.1, .peak_rss_mib = 100, .pss_mib = 50, .world = 2,
            .data_wait_s = wait, .forward_backward_s = fb, .exposed_comm_s = comm, .optim_s = opt,
            .slowest_rank = 1, .flops_per_sample = 1e6, .achieved_gflops = achieved,
            .peak_gflops = 200, .mfu = (200.0 + 10 * e) / 400,
            .optim_state_bytes = (int64_t)1048576 * (3 - e)};
        memset(r.param_sha256, 'a' + e, 64);
        r.param_sha256[64] = '\0';
        CU_ASSERT_EQUAL(ct_metrics_append(f, p, &r), 0);
    }
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(ct_path_join(p, sizeof p, dir, "steps.jsonl"), 0);
    f = fopen(p, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    for (int s = 5; s <= 20; s += 5) {
        const struct ct_step_record sr = {s, 2.0 / s + 0.01 * k, 0.5 + 0.01 * s, 0.1, 0};
        CU_ASSERT_EQUAL(ct_steps_append(f, p, &sr), 0);
    }
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(ct_path_join(p, sizeof p, dir, "chain.jsonl"), 0);
    for (int c = 1; c <= 2; c++) {
        struct ct_chain_entry e = {.step = 10 * c, .epoch = c, .world = 2};
        snprintf(e.ckpt, sizeof e.ckpt, "ckpt-%d", 10 * c);
        memset(e.digest, '0' + c, 64);
        if (c == 2)
            memset(e.parent, '1', 64);
        memset(e.config_digest, 'c', 64);
        snprintf(e.code_version, sizeof e.code_version, "0.1.0 (abc1234)");
        snprintf(e.hosts, sizeof e.hosts, "node<1>");
        snprintf(e.gemm, sizeof e.gemm, "openblas");
        snprintf(e.blas, sizeof e.blas, "OpenBLAS 0.3.21");
        snprintf(e.time, sizeof e.time, "2026-12-03T08:40:%02dZ", 10 * c);
        CU_ASSERT_EQUAL(ct_chain_append(p, &e), 0);
    }
    snprintf(text, sizeof text, "# resolved\n[model]\nname = mlp\n\n[train]\nseed = %d\nepochs = 2\n"
             "note = a<b>&c\n", k);
    put(dir, "config.ini", text);
    put(dir, "placement.txt", "rank 0 host node<1> cores 0-1\nrank 1 host node<1> cores 2-3\n");
}

static void test_report_one_run(void)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    make_run(dir, 0);
    struct ct_report_run r;
    CU_ASSERT_EQUAL_FATAL(ct_report_run_load(dir, &r), 0);
    CU_ASSERT_EQUAL(r.n_epochs, 2);
    CU_ASSERT_EQUAL(r.n_steps, 4);
    CU_ASSERT_EQUAL(r.n_chain, 2);
    CU_ASSERT_EQUAL(r.run.world, 2);
    CU_ASSERT_STRING_EQUAL(ct_report_run_config(&r, "train.seed"), "0");
    CU_ASSERT_STRING_EQUAL(ct_report_run_config(&r, "train.note"), "a<b>&c");
    CU_ASSERT_PTR_NULL(ct_report_run_config(&r, "train.none"));
    struct capture c;
    capture_open(&c);
    struct ct_report_params p = {.title = "T <1>", .generated = "2026-12-03 09:00:00 UTC"};
    CU_ASSERT_EQUAL(ct_report_write_html(c.f, &r, 1, &p), 0);
    const char *t = capture_text(&c);
    CU_ASSERT_TRUE(strncmp(t, "<!DOCTYPE html>", 15) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "</html>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "<title>T &lt;1&gt;</title>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "2026-12-03 09:00:00 UTC"));
    /* Nothing fetched, nothing run. */
    CU_ASSERT_PTR_NULL(strstr(t, "<script"));
    CU_ASSERT_PTR_NULL(strstr(t, "http://www.w3.org/1999"));
    CU_ASSERT_EQUAL(count(t, "https://"), 0);
    CU_ASSERT_EQUAL(count(t, "http://"), count(t, "xmlns=\"http://www.w3.org/2000/svg\""));
    /* 7 per-epoch plots (MFU the sixth, the optimizer state per rank the
     * seventh), 5 per-step plots, 1 phase chart, 1 timeline. */
    CU_ASSERT_EQUAL(count(t, "<svg "), 14);
    CU_ASSERT_EQUAL(count(t, "<svg "), count(t, "</svg>"));
    CU_ASSERT_EQUAL(count(t, "class=\"plot\""), 13);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "Model FLOP utilization per epoch"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "Optimizer state per rank")); /* dist.shard_optimizer divides it */
    CU_ASSERT_EQUAL(count(t, "class=\"bars\""), 1);
    /* One run: no mean or band. */
    CU_ASSERT_EQUAL(count(t, "class=\"band\""), 0);
    /* Epoch curves: 2 points each (7 plots x 2 epochs + test by step 2 x 2),
     * steps: 4 points (loss, acc and lr), chain: 2. */
    char want[400];
    snprintf(want, sizeof want, "data-series=\"%s\" data-points=\"2\"", dir);
    CU_ASSERT_EQUAL(count(t, want), 7 + 2 + 1);
    snprintf(want, sizeof want, "data-series=\"%s\" data-points=\"4\"", dir);
    CU_ASSERT_EQUAL(count(t, want), 3);
    /* The final numbers in the summary: test_acc of epoch 2 is 0.80. */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "<td class=\"num\">0.8000</td>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "<td class=\"num\">0.500000</td>")); /* train_loss 1/2 */
    /* Phases summed over both epochs: rank 0 0.2 + 2.0 + 0.9 + 0.1 = 3.2. */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "data-group=\"rank 0\" data-total=\"3.2\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "data-group=\"rank 1\" data-total=\"3.1\""));
    /* Checkpoints: both, the first without a parent. */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "ckpt-20"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "2026-12-03T08:40:20Z"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "<td>none</td>"));
    /* Provenance, escaped: host, config, placement, extras. */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "<td>node&lt;1&gt;</td>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "note = a&lt;b&gt;&amp;c"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "rank 1 host node&lt;1&gt; cores 2-3"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "<th>lib.zlib</th><td>1.2.13</td>"));
    CU_ASSERT_PTR_NULL(strstr(t, "<b>"));
    CU_ASSERT_PTR_NULL(strstr(t, "node<1>"));
    free(c.buf);

    /* CSV: a header and a row per epoch; the run column is quoted when it
     * holds a comma. */
    free(r.dir);
    r.dir = strdup("runs/a,b");
    capture_open(&c);
    CU_ASSERT_EQUAL(ct_report_write_csv(c.f, &r, 1), 0);
    t = capture_text(&c);
    CU_ASSERT_EQUAL(count(t, "\n"), 3);
    CU_ASSERT_TRUE(strncmp(t, "run,epoch,step,partial,train_loss,train_acc,test_loss,test_acc,", 62) == 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "data_wait_s_max,forward_backward_s_max,exposed_comm_s_max,optim_s_max,"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "\n\"runs/a,b\",2,20,false,0.500000,0.7000,0.450000,0.8000,1000.0,"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, ",2,0.2000,1.1000,0.6000,0.0500,1,cccc")); /* epoch 2's maxima */
    /* MFU columns last: FLOPs a sample, the ranks' mean rate, peak, mfu. */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, ",tokens_per_s,val_bpb,flops_per_sample,achieved_gflops_mean,"
                                     "peak_gflops,mfu,optim_state_bytes\n"));
    CU_ASSERT_PTR_NOT_NULL(strstr(t, ",1000000,110.00,200.00,0.5500,1048576\n")); /* epoch 2 */
    free(c.buf);
    ct_report_run_free(&r);
    ct_report_run_free(&r); /* harmless twice */
    ct_test_rmtree(dir);
}

static void test_report_seeds(void)
{
    char top[256], d[512], out[512];
    snprintf(top, sizeof top, "%s", ct_test_tmpdir());
    /* seed-10 sorts after seed-2; a seed-* without metrics is not a run. */
    const int seeds[] = {10, 2};
    for (int i = 0; i < 2; i++) {
        snprintf(d, sizeof d, "%s/seed-%d", top, seeds[i]);
        make_run(d, seeds[i]);
    }
    snprintf(d, sizeof d, "%s/seed-x", top);
    CU_ASSERT_EQUAL(ct_mkdir_p(d, 0755), 0);
    snprintf(out, sizeof out, "%s/report.html", top);
    FILE *msg = tmpfile();
    const char *dirs[] = {top};
    CU_ASSERT_EQUAL_FATAL(ct_report(dirs, 1, CT_REPORT_HTML, out, msg), 0);
    size_t len;
    char *t = (char *)ct_test_read_file(out, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    char s2[300], s10[300];
    snprintf(s2, sizeof s2, "%s/seed-2", top);
    snprintf(s10, sizeof s10, "%s/seed-10", top);
    CU_ASSERT_TRUE(strstr(t, s2) && strstr(t, s10) && strstr(t, s2) < strstr(t, s10));
    /* Mean and band in each of the 12 curve plots (MFU's and the optimizer
     * state's included). */
    CU_ASSERT_EQUAL(count(t, "class=\"band\""), 12);
    CU_ASSERT_EQUAL(count(t, "data-series=\"mean of 2 runs\" data-points=\"2\""), 9);
    CU_ASSERT_EQUAL(count(t, "data-series=\"mean of 2 runs\" data-points=\"4\""), 3);
    /* Final test_acc 0.82 and 0.90: mean 0.86 +- 0.0566 (sample std). */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "0.8600 &plusmn; 0.0566"));
    /* The config difference is the seed; two phase charts. */
    CU_ASSERT_PTR_NOT_NULL(strstr(t, "<tr><th>train.seed</th><td>2</td><td>10</td></tr>"));
    CU_ASSERT_PTR_NULL(strstr(t, "<tr><th>train.epochs</th>"));
    CU_ASSERT_EQUAL(count(t, "class=\"bars\""), 2);
    free(t);
    rewind(msg);
    char line[1024] = "";
    CU_ASSERT_PTR_NOT_NULL(fgets(line, sizeof line, msg));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "html report of 2 runs"));
    fclose(msg);
    /* No temporary file left beside it. */
    snprintf(d, sizeof d, "ls %s | grep -q tmp", top);
    CU_ASSERT_NOT_EQUAL(system(d), 0);
    ct_test_rmtree(top);
}

static void test_report_errors(void)
{
    char dir[256], p[CT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    make_run(dir, 0);
    struct ct_report_run r;

    /* A malformed line: the file and the line. */
    CU_ASSERT_EQUAL(ct_path_join(p, sizeof p, dir, "metrics.jsonl"), 0);
    FILE *f = fopen(p, "a");
    fputs("{\"epoch\": 3, \"step\": oops}\n", f);
    fclose(f);
    CU_ASSERT_EQUAL(ct_report_run_load(dir, &r), CT_EFORMAT);
    expect_msg("metrics.jsonl:3");
    CU_ASSERT_PTR_NULL(r.dir);
    ct_report_run_free(&r);

    /* A last line cut short: left out, noted. */
    f = fopen(p, "w");
    fputs("{\"epoch\": 1, \"step\": 1", f);
    fclose(f);
    CU_ASSERT_EQUAL_FATAL(ct_report_run_load(dir, &r), 0);
    CU_ASSERT_EQUAL(r.n_epochs, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(r.notes, "metrics.jsonl:1: the last line was cut short"));
    struct capture c;
    capture_open(&c);
    CU_ASSERT_EQUAL(ct_report_write_html(c.f, &r, 1, NULL), 0); /* no epochs: still a page */
    CU_ASSERT_PTR_NOT_NULL(strstr(capture_text(&c), "the last line was cut short"));
    free(c.buf);
    ct_report_run_free(&r);

    /* steps.jsonl malformed on line 2. */
    CU_ASSERT_EQUAL(ct_path_join(p, sizeof p, dir, "steps.jsonl"), 0);
    put(dir, "steps.jsonl", "{\"step\": 5, \"loss\": 1.0, \"lr\": 0.1}\n[1, 2]\n");
    CU_ASSERT_EQUAL(ct_report_run_load(dir, &r), CT_EFORMAT);
    expect_msg("steps.jsonl:2");
    /* ... and absent: fine. */
    CU_ASSERT_EQUAL(unlink(p), 0);
    CU_ASSERT_EQUAL(ct_report_run_load(dir, &r), 0);
    CU_ASSERT_EQUAL(r.n_steps, 0);
    ct_report_run_free(&r);

    /* chain.jsonl: a bad time names the line. */
    put(dir, "chain.jsonl", "");
    CU_ASSERT_EQUAL(ct_path_join(p, sizeof p, dir, "chain.jsonl"), 0);
    struct ct_chain_entry e = {.step = 1, .world = 1};
    snprintf(e.ckpt, sizeof e.ckpt, "ckpt-1");
    memset(e.digest, 'd', 64);
    memset(e.config_digest, 'c', 64);
    snprintf(e.time, sizeof e.time, "yesterday");
    CU_ASSERT_EQUAL(ct_chain_append(p, &e), 0);
    CU_ASSERT_EQUAL(ct_report_run_load(dir, &r), CT_EFORMAT);
    expect_msg("chain.jsonl:1: time \"yesterday\"");
    CU_ASSERT_EQUAL(unlink(p), 0);

    /* config.ini that is no INI file. */
    put(dir, "config.ini", "[train]\nseed = 1\nthis is not ini\n");
    CU_ASSERT_EQUAL(ct_report_run_load(dir, &r), CT_EFORMAT);
    expect_msg("config.ini:3");

    /* run.json missing; malformed. */
    CU_ASSERT_EQUAL(ct_path_join(p, sizeof p, dir, "run.json"), 0);
    CU_ASSERT_EQUAL(unlink(p), 0);
    CU_ASSERT_EQUAL(ct_report_run_load(dir, &r), CT_ENOENT);
    expect_msg("run.json");
    put(dir, "run.json", "{\"version\": \"1\"\n");
    CU_ASSERT_EQUAL(ct_report_run_load(dir, &r), CT_EFORMAT);
    expect_msg("run.json");

    /* The command: a directory that is no run; an unwritable output. */
    const char *dirs[] = {"/nonexistent/run"};
    CU_ASSERT_EQUAL(ct_report(dirs, 1, CT_REPORT_HTML, "/tmp/x.html", stderr), CT_ENOENT);
    expect_msg("/nonexistent/run");
    make_run(dir, 0);
    const char *ok[] = {dir};
    CU_ASSERT_NOT_EQUAL(ct_report(ok, 1, CT_REPORT_CSV, "/nonexistent/dir/report.csv", stderr), 0);
    expect_msg("/nonexistent/dir/report.csv");
    CU_ASSERT_EQUAL(ct_report(ok, 0, CT_REPORT_CSV, NULL, stderr), CT_EUSAGE);
    ct_test_rmtree(dir);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"nice ticks: 1-2-5 steps covering the range", test_nice_ticks},
        {"numbers and escaping", test_format_and_escape},
        {"plot: gaps, markers, band, legend, errors", test_plot},
        {"stacked bars", test_bars},
        {"report of one run: page, numbers, provenance, CSV", test_report_one_run},
        {"report of seed-* runs: order, mean +- std, config diff", test_report_seeds},
        {"report errors name the file and line", test_report_errors},
        {NULL, NULL},
    };
    return ct_test_run("report", cases);
}
