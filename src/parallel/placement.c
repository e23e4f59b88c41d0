/* Placement of ranks on a node: planning, binding, reporting (see placement.h).
 *
 * The plan works on "units": cores (one PU each unless hyperthreads are
 * wanted), or single PUs when hyperthreads are wanted and there are more
 * ranks than cores. Units are listed in hwloc's logical order, in which every
 * package and NUMA node is a contiguous run, so "contiguous group of cores"
 * and "NUMA boundary" are simple index arithmetic. This file binds nothing
 * until ct_placement_apply.
 */
#include "parallel/placement.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"
#include "core/threads.h"

const char *const ct_placement_mode_names[CT_PLACEMENT_MODE_COUNT + 1] = {
    [CT_PLACEMENT_MODE_AUTO] = "auto",       [CT_PLACEMENT_MODE_NONE] = "none",
    [CT_PLACEMENT_MODE_CORE] = "core",       [CT_PLACEMENT_MODE_NUMA] = "numa",
    [CT_PLACEMENT_MODE_PACKAGE] = "package", [CT_PLACEMENT_MODE_COUNT] = NULL,
};

struct ct_placement_params ct_placement_default_params(void)
{
    struct ct_placement_params p = {.mode = CT_PLACEMENT_MODE_AUTO, .threads = 0,
                                    .use_hyperthreads = 0};
    return p;
}

int ct_placement_mode_parse(const char *s, enum ct_placement_mode *out)
{
    for (int m = 0; s && m < CT_PLACEMENT_MODE_COUNT; m++)
        if (strcasecmp(s, ct_placement_mode_names[m]) == 0) {
            *out = (enum ct_placement_mode)m;
            return 0;
        }
    return ct_error_set(CT_EINVAL, "placement '%s': expected auto, none, core, numa or package",
                        s ? s : "(null)");
}

const char *ct_placement_mode_name(enum ct_placement_mode mode)
{
    return (int)mode >= 0 && mode < CT_PLACEMENT_MODE_COUNT ? ct_placement_mode_names[mode] : "?";
}

/* A bitmap in hwloc's list syntax ("0-3,8"), cut with "..." if it does not fit. */
static void bitmap_str(char *buf, size_t n, hwloc_const_bitmap_t set)
{
    int need = hwloc_bitmap_list_snprintf(buf, n, set);
    if (need >= (int)n && n > 4)
        memcpy(buf + n - 4, "...", 4);
    else if (need < 0 && n)
        buf[0] = '\0';
}

/* ------------------------------------------------------------------ units */

struct unit {
    hwloc_obj_t core; /* the core (or the PU when the topology has no cores) */
    int pu;           /* the one PU taken (OS index), or -1 for all usable PUs of the core */
    int numa, pkg;    /* logical indices of its NUMA node and package */
};

static int numa_of(hwloc_topology_t topo, hwloc_obj_t core)
{
    hwloc_obj_t n = NULL;
    while ((n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) != NULL)
        if (n->cpuset && hwloc_bitmap_intersects(n->cpuset, core->cpuset))
            return (int)n->logical_index;
    return 0;
}

static int package_of(hwloc_topology_t topo, hwloc_obj_t core)
{
    hwloc_obj_t p = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, core);
    return p ? (int)p->logical_index : 0;
}

/* The units of `usable`: one per core with its first PU (ht = 0), one per core
 * with all its PUs (ht = 1, per_pu = 0) or one per PU (ht = 1, per_pu = 1). */
static int build_units(hwloc_topology_t topo, hwloc_const_cpuset_t usable, int ht, int per_pu,
                       struct unit **out, int *n_out)
{
    int npus = hwloc_bitmap_weight(usable);
    struct unit *u = calloc((size_t)(npus > 0 ? npus : 1), sizeof *u);
    hwloc_bitmap_t in = hwloc_bitmap_alloc();
    if (!u || !in) {
        free(u);
        hwloc_bitmap_free(in);
        return ct_error_set(CT_ENOMEM, "placement: out of memory");
    }
    hwloc_obj_type_t type =
        hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0 ? HWLOC_OBJ_CORE : HWLOC_OBJ_PU;
    int n = 0;
    hwloc_obj_t core = NULL;
    while ((core = hwloc_get_next_obj_by_type(topo, type, core)) != NULL) {
        hwloc_bitmap_and(in, core->cpuset, usable);
        if (hwloc_bitmap_iszero(in))
            continue;
        struct unit base = {.core = core, .pu = -1, .numa = numa_of(topo, core),
                            .pkg = package_of(topo, core)};
        if (!ht) {
            base.pu = hwloc_bitmap_first(in);
            u[n++] = base;
        } else if (!per_pu) {
            u[n++] = base;
        } else {
            int pu;
            hwloc_bitmap_foreach_begin(pu, in) {
                base.pu = pu;
                if (n < npus)
                    u[n++] = base;
            }
            hwloc_bitmap_foreach_end();
        }
    }
    hwloc_bitmap_free(in);
    *out = u;
    *n_out = n;
    return 0;
}

/* Cost of the boundary before unit k: crossing a NUMA node 1, a package 2 more. */
static int boundary_cost(const struct unit *u, int k)
{
    return (u[k].numa != u[k - 1].numa) + 2 * (u[k].pkg != u[k - 1].pkg);
}

/* Cut nu units into R contiguous runs (R <= nu) of q = nu/R or q+1 units,
 * exactly nu%R of them long: the even spread. Among all orders of long and
 * short runs, take the one whose runs cross the fewest boundaries; among
 * those, the one whose runs start closest to the ideal i*nu/R, which spreads
 * the long runs out and so puts as many ranks on each NUMA node as its cores
 * allow (3, 3, 3, 3 ranks rather than 2, 2, 4, 4 on four nodes of 4 cores);
 * ties go to long runs first. Dynamic programming over (runs placed, long
 * runs used), which fixes where the next run starts. */
