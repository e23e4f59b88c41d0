/* Placement planning without MPI and without touching this machine: synthetic
 * hwloc topologies and the XML nodes in tests/fixtures/topo/ (see make_topo.py
 * there), 1 to 32 local ranks each. Every plan is checked against properties
 * computed here from the topology itself (disjoint PUs, even spread, no NUMA
 * straddling when an even split without it exists, hyperthreads, allowed PUs,
 * BLAS threads, device balance), and a few plans against exact expectations.
 *
 * CT_PLACEMENT_SHOW=1 prints the binding tables of the big nodes. */
#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ct_test.h"
#include "parallel/placement.h"

#define MAXR 64

static hwloc_topology_t synth(const char *desc)
{
    hwloc_topology_t t;
    CU_ASSERT_FATAL(hwloc_topology_init(&t) == 0);
    CU_ASSERT_FATAL(hwloc_topology_set_synthetic(t, desc) == 0);
    CU_ASSERT_FATAL(hwloc_topology_load(t) == 0);
    return t;
}

static hwloc_topology_t xml(const char *name)
{
    char path[512];
    snprintf(path, sizeof path, "%s/topo/%s", CT_FIXTURE_DIR, name);
    hwloc_topology_t t = NULL;
    int rc = ct_placement_topology_load(&t, path);
    if (rc < 0)
        fprintf(stderr, "  %s: %s\n", path, ct_error_message());
    CU_ASSERT_FATAL(rc == 0);
    return t;
}

static struct ct_placement_params params(enum ct_placement_mode mode, int ht)
{
    struct ct_placement_params p = ct_placement_default_params();
    p.mode = mode;
    p.use_hyperthreads = ht;
    return p;
}

static int plan(hwloc_topology_t t, hwloc_const_cpuset_t allowed, int R,
                const struct ct_placement_params *p, struct ct_rank_plan *out)
{
    int rc = ct_placement_plan(t, allowed, R, p, out);
    if (rc < 0)
        fprintf(stderr, "  plan(%d ranks): %s\n", R, ct_error_message());
    return rc;
}

/* Usable cores (cores with an allowed PU), in logical order, with their NUMA
 * node and package, computed here rather than trusted from the library. */
struct core_info {
    hwloc_obj_t core;
    int numa, pkg;
};

static int usable_cores(hwloc_topology_t t, hwloc_const_cpuset_t usable, struct core_info *c)
{
    int n = 0;
    hwloc_obj_t core = NULL;
    while ((core = hwloc_get_next_obj_by_type(t, HWLOC_OBJ_CORE, core)) != NULL) {
        if (!hwloc_bitmap_intersects(core->cpuset, usable))
            continue;
        c[n].core = core;
        c[n].numa = -1;
        for (unsigned i = 0; i < (unsigned)hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE); i++) {
            hwloc_obj_t nn = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, i);
            if (hwloc_bitmap_intersects(nn->cpuset, core->cpuset)) {
                c[n].numa = (int)i;
                break;
            }
        }
        hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(t, HWLOC_OBJ_PACKAGE, core);
        c[n].pkg = p ? (int)p->logical_index : 0;
        n++;
    }
    return n;
}

/* Can n cores, in domains of sizes size[0..nd), be cut into R runs of q or
 * q+1 (r of them long) without any run crossing a domain? A small search over
 * how many long and short runs each domain holds. */
static int split_fits(const int *size, int nd, int q, int r_left, int short_left)
{
    if (nd == 0)
        return r_left == 0 && short_left == 0;
    for (int a = 0; a <= r_left && a * (q + 1) <= size[0]; a++) {
        int rest = size[0] - a * (q + 1);
        if (rest % q == 0 && rest / q <= short_left &&
            split_fits(size + 1, nd - 1, q, r_left - a, short_left - rest / q))
            return 1;
    }
    return 0;
}

/* Domain sizes (runs of cores with the same NUMA node, or package). */
static int domain_sizes(const struct core_info *c, int n, int by_numa, int *size)
{
    int nd = 0;
    for (int k = 0; k < n; k++) {
        int key = by_numa ? c[k].numa : c[k].pkg;
        int prev = k ? (by_numa ? c[k - 1].numa : c[k - 1].pkg) : -1;
        if (k == 0 || key != prev)
            size[nd++] = 0;
        size[nd - 1]++;
    }
    return nd;
}

