/* The placement planner without hwloc: machines described in plain C (a few
 * lines each: packages x NUMA nodes x cores x PUs, OS numbering, allowed PUs,
 * GPUs and where they hang), plans checked exactly. test_placement.c checks
 * the same planner through hwloc topologies and XML nodes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "ct_test.h"
#include "parallel/placement_plan.h"

#define MAXPU 256
#define MAXR 64

/* A synthetic node: pkgs x numas (per package) x cores x pus. intel = 1
 * numbers hyperthread siblings one core count apart (core k has PUs k and
 * k + ncores), as Intel machines do; 0 numbers them consecutively. */
struct node {
    struct ct_machine_pu pu[MAXPU];
    struct ct_machine_dev dev[8];
    struct ct_machine m;
};

static struct ct_machine *make(struct node *n, int pkgs, int numas, int cores, int pus, int intel)
{
    memset(n, 0, sizeof *n);
    int ncores = pkgs * numas * cores, k = 0;
    for (int c = 0; c < ncores; c++)
        for (int t = 0; t < pus; t++, k++) {
            n->pu[k].os = intel ? c + t * ncores : k;
            n->pu[k].core = c;
            n->pu[k].numa = c / cores;
            n->pu[k].pkg = c / (cores * numas);
            n->pu[k].usable = 1;
        }
    n->m.npu = k;
    n->m.pu = n->pu;
    n->m.dev = n->dev;
    return &n->m;
}

/* A GPU attached to NUMA node `numa` of a node of `per_numa` PUs per NUMA node. */
static void add_gpu(struct node *n, const char *name, int numa, int per_numa)
{
    struct ct_machine_dev *d = &n->dev[n->m.ndev++];
    snprintf(d->name, sizeof d->name, "%s", name);
    snprintf(d->pci, sizeof d->pci, "0000:%02x:00.0", 0x18 + 0x20 * numa);
    d->near_lo = numa * per_numa;
    d->near_hi = (numa + 1) * per_numa;
}

static const char *pus(const struct ct_machine *m, const struct ct_share *s)
{
    static char buf[8][256];
    static int k;
    k = (k + 1) % 8;
    ct_share_pus_str(buf[k], sizeof buf[k], m, s->pus);
    return buf[k];
}

static int plan(const struct ct_machine *m, int R, enum ct_placement_mode mode, int ht,
                struct ct_share *out)
{
    struct ct_placement_params p = ct_placement_default_params();
    p.mode = mode;
    p.use_hyperthreads = ht;
    int rc = ct_share_plan(m, R, &p, out);
    if (rc < 0)
        fprintf(stderr, "  plan(%d ranks): %s\n", R, ct_error_message());
    return rc;
}

static void test_core_even_spread(void)
{
    static struct node n;
    struct ct_machine *m = make(&n, 2, 2, 8, 2, 0);
    struct ct_share s[MAXR];
    /* Four ranks: a NUMA node each, first PU of each core. */
    CU_ASSERT_EQUAL_FATAL(plan(m, 4, CT_PLACEMENT_MODE_CORE, 0, s), 0);
    CU_ASSERT_STRING_EQUAL(pus(m, &s[1]), "16,18,20,22,24,26,28,30");
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(s[i].ncores, 8);
        CU_ASSERT_EQUAL(s[i].npus, 8);
        CU_ASSERT_EQUAL(s[i].threads, 8);
        CU_ASSERT_EQUAL(s[i].bind, 1);
        CU_ASSERT_EQUAL(s[i].device_index, -1);
        CU_ASSERT_STRING_EQUAL(s[i].warning, "");
    }
    ct_share_free(s, 4);
    /* Three ranks: 11, 10, 11 cores (the even spread before whole NUMA nodes). */
    CU_ASSERT_EQUAL_FATAL(plan(m, 3, CT_PLACEMENT_MODE_CORE, 0, s), 0);
    CU_ASSERT_EQUAL(s[0].ncores, 11);
    CU_ASSERT_EQUAL(s[1].ncores, 10);
    CU_ASSERT_EQUAL(s[2].ncores, 11);
    ct_share_free(s, 3);
    /* Hyperthreads: whole cores. */
    CU_ASSERT_EQUAL_FATAL(plan(m, 4, CT_PLACEMENT_MODE_CORE, 1, s), 0);
    CU_ASSERT_STRING_EQUAL(pus(m, &s[0]), "0-15");
    CU_ASSERT_EQUAL(s[0].threads, 16);
    ct_share_free(s, 4);
    /* AUTO plans as CORE. */
    struct ct_share t[MAXR];
    CU_ASSERT_EQUAL_FATAL(plan(m, 7, CT_PLACEMENT_MODE_AUTO, 0, s), 0);
    CU_ASSERT_EQUAL_FATAL(plan(m, 7, CT_PLACEMENT_MODE_CORE, 0, t), 0);
    for (int i = 0; i < 7; i++)
        CU_ASSERT_EQUAL(memcmp(s[i].pus, t[i].pus, (size_t)m->npu), 0);
    ct_share_free(s, 7);
    ct_share_free(t, 7);
}

