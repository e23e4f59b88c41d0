/* The cost of the default mode's non-finite check: one ct_first_nonfinite
 * scan of the summed gradient per step (train/step.c, check_sum), against the
 * naive isfinite loop and the clipping norm's pass (ct_grad_norm, what the
 * check costs instead when optim.clip_norm > 0: nothing extra). The buffer
 * is hot in cache, as the gradient is right after the allreduce wrote it.
 * Not run by CI; see tests/bench/README.md.
 *
 *     cmake --build build      # libctrain.a
 *     gcc -std=c11 -O3 -D_POSIX_C_SOURCE=200809L -Isrc tests/bench/bench_nonfinite.c \
 *         build/libctrain.a -o /tmp/bench_nonfinite -lcrypto -lm
 *     /tmp/bench_nonfinite [N...]     # default: the mlp's and the cnn's gradient sizes
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "core/tensor.h"
#include "optim/clip.h"

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Best and mean seconds of `reps` calls (the best is the machine's cost,
 * the mean what a loaded machine adds). */
#define TIME(reps, best, mean, expr)                                                              \
    do {                                                                                          \
        best = 1e9;                                                                               \
        double sum_ = 0.0;                                                                        \
        for (int r_ = 0; r_ < (reps); r_++) {                                                     \
            double t_ = now_s();                                                                  \
            sink += (double)(expr);                                                               \
            t_ = now_s() - t_;                                                                    \
            sum_ += t_;                                                                           \
            best = t_ < best ? t_ : best;                                                         \
        }                                                                                         \
        mean = sum_ / (reps);                                                                     \
    } while (0)

int main(int argc, char **argv)
{
    size_t sizes[16] = {235146, 421642};
    int n_sizes = 2;
    if (argc > 1) {
        n_sizes = 0;
        for (int i = 1; i < argc && n_sizes < 16; i++)
            sizes[n_sizes++] = (size_t)strtoull(argv[i], NULL, 10);
    }
    double sink = 0.0;
    printf("%10s %22s %22s %22s\n", "floats", "ct_first_nonfinite us", "isfinite loop us",
           "ct_grad_norm us");
    printf("%10s %22s %22s %22s\n", "", "best / mean", "best / mean", "best / mean");
    for (int k = 0; k < n_sizes; k++) {
        size_t n = sizes[k];
        float *x = malloc((n ? n : 1) * sizeof *x);
        if (!x)
            return 1;
        for (size_t i = 0; i < n; i++)
            x[i] = (float)((double)(i % 1000) * 1e-4 - 0.05);
        double b1, m1, b2, m2, b3, m3;
        TIME(2000, b1, m1, ct_first_nonfinite(x, n));
        TIME(300, b2, m2, ct_first_nonfinite_ref(x, n));
        TIME(300, b3, m3, ct_grad_norm(x, n));
        printf("%10zu %10.1f / %9.1f %10.1f / %9.1f %10.1f / %9.1f\n", n, b1 * 1e6, m1 * 1e6,
               b2 * 1e6, m2 * 1e6, b3 * 1e6, m3 * 1e6);
        free(x);
    }
    return sink == 42.0; /* keep the calls */
}