static int split_even(const struct unit *u, int nu, int R, int *len)
{
    const int64_t INF = INT64_MAX / 4;
    /* One boundary crossed outweighs any sum of start deviations. */
    const int64_t W = (int64_t)R * R * nu + 1;
    int q = nu / R, r = nu % R;
    int64_t *pre = malloc((size_t)nu * sizeof *pre);
    int64_t *f = malloc((size_t)(R + 1) * (size_t)(r + 1) * sizeof *f);
    if (!pre || !f) {
        free(pre);
        free(f);
        return ct_error_set(CT_ENOMEM, "placement: out of memory");
    }
    /* pre[k]: cost of the boundaries before units 1..k; a run [s, s+l) crosses
     * pre[s+l-1] - pre[s]. */
    pre[0] = 0;
    for (int k = 1; k < nu; k++)
        pre[k] = pre[k - 1] + boundary_cost(u, k);
#define F(i, b) f[(size_t)(i) * (size_t)(r + 1) + (size_t)(b)]
    /* Cost of run i starting at s with l units. */
#define RUN(i, s, l)                                                                   \
    (W * (pre[(s) + (l)-1] - pre[(s)]) +                                               \
     ((int64_t)(s)*R - (int64_t)(i)*nu < 0 ? (int64_t)(i)*nu - (int64_t)(s)*R          \
                                           : (int64_t)(s)*R - (int64_t)(i)*nu))
    for (size_t k = 0; k < (size_t)(R + 1) * (size_t)(r + 1); k++)
        f[k] = INF;
    F(R, r) = 0;
    for (int i = R - 1; i >= 0; i--)
        for (int b = 0; b <= r && b <= i; b++) {
            int s = i * q + b;
            int64_t best = INF;
            if (b < r && F(i + 1, b + 1) < INF)
                best = RUN(i, s, q + 1) + F(i + 1, b + 1);
            if (i - b < R - r && F(i + 1, b) < INF && RUN(i, s, q) + F(i + 1, b) < best)
                best = RUN(i, s, q) + F(i + 1, b);
            F(i, b) = best;
        }
    for (int i = 0, b = 0; i < R; i++) {
        int s = i * q + b;
        int64_t lc = b < r && F(i + 1, b + 1) < INF ? RUN(i, s, q + 1) + F(i + 1, b + 1) : INF;
        int64_t sc = i - b < R - r && F(i + 1, b) < INF ? RUN(i, s, q) + F(i + 1, b) : INF;
        len[i] = lc <= sc ? q + 1 : q;
        b += lc <= sc;
    }
#undef F
#undef RUN
    free(pre);
    free(f);
    return 0;
}

/* ------------------------------------------------------------------ devices */

struct device {
    hwloc_obj_t key;  /* the PCI device, or the OS device when it has none */
    hwloc_obj_t near; /* its first non-I/O ancestor: where it is attached */
    int prio;         /* of the OS device whose name we show */
    char name[32];
    char pci[16];
};

/* How well an OS device names an accelerator: compute interfaces (CUDA,
 * OpenCL, Level Zero, VE) first, then management ones (nvml, rsmi), then DRM
 * cards and render nodes; -1 for devices that are not GPUs or co-processors. */
static int osdev_prio(hwloc_obj_t os)
{
    const char *name = os->name ? os->name : "";
    if (os->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC)
        return 3;
    if (os->attr->osdev.type != HWLOC_OBJ_OSDEV_GPU)
        return -1;
    if (strncmp(name, "renderD", 7) == 0 || strncmp(name, "controlD", 8) == 0)
        return 0;
    if (strncmp(name, "card", 4) == 0)
        return 1;
    return 2;
}

/* A PCI device only DRM knows about is an accelerator when it is a 3D or
 * processing-accelerator controller or comes from a GPU vendor: the VGA of a
 * server's BMC (ASPEED, Matrox) also shows up as card0. */
static int drm_only_is_accelerator(hwloc_obj_t key)
{
    if (key->type != HWLOC_OBJ_PCI_DEVICE)
        return 0;
    unsigned cls = key->attr->pcidev.class_id, vendor = key->attr->pcidev.vendor_id;
    return cls == 0x0302 || cls == 0x0380 || (cls >> 8) == 0x12 || vendor == 0x10de ||
           vendor == 0x1002;
}

static int find_devices(hwloc_topology_t topo, struct device **out, int *n_out)
{
    int cap = 0, n = 0;
    struct device *d = NULL;
    hwloc_obj_t os = NULL;
    while ((os = hwloc_get_next_osdev(topo, os)) != NULL) {
        int prio = osdev_prio(os);
        if (prio < 0)
            continue;
        hwloc_obj_t key = os;
        for (hwloc_obj_t p = os->parent; p && (p->type == HWLOC_OBJ_PCI_DEVICE ||
                                               p->type == HWLOC_OBJ_OS_DEVICE);
             p = p->parent)
            if (p->type == HWLOC_OBJ_PCI_DEVICE) {
                key = p;
                break;
            }
        int i = 0;
        while (i < n && d[i].key != key)
            i++;
        if (i == n) {
            if (n == cap) {
                cap = cap ? 2 * cap : 8;
                struct device *nd = realloc(d, (size_t)cap * sizeof *d);
                if (!nd) {
                    free(d);
                    return ct_error_set(CT_ENOMEM, "placement: out of memory");
                }
                d = nd;
            }
            memset(&d[n], 0, sizeof d[n]);
            d[n].key = key;
            d[n].near = hwloc_get_non_io_ancestor_obj(topo, key);
            d[n].prio = -1;
            if (key->type == HWLOC_OBJ_PCI_DEVICE)
                snprintf(d[n].pci, sizeof d[n].pci, "%04x:%02x:%02x.%01x",
                         (unsigned)key->attr->pcidev.domain, (unsigned)key->attr->pcidev.bus,
                         (unsigned)key->attr->pcidev.dev, (unsigned)key->attr->pcidev.func);
            n++;
        }
        if (prio > d[i].prio) {
            d[i].prio = prio;
            snprintf(d[i].name, sizeof d[i].name, "%s", os->name ? os->name : "?");
        }
    }
    /* Keep accelerators only, in topology order. */
    int k = 0;
    for (int i = 0; i < n; i++)
        if (d[i].prio >= 2 || drm_only_is_accelerator(d[i].key))
            d[k++] = d[i];
    *out = d;
    *n_out = k;
    return 0;
}

