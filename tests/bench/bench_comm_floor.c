/* bench_comm_floor: what the MLP's gradient sync can cost at best on one node.
 * Run by hand, never by CI (tests/bench/README.md, "The MLP's communication
 * floor").
 *
 * The fmnist MLP's gradient is 235,146 floats (0.94 MB), 85 % of it the
 * first Linear's dW (256 x 784), which backward computes last. Three ways of
 * summing it over the ranks of one node, each timed over ITERS steps (median
 * and 10th percentile, max over ranks, after a barrier):
 *
 *   allreduce  MPI_Allreduce(MPI_IN_PLACE) of the whole buffer: what
 *              src/parallel/gradsync.c does for its last bucket.
 *   shm        a reduction through an MPI-3 shared-memory window in which
 *              every rank's gradient already lives (no copy in): each rank
 *              sums its 1/N of the elements over the N slots in rank order
 *              and writes the sum into every slot; two flag barriers (C11
 *              atomics in the window, spinning with sched_yield). A lower
 *              bound for an intra-node path, since it leaves out the copy of
 *              the gradient into the window that a real one needs.
 *   chunked K  dW computed in K row blocks (K sgemm calls of 256/K x 784 x
 *              128), MPI_Iallreduce of each block as soon as it is done
 *              (the last one blocking), MPI_Test between blocks: the overlap
 *              of the first layer's sync with its own backward. Timed with
 *              the sgemm, against K = 1 (one sgemm, then the blocking
 *              allreduce).
 *
 *   mpicc -std=c11 -O2 -Wall -Wextra tests/bench/bench_comm_floor.c -o /tmp/bench_comm_floor -lopenblas
 *   OPENBLAS_NUM_THREADS=1 mpirun --allow-run-as-root -np 2 --bind-to core /tmp/bench_comm_floor [ITERS]
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <mpi.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NUMEL = 235146, OUT = 256, IN = 784, BATCH = 128, WARMUP = 20 };

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median and 10th percentile (us) of the per-iteration max over ranks. */
static void report(const char *what, double *t, int n, int rank)
{
    MPI_Allreduce(MPI_IN_PLACE, t, n, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    if (rank == 0)
        printf("%-22s median %8.1f us   p10 %8.1f us\n", what, 1e6 * t[n / 2], 1e6 * t[n / 10]);
}

struct flags {
    _Alignas(64) atomic_long arrived;
    _Alignas(64) atomic_long reduced;
};

static void wait_all(struct flags **f, int N, int which, long epoch)
{
    for (int q = 0; q < N; q++) {
        atomic_long *a = which ? &f[q]->reduced : &f[q]->arrived;
        for (int spins = 0; atomic_load_explicit(a, memory_order_acquire) < epoch;)
            if (++spins == 1000) {
                sched_yield(); /* more ranks than cores: let the one we wait for run */
                spins = 0;
            }
    }
}

static void bench_shm(int rank, int N, int iters)
{
    const size_t slot = ((size_t)NUMEL * sizeof(float) + 4095) / 4096 * 4096 + 4096;
    char *base;
    MPI_Win win;
    MPI_Win_allocate_shared((MPI_Aint)slot, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &base, &win);
    struct flags **f = calloc((size_t)N, sizeof *f);
    float **S = calloc((size_t)N, sizeof *S);
    for (int q = 0; q < N; q++) {
        MPI_Aint sz;
        int disp;
        char *p;
        MPI_Win_shared_query(win, q, &sz, &disp, &p);
        f[q] = (struct flags *)p;
        S[q] = (float *)(p + 4096);
    }
    atomic_store(&f[rank]->arrived, 0);
    atomic_store(&f[rank]->reduced, 0);
    size_t part = ((size_t)NUMEL + (size_t)N - 1) / (size_t)N;
    size_t b = (size_t)rank * part, e = b + part < NUMEL ? b + part : NUMEL;
    float *ref = malloc(NUMEL * sizeof *ref);
    double *t = malloc((size_t)iters * sizeof *t);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int it = -WARMUP; it < iters; it++) {
        long epoch = it + WARMUP + 1;
        for (size_t i = 0; i < NUMEL; i++) /* "backward wrote the gradient" */
            S[rank][i] = (float)(i % 97) * 0.01f + (float)rank;
        memcpy(ref, S[rank], NUMEL * sizeof *ref);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        atomic_store_explicit(&f[rank]->arrived, epoch, memory_order_release);
        wait_all(f, N, 0, epoch);
        for (size_t i = b; i < e; i++) {
            float s = S[0][i];
            for (int q = 1; q < N; q++)
                s += S[q][i];
            for (int q = 0; q < N; q++)
                S[q][i] = s;
        }
        atomic_store_explicit(&f[rank]->reduced, epoch, memory_order_release);
        wait_all(f, N, 1, epoch);
        double dt = MPI_Wtime() - t0;
        if (it >= 0)
            t[it] = dt;
        if (it == -1) { /* check against MPI once (equal bits at N = 2) */
            MPI_Allreduce(MPI_IN_PLACE, ref, NUMEL, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            int same = memcmp(ref, S[rank], NUMEL * sizeof *ref) == 0;
            MPI_Allreduce(MPI_IN_PLACE, &same, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
            if (rank == 0)
                printf("shm sum %s MPI_Allreduce's bits\n", same ? "equals" : "differs from");
        }
        MPI_Barrier(MPI_COMM_WORLD); /* nobody rewrites a slot another still reads */
    }
    report("shm (lower bound)", t, iters, rank);
    free(t);
    free(ref);
    free(S);
    free(f);
    MPI_Win_free(&win);
}

static void bench_allreduce_and_chunks(int rank, int iters)
{
    float *g = malloc(NUMEL * sizeof *g);
    float *dy = malloc((size_t)BATCH * OUT * sizeof *dy);
    float *x = malloc((size_t)BATCH * IN * sizeof *x);
    double *t = malloc((size_t)iters * sizeof *t);
    for (size_t i = 0; i < NUMEL; i++)
        g[i] = (float)(i % 89) * 0.01f;
    for (int i = 0; i < BATCH * OUT; i++)
        dy[i] = (float)(i % 101) * 0.01f;
    for (int i = 0; i < BATCH * IN; i++)
        x[i] = (float)(i % 103) * 0.01f;

    for (int it = -WARMUP; it < iters; it++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, g, NUMEL, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        if (it >= 0)
            t[it] = MPI_Wtime() - t0;
        for (size_t i = 0; i < NUMEL; i++) /* keep the values bounded */
            g[i] = (float)(i % 89) * 0.01f;
    }
    report("MPI_Allreduce 0.94 MB", t, iters, rank);

    float *dw = g + (NUMEL - OUT * IN);
    const int ks[] = {1, 2, 4, 8};
    for (size_t ki = 0; ki < sizeof ks / sizeof ks[0]; ki++) {
        const int K = ks[ki], rows = OUT / K;
        for (int it = -WARMUP; it < iters; it++) {
            MPI_Request req[8];
            int nreq = 0;
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            for (int c = 0; c < K; c++) {
                /* dW[rows block] = dY[:, block]^T X */
                cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, rows, IN, BATCH, 1.0f,
                            dy + c * rows, OUT, x, IN, 0.0f, dw + (size_t)c * rows * IN, IN);
                if (nreq) {
                    int done;
                    MPI_Testall(nreq, req, &done, MPI_STATUSES_IGNORE);
                }
                if (c < K - 1)
                    MPI_Iallreduce(MPI_IN_PLACE, dw + (size_t)c * rows * IN, rows * IN, MPI_FLOAT,
                                   MPI_SUM, MPI_COMM_WORLD, &req[nreq++]);
                else
                    MPI_Allreduce(MPI_IN_PLACE, dw + (size_t)c * rows * IN, rows * IN, MPI_FLOAT,
                                  MPI_SUM, MPI_COMM_WORLD);
            }
            MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
            if (it >= 0)
                t[it] = MPI_Wtime() - t0;
        }
        char what[64];
        snprintf(what, sizeof what, "dW + sync, K = %d", K);
        report(what, t, iters, rank);
    }
    free(t);
    free(x);
    free(dy);
    free(g);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, N;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &N);
    int iters = argc > 1 ? atoi(argv[1]) : 300;
    if (iters < 10)
        iters = 10;
    MPI_Comm node;
    int node_size;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    MPI_Comm_size(node, &node_size);
    MPI_Comm_free(&node);
    if (rank == 0)
        printf("bench_comm_floor: %d ranks, %d iterations, %d floats\n", N, iters, NUMEL);
    bench_allreduce_and_chunks(rank, iters);
    if (node_size == N)
        bench_shm(rank, N, iters);
    else if (rank == 0)
        printf("shm: skipped (the ranks span several nodes)\n");
    MPI_Finalize();
    return 0;
}
