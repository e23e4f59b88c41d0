/* The fused Conv2d-BatchNorm2d-ReLU-MaxPool2d(2) block (see convblock.h).
 *
 * Dims legend: B = batch (this rank), C = input channels, H, W = input size,
 * OC = output channels, OH, OW = conv output size, P = OH * OW, PH, PW =
 * pooled size (OH / 2, OW / 2), PP = PH * PW, nb = samples in a chunk.
 *
 * Workspace (max_batch rows):
 *     y     (B, OC, P)   float  conv output, kept from forward to backward;
 *                               recomputed blocks: only (OC, P), sample 0's
 *     tmp   (nb, OC, P)  float  eval: conv output of a chunk;
 *                               backward: the conv output gradient of a chunk
 *     ytmp  (nb, OC, P)  float  recomputed blocks only: a chunk's conv output
 *     xmax  (B, OC, PP)  float  the conv value each window's maximum came from
 *     arg   (B, OC, PP)  uint8  that value's place in its window: kh * 2 + kw
 *     mean, invstd (OC)  float  BatchNorm's saved statistics
 *     work  (2 OC + 1)   double BatchNorm's sums (see norm.h, "in pieces")
 *     bsum  (OC)         double the conv bias gradient's sums over all chunks
 *
 * The parameters and running statistics are those of the two children,
 * ordinary conv2d and batchnorm modules (which the model declares, binds and
 * initialises like any other); the block calls the kernels itself.
 *
 * Recomputed blocks: when the convolution has few terms per output
 * (C * K * K <= CT_CONVBLOCK_RECOMPUTE_CKK: the cnn's first stage, one input
 * channel, 9 terms) its output is not kept from forward to backward but
 * computed again, chunk by chunk, where it is needed: for the statistics,
 * for the normalise-pool-ReLU pass, and in backward. Storing it meant
 * writing 12.8 MB a step (the cnn's first stage at 128 samples) and reading
 * it back three times from memory, which took longer than the three 9-term
 * convolutions do in cache (measured: tests/bench/README.md, "Stop 23").
 * The conv is the same call on the same chunks each time, so the values,
 * and every result, are the same bits as when the output is kept.
 */
#include "nn/convblock.h"

#include <stdint.h>
#include <string.h>

#include "core/gemm.h"
#include "core/simd.h"
#include "core/tensor.h"
#include "nn/conv2d.h"
#include "nn/norm.h"

/* Samples per chunk: as many as keep a chunk's conv output (OC, P) within
 * this many bytes, so that it is still in L2 when it is read again (a 2 MiB
 * L2 per core here; the conv's own columns and weights share it). */
#ifndef CT_CONVBLOCK_CHUNK_BYTES
#define CT_CONVBLOCK_CHUNK_BYTES (512 * 1024)
#endif

/* Convolutions with at most this many terms per output (C * K * K) are
 * recomputed rather than kept (see the top). */
#ifndef CT_CONVBLOCK_RECOMPUTE_CKK
#define CT_CONVBLOCK_RECOMPUTE_CKK 32
#endif

struct cb_ctx {
    int C, H, W, OC, K, pad, sync;
    int OH, OW, PH, PW;
    int chunk, max_batch, recompute;
    size_t P, PP;
};

struct cb_ws {
    float *y, *tmp, *xmax;
    uint8_t *arg;
    float *mean, *invstd;
    double *work, *bsum;
    float *ytmp;
};

enum { NPARTS = 9 };

static size_t cb_parts(const struct cb_ctx *c, int max_batch, size_t part[NPARTS])
{
    const size_t B = (size_t)max_batch, OC = (size_t)c->OC;
    const size_t nb = (size_t)(c->chunk < max_batch ? c->chunk : max_batch);
    part[0] = ct_arena_round((c->recompute ? 1 : B) * OC * c->P * sizeof(float));
    part[1] = ct_arena_round(nb * OC * c->P * sizeof(float));
    part[2] = ct_arena_round(B * OC * c->PP * sizeof(float));
    part[3] = ct_arena_round(B * OC * c->PP + 16); /* + 16: see pool_bn_grad_plane_avx512 */
    part[4] = ct_arena_round(OC * sizeof(float));
    part[5] = ct_arena_round(OC * sizeof(float));
    part[6] = ct_arena_round((2 * OC + 1) * sizeof(double));
    part[7] = ct_arena_round(OC * sizeof(double));
    part[8] = c->recompute ? ct_arena_round(nb * OC * c->P * sizeof(float)) : 0;
    size_t total = 0;
    for (int i = 0; i < NPARTS; i++)
        total += part[i];
    return total;
}

static size_t cb_workspace(struct ct_module *m, int max_batch)
{
    struct cb_ctx *c = m->ctx;
    c->max_batch = max_batch;
    size_t part[NPARTS];
    return cb_parts(c, max_batch, part);
}

