/* Unit tests for token shards (src/data/tokens.c): the tokens format of the
 * data set interface, the header check and the shard writer.
 *
 * Dims legend: W = window = T + 1 tokens, T = inputs (and targets) per
 * sample, N = windows over all shards.
 *
 * Shards are written byte by byte here (the header as 256 little-endian
 * int32, then uint16 tokens), not with the writer under test, into a
 * temporary directory, and opened through ct_dataset_open. Checked: the
 * count and shape; the evaluation windows (epoch -1, offset 0); the training
 * windows of several epochs against the offset formula computed here from
 * Philox directly (word % (slack + 1)), that they move between epochs, lie
 * end to end without overlapping, and that the targets are the inputs
 * shifted by one; the global index over several shards; that a gather of
 * the same indices gives the same bytes in any order, any chunking and from
 * two threads at once; format auto; vocab; every refusal by its code and a
 * message naming the file and the field; the node-shared status; the writer
 * (bytes, no temporary file left, refusals).
 */
#include "core/error.h"
#include "core/rng.h"
#include "data/dataset.h"
#include "data/tokens.h"

#include "ct_test.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>

static char tmp[256];

static const char *tpath(const char *name) { return ct_test_path(tmp, name); }

static void put32(uint8_t *b, int32_t v)
{
    for (int k = 0; k < 4; k++)
        b[k] = (uint8_t)((uint32_t)v >> (8 * k));
}

/* A shard of n tokens with header fields (magic, version, count), then
 * `extra` zero bytes. */
static void write_raw(const char *name, const uint16_t *tok, size_t n, int32_t magic,
                      int32_t version, int32_t count, size_t extra)
{
    const size_t len = 1024 + 2 * n + extra;
    uint8_t *b = calloc(len + 1, 1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    put32(b, magic);
    put32(b + 4, version);
    put32(b + 8, count);
    for (size_t i = 0; i < n; i++) {
        b[1024 + 2 * i] = (uint8_t)tok[i];
        b[1024 + 2 * i + 1] = (uint8_t)(tok[i] >> 8);
    }
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath(name), b, len), 0);
    free(b);
}

static void write_shard(const char *name, const uint16_t *tok, size_t n)
{
    write_raw(name, tok, n, 20240520, 1, (int32_t)n, 0);
}

/* Shard `s`'s token i: distinct over shards and positions (s * 4096 + i),
 * so a window's first input says where it starts. */
static uint16_t *pattern(int s, size_t n)
{
    uint16_t *t = malloc((n ? n : 1) * sizeof *t);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    for (size_t i = 0; i < n; i++)
        t[i] = (uint16_t)(s * 4096 + i);
    return t;
}

static struct ct_dataset_params params(const char *images, int window)
{
    struct ct_dataset_params p = ct_dataset_default_params();
    p.format = CT_DATA_FORMAT_TOKENS;
    p.dir = tmp;
    p.images = images;
    p.window = window;
    p.seed = 1234;
    return p;
}

static int open_tokens(struct ct_dataset *ds, const struct ct_dataset_params *p)
{
    ct_error_clear();
    int rc = ct_dataset_open(ds, p);
    if (rc)
        fprintf(stderr, "\n  %s\n", ct_error_message());
    return rc;
}

static void expect_fail_p(const struct ct_dataset_params *p, int code, const char *const *phrases)
{
    struct ct_dataset ds;
    ct_error_clear();
    int rc = ct_dataset_open(&ds, p);
    const char *msg = ct_error_message();
    if (rc != code)
        fprintf(stderr, "\n  %s: got %s, want %s: %s\n", p->images, ct_err_name(rc),
                ct_err_name(code), msg);
    CU_ASSERT_EQUAL(rc, code);
    for (const char *const *ph = phrases; *ph; ph++) {
        if (!strstr(msg, *ph))
            fprintf(stderr, "\n  message lacks \"%s\": %s\n", *ph, msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, *ph));
    }
    static const struct ct_dataset zero;
    CU_ASSERT(memcmp(&ds, &zero, sizeof ds) == 0);
    if (rc == 0)
        ct_dataset_close(&ds);
}

#define EXPECT_FAIL(p, code, ...)                               \
    do {                                                        \
        const char *const phrases_[] = {__VA_ARGS__, NULL};     \
        expect_fail_p((p), (code), phrases_);                   \
    } while (0)