/* Ranks whose PUs lie in more than one domain. */
static int straddlers(const struct core_info *c, int n, const struct ct_rank_plan *pl, int R,
                      int by_numa)
{
    int count = 0;
    for (int i = 0; i < R; i++) {
        int first = -1, many = 0;
        for (int k = 0; k < n; k++) {
            if (!hwloc_bitmap_intersects(c[k].core->cpuset, pl[i].cpuset))
                continue;
            int key = by_numa ? c[k].numa : c[k].pkg;
            if (first < 0)
                first = key;
            else if (key != first)
                many = 1;
        }
        count += many;
    }
    return count;
}

/* The properties every core-mode plan must have. */
static void check_core_plan(const char *label, hwloc_topology_t t, hwloc_const_cpuset_t allowed,
                            int R, int ht, const struct ct_rank_plan *pl)
{
    hwloc_bitmap_t usable = hwloc_bitmap_alloc(), tmp = hwloc_bitmap_alloc();
    hwloc_bitmap_and(usable, allowed ? allowed : hwloc_topology_get_allowed_cpuset(t),
                     hwloc_topology_get_topology_cpuset(t));
    static struct core_info c[1024];
    int ncores = usable_cores(t, usable, c);
    int npus = hwloc_bitmap_weight(usable);
    int units = ht ? npus : ncores;
    int bad = 0;
#define EXPECT(cond, ...)                                           \
    do {                                                            \
        if (!(cond)) {                                              \
            if (bad++ < 5) {                                        \
                fprintf(stderr, "  %s, %d ranks: ", label, R);      \
                fprintf(stderr, __VA_ARGS__);                       \
                fprintf(stderr, "\n");                              \
            }                                                       \
        }                                                           \
    } while (0)
    int minc = 1 << 30, maxc = 0, any_over = 0;
    for (int i = 0; i < R; i++) {
        EXPECT(!hwloc_bitmap_iszero(pl[i].cpuset), "rank %d has no PU", i);
        EXPECT(hwloc_bitmap_isincluded(pl[i].cpuset, usable), "rank %d has PUs outside the allowed set", i);
        EXPECT(pl[i].bind == 1, "rank %d not bound", i);
        EXPECT(pl[i].npus == hwloc_bitmap_weight(pl[i].cpuset), "rank %d npus", i);
        /* Hyperthreads only when asked for. */
        if (!ht)
            for (int k = 0; k < ncores; k++) {
                hwloc_bitmap_and(tmp, c[k].core->cpuset, pl[i].cpuset);
                EXPECT(hwloc_bitmap_weight(tmp) <= 1, "rank %d has two PUs of core %d", i, k);
            }
        int nc = 0;
        for (int k = 0; k < ncores; k++)
            nc += hwloc_bitmap_intersects(c[k].core->cpuset, pl[i].cpuset);
        EXPECT(pl[i].ncores == nc, "rank %d ncores %d, counted %d", i, pl[i].ncores, nc);
        minc = nc < minc ? nc : minc;
        maxc = nc > maxc ? nc : maxc;
        /* BLAS threads = what it owns. */
        int want = pl[i].oversubscribed ? 1 : (ht ? pl[i].npus : pl[i].ncores);
        EXPECT(pl[i].threads == want, "rank %d threads %d, want %d", i, pl[i].threads, want);
        EXPECT(!pl[i].oversubscribed == !pl[i].warning[0], "rank %d: oversubscribed %d, warning '%s'",
               i, pl[i].oversubscribed, pl[i].warning);
        any_over |= pl[i].oversubscribed;
        /* No PU given twice unless both ranks are flagged. */
        for (int j = 0; j < i; j++)
            if (hwloc_bitmap_intersects(pl[i].cpuset, pl[j].cpuset))
                EXPECT(pl[i].oversubscribed && pl[j].oversubscribed,
                       "ranks %d and %d share PUs without being flagged", j, i);
    }
    EXPECT(any_over == (R > units), "oversubscription %d with %d ranks on %d units", any_over, R, units);
    if (R <= units) {
        /* Even spread, every core used. */
        if (!ht || R <= ncores)
            EXPECT(maxc - minc <= 1, "core counts from %d to %d", minc, maxc);
        hwloc_bitmap_zero(tmp);
        for (int i = 0; i < R; i++)
            hwloc_bitmap_or(tmp, tmp, pl[i].cpuset);
        int covered = 0;
        for (int k = 0; k < ncores; k++)
            covered += hwloc_bitmap_intersects(c[k].core->cpuset, tmp);
        EXPECT(covered == ncores, "%d of %d cores used", covered, ncores);
        /* No NUMA (package) straddling when an even split without it exists. */
        if (R <= ncores) {
            int size[256];
            for (int by_numa = 1; by_numa >= 0; by_numa--) {
                int nd = domain_sizes(c, ncores, by_numa, size);
                int q = ncores / R, r = ncores % R;
                int s = straddlers(c, ncores, pl, R, by_numa);
                if (split_fits(size, nd, q, r, R - r))
                    EXPECT(s == 0, "%d ranks straddle %s though an even split exists", s,
                           by_numa ? "NUMA nodes" : "packages");
                EXPECT(s <= nd - 1, "%d straddlers across %d boundaries", s, nd - 1);
            }
        }
    }
#undef EXPECT
    CU_ASSERT_EQUAL(bad, 0);
    hwloc_bitmap_free(usable);
    hwloc_bitmap_free(tmp);
}

