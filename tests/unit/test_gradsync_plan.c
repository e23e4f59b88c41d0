/* The gradient bucket planner without MPI, and the gradsync runtime over the
 * in-process "self" communicator (its bookkeeping: which buckets the hook
 * starts when, state errors).
 *
 * Every plan is checked against properties computed here from the spans
 * themselves (exact tiling of [0, numel), modules never split, reverse module
 * order, ready_after, caps reached and not overshot by a whole module), on
 * hand-made layouts with exact expectations and on random layouts. The real
 * sums over ranks are tested under mpirun in tests/mpi/test_gradsync.c. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ct_test.h"
#include "parallel/comm.h"
#include "parallel/gradsync.h"

static struct ct_gradsync_params caps(size_t first, size_t rest)
{
    struct ct_gradsync_params p = ct_gradsync_default_params();
    p.first_bucket_bytes = first;
    p.bucket_bytes = rest;
    return p;
}

static int nonempty(const struct ct_grad_span *s) { return s->end > s->begin; }

/* Every promise of ct_gradsync_plan, checked independently of how the
 * planner works. Prints each violation; returns how many. */
static int check_plan(const char *label, const struct ct_grad_span *sp, int n, size_t numel,
                      const struct ct_gradsync_params *p, const struct ct_bucket *b, int nb)
{
    int bad = 0;
#define VIOLATION(...)                                                                    \
    do {                                                                                  \
        if (bad++ < 5) {                                                                  \
            fprintf(stderr, "  %s: ", label);                                             \
            fprintf(stderr, __VA_ARGS__);                                                 \
            fprintf(stderr, "\n");                                                        \
        }                                                                                 \
    } while (0)
    if (numel == 0) {
        if (nb != 0)
            VIOLATION("%d buckets for an empty buffer", nb);
        return bad;
    }
    if (nb < 1 || nb > (n > 1 ? n : 1)) {
        VIOLATION("%d buckets for %d modules", nb, n);
        return bad;
    }
    /* Exact tiling, from numel down to 0, no empty bucket. */
    if (b[0].end != numel)
        VIOLATION("first bucket ends at %zu, not numel %zu", b[0].end, numel);
    if (b[nb - 1].begin != 0)
        VIOLATION("last bucket begins at %zu, not 0", b[nb - 1].begin);
    for (int k = 0; k < nb; k++) {
        if (b[k].begin >= b[k].end)
            VIOLATION("bucket %d is [%zu, %zu)", k, b[k].begin, b[k].end);
        if (k + 1 < nb && b[k + 1].end != b[k].begin)
            VIOLATION("gap or overlap between bucket %d [%zu,..) and %d [..,%zu)", k, b[k].begin,
                      k + 1, b[k + 1].end);
    }
    /* Each module with parameters lies in exactly one bucket; lower modules
     * in later (or the same) buckets. */
    int prev_bucket = nb;
    for (int i = 0; i < n; i++) {
        if (!nonempty(&sp[i]))
            continue;
        int in = -1;
        for (int k = 0; k < nb; k++)
            if (b[k].begin <= sp[i].begin && sp[i].end <= b[k].end)
                in = k;
        if (in < 0)
            VIOLATION("module %d [%zu, %zu) is split", i, sp[i].begin, sp[i].end);
        else if (in > prev_bucket)
            VIOLATION("module %d in bucket %d, after a lower module's bucket %d", i, in,
                      prev_bucket);
        if (in >= 0)
            prev_bucket = in;
    }
    for (int k = 0; k < nb; k++) {
        /* The lowest and second-lowest modules with parameters in it. */
        int lo = -1, second = -1;
        for (int i = 0; i < n; i++) {
            if (!nonempty(&sp[i]) || sp[i].begin < b[k].begin || sp[i].end > b[k].end)
                continue;
            if (lo < 0)
                lo = i;
            else if (second < 0)
                second = i;
        }
        int want = lo >= 0 ? lo : 0;
        if (b[k].ready_after != want)
            VIOLATION("bucket %d: ready_after %d, want %d", k, b[k].ready_after, want);
        if (k > 0 && b[k].ready_after >= b[k - 1].ready_after)
            VIOLATION("bucket %d ready after module %d, not before bucket %d's %d", k,
                      b[k].ready_after, k - 1, b[k - 1].ready_after);
        if (lo < 0) {
            if (nb != 1)
                VIOLATION("bucket %d holds no module", k);
            continue;
        }
        size_t cap = k == 0 ? p->first_bucket_bytes : p->bucket_bytes;
        size_t reached = (b[k].end - sp[lo].begin) * sizeof(float);
        if (k < nb - 1 && reached < cap)
            VIOLATION("bucket %d closed at %zu bytes, below its cap %zu", k, reached, cap);
        if (second >= 0 && (b[k].end - sp[second].begin) * sizeof(float) >= cap)
            VIOLATION("bucket %d reached its cap %zu at module %d but went on to module %d", k,
                      cap, second, lo);
    }
#undef VIOLATION
    return bad;
}

