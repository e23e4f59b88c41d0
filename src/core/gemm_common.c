/* What the fp32 and bf16 matrix products share (see gemm_common.h): the cut
 * of C into slabs for the pool's threads, the empty product, the naive
 * reference and the 16 x 16 transposition. Not a kernel: each product's
 * own arithmetic stays in gemm.c and bgemm.c.
 */
#include "core/gemm_common.h"

#include <cblas.h>

#include "core/threadpool.h"

struct slabs {
    const struct ct__gemm_args *a;
    ct__gemm_slab_fn *slab;
    ct__gemm_fallback_fn *fallback;
    void *ctx;
    int by_rows; /* cut M (else N) */
    int units;   /* row tiles of CT__GEMM_MR, or column groups of CT__GEMM_NCUT */
};

static void run_part(void *ctx, int part, int nparts)
{
    const struct slabs *j = ctx;
    struct ct__gemm_args s = *j->a;
    const int u0 = (int)((long)j->units * part / nparts);
    const int u1 = (int)((long)j->units * (part + 1) / nparts);
    if (j->by_rows) {
        const int i0 = u0 * CT__GEMM_MR, i1 = u1 * CT__GEMM_MR < s.M ? u1 * CT__GEMM_MR : s.M;
        s.A += (size_t)i0 * (s.trans_a ? 1 : (size_t)s.lda);
        s.C += (size_t)i0 * s.ldc;
        s.M = i1 - i0;
    } else {
        const int c0 = u0 * CT__GEMM_NCUT, c1 = u1 * CT__GEMM_NCUT < s.N ? u1 * CT__GEMM_NCUT : s.N;
        s.B += (size_t)c0 * (s.trans_b ? (size_t)s.ldb : 1);
        s.C += c0;
        s.N = c1 - c0;
    }
    if (s.M > 0 && s.N > 0 && j->slab(j->ctx, &s) != 0)
        j->fallback(j->ctx, &s);
}

/* Products below this many multiply-adds run on the calling thread alone. */
#define PARALLEL_MIN_MACS (256 * 1024)

void ct__gemm_run_slabs(const struct ct__gemm_args *a, ct__gemm_slab_fn *slab,
                        ct__gemm_fallback_fn *fallback, void *ctx)
{
    struct slabs j = {a, slab, fallback, ctx, 1, 0};
    const int row_units = (a->M + CT__GEMM_MR - 1) / CT__GEMM_MR;
    const int col_units = (a->N + CT__GEMM_NCUT - 1) / CT__GEMM_NCUT;
    j.by_rows = row_units >= col_units;
    j.units = j.by_rows ? row_units : col_units;
    int nparts = ct_threadpool_threads();
    if ((double)a->M * a->N * a->K < PARALLEL_MIN_MACS)
        nparts = 1;
    if (nparts > j.units)
        nparts = j.units;
    ct_threadpool_run(run_part, &j, nparts);
}

void ct__gemm_empty(int M, int N, float alpha, const float *A, int lda, const float *B, int ldb,
                    float beta, float *C, int ldc)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, N, 0, alpha, A, lda, B, ldb, beta, C,
                ldc);
}

void ct__gemm_ref(const struct ct__gemm_args *g, float (*round)(float))
{
    for (int i = 0; i < g->M; i++)
        for (int j = 0; j < g->N; j++) {
            double acc = 0.0;
            for (int k = 0; k < g->K; k++) {
                float a = g->trans_a ? g->A[(size_t)k * g->lda + i] : g->A[(size_t)i * g->lda + k];
                float b = g->trans_b ? g->B[(size_t)j * g->ldb + k] : g->B[(size_t)k * g->ldb + j];
                if (round) {
                    a = round(a);
                    b = round(b);
                }
                acc += (double)a * b;
            }
            float *c = g->C + (size_t)i * g->ldc + j;
            *c = (float)(g->alpha * acc + (g->beta == 0.0f ? 0.0 : (double)g->beta * *c));
        }
}

#if CT_HAVE_AVX512_KERNELS
/* See core/gemm_common.h. */
CT_TARGET_AVX512
void ct__transpose16x16_u32(const uint32_t *restrict src, ptrdiff_t lds, uint32_t *restrict dst,
                            ptrdiff_t ldd)
{
    __m512 r[16], t[16];
    for (int i = 0; i < 16; i++)
        r[i] = _mm512_castsi512_ps(_mm512_loadu_si512(src + i * lds));
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]),
                      c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int h = 0; h < 2; h++)
        for (int i = 0; i < 4; i++) {
            t[8 * h + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0x88);
            t[8 * h + 4 + i] = _mm512_shuffle_f32x4(r[8 * h + i], r[8 * h + 4 + i], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
        r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
    }
    for (int i = 0; i < 16; i++)
        _mm512_storeu_si512(dst + i * ldd, _mm512_castps_si512(r[i]));
}
#endif
