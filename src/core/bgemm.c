/* bf16 matrix products (see bgemm.h): the AVX512_BF16 kernel and its
 * software twin.
 *
 * Dims legend: M, N, K as in C (M, N) = op(A) (M, K) op(B) (K, N); a "pair"
 * = two consecutive k (2p, 2p + 1) as one 32-bit word of two bf16, even k in
 * the low half: the unit vdpbf16ps multiplies; KP = pairs per block; MR x NR
 * = one register tile of C (8 rows x 32 columns, 16 zmm accumulators).
 *
 * Both implementations run the same loops over the same packed panels:
 * for each K block (an even number of k, at most KC), for each block of
 * columns (at most NC_WORDS words of packed B): op(B)'s block is packed
 * into bp (KP rows of pairs, columns padded with zeros to a multiple of
 * 16), after op(A)'s block (8 x KP pairs per tile of 8 rows, for all rows
 * at once: every column block reuses it) into ap; then each 8 x 32 tile of
 * C is summed from zero over the block's pairs and stored as alpha * sum +
 * beta * C. Packing rounds each float once (ct_bf16_from_f32_daz); a
 * missing odd k (odd K), a missing column or a missing row is a zero that
 * is never stored. Only the arithmetic of a tile differs: vdpbf16ps there,
 * ct_bf16_dot2 per lane here. The packing rounds with vcvtne2ps2bf16 for
 * the kernel; for the software path it is written in AVX-512F integer
 * operations where the CPU has it and CT_SIMD does not say portable
 * (core/simd.h), in C elsewhere: the same words (tested).
 *
 * Not here: an AVX-512F form of the software tile (a CPU with AVX-512F but
 * not AVX512_BF16 runs the scalar one, about 100x slower than the kernel).
 */
#include "core/bgemm.h"

#include <float.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/gemm_common.h"
#include "core/simd.h"

/* ------------------------------------------------------------------------ */
/* bf16 rounding and one lane of vdpbf16ps                                  */
/* ------------------------------------------------------------------------ */

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Denormal inputs as zero (of their sign). */
static inline float daz(float x) { return fabsf(x) < FLT_MIN ? copysignf(0.0f, x) : x; }

/* round(c + x y) with results that are tiny after rounding (to 24 bits,
 * exponent unbounded) flushed to a zero of their sign, as the instruction
 * does. fmaf rounds to the denormal grid instead: it agrees except where
 * it returns +-FLT_MIN, which an exact result just below FLT_MIN also
 * gives; then the exact result decides: it is tiny below FLT_MIN - 2^-151
 * (at that point the 24-bit rounding ties to FLT_MIN). x y is exact in
 * double (bf16 products have 16 bits), and so is c -+ that threshold: a
 * result this close to FLT_MIN needs |c| < 2^-100 (any larger c and x y
 * would differ from it by more). */
static inline float fma_ftz(float x, float y, float c)
{
    const float r = fmaf(x, y, c);
    const float m = fabsf(r);
    if (!(m <= FLT_MIN) || r == 0.0f)
        return r;
    if (m < FLT_MIN)
        return copysignf(0.0f, r);
    const double p = (double)x * (double)y, t = (double)FLT_MIN - 0x1p-151;
    const int tiny = r > 0 ? (double)c - t < -p : (double)c + t > -p;
    return tiny ? copysignf(0.0f, r) : r;
}

float ct_bf16_dot2(float acc, uint32_t a, uint32_t b)
{
    const float a0 = daz(float_of(a << 16)), a1 = daz(float_of(a & 0xFFFF0000u));
    const float b0 = daz(float_of(b << 16)), b1 = daz(float_of(b & 0xFFFF0000u));
    acc = fma_ftz(a1, b1, daz(acc));
    return fma_ftz(a0, b0, acc);
}

/* An operand element as the products use it: rounded to bf16, as a float. */
static float round_bf16(float x) { return ct_bf16_to_f32(ct_bf16_from_f32_daz(x)); }

void ct_bgemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    const struct ct__gemm_args a = {trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C};
    ct__gemm_ref(&a, round_bf16);
}

/* ------------------------------------------------------------------------ */
/* Packing                                                                  */
/* ------------------------------------------------------------------------ */

