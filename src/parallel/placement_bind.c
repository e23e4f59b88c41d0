/* Binding: ct_placement_apply (see placement.h). Reads the binding a
 * launcher gave the process, exchanges it with the other ranks, then either
 * keeps it (ct_share_keep) or binds to the planner's share, and sets the BLAS
 * threads. The policy is the planner's (placement_plan.c); this file only
 * asks hwloc what the process has and tells it what to do.
 */
#include "parallel/placement-impl.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/threads.h"

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

/* One call of ct_placement_apply. */
struct binder {
    struct ct_comm *c;
    struct ct_placement_params pp;
    struct ct_placement *out;
    hwloc_topology_t topo;
    hwloc_bitmap_t allowed;  /* the PUs the job may use (cgroups, Slurm's allocation) */
    hwloc_bitmap_t cur;      /* the PUs the process is bound to now */
    hwloc_bitmap_t launcher; /* the binding the launcher gave it */
    struct wire *all;        /* every rank's wire */
};

/* Which binding is the launcher's: when the process still has the one we
 * set last, the one seen before it; otherwise the one it has now. */
static void read_bindings(struct binder *b)
{
    hwloc_bitmap_and(b->allowed, hwloc_topology_get_allowed_cpuset(b->topo),
                     hwloc_topology_get_topology_cpuset(b->topo));
    if (hwloc_get_cpubind(b->topo, b->cur, HWLOC_CPUBIND_PROCESS) != 0)
        hwloc_bitmap_copy(b->cur, b->allowed);
    hwloc_bitmap_and(b->cur, b->cur, b->allowed);
    if (hwloc_bitmap_iszero(b->cur))
        hwloc_bitmap_copy(b->cur, b->allowed);
    if (!hwloc_bitmap_iszero(g_ours) && hwloc_bitmap_isequal(g_ours, b->cur)) {
        hwloc_bitmap_and(b->launcher, g_launcher, b->allowed);
        if (hwloc_bitmap_iszero(b->launcher))
            hwloc_bitmap_copy(b->launcher, b->allowed);
    } else {
        hwloc_bitmap_copy(b->launcher, b->cur);
        hwloc_bitmap_copy(g_launcher, b->cur);
        hwloc_bitmap_zero(g_ours);
    }
}

/* Everything one call needs, this machine's topology loaded and its
 * bindings read; a local status (not yet agreed on). */
static int binder_open(struct binder *b, struct ct_comm *c, const struct ct_placement_params *p,
                       struct ct_placement *out)
{
    memset(b, 0, sizeof *b);
    b->c = c;
    b->pp = p ? *p : ct_placement_default_params();
    b->out = out;
    memset(out, 0, sizeof *out);
    out->rank = c->rank;
    out->local_rank = c->local_rank;
    out->local_world = c->local_world;
    out->mode = b->pp.mode;
    snprintf(out->host, sizeof out->host, "%.63s", c->host);
    b->allowed = hwloc_bitmap_alloc();
    b->cur = hwloc_bitmap_alloc();
    b->launcher = hwloc_bitmap_alloc();
    if (!g_ours)
        g_ours = hwloc_bitmap_alloc();
    if (!g_launcher)
        g_launcher = hwloc_bitmap_alloc();
    b->all = calloc((size_t)c->world, sizeof *b->all);
    int rc;
    if (!b->allowed || !b->cur || !b->launcher || !g_ours || !g_launcher || !b->all)
        rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
    else if ((int)b->pp.mode < 0 || b->pp.mode >= CT_PLACEMENT_MODE_COUNT || b->pp.threads < 0)
        rc = ct_error_set(CT_EINVAL, "placement: invalid mode %d or threads %d", (int)b->pp.mode,
                          b->pp.threads);
    else
        rc = ct_placement_topology_load(&b->topo, NULL);
    if (rc == 0)
        read_bindings(b);
    return rc;
}

static void binder_close(struct binder *b)
{
    hwloc_bitmap_free(b->allowed);
    hwloc_bitmap_free(b->cur);
    hwloc_bitmap_free(b->launcher);
    free(b->all);
    if (b->topo)
        hwloc_topology_destroy(b->topo);
}

