/* Placement: which cores, NUMA memory and accelerator each rank of a node
 * uses, worked out with hwloc, applied to this process and recorded. The
 * planner (placement_plan.h) is pure; ct_placement_plan() runs it on an hwloc
 * topology; ct_placement_apply() binds this rank (placement_bind.c);
 * ct_placement_table() gathers the binding table (placement_table.c). Call
 * apply from the main thread, after MPI_Init and before any thread of our
 * own starts (the memory policy is per thread). docs/parallel.md has why.
 *
 *     struct ct_placement_params pp = ct_placement_default_params();
 *     pp.mode = cfg->dist.placement;                  // ct_placement_mode_parse()
 *     struct ct_placement me;
 *     rc = ct_placement_apply(comm, &pp, &me);        // collective
 *     char *table = NULL;
 *     if (rc == 0) rc = ct_placement_table(comm, &me, &table);   // collective
 *     if (rc == 0 && comm->rank == 0) { ct_log_info("%s", table); ... }
 *     free(table);
 */
#ifndef CT_PARALLEL_PLACEMENT_H
#define CT_PARALLEL_PLACEMENT_H

#include <hwloc.h>

#include "parallel/comm.h"
#include "parallel/placement_plan.h"

/* ------------------------------------------------------------------ plan */

/* One local rank's share of the node. The bitmaps belong to the plan
 * (ct_placement_plan_free). */
struct ct_rank_plan {
    hwloc_bitmap_t cpuset;   /* PUs (OS indices) the rank runs on */
    hwloc_bitmap_t nodeset;  /* NUMA nodes (OS indices) of those PUs */
    int bind;                /* 1: bind to cpuset; 0 (mode none): cpuset is where it may run */
    int ncores;              /* cores the cpuset touches */
    int npus;                /* PUs in the cpuset */
    int threads;             /* BLAS threads */
    int oversubscribed;      /* more ranks than cores (PUs with hyperthreads) in its cpuset */
    int device_index;        /* into the node's accelerators in topology order; -1 = none */
    char device[32];         /* OS device name ("cuda0", "rsmi1", "card2") or "cpu" */
    char device_pci[16];     /* PCI bus id ("0000:3b:00.0"), "" when none */
    char warning[256];       /* "" or one sentence for the log */
};

/* Partition the node among `local_ranks` ranks: ct_share_plan (see
 * placement_plan.h for the policy of each mode) on this topology. `allowed`
 * is the set of PUs the job may use (NULL: the topology's allowed cpuset); it
 * is intersected with the topology. The topology must have been loaded with
 * I/O objects (HWLOC_TYPE_FILTER_KEEP_IMPORTANT for I/O types, as
 * ct_placement_topology_load does) for devices to be found; without them
 * every rank gets "cpu". Mode AUTO plans as CORE (keeping a launcher's
 * binding is ct_placement_apply's business).
 *
 * Devices: GPU and co-processor OS devices, one per PCI device (a GPU seen as
 * cuda0, nvml0 and card0 counts once; a display controller of a server's BMC
 * is not an accelerator).
 *
 * `out` has local_ranks entries; on success free them with
 * ct_placement_plan_free. Deterministic: the same inputs give the same plan. */
int ct_placement_plan(hwloc_topology_t topo, hwloc_const_cpuset_t allowed, int local_ranks,
                      const struct ct_placement_params *p, struct ct_rank_plan *out);
void ct_placement_plan_free(struct ct_rank_plan *plan, int n);

/* Load a topology with the I/O objects placement needs: this machine's when
 * `xml_path` is NULL, else an XML file (e.g. `lstopo node.xml` on a compute
 * node, for a dry run). Destroy with hwloc_topology_destroy. */
int ct_placement_topology_load(hwloc_topology_t *out, const char *xml_path);

/* ------------------------------------------------------------------ apply */

/* What a rank runs on: plain fixed-size data (no pointers), so it can be
 * gathered, printed and stored in manifests. */
struct ct_placement {
    int rank, local_rank, local_world;
    enum ct_placement_mode mode; /* as requested */
    char host[64];
    char bound_by[16];     /* "ctrain", "mpirun", "slurm", "launcher" or "none" */
    char cpus[512];        /* PUs, OS indices, hwloc list syntax ("0-3,32-35") */
    char numa[64];         /* NUMA nodes, OS indices ("0", "0-1") */
    int ncores, npus;
    int threads;           /* BLAS threads actually set (the pool's; OpenBLAS runs 1) */
    int oversubscribed;
    char membind[16];      /* "bind", "default" (no policy needed), "failed" */
    char device[32];       /* as in ct_rank_plan */
    char device_pci[16];
    char warning[640];     /* the plan's, then binding and thread warnings, "; "-joined */
};

/* Collective (every rank calls it; every rank gets the same status back).
 * Loads this machine's topology, restricted to the PUs the process may use
 * (cgroups, Slurm). If a launcher already bound the process (its binding is a
 * strict subset of those PUs, as mpirun --bind-to core or srun --cpu-bind
 * make), mode AUTO keeps that binding and reports it; NONE keeps whatever the
 * process has; CORE, NUMA and PACKAGE replace a launcher's binding with
 * ct_placement_plan's share for local_rank of local_world, binding all
 * threads with hwloc_set_cpubind and memory (this thread) to the share's NUMA
 * nodes (a memory binding that fails is a warning, not an error; a CPU
 * binding that fails is an error). Then the rank's thread pool gets
 * p->threads threads, or as many as cores the rank owns (cores of its binding
 * divided among the local ranks bound to overlapping PUs, when the binding is
 * not ours), never more than its PUs (ct_threads_choose): when the binding
 * gives auto fewer threads than the node would, or an explicit p->threads
 * exceeds its PUs (honoured), out->warning says so, naming who bound the
 * rank, its cpuset and the flag that changes it.
 *
 * Ranks exchange their current bindings (one gather and one broadcast), which
 * is how a kept or absent binding is split fairly; nothing else is sent. A
 * binding equal to the one the previous call set is taken as ours (the
 * launcher's is then the one seen before it), any other as the launcher's, so
 * calling apply again (another mode, a test) starts from the same point. */
int ct_placement_apply(struct ct_comm *c, const struct ct_placement_params *p,
                       struct ct_placement *out);

/* The record of one rank of a plan, as ct_placement_apply would report it if
 * that plan were applied (threads = planned, bound_by "ctrain" or "none",
 * membind "bind" when the rank's NUMA nodes are a strict subset of the node's;
 * rank = local_rank). For dry runs and tests. */
void ct_placement_from_plan(hwloc_topology_t topo, const struct ct_rank_plan *plan,
                            int local_rank, int local_world, const char *host,
                            enum ct_placement_mode mode, struct ct_placement *out);

/* Collective. Rank 0 gets in *text_out (malloc'd, caller frees) the binding
 * table: a title line, a header, one line per rank (rank, host, local rank,
 * PUs, cores, NUMA, BLAS threads, device, bound by, memory policy), then each
 * distinct warning once with the ranks it concerns. Other ranks get NULL. */
int ct_placement_table(struct ct_comm *c, const struct ct_placement *mine, char **text_out);
/* The same table from records already at hand (n records, rank order). */
int ct_placement_format(const struct ct_placement *recs, int n, char **text_out);

#endif
