/* Unit tests for core/path: the checked path join (slashes, exact fit, one
 * byte short), mkdir -p (nested, existing, odd slashes, a file in the way,
 * messages naming the path) and atomic file replacement (content, no
 * temporary left behind, old content kept when the new one fails) and the
 * regular-file check of every reader (ct_open_regular) and the durable
 * writes (ct_pwrite_all, ct_fsync_file, ct_file_write_durable).
 */
#include "core/error.h"
#include "core/path.h"
#include "ct_test.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* The message contains `want`; prints both on failure. */
static void expect_msg(const char *want)
{
    const char *msg = ct_error_message();
    if (!strstr(msg, want))
        fprintf(stderr, "\n    message: \"%s\"\n    lacks:   \"%s\"\n", msg, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
}

static void expect_join(const char *dir, const char *name, const char *want)
{
    char out[64];
    int rc = ct_path_join(out, sizeof out, dir, name);
    CU_ASSERT_EQUAL(rc, 0);
    if (rc == 0 && strcmp(out, want) != 0)
        fprintf(stderr, "\n    join(\"%s\", \"%s\") = \"%s\", want \"%s\"\n", dir, name, out, want);
    CU_ASSERT_STRING_EQUAL(out, want);
}

static void test_join_slashes(void)
{
    expect_join("run", "metrics.jsonl", "run/metrics.jsonl");
    expect_join("run/", "metrics.jsonl", "run/metrics.jsonl");
    expect_join("run///", "metrics.jsonl", "run/metrics.jsonl");
    expect_join("run", "/metrics.jsonl", "run/metrics.jsonl");
    expect_join("run/", "//metrics.jsonl", "run/metrics.jsonl");
    expect_join("/", "etc", "/etc");
    expect_join("//", "etc", "/etc");
    expect_join("", "name", "name");
    expect_join("dir", "", "dir");
    expect_join("/a/b", "c/d", "/a/b/c/d");
}

static void test_join_capacity(void)
{
    char out[8];
    /* "abc/def" is 7 bytes + NUL: fits exactly. */
    CU_ASSERT_EQUAL(ct_path_join(out, sizeof out, "abc", "def"), 0);
    CU_ASSERT_STRING_EQUAL(out, "abc/def");
    /* One byte more does not fit: an error and an empty result, never "abc/def". */
    ct_error_clear();
    memset(out, 'x', sizeof out);
    CU_ASSERT_EQUAL(ct_path_join(out, sizeof out, "abc", "defg"), CT_ERANGE);
    CU_ASSERT_STRING_EQUAL(out, "");
    expect_msg("abc/defg is too long: 8 bytes, room for 7");
    CU_ASSERT_EQUAL(ct_path_join(out, 0, "a", "b"), CT_EINVAL);
    CU_ASSERT_EQUAL(ct_path_join(out, sizeof out, NULL, "b"), CT_EINVAL);
}

static int is_dir(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static void test_mkdir_p(void)
{
    char base[256], p[512];
    snprintf(base, sizeof base, "%s", ct_test_tmpdir());
    snprintf(p, sizeof p, "%s/a/b/c", base);
    CU_ASSERT_EQUAL(ct_mkdir_p(p, 0755), 0);
    CU_ASSERT(is_dir(p));
    /* Existing: fine, also with trailing and doubled slashes. */
    CU_ASSERT_EQUAL(ct_mkdir_p(p, 0755), 0);
    snprintf(p, sizeof p, "%s//a//b2///", base);
    CU_ASSERT_EQUAL(ct_mkdir_p(p, 0755), 0);
    snprintf(p, sizeof p, "%s/a/b2", base);
    CU_ASSERT(is_dir(p));
    /* Relative paths work from the current directory. */
    char cwd[512];
    CU_ASSERT_PTR_NOT_NULL_FATAL(getcwd(cwd, sizeof cwd));
    CU_ASSERT_EQUAL_FATAL(chdir(base), 0);
    CU_ASSERT_EQUAL(ct_mkdir_p("rel/x", 0755), 0);
    CU_ASSERT(is_dir("rel/x"));
    CU_ASSERT_EQUAL_FATAL(chdir(cwd), 0);

    /* A regular file where a directory should be: the final component... */
    snprintf(p, sizeof p, "%s/file", base);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(p, "x", 1), 0);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_mkdir_p(p, 0755), CT_EIO);
    char want[600];
    snprintf(want, sizeof want, "%s: cannot create directory: exists and is not a directory", p);
    expect_msg(want);
    /* ...or a component in the middle: the message names that component,
     * not the whole path. */
    snprintf(p, sizeof p, "%s/file/sub/deeper", base);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_mkdir_p(p, 0755), CT_EIO);
    snprintf(want, sizeof want, "%s/file: cannot create directory: exists and is not a directory",
             base);
    expect_msg(want);
    /* Where the system refuses (no directories can be made in /proc), the
     * message names the component and gives the system's reason. */
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_mkdir_p("/proc/self/nonexistent-ct-test/x", 0755), CT_EIO);
    expect_msg("/proc/self/nonexistent-ct-test: cannot create directory: ");
    CU_ASSERT_EQUAL(ct_mkdir_p("", 0755), CT_EINVAL);
    ct_test_rmtree(base);
}

