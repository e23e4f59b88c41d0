/* Clock alignment (parallel/clocksync) and the trace window's collective
 * writing (train/trace_window) under real mpirun (1, 2 and 4 ranks).
 *
 * The ranks of one host share CLOCK_MONOTONIC, so the true offset of
 * ct_now_s is 0 and every measured offset must lie within its bound; a
 * clock moved by a rank-dependent skew must be recovered within the bound
 * (the proof in clocksync.h, checked). The window test records spans on
 * every rank, ends the window, and reads rank 0's trace.json back: every
 * rank's spans and names, each rank's barrier, the clock table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/clock.h"
#include "core/error.h"
#include "core/trace.h"
#include "ct_mpi_test.h"
#include "parallel/clocksync.h"
#include "run/json.h"
#include "train/trace_window.h"

static double g_skew;

static double skewed_now(void) { return ct_now_s() + g_skew; }

static void check_measure(double (*now)(void), const double *want_offset)
{
    const int W = g_comm.world;
    struct ct_clock_sample mine, *all = calloc((size_t)W, sizeof *all);
    CU_ASSERT_EQUAL_FATAL(ct_clocksync_measure(&g_comm, 16, now, &mine, all), 0);
    CU_ASSERT_EQUAL(all[0].offset_s, 0.0);
    CU_ASSERT_EQUAL(all[0].bound_s, 0.0);
    for (int r = 0; r < W; r++) {
        CU_ASSERT(all[r].bound_s >= 0.0 && all[r].bound_s < 0.5);
        if (fabs(all[r].offset_s - want_offset[r]) > all[r].bound_s + 1e-9) {
            fprintf(stderr, "rank %d: offset %.9f s, true %.9f s, bound %.9f s\n", r,
                    all[r].offset_s, want_offset[r], all[r].bound_s);
            CU_FAIL("an offset outside its bound");
        }
    }
    CU_ASSERT_EQUAL(mine.offset_s, all[g_comm.rank].offset_s);
    CU_ASSERT_EQUAL(mine.bound_s, all[g_comm.rank].bound_s);
    free(all);
}

static void test_measure_same_clock(void)
{
    double *zero = calloc((size_t)g_comm.world, sizeof *zero);
    check_measure(ct_now_s, zero);
    free(zero);
}

static void test_measure_skew(void)
{
    const int W = g_comm.world;
    double *want = calloc((size_t)W, sizeof *want);
    for (int r = 0; r < W; r++) /* rank 0 skewed too: offsets are relative to it */
        want[r] = (0.125 * r - 0.3) - (-0.3);
    g_skew = 0.125 * g_comm.rank - 0.3;
    check_measure(skewed_now, want);
    g_skew = 0.0;
    free(want);
}

static void test_measure_one_round(void)
{
    struct ct_clock_sample mine;
    CU_ASSERT_EQUAL(ct_clocksync_measure(&g_comm, 1, ct_now_s, &mine, NULL), 0);
    CU_ASSERT(fabs(mine.offset_s) <= mine.bound_s + 1e-9);
    CU_ASSERT_EQUAL(ct_clocksync_measure(&g_comm, 0, ct_now_s, &mine, NULL), CT_EINVAL);
}

/* The window over steps 2..3: opened at step 1, spans recorded, ended at 3. */
static void test_window_writes(void)
{
    char dir[256];
    ct_mpi_test_tmpdir(dir, sizeof dir);
    struct ct_trace_window tw;
    CU_ASSERT_EQUAL_FATAL(ct_trace_window_init(&tw, &g_comm, dir, 2, 3, 1, 0), 0);
    CU_ASSERT_EQUAL(ct_trace_window_step(&tw, 0), 0);
    CU_ASSERT_FALSE(ct_trace_on());
    CU_ASSERT_EQUAL(ct_trace_window_step(&tw, 1), 0);
    CU_ASSERT_TRUE(ct_trace_on());
    const double base = ct_now_s();
    for (int s = 2; s <= 3; s++) {
        const double t = base + 1e-2 * s; /* the steps' spans apart: two comm lanes */
        ct_trace_span_args(CT_TRACE_COMM, "comm", "allreduce", t, t + 1e-3, "bucket", 0, "bytes", 8);
        ct_trace_span_args(CT_TRACE_COMM, "comm", "allreduce", t, t + 1e-3, "bucket", 1, "bytes", 8);
        ct_trace_span_args(CT_TRACE_MAIN, "step", "step", t, t + 2e-3, "step", s, NULL, 0);
        CU_ASSERT_EQUAL(ct_trace_window_step(&tw, s), 0);
    }
    CU_ASSERT_FALSE(ct_trace_on());
    CU_ASSERT_EQUAL(ct_trace_window_close(&tw, 3), 0); /* already written: nothing */
    ct_trace_window_free(&tw);
    if (g_comm.rank == 0) {
        size_t len;
        uint8_t *text = ct_test_read_file(ct_test_path(dir, "trace.json"), &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        struct ct_json_doc d;
        CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, (const char *)text, len, NULL), 0);
        const struct ct_json_value *ev = ct_json_get(d.root, "traceEvents");
        int spans = 0, barriers = 0, names = 0;
        for (size_t i = 0; i < ev->n; i++) {
            const char *ph, *name;
            ct_json_get_string(&ev->items[i], "ph", &ph);
            ct_json_get_string(&ev->items[i], "name", &name);
            spans += ph[0] == 'X';
            barriers += strcmp(name, "barrier") == 0;
            names += strcmp(name, "thread_name") == 0;
        }
        CU_ASSERT_EQUAL(spans, g_comm.world * 7); /* 3 spans x 2 steps + the barrier */
        CU_ASSERT_EQUAL(barriers, g_comm.world);
        CU_ASSERT_EQUAL(names, g_comm.world * 3); /* main, comm 0, comm 1 */
        const struct ct_json_value *c = ct_json_get(ct_json_get(d.root, "otherData"), "ctrain");
        int64_t w;
        CU_ASSERT_EQUAL(ct_json_get_int64(c, "world", &w), 0);
        CU_ASSERT_EQUAL(w, g_comm.world);
        CU_ASSERT_EQUAL(ct_json_get(ct_json_get(c, "clock"), "bound_us")->n, (size_t)g_comm.world);
        ct_json_doc_free(&d);
        free(text);
        ct_test_rmtree(dir);
    }
}