/* Plan into a fresh array and check it; returns the count (or the error). */
static int plan_checked(const char *label, const struct ct_grad_span *sp, int n, size_t numel,
                        const struct ct_gradsync_params *p, struct ct_bucket *out, int max_out)
{
    int nb = ct_gradsync_plan(sp, n, numel, p, out, max_out);
    if (nb < 0) {
        fprintf(stderr, "  %s: %s\n", label, ct_error_message());
        return nb;
    }
    CU_ASSERT_EQUAL(ct_gradsync_plan(sp, n, numel, p, NULL, 0), nb);
    struct ct_gradsync_params defaults = ct_gradsync_default_params();
    CU_ASSERT_EQUAL(check_plan(label, sp, n, numel, p ? p : &defaults, out, nb), 0);
    return nb;
}

static void expect_buckets(const struct ct_bucket *got, int nb, const struct ct_bucket *want,
                           int nw)
{
    CU_ASSERT_EQUAL_FATAL(nb, nw);
    for (int k = 0; k < nw; k++) {
        if (got[k].begin != want[k].begin || got[k].end != want[k].end ||
            got[k].ready_after != want[k].ready_after)
            fprintf(stderr, "  bucket %d: got [%zu, %zu) after %d, want [%zu, %zu) after %d\n", k,
                    got[k].begin, got[k].end, got[k].ready_after, want[k].begin, want[k].end,
                    want[k].ready_after);
        CU_ASSERT_EQUAL(got[k].begin, want[k].begin);
        CU_ASSERT_EQUAL(got[k].end, want[k].end);
        CU_ASSERT_EQUAL(got[k].ready_after, want[k].ready_after);
    }
}

static void test_defaults(void)
{
    struct ct_gradsync_params p = ct_gradsync_default_params();
    CU_ASSERT_EQUAL(p.bucket_bytes, (size_t)4 << 20);
    CU_ASSERT_EQUAL(p.first_bucket_bytes, (size_t)1 << 20);
    CU_ASSERT_EQUAL(p.overlap, 1);
}

/* A hand-worked layout: padding between modules, an empty module, trailing
 * padding, a small first cap and a module larger than the other cap. */
static void test_exact(void)
{
    const struct ct_grad_span sp[] = {{0, 100}, {7, 7}, {100, 300}, {304, 1304}, {1304, 1310}};
    struct ct_gradsync_params p = caps(40, 800); /* 10 and 200 floats */
    struct ct_bucket b[5];
    int nb = plan_checked("exact", sp, 5, 1320, &p, b, 5);
    const struct ct_bucket want[] = {
        {1304, 1320, 4}, /* 16 floats >= 10: the small first bucket, trailing padding in it */
        {304, 1304, 3},  /* the big module alone */
        {100, 304, 2},   /* 204 >= 200, the padding above module 2 included */
        {0, 100, 0},     /* what is left, below the cap; the empty module 1 is in it */
    };
    expect_buckets(b, nb, want, 4);

    /* Modules gather until the cap: modules 2 and 0 with the padding between
     * them, 304 floats, reach 1200 bytes only with module 0. */
    p = caps(4, 1200);
    nb = plan_checked("gather", sp, 5, 1320, &p, b, 5);
    const struct ct_bucket want2[] = {{1304, 1320, 4}, {304, 1304, 3}, {0, 304, 0}};
    expect_buckets(b, nb, want2, 3);
}