/* The offset of an epoch's first window in a shard of `ntok` tokens, as
 * dataset.h specifies it, computed here without tokens.c. */
static size_t offset_of(uint64_t seed, int64_t epoch, size_t ntok, size_t W)
{
    if (epoch < 0)
        return 0;
    uint32_t r[4];
    const uint64_t e = (uint64_t)epoch;
    ct_rng_block(ct_rng_key(seed, CT_RNG_WINDOW), (const uint32_t[4]){(uint32_t)e, (uint32_t)(e >> 32), 0, 0}, r);
    return r[0] % (ntok - ntok / W * W + 1);
}

/* Checks x, y (n, T) of the samples idx against the shards' tokens at the
 * offsets of `epoch`; returns the number of wrong windows. */
static int check_windows(const struct ct_dataset *ds, const size_t *ntok, int nshards, size_t W,
                         int64_t epoch, const uint32_t *idx, size_t n, const float *x,
                         const int32_t *y)
{
    const size_t T = W - 1;
    int bad = 0;
    for (size_t j = 0; j < n; j++) {
        size_t i = idx[j];
        int s = 0;
        while (s < nshards && i >= ntok[s] / W)
            i -= ntok[s++] / W;
        CU_ASSERT_FATAL(s < nshards);
        const size_t start = offset_of(ds->seed, epoch, ntok[s], W) + i * W;
        int wrong = start + W > ntok[s];
        for (size_t t = 0; t < T; t++) {
            wrong |= x[j * T + t] != (float)(s * 4096 + start + t);
            wrong |= y[j * T + t] != (int32_t)(s * 4096 + start + t + 1);
            /* targets are the inputs shifted by one */
            wrong |= t + 1 < T && y[j * T + t] != (int32_t)x[j * T + t + 1];
        }
        if (wrong && bad < 5)
            fprintf(stderr, "\n  epoch %lld sample %u (shard %d window %zu): x[0] %g, want %zu\n",
                    (long long)epoch, idx[j], s, i, (double)x[j * T], s * 4096 + start);
        bad += wrong;
    }
    return bad;
}

