/* Threads against bound PUs (issue 33, item 5): ct_threads_choose (auto capped
 * at the binding's PUs, an explicit count honoured), the warning text that
 * names who bound the rank and what changes it (ct__threads_warning), and the
 * thread pool on fewer PUs than threads: it says it is crowded (so it yields
 * instead of spinning) and still runs every part exactly once. No timings:
 * the speed is measured by hand (docs/parallel.md). */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <string.h>

#include "core/threadpool.h"
#include "core/threads.h"
#include "ct_test.h"
#include "parallel/placement-impl.h"

static void test_choose_auto(void)
{
    /* mpirun -np 1 --bind-to core on a 2-core node: 1 thread, capped. */
    struct ct_threads_choice c = ct_threads_choose(0, 1, 2, 1);
    CU_ASSERT_EQUAL(c.threads, 1);
    CU_ASSERT_EQUAL(c.verdict, CT_THREADS_CAPPED);
    CU_ASSERT_EQUAL(c.unbound, 2);
    /* Unbound, or our own even share: nothing to say. */
    c = ct_threads_choose(0, 2, 2, 2);
    CU_ASSERT_EQUAL(c.threads, 2);
    CU_ASSERT_EQUAL(c.verdict, CT_THREADS_FIT);
    c = ct_threads_choose(0, 4, 4, 8); /* hyperthreads: 4 cores, 8 PUs */
    CU_ASSERT_EQUAL(c.threads, 4);
    CU_ASSERT_EQUAL(c.verdict, CT_THREADS_FIT);
    /* More ranks than cores: 1 each, as unbound would give. */
    c = ct_threads_choose(0, 1, 1, 1);
    CU_ASSERT_EQUAL(c.threads, 1);
    CU_ASSERT_EQUAL(c.verdict, CT_THREADS_FIT);
    /* A plan never gets more threads than PUs, and never 0. */
    c = ct_threads_choose(0, 8, 8, 3);
    CU_ASSERT_EQUAL(c.threads, 3);
    CU_ASSERT_EQUAL(c.verdict, CT_THREADS_CAPPED);
    c = ct_threads_choose(0, 0, 0, 0);
    CU_ASSERT_EQUAL(c.threads, 1);
    CU_ASSERT_EQUAL(c.verdict, CT_THREADS_FIT);
    /* A binding wider than the node's share is not a cap. */
    c = ct_threads_choose(0, 16, 8, 16);
    CU_ASSERT_EQUAL(c.threads, 16);
    CU_ASSERT_EQUAL(c.verdict, CT_THREADS_FIT);
}

static void test_choose_explicit(void)
{
    struct ct_threads_choice c = ct_threads_choose(2, 1, 2, 1);
    CU_ASSERT_EQUAL(c.threads, 2); /* honoured */
    CU_ASSERT_EQUAL(c.verdict, CT_THREADS_ABOVE);
    c = ct_threads_choose(2, 1, 2, 2);
    CU_ASSERT_EQUAL(c.threads, 2);
    CU_ASSERT_EQUAL(c.verdict, CT_THREADS_FIT);
    c = ct_threads_choose(1, 8, 8, 8); /* fewer than auto: the user's choice, no warning */
    CU_ASSERT_EQUAL(c.threads, 1);
    CU_ASSERT_EQUAL(c.verdict, CT_THREADS_FIT);
}

static void test_warning_text(void)
{
    char w[640];
    struct ct_threads_choice c = ct_threads_choose(0, 1, 2, 1);
    ct__threads_warning(w, sizeof w, &c, 0, "mpirun", 1, "0x1");
    CU_ASSERT_STRING_EQUAL(w, "dist.threads = auto runs 1 thread, not 2: bound by mpirun to 1 PU "
                              "(cpuset 0x1); to run 2, start it with mpirun --bind-to none (or "
                              "launch/ctrain-run)");
    c = ct_threads_choose(2, 1, 2, 1);
    ct__threads_warning(w, sizeof w, &c, 2, "mpirun", 1, "0x1");
    CU_ASSERT_STRING_EQUAL(w, "dist.threads = 2 on 1 PU: bound by mpirun to 1 PU (cpuset 0x1), "
                              "the threads take turns at about 1 PU's speed; start it with mpirun "
                              "--bind-to none (or launch/ctrain-run), or set dist.threads = auto");
    c = ct_threads_choose(0, 2, 8, 2);
    ct__threads_warning(w, sizeof w, &c, 0, "slurm", 2, "0x3");
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "bound by Slurm to 2 PUs (cpuset 0x3)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "--cpus-per-task=8"));
    c = ct_threads_choose(4, 1, 1, 1);
    ct__threads_warning(w, sizeof w, &c, 4, "ctrain", 1, "0x2");
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "bound by dist.placement to 1 PU (cpuset 0x2)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "dist.placement = none"));
    ct__threads_warning(w, sizeof w, &c, 4, "launcher", 1, "0x2");
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "bound by the launcher"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "--bind-to none"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "--cpus-per-task=4"));
    ct__threads_warning(w, sizeof w, &c, 4, "none", 1, "0x2");
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "cgroup or allocation"));
    /* Nothing to say: empty. */
    c = ct_threads_choose(0, 2, 2, 2);
    ct__threads_warning(w, sizeof w, &c, 0, "mpirun", 2, "0x3");
    CU_ASSERT_STRING_EQUAL(w, "");
}

static atomic_int g_runs[16];

static void count_part(void *ctx, int part, int nparts)
{
    (void)ctx;
    if (part >= 0 && part < 16 && nparts == 16)
        atomic_fetch_add(&g_runs[part], 1);
}

/* 4 threads bound to one PU: crowded, and every part runs once per loop. */
static void test_pool_crowded(void)
{
    cpu_set_t old, one;
    CU_ASSERT_FATAL(sched_getaffinity(0, sizeof old, &old) == 0);
    CPU_ZERO(&one);
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &old)) {
            CPU_SET(i, &one);
            break;
        }
    CU_ASSERT_FATAL(sched_setaffinity(0, sizeof one, &one) == 0);
    ct_threadpool_set_threads(4);
    CU_ASSERT_EQUAL(ct_threadpool_threads(), 4);
    CU_ASSERT_EQUAL(ct_threadpool_crowded(), 1);
    for (int loop = 0; loop < 200; loop++)
        ct_threadpool_run(count_part, NULL, 16);
    for (int p = 0; p < 16; p++)
        CU_ASSERT_EQUAL(atomic_load(&g_runs[p]), 200);
    ct_threadpool_set_threads(1);
    CU_ASSERT_EQUAL(ct_threadpool_crowded(), 0);
    ct_threadpool_run(count_part, NULL, 16); /* resizes to the caller alone */
    CU_ASSERT_EQUAL(atomic_load(&g_runs[15]), 201);
    CU_ASSERT_FATAL(sched_setaffinity(0, sizeof old, &old) == 0);
    /* As many threads as PUs: not crowded (spinning is right there). */
    ct_threadpool_set_threads(CPU_COUNT(&old));
    CU_ASSERT_EQUAL(ct_threadpool_crowded(), 0);
    ct_threadpool_set_threads(1);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"auto capped at the binding's PUs", test_choose_auto},
        {"explicit count honoured", test_choose_explicit},
        {"warning names binder, cpuset and flag", test_warning_text},
        {"pool crowded on one PU", test_pool_crowded},
        {NULL, NULL},
    };
    return ct_test_run("threads", cases);
}
