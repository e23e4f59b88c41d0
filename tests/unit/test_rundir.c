/* Unit tests for the run directory (src/run/rundir): an earlier run's files
 * are moved aside into previous-<time>/ with foreign files left in place;
 * two preparations in the same second get distinct directories; a run
 * continued in place keeps its files; the logs are trimmed or truncated;
 * failures (a file where a directory should be) name the path; a directory
 * of seed-* runs expands to them in seed order.
 *
 * Tests run as root, so permissions cannot make a directory unwritable;
 * failures come from paths under a regular file instead.
 */
#include "core/error.h"
#include "core/path.h"
#include "ct_test.h"
#include "run/rundir.h"

#include <dirent.h>
#include <sys/stat.h>

static void expect_msg(const char *want)
{
    const char *msg = ct_error_message();
    if (!strstr(msg, want))
        fprintf(stderr, "\n    message: \"%s\"\n    lacks:   \"%s\"\n", msg, want);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, want));
}

static int exists(const char *dir, const char *name)
{
    char p[CT_PATH_MAX];
    struct stat st;
    return ct_path_join(p, sizeof p, dir, name) == 0 && lstat(p, &st) == 0;
}

static void put(const char *dir, const char *name, const char *text)
{
    char p[CT_PATH_MAX];
    CU_ASSERT_EQUAL_FATAL(ct_path_join(p, sizeof p, dir, name), 0);
    CU_ASSERT_EQUAL_FATAL(ct_test_write_file(p, text, strlen(text)), 0);
}