static struct cb_ws cb_carve(struct ct_module *m)
{
    const struct cb_ctx *c = m->ctx;
    size_t part[NPARTS];
    cb_parts(c, c->max_batch, part);
    char *p = m->ws;
    struct cb_ws w;
    w.y = (float *)(void *)p;
    w.tmp = (float *)(void *)(p += part[0]);
    w.xmax = (float *)(void *)(p += part[1]);
    w.arg = (uint8_t *)(p += part[2]);
    w.mean = (float *)(void *)(p += part[3]);
    w.invstd = (float *)(void *)(p += part[4]);
    w.work = (double *)(void *)(p += part[5]);
    w.bsum = (double *)(void *)(p += part[6]);
    w.ytmp = c->recompute ? (float *)(void *)(p + part[7]) : NULL;
    return w;
}

/* ------------------------------------------------------------ plane kernels */

/* Selects on bit masks (mask = all ones or zero): the same values as
 * c ? a : b, but GCC keeps them branch-free in the scalar remainder of a
 * vectorised loop (its float selects there became branches, mispredicted
 * at random), and vectorises them like any integer operation. */
static inline uint32_t fbits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float fsel(uint32_t mask, float a, float b)
{
    const uint32_t u = (fbits(a) & mask) | (fbits(b) & ~mask);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t mask_of(int c) { return (uint32_t)0 - (uint32_t)(c != 0); }

/* The forward plane kernel works on tiles of V windows of one row pair,
 * copied into stack buffers of fixed size: its loop then has a constant
 * trip count and vectorises without a scalar remainder (rows of the cnn's
 * planes are 14 and 7 windows long: shorter than one AVX-512 vector, so a
 * loop over a row's own length runs mostly in its scalar remainder; this
 * measured 1.5x faster for the first cnn stage than the direct loop). The
 * backward kernel loops directly, with mask selects (measured faster there:
 * its tile copies were loaded right after being stored). */
enum { V = 16 };

/* One (OH, OW) plane of conv output x to the pooled (PH, PW) plane:
 * z = ((x - hi) - lo) * scale + shift (BatchNorm, the same expression as
 * ct_batchnorm_forward_train and, with lo = 0, ct_batchnorm_forward_eval),
 * the 2x2 window's maximum of z chosen as ct_maxpool2d_forward chooses it
 * (the first maximum; a NaN wins), then ReLU as ct_relu_forward (NaN -> 0).
 * arg and xmax get the maximum's place in its window and its conv value.
 * The choice uses selects, not branches (data decides at random). */
CT_VECTOR_CLONES
static void norm_pool_relu_plane(float *restrict out, uint8_t *restrict arg,
                                 float *restrict xmax, const float *restrict x,
                                 struct ct_batchnorm_coeffs k, int OW, int PH, int PW)
{
    float x0[2 * V] = {0}, x1[2 * V] = {0}, o[V], xm[V];
    uint8_t a[V];
    for (int ph = 0; ph < PH; ph++)
        for (int t = 0; t < PW; t += V) {
            const int n = PW - t < V ? PW - t : V;
            memcpy(x0, x + (size_t)2 * ph * OW + 2 * t, (size_t)2 * n * sizeof(float));
            memcpy(x1, x + (size_t)(2 * ph + 1) * OW + 2 * t, (size_t)2 * n * sizeof(float));
            for (int j = 0; j < V; j++) {
                const float xa = x0[2 * j], xb = x0[2 * j + 1], xc = x1[2 * j], xd = x1[2 * j + 1];
                const float za = ((xa - k.hi) - k.lo) * k.scale + k.shift;
                const float zb = ((xb - k.hi) - k.lo) * k.scale + k.shift;
                const float zc = ((xc - k.hi) - k.lo) * k.scale + k.shift;
                const float zd = ((xd - k.hi) - k.lo) * k.scale + k.shift;
                float m = za, v = xa;
                int best = 0, take;
                take = (zb > m) | (zb != zb);
                m = take ? zb : m;
                v = take ? xb : v;
                best = take ? 1 : best;
                take = (zc > m) | (zc != zc);
                m = take ? zc : m;
                v = take ? xc : v;
                best = take ? 2 : best;
                take = (zd > m) | (zd != zd);
                m = take ? zd : m;
                v = take ? xd : v;
                best = take ? 3 : best;
                o[j] = m > 0.0f ? m : 0.0f;
                xm[j] = v;
                a[j] = (uint8_t)best;
            }
            const size_t w = (size_t)ph * PW + t;
            memcpy(out + w, o, (size_t)n * sizeof(float));
            memcpy(xmax + w, xm, (size_t)n * sizeof(float));
            memcpy(arg + w, a, (size_t)n);
        }
}

enum { LANES = 8 };

/* BatchNorm's gradient sums over one pooled plane: the gradient reaching
 * the BatchNorm output is dout where ReLU passed it (out > 0, as
 * ct_relu_backward) at each window's maximum, and 0 everywhere else, so the
 * sums over the full plane are sums over the maxima:
 * sdy += sum dy, sdyx += sum dy * (xmax - mean), in double, in LANES
 * independent lanes. The ReLU select goes to a small buffer first: a select
 * feeding a double accumulation keeps GCC from vectorising the loop. */
CT_VECTOR_CLONES
static void pooled_grad_sums(const float *restrict dout, const float *restrict out,
                             const float *restrict xmax, size_t n, double mean, double *sdy,
                             double *sdyx)
{
    enum { BLOCK = 64 };
    float d[BLOCK];
    double a[LANES] = {0}, q[LANES] = {0};
    for (size_t i0 = 0; i0 < n; i0 += BLOCK) {
        const size_t m = n - i0 < BLOCK ? n - i0 : BLOCK;
        for (size_t i = 0; i < m; i++) {
            const float g = dout[i0 + i]; /* unconditional: vectorizes (activation.c) */
            d[i] = out[i0 + i] > 0.0f ? g : 0.0f;
        }
        size_t i = 0;
        for (; i + LANES <= m; i += LANES)
            for (int l = 0; l < LANES; l++) {
                a[l] += d[i + l];
                q[l] += (double)d[i + l] * (xmax[i0 + i + l] - mean);
            }
        for (int l = 0; i < m; i++, l++) {
            a[l] += d[i];
            q[l] += (double)d[i] * (xmax[i0 + i] - mean);
        }
    }
    for (int l = 0; l < LANES; l++) {
        *sdy += a[l];
        *sdyx += q[l];
    }
}

/* The conv output gradient of one plane, as ct_batchnorm_backward computes
 * it: dx = g * (dy - k1 - xhat * k2), xhat = (x - mean) * invstd, with dy
 * routed from the pooled gradient to each window's maximum (0 elsewhere,
 * and in the last row or column that pooling floored away). dy is routed
 * into dx first, with mask selects (see fsel), then one pass over the
 * whole plane turns it into dx. */
CT_VECTOR_CLONES
static void pool_bn_grad_plane(float *restrict dx, const float *restrict x,
                               const float *restrict dout, const float *restrict out,
                               const uint8_t *restrict arg, struct ct_batchnorm_dcoeffs k,
                               int OH, int OW, int PH, int PW)
{
    for (int ph = 0; ph < PH; ph++) {
        float *restrict d0 = dx + (size_t)2 * ph * OW, *restrict d1 = d0 + OW;
        const float *restrict g = dout + (size_t)ph * PW, *restrict o = out + (size_t)ph * PW;
        const uint8_t *restrict a = arg + (size_t)ph * PW;
        for (int j = 0; j < PW; j++) {
            const float gj = g[j], v = fsel(mask_of(o[j] > 0.0f), gj, 0.0f);
            const uint32_t w = a[j];
            d0[2 * j] = fsel(mask_of(w == 0), v, 0.0f);
            d0[2 * j + 1] = fsel(mask_of(w == 1), v, 0.0f);
            d1[2 * j] = fsel(mask_of(w == 2), v, 0.0f);
            d1[2 * j + 1] = fsel(mask_of(w == 3), v, 0.0f);
        }
        if (OW & 1) /* the floored last column */
            d0[OW - 1] = d1[OW - 1] = 0.0f;
    }
    if (OH & 1) /* the floored last row */
        memset(dx + (size_t)(OH - 1) * OW, 0, (size_t)OW * sizeof(float));
    const size_t P = (size_t)OH * OW;
    for (size_t i = 0; i < P; i++)
        dx[i] = k.g * (dx[i] - k.k1 - (x[i] - k.mean) * k.invstd * k.k2);
}

/* ------------------------------------------------------------ AVX-512 plane kernels
 *
 * The same two kernels written with AVX-512 intrinsics, a tile of 16
 * windows at a time: the two rows of a tile are loaded (masked at a row's
 * end), split into even and odd columns with one permute each, and every
 * select of the portable kernel is a masked blend. Each lane computes
 * exactly the portable kernel's expression (no FMA: ISO C keeps
 * -ffp-contract=off, intrinsics included), so both give the same bits; the
 * tests run both. Chosen at run time when the CPU has AVX-512F. Pooled
 * rows of at most 8 windows (the cnn's second stage: 7) go two rows to a
 * tile (14 of 16 lanes instead of 7): 0.2-0.5 ms of the stage's 21 ms at
 * 128 samples (tests/bench/README.md, stop 23). */
#if CT_HAVE_AVX512_KERNELS
#include <immintrin.h>

/* Masks of the first n (0..16) lanes, and of the lanes of 2n columns that
 * fall in the first and the second 16-float half of a tile. */
static inline __mmask16 lanes(int n)
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
}

