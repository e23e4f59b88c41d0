/* Matrix-product throughput, fp32 against bf16 (train.precision), on the
 * mlp's and the cnn's products. A benchmark, not a test: not built by
 * CMake, never run by CI.
 *
 * Dims legend: C (M, N) = op(A) (M, K) op(B) (K, N); B = batch rows.
 *
 *     cmake --build build      # libctrain.a
 *     gcc -std=c11 -O3 -D_POSIX_C_SOURCE=200809L -Isrc tests/bench/bench_bgemm.c \
 *         build/libctrain.a -o /tmp/bench_bgemm $(pkg-config --cflags --libs openblas) -lcrypto -lm
 *     OPENBLAS_NUM_THREADS=1 taskset -c 1 /tmp/bench_bgemm [B]     # B = rows per rank, 128
 *
 * Per product: GFLOP/s (2 M N K per product, one thread) of ct_sgemm
 * (whatever it runs here: our AVX-512 kernel or OpenBLAS), of ct_bgemm's
 * AVX512_BF16 kernel (where the CPU has it) and the bf16/fp32 ratio; the
 * software path on the first product only (it is scalar). Best of 5
 * rounds of at least 50 ms each, timed in the thread's CPU time
 * (CLOCK_THREAD_CPUTIME_ID): on a shared machine the time the thread was
 * not running is left out (its caches may still be cold).
 */
#include "core/bgemm.h"
#include "core/gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef void (*gemm_fn)(int, int, int, int, int, float, const float *, int, const float *, int,
                        float, float *, int);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static float *randoms(size_t n, unsigned seed)
{
    float *p = malloc(n * sizeof *p);
    srand(seed);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return p;
}

/* GFLOP/s of f on the product, best of 5 rounds. */
static double rate(gemm_fn f, int ta, int tb, int M, int N, int K, float beta, double min_s)
{
    const int lda = ta ? M : K, ldb = tb ? K : N;
    float *A = randoms((size_t)M * K, 1), *B = randoms((size_t)K * N, 2),
          *C = randoms((size_t)M * N, 3);
    double best = 0;
    for (int round = 0; round < 5; round++) {
        int reps = 0;
        const double t0 = now();
        double t;
        do {
            f(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
            reps++;
        } while ((t = now() - t0) < min_s);
        const double g = 2.0 * M * N * K * reps / t * 1e-9;
        if (g > best)
            best = g;
    }
    free(A);
    free(B);
    free(C);
    return best;
}

int main(int argc, char **argv)
{
    const int B = argc > 1 ? atoi(argv[1]) : 128;
    const struct {
        const char *what;
        int ta, tb, M, N, K;
        float beta;
    } shapes[] = {
        {"mlp fc1 forward  (B,784)x(256,784)^T", 0, 1, B, 256, 784, 1.0f},
        {"mlp fc1 dW       (B,256)^Tx(B,784)", 1, 0, 256, 784, B, 1.0f},
        {"mlp fc2 forward  (B,256)x(128,256)^T", 0, 1, B, 128, 256, 1.0f},
        {"mlp fc2 dinp     (B,128)x(128,256)", 0, 0, B, 256, 128, 0.0f},
        {"mlp fc2 dW       (B,128)^Tx(B,256)", 1, 0, 128, 256, B, 1.0f},
        {"cnn conv1 fwd    (32,9)x(9,784)", 0, 0, 32, 784, 9, 0.0f},
        {"cnn conv2 fwd    (64,288)x(288,196)", 0, 0, 64, 196, 288, 0.0f},
        {"cnn conv2 dW     (64,196)x(288,196)^T", 0, 1, 64, 288, 196, 1.0f},
        {"cnn conv2 dX     (288,64)^Tx(64,196)", 1, 0, 288, 196, 64, 0.0f},
        {"cnn fc1 forward  (B,3136)x(128,3136)^T", 0, 1, B, 128, 3136, 1.0f},
        {"cnn fc1 dW       (B,128)^Tx(B,3136)", 1, 0, 128, 3136, B, 1.0f},
        {"square 512", 0, 0, 512, 512, 512, 0.0f},
        {"square 1024", 0, 0, 1024, 1024, 1024, 0.0f},
    };
    printf("ct_sgemm runs %s; ct_bgemm %s\n", ct_sgemm_impl(),
           ct_bgemm_hw_available() ? "ctrain-avx512bf16" : "software-bf16 (no AVX512_BF16)");
    printf("%-42s %10s %10s %7s\n", "product (B = rows per rank)", "fp32 GF/s", "bf16 GF/s",
           "ratio");
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++) {
        const double s = rate(ct_sgemm, shapes[i].ta, shapes[i].tb, shapes[i].M, shapes[i].N,
                              shapes[i].K, shapes[i].beta, 0.05);
        const double b = rate(ct_bgemm_hw, shapes[i].ta, shapes[i].tb, shapes[i].M, shapes[i].N,
                              shapes[i].K, shapes[i].beta, 0.05);
        printf("%-42s %10.1f %10.1f %7.2f\n", shapes[i].what, s, b, b / s);
        if (i == 0)
            printf("%-42s %10s %10.2f\n", "  (the same, software-bf16)", "",
                   rate(ct_bgemm_soft, shapes[i].ta, shapes[i].tb, shapes[i].M, shapes[i].N,
                        shapes[i].K, shapes[i].beta, 0.05));
    }
    return 0;
}