/* KC: k per block (KP = 256 pairs; bp's rows are padded to a multiple of
 * 16 for the 16 x 16 transposition); NC_WORDS: words of packed B per block
 * (256 KiB, in L2). The A tile, 8 x 256 words (8 KiB), stays in L1. */
enum { MR = CT__GEMM_MR, NR = 32, KC = 512, KP_MAX = KC / 2, NC_WORDS = 64 * 1024 };

struct panels {
    uint32_t *bp;     /* (KP_MAX, nc padded to 16) */
    uint32_t *ap;     /* per tile of 8 rows: (MR, KP_MAX) or (KP_MAX, MR) */
    size_t ap_tiles;  /* tiles ap holds */
};

/* This thread's panels, made on first use and grown to the most rows a
 * product of this thread has had (the pool's threads live as long as the
 * process). */
static _Thread_local struct panels tl_panels;

static int panels(struct panels **out, int M)
{
    struct panels *p = &tl_panels;
    const size_t tiles = ((size_t)M + MR - 1) / MR;
    if (!p->bp)
        p->bp = aligned_alloc(64, NC_WORDS * sizeof(uint32_t));
    if (p->ap_tiles < tiles) {
        free(p->ap);
        p->ap = aligned_alloc(64, tiles * MR * KP_MAX * sizeof(uint32_t));
        p->ap_tiles = p->ap ? tiles : 0;
    }
    *out = p;
    return p->bp && p->ap ? 0 : -1;
}

/* One pair from two floats: lo -> bits 0-15, hi -> bits 16-31. */
static inline uint32_t pair_of(float lo, float hi)
{
    return (uint32_t)ct_bf16_from_f32_daz(lo) | (uint32_t)ct_bf16_from_f32_daz(hi) << 16;
}

/* Where a block's operands come from: op(X)(r, k) = x[r * rs + k * ks] for
 * k < kc (zero past it: the odd element of an odd block's last pair). */
struct src {
    const float *x;
    ptrdiff_t rs, ks;
    int kc;
};

static inline float at(const struct src *s, int r, int k)
{
    return k < s->kc ? s->x[r * s->rs + k * s->ks] : 0.0f;
}

/* The portable packers. bp (kp, ldp) = pairs of op(B) columns [0, nc)
 * (zero columns up to ldp); ap = pairs of op(A) rows [0, mr), layout
 * ap[i * ais + p * aks]. */
static void pack_b_c(uint32_t *bp, ptrdiff_t ldp, const struct src *b, int kp, int nc)
{
    for (int p = 0; p < kp; p++)
        for (int j = 0; j < ldp; j++)
            bp[p * ldp + j] = j < nc ? pair_of(at(b, j, 2 * p), at(b, j, 2 * p + 1)) : 0;
}

static void pack_a_c(uint32_t *ap, ptrdiff_t ais, ptrdiff_t aks, const struct src *a, int kp,
                     int mr)
{
    for (int i = 0; i < MR; i++)
        for (int p = 0; p < kp; p++)
            ap[i * ais + p * aks] = i < mr ? pair_of(at(a, i, 2 * p), at(a, i, 2 * p + 1)) : 0;
}

#if CT_HAVE_AVX512_KERNELS
#include <immintrin.h>

/* The first n of 16 lanes (a short name for the packers' macro). */
static inline __mmask16 lanes(int n) { return ct__gemm_lanes(n); }

/* ct_bf16_from_f32_daz on 16 lanes, in the top 16 bits of each (the low
 * 16 bits zero). */
CT_TARGET_AVX512
static inline __m512i round16(__m512i u)
{
    const __m512i abs = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    const __mmask16 zero = _mm512_testn_epi32_mask(u, _mm512_set1_epi32(0x7F800000));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(abs, _mm512_set1_epi32(0x7F800000));
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    __m512i r = _mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb);
    r = _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
    r = _mm512_mask_and_epi32(r, zero, u, _mm512_set1_epi32((int)0x80000000u));
    return _mm512_and_si512(r, _mm512_set1_epi32((int)0xFFFF0000u));
}

/* 16 pairs from two vectors of 16 floats each (lo: even k, hi: odd k). */
CT_TARGET_AVX512
static inline __m512i pairs_interleaved(__m512 lo, __m512 hi)
{
    return _mm512_or_si512(_mm512_srli_epi32(round16(_mm512_castps_si512(lo)), 16),
                           round16(_mm512_castps_si512(hi)));
}