/* The four values of 16 windows (xa, xb top row, xc, xd bottom row) to
 * their pooled, normalised, ReLU'd values (stored under mask mn at out),
 * the conv value of each maximum (xmax) and its place (arg): the portable
 * kernel's expressions, lane by lane. */
CT_TARGET_AVX512
static inline __attribute__((always_inline)) void
pool_windows_avx512(float *restrict out, uint8_t *restrict arg, float *restrict xmax,
                    __mmask16 mn, __m512 xa, __m512 xb, __m512 xc, __m512 xd,
                    struct ct_batchnorm_coeffs k)
{
    const __m512 hi = _mm512_set1_ps(k.hi), lo = _mm512_set1_ps(k.lo),
                 sc = _mm512_set1_ps(k.scale), sh = _mm512_set1_ps(k.shift),
                 zero = _mm512_setzero_ps();
#define CB_Z(v) _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(_mm512_sub_ps(v, hi), lo), sc), sh)
    const __m512 za = CB_Z(xa), zb = CB_Z(xb), zc = CB_Z(xc), zd = CB_Z(xd);
#undef CB_Z
    __m512 m = za, v = xa;
    __m512i best = _mm512_setzero_si512();
    __mmask16 take;
#define CB_TAKE(z, xv, idx)                                                                        \
    take = _mm512_cmp_ps_mask(z, m, _CMP_GT_OQ) | _mm512_cmp_ps_mask(z, z, _CMP_UNORD_Q);          \
    m = _mm512_mask_blend_ps(take, m, z);                                                          \
    v = _mm512_mask_blend_ps(take, v, xv);                                                         \
    best = _mm512_mask_blend_epi32(take, best, _mm512_set1_epi32(idx))
    CB_TAKE(zb, xb, 1);
    CB_TAKE(zc, xc, 2);
    CB_TAKE(zd, xd, 3);
#undef CB_TAKE
    _mm512_mask_storeu_ps(out, mn, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(m, zero, _CMP_GT_OQ), m));
    _mm512_mask_storeu_ps(xmax, mn, v);
    _mm512_mask_cvtepi32_storeu_epi8(arg, mn, best);
}