static const char *slurp(const char *dir, const char *name)
{
    static char buf[4096];
    char p[CT_PATH_MAX];
    buf[0] = '\0';
    FILE *f = ct_path_join(p, sizeof p, dir, name) == 0 ? fopen(p, "rb") : NULL;
    if (!f)
        return "(absent)";
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* Number of entries whose name starts with prefix. */
static int count_prefix(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += strncmp(e->d_name, prefix, strlen(prefix)) == 0 && e->d_name[0] != '.';
    if (d)
        closedir(d);
    return n;
}

static void test_owns(void)
{
    const char *owned[] = {"metrics.jsonl", "steps.jsonl", "config.ini", "run.json",
                           "placement.txt", "latest", "chain.jsonl", "ckpt-10",
                           "ckpt-10.tmp-123-abc", "tb"};
    for (size_t i = 0; i < sizeof owned / sizeof *owned; i++)
        CU_ASSERT_TRUE(ct_rundir_owns(owned[i]));
    const char *foreign[] = {"notes.txt", "previous-20240101T000000Z", "metrics.jsonl.bak",
                             "ckpt", "slurm-123.out", ".", ".."};
    for (size_t i = 0; i < sizeof foreign / sizeof *foreign; i++)
        CU_ASSERT_FALSE(ct_rundir_owns(foreign[i]));
}

static void test_fresh_dir(void)
{
    char base[256], dir[512], moved[CT_PATH_MAX];
    snprintf(base, sizeof base, "%s", ct_test_tmpdir());
    snprintf(dir, sizeof dir, "%s/runs/a/b", base);
    CU_ASSERT_EQUAL(ct_rundir_prepare(dir, 0, moved, sizeof moved), 0);
    CU_ASSERT_STRING_EQUAL(moved, "");
    struct stat st;
    CU_ASSERT(stat(dir, &st) == 0 && S_ISDIR(st.st_mode));
    /* Foreign files only: nothing moves, no previous dir appears. */
    put(dir, "notes.txt", "mine");
    CU_ASSERT_EQUAL(ct_rundir_prepare(dir, 0, moved, sizeof moved), 0);
    CU_ASSERT_STRING_EQUAL(moved, "");
    CU_ASSERT_EQUAL(count_prefix(dir, "previous-"), 0);
    ct_test_rmtree(base);
}

static void test_move_aside(void)
{
    char dir[256], moved[CT_PATH_MAX], moved2[CT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    put(dir, "metrics.jsonl", "{\"epoch\": 1, \"earlier\": true}\n");
    put(dir, "steps.jsonl", "{\"step\": 1}\n");
    put(dir, "config.ini", "[train]\n");
    put(dir, "run.json", "{}\n");
    put(dir, "placement.txt", "rank 0\n");
    put(dir, "chain.jsonl", "{}\n");
    put(dir, "notes.txt", "keep me\n");
    put(dir, "slurm-42.out", "log\n");
    char p[CT_PATH_MAX];
    snprintf(p, sizeof p, "%s/ckpt-100", dir);
    CU_ASSERT_EQUAL_FATAL(ct_mkdir_p(p, 0755), 0);
    put(p, "manifest.pb", "m");
    snprintf(p, sizeof p, "%s/latest", dir);
    CU_ASSERT_EQUAL_FATAL(symlink("ckpt-100", p), 0);

    CU_ASSERT_EQUAL_FATAL(ct_rundir_prepare(dir, 0, moved, sizeof moved), 0);
    /* Reported as dir/previous-<UTC yyyymmddThhmmssZ>. */
    char prefix[300];
    snprintf(prefix, sizeof prefix, "%s/previous-", dir);
    CU_ASSERT_EQUAL(strncmp(moved, prefix, strlen(prefix)), 0);
    const char *stamp = moved + strlen(prefix);
    CU_ASSERT_EQUAL(strlen(stamp), 16);
    CU_ASSERT(stamp[8] == 'T' && stamp[15] == 'Z');
    /* Every owned entry moved, with its content; foreign ones stayed. */
    const char *owned[] = {"metrics.jsonl", "steps.jsonl", "config.ini", "run.json",
                           "placement.txt", "chain.jsonl", "ckpt-100", "latest"};
    for (size_t i = 0; i < sizeof owned / sizeof *owned; i++) {
        CU_ASSERT_FALSE(exists(dir, owned[i]));
        CU_ASSERT_TRUE(exists(moved, owned[i]));
    }
    CU_ASSERT_STRING_EQUAL(slurp(moved, "metrics.jsonl"), "{\"epoch\": 1, \"earlier\": true}\n");
    CU_ASSERT_STRING_EQUAL(slurp(moved, "latest/manifest.pb"), "m"); /* the link still resolves */
    CU_ASSERT_STRING_EQUAL(slurp(dir, "notes.txt"), "keep me\n");
    CU_ASSERT_TRUE(exists(dir, "slurm-42.out"));

    /* A second run in the same second: a distinct directory, nothing
     * overwritten; a third as well. */
    put(dir, "metrics.jsonl", "second\n");
    CU_ASSERT_EQUAL_FATAL(ct_rundir_prepare(dir, 0, moved2, sizeof moved2), 0);
    CU_ASSERT_STRING_NOT_EQUAL(moved, moved2);
    CU_ASSERT_STRING_EQUAL(slurp(moved, "metrics.jsonl"), "{\"epoch\": 1, \"earlier\": true}\n");
    CU_ASSERT_STRING_EQUAL(slurp(moved2, "metrics.jsonl"), "second\n");
    put(dir, "metrics.jsonl", "third\n");
    char moved3[CT_PATH_MAX];
    CU_ASSERT_EQUAL_FATAL(ct_rundir_prepare(dir, 0, moved3, sizeof moved3), 0);
    CU_ASSERT_STRING_NOT_EQUAL(moved3, moved);
    CU_ASSERT_STRING_NOT_EQUAL(moved3, moved2);
    CU_ASSERT_STRING_EQUAL(slurp(moved3, "metrics.jsonl"), "third\n");
    /* Earlier previous-* directories are not themselves moved. */
    CU_ASSERT_EQUAL(count_prefix(dir, "previous-"), 3);
    ct_test_rmtree(dir);
}

static void test_in_place(void)
{
    char dir[256], moved[CT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", ct_test_tmpdir());
    put(dir, "metrics.jsonl", "{\"step\": 5}\n{\"step\": 10}\n");
    put(dir, "steps.jsonl", "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n");
    put(dir, "run.json", "{}\n");
    CU_ASSERT_EQUAL(ct_rundir_prepare(dir, 1, moved, sizeof moved), 0);
    CU_ASSERT_STRING_EQUAL(moved, "");
    CU_ASSERT_EQUAL(count_prefix(dir, "previous-"), 0);
    CU_ASSERT_TRUE(ct_rundir_has(dir, "run.json"));
    CU_ASSERT_FALSE(ct_rundir_has(dir, "config.ini"));

    /* In place: trimmed to the checkpoint's step, then appended to. */
    FILE *f;
    CU_ASSERT_EQUAL_FATAL(ct_rundir_open_log(dir, "steps.jsonl", 1, 2, &f), 0);
    fputs("{\"step\": 3, \"again\": true}\n", f);
    fclose(f);
    CU_ASSERT_STRING_EQUAL(slurp(dir, "steps.jsonl"),
                           "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3, \"again\": true}\n");
    /* A log that does not exist yet is created. */
    CU_ASSERT_EQUAL_FATAL(ct_rundir_open_log(dir, "other.jsonl", 1, 2, &f), 0);
    fclose(f);
    CU_ASSERT_TRUE(ct_rundir_has(dir, "other.jsonl"));
    /* Not in place: truncated. */
    CU_ASSERT_EQUAL_FATAL(ct_rundir_open_log(dir, "metrics.jsonl", 0, 0, &f), 0);
    fclose(f);
    CU_ASSERT_STRING_EQUAL(slurp(dir, "metrics.jsonl"), "");
    /* A log that does not parse: the trim's error, and no stream. */
    put(dir, "bad.jsonl", "{\"step\": 1}\nnot json\n");
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_rundir_open_log(dir, "bad.jsonl", 1, 5, &f), CT_EFORMAT);
    CU_ASSERT_PTR_NULL(f);
    expect_msg("bad.jsonl:2: offset 0: expected a value");

    /* Small files, replaced atomically. */
    CU_ASSERT_EQUAL(ct_rundir_write_file(dir, "config.ini", "[train]\nepochs = 1\n"), 0);
    CU_ASSERT_EQUAL(ct_rundir_write_file(dir, "config.ini", "[train]\nepochs = 2\n"), 0);
    CU_ASSERT_STRING_EQUAL(slurp(dir, "config.ini"), "[train]\nepochs = 2\n");
    CU_ASSERT_EQUAL(ct_rundir_write_file(dir, "placement.txt", NULL), 0);
    CU_ASSERT_STRING_EQUAL(slurp(dir, "placement.txt"), "");
    CU_ASSERT_EQUAL(count_prefix(dir, "config.ini.tmp"), 0);
    ct_test_rmtree(dir);
}

static void test_errors(void)
{
    char base[256], dir[512], moved[CT_PATH_MAX], want[700];
    snprintf(base, sizeof base, "%s", ct_test_tmpdir());
    put(base, "file", "x");
    /* A regular file where the run directory should be. */
    snprintf(dir, sizeof dir, "%s/file", base);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_rundir_prepare(dir, 0, moved, sizeof moved), CT_EIO);
    snprintf(want, sizeof want, "%s: cannot create directory: exists and is not a directory", dir);
    expect_msg(want);
    /* ...or above it. */
    snprintf(dir, sizeof dir, "%s/file/run", base);
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_rundir_prepare(dir, 1, moved, sizeof moved), CT_EIO);
    expect_msg(want);
    /* Writing and opening under a regular file. */
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_rundir_write_file(dir, "config.ini", "x"), CT_EIO);
    expect_msg("/file/run/config.ini: cannot create a temporary file beside it: Not a directory");
    FILE *f = NULL;
    CU_ASSERT_EQUAL(ct_rundir_open_log(dir, "metrics.jsonl", 0, 0, &f), CT_EIO);
    expect_msg("/file/run/metrics.jsonl: cannot open for writing: Not a directory");
    CU_ASSERT_PTR_NULL(f);
    CU_ASSERT_FALSE(ct_rundir_has(dir, "config.ini"));

    /* The moved-to buffer too small: refused before anything moves. */
    snprintf(dir, sizeof dir, "%s/run", base);
    CU_ASSERT_EQUAL_FATAL(ct_mkdir_p(dir, 0755), 0);
    put(dir, "run.json", "{}\n");
    char tiny[8];
    ct_error_clear();
    CU_ASSERT_EQUAL(ct_rundir_prepare(dir, 0, tiny, sizeof tiny), CT_ERANGE);
    CU_ASSERT_STRING_EQUAL(tiny, "");
    CU_ASSERT_TRUE(exists(dir, "run.json"));
    CU_ASSERT_EQUAL(count_prefix(dir, "previous-"), 0);
    CU_ASSERT_EQUAL(ct_rundir_prepare(dir, 0, NULL, 0), CT_EINVAL);

    /* A name too long for a path: an error, never a truncated file name. */
    char longname[CT_PATH_MAX + 10];
    memset(longname, 'n', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    CU_ASSERT_EQUAL(ct_rundir_write_file(dir, longname, "x"), CT_ERANGE);
    CU_ASSERT_FALSE(ct_rundir_has(dir, longname));
    ct_test_rmtree(base);
}