static void test_one_bucket(void)
{
    const struct ct_grad_span sp[] = {{0, 0}, {3, 50}, {50, 50}, {64, 1000}, {1000, 1000}};
    struct ct_bucket b[5];
    /* Caps beyond the buffer: one bucket, ready after the lowest module with
     * parameters, whatever the defaults say. */
    struct ct_gradsync_params p = caps(SIZE_MAX, SIZE_MAX);
    int nb = plan_checked("huge caps", sp, 5, 1003, &p, b, 5);
    expect_buckets(b, nb, (const struct ct_bucket[]){{0, 1003, 1}}, 1);
    nb = plan_checked("defaults", sp, 5, 1003, NULL, b, 5);
    expect_buckets(b, nb, (const struct ct_bucket[]){{0, 1003, 1}}, 1);

    /* One module, with padding around it, any cap. */
    const struct ct_grad_span one[] = {{5, 50}};
    for (size_t cap = 0; cap < 400; cap += 7) {
        p = caps(cap, cap);
        nb = plan_checked("one module", one, 1, 64, &p, b, 1);
        expect_buckets(b, nb, (const struct ct_bucket[]){{0, 64, 0}}, 1);
    }
}

/* Caps of 0 or 1 byte: one bucket per module with parameters; empty modules
 * never get a bucket of their own, and leading padding joins the last one. */
static void test_tiny_caps(void)
{
    const struct ct_grad_span sp[] = {{0, 0}, {8, 20}, {20, 20}, {20, 40}, {40, 40}};
    struct ct_bucket b[5];
    for (size_t cap = 0; cap <= 1; cap++) {
        struct ct_gradsync_params p = caps(cap, cap);
        int nb = plan_checked("tiny caps", sp, 5, 40, &p, b, 5);
        expect_buckets(b, nb, (const struct ct_bucket[]){{20, 40, 3}, {0, 20, 1}}, 2);
    }
}

/* A module much larger than the cap is one bucket, never split, and the
 * modules around it form their own buckets. */
static void test_huge_module(void)
{
    const struct ct_grad_span sp[] = {{0, 10}, {16, 16}, {16, 100016}, {100016, 100020},
                                      {100024, 100040}};
    struct ct_gradsync_params p = caps(16, 64); /* 4 and 16 floats */
    struct ct_bucket b[5];
    int nb = plan_checked("huge module", sp, 5, 100048, &p, b, 5);
    const struct ct_bucket want[] = {
        {100024, 100048, 4}, /* 24 floats with the trailing padding */
        {16, 100024, 2},     /* 8 floats of module 3 and padding, below 16, then the huge one */
        {0, 16, 0},
    };
    expect_buckets(b, nb, want, 3);
}

static void test_no_modules(void)
{
    struct ct_bucket b[2];
    struct ct_gradsync_params p = ct_gradsync_default_params();
    CU_ASSERT_EQUAL(ct_gradsync_plan(NULL, 0, 0, &p, b, 1), 0);
    /* Only padding: still covered, so syncing the buckets is syncing it all. */
    int nb = plan_checked("padding only", NULL, 0, 10, &p, b, 1);
    expect_buckets(b, nb, (const struct ct_bucket[]){{0, 10, 0}}, 1);
    const struct ct_grad_span empty[] = {{0, 0}, {4, 4}};
    nb = plan_checked("empty modules", empty, 2, 12, &p, b, 2);
    expect_buckets(b, nb, (const struct ct_bucket[]){{0, 12, 0}}, 1);
    CU_ASSERT_EQUAL(ct_gradsync_plan(empty, 2, 0, &p, b, 2), 0);
}

