/* Conv2d kernel throughput, and the cnn's Conv-BN-ReLU-MaxPool stages fused
 * and unfused. A benchmark, not a test: not built by CMake, never run by CI.
 *
 * Dims legend: B = batch, C = input channels, OC = output channels, H, W =
 * input size, K = kernel size, P = output pixels per plane, CKK = C * K * K.
 *
 *     cmake --build build      # libctrain.a
 *     gcc -std=c11 -O3 -D_POSIX_C_SOURCE=200809L -Isrc tests/bench/bench_conv.c \
 *         build/libctrain.a -o /tmp/bench_conv $(pkg-config --cflags --libs openblas) -lcrypto -lm
 *     OPENBLAS_NUM_THREADS=1 /tmp/bench_conv [B ...]          # BENCH_GEMM=openblas|own to force one
 *
 * Prints first OpenBLAS's and our kernel's rate on a large square product
 * (the machine's 1-thread peak, for reference) and which one the
 * convolutions use (core/gemm.h; BENCH_GEMM=openblas or own forces one).
 * Then per conv layer: our time and GFLOP/s,
 * then in parentheses the GFLOP/s of the same products (through ct_sgemm,
 * as the kernels call them) as one whole-batch
 * sgemm and as B one-sample sgemm calls (what the kernels do for these
 * layers; the difference to ours is im2col, col2im, bias and dbias). Then
 * per cnn stage, one training step's forward + backward of the stage as the
 * fused block (nn/convblock.h) and as the four separate modules, in ms per
 * batch and as conv GFLOP/s (the convolution's FLOPs over the stage's whole
 * time), and the unfused/fused time ratio: first with the AVX-512 kernels
 * where the CPU has them (core/simd.h), then with the portable ones. The first stage has no input gradient (it is the model's
 * first layer); the second has one. FLOPs are counted as 2 per multiply-add
 * of the convolution proper: forward 2 B OC P CKK; backward twice that with
 * dinp (dweight and dinp), once without. The machine is a shared 2-core VM:
 * take the best of a few runs.
 */
#include "core/gemm.h"
#include "core/simd.h"
#include "nn/activation.h"
#include "nn/conv2d.h"
#include "nn/convblock.h"
#include "nn/norm.h"
#include "nn/pool.h"
#include "nn/shape.h"