/* 0: attached to one of the set's NUMA nodes; 1: to its package; 2: elsewhere. */
static int device_tier(hwloc_topology_t topo, const struct device *dev, hwloc_const_cpuset_t set,
                       hwloc_bitmap_t tmp_nodes, hwloc_bitmap_t tmp_cpus)
{
    hwloc_const_cpuset_t where = dev->near && dev->near->cpuset
                                     ? dev->near->cpuset
                                     : hwloc_topology_get_topology_cpuset(topo);
    hwloc_cpuset_to_nodeset(topo, set, tmp_nodes);
    hwloc_cpuset_from_nodeset(topo, tmp_cpus, tmp_nodes);
    if (hwloc_bitmap_intersects(where, tmp_cpus) || hwloc_bitmap_intersects(where, set))
        return 0;
    hwloc_bitmap_zero(tmp_cpus);
    hwloc_obj_t pkg = NULL;
    while ((pkg = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_PACKAGE, pkg)) != NULL)
        if (hwloc_bitmap_intersects(pkg->cpuset, set))
            hwloc_bitmap_or(tmp_cpus, tmp_cpus, pkg->cpuset);
    return hwloc_bitmap_intersects(where, tmp_cpus) ? 1 : 2;
}

/* Give each of n ranks (cpusets sets[i]) a device index, -1 when there are
 * none. Every device serves floor(n/nd) or ceil(n/nd) ranks; each rank takes
 * the nearest device still open (least loaded, then lowest index, among
 * equals); ranks whose nearest tier is better and has fewer devices choose
 * first, so a rank with one local device is not robbed of it by a rank that
 * is equally close to several. */
static int assign_devices(hwloc_topology_t topo, const struct device *dev, int nd,
                          hwloc_const_cpuset_t const *sets, int n, int *choice)
{
    if (nd == 0) {
        for (int i = 0; i < n; i++)
            choice[i] = -1;
        return 0;
    }
    int *tier = malloc((size_t)n * (size_t)nd * sizeof *tier);
    int *order = malloc((size_t)n * sizeof *order);
    int *key = malloc((size_t)n * sizeof *key);
    int *load = calloc((size_t)nd, sizeof *load);
    hwloc_bitmap_t tn = hwloc_bitmap_alloc(), tc = hwloc_bitmap_alloc();
    int rc = 0;
    if (!tier || !order || !key || !load || !tn || !tc) {
        rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        int best = 3, count = 0;
        for (int j = 0; j < nd; j++) {
            int t = device_tier(topo, &dev[j], sets[i], tn, tc);
            tier[(size_t)i * (size_t)nd + (size_t)j] = t;
            if (t < best)
                best = t, count = 0;
            count += t == best;
        }
        key[i] = best * (nd + 1) + count;
        order[i] = i;
    }
    /* Insertion sort by (key, rank): n is the ranks of one node. */
    for (int i = 1; i < n; i++) {
        int v = order[i], j = i;
        while (j > 0 && key[order[j - 1]] > key[v])
            order[j] = order[j - 1], j--;
        order[j] = v;
    }
    int base = n / nd, extra = n % nd, over = 0;
    for (int k = 0; k < n; k++) {
        int i = order[k], pick = -1;
        for (int j = 0; j < nd; j++) {
            int open = load[j] < base || (load[j] == base && over < extra);
            if (!open)
                continue;
            if (pick < 0) {
                pick = j;
                continue;
            }
            int tj = tier[(size_t)i * (size_t)nd + (size_t)j];
            int tp = tier[(size_t)i * (size_t)nd + (size_t)pick];
            if (tj < tp || (tj == tp && load[j] < load[pick]))
                pick = j;
        }
        if (pick < 0)
            pick = 0; /* cannot happen: the capacities add up to n */
        if (load[pick] == base)
            over++;
        load[pick]++;
        choice[i] = pick;
    }
done:
    free(tier);
    free(order);
    free(key);
    free(load);
    hwloc_bitmap_free(tn);
    hwloc_bitmap_free(tc);
    return rc;
}

static void set_device(struct ct_rank_plan *e, const struct device *dev, int index)
{
    e->device_index = index;
    if (index < 0) {
        snprintf(e->device, sizeof e->device, "cpu");
        e->device_pci[0] = '\0';
    } else {
        snprintf(e->device, sizeof e->device, "%s", dev[index].name);
        snprintf(e->device_pci, sizeof e->device_pci, "%s", dev[index].pci);
    }
}

/* ------------------------------------------------------------------ plan */

void ct_placement_plan_free(struct ct_rank_plan *plan, int n)
{
    for (int i = 0; plan && i < n; i++) {
        hwloc_bitmap_free(plan[i].cpuset);
        hwloc_bitmap_free(plan[i].nodeset);
        plan[i].cpuset = plan[i].nodeset = NULL;
    }
}

/* Distinct cores among units [s, s+l) (contiguous, so count changes). */
static int count_cores(const struct unit *u, int s, int l)
{
    int c = l > 0;
    for (int k = s + 1; k < s + l; k++)
        c += u[k].core != u[k - 1].core;
    return c;
}

static void add_unit(hwloc_bitmap_t set, const struct unit *u, hwloc_const_cpuset_t usable,
                     hwloc_bitmap_t tmp)
{
    if (u->pu >= 0) {
        hwloc_bitmap_set(set, (unsigned)u->pu);
    } else {
        hwloc_bitmap_and(tmp, u->core->cpuset, usable);
        hwloc_bitmap_or(set, set, tmp);
    }
}

/* The one warning of an oversubscribed rank: `ranks` ranks share `units`
 * cores (PUs with ht) of the PU set `shared`; `advice` says what to do. */
static void oversub_warning(struct ct_rank_plan *e, int ranks, int units, int ht,
                            hwloc_const_cpuset_t shared, const char *advice)
{
    char cpus[128];
    bitmap_str(cpus, sizeof cpus, shared);
    snprintf(e->warning, sizeof e->warning,
             "%d ranks share %d %s (PUs %s): they compete for cores and every step waits for "
             "the slowest; %s",
             ranks, units, ht ? (units == 1 ? "PU" : "PUs") : (units == 1 ? "core" : "cores"),
             cpus, advice);
}

