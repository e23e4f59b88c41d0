/* Matrix products: OpenBLAS, or our AVX-512 kernel (see gemm.h).
 *
 * Dims legend: M, N, K as in C (M, N) = op(A) (M, K) op(B) (K, N); MR x NR
 * = one register tile of C (8 rows x 32 columns = 16 zmm accumulators);
 * kc, nc = one block of K and of N.
 *
 * The kernel: for each 8 x 32 tile of C, for k in the block, two vector
 * loads of op(B)'s row k (32 columns), eight broadcasts of op(A)'s column k
 * (8 rows), sixteen fused multiply-adds. It reads A and B where they lie:
 * op(A) through two strides (a row of A or a column of A^T, whichever
 * op(A) is: a broadcast does not care), op(B)'s rows are contiguous when B
 * is not transposed; a transposed B is copied once per block into a
 * thread-local buffer (kc, nc) so that its rows are. No other packing: the
 * products this serves (the cnn's convolutions, (64, 289) x (289, 196) and
 * the like) fit in L2 as they are, and packing them cost more than it saved
 * (OpenBLAS spends 11% of the cnn's step packing). Loop order: K blocks,
 * N blocks (the B block stays in L2), tiles along M (the 8-row slice of A
 * stays in L1), tiles along N. Ragged edges: a last tile of at most 16
 * columns runs one vector wide; columns past N are masked (loaded as zero,
 * never stored); rows past M repeat the last row's address and are not
 * stored.
 */
#include "core/gemm.h"

#include <cblas.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/bgemm.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/gemm_common.h"
#include "core/threadpool.h"
#include "core/simd.h"

void ct_sgemm_blas(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void ct_sgemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    const struct ct__gemm_args a = {trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C};
    ct__gemm_ref(&a, NULL);
}

/* Block sizes: KC k per block (the A slice of a tile, 8 x 384 floats, is
 * 12 KiB of L1); at most NC_FLOATS floats of op(B) per block (256 KiB, in
 * L2). A K of up to KC runs as one block; a longer one is cut into equal
 * blocks (a 289-deep product is not split into 256 + 33). */
enum { MR = CT__GEMM_MR, NR = 32, KC = 384, NC_FLOATS = 64 * 1024 };

#if CT_HAVE_AVX512_KERNELS
#include <immintrin.h>

/* One tile: c (mr <= 8, nr <= 16 nv) = alpha * sum_k a(i, k) b(k, j) +
 * beta * c, a(i, k) = a[i * ais + k * aks], b(k, j) = b[k * ldb + j].
 * Inlined into tile_2v and tile_1v with nv constant. */
CT_TARGET_AVX512
static inline __attribute__((always_inline)) void tile(int nv, int kc, const float *a,
                                                       ptrdiff_t ais, ptrdiff_t aks,
                                                       const float *b, ptrdiff_t ldb, float *c,
                                                       ptrdiff_t ldc, int mr, int nr, float alpha,
                                                       float beta)
{
    const __mmask16 m0 = ct__gemm_lanes(nr), m1 = nv == 2 ? ct__gemm_lanes(nr - 16) : 0;
    const float *ar[MR];
    for (int i = 0; i < MR; i++)
        ar[i] = a + (ptrdiff_t)(i < mr ? i : mr - 1) * ais;
    __m512 acc[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int k = 0; k < kc; k++) {
        const float *bk = b + (ptrdiff_t)k * ldb;
        const ptrdiff_t ak = (ptrdiff_t)k * aks;
        const __m512 b0 = _mm512_maskz_loadu_ps(m0, bk);
        const __m512 b1 = nv == 2 ? _mm512_maskz_loadu_ps(m1, bk + 16) : b0;
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const __m512 av = _mm512_set1_ps(ar[i][ak]);
            acc[i][0] = _mm512_fmadd_ps(av, b0, acc[i][0]);
            if (nv == 2)
                acc[i][1] = _mm512_fmadd_ps(av, b1, acc[i][1]);
        }
    }
    ct__gemm_tile_store(nv, acc, c, ldc, mr, nr, alpha, beta);
}

CT_TARGET_AVX512
static void tile_2v(int kc, const float *a, ptrdiff_t ais, ptrdiff_t aks, const float *b,
                    ptrdiff_t ldb, float *c, ptrdiff_t ldc, int mr, int nr, float alpha, float beta)
{
    tile(2, kc, a, ais, aks, b, ldb, c, ldc, mr, nr, alpha, beta);
}

