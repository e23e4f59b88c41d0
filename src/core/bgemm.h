/* bf16 matrix products (train.precision = bf16): the ct_sgemm contract
 * (core/gemm.h), but each operand element is first rounded from float to
 * bfloat16 (round to nearest, ties to even) and the products are summed in
 * float. Parameters, gradients and everything else stay float: only the
 * two operands of a product are rounded, once per call.
 *
 *     ct_bgemm(0, 1, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);   // C = A . B^T in bf16
 *
 * Two implementations that compute the same bits (tests/unit/test_bgemm.c):
 * - "ctrain-avx512bf16": the AVX512_BF16 instruction vdpbf16ps, chosen at
 *   run time where cpuid has AVX512_BF16 (compiled with target attributes,
 *   so the binary stays baseline x86-64);
 * - "software-bf16": portable C that emulates that instruction lane by lane,
 *   on every other CPU, and where CT_SIMD=portable (core/simd.h) asks for
 *   the portable kernels; slow (scalar), it is the documented reference.
 *
 * What vdpbf16ps computes (Intel SDM; measured identical on this project's
 * AMD EPYC, see ct_bf16_dot2): for each float lane, with the lane's pair of
 * bf16 (even element in the low half, odd in the high half) from each
 * operand, acc = fma(a_odd, b_odd, acc), then acc = fma(a_even, b_even,
 * acc): two fused multiply-adds, each rounded to nearest even, denormal
 * inputs taken as zero, denormal results (tininess detected after rounding)
 * flushed to a zero of their sign, MXCSR neither read nor written.
 *
 * So every element of C is summed in one fixed order: K cut into blocks of
 * at most 512 (an even length, equal blocks, from K alone), in each block
 * the pairs (k, k + 1), k even, in ascending order, k + 1 before k, from a
 * float zero; then C = alpha * block + beta * C with the block's beta (the
 * caller's for the first block, 1 after), as ct_sgemm. An odd K adds one
 * zero element. The bits do not depend on the thread count nor on how a
 * caller cuts C into calls, as ct_sgemm's.
 *
 * The rounding is core/bf16.h's ct_bf16_from_f32_daz (the instruction's).
 * Differences from a float product: each operand element carries a relative
 * error of at most 2^-8 (bf16 keeps 8 significant bits), so |C - exact| <=
 * |alpha| (2^-7 + 2^-16) sum |a b| + the float summation term (K + 2) 2^-24
 * (|alpha| sum |a b| + |beta c|); operands below FLT_MIN become zero, and
 * a float above the largest bf16 (about 3.39e38) becomes infinity. NaN stays
 * NaN (its payload may differ between the two implementations). */
#ifndef CT_CORE_BGEMM_H
#define CT_CORE_BGEMM_H

#include <stdint.h>

void ct_bgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

/* Whether this build has the AVX512_BF16 kernel and the CPU has AVX512_BF16
 * (and AVX-512 F, CD, BW, DQ, VL, which every such CPU has). */
int ct_bgemm_hw_available(void);
/* Always the AVX512_BF16 kernel (callers check ct_bgemm_hw_available), or
 * always the software path; for tests and benchmarks. */
void ct_bgemm_hw(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);
void ct_bgemm_soft(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* The naive reference: operands rounded by ct_bf16_from_f32_daz
 * (core/bf16.h), products summed in double (not bit-identical to the two
 * above: for tolerances). */
void ct_bgemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The same bits again, straight from the operands (no packing, no
 * threads): what a thread without memory for its panels runs; tests. */
void ct__bgemm_direct(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* "ctrain-avx512bf16" or "software-bf16": what ct_bgemm runs now. */
const char *ct_bgemm_impl(void);
/* Process-wide override, for tests and benchmarks: 0 = software, 1 = the
 * AVX512_BF16 kernel (software where the CPU lacks it), -1 = choose by the
 * CPU and CT_SIMD (the default). */
void ct_bgemm_force(int impl);

/* One lane of vdpbf16ps, emulated exactly (see above): acc + the products
 * of the bf16 pairs a and b (even element in bits 0-15, odd in 16-31). */
float ct_bf16_dot2(float acc, uint32_t a, uint32_t b);

#endif
