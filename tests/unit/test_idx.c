/* Unit tests for the IDX reader (src/data/idx.c).
 *
 * Each test writes a small IDX file (raw, or gzip through zlib) into a fresh
 * temporary directory and loads it. The error tests check the return code,
 * that *out was left zeroed, and that the message names the file and says
 * what was wrong. This is not a test of the data set layer (test_dataset.c).
 */
#include "core/error.h"
#include "data/idx.h"

#include "ct_test.h"

#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <zlib.h>

/* AddressSanitizer reserves terabytes of address space: an RLIMIT_AS would
 * break it, so the test that uses one only checks the message there. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif

#define FMNIST_T10K_LABELS "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz"

/* Fills `buf` with an IDX header followed by `payload_len` bytes of a
 * deterministic pattern; returns the total length. The pattern is not
 * compressible to nothing, so a cut gzip file really loses data. */
static size_t make_idx(uint8_t *buf, uint8_t dtype, int rank, const uint32_t *dims,
                       size_t payload_len)
{
    size_t len = 0;
    buf[len++] = 0;
    buf[len++] = 0;
    buf[len++] = dtype;
    buf[len++] = (uint8_t)rank;
    for (int i = 0; i < rank; i++) {
        buf[len++] = (uint8_t)(dims[i] >> 24);
        buf[len++] = (uint8_t)(dims[i] >> 16);
        buf[len++] = (uint8_t)(dims[i] >> 8);
        buf[len++] = (uint8_t)dims[i];
    }
    uint32_t state = 12345;
    for (size_t i = 0; i < payload_len; i++) {
        state = state * 1103515245u + 12345u;
        buf[len++] = (uint8_t)(state >> 16);
    }
    return len;
}

/* Writes one gzip member with zlib; mode "wb" creates, "ab" appends a member. */
static int write_gz(const char *path, const char *mode, const void *data, size_t len)
{
    gzFile g = gzopen(path, mode);
    if (!g)
        return -1;
    int w = gzwrite(g, data, (unsigned)len);
    int c = gzclose(g);
    return (w == (int)len && c == Z_OK) ? 0 : -1;
}

static int is_zeroed(const struct ct_idx *x)
{
    struct ct_idx zero;
    memset(&zero, 0, sizeof zero);
    return memcmp(x, &zero, sizeof zero) == 0;
}

/* Loads `path`, expecting failure with `code` and a message that names the
 * file and contains each of the NULL-terminated phrases. */
/* rc is the wanted code, and the message names the file and holds every
 * phrase (a success has no message to check). */
static void check_outcome(const char *path, int rc, int code, const char *const *phrases)
{
    const char *msg = ct_error_message();
    if (rc != code)
        fprintf(stderr, "\n  %s: got %s, want %s: %s\n", path, ct_err_name(rc), ct_err_name(code),
                msg);
    CU_ASSERT_EQUAL(rc, code);
    if (rc == 0)
        return;
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, path));
    for (const char *const *p = phrases; *p; p++) {
        if (!strstr(msg, *p))
            fprintf(stderr, "\n  message lacks \"%s\": %s\n", *p, msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, *p));
    }
}

static void expect_fail(const char *path, int code, const char *const *phrases)
{
    struct ct_idx x;
    memset(&x, 0xA5, sizeof x); /* garbage, to see that a failure zeroes it */
    ct_error_clear();
    int rc = ct_idx_load(&x, path);
    check_outcome(path, rc, code, phrases);
    CU_ASSERT(is_zeroed(&x));
    if (rc == 0)
        ct_idx_free(&x);
}

#define EXPECT_FAIL(path, code, ...)                                   \
    do {                                                               \
        const char *const phrases_[] = {__VA_ARGS__, NULL};            \
        expect_fail((path), (code), phrases_);                         \
    } while (0)

/* Writes a raw IDX file in `dir` and returns its path (static buffer). */
static const char *write_raw_idx(const char *dir, const char *name, const uint8_t *buf, size_t len)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, buf, len), 0);
    return path;
}