static void sweep(const char *label, hwloc_topology_t t, hwloc_const_cpuset_t allowed, int ht)
{
    struct ct_placement_params p = params(CT_PLACEMENT_MODE_CORE, ht);
    struct ct_rank_plan pl[MAXR];
    for (int R = 1; R <= 32; R++) {
        CU_ASSERT_EQUAL_FATAL(plan(t, allowed, R, &p, pl), 0);
        check_core_plan(label, t, allowed, R, ht, pl);
        ct_placement_plan_free(pl, R);
    }
}

static char *cpus_of(const struct ct_rank_plan *e)
{
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    hwloc_bitmap_list_snprintf(buf[k], sizeof buf[k], e->cpuset);
    return buf[k];
}

static char *nodes_of(const struct ct_rank_plan *e)
{
    static char buf[8][64];
    static int k;
    k = (k + 1) % 8;
    hwloc_bitmap_list_snprintf(buf[k], sizeof buf[k], e->nodeset);
    return buf[k];
}

/* ------------------------------------------------------------------ tests */

static void test_mode_parse(void)
{
    static const char *const names[] = {"auto", "none", "core", "numa", "package"};
    for (int m = 0; m < CT_PLACEMENT_MODE_COUNT; m++) {
        enum ct_placement_mode got = CT_PLACEMENT_MODE_COUNT;
        CU_ASSERT_EQUAL(ct_placement_mode_parse(names[m], &got), 0);
        CU_ASSERT_EQUAL(got, m);
        CU_ASSERT_STRING_EQUAL(ct_placement_mode_name(got), names[m]);
    }
    enum ct_placement_mode got;
    CU_ASSERT_EQUAL(ct_placement_mode_parse("NUMA", &got), 0);
    CU_ASSERT_EQUAL(got, CT_PLACEMENT_MODE_NUMA);
    CU_ASSERT_EQUAL(ct_placement_mode_parse("socket", &got), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "socket"));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "package"));
    CU_ASSERT_EQUAL(ct_placement_mode_parse("", &got), CT_EINVAL);
    CU_ASSERT_STRING_EQUAL(ct_placement_mode_name(CT_PLACEMENT_MODE_COUNT), "?");
    struct ct_placement_params d = ct_placement_default_params();
    CU_ASSERT_EQUAL(d.mode, CT_PLACEMENT_MODE_AUTO);
    CU_ASSERT_EQUAL(d.threads, 0);
    CU_ASSERT_EQUAL(d.use_hyperthreads, 0);
}

/* 2 packages x 2 NUMA x 8 cores x 2 PUs (PUs of core k: 2k, 2k+1). */
static void test_big_node_sweep(void)
{
    hwloc_topology_t t = synth("pack:2 numa:2 core:8 pu:2");
    sweep("2x2x8x2", t, NULL, 0);
    sweep("2x2x8x2 ht", t, NULL, 1);
    hwloc_topology_destroy(t);
}

