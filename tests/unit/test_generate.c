/* The pure parts of `ctrain-dist generate` (train/generate.h): the sampling
 * rule (temperature, top-k with ties to the lower id, softmax, the inverse
 * CDF at a given uniform), the per-token uniform, and the streaming UTF-8
 * decoder that prints bytes which are not UTF-8 as U+FFFD. The whole
 * command, on a trained gpt, is tests/e2e/test_generate.sh.
 *
 * The distributions are checked through the rule itself: sweeping u over a
 * fine grid of [0, 1), the share of the grid that lands on each token is
 * that token's probability to within the grid's step. The expected
 * probabilities are worked out by hand in each test's comment. The UTF-8
 * expectations are Python's bytes.decode("utf-8", errors="replace").
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "train/generate.h"

#define GRID 100000

/* share[v] = the fraction of u = (j + 0.5) / GRID, j < GRID, giving v. */
static void sweep(const float *logits, int V, double temperature, int top_k, double *share)
{
    double *work = malloc(2 * (size_t)V * sizeof *work);
    for (int v = 0; v < V; v++)
        share[v] = 0.0;
    for (int j = 0; j < GRID; j++) {
        int t = ct_sample_logits(logits, V, temperature, top_k, (j + 0.5) / GRID, work);
        CU_ASSERT_FATAL(t >= 0 && t < V);
        share[t] += 1.0 / GRID;
    }
    free(work);
}

static void assert_shares(const char *label, const double *got, const double *want, int V)
{
    for (int v = 0; v < V; v++)
        if (fabs(got[v] - want[v]) > 2.0 / GRID) {
            fprintf(stderr, "  %s: token %d drawn with probability %.6f, want %.6f\n", label, v,
                    got[v], want[v]);
            CU_FAIL("a token's probability");
        }
}

/* Picks at fixed uniforms, one token id each. */
static int pick(const float *logits, int V, double temperature, int top_k, double u)
{
    double work[2 * 16];
    CU_ASSERT_FATAL(V <= 16);
    return ct_sample_logits(logits, V, temperature, top_k, u, work);
}

/* Temperature 0.5 over logits 0, ln2 / 2, ln3 / 2: exp(l / 0.5) = 1, 2, 3,
 * so p = 1/6, 2/6, 3/6 (cumulative 1/6, 1/2, 1); top-k 2 keeps ids 1 and 2:
 * p = 0, 2/5, 3/5. Temperature 1 over the same: 1, sqrt2, sqrt3. */
static void test_temperature_softmax(void)
{
    const float l[3] = {0.0f, (float)(log(2.0) / 2), (float)(log(3.0) / 2)};
    double share[3];
    sweep(l, 3, 0.5, 0, share);
    assert_shares("T=0.5, all", share, (const double[]){1 / 6.0, 2 / 6.0, 3 / 6.0}, 3);
    sweep(l, 3, 0.5, 3, share); /* k = V: no cut */
    assert_shares("T=0.5, k=V", share, (const double[]){1 / 6.0, 2 / 6.0, 3 / 6.0}, 3);
    sweep(l, 3, 0.5, 100, share); /* k > V: no cut */
    assert_shares("T=0.5, k>V", share, (const double[]){1 / 6.0, 2 / 6.0, 3 / 6.0}, 3);
    sweep(l, 3, 0.5, 2, share);
    assert_shares("T=0.5, k=2", share, (const double[]){0.0, 0.4, 0.6}, 3);
    const double s = 1 + sqrt(2.0) + sqrt(3.0);
    sweep(l, 3, 1.0, 0, share);
    assert_shares("T=1", share, (const double[]){1 / s, sqrt(2.0) / s, sqrt(3.0) / s}, 3);
    /* The inverse CDF at fixed uniforms: the boundaries 1/6 and 1/2. */
    CU_ASSERT_EQUAL(pick(l, 3, 0.5, 0, 0.0), 0);
    CU_ASSERT_EQUAL(pick(l, 3, 0.5, 0, 0.16), 0);
    CU_ASSERT_EQUAL(pick(l, 3, 0.5, 0, 0.17), 1);
    CU_ASSERT_EQUAL(pick(l, 3, 0.5, 0, 0.49), 1);
    CU_ASSERT_EQUAL(pick(l, 3, 0.5, 0, 0.51), 2);
    CU_ASSERT_EQUAL(pick(l, 3, 0.5, 0, 0.999999), 2);
    CU_ASSERT_EQUAL(pick(l, 3, 0.5, 2, 0.39), 1); /* 2/5 = 0.4 */
    CU_ASSERT_EQUAL(pick(l, 3, 0.5, 2, 0.41), 2);
    /* Large logits: the softmax is shifted by the maximum (no overflow). */
    const float big[3] = {1000.0f, (float)(1000 + log(2.0) / 2), (float)(1000 + log(3.0) / 2)};
    sweep(big, 3, 0.5, 0, share);
    assert_shares("logits near 1000", share, (const double[]){1 / 6.0, 2 / 6.0, 3 / 6.0}, 3);
}

