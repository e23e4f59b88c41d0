/* Single-precision matrix products for every layer (linear, attention,
 * convolutions): our own AVX-512 kernel on CPUs that have AVX-512F,
 * OpenBLAS's cblas_sgemm elsewhere.
 *
 * Why our own: (1) a machine may pin OpenBLAS to its AVX2 ("Haswell")
 * kernels through OPENBLAS_CORETYPE (set on some of our machines; we never
 * change it); on a CPU with full-width AVX-512 units that halves the
 * multiply-add rate: measured on this project's AMD EPYC VM, 102 GFLOP/s of
 * AVX2 FMA against 205 of AVX-512 on one core, and OpenBLAS's sgemm at 100.
 * (2) OpenBLAS's bits depend on its thread count and on how C is cut into
 * calls (measured at stop 19 with its Haswell and SkylakeX kernels:
 * tests/unit/test_gemm.c shows the first), so a rank with two threads would
 * compute other weights than two ranks with one. Ours does not.
 *
 *     ct_sgemm(0, 1, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);   // C = A . B^T
 *
 * Contract: cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans,
 * tb ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
 * ldc): C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C, row-major;
 * beta = 0 never reads C. Our kernel sums each element's K products in one
 * fixed order (k ascending, in float, with fused multiply-adds, one
 * rounding per block of up to 384 k), so its results are deterministic,
 * the same on every AVX-512 CPU, and independent of how a caller batches
 * its calls, but differ from OpenBLAS's in the last bits.
 *
 * Which one runs (ct_sgemm_impl) depends on the CPU alone, never on the
 * thread count or the number of ranks: ours when this build has the
 * AVX-512 kernel and the CPU has AVX-512F, else OpenBLAS. (Before stop 19
 * a rank with several threads took OpenBLAS, so 1 rank x 2 threads and 2
 * ranks x 1 thread computed other bits; and OpenBLAS's own AVX-512 kernels
 * were taken where it had them.) ct_sgemm_force() overrides it (audit
 * replay --gemm). Ours runs on the rank's threads (core/pool.h, sized by
 * ct_set_blas_threads): C is cut into slabs of whole rows or columns, one
 * per thread, and each element is summed exactly as with one thread, so 1
 * and k threads give the same bits. OpenBLAS is kept at ONE thread
 * (ct_set_blas_threads), for the reason above: on a CPU without AVX-512 a
 * rank's extra cores do not speed up its products (an AVX2 form of our
 * kernel would; not written yet). CT_SIMD=portable (core/simd.h) does not
 * change the choice: the portable and AVX-512 forms of our other kernels
 * compute the same bits around the same products. Not here: packing for
 * products much larger than the cnn's (the kernel reads the operands in
 * place; see gemm.c). */
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
