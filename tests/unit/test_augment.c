/* Deterministic augmentation (src/data/dataset.h: crop_flip).
 *
 * - ct_augment_crop_flip_apply against NumPy's numpy.pad + window +
 *   [:, :, ::-1], every offset and both flips (tests/fixtures/augment/
 *   crop_flip.txt, made by make_augment.py beside it);
 * - and against a C reference that does the same: build the padded image,
 *   take the (H, W) window at (dy, dx), reverse the columns; every offset
 *   and both flips, odd sizes, several channels, a per-channel fill;
 * - a written-out example;
 * - the draws: a pure function of (seed, epoch, sample), every offset in
 *   [0, 2 pad] reached and no other, flips about half, other epochs and
 *   seeds give other draws;
 * - the gather: a training gather with crop_flip equals the normalized
 *   sample cropped and flipped by the drawn offsets, padded with the
 *   normalized value of a stored 0; the same for any order and batching of
 *   the indices; evaluation gathers (gather_range) never augment.
 *
 * Dims legend: C channels, H height, W width, P padding.
 */
#include <math.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ct_test.h"
#include "data/dataset.h"

/* The reference: padded (C, H + 2P, W + 2P) image, window, column reversal. */
static void reference(float *out, const float *in, int C, int H, int W, int P, int dy, int dx,
                      int flip, const float *fill)
{
    const int HP = H + 2 * P, WP = W + 2 * P;
    float *padded = malloc((size_t)C * HP * WP * sizeof *padded);
    for (int c = 0; c < C; c++)
        for (int y = 0; y < HP; y++)
            for (int x = 0; x < WP; x++) {
                const int iy = y - P, ix = x - P;
                padded[((size_t)c * HP + y) * WP + x] =
                    iy >= 0 && iy < H && ix >= 0 && ix < W ? in[((size_t)c * H + iy) * W + ix]
                                                           : fill[c];
            }
    for (int c = 0; c < C; c++)
        for (int y = 0; y < H; y++) {
            float *row = out + ((size_t)c * H + y) * W;
            for (int x = 0; x < W; x++)
                row[x] = padded[((size_t)c * HP + y + dy) * WP + x + dx];
            if (flip)
                for (int a = 0, b = W - 1; a < b; a++, b--) {
                    const float t = row[a];
                    row[a] = row[b];
                    row[b] = t;
                }
        }
    free(padded);
}

/* The NumPy-made cases (tests/fixtures/augment/make_augment.py). */
static void test_apply_vs_numpy(void)
{
    FILE *f = fopen(CT_FIXTURE_DIR "/augment/crop_flip.txt", "r");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    int C, H, W, P;
    CU_ASSERT_EQUAL_FATAL(fscanf(f, "%d %d %d %d", &C, &H, &W, &P), 4);
    CU_ASSERT_FATAL(C >= 1 && C <= 4 && H > 0 && W > 0 && H * W <= 4096);
    const size_t n = (size_t)C * H * W;
    float fill[4], *in = malloc(n * sizeof *in), *want = malloc(n * sizeof *want),
                   *got = malloc(n * sizeof *got);
    int ok = 1;
    for (int c = 0; c < C; c++)
        ok &= fscanf(f, "%f", &fill[c]) == 1;
    for (size_t i = 0; i < n; i++)
        ok &= fscanf(f, "%f", &in[i]) == 1;
    CU_ASSERT_FATAL(ok);
    int cases = 0, bad = 0, dy, dx, flip;
    while (fscanf(f, "%d %d %d", &dy, &dx, &flip) == 3) {
        for (size_t i = 0; i < n; i++)
            ok &= fscanf(f, "%f", &want[i]) == 1;
        ct_augment_crop_flip_apply(got, in, C, H, W, P, dy, dx, flip, fill);
        if (memcmp(got, want, n * sizeof *got) != 0 && bad++ < 3)
            fprintf(stderr, "\n  numpy case dy %d dx %d flip %d differs", dy, dx, flip);
        cases++;
    }
    fclose(f);
    CU_ASSERT(ok);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(cases, (2 * P + 1) * (2 * P + 1) * 2);
    free(in);
    free(want);
    free(got);
}