static void test_intel_numbering(void)
{
    static struct node n;
    struct ct_machine *m = make(&n, 1, 4, 4, 2, 1);
    struct ct_share s[MAXR];
    CU_ASSERT_EQUAL_FATAL(plan(m, 4, CT_PLACEMENT_MODE_CORE, 1, s), 0);
    CU_ASSERT_STRING_EQUAL(pus(m, &s[1]), "4-7,20-23");
    CU_ASSERT_EQUAL(s[1].threads, 8);
    CU_ASSERT_EQUAL(s[1].ncores, 4);
    ct_share_free(s, 4);
    /* 32 ranks with hyperthreads: one PU each, none shared. */
    CU_ASSERT_EQUAL_FATAL(plan(m, 32, CT_PLACEMENT_MODE_CORE, 1, s), 0);
    for (int i = 0; i < 32; i++) {
        CU_ASSERT_EQUAL(s[i].npus, 1);
        CU_ASSERT_EQUAL(s[i].oversubscribed, 0);
    }
    CU_ASSERT_STRING_EQUAL(pus(m, &s[0]), "0");
    CU_ASSERT_STRING_EQUAL(pus(m, &s[1]), "16");
    ct_share_free(s, 32);
}

static void test_oversubscribed(void)
{
    static struct node n;
    struct ct_machine *m = make(&n, 1, 1, 2, 1, 0);
    struct ct_share s[MAXR];
    CU_ASSERT_EQUAL_FATAL(plan(m, 4, CT_PLACEMENT_MODE_CORE, 0, s), 0);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_STRING_EQUAL(pus(m, &s[i]), i < 2 ? "0" : "1");
        CU_ASSERT_EQUAL(s[i].oversubscribed, 1);
        CU_ASSERT_EQUAL(s[i].threads, 1);
    }
    CU_ASSERT_STRING_EQUAL(s[0].warning,
                           "4 ranks share 2 cores (PUs 0-1): they compete for cores and every "
                           "step waits for the slowest; start at most 2 ranks per node");
    ct_share_free(s, 4);
    /* Three ranks on two cores: the lone rank is not oversubscribed. */
    CU_ASSERT_EQUAL_FATAL(plan(m, 3, CT_PLACEMENT_MODE_CORE, 0, s), 0);
    CU_ASSERT_EQUAL(s[0].oversubscribed + s[1].oversubscribed, 2);
    CU_ASSERT_EQUAL(s[2].oversubscribed, 0);
    ct_share_free(s, 3);
}