CT_TARGET_AVX512
static void tile_1v(int kc, const float *a, ptrdiff_t ais, ptrdiff_t aks, const float *b,
                    ptrdiff_t ldb, float *c, ptrdiff_t ldc, int mr, int nr, float alpha, float beta)
{
    tile(1, kc, a, ais, aks, b, ldb, c, ldc, mr, nr, alpha, beta);
}

/* The transposed-B buffer of this thread, NC_FLOATS floats, made on first use. */
static _Thread_local float *bt_buf;

static float *bt_buffer(void)
{
    if (!bt_buf)
        bt_buf = aligned_alloc(64, NC_FLOATS * sizeof(float));
    return bt_buf;
}

/* bt (kc, nc) = rows [j0, j0 + nc) x columns [k0, k0 + kc) of B, transposed,
 * in 16 x 16 squares (in registers; element by element at the ragged
 * edges). A scalar transposition took a third of the time of the cnn's
 * weight-gradient products. */
CT_TARGET_AVX512
static void transpose_block(float *restrict bt, const float *restrict B, int ldb, int k0, int kc,
                            int j0, int nc)
{
    for (int jj = 0; jj < nc; jj += 16)
        for (int kk = 0; kk < kc; kk += 16) {
            const int jn = nc - jj < 16 ? nc - jj : 16, kn = kc - kk < 16 ? kc - kk : 16;
            const float *src = B + (size_t)(j0 + jj) * ldb + k0 + kk;
            float *dst = bt + (size_t)kk * nc + jj;
            if (jn == 16 && kn == 16) {
                ct__transpose16x16_u32((const uint32_t *)src, ldb, (uint32_t *)dst, nc);
                continue;
            }
            for (int j = 0; j < jn; j++)
                for (int k = 0; k < kn; k++)
                    dst[(size_t)k * nc + j] = src[(size_t)j * ldb + k];
        }
}

static int own_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                    int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    float *bt = NULL;
    if (trans_b && !(bt = bt_buffer()))
        return -1;
    const ptrdiff_t ais = trans_a ? 1 : lda, aks = trans_a ? lda : 1;
    const int kblocks = (K + KC - 1) / KC;
    const int kc_max = (K + kblocks - 1) / kblocks;
    /* Columns per block: a whole number of tiles whose kc_max x nc floats
     * fit the buffer (at least one tile: kc_max * NR <= NC_FLOATS). */
    int nc_max = NC_FLOATS / kc_max / NR * NR;
    if (nc_max > N)
        nc_max = N;
    for (int k0 = 0; k0 < K; k0 += kc_max) {
        const int kc = K - k0 < kc_max ? K - k0 : kc_max;
        const float bk = k0 == 0 ? beta : 1.0f;
        for (int j0 = 0; j0 < N; j0 += nc_max) {
            const int nc = N - j0 < nc_max ? N - j0 : nc_max;
            const float *bb;
            ptrdiff_t ldbb;
            if (trans_b) {
                transpose_block(bt, B, ldb, k0, kc, j0, nc);
                bb = bt;
                ldbb = nc;
            } else {
                bb = B + (size_t)k0 * ldb + j0;
                ldbb = ldb;
            }
            for (int i0 = 0; i0 < M; i0 += MR) {
                const int mr = M - i0 < MR ? M - i0 : MR;
                const float *ai = A + i0 * ais + k0 * aks;
                float *ci = C + (size_t)i0 * ldc + j0;
                for (int j = 0; j < nc; j += NR) {
                    const int nr = nc - j < NR ? nc - j : NR;
                    if (nr > 16)
                        tile_2v(kc, ai, ais, aks, bb + j, ldbb, ci + j, ldc, mr, nr, alpha, bk);
                    else
                        tile_1v(kc, ai, ais, aks, bb + j, ldbb, ci + j, ldc, mr, nr, alpha, bk);
                }
            }
        }
    }
    return 0;
}

/* A slab of the threaded product (core/gemm_common.h: ct__gemm_run_slabs),
 * computed by own_gemm as a product of its own. An element's sum runs over
 * the same K blocks in the same order whichever slab, tile or vector width
 * it falls in (see tile()), so any cut gives the bits of one thread. */
static int gemm_slab(void *ctx, const struct ct__gemm_args *a)
{
    (void)ctx;
    return own_gemm(a->trans_a, a->trans_b, a->M, a->N, a->K, a->alpha, a->A, a->lda, a->B, a->ldb,
                    a->beta, a->C, a->ldc);
}

/* No transposition buffer for this thread (out of memory). */
static void gemm_slab_blas(void *ctx, const struct ct__gemm_args *a)
{
    (void)ctx;
    ct_sgemm_blas(a->trans_a, a->trans_b, a->M, a->N, a->K, a->alpha, a->A, a->lda, a->B, a->ldb,
                  a->beta, a->C, a->ldc);
}
#endif