/* "start at most N ranks per node[ or set dist.use_hyperthreads = true]" */
static void node_advice(char *buf, size_t n, int units, int ht, int npus, int R)
{
    snprintf(buf, n, "start at most %d ranks per node%s", units,
             !ht && npus >= R ? " or set dist.use_hyperthreads = true" : "");
}

int ct_placement_plan(hwloc_topology_t topo, hwloc_const_cpuset_t allowed, int R,
                      const struct ct_placement_params *p, struct ct_rank_plan *out)
{
    struct ct_placement_params pp = p ? *p : ct_placement_default_params();
    if (!topo || !out || R < 1)
        return ct_error_set(CT_EINVAL, "placement: need a topology and at least one rank (got %d)",
                            R);
    if ((int)pp.mode < 0 || pp.mode >= CT_PLACEMENT_MODE_COUNT || pp.threads < 0)
        return ct_error_set(CT_EINVAL, "placement: invalid mode %d or threads %d", (int)pp.mode,
                            pp.threads);
    int ht = pp.use_hyperthreads != 0;
    memset(out, 0, (size_t)R * sizeof *out);

    int rc = 0, nu = 0, ncores = 0;
    struct unit *u = NULL, *cores = NULL;
    int *len = NULL, *dom_of = NULL, *dchoice = NULL;
    struct device *dev = NULL;
    int nd = 0;
    hwloc_const_cpuset_t *sets = NULL;
    hwloc_bitmap_t usable = hwloc_bitmap_alloc(), tmp = hwloc_bitmap_alloc();
    if (!usable || !tmp) {
        rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
        goto done;
    }
    for (int i = 0; i < R; i++) {
        out[i].cpuset = hwloc_bitmap_alloc();
        out[i].nodeset = hwloc_bitmap_alloc();
        out[i].device_index = -1;
        if (!out[i].cpuset || !out[i].nodeset) {
            rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
            goto done;
        }
    }
    hwloc_bitmap_and(usable, allowed ? allowed : hwloc_topology_get_allowed_cpuset(topo),
                     hwloc_topology_get_topology_cpuset(topo));
    if (hwloc_bitmap_iszero(usable)) {
        char a[128];
        bitmap_str(a, sizeof a, allowed ? allowed : hwloc_topology_get_allowed_cpuset(topo));
        rc = ct_error_set(CT_EINVAL, "placement: the allowed PUs (%s) are not in the topology", a);
        goto done;
    }
    int npus = hwloc_bitmap_weight(usable);
    char advice[96];
    if ((rc = build_units(topo, usable, 0, 0, &cores, &ncores)) < 0)
        goto done;

    switch (pp.mode) {
    case CT_PLACEMENT_MODE_NONE: {
        /* Not bound: each rank may run anywhere; BLAS threads share the cores. */
        int units = ht ? npus : ncores;
        for (int i = 0; i < R; i++) {
            hwloc_bitmap_copy(out[i].cpuset, usable);
            out[i].bind = 0;
            out[i].threads = pp.threads ? pp.threads : (units / R > 0 ? units / R : 1);
            out[i].oversubscribed = R > units;
            if (out[i].oversubscribed) {
                node_advice(advice, sizeof advice, units, ht, npus, R);
                oversub_warning(&out[i], R, units, ht, usable, advice);
            }
        }
        break;
    }
    case CT_PLACEMENT_MODE_AUTO:
    case CT_PLACEMENT_MODE_CORE: {
        int per_pu = ht && R > ncores;
        if ((rc = build_units(topo, usable, ht, per_pu, &u, &nu)) < 0)
            goto done;
        if (R <= nu) {
            if (!(len = malloc((size_t)R * sizeof *len))) {
                rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
                goto done;
            }
            if ((rc = split_even(u, nu, R, len)) < 0)
                goto done;
            for (int i = 0, s = 0; i < R; s += len[i], i++) {
                for (int k = s; k < s + len[i]; k++)
                    add_unit(out[i].cpuset, &u[k], usable, tmp);
                out[i].bind = 1;
                out[i].threads = pp.threads ? pp.threads
                                            : (ht ? hwloc_bitmap_weight(out[i].cpuset)
                                                  : count_cores(u, s, len[i]));
            }
        } else {
            /* More ranks than units: rank i takes unit i*nu/R, so consecutive
             * ranks share a unit and no unit has two more ranks than another. */
            for (int i = 0; i < R; i++) {
                int k = (int)((int64_t)i * nu / R);
                int first = (int)(((int64_t)k * R + nu - 1) / nu);
                int next = (int)(((int64_t)(k + 1) * R + nu - 1) / nu);
                add_unit(out[i].cpuset, &u[k], usable, tmp);
                out[i].bind = 1;
                out[i].threads = pp.threads ? pp.threads : 1;
                out[i].oversubscribed = next - first > 1;
                if (out[i].oversubscribed) {
                    node_advice(advice, sizeof advice, nu, ht, npus, R);
                    oversub_warning(&out[i], R, nu, ht, usable, advice);
                }
            }
        }
        break;
    }
    case CT_PLACEMENT_MODE_NUMA:
    case CT_PLACEMENT_MODE_PACKAGE: {
        if ((rc = build_units(topo, usable, ht, 0, &u, &nu)) < 0)
            goto done;
        int numa = pp.mode == CT_PLACEMENT_MODE_NUMA;
        /* Domains are runs of units with the same NUMA node (package). */
        if (!(dom_of = malloc((size_t)(nu + 1) * sizeof *dom_of))) {
            rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
            goto done;
        }
        int D = 0;
        for (int k = 0; k < nu; k++) {
            if (k > 0 && (numa ? u[k].numa != u[k - 1].numa : u[k].pkg != u[k - 1].pkg))
                D++;
            dom_of[k] = D;
        }
        D++;
        for (int i = 0; i < R; i++) {
            int d_lo, d_hi, ranks_here, index_here;
            if (R <= D) {
                /* Domain j goes to rank j*R/D: whole and contiguous, the
                 * first ranks taking the extra ones. */
                d_lo = (int)(((int64_t)i * D + R - 1) / R);
                d_hi = (int)(((int64_t)(i + 1) * D + R - 1) / R);
                ranks_here = 1, index_here = 0;
            } else {
                d_lo = (int)((int64_t)i * D / R);
                d_hi = d_lo + 1;
                int first = (int)(((int64_t)d_lo * R + D - 1) / D);
                int next = (int)(((int64_t)(d_lo + 1) * R + D - 1) / D);
                ranks_here = next - first, index_here = i - first;
            }
            for (int k = 0; k < nu; k++)
                if (dom_of[k] >= d_lo && dom_of[k] < d_hi)
                    add_unit(out[i].cpuset, &u[k], usable, tmp);
            int units = 0;
            for (int k = 0; k < nu; k++)
                units += dom_of[k] >= d_lo && dom_of[k] < d_hi;
            if (ht)
                units = hwloc_bitmap_weight(out[i].cpuset);
            out[i].bind = 1;
            int share = units / ranks_here + (index_here < units % ranks_here);
            out[i].threads = pp.threads ? pp.threads : (share > 0 ? share : 1);
            out[i].oversubscribed = ranks_here > units;
            if (out[i].oversubscribed)
                oversub_warning(&out[i], ranks_here, units, ht, out[i].cpuset,
                                "use dist.placement = core or start fewer ranks");
        }
        break;
    }
    default:
        break;
    }

    for (int i = 0; i < R; i++) {
        hwloc_cpuset_to_nodeset(topo, out[i].cpuset, out[i].nodeset);
        out[i].npus = hwloc_bitmap_weight(out[i].cpuset);
        int nc = 0;
        for (int k = 0; k < ncores; k++)
            nc += hwloc_bitmap_intersects(cores[k].core->cpuset, out[i].cpuset);
        out[i].ncores = nc;
    }

    if ((rc = find_devices(topo, &dev, &nd)) < 0)
        goto done;
    sets = malloc((size_t)R * sizeof *sets);
    dchoice = malloc((size_t)R * sizeof *dchoice);
    if (!sets || !dchoice) {
        rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
        goto done;
    }
    for (int i = 0; i < R; i++)
        sets[i] = out[i].cpuset;
    if ((rc = assign_devices(topo, dev, nd, sets, R, dchoice)) < 0)
        goto done;
    for (int i = 0; i < R; i++)
        set_device(&out[i], dev, dchoice[i]);

done:
    if (rc < 0)
        ct_placement_plan_free(out, R);
    hwloc_bitmap_free(usable);
    hwloc_bitmap_free(tmp);
    free(u);
    free(cores);
    free(len);
    free(dom_of);
    free(dev);
    free(sets);
    free(dchoice);
    return rc;
}

