/* The placement planner (see placement_plan.h): pure functions of a struct
 * ct_machine, one planner per mode.
 *
 * Plans work on "units": cores (their first usable PU unless hyperthreads are
 * wanted), or single PUs when hyperthreads are wanted and there are more ranks
 * than cores. Units are listed in logical order, in which every package and
 * NUMA node is a contiguous run. This file binds nothing and calls no hwloc.
 */
#include "parallel/placement_plan.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/error.h"

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

static int oom(void)
{
    return ct_error_set(CT_ENOMEM, "placement: out of memory");
}

/* ------------------------------------------------------------------ PU sets */

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

void ct_share_pus_str(char *buf, size_t n, const struct ct_machine *m, const unsigned char *pus)
{
    int *os = malloc((size_t)(m->npu > 0 ? m->npu : 1) * sizeof *os);
    char *full = malloc((size_t)m->npu * 24 + 1);
    if (!os || !full) {
        if (n)
            buf[0] = '\0';
        free(os);
        free(full);
        return;
    }
    int c = 0;
    for (int k = 0; k < m->npu; k++)
        if (pus[k])
            os[c++] = m->pu[k].os;
    qsort(os, (size_t)c, sizeof *os, cmp_int);
    size_t used = 0;
    full[0] = '\0';
    for (int i = 0; i < c; i++) {
        int j = i;
        while (j + 1 < c && os[j + 1] == os[j] + 1)
            j++;
        used += (size_t)sprintf(full + used, j > i ? "%s%d-%d" : "%s%d", i ? "," : "", os[i], os[j]);
        i = j;
    }
    int need = snprintf(buf, n, "%s", full);
    if (need >= (int)n && n > 4)
        memcpy(buf + n - 4, "...", 4);
    free(os);
    free(full);
}

static int weight(const struct ct_machine *m, const unsigned char *set)
{
    int w = 0;
    for (int k = 0; k < m->npu; k++)
        w += set[k] != 0;
    return w;
}

/* Cores with at least one flagged PU (the PUs of a core are contiguous). */
static int cores_of(const struct ct_machine *m, const unsigned char *set)
{
    int c = 0;
    for (int lo = 0, hi; lo < m->npu; lo = hi) {
        int any = 0;
        for (hi = lo; hi < m->npu && m->pu[hi].core == m->pu[lo].core; hi++)
            any |= set[hi];
        c += any != 0;
    }
    return c;
}

static int intersects(const struct ct_machine *m, const unsigned char *a, const unsigned char *b)
{
    for (int k = 0; k < m->npu; k++)
        if (a[k] && b[k])
            return 1;
    return 0;
}

/* ------------------------------------------------------------------ units */

struct unit {
    int lo, hi;    /* the PUs [lo, hi) of its core */
    int pu;        /* the one PU taken, or -1 for all usable PUs of the core */
    int numa, pkg; /* logical indices of its NUMA node and package */
};

/* The usable PUs of the core [lo, hi), by OS index (as hwloc iterates a set). */
static int core_usable(const struct ct_machine *m, int lo, int hi, int *pus)
{
    int c = 0;
    for (int k = lo; k < hi; k++) {
        if (!m->pu[k].usable)
            continue;
        int j = c++;
        while (j > 0 && m->pu[pus[j - 1]].os > m->pu[k].os)
            pus[j] = pus[j - 1], j--;
        pus[j] = k;
    }
    return c;
}

/* The units: one per usable core with its first PU (ht = 0), one per core
 * with all its PUs (ht = 1, per_pu = 0) or one per usable PU (ht = 1, per_pu = 1). */
