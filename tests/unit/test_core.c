/* Core: error codes and messages, Philox wrapper, SHA-256, layouts, flat
 * buffers, the non-finite scan, the arena and /proc/PID/stat. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/error.h"
#include "core/proc.h"
#include "core/rng.h"
#include "core/sha256.h"
#include "core/tensor.h"
#include "ct_test.h"

static void test_error_names(void)
{
    CU_ASSERT_STRING_EQUAL(ct_err_name(CT_EFORMAT), "CT_EFORMAT");
    CU_ASSERT_STRING_EQUAL(ct_strerror(CT_EFORMAT), "malformed file");
    CU_ASSERT_STRING_EQUAL(ct_err_name(0), "CT_OK");
    CU_ASSERT_STRING_EQUAL(ct_strerror(12345), "unknown error");
    /* Every code has a distinct name. */
    static const int codes[] = {
#define X(name, code, text) code,
        CT_ERROR_MAP(X)
#undef X
    };
    for (size_t i = 0; i < sizeof codes / sizeof *codes; i++)
        for (size_t j = i + 1; j < sizeof codes / sizeof *codes; j++) {
            CU_ASSERT_NOT_EQUAL(codes[i], codes[j]);
            CU_ASSERT_STRING_NOT_EQUAL(ct_err_name(codes[i]), ct_err_name(codes[j]));
        }
}

static void test_error_messages(void)
{
    CU_ASSERT_EQUAL(ct_error_set(CT_EIO, "file %s: %d", "x.bin", 7), CT_EIO);
    CU_ASSERT_STRING_EQUAL(ct_error_message(), "file x.bin: 7");
    CU_ASSERT_EQUAL(ct_error_wrap(CT_EIO, "loading %s", "data"), CT_EIO);
    CU_ASSERT_STRING_EQUAL(ct_error_message(), "loading data: file x.bin: 7");
    ct_error_clear();
    ct_error_wrap(CT_ENOMEM, "step");
    CU_ASSERT_STRING_EQUAL(ct_error_message(), "step: out of memory");
    /* A message longer than the buffer is cut, never overflowed. */
    char big[5000];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    ct_error_set(CT_EINVAL, "%s", big);
    ct_error_wrap(CT_EINVAL, "prefix");
    CU_ASSERT(strncmp(ct_error_message(), "prefix: aaa", 11) == 0);
    CU_ASSERT(strlen(ct_error_message()) < 4096);
}

static void test_rng(void)
{
    struct ct_rng_key a = ct_rng_key(0, CT_RNG_INIT), b = ct_rng_key(0, CT_RNG_SHUFFLE),
                      c = ct_rng_key(1, CT_RNG_INIT), a2 = ct_rng_key(0, CT_RNG_INIT);
    CU_ASSERT(memcmp(&a, &a2, sizeof a) == 0);
    CU_ASSERT(memcmp(&a, &b, sizeof a) != 0);
    CU_ASSERT(memcmp(&a, &c, sizeof a) != 0);
    uint32_t r1[4], r2[4], r3[4];
    ct_rng_block(a, (const uint32_t[4]){1, 2, 3, 4}, r1);
    ct_rng_block(a, (const uint32_t[4]){1, 2, 3, 4}, r2);
    ct_rng_block(a, (const uint32_t[4]){1, 2, 3, 5}, r3);
    CU_ASSERT(memcmp(r1, r2, sizeof r1) == 0);
    CU_ASSERT(memcmp(r1, r3, sizeof r1) != 0);
    CU_ASSERT(ct_rng_u01(0) == 0.0f);
    CU_ASSERT(ct_rng_u01(UINT32_MAX) < 1.0f);

    /* ct_rng_below: in range and roughly uniform (chi-square over 10 bins,
     * 20000 draws; the 99.9% quantile for 9 d.o.f. is 27.9). */
    int bins[10] = {0};
    for (uint32_t i = 0; i < 20000; i++) {
        uint32_t v = ct_rng_below(a, (const uint32_t[3]){i, 0, 0}, 10);
        CU_ASSERT_FATAL(v < 10);
        bins[v]++;
    }
    double chi = 0;
    for (int i = 0; i < 10; i++)
        chi += (bins[i] - 2000.0) * (bins[i] - 2000.0) / 2000.0;
    CU_ASSERT(chi < 27.9);
    CU_ASSERT_EQUAL(ct_rng_below(a, (const uint32_t[3]){5, 5, 5}, 1), 0);
}