int ct_placement_topology_load(hwloc_topology_t *out, const char *xml_path)
{
    hwloc_topology_t t;
    *out = NULL;
    if (hwloc_topology_init(&t) != 0)
        return ct_error_set(CT_ENOMEM, "hwloc: cannot create a topology: %s", strerror(errno));
    /* GPUs and co-processors are I/O objects, which hwloc leaves out by default. */
    hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (xml_path) {
        if (hwloc_topology_set_xml(t, xml_path) != 0) {
            int e = errno;
            hwloc_topology_destroy(t);
            return ct_error_set(e == ENOENT ? CT_ENOENT : CT_EFORMAT,
                                "%s: cannot use as an hwloc XML topology: %s", xml_path,
                                strerror(e));
        }
    } else {
        /* Discovery must not move our threads around (other threads exist by now). */
        hwloc_topology_set_flags(t, HWLOC_TOPOLOGY_FLAG_DONT_CHANGE_BINDING);
    }
    if (hwloc_topology_load(t) != 0) {
        int e = errno;
        hwloc_topology_destroy(t);
        return ct_error_set(xml_path ? CT_EFORMAT : CT_EIO, "%s: hwloc could not load the topology: %s",
                            xml_path ? xml_path : "this machine", strerror(e));
    }
    *out = t;
    return 0;
}

/* ------------------------------------------------------------------ records */

/* Does the rank's memory need a policy? Only when its NUMA nodes are a strict
 * subset of the nodes that have CPUs; on a one-node machine there is nothing to choose. */
static int nodes_strict_subset(hwloc_topology_t topo, hwloc_const_nodeset_t nodes)
{
    hwloc_bitmap_t all = hwloc_bitmap_alloc();
    if (!all)
        return 0;
    hwloc_cpuset_to_nodeset(topo, hwloc_topology_get_topology_cpuset(topo), all);
    int strict = !hwloc_bitmap_iszero(nodes) && hwloc_bitmap_isincluded(nodes, all) &&
                 !hwloc_bitmap_isequal(nodes, all);
    hwloc_bitmap_free(all);
    return strict;
}

void ct_placement_from_plan(hwloc_topology_t topo, const struct ct_rank_plan *plan,
                            int local_rank, int local_world, const char *host,
                            enum ct_placement_mode mode, struct ct_placement *out)
{
    memset(out, 0, sizeof *out);
    out->rank = local_rank;
    out->local_rank = local_rank;
    out->local_world = local_world;
    out->mode = mode;
    snprintf(out->host, sizeof out->host, "%s", host ? host : "");
    snprintf(out->bound_by, sizeof out->bound_by, "%s", plan->bind ? "ctrain" : "none");
    bitmap_str(out->cpus, sizeof out->cpus, plan->cpuset);
    bitmap_str(out->numa, sizeof out->numa, plan->nodeset);
    out->ncores = plan->ncores;
    out->npus = plan->npus;
    out->threads = plan->threads;
    out->oversubscribed = plan->oversubscribed;
    snprintf(out->membind, sizeof out->membind, "%s",
             plan->bind && nodes_strict_subset(topo, plan->nodeset) ? "bind" : "default");
    snprintf(out->device, sizeof out->device, "%s", plan->device);
    snprintf(out->device_pci, sizeof out->device_pci, "%s", plan->device_pci);
    snprintf(out->warning, sizeof out->warning, "%s", plan->warning);
}