/* More spans than log.trace_max_mb holds: the rest dropped and counted
 * (the barrier too, the buffer being full), the file still whole, also
 * when each rank's part crosses in many small gatherv's. */
static void test_window_cap(void)
{
    char dir[256];
    ct_mpi_test_tmpdir(dir, sizeof dir);
    struct ct_trace_window tw;
    CU_ASSERT_EQUAL_FATAL(ct_trace_window_init(&tw, &g_comm, dir, 1, 1, 1, 0), 0);
    CU_ASSERT_EQUAL(ct_trace_window_step(&tw, 0), 0);
    const int64_t cap = (1 << 20) / (int64_t)sizeof(struct ct_trace_event), n = cap + 100;
    const double t = ct_now_s();
    for (int64_t i = 0; i < n; i++)
        ct_trace_span(CT_TRACE_MAIN, "phase", "forward", t + 1e-6 * (double)i, t + 1e-6 * (double)i);
    const size_t piece = ct__trace_piece;
    ct__trace_piece = 4099; /* each part in many gatherv's */
    CU_ASSERT_EQUAL(ct_trace_window_step(&tw, 1), 0);
    ct__trace_piece = piece;
    ct_trace_window_free(&tw);
    if (g_comm.rank == 0) {
        size_t len;
        uint8_t *text = ct_test_read_file(ct_test_path(dir, "trace.json"), &len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(text);
        struct ct_json_doc d;
        struct ct_json_parse_params pp = ct_json_parse_default_params();
        pp.max_bytes = (size_t)1 << 30;
        CU_ASSERT_EQUAL_FATAL(ct_json_parse(&d, (const char *)text, len, &pp), 0);
        const struct ct_json_value *c = ct_json_get(ct_json_get(d.root, "otherData"), "ctrain");
        const struct ct_json_value *dropped = ct_json_get(c, "dropped_events");
        CU_ASSERT_EQUAL_FATAL(dropped->n, (size_t)g_comm.world);
        for (int r = 0; r < g_comm.world; r++) {
            int64_t v;
            CU_ASSERT_EQUAL(ct_json_as_int64(ct_json_at(dropped, (size_t)r), &v), 0);
            CU_ASSERT_EQUAL(v, n + 1 - cap); /* + the barrier */
        }
        CU_ASSERT_EQUAL(ct_json_get(d.root, "traceEvents")->n,
                        (size_t)g_comm.world * (size_t)(cap + 3)); /* + 3 metadata events */
        ct_json_doc_free(&d);
        free(text);
        ct_test_rmtree(dir);
    }
}

/* A window already past at a resume: never on, nothing written. */
static void test_window_past(void)
{
    char dir[256];
    ct_mpi_test_tmpdir(dir, sizeof dir);
    struct ct_trace_window tw;
    CU_ASSERT_EQUAL_FATAL(ct_trace_window_init(&tw, &g_comm, dir, 2, 3, 1, 3), 0);
    CU_ASSERT_EQUAL(ct_trace_window_step(&tw, 3), 0);
    CU_ASSERT_FALSE(ct_trace_on());
    CU_ASSERT_EQUAL(ct_trace_window_close(&tw, 4), 0);
    ct_trace_window_free(&tw);
    if (g_comm.rank == 0) {
        CU_ASSERT_NOT_EQUAL(access(ct_test_path(dir, "trace.json"), F_OK), 0);
        ct_test_rmtree(dir);
    }
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"measure_same_clock", test_measure_same_clock},
        {"measure_skew", test_measure_skew},
        {"measure_one_round", test_measure_one_round},
        {"window_writes", test_window_writes},
        {"window_cap", test_window_cap},
        {"window_past", test_window_past},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "clocksync", cases);
}