static void test_capacity(void)
{
    const struct ct_grad_span sp[] = {{0, 10}, {10, 20}, {20, 30}};
    struct ct_gradsync_params p = caps(0, 0);
    struct ct_bucket b[3];
    CU_ASSERT_EQUAL(ct_gradsync_plan(sp, 3, 30, &p, NULL, 0), 3);
    CU_ASSERT_EQUAL(ct_gradsync_plan(sp, 3, 30, &p, b, 2), CT_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "room for 2"));
    CU_ASSERT_EQUAL(ct_gradsync_plan(sp, 3, 30, &p, b, 3), 3);
}

static void expect_bad(const struct ct_grad_span *sp, int n, size_t numel, const char *needle)
{
    struct ct_bucket b[8];
    ct_error_clear();
    int rc = ct_gradsync_plan(sp, n, numel, NULL, b, 8);
    CU_ASSERT_EQUAL(rc, CT_EINVAL);
    if (!strstr(ct_error_message(), needle))
        fprintf(stderr, "  message '%s' lacks '%s'\n", ct_error_message(), needle);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), needle));
}

static void test_bad_spans(void)
{
    expect_bad((const struct ct_grad_span[]){{0, 10}, {20, 15}}, 2, 30,
               "module 1 is [20, 15): begins after it ends");
    expect_bad((const struct ct_grad_span[]){{0, 10}, {8, 15}}, 2, 30,
               "module 1 is [8, 15) but module 0 ends at 10");
    /* Out of module order, checked across an empty module in between. */
    expect_bad((const struct ct_grad_span[]){{10, 20}, {3, 3}, {0, 10}}, 3, 30,
               "module 2 is [0, 10) but module 0 ends at 20");
    expect_bad((const struct ct_grad_span[]){{0, 10}, {10, 31}}, 2, 30,
               "past the end of the buffer (30 elements)");
    expect_bad(NULL, 2, 30, "no spans");
    expect_bad(NULL, -1, 30, "-1 modules");
    /* An empty module's position means nothing, wherever it says it is. */
    struct ct_bucket b[3];
    CU_ASSERT_EQUAL(ct_gradsync_plan((const struct ct_grad_span[]){{0, 10}, {99, 99}, {10, 20}},
                                     3, 20, NULL, b, 3),
                    1);
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Random layouts (sizes over four orders of magnitude, padding, empty
 * modules, a module now and then far above the caps) against random caps. */
static void test_random(void)
{
    uint64_t seed = 42;
    enum { MAXM = 40 };
    struct ct_grad_span sp[MAXM];
    struct ct_bucket b[MAXM];
    int failures = 0;
    for (int iter = 0; iter < 3000 && failures < 3; iter++) {
        int n = (int)(splitmix(&seed) % MAXM);
        size_t at = splitmix(&seed) % 3 ? 0 : splitmix(&seed) % 8;
        for (int i = 0; i < n; i++) {
            uint64_t r = splitmix(&seed);
            size_t len = r % 4 == 0 ? 0 : (size_t)1 << (r >> 8) % 14;
            len += len ? (r >> 16) % 17 : 0;
            sp[i].begin = at;
            sp[i].end = at + len;
            at += len + ((r >> 24) % 3 ? 0 : (r >> 32) % 16);
        }
        size_t numel = at + (splitmix(&seed) % 2 ? 0 : splitmix(&seed) % 16);
        struct ct_gradsync_params p = caps(splitmix(&seed) % 40000, splitmix(&seed) % 80000);
        if (iter % 10 == 0)
            p.bucket_bytes = SIZE_MAX;
        char label[64];
        snprintf(label, sizeof label, "random layout %d (%d modules)", iter, n);
        int nb = plan_checked(label, sp, n, numel, &p, b, MAXM);
        CU_ASSERT(nb >= 0);
        failures += nb < 0 || check_plan(label, sp, n, numel, &p, b, nb) != 0;
    }
    CU_ASSERT_EQUAL(failures, 0);
}

/* ---------------------------------------------------------------- runtime over "self" */

/* Over one rank the sums are the identity; what is checked is when the hook
 * starts each bucket and how state errors are reported. */
static void test_self_hook_starts(void)
{
    struct ct_comm c;
    ct_comm_init_self(&c);
    const struct ct_grad_span sp[] = {{0, 100}, {7, 7}, {100, 300}, {304, 1304}, {1304, 1310}};
    float *g = ct_test_floats(1320);
    for (int i = 0; i < 1320; i++)
        g[i] = (float)i;
    struct ct_gradsync_params p = caps(40, 800);
    struct ct_gradsync gs;
    CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, &c, g, 1320, sp, 5, &p), 0);
    CU_ASSERT_EQUAL(gs.n_buckets, 4);
    for (int step = 0; step < 2; step++) {
        CU_ASSERT_EQUAL(ct_gradsync_begin(&gs, 7 + step), 0);
        /* Buckets ready after modules 4, 3, 2, 0 (the empty module 1 starts
         * nothing); the last one is left to finish's blocking allreduce. */
        const int started_after[5] = {3, 3, 3, 2, 1};
        for (int i = 4; i >= 0; i--) {
            ct_gradsync_hook(&gs, i);
            CU_ASSERT_EQUAL(gs.n_started, started_after[i]);
        }
        int64_t side = -1;
        CU_ASSERT_EQUAL(ct_gradsync_finish(&gs, &side), 0);
        CU_ASSERT_EQUAL(side, 7 + step);
        CU_ASSERT_EQUAL(gs.n_started_in_backward, 3);
        CU_ASSERT_EQUAL(gs.n_started, 4);
        CU_ASSERT(gs.exposed_s >= 0);
    }
    CU_ASSERT_EQUAL(gs.steps, 2);
    /* Reporting only the lowest module starts everything before it. */
    CU_ASSERT_EQUAL(ct_gradsync_begin(&gs, 0), 0);
    ct_gradsync_hook(&gs, 2);
    CU_ASSERT_EQUAL(gs.n_started, 3);
    CU_ASSERT_EQUAL(ct_gradsync_finish(&gs, NULL), 0);
    /* No hook at all: finish starts them. */
    CU_ASSERT_EQUAL(ct_gradsync_begin(&gs, 0), 0);
    CU_ASSERT_EQUAL(ct_gradsync_finish(&gs, NULL), 0);
    CU_ASSERT_EQUAL(gs.n_started, 4);
    CU_ASSERT_EQUAL(gs.n_started_in_backward, 0);
    for (int i = 0; i < 1320; i++)
        if (g[i] != (float)i) {
            CU_FAIL("the self communicator changed the buffer");
            break;
        }
    ct_gradsync_free(&gs);

    /* Blocking mode: the hook starts nothing. */
    p.overlap = 0;
    CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, &c, g, 1320, sp, 5, &p), 0);
    CU_ASSERT_EQUAL(ct_gradsync_begin(&gs, 3), 0);
    for (int i = 4; i >= 0; i--)
        ct_gradsync_hook(&gs, i);
    CU_ASSERT_EQUAL(gs.n_started, 0);
    int64_t side = 0;
    CU_ASSERT_EQUAL(ct_gradsync_finish(&gs, &side), 0);
    CU_ASSERT_EQUAL(side, 3);
    CU_ASSERT_EQUAL(gs.n_started, 4);
    CU_ASSERT_EQUAL(gs.n_started_in_backward, 0);
    ct_gradsync_free(&gs);
    free(g);
    ct_comm_free(&c);
}

