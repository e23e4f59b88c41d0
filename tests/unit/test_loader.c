/* Unit tests for the prefetching loader (src/data/loader.c).
 *
 * The reference is the path the loader replaces: ct_sampler_next then
 * ct_dataset_gather in the caller's thread. Every check is bit-exact (memcmp
 * of the floats): the loader must move that work to another thread without
 * changing a bit, at every prefetch depth, across epoch ends (with a data set
 * size that leaves a partial batch to drop), after seeks, and for every rank
 * of many world sizes, whose slices must tile each global batch of the
 * epoch's permutation exactly once, in rank order. Shutdown is tested with
 * the producer blocked on a full ring. The data set is a small IDX pair
 * written into a temporary directory, as in test_dataset.c.
 */
#include "core/error.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/sampler.h"

#include "ct_test.h"

#include <stdint.h>
#include <time.h>



#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"
#define MEAN 0.2860
#define STD 0.3530
/* 103 samples of 3x4 with a global batch of 8: 12 steps and 7 samples
 * dropped per epoch. */
#define N_SAMPLES 103
#define S_H 3
#define S_W 4
#define S_NUMEL (S_H * S_W)
#define G 8
#define SEED 1234u

static char g_dir[256];
static struct ct_dataset g_ds;

static void write_idx(const char *dir, const char *name, int rank, const uint32_t *dims,
                      const uint8_t *payload, size_t len)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_idx(path, rank, dims, payload, len), 0);
}

/* The shared small data set, loaded once per test (bytes differ per sample
 * so that a wrong index shows in x, not only in idx). */
