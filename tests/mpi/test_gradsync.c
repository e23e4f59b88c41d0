/* Gradient sync under real mpirun (1, 2 and 4 ranks), and the communicator's
 * non-blocking collectives it is built on.
 *
 * A simulated backward writes each module's gradients just before reporting
 * the module to the hook, over a buffer whose module regions start out as
 * NaN: a bucket started before all its modules were final would carry a NaN
 * into the sum. Padding holds values from the start, so a bucket plan that
 * missed it would show too. Checked, for caps that give one bucket per module
 * up to one bucket for everything: overlap and blocking give the same bits;
 * small-integer gradients sum exactly; the side channel returns the max; the
 * hook reported in reverse with work in between, never, twice, or only for
 * modules with parameters changes nothing; steps repeat on one plan; every
 * rank ends with the same bits. */
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ct_mpi_test.h"
#include "parallel/gradsync.h"

/* Leading padding, an empty module between two others, padding between
 * modules, module 3 far above the small caps, empty last module, trailing
 * padding. */
static const struct ct_grad_span g_spans[] = {
    {3, 50},       {50, 50},       {64, 1000},     {1000, 71000},
    {71000, 71000}, {71008, 71100}, {71104, 72000}, {0, 0},
};
enum { N_MODULES = 8, NUMEL = 72013 };

static struct ct_gradsync_params params(size_t first, size_t rest, int overlap)
{
    struct ct_gradsync_params p = ct_gradsync_default_params();
    p.first_bucket_bytes = first;
    p.bucket_bytes = rest;
    p.overlap = overlap;
    return p;
}

/* From a bucket per module with parameters to one bucket for all. */
static const size_t g_caps[][2] = {
    {1, 1}, {256, 4096}, {16384, 65536}, {(size_t)1 << 20, (size_t)4 << 20}, {SIZE_MAX, SIZE_MAX},
};
enum { N_CAPS = sizeof g_caps / sizeof g_caps[0] };

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Rank r's gradient i at step s: a pure function, so any rank can compute
 * any other rank's values. Integers in [-8, 8] sum exactly in any order;
 * otherwise values of mixed magnitude whose sum depends on the order. */
static float value(int rank, int step, size_t i, int integers)
{
    uint64_t h = mix(((uint64_t)rank << 48) ^ ((uint64_t)step << 32) ^ i ^ 0x5eedull);
    if (integers)
        return (float)((int)(h % 17) - 8);
    double u = (double)(h >> 11) * 0x1p-53 * 2.0 - 1.0;
    return (float)ldexp(u, (int)(h % 12) - 6);
}

static void fill(float *g, int rank, int step, int integers, size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++)
        g[i] = value(rank, step, i, integers);
}

enum hook_mode {
    HOOK_REVERSE,      /* every module, last to first */
    HOOK_WORK,         /* same, with computation between modules */
    HOOK_NEVER,        /* finish does everything */
    HOOK_TWICE,        /* every module reported twice */
    HOOK_PARAMS_ONLY,  /* modules without parameters not reported */
    HOOK_MODE_COUNT
};

static volatile double g_sink;

/* Some arithmetic between modules, long enough that MPI has started
 * buckets in flight while we compute, as in a real backward. */
static void work(void)
{
    double acc = 0;
    for (int i = 0; i < 20000; i++)
        acc += sqrt((double)i + g_sink);
    g_sink = acc * 1e-30;
}

/* One step: module regions are NaN until the simulated backward writes them,
 * padding holds values from the start. Returns finish's code. */