#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    TIME_BEST(sf, reps, ct_sgemm(0, 0, OC, N, (int)CKK,
                                    1.0f, w, (int)CKK, A, N, 0.0f, Cm, N));
    TIME_BEST(sw, reps, ct_sgemm(0, 1, OC, (int)CKK, N, 1.0f,
                                    Cm, N, A, N, 1.0f, dw, (int)CKK));
    TIME_BEST(sx, reps, ct_sgemm(1, 0, (int)CKK, N, OC, 1.0f,
                                    w, (int)CKK, Cm, N, 0.0f, A, N));
    /* The same products as B sgemm calls of one sample each, as the kernels
     * make them for these layers (G = 1): the ceiling of this formulation. */
    int Pi = (int)P;
    TIME_BEST(pf, reps,
              for (int b = 0; b < B; b++) ct_sgemm(0, 0,
                                                      OC, Pi, (int)CKK, 1.0f, w, (int)CKK,
                                                      A + (size_t)b * CKK * P, Pi, 0.0f,
                                                      Cm + (size_t)b * OC * P, Pi));
    TIME_BEST(pw, reps,
              for (int b = 0; b < B; b++) ct_sgemm(0, 1, OC,
                                                      (int)CKK, Pi, 1.0f, Cm + (size_t)b * OC * P,
                                                      Pi, A + (size_t)b * CKK * P, Pi, 1.0f, dw,
                                                      (int)CKK));
    TIME_BEST(px, reps,
              for (int b = 0; b < B; b++) ct_sgemm(1, 0,
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

/* One cnn stage as a model: [flatten (so the stage gets an input gradient)]
 * then the fused block or the four modules. */
static int stage_model(struct ct_model *m, int fused, int with_dinp, int B, int C, int H, int W,
                       int OC)
{
    size_t in = (size_t)C * H * W;
    int rc = 0;
    ct_model_init(m, in);
    if (with_dinp)
        rc = ct_model_add(m, ct_flatten_new(in));
    if (rc == 0 && fused)
        rc = ct_model_add(m, ct_conv_bn_relu_pool_new(C, H, W, OC, 3, 1, 0));
    else if (rc == 0) {
        rc = ct_model_add(m, ct_conv2d_new(C, H, W, OC, 3, 1, 1, 1));
        if (rc == 0)
            rc = ct_model_add(m, ct_batchnorm2d_new(OC, H, W, 0));
        if (rc == 0)
            rc = ct_model_add(m, ct_maxpool2d_new(OC, H, W, 2, 2));
        if (rc == 0)
            rc = ct_model_add(m, ct_relu_new((size_t)OC * (H / 2) * (W / 2)));
    }
    if (rc == 0)
        rc = ct_model_finalize(m, B);
    if (rc == 0)
        ct_model_init_params(m, 1);
    return rc;
}

static void stage_step(struct ct_model *m, int B)
{
    ct_model_forward(m, B);
    ct_model_backward(m, B, NULL, NULL);
}

static void run_stage(const char *name, int with_dinp, int B, int C, int H, int W, int OC)
{
    const int reps = getenv("BENCH_REPS") ? atoi(getenv("BENCH_REPS")) : 10;
    const double flop = 2.0 * B * OC * H * W * C * 9 * (with_dinp ? 3 : 2);
    double t[4];
    for (int v = 0; v < 4; v++) { /* fused, unfused; then both with the portable kernels */
        struct ct_model m;
        if (stage_model(&m, v % 2 == 0, with_dinp, B, C, H, W, OC) < 0) {
            fprintf(stderr, "%s: cannot build the stage\n", name);
            exit(1);
        }
        float *x = ct_model_input(&m), *g = ct_model_output_grad(&m);
        for (size_t i = 0; i < (size_t)B * C * H * W; i++)
            x[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
        for (size_t i = 0; i < (size_t)B * ct_model_out_numel(&m); i++)
            g[i] = (float)((i * 40503u) % 1000) / 1000.0f - 0.5f;
        ct_simd_set_portable(v >= 2);
        TIME_BEST(t[v], reps, stage_step(&m, B));
        ct_simd_set_portable(0);
        ct_model_free(&m);
    }
    printf("%-6s B=%-3d | fused %6.2f ms %5.1f GF/s | unfused %6.2f ms %5.1f | ratio %.2f || "
           "portable kernels: fused %6.2f ms %5.1f | unfused %6.2f ms %5.1f | ratio %.2f\n",
           name, B, t[0] * 1e3, flop / t[0] * 1e-9, t[1] * 1e3, flop / t[1] * 1e-9, t[1] / t[0],
           t[2] * 1e3, flop / t[2] * 1e-9, t[3] * 1e3, flop / t[3] * 1e-9, t[3] / t[2]);
}

static void sgemm_peak(void)
{
    const int n = 1024;
    float *a = buf((size_t)n * n), *b = buf((size_t)n * n), *c = buf((size_t)n * n);
    double t;
    double to;
    TIME_BEST(t, 5, cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a, n, b,
                                n, 0.0f, c, n));
    TIME_BEST(to, 5, ct_sgemm_own(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n));
    printf("sgemm %dx%dx%d: OpenBLAS %.1f GF/s, our kernel %.1f (AVX-512 kernels of ours: %s; "
           "conv products: %s)\n",
           n, n, n, 2.0 * n * n * n / t * 1e-9, 2.0 * n * n * n / to * 1e-9,
           ct_simd_avx512() ? "yes" : "no", ct_sgemm_impl());
    free(a);
    free(b);
    free(c);
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
    /* BENCH_GEMM=openblas or own: the convolutions' products (core/gemm.h)
     * forced to one implementation; unset: the automatic choice. */
    const char *g = getenv("BENCH_GEMM");
    if (g && *g)
        ct_sgemm_force(strcmp(g, "own") == 0 ? 1 : strcmp(g, "openblas") == 0 ? 0 : -1);
    sgemm_peak();
    for (int i = 0; i < nb; i++) {
        run("conv1", batches[i], 1, 28, 28, 32, 3, 1);  /* Conv(1,32,3,p1) on 28x28 */
        run("conv2", batches[i], 32, 14, 14, 64, 3, 1); /* Conv(32,64,3,p1) on 14x14 */
        run_stage("stage1", 0, batches[i], 1, 28, 28, 32);
        run_stage("stage2", 1, batches[i], 32, 14, 14, 64);
    }
    return 0;
}
