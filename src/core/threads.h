/* Threads per rank for the matrix products ("BLAS threads" in the records).
 *
 * Each rank runs its products (core/gemm.h) on as many threads as cores it
 * may use: by default
 * the node's physical cores divided among the ranks on the node, and never
 * more than the CPUs this process is allowed to run on (mpirun or Slurm may
 * already have bound it). Oversubscribing cores with spinning BLAS threads is
 * the classic way to make a data-parallel job slower than a single process.
 * OpenBLAS itself always runs one thread (see core/gemm.h).
 * Pinning ranks to cores, NUMA memory policy and device choice are the
 * placement module's job (parallel/placement.h): ct_placement_apply() calls
 * ct_set_blas_threads() with the number of cores it gave the rank, which
 * supersedes the default below for runs that go through it, and
 * ct_threads_choose() how a binding with fewer PUs than threads is treated.
 */
#ifndef CT_CORE_THREADS_H
#define CT_CORE_THREADS_H


/* Physical cores of this node (hwloc), at least 1. */
int ct_node_cores(void);
/* CPUs in this process's affinity mask, at least 1. */
int ct_allowed_cpus(void);
/* The default for one of `local_ranks` ranks on this node:
 * max(1, min(allowed CPUs, node cores / local ranks)). */
int ct_default_threads(int local_ranks);
/* Set the threads of this rank's products (requested 0 = the default for
 * one of `local_ranks` ranks): our kernels' pool (core/threadpool.h) gets them,
 * OpenBLAS always runs one (see core/gemm.h); returns the pool's count. */
int ct_set_blas_threads(int local_ranks, int requested);
/* What a rank's thread count becomes, given its binding.
 *   requested: dist.threads (0 = auto);
 *   planned:   auto's count from the rank's binding (its cores split among
 *              the ranks sharing them);
 *   unbound:   auto's count had the rank not been bound (the job's usable
 *              cores split among the node's ranks);
 *   pus:       PUs in the rank's binding.
 * Auto takes min(planned, pus) (at least 1) and is CT_THREADS_CAPPED when
 * that is below `unbound`: the binding, not the node, set the count. An
 * explicit count is honoured, CT_THREADS_ABOVE when it exceeds `pus` (the
 * threads take turns on them). Pure: no system call. */
enum ct_threads_verdict { CT_THREADS_FIT, CT_THREADS_CAPPED, CT_THREADS_ABOVE };
struct ct_threads_choice {
    int threads;
    enum ct_threads_verdict verdict;
    int unbound; /* for the warning: what auto would have run unbound */
};
struct ct_threads_choice ct_threads_choose(int requested, int planned, int unbound, int pus);
/* The OPENBLAS_CORETYPE this CPU should use when OpenBLAS picked kernels
 * older than the CPU supports, else NULL. OpenBLAS 0.3.21 falls back to its
 * generic "Prescott" SSE3 kernels on CPUs it does not recognise (new or
 * virtualised models), which makes sgemm 2-3x slower. The answer is
 * "SkylakeX" for CPUs with AVX-512 F/CD/BW/DQ/VL, "Haswell" for AVX2 + FMA:
 * those kernels use nothing else, so they are correct on such a CPU. NULL
 * when OPENBLAS_CORETYPE is already set (the user's or the machine's choice
 * is never overridden). */
const char *ct_blas_better_coretype(void);
/* A warning for the log when ct_blas_better_coretype() is not NULL. */
const char *ct_blas_kernel_warning(void);
/* OpenBLAS's build configuration string and core name, for run records. */
const char *ct_blas_config(void);

#endif