/* Planes whose pooled rows are at most 8 windows (the cnn's second stage:
 * 7) take two pooled rows per tile, which lie next to each other in the
 * pooled plane: lanes [0, PW) are row ph's windows, [PW, 2 PW) row ph + 1's
 * (one tile a row would fill 7 of 16 lanes). A last odd row is left to the
 * caller. */
CT_TARGET_AVX512
static void norm_pool_relu_pairs_avx512(float *restrict out, uint8_t *restrict arg,
                                        float *restrict xmax, const float *restrict x,
                                        struct ct_batchnorm_coeffs k, int OW, int PH, int PW)
{
    /* Lane i takes column 2i (2i + 1) of the first row pair's vector, or
     * of the second's (index 16 +) for i >= PW. */
    int ie[16], io[16];
    for (int i = 0; i < 16; i++) {
        ie[i] = i < PW ? 2 * i : i < 2 * PW ? 16 + 2 * (i - PW) : 0;
        io[i] = ie[i] + 1;
    }
    const __m512i even = _mm512_loadu_si512(ie), odd = _mm512_loadu_si512(io);
    const __mmask16 m2 = lanes(2 * PW);
    for (int ph = 0; ph + 1 < PH; ph += 2) {
        const float *r0 = x + (size_t)2 * ph * OW, *r1 = r0 + OW, *r2 = r1 + OW, *r3 = r2 + OW;
        const __m512 a0 = _mm512_maskz_loadu_ps(m2, r0), a1 = _mm512_maskz_loadu_ps(m2, r2);
        const __m512 b0 = _mm512_maskz_loadu_ps(m2, r1), b1 = _mm512_maskz_loadu_ps(m2, r3);
        const size_t w = (size_t)ph * PW;
        pool_windows_avx512(out + w, arg + w, xmax + w, m2, _mm512_permutex2var_ps(a0, even, a1),
                            _mm512_permutex2var_ps(a0, odd, a1),
                            _mm512_permutex2var_ps(b0, even, b1),
                            _mm512_permutex2var_ps(b0, odd, b1), k);
    }
}

CT_TARGET_AVX512
static void norm_pool_relu_plane_avx512(float *restrict out, uint8_t *restrict arg,
                                        float *restrict xmax, const float *restrict x,
                                        struct ct_batchnorm_coeffs k, int OW, int PH, int PW)
{
    int ph = 0;
    if (PW <= 8) {
        norm_pool_relu_pairs_avx512(out, arg, xmax, x, k, OW, PH, PW);
        ph = PH & ~1;
    }
    const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    for (; ph < PH; ph++)
        for (int t = 0; t < PW; t += 16) {
            const int n = PW - t < 16 ? PW - t : 16;
            const __mmask16 m0 = lanes(2 * n), m1 = lanes(2 * n - 16), mn = lanes(n);
            const float *r0 = x + (size_t)2 * ph * OW + 2 * t, *r1 = r0 + OW;
            const __m512 a0 = _mm512_maskz_loadu_ps(m0, r0), a1 = _mm512_maskz_loadu_ps(m1, r0 + 16);
            const __m512 b0 = _mm512_maskz_loadu_ps(m0, r1), b1 = _mm512_maskz_loadu_ps(m1, r1 + 16);
            const size_t w = (size_t)ph * PW + t;
            pool_windows_avx512(out + w, arg + w, xmax + w, mn, _mm512_permutex2var_ps(a0, even, a1),
                                _mm512_permutex2var_ps(a0, odd, a1),
                                _mm512_permutex2var_ps(b0, even, b1),
                                _mm512_permutex2var_ps(b0, odd, b1), k);
        }
}

