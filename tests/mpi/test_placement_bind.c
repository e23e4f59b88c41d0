/* Binding (src/parallel/placement_bind.c: ct_placement_apply) on this
 * machine, under real mpirun (ctest runs it with 1, 2 and 4 ranks and
 * --bind-to none): each rank applies a placement, then reads back
 * what the kernel and OpenBLAS actually have (sched_getaffinity, on the main
 * thread and on a thread created afterwards; openblas_get_num_threads) and
 * compares with the plan. Expectations come from the machine's own core
 * count, so the test holds on a 2-core VM (4 ranks oversubscribe) and on a
 * big node alike. A launcher's binding is simulated by binding the process
 * before calling apply, as mpirun --bind-to core would have. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/threadpool.h"
#include "ct_mpi_test.h"
#include "parallel/placement.h"

int openblas_get_num_threads(void);

/* ------------------------------------------------------------------ helpers */

static hwloc_topology_t g_topo;
static hwloc_bitmap_t g_allowed; /* PUs this job may use */
static int g_cores;              /* cores among them */

static void setup(void)
{
    if (g_topo)
        return;
    CU_ASSERT_FATAL(ct_placement_topology_load(&g_topo, NULL) == 0);
    g_allowed = hwloc_bitmap_alloc();
    hwloc_bitmap_and(g_allowed, hwloc_topology_get_allowed_cpuset(g_topo),
                     hwloc_topology_get_topology_cpuset(g_topo));
    g_cores = 0;
    hwloc_obj_t core = NULL;
    while ((core = hwloc_get_next_obj_by_type(g_topo, HWLOC_OBJ_CORE, core)) != NULL)
        g_cores += hwloc_bitmap_intersects(core->cpuset, g_allowed);
    if (g_cores == 0)
        g_cores = hwloc_bitmap_weight(g_allowed);
}

/* The calling thread's affinity, read from the kernel, not through hwloc. */
static hwloc_bitmap_t affinity(void)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    hwloc_bitmap_t b = hwloc_bitmap_alloc();
    if (sched_getaffinity(0, sizeof s, &s) != 0)
        return b;
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &s))
            hwloc_bitmap_set(b, (unsigned)i);
    return b;
}

static void *thread_affinity(void *arg)
{
    hwloc_bitmap_t *out = arg;
    *out = affinity();
    return NULL;
}

/* Main thread and a thread created now (a loader thread) run on `cpus`. */
static int runs_on(const char *cpus)
{
    hwloc_bitmap_t want = hwloc_bitmap_alloc(), other = NULL;
    hwloc_bitmap_list_sscanf(want, cpus);
    hwloc_bitmap_t main_set = affinity();
    pthread_t th;
    int ok = pthread_create(&th, NULL, thread_affinity, &other) == 0 && pthread_join(th, NULL) == 0;
    ok = ok && hwloc_bitmap_isequal(main_set, want) && other && hwloc_bitmap_isequal(other, want);
    if (!ok) {
        char a[256] = "?", b[256] = "?";
        hwloc_bitmap_list_snprintf(a, sizeof a, main_set);
        if (other)
            hwloc_bitmap_list_snprintf(b, sizeof b, other);
        fprintf(stderr, "  [rank %d] want PUs %s; main thread on %s, new thread on %s\n",
                g_comm.rank, cpus, a, b);
    }
    hwloc_bitmap_free(want);
    hwloc_bitmap_free(main_set);
    hwloc_bitmap_free(other);
    return ok;
}

static int apply(enum ct_placement_mode mode, struct ct_placement *out)
{
    struct ct_placement_params p = ct_placement_default_params();
    p.mode = mode;
    int rc = ct_placement_apply(&g_comm, &p, out);
    if (rc < 0)
        fprintf(stderr, "  [rank %d] apply(%s): %s\n", g_comm.rank, ct_placement_mode_name(mode),
                ct_error_message());
    return rc;
}

/* Every rank's record at rank 0 (NULL elsewhere). */
static struct ct_placement *gather(const struct ct_placement *mine)
{
    struct ct_placement *all =
        g_comm.rank == 0 ? calloc((size_t)g_comm.world, sizeof *all) : NULL;
    CU_ASSERT_EQUAL(g_comm.ops->gather(&g_comm, mine, sizeof *mine, all, 0), 0);
    return all;
}

static void bind_process(hwloc_const_cpuset_t set)
{
    CU_ASSERT_FATAL(hwloc_set_cpubind(g_topo, set, HWLOC_CPUBIND_PROCESS) == 0);
}

/* ------------------------------------------------------------------ tests */