static void test_self_errors(void)
{
    struct ct_comm c;
    ct_comm_init_self(&c);
    const struct ct_grad_span sp[] = {{0, 10}, {10, 20}};
    float g[20] = {0};
    struct ct_gradsync gs;
    const struct ct_grad_span overlapping[] = {{0, 10}, {5, 20}};
    CU_ASSERT_EQUAL(ct_gradsync_init(&gs, &c, g, 20, overlapping, 2, NULL), CT_EINVAL);
    CU_ASSERT_PTR_NULL(gs.buckets);
    ct_gradsync_free(&gs); /* harmless after a failed init */
    CU_ASSERT_EQUAL(ct_gradsync_init(&gs, &c, NULL, 20, sp, 2, NULL), CT_EINVAL);
    CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, &c, g, 20, sp, 2, NULL), 0);

    CU_ASSERT_EQUAL(ct_gradsync_finish(&gs, NULL), CT_ESTATE);
    ct_gradsync_hook(&gs, 1); /* outside a step: nothing happens */
    CU_ASSERT_EQUAL(gs.n_started, 0);
    CU_ASSERT_EQUAL(ct_gradsync_begin(&gs, 0), 0);
    CU_ASSERT_EQUAL(ct_gradsync_begin(&gs, 0), CT_ESTATE);
    /* A bad index is kept for finish, message and all, even if other code
     * sets a message in between. */
    ct_gradsync_hook(&gs, 2);
    ct_error_set(CT_EIO, "something else");
    int64_t side = 99;
    CU_ASSERT_EQUAL(ct_gradsync_finish(&gs, &side), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(
        strstr(ct_error_message(), "reported module 2, outside the 2 modules planned"));
    CU_ASSERT_EQUAL(side, 99);
    /* ... and the sync went through all the same: peers are not left waiting. */
    CU_ASSERT_EQUAL(gs.n_started, gs.n_buckets);
    CU_ASSERT_EQUAL(gs.in_step, 0);
    /* The next step starts clean. */
    CU_ASSERT_EQUAL(ct_gradsync_begin(&gs, 5), 0);
    ct_gradsync_hook(&gs, 1);
    ct_gradsync_hook(&gs, 0);
    CU_ASSERT_EQUAL(ct_gradsync_finish(&gs, &side), 0);
    CU_ASSERT_EQUAL(side, 5);
    ct_gradsync_free(&gs);
    ct_comm_free(&c);
}