static void check_loaded(const char *path, int rank, const uint32_t *dims, const uint8_t *payload,
                         size_t numel)
{
    struct ct_idx x;
    int rc = ct_idx_load(&x, path);
    if (rc != 0)
        fprintf(stderr, "\n  %s: %s\n", path, ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(x.rank, rank);
    for (int i = 0; i < rank; i++)
        CU_ASSERT_EQUAL(x.dims[i], dims[i]);
    for (int i = rank; i < CT_IDX_MAX_RANK; i++)
        CU_ASSERT_EQUAL(x.dims[i], 0);
    CU_ASSERT_EQUAL(x.numel, numel);
    CU_ASSERT_PTR_NOT_NULL_FATAL(x.data);
    CU_ASSERT(memcmp(x.data, payload, numel) == 0);
    ct_idx_free(&x);
    CU_ASSERT(is_zeroed(&x));
    ct_idx_free(&x); /* freeing a freed (zeroed) struct is harmless */
}

static void test_raw_rank1(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[64];
    const uint32_t dims[] = {5};
    size_t len = make_idx(buf, 0x08, 1, dims, 5);
    check_loaded(write_raw_idx(dir, "r1", buf, len), 1, dims, buf + 8, 5);
    ct_test_rmtree(dir);
}

static void test_raw_rank3(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[256];
    const uint32_t dims[] = {2, 3, 4};
    size_t len = make_idx(buf, 0x08, 3, dims, 24);
    check_loaded(write_raw_idx(dir, "r3", buf, len), 3, dims, buf + 16, 24);
    ct_test_rmtree(dir);
}

static void test_raw_rank4(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[256];
    const uint32_t dims[] = {2, 3, 2, 5};
    size_t len = make_idx(buf, 0x08, 4, dims, 60);
    check_loaded(write_raw_idx(dir, "r4", buf, len), 4, dims, buf + 20, 60);
    ct_test_rmtree(dir);
}

static void test_gzip_matches_raw(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[256];
    const uint32_t dims[] = {2, 3, 4};
    size_t len = make_idx(buf, 0x08, 3, dims, 24);
    char path[512];
    /* No ".gz" suffix: detection must go by content, not by name. */
    snprintf(path, sizeof path, "%s/gz-without-suffix", dir);
    CU_ASSERT_EQUAL_FATAL(write_gz(path, "wb", buf, len), 0);
    check_loaded(path, 3, dims, buf + 16, 24);
    ct_test_rmtree(dir);
}

static void test_gzip_large(void)
{
    /* Larger than the reader's 64 KiB input chunk, so inflate is refilled. */
    const char *dir = ct_test_tmpdir();
    const uint32_t dims[] = {300, 28, 28};
    size_t numel = 300 * 28 * 28;
    uint8_t *buf = malloc(16 + numel);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    size_t len = make_idx(buf, 0x08, 3, dims, numel);
    char path[512];
    snprintf(path, sizeof path, "%s/big.gz", dir);
    CU_ASSERT_EQUAL_FATAL(write_gz(path, "wb", buf, len), 0);
    check_loaded(path, 3, dims, buf + 16, numel);
    free(buf);
    ct_test_rmtree(dir);
}

static void test_gzip_multi_member(void)
{
    /* `cat a.gz b.gz` is a valid gzip file that decodes to a then b. */
    const char *dir = ct_test_tmpdir();
    uint8_t buf[256];
    const uint32_t dims[] = {2, 3, 4};
    size_t len = make_idx(buf, 0x08, 3, dims, 24);
    char path[512];
    snprintf(path, sizeof path, "%s/multi.gz", dir);
    CU_ASSERT_EQUAL_FATAL(write_gz(path, "wb", buf, 10), 0);
    CU_ASSERT_EQUAL_FATAL(write_gz(path, "ab", buf + 10, len - 10), 0);
    check_loaded(path, 3, dims, buf + 16, 24);
    ct_test_rmtree(dir);
}

static void test_truncated_raw(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[256];
    const uint32_t dims[] = {4, 3};
    size_t len = make_idx(buf, 0x08, 2, dims, 12);
    /* The file is cut: 2 of the 12 payload bytes are missing. */
    const char *path = write_raw_idx(dir, "cut", buf, len - 2);
    EXPECT_FAIL(path, CT_EFORMAT, "truncated", "promises 12 bytes", "dims 4x3", "found 10");
    ct_test_rmtree(dir);
}

static void test_truncated_gzip(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[2048];
    const uint32_t dims[] = {40, 40};
    size_t len = make_idx(buf, 0x08, 2, dims, 1600);
    char path[512];
    snprintf(path, sizeof path, "%s/cut.gz", dir);
    CU_ASSERT_EQUAL_FATAL(write_gz(path, "wb", buf, len), 0);
    size_t gzlen = 0;
    uint8_t *gz = ct_test_read_file(path, &gzlen);
    CU_ASSERT_PTR_NOT_NULL_FATAL(gz);
    CU_ASSERT_FATAL(gzlen > 100);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, gz, gzlen / 2), 0);
    EXPECT_FAIL(path, CT_EFORMAT, "truncated gzip stream");
    /* Cut just before the 8-byte CRC/length trailer: all data is there, but
     * the stream still did not end. */
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, gz, gzlen - 8), 0);
    EXPECT_FAIL(path, CT_EFORMAT, "truncated gzip stream");
    free(gz);
    ct_test_rmtree(dir);
}