/* One shard of 100 tokens, W = 8: N = 12, slack 4. */
static void test_one_shard(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    uint16_t *t = pattern(0, 100);
    write_shard("a.bin", t, 100);
    struct ct_dataset_params p = params("a.bin", 8);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_tokens(&ds, &p), 0);
    CU_ASSERT_EQUAL(ds.format, CT_DATA_FORMAT_TOKENS);
    CU_ASSERT_PTR_EQUAL(ds.ops, &ct_dataset_tokens_ops);
    CU_ASSERT_EQUAL(ds.n, 12);
    CU_ASSERT_EQUAL(ds.c, 1);
    CU_ASSERT_EQUAL(ds.h, 1);
    CU_ASSERT_EQUAL(ds.w, 7);
    CU_ASSERT_EQUAL(ds.sample_numel, 7);
    CU_ASSERT_EQUAL(ds.targets, 7);
    CU_ASSERT_EQUAL(ds.n_classes, 100); /* 1 + the largest token, 99 */
    CU_ASSERT_EQUAL(ds.dtype, CT_DATA_U16);
    CU_ASSERT_PTR_NULL(ds.y);
    CU_ASSERT_EQUAL_FATAL(ds.n_files, 1);
    CU_ASSERT_STRING_EQUAL(ds.files[0], tpath("a.bin"));
    size_t ntok = 0, nwin = 0;
    const uint16_t *m = ct_tokens_shard(&ds, 0, &ntok, &nwin);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    CU_ASSERT_EQUAL(ntok, 100);
    CU_ASSERT_EQUAL(nwin, 12);
    CU_ASSERT_EQUAL(m[57], 57);
    CU_ASSERT_PTR_NULL(ct_tokens_shard(&ds, 1, NULL, NULL));

    /* evaluation: windows 0, 8, 16, ... from offset 0 */
    float x[12 * 7];
    int32_t y[12 * 7];
    uint32_t idx[12];
    for (uint32_t i = 0; i < 12; i++)
        idx[i] = i;
    const size_t nt[1] = {100};
    ct_dataset_gather_range(&ds, 0, 12, x, y);
    CU_ASSERT_EQUAL(check_windows(&ds, nt, 1, 8, -1, idx, 12, x, y), 0);
    CU_ASSERT_EQUAL(x[0], 0.0f);
    CU_ASSERT_EQUAL(y[0], 1);
    CU_ASSERT_EQUAL(x[11 * 7 + 6], 94.0f);
    CU_ASSERT_EQUAL(y[11 * 7 + 6], 95);
    ct_dataset_gather_range(&ds, 5, 2, x, y);
    CU_ASSERT_EQUAL(check_windows(&ds, nt, 1, 8, -1, idx + 5, 2, x, y), 0);
    CU_ASSERT_EQUAL(x[0], 40.0f);
    /* the gather with epoch -1 is the same layout */
    ct_dataset_gather(&ds, idx, 12, -1, x, y);
    CU_ASSERT_EQUAL(check_windows(&ds, nt, 1, 8, -1, idx, 12, x, y), 0);

    /* training epochs: each at its own offset, windows end to end */
    size_t offs[16];
    int moved = 0;
    for (int64_t e = 0; e < 16; e++) {
        ct_dataset_gather(&ds, idx, 12, e, x, y);
        CU_ASSERT_EQUAL(check_windows(&ds, nt, 1, 8, e, idx, 12, x, y), 0);
        offs[e] = (size_t)x[0];
        CU_ASSERT(offs[e] <= 4);
        for (int j = 1; j < 12; j++) /* end to end: no overlap, no gap */
            CU_ASSERT_EQUAL((size_t)x[j * 7] - (size_t)x[(j - 1) * 7], 8);
        moved += e > 0 && offs[e] != offs[e - 1];
    }
    CU_ASSERT(moved > 0);
    /* a large epoch uses the counter's high word */
    const int64_t big = ((int64_t)1 << 33) + 5;
    ct_dataset_gather(&ds, idx, 12, big, x, y);
    CU_ASSERT_EQUAL(check_windows(&ds, nt, 1, 8, big, idx, 12, x, y), 0);
    ct_dataset_close(&ds);

    /* another seed gives other offsets */
    int differ = 0;
    for (uint64_t seed = 1; seed < 9; seed++)
        differ |= offset_of(seed, 0, 100, 8) != offset_of(1234, 0, 100, 8);
    CU_ASSERT(differ);

    /* format auto finds a shard by its magic; the offset formula follows the seed */
    p.format = CT_DATA_FORMAT_AUTO;
    p.seed = 99;
    CU_ASSERT_EQUAL_FATAL(open_tokens(&ds, &p), 0);
    CU_ASSERT_EQUAL(ds.format, CT_DATA_FORMAT_TOKENS);
    CU_ASSERT_EQUAL(ds.seed, 99);
    ct_dataset_gather(&ds, idx, 12, 3, x, y);
    CU_ASSERT_EQUAL(check_windows(&ds, nt, 1, 8, 3, idx, 12, x, y), 0);
    ct_dataset_close(&ds);
    enum ct_data_format f = CT_DATA_FORMAT_AUTO;
    CU_ASSERT_EQUAL(ct_data_format_detect(tpath("a.bin"), &f), 0);
    CU_ASSERT_EQUAL(f, CT_DATA_FORMAT_TOKENS);

    /* exactly one window, and vocab given */
    write_shard("w.bin", t, 8);
    p = params("w.bin", 8);
    p.vocab = 256;
    CU_ASSERT_EQUAL_FATAL(open_tokens(&ds, &p), 0);
    CU_ASSERT_EQUAL(ds.n, 1);
    CU_ASSERT_EQUAL(ds.n_classes, 256);
    for (int64_t e = -1; e < 4; e++) {
        ct_dataset_gather(&ds, idx, 1, e, x, y);
        CU_ASSERT_EQUAL(x[0], 0.0f); /* no slack: offset 0 every epoch */
        CU_ASSERT_EQUAL(y[6], 7);
    }
    ct_dataset_close(&ds);
    free(t);
    ct_test_rmtree(tmp);
}

/* Shards of 50, 33 and 16 tokens, W = 8: 6 + 4 + 2 = 12 windows, slack 2,
 * 1 and 0. */
