/* BLAS threads per rank (see threads.h). */
#include "core/threads.h"

#include "core/threadpool.h"
#include "core/simd.h"

#include <hwloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* OpenBLAS's own API (declared in its cblas.h, repeated here so this file does
 * not depend on which cblas.h is first on the include path). */
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
char *openblas_get_config(void);
char *openblas_get_corename(void);

int ct_node_cores(void)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return 1;
    int n = 1;
    if (hwloc_topology_load(topo) == 0) {
        n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
        if (n < 1)
            n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PU);
    }
    hwloc_topology_destroy(topo);
    return n < 1 ? 1 : n;
}

int ct_allowed_cpus(void)
{
    hwloc_topology_t topo;
    if (hwloc_topology_init(&topo) != 0)
        return 1;
    int n = 1;
    hwloc_bitmap_t set = hwloc_bitmap_alloc();
    if (set && hwloc_topology_load(topo) == 0 &&
        hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0)
        n = hwloc_bitmap_weight(set);
    hwloc_bitmap_free(set);
    hwloc_topology_destroy(topo);
    return n < 1 ? 1 : n;
}

int ct_default_threads(int local_ranks)
{
    int per_rank = ct_node_cores() / (local_ranks > 0 ? local_ranks : 1);
    int allowed = ct_allowed_cpus();
    int n = per_rank < allowed ? per_rank : allowed;
    return n < 1 ? 1 : n;
}

struct ct_threads_choice ct_threads_choose(int requested, int planned, int unbound, int pus)
{
    struct ct_threads_choice c = {.verdict = CT_THREADS_FIT};
    pus = pus < 1 ? 1 : pus;
    c.unbound = unbound < 1 ? 1 : unbound;
    if (requested > 0) {
        /* The user's number, even on fewer PUs: the pool then yields
         * instead of spinning (core/threadpool.h), so it costs little. */
        c.threads = requested;
        c.verdict = requested > pus ? CT_THREADS_ABOVE : CT_THREADS_FIT;
        return c;
    }
    c.threads = planned < pus ? planned : pus;
    if (c.threads < 1)
        c.threads = 1;
    if (c.threads < c.unbound)
        c.verdict = CT_THREADS_CAPPED;
    return c;
}

int ct_set_blas_threads(int local_ranks, int requested)
{
    int n = requested > 0 ? requested : ct_default_threads(local_ranks);
    /* OpenBLAS's bits depend on its thread count (core/gemm.h): it runs one;
     * our kernels run on the rank's threads without changing theirs. */
    openblas_set_num_threads(1);
    ct_threadpool_set_threads(n);
    return ct_threadpool_threads();
}

const char *ct_blas_better_coretype(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    if (getenv("OPENBLAS_CORETYPE"))
        return NULL;
    const char *core = openblas_get_corename();
    int old = core && (strcasecmp(core, "Prescott") == 0 || strcasecmp(core, "Core2") == 0 ||
                       strcasecmp(core, "Nehalem") == 0 || strcasecmp(core, "Sandybridge") == 0 ||
                       strcasecmp(core, "Katmai") == 0 || strcasecmp(core, "Atom") == 0);
    unsigned f = ct_cpu_features();
    if (!old || !(f & CT_CPU_AVX2_FMA))
        return NULL;
    return (f & CT_CPU_AVX512_SKX) ? "SkylakeX" : "Haswell";
#else
    return NULL;
#endif
}

const char *ct_blas_kernel_warning(void)
{
    static char buf[512];
    const char *better = ct_blas_better_coretype();
    if (!better)
        return NULL;
    snprintf(buf, sizeof buf,
             "OpenBLAS chose its %s kernels, but this CPU supports the %s ones: matrix products "
             "run 2-3x below the machine's speed. Set OPENBLAS_CORETYPE=%s in the environment.",
             openblas_get_corename(), better, better);
    return buf;
}

const char *ct_blas_config(void)
{
    static char buf[512];
    snprintf(buf, sizeof buf, "%s (core %s)", openblas_get_config(), openblas_get_corename());
    return buf;
}
