/* FLOP counts for model FLOP utilization (nn/module.h, "FLOPs"): hand
 * counts for linear, conv2d and attention (with and without the input
 * gradient), the mlp's closed form, and every model of the zoo against the
 * multiply-adds its kernels really hand to ct_gemm in one training step
 * (core/gemm.h, ct_sgemm_count_macs). And the gemm peak probe's record. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/gemm.h"
#include "ct_model_test.h"
#include "ct_test.h"
#include "models/models.h"
#include "nn/activation.h"
#include "nn/attention.h"
#include "nn/conv2d.h"
#include "nn/linear.h"

#define ASSERT_FLOPS(f, want_fwd, want_bwd)                                                        \
    do {                                                                                           \
        struct ct_flops f_ = (f);                                                                  \
        if (f_.fwd != (double)(want_fwd) || f_.bwd != (double)(want_bwd))                          \
            fprintf(stderr, "  %s: got fwd %.0f bwd %.0f, want %.0f %.0f\n", #f, f_.fwd, f_.bwd,   \
                    (double)(want_fwd), (double)(want_bwd));                                       \
        CU_ASSERT_EQUAL(f_.fwd, (double)(want_fwd));                                               \
        CU_ASSERT_EQUAL(f_.bwd, (double)(want_bwd));                                               \
    } while (0)

/* Linear(784, 256): 784 x 256 = 200,704 multiply-adds a sample, 401,408
 * FLOPs forward, the same for dW, again for dX. Bias adds are not counted.
 * On T = 5 tokens, Linear(12, 7): 5 x 12 x 7 = 420 multiply-adds. */
