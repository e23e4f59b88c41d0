/* Checkpoint throughput: MB/s of ct_ckpt_write (collective MPI-IO write,
 * sync, hashing, manifest, commit) and of ct_ckpt_open (read + verify every
 * digest, on every rank, as a resume does) for a model-sized state. A
 * benchmark, not a test: not built by CMake, never run by CI. Compare with
 * a plain sequential write of the same size on the same disk:
 *
 *     dd if=/dev/zero of=DIR/dd.bin bs=1M count=MB conv=fsync
 *
 * Build (after the library: cmake --build build --target ctrain):
 *
 *     mpicc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Isrc \
 *         -Ibuild/generated tests/bench/bench_ckpt.c build/libctrain.a \
 *         $(pkg-config --libs libprotobuf-c libcrypto openblas hwloc inih zlib) \
 *         -lm -lpthread -o /tmp/bench_ckpt
 *     mpirun -np N /tmp/bench_ckpt DIR [MB [REPS [FIRST_STEP]]]
 *
 * It doubles as a driver for the SIGKILL failpoints (ckpt.h), e.g.
 *     mpirun -np 2 /tmp/bench_ckpt RUN 1 1
 *     CT_FAILPOINT=renamed:0 mpirun -x CT_FAILPOINT -np 2 /tmp/bench_ckpt RUN 1 1 2
 * leaves RUN with ckpt-1 committed, `latest` naming it, and at most a stale
 * ckpt-2.tmp-* directory (or a complete ckpt-2 after `renamed`/`latest`).
 *
 * The state is MB megabytes (10^6 bytes) of f32 in tensors of a few sizes,
 * like a model's parameters and optimizer state. Each repetition writes a
 * new step into DIR, then every rank opens it; the previous step is removed
 * outside the timed part (retention's deletions are not timed, as dd has none).
 * Times are the slowest rank's; MB/s counts data.bin bytes once for the
 * write and per rank for the read. The read follows the write, so it is
 * served from the page cache unless the caches are dropped in between
 * (root: echo 3 > /proc/sys/vm/drop_caches, tried if DROP_CACHES=1).
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ckpt/ckpt.h"
#include "core/error.h"
#include "parallel/comm.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double slowest(double t)
{
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return t;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void drop_caches(int rank)
{
    if (rank == 0 && getenv("DROP_CACHES") && atoi(getenv("DROP_CACHES"))) {
        FILE *f = fopen("/proc/sys/vm/drop_caches", "w");
        if (f) {
            fputs("3\n", f);
            fclose(f);
        } else {
            fprintf(stderr, "cannot drop caches (not root?)\n");
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    struct ct_comm c;
    MPI_Comm world = MPI_COMM_WORLD;
    if (argc < 2 || ct_comm_init_mpi(&c, &world) < 0) {
        fprintf(stderr, "usage: mpirun -np N bench_ckpt DIR [MB [REPS [FIRST_STEP]]]\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    const char *dir = argv[1];
    double mb = argc > 2 ? atof(argv[2]) : 64;
    int reps = argc > 3 ? atoi(argv[3]) : 3;
    int first = argc > 4 ? atoi(argv[4]) : 1; /* step of the first repetition */

    /* Tensors of 1/4, 1/8, ... of the state plus a tail of small ones. */
    size_t total = (size_t)(mb * 1e6) / 4, left = total;
    struct ct_ckpt_tensor t[64];
    int n = 0;
    float *buf = malloc(total * sizeof *buf);
    for (size_t i = 0; i < total; i++)
        buf[i] = (float)(i % 1000) * 0.001f;
    size_t at = 0;
    while (left > 0 && n < 64) {
        size_t k = n < 6 ? total >> (n + 2) : (left < 1000 ? left : 997);
        if (k == 0 || k > left || n == 63)
            k = left;
        memset(&t[n], 0, sizeof t[n]);
        snprintf(t[n].name, sizeof t[n].name, "params/t%d", n);
        t[n].dtype = CT_DTYPE_F32;
        t[n].ndim = 1;
        t[n].shape[0] = (int64_t)k;
        t[n].data = buf + at;
        at += k;
        left -= k;
        n++;
    }
    char record[200];
    int rl = snprintf(record, sizeof record, "rank %d record", c.rank);
    struct ct_ckpt_write_params wp = {.run_dir = dir}; /* keep all: deletions are not timed */
    double wbest = 1e30, rbest = 1e30, *wt = calloc((size_t)reps, sizeof *wt),
           *rt = calloc((size_t)reps, sizeof *rt);
    size_t data_size = 0;
    for (int r = 0; r < reps; r++) {
        struct ct_ckpt_content ct = {
            .step = first + r, .config_text = "[bench]\n", .code_version = "bench",
            .tensors = t, .n_tensors = n, .record = record, .record_len = (size_t)rl,
        };
        uint8_t d[CT_SHA256_LEN];
        char path[1024];
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        int rc = ct_ckpt_write(&c, &wp, &ct, d, path, sizeof path);
        double tw = slowest(now() - t0);
        if (rc < 0) {
            fprintf(stderr, "[rank %d] write: %s\n", c.rank, ct_error_message());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        drop_caches(c.rank);
        struct ct_ckpt ck;
        t0 = now();
        rc = ct_ckpt_open(&ck, path);
        double tr = slowest(now() - t0);
        if (rc < 0) {
            fprintf(stderr, "[rank %d] open: %s\n", c.rank, ct_error_message());
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        data_size = ck.data_size;
        ct_ckpt_close(&ck);
        MPI_Barrier(MPI_COMM_WORLD);
        if (c.rank == 0 && r > 0) { /* the previous one, outside the timed part */
            char cmd[1200];
            snprintf(cmd, sizeof cmd, "rm -rf '%s/ckpt-%d'", dir, first + r - 1);
            if (system(cmd) != 0)
                fprintf(stderr, "could not remove %s/ckpt-%d\n", dir, first + r - 1);
        }
        if (c.rank == 0)
            printf("rep %d: write %.3f s (%.0f MB/s), open+verify %.3f s (%.0f MB/s per rank)\n", r,
                   tw, (double)data_size / 1e6 / tw, tr, (double)data_size / 1e6 / tr);
        wt[r] = tw;
        rt[r] = tr;
        wbest = tw < wbest ? tw : wbest;
        rbest = tr < rbest ? tr : rbest;
    }
    qsort(wt, (size_t)reps, sizeof *wt, cmp_double);
    qsort(rt, (size_t)reps, sizeof *rt, cmp_double);
    double mb_done = (double)data_size / 1e6;
    if (c.rank == 0)
        printf("N=%d median of %d: write %.0f MB/s, open+verify %.0f MB/s per rank\n", c.world, reps,
               mb_done / wt[reps / 2], mb_done / rt[reps / 2]);
    free(wt);
    free(rt);
    if (c.rank == 0)
        printf("N=%d %d tensors, %.1f MB: best write %.0f MB/s, best open+verify %.0f MB/s per rank "
               "(%.0f MB/s all ranks)\n", c.world, n, (double)data_size / 1e6,
               (double)data_size / 1e6 / wbest, (double)data_size / 1e6 / rbest,
               (double)data_size / 1e6 / rbest * c.world);
    free(buf);
    ct_comm_free(&c);
    MPI_Finalize();
    return 0;
}