static int run_step(struct ct_gradsync *gs, float *g, int step, int integers, enum hook_mode mode,
                    int64_t side, int64_t *side_out)
{
    struct ct_comm *c = &g_comm;
    fill(g, c->rank, step, integers, 0, NUMEL);
    for (int i = 0; i < N_MODULES; i++)
        for (size_t k = g_spans[i].begin; k < g_spans[i].end; k++)
            g[k] = NAN;
    int rc = ct_gradsync_begin(gs, side);
    CU_ASSERT_EQUAL(rc, 0);
    for (int i = N_MODULES - 1; i >= 0; i--) {
        fill(g, c->rank, step, integers, g_spans[i].begin, g_spans[i].end);
        int has = g_spans[i].end > g_spans[i].begin;
        if (mode == HOOK_NEVER || (mode == HOOK_PARAMS_ONLY && !has))
            continue;
        ct_gradsync_hook(gs, i);
        if (mode == HOOK_TWICE)
            ct_gradsync_hook(gs, i);
        if (mode == HOOK_WORK)
            work();
    }
    rc = ct_gradsync_finish(gs, side_out);
    if (rc < 0)
        fprintf(stderr, "[rank %d] finish: %s\n", c->rank, ct_error_message());
    return rc;
}

/* Count ranks whose buffer differs from rank 0's, bit for bit (all ranks
 * get the count). */
static int ranks_differing(const float *g, size_t n)
{
    struct ct_comm *c = &g_comm;
    float *r0 = malloc(n * sizeof *r0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(r0);
    memcpy(r0, g, n * sizeof *r0);
    CU_ASSERT_EQUAL(ct_comm_bcast(c, r0, n * sizeof *r0, 0), 0);
    int64_t differ = memcmp(r0, g, n * sizeof *r0) != 0;
    free(r0);
    CU_ASSERT_EQUAL(ct_comm_allreduce_i64(c, &differ, 1, CT_REDUCE_SUM), 0);
    return (int)differ;
}

static size_t bits_differ(const char *label, const float *a, const float *b, size_t n)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        if (memcmp(&a[i], &b[i], sizeof *a) != 0 && bad++ < 3)
            fprintf(stderr, "  [rank %d] %s[%zu]: %.9g vs %.9g\n", g_comm.rank, label, i,
                    (double)a[i], (double)b[i]);
    return bad;
}

/* ---------------------------------------------------------------- comm ops */

static void test_requests(void)
{
    struct ct_comm *c = &g_comm;
    const size_t n[3] = {1, 1000, (size_t)1 << 20};
    float *buf[3];
    struct ct_request req[3];
    memset(req, 0, sizeof req);
    for (int b = 0; b < 3; b++) {
        buf[b] = malloc(n[b] * sizeof(float));
        CU_ASSERT_PTR_NOT_NULL_FATAL(buf[b]);
        for (size_t i = 0; i < n[b]; i++)
            buf[b][i] = (float)((c->rank + 1) * (int)(i % 100 + b));
    }
    int64_t mx[2] = {c->rank, -((int64_t)c->rank << 40)};
    int64_t sum = (int64_t)1 << 40 | c->rank;
    struct ct_request rmx = {0}, rsum = {0};
    /* Five collectives in flight at once, completed in another order than
     * they started. */
    for (int b = 0; b < 3; b++)
        CU_ASSERT_EQUAL(ct_comm_iallreduce_f32(c, buf[b], n[b], CT_REDUCE_SUM, &req[b]), 0);
    CU_ASSERT_EQUAL(ct_comm_iallreduce_i64(c, mx, 2, CT_REDUCE_MAX, &rmx), 0);
    CU_ASSERT_EQUAL(ct_comm_iallreduce_i64(c, &sum, 1, CT_REDUCE_SUM, &rsum), 0);
    CU_ASSERT_EQUAL(req[2].active, 1);
    int done = 0;
    while (!done)
        CU_ASSERT_EQUAL_FATAL(ct_comm_test(c, &req[2], &done), 0);
    CU_ASSERT_EQUAL(req[2].active, 0);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &rsum), 0);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &rmx), 0);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &req[0]), 0);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &req[1]), 0);
    /* Completed requests are inactive: test says done, wait returns. */
    CU_ASSERT_EQUAL(ct_comm_test(c, &req[1], &done), 0);
    CU_ASSERT_EQUAL(done, 1);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &req[1]), 0);

    int64_t W = c->world, tri = W * (W + 1) / 2;
    for (int b = 0; b < 3; b++) {
        size_t bad = 0;
        for (size_t i = 0; i < n[b]; i++)
            bad += buf[b][i] != (float)(tri * (int64_t)(i % 100 + b));
        CU_ASSERT_EQUAL(bad, 0);
        free(buf[b]);
    }
    CU_ASSERT_EQUAL(mx[0], W - 1);
    CU_ASSERT_EQUAL(mx[1], 0);
    CU_ASSERT_EQUAL(sum, (W << 40) + W * (W - 1) / 2);

    /* MIN, and a zero count. */
    int64_t mn = 10 - c->rank;
    CU_ASSERT_EQUAL(ct_comm_iallreduce_i64(c, &mn, 1, CT_REDUCE_MIN, &rmx), 0);
    CU_ASSERT_EQUAL(ct_comm_iallreduce_f32(c, NULL, 0, CT_REDUCE_SUM, &rsum), 0);
    /* Starting into a request in flight would lose its handle. */
    CU_ASSERT_EQUAL_FATAL(rmx.active, 1);
    CU_ASSERT_EQUAL(ct_comm_iallreduce_i64(c, &mn, 1, CT_REDUCE_MIN, &rmx), CT_ESTATE);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &rmx), 0);
    CU_ASSERT_EQUAL(ct_comm_wait(c, &rsum), 0);
    CU_ASSERT_EQUAL(mn, 10 - (W - 1));

    /* One request is one MPI call: over INT_MAX elements is refused before
     * anything starts (the buffer is never touched). */
    float one = 0;
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_comm_iallreduce_f32(c, &one, (size_t)INT_MAX + 1, CT_REDUCE_SUM, &rsum),
                    CT_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "2147483648 elements"));
    CU_ASSERT_EQUAL(rsum.active, 0);
    CU_ASSERT_EQUAL(ct_comm_barrier(c), 0);
}

