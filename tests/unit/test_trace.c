/* Unit tests for the timeline trace's pure parts: core/trace (log.trace's
 * window syntax, the recorder on and off, its cap and drop count, spans from
 * several threads, the test-only skew, comm lanes that never overlap),
 * parallel/clocksync's interval intersection, and train/trace_json (names
 * escaped, timestamps aligned in whole nanoseconds, parents before their
 * children, otherData), read back with run/json's parser.
 */
#include "core/clock.h"
#include "core/error.h"
#include "core/trace.h"
#include "parallel/clocksync.h"
#include "run/json.h"
#include "train/trace_json.h"
#include "ct_test.h"

#include <pthread.h>

static void test_parse_window(void)
{
    int64_t a, b;
    char why[256];
    CU_ASSERT_EQUAL(ct_trace_parse_window("off", &a, &b, why, sizeof why), 0);
    CU_ASSERT(a == 0 && b == 0);
    CU_ASSERT_EQUAL(ct_trace_parse_window("steps:10-12", &a, &b, why, sizeof why), 0);
    CU_ASSERT(a == 10 && b == 12);
    CU_ASSERT_EQUAL(ct_trace_parse_window("steps:7-7", &a, &b, why, sizeof why), 0);
    CU_ASSERT(a == 7 && b == 7);
    static const char *const bad[] = {"", "on", "steps:", "steps:3", "steps:3-", "steps:-3",
                                      "steps:3-4x", "steps: 3-4", "steps:4-3", "steps:0-1",
                                      "steps:99999999999999999999-1", "Steps:1-2", NULL};
    for (int i = 0; bad[i]; i++) {
        why[0] = '\0';
        CU_ASSERT_EQUAL(ct_trace_parse_window(bad[i], &a, &b, why, sizeof why), -1);
        CU_ASSERT(strstr(why, bad[i]) != NULL); /* the message quotes the text */
    }
}

static void test_record_cap_drop(void)
{
    CU_ASSERT_EQUAL_FATAL(ct_trace_init(3 * sizeof(struct ct_trace_event), 0), 0);
    CU_ASSERT_FALSE(ct_trace_on());
    ct_trace_span(CT_TRACE_MAIN, "phase", "off", 1.0, 2.0); /* off: not kept */
    const struct ct_trace_event *ev;
    CU_ASSERT_EQUAL(ct_trace_snapshot(&ev), 0);
    ct_trace_set_on(1);
    CU_ASSERT_TRUE(ct_trace_on());
    for (int i = 0; i < 5; i++)
        ct_trace_span_args(CT_TRACE_COMM, "comm", "allreduce", i, i + 0.5, "bucket", i, "bytes", 4 * i);
    ct_trace_set_on(0);
    CU_ASSERT_EQUAL(ct_trace_snapshot(&ev), 3);
    CU_ASSERT_EQUAL(ct_trace_dropped(), 2);
    CU_ASSERT_EQUAL(ev[2].v0, 2);
    CU_ASSERT_EQUAL(ev[2].v1, 8);
    CU_ASSERT_STRING_EQUAL(ev[2].k1, "bytes");
    CU_ASSERT_EQUAL(atomic_load(&ev[2].ready), 1);
    /* An end before its begin (a clock read out of order) is clamped. */
    ct_trace_reset();
    ct_trace_set_on(1);
    ct_trace_span(CT_TRACE_MAIN, "phase", "x", 2.0, 1.0);
    CU_ASSERT_EQUAL(ct_trace_snapshot(&ev), 1);
    CU_ASSERT_EQUAL(ev[0].t1, ev[0].t0);
    ct_trace_free();
    CU_ASSERT_FALSE(ct_trace_on());
    ct_trace_set_on(1); /* without a buffer: stays off */
    CU_ASSERT_FALSE(ct_trace_on());
}