/* Every rank says where it runs if left alone: that is how kept bindings
 * are shared out. One gather and one broadcast, whatever the mode, so the
 * collective pattern never depends on a rank's local state. */
static int exchange(struct binder *b, hwloc_const_cpuset_t kept)
{
    struct ct_comm *c = b->c;
    struct wire mine;
    memset(&mine, 0, sizeof mine);
    snprintf(mine.host, sizeof mine.host, "%.63s", c->host);
    ct__bitmap_str(mine.cpus, sizeof mine.cpus, kept);
    int rc = ct_comm_gather(c, &mine, sizeof mine, b->all, 0);
    if (rc == 0)
        rc = ct_comm_bcast(c, b->all, (size_t)c->world * sizeof *b->all, 0);
    return rc;
}

/* The share of this rank when it keeps `set`: the node's ranks' bindings
 * (from the wires of the ranks on this host) go to ct_share_keep. */
static int keep_share(struct binder *b, struct ct_machine *m, hwloc_const_cpuset_t set,
                      struct ct_share *share)
{
    int world = b->c->world, rank = b->c->rank, n = 0, mine = 0, rc = 0;
    unsigned char *flags = calloc((size_t)(world + 1) * (size_t)(m->npu > 0 ? m->npu : 1), 1);
    const unsigned char **peer = calloc((size_t)world, sizeof *peer);
    hwloc_bitmap_t tmp = hwloc_bitmap_alloc();
    if (!flags || !peer || !tmp)
        rc = ct_error_set(CT_ENOMEM, "placement: out of memory");
    for (int r = 0; rc == 0 && r < world; r++) {
        if (strncmp(b->all[r].host, b->all[rank].host, sizeof b->all[r].host) != 0)
            continue;
        if (hwloc_bitmap_list_sscanf(tmp, b->all[r].cpus) != 0)
            hwloc_bitmap_copy(tmp, hwloc_topology_get_topology_cpuset(b->topo));
        unsigned char *f = flags + (size_t)(n + 1) * (size_t)m->npu;
        ct__machine_flags(m, tmp, f);
        if (r == rank)
            mine = n;
        peer[n++] = f;
    }
    if (rc == 0) {
        ct__machine_flags(m, set, flags);
        rc = ct_share_keep(m, flags, peer, n, mine, &b->pp, share);
    }
    free(flags);
    free(peer);
    hwloc_bitmap_free(tmp);
    return rc;
}

/* Keep the binding `kept` (the launcher's, or whatever the process has):
 * this rank's record, with BLAS threads split among the local ranks whose
 * bindings overlap, and the device chosen among the local ranks' bindings. */
static int bind_kept(struct binder *b, hwloc_const_cpuset_t kept)
{
    struct ct_comm *c = b->c;
    struct ct_machine m = {0};
    struct ct_share share = {0};
    struct ct_rank_plan me = {.cpuset = hwloc_bitmap_alloc(), .nodeset = hwloc_bitmap_alloc()};
    int rc = !me.cpuset || !me.nodeset ? ct_error_set(CT_ENOMEM, "placement: out of memory")
                                       : ct__machine_from_topology(b->topo, b->allowed, &m);
    if (rc == 0 && (rc = keep_share(b, &m, kept, &share)) == 0) {
        ct__rank_plan_from_share(b->topo, &m, &share, &me);
        ct_share_free(&share, 1);
    }
    if (rc == 0 && b->pp.mode == CT_PLACEMENT_MODE_AUTO && !hwloc_bitmap_isequal(b->cur, b->launcher)) {
        /* An earlier call bound us; go back to the launcher's binding. */
        if (hwloc_set_cpubind(b->topo, b->launcher, HWLOC_CPUBIND_PROCESS) != 0)
            rc = ct_error_set(CT_EIO, "placement: cannot restore the launcher's binding: %s",
                              strerror(errno));
        else
            hwloc_bitmap_zero(g_ours);
    }
    if (rc == 0) {
        struct ct_placement *out = b->out;
        ct_placement_from_plan(b->topo, &me, c->local_rank, c->local_world, c->host, b->pp.mode, out);
        out->rank = c->rank;
        snprintf(out->bound_by, sizeof out->bound_by, "%s",
                 !hwloc_bitmap_isequal(kept, b->allowed)
                     ? (hwloc_bitmap_isequal(kept, b->launcher) ? launcher_name(c->rank, c->world)
                                                                : "ctrain")
                     : "none");
        snprintf(out->membind, sizeof out->membind, "unchanged");
    }
    ct_placement_plan_free(&me, 1);
    ct__machine_free(&m);
    return rc;
}

