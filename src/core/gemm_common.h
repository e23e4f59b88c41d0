/* Internals shared by the fp32 and bf16 matrix products (core/gemm.c,
 * core/bgemm.c): the cut of C into slabs for the pool's threads, the store
 * of a register tile, the 16 x 16 transposition (nn/conv2d.c uses it too),
 * the empty product and the naive reference. Defined here (inline) and in
 * core/gemm_common.c. Not installed.
 *
 * Both kernels include this and nothing of each other's, except that
 * gemm.c's precision dispatch (ct_gemm) calls bgemm.h: the bf16 kernel
 * never calls the fp32 one. This sits below both.
 *
 *     struct ct__gemm_args a = {ta, tb, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C};
 *     ct__gemm_run_slabs(&a, my_slab, my_fallback, &ctx);   // each slab: one product
 */
#ifndef CT_CORE_GEMM_COMMON_H
#define CT_CORE_GEMM_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "core/simd.h"

/* Rows of a register tile (both kernels: 8 rows x 32 columns), and the
 * columns of a slab's unit when C is cut by columns. */
#define CT__GEMM_MR 8
#define CT__GEMM_NCUT 16

/* One product, as ct_sgemm takes it (core/gemm.h): C (M, N) = alpha
 * op(A) op(B) + beta C. */
struct ct__gemm_args {
    int trans_a, trans_b, M, N, K, lda, ldb, ldc;
    float alpha, beta;
    const float *A, *B;
    float *C;
};

/* Computes the product `a` (one slab of the caller's); returns < 0 when it
 * cannot (no memory for its thread's buffers). */
typedef int ct__gemm_slab_fn(void *ctx, const struct ct__gemm_args *a);
/* The same bits without buffers: what a slab runs when the kernel cannot. */
typedef void ct__gemm_fallback_fn(void *ctx, const struct ct__gemm_args *a);

/* The threaded product (M, N, K > 0): C cut into slabs of whole row tiles
 * (multiples of CT__GEMM_MR rows) or of whole column groups (multiples of
 * CT__GEMM_NCUT), whichever gives more units, one per thread of the pool
 * (core/threadpool.h; products under 256 Ki multiply-adds on the calling
 * thread alone: handing out a part costs about a microsecond). Each slab is
 * a product of its own through `slab`, or `fallback` where that fails. A
 * kernel that sums each element the same way whichever slab, tile or
 * vector width it falls in gets the bits of one thread from any cut. */
void ct__gemm_run_slabs(const struct ct__gemm_args *a, ct__gemm_slab_fn *slab,
                        ct__gemm_fallback_fn *fallback, void *ctx);

/* C = beta C (M, N), the product of an empty sum (K = 0), through OpenBLAS
 * exactly as ct_sgemm(0, 0, M, N, 0, ...) runs it (beta = 0 writes zeros),
 * so that both precisions give the same bits for it. */
void ct__gemm_empty(int M, int N, float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc);

/* The naive references (ct_sgemm_ref, ct_bgemm_ref): a triple loop that
 * sums in double, each operand element through `round` first (NULL: as it
 * is). */
void ct__gemm_ref(const struct ct__gemm_args *a, float (*round)(float));

#if CT_HAVE_AVX512_KERNELS
#include <immintrin.h>

/* dst rows 0..15 (ldd words apart) = columns 0..15 of the 16 rows of src
 * (lds words apart), 32-bit words moved as they are: the fp32 product
 * transposes floats with it, the bf16 one pairs of bf16. Four rounds of lane
 * shuffles (pairs of words, pairs of double words, then 128-bit quarters
 * twice) in registers. AVX-512F: call it only where ct_sgemm_impl or the
 * bf16 dispatch has chosen an AVX-512 path. */
CT_TARGET_AVX512
void ct__transpose16x16_u32(const uint32_t *restrict src, ptrdiff_t lds, uint32_t *restrict dst,
                            ptrdiff_t ldd);

/* The first n of 16 lanes (none for n <= 0). */
static inline __mmask16 ct__gemm_lanes(int n)
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* The store of a register tile: rows i < mr (<= 8) of c (ldc floats apart),
 * the first nr (<= 16 nv) columns, c = alpha * acc[i][v] + beta * c (one
 * rounding for the product, one fused multiply-add for beta c; beta = 0
 * never reads c). Both kernels' tiles end here, so the fp32 and bf16
 * products round their sums into C alike. Inlined with nv constant. */
CT_TARGET_AVX512
static inline __attribute__((always_inline)) void ct__gemm_tile_store(int nv, __m512 acc[][2],
                                                                      float *c, ptrdiff_t ldc,
                                                                      int mr, int nr, float alpha,
                                                                      float beta)
{
    const __mmask16 m0 = ct__gemm_lanes(nr), m1 = nv == 2 ? ct__gemm_lanes(nr - 16) : 0;
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    /* Constant trip counts, fully unrolled: an accumulator indexed by a
     * run-time bound would keep the whole array in memory. */
#pragma GCC unroll 8
    for (int i = 0; i < CT__GEMM_MR; i++) {
        if (i >= mr)
            break;
        float *ci = c + (ptrdiff_t)i * ldc;
#pragma GCC unroll 2
        for (int v = 0; v < nv; v++) {
            const __mmask16 m = v ? m1 : m0;
            __m512 r = _mm512_mul_ps(va, acc[i][v]);
            if (beta != 0.0f)
                r = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m, ci + 16 * v), r);
            _mm512_mask_storeu_ps(ci + 16 * v, m, r);
        }
    }
}
#endif

#endif