static void *recorder(void *arg)
{
    const int tid = *(const int *)arg;
    for (int i = 0; i < 1000; i++)
        ct_trace_span_args(tid, "loader", "batch", i, i + 1, "i", i, NULL, 0);
    return NULL;
}

static void test_threads(void)
{
    CU_ASSERT_EQUAL_FATAL(ct_trace_init(4000 * sizeof(struct ct_trace_event), 0), 0);
    ct_trace_set_on(1);
    pthread_t th[4];
    int tids[4] = {0, 1, 2, 3};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, recorder, &tids[i]), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    const struct ct_trace_event *ev;
    size_t n = ct_trace_snapshot(&ev);
    CU_ASSERT_EQUAL(n, 4000);
    CU_ASSERT_EQUAL(ct_trace_dropped(), 0);
    int64_t sum[4] = {0};
    for (size_t i = 0; i < n; i++) {
        CU_ASSERT_EQUAL(atomic_load(&ev[i].ready), 1);
        sum[ev[i].tid] += ev[i].v0;
    }
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(sum[i], 999 * 1000 / 2); /* each thread's spans, each once */
    ct_trace_free();
}

static void test_skew(void)
{
    setenv("CT_TRACE_CLOCK_SKEW", "1:0.25", 1);
    CU_ASSERT_EQUAL_FATAL(ct_trace_init(1024, 1), 0);
    CU_ASSERT_EQUAL(ct_trace_skew(), 0.25);
    const double t = ct_now_s(), s = ct_trace_now();
    CU_ASSERT(s - t > 0.24 && s - t < 0.26);
    ct_trace_set_on(1);
    ct_trace_span(CT_TRACE_MAIN, "phase", "x", 10.0, 11.0);
    const struct ct_trace_event *ev;
    CU_ASSERT_EQUAL_FATAL(ct_trace_snapshot(&ev), 1);
    CU_ASSERT_EQUAL(ev[0].t0, 10.25); /* spans carry the skewed clock too */
    CU_ASSERT_EQUAL_FATAL(ct_trace_init(1024, 0), 0); /* another rank: none */
    CU_ASSERT_EQUAL(ct_trace_skew(), 0.0);
    setenv("CT_TRACE_CLOCK_SKEW", "1-0.25", 1);
    CU_ASSERT_EQUAL(ct_trace_init(1024, 0), CT_EINVAL);
    CU_ASSERT(strstr(ct_error_message(), "CT_TRACE_CLOCK_SKEW='1-0.25'") != NULL);
    unsetenv("CT_TRACE_CLOCK_SKEW");
    ct_trace_free();
}

/* Comm spans: lanes never hold two overlapping spans, and there are as
 * many lanes as spans overlap at most. */
static void test_lanes(void)
{
    enum { N = 200 };
    static struct ct_trace_event ev[N];
    int tid[N];
    uint64_t x = 12345;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        ev[i].t0 = (double)(x >> 40 & 1023);
        ev[i].t1 = ev[i].t0 + (double)(x >> 20 & 63);
        ev[i].tid = i % 5 == 0 ? CT_TRACE_MAIN : i % 7 == 0 ? CT_TRACE_LOADER : CT_TRACE_COMM;
        atomic_store(&ev[i].ready, i != 3);
    }
    int lanes = ct_trace_assign_lanes(ev, N, tid);
    CU_ASSERT_FATAL(lanes > 1);
    CU_ASSERT_EQUAL(tid[3], -1); /* not ready: left out */
    int max_overlap = 0;
    for (int i = 0; i < N; i++) {
        if (i == 3)
            continue;
        if (ev[i].tid != CT_TRACE_COMM) {
            CU_ASSERT_EQUAL(tid[i], ev[i].tid);
            continue;
        }
        CU_ASSERT(tid[i] >= CT_TRACE_COMM && tid[i] < CT_TRACE_COMM + lanes);
        int overlap = 0;
        for (int j = 0; j < N; j++) {
            if (j == i || j == 3 || ev[j].tid != CT_TRACE_COMM)
                continue;
            int ov = ev[j].t0 < ev[i].t1 && ev[i].t0 < ev[j].t1;
            if (ov && tid[j] == tid[i])
                CU_FAIL("two overlapping comm spans on one lane");
            overlap += ov && ev[j].t0 <= ev[i].t0;
        }
        max_overlap = overlap + 1 > max_overlap ? overlap + 1 : max_overlap;
    }
    CU_ASSERT_EQUAL(lanes, max_overlap);
}

