/* A fork-join pool of worker threads for our own kernels' parallel loops.
 *
 * One pool per process, sized with the rank's thread count (ct_set_blas_threads
 * sets it together with OpenBLAS's). A parallel loop is a function called once
 * per part, with the part's index and the number of parts:
 *
 *     static void rows(void *ctx, int part, int nparts) { ... the part's rows ... }
 *     ct_threadpool_run(rows, &ctx, ct_threadpool_threads());
 *
 * The calling thread runs part 0 and waits for the others. The pool decides
 * only WHERE a part runs, never what it computes: a caller that cuts its work
 * so that each output element is computed entirely inside one part, in the
 * same order whatever the number of parts, gets the same bits for 1 or k
 * threads (that is how ct_sgemm uses it, see gemm.c).
 *
 * Workers are made on first use (after placement has bound the process, so
 * they inherit its cores), spin briefly for the next loop (a step issues its
 * products back to back, tens of microseconds apart) and then sleep. When
 * the pool has more threads than the process has PUs (read when the count
 * is set: a binding made later is not seen), nobody spins: every wait
 * yields the PU to the thread it waits for (threadpool.c says why). A call
 * while another thread is using the pool runs all its parts in the calling
 * thread, one after the other.
 *
 * Not here: work stealing, nested loops, per-thread placement of our own.
 */
#ifndef CT_CORE_THREADPOOL_H
#define CT_CORE_THREADPOOL_H

typedef void (*ct_threadpool_fn)(void *ctx, int part, int nparts);

/* Threads a parallel loop may use (the caller included), at least 1. */
void ct_threadpool_set_threads(int n);
int ct_threadpool_threads(void);
/* 1 when the count last set exceeds the PUs the process could run on then. */
int ct_threadpool_crowded(void);

/* fn(ctx, p, nparts) for p = 0 .. nparts-1, at most ct_threadpool_threads() of
 * them at once; returns when all have returned. nparts <= 1 calls fn(ctx, 0,
 * 1) here. */
void ct_threadpool_run(ct_threadpool_fn fn, void *ctx, int nparts);

#endif
