/* Placement on an hwloc topology (see placement.h): the topology turned
 * into the planner's struct ct_machine, ct_placement_plan on it, and the
 * record a plan would give. Binding is placement_bind.c's, the table
 * placement_table.c's; the policy itself is placement_plan.c's.
 */
#include "parallel/placement-impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"

void ct__bitmap_str(char *buf, size_t n, hwloc_const_bitmap_t set)
{
    int need = hwloc_bitmap_list_snprintf(buf, n, set);
    if (need >= (int)n && n > 4)
        memcpy(buf + n - 4, "...", 4);
    else if (need < 0 && n)
        buf[0] = '\0';
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


/* ------------------------------------------------------------------ machine */

/* The first NUMA node (logical order) holding the PU; 0 when none does. */
static int numa_of(hwloc_topology_t topo, hwloc_obj_t pu)
{
    hwloc_obj_t n = NULL;
    while ((n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n)) != NULL)
        if (n->cpuset && hwloc_bitmap_intersects(n->cpuset, pu->cpuset))
            return (int)n->logical_index;
    return 0;
}

static void machine_pus(hwloc_topology_t topo, hwloc_const_cpuset_t usable,
                        struct ct_machine_pu *pu, int npu)
{
    int have_cores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE) > 0;
    for (int k = 0; k < npu; k++) {
        hwloc_obj_t o = hwloc_get_obj_by_type(topo, HWLOC_OBJ_PU, (unsigned)k);
        hwloc_obj_t core = have_cores ? hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_CORE, o) : o;
        hwloc_obj_t pkg = hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, o);
        pu[k].os = (int)o->os_index;
        /* A PU outside every core (a broken topology) is a core of its own. */
        pu[k].core = core ? (int)core->logical_index : -1 - k;
        pu[k].numa = numa_of(topo, o);
        pu[k].pkg = pkg ? (int)pkg->logical_index : -1;
        pu[k].usable = hwloc_bitmap_isset(usable, o->os_index);
    }
}

/* Where a device is attached, as a range of the machine's PUs. */
static void machine_near(hwloc_topology_t topo, const struct ct_machine *m, hwloc_obj_t near,
                         struct ct_machine_dev *d)
{
    hwloc_const_cpuset_t where =
        near && near->cpuset ? near->cpuset : hwloc_topology_get_topology_cpuset(topo);
    d->near_lo = d->near_hi = 0;
    for (int k = 0; k < m->npu; k++)
        if (hwloc_bitmap_isset(where, (unsigned)m->pu[k].os)) {
            if (d->near_hi == 0)
                d->near_lo = k;
            d->near_hi = k + 1;
        }
}

int ct__machine_from_topology(hwloc_topology_t topo, hwloc_const_cpuset_t usable,
                              struct ct_machine *out)
{
    memset(out, 0, sizeof *out);
    int npu = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU), nd = 0;
    struct ct_machine_pu *pu = calloc((size_t)(npu > 0 ? npu : 1), sizeof *pu);
    struct device *dev = NULL;
    struct ct_machine_dev *md = NULL;
    int rc = pu ? find_devices(topo, &dev, &nd) : ct_error_set(CT_ENOMEM, "placement: out of memory");
    if (rc == 0 && !(md = calloc((size_t)(nd > 0 ? nd : 1), sizeof *md)))
        rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
    if (rc < 0) {
        free(pu);
        free(dev);
        return rc;
    }
    machine_pus(topo, usable, pu, npu);
    out->npu = npu;
    out->pu = pu;
    for (int i = 0; i < nd; i++) {
        snprintf(md[i].name, sizeof md[i].name, "%s", dev[i].name);
        snprintf(md[i].pci, sizeof md[i].pci, "%s", dev[i].pci);
        machine_near(topo, out, dev[i].near, &md[i]);
    }
    out->ndev = nd;
    out->dev = md;
    free(dev);
    return 0;
}