/* Mode none, unbound: nothing changes; BLAS threads share the cores. */
static void test_none(void)
{
    setup();
    struct ct_placement me;
    CU_ASSERT_EQUAL_FATAL(apply(CT_PLACEMENT_MODE_NONE, &me), 0);
    char all[512];
    hwloc_bitmap_list_snprintf(all, sizeof all, g_allowed);
    CU_ASSERT_STRING_EQUAL(me.cpus, all);
    CU_ASSERT(runs_on(all));
    CU_ASSERT_STRING_EQUAL(me.bound_by, "none");
    int want = g_cores / g_comm.local_world > 0 ? g_cores / g_comm.local_world : 1;
    CU_ASSERT_EQUAL(me.threads, want);
    CU_ASSERT_EQUAL(ct_threadpool_threads(), me.threads);
    CU_ASSERT_EQUAL(openblas_get_num_threads(), 1); /* always (core/gemm.h) */
    CU_ASSERT_EQUAL(me.oversubscribed, g_comm.local_world > g_cores);
}

/* Mode core: each rank on its own cores, as the plan says. */
static void test_core(void)
{
    setup();
    struct ct_placement me;
    CU_ASSERT_EQUAL_FATAL(apply(CT_PLACEMENT_MODE_CORE, &me), 0);
    CU_ASSERT_STRING_EQUAL(me.bound_by, "ctrain");
    CU_ASSERT(runs_on(me.cpus));
    CU_ASSERT_EQUAL(ct_threadpool_threads(), me.threads);
    CU_ASSERT_EQUAL(openblas_get_num_threads(), 1); /* always (core/gemm.h) */
    int over = g_comm.local_world > g_cores;
    if (!over) {
        CU_ASSERT_EQUAL(me.threads, me.ncores);
        CU_ASSERT_EQUAL(me.oversubscribed, 0);
        CU_ASSERT_STRING_EQUAL(me.warning, "");
        /* Even spread of the allowed cores. */
        CU_ASSERT(me.ncores == g_cores / g_comm.local_world ||
                  me.ncores == g_cores / g_comm.local_world + 1);
    } else {
        /* One core each; a rank alone on its core (3 ranks on 2) is fine. */
        CU_ASSERT_EQUAL(me.threads, 1);
        CU_ASSERT_EQUAL(me.ncores, 1);
        CU_ASSERT_EQUAL(me.oversubscribed, strstr(me.warning, "ranks share") != NULL);
    }
    /* The same plan as computed here from local_rank/local_world. */
    struct ct_rank_plan *pl = calloc((size_t)g_comm.local_world, sizeof *pl);
    struct ct_placement_params p = ct_placement_default_params();
    p.mode = CT_PLACEMENT_MODE_CORE;
    CU_ASSERT_EQUAL_FATAL(ct_placement_plan(g_topo, g_allowed, g_comm.local_world, &p, pl), 0);
    char mine[512];
    hwloc_bitmap_list_snprintf(mine, sizeof mine, pl[g_comm.local_rank].cpuset);
    CU_ASSERT_STRING_EQUAL(me.cpus, mine);
    CU_ASSERT_EQUAL(me.threads, pl[g_comm.local_rank].threads);
    CU_ASSERT_STRING_EQUAL(me.device, pl[g_comm.local_rank].device);
    ct_placement_plan_free(pl, g_comm.local_world);
    free(pl);
    /* No PU given to two ranks of a node unless both are oversubscribed; with
     * more ranks than cores, some are. */
    struct ct_placement *all = gather(&me);
    if (g_comm.rank == 0) {
        hwloc_bitmap_t a = hwloc_bitmap_alloc(), b = hwloc_bitmap_alloc();
        int any_over = 0;
        for (int i = 0; i < g_comm.world; i++) {
            any_over |= all[i].oversubscribed;
            for (int j = 0; j < i; j++) {
                if (strcmp(all[i].host, all[j].host) != 0)
                    continue;
                hwloc_bitmap_list_sscanf(a, all[i].cpus);
                hwloc_bitmap_list_sscanf(b, all[j].cpus);
                if (hwloc_bitmap_intersects(a, b))
                    CU_ASSERT(all[i].oversubscribed && all[j].oversubscribed);
            }
        }
        CU_ASSERT_EQUAL(any_over, over);
        hwloc_bitmap_free(a);
        hwloc_bitmap_free(b);
    }
    free(all);
}

/* Mode auto with no launcher binding: ctrain binds, exactly as core. */
static void test_auto_unbound(void)
{
    setup();
    bind_process(g_allowed); /* what mpirun --bind-to none leaves */
    struct ct_placement me, core;
    CU_ASSERT_EQUAL_FATAL(apply(CT_PLACEMENT_MODE_AUTO, &me), 0);
    CU_ASSERT_STRING_EQUAL(me.bound_by, "ctrain");
    CU_ASSERT(runs_on(me.cpus));
    /* A second call starts from the same launcher binding (none). */
    CU_ASSERT_EQUAL_FATAL(apply(CT_PLACEMENT_MODE_CORE, &core), 0);
    CU_ASSERT_STRING_EQUAL(core.cpus, me.cpus);
    CU_ASSERT_STRING_EQUAL(core.warning, me.warning);
}