/* dx = g * (dy - k1 - (x - mean) * invstd * k2), as the portable kernel;
 * uses the vectors g, k1, k2, mean, is of the function it is in. */
#define CB_DX(dy, xv)                                                                              \
    _mm512_mul_ps(g, _mm512_sub_ps(_mm512_sub_ps(dy, k1),                                          \
                                   _mm512_mul_ps(_mm512_mul_ps(_mm512_sub_ps(xv, mean), is), k2)))

/* As norm_pool_relu_pairs_avx512: planes whose pooled rows are at most 8
 * windows take two pooled rows (four conv rows) per tile; a last odd
 * pooled row and the floored last conv row are left to the caller. */
CT_TARGET_AVX512
static void pool_bn_grad_pairs_avx512(float *restrict dx, const float *restrict x,
                                      const float *restrict dout, const float *restrict out,
                                      const uint8_t *restrict arg, struct ct_batchnorm_dcoeffs k,
                                      int OW, int PH, int PW)
{
    /* Conv column 2i (2i + 1) of a row takes window i's even (odd) value:
     * windows [0, PW) for the first pooled row, [PW, 2 PW) for the second. */
    int i0[16], i1[16];
    for (int l = 0; l < 16; l++) {
        i0[l] = (l & 1) * 16 + l / 2;
        i1[l] = (l & 1) * 16 + (PW + l / 2 < 16 ? PW + l / 2 : 15);
    }
    const __m512i ia = _mm512_loadu_si512(i0), ib = _mm512_loadu_si512(i1);
    const __m512 zero = _mm512_setzero_ps(), g = _mm512_set1_ps(k.g), k1 = _mm512_set1_ps(k.k1),
                 k2 = _mm512_set1_ps(k.k2), mean = _mm512_set1_ps(k.mean),
                 is = _mm512_set1_ps(k.invstd);
    const __mmask16 m2 = lanes(2 * PW);
    for (int ph = 0; ph + 1 < PH; ph += 2) {
        const size_t j0 = (size_t)ph * PW, r0 = (size_t)2 * ph * OW;
        const __m512 gd = _mm512_maskz_loadu_ps(m2, dout + j0);
        const __m512 o = _mm512_maskz_loadu_ps(m2, out + j0);
        /* 16 bytes: see pool_bn_grad_plane_avx512. */
        const __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(arg + j0)));
        const __m512 v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(o, zero, _CMP_GT_OQ), gd);
        const __m512 e0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(0)), v);
        const __m512 o0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(1)), v);
        const __m512 e1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(2)), v);
        const __m512 o1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(3)), v);
        const __m512 dy[4] = {_mm512_permutex2var_ps(e0, ia, o0), _mm512_permutex2var_ps(e1, ia, o1),
                              _mm512_permutex2var_ps(e0, ib, o0), _mm512_permutex2var_ps(e1, ib, o1)};
        for (int r = 0; r < 4; r++) {
            const size_t c = r0 + (size_t)r * OW;
            _mm512_mask_storeu_ps(dx + c, m2, CB_DX(dy[r], _mm512_maskz_loadu_ps(m2, x + c)));
            if (OW & 1) /* the floored last column: dy = 0 */
                dx[c + OW - 1] = k.g * (0.0f - k.k1 - (x[c + OW - 1] - k.mean) * k.invstd * k.k2);
        }
    }
}