static void test_intersect(void)
{
    /* Rank r reads a = T + 5 with T in [t0, t1]: offset 5 in every interval. */
    const double t0[3] = {100, 200, 300}, t1[3] = {104, 201, 302}, a[3] = {107, 205.5, 306};
    double off, bound;
    CU_ASSERT_EQUAL(ct_clocksync_intersect(t0, t1, a, 3, &off, &bound), 0);
    /* [max(3, 4.5, 4), min(7, 5.5, 6)] = [4.5, 5.5] */
    CU_ASSERT_DOUBLE_EQUAL(off, 5.0, 1e-12);
    CU_ASSERT_DOUBLE_EQUAL(bound, 0.5, 1e-12);
    const double bad_a[2] = {107, 220};
    CU_ASSERT_EQUAL(ct_clocksync_intersect(t0, t1, bad_a, 2, &off, &bound), CT_EMISMATCH);
    CU_ASSERT_EQUAL(ct_clocksync_intersect(t0, t1, a, 0, &off, &bound), CT_EMISMATCH);
}

static struct ct_trace_event span(double t0, double t1, const char *cat, const char *name, int tid)
{
    struct ct_trace_event e = {.t0 = t0, .t1 = t1, .cat = cat, .name = name, .tid = tid};
    atomic_store(&e.ready, 1);
    return e;
}

static const struct ct_json_value *event(const struct ct_json_value *arr, const char *name)
{
    for (size_t i = 0; i < arr->n; i++) {
        const char *s;
        if (ct_json_get_string(&arr->items[i], "name", &s) == 0 && strcmp(s, name) == 0)
            return &arr->items[i];
    }
    return NULL;
}

