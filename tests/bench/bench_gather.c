/* Gather throughput of the data formats (issue 20): samples per second
 * into the batch buffer, a shuffled batch of 128 at a time, for Fashion-MNIST
 * as IDX (gzipped: decoded into memory), as a memory-mapped uint8 .npy and
 * as a memory-mapped float32 .npy, each without and with crop_flip. Run by
 * hand, never by CI:
 *
 *     cmake --build build      # libctrain.a
 *     /usr/bin/python3 tests/e2e/make_data.py fmnist-npy /usr/share/datasets/fashion-mnist /tmp/npy
 *     gcc -std=c11 -O3 -D_POSIX_C_SOURCE=200809L -Isrc -Ibuild/generated tests/bench/bench_gather.c \
 *         build/libctrain.a -o /tmp/bench_gather $(pkg-config --cflags --libs openblas) \
 *         -lcrypto -lz -lhwloc -lm -lpthread
 *     /tmp/bench_gather /tmp/npy
 *
 * Prints the median of 7 rounds of 200 batches each (after one warm-up
 * round that also brings the mapped pages in).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/error.h"
#include "data/dataset.h"

enum { B = 128, BATCHES = 200, ROUNDS = 7 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double bench(const char *dir, const char *images, const char *labels, int augment)
{
    struct ct_dataset_params p = ct_dataset_default_params();
    p.dir = dir;
    p.images = images;
    p.labels = labels;
    p.mean[0] = 0.2860;
    p.std[0] = 0.3530;
    p.augment = augment ? CT_DATA_AUGMENT_CROP_FLIP : CT_DATA_AUGMENT_NONE;
    struct ct_dataset ds;
    if (ct_dataset_open(&ds, &p) < 0) {
        fprintf(stderr, "%s\n", ct_error_message());
        exit(1);
    }
    float *x = malloc((size_t)B * ds.sample_numel * sizeof *x);
    int32_t y[B];
    uint32_t idx[B];
    uint64_t s = 88172645463325252ull;
    double t[ROUNDS];
    for (int r = -1; r < ROUNDS; r++) {
        const double t0 = now();
        for (int k = 0; k < BATCHES; k++) {
            for (int i = 0; i < B; i++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                idx[i] = (uint32_t)(s % ds.n);
            }
            ct_dataset_gather(&ds, idx, B, k, x, y);
        }
        if (r >= 0)
            t[r] = now() - t0;
    }
    qsort(t, ROUNDS, sizeof *t, cmp);
    free(x);
    ct_dataset_close(&ds);
    return (double)B * BATCHES / t[ROUNDS / 2];
}

int main(int argc, char **argv)
{
    const char *npy = argc > 1 ? argv[1] : "/tmp/npy";
    const char *fm = "/usr/share/datasets/fashion-mnist";
    printf("| data | crop_flip | samples/s |\n|---|---|---|\n");
    for (int aug = 0; aug < 2; aug++) {
        printf("| IDX gzip (decoded) | %s | %.0f |\n", aug ? "yes" : "no",
               bench(fm, "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", aug));
        printf("| npy uint8 (mapped) | %s | %.0f |\n", aug ? "yes" : "no",
               bench(npy, "train-u8.npy", "train-labels.npy", aug));
        printf("| npy float32 (mapped) | %s | %.0f |\n", aug ? "yes" : "no",
               bench(npy, "train-f32.npy", "train-labels.npy", aug));
    }
    return 0;
}