/* ------------------------------------------------------------------ apply */

/* The binding ctrain set last in this process (NULL or empty if none) and
 * the one the launcher had given it: when the process still has ours, the
 * launcher's is the remembered one; when it has any other, that is the
 * launcher's now. Allocated once and kept for the life of the process. */
static hwloc_bitmap_t g_ours;
static hwloc_bitmap_t g_launcher;

/* Who started this process (rank of world), to name the binding we keep,
 * from the variables any MPI's launcher sets, never one MPI's own: srun when
 * it started this task itself (Slurm's task number is the rank and its step
 * has world tasks; mpirun inside an allocation starts its daemons, one a
 * node, through srun, so their numbers are not the ranks); mpirun (Open
 * MPI's, or MPICH's hydra) when the process-management interface that
 * started us is a launcher's (PMIX_RANK: Open MPI, srun --mpi=pmix;
 * PMI_RANK: hydra, Intel MPI, srun --mpi=pmi2). */
static const char *launcher_name(int rank, int world)
{
    const char *task = getenv("SLURM_PROCID"), *tasks = getenv("SLURM_STEP_NUM_TASKS");
    if (task && tasks && atoi(task) == rank && atoi(tasks) == world)
        return "slurm";
    if (getenv("PMIX_RANK") || getenv("PMI_RANK"))
        return "mpirun";
    if (getenv("SLURM_STEP_ID") || getenv("SLURM_JOB_ID"))
        return "slurm";
    return "launcher";
}

/* What each rank tells the others: where it runs if we do not bind it. */
struct wire {
    char host[64];
    char cpus[1024];
};

static void append_warning(struct ct_placement *out, const char *fmt, const char *a,
                           const char *b)
{
    size_t used = strlen(out->warning);
    if (used + 3 >= sizeof out->warning)
        return;
    if (used)
        used += (size_t)snprintf(out->warning + used, sizeof out->warning - used, "; ");
    snprintf(out->warning + used, sizeof out->warning - used, fmt, a, b);
}

/* Keep the binding `set` (the launcher's, or whatever the process has): this
 * rank's record, with BLAS threads split among the local ranks whose bindings
 * overlap, and the device chosen among the local ranks' bindings. */
static int keep_binding(hwloc_topology_t topo, const struct ct_placement_params *pp,
                        hwloc_const_cpuset_t set, const struct wire *all, int world, int rank,
                        struct ct_rank_plan *me)
{
    int rc = 0, n = 0, mine = 0, sharers = 0;
    hwloc_bitmap_t *peer = calloc((size_t)world, sizeof *peer);
    int *choice = calloc((size_t)world, sizeof *choice);
    struct device *dev = NULL;
    int nd = 0;
    if (!peer || !choice) {
        rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
        goto done;
    }
    for (int r = 0; r < world; r++) {
        if (strncmp(all[r].host, all[rank].host, sizeof all[r].host) != 0)
            continue;
        if (!(peer[n] = hwloc_bitmap_alloc())) {
            rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
            goto done;
        }
        if (hwloc_bitmap_list_sscanf(peer[n], all[r].cpus) != 0)
            hwloc_bitmap_copy(peer[n], hwloc_topology_get_topology_cpuset(topo));
        if (r == rank)
            mine = n;
        n++;
    }
    for (int i = 0; i < n; i++)
        sharers += hwloc_bitmap_intersects(peer[i], set);
    if (sharers < 1)
        sharers = 1;
    hwloc_bitmap_copy(me->cpuset, set);
    hwloc_cpuset_to_nodeset(topo, set, me->nodeset);
    me->npus = hwloc_bitmap_weight(set);
    hwloc_obj_t core = NULL;
    me->ncores = 0;
    while ((core = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_CORE, core)) != NULL)
        me->ncores += hwloc_bitmap_intersects(core->cpuset, set);
    if (me->ncores == 0)
        me->ncores = me->npus;
    int units = pp->use_hyperthreads ? me->npus : me->ncores;
    me->threads = pp->threads ? pp->threads : (units / sharers > 0 ? units / sharers : 1);
    me->oversubscribed = sharers > units;
    if (me->oversubscribed)
        oversub_warning(me, sharers, units, pp->use_hyperthreads, set,
                        "bind the ranks apart (launch/ctrain-run) or start fewer ranks");
    if ((rc = find_devices(topo, &dev, &nd)) < 0)
        goto done;
    if ((rc = assign_devices(topo, dev, nd, (hwloc_const_cpuset_t const *)peer, n, choice)) < 0)
        goto done;
    set_device(me, dev, choice[mine]);
done:
    for (int i = 0; peer && i < n; i++)
        hwloc_bitmap_free(peer[i]);
    free(peer);
    free(choice);
    free(dev);
    return rc;
}

int ct_placement_apply(struct ct_comm *c, const struct ct_placement_params *p,
                       struct ct_placement *out)
{
    struct ct_placement_params pp = p ? *p : ct_placement_default_params();
    memset(out, 0, sizeof *out);
    out->rank = c->rank;
    out->local_rank = c->local_rank;
    out->local_world = c->local_world;
    out->mode = pp.mode;
    snprintf(out->host, sizeof out->host, "%.63s", c->host);

    int rc = 0;
    hwloc_topology_t topo = NULL;
    hwloc_bitmap_t allowed = hwloc_bitmap_alloc(), cur = hwloc_bitmap_alloc(),
                   launcher = hwloc_bitmap_alloc();
    if (!g_ours)
        g_ours = hwloc_bitmap_alloc();
    if (!g_launcher)
        g_launcher = hwloc_bitmap_alloc();
    struct ct_rank_plan *plan = NULL;
    struct ct_rank_plan me;
    memset(&me, 0, sizeof me);
    me.cpuset = hwloc_bitmap_alloc();
    me.nodeset = hwloc_bitmap_alloc();
    struct wire *all = calloc((size_t)c->world, sizeof *all);
    struct wire mine;
    memset(&mine, 0, sizeof mine);