/* 16 pairs from 32 consecutive floats (x[2p], x[2p + 1]), n of them there
 * (zeros past). */
CT_TARGET_AVX512
static inline __m512i pairs_consecutive(const float *x, int n)
{
    __m256i half[2];
    for (int h = 0; h < 2; h++) {
        const __m512 v = _mm512_maskz_loadu_ps(lanes(n - 16 * h), x + 16 * h);
        const __m512i r = _mm512_srli_epi32(round16(_mm512_castps_si512(v)), 16);
        /* 64-bit lane (odd << 32 | even) -> odd << 16 | even in its low half. */
        half[h] = _mm512_cvtepi64_epi32(_mm512_or_si512(r, _mm512_srli_epi64(r, 16)));
    }
    return _mm512_inserti64x4(_mm512_castsi256_si512(half[0]), half[1], 1);
}

/* pack_b_c and pack_a_c in AVX-512, stamped out twice: with the rounding
 * in AVX-512F integer operations (round16; the software path) and with the
 * instruction vcvtne2ps2bf16 (the kernel's; the same words: tested).
 *
 * pack_b: columns contiguous (b->rs == 1): two rows of op(B) interleaved,
 * 16 columns at a time. k contiguous (b->ks == 1, a transposed B): 16
 * columns x 16 pairs converted into a square, then transposed into place
 * (bp has rows for a multiple of 16 pairs).
 * pack_a: the layout ap[i][p] (ais = KP_MAX, aks = 1) when k is contiguous
 * in A, else ap[p][i] (ais = 1, aks = MR). */
#define DEFINE_PACKERS(SUFFIX, TARGET, PAIRS_CONSECUTIVE, PAIRS_INTERLEAVED)                      \
    TARGET static void pack_b_##SUFFIX(uint32_t *bp, ptrdiff_t ldp, const struct src *b, int kp,  \
                                       int nc)                                                    \
    {                                                                                             \
        if (b->rs == 1) {                                                                         \
            for (int p = 0; p < kp; p++) {                                                        \
                const float *r0 = b->x + 2 * p * b->ks, *r1 = r0 + b->ks;                         \
                const int odd = 2 * p + 1 < b->kc;                                                \
                for (int j = 0; j < ldp; j += 16) {                                               \
                    const __mmask16 m = lanes(nc - j);                                            \
                    const __m512 lo = _mm512_maskz_loadu_ps(m, r0 + j);                           \
                    const __m512 hi = odd ? _mm512_maskz_loadu_ps(m, r1 + j) : _mm512_setzero_ps(); \
                    _mm512_storeu_si512(bp + p * ldp + j, PAIRS_INTERLEAVED(lo, hi));             \
                }                                                                                 \
            }                                                                                     \
            return;                                                                               \
        }                                                                                         \
        uint32_t sq[16 * 16] __attribute__((aligned(64)));                                        \
        for (int j = 0; j < ldp; j += 16)                                                         \
            for (int p = 0; p < kp; p += 16) {                                                    \
                for (int jj = 0; jj < 16; jj++) {                                                 \
                    const __m512i w =                                                             \
                        j + jj < nc                                                               \
                            ? PAIRS_CONSECUTIVE(b->x + (j + jj) * b->rs + 2 * p, b->kc - 2 * p)   \
                            : _mm512_setzero_si512();                                             \
                    _mm512_store_si512(sq + 16 * jj, w);                                          \
                }                                                                                 \
                ct__transpose16x16_u32(sq, 16, bp + p * ldp + j, ldp);                            \
            }                                                                                     \
    }                                                                                             \
    TARGET static void pack_a_##SUFFIX(uint32_t *ap, ptrdiff_t ais, ptrdiff_t aks,                \
                                       const struct src *a, int kp, int mr)                       \
    {                                                                                             \
        if (a->ks == 1) {                                                                         \
            for (int i = 0; i < MR; i++)                                                          \
                for (int p = 0; p < kp; p += 16) {                                                \
                    const __m512i w = i < mr ? PAIRS_CONSECUTIVE(a->x + i * a->rs + 2 * p,        \
                                                                 a->kc - 2 * p)                   \
                                             : _mm512_setzero_si512();                            \
                    _mm512_mask_storeu_epi32(ap + i * ais + p, lanes(kp - p), w);                 \
                }                                                                                 \
            return;                                                                               \
        }                                                                                         \
        const __mmask16 m = lanes(mr);                                                            \
        for (int p = 0; p < kp; p++) {                                                            \
            const float *r0 = a->x + 2 * p * a->ks, *r1 = r0 + a->ks;                             \
            const __m512 lo = _mm512_maskz_loadu_ps(m, r0);                                       \
            const __m512 hi =                                                                     \
                2 * p + 1 < a->kc ? _mm512_maskz_loadu_ps(m, r1) : _mm512_setzero_ps();           \
            _mm512_mask_storeu_epi32(ap + p * aks, (__mmask16)0xFF, PAIRS_INTERLEAVED(lo, hi));   \
        }                                                                                         \
    }