static void test_big_node_exact(void)
{
    hwloc_topology_t t = synth("pack:2 numa:2 core:8 pu:2");
    struct ct_placement_params p = params(CT_PLACEMENT_MODE_CORE, 0);
    struct ct_rank_plan pl[MAXR];
    /* One rank: every core, first PU only, all NUMA nodes. */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 1, &p, pl), 0);
    CU_ASSERT_EQUAL(pl[0].ncores, 32);
    CU_ASSERT_EQUAL(pl[0].npus, 32);
    CU_ASSERT_EQUAL(pl[0].threads, 32);
    CU_ASSERT_STRING_EQUAL(nodes_of(&pl[0]), "0-3");
    CU_ASSERT_STRING_EQUAL(pl[0].device, "cpu");
    CU_ASSERT_STRING_EQUAL(pl[0].device_pci, "");
    CU_ASSERT_EQUAL(pl[0].device_index, -1);
    ct_placement_plan_free(pl, 1);
    /* Two ranks: a package each. */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 2, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(nodes_of(&pl[0]), "0-1");
    CU_ASSERT_STRING_EQUAL(nodes_of(&pl[1]), "2-3");
    CU_ASSERT_EQUAL(pl[1].threads, 16);
    ct_placement_plan_free(pl, 2);
    /* Four ranks: a NUMA node each, whole. */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 4, &p, pl), 0);
    for (int i = 0; i < 4; i++) {
        char want[8];
        snprintf(want, sizeof want, "%d", i);
        CU_ASSERT_STRING_EQUAL(nodes_of(&pl[i]), want);
        CU_ASSERT_EQUAL(pl[i].ncores, 8);
    }
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[1]), "16,18,20,22,24,26,28,30");
    ct_placement_plan_free(pl, 4);
    /* Three ranks: the even spread 11, 10, 11 (the slowest rank sets the pace;
     * the short run in the middle keeps starts closest to 0, 10.7, 21.3). */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 3, &p, pl), 0);
    CU_ASSERT_EQUAL(pl[0].ncores, 11);
    CU_ASSERT_EQUAL(pl[1].ncores, 10);
    CU_ASSERT_EQUAL(pl[2].ncores, 11);
    ct_placement_plan_free(pl, 3);
    /* Six ranks: 32 = 6+6+5+5+5+5, and 6+5+5 = 16 fills a package, so no rank
     * crosses packages (NUMA nodes of 8 cannot all be avoided). */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 6, &p, pl), 0);
    hwloc_obj_t pk0 = hwloc_get_obj_by_type(t, HWLOC_OBJ_PACKAGE, 0);
    for (int i = 0; i < 6; i++)
        CU_ASSERT(hwloc_bitmap_isincluded(pl[i].cpuset, pk0->cpuset) ||
                  !hwloc_bitmap_intersects(pl[i].cpuset, pk0->cpuset));
    ct_placement_plan_free(pl, 6);
    /* Hyperthreads on: whole cores, both PUs. */
    p.use_hyperthreads = 1;
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 4, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[0]), "0-15");
    CU_ASSERT_EQUAL(pl[0].threads, 16);
    CU_ASSERT_EQUAL(pl[0].ncores, 8);
    ct_placement_plan_free(pl, 4);
    /* 48 ranks with hyperthreads: one or two PUs each, never shared. */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 48, &p, pl), 0);
    check_core_plan("2x2x8x2 ht 48", t, NULL, 48, 1, pl);
    for (int i = 0; i < 48; i++)
        CU_ASSERT_EQUAL(pl[i].oversubscribed, 0);
    ct_placement_plan_free(pl, 48);
    /* Explicit thread count wins. */
    p = params(CT_PLACEMENT_MODE_CORE, 0);
    p.threads = 3;
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 4, &p, pl), 0);
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(pl[i].threads, 3);
    ct_placement_plan_free(pl, 4);
    /* Auto plans as core; the same inputs give the same plan. */
    struct ct_rank_plan again[MAXR];
    p = params(CT_PLACEMENT_MODE_AUTO, 0);
    struct ct_placement_params core = params(CT_PLACEMENT_MODE_CORE, 0);
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 7, &p, pl), 0);
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 7, &core, again), 0);
    for (int i = 0; i < 7; i++)
        CU_ASSERT(hwloc_bitmap_isequal(pl[i].cpuset, again[i].cpuset));
    ct_placement_plan_free(pl, 7);
    ct_placement_plan_free(again, 7);
    hwloc_topology_destroy(t);
}