/* A rank's part and the frame, parsed back: escaping, alignment, order. */
static void test_json(void)
{
    static const char odd[] = "mod\"ule\\x\n\t\x01";
    struct ct_trace_event ev[4];
    ev[0] = span(100.000002, 100.000003, "module", odd, CT_TRACE_MAIN); /* child, recorded first */
    ev[1] = span(100.000001, 100.000005, "phase", "forward", CT_TRACE_MAIN);
    ev[2] = span(100.0000015, 100.000004, "comm", "allreduce", CT_TRACE_COMM);
    ev[2].k0 = "bucket";
    ev[2].v0 = 3;
    ev[3] = span(99.0, 99.5, "loader", "batch", CT_TRACE_LOADER);
    /* offset 10 s, origin 90 s: ts = t - 100 s */
    const struct ct_trace_align al = {.origin = 90.0, .offset0 = 10.0, .local0 = 90.0,
                                      .offset1 = 10.0, .local1 = 110.0};
    struct ct_trace_text t = {0};
    CU_ASSERT_EQUAL_FATAL(ct_trace_json_part(&t, ev, 4, 1, "h\"1", &al), 0);
    const char *hosts[2] = {"h0", "h\"1"};
    const double off[2] = {0, 10e6}, bound[2] = {0, 0.5};
    const int64_t dropped[2] = {0, 7};
    const struct ct_trace_meta m = {.first = 3, .last = 5, .world = 2, .hosts = hosts,
                                    .offset_us = off, .offset_end_us = off, .bound_us = bound,
                                    .rounds = 16, .dropped = dropped, .max_mb = 64,
                                    .code_version = "v"};
    struct ct_trace_text tail = {0};
    CU_ASSERT_EQUAL_FATAL(ct_trace_json_tail(&tail, &m), 0);
    size_t n = strlen(ct_trace_json_head()) + t.len + tail.len + 1;
    char *doc = malloc(n);
    snprintf(doc, n, "%s%s%s", ct_trace_json_head(), t.buf, tail.buf);
    struct ct_json_doc d;
    CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, doc, strlen(doc), NULL), 0);
    const struct ct_json_value *arr = ct_json_get(d.root, "traceEvents");
    CU_ASSERT_PTR_NOT_NULL_FATAL(arr);
    /* process name + sort index + main, loader, comm 0 + 4 spans */
    CU_ASSERT_EQUAL(arr->n, 9);
    const char *pname;
    CU_ASSERT_EQUAL(ct_json_get_string(ct_json_get(event(arr, "process_name"), "args"), "name", &pname), 0);
    CU_ASSERT_STRING_EQUAL(pname, "rank 1 (h\"1)");
    const struct ct_json_value *mod = event(arr, odd), *fwd = event(arr, "forward");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mod);
    CU_ASSERT_PTR_NOT_NULL_FATAL(fwd);
    CU_ASSERT(fwd < mod); /* the parent first */
    double ts, dur;
    CU_ASSERT_EQUAL(ct_json_get_double(fwd, "ts", &ts), 0);
    CU_ASSERT_EQUAL(ct_json_get_double(fwd, "dur", &dur), 0);
    CU_ASSERT_DOUBLE_EQUAL(ts, 1.0, 1e-9); /* 100.000001 - 10 - 90 s, in us */
    CU_ASSERT_DOUBLE_EQUAL(dur, 4.0, 1e-9);
    const struct ct_json_value *ar = event(arr, "allreduce");
    int64_t v;
    CU_ASSERT_EQUAL(ct_json_get_int64(ar, "tid", &v), 0);
    CU_ASSERT_EQUAL(v, 2);
    CU_ASSERT_EQUAL(ct_json_get_int64(ct_json_get(ar, "args"), "bucket", &v), 0);
    CU_ASSERT_EQUAL(v, 3);
    const struct ct_json_value *c = ct_json_get(ct_json_get(d.root, "otherData"), "ctrain");
    CU_ASSERT_EQUAL(ct_json_as_int64(ct_json_at(ct_json_get(c, "dropped_events"), 1), &v), 0);
    CU_ASSERT_EQUAL(v, 7);
    const char *h;
    CU_ASSERT_EQUAL(ct_json_as_string(ct_json_at(ct_json_get(c, "hosts"), 1), &h), 0);
    CU_ASSERT_STRING_EQUAL(h, "h\"1");
    double b;
    CU_ASSERT_EQUAL(ct_json_as_double(ct_json_at(ct_json_get(ct_json_get(c, "clock"), "bound_us"), 1), &b), 0);
    CU_ASSERT_DOUBLE_EQUAL(b, 0.5, 1e-9);
    ct_json_doc_free(&d);
    free(doc);
    free(t.buf);
    free(tail.buf);
}

/* Drift: the offset interpolated between the two measurements. */
static void test_align_drift(void)
{
    const struct ct_trace_align al = {.origin = 0.0, .offset0 = 1.0, .local0 = 100.0,
                                      .offset1 = 1.002, .local1 = 200.0};
    CU_ASSERT_EQUAL(ct_trace_align_ns(&al, 100.0), 99000000000);
    CU_ASSERT_EQUAL(ct_trace_align_ns(&al, 150.0), 148999000000);
    CU_ASSERT_EQUAL(ct_trace_align_ns(&al, 200.0), 198998000000);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"parse_window", test_parse_window},
        {"record_cap_drop", test_record_cap_drop},
        {"threads", test_threads},
        {"skew", test_skew},
        {"lanes", test_lanes},
        {"intersect", test_intersect},
        {"json", test_json},
        {"align_drift", test_align_drift},
        {NULL, NULL},
    };
    return ct_test_run("trace", cases);
}
