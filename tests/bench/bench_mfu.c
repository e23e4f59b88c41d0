/* Where a model's step goes against the MFU peak: per top-level module of a
 * zoo model, its declared FLOPs (nn/module.h, "FLOPs"), its forward and
 * backward time at the per-rank batch, its rate and what it would take at
 * the gemm peak. A benchmark, not a test: not built by CMake, never run by CI.
 *
 *     cmake --build build      # libctrain.a
 *     gcc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -Isrc -Ibuild/src tests/bench/bench_mfu.c \
 *         build/libctrain.a -o /tmp/bench_mfu $(pkg-config --cflags --libs openblas) \
 *         -lcrypto -lz -lm -lpthread
 *     /tmp/bench_mfu [cnn|mlp|resnet|vit|gpt] [B] [reps]      # B: rows per rank (128)
 *     BENCH_PRECISION=bf16 /tmp/bench_mfu cnn                  # products in bf16
 *
 * cnn and gpt are configs/fmnist-cnn.ini's and configs/moby-gpt.ini's models
 * (the gpt's B: windows of 128 bytes per rank, 16 at N = 2); the others the
 * zoo's defaults on 28x28 images.
 *
 * Times are the best of `reps` (default 20) of each module's forward and
 * backward, measured as this thread's CPU time (CLOCK_THREAD_CPUTIME_ID):
 * on a shared, loaded machine wall time counts the other processes' turns
 * on the core; CPU time does not (cache pollution by them still counts).
 * The model is in training mode; inputs are fixed pseudo-random values;
 * BatchNorm sums over this process only (as one rank with bn_sync = local).
 * Not measured here: data loading, the gradient allreduce, the optimizer
 * (see the trainer's phase split in metrics.jsonl for those).
 */
#include "core/gemm.h"
#include "models/models.h"

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

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "cnn";
    const int B = argc > 2 ? atoi(argv[2]) : 128;
    const int reps = argc > 3 ? atoi(argv[3]) : 20;
    /* BENCH_PRECISION=bf16: the products in bf16, as train.precision = bf16
     * (the peak is then the bf16 kernel's, as in training). */
    const char *prec = getenv("BENCH_PRECISION");
    if (prec && strcmp(prec, "bf16") == 0)
        ct_gemm_set_precision(CT_PRECISION_BF16);
    struct ct_model_spec s = ct_model_default_spec();
    s.name = name;
    s.in_c = 1, s.in_h = s.in_w = 28, s.n_classes = 10;
    if (strcmp(name, "cnn") == 0) { /* configs/fmnist-cnn.ini */
        s.channels[0] = 32, s.channels[1] = 64, s.n_channels = 2;
        s.hidden[0] = 128, s.n_hidden = 1, s.dropout = 0.25f;
    }
    const int gpt = strcmp(name, "gpt") == 0;
    if (gpt) { /* configs/moby-gpt.ini: bytes, T = 128, 4 blocks of width 128 */
        s.in_h = 1, s.in_w = 128, s.block = 128, s.n_classes = 256;
        s.depth = 4, s.width = 128, s.heads = 4, s.mlp_ratio = 4, s.gelu_tanh = 1;
        s.dropout = 0;
    }
    struct ct_model m;
    if (ct_model_build(&m, &s, B) < 0) {
        fprintf(stderr, "bench_mfu: cannot build %s\n", name);
        return 1;
    }
    ct_model_init_params(&m, 1);
    ct_model_set_training(&m, 1);
    static uint32_t idx[4096];
    for (int i = 0; i < B && i < 4096; i++)
        idx[i] = (uint32_t)i;
    m.fwd.sample_index = idx;
    for (size_t i = 0; i < (size_t)B * m.in_numel; i++)
        m.act[0][i] = gpt ? (float)((i * 2654435761u) % 256)
                          : (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    for (size_t i = 0; i < (size_t)B * ct_model_out_numel(&m); i++)
        m.dact[m.n][i] = 1e-3f;

    struct ct_sgemm_peak pk;
    if (ct_sgemm_peak_probe(&pk) < 0)
        return 1;
    printf("%s, B = %d rows, best of %d, thread CPU time; gemm peak %.1f GFLOP/s (%s %d^3, %d thread)\n",
           name, B, reps, pk.gflops, pk.kernel, pk.n, pk.threads);
    printf("%-4s %-20s %10s %10s %9s %9s %9s %9s %7s\n", "#", "module", "fwd MFLOP", "bwd MFLOP",
           "fwd ms", "bwd ms", "GFLOP/s", "peak ms", "share");
    double *tf = calloc((size_t)m.n, sizeof *tf), *tb = calloc((size_t)m.n, sizeof *tb);
    ct_model_forward(&m, B); /* warm-up */
    ct_model_zero_grad(&m);
    ct_model_backward(&m, B, NULL, NULL);
    for (int i = 0; i < m.n; i++)
        tf[i] = tb[i] = 1e30;
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < m.n; i++) {
            struct ct_module *mod = m.mods[i];
            double t0 = cpu_now();
            mod->ops->forward(mod, m.act[i + 1], m.act[i], B);
            double t = cpu_now() - t0;
            tf[i] = t < tf[i] ? t : tf[i];
        }
        /* Keep the output gradient fixed (a module may not overwrite it,
         * but the loss would rewrite it every step anyway). */
        for (size_t k = 0; k < (size_t)B * ct_model_out_numel(&m); k++)
            m.dact[m.n][k] = 1e-3f;
        for (int i = m.n - 1; i >= 0; i--) {
            struct ct_module *mod = m.mods[i];
            double t0 = cpu_now();
            mod->ops->backward(mod, i > 0 ? m.dact[i] : NULL, m.dact[i + 1], m.act[i], m.act[i + 1], B);
            double t = cpu_now() - t0;
            tb[i] = t < tb[i] ? t : tb[i];
        }
    }
    double total_t = 0, total_f = 0;
    for (int i = 0; i < m.n; i++)
        total_t += tf[i] + tb[i];
    for (int i = 0; i < m.n; i++) {
        struct ct_flops f = ct_module_flops(m.mods[i], i > 0);
        double fl = B * (f.fwd + f.bwd);
        total_f += fl;
        double t = tf[i] + tb[i];
        printf("%-4d %-20s %10.1f %10.1f %9.3f %9.3f %9.1f %9.3f %6.1f%%\n", i, m.mods[i]->ops->kind,
               B * f.fwd / 1e6, B * f.bwd / 1e6, tf[i] * 1e3, tb[i] * 1e3, fl > 0 ? fl / t / 1e9 : 0.0,
               fl / (pk.gflops * 1e9) * 1e3, 100 * t / total_t);
    }
    printf("forward + backward: %.1f MFLOP in %.3f ms = %.1f GFLOP/s: %.2f of the gemm peak "
           "(%.3f ms at the peak)\n",
           total_f / 1e6, total_t * 1e3, total_f / total_t / 1e9, total_f / total_t / 1e9 / pk.gflops,
           total_f / (pk.gflops * 1e9) * 1e3);
    free(tf);
    free(tb);
    ct_model_free(&m);
    return 0;
}