/* ---------------------------------------------------------------- gradsync */

static void test_plan_shapes(void)
{
    struct ct_comm *c = &g_comm;
    float *g = ct_test_floats(NUMEL);
    const int want[N_CAPS] = {5, -1, -1, 1, 1}; /* -1: somewhere between */
    for (int k = 0; k < N_CAPS; k++) {
        struct ct_gradsync_params p = params(g_caps[k][0], g_caps[k][1], 1);
        struct ct_gradsync gs;
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, c, g, NUMEL, g_spans, N_MODULES, &p), 0);
        if (want[k] > 0) {
            CU_ASSERT_EQUAL(gs.n_buckets, want[k]);
        } else {
            CU_ASSERT(gs.n_buckets > 1 && gs.n_buckets < 5);
        }
        ct_gradsync_free(&gs);
    }
    free(g);
}

/* (a), (e), (f): overlap and blocking give the same bits, step after step on
 * one plan each, and every rank holds the same bits. */
static void test_modes_same_bits(void)
{
    struct ct_comm *c = &g_comm;
    float *g = ct_test_floats(NUMEL), *ref = ct_test_floats(NUMEL);
    for (int k = 0; k < N_CAPS; k++) {
        struct ct_gradsync_params po = params(g_caps[k][0], g_caps[k][1], 1);
        struct ct_gradsync_params pb = params(g_caps[k][0], g_caps[k][1], 0);
        struct ct_gradsync go, gb;
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&go, c, g, NUMEL, g_spans, N_MODULES, &po), 0);
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gb, c, g, NUMEL, g_spans, N_MODULES, &pb), 0);
        for (int step = 0; step < 3; step++) {
            int64_t side = 0;
            CU_ASSERT_EQUAL(run_step(&gb, g, step, 0, HOOK_REVERSE, 0, &side), 0);
            memcpy(ref, g, NUMEL * sizeof *g);
            CU_ASSERT_EQUAL(run_step(&go, g, step, 0, HOOK_WORK, 0, &side), 0);
            char label[64];
            snprintf(label, sizeof label, "caps %zu/%zu step %d", g_caps[k][0], g_caps[k][1],
                     step);
            CU_ASSERT_EQUAL(bits_differ(label, g, ref, NUMEL), 0);
            CU_ASSERT_EQUAL(ranks_differing(g, NUMEL), 0);
            /* All but the last, which finish reduces with a blocking call. */
            CU_ASSERT_EQUAL(go.n_started_in_backward, go.n_buckets - 1);
            CU_ASSERT_EQUAL(gb.n_started_in_backward, 0);
            CU_ASSERT(go.exposed_s >= 0 && gb.exposed_s >= 0);
        }
        CU_ASSERT_EQUAL(go.steps, 3);
        CU_ASSERT_EQUAL(gb.steps, 3);
        ct_gradsync_free(&go);
        ct_gradsync_free(&gb);
    }
    free(ref);
    free(g);
}