/* A run directory, or a directory of seed-* runs in seed order; a seed-*
 * without metrics.jsonl is no run. */
static void test_expand(void)
{
    char base[256], d[512];
    snprintf(base, sizeof base, "%s", ct_test_tmpdir());
    const char *seeds[] = {"seed-10", "seed-2", "seed-0", "seed-b", "seed-a"};
    for (size_t i = 0; i < sizeof seeds / sizeof *seeds; i++) {
        snprintf(d, sizeof d, "%s/%s", base, seeds[i]);
        CU_ASSERT_EQUAL_FATAL(ct_mkdir_p(d, 0755), 0);
        put(d, "metrics.jsonl", "");
    }
    snprintf(d, sizeof d, "%s/seed-3", base);
    CU_ASSERT_EQUAL_FATAL(ct_mkdir_p(d, 0755), 0);
    char **v = NULL;
    int n = 0;
    CU_ASSERT_EQUAL(ct_rundir_expand(base, &v, &n), 0);
    const char *want[] = {"seed-0", "seed-2", "seed-10", "seed-a", "seed-b"};
    CU_ASSERT_EQUAL_FATAL(n, 5);
    for (int i = 0; i < n; i++) {
        snprintf(d, sizeof d, "%s/%s", base, want[i]);
        CU_ASSERT_STRING_EQUAL(v[i], d);
    }
    /* A run directory stands for itself; results append. */
    snprintf(d, sizeof d, "%s/seed-2", base);
    CU_ASSERT_EQUAL(ct_rundir_expand(d, &v, &n), 0);
    CU_ASSERT_EQUAL_FATAL(n, 6);
    CU_ASSERT_STRING_EQUAL(v[5], d);
    snprintf(d, sizeof d, "%s/seed-3", base);
    CU_ASSERT_EQUAL(ct_rundir_expand(d, &v, &n), CT_ENOENT);
    expect_msg("no metrics.jsonl and no seed-* run directories");
    CU_ASSERT_EQUAL(ct_rundir_expand("/nonexistent/runs", &v, &n), CT_ENOENT);
    expect_msg("/nonexistent/runs: no such run directory");
    CU_ASSERT_EQUAL(n, 6);
    for (int i = 0; i < n; i++)
        free(v[i]);
    free(v);
    ct_test_rmtree(base);
}

int main(void)
{
    static const struct ct_test_case cases[] = {
        {"expand", test_expand},
        {"owns", test_owns},
        {"fresh_dir", test_fresh_dir},
        {"move_aside", test_move_aside},
        {"in_place", test_in_place},
        {"errors", test_errors},
        {NULL, NULL},
    };
    return ct_test_run("rundir", cases);
}