/* Slurm gives the job PUs 0-5 of a 2 x 4 x 2 node. */
static void test_allowed_subset(void)
{
    static struct node n;
    struct ct_machine *m = make(&n, 2, 1, 4, 2, 0);
    for (int k = 6; k < m->npu; k++)
        n.pu[k].usable = 0;
    struct ct_share s[MAXR];
    CU_ASSERT_EQUAL_FATAL(plan(m, 1, CT_PLACEMENT_MODE_CORE, 0, s), 0);
    CU_ASSERT_STRING_EQUAL(pus(m, &s[0]), "0,2,4");
    CU_ASSERT_EQUAL(s[0].threads, 3);
    ct_share_free(s, 1);
    CU_ASSERT_EQUAL_FATAL(plan(m, 4, CT_PLACEMENT_MODE_CORE, 0, s), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(s[0].warning, "or set dist.use_hyperthreads = true"));
    ct_share_free(s, 4);
    CU_ASSERT_EQUAL_FATAL(plan(m, 3, CT_PLACEMENT_MODE_CORE, 1, s), 0);
    CU_ASSERT_STRING_EQUAL(pus(m, &s[2]), "4-5");
    ct_share_free(s, 3);
    /* Nothing usable: an error, not an empty plan. */
    for (int k = 0; k < m->npu; k++)
        n.pu[k].usable = 0;
    CU_ASSERT_EQUAL(plan(m, 1, CT_PLACEMENT_MODE_CORE, 0, s), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_share_plan(m, 0, NULL, s), CT_EINVAL);
}

static void test_numa_package_none(void)
{
    static struct node n;
    struct ct_machine *m = make(&n, 2, 2, 8, 2, 0);
    struct ct_share s[MAXR];
    CU_ASSERT_EQUAL_FATAL(plan(m, 3, CT_PLACEMENT_MODE_NUMA, 0, s), 0);
    CU_ASSERT_EQUAL(s[0].ncores, 16);
    CU_ASSERT_EQUAL(s[1].ncores, 8);
    CU_ASSERT_STRING_EQUAL(pus(m, &s[2]), "48,50,52,54,56,58,60,62");
    ct_share_free(s, 3);
    /* 40 ranks on 4 NUMA nodes of 8 cores: 10 share each. */
    CU_ASSERT_EQUAL_FATAL(plan(m, 40, CT_PLACEMENT_MODE_NUMA, 0, s), 0);
    CU_ASSERT_EQUAL(s[0].oversubscribed, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(s[0].warning, "10 ranks share 8 cores"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s[0].warning, "use dist.placement = core"));
    ct_share_free(s, 40);
    /* Package: two ranks per package, 8 threads each. */
    CU_ASSERT_EQUAL_FATAL(plan(m, 4, CT_PLACEMENT_MODE_PACKAGE, 0, s), 0);
    CU_ASSERT_EQUAL(memcmp(s[0].pus, s[1].pus, (size_t)m->npu), 0);
    CU_ASSERT_EQUAL(s[0].threads, 8);
    CU_ASSERT_EQUAL(s[3].ncores, 16);
    ct_share_free(s, 4);
    /* None: unbound, every PU, the cores' share of threads. */
    CU_ASSERT_EQUAL_FATAL(plan(m, 4, CT_PLACEMENT_MODE_NONE, 0, s), 0);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(s[i].bind, 0);
        CU_ASSERT_STRING_EQUAL(pus(m, &s[i]), "0-63");
        CU_ASSERT_EQUAL(s[i].threads, 8);
    }
    ct_share_free(s, 4);
}