CT_TARGET_AVX512
static void pool_bn_grad_plane_avx512(float *restrict dx, const float *restrict x,
                                      const float *restrict dout, const float *restrict out,
                                      const uint8_t *restrict arg, struct ct_batchnorm_dcoeffs k,
                                      int OH, int OW, int PH, int PW)
{
    /* Lane i of the low (high) half of a tile row takes column i / 2 of
     * the even (index < 16) or odd (index >= 16) window values. */
    const __m512i ilo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
    const __m512i ihi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
    const __m512 zero = _mm512_setzero_ps(), g = _mm512_set1_ps(k.g), k1 = _mm512_set1_ps(k.k1),
                 k2 = _mm512_set1_ps(k.k2), mean = _mm512_set1_ps(k.mean),
                 is = _mm512_set1_ps(k.invstd);
    int ph = 0;
    if (PW <= 8) {
        pool_bn_grad_pairs_avx512(dx, x, dout, out, arg, k, OW, PH, PW);
        ph = PH & ~1;
    }
    for (; ph < PH; ph++) {
        const size_t r0 = (size_t)2 * ph * OW, r1 = r0 + OW;
        for (int t = 0; t < PW; t += 16) {
            const int n = PW - t < 16 ? PW - t : 16;
            const __mmask16 m0 = lanes(2 * n), m1 = lanes(2 * n - 16), mn = lanes(n);
            const size_t j0 = (size_t)ph * PW + t;
            const __m512 gd = _mm512_maskz_loadu_ps(mn, dout + j0);
            const __m512 o = _mm512_maskz_loadu_ps(mn, out + j0);
            /* 16 bytes even at the end of a plane: arg is over-allocated
             * (see cb_parts); the lanes past n are unused. */
            const __m512i a = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(const void *)(arg + j0)));
            const __m512 v = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(o, zero, _CMP_GT_OQ), gd);
            const __m512 e0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(0)), v);
            const __m512 o0 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(1)), v);
            const __m512 e1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(2)), v);
            const __m512 o1 = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(a, _mm512_set1_epi32(3)), v);
            const size_t c0 = r0 + 2 * (size_t)t, c1 = r1 + 2 * (size_t)t;
            _mm512_mask_storeu_ps(dx + c0, m0, CB_DX(_mm512_permutex2var_ps(e0, ilo, o0),
                                                     _mm512_maskz_loadu_ps(m0, x + c0)));
            _mm512_mask_storeu_ps(dx + c0 + 16, m1, CB_DX(_mm512_permutex2var_ps(e0, ihi, o0),
                                                          _mm512_maskz_loadu_ps(m1, x + c0 + 16)));
            _mm512_mask_storeu_ps(dx + c1, m0, CB_DX(_mm512_permutex2var_ps(e1, ilo, o1),
                                                     _mm512_maskz_loadu_ps(m0, x + c1)));
            _mm512_mask_storeu_ps(dx + c1 + 16, m1, CB_DX(_mm512_permutex2var_ps(e1, ihi, o1),
                                                          _mm512_maskz_loadu_ps(m1, x + c1 + 16)));
        }
        if (OW & 1) /* the floored last column: dy = 0 */
            for (size_t i = r0 + OW - 1; i <= r1 + OW - 1; i += OW)
                dx[i] = k.g * (0.0f - k.k1 - (x[i] - k.mean) * k.invstd * k.k2);
    }
    if (OH & 1) /* the floored last row: dy = 0 */
        for (int i = 0; i < OW; i += 16) {
            const __mmask16 m = lanes(OW - i);
            const size_t c = (size_t)(OH - 1) * OW + i;
            _mm512_mask_storeu_ps(dx + c, m, CB_DX(zero, _mm512_maskz_loadu_ps(m, x + c)));
        }
#undef CB_DX
}
#endif

/* The kernels this CPU runs (see core/simd.h). */
typedef void (*cb_fwd_plane_fn)(float *restrict, uint8_t *restrict, float *restrict,
                                const float *restrict, struct ct_batchnorm_coeffs, int, int, int);
typedef void (*cb_bwd_plane_fn)(float *restrict, const float *restrict, const float *restrict,
                                const float *restrict, const uint8_t *restrict,
                                struct ct_batchnorm_dcoeffs, int, int, int, int);

static cb_fwd_plane_fn fwd_plane(void)
{
#if CT_HAVE_AVX512_KERNELS
    if (ct_simd_avx512())
        return norm_pool_relu_plane_avx512;
#endif
    return norm_pool_relu_plane;
}

static cb_bwd_plane_fn bwd_plane(void)
{
#if CT_HAVE_AVX512_KERNELS
    if (ct_simd_avx512())
        return pool_bn_grad_plane_avx512;
#endif
    return pool_bn_grad_plane;
}

/* ---------------------------------------------------------------- module */

static void cb_fail(struct ct_module *m, int rc)
{
    if (rc < 0 && m->fwd->status == 0)
        m->fwd->status = rc;
}

static ct_batchnorm_allreduce_fn cb_allreduce(const struct ct_module *m)
{
    const struct cb_ctx *c = m->ctx;
    return c->sync ? m->fwd->allreduce_sum : NULL;
}

static void cb_conv(const struct ct_module *m, float *y, const float *inp, int nb)
{
    const struct cb_ctx *c = m->ctx;
    const struct ct_module *conv = m->children[0];
    ct_conv2d_forward(y, inp, conv->p[0], conv->p[1], conv->ws, nb, c->C, c->H, c->W, c->OC, c->K,
                      c->K, 1, c->pad);
}

/* The conv output of samples [b0, b0 + nb): the kept one in y, or
 * computed again into buf. */