static void test_corrupt_gzip(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[512];
    const uint32_t dims[] = {100};
    size_t len = make_idx(buf, 0x08, 1, dims, 100);
    char path[512];
    snprintf(path, sizeof path, "%s/bad.gz", dir);
    CU_ASSERT_EQUAL_FATAL(write_gz(path, "wb", buf, len), 0);
    size_t gzlen = 0;
    uint8_t *gz = ct_test_read_file(path, &gzlen);
    CU_ASSERT_PTR_NOT_NULL_FATAL(gz);
    /* Flip a bit of the CRC-32 in the trailer: the data inflates, the check
     * fails. That corruption is deterministic, unlike one in the deflate data. */
    gz[gzlen - 8] ^= 0x01;
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(path, gz, gzlen), 0);
    EXPECT_FAIL(path, CT_EFORMAT, "corrupt gzip data", "incorrect data check");
    free(gz);
    ct_test_rmtree(dir);
}

static void test_gzip_trailing_junk(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[512];
    const uint32_t dims[] = {100};
    size_t len = make_idx(buf, 0x08, 1, dims, 100);
    char path[512];
    snprintf(path, sizeof path, "%s/junk.gz", dir);
    CU_ASSERT_EQUAL_FATAL(write_gz(path, "wb", buf, len), 0);
    FILE *f = fopen(path, "ab");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("junk", f);
    fclose(f);
    EXPECT_FAIL(path, CT_EFORMAT, "after the end of the gzip stream");
    ct_test_rmtree(dir);
}

static void test_wrong_magic(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[64];
    const uint32_t dims[] = {5};
    size_t len = make_idx(buf, 0x08, 1, dims, 5);
    buf[0] = 0x12;
    buf[1] = 0x34;
    const char *path = write_raw_idx(dir, "magic", buf, len);
    EXPECT_FAIL(path, CT_EFORMAT, "not an IDX file", "expected magic 0x0000", "found 0x1234");
    ct_test_rmtree(dir);
}

static void test_unsupported_dtype(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[64];
    const uint32_t dims[] = {5};
    size_t len = make_idx(buf, 0x0D, 1, dims, 20);
    const char *path = write_raw_idx(dir, "float", buf, len);
    EXPECT_FAIL(path, CT_EFORMAT, "unsupported", "0x0D", "float32");
    ct_test_rmtree(dir);
}