static void test_apply_vs_reference(void)
{
    static const int shapes[][4] = {{1, 5, 7, 2}, {3, 8, 8, 4}, {2, 3, 9, 1}, {4, 6, 5, 3}, {1, 4, 4, 0}};
    int bad = 0, cases = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int C = shapes[s][0], H = shapes[s][1], W = shapes[s][2], P = shapes[s][3];
        const size_t n = (size_t)C * H * W;
        float *in = malloc(n * sizeof *in), *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        for (size_t i = 0; i < n; i++)
            in[i] = (float)i * 0.5f - 3.0f;
        const float fill[4] = {-1.25f, 7.0f, 0.0f, 2.5f};
        for (int dy = 0; dy <= 2 * P; dy++)
            for (int dx = 0; dx <= 2 * P; dx++)
                for (int flip = 0; flip < 2; flip++) {
                    ct_augment_crop_flip_apply(a, in, C, H, W, P, dy, dx, flip, fill);
                    reference(b, in, C, H, W, P, dy, dx, flip, fill);
                    if (memcmp(a, b, n * sizeof *a) != 0 && bad++ < 3)
                        fprintf(stderr, "\n  C%d H%d W%d P%d dy %d dx %d flip %d differs", C, H, W,
                                P, dy, dx, flip);
                    cases++;
                }
        free(in);
        free(a);
        free(b);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(cases > 100);
}

/* One channel, 2 x 3, padding 1: the window at (0, 2), flipped.
 *   padded:  f f f f f      window rows 0-1, columns 2-4:  f f f   flip:  f f f
 *            f 1 2 3 f                                     2 3 f          f 3 2
 *            f 4 5 6 f */
static void test_apply_written_out(void)
{
    const float in[6] = {1, 2, 3, 4, 5, 6}, fill[1] = {9};
    float out[6];
    ct_augment_crop_flip_apply(out, in, 1, 2, 3, 1, 0, 2, 1, fill);
    const float want[6] = {9, 9, 9, 9, 3, 2};
    CU_ASSERT_EQUAL(memcmp(out, want, sizeof want), 0);
    /* No padding, no flip: the identity. NULL fill: zeros. */
    ct_augment_crop_flip_apply(out, in, 1, 2, 3, 0, 0, 0, 0, NULL);
    CU_ASSERT_EQUAL(memcmp(out, in, sizeof in), 0);
    ct_augment_crop_flip_apply(out, in, 1, 2, 3, 1, 2, 0, 0, NULL);
    const float down[6] = {0, 4, 5, 0, 0, 0};
    CU_ASSERT_EQUAL(memcmp(out, down, sizeof down), 0);
}

static void test_draws(void)
{
    const int P = 4;
    int seen_dy[9] = {0}, seen_dx[9] = {0}, flips = 0, out_of_range = 0, differ_epoch = 0,
        differ_seed = 0;
    const int n = 4000;
    for (uint32_t i = 0; i < (uint32_t)n; i++) {
        int dy, dx, flip, dy2, dx2, flip2;
        ct_augment_crop_flip_draw(7, 3, i, P, &dy, &dx, &flip);
        ct_augment_crop_flip_draw(7, 3, i, P, &dy2, &dx2, &flip2);
        out_of_range += dy < 0 || dy > 2 * P || dx < 0 || dx > 2 * P || (flip != 0 && flip != 1);
        out_of_range += dy != dy2 || dx != dx2 || flip != flip2; /* pure */
        if (dy >= 0 && dy <= 2 * P && dx >= 0 && dx <= 2 * P) {
            seen_dy[dy]++;
            seen_dx[dx]++;
        }
        flips += flip;
        ct_augment_crop_flip_draw(7, 4, i, P, &dy2, &dx2, &flip2);
        differ_epoch += dy != dy2 || dx != dx2 || flip != flip2;
        ct_augment_crop_flip_draw(8, 3, i, P, &dy2, &dx2, &flip2);
        differ_seed += dy != dy2 || dx != dx2 || flip != flip2;
    }
    CU_ASSERT_EQUAL(out_of_range, 0);
    for (int k = 0; k <= 2 * P; k++) {
        /* n / 9 = 444 expected; 5 sigma is about 100. */
        CU_ASSERT(seen_dy[k] > 330 && seen_dy[k] < 560);
        CU_ASSERT(seen_dx[k] > 330 && seen_dx[k] < 560);
    }
    CU_ASSERT(flips > n / 2 - 160 && flips < n / 2 + 160);
    CU_ASSERT(differ_epoch > n * 8 / 10);
    CU_ASSERT(differ_seed > n * 8 / 10);
    /* Padding 0: the only crop is the image itself. */
    int dy, dx, flip;
    ct_augment_crop_flip_draw(1, 0, 5, 0, &dy, &dx, &flip);
    CU_ASSERT(dy == 0 && dx == 0);
}