/* The self communicator's non-blocking ops: identity, complete at once,
 * and the same checks as over MPI. */
static void test_self_requests(void)
{
    struct ct_comm c;
    ct_comm_init_self(&c);
    float f[3] = {1, 2, 3};
    int64_t v = 4;
    struct ct_request r = {0};
    int done = 0;
    CU_ASSERT_EQUAL(ct_comm_test(&c, &r, &done), 0);
    CU_ASSERT_EQUAL(done, 1);
    CU_ASSERT_EQUAL(ct_comm_iallreduce_f32(&c, f, 3, CT_REDUCE_SUM, &r), 0);
    CU_ASSERT_EQUAL(r.active, 0);
    CU_ASSERT_EQUAL(ct_comm_wait(&c, &r), 0);
    CU_ASSERT_EQUAL(f[2], 3);
    CU_ASSERT_EQUAL(ct_comm_iallreduce_i64(&c, &v, 1, CT_REDUCE_MAX, &r), 0);
    CU_ASSERT_EQUAL(v, 4);
    CU_ASSERT_EQUAL(ct_comm_iallreduce_f32(&c, f, (size_t)INT_MAX + 1, CT_REDUCE_SUM, &r),
                    CT_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "at most"));
    r.active = 1; /* as if still in flight */
    CU_ASSERT_EQUAL(ct_comm_iallreduce_i64(&c, &v, 1, CT_REDUCE_MAX, &r), CT_ESTATE);
    ct_comm_free(&c);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"default params", test_defaults},
        {"exact plans", test_exact},
        {"one bucket (huge caps, one module)", test_one_bucket},
        {"tiny caps: a bucket per module", test_tiny_caps},
        {"a module above the cap", test_huge_module},
        {"no modules, empty modules", test_no_modules},
        {"output capacity", test_capacity},
        {"bad spans", test_bad_spans},
        {"random layouts and caps", test_random},
        {"self: when the hook starts buckets", test_self_hook_starts},
        {"self: state errors", test_self_errors},
        {"self: non-blocking ops", test_self_requests},
        {NULL, NULL},
    };
    return ct_test_run("gradsync_plan", cases);
}