DEFINE_PACKERS(avx512, CT_TARGET_AVX512, pairs_consecutive, pairs_interleaved)

#define CT_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))

/* The same pairs through vcvtne2ps2bf16 (b's lanes in the low words). */
CT_TARGET_AVX512BF16
static inline __m512i hw_pairs_consecutive(const float *x, int n)
{
    const __m512 lo = _mm512_maskz_loadu_ps(lanes(n), x);
    const __m512 hi = _mm512_maskz_loadu_ps(lanes(n - 16), x + 16);
    return (__m512i)_mm512_cvtne2ps_pbh(hi, lo);
}

/* Words lo0..lo15 hi0..hi15 -> lo0 hi0 lo1 hi1 ... */
static const uint16_t interleave_words[32] __attribute__((aligned(64))) = {
    0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23,
    8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};

CT_TARGET_AVX512BF16
static inline __m512i hw_pairs_interleaved(__m512 lo, __m512 hi)
{
    return _mm512_permutexvar_epi16(_mm512_load_si512(interleave_words),
                                     (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
}

DEFINE_PACKERS(hw, CT_TARGET_AVX512BF16, hw_pairs_consecutive, hw_pairs_interleaved)
#endif

/* ------------------------------------------------------------------------ */
/* Tiles                                                                    */
/* ------------------------------------------------------------------------ */

/* One tile: c (mr <= 8, nr <= 32) = alpha * sum over kp pairs + beta * c,
 * from ap[i * ais + p * aks] and bp[p * ldp + j] (32 columns there, zeros
 * past nr). */
typedef void tile_fn(int kp, const uint32_t *ap, ptrdiff_t ais, ptrdiff_t aks, const uint32_t *bp,
                     ptrdiff_t ldp, float *c, ptrdiff_t ldc, int mr, int nr, float alpha,
                     float beta);

/* The software tile: every lane as the instruction computes it, then the
 * store of the AVX-512 tile (one rounding for alpha * sum, one fused
 * multiply-add for beta * c). */
static void tile_soft(int kp, const uint32_t *ap, ptrdiff_t ais, ptrdiff_t aks, const uint32_t *bp,
                      ptrdiff_t ldp, float *c, ptrdiff_t ldc, int mr, int nr, float alpha,
                      float beta)
{
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++) {
            float acc = 0.0f;
            for (int p = 0; p < kp; p++)
                acc = ct_bf16_dot2(acc, ap[i * ais + p * aks], bp[p * ldp + j]);
            float *cij = c + i * ldc + j;
            float r = alpha * acc;
            if (beta != 0.0f)
                r = fmaf(beta, *cij, r);
            *cij = r;
        }
}

#if CT_HAVE_AVX512_KERNELS

/* nv vectors of 16 columns (1 or 2), inlined with nv constant. */
CT_TARGET_AVX512BF16
static inline __attribute__((always_inline)) void tile_bf16(int nv, int kp, const uint32_t *ap,
                                                            ptrdiff_t ais, ptrdiff_t aks,
                                                            const uint32_t *bp, ptrdiff_t ldp,
                                                            float *c, ptrdiff_t ldc, int mr,
                                                            int nr, float alpha, float beta)
{
    __m512 acc[MR][2];
#pragma GCC unroll 8
    for (int i = 0; i < MR; i++)
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (int p = 0; p < kp; p++) {
        const uint32_t *bk = bp + p * ldp;
        const __m512bh b0 = (__m512bh)_mm512_loadu_si512(bk);
        const __m512bh b1 = nv == 2 ? (__m512bh)_mm512_loadu_si512(bk + 16) : b0;
        const uint32_t *ak = ap + p * aks;
#pragma GCC unroll 8
        for (int i = 0; i < MR; i++) {
            const __m512bh av = (__m512bh)_mm512_set1_epi32((int)ak[i * ais]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
            if (nv == 2)
                acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
        }
    }
    ct__gemm_tile_store(nv, acc, c, ldc, mr, nr, alpha, beta);
}

CT_TARGET_AVX512BF16
static void tile_hw(int kp, const uint32_t *ap, ptrdiff_t ais, ptrdiff_t aks, const uint32_t *bp,
                    ptrdiff_t ldp, float *c, ptrdiff_t ldc, int mr, int nr, float alpha, float beta)
{
    if (nr > 16)
        tile_bf16(2, kp, ap, ais, aks, bp, ldp, c, ldc, mr, nr, alpha, beta);
    else
        tile_bf16(1, kp, ap, ais, aks, bp, ldp, c, ldc, mr, nr, alpha, beta);
}
#endif

/* ------------------------------------------------------------------------ */
/* Blocks, slabs, threads                                                   */
/* ------------------------------------------------------------------------ */

/* k per block: K cut into equal blocks of at most KC, rounded up to even
 * (the last block takes what is left: it is shorter or odd only there). */
static int kblock(int K)
{
    const int kblocks = (K + KC - 1) / KC;
    const int kc = (K + kblocks - 1) / kblocks;
    return kc + (kc & 1);
}

void ct__bgemm_direct(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                      int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    const int kc_max = kblock(K);
    for (int k0 = 0; k0 < K; k0 += kc_max) {
        const int kc = K - k0 < kc_max ? K - k0 : kc_max;
        const float bk = k0 == 0 ? beta : 1.0f;
        const struct src as = {A + k0 * (trans_a ? (ptrdiff_t)lda : 1), trans_a ? 1 : lda,
                               trans_a ? lda : 1, kc};
        const struct src bs = {B + k0 * (trans_b ? 1 : (ptrdiff_t)ldb), trans_b ? ldb : 1,
                               trans_b ? 1 : ldb, kc};
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float acc = 0.0f;
                for (int k = 0; k < kc; k += 2)
                    acc = ct_bf16_dot2(acc, pair_of(at(&as, i, k), at(&as, i, k + 1)),
                                       pair_of(at(&bs, j, k), at(&bs, j, k + 1)));
                float *cij = C + (size_t)i * ldc + j;
                float r = alpha * acc;
                if (bk != 0.0f)
                    r = fmaf(bk, *cij, r);
                *cij = r;
            }
    }
}

static int own_bgemm(int hw, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const float *A, int lda, const float *B, int ldb, float beta, float *C,
                     int ldc)
{
    struct panels *pn;
    if (panels(&pn, M) < 0)
        return -1;
    tile_fn *tile = tile_soft;
    int vec = 0;
#if CT_HAVE_AVX512_KERNELS
    if (hw)
        tile = tile_hw;
    vec = hw || ct_simd_avx512();
#else
    (void)hw;
#endif
    const ptrdiff_t ars = trans_a ? 1 : lda, aks_src = trans_a ? lda : 1;
    const ptrdiff_t brs = trans_b ? ldb : 1, bks_src = trans_b ? 1 : ldb;
    /* Packed A: pairs along a row where A's k is contiguous, else 8 rows
     * per pair (each packer writes what it reads in order). */
    const ptrdiff_t ais = aks_src == 1 ? KP_MAX : 1, aks = aks_src == 1 ? 1 : MR;
    const int kc_max = kblock(K);
    const int kp_max = kc_max / 2, kp_rows = (kp_max + 15) / 16 * 16;
    int nc_max = NC_WORDS / kp_rows / NR * NR;
    if (nc_max > (N + 15) / 16 * 16)
        nc_max = (N + 15) / 16 * 16;
    for (int k0 = 0; k0 < K; k0 += kc_max) {
        const int kc = K - k0 < kc_max ? K - k0 : kc_max, kp = (kc + 1) / 2;
        const float bk = k0 == 0 ? beta : 1.0f;
        /* All of this block's op(A), once: the column blocks reuse it. */
        for (int i0 = 0; i0 < M; i0 += MR) {
            const int mr = M - i0 < MR ? M - i0 : MR;
            const struct src as = {A + i0 * ars + k0 * aks_src, ars, aks_src, kc};
            uint32_t *ap = pn->ap + (size_t)i0 * KP_MAX;
#if CT_HAVE_AVX512_KERNELS
            if (hw)
                pack_a_hw(ap, ais, aks, &as, kp, mr);
            else if (vec)
                pack_a_avx512(ap, ais, aks, &as, kp, mr);
            else
#endif
                pack_a_c(ap, ais, aks, &as, kp, mr);
        }
        for (int j0 = 0; j0 < N; j0 += nc_max) {
            const int nc = N - j0 < nc_max ? N - j0 : nc_max;
            const ptrdiff_t ldp = (nc + 15) / 16 * 16;
            const struct src bs = {B + j0 * brs + k0 * bks_src, brs, bks_src, kc};
#if CT_HAVE_AVX512_KERNELS
            if (hw)
                pack_b_hw(pn->bp, ldp, &bs, kp, nc);
            else if (vec)
                pack_b_avx512(pn->bp, ldp, &bs, kp, nc);
            else
#endif
                pack_b_c(pn->bp, ldp, &bs, kp, nc);
            for (int i0 = 0; i0 < M; i0 += MR) {
                const int mr = M - i0 < MR ? M - i0 : MR;
                const uint32_t *ap = pn->ap + (size_t)i0 * KP_MAX;
                float *ci = C + (size_t)i0 * ldc + j0;
                for (int j = 0; j < nc; j += NR)
                    tile(kp, ap, ais, aks, pn->bp + j, ldp, ci + j, ldc, mr,
                         nc - j < NR ? nc - j : NR, alpha, bk);
            }
        }
    }
    return 0;
}

/* A slab of the threaded product (core/gemm_common.h: ct__gemm_run_slabs);
 * ctx: the kernel (hw) or not. Each element is summed the same in any slab. */
static int bgemm_slab(void *ctx, const struct ct__gemm_args *a)
{
    return own_bgemm(*(const int *)ctx, a->trans_a, a->trans_b, a->M, a->N, a->K, a->alpha, a->A,
                     a->lda, a->B, a->ldb, a->beta, a->C, a->ldc);
}

/* No panels for this thread (out of memory): the same bits, from the
 * operands in place. */
static void bgemm_slab_direct(void *ctx, const struct ct__gemm_args *a)
{
    (void)ctx;
    ct__bgemm_direct(a->trans_a, a->trans_b, a->M, a->N, a->K, a->alpha, a->A, a->lda, a->B,
                     a->ldb, a->beta, a->C, a->ldc);
}

static void run_bgemm(int hw, int trans_a, int trans_b, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (K <= 0) {
        /* C = beta C, as the float products do for an empty sum. */
        ct__gemm_empty(M, N, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const struct ct__gemm_args a = {trans_a, trans_b, M, N, K, lda, ldb, ldc, alpha, beta, A, B, C};
    ct__gemm_run_slabs(&a, bgemm_slab, bgemm_slab_direct, &hw);
}

int ct_bgemm_hw_available(void)
{
#if CT_HAVE_AVX512_KERNELS
    const unsigned need = CT_CPU_AVX512_SKX | CT_CPU_AVX512_BF16;
    return (ct_cpu_features() & need) == need;
#else
    return 0;
#endif
}

void ct_bgemm_hw(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    run_bgemm(ct_bgemm_hw_available(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C,
              ldc);
}

void ct_bgemm_soft(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                   int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    run_bgemm(0, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* -1: choose by the CPU; 0: software; 1: the kernel (where the CPU can). */
static atomic_int forced = -1;

void ct_bgemm_force(int impl) { atomic_store(&forced, impl < 0 ? -1 : impl != 0); }

static int use_hw(void)
{
    const int f = atomic_load_explicit(&forced, memory_order_relaxed);
    return f != 0 && ct_bgemm_hw_available() && (f == 1 || ct_simd_avx512());
}

const char *ct_bgemm_impl(void) { return use_hw() ? "ctrain-avx512bf16" : "software-bf16"; }

void ct_bgemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
              const float *B, int ldb, float beta, float *C, int ldc)
{
    run_bgemm(use_hw(), trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
