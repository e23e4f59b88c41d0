/* Unit tests for the bf16 products (src/core/bgemm.c): the float -> bf16
 * rounding on hand cases (and against vcvtne2ps2bf16 where the CPU has
 * AVX512_BF16); the emulated vdpbf16ps lane against the instruction on
 * millions of lanes of every kind (normal, huge, tiny and denormal,
 * cancelling, the tininess band just below FLT_MIN); the AVX512_BF16
 * kernel, the software path and the unpacked direct form bit for bit over
 * transposes, alpha, beta, ragged tiles, odd K and K/N blocks; all three
 * against the exact product within the bound bgemm.h states; the same bits
 * at 1-4 threads and however C is cut into calls; beta = 0 never reads C;
 * ct_gemm's precision switch and the names it records.
 *
 * Dims legend: C (M, N) = alpha op(A) (M, K) op(B) (K, N) + beta C.
 *
 * On a CPU without AVX512_BF16 the hardware comparisons are skipped (said
 * once) and ct_bgemm_hw runs the software path: the rest still runs.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>

#include "core/bf16.h"
#include "core/bgemm.h"
#include "core/gemm.h"
#include "core/threadpool.h"
#include "core/rng.h"
#include "core/simd.h"

#include "ct_gemm_test.h"
#include "ct_test.h"

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static float flt(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* xorshift64 for bit patterns. */
static uint64_t xs = 0x9E3779B97F4A7C15ull;
static uint32_t rnd32(void)
{
    xs ^= xs << 13;
    xs ^= xs >> 7;
    xs ^= xs << 17;
    return (uint32_t)(xs >> 16);
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HW_TESTS 1
__attribute__((target("avx512f,avx512bf16"))) static void hw_round16(const float *x, uint16_t *out)
{
    /* vcvtne2ps2bf16 (a, b): b's 16 lanes in the low half. */
    const __m512bh r = _mm512_cvtne2ps_pbh(_mm512_setzero_ps(), _mm512_loadu_ps(x));
    uint16_t tmp[32];
    _mm512_storeu_si512(tmp, (__m512i)r);
    memcpy(out, tmp, 16 * sizeof(uint16_t));
}

__attribute__((target("avx512f,avx512bf16"))) static void hw_dot16(float *acc, const uint32_t *a,
                                                                  const uint32_t *b)
{
    __m512 c = _mm512_loadu_ps(acc);
    c = _mm512_dpbf16_ps(c, (__m512bh)_mm512_loadu_si512(a), (__m512bh)_mm512_loadu_si512(b));
    _mm512_storeu_ps(acc, c);
}
#else
#define HW_TESTS 0
#endif

static int hw(void)
{
    static int said;
    const int on = HW_TESTS && ct_bgemm_hw_available();
    if (!on && !said++)
        printf("\n    (no AVX512_BF16 on this CPU: the hardware comparisons are skipped) ");
    return on;
}

/* ------------------------------------------------------------------------ */

static void test_round_hand_cases(void)
{
    static const struct {
        uint32_t in;
        uint16_t want;
        const char *what;
    } cases[] = {
        {0x3F800000u, 0x3F80, "1"},
        {0x3F808000u, 0x3F80, "tie 1 + 2^-8 -> even (down)"},
        {0x3F818000u, 0x3F82, "tie -> even (up)"},
        {0x3F808001u, 0x3F81, "just past the tie -> up"},
        {0x3F807FFFu, 0x3F80, "just below the tie -> down"},
        {0xBF818000u, 0xBF82, "negative tie -> even"},
        {0x7F7FFFFFu, 0x7F80, "FLT_MAX -> +Inf"},
        {0x7F7F7FFFu, 0x7F7F, "largest finite bf16 below the tie"},
        {0x7F800000u, 0x7F80, "+Inf"},
        {0xFF800000u, 0xFF80, "-Inf"},
        {0x7FC00000u, 0x7FC0, "quiet NaN"},
        {0x7F800001u, 0x7FC0, "NaN with a low payload only: quiet, never Inf"},
        {0xFF800001u, 0xFFC0, "negative NaN"},
        {0x7FA12345u, 0x7FE1, "signalling NaN -> quiet, payload truncated"},
        {0x00000000u, 0x0000, "+0"},
        {0x80000000u, 0x8000, "-0"},
        {0x00000001u, 0x0000, "smallest denormal -> +0"},
        {0x807FFFFFu, 0x8000, "largest denormal, negative -> -0 (never FLT_MIN)"},
        {0x00800000u, 0x0080, "FLT_MIN"},
        {0x00FFFFFFu, 0x0100, "rounds up into the next binade"},
    };
    int bad = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const uint16_t got = ct_bf16_from_f32_daz(flt(cases[i].in));
        if (got != cases[i].want && bad++ < 5)
            fprintf(stderr, "  round %08x (%s): got %04x want %04x\n", cases[i].in, cases[i].what,
                    got, cases[i].want);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(bits(ct_bf16_to_f32(0x3F81)), 0x3F810000u);
}

#if HW_TESTS
/* The software rounding is the instruction's, bit for bit. */
static void test_round_vs_instruction(void)
{
    if (!hw())
        return;
    int bad = 0;
    for (int it = 0; it < 200000; it++) {
        float x[16];
        uint16_t want[16];
        for (int l = 0; l < 16; l++) {
            uint32_t u = rnd32();
            if (l == 0)
                u &= 0x807FFFFFu; /* denormals */
            else if (l == 1)
                u |= 0x7F800000u; /* Inf, NaN */
            else if (l == 2)
                u = (u & 0xFFFF0000u) | 0x8000u; /* ties */
            x[l] = flt(u);
        }
        hw_round16(x, want);
        for (int l = 0; l < 16; l++)
            if (ct_bf16_from_f32_daz(x[l]) != want[l] && bad++ < 5)
                fprintf(stderr, "  round %08x: software %04x, vcvtne2ps2bf16 %04x\n", bits(x[l]),
                        ct_bf16_from_f32_daz(x[l]), want[l]);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* A bf16 with an exponent field drawn from [elo, ehi]. */
static uint16_t rbf(int elo, int ehi)
{
    const uint32_t r = rnd32();
    return (uint16_t)((r & 0x807Fu) | (uint32_t)(elo + (int)((r >> 16) % (uint32_t)(ehi - elo + 1))) << 7);
}

static int same(float a, float b) { return bits(a) == bits(b) || (isnan(a) && isnan(b)); }

/* The emulated lane is the instruction, bit for bit: random lanes of every
 * kind, then the band just below FLT_MIN where tininess after rounding
 * decides (exact results FLT_MIN - d: flushed for d > 2^-151, kept at and
 * below; fmaf alone would keep d <= 2^-150). */
static void test_dot2_vs_instruction(void)
{
    if (!hw())
        return;
    static const int ranges[][2] = {{120, 135}, {0, 255}, {0, 8}, {60, 70}};
    long bad = 0, lanes = 0;
    for (size_t r = 0; r < sizeof ranges / sizeof *ranges; r++)
        for (int it = 0; it < 50000; it++) {
            uint32_t a[16], b[16];
            float acc[16], acc0[16];
            for (int l = 0; l < 16; l++) {
                const int lo = ranges[r][0], hi = ranges[r][1];
                a[l] = rbf(lo, hi) | (uint32_t)rbf(lo, hi) << 16;
                b[l] = rbf(lo, hi) | (uint32_t)rbf(lo, hi) << 16;
                uint32_t c;
                switch (rnd32() % 4) {
                case 0: c = 0; break;
                case 1: c = rnd32(); break;
                case 2: c = (rnd32() & 0x807FFFFFu) | (uint32_t)(rnd32() % 4) << 23; break;
                default: /* cancels the odd product, to the last bits */
                    c = bits(-(ct_bf16_to_f32((uint16_t)(a[l] >> 16)) *
                               ct_bf16_to_f32((uint16_t)(b[l] >> 16)))) ^ (rnd32() & 3);
                }
                acc[l] = acc0[l] = flt(c);
            }
            hw_dot16(acc, a, b);
            for (int l = 0; l < 16; l++, lanes++) {
                const float e = ct_bf16_dot2(acc0[l], a[l], b[l]);
                if (!same(e, acc[l]) && bad++ < 5)
                    fprintf(stderr, "  dot2 acc %a a %08x b %08x: software %a, vdpbf16ps %a\n",
                            (double)acc0[l], a[l], b[l], (double)e, (double)acc[l]);
            }
        }
    /* The band: acc = +-FLT_MIN, odd product -+d 2^-150, even product 0. */
    for (int s = 0; s < 2; s++)
        for (int q = 1; q <= 12; q++) {
            uint32_t a[16] = {0}, b[16] = {0};
            float acc[16] = {0}, acc0;
            const float x = 0x1p-75f, y = (s ? 1.0f : -1.0f) * (float)q * 0.25f * 0x1p-75f;
            a[0] = (uint32_t)ct_bf16_from_f32_daz(x) << 16;
            b[0] = (uint32_t)ct_bf16_from_f32_daz(y) << 16;
            acc[0] = acc0 = s ? -FLT_MIN : FLT_MIN;
            hw_dot16(acc, a, b);
            const float e = ct_bf16_dot2(acc0, a[0], b[0]);
            lanes++;
            if (!same(e, acc[0]) && bad++ < 10)
                fprintf(stderr, "  dot2 band %c%d/4 2^-150: software %a, vdpbf16ps %a\n",
                        s ? '+' : '-', q, (double)e, (double)acc[0]);
        }
    if (bad)
        fprintf(stderr, "  dot2: %ld of %ld lanes differ\n", bad, lanes);
    CU_ASSERT_EQUAL(bad, 0);
}
#endif

/* ------------------------------------------------------------------------ */

/* C against the exact product of the float operands, within bgemm.h's
 * bound: each operand's rounding is a relative error of at most u8 = 2^-8,
 * so a product's is at most 2 u8 + u8^2 = 2^-7 + 2^-16; plus the float
 * sums, (K + 2) 2^-24 (|alpha| S' + |beta c|), S' = sum |a b| (1 + 2^-7 +
 * 2^-16) over the rounded operands. Also against the same rounded operands
 * summed in double (ct_bgemm_ref's numbers) within the float term alone:
 * a wrong rounding, pair or stride is off by ~2^-9 |a b| there. The ldc
 * gap columns must hold C0. Sets *max_rel to the largest |C - exact| /
 * (|alpha| S), to show the rounding happened. */
static int check(const char *label, const struct gemm_problem *p, const float *C, double *max_rel)
{
    int bad = 0;
    for (int i = 0; i < p->M; i++)
        for (int j = 0; j < p->ldc; j++) {
            const size_t at = (size_t)i * p->ldc + j;
            if (j >= p->N) {
                if (memcmp(&C[at], &p->C0[at], sizeof(float)) != 0 && bad++ < 3)
                    fprintf(stderr, "  %s: C[%d][%d] (past N) written\n", label, i, j);
                continue;
            }
            double exact = 0, rounded = 0, mag = 0;
            for (int k = 0; k < p->K; k++) {
                const float a = p->ta ? p->A[(size_t)k * p->lda + i] : p->A[(size_t)i * p->lda + k];
                const float b = p->tb ? p->B[(size_t)j * p->ldb + k] : p->B[(size_t)k * p->ldb + j];
                exact += (double)a * b;
                rounded += (double)ct_bf16_to_f32(ct_bf16_from_f32_daz(a)) *
                           ct_bf16_to_f32(ct_bf16_from_f32_daz(b));
                mag += fabs((double)a * b);
            }
            const double c0 = p->beta == 0.0f ? 0.0 : (double)p->beta * p->C0[at];
            const double S = fabs(p->alpha) * mag;
            const double sum_tol = (p->K + 2) * 0x1p-24 * (S * (1 + 0x1p-7 + 0x1p-16) + fabs(c0));
            const double tol = (0x1p-7 + 0x1p-16) * S + sum_tol + FLT_MIN;
            const double err = fabs((double)C[at] - (p->alpha * exact + c0));
            const double err_r = fabs((double)C[at] - (p->alpha * rounded + c0));
            if (S > 0 && err / S > *max_rel)
                *max_rel = err / S;
            if (!(err <= tol) && bad++ < 3)
                fprintf(stderr, "  %s: C[%d][%d] = %.9g, exact %.9g (err %.3g > tol %.3g)\n", label,
                        i, j, (double)C[at], p->alpha * exact + c0, err, tol);
            if (!(err_r <= sum_tol + FLT_MIN) && bad++ < 3)
                fprintf(stderr, "  %s: C[%d][%d] = %.9g, rounded operands %.9g (err %.3g > %.3g)\n",
                        label, i, j, (double)C[at], p->alpha * rounded + c0, err_r, sum_tol);
        }
    return bad;
}

static int differ(const char *label, const float *x, const float *y, size_t n)
{
    size_t nbad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (bits(x[i]) != bits(y[i]) && nbad++ == 0)
            first = i;
    if (nbad)
        fprintf(stderr, "  %s: %zu of %zu differ, first at %zu: %a vs %a\n", label, nbad, n, first,
                (double)x[first], (double)y[first]);
    return nbad != 0;
}

/* The kernel, the software path (with the packers in AVX-512F and in C)
 * and the direct form: the same bits, and
 * within the bound of the exact product, on every tile edge, odd K, K past
 * one block (512) and N past one block of packed B. */
static void test_paths_identical_and_bounded(void)
{
    static const int shapes[][3] = {
        {1, 1, 1},    {2, 5, 3},     {7, 15, 10},   {8, 16, 64},   {9, 17, 289},
        {15, 31, 33}, {17, 32, 2},   {31, 33, 127}, {64, 47, 288}, {65, 48, 784},
        {3, 49, 513}, {20, 300, 1025}, {5, 196, 1000}, {33, 257, 600}, {10, 128, 1},
    };
    int failed = 0, mismatched = 0;
    double max_rel = 0;
    uint32_t seed = 300;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                const float alpha = s % 3 == 2 ? -0.5f : 1.0f;
                const float beta = s % 3 == 0 ? 0.0f : s % 3 == 1 ? 1.0f : 0.25f;
                struct gemm_problem p = gemm_problem_new(ta, tb, shapes[s][0], shapes[s][1],
                                                         shapes[s][2], alpha, beta, seed += 3);
                const size_t nc = (size_t)p.M * p.ldc;
                float *soft = gemm_run(&p, ct_bgemm_soft);
                float *direct = gemm_run(&p, ct__bgemm_direct);
                ct_simd_set_portable(1); /* the packers in C */
                float *portable = gemm_run(&p, ct_bgemm_soft);
                ct_simd_set_portable(0);
                char label[128];
                gemm_label(label, sizeof label, "software, portable packing vs AVX-512F", &p);
                mismatched += differ(label, portable, soft, nc);
                free(portable);
                gemm_label(label, sizeof label, "software", &p);
                failed += check(label, &p, soft, &max_rel) != 0;
                gemm_label(label, sizeof label, "direct vs software", &p);
                mismatched += differ(label, direct, soft, nc);
                if (hw()) {
                    float *k = gemm_run(&p, ct_bgemm_hw);
                    gemm_label(label, sizeof label, "avx512bf16 vs software", &p);
                    mismatched += differ(label, k, soft, nc);
                    free(k);
                }
                free(soft);
                free(direct);
                gemm_problem_free(&p);
            }
    CU_ASSERT_EQUAL(failed, 0);
    CU_ASSERT_EQUAL(mismatched, 0);
    /* The operands were rounded: U(-1, 1) data loses ~2^-9 of a product. */
    CU_ASSERT(max_rel > 0x1p-11);
}

/* Operands that round to ties, to zero (denormals) and to infinity, and
 * NaN: the paths agree (NaN: both NaN), and a NaN operand makes its row
 * and column NaN. */
static void test_special_operands(void)
{
    struct gemm_problem p = gemm_problem_new(0, 1, 9, 33, 37, 1.0f, 0.0f, 4000);
    p.A[0] = flt(0x3F808000u);     /* a tie */
    p.A[1] = flt(0x00000003u);     /* a denormal: zero */
    p.B[0] = flt(0x7F7FFFFFu);     /* rounds to +Inf */
    p.A[2 * p.lda + 4] = NAN;      /* row 2 */
    p.A[5 * p.lda + 6] = 1e-39f;   /* denormal */
    float *soft = gemm_run(&p, ct_bgemm_soft);
    int ok = 1;
    for (int j = 0; j < p.N; j++)
        ok &= isnan(soft[2 * p.ldc + j]);
    CU_ASSERT(ok);
    CU_ASSERT(isinf(soft[0]) || isnan(soft[0]));
    if (hw()) {
        float *k = gemm_run(&p, ct_bgemm_hw);
        int bad = 0;
        for (size_t i = 0; i < (size_t)p.M * p.ldc; i++)
            bad += !(bits(k[i]) == bits(soft[i]) || (isnan(k[i]) && isnan(soft[i])));
        CU_ASSERT_EQUAL(bad, 0);
        free(k);
    }
    free(soft);
    gemm_problem_free(&p);
}

/* beta = 0 overwrites C without reading it. */
static void test_beta_zero_ignores_c(void)
{
    for (int h = 0; h < 2; h++) {
        struct gemm_problem p = gemm_problem_new(1, 0, 13, 37, 20, 1.0f, 0.0f, 900);
        for (int i = 0; i < p.M; i++)
            for (int j = 0; j < p.N; j++)
                p.C0[(size_t)i * p.ldc + j] = NAN;
        float *C = gemm_run(&p, h ? ct_bgemm_hw : ct_bgemm_soft);
        double r = 0;
        CU_ASSERT_EQUAL(check(h ? "hw beta 0 over NaN" : "soft beta 0 over NaN", &p, C, &r), 0);
        free(C);
        gemm_problem_free(&p);
    }
}

/* The same bits at 1-4 threads, and however C is cut into calls (rows,
 * columns), as ct_sgemm. */
static void test_threads_and_splits(void)
{
    static const int shapes[][3] = {{64, 196, 289}, {128, 256, 784}, {10, 800, 128}, {300, 64, 130}};
    int bad = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int t = 0; t < 4; t++) {
            struct gemm_problem p = gemm_problem_new(t & 1, t >> 1, shapes[s][0], shapes[s][1],
                                                     shapes[s][2], 1.0f, 0.5f, 7000 + (uint32_t)s);
            const size_t nc = (size_t)p.M * p.ldc;
            ct_threadpool_set_threads(1);
            float *one = gemm_run(&p, ct_bgemm);
            for (int th = 2; th <= 4; th++) {
                ct_threadpool_set_threads(th);
                float *many = gemm_run(&p, ct_bgemm);
                char label[128];
                gemm_label(label, sizeof label, "threads", &p);
                bad += differ(label, many, one, nc);
                free(many);
            }
            ct_threadpool_set_threads(1);
            /* Cut into row pieces of 5 and column pieces of 24. */
            float *cut = ct_test_floats(nc);
            memcpy(cut, p.C0, nc * sizeof(float));
            for (int i0 = 0; i0 < p.M; i0 += 5)
                for (int j0 = 0; j0 < p.N; j0 += 24) {
                    const int m = p.M - i0 < 5 ? p.M - i0 : 5, n = p.N - j0 < 24 ? p.N - j0 : 24;
                    const float *a = p.A + (p.ta ? (size_t)i0 : (size_t)i0 * p.lda);
                    const float *b = p.B + (p.tb ? (size_t)j0 * p.ldb : (size_t)j0);
                    ct_bgemm(p.ta, p.tb, m, n, p.K, p.alpha, a, p.lda, b, p.ldb, p.beta,
                             cut + (size_t)i0 * p.ldc + j0, p.ldc);
                }
            char label[128];
            gemm_label(label, sizeof label, "split into calls", &p);
            bad += differ(label, cut, one, nc);
            free(cut);
            free(one);
            gemm_problem_free(&p);
        }
    CU_ASSERT_EQUAL(bad, 0);
}

/* ct_gemm follows the precision; the names for run records. */
static void test_precision_switch(void)
{
    struct gemm_problem p = gemm_problem_new(0, 1, 17, 40, 50, 1.0f, 0.0f, 8000);
    const size_t nc = (size_t)p.M * p.ldc;
    CU_ASSERT_EQUAL(ct_gemm_precision(), CT_PRECISION_FP32);
    CU_ASSERT_STRING_EQUAL(ct_gemm_impl(), ct_sgemm_impl());
    float *s = gemm_run(&p, ct_sgemm), *g = gemm_run(&p, ct_gemm);
    CU_ASSERT_EQUAL(differ("ct_gemm fp32 vs ct_sgemm", g, s, nc), 0);
    free(g);
    ct_gemm_set_precision(CT_PRECISION_BF16);
    CU_ASSERT_EQUAL(ct_gemm_precision(), CT_PRECISION_BF16);
    CU_ASSERT_STRING_EQUAL(ct_gemm_impl(), ct_bgemm_hw_available() ? "ctrain-avx512bf16" : "software-bf16");
    float *b = gemm_run(&p, ct_bgemm);
    g = gemm_run(&p, ct_gemm);
    CU_ASSERT_EQUAL(differ("ct_gemm bf16 vs ct_bgemm", g, b, nc), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(b, s, nc * sizeof(float)), 0);
    ct_bgemm_force(0);
    CU_ASSERT_STRING_EQUAL(ct_gemm_impl(), "software-bf16");
    ct_bgemm_force(-1);
    ct_simd_set_portable(1); /* CT_SIMD=portable: the software path */
    CU_ASSERT_STRING_EQUAL(ct_gemm_impl(), "software-bf16");
    ct_simd_set_portable(0);
    ct_gemm_set_precision(CT_PRECISION_FP32);
    CU_ASSERT_STRING_EQUAL(ct_precision_names[CT_PRECISION_FP32], "fp32");
    CU_ASSERT_STRING_EQUAL(ct_precision_names[CT_PRECISION_BF16], "bf16");
    CU_ASSERT_PTR_NULL(ct_precision_names[CT_PRECISION_COUNT]);
    free(s);
    free(g);
    free(b);
    gemm_problem_free(&p);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"bf16 rounding: hand cases (ties, Inf, NaN, denormals)", test_round_hand_cases},
#if HW_TESTS
        {"bf16 rounding = vcvtne2ps2bf16", test_round_vs_instruction},
        {"emulated lane = vdpbf16ps (incl. the tininess band)", test_dot2_vs_instruction},
#endif
        {"avx512bf16 = software = direct, within the stated bound", test_paths_identical_and_bounded},
        {"special operands", test_special_operands},
        {"beta = 0 never reads C", test_beta_zero_ignores_c},
        {"same bits at 1-4 threads and any cut into calls", test_threads_and_splits},
        {"ct_gemm's precision switch and names", test_precision_switch},
        {NULL, NULL},
    };
    return ct_test_run("bgemm", cases);
}