static void ds_open(void)
{
    snprintf(g_dir, sizeof g_dir, "%s", ct_test_tmpdir());
    static uint8_t im[N_SAMPLES * S_NUMEL], lb[N_SAMPLES];
    for (int i = 0; i < N_SAMPLES; i++) {
        lb[i] = (uint8_t)(i % 10);
        for (int k = 0; k < S_NUMEL; k++)
            im[i * S_NUMEL + k] = (uint8_t)(i * 31 + k * 7 + (i >> 3));
    }
    const uint32_t idims[] = {N_SAMPLES, S_H, S_W}, ldims[] = {N_SAMPLES};
    write_idx(g_dir, "images", 3, idims, im, sizeof im);
    write_idx(g_dir, "labels", 1, ldims, lb, sizeof lb);
    int rc = ct_test_open_idx(&g_ds, g_dir, "images", "labels", MEAN, STD, NULL);
    if (rc < 0)
        fprintf(stderr, "\n  %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
}

static void ds_close(void)
{
    ct_dataset_close(&g_ds);
    ct_test_rmtree(g_dir);
}

static struct ct_loader loader_open(const struct ct_dataset *ds, int gb, int world, int rank,
                                    int prefetch)
{
    struct ct_loader l;
    struct ct_loader_params p = {.prefetch = prefetch};
    int rc = ct_loader_init(&l, ds, gb, SEED, world, rank, &p);
    if (rc < 0)
        fprintf(stderr, "\n  %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    return l;
}

/* Is b bit-identical to what the sampler and gather give for the same call?
 * Returns the number of differences (0 = identical). */
static int batch_diff(const struct ct_dataset *ds, const struct ct_batch *b, const uint32_t *idx,
                      int n)
{
    if (b->n != n || memcmp(b->idx, idx, (size_t)n * sizeof *idx) != 0)
        return 1;
    size_t S = ds->sample_numel;
    float *x = ct_test_floats((size_t)n * S);
    int32_t *y = calloc((size_t)n, sizeof *y);
    ct_dataset_gather(ds, idx, (size_t)n, 0, x, y);
    int bad = memcmp(x, b->x, (size_t)n * S * sizeof *x) != 0;
    bad += memcmp(y, b->y, (size_t)n * sizeof *y) != 0;
    free(x);
    free(y);
    return bad;
}

/* `calls` calls of ct_loader_next against ct_sampler_next side by side:
 * return values, positions before and after, and the batches. */
static void check_against_sampler(const struct ct_dataset *ds, int gb, int world, int rank,
                                  int prefetch, int calls)
{
    struct ct_sampler s;
    CU_ASSERT_EQUAL_FATAL(ct_sampler_init(&s, (uint32_t)ds->n, gb, SEED, world, rank), 0);
    struct ct_loader l = loader_open(ds, gb, world, rank, prefetch);
    int bad = 0, ends = 0;
    for (int c = 0; c < calls && !bad; c++) {
        int64_t e = s.epoch, st = s.step;
        bad += ct_loader_epoch(&l) != e || ct_loader_step(&l) != st;
        const uint32_t *idx;
        int n;
        int r = ct_sampler_next(&s, &idx, &n);
        struct ct_batch b;
        int lr = ct_loader_next(&l, &b);
        bad += lr != r || b.epoch != e || b.step != st;
        if (r == 1)
            bad += batch_diff(ds, &b, idx, n);
        else
            ends++, bad += b.n != 0 || b.x != NULL;
        bad += ct_loader_epoch(&l) != s.epoch || ct_loader_step(&l) != s.step;
        if (bad)
            fprintf(stderr, "\n  world %d rank %d prefetch %d: call %d (epoch %lld step %lld) "
                    "differs from the sampler\n", world, rank, prefetch, c, (long long)e,
                    (long long)st);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(ends >= 1);
    ct_loader_free(&l);
    ct_sampler_free(&s);
}

static void test_identity_prefetch_depths(void)
{
    ds_open();
    int64_t spe = ct_sampler_steps_per_epoch(g_ds.n, G);
    CU_ASSERT_EQUAL(spe, 12);
    CU_ASSERT(g_ds.n % G != 0); /* a partial batch is dropped */
    /* Four epochs and a bit: four end markers in the middle of the run. */
    int calls = (int)(4 * (spe + 1) + 3);
    const int depths[] = {0, 1, 2, 4, CT_LOADER_MAX_PREFETCH};
    for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++)
        check_against_sampler(&g_ds, G, 1, 0, depths[i], calls);
    ds_close();
}

/* Every rank of several world sizes against its own sampler, and together:
 * the ranks' slices of each step, in rank order, are exactly that step's
 * global batch of the epoch's permutation. */
static void test_world_rank_slices(void)
{
    ds_open();
    struct {
        int gb, world;
    } cases[] = {{8, 1}, {8, 2}, {8, 4}, {8, 8}, {24, 3}, {24, 6}, {24, 12}, {100, 5}};
    uint32_t *perm = malloc(g_ds.n * sizeof *perm);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int gb = cases[c].gb, W = cases[c].world;
        int64_t spe = ct_sampler_steps_per_epoch(g_ds.n, gb);
        for (int r = 0; r < W; r++)
            check_against_sampler(&g_ds, gb, W, r, r % 3, (int)(2 * (spe + 1) + 1));

        struct ct_loader *l = malloc((size_t)W * sizeof *l);
        for (int r = 0; r < W; r++)
            l[r] = loader_open(&g_ds, gb, W, r, 1 + r % 2);
        uint32_t *got = malloc((size_t)gb * sizeof *got);
        int bad = 0;
        for (int64_t e = 0; e < 3; e++) {
            ct_sampler_permutation(perm, (uint32_t)g_ds.n, SEED, e);
            for (int64_t s = 0; s <= spe; s++) {
                int filled = 0;
                for (int r = 0; r < W; r++) {
                    struct ct_batch b;
                    int rc = ct_loader_next(&l[r], &b);
                    bad += rc != (s < spe);
                    if (rc == 1) {
                        bad += b.n != gb / W || b.epoch != e || b.step != s;
                        memcpy(got + filled, b.idx, (size_t)b.n * sizeof *got);
                        filled += b.n;
                    }
                }
                if (s < spe)
                    bad += filled != gb ||
                           memcmp(got, perm + s * gb, (size_t)gb * sizeof *got) != 0;
            }
        }
        if (bad)
            fprintf(stderr, "\n  global batch %d over %d ranks: slices do not tile\n", gb, W);
        CU_ASSERT_EQUAL(bad, 0);
        for (int r = 0; r < W; r++)
            ct_loader_free(&l[r]);
        free(got);
        free(l);
    }
    free(perm);
    ds_close();
}

/* The batch the sampler gives at (epoch, step) for (world, rank) must be
 * the one the loader hands out next. */
static int next_is(struct ct_loader *l, int world, int rank, int64_t epoch, int64_t step)
{
    struct ct_sampler s;
    CU_ASSERT_EQUAL_FATAL(ct_sampler_init(&s, (uint32_t)g_ds.n, G, SEED, world, rank), 0);
    ct_sampler_seek(&s, epoch, step);
    const uint32_t *idx;
    int n;
    int r = ct_sampler_next(&s, &idx, &n);
    struct ct_batch b;
    int lr = ct_loader_next(l, &b);
    int bad = lr != r || b.epoch != epoch || b.step != step;
    if (r == 1 && lr == 1)
        bad += batch_diff(&g_ds, &b, idx, n);
    bad += ct_loader_epoch(l) != s.epoch || ct_loader_step(l) != s.step;
    ct_sampler_free(&s);
    if (bad)
        fprintf(stderr, "\n  after the seek: not the batch at epoch %lld step %lld\n",
                (long long)epoch, (long long)step);
    return bad;
}

static void test_seek(void)
{
    ds_open();
    int64_t spe = ct_sampler_steps_per_epoch(g_ds.n, G);
    const int depths[] = {0, 1, 2, 4};
    for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
        struct ct_loader l = loader_open(&g_ds, G, 2, 1, depths[i]);
        int bad = 0;
        /* Let the thread run ahead, then jump around: mid-epoch, forward
         * over an epoch, backwards, onto an epoch's end, onto its last step. */
        bad += next_is(&l, 2, 1, 0, 0);
        bad += next_is(&l, 2, 1, 0, 1);
        CU_ASSERT_EQUAL(ct_loader_seek(&l, 1, 5), 0);
        CU_ASSERT(ct_loader_epoch(&l) == 1 && ct_loader_step(&l) == 5);
        bad += next_is(&l, 2, 1, 1, 5);
        bad += next_is(&l, 2, 1, 1, 6);
        CU_ASSERT_EQUAL(ct_loader_seek(&l, 3, 2), 0);
        bad += next_is(&l, 2, 1, 3, 2);
        CU_ASSERT_EQUAL(ct_loader_seek(&l, 0, 7), 0);
        bad += next_is(&l, 2, 1, 0, 7);
        CU_ASSERT_EQUAL(ct_loader_seek(&l, 2, spe), 0);
        CU_ASSERT(ct_loader_epoch(&l) == 2 && ct_loader_step(&l) == spe);
        bad += next_is(&l, 2, 1, 2, spe); /* the end marker of epoch 2 */
        bad += next_is(&l, 2, 1, 3, 0);
        CU_ASSERT_EQUAL(ct_loader_seek(&l, 4, spe - 1), 0);
        bad += next_is(&l, 2, 1, 4, spe - 1);
        bad += next_is(&l, 2, 1, 4, spe);
        bad += next_is(&l, 2, 1, 5, 0);
        CU_ASSERT_EQUAL(ct_loader_seek(&l, 0, 0), 0);
        bad += next_is(&l, 2, 1, 0, 0);

        /* Out-of-range positions are refused and leave the loader as it was. */
        CU_ASSERT_EQUAL(ct_loader_seek(&l, 0, spe + 1), CT_EINVAL);
        CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "cannot seek"));
        CU_ASSERT_EQUAL(ct_loader_seek(&l, -1, 0), CT_EINVAL);
        CU_ASSERT_EQUAL(ct_loader_seek(&l, 0, -1), CT_EINVAL);
        bad += next_is(&l, 2, 1, 0, 1);
        CU_ASSERT_EQUAL(bad, 0);
        ct_loader_free(&l);
    }
    ds_close();
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* Poll until `want` batches are ready (the producer then waits on a full
 * ring); 0 on success. */