int ct_sgemm_own_available(void) { return ct_simd_cpu_avx512(); }

void ct_sgemm_own(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
#if CT_HAVE_AVX512_KERNELS
    if (M > 0 && N > 0 && K > 0) {
        const struct ct__gemm_args a = {trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta,
                                        A, B, C};
        ct__gemm_run_slabs(&a, gemm_slab, gemm_slab_blas, NULL);
        return;
    }
#endif
    /* Empty products (C = beta C), or no AVX-512. */
    ct_sgemm_blas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* -1: choose (see gemm.h); 0: OpenBLAS; 1: ours (where the CPU can). */
static atomic_int forced = -1;

void ct_sgemm_force(int impl) { atomic_store(&forced, impl < 0 ? -1 : impl != 0); }

static int use_own(void)
{
    const int f = atomic_load_explicit(&forced, memory_order_relaxed);
    return f != 0 && ct_sgemm_own_available();
}

const char *ct_sgemm_impl(void) { return use_own() ? "ctrain-avx512" : "openblas"; }

int ct_sgemm_threads(void) { return use_own() ? ct_threadpool_threads() : 1; }

static double *mac_counter;

void ct_sgemm_count_macs(double *counter) { mac_counter = counter; }

double *ct_sgemm_mac_counter(void) { return mac_counter; }

void ct_sgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc)
{
    if (use_own())
        ct_sgemm_own(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        ct_sgemm_blas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* Repetitions of the probe: each times PEAK_CALLS products, the best one
 * counts (the least disturbed by the other processes on the core). */
#define PEAK_REPS 7
#define PEAK_CALLS 4
#define PEAK_BUDGET_S 1.0

int ct_sgemm_peak_probe(struct ct_sgemm_peak *out)
{
    const int n = CT_SGEMM_PEAK_N;
    const size_t bytes = (size_t)n * n * sizeof(float);
    float *a = aligned_alloc(64, bytes), *b = aligned_alloc(64, bytes), *c = aligned_alloc(64, bytes);
    if (!a || !b || !c) {
        free(a);
        free(b);
        free(c);
        return ct_error_set(CT_ENOMEM, "gemm peak probe: out of memory for three %dx%d matrices", n, n);
    }
    /* Small values of both signs: no overflow, no denormals. */
    for (size_t i = 0; i < (size_t)n * n; i++) {
        a[i] = (float)((int)(i % 17) - 8) * 0.0625f;
        b[i] = (float)((int)(i % 13) - 6) * 0.0625f;
    }
    double *counter = mac_counter;
    mac_counter = NULL;
    ct_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n); /* warm-up: caches, pool threads */
    double best = INFINITY, start = ct_now_s();
    for (int r = 0; r < PEAK_REPS; r++) {
        double t0 = ct_now_s();
        for (int k = 0; k < PEAK_CALLS; k++)
            ct_gemm(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n);
        double t = (ct_now_s() - t0) / PEAK_CALLS;
        best = t < best ? t : best;
        if (ct_now_s() - start > PEAK_BUDGET_S)
            break;
    }
    free(a);
    free(b);
    free(c);
    mac_counter = counter;
    *out = (struct ct_sgemm_peak){.gflops = 2.0 * n * n * n / (best > 0 ? best : 1e-9) / 1e9,
                                  .kernel = ct_gemm_impl(), .threads = ct_gemm_threads(), .n = n};
    return 0;
}

const char *const ct_precision_names[CT_PRECISION_COUNT + 1] = {"fp32", "bf16", NULL};

static atomic_int precision = CT_PRECISION_FP32;

void ct_gemm_set_precision(int p)
{
    atomic_store(&precision, p == CT_PRECISION_BF16 ? CT_PRECISION_BF16 : CT_PRECISION_FP32);
}

int ct_gemm_precision(void) { return atomic_load_explicit(&precision, memory_order_relaxed); }

void ct_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
             const float *B, int ldb, float beta, float *C, int ldc)
{
    if (mac_counter)
        *mac_counter += (double)M * N * K;
    if (ct_gemm_precision() == CT_PRECISION_BF16)
        ct_bgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        ct_sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

const char *ct_gemm_impl(void)
{
    return ct_gemm_precision() == CT_PRECISION_BF16 ? ct_bgemm_impl() : ct_sgemm_impl();
}

int ct_gemm_threads(void)
{
    return ct_gemm_precision() == CT_PRECISION_BF16 ? ct_threadpool_threads() : ct_sgemm_threads();
}
