/* Single-precision matrix products for every layer (linear, attention,
 * convolutions): our own AVX-512 kernel on CPUs that have AVX-512F,
 * OpenBLAS's cblas_sgemm elsewhere, chosen by the CPU alone (never by the
 * thread or rank count; ct_sgemm_force overrides, for audit replay --gemm).
 * Ours sums each element in one fixed order on any number of threads, so
 * its bits do not depend on threads or on how a caller cuts its calls;
 * OpenBLAS's do, so it always runs one thread. Why, and the measurements:
 * docs/performance.md.
 *
 *     ct_sgemm(0, 1, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);   // C = A . B^T
 *
 * Contract: cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
 * tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
 * ldc): C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C, row-major;
 * beta = 0 never reads C. Our kernel sums each element's K products with
 * k ascending, in float, with fused multiply-adds, one rounding per block
 * of up to 384 k: deterministic and the same on every AVX-512 CPU, but
 * different from OpenBLAS's in the last bits. It runs on the rank's threads
 * (core/threadpool.h, sized by ct_set_blas_threads), C cut into slabs of whole
 * rows or columns, so 1 and k threads give the same bits. CT_SIMD=portable
 * (core/simd.h) does not change the choice. */
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
/* The threads it runs on (OpenBLAS: always 1, see above). */
int ct_sgemm_threads(void);

/* The peak the model FLOP utilization (MFU) is measured against: the rate
 * of the layers' products themselves (ct_gemm: ct_sgemm in fp32, the bf16
 * kernel in bf16, see below), the kernel and threads training uses on this
 * rank's cores, on a square product that fits in L2 (CT_SGEMM_PEAK_N^3: one K
 * block of our kernel; 113 MFLOP), C = A . B, the best of a few timed
 * repetitions after a warm-up. About 30 ms at 200 GFLOP/s; never more than
 * about a second however slow the kernel (the repetitions stop early). */
#define CT_SGEMM_PEAK_N 384
struct ct_sgemm_peak {
    double gflops;      /* 2 M N K / the best repetition's seconds, 1e9 FLOP/s */
    const char *kernel; /* ct_gemm_impl() at the time */
    int threads;        /* ct_gemm_threads() at the time */
    int n;              /* M = N = K */
};
/* CT_ENOMEM when the operands cannot be allocated. */
int ct_sgemm_peak_probe(struct ct_sgemm_peak *out);

/* For tests of the FLOP counts (nn/module.h): while set, every ct_gemm
 * call (the layers' products, either precision; not the peak probe's) adds
 * its M x N x K multiply-adds to *counter (from the calling thread; not for
 * concurrent callers). NULL turns it off. */
void ct_sgemm_count_macs(double *counter);
/* The counter now set (NULL when off): a kernel that computes a product
 * again (nn/convblock.c recomputes small convolutions) turns counting off
 * around it and back on with this, so that only the model's FLOPs count. */
double *ct_sgemm_mac_counter(void);

/* Process-wide override of the choice, for tests and benchmarks: 0 =
 * OpenBLAS, 1 = ours (OpenBLAS where the CPU lacks AVX-512F), -1 = choose
 * as above (the default). */
void ct_sgemm_force(int impl);

/* The precision of the layers' products (train.precision): every matrix
 * product of src/nn (linear, the convolutions' im2col products, attention,
 * the tied embedding head), forward and backward, goes through ct_gemm,
 * which runs ct_sgemm in fp32 and ct_bgemm (core/bgemm.h: bf16 operands,
 * float sums) in bf16. Process-wide: a session sets it from its config
 * before building anything (train/session.c); fp32 until then. Enum values
 * are append-only; ct_precision_names is NULL-terminated. */
enum ct_precision { CT_PRECISION_FP32, CT_PRECISION_BF16, CT_PRECISION_COUNT };
extern const char *const ct_precision_names[CT_PRECISION_COUNT + 1];
void ct_gemm_set_precision(int precision);
int ct_gemm_precision(void);
void ct_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc);
/* What ct_gemm runs now, for run records: ct_sgemm_impl() in fp32,
 * ct_bgemm_impl() ("ctrain-avx512bf16", "software-bf16") in bf16; and on
 * how many threads. */
const char *ct_gemm_impl(void);
int ct_gemm_threads(void);

#endif