static int wait_ready(const struct ct_loader *l, int want)
{
    for (int i = 0; i < 10000; i++) {
        int r = ct_loader_ready(l);
        if (r == want)
            return 0;
        if (r > want)
            return -1;
        sleep_ms(1);
    }
    return -1;
}

static void test_stop_while_full(void)
{
    ds_open();
    /* Freed right away: the producer is starting or mid-batch. */
    for (int i = 0; i < 20; i++) {
        struct ct_loader l = loader_open(&g_ds, G, 1, 0, 1 + i % 4);
        ct_loader_free(&l);
        CU_ASSERT_PTR_NULL(l.impl);
        ct_loader_free(&l); /* twice is harmless */
    }

    struct ct_loader l = loader_open(&g_ds, G, 1, 0, 4);
    /* Never more ready than the depth, even across an epoch end. */
    CU_ASSERT_EQUAL(wait_ready(&l, 4), 0);
    sleep_ms(20);
    CU_ASSERT_EQUAL(ct_loader_ready(&l), 4);
    int bad = next_is(&l, 1, 0, 0, 0);
    /* One held by the caller, four ready: every slot is taken. */
    CU_ASSERT_EQUAL(wait_ready(&l, 4), 0);
    /* A seek stops a producer blocked on the full ring. */
    CU_ASSERT_EQUAL(ct_loader_seek(&l, 0, 10), 0);
    bad += next_is(&l, 1, 0, 0, 10);
    bad += next_is(&l, 1, 0, 0, 11);
    bad += next_is(&l, 1, 0, 0, 12); /* end of epoch 0 */
    bad += next_is(&l, 1, 0, 1, 0);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(wait_ready(&l, 4), 0);
    ct_loader_free(&l); /* and so does free */
    CU_ASSERT_PTR_NULL(l.impl);
    ds_close();
}