static void test_three_shards(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    const size_t nt[3] = {50, 33, 16};
    for (int s = 0; s < 3; s++) {
        uint16_t *t = pattern(s, nt[s]);
        char name[16];
        snprintf(name, sizeof name, "s%d.bin", s);
        write_shard(name, t, nt[s]);
        free(t);
    }
    struct ct_dataset_params p = params("s0.bin, s1.bin ,s2.bin", 8);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_tokens(&ds, &p), 0);
    CU_ASSERT_EQUAL(ds.n, 12);
    CU_ASSERT_EQUAL(ds.n_classes, 2 * 4096 + 16);
    CU_ASSERT_EQUAL_FATAL(ds.n_files, 3);
    CU_ASSERT_STRING_EQUAL(ds.files[2], tpath("s2.bin"));
    float x[12 * 7];
    int32_t y[12 * 7];
    uint32_t idx[12];
    for (uint32_t i = 0; i < 12; i++)
        idx[i] = i;
    for (int64_t e = -1; e < 8; e++) {
        ct_dataset_gather(&ds, idx, 12, e, x, y);
        CU_ASSERT_EQUAL(check_windows(&ds, nt, 3, 8, e, idx, 12, x, y), 0);
    }
    /* sample 6 is shard 1's first window; sample 10 shard 2's */
    ct_dataset_gather_range(&ds, 6, 1, x, y);
    CU_ASSERT_EQUAL(x[0], 4096.0f);
    ct_dataset_gather_range(&ds, 10, 2, x, y);
    CU_ASSERT_EQUAL(x[0], 8192.0f);
    CU_ASSERT_EQUAL(x[7], 8200.0f);
    ct_dataset_close(&ds);
    ct_test_rmtree(tmp);
}

/* The same indices in any order and any chunking give the same windows;
 * gather_range past its 256-index chunk agrees with the epoch -1 gather. */
static void test_order_and_chunks(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    const size_t nt[2] = {1000, 700}; /* W = 3: 333 + 233 windows */
    for (int s = 0; s < 2; s++) {
        uint16_t *t = pattern(s, nt[s]);
        write_shard(s ? "b.bin" : "a.bin", t, nt[s]);
        free(t);
    }
    struct ct_dataset_params p = params("a.bin,b.bin", 3);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_tokens(&ds, &p), 0);
    const size_t N = ds.n, T = 2;
    CU_ASSERT_EQUAL_FATAL(N, 566);
    float *x = ct_test_floats(N * T), *x2 = ct_test_floats(N * T);
    int32_t *y = calloc(N * T, sizeof *y), *y2 = calloc(N * T, sizeof *y2);
    uint32_t *idx = malloc(N * sizeof *idx), *perm = malloc(N * sizeof *perm);
    CU_ASSERT_FATAL(y && y2 && idx && perm);
    for (size_t i = 0; i < N; i++)
        idx[i] = (uint32_t)i;
    /* a permutation: i -> 17 i + 5 mod 566 (17 is coprime with 566 = 2 x 283) */
    for (size_t i = 0; i < N; i++)
        perm[i] = (uint32_t)((i * 17 + 5) % N);
    for (int64_t e = -1; e < 3; e++) {
        ct_dataset_gather(&ds, idx, N, e, x, y);
        CU_ASSERT_EQUAL(check_windows(&ds, nt, 2, 3, e, idx, N, x, y), 0);
        /* permuted, in chunks of 1, 7, 300: each row where its index says */
        const size_t chunks[3] = {1, 7, 300};
        for (int c = 0; c < 3; c++) {
            for (size_t at = 0; at < N; at += chunks[c]) {
                const size_t m = N - at < chunks[c] ? N - at : chunks[c];
                ct_dataset_gather(&ds, perm + at, m, e, x2 + at * T, y2 + at * T);
            }
            int bad = 0;
            for (size_t i = 0; i < N; i++)
                bad += memcmp(x2 + i * T, x + (size_t)perm[i] * T, T * sizeof *x) != 0 ||
                       memcmp(y2 + i * T, y + (size_t)perm[i] * T, T * sizeof *y) != 0;
            CU_ASSERT_EQUAL(bad, 0);
        }
    }
    /* gather_range over all (three 256-index chunks) = the epoch -1 gather */
    ct_dataset_gather(&ds, idx, N, -1, x, y);
    ct_dataset_gather_range(&ds, 0, N, x2, y2);
    CU_ASSERT(memcmp(x, x2, N * T * sizeof *x) == 0);
    CU_ASSERT(memcmp(y, y2, N * T * sizeof *y) == 0);
    ct_dataset_gather_range(&ds, 300, 266, x2, y2);
    CU_ASSERT(memcmp(x + 300 * T, x2, 266 * T * sizeof *x) == 0);
    CU_ASSERT(memcmp(y + 300 * T, y2, 266 * T * sizeof *y) == 0);
    ct_dataset_gather_range(&ds, 0, 0, NULL, NULL); /* empty: touches nothing */
    free(x);
    free(x2);
    free(y);
    free(y2);
    free(idx);
    free(perm);
    ct_dataset_close(&ds);
    ct_test_rmtree(tmp);
}