/* Top-k keeps exactly k tokens; among equal logits at the cut the lower ids.
 * Logits 2, 2, 2, 1 with k = 2: ids 0 and 1, one half each; id 2 (equal to
 * them) is never drawn. 1, 3, 2, 3 with k = 2: ids 1 and 3. With k = 3:
 * 1, 3 and 2, p proportional to e^3, e^3, e^2. */
static void test_top_k_ties(void)
{
    double share[4];
    const float tie[4] = {2.0f, 2.0f, 2.0f, 1.0f};
    sweep(tie, 4, 1.0, 2, share);
    assert_shares("2,2,2,1 k=2", share, (const double[]){0.5, 0.5, 0.0, 0.0}, 4);
    sweep(tie, 4, 1.0, 3, share);
    assert_shares("2,2,2,1 k=3", share, (const double[]){1 / 3.0, 1 / 3.0, 1 / 3.0, 0.0}, 4);
    const float l[4] = {1.0f, 3.0f, 2.0f, 3.0f};
    sweep(l, 4, 1.0, 2, share);
    assert_shares("1,3,2,3 k=2", share, (const double[]){0.0, 0.5, 0.0, 0.5}, 4);
    const double z = 2 * exp(3.0) + exp(2.0);
    sweep(l, 4, 1.0, 3, share);
    assert_shares("1,3,2,3 k=3", share, (const double[]){0.0, exp(3.0) / z, exp(2.0) / z, exp(3.0) / z}, 4);
    CU_ASSERT_EQUAL(pick(l, 4, 1.0, 2, 0.49), 1);
    CU_ASSERT_EQUAL(pick(l, 4, 1.0, 2, 0.51), 3);
    /* A tie across the cut at k = 1: the first maximum, whatever u. */
    CU_ASSERT_EQUAL(pick(l, 4, 1.0, 1, 0.99), 1);
    CU_ASSERT_EQUAL(pick(tie, 4, 5.0, 1, 0.99), 0);
    /* Negative logits and a cut among them. */
    const float neg[4] = {-5.0f, -1.0f, -3.0f, -1.0f};
    sweep(neg, 4, 1.0, 3, share);
    const double zn = 2 * exp(-1.0) + exp(-3.0);
    assert_shares("negative k=3", share, (const double[]){0.0, exp(-1.0) / zn, exp(-3.0) / zn, exp(-1.0) / zn}, 4);
}

/* Temperature 0 is the argmax (the first of equal maxima) for every u and k. */
static void test_argmax(void)
{
    const float l[5] = {1.0f, 5.0f, -2.0f, 5.0f, 4.9f};
    for (int k = 0; k <= 5; k++)
        for (double u = 0.0; u < 1.0; u += 0.125)
            CU_ASSERT_EQUAL(pick(l, 5, 0.0, k, u), 1);
    const float last[3] = {0.0f, 0.0f, 7.0f};
    CU_ASSERT_EQUAL(pick(last, 3, 0.0, 0, 0.5), 2);
    /* A tiny temperature tends to the argmax too (the others underflow). */
    CU_ASSERT_EQUAL(pick(last, 3, 1e-3, 0, 0.999999), 2);
}