    if (!allowed || !cur || !launcher || !g_ours || !g_launcher || !me.cpuset || !me.nodeset ||
        !all)
        rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
    else if ((int)pp.mode < 0 || pp.mode >= CT_PLACEMENT_MODE_COUNT || pp.threads < 0)
        rc = ct_error_set(CT_EINVAL, "placement: invalid mode %d or threads %d", (int)pp.mode,
                          pp.threads);
    else
        rc = ct_placement_topology_load(&topo, NULL);
    if (rc == 0) {
        /* The PUs the job may use (cgroups, Slurm's allocation) and the ones
         * the process is bound to now. */
        hwloc_bitmap_and(allowed, hwloc_topology_get_allowed_cpuset(topo),
                         hwloc_topology_get_topology_cpuset(topo));
        if (hwloc_get_cpubind(topo, cur, HWLOC_CPUBIND_PROCESS) != 0)
            hwloc_bitmap_copy(cur, allowed);
        hwloc_bitmap_and(cur, cur, allowed);
        if (hwloc_bitmap_iszero(cur))
            hwloc_bitmap_copy(cur, allowed);
        if (!hwloc_bitmap_iszero(g_ours) && hwloc_bitmap_isequal(g_ours, cur)) {
            hwloc_bitmap_and(launcher, g_launcher, allowed);
            if (hwloc_bitmap_iszero(launcher))
                hwloc_bitmap_copy(launcher, allowed);
        } else {
            hwloc_bitmap_copy(launcher, cur);
            hwloc_bitmap_copy(g_launcher, cur);
            hwloc_bitmap_zero(g_ours);
        }
    }
    if ((rc = ct_comm_agree(c, rc)) < 0)
        goto done;

    int external = !hwloc_bitmap_isequal(launcher, allowed);
    int keep = pp.mode == CT_PLACEMENT_MODE_NONE || (pp.mode == CT_PLACEMENT_MODE_AUTO && external);
    hwloc_const_cpuset_t kept = pp.mode == CT_PLACEMENT_MODE_NONE ? cur : launcher;

    /* Every rank says where it runs if left alone: that is how kept bindings
     * are shared out. One gather and one broadcast, whatever the mode, so the
     * collective pattern never depends on a rank's local state. */
    snprintf(mine.host, sizeof mine.host, "%.63s", c->host);
    bitmap_str(mine.cpus, sizeof mine.cpus, kept);
    if ((rc = c->ops->gather(c, &mine, sizeof mine, all, 0)) == 0)
        rc = c->ops->bcast(c, all, (size_t)c->world * sizeof *all, 0);
    if ((rc = ct_comm_agree(c, rc)) < 0)
        goto done;

    if (keep) {
        if ((rc = keep_binding(topo, &pp, kept, all, c->world, c->rank, &me)) < 0)
            goto agree;
        if (pp.mode == CT_PLACEMENT_MODE_AUTO && !hwloc_bitmap_isequal(cur, launcher)) {
            /* An earlier call bound us; go back to the launcher's binding. */
            if (hwloc_set_cpubind(topo, launcher, HWLOC_CPUBIND_PROCESS) != 0) {
                rc = ct_error_set(CT_EIO, "placement: cannot restore the launcher's binding: %s",
                                  strerror(errno));
                goto agree;
            }
            hwloc_bitmap_zero(g_ours);
        }
        ct_placement_from_plan(topo, &me, c->local_rank, c->local_world, c->host, pp.mode, out);
        out->rank = c->rank;
        snprintf(out->bound_by, sizeof out->bound_by, "%s",
                 !hwloc_bitmap_isequal(kept, allowed)
                     ? (hwloc_bitmap_isequal(kept, launcher) ? launcher_name(c->rank, c->world) : "ctrain")
                     : "none");
        snprintf(out->membind, sizeof out->membind, "unchanged");
    } else {
        plan = calloc((size_t)c->local_world, sizeof *plan);
        if (!plan) {
            rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
            goto agree;
        }
        if ((rc = ct_placement_plan(topo, allowed, c->local_world, &pp, plan)) < 0) {
            free(plan);
            plan = NULL;
            goto agree;
        }
        struct ct_rank_plan *my = &plan[c->local_rank];
        ct_placement_from_plan(topo, my, c->local_rank, c->local_world, c->host, pp.mode, out);
        out->rank = c->rank;
        if (hwloc_set_cpubind(topo, my->cpuset, HWLOC_CPUBIND_PROCESS) != 0) {
            rc = ct_error_set(CT_EIO, "placement: rank %d cannot bind to PUs %s: %s", c->rank,
                              out->cpus, strerror(errno));
            goto agree;
        }
        hwloc_bitmap_copy(g_ours, my->cpuset);
        if (external)
            append_warning(out, "dist.placement = %s replaced the binding %s had given the ranks",
                           ct_placement_mode_name(pp.mode), launcher_name(c->rank, c->world));
        if (strcmp(out->membind, "bind") == 0 &&
            hwloc_set_membind(topo, my->nodeset, HWLOC_MEMBIND_BIND,
                              HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0) {
            /* Containers often forbid set_mempolicy; first touch from our
             * bound threads still lands on the local node. */
            const char *why = strerror(errno);
            snprintf(out->membind, sizeof out->membind, "failed");
            append_warning(out, "could not bind memory to NUMA node %s (%s); it follows first touch",
                           out->numa, why);
        }
    }

    /* BLAS threads: what the plan says, as OpenBLAS actually took it. */
    int want = out->threads;
    out->threads = ct_set_blas_threads(c->local_world, want);
    if (out->threads != want) {
        char a[16], b[16];
        snprintf(a, sizeof a, "%d", out->threads);
        snprintf(b, sizeof b, "%d", want);
        append_warning(out, "OpenBLAS runs %s threads, not %s (its build limit)", a, b);
    }

agree:
    rc = ct_comm_agree(c, rc);
done:
    if (plan) {
        ct_placement_plan_free(plan, c->local_world);
        free(plan);
    }
    ct_placement_plan_free(&me, 1);
    hwloc_bitmap_free(allowed);
    hwloc_bitmap_free(cur);
    hwloc_bitmap_free(launcher);
    free(all);
    if (topo)
        hwloc_topology_destroy(topo);
    return rc;
}

/* ------------------------------------------------------------------ table */

/* "0-3,5" from a sorted list of ranks. */
static void ranks_str(char *buf, size_t n, const int *r, int count)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < count && used < n; i++) {
        int j = i;
        while (j + 1 < count && r[j + 1] == r[j] + 1)
            j++;
        used += (size_t)snprintf(buf + used, n - used, j > i ? "%s%d-%d" : "%s%d", i ? "," : "",
                                 r[i], r[j]);
        i = j;
    }
}