/* Two threads gathering at once (the loader thread's gather beside the main
 * thread's gather_range) get what one thread gets. */
struct gather_job {
    const struct ct_dataset *ds;
    int64_t epoch;
    int bad;
};

static void *gather_thread(void *arg)
{
    struct gather_job *job = arg;
    const struct ct_dataset *ds = job->ds;
    const size_t N = ds->n, T = ds->sample_numel;
    float *x = malloc(N * T * sizeof *x), *ref = malloc(N * T * sizeof *ref);
    int32_t *y = malloc(N * T * sizeof *y), *yref = malloc(N * T * sizeof *yref);
    uint32_t *idx = malloc(N * sizeof *idx);
    if (!x || !ref || !y || !yref || !idx)
        abort();
    for (size_t i = 0; i < N; i++)
        idx[i] = (uint32_t)i;
    if (job->epoch < 0)
        ct_dataset_gather_range(ds, 0, N, ref, yref);
    else
        ct_dataset_gather(ds, idx, N, job->epoch, ref, yref);
    for (int rep = 0; rep < 200; rep++) {
        if (job->epoch < 0)
            ct_dataset_gather_range(ds, 0, N, x, y);
        else
            ct_dataset_gather(ds, idx, N, job->epoch, x, y);
        job->bad += memcmp(x, ref, N * T * sizeof *x) != 0 || memcmp(y, yref, N * T * sizeof *y) != 0;
    }
    free(x);
    free(ref);
    free(y);
    free(yref);
    free(idx);
    return NULL;
}