/* Number of entries in dir, apart from . and .. */
static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static char *slurp(const char *path)
{
    static char buf[4096];
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static void test_replace(void)
{
    char base[256], p[512];
    snprintf(base, sizeof base, "%s", ct_test_tmpdir());
    snprintf(p, sizeof p, "%s/run.json", base);
    CU_ASSERT_EQUAL(ct_file_replace(p, "old\n", 4), 0);
    CU_ASSERT_STRING_EQUAL(slurp(p), "old\n");
    CU_ASSERT_EQUAL(ct_file_replace(p, "new text\n", 9), 0);
    CU_ASSERT_STRING_EQUAL(slurp(p), "new text\n");
    CU_ASSERT_EQUAL(count_entries(base), 1); /* no temporary left */
    /* The usual permissions (0666 less the umask), not mkstemp's 0600. */
    mode_t um = umask(022);
    umask(um);
    struct stat st;
    CU_ASSERT_EQUAL(stat(p, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0666 & ~um);

    /* Abandoned: the old content stays and the temporary goes. */
    struct ct_replace r;
    CU_ASSERT_EQUAL_FATAL(ct_replace_open(&r, p), 0);
    fputs("half", r.f);
    CU_ASSERT_EQUAL(count_entries(base), 2);
    ct_replace_abort(&r);
    ct_replace_abort(&r); /* twice is harmless */
    CU_ASSERT_STRING_EQUAL(slurp(p), "new text\n");
    CU_ASSERT_EQUAL(count_entries(base), 1);

    /* Empty content is a valid file. */
    CU_ASSERT_EQUAL(ct_file_replace(p, "", 0), 0);
    CU_ASSERT_STRING_EQUAL(slurp(p), "");

    /* Cannot create the temporary: a directory that does not exist, or a
     * path under a regular file; the message names the path. */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/run.json/x", base);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_file_replace(bad, "x", 1), CT_EIO);
    expect_msg(bad);
    expect_msg(strerror(ENOTDIR));
    /* A rename that fails (the target is a non-empty directory) keeps the
     * directory and leaves no temporary. */
    snprintf(bad, sizeof bad, "%s/d/e", base);
    CU_ASSERT_EQUAL_FATAL(ct_mkdir_p(bad, 0755), 0);
    snprintf(bad, sizeof bad, "%s/d", base);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_file_replace(bad, "x", 1), CT_EIO);
    expect_msg("cannot rename");
    CU_ASSERT(is_dir(bad));
    CU_ASSERT_EQUAL(count_entries(base), 2);
    ct_test_rmtree(base);
}

/* ct_open_regular: the descriptor and the size of a regular file; a missing
 * path, a directory and a FIFO are refused with the path named and the code
 * a caller can tell apart (ENOENT: "no such file"; EFORMAT: not a file). */
static void test_open_regular(void)
{
    char base[256], p[512];
    snprintf(base, sizeof base, "%s", ct_test_tmpdir());
    snprintf(p, sizeof p, "%s/data.bin", base);
    CU_ASSERT_EQUAL_FATAL(ct_file_replace(p, "12345", 5), 0);
    uint64_t size = 99;
    int fd = ct_open_regular(p, &size);
    CU_ASSERT(fd >= 0);
    CU_ASSERT_EQUAL(size, 5);
    char b[8] = {0};
    CU_ASSERT_EQUAL(read(fd, b, sizeof b), 5);
    CU_ASSERT_STRING_EQUAL(b, "12345");
    CU_ASSERT(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    close(fd);

    snprintf(p, sizeof p, "%s/missing", base);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_open_regular(p, &size), CT_ENOENT);
    CU_ASSERT_EQUAL(size, 0);
    expect_msg(p);
    expect_msg("cannot open");

    ct_error_clear();
    CU_ASSERT_EQUAL(ct_open_regular(base, &size), CT_EFORMAT);
    expect_msg(base);
    expect_msg("not a regular file");

    /* A FIFO (what a shell's process substitution hands over), with a writer
     * open so that the read-only open does not block. */
    snprintf(p, sizeof p, "%s/fifo", base);
    CU_ASSERT_EQUAL_FATAL(mkfifo(p, 0600), 0);
    int w = open(p, O_RDWR | O_NONBLOCK);
    CU_ASSERT_FATAL(w >= 0);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_open_regular(p, &size), CT_EFORMAT);
    expect_msg("not a regular file");
    close(w);
    ct_test_rmtree(base);
}