static void test_sha256(void)
{
    /* FIPS 180-2 test vector. */
    uint8_t d[CT_SHA256_LEN];
    char hex[CT_SHA256_HEX_LEN];
    CU_ASSERT_EQUAL(ct_sha256_buf("abc", 3, d), 0);
    ct_sha256_hex(d, hex);
    CU_ASSERT_STRING_EQUAL(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");

    const char *dir = ct_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/f", dir);
    CU_ASSERT_EQUAL(ct_test_write_file(path, "abc", 3), 0);
    uint8_t e[CT_SHA256_LEN];
    CU_ASSERT_EQUAL(ct_sha256_file(path, e), 0);
    CU_ASSERT(memcmp(d, e, sizeof d) == 0);
    snprintf(path, sizeof path, "%s/missing", dir);
    CU_ASSERT_EQUAL(ct_sha256_file(path, e), CT_ENOENT);
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), path));
    ct_test_rmtree(dir);
}

static void test_layout_and_flat(void)
{
    struct ct_layout lay = {0};
    CU_ASSERT_EQUAL(ct_layout_add(&lay, "a.weight", 2, (const int64_t[]){3, 5}), 0);
    CU_ASSERT_EQUAL(ct_layout_add(&lay, "a.bias", 1, (const int64_t[]){3}), 1);
    CU_ASSERT_EQUAL(ct_layout_add(&lay, "b.weight", 1, (const int64_t[]){7}), 2);
    CU_ASSERT(ct_layout_add(&lay, "a.bias", 1, (const int64_t[]){3}) < 0);  /* duplicate */
    CU_ASSERT(ct_layout_add(&lay, "bad", 1, (const int64_t[]){0}) < 0);     /* zero dim */
    CU_ASSERT(ct_layout_add(&lay, "bad", 5, (const int64_t[]){1, 1, 1, 1, 1}) < 0);
    CU_ASSERT_EQUAL(lay.n, 3);
    CU_ASSERT_EQUAL(lay.views[0].offset, 0);
    CU_ASSERT_EQUAL(lay.views[1].offset, 16); /* aligned to CT_TENSOR_ALIGN floats */
    CU_ASSERT_EQUAL(lay.views[2].offset, 32);
    CU_ASSERT_EQUAL(lay.numel, 39);
    CU_ASSERT_EQUAL(ct_layout_count(&lay), 25);
    CU_ASSERT_EQUAL(ct_layout_find(&lay, "a.bias"), 1);
    CU_ASSERT_EQUAL(ct_layout_find(&lay, "nope"), -1);

    struct ct_flat f;
    CU_ASSERT_EQUAL_FATAL(ct_flat_alloc(&f, &lay), 0);
    CU_ASSERT_EQUAL((uintptr_t)f.data % 64, 0);
    CU_ASSERT_EQUAL((uintptr_t)ct_flat_view(&f, 1) % 64, 0);
    for (int i = 0; i < lay.n; i++)
        for (size_t j = 0; j < lay.views[i].numel; j++)
            ct_flat_view(&f, i)[j] = (float)(i * 100 + (int)j);
    /* The digest covers the views in order, not the padding. */
    float cat[25];
    size_t k = 0;
    for (int i = 0; i < lay.n; i++)
        for (size_t j = 0; j < lay.views[i].numel; j++)
            cat[k++] = ct_flat_view(&f, i)[j];
    uint8_t d1[CT_SHA256_LEN], d2[CT_SHA256_LEN];
    CU_ASSERT_EQUAL(ct_flat_sha256(&f, d1), 0);
    CU_ASSERT_EQUAL(ct_sha256_buf(cat, sizeof cat, d2), 0);
    CU_ASSERT(memcmp(d1, d2, sizeof d1) == 0);
    f.data[20] = 99.0f; /* padding */
    CU_ASSERT_EQUAL(ct_flat_sha256(&f, d2), 0);
    CU_ASSERT(memcmp(d1, d2, sizeof d1) == 0);
    ct_flat_view(&f, 2)[6] = -1.0f;
    CU_ASSERT_EQUAL(ct_flat_sha256(&f, d2), 0);
    CU_ASSERT(memcmp(d1, d2, sizeof d1) != 0);
    ct_flat_free(&f);
    ct_layout_free(&lay);
}

/* The vectorized scan against the naive loop: every position of a NaN,
 * +Inf and -Inf in buffers around the block size (first, inside, last
 * block, the tail), two bad values (the first one wins), the largest finite
 * float and subnormals (finite), and the empty buffer. */