static void test_threads(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    uint16_t *t = pattern(1, 3000);
    write_shard("a.bin", t, 3000);
    free(t);
    struct ct_dataset_params p = params("a.bin", 17);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_tokens(&ds, &p), 0);
    struct gather_job jobs[2] = {{&ds, 7, 0}, {&ds, -1, 0}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        CU_ASSERT_EQUAL_FATAL(pthread_create(&th[i], NULL, gather_thread, &jobs[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    CU_ASSERT_EQUAL(jobs[0].bad, 0);
    CU_ASSERT_EQUAL(jobs[1].bad, 0);
    ct_dataset_close(&ds);
    ct_test_rmtree(tmp);
}

static void test_refusals(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    uint16_t *t = pattern(0, 64);
    write_shard("ok.bin", t, 64);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("short.bin"), "\x88\xD8\x34\x01", 4), 0);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(tpath("empty.bin"), "", 0), 0);
    write_raw("magic.bin", t, 64, 20240521, 1, 64, 0);
    write_raw("v2.bin", t, 64, 20240520, 2, 64, 0);
    write_raw("v0.bin", t, 64, 20240520, 0, 64, 0);
    write_raw("count.bin", t, 64, 20240520, 1, 100, 0);
    write_raw("odd.bin", t, 64, 20240520, 1, 64, 1);
    write_raw("neg.bin", t, 64, 20240520, 1, -1, 0);
    write_shard("small.bin", t, 7);
    t[40] = 300;
    t[50] = 400;
    write_shard("big.bin", t, 64);

    struct ct_dataset_params p = params("short.bin", 8);
    EXPECT_FAIL(&p, CT_EFORMAT, tpath("short.bin: 4 bytes"), "1024-byte header");
    p.images = "empty.bin";
    EXPECT_FAIL(&p, CT_EFORMAT, tpath("empty.bin: 0 bytes"), "header");
    p.images = "ok.bin,magic.bin";
    EXPECT_FAIL(&p, CT_EFORMAT, tpath("magic.bin: not a token shard"), "header[0] (magic) is 20240521",
                "expected 20240520");
    p.images = "v2.bin";
    EXPECT_FAIL(&p, CT_EFORMAT, tpath("v2.bin: "), "header[1] (version) is 2, expected 1", "uint32");
    p.images = "v0.bin";
    EXPECT_FAIL(&p, CT_EFORMAT, tpath("v0.bin: "), "header[1] (version) is 0, expected 1");
    p.images = "count.bin";
    EXPECT_FAIL(&p, CT_EFORMAT, tpath("count.bin: "), "header[2] (token count) is 100",
                "1152 bytes", "expected 1024 + 2 x count = 1224 bytes", "64 whole tokens");
    p.images = "odd.bin";
    EXPECT_FAIL(&p, CT_EFORMAT, tpath("odd.bin: "), "header[2] (token count) is 64", "1153 bytes",
                "an odd byte");
    p.images = "neg.bin";
    EXPECT_FAIL(&p, CT_EFORMAT, tpath("neg.bin: "), "header[2] (token count) is -1");
    p.images = "ok.bin,small.bin";
    EXPECT_FAIL(&p, CT_EFORMAT, tpath("small.bin: 7 tokens"), "fewer than one window of 8");
    p.images = "big.bin";
    p.vocab = 256;
    EXPECT_FAIL(&p, CT_EFORMAT, tpath("big.bin: token 40 "), "byte offset 1104", "is 300",
                "data.vocab = 256");
    p.vocab = 0; /* without a vocabulary, the largest token makes it */
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_tokens(&ds, &p), 0);
    CU_ASSERT_EQUAL(ds.n_classes, 401);
    ct_dataset_close(&ds);
    p.images = "ok.bin,missing.bin";
    EXPECT_FAIL(&p, CT_ENOENT, tpath("missing.bin: "));

    /* the params */
    p = params("ok.bin", 1);
    EXPECT_FAIL(&p, CT_EINVAL, "ok.bin", "window of 1 tokens", "at least 2");
    p.window = 0;
    EXPECT_FAIL(&p, CT_EINVAL, "window of 0 tokens");
    p = params("ok.bin", 8);
    p.labels = "y.bin";
    EXPECT_FAIL(&p, CT_EINVAL, "data.train_labels/test_labels must be empty for tokens", "'y.bin'");
    p = params("ok.bin", 8);
    p.augment = CT_DATA_AUGMENT_CROP_FLIP;
    EXPECT_FAIL(&p, CT_EINVAL, "ok.bin", "data.augment = crop_flip");
    p = params("", 8);
    EXPECT_FAIL(&p, CT_EINVAL, "no token shard");
    p = params("ok.bin,,ok.bin", 8);
    EXPECT_FAIL(&p, CT_EINVAL, "an empty file name");
    /* format auto: a list names both formats that take one */
    p = params("ok.bin,ok.bin", 8);
    p.format = CT_DATA_FORMAT_AUTO;
    EXPECT_FAIL(&p, CT_EINVAL, "only cifar10 and tokens");
    /* header alone */
    struct ct_tokens_header h;
    CU_ASSERT_EQUAL(ct_tokens_read_header(tpath("ok.bin"), &h), 0);
    CU_ASSERT_EQUAL(h.count, 64);
    CU_ASSERT_EQUAL(h.version, 1);
    CU_ASSERT_EQUAL(ct_tokens_read_header(tpath("count.bin"), &h), CT_EFORMAT);
    CU_ASSERT_EQUAL(ct_tokens_read_header(tpath("short.bin"), &h), CT_EFORMAT);
    CU_ASSERT_EQUAL(ct_tokens_read_header(tpath("missing.bin"), &h), CT_ENOENT);
    free(t);
    ct_test_rmtree(tmp);
}