/* (b): small integers sum exactly whatever the algorithm, so the result is
 * the sum computed here from every rank's values, padding included. */
static void test_exact_sum(void)
{
    struct ct_comm *c = &g_comm;
    float *g = ct_test_floats(NUMEL), *want = ct_test_floats(NUMEL);
    for (int k = 0; k < N_CAPS; k++) {
        for (int overlap = 0; overlap <= 1; overlap++) {
            struct ct_gradsync_params p = params(g_caps[k][0], g_caps[k][1], overlap);
            struct ct_gradsync gs;
            CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, c, g, NUMEL, g_spans, N_MODULES, &p), 0);
            for (int step = 0; step < 2; step++) {
                CU_ASSERT_EQUAL(run_step(&gs, g, step, 1, HOOK_WORK, 0, NULL), 0);
                for (size_t i = 0; i < NUMEL; i++) {
                    int s = 0;
                    for (int r = 0; r < c->world; r++)
                        s += (int)value(r, step, i, 1);
                    want[i] = (float)s;
                }
                char label[64];
                snprintf(label, sizeof label, "exact caps %zu overlap %d", g_caps[k][0], overlap);
                CT_ASSERT_CLOSE(label, g, want, NUMEL, 0, 0);
            }
            ct_gradsync_free(&gs);
        }
    }
    free(want);
    free(g);
}

/* A bucket above max_call_bytes goes as several collectives: the pieces
 * tile the buffer from the top down, none above the limit, each ready with
 * its planned bucket (ready_after never rises); the sums are exact in both
 * modes and the bits those of uncut buckets. */
static void test_cut_collectives(void)
{
    struct ct_comm *c = &g_comm;
    float *g = ct_test_floats(NUMEL), *ref = ct_test_floats(NUMEL);
    for (int overlap = 0; overlap <= 1; overlap++) {
        struct ct_gradsync_params whole = params(256, 4096, overlap), cut = whole;
        whole.max_call_bytes = 0;
        cut.max_call_bytes = 4096;
        struct ct_gradsync gw, gc;
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gw, c, g, NUMEL, g_spans, N_MODULES, &whole), 0);
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gc, c, g, NUMEL, g_spans, N_MODULES, &cut), 0);
        /* Module 3 alone is 70,000 floats: at least 69 pieces of 1024. */
        CU_ASSERT(gc.n_buckets >= gw.n_buckets + 68);
        CU_ASSERT_EQUAL(gc.buckets[0].end, (size_t)NUMEL);
        CU_ASSERT_EQUAL(gc.buckets[gc.n_buckets - 1].begin, 0);
        for (int k = 0; k < gc.n_buckets; k++) {
            CU_ASSERT(gc.buckets[k].end > gc.buckets[k].begin);
            CU_ASSERT(gc.buckets[k].end - gc.buckets[k].begin <= 1024);
            if (k > 0) {
                CU_ASSERT_EQUAL(gc.buckets[k].end, gc.buckets[k - 1].begin);
                CU_ASSERT(gc.buckets[k].ready_after <= gc.buckets[k - 1].ready_after);
            }
        }
        for (int step = 0; step < 2; step++) {
            CU_ASSERT_EQUAL(run_step(&gw, g, step, 0, HOOK_WORK, 0, NULL), 0);
            memcpy(ref, g, NUMEL * sizeof *g);
            CU_ASSERT_EQUAL(run_step(&gc, g, step, 0, HOOK_WORK, 0, NULL), 0);
            if (c->world <= 2)
                CU_ASSERT_EQUAL(bits_differ("cut vs whole", g, ref, NUMEL), 0);
            CU_ASSERT_EQUAL(ranks_differing(g, NUMEL), 0);
            CU_ASSERT_EQUAL(run_step(&gc, g, step, 1, HOOK_WORK, 0, NULL), 0);
            for (size_t i = 0; i < NUMEL; i++) {
                int sum = 0;
                for (int r = 0; r < c->world; r++)
                    sum += (int)value(r, step, i, 1);
                ref[i] = (float)sum;
            }
            CT_ASSERT_CLOSE("cut, exact", g, ref, NUMEL, 0, 0);
        }
        if (overlap)
            CU_ASSERT_EQUAL(gc.n_started_in_backward, gc.n_buckets - 1);
        ct_gradsync_free(&gw);
        ct_gradsync_free(&gc);
    }
    free(ref);
    free(g);
}