/* The durable writes: ct_pwrite_all in many small pieces at an offset (the
 * loop's arithmetic), ct_file_write_durable's truncation and permissions,
 * and messages naming the path, the offset and the system's reason. */
static void test_durable(void)
{
    char base[256], p[512], want[301];
    snprintf(base, sizeof base, "%s", ct_test_tmpdir());
    snprintf(p, sizeof p, "%s/data.bin", base);
    for (int i = 0; i < 300; i++)
        want[i] = (char)('a' + i % 26);
    want[300] = '\0';
    CU_ASSERT_EQUAL(ct_file_write_durable(p, "0123456789", 10), 0);
    uint64_t saved = ct__pwrite_piece;
    ct__pwrite_piece = 7;
    int fd = open(p, O_WRONLY);
    CU_ASSERT_FATAL(fd >= 0);
    CU_ASSERT_EQUAL(ct_pwrite_all(fd, want + 5, 295, 5, p), 0);
    CU_ASSERT_EQUAL(ct_fsync_file(fd, p), 0);
    close(fd);
    ct__pwrite_piece = saved;
    memcpy(want, "01234", 5);
    CU_ASSERT_STRING_EQUAL(slurp(p), want);
    /* Rewritten shorter: truncated, and the usual 0644 less the umask. */
    CU_ASSERT_EQUAL(ct_file_write_durable(p, "latest\n", 7), 0);
    CU_ASSERT_STRING_EQUAL(slurp(p), "latest\n");
    mode_t um = umask(022);
    umask(um);
    struct stat st;
    CU_ASSERT_EQUAL(stat(p, &st), 0);
    CU_ASSERT_EQUAL(st.st_mode & 0777, 0644 & ~um);

    char bad[600];
    snprintf(bad, sizeof bad, "%s/missing/x", base);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_file_write_durable(bad, "x", 1), CT_EIO);
    expect_msg(bad);
    expect_msg("cannot create");
    /* A full disk: /dev/full refuses every write with ENOSPC. */
    fd = open("/dev/full", O_WRONLY);
    if (fd >= 0) {
        ct_error_clear();
        CU_ASSERT_EQUAL(ct_pwrite_all(fd, "abc", 3, 5, "/dev/full"), CT_EIO);
        expect_msg("/dev/full: write failed at offset 5: ");
        expect_msg(strerror(ENOSPC));
        close(fd);
    }
    /* A pipe cannot be synced (EINVAL): the message says which and why. */
    int pfd[2];
    CU_ASSERT_FATAL(pipe(pfd) == 0);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_fsync_file(pfd[1], "the pipe"), CT_EIO);
    expect_msg("the pipe: fsync failed: ");
    close(pfd[0]);
    close(pfd[1]);
    ct_test_rmtree(base);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"join_slashes", test_join_slashes},
        {"join_capacity", test_join_capacity},
        {"mkdir_p", test_mkdir_p},
        {"replace", test_replace},
        {"open_regular", test_open_regular},
        {"durable", test_durable},
        {NULL, NULL},
    };
    return ct_test_run("path", cases);
}