static const float *cb_chunk_y(const struct ct_module *m, const struct cb_ws *w, float *buf,
                               const float *inp, int b0, int nb)
{
    const struct cb_ctx *c = m->ctx;
    if (!c->recompute)
        return w->y + (size_t)b0 * c->OC * c->P;
    /* The model's FLOPs count the conv once (the statistics pass). */
    double *counter = ct_sgemm_mac_counter();
    ct_sgemm_count_macs(NULL);
    cb_conv(m, buf, inp + (size_t)b0 * c->C * c->H * c->W, nb);
    ct_sgemm_count_macs(counter);
    return buf;
}

/* Training forward, BatchNorm's sums: conv chunk by chunk, summed while it
 * is in cache. Kept: into y; recomputed: into tmp, with sample 0's planes
 * copied to y (their first values are the sums' shifts, norm.h `first`). */
static void cb_fwd_stats(const struct ct_module *m, const struct cb_ws *w, const float *inp, int B)
{
    const struct cb_ctx *c = m->ctx;
    const size_t in = (size_t)c->C * c->H * c->W, plane = (size_t)c->OC * c->P;
    ct_batchnorm_stats_zero(w->work, c->OC);
    for (int b0 = 0; b0 < B; b0 += c->chunk) {
        const int nb = B - b0 < c->chunk ? B - b0 : c->chunk;
        float *y = c->recompute ? w->tmp : w->y + (size_t)b0 * plane;
        cb_conv(m, y, inp + (size_t)b0 * in, nb);
        if (c->recompute && b0 == 0)
            memcpy(w->y, y, plane * sizeof(float));
        ct_batchnorm_stats_add(w->work, y, w->y, nb, c->OC, (int)c->P);
    }
}

static void cb_fwd(struct ct_module *m, float *out, const float *inp, int B)
{
    const struct cb_ctx *c = m->ctx;
    const struct ct_module *bn = m->children[1];
    const struct cb_ws w = cb_carve(m);
    const size_t in = (size_t)c->C * c->H * c->W;
    const cb_fwd_plane_fn fwd = fwd_plane();

    if (!m->training) {
        /* Running statistics: each chunk goes from conv to pooled output
         * while it is in cache, with ct_batchnorm_forward_eval's coefficients. */
        for (int b0 = 0; b0 < B; b0 += c->chunk) {
            const int nb = B - b0 < c->chunk ? B - b0 : c->chunk;
            cb_conv(m, w.tmp, inp + (size_t)b0 * in, nb);
            for (int b = 0; b < nb; b++)
                for (int o = 0; o < c->OC; o++) {
                    const size_t pl = (size_t)(b0 + b) * c->OC + o;
                    const struct ct_batchnorm_coeffs k = ct_batchnorm_eval_coeffs(
                        bn->b[0], bn->b[1], bn->p[0], bn->p[1], o, CT_BATCHNORM_EPS);
                    fwd(out + pl * c->PP, w.arg + pl * c->PP, w.xmax + pl * c->PP,
                        w.tmp + ((size_t)b * c->OC + o) * c->P, k, c->OW, c->PH, c->PW);
                }
        }
        return;
    }

    /* Training: conv and statistics chunk by chunk, then one pass over y
     * (kept, or computed again chunk by chunk). */
    cb_fwd_stats(m, &w, inp, B);
    int rc = ct_batchnorm_stats_end(w.mean, w.invstd, bn->b[0], bn->b[1], w.work, w.y, bn->p[0], B,
                                    c->OC, (int)c->P, CT_BATCHNORM_EPS, CT_BATCHNORM_MOMENTUM,
                                    cb_allreduce(m), m->fwd->allreduce_ctx);
    if (rc < 0) {
        cb_fail(m, rc);
        return;
    }
    for (int b0 = 0; b0 < B; b0 += c->chunk) {
        const int nb = B - b0 < c->chunk ? B - b0 : c->chunk;
        const float *y = cb_chunk_y(m, &w, w.tmp, inp, b0, nb);
        for (int b = 0; b < nb; b++)
            for (int o = 0; o < c->OC; o++) {
                const size_t pl = (size_t)(b0 + b) * c->OC + o;
                fwd(out + pl * c->PP, w.arg + pl * c->PP, w.xmax + pl * c->PP,
                    y + ((size_t)b * c->OC + o) * c->P,
                    ct_batchnorm_coeffs(w.work, bn->p[1], c->OC, o), c->OW, c->PH, c->PW);
            }
    }
}