static void test_small_nodes(void)
{
    hwloc_topology_t t = synth("pack:1 numa:1 core:2 pu:1");
    sweep("1x1x2x1", t, NULL, 0);
    struct ct_placement_params p = params(CT_PLACEMENT_MODE_CORE, 0);
    struct ct_rank_plan pl[MAXR];
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 2, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[0]), "0");
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[1]), "1");
    CU_ASSERT_EQUAL(pl[0].oversubscribed + pl[1].oversubscribed, 0);
    ct_placement_plan_free(pl, 2);
    /* Four ranks on two cores: pairs share a core, with one clear warning. */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 4, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[0]), "0");
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[1]), "0");
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[2]), "1");
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[3]), "1");
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(pl[i].oversubscribed, 1);
        CU_ASSERT_EQUAL(pl[i].threads, 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(pl[i].warning, "4 ranks share 2 cores"));
        CU_ASSERT_STRING_EQUAL(pl[i].warning, pl[0].warning);
    }
    ct_placement_plan_free(pl, 4);
    /* Three ranks on two cores: the lone rank is not oversubscribed. */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 3, &p, pl), 0);
    CU_ASSERT_EQUAL(pl[0].oversubscribed, 1);
    CU_ASSERT_EQUAL(pl[1].oversubscribed, 1);
    CU_ASSERT_EQUAL(pl[2].oversubscribed, 0);
    ct_placement_plan_free(pl, 3);
    hwloc_topology_destroy(t);

    /* Two packages, one NUMA node: packages are the boundaries that matter. */
    t = synth("pack:2 core:4 pu:1");
    sweep("2x4x1", t, NULL, 0);
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 2, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[0]), "0-3");
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[1]), "4-7");
    ct_placement_plan_free(pl, 2);
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 4, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[1]), "2-3");
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[2]), "4-5");
    ct_placement_plan_free(pl, 4);
    hwloc_topology_destroy(t);
}

/* Slurm or a cgroup gives the job only PUs 0-5 of a 16-PU node. */
static void test_allowed_subset(void)
{
    hwloc_topology_t t = synth("pack:2 core:4 pu:2");
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc();
    hwloc_bitmap_set_range(allowed, 0, 5);
    sweep("2x4x2 allowed 0-5", t, allowed, 0);
    sweep("2x4x2 allowed 0-5 ht", t, allowed, 1);
    struct ct_placement_params p = params(CT_PLACEMENT_MODE_CORE, 0);
    struct ct_rank_plan pl[MAXR];
    CU_ASSERT_EQUAL_FATAL(plan(t, allowed, 1, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[0]), "0,2,4");
    CU_ASSERT_EQUAL(pl[0].threads, 3);
    ct_placement_plan_free(pl, 1);
    CU_ASSERT_EQUAL_FATAL(plan(t, allowed, 4, &p, pl), 0);
    CU_ASSERT_EQUAL(pl[0].oversubscribed, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(pl[0].warning, "dist.use_hyperthreads"));
    ct_placement_plan_free(pl, 4);
    p.use_hyperthreads = 1;
    CU_ASSERT_EQUAL_FATAL(plan(t, allowed, 3, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[0]), "0-1");
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[2]), "4-5");
    ct_placement_plan_free(pl, 3);

    /* An uneven node: NUMA node 0 of the big node keeps 5 of its 8 cores. */
    hwloc_topology_t big = synth("pack:2 numa:2 core:8 pu:2");
    hwloc_bitmap_fill(allowed);
    hwloc_bitmap_clr_range(allowed, 0, 5);
    sweep("2x2x8x2 minus 3 cores", big, allowed, 0);
    hwloc_topology_destroy(big);

    /* Nothing allowed that exists: an error, not an empty plan. */
    hwloc_bitmap_only(allowed, 100);
    p = params(CT_PLACEMENT_MODE_CORE, 0);
    CU_ASSERT_EQUAL(ct_placement_plan(t, allowed, 2, &p, pl), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_placement_plan(t, NULL, 0, &p, pl), CT_EINVAL);
    p.threads = -1;
    CU_ASSERT_EQUAL(ct_placement_plan(t, NULL, 1, &p, pl), CT_EINVAL);
    hwloc_bitmap_free(allowed);
    hwloc_topology_destroy(t);
}

