/* Internals shared by the hwloc side of placement (placement.c: the topology
 * as a struct ct_machine; placement_bind.c: binding; placement_table.c: the
 * table). Not installed; not for use outside src/parallel. */
#ifndef CT_PARALLEL_PLACEMENT_IMPL_H
#define CT_PARALLEL_PLACEMENT_IMPL_H

#include <hwloc.h>

#include "core/threads.h"
#include "parallel/placement.h"

/* The node of `topo` as the planner sees it: every PU in logical order,
 * flagged usable when in `usable`, and the accelerators. Free with
 * ct__machine_free. */
int ct__machine_from_topology(hwloc_topology_t topo, hwloc_const_cpuset_t usable,
                              struct ct_machine *out);
void ct__machine_free(struct ct_machine *m);

/* PU flags (npu entries) <-> an hwloc cpuset of OS indices. */
void ct__machine_flags(const struct ct_machine *m, hwloc_const_cpuset_t set, unsigned char *flags);
void ct__machine_cpuset(const struct ct_machine *m, const unsigned char *flags, hwloc_cpuset_t set);

/* A share as a struct ct_rank_plan (whose bitmaps must be allocated). */
void ct__rank_plan_from_share(hwloc_topology_t topo, const struct ct_machine *m,
                              const struct ct_share *s, struct ct_rank_plan *e);

/* A bitmap in hwloc's list syntax ("0-3,8"), cut with "..." if it does not fit. */
void ct__bitmap_str(char *buf, size_t n, hwloc_const_bitmap_t set);

/* The warning for a thread count that is not CT_THREADS_FIT (buf = "" when
 * it is): the count, who bound the rank ("mpirun", "slurm", "launcher",
 * "ctrain" or "none", as struct ct_placement's bound_by), its PUs and
 * cpuset (taskset syntax, "0x1"), and what gives it more PUs. Pure. */
void ct__threads_warning(char *buf, size_t n, const struct ct_threads_choice *ch, int requested,
                         const char *bound_by, int pus, const char *cpuset);

#endif
