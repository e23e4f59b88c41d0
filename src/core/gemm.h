/* Single-precision matrix products for the convolutions: OpenBLAS's
 * cblas_sgemm, or our own AVX-512 kernel where OpenBLAS would run narrower
 * kernels than the CPU has.
 *
 * Why our own: a machine may pin OpenBLAS to its AVX2 ("Haswell") kernels
 * through OPENBLAS_CORETYPE (set on some of our machines because older
 * OpenBLAS builds misbehave on their CPUs; we never change it). On a CPU
 * with full-width AVX-512 units that halves the multiply-add rate: measured
 * on this project's AMD EPYC VM, 102 GFLOP/s of AVX2 FMA against 205 of
 * AVX-512 on one core, and OpenBLAS's sgemm at 100. ct_sgemm then runs a
 * register-tiled AVX-512 kernel of ours instead.
 *
 *     ct_sgemm(0, 1, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);   // C = A . B^T
 *
 * Contract: cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
 * tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
 * ldc): C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C, row-major;
 * beta = 0 never reads C. Our kernel sums each element's K products in one
 * fixed order (k ascending, in float, with fused multiply-adds, one
 * rounding per block of up to 384 k), so its results are deterministic and
 * independent of how a caller batches its calls, but differ from
 * OpenBLAS's in the last bits.
 *
 * Which one runs (ct_sgemm_impl): ours when this build has the AVX-512
 * kernel and the CPU has AVX-512F, OpenBLAS runs one thread (ours is
 * single-threaded: a rank that owns several cores keeps OpenBLAS's
 * threads), and OpenBLAS's kernels are not AVX-512 ones already (core name
 * Haswell, Zen, Prescott, ...: not SkylakeX, Cooperlake or SapphireRapids).
 * The choice is made per call, so it follows ct_set_blas_threads().
 * CT_SIMD=portable (core/simd.h) does not change it: the portable and
 * AVX-512 forms of our other kernels compute the same bits around the same
 * products. Not here: threads of our own, packing for products much larger
 * than the cnn's (the kernel reads the operands in place; see gemm.c). */
#ifndef CT_CORE_GEMM_H
#define CT_CORE_GEMM_H

void ct_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc);

/* The same contract, always through our kernel (CPUs with AVX-512F only:
 * callers check ct_sgemm_own_available()) or always through OpenBLAS; for
 * tests and benchmarks. */
int ct_sgemm_own_available(void);
void ct_sgemm_own(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc);
void ct_sgemm_blas(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* The naive reference: a triple loop accumulating in double. */
void ct_sgemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc);

/* "ctrain-avx512" or "openblas": what ct_sgemm runs now, for run records. */
const char *ct_sgemm_impl(void);

/* Process-wide override of the choice, for tests and benchmarks: 0 =
 * OpenBLAS, 1 = ours (OpenBLAS where the CPU lacks AVX-512F), -1 = choose
 * as above (the default). */
void ct_sgemm_force(int impl);

#endif