static void test_numa_package_none_modes(void)
{
    hwloc_topology_t t = synth("pack:2 numa:2 core:8 pu:2");
    struct ct_placement_params p = params(CT_PLACEMENT_MODE_NUMA, 0);
    struct ct_rank_plan pl[MAXR];
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 3, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(nodes_of(&pl[0]), "0-1");
    CU_ASSERT_STRING_EQUAL(nodes_of(&pl[1]), "2");
    CU_ASSERT_STRING_EQUAL(nodes_of(&pl[2]), "3");
    CU_ASSERT_EQUAL(pl[0].threads, 16);
    CU_ASSERT_EQUAL(pl[2].threads, 8);
    ct_placement_plan_free(pl, 3);
    /* Eight ranks on four NUMA nodes: two per node, sharing it, 4 threads each. */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 8, &p, pl), 0);
    for (int i = 0; i < 8; i++) {
        char want[8];
        snprintf(want, sizeof want, "%d", i / 2);
        CU_ASSERT_STRING_EQUAL(nodes_of(&pl[i]), want);
        CU_ASSERT_EQUAL(pl[i].ncores, 8);
        CU_ASSERT_EQUAL(pl[i].threads, 4);
        CU_ASSERT_EQUAL(pl[i].oversubscribed, 0);
    }
    CU_ASSERT(hwloc_bitmap_isequal(pl[0].cpuset, pl[1].cpuset));
    ct_placement_plan_free(pl, 8);
    /* 40 ranks: 10 per node of 8 cores is oversubscribed. */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 40, &p, pl), 0);
    CU_ASSERT_EQUAL(pl[0].oversubscribed, 1);
    CU_ASSERT_EQUAL(pl[0].threads, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(pl[0].warning, "10 ranks share 8 cores"));
    ct_placement_plan_free(pl, 40);

    p.mode = CT_PLACEMENT_MODE_PACKAGE;
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 4, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(nodes_of(&pl[0]), "0-1");
    CU_ASSERT_STRING_EQUAL(nodes_of(&pl[1]), "0-1");
    CU_ASSERT_STRING_EQUAL(nodes_of(&pl[3]), "2-3");
    CU_ASSERT_EQUAL(pl[0].threads, 8);
    ct_placement_plan_free(pl, 4);
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 1, &p, pl), 0);
    CU_ASSERT_EQUAL(pl[0].ncores, 32);
    ct_placement_plan_free(pl, 1);

    /* None: not bound, the whole node (every PU) is where each rank may run. */
    p.mode = CT_PLACEMENT_MODE_NONE;
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 4, &p, pl), 0);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(pl[i].bind, 0);
        CU_ASSERT_STRING_EQUAL(cpus_of(&pl[i]), "0-63");
        CU_ASSERT_EQUAL(pl[i].threads, 8);
        CU_ASSERT_EQUAL(pl[i].oversubscribed, 0);
    }
    ct_placement_plan_free(pl, 4);
    hwloc_topology_destroy(t);
}

/* Which NUMA node each GPU of gpu4-node.xml hangs off, and its PCI address. */
static int gpu4_numa(const char *dev)
{
    static const char *const by_numa[4] = {"cuda1", "cuda0", "cuda3", "cuda2"};
    for (int n = 0; n < 4; n++)
        if (strcmp(dev, by_numa[n]) == 0)
            return n;
    return -1;
}