static void test_wait_time(void)
{
    ds_open();
    const int depths[] = {0, 2};
    for (size_t i = 0; i < 2; i++) {
        struct ct_loader l = loader_open(&g_ds, G, 1, 0, depths[i]);
        double prev = ct_loader_wait_s(&l);
        CU_ASSERT(prev == 0.0);
        int bad = 0;
        for (int c = 0; c < 40; c++) {
            struct ct_batch b;
            bad += ct_loader_next(&l, &b) < 0;
            double w = ct_loader_wait_s(&l);
            bad += !(w >= prev) || !(w < 60.0);
            prev = w;
        }
        CU_ASSERT_EQUAL(bad, 0);
        ct_loader_free(&l);
    }
    ds_close();
}

static void test_bad_arguments(void)
{
    ds_open();
    struct ct_loader l;
    struct ct_loader_params p = {.prefetch = -1};
    CU_ASSERT_EQUAL(ct_loader_init(&l, &g_ds, G, SEED, 1, 0, &p), CT_EINVAL);
    CU_ASSERT_PTR_NULL(l.impl);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "prefetch = -1"));
    p.prefetch = CT_LOADER_MAX_PREFETCH + 1;
    CU_ASSERT_EQUAL(ct_loader_init(&l, &g_ds, G, SEED, 1, 0, &p), CT_EINVAL);
    p.prefetch = 2;
    CU_ASSERT_EQUAL(ct_loader_init(&l, &g_ds, 7, SEED, 2, 0, &p), CT_EINVAL);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "not divisible by the number of ranks"));
    CU_ASSERT_EQUAL(ct_loader_init(&l, &g_ds, 104, SEED, 1, 0, &p), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_loader_init(&l, &g_ds, G, SEED, 2, 2, &p), CT_EINVAL);
    CU_ASSERT_PTR_NULL(l.impl);
    struct ct_batch b;
    CU_ASSERT_EQUAL(ct_loader_next(&l, &b), CT_ESTATE);
    CU_ASSERT_EQUAL(ct_loader_seek(&l, 0, 0), CT_ESTATE);
    ct_loader_free(&l);
    /* NULL params: the defaults. */
    CU_ASSERT_EQUAL(ct_loader_default_params().prefetch, 2);
    CU_ASSERT_EQUAL(ct_loader_init(&l, &g_ds, G, SEED, 1, 0, NULL), 0);
    CU_ASSERT_EQUAL(ct_loader_steps_per_epoch(&l), 12);
    CU_ASSERT_EQUAL(wait_ready(&l, 2), 0);
    ct_loader_free(&l);
    ds_close();
}

/* The real training images' test split at a real batch size, when the
 * Debian package is installed: one epoch per rank of 4, prefetch 3. */
static void test_fashion_mnist(void)
{
    if (access(FMNIST_DIR "/t10k-images-idx3-ubyte.gz", R_OK) != 0) {
        fprintf(stderr, "(skipped: %s not installed) ", FMNIST_DIR);
        return;
    }
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(ct_test_open_idx(&ds, FMNIST_DIR, "t10k-images-idx3-ubyte.gz",
                                          "t10k-labels-idx1-ubyte.gz", MEAN, STD, NULL),
                          0);
    int64_t spe = ct_sampler_steps_per_epoch(ds.n, 256);
    for (int r = 0; r < 4; r++)
        check_against_sampler(&ds, 256, 4, r, 3, (int)spe + 3);
    ct_dataset_close(&ds);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"identity at prefetch 0, 1, 2, 4, 64 over epoch ends", test_identity_prefetch_depths},
        {"world/rank slices tile every global batch", test_world_rank_slices},
        {"seek mid-epoch, backwards and onto epoch ends", test_seek},
        {"stop and free while the ring is full", test_stop_while_full},
        {"wait time non-negative and non-decreasing", test_wait_time},
        {"bad arguments", test_bad_arguments},
        {"fashion-mnist t10k, 4 ranks", test_fashion_mnist},
        {NULL, NULL},
    };
    return ct_test_run("loader", cases);
}