void ct__machine_free(struct ct_machine *m)
{
    free((void *)m->pu);
    free((void *)m->dev);
    memset(m, 0, sizeof *m);
}

void ct__machine_flags(const struct ct_machine *m, hwloc_const_cpuset_t set, unsigned char *flags)
{
    for (int k = 0; k < m->npu; k++)
        flags[k] = hwloc_bitmap_isset(set, (unsigned)m->pu[k].os) != 0;
}

void ct__machine_cpuset(const struct ct_machine *m, const unsigned char *flags, hwloc_cpuset_t set)
{
    hwloc_bitmap_zero(set);
    for (int k = 0; k < m->npu; k++)
        if (flags[k])
            hwloc_bitmap_set(set, (unsigned)m->pu[k].os);
}

void ct__rank_plan_from_share(hwloc_topology_t topo, const struct ct_machine *m,
                              const struct ct_share *s, struct ct_rank_plan *e)
{
    ct__machine_cpuset(m, s->pus, e->cpuset);
    hwloc_cpuset_to_nodeset(topo, e->cpuset, e->nodeset);
    e->bind = s->bind;
    e->ncores = s->ncores;
    e->npus = s->npus;
    e->threads = s->threads;
    e->oversubscribed = s->oversubscribed;
    e->device_index = s->device_index;
    if (s->device_index < 0) {
        snprintf(e->device, sizeof e->device, "cpu");
        e->device_pci[0] = '\0';
    } else {
        snprintf(e->device, sizeof e->device, "%s", m->dev[s->device_index].name);
        snprintf(e->device_pci, sizeof e->device_pci, "%s", m->dev[s->device_index].pci);
    }
    snprintf(e->warning, sizeof e->warning, "%s", s->warning);
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

/* The bitmaps of R plan entries and the usable PUs (allowed within the topology). */
static int plan_init(hwloc_topology_t topo, hwloc_const_cpuset_t allowed, int R,
                     struct ct_rank_plan *out, hwloc_bitmap_t usable)
{
    for (int i = 0; i < R; i++) {
        out[i].cpuset = hwloc_bitmap_alloc();
        out[i].nodeset = hwloc_bitmap_alloc();
        out[i].device_index = -1;
        if (!out[i].cpuset || !out[i].nodeset)
            return ct_error_set(CT_ENOMEM, "placement: out of memory");
    }
    hwloc_bitmap_and(usable, allowed ? allowed : hwloc_topology_get_allowed_cpuset(topo),
                     hwloc_topology_get_topology_cpuset(topo));
    if (hwloc_bitmap_iszero(usable)) {
        char a[128];
        ct__bitmap_str(a, sizeof a, allowed ? allowed : hwloc_topology_get_allowed_cpuset(topo));
        return ct_error_set(CT_EINVAL, "placement: the allowed PUs (%s) are not in the topology", a);
    }
    return 0;
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
    memset(out, 0, (size_t)R * sizeof *out);
    struct ct_machine m = {0};
    struct ct_share *share = calloc((size_t)R, sizeof *share);
    hwloc_bitmap_t usable = hwloc_bitmap_alloc();
    int rc = !share || !usable ? ct_error_set(CT_ENOMEM, "placement: out of memory")
                               : plan_init(topo, allowed, R, out, usable);
    if (rc == 0)
        rc = ct__machine_from_topology(topo, usable, &m);
    if (rc == 0 && (rc = ct_share_plan(&m, R, &pp, share)) == 0) {
        for (int i = 0; i < R; i++)
            ct__rank_plan_from_share(topo, &m, &share[i], &out[i]);
        ct_share_free(share, R);
    }
    if (rc < 0)
        ct_placement_plan_free(out, R);
    ct__machine_free(&m);
    free(share);
    hwloc_bitmap_free(usable);
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
    ct__bitmap_str(out->cpus, sizeof out->cpus, plan->cpuset);
    ct__bitmap_str(out->numa, sizeof out->numa, plan->nodeset);
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