static void test_gpu4_node(void)
{
    hwloc_topology_t t = xml("gpu4-node.xml");
    /* The XML describes what make_topo.py says. */
    CU_ASSERT_EQUAL(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU), 32);
    CU_ASSERT_EQUAL(hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE), 4);
    sweep("gpu4", t, NULL, 0);
    sweep("gpu4 ht", t, NULL, 1);
    struct ct_placement_params p = params(CT_PLACEMENT_MODE_CORE, 0);
    struct ct_rank_plan pl[MAXR];
    /* Four ranks: NUMA node k and the GPU on it, found by locality, not by index. */
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 4, &p, pl), 0);
    static const char *const pci[4] = {"0000:18:03.0", "0000:38:00.0", "0000:58:00.0",
                                       "0000:78:00.0"};
    static const char *const cpus[4] = {"0-3", "4-7", "8-11", "12-15"};
    for (int i = 0; i < 4; i++) {
        char want[8];
        snprintf(want, sizeof want, "%d", i);
        CU_ASSERT_STRING_EQUAL(nodes_of(&pl[i]), want);
        CU_ASSERT_STRING_EQUAL(cpus_of(&pl[i]), cpus[i]);
        CU_ASSERT_EQUAL(gpu4_numa(pl[i].device), i);
        CU_ASSERT_STRING_EQUAL(pl[i].device_pci, pci[i]);
    }
    ct_placement_plan_free(pl, 4);
    /* Hyperthreads: Intel numbering puts the siblings 16 further. */
    p.use_hyperthreads = 1;
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 4, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(cpus_of(&pl[1]), "4-7,20-23");
    CU_ASSERT_EQUAL(pl[1].threads, 8);
    ct_placement_plan_free(pl, 4);
    p.use_hyperthreads = 0;
    /* Any number of ranks: devices shared evenly, never the BMC's VGA (card0),
     * one name per GPU (its CUDA name), and the local GPU whenever the ranks
     * spread evenly over the NUMA nodes. */
    for (int R = 1; R <= 32; R++) {
        CU_ASSERT_EQUAL_FATAL(plan(t, NULL, R, &p, pl), 0);
        int load[4] = {0, 0, 0, 0}, bad = 0;
        for (int i = 0; i < R; i++) {
            int n = gpu4_numa(pl[i].device);
            if (n < 0 || pl[i].device_index < 0 || pl[i].device_index > 3) {
                if (bad++ < 3)
                    fprintf(stderr, "  gpu4 %d ranks: rank %d got '%s' (%d)\n", R, i,
                            pl[i].device, pl[i].device_index);
                continue;
            }
            load[n]++;
            if (R == 1 || R == 2 || R == 3 || R % 4 == 0)
                if (!hwloc_bitmap_isset(pl[i].nodeset, (unsigned)n) && bad++ < 3)
                    fprintf(stderr, "  gpu4 %d ranks: rank %d on NUMA %s got %s (NUMA %d)\n", R, i,
                            nodes_of(&pl[i]), pl[i].device, n);
        }
        for (int n = 0; n < 4; n++)
            if ((load[n] < R / 4 || load[n] > (R + 3) / 4) && bad++ < 3)
                fprintf(stderr, "  gpu4 %d ranks: GPU on NUMA %d serves %d\n", R, n, load[n]);
        CU_ASSERT_EQUAL(bad, 0);
        ct_placement_plan_free(pl, R);
    }
    hwloc_topology_destroy(t);
}

/* GPUs only on NUMA 1 and 3: the ranks of NUMA 0 and 2 share their package's
 * GPU, which a round-robin by index would get wrong for rank 1. */
static void test_gpu2_node(void)
{
    hwloc_topology_t t = xml("gpu2-node.xml");
    struct ct_placement_params p = params(CT_PLACEMENT_MODE_CORE, 0);
    struct ct_rank_plan pl[MAXR];
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 4, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(pl[0].device, "cuda0");
    CU_ASSERT_STRING_EQUAL(pl[1].device, "cuda0");
    CU_ASSERT_STRING_EQUAL(pl[2].device, "cuda1");
    CU_ASSERT_STRING_EQUAL(pl[3].device, "cuda1");
    CU_ASSERT_STRING_EQUAL(pl[1].device_pci, "0000:38:00.0");
    ct_placement_plan_free(pl, 4);
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 2, &p, pl), 0);
    CU_ASSERT_STRING_EQUAL(pl[0].device, "cuda0");
    CU_ASSERT_STRING_EQUAL(pl[1].device, "cuda1");
    ct_placement_plan_free(pl, 2);
    /* One rank per package in mode none still spreads over both GPUs. */
    p.mode = CT_PLACEMENT_MODE_NONE;
    CU_ASSERT_EQUAL_FATAL(plan(t, NULL, 2, &p, pl), 0);
    CU_ASSERT_STRING_NOT_EQUAL(pl[0].device, pl[1].device);
    ct_placement_plan_free(pl, 2);
    hwloc_topology_destroy(t);
}

