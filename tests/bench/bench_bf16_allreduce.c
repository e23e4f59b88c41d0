/* By hand, not CI: the blocking allreduce of the mlp's gradient (235146
 * floats, 0.94 MB) as float32 (MPI_SUM) against bf16 (parallel/compress.h:
 * round, the user-defined sum on MPI_UINT16_T, widen), medians of R
 * repetitions, each after a barrier. The floor of the exposed
 * communication of the mlp at N ranks (its gradient is one bucket that
 * completes with backward, tests/bench/README.md).
 *   mpicc -std=c11 -O3 -Isrc tests/bench/bench_bf16_allreduce.c src/parallel/compress.c \
 *     -o /tmp/bench_bf16_allreduce
 *   mpirun -np 2 /tmp/bench_bf16_allreduce [R=300] [N=235146] */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "parallel/compress.h"

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *t)
{
    (void)t;
    ct_compress_sum_bf16(inout, in, (size_t)*len);
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int R = argc > 1 ? atoi(argv[1]) : 300, n = argc > 2 ? atoi(argv[2]) : 235146, rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    float *g = malloc((size_t)n * sizeof *g), *f = malloc((size_t)n * sizeof *f);
    uint16_t *h = malloc((size_t)n * sizeof *h);
    double *t[4];
    for (int k = 0; k < 4; k++)
        t[k] = malloc((size_t)R * sizeof(double));
    for (int i = 0; i < n; i++)
        g[i] = (float)((i * 7919 + rank * 104729) % 2001 - 1000) * 1e-6f;
    MPI_Op op;
    MPI_Op_create(bf16_sum, 1, &op);
    for (int r = -10; r < R; r++) { /* 10 warm-up rounds */
        for (int i = 0; i < n; i++)
            f[i] = g[i];
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, f, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double t1 = MPI_Wtime();
        MPI_Barrier(MPI_COMM_WORLD);
        double t2 = MPI_Wtime();
        ct_compress_round_bf16(h, g, (size_t)n);
        double t3 = MPI_Wtime();
        MPI_Allreduce(MPI_IN_PLACE, h, n, MPI_UINT16_T, op, MPI_COMM_WORLD);
        double t4 = MPI_Wtime();
        ct_compress_widen_bf16(f, h, (size_t)n);
        double t5 = MPI_Wtime();
        if (r >= 0) {
            t[0][r] = t1 - t0;
            t[1][r] = t5 - t2;
            t[2][r] = t4 - t3;
            t[3][r] = (t3 - t2) + (t5 - t4);
        }
    }
    if (rank == 0)
        printf("n %d, %d reps, medians (us): f32 allreduce %.0f | bf16 round+allreduce+widen %.0f "
               "(allreduce %.0f, round+widen %.0f)\n",
               n, R, median(t[0], R) * 1e6, median(t[1], R) * 1e6, median(t[2], R) * 1e6,
               median(t[3], R) * 1e6);
    MPI_Op_free(&op);
    MPI_Finalize();
    return 0;
}