static void test_bad_rank(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[128];
    const uint32_t dims[] = {1, 1, 1, 1, 1};
    size_t len = make_idx(buf, 0x08, 0, dims, 1);
    const char *path = write_raw_idx(dir, "rank0", buf, len);
    EXPECT_FAIL(path, CT_EFORMAT, "rank 0", "expected 1..4");
    len = make_idx(buf, 0x08, 5, dims, 1);
    path = write_raw_idx(dir, "rank5", buf, len);
    EXPECT_FAIL(path, CT_EFORMAT, "rank 5", "expected 1..4");
    ct_test_rmtree(dir);
}

static void test_zero_dim(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[64];
    const uint32_t dims[] = {3, 0, 4};
    size_t len = make_idx(buf, 0x08, 3, dims, 0);
    const char *path = write_raw_idx(dir, "zero", buf, len);
    EXPECT_FAIL(path, CT_EFORMAT, "dimension 1", "is zero", "3x0x4");
    ct_test_rmtree(dir);
}

static void test_short_header(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[64];
    const uint32_t dims[] = {2, 3, 4};
    make_idx(buf, 0x08, 3, dims, 0);
    /* Rank 3 needs 16 header bytes; give it 10. */
    const char *path = write_raw_idx(dir, "short", buf, 10);
    EXPECT_FAIL(path, CT_EFORMAT, "truncated header", "16", "found 10");
    /* Too short for even the fixed part, and empty. */
    path = write_raw_idx(dir, "tiny", buf, 3);
    EXPECT_FAIL(path, CT_EFORMAT, "not an IDX file", "too short");
    path = write_raw_idx(dir, "empty", buf, 0);
    EXPECT_FAIL(path, CT_EFORMAT, "not an IDX file", "too short");
    ct_test_rmtree(dir);
}

static void test_lying_header(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[256];
    /* The header says 10x10 but 50 bytes follow. */
    const uint32_t more[] = {10, 10};
    size_t len = make_idx(buf, 0x08, 2, more, 50);
    const char *path = write_raw_idx(dir, "more", buf, len);
    EXPECT_FAIL(path, CT_EFORMAT, "truncated", "promises 100 bytes", "dims 10x10", "found 50");
    /* The header says 5x4 but 23 bytes follow. */
    const uint32_t less[] = {5, 4};
    len = make_idx(buf, 0x08, 2, less, 23);
    path = write_raw_idx(dir, "less", buf, len);
    EXPECT_FAIL(path, CT_EFORMAT, "3 trailing bytes after the data the header describes");
    /* The same lie inside a gzip stream. */
    char gzpath[512];
    snprintf(gzpath, sizeof gzpath, "%s/less.gz", dir);
    CU_ASSERT_EQUAL_FATAL(write_gz(gzpath, "wb", buf, len), 0);
    EXPECT_FAIL(gzpath, CT_EFORMAT, "3 trailing bytes");
    ct_test_rmtree(dir);
}

static void test_too_big(void)
{
    /* If the reader allocated and read before checking the size, these tiny
     * files would fail with "truncated" (or CT_ENOMEM), not with the limit. */
    const char *dir = ct_test_tmpdir();
    uint8_t buf[64];
    const uint32_t big[] = {65536, 65536, 2}; /* 2^33 bytes, twice the limit */
    size_t len = make_idx(buf, 0x08, 3, big, 4);
    const char *path = write_raw_idx(dir, "big", buf, len);
    EXPECT_FAIL(path, CT_EFORMAT, "65536x65536x2", "limit");
    /* These multiply to 2^64 + 4: a product formed first and checked after
     * wraps to 4, which is exactly the payload this file holds, so a careless
     * reader would "succeed". */
    const uint32_t wrap[] = {3340214413u, 2761311370u, 2};
    len = make_idx(buf, 0x08, 3, wrap, 4);
    path = write_raw_idx(dir, "wrap", buf, len);
    EXPECT_FAIL(path, CT_EFORMAT, "3340214413x2761311370x2", "limit");
    const uint32_t huge[] = {0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu};
    len = make_idx(buf, 0x08, 4, huge, 4);
    path = write_raw_idx(dir, "huge", buf, len);
    EXPECT_FAIL(path, CT_EFORMAT, "limit");
    ct_test_rmtree(dir);
}