static int build_units(const struct ct_machine *m, int ht, int per_pu, struct unit **out,
                       int *n_out)
{
    struct unit *u = calloc((size_t)(m->npu > 0 ? m->npu : 1), sizeof *u);
    int *pus = malloc((size_t)(m->npu > 0 ? m->npu : 1) * sizeof *pus);
    if (!u || !pus) {
        free(u);
        free(pus);
        return oom();
    }
    int n = 0;
    for (int lo = 0, hi; lo < m->npu; lo = hi) {
        struct unit base = {.lo = lo, .pu = -1, .numa = m->pu[lo].numa,
                            .pkg = m->pu[lo].pkg < 0 ? 0 : m->pu[lo].pkg};
        for (hi = lo; hi < m->npu && m->pu[hi].core == m->pu[lo].core; hi++)
            if (m->pu[hi].numa < base.numa)
                base.numa = m->pu[hi].numa;
        base.hi = hi;
        int c = core_usable(m, lo, hi, pus);
        if (c == 0)
            continue;
        if (!ht) {
            base.pu = pus[0];
            u[n++] = base;
        } else if (!per_pu) {
            u[n++] = base;
        } else {
            for (int i = 0; i < c; i++) {
                base.pu = pus[i];
                u[n++] = base;
            }
        }
    }
    free(pus);
    *out = u;
    *n_out = n;
    return 0;
}

static void add_unit(const struct ct_machine *m, unsigned char *set, const struct unit *u)
{
    if (u->pu >= 0) {
        set[u->pu] = 1;
        return;
    }
    for (int k = u->lo; k < u->hi; k++)
        set[k] |= m->pu[k].usable != 0;
}

