/* The fp32 products of one gpt training step, shape by shape: the rate of
 * ct_gemm (ours, or OpenBLAS with BENCH_GEMM=openblas) at each against the
 * square probe's (ct_sgemm_peak_probe). A benchmark, not a test: not built
 * by CMake, never run by CI.
 *
 *     cmake --build build      # libctrain.a
 *     gcc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -Isrc -Ibuild/src tests/bench/bench_gemm_shapes.c \
 *         build/libctrain.a -o /tmp/bench_gemm_shapes $(pkg-config --cflags --libs openblas) \
 *         -lcrypto -lz -lm -lpthread
 *     /tmp/bench_gemm_shapes [T] [C] [V] [reps]     # defaults: GPT-2 small, 1024 768 50304 5
 *
 * Run two at once (one per core, `taskset -c 0` and `taskset -c 1`) to see
 * the products with both cores busy, as N = 2 ranks of one thread run them.
 * Rows: a linear layer's forward (0,1), input gradient (0,0) and weight
 * gradient (1,0) for each of the block's four layers and the tied head, and
 * one head's four attention products (q k^T, P v and their gradients).
 * Times are the best of `reps`, as this thread's CPU time.
 */
#include "core/gemm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct shape {
    const char *what;
    int ta, tb, M, N, K, lda, ldb, ldc;
    int per_step; /* times this product runs in one step (forward + backward) */
};

static float *filled(size_t n, unsigned seed)
{
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "bench_gemm_shapes: out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((int)(seed >> 9 & 0xff) - 128) / 256.0f;
    }
    return p;
}

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 1024, C = argc > 2 ? atoi(argv[2]) : 768;
    const int V = argc > 3 ? atoi(argv[3]) : 50304, reps = argc > 4 ? atoi(argv[4]) : 5;
    const int L = 12, NH = C / 64, hs = 64, C3 = 3 * C, C4 = 4 * C;
    const char *impl = getenv("BENCH_GEMM");
    if (impl && strcmp(impl, "openblas") == 0)
        ct_sgemm_force(0);
    struct shape s[] = {
        {"qkv fwd", 0, 1, T, C3, C, C, C, C3, L},
        {"qkv dx", 0, 0, T, C, C3, C3, C, C, L},
        {"qkv dw", 1, 0, C3, C, T, C3, C, C, L},
        {"proj fwd", 0, 1, T, C, C, C, C, C, L},
        {"proj dx", 0, 0, T, C, C, C, C, C, L},
        {"proj dw", 1, 0, C, C, T, C, C, C, L},
        {"fc fwd", 0, 1, T, C4, C, C, C, C4, L},
        {"fc dx", 0, 0, T, C, C4, C4, C, C, L},
        {"fc dw", 1, 0, C4, C, T, C4, C, C, L},
        {"fc2 fwd", 0, 1, T, C, C4, C4, C4, C, L},
        {"fc2 dx", 0, 0, T, C4, C, C, C4, C4, L},
        {"fc2 dw", 1, 0, C, C4, T, C, C4, C4, L},
        {"head fwd", 0, 1, T, V, C, C, C, V, 1},
        {"head dx", 0, 0, T, C, V, V, C, C, 1},
        {"head dw", 1, 0, V, C, T, V, C, C, 1},
        {"att qk", 0, 1, T, T, hs, C3, C3, T, L * NH},
        {"att pv", 0, 0, T, hs, T, T, C3, C, L * NH},
        {"att dp", 0, 1, T, T, hs, C, C3, T, L * NH},
        {"att dv", 1, 0, T, hs, T, T, C, C3, L * NH},
        {"att dq", 0, 0, T, hs, T, T, C3, C3, L * NH},
        {"att dk", 1, 0, T, hs, T, T, C3, C3, L * NH},
    };
    const int n = (int)(sizeof s / sizeof s[0]);
    struct ct_sgemm_peak peak;
    if (ct_sgemm_peak_probe(&peak) != 0)
        return 1;
    printf("gemm %s, probe %.1f GFLOP/s (n = %d); T %d C %d V %d\n", ct_gemm_impl(), peak.gflops,
           peak.n, T, C, V);
    printf("%-9s %2s %2s %6s %6s %6s %9s %8s %6s %9s\n", "product", "tA", "tB", "M", "N", "K",
           "ms", "GFLOP/s", "/peak", "s a step");
    double step_s = 0.0, step_flop = 0.0;
    for (int i = 0; i < n; i++) {
        const struct shape *p = &s[i];
        const size_t na = (size_t)(p->ta ? p->K : p->M) * p->lda;
        const size_t nb = (size_t)(p->tb ? p->N : p->K) * p->ldb;
        const size_t nc = (size_t)p->M * p->ldc;
        float *a = filled(na, 1u + i), *b = filled(nb, 7u + i), *c = filled(nc, 13u + i);
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            double t0 = cpu_now();
            ct_gemm(p->ta, p->tb, p->M, p->N, p->K, 1.0f, a, p->lda, b, p->ldb, 0.0f, c, p->ldc);
            double t = cpu_now() - t0;
            best = t < best ? t : best;
        }
        const double flop = 2.0 * p->M * p->N * p->K;
        printf("%-9s %2d %2d %6d %6d %6d %9.3f %8.1f %6.2f %9.3f\n", p->what, p->ta, p->tb, p->M,
               p->N, p->K, best * 1e3, flop / best / 1e9, flop / best / 1e9 / peak.gflops,
               best * p->per_step);
        step_s += best * p->per_step;
        step_flop += flop * p->per_step;
        free(a);
        free(b);
        free(c);
    }
    printf("all: %.2f s a step of one window, %.1f GFLOP/s (%.2f of the probe)\n", step_s,
           step_flop / step_s / 1e9, step_flop / step_s / 1e9 / peak.gflops);
    return 0;
}