#define N 6
#define CH 3
#define HH 4
#define WW 5

/* A 3-channel IDX set (rank 4: (N, C, H, W)) with labels. */
static int open_set(struct ct_dataset *ds, const char *dir, int augment)
{
    struct ct_dataset_params p = ct_dataset_default_params();
    p.dir = dir;
    p.images = "images";
    p.labels = "labels";
    p.n_mean = CH;
    const double mean[CH] = {0.25, 0.5, 0.125}, std[CH] = {0.5, 0.25, 2.0};
    for (int c = 0; c < CH; c++) {
        p.mean[c] = mean[c];
        p.std[c] = std[c];
    }
    p.augment = augment ? CT_DATA_AUGMENT_CROP_FLIP : CT_DATA_AUGMENT_NONE;
    p.crop_pad = 2;
    p.seed = 42;
    return ct_dataset_open(ds, &p);
}

static void test_gather(void)
{
    const char *dir = ct_test_tmpdir();
    static uint8_t im[N * CH * HH * WW], lb[N];
    for (size_t i = 0; i < sizeof im; i++)
        im[i] = (uint8_t)(i * 37 + 11);
    for (int i = 0; i < N; i++)
        lb[i] = (uint8_t)(i % 4);
    char path[600];
    const uint32_t idims[4] = {N, CH, HH, WW}, ldims[1] = {N};
    snprintf(path, sizeof path, "%s/images", dir);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_idx(path, 4, idims, im, sizeof im), 0);
    snprintf(path, sizeof path, "%s/labels", dir);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_idx(path, 1, ldims, lb, sizeof lb), 0);

    struct ct_dataset aug, plain;
    CU_ASSERT_EQUAL_FATAL(open_set(&aug, dir, 1), 0);
    CU_ASSERT_EQUAL_FATAL(open_set(&plain, dir, 0), 0);
    enum { S = CH * HH * WW };
    float x[N * S], ref[N * S], norm[S];
    int32_t y[N], yr[N];
    const uint32_t idx[N] = {4, 0, 5, 2, 1, 3};
    const int64_t epoch = 9;
    ct_dataset_gather(&aug, idx, N, epoch, x, y);
    int bad = 0;
    for (int i = 0; i < N; i++) {
        /* The normalized sample (an unaugmented gather), then the crop. */
        ct_dataset_gather_range(&plain, idx[i], 1, norm, yr);
        int dy, dx, flip;
        ct_augment_crop_flip_draw(42, epoch, idx[i], 2, &dy, &dx, &flip);
        float fill[CH];
        for (int c = 0; c < CH; c++)
            fill[c] = plain.lut[c][0];
        reference(ref + i * S, norm, CH, HH, WW, 2, dy, dx, flip, fill);
        bad += memcmp(x + i * S, ref + i * S, S * sizeof(float)) != 0;
        CU_ASSERT_EQUAL(y[i], lb[idx[i]]);
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* Any batching and order: one sample at a time, reversed. */
    for (int i = N - 1; i >= 0; i--) {
        float one[S];
        int32_t y1;
        ct_dataset_gather(&aug, &idx[i], 1, epoch, one, &y1);
        CU_ASSERT_EQUAL(memcmp(one, x + i * S, sizeof one), 0);
    }
    /* Evaluation: the augmented set's range gather is the plain one. */
    float e1[N * S], e2[N * S];
    ct_dataset_gather_range(&aug, 0, N, e1, y);
    ct_dataset_gather_range(&plain, 0, N, e2, yr);
    CU_ASSERT_EQUAL(memcmp(e1, e2, sizeof e1), 0);
    /* Another epoch moves at least one crop. */
    float x2[N * S];
    ct_dataset_gather(&aug, idx, N, epoch + 1, x2, y);
    CU_ASSERT(memcmp(x, x2, sizeof x) != 0);
    ct_dataset_close(&aug);
    ct_dataset_close(&plain);
    ct_test_rmtree(dir);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"crop_flip apply vs NumPy's pad/window/flip", test_apply_vs_numpy},
        {"crop_flip apply vs padded-window reference", test_apply_vs_reference},
        {"crop_flip apply, written out", test_apply_written_out},
        {"crop_flip draws: pure, in range, uniform", test_draws},
        {"gather with crop_flip: normalized, cropped, batching-free; eval never", test_gather},
        {NULL, NULL},
    };
    return ct_test_run("augment", cases);
}