/* The writer: llm.c's bytes, nothing left beside the file, refusals. */
static void test_writer(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    const uint16_t tok[5] = {0, 1, 255, 256, 65535};
    CU_ASSERT_EQUAL_FATAL(ct_tokens_write(tpath("w.bin"), tok, 5), 0);
    size_t len;
    uint8_t *b = ct_test_read_file(tpath("w.bin"), &len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(len, 1024 + 10);
    static const uint8_t head[12] = {0x88, 0xD8, 0x34, 0x01, 1, 0, 0, 0, 5, 0, 0, 0};
    CU_ASSERT(memcmp(b, head, 12) == 0); /* 20240520 = 0x0134D888 */
    int nonzero = 0;
    for (size_t i = 12; i < 1024; i++)
        nonzero += b[i] != 0;
    CU_ASSERT_EQUAL(nonzero, 0);
    static const uint8_t body[10] = {0, 0, 1, 0, 255, 0, 0, 1, 255, 255};
    CU_ASSERT(memcmp(b + 1024, body, 10) == 0);
    free(b);
    /* it reads back through the data set */
    struct ct_dataset_params p = params("w.bin", 5);
    struct ct_dataset ds;
    CU_ASSERT_EQUAL_FATAL(open_tokens(&ds, &p), 0);
    float x[4];
    int32_t y[4];
    ct_dataset_gather_range(&ds, 0, 1, x, y);
    CU_ASSERT_EQUAL(x[3], 256.0f);
    CU_ASSERT_EQUAL(y[3], 65535);
    CU_ASSERT_EQUAL(ds.n_classes, 65536);
    ct_dataset_close(&ds);

    /* a writer that puts fewer or more tokens than promised leaves nothing */
    struct ct_tokens_writer w;
    CU_ASSERT_EQUAL_FATAL(ct_tokens_writer_open(&w, tpath("x.bin"), 3), 0);
    CU_ASSERT_EQUAL(ct_tokens_writer_put(&w, tok, 2), 0);
    CU_ASSERT_EQUAL(ct_tokens_writer_put(&w, tok, 2), CT_ERANGE);
    CU_ASSERT_EQUAL(ct_tokens_writer_commit(&w), CT_ESTATE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "2 tokens written"));
    CU_ASSERT_EQUAL(access(tpath("x.bin"), F_OK), -1);
    CU_ASSERT_EQUAL(ct_tokens_writer_open(&w, tpath("x.bin"), (uint64_t)INT32_MAX + 1), CT_ERANGE);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "at most 2147483647"));
    CU_ASSERT_EQUAL(ct_tokens_write(tpath("no/such/dir.bin"), tok, 5), CT_EIO);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), "no/such/dir.bin"));
    /* replacing a shard: the new content, and only w.bin in the directory */
    CU_ASSERT_EQUAL(ct_tokens_write(tpath("w.bin"), tok + 1, 2), 0);
    b = ct_test_read_file(tpath("w.bin"), &len);
    CU_ASSERT_EQUAL(len, 1024 + 4);
    free(b);
    DIR *d = opendir(tmp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));)
        if (e->d_name[0] != '.') {
            files++;
            CU_ASSERT_STRING_EQUAL(e->d_name, "w.bin");
        }
    closedir(d);
    CU_ASSERT_EQUAL(files, 1);
    ct_test_rmtree(tmp);
}

/* A node-shared open agrees its status once through ready(); a failure on
 * another rank releases the mapped shards here. */
static int ready_calls, ready_fail;

static int fake_ready(void *ctx, int rc)
{
    (void)ctx;
    ready_calls++;
    if (rc == 0 && ready_fail)
        return ct_error_set(CT_EIO, "rank 1: another rank failed");
    return rc;
}

static void test_shared_status(void)
{
    snprintf(tmp, sizeof tmp, "%s", ct_test_tmpdir());
    uint16_t *t = pattern(0, 40);
    write_shard("a.bin", t, 40);
    free(t);
    const struct ct_shared_alloc sh = {.ready = fake_ready};
    struct ct_dataset_params p = params("a.bin,a.bin", 4);
    p.shared = &sh;
    struct ct_dataset ds;
    ready_calls = 0, ready_fail = 0;
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), 0);
    CU_ASSERT_EQUAL(ready_calls, 1);
    CU_ASSERT_EQUAL(ds.n, 20);
    ct_dataset_close(&ds);
    ready_calls = 0, ready_fail = 1;
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), CT_EIO);
    CU_ASSERT_EQUAL(ready_calls, 1);
    ready_calls = 0, ready_fail = 0;
    p.images = "a.bin,missing.bin";
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), CT_ENOENT);
    CU_ASSERT_EQUAL(ready_calls, 1);
    p.images = "a.bin";
    p.window = 1; /* refused before any file: still one agreement */
    CU_ASSERT_EQUAL(ct_dataset_open(&ds, &p), CT_EINVAL);
    CU_ASSERT_EQUAL(ready_calls, 2);
    ct_test_rmtree(tmp);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"one shard: shape, evaluation and epoch windows", test_one_shard},
        {"three shards: the global index", test_three_shards},
        {"any order, any chunking, gather_range chunks", test_order_and_chunks},
        {"two threads gathering at once", test_threads},
        {"refusals name the file and the field", test_refusals},
        {"the shard writer", test_writer},
        {"node-shared open: one agreed status", test_shared_status},
        {NULL, NULL},
    };
    return ct_test_run("tokens", cases);
}