/* Bind CPU (all threads) and memory (this thread) to the plan's share. */
static int bind_to(struct binder *b, const struct ct_rank_plan *my, int external)
{
    struct ct_placement *out = b->out;
    if (hwloc_set_cpubind(b->topo, my->cpuset, HWLOC_CPUBIND_PROCESS) != 0)
        return ct_error_set(CT_EIO, "placement: rank %d cannot bind to PUs %s: %s", b->c->rank,
                            out->cpus, strerror(errno));
    hwloc_bitmap_copy(g_ours, my->cpuset);
    if (external)
        append_warning(out, "dist.placement = %s replaced the binding %s had given the ranks",
                       ct_placement_mode_name(b->pp.mode), launcher_name(b->c->rank, b->c->world));
    if (strcmp(out->membind, "bind") == 0 &&
        hwloc_set_membind(b->topo, my->nodeset, HWLOC_MEMBIND_BIND,
                          HWLOC_MEMBIND_THREAD | HWLOC_MEMBIND_BYNODESET) != 0) {
        /* Containers often forbid set_mempolicy; first touch from our
         * bound threads still lands on the local node. */
        const char *why = strerror(errno);
        snprintf(out->membind, sizeof out->membind, "failed");
        append_warning(out, "could not bind memory to NUMA node %s (%s); it follows first touch",
                       out->numa, why);
    }
    return 0;
}

/* Replace whatever binding the process has with ct_placement_plan's share. */
static int bind_planned(struct binder *b, int external)
{
    struct ct_comm *c = b->c;
    struct ct_rank_plan *plan = calloc((size_t)c->local_world, sizeof *plan);
    if (!plan)
        return ct_error_set(CT_ENOMEM, "placement: out of memory");
    int rc = ct_placement_plan(b->topo, b->allowed, c->local_world, &b->pp, plan);
    if (rc == 0) {
        struct ct_rank_plan *my = &plan[c->local_rank];
        ct_placement_from_plan(b->topo, my, c->local_rank, c->local_world, c->host, b->pp.mode,
                               b->out);
        b->out->rank = c->rank;
        rc = bind_to(b, my, external);
        ct_placement_plan_free(plan, c->local_world);
    }
    free(plan);
    return rc;
}

/* Auto's thread count had the rank not been bound: the job's usable cores
 * (PUs with hyperthreads) split among the node's ranks. */
static int unbound_threads(const struct binder *b)
{
    int units = 0;
    if (b->pp.use_hyperthreads)
        units = hwloc_bitmap_weight(b->allowed);
    else
        for (hwloc_obj_t core = NULL;
             (core = hwloc_get_next_obj_by_type(b->topo, HWLOC_OBJ_CORE, core)) != NULL;)
            units += hwloc_bitmap_intersects(core->cpuset, b->allowed);
    if (units < 1)
        units = hwloc_bitmap_weight(b->allowed);
    int n = units / (b->c->local_world > 0 ? b->c->local_world : 1);
    return n > 0 ? n : 1;
}

