/* Unit tests for the report's timeline of a traced step (src/report:
 * report_trace.c reads trace.json, report_timeline.c draws it): the step
 * picked from a 2-rank fixture with overlapping collectives, the nesting of
 * its spans, the SVG's groups, widths in proportion to the durations, the
 * legend and escaped host names; the cap on the spans kept of a large trace;
 * malformed and contract-breaking traces giving a note that names the file
 * and the fault while the rest of the page renders; no trace, no section.
 *
 * Also the way docs/img/report-timeline.svg is made (the chart of TRACE,
 * default the hand-made fixture, written to a file of its own):
 *     build/tests/test_report_timeline --svg docs/img/report-timeline.svg \
 *         tests/fixtures/trace/fmnist-cnn-2ranks.json
 */
#include "core/error.h"
#include "core/path.h"
#include "ct_test.h"
#include "report/report-impl.h"
#include "report/report.h"
#include "run/record.h"

#include <sys/stat.h>

#define FIXTURE CT_FIXTURE_DIR "/trace/two-ranks.json"

static void expect_msg(const char *msg, const char *want)
{
    if (!strstr(msg, want))
        fprintf(stderr, "\n    message: \"%s\"\n    lacks:   \"%s\"\n", msg, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
}

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

/* The number after `attr="` in the first element that holds `at`. */
static double attr_after(const char *text, const char *at, const char *attr)
{
    const char *p = strstr(text, at);
    char key[32];
    snprintf(key, sizeof key, " %s=\"", attr);
    const char *q = p ? strstr(p, key) : NULL;
    const char *end = p ? strchr(p, '>') : NULL;
    if (!q || q > end) {
        fprintf(stderr, "\n    no %s after %s\n", attr, at);
        return NAN;
    }
    return strtod(q + strlen(key), NULL);
}

/* The chart, into *buf (malloc'd; the caller's, so that it outlives this). */
static char *svg_of(const struct ct__timeline *t, char **buf)
{
    size_t len = 0;
    FILE *f = open_memstream(buf, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_EQUAL(ct__timeline_svg_write(f, t), 0);
    fclose(f);
    return *buf;
}

static const struct ct__tl_span *find_span(const struct ct__timeline *t, int rank, const char *name, double ts)
{
    for (size_t i = 0; i < t->n_spans; i++)
        if (t->spans[i].rank == rank && strcmp(t->spans[i].name, name) == 0 && fabs(t->spans[i].ts - ts) < 1e-6)
            return &t->spans[i];
    return NULL;
}

/* ================================================================ the fixture */

static void test_fixture_step(void)
{
    struct ct__timeline t;
    CU_ASSERT_EQUAL_FATAL(ct__timeline_load(FIXTURE, &t), 0);
    /* Steps 2 and 3 are on both ranks: the middle of two is the later. */
    CU_ASSERT_EQUAL(t.step, 3);
    CU_ASSERT_TRUE(t.full);
    CU_ASSERT_EQUAL(t.n_candidates, 2);
    CU_ASSERT_EQUAL(t.first, 2);
    CU_ASSERT_EQUAL(t.last, 3);
    CU_ASSERT_EQUAL(t.world, 2);
    CU_ASSERT_EQUAL(t.on_ranks, 2);
    CU_ASSERT_EQUAL(t.n_ranks, 2);
    CU_ASSERT_DOUBLE_EQUAL(t.bound_us, 3.5, 1e-12);
    CU_ASSERT_EQUAL(t.rounds, 5);
    CU_ASSERT_EQUAL(t.dropped, 0);
    CU_ASSERT_STRING_EQUAL(t.ranks[1].label, "rank 1 (a<b&c)");
    /* 0 = rank 0's start of step 3 (10000 us); rank 1 starts 100 us later,
     * both end at 20000. */
    CU_ASSERT_DOUBLE_EQUAL(t.ranks[0].ts, 0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(t.ranks[1].ts, 100, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(t.span_us, 10000, 1e-9);
    /* Rank 0: step, 5 phases, 5 modules, 2 allreduces, 2 loader batches
     * (one began in step 2); rank 1: step, 5 phases, 1 allreduce, 1 batch.
     * Step 2's events and the clock barrier are not kept. */
    CU_ASSERT_EQUAL(t.n_spans, 15 + 8);
    CU_ASSERT_EQUAL(t.n_left_out, 0);
    const struct ct__tl_span *s = find_span(&t, 0, "step", 0);
    CU_ASSERT_TRUE(s && s->depth == 0 && s->tid == 0);
    s = find_span(&t, 0, "forward", 500);
    CU_ASSERT_TRUE(s && s->depth == 1);
    s = find_span(&t, 0, "relu", 2000);
    CU_ASSERT_TRUE(s && s->depth == 2);
    s = find_span(&t, 0, "fc2", 2000.4);
    CU_ASSERT_TRUE(s && s->depth == 2); /* beside relu, not in it */
    s = find_span(&t, 0, "allreduce", 7000);
    CU_ASSERT_TRUE(s && s->tid == 3 && s->depth == 0 && s->bucket == 0 && s->bytes == 2097152);
    s = find_span(&t, 0, "batch", -1000);
    CU_ASSERT_TRUE(s && s->tid == 1);
    ct__timeline_free(&t);
    ct__timeline_free(&t); /* harmless twice */
}

static void test_fixture_svg(void)
{
    struct ct__timeline t;
    CU_ASSERT_EQUAL_FATAL(ct__timeline_load(FIXTURE, &t), 0);
    char *buf = NULL, *svg = svg_of(&t, &buf);
    CU_ASSERT_EQUAL(count(svg, "<svg "), 1);
    CU_ASSERT_EQUAL(count(svg, "</svg>"), 1);
    CU_ASSERT_EQUAL(count(svg, "<g"), count(svg, "</g>"));
    CU_ASSERT_EQUAL(count(svg, "class=\"rank\""), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "data-rank=\"0\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "data-rank=\"1\""));
    CU_ASSERT_EQUAL(count(svg, "class=\"span\""), 23);
    /* A bar per phase of each rank, none of step 2. */
    CU_ASSERT_EQUAL(count(svg, "data-name=\"forward\""), 2);
    CU_ASSERT_EQUAL(count(svg, "data-name=\"optimizer\""), 2);
    CU_ASSERT_EQUAL(count(svg, "data-name=\"sync_wait\""), 2);
    CU_ASSERT_EQUAL(count(svg, "data-name=\"allreduce\""), 3);
    CU_ASSERT_EQUAL(count(svg, "data-lane=\"comm 1\""), 1);
    /* The axis runs 0..10 ms over 1032 px: 103.2 px a ms. Rank 0 comes
     * first: its step 10 ms, forward 3, backward 4; rank 1's step 9.9 ms
     * from 0.1 ms. relu (0.4 us) is one pixel, not nothing. */
    CU_ASSERT_DOUBLE_EQUAL(attr_after(svg, "data-name=\"step\"", "width"), 1032.0, 0.006);
    CU_ASSERT_DOUBLE_EQUAL(attr_after(svg, "data-name=\"forward\"", "width"), 309.6, 0.006);
    CU_ASSERT_DOUBLE_EQUAL(attr_after(svg, "data-name=\"backward\"", "width"), 412.8, 0.006);
    CU_ASSERT_DOUBLE_EQUAL(attr_after(svg, "data-name=\"relu\"", "width"), 1.0, 1e-9);
    const char *r1 = strstr(svg, "data-rank=\"1\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(r1);
    const double x0 = attr_after(svg, "data-name=\"step\"", "x");
    CU_ASSERT_DOUBLE_EQUAL(attr_after(r1, "data-name=\"step\"", "width"), 1021.68, 0.006);
    CU_ASSERT_DOUBLE_EQUAL(attr_after(r1, "data-name=\"step\"", "x") - x0, 10.32, 0.011);
    CU_ASSERT_DOUBLE_EQUAL(attr_after(r1, "data-name=\"forward\"", "width"), 309.6, 0.006);
    /* The batch that began 1 ms before the axis is cut at 0. */
    CU_ASSERT_DOUBLE_EQUAL(attr_after(svg, "data-name=\"batch\"", "x"), x0, 1e-9);
    CU_ASSERT_DOUBLE_EQUAL(attr_after(svg, "data-name=\"batch\"", "width"), 51.6, 0.006);
    /* Legend: the kinds drawn, the clock barrier (not drawn) not among them. */
    CU_ASSERT_EQUAL(count(svg, "class=\"legend\""), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">allreduce</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">sync wait (exposed)</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">module</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, ">loader batch</text>"));
    CU_ASSERT_PTR_NULL(strstr(svg, ">clock barrier</text>"));
    /* Ticks 0..10, the host escaped, the bound in the subtitle. */
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "text-anchor=\"middle\">10</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "rank 1 (a&lt;b&amp;c)"));
    CU_ASSERT_PTR_NULL(strstr(svg, "a<b"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "within &#177;3.5 &#181;s"));
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "bucket 0, 2.00 MiB"));
    free(svg);
    ct__timeline_free(&t);
}

/* A trace the trainer wrote (tests/fixtures/README.md says how): read as it
 * is, and each rank's gradient allreduce starts before its backward ends
 * (grad_sync = overlap: the picture the chart is for). */
static void test_real_trace(void)
{
    struct ct__timeline t;
    CU_ASSERT_EQUAL_FATAL(ct__timeline_load(CT_FIXTURE_DIR "/trace/fmnist-cnn-2ranks.json", &t), 0);
    CU_ASSERT_EQUAL(t.step, 4); /* the middle of 3..5 */
    CU_ASSERT_TRUE(t.full);
    CU_ASSERT_EQUAL(t.n_ranks, 2);
    CU_ASSERT_STRING_EQUAL(t.ranks[0].label, "rank 0 (vm)");
    CU_ASSERT_TRUE(isfinite(t.bound_us) && t.bound_us >= 0);
    for (size_t k = 0; k < t.n_ranks; k++) {
        double backward_end = NAN, first_comm = INFINITY;
        int modules = 0;
        for (size_t i = 0; i < t.n_spans; i++) {
            const struct ct__tl_span *s = &t.spans[i];
            if (s->rank != t.ranks[k].rank)
                continue;
            if (strcmp(s->name, "backward") == 0)
                backward_end = s->ts + s->dur;
            if (strcmp(s->cat, "comm") == 0 && s->tid >= 2)
                first_comm = fmin(first_comm, s->ts);
            modules += strcmp(s->cat, "module") == 0 && s->depth >= 2;
        }
        CU_ASSERT_TRUE(first_comm < backward_end);
        CU_ASSERT_TRUE(modules > 0);
    }
    char *buf = NULL, *svg = svg_of(&t, &buf);
    CU_ASSERT_EQUAL(count(svg, "class=\"rank\""), 2);
    free(buf);
    ct__timeline_free(&t);
}

/* A step of 20000 module spans: half the cap kept, the rest counted; the
 * memory is that of the spans kept, whatever the file's length. */
static void test_cap(void)
{
    const int n = 20000;
    size_t cap = 200 + (size_t)n * 100, len = 0;
    char *s = malloc(cap);
    CU_ASSERT_PTR_NOT_NULL_FATAL(s);
    len += (size_t)snprintf(s + len, cap - len, "{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"step\",\"cat\":"
                                                "\"step\",\"pid\":0,\"tid\":0,\"ts\":0,\"dur\":%d,"
                                                "\"args\":{\"step\":7}}", n);
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(s + len, cap - len, ",\n{\"ph\":\"X\",\"name\":\"m%d\",\"cat\":\"module\",\"pid\":0,"
                                                    "\"tid\":0,\"ts\":%d,\"dur\":1}", i, i);
    len += (size_t)snprintf(s + len, cap - len, "]}");
    struct ct__timeline t;
    CU_ASSERT_EQUAL_FATAL(ct__timeline_parse(s, len, &t), 0);
    CU_ASSERT_EQUAL(t.step, 7);
    CU_ASSERT_EQUAL(t.world, 1); /* no otherData: the ranks seen */
    CU_ASSERT_TRUE(isnan(t.bound_us));
    CU_ASSERT_EQUAL(t.n_spans, 1 + CT__TL_MAX_SPANS / 2);
    CU_ASSERT_EQUAL(t.n_left_out, (size_t)n - CT__TL_MAX_SPANS / 2);
    char *buf = NULL, *svg = svg_of(&t, &buf);
    CU_ASSERT_EQUAL(count(svg, "class=\"span\""), 1 + CT__TL_MAX_SPANS / 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(svg, "clock alignment not recorded"));
    free(svg);
    ct__timeline_free(&t);
    free(s);
}

/* The fixture with bytes changed or cut, 3000 ways (a fixed sequence): each
 * either parses and draws, or fails with a message; never a crash (ASan
 * and UBSan watch the CI run). */
static void test_mutants(void)
{
    size_t len;
    char *orig = (char *)ct_test_read_file(FIXTURE, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(orig);
    char *m = malloc(len + 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    static const char bytes[] = "{}[]\",:0123456789-.eE \\nu\x01\xc3<&";
    uint64_t x = 0x9E3779B97F4A7C15ull;
    int parsed = 0, failed = 0, silent = 0;
    for (int k = 0; k < 3000; k++) {
        memcpy(m, orig, len + 1);
        size_t n = len;
        for (int c = 0; c < 1 + k % 4; c++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            size_t at = (size_t)(x >> 33) % n;
            if (k % 7 == 0)
                n = at; /* cut short */
            else
                m[at] = bytes[(x >> 20) % (sizeof bytes - 1)];
            if (n == 0)
                break;
        }
        struct ct__timeline t;
        ct_error_clear();
        if (ct__timeline_parse(m, n, &t) == 0) {
            char *buf = NULL, *svg = svg_of(&t, &buf);
            parsed++;
            CU_ASSERT_EQUAL(count(svg, "<svg "), 1);
            CU_ASSERT_PTR_NULL(strchr(svg, '\x01'));
            free(buf);
            ct__timeline_free(&t);
        } else {
            failed++;
            silent += !ct_error_message()[0];
        }
    }
    CU_ASSERT_TRUE(parsed > 100 && failed > 100);
    CU_ASSERT_EQUAL(silent, 0);
    free(m);
    free(orig);
}

/* ================================================================ the page */

static void put(const char *dir, const char *name, const char *text)
{
    char p[CT_PATH_MAX];
    CU_ASSERT_EQUAL_FATAL(ct_path_join(p, sizeof p, dir, name), 0);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(p, text, strlen(text)), 0);
}

/* A run directory of one epoch on two ranks, what the page needs. */
static void make_run(const char *dir)
{
    CU_ASSERT_EQUAL_FATAL(ct_mkdir_p(dir, 0755), 0);
    struct ct_run_record rr = {.version = "0.1.0", .git = "abc1234", .config = "configs/x.ini", .world = 2,
                               .blas_threads = 1, .blas = "OpenBLAS", .gemm = "openblas", .host0 = "node0",
                               .params = 10, .steps_per_epoch = 3, .total_steps = 3};
    CU_ASSERT_EQUAL_FATAL(ct_run_record_write(dir, &rr), 0);
    char p[CT_PATH_MAX];
    CU_ASSERT_EQUAL_FATAL(ct_path_join(p, sizeof p, dir, "metrics.jsonl"), 0);
    FILE *f = fopen(p, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    const double wait[] = {0.1, 0.2}, fb[] = {1.0, 1.1}, comm[] = {0.3, 0.2}, opt[] = {0.05, 0.05};
    struct ct_epoch_record r = {.epoch = 1, .step = 3, .train_loss = 1.0, .test_loss = 0.9, .test_acc = 0.7,
                                .samples_per_s = 1000, .epoch_s = 2.0, .lr = 0.1, .world = 2,
                                .data_wait_s = wait, .forward_backward_s = fb, .exposed_comm_s = comm,
                                .optim_s = opt, .optim_state_bytes = -1};
    memset(r.param_sha256, 'a', 64);
    CU_ASSERT_EQUAL(ct_metrics_append(f, p, &r), 0);
    fclose(f);
    put(dir, "config.ini", "[model]\nname = mlp\n[train]\nseed = 0\n");
}

/* The whole page of a run directory. */
static char *page_of(const char *dir)
{
    struct ct_report_run r;
    CU_ASSERT_EQUAL_FATAL(ct_report_run_load(dir, &r), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    struct ct_report_params p = {.generated = "2026-12-05 00:00:00 UTC"};
    CU_ASSERT_EQUAL(ct_report_write_html(f, &r, 1, &p), 0);
    fclose(f);
    ct_report_run_free(&r);
    return buf;
}

static void test_page(void)
{
    char dir[256];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    make_run(dir);
    /* No trace.json: no section, no note. */
    char *plain = page_of(dir);
    CU_ASSERT_PTR_NULL(strstr(plain, "id=\"timeline\""));
    CU_ASSERT_PTR_NULL(strstr(plain, "timeline-note"));
    CU_ASSERT_PTR_NULL(strstr(plain, "class=\"timeline\""));
    int heading = 0;
    CU_ASSERT_EQUAL(ct__report_timeline_section(stderr, dir, NULL, &heading), 0);
    CU_ASSERT_EQUAL(heading, 0);

    size_t len;
    char *fixture = (char *)ct_test_read_file(FIXTURE, &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fixture);
    put(dir, "trace.json", fixture);
    char *page = page_of(dir);
    CU_ASSERT_EQUAL(count(page, "id=\"timeline\""), 1);
    CU_ASSERT_EQUAL(count(page, "class=\"timeline\""), 1);
    CU_ASSERT_EQUAL(count(page, "<svg "), count(plain, "<svg ") + 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(page, "Step 3 (the middle one of the 2 steps traced on every rank, 2 to 3)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(page, "within &plusmn;3.5 &micro;s (the largest residual bound, best of 5 rounds)"));
    /* Between the phase split and the checkpoints. */
    CU_ASSERT_TRUE(strstr(page, "id=\"phases\"") < strstr(page, "id=\"timeline\"") &&
                   strstr(page, "id=\"timeline\"") < strstr(page, "id=\"checkpoints\""));
    /* Totals of rank 0: step 10, data wait 0.5, forward 3, backward 4,
     * sync wait 1, optimizer 1.5, comm in flight 2.7 + 1.2 ms. */
    CU_ASSERT_PTR_NOT_NULL(strstr(page, "<tr><td>rank 0 (node0)</td><td class=\"num\">10.000</td><td class=\"num\">"
                                        "0.000</td><td class=\"num\">0.500</td><td class=\"num\">3.000</td><td class="
                                        "\"num\">4.000</td><td class=\"num\">1.000</td><td class=\"num\">1.500</td>"
                                        "<td class=\"num\">3.900</td><td class=\"num\">0.0</td></tr>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(page, "<tr><td>rank 1 (a&lt;b&amp;c)</td><td class=\"num\">9.900</td>"));
    CU_ASSERT_PTR_NULL(strstr(page, "a<b"));
    free(page);

    /* Not in the contract: a note naming the file and the fault in the
     * timeline's place; everything else as without a trace. */
    char path[CT_PATH_MAX];
    CU_ASSERT_EQUAL_FATAL(ct_path_join(path, sizeof path, dir, "trace.json"), 0);
    const struct {
        const char *text, *want;
    } bad[] = {
        {"not json", "trace.json: offset 0: expected '{' (a trace is one JSON object), found 'n'"},
        {"", "offset 0: expected '{' (a trace is one JSON object), found the end of the text"},
        {"{\"displayTimeUnit\": \"ms\"}", "trace.json: no \"traceEvents\" array"},
        {"{\"traceEvents\": {}}", "offset 16: expected an array as \"traceEvents\", found '{'"},
        {"{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"step\",\"cat\":\"step\",\"pid\":0,\"tid\":0,\"ts\":\"soon\","
         "\"dur\":1,\"args\":{\"step\":1}}]}",
         "trace.json: traceEvents[0] at offset 17: key \"ts\": expected a number, found string"},
        {"{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"forward\",\"cat\":\"phase\",\"pid\":0,\"tid\":0,\"ts\":1}]}",
         "traceEvents[0] at offset 17: missing key \"dur\""},
        {"{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"x\",\"cat\":\"phase\",\"pid\":0,\"tid\":0,\"ts\":1,"
         "\"dur\":-2}]}",
         "key \"dur\": -2 is negative"},
        {"{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"x\",\"cat\":\"phase\",\"pid\":-1,\"tid\":0,\"ts\":1,"
         "\"dur\":2}]}",
         "key \"pid\": -1 is outside 0..1048575"},
        {"{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"step\",\"cat\":\"step\",\"pid\":0,\"tid\":0,\"ts\":1,"
         "\"dur\":2}]}",
         "traceEvents[0] at offset 17: a \"step\" event without args.step"},
        {"{\"traceEvents\": [{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":0,\"args\":{}}]}",
         "process_name of pid 0: args: missing key \"name\""},
        {"{\"traceEvents\": [{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":3}]}",
         "process_name of pid 3: args: offset 0: expected an object holding key \"name\", found nothing"},
        {"{\"traceEvents\": [{\"ph\":\"X\",\"name\":\"forward\",\"cat\":\"phase\",\"pid\":0,\"tid\":0,\"ts\":1,"
         "\"dur\":2}]}",
         "trace.json: no \"step\" event (cat \"step\"): no step to draw"},
        {"{\"traceEvents\": [1, {\"ph\": nope}]}", "traceEvents[0] at offset 17: expected an object, found number"},
        {"{\"traceEvents\": [{\"ph\": nope}]}", "traceEvents[0] at offset 17: offset 7: expected a value"},
        {"{\"traceEvents\": [], \"otherData\": {\"ctrain\": {\"world\": \"two\"}}}",
         "otherData.ctrain.world: expected a number, found string"},
        {"{\"traceEvents\": [], \"traceEvents\": []}", "offset 20: a second \"traceEvents\""},
        {"{\"traceEvents\": []} trailing", "expected the end of the text after the object, found 't'"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad + 2; i++) {
        if (i < sizeof bad / sizeof *bad)
            put(dir, "trace.json", bad[i].text);
        else if (i == sizeof bad / sizeof *bad)
            *strstr(fixture, "\n],") = '\0', put(dir, "trace.json", fixture); /* cut short */
        else
            CU_ASSERT_EQUAL_FATAL(unlink(path) == 0 && mkdir(path, 0755) == 0, 1);
        const char *want = i < sizeof bad / sizeof *bad ? bad[i].want
                           : i == sizeof bad / sizeof *bad ? "trace.json: offset 16: an array that never closes"
                                                          : "trace.json: not a regular file";
        page = page_of(dir);
        const char *note = strstr(page, "<p class=\"note timeline-note\">No timeline: ");
        CU_ASSERT_PTR_NOT_NULL(note);
        if (!note) {
            fprintf(stderr, "\n    case %zu: no note\n", i);
            free(page);
            continue;
        }
        char *end = strstr(note, "</p>");
        *end = '\0';
        expect_msg(note, path);
        /* The note is escaped: compare with the expectation escaped. */
        char want_html[512] = "";
        for (const char *w = want; *w; w++)
            strcat(want_html, *w == '"' ? "&quot;" : *w == '\'' ? "&#39;" : (char[2]){*w, 0});
        expect_msg(note, want_html);
        CU_ASSERT_PTR_NULL(strchr(note, '\n'));
        *end = '<';
        CU_ASSERT_EQUAL(count(page, "<svg "), count(plain, "<svg "));
        CU_ASSERT_PTR_NOT_NULL(strstr(page, "id=\"provenance\""));
        CU_ASSERT_PTR_NOT_NULL(strstr(page, "</html>"));
        free(page);
    }
    /* Over the limit (a sparse file: nothing written). */
    CU_ASSERT_EQUAL_FATAL(rmdir(path), 0);
    put(dir, "trace.json", "");
    CU_ASSERT_EQUAL_FATAL(truncate(path, (off_t)CT__TL_MAX_BYTES + 1), 0);
    struct ct__timeline t;
    CU_ASSERT_EQUAL(ct__timeline_load(path, &t), CT_ERANGE);
    expect_msg(ct_error_message(), "trace.json: 1024 MiB, over the report's limit of 1024 MiB for a trace");
    free(fixture);
    free(plain);
    ct_test_rmtree(dir);
}

/* ================================================================ main */

/* --svg OUT [TRACE]: the chart of TRACE as a file of its own. */
static int write_svg(const char *out, const char *trace)
{
    struct ct__timeline t;
    FILE *f = NULL;
    int rc = ct__timeline_load(trace, &t);
    if (rc == 0 && !(f = fopen(out, "w")))
        rc = ct_error_set(CT_EIO, "%s: cannot create", out);
    if (rc == 0) {
        fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n", f);
        rc = ct__timeline_svg_write(f, &t);
        if (fclose(f) != 0 && rc == 0)
            rc = ct_error_set(CT_EIO, "%s: write failed", out);
    }
    if (rc == 0)
        ct__timeline_free(&t);
    fprintf(rc < 0 ? stderr : stdout, "%s\n", rc < 0 ? ct_error_message() : out);
    return rc < 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "--svg") == 0)
        return write_svg(argv[2], argc > 3 ? argv[3] : FIXTURE);
    static const struct ct_test_case cases[] = {
        {"fixture: the step picked, its spans and their nesting", test_fixture_step},
        {"fixture: SVG groups, widths, legend, escaping", test_fixture_svg},
        {"a trace the trainer wrote: allreduce inside backward", test_real_trace},
        {"a step of 20000 spans: the cap", test_cap},
        {"3000 mutants of the fixture: parsed and drawn, or a message", test_mutants},
        {"the page: section, totals; malformed traces give a note; none, nothing", test_page},
        {NULL, NULL},
    };
    return ct_test_run("report_timeline", cases);
}
