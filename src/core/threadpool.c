/* The fork-join pool (see threadpool.h).
 *
 * Protocol: the caller writes the loop (fn, ctx, nparts), sets `pending` to
 * the number of workers and publishes a new generation; each worker, on
 * seeing the generation change, runs its parts (w, w + T, w + 2T, ... for
 * worker w of T threads, the caller being 0) and decrements `pending`. The
 * caller runs its own parts and waits for `pending` to reach 0 before it
 * returns, so the loop's fields are never rewritten while a worker reads
 * them. Every worker takes part in every loop (a part index past nparts just
 * acknowledges), which keeps the hand-over that simple.
 *
 * Waiting: a worker spins on the generation for SPIN_NS, then sleeps on a
 * condition variable. It counts itself in `sleepers` under the mutex before
 * its last look at the generation, and the caller reads `sleepers` after
 * publishing (both sequentially consistent), so a wake-up is never lost.
 * A crowded pool (more threads than the PUs it may run on) yields the PU at
 * every turn of both waits instead of pausing (see relax()).
 */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include "core/threadpool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* How long an idle worker spins before it sleeps. The products of one step
 * come tens to hundreds of microseconds apart (the cnn's pooling and norm
 * kernels run between them), and a sleeping worker takes tens of
 * microseconds to wake on a VM: with 200 us the cnn at 1 rank x 2 threads
 * spent 10% of its time waiting for woken workers (perf). 5 ms: cnn 1 x 2,
 * 120 steps, 3 rounds on the AMD EPYC VM: 5161, 5160, 4214 samples/s
 * against 5029, 4834, 4160 with 200 us (1 thread: 4086, 3985, 4009). */
#define SPIN_NS 5000000L
enum { MAX_THREADS = 256 };

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    atomic_flag busy;     /* a loop (or a resize) is in progress */
    atomic_uint gen;      /* loop generation */
    atomic_int pending;   /* workers yet to finish the current loop */
    atomic_int sleepers;  /* workers waiting on `wake` */
    atomic_int want;      /* threads wanted, the caller included */
    atomic_int crowded;   /* 1: more threads than PUs to run them on: yield, never spin */
    int nthreads;         /* threads running loops now, the caller included */
    int quit;             /* workers end (under lock, with a new generation) */
    unsigned born;        /* the generation when the workers were made */
    ct_threadpool_fn fn;
    void *ctx;
    int nparts;
    pthread_t tid[MAX_THREADS];
} P = {.lock = PTHREAD_MUTEX_INITIALIZER,
       .wake = PTHREAD_COND_INITIALIZER,
       .busy = ATOMIC_FLAG_INIT,
       .want = 1,
       .nthreads = 1};

static long now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* One turn of a wait loop. On a crowded pool the thread we wait for may be
 * waiting for OUR PU: a pause would keep it off until the scheduler's next
 * tick (4 ms at HZ=250) preempts us, once per hand-over, and a step hands
 * over thousands of times (the gpt: ~3,100 loops a step, 100x slower on one
 * PU with 2 threads). sched_yield gives the PU to it at once. */
static void relax(void)
{
    if (atomic_load_explicit(&P.crowded, memory_order_relaxed))
        sched_yield();
    else
        cpu_relax();
}

/* Waits until the generation differs from `seen`; returns the new one. */
static unsigned wait_generation(unsigned seen)
{
    const long until = now_ns() + SPIN_NS;
    for (int i = 1;; i++) {
        const unsigned g = atomic_load_explicit(&P.gen, memory_order_acquire);
        if (g != seen)
            return g;
        relax();
        if ((i & 255) == 0 && now_ns() > until)
            break;
    }
    pthread_mutex_lock(&P.lock);
    atomic_fetch_add(&P.sleepers, 1);
    unsigned g;
    while ((g = atomic_load(&P.gen)) == seen)
        pthread_cond_wait(&P.wake, &P.lock);
    atomic_fetch_sub(&P.sleepers, 1);
    pthread_mutex_unlock(&P.lock);
    return g;
}

static void run_parts(int id, int nthreads)
{
    for (int p = id; p < P.nparts; p += nthreads)
        P.fn(P.ctx, p, P.nparts);
}

static void *worker(void *arg)
{
    const int id = (int)(intptr_t)arg;
    unsigned seen = P.born;
    for (;;) {
        seen = wait_generation(seen);
        /* `quit` is written before the generation that announces it. */
        if (P.quit)
            return NULL;
        run_parts(id, P.nthreads);
        atomic_fetch_sub_explicit(&P.pending, 1, memory_order_release);
    }
}

/* Publishes the loop (or the quit) written into P to the workers. */
static void publish(void)
{
    atomic_store(&P.pending, P.nthreads - 1);
    atomic_fetch_add(&P.gen, 1);
    if (atomic_load(&P.sleepers) > 0) {
        pthread_mutex_lock(&P.lock);
        pthread_cond_broadcast(&P.wake);
        pthread_mutex_unlock(&P.lock);
    }
}

static void wait_workers(void)
{
    while (atomic_load_explicit(&P.pending, memory_order_acquire) > 0)
        relax();
}

/* Ends the workers and starts want - 1 new ones (fewer if threads cannot be
 * made: the pool then runs with what it has). Called holding `busy`. */
static void resize(int want)
{
    if (P.nthreads > 1) {
        pthread_mutex_lock(&P.lock);
        P.quit = 1;
        pthread_mutex_unlock(&P.lock);
        publish();
        for (int i = 1; i < P.nthreads; i++)
            pthread_join(P.tid[i], NULL);
        /* They ended without counting themselves off. */
        atomic_store(&P.pending, 0);
        P.quit = 0;
    }
    P.nthreads = 1;
    /* Workers take no signals: a stop request or a timer goes to the
     * threads that expect it. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    P.born = atomic_load(&P.gen);
    for (int i = 1; i < want; i++) {
        if (pthread_create(&P.tid[i], NULL, worker, (void *)(intptr_t)i) != 0) {
            atomic_store(&P.want, P.nthreads);
            break;
        }
        P.nthreads = i + 1;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* PUs this process may run on now (its binding), at least 1. */
static int bound_pus(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return MAX_THREADS; /* unknown: spin, as before */
    int n = CPU_COUNT(&set);
    return n < 1 ? 1 : n;
}

void ct_threadpool_set_threads(int n)
{
    n = n < 1 ? 1 : n > MAX_THREADS ? MAX_THREADS : n;
    atomic_store(&P.crowded, n > bound_pus());
    atomic_store(&P.want, n);
}

int ct_threadpool_crowded(void) { return atomic_load(&P.crowded); }

int ct_threadpool_threads(void) { return atomic_load_explicit(&P.want, memory_order_relaxed); }

void ct_threadpool_run(ct_threadpool_fn fn, void *ctx, int nparts)
{
    if (nparts <= 1) {
        fn(ctx, 0, 1);
        return;
    }
    if (atomic_flag_test_and_set_explicit(&P.busy, memory_order_acquire)) {
        /* Another thread's loop is running: do this one here. */
        for (int p = 0; p < nparts; p++)
            fn(ctx, p, nparts);
        return;
    }
    const int want = atomic_load_explicit(&P.want, memory_order_relaxed);
    if (want != P.nthreads)
        resize(want);
    P.fn = fn;
    P.ctx = ctx;
    P.nparts = nparts;
    if (P.nthreads > 1)
        publish();
    run_parts(0, P.nthreads);
    wait_workers();
    atomic_flag_clear_explicit(&P.busy, memory_order_release);
}
