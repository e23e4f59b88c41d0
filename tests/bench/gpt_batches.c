/* The batches ctrain-dist trains a token model on, printed the way
 * torch_gpt_peer.py --dump-batches prints its own, so that the two can be
 * compared line for line (bench_gpt.sh does, before it measures anything):
 *
 *     gpt_batches SEED BLOCK GLOBAL_BATCH WORLD STEPS SHARD[,SHARD...]
 *
 * For each of the first STEPS global steps (epochs following one another)
 * and each rank of WORLD: the step, epoch, rank, the first four sample
 * indices of the rank's slice (ct_sampler), and the SHA-256 of the slice's
 * inputs then targets as little-endian int32 (ct_dataset_gather, the tokens
 * format with window BLOCK + 1). Built by hand or by bench_gpt.sh, never by
 * CI:
 *
 *     gcc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -Isrc -Ibuild/generated tests/bench/gpt_batches.c \
 *         build/libctrain.a -o /tmp/gpt_batches $(pkg-config --cflags --libs openblas) \
 *         -lcrypto -lz -lhwloc -lm -lpthread
 *
 * What it is not: a test of the sampler or of the shard reader (their unit
 * tests are); only the peer's mirror of them is checked here.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/sha256.h"
#include "data/dataset.h"
#include "data/sampler.h"

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s SEED BLOCK GLOBAL_BATCH WORLD STEPS SHARD[,SHARD...]\n", argv[0]);
        return 2;
    }
    const uint64_t seed = strtoull(argv[1], NULL, 10);
    const int T = atoi(argv[2]), G = atoi(argv[3]), N = atoi(argv[4]), steps = atoi(argv[5]);
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = CT_DATA_FORMAT_TOKENS;
    p.images = argv[6];
    p.seed = seed;
    p.window = T + 1;
    struct ct_dataset ds;
    if (ct_dataset_open(&ds, &p) < 0) {
        fprintf(stderr, "%s\n", ct_error_message());
        return 1;
    }
    struct ct_sampler s[64];
    if (N < 1 || N > 64 || G % N) {
        fprintf(stderr, "WORLD must be 1..64 and divide GLOBAL_BATCH\n");
        return 2;
    }
    const int B = G / N;
    float *x = malloc((size_t)B * T * sizeof *x);
    int32_t *y = malloc((size_t)B * T * sizeof *y), *xi = malloc((size_t)B * T * sizeof *xi);
    for (int r = 0; r < N; r++)
        if (ct_sampler_init(&s[r], (uint32_t)ds.n, G, seed, N, r) < 0) {
            fprintf(stderr, "%s\n", ct_error_message());
            return 1;
        }
    for (int g = 0; g < steps; g++)
        for (int r = 0; r < N; r++) {
            const uint32_t *idx;
            int n;
            while (!ct_sampler_next(&s[r], &idx, &n))
                ;
            const int64_t epoch = s[r].epoch;
            ct_dataset_gather(&ds, idx, (size_t)n, epoch, x, y);
            for (size_t i = 0; i < (size_t)n * T; i++)
                xi[i] = (int32_t)x[i];
            struct ct_sha256 h;
            ct_sha256_init(&h);
            ct_sha256_update(&h, xi, (size_t)n * T * sizeof *xi);
            ct_sha256_update(&h, y, (size_t)n * T * sizeof *y);
            uint8_t d[CT_SHA256_LEN];
            ct_sha256_final(&h, d);
            printf("step %d epoch %" PRId64 " rank %d samples", g + 1, epoch, r);
            for (int i = 0; i < 4 && i < n; i++)
                printf(" %" PRIu32, idx[i]);
            printf(" sha256 ");
            for (int i = 0; i < CT_SHA256_LEN; i++)
                printf("%02x", d[i]);
            printf("\n");
        }
    for (int r = 0; r < N; r++)
        ct_sampler_free(&s[r]);
    free(x);
    free(y);
    free(xi);
    ct_dataset_close(&ds);
    return 0;
}