/* GPUs on NUMA nodes 1 and 3 only: ranks on 0 and 2 take their package's. */
static void test_devices(void)
{
    static struct node n;
    struct ct_machine *m = make(&n, 2, 2, 4, 1, 0);
    add_gpu(&n, "cuda0", 1, 4);
    add_gpu(&n, "cuda1", 3, 4);
    struct ct_share s[MAXR];
    CU_ASSERT_EQUAL_FATAL(plan(m, 4, CT_PLACEMENT_MODE_CORE, 0, s), 0);
    int want[4] = {0, 0, 1, 1};
    for (int i = 0; i < 4; i++)
        CU_ASSERT_EQUAL(s[i].device_index, want[i]);
    ct_share_free(s, 4);
    /* Eight ranks: four each, still by package. */
    CU_ASSERT_EQUAL_FATAL(plan(m, 8, CT_PLACEMENT_MODE_CORE, 0, s), 0);
    for (int i = 0; i < 8; i++)
        CU_ASSERT_EQUAL(s[i].device_index, i / 4);
    ct_share_free(s, 8);
    /* Three ranks on two GPUs: one GPU serves two, the other one. */
    CU_ASSERT_EQUAL_FATAL(plan(m, 3, CT_PLACEMENT_MODE_CORE, 0, s), 0);
    int load[2] = {0, 0};
    for (int i = 0; i < 3; i++)
        load[s[i].device_index]++;
    CU_ASSERT(load[0] >= 1 && load[1] >= 1);
    ct_share_free(s, 3);
}

/* A launcher's bindings kept: threads split among overlapping ranks. */
static void test_keep(void)
{
    static struct node n;
    struct ct_machine *m = make(&n, 1, 1, 4, 1, 0);
    unsigned char a[4] = {1, 1, 0, 0}, b[4] = {1, 1, 0, 0}, c[4] = {0, 0, 1, 1};
    const unsigned char *peers[3] = {a, b, c};
    struct ct_placement_params p = ct_placement_default_params();
    struct ct_share s;
    CU_ASSERT_EQUAL_FATAL(ct_share_keep(m, a, peers, 3, 0, &p, &s), 0);
    CU_ASSERT_EQUAL(s.threads, 1);
    CU_ASSERT_EQUAL(s.ncores, 2);
    CU_ASSERT_EQUAL(s.oversubscribed, 0);
    CU_ASSERT_STRING_EQUAL(pus(m, &s), "0-1");
    ct_share_free(&s, 1);
    CU_ASSERT_EQUAL_FATAL(ct_share_keep(m, c, peers, 3, 2, &p, &s), 0);
    CU_ASSERT_EQUAL(s.threads, 2);
    ct_share_free(&s, 1);
    /* Three ranks on one core: oversubscribed, with the launcher's advice. */
    unsigned char one[4] = {1, 0, 0, 0};
    const unsigned char *same[3] = {one, one, one};
    CU_ASSERT_EQUAL_FATAL(ct_share_keep(m, one, same, 3, 1, &p, &s), 0);
    CU_ASSERT_EQUAL(s.oversubscribed, 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(s.warning, "3 ranks share 1 core (PUs 0)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(s.warning, "bind the ranks apart"));
    ct_share_free(&s, 1);
}

static void test_pus_str(void)
{
    static struct node n;
    struct ct_machine *m = make(&n, 1, 1, 128, 1, 0);
    unsigned char f[128] = {0};
    char buf[16];
    for (int k = 0; k < 128; k += 2)
        f[k] = 1;
    ct_share_pus_str(buf, sizeof buf, m, f);
    CU_ASSERT_STRING_EQUAL(buf, "0,2,4,6,8,10...");
    memset(f, 0, sizeof f);
    ct_share_pus_str(buf, sizeof buf, m, f);
    CU_ASSERT_STRING_EQUAL(buf, "");
    f[3] = f[4] = f[5] = f[9] = 1;
    ct_share_pus_str(buf, sizeof buf, m, f);
    CU_ASSERT_STRING_EQUAL(buf, "3-5,9");
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"core: even spread, NUMA-aligned", test_core_even_spread},
        {"core: Intel PU numbering", test_intel_numbering},
        {"core: oversubscription", test_oversubscribed},
        {"allowed PUs a subset", test_allowed_subset},
        {"numa, package and none", test_numa_package_none},
        {"devices by locality", test_devices},
        {"kept bindings", test_keep},
        {"PU list syntax", test_pus_str},
        {NULL, NULL},
    };
    return ct_test_run("placement_plan", cases);
}