/* Who bound the rank, and what lets it use `want` threads. */
static void binder_advice(const char *bound_by, int want, const char **who, char *how, size_t n)
{
    if (strcmp(bound_by, "mpirun") == 0) {
        *who = "bound by mpirun";
        snprintf(how, n, "start it with mpirun --bind-to none (or launch/ctrain-run)");
    } else if (strcmp(bound_by, "slurm") == 0) {
        *who = "bound by Slurm";
        snprintf(how, n, "ask Slurm for %d CPUs per task (--cpus-per-task=%d)", want, want);
    } else if (strcmp(bound_by, "ctrain") == 0) {
        *who = "bound by dist.placement";
        snprintf(how, n, "start fewer ranks per node or set dist.placement = none");
    } else if (strcmp(bound_by, "none") == 0) {
        *who = "limited by the job's cgroup or allocation";
        snprintf(how, n, "give the job more CPUs (Slurm: --cpus-per-task=%d)", want);
    } else {
        *who = "bound by the launcher";
        snprintf(how, n, "start it unbound (mpirun --bind-to none, launch/ctrain-run) or with "
                         "more CPUs (Slurm: --cpus-per-task=%d)", want);
    }
}

void ct__threads_warning(char *buf, size_t n, const struct ct_threads_choice *ch, int requested,
                         const char *bound_by, int pus, const char *cpuset)
{
    char how[160];
    const char *who = "";
    const char *pu = pus == 1 ? "PU" : "PUs";
    buf[0] = '\0';
    if (ch->verdict == CT_THREADS_CAPPED) {
        binder_advice(bound_by, ch->unbound, &who, how, sizeof how);
        snprintf(buf, n, "dist.threads = auto runs %d thread%s, not %d: %s to %d %s (cpuset %s); "
                         "to run %d, %s", ch->threads, ch->threads == 1 ? "" : "s", ch->unbound,
                 who, pus, pu, cpuset, ch->unbound, how);
    } else if (ch->verdict == CT_THREADS_ABOVE) {
        binder_advice(bound_by, requested, &who, how, sizeof how);
        snprintf(buf, n, "dist.threads = %d on %d %s: %s to %d %s (cpuset %s), the threads take "
                         "turns at about %d %s's speed; %s, or set dist.threads = auto",
                 requested, pus, pu, who, pus, pu, cpuset, pus, pu, how);
    }
}

/* BLAS threads: what the plan says, capped at the binding's PUs for auto
 * (ct_threads_choose), as the pool actually took it. */
static void set_blas_threads(struct binder *b)
{
    struct ct_placement *out = b->out;
    struct ct_threads_choice ch =
        ct_threads_choose(b->pp.threads, out->threads, unbound_threads(b), out->npus);
    if (ch.verdict != CT_THREADS_FIT) {
        char hex[160] = "?", text[sizeof out->warning];
        hwloc_bitmap_t set = hwloc_bitmap_alloc();
        if (set && hwloc_bitmap_list_sscanf(set, out->cpus) == 0)
            hwloc_bitmap_taskset_snprintf(hex, sizeof hex, set);
        hwloc_bitmap_free(set);
        ct__threads_warning(text, sizeof text, &ch, b->pp.threads, out->bound_by, out->npus, hex);
        append_warning(out, "%s%s", text, "");
    }
    int want = ch.threads;
    out->threads = ct_set_blas_threads(b->c->local_world, want);
    if (out->threads != want) {
        char x[16], y[16];
        snprintf(x, sizeof x, "%d", out->threads);
        snprintf(y, sizeof y, "%d", want);
        append_warning(out, "OpenBLAS runs %s threads, not %s (its build limit)", x, y);
    }
}

int ct_placement_apply(struct ct_comm *c, const struct ct_placement_params *p,
                       struct ct_placement *out)
{
    struct binder b;
    int rc = binder_open(&b, c, p, out);
    if ((rc = ct_comm_agree(c, rc)) < 0)
        goto done;
    int external = !hwloc_bitmap_isequal(b.launcher, b.allowed);
    int keep = b.pp.mode == CT_PLACEMENT_MODE_NONE ||
               (b.pp.mode == CT_PLACEMENT_MODE_AUTO && external);
    hwloc_const_cpuset_t kept = b.pp.mode == CT_PLACEMENT_MODE_NONE ? b.cur : b.launcher;
    if ((rc = ct_comm_agree(c, exchange(&b, kept))) < 0)
        goto done;
    rc = keep ? bind_kept(&b, kept) : bind_planned(&b, external);
    if (rc == 0)
        set_blas_threads(&b);
    rc = ct_comm_agree(c, rc);
done:
    binder_close(&b);
    return rc;
}