static void test_linear_hand(void)
{
    struct ct_module *m = ct_linear_new(784, 256, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    ASSERT_FLOPS(ct_module_flops(m, 1), 401408, 802816);
    ASSERT_FLOPS(ct_module_flops(m, 0), 401408, 401408);
    ct_module_free(m);
    m = ct_linear_tokens_new(5, 12, 7, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    ASSERT_FLOPS(ct_module_flops(m, 1), 840, 1680);
    ct_module_free(m);
}

/* Conv2d(3 -> 4, 3x3, pad 1) on 8x8: 8x8 outputs x 4 channels x 27 taps =
 * 6,912 multiply-adds (border taps on padding included: the im2col gemm
 * multiplies them). Stride 2, no padding, on 9x9: 4x4 outputs, 1,728. */
static void test_conv2d_hand(void)
{
    struct ct_module *m = ct_conv2d_new(3, 8, 8, 4, 3, 1, 1, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    ASSERT_FLOPS(ct_module_flops(m, 1), 13824, 27648);
    ASSERT_FLOPS(ct_module_flops(m, 0), 13824, 13824);
    ct_module_free(m);
    m = ct_conv2d_new(3, 9, 9, 4, 3, 2, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    ASSERT_FLOPS(ct_module_flops(m, 1), 3456, 6912);
    ct_module_free(m);
}

/* Attention, T = 4 tokens, C = 6, 2 heads of 3:
 *   qkv  4 x 6 x 18 = 432 multiply-adds,  proj 4 x 6 x 6 = 144,
 *   per head QK^T 4 x 3 x 4 = 48 and PV 48: over both heads 96 each
 *   (= T*T*C), the causal mask changing nothing (the full T x T is computed).
 * forward  2 (432 + 144 + 96 + 96)                          = 1536
 * backward 2 (2 x 432 + 2 x 144 + 4 x 96)                   = 3072
 *          without the input gradient: 3072 - 2 x 432       = 2208 */
static void test_attention_hand(void)
{
    for (int causal = 0; causal < 2; causal++) {
        struct ct_module *m = ct_attention_new(4, 6, 2, causal);
        CU_ASSERT_PTR_NOT_NULL_FATAL(m);
        ASSERT_FLOPS(ct_module_flops(m, 1), 1536, 3072);
        ASSERT_FLOPS(ct_module_flops(m, 0), 1536, 2208);
        ct_module_free(m);
    }
}

/* configs/fmnist-mlp.ini's model, 784-256-128-10: F = 2 (784*256 + 256*128
 * + 128*10) = 469,504 forward; backward 2F less the first layer's input
 * gradient (2 * 784 * 256): 537,600. */
static void test_mlp_closed_form(void)
{
    struct ct_model_spec s = ct_model_default_spec();
    s.name = "mlp";
    s.in_c = 1, s.in_h = s.in_w = 28, s.n_classes = 10;
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &s, 2), 0);
    const double F = 2.0 * (784 * 256 + 256 * 128 + 128 * 10);
    ASSERT_FLOPS(ct_model_flops(&m), F, 2 * F - 2.0 * 784 * 256);
    ASSERT_FLOPS(ct_model_flops(&m), 469504, 537600);
    ct_model_free(&m);
}

/* Multiply-adds ct_gemm performs in one forward and backward of B samples
 * (token ids in [0, V) when V > 0, else small values). */
static double counted_macs(struct ct_model *m, int B, int V)
{
    ct_model_init_params(m, 3);
    ct_model_set_training(m, 1);
    float *x = ct_model_input(m);
    for (size_t i = 0; i < (size_t)B * m->in_numel; i++)
        x[i] = V > 0 ? (float)(i % (size_t)V) : (float)((int)(i % 7) - 3) * 0.25f;
    static uint32_t idx[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    m->fwd.sample_index = idx;
    double macs = 0.0;
    ct_sgemm_count_macs(&macs);
    ct_model_forward(m, B);
    float *g = ct_model_output_grad(m);
    for (size_t i = 0; i < (size_t)B * ct_model_out_numel(m); i++)
        g[i] = 0.01f;
    ct_model_zero_grad(m);
    ct_model_backward(m, B, NULL, NULL);
    ct_sgemm_count_macs(NULL);
    return macs;
}

/* Every zoo model, small: the declared FLOPs of B samples are exactly twice
 * the multiply-adds its kernels hand to ct_sgemm. One known difference: a
 * convolution with a bias folds it into its forward product as one more
 * row of ones (conv2d.c), OC x OH x OW multiply-adds a sample that are
 * elementwise adds by our convention (extra_macs). */
static void check_model(struct ct_model_spec s, int V, double extra_macs_per_sample)
{
    enum { B = 3 };
    struct ct_model m;
    CU_ASSERT_EQUAL_FATAL(ct_model_build(&m, &s, B), 0);
    struct ct_flops f = ct_model_flops(&m);
    double declared = B * (f.fwd + f.bwd);
    double counted = 2.0 * (counted_macs(&m, B, V) - B * extra_macs_per_sample);
    if (declared != counted)
        fprintf(stderr, "  %s: declared %.0f FLOPs, the kernels did %.0f\n", s.name, declared,
                counted);
    CU_ASSERT(f.fwd > 0 && f.bwd > f.fwd);
    CU_ASSERT_EQUAL(declared, counted);
    ct_model_free(&m);
}

static void test_zoo_against_kernels(void)
{
    check_model(ct_test_image_spec("mlp"), 0, 0);
    /* cnn: two biased convs, 3 x 8 x 8 and 4 x 4 x 4 outputs a sample. */
    struct ct_model_spec cnn = ct_test_image_spec("cnn");
    for (cnn.fused = 0; cnn.fused < 2; cnn.fused++)
        check_model(cnn, 0, 3 * 64 + 4 * 16);
    check_model(ct_test_image_spec("resnet"), 0, 0); /* its convs have no bias */
    check_model(ct_test_image_spec("vit"), 0, 0);
    check_model(ct_test_gpt_spec(11, 8, 12, 3, 2, 0.0f), 11, 0);
    check_model(ct_test_gpt_spec(11, 8, 12, 3, 2, 0.1f), 11, 0);
}
CT_TEST_WITH_GEMM(test_zoo_against_kernels, 0)
CT_TEST_WITH_GEMM(test_zoo_against_kernels, 1)

/* The probe reports the kernel ct_sgemm runs, on a 384^3 product, at a
 * positive finite rate. */
static void test_peak_probe(void)
{
    struct ct_sgemm_peak pk = {0};
    CU_ASSERT_EQUAL_FATAL(ct_sgemm_peak_probe(&pk), 0);
    CU_ASSERT(isfinite(pk.gflops) && pk.gflops > 0);
    CU_ASSERT_STRING_EQUAL(pk.kernel, ct_sgemm_impl());
    CU_ASSERT_EQUAL(pk.n, CT_SGEMM_PEAK_N);
    CU_ASSERT(pk.threads >= 1);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"linear: hand count", test_linear_hand},
        {"conv2d: hand count", test_conv2d_hand},
        {"attention: hand count, causal or not", test_attention_hand},
        {"mlp: closed form", test_mlp_closed_form},
        {"zoo: declared = kernels' multiply-adds x 2 (OpenBLAS)", test_zoo_against_kernels_gemm0},
        {"zoo: declared = kernels' multiply-adds x 2 (ours)", test_zoo_against_kernels_gemm1},
        {"gemm peak probe", test_peak_probe},
        {NULL, NULL},
    };
    return ct_test_run("flops", cases);
}