/* Mode auto when the launcher bound each rank to one PU (as mpirun
 * --bind-to core does): the binding is kept and reported; core replaces it. */
static void test_auto_keeps_launcher_binding(void)
{
    setup();
    int n = hwloc_bitmap_weight(g_allowed);
    if (n < 2)
        return; /* one PU: no binding can be narrower than "all" */
    int pu = hwloc_bitmap_first(g_allowed);
    for (int k = 0; k < g_comm.local_rank % n; k++)
        pu = hwloc_bitmap_next(g_allowed, pu);
    hwloc_bitmap_t one = hwloc_bitmap_alloc();
    hwloc_bitmap_only(one, (unsigned)pu);
    /* Placement takes a binding equal to the one it set last for its own, so
     * first leave that state (unbound, seen by one call), as a fresh process
     * started by a binding launcher would be. */
    struct ct_placement me;
    bind_process(g_allowed);
    CU_ASSERT_EQUAL_FATAL(apply(CT_PLACEMENT_MODE_NONE, &me), 0);
    bind_process(one);
    char want[32];
    snprintf(want, sizeof want, "%d", pu);

    CU_ASSERT_EQUAL_FATAL(apply(CT_PLACEMENT_MODE_AUTO, &me), 0);
    CU_ASSERT_STRING_EQUAL(me.cpus, want);
    CU_ASSERT(runs_on(want));
    /* Under mpirun (Open MPI's: PMIX_RANK; hydra: PMI_RANK), outside Slurm. */
    int mpirun = (getenv("PMIX_RANK") || getenv("PMI_RANK")) && !getenv("SLURM_PROCID");
    CU_ASSERT_STRING_EQUAL(me.bound_by, mpirun ? "mpirun" : me.bound_by);
    CU_ASSERT(strcmp(me.bound_by, "ctrain") != 0 && strcmp(me.bound_by, "none") != 0);
    CU_ASSERT_STRING_EQUAL(me.membind, "unchanged");
    CU_ASSERT_EQUAL(me.threads, 1);
    CU_ASSERT_EQUAL(openblas_get_num_threads(), 1);
    /* Ranks bound to the same PU share it, and say so. */
    int k = g_comm.local_rank % n, W = g_comm.local_world;
    CU_ASSERT_EQUAL(me.oversubscribed, W / n + (k < W % n) > 1);

    /* Explicit core replaces the launcher's binding, with a warning... */
    struct ct_placement core;
    CU_ASSERT_EQUAL_FATAL(apply(CT_PLACEMENT_MODE_CORE, &core), 0);
    CU_ASSERT_STRING_EQUAL(core.bound_by, "ctrain");
    CU_ASSERT(runs_on(core.cpus));
    CU_ASSERT_PTR_NOT_NULL(strstr(core.warning, "replaced the binding"));
    /* ...and auto afterwards goes back to the launcher's. */
    CU_ASSERT_EQUAL_FATAL(apply(CT_PLACEMENT_MODE_AUTO, &me), 0);
    CU_ASSERT_STRING_EQUAL(me.cpus, want);
    CU_ASSERT(runs_on(want));
    hwloc_bitmap_free(one);
    bind_process(g_allowed);
}

/* The table at rank 0: one line per rank; printed for the record. */
static void test_table(void)
{
    setup();
    struct ct_placement me;
    CU_ASSERT_EQUAL_FATAL(apply(CT_PLACEMENT_MODE_CORE, &me), 0);
    char *text = NULL;
    CU_ASSERT_EQUAL_FATAL(ct_placement_table(&g_comm, &me, &text), 0);
    if (g_comm.rank != 0) {
        CU_ASSERT_PTR_NULL(text);
        return;
    }
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    printf("\n%s", text);
    int lines = 0, seen_rank[64] = {0};
    for (const char *line = text; line && *line;) {
        int r;
        char host[64];
        if (sscanf(line, "%d %63s", &r, host) == 2 && r >= 0 && r < 64) {
            lines++;
            seen_rank[r]++;
        }
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    CU_ASSERT_EQUAL(lines, g_comm.world);
    for (int r = 0; r < g_comm.world && r < 64; r++)
        CU_ASSERT_EQUAL(seen_rank[r], 1);
    int over = g_comm.local_world > g_cores;
    CU_ASSERT_EQUAL(strstr(text, "warning (ranks") != NULL, over);
    free(text);
    hwloc_bitmap_free(g_allowed);
    hwloc_topology_destroy(g_topo);
    g_topo = NULL;
}

int main(int argc, char **argv)
{
    static const struct ct_test_case cases[] = {
        {"mode none leaves the binding", test_none},
        {"mode core binds and sets BLAS threads", test_core},
        {"mode auto binds an unbound rank", test_auto_unbound},
        {"mode auto keeps a launcher's binding", test_auto_keeps_launcher_binding},
        {"binding table", test_table},
        {NULL, NULL},
    };
    return ct_mpi_test_run(argc, argv, "placement bind", cases);
}