/* The uniform of token i: in [0, 1), a function of (seed, i) alone, spread
 * evenly (a mean near 1/2 over many tokens), different between seeds. */
static void test_uniform(void)
{
    double sum = 0.0;
    int same = 0;
    const int n = 20000;
    for (int64_t i = 0; i < n; i++) {
        double u = ct_generate_uniform(42, i);
        CU_ASSERT(u >= 0.0 && u < 1.0);
        CU_ASSERT_EQUAL(u, ct_generate_uniform(42, i));
        same += u == ct_generate_uniform(43, i);
        sum += u;
    }
    CU_ASSERT_EQUAL(same, 0);
    CU_ASSERT(fabs(sum / n - 0.5) < 0.01);
    /* The counter's high word counts: tokens 2^32 apart differ. */
    CU_ASSERT_NOT_EQUAL(ct_generate_uniform(7, 5), ct_generate_uniform(7, ((int64_t)1 << 32) + 5));
}

/* ------------------------------------------------------------- UTF-8 */

/* The decoder's output for `in`, fed one byte at a time, then flushed; the
 * bytes it reports writing must match what it wrote. */
static char *decode(const char *in, size_t n, size_t *len)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    struct ct_utf8 d = {0};
    int written = 0;
    for (size_t i = 0; i < n; i++)
        written += ct_utf8_put(&d, (unsigned char)in[i], f);
    written += ct_utf8_flush(&d, f);
    fclose(f);
    CU_ASSERT_EQUAL((size_t)written, size);
    *len = size;
    return buf;
}

#define R "\xEF\xBF\xBD" /* U+FFFD */

static void check_utf8(const char *label, const char *in, size_t n, const char *want)
{
    size_t len;
    char *got = decode(in, n, &len);
    if (len != strlen(want) || memcmp(got, want, len) != 0) {
        fprintf(stderr, "  %s: got", label);
        for (size_t i = 0; i < len; i++)
            fprintf(stderr, " %02X", (unsigned char)got[i]);
        fprintf(stderr, ", want");
        for (size_t i = 0; want[i]; i++)
            fprintf(stderr, " %02X", (unsigned char)want[i]);
        fprintf(stderr, "\n");
        CU_FAIL("UTF-8 decoding");
    }
    free(got);
}
#define CHECK_UTF8(label, in, want) check_utf8(label, in, sizeof(in) - 1, want)

static void test_utf8_valid(void)
{
    /* 1, 2, 3 and 4 bytes, and the edges of each length. */
    CHECK_UTF8("ascii", "plain text\n", "plain text\n");
    CHECK_UTF8("mixed", "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", "a\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80");
    CHECK_UTF8("U+0080", "\xC2\x80", "\xC2\x80");
    CHECK_UTF8("U+07FF", "\xDF\xBF", "\xDF\xBF");
    CHECK_UTF8("U+0800", "\xE0\xA0\x80", "\xE0\xA0\x80");
    CHECK_UTF8("U+D7FF", "\xED\x9F\xBF", "\xED\x9F\xBF");
    CHECK_UTF8("U+E000", "\xEE\x80\x80", "\xEE\x80\x80");
    CHECK_UTF8("U+FFFF", "\xEF\xBF\xBF", "\xEF\xBF\xBF");
    CHECK_UTF8("U+10000", "\xF0\x90\x80\x80", "\xF0\x90\x80\x80");
    CHECK_UTF8("U+10FFFF", "\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF");
    size_t len; /* NUL is a character like any other */
    char *got = decode("a\0b", 3, &len);
    CU_ASSERT(len == 3 && memcmp(got, "a\0b", 3) == 0);
    free(got);
    CHECK_UTF8("empty", "", "");
}

static void test_utf8_overlong(void)
{
    CHECK_UTF8("C0 AF", "\xC0\xAF", R R);
    CHECK_UTF8("C1 BF", "\xC1\xBF", R R);
    CHECK_UTF8("E0 80 AF", "\xE0\x80\xAF", R R R);
    CHECK_UTF8("E0 9F BF", "\xE0\x9F\xBF", R R R);
    CHECK_UTF8("F0 80 80 AF", "\xF0\x80\x80\xAF", R R R R);
    CHECK_UTF8("F0 8F BF BF", "\xF0\x8F\xBF\xBF", R R R R);
}