/* (c): the side channel is the max over ranks, whichever rank holds it and
 * whatever the sign, in both modes. */
static void test_side_channel(void)
{
    struct ct_comm *c = &g_comm;
    float *g = ct_test_floats(NUMEL);
    for (int overlap = 0; overlap <= 1; overlap++) {
        struct ct_gradsync_params p = params(256, 4096, overlap);
        struct ct_gradsync gs;
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, c, g, NUMEL, g_spans, N_MODULES, &p), 0);
        for (int step = 0; step < 4; step++) {
            /* The max sits on a different rank each step; step 3 is all
             * negative and large. */
            int holder = step % c->world;
            int64_t mine = c->rank == holder ? 1000 + step : -(int64_t)c->rank;
            if (step == 3)
                mine = -((int64_t)1 << 50) - c->rank;
            int64_t want = step == 3 ? -((int64_t)1 << 50) : 1000 + step;
            int64_t got = 0;
            CU_ASSERT_EQUAL(run_step(&gs, g, step, 1, HOOK_REVERSE, mine, &got), 0);
            CU_ASSERT_EQUAL(got, want);
        }
        ct_gradsync_free(&gs);
    }
    free(g);
}

/* (d): however the hook is called, the bits are those of blocking mode. */
static void test_hook_variants(void)
{
    struct ct_comm *c = &g_comm;
    static const char *names[HOOK_MODE_COUNT] = {"reverse", "work", "never", "twice",
                                                 "params only"};
    float *g = ct_test_floats(NUMEL), *ref = ct_test_floats(NUMEL);
    for (int k = 0; k < N_CAPS; k++) {
        struct ct_gradsync_params pb = params(g_caps[k][0], g_caps[k][1], 0);
        struct ct_gradsync_params po = params(g_caps[k][0], g_caps[k][1], 1);
        struct ct_gradsync gb, go;
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gb, c, g, NUMEL, g_spans, N_MODULES, &pb), 0);
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&go, c, g, NUMEL, g_spans, N_MODULES, &po), 0);
        CU_ASSERT_EQUAL(run_step(&gb, g, 7, 0, HOOK_NEVER, 0, NULL), 0);
        memcpy(ref, g, NUMEL * sizeof *g);
        for (int mode = 0; mode < HOOK_MODE_COUNT; mode++) {
            CU_ASSERT_EQUAL(run_step(&go, g, 7, 0, (enum hook_mode)mode, 0, NULL), 0);
            char label[80];
            snprintf(label, sizeof label, "hook %s caps %zu", names[mode], g_caps[k][0]);
            CU_ASSERT_EQUAL(bits_differ(label, g, ref, NUMEL), 0);
            CU_ASSERT_EQUAL(go.n_started_in_backward, mode == HOOK_NEVER ? 0 : go.n_buckets - 1);
        }
        CU_ASSERT_EQUAL(ranks_differing(g, NUMEL), 0);
        ct_gradsync_free(&go);
        ct_gradsync_free(&gb);
    }
    free(ref);
    free(g);
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"non-blocking comm ops", test_requests},
        {"bucket counts per cap", test_plan_shapes},
        {"overlap and blocking: same bits, every rank", test_modes_same_bits},
        {"small integers: exact sums", test_exact_sum},
        {"buckets cut at max_call_bytes", test_cut_collectives},
        {"side channel: max over ranks", test_side_channel},
        {"hook called in any allowed way", test_hook_variants},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "gradsync", cases);
}