static void test_topology_load_errors(void)
{
    hwloc_topology_t t = NULL;
    CU_ASSERT_EQUAL(ct_placement_topology_load(&t, "/nonexistent/node.xml") < 0, 1);
    CU_ASSERT_PTR_NULL(t);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "/nonexistent/node.xml"));
    const char *dir = ct_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/bad.xml", dir);
    const char junk[] = "<topology version=\"2.0\"><object type=\"Banana\">";
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, junk, sizeof junk - 1), 0);
    CU_ASSERT_EQUAL(ct_placement_topology_load(&t, path) < 0, 1);
    CU_ASSERT_PTR_NULL(t);
    ct_test_rmtree(dir);
    /* This machine loads, and has at least one PU to give. */
    CU_ASSERT_EQUAL_FATAL(ct_placement_topology_load(&t, NULL), 0);
    struct ct_rank_plan pl[2];
    struct ct_placement_params p = params(CT_PLACEMENT_MODE_CORE, 0);
    CU_ASSERT_EQUAL(plan(t, NULL, 2, &p, pl), 0);
    ct_placement_plan_free(pl, 2);
    hwloc_topology_destroy(t);
}

/* The table for a plan: title, header, one line per rank, warnings once. */
static char *table_of(hwloc_topology_t t, int R, const struct ct_placement_params *p)
{
    struct ct_rank_plan pl[MAXR];
    struct ct_placement rec[MAXR];
    if (plan(t, NULL, R, p, pl) < 0)
        return NULL;
    for (int i = 0; i < R; i++)
        ct_placement_from_plan(t, &pl[i], i, R, "node01", p->mode, &rec[i]);
    ct_placement_plan_free(pl, R);
    char *text = NULL;
    CU_ASSERT_EQUAL(ct_placement_format(rec, R, &text), 0);
    return text;
}

static int count_rank_lines(const char *text)
{
    int n = 0;
    for (const char *line = text; line && *line;) {
        int rank;
        char host[64];
        if (sscanf(line, "%d %63s", &rank, host) == 2 && strcmp(host, "node01") == 0)
            n++;
        line = strchr(line, '\n');
        line = line ? line + 1 : NULL;
    }
    return n;
}

static void test_table(void)
{
    int show = getenv("CT_PLACEMENT_SHOW") != NULL;
    hwloc_topology_t t = xml("gpu4-node.xml");
    struct ct_placement_params p = params(CT_PLACEMENT_MODE_CORE, 0);
    char *text = table_of(t, 4, &p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    if (show)
        printf("\n--- gpu4-node.xml, 4 ranks\n%s", text);
    CU_ASSERT_EQUAL(count_rank_lines(text), 4);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "placement core: 4 ranks on 1 node"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "cuda1 0000:18:03.0"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "bind"));
    CU_ASSERT_PTR_NULL(strstr(text, "warning"));
    free(text);
    hwloc_topology_destroy(t);

    t = synth("pack:2 numa:2 core:8 pu:2");
    text = table_of(t, 8, &p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    if (show)
        printf("\n--- pack:2 numa:2 core:8 pu:2, 8 ranks\n%s", text);
    CU_ASSERT_EQUAL(count_rank_lines(text), 8);
    free(text);
    hwloc_topology_destroy(t);

    /* Oversubscribed: the warning once, naming the ranks. */
    t = synth("pack:1 numa:1 core:2 pu:1");
    text = table_of(t, 4, &p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    if (show)
        printf("\n--- pack:1 numa:1 core:2 pu:1, 4 ranks\n%s", text);
    CU_ASSERT_EQUAL(count_rank_lines(text), 4);
    const char *w = strstr(text, "warning (ranks 0-3): 4 ranks share 2 cores");
    CU_ASSERT_PTR_NOT_NULL(w);
    CU_ASSERT_PTR_NULL(w ? strstr(w + 1, "warning") : NULL);
    free(text);
    hwloc_topology_destroy(t);
    CU_ASSERT_EQUAL(ct_placement_format(NULL, 0, &text), CT_EINVAL);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"mode names", test_mode_parse},
        {"2x2x8x2 node, 1..32 ranks, properties", test_big_node_sweep},
        {"2x2x8x2 node, exact plans", test_big_node_exact},
        {"small nodes and oversubscription", test_small_nodes},
        {"allowed PUs a subset", test_allowed_subset},
        {"numa, package and none modes", test_numa_package_none_modes},
        {"4-GPU node XML", test_gpu4_node},
        {"2-GPU node XML", test_gpu2_node},
        {"topology loading", test_topology_load_errors},
        {"binding table", test_table},
        {NULL, NULL},
    };
    return ct_test_run("placement", cases);
}