/* In a child whose address space is capped at what it uses now plus
 * 1 GiB: loading `path` must fail with CT_EFORMAT and "truncated", not
 * CT_ENOMEM. Returns the child's exit status (0: as expected). */
static int load_capped(const char *path)
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
#ifndef TEST_ASAN
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1)
            _exit(3);
        fclose(f);
        rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)1 << 30);
        struct rlimit rl = {cap, cap};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(3);
#endif
        struct ct_idx x;
        int rc = ct_idx_load(&x, path);
        const char *msg = ct_error_message();
        if (rc != CT_EFORMAT || !strstr(msg, "truncated") || !strstr(msg, "promises 4294967296 bytes")) {
            fprintf(stderr, "\n  %s: got %s: %s\n", path, ct_err_name(rc), msg);
            _exit(1);
        }
        _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void test_header_at_limit_no_payload(void)
{
    /* 65536x65536 is exactly the limit (4 GiB) and passes the header
     * checks; 4 bytes follow. The reader must find the file short before it
     * spends 4 GiB on it: a reader that allocates what the header promises
     * gets CT_ENOMEM under the cap (tests/fuzz/fuzz_idx: out-of-memory; replayed
     * by tests/fuzz/regress/idx/oom-4gib-header-*). */
    const char *dir = ct_test_tmpdir();
    uint8_t buf[64];
    const uint32_t dims[] = {65536, 65536};
    size_t len = make_idx(buf, 0x08, 2, dims, 4);
    const char *path = write_raw_idx(dir, "limit", buf, len);
    CU_ASSERT_EQUAL(load_capped(path), 0);
    char gzpath[512];
    snprintf(gzpath, sizeof gzpath, "%s/limit.gz", dir);
    CU_ASSERT_EQUAL_FATAL(write_gz(gzpath, "wb", buf, len), 0);
    CU_ASSERT_EQUAL(load_capped(gzpath), 0);
    ct_test_rmtree(dir);
}

/* ct_idx_read_header (the shared loader sizes a node-wide buffer from it)
 * must refuse a header the file's size cannot hold, before anyone allocates
 * what it promises; files that load still read. */
static void expect_header(const char *path, int code, const char *phrase)
{
    struct ct_idx h;
    const char *const phrases[] = {phrase, NULL};
    ct_error_clear();
    int rc = ct_idx_read_header(&h, path);
    check_outcome(path, rc, code, phrases);
    if (rc < 0)
        CU_ASSERT_EQUAL(h.numel, 0);
}

static void test_read_header_file_size(void)
{
    const char *dir = ct_test_tmpdir();
    uint8_t buf[64];
    char gz[512];
    /* 16 bytes saying 10 x 65536 x 6553 (4 GiB): raw and gzip. */
    const uint32_t huge[] = {10, 65536, 6553};
    size_t len = make_idx(buf, 0x08, 3, huge, 0);
    expect_header(write_raw_idx(dir, "huge", buf, len), CT_EFORMAT, "truncated");
    snprintf(gz, sizeof gz, "%s/huge.gz", dir);
    CU_ASSERT_EQUAL_FATAL(write_gz(gz, "wb", buf, len), 0);
    expect_header(gz, CT_EFORMAT, "at most 1032:1");
    /* Raw: one byte short, one byte over, exact. */
    const uint32_t d[] = {2, 3};
    len = make_idx(buf, 0x08, 2, d, 6);
    expect_header(write_raw_idx(dir, "short", buf, len - 1), CT_EFORMAT, "the file holds 5");
    buf[len] = 7;
    expect_header(write_raw_idx(dir, "over", buf, len + 1), CT_EFORMAT, "1 trailing bytes");
    expect_header(write_raw_idx(dir, "exact", buf, len), 0, "");
    /* gzip at deflate's best: 16 MiB of zeros, which zlib -9 packs close to
     * the 1032:1 bound; it must still pass, and load. */
    const uint32_t z[] = {16, 1024, 1024};
    size_t zn = (size_t)16 << 20;
    uint8_t *zeros = calloc(1, zn + 16);
    CU_ASSERT_PTR_NOT_NULL_FATAL(zeros);
    size_t zl = make_idx(zeros, 0x08, 3, z, 0);
    snprintf(gz, sizeof gz, "%s/zeros.gz", dir);
    CU_ASSERT_EQUAL_FATAL(write_gz(gz, "wb9", zeros, zl + zn), 0);
    free(zeros);
    expect_header(gz, 0, "");
    struct ct_idx x;
    CU_ASSERT_EQUAL(ct_idx_load(&x, gz), 0);
    CU_ASSERT_EQUAL(x.numel, zn);
    ct_idx_free(&x);
    ct_test_rmtree(dir);
}