int ct_placement_format(const struct ct_placement *recs, int n, char **text_out)
{
    *text_out = NULL;
    if (n < 1)
        return ct_error_set(CT_EINVAL, "placement table: no records");
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    int *ranks = malloc((size_t)n * sizeof *ranks);
    char *done = calloc((size_t)n, 1);
    if (!f || !ranks || !done) {
        if (f)
            fclose(f);
        free(text);
        free(ranks);
        free(done);
        return ct_error_set(CT_ENOMEM, "placement table: out of memory");
    }
    int hosts = 0;
    for (int i = 0; i < n; i++) {
        int seen = 0;
        for (int j = 0; j < i && !seen; j++)
            seen = strcmp(recs[i].host, recs[j].host) == 0;
        hosts += !seen;
    }
    fprintf(f, "placement %s: %d rank%s on %d node%s\n", ct_placement_mode_name(recs[0].mode), n,
            n == 1 ? "" : "s", hosts, hosts == 1 ? "" : "s");

    /* Column widths from the content. */
    enum { C_RANK, C_HOST, C_LOCAL, C_PUS, C_CORES, C_NUMA, C_BLAS, C_DEV, C_BY, C_MEM, NCOL };
    static const char *const head[NCOL] = {"rank", "host", "local", "PUs", "cores",
                                           "NUMA", "BLAS", "device", "bound by", "memory"};
    int w[NCOL];
    for (int k = 0; k < NCOL; k++)
        w[k] = (int)strlen(head[k]);
    char cell[NCOL][600];
#define FILL(i)                                                                          \
    do {                                                                                 \
        const struct ct_placement *r_ = &recs[i];                                        \
        snprintf(cell[C_RANK], sizeof cell[0], "%d", r_->rank);                          \
        snprintf(cell[C_HOST], sizeof cell[0], "%s", r_->host);                          \
        snprintf(cell[C_LOCAL], sizeof cell[0], "%d/%d", r_->local_rank, r_->local_world); \
        snprintf(cell[C_PUS], sizeof cell[0], "%s", r_->cpus);                           \
        snprintf(cell[C_CORES], sizeof cell[0], "%d%s", r_->ncores,                      \
                 r_->oversubscribed ? "*" : "");                                         \
        snprintf(cell[C_NUMA], sizeof cell[0], "%s", r_->numa);                          \
        snprintf(cell[C_BLAS], sizeof cell[0], "%d", r_->threads);                       \
        snprintf(cell[C_DEV], sizeof cell[0], "%s%s%s", r_->device,                      \
                 r_->device_pci[0] ? " " : "", r_->device_pci);                          \
        snprintf(cell[C_BY], sizeof cell[0], "%s", r_->bound_by);                        \
        snprintf(cell[C_MEM], sizeof cell[0], "%s", r_->membind);                        \
    } while (0)
    for (int i = 0; i < n; i++) {
        FILL(i);
        for (int k = 0; k < NCOL; k++)
            if ((int)strlen(cell[k]) > w[k])
                w[k] = (int)strlen(cell[k]);
    }
    for (int k = 0; k < NCOL; k++) {
        int right = k == C_RANK || k == C_CORES || k == C_BLAS;
        if (k == NCOL - 1)
            fprintf(f, "%s\n", head[k]);
        else
            fprintf(f, right ? "%*s  " : "%-*s  ", w[k], head[k]);
    }
    for (int i = 0; i < n; i++) {
        FILL(i);
        for (int k = 0; k < NCOL; k++) {
            int right = k == C_RANK || k == C_CORES || k == C_BLAS;
            if (k == NCOL - 1)
                fprintf(f, "%s\n", cell[k]);
            else
                fprintf(f, right ? "%*s  " : "%-*s  ", w[k], cell[k]);
        }
    }
#undef FILL
    int any_over = 0;
    for (int i = 0; i < n; i++)
        any_over |= recs[i].oversubscribed;
    if (any_over)
        fprintf(f, "(* oversubscribed: the rank shares its cores with other ranks)\n");
    /* Each distinct warning once, with the ranks it concerns. */
    for (int i = 0; i < n; i++) {
        if (done[i] || !recs[i].warning[0])
            continue;
        int count = 0;
        for (int j = i; j < n; j++)
            if (!done[j] && strcmp(recs[j].warning, recs[i].warning) == 0) {
                done[j] = 1;
                ranks[count++] = recs[j].rank;
            }
        char rs[256];
        ranks_str(rs, sizeof rs, ranks, count);
        fprintf(f, "warning (rank%s %s): %s\n", count == 1 ? "" : "s", rs, recs[i].warning);
    }
    free(ranks);
    free(done);
    if (fclose(f) != 0) {
        free(text);
        return ct_error_set(CT_ENOMEM, "placement table: out of memory");
    }
    *text_out = text;
    return 0;
}

int ct_placement_table(struct ct_comm *c, const struct ct_placement *mine, char **text_out)
{
    *text_out = NULL;
    struct ct_placement *all = NULL;
    int rc = 0;
    if (c->rank == 0 && !(all = calloc((size_t)c->world, sizeof *all)))
        rc = ct_error_set(CT_ENOMEM, "placement table: out of memory");
    if ((rc = ct_comm_agree(c, rc)) < 0) {
        free(all);
        return rc;
    }
    rc = c->ops->gather(c, mine, sizeof *mine, all, 0);
    if (rc == 0 && c->rank == 0)
        rc = ct_placement_format(all, c->world, text_out);
    free(all);
    rc = ct_comm_agree(c, rc);
    if (rc < 0) {
        free(*text_out);
        *text_out = NULL;
    }
    return rc;
}