/* Distinct cores among units [s, s+l) (contiguous, so count changes). */
static int count_cores(const struct unit *u, int s, int l)
{
    int c = l > 0;
    for (int k = s + 1; k < s + l; k++)
        c += u[k].lo != u[k - 1].lo;
    return c;
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
        return oom();
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

/* ------------------------------------------------------------------ warnings */

/* The one warning of an oversubscribed rank: `ranks` ranks share `units`
 * cores (PUs with ht) of the PU set `shared`; `advice` says what to do. */
static void oversub_warning(const struct ct_machine *m, struct ct_share *e, int ranks, int units,
                            int ht, const unsigned char *shared, const char *advice)
{
    char cpus[128];
    ct_share_pus_str(cpus, sizeof cpus, m, shared);
    int len = snprintf(e->warning, sizeof e->warning,
                       "%d ranks share %d %s (PUs %s): they compete for cores and every step "
                       "waits for the slowest; %s",
                       ranks, units,
                       ht ? (units == 1 ? "PU" : "PUs") : (units == 1 ? "core" : "cores"), cpus,
                       advice);
    if (len >= (int)sizeof e->warning) /* cut: it still says what matters first */
        e->warning[sizeof e->warning - 1] = '\0';
}

/* "start at most N ranks per node[ or set dist.use_hyperthreads = true]" */
static void node_advice(char *buf, size_t n, int units, int ht, int npus, int R)
{
    snprintf(buf, n, "start at most %d ranks per node%s", units,
             !ht && npus >= R ? " or set dist.use_hyperthreads = true" : "");
}

/* ------------------------------------------------------------------ planners */

/* What every planner is given: the machine, the request and the usable PUs. */
struct req {
    const struct ct_machine *m;
    int R, ht, threads;
    enum ct_placement_mode mode;
    const unsigned char *usable;
    int npus, ncores; /* usable PUs and cores */
};

/* Mode NONE: not bound; each rank may run anywhere, BLAS threads share the cores. */
static int plan_none(const struct req *q, struct ct_share *out)
{
    int units = q->ht ? q->npus : q->ncores;
    char advice[96];
    for (int i = 0; i < q->R; i++) {
        memcpy(out[i].pus, q->usable, (size_t)q->m->npu);
        out[i].bind = 0;
        out[i].threads = q->threads ? q->threads : (units / q->R > 0 ? units / q->R : 1);
        out[i].oversubscribed = q->R > units;
        if (out[i].oversubscribed) {
            node_advice(advice, sizeof advice, units, q->ht, q->npus, q->R);
            oversub_warning(q->m, &out[i], q->R, units, q->ht, q->usable, advice);
        }
    }
    return 0;
}

/* Mode CORE with R <= units: the even spread of split_even. */
static int plan_core_even(const struct req *q, const struct unit *u, int nu, struct ct_share *out)
{
    int *len = malloc((size_t)q->R * sizeof *len);
    if (!len)
        return oom();
    int rc = split_even(u, nu, q->R, len);
    for (int i = 0, s = 0; rc == 0 && i < q->R; s += len[i], i++) {
        for (int k = s; k < s + len[i]; k++)
            add_unit(q->m, out[i].pus, &u[k]);
        out[i].bind = 1;
        out[i].threads = q->threads ? q->threads
                                    : (q->ht ? weight(q->m, out[i].pus) : count_cores(u, s, len[i]));
    }
    free(len);
    return rc;
}

/* Mode CORE with more ranks than units: rank i takes unit i*nu/R, so
 * consecutive ranks share a unit and no unit has two more ranks than another. */
static void plan_core_shared(const struct req *q, const struct unit *u, int nu,
                             struct ct_share *out)
{
    char advice[96];
    int R = q->R;
    for (int i = 0; i < R; i++) {
        int k = (int)((int64_t)i * nu / R);
        int first = (int)(((int64_t)k * R + nu - 1) / nu);
        int next = (int)(((int64_t)(k + 1) * R + nu - 1) / nu);
        add_unit(q->m, out[i].pus, &u[k]);
        out[i].bind = 1;
        out[i].threads = q->threads ? q->threads : 1;
        out[i].oversubscribed = next - first > 1;
        if (out[i].oversubscribed) {
            node_advice(advice, sizeof advice, nu, q->ht, q->npus, R);
            oversub_warning(q->m, &out[i], R, nu, q->ht, q->usable, advice);
        }
    }
}

/* Modes CORE and AUTO. */
static int plan_core(const struct req *q, struct ct_share *out)
{
    struct unit *u = NULL;
    int nu = 0, rc;
    if ((rc = build_units(q->m, q->ht, q->ht && q->R > q->ncores, &u, &nu)) < 0)
        return rc;
    if (q->R <= nu)
        rc = plan_core_even(q, u, nu, out);
    else
        plan_core_shared(q, u, nu, out);
    free(u);
    return rc;
}

/* Rank i of R over D domains: domains [*lo, *hi), shared by *ranks ranks of
 * which it is the *index-th. R <= D: domain j goes to rank j*R/D, whole and
 * contiguous, the first ranks taking the extra ones; else consecutive ranks
 * share a domain. */
static void domain_range(int i, int R, int D, int *lo, int *hi, int *ranks, int *index)
{
    if (R <= D) {
        *lo = (int)(((int64_t)i * D + R - 1) / R);
        *hi = (int)(((int64_t)(i + 1) * D + R - 1) / R);
        *ranks = 1, *index = 0;
    } else {
        *lo = (int)((int64_t)i * D / R);
        *hi = *lo + 1;
        int first = (int)(((int64_t)*lo * R + D - 1) / D);
        int next = (int)(((int64_t)(*lo + 1) * R + D - 1) / D);
        *ranks = next - first, *index = i - first;
    }
}

/* Modes NUMA and PACKAGE: domains are runs of units with the same NUMA node
 * (package); each rank gets whole domains, or shares one. */
static int plan_domains(const struct req *q, struct ct_share *out)
{
    struct unit *u = NULL;
    int nu = 0, rc;
    if ((rc = build_units(q->m, q->ht, 0, &u, &nu)) < 0)
        return rc;
    int numa = q->mode == CT_PLACEMENT_MODE_NUMA, D = 0;
    int *dom_of = malloc((size_t)(nu + 1) * sizeof *dom_of);
    if (!dom_of) {
        free(u);
        return oom();
    }
    for (int k = 0; k < nu; k++) {
        if (k > 0 && (numa ? u[k].numa != u[k - 1].numa : u[k].pkg != u[k - 1].pkg))
            D++;
        dom_of[k] = D;
    }
    D++;
    for (int i = 0; i < q->R; i++) {
        int d_lo, d_hi, ranks_here, index_here, units = 0;
        domain_range(i, q->R, D, &d_lo, &d_hi, &ranks_here, &index_here);
        for (int k = 0; k < nu; k++)
            if (dom_of[k] >= d_lo && dom_of[k] < d_hi) {
                add_unit(q->m, out[i].pus, &u[k]);
                units++;
            }
        if (q->ht)
            units = weight(q->m, out[i].pus);
        out[i].bind = 1;
        int share = units / ranks_here + (index_here < units % ranks_here);
        out[i].threads = q->threads ? q->threads : (share > 0 ? share : 1);
        out[i].oversubscribed = ranks_here > units;
        if (out[i].oversubscribed)
            oversub_warning(q->m, &out[i], ranks_here, units, q->ht, out[i].pus,
                            "use dist.placement = core or start fewer ranks");
    }
    free(dom_of);
    free(u);
    return 0;
}

/* ------------------------------------------------------------------ devices */

/* 0: attached to one of the set's NUMA nodes (or to the set); 1: to its
 * package; 2: elsewhere. numas and pkgs flag the set's NUMA nodes and packages. */
static int device_tier(const struct ct_machine *m, const struct ct_machine_dev *d,
                       const unsigned char *set, const unsigned char *numas,
                       const unsigned char *pkgs)
{
    int tier = 2;
    for (int k = d->near_lo; k < d->near_hi && k < m->npu; k++) {
        if (set[k] || numas[m->pu[k].numa])
            return 0;
        if (m->pu[k].pkg >= 0 && pkgs[m->pu[k].pkg])
            tier = 1;
    }
    return tier;
}

/* tier[i * nd + j]: device_tier of set i and device j. */
static int device_tiers(const struct ct_machine *m, const unsigned char *const *sets, int n,
                        int *tier)
{
    int nnuma = 1, npkg = 1, nd = m->ndev;
    for (int k = 0; k < m->npu; k++) {
        nnuma = m->pu[k].numa >= nnuma ? m->pu[k].numa + 1 : nnuma;
        npkg = m->pu[k].pkg >= npkg ? m->pu[k].pkg + 1 : npkg;
    }
    unsigned char *numas = malloc((size_t)nnuma), *pkgs = malloc((size_t)npkg);
    if (!numas || !pkgs) {
        free(numas);
        free(pkgs);
        return oom();
    }
    for (int i = 0; i < n; i++) {
        memset(numas, 0, (size_t)nnuma);
        memset(pkgs, 0, (size_t)npkg);
        for (int k = 0; k < m->npu; k++)
            if (sets[i][k]) {
                numas[m->pu[k].numa] = 1;
                if (m->pu[k].pkg >= 0)
                    pkgs[m->pu[k].pkg] = 1;
            }
        for (int j = 0; j < nd; j++)
            tier[(size_t)i * (size_t)nd + (size_t)j] = device_tier(m, &m->dev[j], sets[i], numas, pkgs);
    }
    free(numas);
    free(pkgs);
    return 0;
}

/* The order in which ranks choose: those whose nearest tier is better and
 * has fewer devices first, then by rank. */
static void choosing_order(const int *tier, int n, int nd, int *key, int *order)
{
    for (int i = 0; i < n; i++) {
        int best = 3, count = 0;
        for (int j = 0; j < nd; j++) {
            int t = tier[(size_t)i * (size_t)nd + (size_t)j];
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
}

/* Every device serves floor(n/nd) or ceil(n/nd) ranks; each rank, in
 * choosing order, takes the nearest device still open (least loaded, then
 * lowest index, among equals). */
static void pick_devices(const int *tier, const int *order, int n, int nd, int *load, int *choice)
{
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
}

int ct_share_assign_devices(const struct ct_machine *m, const unsigned char *const *sets, int n,
                            int *choice)
{
    int nd = m->ndev;
    if (nd == 0) {
        for (int i = 0; i < n; i++)
            choice[i] = -1;
        return 0;
    }
    int *tier = malloc((size_t)n * (size_t)nd * sizeof *tier);
    int *order = malloc((size_t)n * sizeof *order);
    int *key = malloc((size_t)n * sizeof *key);
    int *load = calloc((size_t)nd, sizeof *load);
    int rc = !tier || !order || !key || !load ? oom() : device_tiers(m, sets, n, tier);
    if (rc == 0) {
        choosing_order(tier, n, nd, key, order);
        pick_devices(tier, order, n, nd, load, choice);
    }
    free(tier);
    free(order);
    free(key);
    free(load);
    return rc;
}

/* ------------------------------------------------------------------ plan */

void ct_share_free(struct ct_share *share, int n)
{
    for (int i = 0; share && i < n; i++) {
        free(share[i].pus);
        share[i].pus = NULL;
    }
}

/* Cores, PUs and devices of every share, once the PUs are chosen. */
static int finish(const struct ct_machine *m, int R, struct ct_share *out)
{
    const unsigned char **sets = malloc((size_t)R * sizeof *sets);
    int *choice = malloc((size_t)R * sizeof *choice);
    int rc = !sets || !choice ? oom() : 0;
    for (int i = 0; rc == 0 && i < R; i++) {
        out[i].npus = weight(m, out[i].pus);
        out[i].ncores = cores_of(m, out[i].pus);
        sets[i] = out[i].pus;
    }
    if (rc == 0 && (rc = ct_share_assign_devices(m, sets, R, choice)) == 0)
        for (int i = 0; i < R; i++)
            out[i].device_index = choice[i];
    free(sets);
    free(choice);
    return rc;
}

int ct_share_plan(const struct ct_machine *m, int R, const struct ct_placement_params *p,
                  struct ct_share *out)
{
    struct ct_placement_params pp = p ? *p : ct_placement_default_params();
    if (!m || !out || R < 1)
        return ct_error_set(CT_EINVAL, "placement: need a machine and at least one rank (got %d)",
                            R);
    if ((int)pp.mode < 0 || pp.mode >= CT_PLACEMENT_MODE_COUNT || pp.threads < 0)
        return ct_error_set(CT_EINVAL, "placement: invalid mode %d or threads %d", (int)pp.mode,
                            pp.threads);
    memset(out, 0, (size_t)R * sizeof *out);
    unsigned char *usable = calloc((size_t)(m->npu > 0 ? m->npu : 1), 1);
    int rc = usable ? 0 : oom();
    for (int i = 0; rc == 0 && i < R; i++) {
        out[i].device_index = -1;
        if (!(out[i].pus = calloc((size_t)(m->npu > 0 ? m->npu : 1), 1)))
            rc = oom();
    }
    for (int k = 0; rc == 0 && k < m->npu; k++)
        usable[k] = m->pu[k].usable != 0;
    struct req q = {.m = m, .R = R, .ht = pp.use_hyperthreads != 0, .threads = pp.threads,
                    .mode = pp.mode, .usable = usable};
    if (rc == 0 && (q.npus = weight(m, usable)) == 0)
        rc = ct_error_set(CT_EINVAL, "placement: the machine has no usable PU");
    if (rc == 0) {
        q.ncores = cores_of(m, usable);
        if (pp.mode == CT_PLACEMENT_MODE_NONE)
            rc = plan_none(&q, out);
        else if (pp.mode == CT_PLACEMENT_MODE_NUMA || pp.mode == CT_PLACEMENT_MODE_PACKAGE)
            rc = plan_domains(&q, out);
        else
            rc = plan_core(&q, out);
    }
    if (rc == 0)
        rc = finish(m, R, out);
    if (rc < 0)
        ct_share_free(out, R);
    free(usable);
    return rc;
}

int ct_share_keep(const struct ct_machine *m, const unsigned char *pus,
                  const unsigned char *const *peers, int n, int mine,
                  const struct ct_placement_params *p, struct ct_share *out)
{
    memset(out, 0, sizeof *out);
    out->device_index = -1;
    int *choice = calloc((size_t)(n > 0 ? n : 1), sizeof *choice);
    if (!choice || !(out->pus = malloc((size_t)(m->npu > 0 ? m->npu : 1)))) {
        free(choice);
        return oom();
    }
    memcpy(out->pus, pus, (size_t)m->npu);
    int sharers = 0;
    for (int i = 0; i < n; i++)
        sharers += intersects(m, peers[i], pus);
    if (sharers < 1)
        sharers = 1;
    out->npus = weight(m, pus);
    out->ncores = cores_of(m, pus);
    if (out->ncores == 0)
        out->ncores = out->npus;
    int units = p->use_hyperthreads ? out->npus : out->ncores;
    out->threads = p->threads ? p->threads : (units / sharers > 0 ? units / sharers : 1);
    out->oversubscribed = sharers > units;
    if (out->oversubscribed)
        oversub_warning(m, out, sharers, units, p->use_hyperthreads, pus,
                        "bind the ranks apart (launch/ctrain-run) or start fewer ranks");
    int rc = ct_share_assign_devices(m, peers, n, choice);
    if (rc == 0)
        out->device_index = choice[mine];
    else
        ct_share_free(out, 1);
    free(choice);
    return rc;
}