static void cb_bwd(struct ct_module *m, float *dinp, const float *dout, const float *inp,
                   const float *out, int B)
{
    const struct cb_ctx *c = m->ctx;
    struct ct_module *conv = m->children[0], *bn = m->children[1];
    const struct cb_ws w = cb_carve(m);
    const size_t in = (size_t)c->C * c->H * c->W;
    const cb_bwd_plane_fn bwd = bwd_plane();

    /* BatchNorm's sums, from the pooled values. The conv needs BatchNorm's
     * input gradient even as the first layer (for its weights). */
    ct_batchnorm_stats_zero(w.work, c->OC);
    double *sdy = w.work + 1, *sdyx = w.work + 1 + c->OC;
    for (int b = 0; b < B; b++)
        for (int o = 0; o < c->OC; o++) {
            const size_t off = ((size_t)b * c->OC + o) * c->PP;
            pooled_grad_sums(dout + off, out + off, w.xmax + off, c->PP, w.mean[o], &sdy[o],
                             &sdyx[o]);
        }
    int rc = ct_batchnorm_grad_end(bn->g[0], bn->g[1], w.work, w.invstd, B, c->OC, (int)c->P, 1,
                                   cb_allreduce(m), m->fwd->allreduce_ctx);
    if (rc < 0) {
        cb_fail(m, rc);
        return;
    }
    if (!(w.work[0] > 0))
        return; /* no rows anywhere */

    /* Per chunk: the conv output gradient, built in tmp and consumed there.
     * The bias gradient is summed over all chunks in double and rounded
     * once, as one ct_conv2d_backward call over the batch does. */
    for (int o = 0; o < c->OC; o++)
        w.bsum[o] = 0.0;
    for (int b0 = 0; b0 < B; b0 += c->chunk) {
        const int nb = B - b0 < c->chunk ? B - b0 : c->chunk;
        const float *y = cb_chunk_y(m, &w, w.ytmp, inp, b0, nb);
        for (int b = 0; b < nb; b++)
            for (int o = 0; o < c->OC; o++) {
                const size_t pl = (size_t)(b0 + b) * c->OC + o, cp = (size_t)b * c->OC + o;
                bwd(w.tmp + cp * c->P, y + cp * c->P, dout + pl * c->PP,
                    out + pl * c->PP, w.arg + pl * c->PP,
                    ct_batchnorm_dcoeffs(w.work, bn->p[0], w.mean, w.invstd, c->OC, o), c->OH,
                    c->OW, c->PH, c->PW);
            }
        ct_conv2d_bias_sums(w.bsum, w.tmp, nb, c->OC, c->P);
        ct_conv2d_backward(dinp ? dinp + (size_t)b0 * in : NULL, conv->g[0], NULL, w.tmp,
                           inp + (size_t)b0 * in, conv->p[0], conv->ws, nb, c->C, c->H, c->W, c->OC,
                           c->K, c->K, 1, c->pad);
    }
    for (int o = 0; o < c->OC; o++)
        conv->g[1][o] += (float)w.bsum[o];
}

/* No .flops: the default sums the children's, the conv's products (with
 * the block's need_dinp, as cb_bwd passes dinp on) and BatchNorm's 0. */
static const struct ct_module_ops cb_ops = {
    .kind = "conv_bn_relu_pool",
    .workspace = cb_workspace,
    .forward = cb_fwd,
    .backward = cb_bwd,
};

struct ct_module *ct_conv_bn_relu_pool_new(int C, int H, int W, int OC, int K, int pad, int sync)
{
    if (C < 1 || H < 1 || W < 1 || OC < 1 || K < 1 || pad < 0 || H + 2 * pad < K ||
        W + 2 * pad < K)
        return NULL;
    int OH, OW;
    ct_conv2d_out_size(H, W, K, K, 1, pad, &OH, &OW);
    if (OH < 2 || OW < 2)
        return NULL;
    const int PH = OH / 2, PW = OW / 2;
    struct ct_module *m = ct_module_alloc(&cb_ops, (size_t)C * H * W, (size_t)OC * PH * PW,
                                          sizeof(struct cb_ctx));
    if (!m)
        return NULL;
    struct cb_ctx *c = m->ctx;
    const size_t P = (size_t)OH * OW, bytes = (size_t)OC * P * sizeof(float);
    *c = (struct cb_ctx){.C = C, .H = H, .W = W, .OC = OC, .K = K, .pad = pad, .sync = sync != 0,
                         .OH = OH, .OW = OW, .PH = PH, .PW = PW, .P = P, .PP = (size_t)PH * PW};
    c->recompute = C * K * K <= CT_CONVBLOCK_RECOMPUTE_CKK;
    /* Recomputed: two chunk buffers (tmp, ytmp) share the budget. */
    const size_t budget = CT_CONVBLOCK_CHUNK_BYTES / (c->recompute ? 2 : 1);
    c->chunk = bytes >= budget ? 1 : (int)(budget / bytes);
    m->span = 4;
    if (ct_module_add_child(m, ct_conv2d_new(C, H, W, OC, K, 1, pad, 1), "0") < 0 ||
        ct_module_add_child(m, ct_batchnorm2d_new(OC, OH, OW, sync), "1") < 0) {
        ct_module_free(m);
        return NULL;
    }
    return m;
}
