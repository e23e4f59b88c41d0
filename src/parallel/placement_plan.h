/* The placement planner: which PUs, BLAS threads and accelerator each local
 * rank of a node gets, as a pure function of a plain description of the node.
 *
 * The machine comes in as a table (its PUs in hwloc's logical order, each with
 * its core, NUMA node and package; its accelerators with the PUs they are
 * attached to) and the plan goes out as one share per rank. Nothing here
 * calls hwloc, MPI or the operating system: tests describe any node shape in
 * a few lines (tests/unit/test_placement_plan.c), and every local rank can
 * compute the same plan for all of them by itself. Turning an hwloc topology
 * into a struct ct_machine, binding, and the binding table are
 * parallel/placement.h's business.
 *
 *     struct ct_machine_pu pu[4] = {{.os = 0, .core = 0, .usable = 1}, ...};
 *     struct ct_machine m = {.npu = 4, .pu = pu};
 *     struct ct_share share[2];
 *     struct ct_placement_params p = ct_placement_default_params();
 *     rc = ct_share_plan(&m, 2, &p, share);   // share[i].pus[k]: rank i runs on PU k
 *     ...
 *     ct_share_free(share, 2);
 */
#ifndef CT_PARALLEL_PLACEMENT_PLAN_H
#define CT_PARALLEL_PLACEMENT_PLAN_H

#include <stddef.h>

enum ct_placement_mode {
    CT_PLACEMENT_MODE_AUTO,    /* keep a launcher's binding; else as CORE */
    CT_PLACEMENT_MODE_NONE,    /* bind nothing; still set BLAS threads and report */
    CT_PLACEMENT_MODE_CORE,    /* each rank its own cores (even spread, NUMA-aligned) */
    CT_PLACEMENT_MODE_NUMA,    /* each rank whole NUMA nodes (shared when ranks > nodes) */
    CT_PLACEMENT_MODE_PACKAGE, /* each rank whole packages (shared when ranks > packages) */
    CT_PLACEMENT_MODE_COUNT
};

struct ct_placement_params {
    enum ct_placement_mode mode; /* CT_PLACEMENT_MODE_AUTO */
    int threads;                 /* BLAS threads per rank; 0 = the cores it owns */
    int use_hyperthreads;        /* 0: one PU per core; 1: every PU of a core */
};

struct ct_placement_params ct_placement_default_params(void);

/* The mode names, indexed by enum ct_placement_mode, NULL-terminated (the
 * config's dist.placement parses through it). */
extern const char *const ct_placement_mode_names[CT_PLACEMENT_MODE_COUNT + 1];

/* "auto", "none", "core", "numa", "package" (case-insensitive) -> *out.
 * CT_EINVAL with a message listing the choices otherwise. */
int ct_placement_mode_parse(const char *s, enum ct_placement_mode *out);
/* The name of a mode ("core"); "?" when out of range. */
const char *ct_placement_mode_name(enum ct_placement_mode mode);

/* ------------------------------------------------------------------ machine */

/* One PU of the node. The table lists every PU of the node in hwloc's logical
 * order, in which the PUs of a core, a NUMA node and a package are contiguous
 * runs; that is what makes "a contiguous group of cores" and "a NUMA
 * boundary" index arithmetic. */
struct ct_machine_pu {
    int os;     /* OS index (what binding and the table use) */
    int core;   /* equal for the PUs of one core (hyperthread siblings) */
    int numa;   /* logical index of its NUMA node (the first, if memory-only nodes overlap) */
    int pkg;    /* logical index of its package; -1 when the node has none */
    int usable; /* 1: the job may run on it (cgroups, Slurm's allocation) */
};

/* An accelerator (GPU or co-processor, one per PCI device). */
struct ct_machine_dev {
    char name[32];       /* OS device name ("cuda0") */
    char pci[16];        /* PCI bus id, "" when none */
    int near_lo, near_hi; /* PUs [near_lo, near_hi) of the object it is attached to */
};

struct ct_machine {
    int npu;
    const struct ct_machine_pu *pu; /* npu entries */
    int ndev;
    const struct ct_machine_dev *dev; /* ndev entries, in topology order */
};

/* ------------------------------------------------------------------ plan */

/* One local rank's share of the node. */
struct ct_share {
    unsigned char *pus;  /* npu flags: 1 for each PU (index into machine.pu) it runs on; owned */
    int bind;            /* 1: bind to pus; 0 (mode none): pus is where it may run */
    int ncores;          /* cores the share touches */
    int npus;            /* PUs in the share */
    int threads;         /* BLAS threads */
    int oversubscribed;  /* more ranks than cores (PUs with hyperthreads) in its share */
    int device_index;    /* into machine.dev; -1 = none ("cpu") */
    char warning[256];   /* "" or one sentence for the log */
};

/* Partition the usable PUs of `m` among R ranks (out has R entries; free them
 * with ct_share_free on success). Mode AUTO plans as CORE.
 *
 * Mode CORE: units are cores (PUs when use_hyperthreads and there are more
 * ranks than cores), in logical order. With R ranks and U units, each rank
 * gets a contiguous run of floor(U/R) or ceil(U/R) units (the even spread:
 * core counts differ by at most one); among all such cuts the one whose runs
 * cross the fewest NUMA and package boundaries is taken, so ranks stay inside
 * a NUMA node whenever the even spread allows it, and ranks that divide the
 * NUMA nodes or packages get them whole. We put evenness before "whole NUMA
 * nodes" because the slowest rank paces every step: 3 ranks on 4 NUMA nodes of
 * 8 cores get 11, 10 and 11 cores, not 16, 8 and 8. Modes NUMA and PACKAGE
 * give whole domains for users who want them. More ranks than units:
 * consecutive ranks share a unit, are flagged oversubscribed, run one BLAS
 * thread and carry a warning. Mode NONE: every rank may run on every usable PU.
 *
 * Devices: each device serves floor or ceil(R/D) ranks; within that, each rank
 * gets the nearest one (same NUMA node, then same package, then any), ties
 * going round-robin, ranks with the fewest near choices choosing first.
 * Deterministic: the same inputs give the same plan. */
int ct_share_plan(const struct ct_machine *m, int R, const struct ct_placement_params *p,
                  struct ct_share *out);
void ct_share_free(struct ct_share *share, int n);

/* The share of a rank that keeps a binding it was given (`pus`, npu flags),
 * among the n bindings `peers` (npu flags each) of the node's ranks, peers[mine]
 * being its own as the others saw it: BLAS threads split among the ranks whose
 * bindings overlap `pus`, the device chosen among all n as ct_share_plan
 * chooses. out->pus is a copy of `pus`. */
int ct_share_keep(const struct ct_machine *m, const unsigned char *pus,
                  const unsigned char *const *peers, int n, int mine,
                  const struct ct_placement_params *p, struct ct_share *out);

/* Give each of n PU sets (npu flags each) a device index, -1 when there are none. */
int ct_share_assign_devices(const struct ct_machine *m, const unsigned char *const *sets, int n,
                            int *choice);

/* The OS indices of the flagged PUs in hwloc's list syntax ("0-3,8"), cut
 * with "..." when it does not fit in n bytes. */
void ct_share_pus_str(char *buf, size_t n, const struct ct_machine *m, const unsigned char *pus);

#endif
