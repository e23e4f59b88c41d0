/* bf16 gradient compression without MPI (core/bf16.h, parallel/compress.h,
 * and gradsync's bf16 path over the in-process communicator):
 * - rounding float32 -> bf16 against a naive reference (scale by a power of
 *   two, nearbyint in double, scale back; overflow and subnormals by the
 *   format's definition), on every bf16 value with the halves that decide
 *   rounding (0, 1, just below, at and above the tie, the largest) and on
 *   random patterns; NaNs stay NaN (quiet, signed), Inf stays Inf;
 * - the MPI operation's body: the sum of two bf16 values is the correctly
 *   rounded bf16 of their exact sum (reference: their sum in double, which
 *   rounds the same), commutative bit for bit;
 * - feedback: the sent value plus the residual is the corrected gradient
 *   exactly;
 * - gradsync: with one rank, the sum is widen(round(g + r)); a step not
 *   committed leaves the residual; overlap and blocking give the same bits;
 *   bad params are refused. The multi-rank sums are in tests/mpi. */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/bf16.h"
#include "core/error.h"
#include "ct_test.h"
#include "parallel/compress.h"
#include "parallel/gradsync.h"

static float f32_bits(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

static uint32_t bits_f32(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The reference: x rounded to 8 significant bits, ties to even, with bf16's
 * range (float32's exponents: subnormal spacing 2^-133, largest finite
 * 0x1.FEp127, anything that rounds above it is Inf). Works for any double,
 * so it also rounds exact sums. */
static double ref_bf16(double x)
{
    if (isnan(x) || isinf(x) || x == 0)
        return x;
    int e;
    (void)frexp(x, &e); /* |x| = m 2^e, m in [0.5, 1) */
    int q = e - 8;      /* the spacing of 8 significant bits */
    if (q < -133)
        q = -133;
    double y = ldexp(nearbyint(ldexp(x, -q)), q); /* scaling by 2^k is exact */
    if (fabs(y) > 0x1.FEp127)
        return copysign(INFINITY, x);
    return y;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int g_bad;

static void check_round(float x)
{
    uint16_t h = ct_bf16_from_f32(x);
    double want = ref_bf16((double)x);
    double got = (double)ct_bf16_to_f32(h);
    /* Bits, not values: -0 must stay -0. */
    if (bits_f32((float)got) != bits_f32((float)want)) {
        if (g_bad++ < 5)
            fprintf(stderr, "  round(%a = 0x%08x): got 0x%04x (%a) want %a\n", (double)x,
                    bits_f32(x), h, got, want);
    }
}

static void test_round_every_bf16(void)
{
    /* Low halves: exact, the smallest dropped bit, just below the tie, the
     * tie (even and odd kept halves alike: the loop covers both), just above
     * it, the largest. */
    static const uint32_t lows[] = {0, 1, 0x7fff, 0x8000, 0x8001, 0xffff};
    g_bad = 0;
    for (uint32_t hi = 0; hi < 0x10000; hi++) {
        if ((hi & 0x7fff) >= 0x7f80) /* Inf and NaN: below */
            continue;
        for (size_t k = 0; k < sizeof lows / sizeof lows[0]; k++)
            check_round(f32_bits(hi << 16 | lows[k]));
    }
    for (uint64_t i = 0; i < 1000000; i++) {
        uint32_t u = (uint32_t)mix(i + 1);
        if ((u & 0x7f800000u) != 0x7f800000u)
            check_round(f32_bits(u));
    }
    CU_ASSERT_EQUAL(g_bad, 0);
    /* Spot checks a reader can follow. */
    CU_ASSERT_EQUAL(ct_bf16_from_f32(1.0f), 0x3f80);
    CU_ASSERT_EQUAL(ct_bf16_from_f32(1.0f + 0x1p-8f), 0x3f80);  /* tie, even stays */
    CU_ASSERT_EQUAL(ct_bf16_from_f32(1.0f + 0x3p-8f), 0x3f82);  /* tie, odd rounds up */
    CU_ASSERT_EQUAL(ct_bf16_from_f32(1.0f + 0x1p-8f + 0x1p-23f), 0x3f81);
    CU_ASSERT_EQUAL(ct_bf16_from_f32(-0.0f), 0x8000);
    CU_ASSERT_EQUAL(ct_bf16_from_f32(0x1p-149f), 0x0000);      /* smallest float: to 0 */
    CU_ASSERT_EQUAL(ct_bf16_from_f32(0x1p-133f), 0x0001);      /* smallest bf16 subnormal */
    CU_ASSERT_EQUAL(ct_bf16_from_f32(0x1.FEp127f), 0x7f7f);    /* largest bf16 */
    CU_ASSERT_EQUAL(ct_bf16_from_f32(0x1.FEFFFEp127f), 0x7f7f);
    CU_ASSERT_EQUAL(ct_bf16_from_f32(0x1.FF0000p127f), 0x7f80); /* tie above the largest: Inf */
    CU_ASSERT_EQUAL(ct_bf16_from_f32(-FLT_MAX), 0xff80);
    CU_ASSERT_EQUAL(ct_bf16_to_f32(0x3f80), 1.0f);
    CU_ASSERT_EQUAL(ct_bf16_to_f32(0x0001), 0x1p-133f);
}

static void test_round_specials(void)
{
    CU_ASSERT_EQUAL(ct_bf16_from_f32(INFINITY), 0x7f80);
    CU_ASSERT_EQUAL(ct_bf16_from_f32(-INFINITY), 0xff80);
    /* Every NaN class: quiet, signalling with a payload only in the low
     * half (the add trick alone would make those Inf), negative. */
    static const uint32_t nans[] = {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0x7fbfffffu,
                                    0xff800001u, 0xffc12345u, 0x7fffffffu};
    for (size_t k = 0; k < sizeof nans / sizeof nans[0]; k++) {
        uint16_t h = ct_bf16_from_f32(f32_bits(nans[k]));
        CU_ASSERT((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0); /* a NaN */
        CU_ASSERT(h & 0x0040);                                /* quiet */
        CU_ASSERT_EQUAL(h >> 15, nans[k] >> 31);              /* sign kept */
        CU_ASSERT(isnan(ct_bf16_to_f32(h)));
    }
}

/* The sum of bf16 pairs: correctly rounded, commutative. Operands cover
 * every exponent (random patterns), cancellation, equal and opposite
 * values, the largest (overflow to Inf), subnormals and specials. */
static void test_sum_pairs(void)
{
    enum { N = 200000 };
    uint16_t *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *ab = malloc(N * sizeof *ab),
             *ba = malloc(N * sizeof *ba);
    CU_ASSERT_FATAL(a && b && ab && ba);
    for (size_t i = 0; i < N; i++) {
        uint64_t h = mix(i * 7 + 3);
        a[i] = (uint16_t)h;
        switch (i % 8) {
        case 0: b[i] = (uint16_t)(h >> 16); break;                     /* anything */
        case 1: b[i] = (uint16_t)(a[i] ^ 0x8000); break;               /* x + -x = +0 */
        case 2: b[i] = (uint16_t)(a[i] + (h >> 40) % 5 - 2); break;    /* near x */
        case 3: b[i] = (uint16_t)((a[i] ^ 0x8000) + (h >> 40) % 5 - 2); break; /* cancellation */
        case 4: b[i] = (uint16_t)((a[i] & 0x8000) | ((h >> 20) & 0x00ff)); break; /* subnormal */
        case 5: b[i] = (uint16_t)(((h >> 20) & 0x8000) | 0x7f7f); break; /* the largest */
        case 6: b[i] = (uint16_t)((a[i] & 0x807f) | ((((a[i] >> 7) & 0xffu) - 8u) & 0xffu) << 7); break; /* x / 256 */
        default: b[i] = (uint16_t)(0x7f80 | ((h >> 20) & 0x8000)); break; /* +-Inf */
        }
    }
    memcpy(ab, b, N * sizeof *ab);
    ct_compress_sum_bf16(ab, a, N); /* ab = a + b */
    memcpy(ba, a, N * sizeof *ba);
    ct_compress_sum_bf16(ba, b, N); /* ba = b + a */
    int bad = 0, nonsym = 0;
    for (size_t i = 0; i < N; i++) {
        double x = ct_bf16_to_f32(a[i]), y = ct_bf16_to_f32(b[i]);
        double want = ref_bf16(x + y); /* double's rounding of x + y is innocuous too */
        float got = ct_bf16_to_f32(ab[i]);
        int ok = isnan(want) ? isnan(got) : bits_f32(got) == bits_f32((float)want);
        if (!ok && bad++ < 5)
            fprintf(stderr, "  0x%04x + 0x%04x: got 0x%04x want %a\n", a[i], b[i], ab[i], want);
        if (!isnan(got) && ab[i] != ba[i])
            nonsym++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(nonsym, 0);
    /* Readable cases: 1 + 2^-8 is a tie (to even: 1), 1 + 3*2^-8 is not
     * representable either (to 1 + 2^-7 * 2); the largest twice is Inf;
     * Inf - Inf is NaN. */
    uint16_t x[4] = {0x3f80, 0x3f80, 0x7f7f, 0x7f80}, y[4] = {0x3b80, 0x3c40, 0x7f7f, 0xff80};
    ct_compress_sum_bf16(x, y, 4);
    CU_ASSERT_EQUAL(x[0], 0x3f80);
    CU_ASSERT_EQUAL(x[1], 0x3f82);
    CU_ASSERT_EQUAL(x[2], 0x7f80);
    CU_ASSERT(isnan(ct_bf16_to_f32(x[3])));
    free(a);
    free(b);
    free(ab);
    free(ba);
}

static float rnd(uint64_t i)
{
    uint64_t h = mix(i);
    double u = (double)(h >> 11) * 0x1p-53 * 2.0 - 1.0;
    return (float)ldexp(u, (int)(h % 40) - 30);
}

static void test_feedback_exact(void)
{
    enum { N = 100000 };
    float *g = malloc(N * sizeof *g), *r = malloc(N * sizeof *r), *r2 = malloc(N * sizeof *r2);
    uint16_t *out = malloc(N * sizeof *out), *plain = malloc(N * sizeof *plain);
    CU_ASSERT_FATAL(g && r && r2 && out && plain);
    for (size_t i = 0; i < N; i++) {
        g[i] = rnd(2 * i);
        /* A residual is at most half a bf16 spacing of what it came from. */
        r[i] = rnd(2 * i + 1) * 0x1p-9f;
    }
    ct_compress_round_bf16_feedback(out, g, r, r2, N);
    int bad = 0;
    for (size_t i = 0; i < N; i++) {
        const float v = g[i] + r[i];
        if (out[i] != ct_bf16_from_f32(v) ||
            (double)ct_bf16_to_f32(out[i]) + (double)r2[i] != (double)v ||
            !(fabsf(r2[i]) <= fabsf(v) * 0x1p-8f))
            bad++;
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* In place (res_out == res_in) gives the same. */
    float *rin = malloc(N * sizeof *rin);
    CU_ASSERT_FATAL(rin != NULL);
    memcpy(rin, r, N * sizeof *rin);
    ct_compress_round_bf16_feedback(plain, g, rin, rin, N);
    CU_ASSERT(memcmp(plain, out, N * sizeof *out) == 0);
    CU_ASSERT(memcmp(rin, r2, N * sizeof *rin) == 0);
    /* A zero residual is plain rounding; widening is exact. */
    memset(r, 0, N * sizeof *r);
    ct_compress_round_bf16_feedback(out, g, r, r2, N);
    ct_compress_round_bf16(plain, g, N);
    CU_ASSERT(memcmp(plain, out, N * sizeof *out) == 0);
    ct_compress_widen_bf16(r, plain, N);
    for (size_t i = 0; i < N; i++)
        bad += bits_f32(r[i]) != (uint32_t)plain[i] << 16;
    CU_ASSERT_EQUAL(bad, 0);
    free(g);
    free(r);
    free(r2);
    free(rin);
    free(out);
    free(plain);
}

/* ---------------------------------------------------------------- gradsync, one rank */

enum { NUMEL = 1320 };
static const struct ct_grad_span g_sp[] = {{0, 100}, {7, 7}, {100, 300}, {304, 1304}, {1304, 1310}};

static void fill(float *g, int step)
{
    for (size_t i = 0; i < NUMEL; i++)
        g[i] = rnd((uint64_t)step << 32 | i);
}

/* One step; the hook reports every module in reverse when overlapping. */
static void step(struct ct_gradsync *gs, float *g, int s, int overlap)
{
    fill(g, s);
    CU_ASSERT_EQUAL(ct_gradsync_begin(gs, 0), 0);
    for (int i = 4; overlap && i >= 0; i--)
        ct_gradsync_hook(gs, i);
    CU_ASSERT_EQUAL(ct_gradsync_finish(gs, NULL), 0);
}

static struct ct_gradsync_params bf16_params(int feedback, int overlap)
{
    struct ct_gradsync_params p = ct_gradsync_default_params();
    p.first_bucket_bytes = 40;
    p.bucket_bytes = 800;
    p.overlap = overlap;
    p.compress = CT_GRAD_COMPRESS_BF16;
    p.feedback = feedback;
    return p;
}

static void test_gradsync_self_bf16(void)
{
    struct ct_comm c;
    ct_comm_init_self(&c);
    float *g = ct_test_floats(NUMEL), *want = ct_test_floats(NUMEL), *r1 = ct_test_floats(NUMEL);
    for (int overlap = 0; overlap < 2; overlap++) {
        struct ct_gradsync_params p = bf16_params(0, overlap);
        struct ct_gradsync gs;
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, &c, g, NUMEL, g_sp, 5, &p), 0);
        CU_ASSERT_EQUAL(gs.n_buckets, 4);
        CU_ASSERT_PTR_NULL(ct_gradsync_residual(&gs));
        step(&gs, g, 1, overlap);
        CU_ASSERT_EQUAL(gs.n_started, 4);
        fill(want, 1);
        for (size_t i = 0; i < NUMEL; i++)
            want[i] = ct_bf16_to_f32(ct_bf16_from_f32(want[i]));
        CU_ASSERT(memcmp(g, want, NUMEL * sizeof *g) == 0);
        ct_gradsync_commit(&gs); /* harmless without feedback */
        ct_gradsync_free(&gs);
    }

    /* Feedback: committed steps carry the residual on, a dropped one does
     * not touch it; overlap and blocking alike. */
    float *res[2];
    for (int overlap = 0; overlap < 2; overlap++) {
        struct ct_gradsync_params p = bf16_params(1, overlap);
        struct ct_gradsync gs;
        CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, &c, g, NUMEL, g_sp, 5, &p), 0);
        const float *r0 = ct_gradsync_residual(&gs);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r0);
        for (size_t i = 0; i < NUMEL; i++)
            CU_ASSERT_EQUAL(r0[i], 0.0f);
        step(&gs, g, 1, overlap);
        ct_gradsync_commit(&gs);
        fill(want, 1);
        for (size_t i = 0; i < NUMEL; i++)
            r1[i] = want[i] - ct_bf16_to_f32(ct_bf16_from_f32(want[i]));
        CU_ASSERT(memcmp(ct_gradsync_residual(&gs), r1, NUMEL * sizeof *r1) == 0);
        /* Step 2 not committed (dropped): the residual is step 1's. */
        step(&gs, g, 2, overlap);
        fill(want, 2);
        for (size_t i = 0; i < NUMEL; i++)
            want[i] = ct_bf16_to_f32(ct_bf16_from_f32(want[i] + r1[i]));
        CU_ASSERT(memcmp(g, want, NUMEL * sizeof *g) == 0);
        CU_ASSERT(memcmp(ct_gradsync_residual(&gs), r1, NUMEL * sizeof *r1) == 0);
        /* Step 2 again, committed: the same sum; committing twice swaps once. */
        step(&gs, g, 2, overlap);
        CU_ASSERT(memcmp(g, want, NUMEL * sizeof *g) == 0);
        ct_gradsync_commit(&gs);
        ct_gradsync_commit(&gs);
        fill(want, 2);
        const float *r2 = ct_gradsync_residual(&gs);
        int bad = 0;
        for (size_t i = 0; i < NUMEL; i++) {
            float v = want[i] + r1[i];
            bad += bits_f32(r2[i]) != bits_f32(v - ct_bf16_to_f32(ct_bf16_from_f32(v)));
        }
        CU_ASSERT_EQUAL(bad, 0);
        res[overlap] = malloc(NUMEL * sizeof(float));
        CU_ASSERT_FATAL(res[overlap] != NULL);
        memcpy(res[overlap], r2, NUMEL * sizeof(float));
        ct_gradsync_free(&gs);
    }
    CU_ASSERT(memcmp(res[0], res[1], NUMEL * sizeof(float)) == 0);
    free(res[0]);
    free(res[1]);

    /* Refused: feedback without compression, an unknown compression. */
    struct ct_gradsync gs;
    struct ct_gradsync_params p = bf16_params(1, 1);
    p.compress = CT_GRAD_COMPRESS_NONE;
    CU_ASSERT_EQUAL(ct_gradsync_init(&gs, &c, g, NUMEL, g_sp, 5, &p), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "feedback"));
    p.compress = CT_GRAD_COMPRESS_COUNT;
    CU_ASSERT_EQUAL(ct_gradsync_init(&gs, &c, g, NUMEL, g_sp, 5, &p), CT_EINVAL);
    /* The default is no compression, no staging buffer. */
    p = ct_gradsync_default_params();
    CU_ASSERT_EQUAL(p.compress, CT_GRAD_COMPRESS_NONE);
    CU_ASSERT_EQUAL(p.feedback, 0);
    CU_ASSERT_EQUAL_FATAL(ct_gradsync_init(&gs, &c, g, NUMEL, g_sp, 5, &p), 0);
    CU_ASSERT_PTR_NULL(gs.wire);
    ct_gradsync_free(&gs);

    /* The self communicator's bf16 ops: identity, requests checked. */
    uint16_t v[3] = {1, 2, 3};
    struct ct_request r = {0};
    CU_ASSERT_EQUAL(ct_comm_allreduce_bf16(&c, v, 3), 0);
    CU_ASSERT_EQUAL(ct_comm_iallreduce_bf16(&c, v, 3, &r), 0);
    CU_ASSERT(v[0] == 1 && v[1] == 2 && v[2] == 3 && !r.active);
    CU_ASSERT_EQUAL(ct_comm_iallreduce_bf16(&c, v, (size_t)INT_MAX + 1, &r), CT_ERANGE);
    free(g);
    free(want);
    free(r1);
    ct_comm_free(&c);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"round to bf16: every bf16 value's ties, random patterns", test_round_every_bf16},
        {"round to bf16: Inf and NaN", test_round_specials},
        {"sum of bf16 pairs: correctly rounded, commutative", test_sum_pairs},
        {"error feedback: sent + residual == corrected gradient", test_feedback_exact},
        {"gradsync bf16 over one rank: sums, residuals, commit", test_gradsync_self_bf16},
        {NULL, NULL},
    };
    return ct_test_run("compress", cases);
}