static void test_missing_file(void)
{
    const char *dir = ct_test_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/does-not-exist.gz", dir);
    EXPECT_FAIL(path, CT_ENOENT, "cannot open", "No such file or directory");
    ct_test_rmtree(dir);
}

static void test_directory(void)
{
    /* fopen() succeeds on a directory on Linux; the read then fails. */
    const char *dir = ct_test_tmpdir();
    struct ct_idx x;
    int rc = ct_idx_load(&x, dir);
    CU_ASSERT(rc == CT_EIO || rc == CT_EFORMAT);
    CU_ASSERT(is_zeroed(&x));
    CU_ASSERT_PTR_NOT_NULL(strstr(ct_error_message(), dir));
    ct_test_rmtree(dir);
}

static void test_fashion_mnist_labels(void)
{
    if (access(FMNIST_T10K_LABELS, R_OK) != 0) {
        printf("\n  note: %s not found, skipped\n", FMNIST_T10K_LABELS);
        return;
    }
    struct ct_idx x;
    int rc = ct_idx_load(&x, FMNIST_T10K_LABELS);
    if (rc != 0)
        fprintf(stderr, "\n  %s\n", ct_error_message());
    CU_ASSERT_EQUAL_FATAL(rc, 0);
    CU_ASSERT_EQUAL(x.rank, 1);
    CU_ASSERT_EQUAL(x.dims[0], 10000);
    CU_ASSERT_EQUAL(x.numel, 10000);
    size_t bad = 0;
    for (size_t i = 0; i < x.numel; i++)
        bad += x.data[i] >= 10;
    CU_ASSERT_EQUAL(bad, 0);
    ct_idx_free(&x);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"raw rank 1", test_raw_rank1},
        {"raw rank 3", test_raw_rank3},
        {"raw rank 4", test_raw_rank4},
        {"gzip matches raw", test_gzip_matches_raw},
        {"gzip larger than a chunk", test_gzip_large},
        {"gzip multi-member", test_gzip_multi_member},
        {"truncated raw", test_truncated_raw},
        {"truncated gzip", test_truncated_gzip},
        {"corrupt gzip", test_corrupt_gzip},
        {"gzip trailing junk", test_gzip_trailing_junk},
        {"wrong magic", test_wrong_magic},
        {"unsupported dtype", test_unsupported_dtype},
        {"rank 0 and 5", test_bad_rank},
        {"zero dim", test_zero_dim},
        {"short header", test_short_header},
        {"lying header", test_lying_header},
        {"too big", test_too_big},
        {"header at the limit, no payload", test_header_at_limit_no_payload},
        {"read_header checks the file size", test_read_header_file_size},
        {"missing file", test_missing_file},
        {"directory", test_directory},
        {"fashion-mnist t10k labels", test_fashion_mnist_labels},
        {NULL, NULL},
    };
    return ct_test_run("idx", cases);
}
