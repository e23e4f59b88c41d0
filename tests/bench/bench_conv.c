/* Conv2d kernel throughput: GFLOP/s of ct_conv2d_forward / ct_conv2d_backward
 * for the two convolutions of the `cnn` model, next to one plain sgemm of the
 * same M, N, K (the ceiling the im2col formulation can reach). A benchmark,
 * not a test: not built by CMake, never run by CI.
 *
 * Dims legend: B = batch, C = input channels, OC = output channels, H, W =
 * input size, K = kernel size, P = output pixels per plane, CKK = C * K * K.
 *
 *     gcc -std=c11 -O3 -D_POSIX_C_SOURCE=200809L -Isrc tests/bench/bench_conv.c \
 *         src/nn/conv2d.c -o /tmp/bench_conv $(pkg-config --cflags --libs openblas)
 *     OPENBLAS_NUM_THREADS=1 OPENBLAS_CORETYPE=SkylakeX /tmp/bench_conv [B ...]
 *
 * Prints per layer: our time and GFLOP/s, then in parentheses the GFLOP/s of
 * the same products as one whole-batch sgemm and as B one-sample sgemm calls
 * (what the kernels do for these layers; the difference to ours is im2col,
 * col2im, bias and dbias). Add -DCT_CONV_TARGET_COLS=n to try another im2col
 * group size (columns per sgemm; 1 gives one sample per sgemm). The machine
 * is a shared 2-core VM: take the best of a few runs. FLOPs are counted as 2 per
 * multiply-add of the convolution proper: forward 2 B OC P CKK; backward
 * twice that with dinp (dweight and dinp), once without.
 */
#include "nn/conv2d.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static float *buf(size_t n)
{
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) {
        perror("aligned_alloc");
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

/* best = the best of `reps` timings of stmt after one warm-up call, in seconds. */
#define TIME_BEST(best, reps, stmt)                                                                \
    do {                                                                                           \
        stmt;                                                                                      \
        best = 1e30;                                                                               \
        for (int r_ = 0; r_ < (reps); r_++) {                                                      \
            double t0_ = now();                                                                    \
            stmt;                                                                                  \
            double t_ = now() - t0_;                                                               \
            if (t_ < best)                                                                         \
                best = t_;                                                                         \
        }                                                                                          \
    } while (0)

static void run(const char *name, int B, int C, int H, int W, int OC, int K, int pad)
{
    int OH, OW;
    ct_conv2d_out_size(H, W, K, K, 1, pad, &OH, &OW);
    size_t P = (size_t)OH * OW, CKK = (size_t)C * K * K;
    float *x = buf((size_t)B * C * H * W), *w = buf((size_t)OC * CKK), *bias = buf(OC);
    float *y = buf((size_t)B * OC * P), *dy = buf((size_t)B * OC * P);
    float *dx = buf((size_t)B * C * H * W), *dw = buf((size_t)OC * CKK), *db = buf(OC);
    size_t wsb = ct_conv2d_workspace(B, C, H, W, OC, K, K, 1, pad);
    float *ws = buf(wsb / sizeof(float));
    /* Plain sgemm buffers for the same products over the whole batch. */
    float *A = buf((size_t)CKK * B * P), *Cm = buf((size_t)OC * B * P);
    int N = (int)(B * P);
    double flop = 2.0 * B * OC * P * CKK;
    const int reps = getenv("BENCH_REPS") ? atoi(getenv("BENCH_REPS")) : 10;

    double tf, tb, tb0, sf, sw, sx, pf, pw, px;
    TIME_BEST(tf, reps, ct_conv2d_forward(y, x, w, bias, ws, B, C, H, W, OC, K, K, 1, pad));
    TIME_BEST(tb, reps, ct_conv2d_backward(dx, dw, db, dy, x, w, ws, B, C, H, W, OC, K, K, 1, pad));
    TIME_BEST(tb0, reps,
              ct_conv2d_backward(NULL, dw, db, dy, x, w, ws, B, C, H, W, OC, K, K, 1, pad));
    TIME_BEST(sf, reps, cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, OC, N, (int)CKK,
                                    1.0f, w, (int)CKK, A, N, 0.0f, Cm, N));
    TIME_BEST(sw, reps, cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC, (int)CKK, N, 1.0f,
                                    Cm, N, A, N, 1.0f, dw, (int)CKK));
    TIME_BEST(sx, reps, cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)CKK, N, OC, 1.0f,
                                    w, (int)CKK, Cm, N, 0.0f, A, N));
    /* The same products as B sgemm calls of one sample each, as the kernels
     * make them for these layers (G = 1): the ceiling of this formulation. */
    int Pi = (int)P;
    TIME_BEST(pf, reps,
              for (int b = 0; b < B; b++) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                                                      OC, Pi, (int)CKK, 1.0f, w, (int)CKK,
                                                      A + (size_t)b * CKK * P, Pi, 0.0f,
                                                      Cm + (size_t)b * OC * P, Pi));
    TIME_BEST(pw, reps,
              for (int b = 0; b < B; b++) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, OC,
                                                      (int)CKK, Pi, 1.0f, Cm + (size_t)b * OC * P,
                                                      Pi, A + (size_t)b * CKK * P, Pi, 1.0f, dw,
                                                      (int)CKK));
    TIME_BEST(px, reps,
              for (int b = 0; b < B; b++) cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans,
                                                      (int)CKK, Pi, OC, 1.0f, w, (int)CKK,
                                                      Cm + (size_t)b * OC * P, Pi, 0.0f,
                                                      A + (size_t)b * CKK * P, Pi));
    printf("%-5s B=%-3d G=%-2d | fwd %6.2f ms %5.1f GF/s (sgemm %5.1f, per-sample %5.1f) | "
           "bwd %6.2f ms %5.1f (%5.1f, %5.1f) | bwd no-dinp %6.2f ms %5.1f (%5.1f, %5.1f)\n",
           name, B, ct_conv2d_batch_group(B, C, H, W, OC, K, K, 1, pad), tf * 1e3,
           flop / tf * 1e-9, flop / sf * 1e-9, flop / pf * 1e-9, tb * 1e3, 2 * flop / tb * 1e-9,
           2 * flop / (sw + sx) * 1e-9, 2 * flop / (pw + px) * 1e-9, tb0 * 1e3,
           flop / tb0 * 1e-9, flop / sw * 1e-9, flop / pw * 1e-9);
    free(x);
    free(w);
    free(bias);
    free(y);
    free(dy);
    free(dx);
    free(dw);
    free(db);
    free(ws);
    free(A);
    free(Cm);
}

int main(int argc, char **argv)
{
    int batches[8] = {128, 256};
    int nb = 2;
    if (argc > 1) {
        nb = 0;
        for (int i = 1; i < argc && nb < 8; i++)
            batches[nb++] = atoi(argv[i]);
    }
    for (int i = 0; i < nb; i++) {
        run("conv1", batches[i], 1, 28, 28, 32, 3, 1);  /* Conv(1,32,3,p1) on 28x28 */
        run("conv2", batches[i], 32, 14, 14, 64, 3, 1); /* Conv(32,64,3,p1) on 14x14 */
    }
    return 0;
}