static void test_first_nonfinite(void)
{
    const float bad[] = {NAN, INFINITY, -INFINITY, -NAN};
    const size_t sizes[] = {0, 1, 63, 64, 65, 130, 200};
    for (size_t si = 0; si < sizeof sizes / sizeof *sizes; si++) {
        const size_t n = sizes[si];
        float *x = malloc((n ? n : 1) * sizeof *x);
        CU_ASSERT_PTR_NOT_NULL_FATAL(x);
        for (size_t i = 0; i < n; i++)
            x[i] = i % 3 == 0 ? 3.4028235e38f : i % 3 == 1 ? -1e-45f : (float)i;
        CU_ASSERT_EQUAL(ct_first_nonfinite(x, n), n);
        CU_ASSERT_EQUAL(ct_first_nonfinite_ref(x, n), n);
        for (size_t at = 0; at < n; at++)
            for (size_t b = 0; b < sizeof bad / sizeof *bad; b++) {
                float keep = x[at];
                x[at] = bad[b];
                CU_ASSERT_EQUAL(ct_first_nonfinite(x, n), at);
                CU_ASSERT_EQUAL(ct_first_nonfinite_ref(x, n), at);
                if (at + 70 < n) {
                    x[at + 70] = NAN;
                    CU_ASSERT_EQUAL(ct_first_nonfinite(x, n), at);
                    x[at + 70] = 1.0f;
                }
                x[at] = keep;
            }
        free(x);
    }
    /* Located in a view, or in the padding between views. */
    struct ct_layout lay = {0};
    CU_ASSERT_EQUAL(ct_layout_add(&lay, "a.weight", 2, (const int64_t[]){3, 5}), 0);
    CU_ASSERT_EQUAL(ct_layout_add(&lay, "a.bias", 1, (const int64_t[]){3}), 1);
    struct ct_flat f;
    CU_ASSERT_EQUAL_FATAL(ct_flat_alloc(&f, &lay), 0);
    int view = 7;
    size_t elem = 7;
    CU_ASSERT_EQUAL(ct_flat_find_nonfinite(&f, &view, &elem), 0);
    ct_flat_view(&f, 1)[2] = INFINITY;
    CU_ASSERT_EQUAL(ct_flat_find_nonfinite(&f, &view, &elem), 1);
    CU_ASSERT_EQUAL(view, 1);
    CU_ASSERT_EQUAL(elem, 2);
    f.data[15] = NAN; /* padding after a.weight */
    CU_ASSERT_EQUAL(ct_flat_find_nonfinite(&f, &view, &elem), 1);
    CU_ASSERT_EQUAL(view, -1);
    CU_ASSERT_EQUAL(elem, 15);
    ct_flat_view(&f, 0)[14] = -NAN;
    CU_ASSERT_EQUAL(ct_flat_find_nonfinite(&f, &view, &elem), 1);
    CU_ASSERT_EQUAL(view, 0);
    CU_ASSERT_EQUAL(elem, 14);
    ct_flat_free(&f);
    ct_layout_free(&lay);
}

static void test_arena(void)
{
    struct ct_arena a;
    CU_ASSERT_EQUAL_FATAL(ct_arena_init(&a, 3 * 64), 0);
    char *p = ct_arena_alloc(&a, 10), *q = ct_arena_alloc(&a, 64), *r = ct_arena_alloc(&a, 1);
    CU_ASSERT_PTR_NOT_NULL(p);
    CU_ASSERT_EQUAL(q - p, 64);
    CU_ASSERT_EQUAL(r - q, 64);
    CU_ASSERT_PTR_NULL(ct_arena_alloc(&a, 1)); /* exhausted */
    ct_arena_free(&a);
}

/* This process (its name made to hold spaces and parentheses, which end at
 * the last ')'), a zombie child, a pid that is gone. */
static void test_proc_stat(void)
{
    char old[16] = {0};
    prctl(PR_GET_NAME, old);
    prctl(PR_SET_NAME, "a) b (c)");
    struct ct_proc_stat ps;
    CU_ASSERT_EQUAL_FATAL(ct_proc_stat(getpid(), &ps), 0);
    prctl(PR_SET_NAME, old);
    CU_ASSERT_STRING_EQUAL(ps.comm, "a) b (c)");
    CU_ASSERT_EQUAL(ps.state, 'R');
    CU_ASSERT_EQUAL(ps.ppid, getppid());
    CU_ASSERT(ps.start > 0);
    pid_t child = fork();
    CU_ASSERT_FATAL(child >= 0);
    if (child == 0)
        _exit(0);
    struct ct_proc_stat cs = {0};
    siginfo_t si;
    waitid(P_PID, (id_t)child, &si, WEXITED | WNOWAIT); /* exited, not reaped: a zombie */
    CU_ASSERT_EQUAL(ct_proc_stat(child, &cs), 0);
    CU_ASSERT_EQUAL(cs.state, 'Z');
    CU_ASSERT_EQUAL(cs.ppid, getpid());
    CU_ASSERT(cs.start >= ps.start);
    waitpid(child, NULL, 0);
    CU_ASSERT_EQUAL(ct_proc_stat(child, &cs), -1);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"error names", test_error_names},
        {"error messages", test_error_messages},
        {"philox", test_rng},
        {"sha256", test_sha256},
        {"layout and flat buffers", test_layout_and_flat},
        {"non-finite scan", test_first_nonfinite},
        {"arena", test_arena},
        {"/proc/PID/stat", test_proc_stat},
        {NULL, NULL},
    };
    return ct_test_run("core", cases);
}
