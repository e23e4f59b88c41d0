/* bf16 matrix products (train.precision = bf16): the ct_sgemm contract
 * (core/gemm.h), but each operand element is first rounded from float to
 * bfloat16 (round to nearest, ties to even; core/bf16.h's
 * ct_bf16_from_f32_daz) and the products are summed in float. Parameters,
 * gradients and everything else stay float.
 *
 *     ct_bgemm(0, 1, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);   // C = A . B^T in bf16
 *
 * Two implementations that compute the same bits (tests/unit/test_bgemm.c):
 * "ctrain-avx512bf16", the AVX512_BF16 instruction vdpbf16ps, chosen at run
 * time where cpuid has it (target attributes: the binary stays baseline
 * x86-64), and "software-bf16", portable C that emulates the instruction
 * lane by lane (ct_bf16_dot2), elsewhere or with CT_SIMD=portable: slow,
 * the documented reference. Every element of C is summed in one fixed order
 * (K in equal even blocks of at most 512, pairs (k + 1, k) ascending), so
 * the bits depend neither on threads nor on how a caller cuts C. The exact
 * semantics of the instruction and the error bound against fp32:
 * docs/models.md. */
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

/* One lane of vdpbf16ps, emulated exactly (docs/models.md): acc + the products
 * of the bf16 pairs a and b (even element in bits 0-15, odd in 16-31). */
float ct_bf16_dot2(float acc, uint32_t a, uint32_t b);

#endif