static void test_utf8_truncated(void)
{
    CHECK_UTF8("E2 82 A", "\xE2\x82" "A", R "A");
    CHECK_UTF8("E2 82 at the end", "\xE2\x82", R);
    CHECK_UTF8("F0 9F 98 at the end", "x\xF0\x9F\x98", "x" R);
    CHECK_UTF8("C3 at the end", "\xC3", R);
    CHECK_UTF8("E2 82 then C3 A9", "\xE2\x82\xC3\xA9", R "\xC3\xA9");
    CHECK_UTF8("F0 9F then newline", "\xF0\x9F\n", R "\n");
    CHECK_UTF8("two leads", "\xC3\xC3\xA9", R "\xC3\xA9");
}

static void test_utf8_surrogates_and_range(void)
{
    CHECK_UTF8("U+D800", "\xED\xA0\x80", R R R);
    CHECK_UTF8("U+DFFF", "\xED\xBF\xBF", R R R);
    CHECK_UTF8("a surrogate pair", "\xED\xA0\xBD\xED\xB8\x80", R R R R R R);
    CHECK_UTF8("above U+10FFFF", "\xF4\x90\x80\x80", R R R R);
    CHECK_UTF8("F5", "\xF5\x80", R R);
    CHECK_UTF8("FE FF", "\xFE\xFF", R R);
}

static void test_utf8_stray(void)
{
    CHECK_UTF8("one continuation", "\x80", R);
    CHECK_UTF8("between letters", "a\x80\x80" "b", "a" R R "b");
    CHECK_UTF8("after a whole character", "\xDF\xBF\x80", "\xDF\xBF" R);
    CHECK_UTF8("after a 4-byte character", "\xF0\x9F\x98\x80\xBF", "\xF0\x9F\x98\x80" R);
}

/* One decoder across many calls (the tokens of a generation): a character
 * split over tokens is one character; flush on an empty state writes
 * nothing, and the decoder is reusable after a flush. */
static void test_utf8_stream(void)
{
    char *buf = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&buf, &size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    struct ct_utf8 d = {0};
    CU_ASSERT_EQUAL(ct_utf8_put(&d, 0xE2, f), 0);
    CU_ASSERT_EQUAL(ct_utf8_put(&d, 0x82, f), 0);
    CU_ASSERT_EQUAL(ct_utf8_put(&d, 0xAC, f), 3);
    CU_ASSERT_EQUAL(ct_utf8_flush(&d, f), 0);
    CU_ASSERT_EQUAL(ct_utf8_put(&d, 0xF0, f), 0);
    CU_ASSERT_EQUAL(ct_utf8_flush(&d, f), 3);
    CU_ASSERT_EQUAL(ct_utf8_put(&d, 'z', f), 1);
    CU_ASSERT_EQUAL(ct_utf8_put(&d, 0xC3, f), 0);
    CU_ASSERT_EQUAL(ct_utf8_put(&d, 'q', f), 4); /* U+FFFD, then q */
    fclose(f);
    const char want[] = "\xE2\x82\xAC" R "z" R "q";
    CU_ASSERT_EQUAL(size, sizeof want - 1);
    CU_ASSERT(size == sizeof want - 1 && memcmp(buf, want, size) == 0);
    free(buf);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"temperature and softmax: the drawn distribution", test_temperature_softmax},
        {"top-k keeps k tokens, ties to the lower id", test_top_k_ties},
        {"temperature 0: the argmax", test_argmax},
        {"the per-token uniform", test_uniform},
        {"UTF-8: valid sequences pass", test_utf8_valid},
        {"UTF-8: overlong forms", test_utf8_overlong},
        {"UTF-8: truncated sequences", test_utf8_truncated},
        {"UTF-8: surrogates and beyond U+10FFFF", test_utf8_surrogates_and_range},
        {"UTF-8: stray continuation bytes", test_utf8_stray},
        {"UTF-8: one stream across calls", test_utf8_stream},
        {NULL, NULL},
    };
    return ct_test_run("generate", cases);
}
